//! Tensor records: PaddlePaddle's serialized DenseTensor (formerly LoDTensor), byte for byte.
//!
//! One record, all integers little-endian:
//!
//! ```text
//! u32   outer (DenseTensor) version   = 0
//! u64   lod_level                     <= MAX_LOD_LEVELS
//! per LoD level:
//!   u64    byte length                = offset count * 8
//!   u64[]  offsets
//! u32   inner (Tensor) version        = 0
//! i32   desc_size                     0 ..= MAX_DESC_LEN
//! [desc_size] TensorDesc protobuf:
//!   field 1    data_type        varint   (always written, even 0 = BOOL)
//!   field 2    dims             varint each, unpacked (packed accepted on read)
//!   field 1000 pdx_name         bytes    (paramdex; only if the tensor has a name)
//!   field 1004 pdx_full_shape   bytes    (paramdex; packed varints: the shape of the tensor
//!                                         this record is a slice of; only in slice records)
//!   field 1003 pdx_header_crc32c fixed32 (paramdex; masked CRC32C of every record byte
//!                                         before this field's tag; written with field 1001)
//!   field 1001 pdx_data_crc32c  fixed32  (paramdex; masked CRC32C of the data)
//!   field 1002 pdx_padding      bytes    (paramdex; zero bytes; always the last field)
//! [numel * elem_size] raw row-major data
//! ```
//!
//! Paddle skips the paramdex fields as unknown fields, so every record loads in Paddle. Without
//! name, CRC and padding the bytes are exactly what Paddle itself writes. The padding field is
//! how the writer puts the first data byte on an alignment boundary: there is no other padding
//! anywhere in the record. The Paddle facts this relies on, with their sources in Paddle's code,
//! are in `docs/paddle-records.md`.
//!
//! The decoder is strict and bounds every number against the buffer before use; it never panics
//! on any input, and every error names the absolute file offset of the offending field.
#![cfg_attr(not(test), deny(clippy::cast_possible_truncation))]

use smallvec::SmallVec;

use crate::dtype::DType;
use crate::error::{ensure_within, Error, Result};
use crate::format::pbwire::{self, Tag, WireType};
use crate::format::{
    crc32c, mask_crc, put_fixed32, put_fixed64, put_varint64, unmask_crc, varint_len, Cursor,
};
use crate::name::display;

/// Largest accepted tensor rank (TensorFlow's bound), checked on decode and encode.
pub const MAX_RANK: usize = 254;
/// Largest accepted number of LoD levels.
pub const MAX_LOD_LEVELS: u64 = 32;
/// Largest accepted TensorDesc in bytes; a larger desc is rejected before it is parsed.
pub const MAX_DESC_LEN: u64 = 1 << 20;
/// Largest accepted data alignment for [`encode_header`].
pub const MAX_ALIGNMENT: u64 = 4096;

/// TensorDesc field number of the tensor's name (bytes).
pub const FIELD_NAME: u32 = 1000;
/// TensorDesc field number of the masked CRC32C of the record's data (fixed32).
pub const FIELD_DATA_CRC: u32 = 1001;
/// TensorDesc field number of the alignment padding (bytes of zeros, always the last field).
pub const FIELD_PADDING: u32 = 1002;
/// TensorDesc field number of the record header's checksum (fixed32): the masked CRC32C of every
/// record byte before this field's tag (versions, LoD, desc size, dtype, dims, name). Written
/// before [`FIELD_DATA_CRC`], whenever a data CRC is written; checked by every decode.
pub const FIELD_HEADER_CRC: u32 = 1003;
/// TensorDesc field number of the full shape of the tensor a slice record belongs to (packed
/// varints; format version 2, SPEC.md 13): the record's own dims are the slice's, its name is
/// the slice key. Written after the name, before the header checksum, so that it is covered.
pub const FIELD_FULL_SHAPE: u32 = 1004;

/// TensorDesc field number of Paddle's `data_type`.
const FIELD_DATA_TYPE: u32 = 1;
/// TensorDesc field number of Paddle's `dims`.
const FIELD_DIMS: u32 = 2;

/// Bytes before the LoD payloads: outer version (4) + lod_level (8).
const PREFIX_LEN: usize = 12;
/// Bytes between the LoD payloads and the desc: inner version (4) + desc_size (4).
const MIDDLE_LEN: usize = 8;

/// Zero-copy view of a record's LoD: each level is its raw `u64` little-endian bytes inside the
/// buffer the record was decoded from.
#[derive(Clone, Debug, Default)]
pub struct Lod<'a> {
    /// One slice per level; each length is a multiple of 8 (checked by the decoder).
    levels: SmallVec<[&'a [u8]; 2]>,
}

impl<'a> Lod<'a> {
    /// Number of levels (0 for ordinary parameters).
    pub fn levels(&self) -> usize {
        self.levels.len()
    }

    /// The offsets of level `i`; empty if there is no such level.
    pub fn level(&self, i: usize) -> impl ExactSizeIterator<Item = u64> + 'a {
        let bytes: &'a [u8] = self.levels.get(i).copied().unwrap_or(&[]);
        bytes.chunks_exact(8).map(|c| {
            let mut b = [0u8; 8];
            b.copy_from_slice(c); // chunks_exact yields exactly 8 bytes
            u64::from_le_bytes(b)
        })
    }

    /// The raw little-endian bytes of level `i`, if it exists.
    pub fn level_bytes(&self, i: usize) -> Option<&'a [u8]> {
        self.levels.get(i).copied()
    }

    /// All levels, copied out.
    pub fn to_vec(&self) -> Vec<Vec<u64>> {
        (0..self.levels())
            .map(|i| self.level(i).collect())
            .collect()
    }

    /// Whether the record has no LoD.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }
}

/// A decoded record header: everything before the first data byte.
#[derive(Clone, Debug)]
pub struct RecordHeader<'a> {
    /// Element type (TensorDesc field 1).
    pub dtype: DType,
    /// Shape (TensorDesc field 2); empty for a scalar.
    pub dims: SmallVec<[u64; 6]>,
    /// Level-of-detail offsets.
    pub lod: Lod<'a>,
    /// The tensor's name (field [`FIELD_NAME`]), if stored.
    pub name: Option<&'a [u8]>,
    /// For a slice record, the shape of the whole tensor (field [`FIELD_FULL_SHAPE`]).
    pub full_shape: Option<SmallVec<[u64; 6]>>,
    /// The masked CRC32C of the data (field [`FIELD_DATA_CRC`]) as stored, if present.
    pub data_crc: Option<u32>,
    /// The masked CRC32C of the header (field [`FIELD_HEADER_CRC`]) as stored, if present; the
    /// decoder has checked it.
    pub header_crc: Option<u32>,
    /// Bytes from the record start to the first data byte.
    pub header_len: usize,
    /// Data bytes: element count times element size.
    pub data_len: u64,
}

impl RecordHeader<'_> {
    /// Total record bytes: header plus data.
    pub fn record_len(&self) -> u64 {
        (self.header_len as u64).saturating_add(self.data_len)
    }

    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> u64 {
        // Saturating: a zero dim anywhere still gives 0, and decoded headers never overflow
        // (their data_len was computed with checked arithmetic).
        self.dims.iter().fold(1u64, |n, &d| n.saturating_mul(d))
    }
}

/// `numel * elem_size` with overflow checking; empty `dims` is a scalar (1 element).
///
/// A zero dimension gives 0 even when the product of the other dimensions would overflow.
pub fn data_len(dtype: DType, dims: &[u64]) -> Option<u64> {
    if dims.contains(&0) {
        return Some(0);
    }
    dims.iter()
        .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d))
}

/// Absolute offset of byte `pos` of a buffer at `base`, for error messages.
fn at(base: u64, pos: usize) -> u64 {
    base.saturating_add(pos as u64)
}

