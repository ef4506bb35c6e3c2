//! TensorFlow checkpoints, both ways, without Python: every fixture in tests/data/tf (written by
//! real TensorFlow, see tests/interop/gen_tf_fixtures.py) read byte-identically; corruption,
//! truncation and hostile index entries rejected with errors that say where; export-tf and
//! `convert --to tf` produce what TensorFlow's format requires, byte for byte.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use paramdex::interop::tf::{self, TfCheckpoint};
use paramdex::interop::{
    export, open_any, ExportOptions, Format, Kind, OutputFormat, TensorData, TensorStore,
};
use paramdex::raw::format::{crc32c, mask_crc};
use paramdex::raw::proto::tensorflow::{
    tensor_shape_proto::Dim, tensor_slice_proto::extent::HasLength, tensor_slice_proto::Extent,
    BundleEntryProto, BundleHeaderProto, TensorShapeProto, TensorSliceProto, VersionDef,
};
use paramdex::raw::slices::slice_key::{self, Extent as KeyExtent};
use paramdex::raw::table::{TableBuilder, TableOptions};
use paramdex::{DType, Error, Reader, Tensor, Writer};
use prost::Message;
use serde_json::Value;
use support::{f32_bytes, root, sha256_hex, unhex};

/// One expected tensor from a manifest.
#[derive(Debug, Clone)]
struct Want {
    name: Vec<u8>,
    dtype: String,
    shape: Vec<u64>,
    nbytes: u64,
    sha256: String,
    elements: Option<Vec<Vec<u8>>>,
}

/// Every (set dir, checkpoint prefix, expected tensors in name order) of every manifest.
fn fixtures() -> Vec<(PathBuf, String, Vec<Want>)> {
    let base = root().join("tests/data/tf");
    let mut sets: Vec<PathBuf> = fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    sets.sort();
    let mut out = Vec::new();
    for set in sets {
        let m: Value =
            serde_json::from_slice(&fs::read(set.join("manifest.json")).unwrap()).unwrap();
        for ck in m["checkpoints"].as_array().unwrap() {
            let prefix = ck["prefix"].as_str().unwrap().to_string();
            let mut wants: Vec<Want> = m["tensors"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["checkpoint"].as_str() == Some(&prefix))
                .map(|t| Want {
                    name: match t.get("name_hex") {
                        Some(h) => unhex(h.as_str().unwrap()),
                        None => t["name"].as_str().unwrap().as_bytes().to_vec(),
                    },
                    dtype: t["dtype"].as_str().unwrap().to_string(),
                    shape: t["shape"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|d| d.as_u64().unwrap())
                        .collect(),
                    nbytes: t["nbytes"].as_u64().unwrap(),
                    sha256: t["sha256"].as_str().unwrap().to_string(),
                    elements: t.get("elements_hex").map(|e| {
                        e.as_array()
                            .unwrap()
                            .iter()
                            .map(|x| unhex(x.as_str().unwrap()))
                            .collect()
                    }),
                })
                // A scalar string is a bytes value (SPEC.md 6.1): its value is its one element.
                .map(|mut w: Want| {
                    if w.dtype == "string" && w.shape.is_empty() {
                        w.dtype = "bytes".into();
                        w.elements = None;
                    }
                    w
                })
                .collect();
            wants.sort_by(|a, b| a.name.cmp(&b.name));
            assert!(
                !wants.is_empty(),
                "{} {prefix}: no tensors in the manifest",
                set.display()
            );
            out.push((set.clone(), prefix, wants));
        }
    }
    assert!(
        out.len() >= 10,
        "expected the basic, strings, dtypes, sharded and partitioned sets"
    );
    out
}

/// Checks that `store` holds exactly `wants`, byte for byte.
fn check_store(store: &dyn TensorStore, wants: &[Want], what: &str) {
    let list = store.list().unwrap_or_else(|e| panic!("{what}: list: {e}"));
    let names: Vec<&[u8]> = list.iter().map(|t| &t.name[..]).collect();
    let want_names: Vec<&[u8]> = wants.iter().map(|w| &w.name[..]).collect();
    assert_eq!(names, want_names, "{what}: names");
    for (info, w) in list.iter().zip(wants) {
        let n = String::from_utf8_lossy(&w.name);
        assert_eq!(info.kind.name(), w.dtype, "{what} {n}: dtype");
        assert_eq!(info.shape, w.shape, "{what} {n}: shape");
        assert_eq!(info.nbytes, w.nbytes, "{what} {n}: nbytes");
        let t = store
            .load(&w.name)
            .unwrap()
            .unwrap_or_else(|| panic!("{what} {n}: not found"));
        assert_eq!(t.info.shape, w.shape, "{what} {n}: loaded shape");
        let raw = t.data.raw_bytes();
        assert_eq!(raw.len() as u64, w.nbytes, "{what} {n}: loaded bytes");
        assert_eq!(sha256_hex(&raw), w.sha256, "{what} {n}: sha256");
        match (&t.data, &w.elements) {
            (TensorData::Strings(s), Some(e)) => assert_eq!(s, e, "{what} {n}: elements"),
            (TensorData::Bytes(_), None) => {}
            _ => panic!("{what} {n}: string/numeric mismatch"),
        }
    }
}

#[test]
fn every_fixture_tensor_is_byte_identical() {
    let mut tensors = 0;
    for (set, prefix, wants) in fixtures() {
        let p = set.join(&prefix);
        let what = format!("{}", p.display());
        let store = open_any(&p).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(store.format(), Format::TensorFlow);
        check_store(store.as_ref(), &wants, &what);
        let v = store
            .verify(2)
            .unwrap_or_else(|e| panic!("{what}: verify: {e}"));
        assert_eq!(v.tensors, wants.len() as u64, "{what}: verified tensors");
        // The same checkpoint named by its .index and by one of its data files.
        let by_index = open_any(tf::index_path(&p)).unwrap();
        assert_eq!(by_index.list().unwrap(), store.list().unwrap());
        let by_data = open_any(tf::data_path(
            &p,
            0,
            TfCheckpoint::open(&p).unwrap().num_shards(),
        ))
        .unwrap();
        assert_eq!(by_data.list().unwrap(), store.list().unwrap());
        tensors += wants.len();
    }
    assert!(tensors > 300, "only {tensors} fixture tensors");
}

#[test]
fn slice_keys_never_show_up_and_are_not_loadable() {
    let p = root().join("tests/data/tf/partitioned/v1/model.ckpt");
    let ck = TfCheckpoint::open(&p).unwrap();
    for t in ck.list().unwrap() {
        assert_ne!(t.name.first(), Some(&0));
    }
    let key = slice_key::encode(
        b"emb",
        &[
            KeyExtent {
                start: 0,
                length: 67,
            },
            KeyExtent {
                start: 0,
                length: 3,
            },
        ],
    );
    assert!(ck.load(&key).unwrap().is_none());
    // ... but the slice entry is there: corrupting the full entry's neighbour shows it is used.
    let t = ck.load(b"emb").unwrap().unwrap();
    assert_eq!(t.info.shape, vec![200, 3]);
}

