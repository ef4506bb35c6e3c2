//! [`TensorView`]: a zero-copy view of one stored tensor (or slice) inside a
//! [`Reader`](crate::Reader)'s file, with the checks that tie it to its record (SPEC.md 8.2);
//! [`SliceData`]: a region read by [`Reader::get_slice`](crate::Reader::get_slice).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::name;
use crate::native::bytes_value;
use crate::native::entry::Dims;
use crate::native::entry::IndexEntry;
use crate::native::region::{self, Region};
use crate::native::slice_key;
use crate::record::{self, Lod};

/// A name kept inline up to 64 bytes (most are shorter): building a view does not allocate.
pub(super) type NameBuf = smallvec::SmallVec<[u8; 64]>;

/// The bytes a [`TensorView`] reads: lent by its reader's source (a mapped file, a buffer in
/// memory: zero-copy, for as long as the reader is borrowed), or owned by the view (a record
/// read by ranges: the view keeps it).
#[derive(Clone, Debug)]
pub(crate) enum ViewBytes<'a> {
    /// Borrowed from the reader's source.
    Lent(&'a [u8]),
    /// Held by the view.
    Owned(bytes::Bytes),
}

impl ViewBytes<'static> {
    /// `buf` held by a view whose data starts at byte `head` of it, placed so that the data is
    /// aligned for every element type (8 bytes), as a mapped file's data is (its alignment
    /// divides the file's): `buf` itself when it already is (no copy), else a copy into 8-byte
    /// words.
    pub(crate) fn aligned(buf: Vec<u8>, head: usize) -> ViewBytes<'static> {
        if (buf.as_ptr() as usize).wrapping_add(head).is_multiple_of(8) {
            // The vector's own allocation: `Bytes` keeps its pointer.
            return ViewBytes::Owned(bytes::Bytes::from(buf));
        }
        let start = (8 - head % 8) % 8;
        let mut words = vec![0u64; (start + buf.len()).div_ceil(8)];
        bytemuck::cast_slice_mut::<u64, u8>(&mut words)[start..start + buf.len()]
            .copy_from_slice(&buf);
        ViewBytes::Owned(bytes::Bytes::from_owner(Words {
            words,
            start,
            len: buf.len(),
        }))
    }
}

/// Bytes in 8-byte words (aligned for every element type): `len` of them from byte `start`.
struct Words {
    words: Vec<u64>,
    start: usize,
    len: usize,
}

impl AsRef<[u8]> for Words {
    fn as_ref(&self) -> &[u8] {
        &bytemuck::cast_slice::<u64, u8>(&self.words)[self.start..self.start + self.len]
    }
}

impl std::ops::Deref for ViewBytes<'_> {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            ViewBytes::Lent(b) => b,
            ViewBytes::Owned(b) => b,
        }
    }
}

/// Where a stored slice sits in its tensor (SPEC.md 13).
#[derive(Clone, Debug)]
pub(crate) struct SlicePiece {
    /// The slice's index key (and record name).
    pub(crate) key: Vec<u8>,
    /// The whole tensor's shape.
    pub(crate) full_shape: Dims,
    /// The slice's first index in each dimension of the whole tensor.
    pub(crate) start: Dims,
}

/// How a view of tensor `name` (or of its slice `slice`) is named in messages: the slice key of
/// a slice, else the name.
pub(super) fn shown_name(name: &[u8], slice: Option<&SlicePiece>) -> String {
    match slice {
        Some(s) => slice_key::display_key(&s.key),
        None => name::display(name),
    }
}

/// The error for tensor data (`len` bytes at `offset`, of the tensor shown as `shown`) whose
/// CRC32C is `computed` where `stored` was stored.
#[cold]
pub(super) fn data_crc_mismatch(
    shown: String,
    offset: u64,
    len: usize,
    stored: u32,
    computed: u32,
) -> Error {
    Error::ChecksumMismatch {
        what: "tensor data",
        name: Some(shown),
        offset,
        len: len as u64,
        stored,
        computed,
        context: None,
    }
}

