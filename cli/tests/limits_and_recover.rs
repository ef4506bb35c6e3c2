//! Issue 13, items 2, 3 and 5: `recover` on inputs that are not paramdex files, usage errors
//! kept whole, limits checked before anything is written, and progress bars on a terminal only.

mod common;
use common::*;

use std::path::Path;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

// ---- usage errors (exit 2): clap's text, whole ----

#[test]
fn a_missing_argument_is_named_with_the_usage_line() {
    let o = run(&[&"convert"], 2);
    let e = stderr(&o);
    assert!(e.contains("<SRC>") && e.contains("<DST>"), "{e}");
    assert!(e.contains("Usage: paramdex convert"), "{e}");
    assert!(e.lines().count() > 1, "{e}");
    assert!(!e.contains("paramdex: error:"), "{e}");
}

#[test]
fn an_invalid_value_lists_the_valid_ones() {
    let o = run(&[&"convert", &"a", &"b", &"--to", &"tff"], 2);
    let e = stderr(&o);
    assert!(e.contains("'tff'"), "{e}");
    for v in ["paramdex", "tf", "paddle", "paddle-tensor", "safetensors"] {
        assert!(e.contains(v), "{v} missing: {e}");
    }
    assert!(e.contains("tip:") || e.contains("possible values"), "{e}");
}

#[test]
fn a_misspelt_command_gets_a_suggestion() {
    let o = run(&[&"convrt", &"a", &"b"], 2);
    let e = stderr(&o);
    assert!(e.contains("'convrt'") && e.contains("convert"), "{e}");
    assert!(e.contains("tip:"), "{e}");
    let o = run(&[&"ls", &"x", &"--jsn"], 2);
    let e = stderr(&o);
    assert!(e.contains("--json"), "{e}");
}

// ---- running under a terminal ----

/// `s` quoted for a POSIX shell.
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs the binary with `args` on a pseudo-terminal (util-linux `script`), its standard output
/// redirected to the file `stdout_to`, so that what reaches the terminal is its standard error.
/// Returns the exit code and the terminal's bytes.
fn on_terminal(args: &[&dyn AsRef<std::ffi::OsStr>], stdout_to: &Path) -> (i32, String) {
    let mut cmd = sh_quote(BIN);
    for a in args {
        cmd.push(' ');
        cmd.push_str(&sh_quote(a.as_ref().to_str().expect("UTF-8 test paths")));
    }
    cmd.push_str(" > ");
    cmd.push_str(&sh_quote(stdout_to.to_str().unwrap()));
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("util-linux `script` runs a command on a pseudo-terminal");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Runs the binary off a terminal (pipes) and returns its output; standard error must be empty.
fn silent(args: &[&dyn AsRef<std::ffi::OsStr>], code: i32) -> std::process::Output {
    let o = run(args, code);
    assert_eq!(stderr(&o), "", "no progress off a terminal");
    o
}

// ---- demo --tensors ----

fn count(file: &Path) -> usize {
    json(&run(&[&"ls", &file, &"--json"], 0))
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn demo_refuses_zero_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[&"demo", &"--tensors", &"0", &"--dir", &dir.path()], 2);
    assert!(stderr(&o).contains("at least 1"), "{}", stderr(&o));
    assert!(!dir.path().join("demo.pdx").exists());
}

#[test]
fn demo_refuses_an_absurd_count_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("d");
    let t = std::time::Instant::now();
    let o = run(
        &[&"demo", &"--tensors", &"1000000000000", &"--dir", &out],
        2,
    );
    assert!(t.elapsed().as_secs() < 10);
    let e = stderr(&o);
    // The limit, and why: the size it would take.
    assert!(e.contains("at most 10000000 tensors"), "{e}");
    assert!(e.contains("TiB"), "{e}");
    assert!(!out.exists(), "nothing written");
}

#[test]
fn demo_writes_exactly_the_tensors_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    for n in [1usize, 2, 14] {
        let d = dir.path().join(n.to_string());
        let n_arg = n.to_string();
        silent(&[&"demo", &"--tensors", &n_arg, &"--dir", &d], 0);
        assert_eq!(count(&d.join("demo.pdx")), n);
    }
}

