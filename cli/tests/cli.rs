//! The `paramdex` binary, run for real on every input kind: native files, TensorFlow
//! checkpoints, Paddle models / tensor files / per-variable directories, safetensors files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use paramdex::MetaValue;
use paramdex::{DType, Reader, Tensor, Writer};
use serde_json::Value;
use sha2::{Digest, Sha256};

mod common;
use common::*;

#[test]
fn every_command_reads_every_input_kind() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (format, path, tensor)) in inputs(dir.path()).into_iter().enumerate() {
        // ls: a table with a totals line naming the format; --json: the contract.
        let o = run(&[&"ls", &path], 0);
        let text = stdout(&o);
        let last = text.lines().last().unwrap();
        assert!(last.ends_with(format), "{last}");
        let list = json(&run(&[&"ls", &path, &"--json"], 0));
        let list = list.as_array().unwrap();
        assert!(!list.is_empty());
        let noun = if list.len() == 1 { "tensor" } else { "tensors" };
        assert!(
            last.starts_with(&format!("{} {noun},", list.len())),
            "{last}"
        );
        for t in list {
            let keys: Vec<&str> = t.as_object().unwrap().keys().map(|k| k.as_str()).collect();
            let expected = if t.get("name_hex").is_some() {
                vec!["dtype", "lod", "name", "name_hex", "nbytes", "shape"]
            } else {
                vec!["dtype", "lod", "name", "nbytes", "shape"]
            };
            assert_eq!(keys, expected);
        }
        let tensor = if tensor.is_empty() {
            list[0]["name"].as_str().unwrap().to_string()
        } else {
            tensor
        };
        let entry = list.iter().find(|t| t["name"] == tensor.as_str()).unwrap();

        // stat / verify agree with ls.
        let st = json(&run(&[&"stat", &path, &"--json"], 0));
        assert_eq!(st["format"], format);
        assert_eq!(st["tensors"].as_u64().unwrap(), list.len() as u64);
        let total: u64 = list.iter().map(|t| t["nbytes"].as_u64().unwrap()).sum();
        assert_eq!(st["data_bytes"].as_u64().unwrap(), total);
        assert!(stdout(&run(&[&"stat", &path], 0)).contains("tensors"));
        let v = json(&run(&[&"verify", &path, &"--json"], 0));
        assert_eq!(v["ok"], true);
        assert_eq!(v["tensors"].as_u64().unwrap(), list.len() as u64);
        assert!(stdout(&run(&[&"verify", &path], 0)).contains("OK"));
        assert!(run(&[&"-q", &"verify", &path], 0).stdout.is_empty());

        // get: json, raw, npy agree.
        let g = json(&run(&[&"get", &path, &tensor], 0));
        assert_eq!(g["dtype"], entry["dtype"]);
        assert_eq!(g["shape"], entry["shape"]);
        let raw = run(&[&"get", &path, &tensor, &"--format", &"raw"], 0).stdout;
        assert_eq!(raw.len() as u64, entry["nbytes"].as_u64().unwrap());
        let npy = run(&[&"get", &path, &tensor, &"--format", &"npy"], 0).stdout;
        let (descr, shape, at) = parse_npy(&npy);
        assert_eq!(&npy[at..], &raw[..]);
        assert_eq!(
            shape,
            entry["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d.as_u64().unwrap())
                .collect::<Vec<_>>()
        );
        let dtype = DType::from_name(entry["dtype"].as_str().unwrap()).unwrap();
        assert_eq!(descr, paramdex::interop::npy::descr(dtype));
        let out = dir.path().join(format!("t{i}.npy"));
        run(
            &[&"get", &path, &tensor, &"--format", &"npy", &"-o", &out],
            0,
        );
        assert_eq!(std::fs::read(&out).unwrap(), npy);

        // meta shows something (or says there is none).
        assert!(json(&run(&[&"meta", &path, &"--json"], 0)).is_object());
        run(&[&"meta", &path], 0);

        // diff with itself: equal.
        assert!(stdout(&run(&[&"diff", &path, &path], 0)).contains("equal"));

        // convert to native and back: equal to the input, metadata included.
        let pdx = dir.path().join(format!("c{i}.pdx"));
        run(
            &[&"convert", &path, &pdx, &"--skip-unsupported", &"--quiet"],
            0,
        );
        let d = json(&run(
            &[&"diff", &path, &pdx, &"--json"],
            list_is_all_numeric(list),
        ));
        assert_eq!(d["values"], Value::Array(vec![]));
        assert_eq!(d["metadata"], Value::Array(vec![]));
        Reader::open(&pdx).unwrap().verify().unwrap();

        // convert to safetensors (what it can hold) and read that back.
        let st_out = dir.path().join(format!("c{i}.safetensors"));
        run(
            &[
                &"convert",
                &path,
                &st_out,
                &"--to",
                &"safetensors",
                &"--skip-unsupported",
            ],
            0,
        );
        let back = json(&run(&[&"ls", &st_out, &"--json"], 0));
        let holdable = list
            .iter()
            .filter(|t| {
                t["dtype"] != "string"
                    && t["dtype"] != "bytes"
                    && t["dtype"] != "complex128"
                    && t["lod"].as_array().unwrap().is_empty()
                    && t.get("name_hex").is_none()
            })
            .count();
        assert_eq!(
            back.as_array().unwrap().len(),
            holdable,
            "{}",
            path.display()
        );
        // Left-out tensors and LoD may differ; values of what is there may not.
        let d = json(&run_codes(&[&"diff", &path, &st_out, &"--json"], &[0, 5]));
        assert_eq!(d["values"], Value::Array(vec![]), "{d}");
        assert_eq!(d["dtype"], Value::Array(vec![]), "{d}");
        assert_eq!(d["only_in_b"], Value::Array(vec![]), "{d}");

        // merge the input with its converted copy: the same names, so --allow-override.
        let merged = dir.path().join(format!("m{i}.pdx"));
        run(&[&"merge", &merged, &path, &pdx, &"--skip-unsupported"], 1);
        run(
            &[
                &"merge",
                &merged,
                &path,
                &pdx,
                &"--allow-override",
                &"--skip-unsupported",
            ],
            0,
        );
        run(&[&"diff", &merged, &pdx], 0);
    }
}

