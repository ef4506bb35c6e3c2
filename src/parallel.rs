//! Checking tensor data checksums on several threads.
//!
//! The bytes of a batch of tensors are cut into pieces of at most [`PIECE`] bytes (a small
//! tensor is one piece, a large one many), the pieces are checksummed by a pool of scoped
//! threads that claim runs of pieces from a shared counter, and each tensor's CRC32C is then
//! assembled from its pieces' CRCs with `crc32c_combine`. So two threads help even when the
//! file holds one huge tensor, and memory stays bounded by the batch the caller passes.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::error::Result;
use crate::reader::TensorView;

/// Largest piece of one tensor checksummed as a unit: large enough that the per-piece costs
/// (claiming, `crc32c_combine`) vanish, small enough to balance two threads on one tensor.
pub(crate) const PIECE: usize = 1 << 20;

/// Below this many bytes in a batch, one thread does it all (spawning would cost more).
const PARALLEL_MIN_BYTES: u64 = 4 << 20;

/// The number of threads `threads` asks for (0 = available parallelism).
pub(crate) fn resolve_threads(threads: usize) -> usize {
    match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
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

/// `x^(8·len) mod P`: the operator that shifts a CRC over `len` zero bytes.
fn shift_op(len: u64) -> u32 {
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

/// CRC32C of `A‖B` from CRC32C(A), CRC32C(B) and |B|, as `crc32c::crc32c_combine` computes
/// it but in O(log |B|) small steps instead of 32×32 matrix squarings (which cost tens of
/// microseconds per call and dominated a parallel verify).
pub(crate) fn crc32c_combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    multmodp(shift_op(len_b), crc_a) ^ crc_b
}

/// One piece: the tensor it belongs to and its byte range in that tensor's data.
struct Piece {
    view: usize,
    start: usize,
    len: usize,
}

/// Checks the CRC32C of every view on up to `threads` threads (0 = available parallelism).
/// Returns the bytes checked, or the first mismatch in the order of `views`.
pub(crate) fn check_crcs(views: &[TensorView<'_>], threads: usize) -> Result<u64> {
    let total: u64 = views.iter().map(|v| v.data().len() as u64).sum();
    let threads = resolve_threads(threads);
    if threads <= 1 || total < PARALLEL_MIN_BYTES {
        for v in views {
            v.verify_crc()?;
        }
        return Ok(total);
    }
    let mut pieces = Vec::new();
    for (i, v) in views.iter().enumerate() {
        let len = v.data().len();
        let mut start = 0;
        loop {
            let n = PIECE.min(len - start);
            pieces.push(Piece {
                view: i,
                start,
                len: n,
            });
            start += n;
            if start >= len {
                break;
            }
        }
    }
    // Work units: runs of consecutive pieces holding about PIECE bytes (many tiny tensors
    // share a unit, so threads do not fight over the counter for each).
    let mut units = vec![0usize];
    let mut acc = 0usize;
    for (k, p) in pieces.iter().enumerate() {
        acc += p.len + 64; // a per-piece cost, so empty tensors still split
        if acc >= PIECE {
            units.push(k + 1);
            acc = 0;
        }
    }
    if *units.last().unwrap_or(&0) != pieces.len() {
        units.push(pieces.len());
    }
    let crcs: Vec<AtomicU32> = (0..pieces.len()).map(|_| AtomicU32::new(0)).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let u = next.fetch_add(1, Ordering::Relaxed);
        if u + 1 >= units.len() {
            break;
        }
        for k in units[u]..units[u + 1] {
            let p = &pieces[k];
            let c = crc32c::crc32c(&views[p.view].data()[p.start..p.start + p.len]);
            crcs[k].store(c, Ordering::Relaxed);
        }
    };
    let workers = threads.min(units.len() - 1);
    std::thread::scope(|s| {
        for _ in 1..workers {
            s.spawn(work);
        }
        work();
    });
    // Assemble each tensor's CRC from its pieces, in order (the scope's join orders the
    // workers' stores before these loads).
    let full_piece = shift_op(PIECE as u64);
    let mut k = 0;
    for (i, v) in views.iter().enumerate() {
        let mut crc = crcs[k].load(Ordering::Relaxed);
        k += 1;
        while k < pieces.len() && pieces[k].view == i {
            let piece = crcs[k].load(Ordering::Relaxed);
            crc = if pieces[k].len == PIECE {
                multmodp(full_piece, crc) ^ piece
            } else {
                crc32c_combine(crc, piece, pieces[k].len as u64)
            };
            k += 1;
        }
        v.check_computed_crc(crc)?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

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
