//! Inputs paramdex does not read exit 1 with "not a … file" saying what they look like, never
//! 3 (corruption): `torch.save` files under the names the defect was reported with (`ls
//! model.pt` once said "corrupt size field at offset 0" and exited 3) and under a long name, a
//! bare pickle, a Paddle dygraph `.pdparams`, a torch DCP directory and its `.distcp` file;
//! for `ls`, `stat`, `verify` and `convert`.

mod common;
use common::*;

use std::fs;
use std::path::Path;

#[path = "../../tests/support/torch_zip.rs"]
mod torch_zip;

/// Runs `args` expecting exit 1, and returns the error line.
fn refused(args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let o = run(args, 1);
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every command that opens an input refuses `p` with exit 1 and a message containing `what`.
fn refused_everywhere(p: &Path, what: &str) {
    let out = p.with_extension("converted.pdx");
    for args in [
        vec![&"ls" as &dyn AsRef<std::ffi::OsStr>, &p],
        vec![&"stat", &p],
        vec![&"verify", &p],
        vec![&"convert", &p, &out],
    ] {
        let err = refused(&args);
        let cmd = args[0].as_ref().to_string_lossy();
        assert!(err.contains("not a paramdex file"), "{cmd}: {err}");
        assert!(err.contains(what), "{cmd}: {err}");
        assert!(!err.contains("corrupt"), "{cmd}: {err}");
    }
    assert!(!out.exists());
}

#[test]
fn torch_save_files_exit_1_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "model.pt",
        "best.pt",
        "ckpt.pt",
        "a.pt",
        "pytorch_model.bin",
        "an_unusually_long_checkpoint_name.pt",
    ] {
        let p = dir.path().join(name);
        torch_zip::torch_save(&p, &[0u8; 48]);
        refused_everywhere(&p, "a zip archive written by torch.save");
    }
}

#[test]
fn pickles_exit_1_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("state.pkl");
    fs::write(&p, torch_zip::pickle(4)).unwrap();
    refused_everywhere(&p, "a Python pickle");
    let p = dir.path().join("model.pdparams");
    fs::write(&p, torch_zip::pickle(2)).unwrap();
    refused_everywhere(&p, "Paddle dygraph state_dict");
}

#[test]
fn torch_dcp_directories_exit_1_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let dcp = dir.path().join("dcp");
    torch_zip::dcp_dir(&dcp);
    refused_everywhere(&dcp, "torch.distributed.checkpoint (DCP)");
    refused_everywhere(&dcp.join("__0_0.distcp"), "(DCP)");
    let err = refused(&[&"ls", &dcp]);
    assert!(!err.contains("paddle.load"), "{err}");
}

/// `verify --json` (a CI sweep's form) reports a torch.save file as an input it cannot read
/// (exit_code 1), not as damage (3).
#[test]
fn verify_json_does_not_call_a_torch_file_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("last.pt");
    torch_zip::torch_save(&pt, &[1, 2, 3, 4]);
    let o = run(&[&"verify", &"--json", &pt], 1);
    let v = json(&o);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["exit_code"], 1, "{v}");
    let e = v["error"].as_str().unwrap();
    assert!(e.contains("last.pt") && e.contains("torch.save"), "{e}");
}
