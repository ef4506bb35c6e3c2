//! Compatibility kept forever: the native files in `tests/data/native/v1/` were written by format
//! version 1 (`FORMAT_VERSION` in `src/native/mod.rs`), and every later version of paramdex MUST
//! read them with the same tensors, metadata and `verify` results. Never change or delete them;
//! a new format version adds a folder beside this one (`v2/`) and keeps this one.
//!
//! `manifest.json` lists each file: the SHA-256 of its bytes (they are frozen), its header fields,
//! layout (records, index blocks, snappy blocks, dead space), typed metadata, expected `verify`
//! counts, and every tensor (name in hex, dtype, shape, LoD, SHA-256 of its data bytes). The test
//! opens and verifies every file in the folder (one missing from the manifest, or listed but
//! missing, fails) and compares every tensor through both [`Reader`] and [`open_any`].
//!
//! The files were written by `regenerate` below, which is ignored:
//! `cargo test --test compat -- --ignored regenerate`. It writes only the files that are
//! missing and refuses to change one that exists, so a case can be added to v1 only while the
//! writer still writes version 1.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use paramdex::interop::{open_any, Format, TensorData};
use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{
    name, rewrite_in_place, Compression, DType, MetaValue, Metadata, Reader, Tensor, Writer,
    WriterOptions,
};
use serde_json::{json, Value};
use support::{hex, lod_list, read_json, sha256_hex, u64_list, unhex};

fn dir() -> PathBuf {
    support::data("native/v1")
}

const MANIFEST: &str = "manifest.json";

// ---------------------------------------------------------------------------------------------
// Checking the files.

/// What the manifest says about one tensor.
#[derive(Debug)]
struct Want {
    name: Vec<u8>,
    dtype: String,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    nbytes: u64,
    sha256: String,
}

fn wants(file: &Value) -> Vec<Want> {
    file["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| Want {
            name: unhex(t["name_hex"].as_str().expect("name_hex")),
            dtype: t["dtype"].as_str().expect("dtype").to_string(),
            shape: u64_list(&t["shape"]),
            lod: lod_list(&t["lod"]),
            nbytes: t["nbytes"].as_u64().expect("nbytes"),
            sha256: t["sha256"].as_str().expect("sha256").to_string(),
        })
        .collect()
}

/// Layout facts read with the table layer: (records_len, first data block offset, data blocks,
/// data blocks stored snappy-compressed).
fn layout(bytes: &[u8], records_len: u64) -> Value {
    let t = Table::open(bytes, TableReadOptions::default()).expect("table");
    let index_offset = t
        .first_data_offset()
        .expect("a native file has a data block");
    let snappy = (0..t.data_blocks())
        .filter(|&i| {
            let h = t.block_handle(i);
            bytes[usize::try_from(h.offset + h.size).unwrap()] == 1
        })
        .count();
    json!({
        "records_len": records_len,
        "index_offset": index_offset,
        "dead_bytes": index_offset - records_len,
        "data_blocks": t.data_blocks(),
        "snappy_blocks": snappy,
    })
}

