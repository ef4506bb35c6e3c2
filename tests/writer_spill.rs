//! The writer's bounded memory (issue 17): past `WriterOptions::index_memory` bytes of index
//! entries, the writer spills sorted runs to a nameless temporary file and merges them at
//! `finish`. Tiny budgets here make small files spill many times; the file written must be
//! byte for byte the one a writer that never spills writes, duplicates must be refused across
//! runs at `add` time, and nothing may be left behind by a dropped or killed writer.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use paramdex::{
    recover, DType, Error, Reader, Region, Tensor, WriteBackend, Writer, WriterOptions,
};

fn opts(index_memory: usize) -> WriterOptions {
    WriterOptions {
        alignment: 8,
        block_size: 512,
        sync: false,
        index_memory,
        ..WriterOptions::default()
    }
}

/// `n` names in a scrambled order (a multiplicative permutation), each with a few data bytes.
fn scrambled(n: u64) -> Vec<(String, Vec<u8>)> {
    (0..n)
        .map(|i| {
            let j = (i * 7919 + 13) % n;
            let name = format!("model.layers.{j}.self_attn.q_proj.weight");
            let data: Vec<u8> = (0..(j % 5) * 4).map(|b| (b + j) as u8).collect();
            (name, data)
        })
        .collect()
}

fn write(path: &Path, items: &[(String, Vec<u8>)], index_memory: usize) -> usize {
    let mut w = Writer::create_with(path, opts(index_memory)).unwrap();
    w.insert_metadata("step", 7i64).unwrap();
    for (name, data) in items {
        w.add(name, Tensor::new(DType::UInt8, &[data.len() as u64], data))
            .unwrap();
    }
    let runs = w.spilled_runs();
    assert_eq!(w.len(), items.len());
    let stats = w.finish().unwrap();
    assert_eq!(stats.tensors, items.len() as u64);
    runs
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_spilling_writer_writes_the_same_bytes_as_one_that_does_not() {
    let dir = tempfile::tempdir().unwrap();
    for items in [scrambled(3000), {
        let mut s = scrambled(3000);
        s.sort();
        s
    }] {
        let spilled = dir.path().join("spilled.pdx");
        let whole = dir.path().join("whole.pdx");
        let runs = write(&spilled, &items, 2048);
        assert!(runs > 10, "only {runs} runs spilled");
        assert_eq!(write(&whole, &items, usize::MAX), 0);
        assert_eq!(
            std::fs::read(&spilled).unwrap(),
            std::fs::read(&whole).unwrap()
        );
        let r = Reader::open(&spilled).unwrap();
        assert_eq!(r.len(), 3000);
        r.verify().unwrap();
        let want: BTreeMap<_, _> = items.iter().cloned().collect();
        let got: BTreeMap<String, Vec<u8>> = r
            .iter()
            .map(|t| {
                let t = t.unwrap();
                (t.display_name(), t.data().to_vec())
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(r.header().metadata.get("step"), Some(&7i64.into()));
        assert_eq!(files_in(dir.path()), ["spilled.pdx", "whole.pdx"]);
    }
}

#[test]
fn duplicates_are_refused_across_runs_when_added() {
    let dir = tempfile::tempdir().unwrap();
    for sorted in [false, true] {
        let mut items = scrambled(500);
        if sorted {
            items.sort();
        }
        let path = dir.path().join("d.pdx");
        let mut w = Writer::create_with(&path, opts(1024)).unwrap();
        for (name, data) in &items {
            w.add(name, Tensor::new(DType::UInt8, &[data.len() as u64], data))
                .unwrap();
        }
        assert!(w.spilled_runs() > 5);
        // Every earlier name, spilled or not, is refused; nothing is written for it.
        for (name, _) in items.iter().step_by(37) {
            let e = w
                .add(name, Tensor::new(DType::UInt8, &[1], &[9]))
                .unwrap_err();
            assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
            // Streamed too.
            let e = w
                .begin(name, DType::UInt8, &[1], &[])
                .map(|_| ())
                .unwrap_err();
            assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
            // And slices of a tensor added whole.
            let e = w
                .add_slice(
                    name,
                    DType::UInt8,
                    &[4],
                    &Region::new(vec![0], vec![1]).unwrap(),
                    &[1],
                )
                .unwrap_err();
            assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
        }
        // A new name is still accepted, and the file holds each name once with its first data.
        w.add("zzz.new", Tensor::new(DType::UInt8, &[1], &[5]))
            .unwrap();
        w.finish().unwrap();
        let r = Reader::open(&path).unwrap();
        assert_eq!(r.len(), 501);
        r.verify().unwrap();
        for (name, data) in &items {
            assert_eq!(r.tensor(name).unwrap().data(), data.as_slice());
        }
    }
}

#[test]
fn slices_streams_and_metadata_survive_spilling() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.pdx");
    let mut w = Writer::create_with(&path, opts(700)).unwrap();
    let mut expect: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for i in (0..400u32).rev() {
        let name = format!("t{i:04}");
        let data = i.to_le_bytes().to_vec();
        if i % 3 == 0 {
            let mut s = w.begin(&name, DType::UInt8, &[4], &[]).unwrap();
            s.write_all(&data).unwrap();
            s.finish().unwrap();
        } else {
            w.add(&name, Tensor::new(DType::UInt8, &[4], &data))
                .unwrap();
        }
        expect.insert(name, data);
        if i % 50 == 0 {
            // Slices of one tensor, added across spills.
            let row = u64::from(i / 50);
            let region = Region::new(vec![row, 0], vec![1, 2]).unwrap();
            w.add_slice("emb", DType::UInt8, &[8, 2], &region, &[row as u8, 1])
                .unwrap();
        }
    }
    assert!(w.spilled_runs() > 5);
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    r.verify().unwrap();
    assert_eq!(r.len(), 401);
    for (name, data) in &expect {
        assert_eq!(r.tensor(name).unwrap().data(), data.as_slice());
    }
    let all = Region::new(vec![0, 0], vec![8, 2]).unwrap();
    let emb = r.get_slice("emb", &all).unwrap().unwrap();
    let want: Vec<u8> = (0..8u8).flat_map(|row| [row, 1]).collect();
    assert_eq!(emb.data(), want.as_slice());
}

#[test]
fn a_dropped_or_failed_spilling_writer_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("x.pdx");
    let mut w = Writer::create_with(&path, opts(512)).unwrap();
    for (name, data) in scrambled(400) {
        w.add(
            &name,
            Tensor::new(DType::UInt8, &[data.len() as u64], &data),
        )
        .unwrap();
    }
    assert!(w.spilled_runs() > 5);
    // While writing: the staged file only; the spill file has no name.
    let staged = files_in(&dir.path().join("sub"));
    assert_eq!(staged.len(), 1, "{staged:?}");
    assert!(staged[0].ends_with(".pdx-tmp"), "{staged:?}");
    drop(w);
    assert!(files_in(dir.path()).is_empty());

    // A finish that fails writing the index (after the merge of the runs began) leaves
    // nothing either.
    let armed = Arc::new(AtomicBool::new(false));
    let fail = armed.clone();
    let mut w = Writer::create_with_backend(&path, opts(512), move |file| {
        Box::new(FailWhenArmed { file, armed: fail })
    })
    .unwrap();
    for (name, data) in scrambled(300) {
        w.add(
            &name,
            Tensor::new(DType::UInt8, &[data.len() as u64], &data),
        )
        .unwrap();
    }
    assert!(w.spilled_runs() > 5);
    armed.store(true, Ordering::SeqCst);
    let e = w.finish().unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(files_in(dir.path()).is_empty());
}

/// A backend whose writes fail once `armed` is set.
struct FailWhenArmed {
    file: std::fs::File,
    armed: Arc<AtomicBool>,
}

impl Write for FailWhenArmed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.armed.load(Ordering::SeqCst) {
            return Err(std::io::Error::other("injected"));
        }
        self.file.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Seek for FailWhenArmed {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

impl WriteBackend for FailWhenArmed {
    fn sync(&mut self) -> std::io::Result<()> {
        self.file.sync_all()
    }
}

const CHILD_ENV: &str = "PARAMDEX_SPILL_CHILD_DIR";

/// The child of `a_killed_spilling_writer_leaves_only_its_recoverable_temporary_file`: writes
/// with a tiny budget, reports once it has spilled, and waits to be killed.
#[test]
fn spill_crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return; // run as an ordinary test: nothing to do
    };
    let path = PathBuf::from(dir).join("out.pdx");
    let mut w = Writer::create_with(&path, opts(512)).unwrap();
    for (name, data) in scrambled(1000) {
        w.add(
            &name,
            Tensor::new(DType::UInt8, &[data.len() as u64], &data),
        )
        .unwrap();
    }
    // The records must be in the file for recovery: flush them by a spill-free route (the
    // staged file is written through a buffer that a kill would lose).
    let temp = w.temp_path().unwrap().to_path_buf();
    w.add(
        "zz.flush",
        Tensor::new(DType::UInt8, &[2 << 20], &vec![7u8; 2 << 20]),
    )
    .unwrap();
    println!(
        "\nPDX-SPILLED {} {} {}",
        w.spilled_runs(),
        std::process::id(),
        temp.display()
    );
    std::io::stdout().flush().unwrap();
    let mut sink = String::new();
    loop {
        sink.clear();
        if std::io::stdin().lock().read_line(&mut sink).unwrap_or(0) == 0 {
            std::process::exit(3);
        }
    }
}

