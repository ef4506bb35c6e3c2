//! The files at a sharded checkpoint's prefix, and what failed saves left there:
//! [`shard_files`](crate::shard_files) names each (committed, pending, orphan, temporary), [`clean_shards`](crate::clean_shards) removes
//! all but the committed checkpoint's. Its own file because it is the merge's housekeeping, not
//! its plan or commit: it reads each file's header and never writes an index.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::native::header::ShardOf;
use crate::native::sharded::index::{
    read_header_from, read_references_from, read_shard_index_from,
};
use crate::native::sharded::merge::prefix_files;
use crate::native::sharded::place::{parse_suffix, DirPlace, Place, Sibling, INDEX_SUFFIX};
use crate::native::staging;
use crate::table::FOOTER_LEN;

/// What a file at a checkpoint's prefix is (see [`shard_files`](crate::shard_files)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShardFileKind {
    /// A data file of the committed sharded checkpoint at the prefix.
    Committed,
    /// A finished shard of a save that has not been merged (`PREFIX.data-k-of-N.pending`):
    /// a save in progress, or one whose merge never ran. Also the other files an incremental
    /// save keeps until its merge (SPEC.md 12.5): a shard's references file
    /// (`PREFIX.refs-k-of-N.pending`, whose `shard` is the shard's) and an earlier save's data
    /// file linked for reuse (`PREFIX.reused-...`, whose `shard` is that file's identity).
    Pending,
    /// A shard under its final name that no committed index refers to: left by a merge that
    /// stopped between removing the previous index and writing the new one, or by a
    /// checkpoint whose index was removed.
    Orphan,
    /// A temporary file of a shard writer or merge that did not finish (a writer's can be
    /// rebuilt with `recover`).
    Temporary,
}

/// One file found by [`shard_files`](crate::shard_files).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardFile {
    /// The file.
    pub path: PathBuf,
    /// What it is.
    pub kind: ShardFileKind,
    /// Its length in bytes.
    pub len: u64,
    /// For a shard, which shard of which save it is (`None` when its header cannot be read).
    pub shard: Option<ShardOf>,
}

/// The files of a sharded checkpoint at `prefix`, and those a save that did not finish left
/// there: pending shards, orphan shards, temporary files. Reads each shard's header (its index,
/// not its records). Data files of a TensorFlow checkpoint at the prefix are not listed.
pub fn shard_files(prefix: impl AsRef<Path>) -> Result<Vec<ShardFile>> {
    let prefix = prefix.as_ref();
    let (_, stem, files) = prefix_files(prefix)?;
    let place = DirPlace::new(prefix);
    let mut out = sibling_files(&place)?;
    // Temporary files (`.PREFIX...pdx-tmp`, beside the checkpoint's: a directory's only).
    let hidden: Vec<u8> = [&b"."[..], &stem].concat();
    for (path, name) in files {
        if name.starts_with(&hidden)
            && name.ends_with(b".pdx-tmp")
            && [&b".data-"[..], b".index.", b".refs-", b".reused-"]
                .iter()
                .any(|p| name[hidden.len()..].starts_with(p))
        {
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            out.push(ShardFile {
                path,
                kind: ShardFileKind::Temporary,
                len,
                shard: None,
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The files of the sharded checkpoint at `place` ([`Place::path_of`]) and
/// those a save that did not finish left there ([`shard_files`](crate::shard_files) but temporary files, which
/// only a directory has): the committed checkpoint's data files, pending shards, references
/// and reused files, orphan shards. Reads each one's index (never its records).
pub(crate) fn sibling_files(place: &dyn Place) -> Result<Vec<ShardFile>> {
    let mut read = 0u64;
    // The committed checkpoint's number of data files, if PREFIX.index is a sharded index.
    let committed: Option<u32> = place
        .open(INDEX_SUFFIX)
        .and_then(|src| read_header_from(&*src, &place.shown(INDEX_SUFFIX), &mut read))
        .ok()
        .filter(|h| !h.shards.is_empty())
        .map(|h| u32::try_from(h.shards.len()).unwrap_or(u32::MAX));
    let mut out = Vec::new();
    for suffix in place.list()? {
        let (kind, refs) = match parse_suffix(suffix.as_bytes()) {
            Some(Sibling::Data {
                shard,
                num_shards,
                pending,
            }) => (
                if pending {
                    ShardFileKind::Pending
                } else if committed.is_some_and(|c| c == num_shards && shard < num_shards) {
                    ShardFileKind::Committed
                } else {
                    ShardFileKind::Orphan
                },
                false,
            ),
            Some(Sibling::Refs { .. }) => (ShardFileKind::Pending, true),
            Some(Sibling::Reused(_)) => (ShardFileKind::Pending, false),
            Some(Sibling::Index) | None => continue,
        };
        let shown = place.shown(&suffix);
        let (len, shard) = match place.open(&suffix) {
            Ok(src) => {
                let at = Path::new(&shown);
                let shard = if refs {
                    read_references_from(&*src, at, &mut read)
                        .ok()
                        .map(|r| r.shard)
                } else {
                    read_shard_index_from(&*src, at, &mut read, FOOTER_LEN as u64)
                        .ok()
                        .map(|s| s.shard)
                };
                (src.len(), shard)
            }
            Err(_) => (0, None),
        };
        // A data file that is not a paramdex shard (a TensorFlow checkpoint's) is not ours.
        if kind == ShardFileKind::Orphan && shard.is_none() {
            continue;
        }
        out.push(ShardFile {
            path: place.path_of(&suffix),
            kind,
            len,
            shard,
        });
    }
    Ok(out)
}

/// Removes what [`shard_files`](crate::shard_files) reports as left behind at `prefix` (pending and orphan shards,
/// temporary files), never the committed checkpoint's files, and returns them. Run it only
/// when no save at that prefix is in progress: the shards of a running save are pending too.
pub fn clean_shards(prefix: impl AsRef<Path>) -> Result<Vec<ShardFile>> {
    let prefix = prefix.as_ref();
    let mut removed = Vec::new();
    for f in shard_files(prefix)? {
        if f.kind == ShardFileKind::Committed {
            continue;
        }
        match std::fs::remove_file(&f.path) {
            Ok(()) => removed.push(f),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("removing {}", f.path.display()), e)),
        }
    }
    if !removed.is_empty() {
        staging::sync_dir(&staging::parent_dir(prefix))?;
    }
    Ok(removed)
}
