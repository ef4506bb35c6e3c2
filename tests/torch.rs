//! `torch.save` files (issue 30): built here as torch writes them (a zip of stored entries, a
//! `data.pkl` assembled opcode by opcode), read through `open_any` as every command does;
//! and, when torch is installed, a file written by torch itself.

mod support;

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use paramdex::interop::pickle::MAX_DEPTH;
use paramdex::interop::{open_any, Format, Kind, TensorData, TensorStore};
use paramdex::{DType, Error, MetaValue, PickleProblem};
use support::torchzip::{f32s, torch_file, Pk};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn bytes_of(store: &dyn TensorStore, name: &str) -> Vec<u8> {
    match store.load(name.as_bytes()).unwrap().unwrap().data {
        TensorData::Bytes(b) => b.into_owned(),
        TensorData::Strings(_) => panic!("strings"),
    }
}

/// An `OrderedDict` state dict: `w` f32 [2, 3] (storage 0, 6 elements); `w_tied` the same
/// tensor object again (memo: tied weights); `wt` a transpose of storage 0 ([3, 2], stride
/// [1, 3]); `b` elements 4.. of storage 0 (offset 4, [2]); `h` bf16 [4] (storage 1); `ids`
/// int64 [3] (storage 2).
fn state_dict_pickle() -> Vec<u8> {
    let mut p = Pk::new();
    p.ordered_dict().op(b'(');
    p.str("w")
        .tensor("FloatStorage", "0", 6, 0, &[2, 3], &[3, 1])
        .put(100);
    p.str("w_tied").get(100);
    p.str("wt")
        .tensor("FloatStorage", "0", 6, 0, &[3, 2], &[1, 3]);
    p.str("b").tensor("FloatStorage", "0", 6, 4, &[2], &[1]);
    p.str("h").tensor("BFloat16Storage", "1", 4, 0, &[4], &[1]);
    p.str("ids").tensor("LongStorage", "2", 3, 0, &[3], &[1]);
    p.op(b'u').finish()
}

fn storages() -> Vec<(&'static str, Vec<u8>)> {
    let s0 = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    // bf16 of 1, 2, -1, 0.5.
    let s1: Vec<u8> = [0x3f80u16, 0x4000, 0xbf80, 0x3f00]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let s2: Vec<u8> = [7i64, -8, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
    vec![("0", s0), ("1", s1), ("2", s2)]
}

fn file(pkl: &[u8], storages: &[(&str, Vec<u8>)]) -> Vec<u8> {
    let s: Vec<(&str, &[u8])> = storages.iter().map(|(k, v)| (*k, v.as_slice())).collect();
    torch_file(pkl, &s)
}

#[test]
fn a_state_dict_lists_and_loads_every_view() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "model.pt",
        &file(&state_dict_pickle(), &storages()),
    );
    // Locally, and at a URL (`file://`, the same dispatcher as `s3://`: the object read
    // whole, then the same reader).
    let url = cfg!(feature = "s3").then(|| format!("file://{}", path.display()));
    for input in std::iter::once(path.display().to_string()).chain(url) {
        a_state_dict_at(&path, &input);
    }
}

