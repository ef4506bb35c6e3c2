//! The place of a checkpoint's sibling files: every file of a sharded checkpoint (SPEC.md 12)
//! is named `PREFIX` followed by a suffix, beside the others, in a directory or under a bucket
//! prefix. This module holds the one formatter and the one parser of each name convention
//! ([`data_suffix`], [`pending_suffix`], [`refs_suffix`], [`reused_suffix`], [`INDEX_SUFFIX`];
//! [`parse_suffix`]), and [`Place`], what the sharded writer, an incremental save's reuse and
//! the merge do with those files wherever they are: list them, open one to read
//! ([`RangeRead`](crate::remote::RangeRead)), start a [`Writer`] on one, put a small one whole, delete one, and bring in a
//! data file of another checkpoint (a hard link or a copy in a directory, [`DirPlace`]; a
//! server-side copy in a bucket, `remote::BucketPlace`).

use std::any::Any;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{path_str, Error, IoContext, Result, ShardProblem};
use crate::native::fault::{self, Op};
use crate::native::header::{SaveId, ShardOf};
use crate::native::ranged::RangeRead;
use crate::native::read_at::FileRange;
use crate::native::staging;
use crate::native::writer::{Writer, WriterOptions};

/// `.index`: the suffix of a checkpoint's index.
pub const INDEX_SUFFIX: &str = ".index";

/// `.data-SSSSS-of-NNNNN`: data file `shard` of `num_shards` (TensorFlow's names).
pub fn data_suffix(shard: u32, num_shards: u32) -> String {
    format!(".data-{shard:05}-of-{num_shards:05}")
}

/// `.data-SSSSS-of-NNNNN.pending`: where a shard of a save in progress is written in a
/// directory (SPEC.md 12.3); it gets its final name when the save's index is committed.
pub fn pending_suffix(shard: u32, num_shards: u32) -> String {
    format!("{}.pending", data_suffix(shard, num_shards))
}

/// `.refs-SSSSS-of-NNNNN.pending`: the references file of shard `shard` of `num_shards` of an
/// incremental save (SPEC.md 12.5); removed once the save is committed.
pub fn refs_suffix(shard: u32, num_shards: u32) -> String {
    format!(".refs-{shard:05}-of-{num_shards:05}.pending")
}

/// `.reused-<save id>-SSSSS-of-NNNNN`: an earlier save's data file `file` brought beside the
/// checkpoint by an incremental save (SPEC.md 12.5), until the merge gives it a data file name.
pub fn reused_suffix(file: &ShardOf) -> String {
    format!(
        ".reused-{}-{:05}-of-{:05}",
        file.save_id, file.shard_id, file.num_shards
    )
}

/// What a sibling file is, by the part of its name after `PREFIX` ([`parse_suffix`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sibling {
    /// `.index`.
    Index,
    /// `.data-k-of-N`, or `.data-k-of-N.pending` (`pending`).
    Data {
        /// The shard's number.
        shard: u32,
        /// The number of data files.
        num_shards: u32,
        /// Whether the name is the pending one.
        pending: bool,
    },
    /// `.refs-k-of-N.pending`.
    Refs {
        /// The shard's number.
        shard: u32,
        /// The number of shards of its save.
        num_shards: u32,
    },
    /// `.reused-<save id>-k-of-N`: data file k of N of that save.
    Reused(ShardOf),
}

/// The one parser of the names [`data_suffix`], [`pending_suffix`], [`refs_suffix`],
/// [`reused_suffix`] and [`INDEX_SUFFIX`] format: what the file named `PREFIX` followed by
/// `suffix` is, if it is one of them.
pub fn parse_suffix(suffix: &[u8]) -> Option<Sibling> {
    if suffix == INDEX_SUFFIX.as_bytes() {
        return Some(Sibling::Index);
    }
    if let Some(rest) = suffix.strip_prefix(b".data-") {
        let (rest, pending) = match rest.strip_suffix(b".pending") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (shard, num_shards) = parse_k_of_n(rest)?;
        return Some(Sibling::Data {
            shard,
            num_shards,
            pending,
        });
    }
    if let Some(rest) = suffix.strip_prefix(b".refs-") {
        let (shard, num_shards) = parse_k_of_n(rest.strip_suffix(b".pending")?)?;
        return Some(Sibling::Refs { shard, num_shards });
    }
    let rest = std::str::from_utf8(suffix.strip_prefix(b".reused-")?).ok()?;
    let (id, k_of_n) = rest.split_once('-')?;
    let (shard_id, num_shards) = parse_k_of_n(k_of_n.as_bytes())?;
    Some(Sibling::Reused(ShardOf {
        save_id: SaveId::from_hex(id)?,
        shard_id,
        num_shards,
    }))
}

