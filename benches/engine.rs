//! Criterion benchmarks of the engine: block seek, get (hot and cold block), iteration,
//! writing small and large tensors, verify, snappy on and off, and sweeps of the index block
//! size and restart interval (the data behind the defaults in SPEC.md section 10).
//!
//! ```sh
//! cargo bench --bench engine                    # everything (about 5 minutes)
//! PARAMDEX_BENCH_GROUPS=sweep_block_size,sweep_restart cargo bench --bench engine
//! ```
//!
//! Groups: `block_seek`, `get`, `iter`, `write`, `verify`, `snappy`, `sweep_block_size`,
//! `sweep_restart`, `paddle_merged` (counter access to the k-th tensor of Paddle's size-prefixed
//! merged file against walking a plain `.pdiparams` to the same record).
//!
//! Besides criterion's timings, the sweeps print each configuration's index size (bytes per
//! tensor, data blocks, index block bytes) to stderr. `PARAMDEX_BENCH_TENSORS` sets the number
//! of tiny tensors in the sweep files (default 1000000).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use paramdex::interop::paddle::{merged, open_merged};
use paramdex::interop::{export, open_any, ExportOptions, OutputFormat};
use paramdex::raw::record::{decode_record, walk};
use paramdex::raw::table::{Block, BlockBuilder, Table, TableReadOptions};
use paramdex::{Compression, DType, ReadOptions, Reader, Tensor, Writer, WriterOptions};

fn tiny_name(i: usize) -> String {
    format!("model.layers.{i}.self_attn.q_proj.weight")
}

fn sweep_tensors() -> usize {
    std::env::var("PARAMDEX_BENCH_TENSORS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000)
}

/// Writes `n` tiny float32 tensors of 4 elements (sync off: setup speed only).
fn write_tiny(path: &Path, n: usize, mut opts: WriterOptions) -> PathBuf {
    opts.sync = false;
    let mut w = Writer::create_with(path, opts).unwrap();
    for i in 0..n {
        let x = i as f32;
        let data: Vec<u8> = [x, x + 1.0, x + 2.0, x + 3.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        w.add(tiny_name(i), Tensor::new(DType::Float32, &[4], &data))
            .unwrap();
    }
    w.finish().unwrap();
    path.to_path_buf()
}

/// Pseudo-random names of existing tensors.
fn sample_names(n: usize, k: usize) -> Vec<String> {
    let mut s = 0x2545_f491_4f6c_dd1du64;
    (0..k)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            tiny_name((s % n as u64) as usize)
        })
        .collect()
}

/// Whether a group runs: all by default, or those listed in `PARAMDEX_BENCH_GROUPS`
/// (comma-separated), which also skips the other groups' setup (criterion's own filter
/// argument does not).
fn enabled(group: &str) -> bool {
    match std::env::var("PARAMDEX_BENCH_GROUPS") {
        Ok(list) => list.split(',').any(|g| g.trim() == group),
        Err(_) => true,
    }
}

/// Hot get (every block already loaded), cold get (a fresh reader: open + first touch of the
/// block, including its CRC check), open alone, and a miss.
fn bench_get(c: &mut Criterion, dir: &Path) {
    let n = 100_000;
    let path = write_tiny(&dir.join("get.pdx"), n, WriterOptions::default());
    let names = sample_names(n, 4096);
    let r = Reader::open(&path).unwrap();
    for name in &names {
        r.get(name).unwrap().unwrap();
    }
    let mut g = c.benchmark_group("get");
    let mut k = 0usize;
    g.bench_function("hot", |b| {
        b.iter(|| {
            k = (k + 1) % names.len();
            black_box(r.get(&names[k]).unwrap().unwrap().data());
        })
    });
    g.bench_function("miss", |b| {
        b.iter(|| black_box(r.get("model.layers.5.self_attn.q_proj.weightz").unwrap()))
    });
    g.bench_function("open", |b| {
        b.iter(|| black_box(Reader::open(&path).unwrap()))
    });
    g.bench_function("open_cold_get", |b| {
        b.iter(|| {
            k = (k + 1) % names.len();
            let r = Reader::open(&path).unwrap();
            black_box(r.get(&names[k]).unwrap().unwrap().data()[0]);
        })
    });
    g.finish();
}

