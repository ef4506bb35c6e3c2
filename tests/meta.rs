//! Typed metadata: golden bytes of a header with metadata (SPEC.md 5.3), and changing metadata
//! in place by appending a new index (SPEC.md 10.1): records untouched, crash states, recovery.

mod support;

use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{last_complete_len, rewrite_in_place, MetaValue, Metadata};
use paramdex::{Compression, DType, Error, Reader, Writer, WriterOptions};
use prost::Message;

/// The golden file of tests/engine.rs (one float32 tensor "w" = [1, 2]) with metadata
/// {"step": 5}: the header entry gains field 21 and everything after it moves by 13 bytes.
#[test]
fn golden_file_with_metadata_matches_spec() {
    // The record is the same as without metadata (SPEC 3): 72 bytes, data at 64. The header
    // entry's value grows from 21 to 34 bytes by field 21 (SPEC 5.3):
    // MetaEntry{key "step", value MetaValue{int_value (sint64) 5}}.
    let mut meta = vec![0xaa, 0x01, 0x0a];
    meta.extend_from_slice(&[0x0a, 0x04, b's', b't', b'e', b'p']);
    meta.extend_from_slice(&[0x12, 0x02, 0x10, 0x0a]);
    // Index block: the data block is {72, 69}. Footer: metaindex {146, 8}, index {159, 14}.
    let expected =
        support::golden_file(&meta, &[0x48, 0x45], &[0x92, 0x01, 0x08, 0x9f, 0x01, 0x0e]);
    assert_eq!(expected.len(), 226);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("golden.pdx");
    // Without the optional hash index and lone header blocks (SPEC.md 4.2, 4.5), as the golden
    // file of tests/engine.rs.
    let opts = WriterOptions {
        hash_index: false,
        header_alone: false,
        ..WriterOptions::default()
    };
    let mut w = Writer::create_with(&path, opts).unwrap();
    w.add_values("w", &[2], &[1.0f32, 2.0]).unwrap();
    w.insert_metadata("step", 5i64).unwrap();
    w.finish().unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        expected,
        "file bytes differ from SPEC.md"
    );
    let r = Reader::from_bytes(expected).unwrap();
    assert_eq!(r.header().metadata.get("step"), Some(&MetaValue::Int(5)));
}

fn sample(path: &std::path::Path, opts: WriterOptions) -> Vec<u8> {
    let mut w = Writer::create_with(path, opts).unwrap();
    for i in 0..300u32 {
        let v: Vec<f32> = (0..17).map(|j| (i * 17 + j) as f32).collect();
        w.add_values(format!("layer.{i:03}.weight"), &[17], &v)
            .unwrap();
    }
    w.add_values("emb", &[2], &[half::bf16::ONE, half::bf16::MAX])
        .unwrap();
    w.insert_metadata("step", 1i64).unwrap();
    w.finish().unwrap();
    std::fs::read(path).unwrap()
}

fn header_value(bytes: &[u8]) -> Vec<u8> {
    let t = Table::open(bytes, TableReadOptions::default()).unwrap();
    let mut it = t.iter();
    it.seek_to_first().unwrap();
    assert!(it.key().is_empty());
    it.value().to_vec()
}

#[test]
fn rewrite_appends_a_new_index_and_never_touches_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    let before = sample(&path, WriterOptions::default());
    let old = Reader::open(&path).unwrap();
    let records_len = old.header().records_len;
    let old_index = before.len() as u64 - records_len;
    drop(old);

    let mut md = Metadata::new();
    md.insert("step", 2i64).unwrap();
    md.insert("name", "llama").unwrap();
    md.insert("raw", vec![0u8, 1, 255]).unwrap();
    md.insert("nested", vec![MetaValue::List(vec![MetaValue::Float(0.5)])])
        .unwrap();
    let rep = rewrite_in_place(&path, &md, false).unwrap();
    let after = std::fs::read(&path).unwrap();
    assert_eq!(rep.old_len, before.len() as u64);
    assert_eq!(rep.new_len, after.len() as u64);
    assert_eq!(rep.dead_bytes, old_index);
    // Every old byte, records and old index alike, is unchanged: the new index is appended.
    assert_eq!(&after[..before.len()], &before[..]);

    let r = Reader::open(&path).unwrap();
    assert_eq!(r.header().metadata, md);
    assert_eq!(r.header().records_len, records_len);
    assert_eq!(r.len(), 301);
    r.verify().unwrap();
    let t = r.tensor("layer.123.weight").unwrap();
    assert_eq!(t.as_slice::<f32>().unwrap()[0], (123 * 17) as f32);
    // The header is still a TensorFlow BundleHeaderProto with one shard.
    let tf = paramdex::raw::proto::tensorflow::BundleHeaderProto::decode(&header_value(&after)[..])
        .unwrap();
    assert_eq!(tf.num_shards, 1);
    assert_eq!(tf.version.unwrap().producer, 1);

    // A second change: more dead space, the same records, the first change's index dead too.
    let mut md2 = md.clone();
    md2.remove("raw");
    let rep2 = rewrite_in_place(&path, &md2, false).unwrap();
    assert_eq!(rep2.dead_bytes, old_index + rep.index_len);
    let again = std::fs::read(&path).unwrap();
    assert_eq!(&again[..after.len()], &after[..]);
    assert_eq!(Reader::open(&path).unwrap().header().metadata, md2);
}

