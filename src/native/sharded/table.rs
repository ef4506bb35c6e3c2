//! The parts of a sharded checkpoint (SPEC.md 12) that a reader needs before it reads a data
//! file: the file names, the checks of an index header and of a shard identity, and the set of
//! data files opened on first use. (The reading itself is `sharded/reader.rs`.)

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::native::header::{FileHeader, ShardOf};
use crate::native::sharded::place::{
    data_suffix, pending_suffix, reused_suffix, with_suffix, INDEX_SUFFIX,
};
use crate::native::MAX_SHARDS;

/// `PREFIX.index`.
pub(crate) fn index_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, INDEX_SUFFIX)
}

/// `PREFIX.data-SSSSS-of-NNNNN`: data file `shard` of `num_shards` ([`data_suffix`]).
pub(crate) fn data_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    with_suffix(prefix, &data_suffix(shard, num_shards))
}

/// `PREFIX.data-SSSSS-of-NNNNN.pending` ([`pending_suffix`]).
pub(crate) fn pending_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    with_suffix(prefix, &pending_suffix(shard, num_shards))
}

/// `PREFIX.reused-<save id>-SSSSS-of-NNNNN` ([`reused_suffix`]).
pub(crate) fn reused_path(prefix: &Path, file: &ShardOf) -> PathBuf {
    with_suffix(prefix, &reused_suffix(file))
}

/// The prefix of `PREFIX.index`, if `path` is named so.
pub(crate) fn prefix_of_index(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(INDEX_SUFFIX).filter(|s| !s.is_empty())?;
    Some(path.with_file_name(stem))
}

/// Checks a shard identity (header field 22, or an entry of the shard table).
pub(in crate::native) fn check_shard_of(s: &ShardOf, at: u64) -> Result<()> {
    if s.num_shards == 0 || s.num_shards > MAX_SHARDS || s.shard_id >= s.num_shards {
        return Err(Error::corrupt(
            "header entry",
            at,
            format!(
                "shard {} of {} (the shard number must be below the number of shards, which is \
                 1 to {MAX_SHARDS})",
                s.shard_id, s.num_shards
            ),
        ));
    }
    Ok(())
}

/// Checks the header of a sharded checkpoint's index (SPEC.md 12.2).
pub(in crate::native) fn check_index_header(h: &FileHeader, at: u64) -> Result<()> {
    let bad = |detail: String| Error::corrupt("header entry", at, detail);
    let n = h.shards.len();
    if n as u64 > u64::from(MAX_SHARDS) || i32::try_from(n).ok() != Some(h.num_shards) {
        return Err(bad(format!(
            "num_shards is {}, the shard table lists {n} data files (at most {MAX_SHARDS})",
            h.num_shards
        )));
    }
    if h.records_len != 0 {
        return Err(bad(format!(
            "the index of a sharded checkpoint holds records ({} bytes)",
            h.records_len
        )));
    }
    if h.shard_of.is_some() {
        return Err(bad(
            "a sharded checkpoint's index with a shard identity of its own".into(),
        ));
    }
    for r in &h.shards {
        check_shard_of(&r.shard, at)?;
    }
    Ok(())
}

/// The data files of a sharded checkpoint, each opened on first use.
#[derive(Debug)]
pub(crate) struct Shards<R> {
    /// The checkpoint's prefix; `None` when the index was not opened from `PREFIX.index`.
    pub(in crate::native) prefix: Option<PathBuf>,
    /// The data files (readers of them), each set once opened and checked.
    pub(in crate::native) files: Vec<OnceLock<R>>,
}

impl<R> Shards<R> {
    pub(in crate::native) fn new(prefix: Option<PathBuf>, n: usize) -> Shards<R> {
        Shards {
            prefix,
            files: (0..n).map(|_| OnceLock::new()).collect(),
        }
    }
}
