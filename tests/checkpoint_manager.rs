//! `interop::CheckpointManager` (issue 16): saves, the `checkpoint` state file (ours and
//! TensorFlow's), keep policies by exact expected sets, background saves and their errors,
//! `DIR` / `DIR@STEP` inputs, and a writer process killed (SIGKILL) at random moments.

mod support;

use std::path::Path;
use std::time::Duration;

use paramdex::interop::{
    open_any, BestBy, Candidate, CheckpointManager, CheckpointState, KeepPolicy, Layout,
    ManagerOptions, OwnedTensor, STATE_FILE,
};
use paramdex::{CheckpointProblem, DType, Error, MetaValue, Metadata, Reader, Tensor};
use support::ckpt::{keep_last, keep_last_and_best_acc, meta, save_three_steps};
use support::{f32_bytes, kill_child_at_random_moment, Rng};

fn fast(keep: KeepPolicy) -> ManagerOptions {
    let mut o = ManagerOptions {
        keep,
        ..Default::default()
    };
    o.writer.sync = false;
    o
}

fn save(m: &mut CheckpointManager, step: u64, acc: f64) {
    let w = f32_bytes(&[step as f32; 3]);
    m.save(
        step,
        [("w", Tensor::new(DType::Float32, &[3], &w))],
        meta(step, acc),
    )
    .unwrap();
}

fn w_of(input: &str) -> Vec<f32> {
    let s = open_any(input).unwrap();
    let t = s.load(b"w").unwrap().unwrap();
    t.data
        .raw_bytes()
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn cand(step: u64, ts: Option<f64>, md: Option<&Metadata>) -> Candidate<'_> {
    Candidate {
        step,
        timestamp: ts,
        metadata: md,
    }
}

#[test]
fn keep_policies_keep_exactly_the_expected_steps() {
    let steps = [0u64, 50, 100, 150, 250, 300];
    let c: Vec<Candidate<'_>> = steps.iter().map(|s| cand(*s, None, None)).collect();
    let keep = |p: KeepPolicy| p.keep(&c).into_iter().collect::<Vec<u64>>();
    assert_eq!(keep(KeepPolicy::default()), steps);
    let last2 = keep_last(2);
    assert_eq!(keep(last2.clone()), [250, 300]);
    let every100 = KeepPolicy {
        every_steps: Some(100),
        ..Default::default()
    };
    assert_eq!(keep(every100), [0, 100, 250, 300]);
    let both = KeepPolicy {
        last: Some(1),
        every_steps: Some(200),
        ..Default::default()
    };
    assert_eq!(keep(both), [0, 250, 300]);

    // Wall time: the earliest in each 60 s span since the epoch.
    let ts = [600.0, 610.0, 659.9, 660.0, 800.0, 1000.0];
    let c: Vec<Candidate<'_>> = steps
        .iter()
        .zip(ts)
        .map(|(s, t)| cand(*s, Some(t), None))
        .collect();
    let every_minute = KeepPolicy {
        every_duration: Some(Duration::from_secs(60)),
        ..Default::default()
    };
    assert_eq!(
        every_minute.keep(&c).into_iter().collect::<Vec<_>>(),
        [0, 150, 250, 300]
    );

    // Best by a metric: lower loss; a tie goes to the later step; no metric, no rank.
    let loss = |x: f64| {
        let mut m = Metadata::new();
        m.insert("loss", MetaValue::Float(x)).unwrap();
        m
    };
    let mds = [
        loss(0.5),
        loss(0.2),
        Metadata::new(),
        loss(0.2),
        loss(f64::NAN),
        loss(0.9),
    ];
    let c: Vec<Candidate<'_>> = steps
        .iter()
        .zip(&mds)
        .map(|(s, m)| cand(*s, None, Some(m)))
        .collect();
    let best = |count, higher_is_better| KeepPolicy {
        best: Some(BestBy {
            key: "loss".into(),
            count,
            higher_is_better,
        }),
        ..Default::default()
    };
    let k = |p: KeepPolicy| p.keep(&c).into_iter().collect::<Vec<_>>();
    assert_eq!(k(best(1, false)), [150]);
    assert_eq!(k(best(3, false)), [0, 50, 150]);
    assert_eq!(k(best(1, true)), [300]);
}

