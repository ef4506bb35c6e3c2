//! Writing a sharded checkpoint (SPEC.md 12) into an object store (SPEC.md 12.6): each writer
//! streams its shard by multipart upload straight under its final name `PREFIX.data-k-of-N`
//! ([`RemoteShardWriter`]),
//! then one merge ([`merge_shards_url`]) reads every data object's footer and index by ranged
//! GETs (never its records), checks them exactly as the local merge does (the same planning
//! code, `native::plan_index`), and writes `PREFIX.index` last, in one PUT: the checkpoint
//! exists when that object does. Data objects of an earlier checkpoint with another number of
//! shards are deleted after it.
//!
//! Object stores have no rename, so a shard cannot wait under a pending name as it does in a
//! directory: a save at the prefix of an existing checkpoint with the same number of shards
//! replaces that checkpoint's data objects while the old index is still in place. Readers of the
//! old checkpoint then get errors naming the object (another length or identity than the index
//! records, or another ETag than the one they opened), never the new save's bytes as the old
//! one's.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Error, Result, ShardProblem};
use crate::native::{
    parse_data_name, plan_index, read_shard_index_from, write_index, FinishStats,
    MergeShardsOptions, MergeShardsReport, MergeStep, SaveId, ShardIndex, ShardOf, ShardWriter,
    WriterOptions, MAX_SHARDS,
};
use crate::remote::object::{remote_error, ObjectRange};
use crate::remote::sharded::{data_suffix, sharded_names};
use crate::remote::upload::{ObjectUpload, UploadOptions};
use crate::remote::url::{resolve, ObjectLocation};

/// Bytes of a data object's end read when the merge opens it: its footer and index, usually.
const MERGE_TAIL: u64 = 256 << 10;
/// What reading one data object's index gave: the bytes read, and the index or why not.
type IndexRead = (u64, Result<ShardIndex>);

/// Data objects whose indexes the merge reads at once.
const MERGE_READERS: usize = 16;

/// The `s3://` URL `prefix` resolved, refusing what a sharded checkpoint cannot be written to.
fn resolve_prefix(prefix: &str) -> Result<ObjectLocation> {
    if prefix.starts_with("file://") {
        return Err(Error::Unsupported(format!(
            "{prefix}: a sharded checkpoint in a local directory is written by ShardWriter and \
             merge_shards at its path, not at a file:// URL"
        )));
    }
    resolve(prefix)
}

/// The writer of one shard of a sharded save into an object store: a [`ShardWriter`] (whose
/// methods it offers through `Deref`) streaming its bytes by multipart upload
/// ([`ObjectUpload`]: parts uploaded while the writer writes, bounded memory) to
/// `PREFIX.data-k-of-N`, which appears, complete, when [`RemoteShardWriter::finish`] succeeds;
/// dropped unfinished, or failing, the upload is aborted and nothing appears.
///
/// Incremental saves are not offered on object storage: [`ShardWriter::with_base`] refuses a
/// shard written so, and [`merge_shards_url`] a shard that counts references (both with
/// [`Error::Unsupported`]).
#[derive(Debug)]
pub struct RemoteShardWriter {
    writer: ShardWriter,
    url: String,
}

impl RemoteShardWriter {
    /// Starts shard `shard_id` of `num_shards` of the save `save_id` of the sharded checkpoint
    /// at `prefix` (`s3://bucket/dir/PREFIX`), uploaded with the default [`UploadOptions`].
    ///
    /// Errors: as [`ShardWriter::create`]; [`Error::Unsupported`] for a `file://` URL.
    pub fn create(
        prefix: &str,
        shard_id: u32,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
    ) -> Result<RemoteShardWriter> {
        Self::create_with(
            prefix,
            shard_id,
            num_shards,
            save_id,
            opts,
            &UploadOptions::default(),
        )
    }

    /// [`RemoteShardWriter::create`] with explicit upload options.
    pub fn create_with(
        prefix: &str,
        shard_id: u32,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
        upload: &UploadOptions,
    ) -> Result<RemoteShardWriter> {
        let (prefix, _) = sharded_names(prefix);
        if num_shards == 0 || num_shards > MAX_SHARDS || shard_id >= num_shards {
            return Err(Error::InvalidArgument(format!(
                "shard {shard_id} of {num_shards}: the shard number must be below the number \
                 of shards, which is 1 to {MAX_SHARDS}"
            )));
        }
        let url = format!("{prefix}{}", data_suffix(shard_id, num_shards));
        let dest = ObjectUpload::new(resolve_prefix(&url)?, upload)?;
        let writer = ShardWriter::create_on(Box::new(dest), shard_id, num_shards, save_id, opts)?;
        Ok(RemoteShardWriter { writer, url })
    }

