//! Writing a sharded checkpoint (SPEC.md 12) into an object store (SPEC.md 12.6): each writer
//! streams its shard by multipart upload straight under its final name `PREFIX.data-k-of-N`
//! ([`create_in_bucket`]: a [`ShardWriter`]), then one merge ([`merge_shards_url`]) reads every data object's
//! footer and index by ranged GETs (never its records), checks them exactly as the local merge
//! does (the same planning code, `native::plan_index`), and writes `PREFIX.index` last, in one
//! PUT: the checkpoint exists when that object does. Data objects of an earlier checkpoint with
//! another number of data objects are deleted before that PUT.
//!
//! Object stores have no rename, so a shard cannot wait under a pending name as it does in a
//! directory: a save at the prefix of an existing checkpoint with the same number of data
//! objects replaces that checkpoint's data objects while the old index is still in place.
//! Readers of the old checkpoint then get errors naming the object (another length or identity
//! than the index records, or another ETag than the one they opened), never the new save's
//! bytes as the old one's.
//!
//! An incremental save (SPEC.md 12.5; [`ShardWriter::with_base`]) reuses a checkpoint of
//! the same bucket: the first tensor a shard reuses from one of the base's data objects has
//! the store copy that object (server-side `CopyObject`, no byte through the writer) to
//! `PREFIX.reused-<save id>-k-of-n`, and the shard's references go to
//! `PREFIX.refs-k-of-N.pending` (one PUT) before its upload completes. The merge reads those as
//! the local merge reads the files of the same names (the same code: `read_all_references`,
//! `reused_files`, `plan_index`), then has the store copy each shard and each reused object to
//! its name among the checkpoint's N + R data objects, deletes other numbers' data objects,
//! PUTs the index, and only then deletes the save's `-of-N` shard objects, its references and
//! reused objects: a merge run again after a crash before the index's PUT finds them all.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, RemoteProblem, Result, ShardProblem};
use crate::native::{
    data_suffix, parse_suffix, plan_index, read_all_references, read_shard_index_from,
    reused_files, reused_suffix, sibling_files, write_index, MergeShardsOptions, MergeShardsReport,
    MergeStep, Place, SaveId, ShardFile, ShardFileKind, ShardIndex, ShardOf, ShardWriter, Sibling,
    WriterOptions, INDEX_SUFFIX,
};
use crate::remote::place::BucketPlace;
use crate::remote::upload::UploadOptions;

/// Bytes of a data object's end read when the merge opens it: its footer and index, usually.
const MERGE_TAIL: u64 = 256 << 10;
/// What reading one data object's index gave: the bytes read, and the index or why not.
type IndexRead = (u64, Result<ShardIndex>);

/// Data objects whose indexes the merge reads at once.
const MERGE_READERS: usize = 16;

/// Starts shard `shard_id` of `num_shards` of the save `save_id` of the sharded checkpoint at
/// the bucket prefix `place`: a [`ShardWriter`] streaming its bytes by multipart upload
/// ([`crate::remote::ObjectUpload`]: parts uploaded while the writer writes, bounded memory) to
/// `PREFIX.data-k-of-N`, which appears, complete, when [`ShardWriter::finish`] succeeds;
/// dropped unfinished, or failing, the upload is aborted and nothing appears. The public way
/// in is [`crate::create_shard_writer`] of a URL.
///
/// An incremental save ([`ShardWriter::with_base`]) reuses a checkpoint of the same bucket,
/// the reused data objects copied by the store; a base at the save's own prefix is refused
/// (its data objects would be replaced by the save's shards while others are still copied).
pub(crate) fn create_in_bucket(
    place: Arc<BucketPlace>,
    shard_id: u32,
    num_shards: u32,
    save_id: SaveId,
    opts: WriterOptions,
) -> Result<ShardWriter> {
    let suffix = data_suffix(shard_id, num_shards);
    ShardWriter::create_in(place, &suffix, shard_id, num_shards, save_id, opts)
}

