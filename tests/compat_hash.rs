//! Compatibility kept forever for the hash index block (SPEC.md 4.5) and the lone header
//! block (4.2): `tests/data/native/hash/hashed.pdx` was written by the first writer of them
//! (a version 1 file: no slices, no shard identity) and every later paramdex MUST read it with
//! the same tensors and `verify` result. Never change or delete it.
//!
//! It also pins the layout: today's writer, given the same tensors, writes the same bytes (a
//! change to the bytes is a change to SPEC.md and to this file's successor, not to this file).
//!
//! Written by `regenerate` below, which is ignored:
//! `cargo test --test compat_hash -- --ignored regenerate` (it refuses to overwrite the file).

mod support;

use std::path::PathBuf;

use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{DType, Reader, Tensor, Writer, WriterOptions};

/// The SHA-256 of `hashed.pdx`.
const SHA256: &str = "1df3955278cf74950b5e8c3564adca07ab743b42a995ee1daa2d49bfbd7ab6bf";

const N: usize = 500;

fn path() -> PathBuf {
    support::data("native/hash/hashed.pdx")
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

/// Writes the file's tensors to `path` with the layout of versions 1 and 2 (hash block of kind
/// 0, lone header first: the default before version 3), alignment 1 and 1 KiB index blocks, in
/// reverse name order.
fn write(path: &std::path::Path) {
    let opts = WriterOptions {
        sync: false,
        alignment: 1,
        block_size: 1024,
        index_v3: false,
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
fn the_hashed_file_reads_verifies_and_is_what_the_writer_writes() {
    let bytes = std::fs::read(path()).unwrap();
    assert_eq!(
        support::sha256_hex(&bytes),
        SHA256,
        "hashed.pdx changed; compatibility files are frozen"
    );
    let t = Table::open(&bytes, TableReadOptions::default()).unwrap();
    assert!(t.has_hash_index().unwrap());
    assert!(t.data_blocks() > 10);
    let r = Reader::from_bytes(bytes.clone()).unwrap();
    assert_eq!(r.header().format_version, 1);
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
    let rep = r.verify().unwrap();
    assert_eq!(rep.tensors, N as u64);
    assert_eq!(rep.blocks, t.data_blocks() as u64 + 3);

    // The writer of today writes the same bytes.
    let dir = tempfile::tempdir().unwrap();
    let again = dir.path().join("again.pdx");
    write(&again);
    assert!(
        std::fs::read(&again).unwrap() == bytes,
        "the writer no longer writes hashed.pdx byte for byte (a format change: SPEC.md)"
    );
}

#[test]
#[ignore = "writes tests/data/native/hash/hashed.pdx when it is missing"]
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
