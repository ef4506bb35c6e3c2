//! The CLI on torch DCP `FileSystemWriter` directories (issue 30): `ls`, `get` (whole and
//! `--slice` across chunks), `stat`, `verify`, `diff` and `convert` by the directory or its
//! `.metadata`; a hostile `.metadata` refused by the global it names (exit 1), a chunk
//! layout that leaves part of a tensor stored nowhere reported as damage (exit 3).

mod common;
use common::*;

use std::path::Path;

#[path = "../../tests/support/torch_zip.rs"]
mod torch_zip;
use torch_zip::{dcp_checkpoint, torch_int_archive, torch_tensor_archive, DcpChunk, DcpSpec};

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// `w` f32 [4, 2] = 0..8, rows split over two ranks' files; `step` = 3.
fn write(dir: &Path, rows: i64, extra_global: Option<(String, String)>) {
    let spec = DcpSpec {
        tensors: vec![(
            "model.w".into(),
            "float32".into(),
            vec![rows, 2],
            vec![
                DcpChunk {
                    offsets: vec![0, 0],
                    sizes: vec![2, 2],
                    file: "__0_0.distcp".into(),
                },
                DcpChunk {
                    offsets: vec![2, 0],
                    sizes: vec![2, 2],
                    file: "__1_0.distcp".into(),
                },
            ],
        )],
        bytes: vec![("step".into(), torch_int_archive(3), "__0_0.distcp".into())],
        extra_global,
    };
    dcp_checkpoint(dir, &spec, &|_, i| {
        let start = (i * 4) as f32;
        torch_tensor_archive(
            "FloatStorage",
            &[2, 2],
            &f32s((0..4).map(|x| start + x as f32)),
        )
    });
}

#[test]
fn a_dcp_directory_under_every_command() {
    let tmp = tempfile::tempdir().unwrap();
    let dcp = tmp.path().join("ckpt");
    write(&dcp, 4, None);
    for input in [dcp.clone(), dcp.join(".metadata")] {
        let names = ls_names(&input);
        assert_eq!(names, ["model.w", "step"]);
        let raw = run(&[&"get", &input, &"model.w", &"--format", &"raw"], 0).stdout;
        assert_eq!(raw, f32s((0..8).map(|x| x as f32)));
        // Rows 1..3 (one from each rank's chunk), column 1.
        let part = run(
            &[
                &"get",
                &input,
                &"model.w",
                &"--slice",
                &"1:3,1:2",
                &"--format",
                &"raw",
            ],
            0,
        )
        .stdout;
        assert_eq!(part, f32s([3.0, 5.0]));
        let v = json(&run(&[&"verify", &input, &"--json"], 0));
        assert_eq!(v["ok"], true, "{v}");
        let stat = String::from_utf8(run(&[&"stat", &input], 0).stdout).unwrap();
        assert!(stat.contains("torch DCP checkpoint"), "{stat}");
    }
    // Converted to a native file (the non-tensor item kept as a bytes value), then compared:
    // equal. safetensors holds no bytes values: left out when asked, and said so.
    let out = tmp.path().join("out.pdx");
    run(&[&"convert", &dcp, &out], 0);
    let d = run(&[&"diff", &dcp, &out, &"--ignore-metadata"], 0);
    let s = String::from_utf8_lossy(&d.stdout);
    assert!(s.contains("2 tensors identical"), "{s}");
    let step = run(&[&"get", &out, &"step", &"--format", &"raw"], 0).stdout;
    assert_eq!(step, torch_int_archive(3));
    let st = tmp.path().join("out.safetensors");
    run(&[&"convert", &dcp, &st, &"--to", &"safetensors"], 1);
    let o = run(
        &[
            &"convert",
            &dcp,
            &st,
            &"--to",
            &"safetensors",
            &"--skip-unsupported",
        ],
        0,
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("left out step"));
}

#[test]
fn hostile_and_damaged_dcp_metadata() {
    let tmp = tempfile::tempdir().unwrap();
    let evil = tmp.path().join("evil");
    write(&evil, 4, Some(("posix".into(), "system".into())));
    for cmd in ["ls", "verify"] {
        let o = run(&[&cmd, &evil], 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("posix.system"), "{err}");
    }
    // Declared 5 rows, 4 stored: damage of that tensor (exit 3), named.
    let short = tmp.path().join("short");
    write(&short, 5, None);
    let o = run(&[&"get", &short, &"model.w"], 3);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("model.w") && err.contains("stored nowhere"),
        "{err}"
    );
    run(&[&"verify", &short], 3);
    // The other items still read.
    run(&[&"get", &short, &"step", &"--format", &"raw"], 0);
}

/// `ls DIR/` of a directory holding several inputs and other files lists each with what it is
/// (the same detection as opening it), exit 0; `--json` too; and at a `file://` URL.
#[test]
fn ls_of_a_directory_of_several_inputs_says_what_each_is() {
    let tmp = tempfile::tempdir().unwrap();
    write(&tmp.path().join("run_a"), 4, None);
    write(&tmp.path().join("run_b"), 4, None);
    std::fs::write(tmp.path().join("notes.txt"), b"hello").unwrap();
    torch_zip::torch_save(&tmp.path().join("model.pt"), &[0u8; 48]);
    let o = run(&[&"ls", &tmp.path()], 0);
    let text = String::from_utf8(o.stdout).unwrap();
    for want in [
        "run_a/",
        "run_b/",
        "torch DCP checkpoint",
        "torch.save file",
        "notes.txt",
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    let v = json(&run(&[&"ls", &tmp.path(), &"--json"], 0));
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 4, "{v}");
    let of = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap().clone();
    assert_eq!(of("run_a")["format"], "torch DCP checkpoint");
    assert_eq!(of("model.pt")["format"], "torch.save file");
    assert!(of("notes.txt")["format"].is_null());
    assert!(of("notes.txt")["error"].is_string());
    let url = format!("file://{}/", tmp.path().display());
    let v = json(&run(&[&"ls", &url, &"--json"], 0));
    assert_eq!(v.as_array().unwrap().len(), 4, "{v}");
}

