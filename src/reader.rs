//! Reading a native paramdex file by name.
//!
//! [`Reader::open`] maps the file and reads only the footer, the index block and the header
//! entry; a lookup binary-searches the index block, then the restart points of one data block,
//! and returns a [`TensorView`] borrowing the mapped bytes.

use std::ops::Bound;
use std::path::Path;

use crate::coding::{crc32c, unmask_crc};
use crate::dtype::DType;
use crate::entry::{Dims, FileHeader, IndexEntry, FORMAT_VERSION};
use crate::error::{path_str, Error, Result};
use crate::name;
use crate::record::{self, Lod, MAX_ALIGNMENT, MAX_RANK};
use crate::source::Source;
use crate::table::{Table, TableIndex, TableIter, TableReadOptions, FOOTER_LEN};

/// How a [`Reader`] checks what it reads.
#[derive(Clone, Debug)]
pub struct ReadOptions {
    /// Check each index block's CRC32C the first time it is read (default true).
    /// The index block itself is always checked at open.
    pub verify_blocks: bool,
    /// Check a tensor's data CRC32C on every `get` (default false; `verify` checks them all).
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

/// An open native paramdex file. `Send + Sync`: share it between threads by reference or `Arc`.
#[derive(Debug)]
pub struct Reader {
    source: Source,
    index: TableIndex,
    header: FileHeader,
    path: String,
    opts: ReadOptions,
}

/// What [`Reader::verify`] checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Index blocks whose CRC32C matched (data blocks, metaindex and index block).
    pub blocks: u64,
    /// Tensors whose data CRC32C matched and whose record agrees with the index.
    pub tensors: u64,
    /// Tensor data bytes checksummed.
    pub data_bytes: u64,
}

impl Reader {
    /// Maps the file at `path` and reads its footer, index block and header.
    pub fn open(path: impl AsRef<Path>) -> Result<Reader> {
        Self::open_with(path, ReadOptions::default())
    }

    /// Like [`Reader::open`] with explicit options.
    pub fn open_with(path: impl AsRef<Path>, opts: ReadOptions) -> Result<Reader> {
        let path = path.as_ref();
        let source = Source::map(path)?;
        Self::from_source(source, path_str(path), opts)
    }

    /// A reader over bytes in memory (tests, fuzzing, data not in a file).
    pub fn from_bytes(bytes: impl Into<std::sync::Arc<[u8]>>) -> Result<Reader> {
        Self::from_bytes_with(bytes, ReadOptions::default())
    }

    /// Like [`Reader::from_bytes`] with explicit options.
    pub fn from_bytes_with(
        bytes: impl Into<std::sync::Arc<[u8]>>,
        opts: ReadOptions,
    ) -> Result<Reader> {
        Self::from_source(Source::Memory(bytes.into()), "<memory>".to_string(), opts)
    }

