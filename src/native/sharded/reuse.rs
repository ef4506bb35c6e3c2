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

use crate::dtype::DType;
use crate::error::{path_str, Error, IoContext, Result, ShardProblem};
use crate::name;
use crate::native::entry::{encode_partitioned, IndexEntry};
use crate::native::header::{FileHeader, ShardOf, ShardRef};
use crate::native::reader::Reader;
use crate::native::region::Region;
use crate::native::sharded::index::read_shard_index;
use crate::native::sharded::table::{data_path, refs_path, reused_path};
use crate::native::slice_key;
use crate::native::staging;
use crate::native::TF_BUNDLE_VERSION;
use crate::record::MAX_RANK;
use crate::table::{Compression, TableBuilder};

/// How a shard of an incremental save got an earlier data file into its checkpoint's directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::native) enum Placed {
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

/// The slices of one tensor that a shard reuses.
#[derive(Debug)]
pub(in crate::native) struct ReusedSlices {
    pub(in crate::native) dtype: DType,
    pub(in crate::native) full_shape: Vec<u64>,
    pub(in crate::native) regions: Vec<Region>,
}

/// The references of one shard writer.
#[derive(Debug)]
pub(in crate::native) struct Reuse {
    base: Arc<Reader>,
    /// The new checkpoint's prefix.
    prefix: PathBuf,
    /// The earlier data files referred to, in order of first use: an entry's `shard_id` in the
    /// references file is a position here.
    files: Vec<ShardRef>,
    /// Position in `files` of the base's data file k.
    by_base_file: HashMap<u32, i32>,
    /// Index key (a name, or a slice key) → entry (with `shard_id` a position in `files`).
    refs: HashMap<Vec<u8>, IndexEntry>,
    /// The tensors of which slices are reused, by name.
    sliced: HashMap<Vec<u8>, ReusedSlices>,
    pub(in crate::native) stats: ReuseStats,
}

