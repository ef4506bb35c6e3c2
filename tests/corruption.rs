//! Corruption suite: for a reference file of a few KiB, every truncation length and every
//! single-byte flip. Opening, listing, looking up and verifying must each return an error or the
//! correct data (compared with the original), never panic, never hang, and never return wrong
//! data while verification is on.
//!
//! Covered inputs: a native file (uncompressed and snappy index), a TensorFlow checkpoint's
//! `.index` (and its data shard), and a Paddle record stream (the records region of a native
//! file, read by the recovery scan, and Paddle's own combined stream, read by the record walker).

mod support;

use std::collections::BTreeMap;
use std::path::Path;

use paramdex::interop::TensorStore;
use paramdex::raw::record;
use paramdex::raw::recovery::scan;
use paramdex::{
    Compression, DType, Error, ReadOptions, Reader, Tensor, TensorView, Writer, WriterOptions,
};

/// What a tensor must read back as.
#[derive(Clone, Debug, PartialEq)]
struct Expected {
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    data: Vec<u8>,
}

type Model = BTreeMap<Vec<u8>, Expected>;

fn bytes_of(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(73).wrapping_add(seed))
        .collect()
}

/// A reference native file of a few KiB: several data blocks, restart points every 3 keys,
/// shared-prefix names, LoD tensors, a scalar and an empty tensor.
fn reference(compression: Compression) -> (Vec<u8>, Model) {
    let mut model = Model::new();
    let mut add = |name: &str, dtype: DType, shape: &[u64], lod: Vec<Vec<u64>>| {
        let n: u64 = shape.iter().product();
        let data = bytes_of(n as usize * dtype.size(), model.len() as u8);
        model.insert(
            name.as_bytes().to_vec(),
            Expected {
                dtype,
                shape: shape.to_vec(),
                lod,
                data,
            },
        );
    };
    add("embed.weight", DType::Float32, &[4, 6], vec![]);
    add("layers.0.attn.q.weight", DType::BFloat16, &[8, 4], vec![]);
    add("layers.0.attn.k.weight", DType::Float16, &[4, 4], vec![]);
    add("layers.0.mlp.bias", DType::Float64, &[5], vec![]);
    add("layers.1.attn.q.weight", DType::Int8, &[16], vec![]);
    add("layers.1.mlp.bias", DType::Complex64, &[2], vec![]);
    add("layers.10.norm", DType::UInt16, &[3, 3], vec![]);
    add("scale", DType::Float32, &[], vec![]);
    add("empty", DType::Int64, &[0, 5], vec![]);
    add("seq.ids", DType::Int64, &[6, 1], vec![vec![0, 2, 6]]);
    add(
        "seq.nested",
        DType::Int32,
        &[5],
        vec![vec![0, 1, 3], vec![0, 2, 4, 5]],
    );
    add("step", DType::UInt64, &[1], vec![]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ref.pdx");
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            alignment: 8,
            block_size: 160,
            restart_interval: 3,
            compression,
            sync: false,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for (name, e) in &model {
        w.add(
            name,
            Tensor::new(e.dtype, &e.shape, &e.data).with_lod(&e.lod),
        )
        .unwrap();
    }
    w.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    assert!(
        (1500..8192).contains(&bytes.len()),
        "reference is {} bytes",
        bytes.len()
    );
    (bytes, model)
}

/// Checks a view against the model: it must be a tensor of the original file, with the same
/// dtype, shape and data, and its LoD (if readable) must be the original LoD.
fn check_view(t: &TensorView<'_>, model: &Model, what: &str) {
    let shown = t.display_name();
    let e = model
        .get(t.name())
        .unwrap_or_else(|| panic!("{what}: returned a tensor that does not exist: {shown}"));
    assert_eq!(t.dtype(), e.dtype, "{what}: wrong dtype for {shown}");
    assert_eq!(t.shape(), e.shape.as_slice(), "{what}: wrong shape");
    assert_eq!(t.data(), e.data.as_slice(), "{what}: wrong data");
    if let Ok(lod) = t.lod() {
        assert_eq!(lod.to_vec(), e.lod, "{what}: wrong LoD for {shown}");
    }
}

/// Outcome counts, to show the suite exercises both outcomes.
#[derive(Default, Debug)]
struct Tally {
    open_failed: u64,
    verify_failed: u64,
    verified: u64,
}

/// Everything a user can do with a (possibly corrupt) native file, with verification on.
fn exercise_native(bytes: &[u8], model: &Model, what: &str, tally: &mut Tally) {
    let opts = ReadOptions {
        verify_blocks: true,
        verify_tensors: true,
        block_cache_bytes: 1 << 20,
    };
    let r = match Reader::from_bytes_with(bytes.to_vec(), opts) {
        Ok(r) => r,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            tally.open_failed += 1;
            return;
        }
    };
    let mut listed = 0usize;
    for t in r.iter() {
        match t {
            Ok(t) => {
                check_view(&t, model, what);
                listed += 1;
            }
            Err(_) => break,
        }
        assert!(listed <= model.len(), "{what}: more tensors than written");
    }
    for name in model.keys() {
        match r.get(name) {
            Ok(Some(t)) => check_view(&t, model, what),
            Ok(None) => panic!(
                "{what}: tensor {} silently missing",
                String::from_utf8_lossy(name)
            ),
            Err(_) => {}
        }
    }
    for absent in [&b"a"[..], b"layers.0", b"zzz", b"layers.0.attn.q.weightx"] {
        if let Ok(Some(t)) = r.get(absent) {
            panic!(
                "{what}: found a tensor that does not exist: {}",
                t.display_name()
            );
        }
    }
    let verified = r.verify_with(paramdex::VerifyOptions {
        load: None,
        threads: 1,
        progress: None,
    });
    match verified {
        Ok(report) => {
            tally.verified += 1;
            // A file that verifies serves every tensor correctly.
            assert_eq!(report.tensors as usize, model.len(), "{what}");
            assert_eq!(
                listed,
                model.len(),
                "{what}: verify passed, iteration failed"
            );
            for name in model.keys() {
                let t = r.tensor(name).unwrap();
                check_view(&t, model, what);
                t.lod().unwrap();
            }
        }
        Err(_) => tally.verify_failed += 1,
    }
}

