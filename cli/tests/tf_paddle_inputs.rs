//! Issue 13, inputs: TensorFlow 2 checkpoints with a missing or damaged data shard, merging TF2
//! checkpoints, directories holding an input one level down, and `convert --to paddle` keeping
//! the tensor names (in a program beside the parameters).
mod common;
use common::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const GRAPH: &str = "_CHECKPOINTABLE_OBJECT_GRAPH";

/// Runs the binary, returning its output whatever the exit code (for commands that print a
/// listing and notes before their error line).
fn raw(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let out = Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .expect("the binary runs");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    out
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A copy of the TF2 checkpoint `tests/data/tf/basic/tf2` in `dir`; returns its prefix.
fn tf2_copy(dir: &Path) -> PathBuf {
    let src = data("tf/basic/tf2");
    for f in fs::read_dir(&src).unwrap() {
        let f = f.unwrap();
        fs::copy(f.path(), dir.join(f.file_name())).unwrap();
    }
    dir.join("ckpt-1")
}

fn names(listing: &Value) -> Vec<String> {
    listing
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// The names `ls --json` gives for the intact fixture.
fn full_names() -> Vec<String> {
    names(&json(&run(&[&"ls", &data("tf/basic/tf2"), &"--json"], 0)))
}

/// `ls` and `stat` of a TF2 checkpoint whose only data shard is missing: every tensor the index
/// describes is listed, and the one whose size needs the shard (the object graph, a string) is
/// named with the missing file; the exit status is that of the error (1, an I/O error). `get`
/// of a numeric tensor names the missing shard file.
#[test]
fn tf2_index_only_lists_what_the_index_describes() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = tf2_copy(dir.path());
    let shard = dir.path().join("ckpt-1.data-00000-of-00001");
    fs::remove_file(&shard).unwrap();
    let want: Vec<String> = full_names().into_iter().filter(|n| n != GRAPH).collect();
    assert_eq!(want.len(), 20);

    let o = raw(&[&"ls", &prefix, &"--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(names(&listed), want);
    let e = stderr(&o);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("paramdex: error: listed 20 tensors; 1 error:")
            && e.contains("ckpt-1.data-00000-of-00001")
            && e.contains(GRAPH),
        "{e}"
    );

    // The table, with its totals line.
    let o = raw(&[&"ls", &prefix]);
    assert_eq!(o.status.code(), Some(1));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(
        table.contains("v_float32/.ATTRIBUTES/VARIABLE_VALUE"),
        "{table}"
    );
    assert!(table.contains("20 tensors"), "{table}");
    assert!(!table.contains(GRAPH), "{table}");

    // stat: the figures of what it could list.
    let o = raw(&[&"stat", &prefix, &"--json"]);
    assert_eq!(o.status.code(), Some(1));
    let s: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["tensors"], 20);
    assert!(s["by_dtype"].get("string").is_none(), "{s}");
    assert!(stderr(&o).contains("ckpt-1.data-00000-of-00001"));

    // get: the shard file is named.
    let e = stderr(&run(
        &[&"get", &prefix, &"v_float32/.ATTRIBUTES/VARIABLE_VALUE"],
        1,
    ));
    assert!(
        e.contains("ckpt-1.data-00000-of-00001")
            && e.contains("v_float32/.ATTRIBUTES/VARIABLE_VALUE"),
        "{e}"
    );
}

/// The data shard holding the object graph is damaged where the graph's string lengths are:
/// the numeric tensors are listed (their dtype and shape are in the index), the graph is named
/// as corrupt (exit 3); the numeric tensors stored before the damage still read.
#[test]
fn tf2_damaged_object_graph_lists_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = tf2_copy(dir.path());
    let shard = dir.path().join("ckpt-1.data-00000-of-00001");
    // TensorFlow writes the object graph last: its data starts after every numeric tensor's.
    let listing = json(&run(&[&"ls", &prefix, &"--json"], 0));
    let graph = listing
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == GRAPH)
        .unwrap()
        .clone();
    let mut bytes = fs::read(&shard).unwrap();
    let numeric: u64 = listing
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] != GRAPH)
        .map(|t| t["nbytes"].as_u64().unwrap())
        .sum();
    // The graph's entry is a scalar string: a varint length, 4 checksum bytes, the bytes.
    assert_eq!(
        bytes.len() as u64,
        numeric + graph["nbytes"].as_u64().unwrap() + 2 + 4,
        "layout of the fixture"
    );
    // Overwrite the length varint with an over-long one (11 continuation bytes).
    let at = numeric as usize;
    bytes.truncate(at);
    bytes.extend_from_slice(&[0xff; 16]);
    fs::write(&shard, &bytes).unwrap();

    let o = raw(&[&"ls", &prefix, &"--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let listed: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want: Vec<String> = full_names().into_iter().filter(|n| n != GRAPH).collect();
    assert_eq!(names(&listed), want);
    let e = stderr(&o);
    assert!(
        e.contains(GRAPH) && e.contains("ckpt-1.data-00000-of-00001"),
        "{e}"
    );
    let o = raw(&[&"stat", &prefix]);
    assert_eq!(o.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&o.stdout).contains("tensors       20"));
    // Numeric tensors before the damage read and check.
    run(
        &[&"get", &prefix, &"v_float32/.ATTRIBUTES/VARIABLE_VALUE"],
        0,
    );
    // The graph itself: corrupt, exit 3.
    run(&[&"get", &prefix, &GRAPH], 3);
}