/// A tensor whose name starts with a NUL byte (TensorFlow writes and restores it) is a tensor,
/// as in TensorFlow's reader: only the slice keys a partitioned tensor lists are hidden.
#[test]
fn a_name_starting_with_nul_is_a_tensor_unless_a_partitioned_tensor_lists_it() {
    let ck = TfCheckpoint::open(root().join("tests/data/tf_nul/ckpt")).unwrap();
    let names: Vec<Vec<u8>> = ck.list().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, [b"\x00lead".to_vec(), b"normal".to_vec()]);
    let t = ck.load(b"\x00lead").unwrap().unwrap();
    assert_eq!(t.data.raw_bytes().as_ref(), &[1, 0, 0, 0, 2, 0, 0, 0]);
    assert_eq!(ck.verify(1).unwrap().tensors, 2);
    // The listed slices of a partitioned tensor stay hidden and unloadable.
    let p = TfCheckpoint::open(root().join("tests/data/tf/partitioned/v1/model.ckpt")).unwrap();
    assert!(p.list().unwrap().iter().all(|t| t.name.first() != Some(&0)));
    assert_eq!(p.verify(1).unwrap().tensors, p.list().unwrap().len() as u64);
}

/// The listing streams from the `.index` (a slice key is hidden by looking its tensor up, not
/// by a first pass over every entry): it hides exactly the slice keys a partitioned tensor
/// lists, whatever precedes them, and a scan from any key or prefix is the listing's tail.
#[test]
fn streamed_listing_hides_exactly_the_listed_slice_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let key = |name: &[u8], s: i64, l: i64| {
        slice_key::encode(
            name,
            &[
                KeyExtent {
                    start: s,
                    length: l,
                },
                KeyExtent::FULL,
            ],
        )
    };
    let r = |a: f32| f32_bytes(&[a, a + 1.0, a + 2.0, a + 3.0]);
    let mut data = r(0.0);
    data.extend_from_slice(&r(4.0));
    let full = BundleEntryProto {
        dtype: 1,
        shape: shape(&[4, 2]),
        slices: vec![slice(&[(0, 2), (0, -1)]), slice(&[(2, 2), (0, -1)])],
        ..Default::default()
    };
    let whole =
        |off: i64, n: usize| entry(1, &[n as i64, 2], 0, off, &data[off as usize..][..n * 8]);
    let entries: Entries = vec![
        (b"v".to_vec(), full.encode_to_vec()),
        (key(b"v", 0, 2), whole(0, 2).encode_to_vec()),
        (key(b"v", 2, 2), whole(16, 2).encode_to_vec()),
        // Slice-shaped keys that no partitioned tensor lists are tensors: another slice of v,
        // a slice of a whole tensor, of a missing tensor, of the header's empty name, and a
        // NUL-led name that is no slice key at all.
        (key(b"v", 1, 1), whole(8, 1).encode_to_vec()),
        (key(b"w", 0, 1), whole(0, 1).encode_to_vec()),
        (key(b"zz", 0, 1), whole(0, 1).encode_to_vec()),
        (key(b"", 0, 1), whole(0, 1).encode_to_vec()),
        (b"\x00lead".to_vec(), whole(0, 1).encode_to_vec()),
        (b"a".to_vec(), whole(0, 1).encode_to_vec()),
        (b"w".to_vec(), whole(0, 2).encode_to_vec()),
    ];
    let p = craft(tmp.path(), header(1), entries, &[data.clone()]);
    let ck = TfCheckpoint::open(&p).unwrap();
    let names: Vec<Vec<u8>> = ck.list().unwrap().into_iter().map(|t| t.name).collect();
    let mut want = vec![
        key(b"v", 1, 1),
        key(b"w", 0, 1),
        key(b"zz", 0, 1),
        key(b"", 0, 1),
        b"\x00lead".to_vec(),
        b"a".to_vec(),
        b"v".to_vec(),
        b"w".to_vec(),
    ];
    want.sort();
    assert_eq!(names, want);
    assert_eq!(ck.verify(1).unwrap().tensors, want.len() as u64);
    let all = ck.list().unwrap();
    let mut starts: Vec<Vec<u8>> = all.iter().map(|t| t.name.clone()).collect();
    starts.extend([
        key(b"v", 0, 2),
        key(b"v", 2, 2),
        vec![0],
        vec![0xff],
        b"b".to_vec(),
    ]);
    for start in &starts {
        let tail: Vec<_> = ck.scan(start).unwrap().map(Result::unwrap).collect();
        let from = all.partition_point(|t| t.name < *start);
        assert_eq!(tail, all[from..], "scan from {start:?}");
        for len in 0..=start.len() {
            let prefix = &start[..len];
            let got: Vec<_> = ck
                .scan_prefix(prefix)
                .unwrap()
                .map(Result::unwrap)
                .collect();
            let want: Vec<_> = all
                .iter()
                .filter(|t| t.name.starts_with(prefix))
                .cloned()
                .collect();
            assert_eq!(got, want, "prefix {prefix:?}");
        }
    }
}

#[test]
fn directories_and_checkpoint_state_files() {
    let dir = root().join("tests/data/tf/partitioned/v1");
    let a = open_any(&dir).unwrap();
    assert_eq!(a.list().unwrap().len(), 6);
    // A directory without a `checkpoint` file but one .index.
    let tmp = tempfile::tempdir().unwrap();
    for f in ["model.ckpt.index", "model.ckpt.data-00000-of-00001"] {
        fs::copy(dir.join(f), tmp.path().join(f)).unwrap();
    }
    assert_eq!(
        open_any(tmp.path()).unwrap().list().unwrap(),
        a.list().unwrap()
    );
    // A file named `checkpoint` that is not TensorFlow's state file is ignored.
    fs::write(tmp.path().join("checkpoint"), b"\x00\x01 not a state file").unwrap();
    assert_eq!(
        open_any(tmp.path()).unwrap().list().unwrap(),
        a.list().unwrap()
    );
    // A `checkpoint` file with an absolute path from another machine: found by file name.
    write_state(tmp.path(), "/elsewhere/model.ckpt");
    assert_eq!(
        open_any(tmp.path()).unwrap().list().unwrap(),
        a.list().unwrap()
    );
    // A `checkpoint` file naming something missing says so.
    write_state(tmp.path(), "ckpt-9");
    let e = open_any(tmp.path()).err().unwrap().to_string();
    assert!(e.contains("ckpt-9"), "{e}");
    // Two checkpoints and no state file: ambiguous, said so.
    fs::remove_file(tmp.path().join("checkpoint")).unwrap();
    fs::copy(dir.join("model.ckpt.index"), tmp.path().join("other.index")).unwrap();
    let e = open_any(tmp.path()).err().unwrap().to_string();
    assert!(e.contains("several checkpoints"), "{e}");
    // A missing prefix is "not found", not a format error.
    let e = open_any(tmp.path().join("nope")).err().unwrap().to_string();
    assert!(e.contains("no such file"), "{e}");
    fs::remove_file(tmp.path().join("other.index")).unwrap();
    // The TF1 graph beside a checkpoint (PREFIX.meta) and the `checkpoint` state file itself
    // name the checkpoint.
    fs::write(tmp.path().join("model.ckpt.meta"), b"graph").unwrap();
    let via_meta = open_any(tmp.path().join("model.ckpt.meta")).unwrap();
    assert_eq!(via_meta.list().unwrap(), a.list().unwrap());
    write_state(tmp.path(), "model.ckpt");
    let via_state = open_any(tmp.path().join("checkpoint")).unwrap();
    assert_eq!(via_state.list().unwrap(), a.list().unwrap());
    // A SavedModel directory: its variables/variables checkpoint.
    let sm = tempfile::tempdir().unwrap();
    fs::create_dir_all(sm.path().join("variables")).unwrap();
    fs::write(sm.path().join("saved_model.pb"), b"").unwrap();
    for (from, to) in [
        ("model.ckpt.index", "variables.index"),
        (
            "model.ckpt.data-00000-of-00001",
            "variables.data-00000-of-00001",
        ),
    ] {
        fs::copy(dir.join(from), sm.path().join("variables").join(to)).unwrap();
    }
    assert_eq!(
        open_any(sm.path()).unwrap().list().unwrap(),
        a.list().unwrap()
    );
    // A V1 checkpoint (TensorSliceWriter, written by TensorFlow 2.21's V1 Saver): said to be one,
    // whether given by its path or through its directory's `checkpoint` file.
    let v1 = root().join("tests/data/tf_v1");
    let e = open_any(v1.join("model.ckpt")).err().unwrap();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("TensorFlow V1 checkpoint"), "{e}");
    let d = tempfile::tempdir().unwrap();
    fs::copy(v1.join("model.ckpt"), d.path().join("model.ckpt")).unwrap();
    write_state(d.path(), "model.ckpt");
    let e = open_any(d.path()).err().unwrap().to_string();
    assert!(e.contains("TensorFlow V1 checkpoint"), "{e}");
}