    fn from_source(source: Source, path: String, opts: ReadOptions) -> Result<Reader> {
        let file: &[u8] = &source;
        if file.len() < FOOTER_LEN {
            return Err(Error::UnrecognizedFormat {
                path,
                detail: format!(
                    "{} bytes is too short to be a paramdex file (48-byte footer)",
                    file.len()
                ),
            });
        }
        let table_opts = TableReadOptions {
            verify_checksums: opts.verify_blocks,
            cache_capacity: opts.block_cache_bytes,
        };
        let index = TableIndex::open(file, &table_opts).map_err(|e| match e {
            Error::Corrupt {
                what: "footer",
                detail,
                ..
            } if detail.contains("magic") => Error::UnrecognizedFormat {
                path: path.clone(),
                detail: format!("not a paramdex file: {detail}"),
            },
            other => other,
        })?;
        let table = Table::new(file, &index);
        let first_block = table.first_data_offset().unwrap_or(0);
        let header = {
            let mut it = table.iter();
            it.seek_to_first()?;
            if !it.valid() || !it.key().is_empty() {
                return Err(Error::corrupt(
                    "header entry",
                    first_block,
                    "the first key is not the empty header key",
                ));
            }
            let value = it.value();
            FileHeader::decode(value, first_block).map_err(|e| {
                // TensorFlow's V1 checkpoints (TensorSliceWriter) are LevelDB tables too, and
                // their "" entry is a SavedTensorSlices whose field 1 is a message, where a
                // bundle header has the varint num_shards.
                if value.first() == Some(&0x0a) {
                    Error::Unsupported(format!(
                        "{path}: a TensorFlow V1 checkpoint (TensorSliceWriter, \
                         tf.compat.v1.train.Saver(write_version=V1)), which paramdex does not \
                         read: load it in TensorFlow and save it again with the default V2 \
                         format (a PREFIX.index and PREFIX.data-* files)"
                    ))
                } else {
                    e
                }
            })?
        };
        if header.format_version == 0 {
            return Err(Error::UnrecognizedFormat {
                path,
                detail: "a TensorFlow checkpoint index, not a native paramdex file (its header has no paramdex format version)".into(),
            });
        }
        if header.format_version > FORMAT_VERSION {
            return Err(Error::UnsupportedVersion {
                path,
                found: header.format_version,
                supported: FORMAT_VERSION,
            });
        }
        let bad = |detail: String| Error::corrupt("header entry", first_block, detail);
        if header.num_shards != 1 || header.big_endian {
            return Err(bad(format!(
                "a native file has one little-endian shard (num_shards {}, big_endian {})",
                header.num_shards, header.big_endian
            )));
        }
        if !u64::from(header.alignment).is_power_of_two()
            || u64::from(header.alignment) > MAX_ALIGNMENT
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
        Ok(Reader {
            source,
            index,
            header,
            path,
            opts,
        })
    }