#[test]
fn saves_point_the_state_file_at_the_latest_and_prune_by_policy() {
    let dir = tempfile::tempdir().unwrap();
    let policy = keep_last_and_best_acc(2);
    let mut m = CheckpointManager::open(dir.path(), fast(policy)).unwrap();
    let accs = [0.1, 0.9, 0.3, 0.2, 0.4, 0.5];
    for (i, acc) in accs.iter().enumerate() {
        save(&mut m, (i as u64 + 1) * 10, *acc);
    }
    assert_eq!(m.steps().unwrap(), [20, 50, 60]);
    let latest = m.latest().unwrap();
    assert_eq!(latest.step, 60);
    assert!(latest.latest);
    assert_eq!(
        latest.metadata.as_ref().unwrap().get("acc"),
        Some(&MetaValue::Float(0.5))
    );
    // The state file, exactly as TensorFlow lists them: oldest first, the latest last.
    let st = CheckpointState::read(dir.path()).unwrap().unwrap();
    assert_eq!(st.model_checkpoint_path, "ckpt-60");
    assert_eq!(
        st.all_model_checkpoint_paths,
        ["ckpt-20", "ckpt-50", "ckpt-60"]
    );
    assert_eq!(st.all_model_checkpoint_timestamps.len(), 3);
    // Pruned checkpoints left no file behind; kept ones are TensorFlow's two names of one file.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "checkpoint",
            "ckpt-20.data-00000-of-00001",
            "ckpt-20.index",
            "ckpt-50.data-00000-of-00001",
            "ckpt-50.index",
            "ckpt-60.data-00000-of-00001",
            "ckpt-60.index",
        ]
    );
    for step in [20, 50, 60] {
        m.restore(step).unwrap().verify(1).unwrap();
        Reader::open(m.prefix(step).with_extension("index"))
            .unwrap()
            .verify()
            .unwrap();
    }
    assert_eq!(w_of(dir.path().to_str().unwrap()), [60.0; 3]);
    let (step, store) = m.restore_latest().unwrap();
    assert_eq!(step, 60);
    assert_eq!(
        store.metadata().unwrap().get("step"),
        Some(&MetaValue::Int(60))
    );
    let at = format!("{}@50", dir.path().display());
    assert_eq!(w_of(&at), [50.0; 3]);
    let missing = format!("{}@40", dir.path().display());
    assert!(matches!(
        open_any(&missing),
        Err(Error::Checkpoint {
            problem: CheckpointProblem::NoSuchStep,
            ..
        })
    ));

    // A prune with another policy: a dry run changes nothing; the latest always stays.
    let none = keep_last(0);
    let dry = m.prune(&none, true).unwrap();
    assert_eq!((dry.deleted, dry.kept), (vec![20, 50], vec![60]));
    assert_eq!(m.steps().unwrap(), [20, 50, 60]);
    let done = m.prune(&none, false).unwrap();
    assert_eq!(done.deleted, [20, 50]);
    assert_eq!(m.steps().unwrap(), [60]);
    assert!(matches!(
        m.restore(20),
        Err(Error::Checkpoint {
            problem: CheckpointProblem::NoSuchStep,
            ..
        })
    ));
    let w = f32_bytes(&[0.0; 3]);
    let again = m.save(
        60,
        [("w", Tensor::new(DType::Float32, &[3], &w))],
        Metadata::new(),
    );
    assert!(matches!(
        again,
        Err(Error::Checkpoint {
            problem: CheckpointProblem::StepExists,
            ..
        })
    ));
}

