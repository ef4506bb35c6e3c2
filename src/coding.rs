//! Primitive encodings shared by every layer: LevelDB fixed-width and varint integers, and the
//! masked CRC32C that LevelDB and TensorFlow store.
//!
//! Decoders never read past the slice they are given and reject over-long varints
//! (more than 5 bytes for 32 bits, 10 for 64) and varints whose value overflows.

/// Constant added by [`mask_crc`] (LevelDB `kMaskDelta`).
const MASK_DELTA: u32 = 0xa282_ead8;

/// LevelDB's CRC mask: rotate right by 15 and add a constant, so that a CRC stored inside data
/// that is itself checksummed does not weaken the outer CRC.
pub fn mask_crc(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// Inverse of [`mask_crc`].
pub fn unmask_crc(masked: u32) -> u32 {
    masked.wrapping_sub(MASK_DELTA).rotate_left(15)
}

/// CRC32C (Castagnoli) of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Continues a CRC32C over more data.
pub fn crc32c_extend(crc: u32, data: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, data)
}

/// Appends `v` as a little-endian fixed32.
pub fn put_fixed32(dst: &mut Vec<u8>, v: u32) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` as a little-endian fixed64.
pub fn put_fixed64(dst: &mut Vec<u8>, v: u64) {
    dst.extend_from_slice(&v.to_le_bytes());
}

/// Reads a little-endian fixed32 at `pos`, if 4 bytes are there.
pub fn get_fixed32(src: &[u8], pos: usize) -> Option<u32> {
    let end = pos.checked_add(4)?;
    let b: [u8; 4] = src.get(pos..end)?.try_into().ok()?;
    Some(u32::from_le_bytes(b))
}

/// Reads a little-endian fixed64 at `pos`, if 8 bytes are there.
pub fn get_fixed64(src: &[u8], pos: usize) -> Option<u64> {
    let end = pos.checked_add(8)?;
    let b: [u8; 8] = src.get(pos..end)?.try_into().ok()?;
    Some(u64::from_le_bytes(b))
}

/// Appends `v` as a varint (LEB128).
pub fn put_varint64(dst: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        dst.push(v.to_le_bytes()[0] | 0x80); // the low 7 bits, and "more follows"
        v >>= 7;
    }
    dst.push(v.to_le_bytes()[0]); // v < 0x80
}

/// Appends `v` as a varint (LEB128).
pub fn put_varint32(dst: &mut Vec<u8>, v: u32) {
    put_varint64(dst, u64::from(v));
}

/// Number of bytes [`put_varint64`] writes for `v`.
pub fn varint_len(v: u64) -> usize {
    // 1 byte per started group of 7 significant bits; 0 still takes one byte.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Decodes a varint of at most 64 bits from the front of `src`.
/// Returns the value and the number of bytes used, or `None` if truncated, longer than 10 bytes,
/// or overflowing 64 bits.
pub fn get_varint64(src: &[u8]) -> Option<(u64, usize)> {
    let mut result: u64 = 0;
    for (i, &b) in src.iter().enumerate().take(10) {
        let payload = u64::from(b & 0x7f);
        if i == 9 && b > 1 {
            return None; // bits beyond the 64th
        }
        result |= payload << (7 * i);
        if b & 0x80 == 0 {
            return Some((result, i + 1));
        }
    }
    None
}

/// Decodes a varint of at most 32 bits from the front of `src` (at most 5 bytes).
pub fn get_varint32(src: &[u8]) -> Option<(u32, usize)> {
    let mut result: u32 = 0;
    for (i, &b) in src.iter().enumerate().take(5) {
        let payload = u32::from(b & 0x7f);
        if i == 4 && b > 0x0f {
            return None; // bits beyond the 32nd
        }
        result |= payload << (7 * i);
        if b & 0x80 == 0 {
            return Some((result, i + 1));
        }
    }
    None
}

/// A forward cursor over a byte slice whose reads fail instead of running past the end.
/// `base` is the absolute file offset of `buf[0]`, used in error messages.
#[derive(Debug, Clone)]
pub struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `buf`, which sits at file offset `base`.
    pub fn new(buf: &'a [u8], base: u64) -> Self {
        Cursor { buf, pos: 0, base }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Absolute file offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Takes the next `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }

    /// Reads a little-endian u32.
    pub fn u32_le(&mut self) -> Option<u32> {
        let v = get_fixed32(self.buf, self.pos)?;
        self.pos += 4;
        Some(v)
    }

    /// Reads a little-endian u64.
    pub fn u64_le(&mut self) -> Option<u64> {
        let v = get_fixed64(self.buf, self.pos)?;
        self.pos += 8;
        Some(v)
    }

    /// Reads a varint of at most 64 bits.
    pub fn varint64(&mut self) -> Option<u64> {
        let (v, n) = get_varint64(&self.buf[self.pos..])?;
        self.pos += n;
        Some(v)
    }

    /// Reads a varint of at most 32 bits.
    pub fn varint32(&mut self) -> Option<u32> {
        let (v, n) = get_varint32(&self.buf[self.pos..])?;
        self.pos += n;
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_matches_leveldb() {
        assert_eq!(mask_crc(0), 0xa282_ead8);
        for c in [0u32, 1, 0xdead_beef, u32::MAX, 683_723_185] {
            assert_eq!(unmask_crc(mask_crc(c)), c);
        }
        // TensorFlow reference: data 00 00 80 3f 00 00 00 40 -> masked 0x35e53c59.
        assert_eq!(crc32c(&[0, 0, 0x80, 0x3f, 0, 0, 0, 0x40]), 683_723_185);
        assert_eq!(mask_crc(683_723_185), 0x35e5_3c59);
    }

    #[test]
    fn varints_round_trip_and_reject_overlong() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let mut b = Vec::new();
            put_varint64(&mut b, v);
            assert_eq!(b.len(), varint_len(v));
            assert_eq!(get_varint64(&b), Some((v, b.len())));
            if v <= u32::MAX as u64 {
                assert_eq!(get_varint32(&b), Some((v as u32, b.len())));
            } else {
                assert_eq!(get_varint32(&b), None);
            }
        }
        assert_eq!(get_varint64(&[0x80; 11]), None);
        assert_eq!(
            get_varint64(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02]),
            None
        );
        assert_eq!(get_varint32(&[0xff, 0xff, 0xff, 0xff, 0x10]), None);
        assert_eq!(get_varint32(&[0x80, 0x80]), None);
        assert_eq!(get_varint64(&[]), None);
    }

    #[test]
    fn cursor_never_overruns() {
        let mut c = Cursor::new(&[1, 0, 0, 0, 5], 100);
        assert_eq!(c.u32_le(), Some(1));
        assert_eq!(c.offset(), 104);
        assert_eq!(c.u32_le(), None);
        assert_eq!(c.take(2), None);
        assert_eq!(c.take(1), Some(&[5u8][..]));
        assert_eq!(c.remaining(), 0);
    }
}
