//! Crash safety of the writer (SPEC.md section 10): a failing or killed writer never disturbs
//! the file already at the final path, never leaves a half-written file under the final name,
//! and `recover` restores every record that reached the temporary file intact.
//!
//! - Fault injection: a [`WriteBackend`] that fails after N bytes (cleanly, or after storing part
//!   of the failing write: a torn write) or at `fsync`, for every N across a whole file.
//! - A real crash: the test binary re-executes itself as a child writer, which blocks inside a
//!   write (after storing half of it) and is killed with SIGKILL by the parent.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use paramdex::recover;
use paramdex::{DType, Error, Reader, Tensor, WriteBackend, Writer, WriterOptions};

/// A test backend over the writer's temporary file.
struct FaultyBackend {
    file: File,
    /// Bytes the backend still accepts; `None` = unlimited.
    budget: Option<u64>,
    /// When the budget runs out inside a write, store the part that fits before failing.
    torn: bool,
    fail_sync: bool,
    /// Set when a fault fired.
    fired: Arc<AtomicBool>,
    /// Bytes accepted so far (including the stored part of a torn write).
    accepted: Arc<AtomicU64>,
}

impl FaultyBackend {
    fn new(file: File, budget: Option<u64>, torn: bool, fail_sync: bool) -> Self {
        FaultyBackend {
            file,
            budget,
            torn,
            fail_sync,
            fired: Arc::new(AtomicBool::new(false)),
            accepted: Arc::new(AtomicU64::new(0)),
        }
    }
}

impl Write for FaultyBackend {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.fired.load(Ordering::SeqCst) {
            return Err(io::Error::other("injected fault: the device is gone"));
        }
        if let Some(left) = self.budget {
            if buf.len() as u64 > left {
                self.fired.store(true, Ordering::SeqCst);
                if self.torn && left > 0 {
                    self.file.write_all(&buf[..left as usize])?;
                    self.accepted.fetch_add(left, Ordering::SeqCst);
                }
                self.budget = Some(0);
                return Err(io::Error::other("injected fault: write failed"));
            }
            self.budget = Some(left - buf.len() as u64);
        }
        self.file.write_all(buf)?;
        self.accepted.fetch_add(buf.len() as u64, Ordering::SeqCst);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for FaultyBackend {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

impl WriteBackend for FaultyBackend {
    fn sync(&mut self) -> io::Result<()> {
        if self.fail_sync {
            self.fired.store(true, Ordering::SeqCst);
            return Err(io::Error::other("injected fault: fsync failed"));
        }
        self.file.sync_all()
    }
}

/// One tensor of the test workload.
struct Item {
    name: String,
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    data: Vec<u8>,
    /// Written with `begin` in chunks instead of `add`.
    streamed: bool,
}

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// A deterministic workload: names out of order, several dtypes, a LoD tensor, a scalar, an
/// empty tensor, and streamed tensors. `scale` multiplies the size of the big tensors.
fn workload(scale: usize) -> Vec<Item> {
    let mut items = Vec::new();
    for i in 0..12u32 {
        let dtype = DType::ALL[i as usize % DType::ALL.len()];
        let shape: Vec<u64> = match i % 4 {
            0 => vec![3, 5],
            1 => vec![],
            2 => vec![0, 4],
            _ => vec![7],
        };
        let n: u64 = shape.iter().product();
        items.push(Item {
            name: format!("layer.{}.w", (i * 7) % 12),
            dtype,
            shape,
            lod: Vec::new(),
            data: pattern(n as usize * dtype.size(), i),
            streamed: i % 5 == 4,
        });
    }
    items.push(Item {
        name: "seq".into(),
        dtype: DType::Int64,
        shape: vec![5, 2],
        lod: vec![vec![0, 2, 5]],
        data: pattern(80, 99),
        streamed: false,
    });
    for k in 0..2u32 {
        let n = 1000 * scale;
        items.push(Item {
            name: format!("big.{k}"),
            dtype: DType::Float32,
            shape: vec![n as u64],
            lod: Vec::new(),
            data: pattern(n * 4, 1000 + k),
            streamed: k == 1,
        });
    }
    items
}

fn put(w: &mut Writer, it: &Item) -> paramdex::Result<()> {
    if it.streamed {
        let mut t = w.begin(&it.name, it.dtype, &it.shape, &it.lod)?;
        for chunk in it.data.chunks(777) {
            t.write_all(chunk)
                .map_err(|e| Error::io(format!("streaming {}", it.name), e))?;
        }
        t.finish()
    } else {
        w.add(
            &it.name,
            Tensor::new(it.dtype, &it.shape, &it.data).with_lod(&it.lod),
        )
    }
}

fn opts() -> WriterOptions {
    WriterOptions {
        alignment: 16,
        block_size: 128,
        restart_interval: 2,
        ..Default::default()
    }
}

/// Writes the workload normally; returns the file bytes.
fn reference(dir: &Path, items: &[Item]) -> Vec<u8> {
    let path = dir.join("reference.pdx");
    let mut w = Writer::create_with(&path, opts()).unwrap();
    for it in items {
        put(&mut w, it).unwrap();
    }
    w.finish().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    bytes
}

/// A complete, different file to sit at the final path before the faulty write.
fn write_previous(path: &Path) -> Vec<u8> {
    let mut w = Writer::create(path).unwrap();
    w.add("previous", Tensor::new(DType::UInt8, &[3], &[7, 8, 9]))
        .unwrap();
    w.finish().unwrap();
    std::fs::read(path).unwrap()
}

fn assert_previous_intact(path: &Path, previous: &[u8]) {
    assert_eq!(
        std::fs::read(path).unwrap(),
        previous,
        "the final path changed"
    );
    let r = Reader::open(path).unwrap();
    assert_eq!(r.tensor("previous").unwrap().data(), &[7, 8, 9]);
    r.verify().unwrap();
}

/// Files in `dir` other than `keep`.
fn others(dir: &Path, keep: &[&str]) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !keep.iter().any(|k| p.file_name().unwrap() == *k))
        .collect()
}

