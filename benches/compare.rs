//! Side-by-side comparison of paramdex with the `safetensors` crate, and with the machine's own
//! limits (a plain sequential write, a bare CRC32C pass), in one run.
//!
//! ```sh
//! cargo bench --bench compare                 # the full run (a few minutes)
//! cargo bench --bench compare -- --quick      # up to 100k tensors, 256 MiB write
//! ```
//!
//! Options: `--max-tensors N` (largest tiny-tensor file, default 1000000), `--write-mib M`
//! (size of the large-tensor write, default 1024), `--dir DIR` (scratch directory, default a
//! temporary directory under the system temp dir; every file is deleted afterwards), `--plot
//! PATH` (SVG plot of open + get time against tensor count, default `docs/open_get.svg`),
//! `--no-plot`.
//!
//! Every figure is a median of several runs taken in the same process, the two libraries
//! interleaved, so that a noisy shared machine affects both alike. Resident memory is measured
//! in a fresh child process (this same binary, `--child ...`) so that the baseline is clean.

use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use paramdex::raw::source::Source;
use paramdex::{DType, Reader, Tensor, Writer, WriterOptions};
use safetensors::tensor::TensorView as StView;
use safetensors::{Dtype as StDtype, SafeTensors};

type Res<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// Elements per tiny tensor (float32). Zero, as in the figures of the issue this harness
/// answers (a 94.5 MB safetensors header at 1M tensors): with even one element per tensor, the
/// JSON header of 1M such names exceeds safetensors' 100 MB cap and it refuses to write the
/// file, leaving nothing to compare. The index size of non-empty tensors is reported too.
const TINY_ELEMS: usize = 0;

fn tiny_name(i: usize) -> String {
    format!("model.layers.{i}.self_attn.q_proj.weight")
}

/// Median of a set of durations.
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

fn fmt_dur(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.1} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

fn fmt_count(n: usize) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

fn gbps(bytes: u64, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

fn mib(kib: i64) -> String {
    format!("{:.2} MiB", kib as f64 / 1024.0)
}

/// Resident set size of this process in KiB (`VmRSS` from /proc/self/status; 0 elsewhere).
fn rss_kib() -> i64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The first three fields of /proc/loadavg (empty elsewhere).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// A deterministic pseudo-random sequence (no extra dependency).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

// ------------------------------------------------------------------------------------------
// Writing the tiny-tensor files
// ------------------------------------------------------------------------------------------

fn tiny_data(n: usize, elems: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n * elems * 4);
    for i in 0..n * elems {
        v.extend_from_slice(&(i as f32).to_le_bytes());
    }
    v
}

fn write_pdx_tiny(path: &Path, names: &[String], data: &[u8], elems: usize) -> Res<Duration> {
    let t0 = Instant::now();
    let mut w = Writer::create(path)?;
    let shape = [elems as u64];
    for (i, name) in names.iter().enumerate() {
        let d = &data[i * elems * 4..(i + 1) * elems * 4];
        w.add(name, Tensor::new(DType::Float32, &shape, d))?;
    }
    w.finish()?;
    Ok(t0.elapsed())
}

fn write_st_tiny(path: &Path, names: &[String], data: &[u8]) -> Res<Duration> {
    let t0 = Instant::now();
    let mut views = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let d = &data[i * TINY_ELEMS * 4..(i + 1) * TINY_ELEMS * 4];
        views.push((
            name.as_str(),
            StView::new(StDtype::F32, vec![TINY_ELEMS], d)?,
        ));
    }
    safetensors::serialize_to_file(views, None, path)?;
    Ok(t0.elapsed())
}

// ------------------------------------------------------------------------------------------
// Open + get, in process and in a fresh child
// ------------------------------------------------------------------------------------------

fn pdx_open_get(path: &Path, name: &str) -> Res<Duration> {
    let t0 = Instant::now();
    let r = Reader::open(path)?;
    let t = r.tensor(name)?;
    black_box(t.data().as_ptr());
    let d = t0.elapsed();
    drop(r);
    Ok(d)
}

