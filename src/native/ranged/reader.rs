//! A native paramdex file read by ranges (issue 15; SPEC.md 8.4): open costs one request for
//! the footer and, usually, the index block (a speculative read of the object's tail), and one
//! more for the header's block when the tail does not hold it; `get` costs one request for the
//! tensor's index block (unless cached) and one for its record. Every tensor read so is checked
//! against its CRC32C: bytes from a network are never returned unchecked.
//!
//! The reader is a shell over the native engine (issue 26): the open (`native::open_index`),
//! the lookups and listings (the table over the read seam, `native::list_entry`), the checks of
//! an entry (`native::check_data`, `check_partition`, `piece_entry`), the record header and LoD
//! (`native::record_header`) and verify (`native::Tally` over `TensorView`s of the fetched
//! records) are the mapped reader's own. What is written here is fetching: the parallel fetch
//! (planned by `plan.rs`), the read-ahead of `get_ahead`, and the owned tensors it returns.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use bytes::BytesMut;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::name;
use crate::native::entry::Partition;
use crate::native::iter::{Found, Walk};
use crate::native::ranged::entry_source::{
    found_in, get_region, get_whole, get_whole_data, piece_in, EntrySource,
};
use crate::native::ranged::plan::plan_parts;
use crate::native::ranged::range::{Dest, Parallelism, RangeRead, ReadPart, RequestStats};
use crate::native::region::Region;
use crate::native::slice_key;
use crate::native::{
    check_data, check_partition, entry_dtype, hold_from, is_tensor_name, list_entry, open_index,
    piece_entry, record_header, slice_keys, validate_header, view_of_record, FileHeader,
    IndexEntry, Listed, LoadOptions, LoadProgress, MappedReader, Opened, SliceData, SlicePiece,
    Tally, TensorView, VerifyReport, ViewBytes,
};
use crate::record::MAX_RANK;
use crate::table::{Table, TableIndex, TableReadOptions};

/// How a `RangedReader` reads.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Bytes read from the end of the object at open: the footer, and the index block when it
    /// is no larger (its size grows with the number of index data blocks, about 60 bytes each:
    /// 256 KiB holds the index block of a file of several million tensors).
    pub tail_bytes: u64,
    /// Bytes of index data blocks kept after use.
    pub block_cache_bytes: usize,
    /// How tensors are fetched in parallel: by `RangedReader::get` for a tensor larger
    /// than a part, and by the whole-file loads when they are given no options of their own.
    pub load: LoadOptions,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            tail_bytes: 256 << 10,
            block_cache_bytes: 8 << 20,
            load: LoadOptions::default(),
        }
    }
}

/// What `RangedReader::scan_entries` calls for each tensor: name, its entry's value, offset
/// of its block.
type EntryVisitor<'a> = dyn FnMut(&[u8], &[u8], u64) -> Result<()> + 'a;

/// One tensor to fetch: where its data is and what it must check to.
#[derive(Clone, Debug)]
struct Want {
    name: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
    /// The bytes fetched: the data, with the record header before it for a tensor with LoD
    /// (whose offsets are in the header).
    range: Range<u64>,
    /// Offset of the data (`range.start` unless the record header is fetched too).
    data_at: u64,
    crc: u32,
    /// For verify: the tensor's name, its entry and where a slice sits (the record is
    /// fetched whole and checked as a mapped file's view).
    record: Option<Box<RecordOf>>,
    /// The record is compressed (SPEC.md 3.4): the bytes fetched are its stored data, decoded
    /// by `finish` (or by the view), and `crc` is the decoded data's.
    compressed: bool,
}

/// What verify checks a fetched record against: its tensor's name, its index entry, and where
/// a slice sits.
#[derive(Clone, Debug)]
struct RecordOf {
    name: Vec<u8>,
    entry: IndexEntry,
    slice: Option<Box<SlicePiece>>,
}

impl Want {
    /// The tensor from the bytes of `range`, `buf`, whose CRC32C is `crc` (of all of `buf`,
    /// when it was computed as the bytes arrived): its data checked against the stored CRC32C,
    /// and its LoD from the record header (the same decoding as a mapped view's).
    fn finish(self, mut buf: Vec<u8>, crc: Option<u32>, location: &str) -> Result<RemoteTensor> {
        self.check(&buf, crc, location)?;
        let head = self.head();
        if self.compressed {
            let shown = slice_key::display_key(&self.name);
            let lod = if head == 0 {
                Vec::new()
            } else {
                let h = crate::record::decode_head(&buf, self.range.start)
                    .map_err(|e| e.context(location))?;
                h.lod.to_vec()
            };
            let decoded_len = crate::record::data_len(self.dtype, &self.shape).unwrap_or(0);
            let at = crate::record::lossless::At {
                name: &shown,
                offset: self.data_at,
            };
            let data =
                crate::record::lossless::decode(&buf[head..], self.dtype, decoded_len, 0, at)
                    .map_err(|e| e.context(location))?;
            let got = crc32c(&data);
            if got != self.crc {
                return Err(Error::ChecksumMismatch {
                    what: "tensor data",
                    name: Some(shown),
                    offset: self.data_at,
                    len: decoded_len,
                    stored: self.crc,
                    computed: got,
                    context: Some(location.to_string()),
                });
            }
            return Ok(RemoteTensor {
                dtype: self.dtype,
                shape: self.shape,
                data,
                lod,
            });
        }
        let lod = if head == 0 {
            Vec::new()
        } else {
            let shown = slice_key::display_key(&self.name);
            let h = record_header(&buf, self.range.start, self.data_at, &shown)
                .map_err(|e| e.context(location))?;
            let lod = h.lod.to_vec();
            drop(h);
            buf.drain(..head);
            lod
        };
        Ok(RemoteTensor {
            dtype: self.dtype,
            shape: self.shape,
            data: buf,
            lod,
        })
    }

    /// Bytes of record header fetched before the data.
    fn head(&self) -> usize {
        usize::try_from(self.data_at - self.range.start).expect("inside the range")
    }

