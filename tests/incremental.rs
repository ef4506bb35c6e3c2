//! Incremental saves (SPEC.md 12.5), against a model: a sharded save that reuses the unchanged
//! tensors of an earlier sharded checkpoint (its base) instead of writing their bytes.
//!
//! - random models saved by random numbers of ranks, then changed a little and saved again
//!   (at a new prefix, in chains of saves each based on the previous one), every tensor offered
//!   with `add_or_reuse`: exactly the unchanged tensors are reused, the new checkpoint reads back
//!   byte-identical (natively and as TensorFlow lays it out), and it survives the deletion of
//!   every earlier checkpoint;
//! - an incremental save at its base's own prefix leaves nothing but the new checkpoint;
//! - `reuse_unchanged` takes the caller's word, and its errors, and duplicates are refused;
//! - shard writers in threads and in processes racing to link the same base files, a base on
//!   another file system (copied), a model saved unchanged;
//! - hostile and crashed saves: missing references files, replaced links (another save's file,
//!   an impostor of the same identity), base files replaced or deleted, damage to a reused
//!   tensor, and a merge killed (SIGKILL) after each step of its commit and at random moments.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use support::Rng;

use paramdex::interop::tf::TfCheckpoint;
use paramdex::interop::{open_any, Format, Kind, TensorData, TensorStore};
use paramdex::{
    clean_shards, merge_shards, shard_files, DType, Error, MergeShardsOptions, MergeShardsReport,
    MergeStep, Reader, Region, SaveId, Saved, ShardFileKind, ShardProblem, ShardWriter,
    ShardedSave, Tensor, Writer, WriterOptions,
};

// ---------------------------------------------------------------------------------------------
// The model.

/// A tensor of the model.
#[derive(Clone, Debug, PartialEq, Eq)]
struct T {
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    data: Vec<u8>,
}

impl T {
    fn tensor(&self) -> Tensor<'_> {
        Tensor::new(self.dtype, &self.shape, &self.data).with_lod(&self.lod)
    }
}

type Model = BTreeMap<String, T>;

/// The tensor stored in slices in the first save of a chain (`add_or_reuse` never reuses it
/// from a base that holds it in slices).
const SLICED: &str = "sliced.emb";

/// A random tensor: any rank 0 to 3, some empty, some with LoD, from a few bytes to ~256 KiB.
fn random_tensor(rng: &mut Rng) -> T {
    let dtypes = [
        DType::UInt8,
        DType::Int16,
        DType::Int32,
        DType::Float32,
        DType::Float64,
        DType::Int64,
    ];
    let dtype = dtypes[rng.below(dtypes.len() as u64) as usize];
    let es = dtype.size() as u64;
    // Target size in bytes: small, medium or large.
    let target = match rng.below(10) {
        0..=4 => rng.below(64) + 1,
        5..=7 => rng.below(8 << 10) + 64,
        _ => rng.below(256 << 10) + (8 << 10),
    };
    let elems = (target / es).max(1);
    let mut lod = Vec::new();
    let shape: Vec<u64> = if rng.chance(15) {
        // Paddle LoD: rows split into sequences.
        let cols = rng.below(4) + 1;
        let rows = (elems / cols).max(1);
        let mid = rng.below(rows + 1);
        lod.push(vec![0, mid, rows]);
        vec![rows, cols]
    } else {
        match rng.below(8) {
            0 => vec![],
            1 => vec![rng.below(3), 0],
            2 | 3 => vec![elems],
            4 | 5 => {
                let a = rng.below(7) + 1;
                vec![a, (elems / a).max(1)]
            }
            _ => {
                let a = rng.below(3) + 1;
                let b = rng.below(5) + 1;
                vec![a, b, (elems / (a * b)).max(1)]
            }
        }
    };
    let n = shape.iter().product::<u64>() as usize * dtype.size();
    T {
        dtype,
        shape,
        lod,
        data: rng.bytes(n),
    }
}

fn random_model(rng: &mut Rng, count: usize) -> Model {
    let mut m = Model::new();
    for i in 0..count {
        m.insert(
            format!("layer{}.{}{i}", i % 5, ["w", "b", "emb"][i % 3]),
            random_tensor(rng),
        );
    }
    m
}

/// The next model: a random 5 to 30 % of the tensors changed (bytes of the same size,
/// another shape, the same bytes under another shape, dtype or LoD, or dropped), and some new
/// ones.
fn mutate(rng: &mut Rng, model: &Model, generation: usize) -> Model {
    let percent = rng.below(26) + 5;
    let mut next = Model::new();
    for (name, t) in model {
        if !rng.chance(percent) {
            next.insert(name.clone(), t.clone());
            continue;
        }
        let mut t = t.clone();
        match rng.below(5) {
            0 if !t.data.is_empty() => {
                let at = rng.below(t.data.len() as u64) as usize;
                t.data[at] ^= 1 << rng.below(8);
            }
            1 => t = random_tensor(rng),
            2 => continue, // dropped
            3 if !t.lod.is_empty() => {
                let rows = t.shape[0];
                t.lod = if t.lod[0][1] == rows {
                    vec![vec![0, rows]]
                } else {
                    vec![vec![0, rows, rows]]
                };
            }
            3 if t.shape.len() == 1 => t.shape = vec![1, t.shape[0]],
            _ => {
                // The same bytes as another dtype of the same size, or new bytes.
                let other = match t.dtype {
                    DType::Int32 => Some(DType::Float32),
                    DType::Float32 => Some(DType::Int32),
                    DType::Int64 => Some(DType::Float64),
                    DType::Float64 => Some(DType::Int64),
                    _ => None,
                };
                match other {
                    Some(d) => t.dtype = d,
                    None => t.data = rng.bytes(t.data.len()),
                }
            }
        }
        // Changing nothing (new bytes of an empty tensor) is no change: the model decides.
        next.insert(name.clone(), t);
    }
    for i in 0..rng.below(4) + 1 {
        next.insert(format!("new{generation}.{i}"), random_tensor(rng));
    }
    next
}

fn quick() -> WriterOptions {
    WriterOptions {
        sync: false,
        ..WriterOptions::default()
    }
}

fn no_sync() -> MergeShardsOptions<'static> {
    MergeShardsOptions {
        no_sync: true,
        ..MergeShardsOptions::default()
    }
}

/// A plain sharded save of `model` by `ranks` shards at `prefix`, merged; with `sliced`, the
/// tensor [`SLICED`] is stored as row slices spread over the ranks.
fn save_plain(prefix: &Path, model: &Model, ranks: u32, rng: &mut Rng, sliced: bool) {
    let s = ShardedSave::with_options(prefix, ranks, SaveId::random(), quick()).unwrap();
    let mut writers: Vec<ShardWriter> = (0..ranks).map(|k| s.shard(k).unwrap()).collect();
    for (name, t) in model {
        if sliced && name == SLICED {
            for row in 0..t.shape[0] {
                let r = Region::new(vec![row, 0], vec![1, t.shape[1]]).unwrap();
                let len = t.shape[1] as usize * t.dtype.size();
                let at = row as usize * len;
                let w = &mut writers[rng.below(u64::from(ranks)) as usize];
                w.add_slice(name, t.dtype, &t.shape, &r, &t.data[at..at + len])
                    .unwrap();
            }
            continue;
        }
        let w = &mut writers[rng.below(u64::from(ranks)) as usize];
        w.add(name, t.tensor()).unwrap();
    }
    for w in writers {
        w.finish().unwrap();
    }
    s.merge(&no_sync()).unwrap();
}

/// What an incremental save did.
struct Outcome {
    report: MergeShardsReport,
    /// Names `add_or_reuse` reused.
    reused: BTreeSet<String>,
    /// Sum of the writers' `reused()` tensors and bytes.
    stats_tensors: u64,
    stats_bytes: u64,
    /// Bytes of the files the shard writers wrote (pending shards and references files).
    file_bytes: u64,
    /// Data bytes of the tensors written.
    written_bytes: u64,
    written_tensors: u64,
}

