//! Reading a native paramdex file, or a sharded checkpoint, by name.
//!
//! [`Reader::open`](crate::Reader::open) maps the file and reads only the footer, the index block and the header
//! entry; a lookup binary-searches the index block, then the restart points of one data block,
//! and returns a [`TensorView`] borrowing the mapped bytes. A sharded checkpoint (SPEC.md 12) is
//! opened by its prefix or its `PREFIX.index`; each data file is mapped and checked the first
//! time a tensor in it is read (`native/sharded/reader.rs`). A tensor stored in slices (SPEC.md 13) is
//! read by region with [`Reader::get_slice`](crate::Reader::get_slice).

use std::path::Path;

use crate::dtype::DType;
use crate::error::{ensure_within, path_str, Error, Result, SliceProblem};
use crate::format::{crc32c, unmask_crc};
use crate::name;
use crate::native::bytes_value;
use crate::native::entry::{decode_slices, Dims, IndexEntry, Partition};
use crate::native::header::FileHeader;
use crate::native::iter::{skip_non_names, Found, Iter, Walk};
use crate::native::open::{open_index_shared, Opened};
use crate::native::region::{self, Region};
use crate::native::sharded::table::{self as shards, Shards};
use crate::native::slice_key;
use crate::native::source::Source;
use crate::native::view::{
    data_crc_mismatch, decoded_view, shown_name, NameBuf, SliceData, SlicePiece, TensorView,
    ViewBytes,
};
use crate::native::FORMAT_VERSION;
use crate::record::{self, MAX_ALIGNMENT, MAX_RANK};
use crate::table::{Table, TableIndex, TableReadOptions};

/// How a [`Reader`](crate::Reader) checks what it reads.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Check each index block's CRC32C the first time it is read (default true).
    /// The index block itself is always checked at open.
    pub verify_blocks: bool,
    /// Check a tensor's data CRC32C on every `get` (default false; `verify` checks them all).
    /// [`Reader::get_slice`](crate::Reader::get_slice) then checks every stored tensor or slice it reads from, whole.
    pub verify_tensors: bool,
    /// Bytes of decompressed index blocks kept for snappy-compressed files.
    pub block_cache_bytes: usize,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            verify_blocks: true,
            verify_tensors: false,
            block_cache_bytes: 8 << 20,
        }
    }
}

/// An open native paramdex file, or sharded checkpoint. `Send + Sync`: share it between threads
/// by reference or `Arc`.
#[derive(Debug)]
pub struct MappedReader {
    pub(super) source: Source,
    pub(super) index: TableIndex,
    pub(super) header: FileHeader,
    pub(super) path: String,
    pub(super) opts: ReadOptions,
    /// For the index of a sharded checkpoint: its data files, opened on first use.
    pub(super) shards: Option<Shards<MappedReader>>,
}

/// Which stored slices of a partitioned tensor a region is read from ([`plan_region`]).
#[derive(Debug)]
pub(crate) enum RegionPlan {
    /// The region is empty: nothing is read.
    Empty,
    /// Slice `i` holds the whole region: read from it alone.
    Within(usize),
    /// The region spans several slices: (slice, its part of the region), each copied in.
    Parts(Vec<(usize, Region)>),
}

/// Which of the slices of partitioned tensor `p` hold `region` (inside its shape) and how it is
/// read: the one decision behind [`Reader::get_slice`](crate::Reader::get_slice) and the remote readers' slices, which
/// differ only in how a slice's bytes are fetched. `path` names the checkpoint in messages.
///
/// Errors: [`Error::Slices`] ([`SliceProblem::Gap`]) when some of the region is in no slice.
pub(crate) fn plan_region(p: &Partition, region: &Region, path: &str) -> Result<RegionPlan> {
    let parts: Vec<(usize, Region)> = p
        .regions
        .iter()
        .enumerate()
        .filter_map(|(i, r)| Some((i, r.intersect(region)?)))
        .collect();
    if region.is_empty() {
        return Ok(RegionPlan::Empty);
    }
    if let Some((i, _)) = parts.iter().find(|(i, _)| p.regions[*i].contains(region)) {
        return Ok(RegionPlan::Within(*i));
    }
    // Slices do not overlap (checked with the entry), so they hold the whole region exactly
    // when their parts of it add up to it.
    let have: u64 = parts
        .iter()
        .map(|(_, r)| r.numel().unwrap_or(0))
        .fold(0u64, u64::saturating_add);
    let want = region.numel().unwrap_or(u64::MAX);
    if have != want {
        return Err(Error::Slices {
            name: name::display(&p.name),
            problem: SliceProblem::Gap,
            detail: format!(
                "the region at {:?} of lengths {:?} holds {want} elements, the stored slices \
                 only {have} of them (in {path}: a partial tensor)",
                region.start, region.len
            ),
        });
    }
    Ok(RegionPlan::Parts(parts))
}

/// A compressed record located in a mapped file, not decoded ([`MappedReader::packed`]).
pub(crate) struct Packed<'a> {
    pub(crate) name: Vec<u8>,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    /// The record: its header, then its stored data from byte `head`.
    record: &'a [u8],
    head: usize,
    record_offset: u64,
    pub(crate) data_offset: u64,
    /// The decoded data's masked CRC32C (the entry's).
    crc32c: u32,
    lod_levels: u32,
    path: &'a str,
}

