//! Writes a Paddle 3 model of N parameters (a PIR `.json` program shaped like Paddle 3.3.1's
//! output, and its combined `.pdiparams`), then times reading its program in this process: the
//! generic `serde_json::Value` tree alone against paramdex's whole [`load_program`], and
//! serde_json skipping the whole text (`IgnoredAny`: no value built, fewer checks), a floor.
//!
//! `cargo run --release --example pir_program -- DIR [N] [RUNS]` (N = 5000, RUNS = 50) writes
//! `DIR/model.json` and `DIR/model.pdiparams`; `paramdex ls DIR/model.pdiparams` opens them.
//! docs/benchmarks-history.md ("Opening Paddle 3 programs", issue 17) has the numbers.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use paramdex::interop::paddle::load_program;
use paramdex::prelude::*;

/// The name of parameter `i`: a layer's weight or bias, as Paddle names them.
fn name(i: usize) -> String {
    if i.is_multiple_of(2) {
        format!("linear_{}.w_0", i / 2)
    } else {
        format!("linear_{}.b_0", i / 2)
    }
}

/// The dims of parameter `i` (small: the program, not the data, is measured).
fn dims(i: usize) -> Vec<u64> {
    if i.is_multiple_of(2) {
        vec![4, 4]
    } else {
        vec![4]
    }
}

/// A PIR program: a parameter op per parameter, then per layer the ops using them (a matmul
/// and an add), as `paddle.jit.save` writes a stack of `Linear` layers.
fn program(n: usize) -> String {
    let mut s = String::from(
        r##"{"base_code":{"magic":"pir","trainable":true,"version":4},"program":{"regions":[{"#":"region_0","blocks":[{"#":"block_0","args":[],"ops":["##,
    );
    let ty = |d: &[i64]| {
        let d: Vec<String> = d.iter().map(i64::to_string).collect();
        format!(
            r##"{{"#":"0.t_dtensor","D":[{{"#":"0.t_f32"}},[{}],"NCHW",[],0]}}"##,
            d.join(",")
        )
    };
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(
            s,
            r##"{{"#":"p","A":[0,1,1,"{}"],"DA":[],"O":{{"%":{},"TT":{}}},"OA":[1,0,1],"QA":[]}}"##,
            name(i),
            i + 1,
            ty(&dims(i).iter().map(|&x| x as i64).collect::<Vec<_>>())
        );
    }
    let mut value = n + 1;
    for layer in 0..n / 2 {
        let (w, b) = (2 * layer + 1, 2 * layer + 2);
        let _ = write!(
            s,
            r##",{{"#":"1.matmul","A":[{{"AT":{{"#":"0.a_bool","D":false}},"N":"transpose_x"}},{{"AT":{{"#":"0.a_bool","D":false}},"N":"transpose_y"}}],"I":[{{"%":{x}}},{{"%":{w}}}],"O":[{{"%":{y},"TT":{t}}}],"OA":[{{"AT":{{"#":"0.a_array","D":[{{"#":"0.a_bool","D":false}}]}},"N":"stop_gradient"}}]}},{{"#":"1.add","A":[],"I":[{{"%":{y}}},{{"%":{b}}}],"O":[{{"%":{z},"TT":{t}}}],"OA":[{{"AT":{{"#":"0.a_array","D":[{{"#":"0.a_bool","D":false}}]}},"N":"stop_gradient"}}]}}"##,
            x = value,
            y = value + 1,
            z = value + 2,
            t = ty(&[-1, 4]),
        );
        value += 2;
    }
    s.push_str("]}]}]}}");
    s
}

/// The combined `.pdiparams`: one float32 record per parameter, in bytewise name order
/// (docs/paddle-records.md).
fn params(n: usize) -> Vec<u8> {
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| name(i));
    let mut out = Vec::new();
    for i in order {
        let d = dims(i);
        let mut desc = vec![0x08, 5]; // data_type FP32
        for &x in &d {
            desc.push(0x10);
            desc.push(x as u8); // dims below 128: one varint byte
        }
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(desc.len() as i32).to_le_bytes());
        out.extend_from_slice(&desc);
        let numel: u64 = d.iter().product();
        for k in 0..numel {
            out.extend_from_slice(&(k as f32).to_le_bytes());
        }
    }
    out
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| "pir_program".into()));
    let n: usize = args.next().map_or(5000, |a| a.parse().expect("N"));
    let runs: usize = args.next().map_or(50, |a| a.parse().expect("RUNS"));
    std::fs::create_dir_all(&dir).map_err(|e| Error::io("creating the directory", e))?;
    let json = dir.join("model.json");
    let text = program(n);
    std::fs::write(&json, &text).map_err(|e| Error::io("writing the program", e))?;
    std::fs::write(dir.join("model.pdiparams"), params(n))
        .map_err(|e| Error::io("writing the parameters", e))?;
    println!(
        "wrote {} ({} bytes, {n} parameters) and model.pdiparams",
        json.display(),
        text.len()
    );

    let prog = load_program(&json)?;
    assert_eq!(prog.params.len(), n);
    let (mut floor, mut tree, mut whole) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        let t = Instant::now();
        let bytes = std::fs::read(&json).map_err(|e| Error::io("reading the program", e))?;
        let _: serde::de::IgnoredAny = serde_json::from_slice(&bytes).expect("valid JSON");
        floor.push(t.elapsed());
        let t = Instant::now();
        let bytes = std::fs::read(&json).map_err(|e| Error::io("reading the program", e))?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        drop(std::hint::black_box(v));
        tree.push(t.elapsed());
        let t = Instant::now();
        std::hint::black_box(load_program(&json)?);
        whole.push(t.elapsed());
    }
    let (floor, tree, whole) = (median(floor), median(tree), median(whole));
    println!(
        "median of {runs}: read + serde_json::Value tree alone {tree:.2?}; load_program (read, \
         parse, sort) {whole:.2?} ({:.2}x faster); read + skip all (IgnoredAny, no checks) \
         {floor:.2?}",
        tree.as_secs_f64() / whole.as_secs_f64()
    );
    Ok(())
}
