//! The protobuf code checked in under `proto/generated/` is what protox and prost-build
//! generate from `proto/*.proto` today (build.rs says why it is checked in): regenerated into a
//! temporary directory with the recipe `build.rs` uses, every file byte for byte, and no file
//! more or less.

use std::collections::BTreeMap;
use std::path::Path;

include!("../proto/generate.rs");

/// The `.rs` files of `dir`, by name.
fn rust_files(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    for ent in std::fs::read_dir(dir).unwrap() {
        let path = ent.unwrap().path();
        if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            files.insert(name, std::fs::read_to_string(&path).unwrap());
        }
    }
    files
}

#[test]
fn checked_in_protobuf_code_is_what_proto_generates() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fresh = tempfile::tempdir().unwrap();
    generate_proto(&root.join("proto"), fresh.path()).unwrap();
    let generated = rust_files(fresh.path());
    let checked_in = rust_files(&root.join("proto/generated"));
    assert!(!generated.is_empty(), "prost-build wrote no file");
    let how = "the checked-in protobuf code is not what proto/*.proto generates: regenerate it \
               with `cargo build -p paramdex --features regen-proto` and commit \
               proto/generated";
    assert_eq!(
        generated.keys().collect::<Vec<_>>(),
        checked_in.keys().collect::<Vec<_>>(),
        "{how} (the files differ)"
    );
    for (name, text) in &generated {
        if checked_in[name] != *text {
            let line = text
                .lines()
                .zip(checked_in[name].lines())
                .position(|(a, b)| a != b)
                .map_or_else(|| "a line count".to_string(), |n| format!("line {}", n + 1));
            panic!("{how} ({name} differs at {line})");
        }
    }
}