#[test]
fn rewrite_keeps_snappy_index_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.pdx");
    let opts = WriterOptions {
        compression: Compression::Snappy,
        block_size: 1024,
        ..WriterOptions::default()
    };
    let snappy_blocks = |bytes: &[u8]| {
        let t = Table::open(bytes, TableReadOptions::default()).unwrap();
        (0..t.data_blocks())
            .filter(|&i| {
                let h = t.block_handle(i);
                bytes[(h.offset + h.size) as usize] == 1
            })
            .count()
    };
    let before = sample(&path, opts);
    assert!(snappy_blocks(&before) > 0);
    let md: Metadata = [("k", "v")].into_iter().collect();
    rewrite_in_place(&path, &md, false).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(snappy_blocks(&bytes) > 0, "the new index is snappy too");
    let r = Reader::open(&path).unwrap();
    r.verify().unwrap();
    assert_eq!(r.header().metadata, md);
}

/// Every state a crash can leave during `rewrite_in_place` — any prefix of the appended bytes,
/// or the file extended with zeros — is detected: the file does not open, and
/// `last_complete_len` finds the previous file, byte for byte.
#[test]
fn a_torn_rewrite_is_detected_and_the_previous_file_recovered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pdx");
    let before = sample(&path, WriterOptions::default());
    let md: Metadata = [("step", 9i64)].into_iter().collect();
    rewrite_in_place(&path, &md, false).unwrap();
    let after = std::fs::read(&path).unwrap();
    assert_eq!(last_complete_len(&after), Some(after.len() as u64));
    // Every cut near the end (the footer and the index block), a sample of the rest.
    let tail = after.len().saturating_sub(200).max(before.len() + 1);
    let cuts = (before.len() + 1..tail).step_by(7).chain(tail..after.len());
    for cut in cuts {
        let torn = &after[..cut];
        assert!(
            Reader::from_bytes(torn.to_vec()).is_err(),
            "a torn append of {cut} bytes opened"
        );
        assert_eq!(
            last_complete_len(torn),
            Some(before.len() as u64),
            "cut at {cut}"
        );
    }
    let mut zeros = before.clone();
    zeros.resize(before.len() + 4096, 0);
    assert_eq!(last_complete_len(&zeros), Some(before.len() as u64));
    // Nothing complete at all: a records-only (writer temporary) prefix.
    let records = Reader::from_bytes(before.clone())
        .unwrap()
        .header()
        .records_len as usize;
    assert_eq!(last_complete_len(&before[..records]), None);
}

#[test]
fn rewrite_refuses_bad_input_and_leaves_it_alone() {
    let dir = tempfile::tempdir().unwrap();
    // Not a native file.
    let p = dir.path().join("x.bin");
    std::fs::write(
        &p,
        b"hello, not a checkpoint at all, but long enough for a footer",
    )
    .unwrap();
    let md: Metadata = [("a", 1i64)].into_iter().collect();
    assert!(rewrite_in_place(&p, &md, false).is_err());
    // Corrupt index: error, file unchanged.
    let q = dir.path().join("c.pdx");
    let mut bytes = sample(&q, WriterOptions::default());
    let n = bytes.len();
    bytes[n - 60] ^= 0xff; // inside the index block
    std::fs::write(&q, &bytes).unwrap();
    assert!(rewrite_in_place(&q, &md, false).is_err());
    assert_eq!(std::fs::read(&q).unwrap(), bytes);
    // Metadata over the limits is refused before anything is written.
    let ok = dir.path().join("ok.pdx");
    let good = sample(&ok, WriterOptions::default());
    let long: Metadata = [("k".repeat(2000), 1i64)].into_iter().collect();
    assert!(matches!(
        rewrite_in_place(&ok, &long, false),
        Err(Error::InvalidArgument(_) | Error::LimitExceeded { .. })
    ));
    assert_eq!(std::fs::read(&ok).unwrap(), good);
}

#[test]
fn writer_metadata_limits_and_typed_helpers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.pdx");
    let mut w = Writer::create(&path).unwrap();
    assert!(w.insert_metadata("", 1i64).is_err());
    let mut deep = MetaValue::Int(0);
    for _ in 0..paramdex::raw::meta_limits::MAX_DEPTH {
        deep = MetaValue::List(vec![deep]);
    }
    assert!(w.insert_metadata("deep", deep).is_err());
    w.add_values("c", &[1], &[[1.0f32, -1.0]]).unwrap();
    w.add_values("h", &[2], &[half::f16::from_f32(0.5), half::f16::NEG_ONE])
        .unwrap();
    w.add_values("b", &[3], &[1u8, 2, 3]).unwrap();
    // Wrong element count for the shape.
    assert!(w.add_values("bad", &[4], &[1i32, 2]).is_err());
    w.insert_metadata("f", f64::NAN).unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.tensor("c").unwrap().dtype(), DType::Complex64);
    assert_eq!(r.tensor("b").unwrap().dtype(), DType::UInt8);
    assert_eq!(
        r.tensor("h").unwrap().as_slice::<half::f16>().unwrap()[1],
        half::f16::NEG_ONE
    );
    assert_eq!(
        r.header().metadata.get("f"),
        Some(&MetaValue::Float(f64::NAN))
    );
}