/// Record extents `(name, start, end)` of a complete file, in record (write) order.
fn record_extents(bytes: &[u8]) -> Vec<(Vec<u8>, u64, u64)> {
    let r = Reader::from_bytes(bytes.to_vec()).unwrap();
    let mut v: Vec<(Vec<u8>, u64, u64)> = r
        .iter()
        .map(|t| {
            let t = t.unwrap();
            let end = t.data_offset() + t.data().len() as u64;
            let start = end - t.record().len() as u64;
            (t.name().to_vec(), start, end)
        })
        .collect();
    v.sort_by_key(|e| e.1);
    v
}

/// Recovers `temp` and checks the result against the reference file: exactly the leading
/// records whose bytes reached `temp` intact, with their exact contents.
fn check_recovery(temp_bytes: &[u8], reference: &[u8], items: &[Item], dir: &Path) {
    let extents = record_extents(reference);
    let expected: Vec<&[u8]> = extents
        .iter()
        .take_while(|(_, s, e)| {
            temp_bytes.get(*s as usize..*e as usize) == reference.get(*s as usize..*e as usize)
        })
        .map(|(n, _, _)| n.as_slice())
        .collect();
    let torn = dir.join("torn.tmp");
    let out = dir.join("recovered.pdx");
    std::fs::write(&torn, temp_bytes).unwrap();
    if expected.is_empty() {
        // No complete record: nothing to recover, an error, and no (empty) file written.
        let e = recover(&torn, &out, opts()).unwrap_err();
        assert!(
            matches!(
                e,
                paramdex::Error::UnrecognizedFormat { .. } | paramdex::Error::Corrupt { .. }
            ),
            "{e}"
        );
        assert!(!out.exists());
        std::fs::remove_file(&torn).unwrap();
        return;
    }
    let report = recover(&torn, &out, opts()).unwrap();
    assert_eq!(report.recovered as usize, expected.len());
    let r = Reader::open(&out).unwrap();
    r.verify().unwrap();
    let by_name: BTreeMap<&[u8], &Item> = items.iter().map(|i| (i.name.as_bytes(), i)).collect();
    assert_eq!(r.len() as usize, expected.len());
    for name in expected {
        let t = r.tensor(name).unwrap();
        let it = by_name[name];
        assert_eq!(t.dtype(), it.dtype);
        assert_eq!(t.shape(), it.shape.as_slice());
        assert_eq!(t.data(), it.data.as_slice());
        assert_eq!(t.lod().unwrap().to_vec(), it.lod);
    }
    std::fs::remove_file(&torn).unwrap();
    std::fs::remove_file(&out).unwrap();
}

