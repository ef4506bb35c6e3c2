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
//!   field 1005 pdx_codec        varint   (paramdex, version 4: the codec of compressed data)
//!   field 1006 pdx_stored_len   varint   (paramdex, version 4: bytes of compressed data)
//!   field 1003 pdx_header_crc32c fixed32 (paramdex; masked CRC32C of every record byte
//!                                         before this field's tag; written with field 1001)
//!   field 1001 pdx_data_crc32c  fixed32  (paramdex; masked CRC32C of the data)
//!   field 1002 pdx_padding      bytes    (paramdex; zero bytes; always the last field)
//! [numel * elem_size] raw row-major data, or pdx_stored_len bytes of compressed data
//! ```
//!
//! A compressed record (fields 1005-1006, `lossless.rs`) is not a record Paddle can load: Paddle
//! skips the two fields and would read the compressed bytes as the tensor's. Exports decode.
//!
//! Paddle skips the paramdex fields as unknown fields, so every record loads in Paddle. Without
//! name, CRC and padding the bytes are exactly what Paddle itself writes. The padding field is
//! how the writer puts the first data byte on an alignment boundary: there is no other padding
//! anywhere in the record. The Paddle facts this relies on, with their sources in Paddle's code,
//! are in `docs/paddle-records.md`.
//!
//! The decoder is strict and bounds every number against the buffer before use; it never panics
//! on any input, and every error names the absolute file offset of the offending field.
//!
//! This file holds the layout above, its limits and field numbers, and what a decoded header
//! is ([`RecordHeader`]). The codec is split by what each part does, each a file of its own:
//!
//! * `decode.rs`: reading a record ([`decode_header`], [`decode_record`],
//!   [`decode_foreign_header`]) and a stream of them ([`walk`]): the versions, the LoD, the desc
//!   size and the header checksum, and what a buffer that is no record probably is.
//! * `desc.rs`: parsing the TensorDesc protobuf inside a header, field by field.
//! * `encode.rs`: writing a header ([`encode_header`]), with its alignment padding.
//! * `lossless.rs`: the data of a compressed record (SPEC.md 3.4): byte grouping, chunks, zstd.
//! * `lod.rs`: the LoD, as decoded ([`Lod`], a zero-copy view) and as Paddle requires it to be
//!   ([`validate_lod`]).
#![cfg_attr(not(test), deny(clippy::cast_possible_truncation))]

use smallvec::SmallVec;

use crate::dtype::DType;

mod decode;
mod desc;
mod encode;
mod lod;
pub mod lossless;

pub(crate) use decode::decode_head;
pub use decode::{decode_foreign_header, decode_header, decode_record, walk, ForeignHeader, Walk};
pub use encode::{encode_header, HeaderLayout, RecordSpec};
pub use lod::{validate_lod, Lod};

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
/// TensorDesc field number of the codec of a compressed record's data (varint; format version
/// 4, SPEC.md 3.4): [`lossless::CODEC_LOSSLESS`]. Written with [`FIELD_STORED_LEN`], before
/// the header checksum; absent in a plain record.
pub const FIELD_CODEC: u32 = 1005;
/// TensorDesc field number of the bytes a compressed record's data takes in the file (varint;
/// SPEC.md 3.4): the record ends that many bytes after its header.
pub const FIELD_STORED_LEN: u32 = 1006;

/// TensorDesc field number of Paddle's `data_type`.
const FIELD_DATA_TYPE: u32 = 1;
/// TensorDesc field number of Paddle's `dims`.
const FIELD_DIMS: u32 = 2;

/// Bytes before the LoD payloads: outer version (4) + lod_level (8).
const PREFIX_LEN: usize = 12;
/// Bytes between the LoD payloads and the desc: inner version (4) + desc_size (4).
const MIDDLE_LEN: usize = 8;

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
    /// Data bytes in the record: element count times element size, or for a compressed
    /// record ([`RecordHeader::codec`] not 0) the stored bytes (field [`FIELD_STORED_LEN`]).
    pub data_len: u64,
    /// The codec of the record's data (field [`FIELD_CODEC`]), 0 for a plain record.
    pub codec: u32,
    /// The tensor's bytes once decoded: element count times element size.
    pub decoded_len: u64,
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

/// Records to test the codec with, shared by the files' tests.
#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes a hex string spells, whitespace and `|` ignored.
    pub(super) fn unhex(s: &str) -> Vec<u8> {
        let s: String = s
            .chars()
            .filter(|c| !c.is_whitespace() && *c != '|')
            .collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A header with neither name, CRC nor full shape.
    pub(super) fn spec<'a>(dtype: DType, dims: &'a [u64], lod: &'a [Vec<u64>]) -> RecordSpec<'a> {
        RecordSpec {
            dtype,
            dims,
            lod,
            name: None,
            data_crc: None,
            full_shape: None,
            stored_len: None,
        }
    }

    /// A record: the header of `s` encoded at `offset` with `alignment`, then `data`.
    pub(super) fn record(s: &RecordSpec<'_>, offset: u64, alignment: u64, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode_header(s, offset, alignment, &mut out).unwrap();
        out.extend_from_slice(data);
        out
    }

    /// `v` as little-endian bytes.
    pub(super) fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A valid record to mutate: fp32 [3] = [1, 2, 3].
    pub(super) fn fp32_3() -> Vec<u8> {
        record(
            &spec(DType::Float32, &[3], &[]),
            0,
            1,
            &f32_bytes(&[1.0, 2.0, 3.0]),
        )
    }

    /// The message of the error decoding `buf` gives (panics if it decodes).
    pub(super) fn err_text(buf: &[u8]) -> String {
        match decode_header(buf, 0) {
            Ok(h) => panic!("expected an error, got {h:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn data_len_checks_overflow() {
        assert_eq!(data_len(DType::Float32, &[]), Some(4));
        assert_eq!(data_len(DType::Complex128, &[2, 3]), Some(96));
        assert_eq!(data_len(DType::Float32, &[u64::MAX / 2, 4]), None);
        assert_eq!(data_len(DType::Float32, &[u64::MAX, 0]), Some(0));
    }
}
