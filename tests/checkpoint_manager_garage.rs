//! `CheckpointManager` over an object-storage directory (`s3://bucket/dir`), on a real 3-node
//! Garage cluster (`tests/support/garage.rs`): single-file and sharded saves (synchronous,
//! background copies, handed over), `steps` / `latest` / `restore`, the state object in
//! TensorFlow's text format, pruning (dry run first, then for real, never the latest), the
//! `s3://DIR` and `s3://DIR@STEP` inputs of `open_any`, checkpoints whose index never arrived
//! (ignored, and cleaned by the next save of that step), damaged state objects, and a saving
//! process SIGKILLed at random moments (single files and sharded: every listed checkpoint
//! complete, the state object naming one). Garage ignores conditional PUTs: nothing here relies
//! on them.
//!
//! The library resolves `s3://` URLs from the `AWS_*` environment, which every test sets once
//! (the same values: one shared cluster) before any request.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

mod support;

use std::sync::Arc;

use object_store::ObjectStore;
use paramdex::interop::{
    open_any, CheckpointManager, CheckpointState, KeepPolicy, Layout, ManagerOptions, OwnedTensor,
};
use paramdex::{CheckpointProblem, DType, Error, MetaValue, Metadata, SaveId, Tensor};
use support::ckpt::{keep_last, keep_last_and_best_acc, meta, save_three_steps};
use support::garage::{self, Garage};
use support::s3::{get, list_names, put, runtime, set_aws_env_once, store, with_bucket};
use support::{f32_bytes, kill_child_at_random_moment, Rng};

fn opts(layout: Layout, keep: KeepPolicy) -> ManagerOptions {
    let mut o = ManagerOptions {
        layout,
        keep,
        max_in_flight: 2,
        ..Default::default()
    };
    o.writer.sync = false;
    o
}

/// The tensors of step `step`: `w` ([step; 3] float32) and `b{i}` (uint8 of varied lengths, so
/// that a sharded save fills several shards): name, shape, bytes.
fn model(step: u64) -> Vec<(String, Vec<u64>, Vec<u8>)> {
    let mut v = vec![("w".to_string(), vec![3], f32_bytes(&[step as f32; 3]))];
    for i in 0..6u64 {
        let n = 1000 + i * 7919;
        let d = (0..n).map(|k| (k * 31 + i + step) as u8).collect();
        v.push((format!("b{i}"), vec![n], d));
    }
    v
}

fn tensors(m: &[(String, Vec<u64>, Vec<u8>)]) -> Vec<(String, Tensor<'_>)> {
    m.iter()
        .map(|(n, shape, d)| {
            let dtype = if n == "w" {
                DType::Float32
            } else {
                DType::UInt8
            };
            (n.clone(), Tensor::new(dtype, shape, d))
        })
        .collect()
}

fn owned(step: u64) -> Vec<OwnedTensor> {
    tensors(&model(step))
        .into_iter()
        .map(|(n, t)| OwnedTensor::new(n, t.dtype, t.shape.to_vec(), t.data.to_vec()))
        .collect()
}

/// Checks that `input` (any `open_any` input) holds step `step`'s tensors, every one.
fn holds_step(input: &str, step: u64) {
    let s = open_any(input).unwrap_or_else(|e| panic!("{input}: {e}"));
    check_store(&*s, step, input);
}

fn check_store(s: &dyn paramdex::interop::TensorStore, step: u64, what: &str) {
    for (n, _, d) in model(step) {
        let t = s
            .load(n.as_bytes())
            .unwrap()
            .unwrap_or_else(|| panic!("{what}: no {n}"));
        assert_eq!(t.data.raw_bytes(), &d[..], "{what}: {n}");
    }
    s.verify(2)
        .unwrap_or_else(|e| panic!("{what}: verify: {e}"));
}

fn names(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
    v.sort();
    v
}