/// What a buffer whose outer version is not 0 probably is, from its first bytes
/// (reference section 7).
fn sniff(head: &[u8]) -> &'static str {
    let is_text = |b: &u8| matches!(b, 0x20..=0x7e | b'\t' | b'\n' | b'\r');
    match head {
        [0x80, 2 | 4, ..] => {
            "this is a Python pickle (a .pdparams/.pdopt from paddle.save), not a tensor stream"
        }
        [0x80, 3 | 5, ..] => "this looks like a Python pickle, not a tensor stream",
        [0x89, b'P', b'N', b'G', ..] => {
            "this is a PNG image (a broken download?), not a tensor stream"
        }
        [b'{', ..] if head.iter().all(is_text) => {
            "this looks like JSON (a PIR model .json?), not a tensor stream"
        }
        [0x0a, ..] if !head.iter().all(is_text) => {
            "this looks like a .pdmodel (a ProgramDesc protobuf), not a parameter file"
        }
        _ if !head.is_empty() && head.iter().all(is_text) => {
            "this looks like text (an HTML page or a Git LFS pointer?), not a tensor stream"
        }
        _ => {
            "not a Paddle tensor stream, or the stream is misaligned (a previous record was cut \
             short or is not a dense tensor)"
        }
    }
}

/// Decodes the header of the record starting at `buf[0]`.
///
/// `buf` extends to the end of the readable region (the file, or its records region) and `base`
/// is the absolute file offset of `buf[0]`, used in errors. The data bytes are
/// `buf[header_len..header_len + data_len]`, which is checked to lie inside `buf`.
///
/// # Errors
///
/// [`Error::Corrupt`] for a malformed or truncated record (a version other than 0 says what the
/// bytes probably are; a record that runs past the end of `buf` is of kind
/// [`crate::error::Corruption::Truncated`]), [`Error::LimitExceeded`] for a LoD level count, desc size or rank above
/// [`MAX_LOD_LEVELS`], [`MAX_DESC_LEN`] or [`MAX_RANK`], and [`Error::UnknownDType`] for a
/// `data_type` that is not an element type. Every error carries the absolute offset of the bad
/// field.
pub fn decode_header<'a>(buf: &'a [u8], base: u64) -> Result<RecordHeader<'a>> {
    let h = decode_head(buf, base)?;
    let remaining = buf.len() - h.header_len;
    if usize::try_from(h.data_len).map_or(true, |n| n > remaining) {
        return Err(Error::truncated(
            "record",
            base,
            format!(
                "truncated data: record needs {} bytes, {} remain (data of {} bytes at offset {})",
                (h.header_len as u64).saturating_add(h.data_len),
                buf.len(),
                h.data_len,
                at(base, h.header_len)
            ),
        ));
    }
    Ok(h)
}

/// Decodes the header of the record starting at `buf[0]` as [`decode_header`] does, without
/// checking that its data lies inside `buf`: the header itself (LoD levels and desc included)
/// is whole inside `buf` and well formed. Detection uses it to tell a record cut short inside
/// its data (a record, damaged) from bytes that are no record at all.
///
/// # Errors
///
/// As [`decode_header`], but for data running past the end of `buf`.
pub(crate) fn decode_head<'a>(buf: &'a [u8], base: u64) -> Result<RecordHeader<'a>> {
    let p = decode_parts(buf, base)?;
    let desc = p.desc;
    let dtype = desc.dtype.map_err(|(code, pos)| Error::UnknownDType {
        system: "paddle",
        code,
        location: Some(format!(
            "{}data_type field at offset {}",
            desc.name
                .map(|n| format!("tensor {}: ", display(n)))
                .unwrap_or_default(),
            at(p.desc_base, pos)
        )),
    })?;
    let data_len = data_len(dtype, &desc.dims).ok_or_else(|| {
        Error::corrupt(
            "tensor desc",
            p.desc_base,
            format!(
                "element count x element size overflows: dims {:?}, {} bytes per element",
                desc.dims.as_slice(),
                dtype.size()
            ),
        )
    })?;
    Ok(RecordHeader {
        dtype,
        dims: desc.dims,
        lod: Lod { levels: p.levels },
        name: desc.name,
        full_shape: desc.full_shape,
        data_crc: desc.data_crc,
        header_crc: desc.header_crc.map(|(c, _)| c),
        header_len: p.header_len,
        data_len,
    })
}

/// The header of a record whose `data_type` is a number paramdex has no dtype for: everything
/// but the data length, which the element size would give.
#[derive(Clone, Debug)]
pub struct ForeignHeader<'a> {
    /// The `data_type` number (TensorDesc field 1).
    pub code: i64,
    /// Shape (TensorDesc field 2); empty for a scalar.
    pub dims: SmallVec<[u64; 6]>,
    /// Level-of-detail offsets.
    pub lod: Lod<'a>,
    /// The tensor's name (field [`FIELD_NAME`]), if stored.
    pub name: Option<&'a [u8]>,
    /// Bytes from the record start to the first data byte.
    pub header_len: usize,
}

/// Decodes the header of the record starting at `buf[0]` when its `data_type` is a number
/// paramdex does not know; `Ok(None)` when it is a known element type (use [`decode_header`]).
/// The record's data length is unknown: the caller must know where it ends (the end of a file
/// holding one record, a merged file's size field).
///
/// # Errors
///
/// As [`decode_header`] for the bytes before the data, never [`Error::UnknownDType`].
pub fn decode_foreign_header<'a>(buf: &'a [u8], base: u64) -> Result<Option<ForeignHeader<'a>>> {
    let p = decode_parts(buf, base)?;
    let desc = p.desc;
    Ok(match desc.dtype {
        Ok(_) => None,
        Err((code, _)) => Some(ForeignHeader {
            code,
            dims: desc.dims,
            lod: Lod { levels: p.levels },
            name: desc.name,
            header_len: p.header_len,
        }),
    })
}

/// A record's header parts before its dtype is looked up.
struct Parts<'a> {
    levels: SmallVec<[&'a [u8]; 2]>,
    desc: Desc<'a>,
    /// Absolute offset of the desc's first byte.
    desc_base: u64,
    header_len: usize,
}

/// Decodes a record's versions, LoD and desc (checking the header CRC), its dtype not looked up.
fn decode_parts<'a>(buf: &'a [u8], base: u64) -> Result<Parts<'a>> {
    let mut c = Cursor::new(buf, base);
    let short = |c: &Cursor<'_>, what: &str, need: usize| {
        Error::truncated(
            "record",
            at(base, c.position()),
            format!(
                "truncated record header: {what} needs {need} bytes, {} remain",
                c.remaining()
            ),
        )
    };

    let outer = c.u32_le().ok_or_else(|| short(&c, "outer version", 4))?;
    if outer != 0 {
        let head = &buf[..buf.len().min(4)];
        return Err(Error::corrupt(
            "record",
            base,
            format!(
                "outer (DenseTensor) version is {outer} (bytes {}), expected 0: {}",
                hex(head),
                sniff(head)
            ),
        ));
    }

    let lod_pos = c.position();
    let lod_level = c.u64_le().ok_or_else(|| short(&c, "lod_level", 8))?;
    ensure_within(
        "LoD level count",
        lod_level,
        MAX_LOD_LEVELS,
        Some(at(base, lod_pos)),
    )?;
    let mut levels = SmallVec::new();
    for i in 0..lod_level {
        let len_pos = c.position();
        let len = c
            .u64_le()
            .ok_or_else(|| short(&c, "LoD level byte length", 8))?;
        if len % 8 != 0 {
            return Err(Error::corrupt(
                "record",
                at(base, len_pos),
                format!("LoD level {i} byte length {len} is not a multiple of 8"),
            ));
        }
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|n| c.take(n))
            .ok_or_else(|| {
                Error::truncated(
                    "record",
                    at(base, len_pos),
                    format!(
                        "LoD level {i} byte length {len} runs past the end ({} bytes remain)",
                        c.remaining()
                    ),
                )
            })?;
        levels.push(bytes);
    }

    let inner_pos = c.position();
    let inner = c.u32_le().ok_or_else(|| short(&c, "inner version", 4))?;
    if inner != 0 {
        return Err(Error::corrupt(
            "record",
            at(base, inner_pos),
            format!("tensor version {inner} is not supported, only version 0"),
        ));
    }

    let size_pos = c.position();
    let desc_size = c.u32_le().ok_or_else(|| short(&c, "desc_size", 4))? as i32;
    if desc_size < 0 {
        return Err(Error::corrupt(
            "record",
            at(base, size_pos),
            format!("negative tensor desc size {desc_size}"),
        ));
    }
    let desc_len = desc_size.unsigned_abs();
    ensure_within(
        "tensor desc size",
        desc_len,
        MAX_DESC_LEN,
        Some(at(base, size_pos)),
    )?;
    let desc_pos = c.position();
    let desc = usize::try_from(desc_len)
        .ok()
        .and_then(|n| c.take(n))
        .ok_or_else(|| {
            Error::truncated(
                "record",
                at(base, size_pos),
                format!(
                    "tensor desc size {desc_len} runs past the end ({} bytes remain)",
                    c.remaining()
                ),
            )
        })?;
    let header_len = c.position();

    let desc = parse_desc(desc, at(base, desc_pos))?;
    if let Some((stored, tag_pos)) = desc.header_crc {
        // Covers every record byte before the field's tag (within the desc, so within buf).
        let covered = &buf[..desc_pos + tag_pos];
        let computed = crc32c(covered);
        let stored = unmask_crc(stored);
        if computed != stored {
            return Err(Error::ChecksumMismatch {
                what: "record header",
                name: desc.name.map(display),
                offset: base,
                len: covered.len() as u64,
                stored,
                computed,
                context: None,
            });
        }
    }
    Ok(Parts {
        levels,
        desc,
        desc_base: at(base, desc_pos),
        header_len,
    })
}