#[test]
fn a_large_demo_shows_progress_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("d");
    let (code, tty) = on_terminal(
        &[&"demo", &"--tensors", &"3000", &"--dir", &d],
        &dir.path().join("out"),
    );
    assert_eq!(code, 0, "{tty}");
    assert!(
        tty.contains("writing [") && tty.contains("tensors"),
        "{tty}"
    );
    assert!(tty.contains("/2,999 tensors"), "a determinate bar: {tty}");
    let (code, tty) = on_terminal(
        &[&"--quiet", &"demo", &"--tensors", &"3000", &"--dir", &d],
        &dir.path().join("out"),
    );
    assert_eq!((code, tty.as_str()), (0, ""), "--quiet: no bar");
    silent(&[&"demo", &"--tensors", &"3000", &"--dir", &d], 0);
}

// ---- recover ----

/// Checks that `recover IN OUT` fails with `code`, writes nothing, and says `says`.
fn refused(input: &Path, out: &Path, code: i32, says: &[&str]) {
    let o = run(&[&"recover", &input, &out], code);
    let e = stderr(&o);
    for s in says {
        assert!(e.contains(s), "{s:?} missing: {e}");
    }
    assert!(!out.exists(), "{} written", out.display());
    let dir = out.parent().unwrap();
    let litter: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(litter.is_empty(), "temporary files left: {litter:?}");
}

#[test]
fn recover_refuses_inputs_of_other_formats_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o").join("out.pdx");
    std::fs::create_dir(out.parent().unwrap()).unwrap();
    let tf = data("tf/basic/v1/model.ckpt.index");
    let cases: [(&Path, &str); 5] = [
        (&tf, "is a TensorFlow checkpoint, not a paramdex file"),
        (
            &data("tf/basic/v1/model.ckpt.data-00000-of-00001"),
            "is a TensorFlow checkpoint",
        ),
        (
            &data("paddle/models/legacy/m.pdiparams"),
            "is a Paddle model",
        ),
        (
            &data("paddle/lod/lod1_f32.lodtensor"),
            "is a Paddle tensor file",
        ),
        (
            &data("safetensors/model.safetensors"),
            "is a safetensors file",
        ),
    ];
    for (input, what) in cases {
        let verify = format!("paramdex verify {}", input.display());
        refused(input, &out, 1, &[what, "recover rebuilds", &verify]);
    }
    // A directory holding a checkpoint is named as such; another directory as a directory.
    refused(
        &data("tf/basic/v1"),
        &out,
        1,
        &["is a TensorFlow checkpoint"],
    );
    refused(dir.path(), &out, 1, &["a directory, not a paramdex file"]);
}

#[test]
fn recover_refuses_bytes_that_are_no_paramdex_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o").join("out.pdx");
    std::fs::create_dir(out.parent().unwrap()).unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    refused(
        &empty,
        &out,
        1,
        &["the file is empty", "no record to recover"],
    );
    let random = dir.path().join("random.bin");
    let bytes: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
        .collect();
    std::fs::write(&random, &bytes).unwrap();
    refused(
        &random,
        &out,
        1,
        &[
            "does not start with a paramdex record",
            "not a paramdex file",
        ],
    );
    // A paramdex file cut inside its first record holds nothing to recover: corrupt (3).
    let full = std::fs::read(native(dir.path())).unwrap();
    let cut = dir.path().join("cut");
    std::fs::write(&cut, &full[..20]).unwrap();
    refused(&cut, &out, 3, &["ends inside its first record"]);
}

#[test]
fn recover_of_a_complete_file_says_it_needs_none() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let out = dir.path().join("o").join("out.pdx");
    std::fs::create_dir(out.parent().unwrap()).unwrap();
    refused(
        &p,
        &out,
        1,
        &[
            "is a complete paramdex file (5 tensors",
            "needs no recovery",
        ],
    );
}

#[test]
fn recover_of_a_torn_writer_file_says_where_the_tail_starts() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let r = paramdex::Reader::open(&p).unwrap();
    let mut ends: Vec<u64> = r
        .iter()
        .map(|t| {
            let t = t.unwrap();
            t.data_offset() + t.data().len() as u64
        })
        .collect();
    ends.sort_unstable();
    let records_len = r.header().records_len;
    drop(r);
    let full = std::fs::read(&p).unwrap();
    // Cut inside the last record, as a crash while writing leaves a writer's temporary file.
    let cut = ends[ends.len() - 1] - 2;
    assert!(cut < records_len);
    let torn = dir.path().join(".native.pdx.abc123.pdx-tmp");
    std::fs::write(&torn, &full[..cut as usize]).unwrap();
    let out = dir.path().join("rebuilt.pdx");
    let o = silent(&[&"recover", &torn, &out], 0);
    let text = stdout(&o);
    let good = ends[ends.len() - 2];
    assert!(
        text.contains(&format!("recovered 4 tensors ({good} bytes of records)")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "the torn tail starts at offset {good} ({} bytes dropped)",
            cut - good
        )),
        "{text}"
    );
    for alarming in ["corrupt", "not a Paddle tensor stream", "scan stopped"] {
        assert!(!text.contains(alarming), "{alarming}: {text}");
    }
    assert_eq!(count(&out), 4);
    run(&[&"verify", &out], 0);
}

