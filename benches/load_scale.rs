//! Issue 17, items 3 and 4: parallel whole-checkpoint loads against safetensors, and a native
//! file of 10M tiny tensors (write rate and peak writer memory, open + get, verify).
//!
//! ```sh
//! cargo bench --bench load_scale                                   # both parts
//! PARAMDEX_BENCH_PARTS=loads cargo bench --bench load_scale        # loads only (also: convert)
//! PARAMDEX_BENCH_PARTS=scale PARAMDEX_BENCH_TENSORS=1000000 cargo bench --bench load_scale
//! # issue 31: load_all on 2 threads against safetensors and a plain 2-thread copy
//! PARAMDEX_BENCH_PARTS=full cargo bench --bench load_scale
//! # the 10M write alone, against other builds of this bench (issue 31):
//! PARAMDEX_BENCH_PARTS=write PARAMDEX_BENCH_BEFORE=/path/to/old/load_scale cargo bench --bench load_scale
//! ```
//!
//! Loads: a ~1.7 GiB model (float32 embedding and head, 6 layers of attention and MLP
//! matrices and norms) written once as a paramdex file and once as a safetensors file; each
//! load is open + every tensor copied into an owned buffer (paramdex: `Reader::load_all`,
//! which also checks every CRC32C; safetensors: `SafeTensors::deserialize` on the same kind
//! of read-only mmap + `data().to_vec()` of every tensor). *Warm*: the files are in the page
//! cache; *cold*: each file is dropped from the page cache (`posix_fadvise(DONTNEED)` after
//! an fsync, which needs no root and touches no other file) before each load. Medians; the
//! variants are interleaved.
//!
//! Scale: N tiny float32 tensors (`PARAMDEX_BENCH_TINY_BYTES` bytes each, default 8) named as in `benches/compare.rs`, written in a fresh
//! child process with `sync` on, whose peak resident memory (`VmHWM`) is reported; once with
//! the default `index_memory` and once with spilling off (`usize::MAX`, the writer before
//! issue 17). Then open + get of tensor N/2 in fresh processes, and `verify` on one thread.

use std::hint::black_box;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use paramdex::raw::source::Source;
use paramdex::{
    DType, LoadAdvice, LoadOptions, Reader, Tensor, VerifyOptions, Writer, WriterOptions,
};
use safetensors::SafeTensors;

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn fmt_dur(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{:.1} µs", s * 1e6)
    }
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn status_kib(field: &str) -> i64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// CPU time (user + system) of this process so far, all threads.
fn cpu_time() -> Duration {
    // SAFETY: getrusage writes the struct it is given, zero-initialised here.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage struct.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn tiny_name(i: usize) -> String {
    format!("model.layers.{i}.self_attn.q_proj.weight")
}

/// Drops `path` from the page cache (its pages must be clean: it was fsync'd).
fn drop_cache(path: &Path) -> Res<()> {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path)?;
    f.sync_all()?;
    // SAFETY: a plain system call on a file descriptor this function owns.
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(format!("posix_fadvise: {rc}").into());
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Loads
// ------------------------------------------------------------------------------------------

/// (name, shape) of the model's float32 tensors: about `mib` MiB in all.
fn model(mib: usize) -> Vec<(String, Vec<u64>)> {
    let (vocab, d, ff) = (32_000u64, 2048u64, 5504u64);
    let mut v = vec![("model.embed_tokens.weight".to_string(), vec![vocab, d])];
    let per_layer = (4 * d * d + 3 * d * ff + 2 * d) * 4;
    let fixed = 2 * vocab * d * 4;
    let layers = ((mib as u64) << 20).saturating_sub(fixed) / per_layer;
    for l in 0..layers.max(1) {
        for m in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            v.push((format!("model.layers.{l}.self_attn.{m}.weight"), vec![d, d]));
        }
        for (m, shape) in [
            ("gate_proj", vec![ff, d]),
            ("up_proj", vec![ff, d]),
            ("down_proj", vec![d, ff]),
        ] {
            v.push((format!("model.layers.{l}.mlp.{m}.weight"), shape));
        }
        v.push((format!("model.layers.{l}.input_layernorm.weight"), vec![d]));
        v.push((
            format!("model.layers.{l}.post_attention_layernorm.weight"),
            vec![d],
        ));
    }
    v.push(("lm_head.weight".to_string(), vec![vocab, d]));
    v
}

