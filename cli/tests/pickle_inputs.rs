//! The CLI on pickle-based checkpoints (issue 30): a `torch.save` zip and Paddle dygraph
//! `.pdparams` read by `ls`, `get`, `stat`, `verify`, `diff` and `convert`; a pickle naming a
//! global outside the allow-list refused by name (exit 1) without running it; a storage offset
//! past its data reported as damage (exit 3).

mod common;
use common::*;

use std::fs;

#[test]
fn a_torch_file_under_every_command() {
    let dir = tempfile::tempdir().unwrap();
    // The name that used to be taken for a Paddle merged file and called corrupt.
    let pt = dir.path().join("model.pt");
    fs::copy(data("pickle/torch_state_dict.pt"), &pt).unwrap();
    let names = ls_names(&pt);
    assert_eq!(names, ["b", "embed.weight", "h", "head.weight", "wt"]);
    let wt = json(&run(&[&"get", &pt, &"wt", &"--format", &"json"], 0));
    let s = wt.to_string();
    assert!(s.contains("[0.0,3.0],[1.0,4.0],[2.0,5.0]"), "{s}");
    let v = json(&run(&[&"verify", &pt, &"--json"], 0));
    assert_eq!(v["tensors"], 5, "{v}");
    run(&[&"stat", &pt], 0);
    // Converted to safetensors, then compared with the source: the same tensors.
    let out = dir.path().join("model.safetensors");
    run(&[&"convert", &pt, &out, &"--to", &"safetensors"], 0);
    let d = run_codes(&[&"diff", &pt, &out, &"--ignore-metadata"], &[0]);
    assert!(d.status.success());
    let ls2 = json(&run(&[&"ls", &out, &"--json"], 0));
    assert_eq!(ls2.as_array().unwrap().len(), 5);
}

#[test]
fn a_paddle_dygraph_file_under_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.pdparams");
    fs::copy(data("pickle/paddle_p4.pdparams"), &p).unwrap();
    let ls = json(&run(&[&"ls", &p, &"--json"], 0));
    assert_eq!(ls.as_array().unwrap().len(), 5, "{ls}");
    let w = json(&run(
        &[&"get", &p, &"linear.weight", &"--format", &"json"],
        0,
    ));
    assert!(w.to_string().contains("[0.0,1.0,2.0],[3.0,4.0,5.0]"), "{w}");
    run(&[&"verify", &p], 0);
    let out = dir.path().join("out.pdx");
    run(&[&"convert", &p, &out], 0);
    run(&[&"diff", &p, &out, &"--ignore-metadata"], 0);
}

#[test]
fn hostile_pickles_are_refused_with_the_documented_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("pwned");
    let cmd = format!("touch {}", marker.display());
    // {'w': posix.system('touch MARKER')}, protocol 2.
    let mut pkl = b"\x80\x02}X\x01\x00\x00\x00wcposix\nsystem\nX".to_vec();
    pkl.extend_from_slice(&(cmd.len() as u32).to_le_bytes());
    pkl.extend_from_slice(cmd.as_bytes());
    pkl.extend_from_slice(b"\x85Rs.");
    let p = dir.path().join("evil.pdparams");
    fs::write(&p, &pkl).unwrap();
    let o = run(&[&"ls", &p], 1);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(err.contains("posix.system"), "{err}");
    assert!(!marker.exists());
    // A truncated .pdparams: damage in a recognised format, exit 3.
    let good = fs::read(data("pickle/paddle_p4.pdparams")).unwrap();
    let cut = dir.path().join("cut.pdparams");
    fs::write(&cut, &good[..good.len() - 40]).unwrap();
    run(&[&"verify", &cut], 3);
}