/// `file:///dir` and `file:///dir@STEP` name a checkpoint directory's latest and one step, as
/// the plain path does.
#[test]
#[cfg(feature = "s3")]
fn file_urls_of_a_checkpoint_directory_open_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), fast(keep_last(3))).unwrap();
    save(&mut m, 7, 0.1);
    save(&mut m, 8, 0.2);
    let url = format!("file://{}", dir.path().display());
    assert_eq!(w_of(&url), [8.0; 3]);
    assert_eq!(w_of(&format!("{url}@7")), [7.0; 3]);
    // A step that is not there is the manager's error, not "no such object".
    match open_any(format!("{url}@9")) {
        Err(Error::Checkpoint {
            problem: CheckpointProblem::NoSuchStep,
            ..
        }) => {}
        other => panic!("expected NoSuchStep, got {:?}", other.err()),
    }
    // A directory without a state file is still not found.
    let empty = tempfile::tempdir().unwrap();
    assert!(open_any(format!("file://{}", empty.path().display())).is_err());
}

#[test]
fn the_state_file_round_trips() {
    let st = CheckpointState {
        model_checkpoint_path: "ckpt-3".into(),
        all_model_checkpoint_paths: vec![
            "ckpt-1".into(),
            "sub dir/\"q\"-2".into(),
            "ckpt-3".into(),
        ],
        all_model_checkpoint_timestamps: vec![1.5, 1700000000.25, 3.0],
        last_preserved_timestamp: 7.0,
    };
    let text = st.to_text();
    assert_eq!(
        CheckpointState::parse(text.as_bytes(), Path::new("d")).unwrap(),
        st
    );
    let dir = tempfile::tempdir().unwrap();
    st.write(dir.path()).unwrap();
    assert_eq!(CheckpointState::read(dir.path()).unwrap(), Some(st));
}

/// The exact text `tf.train.CheckpointManager` writes (TensorFlow's text-format printer:
/// relative paths, timestamps as Python floats), over checkpoints saved by paramdex.
#[test]
fn a_state_file_tensorflow_wrote_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap();
    for step in [1, 2, 3] {
        save(&mut m, step, 0.0);
    }
    let tf_text = "model_checkpoint_path: \"ckpt-2\"\n\
                   all_model_checkpoint_paths: \"ckpt-1\"\n\
                   all_model_checkpoint_paths: \"ckpt-2\"\n\
                   all_model_checkpoint_timestamps: 1763900000.1234567\n\
                   all_model_checkpoint_timestamps: 1763900060.5\n\
                   last_preserved_timestamp: 1763899990.25\n";
    std::fs::write(dir.path().join(STATE_FILE), tf_text).unwrap();
    let all = m.list().unwrap();
    let steps: Vec<u64> = all.iter().map(|c| c.step).collect();
    // ckpt-3 is found beside the state file (a save committed before its pointer was written).
    assert_eq!(steps, [1, 2, 3]);
    assert_eq!(all[0].timestamp, Some(1763900000.1234567));
    assert_eq!(all[1].timestamp, Some(1763900060.5));
    assert_eq!(m.latest().unwrap().step, 2, "the pointer names the latest");
    assert_eq!(w_of(dir.path().to_str().unwrap()), [2.0; 3]);

    // An absolute path from another machine (the directory moved): found by its file name.
    let moved = "model_checkpoint_path: \"/elsewhere/run7/ckpt-2\"\n\
                 all_model_checkpoint_paths: \"/elsewhere/run7/ckpt-2\"\n";
    std::fs::write(dir.path().join(STATE_FILE), moved).unwrap();
    assert_eq!(m.latest().unwrap().step, 2);
    // A pointer to a checkpoint that is gone: the manager falls back to the highest step, but
    // an input naming the directory is an error naming what is missing.
    std::fs::write(
        dir.path().join(STATE_FILE),
        "model_checkpoint_path: \"ckpt-9\"\nlast_preserved_timestamp: 5.5\n",
    )
    .unwrap();
    assert_eq!(m.latest().unwrap().step, 3);
    let e = open_any(dir.path()).err().unwrap().to_string();
    assert!(e.contains("ckpt-9"), "{e}");
    // The next save keeps TensorFlow's bookkeeping and lists every checkpoint.
    save(&mut m, 4, 0.0);
    let st = CheckpointState::read(dir.path()).unwrap().unwrap();
    assert_eq!(st.model_checkpoint_path, "ckpt-4");
    assert_eq!(
        st.all_model_checkpoint_paths,
        ["ckpt-1", "ckpt-2", "ckpt-3", "ckpt-4"]
    );
    assert_eq!(st.last_preserved_timestamp, 5.5, "kept as read");
}