// ---- limits of output formats, checked before anything is written ----

/// Files in `dir` (names), to check that nothing was left.
fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_safetensors_header_over_the_limit_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("long_names.pdx");
    // 1,600 names of 64,000 bytes: a 102.4 MB safetensors header, above the format's 100 MB.
    let mut w = paramdex::Writer::create(&src).unwrap();
    for i in 0..1600u32 {
        let name = format!("{}{i:05}", "n".repeat(63_995));
        w.add_values(name.as_str(), &[1], &[1u8]).unwrap();
    }
    w.finish().unwrap();

    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("x.safetensors");
    let o = run(&[&"convert", &src, &out, &"--to", &"safetensors"], 1);
    let e = stderr(&o);
    // The limit, and the size needed (names, dtypes, shapes, offsets, padding).
    assert!(e.contains("safetensors header"), "{e}");
    assert!(e.contains("above the limit of 100000000"), "{e}");
    let needed: u64 = e
        .split("bytes is ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("the size needed: {e}"));
    assert!((102_400_000..103_000_000).contains(&needed), "{needed}");
    assert!(files_in(&out_dir).is_empty(), "{:?}", files_in(&out_dir));
}

/// A safetensors file holding `a` (float32 [1]) and `z` of rank `rank` (float32, all 1s).
fn safetensors_with_rank(path: &Path, rank: usize) {
    let shape: Vec<String> = vec!["1".to_string(); rank];
    let header = format!(
        r#"{{"a":{{"dtype":"F32","shape":[1],"data_offsets":[0,4]}},"z":{{"dtype":"F32","shape":[{}],"data_offsets":[4,8]}}}}"#,
        shape.join(",")
    );
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(&[0, 0, 128, 63, 0, 0, 0, 64]);
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_rank_the_output_cannot_hold_is_refused_up_front_naming_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("rank300.safetensors");
    safetensors_with_rank(&src, 300);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    for to in ["paramdex", "paddle", "tf"] {
        let out = out_dir.join(format!("x-{to}"));
        let o = run(&[&"convert", &src, &out, &"--to", &to], 1);
        let e = stderr(&o);
        assert!(
            e.contains("tensor z is of rank 300 (at most 254 dimensions), which"),
            "{to}: {e}"
        );
        assert!(e.contains("--skip-unsupported"), "{to}: {e}");
        assert!(
            files_in(&out_dir).is_empty(),
            "{to}: {:?}",
            files_in(&out_dir)
        );
        // Left out with a note instead; the rest is written.
        let o = run(
            &[&"convert", &src, &out, &"--to", &to, &"--skip-unsupported"],
            0,
        );
        assert!(
            stderr(&o).contains("left out z (of rank 300 "),
            "{}",
            stderr(&o)
        );
        let listed = if to == "paddle" {
            out_dir.join(format!("x-{to}.pdiparams"))
        } else {
            out.clone()
        };
        if to != "paddle" {
            assert_eq!(count(&listed), 1, "{to}");
        }
        for f in files_in(&out_dir) {
            let p = out_dir.join(f);
            if p.is_dir() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
}

#[test]
fn a_name_tensorflow_reserves_is_refused_before_writing() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("ckpt");
    let src = data("tf_nul");
    let o = run(&[&"convert", &src, &out, &"--to", &"tf"], 1);
    let e = stderr(&o);
    assert!(
        e.contains(r"tensor \x00lead is named with an empty name or one starting with a NUL byte"),
        "{e}"
    );
    assert!(e.contains("--skip-unsupported"), "{e}");
    assert!(files_in(&out_dir).is_empty(), "{:?}", files_in(&out_dir));
    let o = run(
        &[
            &"convert",
            &src,
            &out,
            &"--to",
            &"tf",
            &"--skip-unsupported",
        ],
        0,
    );
    assert!(stderr(&o).contains(r"left out \x00lead"), "{}", stderr(&o));
    assert_eq!(count(&out), 1);
}

// ---- progress of long commands: on a terminal only ----

#[test]
fn long_commands_draw_a_determinate_bar_on_a_terminal_only() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let work = d.join("w");
    silent(&[&"demo", &"--tensors", &"3000", &"--dir", &work], 0);
    let pdx = work.join("demo.pdx");
    let tf = work.join("tf");
    // Off a terminal, no progress: only the note that the demo's LoD tensor lost its LoD
    // (a TensorFlow checkpoint has none).
    let o = run(&[&"convert", &pdx, &tf, &"--to", &"tf"], 0);
    assert_eq!(
        stderr(&o),
        "paramdex: note: the LoD of tensor data.batch_tokens was not kept (a TensorFlow \
         checkpoint has no LoD); its values were\n"
    );
    let full = std::fs::read(&pdx).unwrap();
    let torn = work.join("torn");
    std::fs::write(&torn, &full[..full.len() / 2]).unwrap();
    let out = d.join("stdout");
    let fresh = |name: &str| {
        let p = work.join(name);
        let _ = std::fs::remove_file(&p);
        p
    };
    type Args = Vec<Box<dyn AsRef<std::ffi::OsStr>>>;
    let cases: Vec<(Args, i32, &[&str])> = vec![
        (
            vec![Box::new("ls"), Box::new(pdx.clone())],
            0,
            &["listing [", "/3,000 tensors"],
        ),
        (
            vec![Box::new("ls"), Box::new(pdx.clone()), Box::new("--json")],
            0,
            &["listing [", "/3,000 tensors"],
        ),
        (
            vec![Box::new("ls"), Box::new(tf.clone())],
            0,
            &["listing [", "of index"],
        ),
        (
            vec![Box::new("stat"), Box::new(pdx.clone())],
            0,
            &["listing [", "/3,000 tensors"],
        ),
        (
            vec![
                Box::new("diff"),
                Box::new(pdx.clone()),
                Box::new(tf.clone()),
            ],
            5,
            &["comparing [", "%"],
        ),
        (
            vec![
                Box::new("recover"),
                Box::new(torn.clone()),
                Box::new(fresh("r.pdx")),
            ],
            0,
            &["recovering [", "MiB"],
        ),
        (
            vec![
                Box::new("convert"),
                Box::new(pdx.clone()),
                Box::new(work.join("t2")),
                // Each case runs three times (terminal, --quiet, no terminal).
                Box::new("--force"),
                Box::new("--to"),
                // Paddle keeps the demo's LoD tensor whole: nothing to note, so standard
                // error stays empty off a terminal (TensorFlow output notes the lost LoD).
                Box::new("paddle"),
            ],
            0,
            &["listing [", "/3,000 tensors", "writing ["],
        ),
        (
            vec![
                Box::new("convert"),
                Box::new(tf.clone()),
                Box::new(work.join("p")),
                // Each case runs three times (terminal, --quiet, no terminal).
                Box::new("--force"),
                Box::new("--to"),
                Box::new("paddle"),
            ],
            0,
            &["listing [", "of index", "writing ["],
        ),
    ];
    for (args, code, bar) in &cases {
        let a: Vec<&dyn AsRef<std::ffi::OsStr>> = args.iter().map(|b| b.as_ref()).collect();
        let what = format!("{:?}", a.iter().map(|x| x.as_ref()).collect::<Vec<_>>());
        let _ = std::fs::remove_file(work.join("r.pdx"));
        let (got, tty) = on_terminal(&a, &out);
        assert_eq!(got, *code, "{what}: {tty}");
        for b in *bar {
            assert!(tty.contains(b), "{what}: {b:?} missing: {tty}");
        }
        // Standard output holds no bar.
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(
            !text.contains('\r') && !text.contains('\x1b'),
            "{what}: {text}"
        );
        for b in ["listing [", "comparing [", "recovering [", "writing ["] {
            assert!(!text.contains(b), "{what}: {text}");
        }
        // --quiet: no bar.
        let _ = std::fs::remove_file(work.join("r.pdx"));
        let mut q = vec![&"--quiet" as &dyn AsRef<std::ffi::OsStr>];
        q.extend(a.iter().copied());
        let (got, tty) = on_terminal(&q, &out);
        assert_eq!((got, tty.as_str()), (*code, ""), "{what} --quiet");
        // Off a terminal: standard error stays empty.
        let _ = std::fs::remove_file(work.join("r.pdx"));
        silent(&a, *code);
    }
    // The listing on standard output is whole: the heading, a line per tensor, the totals.
    let (_, _) = on_terminal(&[&"ls", &pdx], &out);
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(text.lines().count(), 3_002);
    assert!(
        text.lines().last().unwrap().starts_with("3000 tensors"),
        "{text}"
    );
}
