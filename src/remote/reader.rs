//! A native paramdex file read by ranges (issue 15; SPEC.md 8.4): open costs one request for
//! the footer and, usually, the index block (a speculative read of the object's tail), and one
//! more for the header's block when the tail does not hold it; `get` costs one request for the
//! tensor's index block (unless cached) and one for its record. Every tensor read so is checked
//! against its CRC32C: bytes from a network are never returned unchecked.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::name;
use crate::native::region::{self, Region};
use crate::native::slice_key;
use crate::native::{
    check_partition, plan_region, validate_header, FileHeader, IndexEntry, RegionPlan,
};
use crate::record::{self, MAX_RANK};
use crate::remote::range::RangeRead;
use crate::table::{
    BlockHandle, Footer, Table, TableIndex, TableReadOptions, BLOCK_TRAILER_LEN, FOOTER_LEN,
    MAX_BLOCK_LEN,
};

/// How a [`RemoteReader`] reads.
#[derive(Clone, Debug)]
pub struct RemoteOptions {
    /// Bytes read from the end of the object at open: the footer, and the index block when it
    /// is no larger (its size grows with the number of index data blocks, about 60 bytes each:
    /// 256 KiB holds the index block of a file of several million tensors).
    pub tail_bytes: u64,
    /// Bytes of index data blocks kept after use.
    pub block_cache_bytes: usize,
}

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            tail_bytes: 256 << 10,
            block_cache_bytes: 8 << 20,
        }
    }
}

/// One tensor read from a remote native file: its bytes, checked against its CRC32C.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a scalar).
    pub shape: Vec<u64>,
    /// Little-endian, row-major data.
    pub data: Vec<u8>,
}

/// One entry of a remote file's index, as a listing gives it (no data read).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteEntry {
    /// The tensor's name.
    pub name: Vec<u8>,
    /// Element type.
    pub dtype: DType,
    /// Shape (a tensor stored in slices: the whole tensor's).
    pub shape: Vec<u64>,
    /// Data bytes (0 for a tensor stored in slices, whose slices hold them).
    pub size: u64,
    /// Number of slices for a tensor stored in slices, else 0.
    pub slices: u32,
    /// LoD levels (their offsets are in the record, read with the tensor).
    pub lod_levels: u32,
}

/// Index data blocks fetched so far, least recently used first out.
#[derive(Debug, Default)]
struct BlockCache {
    blocks: HashMap<usize, (Arc<Vec<u8>>, u64)>,
    bytes: usize,
    clock: u64,
}

/// A native paramdex file (not a sharded checkpoint's index, yet) read by ranges.
#[derive(Debug)]
pub struct RemoteReader {
    src: Arc<dyn RangeRead>,
    index: TableIndex,
    header: FileHeader,
    /// The bytes read at open, from `tail_start` to the end: blocks inside are served from it.
    tail: Vec<u8>,
    tail_start: u64,
    cache: Mutex<BlockCache>,
    opts: RemoteOptions,
}

impl RemoteReader {
    /// Opens the native file `src`: reads its tail (footer and, usually, the index block), then
    /// the header's block if the tail does not hold it, and checks them as [`crate::Reader`]
    /// does (SPEC.md 8.2).
    pub fn open(src: Arc<dyn RangeRead>, opts: RemoteOptions) -> Result<RemoteReader> {
        let r = Self::open_native(src, opts)?;
        if !r.header.shards.is_empty() {
            return Err(Error::Unsupported(format!(
                "{}: the index of a sharded checkpoint (open it with RemoteSharded, which \
                 reads its data objects)",
                r.location()
            )));
        }
        Ok(r)
    }