fn flips(len: usize) -> impl Iterator<Item = (usize, u8)> {
    (0..len).flat_map(|i| [0x01u8, 0x80, 0xff].map(|m| (i, m)))
}

fn native_suite(compression: Compression) {
    let (original, model) = reference(compression);
    let mut tally = Tally::default();
    exercise_native(&original, &model, "original", &mut tally);
    assert_eq!(tally.verified, 1, "the reference file must verify");
    for n in 0..original.len() {
        exercise_native(
            &original[..n],
            &model,
            &format!("truncated to {n}"),
            &mut tally,
        );
    }
    // Every truncation fails to open: the footer is gone or misplaced.
    assert_eq!(tally.open_failed as usize, original.len(), "{tally:?}");
    let mut bytes = original.clone();
    for (i, mask) in flips(original.len()) {
        bytes[i] ^= mask;
        exercise_native(
            &bytes,
            &model,
            &format!("byte {i} ^ {mask:#04x}"),
            &mut tally,
        );
        bytes[i] ^= mask;
    }
    // Some flips are harmless (padding, unused handle bytes); most must be detected.
    assert!(tally.verify_failed + tally.open_failed > 2 * original.len() as u64);
}

#[test]
fn native_file_every_truncation_and_byte_flip() {
    native_suite(Compression::None);
}

#[test]
fn native_file_with_snappy_index_every_truncation_and_byte_flip() {
    native_suite(Compression::Snappy);
}

/// A file whose records are fine but whose index says something else is caught by `verify`.
#[test]
fn verify_names_the_tensor_and_offset() {
    let (original, model) = reference(Compression::None);
    let r = Reader::from_bytes(original.clone()).unwrap();
    let t = r.tensor("layers.0.mlp.bias").unwrap();
    let off = t.data_offset() as usize;
    let mut bytes = original.clone();
    bytes[off + 3] ^= 0x10;
    let err = Reader::from_bytes(bytes).unwrap().verify().unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{msg}");
    assert!(msg.contains("layers.0.mlp.bias"), "{msg}");
    assert!(msg.contains(&off.to_string()), "{msg}");
    drop(model);
}

// ---------------------------------------------------------------------------------------------
// TensorFlow checkpoint.

fn tf_fixture() -> (Vec<u8>, Vec<u8>) {
    let base = support::data("tf/basic/tf2");
    (
        std::fs::read(base.join("ckpt-1.index")).unwrap(),
        std::fs::read(base.join("ckpt-1.data-00000-of-00001")).unwrap(),
    )
}

