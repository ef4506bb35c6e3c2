//! Committing a sharded save (SPEC.md 12.3): [`merge_shards`](crate::merge_shards) reads only the shards' indexes
//! (never their records), checks them against each other, writes the checkpoint's
//! `PREFIX.index` and renames the shards into place. (What a failed save leaves behind is
//! named and removed by `housekeeping.rs`.)
//!
//! The commit, in this order, each step durable before the next:
//!
//! 1. the new index under a temporary name, written and fsynced;
//! 2. an existing `PREFIX.index` removed, the directory synced: from here the previous
//!    checkpoint does not exist;
//! 3. the previous checkpoint's data files that the new one does not replace (those with
//!    another number of shards) removed, the directory synced;
//! 4. each pending shard renamed to its final name (and, in an incremental save, each reused
//!    data file's link to its number after the shards; so is a data file of the save found
//!    under the final name of another number of data files, which step 3 spares), the
//!    directory synced;
//! 5. the new index renamed to `PREFIX.index`, the directory synced: the checkpoint exists;
//! 6. (an incremental save) the shards' references files removed.
//!
//! A crash before step 2 leaves the previous checkpoint; from step 2 until step 5 there is no
//! index, hence no checkpoint at the prefix (the data files there are orphans, which
//! [`shard_files`](crate::shard_files) reports); after step 5, the new one. A merge run again after a crash
//! finishes the job: a shard of the save already under its final name is taken as it is
//! (found by its identity), and when no shard is pending any more, the save the references
//! files name, or else the one save all of whose shards are there, is merged.
//!
//! An incremental save (SPEC.md 12.5) adds to the shards' own entries their references to
//! earlier saves' data files, read from the references files and checked against those
//! files' own entries (index only, like the shards).

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{ensure_within, path_str, Error, IoContext, Result, ShardProblem, SliceProblem};
use crate::name::{self, MAX_NAME_LEN};
use crate::native::entry::{decode_slices, encode_partitioned, IndexEntry};
use crate::native::fault::{self, Op};
use crate::native::header::{FileHeader, SaveId, ShardOf, ShardRef};
use crate::native::meta::Metadata;
use crate::native::region::{self, Region};
use crate::native::sharded::index::{
    read_references, read_references_from, read_shard_index, References, ShardIndex,
};
use crate::native::sharded::place::{
    parse_suffix, refs_suffix, reused_suffix, DirPlace, Place, Sibling,
};
use crate::native::sharded::table::{data_path, index_path, pending_path, reused_path};
use crate::native::slice_key::{self, Extent};
use crate::native::staging;
use crate::native::{MAX_SHARDS, TF_BUNDLE_VERSION};
use crate::record::{self, MAX_RANK};
use crate::table::{Compression, Table, TableBuilder};

/// Which tensors [`merge_shards`](crate::merge_shards) lets be partial: stored in slices that do not cover them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PartialTensors {
    /// None: the slices of every tensor must cover it (the default).
    #[default]
    None,
    /// The tensors of these names.
    Named(BTreeSet<Vec<u8>>),
    /// Every tensor.
    All,
}

impl PartialTensors {
    fn allows(&self, name: &[u8]) -> bool {
        match self {
            PartialTensors::None => false,
            PartialTensors::Named(names) => names.contains(name),
            PartialTensors::All => true,
        }
    }
}

/// A step of [`merge_shards`](crate::merge_shards), reported to [`MergeShardsOptions::on_step`] once it is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MergeStep {
    /// Every shard's index was read and the shards checked against each other; nothing has
    /// been written.
    Checked,
    /// The new index is written and synced under a temporary name.
    IndexWritten,
    /// The previous checkpoint's `PREFIX.index` was removed: until [`MergeStep::Committed`]
    /// there is no checkpoint at the prefix.
    PreviousRemoved,
    /// The previous checkpoint's data files that the new one does not replace (another number
    /// of shards) are removed.
    PreviousDataRemoved,
    /// Shard `k` has its final name.
    ShardRenamed(u32),
    /// `PREFIX.index` is in place and the directory synced: the checkpoint exists.
    Committed,
}

/// How [`merge_shards`](crate::merge_shards) runs.
#[derive(Clone, Default)]
pub struct MergeShardsOptions<'a> {
    /// The save to commit. Unset: the pending shards at the prefix must all be of one save.
    /// Set: only that save's shards are taken, and pending shards of other saves are left
    /// where they are (reported in [`MergeShardsReport::ignored`]).
    pub save_id: Option<SaveId>,
    /// The number of shards the save must have (its writers' shards; an incremental save's
    /// checkpoint has more data files: the reused ones follow), when known.
    pub num_shards: Option<u32>,
    /// Tensors whose slices need not cover them.
    pub partial: PartialTensors,
    /// Metadata of the checkpoint, set over the shards' own (which must agree where they
    /// share a key).
    pub metadata: Metadata,
    /// Skip every fsync (tests; the renames stay atomic but may not survive a power loss).
    pub no_sync: bool,
    /// Told each step of the commit as it completes (logs, progress, and tests that stop a
    /// merge at a chosen point).
    pub on_step: Option<&'a (dyn Fn(MergeStep) + Sync)>,
}

impl std::fmt::Debug for MergeShardsOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeShardsOptions")
            .field("save_id", &self.save_id)
            .field("num_shards", &self.num_shards)
            .field("partial", &self.partial)
            .field("metadata", &self.metadata)
            .field("no_sync", &self.no_sync)
            .field("on_step", &self.on_step.is_some())
            .finish()
    }
}