impl Packed<'_> {
    /// The decoded length (the shape's bytes, checked by `check_data`).
    pub(crate) fn decoded_len(&self) -> u64 {
        record::data_len(self.dtype, &self.shape).unwrap_or(0)
    }

    /// Decodes the data into `out` (exactly [`Packed::decoded_len`] bytes) on up to `threads`
    /// threads, then checks it against the entry's CRC32C.
    pub(crate) fn decode_into(&self, out: &mut [u8], threads: usize) -> Result<()> {
        let shown = name::display(&self.name);
        let at = record::lossless::At {
            name: &shown,
            offset: self.data_offset,
        };
        let stored = &self.record[self.head..];
        let layout = record::lossless::Layout::parse(stored, self.dtype, self.decoded_len(), at)
            .map_err(|e| e.context(self.path))?;
        if out.len() as u64 != layout.decoded_len {
            return Err(Error::InvalidArgument(format!(
                "tensor {shown} of {}: a buffer of {} bytes for {} bytes of data",
                self.path,
                out.len(),
                layout.decoded_len
            )));
        }
        layout
            .decode_range(stored, 0..layout.decoded_len, out, threads, at)
            .map_err(|e| e.context(self.path))?;
        let (stored_crc, computed) = (unmask_crc(self.crc32c), crc32c(out));
        if computed != stored_crc {
            return Err(data_crc_mismatch(
                shown,
                self.data_offset,
                out.len(),
                stored_crc,
                computed,
            )
            .context(self.path));
        }
        Ok(())
    }

    /// The region `region` of the tensor, decoding only the chunks that hold the rows (of
    /// the first dimension) it spans.
    pub(crate) fn region(&self, region: &Region) -> Result<SliceData<'static>> {
        region.check_within(&self.shape, &self.name)?;
        let shown = name::display(&self.name);
        let esize = self.dtype.size() as u64;
        // The rows the region spans, as a sub-array of the tensor: [r0, r1) of dimension 0
        // (a scalar: the whole tensor).
        let row_bytes = self.shape.iter().skip(1).product::<u64>() * esize;
        let (r0, r1, sub_shape, at) = match self.shape.first() {
            None => (0, 1, Vec::new(), Vec::new()),
            Some(_) => {
                let (r0, r1) = (region.start[0], region.start[0] + region.len[0]);
                let mut sub = self.shape.clone();
                sub[0] = r1 - r0;
                let mut at = region.start.clone();
                at[0] = 0;
                (r0, r1, sub, at)
            }
        };
        let span = if self.shape.is_empty() {
            0..self.decoded_len()
        } else {
            r0 * row_bytes..r1 * row_bytes
        };
        let at_ = record::lossless::At {
            name: &shown,
            offset: self.data_offset,
        };
        let stored = &self.record[self.head..];
        let layout = record::lossless::Layout::parse(stored, self.dtype, self.decoded_len(), at_)
            .map_err(|e| e.context(self.path))?;
        let len = usize::try_from(span.end - span.start).map_err(|_| {
            Error::InvalidArgument(format!("tensor {shown}: the region does not fit in memory"))
        })?;
        let mut rows = vec![0u8; len];
        layout
            .decode_range(stored, span, &mut rows, 0, at_)
            .map_err(|e| e.context(self.path))?;
        SliceData::copied(&rows, &sub_shape, &at, region, self.dtype, shown)
    }

    /// The record's LoD, from its header (checked as a view's).
    pub(crate) fn lod(&self) -> Result<Vec<Vec<u64>>> {
        if self.lod_levels == 0 {
            return Ok(Vec::new());
        }
        let h = record::decode_head(&self.record[..self.head], self.record_offset)
            .map_err(|e| e.context(self.path))?;
        Ok(h.lod.to_vec())
    }
}

/// What the index says of one tensor (a partitioned tensor once), read without its data.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    pub(crate) name: Vec<u8>,
    pub(crate) dtype: DType,
    pub(crate) shape: Dims,
    pub(crate) lod_levels: u32,
    pub(crate) nbytes: u64,
    /// Bytes the data takes in the file: `nbytes`, or a compressed record's stored bytes.
    pub(crate) stored: u64,
    /// Slices of a tensor stored in slices, else 0 (the remote listings' count).
    pub(crate) slices: u64,
}

/// What a view of a [`Reader`](crate::Reader) lends for as long as the reader is borrowed: its source (a
/// mapped file or a buffer in memory, [`Source`]) lends every byte, so its views never hold
/// bytes of their own (only the reader by ranges makes such views).
pub(super) fn lent<T>(bytes: Option<T>) -> T {
    bytes.expect("a MappedReader's mapped or in-memory source lends its bytes")
}

/// Byte ranges a region read needs that are closer than this are advised as one
/// ([`Reader::get_slice`](crate::Reader::get_slice)): one call instead of several for a gap the kernel would read anyway.
const REGION_ADVICE_GAP: u64 = 64 << 10;

/// At most this many `madvise` calls (of up to 2 MiB each) per stored tensor or slice a region
/// read reads from; the rest of its ranges fault in as without advice.
const REGION_ADVICE_CALLS: usize = 4096;

impl MappedReader {
    /// Opens a native file, or a sharded checkpoint by its prefix or its `PREFIX.index`: maps
    /// the file and reads its footer, index block and header. The data files of a sharded
    /// checkpoint are opened, and checked against its index, when first read.
    pub fn open(path: impl AsRef<Path>) -> Result<MappedReader> {
        Self::open_with(path, ReadOptions::default())
    }

