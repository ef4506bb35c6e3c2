//! Crash-point tests of the manager (issue 44): every file-system operation of a save, in
//! each layout, saved on the caller's thread and in the background, fails (an I/O error the
//! process survives) or stops the process there (the operation and everything after it,
//! cleanup included, never reach the disk), through the seam of `native/fault.rs`. Then the
//! directory must hold what was committed and nothing else once a save ran: the latest is the
//! newest committed step, a job resuming from it saves the next step, the step that was being
//! saved is either committed (and saving it again says so) or absent (and saves again), no
//! temporary survives a reopen, no leftover survives the next save, nothing committed is
//! lost, and every checkpoint verifies with the bytes that were saved.

use std::collections::BTreeSet;
use std::path::Path;

use super::*;
use crate::native::fault::{self, Mode, Op};

/// The steps saved before the save under test, which prunes the first of them (keep last 2).
const BEFORE: [u64; 2] = [1, 2];
/// The step of the save under test.
const STEP: u64 = 3;

/// The tensors of `step`: one that changes with the step, one that never does (reused by an
/// incremental save), one larger and per step.
fn tensors(step: u64) -> Vec<(&'static str, DType, Vec<u64>, Vec<u8>)> {
    let w: Vec<u8> = (0..16)
        .flat_map(|i| (step as f32 + i as f32).to_le_bytes())
        .collect();
    let frozen: Vec<u8> = (0..=255u8).collect();
    let per_step: Vec<u8> = (0..1000u32).map(|i| (i as u64 * 7 + step) as u8).collect();
    vec![
        ("w", DType::Float32, vec![16], w),
        ("frozen", DType::UInt8, vec![256], frozen),
        ("per_step", DType::UInt8, vec![1000], per_step),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Saving {
    Sync,
    Async,
}

fn options(layout: Layout) -> ManagerOptions {
    ManagerOptions {
        layout,
        keep: KeepPolicy {
            last: Some(2),
            ..Default::default()
        },
        writer: WriterOptions {
            sync: true,
            ..Default::default()
        },
        ..Default::default()
    }
}

fn save(m: &mut CheckpointManager, step: u64, how: Saving) -> Result<()> {
    let ts = tensors(step);
    let list = ts
        .iter()
        .map(|(n, d, s, b)| (n.as_bytes(), Tensor::new(*d, s, b)));
    let mut meta = Metadata::new();
    meta.insert("step", step as i64).unwrap();
    match how {
        Saving::Sync => m.save(step, list, meta),
        Saving::Async => {
            m.save_async(step, list, meta)?;
            m.wait()
        }
    }
}

/// The names in `dir`, sorted.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The steps whose index is in place.
fn committed(dir: &Path) -> BTreeSet<u64> {
    names(dir)
        .iter()
        .filter_map(|n| match sibling_of(n, "ckpt") {
            Some((step, Sibling::Index)) => Some(step),
            _ => None,
        })
        .collect()
}

/// Checks `m`'s directory against what was committed; `what` names the case in failures.
fn check_state(m: &CheckpointManager, dir: &Path, what: &str) -> BTreeSet<u64> {
    let on_disk = committed(dir);
    let steps: BTreeSet<u64> = m.steps().unwrap().into_iter().collect();
    assert_eq!(
        steps, on_disk,
        "{what}: steps() against the indexes on disk"
    );
    let newest = *on_disk.iter().max().unwrap();
    assert_eq!(m.latest().unwrap().step, newest, "{what}: latest()");
    let (step, store) = m.restore_latest().unwrap();
    assert_eq!(step, newest, "{what}: restore_latest()");
    drop(store);
    for &s in &on_disk {
        let r = Reader::open(index_path(&m.prefix(s))).unwrap();
        r.verify()
            .unwrap_or_else(|e| panic!("{what}: step {s} does not verify: {e}"));
        for (n, d, shape, bytes) in tensors(s) {
            let v = r.get(n).unwrap().unwrap_or_else(|| panic!("{what}: {n}"));
            assert_eq!((v.dtype(), v.shape()), (d, &shape[..]), "{what}: {n}");
            assert!(v.data() == bytes, "{what}: step {s}, {n}");
        }
    }
    on_disk
}

/// No temporary file (`.NAME...`) in `dir`.
fn assert_no_temporaries(dir: &Path, what: &str) {
    let hidden: Vec<String> = names(dir)
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(hidden.is_empty(), "{what}: temporaries left: {hidden:?}");
}

/// Only the state file and the committed checkpoints' index and data files in `dir`.
fn assert_no_leftovers(dir: &Path, what: &str) {
    assert_no_leftovers_up_to(dir, u64::MAX, what)
}

/// [`assert_no_leftovers`], files of steps after `last` (a save in progress, for all a reader
/// opening the directory knows) allowed.
fn assert_no_leftovers_up_to(dir: &Path, last: u64, what: &str) {
    let on_disk = committed(dir);
    let extra: Vec<String> = names(dir)
        .into_iter()
        .filter(|n| {
            n != STATE_FILE
                && !matches!(
                    sibling_of(n, "ckpt"),
                    Some((s, Sibling::Index | Sibling::Data { pending: false, .. }))
                        if on_disk.contains(&s)
                )
                && !matches!(sibling_of(n, "ckpt"), Some((s, _)) if s > last)
        })
        .collect();
    assert!(extra.is_empty(), "{what}: leftovers: {extra:?}");
}

/// The state a save of `STEP` starts from: `BEFORE` saved.
fn prepared(layout: Layout, how: Saving) -> (tempfile::TempDir, CheckpointManager) {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), options(layout)).unwrap();
    for s in BEFORE {
        save(&mut m, s, how).unwrap();
    }
    (dir, m)
}