/// [`with_bucket`] with `key` and its `s3://` URL.
fn in_bucket(
    test: &str,
    key: &str,
    f: impl FnOnce(Arc<tokio::runtime::Runtime>, Arc<dyn ObjectStore>, &str, String),
) {
    with_bucket(test, |g, rt, s| {
        f(rt, s, key, format!("s3://{}/{key}", g.bucket()))
    });
}

/// The detail of `r`, which must be the error of a step that is not there; `ok` is the
/// failure message should it succeed.
fn no_such_step<T>(r: Result<T, Error>, ok: &str) -> String {
    match r {
        Err(Error::Checkpoint {
            problem: CheckpointProblem::NoSuchStep,
            detail,
            ..
        }) => detail,
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("{ok}"),
    }
}

#[test]
fn single_file_checkpoints_in_a_bucket() {
    in_bucket(
        "single_file_checkpoints_in_a_bucket",
        "mgr-single/run",
        |rt, s, key, url| {
            // A trailing `/` names the same directory.
            let mut m = CheckpointManager::open(
                format!("{url}/"),
                opts(Layout::Single, Default::default()),
            )
            .unwrap();
            assert_eq!(m.dir().to_str(), Some(url.as_str()));
            match m.latest() {
                Err(Error::Checkpoint {
                    problem: CheckpointProblem::Empty,
                    ..
                }) => {}
                other => panic!("{other:?}"),
            }
            for step in [10, 20] {
                let md = model(step);
                m.save(step, tensors(&md), meta(step, step as f64 / 100.0))
                    .unwrap();
            }
            for step in [30, 40] {
                let md = model(step);
                let r = m
                    .save_async(step, tensors(&md), meta(step, step as f64 / 100.0))
                    .unwrap();
                assert!(r.bytes > 0);
            }
            m.save_async_owned(50, owned(50), meta(50, 0.9)).unwrap();
            m.save_async_owned(60, owned(60), meta(60, 0.1)).unwrap();
            m.wait().unwrap();
            assert_eq!(m.steps().unwrap(), [10, 20, 30, 40, 50, 60]);

            // Each checkpoint: a TensorFlow-named data object and its index, the same bytes.
            let mut want = vec!["checkpoint"];
            let all: Vec<String> = [10, 20, 30, 40, 50, 60]
                .iter()
                .flat_map(|s| {
                    [
                        format!("ckpt-{s}.index"),
                        format!("ckpt-{s}.data-00000-of-00001"),
                    ]
                })
                .collect();
            want.extend(all.iter().map(String::as_str));
            assert_eq!(list_names(&rt, &s, key), names(&want));
            assert_eq!(
                get(&rt, &*s, &format!("{key}/ckpt-30.index")),
                get(&rt, &*s, &format!("{key}/ckpt-30.data-00000-of-00001"))
            );

            // The state object, in TensorFlow's text format, the latest last.
            let text =
                String::from_utf8(get(&rt, &*s, &format!("{key}/checkpoint")).unwrap()).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            assert_eq!(lines[0], "model_checkpoint_path: \"ckpt-60\"");
            let paths: Vec<&str> = lines
                .iter()
                .filter_map(|l| l.strip_prefix("all_model_checkpoint_paths: "))
                .collect();
            assert_eq!(
                paths,
                [
                    "\"ckpt-10\"",
                    "\"ckpt-20\"",
                    "\"ckpt-30\"",
                    "\"ckpt-40\"",
                    "\"ckpt-50\"",
                    "\"ckpt-60\""
                ]
            );
            let st = CheckpointState::parse(text.as_bytes(), std::path::Path::new(&url)).unwrap();
            assert_eq!(st.all_model_checkpoint_timestamps.len(), 6);
            assert!(st
                .all_model_checkpoint_timestamps
                .windows(2)
                .all(|w| w[0] <= w[1]));

            // latest, find, restore, list.
            let latest = m.latest().unwrap();
            assert_eq!((latest.step, latest.latest), (60, true));
            assert_eq!(
                latest.prefix.to_str(),
                Some(format!("{url}/ckpt-60").as_str())
            );
            assert_eq!(
                latest.metadata.as_ref().unwrap().get("acc"),
                Some(&MetaValue::Float(0.1))
            );
            let (step, store60) = m.restore_latest().unwrap();
            assert_eq!(step, 60);
            check_store(&*store60, 60, "restore_latest");
            check_store(&*m.restore(30).unwrap(), 30, "restore(30)");
            let list = m.list().unwrap();
            assert_eq!(list.len(), 6);
            for c in &list {
                assert_eq!(
                    c.metadata.as_ref().unwrap().get("step"),
                    Some(&MetaValue::Int(c.step as i64))
                );
                assert!(c.bytes > 0 && c.timestamp.is_some());
            }
            no_such_step(m.restore(15), "restored a step never saved");
            match m.save(20, tensors(&model(20)), Metadata::new()) {
                Err(Error::Checkpoint {
                    problem: CheckpointProblem::StepExists,
                    ..
                }) => {}
                other => panic!("{other:?}"),
            }

            // Inputs: the directory (its latest) and DIR@STEP.
            holds_step(&url, 60);
            holds_step(&format!("{url}@20"), 20);
            no_such_step(open_any(format!("{url}@15")), "opened a step never saved");

            // Prune: a dry run changes nothing; then the best by accuracy and the last two stay.
            let policy = keep_last_and_best_acc(2);
            let before = list_names(&rt, &s, key);
            let dry = m.prune(&policy, true).unwrap();
            assert_eq!(dry.deleted, [10, 20, 30, 40]);
            assert_eq!(dry.kept, [50, 60]);
            assert!(dry.bytes > 0);
            assert_eq!(list_names(&rt, &s, key), before);
            let done = m.prune(&policy, false).unwrap();
            assert_eq!(done, dry);
            assert_eq!(m.steps().unwrap(), [50, 60]);
            assert_eq!(
                list_names(&rt, &s, key),
                names(&[
                    "checkpoint",
                    "ckpt-50.data-00000-of-00001",
                    "ckpt-50.index",
                    "ckpt-60.data-00000-of-00001",
                    "ckpt-60.index",
                ])
            );
            let st = CheckpointState::parse(
                &get(&rt, &*s, &format!("{key}/checkpoint")).unwrap(),
                std::path::Path::new(&url),
            )
            .unwrap();
            assert_eq!(st.model_checkpoint_path, "ckpt-60");
            assert_eq!(st.all_model_checkpoint_paths, ["ckpt-50", "ckpt-60"]);
            // Pruning again with the same policy deletes nothing more.
            assert!(m.prune(&policy, false).unwrap().deleted.is_empty());

            // The latest is never pruned, whatever the policy: point the state at step 50, with
            // 60 still the most recent save (which keep_last(1) keeps).
            let mut older = st.clone();
            older.model_checkpoint_path = "ckpt-50".into();
            older.all_model_checkpoint_paths = vec!["ckpt-50".into(), "ckpt-60".into()];
            put(
                &rt,
                &*s,
                &format!("{key}/checkpoint"),
                older.to_text().into_bytes(),
            );
            assert_eq!(m.latest().unwrap().step, 50);
            holds_step(&url, 50);
            let kept = m.prune(&keep_last(1), false).unwrap();
            assert!(kept.deleted.is_empty(), "{kept:?}");
            assert_eq!(kept.kept, [50, 60]);
        },
    );
}