/// Decodes the header of the record `record` (its header and data, at `record_offset`; data at
/// `data_offset`) of tensor `shown`: a native record must carry both of paramdex's checksums
/// (SPEC.md 3.2), so that no header byte is read unchecked, and end where the index says. The
/// one decoding of a record header for every reader (a mapped view's, the remote readers'
/// fetched records).
pub(crate) fn record_header<'r>(
    record: &'r [u8],
    record_offset: u64,
    data_offset: u64,
    shown: &str,
) -> Result<record::RecordHeader<'r>> {
    let h = record::decode_header(record, record_offset)?;
    if h.header_crc.is_none() || h.data_crc.is_none() {
        return Err(Error::corrupt(
            "record",
            record_offset,
            format!("tensor {shown}: the record header lacks its checksum fields"),
        ));
    }
    if h.header_len as u64 != data_offset - record_offset {
        return Err(Error::corrupt(
            "record",
            record_offset,
            format!(
                "tensor {shown}: record header of {} bytes, the index says {}",
                h.header_len,
                data_offset - record_offset
            ),
        ));
    }
    Ok(h)
}

/// The view of the stored tensor (or slice, `slice`) `name` whose entry is `e` (checked:
/// [`crate::native::check_data`]), over `record`, the bytes of its record (header and data)
/// read by ranges from `record_offset` on, in the file `path`: the same view, and so the same record checks and
/// LoD, as a mapped file's.
pub(crate) fn view_of_record<'a>(
    path: &'a str,
    name: &[u8],
    slice: Option<Box<SlicePiece>>,
    dtype: DType,
    e: IndexEntry,
    record_offset: u64,
    record: ViewBytes<'a>,
) -> Result<TensorView<'a>> {
    if e.codec != 0 {
        // The stored bytes were read whole; the view holds the decoded ones, checked against
        // the entry's CRC32C (a read by ranges always checks the data it fetched).
        return decoded_view(path, name, slice, dtype, e, record_offset, &record, 0, true);
    }
    let head = e
        .offset
        .checked_sub(record_offset)
        .and_then(|h| usize::try_from(h).ok())
        .filter(|&h| h as u64 + e.size == record.len() as u64)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {}: {} bytes read for a record at {record_offset} of data {}+{}",
                shown_name(name, slice.as_deref()),
                record.len(),
                e.offset,
                e.size
            ))
        })?;
    Ok(TensorView {
        name: NameBuf::from_slice(name),
        dtype,
        shape: e.shape,
        data_len: record.len() - head,
        data_offset: e.offset,
        record_offset,
        crc32c: e.crc32c,
        lod_levels: e.lod_levels,
        file: record,
        base: record_offset,
        path,
        slice,
        stored_len: None,
    })
}

/// The view of the compressed record (SPEC.md 3.4) of tensor (or slice, `slice`) `name`, whose
/// entry `e` was checked ([`crate::native::check_data`]): `record` holds its header and stored
/// data, from file offset `record_offset`. The chunk table is checked, then the data is decoded
/// on up to `threads` threads (0 = all cores) into a fresh buffer that the view holds, with a
/// copy of the header before it (so [`TensorView::record`] and the record checks work as for a
/// plain record); with `check_crc`, the decoded bytes are checked against the entry's CRC32C.
#[allow(clippy::too_many_arguments)]
pub(crate) fn decoded_view<'a>(
    path: &'a str,
    name: &[u8],
    slice: Option<Box<SlicePiece>>,
    dtype: DType,
    e: IndexEntry,
    record_offset: u64,
    record: &[u8],
    threads: usize,
    check_crc: bool,
) -> Result<TensorView<'a>> {
    let shown = shown_name(name, slice.as_deref());
    let head = e
        .offset
        .checked_sub(record_offset)
        .and_then(|h| usize::try_from(h).ok())
        .filter(|&h| h as u64 + e.size == record.len() as u64)
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {shown}: {} bytes read for a record at {record_offset} of data {}+{}",
                record.len(),
                e.offset,
                e.size
            ))
        })?;
    let decoded_len = record::data_len(dtype, &e.shape).unwrap_or(0);
    let at = record::lossless::At {
        name: &shown,
        offset: e.offset,
    };
    let stored = &record[head..];
    let layout = record::lossless::Layout::parse(stored, dtype, decoded_len, at)
        .map_err(|err| err.context(path))?;
    // The chunk table proved the decoded length (one row per chunk, inside the stored bytes):
    // only now is it allocated, in 8-byte words so that the data is aligned for every element
    // type, the header copied before it.
    let len = usize::try_from(decoded_len)
        .ok()
        .and_then(|n| n.checked_add(head))
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "tensor {shown}: {decoded_len} bytes do not fit in memory"
            ))
        })?;
    let start = (8 - head % 8) % 8;
    let mut words = vec![0u64; (start + len).div_ceil(8)];
    let bytes = &mut bytemuck::cast_slice_mut::<u64, u8>(&mut words)[start..start + len];
    bytes[..head].copy_from_slice(&record[..head]);
    layout
        .decode_range(stored, 0..decoded_len, &mut bytes[head..], threads, at)
        .map_err(|err| err.context(path))?;
    if check_crc {
        let computed = crc32c(&bytes[head..]);
        let want = unmask_crc(e.crc32c);
        if computed != want {
            return Err(
                data_crc_mismatch(shown, e.offset, len - head, want, computed).context(path),
            );
        }
    }
    Ok(TensorView {
        name: NameBuf::from_slice(name),
        dtype,
        shape: e.shape,
        data_len: len - head,
        data_offset: e.offset,
        record_offset,
        crc32c: e.crc32c,
        lod_levels: e.lod_levels,
        file: ViewBytes::Owned(bytes::Bytes::from_owner(Words { words, start, len })),
        base: record_offset,
        path,
        slice,
        stored_len: Some(e.size),
    })
}