/// Runs the save of `STEP` with its `j`-th operation `op` failing (or stopping) as `mode`
/// says, then checks the directory.
fn crash_at(layout: Layout, how: Saving, mode: Mode, op: Op, j: usize) {
    let (dir, mut m) = prepared(layout, how);
    let what = format!("{layout:?}, {how:?}, {mode:?} at {op:?} {j}");
    let plan = fault::install(dir.path(), Some((op, j)), mode);
    let r = save(&mut m, STEP, how);
    let hit = plan
        .fired()
        .unwrap_or_else(|| panic!("{what}: the save did fewer such operations"));
    let what = format!("{what} ({})", hit.display());
    let mut m = match mode {
        // The process died at the operation: nothing more of it reaches the disk (the
        // background writer included, which the drop joins), then a new process opens.
        Mode::Stop => {
            drop(m);
            drop(plan);
            CheckpointManager::open(dir.path(), options(layout)).unwrap()
        }
        // The process goes on with the same manager.
        Mode::Fail => {
            drop(plan);
            m
        }
    };
    if mode == Mode::Stop {
        // Opening removed every temporary, and what belongs to steps up to the newest
        // committed one (a prune that died); a later step's files wait for the next save.
        assert_no_temporaries(dir.path(), &what);
        let newest = committed(dir.path()).into_iter().max().unwrap();
        assert_no_leftovers_up_to(dir.path(), newest, &what);
    }
    let on_disk = check_state(&m, dir.path(), &what);
    // Nothing committed is lost: the save under test may have committed its step and pruned
    // the oldest, in that order.
    let allowed: [&[u64]; 3] = [&[1, 2], &[1, 2, 3], &[2, 3]];
    let v: Vec<u64> = on_disk.iter().copied().collect();
    assert!(
        allowed.contains(&v.as_slice()),
        "{what}: committed steps {v:?}"
    );
    // The save under test reports success only if its step is committed (a failure after the
    // commit, at the pointer update or the pruning, leaves it committed all the same).
    if r.is_ok() {
        assert!(
            on_disk.contains(&STEP),
            "{what}: reported saved, not committed"
        );
    }
    // Saving the same step again: refused, saying so, if it is committed; else it saves.
    let again = save(&mut m, STEP, Saving::Sync);
    if on_disk.contains(&STEP) {
        match again {
            Err(Error::Checkpoint {
                problem: CheckpointProblem::StepExists,
                detail,
                ..
            }) => assert!(detail.contains("saved already"), "{what}: {detail}"),
            other => panic!("{what}: saving a committed step again gave {other:?}"),
        }
    } else {
        again.unwrap_or_else(|e| panic!("{what}: saving step {STEP} again: {e}"));
    }
    // A job resuming from the latest saves the next step.
    let next = m.latest().unwrap().step + 1;
    save(&mut m, next, how).unwrap_or_else(|e| panic!("{what}: resuming at {next}: {e}"));
    let after = check_state(&m, dir.path(), &what);
    assert_eq!(after.iter().max(), Some(&next), "{what}");
    assert_no_leftovers(dir.path(), &what);
    drop(m);
    let m = CheckpointManager::open(dir.path(), options(layout)).unwrap();
    check_state(&m, dir.path(), &what);
    assert_no_leftovers(dir.path(), &what);
}

/// The operations of a save of `STEP` that nothing fails.
fn dry_run(layout: Layout, how: Saving) -> Vec<(Op, PathBuf)> {
    let (dir, mut m) = prepared(layout, how);
    let plan = fault::install(dir.path(), None, Mode::Fail);
    save(&mut m, STEP, how).unwrap();
    let seen = plan.seen();
    drop(plan);
    check_state(&m, dir.path(), "dry run");
    assert_no_leftovers(dir.path(), "dry run");
    seen
}