/// An incremental save of `model` at `prefix` by `ranks` shard writers (threads) with the base
/// `base`, every tensor offered with `add_or_reuse`; merged.
fn save_incremental(
    prefix: &Path,
    base: Arc<Reader>,
    model: &Model,
    ranks: u32,
    rng: &mut Rng,
) -> Outcome {
    let s = ShardedSave::with_options(prefix, ranks, SaveId::random(), quick())
        .unwrap()
        .with_base(base);
    let mut plan: Vec<Vec<&String>> = vec![Vec::new(); ranks as usize];
    for name in model.keys() {
        plan[rng.below(u64::from(ranks)) as usize].push(name);
    }
    type Done = (Vec<(String, Saved)>, u64, u64, u64);
    let done: Vec<Done> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..ranks)
            .map(|k| {
                let (s, plan) = (&s, &plan);
                scope.spawn(move || {
                    let mut w = s.shard(k).unwrap();
                    let mut saved = Vec::new();
                    for &name in &plan[k as usize] {
                        saved.push((
                            name.clone(),
                            w.add_or_reuse(name, model[name].tensor()).unwrap(),
                        ));
                    }
                    let stats = w.reused();
                    let pending = w.pending_path().to_path_buf();
                    w.finish().unwrap();
                    let mut bytes = fs::metadata(&pending).unwrap().len();
                    let refs = PathBuf::from(format!(
                        "{}.refs-{k:05}-of-{ranks:05}.pending",
                        prefix.display()
                    ));
                    match fs::metadata(&refs) {
                        Ok(m) => {
                            assert!(stats.tensors > 0, "a references file without references");
                            bytes += m.len();
                        }
                        Err(_) => assert_eq!(stats.tensors, 0, "references without their file"),
                    }
                    (saved, stats.tensors, stats.bytes, bytes)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let report = s.merge(&no_sync()).unwrap();
    let mut out = Outcome {
        report,
        reused: BTreeSet::new(),
        stats_tensors: 0,
        stats_bytes: 0,
        file_bytes: 0,
        written_bytes: 0,
        written_tensors: 0,
    };
    for (saved, tensors, bytes, file_bytes) in done {
        out.stats_tensors += tensors;
        out.stats_bytes += bytes;
        out.file_bytes += file_bytes;
        for (name, how) in saved {
            match how {
                Saved::Reused => {
                    out.reused.insert(name);
                }
                Saved::Written => {
                    out.written_tensors += 1;
                    out.written_bytes += model[&name].data.len() as u64;
                }
            }
        }
    }
    out
}

/// Every check of the checkpoint `r` against `model`: the same names, each tensor's dtype,
/// shape, LoD and bytes, and `verify`.
fn check_reader(r: &Reader, model: &Model) {
    assert_eq!(r.len(), model.len() as u64);
    let names: Vec<String> = r
        .iter()
        .map(|v| String::from_utf8(v.unwrap().name().to_vec()).unwrap())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert_eq!(names, model.keys().cloned().collect::<Vec<_>>());
    for (name, t) in model {
        match r.get(name) {
            Ok(Some(v)) => {
                assert_eq!(v.dtype(), t.dtype, "{name}");
                assert_eq!(v.shape(), t.shape.as_slice(), "{name}");
                assert_eq!(v.lod().unwrap().to_vec(), t.lod, "{name}");
                assert!(v.data() == t.data.as_slice(), "{name}: other bytes");
            }
            Err(Error::Sliced { .. }) => {
                let v = r.get_slice(name, &Region::full(&t.shape)).unwrap().unwrap();
                assert!(v.data() == t.data.as_slice(), "{name}: other bytes");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
    let rep = r.verify().unwrap();
    assert_eq!(rep.tensors, model.len() as u64);
}

/// Every tensor of `model` read through a [`TensorStore`] (TensorFlow's reader, `open_any`).
fn check_store(s: &dyn TensorStore, model: &Model) {
    let list = s.list().unwrap();
    assert_eq!(
        list.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        model
            .keys()
            .map(|n| n.as_bytes().to_vec())
            .collect::<Vec<_>>()
    );
    for (info, t) in list.iter().zip(model.values()) {
        assert_eq!(info.kind, Kind::Numeric(t.dtype));
        assert_eq!(info.shape, t.shape);
        let loaded = s.load(&info.name).unwrap().unwrap();
        let TensorData::Bytes(b) = &loaded.data else {
            panic!("{:?}", loaded.data)
        };
        assert!(
            b[..] == t.data[..],
            "{}",
            String::from_utf8_lossy(&info.name)
        );
    }
}

/// The files of the directory `dir` whose names start with `stem.` (a checkpoint's, or a save's
/// leftovers), sorted.
fn files_of(dir: &Path, stem: &str) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&format!("{stem}.")) || n.starts_with(&format!(".{stem}.")))
        .collect();
    v.sort();
    v
}

fn remove_checkpoint(dir: &Path, stem: &str) {
    let files = files_of(dir, stem);
    assert!(files.iter().any(|f| f.ends_with(".index")), "{files:?}");
    for f in files {
        fs::remove_file(dir.join(f)).unwrap();
    }
}

fn is_shard_err(e: &Error, want: ShardProblem) -> bool {
    matches!(e, Error::Shard { problem, .. } if *problem == want)
}

fn shard_err_path(e: &Error) -> &str {
    match e {
        Error::Shard { path, .. } => path,
        _ => panic!("{e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Against the model.

/// Chains of incremental saves at new prefixes, by random numbers of ranks, each based on the
/// previous checkpoint: `add_or_reuse` reuses exactly the tensors the model says are unchanged
/// (and never one the base holds in slices), the merge reports the reused tensors and bytes
/// the writers counted, the writers wrote little more than the changed tensors' bytes, the new
/// checkpoint reads back byte-identical (natively, through `open_any` and TensorFlow's reader)
/// and verifies, and it still does once every earlier checkpoint's files are deleted.
#[test]
fn incremental_chains_reuse_exactly_the_unchanged_tensors_and_outlive_their_bases() {
    let mut rng = Rng(0x1c0e_5a7e_0f5e_ed01);
    let mut total_reused = 0u64;
    let mut multi_file = 0u64;
    for seed in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let mut model = random_model(&mut rng, 40);
        model.insert(
            SLICED.to_string(),
            T {
                dtype: DType::UInt8,
                shape: vec![4, 16],
                lod: vec![],
                data: rng.bytes(64),
            },
        );
        let ranks = rng.below(4) as u32 + 1;
        let first = dir.path().join("s0");
        save_plain(&first, &model, ranks, &mut rng, true);
        check_reader(&Reader::open(&first).unwrap(), &model);
        for step in 1..=3usize {
            let old = dir.path().join(format!("s{}", step - 1));
            let new = dir.path().join(format!("s{step}"));
            let base = Arc::new(Reader::open(&old).unwrap());
            let next = mutate(&mut rng, &model, step);
            let ranks = rng.below(4) as u32 + 1;
            let out = save_incremental(&new, base.clone(), &next, ranks, &mut rng);
            let ctx = format!("seed {seed} step {step} ({ranks} ranks)");
            // Reused exactly when unchanged, and never from slices.
            let unchanged: BTreeSet<String> = next
                .iter()
                .filter(|(n, t)| model.get(*n) == Some(t) && !(step == 1 && *n == SLICED))
                .map(|(n, _)| n.clone())
                .collect();
            assert_eq!(out.reused, unchanged, "{ctx}");
            assert!(
                unchanged.len() < next.len(),
                "{ctx}: something must have changed"
            );
            let unchanged_bytes: u64 = unchanged.iter().map(|n| next[n].data.len() as u64).sum();
            // The writers and the merge agree on what was reused.
            assert_eq!(out.stats_tensors, unchanged.len() as u64, "{ctx}");
            assert_eq!(out.stats_bytes, unchanged_bytes, "{ctx}");
            assert_eq!(out.report.reused_tensors, unchanged.len() as u64, "{ctx}");
            assert_eq!(out.report.reused_bytes, unchanged_bytes, "{ctx}");
            assert_eq!(out.report.tensors, next.len() as u64, "{ctx}");
            assert!(out.report.reused_files <= base.header().shards.len() as u64);
            assert_eq!(out.report.reused_files > 0, !unchanged.is_empty(), "{ctx}");
            assert_eq!(
                out.report.data_paths.len() as u64,
                u64::from(ranks) + out.report.reused_files
            );
            multi_file += u64::from(out.report.reused_files > 1);
            total_reused += unchanged.len() as u64;
            // Nothing of the reused bytes was written: the files the writers wrote hold the
            // changed tensors, record headers, alignment and indexes.
            let overhead =
                out.written_tensors * 192 + (next.len() as u64) * 64 + u64::from(ranks) * 4096;
            assert!(
                out.file_bytes <= out.written_bytes + overhead,
                "{ctx}: wrote {} bytes for {} changed bytes (+{overhead}), reusing {}",
                out.file_bytes,
                out.written_bytes,
                unchanged_bytes
            );
            // The new checkpoint, which holds its reused files.
            let header = Reader::open(&new).unwrap().header().clone();
            let reused_flags: Vec<bool> = header.shards.iter().map(|s| s.reused).collect();
            let want: Vec<bool> = (0..reused_flags.len())
                .map(|k| k >= ranks as usize)
                .collect();
            assert_eq!(reused_flags, want, "{ctx}");
            check_reader(&Reader::open(&new).unwrap(), &next);
            // Only the checkpoint's files at the new prefix.
            let left = shard_files(&new).unwrap();
            assert!(
                left.iter().all(|f| f.kind == ShardFileKind::Committed),
                "{ctx}: {left:?}"
            );
            assert_eq!(
                files_of(dir.path(), &format!("s{step}")).len(),
                out.report.data_paths.len() + 1
            );
            // The base goes (readers open on it are dropped first, as a trainer would).
            drop(base);
            remove_checkpoint(dir.path(), &format!("s{}", step - 1));
            let r = Reader::open(&new).unwrap();
            check_reader(&r, &next);
            // Through the registry, and as TensorFlow reads it.
            let s = open_any(&new).unwrap();
            assert_eq!(s.format(), Format::Native);
            check_store(s.as_ref(), &next);
            let tf = TfCheckpoint::open(&new).unwrap();
            assert_eq!(tf.num_shards() as usize, out.report.data_paths.len());
            check_store(&tf, &next);
            tf.verify(0).unwrap();
            model = next;
        }
    }
    assert!(total_reused > 200, "{total_reused}");
    assert!(multi_file > 2, "{multi_file}");
}

// ---------------------------------------------------------------------------------------------
// At the base's own prefix.

/// A model whose tensor `f{k}.t{i}` is stored in the base's data file `k`.
fn per_file_model(files: u32, rng: &mut Rng) -> Model {
    let mut m = Model::new();
    for k in 0..files {
        for i in 0..3 {
            let n = (rng.below(2000) + 1) as usize;
            m.insert(
                format!("f{k}.t{i}"),
                T {
                    dtype: DType::UInt8,
                    shape: vec![n as u64],
                    lod: vec![],
                    data: rng.bytes(n),
                },
            );
        }
    }
    m
}

/// The base: data file `k` holds the tensors `f{k}.*`.
fn save_per_file(prefix: &Path, model: &Model, files: u32) {
    let s = ShardedSave::with_options(prefix, files, SaveId::random(), quick()).unwrap();
    for k in 0..files {
        let mut w = s.shard(k).unwrap();
        for (name, t) in model.range(format!("f{k}.")..format!("f{k}/")) {
            w.add(name, t.tensor()).unwrap();
        }
        w.finish().unwrap();
    }
    s.merge(&no_sync()).unwrap();
}

/// The next model of an incremental save that reuses the tensors of the base's data files
/// `keep` only (one tensor of each of those changes too), and a new tensor.
fn keep_files(model: &Model, keep: &[u32], rng: &mut Rng) -> Model {
    let mut next = Model::new();
    for (name, t) in model {
        let k: Option<u32> = name[1..name.find('.').unwrap_or(1)].parse().ok();
        let mut t = t.clone();
        if k.is_some_and(|k| !keep.contains(&k)) || name.ends_with(".t2") {
            t.data = rng.bytes(t.data.len() + 1);
            t.shape = vec![t.data.len() as u64];
        }
        next.insert(name.clone(), t);
    }
    next.insert("fresh".into(), random_tensor(rng));
    next
}

/// Writes the incremental save of `next` at `prefix` (based on `base`) by `ranks` shard
/// writers, without merging it; returns the save, the names reused and the number of shards
/// that reuse any.
fn pending_incremental(
    prefix: &Path,
    base: &Arc<Reader>,
    next: &Model,
    ranks: u32,
) -> (ShardedSave, BTreeSet<String>, usize) {
    let s = ShardedSave::with_options(prefix, ranks, SaveId::random(), quick())
        .unwrap()
        .with_base(base.clone());
    let mut reused = BTreeSet::new();
    let mut writers: Vec<ShardWriter> = (0..ranks).map(|k| s.shard(k).unwrap()).collect();
    for (i, (name, t)) in next.iter().enumerate() {
        if writers[i % ranks as usize]
            .add_or_reuse(name, t.tensor())
            .unwrap()
            == Saved::Reused
        {
            reused.insert(name.clone());
        }
    }
    let mut with_refs = 0;
    for w in writers {
        with_refs += usize::from(w.reused().tensors > 0);
        w.finish().unwrap();
    }
    (s, reused, with_refs)
}

/// An incremental save at its base's own prefix, for several layouts (the new checkpoint with
/// more, fewer and as many data files as the base; a reused file whose new name is its old
/// one): after the merge only the new checkpoint's index and data files are in the directory
/// (no links, references or pending files, and no data file of the base that is not reused),
/// and it reads back and verifies, also through TensorFlow's reader and exported for
/// TensorFlow; and so does one more incremental save there, based on the incremental one.
#[test]
fn an_incremental_save_at_its_bases_prefix_leaves_only_the_new_checkpoint() {
    let mut rng = Rng(0x5a3e_0000_0000_0042);
    // (base data files, new shards, base files reused)
    let layouts: [(u32, u32, &[u32]); 6] = [
        (3, 2, &[0, 1, 2]),
        (3, 1, &[0, 1]),
        (2, 1, &[1]),
        (2, 1, &[0]),
        (1, 1, &[0]),
        (4, 3, &[2]),
    ];
    for (files, ranks, keep) in layouts {
        let ctx = format!("{files} files, {ranks} shards, reusing {keep:?}");
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ck");
        let model = per_file_model(files, &mut rng);
        save_per_file(&prefix, &model, files);
        let base = Arc::new(Reader::open(&prefix).unwrap());
        let next = keep_files(&model, keep, &mut rng);
        let (s, reused, with_refs) = pending_incremental(&prefix, &base, &next, ranks);
        let want: BTreeSet<String> = next
            .iter()
            .filter(|(n, t)| model.get(*n) == Some(t))
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(reused, want, "{ctx}");
        // Until the merge, the base is the checkpoint at the prefix, and the save's files are
        // pending.
        check_reader(&Reader::open(&prefix).unwrap(), &model);
        let files_now = shard_files(&prefix).unwrap();
        let pending = files_now
            .iter()
            .filter(|f| f.kind == ShardFileKind::Pending)
            .count();
        // Shards, their references files, the links.
        assert_eq!(
            pending,
            ranks as usize + with_refs + keep.len(),
            "{ctx}: {files_now:?}"
        );
        let report = s.merge(&no_sync()).unwrap();
        drop(base);
        assert_eq!(report.reused_files, keep.len() as u64, "{ctx}");
        assert_eq!(report.reused_tensors, want.len() as u64, "{ctx}");
        let total = ranks as usize + keep.len();
        let mut expect: Vec<String> = (0..total)
            .map(|k| format!("ck.data-{k:05}-of-{total:05}"))
            .collect();
        expect.push("ck.index".into());
        assert_eq!(files_of(dir.path(), "ck"), expect, "{ctx}");
        let all = shard_files(&prefix).unwrap();
        assert!(
            all.iter().all(|f| f.kind == ShardFileKind::Committed),
            "{ctx}: {all:?}"
        );
        assert_eq!(all.len(), total);
        check_reader(&Reader::open(&prefix).unwrap(), &next);
        check_store(&TfCheckpoint::open(&prefix).unwrap(), &next);
        assert!(clean_shards(&prefix).unwrap().is_empty());

        // Once more at the same prefix, based on the incremental checkpoint (whose reused data
        // files are an older save's).
        let base = Arc::new(Reader::open(&prefix).unwrap());
        let third = mutate(&mut rng, &next, 1);
        let out = save_incremental(&prefix, base, &third, ranks % 3 + 1, &mut rng);
        let want: BTreeSet<String> = third
            .iter()
            .filter(|(n, t)| next.get(*n) == Some(t))
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(out.reused, want, "{ctx}, again");
        let total = out.report.data_paths.len();
        let mut expect: Vec<String> = (0..total)
            .map(|k| format!("ck.data-{k:05}-of-{total:05}"))
            .collect();
        expect.push("ck.index".into());
        assert_eq!(files_of(dir.path(), "ck"), expect, "{ctx}, again");
        check_reader(&Reader::open(&prefix).unwrap(), &third);
        check_store(&TfCheckpoint::open(&prefix).unwrap(), &third);
        // Exported for TensorFlow under another prefix, reused files and all.
        fs::create_dir(dir.path().join("out")).unwrap();
        let to = dir.path().join("out/tf");
        let rep = paramdex::interop::tf::export_tf(&prefix, &to).unwrap();
        assert_eq!(rep.data_paths.len(), total);
        check_store(&TfCheckpoint::open(&to).unwrap(), &third);
        check_reader(&Reader::open(&to).unwrap(), &third);
    }
}

// ---------------------------------------------------------------------------------------------
// reuse_unchanged.

/// A base at `DIR/base` of 2 data files: `a` (bytes 1), `b` (2), `c` (3) whole, and `s` in two
/// row slices.
fn small_base(dir: &Path) -> (PathBuf, Arc<Reader>) {
    let prefix = dir.join("base");
    let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), quick()).unwrap();
    for k in 0..2u32 {
        let mut w = s.shard(k).unwrap();
        if k == 0 {
            w.add("a", Tensor::new(DType::UInt8, &[100], &[1; 100]))
                .unwrap();
            w.add("b", Tensor::new(DType::UInt8, &[100], &[2; 100]))
                .unwrap();
        } else {
            w.add("c", Tensor::new(DType::UInt8, &[100], &[3; 100]))
                .unwrap();
        }
        let r = Region::new(vec![u64::from(k), 0], vec![1, 4]).unwrap();
        w.add_slice("s", DType::UInt8, &[2, 4], &r, &[k as u8; 4])
            .unwrap();
        w.finish().unwrap();
    }
    s.merge(&no_sync()).unwrap();
    let r = Arc::new(Reader::open(&prefix).unwrap());
    (prefix, r)
}

/// `reuse_unchanged` takes the caller's word: nothing is compared and no byte of the tensor is
/// given, and the new checkpoint holds the base's tensor; reusing twice, or a name the shard
/// wrote, is refused at once, so is offering a reused name to `add_or_reuse` again, and a name
/// reused and then written with `add` is refused at `finish`.
#[test]
fn reuse_unchanged_takes_the_callers_word() {
    let dir = tempfile::tempdir().unwrap();
    let (_, base) = small_base(dir.path());
    let prefix = dir.path().join("new");
    let s = ShardedSave::with_options(&prefix, 1, SaveId::random(), quick())
        .unwrap()
        .with_base(base.clone());
    let mut w = s.shard(0).unwrap();
    w.reuse_unchanged("a").unwrap();
    w.reuse_unchanged("c").unwrap();
    w.add("b", Tensor::new(DType::UInt8, &[1], &[9])).unwrap();
    let stats = w.reused();
    assert_eq!((stats.tensors, stats.bytes, stats.files), (2, 200, 2));
    assert_eq!(stats.linked + stats.copied, 2);
    // Twice, or a name the shard holds: refused at once, and nothing changes.
    let e = w.reuse_unchanged("a").unwrap_err();
    assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
    let e = w.reuse_unchanged("b").unwrap_err();
    assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
    // A name add_or_reuse is offered after it was reused is not reused twice.
    // Absent, or in slices.
    let e = w.reuse_unchanged("zzz").unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    let e = w.reuse_unchanged("s").unwrap_err();
    assert!(matches!(e, Error::Sliced { .. }), "{e}");
    assert_eq!(w.reused(), stats);
    w.finish().unwrap();
    let rep = s.merge(&no_sync()).unwrap();
    assert_eq!((rep.reused_tensors, rep.reused_bytes), (2, 200));
    let r = Reader::open(&prefix).unwrap();
    assert_eq!(r.get("a").unwrap().unwrap().data(), &[1; 100][..]);
    assert_eq!(r.get("b").unwrap().unwrap().data(), &[9][..]);
    assert_eq!(r.get("c").unwrap().unwrap().data(), &[3; 100][..]);
    assert_eq!(r.len(), 3);
    r.verify().unwrap();

    // Reused, then offered again with add_or_reuse (changed or not): refused at once, and the
    // shard goes on, holding the reference.
    let prefix = dir.path().join("again");
    let s = ShardedSave::with_options(&prefix, 1, SaveId::random(), quick())
        .unwrap()
        .with_base(base.clone());
    let mut w = s.shard(0).unwrap();
    w.reuse_unchanged("a").unwrap();
    for fill in [1u8, 5] {
        let fill = [fill; 100];
        let e = w
            .add_or_reuse("a", Tensor::new(DType::UInt8, &[100], &fill))
            .unwrap_err();
        assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
    }
    assert_eq!(
        w.add_or_reuse("c", Tensor::new(DType::UInt8, &[100], &[3; 100]))
            .unwrap(),
        Saved::Reused
    );
    let e = w
        .add_or_reuse("c", Tensor::new(DType::UInt8, &[100], &[3; 100]))
        .unwrap_err();
    assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
    assert_eq!(w.reused().tensors, 2);
    w.finish().unwrap();
    let rep = s.merge(&no_sync()).unwrap();
    assert_eq!(rep.reused_tensors, 2);
    let r = Reader::open(&prefix).unwrap();
    assert_eq!(r.get("a").unwrap().unwrap().data(), &[1; 100][..]);
    r.verify().unwrap();

    // Reused, then written with add: refused by finish, and the save cannot be merged.
    let prefix = dir.path().join("dup");
    let s = ShardedSave::with_options(&prefix, 1, SaveId::random(), quick())
        .unwrap()
        .with_base(base.clone());
    let mut w = s.shard(0).unwrap();
    w.reuse_unchanged("a").unwrap();
    w.add("a", Tensor::new(DType::UInt8, &[100], &[1; 100]))
        .unwrap();
    let e = w.finish().unwrap_err();
    assert!(matches!(e, Error::DuplicateName { .. }), "{e}");
    assert!(merge_shards(&prefix, &no_sync()).is_err());
    assert!(Reader::open(&prefix).is_err());
    // What the failed save left is the link (no shard, references or temporary file),
    // reported and cleaned.
    let left = files_of(dir.path(), "dup");
    assert!(
        left.len() == 1 && left[0].starts_with("dup.reused-"),
        "{left:?}"
    );
    let reported = shard_files(&prefix).unwrap();
    assert_eq!(reported.len(), 1);
    assert_eq!(reported[0].kind, ShardFileKind::Pending);
    clean_shards(&prefix).unwrap();
    assert!(files_of(dir.path(), "dup").is_empty());
}

/// A name one shard reuses and another shard writes (whole or in slices) is in the save twice:
/// the merge refuses it and commits nothing.
#[test]
fn a_name_reused_by_one_shard_and_written_by_another_is_refused_by_the_merge() {
    for sliced in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (_, base) = small_base(dir.path());
        let prefix = dir.path().join("new");
        let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), quick())
            .unwrap()
            .with_base(base);
        let mut w = s.shard(0).unwrap();
        w.reuse_unchanged("a").unwrap();
        w.finish().unwrap();
        let mut w = s.shard(1).unwrap();
        if sliced {
            let r = Region::new(vec![0], vec![50]).unwrap();
            w.add_slice("a", DType::UInt8, &[100], &r, &[1; 50])
                .unwrap();
        } else {
            w.add("a", Tensor::new(DType::UInt8, &[100], &[1; 100]))
                .unwrap();
        }
        w.finish().unwrap();
        let e = s.merge(&no_sync()).unwrap_err();
        // Named: the tensor, and the references file that holds it too.
        assert!(
            matches!(&e, Error::Slices { name, .. } if name == "a"),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("new.refs-00000-of-00002.pending"),
            "{e}"
        );
        assert!(
            !dir.path().join("new.index").exists(),
            "sliced {sliced}: {e}"
        );
        assert!(Reader::open(&prefix).is_err());
    }
}