/// Two TF2 checkpoints both hold a `_CHECKPOINTABLE_OBJECT_GRAPH`, a bytes value (SPEC.md 6.1)
/// that a native file holds: merging them is a conflict over it, named; `--allow-override`
/// keeps the later input's. String tensors left out by `--skip-unsupported` are no conflict.
#[test]
fn merge_skip_unsupported_ignores_skipped_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let a = data("tf/dtypes/tf2");
    let b = data("tf/sharded/policy");
    let out = dir.path().join("m.pdx");
    let e = stderr(&run(&[&"merge", &out, &a, &b, &"--skip-unsupported"], 1));
    assert!(e.contains("is in both") && e.contains(GRAPH), "{e}");
    assert!(!out.exists());
    run(
        &[
            &"merge",
            &out,
            &a,
            &b,
            &"--skip-unsupported",
            &"--allow-override",
        ],
        0,
    );
    let merged = json(&run(&[&"ls", &out, &"--json"], 0));
    let kept = |p: &Path| -> Vec<String> {
        json(&run(&[&"ls", &p, &"--json"], 0))
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["dtype"] != "string")
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let mut want = kept(&a);
    want.extend(kept(&b));
    want.sort();
    want.dedup();
    assert_eq!(names(&merged), want);
    let graph = |p: &Path| run(&[&"get", &p, &GRAPH, &"--format", &"raw"], 0).stdout;
    assert_eq!(graph(&out), graph(&b));
    run(&[&"verify", &out], 0);

    // A real duplicate among the kept tensors is still a conflict.
    let twice = dir.path().join("twice.pdx");
    let e = stderr(&run(&[&"merge", &twice, &a, &a, &"--skip-unsupported"], 1));
    assert!(e.contains("is in both"), "{e}");
}

/// Copies the directory `src` (recursively) to `dst`.
fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for f in fs::read_dir(src).unwrap() {
        let f = f.unwrap();
        let to = dst.join(f.file_name());
        if f.file_type().unwrap().is_dir() {
            copy_dir(&f.path(), &to);
        } else {
            fs::copy(f.path(), &to).unwrap();
        }
    }
}