/// Exit code of `diff input converted-to-native`: 0 unless the input had tensors a native file
/// cannot hold (then they are only in A).
fn list_is_all_numeric(list: &[Value]) -> i32 {
    if list.iter().any(|t| t["dtype"] == "string") {
        5
    } else {
        0
    }
}

/// (descr, shape, data offset) of an .npy file, parsed strictly.
fn parse_npy(b: &[u8]) -> (String, Vec<u64>, usize) {
    assert_eq!(&b[..8], b"\x93NUMPY\x01\x00");
    let len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let at = 10 + len;
    assert_eq!(at % 64, 0);
    let h = std::str::from_utf8(&b[10..at]).unwrap();
    assert!(h.ends_with('\n'));
    let descr = h
        .split("'descr': '")
        .nth(1)
        .unwrap()
        .split('\'')
        .next()
        .unwrap();
    assert!(h.contains("'fortran_order': False"));
    let shape = h
        .split("'shape': (")
        .nth(1)
        .unwrap()
        .split(')')
        .next()
        .unwrap();
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (descr.to_string(), shape, at)
}

#[test]
fn diff_reports_every_kind_of_difference() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.pdx");
    let b = dir.path().join("b.pdx");
    let mut w = Writer::create(&a).unwrap();
    w.add_values("same", &[2], &[1.0f32, 2.0]).unwrap();
    w.add_values("vals", &[3], &[1.0f32, 2.0, 3.0]).unwrap();
    w.add_values("dt", &[1], &[1.0f32]).unwrap();
    w.add_values("sh", &[2], &[1i32, 2]).unwrap();
    w.add_values("ints", &[2], &[10i64, 20]).unwrap();
    w.add_values("only_a", &[1], &[1u8]).unwrap();
    w.finish().unwrap();
    let mut w = Writer::create(&b).unwrap();
    w.add_values("same", &[2], &[1.0f32, 2.0]).unwrap();
    w.add_values("vals", &[3], &[1.0f32, 2.5, 0.0]).unwrap();
    w.add_values("dt", &[1], &[1.0f64]).unwrap();
    w.add_values("sh", &[1, 2], &[1i32, 2]).unwrap();
    w.add_values("ints", &[2], &[10i64, 13]).unwrap();
    w.add_values("only_b", &[1], &[1u8]).unwrap();
    w.insert_metadata("k", true).unwrap();
    w.finish().unwrap();

    let o = run(&[&"diff", &a, &b], 5);
    let t = stdout(&o);
    for needle in [
        "only in A: only_a",
        "only in B: only_b",
        "dtype: dt: float32 vs float64",
        "shape: sh: [2] vs [1, 2]",
        "values: vals: 2 of 3 elements differ, max |a-b| = 3e0",
        "values: ints: 1 of 2 elements differs, max |a-b| = 7e0",
        "metadata: k: (absent) vs true",
        "differ:",
    ] {
        assert!(t.contains(needle), "{needle:?} not in:\n{t}");
    }
    let d = json(&run(&[&"diff", &a, &b, &"--json"], 5));
    assert_eq!(d["equal"], false);
    assert_eq!(d["only_in_a"], serde_json::json!(["only_a"]));
    assert_eq!(d["identical"], 1);
    let vals = d["values"].as_array().unwrap();
    assert_eq!(vals[1]["name"], "vals");
    assert_eq!(vals[1]["max_abs_diff"], 3.0);
    assert_eq!(vals[1]["differing_elements"], 2);
    // --quiet: the exit code only.
    assert!(run(&[&"diff", &a, &b, &"-q"], 5).stdout.is_empty());
    let j = json(&run(&[&"diff", &a, &b, &"--ignore-metadata", &"--json"], 5));
    assert_eq!(j["metadata"], Value::Array(vec![]));
}

