//! A bounds-checked forward reader over a byte slice.

use super::fixed::{get_fixed32, get_fixed64};
use super::varint::{get_varint32, get_varint64};

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