/// Decodes one record: its header and its data bytes.
///
/// # Errors
///
/// As [`decode_header`].
pub fn decode_record<'a>(buf: &'a [u8], base: u64) -> Result<(RecordHeader<'a>, &'a [u8])> {
    let h = decode_header(buf, base)?;
    // decode_header checked header_len + data_len <= buf.len().
    let data = usize::try_from(h.data_len)
        .ok()
        .and_then(|n| h.header_len.checked_add(n))
        .and_then(|end| buf.get(h.header_len..end))
        .ok_or_else(|| Error::corrupt("record", base, "data out of bounds"))?;
    Ok((h, data))
}

/// Iterator over consecutive records (a Paddle combined stream); see [`walk`].
#[derive(Clone, Debug)]
pub struct Walk<'a> {
    buf: &'a [u8],
    base: u64,
    pos: usize,
    failed: bool,
}

impl Walk<'_> {
    /// Bytes of the buffer consumed by the records yielded so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

impl<'a> Iterator for Walk<'a> {
    type Item = Result<(u64, RecordHeader<'a>, &'a [u8])>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let offset = at(self.base, self.pos);
        let rest = &self.buf[self.pos..];
        match decode_record(rest, offset) {
            Ok((h, data)) => {
                // header_len + data_len <= rest.len(), so this stays within buf.
                self.pos += h.header_len + data.len();
                Some(Ok((offset, h, data)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Walk<'_> {}

/// Walks the consecutive records filling `buf` (which sits at file offset `base`), yielding each
/// record's absolute offset, header and data. It ends at the end of `buf`, or after the first
/// error (a partial record at the end is an error).
pub fn walk(buf: &[u8], base: u64) -> Walk<'_> {
    Walk {
        buf,
        base,
        pos: 0,
        failed: false,
    }
}

/// The fields of a parsed TensorDesc.
struct Desc<'a> {
    /// The dtype, or the unknown number and its field's position in the desc.
    dtype: std::result::Result<DType, (i64, usize)>,
    dims: SmallVec<[u64; 6]>,
    name: Option<&'a [u8]>,
    full_shape: Option<SmallVec<[u64; 6]>>,
    data_crc: Option<u32>,
    /// The stored header CRC and the position of its tag within the desc.
    header_crc: Option<(u32, usize)>,
}

/// Parses a TensorDesc (`base` = absolute offset of its first byte).
fn parse_desc<'a>(desc: &'a [u8], base: u64) -> Result<Desc<'a>> {
    let bad = |pos: usize, detail: String| Error::corrupt("tensor desc", at(base, pos), detail);
    let mut data_type: Option<(u64, usize)> = None;
    let mut dims: SmallVec<[u64; 6]> = SmallVec::new();
    let mut name = None;
    let mut full_shape: Option<SmallVec<[u64; 6]>> = None;
    let mut data_crc = None;
    let mut header_crc = None;
    // After the header CRC: (data CRC seen, padding seen).
    let mut after_crc = (false, false);

    let push_dim = |dims: &mut SmallVec<[u64; 6]>, v: u64, pos: usize| -> Result<()> {
        if (v as i64) < 0 {
            return Err(bad(pos, format!("negative dimension {}", v as i64)));
        }
        ensure_within("tensor rank", dims.len() + 1, MAX_RANK, Some(at(base, pos)))?;
        dims.push(v);
        Ok(())
    };

    // Every error names the offset of the field's tag.
    let mut next = 0usize;
    while next < desc.len() {
        let pos = next;
        let (Tag { field, wire }, p) =
            pbwire::read_tag(desc, pos).ok_or_else(|| bad(pos, "malformed field tag".into()))?;
        if field == 0 {
            return Err(bad(pos, "field number 0".into()));
        }
        // The header CRC covers the bytes before it; after it only the data CRC and the
        // padding may follow, once each, so no byte of the header goes unchecked.
        if header_crc.is_some() {
            // The padding is last; the data CRC comes at most once.
            let allowed = !after_crc.1
                && match field {
                    FIELD_DATA_CRC => !after_crc.0,
                    FIELD_PADDING => true,
                    _ => false,
                };
            if !allowed {
                return Err(bad(
                    pos,
                    format!("field {field} after the header checksum (field {FIELD_HEADER_CRC})"),
                ));
            }
            after_crc = (
                after_crc.0 || field == FIELD_DATA_CRC,
                after_crc.1 || field == FIELD_PADDING,
            );
        }
        let varint = |p: usize| {
            pbwire::read_varint(desc, p)
                .ok_or_else(|| bad(pos, format!("field {field}: malformed varint")))
        };
        let bytes = |p: usize| -> Result<(&'a [u8], usize)> {
            let (len, p) = pbwire::read_varint(desc, p)
                .ok_or_else(|| bad(pos, format!("field {field}: malformed length")))?;
            pbwire::read_bytes(desc, p, len).ok_or_else(|| {
                bad(
                    pos,
                    format!(
                        "field {field}: length {len} runs past the end of the desc ({} bytes remain)",
                        desc.len() - p
                    ),
                )
            })
        };
        let fixed32 = |p: usize| {
            pbwire::read_fixed32(desc, p)
                .ok_or_else(|| bad(pos, format!("field {field}: truncated fixed32")))
        };
        let fixed64 = |p: usize| {
            pbwire::read_fixed64(desc, p)
                .ok_or_else(|| bad(pos, format!("field {field}: truncated fixed64")))
        };
        next = match (field, wire) {
            (FIELD_DATA_TYPE, WireType::VARINT) => {
                let (v, p) = varint(p)?;
                data_type = Some((v, pos));
                p
            }
            (FIELD_DIMS, WireType::VARINT) => {
                let (v, p) = varint(p)?;
                push_dim(&mut dims, v, pos)?;
                p
            }
            (FIELD_DIMS, WireType::LEN) => {
                let (packed, p) = bytes(p)?;
                let mut q = 0usize;
                while q < packed.len() {
                    let (v, r) = pbwire::read_varint(packed, q)
                        .ok_or_else(|| bad(pos, "packed dims: malformed varint".into()))?;
                    push_dim(&mut dims, v, pos)?;
                    q = r;
                }
                p
            }
            (FIELD_NAME, WireType::LEN) => {
                let (b, p) = bytes(p)?;
                name = Some(b);
                p
            }
            (FIELD_FULL_SHAPE, WireType::LEN) => {
                if full_shape.is_some() {
                    return Err(bad(pos, format!("field {field} appears twice")));
                }
                let (packed, p) = bytes(p)?;
                let mut shape = SmallVec::new();
                let mut q = 0usize;
                while q < packed.len() {
                    let (v, r) = pbwire::read_varint(packed, q)
                        .ok_or_else(|| bad(pos, "full shape: malformed varint".into()))?;
                    push_dim(&mut shape, v, pos)?;
                    q = r;
                }
                full_shape = Some(shape);
                p
            }
            (FIELD_DATA_CRC, WireType::FIXED32) => {
                let (v, p) = fixed32(p)?;
                data_crc = Some(v);
                p
            }
            (FIELD_HEADER_CRC, WireType::FIXED32) => {
                let (v, p) = fixed32(p)?;
                header_crc = Some((v, pos));
                p
            }
            (FIELD_PADDING, WireType::LEN) => {
                // Zeros only: no byte of a paramdex header goes unchecked.
                let (b, p) = bytes(p)?;
                if let Some(i) = b.iter().position(|&b| b != 0) {
                    return Err(bad(pos, format!("padding byte {i} is not zero")));
                }
                p
            }
            (
                FIELD_DATA_TYPE | FIELD_DIMS | FIELD_NAME | FIELD_DATA_CRC | FIELD_PADDING
                | FIELD_HEADER_CRC | FIELD_FULL_SHAPE,
                _,
            ) => {
                return Err(bad(
                    pos,
                    format!("field {field} has wrong wire type {wire}"),
                ));
            }
            // Unknown fields (Paddle's, or a later paramdex's) are skipped, each wire type
            // with its own message.
            (_, WireType::VARINT) => varint(p)?.1,
            (_, WireType::FIXED64) => fixed64(p)?.1,
            (_, WireType::LEN) => bytes(p)?.1,
            (_, WireType::FIXED32) => fixed32(p)?.1,
            _ => {
                return Err(bad(
                    pos,
                    format!("field {field}: unsupported wire type {wire}"),
                ))
            }
        };
    }

    let (code, code_pos) =
        data_type.ok_or_else(|| bad(0, "missing required field data_type (1)".into()))?;
    // proto2 int32: a negative value is a sign-extended 10-byte varint.
    let code = code as i64;
    let dtype = DType::from_paddle(code).ok_or((code, code_pos));
    Ok(Desc {
        dtype,
        dims,
        name,
        full_shape,
        data_crc,
        header_crc,
    })
}

/// Lowercase hex of a few bytes, space separated.
fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// What to encode: a record header's contents.
#[derive(Clone, Copy, Debug)]
pub struct RecordSpec<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape; empty for a scalar. Every dim must be at most `i64::MAX`.
    pub dims: &'a [u64],
    /// LoD levels (empty for ordinary parameters). Not checked here; see [`validate_lod`].
    pub lod: &'a [Vec<u64>],
    /// Name to store in field [`FIELD_NAME`]; `None` writes no name.
    pub name: Option<&'a [u8]>,
    /// Masked CRC32C to store in field [`FIELD_DATA_CRC`]; `None` writes no CRC field. When
    /// given, the header's own CRC (field [`FIELD_HEADER_CRC`]) is written just before it.
    pub data_crc: Option<u32>,
    /// For a slice record, the shape of the whole tensor (field [`FIELD_FULL_SHAPE`]); `None`
    /// for every other record.
    pub full_shape: Option<&'a [u64]>,
}