    /// Checks the data in `buf`, the bytes of `range`, against the stored CRC32C. `crc` is
    /// that of all of `buf` when it was computed as the bytes arrived (a parallel fetch): it
    /// serves when `buf` is the data alone; otherwise the data's is computed here, once.
    fn check(&self, buf: &[u8], crc: Option<u32>, location: &str) -> Result<()> {
        if self.compressed {
            // The checksum is the decoded data's: checked once decoded (`finish`, or the
            // view of the record).
            return Ok(());
        }
        let head = self.head();
        let got = if self.dtype == DType::Bytes {
            // A bytes value's checksum is TensorFlow's string checksum (SPEC.md 6.1).
            let shown = slice_key::display_key(&self.name);
            let masked = crate::native::bytes_value::entry_crc(&buf[head..], &shown, self.data_at)
                .map_err(|e| e.context(location))?;
            unmask_crc(masked)
        } else {
            match crc {
                Some(crc) if head == 0 => crc,
                _ => crc32c(&buf[head..]),
            }
        };
        if got != self.crc {
            return Err(Error::ChecksumMismatch {
                what: "tensor data",
                name: Some(slice_key::display_key(&self.name)),
                offset: self.data_at,
                len: self.range.end - self.data_at,
                stored: self.crc,
                computed: got,
                context: Some(location.to_string()),
            });
        }
        Ok(())
    }
}

/// Where a parallel load hands each tensor's bytes: what was asked, the bytes of its range,
/// and their CRC32C (computed as they arrived).
type RawSink<'a> = dyn FnMut(Want, Vec<u8>, u32) -> Result<()> + 'a;

/// The state of a parallel load: tensors' buffers, split into parts as parts start and joined
/// as they arrive; tensors handed over in the object's order once whole and checked.
struct Assembly {
    wants: Vec<Option<Want>>,
    /// The part of each tensor's buffer not yet given to a request.
    rest: Vec<Option<BytesMut>>,
    /// Received pieces of each tensor: (offset within the tensor, bytes, their CRC32C).
    pieces: Vec<Vec<(u64, BytesMut, u32)>>,
    /// Bytes of each tensor not received yet.
    missing: Vec<u64>,
    /// Parts' members by part number.
    members: Vec<Vec<(usize, Range<u64>)>>,
    next: usize,
    progress: LoadProgress,
}

impl Assembly {
    /// The destinations of part `id`: the next pieces of its tensors' buffers.
    fn dests(&mut self, id: usize) -> Vec<Dest> {
        let mut out = Vec::with_capacity(self.members[id].len());
        for (t, r) in &self.members[id] {
            let want = self.wants[*t]
                .as_ref()
                .expect("not handed over before its parts");
            let size = want.range.end - want.range.start;
            let rest = self.rest[*t].get_or_insert_with(|| {
                BytesMut::zeroed(usize::try_from(size).expect("checked against memory"))
            });
            let len = usize::try_from(r.end - r.start).expect("within the tensor");
            out.push(Dest::new(want.range.start + r.start, rest.split_to(len)));
        }
        out
    }

    /// Takes in a received part.
    fn received(&mut self, part: ReadPart) {
        let members = std::mem::take(&mut self.members[part.id]);
        for ((t, r), d) in members.into_iter().zip(part.dests) {
            self.missing[t] -= r.end - r.start;
            self.progress.bytes += r.end - r.start;
            let crc = d.crc();
            self.pieces[t].push((r.start, d.buf, crc));
        }
    }

    /// Hands over every tensor, in order, that is whole.
    fn deliver(&mut self, sink: &mut RawSink<'_>) -> Result<()> {
        while self.next < self.wants.len() && self.missing[self.next] == 0 {
            let t = self.next;
            self.next += 1;
            let want = self.wants[t].take().expect("handed over once");
            let mut pieces = std::mem::take(&mut self.pieces[t]);
            self.rest[t] = None;
            pieces.sort_by_key(|p| p.0);
            let mut it = pieces.into_iter();
            let (mut buf, mut got) = it.next().map(|p| (p.1, p.2)).unwrap_or_default();
            for (_, p, crc) in it {
                // The pieces' checksums, computed as their bytes arrived, combined.
                got = crc32c::crc32c_combine(got, crc, p.len());
                // Pieces of one allocation, in order: joined without copying.
                buf.unsplit(p);
            }
            self.progress.tensors += 1;
            sink(want, Vec::from(buf), got)?;
        }
        Ok(())
    }
}

/// One tensor read by ranges: its bytes, checked against its CRC32C, and its LoD. The same
/// type as a mapped file's loads give ([`crate::OwnedTensor`]); the name stays for callers of
/// the ranged reader.
pub type RemoteTensor = crate::native::OwnedTensor;

/// One entry of a remote file's index, as a listing gives it (no data read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    /// The tensor's name.
    pub name: Vec<u8>,
    /// Element type.
    pub dtype: DType,
    /// Shape (a tensor stored in slices: the whole tensor's).
    pub shape: Vec<u64>,
    /// Data bytes (0 for a tensor stored in slices, whose slices hold them).
    pub size: u64,
    /// Bytes the data takes in the file: `size`, or for a compressed record (SPEC.md 3.4) its
    /// stored bytes.
    pub stored_size: u64,
    /// Number of slices for a tensor stored in slices, else 0.
    pub slices: u32,
    /// LoD levels (their offsets are in the record, read with the tensor).
    pub lod_levels: u32,
}

/// A native paramdex file (not a sharded checkpoint's index, yet) read by ranges.
#[derive(Debug)]
pub struct RangedReader {
    src: Arc<dyn RangeRead>,
    index: TableIndex,
    header: FileHeader,
    /// The bytes read at open, from `tail_start` to the end: blocks inside are served from it
    /// (the table reads the others through the seam, keeping them in its block cache).
    tail: Vec<u8>,
    tail_start: u64,
    opts: RemoteOptions,
    ahead: Mutex<ReadAhead>,
}

/// What `RangedReader::get_ahead` keeps: the name asked last, the whole tensors in name
/// order (once a read-ahead starts), and the tensors fetched ahead and not asked for yet.
#[derive(Debug, Default)]
struct ReadAhead {
    last: Option<Vec<u8>>,
    order: Option<Vec<Want>>,
    ready: HashMap<Vec<u8>, RemoteTensor>,
}

impl RangedReader {
    /// Opens the native file `src`: reads its tail (footer and, usually, the index block), then
    /// the header's block if the tail does not hold it, and checks them as [`crate::Reader`]
    /// does (SPEC.md 8.2).
    pub fn open(src: Arc<dyn RangeRead>, opts: RemoteOptions) -> Result<RangedReader> {
        let r = Self::open_native(src, opts)?;
        if !r.header.shards.is_empty() {
            return Err(Error::Unsupported(format!(
                "{}: the index of a sharded checkpoint (open it with RangedSharded, which \
                 reads its data objects)",
                r.location()
            )));
        }
        Ok(r)
    }