fn st_open_get(path: &Path, name: &str) -> Res<Duration> {
    let t0 = Instant::now();
    // The same read-only mmap paramdex uses, so both libraries start from the same bytes.
    let src = Source::map(path)?;
    let st = SafeTensors::deserialize(&src)?;
    let t = st.tensor(name)?;
    black_box(t.data().as_ptr());
    let d = t0.elapsed();
    drop(st);
    drop(src);
    Ok(d)
}

/// `--child pdx|st PATH NAME`: opens, gets one tensor, prints "rss_before rss_after ns".
fn child(args: &[String]) -> Res<()> {
    let (lib, path, name) = (&args[0], Path::new(&args[1]), &args[2]);
    let before = rss_kib();
    let t0 = Instant::now();
    let after;
    if lib == "pdx" {
        let r = Reader::open(path)?;
        let t = r.tensor(name)?;
        black_box(t.data().as_ptr());
        let d = t0.elapsed();
        after = rss_kib();
        println!("{before} {after} {}", d.as_nanos());
        drop(r);
    } else {
        let src = Source::map(path)?;
        let st = SafeTensors::deserialize(&src)?;
        let t = st.tensor(name)?;
        black_box(t.data().as_ptr());
        let d = t0.elapsed();
        after = rss_kib();
        println!("{before} {after} {}", d.as_nanos());
        drop(st);
    }
    Ok(())
}