    /// Like [`Reader::open`](crate::Reader::open) with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: ReadOptions) -> Result<MappedReader> {
        let path = path.as_ref();
        let index = shards::index_path(path);
        let path = if !path.is_file() && index.is_file() {
            index.as_path()
        } else {
            path
        };
        let source = Source::map(path).map_err(|e| match e {
            Error::IsADirectory { path, .. } => Error::IsADirectory {
                path,
                hint: Some(
                    "a paramdex file, or a sharded checkpoint's prefix, is read with MappedReader; a \
                     directory of checkpoints with CheckpointManager, other formats with \
                     interop::open_any",
                ),
            },
            other => other,
        })?;
        Self::from_source(source, path_str(path), Some(path), opts)
    }

    /// Like [`Reader::from_bytes`](crate::Reader::from_bytes) with explicit options.
    pub fn from_bytes_with(
        bytes: impl Into<std::sync::Arc<[u8]>>,
        opts: ReadOptions,
    ) -> Result<MappedReader> {
        Self::from_source(
            Source::Memory(bytes.into()),
            "<memory>".to_string(),
            None,
            opts,
        )
    }

    /// Opens the bytes of `source`, found at `file` (which locates a sharded checkpoint's data
    /// files), shown as `path` in messages.
    pub(super) fn from_source(
        source: Source,
        path: String,
        file: Option<&Path>,
        opts: ReadOptions,
    ) -> Result<MappedReader> {
        let table_opts = TableReadOptions {
            verify_checksums: opts.verify_blocks,
            cache_capacity: opts.block_cache_bytes,
            hash_index: true,
        };
        // The source lends its bytes: the open "reads" the whole file without a copy.
        let Opened {
            index,
            header,
            first_block,
            ..
        } = open_index_shared(
            &source,
            std::sync::Arc::new(source.clone()),
            &table_opts,
            &path,
        )?;
        validate_header(&header, first_block, &path)?;
        let shards = if header.shards.is_empty() {
            None
        } else {
            Some(Shards::new(
                file.and_then(shards::prefix_of_index),
                header.shards.len(),
            ))
        };
        Ok(MappedReader {
            source,
            index,
            header,
            path,
            opts,
            shards,
        })
    }

    pub(crate) fn table(&self) -> Table<'_> {
        Table::new(&self.source, &self.index).releasing_behind_scans(&self.source)
    }

    /// The file's header entry.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// The path the reader was opened on (`<memory>` for bytes; `PREFIX.index` for a sharded
    /// checkpoint).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Number of tensors, from the header (O(1)): whole tensors, and each tensor stored in
    /// slices once.
    pub fn len(&self) -> u64 {
        self.header.tensor_count
    }

    /// Whether version 2 rules apply: names starting with a NUL byte are slice keys.
    fn is_v2(&self) -> bool {
        self.header.format_version >= 2
    }

    /// The whole file (for a sharded checkpoint, its `PREFIX.index`: each data file is a native
    /// file of its own, [`Reader::shard`](crate::Reader::shard)).
    pub fn as_bytes(&self) -> &[u8] {
        &self.source
    }

    /// The records region: a Paddle combined-params stream (in name order when
    /// `header().records_sorted`). Empty for a sharded checkpoint's index, whose records are in
    /// its data files ([`Reader::shard`](crate::Reader::shard)).
    pub fn records(&self) -> &[u8] {
        // records_len <= first data block offset <= file length, checked at open.
        let end = usize::try_from(self.header.records_len)
            .expect("records_len is at most the file length, checked at open");
        &self.source[..end]
    }

    /// Number of index data blocks.
    pub fn data_blocks(&self) -> usize {
        self.index.data_blocks()
    }

    /// Bytes of the index table (data blocks, metaindex, index block, footer).
    pub fn index_len(&self) -> u64 {
        self.source.len() as u64 - self.header.records_len
    }

    /// Looks a tensor up by name. `Ok(None)` if absent; an error if its entry is corrupt, and
    /// [`Error::Sliced`] if it is stored in slices (read it with [`Reader::get_slice`](crate::Reader::get_slice)).
    pub fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<TensorView<'_>>> {
        let name = name.as_ref();
        if !self.is_tensor_name(name) {
            return Ok(None);
        }
        // The hot path: the lookup decodes the entry into `e`, here, and the view is built once,
        // from it (building the view inside the lookup moved it, some 200 bytes, through every
        // layer).
        let mut e = IndexEntry::default();
        let Some(at) = self.table().get(name, |value, at| {
            Self::decode_entry(&mut e, name, value, at)
        })?
        else {
            return Ok(None);
        };
        let at = at?;
        if e.num_slices != 0 {
            // Stored in slices: `find` checks the whole entry, and `Error::Sliced` says how
            // many slices it has.
            return match self.find(name)? {
                None => Ok(None),
                Some(Found::Whole(v)) => Ok(Some(v)),
                Some(Found::Partitioned(p)) => Err(Error::Sliced {
                    name: name::display(name),
                    path: self.path.clone(),
                    slices: p.regions.len() as u64,
                }),
            };
        }
        let dtype = self.dtype_of(name, &e)?;
        self.data_view(name, name, e, dtype, at, None).map(Some)
    }

    /// The compressed record (SPEC.md 3.4) of tensor `name` in this file (not a sharded
    /// checkpoint's), located and checked as a view's entry is, not decoded: what a load
    /// decodes straight into its destination. `Ok(None)` for anything else.
    pub(crate) fn packed(&self, name: &[u8]) -> Result<Option<Packed<'_>>> {
        if self.header.format_version < crate::native::COMPRESSED_VERSION {
            return Ok(None);
        }
        let Some((e, dtype, end, record_offset)) = self.compressed_entry(name)? else {
            return Ok(None);
        };
        // Both bounds are within the records region, itself within the mapped file.
        let in_file = |v: u64| usize::try_from(v).expect("an offset inside the mapped file");
        Ok(Some(Packed {
            name: name.to_vec(),
            dtype,
            shape: e.shape.to_vec(),
            record: &self.source[in_file(record_offset)..in_file(end)],
            head: in_file(e.offset - record_offset),
            record_offset,
            data_offset: e.offset,
            crc32c: e.crc32c,
            lod_levels: e.lod_levels,
            path: &self.path,
        }))
    }

    /// The entry of tensor `name` when it is a compressed record of this file (not of a
    /// sharded checkpoint's data file), checked against the records as a view's is
    /// (`check_data`), with its dtype, the end of its stored data and its record's offset.
    /// `Ok(None)` for anything else (absent, plain, stored in slices, in a data file).
    fn compressed_entry(&self, name: &[u8]) -> Result<Option<(IndexEntry, DType, u64, u64)>> {
        if self.shards.is_some() || !self.is_tensor_name(name) {
            return Ok(None);
        }
        let mut e = IndexEntry::default();
        let Some(at) = self.table().get(name, |value, at| {
            Self::decode_entry(&mut e, name, value, at)
        })?
        else {
            return Ok(None);
        };
        let at = at?;
        if e.codec == 0 || e.num_slices != 0 {
            return Ok(None);
        }
        let dtype = self.dtype_of(name, &e)?;
        let (end, record_offset) = check_data(name, &e, dtype, at, self.header.records_len, None)
            .map_err(|err| err.context(&self.path))?;
        Ok(Some((e, dtype, end, record_offset)))
    }

    /// Where the stored data of tensor `name` lies when it is a compressed record (SPEC.md 3.4)
    /// of this file (not a sharded checkpoint's): its path, offset, stored length and the
    /// decoded data's CRC32C (unmasked), from its entry, checked as a view's, without decoding
    /// it. `Ok(None)` for anything else (absent, plain, stored in slices, in a data file).
    pub(crate) fn compressed_at(&self, name: &[u8]) -> Result<Option<(String, u64, u64, u32)>> {
        let Some((e, ..)) = self.compressed_entry(name)? else {
            return Ok(None);
        };
        Ok(Some((
            self.path.clone(),
            e.offset,
            e.size,
            unmask_crc(e.crc32c),
        )))
    }

    /// Decodes the entry of index key `key` into `e` (a default entry), checking the key's
    /// length first; returns `at`, the offset of its data block.
    #[inline]
    pub(crate) fn decode_entry(
        e: &mut IndexEntry,
        key: &[u8],
        value: &[u8],
        at: u64,
    ) -> Result<u64> {
        ensure_within(
            "tensor name length",
            key.len(),
            name::MAX_NAME_LEN,
            Some(at),
        )?;
        e.decode_into(value, at, MAX_RANK)?;
        Ok(at)
    }

    /// Whether `name` can name a tensor: the empty name is the header's, and in a version 2
    /// file names starting with a NUL byte are slice keys.
    #[inline]
    fn is_tensor_name(&self, name: &[u8]) -> bool {
        is_tensor_name(name, self.is_v2())
    }

    /// The bytes value `name` (SPEC.md 6.1), checked (its checksum and encoding), zero-copy;
    /// `Ok(None)` if there is no entry of that name. [`Error::DTypeMismatch`] when `name`
    /// is a tensor, not a bytes value.
    pub fn get_bytes(&self, name: impl AsRef<[u8]>) -> Result<Option<&[u8]>> {
        match self.get(name)? {
            None => Ok(None),
            Some(v) => v.lent_bytes_value().map(|b| Some(lent(b))),
        }
    }

    /// The entry of tensor `name`, if there is one. The empty name is the header's, and in a
    /// version 2 file names starting with a NUL byte are slice keys: neither is a tensor.
    #[inline]
    pub(super) fn find(&self, name: &[u8]) -> Result<Option<Found<'_>>> {
        if !self.is_tensor_name(name) {
            return Ok(None);
        }
        self.table()
            .get(name, |value, at| self.found(name, value, at))?
            .transpose()
    }

    /// The stored slices of tensor `name`, each with its region and a view of its data
    /// (bounds checked against the file, nothing read): empty when the tensor is stored whole
    /// or absent. Their order is the one the tensor's entry lists them in.
    pub(crate) fn slice_views(&self, name: &[u8]) -> Result<Vec<(Region, TensorView<'_>)>> {
        let Some(Found::Partitioned(p)) = self.find(name)? else {
            return Ok(Vec::new());
        };
        (0..p.regions.len())
            .map(|i| Ok((p.regions[i].clone(), self.piece(&p, i)?)))
            .collect()
    }

    /// Reads the region `region` of tensor `name`, whether stored whole or in slices (a
    /// checkpoint saved by 8 ranks loads into 3 this way). Only the bytes inside the region are
    /// read, from whichever stored tensor or slices hold them: the result borrows the file when
    /// one of them holds the region as one contiguous run, else it is one strided copy into an
    /// owned buffer aligned for every element type.
    ///
    /// Data checksums cover whole stored tensors and slices, so they are not checked here
    /// (unless [`ReadOptions::verify_tensors`] is set: then every stored tensor or slice read
    /// from is checked whole); [`Reader::verify`](crate::Reader::verify) checks them all.
    ///
    /// `Ok(None)` if there is no such tensor. Errors: [`Error::InvalidArgument`] for a region
    /// of another rank or outside the shape; [`Error::Slices`] ([`SliceProblem::Gap`]) when
    /// some of the region is in no slice (a partial tensor).
    pub fn get_slice(
        &self,
        name: impl AsRef<[u8]>,
        region: &Region,
    ) -> Result<Option<SliceData<'_>>> {
        let name = name.as_ref();
        if let Some(p) = self.packed(name)?.filter(|_| !self.opts.verify_tensors) {
            // A compressed record stored whole: only the chunks holding the region's rows
            // are decoded, each checked against its stored checksum (with `verify_tensors`,
            // the whole tensor is decoded and checked, below).
            return p.region(region).map(Some);
        }
        let Some(found) = self.find(name)? else {
            return Ok(None);
        };
        let (dtype, shape) = match &found {
            Found::Whole(v) => (v.dtype(), v.shape()),
            Found::Partitioned(p) => (p.dtype, p.shape.as_slice()),
        };
        region.check_within(shape, name)?;
        let esize = dtype.size();
        let shown = name::display(name);
        match found {
            Found::Whole(v) if v.is_compressed() => {
                // Decoded into the view (its CRC checked there with `verify_tensors`): the
                // region is copied out of it.
                Ok(Some(SliceData::copied(
                    v.data(),
                    &v.shape,
                    &region.start,
                    region,
                    dtype,
                    shown,
                )?))
            }
            Found::Whole(v) => {
                if self.opts.verify_tensors {
                    v.verify_crc()?;
                } else {
                    self.will_read(v.data(), &v.shape, &region.start, &region.len, esize);
                }
                Ok(Some(SliceData::from_stored(
                    lent(v.lent_data()),
                    &v.shape,
                    &region.start,
                    region,
                    dtype,
                    shown,
                )?))
            }
            Found::Partitioned(p) => match plan_region(&p, region, &self.path)? {
                RegionPlan::Empty => Ok(Some(SliceData::borrowed(&[], dtype, region, shown))),
                // One slice holding the whole region: read from it alone (borrowed if the
                // region is one run of it).
                RegionPlan::Within(i) => {
                    let r = &p.regions[i];
                    let piece = self.piece(&p, i)?;
                    if piece.is_compressed() {
                        return Ok(Some(SliceData::copied(
                            piece.data(),
                            &r.len,
                            &region.offset_in(r),
                            region,
                            dtype,
                            shown,
                        )?));
                    }
                    if self.opts.verify_tensors {
                        piece.verify_crc()?;
                    } else {
                        let at = region.offset_in(r);
                        self.will_read(piece.data(), &r.len, &at, &region.len, esize);
                    }
                    Ok(Some(SliceData::from_stored(
                        lent(piece.lent_data()),
                        &r.len,
                        &region.offset_in(r),
                        region,
                        dtype,
                        shown,
                    )?))
                }
                RegionPlan::Parts(parts) => {
                    let bytes = region::byte_len(region, esize)?;
                    let mut out = SliceData::owned(bytes, dtype, region, shown);
                    // Every piece's runs are announced before the first is copied, so that
                    // their reads are in flight together.
                    let pieces = parts
                        .iter()
                        .map(|(i, part)| {
                            let r = &p.regions[*i];
                            let piece = self.piece(&p, *i)?;
                            if !self.opts.verify_tensors {
                                let at = part.offset_in(r);
                                self.will_read(piece.data(), &r.len, &at, &part.len, esize);
                            }
                            Ok(piece)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    for ((i, part), piece) in parts.iter().zip(pieces) {
                        let r = &p.regions[*i];
                        if self.opts.verify_tensors {
                            piece.verify_crc()?;
                        }
                        region::copy_part(piece.data(), r, out.bytes_mut(), region, part, esize)
                            .map_err(|d| {
                                Error::corrupt(
                                    "slice",
                                    piece.data_offset(),
                                    format!("{}: {d}", piece.display_name()),
                                )
                            })?;
                    }
                    Ok(Some(out))
                }
            },
        }
    }

    /// Before a region read faults in the pages of `data` (a stored tensor or slice of shape
    /// `shape`, read from this file or a sharded checkpoint's data file), tells the kernel
    /// which byte ranges the box `at`, `len` needs (`MADV_WILLNEED` on each, ranges closer
    /// than [`REGION_ADVICE_GAP`] merged, in at most [`REGION_ADVICE_CALLS`] calls): the faults
    /// then find those pages read, instead of each reading the device's readahead around
    /// itself (BENCHMARKS.md, issue 31: a cold third of a tensor in column slices read 45 %
    /// of its bytes without the advice). Pages already cached cost a lookup each.
    fn will_read(&self, data: &[u8], shape: &[u64], at: &[u64], len: &[u64], esize: usize) {
        let ranges = |f: &mut dyn FnMut(u64, u64) -> bool| {
            region::byte_ranges(shape, at, len, esize as u64, REGION_ADVICE_GAP, f)
        };
        if self.source.will_read(data, REGION_ADVICE_CALLS, ranges) {
            return;
        }
        if let Some(shards) = &self.shards {
            for shard in shards.files.iter().filter_map(std::sync::OnceLock::get) {
                if shard.source.will_read(data, REGION_ADVICE_CALLS, ranges) {
                    return;
                }
            }
        }
    }

    /// Checks an index entry against the file and says what it holds.
    #[inline]
    pub(super) fn found<'r>(&'r self, key: &[u8], value: &[u8], at: u64) -> Result<Found<'r>> {
        let mut e = IndexEntry::default();
        Self::decode_entry(&mut e, key, value, at)?;
        let dtype = self.dtype_of(key, &e)?;
        if e.num_slices != 0 {
            return self
                .partition(key, &e, dtype, value, at)
                .map(Found::Partitioned);
        }
        self.data_view(key, key, e, dtype, at, None)
            .map(Found::Whole)
    }

    fn dtype_of(&self, key: &[u8], e: &IndexEntry) -> Result<DType> {
        entry_dtype(key, e)
    }

    /// Checks a partitioned tensor's entry (SPEC.md 13.1): see [`check_partition`].
    pub(super) fn partition(
        &self,
        key: &[u8],
        e: &IndexEntry,
        dtype: DType,
        value: &[u8],
        at: u64,
    ) -> Result<Partition> {
        check_partition(key, e, dtype, value, at, self.is_v2())
    }

    /// The view of slice `i` of partitioned tensor `p`, whose entry must be there and agree
    /// with the region (dtype, shape).
    pub(super) fn piece<'r>(&'r self, p: &Partition, i: usize) -> Result<TensorView<'r>> {
        let (e, dtype, at, piece) = piece_entry(&self.table(), p, i)?;
        let key = piece.key.clone();
        self.data_view(&key, &p.name, e, dtype, at, Some(Box::new(piece)))
    }

    /// Builds a view of the data an entry (under index key `key`, of tensor `name`) points at,
    /// checking it against the file (for a sharded checkpoint, against its data file).
    #[inline]
    fn data_view<'r>(
        &'r self,
        key: &[u8],
        name: &[u8],
        e: IndexEntry,
        dtype: DType,
        at: u64,
        slice: Option<Box<SlicePiece>>,
    ) -> Result<TensorView<'r>> {
        let bad = |detail: String| {
            Error::corrupt(
                "index entry",
                at,
                format!("tensor {}: {detail}", slice_key::display_key(key)),
            )
            .context(&self.path)
        };
        let (file, records_len, where_) = match &self.shards {
            None => {
                if e.shard_id != 0 {
                    return Err(bad(format!(
                        "shard_id {} in a file that is not a sharded checkpoint's index",
                        e.shard_id
                    )));
                }
                (&self.source, self.header.records_len, None)
            }
            Some(_) => {
                let n = self.header.shards.len();
                let k = u32::try_from(e.shard_id)
                    .ok()
                    .filter(|&k| (k as usize) < n)
                    .ok_or_else(|| {
                        bad(format!(
                            "shard_id {} is not below the number of shards, {n}",
                            e.shard_id
                        ))
                    })?;
                let shard = self.shard(k)?;
                (
                    &shard.source,
                    shard.header.records_len,
                    Some(shard.path.as_str()),
                )
            }
        };
        let (end, record_offset) = check_data(key, &e, dtype, at, records_len, where_)?;
        // Both bounds are within the records region, itself within the file.
        let in_file = |v: u64| usize::try_from(v).expect("an offset inside the mapped file");
        if e.codec != 0 {
            let record = &file[in_file(record_offset)..in_file(end)];
            let path = where_.unwrap_or(&self.path);
            let threads = 0;
            return decoded_view(
                path,
                name,
                slice,
                dtype,
                e,
                record_offset,
                record,
                threads,
                self.opts.verify_tensors,
            );
        }
        let data = &file[in_file(e.offset)..in_file(end)];
        if self.opts.verify_tensors {
            let computed = if dtype == DType::Bytes {
                let shown = shown_name(name, slice.as_deref());
                unmask_crc(bytes_value::entry_crc(data, &shown, e.offset)?)
            } else {
                crc32c(data)
            };
            let stored = unmask_crc(e.crc32c);
            if computed != stored {
                return Err(data_crc_mismatch(
                    shown_name(name, slice.as_deref()),
                    e.offset,
                    data.len(),
                    stored,
                    computed,
                )
                .context(where_.unwrap_or(&self.path)));
            }
        }
        // The last expression, so that the view is built in the caller's return slot rather
        // than moved there.
        Ok(TensorView {
            name: NameBuf::from_slice(name),
            dtype,
            shape: e.shape,
            data_len: data.len(),
            data_offset: e.offset,
            record_offset,
            crc32c: e.crc32c,
            lod_levels: e.lod_levels,
            file: ViewBytes::Lent(file),
            base: 0,
            path: where_.unwrap_or(&self.path),
            slice,
            stored_len: None,
        })
    }

    /// The tensors from `start` (stopping at the first name without `prefix`, when given), a
    /// tensor stored in slices once, read from the index alone: no data file of a sharded
    /// checkpoint is opened, and no slice entry is looked up.
    pub(crate) fn listing(
        &self,
        start: &[u8],
        prefix: Option<&[u8]>,
    ) -> impl Iterator<Item = Result<Listed>> + '_ {
        let mut it = self.table().into_iter_owned();
        let mut first = Some(start.to_vec());
        let prefix = prefix.map(<[u8]>::to_vec);
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let r = (|| -> Result<Option<Listed>> {
                match first.take() {
                    Some(s) => it.seek(&s)?,
                    None => {
                        it.next()?;
                    }
                }
                skip_non_names(&mut it, self.is_v2())?;
                if !it.valid() || prefix.as_ref().is_some_and(|p| !it.key().starts_with(p)) {
                    return Ok(None);
                }
                let (key, value, at) = (it.key(), it.value(), it.block_offset());
                list_entry(key, value, at, self.is_v2(), |key, e, dtype| {
                    if self.shards.is_none() && e.codec != 0 {
                        // A compressed record: its entry's checks, without decoding it.
                        check_data(key, &e, dtype, at, self.header.records_len, None).map(drop)
                    } else if self.shards.is_none() {
                        // Every check a view makes (cheap: no data is read).
                        self.data_view(key, key, e, dtype, at, None).map(drop)
                    } else {
                        // The data files are not opened for a listing.
                        check_data(key, &e, dtype, at, u64::MAX, None).map(drop)
                    }
                })
                .map(Some)
            })();
            match r {
                Ok(Some(l)) => Some(Ok(l)),
                Ok(None) => {
                    done = true;
                    None
                }
                Err(e) => {
                    done = true;
                    Some(Err(e))
                }
            }
        })
    }
}

