//! Issue 13, defects 1 and 6 (outputs): interrupted runs leave nothing behind and say what they
//! removed (real SIGINT and SIGTERM sent to a child mid-write), `get -o` is atomic and `-o -`
//! is standard output, one rule for missing parent directories, existing outputs replaced only
//! with `--force`, directories refused up front, layout options refused for other targets,
//! and errors that name paths as the user gave them.

mod common;
use common::*;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use paramdex::{DType, Tensor, Writer, WriterOptions};

/// Runs the binary in `dir`; the same checks as `common::run_codes` (exit code, no panic, one
/// error line).
fn run_in(dir: &Path, args: &[&dyn AsRef<OsStr>], code: i32) -> Output {
    let out = Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .current_dir(dir)
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("the binary runs");
    let se = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "paramdex {:?}: stderr {se}",
        args.iter().map(|a| a.as_ref()).collect::<Vec<_>>()
    );
    assert!(!se.contains("panicked"), "{se}");
    if code != 0 {
        let lines: Vec<&str> = se.lines().collect();
        if code == 2 {
            // Usage errors are clap's whole rendering.
            assert!(
                lines[0].starts_with("error: ") && se.contains("--help"),
                "{se}"
            );
        } else {
            assert_eq!(lines.len(), 1, "one error line: {se}");
            assert!(lines[0].starts_with("paramdex: error: "), "{se}");
        }
    }
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The names in `dir` (empty if it does not exist).
fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every file under `dir` with its bytes (relative paths), to compare trees.
fn tree(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut v = Vec::new();
    fn walk(root: &Path, d: &Path, v: &mut Vec<(PathBuf, Vec<u8>)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, v);
            } else {
                v.push((
                    p.strip_prefix(root).unwrap().to_path_buf(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// A native file of `count` float32 tensors `t000`, `t001`, ... of `bytes` bytes each.
fn big_native(path: &Path, count: usize, bytes: usize) {
    let opts = WriterOptions {
        sync: false,
        ..WriterOptions::default()
    };
    let mut w = Writer::create_with(path, opts).unwrap();
    for i in 0..count {
        let data = vec![i as u8 | 1; bytes];
        let shape = [(bytes / 4) as u64];
        w.add(
            format!("t{i:03}"),
            Tensor::new(DType::Float32, &shape, &data),
        )
        .unwrap();
    }
    w.finish().unwrap();
}

/// The input of the interruption tests: 32 tensors of 4 MiB (128 MiB), so that a debug build is
/// still writing well after its staged output appears, and small enough for a loaded machine.
fn big_input(dir: &Path) -> PathBuf {
    let p = dir.join("big.pdx");
    big_native(&p, 32, 4 << 20);
    p
}

/// What one interrupted run gave.
struct Interrupted {
    out: Output,
    /// The paths the message says were removed, as printed.
    removed: Vec<String>,
}

/// Runs `paramdex ARGS` in `dir`, waits until a new entry whose name starts with `staged`
/// appears in `watch`, sends `signal` (`INT` or `TERM`) with `kill`, and returns what the
/// child did. `setup` makes the directory's starting state; it runs again if the child
/// completed its work before the signal arrived (a loaded machine), up to three times.
fn interrupt(
    dir: &Path,
    args: &[&str],
    watch: &Path,
    staged: &str,
    signal: &str,
    setup: &dyn Fn(),
) -> Interrupted {
    for attempt in 1..=3 {
        setup();
        let before = names(watch);
        let mut child = Command::new(BIN)
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let deadline = Instant::now() + Duration::from_secs(120);
        let seen = loop {
            if child.try_wait().unwrap().is_some() {
                break false;
            }
            if names(watch)
                .iter()
                .any(|n| !before.contains(n) && n.starts_with(staged))
            {
                break true;
            }
            assert!(
                Instant::now() < deadline,
                "no staged output {staged}* appeared in {}",
                watch.display()
            );
            std::thread::sleep(Duration::from_millis(1));
        };
        if seen {
            let ok = Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(child.id().to_string())
                .status()
                .expect("kill runs");
            assert!(ok.success());
        }
        let out = child.wait_with_output().unwrap();
        let se = stderr(&out);
        let removed: Vec<String> = se
            .lines()
            .find_map(|l| l.strip_prefix("paramdex: interrupted; removed "))
            .and_then(|rest| rest.split_once(": "))
            .map(|(_, paths)| paths.split(", ").map(str::to_string).collect())
            .unwrap_or_default();
        let too_late = !seen
            || out.status.code() == Some(0)
            || se.contains("paramdex: interrupted; nothing was staged");
        if too_late {
            assert!(
                seen || out.status.code() == Some(0),
                "the child failed before it staged anything: {se}"
            );
            eprintln!("attempt {attempt}: the signal came after the output was complete; again");
            continue;
        }
        return Interrupted { out, removed };
    }
    panic!("three runs finished before they could be interrupted");
}

/// The common checks of an interrupted run: the exit status of the signal, the message (with
/// relative paths under `rel_dir`), and nothing left in `watch` but what was there before.
fn check_interrupted(
    r: &Interrupted,
    code: i32,
    staged: &str,
    rel_dir: &str,
    watch: &Path,
    before: &BTreeSet<String>,
) {
    let se = stderr(&r.out);
    assert_eq!(r.out.status.code(), Some(code), "stderr: {se}");
    assert!(!se.contains("panicked"), "{se}");
    let line = se
        .lines()
        .find(|l| l.starts_with("paramdex: interrupted; removed "))
        .unwrap_or_else(|| panic!("no message naming what was removed: {se}"));
    assert!(
        line.starts_with(&format!(
            "paramdex: interrupted; removed {} staged output{}: ",
            r.removed.len(),
            if r.removed.len() == 1 { "" } else { "s" }
        )),
        "{line}"
    );
    assert!(!r.removed.is_empty(), "{line}");
    for p in &r.removed {
        // Named as the output was: relative, beside it.
        let p = Path::new(p);
        assert!(p.is_relative(), "{line}");
        assert_eq!(p.parent().unwrap(), Path::new(rel_dir), "{line}");
        let name = p.file_name().unwrap().to_string_lossy();
        assert!(name.starts_with(staged), "{line}");
    }
    assert_eq!(&names(watch), before, "litter left behind: {se}");
}

#[test]
fn sigint_during_convert_to_native_removes_the_staged_file_and_keeps_the_old_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d);
    let old = b"the previous output, which must survive byte for byte".to_vec();
    let setup = || std::fs::write(d.join("out.pdx"), &old).unwrap();
    setup();
    let before = names(d);
    let args = ["convert", "big.pdx", "out.pdx", "--force"];
    let r = interrupt(d, &args, d, ".out.pdx.", "INT", &setup);
    check_interrupted(&r, 130, ".out.pdx.", "", d, &before);
    assert_eq!(std::fs::read(d.join("out.pdx")).unwrap(), old);
}

#[test]
fn sigterm_during_convert_to_safetensors_removes_the_staging_and_the_new_directories() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d);
    let before_top = names(d);
    let watch = d.join("new/sub");
    let args = [
        "convert",
        "big.pdx",
        "new/sub/out.safetensors",
        "--to",
        "safetensors",
    ];
    let setup = || {
        let _ = std::fs::remove_dir_all(d.join("new"));
    };
    let r = interrupt(d, &args, &watch, ".out.safetensors.", "TERM", &setup);
    check_interrupted(
        &r,
        143,
        ".out.safetensors.",
        "new/sub",
        &watch,
        &BTreeSet::new(),
    );
    assert!(!d.join("new").exists(), "the directories it created remain");
    assert_eq!(names(d), before_top);
}