#[test]
fn a_dcp_checkpoint_becomes_a_hugging_face_model() {
    let tmp = tempfile::tempdir().unwrap();
    let dcp = tmp.path().join("ckpt");
    write(&dcp, 4, None);
    // The model's tensors, `model.` stripped, into save_pretrained's layout.
    let hf = tmp.path().join("hf");
    run(
        &[
            &"convert",
            &dcp,
            &hf,
            &"--to",
            &"safetensors",
            &"--include",
            &"model.*",
            &"--strip-prefix",
            &"model.",
            &"--max-shard-size",
            &"5GB",
        ],
        0,
    );
    assert!(hf.join("model.safetensors").is_file());
    assert!(!hf.join("model.safetensors.index.json").exists());
    assert_eq!(ls_names(&hf), ["w"]);
    let raw = run(&[&"get", &hf, &"w", &"--format", &"raw"], 0).stdout;
    assert_eq!(raw, f32s((0..8).map(|x| x as f32)));
    let meta = json(&run(
        &[&"meta", &hf.join("model.safetensors"), &"--json"],
        0,
    ));
    assert_eq!(meta["format"], "pt", "{meta}");
    // An existing output is refused without --force.
    run(
        &[
            &"convert",
            &dcp,
            &hf,
            &"--to",
            &"safetensors",
            &"--max-shard-size",
            &"5GB",
            &"--skip-unsupported",
        ],
        1,
    );

    // Sharded past the size: files of whole tensors in name order, and the index.
    let src = tmp.path().join("four.pdx");
    let mut w = paramdex::Writer::create(&src).unwrap();
    w.add_values("model.a", &[2], &[1.0f32, 2.0]).unwrap();
    w.add_values("model.b", &[2], &[3.0f32, 4.0]).unwrap();
    w.add_values("model.c", &[5], &[5.0f32; 5]).unwrap();
    w.add_values("lm_head", &[1], &[6.0f32]).unwrap();
    w.finish().unwrap();
    let hf2 = tmp.path().join("hf2");
    let o = run(
        &[
            &"convert",
            &src,
            &hf2,
            &"--to",
            &"safetensors",
            &"--rename",
            &"model.c=final",
            &"--strip-prefix",
            &"model.",
            &"--max-shard-size",
            &"16",
        ],
        0,
    );
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(said.contains("model.safetensors.index.json"), "{said}");
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hf2.join("model.safetensors.index.json")).unwrap())
            .unwrap();
    assert_eq!(index["metadata"]["total_size"], 40, "{index}");
    // Names in order: a, b, final, lm_head -> [a, b] (16 bytes), [final] (20), [lm_head].
    let f = |k| format!("model-0000{k}-of-00003.safetensors");
    assert_eq!(index["weight_map"]["a"], f(1));
    assert_eq!(index["weight_map"]["b"], f(1));
    assert_eq!(index["weight_map"]["final"], f(2));
    assert_eq!(index["weight_map"]["lm_head"], f(3));
    for k in 1..=3 {
        assert!(hf2.join(f(k)).is_file());
    }
    assert_eq!(ls_names(&hf2), ["a", "b", "final", "lm_head"]);
    let d = run(&[&"get", &hf2, &"final", &"--format", &"raw"], 0).stdout;
    assert_eq!(d, f32s([5.0; 5]));

    // Two tensors given one name: refused, both named, nothing written.
    let hf3 = tmp.path().join("hf3");
    let o = run(
        &[
            &"convert",
            &src,
            &hf3,
            &"--to",
            &"safetensors",
            &"--rename",
            &"model.a=x",
            &"--rename",
            &"model.b=x",
            &"--max-shard-size",
            &"1GB",
        ],
        1,
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("model.a") && err.contains("model.b"), "{err}");
    assert!(!hf3.exists());
    // --max-shard-size is for safetensors output only.
    run(&[&"convert", &src, &hf3, &"--max-shard-size", &"1GB"], 1);
}

/// A data file cut short or missing is damage of the checkpoint given (exit 3), the file
/// named: never "not a DCP checkpoint, give its directory" (issue 37 item 4).
#[test]
fn a_truncated_or_missing_data_file_is_named_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let cut = tmp.path().join("cut");
    write(&cut, 4, None);
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(cut.join("__1_0.distcp"))
        .unwrap();
    let len = f.metadata().unwrap().len();
    f.set_len(len / 2).unwrap();
    let gone = tmp.path().join("gone");
    write(&gone, 4, None);
    std::fs::remove_file(gone.join("__1_0.distcp")).unwrap();
    for (dir, says) in [(&cut, "run past the end of"), (&gone, "is missing")] {
        for cmd in ["ls", "verify", "stat"] {
            let o = run(&[&cmd, dir], 3);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.contains("__1_0.distcp") && err.contains(says),
                "{cmd}: {err}"
            );
            assert!(!err.contains("give its directory"), "{cmd}: {err}");
        }
        let o = run(&[&"get", dir, &"model.w"], 3);
        assert!(String::from_utf8_lossy(&o.stderr).contains("__1_0.distcp"));
        // What the other file holds still reads.
        run(&[&"get", dir, &"step", &"--format", &"raw"], 0);
    }
}
