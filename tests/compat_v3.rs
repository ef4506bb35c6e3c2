//! Compatibility kept forever for format version 3 (SPEC.md 4.2, 4.5: the kind 1 hash index
//! block and the header's block at the end of the index): `tests/data/native/v3/hashed.pdx`
//! was written by the first writer of version 3, and every later paramdex MUST read it with the
//! same tensors and `verify` result. Never change or delete it.
//!
//! It also pins the layout: today's writer, given the same tensors, writes the same bytes (a
//! change to the bytes is a change to SPEC.md and to this file's successor, not to this file).
//!
//! Written by `regenerate` below, which is ignored:
//! `cargo test --test compat_v3 -- --ignored regenerate` (it refuses to overwrite the file).

mod support;

use std::path::PathBuf;

use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{DType, Error, Reader, Tensor, Writer, WriterOptions};

/// The SHA-256 of `hashed.pdx`.
const SHA256: &str = "da00b1ffa3b0341dbad9fbe78461d9be90230029decad00dba72001cae1d7e33";

const N: usize = 500;

fn path() -> PathBuf {
    support::data("native/v3/hashed.pdx")
}

fn name(i: usize) -> String {
    format!("encoder.layer.{i}.attention.weight")
}

/// Tensor `i`: int32 of shape `[i % 4]`, holding `i * 10 + k`.
fn data(i: usize) -> (Vec<u64>, Vec<u8>) {
    let n = i % 4;
    let v: Vec<u8> = (0..n)
        .flat_map(|k| ((i * 10 + k) as i32).to_le_bytes())
        .collect();
    (vec![n as u64], v)
}

/// Writes the file's tensors to `path` with the default options but alignment 1 and 1 KiB
/// index blocks, in reverse name order (the tensors of `tests/data/native/hash/hashed.pdx`).
fn write(path: &std::path::Path) {
    let opts = WriterOptions {
        sync: false,
        alignment: 1,
        block_size: 1024,
        ..WriterOptions::default()
    };
    let mut w = Writer::create_with(path, opts).unwrap();
    for i in (0..N).rev() {
        let (shape, d) = data(i);
        w.add(name(i), Tensor::new(DType::Int32, &shape, &d))
            .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn the_v3_file_reads_verifies_and_is_what_the_writer_writes() {
    let bytes = std::fs::read(path()).unwrap();
    assert_eq!(
        support::sha256_hex(&bytes),
        SHA256,
        "hashed.pdx changed; compatibility files are frozen"
    );
    let t = Table::open(&bytes, TableReadOptions::default()).unwrap();
    assert!(t.has_hash_index().unwrap());
    assert!(t.data_blocks() > 10);
    // The header's block is the last data block in the file, the others start the index.
    let r = Reader::from_bytes(bytes.clone()).unwrap();
    assert_eq!(r.header().format_version, 3);
    let records_len = r.header().records_len;
    assert_eq!(t.first_data_offset(), Some(records_len));
    assert!(t.block_handle(0).offset > t.block_handle(t.data_blocks() - 1).offset);
    assert_eq!(r.len(), N as u64);
    for i in 0..N {
        let (shape, d) = data(i);
        let v = r.tensor(name(i)).unwrap();
        assert_eq!(v.shape(), shape.as_slice());
        assert_eq!(v.data(), d.as_slice(), "{}", name(i));
    }
    assert!(r
        .get("encoder.layer.500.attention.weight")
        .unwrap()
        .is_none());
    // The hash lookups and the binary searches agree on every name.
    for i in 0..N {
        let k = name(i);
        let by_hash = t.get(k.as_bytes(), |v, _| v.to_vec()).unwrap();
        let by_search = t.get_by_search(k.as_bytes(), |v, _| v.to_vec()).unwrap();
        assert_eq!(by_hash, by_search, "{k}");
    }
    let rep = r.verify().unwrap();
    assert_eq!(rep.tensors, N as u64);
    assert_eq!(rep.blocks, t.data_blocks() as u64 + 3);
    let names: Vec<Vec<u8>> = r.iter().map(|e| e.unwrap().name().to_vec()).collect();
    assert_eq!(names.len(), N);

    // The writer of today writes the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let again = dir.path().join("again.pdx");
    write(&again);
    assert!(
        std::fs::read(&again).unwrap() == bytes,
        "the writer no longer writes v3/hashed.pdx byte for byte (a format change: SPEC.md)"
    );
}

#[test]
fn damage_to_an_index_page_is_found_by_the_lookups_that_read_it_and_by_verify() {
    let mut bytes = std::fs::read(path()).unwrap();
    let t = Table::open(&bytes, TableReadOptions::default()).unwrap();
    // A byte inside the key of some entry in the middle of the data blocks.
    let h = t.block_handle(t.data_blocks() / 2);
    drop(t);
    bytes[h.offset as usize + 5] ^= 0x01;
    let r = Reader::from_bytes(bytes).unwrap();
    let mut damaged = 0;
    for i in 0..N {
        match r.get(name(i)) {
            Ok(Some(_)) => {}
            Err(Error::ChecksumMismatch { .. }) => damaged += 1,
            other => panic!("{}: {other:?}", name(i)),
        }
    }
    assert!(damaged > 0, "no lookup met the damaged page");
    assert!(
        damaged < N / 4,
        "{damaged} lookups failed for one damaged byte"
    );
    assert!(matches!(r.verify(), Err(Error::ChecksumMismatch { .. })));
}

#[test]
#[ignore = "writes tests/data/native/v3/hashed.pdx when it is missing"]
fn regenerate() {
    let p = path();
    assert!(
        !p.exists(),
        "{} exists: compatibility files are frozen",
        p.display()
    );
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    write(&p);
    println!("{}", support::sha256_hex(&std::fs::read(&p).unwrap()));
}
