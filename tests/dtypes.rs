//! The low-precision dtypes (SPEC.md 6) through every format that has them: safetensors files
//! as the `safetensors` crate writes them (as torch + safetensors do), native files, TensorFlow
//! checkpoints written by paramdex's own TensorFlow writer; and hostile inputs.

use std::collections::BTreeMap;
use std::path::Path;

use paramdex::interop::{export, open_any, ExportOptions, Kind, OutputFormat, TensorStore};
use paramdex::raw::entry::IndexEntry;
use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{DType, Error, Reader, Tensor, Writer};
use safetensors::tensor::TensorView;
use safetensors::Dtype as St;

type Contents = BTreeMap<Vec<u8>, (Kind, Vec<u64>, Vec<u8>)>;

/// Every tensor of `store`: kind, shape, bytes.
fn contents(store: &dyn TensorStore) -> Contents {
    store
        .list()
        .unwrap()
        .into_iter()
        .map(|i| {
            let t = store.load(&i.name).unwrap().unwrap();
            (
                i.name.clone(),
                (i.kind, i.shape.clone(), t.data.raw_bytes().into_owned()),
            )
        })
        .collect()
}

fn bytes(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed))
        .collect()
}

/// One safetensors tensor: name, safetensors dtype, safetensors shape (values), bytes, and the
/// paramdex dtype and shape it reads as.
type StCase = (&'static str, St, Vec<usize>, Vec<u8>, DType, Vec<u64>);

fn st_cases() -> Vec<StCase> {
    vec![
        (
            "e8m0",
            St::F8_E8M0,
            vec![4],
            bytes(4, 1),
            DType::Float8E8M0FNU,
            vec![4],
        ),
        (
            "e4fnuz",
            St::F8_E4M3FNUZ,
            vec![2, 2],
            bytes(4, 2),
            DType::Float8E4M3FNUZ,
            vec![2, 2],
        ),
        (
            "e5fnuz",
            St::F8_E5M2FNUZ,
            vec![3],
            bytes(3, 3),
            DType::Float8E5M2FNUZ,
            vec![3],
        ),
        // F4: the header counts values, paramdex (as torch) bytes.
        (
            "fp4",
            St::F4,
            vec![2, 6],
            bytes(6, 4),
            DType::Float4E2M1FNx2,
            vec![2, 3],
        ),
        // F6: 4 values in 3 bytes.
        (
            "fp6a",
            St::F6_E2M3,
            vec![8],
            bytes(6, 5),
            DType::Float6E2M3FNx4,
            vec![6],
        ),
        (
            "fp6b",
            St::F6_E3M2,
            vec![2, 4],
            bytes(6, 6),
            DType::Float6E3M2FNx4,
            vec![2, 3],
        ),
    ]
}

fn write_st(path: &Path, tensors: &[(&str, St, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

#[test]
fn safetensors_low_precision_round_trips_byte_exact() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.safetensors");
    let cases = st_cases();
    let st: Vec<_> = cases
        .iter()
        .map(|c| (c.0, c.1, c.2.clone(), c.3.clone()))
        .collect();
    write_st(&src, &st);

    let input = open_any(&src).unwrap();
    let got = contents(input.as_ref());
    for (name, _, _, data, dtype, shape) in &cases {
        let (kind, s, b) = &got[name.as_bytes()];
        assert_eq!(*kind, Kind::Numeric(*dtype), "{name}");
        assert_eq!(s, shape, "{name}");
        assert_eq!(b, data, "{name}");
    }

    // Into a native file and back out to safetensors: the same dtypes, shapes and bytes.
    let native = dir.path().join("mid.pdx");
    export(
        input.as_ref(),
        OutputFormat::Native,
        &native,
        &ExportOptions::default(),
    )
    .unwrap();
    let r = Reader::open(&native).unwrap();
    assert_eq!(contents(&r), got);
    for (name, _, _, data, dtype, shape) in &cases {
        let t = r.tensor(name).unwrap();
        assert_eq!(
            (t.dtype(), t.shape(), t.data()),
            (*dtype, shape.as_slice(), data.as_slice())
        );
        t.check_record().unwrap();
    }
    let out = dir.path().join("out.safetensors");
    export(
        &r,
        OutputFormat::Safetensors,
        &out,
        &ExportOptions::default(),
    )
    .unwrap();
    let back = std::fs::read(&out).unwrap();
    let back = safetensors::SafeTensors::deserialize(&back).unwrap();
    for (name, d, shape, data, _, _) in &cases {
        let t = back.tensor(name).unwrap();
        assert_eq!(
            (t.dtype(), t.shape(), t.data()),
            (*d, shape.as_slice(), data.as_slice())
        );
    }
}

/// What TensorFlow sees in a native file: field 1 of each entry, and paramdex's field 18.
#[test]
fn native_entries_carry_tensorflow_numbers_or_field_18() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.pdx");
    let mut w = Writer::create(&path).unwrap();
    for d in DType::ALL {
        w.add(d.name(), Tensor::new(d, &[3], &bytes(3 * d.size(), 9)))
            .unwrap();
    }
    w.finish().unwrap();
    let file = std::fs::read(&path).unwrap();
    let table = Table::open(&file, TableReadOptions::default()).unwrap();
    for d in DType::ALL {
        let e = table
            .get(d.name().as_bytes(), |v, at| IndexEntry::decode(v, at, 254))
            .unwrap()
            .unwrap()
            .unwrap();
        match d.tf_number() {
            Some(n) => assert_eq!((e.tf_dtype, e.pdx_dtype), (n, 0), "{d}"),
            None => assert_eq!((e.tf_dtype, e.pdx_dtype), (4, d.pdx_code().unwrap()), "{d}"),
        }
        // Paddle sees the types it lacks as uint8 records.
        let at = e.offset - u64::from(e.record_header_len);
        let (h, _) = paramdex::raw::record::decode_record(&file[at as usize..], at).unwrap();
        let want = if d.paddle_number().is_some() {
            d
        } else {
            DType::UInt8
        };
        assert_eq!(h.dtype, want, "{d}");
    }
    let r = Reader::open(&path).unwrap();
    for d in DType::ALL {
        r.tensor(d.name()).unwrap().check_record().unwrap();
    }
}

#[test]
fn tensorflow_checkpoints_keep_the_types_tensorflow_has() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.pdx");
    let mut w = Writer::create(&path).unwrap();
    let has_tf: Vec<DType> = DType::ALL
        .into_iter()
        .filter(|d| d.tf_number().is_some())
        .collect();
    for &d in &has_tf {
        w.add(d.name(), Tensor::new(d, &[2, 2], &bytes(4 * d.size(), 3)))
            .unwrap();
    }
    w.add(
        "scales",
        Tensor::new(DType::Float8E8M0FNU, &[2], &[127, 128]),
    )
    .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();

    // A type TensorFlow has no number for is refused, naming it, before anything is written.
    let prefix = dir.path().join("ckpt");
    let e = export(
        &r,
        OutputFormat::TensorFlow,
        &prefix,
        &ExportOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(
        e.to_string()
            .contains("tensor scales is float8_e8m0fnu, which TensorFlow has no DataType for"),
        "{e}"
    );
    assert!(!dir.path().join("ckpt.index").exists());
    let rep = export(
        &r,
        OutputFormat::TensorFlow,
        &prefix,
        &ExportOptions {
            skip_unsupported: true,
            ..ExportOptions::default()
        },
    )
    .unwrap();
    assert_eq!(rep.skipped.len(), 1);

    let ckpt = open_any(&prefix).unwrap();
    let mut want = contents(&r);
    want.remove(b"scales".as_slice());
    assert_eq!(contents(ckpt.as_ref()), want);
    // int4 is DT_INT4 (29) in the checkpoint's index, as TensorFlow writes it.
    let file = std::fs::read(dir.path().join("ckpt.index")).unwrap();
    let table = Table::open(&file, TableReadOptions::default()).unwrap();
    let e = table
        .get(b"int4", |v, at| IndexEntry::decode(v, at, 254))
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(e.tf_dtype, 29);

    // And back into a native file.
    let again = dir.path().join("again.pdx");
    export(
        ckpt.as_ref(),
        OutputFormat::Native,
        &again,
        &ExportOptions::default(),
    )
    .unwrap();
    assert_eq!(contents(&Reader::open(&again).unwrap()), want);

    // Paddle has none of them: refused, naming the type.
    let e = export(
        &r,
        OutputFormat::PaddleCombined,
        &dir.path().join("m"),
        &ExportOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("which Paddle has no type for"),
        "{e}"
    );
}

#[test]
fn hostile_packed_and_unknown_inputs_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    // An odd F4 last dimension: 6 values (3 bytes), which the crate accepts, in a [2, 3] shape.
    let odd = dir.path().join("odd.safetensors");
    write_st(&odd, &[("w", St::F4, vec![2, 3], bytes(3, 0))]);
    let store = open_any(&odd).unwrap();
    let e = store.list().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("tensor w is safetensors F4 of shape [2, 3]")
            && text.contains("not a multiple of 2"),
        "{text}"
    );
    // F6 with a last dimension of 2 values... is not byte-aligned for the crate: [4, 2] is 48
    // bits; the header is valid, the shape is not whole groups.
    let f6 = dir.path().join("f6.safetensors");
    write_st(&f6, &[("v", St::F6_E2M3, vec![4, 2], bytes(6, 0))]);
    let e = open_any(&f6).unwrap().list().unwrap_err();
    assert!(e.to_string().contains("not a multiple of 4"), "{e}");

    // A packed tensor whose byte count does not match its shape.
    let mut w = Writer::create(dir.path().join("p.pdx")).unwrap();
    let e = w
        .add("p", Tensor::new(DType::Float4E2M1FNx2, &[3], &[0u8; 2]))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidTensor { .. }), "{e}");

    // An unknown dtype string of 10 KB: listed as a foreign type, its name cut to 64 bytes.
    let long = "X".repeat(10_240);
    let header = format!(r#"{{"w":{{"dtype":"{long}","shape":[1],"data_offsets":[0,1]}}}}"#);
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.push(7);
    let path = dir.path().join("unknown.safetensors");
    std::fs::write(&path, &file).unwrap();
    let list = open_any(&path).unwrap().list().unwrap();
    assert_eq!(list[0].kind.name().len(), 64);
    assert!(list[0].kind.name().ends_with("XX..."));
    assert_eq!((list[0].nbytes, list[0].shape.as_slice()), (1, &[1u64][..]));
    // Foreign tensors' offsets are still the crate's to check: overlapping data is refused.
    let bad = r#"{"a":{"dtype":"F9","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}"#;
    let mut file = (bad.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(bad.as_bytes());
    file.extend_from_slice(&[0; 3]);
    std::fs::write(&path, &file).unwrap();
    let e = open_any(&path).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
}

/// A safetensors file with a dtype string paramdex does not know (a newer safetensors'): the
/// other tensors read as ever; that one is listed under its safetensors name and byte size,
/// loads as its bytes, and is refused by every output, by name, unless skipped.
#[test]
fn an_unknown_safetensors_dtype_is_listed_not_fatal() {
    let dir = tempfile::tempdir().unwrap();
    let header = r#"{"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"z":{"dtype":"F8_E5M3","shape":[2,2],"data_offsets":[8,12]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64, 1, 2, 3, 4]);
    let path = dir.path().join("future.safetensors");
    std::fs::write(&path, &file).unwrap();
    let store = open_any(&path).unwrap();
    let list = store.list().unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].kind, Kind::Numeric(DType::Float32));
    assert_eq!(list[1].kind.name(), "F8_E5M3");
    assert!(list[1].kind.is_opaque());
    assert_eq!(
        (list[1].shape.as_slice(), list[1].nbytes),
        (&[2u64, 2][..], 4)
    );
    let z = store.load(b"z").unwrap().unwrap();
    assert_eq!(z.data.raw_bytes().as_ref(), &[1, 2, 3, 4]);
    for format in [
        OutputFormat::Native,
        OutputFormat::Safetensors,
        OutputFormat::TensorFlow,
    ] {
        let out = dir.path().join(format!("o-{}", format.name()));
        let e = export(store.as_ref(), format, &out, &ExportOptions::default()).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        assert!(
            e.to_string().contains(
                "tensor z is a safetensors F8_E5M3 tensor, which paramdex does not decode"
            ),
            "{e}"
        );
        let rep = export(
            store.as_ref(),
            format,
            &out,
            &ExportOptions {
                skip_unsupported: true,
                ..ExportOptions::default()
            },
        )
        .unwrap();
        assert_eq!(rep.skipped.len(), 1);
        assert_eq!(rep.tensors, 1);
    }
}