    fn table(&self) -> Table<'_> {
        Table::new(&self.source, &self.index)
    }

    /// The file's header entry.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// The path the reader was opened on (`<memory>` for bytes).
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Number of tensors, from the header (O(1)).
    pub fn len(&self) -> u64 {
        self.header.tensor_count
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> bool {
        self.header.tensor_count == 0
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        &self.source
    }

    /// The records region: a Paddle combined-params stream (in name order when
    /// `header().records_sorted`).
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

    /// Looks a tensor up by name. `Ok(None)` if absent; an error if its entry is corrupt.
    pub fn get(&self, name: impl AsRef<[u8]>) -> Result<Option<TensorView<'_>>> {
        let name = name.as_ref();
        if name.is_empty() {
            return Ok(None); // the empty key is the header, never a tensor
        }
        let found = self
            .table()
            .get(name, |value, at| self.view(name, value, at))?;
        found.transpose()
    }

    /// Like [`Reader::get`], but a missing tensor is [`Error::NotFound`].
    pub fn tensor(&self, name: impl AsRef<[u8]>) -> Result<TensorView<'_>> {
        let name = name.as_ref();
        self.get(name)?.ok_or_else(|| Error::NotFound {
            name: name::display(name),
            path: self.path.clone(),
        })
    }

    /// Builds a view from an index value, checking it against the file.
    fn view<'r>(&'r self, key: &[u8], value: &[u8], at: u64) -> Result<TensorView<'r>> {
        if key.len() > name::MAX_NAME_LEN {
            return Err(Error::limit(
                "tensor name length",
                key.len() as u64,
                name::MAX_NAME_LEN as u64,
                Some(at),
            ));
        }
        let e = IndexEntry::decode(value, at, MAX_RANK)?;
        let shown = || name::display(key);
        let bad = |detail: String| {
            Error::corrupt("index entry", at, format!("tensor {}: {detail}", shown()))
        };
        let dtype = DType::from_tf(e.tf_dtype.into()).ok_or_else(|| Error::UnknownDType {
            system: "tensorflow",
            code: e.tf_dtype.into(),
            location: Some(format!("tensor {}", shown())),
        })?;
        if e.num_slices != 0 || e.shard_id != 0 {
            return Err(bad(
                "partitioned or sharded entries are not allowed in a native file".into(),
            ));
        }
        let expected = record::data_len(dtype, &e.shape)
            .ok_or_else(|| bad(format!("shape {:?} overflows", e.shape.as_slice())))?;
        if expected != e.size {
            return Err(bad(format!(
                "stored size {} but shape {:?} of {dtype} needs {expected}",
                e.size,
                e.shape.as_slice()
            )));
        }
        let end = e
            .offset
            .checked_add(e.size)
            .filter(|&end| end <= self.header.records_len);
        let record_offset = e.offset.checked_sub(u64::from(e.record_header_len));
        let (Some(end), Some(record_offset)) = (end, record_offset) else {
            return Err(bad(format!(
                "data range {}+{} (record header {}) is outside the records region of {} bytes",
                e.offset, e.size, e.record_header_len, self.header.records_len
            )));
        };
        if e.record_header_len == 0 {
            return Err(bad("missing record header length".into()));
        }
        // Both bounds are within the records region, itself within the file.
        let in_file = |v: u64| usize::try_from(v).expect("an offset inside the mapped file");
        let data = &self.source[in_file(e.offset)..in_file(end)];
        let view = TensorView {
            name: Dims2::from_slice(key),
            dtype,
            shape: e.shape,
            data,
            data_offset: e.offset,
            record_offset,
            crc32c: e.crc32c,
            lod_levels: e.lod_levels,
            file: &self.source,
        };
        if self.opts.verify_tensors {
            view.verify_crc()?;
        }
        Ok(view)
    }

    /// Every tensor in bytewise name order.
    pub fn iter(&self) -> Iter<'_> {
        self.range(Bound::Unbounded, Bound::Unbounded)
    }

    /// Tensors whose names start with `prefix`, in name order.
    pub fn prefix(&self, prefix: impl AsRef<[u8]>) -> Iter<'_> {
        let p = prefix.as_ref().to_vec();
        let end = prefix_successor(&p).map_or(Bound::Unbounded, Bound::Excluded);
        self.range(Bound::Included(p), end)
    }

    /// Tensors whose names fall in the given bounds, in name order.
    pub fn range(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Iter<'_> {
        Iter {
            reader: self,
            inner: self.table().into_iter_owned(),
            start: Some(start),
            end,
            done: false,
        }
    }

    /// Checks every block checksum, every tensor's data checksum, and that every record's
    /// header agrees with its index entry (dtype, shape, name, position). Uses up to
    /// `threads` threads for the data checksums (0 = all cores).
    pub fn verify_with_threads(&self, threads: usize) -> Result<VerifyReport> {
        let blocks = self.table().verify_all_blocks()?;
        let threads = crate::parallel::resolve_threads(threads);
        // Tensors are checked in batches of bounded size, so memory does not grow with the
        // number of tensors; the first error in name order is reported, whatever its kind.
        const BATCH_VIEWS: usize = 4096;
        const BATCH_BYTES: u64 = 256 << 20;
        let mut batch: Vec<TensorView<'_>> = Vec::with_capacity(BATCH_VIEWS);
        let mut batch_bytes = 0u64;
        let mut count = 0u64;
        let mut data_bytes = 0u64;
        let mut it = self.iter();
        loop {
            let mut full = false;
            let mut failed = None;
            for v in it.by_ref() {
                match v.and_then(|v| v.check_record().map(|()| v)) {
                    Ok(v) => {
                        count += 1;
                        batch_bytes += v.data.len() as u64;
                        batch.push(v);
                        if batch.len() >= BATCH_VIEWS || batch_bytes >= BATCH_BYTES {
                            full = true;
                            break;
                        }
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Tensors before a bad record come first in name order: check them first.
            data_bytes += crate::parallel::check_crcs(&batch, threads)?;
            batch.clear();
            batch_bytes = 0;
            if let Some(e) = failed {
                return Err(e);
            }
            if !full {
                break;
            }
        }
        if count != self.header.tensor_count {
            return Err(Error::corrupt(
                "header entry",
                self.index.first_data_offset().unwrap_or(0),
                format!(
                    "header says {} tensors, the index holds {count}",
                    self.header.tensor_count
                ),
            ));
        }
        self.check_records_tile(count)?;
        Ok(VerifyReport {
            blocks,
            tensors: count,
            data_bytes,
        })
    }

    /// Walks the records region from offset 0, record by record (O(1) memory), and checks that
    /// every record is the one the index entry of its name points at, and that there are as
    /// many as index entries: the records then tile the region exactly, so no two tensors'
    /// records overlap and no bytes hide between them (SPEC.md 2, 8.2).
    fn check_records_tile(&self, entries: u64) -> Result<()> {
        let mut walked = 0u64;
        for r in record::walk(self.records(), 0) {
            let (offset, h, _) = r?;
            let bad = |detail: String| Error::corrupt("record", offset, detail);
            let name = h
                .name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("a record of a native file without a name".into()))?;
            // The entry itself (not a view, which would checksum the data a second time).
            let entry = self
                .table()
                .get(name, |value, at| IndexEntry::decode(value, at, MAX_RANK))?
                .transpose()?
                .ok_or_else(|| {
                    bad(format!(
                        "record of tensor {} has no index entry",
                        name::display(name)
                    ))
                })?;
            let points_at = entry.offset.checked_sub(u64::from(entry.record_header_len));
            if points_at != Some(offset) {
                return Err(bad(format!(
                    "record of tensor {} is not the one its index entry points at (offset {} - {})",
                    name::display(name),
                    entry.offset,
                    entry.record_header_len
                )));
            }
            walked += 1;
        }
        if walked != entries {
            return Err(Error::corrupt(
                "record",
                0,
                format!("the records region holds {walked} records, the index {entries}"),
            ));
        }
        Ok(())
    }

    /// [`Reader::verify_with_threads`] on all cores.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with_threads(0)
    }
}

