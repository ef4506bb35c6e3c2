//! CRC32C (Castagnoli), LevelDB's masked form of it as LevelDB and TensorFlow store it, and
//! combining the CRCs of two adjacent pieces (how verify checksums one tensor on several threads).

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

/// The CRC32C polynomial, bit-reflected.
const POLY: u32 = 0x82f6_3b78;

/// `a · b mod P` in the bit-reflected representation of GF(2)[x] (zlib's `multmodp`).
const fn multmodp(a: u32, mut b: u32) -> u32 {
    let mut m: u32 = 1 << 31;
    let mut p: u32 = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                break;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `x^(2^k) mod P` for k in 0..32.
const X2N: [u32; 32] = {
    let mut t = [0u32; 32];
    t[0] = 1 << 30; // x^1
    let mut k = 1;
    while k < 32 {
        t[k] = multmodp(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// `x^(8·len) mod P`: the operator (for [`crc32c_combine_with`]) that shifts a CRC over `len` zero bytes.
pub fn crc32c_shift(len: u64) -> u32 {
    let (mut n, mut k, mut p) = (len, 3usize, 1u32 << 31);
    while n != 0 {
        if n & 1 != 0 {
            p = multmodp(X2N[k & 31], p);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// [`crc32c_combine`] with the shift for `|B|` computed once by [`crc32c_shift`]: for many
/// pieces of one length (verify's 1 MiB pieces), the shift is the same each time.
pub fn crc32c_combine_with(shift: u32, crc_a: u32, crc_b: u32) -> u32 {
    multmodp(shift, crc_a) ^ crc_b
}

/// CRC32C of `A‖B` from CRC32C(A), CRC32C(B) and |B|, as `crc32c::crc32c_combine` computes
/// it but in O(log |B|) small steps instead of 32×32 matrix squarings (which cost tens of
/// microseconds per call and dominated a parallel verify).
pub fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    crc32c_combine_with(crc32c_shift(len_b), crc_a, crc_b)
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
    fn combine_matches_the_crc32c_crate() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
        for cut in [0usize, 1, 7, 8, 100, 4096, 4999, 5000] {
            let (a, b) = data.split_at(cut);
            let (ca, cb) = (crc32c::crc32c(a), crc32c::crc32c(b));
            assert_eq!(
                crc32c_combine(ca, cb, b.len() as u64),
                crc32c::crc32c(&data)
            );
            assert_eq!(
                crc32c_combine(ca, cb, b.len() as u64),
                crc32c::crc32c_combine(ca, cb, b.len())
            );
        }
    }
}
