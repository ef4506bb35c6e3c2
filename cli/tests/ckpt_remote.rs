//! `paramdex ckpt s3://bucket/dir` (listing, `--json`, `--prune` with `--dry-run`) and
//! `s3://bucket/dir` / `s3://bucket/dir@STEP` as the input of reading commands, against a real
//! Garage cluster (3 nodes; `tests/support/garage.rs`). The directory is written by the
//! library's `CheckpointManager` in this process; the binary reads the `AWS_*` environment this
//! process sets (inherited).

mod common;
#[path = "../../tests/support/garage.rs"]
#[allow(dead_code)]
mod garage;
#[path = "../../tests/support/s3.rs"]
#[allow(dead_code)]
mod s3;

use common::{assert_ckpt_listing, assert_ckpt_prune_dry_run, json, run, run_of_steps, stdout};
use paramdex::interop::{CheckpointManager, Layout, ManagerOptions};
use paramdex::{DType, MetaValue, Metadata, Tensor};

/// Steps 100..=500 at `url` with `acc` metadata (best at 200), the latest 500; sharded in
/// 2 data objects when `sharded`.
fn training_dir(url: &str, sharded: bool) {
    let mut opts = ManagerOptions::default();
    opts.writer.sync = false;
    if sharded {
        opts.layout = Layout::Sharded {
            shards: 2,
            incremental: false,
        };
    }
    let mut m = CheckpointManager::open(url, opts).unwrap();
    for (i, acc) in [0.1, 0.9, 0.3, 0.4, 0.5].iter().enumerate() {
        let step = (i as u64 + 1) * 100;
        let w: Vec<u8> = [step as f32; 2]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let b = vec![step as u8; 1000];
        let mut md = Metadata::new();
        md.insert("acc", MetaValue::Float(*acc)).unwrap();
        m.save_async(
            step,
            [
                ("w", Tensor::new(DType::Float32, &[2], &w)),
                ("b", Tensor::new(DType::UInt8, &[1000], &b)),
            ],
            md,
        )
        .unwrap();
    }
    m.wait().unwrap();
}

fn steps(url: &str) -> Vec<u64> {
    json(&run(&[&"ckpt", &url, &"--json"], 0))["checkpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["step"].as_u64().unwrap())
        .collect()
}

#[test]
fn ckpt_lists_and_prunes_an_s3_directory() {
    s3::with_bucket("ckpt_lists_and_prunes_an_s3_directory", |g, _, _| {
        let url = format!("s3://{}/cli-ckpt/run", g.bucket());
        training_dir(&url, false);
        let o = stdout(&run(&[&"ckpt", &url], 0));
        assert_ckpt_listing(&o);
        let v = json(&run(&[&"ckpt", &url, &"--json"], 0));
        assert_eq!(v["dir"], url.as_str());
        assert_eq!(v["latest"], 500);
        let list = v["checkpoints"].as_array().unwrap();
        assert_eq!(list.len(), 5);
        assert_eq!(list[0]["prefix"], format!("{url}/ckpt-100").as_str());
        assert!(list.iter().all(|c| c["bytes"].as_u64().unwrap() > 0));
        assert_eq!(list[1]["metadata"]["acc"], 0.9);

        // A dry run changes nothing; then the policy is applied.
        assert_ckpt_prune_dry_run(&url);
        assert_eq!(steps(&url), [100, 200, 300, 400, 500]);
        let o = stdout(&run(
            &[&"ckpt", &url, &"--prune", &"--keep-every-steps", &"200"],
            0,
        ));
        let lines: Vec<&str> = o.lines().collect();
        assert_eq!(lines.len(), 2, "{o}");
        assert!(
            lines[0].starts_with(&format!("deleted step 300 ({url}/ckpt-300)")),
            "{o}"
        );
        assert_eq!(steps(&url), [100, 200, 400, 500]);
        // Without a policy: refused.
        run(&[&"ckpt", &url, &"--prune"], 1);
        // Refused credentials: one error line naming the directory, exit 1, nothing deleted.
        let out = std::process::Command::new(common::BIN)
            .args(["ckpt", url.as_str(), "--prune", "--keep-last", "1"])
            .env("AWS_SECRET_ACCESS_KEY", "not-the-secret")
            .env_remove("CLICOLOR_FORCE")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("paramdex: error: ") && err.contains(&url),
            "{err}"
        );
        assert_eq!(steps(&url), [100, 200, 400, 500]);
        // An empty directory (nothing under the prefix) lists nothing.
        let empty = format!("s3://{}/cli-ckpt/nothing-here", g.bucket());
        let o = stdout(&run(&[&"ckpt", &empty], 0));
        assert!(o.contains("no checkpoints in"), "{o}");
    });
}

