//! Hugging Face `save_pretrained` layouts (issue 30): a directory holding `model.safetensors`
//! or `pytorch_model.bin`, and sharded checkpoints (`model-0000x-of-0000y.safetensors` with
//! `model.safetensors.index.json`, `.bin` shards with `pytorch_model.bin.index.json`) opened
//! as one store by the directory or by the index; the weight map checked against the shards.

#[path = "support/torch_zip.rs"]
mod torch_zip;

use std::fs;
use std::path::Path;

use paramdex::interop::{open_any, Format, TensorData, TensorStore};
use paramdex::{Error, MetaValue, Region};
use safetensors::tensor::TensorView;
use safetensors::Dtype;

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A safetensors file of f32 tensors `(name, shape, first value)` (values counting up).
fn st(path: &Path, tensors: &[(&str, Vec<usize>, f32)]) {
    let data: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, shape, v0)| f32s((0..shape.iter().product::<usize>()).map(|i| v0 + i as f32)))
        .collect();
    let views: Vec<(&str, TensorView)> = tensors
        .iter()
        .zip(&data)
        .map(|((n, shape, _), d)| (*n, TensorView::new(Dtype::F32, shape.clone(), d).unwrap()))
        .collect();
    fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

fn bytes_of(store: &dyn TensorStore, name: &str) -> Vec<u8> {
    match store.load(name.as_bytes()).unwrap().unwrap().data {
        TensorData::Bytes(b) => b.into_owned(),
        TensorData::Strings(_) => panic!("strings"),
    }
}

/// gpt2-like: `wte` [4, 2] and `h.0.w` [2] in shard 1, `lm_head` [3] in shard 2.
fn sharded(dir: &Path) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("config.json"), br#"{"model_type": "gpt2"}"#).unwrap();
    st(
        &dir.join("model-00001-of-00002.safetensors"),
        &[("wte", vec![4, 2], 0.0), ("h.0.w", vec![2], 10.0)],
    );
    st(
        &dir.join("model-00002-of-00002.safetensors"),
        &[("lm_head", vec![3], 20.0)],
    );
    fs::write(
        dir.join("model.safetensors.index.json"),
        br#"{"metadata": {"total_size": 52}, "weight_map": {
            "wte": "model-00001-of-00002.safetensors",
            "h.0.w": "model-00001-of-00002.safetensors",
            "lm_head": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
}

#[test]
fn a_sharded_directory_opens_as_one_store_by_the_directory_or_its_index() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gpt2");
    sharded(&dir);
    for input in [dir.clone(), dir.join("model.safetensors.index.json")] {
        let s = open_any(&input).unwrap();
        assert_eq!(s.format(), Format::HuggingFaceSharded);
        let names: Vec<Vec<u8>> = s.list().unwrap().into_iter().map(|t| t.name).collect();
        assert_eq!(names, [&b"h.0.w"[..], b"lm_head", b"wte"]);
        assert_eq!(bytes_of(s.as_ref(), "wte"), f32s((0..8).map(|i| i as f32)));
        assert_eq!(bytes_of(s.as_ref(), "lm_head"), f32s([20.0, 21.0, 22.0]));
        let r = Region::new(vec![1], vec![2]).unwrap();
        match s.load_slice(b"lm_head", &r).unwrap().unwrap().data {
            TensorData::Bytes(b) => assert_eq!(b.as_ref(), f32s([21.0, 22.0])),
            TensorData::Strings(_) => panic!(),
        }
        assert_eq!(
            s.metadata().unwrap().get("total_size"),
            Some(&MetaValue::Int(52))
        );
        assert_eq!(s.verify(1).unwrap().tensors, 3);
        assert!(s.load(b"nothing").unwrap().is_none());
    }
    // One level down too (a directory holding the model directory).
    assert_eq!(
        open_any(tmp.path()).unwrap().format(),
        Format::HuggingFaceSharded
    );
}

#[test]
fn a_single_file_model_directory_opens_its_model() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("config.json"), b"{}").unwrap();
    st(
        &tmp.path().join("model.safetensors"),
        &[("w", vec![2], 1.0)],
    );
    let s = open_any(tmp.path()).unwrap();
    assert_eq!(s.format(), Format::Safetensors);
    assert_eq!(bytes_of(s.as_ref(), "w"), f32s([1.0, 2.0]));
    // pytorch_model.bin alone: the torch.save reader.
    let t = tempfile::tempdir().unwrap();
    fs::write(t.path().join("config.json"), b"{}").unwrap();
    torch_zip::torch_save(&t.path().join("pytorch_model.bin"), &[0u8; 48]);
    assert_eq!(open_any(t.path()).unwrap().format(), Format::Torch);
    // At a URL too: the directory's pytorch_model.bin, read whole by the same reader.
    #[cfg(feature = "s3")]
    assert_eq!(
        open_any(format!("file://{}", t.path().display()))
            .unwrap()
            .format(),
        Format::Torch
    );
}