fn a_state_dict_at(path: &Path, input: &str) {
    let store = open_any(input).unwrap();
    assert_eq!(store.format(), Format::Torch);
    let list = store.list().unwrap();
    let names: Vec<&[u8]> = list.iter().map(|t| t.name.as_slice()).collect();
    assert_eq!(names, [&b"b"[..], b"h", b"ids", b"w", b"w_tied", b"wt"]);
    let w = &list[3];
    assert_eq!(w.kind, Kind::Numeric(DType::Float32));
    assert_eq!(w.shape, [2, 3]);
    assert_eq!(w.nbytes, 24);
    assert_eq!(list[1].kind, Kind::Numeric(DType::BFloat16));
    assert_eq!(list[2].kind, Kind::Numeric(DType::Int64));

    // Contiguous: zero-copy, the storage's bytes.
    let loaded = store.load(b"w").unwrap().unwrap();
    assert!(matches!(loaded.data, TensorData::Bytes(Cow::Borrowed(_))));
    assert_eq!(
        bytes_of(&*store, "w"),
        f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    // Tied weights: the same bytes under both names.
    assert_eq!(bytes_of(&*store, "w_tied"), bytes_of(&*store, "w"));
    // The transpose, gathered: [[0, 3], [1, 4], [2, 5]].
    let wt = store.load(b"wt").unwrap().unwrap();
    assert!(matches!(wt.data, TensorData::Bytes(Cow::Owned(_))));
    assert_eq!(wt.info.shape, [3, 2]);
    assert_eq!(
        bytes_of(&*store, "wt"),
        f32s(&[0.0, 3.0, 1.0, 4.0, 2.0, 5.0])
    );
    // A storage offset of 4 elements.
    assert_eq!(bytes_of(&*store, "b"), f32s(&[4.0, 5.0]));
    assert_eq!(bytes_of(&*store, "h"), storages()[1].1);
    assert_eq!(bytes_of(&*store, "ids"), storages()[2].1);
    // Where the contiguous ones are in the file; none for the gathered one.
    let loc = store.data_location(b"b").unwrap().unwrap();
    let raw = std::fs::read(path).unwrap();
    assert_eq!(
        &raw[loc.offset as usize..(loc.offset + loc.len) as usize],
        f32s(&[4.0, 5.0])
    );
    assert!(store.data_location(b"wt").unwrap().is_none());
    // A region of the transpose.
    let r = paramdex::Region::new(vec![1, 0], vec![2, 2]).unwrap();
    let s = store.load_slice(b"wt", &r).unwrap().unwrap();
    assert_eq!(s.data.raw_bytes().as_ref(), f32s(&[1.0, 4.0, 2.0, 5.0]));
    let v = store.verify(1).unwrap();
    assert_eq!(v.tensors, 6);
    // Every zip entry's CRC-32: data.pkl, byteorder, 3 storages, version.
    assert_eq!(v.checksums, 6);
}

#[test]
fn a_checkpoint_of_nested_containers_is_named_as_state_dict_keys() {
    // {'model': OrderedDict(w=...), 'epoch': 3, 'opt': {'state': {0: {'step': tensor}},
    //  'param_groups': [{'lr': 0.5}]}}
    let mut p = Pk::new();
    p.op(b'}').op(b'(');
    p.str("model").ordered_dict().op(b'(');
    p.str("w").tensor("FloatStorage", "0", 6, 0, &[6], &[1]);
    p.op(b'u');
    p.str("epoch").int(3);
    p.str("opt").op(b'}').op(b'(');
    p.str("state").op(b'}').int(0).op(b'}').str("step");
    p.tensor("LongStorage", "2", 3, 2, &[], &[]);
    p.op(b's').op(b's');
    p.str("param_groups").op(b']').op(b'}').str("lr");
    // BINFLOAT 0.5 (big-endian: 3f e0 00 ...).
    p.op(b'G');
    p.0.extend_from_slice(&[0x3f, 0xe0, 0, 0, 0, 0, 0, 0]);
    p.op(b's').op(b'a');
    p.op(b'u');
    p.op(b'u');
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "ckpt.pt", &file(&p.finish(), &storages()));
    let store = open_any(&path).unwrap();
    let names: Vec<Vec<u8>> = store.list().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(names, [b"model.w".to_vec(), b"opt.state.0.step".to_vec()]);
    // A scalar tensor at storage offset 2: the third int64.
    let step = store.load(b"opt.state.0.step").unwrap().unwrap();
    assert!(step.info.shape.is_empty());
    assert_eq!(step.data.raw_bytes().as_ref(), 9i64.to_le_bytes());
    let meta = store.metadata().unwrap();
    assert_eq!(meta.get("epoch"), Some(&MetaValue::Int(3)));
    assert_eq!(
        meta.get("opt.param_groups.0.lr"),
        Some(&MetaValue::Float(0.5))
    );
}

#[test]
fn a_data_pkl_written_by_cpython_reads() {
    // tests/data/pickle/torch_state_dict.pkl: CPython's pickler with torch's persistent_id
    // (tests/interop/gen_pickle_fixtures.py): embed.weight and head.weight one Parameter,
    // wt its transpose, b at offset 4, h bf16; the OrderedDict carries _metadata (BUILD).
    let pkl = std::fs::read(support::data("pickle/torch_state_dict.pkl")).unwrap();
    let s1 = vec![1u8, 2, 3, 4, 5, 6, 7, 8];
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "pytorch_model.bin",
        &file(&pkl, &[("0", storages()[0].1.clone()), ("1", s1.clone())]),
    );
    let store = open_any(&path).unwrap();
    let names: Vec<Vec<u8>> = store.list().unwrap().into_iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [&b"b"[..], b"embed.weight", b"h", b"head.weight", b"wt"]
    );
    assert_eq!(bytes_of(&*store, "head.weight"), storages()[0].1);
    assert_eq!(bytes_of(&*store, "embed.weight"), storages()[0].1);
    assert_eq!(
        bytes_of(&*store, "wt"),
        f32s(&[0.0, 3.0, 1.0, 4.0, 2.0, 5.0])
    );
    assert_eq!(bytes_of(&*store, "h"), s1);
}

