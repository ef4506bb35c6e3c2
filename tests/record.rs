//! Record codec against files written by PaddlePaddle 3.3.1 (tests/data/paddle).

mod support;

use std::collections::BTreeSet;
use std::fs;

use paramdex::raw::format::{crc32c, mask_crc};
use paramdex::raw::proto::paddle::var_type::TensorDesc;
use paramdex::raw::record::{
    decode_header, decode_record, encode_header, validate_lod, walk, RecordSpec,
};
use paramdex::DType;
use prost::Message;
use serde_json::Value;
use support::{lod_list, read_json, sha256_hex, u64_list};

/// The manifest's dtype spellings (numpy / paddle names), mapped explicitly.
fn manifest_dtype(name: &str) -> DType {
    match name {
        "bool" => DType::Bool,
        "int8" => DType::Int8,
        "uint8" => DType::UInt8,
        "int16" => DType::Int16,
        "uint16" => DType::UInt16,
        "int32" => DType::Int32,
        "uint32" => DType::UInt32,
        "int64" => DType::Int64,
        "uint64" => DType::UInt64,
        "float16" | "fp16" => DType::Float16,
        "bfloat16" | "bf16" => DType::BFloat16,
        "float32" | "fp32" => DType::Float32,
        "float64" | "fp64" => DType::Float64,
        "complex64" => DType::Complex64,
        "complex128" => DType::Complex128,
        "float8_e4m3fn" => DType::Float8E4M3FN,
        "float8_e5m2" => DType::Float8E5M2,
        other => panic!("unmapped manifest dtype {other:?}"),
    }
}

/// What the manifest says about one tensor.
struct Expected {
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    nbytes: u64,
    sha256: String,
}

fn expected(t: &Value) -> Expected {
    let dtype = manifest_dtype(t["dtype"].as_str().expect("dtype"));
    if let Some(code) = t["paddle_vartype"].as_i64() {
        assert_eq!(i64::from(dtype.paddle_code()), code, "{t}");
    }
    Expected {
        dtype,
        shape: u64_list(&t["shape"]),
        lod: lod_list(&t["lod"]),
        nbytes: t["nbytes"].as_u64().expect("nbytes"),
        sha256: t["sha256"].as_str().expect("sha256").to_string(),
    }
}

/// Checks one decoded record against the manifest, and that re-encoding it without paramdex
/// fields reproduces Paddle's bytes exactly.
fn check_record(what: &str, record: &[u8], want: &Expected) {
    let (h, data) = decode_record(record, 0).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(h.dtype, want.dtype, "{what}");
    assert_eq!(h.dims.as_slice(), want.shape.as_slice(), "{what}");
    assert_eq!(h.lod.to_vec(), want.lod, "{what}");
    assert_eq!(h.lod.levels(), want.lod.len(), "{what}");
    assert_eq!(h.name, None, "{what}");
    assert_eq!(h.data_crc, None, "{what}");
    assert_eq!(h.data_len, want.nbytes, "{what}");
    assert_eq!(h.record_len(), record.len() as u64, "{what}");
    assert_eq!(sha256_hex(data), want.sha256, "{what}");
    assert_eq!(validate_lod(&want.lod, &want.shape), Ok(()), "{what}");

    let lod = h.lod.to_vec();
    let spec = RecordSpec {
        dtype: h.dtype,
        dims: &h.dims,
        lod: &lod,
        name: None,
        data_crc: None,
        full_shape: None,
        stored_len: None,
    };
    let mut out = Vec::new();
    let layout = encode_header(&spec, 0, 1, &mut out).unwrap();
    assert_eq!(layout.header_len, h.header_len, "{what}");
    assert_eq!(layout.crc_pos, None, "{what}");
    out.extend_from_slice(data);
    assert_eq!(
        out, record,
        "{what}: re-encoding differs from Paddle's bytes"
    );

    // With every paramdex field, Paddle's TensorDesc (prost, skipping unknown fields) still reads
    // the same dtype and dims, and our decoder gets everything back.
    let crc = mask_crc(crc32c(data));
    let name = format!("pdx/{what}");
    for (offset, alignment) in [(0u64, 64u64), (13, 4096), (1001, 8)] {
        let spec = RecordSpec {
            name: Some(name.as_bytes()),
            data_crc: Some(crc),
            full_shape: None,
            ..spec
        };
        let mut out = Vec::new();
        let layout = encode_header(&spec, offset, alignment, &mut out).unwrap();
        assert_eq!((offset + layout.header_len as u64) % alignment, 0, "{what}");
        let desc_at = 20 + lod.iter().map(|l| 8 + 8 * l.len()).sum::<usize>();
        let desc = TensorDesc::decode(&out[desc_at..]).unwrap();
        assert_eq!(desc.data_type, want.dtype.paddle_code(), "{what}");
        let dims: Vec<u64> = desc.dims.iter().map(|&d| d as u64).collect();
        assert_eq!(dims, want.shape, "{what}");
        out.extend_from_slice(data);
        let (h2, data2) = decode_record(&out, offset).unwrap();
        assert_eq!(h2.name, Some(name.as_bytes()), "{what}");
        assert_eq!(h2.data_crc, Some(crc), "{what}");
        assert_eq!(h2.lod.to_vec(), want.lod, "{what}");
        assert_eq!(data2, data, "{what}");
        assert_eq!(
            layout.crc_pos.map(|p| &out[p..p + 4]),
            Some(&crc.to_le_bytes()[..])
        );
    }
}