#[test]
fn sigint_during_convert_to_tf_keeps_the_old_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d);
    let setup = || {
        std::fs::write(d.join("ckpt.index"), b"old index").unwrap();
        std::fs::write(d.join("ckpt.data-00000-of-00001"), b"old data").unwrap();
    };
    setup();
    let before = names(d);
    let args = ["convert", "big.pdx", "ckpt", "--to", "tf", "--force"];
    let r = interrupt(d, &args, d, ".ckpt.", "INT", &setup);
    check_interrupted(&r, 130, ".ckpt.", "", d, &before);
    assert_eq!(std::fs::read(d.join("ckpt.index")).unwrap(), b"old index");
    assert_eq!(
        std::fs::read(d.join("ckpt.data-00000-of-00001")).unwrap(),
        b"old data"
    );
}

#[test]
fn sigterm_during_convert_to_a_paddle_tensor_directory_keeps_the_old_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    big_input(d);
    let vars = d.join("vars");
    let setup = || {
        let _ = std::fs::remove_dir_all(&vars);
        std::fs::create_dir_all(vars.join("sub")).unwrap();
        std::fs::write(vars.join("w"), b"old w").unwrap();
        std::fs::write(vars.join("sub/b"), b"old b").unwrap();
    };
    setup();
    let old = tree(&vars);
    let before = names(d);
    let args = [
        "convert",
        "big.pdx",
        "vars",
        "--to",
        "paddle-tensor",
        "--force",
    ];
    let r = interrupt(d, &args, d, ".vars.", "TERM", &setup);
    check_interrupted(&r, 143, ".vars.", "", d, &before);
    assert_eq!(tree(&vars), old);
}