/// Runs the workload over a faulty backend and checks the orderly-failure guarantees: the first
/// failure is an I/O error reported by an `add`, a streamed write or `finish`; the writer refuses
/// everything after it; the final path keeps the previous file; no temporary file is left.
/// Returns whether the run failed.
fn faulty_run(
    dir: &Path,
    items: &[Item],
    budget: Option<u64>,
    torn: bool,
    fail_sync: bool,
) -> bool {
    let path = dir.join("model.pdx");
    let previous = write_previous(&path);
    let fired = Arc::new(AtomicBool::new(false));
    let fired2 = fired.clone();
    let mut w = Writer::create_with_backend(&path, opts(), move |file| {
        let mut b = FaultyBackend::new(file, budget, torn, fail_sync);
        b.fired = fired2;
        Box::new(b)
    })
    .unwrap();
    let mut failed = false;
    for (i, it) in items.iter().enumerate() {
        if let Err(e) = put(&mut w, it) {
            assert!(fired.load(Ordering::SeqCst), "error without a fault: {e}");
            assert!(
                matches!(e, Error::Io { .. }),
                "a failed write is an I/O error: {e}"
            );
            // The writer refuses everything after a failure.
            let next = &items[(i + 1) % items.len()];
            let again = put(&mut w, next).unwrap_err();
            assert!(again.to_string().contains("unusable"), "{again}");
            failed = true;
            break;
        }
    }
    match w.finish() {
        Ok(stats) => {
            assert!(
                !failed && !fired.load(Ordering::SeqCst),
                "finish hid a fault"
            );
            assert_eq!(stats.tensors as usize, items.len());
            Reader::open(&path).unwrap().verify().unwrap();
            false
        }
        Err(e) => {
            assert!(
                fired.load(Ordering::SeqCst),
                "finish failed without a fault: {e}"
            );
            assert_previous_intact(&path, &previous);
            assert!(
                others(dir, &["model.pdx"]).is_empty(),
                "temporary file left"
            );
            true
        }
    }
}

/// What the backend had stored when a run with this budget failed: rerun with a backend that
/// keeps its file (a crash, not an orderly failure) and read it.
fn persisted_prefix(dir: &Path, items: &[Item], budget: u64, torn: bool) -> Vec<u8> {
    let path = dir.join("crash.pdx");
    let accepted = Arc::new(AtomicU64::new(0));
    let acc2 = accepted.clone();
    let copy = dir.join("crash.copy");
    let copy2 = copy.clone();
    let mut w = Writer::create_with_backend(&path, opts(), move |file| {
        // Mirror every accepted byte into a second file that survives the writer.
        struct Mirror {
            inner: FaultyBackend,
            mirror: File,
        }
        impl Write for Mirror {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                let before = self.inner.accepted.load(Ordering::SeqCst);
                let pos = self.inner.file.stream_position()?;
                let r = self.inner.write(buf);
                let after = self.inner.accepted.load(Ordering::SeqCst);
                let stored = (after - before) as usize;
                self.mirror.seek(SeekFrom::Start(pos))?;
                self.mirror.write_all(&buf[..stored])?;
                r
            }
            fn flush(&mut self) -> io::Result<()> {
                self.inner.flush()
            }
        }
        impl Seek for Mirror {
            fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
                self.inner.seek(pos)
            }
        }
        impl WriteBackend for Mirror {
            fn sync(&mut self) -> io::Result<()> {
                self.inner.sync()
            }
        }
        let mut inner = FaultyBackend::new(file, Some(budget), torn, false);
        inner.accepted = acc2;
        Box::new(Mirror {
            inner,
            mirror: File::create(&copy2).unwrap(),
        })
    })
    .unwrap();
    for it in items {
        if put(&mut w, it).is_err() {
            break;
        }
    }
    let _ = w.finish();
    let bytes = std::fs::read(&copy).unwrap();
    std::fs::remove_file(&copy).unwrap();
    // Accepted bytes include the 4-byte checksum patches of streamed tensors, written over
    // earlier bytes.
    assert!(bytes.len() as u64 <= accepted.load(Ordering::SeqCst));
    bytes
}

