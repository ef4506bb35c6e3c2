//! A full training state as torch 2.15 writes it (`tests/data/pickle/torch_training_state.pt`,
//! made by `tests/interop/gen_torch_training_state.py`): a model's and an optimizer's state
//! dicts, `torch.get_rng_state()`, `random.getstate()`, and Python `bytes` and `bytearray`
//! values (pickled through `_codecs.encode` and `builtins.bytearray`, which torch's
//! weights-only allow-list has and paramdex refused before issue 37). Every tensor is read,
//! and the bytes values are metadata.

use std::path::Path;

use paramdex::interop::{open_any, Format, Kind, TensorData, TensorStore};
use paramdex::{DType, MetaValue};

fn store() -> Box<dyn TensorStore> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pickle/torch_training_state.pt");
    open_any(&p).unwrap()
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn bytes_of(store: &dyn TensorStore, name: &str) -> Vec<u8> {
    match store.load(name.as_bytes()).unwrap().unwrap().data {
        TensorData::Bytes(b) => b.into_owned(),
        TensorData::Strings(_) => panic!("strings"),
    }
}

#[test]
fn a_training_state_with_bytes_and_rng_states_reads() {
    let s = store();
    assert_eq!(s.format(), Format::Torch);
    let listed: Vec<(String, Kind, Vec<u64>)> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|t| (String::from_utf8(t.name).unwrap(), t.kind, t.shape))
        .collect();
    let f32 = Kind::Numeric(DType::Float32);
    assert_eq!(
        listed,
        [
            ("model.bias".to_string(), f32.clone(), vec![2]),
            ("model.weight".to_string(), f32.clone(), vec![2, 2]),
            (
                "optim.state.0.momentum_buffer".to_string(),
                f32.clone(),
                vec![2, 2]
            ),
            (
                "optim.state.1.momentum_buffer".to_string(),
                f32.clone(),
                vec![2]
            ),
            ("rng".to_string(), Kind::Numeric(DType::UInt8), vec![5056]),
        ]
    );
    assert_eq!(
        bytes_of(&*s, "model.weight"),
        f32_bytes(&[1.0, 2.0, 3.0, 4.0])
    );
    assert_eq!(bytes_of(&*s, "model.bias"), f32_bytes(&[0.5, -0.5]));
    assert_eq!(
        bytes_of(&*s, "optim.state.0.momentum_buffer"),
        f32_bytes(&[1.0; 4])
    );
    assert_eq!(bytes_of(&*s, "rng").len(), 5056);
    s.verify(1).unwrap();

    let m = s.metadata().unwrap();
    assert_eq!(
        m.get("blob"),
        Some(&MetaValue::Bytes(b"\x00\xffparamdex".to_vec()))
    );
    assert_eq!(m.get("buf"), Some(&MetaValue::Bytes(b"ab".to_vec())));
    assert_eq!(m.get("step"), Some(&MetaValue::Int(7)));
    assert_eq!(
        m.get("optim.param_groups.0.momentum"),
        Some(&MetaValue::Float(0.9))
    );
    // random.getstate(): (3, (625 ints), None); its ints are scalars like any other.
    assert_eq!(m.get("py_rng.0"), Some(&MetaValue::Int(3)));
    assert!(m.get("py_rng.1.624").is_some());
}
