//! Sharded checkpoints (issue 14, docs/benchmarks-history.md "Sharded checkpoints (issue 14)"):
//! many writer processes saving one checkpoint, the merge, open + get of a sharded checkpoint
//! against a single file, and `get_slice` of a row band of a tensor stored as column slices.
//!
//! ```sh
//! cargo bench --bench sharded                                  # every group
//! PARAMDEX_BENCH_GROUPS=write cargo bench --bench sharded      # one or more groups
//! PARAMDEX_BENCH_RANK_MIB=64 PARAMDEX_BENCH_SLICE_MIB=256 cargo bench --bench sharded
//! ```
//!
//! Groups:
//! - `write` (printed table, no criterion): 8 writer processes (this binary run again as
//!   children) each saving `PARAMDEX_BENCH_RANK_MIB` MiB (default 256) as one shard of one
//!   checkpoint, against one process writing the same bytes to one native file, and against a
//!   plain `write_all` + fsync of the same bytes. Every writer fsyncs. The three are
//!   interleaved, `PARAMDEX_BENCH_REPS` rounds (default 3), and the median of each printed.
//!   `PARAMDEX_BENCH_PHASES=1`: each child prints its time adding tensors and finishing.
//! - `merge` (criterion): `merge_shards` of 64 shards × 10,000 tiny tensors, and the bytes it
//!   read ([`MergeShardsReport::bytes_read`]) against the shards' bytes (printed); also
//!   without fsync (`MergeShardsOptions::no_sync`).
//! - `open` (criterion): open + get one tensor of that 64-shard checkpoint (640,000 tensors)
//!   against one native file with the same tensors.
//! - `slice` (criterion, plus a printed cold read): `get_slice` of the middle third of the rows
//!   of a float32 tensor of `PARAMDEX_BENCH_SLICE_MIB` MiB (default 1024) stored as 8 column
//!   slices, against `get_slice` of the whole tensor. The printed cold read drops the file from
//!   the page cache (`posix_fadvise(DONTNEED)`) and counts the bytes the process read from
//!   storage (`read_bytes` of `/proc/self/io`). Linux only.
//! - `incremental` (printed table, no criterion): a checkpoint of `PARAMDEX_BENCH_INCR_MIB` MiB
//!   (default 2048) in 4 MiB tensors saved by 8 shard writers (threads), then the next save after
//!   5 % of its tensors changed: in full, incrementally with `add_or_reuse` (every tensor
//!   compared with the base: size, CRC32C, bytes) and incrementally on the caller's word
//!   (`reuse_unchanged` for the unchanged ones). Bytes written (shard files, references files,
//!   index; a hard link writes no data) and seconds, each save fsynced, median of
//!   `PARAMDEX_BENCH_REPS` interleaved rounds.
//!
//! Files go to a temporary directory under `PARAMDEX_BENCH_DIR` (default the system's), removed
//! between rounds and at the end: the write group needs twice the ranks' bytes free, the slice
//! group the tensor's bytes. Nothing here asserts a time.

use std::fs::File;
use std::hint::black_box;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion};
use paramdex::{
    merge_shards, DType, MergeShardsOptions, Reader, Region, SaveId, Saved, ShardWriter,
    ShardedSave, Tensor, Writer, WriterOptions,
};

const RANKS: u32 = 8;
/// Each rank's bytes are saved as tensors of this size.
const TENSOR_MIB: usize = 16;
const MERGE_SHARDS: u32 = 64;
const MERGE_TENSORS: usize = 10_000;
const SLICES: u64 = 8;
const MIB: usize = 1 << 20;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn enabled(group: &str) -> bool {
    match std::env::var("PARAMDEX_BENCH_GROUPS") {
        Ok(g) => g.split(',').any(|x| x.trim() == group),
        Err(_) => true,
    }
}

fn bench_dir() -> tempfile::TempDir {
    match std::env::var_os("PARAMDEX_BENCH_DIR") {
        Some(d) => tempfile::tempdir_in(d).unwrap(),
        None => tempfile::tempdir().unwrap(),
    }
}

/// `bytes` pseudo-random bytes (xorshift), different for each `seed`.
fn fill(bytes: usize, seed: u64) -> Vec<u8> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64 ^ (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let mut v = Vec::with_capacity(bytes);
    while v.len() < bytes {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        v.extend_from_slice(&s.to_le_bytes());
    }
    v.truncate(bytes);
    v
}