/// A directory whose only input is in a subdirectory opens it, for every input kind that is a
/// directory (a Paddle model directory, a per-variable directory with its program, a
/// TensorFlow checkpoint directory, a SavedModel); the listing is that of the subdirectory.
/// The case: `DIR/legacy/` holding `model.pdmodel` and `model.pdiparams`. (Plain
/// tensor files in subdirectories are one per-variable directory with `/` in the names, as
/// `save_vars` writes names with `/`: see the end.)
#[test]
fn a_directory_opens_its_only_input_one_level_down() {
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, PathBuf)> = vec![
        ("legacy", data("paddle/inference/legacy")),
        ("pir", data("paddle/inference/pir")),
        ("separate", data("paddle/models/separate_legacy")),
        ("tf2", data("tf/basic/tf2")),
        ("sharded", data("tf/sharded/policy")),
    ];
    for (i, (sub, src)) in cases.iter().enumerate() {
        let outer = dir.path().join(format!("outer{i}"));
        copy_dir(src, &outer.join(sub));
        fs::write(outer.join("README.txt"), "notes beside the model\n").unwrap();
        // Hidden directories are left aside.
        fs::create_dir_all(outer.join(".cache")).unwrap();
        let o = run(&[&"ls", &outer, &"--json"], 0);
        let want = run(&[&"ls", &outer.join(sub), &"--json"], 0);
        assert_eq!(json(&o), json(&want), "{sub}");
        assert!(!json(&o).as_array().unwrap().is_empty(), "{sub}");
        // Every command takes it.
        run(&[&"verify", &outer], 0);
        run(&[&"stat", &outer], 0);
    }
    // A SavedModel one level down: `saved/variables/variables.{index,data-*}`.
    let outer = dir.path().join("with_saved");
    let vars = outer.join("saved").join("variables");
    fs::create_dir_all(&vars).unwrap();
    for f in fs::read_dir(data("tf/basic/tf2")).unwrap() {
        let f = f.unwrap();
        let name = f
            .file_name()
            .to_string_lossy()
            .replace("ckpt-1", "variables");
        if name != "checkpoint" {
            fs::copy(f.path(), vars.join(name)).unwrap();
        }
    }
    assert_eq!(
        json(&run(&[&"ls", &outer, &"--json"], 0)),
        json(&run(&[&"ls", &data("tf/basic/tf2"), &"--json"], 0))
    );
    // Tensor files without a program one level down: the outer directory is itself a
    // per-variable directory, the subdirectory part of each name.
    let outer = dir.path().join("plain");
    copy_dir(&data("paddle/models/pervar_nested"), &outer.join("vars"));
    let inner = names(&json(&run(&[&"ls", &outer.join("vars"), &"--json"], 0)));
    let prefixed: Vec<String> = inner.iter().map(|n| format!("vars/{n}")).collect();
    assert_eq!(names(&json(&run(&[&"ls", &outer, &"--json"], 0))), prefixed);
}

/// Several inputs one level down: an error listing each with its format (exit 1), not a
/// message about one of their files. The old message blamed `legacy/model.pdiparams` for a
/// missing program that was beside it.
#[test]
fn a_directory_of_several_inputs_lists_them() {
    let dir = tempfile::tempdir().unwrap();
    let outer = dir.path().join("inference");
    copy_dir(&data("paddle/inference"), &outer);
    // `ls` lists what the directory holds, each with the input it is (exit 0).
    let listed = String::from_utf8(run(&[&"ls", &outer], 0).stdout).unwrap();
    assert!(
        listed.contains("legacy/") && listed.contains("pir/") && listed.contains("paddle model"),
        "{listed}"
    );
    // Other commands need one input: an error listing them.
    let e = stderr(&run(&[&"stat", &outer], 1));
    let legacy = outer.join("legacy");
    let pir = outer.join("pir");
    assert!(
        e.contains(&format!("{} (paddle model)", legacy.display()))
            && e.contains(&format!("{} (paddle model)", pir.display()))
            && e.contains("2 of its subdirectories"),
        "{e}"
    );
    assert!(!e.contains("must be beside"), "{e}");
    // Other kinds side by side are listed the same way.
    let mixed = dir.path().join("mixed");
    copy_dir(&data("tf/basic/tf2"), &mixed.join("ckpt"));
    copy_dir(&data("paddle/models/separate_pir"), &mixed.join("vars"));
    let e = stderr(&run(&[&"stat", &mixed], 1));
    assert!(
        e.contains("ckpt (tensorflow checkpoint)")
            && e.contains("vars (paddle per-variable directory)"),
        "{e}"
    );
    // A damaged model as the only input one level down: its own error, naming its file.
    let one = dir.path().join("one");
    copy_dir(&data("paddle/inference/legacy"), &one.join("legacy"));
    let params = one.join("legacy/model.pdiparams");
    let mut b = fs::read(&params).unwrap();
    b.truncate(b.len() - 3);
    fs::write(&params, b).unwrap();
    let e = stderr(&run(&[&"ls", &one], 3));
    assert!(e.contains("model.pdiparams"), "{e}");
    // Nothing anywhere: the directory is named, and so is where paramdex looked.
    let empty = dir.path().join("empty");
    fs::create_dir_all(empty.join("sub")).unwrap();
    let e = stderr(&run(&[&"ls", &empty], 1));
    assert!(e.contains("none of its subdirectories"), "{e}");
}

