//! Reading a native file by ranges (issue 15, `paramdex::remote`), request by request, through
//! a local file (`FileRange` counts its reads as requests, as the object store counts GETs):
//! open costs at most two requests and `get` at most two at any tensor count; every tensor
//! is checked against its CRC32C; damaged and truncated objects give errors, never data.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

use std::sync::Arc;

use paramdex::remote::{FileRange, RangeRead, RemoteOptions};
use paramdex::Reader;
use paramdex::{DType, Error, Tensor, Writer, WriterOptions};

fn name(i: usize) -> String {
    format!("model.layers.{i}.self_attn.q_proj.weight")
}

fn data(i: usize) -> Vec<u8> {
    (0..16).map(|k| (i * 31 + k) as u8).collect()
}

fn write(path: &std::path::Path, n: usize) {
    let mut w = Writer::create_with(
        path,
        WriterOptions {
            sync: false,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..n {
        w.add(name(i), Tensor::new(DType::Float32, &[4], &data(i)))
            .unwrap();
    }
    w.finish().unwrap();
}

fn open(path: &std::path::Path) -> (Arc<FileRange>, Reader) {
    let src = Arc::new(FileRange::open(path).unwrap());
    let r = Reader::from_range_read(src.clone(), RemoteOptions::default()).unwrap();
    (src, r)
}

/// At 1,000 and 100,000 tensors: open is 1 request (the tail), a get at most 2 (1 when its
/// index block or pages were read before), and the bytes are the tensor's.
#[test]
fn open_and_get_cost_at_most_two_requests_each_at_any_tensor_count() {
    let dir = tempfile::tempdir().unwrap();
    for n in [1_000usize, 100_000] {
        let path = dir.path().join(format!("m{n}.pdx"));
        write(&path, n);
        let (src, r) = open(&path);
        let opened = src.stats();
        // Version 3 keeps the header's block at the end of the file: the read of the tail
        // holds everything open reads.
        assert_eq!(r.header().format_version, 3);
        assert_eq!(opened.requests, 1, "{n} tensors: open took {opened:?}");
        assert_eq!(r.header().tensor_count, n as u64);
        for i in [0, n / 2, n - 1] {
            let before = src.stats().requests;
            let t = r.get(name(i)).unwrap().unwrap();
            assert_eq!(t.data(), data(i));
            assert_eq!(t.shape(), [4]);
            let used = src.stats().requests - before;
            assert!(used <= 2, "{n} tensors: get {i} took {used} requests");
            // The same tensor again: its block is cached (or in the tail): one request for
            // its record, none when the open's read of the tail holds it (the whole file at
            // 1,000 tensors).
            let before = src.stats().requests;
            r.get(name(i)).unwrap().unwrap();
            let again = src.stats().requests - before;
            if n == 1_000 {
                assert_eq!((used, again), (0, 0), "{n} tensors: all in the tail");
            } else {
                assert!(
                    again <= 1,
                    "{n} tensors: a cached block, then {again} requests"
                );
            }
        }
        let before = src.stats().requests;
        assert!(r.get("absent").unwrap().is_none());
        assert!(src.stats().requests - before <= 1);
    }
}

/// A tensor's bytes damaged in the object: the read says which tensor and where, and returns
/// nothing.
#[test]
fn damaged_data_is_a_checksum_error_never_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    write(&path, 10);
    let offset = {
        let r = paramdex::Reader::open(&path).unwrap();
        r.get(name(3)).unwrap().unwrap().data_offset()
    };
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset as usize] ^= 1;
    std::fs::write(&path, &bytes).unwrap();
    let (_, r) = open(&path);
    match r.get(name(3)) {
        Err(Error::ChecksumMismatch {
            name, offset: o, ..
        }) => {
            assert_eq!(name.as_deref(), Some(name_of(3).as_str()));
            assert_eq!(o, offset);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.get(name(4)).unwrap().unwrap().data(), data(4));
}

fn name_of(i: usize) -> String {
    name(i)
}

/// Objects cut short or not paramdex at all: errors at open, never a panic.
#[test]
fn truncated_and_foreign_objects_are_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    write(&path, 100);
    let whole = std::fs::read(&path).unwrap();
    for cut in [0, 10, 47, 48, whole.len() / 2, whole.len() - 1] {
        let p = dir.path().join(format!("cut{cut}"));
        std::fs::write(&p, &whole[..cut]).unwrap();
        let src = Arc::new(FileRange::open(&p).unwrap());
        assert!(
            Reader::from_range_read(src, RemoteOptions::default()).is_err(),
            "cut at {cut}"
        );
    }
    let p = dir.path().join("foreign");
    std::fs::write(&p, vec![7u8; 4096]).unwrap();
    let src = Arc::new(FileRange::open(&p).unwrap());
    assert!(matches!(
        Reader::from_range_read(src, RemoteOptions::default()),
        Err(Error::UnrecognizedFormat { .. })
    ));
}

