//! Time to load every tensor of a ~2 GiB native checkpoint from a 3-node Garage cluster on
//! loopback (issue 15, BENCHMARKS.md): paramdex's parallel ranged GETs
//! (`Reader::load_all`, open included, every tensor checked against its CRC32C) against
//!
//! * one plain sequential GET of the whole object (`object_store` `get`, body collected),
//! * `object_store`'s `get_ranges` over part-size ranges (which coalesces ranges less than
//!   1 MiB apart: adjacent parts become one GET, fetched 10 at a time),
//! * `object_store` `get_range` per part, `concurrency` in flight (what a caller of
//!   object_store writes to download an object in parallel).
//!
//! Rounds are interleaved (each round runs every method once, in turn), medians reported.
//! Runs with `cargo bench --bench remote_load`; the garage binary as for the tests
//! (`tests/support/garage.rs`), else it prints SKIP. Settings from the environment:
//! `PARAMDEX_BENCH_TENSORS` (512) x `PARAMDEX_BENCH_TENSOR_MIB` (4), `PARAMDEX_BENCH_ROUNDS` (5),
//! `PARAMDEX_S3_CONCURRENCY` / `PARAMDEX_S3_PART_SIZE` (the library's defaults otherwise), and
//! `PARAMDEX_BENCH_SWEEP=1` to time paramdex over a grid of concurrency and part sizes (2
//! rounds each) instead, or `PARAMDEX_BENCH_ONLY=paramdex` to run paramdex's loads alone (for a
//! profiler).

#[allow(dead_code)]
#[path = "../tests/support/garage.rs"]
mod garage;
#[allow(dead_code)]
#[path = "../tests/support/s3.rs"]
mod s3;

use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::stream::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use paramdex::remote::{open_object_with, LoadOptions, RemoteConfig, RemoteOptions};
use paramdex::Reader;
use paramdex::{DType, Tensor, Writer, WriterOptions};