#[test]
fn reading_commands_take_s3_dir_and_dir_at_step() {
    s3::with_bucket("reading_commands_take_s3_dir_and_dir_at_step", |g, _, _| {
        for (sub, sharded) in [("single", false), ("sharded", true)] {
            let url = format!("s3://{}/cli-read/{sub}", g.bucket());
            training_dir(&url, sharded);
            let latest = json(&run(&[&"get", &url, &"w"], 0));
            let at200 = json(&run(&[&"get", &format!("{url}@200"), &"w"], 0));
            assert_ne!(latest, at200);
            assert!(latest.to_string().contains("500"), "{latest}");
            assert!(at200.to_string().contains("200"), "{at200}");
            let ls = stdout(&run(&[&"ls", &format!("{url}@300")], 0));
            assert!(ls.contains('w') && ls.contains('b'), "{ls}");
            run(&[&"verify", &format!("{url}@300")], 0);
            run(&[&"stat", &url], 0);
            let md = stdout(&run(&[&"meta", &format!("{url}@200")], 0));
            assert!(md.contains("0.9"), "{md}");
            // The same tensors as a local copy of the same step would hold: diff says equal.
            run(&[&"diff", &format!("{url}@500"), &url], 0);
            run(&[&"diff", &format!("{url}@400"), &url], 5);
            let o = run(&[&"ls", &format!("{url}@999")], 1);
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("no checkpoint of step 999"), "{err}");
            assert!(err.contains(&url), "{err}");
        }
        // Neither an object, a checkpoint prefix, nor a checkpoint directory: not found.
        let o = run(&[&"ls", &format!("s3://{}/cli-read/none", g.bucket())], 1);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("no such object"),
            "{o:?}"
        );
    });
}

/// Every file under `root` PUT under `url`'s key prefix.
fn upload(
    rt: &tokio::runtime::Runtime,
    store: &dyn object_store::ObjectStore,
    root: &std::path::Path,
    key: &str,
) {
    for d in std::fs::read_dir(root).unwrap() {
        let p = d.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        if p.is_dir() {
            upload(rt, store, &p, &format!("{key}/{name}"));
        } else {
            s3::put(
                rt,
                store,
                &format!("{key}/{name}"),
                std::fs::read(&p).unwrap(),
            );
        }
    }
}

#[test]
fn ckpt_lists_a_run_of_step_prefixes_in_s3() {
    s3::with_bucket("ckpt_lists_a_run_of_step_prefixes_in_s3", |g, rt, store| {
        let local = tempfile::tempdir().unwrap();
        run_of_steps(local.path());
        upload(&rt, store.as_ref(), local.path(), "cli-run/run1");
        let url = format!("s3://{}/cli-run/run1", g.bucket());
        for u in [url.clone(), format!("{url}/")] {
            let v = json(&run(&[&"ckpt", &u, &"--json"], 0));
            let steps: Vec<u64> = v["checkpoints"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["step"].as_u64().unwrap())
                .collect();
            // Empty directories (step-60.bak, logs) are no objects: not listed anyway.
            assert_eq!(steps, [5, 10, 20, 30, 40, 50], "{v}");
            assert_eq!(v["latest"], 20, "{v}");
            assert_eq!(v["latest_path"], format!("{url}/step_20").as_str(), "{v}");
        }
        let o = stdout(&run(&[&"ckpt", &url], 0));
        assert!(
            o.contains("the latest complete checkpoint is step 20"),
            "{o}"
        );
        // A step directory (the checkpoint_id given to StorageWriter) reads as its `dcp`
        // checkpoint, as locally; the run root says it is one and what lists it.
        let names = stdout(&run(&[&"ls", &format!("{url}/step_20")], 0));
        assert!(names.contains("w0") && names.contains("w1"), "{names}");
        let o = run(&[&"ls", &url], 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("step directories") && err.contains("paramdex ckpt"),
            "{err}"
        );
    });
}