/// `reuse_unchanged` without a base, and a base that is not a sharded checkpoint, are refused
/// with `InvalidArgument`.
#[test]
fn reuse_needs_a_sharded_base() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("new");
    let mut w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick()).unwrap();
    let e = w.reuse_unchanged("a").unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // add_or_reuse without a base writes.
    assert_eq!(
        w.add_or_reuse("a", Tensor::new(DType::UInt8, &[1], &[1]))
            .unwrap(),
        Saved::Written
    );
    drop(w);
    // A single native file is no base.
    let one = dir.path().join("one.pdx");
    let mut ww = Writer::create_with(&one, quick()).unwrap();
    ww.add("a", Tensor::new(DType::UInt8, &[1], &[1])).unwrap();
    ww.finish().unwrap();
    let single = Arc::new(Reader::open(&one).unwrap());
    let w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick()).unwrap();
    let e = w.with_base(single.clone()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), quick())
        .unwrap()
        .with_base(single);
    let e = s.shard(1).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // Nor is one data file of a sharded checkpoint opened by itself.
    let (bp, _) = small_base(dir.path());
    let data = Arc::new(
        Reader::open(PathBuf::from(format!(
            "{}.data-00000-of-00002",
            bp.display()
        )))
        .unwrap(),
    );
    let w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick()).unwrap();
    let e = w.with_base(data).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    // A sharded checkpoint opened by PREFIX.index is one.
    let by_index = Arc::new(Reader::open(dir.path().join("base.index")).unwrap());
    let mut w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick())
        .unwrap()
        .with_base(by_index)
        .unwrap();
    w.reuse_unchanged("c").unwrap();
    w.finish().unwrap();
    merge_shards(&prefix, &no_sync()).unwrap();
    let r = Reader::open(&prefix).unwrap();
    assert_eq!(r.get("c").unwrap().unwrap().data(), &[3; 100][..]);
    r.verify().unwrap();
}

