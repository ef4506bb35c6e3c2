//! Probe of the lookup paths of a native file (issue 17; numbers in docs/benchmarks-history.md,
//! "Hot get and cold open"): hot `get` through the hash index block against the binary searches,
//! and open + get in a fresh process.
//!
//! ```sh
//! cargo run --release --example lookup_probe -- write /tmp/p.pdx 1000000   # tiny tensors
//! cargo run --release --example lookup_probe -- hot /tmp/p.pdx 1000000    # and safetensors
//! cargo run --release --example lookup_probe -- open /tmp/p.pdx 500000     # run it a few times
//! cargo run --release --example lookup_probe -- st /tmp/p.st 1000000      # safetensors file
//! cargo run --release --example lookup_probe -- st-open /tmp/p.st 500000  # its open + get
//! ```
//!
//! Names are those of `benches/compare.rs` (`model.layers.{i}.self_attn.q_proj.weight`, empty
//! float32 tensors). `write` takes `--no-hash` and `--no-header-alone` to write the earlier
//! layout, and `--restart-interval N`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{DType, Reader, Tensor, Writer, WriterOptions};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn name(i: usize) -> String {
    format!("model.layers.{i}.self_attn.q_proj.weight")
}

/// 4096 pseudo-random names of `n`.
fn sample(n: usize) -> Vec<String> {
    sample_seeded(n, 0x2545_f491_4f6c_dd1d)
}

/// 4096 pseudo-random names of `n`, drawn with seed `x` (not 0).
fn sample_seeded(n: usize, mut x: u64) -> Vec<String> {
    (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            name((x % n as u64) as usize)
        })
        .collect()
}

/// Median per-call time over batches of `f` on a pseudo-random sample of names.
fn per_get(names: &[String], mut f: impl FnMut(&str)) -> Duration {
    for n in names {
        f(n);
    }
    let mut samples = Vec::new();
    let mut k = 0;
    while samples.len() < 400 {
        let t0 = Instant::now();
        for j in 0..256 {
            f(&names[(k + j) % names.len()]);
        }
        samples.push(t0.elapsed() / 256);
        k += 256;
    }
    samples.sort_unstable();
    samples[samples.len() / 2]
}

/// One way of getting a tensor by name, timed by `hot`.
type Get<'a> = Box<dyn FnMut(&str) + 'a>;