/// A small speculative tail (smaller than the index block) costs one more request at open,
/// and reads the same.
#[test]
fn a_tail_smaller_than_the_index_block_costs_one_more_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    write(&path, 100_000);
    let src = Arc::new(FileRange::open(&path).unwrap());
    let r = Reader::from_range_read(
        src.clone(),
        RemoteOptions {
            tail_bytes: 64,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(src.stats().requests <= 3);
    assert_eq!(r.get(name(77_777)).unwrap().unwrap().data(), data(77_777));
}

/// `info` of one tensor reads its own index block, not the whole index (issue 26: it listed
/// the index from the name on, reading every index block after the first).
#[test]
fn info_of_one_tensor_reads_one_index_block() {
    use paramdex::interop::TensorStore;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    write(&path, 100_000);
    let index_len = paramdex::Reader::open(&path).unwrap().index_len();
    let src = Arc::new(FileRange::open(&path).unwrap());
    let r = Reader::from_range_read(
        src.clone(),
        RemoteOptions {
            tail_bytes: 64 << 10,
            ..Default::default()
        },
    )
    .unwrap();
    let before = src.stats();
    let i = r.info(name(3).as_bytes()).unwrap().unwrap();
    assert_eq!(i.shape, [4]);
    let used = src.stats();
    assert!(used.requests - before.requests <= 1, "{used:?}");
    let read = used.bytes - before.bytes;
    assert!(
        // One data block (the writer's default blocks are 64 KiB).
        read < 80 << 10 && read * 20 < index_len,
        "info read {read} bytes of an index of {index_len}"
    );
    assert!(r.info(b"model.absent").unwrap().is_none());
}

/// Lookups go through the hash index block, with its checks, as a mapped file's do (issue
/// 26: remote lookups ignored it): with a page of the hash block damaged, every name is found
/// or refused exactly as from the mapped file, and some are refused.
#[test]
fn remote_lookups_use_the_hash_index_as_the_mapped_file_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    write(&path, 2_000);
    let mut bytes = std::fs::read(&path).unwrap();
    let (hash_start, hash_end) = {
        let t = paramdex::raw::table::Table::open(&bytes, Default::default()).unwrap();
        assert!(t.has_hash_index().unwrap());
        let last = t.block_handle(t.data_blocks() - 1);
        (last.offset + last.size + 5, t.footer().metaindex.offset)
    };
    // A byte in the middle of the hash block's slots.
    let at = ((hash_start + hash_end) / 2) as usize;
    bytes[at] ^= 0x5a;
    std::fs::write(&path, &bytes).unwrap();
    let mapped = paramdex::Reader::open(&path).unwrap();
    let (_, remote) = open(&path);
    let mut refused = 0;
    for i in 0..2_000 {
        let m = mapped.get(name(i)).map(|v| v.map(|v| v.data().to_vec()));
        let r = remote.get(name(i)).map(|t| t.map(|t| t.data().to_vec()));
        match (&m, &r) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{i}"),
            (Err(a), Err(b)) => {
                assert_eq!(
                    std::mem::discriminant(a),
                    std::mem::discriminant(b),
                    "{i}: {a} / {b}"
                );
                refused += 1;
            }
            _ => panic!("{i}: mapped {m:?}, remote {r:?}"),
        }
    }
    assert!(refused > 0, "the damaged hash page refused no lookup");
}

/// `get` by ranges gives the view a mapped reader gives: typed slices work whatever the length
/// of the record header before the data (names of every length mod 8, so the fetched records
/// start at every offset mod 8 before their aligned data), LoD and the record included.
#[test]
fn a_view_read_by_ranges_is_typed_like_a_mapped_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.pdx");
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            sync: false,
            ..Default::default()
        },
    )
    .unwrap();
    let names: Vec<String> = (0..24).map(|i| format!("t{}", "x".repeat(i))).collect();
    for (i, n) in names.iter().enumerate() {
        let values: Vec<f64> = (0..5).map(|k| (i * 10 + k) as f64 / 3.0).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let lod = [vec![0, 2, 5]];
        let t = Tensor::new(DType::Float64, &[5], &bytes);
        w.add(n, if i % 2 == 0 { t.with_lod(&lod) } else { t })
            .unwrap();
    }
    w.finish().unwrap();
    let mapped = paramdex::Reader::open(&path).unwrap();
    let (_, r) = open(&path);
    for n in &names {
        let (a, b) = (mapped.tensor(n).unwrap(), r.get(n).unwrap().unwrap());
        assert_eq!(
            a.as_slice::<f64>().unwrap(),
            b.as_slice::<f64>().unwrap(),
            "{n}"
        );
        assert_eq!(a.lod().unwrap().to_vec(), b.lod().unwrap().to_vec(), "{n}");
        assert_eq!(a.record(), b.record(), "{n}");
        assert_eq!(a.path(), b.path());
        b.check_record().unwrap();
        b.verify_crc().unwrap();
    }
}
