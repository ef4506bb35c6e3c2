//! [`Reader`]: the one reader of native paramdex files and sharded checkpoints, wherever their
//! bytes are (issue 38). A file is mapped ([`Reader::open`]), held in memory
//! ([`Reader::from_bytes`]) or read by byte ranges through any [`RangeRead`] (a file by
//! `pread`, an object by ranged GETs: [`Reader::from_range_read`]); a sharded checkpoint's data files
//! open through its place. Every way answers with the same types: a lookup gives a
//! [`TensorView`] (lending a mapped file's bytes, holding a fetched record's), a region gives
//! [`SliceData`], a load gives [`OwnedTensor`]s, a walk gives an [`Iter`], verify gives a
//! [`VerifyReport`].
//!
//! The engines behind it are `mapped.rs` (a source that lends every byte) and `ranged/` (a
//! source that copies what it reads, planning parallel fetches); what they share (the open,
//! the table, the checks of an entry, the record header, the walk, verify's tally) is written
//! once in `native`.

use std::borrow::Cow;
use std::ops::{Bound, Range};
use std::path::Path;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::native::entry::IndexEntry;
use crate::native::iter::{prefix_successor, Iter};
use crate::native::load::{LoadOptions, OwnedTensor};
use crate::native::mapped::{MappedReader, ReadOptions};
use crate::native::ranged::{
    get_whole_data, locate, locate_slices, DataAt, EntryInfo, RangeRead, RangedReader,
    RangedSharded, RemoteOptions, RequestStats,
};
use crate::native::region::Region;
use crate::native::sharded::place::Place;
use crate::native::sharded::reuse::{ReuseBase, SliceAt};
use crate::native::verify::{VerifyOptions, VerifyReport};
use crate::native::view::{SliceData, TensorView};
use crate::native::writer::Tensor;
use crate::native::FileHeader;
use crate::table::TableFigures;

/// An open native paramdex file, or sharded checkpoint: mapped, in memory, or read by byte
/// ranges (a file by `pread`, an object in a bucket). `Send + Sync`: share it between threads
/// by reference or `Arc`.
///
/// Every method works for every way of reading; where the bytes are decides only its cost (a
/// mapped file's lookups read memory, a ranged one's make requests, [`Reader::stats`]) and
/// whether it can lend its bytes ([`Reader::as_bytes`]).
#[derive(Debug)]
pub struct Reader {
    inner: Inner,
}

/// Where data file `k` of a sharded checkpoint is ([`Reader::data_files`]).
pub(crate) type DataFileAt<'r> = Box<dyn Fn(u32) -> String + 'r>;

/// How a [`Reader`] reads its bytes.
#[derive(Debug)]
enum Inner {
    /// A mapped file, or bytes in memory: every byte lent.
    Mapped(MappedReader),
    /// A native file read by ranges.
    Ranged(RangedReader),
    /// A sharded checkpoint read by ranges: its index, and its data files through its place.
    Sharded(RangedSharded),
}