fn env_usize(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn mib_s(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / (1 << 20) as f64 / d.as_secs_f64()
}

struct Bench {
    rt: tokio::runtime::Runtime,
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    config: RemoteConfig,
    len: u64,
    data_bytes: u64,
}

impl Bench {
    fn paramdex(&self, concurrency: usize, part: u64) -> Duration {
        let t = Instant::now();
        let opts = RemoteOptions::with_config(&self.config);
        let src = open_object_with(&self.url, opts.tail_bytes, &self.config).expect("open");
        let r = Reader::from_range_read(src, opts).expect("open");
        let load = LoadOptions {
            concurrency,
            part_size: part,
            ..LoadOptions::with_config(&self.config)
        };
        let all = r.load_all(&load).expect("load_all");
        let took = t.elapsed();
        let got: u64 = all.iter().map(|(_, t)| t.data.len() as u64).sum();
        assert_eq!(got, self.data_bytes);
        took
    }

    fn plain_get(&self) -> Duration {
        let t = Instant::now();
        let b = self
            .rt
            .block_on(async { self.store.get(&self.path).await?.bytes().await })
            .expect("get");
        let took = t.elapsed();
        assert_eq!(b.len() as u64, self.len);
        took
    }

    fn ranges(&self, part: u64) -> Vec<std::ops::Range<u64>> {
        (0..self.len.div_ceil(part))
            .map(|i| i * part..((i + 1) * part).min(self.len))
            .collect()
    }

    fn get_ranges(&self, part: u64) -> Duration {
        let ranges = self.ranges(part);
        let t = Instant::now();
        let parts = self
            .rt
            .block_on(self.store.get_ranges(&self.path, &ranges))
            .expect("get_ranges");
        let took = t.elapsed();
        assert_eq!(parts.iter().map(|b| b.len() as u64).sum::<u64>(), self.len);
        took
    }

    fn get_range_parallel(&self, concurrency: usize, part: u64) -> Duration {
        let ranges = self.ranges(part);
        let t = Instant::now();
        let parts: Vec<bytes::Bytes> = self
            .rt
            .block_on(
                futures_util::stream::iter(ranges)
                    .map(|r| self.store.get_range(&self.path, r))
                    .buffered(concurrency)
                    .try_collect(),
            )
            .expect("get_range");
        let took = t.elapsed();
        assert_eq!(parts.iter().map(|b| b.len() as u64).sum::<u64>(), self.len);
        took
    }
}

fn main() {
    // `cargo bench` passes --bench; nothing else is taken.
    let Some(g) = garage::start_or_skip("benches/remote_load") else {
        return;
    };
    eprintln!("garage: cluster up in {:?}", g.startup);
    let tensors = env_usize("PARAMDEX_BENCH_TENSORS", 512);
    let tensor_len = env_usize("PARAMDEX_BENCH_TENSOR_MIB", 4) << 20;
    let rounds = env_usize("PARAMDEX_BENCH_ROUNDS", 5).max(1);

    // The checkpoint: random bytes (nothing compresses), written locally, then uploaded.
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bench.pdx");
    {
        let mut w = Writer::create_with(
            &file,
            WriterOptions {
                sync: false,
                ..Default::default()
            },
        )
        .expect("writer");
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut data = vec![0u8; tensor_len];
        for i in 0..tensors {
            for c in data.chunks_mut(8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                c.copy_from_slice(&x.to_le_bytes()[..c.len()]);
            }
            w.add(
                format!("model.layers.{i:04}.weight"),
                Tensor::new(DType::UInt8, &[tensor_len as u64], &data),
            )
            .expect("add");
        }
        w.finish().expect("finish");
    }
    let len = std::fs::metadata(&file).expect("metadata").len();
    let data_bytes = (tensors * tensor_len) as u64;

    let rt = s3::new_runtime();
    let store = s3::plain_store(&g, g.endpoint());
    let path = ObjectPath::from("bench/ckpt.pdx");
    let t = Instant::now();
    rt.block_on(async {
        let start = Instant::now();
        loop {
            // A new cluster may refuse the first writes for a moment.
            match store.put(&ObjectPath::from("ready"), "ok".into()).await {
                Ok(_) => break,
                Err(e) if start.elapsed() < Duration::from_secs(60) => {
                    eprintln!("garage not writable yet: {e}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
                Err(e) => panic!("garage not writable: {e}"),
            }
        }
        let upload = store.put_multipart(&path).await.expect("multipart");
        let mut w = WriteMultipart::new_with_chunk_size(upload, 16 << 20);
        let mut f = std::fs::File::open(&file).expect("open");
        let mut buf = vec![0u8; 16 << 20];
        loop {
            let n = f.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            w.wait_for_capacity(4).await.expect("upload");
            w.write(&buf[..n]);
        }
        w.finish().await.expect("finish upload");
    });
    eprintln!(
        "uploaded {} MiB ({tensors} tensors of {} MiB) in {:?}",
        len >> 20,
        tensor_len >> 20,
        t.elapsed()
    );
    drop(dir);

    let config = RemoteConfig {
        s3_options: vec![
            ("endpoint".into(), g.endpoint().into()),
            ("region".into(), g.region().into()),
            ("access_key_id".into(), g.access_key_id().into()),
            ("secret_access_key".into(), g.secret_access_key().into()),
            ("allow_http".into(), "true".into()),
        ],
        ..RemoteConfig::from_env().expect("PARAMDEX_S3_* settings")
    };
    let b = Bench {
        rt,
        store,
        path,
        url: format!("s3://{}/bench/ckpt.pdx", g.bucket()),
        config: config.clone(),
        len,
        data_bytes,
    };
    // Warm-up: the first reads of a new cluster are slower.
    b.plain_get();
    b.paramdex(config.concurrency, config.part_size);

    if std::env::var("PARAMDEX_BENCH_SWEEP").is_ok_and(|v| v == "1") {
        println!(
            "\nparamdex load_all of {} MiB, median of 2 (and one plain GET each round)",
            len >> 20
        );
        println!(
            "{:>11} {:>9} {:>9} {:>9} {:>9}",
            "concurrency", "part MiB", "s", "MiB/s", "plain s"
        );
        for part in [4u64 << 20, 8 << 20, 16 << 20] {
            for c in [2usize, 4, 8, 16, 32] {
                let mut p = Vec::new();
                let mut q = Vec::new();
                for _ in 0..2 {
                    p.push(b.paramdex(c, part));
                    q.push(b.plain_get());
                }
                let (mp, mq) = (median(&mut p), median(&mut q));
                println!(
                    "{c:>11} {:>9} {:>9.2} {:>9.0} {:>9.2}",
                    part >> 20,
                    mp.as_secs_f64(),
                    mib_s(data_bytes, mp),
                    mq.as_secs_f64()
                );
            }
        }
        return;
    }

    let (c, part) = (config.concurrency, config.part_size);
    if std::env::var("PARAMDEX_BENCH_ONLY").is_ok_and(|v| v == "paramdex") {
        // For profiling: paramdex's loads only.
        for round in 0..rounds {
            eprintln!("paramdex round {round}: {:?}", b.paramdex(c, part));
        }
        return;
    }
    // paramdex with half the part size and twice the requests in flight, for comparison.
    let (c2, part2) = (c * 2, (part / 2).max(4 << 10));
    let names = [
        format!("paramdex load_all ({c} x {} MiB)", part >> 20),
        format!("paramdex load_all ({c2} x {} MiB)", part2 >> 20),
        "plain GET of the object".to_string(),
        format!("object_store get_ranges ({} MiB ranges)", part >> 20),
        format!("object_store get_range x N ({c} x {} MiB)", part >> 20),
    ];
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); names.len()];
    for round in 0..rounds {
        times[0].push(b.paramdex(c, part));
        times[1].push(b.paramdex(c2, part2));
        times[2].push(b.plain_get());
        times[3].push(b.get_ranges(part));
        times[4].push(b.get_range_parallel(c, part));
        eprintln!(
            "round {round}: {:?}",
            times.iter().map(|t| t[round]).collect::<Vec<_>>()
        );
    }
    let med: Vec<Duration> = times.iter_mut().map(|t| median(t)).collect();
    let best_other = med[2..].iter().min().copied().expect("baselines");
    println!(
        "\nLoad every tensor of {} MiB ({tensors} x {} MiB), Garage 3 nodes on loopback, median of {rounds}",
        len >> 20,
        tensor_len >> 20
    );
    println!(
        "{:<48} {:>8} {:>9} {:>14}",
        "method", "s", "MiB/s", "best other / it"
    );
    for (n, d) in names.iter().zip(&med) {
        println!(
            "{n:<48} {:>8.2} {:>9.0} {:>13.0}%",
            d.as_secs_f64(),
            mib_s(len, *d),
            100.0 * best_other.as_secs_f64() / d.as_secs_f64()
        );
    }
    println!(
        "\nparamdex (defaults) reaches {:.0}% of the best other method's throughput (aim: >= 90%)",
        100.0 * best_other.as_secs_f64() / med[0].as_secs_f64()
    );
}