#[test]
fn sigint_during_get_o_leaves_no_partial_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // One tensor of 128 MiB.
    big_native(&d.join("one.pdx"), 1, 128 << 20);
    let before = names(d);
    let args = ["get", "one.pdx", "t000", "--format", "raw", "-o", "t.bin"];
    // Any new entry: the old code wrote the final name directly.
    let setup = || {
        let _ = std::fs::remove_file(d.join("t.bin"));
    };
    let r = interrupt(d, &args, d, "", "INT", &setup);
    check_interrupted(&r, 130, ".t.bin.", "", d, &before);
    assert!(!d.join("t.bin").exists());
}

/// A paramdex file whose tensor data is damaged (its index intact): reading the tensor fails
/// with a checksum mismatch, after an output has been staged.
fn corrupt_native(dir: &Path) -> PathBuf {
    let p = dir.join("corrupt.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add_values("a", &[4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    w.add_values("b", &[4], &[5.0f32, 6.0, 7.0, 8.0]).unwrap();
    w.finish().unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    let at = bytes
        .windows(4)
        .position(|w| w == 7.0f32.to_le_bytes())
        .unwrap();
    bytes[at] ^= 0xff;
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn every_command_creates_missing_parent_directories() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    let n = "native.pdx";
    for (target, dst, made) in [
        ("paramdex", "c1/x/out.pdx", vec!["c1/x/out.pdx"]),
        (
            "tf",
            "c2/x/ckpt",
            vec!["c2/x/ckpt.index", "c2/x/ckpt.data-00000-of-00001"],
        ),
        (
            "paddle",
            "c3/x/m",
            vec!["c3/x/m.pdiparams", "c3/x/m.pdmodel"],
        ),
        ("paddle-tensor", "c4/x/vars", vec!["c4/x/vars/a.weight"]),
        (
            "safetensors",
            "c5/x/o.safetensors",
            vec!["c5/x/o.safetensors"],
        ),
        (
            "paddle-merged",
            "c6/x/m.merged",
            vec!["c6/x/m.merged", "c6/x/m.pdmodel"],
        ),
    ] {
        let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"convert", &n, &dst, &"--to", &target];
        if target == "safetensors" || target == "paddle" || target == "paddle-merged" {
            // native.pdx has a name that is not UTF-8, which neither can hold.
            args.push(&"--skip-unsupported");
        }
        run_in(d, &args, 0);
        for m in made {
            assert!(d.join(m).is_file(), "{target}: {m}");
        }
    }
    run_in(d, &[&"merge", &"m/x/merged.pdx", &n], 0);
    assert!(d.join("m/x/merged.pdx").is_file());
    // The example of docs/formats.md ("TensorFlow").
    run_in(d, &[&"export-tf", &n, &"out/ckpt"], 0);
    assert!(d.join("out/ckpt.index").is_file());
    assert!(d.join("out/ckpt.data-00000-of-00001").is_file());
    run_in(
        d,
        &[
            &"get",
            &n,
            &"a.weight",
            &"--format",
            &"npy",
            &"-o",
            &"g/x/w.npy",
        ],
        0,
    );
    assert!(std::fs::read(d.join("g/x/w.npy"))
        .unwrap()
        .starts_with(b"\x93NUMPY"));
    // A writer's temporary file after a crash: the records without the index.
    let full = std::fs::read(d.join(n)).unwrap();
    let records_len = {
        let r = paramdex::Reader::open(d.join(n)).unwrap();
        r.header().records_len as usize
    };
    std::fs::write(d.join("torn.tmp"), &full[..records_len]).unwrap();
    run_in(d, &[&"recover", &"torn.tmp", &"r/x/rec.pdx"], 0);
    assert!(d.join("r/x/rec.pdx").is_file());
    run_in(d, &[&"demo", &"--dir", &"demo/x", &"--tensors", &"3"], 0);
    assert!(d.join("demo/x/demo.pdx").is_file());
}