/// Runs the child; returns (RSS growth in KiB, open + get time in a fresh process).
fn run_child(lib: &str, path: &Path, name: &str) -> Res<(i64, Duration)> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe)
        .arg("--child")
        .arg(lib)
        .arg(path)
        .arg(name)
        .output()?;
    if !out.status.success() {
        return Err(format!(
            "child {lib} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let s = String::from_utf8(out.stdout)?;
    let f: Vec<i64> = s
        .split_whitespace()
        .map(|x| x.parse())
        .collect::<std::result::Result<_, _>>()?;
    Ok((f[1] - f[0], Duration::from_nanos(f[2] as u64)))
}

/// Median per-get time over batches of random gets on an open file (every block warmed first).
fn hot_gets<F: FnMut(&str)>(names: &[String], mut get: F) -> Duration {
    const BATCH: usize = 256;
    for n in names {
        get(n);
    }
    let mut samples = Vec::new();
    let t_end = Instant::now() + Duration::from_millis(400);
    let mut k = 0;
    while samples.len() < 50 || (Instant::now() < t_end && samples.len() < 2000) {
        let t0 = Instant::now();
        for j in 0..BATCH {
            get(&names[(k + j) % names.len()]);
        }
        samples.push(t0.elapsed() / BATCH as u32);
        k += BATCH;
    }
    median(samples)
}

struct TinyRow {
    n: usize,
    pdx_open_get: Duration,
    st_open_get: Duration,
    pdx_open_get_warm: Duration,
    st_open_get_warm: Duration,
    pdx_child: (i64, Duration),
    st_child: (i64, Duration),
    pdx_get: Duration,
    st_get: Duration,
    pdx_write: Duration,
    st_write: Duration,
    pdx_index_bytes: u64,
    pdx4_index_bytes: u64,
    st_header_bytes: u64,
    pdx_verify: Duration,
}

fn tiny_round(dir: &Path, n: usize) -> Res<TinyRow> {
    let names: Vec<String> = (0..n).map(tiny_name).collect();
    let data = tiny_data(n, TINY_ELEMS);
    let pdx = dir.join(format!("tiny-{n}.pdx"));
    let st = dir.join(format!("tiny-{n}.safetensors"));
    let pdx_write = write_pdx_tiny(&pdx, &names, &data, TINY_ELEMS)?;
    let st_write = write_st_tiny(&st, &names, &data)?;
    drop(data);
    // The index of the same names with 4 float32 elements each (safetensors cannot hold 1M
    // of those; see TINY_ELEMS).
    let pdx4 = dir.join(format!("tiny4-{n}.pdx"));
    write_pdx_tiny(&pdx4, &names, &tiny_data(n, 4), 4)?;
    let pdx4_index_bytes = Reader::open(&pdx4)?.index_len();
    std::fs::remove_file(&pdx4)?;

    // One tensor in the middle of the name order for open + get.
    let target = tiny_name(n / 2);
    let reps = if n >= 1_000_000 { 5 } else { 15 };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    pdx_open_get(&pdx, &target)?; // warm-up (page cache, code)
    st_open_get(&st, &target)?;
    // Interleaved: each open follows the other library's, as a first open in a process that
    // did other work would (CPU caches cold, page cache warm).
    for _ in 0..reps {
        a.push(pdx_open_get(&pdx, &target)?);
        b.push(st_open_get(&st, &target)?);
    }
    // Back to back: the same file opened again and again (CPU caches warm).
    let pdx_open_get_warm = median(
        (0..reps * 4)
            .map(|_| pdx_open_get(&pdx, &target))
            .collect::<Res<Vec<_>>>()?,
    );
    let st_open_get_warm = median(
        (0..reps)
            .map(|_| st_open_get(&st, &target))
            .collect::<Res<Vec<_>>>()?,
    );
    let pdx_child = run_child("pdx", &pdx, &target)?;
    let st_child = run_child("st", &st, &target)?;

    // Hot gets: 4096 random names, every block touched first.
    let mut rng = Lcg(n as u64);
    let sample: Vec<String> = (0..4096)
        .map(|_| tiny_name(rng.next() as usize % n))
        .collect();
    let r = Reader::open(&pdx)?;
    let pdx_get = hot_gets(&sample, |name| {
        let t = r.get(name).unwrap().unwrap();
        black_box(t.data());
    });
    let pdx_index_bytes = r.index_len();
    let t0 = Instant::now();
    let report = r.verify_with(paramdex::VerifyOptions {
        load: None,
        threads: 1,
        progress: None,
    })?;
    let pdx_verify = t0.elapsed();
    assert_eq!(report.tensors, n as u64);
    drop(r);
    let src = Source::map(&st)?;
    let st_header_bytes = 8 + u64::from_le_bytes(src[..8].try_into()?);
    let sts = SafeTensors::deserialize(&src)?;
    let st_get = hot_gets(&sample, |name| {
        let t = sts.tensor(name).unwrap();
        black_box(t.data());
    });
    drop(sts);
    drop(src);
    std::fs::remove_file(&pdx)?;
    std::fs::remove_file(&st)?;
    Ok(TinyRow {
        n,
        pdx_open_get: median(a),
        st_open_get: median(b),
        pdx_open_get_warm,
        st_open_get_warm,
        pdx_child,
        st_child,
        pdx_get,
        st_get,
        pdx_write,
        st_write,
        pdx_index_bytes,
        pdx4_index_bytes,
        st_header_bytes,
        pdx_verify,
    })
}

// ------------------------------------------------------------------------------------------
// Large tensors: write and verify
// ------------------------------------------------------------------------------------------

const LARGE_TENSORS: usize = 16;

fn large_data(total: usize) -> Vec<u8> {
    let mut v = vec![0u8; total];
    for (i, c) in v.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15).to_le_bytes());
    }
    v
}

fn plain_write(path: &Path, data: &[u8], sync: bool) -> Res<Duration> {
    let t0 = Instant::now();
    let mut f = std::fs::File::create(path)?;
    for chunk in data.chunks(data.len() / LARGE_TENSORS) {
        f.write_all(chunk)?;
    }
    if sync {
        f.sync_all()?;
    }
    drop(f);
    let d = t0.elapsed();
    std::fs::remove_file(path)?;
    Ok(d)
}

fn pdx_large_write(path: &Path, data: &[u8], sync: bool, keep: bool) -> Res<Duration> {
    let t0 = Instant::now();
    let mut w = Writer::create_with(
        path,
        WriterOptions {
            sync,
            ..WriterOptions::default()
        },
    )?;
    let per = data.len() / LARGE_TENSORS;
    let shape = [(per / 4) as u64];
    for (i, chunk) in data.chunks(per).enumerate() {
        w.add(
            format!("model.layers.{i}.mlp.weight"),
            Tensor::new(DType::Float32, &shape, chunk),
        )?;
    }
    w.finish()?;
    let d = t0.elapsed();
    if !keep {
        std::fs::remove_file(path)?;
    }
    Ok(d)
}