    /// [`RemoteReader::open`] of any native file, a sharded checkpoint's index included (whose
    /// header is checked as SPEC.md 12.4 says; its entries point into other objects).
    pub(crate) fn open_native(
        src: Arc<dyn RangeRead>,
        opts: RemoteOptions,
    ) -> Result<RemoteReader> {
        let len = src.len();
        let location = src.location().to_string();
        if len < FOOTER_LEN as u64 {
            return Err(Error::UnrecognizedFormat {
                path: location,
                detail: format!("{len} bytes is too short to be a paramdex file (48-byte footer)"),
            });
        }
        let ctx = |e: Error| e.context(&location);
        let mut tail = src.tail(opts.tail_bytes.max(FOOTER_LEN as u64))?;
        let mut tail_start = len - tail.len() as u64;
        let footer_at = len - FOOTER_LEN as u64;
        let footer =
            Footer::decode(&tail[tail.len() - FOOTER_LEN..], footer_at).map_err(|e| match e {
                Error::Corrupt {
                    kind: crate::Corruption::BadMagic,
                    detail,
                    ..
                } => Error::UnrecognizedFormat {
                    path: location.clone(),
                    detail: format!("not a paramdex file: {detail}"),
                },
                other => ctx(other),
            })?;
        let idx: BlockHandle = footer.index;
        // The index block ends at the footer; bounded before anything is read for it.
        footer_at
            .checked_sub(idx.offset)
            .filter(|&n| n <= (MAX_BLOCK_LEN + BLOCK_TRAILER_LEN) as u64)
            .ok_or_else(|| {
                ctx(Error::corrupt(
                    "footer",
                    footer_at,
                    format!(
                        "index block handle (offset {}) does not end at the footer",
                        idx.offset
                    ),
                ))
            })?;
        if idx.offset < tail_start {
            // A larger index block than the speculative read held: one more request.
            let mut more = src.read(idx.offset..tail_start)?;
            more.extend_from_slice(&tail);
            tail = more;
            tail_start = idx.offset;
        }
        let table_opts = TableReadOptions {
            verify_checksums: true,
            cache_capacity: 0,
        };
        let from_idx = usize::try_from(idx.offset - tail_start).expect("inside the tail");
        let index =
            TableIndex::open_tail(&tail[from_idx..], idx.offset, &table_opts).map_err(ctx)?;
        let Some(first_block) = index.first_data_offset() else {
            return Err(ctx(Error::corrupt(
                "index block",
                idx.offset,
                "the index lists no data block, so no header",
            )));
        };
        let reader = RemoteReader {
            src,
            index,
            header: unreachable_header(),
            tail,
            tail_start,
            cache: Mutex::new(BlockCache::default()),
            opts,
        };
        let block = reader.block(0)?;
        let table = Table::new_tail(&block, first_block, &reader.index);
        let mut it = table.iter();
        it.seek_to_first().map_err(ctx)?;
        if !it.valid() || !it.key().is_empty() {
            return Err(ctx(Error::corrupt(
                "header entry",
                first_block,
                "the first key is not the empty header key",
            )));
        }
        let header = FileHeader::decode(it.value(), first_block).map_err(ctx)?;
        validate_header(&header, first_block, &location)?;
        drop(it);
        drop(table);
        Ok(RemoteReader { header, ..reader })
    }

    /// The decoded header entry.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// Where the object is.
    pub fn location(&self) -> &str {
        self.src.location()
    }

    /// The object read.
    pub fn source(&self) -> &Arc<dyn RangeRead> {
        &self.src
    }