/// [`create_in_bucket`] at the URL `prefix` (`s3://bucket/dir/PREFIX`), uploaded as `upload`
/// says.
pub(crate) fn create_at_url(
    prefix: &str,
    shard_id: u32,
    num_shards: u32,
    save_id: SaveId,
    opts: WriterOptions,
    upload: &UploadOptions,
) -> Result<ShardWriter> {
    crate::native::check_shard_number(shard_id, num_shards)?;
    let place = BucketPlace::new(prefix)?.with_upload(upload.clone());
    create_in_bucket(Arc::new(place), shard_id, num_shards, save_id, opts)
}

/// Commits a sharded save whose shards were uploaded to `prefix` (`s3://bucket/dir/PREFIX`) by
/// shard writers ([`crate::create_shard_writer`] of the URL; SPEC.md 12.6): lists the data objects `PREFIX.data-k-of-N`, reads
/// each one's footer and index (one ranged GET each, two when its index is larger than 256 KiB;
/// never its records), takes the save that is not the committed checkpoint's (or the one
/// [`MergeShardsOptions::save_id`] names), checks its shards against each other exactly as
/// [`crate::merge_shards`] does (and, for an incremental save, their references against the
/// reused objects' indexes), deletes the data objects of another number of data objects (an
/// earlier checkpoint's, or a failed save's), and writes `PREFIX.index` last, in one PUT. An
/// incremental save's shards and reused objects are first copied by the store to their names
/// among the checkpoint's data objects (see the module documentation). The report's paths are
/// URLs.
///
/// Errors: as [`crate::merge_shards`] ([`Error::Shard`] naming the URL of a missing shard, or
/// of one of another save in its place, or of a missing references or reused object);
/// [`Error::Remote`] for a failed request. Nothing is written when an error is reported
/// before the copies of an incremental save (or, for another save, the index's PUT).
pub(crate) fn merge_shards_url(
    prefix: &str,
    opts: &MergeShardsOptions<'_>,
) -> Result<MergeShardsReport> {
    merge_shards_at(&BucketPlace::new(prefix)?, opts)
}