fn st_large_write(path: &Path, data: &[u8]) -> Res<Duration> {
    let t0 = Instant::now();
    let per = data.len() / LARGE_TENSORS;
    let views = data
        .chunks(per)
        .enumerate()
        .map(|(i, c)| {
            Ok((
                format!("model.layers.{i}.mlp.weight"),
                StView::new(StDtype::F32, vec![per / 4], c)?,
            ))
        })
        .collect::<Res<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None, path)?;
    let d = t0.elapsed();
    std::fs::remove_file(path)?;
    Ok(d)
}

struct LargeRow {
    bytes: u64,
    plain_sync: Duration,
    pdx_sync: Duration,
    plain_cache: Duration,
    pdx_cache: Duration,
    st_cache: Duration,
    memcpy: Duration,
    crc1: Duration,
    crc2: Duration,
    verify1: Duration,
    verify2: Duration,
}

/// CRC32C of `bytes` split over two threads, joined with `crc32c_combine`.
fn crc_two_threads(bytes: &[u8]) -> u32 {
    let (a, b) = bytes.split_at(bytes.len() / 2);
    let (ca, cb) = std::thread::scope(|s| {
        let h = s.spawn(|| crc32c::crc32c(b));
        (crc32c::crc32c(a), h.join().unwrap())
    });
    crc32c::crc32c_combine(ca, cb, b.len())
}

fn large_round(dir: &Path, total: usize) -> Res<LargeRow> {
    let data = large_data(total);
    let bytes = data.len() as u64;
    let plain = dir.join("plain.bin");
    let pdx = dir.join("large.pdx");
    let st = dir.join("large.safetensors");
    let (mut ps, mut xs, mut pc, mut xc, mut sc) = (vec![], vec![], vec![], vec![], vec![]);
    for round in 0..3 {
        // Alternate which goes first, so neither always follows the other's writeback.
        if round % 2 == 0 {
            ps.push(plain_write(&plain, &data, true)?);
            xs.push(pdx_large_write(&pdx, &data, true, false)?);
        } else {
            xs.push(pdx_large_write(&pdx, &data, true, false)?);
            ps.push(plain_write(&plain, &data, true)?);
        }
        pc.push(plain_write(&plain, &data, false)?);
        xc.push(pdx_large_write(&pdx, &data, false, false)?);
        sc.push(st_large_write(&st, &data)?);
    }

    // Machine limits: memcpy and CRC32C on the same bytes.
    let mut dst = vec![0u8; total];
    let mut mc = vec![];
    for _ in 0..3 {
        let t0 = Instant::now();
        dst.copy_from_slice(&data);
        black_box(&dst);
        mc.push(t0.elapsed());
    }
    drop(dst);
    drop(data);

    // Verify against bare CRC32C passes over the mapped tensor data of the same file.
    pdx_large_write(&pdx, &large_data(total), true, true)?;
    let r = Reader::open(&pdx)?;
    let views: Vec<_> = r.iter().collect::<paramdex::Result<Vec<_>>>()?;
    let (mut c1, mut c2, mut v1, mut v2) = (vec![], vec![], vec![], vec![]);
    for round in 0..6 {
        let t0 = Instant::now();
        for v in &views {
            black_box(crc32c::crc32c(v.data()));
        }
        let d = t0.elapsed();
        let t0 = Instant::now();
        for v in &views {
            black_box(crc_two_threads(v.data()));
        }
        let d2 = t0.elapsed();
        let t0 = Instant::now();
        r.verify_with(paramdex::VerifyOptions {
            load: None,
            threads: 1,
            progress: None,
        })?;
        let e1 = t0.elapsed();
        let t0 = Instant::now();
        r.verify_with(paramdex::VerifyOptions {
            load: None,
            threads: 2,
            progress: None,
        })?;
        let e2 = t0.elapsed();
        if round > 0 {
            // round 0 faults the mapping in
            c1.push(d);
            c2.push(d2);
            v1.push(e1);
            v2.push(e2);
        }
    }
    drop(views);
    drop(r);
    std::fs::remove_file(&pdx)?;
    Ok(LargeRow {
        bytes,
        plain_sync: median(ps),
        pdx_sync: median(xs),
        plain_cache: median(pc),
        pdx_cache: median(xc),
        st_cache: median(sc),
        memcpy: median(mc),
        crc1: median(c1),
        crc2: median(c2),
        verify1: median(v1),
        verify2: median(v2),
    })
}