#[test]
fn every_failing_write_keeps_the_previous_file_and_recovers_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let items = workload(1);
    let reference = reference(dir.path(), &items);
    let len = reference.len() as u64;
    // Budgets: every byte boundary of the index, and of the records at a stride that still hits
    // every record boundary and every record's interior.
    let extents = record_extents(&reference);
    let mut budgets: Vec<u64> = (0..len).step_by(97).collect();
    for (_, s, e) in &extents {
        for b in [*s, s + 1, s + 13, (s + e) / 2, e - 1, *e] {
            budgets.push(b);
        }
    }
    let records_len = Reader::from_bytes(reference.clone())
        .unwrap()
        .header()
        .records_len;
    budgets.extend(records_len.saturating_sub(2)..len + 1);
    budgets.sort_unstable();
    budgets.dedup();
    for &budget in &budgets {
        for torn in [false, true] {
            let failed = faulty_run(dir.path(), &items, Some(budget), torn, false);
            // The file plus one 4-byte checksum patch per streamed tensor goes through the
            // backend; a budget below the file size always fails.
            if budget < len {
                assert!(failed, "budget {budget} < {len} must fail");
            }
            if !failed {
                continue;
            }
            let persisted = persisted_prefix(dir.path(), &items, budget, torn);
            assert!(persisted.len() as u64 <= budget);
            check_recovery(&persisted, &reference, &items, dir.path());
        }
    }
}

#[test]
fn failing_fsync_keeps_the_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let items = workload(1);
    assert!(
        faulty_run(dir.path(), &items, None, false, true),
        "a failing fsync must fail finish"
    );
    // Without sync, fsync is never called, so the same backend succeeds.
    let path = dir.path().join("nosync.pdx");
    let mut w = Writer::create_with_backend(
        &path,
        WriterOptions {
            sync: false,
            ..opts()
        },
        |file| Box::new(FaultyBackend::new(file, None, false, true)),
    )
    .unwrap();
    for it in &items {
        put(&mut w, it).unwrap();
    }
    w.finish().unwrap();
    Reader::open(&path).unwrap().verify().unwrap();
}

#[test]
fn a_fault_in_a_large_direct_write_is_reported_by_add() {
    // Tensors above the writer's 1 MiB buffer go straight to the backend, so the failure is
    // reported by the add itself, with the file name. From 8 MiB on, the CRC also runs on a
    // second thread during the write and the header's CRC field is patched afterwards; a fault
    // in the middle of that write must poison the writer all the same.
    for (len, budget) in [(3usize << 20, 1u64 << 20), (9 << 20, 5 << 20)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.pdx");
        let previous = write_previous(&path);
        let mut w = Writer::create_with_backend(&path, opts(), |file| {
            Box::new(FaultyBackend::new(file, Some(budget), true, false))
        })
        .unwrap();
        let data = pattern(len, 5);
        let err = w
            .add("huge", Tensor::new(DType::UInt8, &[len as u64], &data))
            .unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{len}: {err}");
        assert!(err.to_string().contains("big.pdx"), "{len}: {err}");
        let err = w
            .add("small", Tensor::new(DType::UInt8, &[1], &[1]))
            .unwrap_err();
        assert!(err.to_string().contains("unusable"), "{len}: {err}");
        assert!(w.finish().is_err());
        assert_previous_intact(&path, &previous);
        assert!(others(dir.path(), &["big.pdx"]).is_empty());
    }
}

/// A backend whose early sync (run by `finish` on a second thread while it writes the index)
/// reports `early`, and which counts its final syncs.
struct EarlySyncBackend {
    file: File,
    early: Option<io::ErrorKind>,
    early_ran: Arc<AtomicBool>,
    /// Early syncs run (the writer's background ones included).
    early_runs: Arc<AtomicU64>,
    final_syncs: Arc<AtomicU64>,
}