/// A data file's whole name, `PREFIX.data-SSSSS-of-NNNNN` (or its pending name): `PREFIX` and
/// what [`parse_suffix`] makes of the rest, split at the last `.data-`. For names whose prefix
/// is not known beforehand (a TensorFlow data file given as an input, an object a URL names, a
/// pending shard found in a directory); `None` for any other name, and for an empty prefix.
pub fn split_data_name(name: &[u8]) -> Option<(&[u8], Sibling)> {
    const DATA: &[u8] = b".data-";
    let at = name.windows(DATA.len()).rposition(|w| w == DATA)?;
    let sibling = parse_suffix(&name[at..])?;
    (at > 0).then_some((&name[..at], sibling))
}

/// `SSSSS-of-NNNNN` (at least 5 digits each): (shard, number of shards).
fn parse_k_of_n(rest: &[u8]) -> Option<(u32, u32)> {
    let rest = std::str::from_utf8(rest).ok()?;
    let (a, b) = rest.split_once("-of-")?;
    let digits = |s: &str| s.len() >= 5 && s.bytes().all(|c| c.is_ascii_digit());
    if !digits(a) || !digits(b) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// How [`Place::bring_in`] got another checkpoint's file beside this one's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Brought {
    /// Hard-linked: no byte copied.
    Linked,
    /// Copied through this process (the file system cannot link across to it): `u64` bytes.
    Copied(u64),
    /// Copied by the object store itself (server-side): no byte through this process.
    ServerCopied,
}

/// The sibling files of a checkpoint: a directory's files named `PREFIX...` ([`DirPlace`]) or a
/// bucket's objects under the key `PREFIX...` (`remote::BucketPlace`). Each file is named by
/// its suffix after `PREFIX` (see the formatters of this module).
pub trait Place: Send + Sync + std::fmt::Debug {
    /// Where the file `PREFIX<suffix>` is (a path or a URL), for messages.
    fn shown(&self, suffix: &str) -> String;

    /// The file `PREFIX<suffix>` as a path (a directory's exact path, a bucket's URL), for
    /// reports ([`crate::ShardFile::path`], [`crate::ShardWriter::pending_path`]).
    fn path_of(&self, suffix: &str) -> PathBuf {
        PathBuf::from(self.shown(suffix))
    }

    /// The suffixes of the files whose names start with `PREFIX` (sorted).
    fn list(&self) -> Result<Vec<String>>;

    /// Opens `PREFIX<suffix>` to read by ranges (a directory's file with `pread`, a bucket's
    /// object with ranged GETs). A missing file is [`Error::Shard`] with
    /// [`ShardProblem::Missing`].
    fn open(&self, suffix: &str) -> Result<Arc<dyn RangeRead>>;

    /// A writer of a native file that appears, complete, under `PREFIX<suffix>` when it
    /// finishes (a staged file renamed in a directory, a multipart upload in a bucket), and
    /// never under that name when it fails.
    fn writer(&self, suffix: &str, opts: WriterOptions) -> Result<Writer>;

    /// Writes `bytes` as `PREFIX<suffix>`, whole or not at all (durably when `sync`).
    fn put(&self, suffix: &str, bytes: &[u8], sync: bool) -> Result<()>;

    /// Removes `PREFIX<suffix>`; `Ok(false)` when it was not there.
    fn delete(&self, suffix: &str) -> Result<bool>;