// ---------------------------------------------------------------------------------------------
// Hostile and damaged saves.

/// The pending incremental save at `DIR/new` with the base `small_base`: shard 0 reuses `a`
/// (base file 0), shard 1 reuses `c` (base file 1) and writes `d`.
fn pending_on_small_base(dir: &Path, base: &Arc<Reader>) -> ShardedSave {
    let prefix = dir.join("new");
    let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), quick())
        .unwrap()
        .with_base(base.clone());
    let mut w = s.shard(0).unwrap();
    w.reuse_unchanged("a").unwrap();
    w.finish().unwrap();
    let mut w = s.shard(1).unwrap();
    assert_eq!(
        w.add_or_reuse("c", Tensor::new(DType::UInt8, &[100], &[3; 100]))
            .unwrap(),
        Saved::Reused
    );
    w.add("d", Tensor::new(DType::UInt8, &[3], &[4; 3]))
        .unwrap();
    w.finish().unwrap();
    s
}

fn links(dir: &Path, stem: &str) -> Vec<PathBuf> {
    files_of(dir, stem)
        .into_iter()
        .filter(|f| f.contains(".reused-"))
        .map(|f| dir.join(f))
        .collect()
}

fn check_small_new(prefix: &Path) {
    let r = Reader::open(prefix).unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r.get("a").unwrap().unwrap().data(), &[1; 100][..]);
    assert_eq!(r.get("c").unwrap().unwrap().data(), &[3; 100][..]);
    assert_eq!(r.get("d").unwrap().unwrap().data(), &[4; 3][..]);
    r.verify().unwrap();
}

