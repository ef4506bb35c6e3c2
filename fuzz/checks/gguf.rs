//! A GGUF file from arbitrary bytes: open (the parse of `interop::gguf::header`, every count,
//! length and offset bounded), list, load every listed tensor (its bytes its listed size, a
//! block type's size whole blocks), read whole rows, decode all metadata, verify; then, when
//! GGUF can hold it, write it back as GGUF and check the copy lists and loads the same.

use std::path::PathBuf;
use std::sync::OnceLock;

use paramdex::interop::gguf::{GgmlType, GgufStore, TYPES_KEY};
use paramdex::interop::{export, ExportOptions, OutputFormat, TensorStore};
use paramdex::Region;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::common::scratch_dir("pdx-fuzz-gguf"))
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    let Ok(st) = GgufStore::from_bytes(data.to_vec()) else {
        return;
    };
    let Ok(infos) = st.list() else {
        panic!("an opened GGUF file does not list");
    };
    for (i, info) in infos.iter().enumerate() {
        if i > 0 {
            assert!(infos[i - 1].name < info.name, "list not in name order");
        }
        let ty = match info.kind.numeric() {
            Some(d) => GgmlType::of_dtype(d).expect("a plain ggml type"),
            None => GgmlType::from_name(info.kind.name()).expect("a ggml block type"),
        };
        assert_eq!(
            ty.nbytes(&info.shape),
            Some(info.nbytes),
            "size not whole blocks"
        );
        let t = st
            .load(&info.name)
            .expect("a listed tensor loads")
            .expect("a listed tensor is found");
        assert_eq!(t.data.raw_bytes().len() as u64, info.nbytes);
        if let Some(&first) = info.shape.first() {
            let mut len = info.shape.clone();
            len[0] = first.min(1);
            let rows = Region::new(vec![0; len.len()], len).expect("same rank");
            let _ = st.load_slice(&info.name, &rows);
        }
    }
    for probe in [&b"a"[..], b"\xff", &data[..data.len().min(5)]] {
        let _ = st.load(probe);
    }
    let verified = st.verify(1).expect("an opened GGUF file verifies");
    assert_eq!(verified.tensors, infos.len() as u64);
    let Ok(meta) = st.metadata() else {
        return;
    };
    let out = dir().join("out.gguf");
    let opts = ExportOptions {
        overwrite: true,
        ..ExportOptions::default()
    };
    if export(&st, OutputFormat::Gguf, &out, &opts).is_err() {
        return;
    }
    let back = GgufStore::open(&out).expect("a GGUF file paramdex wrote opens");
    assert_eq!(back.list().expect("lists"), infos);
    for info in &infos {
        let a = st.load(&info.name).expect("loads").expect("found");
        let b = back.load(&info.name).expect("loads").expect("found");
        assert_eq!(a.data.raw_bytes(), b.data.raw_bytes());
    }
    // The same metadata, unless a key of the file collides with the reserved one or with
    // another once shown as UTF-8.
    let clean = st
        .keys()
        .all(|(k, _)| k != TYPES_KEY.as_bytes() && std::str::from_utf8(k).is_ok());
    if clean {
        assert_eq!(back.metadata().expect("decodes"), meta);
    }
}