/// Names of the numeric tensors of `ls --json` of `p`.
fn numeric_names(p: &Path) -> Vec<String> {
    json(&run(&[&"ls", &p, &"--json"], 0))
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["dtype"] != "string" && t["dtype"] != "bytes")
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// `convert --to paddle` from inputs without a program (a TF2 checkpoint, safetensors, a
/// native file) writes the names in `OUT.pdmodel` beside `OUT.pdiparams`: `ls OUT` reads them
/// back, and every tensor equals its source.
#[test]
fn convert_to_paddle_keeps_the_names() {
    let dir = tempfile::tempdir().unwrap();
    let sources = [
        data("tf/basic/tf2"),
        data("safetensors/model.safetensors"),
        data("tf/sharded/policy"),
    ];
    for (i, src) in sources.iter().enumerate() {
        let out = dir.path().join(format!("out{i}"));
        let o = run(
            &[
                &"convert",
                src,
                &out,
                &"--to",
                &"paddle",
                &"--skip-unsupported",
            ],
            0,
        );
        let said = stdout(&o);
        let want = numeric_names(src);
        // The PIR program Paddle 3 reads by default, unless a tensor has a dtype PIR has no
        // type for (tf/basic/tf2 has uint16, uint32 and uint64): then paramdex says so.
        let pir = !json(&run(&[&"ls", src, &"--json"], 0))
            .as_array()
            .unwrap()
            .iter()
            .any(|t| ["uint16", "uint32", "uint64"].contains(&t["dtype"].as_str().unwrap()));
        let listed = if pir {
            [
                format!("out{i}.pdiparams, "),
                format!("out{i}.pdmodel and "),
                format!("out{i}.json ("),
            ]
            .to_vec()
        } else {
            [
                format!("out{i}.pdiparams and "),
                format!("out{i}.pdmodel ("),
            ]
            .to_vec()
        };
        assert!(listed.iter().all(|s| said.contains(s)), "{said}");
        assert!(dir.path().join(format!("out{i}.pdmodel")).is_file());
        assert_eq!(dir.path().join(format!("out{i}.json")).is_file(), pir);
        if !pir {
            let notes = stderr(&o);
            assert!(
                notes.contains("no PIR program written") && notes.contains("uint16"),
                "{notes}"
            );
        }
        assert!(!want.is_empty());
        let back = json(&run(&[&"ls", &out, &"--json"], 0));
        assert_eq!(names(&back), want, "{}", src.display());
        // The values, dtypes and shapes too: diff sees only the string tensors left out.
        let d = json(&run_codes(&[&"diff", src, &out, &"--json"], &[0, 5]));
        assert_eq!(d["values"], Value::Array(vec![]), "{d}");
        assert_eq!(d["dtype"], Value::Array(vec![]), "{d}");
        assert_eq!(d["shape"], Value::Array(vec![]), "{d}");
        assert_eq!(d["only_in_b"], Value::Array(vec![]), "{d}");
        // The prefix, the .pdiparams and the program all open the model.
        let mut opened = vec![
            dir.path().join(format!("out{i}.pdiparams")),
            dir.path().join(format!("out{i}.pdmodel")),
        ];
        if pir {
            opened.push(dir.path().join(format!("out{i}.json")));
        }
        for p in opened {
            assert_eq!(json(&run(&[&"ls", &p, &"--json"], 0)), back);
        }
        run(&[&"verify", &out], 0);
    }
}