/// A safetensors file of the same names (empty float32 tensors), in memory.
fn st_bytes(n: usize) -> Res<Vec<u8>> {
    let names: Vec<String> = (0..n).map(name).collect();
    let views = names
        .iter()
        .map(|s| {
            let v = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![0], &[])?;
            Ok((s.as_str(), v))
        })
        .collect::<Res<Vec<_>>>()?;
    Ok(safetensors::serialize(views, None)?)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| -> Res<&str> {
        args.get(i)
            .map(String::as_str)
            .ok_or_else(|| "usage: lookup_probe write|hot|open PATH N".into())
    };
    let (cmd, path, n): (&str, &str, usize) = (arg(0)?, arg(1)?, arg(2)?.parse()?);
    match cmd {
        "write" => {
            let restart_interval = match args.iter().position(|a| a == "--restart-interval") {
                Some(i) => arg(i + 1)?.parse()?,
                None => WriterOptions::default().restart_interval,
            };
            let opts = WriterOptions {
                sync: false,
                hash_index: !args.iter().any(|a| a == "--no-hash"),
                header_alone: !args.iter().any(|a| a == "--no-header-alone"),
                restart_interval,
                ..WriterOptions::default()
            };
            let t0 = Instant::now();
            let mut w = Writer::create_with(path, opts)?;
            for i in 0..n {
                w.add(name(i), Tensor::new(DType::Float32, &[0], &[]))?;
            }
            let st = w.finish()?;
            println!("wrote {n} tensors in {:?}: {st:?}", t0.elapsed());
        }
        "hot-table" => {
            // Table::get through the hash index only, for a profiler.
            let sample = sample(n);
            let r = Reader::open(path)?;
            let t = Table::open(r.as_bytes().expect("mapped"), TableReadOptions::default())?;
            let mut best = Duration::MAX;
            for _ in 0..10 {
                best = best.min(per_get(&sample, |s| {
                    black_box(t.get(s.as_bytes(), |v, _| v.len()).unwrap().unwrap());
                }));
            }
            println!("Table::get {best:?}");
        }
        "hot-reader" => {
            // Reader::get only, for a profiler.
            let sample = sample(n);
            let r = Reader::open(path)?;
            let mut best = Duration::MAX;
            for _ in 0..10 {
                best = best.min(per_get(&sample, |s| {
                    black_box(r.get(s).unwrap().unwrap().data());
                }));
            }
            println!("Reader::get {best:?}");
        }
        "hot" => {
            // Reader::get, Table::get (hash block), Table::get_by_search and safetensors'
            // `tensor()`, their batches interleaved so that all four see the same load; each on
            // its own 4096 random names (on the same names, each would find the lines the one
            // before it just fetched in the CPU caches).
            let samples: Vec<Vec<String>> = (1..=4u64)
                .map(|i| sample_seeded(n, 0x2545_f491_4f6c_dd1d ^ (i << 40)))
                .collect();
            let r = Reader::open(path)?;
            let t = Table::open(r.as_bytes().expect("mapped"), TableReadOptions::default())?;
            println!("hash index block: {}", t.has_hash_index()?);
            let st_bytes = st_bytes(n)?;
            let st = safetensors::SafeTensors::deserialize(&st_bytes)?;
            let mut gets: [(&str, Get<'_>); 4] = [
                (
                    "Reader::get",
                    Box::new(|s: &str| {
                        black_box(r.get(s).unwrap().unwrap().data());
                    }),
                ),
                (
                    "Table::get",
                    Box::new(|s: &str| {
                        black_box(t.get(s.as_bytes(), |v, _| v.len()).unwrap().unwrap());
                    }),
                ),
                (
                    "Table::get_by_search",
                    Box::new(|s: &str| {
                        black_box(
                            t.get_by_search(s.as_bytes(), |v, _| v.len())
                                .unwrap()
                                .unwrap(),
                        );
                    }),
                ),
                (
                    "safetensors tensor()",
                    Box::new(|s: &str| {
                        black_box(st.tensor(s).unwrap().data());
                    }),
                ),
            ];
            let mut times = vec![Vec::new(); gets.len()];
            for ((_, g), names) in gets.iter_mut().zip(&samples) {
                for s in names {
                    g(s);
                }
            }
            let mut k = 0;
            for _ in 0..400 {
                for (((_, g), out), names) in gets.iter_mut().zip(times.iter_mut()).zip(&samples) {
                    let t0 = Instant::now();
                    for j in 0..256 {
                        g(&names[(k + j) % names.len()]);
                    }
                    out.push(t0.elapsed() / 256);
                }
                k += 256;
            }
            let med = |v: &mut Vec<Duration>| {
                v.sort_unstable();
                v[v.len() / 2]
            };
            let st_med = med(&mut times[3]);
            for ((label, _), v) in gets.iter().zip(times.iter_mut()) {
                let m = med(v);
                println!(
                    "{label}: {m:?} per get (safetensors / this: {:.2})",
                    st_med.as_secs_f64() / m.as_secs_f64()
                );
            }
        }
        "open-loop" => {
            // Open + get 200 times in this process: the page cache and the code are warm, each
            // open maps the file anew.
            let mut v: Vec<(Duration, Duration)> = (0..200)
                .map(|_| {
                    let t0 = Instant::now();
                    let r = Reader::open(path).unwrap();
                    let t1 = t0.elapsed();
                    black_box(r.tensor(name(n)).unwrap().data().as_ptr());
                    (t1, t0.elapsed())
                })
                .collect();
            v.sort_unstable_by_key(|x| x.1);
            println!("median open {:?}, open + get {:?}", v[100].0, v[100].1);
        }
        "open" => {
            let t0 = Instant::now();
            let r = Reader::open(path)?;
            let t1 = t0.elapsed();
            let v = r.tensor(name(n))?;
            black_box(v.data().as_ptr());
            let t2 = t0.elapsed();
            println!("open {t1:?}, open + get {t2:?}");
        }
        "st-open" => {
            // safetensors' open + get in a fresh process, on a file written by `st` (the same
            // read-only mmap paramdex uses; its whole JSON header parsed).
            let t0 = Instant::now();
            let src = paramdex::raw::source::Source::map(std::path::Path::new(path))?;
            let st = safetensors::SafeTensors::deserialize(&src)?;
            let v = st.tensor(&name(n))?;
            black_box(v.data().as_ptr());
            println!("open + get {:?}", t0.elapsed());
        }
        "st" => {
            // The same names in a safetensors file, and its hot get (a hash map lookup).
            std::fs::write(path, st_bytes(n)?)?;
            let bytes = std::fs::read(path)?;
            let st = safetensors::SafeTensors::deserialize(&bytes)?;
            let sample = sample(n);
            let hot = per_get(&sample, |s| {
                black_box(st.tensor(s).unwrap().data());
            });
            println!("safetensors hot get {hot:?}");
        }
        other => return Err(format!("unknown command {other}").into()),
    }
    Ok(())
}