/// Opens, verifies and reads one file against its manifest entry.
fn check_file(path: &Path, want: &Value) {
    let what = path.file_name().unwrap().to_string_lossy().into_owned();
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(bytes.len() as u64, want["len"], "{what}: length");
    assert_eq!(
        sha256_hex(&bytes),
        want["sha256"],
        "{what}: the bytes changed; compatibility files are frozen (add new ones instead)"
    );

    // The engine.
    let r = Reader::open(path).unwrap_or_else(|e| panic!("{what}: open: {e}"));
    let h = r.header();
    assert_eq!(
        u64::from(h.format_version),
        want["format_version"],
        "{what}"
    );
    assert_eq!(u64::from(h.alignment), want["alignment"], "{what}");
    assert_eq!(h.records_sorted, want["records_sorted"], "{what}");
    assert_eq!(
        h.tensor_count,
        want["tensors"].as_array().unwrap().len() as u64,
        "{what}"
    );
    assert_eq!(
        layout(&bytes, h.records_len),
        want["layout"],
        "{what}: layout"
    );
    let metadata = metadata_from_json(&want["metadata"]);
    assert_eq!(h.metadata, metadata, "{what}: metadata");
    let rep = r.verify().unwrap_or_else(|e| panic!("{what}: verify: {e}"));
    let counts =
        json!({"blocks": rep.blocks, "tensors": rep.tensors, "data_bytes": rep.data_bytes});
    assert_eq!(counts, want["verify"], "{what}: verify counts");

    let tensors = wants(want);
    let names: Vec<Vec<u8>> = r.iter().map(|t| t.unwrap().name().to_vec()).collect();
    let want_names: Vec<Vec<u8>> = tensors.iter().map(|t| t.name.clone()).collect();
    assert_eq!(names, want_names, "{what}: tensor names in order");
    for t in &tensors {
        let tn = format!("{what}: tensor {}", name::display(&t.name));
        let v = r.tensor(&t.name).unwrap_or_else(|e| panic!("{tn}: {e}"));
        assert_eq!(v.dtype().name(), t.dtype, "{tn}");
        assert_eq!(v.shape(), t.shape, "{tn}");
        assert_eq!(v.lod().unwrap().to_vec(), t.lod, "{tn}");
        assert_eq!(v.data().len() as u64, t.nbytes, "{tn}");
        assert_eq!(sha256_hex(v.data()), t.sha256, "{tn}");
        v.verify_crc().unwrap_or_else(|e| panic!("{tn}: {e}"));
        v.check_record().unwrap_or_else(|e| panic!("{tn}: {e}"));
    }

    // The same file through the registry.
    let s = open_any(path).unwrap_or_else(|e| panic!("{what}: open_any: {e}"));
    assert_eq!(s.format(), Format::Native, "{what}");
    assert_eq!(
        s.metadata().unwrap(),
        metadata,
        "{what}: metadata via open_any"
    );
    let list = s.list().unwrap_or_else(|e| panic!("{what}: list: {e}"));
    assert_eq!(list.len(), tensors.len(), "{what}: listed tensors");
    for (info, t) in list.iter().zip(&tensors) {
        let tn = format!("{what}: open_any tensor {}", name::display(&t.name));
        assert_eq!(info.name, t.name, "{tn}");
        assert_eq!(info.kind.name(), t.dtype, "{tn}");
        assert_eq!(info.shape, t.shape, "{tn}");
        assert_eq!(info.lod, t.lod, "{tn}");
        assert_eq!(info.nbytes, t.nbytes, "{tn}");
        let loaded = s
            .load(&t.name)
            .unwrap_or_else(|e| panic!("{tn}: {e}"))
            .unwrap_or_else(|| panic!("{tn}: not found"));
        assert_eq!(&loaded.info, info, "{tn}");
        let TensorData::Bytes(data) = &loaded.data else {
            panic!("{tn}: a native tensor loads as bytes")
        };
        assert_eq!(sha256_hex(data), t.sha256, "{tn}");
    }
    let sum = s
        .verify(1)
        .unwrap_or_else(|e| panic!("{what}: store verify: {e}"));
    assert_eq!(
        (sum.tensors, sum.data_bytes),
        (rep.tensors, rep.data_bytes),
        "{what}: store verify"
    );
}

#[test]
fn every_v1_file_opens_verifies_and_matches_the_manifest() {
    let dir = dir();
    let manifest = read_json(&dir.join(MANIFEST));
    assert_eq!(manifest["format_version"], 1);
    let listed: BTreeMap<String, &Value> = manifest["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| (f["file"].as_str().expect("file").to_string(), f))
        .collect();
    let present: BTreeSet<String> = fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|f| f != MANIFEST)
        .collect();
    let unlisted: Vec<&String> = present
        .iter()
        .filter(|f| !listed.contains_key(*f))
        .collect();
    let missing: Vec<&String> = listed.keys().filter(|f| !present.contains(*f)).collect();
    assert!(
        unlisted.is_empty(),
        "files in {} not in the manifest: {unlisted:?}",
        dir.display()
    );
    assert!(
        missing.is_empty(),
        "manifest files missing from {}: {missing:?}",
        dir.display()
    );
    assert!(!listed.is_empty());
    for (file, want) in &listed {
        check_file(&dir.join(file), want);
    }
}