/// `tests/data/tf/lowp`: TensorFlow 2.21 wrote one tensor of each type it has numbers 26-33 for
/// (from ml_dtypes arrays). paramdex reads them as those dtypes, and its element decoding gives
/// the values TensorFlow restored (`first_values` in the manifest).
#[test]
fn tensorflow_written_low_precision_values_decode_as_tensorflow_restores_them() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tf/lowp");
    let m: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    let store = open_any(dir.join("raw/bundle")).unwrap();
    let tensors = m["tensors"].as_array().unwrap();
    assert_eq!(tensors.len(), 8);
    for t in tensors {
        let name = t["name"].as_str().unwrap();
        let d = DType::from_name(t["dtype"].as_str().unwrap()).unwrap();
        assert_eq!(d.tf_number().map(|n| (26..=33).contains(&n)), Some(true));
        let loaded = store.load(name.as_bytes()).unwrap().unwrap();
        assert_eq!(loaded.info.kind, Kind::Numeric(d), "{name}");
        let data = loaded.data.raw_bytes();
        for (i, want) in t["first_values"].as_array().unwrap().iter().enumerate() {
            let got = paramdex::interop::json::element(d, &data, i);
            assert_eq!(got.as_f64(), want.as_f64(), "{name}[{i}]");
        }
    }
    // int4 -2 is stored as 0x0e, one element per byte (TensorFlow's layout).
    let int4 = store.load(b"int4").unwrap().unwrap();
    assert_eq!(&int4.data.raw_bytes()[..3], &[0x01, 0x0e, 0x03]);
}