    /// Brings the file `from_suffix` of the checkpoint at `from` (another place of the same
    /// kind) here as `PREFIX<to_suffix>`, with as few bytes through this process as the place
    /// allows. The caller checks the file brought (its identity) before using it.
    ///
    /// Errors: [`Error::Unsupported`] when the two places cannot exchange files (a directory
    /// and a bucket, or two buckets of different stores).
    fn bring_in(&self, from: &dyn Place, from_suffix: &str, to_suffix: &str) -> Result<Brought>;

    /// For [`Place::bring_in`]: the concrete place.
    fn as_any(&self) -> &dyn Any;
}

/// The sibling files of a checkpoint in a local directory: `PREFIX` is a path.
#[derive(Clone, Debug)]
pub struct DirPlace {
    prefix: PathBuf,
}

impl DirPlace {
    /// The files `prefix...` (a path whose last part is the prefix's name).
    pub fn new(prefix: impl Into<PathBuf>) -> DirPlace {
        DirPlace {
            prefix: prefix.into(),
        }
    }

    /// The path of `PREFIX<suffix>`.
    pub fn path(&self, suffix: &str) -> PathBuf {
        with_suffix(&self.prefix, suffix)
    }

    /// The prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }
}

impl Place for DirPlace {
    fn shown(&self, suffix: &str) -> String {
        path_str(&self.path(suffix))
    }

    fn path_of(&self, suffix: &str) -> PathBuf {
        self.path(suffix)
    }