// ------------------------------------------------------------------------------------------
// Report
// ------------------------------------------------------------------------------------------

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "NOT met"
    }
}

fn plot(path: &Path, rows: &[TinyRow]) -> Res<()> {
    use plotters::prelude::*;
    if let Some(p) = path.parent() {
        std::fs::create_dir_all(p)?;
    }
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let ymax = rows
        .iter()
        .map(|r| us(r.st_open_get).max(us(r.st_open_get_warm)))
        .fold(1.0, f64::max)
        * 3.0;
    let ymin = rows
        .iter()
        .map(|r| us(r.pdx_open_get_warm).min(us(r.pdx_open_get)))
        .fold(f64::MAX, f64::min)
        / 3.0;
    let xmin = rows.first().map_or(1_000, |r| r.n) as f64 / 1.5;
    let xmax = rows.last().map_or(1_000_000, |r| r.n) as f64 * 1.5;
    let root = SVGBackend::new(path, (800, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "open + get of one tensor: median time (file in the page cache)",
            ("sans-serif", 22),
        )
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d((xmin..xmax).log_scale(), (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("tensors in the file")
        .y_desc("time (log scale)")
        .x_label_formatter(&|x| fmt_count(x.round() as usize))
        .y_label_formatter(&|y| fmt_dur(Duration::from_secs_f64(y / 1e6)))
        .draw()?;
    let series = [
        (
            "paramdex, first open",
            RED,
            rows.iter().map(|r| us(r.pdx_open_get)).collect::<Vec<_>>(),
        ),
        (
            "paramdex, repeated",
            RGBColor(240, 150, 40),
            rows.iter().map(|r| us(r.pdx_open_get_warm)).collect(),
        ),
        (
            "safetensors, first open",
            BLUE,
            rows.iter().map(|r| us(r.st_open_get)).collect(),
        ),
        (
            "safetensors, repeated",
            RGBColor(80, 170, 230),
            rows.iter().map(|r| us(r.st_open_get_warm)).collect(),
        ),
    ];
    for (label, color, ys) in series {
        let pts: Vec<(f64, f64)> = rows.iter().map(|r| r.n as f64).zip(ys).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.9))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let mut max_tensors = 1_000_000usize;
    let mut write_mib = 1024usize;
    let mut dir_arg: Option<PathBuf> = None;
    let mut plot_path = Some(PathBuf::from("docs/open_get.svg"));
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--quick" => {
                max_tensors = 100_000;
                write_mib = 256;
            }
            "--max-tensors" => max_tensors = val()?.parse()?,
            "--write-mib" => write_mib = val()?.parse()?,
            "--dir" => dir_arg = Some(PathBuf::from(val()?)),
            "--plot" => plot_path = Some(PathBuf::from(val()?)),
            "--no-plot" => plot_path = None,
            // `cargo bench` adds this to every bench binary's arguments.
            "--bench" => {}
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("warning: a debug build; run with --release for meaningful numbers");
    }
    let tmp = match &dir_arg {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let dir = tmp.path();

    let load_before = loadavg();
    let mut rows = Vec::new();
    // 1k, 10k, ... and 500k (issue 17's hot-get aim is at 500k and 1M).
    let mut sizes = Vec::new();
    let mut n = 1_000;
    while n <= max_tensors {
        if n == 1_000_000 {
            sizes.push(500_000);
        }
        sizes.push(n);
        n *= 10;
    }
    for n in sizes {
        eprintln!("tiny tensors: {}", fmt_count(n));
        rows.push(tiny_round(dir, n)?);
    }
    let total = write_mib << 20;
    eprintln!("large tensors: {LARGE_TENSORS} x {} MiB", write_mib / 16);
    let large = large_round(dir, total)?;

    // ---- the table ----
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line("| measurement | paramdex | safetensors / reference | ratio | target |".into());
    line("|---|---|---|---|---|".into());
    for r in &rows {
        let ratio = r.st_open_get.as_secs_f64() / r.pdx_open_get.as_secs_f64();
        let target = if r.n == 1_000_000 {
            format!(
                "≤ 100 µs: {}",
                verdict(r.pdx_open_get <= Duration::from_micros(100))
            )
        } else {
            String::new()
        };
        line(format!(
            "| open + get, {} tensors (first open: CPU caches cold) | {} | {} | {:.0}× faster | {target} |",
            fmt_count(r.n),
            fmt_dur(r.pdx_open_get),
            fmt_dur(r.st_open_get),
            ratio
        ));
    }
    for r in &rows {
        let target = if r.n == 1_000_000 {
            format!(
                "≤ 100 µs: {}",
                verdict(r.pdx_open_get_warm <= Duration::from_micros(100))
            )
        } else {
            String::new()
        };
        line(format!(
            "| open + get, {} tensors (repeated: CPU caches warm) | {} | {} | {:.0}× faster | {target} |",
            fmt_count(r.n),
            fmt_dur(r.pdx_open_get_warm),
            fmt_dur(r.st_open_get_warm),
            r.st_open_get_warm.as_secs_f64() / r.pdx_open_get_warm.as_secs_f64()
        ));
    }
    for r in &rows {
        line(format!(
            "| open + get, {} tensors (fresh process) | {} | {} | {:.0}× faster | |",
            fmt_count(r.n),
            fmt_dur(r.pdx_child.1),
            fmt_dur(r.st_child.1),
            r.st_child.1.as_secs_f64() / r.pdx_child.1.as_secs_f64()
        ));
    }
    for r in &rows {
        let target = if r.n == 1_000_000 {
            format!("≤ 1 µs: {}", verdict(r.pdx_get <= Duration::from_micros(1)))
        } else {
            String::new()
        };
        line(format!(
            "| get after open, hot, {} tensors (median per get) | {} | {} | {:.2}× | {target} |",
            fmt_count(r.n),
            fmt_dur(r.pdx_get),
            fmt_dur(r.st_get),
            r.st_get.as_secs_f64() / r.pdx_get.as_secs_f64()
        ));
    }
    for r in &rows {
        let target = if r.n == 1_000_000 {
            format!("≤ 8 MiB: {}", verdict(r.pdx_child.0 <= 8 * 1024))
        } else {
            String::new()
        };
        line(format!(
            "| resident memory after open + get, {} tensors (above baseline) | {} | {} | {:.0}× less | {target} |",
            fmt_count(r.n),
            mib(r.pdx_child.0),
            mib(r.st_child.0),
            r.st_child.0 as f64 / r.pdx_child.0.max(1) as f64
        ));
    }
    for r in &rows {
        let pdx_b = r.pdx_index_bytes as f64 / r.n as f64;
        let st_b = r.st_header_bytes as f64 / r.n as f64;
        let target = if r.n == 1_000_000 {
            format!("≤ 40: {}", verdict(pdx_b <= 40.0))
        } else {
            String::new()
        };
        line(format!(
            "| index bytes per tensor, {} empty tensors (safetensors: header) | {pdx_b:.1} | {st_b:.1} | {:.2}× smaller | {target} |",
            fmt_count(r.n),
            st_b / pdx_b
        ));
    }
    for r in &rows {
        let b = r.pdx4_index_bytes as f64 / r.n as f64;
        let target = if r.n == 1_000_000 {
            format!("≤ 40: {}", verdict(b <= 40.0))
        } else {
            String::new()
        };
        line(format!(
            "| index bytes per tensor, {} float32[4] tensors | {b:.1} | (over its cap at 1M) | | {target} |",
            fmt_count(r.n),
        ));
    }
    if let Some(r) = rows.last() {
        let p = r.n as f64 / r.pdx_write.as_secs_f64();
        let s = r.n as f64 / r.st_write.as_secs_f64();
        line(format!(
            "| tiny tensors written per second, {} (paramdex: fsync'd; safetensors: not) | {:.2} M/s | {:.2} M/s | {:.2}× | ≥ 1 M/s: {} |",
            fmt_count(r.n),
            p / 1e6,
            s / 1e6,
            p / s,
            verdict(p >= 1e6)
        ));
        line(format!(
            "| verify, {} tiny tensors, 1 thread | {:.2} M tensors/s | | | |",
            fmt_count(r.n),
            r.n as f64 / r.pdx_verify.as_secs_f64() / 1e6
        ));
    }
    let l = &large;
    let size = format!("{LARGE_TENSORS} tensors, {} MiB", l.bytes >> 20);
    let ratio = l.plain_sync.as_secs_f64() / l.pdx_sync.as_secs_f64();
    line(format!(
        "| durable write, {size} (paramdex vs plain write + fsync) | {:.2} GB/s | {:.2} GB/s | {:.0} % | ≥ 90 %: {} |",
        gbps(l.bytes, l.pdx_sync),
        gbps(l.bytes, l.plain_sync),
        ratio * 100.0,
        verdict(ratio >= 0.9)
    ));
    let ratio = l.plain_cache.as_secs_f64() / l.pdx_cache.as_secs_f64();
    line(format!(
        "| page-cache write, {size} (paramdex sync off vs plain write) | {:.2} GB/s | {:.2} GB/s | {:.0} % | ≥ 90 %: {} |",
        gbps(l.bytes, l.pdx_cache),
        gbps(l.bytes, l.plain_cache),
        ratio * 100.0,
        verdict(ratio >= 0.9)
    ));
    line(format!(
        "| page-cache write, {size} (paramdex sync off vs safetensors) | {:.2} GB/s | {:.2} GB/s | {:.2}× | |",
        gbps(l.bytes, l.pdx_cache),
        gbps(l.bytes, l.st_cache),
        l.st_cache.as_secs_f64() / l.pdx_cache.as_secs_f64()
    ));
    let r1 = l.crc1.as_secs_f64() / l.verify1.as_secs_f64();
    line(format!(
        "| verify, {size}, 1 thread (vs bare CRC32C, 1 core) | {:.2} GB/s | {:.2} GB/s | {:.0} % | ≥ 80 %: {} |",
        gbps(l.bytes, l.verify1),
        gbps(l.bytes, l.crc1),
        r1 * 100.0,
        verdict(r1 >= 0.8)
    ));
    let r2 = l.crc1.as_secs_f64() / l.verify2.as_secs_f64();
    line(format!(
        "| verify, {size}, 2 threads (vs bare CRC32C, 1 core) | {:.2} GB/s | {:.2} GB/s | {r2:.2}× | ≥ 1.6×: {} |",
        gbps(l.bytes, l.verify2),
        gbps(l.bytes, l.crc1),
        verdict(r2 >= 1.6)
    ));
    let r22 = l.crc2.as_secs_f64() / l.verify2.as_secs_f64();
    line(format!(
        "| verify, {size}, 2 threads (vs bare CRC32C, 2 threads) | {:.2} GB/s | {:.2} GB/s | {:.0} % | |",
        gbps(l.bytes, l.verify2),
        gbps(l.bytes, l.crc2),
        r22 * 100.0
    ));
    line(format!(
        "| machine: memcpy, {} MiB | | {:.2} GB/s | | |",
        l.bytes >> 20,
        gbps(l.bytes, l.memcpy)
    ));
    print!("{out}");
    println!();
    println!(
        "Load average before / after the run: {} / {} (2 cores: above ~1 means other \
         processes competed for the CPU during the run)",
        load_before.trim(),
        loadavg().trim()
    );
    if let Some(p) = plot_path {
        plot(&p, &rows)?;
        eprintln!("plot written to {}", p.display());
    }
    Ok(())
}