/// Names a Paddle program cannot declare are refused before anything is written, naming the
/// tensor and why; with `--skip-unsupported` they are left out with a note. Never dropped
/// silently.
#[test]
fn convert_to_paddle_refuses_names_a_program_cannot_hold() {
    let dir = tempfile::tempdir().unwrap();
    // native() holds `raw\xff`, a name that is not UTF-8.
    let src = native(dir.path());
    let out = dir.path().join("out");
    let e = stderr(&run(&[&"convert", &src, &out, &"--to", &"paddle"], 1));
    assert!(
        e.contains("raw\\xff") && e.contains("not UTF-8") && e.contains("--skip-unsupported"),
        "{e}"
    );
    assert!(!dir.path().join("out.pdiparams").exists());
    assert!(!dir.path().join("out.pdmodel").exists());
    let o = run(
        &[
            &"convert",
            &src,
            &out,
            &"--to",
            &"paddle",
            &"--skip-unsupported",
        ],
        0,
    );
    let notes = stderr(&o);
    assert!(
        notes.contains("left out raw\\xff") && notes.contains("not UTF-8"),
        "{notes}"
    );
    let back = names(&json(&run(&[&"ls", &out, &"--json"], 0)));
    assert_eq!(back, ["a.bias", "a.weight", "seq", "steps"]);
    // The LoD tensor keeps its LoD.
    let l = json(&run(&[&"ls", &out, &"--json", &"--prefix", &"seq"], 0));
    assert_eq!(l[0]["lod"], serde_json::json!([[0, 1, 3]]));

    // `feed` and `fetch` are the variables Paddle's executor keeps its lists in.
    let vars = dir.path().join("vars");
    fs::create_dir_all(&vars).unwrap();
    let plain = data("paddle/lod/plain_f32.lodtensor");
    for n in ["fetch", "w"] {
        fs::copy(&plain, vars.join(n)).unwrap();
    }
    let out = dir.path().join("fv");
    let e = stderr(&run(&[&"convert", &vars, &out, &"--to", &"paddle"], 1));
    assert!(e.contains("tensor fetch is named like"), "{e}");
    run(
        &[
            &"convert",
            &vars,
            &out,
            &"--to",
            &"paddle",
            &"--skip-unsupported",
        ],
        0,
    );
    assert_eq!(names(&json(&run(&[&"ls", &out, &"--json"], 0))), ["w"]);
}

/// A Paddle model converted `--to paddle` keeps its own program (copied byte for byte, legacy
/// or PIR), so the output is that model again; a program already at the output prefix that
/// declares the same tensors is kept; a model's graph that declares others is never replaced
/// by a parameters-only program (refused before anything is written), while paramdex's own
/// parameters-only program is.
#[test]
fn convert_to_paddle_keeps_a_matching_program() {
    let dir = tempfile::tempdir().unwrap();
    for (model, ext) in [
        ("paddle/inference/legacy/model", "pdmodel"),
        ("paddle/inference/pir/model", "json"),
    ] {
        let src = data(model);
        let out = dir.path().join(format!("copy-{ext}"));
        run(&[&"convert", &src, &out, &"--to", &"paddle"], 0);
        let prog = fs::read(dir.path().join(format!("copy-{ext}.{ext}"))).unwrap();
        assert_eq!(prog, fs::read(data(&format!("{model}.{ext}"))).unwrap());
        run(&[&"diff", &src, &out], 0);
    }

    // New weights beside a model's own program: the program is kept.
    let m = dir.path().join("m");
    fs::copy(
        data("paddle/inference/legacy/model.pdmodel"),
        dir.path().join("m.pdmodel"),
    )
    .unwrap();
    let graph = fs::read(dir.path().join("m.pdmodel")).unwrap();
    let pdx = dir.path().join("w.pdx");
    run(
        &[&"convert", &data("paddle/inference/legacy/model"), &pdx],
        0,
    );
    let said = stdout(&run(&[&"convert", &pdx, &m, &"--to", &"paddle"], 0));
    assert!(said.contains("kept"), "{said}");
    assert_eq!(fs::read(dir.path().join("m.pdmodel")).unwrap(), graph);
    run(&[&"diff", &pdx, &m], 0);

    // Other tensors beside that graph: refused, the graph and the old parameters untouched.
    let params = fs::read(dir.path().join("m.pdiparams")).unwrap();
    let other = data("tf/basic/tf2");
    let e = stderr(&run(
        &[
            &"convert",
            &other,
            &m,
            &"--to",
            &"paddle",
            &"--skip-unsupported",
            // m.pdiparams exists: even replacing outputs, the graph is left alone.
            &"--force",
        ],
        1,
    ));
    assert!(e.contains("m.pdmodel") && e.contains("left alone"), "{e}");
    assert_eq!(fs::read(dir.path().join("m.pdmodel")).unwrap(), graph);
    assert_eq!(fs::read(dir.path().join("m.pdiparams")).unwrap(), params);

    // paramdex's own parameters-only program is replaced when the tensors change.
    let g = dir.path().join("g");
    let small = dir.path().join("small.pdx");
    run(
        &[&"convert", &data("paddle/inference/pir/model"), &small],
        0,
    );
    run(&[&"convert", &small, &g, &"--to", &"paddle"], 0);
    run(
        &[
            &"convert",
            &other,
            &g,
            &"--to",
            &"paddle",
            &"--skip-unsupported",
            &"--force",
        ],
        0,
    );
    assert_eq!(
        names(&json(&run(&[&"ls", &g, &"--json"], 0))),
        numeric_names(&other)
    );
}