/// The folder holds what it claims to: a removed or changed case would leave a gap.
#[test]
fn the_v1_files_cover_the_format() {
    let manifest = read_json(&dir().join(MANIFEST));
    let files = manifest["files"].as_array().unwrap();
    let tensors: Vec<Want> = files.iter().flat_map(wants).collect();
    let dtypes: BTreeSet<&str> = tensors.iter().map(|t| t.dtype.as_str()).collect();
    // The dtypes of version 1's time: those with a Paddle number (the low-precision ones added
    // later have none; tests/compat_v2.rs covers them).
    for d in DType::ALL
        .into_iter()
        .filter(|d| d.paddle_number().is_some())
    {
        assert!(dtypes.contains(d.name()), "no {} tensor", d.name());
    }
    let any = |f: &dyn Fn(&Want) -> bool| tensors.iter().any(f);
    assert!(any(&|t| t.shape.is_empty()), "a scalar");
    assert!(any(&|t| t.shape.contains(&0)), "a zero-size tensor");
    assert!(
        any(&|t| t.lod.len() == 1) && any(&|t| t.lod.len() == 2),
        "LoD, 1 and 2 levels"
    );
    assert!(
        any(&|t| std::str::from_utf8(&t.name).is_err()),
        "a name that is not UTF-8"
    );
    assert!(any(&|t| t.name.len() >= 4096), "a long name");
    let file = |f: &dyn Fn(&Value) -> bool| files.iter().any(f);
    assert!(
        file(&|f| f["tensors"].as_array().unwrap().is_empty()),
        "a file without tensors"
    );
    assert!(
        file(&|f| f["alignment"] == 1) && file(&|f| f["alignment"] == 4096),
        "alignments"
    );
    assert!(
        file(&|f| f["layout"]["snappy_blocks"].as_u64() > Some(0)),
        "a snappy index"
    );
    assert!(
        file(&|f| f["layout"]["data_blocks"].as_u64() > Some(2)),
        "several index blocks"
    );
    assert!(
        file(&|f| f["layout"]["dead_bytes"].as_u64() > Some(0)),
        "dead space"
    );
    assert!(
        file(&|f| f["records_sorted"] == false),
        "records not in name order"
    );
    assert!(file(&|f| f["file"] == "streamed.pdx"), "streamed tensors");
    let types: BTreeSet<&str> = files
        .iter()
        .flat_map(|f| f["metadata"].as_object().unwrap().values())
        .filter_map(|v| v.as_object()?.keys().next().map(String::as_str))
        .collect();
    for t in ["string", "int", "float", "bool", "bytes", "list"] {
        assert!(types.contains(t), "no {t} metadata value");
    }
}

// ---------------------------------------------------------------------------------------------
// Metadata in the manifest: every value tagged by type, floats as Rust's shortest round-trip text
// (`NaN`, `inf`, `-0.0` included), so the comparison is bit for bit.

fn meta_to_json(v: &MetaValue) -> Value {
    match v {
        MetaValue::String(s) => json!({ "string": s }),
        MetaValue::Int(i) => json!({ "int": i }),
        MetaValue::Float(f) => json!({ "float": format!("{f:?}") }),
        MetaValue::Bool(b) => json!({ "bool": b }),
        MetaValue::Bytes(b) => json!({ "bytes": hex(b) }),
        MetaValue::List(l) => json!({ "list": l.iter().map(meta_to_json).collect::<Vec<_>>() }),
    }
}

fn meta_from_json(v: &Value) -> MetaValue {
    let (kind, x) = v
        .as_object()
        .and_then(|o| o.iter().next())
        .expect("{type: value}");
    match kind.as_str() {
        "string" => MetaValue::String(x.as_str().unwrap().to_string()),
        "int" => MetaValue::Int(x.as_i64().unwrap()),
        "float" => MetaValue::Float(x.as_str().unwrap().parse().unwrap()),
        "bool" => MetaValue::Bool(x.as_bool().unwrap()),
        "bytes" => MetaValue::Bytes(unhex(x.as_str().unwrap())),
        "list" => MetaValue::List(x.as_array().unwrap().iter().map(meta_from_json).collect()),
        other => panic!("unknown metadata type {other:?} in the manifest"),
    }
}

fn metadata_to_json(m: &Metadata) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.to_string(), meta_to_json(v)))
            .collect(),
    )
}

fn metadata_from_json(v: &Value) -> Metadata {
    let mut m = Metadata::new();
    for (k, v) in v.as_object().expect("metadata object") {
        m.insert(k.as_str(), meta_from_json(v)).unwrap();
    }
    m
}

// ---------------------------------------------------------------------------------------------
// Writing the files (run once per case; the results are checked in).

/// One tensor of a case.
struct Input {
    name: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    data: Vec<u8>,
    /// Written with `Writer::begin` in 7-byte chunks rather than `Writer::add`.
    streamed: bool,
}

