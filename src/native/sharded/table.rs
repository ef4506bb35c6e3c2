//! The parts of a sharded checkpoint (SPEC.md 12) that a reader needs before it reads a data
//! file: the file names, the checks of an index header and of a shard identity, and the set of
//! data files opened on first use. (The reading itself is `sharded/reader.rs`.)

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::native::header::{FileHeader, ShardOf};
use crate::native::MAX_SHARDS;

/// `PREFIX.index`.
pub(crate) fn index_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".index")
}

/// `PREFIX.data-SSSSS-of-NNNNN`: data file `shard` of `num_shards` (TensorFlow's names).
pub(crate) fn data_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    with_suffix(prefix, &format!(".data-{shard:05}-of-{num_shards:05}"))
}

/// `PREFIX.data-SSSSS-of-NNNNN.pending`: where a shard of a save in progress is written
/// (SPEC.md 12.3); it gets its final name only when the save's index is committed.
pub(crate) fn pending_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    let mut p = data_path(prefix, shard, num_shards).into_os_string();
    p.push(".pending");
    PathBuf::from(p)
}

/// `PREFIX.refs-SSSSS-of-NNNNN.pending`: the references file of shard `shard` of
/// `num_shards` of an incremental save (SPEC.md 12.5), the tensors it reuses from earlier
/// saves' data files; removed once the save is committed.
pub(crate) fn refs_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    with_suffix(
        prefix,
        &format!(".refs-{shard:05}-of-{num_shards:05}.pending"),
    )
}

/// `PREFIX.reused-<save id>-SSSSS-of-NNNNN`: the link (or copy) in the prefix's directory of an
/// earlier save's data file that an incremental save reuses (SPEC.md 12.5), until the merge
/// gives it a data file name of the new checkpoint.
pub(crate) fn reused_path(prefix: &Path, file: &ShardOf) -> PathBuf {
    with_suffix(
        prefix,
        &format!(
            ".reused-{}-{:05}-of-{:05}",
            file.save_id, file.shard_id, file.num_shards
        ),
    )
}

/// `prefix` followed by `suffix`.
pub(crate) fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = OsString::from(prefix.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

/// The prefix of `PREFIX.index`, if `path` is named so.
pub(crate) fn prefix_of_index(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix(".index").filter(|s| !s.is_empty())?;
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