/// Checks a whole tensor's (or a slice's) entry `e` (under index key `key`, in the block at
/// `at`) against the records region of `records_len` bytes of the file that holds its record
/// (`where_` names it in messages when it is another file than the index's): its size fits its
/// shape, its data and record header lie inside the region. Returns the end of its data and
/// the offset of its record. The one check of an entry against its data, for every reader
/// (the mapped `data_view`, the remote readers' fetches); `shard_id` is the caller's to check.
#[inline]
pub(crate) fn check_data(
    key: &[u8],
    e: &IndexEntry,
    dtype: DType,
    at: u64,
    records_len: u64,
    where_: Option<&str>,
) -> Result<(u64, u64)> {
    let bad = |detail: String| {
        Error::corrupt(
            "index entry",
            at,
            format!("tensor {}: {detail}", slice_key::display_key(key)),
        )
    };
    let expected = record::data_len(dtype, &e.shape)
        .ok_or_else(|| bad(format!("shape {:?} overflows", e.shape.as_slice())))?;
    if e.codec != 0 {
        // A compressed record (SPEC.md 3.4): `size` is its stored bytes, which the chunk table
        // checks against the decoded length when the data is read.
        if e.codec != record::lossless::CODEC_LOSSLESS {
            return Err(bad(format!(
                "unknown codec {} of compressed data (this paramdex decodes codec 1)",
                e.codec
            )));
        }
        if expected == 0 || e.size == 0 || dtype == DType::Bytes {
            return Err(bad(format!(
                "a compressed record of {} stored bytes for {expected} bytes of {dtype}",
                e.size
            )));
        }
    } else if expected != e.size {
        return Err(bad(format!(
            "stored size {} but shape {:?} of {dtype} needs {expected}",
            e.size,
            e.shape.as_slice()
        )));
    }
    let end = e
        .offset
        .checked_add(e.size)
        .filter(|&end| end <= records_len);
    let record_offset = e.offset.checked_sub(u64::from(e.record_header_len));
    let (Some(end), Some(record_offset)) = (end, record_offset) else {
        return Err(bad(format!(
            "data range {}+{} (record header {}) is outside the records region of {} bytes{}",
            e.offset,
            e.size,
            e.record_header_len,
            records_len,
            where_
                .map(|p| format!(" of data file {p}"))
                .unwrap_or_default()
        )));
    };
    if e.record_header_len == 0 {
        return Err(bad("missing record header length".into()));
    }
    Ok((end, record_offset))
}

