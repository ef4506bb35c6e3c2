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
        &[&"demo", &"--tensors", &"20000", &"--dir", &d],
        &dir.path().join("out"),
    );
    assert_eq!(code, 0, "{tty}");
    assert!(
        tty.contains("writing [") && tty.contains("tensors"),
        "{tty}"
    );
    assert!(tty.contains("/19,999 tensors"), "a determinate bar: {tty}");
    let (code, tty) = on_terminal(
        &[&"--quiet", &"demo", &"--tensors", &"20000", &"--dir", &d],
        &dir.path().join("out"),
    );
    assert_eq!((code, tty.as_str()), (0, ""), "--quiet: no bar");
    silent(&[&"demo", &"--tensors", &"20000", &"--dir", &d], 0);
}