/// Layout of an encoded header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeaderLayout {
    /// Header bytes written: the data starts this many bytes after the record start.
    pub header_len: usize,
    /// Offset within the header of the 4 CRC bytes (when [`RecordSpec::data_crc`] was given),
    /// so the CRC can be patched in after the data has been streamed.
    pub crc_pos: Option<usize>,
}

/// Total size of the padding field (tag, length varint and zeros) that moves `end` onto a
/// multiple of `alignment`: 0 if already aligned, else the smallest representable size of at
/// least 3 that works. Sizes 3..=130 use a 1-byte length, 132..=16387 a 2-byte length; 131 is
/// not representable and is skipped by going one alignment further.
fn padding_field_len(end: u64, alignment: u64) -> usize {
    let rem = end % alignment;
    if rem == 0 {
        return 0;
    }
    // alignment <= 4096, so every candidate below fits in a 2-byte length.
    let mut t = alignment - rem;
    while t < 3 || t == 131 {
        t += alignment;
    }
    usize::try_from(t).expect("padding is below twice the alignment, at most 8192")
}

/// Appends the padding field whose total size is `t` (as computed by [`padding_field_len`]).
fn put_padding(out: &mut Vec<u8>, t: usize) {
    if t == 0 {
        return;
    }
    let len = if t <= 130 { t - 3 } else { t - 4 };
    pbwire::put_tag(out, FIELD_PADDING, WireType::LEN);
    put_varint64(out, len as u64);
    out.resize(out.len() + len, 0);
}

/// Appends the header of a record (everything up to the first data byte) to `out`.
///
/// `record_offset` is the absolute file offset at which the record will start; the header is
/// padded (through field [`FIELD_PADDING`] only) so that the first data byte lands on a multiple
/// of `alignment`. With no name, no CRC and alignment 1 the bytes are exactly Paddle's.
/// On error `out` is left unchanged.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for an alignment that is not a power of two in
/// 1..=[`MAX_ALIGNMENT`] or a record offset so large that the header would pass `u64::MAX`;
/// [`Error::LimitExceeded`] for a rank, LoD level count or desc size above [`MAX_RANK`],
/// [`MAX_LOD_LEVELS`] or [`MAX_DESC_LEN`]; [`Error::InvalidTensor`] for a dim above `i64::MAX`
/// or a data size that overflows `u64`.
pub fn encode_header(
    spec: &RecordSpec<'_>,
    record_offset: u64,
    alignment: u64,
    out: &mut Vec<u8>,
) -> Result<HeaderLayout> {
    if !alignment.is_power_of_two() || alignment > MAX_ALIGNMENT {
        return Err(Error::InvalidArgument(format!(
            "alignment {alignment} is not a power of two in 1..={MAX_ALIGNMENT}"
        )));
    }
    ensure_within("tensor rank", spec.dims.len(), MAX_RANK, None)?;
    ensure_within("LoD level count", spec.lod.len(), MAX_LOD_LEVELS, None)?;
    let invalid = |detail: String| Error::InvalidTensor {
        name: spec.name.map_or_else(|| "<unnamed>".to_string(), display),
        detail,
    };
    if let Some(shape) = spec.full_shape {
        ensure_within("tensor rank", shape.len(), MAX_RANK, None)?;
    }
    let full_dims = spec.full_shape.unwrap_or(&[]);
    if let Some(d) = spec
        .dims
        .iter()
        .chain(full_dims)
        .find(|&&d| d > i64::MAX as u64)
    {
        return Err(invalid(format!("dimension {d} exceeds i64::MAX")));
    }
    if data_len(spec.dtype, spec.dims).is_none() {
        return Err(invalid(format!(
            "element count x element size overflows u64: dims {:?}, {} bytes per element",
            spec.dims,
            spec.dtype.size()
        )));
    }

    // Sizes first, so nothing is written unless everything fits.
    let mut lod_len = 0usize;
    for level in spec.lod {
        lod_len = level
            .len()
            .checked_mul(8)
            .and_then(|n| n.checked_add(8))
            .and_then(|n| n.checked_add(lod_len))
            .ok_or_else(|| invalid("LoD too large".into()))?;
    }
    let code = u64::from(spec.dtype.paddle_code().unsigned_abs()); // codes are >= 0
    let mut desc_len = pbwire::tag_len(FIELD_DATA_TYPE) + varint_len(code);
    desc_len += spec
        .dims
        .iter()
        .map(|&d| pbwire::tag_len(FIELD_DIMS) + varint_len(d))
        .sum::<usize>();
    let name_len = spec.name.map_or(0, |n| {
        pbwire::tag_len(FIELD_NAME) + varint_len(n.len() as u64) + n.len()
    });
    let full_body: usize = full_dims.iter().map(|&d| varint_len(d)).sum();
    let full_len = spec.full_shape.map_or(0, |_| {
        pbwire::tag_len(FIELD_FULL_SHAPE) + varint_len(full_body as u64) + full_body
    });
    // The data CRC comes with the header CRC just before it.
    let crc_len = spec.data_crc.map_or(0, |_| {
        pbwire::tag_len(FIELD_HEADER_CRC) + 4 + pbwire::tag_len(FIELD_DATA_CRC) + 4
    });
    desc_len = desc_len
        .saturating_add(name_len)
        .saturating_add(full_len)
        .saturating_add(crc_len);
    let unpadded = (PREFIX_LEN + MIDDLE_LEN)
        .saturating_add(lod_len)
        .saturating_add(desc_len);
    let unpadded_end = record_offset.checked_add(unpadded as u64).ok_or_else(|| {
        Error::InvalidArgument(format!("record offset {record_offset} too large"))
    })?;
    let pad = padding_field_len(unpadded_end, alignment);
    let desc_len = desc_len.saturating_add(pad);
    ensure_within("tensor desc size", desc_len, MAX_DESC_LEN, None)?;
    let header_len = unpadded + pad;
    if record_offset.checked_add(header_len as u64).is_none() {
        return Err(Error::InvalidArgument(format!(
            "record offset {record_offset} too large"
        )));
    }

    let start = out.len();
    out.reserve(header_len);
    put_fixed32(out, 0); // outer version
    put_fixed64(out, spec.lod.len() as u64);
    for level in spec.lod {
        put_fixed64(out, level.len() as u64 * 8);
        for &o in level {
            put_fixed64(out, o);
        }
    }
    put_fixed32(out, 0); // inner version
    put_fixed32(
        out,
        u32::try_from(desc_len).expect("desc_len <= MAX_DESC_LEN was checked above"),
    );
    pbwire::put_varint_field(out, FIELD_DATA_TYPE, code);
    for &d in spec.dims {
        pbwire::put_varint_field(out, FIELD_DIMS, d);
    }
    if let Some(n) = spec.name {
        pbwire::put_len_field(out, FIELD_NAME, n);
    }
    if spec.full_shape.is_some() {
        pbwire::put_tag(out, FIELD_FULL_SHAPE, WireType::LEN);
        put_varint64(out, full_body as u64);
        for &d in full_dims {
            put_varint64(out, d);
        }
    }
    let mut crc_pos = None;
    if let Some(crc) = spec.data_crc {
        let header_crc = mask_crc(crc32c(&out[start..]));
        pbwire::put_fixed32_field(out, FIELD_HEADER_CRC, header_crc);
        pbwire::put_tag(out, FIELD_DATA_CRC, WireType::FIXED32);
        crc_pos = Some(out.len() - start);
        put_fixed32(out, crc);
    }
    put_padding(out, pad);
    debug_assert_eq!(out.len() - start, header_len);
    Ok(HeaderLayout {
        header_len,
        crc_pos,
    })
}

