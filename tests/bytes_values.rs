//! Bytes values beside tensors (SPEC.md 6.1): written with `Writer::add_bytes` (and by a shard
//! writer), read back with `Reader::get_bytes`, checksummed like tensors; hostile files whose
//! length field lies or that are cut short are errors, never a panic or an over-read.

mod support;

use std::path::Path;

use paramdex::{
    DType, Error, MergeShardsOptions, Reader, ShardedSave, Tensor, VerifyOptions, Writer,
};

fn values() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("empty", Vec::new()),
        ("graph", b"\x0a\x05hello\x12\x00 object graph".to_vec()),
        (
            "long",
            (0..70_000u32).map(|i| (i * 7 % 251) as u8).collect(),
        ),
        ("step", 1234u64.to_le_bytes().to_vec()),
    ]
}

fn write_mixed(path: &Path) {
    let mut w = Writer::create(path).unwrap();
    w.add(
        "w",
        Tensor::new(DType::Float32, &[2], &support::f32_bytes(&[1.0, 2.0])),
    )
    .unwrap();
    for (name, v) in values() {
        w.add_bytes(name, &v).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn round_trip_with_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.pdx");
    write_mixed(&p);
    let r = Reader::open(&p).unwrap();
    for (name, v) in values() {
        assert_eq!(r.get_bytes(name).unwrap().unwrap(), v.as_slice(), "{name}");
        let view = r.tensor(name).unwrap();
        assert_eq!(view.dtype(), DType::Bytes);
        // The view holds the encoding: varint length, 4 checksum bytes, the value.
        assert!(view.data().ends_with(&v));
        view.verify_crc().unwrap();
        view.check_record().unwrap();
    }
    assert!(r.get_bytes("missing").unwrap().is_none());
    assert!(matches!(
        r.get_bytes("w"),
        Err(Error::DTypeMismatch {
            found: DType::Float32,
            ..
        })
    ));
    let report = r.verify_with(VerifyOptions::default()).unwrap();
    assert_eq!(report.tensors, 5);
    // The writer refuses a forged bytes tensor and a bytes dtype outside add_bytes.
    let mut w = Writer::create(dir.path().join("x.pdx")).unwrap();
    let bad = [3u8, 0, 0, 0, 0, 1, 2];
    assert!(w.add("x", Tensor::new(DType::Bytes, &[7], &bad)).is_err());
    assert!(w
        .add("y", Tensor::new(DType::Bytes, &[2], &[1, 2]))
        .is_err());
    // A copy of a reader's view is accepted as it is.
    let view = r.tensor("graph").unwrap();
    w.add("g", Tensor::new(DType::Bytes, view.shape(), view.data()))
        .unwrap();
    w.add_bytes("g", b"dup").unwrap_err();
    w.finish().unwrap();
    let r2 = Reader::open(dir.path().join("x.pdx")).unwrap();
    assert_eq!(
        r2.get_bytes("g").unwrap().unwrap(),
        values()[1].1.as_slice()
    );
}

#[test]
fn sharded_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let s = ShardedSave::new(&prefix, 2).unwrap();
    for k in 0..2u32 {
        let mut w = s.shard(k).unwrap();
        w.add(
            format!("t{k}"),
            Tensor::new(DType::UInt8, &[3], &[k as u8; 3]),
        )
        .unwrap();
        w.add_bytes(
            format!("rank{k}/state"),
            format!("state of rank {k}").as_bytes(),
        )
        .unwrap();
        w.finish().unwrap();
    }
    s.merge(&MergeShardsOptions {
        no_sync: true,
        ..MergeShardsOptions::default()
    })
    .unwrap();
    let r = Reader::open(&prefix).unwrap();
    for k in 0..2 {
        assert_eq!(
            r.get_bytes(format!("rank{k}/state")).unwrap().unwrap(),
            format!("state of rank {k}").as_bytes()
        );
    }
    r.verify_with(VerifyOptions::default()).unwrap();
}

/// Offset of the value's encoding in the file (its data offset).
fn data_offset(p: &Path, name: &str) -> (u64, usize) {
    let r = Reader::open(p).unwrap();
    let v = r.tensor(name).unwrap();
    (v.data_offset(), v.data().len())
}