#[test]
fn hostile_state_files_are_errors_never_panics() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap();
    save(&mut m, 1, 0.0);
    let cases: Vec<Vec<u8>> = vec![
        b"model_checkpoint_path: ckpt-1\n".to_vec(),
        b"model_checkpoint_path: \"ckpt-1\n".to_vec(),
        b"model_checkpoint_path \"ckpt-1\"\n".to_vec(),
        b"all_model_checkpoint_timestamps: nan\n".to_vec(),
        b"all_model_checkpoint_timestamps: 1e999\n".to_vec(),
        b"model_checkpoint_path: \"\\777\"\n".to_vec(),
        vec![0xff, 0xfe, b'\n'],
        b"model_checkpoint_path: \"\\".to_vec(),
    ];
    for c in &cases {
        std::fs::write(dir.path().join(STATE_FILE), c).unwrap();
        assert!(
            matches!(
                m.list(),
                Err(Error::Checkpoint {
                    problem: CheckpointProblem::StateFile,
                    ..
                })
            ),
            "{:?}",
            String::from_utf8_lossy(c)
        );
    }
    // Too large: refused before it is read whole.
    let big = "all_model_checkpoint_paths: \"ckpt-1\"\n".repeat(200_000);
    std::fs::write(dir.path().join(STATE_FILE), big).unwrap();
    assert!(matches!(m.list(), Err(Error::LimitExceeded { .. })));
    // Arbitrary bytes: an answer, never a panic.
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let alphabet = b"model_checkpoint_path:all_\"'\\0x17\n -";
    for _ in 0..500 {
        let len = (x % 64) as usize;
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                alphabet[(x % alphabet.len() as u64) as usize]
            })
            .collect();
        let _ = CheckpointState::parse(&bytes, dir.path());
    }
    // Paths outside the directory are never managed (nor pruned): only file names inside.
    let outside = tempfile::tempdir().unwrap();
    let mut other = CheckpointManager::open(outside.path(), fast(KeepPolicy::default())).unwrap();
    save(&mut other, 7, 0.0);
    let escape = format!(
        "model_checkpoint_path: \"ckpt-1\"\nall_model_checkpoint_paths: \"{}\"\n\
         all_model_checkpoint_paths: \"../{}/ckpt-7\"\nall_model_checkpoint_paths: \"ckpt-1\"\n",
        other.prefix(7).display(),
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    std::fs::write(dir.path().join(STATE_FILE), escape).unwrap();
    assert_eq!(m.steps().unwrap(), [1]);
    let none = keep_last(0);
    m.prune(&none, false).unwrap();
    assert_eq!(other.steps().unwrap(), [7]);
    // Unknown fields (a later TensorFlow) are skipped; a save replaces a damaged file.
    std::fs::write(
        dir.path().join(STATE_FILE),
        "model_checkpoint_path: \"ckpt-1\"\nfuture_field: 3\n",
    )
    .unwrap();
    assert_eq!(m.latest().unwrap().step, 1);
    std::fs::write(dir.path().join(STATE_FILE), "garbage").unwrap();
    save(&mut m, 2, 0.0);
    assert_eq!(m.steps().unwrap(), [1, 2]);
    assert_eq!(m.latest().unwrap().step, 2);
}

