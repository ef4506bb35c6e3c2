//! A sharded checkpoint (SPEC.md 12) in an object store, read by ranges: `PREFIX.index` is a
//! native file without records, read as `RangedReader` reads any native file (open: its tail,
//! and the header's block unless the tail holds it); each data object `PREFIX.data-k-of-N` is
//! opened the first time a tensor in it is read, and checked then as SPEC.md 12.4 requires
//! (present, exactly the recorded length, a native file, exactly the recorded identity in its
//! field 22); every entry's data range is checked against that object's records region, and
//! its bytes against their CRC32C. A `get` then costs the tensor's index block in the index
//! object (unless cached) and its bytes in the data object.

use std::sync::{Arc, OnceLock};

use crate::error::{Error, RemoteProblem, Result, ShardProblem};
use crate::native::entry::Partition;
use crate::native::iter::{Found, Walk};
use crate::native::ranged::entry_source::{found_in, get_region, get_whole, piece_in, EntrySource};
use crate::native::ranged::range::{RangeRead, RequestStats};
use crate::native::ranged::reader::{EntryInfo, RangedReader, RemoteOptions, RemoteTensor};
use crate::native::LoadOptions;
use crate::native::{
    check_against_shards, check_shard_identity, check_shard_len, FileHeader, IndexEntry, Region,
    SliceData, TensorView, VerifyReport,
};
use crate::native::{data_suffix, Place, INDEX_SUFFIX};

/// A sharded checkpoint read by ranges: its index object, and its data objects opened on first
/// use.
pub struct RangedSharded {
    index: RangedReader,
    /// `PREFIX` (a URL or path), for messages.
    prefix: String,
    /// Where its files are: its data objects are opened there, and an incremental save
    /// reusing it copies them from there.
    pub(crate) place: Arc<dyn Place>,
    files: Vec<OnceLock<RangedReader>>,
    opts: RemoteOptions,
}

impl std::fmt::Debug for RangedSharded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangedSharded")
            .field("prefix", &self.prefix)
            .field("data_objects", &self.files.len())
            .finish_non_exhaustive()
    }
}

