//! `convert --compress lossless` (issue 40, SPEC.md 3.4): a smaller file that lists, gets,
//! verifies and converts back byte for byte; `stat` and `ls -l` show stored and decoded sizes;
//! damage inside a compressed record makes `verify` exit 3 naming the tensor and chunk.

mod common;

use common::{json, run, stdout};
use paramdex::{DType, Tensor, Writer};

/// Weights with a scale per row of 512 (what a layer's weights look like to the codec).
fn weights(n: usize) -> Vec<u8> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut out = Vec::with_capacity(2 * n);
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5;
        let v = u * 0.05 * (1.0 + (i / 512 % 5) as f32);
        out.extend_from_slice(&half::bf16::from_f32(v).to_le_bytes());
    }
    out
}

#[test]
fn convert_compress_lossless_round_trips_and_verify_names_the_damaged_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("model.pdx");
    let data = weights(3 << 19);
    let mut w = Writer::create(&src).unwrap();
    w.add(
        "layer.weight",
        Tensor::new(DType::BFloat16, &[3072, 512], &data),
    )
    .unwrap();
    w.add("layer.bias", Tensor::new(DType::Float32, &[4], &[0; 16]))
        .unwrap();
    w.finish().unwrap();

    let packed = dir.path().join("packed.pdx");
    run(&[&"convert", &src, &packed, &"--compress", &"lossless"], 0);
    let (a, b) = (
        std::fs::metadata(&src).unwrap().len(),
        std::fs::metadata(&packed).unwrap().len(),
    );
    assert!(b * 5 < a * 4, "{b} not below 0.8 x {a}");
    run(&[&"verify", &packed], 0);

    // get: the same bytes.
    let raw = dir.path().join("w.bin");
    run(
        &[
            &"get",
            &packed,
            &"layer.weight",
            &"--format",
            &"raw",
            &"-o",
            &raw,
        ],
        0,
    );
    assert!(std::fs::read(&raw).unwrap() == data);

    // stat and ls -l: stored beside decoded.
    let s = json(&run(&[&"stat", &packed, &"--json"], 0));
    assert_eq!(s["format_version"], 4);
    let ratio = s["data_compression_ratio"].as_f64().unwrap();
    assert!(ratio > 1.25, "{ratio}");
    assert!(stdout(&run(&[&"stat", &packed], 0)).contains("lossless compression, ratio"));
    let l = json(&run(&[&"ls", &packed, &"-l", &"--json"], 0));
    let row = l
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "layer.weight")
        .unwrap();
    assert_eq!(row["nbytes"], data.len() as u64);
    assert!(row["stored_nbytes"].as_u64().unwrap() < data.len() as u64);
    assert!(stdout(&run(&[&"ls", &packed, &"-l"], 0)).contains("stored)"));

    // Back to safetensors, byte for byte what the uncompressed file converts to.
    let (st_a, st_b) = (
        dir.path().join("a.safetensors"),
        dir.path().join("b.safetensors"),
    );
    run(&[&"convert", &src, &st_a, &"--to", &"safetensors"], 0);
    run(&[&"convert", &packed, &st_b, &"--to", &"safetensors"], 0);
    assert!(std::fs::read(&st_a).unwrap() == std::fs::read(&st_b).unwrap());
    // And to a plain native file again.
    let plain = dir.path().join("plain.pdx");
    run(&[&"convert", &packed, &plain], 0);
    let r = paramdex::Reader::open(&plain).unwrap();
    assert!(!r.tensor("layer.weight").unwrap().is_compressed());
    assert!(r.tensor("layer.weight").unwrap().data() == &data[..]);

    // export-tf cannot link a compressed file (TensorFlow would read the stored bytes): it
    // writes a checkpoint of the decoded tensors.
    let tf = dir.path().join("tf/model");
    run(&[&"export-tf", &packed, &tf], 0);
    let from_tf = dir.path().join("from_tf.pdx");
    run(&[&"convert", &tf, &from_tf], 0);
    let r = paramdex::Reader::open(&from_tf).unwrap();
    assert!(r.tensor("layer.weight").unwrap().data() == &data[..]);

    // Damage the last stored byte: chunk 2, the last of 3 (1 MiB chunks of 3 MiB).
    let (off, len) = {
        let r = paramdex::Reader::open(&packed).unwrap();
        let v = r.tensor("layer.weight").unwrap();
        (v.data_offset(), v.stored_len())
    };
    let mut bytes = std::fs::read(&packed).unwrap();
    bytes[(off + len - 1) as usize] ^= 0x01;
    std::fs::write(&packed, &bytes).unwrap();
    let o = run(&[&"verify", &packed], 3);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("layer.weight") && err.contains("chunk 2"),
        "{err}"
    );
}
