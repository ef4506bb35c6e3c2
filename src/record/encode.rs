//! Writing a record header ([`encode_header`] of a [`RecordSpec`]): Paddle's bytes exactly when
//! there is no name, CRC or alignment; otherwise paramdex's fields after Paddle's, the header
//! checksum over every byte before it, and one padding field that puts the first data byte on
//! the alignment boundary (the only padding in a record). Sizes are computed first, so that
//! nothing is written unless everything fits.

use super::{
    data_len, FIELD_CODEC, FIELD_DATA_CRC, FIELD_DATA_TYPE, FIELD_DIMS, FIELD_FULL_SHAPE,
    FIELD_HEADER_CRC, FIELD_NAME, FIELD_PADDING, FIELD_STORED_LEN, MAX_ALIGNMENT, MAX_DESC_LEN,
    MAX_LOD_LEVELS, MAX_RANK, MIDDLE_LEN, PREFIX_LEN,
};
use crate::dtype::DType;
use crate::error::{ensure_within, Error, Result};
use crate::format::pbwire::{self, WireType};
use crate::format::{crc32c, mask_crc, put_fixed32, put_fixed64, put_varint64, varint_len};
use crate::name::display;

/// What to encode: a record header's contents.
#[derive(Clone, Copy, Debug)]
pub struct RecordSpec<'a> {
    /// Element type.
    pub dtype: DType,
    /// Shape; empty for a scalar. Every dim must be at most `i64::MAX`.
    pub dims: &'a [u64],
    /// LoD levels (empty for ordinary parameters). Not checked here; see
    /// [`validate_lod`](super::validate_lod).
    pub lod: &'a [Vec<u64>],
    /// Name to store in field [`FIELD_NAME`]; `None` writes no name.
    pub name: Option<&'a [u8]>,
    /// Masked CRC32C to store in field [`FIELD_DATA_CRC`]; `None` writes no CRC field. When
    /// given, the header's own CRC (field [`FIELD_HEADER_CRC`]) is written just before it.
    pub data_crc: Option<u32>,
    /// For a slice record, the shape of the whole tensor (field [`FIELD_FULL_SHAPE`]); `None`
    /// for every other record.
    pub full_shape: Option<&'a [u64]>,
    /// For a compressed record (SPEC.md 3.4), the bytes its data takes in the file: fields
    /// [`FIELD_CODEC`] (the lossless codec) and [`FIELD_STORED_LEN`] are written, covered by the
    /// header checksum. `None` for a plain record.
    pub stored_len: Option<u64>,
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
    let codec_len = spec.stored_len.map_or(0, |n| {
        pbwire::tag_len(FIELD_CODEC)
            + varint_len(u64::from(super::lossless::CODEC_LOSSLESS))
            + pbwire::tag_len(FIELD_STORED_LEN)
            + varint_len(n)
    });
    // The data CRC comes with the header CRC just before it.
    let crc_len = spec.data_crc.map_or(0, |_| {
        pbwire::tag_len(FIELD_HEADER_CRC) + 4 + pbwire::tag_len(FIELD_DATA_CRC) + 4
    });
    desc_len = desc_len
        .saturating_add(name_len)
        .saturating_add(full_len)
        .saturating_add(codec_len)
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
    if let Some(n) = spec.stored_len {
        pbwire::put_varint_field(out, FIELD_CODEC, u64::from(super::lossless::CODEC_LOSSLESS));
        pbwire::put_varint_field(out, FIELD_STORED_LEN, n);
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

#[cfg(test)]
mod tests {
    use super::super::tests::{f32_bytes, fp32_3, record, spec, unhex};
    use super::super::{decode_header, decode_record, validate_lod};
    use super::*;
    use crate::proto::paddle::PdxTensorDesc;
    use prost::Message;

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
                        stored_len: None,
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
}