#[test]
fn paddle_lod_files_decode_and_reencode_exactly() {
    let dir = support::data("paddle").join("lod");
    let manifest = read_json(&dir.join("manifest.json"));
    let tensors = manifest["tensors"].as_array().expect("tensors");

    // Every fixture on disk: top-level *.lodtensor and save_vars/sv_*.
    let mut on_disk = BTreeSet::new();
    for e in fs::read_dir(&dir).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        if n.ends_with(".lodtensor") {
            on_disk.insert(n);
        }
    }
    for e in fs::read_dir(dir.join("save_vars")).unwrap() {
        let n = e.unwrap().file_name().into_string().unwrap();
        if n.starts_with("sv_") {
            on_disk.insert(format!("save_vars/{n}"));
        }
    }
    let listed: BTreeSet<String> = tensors
        .iter()
        .map(|t| t["file"].as_str().expect("file").to_string())
        .collect();
    assert_eq!(on_disk, listed, "fixtures and manifest disagree");
    assert!(on_disk.len() >= 18, "only {} fixtures", on_disk.len());

    let mut with_lod = 0;
    for t in tensors {
        let file = t["file"].as_str().unwrap();
        let bytes = fs::read(dir.join(file)).unwrap();
        let want = expected(t);
        with_lod += usize::from(!want.lod.is_empty());
        check_record(file, &bytes, &want);
        // A one-record file is also a one-record stream ending at EOF.
        let mut w = walk(&bytes, 0);
        assert!(w.next().unwrap().is_ok(), "{file}");
        assert!(w.next().is_none(), "{file}");
        assert_eq!(w.position(), bytes.len(), "{file}");
        // Any truncation is an error.
        for n in 0..bytes.len() {
            assert!(decode_header(&bytes[..n], 0).is_err(), "{file} cut at {n}");
        }
    }
    assert_eq!(with_lod, 4);
}

#[test]
fn paddle_combined_streams_walk_to_eof() {
    let dir = support::data("paddle").join("inference");
    let manifest = read_json(&dir.join("manifest.json"));
    let tensors = manifest["tensors"].as_array().expect("tensors");
    for mode in ["legacy", "pir"] {
        let rel = format!("{mode}/model.pdiparams");
        let bytes = fs::read(dir.join(&rel)).unwrap();
        let order = read_json(&dir.join(format!("{rel}.order.json")));
        let order: Vec<&str> = order
            .as_array()
            .expect("order list")
            .iter()
            .map(|v| v.as_str().expect("name"))
            .collect();
        assert!(!order.is_empty());

        let mut w = walk(&bytes, 0);
        let records: Vec<_> = w
            .by_ref()
            .collect::<paramdex::Result<Vec<_>>>()
            .unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert_eq!(records.len(), order.len(), "{rel}");
        assert_eq!(
            w.position(),
            bytes.len(),
            "{rel}: walk must end exactly at EOF"
        );
        let mut end = 0u64;
        for (i, (offset, h, data)) in records.iter().enumerate() {
            assert_eq!(*offset, end, "{rel} record {i}");
            end = offset + h.record_len();
            let t = tensors
                .iter()
                .find(|t| t["file"] == rel.as_str() && t["record_index"] == i)
                .unwrap_or_else(|| panic!("{rel}: no manifest entry for record {i}"));
            assert_eq!(t["name"], order[i], "{rel} record {i}");
            assert_eq!(t["record_offset"].as_u64(), Some(*offset));
            assert_eq!(t["record_end"].as_u64(), Some(end));
            let want = expected(t);
            assert_eq!(sha256_hex(data), want.sha256, "{rel} {}", order[i]);
            let record = &bytes[*offset as usize..end as usize];
            check_record(order[i], record, &want);
        }
        assert_eq!(end, bytes.len() as u64);

        // One trailing byte is an error (Paddle's load_combine also refuses it); so is a cut.
        let mut longer = bytes.clone();
        longer.push(0);
        let results: Vec<_> = walk(&longer, 0).collect();
        assert_eq!(results.len(), order.len() + 1);
        assert!(results.last().unwrap().is_err());
        let results: Vec<_> = walk(&bytes[..bytes.len() - 1], 0).collect();
        assert_eq!(results.len(), order.len());
        assert!(results.last().unwrap().is_err());
    }
}

/// A pickle (.pdparams) handed to the record reader gets a message saying what it is.
#[test]
fn pickle_is_diagnosed() {
    let e = decode_header(b"\x80\x02}q\x00(X", 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("Python pickle"), "{e}");
}