/// A shard's references file removed before the merge: the merge refuses the save
/// (`Missing`, naming the references file) and commits nothing.
#[test]
fn a_missing_references_file_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let (_, base) = small_base(dir.path());
    let s = pending_on_small_base(dir.path(), &base);
    let refs = dir.path().join("new.refs-00001-of-00002.pending");
    assert!(refs.exists());
    fs::remove_file(&refs).unwrap();
    let e = s.merge(&no_sync()).unwrap_err();
    assert!(is_shard_err(&e, ShardProblem::Missing), "{e}");
    assert_eq!(shard_err_path(&e), refs.to_string_lossy(), "{e}");
    assert!(!dir.path().join("new.index").exists());
    // The save's leftovers are reported and cleaned.
    clean_shards(dir.path().join("new")).unwrap();
    assert!(files_of(dir.path(), "new").is_empty());
}

/// The link of a reused data file replaced by another save's data file: the merge cannot find
/// the file of the identity the references record, and refuses (`Missing`, naming the link).
#[test]
fn a_replaced_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_, base) = small_base(dir.path());
    let s = pending_on_small_base(dir.path(), &base);
    let ls = links(dir.path(), "new");
    assert_eq!(ls.len(), 2, "{ls:?}");
    // Another save's data file, of the same length even.
    let (other, _) = small_base(&dir.path().join("o").tap_mkdir());
    let other_data = PathBuf::from(format!("{}.data-00000-of-00002", other.display()));
    assert_eq!(
        fs::metadata(&other_data).unwrap().len(),
        fs::metadata(&ls[0]).unwrap().len()
    );
    fs::remove_file(&ls[0]).unwrap();
    fs::copy(&other_data, &ls[0]).unwrap();
    let e = s.merge(&no_sync()).unwrap_err();
    assert!(is_shard_err(&e, ShardProblem::Missing), "{e}");
    assert_eq!(shard_err_path(&e), ls[0].to_string_lossy(), "{e}");
    assert!(!dir.path().join("new.index").exists());
    // A copy of the right file is the right file: the merge takes it.
    fs::remove_file(&ls[0]).unwrap();
    // (The links sort by base file: the first is base file 0.)
    let base_file = "base.data-00000-of-00002";
    fs::copy(dir.path().join(base_file), &ls[0]).unwrap();
    s.merge(&no_sync()).unwrap();
    check_small_new(&dir.path().join("new"));
}

/// The link of a reused data file replaced by an impostor: a file of the same identity (save
/// id, shard number, length) whose entry for a reused tensor differs. The merge checks each
/// reference against the reused file's own entry and refuses (`Reference`), committing
/// nothing.
#[test]
fn a_link_replaced_by_a_file_of_the_same_identity_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (bp, base) = small_base(dir.path());
    let s = pending_on_small_base(dir.path(), &base);
    // The impostor: shard 0 of 2 of the base's save, other bytes for `a`.
    let id = base.header().shards[0].shard.save_id;
    let imp = dir.path().join("o").tap_mkdir().join("imp");
    let mut w = ShardWriter::create(&imp, 0, 2, id, quick()).unwrap();
    w.add("a", Tensor::new(DType::UInt8, &[100], &[7; 100]))
        .unwrap();
    w.add("b", Tensor::new(DType::UInt8, &[100], &[2; 100]))
        .unwrap();
    let r = Region::new(vec![0, 0], vec![1, 4]).unwrap();
    w.add_slice("s", DType::UInt8, &[2, 4], &r, &[0; 4])
        .unwrap();
    let imp_path = w.pending_path().to_path_buf();
    w.finish().unwrap();
    let real = PathBuf::from(format!("{}.data-00000-of-00002", bp.display()));
    assert_eq!(
        fs::metadata(&imp_path).unwrap().len(),
        fs::metadata(&real).unwrap().len(),
        "the impostor has the real file's length"
    );
    let link = links(dir.path(), "new")[0].clone();
    fs::remove_file(&link).unwrap();
    fs::copy(&imp_path, &link).unwrap();
    let e = s.merge(&no_sync()).unwrap_err();
    assert!(is_shard_err(&e, ShardProblem::Reference), "{e}");
    // Named: the references file, the tensor and the file that holds another entry.
    assert_eq!(
        shard_err_path(&e),
        dir.path()
            .join("new.refs-00000-of-00002.pending")
            .to_string_lossy()
    );
    let msg = e.to_string();
    assert!(
        msg.contains("tensor a ") && msg.contains(&*link.to_string_lossy()),
        "{e}"
    );
    assert!(!dir.path().join("new.index").exists());
    assert!(Reader::open(dir.path().join("new")).is_err());
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        fs::create_dir_all(&self).unwrap();
        self
    }
}

