//! Foreign inputs are never called corrupt (exit 3): `torch.save` files under the names the
//! defect was reported with (`ls model.pt` once said "corrupt size field at offset 0" and
//! exited 3) and under a long name are read (the `torch.save` reader); a bare pickle that is no
//! format paramdex reads, a torch DCP data file (or a directory of them without `.metadata`)
//! exit 1 saying what they are; for `ls`, `stat`, `verify` and `convert`.

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
fn torch_save_files_are_read_under_any_name() {
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
        for cmd in ["ls", "stat", "verify"] {
            run(&[&cmd, &p], 0);
        }
    }
}

#[test]
fn pickles_exit_1_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    // A legacy torch pickle (no zip) and one named as Paddle's: neither format paramdex reads,
    // refused (exit 1) as a pickle, never as damage.
    for (name, proto) in [("state.pkl", 4), ("model.pdparams", 2)] {
        let p = dir.path().join(name);
        fs::write(&p, torch_zip::pickle(proto)).unwrap();
        for cmd in ["ls", "stat", "verify"] {
            let err = refused(&[&cmd, &p]);
            assert!(err.contains("pickle"), "{cmd} {name}: {err}");
            assert!(!err.contains("corrupt"), "{cmd} {name}: {err}");
        }
    }
}

#[test]
fn torch_dcp_data_files_exit_1_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let dcp = dir.path().join("dcp");
    torch_zip::dcp_dir(&dcp);
    // A data file alone, and a directory of data files without `.metadata`.
    refused_everywhere(&dcp.join("__0_0.distcp"), "(DCP)");
    fs::remove_file(dcp.join(".metadata")).unwrap();
    refused_everywhere(&dcp, "did not finish");
    let err = refused(&[&"ls", &dcp]);
    assert!(!err.contains("paddle.load"), "{err}");
}

/// `verify --json` (a CI sweep's form) never reports a torch.save file as damage (3): it is read
/// and verified (its zip entries' CRC-32).
#[test]
fn verify_json_does_not_call_a_torch_file_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("last.pt");
    torch_zip::torch_save(&pt, &[1, 2, 3, 4]);
    let o = run(&[&"verify", &"--json", &pt], 0);
    let v = json(&o);
    assert_eq!(v["ok"], true, "{v}");
}