/// The message of a conversion to a native file that must fail.
fn to_native_err(store: &dyn TensorStore, out: &Path) -> String {
    export(store, OutputFormat::Native, out, &ExportOptions::default())
        .unwrap_err()
        .to_string()
}

/// Writes `store` as a TensorFlow bundle at `prefix`; returns the tensors written.
fn write_bundle(store: &dyn TensorStore, prefix: &Path) -> u64 {
    let rep = export(
        store,
        OutputFormat::TensorFlow,
        prefix,
        &ExportOptions::default(),
    )
    .unwrap();
    assert_eq!(
        rep.paths,
        [tf::index_path(prefix), tf::data_path(prefix, 0, 1)]
    );
    rep.tensors
}

/// Writes TensorFlow's `checkpoint` state file in `dir`, naming `named` as the latest.
fn write_state(dir: &Path, named: &str) {
    fs::write(
        dir.join("checkpoint"),
        format!("model_checkpoint_path: \"{named}\"\n"),
    )
    .unwrap();
}

/// Copies a fixture checkpoint's files into a temporary directory; returns (dir, prefix).
fn copy_fixture(rel_prefix: &str) -> (tempfile::TempDir, PathBuf) {
    let src = root().join("tests/data/tf").join(rel_prefix);
    let tmp = tempfile::tempdir().unwrap();
    let base = src.file_name().unwrap().to_string_lossy().into_owned();
    for e in fs::read_dir(src.parent().unwrap()).unwrap() {
        let e = e.unwrap();
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with(&format!("{base}.")) {
            let dst = tmp.path().join(&n);
            fs::copy(e.path(), &dst).unwrap();
            let mut perm = fs::metadata(&dst).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            fs::set_permissions(&dst, perm).unwrap();
        }
    }
    let prefix = tmp.path().join(base);
    (tmp, prefix)
}

fn flip(path: &Path, at: usize) {
    let mut b = fs::read(path).unwrap();
    b[at] ^= 0x10;
    fs::write(path, b).unwrap();
}

/// Loads every listed tensor; returns the errors.
fn load_all(prefix: &Path) -> Result<Vec<Result<Vec<u8>, Error>>, Error> {
    let ck = TfCheckpoint::open(prefix)?;
    let list = ck.list()?;
    Ok(list
        .iter()
        .map(|t| {
            ck.load(&t.name)
                .map(|x| x.unwrap().data.raw_bytes().into_owned())
        })
        .collect())
}

#[test]
fn data_corruption_names_file_tensor_offset_and_both_checksums() {
    let (_tmp, prefix) = copy_fixture("sharded/policy/ckpt");
    let shard = tf::data_path(&prefix, 3, 6);
    flip(&shard, 0);
    let errors: Vec<Error> = load_all(&prefix)
        .unwrap()
        .into_iter()
        .filter_map(|r| r.err())
        .collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    match &errors[0] {
        Error::ChecksumMismatch {
            what,
            name,
            offset,
            len,
            stored,
            computed,
            ..
        } => {
            assert_eq!(*what, "tensor data");
            let n = name.as_deref().unwrap();
            assert!(n.contains(&shard.display().to_string()), "{n}");
            assert!(n.contains("m/"), "{n}");
            assert_eq!(*offset, 0);
            assert!(*len > 0);
            assert_ne!(stored, computed);
            let msg = errors[0].to_string();
            assert!(
                msg.contains(&format!("{stored:#010x}"))
                    && msg.contains(&format!("{computed:#010x}")),
                "{msg}"
            );
        }
        e => panic!("unexpected {e}"),
    }
    let e = TfCheckpoint::open(&prefix).unwrap().verify(1).unwrap_err();
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e}");
}

#[test]
fn data_corruption_anywhere_is_detected() {
    for rel in [
        "strings/tf2/ckpt-1",
        "partitioned/raw/slices",
        "sharded/merged/m",
    ] {
        let (_tmp, prefix) = copy_fixture(rel);
        let shards = TfCheckpoint::open(&prefix).unwrap().num_shards();
        for s in 0..shards {
            let path = tf::data_path(&prefix, s, shards);
            let orig = fs::read(&path).unwrap();
            // Every byte of small files; a spread of about 400 bytes of larger ones.
            let step = (orig.len() / 400).max(1);
            for at in (0..orig.len()).step_by(step) {
                let mut b = orig.clone();
                b[at] ^= 0x01;
                fs::write(&path, &b).unwrap();
                // Detected by list (string lengths are checked there) or by load.
                let detected =
                    load_all(&prefix).map_or(true, |results| results.iter().any(|r| r.is_err()));
                assert!(
                    detected,
                    "{rel} shard {s} byte {at}: corruption not detected"
                );
            }
            fs::write(&path, &orig).unwrap();
        }
    }
}

