//! The protobuf wire format, the one copy every hand-written protobuf codec uses (index entries,
//! TensorDesc in records, header metadata).
//!
//! A message is a sequence of fields, each a tag and a payload:
//!
//! ```text
//! tag      varint32  (field number << 3) | wire type
//! payload  by wire type:
//!            0 varint    a varint of at most 64 bits (10 bytes)
//!            1 fixed64   8 bytes, little-endian
//!            2 len       a varint64 length, then that many bytes
//!            5 fixed32   4 bytes, little-endian
//!            3, 4        groups (deprecated; not used by paramdex, rejected by skip_field)
//!            6, 7        undefined
//! ```
//!
//! Readers take the message bytes and the position of the next byte, and return the value with
//! the position after it, or `None` when the bytes end early or a varint is malformed (over-long
//! or overflowing). They never read past the slice, never panic and never allocate; every length
//! read from the bytes is checked against the slice before it is used. Which fields a message
//! allows, and what a bad one means, is the caller's business (so each codec keeps its own
//! precise error messages).

use std::fmt;

use super::fixed::{get_fixed32, get_fixed64};
use super::varint::{get_varint32, get_varint64, put_varint32, put_varint64, varint_len};

/// The wire type of a field: the low 3 bits of its tag.
///
/// Any value 0-7 can be read from a tag; only the associated constants are defined by protobuf.
/// Shown as its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WireType(u8);

impl WireType {
    /// A varint (wire type 0): `int32`, `int64`, `uint32`, `uint64`, `sint*`, `bool`, enums.
    pub const VARINT: WireType = WireType(0);
    /// 8 little-endian bytes (wire type 1): `fixed64`, `sfixed64`, `double`.
    pub const FIXED64: WireType = WireType(1);
    /// A length-delimited payload (wire type 2): `bytes`, `string`, messages, packed fields.
    pub const LEN: WireType = WireType(2);
    /// The start of a group (wire type 3; deprecated).
    pub const START_GROUP: WireType = WireType(3);
    /// The end of a group (wire type 4; deprecated).
    pub const END_GROUP: WireType = WireType(4);
    /// 4 little-endian bytes (wire type 5): `fixed32`, `sfixed32`, `float`.
    pub const FIXED32: WireType = WireType(5);

    /// The wire type number, 0-7.
    pub const fn bits(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for WireType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A decoded field tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    /// The field number (0 is not a valid field number; callers decide how to report it).
    pub field: u32,
    /// The wire type of the payload that follows.
    pub wire: WireType,
}

impl Tag {
    /// The tag of field `field` with wire type `wire`.
    pub const fn new(field: u32, wire: WireType) -> Tag {
        Tag { field, wire }
    }