#[test]
fn merge_combines_inputs_and_refuses_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.pdx");
    let mut w = Writer::create(&x).unwrap();
    w.add_values("shared", &[1], &[1.0f32]).unwrap();
    w.add_values("x_only", &[1], &[2.0f32]).unwrap();
    w.insert_metadata("from", "x").unwrap();
    w.finish().unwrap();
    let y = dir.path().join("y.pdx");
    let mut w = Writer::create(&y).unwrap();
    w.add_values("shared", &[1], &[9.0f32]).unwrap();
    w.insert_metadata("from", "y").unwrap();
    w.finish().unwrap();
    let st = data("safetensors/plain.safetensors");
    let out = dir.path().join("out.pdx");
    let e = run(&[&"merge", &out, &x, &y, &st], 1);
    assert!(String::from_utf8_lossy(&e.stderr).contains("shared"));
    assert!(!out.exists());
    run(&[&"merge", &out, &x, &y, &st, &"--allow-override"], 0);
    let r = Reader::open(&out).unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(
        r.tensor("shared").unwrap().as_slice::<f32>().unwrap(),
        &[9.0]
    );
    assert_eq!(
        r.tensor("a").unwrap().as_slice::<f32>().unwrap(),
        &[1.0, 2.0, 3.0]
    );
    assert_eq!(
        r.header().metadata.get("from"),
        Some(&MetaValue::String("y".into()))
    );
    assert!(r.header().records_sorted);
    // Disjoint inputs merge without the flag.
    let out2 = dir.path().join("out2.pdx");
    run(&[&"merge", &out2, &x, &st], 0);
    assert_eq!(Reader::open(&out2).unwrap().len(), 4);
}

#[test]
fn meta_sets_typed_values_and_rewrites_only_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let before = std::fs::read(&p).unwrap();
    let records = Reader::open(&p).unwrap().header().records_len as usize;
    let o = run(
        &[
            &"meta",
            &p,
            &"--set",
            &"lr=0.001",
            &"--set",
            &"epochs=3",
            &"--set",
            &"done=false",
            &"--set",
            &"name=llama 3",
            &"--set",
            &r#"shape=[1,[2,"x"]]"#,
            &"--set",
            &r#"blob={"hex":"00ff"}"#,
            &"--set-str",
            &"version=007",
            &"--unset",
            &"model",
        ],
        0,
    );
    assert!(stdout(&o).contains("records untouched"));
    let after = std::fs::read(&p).unwrap();
    assert_eq!(&after[..records], &before[..records], "records untouched");
    assert_eq!(&after[..before.len()], &before[..], "only appended");
    let m = json(&run(&[&"meta", &p, &"--json"], 0));
    assert_eq!(
        m,
        serde_json::json!({
            "blob": {"hex": "00ff"}, "done": false, "epochs": 3, "lr": 0.001,
            "name": "llama 3", "shape": [1, [2, "x"]], "step": 100, "version": "007"
        })
    );
    let table = stdout(&run(&[&"meta", &p], 0));
    assert!(table.contains("epochs   int"), "{table}");
    assert!(table.contains("version  string  007"), "{table}");
    let r = Reader::open(&p).unwrap();
    assert_eq!(
        r.header().metadata.get("lr"),
        Some(&MetaValue::Float(0.001))
    );
    r.verify().unwrap();
    let st = json(&run(&[&"stat", &p, &"--json"], 0));
    assert!(st["dead_bytes"].as_u64().unwrap() > 0);
    assert_eq!(st["metadata_entries"], 8);
    run(&[&"verify", &p], 0);

    // Errors: a non-native input, a bad assignment, a JSON null.
    run(
        &[
            &"meta",
            &data("safetensors/model.safetensors"),
            &"--set",
            &"a=1",
        ],
        1,
    );
    run(&[&"meta", &p, &"--set", &"novalue"], 1);
    run(&[&"meta", &p, &"--set", &"k=null"], 1);
    run(&[&"meta", &p, &"--set", &"=1"], 1);
    assert_eq!(
        std::fs::read(&p).unwrap(),
        after,
        "failed sets change nothing"
    );
}

#[test]
fn an_interrupted_meta_set_is_recovered_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let before = std::fs::read(&p).unwrap();
    run(&[&"meta", &p, &"--set", &"k=1", &"-q"], 0);
    let after = std::fs::read(&p).unwrap();
    // A crash before the new footer is complete leaves the old file plus part of the new index.
    let torn = dir.path().join("torn.pdx");
    for cut in [
        before.len() + 1,
        (before.len() + after.len()) / 2,
        after.len() - 1,
    ] {
        std::fs::write(&torn, &after[..cut]).unwrap();
        // Damage of a paramdex file (exit 3), not a file of another kind (exit 1).
        run(&[&"ls", &torn], 3);
        let out = dir.path().join("restored.pdx");
        let o = run(&[&"recover", &torn, &out], 0);
        assert!(stdout(&o).contains("interrupted `meta --set`"));
        assert_eq!(std::fs::read(&out).unwrap(), before);
    }
}