    /// `RangedReader::open` of any native file, a sharded checkpoint's index included (whose
    /// header is checked as SPEC.md 12.4 says; its entries point into other objects).
    pub(crate) fn open_native(
        src: Arc<dyn RangeRead>,
        opts: RemoteOptions,
    ) -> Result<RangedReader> {
        let location = src.location().to_string();
        let table_opts = TableReadOptions {
            verify_checksums: true,
            cache_capacity: opts.block_cache_bytes,
            hash_index: true,
        };
        // The same open as a mapped file's; only the reads differ.
        let Opened {
            held,
            held_start,
            index,
            header,
            first_block,
        } = open_index(&*src, opts.tail_bytes, false, &table_opts, &location)
            .map_err(|e| e.context(&location))?;
        validate_header(&header, first_block, &location)?;
        Ok(RangedReader {
            tail: held.into_owned(),
            tail_start: held_start,
            src,
            index,
            header,
            opts,
            ahead: Mutex::new(ReadAhead::default()),
        })
    }

    /// The index table: the blocks the open read, the others read through the seam.
    pub(crate) fn table(&self) -> Table<'_> {
        Table::new_ranged(&self.tail, self.tail_start, &*self.src, &self.index)
    }

    /// The bytes from the first index data block to the end (and their offset): what the open
    /// read, and (for a large index) the part before it in one more request.
    pub(crate) fn index_bytes(&self) -> Result<(Cow<'_, [u8]>, u64)> {
        let first = self.index.first_data_offset().unwrap_or(self.tail_start);
        hold_from(
            &*self.src,
            Cow::Borrowed(&self.tail),
            self.tail_start,
            first,
        )
    }

    /// The index table over `bytes`, the file's from `base` on (`RangedReader::index_bytes`).
    pub(crate) fn table_over<'a>(&'a self, bytes: &'a [u8], base: u64) -> Table<'a> {
        Table::new_tail(bytes, base, &self.index)
    }

    /// Whether version 2 rules apply (names starting with a NUL byte are slice keys).
    fn is_v2(&self) -> bool {
        self.header.format_version >= 2
    }

    /// The decoded header entry.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Number of index data blocks.
    pub(crate) fn data_blocks(&self) -> usize {
        self.index.data_blocks()
    }

    /// Bytes of the index table (data blocks, metaindex, index block, footer).
    pub(crate) fn index_len(&self) -> u64 {
        self.src.len().saturating_sub(self.header.records_len)
    }

    /// The options the reader was opened with.
    pub fn options(&self) -> &RemoteOptions {
        &self.opts
    }

    /// Where the object is.
    pub fn location(&self) -> &str {
        self.src.location()
    }

    /// The object read.
    pub fn source(&self) -> &Arc<dyn RangeRead> {
        &self.src
    }

    /// Every tensor of the index in name order, from `start` on (slice keys left out): one
    /// request for the index's data blocks not read yet (they lie together, between the records
    /// and the index block), however many tensors there are.
    pub fn list_from(&self, start: &[u8]) -> Result<Vec<EntryInfo>> {
        let mut out = Vec::new();
        self.scan_entries(start, &mut |key, value, at| {
            let l = list_entry(key, value, at, self.is_v2(), |key, e, dtype| {
                self.check_listed(key, &e, dtype, at)
            })
            .map_err(|e| e.context(self.location()))?;
            out.push(entry_info(l));
            Ok(())
        })?;
        Ok(out)
    }

    /// What the index says of the tensor `name` (its entry checked as a listing checks it),
    /// from its own index block: one request at most, whatever the size of the index.
    pub fn entry_of(&self, name: &[u8]) -> Result<Option<EntryInfo>> {
        if !is_tensor_name(name, self.is_v2()) {
            return Ok(None);
        }
        let ctx = |e: Error| e.context(self.location());
        // A seek, as a mapped file's `info` (a listing from `name`): the index block's binary
        // search and one data block, read through the seam unless the open read it.
        let table = self.table();
        let mut it = table.iter();
        it.seek(name).map_err(ctx)?;
        if !it.valid() || it.key() != name {
            return Ok(None);
        }
        let at = it.block_offset();
        list_entry(name, it.value(), at, self.is_v2(), |key, e, dtype| {
            self.check_listed(key, &e, dtype, at)
        })
        .map(|l| Some(entry_info(l)))
        .map_err(ctx)
    }

    /// Checks the CRC32C of every index block (data blocks, metaindex, index block, hash index
    /// block) and the hash index against the table, as a mapped file's verify does; one
    /// request for the index blocks the open did not read. Returns the blocks checked.
    pub fn verify_index(&self) -> Result<u64> {
        let (all, base) = self.index_bytes()?;
        self.table_over(&all, base)
            .verify_all_blocks()
            .map_err(|e| e.context(self.location()))
    }

    /// The LoD of tensor `name` (stored whole), from its record's header as a mapped view's
    /// [`crate::TensorView::lod`] reads it (the header's checksum checked, not the data's):
    /// one request for its record unless the open read it. `Ok(None)` if absent.
    pub fn lod(&self, name: &[u8]) -> Result<Option<Vec<Vec<u64>>>> {
        let Some((e, _, at)) = self.lookup(name)? else {
            return Ok(None);
        };
        self.check_unsharded(|| slice_key::display_key(name), &e, at)?;
        self.lod_of(name, &e, at).map(Some)
    }

    /// The LoD of entry `e` (of `name`, in the block at `at`) of this file, whose records hold
    /// it: from its record's header (one request unless the open read it), none without LoD
    /// levels. `shard_id` is the caller's to check.
    pub(crate) fn lod_of(&self, name: &[u8], e: &IndexEntry, at: u64) -> Result<Vec<Vec<u64>>> {
        let w = self.whole_record_want(name, e, at)?;
        if e.lod_levels == 0 {
            return Ok(Vec::new());
        }
        let bytes = if w.range.start >= self.tail_start {
            let a = usize::try_from(w.range.start - self.tail_start).expect("inside the tail");
            let b = usize::try_from(w.range.end - self.tail_start).expect("inside the tail");
            Cow::Borrowed(&self.tail[a..b])
        } else {
            self.src.read_at(w.range.clone())?
        };
        let shown = slice_key::display_key(name);
        let h = record_header(&bytes, w.range.start, w.data_at, &shown)
            .map_err(|err| err.context(self.location()))?;
        Ok(h.lod.to_vec())
    }

    /// The checks a listing makes of a whole tensor's entry, as a mapped file's listing: in a
    /// single file, those of its data ([`check_data`], `shard_id` 0); in a sharded
    /// checkpoint's index, whose data objects a listing does not open, those of the entry alone.
    fn check_listed(&self, key: &[u8], e: &IndexEntry, dtype: DType, at: u64) -> Result<()> {
        if !self.header.shards.is_empty() {
            return check_data(key, e, dtype, at, u64::MAX, None).map(drop);
        }
        self.check_unsharded(|| slice_key::display_key(key), e, at)?;
        check_data(key, e, dtype, at, self.header.records_len, None).map(drop)
    }

    /// Checks everything a mapped file's [`crate::Reader::verify`] checks, with the same
    /// code: every index block's CRC32C and the hash index (`RangedReader::verify_index`),
    /// every record (whole tensors and slices) fetched whole by parallel ranged GETs (as
    /// `RangedReader::load_all` with `opts`) and checked against its index entry and its data
    /// CRC32C, the header's counts, and that the records tile the records region.
    pub fn verify(&self, opts: &LoadOptions) -> Result<VerifyReport> {
        let ctx = |e: Error| e.context(self.location());
        let blocks = self.verify_index()?;
        let first = self.index.first_data_offset().unwrap_or(self.tail_start);
        let (all, base) = self.index_bytes()?;
        let table = self.table_over(&all, base);
        let mut tally = Tally::new();
        let mut wants = Vec::new();
        let mut it = table.iter();
        while it.next().map_err(ctx)? {
            let (key, value, at) = (it.key(), it.value(), it.block_offset());
            if !is_tensor_name(key, self.is_v2()) {
                continue;
            }
            let mut e = IndexEntry::default();
            MappedReader::decode_entry(&mut e, key, value, at).map_err(ctx)?;
            let dtype = entry_dtype(key, &e).map_err(ctx)?;
            tally.tensors += 1;
            if e.num_slices == 0 {
                self.check_unsharded(|| slice_key::display_key(key), &e, at)?;
                wants.push(self.record_want(key, key, e, at, None)?);
                continue;
            }
            let p = check_partition(key, &e, dtype, value, at, self.is_v2()).map_err(ctx)?;
            for i in 0..p.regions.len() {
                let (se, _, sat, piece) = piece_entry(&table, &p, i).map_err(ctx)?;
                self.check_unsharded(|| slice_key::display_key(&piece.key), &se, sat)?;
                let slice_key = piece.key.clone();
                wants.push(self.record_want(&slice_key, key, se, sat, Some(Box::new(piece)))?);
            }
        }
        wants.sort_by_key(|w| (w.range.start, w.range.end));
        let location = self.location();
        self.fetch_raw(wants, opts, usize::MAX, &mut |want, buf, _| {
            let Some(item) = want.record else {
                return Ok(());
            };
            let RecordOf { name, entry, slice } = *item;
            let v = view_of_record(
                location,
                &name,
                slice,
                want.dtype,
                entry,
                want.range.start,
                ViewBytes::Lent(&buf),
            )?;
            tally.add(&v).map_err(|e| e.context(location))?;
            v.verify_crc().map_err(|e| e.context(location))?;
            tally.data_bytes += v.data().len() as u64;
            tally.uncount_framing(&v).map_err(|e| e.context(location))?;
            Ok(())
        })?;
        let keyed = slice_keys(&table, self.is_v2()).map_err(ctx)?;
        tally
            .finish(&self.header, first, keyed, blocks, |_| Ok(()))
            .map_err(ctx)
    }

    /// What fetching the whole record of entry `e` (under `key`, of tensor `name`; in the
    /// block at `at`) for verify means, its entry checked as `RangedReader::want_of` does.
    fn record_want(
        &self,
        key: &[u8],
        name: &[u8],
        e: IndexEntry,
        at: u64,
        slice: Option<Box<SlicePiece>>,
    ) -> Result<Want> {
        let mut w = self.whole_record_want(key, &e, at)?;
        w.record = Some(Box::new(RecordOf {
            name: name.to_vec(),
            entry: e,
            slice,
        }));
        Ok(w)
    }

    /// Calls `f` (name, entry's value, offset of its block) for every tensor of the index in
    /// name order from `start` on (the header and, in a version 2 file, slice keys left
    /// out), with the index data blocks read as `RangedReader::list_from` says.
    fn scan_entries(&self, start: &[u8], f: &mut EntryVisitor<'_>) -> Result<()> {
        let n = self.index.data_blocks();
        if n == 0 {
            return Ok(());
        }
        let (all, base) = self.index_bytes()?;
        let table = self.table_over(&all, base);
        let mut it = table.iter();
        it.seek(start)?;
        while it.valid() {
            let (key, value, at) = (it.key(), it.value(), it.block_offset());
            if is_tensor_name(key, self.is_v2()) {
                f(key, value, at)?;
            }
            it.next()?;
        }
        Ok(())
    }

    /// The index entry under `key` (a tensor's name or a slice key), if any: decoded, its
    /// value, and the offset of its block.
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>> {
        if key.is_empty() {
            return Ok(None);
        }
        // Through the table, as a mapped file's lookups: the hash index when the bytes the
        // open read hold it, else a binary search of the index block and one data block.
        self.table()
            .get(key, |v, at| -> Result<(IndexEntry, Vec<u8>, u64)> {
                let mut e = IndexEntry::default();
                MappedReader::decode_entry(&mut e, key, v, at)?;
                Ok((e, v.to_vec(), at))
            })?
            .transpose()
    }

    /// `RangedReader::get` for a caller that reads tensors one by one in name order (a
    /// conversion, an export): from the second name asked in ascending order on, the tensors
    /// that follow it in name order are fetched ahead, [`LoadOptions::window_bytes`] of them
    /// at a time (at least one tensor), by parallel ranged GETs, and served from memory when
    /// asked. A name out of order drops what was fetched ahead and reads as `get` does.
    pub fn get_ahead(&self, name: impl AsRef<[u8]>) -> Result<Option<RemoteTensor>> {
        let name = name.as_ref();
        let mut ra = self.ahead.lock().unwrap_or_else(|p| p.into_inner());
        let ascending = ra.last.as_deref().is_some_and(|l| name > l);
        ra.last = Some(name.to_vec());
        if let Some(t) = ra.ready.remove(name) {
            return Ok(Some(t));
        }
        ra.ready.clear();
        if !ascending {
            drop(ra);
            return get_whole_data(self, name);
        }
        if ra.order.is_none() {
            let mut order = Vec::new();
            let scanned = self.scan_entries(b"", &mut |key, value, at| {
                // A tensor that cannot be fetched so (stored in slices, a bad entry) is left
                // out: asked for, it is read by `get`, which says what is wrong with it.
                if let Ok(w) =
                    IndexEntry::decode(value, at, MAX_RANK).and_then(|e| self.want(key, &e, at))
                {
                    order.push(w);
                }
                Ok(())
            });
            // An index block that cannot be read (damaged) ends the order there: the tensors
            // after it are read by `get`, which reads only their own blocks, as a mapped
            // file's lookups do (a damaged block never makes another block's tensors
            // unreadable).
            drop(scanned);
            ra.order = Some(order);
        }
        let order = ra.order.as_ref().expect("just set");
        let Ok(at) = order.binary_search_by(|w| w.name.as_slice().cmp(name)) else {
            drop(ra);
            return get_whole_data(self, name);
        };
        let mut wants = Vec::new();
        let mut bytes = 0u64;
        for w in &order[at..] {
            if !wants.is_empty()
                && bytes + (w.range.end - w.range.start) > self.opts.load.window_bytes
            {
                break;
            }
            bytes += w.range.end - w.range.start;
            wants.push(w.clone());
        }
        wants.sort_by_key(|w| (w.range.start, w.range.end));
        let mut ready = HashMap::with_capacity(wants.len());
        let mut asked = None;
        let location = self.location();
        self.fetch_raw(wants, &self.opts.load, usize::MAX, &mut |want, buf, crc| {
            let n = want.name.clone();
            match want.finish(buf, Some(crc), location) {
                Ok(t) => {
                    ready.insert(n, t);
                }
                // The tensor asked for fails as `get` would fail it; one fetched ahead is left
                // out (asked for, `get` reads it and says what is wrong with it): a damaged
                // tensor never makes its neighbours unreadable.
                Err(e) if n == name => asked = Some(e),
                Err(_) => {}
            }
            Ok(())
        })?;
        if let Some(e) = asked {
            return Err(e);
        }
        let out = ready.remove(name);
        ra.ready = ready;
        Ok(out)
    }

    /// Requests made, bytes received and retries so far by the object this reader reads
    /// (the open's included).
    pub fn stats(&self) -> RequestStats {
        self.src.stats()
    }

    /// Every tensor of the file, in the object's order (which is name order for a file whose
    /// records are sorted), fetched in parallel as `opts` says, each checked against its
    /// CRC32C. Holds them all in memory: `RangedReader::for_each` hands them over one by one.
    ///
    /// Errors: [`Error::Sliced`] (before any data is read) for a tensor stored in slices, and
    /// those of `RangedReader::get`.
    pub fn load_all(&self, opts: &LoadOptions) -> Result<Vec<(Vec<u8>, RemoteTensor)>> {
        self.fetch_all(self.all_wants()?, opts)
    }

    /// The tensors `names` (each once, however often named), fetched in parallel as `opts`
    /// says, in the object's order. Errors: [`Error::NotFound`] for a name the file does not
    /// hold (before any data is read), and those of `RangedReader::load_all`.
    pub fn load_many<N: AsRef<[u8]>>(
        &self,
        names: &[N],
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, RemoteTensor)>> {
        let mut names: Vec<&[u8]> = names.iter().map(|n| n.as_ref()).collect();
        names.sort_unstable();
        names.dedup();
        let mut wants = Vec::with_capacity(names.len());
        for n in names {
            let Some((e, at)) = self.entry(n)? else {
                return Err(Error::NotFound {
                    name: name::display(n),
                    path: self.location().to_string(),
                });
            };
            wants.push(self.want(n, &e, at)?);
        }
        self.fetch_all(wants, opts)
    }

    /// Every tensor of the file, fetched in parallel as `opts` says and handed to `sink` (name,
    /// tensor) in the object's order as soon as it and those before it are whole and checked;
    /// memory stays within about [`LoadOptions::window_bytes`] plus the largest tensor. An
    /// error from `sink` ends the load.
    pub fn for_each(
        &self,
        opts: &LoadOptions,
        mut sink: impl FnMut(Vec<u8>, RemoteTensor) -> Result<()>,
    ) -> Result<()> {
        let wants = self.all_wants()?;
        let window = usize::try_from(opts.window_bytes / opts.part_len()).unwrap_or(usize::MAX);
        self.fetch(wants, opts, window, &mut sink)
    }

    /// The byte ranges `RangedReader::load_all` (and `RangedReader::for_each`) with
    /// `opts` asks for, one request each, in the object's order: to see what a load will cost.
    pub fn load_plan(&self, opts: &LoadOptions) -> Result<Vec<Range<u64>>> {
        let extents: Vec<Range<u64>> = self.all_wants()?.into_iter().map(|w| w.range).collect();
        Ok(plan_parts(&extents, opts.part_len(), opts.max_gap)
            .into_iter()
            .map(|p| p.range)
            .collect())
    }

    /// The tensors of `items` (key, entry, offset of its block: entries whose data this file
    /// holds, `shard_id` the caller's to check), each checked against this file as a read
    /// checks it before any is fetched, then fetched in parallel as `opts` says and returned in
    /// this file's order: a sharded checkpoint's load of one data file.
    pub(crate) fn load_entries(
        &self,
        items: &[(Vec<u8>, IndexEntry, u64)],
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, RemoteTensor)>> {
        let mut wants = Vec::with_capacity(items.len());
        for (key, e, at) in items {
            wants.push(self.want_of(key, e, *at)?);
        }
        self.fetch_all(wants, opts)
    }

    /// Every tensor of `wants`, fetched in parallel as `opts` says and collected in the
    /// object's order: the loads that hold all they load in memory.
    fn fetch_all(
        &self,
        mut wants: Vec<Want>,
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, RemoteTensor)>> {
        wants.sort_by_key(|w| (w.range.start, w.range.end));
        let mut out = Vec::with_capacity(wants.len());
        self.fetch(wants, opts, usize::MAX, &mut |n, t| {
            out.push((n, t));
            Ok(())
        })?;
        Ok(out)
    }

    /// Every whole tensor of the index, in the object's order.
    fn all_wants(&self) -> Result<Vec<Want>> {
        let mut wants = Vec::new();
        self.scan_entries(b"", &mut |key, value, at| {
            let mut e = IndexEntry::default();
            MappedReader::decode_entry(&mut e, key, value, at)?;
            wants.push(self.want(key, &e, at)?);
            Ok(())
        })?;
        wants.sort_by_key(|w| (w.range.start, w.range.end));
        Ok(wants)
    }

    /// Fetches `wants` (sorted by offset) in parts, `window` parts ahead at most, handing each
    /// tensor to `sink` in order.
    fn fetch(
        &self,
        wants: Vec<Want>,
        opts: &LoadOptions,
        window: usize,
        sink: &mut dyn FnMut(Vec<u8>, RemoteTensor) -> Result<()>,
    ) -> Result<()> {
        let location = self.location();
        self.fetch_raw(wants, opts, window, &mut |want, buf, crc| {
            let name = want.name.clone();
            sink(name, want.finish(buf, Some(crc), location)?)
        })
    }

    /// `RangedReader::fetch`, handing over each tensor's bytes as they were read. `wants`
    /// are sorted by (start, end): an empty range (a tensor of no data) at the offset where
    /// another tensor's record starts comes before it, and overlaps nothing.
    fn fetch_raw(
        &self,
        wants: Vec<Want>,
        opts: &LoadOptions,
        window: usize,
        sink: &mut RawSink<'_>,
    ) -> Result<()> {
        let extents: Vec<Range<u64>> = wants.iter().map(|w| w.range.clone()).collect();
        if extents.windows(2).any(|w| w[1].start < w[0].end) {
            return Err(Error::corrupt(
                "index entry",
                0,
                format!("{}: two tensors' data overlap", self.location()),
            ));
        }
        let plan = plan_parts(&extents, opts.part_len(), opts.max_gap);
        let n = wants.len();
        let mut a = Assembly {
            missing: extents.iter().map(|r| r.end - r.start).collect(),
            progress: LoadProgress {
                bytes: 0,
                total_bytes: extents.iter().map(|r| r.end - r.start).sum(),
                tensors: 0,
                total_tensors: n as u64,
            },
            wants: wants.into_iter().map(Some).collect(),
            rest: (0..n).map(|_| None).collect(),
            pieces: (0..n).map(|_| Vec::new()).collect(),
            members: Vec::with_capacity(plan.len()),
            next: 0,
        };
        let mut ranges = Vec::with_capacity(plan.len());
        for p in plan {
            ranges.push(p.range);
            a.members.push(p.members);
        }
        a.deliver(sink)?;
        let a = Mutex::new(a);
        let lock = || a.lock().unwrap_or_else(|p| p.into_inner());
        let mut parts = ranges.into_iter().enumerate().map(|(id, range)| ReadPart {
            id,
            range,
            dests: lock().dests(id),
        });
        let how = Parallelism {
            concurrency: opts.concurrency.max(1),
            window,
        };
        self.src.read_parts(&mut parts, how, &mut |part| {
            let mut a = lock();
            a.received(part);
            a.deliver(sink)?;
            if let Some(p) = &opts.progress {
                p(a.progress);
            }
            Ok(())
        })?;
        let mut a = lock();
        a.deliver(sink)?;
        if a.next != n {
            return Err(Error::remote(
                self.location(),
                crate::error::RemoteProblem::Truncated,
                format!("a parallel load ended with {} of {n} tensors", a.next),
            ));
        }
        Ok(())
    }

    /// The index entry of the tensor `name`, if any, and the offset of its block.
    fn entry(&self, name: &[u8]) -> Result<Option<(IndexEntry, u64)>> {
        Ok(self.lookup(name)?.map(|(e, _, at)| (e, at)))
    }

    /// What fetching the tensor `name` (entry `e`, at `at`) of this single file means, checked
    /// against the file (`RangedReader::want_of`, and `shard_id` 0).
    fn want(&self, name: &[u8], e: &IndexEntry, at: u64) -> Result<Want> {
        self.check_unsharded(|| name::display(name), e, at)?;
        self.want_of(name, e, at)
    }

    /// [`Error::Corrupt`] for an entry `e` (at `at`; its tensor shown as `shown()` says) that
    /// names a data object other than this file (`shard_id` not 0).
    fn check_unsharded(
        &self,
        shown: impl FnOnce() -> String,
        e: &IndexEntry,
        at: u64,
    ) -> Result<()> {
        if e.shard_id != 0 {
            return Err(Error::corrupt(
                "index entry",
                at,
                format!(
                    "{}: tensor {}: shard_id {} in a file that is not a sharded checkpoint's \
                     index",
                    self.location(),
                    shown(),
                    e.shard_id
                ),
            ));
        }
        Ok(())
    }

    /// The data of entry `e` (under `key`, in the block at `at`) of this file, whose records
    /// hold it: its size checked against its shape, its range against the records region, its
    /// bytes (one request; parallel requests of [`LoadOptions::part_size`] for a tensor larger
    /// than a part) against its CRC32C. `shard_id` is the caller's to check.
    pub(crate) fn read_data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor> {
        let want = self.want_of(key, e, at)?;
        self.read_want(want)
    }

    /// Checks entry `e` (under `key`, in the block at `at`) against this file as a read checks
    /// it (stored whole, its size fitting its shape, its range inside the records region),
    /// without reading its bytes; returns their number.
    pub(crate) fn check_entry(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<u64> {
        self.want_of(key, e, at).map(|w| w.range.end - w.data_at)
    }

    /// The bytes of `want`, checked against its CRC32C: from the bytes the open read when
    /// they hold it (no request), else one ranged GET, or parallel ones for a tensor larger
    /// than a part.
    fn read_want(&self, want: Want) -> Result<RemoteTensor> {
        let (want, buf, crc) = self.read_raw(want)?;
        want.finish(buf, crc, self.location())
    }

    /// The bytes of `want`'s range as `RangedReader::read_want` reads them, not yet checked,
    /// and their CRC32C when a parallel fetch computed it as they arrived.
    fn read_raw(&self, want: Want) -> Result<(Want, Vec<u8>, Option<u32>)> {
        let len = want.range.end - want.range.start;
        if len > self.opts.load.part_len() {
            let mut out = None;
            self.fetch_raw(
                vec![want],
                &self.opts.load,
                usize::MAX,
                &mut |w, buf, crc| {
                    out = Some((w, buf, Some(crc)));
                    Ok(())
                },
            )?;
            return out.ok_or_else(|| {
                Error::InvalidArgument(format!("{}: a load returned nothing", self.location()))
            });
        }
        let data = if want.range.start >= self.tail_start {
            let a = usize::try_from(want.range.start - self.tail_start).expect("inside the tail");
            let b = usize::try_from(want.range.end - self.tail_start).expect("inside the tail");
            self.tail[a..b].to_vec()
        } else {
            self.src.read(want.range.clone())?
        };
        Ok((want, data, None))
    }

    /// The view of the whole tensor or slice of entry `e` (under `key`, a tensor's name or a
    /// slice key; in the block at `at`) of this file, whose records hold it: its record
    /// (header and data) read as `RangedReader::read_data` reads the data, the data checked
    /// against its CRC32C. The view holds the bytes (its data aligned for every element type)
    /// and reads its LoD and checks its record as a mapped file's view does. `shard_id` is the
    /// caller's to check.
    pub(crate) fn read_view(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<TensorView<'_>> {
        let (want, buf, crc) = self.read_raw(self.whole_record_want(key, e, at)?)?;
        want.check(&buf, crc, self.location())?;
        let head = want.head();
        view_of_record(
            self.location(),
            key,
            None,
            want.dtype,
            e.clone(),
            want.range.start,
            ViewBytes::aligned(buf, head),
        )
        .map_err(|err| err.context(self.location()))
    }

    /// `RangedReader::want_of` with the whole record fetched: its header (the LoD, and what
    /// a view's record checks read) with its data; the entry's checks put both inside the
    /// records region.
    fn whole_record_want(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<Want> {
        let mut w = self.want_of(key, e, at)?;
        w.range.start = w.data_at - u64::from(e.record_header_len);
        Ok(w)
    }

    /// What fetching entry `e` (under `key`, a tensor's name or a slice key; in the block at
    /// `at`) means, checked against the file: stored whole, its size fitting its shape, its
    /// range inside the records region. `shard_id` is the caller's to check.
    fn want_of(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<Want> {
        let ctx = |err: Error| err.context(self.location());
        if e.num_slices != 0 {
            return Err(Error::Sliced {
                name: slice_key::display_key(key),
                path: self.location().to_string(),
                slices: u64::from(e.num_slices),
            });
        }
        let dtype = entry_dtype(key, e).map_err(ctx)?;
        // The same checks as a mapped file's view of the entry.
        let (end, record) =
            check_data(key, e, dtype, at, self.header.records_len, None).map_err(ctx)?;
        // A tensor with LoD is fetched with its record header, which holds the offsets.
        let start = if e.lod_levels > 0 { record } else { e.offset };
        if usize::try_from(end - start).is_err() {
            return Err(ctx(Error::corrupt(
                "index entry",
                at,
                format!(
                    "tensor {}: {} bytes do not fit in memory",
                    slice_key::display_key(key),
                    e.size
                ),
            )));
        }
        Ok(Want {
            name: key.to_vec(),
            dtype,
            shape: e.shape.to_vec(),
            range: start..end,
            data_at: e.offset,
            crc: unmask_crc(e.crc32c),
            record: None,
            compressed: e.codec != 0,
        })
    }

    /// The tensor `name` (`Ok(None)` if absent): one request for its index block unless it
    /// was read before, one for its record; its data checked against its CRC32C.
    ///
    /// Errors: [`Error::Sliced`] for a tensor stored in slices (read it with
    /// `RangedReader::get_slice`); [`Error::ChecksumMismatch`] for data that is not what was
    /// written; [`Error::Corrupt`] for an entry that does not fit the object.
    pub fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<TensorView<'_>>> {
        get_whole(self, name.as_ref())
    }

    /// The region `region` of tensor `name`, stored whole or in slices (`Ok(None)` if absent):
    /// each stored tensor or slice holding part of it read whole (one request each, its index
    /// block unless cached) and checked against its CRC32C, the region copied out of them.
    ///
    /// Errors: as [`crate::Reader::get_slice`], and as `RangedReader::get`.
    pub fn get_slice(
        &self,
        name: impl AsRef<[u8]>,
        region: &Region,
    ) -> Result<Option<SliceData<'static>>> {
        get_region(self, name.as_ref(), region)
    }
}