#[test]
fn background_saves_capture_copies_or_take_ownership() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ManagerOptions {
        max_in_flight: 2,
        ..fast(KeepPolicy::default())
    };
    let mut m = CheckpointManager::open(dir.path(), opts).unwrap();
    let mut buf = f32_bytes(&[1.0; 3]);
    for step in 1..=5u64 {
        let r = m
            .save_async(
                step,
                [("w", Tensor::new(DType::Float32, &[3], &buf))],
                meta(step, 0.0),
            )
            .unwrap();
        assert_eq!(r.bytes, 12);
        assert!(m.in_flight() <= 2, "{} in flight", m.in_flight());
        // The caller's buffer is its own again at once.
        buf = f32_bytes(&[step as f32 + 1.0; 3]);
    }
    let owned = OwnedTensor::new("w", DType::Float32, vec![3], f32_bytes(&[9.0; 3]));
    let r = m.save_async_owned(9, vec![owned], Metadata::new()).unwrap();
    assert_eq!(r.captured, Duration::ZERO);
    m.wait().unwrap();
    assert_eq!(m.steps().unwrap(), [1, 2, 3, 4, 5, 9]);
    for step in 1..=5u64 {
        let at = format!("{}@{step}", dir.path().display());
        assert_eq!(w_of(&at), [step as f32; 3]);
    }
    assert_eq!(m.latest().unwrap().step, 9);
}

#[test]
fn a_background_failure_surfaces_on_the_next_call_and_in_wait() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap();
    let w = f32_bytes(&[1.0; 3]);
    let t = Tensor::new(DType::Float32, &[3], &w);
    // The same name twice: the background writer fails.
    m.save_async(1, [("w", t), ("w", t)], Metadata::new())
        .unwrap();
    // max_in_flight 1: the next call waits for it, then reports it instead of saving.
    let next = m.save_async(2, [("w", t)], Metadata::new());
    match next {
        Err(Error::BackgroundSave { step: 1, source }) => {
            assert!(matches!(*source, Error::DuplicateName { .. }), "{source}")
        }
        other => panic!("{other:?}"),
    }
    assert!(m.steps().unwrap().is_empty());
    // Reported once; the manager goes on.
    m.save_async(2, [("w", t)], Metadata::new()).unwrap();
    m.save_async(3, [("w", t), ("w", t)], Metadata::new())
        .unwrap();
    assert!(matches!(
        m.wait(),
        Err(Error::BackgroundSave { step: 3, .. })
    ));
    m.wait().unwrap();
    assert_eq!(m.steps().unwrap(), [2]);
}

#[test]
fn sharded_incremental_saves_survive_pruning_their_base() {
    let dir = tempfile::tempdir().unwrap();
    let opts = ManagerOptions {
        layout: Layout::Sharded {
            shards: 2,
            incremental: true,
        },
        ..fast(keep_last(1))
    };
    let mut m = CheckpointManager::open(dir.path(), opts).unwrap();
    let a = save_three_steps(&mut m, 0.0);
    assert_eq!(m.steps().unwrap(), [3]);
    let r = Reader::open(m.prefix(3).with_extension("index")).unwrap();
    assert!(r.is_sharded());
    // "a" and "b" were reused from step 2 (itself reusing step 1's files): linked, not written.
    assert!(r.header().shards.iter().any(|s| s.reused));
    r.verify().unwrap();
    let s = m.restore(3).unwrap();
    assert_eq!(&*s.load(b"a").unwrap().unwrap().data.raw_bytes(), &a[..]);
    assert_eq!(s.metadata().unwrap().get("step"), Some(&MetaValue::Int(3)));
}

// ---------------------------------------------------------------------------------------------
// A process saving in a loop, killed with SIGKILL at random moments.

const CHILD_DIR: &str = "PARAMDEX_CKPT_CHILD_DIR";