fn input(name: impl Into<Vec<u8>>, dtype: DType, shape: &[u64]) -> Input {
    let n = usize::try_from(shape.iter().product::<u64>()).unwrap();
    let name = name.into();
    let seed = name
        .iter()
        .fold(7u8, |a, b| a.wrapping_mul(31).wrapping_add(*b));
    let data = (0..n * dtype.size())
        .map(|i| match dtype {
            DType::Bool => (i % 2) as u8,
            _ => (i as u8).wrapping_mul(37).wrapping_add(seed),
        })
        .collect();
    Input {
        name,
        dtype,
        shape: shape.to_vec(),
        lod: Vec::new(),
        data,
        streamed: false,
    }
}

impl Input {
    fn lod(self, lod: &[&[u64]]) -> Input {
        let lod = lod.iter().map(|l| l.to_vec()).collect();
        Input { lod, ..self }
    }
    fn streamed(self) -> Input {
        Input {
            streamed: true,
            ..self
        }
    }
    fn data(self, data: Vec<u8>) -> Input {
        Input { data, ..self }
    }
}

/// One file: its tensors in the order they are added, its metadata, and the metadata it is
/// then changed to in place, one `rewrite_in_place` after another.
struct Case {
    file: &'static str,
    about: &'static str,
    opts: WriterOptions,
    tensors: Vec<Input>,
    metadata: Metadata,
    rewrites: Vec<Metadata>,
}

fn case(file: &'static str, about: &'static str, tensors: Vec<Input>) -> Case {
    Case {
        file,
        about,
        opts: WriterOptions::default(),
        tensors,
        metadata: Metadata::new(),
        rewrites: Vec::new(),
    }
}

fn metadata(entries: Vec<(&str, MetaValue)>) -> Metadata {
    let mut m = Metadata::new();
    for (k, v) in entries {
        m.insert(k, v).unwrap();
    }
    m
}