/// A zero-copy view of one stored tensor inside a [`Reader`](crate::Reader)'s file: a whole
/// tensor, or one slice of a tensor stored in slices ([`TensorView::slice_start`]).
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    pub(super) name: NameBuf,
    pub(super) dtype: DType,
    pub(super) shape: Dims,
    /// Bytes of data, from `data_offset` (`data_offset - base` into `file`).
    pub(super) data_len: usize,
    pub(super) data_offset: u64,
    pub(super) record_offset: u64,
    pub(super) crc32c: u32,
    pub(super) lod_levels: u32,
    /// The file's bytes from offset `base` on: the whole mapping (`base` 0), or a record
    /// read by ranges (`base` its offset). They hold the record and its data (checked when
    /// the view was made).
    pub(super) file: ViewBytes<'a>,
    pub(super) base: u64,
    /// The file `file` is (for a tensor of a sharded checkpoint, its data file), for messages.
    pub(super) path: &'a str,
    /// For a slice of a tensor stored in slices: where it sits.
    pub(super) slice: Option<Box<SlicePiece>>,
    /// For a compressed record (SPEC.md 3.4), the bytes its data takes in the file; the view
    /// then holds the decoded data (`file` is owned: the record's header, then the data).
    pub(super) stored_len: Option<u64>,
}

impl<'a> TensorView<'a> {
    /// This view (of a slice's record) as slice `piece` of tensor `name`.
    pub(super) fn into_piece(mut self, name: &[u8], piece: SlicePiece) -> Self {
        self.name = NameBuf::from_slice(name);
        self.slice = Some(Box::new(piece));
        self
    }

    /// The tensor's name (for a slice, the name of the tensor it is a slice of).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The name for display (lossless escapes for bytes that are not UTF-8); a slice is shown
    /// with its extents, `NAME (slice START,LENGTH:...)`.
    pub fn display_name(&self) -> String {
        shown_name(&self.name, self.slice.as_deref())
    }

    /// The key of the view's index entry and the name in its record: the name, or for a slice
    /// its slice key (SPEC.md 13).
    pub fn key(&self) -> &[u8] {
        match &self.slice {
            Some(s) => &s.key,
            None => &self.name,
        }
    }

    /// For a slice of a tensor stored in slices, its first index in each dimension of the
    /// whole tensor; `None` for a whole tensor.
    pub fn slice_start(&self) -> Option<&[u64]> {
        self.slice.as_ref().map(|s| s.start.as_slice())
    }

    /// The shape of the whole tensor: [`TensorView::shape`] for a whole tensor, the shape of
    /// the tensor it is a slice of for a slice.
    pub fn full_shape(&self) -> &[u64] {
        match &self.slice {
            Some(s) => &s.full_shape,
            None => &self.shape,
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Dimensions, outermost first; empty for a scalar. For a slice, the slice's own.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        // size == numel * elem size was checked when the view was made, so no overflow.
        self.shape.iter().product()
    }

    /// The raw little-endian, row-major data: borrowed from the file (zero-copy), or, read by
    /// ranges, held by the view.
    pub fn data(&self) -> &[u8] {
        let at = self.in_file(self.data_offset);
        &self.file[at..at + self.data_len]
    }

    /// [`TensorView::data`] for as long as the reader is borrowed, when the reader lends its
    /// bytes (`None` for a view that holds them).
    pub(crate) fn lent_data(&self) -> Option<&'a [u8]> {
        match self.file {
            ViewBytes::Lent(file) => {
                let at = self.in_file(self.data_offset);
                Some(&file[at..at + self.data_len])
            }
            ViewBytes::Owned(_) => None,
        }
    }