/// The entry of slice `i` of partitioned tensor `p`, looked up in `table` (the index's) and
/// checked against the tensor's entry (stored whole, of its dtype and the region's shape):
/// the entry, its dtype, the offset of its block, and where the slice sits. The one lookup of
/// a slice for every reader.
pub(crate) fn piece_entry(
    table: &Table<'_>,
    p: &Partition,
    i: usize,
) -> Result<(IndexEntry, DType, u64, SlicePiece)> {
    let r = &p.regions[i];
    let key = slice_key::encode(&p.name, &r.extents(&p.shape));
    let bad = |detail: String| {
        Error::corrupt(
            "partitioned tensor",
            p.at,
            format!("{}: {detail}", slice_key::display_key(&key)),
        )
    };
    let found = table.get(&key, |value, at| -> Result<(IndexEntry, DType, u64)> {
        let e = IndexEntry::decode(value, at, MAX_RANK)?;
        let dtype = entry_dtype(&key, &e)?;
        if e.num_slices != 0 || dtype != p.dtype || e.shape.as_slice() != r.len.as_slice() {
            return Err(bad(format!(
                "the slice is stored as {dtype} {:?}{}, the tensor's entry says {} {:?}",
                e.shape.as_slice(),
                if e.num_slices != 0 {
                    " with slices"
                } else {
                    ""
                },
                p.dtype,
                r.len
            )));
        }
        Ok((e, dtype, at))
    })?;
    let (e, dtype, at) =
        found.unwrap_or_else(|| Err(bad("the slice's entry is missing".into())))?;
    let piece = SlicePiece {
        key,
        full_shape: p.shape.clone(),
        start: Dims::from_slice(&r.start),
    };
    Ok((e, dtype, at, piece))
}