fn pdx_load(path: &Path, opts: &LoadOptions) -> Res<Duration> {
    let t0 = Instant::now();
    let r = Reader::open(path)?;
    let all = r.load_all(opts)?;
    let d = t0.elapsed();
    black_box(all.len());
    Ok(d)
}

fn st_load(path: &Path) -> Res<Duration> {
    let t0 = Instant::now();
    let src = Source::map(path)?;
    let st = SafeTensors::deserialize(&src)?;
    let all: Vec<(String, Vec<u8>)> = st
        .iter()
        .map(|(n, t)| (n.to_string(), t.data().to_vec()))
        .collect();
    let d = t0.elapsed();
    black_box(all.len());
    Ok(d)
}

/// safetensors into the caller's buffers (allocated and touched before): deserialize, then
/// `copy_from_slice` of each tensor.
fn st_load_into(path: &Path, names: &[String], bufs: &mut [Vec<u8>]) -> Res<Duration> {
    let t0 = Instant::now();
    let src = Source::map(path)?;
    let st = SafeTensors::deserialize(&src)?;
    for (n, b) in names.iter().zip(bufs.iter_mut()) {
        b.copy_from_slice(st.tensor(n)?.data());
    }
    Ok(t0.elapsed())
}

fn pdx_load_into(
    path: &Path,
    names: &[String],
    bufs: &mut [Vec<u8>],
    opts: &LoadOptions,
) -> Res<Duration> {
    let t0 = Instant::now();
    let r = Reader::open(path)?;
    let mut dst: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
    r.load_into(names, &mut dst, opts)?;
    Ok(t0.elapsed())
}

/// The model written as `model.pdx` and `model.safetensors` in `dir`: (paths, tensors,
/// data bytes, repetitions).
struct ModelFiles {
    pdx: std::path::PathBuf,
    st: std::path::PathBuf,
    tensors: Vec<(String, Vec<u64>)>,
    total: u64,
    reps: usize,
}

fn model_files(dir: &Path) -> Res<ModelFiles> {
    let mib: usize = std::env::var("PARAMDEX_BENCH_LOAD_MIB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1700);
    let reps: usize = std::env::var("PARAMDEX_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let tensors = model(mib);
    let total: u64 = tensors
        .iter()
        .map(|(_, s)| s.iter().product::<u64>() * 4)
        .sum();
    // One buffer of pseudo-random bytes as long as the largest tensor; every tensor is a
    // prefix of it (the content does not matter to a copy, only that it is not zero pages).
    let largest = tensors
        .iter()
        .map(|(_, s)| s.iter().product::<u64>() * 4)
        .max()
        .unwrap_or(0) as usize;
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..largest)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let pdx = dir.join("model.pdx");
    let st = dir.join("model.safetensors");
    let mut w = Writer::create(&pdx)?;
    for (name, shape) in &tensors {
        let n = (shape.iter().product::<u64>() * 4) as usize;
        w.add(name, Tensor::new(DType::Float32, shape, &data[..n]))?;
    }
    w.finish()?;
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(name, shape)| {
            let n = (shape.iter().product::<u64>() * 4) as usize;
            let shape: Vec<usize> = shape.iter().map(|&d| d as usize).collect();
            let v =
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape, &data[..n])
                    .expect("valid view");
            (name.clone(), v)
        })
        .collect();
    safetensors::serialize_to_file(views, None, &st)?;
    drop(data);
    std::fs::File::open(&st)?.sync_all()?;
    println!(
        "model: {} tensors, {:.2} GiB of float32 data\n",
        tensors.len(),
        total as f64 / (1u64 << 30) as f64
    );
    Ok(ModelFiles {
        pdx,
        st,
        tensors,
        total,
        reps,
    })
}

