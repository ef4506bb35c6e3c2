//! The TensorDesc protobuf inside a record header, parsed field by field by hand (the one copy
//! of the protobuf wire rules is `format::pbwire`): Paddle's `data_type` and `dims`, paramdex's
//! name, full shape, checksums and padding, with the rules that keep every byte of a paramdex
//! header under its checksum (only the data CRC and the padding after the header CRC, the
//! padding zeros and last). Unknown fields are skipped, as Paddle skips paramdex's. Its own
//! file because it is the part of a header a hostile file has the most room to play with.

use smallvec::SmallVec;

use super::{
    at, FIELD_CODEC, FIELD_DATA_CRC, FIELD_DATA_TYPE, FIELD_DIMS, FIELD_FULL_SHAPE,
    FIELD_HEADER_CRC, FIELD_NAME, FIELD_PADDING, FIELD_STORED_LEN, MAX_RANK,
};
use crate::dtype::DType;
use crate::error::{ensure_within, Error, Result};
use crate::format::pbwire::{self, Tag, WireType};

/// The fields of a parsed TensorDesc.
pub(super) struct Desc<'a> {
    /// The dtype, or the unknown number and its field's position in the desc.
    pub(super) dtype: std::result::Result<DType, (i64, usize)>,
    pub(super) dims: SmallVec<[u64; 6]>,
    pub(super) name: Option<&'a [u8]>,
    pub(super) full_shape: Option<SmallVec<[u64; 6]>>,
    pub(super) data_crc: Option<u32>,
    /// The stored header CRC and the position of its tag within the desc.
    pub(super) header_crc: Option<(u32, usize)>,
    /// The codec and stored length of a compressed record (fields 1005, 1006), with the
    /// position of the codec's tag.
    pub(super) codec: Option<(u64, usize)>,
    pub(super) stored_len: Option<u64>,
}

/// Parses a TensorDesc (`base` = absolute offset of its first byte).
pub(super) fn parse_desc<'a>(desc: &'a [u8], base: u64) -> Result<Desc<'a>> {
    let bad = |pos: usize, detail: String| Error::corrupt("tensor desc", at(base, pos), detail);
    let mut data_type: Option<(u64, usize)> = None;
    let mut dims: SmallVec<[u64; 6]> = SmallVec::new();
    let mut name = None;
    let mut full_shape: Option<SmallVec<[u64; 6]>> = None;
    let mut data_crc = None;
    let mut header_crc = None;
    let mut codec = None;
    let mut stored_len = None;
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
            (FIELD_CODEC | FIELD_STORED_LEN, WireType::VARINT) => {
                let (v, p) = varint(p)?;
                let slot_taken = if field == FIELD_CODEC {
                    codec.replace((v, pos)).is_some()
                } else {
                    stored_len.replace(v).is_some()
                };
                if slot_taken {
                    return Err(bad(pos, format!("field {field} appears twice")));
                }
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
                | FIELD_HEADER_CRC | FIELD_FULL_SHAPE | FIELD_CODEC | FIELD_STORED_LEN,
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
        codec,
        stored_len,
    })
}

#[cfg(test)]
mod tests {
    use super::super::decode_header;
    use super::super::tests::{err_text, unhex};
    use super::*;
    use crate::format::put_varint64;

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
}