/// The element type of entry `e` (under index key `key`).
pub(crate) fn entry_dtype(key: &[u8], e: &IndexEntry) -> Result<DType> {
    e.dtype().ok_or_else(|| Error::UnknownDType {
        system: e.dtype_code().0,
        code: e.dtype_code().1,
        location: Some(format!("tensor {}", slice_key::display_key(key))),
    })
}

/// Whether `name` can name a tensor in a file of version 2 (`is_v2`) or 1: the empty name is
/// the header's, and in a version 2 file names starting with a NUL byte are slice keys. The
/// one rule of every reader's lookups and listings.
#[inline]
pub(crate) fn is_tensor_name(name: &[u8], is_v2: bool) -> bool {
    !(name.is_empty() || (is_v2 && name[0] == 0))
}

/// What a listing says of the entry under `key` (value `value`, in the block at `at`) of a
/// file of version 2 (`is_v2`) or 1: a tensor stored in slices from its entry alone (checked,
/// [`check_partition`]); a whole tensor's entry decoded and given to `check` (the reader's
/// checks against its data: [`check_data`]).
pub(crate) fn list_entry(
    key: &[u8],
    value: &[u8],
    at: u64,
    is_v2: bool,
    check: impl FnOnce(&[u8], IndexEntry, DType) -> Result<()>,
) -> Result<Listed> {
    let mut e = IndexEntry::default();
    MappedReader::decode_entry(&mut e, key, value, at)?;
    let dtype = entry_dtype(key, &e)?;
    if e.num_slices != 0 {
        let p = check_partition(key, &e, dtype, value, at, is_v2)?;
        let nbytes = record::data_len(dtype, &p.shape).unwrap_or(0);
        return Ok(Listed {
            name: p.name,
            dtype,
            shape: p.shape,
            lod_levels: 0,
            nbytes,
            stored: nbytes,
            slices: p.regions.len() as u64,
        });
    }
    let (lod_levels, stored) = (e.lod_levels, e.size);
    // A compressed record's entry gives its stored bytes; the data's are the shape's.
    let nbytes = if e.codec != 0 {
        record::data_len(dtype, &e.shape).unwrap_or(0)
    } else {
        stored
    };
    let shape = e.shape.clone();
    check(key, e, dtype)?;
    Ok(Listed {
        name: key.to_vec(),
        dtype,
        shape,
        lod_levels,
        nbytes,
        stored,
        slices: 0,
    })
}

