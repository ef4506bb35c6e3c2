//! The commands on `s3://` URLs against a real Garage cluster (3 nodes, replication 3;
//! `tests/support/garage.rs`): `ls`, `stat`, `get`, `verify`, `diff`, `meta` and `convert` read a
//! native file, a TensorFlow checkpoint (by its prefix and by its `.index`) and a safetensors file
//! uploaded with plain `object_store` puts, and print what they print for the local inputs. S3
//! settings come from the child's `AWS_*` environment, or from `--endpoint-url` and `--region`.
//! Errors name the URL, with the documented exit codes.

mod common;
#[path = "../../tests/support/garage.rs"]
#[allow(dead_code)]
mod garage;
#[path = "../../tests/support/s3.rs"]
#[allow(dead_code)]
mod s3;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::data;
use garage::Garage;
use paramdex::{DType, Tensor, Writer};
use s3::put_retried;
use serde_json::Value;

/// The child's environment: every S3 setting from `AWS_*` (`with_place`: endpoint and region
/// too; without, they come from flags).
fn env(g: &Garage, with_place: bool) -> Vec<(&'static str, String)> {
    let mut v = s3::aws_env(g, g.secret_access_key());
    if !with_place {
        v.truncate(2);
    }
    v
}

/// Runs the binary with `env` (and no other `AWS_*` variable); checks the exit code against
/// `codes` and the error contract (one `paramdex: error:` line, no panic).
fn run_env(args: &[&str], env: &[(&str, String)], codes: &[i32]) -> Output {
    let mut cmd = Command::new(common::BIN);
    cmd.args(args).env_remove("CLICOLOR_FORCE");
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("the binary runs");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    let code = out.status.code().unwrap_or(-1);
    assert!(
        codes.contains(&code),
        "paramdex {args:?} exited {code}, expected {codes:?}\nstdout: {so}\nstderr: {se}"
    );
    assert!(!se.contains("panicked"), "{se}");
    if code != 0 && code != 5 {
        let lines: Vec<&str> = se.lines().collect();
        assert_eq!(lines.len(), 1, "one error line: {se}");
        assert!(lines[0].starts_with("paramdex: error: "), "{se}");
    }
    out
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

/// A native file of several dtypes, with metadata.
fn native(dir: &Path) -> PathBuf {
    let p = dir.join("model.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add_values("a.weight", &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    w.add_values("a.bias", &[3], &[0.5f64, -1.0, 2.0]).unwrap();
    w.add_values("steps", &[], &[42i64]).unwrap();
    w.add(b"raw\xff", Tensor::new(DType::UInt8, &[1], &[7]))
        .unwrap();
    w.insert_metadata("step", 100i64).unwrap();
    w.finish().unwrap();
    p
}

/// Uploads the files `files` under `prefix/`; returns their keys' URL prefix.
fn upload(g: &Garage, rt: &tokio::runtime::Runtime, files: &[PathBuf], prefix: &str) {
    let s = s3::plain_store(g, g.endpoint());
    for f in files {
        let key = format!("{prefix}/{}", f.file_name().unwrap().to_str().unwrap());
        put_retried(rt, &s, &key, std::fs::read(f).unwrap());
    }
}

/// The files of `dir` whose names start with `stem`.
fn with_stem(dir: &Path, stem: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().starts_with(stem))
        .collect()
}

/// `ls`, `stat`, `get`, `verify`, `diff`, `meta` and `convert` on URLs of a native file, a
/// TensorFlow checkpoint (prefix and `.index`, two checkpoints) and a safetensors file give what
/// they give on the local inputs.
#[test]
fn reading_commands_work_on_s3_urls() {
    let Some(g) = garage::shared("reading_commands_work_on_s3_urls") else {
        return;
    };
    g.run(|| {
        let rt = s3::new_runtime();
        let dir = tempfile::tempdir().unwrap();
        let b = g.bucket();
        let native = native(dir.path());
        upload(g, &rt, std::slice::from_ref(&native), "cli");
        let tf1 = data("tf/basic/v1");
        upload(g, &rt, &with_stem(&tf1, "model.ckpt"), "cli/tf1");
        let tf2 = data("tf/basic/tf2");
        upload(g, &rt, &with_stem(&tf2, "ckpt-1"), "cli/tf2");
        let st = data("safetensors/model.safetensors");
        upload(g, &rt, std::slice::from_ref(&st), "cli");
        let inputs: Vec<(PathBuf, String, &str)> = vec![
            (native, format!("s3://{b}/cli/model.pdx"), "a.weight"),
            (
                tf1.join("model.ckpt"),
                format!("s3://{b}/cli/tf1/model.ckpt"),
                "layer1/W",
            ),
            (
                tf2.join("ckpt-1"),
                format!("s3://{b}/cli/tf2/ckpt-1"),
                "v_float32/.ATTRIBUTES/VARIABLE_VALUE",
            ),
            (
                tf2.join("ckpt-1.index"),
                format!("s3://{b}/cli/tf2/ckpt-1.index"),
                "v_float32/.ATTRIBUTES/VARIABLE_VALUE",
            ),
            (
                st,
                format!("s3://{b}/cli/model.safetensors"),
                "model.layers.0.weight",
            ),
        ];
        let env = env(g, true);
        for (local, url, name) in &inputs {
            let local = local.to_str().unwrap();
            let both = |args: &[&str], code: i32| -> (Output, Output) {
                let with = |input: &str| {
                    let a: Vec<&str> = args
                        .iter()
                        .map(|&x| if x == "INPUT" { input } else { x })
                        .collect();
                    run_env(&a, &env, &[code])
                };
                (with(local), with(url))
            };
            // ls: the same listing.
            let (l, r) = both(&["ls", "--json", "INPUT"], 0);
            assert_eq!(json(&l), json(&r), "{url}: ls");
            assert!(!json(&r).as_array().unwrap().is_empty(), "{url}");
            let (l, r) = both(&["ls", "INPUT"], 0);
            assert_eq!(l.stdout, r.stdout, "{url}: ls text");
            // stat: the same counts and layout.
            let (l, r) = both(&["stat", "--json", "INPUT"], 0);
            let (l, r) = (json(&l), json(&r));
            for k in [
                "format",
                "tensors",
                "data_bytes",
                "by_dtype",
                "metadata_entries",
                // The layout, computed by the library from either place.
                "file_bytes",
                "format_version",
                "index_bytes",
                "index_blocks",
                "index_data_blocks",
                "index_compression",
                "hash_index",
                "shards",
                "dead_bytes",
                "records_sorted",
            ] {
                assert_eq!(l[k], r[k], "{url}: stat {k}");
            }
            assert_eq!(r["file"], Value::from(url.as_str()), "{url}");
            // get: the same bytes, and a missing name is exit 4.
            let (l, r) = both(&["get", "--format", "raw", "INPUT", name], 0);
            assert!(!l.stdout.is_empty() && l.stdout == r.stdout, "{url}: get");
            let (l, r) = both(&["get", "--stats", "INPUT", name], 0);
            assert_eq!(json(&l), json(&r), "{url}: get --stats");
            run_env(&["get", url, "no/such/tensor"], &env, &[4]);
            // verify: ok, the same figures.
            let (l, r) = both(&["verify", "--json", "INPUT"], 0);
            let (l, r) = (json(&l), json(&r));
            assert_eq!(r["ok"], Value::Bool(true), "{url}: {r}");
            assert_eq!(l["tensors"], r["tensors"], "{url}: verify");
            assert_eq!(l["data_bytes"], r["data_bytes"], "{url}: verify");
            // diff: a URL against its local copy, and two URLs, are equal.
            run_env(&["diff", local, url], &env, &[0]);
            run_env(&["diff", url, url], &env, &[0]);
            // meta: the same metadata.
            let (l, r) = both(&["meta", "--json", "INPUT"], 0);
            assert_eq!(json(&l), json(&r), "{url}: meta");
            // convert: a URL into a local native file equal to the input.
            let out = dir.path().join("converted.pdx");
            run_env(
                &[
                    "convert",
                    "--force",
                    "--skip-unsupported",
                    url,
                    out.to_str().unwrap(),
                ],
                &env,
                &[0],
            );
            run_env(&["diff", url, out.to_str().unwrap()], &env, &[0, 5]);
            run_env(
                &["get", "--format", "raw", out.to_str().unwrap(), name],
                &env,
                &[0],
            );
        }

        // S3 settings from flags: endpoint and region not in the environment.
        let (_, url, _) = &inputs[4];
        let no_place = self::env(g, false);
        run_env(&["ls", url], &no_place, &[1]);
        let flags = ["--endpoint-url", g.endpoint(), "--region", g.region()];
        let mut args = flags.to_vec();
        args.extend(["ls", "--json", url.as_str()]);
        let r = run_env(&args, &no_place, &[0]);
        assert!(!json(&r).as_array().unwrap().is_empty());
        // Global flags go after the command too.
        let mut args = vec!["stat", url.as_str()];
        args.extend(flags);
        run_env(&args, &no_place, &[0]);
    });
}

/// The files under `dir` (recursively), uploaded under `prefix/` keeping their relative paths.
fn upload_tree(g: &Garage, rt: &tokio::runtime::Runtime, dir: &Path, prefix: &str) {
    let s = s3::plain_store(g, g.endpoint());
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_str().unwrap();
                put_retried(
                    rt,
                    &s,
                    &format!("{prefix}/{rel}"),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
}

/// What the path form and the URL form of an input must print alike: `ls -l` (where each
/// tensor's data is: the data file, its offset, its CRC32C), `stat` with a sharded checkpoint's
/// data files and the step a checkpoint directory resolved to, for a sharded checkpoint, a
/// TensorFlow 1 directory whose `checkpoint` names `model.ckpt` (no step), and a directory
/// whose only input is one level down; the outputs differ only by the input's name.
#[test]
fn locations_data_files_and_directories_print_alike_from_a_path_and_a_url() {
    let Some(g) = garage::shared("locations_data_files_and_directories_print_alike") else {
        return;
    };
    g.run(|| {
        let rt = s3::new_runtime();
        let b = g.bucket();
        let env = env(g, true);
        let tree = data("");
        for (rel, key) in [
            ("native/v2/sharded", "alike/sharded"),
            ("native/v2/incremental", "alike/incremental"),
            ("tf/basic/v1", "alike/tf1"),
            ("tf/strings", "alike/nest"),
        ] {
            upload_tree(g, &rt, &tree.join(rel), key);
        }
        for (rel, key) in [
            ("native/v2/sharded/ckpt", "alike/sharded/ckpt"),
            ("native/v2/incremental/ckpt", "alike/incremental/ckpt"),
            ("native/v2/slices.pdx", "alike/slices.pdx"),
            ("tf/basic/v1", "alike/tf1"),
            ("tf/strings", "alike/nest"),
        ] {
            if rel.ends_with(".pdx") {
                upload(g, &rt, &[tree.join(rel)], "alike");
            }
            let local = tree.join(rel);
            let local = local.to_str().unwrap();
            let url = format!("s3://{b}/{key}");
            for args in [
                vec!["ls", "-l", "--json"],
                vec!["ls", "-l"],
                vec!["stat"],
                vec!["stat", "--json"],
            ] {
                let out = |input: &str| {
                    let mut a = args.clone();
                    a.push(input);
                    let o = run_env(&a, &env, &[0]);
                    String::from_utf8(o.stdout)
                        .unwrap()
                        // The data files' names start with the prefix's.
                        .replace(input, "INPUT")
                };
                let (l, r) = (out(local), out(&url));
                assert_eq!(l, r, "{rel}: {args:?}");
                if args[0] == "ls" {
                    assert!(l.contains("crc32c") || l.contains("CRC32C"), "{rel}: {l}");
                }
            }
        }
        // The data files `stat` names are there, in the bucket, for the URL.
        let o = run_env(
            &["stat", "--json", &format!("s3://{b}/alike/sharded/ckpt")],
            &env,
            &[0],
        );
        let files = json(&o)["data_files"].as_array().unwrap().clone();
        assert_eq!(files.len(), 3);
        for (k, f) in files.iter().enumerate() {
            assert_eq!(
                f["path"],
                Value::from(format!("s3://{b}/alike/sharded/ckpt.data-0000{k}-of-00003"))
            );
        }
    });
}

/// Errors on URLs name the URL, with the documented exit codes: nothing at the URL (1), a
/// refused key (1), a TensorFlow data object cut short (3: corrupt data, as a cut local file).
#[test]
fn errors_on_s3_urls_name_the_url() {
    let Some(g) = garage::shared("errors_on_s3_urls_name_the_url") else {
        return;
    };
    g.run(|| {
        let rt = s3::new_runtime();
        let b = g.bucket();
        let env = env(g, true);
        let missing = format!("s3://{b}/errors/nothing");
        for cmd in ["ls", "stat", "verify"] {
            let o = run_env(&[cmd, &missing], &env, &[1]);
            let se = String::from_utf8_lossy(&o.stderr);
            assert!(se.contains(&missing), "{cmd}: {se}");
            assert!(se.contains(&format!("{missing}.index")), "{cmd}: {se}");
        }
        let o = run_env(&["get", &missing, "x"], &env, &[1]);
        assert!(String::from_utf8_lossy(&o.stderr).contains(&missing));

        // A wrong secret: refused, naming the URL.
        let s = s3::plain_store(g, g.endpoint());
        put_retried(
            &rt,
            &s,
            "errors/model.safetensors",
            std::fs::read(data("safetensors/model.safetensors")).unwrap(),
        );
        let url = format!("s3://{b}/errors/model.safetensors");
        let mut bad = env.clone();
        bad[1].1 = "0".repeat(64);
        let o = run_env(&["ls", &url], &bad, &[1]);
        assert!(String::from_utf8_lossy(&o.stderr).contains(&url));
        // --no-sign-request reaches the client: the same request unsigned is refused (the
        // bucket is not public), signed it is not.
        run_env(&["ls", &url], &env, &[0]);
        let o = run_env(&["--no-sign-request", "ls", &url], &env, &[1]);
        assert!(String::from_utf8_lossy(&o.stderr).contains(&url));

        // A TensorFlow data object cut short.
        let tf2 = data("tf/basic/tf2");
        let index = tf2.join("ckpt-1.index");
        let data_file = tf2.join("ckpt-1.data-00000-of-00001");
        put_retried(
            &rt,
            &s,
            "errors/tf/ckpt-1.index",
            std::fs::read(&index).unwrap(),
        );
        let bytes = std::fs::read(&data_file).unwrap();
        put_retried(
            &rt,
            &s,
            "errors/tf/ckpt-1.data-00000-of-00001",
            bytes[..bytes.len() / 2].to_vec(),
        );
        let prefix = format!("s3://{b}/errors/tf/ckpt-1");
        let o = run_env(&["verify", &prefix], &env, &[3]);
        let se = String::from_utf8_lossy(&o.stderr);
        assert!(
            se.contains(&format!("{prefix}.data-00000-of-00001")),
            "{se}"
        );
        // Its listing needs the index, and the data of string tensors (their sizes): the
        // numeric tensors are listed, the string tensor past the cut is the error, as for a
        // local checkpoint.
        let o = run_env(&["ls", &prefix], &env, &[3]);
        assert!(String::from_utf8_lossy(&o.stdout).contains("v_float32"));
        let se = String::from_utf8_lossy(&o.stderr);
        assert!(
            se.contains(&format!("{prefix}.data-00000-of-00001")),
            "{se}"
        );
    });
}
