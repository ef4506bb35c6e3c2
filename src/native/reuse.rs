//! The writer's side of incremental saves (SPEC.md 12.5): a shard that reuses tensors of an
//! earlier sharded checkpoint (its *base*) refers to them instead of writing their bytes.
//!
//! For each reference it keeps the base's index entry and which of the base's data files holds
//! the bytes. The first reference into a data file links that file into the new checkpoint's
//! directory (`PREFIX.reused-<save id>-k-of-n`, a hard link, or a copy where the file system
//! cannot link), so the bytes stay there whatever happens to the base afterwards. When the
//! shard finishes, its references go to its references file `PREFIX.refs-k-of-N.pending`,
//! written before the shard itself gets its pending name (whose header counts them, field 25):
//! a merge never sees a shard whose references are missing.

use std::collections::HashMap;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{path_str, Error, IoContext, Result, ShardProblem};
use crate::name;
use crate::native::entry::IndexEntry;
use crate::native::header::{FileHeader, ShardOf, ShardRef};
use crate::native::reader::Reader;
use crate::native::shard_index::read_shard_index;
use crate::native::shard_table::{data_path, refs_path, reused_path};
use crate::native::staging;
use crate::native::writer::{DEFAULT_BLOCK_SIZE, DEFAULT_RESTART_INTERVAL};
use crate::native::TF_BUNDLE_VERSION;
use crate::record::MAX_RANK;
use crate::table::{Compression, TableBuilder, TableOptions};

/// How a shard of an incremental save got an earlier data file into its checkpoint's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placed {
    /// Another shard writer of the save had linked it already.
    Found,
    /// Hard-linked: no byte copied.
    Linked,
    /// Copied (the file system cannot link across to it), from the bytes the base reader maps.
    Copied,
}

/// What an incremental shard writer reused, for [`ShardWriter::reused`](crate::ShardWriter).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReuseStats {
    /// Tensors referred to instead of written.
    pub tensors: u64,
    /// Their data bytes (not written).
    pub bytes: u64,
    /// Earlier data files referred to.
    pub files: u64,
    /// Of those, files this writer hard-linked into the checkpoint's directory.
    pub linked: u64,
    /// Of those, files this writer had to copy there (the file system could not link them).
    pub copied: u64,
    /// Bytes copied so.
    pub copied_bytes: u64,
}

/// The references of one shard writer.
#[derive(Debug)]
pub(super) struct Reuse {
    base: Arc<Reader>,
    /// The new checkpoint's prefix.
    prefix: PathBuf,
    /// The earlier data files referred to, in order of first use: an entry's `shard_id` in the
    /// references file is a position here.
    files: Vec<ShardRef>,
    /// Position in `files` of the base's data file k.
    by_base_file: HashMap<u32, i32>,
    /// Name → entry (with `shard_id` a position in `files`).
    refs: HashMap<Vec<u8>, IndexEntry>,
    pub(super) stats: ReuseStats,
}

impl Reuse {
    /// Reuse from `base`, which must be a sharded checkpoint opened by its prefix (or
    /// `PREFIX.index`), into the checkpoint at `prefix`.
    pub(super) fn new(base: Arc<Reader>, prefix: &Path) -> Result<Reuse> {
        if !base.is_sharded() || base.checkpoint_prefix().is_none() {
            return Err(Error::InvalidArgument(format!(
                "{}: the base of an incremental save must be a sharded checkpoint opened by \
                 its prefix (one written by ShardWriter or ShardedSave, of one shard or more)",
                base.path()
            )));
        }
        Ok(Reuse {
            base,
            prefix: prefix.to_path_buf(),
            files: Vec::new(),
            by_base_file: HashMap::new(),
            refs: HashMap::new(),
            stats: ReuseStats::default(),
        })
    }

    /// The earlier checkpoint.
    pub(super) fn base(&self) -> &Reader {
        &self.base
    }

    /// Whether `name` is referred to.
    pub(super) fn holds(&self, name: &[u8]) -> bool {
        self.refs.contains_key(name)
    }

    /// Refers to the base's tensor `name` (stored whole there) instead of writing it: checks
    /// its entry as a read would (the data file present, of its recorded length and identity,
    /// the range inside its records), and links the data file into the new checkpoint's
    /// directory the first time. The caller checked that its own writer does not hold `name`.
    pub(super) fn refer(&mut self, name: &[u8]) -> Result<()> {
        if self.refs.contains_key(name) {
            return Err(Error::DuplicateName {
                name: name::display(name),
            });
        }
        // The view checks the entry against its data file (and opens that file once).
        let view = match self.base.get(name)? {
            Some(v) => v,
            None => {
                return Err(Error::NotFound {
                    name: name::display(name),
                    path: self.base.path().to_string(),
                })
            }
        };
        let size = view.data().len() as u64;
        drop(view);
        let mut entry = self
            .base
            .table()
            .get(name, |value, at| IndexEntry::decode(value, at, MAX_RANK))?
            .transpose()?
            .ok_or_else(|| Error::NotFound {
                name: name::display(name),
                path: self.base.path().to_string(),
            })?;
        let k = u32::try_from(entry.shard_id).map_err(|_| {
            Error::corrupt(
                "index entry",
                0,
                format!(
                    "tensor {}: shard_id {}",
                    name::display(name),
                    entry.shard_id
                ),
            )
        })?;
        let j = match self.by_base_file.get(&k) {
            Some(&j) => j,
            None => self.place(k)?,
        };
        entry.shard_id = j;
        self.refs.insert(name.to_vec(), entry);
        self.stats.tensors += 1;
        self.stats.bytes += size;
        Ok(())
    }