/// `F4` into a TensorFlow checkpoint: unpacked to TensorFlow's float4_e2m1fn, one value per
/// byte, element 2i from the low nibble; and back into safetensors packed again, byte for byte.
/// An unpacked value with bits above its width cannot be packed: refused, naming the tensor.
#[test]
fn packed_fp4_unpacks_into_tensorflow_and_packs_back() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("in.safetensors");
    let packed = vec![0x21, 0xf7, 0x0a, 0x5c, 0x00, 0x3e];
    write_st(&src, &[("w", St::F4, vec![2, 6], packed.clone())]);
    let input = open_any(&src).unwrap();
    let prefix = dir.path().join("ckpt");
    export(
        input.as_ref(),
        OutputFormat::TensorFlow,
        &prefix,
        &ExportOptions::default(),
    )
    .unwrap();
    let ck = open_any(&prefix).unwrap();
    let w = ck.load(b"w").unwrap().unwrap();
    assert_eq!(w.info.kind, Kind::Numeric(DType::Float4E2M1FN));
    assert_eq!(w.info.shape, vec![2, 6]);
    let unpacked = w.data.raw_bytes().into_owned();
    assert_eq!(
        unpacked,
        [0x1, 0x2, 0x7, 0xf, 0xa, 0x0, 0xc, 0x5, 0x0, 0x0, 0xe, 0x3]
    );
    let file = std::fs::read(dir.path().join("ckpt.index")).unwrap();
    let table = Table::open(&file, TableReadOptions::default()).unwrap();
    let e = table
        .get(b"w", |v, at| IndexEntry::decode(v, at, 254))
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!((e.tf_dtype, e.pdx_dtype), (33, 0));

    let out = dir.path().join("back.safetensors");
    export(
        ck.as_ref(),
        OutputFormat::Safetensors,
        &out,
        &ExportOptions::default(),
    )
    .unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("w").unwrap();
    assert_eq!(
        (t.dtype(), t.shape(), t.data()),
        (St::F4, &[2usize, 6][..], &packed[..])
    );

    // Unpacked values that do not fit 4 bits, and an odd last dimension, cannot be packed.
    let native = dir.path().join("u.pdx");
    let mut wr = Writer::create(&native).unwrap();
    wr.add(
        "wide",
        Tensor::new(DType::Float4E2M1FN, &[2], &[0x01, 0x10]),
    )
    .unwrap();
    wr.add("odd", Tensor::new(DType::Float4E2M1FN, &[3], &[1, 2, 3]))
        .unwrap();
    wr.finish().unwrap();
    let r = Reader::open(&native).unwrap();
    let odd = OutputFormat::Safetensors.cannot_hold(&r.info(b"odd").unwrap().unwrap());
    assert!(odd.unwrap().contains("cannot describe"));
    let e = export(
        &r,
        OutputFormat::Safetensors,
        &dir.path().join("u.safetensors"),
        &ExportOptions {
            skip_unsupported: true,
            ..ExportOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidTensor { .. }), "{e}");
    assert!(e.to_string().contains("wide"), "{e}");
}
