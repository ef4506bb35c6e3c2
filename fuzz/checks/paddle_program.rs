//! Paddle program parsing (legacy `ProgramDesc` protobuf and PIR JSON) over arbitrary bytes,
//! and a whole model (program + combined `.pdiparams` stream) opened from files.
//!
//! Input: `[program_len: u32 LE][program bytes][params bytes]`; an input whose length prefix
//! does not fit is all program. Parsed parameter lists must be sorted, unique and non-empty
//! names; an opened model must list, load and verify without panicking, and `load` must find
//! every listed tensor.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use paramdex::interop::paddle::{parse_pir_json, parse_program_desc, ParamDecl};
use paramdex::interop::TensorStore;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::common::scratch_dir("pdx-fuzz-pd"))
}

fn check_params(params: &[ParamDecl]) {
    for w in params.windows(2) {
        assert!(w[0].name < w[1].name, "parameters not sorted and unique");
    }
    for p in params {
        assert!(!p.name.is_empty(), "empty parameter name");
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    let (program, params) = crate::common::split_prefixed(data);
    let path = Path::new("<fuzz>");
    let desc = parse_program_desc(program, path);
    let pir = parse_pir_json(program, path);
    if let Ok(p) = &desc {
        check_params(p);
    }
    if let Ok(p) = &pir {
        check_params(p);
    }
    if desc.is_err() && pir.is_err() {
        return;
    }
    let d = dir();
    let prog_path = d.join(if pir.is_ok() { "m.json" } else { "m.pdmodel" });
    let _ = std::fs::remove_file(d.join("m.json"));
    let _ = std::fs::remove_file(d.join("m.pdmodel"));
    std::fs::write(&prog_path, program).expect("write program");
    let params_path = d.join("m.pdiparams");
    std::fs::write(&params_path, params).expect("write params");
    // The same bytes as a merged file (SPEC.md 9.1) named by the same program.
    let merged_path = d.join("m.merged");
    std::fs::write(&merged_path, params).expect("write merged file");
    if let Ok(store) = paramdex::interop::paddle::open_merged(&merged_path) {
        exercise(&store);
        let _ = store.load(b"#0");
        let _ = store.record(store.record_count().saturating_sub(1));
    }
    let Ok(store) = paramdex::interop::paddle::open_model(&params_path, &prog_path) else {
        return;
    };
    exercise(&store);
}

/// Lists, loads what is listed (it must be found), loads a name, verifies: no panic.
fn exercise(store: &dyn TensorStore) {
    if let Ok(list) = store.list() {
        for info in list.iter().take(100) {
            match store.load(&info.name) {
                Ok(Some(t)) => assert_eq!(t.info.name, info.name),
                Ok(None) => panic!("a listed tensor is not found by load"),
                Err(_) => {}
            }
        }
    }
    let _ = store.load(b"a");
    let _ = store.verify(1);
}