fn loads(m: &ModelFiles) -> Res<()> {
    let (pdx, st, tensors, total, reps) = (&m.pdx, &m.st, &m.tensors, m.total, m.reps);
    let variants: Vec<(String, LoadOptions)> = [1usize, 2]
        .into_iter()
        .flat_map(|threads| {
            [
                LoadAdvice::PopulateRead,
                LoadAdvice::None,
                LoadAdvice::Sequential,
                LoadAdvice::WillNeed,
            ]
            .into_iter()
            .map(move |advice| {
                (
                    format!(
                        "paramdex load_all, {threads} thread{}, {advice:?}",
                        if threads > 1 { "s" } else { "" }
                    ),
                    LoadOptions {
                        threads,
                        advice,
                        ..LoadOptions::default()
                    },
                )
            })
        })
        .collect();
    for cold in [false, true] {
        let what = if cold {
            "cold (dropped from the page cache before each load)"
        } else {
            "warm (page cache)"
        };
        let mut st_times = Vec::new();
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); variants.len()];
        let reps = if cold { reps.min(3) } else { reps };
        // One unmeasured pass of each brings a warm run's pages in.
        if !cold {
            st_load(st)?;
            pdx_load(pdx, &LoadOptions::default())?;
        }
        for _ in 0..reps {
            if cold {
                drop_cache(st)?;
            }
            st_times.push(st_load(st)?);
            for (i, (_, o)) in variants.iter().enumerate() {
                if cold {
                    drop_cache(pdx)?;
                }
                times[i].push(pdx_load(pdx, o)?);
            }
        }
        print_load_table(
            &format!("Load every tensor, {what}"),
            "safetensors deserialize + to_vec",
            st_times,
            &variants,
            &times,
            total,
        );
    }
    // Into the caller's buffers, allocated and touched once before: the copy and the checks
    // alone, without the page faults of fresh memory (which dominate the owned loads above).
    let names: Vec<String> = tensors.iter().map(|(n, _)| n.clone()).collect();
    let mut bufs: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(_, s)| vec![1u8; (s.iter().product::<u64>() * 4) as usize])
        .collect();
    let into: Vec<(String, LoadOptions)> = [1usize, 2]
        .into_iter()
        .flat_map(|threads| {
            [LoadAdvice::PopulateRead, LoadAdvice::None]
                .into_iter()
                .map(move |advice| {
                    (
                        format!("paramdex load_into, {threads} thread(s), {advice:?}"),
                        LoadOptions {
                            threads,
                            advice,
                            ..LoadOptions::default()
                        },
                    )
                })
        })
        .collect();
    st_load_into(st, &names, &mut bufs)?;
    let mut st_times = Vec::new();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); into.len()];
    for _ in 0..reps {
        st_times.push(st_load_into(st, &names, &mut bufs)?);
        for (i, (_, o)) in into.iter().enumerate() {
            times[i].push(pdx_load_into(pdx, &names, &mut bufs, o)?);
        }
    }
    drop(bufs);
    print_load_table(
        "Load every tensor into the caller's buffers (touched before), warm",
        "safetensors deserialize + copy_from_slice",
        st_times,
        &into,
        &times,
        total,
    );
    Ok(())
}

/// A plain copy of every tensor's bytes (of the safetensors file, mapped and parsed before the
/// clock starts) into new buffers on `threads` threads, each tensor split into equal parts,
/// one per thread: the reference for a load with nothing to check.
fn plain_copy(path: &Path, threads: usize) -> Res<Duration> {
    let src = Source::map(path)?;
    let st = SafeTensors::deserialize(&src)?;
    let datas: Vec<&[u8]> = st.iter().map(|(_, t)| t.data()).collect();
    let t0 = Instant::now();
    let mut out: Vec<Vec<u8>> = datas.iter().map(|d| vec![0u8; d.len()]).collect();
    std::thread::scope(|s| {
        let mut parts: Vec<Vec<(&[u8], &mut [u8])>> = (0..threads).map(|_| Vec::new()).collect();
        for (d, o) in datas.iter().zip(out.iter_mut()) {
            let per = d.len().div_ceil(threads).max(1);
            for (k, (a, b)) in d.chunks(per).zip(o.chunks_mut(per)).enumerate() {
                parts[k].push((a, b));
            }
        }
        for part in parts {
            s.spawn(move || {
                for (a, b) in part {
                    b.copy_from_slice(a);
                }
            });
        }
    });
    let d = t0.elapsed();
    black_box(out.len());
    Ok(d)
}