impl RangedSharded {
    /// Opens the sharded checkpoint whose index object is `index` (`PREFIX.index`; shown as
    /// `prefix` followed by `.index`), whose data files are in `place` (a directory, read with
    /// `pread`; a bucket prefix, read by ranged GETs). Reads only the index (at most two
    /// requests); the data files are opened through the place when first read.
    ///
    /// Errors: as `RangedReader::open`; [`Error::InvalidArgument`] when the object is a
    /// native file, not a sharded checkpoint's index.
    pub fn open(
        index: Arc<dyn RangeRead>,
        prefix: impl Into<String>,
        place: Arc<dyn Place>,
        opts: RemoteOptions,
    ) -> Result<RangedSharded> {
        let index = RangedReader::open_native(index, opts.clone())?;
        if index.header().shards.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: a native file, not the index of a sharded checkpoint",
                index.location()
            )));
        }
        let n = index.header().shards.len();
        Ok(RangedSharded {
            index,
            prefix: prefix.into(),
            place,
            files: (0..n).map(|_| OnceLock::new()).collect(),
            opts,
        })
    }

    /// The index's header: the number of data objects, their lengths and identities, metadata.
    pub fn header(&self) -> &FileHeader {
        self.index.header()
    }

    /// The checkpoint's prefix (`PREFIX` of `PREFIX.index`).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The index object's reader.
    pub fn index(&self) -> &RangedReader {
        &self.index
    }

    /// Number of data objects.
    pub fn data_objects(&self) -> u32 {
        u32::try_from(self.files.len()).expect("at most MAX_SHARDS, checked at open")
    }

    /// Where data object `k` is (`PREFIX.data-k-of-N`).
    pub fn data_location(&self, k: u32) -> String {
        format!("{}{}", self.prefix, data_suffix(k, self.data_objects()))
    }

    /// Data object `k`, opened and checked against the index the first time it is asked for
    /// (SPEC.md 12.4): present, of exactly the length and identity (save, shard number, number
    /// of shards) the index records, a native file of its own. Opening costs one request (two
    /// when its index block is larger than the tail read).
    ///
    /// Errors: [`Error::Shard`] naming the object's location: [`ShardProblem::Missing`],
    /// [`ShardProblem::Length`], [`ShardProblem::Identity`] (a data object of another save or
    /// another shard, such as one a later save at the same prefix wrote over it).
    pub fn shard(&self, k: u32) -> Result<&RangedReader> {
        let n = self.data_objects();
        let cell = self.files.get(k as usize).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "data object {k} does not exist ({} has {n})",
                self.prefix
            ))
        })?;
        if let Some(r) = cell.get() {
            return Ok(r);
        }
        let want = self.header().shards[k as usize];
        let shown = self.data_location(k);
        let src = match self.place.open(&data_suffix(k, n)) {
            Ok(s) => s,
            Err(
                Error::Remote {
                    problem: RemoteProblem::NotFound,
                    detail,
                    ..
                }
                | Error::Shard {
                    problem: ShardProblem::Missing,
                    detail,
                    ..
                },
            ) => {
                return Err(Error::Shard {
                    path: shown,
                    problem: ShardProblem::Missing,
                    detail: format!(
                        "data object {k} of {n} of checkpoint {} is missing ({detail})",
                        self.prefix
                    ),
                })
            }
            Err(e) => return Err(e),
        };
        let ctx = format!("data object {k} of checkpoint {}", self.prefix);
        let index = self.index.location();
        check_shard_len(&want, src.len(), &shown, &ctx, index)?;
        let r = RangedReader::open_native(src, self.opts.clone()).map_err(|e| e.context(&ctx))?;
        check_shard_identity(r.header(), &want, &shown, &ctx, index)?;
        Ok(cell.get_or_init(|| r))
    }

    /// Every tensor of the index in name order, from `start` on (slice keys left out), read
    /// from the index object alone.
    pub fn list_from(&self, start: &[u8]) -> Result<Vec<EntryInfo>> {
        self.index.list_from(start)
    }

    /// What the index says of the tensor `name`, from its own index block (one request at
    /// most, whatever the size of the index), as `RangedReader::entry_of`.
    pub fn entry_of(&self, name: &[u8]) -> Result<Option<EntryInfo>> {
        self.index.entry_of(name)
    }

    /// The LoD of tensor `name` (stored whole), from its record's header in its data object
    /// (opened if it was not yet), as `RangedReader::lod` reads it. `Ok(None)` if absent.
    pub fn lod(&self, name: &[u8]) -> Result<Option<Vec<Vec<u64>>>> {
        let Some((e, _, at)) = self.index.lookup(name)? else {
            return Ok(None);
        };
        let k = self.object_of(name, &e, at)?;
        self.shard(k)?.lod_of(name, &e, at).map(Some)
    }

    /// Checks everything a mapped sharded checkpoint's [`crate::Reader::verify`] checks, with
    /// the same code: the index's blocks; every data object (present, length, identity, and
    /// everything `RangedReader::verify` checks in a native file, its records fetched as
    /// `opts` says); that the index lists exactly the data objects' entries; and the header's
    /// counts.
    pub fn verify(&self, opts: &LoadOptions) -> Result<VerifyReport> {
        let mut report = VerifyReport {
            blocks: self.index.verify_index()?,
            ..VerifyReport::default()
        };
        let n = self.data_objects();
        // Every object is opened first (in order, so the first missing one is reported).
        for k in 0..n {
            self.shard(k)?;
        }
        for k in 0..n {
            let r = self.shard(k)?.verify(opts)?;
            report.blocks += r.blocks;
            report.records += r.records;
            report.data_bytes += r.data_bytes;
        }
        let held: Vec<_> = (0..n)
            .map(|k| self.shard(k)?.index_bytes())
            .collect::<Result<_>>()?;
        let tables: Vec<_> = held
            .iter()
            .enumerate()
            .map(|(k, (bytes, base))| {
                self.shard(u32::try_from(k).unwrap_or(u32::MAX))
                    .map(|r| r.table_over(bytes, *base))
            })
            .collect::<Result<_>>()?;
        let (bytes, base) = self.index.index_bytes()?;
        let shard_path = |k: usize| self.data_location(u32::try_from(k).unwrap_or(u32::MAX));
        let header = self.header();
        let (tensors, slices) = check_against_shards(
            &self.index.table_over(&bytes, base),
            header,
            &self.prefix,
            &tables,
            &shard_path,
        )?;
        if tensors != header.tensor_count || slices != header.slice_count {
            return Err(Error::corrupt(
                "header entry",
                0,
                format!(
                    "{}: the header counts {} tensors and {} slices, the index holds {tensors} \
                     and {slices}",
                    self.prefix, header.tensor_count, header.slice_count
                ),
            ));
        }
        report.tensors = tensors;
        report.slices = slices;
        Ok(report)
    }

    /// The tensor `name` stored whole (`Ok(None)` if absent): its index block (unless cached),
    /// its data object opened if it was not yet, and its bytes, checked against its CRC32C.
    ///
    /// Errors: as `RangedReader::get` and [`RangedSharded::shard`].
    pub fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<TensorView<'_>>> {
        get_whole(self, name.as_ref())
    }

    /// The region `region` of tensor `name`, stored whole or in slices (in one or several data
    /// objects): each stored tensor or slice holding part of it read whole and checked.
    pub fn get_slice(
        &self,
        name: impl AsRef<[u8]>,
        region: &Region,
    ) -> Result<Option<SliceData<'static>>> {
        get_region(self, name.as_ref(), region)
    }

    /// The data object of entry `e` (of `key`, in the block at `at`), its number checked.
    pub(crate) fn object_of(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<u32> {
        let n = self.data_objects();
        u32::try_from(e.shard_id)
            .ok()
            .filter(|&k| k < n)
            .ok_or_else(|| {
                Error::corrupt(
                    "index entry",
                    at,
                    format!(
                        "{}: tensor {}: shard_id {} is not below the number of data objects, {n}",
                        self.prefix(),
                        crate::native::slice_key::display_key(key),
                        e.shard_id
                    ),
                )
            })
    }

    /// The tensors `names` (each once), every name looked up in the index first
    /// ([`Error::NotFound`], [`Error::Sliced`] before any data is read), then each data
    /// object's fetched in parallel parts as `opts` says: returned grouped by data object, in
    /// its order.
    pub(crate) fn load_named(
        &self,
        mut names: Vec<Vec<u8>>,
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, RemoteTensor)>> {
        names.sort_unstable();
        names.dedup();
        let mut by_object: std::collections::BTreeMap<u32, Vec<(Vec<u8>, IndexEntry, u64)>> =
            std::collections::BTreeMap::new();
        for n in names {
            let Some((e, _, at)) = self.index.lookup(&n)? else {
                return Err(Error::NotFound {
                    name: crate::name::display(&n),
                    path: self.index.location().to_string(),
                });
            };
            if e.num_slices != 0 {
                return Err(Error::Sliced {
                    name: crate::name::display(&n),
                    path: self.index.location().to_string(),
                    slices: u64::from(e.num_slices),
                });
            }
            let k = self.object_of(&n, &e, at)?;
            by_object.entry(k).or_default().push((n, e, at));
        }
        let mut out = Vec::new();
        for (k, items) in by_object {
            out.extend(self.shard(k)?.load_entries(&items, opts)?);
        }
        Ok(out)
    }

    /// Requests made, bytes received and retries so far: the index object's and every opened
    /// data object's.
    pub(crate) fn stats(&self) -> RequestStats {
        let mut all = self.index.stats();
        for r in self.files.iter().filter_map(|c| c.get()) {
            let s = r.stats();
            all.requests += s.requests;
            all.bytes += s.bytes;
            all.retries += s.retries;
        }
        all
    }
}

