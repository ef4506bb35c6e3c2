//! LevelDB's varints (LEB128): at most 5 bytes for 32 bits, 10 for 64.
//!
//! Decoders never read past the slice they are given and reject over-long varints and varints
//! whose value overflows.
//!
//! Hand-written on purpose rather than taken from `integer-encoding` 4 (measured 2026-11-23,
//! 10,000 index-block varints per pass; `cargo bench --bench varint`, which also asserts the
//! strictness difference):
//! - strictness: its `u32::decode_var` decodes a u64 and range-checks it, so it accepts 6- to
//!   10-byte varint32s (`[80 80 80 80 80 00]` gives `Some((0, 6))`); LevelDB and this module
//!   stop at 5 bytes, and the block corruption tests rely on it. Its strict alternatives are
//!   slower still (its `VarIntReader` 7.8x, `u64::decode_var(&src[..5])` + `try_from` 2-2.5x);
//! - speed: its decoders are not `#[inline]`, so every varint on the `get` path would be an
//!   out-of-line call. These are `#[inline]`: 39 us against its 317 us per pass for varint32,
//!   59 against 69 us for varint64 (as strict as [`get_varint64`]), and `put_varint64` 84
//!   against 173 us for its `encode_var`. Without `#[inline]` ours were 149/144/175 us (the
//!   calls crossed codegen units): the attribute matters inside this crate too.

/// Appends `v` as a varint (LEB128).
#[inline]
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
#[inline]
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
#[inline]
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