/// Seek inside one 64 KiB block, by restart interval.
fn bench_block_seek(c: &mut Criterion) {
    let mut g = c.benchmark_group("block_seek");
    for ri in [1usize, 4, 16, 64] {
        let mut bb = BlockBuilder::new(ri);
        let mut keys = Vec::new();
        // Six-digit numbers: numeric order is bytewise order, so keys arrive sorted.
        while bb.size_estimate() < 64 << 10 {
            let k = tiny_name(100_000 + keys.len());
            bb.add(
                k.as_bytes(),
                &[0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x04],
            );
            keys.push(k);
        }
        let bytes = bb.finish().to_vec();
        let block = Block::parse(&bytes, 0).unwrap();
        let mut k = 0usize;
        g.bench_function(format!("restart_{ri}"), |b| {
            b.iter(|| {
                k = (k + 7919) % keys.len();
                let mut it = block.iter();
                it.seek(keys[k].as_bytes()).unwrap();
                black_box(it.value());
            })
        });
    }
    g.finish();
}

fn bench_iter(c: &mut Criterion, dir: &Path) {
    let n = 100_000;
    let path = write_tiny(&dir.join("iter.pdx"), n, WriterOptions::default());
    let r = Reader::open(&path).unwrap();
    let mut g = c.benchmark_group("iter");
    g.throughput(Throughput::Elements(n as u64));
    g.bench_function("all_100k", |b| {
        b.iter(|| {
            let mut count = 0;
            for t in r.iter() {
                black_box(t.unwrap().data());
                count += 1;
            }
            assert_eq!(count, n);
        })
    });
    g.finish();
}

fn bench_write(c: &mut Criterion, dir: &Path) {
    let mut g = c.benchmark_group("write");
    let n = 100_000;
    let names: Vec<String> = (0..n).map(tiny_name).collect();
    let data = vec![0u8; 16];
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    for sync in [false, true] {
        g.bench_function(format!("small_100k_sync_{sync}"), |b| {
            b.iter(|| {
                let p = dir.join("small.pdx");
                let mut w = Writer::create_with(
                    &p,
                    WriterOptions {
                        sync,
                        ..WriterOptions::default()
                    },
                )
                .unwrap();
                for name in &names {
                    w.add(name, Tensor::new(DType::Float32, &[4], &data))
                        .unwrap();
                }
                w.finish().unwrap();
                std::fs::remove_file(&p).unwrap();
            })
        });
    }
    let large: Vec<u8> = (0..(256usize << 20)).map(|i| (i % 253) as u8).collect();
    g.throughput(Throughput::Bytes(large.len() as u64));
    for sync in [false, true] {
        g.bench_function(format!("large_4x64MiB_sync_{sync}"), |b| {
            b.iter(|| {
                let p = dir.join("large.pdx");
                let mut w = Writer::create_with(
                    &p,
                    WriterOptions {
                        sync,
                        ..WriterOptions::default()
                    },
                )
                .unwrap();
                for (i, chunk) in large.chunks(64 << 20).enumerate() {
                    w.add(
                        format!("w{i}"),
                        Tensor::new(DType::UInt8, &[chunk.len() as u64], chunk),
                    )
                    .unwrap();
                }
                w.finish().unwrap();
                std::fs::remove_file(&p).unwrap();
            })
        });
    }
    g.finish();
}