/// The smallest byte string greater than every string starting with `p`, if any.
fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

type Dims2 = smallvec::SmallVec<[u8; 64]>;

/// A zero-copy view of one tensor inside a [`Reader`]'s file.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    name: Dims2,
    dtype: DType,
    shape: Dims,
    data: &'a [u8],
    data_offset: u64,
    record_offset: u64,
    crc32c: u32,
    lod_levels: u32,
    file: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// The tensor's name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The name for display (lossless escapes for bytes that are not UTF-8).
    pub fn display_name(&self) -> String {
        name::display(&self.name)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Dimensions, outermost first; empty for a scalar.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        // size == numel * elem size was checked when the view was made, so no overflow.
        self.shape.iter().product()
    }

    /// The raw little-endian, row-major data, borrowed from the file.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// Absolute file offset of the first data byte.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The stored masked CRC32C of the data.
    pub fn stored_crc(&self) -> u32 {
        self.crc32c
    }

    /// Number of LoD levels (from the index; no record access).
    pub fn lod_levels(&self) -> u32 {
        self.lod_levels
    }

    /// The whole Paddle record (header and data): loadable by `paddle.base.core.load_dense_tensor`.
    pub fn record(&self) -> &'a [u8] {
        // record_offset <= data_offset and data end are within the file (checked in `view`).
        let in_file = |v: u64| usize::try_from(v).expect("an offset inside the mapped file");
        &self.file[in_file(self.record_offset)..in_file(self.data_offset) + self.data.len()]
    }

    /// The record's LoD, read from the record header (zero-copy).
    pub fn lod(&self) -> Result<Lod<'a>> {
        if self.lod_levels == 0 {
            return Ok(Lod::default());
        }
        Ok(self.record_header()?.lod)
    }

    /// Decodes the record header; a native record must carry both of paramdex's checksums
    /// (SPEC.md 3.2), so that no header byte is read unchecked, and end where the index says.
    fn record_header(&self) -> Result<record::RecordHeader<'a>> {
        let h = record::decode_header(self.record(), self.record_offset)?;
        if h.header_crc.is_none() || h.data_crc.is_none() {
            return Err(Error::corrupt(
                "record",
                self.record_offset,
                format!(
                    "tensor {}: the record header lacks its checksum fields",
                    self.display_name()
                ),
            ));
        }
        if h.header_len as u64 != self.data_offset - self.record_offset {
            return Err(Error::corrupt(
                "record",
                self.record_offset,
                format!(
                    "tensor {}: record header of {} bytes, the index says {}",
                    self.display_name(),
                    h.header_len,
                    self.data_offset - self.record_offset
                ),
            ));
        }
        Ok(h)
    }

    /// Checks the data against its stored CRC32C.
    pub fn verify_crc(&self) -> Result<()> {
        self.check_computed_crc(crc32c(self.data))
    }

    /// Compares a CRC32C computed elsewhere (e.g. in pieces on several threads) with the
    /// stored one.
    pub(crate) fn check_computed_crc(&self, computed: u32) -> Result<()> {
        let stored = unmask_crc(self.crc32c);
        if computed != stored {
            return Err(Error::ChecksumMismatch {
                what: "tensor data",
                name: Some(self.display_name()),
                offset: self.data_offset,
                len: self.data.len() as u64,
                stored,
                computed,
            });
        }
        Ok(())
    }

    /// Checks that the record header agrees with the index entry.
    pub fn check_record(&self) -> Result<()> {
        let h = self.record_header()?;
        let bad = |detail: String| {
            Error::corrupt(
                "record",
                self.record_offset,
                format!("tensor {}: {detail}", self.display_name()),
            )
        };
        if h.dtype != self.dtype || h.dims.as_slice() != self.shape.as_slice() {
            return Err(bad(format!(
                "record says {} {:?}, index says {} {:?}",
                h.dtype,
                h.dims.as_slice(),
                self.dtype,
                self.shape.as_slice()
            )));
        }
        if h.header_len as u64 + self.record_offset != self.data_offset
            || h.data_len != self.data.len() as u64
        {
            return Err(bad("record layout disagrees with the index entry".into()));
        }
        if h.lod.levels() as u64 != u64::from(self.lod_levels) {
            return Err(bad(format!(
                "record has {} LoD levels, index says {}",
                h.lod.levels(),
                self.lod_levels
            )));
        }
        if let Some(n) = h.name {
            if n != self.name() {
                return Err(bad(format!("record is named {}", name::display(n))));
            }
        }
        if let Some(c) = h.data_crc {
            if c != self.crc32c {
                return Err(bad("record and index disagree on the data checksum".into()));
            }
        }
        Ok(())
    }

    /// The data as a typed slice, zero-copy. Errors if `T` does not match the dtype, the data
    /// is not aligned for `T` (only when the file alignment is below `align_of::<T>()`), or the
    /// host is big-endian.
    pub fn as_slice<T: crate::element::Element>(&self) -> Result<&'a [T]> {
        crate::element::cast(self.dtype, self.data, &self.display_name())
    }
}