impl EntrySource for RangedSharded {
    fn place(&self) -> &str {
        self.index.location()
    }

    fn is_v2(&self) -> bool {
        true
    }

    fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>> {
        self.index.lookup(key)
    }

    fn index_table(&self) -> crate::table::Table<'_> {
        self.index.table()
    }

    fn data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor> {
        let k = self.object_of(key, e, at)?;
        self.shard(k)?.read_data(key, e, at)
    }

    fn view(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<TensorView<'_>> {
        let k = self.object_of(key, e, at)?;
        self.shard(k)?.read_view(key, e, at)
    }

    fn data_file(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<(String, u64)> {
        let k = self.object_of(key, e, at)?;
        let len = self.shard(k)?.check_entry(key, e, at)?;
        Ok((self.data_location(k), len))
    }
}

/// `(PREFIX, PREFIX.index)` of a sharded checkpoint named by its prefix or its index.
pub fn sharded_names(url: &str) -> (String, String) {
    match url.strip_suffix(INDEX_SUFFIX).filter(|p| !p.ends_with('/')) {
        Some(prefix) => (prefix.to_string(), url.to_string()),
        None => (url.to_string(), format!("{url}{INDEX_SUFFIX}")),
    }
}

impl Walk for RangedSharded {
    fn walk_table(&self) -> crate::table::Table<'_> {
        self.index.table()
    }

    fn walk_is_v2(&self) -> bool {
        true
    }

    fn found<'r>(&'r self, key: &[u8], value: &[u8], at: u64) -> Result<Found<'r>> {
        found_in(self, key, value, at)
    }

    fn piece<'r>(&'r self, p: &Partition, i: usize) -> Result<TensorView<'r>> {
        piece_in(self, p, i)
    }
}
