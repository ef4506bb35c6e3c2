//! Issue 13, defect 8 (output that disagrees with itself or the README) and the habits of good
//! tools: one JSON layout, short default `get`, counts that agree between commands, plurals,
//! names escaped once, `ls` within the terminal, near-name suggestions, `diff --atol/--rtol`,
//! `get --stats`, `ls --long`, `convert --include/--exclude`.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use paramdex::{DType, Tensor, Writer};
use serde_json::{json, Value};

/// The JSON layout `--help` states, written independently of the binary's: objects one member
/// a line (two spaces a level), arrays without objects on one line, arrays with objects one
/// element a line, object elements of arrays on one line.
fn layout(v: &Value) -> String {
    fn flat(v: &Value) -> bool {
        match v {
            Value::Object(_) => false,
            Value::Array(a) => a.iter().all(flat),
            _ => true,
        }
    }
    fn inline(v: &Value) -> String {
        match v {
            Value::Array(a) => format!("[{}]", a.iter().map(inline).collect::<Vec<_>>().join(", ")),
            Value::Object(m) => format!(
                "{{{}}}",
                m.iter()
                    .map(|(k, x)| format!("{}: {}", json!(k), inline(x)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            _ => v.to_string(),
        }
    }
    fn block(v: &Value, level: usize) -> String {
        let pad = |l: usize| "  ".repeat(l);
        match v {
            Value::Object(m) if !m.is_empty() => format!(
                "{{\n{}\n{}}}",
                m.iter()
                    .map(|(k, x)| format!(
                        "{}{}: {}",
                        pad(level + 1),
                        json!(k),
                        block(x, level + 1)
                    ))
                    .collect::<Vec<_>>()
                    .join(",\n"),
                pad(level)
            ),
            Value::Array(a) if !flat(v) => format!(
                "[\n{}\n{}]",
                a.iter()
                    .map(|x| format!(
                        "{}{}",
                        pad(level + 1),
                        if x.is_object() {
                            inline(x)
                        } else {
                            block(x, level + 1)
                        }
                    ))
                    .collect::<Vec<_>>()
                    .join(",\n"),
                pad(level)
            ),
            _ => inline(v),
        }
    }
    block(v, 0) + "\n"
}

/// Checks that `out` is JSON laid out by the rule, and returns it parsed.
fn laid_out(out: &std::process::Output) -> Value {
    let v = json(out);
    assert_eq!(stdout(out), layout(&v), "not the documented JSON layout");
    v
}

/// CRC32C (Castagnoli), bit by bit: the checksum `ls --long` reports.
fn crc32c(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = (c >> 1) ^ (0x82f6_3b78 & (c & 1).wrapping_neg());
        }
    }
    !c
}

/// Runs the binary and checks that it exits 2 (an invalid command line), without a panic.
fn usage_error(args: &[&dyn AsRef<std::ffi::OsStr>]) {
    let o = Command::new(BIN)
        .args(args.iter().map(|a| a.as_ref()))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn every_json_output_has_the_one_documented_layout() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let st = data("safetensors/model.safetensors");
    // get: shape, LoD and values on one line, as the README shows.
    let g = run(&[&"get", &p, &"a.weight"], 0);
    laid_out(&g);
    let text = stdout(&g);
    assert!(text.contains("\n  \"shape\": [2, 3]\n"), "{text}");
    assert!(
        text.contains("\n  \"data\": [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]],\n"),
        "{text}"
    );
    let g = run(&[&"get", &p, &"seq"], 0);
    assert!(
        stdout(&g).contains("\"lod\": [[0, 1, 3]]"),
        "{}",
        stdout(&g)
    );
    laid_out(&g);
    // meta --json: a list on one line.
    let m = tempfile::tempdir().unwrap();
    let q = native(m.path());
    run(
        &[&"meta", &q, &"--set", &"stages=[\"warmup\",\"cosine\"]"],
        0,
    );
    let o = run(&[&"meta", &q, &"--json"], 0);
    laid_out(&o);
    assert!(stdout(&o).contains("\"stages\": [\"warmup\", \"cosine\"]"));
    // stat, verify (one line before), diff: pretty objects.
    for args in [
        vec![&"stat" as &dyn AsRef<std::ffi::OsStr>, &p, &"--json"],
        vec![&"verify", &p, &"--json"],
        vec![&"stat", &st, &"--json"],
        vec![&"verify", &st, &"--json"],
    ] {
        let o = run(&args, 0);
        laid_out(&o);
        assert!(stdout(&o).lines().count() > 5, "{}", stdout(&o));
    }
    let d = run(&[&"diff", &p, &q, &"--json"], 5);
    laid_out(&d);
    // ls --json: one tensor a line, between `[` and `]` lines.
    let o = run(&[&"ls", &st, &"--json"], 0);
    let v = laid_out(&o);
    let n = v.as_array().unwrap().len();
    assert_eq!(stdout(&o).lines().count(), n + 2);
    let o = run(&[&"ls", &p, &"--json", &"--prefix", &"zzz"], 0);
    assert_eq!(stdout(&o), "[]\n");
    // The rule is in --help.
    let help = stdout(&run(&[&"--help"], 0));
    assert!(
        help.contains("JSON output") && help.contains("one object a line"),
        "{help}"
    );
}

#[test]
fn default_get_of_a_big_tensor_is_a_few_lines_and_says_what_it_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("big.pdx");
    let mut w = Writer::create(&p).unwrap();
    let n = 1024 * 1024;
    let values: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    w.add_values("big", &[1024, 1024], &values).unwrap();
    w.finish().unwrap();
    let o = run(&[&"get", &p, &"big"], 0);
    let lines = stdout(&o).lines().count();
    assert!(lines <= 12, "{lines} lines");
    let v = laid_out(&o);
    let shown = v["data"].as_array().unwrap().len();
    assert!(shown > 0 && shown <= 256, "{shown} values by default");
    assert_eq!(v["truncated"], true);
    assert_eq!(v["omitted"], (n - shown) as u64);
    assert_eq!(v["data"][3], 1.5);
    // Text says it too.
    let t = stdout(&run(
        &[&"get", &p, &"big", &"--format", &"text", &"--limit", &"3"],
        0,
    ));
    assert!(
        t.contains("[0.0, 0.5, 1.0]") && t.contains(&format!("{} more omitted", n - 3)),
        "{t}"
    );
    // Not cut: no omitted count.
    let v = json(&run(&[&"get", &p, &"big", &"--limit", &(n.to_string())], 0));
    assert!(v.get("omitted").is_none() && v.get("truncated").is_none());
}