#[test]
fn sharded_checkpoints_in_a_bucket_with_a_keep_policy() {
    in_bucket(
        "sharded_checkpoints_in_a_bucket_with_a_keep_policy",
        "mgr-sharded/run",
        |rt, s, key, url| {
            let layout = Layout::Sharded {
                shards: 3,
                incremental: false,
            };
            let keep = keep_last(2);
            let mut m = CheckpointManager::open(&url, opts(layout, keep)).unwrap();
            for step in 1..=5u64 {
                let md = model(step);
                let r = m.save_async(step, tensors(&md), meta(step, 0.5)).unwrap();
                assert!(m.in_flight() <= 2, "{r:?}");
            }
            m.wait().unwrap();
            assert_eq!(m.steps().unwrap(), [4, 5]);
            let mut want = vec!["checkpoint".to_string()];
            for step in [4, 5] {
                want.push(format!("ckpt-{step}.index"));
                for k in 0..3 {
                    want.push(format!("ckpt-{step}.data-{k:05}-of-00003"));
                }
            }
            want.sort();
            assert_eq!(list_names(&rt, &s, key), want);
            for step in [4, 5] {
                check_store(&*m.restore(step).unwrap(), step, "restore");
                holds_step(&format!("{url}@{step}"), step);
            }
            holds_step(&url, 5);
            // A synchronous save after the background ones.
            m.save(6, tensors(&model(6)), meta(6, 0.5)).unwrap();
            assert_eq!(m.steps().unwrap(), [5, 6]);
            let latest = m.latest().unwrap();
            assert_eq!(latest.step, 6);
            assert_eq!(
                latest.metadata.unwrap().get("step"),
                Some(&MetaValue::Int(6))
            );
        },
    );
}