impl Reuse {
    /// Reuse from `base`, which must be a sharded checkpoint opened by its prefix (or
    /// `PREFIX.index`), into the checkpoint at `prefix`.
    pub(in crate::native) fn new(base: Arc<Reader>, prefix: &Path) -> Result<Reuse> {
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
            sliced: HashMap::new(),
            stats: ReuseStats::default(),
        })
    }

    /// The earlier checkpoint.
    pub(in crate::native) fn base(&self) -> &Reader {
        &self.base
    }

    /// Whether `name` is referred to.
    pub(in crate::native) fn holds(&self, name: &[u8]) -> bool {
        self.refs.contains_key(name)
    }

    /// Refers to the base's tensor `name` (stored whole there) instead of writing it: checks
    /// its entry as a read would (the data file present, of its recorded length and identity,
    /// the range inside its records), and links the data file into the new checkpoint's
    /// directory the first time. The caller checked that its own writer does not hold `name`.
    pub(in crate::native) fn refer(&mut self, name: &[u8]) -> Result<()> {
        if self.refs.contains_key(name) || self.sliced.contains_key(name) {
            return Err(Error::DuplicateName {
                name: name::display(name),
            });
        }
        // The view checks the entry against its data file (and opens that file once).
        let size = match self.base.get(name)? {
            Some(v) => v.data().len() as u64,
            None => {
                return Err(Error::NotFound {
                    name: name::display(name),
                    path: self.base.path().to_string(),
                })
            }
        };
        self.refer_key(name, size)
    }

    /// Refers to the slice `region` of the base's tensor `name`, which the base stores in
    /// slices of `dtype` and `full_shape`, one of them exactly `region`. The caller checked
    /// that its own writer holds no slice of `name` overlapping `region`, nor `name` whole.
    pub(in crate::native) fn refer_slice(
        &mut self,
        name: &[u8],
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<()> {
        if self.refs.contains_key(name) {
            return Err(Error::DuplicateName {
                name: name::display(name),
            });
        }
        if let Some(p) = self.sliced.get(name) {
            if p.dtype != dtype || p.full_shape.as_slice() != full_shape {
                return Err(Error::InvalidTensor {
                    name: name::display(name),
                    detail: format!(
                        "a reused slice of {dtype} {full_shape:?}, but slices reused before are \
                         of {} {:?}",
                        p.dtype,
                        p.full_shape.as_slice()
                    ),
                });
            }
            if p.regions.iter().any(|r| r.overlaps(region)) {
                return Err(Error::InvalidTensor {
                    name: name::display(name),
                    detail: format!(
                        "slice at {:?} of lengths {:?} overlaps a slice reused before",
                        region.start, region.len
                    ),
                });
            }
        }
        let Some((p, i)) = self.base.stored_slice(name, dtype, full_shape, region)? else {
            return Err(Error::NotFound {
                name: format!(
                    "{} (a stored slice at {:?} of lengths {:?} of {dtype} {full_shape:?})",
                    name::display(name),
                    region.start,
                    region.len
                ),
                path: self.base.path().to_string(),
            });
        };
        // The view checks the slice's entry against its data file.
        let size = self.base.piece(&p, i)?.data().len() as u64;
        let key = slice_key::encode(name, &region.extents(full_shape));
        self.refer_key(&key, size)?;
        self.sliced
            .entry(name.to_vec())
            .or_insert_with(|| ReusedSlices {
                dtype,
                full_shape: full_shape.to_vec(),
                regions: Vec::new(),
            })
            .regions
            .push(region.clone());
        Ok(())
    }

    /// The regions of `name` reused so far (for the writer's overlap checks).
    pub(in crate::native) fn slices_of(&self, name: &[u8]) -> Option<&ReusedSlices> {
        self.sliced.get(name)
    }

    /// Refers to the base's entry under index key `key` (a name or a slice key), whose data
    /// is `size` bytes.
    fn refer_key(&mut self, key: &[u8], size: u64) -> Result<()> {
        let mut entry = self
            .base
            .table()
            .get(key, |value, at| IndexEntry::decode(value, at, MAX_RANK))?
            .transpose()?
            .ok_or_else(|| Error::NotFound {
                name: slice_key::display_key(key),
                path: self.base.path().to_string(),
            })?;
        let k = u32::try_from(entry.shard_id).map_err(|_| {
            Error::corrupt(
                "index entry",
                0,
                format!(
                    "tensor {}: shard_id {}",
                    slice_key::display_key(key),
                    entry.shard_id
                ),
            )
        })?;
        let j = match self.by_base_file.get(&k) {
            Some(&j) => j,
            None => self.place(k)?,
        };
        entry.shard_id = j;
        self.refs.insert(key.to_vec(), entry);
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

    /// The names of the whole tensors referred to, and of the tensors of which slices are.
    pub(in crate::native) fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.refs
            .keys()
            .filter(|k| k.first() != Some(&0))
            .chain(self.sliced.keys())
            .map(Vec::as_slice)
    }

    /// Number of entries of the references file: each reference, and each tensor of which
    /// slices are referred to.
    pub(in crate::native) fn len(&self) -> u64 {
        (self.refs.len() + self.sliced.len()) as u64
    }

    /// Writes the references file of `shard` (nothing when there are no references), staged
    /// and renamed into place.
    pub(in crate::native) fn write_file(&self, shard: ShardOf, sync: bool) -> Result<()> {
        if self.refs.is_empty() {
            return Ok(());
        }
        let path = refs_path(&self.prefix, shard.shard_id, shard.num_shards);
        // Each reference, and the entry of each tensor of which slices are reused (listing
        // them), in key order.
        let mut entries: Vec<(&[u8], Vec<u8>)> = Vec::with_capacity(self.refs.len());
        for (key, e) in &self.refs {
            let mut v = Vec::new();
            e.encode(&mut v);
            entries.push((key, v));
        }
        for (name, p) in &self.sliced {
            let extents: Vec<_> = p.regions.iter().map(|r| r.extents(&p.full_shape)).collect();
            let mut v = Vec::new();
            encode_partitioned(&mut v, p.dtype, &p.full_shape, &extents);
            entries.push((name, v));
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let slices = self.refs.keys().filter(|k| k.first() == Some(&0)).count() as u64;
        let header = FileHeader {
            num_shards: i32::try_from(self.files.len()).expect("at most MAX_SHARDS files"),
            big_endian: false,
            producer: TF_BUNDLE_VERSION,
            min_consumer: 0,
            format_version: 2,
            alignment: 1,
            records_len: 0,
            tensor_count: self.len() - slices,
            records_sorted: false,
            metadata: Default::default(),
            shard_of: Some(shard),
            shards: self.files.clone(),
            slice_count: slices,
            references: 0,
        };
        let (file, staged) = staging::stage_file(&path, ".pdx-tmp")?;
        {
            let mut out = BufWriter::with_capacity(1 << 20, &file);
            let opts = crate::native::writer::default_table_options(Compression::None);
            let mut b = TableBuilder::new(&mut out, 0, opts)?;
            b.add(b"", &header.encode())?;
            for (key, value) in &entries {
                b.add(key, value)?;
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