/// What [`merge_shards`](crate::merge_shards) did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeShardsReport {
    /// `PREFIX.index`.
    pub index_path: PathBuf,
    /// The data files, in order: the save's shards, then (an incremental save) the reused
    /// data files of earlier saves.
    pub data_paths: Vec<PathBuf>,
    /// The save committed.
    pub save_id: SaveId,
    /// Tensors in the checkpoint (a tensor stored in slices once).
    pub tensors: u64,
    /// Slices of tensors stored in slices.
    pub slices: u64,
    /// Tensors whose slices do not cover them (allowed by [`MergeShardsOptions::partial`]).
    pub partial: u64,
    /// Tensors reused from earlier saves' data files (an incremental save, SPEC.md 12.5).
    pub reused_tensors: u64,
    /// Their data bytes, which no shard wrote.
    pub reused_bytes: u64,
    /// Earlier saves' data files the checkpoint reuses (the last of its data files).
    pub reused_files: u64,
    /// Bytes read from the shards: their footers and index tables only.
    pub bytes_read: u64,
    /// Bytes of the shard files (what was not read is their records).
    pub shard_bytes: u64,
    /// Bytes of the index written.
    pub index_len: u64,
    /// Data files of the previous checkpoint removed (those with another number of shards,
    /// which the new ones do not replace).
    pub removed: Vec<PathBuf>,
    /// Pending shards of other saves, left in place.
    pub ignored: Vec<PathBuf>,
}

/// Checks every entry of a shard as a reader would (SPEC.md 8.2, 13.1), without its records:
/// data ranges inside its records region, sizes, slice keys, and that its partitioned tensors
/// list exactly its slice entries.
fn check_shard(s: &ShardIndex) -> Result<()> {
    let shown = s.shown();
    let table = s.table();
    let mut it = table.iter();
    let records_len = s.header.records_len;
    // Slice entries by key: (dtype, shape), removed as their tensors list them.
    let mut slice_entries: HashMap<Vec<u8>, (DType, Vec<u64>)> = HashMap::new();
    let (mut tensors, mut slices) = (0u64, 0u64);
    let ctx = |e: Error| e.context(&format!("shard file {shown}"));
    while it.next().map_err(ctx)? {
        let (key, value, at) = (it.key(), it.value(), it.block_offset());
        if key.is_empty() {
            continue;
        }
        // Formatted only for a message (every entry of every shard passes here).
        let shown_key = || slice_key::display_key(key);
        let bad = |detail: String| {
            Error::corrupt(
                "index entry",
                at,
                format!("shard file {shown}: tensor {}: {detail}", shown_key()),
            )
        };
        ensure_within("tensor name length", key.len(), MAX_NAME_LEN, Some(at))?;
        let e = IndexEntry::decode(value, at, MAX_RANK).map_err(ctx)?;
        let dtype = e.dtype().ok_or_else(|| Error::UnknownDType {
            system: e.dtype_code().0,
            code: e.dtype_code().1,
            location: Some(format!("shard file {shown}: tensor {}", shown_key())),
        })?;
        if e.num_slices != 0 {
            tensors += 1;
            if key[0] == 0 || e.shape.is_empty() {
                return Err(bad("slices of a slice key or of a scalar".into()));
            }
            if e.shard_id != 0 || e.offset != 0 || e.size != 0 || e.record_header_len != 0 {
                return Err(bad(
                    "the entry of a tensor stored in slices holds data fields".into(),
                ));
            }
            if record::data_len(dtype, &e.shape).is_none() {
                return Err(bad(format!("shape {:?} overflows", e.shape.as_slice())));
            }
            let regions = resolve_all(
                key,
                &e.shape,
                &decode_slices(value, at, e.shape.len())?,
                &shown,
            )?;
            if let Some((i, j)) = region::find_overlap(&regions) {
                return Err(overlap(key, &regions[i], &shown, &regions[j], &shown));
            }
            for r in &regions {
                let k = slice_key::encode(key, &r.extents(&e.shape));
                match slice_entries.remove(&k) {
                    Some((d, shape)) if d == dtype && shape == r.len => {}
                    Some((d, shape)) => {
                        return Err(bad(format!(
                            "its slice {} is stored as {d} {shape:?}, the tensor is {dtype}",
                            slice_key::display_key(&k)
                        )))
                    }
                    None => {
                        return Err(bad(format!(
                            "its slice {} has no entry",
                            slice_key::display_key(&k)
                        )))
                    }
                }
            }
            continue;
        }
        if key[0] == 0 {
            if slice_key::decode(key).is_none_or(|k| k.name.is_empty()) {
                return Err(bad(
                    "a key starting with a NUL byte that is not a slice key".into(),
                ));
            }
            slices += 1;
            slice_entries.insert(key.to_vec(), (dtype, e.shape.to_vec()));
        } else {
            tensors += 1;
        }
        // A compressed record (SPEC.md 3.4): its size is its stored bytes, whose chunk table is
        // checked against the shape when the data is read.
        let expected = if e.codec == record::lossless::CODEC_LOSSLESS && e.size != 0 {
            Some(e.size)
        } else {
            record::data_len(dtype, &e.shape)
        };
        let in_records = e
            .offset
            .checked_add(e.size)
            .is_some_and(|end| end <= records_len)
            && e.offset
                .checked_sub(u64::from(e.record_header_len))
                .is_some()
            && e.record_header_len != 0;
        if e.shard_id != 0 || expected != Some(e.size) || !in_records {
            return Err(bad(format!(
                "entry points outside the shard's records ({}+{} of {records_len} bytes, \
                 header {}) or has a wrong size or shard id ({} bytes for {:?} {dtype}, shard \
                 {})",
                e.offset,
                e.size,
                e.record_header_len,
                e.size,
                e.shape.as_slice(),
                e.shard_id
            )));
        }
    }
    if let Some(k) = slice_entries.keys().next() {
        return Err(Error::corrupt(
            "index entry",
            s.base,
            format!(
                "shard file {shown}: slice entry {} belongs to no tensor",
                slice_key::display_key(k)
            ),
        ));
    }
    if tensors != s.header.tensor_count || slices != s.header.slice_count {
        return Err(Error::corrupt(
            "header entry",
            s.base,
            format!(
                "shard file {shown}: the header counts {} tensors and {} slices, the index holds \
                 {tensors} and {slices}",
                s.header.tensor_count, s.header.slice_count
            ),
        ));
    }
    Ok(())
}

/// The regions of `extents` in a tensor of `shape`; a slice outside it is
/// [`SliceProblem::OutOfBounds`], naming the file.
fn resolve_all(
    name: &[u8],
    shape: &[u64],
    extents: &[Vec<Extent>],
    file: &str,
) -> Result<Vec<Region>> {
    extents
        .iter()
        .map(|ext| {
            region::resolve(ext, shape).map_err(|d| Error::Slices {
                name: name::display(name),
                problem: SliceProblem::OutOfBounds,
                detail: format!(
                    "slice {} in {file} does not lie inside the shape {shape:?}: {d}",
                    slice_key::describe_extents(ext)
                ),
            })
        })
        .collect()
}