/// Issue 31, aim 4: every tensor into memory (checksums checked) on 2 threads, against
/// safetensors' one-thread copy loop and a plain 2-thread copy of the same bytes, warm,
/// interleaved.
fn full_loads(m: &ModelFiles) -> Res<()> {
    let opts = LoadOptions {
        threads: 2,
        advice: LoadAdvice::None,
        ..LoadOptions::default()
    };
    st_load(&m.st)?;
    pdx_load(&m.pdx, &opts)?;
    let (mut st, mut copy1, mut copy2, mut pdx1, mut pdx2) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..m.reps {
        st.push(st_load(&m.st)?);
        copy1.push(plain_copy(&m.st, 1)?);
        copy2.push(plain_copy(&m.st, 2)?);
        pdx1.push(pdx_load(
            &m.pdx,
            &LoadOptions {
                threads: 1,
                ..opts.clone()
            },
        )?);
        pdx2.push(pdx_load(&m.pdx, &opts)?);
    }
    let (st, copy1, copy2, pdx1, pdx2) = (
        median(st),
        median(copy1),
        median(copy2),
        median(pdx1),
        median(pdx2),
    );
    println!(
        "#### Every tensor into memory, warm, median of {}\n",
        m.reps
    );
    println!(
        "| load | time | GB/s | safetensors' time / this | plain 2-thread copy's time / this |"
    );
    println!("|---|---|---|---|---|");
    for (label, d) in [
        ("safetensors deserialize + to_vec, 1 thread", st),
        ("plain copy into new buffers, 1 thread", copy1),
        ("plain copy into new buffers, 2 threads", copy2),
        ("paramdex load_all (CRC32C checked), 1 thread", pdx1),
        ("paramdex load_all (CRC32C checked), 2 threads", pdx2),
    ] {
        println!(
            "| {label} | {} | {:.2} | {:.2}× | {:.0} % |",
            fmt_dur(d),
            gbps(m.total, d),
            st.as_secs_f64() / d.as_secs_f64(),
            100.0 * copy2.as_secs_f64() / d.as_secs_f64()
        );
    }
    println!();
    Ok(())
}

/// A table of load times: the safetensors row (`st_label`, 1 thread) and a row a variant
/// (`times[i]` the runs of `variants[i]`), each against safetensors and, in the second half of
/// the variants, against the same variant of the first half (1 thread).
fn print_load_table(
    title: &str,
    st_label: &str,
    st_times: Vec<Duration>,
    variants: &[(String, LoadOptions)],
    times: &[Vec<Duration>],
    total: u64,
) {
    let st_t = median(st_times);
    println!("#### {title}\n");
    println!("| load | time | GB/s | vs safetensors | vs same advice, 1 thread |");
    println!("|---|---|---|---|---|");
    println!(
        "| {st_label}, 1 thread | {} | {:.2} | 1.00× | |",
        fmt_dur(st_t),
        gbps(total, st_t)
    );
    let half = variants.len() / 2;
    for (i, (label, _)) in variants.iter().enumerate() {
        let t = median(times[i].clone());
        let one = if i >= half {
            format!(
                "{:.2}×",
                median(times[i - half].clone()).as_secs_f64() / t.as_secs_f64()
            )
        } else {
            String::new()
        };
        println!(
            "| {label} | {} | {:.2} | {:.2}× | {one} |",
            fmt_dur(t),
            gbps(total, t),
            st_t.as_secs_f64() / t.as_secs_f64()
        );
    }
    println!();
}