type TfModel = BTreeMap<Vec<u8>, (String, Vec<u64>, Vec<u8>)>;

fn tf_load_all(prefix: &Path) -> paramdex::Result<TfModel> {
    let ck = paramdex::interop::tf::TfCheckpoint::open(prefix)?;
    let mut out = TfModel::new();
    for info in ck.list()? {
        let t = ck.load(&info.name)?.expect("listed");
        out.insert(
            info.name.clone(),
            (
                info.kind.name().to_string(),
                info.shape.clone(),
                t.data.raw_bytes().into_owned(),
            ),
        );
    }
    Ok(out)
}

/// Opens a (possibly corrupt) checkpoint and reads everything: each tensor must be an error or
/// the original.
fn exercise_tf(prefix: &Path, model: &TfModel, what: &str) -> bool {
    let Ok(ck) = paramdex::interop::tf::TfCheckpoint::open(prefix) else {
        return false;
    };
    if let Ok(list) = ck.list() {
        for info in &list {
            let e = model
                .get(&info.name)
                .unwrap_or_else(|| panic!("{what}: listed a tensor that does not exist"));
            assert_eq!(&info.shape, &e.1, "{what}: wrong shape");
        }
    }
    let mut all_ok = true;
    for (name, e) in model {
        match ck.load(name) {
            Ok(Some(t)) => {
                assert_eq!(t.info.kind.name(), e.0, "{what}: wrong dtype");
                assert_eq!(t.info.shape, e.1, "{what}: wrong shape");
                assert_eq!(
                    t.data.raw_bytes().as_ref(),
                    e.2.as_slice(),
                    "{what}: wrong data"
                );
            }
            Ok(None) => panic!(
                "{what}: tensor {} silently missing",
                String::from_utf8_lossy(name)
            ),
            Err(_) => all_ok = false,
        }
    }
    let _ = ck.verify(1);
    all_ok
}

#[test]
fn tensorflow_index_and_data_every_truncation_and_byte_flip() {
    let (index, data) = tf_fixture();
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let index_path = paramdex::interop::tf::index_path(&prefix);
    let data_path = paramdex::interop::tf::data_path(&prefix, 0, 1);
    std::fs::write(&index_path, &index).unwrap();
    std::fs::write(&data_path, &data).unwrap();
    let model = tf_load_all(&prefix).unwrap();
    assert!(model.len() >= 3, "fixture has {} tensors", model.len());
    assert!(exercise_tf(&prefix, &model, "original"));

    for n in 0..index.len() {
        std::fs::write(&index_path, &index[..n]).unwrap();
        assert!(
            paramdex::interop::tf::TfCheckpoint::open(&prefix).is_err(),
            "index truncated to {n} opened"
        );
    }
    let mut bytes = index.clone();
    let mut detected = 0;
    for (i, mask) in flips(index.len()) {
        bytes[i] ^= mask;
        std::fs::write(&index_path, &bytes).unwrap();
        if !exercise_tf(&prefix, &model, &format!("index byte {i} ^ {mask:#04x}")) {
            detected += 1;
        }
        bytes[i] ^= mask;
    }
    assert!(
        detected > index.len(),
        "only {detected} index flips detected"
    );
    std::fs::write(&index_path, &index).unwrap();

    // The data shard: every flip inside a tensor's bytes is caught by its CRC32C.
    for n in 0..data.len() {
        std::fs::write(&data_path, &data[..n]).unwrap();
        exercise_tf(&prefix, &model, &format!("data truncated to {n}"));
    }
    let mut bytes = data.clone();
    for (i, mask) in flips(data.len()).step_by(2) {
        bytes[i] ^= mask;
        std::fs::write(&data_path, &bytes).unwrap();
        exercise_tf(&prefix, &model, &format!("data byte {i} ^ {mask:#04x}"));
        bytes[i] ^= mask;
    }
}

// ---------------------------------------------------------------------------------------------
// Paddle record streams.