/// The checks of a native file's header entry (SPEC.md 8.2, 12.4) that need nothing but the
/// header and the offset of the first index block: version, endianness, fields of a later
/// version, shard identity or shard table, alignment, records region. `path` is for messages.
/// Shared by [`Reader`](crate::Reader) and the readers of remote objects, which fetch only the header's block.
pub(crate) fn validate_header(header: &FileHeader, first_block: u64, path: &str) -> Result<()> {
    if header.format_version == 0 {
        return Err(Error::UnrecognizedFormat {
            path: path.to_string(),
            looks_like: None,
            detail: "a TensorFlow checkpoint index, not a native paramdex file (its header has no paramdex format version)".into(),
        });
    }
    if header.format_version > FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            path: path.to_string(),
            found: header.format_version,
            supported: FORMAT_VERSION,
        });
    }
    if !crate::native::is_known_version(header.format_version) {
        return Err(Error::Unsupported(format!(
            "{path}: format version {} is not one this paramdex reads (it reads versions 1, 2 \
             and 4)",
            header.format_version
        )));
    }
    let bad = |detail: String| Error::corrupt("header entry", first_block, detail);
    if header.big_endian {
        return Err(bad("native files are little-endian (big_endian set)".into()));
    }
    if header.format_version < 2
        && (header.shard_of.is_some() || !header.shards.is_empty() || header.slice_count != 0)
    {
        return Err(bad(
            "a version 1 header with fields of version 2 (shard identity, shard table or \
             slice count)"
                .into(),
        ));
    }
    if header.shards.is_empty() {
        if header.num_shards != 1 {
            return Err(bad(format!(
                "a native file has one shard (num_shards {})",
                header.num_shards
            )));
        }
        if let Some(s) = &header.shard_of {
            shards::check_shard_of(s, first_block)?;
        } else if header.references != 0 {
            return Err(bad(format!(
                "{} references to earlier saves' data files in a file that is not a shard",
                header.references
            )));
        }
    } else {
        shards::check_index_header(header, first_block)?;
    }
    if !u64::from(header.alignment).is_power_of_two() || u64::from(header.alignment) > MAX_ALIGNMENT
    {
        return Err(bad(format!(
            "alignment {} is not a power of two up to {MAX_ALIGNMENT}",
            header.alignment
        )));
    }
    if header.records_len > first_block {
        return Err(bad(format!(
            "records region ({} bytes) overlaps the index, which starts at {first_block}",
            header.records_len
        )));
    }
    Ok(())
}

