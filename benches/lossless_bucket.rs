//! A full load of a file of compressed records against the same tensors stored plain, from a
//! Garage bucket behind a bandwidth-limited link (issue 40; BENCHMARKS.md, "Lossless
//! records"). Both files are written from the same synthetic bfloat16 weights (normal values
//! with a log-normal scale per row of 4,096, as `examples/lossless_bench.rs` makes them),
//! uploaded directly, then read through a TCP proxy on loopback that forwards the server's
//! bytes at `PARAMDEX_BENCH_MBPS` MB/s in all (a token bucket shared by every connection: one
//! link), with `Reader::load_all` (default `LoadOptions`: parts fetched concurrently, every
//! CRC32C checked, compressed records decoded on the load's threads). Times are medians of
//! `PARAMDEX_BENCH_REPS` rounds, the two files interleaved, each a fresh open.
//!
//! ```sh
//! cargo bench --bench lossless_bucket
//! PARAMDEX_BENCH_MIB=256 PARAMDEX_BENCH_MBPS=100 PARAMDEX_BENCH_REPS=3 cargo bench --bench lossless_bucket
//! ```
//!
//! Needs the `garage` binary (`cargo install garage --locked`; `$PARAMDEX_GARAGE`). Nothing here
//! asserts a time.

#[path = "../tests/support/garage.rs"]
#[allow(dead_code)]
mod garage;
#[allow(dead_code)]
#[path = "../tests/support/s3.rs"]
mod s3;

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;
use paramdex::remote::{ObjectRange, RangeRead, RemoteOptions};
use paramdex::{DType, DataCompression, LoadOptions, Reader, Tensor, Writer, WriterOptions};

/// A link of `rate` bytes a second shared by every connection: when the next byte may go.
struct Link {
    rate: f64,
    next: Mutex<Instant>,
}

impl Link {
    /// Waits until `n` more bytes fit the link.
    fn pass(&self, n: usize) {
        let due = {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*next).max(Instant::now());
            *next = start + Duration::from_secs_f64(n as f64 / self.rate);
            start
        };
        let now = Instant::now();
        if due > now {
            thread::sleep(due - now);
        }
    }
}

/// Copies `from` to `to`, through `link` when given, until either side closes.
fn pump(mut from: TcpStream, mut to: TcpStream, link: Option<Arc<Link>>) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(l) = &link {
            l.pass(n);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// Listens on a free loopback port, forwards each connection to `upstream`
/// (`http://host:port`), the answers through `link`; returns the proxy's endpoint.
fn throttling_proxy(upstream: &str, link: Arc<Link>) -> String {
    let up: SocketAddr = upstream
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()
        .expect("a host:port upstream");
    let listener = TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(up) else {
                continue;
            };
            let _ = (client.set_nodelay(true), server.set_nodelay(true));
            let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                (Ok(c), Ok(s)) => (c, s),
                _ => continue,
            };
            let l = link.clone();
            thread::spawn(move || pump(client, s2, None));
            thread::spawn(move || pump(server, c2, Some(l)));
        }
    });
    format!("http://{addr}")
}

/// `n` bfloat16 weights, normal with a log-normal scale per row of 4,096, as bytes.
fn bf16_weights(n: usize, seed: u64) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ seed;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut normal = || {
        let (u, v) = (next().max(1e-300), next());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    };
    let mut out = Vec::with_capacity(2 * n);
    while out.len() < 2 * n {
        let scale = 0.02 * (0.5 * normal()).exp();
        for _ in 0..4096 {
            let v = (normal() * scale) as f32;
            // Round to nearest even, as torch's bfloat16 does.
            let b = v.to_bits();
            let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
            out.extend_from_slice(&(r as u16).to_le_bytes());
        }
    }
    out.truncate(2 * n);
    out
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let env = |k: &str, d: f64| -> f64 {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let (mib, mbps, reps) = (
        env("PARAMDEX_BENCH_MIB", 128.0) as usize,
        env("PARAMDEX_BENCH_MBPS", 100.0),
        env("PARAMDEX_BENCH_REPS", 3.0) as usize,
    );
    let g = match garage::Garage::start() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("lossless_bucket: no Garage cluster ({e}); nothing measured");
            return;
        }
    };
    let rt = s3::runtime();
    let direct = s3::plain_store(&g, g.endpoint());
    let link = Arc::new(Link {
        rate: mbps * 1e6,
        next: Mutex::new(Instant::now()),
    });
    let slow = s3::plain_store(&g, &throttling_proxy(g.endpoint(), link));

    // 16 MiB tensors of bfloat16 weights, written plain and compressed.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let tensors = (mib / 16).max(1);
    let elems = 8 << 20;
    let data: Vec<Vec<u8>> = (0..tensors)
        .map(|i| bf16_weights(elems, i as u64))
        .collect();
    let mut files = Vec::new();
    for (label, compression) in [
        ("plain", DataCompression::None),
        ("lossless", DataCompression::Lossless),
    ] {
        let path = dir.path().join(format!("{label}.pdx"));
        let mut w = Writer::create_with(
            &path,
            WriterOptions {
                sync: false,
                data_compression: compression,
                ..WriterOptions::default()
            },
        )
        .expect("a writer");
        for (i, d) in data.iter().enumerate() {
            w.add(
                format!("model.layers.{i}.mlp.weight"),
                Tensor::new(DType::BFloat16, &[(elems / 4096) as u64, 4096], d),
            )
            .expect("a tensor");
        }
        w.finish().expect("the file");
        let bytes = std::fs::read(&path).expect("the file's bytes");
        let key = format!("lossless/{label}.pdx");
        s3::put(&rt, &*direct, &key, bytes.clone());
        files.push((label, key, bytes.len()));
    }
    let load = |key: &str| -> (f64, u64) {
        let url = format!("s3://{}/{key}", g.bucket());
        let t0 = Instant::now();
        let src = Arc::new(
            ObjectRange::open(
                slow.clone(),
                ObjectPath::from(key),
                url,
                rt.clone(),
                RemoteOptions::default().tail_bytes,
            )
            .expect("the object"),
        );
        let r = Reader::from_range_read(src.clone(), RemoteOptions::default()).expect("a reader");
        let all = r.load_all(&LoadOptions::default()).expect("every tensor");
        assert_eq!(all.len(), tensors);
        (t0.elapsed().as_secs_f64(), src.stats().bytes)
    };
    let mut times = vec![Vec::new(); files.len()];
    let mut fetched = vec![0u64; files.len()];
    for _ in 0..reps {
        for (k, (_, key, _)) in files.iter().enumerate() {
            let (t, b) = load(key);
            times[k].push(t);
            fetched[k] = b;
        }
    }
    println!(
        "{tensors} bfloat16 tensors of 16 MiB, a link of {mbps} MB/s, medians of {reps} interleaved loads"
    );
    println!("| file | object bytes | bytes fetched | load_all | MB/s of tensor data |");
    println!("|---|---:|---:|---:|---:|");
    let raw = (tensors * 2 * elems) as f64;
    let med: Vec<f64> = times.into_iter().map(median).collect();
    for (k, (label, _, len)) in files.iter().enumerate() {
        println!(
            "| {label} | {len} | {} | {:.3} s | {:.1} |",
            fetched[k],
            med[k],
            raw / med[k] / 1e6
        );
    }
    println!(
        "compressed / plain: {:.2}x faster",
        med[0] / med[1].max(f64::MIN_POSITIVE)
    );
}