impl Write for EarlySyncBackend {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for EarlySyncBackend {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

impl WriteBackend for EarlySyncBackend {
    fn sync(&mut self) -> io::Result<()> {
        self.final_syncs.fetch_add(1, Ordering::SeqCst);
        self.file.sync_all()
    }
    fn early_sync(&self) -> Option<paramdex::EarlySync> {
        let (early, ran, runs) = (self.early, self.early_ran.clone(), self.early_runs.clone());
        Some(Box::new(move || {
            ran.store(true, Ordering::SeqCst);
            runs.fetch_add(1, Ordering::SeqCst);
            match early {
                Some(kind) => Err(io::Error::new(
                    kind,
                    "injected fault: early fdatasync failed",
                )),
                None => Ok(()),
            }
        }))
    }
}

#[test]
fn the_early_sync_of_the_records_is_checked_and_never_replaces_the_final_one() {
    for early in [None, Some(io::ErrorKind::Other)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("early.pdx");
        let previous = write_previous(&path);
        let (ran, syncs) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU64::new(0)),
        );
        let (r2, s2) = (ran.clone(), syncs.clone());
        let mut w = Writer::create_with_backend(&path, opts(), move |file| {
            Box::new(EarlySyncBackend {
                file,
                early,
                early_ran: r2,
                early_runs: Arc::new(AtomicU64::new(0)),
                final_syncs: s2,
            })
        })
        .unwrap();
        // Enough records (17 MiB) for finish to start the early sync.
        let data = pattern(17 << 20, 9);
        w.add("big", Tensor::new(DType::UInt8, &[17 << 20], &data))
            .unwrap();
        w.add("small", Tensor::new(DType::UInt8, &[1], &[7]))
            .unwrap();
        let result = w.finish();
        assert!(ran.load(Ordering::SeqCst), "the early sync did not run");
        match early {
            None => {
                result.unwrap();
                assert_eq!(syncs.load(Ordering::SeqCst), 1, "one final sync");
                let r = Reader::open(&path).unwrap();
                r.verify().unwrap();
                assert_eq!(r.get("big").unwrap().unwrap().data(), &data[..]);
            }
            Some(_) => {
                let err = result.unwrap_err();
                assert!(err.to_string().contains("early.pdx"), "{err}");
                assert_previous_intact(&path, &previous);
                assert!(others(dir.path(), &["early.pdx"]).is_empty());
            }
        }
    }
}