    /// The data, borrowed for as long as the reader where the reader lends its bytes, else
    /// copied out of the view.
    pub fn into_data(self) -> std::borrow::Cow<'a, [u8]> {
        match self.lent_data() {
            Some(d) => std::borrow::Cow::Borrowed(d),
            None => std::borrow::Cow::Owned(self.data().to_vec()),
        }
    }

    /// [`TensorView::bytes_value`] for as long as the reader is borrowed, of a view whose
    /// reader lends its bytes (`Ok(None)` for a view that holds them).
    pub(crate) fn lent_bytes_value(&self) -> Result<Option<&'a [u8]>> {
        let n = self.bytes_value()?.len();
        // The value is the end of the data, after its length field: the same bytes, lent.
        Ok(self.lent_data().map(|d| &d[d.len() - n..]))
    }

    /// The position in `file` of the file offset `offset` (the record's or its data's:
    /// checked to lie in `file` when the view was made).
    fn in_file(&self, offset: u64) -> usize {
        usize::try_from(offset - self.base).expect("an offset inside the view's bytes")
    }

    /// Absolute file offset of the first data byte, in the file [`TensorView::path`] names.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// The file holding the data: the reader's own file, or, for a tensor of a sharded
    /// checkpoint, its data file (not the `PREFIX.index` the reader was opened on).
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The stored masked CRC32C of the data.
    pub fn stored_crc(&self) -> u32 {
        self.crc32c
    }

    /// Number of LoD levels (from the index; no record access).
    pub fn lod_levels(&self) -> u32 {
        self.lod_levels
    }

    /// Whether the tensor's record is compressed (SPEC.md 3.4): the view then holds the data,
    /// decoded into a fresh buffer when the view was made.
    pub fn is_compressed(&self) -> bool {
        self.stored_len.is_some()
    }

    /// The bytes the data takes in the file: [`TensorView::data`]'s length, or for a
    /// compressed record its stored (compressed) length.
    pub fn stored_len(&self) -> u64 {
        self.stored_len.unwrap_or(self.data_len as u64)
    }

    /// The whole Paddle record (header and data): loadable by `paddle.base.core.load_dense_tensor`.
    /// For a compressed record (SPEC.md 3.4): its header followed by the decoded data, which
    /// is not a record Paddle loads (the header announces compressed data).
    pub fn record(&self) -> &[u8] {
        // record_offset <= data_offset and data end are within the file (checked in `view`).
        &self.file[self.in_file(self.record_offset)..self.in_file(self.data_offset) + self.data_len]
    }

    /// The record's LoD, read from the record header (zero-copy).
    pub fn lod(&self) -> Result<Lod<'_>> {
        if self.lod_levels == 0 {
            return Ok(Lod::default());
        }
        Ok(self.record_header()?.lod)
    }

    /// Decodes the record header; a native record must carry both of paramdex's checksums
    /// (SPEC.md 3.2), so that no header byte is read unchecked, and end where the index says.
    fn record_header(&self) -> Result<record::RecordHeader<'_>> {
        if self.stored_len.is_some() {
            // The view holds the header and the decoded data, not the stored bytes the header
            // announces: the header alone is decoded (the stored length is checked against the
            // entry by `check_record`).
            let h = record::decode_head(self.record(), self.record_offset)?;
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
            return Ok(h);
        }
        record_header(
            self.record(),
            self.record_offset,
            self.data_offset,
            &self.display_name(),
        )
    }

    /// Checks the data against its stored CRC32C (a bytes value: its encoding, then
    /// TensorFlow's string checksum, SPEC.md 6.1).
    pub fn verify_crc(&self) -> Result<()> {
        self.check_crc(self.computed_crc()?)
    }

    /// The (unmasked) checksum of the data as the entry stores it: CRC32C, or for a bytes
    /// value TensorFlow's string checksum (an error when its encoding is corrupt).
    fn computed_crc(&self) -> Result<u32> {
        if self.dtype == DType::Bytes {
            let masked =
                bytes_value::entry_crc(self.data(), &self.display_name(), self.data_offset)
                    .map_err(|e| e.context(self.path))?;
            Ok(unmask_crc(masked))
        } else {
            Ok(crc32c(self.data()))
        }
    }

    /// The value of a bytes value (SPEC.md 6.1), zero-copy, checked: the data checksum, the
    /// length field, its checksum and the byte count. [`Error::DTypeMismatch`] for a tensor
    /// that is not a bytes value.
    pub fn bytes_value(&self) -> Result<&[u8]> {
        if self.dtype != DType::Bytes {
            return Err(Error::DTypeMismatch {
                tensor: self.display_name(),
                wanted: "a bytes value",
                wanted_dtypes: &[DType::Bytes],
                found: self.dtype,
            });
        }
        self.verify_crc()?;
        bytes_value::decode(self.data(), &self.display_name(), self.data_offset)
            .map_err(|e| e.context(self.path))
    }

    /// Compares the plain CRC32C of the data, computed elsewhere (e.g. in pieces on several
    /// threads), with the stored checksum. A bytes value's checksum is not a plain CRC32C: it
    /// is computed again here (its data is small).
    pub(crate) fn check_computed_crc(&self, computed: u32) -> Result<()> {
        if self.dtype == DType::Bytes {
            return self.verify_crc();
        }
        self.check_crc(computed)
    }

    fn check_crc(&self, computed: u32) -> Result<()> {
        let stored = unmask_crc(self.crc32c);
        if computed != stored {
            return Err(data_crc_mismatch(
                self.display_name(),
                self.data_offset,
                self.data_len,
                stored,
                computed,
            )
            .context(self.path));
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
        if h.dtype.paddle_code() != self.dtype.paddle_code()
            || h.dims.as_slice() != self.shape.as_slice()
        {
            return Err(bad(format!(
                "record says {} {:?}, index says {} {:?}",
                h.dtype,
                h.dims.as_slice(),
                self.dtype,
                self.shape.as_slice()
            )));
        }
        let stored_agrees = match self.stored_len {
            None => h.codec == 0 && h.data_len == self.data_len as u64,
            Some(n) => h.codec != 0 && h.data_len == n && h.decoded_len == self.data_len as u64,
        };
        if h.header_len as u64 + self.record_offset != self.data_offset || !stored_agrees {
            return Err(bad("record layout disagrees with the index entry".into()));
        }
        if h.lod.levels() as u64 != u64::from(self.lod_levels) {
            return Err(bad(format!(
                "record has {} LoD levels, index says {}",
                h.lod.levels(),
                self.lod_levels
            )));
        }
        // A native record is always named (SPEC.md 2, 8.2): `verify` relies on this check to
        // know that every record of the region is its own name's.
        match h.name {
            Some(n) if n == self.key() => {}
            Some(n) => {
                return Err(bad(format!(
                    "record is named {}",
                    slice_key::display_key(n)
                )))
            }
            None => return Err(bad("record has no name".into())),
        }
        let full = self.slice.as_ref().map(|s| s.full_shape.as_slice());
        if h.full_shape.as_deref() != full {
            return Err(bad(format!(
                "record says it is a slice of a tensor of shape {:?}, the index says {:?}",
                h.full_shape.as_deref(),
                full
            )));
        }
        if let Some(c) = h.data_crc {
            if c != self.crc32c {
                return Err(bad("record and index disagree on the data checksum".into()));
            }
        }
        Ok(())
    }

    /// The data as a typed slice, zero-copy. [`Error::DTypeMismatch`] if `T` is not the
    /// dtype's element type, [`Error::Misaligned`] if the data is not aligned for `T` (only
    /// when the file's alignment is below `align_of::<T>()`: [`TensorView::data`] gives the
    /// bytes to copy), [`Error::Unsupported`] on a big-endian host.
    pub fn as_slice<T: crate::element::Element>(&self) -> Result<&[T]> {
        crate::element::cast(self.dtype, self.data(), &self.display_name())
    }
}