#[test]
fn safetensors_round_trip_keeps_values_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let src = data("safetensors/model.safetensors");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(data("safetensors/manifest.json")).unwrap()).unwrap();
    let m = &manifest["model.safetensors"];
    let pdx = dir.path().join("m.pdx");
    run(&[&"convert", &src, &pdx], 0);
    let back = dir.path().join("back.safetensors");
    run(&[&"convert", &pdx, &back, &"--to", &"safetensors"], 0);
    // Every output has the mode of an ordinary new file (0666 less the umask), also the
    // safetensors one, which the safetensors crate writes through its own owner-only temp file.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let plain = dir.path().join("plain");
        std::fs::write(&plain, b"").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&back), mode(&plain));
        assert_eq!(mode(&pdx), mode(&plain));
    }
    for file in [&pdx, &back] {
        let list = json(&run(&[&"ls", file, &"--json"], 0));
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), m["tensors"].as_object().unwrap().len());
        for t in list {
            let name = t["name"].as_str().unwrap();
            let want = &m["tensors"][name];
            assert_eq!(t["dtype"], want["dtype"], "{name}");
            assert_eq!(t["shape"], want["shape"], "{name}");
            let raw = run(&[&"get", file, &name, &"--format", &"raw"], 0).stdout;
            let sha = format!("{:x}", Sha256::digest(&raw));
            assert_eq!(sha, want["sha256"].as_str().unwrap(), "{name}");
        }
        assert_eq!(json(&run(&[&"meta", file, &"--json"], 0)), m["metadata"]);
    }
    // The file paramdex wrote is a valid safetensors file to the reference parser.
    let bytes = std::fs::read(&back).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let md: BTreeMap<_, _> = meta.metadata().clone().unwrap().into_iter().collect();
    assert_eq!(md["format"], "pt");
    // Non-string metadata goes out as JSON text.
    run(&[&"meta", &pdx, &"--set", &"step=7", &"-q"], 0);
    let st2 = dir.path().join("typed.safetensors");
    run(&[&"convert", &pdx, &st2, &"--to", &"safetensors"], 0);
    let bytes = std::fs::read(&st2).unwrap();
    let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    assert_eq!(meta.metadata().as_ref().unwrap()["step"], "7");
}

#[test]
fn input_format_is_detected_by_content_not_extension() {
    let dir = tempfile::tempdir().unwrap();
    let st = dir.path().join("weights.pdx");
    std::fs::copy(data("safetensors/plain.safetensors"), &st).unwrap();
    let n = dir.path().join("model.safetensors");
    std::fs::copy(native(dir.path()), &n).unwrap();
    assert_eq!(
        json(&run(&[&"stat", &st, &"--json"], 0))["format"],
        "safetensors"
    );
    assert_eq!(
        json(&run(&[&"stat", &n, &"--json"], 0))["format"],
        "paramdex"
    );
    // Not a checkpoint at all.
    let junk = dir.path().join("junk.safetensors");
    std::fs::write(&junk, vec![b'x'; 100]).unwrap();
    run(&[&"ls", &junk], 1);
    // Looks like safetensors (length, '{') but the header is broken: corrupt.
    let bad = dir.path().join("bad.bin");
    let mut b = 20u64.to_le_bytes().to_vec();
    b.extend_from_slice(b"{\"a\": {\"dtype\": 1}} ");
    std::fs::write(&bad, b).unwrap();
    run(&[&"ls", &bad], 3);
}

/// `p` converted to `to` with a snappy index of 64-byte blocks and data aligned to `align`.
fn snappy_copy(p: &Path, to: &Path, align: &str) -> PathBuf {
    run(
        &[
            &"convert",
            &p,
            &to,
            &"--compress",
            &"snappy",
            &"--block-size",
            &"64",
            &"--align",
            &align,
        ],
        0,
    );
    to.to_path_buf()
}

/// `stat` is computed by the library for any store: a native file gives the same figures from
/// its path and through the object code path (a `file://` URL), snappy index included.
#[cfg(unix)]
#[test]
fn stat_is_the_same_from_a_path_and_a_url() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let c = snappy_copy(&p, &dir.path().join("s.pdx"), "64");
    for f in [p, c] {
        let url = format!("file://{}", std::fs::canonicalize(&f).unwrap().display());
        let mut local = json(&run(&[&"stat", &f, &"--json"], 0));
        let mut remote = json(&run(&[&"stat", &url, &"--json"], 0));
        assert!(local["index_blocks"].as_u64().unwrap() >= 5, "{local}");
        for st in [&mut local, &mut remote] {
            let o = st.as_object_mut().unwrap();
            o.remove("file");
            // A local file lists its data files and leftovers (a directory walk).
            o.remove("data_files");
            o.remove("data_files_bytes");
            o.remove("leftovers");
        }
        assert_eq!(local, remote);
    }
}

#[test]
fn native_stat_reports_the_layout() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let st = json(&run(&[&"stat", &p, &"--json"], 0));
    assert_eq!(st["format_version"], 3);
    assert_eq!(st["alignment"], 64);
    assert_eq!(st["shards"], 1);
    // Every block of the index table, each with its checksum (as `verify` counts them).
    // The header alone in the first data block, and the hash index block (SPEC.md 4.2, 4.5).
    assert_eq!(st["index_blocks"], 5);
    assert_eq!(st["index_data_blocks"], 2);
    assert_eq!(st["hash_index"], true);
    assert_eq!(st["dead_bytes"], 0);
    assert_eq!(st["metadata_entries"], 2);
    assert_eq!(st["index_compression"], "none");
    assert_eq!(st["by_dtype"]["float32"]["bytes"], 24);
    let len = std::fs::metadata(&p).unwrap().len();
    assert_eq!(st["file_bytes"].as_u64().unwrap(), len);
    assert_eq!(
        st["records_bytes"].as_u64().unwrap() + st["index_bytes"].as_u64().unwrap(),
        len
    );
    let c = snappy_copy(&p, &dir.path().join("s.pdx"), "8");
    let st = json(&run(&[&"stat", &c, &"--json"], 0));
    assert_eq!(st["alignment"], 8);
    assert!(st["index_blocks"].as_u64().unwrap() > 1);
    let text = stdout(&run(&[&"stat", &c], 0));
    assert!(
        text.contains("alignment") && text.contains("index blocks"),
        "{text}"
    );
}