impl EntrySource for RangedReader {
    fn place(&self) -> &str {
        self.location()
    }

    fn is_v2(&self) -> bool {
        RangedReader::is_v2(self)
    }

    fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>> {
        RangedReader::lookup(self, key)
    }

    fn index_table(&self) -> Table<'_> {
        self.table()
    }

    fn data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor> {
        self.check_unsharded(|| slice_key::display_key(key), e, at)?;
        self.read_data(key, e, at)
    }

    fn view(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<TensorView<'_>> {
        self.check_unsharded(|| slice_key::display_key(key), e, at)?;
        self.read_view(key, e, at)
    }

    fn data_file(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<(String, u64)> {
        self.check_unsharded(|| slice_key::display_key(key), e, at)?;
        Ok((self.location().to_string(), self.check_entry(key, e, at)?))
    }
}

/// A listing's entry as the remote readers give it.
pub(crate) fn entry_info(l: Listed) -> EntryInfo {
    EntryInfo {
        name: l.name,
        dtype: l.dtype,
        shape: l.shape.to_vec(),
        size: if l.slices != 0 { 0 } else { l.nbytes },
        stored_size: if l.slices != 0 { 0 } else { l.stored },
        slices: u32::try_from(l.slices).unwrap_or(u32::MAX),
        lod_levels: l.lod_levels,
    }
}

