//! `paramdex merge-shards s3://bucket/dir/PREFIX` on a real Garage cluster (3 nodes; the root's
//! `tests/support/garage.rs`): shards written straight into the bucket, merged by the CLI (its
//! message names the index URL), then read by the CLI by the prefix's URL; a save with a shard
//! missing is refused with one error line naming the missing object.

mod common;
#[path = "../../tests/support/garage.rs"]
#[allow(dead_code)]
mod garage;
#[path = "../../tests/support/s3.rs"]
#[allow(dead_code)]
mod s3;

use common::BIN;
use paramdex::{SaveId, WriterOptions};
use s3::aws_env;

fn write_shards(url: &str, ranks: &[u32], n: u32) {
    let save = SaveId::random();
    for &k in ranks {
        let opts = WriterOptions {
            sync: false,
            ..Default::default()
        };
        let mut w = paramdex::create_shard_writer(url, k, n, save, opts, None).unwrap();
        w.add_values(format!("rank{k}.w"), &[4], &[k as f32; 4])
            .unwrap();
        w.finish().unwrap();
    }
}

fn cli(env: &[(&'static str, String)], args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new(BIN);
    c.args(args).env_remove("CLICOLOR_FORCE");
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn merge_shards_takes_an_s3_prefix() {
    let Some(g) = garage::shared("merge_shards_takes_an_s3_prefix") else {
        return;
    };
    let env = aws_env(g, g.secret_access_key());
    // The only test of this binary: the library's URLs resolve from the process's environment.
    for (k, v) in &env {
        std::env::set_var(k, v);
    }
    g.run(|| {
        let url = format!("s3://{}/cli/ck", g.bucket());
        write_shards(&url, &[0, 1, 2], 3);
        let out = cli(&env, &["merge-shards", &url]);
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{so}{se}");
        assert!(
            format!("{so}{se}").contains(&format!("{url}.index")),
            "{so}{se}"
        );
        let out = cli(&env, &["ls", &url]);
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{so}");
        for k in 0..3 {
            assert!(so.contains(&format!("rank{k}.w")), "{so}");
        }

        // An incremental save against it (SPEC.md 12.5): its shard reuses two tensors, whose
        // data objects Garage copies; the CLI merges it, lists, reads and verifies them.
        let inc = format!("s3://{}/cli/inc", g.bucket());
        let base =
            std::sync::Arc::new(paramdex::remote::open_sharded(&url, Default::default()).unwrap());
        let mut w = paramdex::create_shard_writer(
            &inc,
            0,
            1,
            SaveId::random(),
            WriterOptions::default(),
            None,
        )
        .unwrap()
        .with_base(base)
        .unwrap();
        w.reuse_unchanged("rank0.w").unwrap();
        w.reuse_unchanged("rank2.w").unwrap();
        w.add_values("new", &[2], &[5.0f32; 2]).unwrap();
        assert_eq!(w.reused().server_copied, 2);
        w.finish().unwrap();
        let out = cli(&env, &["merge-shards", &inc]);
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert!(out.status.success(), "{so}{se}");
        assert!(format!("{so}{se}").contains("2 tensors"), "{so}{se}");
        let out = cli(&env, &["ls", &inc]);
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{so}");
        for name in ["rank0.w", "rank2.w", "new"] {
            assert!(so.contains(name), "{so}");
        }
        let out = cli(&env, &["verify", &inc]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );

        // A save with shard 1 of 2 missing: one error line naming the object, nothing merged.
        let url = format!("s3://{}/cli/partial", g.bucket());
        write_shards(&url, &[0], 2);
        let out = cli(&env, &["merge-shards", &url]);
        let se = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(se.lines().count(), 1, "{se}");
        assert!(se.starts_with("paramdex: error: "), "{se}");
        assert!(se.contains(&format!("{url}.data-00001-of-00002")), "{se}");
        // What the failed save left: listed, then removed, by the prefix's URL.
        let out = cli(&env, &["clean-shards", "--dry-run", &url]);
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{so}");
        assert!(
            so.contains(&format!("would remove {url}.data-00000-of-00002")),
            "{so}"
        );
        let out = cli(&env, &["clean-shards", &url]);
        let so = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{so}");
        assert!(so.contains("removed 1 files"), "{so}");
        let out = cli(&env, &["clean-shards", "--dry-run", &url]);
        assert!(String::from_utf8_lossy(&out.stdout).contains("would remove 0 files"));
    });
}
