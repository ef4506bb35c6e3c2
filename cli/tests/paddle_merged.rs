//! The CLI on Paddle's size-prefixed merged parameter file: `convert --to paddle-merged`, `ls`,
//! `get FILE '#K'` by counter, `diff` against the source, and broken files named with their
//! offset and counter (exit 3).

mod common;
use common::*;

use std::fs;

/// The reference's fp32 [3] record, [1, 2, 3], by hand.
fn record_f32_3() -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&0u64.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&4i32.to_le_bytes());
    r.extend_from_slice(&[0x08, 0x05, 0x10, 0x03]);
    for x in [1.0f32, 2.0, 3.0] {
        r.extend_from_slice(&x.to_le_bytes());
    }
    r
}

#[test]
fn convert_to_merged_then_read_by_name_and_counter() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let out = dir.path().join("m.merged");
    // A name that is not UTF-8 cannot be declared by the program beside the file.
    run(&[&"convert", &p, &out, &"--to", &"paddle-merged"], 1);
    let o = run(
        &[
            &"convert",
            &p,
            &out,
            &"--to",
            &"paddle-merged",
            &"--skip-unsupported",
        ],
        0,
    );
    let said = stdout(&o);
    assert!(said.contains("m.merged and "), "{said}");
    assert!(dir.path().join("m.pdmodel").is_file());
    // Every tensor but the one left out is the same.
    let d = json(&run(
        &[&"diff", &p, &out, &"--json", &"--ignore-metadata"],
        5,
    ));
    assert_eq!(d["only_in_a"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["values"].as_array().unwrap().len(), 0, "{d}");
    assert_eq!(d["lod"].as_array().unwrap().len(), 0, "{d}");

    let names = ls_names(&out);
    assert_eq!(names, ["a.bias", "a.weight", "seq", "steps"]);
    // Record 2 is `seq`, with its LoD; by name the same.
    let by_counter = json(&run(&[&"get", &out, &"#2"], 0));
    assert_eq!(by_counter["name"], "seq");
    assert_eq!(by_counter["lod"], serde_json::json!([[0, 1, 3]]));
    let by_name = json(&run(&[&"get", &out, &"seq"], 0));
    assert_eq!(by_counter, by_name);
    run(&[&"get", &out, &"#4"], 4);
    let v = json(&run(&[&"verify", &out, &"--json"], 0));
    assert_eq!(v["format"], "paddle merged file");
    assert_eq!(v["tensors"], 4);
}

#[test]
fn hand_written_merged_file_without_program() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("params");
    let r = record_f32_3();
    let mut buf = Vec::new();
    for _ in 0..3 {
        buf.extend_from_slice(&(r.len() as u64).to_le_bytes());
        buf.extend_from_slice(&r);
    }
    fs::write(&f, &buf).unwrap();
    let names = ls_names(&f);
    assert_eq!(names, ["#0", "#1", "#2"]);
    let t = json(&run(&[&"get", &f, &"#1"], 0));
    assert_eq!(t["data"], serde_json::json!([1.0, 2.0, 3.0]));
    let raw = run(&[&"get", &f, &"#0", &"--format", &"raw", &"-o", &"-"], 0);
    assert_eq!(raw.stdout, &r[r.len() - 12..]);

    // Cut inside the last size field: exit 3, naming the file, offset and counter.
    let cut = dir.path().join("cut");
    fs::write(&cut, &buf[..buf.len() - r.len() - 3]).unwrap();
    let o = run(&[&"ls", &cut], 3);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    let at = 2 * (8 + r.len());
    assert!(err.contains(&format!("size field at offset {at}")), "{err}");
    assert!(err.contains("record 2") && err.contains("cut"), "{err}");

    // A size above the limit.
    let mut big = buf.clone();
    big[8 + r.len()..16 + r.len()].copy_from_slice(&u64::MAX.to_le_bytes());
    let bigf = dir.path().join("big");
    fs::write(&bigf, &big).unwrap();
    let o = run(&[&"get", &bigf, &"#0"], 3);
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(
        err.contains("above the limit") && err.contains("record 1"),
        "{err}"
    );
}

#[test]
fn merged_output_over_a_directory_or_existing_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = native(dir.path());
    let out = dir.path().join("o.bin");
    fs::write(&out, b"old").unwrap();
    run(
        &[
            &"convert",
            &p,
            &out,
            &"--to",
            &"paddle-merged",
            &"--skip-unsupported",
        ],
        1,
    );
    assert_eq!(fs::read(&out).unwrap(), b"old");
    run(
        &[
            &"convert",
            &p,
            &out,
            &"--to",
            &"paddle-merged",
            &"--skip-unsupported",
            &"--force",
        ],
        0,
    );
    run(&[&"get", &out, &"#0"], 0);
}

/// A record of `data_type` 99 (no Paddle or paramdex type) with dims [2, 3] and 5 data bytes.
fn record_unknown_code() -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&0u64.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&6i32.to_le_bytes());
    r.extend_from_slice(&[0x08, 99, 0x10, 0x02, 0x10, 0x03]);
    r.extend_from_slice(&[5, 4, 3, 2, 1]);
    r
}

#[test]
fn unknown_paddle_code_lists_reads_raw_and_is_refused_by_convert() {
    let dir = tempfile::tempdir().unwrap();
    // A tensor file, and a merged file holding it after an fp32 record.
    let tensor = dir.path().join("w");
    fs::write(&tensor, record_unknown_code()).unwrap();
    let merged = dir.path().join("m.merged");
    let mut m = Vec::new();
    for r in [record_f32_3(), record_unknown_code()] {
        m.extend_from_slice(&(r.len() as u64).to_le_bytes());
        m.extend_from_slice(&r);
    }
    fs::write(&merged, m).unwrap();
    for (src, name) in [(&tensor, "w"), (&merged, "#1")] {
        let list = json(&run(&[&"ls", src, &"--json"], 0));
        let t = list
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap();
        assert_eq!(t["dtype"], "code 99", "{t}");
        assert_eq!(t["shape"], serde_json::json!([2, 3]), "{t}");
        let stat = json(&run(&[&"stat", src, &"--json"], 0));
        assert_eq!(
            stat["by_dtype"]["code 99"],
            serde_json::json!({"tensors": 1, "bytes": 5})
        );
        assert_eq!(
            run(&[&"get", src, &name, &"--format", &"raw"], 0).stdout,
            [5, 4, 3, 2, 1]
        );
        run(&[&"diff", src, src], 0);
        let out = dir.path().join("o.pdx");
        let e = run_codes(&[&"convert", src, &out], &[1, 3, 4, 6]);
        let err = String::from_utf8_lossy(&e.stderr);
        assert!(
            err.contains(&format!(
                "tensor {name} is a paddle code 99 tensor, which paramdex does not decode"
            )),
            "{err}"
        );
        assert!(!out.exists());
        run(&[&"convert", src, &out, &"--skip-unsupported", &"-q"], 0);
        let names: Vec<String> = json(&run(&[&"ls", &out, &"--json"], 0))
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect();
        let want: Vec<String> = if name == "w" {
            vec![]
        } else {
            vec!["#0".into()]
        };
        assert_eq!(names, want);
        fs::remove_file(&out).unwrap();
    }
}