    /// Brings the base's data file `k` into the new checkpoint's directory under its reused
    /// name and checks the file there is the one the base's index records (length and
    /// identity: a file replaced since the base was opened is refused). Returns its position
    /// in `files`.
    fn place(&mut self, k: u32) -> Result<i32> {
        let want = self.base.header().shards[k as usize];
        let base_prefix = self
            .base
            .checkpoint_prefix()
            .expect("checked at Reuse::new")
            .to_path_buf();
        let n = u32::try_from(self.base.header().shards.len()).expect("at most MAX_SHARDS");
        let src = data_path(&base_prefix, k, n);
        let target = reused_path(&self.prefix, &want.shard);
        let placed = if same_file(&target, &want) {
            Placed::Found
        } else {
            let (staged, placed) = match staging::stage_link(&src, &target, ".pdx-tmp") {
                Ok(s) => (s, Placed::Linked),
                Err(_) => {
                    // Another file system (or none that links): copy the bytes the base
                    // reader checked and maps, not whatever is at the path now.
                    let file = self.base.shard(k)?;
                    let (f, s) = staging::stage_file(&target, ".pdx-tmp")?;
                    let mut out = BufWriter::with_capacity(4 << 20, &f);
                    out.write_all(&file.source[..])
                        .and_then(|()| out.flush())
                        .ctx("copying into", s.path())?;
                    drop(out);
                    f.sync_all().ctx("syncing", s.path())?;
                    self.stats.copied_bytes += file.source.len() as u64;
                    (s, Placed::Copied)
                }
            };
            if !same_file(staged.path(), &want) {
                return Err(Error::Shard {
                    path: path_str(&src),
                    problem: ShardProblem::Identity,
                    detail: format!(
                        "data file {k} of the base checkpoint {} is no longer the file its index \
                         records (shard {} of {} of save {}, {} bytes): replaced since the base \
                         was opened?",
                        base_prefix.display(),
                        want.shard.shard_id,
                        want.shard.num_shards,
                        want.shard.save_id,
                        want.file_len
                    ),
                });
            }
            staging::commit([(staged, target.as_path())])?;
            staging::sync_parent(&target)?;
            placed
        };
        match placed {
            Placed::Linked => self.stats.linked += 1,
            Placed::Copied => self.stats.copied += 1,
            Placed::Found => {}
        }
        self.stats.files += 1;
        let j = i32::try_from(self.files.len()).expect("at most MAX_SHARDS files");
        self.files.push(ShardRef {
            file_len: want.file_len,
            shard: want.shard,
            reused: true,
        });
        self.by_base_file.insert(k, j);
        Ok(j)
    }

    /// The names referred to.
    pub(super) fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.refs.keys().map(Vec::as_slice)
    }

    /// Number of references.
    pub(super) fn len(&self) -> u64 {
        self.refs.len() as u64
    }

    /// Writes the references file of `shard` (nothing when there are no references), staged
    /// and renamed into place.
    pub(super) fn write_file(&self, shard: ShardOf, sync: bool) -> Result<()> {
        if self.refs.is_empty() {
            return Ok(());
        }
        let path = refs_path(&self.prefix, shard.shard_id, shard.num_shards);
        let mut names: Vec<&Vec<u8>> = self.refs.keys().collect();
        names.sort_unstable();
        let header = FileHeader {
            num_shards: i32::try_from(self.files.len()).expect("at most MAX_SHARDS files"),
            big_endian: false,
            producer: TF_BUNDLE_VERSION,
            min_consumer: 0,
            format_version: 2,
            alignment: 1,
            records_len: 0,
            tensor_count: self.len(),
            records_sorted: false,
            metadata: Default::default(),
            shard_of: Some(shard),
            shards: self.files.clone(),
            slice_count: 0,
            references: 0,
        };
        let (file, staged) = staging::stage_file(&path, ".pdx-tmp")?;
        {
            let mut out = BufWriter::with_capacity(1 << 20, &file);
            let opts = TableOptions {
                block_size: DEFAULT_BLOCK_SIZE,
                restart_interval: DEFAULT_RESTART_INTERVAL,
                compression: Compression::None,
            };
            let mut b = TableBuilder::new(&mut out, 0, opts)?;
            b.add(b"", &header.encode())?;
            let mut value = Vec::new();
            for name in names {
                value.clear();
                self.refs[name].encode(&mut value);
                b.add(name, &value)?;
            }
            b.finish()?;
            out.flush().ctx("writing", staged.path())?;
        }
        if sync {
            file.sync_all().ctx("syncing", staged.path())?;
        }
        drop(file);
        staging::commit([(staged, path.as_path())])?;
        if sync {
            staging::sync_parent(&path)?;
        }
        Ok(())
    }
}

/// Whether the file at `path` is a shard of the length and identity `want` records.
fn same_file(path: &Path, want: &ShardRef) -> bool {
    let mut read = 0;
    read_shard_index(path, &mut read)
        .is_ok_and(|s| s.file_len == want.file_len && s.shard == want.shard)
}