#[test]
fn records_are_synced_in_the_background_as_they_grow_and_a_failure_fails_finish() {
    // 257 MiB of records: past the writer's 256 MiB step, so a sync starts in the background
    // while tensors are still being added (besides the early one of `finish`).
    let len = 257usize << 20;
    let data = vec![0x3cu8; len];
    for early in [None, Some(io::ErrorKind::Other)] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("grow.pdx");
        let previous = write_previous(&path);
        let (runs, syncs) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let (r2, s2) = (runs.clone(), syncs.clone());
        let mut w = Writer::create_with_backend(&path, opts(), move |file| {
            Box::new(EarlySyncBackend {
                file,
                early,
                early_ran: Arc::new(AtomicBool::new(false)),
                early_runs: r2,
                final_syncs: s2,
            })
        })
        .unwrap();
        w.add("big", Tensor::new(DType::UInt8, &[len as u64], &data))
            .unwrap();
        // The background sync may still run; a failed one is reported by `finish` at the latest.
        let added = w.add("small", Tensor::new(DType::UInt8, &[1], &[7]));
        let result = added.and_then(|()| w.finish().map(|_| ()));
        match early {
            None => {
                result.unwrap();
                assert_eq!(
                    runs.load(Ordering::SeqCst),
                    2,
                    "background + finish's early sync"
                );
                assert_eq!(syncs.load(Ordering::SeqCst), 1, "one final sync");
                let r = Reader::open(&path).unwrap();
                assert_eq!(r.get("small").unwrap().unwrap().data(), &[7]);
                assert!(r.get("big").unwrap().unwrap().data() == &data[..]);
            }
            Some(_) => {
                let err = result.unwrap_err();
                assert!(err.to_string().contains("grow.pdx"), "{err}");
                assert!(runs.load(Ordering::SeqCst) >= 1);
                assert_previous_intact(&path, &previous);
                assert!(others(dir.path(), &["grow.pdx"]).is_empty());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// SIGKILL of a real child process in the middle of a write.

const CHILD_ENV: &str = "PARAMDEX_CRASH_CHILD_DIR";
const BLOCK_AT_ENV: &str = "PARAMDEX_CRASH_BLOCK_AT";

/// A backend that, on write call number `block_at` (or in `sync` when `block_at` is
/// `u64::MAX`), stores half of the buffer, reports how many bytes the file holds, and blocks
/// reading stdin until the parent kills the process.
struct BlockingBackend {
    file: File,
    calls: u64,
    block_at: u64,
    /// Length of the file so far.
    stored: u64,
}

impl BlockingBackend {
    fn block(&mut self, what: &str) -> ! {
        self.file.sync_all().unwrap();
        // A line of its own: the test harness has printed the test name without a newline.
        println!("\nPDX-BLOCKED {what} {}", self.stored);
        io::stdout().flush().unwrap();
        let mut sink = String::new();
        loop {
            // The parent never writes; it kills us. EOF (parent gone) ends the child.
            sink.clear();
            if io::stdin().lock().read_line(&mut sink).unwrap_or(0) == 0 {
                std::process::exit(3);
            }
        }
    }
}

impl Write for BlockingBackend {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.calls += 1;
        let n = if self.calls == self.block_at {
            buf.len() / 2
        } else {
            buf.len()
        };
        self.file.write_all(&buf[..n])?;
        let pos = self.file.stream_position()?;
        self.stored = self.stored.max(pos);
        if n < buf.len() {
            self.block("write");
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Seek for BlockingBackend {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.file.seek(pos)
    }
}

impl WriteBackend for BlockingBackend {
    fn sync(&mut self) -> io::Result<()> {
        if self.block_at == u64::MAX {
            self.block("sync");
        }
        self.file.sync_all()
    }
}

/// The child side of the SIGKILL test: does nothing unless started by the parent test.
#[test]
fn sigkill_child_helper() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let block_at: u64 = std::env::var(BLOCK_AT_ENV).unwrap().parse().unwrap();
    let path = Path::new(&dir).join("model.pdx");
    let mut w = Writer::create_with_backend(&path, opts(), move |file| {
        Box::new(BlockingBackend {
            file,
            calls: 0,
            block_at,
            stored: 0,
        })
    })
    .unwrap();
    for it in &workload(400) {
        put(&mut w, it).unwrap();
    }
    w.finish().unwrap();
    println!("PDX-FINISHED");
    io::stdout().flush().unwrap();
    std::process::exit(4); // the parent always expects to kill us first
}

fn kill_child_at(block_at: u64) -> (PathBuf, tempfile::TempDir, u64, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.pdx");
    let previous = write_previous(&path);
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "sigkill_child_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .env(BLOCK_AT_ENV, block_at.to_string())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap();
    let mut out = io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let stored = loop {
        line.clear();
        let n = out.read_line(&mut line).unwrap();
        assert!(n > 0, "the child ended without blocking in a write");
        if let Some((_, rest)) = line.trim().split_once("PDX-BLOCKED ") {
            let (_, bytes) = rest.split_once(' ').unwrap();
            break bytes.parse::<u64>().unwrap();
        }
        assert!(
            !line.contains("PDX-FINISHED"),
            "the child was never blocked"
        );
    };
    child.kill().unwrap(); // SIGKILL on Unix
    let status = child.wait().unwrap();
    assert!(!status.success());
    let mut rest = Vec::new();
    out.read_to_end(&mut rest).unwrap();
    assert_previous_intact(&path, &previous);
    let temps = others(dir.path(), &["model.pdx"]);
    assert_eq!(
        temps.len(),
        1,
        "exactly the writer's temporary file: {temps:?}"
    );
    let temp = temps[0].clone();
    let name = temp.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(".model.pdx.") && name.ends_with(".pdx-tmp"),
        "{name}"
    );
    let bytes = std::fs::read(&temp).unwrap();
    assert_eq!(
        bytes.len() as u64,
        stored,
        "the temporary file holds what was stored"
    );
    (temp, dir, stored, bytes)
}

#[cfg(unix)]
#[test]
fn sigkill_in_the_middle_of_a_write_keeps_the_previous_file() {
    let items = workload(400);
    let refdir = tempfile::tempdir().unwrap();
    let reference = reference(refdir.path(), &items);
    let extents = record_extents(&reference);
    let records_len = extents.last().unwrap().2;
    // Write calls: the 1 MiB buffer is flushed a few times while the 3.2 MB tensors go through;
    // block at the first calls, in the middle, and in `sync` (after the index is written).
    for block_at in [1u64, 2, 3, 4, u64::MAX] {
        let (_temp, dir, stored, bytes) = kill_child_at(block_at);
        if block_at == u64::MAX {
            assert_eq!(
                bytes, reference,
                "blocked in fsync: the whole file was written"
            );
        } else {
            assert!(stored < reference.len() as u64);
        }
        check_recovery(&bytes, &reference, &items, dir.path());
        let complete = extents.iter().filter(|(_, _, e)| *e <= stored).count();
        if stored >= records_len {
            assert_eq!(complete, items.len());
        }
    }
}