    /// The raw bytes (contents and trailer) of index data block `i`: from the bytes read at
    /// open, the cache, or one request.
    fn block(&self, i: usize) -> Result<Arc<Vec<u8>>> {
        let h = self.index.block_handle(i);
        let end = h
            .offset
            .checked_add(h.size)
            .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN as u64))
            .filter(|&e| e <= self.src.len())
            .ok_or_else(|| {
                Error::corrupt(
                    "block handle",
                    h.offset,
                    format!(
                        "{}: block {i} of {} bytes runs past the object's end",
                        self.location(),
                        h.size
                    ),
                )
            })?;
        let range: Range<u64> = h.offset..end;
        if range.start >= self.tail_start {
            let a = usize::try_from(range.start - self.tail_start).expect("inside the tail");
            let b = usize::try_from(range.end - self.tail_start).expect("inside the tail");
            return Ok(Arc::new(self.tail[a..b].to_vec()));
        }
        {
            let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            c.clock += 1;
            let now = c.clock;
            if let Some((b, used)) = c.blocks.get_mut(&i) {
                *used = now;
                return Ok(b.clone());
            }
        }
        let bytes = Arc::new(self.src.read(range)?);
        let mut c = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        c.bytes += bytes.len();
        let now = c.clock;
        c.blocks.insert(i, (bytes.clone(), now));
        while c.bytes > self.opts.block_cache_bytes && c.blocks.len() > 1 {
            let Some((&old, _)) = c.blocks.iter().min_by_key(|(_, (_, used))| *used) else {
                break;
            };
            if let Some((b, _)) = c.blocks.remove(&old) {
                c.bytes -= b.len();
            }
        }
        Ok(bytes)
    }

    /// Every tensor of the index in name order, from `start` on (slice keys left out): one
    /// request for the index's data blocks not read yet (they lie together, between the records
    /// and the index block), however many tensors there are.
    pub fn list_from(&self, start: &[u8]) -> Result<Vec<RemoteEntry>> {
        let n = self.index.data_blocks();
        if n == 0 {
            return Ok(Vec::new());
        }
        let first = self.index.block_handle(0).offset;
        // The bytes from the first index data block to the end: what the open read, and (for a
        // large index) the part before it in one more request.
        let all: Vec<u8> = if first >= self.tail_start {
            let a = usize::try_from(first - self.tail_start).expect("inside the tail");
            self.tail[a..].to_vec()
        } else {
            let mut v = self.src.read(first..self.tail_start)?;
            v.extend_from_slice(&self.tail);
            v
        };
        let table = Table::new_tail(&all, first, &self.index);
        let mut it = table.iter();
        it.seek(start)?;
        let mut out = Vec::new();
        while it.valid() {
            let (key, value, at) = (it.key(), it.value(), it.block_offset());
            if !key.is_empty() && key[0] != 0 {
                let e = IndexEntry::decode(value, at, MAX_RANK)?;
                let dtype =
                    DType::from_tf(e.tf_dtype.into()).ok_or_else(|| Error::UnknownDType {
                        system: "tensorflow",
                        code: e.tf_dtype.into(),
                        location: Some(format!(
                            "{}: tensor {}",
                            self.location(),
                            name::display(key)
                        )),
                    })?;
                out.push(RemoteEntry {
                    name: key.to_vec(),
                    dtype,
                    shape: e.shape.to_vec(),
                    size: e.size,
                    slices: e.num_slices,
                    lod_levels: e.lod_levels,
                });
            }
            it.next()?;
        }
        Ok(out)
    }

    /// The index entry under `key` (a tensor's name or a slice key), if any: decoded, its
    /// value, and the offset of its block.
    pub(crate) fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>> {
        if key.is_empty() {
            return Ok(None);
        }
        let i = self.index.find_block(key);
        if i >= self.index.data_blocks() {
            return Ok(None);
        }
        let block = self.block(i)?;
        let h = self.index.block_handle(i);
        Table::new_tail(&block, h.offset, &self.index)
            .get(key, |v, at| {
                IndexEntry::decode(v, at, MAX_RANK).map(|e| (e, v.to_vec(), at))
            })?
            .transpose()
    }

    /// The data of entry `e` (under `key`, in the block at `at`) of this file, whose records
    /// hold it: its size checked against its shape, its range against the records region, its
    /// bytes (one request) against its CRC32C. `shard_id` is the caller's to check.
    pub(crate) fn read_data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor> {
        let shown = || slice_key::display_key(key);
        let bad = |detail: String| {
            Error::corrupt(
                "index entry",
                at,
                format!("{}: tensor {}: {detail}", self.location(), shown()),
            )
        };
        let dtype = DType::from_tf(e.tf_dtype.into()).ok_or_else(|| Error::UnknownDType {
            system: "tensorflow",
            code: e.tf_dtype.into(),
            location: Some(format!("{}: tensor {}", self.location(), shown())),
        })?;
        if record::data_len(dtype, &e.shape) != Some(e.size) {
            return Err(bad(format!(
                "size {} does not fit shape {:?} of {dtype}",
                e.size,
                e.shape.as_slice()
            )));
        }
        let end = e
            .offset
            .checked_add(e.size)
            .filter(|&end| end <= self.header.records_len)
            .ok_or_else(|| {
                bad(format!(
                    "data {}+{} lies outside the records region of {} bytes",
                    e.offset, e.size, self.header.records_len
                ))
            })?;
        let data = self.src.read(e.offset..end)?;
        let want = unmask_crc(e.crc32c);
        let got = crc32c(&data);
        if got != want {
            return Err(Error::ChecksumMismatch {
                what: "tensor data",
                name: Some(shown()),
                offset: e.offset,
                len: e.size,
                stored: want,
                computed: got,
                context: Some(self.location().to_string()),
            });
        }
        Ok(RemoteTensor {
            dtype,
            shape: e.shape.to_vec(),
            data,
        })
    }

    /// The tensor `name` (`Ok(None)` if absent): one request for its index block unless it
    /// was read before, one for its record; its data checked against its CRC32C.
    ///
    /// Errors: [`Error::Sliced`] for a tensor stored in slices (read it with
    /// [`RemoteReader::get_slice`]); [`Error::ChecksumMismatch`] for data that is not what was
    /// written; [`Error::Corrupt`] for an entry that does not fit the object.
    pub fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<RemoteTensor>> {
        get_whole(self, name.as_ref())
    }

    /// The region `region` of tensor `name`, stored whole or in slices (`Ok(None)` if absent):
    /// each stored tensor or slice holding part of it read whole (one request each, its index
    /// block unless cached) and checked against its CRC32C, the region copied out of them.
    ///
    /// Errors: as [`crate::Reader::get_slice`], and as [`RemoteReader::get`].
    pub fn get_slice(
        &self,
        name: impl AsRef<[u8]>,
        region: &Region,
    ) -> Result<Option<RemoteTensor>> {
        get_region(self, name.as_ref(), region)
    }
}