/// The base's data files deleted after the shard writers linked them, before the merge: the
/// links hold the bytes, the merge succeeds and the new checkpoint reads and verifies (and a
/// second merge of the same save is refused without touching it).
#[test]
fn the_base_deleted_before_the_merge_is_no_loss() {
    let dir = tempfile::tempdir().unwrap();
    let (_, base) = small_base(dir.path());
    let s = pending_on_small_base(dir.path(), &base);
    drop(base);
    remove_checkpoint(dir.path(), "base");
    let rep = s.merge(&no_sync()).unwrap();
    assert_eq!((rep.reused_tensors, rep.reused_files), (2, 2));
    check_small_new(&dir.path().join("new"));
    // The save merged again: its references are gone, it is refused, and nothing changes.
    let e = s.merge(&no_sync()).unwrap_err();
    assert!(is_shard_err(&e, ShardProblem::Missing), "{e}");
    check_small_new(&dir.path().join("new"));
    assert!(shard_files(dir.path().join("new"))
        .unwrap()
        .iter()
        .all(|f| f.kind == ShardFileKind::Committed));
}

/// A base data file replaced (same name, another save's file) after the base was opened: the
/// first reuse from it is refused (`Identity`), whether the base reader had mapped the old file
/// already or not, leaving no link, temporary file or reference behind; the shard can still
/// write the tensor, and reuse from the base's other file.
#[test]
fn a_base_data_file_replaced_after_open_is_refused() {
    for mapped in [false, true] {
        for by_word in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let (_, base) = small_base(dir.path());
            if mapped {
                assert!(base
                    .holds_unchanged("a", Tensor::new(DType::UInt8, &[100], &[1; 100]))
                    .unwrap());
            }
            let (other, _) = small_base(&dir.path().join("o").tap_mkdir());
            fs::rename(
                PathBuf::from(format!("{}.data-00000-of-00002", other.display())),
                dir.path().join("base.data-00000-of-00002"),
            )
            .unwrap();
            let prefix = dir.path().join("new");
            let s = ShardedSave::with_options(&prefix, 1, SaveId::random(), quick())
                .unwrap()
                .with_base(base.clone());
            let mut w = s.shard(0).unwrap();
            let a = Tensor::new(DType::UInt8, &[100], &[1; 100]);
            let e = if by_word {
                w.reuse_unchanged("a").unwrap_err()
            } else {
                w.add_or_reuse("a", a).unwrap_err()
            };
            let ctx = format!("mapped {mapped}, by word {by_word}");
            assert!(is_shard_err(&e, ShardProblem::Identity), "{ctx}: {e}");
            assert_eq!(w.reused().tensors, 0, "{ctx}");
            let left = files_of(dir.path(), "new");
            assert_eq!(left.len(), 1, "{ctx}: only the shard in progress: {left:?}");
            // The other file of the base is still good, and the tensor can be written.
            w.reuse_unchanged("c").unwrap();
            w.add("a", a).unwrap();
            w.finish().unwrap();
            s.merge(&no_sync()).unwrap();
            let r = Reader::open(&prefix).unwrap();
            assert_eq!(r.get("a").unwrap().unwrap().data(), &[1; 100][..]);
            assert_eq!(r.get("c").unwrap().unwrap().data(), &[3; 100][..]);
            r.verify().unwrap();
            assert!(shard_files(&prefix)
                .unwrap()
                .iter()
                .all(|f| f.kind == ShardFileKind::Committed));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Crashes: real processes killed with SIGKILL.

const CHILD_DIR: &str = "PARAMDEX_INC_CHILD_DIR";
const CHILD_JOB: &str = "PARAMDEX_INC_CHILD_JOB";

/// The child side of the crash tests: does nothing unless started by a parent test. Jobs:
/// `merge-block-N` merges the pending save at `DIR/ck`, blocking after its N-th step; `merge`
/// merges it (with fsync, slower: a wider window to be killed in); `write-K-N-SAVE` writes shard
/// K of N of the incremental save SAVE of [`processes_models`] at `DIR/ck`, based on
/// `DIR/base`.
#[test]
fn incremental_crash_child_helper() {
    let (Ok(dir), Ok(job)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_JOB)) else {
        return;
    };
    let prefix = Path::new(&dir).join("ck");
    let say = |s: &str| {
        println!("\nPDX-{s}");
        std::io::stdout().flush().unwrap();
    };
    if let Some(rest) = job.strip_prefix("write-") {
        // write-K-N-SAVE: shard K of N of the save SAVE at DIR/ck, based on DIR/base.
        let parts: Vec<&str> = rest.split('-').collect();
        let (k, n): (u32, u32) = (parts[0].parse().unwrap(), parts[1].parse().unwrap());
        let id = SaveId::from_hex(parts[2]).unwrap();
        let (_, next) = processes_models();
        let base = Arc::new(Reader::open(Path::new(&dir).join("base")).unwrap());
        let mut w = ShardWriter::create(&prefix, k, n, id, quick())
            .unwrap()
            .with_base(base)
            .unwrap();
        let mut reused = 0;
        for (i, (name, t)) in next.iter().enumerate() {
            if i as u32 % n == k && w.add_or_reuse(name, t.tensor()).unwrap() == Saved::Reused {
                reused += 1;
            }
        }
        w.finish().unwrap();
        say(&format!("WRITTEN {reused}"));
        std::process::exit(0);
    }
    if job == "merge" {
        say("STARTED");
        merge_shards(&prefix, &MergeShardsOptions::default()).unwrap();
        say("FINISHED");
        std::process::exit(4);
    }
    let n: usize = job.strip_prefix("merge-block-").unwrap().parse().unwrap();
    let seen = std::sync::atomic::AtomicUsize::new(0);
    let on_step = |s: MergeStep| {
        if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n {
            say(&format!("BLOCKED {s:?}"));
            let mut line = String::new();
            loop {
                line.clear();
                if std::io::stdin().lock().read_line(&mut line).unwrap_or(0) == 0 {
                    std::process::exit(3);
                }
            }
        }
    };
    merge_shards(
        &prefix,
        &MergeShardsOptions {
            on_step: Some(&on_step),
            no_sync: true,
            ..MergeShardsOptions::default()
        },
    )
    .unwrap();
    say("FINISHED");
    std::process::exit(4);
}

fn child(dir: &Path, job: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "incremental_crash_child_helper",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DIR, dir)
        .env(CHILD_JOB, job)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Waits for a line of the child's holding `marker`; returns the line.
fn wait_for(c: &mut std::process::Child, marker: &str) -> String {
    let out = c.stdout.as_mut().unwrap();
    let mut reader = std::io::BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the child ended before {marker}"
        );
        assert!(!line.contains("PDX-FINISHED"), "the child finished");
        if line.contains(marker) {
            return line;
        }
    }
}