    /// The varint value of the tag: `(field << 3) | wire`. `field` must be below 2^29 (protobuf's
    /// largest field number is 2^29 - 1).
    pub const fn key(self) -> u32 {
        (self.field << 3) | self.wire.bits()
    }
}

/// Appends the tag of field `field` with wire type `wire`.
#[inline]
pub fn put_tag(dst: &mut Vec<u8>, field: u32, wire: WireType) {
    put_varint32(dst, Tag::new(field, wire).key());
}

/// Number of bytes [`put_tag`] writes for `field` (the same for every wire type).
pub fn tag_len(field: u32) -> usize {
    varint_len(u64::from(field << 3))
}

/// Appends field `field` as a varint.
pub fn put_varint_field(dst: &mut Vec<u8>, field: u32, v: u64) {
    put_tag(dst, field, WireType::VARINT);
    put_varint64(dst, v);
}

/// Appends field `field` as a fixed32.
pub fn put_fixed32_field(dst: &mut Vec<u8>, field: u32, v: u32) {
    put_tag(dst, field, WireType::FIXED32);
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends field `field` as a length-delimited payload.
pub fn put_len_field(dst: &mut Vec<u8>, field: u32, payload: &[u8]) {
    put_tag(dst, field, WireType::LEN);
    put_varint64(dst, payload.len() as u64);
    dst.extend_from_slice(payload);
}

/// Reads the tag at `pos` (a varint of at most 32 bits). Any field number and wire type are
/// returned, including field 0 and the undefined wire types 6 and 7.
#[inline]
pub fn read_tag(buf: &[u8], pos: usize) -> Option<(Tag, usize)> {
    let (key, next) = match *buf.get(pos)? {
        // Fast path: fields 1-15 have one-byte tags.
        b @ 0..=0x7f => (u32::from(b), pos + 1),
        _ => {
            let (key, n) = get_varint32(buf.get(pos..)?)?;
            (key, pos + n)
        }
    };
    let tag = Tag {
        field: key >> 3,
        // key & 7 < 8: the cast keeps every bit.
        wire: WireType((key & 7) as u8),
    };
    Some((tag, next))
}

/// Reads a varint of at most 64 bits at `pos` (a wire type 0 payload, or a length).
#[inline]
pub fn read_varint(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    match *buf.get(pos)? {
        // Fast path: values below 128 take one byte.
        b @ 0..=0x7f => Some((u64::from(b), pos + 1)),
        _ => {
            let (v, n) = get_varint64(buf.get(pos..)?)?;
            Some((v, pos + n))
        }
    }
}

/// Reads a little-endian fixed32 at `pos` (a wire type 5 payload).
#[inline]
pub fn read_fixed32(buf: &[u8], pos: usize) -> Option<(u32, usize)> {
    Some((get_fixed32(buf, pos)?, pos + 4))
}

/// Reads a little-endian fixed64 at `pos` (a wire type 1 payload).
#[inline]
pub fn read_fixed64(buf: &[u8], pos: usize) -> Option<(u64, usize)> {
    Some((get_fixed64(buf, pos)?, pos + 8))
}

/// Takes the `len` bytes at `pos`, if they are all inside `buf` (the body of a length-delimited
/// payload whose length the caller read with [`read_varint`]).
#[inline]
pub fn read_bytes(buf: &[u8], pos: usize, len: u64) -> Option<(&[u8], usize)> {
    let end = usize::try_from(len).ok().and_then(|l| pos.checked_add(l))?;
    Some((buf.get(pos..end)?, end))
}

/// Reads a length-delimited payload at `pos` (a wire type 2 payload: a varint64 length and
/// that many bytes), returning the bytes and the position after them.
#[inline]
pub fn read_len(buf: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let (len, p) = read_varint(buf, pos)?;
    read_bytes(buf, p, len)
}

/// Skips the payload of wire type `wire` at `pos`; returns the position after it. `None` when
/// the payload is malformed or runs past `buf`, and for groups (3, 4) and the undefined wire
/// types (6, 7), whose extent cannot be known without a schema.
#[inline]
pub fn skip_field(buf: &[u8], pos: usize, wire: WireType) -> Option<usize> {
    match wire {
        WireType::VARINT => read_varint(buf, pos).map(|(_, p)| p),
        WireType::FIXED64 => read_fixed64(buf, pos).map(|(_, p)| p),
        WireType::LEN => read_len(buf, pos).map(|(_, p)| p),
        WireType::FIXED32 => read_fixed32(buf, pos).map(|(_, p)| p),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_round_trip() {
        for (field, wire) in [
            (1, WireType::VARINT),
            (2, WireType::LEN),
            (15, WireType::FIXED32),
            (16, WireType::VARINT),
            (1003, WireType::FIXED32),
            ((1 << 29) - 1, WireType::FIXED64),
        ] {
            let mut b = Vec::new();
            put_tag(&mut b, field, wire);
            assert_eq!(b.len(), tag_len(field));
            assert_eq!(read_tag(&b, 0), Some((Tag::new(field, wire), b.len())));
        }
        // TensorFlow's and Paddle's first bytes: field 1 varint, field 2 len.
        assert_eq!(Tag::new(1, WireType::VARINT).key(), 0x08);
        assert_eq!(Tag::new(2, WireType::LEN).key(), 0x12);
        // Field 0 and undefined wire types decode; the caller rejects them.
        assert_eq!(
            read_tag(&[0x07], 0),
            Some((
                Tag {
                    field: 0,
                    wire: WireType(7)
                },
                1
            ))
        );
        // A tag above 32 bits, a truncated tag, a position past the end.
        assert_eq!(read_tag(&[0xff, 0xff, 0xff, 0xff, 0x10], 0), None);
        assert_eq!(read_tag(&[0x80], 0), None);
        assert_eq!(read_tag(&[0x08], 2), None);
    }

    #[test]
    fn field_writers_match_protobuf_bytes() {
        let mut b = Vec::new();
        put_varint_field(&mut b, 1, 150);
        put_fixed32_field(&mut b, 6, 0x0102_0304);
        put_len_field(&mut b, 2, b"ab");
        assert_eq!(
            b,
            [0x08, 0x96, 0x01, 0x35, 0x04, 0x03, 0x02, 0x01, 0x12, 0x02, b'a', b'b']
        );
        let (t, p) = read_tag(&b, 0).unwrap();
        assert_eq!(t, Tag::new(1, WireType::VARINT));
        assert_eq!(read_varint(&b, p), Some((150, 3)));
        let (t, p) = read_tag(&b, 3).unwrap();
        assert_eq!(t.wire, WireType::FIXED32);
        assert_eq!(read_fixed32(&b, p), Some((0x0102_0304, 8)));
        let (t, p) = read_tag(&b, 8).unwrap();
        assert_eq!(t.wire, WireType::LEN);
        assert_eq!(read_len(&b, p), Some((&b"ab"[..], 12)));
    }

    #[test]
    fn readers_never_overrun() {
        // Every payload cut at every length fails instead of reading past the slice.
        let mut b = Vec::new();
        put_varint64(&mut b, u64::MAX);
        for n in 0..b.len() {
            assert_eq!(read_varint(&b[..n], 0), None);
            assert_eq!(skip_field(&b[..n], 0, WireType::VARINT), None);
        }
        assert_eq!(skip_field(&b, 0, WireType::VARINT), Some(10));
        let f = [1u8; 8];
        for n in 0..8 {
            assert_eq!(read_fixed64(&f[..n], 0), None);
            assert_eq!(skip_field(&f[..n], 0, WireType::FIXED64), None);
        }
        assert_eq!(read_fixed32(&f, 5), None);
        assert_eq!(skip_field(&f, 4, WireType::FIXED32), Some(8));
        assert_eq!(skip_field(&f, 0, WireType::FIXED64), Some(8));
        // A length past the end, a length that overflows usize, an over-long length varint.
        assert_eq!(read_len(&[0x03, 1, 2], 0), None);
        assert_eq!(read_len(&[0x02, 1, 2], 0), Some((&[1u8, 2][..], 3)));
        let mut huge = Vec::new();
        put_varint64(&mut huge, u64::MAX);
        assert_eq!(read_len(&huge, 0), None);
        assert_eq!(read_bytes(&[0; 4], usize::MAX, 1), None);
        assert_eq!(read_len(&[0x80; 11], 0), None);
        // Groups and undefined wire types cannot be skipped.
        for w in [3u8, 4, 6, 7] {
            assert_eq!(skip_field(&[0; 16], 0, WireType(w)), None);
        }
        // Positions past the end.
        assert_eq!(read_varint(&[0], 2), None);
        assert_eq!(read_len(&[0], 2), None);
        assert_eq!(skip_field(&[0], 2, WireType::LEN), None);
    }
}
