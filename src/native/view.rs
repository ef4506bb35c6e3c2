//! [`TensorView`]: a zero-copy view of one tensor inside a [`Reader`](crate::Reader)'s file,
//! with the checks that tie it to its record (SPEC.md 8.2).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::name;
use crate::native::entry::Dims;
use crate::record::{self, Lod};

/// A name kept inline up to 64 bytes (most are shorter): building a view does not allocate.
pub(super) type NameBuf = smallvec::SmallVec<[u8; 64]>;

/// A zero-copy view of one tensor inside a [`Reader`](crate::Reader)'s file.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    pub(super) name: NameBuf,
    pub(super) dtype: DType,
    pub(super) shape: Dims,
    pub(super) data: &'a [u8],
    pub(super) data_offset: u64,
    pub(super) record_offset: u64,
    pub(super) crc32c: u32,
    pub(super) lod_levels: u32,
    pub(super) file: &'a [u8],
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
                context: None,
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
