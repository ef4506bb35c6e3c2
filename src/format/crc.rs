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
    crc32c_extend(0, data)
}

/// Continues a CRC32C over more data.
///
/// The first few KiB a process checksums (an open's footer, index and hash-block checks, the
/// name hashes of its first lookups) go through a table, not the `crc32c` crate: that crate
/// asks at run time whether the CPU has SSE4.2, and the first such question runs Rust's CPU
/// feature detection, whose `cpuid` instructions trap to the hypervisor on a VM (~26 µs of a
/// ~100 µs fresh-process open + get in issue 31's profile). A program built for x86-64-v2
/// (`-C target-feature=+sse4.2`) has the answer at compile time and always takes the crate's
/// hardware path; one built with default flags (most programs that embed the library) takes
/// the table until `SOFTWARE_BUDGET` (64 KiB) has gone through it, then pays the detection
/// once and uses the hardware from then on. The crate has no detection-free software entry
/// point, hence the table here.
pub fn crc32c_extend(crc: u32, data: &[u8]) -> u32 {
    if detection_is_free() || hardware_chosen(data.len()) {
        crc32c::crc32c_append(crc, data)
    } else {
        software_crc32c_append(crc, data)
    }
}

/// Bytes the table may checksum before the hardware path is chosen: about what the detection
/// costs in table time (the table runs at ~1.5 GB/s; the detection 26–46 µs on this VM), and
/// enough for the open and first lookup of a version 3 file of a million tensors (an index
/// block of ~38 KiB, then ~12 KiB of hash and data pages) to stay on the table.
const SOFTWARE_BUDGET: usize = 64 << 10;

/// Whether the hardware question is answered at compile time (x86-64 with SSE4.2 enabled) or
/// never asked (other architectures: the crate's own code decides without `cpuid`).
const fn detection_is_free() -> bool {
    !cfg!(target_arch = "x86_64") || cfg!(target_feature = "sse4.2")
}

/// Whether this call of `len` bytes takes the hardware path: yes once the budget is spent (or
/// the call alone exceeds it); the budget is counted across threads, approximately (a race
/// only moves the switch by a call).
fn hardware_chosen(len: usize) -> bool {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    static SPENT: AtomicUsize = AtomicUsize::new(0);
    let spent = SPENT.load(Relaxed);
    if spent >= SOFTWARE_BUDGET {
        return true;
    }
    let now = spent.saturating_add(len);
    SPENT.store(now, Relaxed);
    now >= SOFTWARE_BUDGET
}

/// Slicing-by-8 tables of the reflected CRC32C polynomial: `TABLES[0]` is the classic byte
/// table, `TABLES[k][b]` the CRC of byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut b: u32 = 0;
    while b < 256 {
        let mut c = b;
        let mut i = 0;
        while i < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ POLY } else { c >> 1 };
            i += 1;
        }
        t[0][b as usize] = c;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
};

/// CRC32C by table, eight bytes a step (no CPU feature needed).
fn software_crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    let mut chunks = data.chunks_exact(8);
    for w in &mut chunks {
        let lo = c ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        c = TABLES[7][(lo & 0xff) as usize]
            ^ TABLES[6][((lo >> 8) & 0xff) as usize]
            ^ TABLES[5][((lo >> 16) & 0xff) as usize]
            ^ TABLES[4][(lo >> 24) as usize]
            ^ TABLES[3][w[4] as usize]
            ^ TABLES[2][w[5] as usize]
            ^ TABLES[1][w[6] as usize]
            ^ TABLES[0][w[7] as usize];
    }
    for &b in chunks.remainder() {
        c = (c >> 8) ^ TABLES[0][((c ^ b as u32) & 0xff) as usize];
    }
    !c
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
    fn the_table_matches_the_crc32c_crate() {
        let data: Vec<u8> = (0..3000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for len in [0usize, 1, 7, 8, 9, 15, 16, 17, 63, 64, 1000, 3000] {
            let d = &data[..len];
            assert_eq!(software_crc32c_append(0, d), crc32c::crc32c(d), "len {len}");
            let (a, b) = d.split_at(len / 3);
            let ca = software_crc32c_append(0, a);
            assert_eq!(
                software_crc32c_append(ca, b),
                crc32c::crc32c(d),
                "len {len}"
            );
        }
        // The standard check value of CRC32C ("123456789").
        assert_eq!(software_crc32c_append(0, b"123456789"), 0xe306_9283);
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