#[test]
fn index_corruption_and_truncation_never_panic_or_lie() {
    for rel in [
        "partitioned/v1/model.ckpt",
        "strings/tf2/ckpt-1",
        "sharded/policy/ckpt",
    ] {
        let (_tmp, prefix) = copy_fixture(rel);
        let good: Vec<Vec<u8>> = load_all(&prefix)
            .unwrap()
            .into_iter()
            .map(|r| r.unwrap())
            .collect();
        let ipath = tf::index_path(&prefix);
        let orig = fs::read(&ipath).unwrap();
        for at in 0..orig.len() {
            for bit in [0x01u8, 0x80] {
                let mut b = orig.clone();
                b[at] ^= bit;
                fs::write(&ipath, &b).unwrap();
                // Either an error, or (footer padding, which TensorFlow ignores too) the same data.
                if let Ok(results) = load_all(&prefix) {
                    if results.iter().all(|r| r.is_ok()) {
                        let got: Vec<Vec<u8>> = results.into_iter().map(|r| r.unwrap()).collect();
                        assert_eq!(
                            got, good,
                            "{rel}: index byte {at} flipped: different data accepted"
                        );
                    }
                }
            }
        }
        for len in 0..orig.len() {
            fs::write(&ipath, &orig[..len]).unwrap();
            assert!(
                TfCheckpoint::open(&prefix).is_err(),
                "{rel}: index truncated to {len} accepted"
            );
        }
        fs::write(&ipath, &orig).unwrap();
        // Truncated data shards: errors naming the file.
        let shards = TfCheckpoint::open(&prefix).unwrap().num_shards();
        for s in 0..shards {
            let path = tf::data_path(&prefix, s, shards);
            let d = fs::read(&path).unwrap();
            fs::write(&path, &d[..d.len() / 2]).unwrap();
            let e = match load_all(&prefix) {
                Err(e) => e,
                Ok(results) => results
                    .into_iter()
                    .find_map(|r| r.err())
                    .expect("truncation detected"),
            };
            assert!(e.to_string().contains(&path.display().to_string()), "{e}");
            fs::write(&path, &d).unwrap();
        }
    }
}