/// What the reads of whole tensors and regions need of a remote checkpoint, a single file
/// ([`RemoteReader`]) or a sharded one (`RemoteSharded`): its index entries by key, and the
/// checked data of an entry from whichever object holds it. Everything else (which slices hold
/// a region, the checks of an entry, the copy) is written once, here and in `native`.
pub(crate) trait EntrySource {
    /// Where the checkpoint is, for messages.
    fn place(&self) -> &str;
    /// Whether its index is of version 2 (slices allowed).
    fn is_v2(&self) -> bool;
    /// The index entry under `key`: decoded, its value, the offset of its block.
    fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>>;
    /// The data of a whole tensor's or a slice's entry, checked against its CRC32C.
    fn data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor>;
}

impl EntrySource for RemoteReader {
    fn place(&self) -> &str {
        self.location()
    }

    fn is_v2(&self) -> bool {
        self.header.format_version >= 2
    }

    fn lookup(&self, key: &[u8]) -> Result<Option<(IndexEntry, Vec<u8>, u64)>> {
        RemoteReader::lookup(self, key)
    }

    fn data(&self, key: &[u8], e: &IndexEntry, at: u64) -> Result<RemoteTensor> {
        if e.shard_id != 0 {
            return Err(Error::corrupt(
                "index entry",
                at,
                format!(
                    "{}: tensor {}: shard_id {} in a file that is not a sharded checkpoint's \
                     index",
                    self.location(),
                    slice_key::display_key(key),
                    e.shard_id
                ),
            ));
        }
        self.read_data(key, e, at)
    }
}