#[test]
fn get_formats_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let g = json(&run(&[&"get", &p, &"seq"], 0));
    assert_eq!(g["lod"], serde_json::json!([[0, 1, 3]]));
    assert_eq!(g["data"], serde_json::json!([[1], [2], [3]]));
    let g = json(&run(&[&"get", &p, &"a.weight", &"--limit", &"2"], 0));
    assert_eq!(g["truncated"], true);
    assert_eq!(g["data"], serde_json::json!([1.0, 2.0]));
    // A name that is not UTF-8, by its hex from ls --json.
    let list = json(&run(&[&"ls", &p, &"--json"], 0));
    let hex = list
        .as_array()
        .unwrap()
        .iter()
        .find_map(|t| t.get("name_hex"))
        .unwrap()
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(hex, "726177ff");
    let raw = run(&[&"get", &p, &hex, &"--hex", &"--format", &"raw"], 0).stdout;
    assert_eq!(raw, [7]);
    // bfloat16 as .npy: raw uint16 bits.
    let npy = run(&[&"get", &p, &"a.bias", &"--format", &"npy"], 0).stdout;
    let (descr, shape, at) = parse_npy(&npy);
    assert_eq!((descr.as_str(), shape), ("<u2", vec![3]));
    assert_eq!(&npy[at..at + 2], &half::bf16::from_f32(0.5).to_le_bytes());
    // A scalar.
    let npy = run(&[&"get", &p, &"steps", &"--format", &"npy"], 0).stdout;
    assert_eq!(parse_npy(&npy).1, Vec::<u64>::new());
    // A string tensor cannot be npy.
    run(
        &[
            &"get",
            &data("tf/basic/tf2"),
            &"_CHECKPOINTABLE_OBJECT_GRAPH",
            &"--format",
            &"npy",
        ],
        1,
    );
    // --prefix filters ls.
    let l = json(&run(&[&"ls", &p, &"--json", &"--prefix", &"a."], 0));
    assert_eq!(l.as_array().unwrap().len(), 2);
}

/// Names with control characters (TensorFlow and Paddle accept any bytes): JSON output carries
/// them exactly (a pipe is not a terminal, and nothing may filter them out), text output shows
/// them escaped, and `get` finds them by the name from `ls --json`.
#[test]
fn control_characters_in_names_survive_json_and_are_escaped_in_text() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("ctl.pdx");
    let names: [&str; 4] = ["\x7fdel", "tab\tname", "\x1b[31mred", "c1\u{9b}csi"];
    let mut w = Writer::create(&p).unwrap();
    for (i, n) in names.iter().enumerate() {
        w.add(*n, Tensor::new(DType::UInt8, &[1], &[i as u8]))
            .unwrap();
    }
    w.finish().unwrap();
    let got: Vec<String> = json(&run(&[&"ls", &p, &"--json"], 0))
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    want.sort();
    assert_eq!(got, want);
    for (i, n) in names.iter().enumerate() {
        let raw = run(&[&"get", &p, n, &"--format", &"raw"], 0).stdout;
        assert_eq!(raw, [i as u8], "{n:?}");
    }
    let text = stdout(&run(&[&"ls", &p], 0));
    for shown in [
        "\\x7fdel",
        "tab\\x09name",
        "\\x1b[31mred",
        "c1\\xc2\\x9bcsi",
    ] {
        assert!(text.contains(shown), "{shown} in {text}");
    }
    assert_eq!(text.lines().count(), 6, "one line per tensor: {text}");
}

#[test]
fn errors_have_documented_exit_codes_and_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    run(&[&"get", &p, &"missing"], 4);
    run(&[&"ls", &dir.path().join("nope.pdx")], 1);
    run(&[&"ls"], 2);
    run(&[&"ls", &p, &"--bogus"], 2);
    run(&[&"get", &p, &"a.weight", &"--format", &"xml"], 2);
    run(
        &[&"convert", &p, &dir.path().join("x"), &"--align", &"3"],
        1,
    );
    // Corrupt data: verify and get say so with exit 3.
    let mut b = std::fs::read(&p).unwrap();
    let r = Reader::open(&p).unwrap();
    let off = r.tensor("a.weight").unwrap().data_offset() as usize;
    drop(r);
    b[off] ^= 1;
    let bad = dir.path().join("bad.pdx");
    std::fs::write(&bad, &b).unwrap();
    run(&[&"verify", &bad], 3);
    let v = json(&run(&[&"verify", &bad, &"--json"], 3));
    assert_eq!(v["ok"], false);
    assert_eq!(v["exit_code"], 3);
    assert!(v["error"].as_str().unwrap().contains("a.weight"));
    run(&[&"get", &bad, &"a.weight"], 3);
    // Help lists the exit codes; completions are generated.
    let h = stdout(&run(&[&"--help"], 0));
    assert!(h.contains("5  diff: the inputs differ"), "{h}");
    assert!(stdout(&run(&[&"get", &"--help"], 0)).contains("ml_dtypes"));
    for shell in ["bash", "zsh", "fish", "powershell", "elvish"] {
        let c = stdout(&run(&[&"completions", &shell], 0));
        assert!(c.contains("paramdex"), "{shell}");
    }
}