/// `interop::export` to a native file (what the CLI's `convert` runs) against the loop it
/// replaced: `load` of one tensor, then `Writer::add`, tensor by tensor. Page-cache writes
/// (`sync` off), so the rows compare CPU work, not the disk.
fn convert_rows(dir: &Path, pdx: &Path, st: &Path, total: u64, reps: usize) -> Res<()> {
    use paramdex::interop::{export, open_any, ExportOptions, Kind, OutputFormat, TensorData};
    let out = dir.join("converted.pdx");
    let writer = WriterOptions {
        sync: false,
        ..WriterOptions::default()
    };
    let one_by_one = |input: &Path| -> Res<Duration> {
        let t0 = Instant::now();
        let store = open_any(input)?;
        let mut w = Writer::create_with(&out, writer.clone())?;
        for info in store.scan(b"")? {
            let info = info?;
            let t = store.load(&info.name)?.ok_or("listed tensor missing")?;
            let (Kind::Numeric(dtype), TensorData::Bytes(data)) = (t.info.kind, &t.data) else {
                return Err("not numeric".into());
            };
            w.add(&t.info.name, Tensor::new(dtype, &t.info.shape, data))?;
        }
        w.finish()?;
        Ok(t0.elapsed())
    };
    let exported = |input: &Path| -> Res<Duration> {
        let t0 = Instant::now();
        let store = open_any(input)?;
        let opts = ExportOptions {
            writer: writer.clone(),
            overwrite: true,
            ..ExportOptions::default()
        };
        export(store.as_ref(), OutputFormat::Native, &out, &opts)?;
        Ok(t0.elapsed())
    };
    println!("#### Convert to a native file, warm (sync off)\n");
    println!("| input | one tensor at a time (before) | interop::export (windows loaded ahead) | speed-up |");
    println!("|---|---|---|---|");
    for (label, input) in [("paramdex", pdx), ("safetensors", st)] {
        one_by_one(input)?;
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..reps {
            a.push(one_by_one(input)?);
            b.push(exported(input)?);
        }
        let (a, b) = (median(a), median(b));
        println!(
            "| {label} | {} ({:.2} GB/s) | {} ({:.2} GB/s) | {:.2}× |",
            fmt_dur(a),
            gbps(total, a),
            fmt_dur(b),
            gbps(total, b),
            a.as_secs_f64() / b.as_secs_f64()
        );
    }
    println!();
    std::fs::remove_file(&out)?;
    Ok(())
}

// ------------------------------------------------------------------------------------------
// 10M tiny tensors
// ------------------------------------------------------------------------------------------

/// `--child write N INDEX_MEMORY PATH`: prints "ns vmhwm_kib"; `--child open PATH NAME`:
/// prints "ns".
fn child(args: &[String]) -> Res<()> {
    match args[0].as_str() {
        "write" => {
            let n: usize = args[1].parse()?;
            let index_memory: usize = args[2].parse()?;
            let path = Path::new(&args[3]);
            // Bytes of each tensor's data (float32: a multiple of 4).
            let bytes: usize = args.get(4).map_or(Ok(0), |b| b.parse())?;
            let data = vec![0x5au8; bytes / 4 * 4];
            let shape = [(bytes / 4) as u64];
            // Names are made one at a time, so the peak memory is the writer's.
            let t0 = Instant::now();
            let mut w = Writer::create_with(
                path,
                WriterOptions {
                    index_memory,
                    ..WriterOptions::default()
                },
            )?;
            let mut name = String::new();
            for i in 0..n {
                use std::fmt::Write as _;
                name.clear();
                write!(name, "model.layers.{i}.self_attn.q_proj.weight")?;
                w.add(&name, Tensor::new(DType::Float32, &shape, &data))?;
            }
            let adds = t0.elapsed();
            w.finish()?;
            let d = t0.elapsed();
            // Wall time, peak RSS, then (for the write part) the adds' wall time and the
            // process's CPU time (user + system, all threads): the CPU time does not depend on
            // how many other processes share the cores.
            println!(
                "{} {} {} {}",
                d.as_nanos(),
                status_kib("VmHWM:"),
                adds.as_nanos(),
                cpu_time().as_nanos()
            );
        }
        "open" => {
            let path = Path::new(&args[1]);
            let t0 = Instant::now();
            let r = Reader::open(path)?;
            let t = r.tensor(&args[2])?;
            black_box(t.data().as_ptr());
            println!("{}", t0.elapsed().as_nanos());
        }
        other => return Err(format!("unknown child mode {other}").into()),
    }
    Ok(())
}