/// The child side of the crash test: does nothing unless started by it. Saves forever (in the
/// background, two in flight, keeping the last 3, with fsync), from step 1000 * round.
#[test]
fn checkpoint_crash_child_helper() {
    let Ok(dir) = std::env::var(CHILD_DIR) else {
        return;
    };
    let opts = ManagerOptions {
        max_in_flight: 2,
        keep: keep_last(3),
        layout: if std::env::var("PARAMDEX_CKPT_SHARDED").is_ok() {
            Layout::Sharded {
                shards: 2,
                incremental: true,
            }
        } else {
            Layout::Single
        },
        ..Default::default()
    };
    let mut m = CheckpointManager::open(&dir, opts).unwrap();
    // As a training job resumes: after the latest (issue 44: a kill between a save's commit and
    // its pointer update made `latest()` lag a step behind, and every restart then died saving
    // a step that existed).
    let start = m.latest().map_or(1, |c| c.step + 1);
    let fixed = vec![7u8; 1 << 20];
    let save = |m: &mut CheckpointManager, step: u64| {
        let moving = vec![step as u8; 300_000];
        m.save_async(
            step,
            [
                ("fixed", Tensor::new(DType::UInt8, &[1 << 20], &fixed)),
                ("moving", Tensor::new(DType::UInt8, &[300_000], &moving)),
            ],
            meta(step, 0.0),
        )
        .unwrap();
    };
    // One complete checkpoint per round before the killing may start.
    save(&mut m, start);
    m.wait().unwrap();
    println!("PDX-STARTED");
    for step in start + 1.. {
        save(&mut m, step);
    }
}

/// Every listed checkpoint verifies and holds its step's tensors; the pointer names one.
fn check_dir(dir: &Path) -> usize {
    let m = CheckpointManager::open(dir, ManagerOptions::default()).unwrap();
    let all = m.list().unwrap();
    // Each round completes a save before it can be killed: the state file is always there,
    // whole, and names a listed checkpoint.
    let st = CheckpointState::read(dir)
        .expect("the state file parses")
        .expect("a state file");
    let named = dir.join(&st.model_checkpoint_path);
    assert!(
        all.iter().any(|c| c.prefix == named),
        "the pointer {named:?} names no complete checkpoint"
    );
    // The latest is the newest committed step: the one the pointer names, or the one saved
    // after it whose pointer update the kill prevented.
    let latest = m.latest().unwrap();
    let highest = all.iter().map(|c| c.step).max().unwrap();
    assert_eq!(latest.step, highest);
    assert_eq!(all.iter().filter(|c| c.latest).count(), 1);
    assert_eq!(m.restore_latest().unwrap().0, highest);
    for c in &all {
        let r = Reader::open(c.prefix.with_extension("index")).unwrap();
        r.verify().unwrap();
        let moving = r.get("moving").unwrap().unwrap();
        assert!(moving.data().iter().all(|b| *b == c.step as u8));
        assert_eq!(
            c.metadata.as_ref().unwrap().get("step"),
            Some(&MetaValue::Int(c.step as i64))
        );
    }
    all.len()
}

fn killed_at_random_moments(sharded: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(0x2545_f491_4f6c_dd1du64 ^ u64::from(sharded));
    let mut seen = 0;
    for _round in 0..6 {
        let mut envs = vec![(CHILD_DIR, dir.path().as_os_str())];
        if sharded {
            envs.push(("PARAMDEX_CKPT_SHARDED", std::ffi::OsStr::new("1")));
        }
        kill_child_at_random_moment("checkpoint_crash_child_helper", &envs, &mut rng, 400);
        // check_dir opens a manager, which removes what the killed save had staged (each a
        // whole checkpoint's worth of disk).
        seen += check_dir(dir.path());
        assert_eq!(staged_files(dir.path()), Vec::<String>::new());
        // Only checkpoints' files, the state file and (until the next save) files of a step
        // the kill left uncommitted remain: no temporary of any kind.
        let hidden: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(hidden.is_empty(), "{hidden:?}");
    }
    assert!(seen > 0, "no checkpoint was ever completed");
}

/// The staged (temporary) files of checkpoint saves in `dir`.
fn staged_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".ckpt-") && n.ends_with(".pdx-tmp"))
        .collect()
}

