//! The lossless-compression benchmark (BENCHMARKS.md, "Lossless records", issue 40): ratio,
//! encode and decode speed of paramdex's codec (`record::lossless`) on synthetic weights with a
//! scale per row and on the weights of a trained model (`benches/lossless_weights.py` writes
//! them), beside zstd alone on the same bytes; then a full load of a compressed file against
//! the same file uncompressed.
//!
//! ```text
//! python benches/lossless_weights.py DIR            # DIR/real.*.bin
//! cargo run --release --example lossless_bench DIR  # DIR/synth.*.bin, the table
//! python benches/lossless_weights.py DIR --zipnn    # ZipNN on every DIR/*.bin
//! ```

use std::time::Instant;

use paramdex::raw::record::lossless::{self, At, Layout};
use paramdex::{DType, DataCompression, LoadOptions, Reader, Tensor, Writer, WriterOptions};

fn weights(n: usize, row: usize) -> Vec<f32> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        // A row's scale, log-normal around 0.02, then normal values.
        let (u, v) = (next().max(1e-300), next());
        let g = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
        let scale = 0.02 * (0.5 * g).exp();
        for _ in 0..row {
            let (u, v) = (next().max(1e-300), next());
            let g = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            out.push((g * scale) as f32);
        }
    }
    out.truncate(n);
    out
}

/// float8 e4m3fn by rounding to nearest (saturating), enough for a benchmark's bytes.
fn e4m3(x: f32) -> u8 {
    let s = if x < 0.0 { 0x80 } else { 0 };
    let a = x.abs();
    if a < 2f32.powi(-10) {
        return s;
    }
    let mut e = a.log2().floor() as i32;
    if e < -6 {
        e = -6;
    }
    let mut m = (a / 2f32.powi(e) * 8.0).round() as i32;
    if m >= 16 {
        e += 1;
        m = 8;
    }
    if e > 8 {
        return s | 0x7e;
    }
    if m < 8 {
        return s | m as u8;
    }
    s | (((e + 7) as u8) << 3) | (m - 8) as u8
}

fn dtype_of(kind: &str) -> DType {
    match kind {
        "bf16" => DType::BFloat16,
        "fp16" => DType::Float16,
        "fp32" => DType::Float32,
        _ => DType::Float8E4M3FN,
    }
}

fn best(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

fn main() {
    let dir = std::path::PathBuf::from(std::env::args().nth(1).expect("usage: lossless_bench DIR"));
    std::fs::create_dir_all(&dir).unwrap();
    let w = weights(8 << 20, 4096);
    let synth: [(&str, Vec<u8>); 4] = [
        (
            "bf16",
            w.iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        (
            "fp16",
            w.iter()
                .flat_map(|&v| half::f16::from_f32(v).to_le_bytes())
                .collect(),
        ),
        (
            "fp32",
            w[..4 << 20].iter().flat_map(|v| v.to_le_bytes()).collect(),
        ),
        ("fp8", w.iter().map(|&v| e4m3(v * 64.0)).collect()),
    ];
    for (kind, bytes) in &synth {
        std::fs::write(dir.join(format!("synth.{kind}.bin")), bytes).unwrap();
    }
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    println!(
        "{:16} {:>9} {:>7} {:>7} | {:>9} {:>9} | {:>9} {:>9}",
        "file", "MiB", "pdx", "zstd-3", "enc 1t", "enc 2t", "dec 1t", "dec 2t"
    );
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let kind = name.split('.').nth(1).unwrap_or("bf16");
        let dtype = dtype_of(kind);
        let data = std::fs::read(path).unwrap();
        let gb = data.len() as f64 / 1e9;
        let stored = lossless::encode(dtype, &data, 1).expect("compressible");
        let z = zstd_safe::compress(
            &mut vec![0u8; zstd_safe::compress_bound(data.len())][..],
            &data,
            3,
        )
        .unwrap();
        let enc1 = best(3, || drop(lossless::encode(dtype, &data, 1)));
        let enc2 = best(3, || drop(lossless::encode(dtype, &data, 2)));
        let at = At {
            name: &name,
            offset: 0,
        };
        let layout = Layout::parse(&stored, dtype, data.len() as u64, at).unwrap();
        let mut out = vec![0u8; data.len()];
        let n = data.len() as u64;
        let dec1 = best(5, || {
            layout.decode_range(&stored, 0..n, &mut out, 1, at).unwrap()
        });
        let dec2 = best(5, || {
            layout.decode_range(&stored, 0..n, &mut out, 2, at).unwrap()
        });
        assert!(out == data);
        println!(
            "{name:16} {:>9.1} {:>7.4} {:>7.4} | {:>9.2} {:>9.2} | {:>9.2} {:>9.2}",
            data.len() as f64 / (1 << 20) as f64,
            data.len() as f64 / stored.len() as f64,
            data.len() as f64 / z as f64,
            gb / enc1,
            gb / enc2,
            gb / dec1,
            gb / dec2
        );
    }

    // A full load: 256 MiB of bf16 weights in 64 tensors, plain and compressed.
    let bf16 = &synth[0].1;
    let mut sizes = Vec::new();
    for (label, compression) in [
        ("plain", DataCompression::None),
        ("lossless", DataCompression::Lossless),
    ] {
        let path = dir.join(format!("load.{label}.pdx"));
        let opts = WriterOptions {
            data_compression: compression,
            sync: false,
            ..WriterOptions::default()
        };
        let t = Instant::now();
        let mut wr = Writer::create_with(&path, opts).unwrap();
        for i in 0..16 {
            wr.add(
                format!("layer{i:02}.weight"),
                Tensor::new(DType::BFloat16, &[4096, 2048], bf16),
            )
            .unwrap();
        }
        wr.finish().unwrap();
        let write = t.elapsed().as_secs_f64();
        let len = std::fs::metadata(&path).unwrap().len();
        sizes.push(len);
        let warm = best(3, || {
            let r = Reader::open(&path).unwrap();
            let all = r.load_all(&LoadOptions::default()).unwrap();
            assert_eq!(all.len(), 16);
        });
        // Cold: the file dropped from the page cache first (clean pages go; a dirty one would
        // stay, so the file is synced first).
        let cold = best(3, || {
            let f = std::fs::File::open(&path).unwrap();
            f.sync_all().unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: a plain advice call on an open descriptor.
            unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
            let t = Instant::now();
            let r = Reader::open(&path).unwrap();
            let all = r.load_all(&LoadOptions::default()).unwrap();
            assert_eq!(all.len(), 16);
            let _ = t;
        });
        println!(
            "full load {label:8}: file {:.1} MiB, write {:.3} s, load warm {:.3} s ({:.2} GB/s of data), cold {:.3} s",
            len as f64 / (1 << 20) as f64,
            write,
            warm,
            (256u64 << 20) as f64 / 1e9 / warm,
            cold
        );
    }
    println!("file ratio {:.4}", sizes[0] as f64 / sizes[1] as f64);
}