/// Incremental sharded saves into a bucket (SPEC.md 12.5): each reuses the latest checkpoint's
/// unchanged tensors, whose data objects the store copies beside the new checkpoint; pruning
/// the earlier steps leaves the latest whole and readable.
#[test]
fn incremental_sharded_checkpoints_in_a_bucket() {
    in_bucket(
        "incremental_sharded_checkpoints_in_a_bucket",
        "mgr-incremental/run",
        |rt, s, key, url| {
            let inc = Layout::Sharded {
                shards: 2,
                incremental: true,
            };
            let mut m = CheckpointManager::open(&url, opts(inc, keep_last(1))).unwrap();
            let a = save_three_steps(&mut m, 0.5);
            assert_eq!(m.steps().unwrap(), [3]);
            // Only step 3's objects: its shards and the copies of the data objects it reuses.
            let names = list_names(&rt, &s, key);
            assert!(names
                .iter()
                .all(|n| n == "checkpoint" || n.starts_with("ckpt-3.")));
            assert!(!names
                .iter()
                .any(|n| n.contains(".reused-") || n.contains(".refs-")));
            let r = paramdex::remote::open_sharded(&format!("{url}/ckpt-3"), Default::default())
                .unwrap();
            assert!(r.header().shards.iter().any(|f| f.reused), "{names:?}");
            r.verify().unwrap();
            let st = m.restore(3).unwrap();
            assert_eq!(&*st.load(b"a").unwrap().unwrap().data.raw_bytes(), &a[..]);
            assert_eq!(
                &*st.load(b"c").unwrap().unwrap().data.raw_bytes(),
                &f32_bytes(&[3.0; 10])[..]
            );
            assert_eq!(st.metadata().unwrap().get("step"), Some(&MetaValue::Int(3)));
        },
    );
}

