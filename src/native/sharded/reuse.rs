//! The writer's side of incremental saves (SPEC.md 12.5): a shard that reuses tensors of an
//! earlier sharded checkpoint (its *base*) refers to them instead of writing their bytes.
//!
//! For each reference it keeps the base's index entry and which of the base's data files holds
//! the bytes. The first reference into a data file brings that file beside the new checkpoint's
//! (`PREFIX.reused-<save id>-k-of-n`, through the checkpoint's [`Place`]: a hard link, or a copy
//! where the file system cannot link, in a directory; a server-side copy in a bucket), so the
//! bytes stay there whatever happens to the base afterwards. When the shard finishes, its
//! references go to its references file `PREFIX.refs-k-of-N.pending`, written before the shard
//! itself is finished (whose header counts them, field 25): a merge never sees a shard whose
//! references are missing. The base is a [`ReuseBase`]: a mapped sharded checkpoint
//! ([`Reader`]) or, in a bucket, `remote::RangedSharded`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result, ShardProblem};
use crate::name;
use crate::native::entry::{encode_partitioned, IndexEntry};
use crate::native::header::{FileHeader, ShardOf, ShardRef};
use crate::native::mapped::MappedReader;
use crate::native::region::Region;
use crate::native::sharded::index::read_shard_index_from;
use crate::native::sharded::place::{
    data_suffix, refs_suffix, reused_suffix, Brought, DirPlace, Place,
};
use crate::native::slice_key;
use crate::native::writer::Tensor;
use crate::native::TF_BUNDLE_VERSION;
use crate::record::MAX_RANK;
use crate::table::{Compression, TableBuilder};

/// The base of an incremental save (SPEC.md 12.5): an earlier sharded checkpoint, read as the
/// shard writers need it. A mapped checkpoint ([`Reader`]) is one; so is a checkpoint in a
/// bucket read by ranges (`remote::RangedSharded`).
pub(crate) trait ReuseBase: Send + Sync + std::fmt::Debug {
    /// Where the checkpoint is (its index), for messages.
    fn shown(&self) -> String;

    /// Its index's header (its data files).
    fn header(&self) -> &FileHeader;

    /// Where its data files are. Errors when it is not a sharded checkpoint opened by its
    /// prefix.
    fn place(&self) -> Result<Arc<dyn Place>>;

    /// Its index's entry under `key` (a name or a slice key).
    fn entry(&self, key: &[u8]) -> Result<Option<IndexEntry>>;

    /// The data bytes of the tensor `name` stored whole, its entry checked against its data
    /// file as a read checks it (the file present, of its recorded length and identity, the
    /// range inside its records). `Ok(None)` when absent; [`Error::Sliced`] when stored in
    /// slices.
    fn whole_size(&self, name: &[u8]) -> Result<Option<u64>>;