    fn list(&self) -> Result<Vec<String>> {
        let stem = self.prefix.file_name().ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{} does not name a checkpoint",
                self.prefix.display()
            ))
        })?;
        let stem = stem.as_encoded_bytes();
        let dir = staging::parent_dir(&self.prefix);
        let mut out = Vec::new();
        for ent in std::fs::read_dir(&dir).ctx("listing", &dir)? {
            let name = ent.ctx("listing", &dir)?.file_name();
            if let Some(rest) = name.as_encoded_bytes().strip_prefix(stem) {
                if let Ok(s) = std::str::from_utf8(rest) {
                    out.push(s.to_string());
                }
            }
        }
        out.sort();
        Ok(out)
    }

    fn open(&self, suffix: &str) -> Result<Arc<dyn RangeRead>> {
        let path = self.path(suffix);
        let f = std::fs::File::open(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::Shard {
                    path: path_str(&path),
                    problem: ShardProblem::Missing,
                    detail: "the file is missing".into(),
                }
            } else {
                Error::io(format!("opening {}", path.display()), e)
            }
        })?;
        Ok(Arc::new(FileRange::from_file(f, &path)?))
    }

    fn writer(&self, suffix: &str, opts: WriterOptions) -> Result<Writer> {
        Writer::create_with(self.path(suffix), opts)
    }

    fn put(&self, suffix: &str, bytes: &[u8], sync: bool) -> Result<()> {
        let path = self.path(suffix);
        let (file, staged) = staging::stage_file(&path, ".pdx-tmp")?;
        {
            let mut out = BufWriter::with_capacity(1 << 20, &file);
            out.write_all(bytes)
                .and_then(|()| fault::check(Op::Write, staged.path()))
                .and_then(|()| out.flush())
                .ctx("writing", staged.path())?;
        }
        if sync {
            fault::check(Op::SyncFile, staged.path())
                .and_then(|()| file.sync_all())
                .ctx("syncing", staged.path())?;
        }
        drop(file);
        staging::commit([(staged, path.as_path())])?;
        if sync {
            staging::sync_parent(&path)?;
        }
        Ok(())
    }

    fn delete(&self, suffix: &str) -> Result<bool> {
        let path = self.path(suffix);
        match fault::check(Op::Unlink, &path).and_then(|()| std::fs::remove_file(&path)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::io(format!("removing {}", path.display()), e)),
        }
    }

    fn bring_in(&self, from: &dyn Place, from_suffix: &str, to_suffix: &str) -> Result<Brought> {
        let Some(from) = from.as_any().downcast_ref::<DirPlace>() else {
            return Err(Error::Unsupported(format!(
                "{}: a file of a checkpoint elsewhere than in a directory ({}) cannot be \
                 brought into a directory; save the whole checkpoint",
                self.shown(to_suffix),
                from.shown(from_suffix)
            )));
        };
        let (src, target) = (from.path(from_suffix), self.path(to_suffix));
        let (staged, brought) = match staging::stage_link(&src, &target, ".pdx-tmp") {
            Ok(s) => (s, Brought::Linked),
            Err(_) => {
                // Another file system (or none that links): copied.
                let (f, s) = staging::stage_file(&target, ".pdx-tmp")?;
                let mut input = std::fs::File::open(&src).ctx("opening", &src)?;
                let mut out = BufWriter::with_capacity(4 << 20, &f);
                let n = std::io::copy(&mut input, &mut out)
                    .and_then(|n| fault::check(Op::Write, s.path()).map(|()| n))
                    .and_then(|n| out.flush().map(|()| n))
                    .ctx("copying into", s.path())?;
                drop(out);
                fault::check(Op::SyncFile, s.path())
                    .and_then(|()| f.sync_all())
                    .ctx("syncing", s.path())?;
                (s, Brought::Copied(n))
            }
        };
        staging::commit([(staged, target.as_path())])?;
        staging::sync_parent(&target)?;
        Ok(brought)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `prefix` followed by `suffix` (a file of the checkpoint at `prefix`).
pub(crate) fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut s = std::ffi::OsString::from(prefix.as_os_str());
    s.push(suffix);
    PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_data_name_takes_the_last_data_suffix_and_nothing_else() {
        let data = |k, n, pending| Sibling::Data {
            shard: k,
            num_shards: n,
            pending,
        };
        // A file name, and its prefix and sibling kind if it is a data file's.
        type Case<'a> = (&'a [u8], Option<(&'a [u8], Sibling)>);
        let cases: [Case<'_>; 8] = [
            (
                b"model.ckpt.data-00000-of-00001",
                Some((b"model.ckpt", data(0, 1, false))),
            ),
            (
                b"a.data-b.data-00002-of-00003.pending",
                Some((b"a.data-b", data(2, 3, true))),
            ),
            (
                b"x.data-123456-of-123457",
                Some((b"x", data(123456, 123457, false))),
            ),
            (b".data-00000-of-00001", None),
            (b"x.data-0000-of-00001", None),
            (b"x.data-00000-of-00001.tmp", None),
            (b"x.index", None),
            (b"x.refs-00000-of-00001.pending", None),
        ];
        for (name, want) in cases {
            assert_eq!(
                split_data_name(name),
                want,
                "{}",
                String::from_utf8_lossy(name)
            );
        }
    }

    #[test]
    fn names_parse_back() {
        let f = ShardOf {
            save_id: SaveId::random(),
            shard_id: 3,
            num_shards: 8,
        };
        let cases = [
            (INDEX_SUFFIX.to_string(), Some(Sibling::Index)),
            (
                data_suffix(3, 8),
                Some(Sibling::Data {
                    shard: 3,
                    num_shards: 8,
                    pending: false,
                }),
            ),
            (
                pending_suffix(3, 8),
                Some(Sibling::Data {
                    shard: 3,
                    num_shards: 8,
                    pending: true,
                }),
            ),
            (
                refs_suffix(3, 8),
                Some(Sibling::Refs {
                    shard: 3,
                    num_shards: 8,
                }),
            ),
            (reused_suffix(&f), Some(Sibling::Reused(f))),
            (".data-3-of-8".into(), None),
            (".refs-00003-of-00008".into(), None),
            (format!("{}.pdx-tmp", reused_suffix(&f)), None),
            ("x.data-00003-of-00008".into(), None),
        ];
        for (s, want) in cases {
            assert_eq!(parse_suffix(s.as_bytes()), want, "{s}");
        }
        assert_eq!(
            parse_suffix(b".data-100000-of-100001"),
            Some(Sibling::Data {
                shard: 100_000,
                num_shards: 100_001,
                pending: false
            })
        );
    }
}