#[test]
fn a_failed_command_removes_the_directories_it_created() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    corrupt_native(d);
    for (target, dst) in [
        ("paramdex", "new/x/out.pdx"),
        ("tf", "new/x/ckpt"),
        ("paddle", "new/x/m"),
        ("paddle-tensor", "new/x/vars"),
        ("safetensors", "new/x/o.safetensors"),
        ("paddle-merged", "new/x/m.merged"),
    ] {
        let o = run_in(d, &[&"convert", &"corrupt.pdx", &dst, &"--to", &target], 3);
        assert!(stderr(&o).contains("checksum"), "{}", stderr(&o));
        assert!(!d.join("new").exists(), "{target}: directories left behind");
        assert_eq!(names(d), BTreeSet::from(["corrupt.pdx".to_string()]));
    }
    run_in(d, &[&"merge", &"new/x/m.pdx", &"corrupt.pdx"], 3);
    assert!(!d.join("new").exists());
    run_in(
        d,
        &[
            &"get",
            &"corrupt.pdx",
            &"b",
            &"--format",
            &"raw",
            &"-o",
            &"new/x/b.bin",
        ],
        3,
    );
    assert!(!d.join("new").exists());
    // A tensor that does not exist: nothing is created at all.
    run_in(
        d,
        &[&"get", &"corrupt.pdx", &"nope", &"-o", &"new/x/b.bin"],
        4,
    );
    assert!(!d.join("new").exists());
}

#[test]
fn get_o_dash_writes_standard_output() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    let raw = run_in(
        d,
        &[&"get", &"native.pdx", &"a.weight", &"--format", &"raw"],
        0,
    );
    let dash = run_in(
        d,
        &[
            &"get",
            &"native.pdx",
            &"a.weight",
            &"--format",
            &"raw",
            &"-o",
            &"-",
        ],
        0,
    );
    let want: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(dash.stdout, want);
    assert_eq!(raw.stdout, want);
    let npy = run_in(
        d,
        &[
            &"get",
            &"native.pdx",
            &"a.weight",
            &"--format",
            &"npy",
            &"-o",
            &"-",
        ],
        0,
    );
    assert!(npy.stdout.starts_with(b"\x93NUMPY"));
    let json = run_in(d, &[&"get", &"native.pdx", &"a.weight", &"-o", &"-"], 0);
    assert!(stdout(&json).contains("a.weight"));
    assert!(!d.join("-").exists(), "a file named - was created");
}

/// `get -o` replaces the name, never the bytes of the old file in place: another name of
/// the old file (a hard link, a backup made with `ln`) keeps its contents, as with every
/// atomic replacement (the old code truncated the shared file).
#[test]
fn get_o_replaces_a_file_by_renaming_a_complete_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    let old = vec![b'x'; 10_000];
    std::fs::write(d.join("w.npy"), &old).unwrap();
    std::fs::hard_link(d.join("w.npy"), d.join("backup.npy")).unwrap();
    run_in(
        d,
        &[
            &"get",
            &"native.pdx",
            &"a.weight",
            &"--format",
            &"npy",
            &"-o",
            &"w.npy",
        ],
        0,
    );
    let got = std::fs::read(d.join("w.npy")).unwrap();
    assert!(got.starts_with(b"\x93NUMPY") && got.len() < 10_000);
    assert_eq!(std::fs::read(d.join("backup.npy")).unwrap(), old);
    assert_eq!(
        names(d),
        BTreeSet::from([
            "backup.npy".to_string(),
            "native.pdx".to_string(),
            "w.npy".to_string()
        ])
    );
}

