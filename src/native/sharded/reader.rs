//! Reading a sharded checkpoint (SPEC.md 12): its file names, the checks of its index header,
//! the data files a [`Reader`] opens and checks on first use, and the verify of the whole.
//!
//! ```text
//! PREFIX.index                 index only (records_len 0), format version 2: num_shards N,
//!                              the shard table (each data file's length and identity), and
//!                              entries whose shard_id names the data file holding the data
//! PREFIX.data-00000-of-0000N   complete native files, each with its own records, index and
//! ...                          footer, and its identity (save id, shard id, N) in its header
//! ```

use std::collections::BinaryHeap;
use std::path::Path;

use crate::error::{path_str, Error, Result, ShardProblem};
use crate::native::entry::{decode_slices, IndexEntry};
use crate::native::header::{FileHeader, ShardRef};
use crate::native::mapped::MappedReader;
use crate::native::sharded::table::data_path;
use crate::native::slice_key;
use crate::native::source::Source;
use crate::native::verify::{VerifyOptions, VerifyReport};
use crate::parallel::resolve_threads;
use crate::progress::{Progress, Unit};
use crate::record::MAX_RANK;

impl MappedReader {
    /// Number of data files of a sharded checkpoint (0 for any other file).
    pub(in crate::native) fn shard_count(&self) -> u32 {
        u32::try_from(self.header.shards.len()).expect("at most MAX_SHARDS, checked at open")
    }

    /// Whether this is the index of a sharded checkpoint (SPEC.md 12), whose tensors are in
    /// data files of their own ([`Reader::shard`]).
    pub fn is_sharded(&self) -> bool {
        self.shards.is_some()
    }

    /// The prefix of a sharded checkpoint opened from its `PREFIX.index`.
    pub fn checkpoint_prefix(&self) -> Option<&Path> {
        self.shards.as_ref()?.prefix.as_deref()
    }