/// The bytes of a [`SliceData`].
#[derive(Clone, Debug)]
enum SliceBytes<'a> {
    /// Borrowed from the file: one stored tensor or slice holds the region as one run.
    Borrowed(&'a [u8]),
    /// Copied: 8-byte words (aligned for every element type), of which `len` bytes are used.
    Owned { words: Vec<u64>, len: usize },
}

/// A region of a tensor, read by [`Reader::get_slice`](crate::Reader::get_slice): borrowed
/// from the file when one stored tensor or slice holds it as one contiguous run, otherwise
/// copied once into an owned buffer aligned for every element type.
#[derive(Clone, Debug)]
pub struct SliceData<'a> {
    dtype: DType,
    shape: Dims,
    bytes: SliceBytes<'a>,
    /// The tensor's name, for messages.
    name: String,
}

impl<'a> SliceData<'a> {
    pub(super) fn borrowed(data: &'a [u8], dtype: DType, region: &Region, name: String) -> Self {
        SliceData {
            dtype,
            shape: Dims::from_slice(&region.len),
            bytes: SliceBytes::Borrowed(data),
            name,
        }
    }

    /// A zeroed buffer of `len` bytes for the region, filled by the caller.
    pub(super) fn owned(len: usize, dtype: DType, region: &Region, name: String) -> Self {
        SliceData {
            dtype,
            shape: Dims::from_slice(&region.len),
            bytes: SliceBytes::Owned {
                words: vec![0u64; len.div_ceil(8)],
                len,
            },
            name,
        }
    }

