//! Helpers shared by the CLI's test files: run the real binary, check its exit code and the
//! error contract, and build inputs of every kind.
#![allow(dead_code)] // each test file uses a different subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use paramdex::{DType, Tensor, Writer};
use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_paramdex");

pub fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("tests/data")
        .join(rel)
}

/// Runs the binary; checks that the exit code is one of `codes` and that nothing looks like a
/// panic; an error exit prints exactly one `paramdex: error:` line, except an invalid command
/// line (exit 2), which prints clap's usage error whole (`error: ...`, ..., `For more information, try
/// '--help'.`).
pub fn run_codes(args: &[&dyn AsRef<std::ffi::OsStr>], codes: &[i32]) -> Output {
    let out = Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("the binary runs");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let code = out.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "paramdex {:?} exited {code}, expected {codes:?}\nstdout: {so}\nstderr: {se}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>()
    );
    assert!(!se.contains("panicked"), "panic message: {se}");
    assert!(
        !so.contains('\x1b') && !se.contains('\x1b'),
        "colour off a terminal"
    );
    if code == 2 {
        // An invalid command line: clap's usage error, whole (several lines).
        assert!(se.starts_with("error: "), "clap's usage error: {se}");
        assert!(se.contains("try '--help'"), "clap's usage error: {se}");
    } else if code != 0 && code != 5 {
        let lines: Vec<&str> = se.lines().collect();
        assert_eq!(lines.len(), 1, "one error line: {se}");
        assert!(lines[0].starts_with("paramdex: error: "), "{se}");
    }
    out
}

/// [`run_codes`] with exactly one expected exit code.
pub fn run(args: &[&dyn AsRef<std::ffi::OsStr>], code: i32) -> Output {
    run_codes(args, &[code])
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

pub fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

/// The tensor names `paramdex ls INPUT --json` lists (exit 0), in its order.
pub fn ls_names(input: &dyn AsRef<std::ffi::OsStr>) -> Vec<String> {
    json(&run(&[&"ls", input, &"--json"], 0))
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Checks the text listing `o` of `paramdex ckpt` over steps 100..=500 whose `acc` is best at
/// 200 (the `training_dir` of `ckpt.rs` and `ckpt_remote.rs`): a header, one line a step, the
/// latest marked.
pub fn assert_ckpt_listing(o: &str) {
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(lines.len(), 6, "{o}");
    assert!(
        lines[0].contains("STEP") && lines[0].contains("METADATA"),
        "{o}"
    );
    assert!(
        lines[2].contains(" 200 ") && lines[2].contains("acc=0.9"),
        "{o}"
    );
    assert!(
        lines[5].starts_with("* ") && lines[5].contains("(latest)"),
        "{o}"
    );
}

/// Runs `paramdex ckpt DIR --prune --keep-last 1 --keep-best acc=1 --dry-run --json` over the
/// steps of [`assert_ckpt_listing`] and checks what it would delete and keep.
pub fn assert_ckpt_prune_dry_run(dir: &dyn AsRef<std::ffi::OsStr>) {
    let dry = json(&run(
        &[
            &"ckpt",
            dir,
            &"--prune",
            &"--keep-last",
            &"1",
            &"--keep-best",
            &"acc=1",
            &"--dry-run",
            &"--json",
        ],
        0,
    ));
    assert_eq!(dry["deleted"], serde_json::json!([100, 300, 400]));
    assert_eq!(dry["kept"], serde_json::json!([200, 500]));
}

/// A native file with metadata, a LoD tensor, a non-UTF-8 name and several dtypes.
pub fn native(dir: &Path) -> PathBuf {
    let p = dir.join("native.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add_values("a.weight", &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    w.add_values("a.bias", &[3], &[half::bf16::from_f32(0.5); 3])
        .unwrap();
    w.add_values("steps", &[], &[42i64]).unwrap();
    let lod = vec![vec![0u64, 1, 3]];
    w.add(
        "seq",
        Tensor::new(DType::Int32, &[3, 1], &[1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0]).with_lod(&lod),
    )
    .unwrap();
    w.add(b"raw\xff", Tensor::new(DType::UInt8, &[1], &[7]))
        .unwrap();
    w.insert_metadata("step", 100i64).unwrap();
    w.insert_metadata("model", "tiny").unwrap();
    w.finish().unwrap();
    p
}

/// Every input kind, with the name of one numeric tensor in it.
pub fn inputs(dir: &Path) -> Vec<(&'static str, PathBuf, String)> {
    vec![
        ("paramdex", native(dir), "a.weight".into()),
        (
            "tensorflow checkpoint",
            data("tf/basic/v1/model.ckpt"),
            "layer1/W".into(),
        ),
        (
            "tensorflow checkpoint",
            data("tf/basic/tf2"),
            "v_float32/.ATTRIBUTES/VARIABLE_VALUE".into(),
        ),
        (
            "paddle model",
            data("paddle/models/legacy/m"),
            "layer.2.b".into(),
        ),
        (
            "paddle tensor file",
            data("paddle/lod/lod1_f32.lodtensor"),
            String::new(),
        ),
        (
            "paddle per-variable directory",
            data("paddle/models/separate_legacy"),
            "beta_b".into(),
        ),
        (
            "safetensors",
            data("safetensors/model.safetensors"),
            "model.layers.0.weight".into(),
        ),
    ]
}

/// A run of step directories as `paramdex.torch.dcp` and torch's `FileSystemWriter` leave
/// them: committed saves, a save whose coordinator died (pending shards only), an index
/// committed without DCP's metadata, a torch-written one, names of every common style.
pub fn run_of_steps(root: &std::path::Path) {
    use paramdex::{MergeShardsOptions, ShardedSave};
    let save = |dir: &std::path::Path, with_dcp: bool, commit: bool| {
        std::fs::create_dir_all(dir).unwrap();
        let s = ShardedSave::new(dir.join("dcp"), 2).unwrap();
        for k in 0..2u32 {
            let mut w = s.shard(k).unwrap();
            w.add(
                format!("w{k}"),
                paramdex::Tensor::new(paramdex::DType::UInt8, &[3], &[k as u8; 3]),
            )
            .unwrap();
            w.finish().unwrap();
        }
        if commit {
            let mut opts = MergeShardsOptions {
                no_sync: true,
                ..Default::default()
            };
            if with_dcp {
                opts.metadata
                    .insert("dcp", paramdex::MetaValue::String("{}".into()))
                    .unwrap();
            }
            s.merge(&opts).unwrap();
        }
    };
    save(&root.join("step-10"), true, true);
    save(&root.join("step_20"), true, true);
    save(&root.join("checkpoint-30"), true, false);
    save(&root.join("40"), false, true);
    let torch = root.join("global_step5");
    std::fs::create_dir_all(&torch).unwrap();
    std::fs::write(torch.join(".metadata"), b"\x80\x02").unwrap();
    std::fs::write(torch.join("__0_0.distcp"), b"x").unwrap();
    let killed_torch = root.join("step-50");
    std::fs::create_dir_all(&killed_torch).unwrap();
    std::fs::write(killed_torch.join("__0_0.distcp"), b"x").unwrap();
    // Not steps.
    std::fs::create_dir_all(root.join("logs")).unwrap();
    std::fs::create_dir_all(root.join("step-60.bak")).unwrap();
}
