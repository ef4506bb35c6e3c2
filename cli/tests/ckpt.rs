//! `paramdex ckpt DIR` (listing, `--json`, `--prune` with policies and `--dry-run`) and `DIR` /
//! `DIR@STEP` as the input of reading commands.

mod common;
use common::*;

use paramdex::interop::{CheckpointManager, ManagerOptions};
use paramdex::{DType, MetaValue, Metadata, Tensor};

/// Steps 100..=500 with `acc` metadata (best at 200), the latest 500.
fn training_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = ManagerOptions::default();
    opts.writer.sync = false;
    let mut m = CheckpointManager::open(dir.path(), opts).unwrap();
    for (i, acc) in [0.1, 0.9, 0.3, 0.4, 0.5].iter().enumerate() {
        let step = (i as u64 + 1) * 100;
        let w: Vec<u8> = [step as f32; 2]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let mut md = Metadata::new();
        md.insert("acc", MetaValue::Float(*acc)).unwrap();
        m.save(step, [("w", Tensor::new(DType::Float32, &[2], &w))], md)
            .unwrap();
    }
    dir
}

#[test]
fn ckpt_lists_steps_sizes_metadata_and_the_latest() {
    let dir = training_dir();
    let o = stdout(&run(&[&"ckpt", &dir.path()], 0));
    assert_ckpt_listing(&o);
    let v = json(&run(&[&"ckpt", &dir.path(), &"--json"], 0));
    assert_eq!(v["latest"], 500);
    let list = v["checkpoints"].as_array().unwrap();
    let steps: Vec<u64> = list.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [100, 200, 300, 400, 500]);
    assert!(list.iter().all(|c| c["bytes"].as_u64().unwrap() > 0));
    assert_eq!(list[4]["latest"], true);
    assert_eq!(list[0]["latest"], false);
    assert_eq!(list[1]["metadata"]["acc"], 0.9);
}