/// Types TensorFlow writes that paramdex does not decode (a tf.data iterator's DT_VARIANT
/// state, qint8, quint8) are listed with TensorFlow's dtype names, checksummed (a variant's
/// CRC covers its elements in TensorFlow's own way), loadable as their stored bytes, and
/// refused by outputs that cannot hold them; they never make the whole checkpoint unreadable.
#[test]
fn opaque_tensorflow_types_are_listed_checksummed_and_refused_by_outputs() {
    let dir = root().join("tests/data/tf_opaque");
    let m: Value =
        serde_json::from_str(&fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap();
    for ck in m["checkpoints"].as_array().unwrap() {
        let rel = ck["prefix"].as_str().unwrap();
        let store = open_any(dir.join(rel)).unwrap();
        let list = store.list().unwrap();
        let want = ck["tensors"].as_array().unwrap();
        assert_eq!(list.len(), want.len(), "{rel}");
        for (t, w) in list.iter().zip(want) {
            assert_eq!(t.name, w["name"].as_str().unwrap().as_bytes(), "{rel}");
            let want_dtype = match (w["dtype"].as_str().unwrap(), w["shape"].as_array()) {
                // A scalar string is a bytes value (SPEC.md 6.1).
                ("string", Some(s)) if s.is_empty() => "bytes",
                (d, _) => d,
            };
            assert_eq!(t.kind.name(), want_dtype, "{rel}");
            let shape: Vec<u64> = w["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect();
            assert_eq!(t.shape, shape, "{rel}");
            let loaded = store.load(&t.name).unwrap().unwrap();
            if let Some(sha) = w["sha256"].as_str() {
                assert_eq!(sha256_hex(&loaded.data.raw_bytes()), sha, "{rel}");
            }
            if let Kind::Opaque(_) = t.kind {
                assert_eq!(loaded.data.raw_bytes().len() as u64, t.nbytes);
                assert!(t.kind.not_numeric().unwrap().contains("does not decode"));
            }
        }
        store.verify(1).unwrap();
    }
    // A flipped byte inside the variant's data is caught by its checksum.
    let (_tmp, prefix) = copy_fixture("../tf_opaque/iterator/ckpt");
    let data = tf::data_path(&prefix, 0, 1);
    let ck = TfCheckpoint::open(&prefix).unwrap();
    let it = ck.load(b"it/.ATTRIBUTES/ITERATOR_STATE").unwrap().unwrap();
    let stored = it.data.raw_bytes().into_owned();
    drop(ck);
    let bytes = fs::read(&data).unwrap();
    let at = bytes
        .windows(stored.len())
        .position(|w| w == stored.as_slice())
        .unwrap();
    flip(&data, at + stored.len() / 2);
    let ck = TfCheckpoint::open(&prefix).unwrap();
    assert!(ck.list().is_ok(), "listing needs no variant data");
    let e = ck.load(b"it/.ATTRIBUTES/ITERATOR_STATE").unwrap_err();
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e}");
    assert!(ck.verify(1).is_err());
    // Outputs that hold numeric tensors only refuse them, naming what they are.
    let q = open_any(dir.join("quantized/ckpt")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let e = to_native_err(q.as_ref(), &out.path().join("q.pdx"));
    assert!(
        e.contains("q8 is a qint8 tensor, which paramdex does not decode"),
        "{e}"
    );
}

#[test]
fn missing_shard_fails_only_its_tensors() {
    let (_tmp, prefix) = copy_fixture("sharded/v1/model.ckpt");
    let gone = tf::data_path(&prefix, 1, 3);
    fs::remove_file(&gone).unwrap();
    let ck = TfCheckpoint::open(&prefix).unwrap();
    assert!(ck.load(b"dev0/var").unwrap().is_some());
    let e = ck.load(b"dev1/var").unwrap_err().to_string();
    assert!(e.contains(&gone.display().to_string()), "{e}");
    assert!(e.contains("data shard 1 of 3"), "{e}");
    assert!(e.contains("which holds tensor dev1/var"), "{e}");
    // Listing numeric tensors needs the index only.
    assert!(ck.list().unwrap().iter().any(|t| t.name == b"dev1/var"));
}

// ---------------------------------------------------------------------------------------------
// Hand-made checkpoints: hostile entries, big-endian data.

fn shape(dims: &[i64]) -> Option<TensorShapeProto> {
    Some(TensorShapeProto {
        dim: dims
            .iter()
            .map(|&d| Dim {
                size: d,
                name: String::new(),
            })
            .collect(),
        unknown_rank: false,
    })
}

fn slice(ext: &[(i64, i64)]) -> TensorSliceProto {
    TensorSliceProto {
        extent: ext
            .iter()
            .map(|&(s, l)| Extent {
                start: s,
                has_length: (l >= 0).then_some(HasLength::Length(l)),
            })
            .collect(),
    }
}

fn entry(dtype: i32, dims: &[i64], shard: i32, offset: i64, data: &[u8]) -> BundleEntryProto {
    BundleEntryProto {
        dtype,
        shape: shape(dims),
        shard_id: shard,
        offset,
        size: data.len() as i64,
        crc32c: mask_crc(crc32c(data)),
        slices: vec![],
    }
}

/// Index entries: (key, serialized BundleEntryProto).
type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// Writes a checkpoint by hand: header + entries (sorted here) + one data file per shard.
fn craft(dir: &Path, header: BundleHeaderProto, entries: Entries, shards: &[Vec<u8>]) -> PathBuf {
    let prefix = dir.join("crafted");
    let mut entries = entries;
    entries.sort();
    let mut b = TableBuilder::new(Vec::new(), 0, TableOptions::default()).unwrap();
    b.add(b"", &header.encode_to_vec()).unwrap();
    for (k, v) in &entries {
        b.add(k, v).unwrap();
    }
    fs::write(tf::index_path(&prefix), b.finish().unwrap().0).unwrap();
    for (i, d) in shards.iter().enumerate() {
        fs::write(tf::data_path(&prefix, i as u32, shards.len() as u32), d).unwrap();
    }
    prefix
}

fn header(num_shards: i32) -> BundleHeaderProto {
    BundleHeaderProto {
        num_shards,
        endianness: 0,
        version: Some(VersionDef {
            producer: 1,
            min_consumer: 0,
            bad_consumers: vec![],
        }),
    }
}

#[test]
fn hostile_partitioned_entries_are_rejected() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = |a: f32| f32_bytes(&[a, a + 1.0, a + 2.0, a + 3.0]);
    let (r0, r1) = (rows(0.0), rows(4.0));
    let mut data = r0.clone();
    data.extend_from_slice(&r1);
    let key = |s: i64, l: i64| {
        slice_key::encode(
            b"v",
            &[
                KeyExtent {
                    start: s,
                    length: l,
                },
                KeyExtent::FULL,
            ],
        )
    };
    let full = |dims: &[i64], sl: Vec<TensorSliceProto>| {
        BundleEntryProto {
            dtype: 1,
            shape: shape(dims),
            slices: sl,
            ..Default::default()
        }
        .encode_to_vec()
    };
    let part = |s: i64, l: i64, off: i64, d: &[u8]| {
        (key(s, l), entry(1, &[l, 2], 0, off, d).encode_to_vec())
    };
    // Well-formed: [4,2] from rows 0-2 and 2-4.
    let ok = vec![
        (
            b"v".to_vec(),
            full(
                &[4, 2],
                vec![slice(&[(0, 2), (0, -1)]), slice(&[(2, 2), (0, -1)])],
            ),
        ),
        part(0, 2, 0, &r0),
        part(2, 2, 16, &r1),
    ];
    let p = craft(tmp.path(), header(1), ok.clone(), &[data.clone()]);
    let ck = TfCheckpoint::open(&p).unwrap();
    let t = ck.load(b"v").unwrap().unwrap();
    assert_eq!(t.data.raw_bytes().as_ref(), &data[..]);
    ck.verify(1).unwrap();

    let cases: Vec<(&str, Entries)> = vec![
        (
            "gap",
            vec![
                (
                    b"v".to_vec(),
                    full(
                        &[4, 2],
                        vec![slice(&[(0, 2), (0, -1)]), slice(&[(3, 1), (0, -1)])],
                    ),
                ),
                part(0, 2, 0, &r0),
                part(3, 1, 16, &r1[..8]),
            ],
        ),
        ("missing slice entry", vec![ok[0].clone(), ok[1].clone()]),
        (
            "overlap",
            vec![
                (
                    b"v".to_vec(),
                    full(
                        &[4, 2],
                        vec![slice(&[(0, 2), (0, -1)]), slice(&[(1, 2), (0, -1)])],
                    ),
                ),
                part(0, 2, 0, &r0),
                part(1, 2, 16, &r1),
            ],
        ),
        (
            "out of bounds",
            vec![
                (
                    b"v".to_vec(),
                    full(
                        &[4, 2],
                        vec![slice(&[(0, 2), (0, -1)]), slice(&[(3, 2), (0, -1)])],
                    ),
                ),
                part(0, 2, 0, &r0),
                part(3, 2, 16, &r1),
            ],
        ),
        (
            "huge claimed shape",
            vec![
                (
                    b"v".to_vec(),
                    full(
                        &[1 << 40, 2],
                        vec![slice(&[(0, 2), (0, -1)]), slice(&[(2, 2), (0, -1)])],
                    ),
                ),
                part(0, 2, 0, &r0),
                part(2, 2, 16, &r1),
            ],
        ),
        (
            "slice dtype differs",
            vec![
                ok[0].clone(),
                part(0, 2, 0, &r0),
                (key(2, 2), entry(3, &[2, 2], 0, 16, &r1).encode_to_vec()),
            ],
        ),
        (
            "rank mismatch",
            vec![
                (
                    b"v".to_vec(),
                    full(&[4, 2], vec![slice(&[(0, 2)]), slice(&[(2, 2)])]),
                ),
                part(0, 2, 0, &r0),
                part(2, 2, 16, &r1),
            ],
        ),
    ];
    for (what, entries) in cases {
        let d = tempfile::tempdir().unwrap();
        let p = craft(d.path(), header(1), entries, &[data.clone()]);
        let ck = TfCheckpoint::open(&p).unwrap();
        let e = ck
            .load(b"v")
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert!(e.to_string().contains("tensor v"), "{what}: {e}");
        assert!(ck.verify(1).is_err(), "{what}: verify passed");
    }
}

/// A partitioned string tensor (TensorFlow lists it but cannot restore it) is listed with its
/// full shape and the size of its slices, verified slice by slice, and refused by `get` alone:
/// it does not make the rest of the checkpoint unreadable.
#[test]
fn partitioned_string_tensors_are_listed_and_verified_but_not_assembled() {
    let tmp = tempfile::tempdir().unwrap();
    let rows: [Vec<Vec<u8>>; 2] = [
        vec![b"ab".to_vec(), b"".to_vec()],
        vec![b"cde".to_vec(), b"f".to_vec()],
    ];
    let mut data = Vec::new();
    let mut entries: Entries = Vec::new();
    let mut slices = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        let (bytes, crc) = tf::strings::encode(r);
        let start = 2 * i as i64;
        entries.push((
            slice_key::encode(b"s", &[KeyExtent { start, length: 2 }]),
            BundleEntryProto {
                dtype: 7,
                shape: shape(&[2]),
                offset: data.len() as i64,
                size: bytes.len() as i64,
                crc32c: crc,
                ..Default::default()
            }
            .encode_to_vec(),
        ));
        data.extend_from_slice(&bytes);
        slices.push(slice(&[(start, 2)]));
    }
    entries.push((
        b"s".to_vec(),
        BundleEntryProto {
            dtype: 7,
            shape: shape(&[4]),
            slices,
            ..Default::default()
        }
        .encode_to_vec(),
    ));
    let f = f32_bytes(&[1.5]);
    entries.push((
        b"x".to_vec(),
        entry(1, &[1], 0, data.len() as i64, &f).encode_to_vec(),
    ));
    data.extend_from_slice(&f);
    let p = craft(tmp.path(), header(1), entries, &[data]);
    let ck = TfCheckpoint::open(&p).unwrap();
    let list = ck.list().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(
        (list[0].name.as_slice(), &list[0].kind),
        (&b"s"[..], &Kind::String)
    );
    assert_eq!((list[0].shape.clone(), list[0].nbytes), (vec![4], 6));
    assert_eq!(ck.verify(1).unwrap().tensors, 2);
    let e = ck.load(b"s").unwrap_err().to_string();
    assert!(e.contains("partitioned string tensor"), "{e}");
    let x = ck.load(b"x").unwrap().unwrap();
    assert_eq!(x.data.raw_bytes().as_ref(), &f[..]);
}