/// A merge of an incremental save at its base's own prefix (the base itself a plain or an
/// incremental save), killed (SIGKILL) after each step of its commit, leaves the base
/// checkpoint (before the previous index is removed), nothing (while data files are renamed),
/// or the new checkpoint; a merge run again (told the save or not) completes the new
/// checkpoint, which reads back and verifies, and `clean_shards` then leaves only its files.
#[cfg(unix)]
#[test]
fn an_incremental_merge_killed_after_any_step_leaves_the_base_or_nothing_and_can_be_rerun() {
    let mut rng = Rng(0xc7a5_4000_0000_0001);
    // (base data files, new shards, base files reused): more data files than the base, and as
    // many (the new checkpoint's names are the base's).
    // (base data files, new shards, base files reused, the base itself incremental): more
    // data files than the base, and as many (the new checkpoint's names are the base's), and a
    // base whose own data files are partly an older save's.
    let layouts: [(u32, u32, &[u32], bool); 3] = [
        (3, 2, &[0, 2], false),
        (3, 1, &[0, 1], false),
        (3, 2, &[0, 2], true),
    ];
    for (files, ranks, keep, chained) in layouts {
        let total = ranks as usize + keep.len();
        // Checked, IndexWritten, PreviousRemoved, PreviousDataRemoved, ShardRenamed(0..total),
        // Committed.
        let steps = 4 + total + 1;
        for n in 1..=steps {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ck");
            let mut model = per_file_model(files, &mut rng);
            save_per_file(&prefix, &model, files);
            if chained {
                // The base: an incremental save of 1 shard reusing every file of the first.
                let all: Vec<u32> = (0..files).collect();
                let first = Arc::new(Reader::open(&prefix).unwrap());
                let next = keep_files(&model, &all, &mut rng);
                let (s, _, _) = pending_incremental(&prefix, &first, &next, 1);
                drop(first);
                let rep = s.merge(&no_sync()).unwrap();
                assert_eq!(rep.data_paths.len(), 1 + files as usize);
                model = next;
            }
            let base = Arc::new(Reader::open(&prefix).unwrap());
            let next = keep_files(&model, keep, &mut rng);
            let (save, reused, _) = pending_incremental(&prefix, &base, &next, ranks);
            assert!(!reused.is_empty());
            drop(base);
            let mut c = child(dir.path(), &format!("merge-block-{n}"));
            let line = wait_for(&mut c, "PDX-BLOCKED");
            c.kill().unwrap();
            assert!(!c.wait().unwrap().success());
            let step = line.trim().trim_start_matches("PDX-BLOCKED ").to_string();
            let ctx = format!(
                "{files} files, {ranks} shards, reusing {keep:?}, chained {chained}, after {step}"
            );
            match Reader::open(&prefix) {
                Ok(r) if n <= 2 => check_reader(&r, &model),
                Ok(r) if n == steps => check_reader(&r, &next),
                Ok(_) => panic!("{ctx}: a checkpoint while its files are renamed"),
                Err(_) => assert!((3..steps).contains(&n), "{ctx}: no checkpoint"),
            }
            // A merge run again finishes the job (or, not told the save, finds nothing to do
            // after the commit; told the save, it may commit it again, from its references
            // files, which stay until the commit is done).
            let named = n % 2 == 0;
            let again = if named {
                save.merge(&no_sync())
            } else {
                merge_shards(&prefix, &no_sync())
            };
            match again {
                Ok(rep) => {
                    assert!(n < steps || named, "{ctx}: nothing pending");
                    assert_eq!(rep.reused_tensors, reused.len() as u64, "{ctx}");
                    assert_eq!(rep.data_paths.len(), total, "{ctx}");
                }
                Err(e) => assert!(n == steps, "{ctx}, named {named}: {e}"),
            }
            check_reader(&Reader::open(&prefix).unwrap(), &next);
            clean_shards(&prefix).unwrap();
            let mut expect: Vec<String> = (0..total)
                .map(|k| format!("ck.data-{k:05}-of-{total:05}"))
                .collect();
            expect.push("ck.index".into());
            assert_eq!(files_of(dir.path(), "ck"), expect, "{ctx}");
            check_reader(&Reader::open(&prefix).unwrap(), &next);
        }
    }
}