#[test]
fn convert_and_merge_refuse_existing_outputs_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    let n = "native.pdx";
    // Each output a target writes, made to exist one at a time.
    let cases: &[(&str, &str, &str, bool)] = &[
        ("paramdex", "o.pdx", "o.pdx", false),
        ("tf", "ckpt", "ckpt.index", false),
        ("tf", "ckpt", "ckpt.data-00000-of-00001", false),
        // A stale shard of another checkpoint with the same prefix.
        ("tf", "ckpt", "ckpt.data-00001-of-00002", false),
        ("paddle", "m", "m.pdiparams", false),
        ("paddle-tensor", "vars", "vars", true),
        ("safetensors", "o.safetensors", "o.safetensors", false),
    ];
    for &(target, dst, existing, is_dir) in cases {
        let e = d.join(existing);
        if is_dir {
            std::fs::create_dir(&e).unwrap();
            std::fs::write(e.join("old"), b"old").unwrap();
        } else {
            std::fs::write(&e, b"old").unwrap();
        }
        let old = if is_dir {
            tree(&e)
        } else {
            vec![(PathBuf::new(), std::fs::read(&e).unwrap())]
        };
        let same = || {
            let now = if is_dir {
                tree(&e)
            } else {
                vec![(PathBuf::new(), std::fs::read(&e).unwrap())]
            };
            assert_eq!(now, old, "{target}: {existing} changed");
        };
        // Refused before any work: the input is not even opened.
        let o = run_in(
            d,
            &[&"convert", &"no-such-input.pdx", &dst, &"--to", &target],
            1,
        );
        let msg = stderr(&o);
        assert!(
            msg.contains(&format!("{existing} already exists")) && msg.contains("--force"),
            "{target}: {msg}"
        );
        let mut args: Vec<&dyn AsRef<OsStr>> = vec![&"convert", &n, &dst, &"--to", &target];
        if target == "safetensors" || target == "paddle" {
            // native.pdx has a name that is not UTF-8, which neither can hold.
            args.push(&"--skip-unsupported");
        }
        run_in(d, &args, 1);
        same();
        args.push(&"--force");
        run_in(d, &args, 0);
        // Replaced by a complete output that reads back (a combined .pdiparams through the
        // program written beside it).
        run_in(d, &[&"ls", &dst], 0);
        if is_dir {
            assert!(!e.join("old").exists() && e.join("a.weight").is_file());
        } else if !existing.contains("00001-of-00002") {
            assert_ne!(std::fs::read(&e).unwrap(), b"old", "{target}: {existing}");
        }
        // Clean up for the next case.
        for entry in names(d) {
            if entry != n {
                let p = d.join(&entry);
                if p.is_dir() {
                    std::fs::remove_dir_all(&p).unwrap();
                } else {
                    std::fs::remove_file(&p).unwrap();
                }
            }
        }
    }
    // merge: the same, before the inputs are opened.
    std::fs::write(d.join("m.pdx"), b"old").unwrap();
    let o = run_in(d, &[&"merge", &"m.pdx", &"no-such-input.pdx"], 1);
    assert!(
        stderr(&o).contains("m.pdx already exists"),
        "{}",
        stderr(&o)
    );
    run_in(d, &[&"merge", &"m.pdx", &n], 1);
    assert_eq!(std::fs::read(d.join("m.pdx")).unwrap(), b"old");
    run_in(d, &[&"merge", &"m.pdx", &n, &"--force"], 0);
    run_in(d, &[&"ls", &"m.pdx"], 0);
    // The same file as input and output, replaced.
    run_in(
        d,
        &[&"convert", &"m.pdx", &"m.pdx", &"--force", &"--align", &"1"],
        0,
    );
    run_in(d, &[&"verify", &"m.pdx"], 0);
}

#[test]
fn convert_onto_an_existing_directory_fails_up_front() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    std::fs::create_dir(d.join("somedir")).unwrap();
    for target in ["paramdex", "safetensors"] {
        for force in [false, true] {
            let mut args: Vec<&dyn AsRef<OsStr>> = vec![
                &"convert",
                &"no-such-input.pdx",
                &"somedir",
                &"--to",
                &target,
            ];
            if force {
                args.push(&"--force");
            }
            let o = run_in(d, &args, 1);
            let msg = stderr(&o);
            assert!(msg.contains("somedir is a directory"), "{target}: {msg}");
        }
    }
    let o = run_in(
        d,
        &[&"merge", &"somedir", &"no-such-input.pdx", &"--force"],
        1,
    );
    assert!(
        stderr(&o).contains("somedir is a directory"),
        "{}",
        stderr(&o)
    );
    // paddle-tensor: one tensor is a file, which does not replace a directory even with
    // --force; several make a directory, which --force replaces.
    let one = d.join("one.pdx");
    let mut w = Writer::create(&one).unwrap();
    w.add_values("only", &[1], &[1.0f32]).unwrap();
    w.finish().unwrap();
    let o = run_in(
        d,
        &[
            &"convert",
            &"one.pdx",
            &"somedir",
            &"--to",
            &"paddle-tensor",
            &"--force",
        ],
        1,
    );
    assert!(
        stderr(&o).contains("somedir is a directory"),
        "{}",
        stderr(&o)
    );
    std::fs::write(d.join("somedir/old"), b"old").unwrap();
    run_in(
        d,
        &[
            &"convert",
            &"native.pdx",
            &"somedir",
            &"--to",
            &"paddle-tensor",
            &"--force",
        ],
        0,
    );
    assert!(!d.join("somedir/old").exists());
    assert!(d.join("somedir/a.weight").is_file());
}

