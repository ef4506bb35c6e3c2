//! Reading a native paramdex file by name.
//!
//! [`Reader::open`] maps the file and reads only the footer, the index block and the header
//! entry; a lookup binary-searches the index block, then the restart points of one data block,
//! and returns a [`TensorView`] borrowing the mapped bytes.

use std::ops::Bound;
use std::path::Path;

use crate::dtype::DType;
use crate::error::{ensure_within, path_str, Corruption, Error, Result};
use crate::format::pbwire::{self, WireType};
use crate::name;
use crate::native::entry::IndexEntry;
use crate::native::header::FileHeader;
use crate::native::source::Source;
use crate::native::view::{NameBuf, TensorView};
use crate::native::FORMAT_VERSION;
use crate::record::{self, MAX_ALIGNMENT, MAX_RANK};
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
    pub(super) index: TableIndex,
    pub(super) header: FileHeader,
    path: String,
    opts: ReadOptions,
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
                kind: Corruption::BadMagic,
                detail,
                ..
            } => Error::UnrecognizedFormat {
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
                let v1 = pbwire::read_tag(value, 0)
                    .is_some_and(|(tag, _)| tag == pbwire::Tag::new(1, WireType::LEN));
                if v1 {
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

    pub(super) fn table(&self) -> Table<'_> {
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
        ensure_within(
            "tensor name length",
            key.len(),
            name::MAX_NAME_LEN,
            Some(at),
        )?;
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
            name: NameBuf::from_slice(key),
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