fn overlap(name: &[u8], a: &Region, file_a: &str, b: &Region, file_b: &str) -> Error {
    Error::Slices {
        name: name::display(name),
        problem: SliceProblem::Overlap,
        detail: format!(
            "the slice at {:?} of lengths {:?} in {file_a} overlaps the slice at {:?} of lengths \
             {:?} in {file_b}",
            a.start, a.len, b.start, b.len
        ),
    }
}

/// What the file `file_name` at the prefix whose file name is `stem` is ([`parse_suffix`]).
fn sibling(file_name: &[u8], stem: &[u8]) -> Option<Sibling> {
    parse_suffix(file_name.strip_prefix(stem)?)
}

/// A file name `STEM.data-SSSSS-of-NNNNN[.pending]`: (shard, number of shards, pending).
fn parse_data_name(file_name: &[u8], stem: &[u8]) -> Option<(u32, u32, bool)> {
    match sibling(file_name, stem)? {
        Sibling::Data {
            shard,
            num_shards,
            pending,
        } => Some((shard, num_shards, pending)),
        _ => None,
    }
}

/// Whether a file name is `STEM.refs-SSSSS-of-NNNNN.pending` (a references file, SPEC.md 12.5).
fn is_refs_name(file_name: &[u8], stem: &[u8]) -> bool {
    matches!(sibling(file_name, stem), Some(Sibling::Refs { .. }))
}

/// The directory of a prefix, the prefix's file name, and the files of the directory whose
/// names start with it (or with `.` and it), each with its name.
type PrefixFiles = (PathBuf, Vec<u8>, Vec<(PathBuf, Vec<u8>)>);

/// The files in the prefix's directory whose names start with the prefix's.
pub(super) fn prefix_files(prefix: &Path) -> Result<PrefixFiles> {
    let stem = prefix
        .file_name()
        .ok_or_else(|| {
            Error::InvalidArgument(format!("{} does not name a checkpoint", prefix.display()))
        })?
        .as_encoded_bytes()
        .to_vec();
    let dir = staging::parent_dir(prefix);
    let mut out = Vec::new();
    for ent in std::fs::read_dir(&dir).ctx("listing", &dir)? {
        let ent = ent.ctx("listing", &dir)?;
        let name = ent.file_name().as_encoded_bytes().to_vec();
        let hidden_stem: Vec<u8> = [&b"."[..], &stem].concat();
        if name.starts_with(&stem) || name.starts_with(&hidden_stem) {
            out.push((ent.path(), name));
        }
    }
    out.sort();
    Ok((dir, stem, out))
}