#[test]
fn quiet_and_progress_stay_off_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let out = dir.path().join("q.pdx");
    let o = run(&[&"--quiet", &"convert", &p, &out], 0);
    assert!(o.stdout.is_empty() && o.stderr.is_empty());
    let o = run(&[&"convert", &p, &out, &"--force"], 0);
    assert!(stdout(&o).starts_with("wrote "));
    // Off a terminal there is no progress bar, even for a large input.
    let big = dir.path().join("big.pdx");
    let mut w = Writer::create(&big).unwrap();
    w.add(
        "x",
        Tensor::new(DType::UInt8, &[20 << 20], &vec![1u8; 20 << 20]),
    )
    .unwrap();
    w.finish().unwrap();
    let o = run(&[&"convert", &big, &out, &"--force"], 0);
    assert!(
        o.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let o = run(&[&"verify", &big], 0);
    assert!(o.stderr.is_empty());
}

/// `--to paddle-tensor` writes several tensors as one file each at the path of its name: a
/// name no file can have (`..`, an absolute path, a NUL byte, a component longer than a file
/// name can be) is refused before anything is written, naming the tensor, or left out and
/// listed with `--skip-unsupported`, like every other tensor the output cannot hold. A tensor
/// alone goes to the file named on the command line: its name does not matter.
#[test]
fn paddle_tensor_names_that_cannot_be_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("odd.pdx");
    let long = "x".repeat(256);
    let bad: [&[u8]; 5] = [b"../up", b"/abs", b"a\0b", long.as_bytes(), b"a//b"];
    let mut w = Writer::create(&p).unwrap();
    w.add_values("ok/w", &[2], &[1.0f32, 2.0]).unwrap();
    w.add_values("z", &[], &[7i64]).unwrap();
    for n in bad {
        w.add(n, Tensor::new(DType::UInt8, &[1], &[1])).unwrap();
    }
    w.finish().unwrap();
    let out = dir.path().join("vars");
    let e =
        String::from_utf8_lossy(&run(&[&"convert", &p, &out, &"--to", &"paddle-tensor"], 1).stderr)
            .into_owned();
    assert!(
        e.contains(
            "tensor ../up is named by a path no file can have: it has a `.` or `..` path \
             component, which paddle-tensor output cannot hold"
        ) && e.contains("(5 such tensors)")
            && e.contains("--skip-unsupported"),
        "{e}"
    );
    assert!(!out.exists());
    let o = run(
        &[
            &"convert",
            &p,
            &out,
            &"--to",
            &"paddle-tensor",
            &"--skip-unsupported",
        ],
        0,
    );
    let notes = String::from_utf8_lossy(&o.stderr);
    for (n, why) in [
        ("../up", "`.` or `..`"),
        ("/abs", "absolute"),
        ("a\\x00b", "NUL"),
        (long.as_str(), "256 bytes"),
        ("a//b", "empty path component"),
    ] {
        assert!(
            notes.contains(&format!("left out {n} (named by a path no file can have: "))
                && notes.contains(why),
            "{n}: {notes}"
        );
    }
    assert!(out.join("ok/w").is_file() && out.join("z").is_file());
    assert!(!dir.path().join("up").exists());
    let names = ls_names(&out);
    assert_eq!(names, ["ok/w", "z"]);

    // One tensor alone, whatever its name, is the file named.
    let one = dir.path().join("one.pdx");
    let mut w = Writer::create(&one).unwrap();
    w.add(b"../up", Tensor::new(DType::UInt8, &[1], &[1]))
        .unwrap();
    w.finish().unwrap();
    let f = dir.path().join("one.lodtensor");
    run(&[&"convert", &one, &f, &"--to", &"paddle-tensor"], 0);
    assert!(f.is_file());
}

#[test]
fn convert_to_every_target() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let tf = dir.path().join("tfout");
    run(&[&"convert", &p, &tf, &"--to", &"tf"], 0);
    let d = json(&run(
        &[&"diff", &p, &tf, &"--json", &"--ignore-metadata"],
        5,
    ));
    // TensorFlow has no LoD: only that differs.
    assert_eq!(d["values"], Value::Array(vec![]));
    assert_eq!(d["only_in_a"], Value::Array(vec![]));
    assert_eq!(d["lod"].as_array().unwrap().len(), 1);
    let pt = dir.path().join("ptout");
    run(&[&"convert", &p, &pt, &"--to", &"paddle-tensor"], 0);
    run(&[&"diff", &p, &pt, &"--ignore-metadata"], 0);
    let pd = dir.path().join("pdout");
    // The names go into a program beside the parameters; one that is not UTF-8 cannot.
    run(&[&"convert", &p, &pd, &"--to", &"paddle"], 1);
    run(
        &[
            &"convert",
            &p,
            &pd,
            &"--to",
            &"paddle",
            &"--skip-unsupported",
        ],
        0,
    );
    assert!(dir.path().join("pdout.pdiparams").is_file());
    assert!(dir.path().join("pdout.pdmodel").is_file());
    assert_eq!(
        json(&run(&[&"ls", &pd, &"--json"], 0))
            .as_array()
            .unwrap()
            .len(),
        4
    );
    let exp = dir.path().join("exp");
    run(&[&"export-tf", &p, &exp], 0);
    run(&[&"ls", &exp], 0);
    // safetensors cannot hold LoD: refused, or left out on request.
    let st = dir.path().join("o.safetensors");
    run(&[&"convert", &p, &st, &"--to", &"safetensors"], 1);
    assert!(!st.exists());
    run(
        &[
            &"convert",
            &p,
            &st,
            &"--to",
            &"safetensors",
            &"--skip-unsupported",
        ],
        0,
    );
    let l = json(&run(&[&"ls", &st, &"--json"], 0));
    assert_eq!(
        l.as_array().unwrap().len(),
        3,
        "no LoD tensor, no non-UTF-8 name"
    );
}