#[test]
fn hostile_entries_and_headers_are_rejected() {
    let good = f32_bytes(&[1.0, 2.0]);
    let cases: Vec<(&str, BundleHeaderProto, BundleEntryProto, &str)> = vec![
        (
            "size past the file",
            header(1),
            entry(1, &[2], 0, 4, &good),
            "run past the end",
        ),
        (
            "size disagrees with shape",
            header(1),
            entry(1, &[3], 0, 0, &good),
            "invalid size",
        ),
        (
            "negative dim",
            header(1),
            entry(1, &[-2], 0, 0, &good),
            "size -2",
        ),
        (
            "shard out of range",
            header(1),
            entry(1, &[2], 1, 0, &good),
            "shard_id 1",
        ),
        (
            "huge element count",
            header(1),
            entry(1, &[1 << 40, 1 << 40], 0, 0, &good),
            "too many elements",
        ),
        (
            "variant dtype over bytes that are not variant elements",
            header(1),
            entry(21, &[2], 0, 0, &good),
            "are not a sequence of (varint length, element, 4-byte checksum)",
        ),
        (
            "a dtype number no bundle holds (a TF1 reference type)",
            header(1),
            entry(101, &[2], 0, 0, &good),
            "an unknown DataType",
        ),
        (
            "too many strings",
            header(1),
            entry(7, &[1 << 30], 0, 0, &good),
            "cannot fit",
        ),
        (
            "bad crc",
            header(1),
            BundleEntryProto {
                crc32c: 5,
                ..entry(1, &[2], 0, 0, &good)
            },
            "checksum mismatch",
        ),
    ];
    for (what, h, e, needle) in cases {
        let tmp = tempfile::tempdir().unwrap();
        let p = craft(
            tmp.path(),
            h,
            vec![(b"w".to_vec(), e.encode_to_vec())],
            std::slice::from_ref(&good),
        );
        let ck = TfCheckpoint::open(&p).unwrap();
        let err = ck
            .load(b"w")
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"))
            .to_string();
        assert!(err.contains(needle), "{what}: {err}");
        assert!(err.contains('w'), "{what}: {err}");
        assert!(ck.verify(1).is_err(), "{what}: verify passed");
    }
    // A DataType number of a TensorFlow newer than paramdex is never fatal: listed with its
    // byte size, loadable as its bytes, checksummed.
    let tmp = tempfile::tempdir().unwrap();
    let p = craft(
        tmp.path(),
        header(1),
        vec![(b"w".to_vec(), entry(40, &[2], 0, 0, &good).encode_to_vec())],
        std::slice::from_ref(&good),
    );
    let ck = TfCheckpoint::open(&p).unwrap();
    let list = ck.list().unwrap();
    assert_eq!(
        (&list[0].kind, list[0].nbytes, list[0].shape.as_slice()),
        (&Kind::Opaque(40), 8, &[2u64][..])
    );
    assert_eq!(ck.load(b"w").unwrap().unwrap().data.raw_bytes(), good);
    ck.verify(1).unwrap();
    for (what, h) in [
        ("zero shards", header(0)),
        ("negative shards", header(-3)),
        ("too many shards", header(1 << 30)),
        (
            "newer consumer",
            BundleHeaderProto {
                version: Some(VersionDef {
                    producer: 1,
                    min_consumer: 7,
                    bad_consumers: vec![],
                }),
                ..header(1)
            },
        ),
        (
            "bad endianness",
            BundleHeaderProto {
                endianness: 9,
                ..header(1)
            },
        ),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let p = craft(tmp.path(), h, vec![], &[]);
        let e = TfCheckpoint::open(&p)
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"))
            .to_string();
        assert!(e.contains("crafted.index"), "{what}: {e}");
    }
}

#[test]
fn big_endian_checkpoints_are_swapped() {
    let vals = [1.5f32, -2.0, 3.25];
    let be: Vec<u8> = vals.iter().flat_map(|x| x.to_be_bytes()).collect();
    let c64: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|x| x.to_be_bytes()).collect();
    // A big-endian string tensor: the length checksum covers the lengths as big-endian u32.
    let lens_crc = crc32c(&2u32.to_be_bytes());
    let mut s = vec![2u8];
    s.extend_from_slice(&mask_crc(lens_crc).to_be_bytes());
    s.extend_from_slice(b"hi");
    let mut data = be.clone();
    data.extend_from_slice(&c64);
    data.extend_from_slice(&s);
    let mut s_entry = entry(7, &[1], 0, 20, &s);
    let mut crc_in = 2u32.to_be_bytes().to_vec();
    crc_in.extend_from_slice(&s[1..]);
    s_entry.crc32c = mask_crc(crc32c(&crc_in));
    let tmp = tempfile::tempdir().unwrap();
    let p = craft(
        tmp.path(),
        BundleHeaderProto {
            endianness: 1,
            ..header(1)
        },
        vec![
            (b"f".to_vec(), entry(1, &[3], 0, 0, &be).encode_to_vec()),
            (b"c".to_vec(), entry(8, &[1], 0, 12, &c64).encode_to_vec()),
            (b"s".to_vec(), s_entry.encode_to_vec()),
        ],
        &[data],
    );
    let ck = TfCheckpoint::open(&p).unwrap();
    assert!(ck.big_endian());
    assert_eq!(
        ck.load(b"f").unwrap().unwrap().data.raw_bytes().as_ref(),
        &f32_bytes(&vals)[..]
    );
    assert_eq!(
        ck.load(b"c").unwrap().unwrap().data.raw_bytes().as_ref(),
        &f32_bytes(&[1.0, 2.0])[..]
    );
    match ck.load(b"s").unwrap().unwrap().data {
        TensorData::Strings(v) => assert_eq!(v, vec![b"hi".to_vec()]),
        other => panic!("{other:?}"),
    }
    ck.verify(1).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Writing: convert --to tf and export-tf.

/// The 121-byte index and 8-byte data file of TensorFlow 2.21 for {"w": [1.0, 2.0]}
/// (reference section 7).
#[test]
fn write_bundle_is_byte_identical_to_tensorflow() {
    let tmp = tempfile::tempdir().unwrap();
    let native = tmp.path().join("w.pdx");
    let mut w = Writer::create(&native).unwrap();
    w.add(
        "w",
        Tensor::new(DType::Float32, &[2], &f32_bytes(&[1.0, 2.0])),
    )
    .unwrap();
    w.finish().unwrap();
    let prefix = tmp.path().join("model");
    assert_eq!(write_bundle(&Reader::open(&native).unwrap(), &prefix), 1);
    assert_eq!(
        fs::read(tf::data_path(&prefix, 0, 1)).unwrap(),
        [0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]
    );
    let mut want = vec![
        0x00, 0x00, 0x06, 0x08, 0x01, 0x1a, 0x02, 0x08, 0x01, 0x00, 0x01, 0x0f, 0x77,
    ];
    want.extend_from_slice(&[
        0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02, 0x28, 0x08, 0x35, 0x59, 0x3c, 0xe5, 0x35,
    ]);
    want.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0x09, 0x21, 0xad, 0xc3]);
    want.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0xc0, 0xf2, 0xa1, 0xb0]);
    want.extend_from_slice(&[
        0x00, 0x01, 0x02, 0x78, 0x00, 0x24, 0, 0, 0, 0, 1, 0, 0, 0, 0x00, 0xab, 0x30, 0x70, 0x7f,
    ]);
    want.extend_from_slice(&[0x29, 0x08, 0x36, 0x0e]);
    want.resize(want.len() + 36, 0);
    want.extend_from_slice(&[0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb]);
    assert_eq!(want.len(), 121);
    assert_eq!(fs::read(tf::index_path(&prefix)).unwrap(), want);
}