    /// The region `region` of the tensor, read from `stored` (a row-major array of shape
    /// `stored_shape`, the region starting at `at` in it): borrowed when it is one run there.
    pub(super) fn from_stored(
        stored: &'a [u8],
        stored_shape: &[u64],
        at: &[u64],
        region: &Region,
        dtype: DType,
        name: String,
    ) -> Result<Self> {
        let esize = dtype.size() as u64;
        let local = Region {
            start: at.to_vec(),
            len: region.len.clone(),
        };
        if let Some((first, n)) = region::contiguous(stored_shape, &local) {
            // The region lies inside the stored array, whose bytes are all there.
            let range = first
                .checked_mul(esize)
                .zip(n.checked_mul(esize))
                .and_then(|(s, l)| Some((usize::try_from(s).ok()?, usize::try_from(l).ok()?)))
                .and_then(|(s, l)| stored.get(s..s.checked_add(l)?));
            if let Some(run) = range {
                return Ok(Self::borrowed(run, dtype, region, name));
            }
        }
        Self::copied(stored, stored_shape, at, region, dtype, name)
    }

    /// [`SliceData::from_stored`], always copied (for a view that holds its data: a
    /// compressed record's decoded bytes, which the result cannot borrow).
    pub(super) fn copied(
        stored: &[u8],
        stored_shape: &[u64],
        at: &[u64],
        region: &Region,
        dtype: DType,
        name: String,
    ) -> Result<Self> {
        let bytes = region::byte_len(region, dtype.size())?;
        let mut out = Self::owned(bytes, dtype, region, name);
        region::copy_region(
            stored,
            stored_shape,
            at,
            out.bytes_mut(),
            &region.len,
            &vec![0; region.rank()],
            &region.len,
            dtype.size(),
        )
        .map_err(|d| Error::corrupt("tensor data", 0, format!("{}: {d}", out.name)))?;
        Ok(out)
    }

    /// The owned bytes, to fill (empty for borrowed data).
    pub(super) fn bytes_mut(&mut self) -> &mut [u8] {
        match &mut self.bytes {
            SliceBytes::Borrowed(_) => &mut [],
            SliceBytes::Owned { words, len } => {
                &mut bytemuck::cast_slice_mut::<u64, u8>(words)[..*len]
            }
        }
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The region's lengths: the shape of the data.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The region's little-endian, row-major bytes.
    pub fn data(&self) -> &[u8] {
        match &self.bytes {
            SliceBytes::Borrowed(b) => b,
            SliceBytes::Owned { words, len } => &bytemuck::cast_slice::<u64, u8>(words)[..*len],
        }
    }

    /// Whether the bytes are borrowed from the file (no copy was made).
    pub fn is_borrowed(&self) -> bool {
        matches!(self.bytes, SliceBytes::Borrowed(_))
    }

    /// The data as a typed slice. Errors as [`TensorView::as_slice`] does.
    pub fn as_slice<T: crate::element::Element>(&self) -> Result<&[T]> {
        crate::element::cast(self.dtype, self.data(), &self.name)
    }

    /// The bytes, borrowed from the file when they were not copied.
    pub fn into_cow(self) -> std::borrow::Cow<'a, [u8]> {
        match self.bytes {
            SliceBytes::Borrowed(b) => std::borrow::Cow::Borrowed(b),
            owned => std::borrow::Cow::Owned(
                SliceData {
                    bytes: owned,
                    ..self
                }
                .into_vec(),
            ),
        }
    }

    /// The bytes, owned.
    pub fn into_vec(self) -> Vec<u8> {
        match self.bytes {
            SliceBytes::Borrowed(b) => b.to_vec(),
            SliceBytes::Owned { words, len } => {
                let mut v = bytemuck::cast_slice::<u64, u8>(&words).to_vec();
                v.truncate(len);
                v
            }
        }
    }
}