#[test]
fn layout_options_are_refused_for_targets_that_are_not_native() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    for target in ["tf", "paddle", "paddle-tensor", "safetensors"] {
        for opt in [
            ["--align", "4096"],
            ["--compress", "snappy"],
            ["--block-size", "4096"],
        ] {
            let o = run_in(
                d,
                &[
                    &"convert",
                    &"native.pdx",
                    &"out",
                    &"--to",
                    &target,
                    &opt[0],
                    &opt[1],
                    &"--skip-unsupported",
                ],
                2,
            );
            let msg = stderr(&o);
            assert!(
                msg.contains(opt[0]) && msg.contains(&format!("--to {target}")),
                "{msg}"
            );
            assert_eq!(names(d), BTreeSet::from(["native.pdx".to_string()]));
        }
    }
    // Native output takes them (explicitly or by default), and so does merge.
    run_in(
        d,
        &[
            &"convert",
            &"native.pdx",
            &"a.pdx",
            &"--to",
            &"paramdex",
            &"--align",
            &"4096",
            &"--compress",
            &"snappy",
            &"--block-size",
            &"4096",
        ],
        0,
    );
    run_in(
        d,
        &[&"convert", &"native.pdx", &"b.pdx", &"--align", &"1"],
        0,
    );
    run_in(
        d,
        &[&"merge", &"c.pdx", &"native.pdx", &"--block-size", &"4096"],
        0,
    );
    let stat = json(&run_in(d, &[&"stat", &"a.pdx", &"--json"], 0));
    assert_eq!(stat["alignment"], 4096, "{stat}");
    // The defaults are still documented.
    let help = stdout(&run_in(d, &[&"convert", &"--help"], 0));
    for want in [
        format!("[default: {}]", paramdex::DEFAULT_ALIGNMENT),
        "[default: none]".into(),
        format!("[default: {}]", paramdex::DEFAULT_BLOCK_SIZE),
    ] {
        assert!(help.contains(&want), "{want} in {help}");
    }
}

#[test]
fn errors_name_paths_as_given_not_absolute_temporary_paths() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    native(d);
    std::fs::write(d.join("file.txt"), b"not a directory").unwrap();
    let abs = [
        d.display().to_string(),
        d.canonicalize().unwrap().display().to_string(),
    ];
    let check = |o: &Output| {
        let msg = stderr(o);
        assert!(msg.contains("file.txt"), "{msg}");
        for a in &abs {
            assert!(!msg.contains(a.as_str()), "absolute path in {msg}");
        }
        assert!(
            !msg.contains(".pdx-tmp") && !msg.contains("at path"),
            "{msg}"
        );
    };
    for target in ["paramdex", "tf", "paddle", "paddle-tensor", "safetensors"] {
        check(&run_in(
            d,
            &[
                &"convert",
                &"native.pdx",
                &"file.txt/out",
                &"--to",
                &target,
                &"--skip-unsupported",
            ],
            1,
        ));
    }
    check(&run_in(d, &[&"merge", &"file.txt/m.pdx", &"native.pdx"], 1));
    check(&run_in(
        d,
        &[&"export-tf", &"native.pdx", &"file.txt/ckpt"],
        1,
    ));
    check(&run_in(
        d,
        &[
            &"get",
            &"native.pdx",
            &"a.weight",
            &"-o",
            &"file.txt/w.json",
        ],
        1,
    ));
    check(&run_in(
        d,
        &[&"recover", &"native.pdx", &"file.txt/r.pdx"],
        1,
    ));
    assert_eq!(
        names(d),
        BTreeSet::from(["file.txt".to_string(), "native.pdx".to_string()])
    );
}