#[test]
fn a_storage_offset_past_its_data_is_corrupt_for_that_tensor_only() {
    let mut p = Pk::new();
    p.op(b'}').op(b'(');
    p.str("ok").tensor("FloatStorage", "0", 6, 0, &[6], &[1]);
    // Offset 5 and 2 elements: element 6 of a 6-element storage.
    p.str("bad").tensor("FloatStorage", "0", 6, 5, &[2], &[1]);
    // Stride 4 over 2 elements from 0: element 4 is inside; from 3: element 7 is not.
    p.str("bad_stride")
        .tensor("FloatStorage", "0", 6, 3, &[2], &[4]);
    // A huge offset (overflows when scaled).
    p.str("huge")
        .tensor("FloatStorage", "0", 6, i32::MAX, &[1], &[1]);
    p.op(b'u');
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "best.pt", &file(&p.finish(), &storages()));
    let store = open_any(&path).unwrap();
    for name in ["bad", "bad_stride", "huge"] {
        let e = store.load(name.as_bytes()).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&format!("tensor {name}:")), "{msg}");
        assert!(msg.contains("best.pt"), "{msg}");
    }
    // The listing shows the good one and names the bad ones.
    let items: Vec<_> = store.scan(b"").unwrap().collect();
    assert_eq!(items.len(), 4);
    assert_eq!(items.iter().filter(|r| r.is_err()).count(), 3);
    assert_eq!(bytes_of(&*store, "ok").len(), 24);
    assert!(matches!(store.verify(1), Err(Error::Corrupt { .. })));
}

/// torch 2.x pickles float8 and uint16/32/64 tensors with `_rebuild_tensor_v3`: an untyped
/// storage (numel in bytes) and the dtype as the seventh argument; offsets count elements.
#[test]
fn rebuild_tensor_v3_gives_the_dtype_of_its_argument() {
    let mut p = Pk::new();
    p.op(b'}').op(b'(');
    // 24 bytes: as float8 [4, 2] from element 8, and as uint16 [3] from element 2 (bytes 4..10).
    p.str("f8")
        .tensor_v3("float8_e4m3fn", "0", 24, 8, &[4, 2], &[2, 1]);
    p.str("u16").tensor_v3("uint16", "0", 24, 2, &[3], &[1]);
    p.str("past").tensor_v3("uint16", "0", 24, 11, &[2], &[1]);
    p.op(b'u');
    let storage: Vec<u8> = (0..24u8).collect();
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "fp8.pt",
        &file(&p.finish(), &[("0", storage.clone())]),
    );
    let store = open_any(&path).unwrap();
    let f8 = store.load(b"f8").unwrap().unwrap();
    assert_eq!(f8.info.kind.name(), "float8_e4m3fn");
    assert_eq!(f8.info.shape, [4, 2]);
    assert_eq!(bytes_of(&*store, "f8"), &storage[8..16]);
    let u16 = store.load(b"u16").unwrap().unwrap();
    assert_eq!(u16.info.kind.name(), "uint16");
    assert_eq!(bytes_of(&*store, "u16"), &storage[4..10]);
    // Element 12 of a 12-element uint16 view of 24 bytes is past it.
    assert!(matches!(store.load(b"past"), Err(Error::Corrupt { .. })));
}

#[test]
fn a_storage_shorter_than_its_persistent_id_says_is_corrupt() {
    let mut p = Pk::new();
    p.op(b'}').str("w");
    p.tensor("FloatStorage", "0", 60, 0, &[6], &[1]);
    p.op(b's');
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "m.pt", &file(&p.finish(), &storages()));
    let e = open_any(&path).unwrap().load(b"w").unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    // A storage key not in the file.
    let mut p = Pk::new();
    p.op(b'}').str("w");
    p.tensor("FloatStorage", "9", 6, 0, &[6], &[1]);
    p.op(b's');
    let path = write(dir.path(), "m2.pt", &file(&p.finish(), &storages()));
    let e = open_any(&path).unwrap().load(b"w").unwrap_err();
    assert!(e.to_string().contains("archive/data/9"), "{e}");
}