    /// Data file `k` of a sharded checkpoint, opened (as a native file of its own) and checked
    /// against the index the first time it is asked for: present, of the length and identity
    /// (save id, shard number, number of shards) its index records (SPEC.md 12.4). Reading a
    /// tensor goes through this, so no data is read from a file that is not the one the index
    /// was written with.
    ///
    /// Errors: [`Error::Shard`] when the file is missing ([`ShardProblem::Missing`]), has
    /// another length ([`ShardProblem::Length`]) or another identity
    /// ([`ShardProblem::Identity`]); [`Error::InvalidArgument`] when this is not a sharded
    /// checkpoint or `k` is not below its number of data files.
    pub fn shard(&self, k: u32) -> Result<&MappedReader> {
        let Some(sh) = &self.shards else {
            return Err(Error::InvalidArgument(format!(
                "{} is not a sharded checkpoint",
                self.path
            )));
        };
        let n = sh.files.len();
        let cell = sh.files.get(k as usize).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "data file {k} does not exist ({} has {n})",
                self.path
            ))
        })?;
        if let Some(r) = cell.get() {
            return Ok(r);
        }
        let prefix = sh.prefix.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "{}: the index of a sharded checkpoint finds its data files by its own name, \
                 PREFIX.index; opened from elsewhere, its tensors cannot be read",
                self.path
            ))
        })?;
        let want = self.header.shards[k as usize];
        let n = self.shard_count();
        let path = data_path(prefix, k, n);
        let shown = path_str(&path);
        let source = match Source::map(&path) {
            Ok(s) => s,
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::Shard {
                    path: shown,
                    problem: ShardProblem::Missing,
                    detail: format!(
                        "data file {k} of {n} of checkpoint {} is missing",
                        prefix.display()
                    ),
                })
            }
            Err(e) => return Err(e),
        };
        let ctx = format!("data file {k} of checkpoint {}", prefix.display());
        check_shard_len(&want, source.len() as u64, &shown, &ctx, &self.path)?;
        let r = MappedReader::from_source(source, shown.clone(), None, self.opts.clone())
            .map_err(|e| e.context(&ctx))?;
        check_shard_identity(&r.header, &want, &shown, &ctx, &self.path)?;
        Ok(cell.get_or_init(|| r))
    }

    /// [`Reader::verify_with`] of a sharded checkpoint: the index's blocks; every data file
    /// (present, length, identity, and everything `verify` checks in a native file), several at
    /// once; then that the index lists exactly the data files' entries, each pointing where its
    /// data file's own entry does, and each partitioned tensor with exactly its data files'
    /// slices; and the header's counts.
    pub(in crate::native) fn verify_sharded(
        &self,
        opts: VerifyOptions<'_>,
    ) -> Result<VerifyReport> {
        let mut report = VerifyReport {
            blocks: self.table().verify_all_blocks()?,
            ..VerifyReport::default()
        };
        let n = self.shard_count();
        let threads = resolve_threads(opts.threads);
        if let Some(p) = opts.progress {
            let mut total = 0u64;
            for k in 0..n {
                total = total.saturating_add(self.header.shards[k as usize].file_len);
            }
            p.start(total, Unit::Bytes);
        }
        // Every file is opened first (in order, so the first missing one is reported).
        for k in 0..n {
            self.shard(k)?;
        }
        let workers = threads.min(n as usize).max(1);
        let per_shard = (threads / workers).max(1);
        let progress = opts.progress.map(|p| ShardProgress {
            inner: p,
            shards: &self.header.shards,
        });
        let ks: Vec<u32> = (0..n).collect();
        let reports = std::sync::Mutex::new(vec![VerifyReport::default(); n as usize]);
        crate::parallel::try_each(&ks, workers, |&k| {
            let shard = self.shard(k)?;
            let r = shard.verify_with(VerifyOptions {
                load: None,
                threads: per_shard,
                progress: None,
            })?;
            if let Some(p) = &progress {
                p.inner.advance(p.shards[k as usize].file_len);
            }
            reports.lock().unwrap_or_else(|p| p.into_inner())[k as usize] = r;
            Ok(())
        })?;
        for r in reports.into_inner().unwrap_or_else(|p| p.into_inner()) {
            report.blocks += r.blocks;
            report.records += r.records;
            report.data_bytes += r.data_bytes;
        }
        let (tensors, slices) = self.check_against_shards()?;
        if tensors != self.header.tensor_count || slices != self.header.slice_count {
            return Err(Error::corrupt(
                "header entry",
                self.index.first_data_offset().unwrap_or(0),
                format!(
                    "{}: the header counts {} tensors and {} slices, the index holds {tensors} \
                     and {slices}",
                    self.path, self.header.tensor_count, self.header.slice_count
                ),
            ));
        }
        report.tensors = tensors;
        report.slices = slices;
        Ok(report)
    }

    /// Walks the index and every data file's index together, in key order: each entry of the
    /// index is the entry of the data file it names (with that file's number as `shard_id`), a
    /// partitioned tensor's entry lists the slices of its data files' entries in file order,
    /// and no data file has an entry the index lacks. Returns the index's tensor and slice
    /// counts.
    fn check_against_shards(&self) -> Result<(u64, u64)> {
        let tables: Vec<_> = (0..self.shard_count())
            .map(|k| self.shard(k).map(|r| r.table()))
            .collect::<Result<_>>()?;
        let shard_path = |k: usize| {
            self.shard(u32::try_from(k).unwrap_or(u32::MAX))
                .map(|r| r.path().to_string())
                .unwrap_or_default()
        };
        check_against_shards(
            &self.table(),
            &self.header,
            &self.path,
            &tables,
            &shard_path,
        )
    }
}