/// A staged file whose writer is gone (no lock on it) is removed when a manager opens the
/// directory; one a live writer holds (locked) stays, and so do other managers' and other
/// programs' files.
#[test]
fn opening_a_manager_removes_only_abandoned_staged_files() {
    let dir = tempfile::tempdir().unwrap();
    let abandoned = dir
        .path()
        .join(".ckpt-5200.data-00000-of-00001.k3j4h5g6f7.pdx-tmp");
    std::fs::write(&abandoned, vec![7u8; 4096]).unwrap();
    let live = dir
        .path()
        .join(".ckpt-5300.data-00000-of-00001.a1b2c3d4e5.pdx-tmp");
    std::fs::write(&live, b"being written").unwrap();
    let writer = std::fs::File::open(&live).unwrap();
    writer.try_lock().unwrap();
    let other = dir.path().join(".model-7.index.a1b2c3d4e5.pdx-tmp");
    std::fs::write(&other, b"another manager's").unwrap();
    let unrelated = dir.path().join(".ckpt-notes.txt");
    std::fs::write(&unrelated, b"a user's file").unwrap();
    drop(CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap());
    assert!(!abandoned.exists());
    assert!(live.exists() && other.exists() && unrelated.exists());
    // Once its writer is gone, the next open removes it too.
    drop(writer);
    drop(CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap());
    assert!(!live.exists() && other.exists());
}

#[test]
fn a_saving_process_killed_at_random_moments_leaves_complete_checkpoints_and_a_pointer() {
    killed_at_random_moments(false);
}

#[test]
fn a_sharded_incremental_saving_process_killed_at_random_moments_leaves_complete_checkpoints() {
    killed_at_random_moments(true);
}

/// `keep_last` keeps the most recent saves, as TensorFlow's `max_to_keep` does, not the highest
/// steps: a job that resumed from step 300 of a directory holding 300 and 400 and saved 310 and
/// 320 keeps 310 and 320 (its newest work), and the abandoned 400 goes first.
#[test]
fn keep_last_keeps_the_most_recent_saves_after_a_rollback() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap();
    save(&mut m, 300, 0.1);
    save(&mut m, 400, 0.2);
    drop(m);
    // The job resumes from 300 with keep_last(2).
    let mut m = CheckpointManager::open(dir.path(), fast(keep_last(2))).unwrap();
    assert_eq!(w_of(&format!("{}@300", dir.path().display())), [300.0; 3]);
    save(&mut m, 310, 0.3);
    assert_eq!(m.steps().unwrap(), [310, 400]);
    save(&mut m, 320, 0.4);
    assert_eq!(m.steps().unwrap(), [310, 320]);
    assert_eq!(m.latest().unwrap().step, 320);
    // The state file lists them in the order they were saved, the latest last, as TensorFlow's
    // CheckpointManager reads it back.
    let st = CheckpointState::read(dir.path()).unwrap().unwrap();
    assert_eq!(st.all_model_checkpoint_paths, ["ckpt-310", "ckpt-320"]);
    // A prune by hand keeps the most recent one, not the highest step.
    save(&mut m, 500, 0.5);
    save(&mut m, 330, 0.6);
    assert_eq!(m.steps().unwrap(), [330, 500]);
    let report = m.prune(&keep_last(1), false).unwrap();
    assert_eq!(report.deleted, [500]);
    assert_eq!(m.steps().unwrap(), [330]);
}

/// A checkpoint the state file does not list (committed just before a crash, before the pointer
/// moved) counts by its index's time among the saves the state file lists.
#[test]
fn keep_last_orders_an_unlisted_checkpoint_by_its_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = CheckpointManager::open(dir.path(), fast(KeepPolicy::default())).unwrap();
    save(&mut m, 10, 0.1);
    save(&mut m, 20, 0.2);
    // Step 5 saved last, then the state file lost it (the crash window).
    save(&mut m, 5, 0.3);
    let mut st = CheckpointState::read(dir.path()).unwrap().unwrap();
    st.all_model_checkpoint_paths.retain(|p| p != "ckpt-5");
    st.all_model_checkpoint_timestamps.truncate(2);
    st.model_checkpoint_path = "ckpt-20".into();
    st.write(dir.path()).unwrap();
    let report = m.prune(&keep_last(2), false).unwrap();
    assert_eq!(report.deleted, [10]);
    assert_eq!(m.steps().unwrap(), [5, 20]);
}