#[test]
fn a_killed_spilling_writer_leaves_only_its_recoverable_temporary_file() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "spill_crash_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = BufReader::new(stdout)
        .lines()
        .map(|l| l.unwrap())
        .find(|l| l.starts_with("PDX-SPILLED "))
        .expect("the child reports its spill");
    let mut parts = line.split(' ').skip(1);
    let runs: usize = parts.next().unwrap().parse().unwrap();
    let pid: u32 = parts.next().unwrap().parse().unwrap();
    assert!(runs > 5, "{line}");
    assert_eq!(pid, child.id());
    // While the child runs, its spill file is open but has no name in the directory.
    #[cfg(target_os = "linux")]
    {
        let dir_name = dir.path().canonicalize().unwrap();
        let open_in_dir: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| p.starts_with(&*dir_name.to_string_lossy()))
            .collect();
        assert!(
            open_in_dir.iter().any(|p| p.ends_with("(deleted)")),
            "no nameless spill file among {open_in_dir:?}"
        );
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left = files_in(dir.path());
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].ends_with(".pdx-tmp"), "{left:?}");
    assert!(!dir.path().join("out.pdx").exists());
    // The temporary file's records are complete: recover restores every tensor.
    let out = dir.path().join("recovered.pdx");
    let report = recover(&dir.path().join(&left[0]), &out, opts(512)).unwrap();
    assert_eq!(report.recovered, 1001);
    let r = Reader::open(&out).unwrap();
    r.verify().unwrap();
    for (name, data) in scrambled(1000) {
        assert_eq!(r.tensor(&name).unwrap().data(), data.as_slice());
    }
}
