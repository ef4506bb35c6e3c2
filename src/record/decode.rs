//! Reading records: a header ([`decode_header`]; [`decode_foreign_header`] when its
//! `data_type` is a number paramdex has no dtype for), a whole record ([`decode_record`]) and a
//! stream of them ([`walk`]). The versions, the LoD levels, the desc size and the header
//! checksum are checked here, the desc itself in `desc.rs`; a buffer whose first bytes are no
//! record is named for what it probably is (a pickle, a PNG, JSON, a `.pdmodel`, text). Every
//! number is bounded against the buffer before use, and nothing here panics on any input.

use smallvec::SmallVec;

use super::desc::{parse_desc, Desc};
use super::{at, data_len, Lod, RecordHeader, MAX_DESC_LEN, MAX_LOD_LEVELS};
use crate::error::{ensure_within, Error, Result};
use crate::format::{crc32c, unmask_crc, Cursor};
use crate::name::display;

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
/// [`crate::error::Corruption::Truncated`]), [`Error::LimitExceeded`] for a LoD level count,
/// desc size or rank above [`MAX_LOD_LEVELS`], [`MAX_DESC_LEN`] or
/// [`MAX_RANK`](super::MAX_RANK), and [`Error::UnknownDType`] for a `data_type` that is not an
/// element type. Every error carries the absolute offset of the bad field.
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
    // A compressed record (SPEC.md 3.4): the codec and its stored length come together, and
    // the codec is one this build decodes.
    let (codec, stored) = match (desc.codec, desc.stored_len) {
        (None, None) => (0, data_len),
        (Some((codec, _)), Some(stored)) if codec == u64::from(super::lossless::CODEC_LOSSLESS) => {
            (super::lossless::CODEC_LOSSLESS, stored)
        }
        (Some((codec, pos)), Some(_)) => {
            return Err(Error::corrupt(
                "tensor desc",
                at(p.desc_base, pos),
                format!("unknown codec {codec} of compressed data (this paramdex decodes codec 1)"),
            ))
        }
        _ => {
            return Err(Error::corrupt(
                "tensor desc",
                p.desc_base,
                "a compressed record needs both its codec (field 1005) and its stored length (field 1006)",
            ))
        }
    };
    Ok(RecordHeader {
        dtype,
        dims: desc.dims,
        lod: Lod { levels: p.levels },
        name: desc.name,
        full_shape: desc.full_shape,
        data_crc: desc.data_crc,
        header_crc: desc.header_crc.map(|(c, _)| c),
        header_len: p.header_len,
        data_len: stored,
        codec,
        decoded_len: data_len,
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
    /// The tensor's name (field [`FIELD_NAME`](super::FIELD_NAME)), if stored.
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

/// Lowercase hex of a few bytes, space separated.
fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::tests::{err_text, f32_bytes, fp32_3, record, spec, unhex};
    use super::super::{encode_header, RecordSpec, MAX_DESC_LEN};
    use super::*;
    use crate::dtype::DType;
    use crate::format::{crc32c, mask_crc};

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
                        stored_len: None,
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