#[test]
fn colour_only_when_asked_or_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    // Off a terminal: none (every `run` above checks this too), even with CLICOLOR.
    let o = Command::new(BIN)
        .args(["ls".as_ref(), p.as_os_str()])
        .env("CLICOLOR", "1")
        .output()
        .unwrap();
    assert!(!o.stdout.contains(&0x1b));
    // Forced: the heading is styled.
    let o = Command::new(BIN)
        .args([
            "--color".as_ref(),
            "always".as_ref(),
            "ls".as_ref(),
            p.as_os_str(),
        ])
        .output()
        .unwrap();
    assert!(
        o.stdout.starts_with(b"\x1b["),
        "{:?}",
        String::from_utf8_lossy(&o.stdout)
    );
    let o = Command::new(BIN)
        .args([
            "--color".as_ref(),
            "always".as_ref(),
            "get".as_ref(),
            p.as_os_str(),
            "nope".as_ref(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&o.stderr).contains("\x1b["));
}

#[test]
fn verify_checks_large_tensors_in_pieces_on_several_threads() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("large.pdx");
    let mut w = Writer::create(&p).unwrap();
    let big: Vec<u8> = (0..(5u32 << 20) + 17)
        .map(|i| (i * 7 % 251) as u8)
        .collect();
    w.add(
        "a.big",
        Tensor::new(DType::UInt8, &[big.len() as u64], &big),
    )
    .unwrap();
    w.add_values("b.small", &[2], &[1.0f32, 2.0]).unwrap();
    w.add("c.empty", Tensor::new(DType::Float32, &[0], &[]))
        .unwrap();
    w.finish().unwrap();
    for threads in ["1", "3"] {
        let v = json(&run(&[&"verify", &p, &"--json", &"--threads", &threads], 0));
        assert_eq!(v["tensors"], 3);
        assert_eq!(v["data_bytes"].as_u64().unwrap(), big.len() as u64 + 8);
        // 2 data blocks (the header alone in the first), the hash index block, the metaindex
        // and the index block; 3 tensors.
        assert_eq!(v["checksums"], 5 + 3, "5 blocks + 3 tensors");
    }
    // One flipped byte in the fourth 1 MiB piece of the large tensor.
    let off = Reader::open(&p)
        .unwrap()
        .tensor("a.big")
        .unwrap()
        .data_offset() as usize;
    let mut bytes = std::fs::read(&p).unwrap();
    bytes[off + (3 << 20) + 5] ^= 0x10;
    let bad = dir.path().join("bad.pdx");
    std::fs::write(&bad, &bytes).unwrap();
    let v = json(&run(&[&"verify", &bad, &"--json"], 3));
    assert!(v["error"].as_str().unwrap().contains("a.big"), "{v}");
}

/// export-tf given something other than a native file says what it is and what to do, and
/// creates nothing.
#[test]
fn export_tf_explains_inputs_that_are_not_native() {
    let out = tempfile::tempdir().unwrap();
    let p = out.path().join("ck");
    for input in [
        data("tf/basic/tf2/ckpt-1"),
        data("tf/basic/tf2"),
        data("tf/basic/v1/model.ckpt.index"),
    ] {
        let o = run(&[&"export-tf", &input, &p], 1);
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("is a tensorflow checkpoint") && e.contains("--to tf"),
            "{e}"
        );
    }
    let o = run(&[&"export-tf", &out.path().join("missing.pdx"), &p], 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("no such file"));
    assert!(std::fs::read_dir(out.path()).unwrap().next().is_none());
}