/// [`merge_shards_url`] of the checkpoint's objects `at`.
pub(crate) fn merge_shards_at(
    at: &BucketPlace,
    opts: &MergeShardsOptions<'_>,
) -> Result<MergeShardsReport> {
    // The data objects at the prefix, PREFIX.data-k-of-N: (k, N, suffix).
    let mut objects: Vec<(u32, u32, String)> = at
        .list()?
        .into_iter()
        .filter_map(|suffix| match parse_suffix(suffix.as_bytes()) {
            Some(Sibling::Data {
                shard,
                num_shards,
                pending: false,
            }) => Some((shard, num_shards, suffix)),
            _ => None,
        })
        .collect();
    objects.sort_by_key(|&(k, n, _)| (n, k));
    // The committed checkpoint's save, if there is one: its data objects are not a new save.
    let committed: Option<SaveId> = match at.open_range(INDEX_SUFFIX, MERGE_TAIL) {
        Ok(src) => {
            crate::native::ranged::RangedReader::open_native(Arc::new(src), Default::default())
                .ok()
                .and_then(|r| r.header().shards.first().map(|s| s.shard.save_id))
        }
        Err(Error::Remote {
            problem: RemoteProblem::NotFound,
            ..
        }) => None,
        Err(e) => return Err(e),
    };
    // Each data object's footer and index, several objects at once (each a request or two:
    // latency, not bandwidth, is what a merge of many shards waits for).
    let results: Vec<Mutex<Option<IndexRead>>> = objects.iter().map(|_| Mutex::new(None)).collect();
    let positions: Vec<usize> = (0..objects.len()).collect();
    crate::parallel::try_each(&positions, MERGE_READERS, |&i| {
        let (_, _, suffix) = &objects[i];
        let url = at.shown(suffix);
        let mut read = 0u64;
        let got = at.open_range(suffix, MERGE_TAIL).and_then(|src| {
            // The open's read (MERGE_TAIL bytes) serves the shard index's first read.
            read_shard_index_from(&src, Path::new(&url), &mut read, MERGE_TAIL)
        });
        *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some((read, got));
        Ok(())
    })?;
    let mut read = 0u64;
    let mut shards: Vec<(ShardIndex, String)> = Vec::new();
    // Objects that are not readable shards: (k, N, URL, why), reported if the save needs them.
    let mut unreadable: Vec<(u32, u32, String, Error)> = Vec::new();
    for ((k, n, suffix), slot) in objects.iter().zip(results) {
        let url = at.shown(suffix);
        let (bytes, got) = slot
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .expect("every object was read");
        read += bytes;
        match got {
            Ok(s) if (s.shard.shard_id, s.shard.num_shards) == (*k, *n) => shards.push((s, url)),
            Ok(s) => unreadable.push((
                *k,
                *n,
                url.clone(),
                Error::Shard {
                    path: url,
                    problem: ShardProblem::Identity,
                    detail: format!(
                        "named as shard {k} of {n}, the object says it is shard {} of {}",
                        s.shard.shard_id, s.shard.num_shards
                    ),
                },
            )),
            Err(e) => unreadable.push((*k, *n, url, e)),
        }
    }
    // The save to commit.
    let wanted = |s: &ShardOf| {
        opts.save_id
            .map_or(Some(s.save_id) != committed, |id| id == s.save_id)
            && opts.num_shards.is_none_or(|n| n == s.num_shards)
    };
    let mut saves: Vec<(SaveId, u32)> = shards
        .iter()
        .map(|(s, _)| (s.shard.save_id, s.shard.num_shards))
        .filter(|(id, n)| {
            wanted(&ShardOf {
                save_id: *id,
                shard_id: 0,
                num_shards: *n,
            })
        })
        .collect();
    saves.sort();
    saves.dedup();
    let (save_id, n) = match saves.as_slice() {
        [one] => *one,
        [] => {
            // A shard of the wanted save that could not be read is the reason.
            if let Some((.., e)) = unreadable
                .into_iter()
                .find(|(_, n, ..)| opts.num_shards.is_none_or(|m| m == *n))
            {
                return Err(e);
            }
            return Err(Error::Shard {
                path: at.url().to_string(),
                problem: ShardProblem::Missing,
                detail: "no data objects of a save to merge (PREFIX.data-k-of-N other than the \
                         committed checkpoint's)"
                    .into(),
            });
        }
        several => {
            let list: Vec<String> = several
                .iter()
                .map(|(s, n)| format!("save {s} ({n} shards)"))
                .collect();
            return Err(Error::Shard {
                path: at.url().to_string(),
                problem: ShardProblem::Leftover,
                detail: format!(
                    "data objects of several saves: {}; name the save to merge",
                    list.join(", ")
                ),
            });
        }
    };
    // Every shard of the save, in order.
    let mut ordered: Vec<ShardIndex> = Vec::with_capacity(n as usize);
    let mut urls = Vec::with_capacity(n as usize);
    let mut by_k: Vec<Option<(ShardIndex, String)>> = (0..n).map(|_| None).collect();
    for (s, url) in shards {
        if s.shard.save_id == save_id && s.shard.num_shards == n {
            let k = s.shard.shard_id as usize;
            by_k[k] = Some((s, url));
        }
    }
    for (k, slot) in by_k.into_iter().enumerate() {
        let k = u32::try_from(k).expect("below MAX_SHARDS");
        let Some((s, url)) = slot else {
            if let Some((.., e)) = unreadable
                .iter()
                .position(|(j, m, ..)| (*j, *m) == (k, n))
                .map(|i| unreadable.swap_remove(i))
            {
                return Err(e);
            }
            let url = at.shown(&data_suffix(k, n));
            let there = objects.iter().any(|(j, m, _)| (*j, *m) == (k, n));
            return Err(Error::Shard {
                path: url,
                problem: ShardProblem::Missing,
                detail: if there {
                    format!(
                        "shard {k} of {n} of save {save_id} is missing: the object there is \
                         another save's"
                    )
                } else {
                    format!("shard {k} of {n} of save {save_id} is missing")
                },
            });
        };
        ordered.push(s);
        urls.push(url);
    }
    // An incremental save: each shard's references, and the earlier data objects they name,
    // each checked to be the one recorded.
    let refs = read_all_references(at, &ordered, &mut read)?;
    let (reused_refs, total) = reused_files(at, &refs, save_id, n)?;
    let mut reused: Vec<ShardIndex> = Vec::with_capacity(reused_refs.len());
    for f in &reused_refs {
        let suffix = reused_suffix(&f.shard);
        let url = at.shown(&suffix);
        let s = at
            .open(&suffix)
            .and_then(|src| read_shard_index_from(&*src, Path::new(&url), &mut read, MERGE_TAIL))
            .map_err(|e| match e {
                Error::Shard {
                    problem: ShardProblem::Missing,
                    ..
                } => Error::Shard {
                    path: url.clone(),
                    problem: ShardProblem::Missing,
                    detail: format!(
                        "data object {} of {} of save {} ({} bytes), which the save reuses, is \
                         not beside the checkpoint",
                        f.shard.shard_id, f.shard.num_shards, f.shard.save_id, f.file_len
                    ),
                },
                e => e,
            })?;
        if s.shard != f.shard || s.file_len != f.file_len {
            return Err(Error::Shard {
                path: url,
                problem: ShardProblem::Identity,
                detail: format!(
                    "the object is shard {} of {} of save {} ({} bytes), the references name \
                     data object {} of {} of save {} ({} bytes)",
                    s.shard.shard_id,
                    s.shard.num_shards,
                    s.shard.save_id,
                    s.file_len,
                    f.shard.shard_id,
                    f.shard.num_shards,
                    f.shard.save_id,
                    f.file_len
                ),
            });
        }
        reused.push(s);
    }
    let planned = plan_index(&ordered, &refs, &reused, total, opts)?;
    if let Some(f) = opts.on_step {
        f(MergeStep::Checked);
    }
    let mut bytes = Vec::new();
    let index_len = write_index(&mut bytes, &planned)?;
    // An incremental save's data objects under their names among the checkpoint's `total`,
    // copied by the store (no rename in a bucket): the shards, then the reused objects.
    let mut data_paths = urls;
    if total != n {
        let from = (0..n)
            .map(|k| data_suffix(k, n))
            .chain(reused_refs.iter().map(|f| reused_suffix(&f.shard)));
        data_paths.clear();
        for (k, from) in (0..total).zip(from) {
            let to = data_suffix(k, total);
            at.bring_in(at, &from, &to)?;
            if let Some(f) = opts.on_step {
                f(MergeStep::ShardRenamed(k));
            }
            data_paths.push(at.shown(&to));
        }
    }
    // Data objects of another number of data objects belong to no checkpoint once the index
    // is written: they go first, so that a merge run again after a crash never finds an
    // earlier save of another number of shards complete beside the committed one and takes
    // it. The save's own shards (copied above) stay until the index is written.
    let mut removed = Vec::new();
    for (_, m, suffix) in &objects {
        // Every object of the save's number of shards is one of its shards (they were
        // written under those names, and each was found).
        if *m != total && *m != n && at.delete(suffix)? {
            removed.push(PathBuf::from(at.shown(suffix)));
        }
    }
    if let Some(f) = opts.on_step {
        f(MergeStep::PreviousDataRemoved);
    }
    // The checkpoint exists from this PUT on (one object, whole or not at all).
    at.put(INDEX_SUFFIX, &bytes, true)?;
    if let Some(f) = opts.on_step {
        f(MergeStep::Committed);
    }
    // An incremental save's objects that the checkpoint does not name (one left by a failure
    // here belongs to no checkpoint: the committed save is never merged again).
    if total != n {
        let leftovers = (0..n)
            .flat_map(|k| [data_suffix(k, n), crate::native::refs_suffix(k, n)])
            .chain(reused_refs.iter().map(|f| reused_suffix(&f.shard)));
        for suffix in leftovers {
            let _ = at.delete(&suffix);
        }
    }
    Ok(MergeShardsReport {
        index_path: PathBuf::from(at.shown(INDEX_SUFFIX)),
        data_paths: data_paths.into_iter().map(PathBuf::from).collect(),
        save_id,
        tensors: planned.merged.tensors,
        slices: planned.merged.slices,
        partial: planned.partial,
        reused_tensors: planned.merged.reused_tensors,
        reused_bytes: planned.merged.reused_bytes,
        reused_files: reused.len() as u64,
        bytes_read: read,
        shard_bytes: ordered.iter().map(|s| s.file_len).sum(),
        index_len,
        removed,
        ignored: Vec::new(),
    })
}