/// Checks a partitioned tensor's entry (SPEC.md 13.1): version 2, no data fields, at least
/// one slice, every slice of the tensor's rank, inside its shape, none overlapping another.
/// `is_v2`: whether the file is of version 2 (version 1 has no slices). Shared with the remote
/// readers.
pub(crate) fn check_partition(
    key: &[u8],
    e: &IndexEntry,
    dtype: DType,
    value: &[u8],
    at: u64,
    is_v2: bool,
) -> Result<Partition> {
    let bad = |detail: String| {
        Error::corrupt(
            "index entry",
            at,
            format!("tensor {}: {detail}", name::display(key)),
        )
    };
    if !is_v2 {
        return Err(bad(
            "partitioned entries are not allowed in a version 1 file".into(),
        ));
    }
    if key.first() == Some(&0) {
        return Err(bad("a slice key with slices of its own".into()));
    }
    if e.shard_id != 0
        || e.offset != 0
        || e.size != 0
        || e.crc32c != 0
        || e.record_header_len != 0
        || e.lod_levels != 0
    {
        return Err(bad(
            "the entry of a tensor stored in slices holds data fields".into(),
        ));
    }
    if e.shape.is_empty() {
        return Err(bad("a scalar stored in slices".into()));
    }
    if record::data_len(dtype, &e.shape).is_none() {
        return Err(bad(format!("shape {:?} overflows", e.shape.as_slice())));
    }
    let extents = decode_slices(value, at, e.shape.len())?;
    let mut regions = Vec::with_capacity(extents.len());
    for (i, ext) in extents.iter().enumerate() {
        regions.push(region::resolve(ext, &e.shape).map_err(|d| bad(format!("slice {i}: {d}")))?);
    }
    if let Some((i, j)) = region::find_overlap(&regions) {
        return Err(bad(format!(
            "slices {i} ({}) and {j} ({}) overlap",
            slice_key::describe_extents(&extents[i]),
            slice_key::describe_extents(&extents[j])
        )));
    }
    Ok(Partition {
        name: key.to_vec(),
        dtype,
        shape: e.shape.clone(),
        regions,
        at,
    })
}

impl MappedReader {
    /// Every stored tensor in name order.
    pub(crate) fn iter(&self) -> Iter<'_> {
        Iter::new(self, std::ops::Bound::Unbounded, std::ops::Bound::Unbounded)
    }
}

impl Walk for MappedReader {
    fn walk_table(&self) -> Table<'_> {
        self.table()
    }

    fn walk_is_v2(&self) -> bool {
        self.is_v2()
    }

    fn found<'r>(&'r self, key: &[u8], value: &[u8], at: u64) -> Result<Found<'r>> {
        MappedReader::found(self, key, value, at)
    }

    fn piece<'r>(&'r self, p: &Partition, i: usize) -> Result<TensorView<'r>> {
        MappedReader::piece(self, p, i)
    }
}