/// Walks the index `table` of the sharded checkpoint `path` (header `header`) and every data
/// file's index (`tables`, in file order; `shard_path` names them) together, in key order:
/// each entry of the index is the entry of the data file it names (with that file's number as
/// `shard_id`), a partitioned tensor's entry lists the slices of its data files' entries in
/// file order, and no data file has an entry the index lacks. Returns the index's tensor and
/// slice counts. The one check for every reader of a sharded checkpoint (mapped, remote).
pub(crate) fn check_against_shards(
    table: &crate::table::Table<'_>,
    header: &crate::native::header::FileHeader,
    path: &str,
    tables: &[crate::table::Table<'_>],
    shard_path: &dyn Fn(usize) -> String,
) -> Result<(u64, u64)> {
    {
        let n = header.shards.len();
        let mut cursors: Vec<_> = tables.iter().map(|t| t.iter()).collect();
        // (key, data file) of each cursor's current entry, smallest first.
        let mut heap: BinaryHeap<std::cmp::Reverse<(Vec<u8>, usize)>> = BinaryHeap::new();
        for (k, c) in cursors.iter_mut().enumerate() {
            if advance_past_header(c)? {
                heap.push(std::cmp::Reverse((c.key().to_vec(), k)));
            }
        }
        let is_reused = |k: usize| header.shards[k].reused;
        let mut it = table.iter();
        let (mut tensors, mut slices) = (0u64, 0u64);
        let bad = |at: u64, detail: String| Error::corrupt("index entry", at, detail);
        while it.next()? {
            let (key, value, at) = (it.key(), it.value(), it.block_offset());
            if key.is_empty() {
                continue;
            }
            // A data file reused from an earlier save (SPEC.md 12.5) may hold entries the
            // index does not list: tensors that changed since, or that the new save dropped.
            while let Some(std::cmp::Reverse((k, s))) = heap.peek() {
                if k.as_slice() >= key {
                    break;
                }
                let s = *s;
                if !is_reused(s) {
                    return Err(bad(
                        at,
                        format!(
                            "{}: the entry of {} in data file {} is missing from the index",
                            path,
                            slice_key::display_key(k),
                            shard_path(s)
                        ),
                    ));
                }
                heap.pop();
                if cursors[s].next()? {
                    heap.push(std::cmp::Reverse((cursors[s].key().to_vec(), s)));
                }
            }
            let mut popped = Vec::new();
            while heap
                .peek()
                .is_some_and(|std::cmp::Reverse((k, _))| k.as_slice() == key)
            {
                if let Some(std::cmp::Reverse((_, s))) = heap.pop() {
                    popped.push(s);
                }
            }
            popped.sort_unstable();
            if key[0] == 0 {
                slices += 1;
            } else {
                tensors += 1;
            }
            let e = IndexEntry::decode(value, at, MAX_RANK)?;
            let shown = slice_key::display_key(key);
            // Of the reused data files holding the key, only the one a whole entry names
            // counts (slices are never reused).
            let named = usize::try_from(e.shard_id)
                .ok()
                .filter(|_| e.num_slices == 0);
            let holders: Vec<usize> = popped
                .iter()
                .copied()
                .filter(|&h| !is_reused(h) || Some(h) == named)
                .collect();
            if e.num_slices == 0 {
                let k = usize::try_from(e.shard_id).ok().filter(|&k| k < n);
                if k.is_none() || holders != [k.unwrap_or(0)] {
                    return Err(bad(
                        at,
                        format!(
                            "{}: the entry of {shown} names data file {}, the data files \
                             holding it are {:?}",
                            path,
                            e.shard_id,
                            holders.iter().map(|&s| shard_path(s)).collect::<Vec<_>>()
                        ),
                    ));
                }
                let s = holders[0];
                let mut own =
                    IndexEntry::decode(cursors[s].value(), cursors[s].block_offset(), MAX_RANK)?;
                own.shard_id = e.shard_id;
                if own != e {
                    return Err(bad(
                        at,
                        format!(
                            "{}: the entry of {shown} differs from the one in {}",
                            path,
                            shard_path(s)
                        ),
                    ));
                }
            } else {
                let dtype = crate::native::mapped::entry_dtype(key, &e)?;
                crate::native::mapped::check_partition(key, &e, dtype, value, at, true)?;
                let listed = decode_slices(value, at, e.shape.len())?;
                let mut theirs = Vec::new();
                for &s in &holders {
                    let (v, a) = (cursors[s].value(), cursors[s].block_offset());
                    let own = IndexEntry::decode(v, a, MAX_RANK)?;
                    if own.num_slices == 0
                        || (own.tf_dtype, own.pdx_dtype) != (e.tf_dtype, e.pdx_dtype)
                        || own.shape != e.shape
                    {
                        return Err(bad(
                            at,
                            format!(
                                "{}: tensor {shown} is stored in slices, but {} holds it as {}",
                                path,
                                shard_path(s),
                                if own.num_slices == 0 {
                                    "a whole tensor".to_string()
                                } else {
                                    format!("dtype {:?} shape {:?}", own.dtype_code(), own.shape)
                                }
                            ),
                        ));
                    }
                    theirs.extend(decode_slices(v, a, e.shape.len())?);
                }
                // Slices reused from earlier saves (SPEC.md 12.5) follow the shards' own; each
                // is a slice key whose entry names a reused data file (and is checked there
                // like any entry).
                let (own, extra) = listed.split_at(theirs.len().min(listed.len()));
                let mut reused_ok = true;
                for ext in extra {
                    let k = slice_key::encode(key, ext);
                    let names = table
                        .get(&k, |v, a| IndexEntry::decode(v, a, MAX_RANK))?
                        .transpose()?
                        .and_then(|se| usize::try_from(se.shard_id).ok())
                        .filter(|&f| f < n && is_reused(f));
                    reused_ok &= names.is_some();
                }
                if theirs != own || !reused_ok {
                    return Err(bad(
                        at,
                        format!(
                            "{}: tensor {shown} lists {} slices, its data files hold {} \
                             (in {:?})",
                            path,
                            listed.len(),
                            theirs.len(),
                            holders.iter().map(|&s| shard_path(s)).collect::<Vec<_>>()
                        ),
                    ));
                }
            }
            for s in popped {
                if cursors[s].next()? {
                    heap.push(std::cmp::Reverse((cursors[s].key().to_vec(), s)));
                }
            }
        }
        while let Some(std::cmp::Reverse((k, s))) = heap.pop() {
            if is_reused(s) {
                continue;
            }
            return Err(Error::corrupt(
                "index entry",
                0,
                format!(
                    "{}: the entry of {} in data file {} is missing from the index",
                    path,
                    slice_key::display_key(&k),
                    shard_path(s)
                ),
            ));
        }
        Ok((tensors, slices))
    }
}

/// Checks that data file `shown` (described as `ctx`: "data file K of checkpoint P") has the
/// length its index (`index`) records in `want` (SPEC.md 12.4): the check before it is opened.
/// The one check for every reader of a sharded checkpoint (mapped, remote).
pub(crate) fn check_shard_len(
    want: &ShardRef,
    len: u64,
    shown: &str,
    ctx: &str,
    index: &str,
) -> Result<()> {
    if len != want.file_len {
        return Err(Error::Shard {
            path: shown.to_string(),
            problem: ShardProblem::Length,
            detail: format!(
                "{ctx} has {len} bytes, its index ({index}) records {} (a file of another \
                 save, put in its place?)",
                want.file_len
            ),
        });
    }
    Ok(())
}

/// Checks that data file `shown` (described as `ctx`), whose header is `header`, is the shard
/// its index (`index`) records in `want`: its identity (save, shard number, number of shards),
/// and a native file of its own, not an index (SPEC.md 12.4). The one check for every reader
/// of a sharded checkpoint.
pub(crate) fn check_shard_identity(
    header: &FileHeader,
    want: &ShardRef,
    shown: &str,
    ctx: &str,
    index: &str,
) -> Result<()> {
    if header.shard_of == Some(want.shard) && header.shards.is_empty() {
        return Ok(());
    }
    let is = match header.shard_of {
        Some(s) => format!(
            "is shard {} of {} of save {}",
            s.shard_id, s.num_shards, s.save_id
        ),
        None => "is not a shard of a sharded save".to_string(),
    };
    Err(Error::Shard {
        path: shown.to_string(),
        problem: ShardProblem::Identity,
        detail: format!(
            "{ctx} {is}; its index ({index}) expects shard {} of {} of save {} (a file of \
             another save, put in its place?)",
            want.shard.shard_id, want.shard.num_shards, want.shard.save_id
        ),
    })
}

/// Moves a fresh table cursor to its first entry after the header; whether there is one.
fn advance_past_header(c: &mut crate::table::TableIter<'_>) -> Result<bool> {
    let mut on = c.next()?;
    while on && c.key().is_empty() {
        on = c.next()?;
    }
    Ok(on)
}

/// Progress of a sharded verify: a data file's bytes count once it is verified.
struct ShardProgress<'a> {
    inner: &'a dyn Progress,
    shards: &'a [crate::native::header::ShardRef],
}
