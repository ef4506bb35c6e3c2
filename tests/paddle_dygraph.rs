//! Paddle dygraph checkpoints (`paddle.save` pickles, issue 30): `tests/data/pickle/paddle_*`
//! are written by CPython's pickler the way `paddle.save` writes them, with NumPy's reduce
//! protocol (tests/interop/gen_pickle_fixtures.py); read through `open_any`.

mod support;

use std::borrow::Cow;

use paramdex::interop::{open_any, Format, Kind, TensorData};
use paramdex::{DType, Error, MetaValue, PickleProblem};

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn a_state_dict_reads_at_protocols_2_and_4() {
    let mut inputs = Vec::new();
    for (file, zero_copy) in [("paddle_p2.pdparams", false), ("paddle_p4.pdparams", true)] {
        let path = support::data(&format!("pickle/{file}"));
        // At a URL (`file://`, the same dispatcher as `s3://`): the object read whole, then
        // the same reader.
        #[cfg(feature = "s3")]
        inputs.push((
            format!("file://{}", std::fs::canonicalize(&path).unwrap().display()),
            zero_copy,
        ));
        inputs.push((path.display().to_string(), zero_copy));
    }
    for (file, zero_copy) in inputs {
        let store = open_any(&file).unwrap();
        assert_eq!(store.format(), Format::PaddleDygraph);
        let list = store.list().unwrap();
        let names: Vec<&[u8]> = list.iter().map(|t| t.name.as_slice()).collect();
        assert_eq!(
            names,
            [
                &b"bf16"[..],
                b"emb.ids",
                b"flag",
                b"linear.bias",
                b"linear.weight"
            ],
            "{file}"
        );
        let w = store.load(b"linear.weight").unwrap().unwrap();
        assert_eq!(w.info.kind, Kind::Numeric(DType::Float32));
        assert_eq!(w.info.shape, [2, 3]);
        assert_eq!(
            w.data.raw_bytes().as_ref(),
            f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
        );
        // Protocol 4 pickles the bytes as bytes: borrowed from the file. Protocol 2 pickles
        // them through a latin1 str: decoded.
        assert_eq!(
            matches!(w.data, TensorData::Bytes(Cow::Borrowed(_))),
            zero_copy,
            "{file}"
        );
        let ids = store.load(b"emb.ids").unwrap().unwrap();
        assert_eq!(ids.info.kind, Kind::Numeric(DType::Int64));
        let want: Vec<u8> = [7i64, -8].iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(ids.data.raw_bytes().as_ref(), want);
        let flag = store.load(b"flag").unwrap().unwrap();
        assert_eq!(flag.info.kind, Kind::Numeric(DType::Bool));
        assert!(flag.info.shape.is_empty());
        assert_eq!(flag.data.raw_bytes().as_ref(), [1]);
        assert_eq!(
            store.info(b"bf16").unwrap().unwrap().kind,
            Kind::Numeric(DType::UInt16)
        );
        // The structured-name table is metadata.
        let meta = store.metadata().unwrap();
        assert_eq!(
            meta.get("StructuredToParameterName@@.linear.weight"),
            Some(&MetaValue::String("linear_0.w_0".into()))
        );
        let v = store.verify(1).unwrap();
        assert_eq!(v.tensors, 5);
        assert_eq!(v.data_bytes, 24 + 12 + 16 + 4 + 1);
    }
}

#[test]
fn tensors_pickled_as_name_array_tuples_are_named_by_their_keys() {
    let store = open_any(support::data("pickle/paddle_nested.pdopt")).unwrap();
    let names: Vec<Vec<u8>> = store.list().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, [b"model.w".to_vec(), b"opt.moment1".to_vec()]);
    assert_eq!(
        store
            .load(b"opt.moment1")
            .unwrap()
            .unwrap()
            .data
            .raw_bytes()
            .as_ref(),
        f32s(&[-1.0, 0.5, 2.0])
    );
    let meta = store.metadata().unwrap();
    assert_eq!(meta.get("epoch"), Some(&MetaValue::Int(100)));
    assert_eq!(
        meta.get("opt.LR_Scheduler.last_lr"),
        Some(&MetaValue::Float(0.25))
    );
}

#[test]
fn arrays_paramdex_does_not_read_are_refused_one_by_one() {
    let store = open_any(support::data("pickle/paddle_odd.pdparams")).unwrap();
    let items: Vec<_> = store.scan(b"").unwrap().collect();
    assert_eq!(items.len(), 3);
    for name in ["big", "fortran"] {
        let e = store.load(name.as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e}");
        assert!(e.to_string().contains(&format!("tensor {name} ")), "{e}");
    }
    assert_eq!(
        store.load(b"ok").unwrap().unwrap().data.raw_bytes().len(),
        24
    );
    assert!(store.verify(1).is_err());
}

#[test]
fn hostile_pickles_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    // {'w': posix.system('touch MARKER')} at protocol 2, under any file name.
    let cmd = format!("touch {}", marker.display());
    let mut data = b"\x80\x02}X\x01\x00\x00\x00wcposix\nsystem\nX".to_vec();
    data.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
    data.extend_from_slice(cmd.as_bytes());
    data.extend_from_slice(b"\x85Rs.");
    for name in ["model.pdparams", "weights.bin"] {
        let path = dir.path().join(name);
        std::fs::write(&path, &data).unwrap();
        let e = open_any(&path).err().expect("refused");
        assert!(
            matches!(
                e,
                Error::Pickle {
                    problem: PickleProblem::ForbiddenGlobal,
                    ..
                }
            ),
            "{name}: {e}"
        );
        assert!(e.to_string().contains("posix.system"), "{e}");
    }
    assert!(!marker.exists());
    // A truncated .pdparams is a damaged pickle, not a merged file with a bad size field.
    let good = std::fs::read(support::data("pickle/paddle_p4.pdparams")).unwrap();
    let path = dir.path().join("cut.pdparams");
    std::fs::write(&path, &good[..good.len() / 2]).unwrap();
    let e = open_any(&path).err().expect("refused");
    assert!(
        matches!(
            e,
            Error::Pickle {
                problem: PickleProblem::Truncated,
                ..
            }
        ),
        "{e}"
    );
    // A pickle holding no arrays, under another name, is not claimed as a Paddle file.
    let path = dir.path().join("other.pkl");
    std::fs::write(&path, b"\x80\x02}X\x01\x00\x00\x00aK\x01s.").unwrap();
    match open_any(&path) {
        Ok(s) => assert_ne!(s.format(), Format::PaddleDygraph),
        Err(e) => assert!(!matches!(e, Error::Pickle { .. }), "{e}"),
    }
}