#[test]
fn ckpt_prune_applies_a_policy_and_dry_run_changes_nothing() {
    let dir = training_dir();
    let p = dir.path();
    assert_ckpt_prune_dry_run(&p);
    assert_eq!(
        json(&run(&[&"ckpt", &p, &"--json"], 0))["checkpoints"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
    let o = stdout(&run(
        &[&"ckpt", &p, &"--prune", &"--keep-every-steps", &"200"],
        0,
    ));
    // Kept: the lowest of each 200 steps (100, 200, 400) and the latest (500).
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(lines.len(), 2, "{o}");
    assert!(lines[0].starts_with("deleted step 300 "), "{o}");
    assert!(lines[1].starts_with("deleted 1 checkpoint(s)"), "{o}");
    let v = json(&run(&[&"ckpt", &p, &"--json"], 0));
    let steps: Vec<u64> = v["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, [100, 200, 400, 500]);
    // Lower is better: the smallest acc.
    let v = json(&run(
        &[
            &"ckpt",
            &p,
            &"--prune",
            &"--keep-best",
            &"acc=1",
            &"--lower-is-better",
            &"--json",
        ],
        0,
    ));
    assert_eq!(v["kept"], serde_json::json!([100, 500]));
    // No policy; a policy without --prune; a bad duration; not a directory.
    run(&[&"ckpt", &p, &"--prune"], 1);
    run(&[&"ckpt", &p, &"--keep-last", &"1"], 2);
    run(&[&"ckpt", &p, &"--prune", &"--keep-every", &"5x"], 1);
    run(&[&"ckpt", &p.join("nope")], 1);
}

#[test]
fn reading_commands_take_dir_and_dir_at_step() {
    let dir = training_dir();
    let p = dir.path().display().to_string();
    let latest = json(&run(&[&"get", &p, &"w"], 0));
    let at200 = json(&run(&[&"get", &format!("{p}@200"), &"w"], 0));
    assert_ne!(latest, at200);
    assert!(latest.to_string().contains("500"), "{latest}");
    assert!(at200.to_string().contains("200"), "{at200}");
    run(&[&"ls", &format!("{p}@300")], 0);
    run(&[&"verify", &format!("{p}@300")], 0);
    run(&[&"meta", &format!("{p}@200")], 0);
    let o = run(&[&"ls", &format!("{p}@999")], 1);
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("no checkpoint of step 999"),
        "{o:?}"
    );
}

/// Issue 30, defect 6: `stat DIR` says which checkpoint it read (DIR: the latest; DIR@STEP),
/// and `ckpt` shows what a checkpoint without paramdex metadata is, not "(not a paramdex
/// checkpoint)" for a TensorFlow one.
#[test]
fn stat_says_which_step_and_ckpt_names_tensorflow_checkpoints() {
    let dir = training_dir();
    let p = dir.path().display().to_string();
    let o = stdout(&run(&[&"stat", &p], 0));
    let prefix = dir.path().join("ckpt-500");
    assert!(
        o.contains(&format!("{} (step 500, the latest)", prefix.display())),
        "{o}"
    );
    let v = json(&run(&[&"stat", &format!("{p}@200"), &"--json"], 0));
    assert_eq!(v["step"], 200);
    assert_eq!(
        v["checkpoint"],
        dir.path().join("ckpt-200").display().to_string()
    );
    let o = stdout(&run(&[&"stat", &format!("{p}@200")], 0));
    assert!(o.contains("(step 200)") && !o.contains("latest"), "{o}");
    // A single file says nothing of steps.
    let single = json(&run(
        &[&"stat", &dir.path().join("ckpt-300.index"), &"--json"],
        0,
    ));
    assert!(single.get("step").is_none(), "{single}");

    // A TensorFlow 2 training directory.
    let tf = tempfile::tempdir().unwrap();
    for f in ["checkpoint", "ckpt-1.data-00000-of-00001", "ckpt-1.index"] {
        std::fs::copy(data(&format!("tf/basic/tf2/{f}")), tf.path().join(f)).unwrap();
    }
    let o = stdout(&run(&[&"ckpt", &tf.path()], 0));
    assert!(o.contains("(tensorflow checkpoint)"), "{o}");
    assert!(!o.contains("not a paramdex checkpoint"), "{o}");
    let o = stdout(&run(&[&"stat", &tf.path()], 0));
    assert!(o.contains("(step 1, the latest)"), "{o}");
    // A checkpoint that cannot be read says so, and what says why.
    std::fs::write(tf.path().join("ckpt-1.index"), b"garbage").unwrap();
    let o = stdout(&run(&[&"ckpt", &tf.path()], 0));
    assert!(o.contains("(unreadable: paramdex verify"), "{o}");
}

#[test]
fn ckpt_lists_a_run_of_step_directories_and_names_the_latest_complete() {
    let root = tempfile::tempdir().unwrap();
    run_of_steps(root.path());
    let v = json(&run(&[&"ckpt", &root.path(), &"--json"], 0));
    let list = v["checkpoints"].as_array().unwrap();
    let steps: Vec<u64> = list.iter().map(|c| c["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, [5, 10, 20, 30, 40, 50], "{v}");
    let complete: Vec<bool> = list.iter().map(|c| c["complete"] == true).collect();
    // Step 40's index holds no DCP metadata: DCP cannot load it, so it is not the latest.
    assert_eq!(complete, [true, true, true, false, false, false], "{v}");
    assert_eq!(v["latest"], 20, "{v}");
    assert_eq!(
        v["latest_path"],
        root.path().join("step_20").display().to_string()
    );
    assert_eq!(list[0]["format"], "torch-dcp");
    assert_eq!(list[3]["format"], "paramdex-dcp");
    let why30 = list[3]["why_not"].as_str().unwrap();
    assert!(
        why30.contains("2 pending shard(s)") && why30.contains("clean-shards"),
        "{why30}"
    );
    assert!(list[4]["why_not"]
        .as_str()
        .unwrap()
        .contains("no DCP metadata"));
    assert!(list[5]["why_not"].as_str().unwrap().contains(".metadata"));
    let o = stdout(&run(&[&"ckpt", &root.path()], 0));
    assert!(
        o.contains("the latest complete checkpoint is step 20"),
        "{o}"
    );
    assert!(o.contains("incomplete: the save was not committed"), "{o}");

    // The library call says the same.
    let r = paramdex::interop::list_run(root.path()).unwrap();
    assert_eq!(r.latest().unwrap().name, "step_20");
}

/// Issue 37: `verify` names the temporary files killed writers left beside what it verified (a
/// warning line each, `leftover_temporaries` in `--json`), and still exits 0 for an intact
/// checkpoint; a temporary a live writer holds (locked) is not named, nor one of another
/// output. `verify DIR` opens the directory's checkpoint manager, which removes them.
#[test]
fn verify_names_leftover_temporaries_and_exits_0() {
    let dir = training_dir();
    let d = dir.path();
    let input = d.join("ckpt-500.index");
    let clean = json(&run(&[&"verify", &input, &"--json"], 0));
    assert!(clean.get("leftover_temporaries").is_none(), "{clean}");
    let killed = d.join(".ckpt-500.data-00000-of-00001.a1b2c3d4e5.pdx-tmp");
    std::fs::write(&killed, vec![0u8; 5000]).unwrap();
    let link = d.join(".ckpt-500.index.f6g7h8i9j0.tmp");
    std::fs::write(&link, b"x").unwrap();
    let other = d.join(".ckpt-600.index.f6g7h8i9j0.tmp");
    std::fs::write(&other, b"x").unwrap();
    let live = d.join(".ckpt-500.data-00000-of-00001.k1l2m3n4o5.pdx-tmp");
    std::fs::write(&live, b"being written").unwrap();
    let holder = std::fs::File::open(&live).unwrap();
    holder.try_lock().unwrap();

    let o = run(&[&"verify", &input], 0);
    assert!(stdout(&o).contains("OK"));
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning:")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(warnings[0].contains(".ckpt-500.data-00000-of-00001.a1b2c3d4e5.pdx-tmp"));
    assert!(warnings[0].contains("4.9 KiB"));
    assert!(warnings[1].contains(".ckpt-500.index.f6g7h8i9j0.tmp"));
    let v = json(&run(&[&"verify", &input, &"--json"], 0));
    let left = v["leftover_temporaries"].as_array().unwrap();
    assert_eq!(left.len(), 2, "{v}");
    assert_eq!(left[0]["bytes"], 5000);
    // `-q` keeps the warnings (they are on standard error, about something wrong).
    let o = run(&[&"-q", &"verify", &input], 0);
    assert!(o.stdout.is_empty());
    assert_eq!(
        String::from_utf8_lossy(&o.stderr)
            .matches("warning:")
            .count(),
        2
    );
    // The directory: its manager removes the abandoned ones, not the live one.
    run(&[&"verify", &d], 0);
    assert!(!killed.exists() && !link.exists() && !other.exists() && live.exists());
    drop(holder);
}