#[test]
fn stat_verify_and_ls_count_the_same_things_alike() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = inputs(dir.path());
    all.push((
        "tensorflow checkpoint",
        data("tf/strings/tf2"),
        String::new(),
    ));
    all.push((
        "tensorflow checkpoint",
        data("tf/partitioned/v1"),
        String::new(),
    ));
    for (_, path, _) in &all {
        let stat = json(&run(&[&"stat", path, &"--json"], 0));
        let ver = json(&run(&[&"verify", path, &"--json"], 0));
        let list = json(&run(&[&"ls", path, &"--json"], 0));
        let list = list.as_array().unwrap();
        let sum: u64 = list.iter().map(|t| t["nbytes"].as_u64().unwrap()).sum();
        let what = path.display();
        assert_eq!(stat["tensors"], list.len(), "{what}");
        assert_eq!(ver["tensors"], list.len(), "{what}");
        assert_eq!(stat["data_bytes"], sum, "{what}: stat");
        assert_eq!(ver["data_bytes"], sum, "{what}: verify");
        let table = stdout(&run(&[&"ls", path], 0));
        let last = table.lines().last().unwrap();
        assert!(last.contains(&format!("({sum} byte")), "{what}: {last}");
    }
    // Index blocks: each has a checksum, and verify counts them with the tensors' own.
    let p = native(dir.path());
    for (path, tensors_checked) in [
        (p.clone(), 5),
        (data("tf/basic/v1/model.ckpt"), 20),
        (data("tf/basic/tf2"), 21),
    ] {
        let stat = json(&run(&[&"stat", &path, &"--json"], 0));
        let ver = json(&run(&[&"verify", &path, &"--json"], 0));
        assert_eq!(
            stat["index_blocks"].as_u64().unwrap() + tensors_checked,
            ver["checksums"].as_u64().unwrap(),
            "{}",
            path.display()
        );
        assert_eq!(
            stat["index_blocks"].as_u64().unwrap(),
            stat["index_data_blocks"].as_u64().unwrap() + 2 + u64::from(stat["hash_index"] == true)
        );
    }
    // demo says the same number of index blocks when it writes and when it verifies, and
    // stat agrees.
    let demo = stdout(&run(&[&"demo", &"--dir", &dir.path()], 0));
    let blocks: Vec<u64> = demo
        .split(" index block")
        .filter_map(|s| s.rsplit(' ').next().and_then(|n| n.parse().ok()))
        .collect();
    let stat = json(&run(&[&"stat", &dir.path().join("demo.pdx"), &"--json"], 0));
    assert_eq!(blocks.len(), 2, "{demo}");
    assert!(blocks.iter().all(|&b| b == stat["index_blocks"]), "{demo}");
}