/// Many shard writers of one save (threads) reusing from the same base data files at the same
/// moment: each file is linked once into the new checkpoint (the writers that lost the race
/// find it there), the merge takes one reused data file per base file, and no temporary link is
/// left behind (the regression: a staged link renamed onto a link to the same file stayed).
#[test]
fn shard_writers_racing_to_link_one_base_file_leave_no_temporary_files() {
    for round in 0..16 {
        let dir = tempfile::tempdir().unwrap();
        let ranks = 8u32;
        // Base file k holds f{k}.t0 to f{k}.t7.
        let model: Model = (0..2)
            .flat_map(|k| (0..ranks).map(move |i| format!("f{k}.t{i}")))
            .map(|n| {
                let t = T {
                    dtype: DType::UInt8,
                    shape: vec![50],
                    lod: vec![],
                    data: vec![n.len() as u8 + n.as_bytes()[4]; 50],
                };
                (n, t)
            })
            .collect();
        let bp = dir.path().join("base");
        save_per_file(&bp, &model, 2);
        let base = Arc::new(Reader::open(&bp).unwrap());
        let prefix = dir.path().join("new");
        let s = ShardedSave::with_options(&prefix, ranks, SaveId::random(), quick())
            .unwrap()
            .with_base(base);
        let barrier = std::sync::Barrier::new(ranks as usize);
        let stats: Vec<_> = std::thread::scope(|scope| {
            let hs: Vec<_> = (0..ranks)
                .map(|k| {
                    let (s, barrier) = (&s, &barrier);
                    scope.spawn(move || {
                        let mut w = s.shard(k).unwrap();
                        barrier.wait();
                        // Each reuses a tensor of base file 0 and one of base file 1.
                        w.reuse_unchanged(format!("f0.t{k}")).unwrap();
                        w.reuse_unchanged(format!("f1.t{k}")).unwrap();
                        let st = w.reused();
                        w.finish().unwrap();
                        st
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(stats.iter().all(|s| s.files == 2 && s.tensors == 2));
        let linked: u64 = stats.iter().map(|s| s.linked + s.copied).sum();
        assert!((2..=2 * u64::from(ranks)).contains(&linked), "{linked}");
        let before = shard_files(&prefix).unwrap();
        assert!(
            before.iter().all(|f| f.kind == ShardFileKind::Pending),
            "round {round}: {before:?}"
        );
        let rep = s.merge(&no_sync()).unwrap();
        assert_eq!((rep.reused_files, rep.reused_tensors), (2, 16));
        let after = shard_files(&prefix).unwrap();
        assert!(
            after.iter().all(|f| f.kind == ShardFileKind::Committed),
            "round {round}: {after:?}"
        );
        assert_eq!(files_of(dir.path(), "new").len(), ranks as usize + 2 + 1);
        check_reader(&Reader::open(&prefix).unwrap(), &model);
    }
}

/// A save that changed nothing writes no tensor: every tensor is reused, at a new prefix and
/// at the base's own, and the checkpoints read back and verify.
#[test]
fn an_unchanged_model_is_saved_as_references_only() {
    let mut rng = Rng(0x0c4a_93ed_0000_0001);
    let dir = tempfile::tempdir().unwrap();
    let model = random_model(&mut rng, 20);
    let first = dir.path().join("a");
    save_plain(&first, &model, 3, &mut rng, false);
    for (prefix, ranks) in [(dir.path().join("b"), 2u32), (first.clone(), 1)] {
        let base = Arc::new(Reader::open(&first).unwrap());
        let out = save_incremental(&prefix, base, &model, ranks, &mut rng);
        assert_eq!(out.reused.len(), model.len());
        assert_eq!(out.written_tensors, 0);
        assert_eq!(out.report.reused_tensors, model.len() as u64);
        check_reader(&Reader::open(&prefix).unwrap(), &model);
        assert!(shard_files(&prefix)
            .unwrap()
            .iter()
            .all(|f| f.kind == ShardFileKind::Committed));
    }
    remove_checkpoint(dir.path(), "a");
    check_reader(&Reader::open(dir.path().join("b")).unwrap(), &model);
}

/// A base on another file system: its data files cannot be linked and are copied from the
/// bytes the base reader checked, and the new checkpoint does not depend on the base
/// afterwards. The base is on another file system when one is at hand (`/dev/shm`, ...), else
/// hard links from it are refused on this thread (`tests/support`'s `other_file_system`).
#[test]
fn a_base_on_another_file_system_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    let other = support::other_file_system(dir.path());
    a_base_that_cannot_be_linked_is_copied(dir.path(), other);
}

/// The same where the file system refuses the hard links (injected, on any machine).
#[test]
fn a_base_whose_files_cannot_be_linked_is_copied() {
    let dir = tempfile::tempdir().unwrap();
    a_base_that_cannot_be_linked_is_copied(dir.path(), support::OtherFileSystem::links_refused());
}

fn a_base_that_cannot_be_linked_is_copied(dir: &Path, other: support::OtherFileSystem) {
    let (bp, base) = small_base(other.dir.path());
    let prefix = dir.join("new");
    let mut w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick())
        .unwrap()
        .with_base(base.clone())
        .unwrap();
    w.reuse_unchanged("a").unwrap();
    w.reuse_unchanged("b").unwrap();
    w.reuse_unchanged("c").unwrap();
    let st = w.reused();
    let lens: u64 = (0..2)
        .map(|k| {
            fs::metadata(format!("{}.data-{k:05}-of-00002", bp.display()))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!((st.files, st.linked, st.copied), (2, 0, 2));
    assert_eq!(st.copied_bytes, lens);
    w.finish().unwrap();
    merge_shards(&prefix, &no_sync()).unwrap();
    drop(base);
    drop(other);
    let r = Reader::open(&prefix).unwrap();
    assert_eq!(r.get("a").unwrap().unwrap().data(), &[1; 100][..]);
    assert_eq!(r.get("b").unwrap().unwrap().data(), &[2; 100][..]);
    assert_eq!(r.get("c").unwrap().unwrap().data(), &[3; 100][..]);
    r.verify().unwrap();
    assert!(shard_files(&prefix)
        .unwrap()
        .iter()
        .all(|f| f.kind == ShardFileKind::Committed));
}

/// A merge of an incremental save at its base's own prefix killed (SIGKILL) at a random
/// moment leaves the base, nothing or the new checkpoint; a merge run again (when the new one
/// is not committed yet) completes it, and `clean_shards` leaves only its files.
#[cfg(unix)]
#[test]
fn an_incremental_merge_killed_at_a_random_moment_can_be_rerun() {
    let mut rng = Rng(0x4a4d_0000_dead_0001);
    let (mut old_seen, mut none_seen, mut new_seen) = (0, 0, 0);
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ck");
        let model = per_file_model(3, &mut rng);
        save_per_file(&prefix, &model, 3);
        let base = Arc::new(Reader::open(&prefix).unwrap());
        let keep: &[u32] = if round % 2 == 0 { &[0, 1] } else { &[1, 2] };
        let next = keep_files(&model, keep, &mut rng);
        let ranks = 1 + round % 2;
        pending_incremental(&prefix, &base, &next, ranks);
        drop(base);
        let total = ranks as usize + keep.len();
        let mut c = child(dir.path(), "merge");
        wait_for(&mut c, "PDX-STARTED");
        std::thread::sleep(std::time::Duration::from_micros(rng.below(12_000)));
        let _ = c.kill();
        let _ = c.wait();
        let committed = match Reader::open(&prefix) {
            Ok(r) => {
                let names: BTreeSet<String> = r
                    .iter()
                    .map(|v| String::from_utf8(v.unwrap().name().to_vec()).unwrap())
                    .collect();
                if names.contains("fresh") {
                    check_reader(&r, &next);
                    new_seen += 1;
                    true
                } else {
                    check_reader(&r, &model);
                    old_seen += 1;
                    false
                }
            }
            Err(_) => {
                none_seen += 1;
                false
            }
        };
        let again = merge_shards(&prefix, &no_sync());
        assert_eq!(again.is_ok(), !committed, "round {round}: {again:?}");
        check_reader(&Reader::open(&prefix).unwrap(), &next);
        clean_shards(&prefix).unwrap();
        let mut expect: Vec<String> = (0..total)
            .map(|k| format!("ck.data-{k:05}-of-{total:05}"))
            .collect();
        expect.push("ck.index".into());
        assert_eq!(files_of(dir.path(), "ck"), expect, "round {round}");
    }
    eprintln!("killed: base left {old_seen}, nothing {none_seen}, new one {new_seen}");
}

/// A base data file deleted after the base was opened, before the first reuse from it: if the
/// base reader has not opened that file yet, the reuse is refused (`Missing`, naming the file;
/// nothing left behind); if it has (it maps the file), the bytes it checked are copied into
/// the new checkpoint instead of linked, and the save completes.
#[test]
fn a_base_data_file_deleted_before_the_first_reuse() {
    for mapped in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let (bp, base) = small_base(dir.path());
        let a = Tensor::new(DType::UInt8, &[100], &[1; 100]);
        if mapped {
            assert!(base.holds_unchanged("a", a).unwrap());
        }
        fs::remove_file(format!("{}.data-00000-of-00002", bp.display())).unwrap();
        let prefix = dir.path().join("new");
        let mut w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick())
            .unwrap()
            .with_base(base.clone())
            .unwrap();
        let got = w.add_or_reuse("a", a);
        if !mapped {
            let e = got.unwrap_err();
            assert!(is_shard_err(&e, ShardProblem::Missing), "{e:?}");
            assert!(
                shard_err_path(&e).ends_with("base.data-00000-of-00002"),
                "{e}"
            );
            assert_eq!(w.reused().tensors, 0);
            assert_eq!(files_of(dir.path(), "new").len(), 1);
            w.add("a", a).unwrap();
        } else {
            assert_eq!(got.unwrap(), Saved::Reused);
            let st = w.reused();
            assert_eq!((st.files, st.linked, st.copied), (1, 0, 1));
        }
        w.reuse_unchanged("c").unwrap();
        w.finish().unwrap();
        merge_shards(&prefix, &no_sync()).unwrap();
        let r = Reader::open(&prefix).unwrap();
        assert_eq!(r.get("a").unwrap().unwrap().data(), &[1; 100][..]);
        assert_eq!(r.get("c").unwrap().unwrap().data(), &[3; 100][..]);
        r.verify().unwrap();
    }
}

/// A reused tensor's bytes damaged in the new checkpoint's reused data file (a hard link: the
/// base's file is damaged with it) are found by `verify` and by a checked read, naming the
/// tensor: reused tensors are checked as written ones are.
#[test]
fn damage_to_a_reused_tensor_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let (_, base) = small_base(dir.path());
    let s = pending_on_small_base(dir.path(), &base);
    drop(base);
    let rep = s.merge(&no_sync()).unwrap();
    let prefix = dir.path().join("new");
    check_small_new(&prefix);
    // Where `a` is: which data file (a reused one) and where in it.
    let (file, at) = {
        let r = Reader::open(&prefix).unwrap();
        let v = r.get("a").unwrap().unwrap();
        let at = v.data_offset();
        let holders: Vec<&PathBuf> = rep
            .data_paths
            .iter()
            .filter(|p| {
                let bytes = fs::read(p).unwrap();
                bytes.len() as u64 > at + 100 && bytes[at as usize..at as usize + 100] == [1u8; 100]
            })
            .collect();
        assert_eq!(holders.len(), 1, "{holders:?}");
        (holders[0].clone(), at)
    };
    assert!(
        rep.data_paths[2..].contains(&file),
        "a is in a reused data file"
    );
    let mut bytes = fs::read(&file).unwrap();
    bytes[at as usize + 50] ^= 0x10;
    fs::write(&file, &bytes).unwrap();
    let r = Reader::open(&prefix).unwrap();
    let e = r.verify().unwrap_err();
    assert!(
        matches!(&e, Error::ChecksumMismatch { name: Some(n), .. } if n == "a"),
        "{e:?}"
    );
    let checked = Reader::open_with(
        &prefix,
        paramdex::ReadOptions {
            verify_tensors: true,
            ..paramdex::ReadOptions::default()
        },
    )
    .unwrap();
    let e = checked.get("a").unwrap_err();
    assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e:?}");
    // The other tensors are sound.
    assert_eq!(checked.get("c").unwrap().unwrap().data(), &[3; 100][..]);
    assert_eq!(checked.get("d").unwrap().unwrap().data(), &[4; 3][..]);
}

/// The models of [`shard_writers_in_processes_save_incrementally`]: the base's, and the next
/// one (the same in every process).
fn processes_models() -> (Model, Model) {
    let model = per_file_model(4, &mut Rng(0x0070_0c35_5e50_0001));
    let next = keep_files(&model, &[0, 1, 3], &mut Rng(0x0070_0c35_5e50_0002));
    (model, next)
}

/// An incremental save written by shard writers in separate processes, each with its own base
/// reader (racing to link the same base files), merged by the parent: the same checkpoint as
/// threads would write, nothing left over.
#[cfg(unix)]
#[test]
fn shard_writers_in_processes_save_incrementally() {
    let dir = tempfile::tempdir().unwrap();
    let (model, next) = processes_models();
    save_per_file(&dir.path().join("base"), &model, 4);
    let n = 3u32;
    let id = SaveId::random();
    let mut children: Vec<_> = (0..n)
        .map(|k| child(dir.path(), &format!("write-{k}-{n}-{id}")))
        .collect();
    let mut reused = 0u64;
    for c in &mut children {
        let line = wait_for(c, "PDX-WRITTEN");
        reused += line
            .trim()
            .rsplit(' ')
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap();
        assert!(c.wait().unwrap().success());
    }
    let want = next
        .iter()
        .filter(|(name, t)| model.get(*name) == Some(t))
        .count() as u64;
    assert_eq!(reused, want);
    let prefix = dir.path().join("ck");
    let rep = merge_shards(&prefix, &no_sync()).unwrap();
    assert_eq!(rep.save_id, id);
    assert_eq!((rep.reused_tensors, rep.reused_files), (want, 3));
    check_reader(&Reader::open(&prefix).unwrap(), &next);
    let left = shard_files(&prefix).unwrap();
    assert!(
        left.iter().all(|f| f.kind == ShardFileKind::Committed),
        "{left:?}"
    );
    remove_checkpoint(dir.path(), "base");
    check_reader(&Reader::open(&prefix).unwrap(), &next);
}