#[test]
fn write_bundle_round_trips_every_fixture() {
    for (set, prefix, wants) in fixtures() {
        let src = open_any(set.join(&prefix)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        assert_eq!(write_bundle(src.as_ref(), &out), wants.len() as u64);
        let back = TfCheckpoint::open(&out).unwrap();
        assert_eq!(back.num_shards(), 1);
        check_store(&back, &wants, &format!("{prefix} via write_bundle"));
        back.verify(1).unwrap();
    }
}

#[test]
fn convert_to_native_assembles_and_refuses_strings() {
    let src = open_any(root().join("tests/data/tf/partitioned/v1/model.ckpt")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("p.pdx");
    export(
        src.as_ref(),
        OutputFormat::Native,
        &out,
        &ExportOptions::default(),
    )
    .unwrap();
    let r = Reader::open(&out).unwrap();
    for t in src.list().unwrap() {
        let a = src.load(&t.name).unwrap().unwrap();
        let b = r.load(&t.name).unwrap().unwrap();
        assert_eq!(a.data.raw_bytes(), b.data.raw_bytes());
        assert_eq!(a.info.shape, b.info.shape);
    }
    let strings = open_any(root().join("tests/data/tf/strings/tf2/ckpt-1")).unwrap();
    let e = to_native_err(strings.as_ref(), &tmp.path().join("s.pdx"));
    // Non-scalar string tensors are refused by name; the object graph (a scalar string) is a
    // bytes value, which a native file holds (SPEC.md 6.1).
    assert!(
        e.contains("string tensor") && !e.contains("_CHECKPOINTABLE_OBJECT_GRAPH"),
        "{e}"
    );
    let out = tmp.path().join("s2.pdx");
    export(
        strings.as_ref(),
        OutputFormat::Native,
        &out,
        &ExportOptions {
            skip_unsupported: true,
            ..ExportOptions::default()
        },
    )
    .unwrap();
    let r = Reader::open(&out).unwrap();
    let graph = strings
        .load(b"_CHECKPOINTABLE_OBJECT_GRAPH")
        .unwrap()
        .unwrap();
    assert_eq!(graph.info.kind, Kind::Bytes);
    assert_eq!(
        r.get_bytes("_CHECKPOINTABLE_OBJECT_GRAPH")
            .unwrap()
            .unwrap(),
        &graph.data.raw_bytes()[..]
    );
    // And back to TensorFlow: a scalar string again, byte for byte.
    let back = tmp.path().join("back");
    write_bundle(&r, &back);
    let back = TfCheckpoint::open(&back).unwrap();
    let g2 = back.load(b"_CHECKPOINTABLE_OBJECT_GRAPH").unwrap().unwrap();
    assert_eq!(g2.info.kind, Kind::Bytes);
    assert_eq!(g2.data.raw_bytes(), graph.data.raw_bytes());
}

fn sample_native(path: &Path) -> BTreeMap<Vec<u8>, (DType, Vec<u64>, Vec<u8>)> {
    let mut want = BTreeMap::new();
    let mut w = Writer::create(path).unwrap();
    for (i, d) in DType::ALL.iter().enumerate() {
        let shape = vec![2u64, 3];
        let data: Vec<u8> = (0..6 * d.size())
            .map(|j| (i * 31 + j * 7) as u8 & if *d == DType::Bool { 1 } else { 0xff })
            .collect();
        let name = format!("layer{i}/{}", d.name()).into_bytes();
        w.add(&name, Tensor::new(*d, &shape, &data)).unwrap();
        want.insert(name, (*d, shape, data));
    }
    let lod = vec![vec![0u64, 1, 3]];
    w.add(
        "lod/seq",
        Tensor::new(DType::Int64, &[3, 1], &[7u8; 24]).with_lod(&lod),
    )
    .unwrap();
    want.insert(
        b"lod/seq".to_vec(),
        (DType::Int64, vec![3, 1], vec![7u8; 24]),
    );
    w.add("scalar", Tensor::new(DType::Float64, &[], &[1u8; 8]))
        .unwrap();
    want.insert(b"scalar".to_vec(), (DType::Float64, vec![], vec![1u8; 8]));
    w.add("empty", Tensor::new(DType::Float32, &[0, 5], &[]))
        .unwrap();
    want.insert(b"empty".to_vec(), (DType::Float32, vec![0, 5], vec![]));
    w.add("ünï\\\u{1F600}", Tensor::new(DType::UInt8, &[1], &[9]))
        .unwrap();
    want.insert(
        "ünï\\\u{1F600}".as_bytes().to_vec(),
        (DType::UInt8, vec![1], vec![9]),
    );
    w.finish().unwrap();
    want
}

#[test]
fn export_tf_hard_links_and_tensorflow_layout_reads_back() {
    let tmp = tempfile::tempdir().unwrap();
    let native = tmp.path().join("model.pdx");
    let want = sample_native(&native);
    let prefix = tmp.path().join("export/ckpt-1");
    fs::create_dir(tmp.path().join("export")).unwrap();
    let rep = tf::export_tf(&native, &prefix).unwrap();
    assert!(!rep.copied);
    assert_eq!(rep.index_path, tf::index_path(&prefix));
    assert_eq!(rep.data_path, tf::data_path(&prefix, 0, 1));
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let ino = |p: &Path| fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&native), ino(&rep.index_path));
        assert_eq!(ino(&native), ino(&rep.data_path));
    }
    // Read as a TensorFlow checkpoint (through the prefix: the TensorFlow reader, not native).
    let store = open_any(&prefix).unwrap();
    assert_eq!(store.format(), Format::TensorFlow);
    let list = store.list().unwrap();
    assert_eq!(
        list.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        want.keys().cloned().collect::<Vec<_>>()
    );
    for t in &list {
        let (d, shape, data) = &want[&t.name];
        assert_eq!(t.kind, Kind::Numeric(*d));
        assert_eq!(&t.shape, shape);
        assert!(t.lod.is_empty(), "TensorFlow does not see LoD");
        assert_eq!(
            store
                .load(&t.name)
                .unwrap()
                .unwrap()
                .data
                .raw_bytes()
                .as_ref(),
            &data[..]
        );
    }
    store.verify(0).unwrap();
    // Idempotent, and replaces other files of those names.
    tf::export_tf(&native, &prefix).unwrap();
    fs::remove_file(&rep.data_path).unwrap();
    fs::write(&rep.data_path, b"stale").unwrap();
    tf::export_tf(&native, &prefix).unwrap();
    assert_eq!(
        fs::read(&rep.data_path).unwrap(),
        fs::read(&native).unwrap()
    );
    // Only valid native files are exported.
    let e = tf::export_tf(
        &root().join("tests/data/tf/basic/v1/model.ckpt.index"),
        &tmp.path().join("x"),
    )
    .unwrap_err();
    assert!(matches!(e, Error::UnrecognizedFormat { .. }), "{e}");
    assert!(!tf::index_path(&tmp.path().join("x")).exists());
    // Missing directories of the prefix are created.
    let rep = tf::export_tf(&native, &tmp.path().join("no/such/dir/p")).unwrap();
    assert_eq!(
        fs::read(&rep.index_path).unwrap(),
        fs::read(&native).unwrap()
    );
    // Where a directory cannot be made, an error, not a panic.
    fs::write(tmp.path().join("file"), b"").unwrap();
    assert!(tf::export_tf(&native, &tmp.path().join("file/p")).is_err());
}