#[test]
fn one_of_a_thing_is_singular() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("one.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add_values("w", &[1], &[1.0f32]).unwrap();
    w.insert_metadata("k", 1i64).unwrap();
    w.finish().unwrap();
    let ls = stdout(&run(&[&"ls", &p], 0));
    assert!(ls.lines().last().unwrap().starts_with("1 tensor, "), "{ls}");
    let v = stdout(&run(&[&"verify", &p], 0));
    assert!(v.contains(": 1 tensor, "), "{v}");
    let st = stdout(&run(&[&"stat", &p], 0));
    assert!(
        st.contains("1 entry") && st.contains("in 1 tensor\n"),
        "{st}"
    );
    let c = stdout(&run(&[&"convert", &p, &dir.path().join("c.pdx")], 0));
    assert!(c.contains("(1 tensor, "), "{c}");
    let m = stdout(&run(&[&"merge", &dir.path().join("m.pdx"), &p], 0));
    assert!(
        m.contains("merged 1 input ") && m.contains("(1 tensor, "),
        "{m}"
    );
    let d = stdout(&run(&[&"diff", &p, &dir.path().join("c.pdx")], 0));
    assert!(d.contains("1 tensor identical"), "{d}");
    let set = stdout(&run(&[&"meta", &p, &"--set", &"k=2"], 0));
    assert!(set.contains("1 metadata entry;"), "{set}");
    let demo = stdout(&run(
        &[&"demo", &"--dir", &dir.path(), &"--tensors", &"1"],
        0,
    ));
    for l in demo.lines() {
        assert!(
            !l.contains(" 1 tensors") && !l.contains(" 1 index blocks"),
            "{l}"
        );
    }
}