impl Walk for RangedReader {
    fn walk_table(&self) -> Table<'_> {
        self.table()
    }

    fn walk_is_v2(&self) -> bool {
        self.is_v2()
    }

    fn found<'r>(&'r self, key: &[u8], value: &[u8], at: u64) -> Result<Found<'r>> {
        found_in(self, key, value, at)
    }

    fn piece<'r>(&'r self, p: &Partition, i: usize) -> Result<TensorView<'r>> {
        piece_in(self, p, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remote::FileRange;
    use crate::{Tensor, Writer, WriterOptions};

    fn tensor_bytes(i: usize, len: usize) -> Vec<u8> {
        (0..len).map(|k| (k * 31 + i * 7 + k / 251) as u8).collect()
    }

    /// A native file of tensors of mixed sizes (one empty, some larger than the parts used
    /// below); their names and bytes.
    fn write_file(path: &std::path::Path) -> Vec<(String, Vec<u8>)> {
        let sizes = [
            100,
            0,
            70_000,
            5,
            300_000,
            64,
            64,
            1 << 20,
            3,
            128_000,
            9_999,
            1,
        ];
        let mut w = Writer::create_with(
            path,
            WriterOptions {
                sync: false,
                ..Default::default()
            },
        )
        .unwrap();
        let mut out = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let name = format!("t{i:02}");
            let data = tensor_bytes(i, n);
            w.add(&name, Tensor::new(DType::UInt8, &[n as u64], &data))
                .unwrap();
            out.push((name, data));
        }
        w.finish().unwrap();
        out
    }

    fn opts(part: u64, concurrency: usize) -> LoadOptions {
        LoadOptions {
            concurrency,
            part_size: part,
            max_gap: 4096,
            window_bytes: 2 * part,
            ..LoadOptions::default()
        }
    }

    #[test]
    fn load_all_over_file_range_reads_every_tensor_in_planned_parts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pdx");
        let want = write_file(&path);
        for part in [4096u64, 64 << 10, 8 << 20] {
            let src = Arc::new(FileRange::open(&path).unwrap());
            let r = RangedReader::open(src.clone(), RemoteOptions::default()).unwrap();
            let before = r.stats().requests;
            let got = r.load_all(&opts(part, 4)).unwrap();
            let names: Vec<String> = got
                .iter()
                .map(|(n, _)| String::from_utf8(n.clone()).unwrap())
                .collect();
            assert_eq!(names, want.iter().map(|w| w.0.clone()).collect::<Vec<_>>());
            for ((_, t), (_, data)) in got.iter().zip(&want) {
                assert!(t.data == *data);
            }
            // One request per planned part (the index was read at open).
            let extents: Vec<_> = r
                .all_wants()
                .unwrap()
                .iter()
                .map(|w| w.range.clone())
                .collect();
            let parts = plan_parts(&extents, part, 4096).len() as u64;
            assert_eq!(r.stats().requests - before, parts, "part size {part}");
            if part == 8 << 20 {
                assert_eq!(parts, 1, "the whole records region fits one part");
            } else {
                let data: u64 = want.iter().map(|w| w.1.len() as u64).sum();
                assert!(
                    parts >= data / part,
                    "{parts} parts of {part} for {data} bytes"
                );
            }
        }
    }

    #[test]
    fn load_many_for_each_and_large_get_over_file_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pdx");
        let want = write_file(&path);
        let src = Arc::new(FileRange::open(&path).unwrap());
        let ro = RemoteOptions {
            load: opts(64 << 10, 3),
            ..Default::default()
        };
        let r = RangedReader::open(src.clone(), ro).unwrap();
        // A subset, named out of order and twice: once each, in the file's order.
        let got = r
            .load_many(&["t07", "t02", "t07", "t01"], &opts(4096, 2))
            .unwrap();
        let names: Vec<&[u8]> = got.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(names, vec![&b"t01"[..], b"t02", b"t07"]);
        assert!(got[2].1.data == want[7].1);
        assert!(matches!(
            r.load_many(&["t01", "nope"], &opts(4096, 2)),
            Err(Error::NotFound { .. })
        ));
        // for_each with a small window, and progress reported up to the whole.
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let mut o = opts(16 << 10, 4);
        o.progress = Some(Arc::new(move |p| s2.lock().unwrap().push(p)));
        let mut i = 0;
        r.for_each(&o, |n, t| {
            assert_eq!(n, want[i].0.as_bytes());
            assert!(t.data == want[i].1);
            i += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(i, want.len());
        let seen = seen.lock().unwrap();
        let last = seen.last().unwrap();
        assert_eq!(last.bytes, last.total_bytes);
        assert_eq!(last.tensors, want.len() as u64);
        assert!(seen.windows(2).all(|w| w[0].bytes <= w[1].bytes));
        // get of a tensor larger than a part: parallel parts of 64 KiB.
        let before = r.stats().requests;
        let t = r.get("t07").unwrap().unwrap();
        assert!(t.data() == want[7].1);
        let after = r.stats().requests - before;
        // The index block (unless cached) and 16 parts of 64 KiB.
        assert!((16..=17).contains(&after), "{after} requests");
    }

    #[test]
    fn get_ahead_fetches_the_following_tensors_in_parallel() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pdx");
        let want = write_file(&path);
        let src = Arc::new(FileRange::open(&path).unwrap());
        let ro = RemoteOptions {
            load: LoadOptions {
                window_bytes: 400_000,
                ..opts(1 << 20, 4)
            },
            ..Default::default()
        };
        let r = RangedReader::open(src.clone(), ro).unwrap();
        let before = r.stats().requests;
        for (n, data) in &want {
            assert!(r.get_ahead(n).unwrap().unwrap().data == *data, "{n}");
        }
        let used = r.stats().requests - before;
        // One get (index block and record), the index once, then a few windows of parts:
        // far fewer than a request per tensor.
        assert!(used < want.len() as u64 / 2, "{used} requests");
        // Out of order, absent, and again in order: the same answers.
        for i in [9usize, 3, 4, 0, 11] {
            let t = r.get_ahead(&want[i].0).unwrap().unwrap();
            assert!(t.data == want[i].1, "{}", want[i].0);
        }
        assert!(r.get_ahead("t99").unwrap().is_none());
        assert!(r.get_ahead("t00").unwrap().unwrap().data == want[0].1);
    }

    #[test]
    fn a_damaged_tensor_fails_the_parallel_load_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.pdx");
        let want = write_file(&path);
        let mut bytes = std::fs::read(&path).unwrap();
        let src = Arc::new(FileRange::open(&path).unwrap());
        let r = RangedReader::open(src, RemoteOptions::default()).unwrap();
        let w = r
            .all_wants()
            .unwrap()
            .into_iter()
            .find(|w| w.name == b"t04")
            .unwrap();
        bytes[(w.range.start + 12_345) as usize] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let src = Arc::new(FileRange::open(&path).unwrap());
        let r = RangedReader::open(src, RemoteOptions::default()).unwrap();
        match r.load_all(&opts(4096, 4)) {
            Err(Error::ChecksumMismatch { name: Some(n), .. }) => assert_eq!(n, "t04"),
            other => panic!("damaged tensor: {:?}", other.map(|v| v.len())),
        }
        assert_eq!(want.len(), 12);
    }
}