fn run_child(args: &[&str]) -> Res<Vec<u64>> {
    let out = Command::new(std::env::current_exe()?)
        .arg("--child")
        .args(args)
        .output()?;
    if !out.status.success() {
        return Err(format!("child failed: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8(out.stdout)?
        .split_whitespace()
        .map(|x| x.parse())
        .collect::<std::result::Result<_, _>>()?)
}

/// Bytes of data of each tiny tensor (`PARAMDEX_BENCH_TINY_BYTES`, default 8: issue 31's
/// float32[2]; issue 17's rows were written with 0).
fn tiny_bytes() -> String {
    std::env::var("PARAMDEX_BENCH_TINY_BYTES").unwrap_or_else(|_| "8".into())
}

/// The write of N tiny tensors with default options (fsync'd), in fresh child processes:
/// this binary's and, interleaved with it, those of the binaries listed in
/// `PARAMDEX_BENCH_BEFORE` (colon-separated paths of other builds of this bench, e.g. of the
/// commit before a change), so that every writer sees the same machine.
fn write_rate(dir: &Path, reps: usize) -> Res<()> {
    let n: usize = std::env::var("PARAMDEX_BENCH_TENSORS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let bytes = tiny_bytes();
    let mut bins: Vec<(String, std::path::PathBuf)> =
        vec![("this build".into(), std::env::current_exe()?)];
    if let Ok(before) = std::env::var("PARAMDEX_BENCH_BEFORE") {
        for b in before.split(':').filter(|b| !b.is_empty()) {
            bins.push((b.to_string(), b.into()));
        }
    }
    let path = dir.join("tiny-write.pdx");
    let p = path.to_str().ok_or("non-UTF-8 temp path")?;
    let budget = paramdex::DEFAULT_INDEX_MEMORY.to_string();
    let mut times = vec![Vec::new(); bins.len()];
    let mut adds = vec![Vec::new(); bins.len()];
    let mut cpus = vec![Vec::new(); bins.len()];
    let mut peaks = vec![0u64; bins.len()];
    for _ in 0..reps {
        for (k, (_, bin)) in bins.iter().enumerate() {
            let out = Command::new(bin)
                .args(["--child", "write", &n.to_string(), &budget, p, &bytes])
                .output()?;
            if !out.status.success() {
                return Err(
                    format!("child failed: {}", String::from_utf8_lossy(&out.stderr)).into(),
                );
            }
            let f: Vec<u64> = String::from_utf8(out.stdout)?
                .split_whitespace()
                .map(|x| x.parse())
                .collect::<std::result::Result<_, _>>()?;
            times[k].push(Duration::from_nanos(f[0]));
            peaks[k] = peaks[k].max(f[1]);
            // An older build of this bench prints the first two figures only.
            adds[k].push(Duration::from_nanos(f.get(2).copied().unwrap_or(0)));
            cpus[k].push(Duration::from_nanos(f.get(3).copied().unwrap_or(0)));
            std::fs::remove_file(&path)?;
        }
    }
    println!(
        "#### Write {n} tensors of {bytes} bytes, default options (fsync'd), median of {reps}\n"
    );
    println!(
        "| writer | time (adds + finish) | M tensors/s | CPU time (all threads) | peak RSS | runs |"
    );
    println!("|---|---|---|---|---|---|");
    for (k, (label, _)) in bins.iter().enumerate() {
        let runs: Vec<String> = times[k]
            .iter()
            .map(|d| format!("{:.2}", d.as_secs_f64()))
            .collect();
        let m = median(times[k].clone());
        let a = median(adds[k].clone());
        let c = median(cpus[k].clone());
        println!(
            "| {label} | {} ({} + {}) | {:.2} | {} | {:.0} MiB | {} s |",
            fmt_dur(m),
            fmt_dur(a),
            fmt_dur(m.saturating_sub(a)),
            n as f64 / m.as_secs_f64() / 1e6,
            fmt_dur(c),
            peaks[k] as f64 / 1024.0,
            runs.join(" / ")
        );
    }
    println!();
    Ok(())
}

fn scale(dir: &Path) -> Res<()> {
    let n: usize = std::env::var("PARAMDEX_BENCH_TENSORS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    let path = dir.join("tiny.pdx");
    let p = path.to_str().ok_or("non-UTF-8 temp path")?;
    let ns = n.to_string();
    println!("#### {n} tiny tensors\n");
    println!("| measurement | result | aim |");
    println!("|---|---|---|");
    let mut rows = Vec::new();
    for (label, budget) in [
        (
            "default index_memory (64 MiB)",
            paramdex::DEFAULT_INDEX_MEMORY,
        ),
        (
            "spilling off (usize::MAX, the writer before issue 17)",
            usize::MAX,
        ),
    ] {
        let f = run_child(&["write", &ns, &budget.to_string(), p, &tiny_bytes()])?;
        let rate = n as f64 / (f[0] as f64 / 1e9);
        rows.push(format!(
            "| write, fsync'd, {label} | {:.2} M tensors/s ({:.2} s), peak RSS {:.0} MiB | ≥ 1 M/s, ≤ 512 MiB |",
            rate / 1e6,
            f[0] as f64 / 1e9,
            f[1] as f64 / 1024.0
        ));
    }
    let size = std::fs::metadata(&path)?.len();
    let mid = tiny_name(n / 2);
    let mut opens = Vec::new();
    for _ in 0..7 {
        opens.push(Duration::from_nanos(run_child(&["open", p, &mid])?[0]));
    }
    rows.push(format!(
        "| open + get, fresh process (median of 7) | {} | ≤ 300 µs |",
        fmt_dur(median(opens))
    ));
    let r = Reader::open(&path)?;
    for threads in [1usize, 2] {
        let t0 = Instant::now();
        let rep = r.verify_with(VerifyOptions {
            load: None,
            threads,
            progress: None,
        })?;
        let d = t0.elapsed();
        rows.push(format!(
            "| verify, {threads} thread{} | {:.2} M tensors/s ({}) | ≥ 1 M/s per core |",
            if threads > 1 { "s" } else { "" },
            rep.tensors as f64 / d.as_secs_f64() / 1e6,
            fmt_dur(d)
        ));
    }
    for row in rows {
        println!("{row}");
    }
    println!("\nfile: {:.2} GiB\n", size as f64 / (1u64 << 30) as f64);
    drop(r);
    std::fs::remove_file(&path)?;
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let parts =
        std::env::var("PARAMDEX_BENCH_PARTS").unwrap_or_else(|_| "loads,convert,scale".into());
    let mut model: Option<ModelFiles> = None;
    let dir = match std::env::var_os("PARAMDEX_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    println!("load average before: {}\n", loadavg());
    for part in parts.split(',') {
        match part {
            "loads" | "convert" | "full" => {
                if model.is_none() {
                    model = Some(model_files(dir.path())?);
                }
                let m = model.as_ref().expect("made above");
                if part == "loads" {
                    loads(m)?;
                } else if part == "full" {
                    full_loads(m)?;
                } else {
                    convert_rows(dir.path(), &m.pdx, &m.st, m.total, m.reps)?;
                }
            }
            "scale" => scale(dir.path())?,
            "write" => {
                let reps = std::env::var("PARAMDEX_BENCH_REPS")
                    .ok()
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(3);
                write_rate(dir.path(), reps)?
            }
            "" => {}
            other => return Err(format!("unknown part {other}").into()),
        }
    }
    println!("load average after: {}", loadavg());
    Ok(())
}