/// Iterator over tensors in name order; see [`Reader::iter`].
pub struct Iter<'r> {
    reader: &'r Reader,
    inner: TableIter<'r>,
    start: Option<Bound<Vec<u8>>>,
    end: Bound<Vec<u8>>,
    done: bool,
}

impl<'r> Iter<'r> {
    fn step(&mut self) -> Result<Option<TensorView<'r>>> {
        match self.start.take() {
            Some(Bound::Unbounded) => self.inner.seek_to_first()?,
            Some(Bound::Included(k)) => self.inner.seek(&k)?,
            Some(Bound::Excluded(k)) => {
                self.inner.seek(&k)?;
                if self.inner.valid() && self.inner.key() == k.as_slice() {
                    self.inner.next()?;
                }
            }
            None => {
                self.inner.next()?;
            }
        }
        // Skip the header entry.
        while self.inner.valid() && self.inner.key().is_empty() {
            self.inner.next()?;
        }
        if !self.inner.valid() {
            return Ok(None);
        }
        let key = self.inner.key();
        let past = match &self.end {
            Bound::Unbounded => false,
            Bound::Included(e) => key > e.as_slice(),
            Bound::Excluded(e) => key >= e.as_slice(),
        };
        if past {
            return Ok(None);
        }
        let at = self.inner.block_offset();
        self.reader.view(key, self.inner.value(), at).map(Some)
    }
}

impl<'r> Iterator for Iter<'r> {
    type Item = Result<TensorView<'r>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(v)) => Some(Ok(v)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