mod props {
    use paramdex::raw::slices::slice_key::{self, Extent};
    use paramdex::raw::slices::tile;
    use paramdex::Region;
    use proptest::prelude::*;

    /// A grid partition of `shape`: per axis, sorted cut points.
    fn grid(shape: &[u64], cuts: &[Vec<u64>]) -> Vec<Region> {
        let mut axes: Vec<Vec<(u64, u64)>> = Vec::new();
        for (d, &n) in shape.iter().enumerate() {
            let mut pts: Vec<u64> = cuts[d].iter().map(|c| c % (n + 1)).collect();
            pts.push(0);
            pts.push(n);
            pts.sort_unstable();
            pts.dedup();
            axes.push(pts.windows(2).map(|w| (w[0], w[1] - w[0])).collect());
        }
        let mut out = vec![Region {
            start: vec![],
            len: vec![],
        }];
        for ax in axes {
            out = out
                .into_iter()
                .flat_map(|r| {
                    ax.iter().map(move |&(s, l)| {
                        let mut r = r.clone();
                        r.start.push(s);
                        r.len.push(l);
                        r
                    })
                })
                .collect();
        }
        out
    }

    fn cut(shape: &[u64], full: &[u8], r: &Region) -> Vec<u8> {
        let n: u64 = r.len.iter().product();
        (0..n)
            .map(|k| {
                let (mut rem, mut flat, mut mul) = (k, 0u64, 1u64);
                for d in (0..shape.len()).rev() {
                    flat += (rem % r.len[d] + r.start[d]) * mul;
                    rem /= r.len[d];
                    mul *= shape[d];
                }
                full[flat as usize]
            })
            .collect()
    }

    proptest! {
        #[test]
        fn grids_tile_exactly(shape in prop::collection::vec(1u64..6, 1..4),
                              cuts in prop::collection::vec(prop::collection::vec(0u64..7, 0..3), 3)) {
            let numel: u64 = shape.iter().product();
            let full: Vec<u8> = (0..numel).map(|i| (i * 7 + 3) as u8).collect();
            let regions = grid(&shape, &cuts);
            let datas: Vec<Vec<u8>> = regions.iter().map(|r| cut(&shape, &full, r)).collect();
            let refs: Vec<&[u8]> = datas.iter().map(|d| &d[..]).collect();
            let mut out = vec![0u8; numel as usize];
            tile(&shape, 1, &regions, &refs, Some(&mut out)).unwrap();
            prop_assert_eq!(&out, &full);
            if regions.len() > 1 {
                // A missing slice leaves a gap; a repeated one overlaps.
                prop_assert!(tile(&shape, 1, &regions[1..], &refs[1..], None).is_err());
                let mut dup = regions.clone();
                dup.push(regions[0].clone());
                let mut drefs = refs.clone();
                drefs.push(refs[0]);
                prop_assert!(tile(&shape, 1, &dup, &drefs, None).is_err());
            }
        }

        #[test]
        fn slice_keys_round_trip(name in prop::collection::vec(any::<u8>(), 0..20),
                                 ext in prop::collection::vec((any::<i64>(), any::<i64>()), 0..5)) {
            let ext: Vec<Extent> = ext.into_iter().map(|(s, l)| Extent { start: s, length: l }).collect();
            let k = slice_key::encode(&name, &ext);
            let d = slice_key::decode(&k).unwrap();
            prop_assert_eq!(d.name, name);
            prop_assert_eq!(d.extents, ext);
        }

        #[test]
        fn slice_key_decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..40)) {
            let _ = slice_key::decode(&bytes);
        }
    }
}

/// export-tf given something other than a native file refuses it as such, before creating
/// anything (the CLI then says what the input is and what to do: `cli/tests/cli.rs`).
#[test]
fn export_tf_refuses_inputs_that_are_not_native() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("ck");
    for input in [
        root().join("tests/data/tf/basic/tf2/ckpt-1"),
        root().join("tests/data/tf/basic/tf2"),
    ] {
        let e = tf::export_tf(&input, &p).unwrap_err();
        assert!(matches!(e, Error::UnrecognizedFormat { .. }), "{e}");
    }
    let e = tf::export_tf(&out.path().join("missing.pdx"), &p)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no such file"), "{e}");
    assert!(fs::read_dir(out.path()).unwrap().next().is_none());
}

/// Across file systems a hard link is impossible: the file is copied once and the report says
/// so. The source is on another file system when one is at hand, else hard links are refused
/// on this thread (`tests/support`'s `other_file_system`).
#[cfg(unix)]
#[test]
fn export_tf_copies_once_across_file_systems() {
    let tmp = tempfile::tempdir().unwrap();
    let other = support::other_file_system(tmp.path());
    export_tf_copies_once(tmp.path(), other);
}

/// The same where the file system refuses the hard link (injected, on any machine).
#[cfg(unix)]
#[test]
fn export_tf_copies_once_when_hard_links_fail() {
    let tmp = tempfile::tempdir().unwrap();
    export_tf_copies_once(tmp.path(), support::OtherFileSystem::links_refused());
}

#[cfg(unix)]
fn export_tf_copies_once(out: &Path, other: support::OtherFileSystem) {
    use std::os::unix::fs::MetadataExt;
    let native = other.dir.path().join("m.pdx");
    let want = sample_native(&native);
    let prefix = out.join("ckpt");
    let rep = tf::export_tf(&native, &prefix).unwrap();
    assert!(rep.copied);
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    assert_ne!(ino(&rep.index_path), ino(&native), "a copy, not a link");
    assert_eq!(
        ino(&rep.index_path),
        ino(&rep.data_path),
        "the data name shares the one copy"
    );
    assert_eq!(
        fs::read(&rep.index_path).unwrap(),
        fs::read(&native).unwrap()
    );
    drop(other);
    let ck = TfCheckpoint::open(&prefix).unwrap();
    assert_eq!(ck.list().unwrap().len(), want.len());
    ck.verify(1).unwrap();
}

#[test]
fn the_library_opens_any_name_of_a_checkpoint() {
    let p = root().join("tests/data/tf/sharded/v1/model.ckpt");
    let want = TfCheckpoint::open(&p).unwrap().list().unwrap();
    for other in [
        tf::index_path(&p),
        tf::data_path(&p, 2, 3),
        p.parent().unwrap().to_path_buf(),
    ] {
        let ck = TfCheckpoint::open(&other).unwrap();
        assert_eq!(ck.prefix(), p.as_path(), "{}", other.display());
        assert_eq!(ck.list().unwrap(), want);
    }
    let e = TfCheckpoint::open(root().join("tests/data/tf/nope"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("nope.index"), "{e}");
}