#[test]
fn checkpoints_whose_index_never_arrived_are_ignored() {
    in_bucket(
        "checkpoints_whose_index_never_arrived_are_ignored",
        "mgr-incomplete/run",
        |rt, s, key, url| {
            let layout = Layout::Sharded {
                shards: 3,
                incremental: false,
            };
            let mut m = CheckpointManager::open(&url, opts(layout, Default::default())).unwrap();
            m.save(1, tensors(&model(1)), meta(1, 0.5)).unwrap();
            // A save killed before its merge: one shard of two uploaded, no index.
            let mut w = paramdex::create_shard_writer(
                format!("{url}/ckpt-7"),
                0,
                2,
                SaveId::random(),
                Default::default(),
                None,
            )
            .unwrap();
            w.add("w", Tensor::new(DType::Float32, &[1], &f32_bytes(&[7.0])))
                .unwrap();
            w.finish().unwrap();
            // A single file whose index copy never happened.
            put(
                &rt,
                &*s,
                &format!("{key}/ckpt-8.data-00000-of-00001"),
                vec![0u8; 64],
            );
            assert_eq!(m.steps().unwrap(), [1]);
            assert_eq!(m.latest().unwrap().step, 1);
            holds_step(&url, 1);
            no_such_step(
                open_any(format!("{url}@7")),
                "opened a checkpoint without its index",
            );
            // A state object naming the incomplete one as the latest: the manager falls back to
            // the highest complete step, a reader of the directory is told what is missing.
            let st = CheckpointState {
                model_checkpoint_path: "ckpt-7".into(),
                all_model_checkpoint_paths: vec!["ckpt-1".into(), "ckpt-7".into()],
                ..Default::default()
            };
            put(
                &rt,
                &*s,
                &format!("{key}/checkpoint"),
                st.to_text().into_bytes(),
            );
            assert_eq!(m.steps().unwrap(), [1]);
            assert_eq!(m.latest().unwrap().step, 1);
            let detail = no_such_step(open_any(&url), "opened a checkpoint without its index");
            assert!(detail.contains("ckpt-7"), "{detail}");
            // Pruning leaves the leftovers alone (they are no checkpoint) and keeps the latest.
            let p = m.prune(&keep_last(1), false).unwrap();
            assert!(p.deleted.is_empty());
            // Saving step 7 for real: the merge takes this save's shards and deletes the stale
            // shard of the other number of shards.
            m.save(7, tensors(&model(7)), meta(7, 0.5)).unwrap();
            assert_eq!(m.steps().unwrap(), [1, 7]);
            holds_step(&url, 7);
            let left = list_names(&rt, &s, key);
            assert!(
                !left.contains(&"ckpt-7.data-00000-of-00002".to_string()),
                "{left:?}"
            );
        },
    );
}

#[test]
fn damaged_state_objects_are_errors_and_a_save_replaces_them() {
    in_bucket(
        "damaged_state_objects_are_errors_and_a_save_replaces_them",
        "mgr-damaged/run",
        |rt, s, key, url| {
            let mut m =
                CheckpointManager::open(&url, opts(Layout::Single, Default::default())).unwrap();
            put(
                &rt,
                &*s,
                &format!("{key}/checkpoint"),
                b"model_checkpoint_path: ckpt-1\n".to_vec(),
            );
            match m.steps() {
                Err(Error::Checkpoint {
                    problem: CheckpointProblem::StateFile,
                    ..
                }) => {}
                other => panic!("{other:?}"),
            }
            put(
                &rt,
                &*s,
                &format!("{key}/checkpoint"),
                vec![b'#'; (4 << 20) + 1],
            );
            match m.steps() {
                Err(Error::LimitExceeded { .. }) => {}
                other => panic!("{other:?}"),
            }
            m.save(3, tensors(&model(3)), meta(3, 0.5)).unwrap();
            assert_eq!(m.steps().unwrap(), [3]);
            holds_step(&url, 3);
        },
    );
}

/// A `file:///dir` URL is the local directory `/dir`, managed as a path is.
#[test]
fn a_file_url_is_the_local_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("file://{}", tmp.path().join("run").display());
    let mut m = CheckpointManager::open(&url, opts(Layout::Single, Default::default())).unwrap();
    assert_eq!(m.dir(), tmp.path().join("run"));
    // A prepared capture buffer (larger than needed) holds exactly the tensors saved.
    m.prepare_capture(1 << 20);
    let r = m.save_async(5, tensors(&model(5)), meta(5, 0.5)).unwrap();
    assert_eq!(
        r.bytes,
        model(5).iter().map(|(_, _, d)| d.len() as u64).sum::<u64>()
    );
    m.wait().unwrap();
    assert!(tmp.path().join("run/ckpt-5.index").is_file());
    assert!(tmp.path().join("run/checkpoint").is_file());
    holds_step(tmp.path().join("run").to_str().unwrap(), 5);
}

const CHILD_URL: &str = "PARAMDEX_CKPT_GARAGE_CHILD_URL";