/// A records region hiding a record that no index entry names: every block and tensor checksum
/// matches and every indexed record agrees with its entry, but the records do not tile the
/// region (SPEC.md 2, 8.2). `paramdex verify` once ran its own copy of the verify loop and
/// passed such a file; it now runs `Reader::verify_with`, and both refuse it.
#[test]
fn verify_catches_a_record_no_entry_names_in_the_library_and_the_cli() {
    use paramdex::raw::entry::FileHeader;
    use paramdex::raw::table::{Table, TableBuilder, TableOptions, TableReadOptions};

    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.pdx");
    let mut w = Writer::create(&full).unwrap();
    for name in ["a", "hidden", "z"] {
        w.add(name, Tensor::new(DType::Float32, &[2], &[0u8; 8]))
            .unwrap();
    }
    w.finish().unwrap();
    let bytes = std::fs::read(&full).unwrap();
    let records_len = Reader::open(&full).unwrap().header().records_len;

    // The same records, behind a new index that leaves "hidden" out.
    let table = Table::open(&bytes, TableReadOptions::default()).unwrap();
    let mut out = bytes[..records_len as usize].to_vec();
    let mut builder = TableBuilder::new(&mut out, records_len, TableOptions::default()).unwrap();
    let mut it = table.iter();
    while it.next().unwrap() {
        if it.key().is_empty() {
            let mut h = FileHeader::decode(it.value(), 0).unwrap();
            h.tensor_count -= 1;
            builder.add(b"", &h.encode()).unwrap();
        } else if it.key() != b"hidden" {
            builder.add(it.key(), it.value()).unwrap();
        }
    }
    builder.finish().unwrap();
    let bad = dir.path().join("hidden.pdx");
    std::fs::write(&bad, &out).unwrap();

    // Every tensor the index names reads back and checks out...
    let r = Reader::open(&bad).unwrap();
    assert_eq!(r.len(), 2);
    for v in r.iter() {
        let v = v.unwrap();
        v.verify_crc().unwrap();
        v.check_record().unwrap();
    }
    // ...but the library's verify and the CLI's refuse the file, the same way.
    let e = r.verify().unwrap_err();
    assert!(matches!(e, paramdex::Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("has no index entry"), "{e}");
    let o = run(&[&"verify", &bad], 3);
    let se = String::from_utf8_lossy(&o.stderr);
    assert!(se.contains("has no index entry"), "{se}");
    run(&[&"verify", &full], 0);
}

/// `diff` reads both listings side by side (a merge of two sorted streams) yet prints as it
/// always has: every name only in A, then every name only in B, then the differences of
/// common tensors in name order, then metadata.
#[test]
fn diff_prints_in_the_same_order_whatever_the_interleaving() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.pdx");
    let b = dir.path().join("b.pdx");
    let mut w = Writer::create(&a).unwrap();
    for (n, v) in [
        ("a1", 1.0f32),
        ("c", 1.0),
        ("d4", 1.0),
        ("f", 1.0),
        ("h", 1.0),
    ] {
        w.add_values(n, &[1], &[v]).unwrap();
    }
    w.finish().unwrap();
    let mut w = Writer::create(&b).unwrap();
    for (n, v) in [
        ("a0", 1.0f32),
        ("b1", 1.0),
        ("c", 2.0),
        ("e5", 1.0),
        ("f", 1.0),
        ("h", 4.0),
    ] {
        w.add_values(n, &[1], &[v]).unwrap();
    }
    w.insert_metadata("k", 1i64).unwrap();
    w.finish().unwrap();
    let t = stdout(&run(&[&"diff", &a, &b], 5));
    let expected = format!(
        "A {} (paramdex)\nB {} (paramdex)\n\
         only in A: a1 (float32 [1])\nonly in A: d4 (float32 [1])\n\
         only in B: a0 (float32 [1])\nonly in B: b1 (float32 [1])\nonly in B: e5 (float32 [1])\n\
         values: c: 1 of 1 elements differs, max |a-b| = 1e0\n\
         values: h: 1 of 1 elements differs, max |a-b| = 3e0\n\
         metadata: k: (absent) vs 1\n\
         differ: 2 only in A, 3 only in B, 0 dtype, 0 shape, 0 LoD, 2 values, 1 metadata; 1 tensor identical\n",
        a.display(),
        b.display()
    );
    assert_eq!(t, expected);
    let d = json(&run(&[&"diff", &a, &b, &"--json"], 5));
    assert_eq!(d["only_in_a"], serde_json::json!(["a1", "d4"]));
    assert_eq!(d["only_in_b"], serde_json::json!(["a0", "b1", "e5"]));
    assert_eq!(d["values"][1]["name"], "h");
}

/// Issue 30, defect 6: a command's help lists its own options, then the global ones under
/// their own heading; the object-storage options only on commands whose inputs or outputs may
/// be URLs; every command has examples; summaries are one short line, details in `--help`.
#[test]
fn help_separates_global_and_object_storage_options_and_gives_examples() {
    let local = [
        "demo",
        "export-tf",
        "recover",
        "clean-shards",
        "completions",
    ];
    let remote = [
        "ls",
        "get",
        "stat",
        "verify",
        "convert",
        "diff",
        "merge",
        "meta",
        "merge-shards",
        "ckpt",
    ];
    for c in local.iter().chain(&remote) {
        let h = stdout(&run(&[c, &"--help"], 0));
        let own = h.find("\nOptions:").unwrap_or_else(|| panic!("{c}: {h}"));
        let global = h
            .find("\nGlobal options:")
            .unwrap_or_else(|| panic!("{c}: {h}"));
        assert!(
            own < global && !h[own..global].contains("--quiet"),
            "{c}: {h}"
        );
        assert_eq!(h.contains("--endpoint-url"), remote.contains(c), "{c}: {h}");
        assert_eq!(
            h.contains("Object storage (s3:// inputs and outputs):"),
            remote.contains(c),
            "{c}: {h}"
        );
        assert!(h.contains("Examples:\n  paramdex "), "{c}: {h}");
        let summary = stdout(&run(&[c, &"-h"], 0));
        let first = summary.lines().next().unwrap_or_default();
        assert!(first.len() <= 100, "{c}: {first}");
    }
    // The object-storage options before the command's name, as ever; not on a local command.
    let o = run(&[&"demo", &"--region", &"x"], 2);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("unexpected argument '--region'"), "{e}");
    // The list of commands: one short line each.
    let h = stdout(&run(&[&"--help"], 0));
    let commands: Vec<&str> = h
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(commands.len() >= 15, "{h}");
    for line in commands {
        assert!(line.len() <= 100, "{line}");
    }
}