/// The objects of the sharded checkpoint at `prefix` (`s3://bucket/dir/PREFIX`) and those a
/// save that did not finish left there, as [`crate::shard_files`] lists a directory's (paths
/// are URLs): the committed checkpoint's data objects, an incremental save's references and
/// reused objects (`Pending`), and data objects of another number than the committed
/// checkpoint's (`Orphan`: a failed save's, or one in progress). Reads each object's index by
/// ranged GETs, never its records.
pub(crate) fn shard_files_url(prefix: &str) -> Result<Vec<ShardFile>> {
    shard_files_at(&BucketPlace::new(prefix)?)
}

/// [`shard_files_url`] of the checkpoint's objects `at`.
pub(crate) fn shard_files_at(at: &BucketPlace) -> Result<Vec<ShardFile>> {
    sibling_files(at)
}

/// Deletes what [`shard_files_url`] reports as left behind at `prefix`, never the committed
/// checkpoint's objects, and returns them. Run it only when no save at that prefix is in
/// progress: its shards and references are left behind too until its merge.
pub(crate) fn clean_shards_url(prefix: &str) -> Result<Vec<ShardFile>> {
    clean_shards_at(&BucketPlace::new(prefix)?)
}

/// [`clean_shards_url`] of the checkpoint's objects `at`.
pub(crate) fn clean_shards_at(at: &BucketPlace) -> Result<Vec<ShardFile>> {
    let mut removed = Vec::new();
    for f in sibling_files(at)? {
        if f.kind == ShardFileKind::Committed {
            continue;
        }
        let url = f.path.to_string_lossy().into_owned();
        let Some(suffix) = url.strip_prefix(at.url()) else {
            continue;
        };
        if at.delete(suffix)? {
            removed.push(f);
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;
    use object_store::path::Path as ObjectPath;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

    use super::*;
    use crate::dtype::DType;
    use crate::native::{Reader, Region, Saved, Tensor};
    use crate::remote::sharded_open::open_sharded_at;
    use crate::remote::url::{runtime, ObjectLocation};
    use crate::remote::RemoteOptions;

    fn place(store: &Arc<InMemory>, bucket: &str, key: &str) -> BucketPlace {
        let loc = ObjectLocation {
            store: store.clone(),
            multipart: Some(store.clone()),
            path: ObjectPath::from(key),
            url: format!("s3://{bucket}/{key}"),
            runtime: runtime().unwrap(),
        };
        BucketPlace::at(loc, bucket).unwrap()
    }

    fn keys(store: &InMemory, under: &str) -> Vec<String> {
        let place_keys = runtime()
            .unwrap()
            .block_on(store.list_with_delimiter(Some(&ObjectPath::from(under))))
            .unwrap();
        let mut out: Vec<String> = place_keys
            .objects
            .iter()
            .map(|o| o.location.to_string())
            .collect();
        out.sort();
        out
    }

    fn row(k: u64) -> Region {
        Region::new(vec![k, 0], vec![1, 3]).unwrap()
    }

    fn quick() -> WriterOptions {
        WriterOptions {
            sync: false,
            ..Default::default()
        }
    }

    /// The base: two shards, each a tensor of its own and one row of `emb`.
    fn base(store: &Arc<InMemory>) -> Arc<Reader> {
        let at = Arc::new(place(store, "mem", "ck/step1"));
        let save = SaveId::random();
        for k in 0..2u32 {
            let mut w = create_in_bucket(at.clone(), k, 2, save, quick()).unwrap();
            let v = [k as u8 + 1; 100];
            w.add(format!("t{k}"), Tensor::new(DType::UInt8, &[100], &v))
                .unwrap();
            let r = [k as u8 + 10; 3];
            w.add_slice("emb", DType::UInt8, &[2, 3], &row(u64::from(k)), &r)
                .unwrap();
            w.finish().unwrap();
        }
        merge_shards_at(&at, &MergeShardsOptions::default()).unwrap();
        Arc::new(open_sharded_at(at, RemoteOptions::default()).unwrap())
    }

    /// One shard reusing `t0`, row 0 of `emb` (compared) and `t1` (the caller's word), writing
    /// a changed row 1.
    fn incremental(store: &Arc<InMemory>, base: &Arc<Reader>) -> (Arc<BucketPlace>, u64) {
        let at = Arc::new(place(store, "mem", "ck/step2"));
        let mut w = create_in_bucket(at.clone(), 0, 1, SaveId::random(), quick())
            .unwrap()
            .with_base(base.clone())
            .unwrap();
        let same = [1u8; 100];
        let t = Tensor::new(DType::UInt8, &[100], &same);
        assert_eq!(w.add_or_reuse("t0", t).unwrap(), Saved::Reused);
        w.reuse_unchanged("t1").unwrap();
        let r0 = [10u8; 3];
        let got = w
            .add_slice_or_reuse("emb", DType::UInt8, &[2, 3], &row(0), &r0)
            .unwrap();
        assert_eq!(got, Saved::Reused);
        let r1 = [99u8; 3];
        let got = w
            .add_slice_or_reuse("emb", DType::UInt8, &[2, 3], &row(1), &r1)
            .unwrap();
        assert_eq!(got, Saved::Written);
        let changed = [7u8; 4];
        let t = Tensor::new(DType::UInt8, &[4], &changed);
        assert_eq!(w.add_or_reuse("new", t).unwrap(), Saved::Written);
        let st = w.reused();
        assert_eq!((st.tensors, st.files, st.server_copied), (3, 2, 2));
        assert_eq!((st.linked, st.copied, st.copied_bytes), (0, 0, 0));
        w.finish().unwrap();
        (at, st.bytes)
    }

    #[test]
    fn an_incremental_save_in_a_bucket() {
        let store = Arc::new(InMemory::new());
        let base = base(&store);
        let (at, reused_bytes) = incremental(&store, &base);
        // Before the merge: the shard, its references, the two copied data objects.
        assert_eq!(keys(&store, "ck").len(), 3 + 4);
        let rep = merge_shards_at(&at, &MergeShardsOptions::default()).unwrap();
        assert_eq!((rep.reused_tensors, rep.reused_files), (3, 2));
        assert_eq!(rep.reused_bytes, reused_bytes);
        assert_eq!(rep.data_paths.len(), 3);
        // Only the checkpoint's objects are left at its prefix; the base can go.
        let step2: Vec<String> = keys(&store, "ck")
            .into_iter()
            .filter(|k| k.starts_with("ck/step2"))
            .collect();
        assert_eq!(
            step2,
            [
                "ck/step2.data-00000-of-00003",
                "ck/step2.data-00001-of-00003",
                "ck/step2.data-00002-of-00003",
                "ck/step2.index"
            ]
        );
        drop(base);
        let rt = runtime().unwrap();
        for k in keys(&store, "ck") {
            if k.starts_with("ck/step1") {
                rt.block_on(store.delete(&ObjectPath::from(k))).unwrap();
            }
        }
        let r = open_sharded_at(at.clone(), RemoteOptions::default()).unwrap();
        assert_eq!(r.get("t0").unwrap().unwrap().data(), [1u8; 100]);
        assert_eq!(r.get("t1").unwrap().unwrap().data(), [2u8; 100]);
        assert_eq!(r.get("new").unwrap().unwrap().data(), [7u8; 4]);
        let emb = r.get_slice("emb", &Region::full(&[2, 3])).unwrap().unwrap();
        assert_eq!(emb.data(), [10, 10, 10, 99, 99, 99]);
        let v = r.verify().unwrap();
        assert_eq!((v.tensors, v.slices), (4, 2));

        // A reused object damaged (one byte of t1's data, its length kept) is refused.
        let key = ObjectPath::from("ck/step2.data-00002-of-00003");
        let mut bytes = rt
            .block_on(async { store.get(&key).await.unwrap().bytes().await })
            .unwrap()
            .to_vec();
        let at_t1 = bytes.windows(100).position(|w| w == [2u8; 100]).unwrap();
        bytes[at_t1 + 50] ^= 0xff;
        rt.block_on(store.put(&key, PutPayload::from(bytes)))
            .unwrap();
        let r = open_sharded_at(at, RemoteOptions::default()).unwrap();
        let e = r.get("t1").unwrap_err();
        assert!(matches!(e, Error::ChecksumMismatch { .. }), "{e:?}");
        assert!(r.verify().is_err());
        assert_eq!(r.get("t0").unwrap().unwrap().data(), [1u8; 100]);
    }

    #[test]
    fn a_merge_refuses_a_missing_reused_object() {
        let store = Arc::new(InMemory::new());
        let base = base(&store);
        let (at, _) = incremental(&store, &base);
        let gone = keys(&store, "ck")
            .into_iter()
            .find(|k| k.contains(".reused-"))
            .unwrap();
        runtime()
            .unwrap()
            .block_on(store.delete(&ObjectPath::from(gone.as_str())))
            .unwrap();
        let e = merge_shards_at(&at, &MergeShardsOptions::default()).unwrap_err();
        match e {
            Error::Shard { problem, path, .. } => {
                assert_eq!(problem, ShardProblem::Missing);
                assert!(
                    path.ends_with(gone.trim_start_matches("ck/step2")),
                    "{path}"
                );
            }
            e => panic!("{e:?}"),
        }
        // Nothing was written: no index.
        assert!(!keys(&store, "ck").contains(&"ck/step2.index".to_string()));
    }

    /// What a save that was never merged leaves is listed and cleaned; the base, committed,
    /// stays whole.
    #[test]
    fn leftovers_of_an_unmerged_incremental_save_are_cleaned() {
        let store = Arc::new(InMemory::new());
        let base = base(&store);
        let (at, _) = incremental(&store, &base);
        let kinds: Vec<ShardFileKind> = shard_files_at(&at)
            .unwrap()
            .iter()
            .map(|f| f.kind)
            .collect();
        assert_eq!(kinds.len(), 4, "{kinds:?}");
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == ShardFileKind::Pending)
                .count(),
            3
        );
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == ShardFileKind::Orphan)
                .count(),
            1
        );
        let removed = clean_shards_at(&at).unwrap();
        assert_eq!(removed.len(), 4);
        assert!(removed
            .iter()
            .all(|f| f.path.to_string_lossy().starts_with("s3://mem/ck/step2.")));
        assert!(keys(&store, "ck").iter().all(|k| k.starts_with("ck/step1")));
        let step1 = place(&store, "mem", "ck/step1");
        let base_files = shard_files_at(&step1).unwrap();
        assert_eq!(base_files.len(), 2);
        assert!(base_files
            .iter()
            .all(|f| f.kind == ShardFileKind::Committed));
        assert!(clean_shards_at(&step1).unwrap().is_empty());
    }

    #[test]
    fn a_base_at_the_same_prefix_is_refused() {
        let store = Arc::new(InMemory::new());
        let base = base(&store);
        let at = Arc::new(place(&store, "mem", "ck/step1"));
        let w = create_in_bucket(at, 0, 1, SaveId::random(), quick()).unwrap();
        let e = w.with_base(base).unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    }

    #[test]
    fn a_base_in_another_bucket_is_refused() {
        let store = Arc::new(InMemory::new());
        let base = base(&store);
        let at = Arc::new(place(&store, "other", "ck/step2"));
        let mut w = create_in_bucket(at, 0, 1, SaveId::random(), quick())
            .unwrap()
            .with_base(base)
            .unwrap();
        let e = w.reuse_unchanged("t0").unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    }
}