#[test]
fn a_forbidden_global_is_refused_by_name_and_nothing_runs() {
    let marker = tempfile::tempdir().unwrap();
    let target = marker.path().join("pwned");
    // {'w': posix.system('touch TARGET')}
    let mut p = Pk::new();
    p.op(b'}').str("w");
    p.global("posix", "system")
        .str(&format!("touch {}", target.display()))
        .op(0x85)
        .op(b'R');
    p.op(b's');
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "model.pt", &file(&p.finish(), &storages()));
    let e = open_any(&path).err().expect("refused");
    assert!(
        matches!(
            e,
            Error::Pickle {
                problem: PickleProblem::ForbiddenGlobal,
                ..
            }
        ),
        "{e}"
    );
    let msg = e.to_string();
    assert!(msg.contains("posix.system"), "{msg}");
    assert!(msg.contains("archive/data.pkl"), "{msg}");
    assert!(!target.exists());
    // A global of another library (numpy's) is not allowed in torch files either.
    let mut p = Pk::new();
    p.global("numpy.core.multiarray", "_reconstruct");
    let path = write(dir.path(), "np.pt", &file(&p.finish(), &storages()));
    let e = open_any(&path).err().expect("refused");
    assert!(
        e.to_string().contains("numpy.core.multiarray._reconstruct"),
        "{e}"
    );
}

#[test]
fn hostile_nesting_and_unknown_storage_types() {
    // 10 000 nested lists in data.pkl: refused at the bound, no stack overflow.
    let mut p = Pk::new();
    p.0.extend(std::iter::repeat_n(b']', 10_000));
    p.0.extend(std::iter::repeat_n(b'a', 9_999));
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "deep.pt", &file(&p.finish(), &storages()));
    let e = open_any(&path).err().expect("refused");
    assert!(
        matches!(
            e,
            Error::Pickle {
                problem: PickleProblem::Limit,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&MAX_DEPTH.to_string()), "{e}");
    // A quantized storage class is on torch's weights-only allow-list (issue 37): the file
    // opens, and that tensor is unsupported, named with its class.
    let mut p = Pk::new();
    p.op(b'}').str("q");
    p.tensor("QInt8Storage", "0", 6, 0, &[6], &[1]);
    p.op(b's');
    let path = write(dir.path(), "q.pt", &file(&p.finish(), &storages()));
    let store = open_any(&path).unwrap();
    let e = store.info(b"q").unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(e.to_string().contains("torch.QInt8Storage"), "{e}");
    // A storage class torch does not allow weights-only is a refused global.
    let mut p = Pk::new();
    p.op(b'}').str("q");
    p.tensor("UInt16Storage", "0", 6, 0, &[6], &[1]);
    p.op(b's');
    let path = write(dir.path(), "u.pt", &file(&p.finish(), &storages()));
    let e = open_any(&path).err().expect("refused");
    assert!(e.to_string().contains("torch.UInt16Storage"), "{e}");
}

#[test]
fn zip_damage_is_found() {
    let good = file(&state_dict_pickle(), &storages());
    let dir = tempfile::tempdir().unwrap();
    // A flipped byte in storage 0's data: the zip's CRC-32 catches it.
    let mut flipped = good.clone();
    let at = good
        .windows(4)
        .position(|w| w == 2.0f32.to_le_bytes())
        .unwrap();
    flipped[at] ^= 1;
    let path = write(dir.path(), "flip.pt", &flipped);
    let e = open_any(&path).unwrap().verify(1).unwrap_err();
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e}");
    assert!(e.to_string().contains("archive/data/0"), "{e}");
    // Every truncation is an error or not a torch file, never a panic.
    for cut in (0..good.len()).step_by(7) {
        let path = write(dir.path(), "cut.pt", &good[..cut]);
        if let Ok(s) = open_any(&path) {
            assert_ne!(s.format(), Format::Torch, "cut at {cut}");
        }
    }
    // A zip without data.pkl is not claimed.
    let other = support::torchzip::zip(&[("a.txt", b"hello")]);
    assert!(paramdex::interop::torch::TorchStore::from_bytes(other)
        .unwrap()
        .is_none());
}

/// A file written by torch itself, when torch is installed; skipped (saying so) otherwise.
#[test]
fn a_file_written_by_torch_reads_byte_exact() {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import torch"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: python3 cannot import torch on this machine");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
import sys, os, json, torch
d = sys.argv[1]
torch.manual_seed(0)
emb = torch.nn.Embedding(10, 4)
head = torch.nn.Linear(4, 10, bias=False)
head.weight = emb.weight
sd = {'embed.weight': emb.weight, 'head.weight': head.weight,
      'wt': torch.arange(12, dtype=torch.float32).reshape(3, 4).t(),
      'tail': torch.arange(10, dtype=torch.int64)[4:],
      'h': torch.randn(5).to(torch.bfloat16)}