    /// Where the shard goes: `PREFIX.data-k-of-N`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Finishes the shard and completes its upload. The checkpoint exists only once
    /// [`merge_shards_url`] has written its index.
    pub fn finish(self) -> Result<FinishStats> {
        self.writer.finish()
    }
}

impl Deref for RemoteShardWriter {
    type Target = ShardWriter;
    fn deref(&self) -> &ShardWriter {
        &self.writer
    }
}

impl DerefMut for RemoteShardWriter {
    fn deref_mut(&mut self) -> &mut ShardWriter {
        &mut self.writer
    }
}

/// Where the objects of a sharded checkpoint are: the bucket's store, the key of the prefix's
/// "directory" (to list) and its last part (the stem every name starts with).
struct PrefixObjects {
    loc: ObjectLocation,
    /// `PREFIX` as a URL.
    url: String,
    /// The key of `PREFIX`.
    key: String,
    dir: Option<ObjectPath>,
    stem: String,
}

impl PrefixObjects {
    fn new(prefix: &str) -> Result<PrefixObjects> {
        let (prefix, _) = sharded_names(prefix);
        let loc = resolve_prefix(&prefix)?;
        let key = crate::remote::url::split_s3_url(&prefix)?.1.to_string();
        let (dir, stem) = match key.rsplit_once('/') {
            Some((d, s)) => (Some(ObjectPath::from(d)), s.to_string()),
            None => (None, key.clone()),
        };
        if stem.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{prefix}: a sharded checkpoint's prefix names its files (s3://bucket/dir/PREFIX)"
            )));
        }
        Ok(PrefixObjects {
            loc,
            url: prefix,
            key,
            dir,
            stem,
        })
    }

    fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.loc.store
    }

    /// The object `PREFIX<suffix>`: its key and URL.
    fn object(&self, suffix: &str) -> (ObjectPath, String) {
        (
            ObjectPath::from(format!("{}{suffix}", self.key)),
            format!("{}{suffix}", self.url),
        )
    }

    /// The data objects at the prefix, `PREFIX.data-k-of-N`: (k, N, key, URL).
    fn data_objects(&self) -> Result<Vec<(u32, u32, ObjectPath, String)>> {
        let listed = self
            .loc
            .runtime
            .block_on(self.store().list_with_delimiter(self.dir.as_ref()))
            .map_err(|e| remote_error(&self.url, e))?;
        let mut out = Vec::new();
        for o in listed.objects {
            let Some(name) = o.location.filename() else {
                continue;
            };
            if let Some((k, n, false)) = parse_data_name(name.as_bytes(), self.stem.as_bytes()) {
                let suffix = &name[self.stem.len()..];
                let (path, url) = self.object(suffix);
                out.push((k, n, path, url));
            }
        }
        out.sort_by_key(|&(k, n, ..)| (n, k));
        Ok(out)
    }
}