/// The child side of the crash test: does nothing unless started by it. Saves into `$URL`
/// forever (in the background, two in flight, keeping the last 3; sharded in 2 objects when
/// `PARAMDEX_CKPT_GARAGE_SHARDED` is set), from one past the highest step there.
#[test]
fn checkpoint_garage_crash_child_helper() {
    let Ok(url) = std::env::var(CHILD_URL) else {
        return;
    };
    let layout = if std::env::var("PARAMDEX_CKPT_GARAGE_SHARDED").is_ok() {
        Layout::Sharded {
            shards: 2,
            incremental: false,
        }
    } else {
        Layout::Single
    };
    let keep = keep_last(3);
    let mut m = CheckpointManager::open(&url, opts(layout, keep)).unwrap();
    let start = m.steps().unwrap().last().map_or(1, |s| s + 1);
    // One complete checkpoint per round before the killing may start.
    m.save(start, tensors(&model(start)), meta(start, 0.5))
        .unwrap();
    println!("PDX-STARTED");
    for step in start + 1.. {
        m.save_async(step, tensors(&model(step)), meta(step, 0.5))
            .unwrap();
    }
}

/// Every listed checkpoint of `url` holds its step's tensors and verifies; the state object
/// parses and names a listed checkpoint (or an older one than a checkpoint committed just
/// before the kill, which is then listed beside it).
fn check_remote_dir(
    rt: &tokio::runtime::Runtime,
    s: &Arc<dyn ObjectStore>,
    key: &str,
    url: &str,
) -> usize {
    let m = CheckpointManager::open(url, ManagerOptions::default()).unwrap();
    let all = m.list().unwrap();
    let text = get(rt, &**s, &format!("{key}/checkpoint")).expect("a state object");
    let st = CheckpointState::parse(&text, std::path::Path::new(url)).expect("it parses");
    let named = format!("{url}/{}", st.model_checkpoint_path);
    assert!(
        all.iter()
            .any(|c| c.prefix.to_str() == Some(named.as_str())),
        "the pointer {named:?} names no complete checkpoint: {all:?}"
    );
    // The latest is the newest committed step (issue 44), which the pointer names unless the
    // kill came between that step's index and the state object.
    let newest = all.iter().map(|c| c.step).max();
    let latest: Vec<u64> = all.iter().filter(|c| c.latest).map(|c| c.step).collect();
    assert_eq!(latest, Vec::from_iter(newest), "{all:?}");
    for c in &all {
        check_store(&*m.restore(c.step).unwrap(), c.step, &named);
        assert_eq!(
            c.metadata.as_ref().unwrap().get("step"),
            Some(&MetaValue::Int(c.step as i64))
        );
    }
    all.len()
}

fn killed_at_random_moments(g: &Garage, sharded: bool) {
    let rt = runtime();
    let s = store(g);
    let key = format!(
        "mgr-crash-{}/run",
        if sharded { "sharded" } else { "single" }
    );
    let url = format!("s3://{}/{key}", g.bucket());
    let mut rng = Rng(0x2545_f491_4f6c_dd1du64 ^ u64::from(sharded));
    let mut seen = 0;
    for _round in 0..4 {
        let mut envs = vec![(CHILD_URL, std::ffi::OsStr::new(&url))];
        if sharded {
            envs.push(("PARAMDEX_CKPT_GARAGE_SHARDED", std::ffi::OsStr::new("1")));
        }
        kill_child_at_random_moment("checkpoint_garage_crash_child_helper", &envs, &mut rng, 600);
        seen += check_remote_dir(&rt, &s, &key, &url);
    }
    assert!(seen > 0, "no checkpoint was ever completed");
}

#[test]
fn a_process_saving_into_a_bucket_killed_at_random_moments_leaves_complete_checkpoints() {
    let Some(g) = garage::shared(
        "a_process_saving_into_a_bucket_killed_at_random_moments_leaves_complete_checkpoints",
    ) else {
        return;
    };
    set_aws_env_once(g);
    g.run(|| {
        killed_at_random_moments(g, false);
        killed_at_random_moments(g, true);
    });
}