fn cases() -> Vec<Case> {
    use DType::*;
    use MetaValue as M;
    let f32s = |v: &[f32]| support::f32_bytes(v);
    let mut all =
        vec![
        case(
            "golden.pdx",
            "SPEC.md's golden file: float32 w = [1, 2], default options",
            vec![input("w", Float32, &[2]).data(f32s(&[1.0, 2.0]))],
        ),
        Case {
            metadata: metadata(vec![("step", M::Int(5))]),
            ..case(
                "golden_metadata.pdx",
                "SPEC.md's golden file with metadata {\"step\": 5} (SPEC.md 5.3)",
                vec![input("w", Float32, &[2]).data(f32s(&[1.0, 2.0]))],
            )
        },
        case(
            "dtypes.pdx",
            "one [2, 3] tensor of every dtype, named by the dtype",
            DType::ALL
                .iter()
                .map(|&d| input(d.name(), d, &[2, 3]))
                .collect(),
        ),
        case(
            "shapes.pdx",
            "a scalar, zero-size tensors, rank 1 to 4",
            vec![
                input("scalar", Float32, &[]).data(f32s(&[3.5])),
                input("zero", Float32, &[0]),
                input("zero_inner", Int16, &[4, 0, 2]),
                input("rank4", Float64, &[1, 2, 1, 3]),
                input("vector", UInt8, &[300]),
            ],
        ),
        case(
            "lod.pdx",
            "Paddle LoD tensors with 1 and 2 levels, and one without",
            vec![
                input("lod1", Float32, &[5, 1]).lod(&[&[0, 2, 5]]),
                input("lod2", Int64, &[6]).lod(&[&[0, 1, 3], &[0, 2, 4, 6]]),
                input("plain", Int32, &[2]),
            ],
        ),
        Case {
            metadata: metadata(vec![
                ("bool_false", M::Bool(false)),
                ("bool_true", M::Bool(true)),
                ("bytes", M::Bytes(vec![0, 1, 0x7f, 0x80, 0xff])),
                ("bytes_empty", M::Bytes(vec![])),
                ("float", M::Float(0.1)),
                ("float_inf", M::Float(f64::INFINITY)),
                ("float_nan", M::Float(f64::NAN)),
                ("float_neg_inf", M::Float(f64::NEG_INFINITY)),
                ("float_neg_zero", M::Float(-0.0)),
                ("int", M::Int(42)),
                ("int_max", M::Int(i64::MAX)),
                ("int_min", M::Int(i64::MIN)),
                ("int_zero", M::Int(0)),
                (
                    "list",
                    M::List(vec![
                        M::Int(1),
                        M::String("two".into()),
                        M::Float(3.0),
                        M::Bool(false),
                        M::Bytes(vec![4]),
                        M::List(vec![]),
                    ]),
                ),
                ("list_empty", M::List(vec![])),
                (
                    "list_nested",
                    M::List(vec![M::List(vec![M::Int(1), M::List(vec![M::Int(2)])])]),
                ),
                ("string", M::String("llama 3 ✓".into())),
                ("string_empty", M::String(String::new())),
                ("ключ", M::String("a key that is not ASCII".into())),
            ]),
            ..case(
                "metadata.pdx",
                "metadata of every value type, with edge values (SPEC.md 5.3)",
                vec![input("w", Float32, &[2])],
            )
        },
        Case {
            opts: WriterOptions {
                compression: Compression::Snappy,
                block_size: 512,
                ..WriterOptions::default()
            },
            ..case(
                "snappy.pdx",
                "a snappy-compressed index over several 512-byte blocks",
                (0..24)
                    .flat_map(|i| {
                        ["gate", "up"].map(|p| {
                            input(format!("model.layers.{i:02}.mlp.{p}_proj.weight"), Float16, &[4])
                        })
                    })
                    .collect(),
            )
        },
        Case {
            opts: WriterOptions {
                block_size: 64,
                restart_interval: 2,
                ..WriterOptions::default()
            },
            ..case(
                "blocks.pdx",
                "many small index blocks (block size 64, restart interval 2), and a key longer \
                 than twice the block size",
                (0..40)
                    .map(|i| input(format!("t.{i:03}"), Int8, &[1]))
                    .chain([input(vec![b'u'; 200], Int8, &[1])])
                    .collect(),
            )
        },
        Case {
            opts: WriterOptions {
                alignment: 1,
                ..WriterOptions::default()
            },
            ..case(
                "align1.pdx",
                "alignment 1: records packed back to back",
                vec![
                    input("a", UInt8, &[3]),
                    input("b", Int16, &[5]),
                    input("c", Float64, &[1]),
                    input("d", Bool, &[7]),
                ],
            )
        },
        Case {
            opts: WriterOptions {
                alignment: 4096,
                ..WriterOptions::default()
            },
            ..case(
                "align4096.pdx",
                "alignment 4096, the largest",
                vec![input("a", Float32, &[3]), input("b", Int8, &[5])],
            )
        },
        case("empty.pdx", "a file with no tensors", vec![]),
        case(
            "names.pdx",
            "names that are not UTF-8, hold NUL or control bytes, share prefixes or are long \
             (300 and 5000 bytes), added in reverse order (records not sorted)",
            {
                let mut long = b"long/".to_vec();
                long.extend((0..4995u32).map(|i| b'a' + (i % 26) as u8));
                let mut names: Vec<Vec<u8>> = vec![
                    vec![0xff, 0xfe],
                    vec![0x80],
                    b"a\0b".to_vec(),
                    b"\x1b[31mred".to_vec(),
                    "ünïcödé.wëight".as_bytes().to_vec(),
                    "😀".as_bytes().to_vec(),
                    b"a".to_vec(),
                    b"ab".to_vec(),
                    b"a.b".to_vec(),
                    vec![b'x'; 300],
                    long,
                ];
                names.sort();
                names.reverse();
                names.into_iter().map(|n| input(n, Float32, &[1])).collect()
            },
        ),
        case(
            "streamed.pdx",
            "tensors streamed with Writer::begin (one with LoD, one of zero size) between added \
             ones",
            vec![
                input("added", Float32, &[2]),
                input("streamed", Float32, &[250]).streamed(),
                input("streamed_lod", Int32, &[4]).lod(&[&[0, 1, 4]]).streamed(),
                input("streamed_zero", Float64, &[0, 3]).streamed(),
                input("z_added", UInt16, &[3]),
            ],
        ),
        Case {
            metadata: metadata(vec![("stage", M::String("train".into())), ("step", M::Int(1))]),
            rewrites: vec![
                metadata(vec![("step", M::Int(2))]),
                metadata(vec![
                    ("note", M::String("changed in place twice".into())),
                    ("step", M::Int(3)),
                ]),
            ],
            ..case(
                "rewritten.pdx",
                "metadata changed in place twice (rewrite_in_place): two dead indexes between \
                 the records and the live one (SPEC.md 10.1)",
                vec![
                    input("a", Float32, &[4]),
                    input("b", BFloat16, &[2, 2]),
                    input("c", Int64, &[1]),
                ],
            )
        },
    ];
    for c in &mut all {
        c.opts.sync = false;
    }
    all
}