#[test]
fn formats_are_named_as_things() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("m.safetensors");
    std::fs::copy(data("safetensors/model.safetensors"), &st).unwrap();
    let o = run(&[&"meta", &st, &"--set", &"a=1"], 1);
    assert!(
        stderr(&o).contains("is a safetensors file;"),
        "{}",
        stderr(&o)
    );
    let o = run(&[&"export-tf", &st, &dir.path().join("ck")], 1);
    assert!(
        stderr(&o).contains("is a safetensors file:"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn names_are_escaped_once() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("b.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add(b"\0a\\b", Tensor::new(DType::UInt8, &[1], &[1]))
        .unwrap();
    w.add(b"c\\d", Tensor::new(DType::UInt8, &[1], &[2]))
        .unwrap();
    w.finish().unwrap();
    // An error naming a name: each byte escaped once (`\x00`, `\\`).
    let o = run(&[&"convert", &p, &dir.path().join("ck"), &"--to", &"tf"], 1);
    let e = stderr(&o);
    assert!(e.contains(r"tensor \x00a\b is named"), "{e}");
    assert!(!e.contains(r"\\x00") && !e.contains(r"\\"), "{e}");
    let o = run(&[&"get", &p, &"e\\f"], 4);
    assert!(
        stderr(&o).contains(r"no tensor named e\f in"),
        "{}",
        stderr(&o)
    );
    // JSON carries the name itself, escaped by JSON alone.
    let q = dir.path().join("q.pdx");
    Writer::create(&q).unwrap().finish().unwrap();
    let d = json(&run(&[&"diff", &p, &q, &"--json"], 5));
    assert_eq!(d["only_in_a"], json!(["\u{0}a\\b", "c\\d"]));
    let l = json(&run(&[&"ls", &p, &"--json"], 0));
    assert_eq!(l[1]["name"], "c\\d");
}

/// Runs `paramdex ARGS` with standard output on a pseudo-terminal `columns` wide (util-linux
/// `script`), returning what it printed.
fn on_a_terminal(args: &[&str], columns: usize) -> String {
    let mut cmd = BIN.to_string();
    for a in args {
        cmd.push_str(&format!(" '{a}'"));
    }
    let o = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("COLUMNS", columns.to_string())
        .env("NO_COLOR", "1")
        .output()
        .expect("util-linux script runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap().replace("\r\n", "\n")
}

#[test]
fn on_a_terminal_a_long_name_is_shortened_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("long.pdx");
    let long = format!("model.{}.weight", "x".repeat(288));
    assert_eq!(long.len(), 301);
    let mut w = Writer::create(&p).unwrap();
    w.add_values(&long, &[2, 2], &[0u8; 4]).unwrap();
    w.add_values("bias", &[3], &[0.5f32; 3]).unwrap();
    w.add_values("日本語の名前", &[1], &[1.0f32]).unwrap();
    w.finish().unwrap();
    let path = p.to_str().unwrap();
    for width in [80, 60] {
        // --quiet: no progress bar on the terminal, only the table.
        let t = on_a_terminal(&["--quiet", "ls", path], width);
        let widest = t
            .lines()
            .map(unicode_width::UnicodeWidthStr::width)
            .max()
            .unwrap();
        assert!(
            widest <= width,
            "{widest} columns on a {width}-column terminal:\n{t}"
        );
        assert!(
            t.contains("model.xxx") && t.contains("…") && t.contains("xxx.weight"),
            "{t}"
        );
        assert!(t.contains("bias") && t.contains("日本語の名前"), "{t}");
    }
    // --long too.
    let t = on_a_terminal(&["--quiet", "ls", path, "--long"], 100);
    assert!(
        t.lines()
            .all(|l| unicode_width::UnicodeWidthStr::width(l) <= 100),
        "{t}"
    );
    // JSON, even on a terminal, and any output off a terminal: whole names.
    let t = on_a_terminal(&["--quiet", "ls", path, "--json"], 80);
    assert!(t.contains(&long) && !t.contains('…'), "{t}");
    let t = stdout(&run(&[&"ls", &p], 0));
    assert!(t.contains(&long) && !t.contains('…'), "{t}");
}

#[test]
fn get_of_a_missing_name_suggests_near_names() {
    let dir = tempfile::tempdir().unwrap();
    // TF2 object-graph names.
    let o = run(&[&"get", &data("tf/basic/tf2"), &"save_counter"], 4);
    assert!(
        stderr(&o).contains("; did you mean save_counter/.ATTRIBUTES/VARIABLE_VALUE?"),
        "{}",
        stderr(&o)
    );
    let p = dir.path().join("n.pdx");
    let mut w = Writer::create(&p).unwrap();
    for n in [
        "Dense/Kernel",
        "caf\u{e9}",
        "model.layers.0.weight",
        "model.layers.1.weight",
    ] {
        w.add_values(n, &[1], &[1.0f32]).unwrap();
    }
    w.finish().unwrap();
    for (asked, want) in [
        ("dense/kernel", "Dense/Kernel"),                   // case
        ("cafe\u{301}", "caf\u{e9}"),                       // NFC lookalike
        ("ｄｅｎｓｅ/ｋｅｒｎｅｌ", "Dense/Kernel"),        // NFKC (fullwidth) lookalike
        ("model.layers.0.wieght", "model.layers.0.weight"), // a transposition
    ] {
        let o = run(&[&"get", &p, &asked], 4);
        let e = stderr(&o);
        assert!(
            e.contains(&format!("; did you mean {want}?")),
            "{asked}: {e}"
        );
    }
    let o = run(&[&"get", &p, &"model.layers.5.weight"], 4);
    assert!(
        stderr(&o).contains("did you mean one of model.layers.0.weight, model.layers.1.weight?"),
        "{}",
        stderr(&o)
    );
    let o = run(&[&"get", &p, &"nothing_like_it"], 4);
    assert!(!stderr(&o).contains("did you mean"), "{}", stderr(&o));
}

/// Issue 30, defect 5: a name that looks like the one typed but is stored in another Unicode
/// normalisation form (NFD, as macOS gives) is said to be so, with the `--hex` that reaches
/// it; a backslash is shown as typed, so the suggested name can be typed back.
#[test]
fn near_names_that_cannot_be_typed_as_shown_say_how_to_give_them() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("n.pdx");
    let nfd = "u\u{308}ber.bias";
    let mut w = Writer::create(&p).unwrap();
    w.add_values(nfd, &[1], &[1.0f32]).unwrap();
    w.add_values("dir\\w", &[1], &[2.0f32]).unwrap();
    w.add_values("ctl\x01", &[1], &[3.0f32]).unwrap();
    w.finish().unwrap();
    let o = run(&[&"get", &p, &"\u{fc}ber.bias"], 4);
    let e = stderr(&o);
    let hex = "75cc88626572";
    assert!(e.contains(&format!("did you mean {nfd}?")), "{e}");
    assert!(
        e.contains("differs in Unicode normalisation (stored NFD, given NFC)"),
        "{e}"
    );
    assert!(
        e.contains(&format!("--hex {} {hex}2e62696173", p.display())),
        "{e}"
    );
    assert!(e.contains("ls --json"), "{e}");
    // What the message says to type reaches the tensor.
    let o = run(&[&"get", &p, &"--hex", &format!("{hex}2e62696173")], 0);
    assert!(stdout(&o).contains("1.0"), "{}", stdout(&o));
    // A backslash is shown once: the suggestion is what to type.
    let o = run(&[&"get", &p, &"dir\\v"], 4);
    let e = stderr(&o);
    assert!(e.contains("did you mean dir\\w?"), "{e}");
    assert!(!e.contains("--hex") && !e.contains("ls --json"), "{e}");
    let l = stdout(&run(&[&"ls", &p], 0));
    assert!(l.contains("dir\\w") && !l.contains("dir\\\\w"), "{l}");
    // A control character is escaped, so the suggestion says how to give its bytes.
    let o = run(&[&"get", &p, &"ctl"], 4);
    let e = stderr(&o);
    assert!(
        e.contains("did you mean ctl\\x01?") && e.contains("--hex"),
        "{e}"
    );
}

/// Issue 30, defect 9: `get` of several names or a glob pattern prints every tensor (one JSON
/// array, or text blocks); `ls` of several inputs lists each.
#[test]
fn get_of_several_names_or_a_glob_and_ls_of_several_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.pdx");
    let mut w = Writer::create(&p).unwrap();
    for (n, v) in [
        ("model.layers.0.bias", 0.0f32),
        ("model.layers.0.weight", 1.0),
        ("model.layers.1.bias", 2.0),
        ("lm_head.weight", 3.0),
        ("odd*name", 4.0),
    ] {
        w.add_values(n, &[1], &[v]).unwrap();
    }
    w.finish().unwrap();
    let names = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let v = json(&run(&[&"get", &p, &"model.layers.*.bias"], 0));
    assert_eq!(names(&v), ["model.layers.0.bias", "model.layers.1.bias"]);
    assert_eq!(v[1]["data"], json!([2.0]));
    // Names and patterns together, in the order given.
    let v = json(&run(&[&"get", &p, &"lm_head.weight", &"*.0.*"], 0));
    assert_eq!(
        names(&v),
        [
            "lm_head.weight",
            "model.layers.0.bias",
            "model.layers.0.weight"
        ]
    );
    // A name that is a tensor's is that tensor, even with a glob character: one object.
    let v = json(&run(&[&"get", &p, &"odd*name"], 0));
    assert_eq!(v["data"], json!([4.0]));
    let t = stdout(&run(
        &[
            &"get",
            &p,
            &"lm_head.weight",
            &"odd*name",
            &"--format",
            &"text",
        ],
        0,
    ));
    assert!(
        t.contains("name    lm_head.weight\n") && t.contains("\n\nname    odd*name\n"),
        "{t}"
    );
    // Nothing matching, a missing name among several, and raw of several.
    let o = run(&[&"get", &p, &"zzz*"], 4);
    assert!(
        stderr(&o).contains("no tensor name matches the pattern zzz*"),
        "{}",
        stderr(&o)
    );
    let o = run(&[&"get", &p, &"lm_head.weight", &"model.layers.0.bais"], 4);
    assert!(
        stderr(&o).contains("did you mean model.layers.0.bias?"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty());
    let o = run(&[&"get", &p, &"model.*", &"--format", &"raw"], 1);
    assert!(
        stderr(&o).contains("--format raw writes one tensor, not the 3"),
        "{}",
        stderr(&o)
    );

    // ls of several inputs: each under its name; JSON: one array, each tensor with its file.
    let q = dir.path().join("q.pdx");
    let mut w = Writer::create(&q).unwrap();
    w.add_values("only_q", &[1], &[5.0f32]).unwrap();
    w.finish().unwrap();
    let o = stdout(&run(&[&"ls", &p, &q], 0));
    let (pp, qq) = (
        format!("{}:\n", p.display()),
        format!("\n\n{}:\n", q.display()),
    );
    assert!(
        o.starts_with(&pp) && o.contains(&qq) && o.contains("only_q"),
        "{o}"
    );
    let v = json(&run(&[&"ls", &p, &q, &"--json"], 0));
    let list = v.as_array().unwrap();
    assert_eq!(list.len(), 6);
    assert_eq!(list[0]["file"], p.display().to_string());
    assert_eq!(list[5]["file"], q.display().to_string());
    assert_eq!(list[5]["name"], "only_q");
    // An input that cannot be listed is reported; the others are listed; its status is the
    // exit status.
    let missing = dir.path().join("missing.pdx");
    let o = run(&[&"ls", &missing, &q, &"--json"], 1);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
    assert!(stderr(&o).contains("missing.pdx"), "{}", stderr(&o));
}

/// Issue 30, defect 9: `diff` of a bfloat16 export against its float32 master, with a
/// tolerance, compares the values (each side decoded from its own dtype); without one, the
/// dtype difference says how to compare them.
#[test]
fn diff_across_dtypes_with_a_tolerance_compares_the_values() {
    let dir = tempfile::tempdir().unwrap();
    let master = [1.0f32, 0.1, -3.3, 1000.5];
    let f32_path = dir.path().join("master.pdx");
    let bf16_path = dir.path().join("export.pdx");
    let mut w = Writer::create(&f32_path).unwrap();
    w.add_values("w", &[4], &master).unwrap();
    w.add_values("same", &[1], &[2.0f32]).unwrap();
    w.finish().unwrap();
    let bf: Vec<u8> = master
        .iter()
        .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
        .collect();
    let mut w = Writer::create(&bf16_path).unwrap();
    w.add(b"w", Tensor::new(DType::BFloat16, &[4], &bf))
        .unwrap();
    w.add_values("same", &[1], &[2.0f32]).unwrap();
    w.finish().unwrap();
    let o = stdout(&run(&[&"diff", &bf16_path, &f32_path], 5));
    assert!(
        o.contains(
            "dtype: w: bfloat16 vs float32 (--atol/--rtol compare the values across dtypes)"
        ),
        "{o}"
    );
    let o = stdout(&run(
        &[&"diff", &bf16_path, &f32_path, &"--rtol", &"1e-2"],
        0,
    ));
    assert!(o.contains("1 tensor within tolerance"), "{o}");
    let o = stdout(&run(
        &[&"diff", &bf16_path, &f32_path, &"--rtol", &"1e-5"],
        5,
    ));
    assert!(
        o.contains("values: w: 3 of 4 elements differ (bfloat16 vs float32)"),
        "{o}"
    );
    let v = json(&run(
        &[&"diff", &bf16_path, &f32_path, &"--atol", &"0", &"--json"],
        5,
    ));
    assert_eq!(v["values"][0]["dtype"], "bfloat16");
    assert_eq!(v["values"][0]["dtype_b"], "float32");
    assert_eq!(v["values"][0]["differing_elements"], 3);
    assert_eq!(v["dtype"], json!([]));
}

#[test]
fn diff_tolerances_and_nans_that_do_not_hide_the_largest_difference() {
    let dir = tempfile::tempdir().unwrap();
    let other_nan = f32::from_bits(f32::NAN.to_bits() | 1);
    let write = |name: &str, x: &[f32], y: &[f32]| -> PathBuf {
        let p = dir.path().join(name);
        let mut w = Writer::create(&p).unwrap();
        w.add_values("x", &[x.len() as u64], x).unwrap();
        w.add_values("y", &[y.len() as u64], y).unwrap();
        w.finish().unwrap();
        p
    };
    let a = write(
        "a.pdx",
        &[1.0, f32::NAN, 3.0, f32::INFINITY],
        &[1.0, f32::NAN],
    );
    let b = write(
        "b.pdx",
        &[1.5, 2.0, 3.0, f32::INFINITY],
        &[1.0 + 1e-6, other_nan],
    );
    // Exact: the NaN is counted apart, the largest difference is over the numbers.
    let d = laid_out(&run(&[&"diff", &a, &b, &"--json"], 5));
    let x = &d["values"][0];
    assert_eq!(x["name"], "x");
    assert_eq!(x["differing_elements"], 2);
    assert_eq!(x["nan_mismatches"], 1);
    assert_eq!(x["inf_mismatches"], 0);
    assert_eq!(x["max_abs_diff"], 0.5);
    assert_eq!(d["tolerance"], Value::Null);
    let t = stdout(&run(&[&"diff", &a, &b], 5));
    assert!(
        t.contains("values: x: 2 of 4 elements differ (1 with NaN), max |a-b| = 5e-1"),
        "{t}"
    );
    // numpy.allclose: |a - b| <= atol + rtol * |b|; NaN equals NaN only with --equal-nan.
    let d = json(&run(
        &[
            &"diff", &a, &b, &"--json", &"--rtol", &"0.5", &"--atol", &"1e-5",
        ],
        5,
    ));
    let by_name = |d: &Value, n: &str| {
        d["values"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == n)
            .cloned()
    };
    let x = by_name(&d, "x").unwrap();
    assert_eq!(
        (x["differing_elements"].clone(), x["nan_mismatches"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(x["max_abs_diff"], Value::Null);
    assert_eq!(by_name(&d, "y").unwrap()["nan_mismatches"], 1);
    assert_eq!(
        d["tolerance"],
        json!({"atol": 1e-5, "rtol": 0.5, "equal_nan": false})
    );
    let d = json(&run(
        &[
            &"diff",
            &a,
            &b,
            &"--json",
            &"--atol",
            &"1e-5",
            &"--equal-nan",
        ],
        5,
    ));
    assert!(by_name(&d, "y").is_none());
    assert_eq!(d["within_tolerance"], 1);
    // Everything within tolerance: equal, exit 0.
    let c = write(
        "c.pdx",
        &[1.0, f32::NAN, 3.0, f32::INFINITY],
        &[1.0, f32::NAN],
    );
    let e = write(
        "e.pdx",
        &[1.01, f32::NAN, 3.0, f32::INFINITY],
        &[1.0, other_nan],
    );
    run(&[&"diff", &c, &e], 5);
    let t = stdout(&run(
        &[&"diff", &c, &e, &"--atol", &"0.02", &"--equal-nan"],
        0,
    ));
    assert!(
        t.contains("equal: 0 tensors identical, 2 tensors within tolerance"),
        "{t}"
    );
    // A file equals itself, NaNs included, whatever the tolerance.
    run(&[&"diff", &a, &a, &"--atol", &"0"], 0);
    // Bad tolerances are usage errors.
    usage_error(&[&"diff", &a, &b, &"--atol", &"-1"]);
    usage_error(&[&"diff", &a, &b, &"--rtol", &"nan"]);
}

#[test]
fn get_stats_summarizes_every_numeric_dtype() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.pdx");
    let mut w = Writer::create(&p).unwrap();
    w.add_values(
        "f32",
        &[6],
        &[1.0f32, 2.0, 3.0, 4.0, f32::NAN, f32::NEG_INFINITY],
    )
    .unwrap();
    w.add_values("i64", &[3], &[i64::MIN, 0, i64::MAX]).unwrap();
    w.add_values("u8", &[4], &[1u8, 2, 3, 4]).unwrap();
    let h: Vec<half::f16> = [0.5f32, -2.0, 8.0].map(half::f16::from_f32).to_vec();
    w.add_values("f16", &[3], &h).unwrap();
    let b: Vec<half::bf16> = [1.0f32, 3.0].map(half::bf16::from_f32).to_vec();
    w.add_values("bf16", &[2], &b).unwrap();
    // float8 e4m3fn: 1.0 (0x38), 2.0 (0x40), NaN (0x7f).
    w.add(
        "f8",
        Tensor::new(DType::Float8E4M3FN, &[3], &[0x38, 0x40, 0x7f]),
    )
    .unwrap();
    w.add("empty", Tensor::new(DType::Float32, &[0], &[]))
        .unwrap();
    w.add("c64", Tensor::new(DType::Complex64, &[1], &[0; 8]))
        .unwrap();
    w.finish().unwrap();
    let stats = |n: &str| {
        let v = laid_out(&run(&[&"get", &p, &n, &"--stats"], 0));
        assert!(v.get("data").is_none());
        v["stats"].clone()
    };
    assert_eq!(
        stats("f32"),
        json!({"count": 6, "finite": 4, "nan": 1, "inf": 1, "min": 1.0, "max": 4.0,
               "mean": 2.5, "std": 1.25f64.sqrt()})
    );
    let s = stats("i64");
    assert_eq!((&s["min"], &s["max"]), (&json!(i64::MIN), &json!(i64::MAX)));
    assert_eq!(s["mean"], 0.0);
    let s = stats("u8");
    assert_eq!(
        (&s["min"], &s["max"], &s["mean"]),
        (&json!(1), &json!(4), &json!(2.5))
    );
    let s = stats("f16");
    assert_eq!((&s["min"], &s["max"]), (&json!(-2.0), &json!(8.0)));
    assert!(
        (s["mean"].as_f64().unwrap() - 6.5 / 3.0).abs() < 1e-12,
        "{s}"
    );
    assert_eq!(stats("bf16")["std"], 1.0);
    let s = stats("f8");
    assert_eq!(
        (&s["nan"], &s["finite"], &s["mean"]),
        (&json!(1), &json!(2), &json!(1.5))
    );
    let s = stats("empty");
    assert_eq!(
        (&s["count"], &s["min"], &s["std"]),
        (&json!(0), &Value::Null, &Value::Null)
    );
    let t = stdout(&run(
        &[&"get", &p, &"f32", &"--stats", &"--format", &"text"],
        0,
    ));
    for l in [
        "count   6",
        "nan     1",
        "inf     1",
        "min     1.0",
        "max     4.0",
        "mean    2.5",
    ] {
        assert!(t.contains(l), "{l:?} in\n{t}");
    }
    // Not real numbers: said so. With raw or npy: a usage error.
    run(&[&"get", &p, &"c64", &"--stats"], 1);
    let o = run(
        &[
            &"get",
            &data("tf/strings/tf2"),
            &"_CHECKPOINTABLE_OBJECT_GRAPH",
            &"--stats",
        ],
        1,
    );
    assert!(stderr(&o).contains("a bytes value"), "{}", stderr(&o));
    usage_error(&[
        &"get",
        &p,
        &"f32",
        &"--stats",
        &"--format",
        &"npy",
        &"-o",
        &dir.path().join("x"),
    ]);
    assert!(!dir.path().join("x").exists());
}

#[test]
fn ls_long_says_where_each_tensors_data_is_and_its_stored_crc() {
    let dir = tempfile::tempdir().unwrap();
    let mut all = inputs(dir.path());
    all.push((
        "tensorflow checkpoint",
        data("tf/sharded/v1"),
        String::new(),
    ));
    for (format, path, _) in &all {
        let list = laid_out(&run(&[&"ls", path, &"--json", &"--long"], 0));
        let checksummed = matches!(*format, "paramdex" | "tensorflow checkpoint");
        let mut files = std::collections::BTreeSet::new();
        for t in list.as_array().unwrap() {
            let name = t["name"].as_str().unwrap();
            // Strings and bytes values are stored encoded (lengths first): not their raw bytes.
            if t["dtype"] == "string" || t["dtype"] == "bytes" || t.get("name_hex").is_some() {
                continue;
            }
            // (Not `run`: raw data may hold any byte, ESC included.)
            let raw = Command::new(BIN)
                .args([
                    "get".as_ref(),
                    path.as_os_str(),
                    name.as_ref(),
                    "--format".as_ref(),
                    "raw".as_ref(),
                ])
                .output()
                .unwrap();
            assert!(raw.status.success());
            let raw = raw.stdout;
            let file = Path::new(t["data_file"].as_str().unwrap());
            files.insert(file.to_path_buf());
            let at = t["data_offset"].as_u64().unwrap() as usize;
            let bytes = std::fs::read(file).unwrap();
            let stored = &bytes[at..at + raw.len()];
            assert_eq!(stored, &raw[..], "{}: {name}", path.display());
            if checksummed {
                assert_eq!(t["crc32c"], crc32c(stored), "{}: {name}", path.display());
            } else {
                assert_eq!(t["crc32c"], Value::Null);
            }
        }
        if path.ends_with("sharded/v1") {
            assert!(files.len() > 1, "shards: {files:?}");
        }
        let text = stdout(&run(&[&"ls", path, &"-l"], 0));
        let head = text.lines().next().unwrap();
        assert!(
            head.contains("OFFSET") && head.contains("CRC32C") && head.contains("FILE"),
            "{head}"
        );
        if !checksummed {
            assert!(text.lines().nth(1).unwrap().contains("  -  "), "{text}");
        }
    }
}

/// A tensor stored in slices (a sharded save's shards, a partitioned TensorFlow variable) is
/// listed by `ls --long` with a row for each slice, and in `--json` as `slices`: each one's
/// bytes are at its offset of its data file, its CRC32C is theirs, and they are what
/// `get --slice` of its region gives (issue 37: no file, offset or CRC for sliced tensors).
#[test]
fn ls_long_lists_the_slices_of_a_tensor_stored_in_slices() {
    for (input, tensors_in_slices) in [
        (data("native/v2/sharded/ckpt"), 2),
        (data("tf/partitioned/v1/model.ckpt"), 5),
    ] {
        let list = laid_out(&run(&[&"ls", &input, &"--json", &"--long"], 0));
        let mut sliced = 0;
        let mut rows = 0;
        for t in list.as_array().unwrap() {
            let Some(slices) = t.get("slices") else {
                assert!(t["data_file"].is_string(), "{t}");
                continue;
            };
            sliced += 1;
            assert_eq!(t["data_file"], Value::Null, "{t}");
            let name = t["name"].as_str().unwrap();
            for s in slices.as_array().unwrap() {
                rows += 1;
                let nums = |k: &str| -> Vec<u64> {
                    s[k].as_array()
                        .unwrap()
                        .iter()
                        .map(|x| x.as_u64().unwrap())
                        .collect()
                };
                let (start, shape) = (nums("start"), nums("shape"));
                let spec: Vec<String> = start
                    .iter()
                    .zip(&shape)
                    .map(|(a, n)| format!("{a}:{}", a + n))
                    .collect();
                let raw = Command::new(BIN)
                    .args(["get".as_ref(), input.as_os_str(), name.as_ref()])
                    .args(["--slice", &spec.join(","), "--format", "raw"])
                    .output()
                    .unwrap();
                assert!(raw.status.success(), "{name} {spec:?}");
                let file = std::fs::read(s["data_file"].as_str().unwrap()).unwrap();
                let at = s["data_offset"].as_u64().unwrap() as usize;
                let n = s["nbytes"].as_u64().unwrap() as usize;
                let stored = &file[at..at + n];
                assert_eq!(stored, &raw.stdout[..], "{name} {spec:?}");
                assert_eq!(s["crc32c"], crc32c(stored), "{name} {spec:?}");
            }
        }
        assert_eq!(sliced, tensors_in_slices, "{}", input.display());
        // The table: the tensor's row says how many slices, each slice has its row.
        let text = stdout(&run(&[&"ls", &input, &"-l"], 0));
        assert_eq!(
            text.lines().filter(|l| l.starts_with("  [")).count(),
            rows,
            "{text}"
        );
        assert!(text.contains(" slices"), "{text}");
    }
}

#[test]
fn convert_copies_the_tensors_patterns_select_to_every_target() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    for (to, out) in [
        ("paramdex", "o.pdx"),
        ("tf", "ck"),
        ("safetensors", "o.safetensors"),
        ("paddle-tensor", "pt"),
        ("paddle", "pp"),
    ] {
        let dst = dir.path().join(out);
        let o = run(
            &[
                &"convert",
                &p,
                &dst,
                &"--to",
                &to,
                &"--include",
                &"a.*",
                &"--include",
                &"st*",
                &"--exclude",
                &"*.bias",
            ],
            0,
        );
        let said = stdout(&o);
        let two = if to == "paddle-tensor" {
            "2 Paddle tensor files"
        } else {
            "(2 tensors"
        };
        assert!(
            said.contains(two) && said.contains("selected 2 of 5 tensors"),
            "{to}: {said}"
        );
        if to == "paddle" {
            continue; // a bare .pdiparams has no names to list
        }
        let names: Vec<String> = json(&run(&[&"ls", &dst, &"--json"], 0))
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["a.weight", "steps"], "{to}");
    }
    // A pattern that matches nothing is reported; a selection of nothing writes nothing.
    let o = run(
        &[
            &"convert",
            &p,
            &dir.path().join("n.pdx"),
            &"--include",
            &"a.*",
            &"--exclude",
            &"zz*",
        ],
        0,
    );
    assert!(
        stderr(&o).contains("--exclude \"zz*\" matches no tensor name"),
        "{}",
        stderr(&o)
    );
    let empty = dir.path().join("e.pdx");
    let o = run(&[&"convert", &p, &empty, &"--include", &"nope*"], 1);
    assert!(
        stderr(&o).contains("select none of the input's 5 tensors"),
        "{}",
        stderr(&o)
    );
    assert!(!empty.exists());
    // `*` runs across `/`: TensorFlow names.
    let o = run(
        &[
            &"convert",
            &data("tf/basic/v1/model.ckpt"),
            &dir.path().join("l.pdx"),
            &"--include",
            &"layer1*",
        ],
        0,
    );
    assert!(stdout(&o).contains("selected"), "{}", stdout(&o));
    run(
        &[
            &"convert",
            &p,
            &dir.path().join("b.pdx"),
            &"--include",
            &"a[.*",
        ],
        1,
    );
}