impl Reader {
    /// Opens a native file, or a sharded checkpoint by its prefix or its `PREFIX.index`: maps
    /// the file and reads its footer, index block and header. The data files of a sharded
    /// checkpoint are opened, and checked against its index, when first read.
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        Self::open_with(path, ReadOptions::default())
    }

    /// Like [`Reader::open`] with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: ReadOptions) -> Result<Reader> {
        MappedReader::open_with(path, opts).map(Reader::from_mapped)
    }

    /// A reader over bytes in memory (tests, fuzzing, data not in a file). The index of a
    /// sharded checkpoint opens this way, but its tensors cannot be read (its data files are
    /// found by its path).
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Result<Reader> {
        Self::from_bytes_with(bytes, ReadOptions::default())
    }

    /// Like [`Reader::from_bytes`] with explicit options.
    pub fn from_bytes_with(bytes: impl Into<Arc<[u8]>>, opts: ReadOptions) -> Result<Reader> {
        MappedReader::from_bytes_with(bytes, opts).map(Reader::from_mapped)
    }

    /// Opens the native file `src` by byte ranges (SPEC.md 8.4): reads its tail (footer and,
    /// usually, the index block), then the header's block if the tail does not hold it, and
    /// checks them as [`Reader::open`] does. A lookup then costs one read for the tensor's
    /// index block (unless cached) and one for its record; every tensor read so is checked
    /// against its CRC32C.
    ///
    /// Errors: those of [`Reader::open`]; [`Error::Unsupported`] for a sharded checkpoint's
    /// index, whose data files are found by its place (`remote::open_sharded`).
    pub fn from_range_read(src: Arc<dyn RangeRead>, opts: RemoteOptions) -> Result<Reader> {
        RangedReader::open(src, opts).map(|r| Reader {
            inner: Inner::Ranged(r),
        })
    }

    /// Opens the sharded checkpoint whose index is `index` (`PREFIX.index`, shown as `prefix`
    /// followed by `.index`) by byte ranges, its data files through `place` (a
    /// [`DirPlace`](crate::place::DirPlace) reads them by `pread`; a bucket by ranged GETs)
    /// when a tensor in them is first read, each checked against the index then (SPEC.md
    /// 12.4). `remote::open_sharded` opens one at a URL.
    ///
    /// Errors: those of [`Reader::from_range_read`]; [`Error::InvalidArgument`] when `index` is a
    /// native file, not a sharded checkpoint's index.
    pub fn from_place(
        index: Arc<dyn RangeRead>,
        prefix: impl Into<String>,
        place: Arc<dyn Place>,
        opts: RemoteOptions,
    ) -> Result<Reader> {
        RangedSharded::open(index, prefix, place, opts).map(|r| Reader {
            inner: Inner::Sharded(r),
        })
    }

    pub(crate) fn from_mapped(r: MappedReader) -> Reader {
        Reader {
            inner: Inner::Mapped(r),
        }
    }

    /// The mapped engine, when the reader maps its file (or holds its bytes).
    pub(crate) fn as_mapped(&self) -> Option<&MappedReader> {
        match &self.inner {
            Inner::Mapped(r) => Some(r),
            _ => None,
        }
    }

    /// The file's header entry (a sharded checkpoint's: its index's).
    pub fn header(&self) -> &FileHeader {
        match &self.inner {
            Inner::Mapped(r) => r.header(),
            Inner::Ranged(r) => r.header(),
            Inner::Sharded(r) => r.header(),
        }
    }

    /// Where the reader reads: the path it was opened on (`<memory>` for bytes;
    /// `PREFIX.index` for a sharded checkpoint), or the object's location (a URL).
    pub fn path(&self) -> &str {
        match &self.inner {
            Inner::Mapped(r) => r.path(),
            Inner::Ranged(r) => r.location(),
            Inner::Sharded(r) => r.index().location(),
        }
    }

    /// Number of tensors, from the header (O(1)): whole tensors, and each tensor stored in
    /// slices once.
    pub fn len(&self) -> u64 {
        self.header().tensor_count
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.header().tensor_count == 0
    }

    /// Whether this is a sharded checkpoint's index (SPEC.md 12), whose tensors are in its
    /// data files.
    pub fn is_sharded(&self) -> bool {
        !self.header().shards.is_empty()
    }

    /// The prefix of the sharded checkpoint a mapped reader was opened on (`PREFIX` of
    /// `PREFIX.index`); `None` for a single file, bytes in memory, or a reader by ranges.
    pub fn checkpoint_prefix(&self) -> Option<&Path> {
        self.as_mapped().and_then(MappedReader::checkpoint_prefix)
    }

    /// The whole file, when the reader lends its bytes (mapped or in memory; for a sharded
    /// checkpoint, its `PREFIX.index`); `None` for a reader by ranges, which holds only what
    /// it read.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        self.as_mapped().map(MappedReader::as_bytes)
    }

    /// The records region (a Paddle combined-params stream, in name order when
    /// `header().records_sorted`), when the reader lends its bytes; `None` for a reader by
    /// ranges. Empty for a sharded checkpoint's index, whose records are in its data files.
    pub fn records(&self) -> Option<&[u8]> {
        self.as_mapped().map(MappedReader::records)
    }

    /// Number of index data blocks.
    pub fn data_blocks(&self) -> usize {
        match &self.inner {
            Inner::Mapped(r) => r.data_blocks(),
            Inner::Ranged(r) => r.data_blocks(),
            Inner::Sharded(r) => r.index().data_blocks(),
        }
    }

    /// Bytes of the index table (data blocks, metaindex, index block, footer).
    pub fn index_len(&self) -> u64 {
        match &self.inner {
            Inner::Mapped(r) => r.index_len(),
            Inner::Ranged(r) => r.index_len(),
            Inner::Sharded(r) => r.index().index_len(),
        }
    }

    /// Looks a tensor up by name. `Ok(None)` if absent; an error if its entry is corrupt, and
    /// [`Error::Sliced`] if it is stored in slices (read it with [`Reader::get_slice`]).
    ///
    /// A mapped file's view lends the mapped bytes (its data CRC32C checked only with
    /// [`ReadOptions::verify_tensors`]); a view read by ranges holds its record, fetched in one
    /// read (parallel ones for a tensor larger than [`LoadOptions::part_size`]) and checked
    /// against its CRC32C: bytes from a network are never returned unchecked.
    #[inline]
    pub fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<TensorView<'_>>> {
        match &self.inner {
            Inner::Mapped(r) => r.get(name),
            Inner::Ranged(r) => r.get(name),
            Inner::Sharded(r) => r.get(name),
        }
    }

    /// Like [`Reader::get`], but a missing tensor is [`Error::NotFound`].
    pub fn tensor(&self, name: impl AsRef<[u8]>) -> Result<TensorView<'_>> {
        let name = name.as_ref();
        self.get(name)?.ok_or_else(|| Error::NotFound {
            name: crate::name::display(name),
            path: self.path().to_string(),
        })
    }

    /// The bytes value `name` (SPEC.md 6.1), checked (its checksum and encoding): lent by a
    /// mapped file, owned when read by ranges. `Ok(None)` if there is no entry of that name;
    /// [`Error::DTypeMismatch`] when `name` is a tensor, not a bytes value.
    pub fn get_bytes(&self, name: impl AsRef<[u8]>) -> Result<Option<Cow<'_, [u8]>>> {
        if let Some(r) = self.as_mapped() {
            return r.get_bytes(name).map(|b| b.map(Cow::Borrowed));
        }
        match self.get(name)? {
            None => Ok(None),
            Some(v) => v.bytes_value().map(|b| Some(Cow::Owned(b.to_vec()))),
        }
    }

    /// Reads the region `region` of tensor `name`, whether stored whole or in slices (a
    /// checkpoint saved by 8 ranks loads into 3 this way). A mapped file reads only the bytes
    /// inside the region (the result borrows the file when one stored tensor or slice holds
    /// the region as one contiguous run, else it is one strided copy aligned for every
    /// element type); by ranges, each stored tensor or slice holding part of it is read whole
    /// and checked against its CRC32C.
    ///
    /// A mapped file's data checksums are not checked here (unless
    /// [`ReadOptions::verify_tensors`] is set); [`Reader::verify`] checks them all.
    ///
    /// `Ok(None)` if there is no such tensor. Errors: [`Error::InvalidArgument`] for a region
    /// of another rank or outside the shape; [`Error::Slices`] when some of the region is in
    /// no slice (a partial tensor).
    pub fn get_slice(
        &self,
        name: impl AsRef<[u8]>,
        region: &Region,
    ) -> Result<Option<SliceData<'_>>> {
        match &self.inner {
            Inner::Mapped(r) => r.get_slice(name, region),
            Inner::Ranged(r) => r.get_slice(name, region),
            Inner::Sharded(r) => r.get_slice(name, region),
        }
    }

    /// Every stored tensor in bytewise name order: whole tensors, and each slice of a tensor
    /// stored in slices (its view's [`TensorView::slice_start`] says where it sits), at its
    /// tensor's place in the order. By ranges, each tensor's record is read as it is reached.
    pub fn iter(&self) -> Iter<'_> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// Stored tensors whose names start with `prefix`, in name order (see [`Reader::iter`]).
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter<'_> {
        let p = prefix.as_ref().to_vec();
        let end = prefix_successor(&p).map_or(Bound::Unbounded, Bound::Excluded);
        self.range(Bound::Included(p), end)
    }

    /// Stored tensors whose names fall in the given bounds, in name order (see
    /// [`Reader::iter`]).
    pub fn range(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Iter<'_> {
        match &self.inner {
            Inner::Mapped(r) => Iter::new(r, start, end),
            Inner::Ranged(r) => Iter::new(r, start, end),
            Inner::Sharded(r) => Iter::new(r, start, end),
        }
    }

    /// What the index says of every tensor from `start` on, in name order (a tensor stored in
    /// slices once), without reading any data: by ranges, one read for the index data blocks
    /// not read yet.
    pub fn list_from(&self, start: &[u8]) -> Result<Vec<EntryInfo>> {
        match &self.inner {
            Inner::Mapped(r) => r
                .listing(start, None)
                .map(|l| l.map(crate::native::ranged::entry_info))
                .collect(),
            Inner::Ranged(r) => r.list_from(start),
            Inner::Sharded(r) => r.list_from(start),
        }
    }

    /// What the index says of tensor `name` (its entry checked as a listing checks it), from
    /// its own index block; `Ok(None)` if absent.
    pub fn entry_of(&self, name: &[u8]) -> Result<Option<EntryInfo>> {
        match &self.inner {
            Inner::Mapped(r) => r.listing(name, None).next().transpose().map(|l| {
                l.filter(|l| l.name == name)
                    .map(crate::native::ranged::entry_info)
            }),
            Inner::Ranged(r) => r.entry_of(name),
            Inner::Sharded(r) => r.entry_of(name),
        }
    }

    /// The LoD of tensor `name` (stored whole), from its record's header (its checksum
    /// checked, not the data's); `Ok(None)` if absent.
    pub fn lod(&self, name: &[u8]) -> Result<Option<Vec<Vec<u64>>>> {
        match &self.inner {
            Inner::Mapped(r) => match r.get(name)? {
                None => Ok(None),
                Some(v) => v.lod().map(|l| Some(l.to_vec())),
            },
            Inner::Ranged(r) => r.lod(name),
            Inner::Sharded(r) => r.lod(name),
        }
    }

    /// [`Reader::verify_with`] with the default options.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(VerifyOptions::default())
    }

    /// Checks everything SPEC.md 8.2 lets a reader check: every block checksum, every tensor's
    /// data checksum, that every record's header agrees with its index entry (dtype, shape,
    /// name, position), that the header's tensor count is right, and that the records tile the
    /// records region; for a sharded checkpoint, every data file so, and the index against
    /// them (SPEC.md 12.4). The first error in name order is reported. The CLI's `verify` is
    /// this. By ranges, every record is fetched whole by parallel reads
    /// ([`VerifyOptions::load`], else the reader's [`RemoteOptions::load`]).
    pub fn verify_with(&self, opts: VerifyOptions<'_>) -> Result<VerifyReport> {
        match &self.inner {
            Inner::Mapped(r) => r.verify_with(opts),
            Inner::Ranged(r) => r.verify(opts.load.unwrap_or(&r.options().load)),
            Inner::Sharded(r) => r.verify(opts.load.unwrap_or(&r.index().options().load)),
        }
    }

    /// Checks every index block's CRC32C and the hash index against the table (a sharded
    /// checkpoint's index's), reading no record. Returns the blocks checked.
    pub fn verify_index(&self) -> Result<u64> {
        match &self.inner {
            Inner::Mapped(r) => r.verify_index(),
            Inner::Ranged(r) => r.verify_index(),
            Inner::Sharded(r) => r.index().verify_index(),
        }
    }

    /// Every tensor, copied into owned buffers and checked against its CRC32C, returned as
    /// (name, tensor) in file order (name order for files whose records are sorted; a sharded
    /// checkpoint's grouped by data file). A mapped
    /// file is copied on [`LoadOptions::threads`] threads, checksumming as it copies; one read
    /// by ranges is fetched by parallel reads as `opts` says. A mapped file's tensors with LoD
    /// are loaded without it ([`TensorView::lod`] reads it); by ranges, with it.
    ///
    /// Errors: [`Error::Sliced`] (before any data is copied) for a tensor stored in slices
    /// (load it with [`Reader::get_slice`]); a checksum mismatch, naming the tensor.
    pub fn load_all(&self, opts: &LoadOptions) -> Result<Vec<(Vec<u8>, OwnedTensor)>> {
        match &self.inner {
            Inner::Mapped(r) => r.load_all(opts),
            Inner::Ranged(r) => r.load_all(opts),
            Inner::Sharded(r) => {
                let names = r.list_from(b"")?.into_iter().map(|e| e.name).collect();
                r.load_named(names, opts)
            }
        }
    }

    /// The tensors `names` (each once, however often named), loaded as [`Reader::load_all`]
    /// loads, returned as (name, tensor) in file order.
    ///
    /// Errors: [`Error::NotFound`] for a name the file does not hold and [`Error::Sliced`] for
    /// a tensor stored in slices (both before any data is copied), and those of
    /// [`Reader::load_all`].
    pub fn load_many<N: AsRef<[u8]>>(
        &self,
        names: &[N],
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, OwnedTensor)>> {
        match &self.inner {
            Inner::Mapped(r) => r.load_many(names, opts),
            Inner::Ranged(r) => r.load_many(names, opts),
            Inner::Sharded(r) => {
                r.load_named(names.iter().map(|n| n.as_ref().to_vec()).collect(), opts)
            }
        }
    }

    /// Copies the tensors `names` into the caller's buffers, `dst[i]` receiving `names[i]`
    /// (which must be exactly as long as the tensor's data), each checked against its CRC32C.
    /// A mapped file is copied on `opts.threads` threads in file order, checked as it is
    /// copied (a buffer of a tensor that fails its check then holds unchecked bytes: the error
    /// names the tensor); by ranges, the tensors are loaded as [`Reader::load_many`] loads
    /// them, then copied.
    ///
    /// Errors: `names` and `dst` of different lengths, or a buffer of the wrong length
    /// ([`Error::InvalidArgument`], before any data is copied), and those of
    /// [`Reader::load_many`].
    pub fn load_into<N: AsRef<[u8]>>(
        &self,
        names: &[N],
        dst: &mut [&mut [u8]],
        opts: &LoadOptions,
    ) -> Result<()> {
        if let Some(r) = self.as_mapped() {
            return r.load_into(names, dst, opts);
        }
        if names.len() != dst.len() {
            return Err(Error::InvalidArgument(format!(
                "{} names but {} buffers to load them into",
                names.len(),
                dst.len()
            )));
        }
        let mut sizes = Vec::with_capacity(names.len());
        for n in names {
            let e = self.entry_of(n.as_ref())?.ok_or_else(|| Error::NotFound {
                name: crate::name::display(n.as_ref()),
                path: self.path().to_string(),
            })?;
            sizes.push(e.size);
        }
        for ((n, d), size) in names.iter().zip(dst.iter()).zip(&sizes) {
            if d.len() as u64 != *size {
                return Err(Error::InvalidArgument(format!(
                    "tensor {}: a buffer of {} bytes for {size} bytes of data",
                    crate::name::display(n.as_ref()),
                    d.len()
                )));
            }
        }
        let loaded = self.load_many(names, opts)?;
        // Loaded in file order, not name order: each name's tensor found by a map.
        let by_name: std::collections::HashMap<&[u8], &OwnedTensor> =
            loaded.iter().map(|(m, t)| (m.as_slice(), t)).collect();
        for (n, d) in names.iter().zip(dst.iter_mut()) {
            let Some(t) = by_name.get(n.as_ref()) else {
                return Err(Error::NotFound {
                    name: crate::name::display(n.as_ref()),
                    path: self.path().to_string(),
                });
            };
            d.copy_from_slice(&t.data);
        }
        Ok(())
    }

    /// Every tensor, handed to `sink` (name, tensor) in file order as soon as it is loaded
    /// and checked. By ranges, parts are fetched in parallel as `opts` says and memory stays
    /// within about [`LoadOptions::window_bytes`] plus the largest tensor; a mapped file is
    /// copied tensor by tensor. An error from `sink` ends the load.
    pub fn for_each(
        &self,
        opts: &LoadOptions,
        mut sink: impl FnMut(Vec<u8>, OwnedTensor) -> Result<()>,
    ) -> Result<()> {
        match &self.inner {
            Inner::Ranged(r) => r.for_each(opts, sink),
            Inner::Mapped(_) | Inner::Sharded(_) => {
                for v in self.iter() {
                    let v = v?;
                    if v.slice_start().is_some() {
                        // A tensor stored in slices: the lookup by name says so (Error::Sliced,
                        // with its number of slices), as a ranged load does.
                        return Err(self.get(v.name()).err().unwrap_or(Error::Sliced {
                            name: crate::name::display(v.name()),
                            path: self.path().to_string(),
                            slices: 0,
                        }));
                    }
                    v.verify_crc()?;
                    let t = OwnedTensor {
                        dtype: v.dtype(),
                        shape: v.shape().to_vec(),
                        data: v.data().to_vec(),
                        lod: v.lod()?.to_vec(),
                    };
                    sink(v.name().to_vec(), t)?;
                }
                Ok(())
            }
        }
    }

    /// [`Reader::get`] as an owned tensor, for a caller that reads tensors one by one in name
    /// order (a conversion, an export): by ranges, from the second name asked in ascending
    /// order on, the tensors that follow it are fetched ahead ([`LoadOptions::window_bytes`]
    /// of them at a time) by parallel reads and served from memory when asked; a name out of
    /// order reads as `get` does. A mapped file copies the tensor, checked.
    pub fn get_ahead(&self, name: impl AsRef<[u8]>) -> Result<Option<OwnedTensor>> {
        match &self.inner {
            Inner::Ranged(r) => r.get_ahead(name),
            Inner::Sharded(r) => get_whole_data(r, name.as_ref()),
            Inner::Mapped(r) => match r.get(name)? {
                None => Ok(None),
                Some(v) => {
                    v.verify_crc()?;
                    Ok(Some(OwnedTensor {
                        dtype: v.dtype(),
                        shape: v.shape().to_vec(),
                        data: v.data().to_vec(),
                        lod: v.lod()?.to_vec(),
                    }))
                }
            },
        }
    }

    /// The byte ranges [`Reader::load_all`] with `opts` asks for, one request each, in file
    /// order: what a load will cost. Empty for a mapped file, which makes no request.
    pub fn load_plan(&self, opts: &LoadOptions) -> Result<Vec<Range<u64>>> {
        match &self.inner {
            Inner::Ranged(r) => r.load_plan(opts),
            Inner::Mapped(_) | Inner::Sharded(_) => Ok(Vec::new()),
        }
    }

    /// Requests made, bytes received and retries so far by the sources this reader reads by
    /// ranges (the open's included; a sharded checkpoint's index and opened data files); all
    /// zero for a mapped file.
    pub fn stats(&self) -> RequestStats {
        match &self.inner {
            Inner::Mapped(_) => RequestStats::default(),
            Inner::Ranged(r) => r.stats(),
            Inner::Sharded(r) => r.stats(),
        }
    }

    /// Whether this sharded checkpoint (opened by its prefix) holds tensor `name` stored whole
    /// with exactly `tensor`'s dtype, shape, LoD and bytes (SPEC.md 12.5): what an incremental
    /// save asks of its base.
    pub fn holds_unchanged(&self, name: impl AsRef<[u8]>, tensor: Tensor<'_>) -> Result<bool> {
        ReuseBase::holds_unchanged(self, name.as_ref(), tensor)
    }

    /// Whether this sharded checkpoint stores tensor `name` (of `dtype`, whole shape
    /// `full_shape`) in slices, one of them exactly `region` holding exactly `data`.
    pub fn holds_unchanged_slice(
        &self,
        name: impl AsRef<[u8]>,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
        data: &[u8],
    ) -> Result<bool> {
        let s = SliceAt {
            name: name.as_ref(),
            dtype,
            full_shape,
            region,
        };
        ReuseBase::holds_unchanged_slice(self, s, data)
    }

    /// What the index says of every tensor from `start` on, in name order (stopping at the
    /// first name without `prefix`, when given), a tensor stored in slices once, without its
    /// data: a mapped file's streamed one data block at a time, one by ranges read in one
    /// request ([`Reader::list_from`]). What a store's listings are made of.
    pub(crate) fn listing<'a>(
        &'a self,
        start: &[u8],
        prefix: Option<&'a [u8]>,
    ) -> Result<Box<dyn Iterator<Item = Result<EntryInfo>> + 'a>> {
        if let Some(r) = self.as_mapped() {
            return Ok(Box::new(
                r.listing(start, prefix)
                    .map(|l| l.map(crate::native::ranged::entry_info)),
            ));
        }
        let listed = self.list_from(start)?.into_iter();
        Ok(Box::new(
            listed
                .take_while(move |e| prefix.is_none_or(|p| e.name.starts_with(p)))
                .map(Ok),
        ))
    }

    /// The figures of the index table (one read for the index blocks not read yet, by
    /// ranges), and the length of the file holding it.
    pub(crate) fn index_figures(&self) -> Result<(TableFigures, u64)> {
        let ranged = |r: &RangedReader| -> Result<(TableFigures, u64)> {
            let (bytes, base) = r.index_bytes()?;
            Ok((r.table_over(&bytes, base).figures()?, r.source().len()))
        };
        match &self.inner {
            Inner::Mapped(r) => Ok((r.table().figures()?, r.as_bytes().len() as u64)),
            Inner::Ranged(r) => ranged(r),
            Inner::Sharded(r) => ranged(r.index()),
        }
    }

    /// For a sharded checkpoint opened by its prefix: that prefix (a path or a URL) and where
    /// its data file `k` is.
    pub(crate) fn data_files(&self) -> Option<(String, DataFileAt<'_>)> {
        let n = u32::try_from(self.header().shards.len())
            .ok()
            .filter(|&n| n > 0)?;
        match &self.inner {
            Inner::Mapped(r) => {
                let p = r.checkpoint_prefix()?.display().to_string();
                let shown = p.clone();
                Some((
                    p,
                    Box::new(move |k| format!("{shown}{}", crate::native::data_suffix(k, n))),
                ))
            }
            Inner::Sharded(r) => Some((r.prefix().to_string(), Box::new(|k| r.data_location(k)))),
            Inner::Ranged(_) => None,
        }
    }

    /// Where the data of tensor `name` (stored whole) lies, without reading it: the file (a
    /// data file's for a sharded checkpoint), offset, length and stored CRC32C (unmasked).
    /// `Ok(None)` when absent or stored in slices.
    pub(crate) fn data_at(&self, name: &[u8]) -> Result<Option<DataAt>> {
        match &self.inner {
            Inner::Mapped(r) => {
                // A compressed record of a native file: from its entry alone (a view would
                // decode it).
                if let Some(at) = r.compressed_at(name)? {
                    return Ok(Some(at));
                }
                match r.get(name) {
                    // Stored in slices: not one run of bytes (its slices are listed as such).
                    Err(Error::Sliced { .. }) => Ok(None),
                    t => Ok(t?.as_ref().map(view_at)),
                }
            }
            Inner::Ranged(r) => locate(r, name),
            Inner::Sharded(r) => locate(r, name),
        }
    }

    /// Where each stored slice of tensor `name` lies (its region, and [`Reader::data_at`]'s
    /// answer for it), in the order its entry lists them; empty when it is stored whole or
    /// absent.
    pub(crate) fn slices_at(&self, name: &[u8]) -> Result<Vec<(Region, DataAt)>> {
        match &self.inner {
            Inner::Mapped(r) => Ok(r
                .slice_views(name)?
                .into_iter()
                .map(|(region, v)| (region, view_at(&v)))
                .collect()),
            Inner::Ranged(r) => locate_slices(r, name),
            Inner::Sharded(r) => locate_slices(r, name),
        }
    }

    /// The engine as a base of an incremental save: a sharded checkpoint.
    fn base(&self) -> Result<&dyn ReuseBase> {
        match &self.inner {
            Inner::Mapped(r) => Ok(r),
            Inner::Sharded(r) => Ok(r),
            Inner::Ranged(r) => Err(Error::InvalidArgument(format!(
                "{}: the base of an incremental save must be a sharded checkpoint opened by \
                 its prefix, not a single file",
                r.location()
            ))),
        }
    }
}