#[test]
fn a_lying_length_field_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.pdx");
    write_mixed(&p);
    let (off, len) = data_offset(&p, "graph");
    let good = std::fs::read(&p).unwrap();
    // Every single-byte change in the encoding (length, its checksum, the value) is caught.
    for i in 0..len {
        let mut bytes = good.clone();
        bytes[off as usize + i] ^= 0x01;
        let q = dir.path().join("bad.pdx");
        std::fs::write(&q, &bytes).unwrap();
        let r = Reader::open(&q).unwrap();
        let e = r.get_bytes("graph").unwrap_err();
        assert!(
            matches!(e, Error::ChecksumMismatch { .. } | Error::Corrupt { .. }),
            "byte {i}: {e}"
        );
        assert!(r.verify_with(VerifyOptions::default()).is_err());
    }
    // A length that says more than is stored, with its own checksum fixed up, and the entry's
    // checksum fixed too: still refused (the byte count), without reading past the data.
    let mut bytes = good.clone();
    let o = off as usize;
    assert!(bytes[o] < 0x7f);
    bytes[o] += 1;
    let n = u32::from(bytes[o]);
    let crc = mask(crc32c::crc32c(&n.to_le_bytes()));
    bytes[o + 1..o + 5].copy_from_slice(&crc.to_le_bytes());
    let q = dir.path().join("lie.pdx");
    std::fs::write(&q, &bytes).unwrap();
    let r = Reader::open(&q).unwrap();
    let e = r.get_bytes("graph").unwrap_err();
    assert!(
        matches!(e, Error::ChecksumMismatch { .. } | Error::Corrupt { .. }),
        "{e}"
    );
    // Truncated files: errors, never a panic.
    for cut in [good.len() / 2, off as usize + 3, good.len() - 10] {
        let q = dir.path().join("cut.pdx");
        std::fs::write(&q, &good[..cut]).unwrap();
        if let Ok(r) = Reader::open(&q) {
            let _ = r.get_bytes("graph");
        }
    }
}

fn mask(c: u32) -> u32 {
    (c.rotate_right(15)).wrapping_add(0xa282_ead8)
}

#[test]
fn recover_keeps_bytes_values() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.pdx");
    write_mixed(&p);
    let bytes = std::fs::read(&p).unwrap();
    let r = Reader::open(&p).unwrap();
    let records = r.header().records_len as usize;
    drop(r);
    let torn = dir.path().join("torn.pdx");
    std::fs::write(&torn, &bytes[..records]).unwrap();
    let out = dir.path().join("rec.pdx");
    paramdex::recover(&torn, &out, paramdex::WriterOptions::default()).unwrap();
    let r = Reader::open(&out).unwrap();
    for (name, v) in values() {
        assert_eq!(r.get_bytes(name).unwrap().unwrap(), v.as_slice(), "{name}");
    }
}

/// The golden file `tests/data/native/bytes/bytes.pdx` (SPEC.md 6.1): a float32 tensor and two
/// bytes values. Frozen: every later paramdex MUST read it with these values, and today's
/// writer reproduces it byte for byte. Written by `regenerate_bytes_golden` (ignored).
const GOLDEN: &str = "native/bytes/bytes.pdx";

fn write_golden(path: &Path) {
    // The golden file predates version 3's index layout: written with the earlier one.
    let opts = paramdex::WriterOptions {
        sync: false,
        index_v3: false,
        ..paramdex::WriterOptions::default()
    };
    let mut w = Writer::create_with(path, opts).unwrap();
    w.add(
        "w",
        Tensor::new(DType::Float32, &[2], &support::f32_bytes(&[1.0, 2.0])),
    )
    .unwrap();
    w.add_bytes("_CHECKPOINTABLE_OBJECT_GRAPH", b"\x0a\x02\x08\x01graph")
        .unwrap();
    w.add_bytes("empty", b"").unwrap();
    w.finish().unwrap();
}

#[test]
fn golden_file_reads_and_is_reproduced() {
    let golden = support::data(GOLDEN);
    let r = Reader::open(&golden).unwrap();
    assert_eq!(
        *r.get_bytes("_CHECKPOINTABLE_OBJECT_GRAPH")
            .unwrap()
            .unwrap(),
        *b"\x0a\x02\x08\x01graph"
    );
    assert_eq!(*r.get_bytes("empty").unwrap().unwrap(), *b"");
    let v = r.tensor("_CHECKPOINTABLE_OBJECT_GRAPH").unwrap();
    // TensorFlow's scalar string layout: varint 9, mask(crc32c(09 00 00 00)), the value.
    assert_eq!(v.data()[0], 9);
    assert_eq!(&v.data()[5..], b"\x0a\x02\x08\x01graph");
    assert_eq!(
        r.tensor("w").unwrap().data(),
        support::f32_bytes(&[1.0, 2.0])
    );
    r.verify_with(VerifyOptions::default()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bytes.pdx");
    write_golden(&p);
    assert_eq!(std::fs::read(&p).unwrap(), std::fs::read(&golden).unwrap());
}

#[test]
#[ignore = "writes tests/data/native/bytes/bytes.pdx; run by hand"]
fn regenerate_bytes_golden() {
    let golden = support::data(GOLDEN);
    assert!(!golden.exists(), "the golden file is frozen");
    write_golden(&golden);
}
