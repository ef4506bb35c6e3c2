//! Bytes values (SPEC.md 6.1) through the binary: `ls` shows them as `bytes` of their length,
//! `get` prints them (`--format raw`: the value), `stat`, `diff` and `verify` handle them,
//! `convert` keeps them (native, TensorFlow) or refuses them by name (safetensors, Paddle).

use std::path::Path;

use paramdex::{DType, Reader, Tensor, Writer};
use serde_json::Value;

mod common;
use common::*;

fn write(path: &Path, state: &[u8]) {
    let mut w = Writer::create(path).unwrap();
    w.add(
        "w",
        Tensor::new(DType::Float32, &[1], &1.5f32.to_le_bytes()),
    )
    .unwrap();
    w.add_bytes("opt/param_groups", b"{\"lr\": 0.1}").unwrap();
    w.add_bytes("rng", state).unwrap();
    w.finish().unwrap();
}

fn entry<'a>(list: &'a Value, name: &str) -> &'a Value {
    list.as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap()
}

#[test]
fn bytes_values_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.pdx");
    // Every byte but ESC (the harness refuses colour codes in the output).
    let rng: Vec<u8> = (0..=255u8).filter(|&b| b != 0x1b).collect();
    write(&a, &rng);

    let list = json(&run(&[&"ls", &a, &"--json"], 0));
    let g = entry(&list, "opt/param_groups");
    assert_eq!(g["dtype"], "bytes");
    assert_eq!(g["shape"], serde_json::json!([]));
    assert_eq!(g["nbytes"], 11);
    assert_eq!(entry(&list, "rng")["nbytes"], 255);
    assert!(stdout(&run(&[&"ls", &a], 0)).contains("bytes"));

    let j = json(&run(&[&"get", &a, &"opt/param_groups"], 0));
    assert_eq!(j["dtype"], "bytes");
    assert_eq!(j["data"], "{\"lr\": 0.1}");
    let j = json(&run(&[&"get", &a, &"rng", &"--limit", &"1000"], 0));
    assert_eq!(j["data"]["hex"].as_str().unwrap().len(), 510, "{j}");
    // --limit cuts the value (in bytes).
    let j = json(&run(&[&"get", &a, &"rng", &"--limit", &"3"], 0));
    assert_eq!(j["data"], "\u{0}\u{1}\u{2}");
    assert_eq!(j["truncated"], true);
    let raw = run(&[&"get", &a, &"rng", &"--format", &"raw"], 0).stdout;
    assert_eq!(raw, rng);
    run(&[&"get", &a, &"rng", &"--format", &"npy"], 1);

    run(&[&"stat", &a], 0);
    run(&[&"verify", &a], 0);
    // verify counts a bytes value's bytes as ls does (not its length field): 4 + 11 + 255.
    let v = json(&run(&[&"verify", &a, &"--json"], 0));
    assert_eq!(v["data_bytes"], 4 + 11 + 255, "{v}");

    // diff: equal files, then a bytes value that differs.
    let b = dir.path().join("b.pdx");
    write(&b, &rng);
    run(&[&"diff", &a, &b], 0);
    let c = dir.path().join("c.pdx");
    let mut other = rng.clone();
    other[7] ^= 1;
    write(&c, &other);
    let t = stdout(&run(&[&"diff", &a, &c], 5));
    assert!(t.contains("rng"), "{t}");

    // native -> native keeps them; -> TensorFlow and back keeps them.
    let n2 = dir.path().join("n2.pdx");
    run(&[&"convert", &a, &n2], 0);
    assert_eq!(
        Reader::open(&n2)
            .unwrap()
            .get_bytes("rng")
            .unwrap()
            .unwrap(),
        &rng[..]
    );
    let tf = dir.path().join("tfout");
    run(&[&"convert", &a, &tf, &"--to", &"tf"], 0);
    let tl = json(&run(&[&"ls", &tf, &"--json"], 0));
    assert_eq!(entry(&tl, "rng")["dtype"], "bytes");
    assert_eq!(
        run(&[&"get", &tf, &"rng", &"--format", &"raw"], 0).stdout,
        rng
    );
    let back = dir.path().join("back.pdx");
    run(&[&"convert", &tf, &back], 0);
    run(&[&"diff", &a, &back, &"--ignore-metadata"], 0);
    let exp = dir.path().join("exp");
    run(&[&"export-tf", &a, &exp], 0);
    assert_eq!(
        run(&[&"get", &exp, &"rng", &"--format", &"raw"], 0).stdout,
        rng
    );

    // Formats that cannot hold them refuse them by name, or leave them out on request.
    let st = dir.path().join("o.safetensors");
    let o = run(&[&"convert", &a, &st, &"--to", &"safetensors"], 1);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("bytes value") && e.contains("opt/param_groups"),
        "{e}"
    );
    assert!(!st.exists());
    run(
        &[
            &"convert",
            &a,
            &st,
            &"--to",
            &"safetensors",
            &"--skip-unsupported",
        ],
        0,
    );
    let sl = json(&run(&[&"ls", &st, &"--json"], 0));
    assert_eq!(sl.as_array().unwrap().len(), 1);
    let pt = dir.path().join("pt");
    run(&[&"convert", &a, &pt, &"--to", &"paddle-tensor"], 1);
}