torch.save(sd, os.path.join(d, 'model.pt'))
want = {}
for k, v in sd.items():
    v = v.detach().contiguous()
    want[k] = {'shape': list(v.shape), 'hex': bytes(v.view(-1).view(torch.uint8).tolist()).hex()}
json.dump(want, open(os.path.join(d, 'want.json'), 'w'))
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", script, dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let want: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("want.json")).unwrap()).unwrap();
    let store = open_any(dir.path().join("model.pt")).unwrap();
    assert_eq!(store.format(), Format::Torch);
    store.verify(1).unwrap();
    for (name, w) in want.as_object().unwrap() {
        let t = store.load(name.as_bytes()).unwrap().unwrap();
        let shape: Vec<u64> = w["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(t.info.shape, shape, "{name}");
        assert_eq!(
            support::hex(&t.data.raw_bytes()),
            w["hex"].as_str().unwrap(),
            "{name}"
        );
    }
}

#[test]
fn a_zip_written_by_python_zipfile_reads() {
    // tests/data/pickle/torch_state_dict.pt: Python's zipfile (stored entries) around the
    // CPython-written data.pkl (tests/interop/gen_pickle_fixtures.py).
    let store = open_any(support::data("pickle/torch_state_dict.pt")).unwrap();
    assert_eq!(store.format(), Format::Torch);
    assert_eq!(
        bytes_of(&*store, "wt"),
        f32s(&[0.0, 3.0, 1.0, 4.0, 2.0, 5.0])
    );
    assert_eq!(bytes_of(&*store, "b"), f32s(&[4.0, 5.0]));
    assert_eq!(bytes_of(&*store, "h"), storages()[1].1);
    let v = store.verify(1).unwrap();
    assert_eq!((v.tensors, v.checksums), (5, 5));
}

/// Every single-byte change of the fixtures (to 0x00, 0xff and a bit flip) and every
/// truncation is read without a panic: opened, listed, loaded and verified as far as it goes.
#[test]
fn mutated_fixtures_never_panic() {
    use paramdex::interop::paddle::dygraph::DygraphStore;
    use paramdex::interop::torch::TorchStore;
    fn exercise(store: &dyn TensorStore) {
        let _ = store.verify(1);
        if let Ok(items) = store.scan(b"") {
            for t in items.flatten() {
                if let Ok(l) = store.load(&t.name) {
                    assert_eq!(l.unwrap().data.raw_bytes().len() as u64, t.nbytes);
                }
            }
        }
    }
    for name in [
        "torch_state_dict.pt",
        "paddle_p2.pdparams",
        "paddle_p4.pdparams",
        "paddle_nested.pdopt",
    ] {
        let good = std::fs::read(support::data(&format!("pickle/{name}"))).unwrap();
        let mut inputs: Vec<Vec<u8>> = (0..good.len()).map(|n| good[..n].to_vec()).collect();
        for i in 0..good.len() {
            for f in [|_: u8| 0u8, |_: u8| 0xffu8, |b: u8| b ^ 0x10] {
                let mut m = good.clone();
                m[i] = f(m[i]);
                inputs.push(m);
            }
        }
        for m in inputs {
            if let Ok(Some(s)) = TorchStore::from_bytes(m.clone()) {
                exercise(&s);
            }
            if let Ok(s) = DygraphStore::from_bytes(m) {
                exercise(&s);
            }
        }
    }
}

/// At a URL the object is read whole, after its length is checked against
/// `UrlOptions::max_whole_object_bytes`: a longer one is refused before any byte of it is read.
#[cfg(feature = "s3")]
#[test]
fn an_object_longer_than_the_whole_read_bound_is_refused_before_it_is_read() {
    use paramdex::interop::{open_location, UrlOptions};
    let dir = tempfile::tempdir().unwrap();
    let bytes = file(&state_dict_pickle(), &storages());
    let path = write(dir.path(), "model.pt", &bytes);
    let url = format!("file://{}", path.display());
    let at = |max: u64| {
        let opts = UrlOptions {
            max_whole_object_bytes: max,
            ..UrlOptions::default()
        };
        open_location(paramdex::remote::resolve(&url).unwrap(), &opts)
    };
    match at(bytes.len() as u64 - 1) {
        Err(Error::LimitExceeded { value, limit, .. }) => {
            assert_eq!(value, bytes.len() as u64);
            assert_eq!(limit, bytes.len() as u64 - 1);
        }
        other => panic!("{:?}", other.map(|s| s.format())),
    }
    assert_eq!(at(bytes.len() as u64).unwrap().list().unwrap().len(), 6);
}