/// The tensor `name` of `s`, stored whole (else [`Error::Sliced`]).
pub(crate) fn get_whole(s: &dyn EntrySource, name: &[u8]) -> Result<Option<RemoteTensor>> {
    if name.is_empty() || (s.is_v2() && name[0] == 0) {
        return Ok(None);
    }
    let Some((e, _, at)) = s.lookup(name)? else {
        return Ok(None);
    };
    if e.num_slices != 0 {
        return Err(Error::Sliced {
            name: name::display(name),
            path: s.place().to_string(),
            slices: u64::from(e.num_slices),
        });
    }
    s.data(name, &e, at).map(Some)
}

/// The region `region` of tensor `name` of `s`, whether stored whole or in slices.
pub(crate) fn get_region(
    s: &dyn EntrySource,
    name: &[u8],
    region: &Region,
) -> Result<Option<RemoteTensor>> {
    if name.is_empty() || (s.is_v2() && name[0] == 0) {
        return Ok(None);
    }
    let Some((e, value, at)) = s.lookup(name)? else {
        return Ok(None);
    };
    let dtype = DType::from_tf(e.tf_dtype.into()).ok_or_else(|| Error::UnknownDType {
        system: "tensorflow",
        code: e.tf_dtype.into(),
        location: Some(format!("{}: tensor {}", s.place(), name::display(name))),
    })?;
    let shape: Vec<u64> = e.shape.to_vec();
    if !region.is_within(&shape) {
        return Err(Error::InvalidArgument(format!(
            "region at {:?} of lengths {:?} does not lie inside tensor {} of shape {shape:?}",
            region.start,
            region.len,
            name::display(name)
        )));
    }
    let esize = dtype.size();
    let out_len = region::byte_len(region, esize)?;
    let mut out = vec![0u8; out_len];
    let copy = |data: &[u8], from: &Region, part: &Region, out: &mut [u8], key: &[u8]| {
        region::copy_part(data, from, out, region, part, esize).map_err(|d| {
            Error::corrupt(
                "slice",
                at,
                format!("{}: {}: {d}", s.place(), slice_key::display_key(key)),
            )
        })
    };
    if e.num_slices == 0 {
        let t = s.data(name, &e, at)?;
        copy(&t.data, &Region::full(&shape), region, &mut out, name)?;
    } else {
        let p = check_partition(name, &e, dtype, &value, at, s.is_v2())
            .map_err(|err| err.context(s.place()))?;
        let parts = match plan_region(&p, region, s.place())? {
            RegionPlan::Empty => Vec::new(),
            RegionPlan::Within(i) => vec![(i, region.clone())],
            RegionPlan::Parts(parts) => parts,
        };
        for (i, part) in &parts {
            let r = &p.regions[*i];
            let key = slice_key::encode(name, &r.extents(&shape));
            let bad = |detail: String| {
                Error::corrupt(
                    "partitioned tensor",
                    at,
                    format!("{}: {}: {detail}", s.place(), slice_key::display_key(&key)),
                )
            };
            let Some((se, _, sat)) = s.lookup(&key)? else {
                return Err(bad("the slice's entry is missing".into()));
            };
            if se.num_slices != 0
                || DType::from_tf(se.tf_dtype.into()) != Some(dtype)
                || se.shape.as_slice() != r.len.as_slice()
            {
                return Err(bad(format!(
                    "the slice is stored with shape {:?}{}, the tensor's entry says {dtype} {:?}",
                    se.shape.as_slice(),
                    if se.num_slices != 0 {
                        " and slices"
                    } else {
                        ""
                    },
                    r.len
                )));
            }
            let t = s.data(&key, &se, sat)?;
            copy(&t.data, r, part, &mut out, &key)?;
        }
    }
    Ok(Some(RemoteTensor {
        dtype,
        shape: region.len.clone(),
        data: out,
    }))
}

/// A placeholder header while the real one is read (never returned).
fn unreachable_header() -> FileHeader {
    FileHeader {
        num_shards: 1,
        big_endian: false,
        producer: 0,
        min_consumer: 0,
        format_version: 0,
        alignment: 1,
        records_len: 0,
        tensor_count: 0,
        records_sorted: false,
        metadata: Default::default(),
        shard_of: None,
        shards: Vec::new(),
        slice_count: 0,
        references: 0,
    }
}