fn rank_tensor_name(rank: u32, i: usize) -> String {
    format!("rank{rank}.layers.{i:03}.weight")
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

// ---- write: 8 processes, one process, plain write --------------------------------------------

/// Child process: writes shard `rank` of `RANKS` of save `save` at `prefix`. It makes its bytes
/// first, says `ready`, waits for a line on stdin, then writes, finishes (fsync) and exits.
fn child(prefix: &str, rank: u32, save: &str, rank_mib: usize) {
    let save = SaveId::from_hex(save).expect("save id");
    let per = TENSOR_MIB.min(rank_mib);
    let data: Vec<Vec<u8>> = (0..rank_mib / per)
        .map(|i| fill(per * MIB, u64::from(rank) * 1000 + i as u64))
        .collect();
    println!("ready");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let t = Instant::now();
    let mut w = ShardWriter::create(prefix, rank, RANKS, save, WriterOptions::default()).unwrap();
    for (i, d) in data.iter().enumerate() {
        let n = (d.len() / 4) as u64;
        w.add(
            rank_tensor_name(rank, i),
            Tensor::new(DType::Float32, &[n], d),
        )
        .unwrap();
    }
    let added = t.elapsed().as_secs_f64();
    w.finish().unwrap();
    if std::env::var_os("PARAMDEX_BENCH_PHASES").is_some() {
        eprintln!(
            "rank {rank}: add {added:.2} s, then finish (index, fsync, rename) {:.2} s",
            t.elapsed().as_secs_f64() - added
        );
    }
}

/// 8 writer processes: seconds from "go" until every shard is finished, and the merge's seconds.
fn run_ranks(dir: &Path, rank_mib: usize) -> (f64, f64) {
    let prefix = dir.join("ckpt");
    let save = SaveId::random();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..RANKS)
        .map(|rank| {
            Command::new(&exe)
                .env("PARAMDEX_BENCH_CHILD", format!("{rank}"))
                .env("PARAMDEX_BENCH_PREFIX", &prefix)
                .env("PARAMDEX_BENCH_SAVE", save.to_string())
                .env("PARAMDEX_BENCH_RANK_MIB", rank_mib.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in &mut children {
        let mut line = String::new();
        BufReader::new(c.stdout.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
    }
    let t = Instant::now();
    for c in &mut children {
        c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    for c in &mut children {
        assert!(c.wait().unwrap().success());
    }
    let write = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let opts = MergeShardsOptions {
        save_id: Some(save),
        num_shards: Some(RANKS),
        ..Default::default()
    };
    merge_shards(&prefix, &opts).unwrap();
    let merge = t.elapsed().as_secs_f64();
    (write, merge)
}

/// One process writing every rank's tensors to one native file (fsync at finish).
fn run_single(dir: &Path, data: &[Vec<Vec<u8>>]) -> f64 {
    let t = Instant::now();
    let mut w = Writer::create(dir.join("single.pdx")).unwrap();
    for (rank, tensors) in data.iter().enumerate() {
        for (i, d) in tensors.iter().enumerate() {
            let n = (d.len() / 4) as u64;
            w.add(
                rank_tensor_name(rank as u32, i),
                Tensor::new(DType::Float32, &[n], d),
            )
            .unwrap();
        }
    }
    w.finish().unwrap();
    t.elapsed().as_secs_f64()
}

/// The same bytes through `write_all` to one file, then fsync.
fn run_plain(dir: &Path, data: &[Vec<Vec<u8>>]) -> f64 {
    let t = Instant::now();
    let mut f = File::create(dir.join("plain.bin")).unwrap();
    for d in data.iter().flatten() {
        f.write_all(d).unwrap();
    }
    f.sync_all().unwrap();
    t.elapsed().as_secs_f64()
}

fn clear(dir: &Path) {
    for e in std::fs::read_dir(dir).unwrap() {
        std::fs::remove_file(e.unwrap().path()).unwrap();
    }
    // What was written is out of the way of the next run's writes.
    File::open(dir).unwrap().sync_all().unwrap();
}

fn bench_write() {
    let rank_mib = env_usize("PARAMDEX_BENCH_RANK_MIB", 256);
    let reps = env_usize("PARAMDEX_BENCH_REPS", 3).max(1);
    let per = TENSOR_MIB.min(rank_mib);
    let total_mib = (rank_mib * RANKS as usize) as f64;
    // The parent's copy of every rank's bytes, for the one-process and plain writes.
    let data: Vec<Vec<Vec<u8>>> = (0..RANKS)
        .map(|rank| {
            (0..rank_mib / per)
                .map(|i| fill(per * MIB, u64::from(rank) * 1000 + i as u64))
                .collect()
        })
        .collect();
    let dir = bench_dir();
    let (mut plain, mut single, mut ranks, mut merge) = (vec![], vec![], vec![], vec![]);
    for rep in 0..reps {
        plain.push(run_plain(dir.path(), &data));
        clear(dir.path());
        single.push(run_single(dir.path(), &data));
        clear(dir.path());
        let (w, m) = run_ranks(dir.path(), rank_mib);
        ranks.push(w);
        merge.push(m);
        clear(dir.path());
        eprintln!(
            "round {}: plain {:.2} s, 1 process {:.2} s, {RANKS} processes {:.2} s (+ merge {:.3} s)",
            rep + 1,
            plain[rep],
            single[rep],
            ranks[rep],
            merge[rep]
        );
    }
    let (p, s, r, m) = (
        median(&mut plain),
        median(&mut single),
        median(&mut ranks),
        median(&mut merge),
    );
    println!(
        "\nwrite: {RANKS} × {rank_mib} MiB = {total_mib} MiB, median of {reps} interleaved rounds\n"
    );
    println!("| writer | seconds | MiB/s | vs plain write |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, secs: f64| {
        println!(
            "| {name} | {secs:.2} | {:.0} | {:.0} % |",
            total_mib / secs,
            100.0 * p / secs
        );
    };
    row("plain `write_all` + fsync, 1 file", p);
    row("1 process, `Writer`, 1 file", s);
    row(&format!("{RANKS} processes, `ShardWriter`, shards"), r);
    row(
        &format!("{RANKS} processes, shards + `merge_shards`"),
        r + m,
    );
    println!(
        "\n{RANKS} processes against 1 process: {:.2}× the rate",
        s / r
    );
}

// ---- merge and open: 64 shards × 10,000 tensors -----------------------------------------------

fn tiny_name(global: usize) -> String {
    format!("model.layers.{global}.self_attn.q_proj.weight")
}

fn tiny_data(global: usize) -> Vec<u8> {
    let x = global as f32;
    [x, x + 1.0, x + 2.0, x + 3.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn no_sync() -> WriterOptions {
    WriterOptions {
        sync: false,
        ..Default::default()
    }
}

/// Writes the 64 pending shards of one save at `prefix` (shard k holds the tensors whose number
/// is k modulo 64, as ranks interleave layers) and returns the save id.
fn write_tiny_shards(prefix: &Path) -> SaveId {
    let save = SaveId::random();
    for k in 0..MERGE_SHARDS {
        let mut w = ShardWriter::create(prefix, k, MERGE_SHARDS, save, no_sync()).unwrap();
        for j in 0..MERGE_TENSORS {
            let g = j * MERGE_SHARDS as usize + k as usize;
            w.add(
                tiny_name(g),
                Tensor::new(DType::Float32, &[4], &tiny_data(g)),
            )
            .unwrap();
        }
        w.finish().unwrap();
    }
    save
}

fn shard_name(prefix: &Path, k: u32, pending: bool) -> PathBuf {
    let mut s = prefix.as_os_str().to_os_string();
    s.push(format!(".data-{k:05}-of-{MERGE_SHARDS:05}"));
    if pending {
        s.push(".pending");
    }
    PathBuf::from(s)
}

fn bench_merge(c: &mut Criterion, dir: &Path) {
    // Pristine pending shards, hard-linked under the merged prefix before each merge (the merge
    // renames them; it never writes into them).
    let pristine = dir.join("pristine");
    let save = write_tiny_shards(&pristine);
    let prefix = dir.join("merged");
    let relink = || {
        let _ = std::fs::remove_file(dir.join("merged.index"));
        for k in 0..MERGE_SHARDS {
            let _ = std::fs::remove_file(shard_name(&prefix, k, false));
            std::fs::hard_link(shard_name(&pristine, k, true), shard_name(&prefix, k, true))
                .unwrap();
        }
    };
    let opts = MergeShardsOptions {
        save_id: Some(save),
        num_shards: Some(MERGE_SHARDS),
        ..Default::default()
    };
    relink();
    let rep = merge_shards(&prefix, &opts).unwrap();
    eprintln!(
        "merge: {} tensors; read {} bytes of {} shard bytes ({:.2} %); index {} bytes",
        rep.tensors,
        rep.bytes_read,
        rep.shard_bytes,
        100.0 * rep.bytes_read as f64 / rep.shard_bytes as f64,
        rep.index_len
    );
    let mut g = c.benchmark_group("merge");
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("64_shards_x_10000", |b| {
        b.iter_batched(
            relink,
            |()| black_box(merge_shards(&prefix, &opts).unwrap()),
            BatchSize::PerIteration,
        )
    });
    // The same without fsync: what of the time is the index's and directory's fsyncs.
    let unsynced = MergeShardsOptions {
        no_sync: true,
        ..opts.clone()
    };
    g.bench_function("64_shards_x_10000_no_sync", |b| {
        b.iter_batched(
            relink,
            |()| black_box(merge_shards(&prefix, &unsynced).unwrap()),
            BatchSize::PerIteration,
        )
    });
    g.finish();
    // The last merge's checkpoint is the open group's.
    relink();
    merge_shards(&prefix, &opts).unwrap();
}

fn bench_open(c: &mut Criterion, dir: &Path) {
    let prefix = dir.join("merged");
    let single = dir.join("single.pdx");
    let mut w = Writer::create_with(&single, no_sync()).unwrap();
    let n = MERGE_SHARDS as usize * MERGE_TENSORS;
    for g in 0..n {
        w.add(
            tiny_name(g),
            Tensor::new(DType::Float32, &[4], &tiny_data(g)),
        )
        .unwrap();
    }
    w.finish().unwrap();
    let name = tiny_name(n / 2 + 17);
    let mut g = c.benchmark_group("open_get");
    g.bench_function("64_shards_640k", |b| {
        b.iter(|| {
            let r = Reader::open(&prefix).unwrap();
            black_box(r.get(&name).unwrap().unwrap().data()[0]);
        })
    });
    g.bench_function("single_file_640k", |b| {
        b.iter(|| {
            let r = Reader::open(&single).unwrap();
            black_box(r.get(&name).unwrap().unwrap().data()[0]);
        })
    });
    g.finish();
}

// ---- slice: a 1/3 row band of a tensor stored as 8 column slices ------------------------------

/// `read_bytes` of /proc/self/io: bytes this process caused to be read from storage.
fn read_bytes() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// Drops `path` from the page cache (it must be clean and not mapped).
fn drop_cache(path: &Path) {
    use std::os::fd::AsRawFd;
    let f = File::open(path).unwrap();
    f.sync_all().unwrap();
    let rc = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(rc, 0);
}

/// Cold `get_slice` of `region`: (bytes read from storage, seconds), open included.
fn cold(path: &Path, region: &Region) -> (u64, f64) {
    drop_cache(path);
    let before = read_bytes();
    let t = Instant::now();
    let r = Reader::open(path).unwrap();
    let s = r.get_slice("w", region).unwrap().unwrap();
    black_box(s.data().iter().step_by(4096).fold(0u8, |a, b| a ^ b));
    let secs = t.elapsed().as_secs_f64();
    (read_bytes() - before, secs)
}

fn bench_slice(c: &mut Criterion, dir: &Path) {
    let mib = env_usize("PARAMDEX_BENCH_SLICE_MIB", 1024);
    // float32 [rows, cols]: cols 8192 (32 KiB a row), 8 column slices of 1024.
    let cols = 8192u64;
    let rows = (mib * MIB) as u64 / (cols * 4);
    let path = dir.join("sliced.pdx");
    let mut w = Writer::create(&path).unwrap();
    let part = cols / SLICES;
    for s in 0..SLICES {
        let region = Region::new(vec![0, s * part], vec![rows, part]).unwrap();
        let data = fill((rows * part * 4) as usize, s);
        w.add_slice("w", DType::Float32, &[rows, cols], &region, &data)
            .unwrap();
    }
    w.finish().unwrap();
    let band = Region::new(vec![rows / 3, 0], vec![rows / 3, cols]).unwrap();
    let whole = Region::full(&[rows, cols]);
    let band_bytes = rows / 3 * cols * 4;
    let reps = env_usize("PARAMDEX_BENCH_REPS", 3).max(1);
    let (mut bb, mut bt, mut wb, mut wt) = (vec![], vec![], vec![], vec![]);
    for _ in 0..reps {
        let (b, t) = cold(&path, &band);
        bb.push(b as f64);
        bt.push(t);
        let (b, t) = cold(&path, &whole);
        wb.push(b as f64);
        wt.push(t);
    }
    let (bb, bt, wb, wt) = (
        median(&mut bb),
        median(&mut bt),
        median(&mut wb),
        median(&mut wt),
    );
    println!(
        "\nslice: float32 [{rows}, {cols}] ({mib} MiB) in {SLICES} column slices; cold (page \
         cache dropped), open + get_slice, median of {reps}\n"
    );
    println!("| read | bytes in result | bytes read from storage | seconds |");
    println!("|---|---:|---:|---:|");
    println!("| rows 1/3 band | {band_bytes} | {bb:.0} | {bt:.3} |");
    println!("| whole tensor | {} | {wb:.0} | {wt:.3} |", rows * cols * 4);
    println!(
        "\nband against whole: {:.1} % of the bytes read, {:.1} % of the time",
        100.0 * bb / wb,
        100.0 * bt / wt
    );
    let r = Reader::open(&path).unwrap();
    let mut g = c.benchmark_group("get_slice_warm");
    g.sample_size(10);
    g.throughput(criterion::Throughput::Bytes(band_bytes));
    g.bench_function("row_band_third", |b| {
        b.iter(|| black_box(r.get_slice("w", &band).unwrap().unwrap().data()[0]))
    });
    g.throughput(criterion::Throughput::Bytes(rows * cols * 4));
    g.bench_function("whole", |b| {
        b.iter(|| black_box(r.get_slice("w", &whole).unwrap().unwrap().data()[0]))
    });
    g.finish();
}

// ---- incremental: 5 % of 2 GiB changed -------------------------------------------------------

const INCR_TENSOR_MIB: usize = 4;
const INCR_SHARDS: u32 = 8;

/// How the next save is written.
#[derive(Clone, Copy, PartialEq)]
enum Next {
    /// Every tensor written.
    Full,
    /// Every tensor through `add_or_reuse`.
    Compared,
    /// The changed tensors written, the others `reuse_unchanged` (the caller knows which).
    CallersWord,
}

/// Saves `tensors` at `prefix` with `INCR_SHARDS` writer threads (tensor i in shard i % 8),
/// the way `next` says, against `base`; returns (seconds, bytes written, tensors reused).
fn incremental_save(
    prefix: &Path,
    tensors: &[Vec<u8>],
    changed: &[bool],
    base: Option<&std::sync::Arc<Reader>>,
    next: Next,
) -> (f64, u64, u64) {
    let t = Instant::now();
    let mut save = ShardedSave::new(prefix, INCR_SHARDS).unwrap();
    if let (Some(b), true) = (base, next != Next::Full) {
        save = save.with_base(b.clone());
    }
    let written = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for k in 0..INCR_SHARDS {
            let (save, written) = (&save, &written);
            s.spawn(move || {
                let mut w = save.shard(k).unwrap();
                for (i, d) in tensors.iter().enumerate() {
                    if i % INCR_SHARDS as usize != k as usize {
                        continue;
                    }
                    let name = format!("model.layers.{i:04}.weight");
                    let shape = [(d.len() / 4) as u64];
                    let tensor = Tensor::new(DType::Float32, &shape, d);
                    match next {
                        Next::Full => w.add(name, tensor).unwrap(),
                        Next::Compared => {
                            let saved = w.add_or_reuse(name, tensor).unwrap();
                            assert_eq!(saved == Saved::Written, changed[i]);
                        }
                        Next::CallersWord if changed[i] => w.add(name, tensor).unwrap(),
                        Next::CallersWord => w.reuse_unchanged(name).unwrap(),
                    }
                }
                let stats = w.finish().unwrap();
                written.fetch_add(stats.file_len, std::sync::atomic::Ordering::Relaxed);
            });
        }
    });
    // The references files are written too (and removed by the merge).
    let dir = prefix.parent().unwrap();
    let stem = prefix.file_name().unwrap().to_string_lossy().into_owned();
    let mut refs = 0u64;
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_name()
            .to_string_lossy()
            .starts_with(&format!("{stem}.refs-"))
        {
            refs += e.metadata().unwrap().len();
        }
    }
    let rep = save.merge(&MergeShardsOptions::default()).unwrap();
    let bytes = written.into_inner() + refs + rep.index_len;
    (t.elapsed().as_secs_f64(), bytes, rep.reused_tensors)
}

fn bench_incremental() {
    let total_mib = env_usize("PARAMDEX_BENCH_INCR_MIB", 2048);
    let reps = env_usize("PARAMDEX_BENCH_REPS", 3).max(1);
    let count = (total_mib / INCR_TENSOR_MIB).max(20);
    let base_data: Vec<Vec<u8>> = (0..count)
        .map(|i| fill(INCR_TENSOR_MIB * MIB, i as u64))
        .collect();
    // Every 20th tensor changes: 5 %.
    let changed: Vec<bool> = (0..count).map(|i| i % 20 == 7).collect();
    let next_data: Vec<Vec<u8>> = base_data
        .iter()
        .enumerate()
        .map(|(i, d)| {
            if changed[i] {
                fill(d.len(), 1_000_000 + i as u64)
            } else {
                d.clone()
            }
        })
        .collect();
    let changed_bytes: u64 = next_data
        .iter()
        .zip(&changed)
        .filter(|(_, &c)| c)
        .map(|(d, _)| d.len() as u64)
        .sum();
    let dir = bench_dir();
    let (mut base_t, mut full, mut compared, mut word) = (vec![], vec![], vec![], vec![]);
    let (mut full_b, mut compared_b, mut word_b) = (0, 0, 0);
    for rep in 0..reps {
        let base_prefix = dir.path().join("step1");
        let (bt, _, _) = incremental_save(&base_prefix, &base_data, &changed, None, Next::Full);
        base_t.push(bt);
        let base = std::sync::Arc::new(Reader::open(&base_prefix).unwrap());
        let runs: [(Next, &str, &mut Vec<f64>, &mut u64); 3] = [
            (Next::Full, "full", &mut full, &mut full_b),
            (Next::Compared, "compared", &mut compared, &mut compared_b),
            (Next::CallersWord, "word", &mut word, &mut word_b),
        ];
        for (next, name, times, bytes) in runs {
            let prefix = dir.path().join(format!("step2-{name}"));
            let (t, b, reused) = incremental_save(&prefix, &next_data, &changed, Some(&base), next);
            if next != Next::Full {
                assert_eq!(reused as usize, changed.iter().filter(|c| !**c).count());
                // The new checkpoint stands alone once the base is gone (checked below).
            }
            times.push(t);
            *bytes = b;
        }
        drop(base);
        // Removing the base leaves every incremental checkpoint whole.
        for e in std::fs::read_dir(dir.path()).unwrap() {
            let p = e.unwrap().path();
            if p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("step1")
            {
                std::fs::remove_file(p).unwrap();
            }
        }
        for name in ["compared", "word"] {
            let r = Reader::open(dir.path().join(format!("step2-{name}"))).unwrap();
            r.verify().unwrap();
        }
        clear(dir.path());
        eprintln!(
            "round {}: base {:.2} s; next save: full {:.2} s, add_or_reuse {:.2} s, \
             reuse_unchanged {:.2} s",
            rep + 1,
            base_t[rep],
            full[rep],
            compared[rep],
            word[rep]
        );
    }
    let (f, c, w) = (median(&mut full), median(&mut compared), median(&mut word));
    println!(
        "\nincremental: {count} tensors × {INCR_TENSOR_MIB} MiB = {total_mib} MiB in \
         {INCR_SHARDS} shards, {} changed ({} MiB), median of {reps} interleaved rounds\n",
        changed.iter().filter(|c| **c).count(),
        changed_bytes >> 20
    );
    println!("| next save | seconds | bytes written | vs full save |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, secs: f64, bytes: u64| {
        println!(
            "| {name} | {secs:.2} | {bytes} | {:.2} % of the bytes, {:.0} % of the time |",
            100.0 * bytes as f64 / full_b as f64,
            100.0 * secs / f
        );
    };
    row("full save", f, full_b);
    row("incremental, `add_or_reuse` (compares)", c, compared_b);
    row("incremental, `reuse_unchanged` (caller's word)", w, word_b);
}

fn main() {
    if let Ok(rank) = std::env::var("PARAMDEX_BENCH_CHILD") {
        child(
            &std::env::var("PARAMDEX_BENCH_PREFIX").unwrap(),
            rank.parse().unwrap(),
            &std::env::var("PARAMDEX_BENCH_SAVE").unwrap(),
            env_usize("PARAMDEX_BENCH_RANK_MIB", 256),
        );
        return;
    }
    let mut c = Criterion::default().configure_from_args();
    if enabled("write") {
        bench_write();
    }
    if enabled("merge") || enabled("open") {
        let dir = bench_dir();
        bench_merge(&mut c, dir.path());
        if enabled("open") {
            bench_open(&mut c, dir.path());
        }
    }
    if enabled("slice") {
        let dir = bench_dir();
        bench_slice(&mut c, dir.path());
    }
    if enabled("incremental") {
        bench_incremental();
    }
    c.final_summary();
}