fn bench_verify(c: &mut Criterion, dir: &Path) {
    let p = dir.join("verify.pdx");
    let large: Vec<u8> = (0..(256usize << 20)).map(|i| (i % 251) as u8).collect();
    let mut w = Writer::create_with(
        &p,
        WriterOptions {
            sync: false,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    for (i, chunk) in large.chunks(64 << 20).enumerate() {
        w.add(
            format!("w{i}"),
            Tensor::new(DType::UInt8, &[chunk.len() as u64], chunk),
        )
        .unwrap();
    }
    w.finish().unwrap();
    drop(large);
    let r = Reader::open(&p).unwrap();
    r.verify().unwrap(); // faults the mapping in
    let mut g = c.benchmark_group("verify");
    g.throughput(Throughput::Bytes(256 << 20));
    g.sample_size(10);
    let views: Vec<_> = r.iter().map(|v| v.unwrap()).collect();
    g.bench_function("bare_crc32c_1core", |b| {
        b.iter(|| {
            for v in &views {
                black_box(paramdex::raw::format::crc32c(v.data()));
            }
        })
    });
    for threads in [1, 2] {
        g.bench_function(format!("4x64MiB_threads_{threads}"), |b| {
            b.iter(|| {
                black_box(
                    r.verify_with(paramdex::VerifyOptions {
                        load: None,
                        threads,
                        progress: None,
                    })
                    .unwrap(),
                )
            })
        });
    }
    let tiny = write_tiny(
        &dir.join("verify_tiny.pdx"),
        100_000,
        WriterOptions::default(),
    );
    let rt = Reader::open(&tiny).unwrap();
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("tiny_100k_threads_1", |b| {
        b.iter(|| {
            black_box(
                rt.verify_with(paramdex::VerifyOptions {
                    load: None,
                    threads: 1,
                    progress: None,
                })
                .unwrap(),
            )
        })
    });
    g.finish();
    drop(views);
    std::fs::remove_file(&p).unwrap();
}

/// Index geometry of a file: (index bytes per tensor, data blocks, index block bytes).
fn geometry(r: &Reader, n: usize) -> (f64, usize, u64) {
    let t = Table::open(r.as_bytes().expect("mapped"), TableReadOptions::default()).unwrap();
    (
        r.index_len() as f64 / n as f64,
        r.data_blocks(),
        t.footer().index.size,
    )
}

/// Open + cold get, and hot get, of one configuration.
fn bench_config(c: &mut Criterion, group: &str, id: &str, path: &Path, n: usize, ro: ReadOptions) {
    let names = sample_names(n, 4096);
    let r = Reader::open_with(path, ro.clone()).unwrap();
    let (bpt, blocks, ib) = geometry(&r, n);
    eprintln!(
        "[{group}/{id}] {n} tensors: {bpt:.1} index bytes/tensor, {blocks} data blocks, index block {ib} bytes"
    );
    for name in &names {
        r.get(name).unwrap().unwrap();
    }
    let mut g = c.benchmark_group(group);
    let mut k = 0usize;
    g.bench_function(format!("{id}/hot_get"), |b| {
        b.iter(|| {
            k = (k + 1) % names.len();
            black_box(r.get(&names[k]).unwrap().unwrap().data());
        })
    });
    g.bench_function(format!("{id}/open"), |b| {
        b.iter(|| black_box(Reader::open_with(path, ro.clone()).unwrap()))
    });
    g.bench_function(format!("{id}/open_cold_get"), |b| {
        b.iter_batched(
            || {
                k = (k + 1) % names.len();
                &names[k]
            },
            |name| {
                let r = Reader::open_with(path, ro.clone()).unwrap();
                black_box(r.get(name).unwrap().unwrap().data()[0]);
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn bench_snappy(c: &mut Criterion, dir: &Path) {
    let n = sweep_tensors();
    for (id, compression) in [("none", Compression::None), ("snappy", Compression::Snappy)] {
        let p = dir.join(format!("snappy-{id}.pdx"));
        write_tiny(
            &p,
            n,
            WriterOptions {
                compression,
                ..WriterOptions::default()
            },
        );
        bench_config(c, "snappy", id, &p, n, ReadOptions::default());
        std::fs::remove_file(&p).unwrap();
    }
}

fn bench_sweep_block_size(c: &mut Criterion, dir: &Path) {
    let n = sweep_tensors();
    for kib in [4usize, 16, 32, 64, 128, 256, 1024] {
        let p = dir.join(format!("bs-{kib}.pdx"));
        write_tiny(
            &p,
            n,
            WriterOptions {
                block_size: kib << 10,
                ..WriterOptions::default()
            },
        );
        bench_config(
            c,
            "sweep_block_size",
            &format!("{kib}KiB"),
            &p,
            n,
            ReadOptions::default(),
        );
        std::fs::remove_file(&p).unwrap();
    }
}

fn bench_sweep_restart(c: &mut Criterion, dir: &Path) {
    let n = sweep_tensors();
    for ri in [4usize, 8, 16, 32, 64] {
        let p = dir.join(format!("ri-{ri}.pdx"));
        write_tiny(
            &p,
            n,
            WriterOptions {
                restart_interval: ri,
                ..WriterOptions::default()
            },
        );
        bench_config(
            c,
            "sweep_restart",
            &format!("ri{ri}"),
            &p,
            n,
            ReadOptions::default(),
        );
        std::fs::remove_file(&p).unwrap();
    }
}

/// Time to the k-th tensor (k = 1 and 10,000, from 0) of 10,001 tiny tensors, by counter:
///
/// - `pdiparams_walk`: a plain combined `.pdiparams` (what Paddle's `save_combine` writes),
///   walked record by record (each header decoded) to record k, as a reader of that format must;
/// - `merged_hop`: the merged file, hopping k size fields from the start (no table, no other
///   record decoded), then decoding record k;
/// - `merged_open_record`: `open_merged` (hops every size field to build the offsets table,
///   decodes record 0) then `record(k)`: the cost of a cold counter access through the store;
/// - `merged_record`: `record(k)` on an open store (table lookup, one record decoded).
///
/// Both files hold the same records (written by `export`); the merged file has no program
/// beside it (its names are `#k`), so that opening it is the size fields' cost alone.
fn bench_paddle_merged(c: &mut Criterion, dir: &Path) {
    let n = 10_001;
    let native = write_tiny(&dir.join("merged-src.pdx"), n, WriterOptions::default());
    let src = Reader::open(&native).unwrap();
    let combined = dir.join("plain");
    export(
        &src,
        OutputFormat::PaddleCombined,
        &combined,
        &ExportOptions::default(),
    )
    .unwrap();
    let merged_path = dir.join("m.merged");
    export(
        &src,
        OutputFormat::PaddleMerged,
        &merged_path,
        &ExportOptions::default(),
    )
    .unwrap();
    std::fs::remove_file(dir.join("m.pdmodel")).unwrap();
    let plain = std::fs::read(dir.join("plain.pdiparams")).unwrap();
    let buf = std::fs::read(&merged_path).unwrap();
    let store = open_merged(&merged_path).unwrap();
    assert_eq!(store.record_count(), n);
    assert_eq!(open_any(&merged_path).unwrap().list().unwrap().len(), n);

    let mut g = c.benchmark_group("paddle_merged");
    for k in [1usize, 10_000] {
        g.bench_function(format!("pdiparams_walk/k={k}"), |b| {
            b.iter(|| {
                let (off, h, _) = walk(&plain, 0).nth(black_box(k)).unwrap().unwrap();
                black_box((off, h.data_len))
            })
        });
        g.bench_function(format!("merged_hop/k={k}"), |b| {
            b.iter(|| {
                let r = merged::hop(&buf, black_box(k as u64), &merged_path)
                    .unwrap()
                    .unwrap();
                let (h, _) = decode_record(&buf[r.offset as usize..], r.offset).unwrap();
                black_box(h.data_len)
            })
        });
        g.bench_function(format!("merged_open_record/k={k}"), |b| {
            b.iter(|| {
                let s = open_merged(&merged_path).unwrap();
                let t = s.record(black_box(k)).unwrap().unwrap();
                black_box(t.info.nbytes)
            })
        });
        g.bench_function(format!("merged_record/k={k}"), |b| {
            b.iter(|| black_box(store.record(black_box(k)).unwrap().unwrap().info.nbytes))
        });
    }
    g.finish();
}

fn benches(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    if enabled("block_seek") {
        bench_block_seek(c);
    }
    if enabled("get") {
        bench_get(c, d);
    }
    if enabled("iter") {
        bench_iter(c, d);
    }
    if enabled("write") {
        bench_write(c, d);
    }
    if enabled("verify") {
        bench_verify(c, d);
    }
    if enabled("snappy") {
        bench_snappy(c, d);
    }
    if enabled("sweep_block_size") {
        bench_sweep_block_size(c, d);
    }
    if enabled("sweep_restart") {
        bench_sweep_restart(c, d);
    }
    if enabled("paddle_merged") {
        bench_paddle_merged(c, d);
    }
}

criterion_group! {
    name = engine;
    config = Criterion::default()
        .sample_size(30)
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(engine);