/// The recovery scan over a (possibly corrupt) stream of paramdex records returns only records
/// that are exactly the originals (those records carry names and checksums).
fn exercise_scan(stream: &[u8], originals: &[(u64, Vec<u8>, Expected)], what: &str) -> usize {
    let (found, _) = scan(stream);
    for (k, r) in found.iter().enumerate() {
        let (offset, name, e) = &originals[k];
        assert_eq!(r.offset, *offset, "{what}: record {k} moved");
        assert_eq!(r.header.name, Some(name.as_slice()), "{what}: wrong name");
        assert_eq!(r.header.dtype, e.dtype, "{what}: wrong dtype");
        assert_eq!(r.header.dims.as_slice(), e.shape.as_slice(), "{what}");
        assert_eq!(r.header.lod.to_vec(), e.lod, "{what}: wrong LoD");
        assert_eq!(r.data, e.data.as_slice(), "{what}: wrong data");
    }
    found.len()
}

#[test]
fn paramdex_record_stream_every_truncation_and_byte_flip() {
    let (file, model) = reference(Compression::None);
    let r = Reader::from_bytes(file).unwrap();
    let stream = r.records().expect("mapped").to_vec();
    let mut originals: Vec<(u64, Vec<u8>, Expected)> = r
        .iter()
        .map(|t| {
            let t = t.unwrap();
            let start = t.data_offset() + t.data().len() as u64 - t.record().len() as u64;
            (start, t.name().to_vec(), model[t.name()].clone())
        })
        .collect();
    originals.sort_by_key(|o| o.0);
    assert_eq!(exercise_scan(&stream, &originals, "original"), model.len());
    for n in 0..stream.len() {
        let found = exercise_scan(&stream[..n], &originals, &format!("truncated to {n}"));
        let complete = originals
            .iter()
            .filter(|(o, name, e)| {
                let hl = r.tensor(name).unwrap().record().len() as u64;
                let _ = e;
                o + hl <= n as u64
            })
            .count();
        assert_eq!(found, complete, "truncated to {n}");
    }
    let mut bytes = stream.clone();
    for (i, mask) in flips(stream.len()) {
        bytes[i] ^= mask;
        exercise_scan(&bytes, &originals, &format!("byte {i} ^ {mask:#04x}"));
        bytes[i] ^= mask;
    }
}