/// Checks a LoD against the tensor's shape, as Paddle requires: every level is non-empty (at
/// least `[0]`), starts at 0 and never decreases; the last offset of level `i` equals the number
/// of offsets of level `i + 1` minus 1; the last offset of the last level equals `dims[0]`. A
/// scalar cannot have a LoD. An empty LoD is always valid.
///
/// # Errors
///
/// A readable reason when the LoD is inconsistent.
pub fn validate_lod(lod: &[Vec<u64>], dims: &[u64]) -> std::result::Result<(), String> {
    if lod.is_empty() {
        return Ok(());
    }
    let Some(&rows) = dims.first() else {
        return Err("a scalar (rank 0) tensor cannot have a LoD".into());
    };
    for (i, level) in lod.iter().enumerate() {
        let (Some(&first), Some(&last)) = (level.first(), level.last()) else {
            return Err(format!("LoD level {i} is empty (it needs at least [0])"));
        };
        if first != 0 {
            return Err(format!("LoD level {i} starts at {first}, not 0"));
        }
        if let Some(w) = level.windows(2).position(|w| w[1] < w[0]) {
            return Err(format!(
                "LoD level {i} decreases at index {}: {} after {}",
                w + 1,
                level[w + 1],
                level[w]
            ));
        }
        let (limit, what) = match lod.get(i + 1) {
            Some(next) => {
                // Level i + 1 is checked for emptiness in the next round, but its sequence
                // count is needed now.
                let sequences = next.len().checked_sub(1).ok_or_else(|| {
                    format!("LoD level {} is empty (it needs at least [0])", i + 1)
                })?;
                (
                    sequences as u64,
                    format!("level {} holds {sequences} sequences", i + 1),
                )
            }
            None => (rows, format!("the first dimension is {rows}")),
        };
        if last != limit {
            return Err(format!(
                "LoD level {i} ends at {last}, but {what} (they must be equal)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{crc32c, mask_crc};
    use crate::proto::paddle::PdxTensorDesc;
    use prost::Message;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '|')
            .collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn spec<'a>(dtype: DType, dims: &'a [u64], lod: &'a [Vec<u64>]) -> RecordSpec<'a> {
        RecordSpec {
            dtype,
            dims,
            lod,
            name: None,
            data_crc: None,
            full_shape: None,
        }
    }

    fn record(s: &RecordSpec<'_>, offset: u64, alignment: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(s, offset, alignment, &mut out).unwrap();
        out.extend_from_slice(data);
        out
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A valid record to mutate: fp32 [3] = [1, 2, 3].
    fn fp32_3() -> Vec<u8> {
        record(
            &spec(DType::Float32, &[3], &[]),
            0,
            1,
            &f32_bytes(&[1.0, 2.0, 3.0]),
        )
    }

    fn err_text(buf: &[u8]) -> String {
        match decode_header(buf, 0) {
            Ok(h) => panic!("expected an error, got {h:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn fp32_example_is_byte_exact() {
        let want = unhex(
            "00000000 0000000000000000 00000000 04000000 08 05 10 03 0000803f 00000040 00004040",
        );
        assert_eq!(want.len(), 36);
        assert_eq!(fp32_3(), want);
        let (h, data) = decode_record(&want, 0).unwrap();
        assert_eq!(h.dtype, DType::Float32);
        assert_eq!(h.dims.as_slice(), &[3]);
        assert!(h.lod.is_empty());
        assert_eq!(h.name, None);
        assert_eq!(h.data_crc, None);
        assert_eq!(h.header_len, 24);
        assert_eq!(h.data_len, 12);
        assert_eq!(h.record_len(), 36);
        assert_eq!(h.numel(), 3);
        assert_eq!(data, &want[24..]);
    }

    #[test]
    fn lod_example_is_byte_exact() {
        let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        let lod = vec![vec![0u64, 2, 5]];
        let got = record(&spec(DType::Float32, &[5, 1], &lod), 0, 1, &data);
        let mut want = unhex(
            "00000000 0100000000000000 1800000000000000
             0000000000000000 0200000000000000 0500000000000000
             00000000 06000000 08 05 10 05 10 01",
        );
        want.extend_from_slice(&data);
        assert_eq!(got, want);
        let h = decode_header(&got, 0).unwrap();
        assert_eq!(h.lod.levels(), 1);
        assert_eq!(h.lod.to_vec(), lod);
        assert_eq!(h.lod.level(0).len(), 3);
        assert_eq!(h.lod.level(1).len(), 0);
        assert_eq!(h.lod.level_bytes(0).map(<[u8]>::len), Some(24));
        assert_eq!(h.dims.as_slice(), &[5, 1]);
        assert_eq!(validate_lod(&lod, &h.dims), Ok(()));
    }

    #[test]
    fn small_descs_match_paddle() {
        // Reference: a 0-d tensor's desc is `08 05`; [0,5] is `08 05 10 00 10 05`; BOOL is `08 00`.
        let r = record(&spec(DType::Float32, &[], &[]), 0, 1, &[0; 4]);
        assert_eq!(&r[16..22], &unhex("02000000 0805"));
        let r = record(&spec(DType::Float32, &[0, 5], &[]), 0, 1, &[]);
        assert_eq!(&r[16..], &unhex("06000000 080510001005"));
        assert_eq!(decode_header(&r, 0).unwrap().data_len, 0);
        let r = record(&spec(DType::Bool, &[1], &[]), 0, 1, &[1]);
        assert_eq!(&r[16..], &unhex("04000000 08001001 01"));
    }

    #[test]
    fn a_slice_record_carries_the_full_shape_under_its_header_checksum() {
        let data = f32_bytes(&[1.0, 2.0]);
        let crc = mask_crc(crc32c(&data));
        let s = RecordSpec {
            name: Some(b"\x00key"),
            data_crc: Some(crc),
            full_shape: Some(&[4, 300]),
            ..spec(DType::Float32, &[1, 2], &[])
        };
        let mut out = Vec::new();
        let layout = encode_header(&s, 0, 64, &mut out).unwrap();
        // After the name: field 1004 (e2 3e), 3 bytes of packed varints 04 ac 02.
        // 20 bytes before the desc; data_type (2), two dims (4), the name (2 + 1 + 4).
        let name_end = 20 + 2 + 4 + 7;
        assert_eq!(&out[name_end..name_end + 6], &unhex("e23e 03 04ac02"));
        out.extend_from_slice(&data);
        let h = decode_header(&out, 0).unwrap();
        assert_eq!(h.full_shape.as_deref(), Some(&[4u64, 300][..]));
        assert_eq!(h.dims.as_slice(), &[1, 2]);
        assert_eq!(h.header_len, layout.header_len);
        assert_eq!(h.header_len % 64, 0);
        // The header checksum covers it: any change to its bytes is caught.
        let mut bad = out.clone();
        bad[name_end + 3] = 0x05;
        assert!(matches!(
            decode_header(&bad, 0),
            Err(Error::ChecksumMismatch { .. })
        ));
        // A record without it has none.
        let plain = record(&spec(DType::Float32, &[2], &[]), 0, 1, &data);
        assert_eq!(decode_header(&plain, 0).unwrap().full_shape, None);
    }

    #[test]
    fn name_crc_and_padding_fields_are_exact() {
        let data = f32_bytes(&[1.0, 2.0]);
        let crc = mask_crc(crc32c(&data));
        let s = RecordSpec {
            name: Some(b"w"),
            data_crc: Some(crc),
            full_shape: None,
            ..spec(DType::Float32, &[2], &[])
        };
        let mut out = Vec::new();
        let layout = encode_header(&s, 0, 1, &mut out).unwrap();
        // desc: data_type, dims, name, header CRC (dd 3e), data CRC (cd 3e): 20 bytes.
        let mut want = unhex("00000000 0000000000000000 00000000 14000000 0805 1002 c23e0177");
        let header_crc = mask_crc(crc32c(&want));
        want.extend_from_slice(&[0xdd, 0x3e]);
        want.extend_from_slice(&header_crc.to_le_bytes());
        want.extend_from_slice(&[0xcd, 0x3e]);
        want.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(out, want);
        assert_eq!(layout.header_len, want.len());
        assert_eq!(layout.crc_pos, Some(want.len() - 4));
        let mut rec = out.clone();
        rec.extend_from_slice(&data);
        assert_eq!(decode_header(&rec, 0).unwrap().header_crc, Some(header_crc));

        // 32-byte alignment: the 40-byte unpadded header needs a 24-byte padding field; the
        // header CRC covers the final desc size.
        let mut out = Vec::new();
        let layout = encode_header(&s, 0, 32, &mut out).unwrap();
        assert_eq!(layout.header_len, 64);
        let mut padded_want = want.clone();
        padded_want[16..20].copy_from_slice(&44u32.to_le_bytes());
        let header_crc = mask_crc(crc32c(&padded_want[..28]));
        padded_want[30..34].copy_from_slice(&header_crc.to_le_bytes());
        assert_eq!(out[..40], padded_want[..]);
        assert_eq!(&out[40..43], &[0xd2, 0x3e, 21]);
        assert!(out[43..].iter().all(|&b| b == 0));
        assert_eq!(layout.crc_pos, Some(36));
    }

    #[test]
    fn header_crc_covers_every_header_byte() {
        let data = f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let lod = [vec![0u64, 1, 3]];
        let s = RecordSpec {
            name: Some(b"seq"),
            data_crc: Some(mask_crc(crc32c(&data))),
            full_shape: None,
            lod: &lod,
            ..spec(DType::Float32, &[3, 2], &[])
        };
        let mut rec = Vec::new();
        let layout = encode_header(&s, 0, 64, &mut rec).unwrap();
        rec.extend_from_slice(&data);
        assert!(decode_header(&rec, 0).unwrap().header_crc.is_some());
        // Every single-bit flip in the header (LoD, dims, name, CRCs, padding) is an error, or
        // (a desc size or name length that now swallows the checksum fields, a checksum tag
        // turned into another field number) decodes as a header that lacks one of the two
        // checksums, which a reader of paramdex records refuses; a flip in the data checksum is
        // caught against the data.
        for i in 0..layout.header_len {
            for bit in 0..8 {
                let mut bad = rec.clone();
                bad[i] ^= 1 << bit;
                let decoded = decode_header(&bad, 0).map(|h| (h.header_crc, h.data_crc));
                if let Ok((header_crc, data_crc)) = decoded {
                    assert!(
                        header_crc.is_none() || data_crc.is_none() || data_crc != s.data_crc,
                        "byte {i} bit {bit}"
                    );
                }
            }
        }
        // A flipped LoD offset is reported as a header checksum mismatch, with the tensor name.
        let mut bad = rec.clone();
        bad[28] ^= 1;
        let err = decode_header(&bad, 0).unwrap_err();
        assert!(
            matches!(
                err,
                Error::ChecksumMismatch {
                    what: "record header",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("seq"), "{err}");
    }

    #[test]
    fn padding_field_lengths() {
        for a in [1u64, 2, 4, 8, 16, 64, 256, 4096] {
            for end in 0..10_000u64 {
                let t = padding_field_len(end, a) as u64;
                assert_eq!((end + t) % a, 0, "end {end} a {a}");
                if end % a == 0 {
                    assert_eq!(t, 0);
                } else {
                    assert!(t >= 3 && t != 131, "end {end} a {a} t {t}");
                    // Minimal: no smaller representable size works.
                    for smaller in 3..t {
                        assert!(smaller == 131 || (end + smaller) % a != 0);
                    }
                }
                let mut out = Vec::new();
                put_padding(&mut out, t as usize);
                assert_eq!(out.len() as u64, t);
            }
        }
        assert_eq!(padding_field_len(1, 1), 0);
        assert_eq!(padding_field_len(1, 2), 3);
        assert_eq!(padding_field_len(3, 4), 5);
        // needs 131 -> not representable -> 131 + 256
        assert_eq!(padding_field_len(256 - 131, 256), 387);
    }

    /// Padding of 125..=135 bytes total around the 1- to 2-byte length-varint jump.
    #[test]
    fn padding_around_the_varint_jump() {
        for t in 125usize..=135 {
            // Unpadded header = 24 bytes + name field (3 + n); pick n so that the padding field
            // must be exactly t bytes to reach 256... when representable.
            for n in 0..120usize {
                let name = vec![b'x'; n];
                let s = RecordSpec {
                    name: Some(&name),
                    ..spec(DType::Float32, &[1], &[])
                };
                let unpadded = 20 + 4 + 3 + n;
                let offset = (1024 - unpadded - t) as u64;
                let mut out = Vec::new();
                let l = encode_header(&s, offset, 256, &mut out).unwrap();
                assert_eq!((offset + l.header_len as u64) % 256, 0);
                let pad = l.header_len - unpadded;
                if t == 131 {
                    assert_eq!(pad, 131 + 256);
                } else {
                    assert_eq!(pad, t);
                }
                let full = [out.as_slice(), &[0; 4]].concat();
                let h = decode_header(&full, offset).unwrap();
                assert_eq!(h.header_len, l.header_len);
                assert_eq!(h.name, Some(name.as_slice()));
                let d = PdxTensorDesc::decode(&out[20..]).unwrap();
                assert_eq!(
                    d.pdx_padding.as_deref().map(<[u8]>::len),
                    Some(pad - 3 - usize::from(pad > 130))
                );
            }
        }
    }

    #[test]
    fn alignment_round_trips_and_parses_with_prost() {
        let dims_all = [7u64, 1, 0, 300, 2];
        let lod = [vec![0u64, 3, 7]];
        let names: Vec<Vec<u8>> = (0..=200).map(|n| vec![b'a' + (n % 26) as u8; n]).collect();
        let offsets: Vec<u64> = (0..300u64)
            .chain([4095, 4096, 65_537, 1 << 32, (1 << 40) + 3, u64::MAX / 2])
            .collect();
        let mut buf = Vec::new();
        for a in [1u64, 2, 4, 8, 64, 256, 4096] {
            for &offset in &offsets {
                for (ni, name) in names.iter().enumerate() {
                    let rank = (offset as usize + ni) % 6;
                    let dims = &dims_all[..rank];
                    let with_lod = rank > 0 && dims[0] == 7 && ni % 3 == 0;
                    let crc = (ni % 2 == 0).then_some(offset as u32 ^ 0x5a5a_1234);
                    let s = RecordSpec {
                        dtype: DType::ALL[ni % DType::ALL.len()],
                        dims,
                        lod: if with_lod { &lod[..] } else { &[] },
                        name: (ni != 200).then_some(name.as_slice()),
                        data_crc: crc,
                        full_shape: None,
                    };
                    buf.clear();
                    let l = encode_header(&s, offset, a, &mut buf).unwrap();
                    assert_eq!(buf.len(), l.header_len);
                    assert_eq!((offset + l.header_len as u64) % a, 0, "a {a} off {offset}");
                    let dl = data_len(s.dtype, dims).unwrap() as usize;
                    buf.resize(buf.len() + dl, 0xee);
                    let (h, data) = decode_record(&buf, offset).unwrap();
                    assert_eq!(h.header_len, l.header_len);
                    assert_eq!(data.len(), dl);
                    // A type Paddle lacks is recorded as uint8.
                    assert_eq!(h.dtype.paddle_code(), s.dtype.paddle_code());
                    assert_eq!(h.dims.as_slice(), dims);
                    assert_eq!(h.lod.to_vec(), s.lod);
                    assert_eq!(h.name, s.name);
                    assert_eq!(h.data_crc, crc);
                    if let (Some(p), Some(c)) = (l.crc_pos, crc) {
                        assert_eq!(&buf[p..p + 4], &c.to_le_bytes());
                    }
                    // Cross-check the hand codec with prost.
                    let desc_at = 20 + if with_lod { 32 } else { 0 };
                    let desc = PdxTensorDesc::decode(&buf[desc_at..l.header_len]).unwrap();
                    assert_eq!(desc.data_type, s.dtype.paddle_code());
                    assert_eq!(
                        desc.dims,
                        dims.iter().map(|&d| d as i64).collect::<Vec<_>>()
                    );
                    assert_eq!(desc.pdx_name.as_deref(), s.name);
                    assert_eq!(desc.pdx_data_crc32c, crc);
                    let desc_size =
                        i32::from_le_bytes(buf[desc_at - 4..desc_at].try_into().unwrap());
                    assert_eq!(desc_at + desc_size as usize, l.header_len);
                    if let Some(p) = &desc.pdx_padding {
                        assert!(a > 1);
                        assert!(p.iter().all(|&b| b == 0));
                        // The padding field is the last field, and it was needed.
                        let field = 2 + varint_len(p.len() as u64) + p.len();
                        let unpadded = l.header_len - field;
                        assert_eq!(&buf[unpadded..unpadded + 2], &[0xd2, 0x3e]);
                        assert_ne!((offset + unpadded as u64) % a, 0);
                        assert_eq!(padding_field_len(offset + unpadded as u64, a), field);
                    }
                }
            }
        }
    }

    #[test]
    fn encode_rejects_bad_arguments() {
        let mut out = vec![9u8];
        for a in [0u64, 3, 8192, 12] {
            let e = encode_header(&spec(DType::Float32, &[1], &[]), 0, a, &mut out).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        }
        let big = [1u64; MAX_RANK + 1];
        let e = encode_header(&spec(DType::Float32, &big, &[]), 0, 1, &mut out).unwrap_err();
        assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
        assert!(
            encode_header(&spec(DType::Float32, &big[1..], &[]), 0, 1, &mut Vec::new()).is_ok()
        );
        let lod = vec![vec![0u64]; 33];
        let e = encode_header(&spec(DType::Float32, &[0], &lod), 0, 1, &mut out).unwrap_err();
        assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
        let e = encode_header(
            &spec(DType::Float32, &[u64::MAX / 2, 4], &[]),
            0,
            1,
            &mut out,
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidTensor { .. }), "{e}");
        let e = encode_header(&spec(DType::Int8, &[0, 1 << 63], &[]), 0, 1, &mut out).unwrap_err();
        assert!(matches!(e, Error::InvalidTensor { .. }), "{e}");
        let name = vec![b'n'; MAX_DESC_LEN as usize];
        let s = RecordSpec {
            name: Some(&name),
            ..spec(DType::Float32, &[1], &[])
        };
        let e = encode_header(&s, 0, 1, &mut out).unwrap_err();
        assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
        let e =
            encode_header(&spec(DType::Float32, &[1], &[]), u64::MAX - 5, 1, &mut out).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(out, [9u8], "out untouched on error");
    }

    #[test]
    fn decode_rejects_bad_versions_and_sniffs() {
        let mut r = fp32_3();
        r[0] = 1;
        assert!(err_text(&r).contains("outer (DenseTensor) version is 1"));
        let pickle2 = unhex("80027d71 0000000000000000");
        let t = err_text(&pickle2);
        assert!(
            t.contains("1904018048") && t.contains("Python pickle (a .pdparams/.pdopt"),
            "{t}"
        );
        let t = err_text(&unhex("800495aa 01"));
        assert!(t.contains("Python pickle (a .pdparams/.pdopt"), "{t}");
        assert!(err_text(&unhex("89504e47 0d0a1a0a")).contains("PNG"));
        assert!(err_text(b"####\n").contains("text"));
        assert!(err_text(b"{\"base_code\"").contains("JSON"));
        assert!(err_text(&unhex("0a8d0108 00 10ff")).contains(".pdmodel"));
        let mut r = fp32_3();
        r[12] = 2;
        let t = err_text(&r);
        assert!(
            t.contains("tensor version 2") && t.contains("offset 12"),
            "{t}"
        );
    }

    #[test]
    fn decode_rejects_bad_sizes() {
        // negative desc size
        let mut r = fp32_3();
        r[16..20].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(err_text(&r).contains("negative tensor desc size -1"));
        // desc past EOF
        let mut r = fp32_3();
        r[16..20].copy_from_slice(&100i32.to_le_bytes());
        assert!(err_text(&r).contains("runs past the end"));
        // desc above the limit
        let mut r = fp32_3();
        r[16..20].copy_from_slice(&((MAX_DESC_LEN + 1) as i32).to_le_bytes());
        assert!(matches!(
            decode_header(&r, 0),
            Err(Error::LimitExceeded { .. })
        ));
        // truncated data
        let r = fp32_3();
        let t = err_text(&r[..35]);
        assert!(
            t.contains("truncated data: record needs 36 bytes, 35 remain"),
            "{t}"
        );
        // every truncation fails
        for n in 0..r.len() {
            assert!(decode_header(&r[..n], 7).is_err(), "len {n}");
        }
        // lod byte length not a multiple of 8
        let lod = vec![vec![0u64, 2, 5]];
        let mut r = record(&spec(DType::Float32, &[5, 1], &lod), 0, 1, &[0; 20]);
        r[12] = 23;
        let t = err_text(&r);
        assert!(
            t.contains("not a multiple of 8") && t.contains("offset 12"),
            "{t}"
        );
        r[12] = 0xf8;
        r[13] = 0xff;
        assert!(err_text(&r).contains("runs past the end"));
        // too many lod levels
        let mut r = fp32_3();
        r[4] = 33;
        assert!(matches!(
            decode_header(&r, 0),
            Err(Error::LimitExceeded {
                value: 33,
                at: Some(4),
                ..
            })
        ));
        let mut r = fp32_3();
        r[4..12].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            decode_header(&r, 0),
            Err(Error::LimitExceeded { .. })
        ));
    }

    /// A record with a hand-written desc.
    fn with_desc(desc: &[u8], data: usize) -> Vec<u8> {
        let mut r = vec![0u8; 16];
        r.extend_from_slice(&(desc.len() as i32).to_le_bytes());
        r.extend_from_slice(desc);
        r.resize(r.len() + data, 0);
        r
    }

    #[test]
    fn decode_rejects_bad_descs() {
        // unknown dtype
        let e = decode_header(&with_desc(&unhex("0807 1001"), 8), 100).unwrap_err();
        assert!(matches!(e, Error::UnknownDType { code: 7, .. }), "{e}");
        assert!(e.to_string().contains("offset 120"), "{e}");
        let e = decode_header(&with_desc(&unhex("08ffffffffffffffffff01"), 8), 0).unwrap_err();
        assert!(matches!(e, Error::UnknownDType { code: -1, .. }), "{e}");
        // missing data_type
        assert!(err_text(&with_desc(&unhex("1001"), 8)).contains("data_type"));
        // negative dim (10-byte varint)
        let t = err_text(&with_desc(&unhex("0805 10ffffffffffffffffff01"), 8));
        assert!(
            t.contains("negative dimension -1") && t.contains("offset 22"),
            "{t}"
        );
        // negative dim, packed
        assert!(
            err_text(&with_desc(&unhex("0805 120a ffffffffffffffffff01"), 0)).contains("negative")
        );
        // rank > MAX_RANK, unpacked and packed
        let mut d = unhex("0805");
        for _ in 0..=MAX_RANK {
            d.extend_from_slice(&[0x10, 0x01]);
        }
        assert!(matches!(
            decode_header(&with_desc(&d, 4), 0),
            Err(Error::LimitExceeded {
                value: 255,
                limit: 254,
                ..
            })
        ));
        let mut d = unhex("0805 12");
        put_varint64(&mut d, (MAX_RANK + 1) as u64);
        d.extend(std::iter::repeat_n(1u8, MAX_RANK + 1));
        assert!(matches!(
            decode_header(&with_desc(&d, 4), 0),
            Err(Error::LimitExceeded { .. })
        ));
        // overflow of numel
        let mut d = unhex("0805");
        for dim in [u64::MAX / 2, 4] {
            d.push(0x10);
            put_varint64(&mut d, dim);
        }
        assert!(err_text(&with_desc(&d, 0)).contains("overflows"));
        // groups and bad wire types
        for bad in [
            "0805 1b",
            "0805 1c",
            "0805 1e",
            "0805 1f",
            "0805 0d00000000",
            "0805 12",
        ] {
            assert!(
                decode_header(&with_desc(&unhex(bad), 4), 0).is_err(),
                "{bad}"
            );
        }
        // truncated unknown fields
        for bad in [
            "0805 19 0000",
            "0805 1d 00",
            "0805 1a 05 00",
            "0805 18 80",
            "0805 80",
        ] {
            assert!(
                decode_header(&with_desc(&unhex(bad), 4), 0).is_err(),
                "{bad}"
            );
        }
        // known field, wrong wire type
        assert!(err_text(&with_desc(&unhex("0805 c53e 00000000"), 4)).contains("wire type"));
    }

    #[test]
    fn decode_accepts_packed_unknown_and_duplicates() {
        // packed dims [2, 3], unknown fields of each wire type, duplicate data_type (last wins),
        // duplicate crc (last wins), padding in the middle.
        let d = unhex(
            "0802 1202 0203 18 96 01 19 0102030405060708 1a 02 abcd 1d 01020304
             cd3e 11111111 cd3e 22222222 d23e 02 0000 0805 c23e 02 6869",
        );
        let r = with_desc(&d, 24);
        let h = decode_header(&r, 0).unwrap();
        assert_eq!(h.dtype, DType::Float32);
        assert_eq!(h.dims.as_slice(), &[2, 3]);
        assert_eq!(h.data_crc, Some(0x2222_2222));
        assert_eq!(h.name, Some(&b"hi"[..]));
        assert_eq!(h.data_len, 24);
        assert_eq!(h.record_len(), r.len() as u64);
    }

    #[test]
    fn walk_stops_after_first_error() {
        let mut s = Vec::new();
        for n in 1..4u64 {
            s.extend(record(
                &spec(DType::Int8, &[n], &[]),
                0,
                1,
                &vec![n as u8; n as usize],
            ));
        }
        let all: Vec<_> = walk(&s, 1000).collect::<Result<_>>().unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].0, 1000);
        assert_eq!(all[1].0, 1000 + 25);
        assert_eq!(all[2].2, &[3, 3, 3]);
        drop(all);
        s.push(0);
        let mut w = walk(&s, 0);
        assert_eq!(w.by_ref().take(3).filter(Result::is_ok).count(), 3);
        assert_eq!(w.position(), s.len() - 1);
        assert!(w.next().unwrap().is_err());
        assert!(w.next().is_none());
        assert_eq!(walk(&[], 0).count(), 0);
    }

    #[test]
    fn validate_lod_rules() {
        assert_eq!(validate_lod(&[], &[]), Ok(()));
        assert_eq!(validate_lod(&[vec![0, 2, 5]], &[5, 1]), Ok(()));
        assert_eq!(
            validate_lod(&[vec![0, 2, 3], vec![0, 1, 4, 7]], &[7, 2]),
            Ok(())
        );
        assert_eq!(validate_lod(&[vec![0]], &[0]), Ok(()));
        assert!(validate_lod(&[vec![0, 1]], &[])
            .unwrap_err()
            .contains("scalar"));
        assert!(validate_lod(&[vec![]], &[0]).unwrap_err().contains("empty"));
        assert!(validate_lod(&[vec![1, 5]], &[5])
            .unwrap_err()
            .contains("starts at 1"));
        assert!(validate_lod(&[vec![0, 3, 2, 5]], &[5])
            .unwrap_err()
            .contains("decreases"));
        assert!(validate_lod(&[vec![0, 2, 4]], &[5])
            .unwrap_err()
            .contains("first dimension"));
        assert!(validate_lod(&[vec![0, 2, 3], vec![0, 1, 7]], &[7])
            .unwrap_err()
            .contains("level 1 holds 2 sequences"));
        // An empty level after a full one (Paddle's loader reads such a file): an error, not an
        // arithmetic underflow.
        assert_eq!(
            validate_lod(&[vec![0, 5], vec![]], &[5, 1]),
            Err("LoD level 1 is empty (it needs at least [0])".into())
        );
    }

    #[test]
    fn data_len_checks_overflow() {
        assert_eq!(data_len(DType::Float32, &[]), Some(4));
        assert_eq!(data_len(DType::Complex128, &[2, 3]), Some(96));
        assert_eq!(data_len(DType::Float32, &[u64::MAX / 2, 4]), None);
        assert_eq!(data_len(DType::Float32, &[u64::MAX, 0]), Some(0));
    }

    mod props {
        use super::*;
        use proptest::prelude::*;

        fn valid_record() -> impl Strategy<Value = Vec<u8>> {
            (
                0usize..DType::ALL.len(),
                proptest::collection::vec(0u64..5, 0..4),
                proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
                proptest::option::of(any::<u32>()),
                0u64..200,
                0u32..8,
                any::<bool>(),
            )
                .prop_map(|(di, dims, name, crc, offset, a, lod)| {
                    let dtype = DType::ALL[di];
                    let lod = if lod && !dims.is_empty() {
                        vec![vec![0, dims[0]]]
                    } else {
                        vec![]
                    };
                    let s = RecordSpec {
                        dtype,
                        dims: &dims,
                        lod: &lod,
                        name: name.as_deref(),
                        data_crc: crc,
                        full_shape: None,
                    };
                    let n = data_len(dtype, &dims).unwrap() as usize;
                    record(&s, offset, 1 << a, &vec![0x5a; n])
                })
        }

        proptest! {
            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200), base in any::<u64>()) {
                let _ = decode_header(&bytes, base);
                let _ = walk(&bytes, base).count();
            }

            #[test]
            fn mutated_records_never_panic(r in valid_record(), i in any::<prop::sample::Index>(), b in any::<u8>()) {
                let mut r = r;
                let i = i.index(r.len());
                r[i] = b;
                let _ = decode_header(&r, 0);
            }

            #[test]
            fn truncated_records_fail(r in valid_record(), cut in any::<prop::sample::Index>()) {
                prop_assert!(decode_header(&r, 0).is_ok());
                let n = cut.index(r.len());
                prop_assert!(decode_header(&r[..n], 0).is_err());
            }
        }
    }
}