/// Commits a sharded save whose shards were uploaded to `prefix` (`s3://bucket/dir/PREFIX`) by
/// [`RemoteShardWriter`]s (SPEC.md 12.6): lists the data objects `PREFIX.data-k-of-N`, reads
/// each one's footer and index (one ranged GET each, two when its index is larger than 256 KiB;
/// never its records), takes the save that is not the committed checkpoint's (or the one
/// [`MergeShardsOptions::save_id`] names), checks its shards against each other exactly as
/// [`crate::merge_shards`] does, deletes the data objects of another number of shards (an
/// earlier checkpoint's, or a failed save's), and writes `PREFIX.index` last, in one PUT. The
/// report's paths are URLs.
///
/// Errors: as [`crate::merge_shards`] ([`Error::Shard`] naming the URL of a missing shard, or
/// of one of another save in its place); [`Error::Unsupported`] for a shard of an incremental
/// save; [`Error::Remote`] for a failed request. Nothing is written when an error is reported
/// before the index's PUT.
pub fn merge_shards_url(prefix: &str, opts: &MergeShardsOptions<'_>) -> Result<MergeShardsReport> {
    let at = PrefixObjects::new(prefix)?;
    let objects = at.data_objects()?;
    // The committed checkpoint's save, if there is one: its data objects are not a new save.
    let (index_key, index_url) = at.object(".index");
    let committed: Option<SaveId> = match ObjectRange::open(
        at.store().clone(),
        index_key.clone(),
        index_url.clone(),
        at.loc.runtime.clone(),
        256 << 10,
    ) {
        Ok(src) => {
            crate::remote::reader::RemoteReader::open_native(Arc::new(src), Default::default())
                .ok()
                .and_then(|r| r.header().shards.first().map(|s| s.shard.save_id))
        }
        Err(Error::Remote {
            problem: crate::error::RemoteProblem::NotFound,
            ..
        }) => None,
        Err(e) => return Err(e),
    };
    // Each data object's footer and index, several objects at once (each a request or two:
    // latency, not bandwidth, is what a merge of many shards waits for).
    let results: Vec<Mutex<Option<IndexRead>>> = objects.iter().map(|_| Mutex::new(None)).collect();
    let positions: Vec<usize> = (0..objects.len()).collect();
    crate::parallel::try_each(&positions, MERGE_READERS, |&i| {
        let (_, _, path, url) = &objects[i];
        let mut read = 0u64;
        let got = ObjectRange::open(
            at.store().clone(),
            path.clone(),
            url.clone(),
            at.loc.runtime.clone(),
            MERGE_TAIL,
        )
        .and_then(|src| {
            // The open's read (MERGE_TAIL bytes) serves the shard index's first read.
            read_shard_index_from(&src, Path::new(url), &mut read, MERGE_TAIL)
        });
        *results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some((read, got));
        Ok(())
    })?;
    let mut read = 0u64;
    let mut shards: Vec<(ShardIndex, String)> = Vec::new();
    // Objects that are not readable shards: (k, N, URL, why), reported if the save needs them.
    let mut unreadable: Vec<(u32, u32, String, Error)> = Vec::new();
    for ((k, n, _, url), slot) in objects.iter().zip(results) {
        let (bytes, got) = slot
            .into_inner()
            .unwrap_or_else(|p| p.into_inner())
            .expect("every object was read");
        read += bytes;
        match got {
            Ok(s) if (s.shard.shard_id, s.shard.num_shards) == (*k, *n) => {
                shards.push((s, url.clone()))
            }
            Ok(s) => unreadable.push((
                *k,
                *n,
                url.clone(),
                Error::Shard {
                    path: url.clone(),
                    problem: ShardProblem::Identity,
                    detail: format!(
                        "named as shard {k} of {n}, the object says it is shard {} of {}",
                        s.shard.shard_id, s.shard.num_shards
                    ),
                },
            )),
            Err(e) => unreadable.push((*k, *n, url.clone(), e)),
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
                path: at.url.clone(),
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
                path: at.url.clone(),
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
            let (_, url) = at.object(&data_suffix(k, n));
            let there = objects.iter().any(|(j, m, ..)| (*j, *m) == (k, n));
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
        if s.header.references != 0 {
            return Err(Error::Unsupported(format!(
                "{url}: a shard of an incremental save (it reuses {} tensors of an earlier \
                 checkpoint); incremental saves are not written to object storage",
                s.header.references
            )));
        }
        ordered.push(s);
        urls.push(url);
    }
    let refs: Vec<_> = (0..n).map(|_| None).collect();
    let planned = plan_index(&ordered, &refs, &[], n, opts)?;
    if let Some(f) = opts.on_step {
        f(MergeStep::Checked);
    }
    let mut bytes = Vec::new();
    let index_len = write_index(&mut bytes, &planned)?;
    // Data objects of another number of shards belong to no checkpoint once the index is
    // written: they go first, so that a merge run again after a crash never finds an earlier
    // save of another number of shards complete beside the committed one and takes it.
    let mut removed = Vec::new();
    for (_, m, path, url) in &objects {
        if *m != n {
            match at.loc.runtime.block_on(at.store().delete(path)) {
                Ok(()) => removed.push(PathBuf::from(url)),
                Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(remote_error(url, e)),
            }
        }
    }
    if let Some(f) = opts.on_step {
        f(MergeStep::PreviousDataRemoved);
    }
    // The checkpoint exists from this PUT on (one object, whole or not at all).
    at.loc
        .runtime
        .block_on(at.store().put(&index_key, PutPayload::from(bytes)))
        .map_err(|e| remote_error(&index_url, e))?;
    if let Some(f) = opts.on_step {
        f(MergeStep::Committed);
    }
    Ok(MergeShardsReport {
        index_path: PathBuf::from(index_url),
        data_paths: urls.into_iter().map(PathBuf::from).collect(),
        save_id,
        tensors: planned.merged.tensors,
        slices: planned.merged.slices,
        partial: planned.partial,
        reused_tensors: 0,
        reused_bytes: 0,
        reused_files: 0,
        bytes_read: read,
        shard_bytes: ordered.iter().map(|s| s.file_len).sum(),
        index_len,
        removed,
        ignored: Vec::new(),
    })
}