/// Paddle's own combined stream (no names, no checksums): the walker must never panic, never
/// read outside the buffer, and every record it returns must lie inside it.
#[test]
fn paddle_combined_stream_every_truncation_and_byte_flip() {
    let path = support::data("paddle/inference/legacy/model.pdiparams");
    let stream = std::fs::read(path).unwrap();
    let walk_all = |b: &[u8]| -> (usize, bool) {
        let mut n = 0;
        let mut end = 0u64;
        for r in record::walk(b, 0) {
            match r {
                Ok((off, h, d)) => {
                    assert_eq!(off, end);
                    end = off + h.record_len();
                    assert!(end <= b.len() as u64);
                    assert_eq!(d.len() as u64, h.data_len);
                    n += 1;
                }
                Err(_) => return (n, false),
            }
        }
        (n, true)
    };
    let (records, ok) = walk_all(&stream);
    assert!(ok && records >= 2);
    for n in 0..stream.len() {
        let (got, _) = walk_all(&stream[..n]);
        assert!(got <= records);
    }
    let mut bytes = stream.clone();
    for (i, mask) in flips(stream.len()) {
        bytes[i] ^= mask;
        walk_all(&bytes);
        bytes[i] ^= mask;
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile structure with valid checksums: records that overlap or hide between entries.

/// A native file assembled from a records region and index entries (key, value bytes), with
/// the header of `base` adjusted to them. Every checksum is valid.
fn assemble(base: &Reader, records: &[u8], entries: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    use paramdex::raw::table::{TableBuilder, TableOptions};
    let mut header = base.header().clone();
    header.records_len = records.len() as u64;
    header.tensor_count = entries.len() as u64;
    let mut table = Vec::new();
    let mut b =
        TableBuilder::new(&mut table, records.len() as u64, TableOptions::default()).unwrap();
    b.add(b"", &header.encode()).unwrap();
    for (k, v) in entries {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap();
    let mut file = records.to_vec();
    file.extend_from_slice(&table);
    file
}

/// The index entries (key, raw value) of a native file, header excluded.
fn entries_of(file: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let t = paramdex::raw::table::Table::open(file, Default::default()).unwrap();
    let mut it = t.iter();
    let mut out = Vec::new();
    while it.next().unwrap() {
        if !it.key().is_empty() {
            out.push((it.key().to_vec(), it.value().to_vec()));
        }
    }
    out
}

fn write_file(tensors: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.pdx");
    let opts = WriterOptions {
        alignment: 1,
        ..Default::default()
    };
    let mut w = Writer::create_with(&path, opts).unwrap();
    for (name, data) in tensors {
        w.add(name, Tensor::new(DType::UInt8, &[data.len() as u64], data))
            .unwrap();
    }
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
fn a_record_hidden_between_entries_fails_verify() {
    let file = write_file(&[("a", vec![1; 10]), ("b", vec![2; 10]), ("c", vec![3; 10])]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let records = r.records().expect("mapped").to_vec();
    // The index lists a and c only: b's record hides between them.
    let entries: Vec<_> = entries_of(&file)
        .into_iter()
        .filter(|(k, _)| k != b"b")
        .collect();
    let forged = assemble(&r, &records, &entries);
    let r = Reader::from_bytes(forged).unwrap();
    assert_eq!(r.tensor("a").unwrap().data(), &[1; 10]);
    assert_eq!(r.tensor("c").unwrap().data(), &[3; 10]);
    let err = r.verify().unwrap_err();
    assert!(err.to_string().contains("has no index entry"), "{err}");
}

/// verify pairs each record with its index entry by walking the index alongside the records
/// when they are in name order, and by looking the name up otherwise: both find the same faults.
#[test]
fn records_in_any_order_tile_and_a_second_copy_of_a_record_fails_verify() {
    for order in [["a", "b", "c"], ["c", "a", "b"], ["b", "c", "a"]] {
        let tensors: Vec<(&str, Vec<u8>)> =
            order.iter().map(|&n| (n, n.as_bytes().repeat(5))).collect();
        let r = Reader::from_bytes(write_file(&tensors)).unwrap();
        assert_eq!(r.verify().unwrap().tensors, 3, "{order:?}");
    }
    // Records a, b, b: the index points b at the second copy; the first is one it does not list.
    let file = write_file(&[("a", vec![1; 10]), ("b", vec![2; 10])]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let b = r.tensor("b").unwrap();
    let b_record = b.record().to_vec();
    let mut records = r.records().expect("mapped").to_vec();
    let second = records.len() as u64;
    records.extend_from_slice(&b_record);
    let mut entries = entries_of(&file);
    let mut e = paramdex::raw::entry::IndexEntry::decode(&entries[1].1, 0, 254).unwrap();
    e.offset = second + u64::from(e.record_header_len);
    let mut value = Vec::new();
    e.encode(&mut value);
    entries[1].1 = value;
    let r = Reader::from_bytes(assemble(&r, &records, &entries)).unwrap();
    assert_eq!(r.tensor("b").unwrap().data(), &[2; 10]);
    let err = r.verify().unwrap_err();
    assert!(
        err.to_string()
            .contains("is not the one its index entry points at"),
        "{err}"
    );
}

#[test]
fn overlapping_records_fail_verify() {
    // Tensor a's data is itself a complete record of tensor b; the forged index points b into
    // a's data. Both entries are valid on their own, every checksum matches.
    let b_data = vec![7u8; 6];
    let mut b_record = Vec::new();
    let spec = record::RecordSpec {
        dtype: DType::UInt8,
        dims: &[6],
        lod: &[],
        name: Some(b"b"),
        data_crc: Some(paramdex::raw::format::mask_crc(
            paramdex::raw::format::crc32c(&b_data),
        )),
        full_shape: None,
        stored_len: None,
    };
    let layout = record::encode_header(&spec, 0, 1, &mut b_record).unwrap();
    b_record.extend_from_slice(&b_data);
    let file = write_file(&[("a", b_record.clone()), ("b", b_data.clone())]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let a = r.tensor("a").unwrap();
    let inner_record = a.data_offset();
    let a_end = inner_record + a.data().len() as u64;
    let records = r.records().expect("mapped")[..a_end as usize].to_vec();
    let mut entries = entries_of(&file);
    // Re-point b at the record inside a's data.
    let mut e = paramdex::raw::entry::IndexEntry::decode(&entries[1].1, 0, 254).unwrap();
    e.offset = inner_record + layout.header_len as u64;
    e.record_header_len = layout.header_len as u32;
    let mut value = Vec::new();
    e.encode(&mut value);
    entries[1].1 = value;
    let forged = assemble(&r, &records, &entries);
    let r = Reader::from_bytes(forged).unwrap();
    // Each tensor reads back and checks out on its own...
    assert_eq!(r.tensor("b").unwrap().data(), b_data.as_slice());
    r.tensor("b").unwrap().check_record().unwrap();
    r.tensor("a").unwrap().check_record().unwrap();
    // ...but the records overlap, which verify reports.
    let err = r.verify().unwrap_err();
    assert!(
        err.to_string().contains("records region holds 1 records"),
        "{err}"
    );
}

/// Every record of a native file is named (SPEC.md 2): a record whose header leaves the name
/// out, behind an entry that otherwise matches it, fails verify (which counts on the name to
/// know each record is its own entry's).
#[test]
fn a_record_without_a_name_fails_verify() {
    let data = vec![5u8; 8];
    let file = write_file(&[("a", data.clone())]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let mut records = Vec::new();
    let spec = record::RecordSpec {
        dtype: DType::UInt8,
        dims: &[8],
        lod: &[],
        name: None,
        data_crc: Some(paramdex::raw::format::mask_crc(
            paramdex::raw::format::crc32c(&data),
        )),
        full_shape: None,
        stored_len: None,
    };
    let layout = record::encode_header(&spec, 0, 1, &mut records).unwrap();
    records.extend_from_slice(&data);
    let mut entries = entries_of(&file);
    let mut e = paramdex::raw::entry::IndexEntry::decode(&entries[0].1, 0, 254).unwrap();
    e.offset = layout.header_len as u64;
    e.record_header_len = layout.header_len as u32;
    let mut value = Vec::new();
    e.encode(&mut value);
    entries[0].1 = value;
    let r = Reader::from_bytes(assemble(&r, &records, &entries)).unwrap();
    assert_eq!(r.tensor("a").unwrap().data(), data.as_slice());
    let err = r.verify().unwrap_err();
    assert!(matches!(err, paramdex::Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("record has no name"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// The regression catalogue: hostile files with valid checksums, one per class of parser bug that
// GGUF and safetensors parsers have had (CVE numbers from their advisories). Each must be an
// error naming the problem, found without allocating by the hostile number.

/// A one-tensor file whose index entry for "t" is `e` (the record is a real 8-byte tensor).
fn with_entry(e: &paramdex::raw::entry::IndexEntry) -> Vec<u8> {
    let file = write_file(&[("t", vec![9; 8])]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let mut value = Vec::new();
    e.encode(&mut value);
    assemble(&r, r.records().expect("mapped"), &[(b"t".to_vec(), value)])
}

fn real_entry() -> paramdex::raw::entry::IndexEntry {
    let file = write_file(&[("t", vec![9; 8])]);
    let entries = entries_of(&file);
    paramdex::raw::entry::IndexEntry::decode(&entries[0].1, 0, 254).unwrap()
}

fn get_err(file: Vec<u8>) -> String {
    let r = Reader::from_bytes(file).unwrap();
    let err = r.get("t").unwrap_err().to_string();
    assert!(err.contains("offset"), "{err}");
    err
}

#[test]
fn catalogue_dims_product_overflow() {
    // CVE-2024-21802 (info->ne), CVE-2026-33298 (ggml_nbytes): dims whose product overflows,
    // and dims whose byte count wraps to the small stored size.
    let mut e = real_entry();
    e.shape = [1u64 << 32, 1 << 32, 2].into_iter().collect();
    assert!(get_err(with_entry(&e)).contains("overflows"));
    // 2^62 float32 elements = 2^64 bytes, which wraps to 0; with size 0 it must still fail.
    let mut e = real_entry();
    e.shape = [1u64 << 31, 1 << 31].into_iter().collect();
    e.tf_dtype = 1; // DT_FLOAT
    e.size = 0;
    assert!(get_err(with_entry(&e)).contains("overflows"));
}

#[test]
fn catalogue_rank_out_of_range() {
    // gguf-tools#25 (n_dims > 8 writes out of bounds): a rank above 254 is refused at decode.
    let mut e = real_entry();
    e.shape = std::iter::repeat_n(1u64, 255).collect();
    let err = get_err(with_entry(&e));
    assert!(err.contains("rank"), "{err}");
}

#[test]
fn catalogue_data_range_overflow_and_out_of_file() {
    // CVE-2025-53630 / CVE-2026-27940 (summed sizes overflow), Bleeding Llama (OOB read): an
    // offset near u64::MAX, and a range past the records region.
    let mut e = real_entry();
    e.offset = u64::MAX - 3; // int64 on disk: negative
    assert!(get_err(with_entry(&e)).contains("negative offset"));
    let mut e = real_entry();
    e.offset = i64::MAX as u64 - 3;
    assert!(get_err(with_entry(&e)).contains("outside the records region"));
    let mut e = real_entry();
    e.offset += 1;
    assert!(get_err(with_entry(&e)).contains("outside the records region"));
    let mut e = real_entry();
    e.record_header_len = u32::MAX;
    assert!(get_err(with_entry(&e)).contains("outside the records region"));
}

#[test]
fn catalogue_absurd_tensor_count() {
    // CVE-2024-21836 (n_tensors): a header claiming u64::MAX tensors opens in O(1), allocates
    // nothing by it, and verify reports the mismatch.
    let file = write_file(&[("t", vec![9; 8])]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let mut header = r.header().clone();
    header.tensor_count = u64::MAX;
    use paramdex::raw::table::{TableBuilder, TableOptions};
    let mut table = Vec::new();
    let mut b = TableBuilder::new(
        &mut table,
        r.records().expect("mapped").len() as u64,
        TableOptions::default(),
    )
    .unwrap();
    b.add(b"", &header.encode()).unwrap();
    for (k, v) in entries_of(&file) {
        b.add(&k, &v).unwrap();
    }
    b.finish().unwrap();
    let mut forged = r.records().expect("mapped").to_vec();
    forged.extend_from_slice(&table);
    let r = Reader::from_bytes(forged).unwrap();
    assert_eq!(r.len(), u64::MAX);
    assert_eq!(r.tensor("t").unwrap().data(), &[9; 8]);
    assert_eq!(r.iter().count(), 1);
    let err = r.verify().unwrap_err().to_string();
    assert!(err.contains("header says"), "{err}");
}

#[test]
fn catalogue_huge_lengths_in_records() {
    // CVE-2024-21825 / CVE-2024-23496 (string and array lengths), gguf-py 2^63 array length:
    // a record claiming 2^63 LoD levels, a 2^63-byte LoD level, a 2 GiB desc, a 2^63-byte name.
    let base = {
        let mut v = vec![0u8; 12]; // outer version, lod_level 0
        v.extend_from_slice(&[0; 4]); // inner version
        v
    };
    let mut lod_levels = vec![0u8; 4];
    lod_levels.extend_from_slice(&(1u64 << 63).to_le_bytes());
    let e = record::decode_header(&lod_levels, 0).unwrap_err();
    assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
    let mut lod_len = vec![0u8; 4];
    lod_len.extend_from_slice(&1u64.to_le_bytes());
    lod_len.extend_from_slice(&(1u64 << 63).to_le_bytes());
    let e = record::decode_header(&lod_len, 0).unwrap_err();
    assert!(e.to_string().contains("runs past the end"), "{e}");
    let mut desc = base.clone();
    desc.extend_from_slice(&i32::MAX.to_le_bytes());
    let e = record::decode_header(&desc, 0).unwrap_err();
    assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
    let mut name = base.clone();
    let body = [
        0x08, 0x05, 0xc2, 0x3e, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
    ];
    name.extend_from_slice(&(body.len() as u32).to_le_bytes());
    name.extend_from_slice(&body);
    let e = record::decode_header(&name, 0).unwrap_err();
    assert!(e.to_string().contains("runs past the end"), "{e}");
}

#[test]
fn catalogue_duplicate_and_unordered_keys() {
    // Duplicate keys (GGUF hardening PR #19856, safetensors#401): a block whose keys repeat or go
    // backwards is refused even when its checksum is valid.
    use paramdex::raw::table::{BlockBuilder, Table};
    let file = write_file(&[("a", vec![1; 4]), ("b", vec![2; 4])]);
    let entries = entries_of(&file);
    for keys in [["a", "a"], ["b", "a"]] {
        // Build the table by hand: the builder refuses unordered keys, so write a data block
        // whose keys are out of order with BlockBuilder, which does not check.
        let mut blk = BlockBuilder::new(16);
        let r = Reader::from_bytes(file.clone()).unwrap();
        blk.add(b"", &r.header().encode());
        blk.add(keys[0].as_bytes(), &entries[0].1);
        blk.add(keys[1].as_bytes(), &entries[1].1);
        let contents = blk.finish().to_vec();
        let forged = raw_table(r.records().expect("mapped"), &contents, b"b");
        let t = Table::open(&forged, Default::default()).unwrap();
        let mut it = t.iter();
        let mut err = None;
        loop {
            match it.next() {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        let err = err.expect("unordered keys must be refused").to_string();
        assert!(err.contains("not strictly increasing"), "{err}");
        let r = Reader::from_bytes(forged).unwrap();
        assert!(r.verify().is_err());
    }
}

/// A table with one raw data block (contents as given) after `records`, its index separator
/// `sep`: trailers and footer computed here, so every checksum is valid.
fn raw_table(records: &[u8], contents: &[u8], sep: &[u8]) -> Vec<u8> {
    use paramdex::raw::format::{crc32c, mask_crc};
    use paramdex::raw::table::{BlockBuilder, BlockHandle, Footer};
    let mut file = records.to_vec();
    let trailer = |file: &mut Vec<u8>, block: &[u8]| {
        let mut covered = block.to_vec();
        covered.push(0);
        file.push(0);
        file.extend_from_slice(&mask_crc(crc32c(&covered)).to_le_bytes());
    };
    let data = BlockHandle {
        offset: file.len() as u64,
        size: contents.len() as u64,
    };
    file.extend_from_slice(contents);
    trailer(&mut file, contents);
    let empty = BlockBuilder::new(16).finish().to_vec();
    let meta = BlockHandle {
        offset: file.len() as u64,
        size: empty.len() as u64,
    };
    file.extend_from_slice(&empty);
    trailer(&mut file, &empty);
    let mut ib = BlockBuilder::new(1);
    let mut h = Vec::new();
    data.encode_to(&mut h);
    ib.add(sep, &h);
    let index_block = ib.finish().to_vec();
    let index = BlockHandle {
        offset: file.len() as u64,
        size: index_block.len() as u64,
    };
    file.extend_from_slice(&index_block);
    trailer(&mut file, &index_block);
    file.extend_from_slice(
        &Footer {
            metaindex: meta,
            index,
        }
        .encode(),
    );
    file
}

#[test]
fn catalogue_writer_duplicate_names_are_errors() {
    // safetensors' serialize panics (index out of bounds) on duplicate names: here it is an
    // error naming the tensor, in order and out of order, and the writer stays usable.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dup.pdx");
    let mut w = Writer::create(&path).unwrap();
    let t = Tensor::new(DType::UInt8, &[1], &[1]);
    w.add("b", t).unwrap();
    let err = w.add("b", t).unwrap_err();
    assert!(
        matches!(&err, Error::DuplicateName { name } if name == "b"),
        "{err}"
    );
    w.add("a", t).unwrap();
    assert!(matches!(w.add("a", t), Err(Error::DuplicateName { .. })));
    assert!(matches!(w.add("b", t), Err(Error::DuplicateName { .. })));
    assert!(w.begin("a", DType::UInt8, &[1], &[]).is_err());
    w.add("c", t).unwrap();
    assert_eq!(w.finish().unwrap().tensors, 3);
    assert_eq!(Reader::open(&path).unwrap().verify().unwrap().tensors, 3);
}

#[test]
fn catalogue_name_longer_than_the_limit() {
    // A key of 65,537 bytes (SPEC.md 8.1: names are at most 65,536 bytes), with valid checksums:
    // refused when read, whatever the entry says.
    let file = write_file(&[("t", vec![9; 8])]);
    let r = Reader::from_bytes(file.clone()).unwrap();
    let long = vec![b'n'; 65_537];
    let value = entries_of(&file).remove(0).1;
    let forged = assemble(&r, r.records().expect("mapped"), &[(long.clone(), value)]);
    let r = Reader::from_bytes(forged).unwrap();
    let err = r.get(&long).unwrap_err();
    assert!(
        matches!(
            err,
            Error::LimitExceeded {
                what: "tensor name length",
                value: 65_537,
                ..
            }
        ),
        "{err}"
    );
    assert!(r.iter().next().unwrap().is_err());
    assert!(r.verify().is_err());
}