#[test]
fn bin_shards_with_their_index() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("pytorch_model-00001-of-00002.bin");
    let b = tmp.path().join("pytorch_model-00002-of-00002.bin");
    fs::write(
        &a,
        torch_zip::torch_tensor_archive("FloatStorage", &[2], &f32s([1.0, 2.0])),
    )
    .unwrap();
    fs::write(
        &b,
        torch_zip::torch_tensor_archive("FloatStorage", &[1], &f32s([3.0])),
    )
    .unwrap();
    // Each archive holds one bare tensor (named ""): two shards holding the same name.
    fs::write(
        tmp.path().join("pytorch_model.bin.index.json"),
        br#"{"weight_map": {"": "pytorch_model-00001-of-00002.bin",
            "x": "pytorch_model-00002-of-00002.bin"}}"#,
    )
    .unwrap();
    match open_any(tmp.path()) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("two shards"), "{e}"),
        other => panic!("{:?}", other.map(|s| s.format())),
    }
    fs::remove_file(&b).unwrap();
    fs::write(
        tmp.path().join("pytorch_model.bin.index.json"),
        br#"{"weight_map": {"": "pytorch_model-00001-of-00002.bin"}}"#,
    )
    .unwrap();
    let s = open_any(tmp.path()).unwrap();
    assert_eq!(s.format(), Format::HuggingFaceSharded);
    assert_eq!(bytes_of(s.as_ref(), ""), f32s([1.0, 2.0]));
    // At a URL, by the directory and by the index: each `.bin` shard an object read whole.
    #[cfg(feature = "s3")]
    for url in [
        format!("file://{}", tmp.path().display()),
        format!(
            "file://{}/pytorch_model.bin.index.json",
            tmp.path().display()
        ),
    ] {
        let s = open_any(&url).unwrap();
        assert_eq!(s.format(), Format::HuggingFaceSharded, "{url}");
        assert_eq!(bytes_of(s.as_ref(), ""), f32s([1.0, 2.0]), "{url}");
    }
}

#[test]
fn a_weight_map_that_disagrees_with_its_shards_is_an_error_naming_both() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("m");
    sharded(&dir);
    let index = dir.join("model.safetensors.index.json");
    // A name missing from its shard.
    fs::write(
        &index,
        br#"{"weight_map": {"wte": "model-00001-of-00002.safetensors",
            "ghost": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let e = open_any(&dir).err().unwrap();
    let msg = e.to_string();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(
        msg.contains("ghost") && msg.contains("model-00002-of-00002"),
        "{msg}"
    );
    // A name in another shard than the map says.
    fs::write(
        &index,
        br#"{"weight_map": {"wte": "model-00002-of-00002.safetensors",
            "h.0.w": "model-00001-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let msg = open_any(&dir).err().unwrap().to_string();
    assert!(
        msg.contains("model-00001-of-00002.safetensors holds it"),
        "{msg}"
    );
    // A shard missing.
    fs::write(
        &index,
        br#"{"weight_map": {"wte": "model-00001-of-00002.safetensors",
            "x": "model-00003-of-00003.safetensors"}}"#,
    )
    .unwrap();
    let msg = open_any(&dir).err().unwrap().to_string();
    assert!(
        msg.contains("model-00003-of-00003.safetensors is missing"),
        "{msg}"
    );
    // A shard outside the directory.
    fs::write(&index, br#"{"weight_map": {"wte": "../x.safetensors"}}"#).unwrap();
    let msg = open_any(&index).err().unwrap().to_string();
    assert!(msg.contains("not a file name beside the index"), "{msg}");
}

/// At a URL (`file://`, through the same URL dispatcher as `s3://`): by the index and by the
/// directory; the weight map checked the same way.
#[cfg(feature = "s3")]
#[test]
fn a_sharded_checkpoint_at_a_url() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("gpt2");
    sharded(&dir);
    for url in [
        format!("file://{}/model.safetensors.index.json", dir.display()),
        format!("file://{}", dir.display()),
        format!("file://{}/", dir.display()),
    ] {
        let s = open_any(&url).unwrap();
        assert_eq!(s.format(), Format::HuggingFaceSharded, "{url}");
        assert_eq!(bytes_of(s.as_ref(), "lm_head"), f32s([20.0, 21.0, 22.0]));
        assert_eq!(s.list().unwrap().len(), 3);
    }
    fs::write(
        dir.join("model.safetensors.index.json"),
        br#"{"weight_map": {"ghost": "model-00002-of-00002.safetensors"}}"#,
    )
    .unwrap();
    let msg = open_any(format!("file://{}", dir.display()))
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("ghost"), "{msg}");
}