/// Commits a sharded save at `prefix` (SPEC.md 12.3): reads the index of each of its shards
/// (`PREFIX.data-k-of-N.pending`; never their records), checks them (every shard present,
/// of one save, each readable alone; no tensor in two shards; the slices of a tensor of one
/// dtype and shape, inside it, not overlapping, and covering it unless
/// [`MergeShardsOptions::partial`] allows otherwise), writes `PREFIX.index` and renames the
/// shards to their final names, in the order the module documentation gives, so that a crash
/// at any point leaves the previous checkpoint or nothing, never a partial one.
///
/// Errors: [`Error::Shard`] for a missing shard ([`ShardProblem::Missing`]), a shard of another
/// save or several saves at once ([`ShardProblem::Identity`], [`ShardProblem::Leftover`]),
/// disagreeing shard counts or a shard number out of range ([`ShardProblem::Count`]);
/// [`Error::Slices`] for tensors whose pieces do not fit together, naming the tensor and the
/// files; [`Error::Corrupt`] for a shard whose index is damaged. Nothing is changed at the
/// prefix when an error is reported before the commit starts.
pub fn merge_shards(
    prefix: impl AsRef<Path>,
    opts: &MergeShardsOptions<'_>,
) -> Result<MergeShardsReport> {
    let prefix = prefix.as_ref();
    let shown_prefix = prefix.display().to_string();
    let (dir, stem, files) = prefix_files(prefix)?;
    let mut read = 0u64;
    // Pending shards, by save.
    let mut pending: Vec<(PathBuf, u32, u32)> = Vec::new();
    for (path, name) in &files {
        if let Some((k, n, true)) = parse_data_name(name, &stem) {
            pending.push((path.clone(), k, n));
        }
    }
    let mut by_save: HashMap<(SaveId, u32), Vec<ShardIndex>> = HashMap::new();
    let mut ignored = Vec::new();
    for (path, k, n) in &pending {
        let idx = match read_shard_index(path, &mut read) {
            Ok(i) => i,
            // A pending shard of another save that cannot be read is that save's problem.
            Err(e) if opts.save_id.is_some() => {
                let _ = e;
                ignored.push(path.clone());
                continue;
            }
            Err(e) => return Err(e),
        };
        if (idx.shard.shard_id, idx.shard.num_shards) != (*k, *n) {
            return Err(Error::Shard {
                path: path_str(path),
                problem: ShardProblem::Identity,
                detail: format!(
                    "named as shard {k} of {n}, the file says it is shard {} of {}",
                    idx.shard.shard_id, idx.shard.num_shards
                ),
            });
        }
        if opts.save_id.is_some_and(|s| s != idx.shard.save_id)
            || opts.num_shards.is_some_and(|n| n != idx.shard.num_shards)
        {
            ignored.push(path.clone());
            continue;
        }
        by_save
            .entry((idx.shard.save_id, idx.shard.num_shards))
            .or_default()
            .push(idx);
    }
    let ((save_id, n), mut found) = match by_save.len() {
        1 => by_save.into_iter().next().expect("one save"),
        0 => match (opts.save_id, opts.num_shards) {
            // Every shard may already have its final name (a merge run again after a crash).
            (Some(s), Some(n)) => ((s, n), Vec::new()),
            _ => (
                orphan_save(prefix, &stem, &files, opts, &mut read)?.ok_or_else(|| {
                    Error::Shard {
                        path: shown_prefix.clone(),
                        problem: ShardProblem::Missing,
                        detail: "no pending shards of a save to merge \
                                 (PREFIX.data-k-of-N.pending)"
                            .into(),
                    }
                })?,
                Vec::new(),
            ),
        },
        _ => {
            let mut saves: Vec<String> = by_save
                .iter()
                .map(|((s, n), v)| format!("save {s} ({} of {n} shards)", v.len()))
                .collect();
            saves.sort();
            return Err(Error::Shard {
                path: shown_prefix,
                problem: ShardProblem::Leftover,
                detail: format!(
                    "pending shards of several saves: {}; name the save to merge, or remove \
                     the leftovers of the one that failed (clean_shards)",
                    saves.join(", ")
                ),
            });
        }
    };
    found.sort_by_key(|s| s.shard.shard_id);
    // Each shard: the pending one, or (a merge run again after a crash) the one of this save
    // already under a final name (of this save's number of data files, known only once the
    // shards' references are read).
    let mut shards: Vec<ShardIndex> = Vec::with_capacity(n as usize);
    let mut renames: Vec<Option<PathBuf>> = Vec::with_capacity(n as usize);
    let mut found = found.into_iter().peekable();
    for k in 0..n {
        if found.peek().is_some_and(|s| s.shard.shard_id == k) {
            let s = found.next().expect("peeked");
            renames.push(Some(s.path.clone()));
            shards.push(s);
            continue;
        }
        let want = ShardOf {
            save_id,
            shard_id: k,
            num_shards: n,
        };
        match find_final(&files, &stem, k, |s| s.shard == want, &mut read)? {
            Some(s) => {
                renames.push(None);
                shards.push(s);
            }
            None => {
                return Err(Error::Shard {
                    path: path_str(&pending_path(prefix, k, n)),
                    problem: ShardProblem::Missing,
                    detail: format!("shard {k} of {n} of save {save_id} is missing"),
                })
            }
        }
    }
    // An incremental save: each shard's references, and the earlier data files they name.
    let place = DirPlace::new(prefix);
    let refs = read_all_references(&place, &shards, &mut read)?;
    let (reused_refs, total) = reused_files(&place, &refs, save_id, n)?;
    let mut reused: Vec<ShardIndex> = Vec::with_capacity(reused_refs.len());
    for (i, f) in reused_refs.iter().enumerate() {
        let link = reused_path(prefix, &f.shard);
        let matches = |s: &ShardIndex| s.shard == f.shard && s.file_len == f.file_len;
        let k = n + u32::try_from(i).expect("below MAX_SHARDS");
        let at_link = match read_shard_index(&link, &mut read) {
            Ok(s) if matches(&s) => Some(s),
            Ok(_) | Err(Error::Shard { .. }) => None,
            Err(e) => return Err(e),
        };
        if let Some(s) = at_link {
            renames.push(Some(link));
            reused.push(s);
            continue;
        }
        match find_final(&files, &stem, k, matches, &mut read)? {
            Some(s) => {
                renames.push(None);
                reused.push(s);
            }
            None => {
                return Err(Error::Shard {
                    path: path_str(&link),
                    problem: ShardProblem::Missing,
                    detail: format!(
                        "data file {} of {} of save {} ({} bytes), which the save reuses, is \
                         not in the checkpoint's directory",
                        f.shard.shard_id, f.shard.num_shards, f.shard.save_id, f.file_len
                    ),
                })
            }
        }
    }
    // A data file found under a final name (a merge run again after a crash) is taken from
    // where it is: one named for another number of data files than this checkpoint's is
    // renamed like a pending one, not left to step 3, which removes such files.
    for (k, (from, s)) in renames
        .iter_mut()
        .zip(shards.iter().chain(&reused))
        .enumerate()
    {
        let to = data_path(prefix, u32::try_from(k).expect("below MAX_SHARDS"), total);
        if from.is_none() && s.path != to {
            *from = Some(s.path.clone());
        }
    }
    let planned = plan_index(&shards, &refs, &reused, total, opts)?;
    step(opts, MergeStep::Checked);

    // 1. The new index under a temporary name.
    let index = index_path(prefix);
    let (temp_file, temp) = staging::stage_file(&index, ".pdx-tmp")?;
    let index_len = {
        let mut out = BufWriter::with_capacity(1 << 20, &temp_file);
        let len = write_index(&mut out, &planned)?;
        fault::check(Op::Write, temp.path())
            .and_then(|()| out.flush())
            .ctx("writing", temp.path())?;
        len
    };
    if !opts.no_sync {
        fault::check(Op::SyncFile, temp.path())
            .and_then(|()| temp_file.sync_all())
            .ctx("syncing", temp.path())?;
    }
    step(opts, MergeStep::IndexWritten);
    // 2. The previous checkpoint stops existing.
    let sync_dir = || -> Result<()> {
        if opts.no_sync {
            Ok(())
        } else {
            staging::sync_dir(&dir)
        }
    };
    match fault::check(Op::Unlink, &index).and_then(|()| std::fs::remove_file(&index)) {
        Ok(()) => {
            sync_dir()?;
            step(opts, MergeStep::PreviousRemoved);
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(Error::io(format!("removing {}", index.display()), e)),
    }
    // 3. The previous checkpoint's data files that the new one does not replace.
    let mut removed = Vec::new();
    for (path, name) in &files {
        if let Some((_, m, false)) = parse_data_name(name, &stem) {
            if m != total && !renames.iter().flatten().any(|from| from == path) {
                match fault::check(Op::Unlink, path).and_then(|()| std::fs::remove_file(path)) {
                    Ok(()) => removed.push(path.clone()),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(Error::io(format!("removing {}", path.display()), e)),
                }
            }
        }
    }
    if !removed.is_empty() {
        sync_dir()?;
    }
    step(opts, MergeStep::PreviousDataRemoved);
    // 4. The shards, and the reused data files, under their final names.
    let mut data_paths = Vec::with_capacity(total as usize);
    for (k, from) in (0..total).zip(&renames) {
        let to = data_path(prefix, k, total);
        if let Some(from) = from {
            fault::check(Op::Rename, &to)
                .and_then(|()| std::fs::rename(from, &to))
                .map_err(|e| {
                    Error::io(
                        format!("renaming {} to {}", from.display(), to.display()),
                        e,
                    )
                })?;
            // A reused file that already had this name (an incremental save at the base's own
            // prefix) is the same file as its link, which the rename then leaves in place.
            if from.exists() {
                fault::check(Op::Unlink, from)
                    .and_then(|()| std::fs::remove_file(from))
                    .map_err(|e| Error::io(format!("removing {}", from.display()), e))?;
            }
        }
        step(opts, MergeStep::ShardRenamed(k));
        data_paths.push(to);
    }
    sync_dir()?;
    // 5. The checkpoint exists.
    drop(temp_file);
    staging::commit([(temp, index.as_path())])?;
    sync_dir()?;
    step(opts, MergeStep::Committed);
    // 6. The references files are not needed any more (one left by a crash here is reported
    // by `shard_files` and removed by `clean_shards`).
    for r in refs.iter().flatten() {
        let _ = fault::check(Op::Unlink, &r.path).and_then(|()| std::fs::remove_file(&r.path));
    }
    Ok(MergeShardsReport {
        index_path: index,
        data_paths,
        save_id,
        tensors: planned.merged.tensors,
        slices: planned.merged.slices,
        partial: planned.partial,
        reused_tensors: planned.merged.reused_tensors,
        reused_bytes: planned.merged.reused_bytes,
        reused_files: reused.len() as u64,
        bytes_read: read,
        shard_bytes: shards.iter().map(|s| s.file_len).sum(),
        index_len,
        removed,
        ignored,
    })
}

/// A checkpoint's index, planned from its data files' indexes and checked (SPEC.md 12.3),
/// before anything is written: the part of a merge that does not depend on where the files
/// are (a directory, or a bucket: `remote`'s merge uses it too).
pub(crate) struct PlannedIndex {
    /// The index's header entry.
    pub(crate) header: FileHeader,
    /// Its other entries and their counts.
    pub(crate) merged: Merged,
    /// Tensors whose slices do not cover them.
    pub(crate) partial: u64,
}

/// Checks the save's `shards` (in shard order), their references files `refs` (one per shard)
/// and the `reused` data files of earlier saves against each other, and plans the index of a
/// checkpoint of `total` data files (the shards, then the reused files).
pub(crate) fn plan_index(
    shards: &[ShardIndex],
    refs: &[Option<References>],
    reused: &[ShardIndex],
    total: u32,
    opts: &MergeShardsOptions<'_>,
) -> Result<PlannedIndex> {
    let mut partial = 0u64;
    let merged = merge_entries(shards, refs, reused, &opts.partial, &mut partial)?;
    let metadata = merge_metadata(shards, &opts.metadata)?;
    let header = FileHeader {
        num_shards: i32::try_from(total).map_err(|_| {
            Error::InvalidArgument(format!("{total} data files exceed {MAX_SHARDS}"))
        })?,
        big_endian: false,
        producer: TF_BUNDLE_VERSION,
        min_consumer: 0,
        // Version 4 when a data file holds a compressed record (SPEC.md 3.4): a reader that
        // predates them refuses the checkpoint at open, before any entry is read.
        format_version: if shards
            .iter()
            .chain(reused)
            .any(|s| s.header.format_version >= crate::native::COMPRESSED_VERSION)
        {
            crate::native::COMPRESSED_VERSION
        } else {
            2
        },
        alignment: shards
            .iter()
            .chain(reused)
            .map(|s| s.header.alignment)
            .min()
            .unwrap_or(1),
        records_len: 0,
        tensor_count: merged.tensors,
        records_sorted: false,
        metadata,
        shard_of: None,
        shards: shards
            .iter()
            .map(|s| (s, false))
            .chain(reused.iter().map(|s| (s, true)))
            .map(|(s, reused)| ShardRef {
                file_len: s.file_len,
                shard: s.shard,
                reused,
            })
            .collect(),
        slice_count: merged.slices,
        references: 0,
    };
    Ok(PlannedIndex {
        header,
        merged,
        partial,
    })
}

/// Writes the planned index (a native file without records) to `out`; returns its length.
pub(crate) fn write_index(out: &mut dyn Write, planned: &PlannedIndex) -> Result<u64> {
    let table_opts = crate::native::writer::default_table_options(Compression::None, 2);
    let mut b = TableBuilder::new(out, 0, table_opts)?;
    b.add(b"", &planned.header.encode())?;
    for (k, v) in &planned.merged.entries {
        b.add(k, v)?;
    }
    let (_, stats) = b.finish()?;
    Ok(stats.table_len)
}

/// The shard `k` under a final name `PREFIX.data-k-of-M` (any M) that `matches` accepts: where
/// a merge that stopped after renaming it left it.
fn find_final(
    files: &[(PathBuf, Vec<u8>)],
    stem: &[u8],
    k: u32,
    matches: impl Fn(&ShardIndex) -> bool,
    read: &mut u64,
) -> Result<Option<ShardIndex>> {
    for (path, name) in files {
        if parse_data_name(name, stem).is_some_and(|(j, _, pending)| j == k && !pending) {
            match read_shard_index(path, read) {
                Ok(s) if matches(&s) => return Ok(Some(s)),
                Ok(_) | Err(Error::Shard { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(None)
}

/// The references file of each shard that counts references in its header (SPEC.md 12.5),
/// checked to be that shard's and to hold that many.
pub(crate) fn read_all_references(
    place: &dyn Place,
    shards: &[ShardIndex],
    read: &mut u64,
) -> Result<Vec<Option<References>>> {
    shards
        .iter()
        .map(|s| {
            if s.header.references == 0 {
                return Ok(None);
            }
            let suffix = refs_suffix(s.shard.shard_id, s.shard.num_shards);
            let shown = place.shown(&suffix);
            let missing = |detail: String| Error::Shard {
                path: shown.clone(),
                problem: ShardProblem::Missing,
                detail,
            };
            let r = match place
                .open(&suffix)
                .and_then(|src| read_references_from(&*src, Path::new(&shown), read))
            {
                Ok(r) => r,
                Err(Error::Shard {
                    problem: ShardProblem::Missing,
                    ..
                }) => {
                    return Err(missing(format!(
                        "the references file of {} (which reuses {} tensors) is missing",
                        s.shown(),
                        s.header.references
                    )))
                }
                Err(e) => return Err(e),
            };
            if r.shard != s.shard || r.entries.len() as u64 != s.header.references {
                return Err(missing(format!(
                    "the references file is not the one of {} (it is of shard {} of {} of save \
                     {}, with {} references; the shard counts {})",
                    s.shown(),
                    r.shard.shard_id,
                    r.shard.num_shards,
                    r.shard.save_id,
                    r.entries.len(),
                    s.header.references
                )));
            }
            Ok(Some(r))
        })
        .collect()
}

/// The earlier saves' data files the shards' references name (SPEC.md 12.5), each once, in
/// the order of their identities (save, number of shards, shard), and the number of data
/// files of the checkpoint: the `n` shards of `save_id`, then those. Refuses shards that
/// disagree on a file's length, a reused file of the save itself, and more than
/// [`MAX_SHARDS`] data files.
pub(crate) fn reused_files(
    place: &dyn Place,
    refs: &[Option<References>],
    save_id: SaveId,
    n: u32,
) -> Result<(Vec<ShardRef>, u32)> {
    let mut reused_refs: BTreeMap<(SaveId, u32, u32), ShardRef> = BTreeMap::new();
    for r in refs.iter().flatten() {
        for f in &r.files {
            let key = (f.shard.save_id, f.shard.num_shards, f.shard.shard_id);
            match reused_refs.get(&key) {
                Some(g) if g.file_len != f.file_len => {
                    return Err(Error::Shard {
                        path: path_str(&r.path),
                        problem: ShardProblem::Identity,
                        detail: format!(
                        "the shards disagree on the length of data file {} of {} of save {} ({} \
                             and {} bytes)",
                        f.shard.shard_id,
                        f.shard.num_shards,
                        f.shard.save_id,
                        g.file_len,
                        f.file_len
                    ),
                    })
                }
                Some(_) => {}
                None => {
                    reused_refs.insert(key, *f);
                }
            }
        }
    }
    // A reused file is an earlier save's: one with this save's id would make two data files of
    // one identity.
    if let Some(f) = reused_refs.values().find(|f| f.shard.save_id == save_id) {
        return Err(Error::Shard {
            path: place.shown(&reused_suffix(&f.shard)),
            problem: ShardProblem::Identity,
            detail: format!(
                "a shard reuses data file {} of {} of save {save_id}, the save being merged; a \
                 save's base is an earlier save, with another id",
                f.shard.shard_id, f.shard.num_shards
            ),
        });
    }
    let total = u32::try_from(reused_refs.len())
        .ok()
        .and_then(|r| n.checked_add(r))
        .filter(|&t| t <= MAX_SHARDS)
        .ok_or_else(|| Error::Shard {
            path: place.shown(""),
            problem: ShardProblem::Count,
            detail: format!(
                "{n} shards and {} reused data files exceed {MAX_SHARDS} data files",
                reused_refs.len()
            ),
        })?;
    Ok((reused_refs.into_values().collect(), total))
}

fn step(opts: &MergeShardsOptions<'_>, s: MergeStep) {
    if let Some(f) = opts.on_step {
        f(s);
    }
}

/// When no shard is pending and no checkpoint is committed at the prefix (a merge stopped after
/// renaming shards), the one save whose shards have their final names there, if there is
/// exactly one: `(save, number of shards)`.
fn orphan_save(
    prefix: &Path,
    stem: &[u8],
    files: &[(PathBuf, Vec<u8>)],
    opts: &MergeShardsOptions<'_>,
    read: &mut u64,
) -> Result<Option<(SaveId, u32)>> {
    if index_path(prefix).exists() {
        return Ok(None);
    }
    let wanted = |s: &ShardOf| {
        opts.save_id.is_none_or(|id| id == s.save_id)
            && opts.num_shards.is_none_or(|n| n == s.num_shards)
    };
    // The references files of an incremental save stay until its index is committed, and
    // name their save.
    let mut saves = BTreeSet::new();
    for (path, name) in files {
        if is_refs_name(name, stem) {
            if let Ok(r) = read_references(path, read) {
                if wanted(&r.shard) {
                    saves.insert((r.shard.save_id, r.shard.num_shards));
                }
            }
        }
    }
    if saves.is_empty() {
        // Otherwise, the saves all of whose shards are there (an incremental save's data
        // files include some of an earlier save's, rarely all).
        let mut present: BTreeMap<(SaveId, u32), BTreeSet<u32>> = BTreeMap::new();
        for (path, name) in files {
            if let Some((_, _, false)) = parse_data_name(name, stem) {
                if let Ok(s) = read_shard_index(path, read) {
                    if wanted(&s.shard) {
                        present
                            .entry((s.shard.save_id, s.shard.num_shards))
                            .or_default()
                            .insert(s.shard.shard_id);
                    }
                }
            }
        }
        saves = present
            .into_iter()
            .filter(|((_, n), ks)| ks.len() as u64 == u64::from(*n))
            .map(|(save, _)| save)
            .collect();
    }
    match saves.len() {
        0 => Ok(None),
        1 => Ok(saves.pop_first()),
        _ => Err(Error::Shard {
            path: prefix.display().to_string(),
            problem: ShardProblem::Leftover,
            detail: format!(
                "no pending shards, and the data files of {} saves without an index; name the \
                 save to merge, or remove the leftovers (clean_shards)",
                saves.len()
            ),
        }),
    }
}

/// The merged index's entries, in key order, and its counts.
pub(crate) struct Merged {
    pub(crate) entries: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) tensors: u64,
    pub(crate) slices: u64,
    pub(crate) reused_tensors: u64,
    pub(crate) reused_bytes: u64,
}

/// An entry of a shard's references, resolved: (name, value naming its data file, offset of
/// the block its reference came from).
type Resolved = (Vec<u8>, Vec<u8>, u64);

/// A cursor over the entries the merge takes in: a shard's index table, or a shard's resolved
/// references (position `None` before the first).
enum Cursor<'a> {
    Table(Box<crate::table::TableIter<'a>>),
    List(&'a [Resolved], Option<usize>),
}

impl Cursor<'_> {
    fn next(&mut self) -> Result<bool> {
        match self {
            Cursor::Table(it) => it.next(),
            Cursor::List(items, pos) => {
                let p = pos.map_or(0, |p| p + 1);
                *pos = Some(p);
                Ok(p < items.len())
            }
        }
    }

    fn item(&self) -> (&[u8], &[u8], u64) {
        match self {
            Cursor::Table(it) => (it.key(), it.value(), it.block_offset()),
            Cursor::List(items, pos) => {
                let (k, v, at) = &items[pos.expect("on an entry")];
                (k, v, *at)
            }
        }
    }

    fn key(&self) -> &[u8] {
        self.item().0
    }

    fn value(&self) -> &[u8] {
        self.item().1
    }

    fn block_offset(&self) -> u64 {
        self.item().2
    }
}

/// Resolves each shard's references (SPEC.md 12.5) against the reused data files: the entry a
/// reference copies from its base's index must be the data file's own entry of that name (but
/// for `shard_id`), which then names that file by its number in the new checkpoint, `n` (the
/// number of shards) plus its position in `reused`. Returns, per shard with references, its
/// references file (for messages) and its resolved entries; and the tensors and data bytes
/// reused.
#[allow(clippy::type_complexity)]
fn resolve_references(
    n: usize,
    refs: &[Option<References>],
    reused: &[ShardIndex],
) -> Result<(Vec<(String, Vec<Resolved>)>, u64, u64)> {
    let (mut tensors, mut bytes) = (0u64, 0u64);
    let mut lists = Vec::new();
    for r in refs.iter().flatten() {
        let shown = path_str(&r.path);
        let global: Vec<usize> = r
            .files
            .iter()
            .map(|f| {
                reused
                    .iter()
                    .position(|x| x.shard == f.shard)
                    .expect("every data file a references file lists was located")
            })
            .collect();
        let mut list = Vec::with_capacity(r.entries.len());
        for (name, e, value, at) in &r.entries {
            if e.num_slices != 0 {
                // A tensor of which slices are reused: it lists them, as a shard's entry does.
                list.push((name.clone(), value.clone(), *at));
                continue;
            }
            let g = global[usize::try_from(e.shard_id).expect("checked when read")];
            let file = &reused[g];
            let own = file
                .table()
                .get(name, |v, a| IndexEntry::decode(v, a, MAX_RANK))?
                .transpose()?;
            let mut want = e.clone();
            want.shard_id = 0;
            if own.as_ref() != Some(&want) {
                return Err(Error::Shard {
                    path: shown,
                    problem: ShardProblem::Reference,
                    detail: format!(
                        "the reference to tensor {} is not what {} holds under that name ({})",
                        slice_key::display_key(name),
                        file.shown(),
                        if own.is_some() {
                            "another entry"
                        } else {
                            "no entry"
                        }
                    ),
                });
            }
            want.shard_id = i32::try_from(n + g).expect("at most MAX_SHARDS data files");
            let mut v = Vec::new();
            want.encode(&mut v);
            list.push((name.clone(), v, *at));
            tensors += 1;
            bytes = bytes.saturating_add(e.size);
        }
        lists.push((shown, list));
    }
    Ok((lists, tensors, bytes))
}

/// Merges the shards' entries (SPEC.md 12.2): each data entry as its shard has it, with the
/// shard's number as `shard_id`; each tensor stored in slices once, listing the slices of every
/// shard in shard order, after checking that they fit together.
fn merge_entries(
    shards: &[ShardIndex],
    refs: &[Option<References>],
    reused: &[ShardIndex],
    partial: &PartialTensors,
    partial_count: &mut u64,
) -> Result<Merged> {
    for s in shards.iter().chain(reused) {
        check_shard(s)?;
    }
    let (lists, reused_tensors, reused_bytes) = resolve_references(shards.len(), refs, reused)?;
    let tables: Vec<Table<'_>> = shards.iter().map(ShardIndex::table).collect();
    // The shards' own entries (whose shard_id becomes the shard's number), then each shard's
    // references (whose values name their data file already).
    let mut cursors: Vec<Cursor<'_>> = tables
        .iter()
        .map(|t| Cursor::Table(Box::new(t.iter())))
        .chain(lists.iter().map(|(_, l)| Cursor::List(l, None)))
        .collect();
    let shown: Vec<String> = shards
        .iter()
        .map(ShardIndex::shown)
        .chain(lists.iter().map(|(p, _)| p.clone()))
        .collect();
    let mut heap: BinaryHeap<std::cmp::Reverse<(Vec<u8>, usize)>> = BinaryHeap::new();
    for (k, c) in cursors.iter_mut().enumerate() {
        let mut on = c.next()?;
        while on && c.key().is_empty() {
            on = c.next()?;
        }
        if on {
            heap.push(std::cmp::Reverse((c.key().to_vec(), k)));
        }
    }
    let mut out = Merged {
        entries: Vec::new(),
        tensors: 0,
        slices: 0,
        reused_tensors,
        reused_bytes,
    };
    while let Some(std::cmp::Reverse((key, first))) = heap.pop() {
        // Most keys have one holder: no allocation for the lists below.
        let mut holders: smallvec::SmallVec<[usize; 4]> = smallvec::smallvec![first];
        while heap
            .peek()
            .is_some_and(|std::cmp::Reverse((k, _))| *k == key)
        {
            if let Some(std::cmp::Reverse((_, s))) = heap.pop() {
                holders.push(s);
            }
        }
        holders.sort_unstable();
        let file = |s: usize| shown[s].clone();
        let entry = |s: usize| -> Result<IndexEntry> {
            IndexEntry::decode(cursors[s].value(), cursors[s].block_offset(), MAX_RANK)
        };
        // Only for messages: formatting every name would cost 4 % of a merge.
        let display = || name::display(&key);
        if key[0] == 0 {
            // A slice key: the same slice in two shards overlaps itself.
            if holders.len() > 1 {
                let k = slice_key::decode(&key).map(|k| k.name).unwrap_or_default();
                return Err(Error::Slices {
                    name: name::display(&k),
                    problem: SliceProblem::Overlap,
                    detail: format!(
                        "slice {} is in both {} and {}",
                        slice_key::display_key(&key),
                        file(holders[0]),
                        file(holders[1])
                    ),
                });
            }
            out.slices += 1;
        } else {
            out.tensors += 1;
        }
        let mut entries: smallvec::SmallVec<[IndexEntry; 1]> =
            holders.iter().map(|&s| entry(s)).collect::<Result<_>>()?;
        let value = if holders.len() == 1 && entries[0].num_slices == 0 {
            let e = &mut entries[0];
            if holders[0] < shards.len() {
                e.shard_id = i32::try_from(holders[0]).expect("at most MAX_SHARDS shards");
            }
            let mut v = Vec::new();
            e.encode(&mut v);
            v
        } else {
            if let Some(i) = entries.iter().position(|e| e.num_slices == 0) {
                let other = if i == 0 { 1 } else { 0 };
                let problem = if entries[other].num_slices == 0 {
                    SliceProblem::Overlap
                } else {
                    SliceProblem::Mismatch
                };
                return Err(Error::Slices {
                    name: display(),
                    problem,
                    detail: format!(
                        "{} holds it whole, and {} holds it {}",
                        file(holders[i]),
                        file(holders[other]),
                        if entries[other].num_slices == 0 {
                            "whole too"
                        } else {
                            "in slices"
                        }
                    ),
                });
            }
            let dkey = |e: &IndexEntry| (e.tf_dtype, e.pdx_dtype);
            let (d0, shape0) = (&entries[0], &entries[0].shape);
            if let Some(i) = entries
                .iter()
                .position(|e| dkey(e) != dkey(d0) || &e.shape != shape0)
            {
                let dt = |e: &IndexEntry| {
                    e.dtype().map_or_else(
                        || format!("{} {}", e.dtype_code().0, e.dtype_code().1),
                        |d| d.name().to_string(),
                    )
                };
                return Err(Error::Slices {
                    name: display(),
                    problem: SliceProblem::Mismatch,
                    detail: format!(
                        "{} holds slices of a {} {:?} tensor, {} of a {} {:?} one",
                        file(holders[0]),
                        dt(d0),
                        shape0.as_slice(),
                        file(holders[i]),
                        dt(&entries[i]),
                        entries[i].shape.as_slice()
                    ),
                });
            }
            let mut extents: Vec<Vec<Extent>> = Vec::new();
            let mut owners: Vec<usize> = Vec::new();
            for (&s, e) in holders.iter().zip(&entries) {
                let ext =
                    decode_slices(cursors[s].value(), cursors[s].block_offset(), e.shape.len())?;
                owners.extend(std::iter::repeat_n(s, ext.len()));
                extents.extend(ext);
            }
            ensure_within(
                "slices of a tensor",
                extents.len(),
                crate::native::MAX_SLICES,
                None,
            )?;
            let regions = resolve_all(&key, shape0, &extents, &file(holders[0]))?;
            if let Some((i, j)) = region::find_overlap(&regions) {
                return Err(overlap(
                    &key,
                    &regions[i],
                    &file(owners[i]),
                    &regions[j],
                    &file(owners[j]),
                ));
            }
            let total = record::data_len(DType::UInt8, shape0).unwrap_or(u64::MAX);
            let covered = regions
                .iter()
                .map(|r| r.numel().unwrap_or(0))
                .fold(0u64, u64::saturating_add);
            if covered != total {
                if !partial.allows(&key) {
                    let mut files: Vec<String> = holders.iter().map(|&s| file(s)).collect();
                    files.dedup();
                    return Err(Error::Slices {
                        name: display(),
                        problem: SliceProblem::Gap,
                        detail: format!(
                            "its slices hold {covered} of its {total} elements ({:?}, in {}); \
                             a partial tensor must be allowed by the merge",
                            shape0.as_slice(),
                            files.join(", ")
                        ),
                    });
                }
                *partial_count += 1;
            }
            let dtype = d0.dtype().ok_or_else(|| Error::UnknownDType {
                system: d0.dtype_code().0,
                code: d0.dtype_code().1,
                location: Some(format!("{}: tensor {}", file(holders[0]), display())),
            })?;
            let mut v = Vec::new();
            encode_partitioned(&mut v, dtype, shape0, &extents);
            v
        };
        out.entries.push((key, value));
        for s in holders {
            if cursors[s].next()? {
                heap.push(std::cmp::Reverse((cursors[s].key().to_vec(), s)));
            }
        }
    }
    Ok(out)
}

/// The shards' metadata (which must agree where they share a key), with `extra` set over it.
fn merge_metadata(shards: &[ShardIndex], extra: &Metadata) -> Result<Metadata> {
    let mut m = Metadata::new();
    let mut from: HashMap<String, usize> = HashMap::new();
    for (k, s) in shards.iter().enumerate() {
        for (key, value) in s.header.metadata.iter() {
            match m.get(key) {
                Some(v) if v != value => {
                    return Err(Error::InvalidArgument(format!(
                        "the shards disagree on metadata {key:?}: {} in {}, {} in {}",
                        v.to_text(),
                        shards[from[key]].shown(),
                        value.to_text(),
                        s.shown()
                    )))
                }
                Some(_) => {}
                None => {
                    m.insert(key, value.clone())?;
                    from.insert(key.to_string(), k);
                }
            }
        }
    }
    for (key, value) in extra.iter() {
        m.insert(key, value.clone())?;
    }
    m.validate()?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_file_names() {
        assert_eq!(
            parse_data_name(b"ck.data-00003-of-00008", b"ck"),
            Some((3, 8, false))
        );
        assert_eq!(
            parse_data_name(b"ck.data-00003-of-00008.pending", b"ck"),
            Some((3, 8, true))
        );
        assert_eq!(parse_data_name(b"ck.data-3-of-8", b"ck"), None);
        assert_eq!(parse_data_name(b"ckx.data-00003-of-00008", b"ck"), None);
        assert_eq!(parse_data_name(b"ck.index", b"ck"), None);
        assert_eq!(
            parse_data_name(b"ck.data-100000-of-100001", b"ck"),
            Some((100_000, 100_001, false))
        );
    }
}