fn write_case(c: &Case, path: &Path) {
    let mut w = Writer::create_with(path, c.opts.clone()).unwrap();
    for t in &c.tensors {
        if t.streamed {
            let mut s = w.begin(&t.name, t.dtype, &t.shape, &t.lod).unwrap();
            for chunk in t.data.chunks(7) {
                s.write_all(chunk).unwrap();
            }
            s.finish().unwrap();
        } else {
            let tensor = Tensor::new(t.dtype, &t.shape, &t.data).with_lod(&t.lod);
            w.add(&t.name, tensor).unwrap();
        }
    }
    w.set_metadata(c.metadata.clone()).unwrap();
    w.finish().unwrap();
    for m in &c.rewrites {
        rewrite_in_place(path, m, false).unwrap();
    }
}

/// The manifest entry of a case: everything from what was written, except the layout and the
/// block count, which only the file can say.
fn manifest_entry(c: &Case, bytes: &[u8]) -> Value {
    let mut sorted: Vec<&Input> = c.tensors.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let records_sorted = c.tensors.windows(2).all(|w| w[0].name < w[1].name);
    let metadata = c.rewrites.last().unwrap_or(&c.metadata);
    let r = Reader::from_bytes(bytes.to_vec()).unwrap();
    let blocks = r.verify().unwrap().blocks;
    let data_bytes: u64 = c.tensors.iter().map(|t| t.data.len() as u64).sum();
    json!({
        "file": c.file,
        "about": c.about,
        "sha256": sha256_hex(bytes),
        "len": bytes.len(),
        "format_version": 1,
        "alignment": c.opts.alignment,
        "records_sorted": records_sorted,
        "layout": layout(bytes, r.header().records_len),
        "metadata": metadata_to_json(metadata),
        "verify": {"blocks": blocks, "tensors": c.tensors.len(), "data_bytes": data_bytes},
        "tensors": sorted.iter().map(|t| {
            let mut e = json!({
                "name_hex": hex(&t.name),
                "dtype": t.dtype.name(),
                "shape": t.shape,
                "lod": t.lod,
                "nbytes": t.data.len(),
                "sha256": sha256_hex(&t.data),
            });
            // For readers of the manifest; the test goes by `name_hex`.
            if t.name.len() <= 64 {
                e["name"] = name::display(&t.name).into();
            }
            e
        }).collect::<Vec<_>>(),
    })
}

/// Writes the files of every case that is missing from `tests/data/native/v1/`, checks that the
/// ones present are still written byte for byte the same, and rewrites the manifest.
#[test]
#[ignore = "writes tests/data/native/v1; run by hand to add a case"]
fn regenerate() {
    // The writer writes version 1 for a file that uses nothing of a later version (checked
    // for each case below), so the v1 cases can still be written and compared byte for byte.
    let dir = dir();
    fs::create_dir_all(&dir).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let mut entries = Vec::new();
    for c in cases() {
        let fresh = tmp.path().join(c.file);
        write_case(&c, &fresh);
        let bytes = fs::read(&fresh).unwrap();
        assert_eq!(
            Reader::from_bytes(bytes.clone())
                .unwrap()
                .header()
                .format_version,
            1,
            "{}: a v1 case must be written as format version 1",
            c.file
        );
        let target = dir.join(c.file);
        match fs::read(&target) {
            Ok(old) => assert!(
                old == bytes,
                "{} exists with other bytes; compatibility files are never rewritten",
                c.file
            ),
            Err(_) => fs::write(&target, &bytes).unwrap(),
        }
        let entry = manifest_entry(&c, &bytes);
        check_file(&target, &entry);
        entries.push(entry);
    }
    let manifest = json!({
        "about": "Native files written by format version 1. Every later version must read them \
                  as described here (tests/compat.rs). Never change or remove one.",
        "format_version": 1,
        "files": entries,
    });
    let text = serde_json::to_string_pretty(&manifest).unwrap() + "\n";
    // Written only when it changes, so a concurrent run of the check never reads half of it.
    if fs::read_to_string(dir.join(MANIFEST)).ok().as_deref() != Some(text.as_str()) {
        fs::write(dir.join(MANIFEST), text).unwrap();
    }
}