/// Every operation of the save (the `j`-th of each kind, for each `j` the dry run counted),
/// failed then stopped; returns how many there are. Checks that the save does each of
/// `kinds`.
fn every_point(layout: Layout, how: Saving, kinds: &[Op]) -> usize {
    let ops = dry_run(layout, how);
    let mut count: BTreeMap<Op, usize> = BTreeMap::new();
    for (op, _) in &ops {
        *count.entry(*op).or_default() += 1;
    }
    for k in kinds {
        assert!(
            count.contains_key(k),
            "{layout:?}, {how:?}: no {k:?} among {ops:?}"
        );
    }
    for mode in [Mode::Fail, Mode::Stop] {
        for (&op, &c) in &count {
            for j in 0..c {
                crash_at(layout, how, mode, op, j);
            }
        }
    }
    eprintln!(
        "{layout:?}, {how:?}: {} operations ({count:?}), each failed and stopped",
        ops.len()
    );
    ops.len()
}

const SHARDED: Layout = Layout::Sharded {
    shards: 2,
    incremental: true,
};

const SINGLE_KINDS: [Op; 7] = [
    Op::Create,
    Op::Write,
    Op::SyncFile,
    Op::SyncDir,
    Op::Link,
    Op::Rename,
    Op::Unlink,
];

#[test]
fn every_operation_of_a_single_file_save_on_the_callers_thread() {
    every_point(Layout::Single, Saving::Sync, &SINGLE_KINDS);
}

#[test]
fn every_operation_of_a_single_file_save_in_the_background() {
    every_point(Layout::Single, Saving::Async, &SINGLE_KINDS);
}

#[test]
fn every_operation_of_an_incremental_sharded_save_on_the_callers_thread() {
    every_point(SHARDED, Saving::Sync, &SINGLE_KINDS);
}

#[test]
fn every_operation_of_an_incremental_sharded_save_in_the_background() {
    every_point(SHARDED, Saving::Async, &SINGLE_KINDS);
}

/// A committed step the state file does not list (the process was killed at the state
/// file's rename, the pointer update) is the latest, in both layouts: the resumed job saves
/// the step after it, and the step itself is refused, saying that it is committed.
#[test]
fn a_step_committed_before_its_pointer_moved_is_the_latest() {
    for layout in [Layout::Single, SHARDED] {
        let at_state = dry_run(layout, Saving::Sync)
            .iter()
            .filter(|(op, _)| *op == Op::Rename)
            .position(|(_, p)| p.ends_with(STATE_FILE))
            .unwrap();
        let (dir, mut m) = prepared(layout, Saving::Sync);
        let plan = fault::install(dir.path(), Some((Op::Rename, at_state)), Mode::Stop);
        save(&mut m, STEP, Saving::Sync).unwrap_err();
        drop(m);
        drop(plan);
        let st = CheckpointState::read(dir.path()).unwrap().unwrap();
        assert_eq!(st.model_checkpoint_path, "ckpt-2", "{layout:?}");
        let mut m = CheckpointManager::open(dir.path(), options(layout)).unwrap();
        assert_eq!(m.steps().unwrap(), [1, 2, 3], "{layout:?}");
        let latest = m.latest().unwrap();
        assert_eq!((latest.step, latest.latest), (STEP, true), "{layout:?}");
        assert_eq!(m.restore_latest().unwrap().0, STEP);
        assert_eq!(m.list().unwrap().iter().filter(|c| c.latest).count(), 1);
        let e = save(&mut m, STEP, Saving::Sync).unwrap_err();
        assert!(
            matches!(&e, Error::Checkpoint { problem: CheckpointProblem::StepExists, detail, .. }
                if detail.contains("saved already")),
            "{e}"
        );
        save(&mut m, STEP + 1, Saving::Sync).unwrap();
        // Keep last 2, in the order of saving: 3 (recorded by this save) and 4.
        assert_eq!(m.steps().unwrap(), [STEP, STEP + 1], "{layout:?}");
        assert_no_leftovers(dir.path(), "after the next save");
    }
}

/// A checkpoint the state file does not list and that is older than it (copied in, or left
/// by a prune of an earlier version that rewrote the state file first) is listed but is not
/// the latest.
#[test]
fn an_unlisted_checkpoint_older_than_the_state_file_is_not_the_latest() {
    let (dir, mut m) = prepared(Layout::Single, Saving::Sync);
    save(&mut m, STEP, Saving::Sync).unwrap();
    drop(m);
    // Step 1 was pruned; an old index of it comes back, older than the state file.
    let d = dir.path();
    std::fs::hard_link(d.join("ckpt-2.index"), d.join("ckpt-1.index")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let st = CheckpointState::read(d).unwrap().unwrap();
    st.write(d).unwrap();
    let m = CheckpointManager::open(d, options(Layout::Single)).unwrap();
    assert_eq!(m.steps().unwrap(), [1, 2, 3]);
    assert_eq!(m.latest().unwrap().step, STEP);
}