    /// The data bytes of the stored slice `s`, checked as [`ReuseBase::whole_size`] checks;
    /// `Ok(None)` when there is no such slice.
    fn slice_size(&self, s: SliceAt<'_>) -> Result<Option<u64>>;

    /// The bytes of its data file `k` as this process holds them checked (a mapped data file),
    /// if it does: what an incremental save copies when its place cannot bring the file in
    /// (the file deleted since it was mapped). `Ok(None)` for a base read by ranges.
    fn held_bytes(&self, k: u32) -> Result<Option<&[u8]>>;

    /// [`Reader::holds_unchanged`].
    fn holds_unchanged(&self, name: &[u8], tensor: Tensor<'_>) -> Result<bool>;

    /// [`Reader::holds_unchanged_slice`] of the slice `s`.
    fn holds_unchanged_slice(&self, s: SliceAt<'_>, data: &[u8]) -> Result<bool>;
}

/// A stored slice asked of a base: the region `region` of the tensor `name`, stored in slices
/// of `dtype` and `full_shape`, one of them exactly `region`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SliceAt<'a> {
    pub(crate) name: &'a [u8],
    pub(crate) dtype: DType,
    pub(crate) full_shape: &'a [u64],
    pub(crate) region: &'a Region,
}

impl ReuseBase for MappedReader {
    fn shown(&self) -> String {
        self.path().to_string()
    }

    fn header(&self) -> &FileHeader {
        MappedReader::header(self)
    }

    fn place(&self) -> Result<Arc<dyn Place>> {
        match self.checkpoint_prefix() {
            Some(p) if self.is_sharded() => Ok(Arc::new(DirPlace::new(p))),
            _ => Err(Error::InvalidArgument(format!(
                "{}: the base of an incremental save must be a sharded checkpoint opened by \
                 its prefix (one written by ShardWriter or ShardedSave, of one shard or more)",
                self.path()
            ))),
        }
    }

    fn entry(&self, key: &[u8]) -> Result<Option<IndexEntry>> {
        self.table()
            .get(key, |value, at| IndexEntry::decode(value, at, MAX_RANK))?
            .transpose()
    }

    fn whole_size(&self, name: &[u8]) -> Result<Option<u64>> {
        // The view checks the entry against its data file (and opens that file once).
        Ok(self.get(name)?.map(|v| v.data().len() as u64))
    }

    fn slice_size(&self, s: SliceAt<'_>) -> Result<Option<u64>> {
        let Some((p, i)) = self.stored_slice(s.name, s.dtype, s.full_shape, s.region)? else {
            return Ok(None);
        };
        // The view checks the slice's entry against its data file.
        Ok(Some(self.piece(&p, i)?.data().len() as u64))
    }

    fn held_bytes(&self, k: u32) -> Result<Option<&[u8]>> {
        Ok(Some(&self.shard(k)?.source[..]))
    }

    fn holds_unchanged(&self, name: &[u8], tensor: Tensor<'_>) -> Result<bool> {
        MappedReader::holds_unchanged(self, name, tensor)
    }

    fn holds_unchanged_slice(&self, s: SliceAt<'_>, data: &[u8]) -> Result<bool> {
        MappedReader::holds_unchanged_slice(self, s, data)
    }
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
    /// Of those, files the object store copied into the checkpoint's bucket prefix itself
    /// (server-side: no byte through this process).
    pub server_copied: u64,
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
    base: Arc<dyn ReuseBase>,
    /// Where the base's data files are.
    base_place: Arc<dyn Place>,
    /// Where the new checkpoint's files are.
    place: Arc<dyn Place>,
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
    /// `PREFIX.index`), into the checkpoint whose files are at `place`.
    pub(in crate::native) fn new(base: Arc<dyn ReuseBase>, place: Arc<dyn Place>) -> Result<Reuse> {
        Ok(Reuse {
            base_place: base.place()?,
            base,
            place,
            files: Vec::new(),
            by_base_file: HashMap::new(),
            refs: HashMap::new(),
            sliced: HashMap::new(),
            stats: ReuseStats::default(),
        })
    }

    /// The earlier checkpoint.
    pub(in crate::native) fn base(&self) -> &dyn ReuseBase {
        &*self.base
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
        let Some(size) = self.base.whole_size(name)? else {
            return Err(Error::NotFound {
                name: name::display(name),
                path: self.base.shown(),
            });
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
        let at = SliceAt {
            name,
            dtype,
            full_shape,
            region,
        };
        let Some(size) = self.base.slice_size(at)? else {
            return Err(Error::NotFound {
                name: format!(
                    "{} (a stored slice at {:?} of lengths {:?} of {dtype} {full_shape:?})",
                    name::display(name),
                    region.start,
                    region.len
                ),
                path: self.base.shown(),
            });
        };
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
        let mut entry = self.base.entry(key)?.ok_or_else(|| Error::NotFound {
            name: slice_key::display_key(key),
            path: self.base.shown(),
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

    /// Brings the base's data file `k` beside the new checkpoint's files under its reused name
    /// ([`Place::bring_in`]: a link or a copy in a directory, a server-side copy in a bucket)
    /// and checks the file there is the one the base's index records (length and identity: a
    /// file replaced since the base was opened is refused, and removed from the new
    /// checkpoint's place). Returns its position in `files`.
    fn place(&mut self, k: u32) -> Result<i32> {
        let header = self.base.header();
        let want = *header.shards.get(k as usize).ok_or_else(|| {
            Error::corrupt(
                "index entry",
                0,
                format!(
                    "{}: a tensor in data file {k} of {}",
                    self.base.shown(),
                    header.shards.len()
                ),
            )
        })?;
        let n = u32::try_from(header.shards.len()).expect("at most MAX_SHARDS");
        let from = data_suffix(k, n);
        let target = reused_suffix(&want.shard);
        if !same_file(&*self.place, &target, &want) {
            let brought = match self.place.bring_in(&*self.base_place, &from, &target) {
                Ok(b) => b,
                // The file gone from its place since the base mapped it: the bytes the base
                // checked and maps are copied, not whatever is at the path now.
                Err(e) => match self.base.held_bytes(k)? {
                    Some(bytes) => {
                        self.place.put(&target, bytes, true)?;
                        Brought::Copied(bytes.len() as u64)
                    }
                    None => return Err(e),
                },
            };
            if !same_file(&*self.place, &target, &want) {
                let _ = self.place.delete(&target);
                return Err(Error::Shard {
                    path: self.base_place.shown(&from),
                    problem: ShardProblem::Identity,
                    detail: format!(
                        "data file {k} of the base checkpoint {} is no longer the file its index \
                         records (shard {} of {} of save {}, {} bytes): replaced since the base \
                         was opened?",
                        self.base.shown(),
                        want.shard.shard_id,
                        want.shard.num_shards,
                        want.shard.save_id,
                        want.file_len
                    ),
                });
            }
            match brought {
                Brought::Linked => self.stats.linked += 1,
                Brought::Copied(bytes) => {
                    self.stats.copied += 1;
                    self.stats.copied_bytes += bytes;
                }
                Brought::ServerCopied => self.stats.server_copied += 1,
            }
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

    /// Writes the references file of `shard` (nothing when there are no references), whole
    /// or not at all ([`Place::put`]).
    pub(in crate::native) fn write_file(&self, shard: ShardOf, sync: bool) -> Result<()> {
        if self.refs.is_empty() {
            return Ok(());
        }
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
        let mut bytes = Vec::new();
        let opts = crate::native::writer::default_table_options(Compression::None, 2);
        let mut b = TableBuilder::new(&mut bytes, 0, opts)?;
        b.add(b"", &header.encode())?;
        for (key, value) in &entries {
            b.add(key, value)?;
        }
        b.finish()?;
        self.place
            .put(&refs_suffix(shard.shard_id, shard.num_shards), &bytes, sync)
    }
}

/// Whether the file `PREFIX<suffix>` at `place` is a shard of the length and identity `want`
/// records.
fn same_file(place: &dyn Place, suffix: &str, want: &ShardRef) -> bool {
    let mut read = 0;
    place.open(suffix).is_ok_and(|src| {
        read_shard_index_from(
            &*src,
            std::path::Path::new(&place.shown(suffix)),
            &mut read,
            64 << 10,
        )
        .is_ok_and(|s| s.file_len == want.file_len && s.shard == want.shard)
    })
}