impl ReuseBase for Reader {
    fn shown(&self) -> String {
        self.path().to_string()
    }

    fn header(&self) -> &FileHeader {
        Reader::header(self)
    }

    fn place(&self) -> Result<Arc<dyn Place>> {
        self.base()?.place()
    }

    fn entry(&self, key: &[u8]) -> Result<Option<IndexEntry>> {
        self.base()?.entry(key)
    }

    fn whole_size(&self, name: &[u8]) -> Result<Option<u64>> {
        self.base()?.whole_size(name)
    }

    fn slice_size(&self, s: SliceAt<'_>) -> Result<Option<u64>> {
        self.base()?.slice_size(s)
    }

    fn held_bytes(&self, k: u32) -> Result<Option<&[u8]>> {
        self.base()?.held_bytes(k)
    }

    fn holds_unchanged(&self, name: &[u8], tensor: Tensor<'_>) -> Result<bool> {
        self.base()?.holds_unchanged(name, tensor)
    }

    fn holds_unchanged_slice(&self, s: SliceAt<'_>, data: &[u8]) -> Result<bool> {
        self.base()?.holds_unchanged_slice(s, data)
    }
}

/// Where a view's data lies: [`Reader::data_at`]'s answer.
fn view_at(v: &TensorView<'_>) -> DataAt {
    (
        v.path().to_string(),
        v.data_offset(),
        v.stored_len(),
        crate::format::unmask_crc(v.stored_crc()),
    )
}
