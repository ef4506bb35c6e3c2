//! The hash index meta block (`paramdex.hash`, SPEC.md 4.5): a bucketized open-addressing table
//! from a key's CRC32C to the data block and restart point of its entry, so that a lookup by
//! key touches one bucket and one restart run instead of two binary searches.
//!
//! Block contents (stored uncompressed, followed by the usual 5-byte trailer):
//!
//! ```text
//! 0   fixed32 home_buckets H (>= 1)
//! 4   fixed32 total_buckets T (>= H, <= MAX_BUCKETS)
//! 8   u8 hash function (1 = CRC32C of the key), u8 slots per bucket (8), u8 log2 buckets per
//!     page (6), u8 0
//! 12  fixed32 masked CRC32C of bytes 0..12
//! 16  fixed32 masked CRC32C of each page, P = ceil(T / 64) of them
//! 16 + 4P   T buckets of 8 slots, each slot a fixed64:
//!           0 = empty; else bits 0..31 = data block number + 1,
//!           bits 32..55 = restart point number in that block, bits 56..63 = tag (hash & 0xff)
//! ```
//!
//! A key with hash `h` has home bucket `(h * H) >> 32` and is placed in the first slot free in
//! its home bucket or, when that is full, in the following buckets (never wrapping: the buckets
//! after the H home buckets hold the overflow). A reader scans from the home bucket: an empty
//! slot ends the search (absent); a slot whose tag matches is a candidate, whose key is always
//! compared by decoding the restart run it names.
//!
//! The builder keeps 12 bytes per key until `finish`, then lays the buckets out in memory
//! (64 / 6 ≈ 10.7 bytes per key at the load factor used).

use std::sync::atomic::{AtomicU64, Ordering};

use super::footer::BlockHandle;
use crate::error::{Error, Result};
use crate::format::{crc32c, get_fixed32, get_fixed64, mask_crc, put_fixed32, unmask_crc};

/// The metaindex key of the hash index block.
pub const HASH_INDEX_KEY: &[u8] = b"paramdex.hash";

/// Slots per bucket: a bucket is 64 bytes, one cache line.
pub const SLOTS_PER_BUCKET: usize = 8;
const BUCKET_LEN: usize = SLOTS_PER_BUCKET * 8;
/// log2 of the buckets covered by one page checksum (64 buckets = 4 KiB).
const PAGE_LOG2: u32 = 6;
const PAGE_BUCKETS: usize = 1 << PAGE_LOG2;
/// Length of the block header (before the page checksums).
pub const HASH_HEADER_LEN: usize = 16;
/// The hash function id of CRC32C (of the whole key, as `crate::format::crc32c`).
const HASH_CRC32C: u8 = 1;
/// Most buckets a hash block may have (4 GiB of buckets; 2^29 keys).
pub const MAX_BUCKETS: u32 = 1 << 26;
/// Keys per home bucket the builder aims at (load factor 6/8).
const KEYS_PER_HOME_BUCKET: u64 = 6;
/// Largest restart point number a slot holds (24 bits).
const MAX_RESTART: usize = (1 << 24) - 1;

/// The hash of a key (CRC32C).
#[inline]
pub(crate) fn key_hash(key: &[u8]) -> u32 {
    crc32c(key)
}

#[inline]
fn home_bucket(h: u32, home: u32) -> usize {
    // Lemire's multiply-shift: < home for any h, and home <= 2^26 fits any usize of 32 bits.
    usize::try_from((u64::from(h) * u64::from(home)) >> 32).unwrap_or(usize::MAX)
}

/// Accumulates (hash, block, restart point) per key as a table builder adds keys, and lays out
/// the hash block at the end.
#[derive(Debug, Default)]
pub(crate) struct HashBuilder {
    items: Vec<[u32; 3]>,
    /// Set when a key could not be recorded (a block or restart number too large for a slot,
    /// too many keys): no hash block is written then.
    unusable: bool,
}

impl HashBuilder {
    /// Records that the key hashing to `h` is in data block `block`, restart run `restart`.
    pub(crate) fn add(&mut self, key: &[u8], block: u64, restart: usize) {
        if self.unusable {
            return;
        }
        let (Ok(b), Ok(r)) = (u32::try_from(block), u32::try_from(restart)) else {
            self.unusable = true;
            return;
        };
        if b == u32::MAX || restart > MAX_RESTART {
            self.unusable = true;
            self.items = Vec::new();
            return;
        }
        self.items.push([key_hash(key), b, r]);
    }

    /// The hash block's contents, or `None` when it cannot be written (see `unusable`, or more
    /// keys than [`MAX_BUCKETS`] allows).
    pub(crate) fn finish(self) -> Option<Vec<u8>> {
        if self.unusable {
            return None;
        }
        let n = self.items.len() as u64;
        let home = u32::try_from(n.div_ceil(KEYS_PER_HOME_BUCKET).max(1)).ok()?;
        if home > MAX_BUCKETS {
            return None;
        }
        let mut slots: Vec<u64> = vec![0; home as usize * SLOTS_PER_BUCKET];
        for [h, block, restart] in self.items {
            let slot =
                u64::from(block + 1) | (u64::from(restart) << 32) | (u64::from(h & 0xff) << 56);
            let mut b = home_bucket(h, home);
            loop {
                if b * SLOTS_PER_BUCKET >= slots.len() {
                    slots.resize(slots.len() + SLOTS_PER_BUCKET, 0);
                }
                let bucket = &mut slots[b * SLOTS_PER_BUCKET..(b + 1) * SLOTS_PER_BUCKET];
                if let Some(free) = bucket.iter_mut().find(|s| **s == 0) {
                    *free = slot;
                    break;
                }
                b += 1;
            }
        }
        let total = u32::try_from(slots.len() / SLOTS_PER_BUCKET).ok()?;
        if total > MAX_BUCKETS {
            return None;
        }
        let pages = (total as usize).div_ceil(PAGE_BUCKETS);
        let mut out = Vec::with_capacity(HASH_HEADER_LEN + 4 * pages + slots.len() * 8);
        put_fixed32(&mut out, home);
        put_fixed32(&mut out, total);
        out.extend_from_slice(&[HASH_CRC32C, 8, 6, 0]); // SLOTS_PER_BUCKET, PAGE_LOG2
        let hc = mask_crc(crc32c(&out));
        put_fixed32(&mut out, hc);
        let crcs_at = out.len();
        out.resize(crcs_at + 4 * pages, 0);
        for s in &slots {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let buckets_at = crcs_at + 4 * pages;
        for p in 0..pages {
            let start = buckets_at + p * PAGE_BUCKETS * BUCKET_LEN;
            let end = (start + PAGE_BUCKETS * BUCKET_LEN).min(out.len());
            let c = mask_crc(crc32c(&out[start..end]));
            out[crcs_at + 4 * p..crcs_at + 4 * p + 4].copy_from_slice(&c.to_le_bytes());
        }
        Some(out)
    }
}

/// A validated hash block header: where the block is and its geometry. The slots are read
/// from the file on each lookup; each page's checksum is checked the first time it is used.
#[derive(Debug)]
pub(crate) struct HashIndex {
    /// The block (contents without the trailer), absolute.
    pub(crate) handle: BlockHandle,
    home: u32,
    total: u32,
    /// One bit per page: its checksum matched.
    verified: Box<[AtomicU64]>,
}

/// What a slot names: a data block and a restart point in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    pub(crate) block: usize,
    pub(crate) restart: usize,
}

impl HashIndex {
    /// Validates the header of a hash block whose contents are `contents` (stored at
    /// `handle`): its checksum, the hash function and geometry, and that its length is exactly
    /// what the geometry says. O(1): the slots are not read.
    pub(crate) fn parse(contents: &[u8], handle: BlockHandle) -> Result<HashIndex> {
        let bad = |d: String| Error::corrupt("hash index block", handle.offset, d);
        if contents.len() < HASH_HEADER_LEN {
            return Err(bad(format!(
                "{} bytes, shorter than its {HASH_HEADER_LEN}-byte header",
                contents.len()
            )));
        }
        let stored = get_fixed32(contents, 12).unwrap_or(0);
        let computed = crc32c(&contents[..12]);
        if unmask_crc(stored) != computed {
            return Err(Error::ChecksumMismatch {
                what: "hash index block header",
                name: None,
                offset: handle.offset,
                len: 12,
                stored: unmask_crc(stored),
                computed,
                context: None,
            });
        }
        let home = get_fixed32(contents, 0).unwrap_or(0);
        let total = get_fixed32(contents, 4).unwrap_or(0);
        let (hash, spb, log2, zero) = (contents[8], contents[9], contents[10], contents[11]);
        if hash != HASH_CRC32C
            || usize::from(spb) != SLOTS_PER_BUCKET
            || u32::from(log2) != PAGE_LOG2
            || zero != 0
        {
            return Err(bad(format!(
                "unknown hash block kind (hash {hash}, {spb} slots per bucket, page log2 {log2}, \
                 reserved byte {zero}); this reader knows hash 1, 8 slots, page log2 6, 0"
            )));
        }
        if home == 0 || total < home || total > MAX_BUCKETS {
            return Err(bad(format!(
                "{home} home buckets of {total} in all (1 <= home <= total <= {MAX_BUCKETS})"
            )));
        }
        let pages = (total as usize).div_ceil(PAGE_BUCKETS);
        let want = HASH_HEADER_LEN as u64 + 4 * pages as u64 + u64::from(total) * BUCKET_LEN as u64;
        if contents.len() as u64 != want {
            return Err(bad(format!(
                "{} bytes, but {total} buckets make {want}",
                contents.len()
            )));
        }
        Ok(HashIndex {
            handle,
            home,
            total,
            verified: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    fn buckets_at(&self) -> usize {
        HASH_HEADER_LEN + 4 * (self.total as usize).div_ceil(PAGE_BUCKETS)
    }

    /// Checks the checksum of page `p` unless already done.
    fn check_page(&self, contents: &[u8], p: usize) -> Result<()> {
        let (word, bit) = (p / 64, 1u64 << (p % 64));
        if self.verified[word].load(Ordering::Acquire) & bit != 0 {
            return Ok(());
        }
        let start = self.buckets_at() + p * PAGE_BUCKETS * BUCKET_LEN;
        let end = (start + PAGE_BUCKETS * BUCKET_LEN).min(contents.len());
        let stored = unmask_crc(get_fixed32(contents, HASH_HEADER_LEN + 4 * p).unwrap_or(0));
        let computed = crc32c(&contents[start..end]);
        if stored != computed {
            return Err(Error::ChecksumMismatch {
                what: "hash index page",
                name: None,
                offset: self.handle.offset.saturating_add(start as u64),
                len: (end - start) as u64,
                stored,
                computed,
                context: None,
            });
        }
        self.verified[word].fetch_or(bit, Ordering::AcqRel);
        Ok(())
    }

    /// Calls `probe` with each candidate for `key` (slots of its probe sequence whose tag
    /// matches), in order, until it returns `true`; returns whether one did. `contents` are
    /// the block's contents (as validated by [`HashIndex::parse`]); `verify`: check each page's
    /// checksum before its first use.
    pub(crate) fn lookup(
        &self,
        contents: &[u8],
        key: &[u8],
        verify: bool,
        mut probe: impl FnMut(Candidate) -> Result<bool>,
    ) -> Result<bool> {
        let h = key_hash(key);
        let tag = u64::from(h & 0xff);
        let at = self.buckets_at();
        let mut checked_page = usize::MAX;
        for b in home_bucket(h, self.home)..self.total as usize {
            let p = b >> PAGE_LOG2;
            if verify && p != checked_page {
                self.check_page(contents, p)?;
                checked_page = p;
            }
            let base = at + b * BUCKET_LEN;
            for s in 0..SLOTS_PER_BUCKET {
                // In bounds: parse checked the length against the geometry.
                let v = get_fixed64(contents, base + 8 * s).unwrap_or(0);
                if v == 0 {
                    return Ok(false);
                }
                if v >> 56 == tag {
                    let Some(block) = (v & 0xffff_ffff).checked_sub(1) else {
                        return Err(Error::corrupt(
                            "hash index block",
                            self.handle.offset.saturating_add((base + 8 * s) as u64),
                            "a slot that is not empty names data block number 0 - 1",
                        ));
                    };
                    let c = Candidate {
                        // A block number beyond usize names no block (refused by the caller).
                        block: usize::try_from(block).unwrap_or(usize::MAX),
                        restart: usize::try_from((v >> 32) & 0xff_ffff).unwrap_or(usize::MAX),
                    };
                    if probe(c)? {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// Whether the probe sequence of `key`, before its first empty slot, holds a slot with the
    /// key's tag naming data block `block` and restart run `run`: [`HashIndex::lookup`] with a
    /// probe that only compares the candidate (pages not checked here: [`HashIndex::occupied`]
    /// checks them all first).
    pub(crate) fn has_slot(
        &self,
        contents: &[u8],
        key: &[u8],
        block: usize,
        run: usize,
    ) -> Result<bool> {
        self.lookup(contents, key, false, |c| {
            Ok(c == Candidate {
                block,
                restart: run,
            })
        })
    }

    /// Checks that `names(block, run)` holds for the data block and restart run of every
    /// occupied slot, else the error names the slot's offset.
    pub(crate) fn check_slots(
        &self,
        contents: &[u8],
        names: impl Fn(usize, usize) -> bool,
    ) -> Result<()> {
        let at = self.buckets_at();
        for (i, s) in contents[at..].chunks_exact(8).enumerate() {
            let v = get_fixed64(s, 0).unwrap_or(0);
            if v == 0 {
                continue;
            }
            let block = (v & 0xffff_ffff).checked_sub(1);
            let run = (v >> 32) & 0xff_ffff;
            let ok = block.is_some_and(|b| {
                names(
                    usize::try_from(b).unwrap_or(usize::MAX),
                    usize::try_from(run).unwrap_or(usize::MAX),
                )
            });
            if !ok {
                return Err(Error::corrupt(
                    "hash index block",
                    self.handle.offset.saturating_add((at + 8 * i) as u64),
                    format!(
                        "a slot names restart run {run} of data block {}, which the table \
                         does not have",
                        block.map_or("-1".to_string(), |b| b.to_string())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Number of occupied slots (reads, and checks, every page).
    pub(crate) fn occupied(&self, contents: &[u8]) -> Result<u64> {
        let pages = (self.total as usize).div_ceil(PAGE_BUCKETS);
        for p in 0..pages {
            self.check_page(contents, p)?;
        }
        let at = self.buckets_at();
        Ok(contents[at..]
            .chunks_exact(8)
            .filter(|s| s.iter().any(|&b| b != 0))
            .count() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_and_find_every_key() {
        let mut b = HashBuilder::default();
        let keys: Vec<Vec<u8>> = (0..5000).map(|i| format!("k{i}").into_bytes()).collect();
        for (i, k) in keys.iter().enumerate() {
            b.add(k, (i / 100) as u64, (i % 100) / 16);
        }
        let block = b.finish().unwrap();
        let h = BlockHandle {
            offset: 0,
            size: block.len() as u64,
        };
        let ix = HashIndex::parse(&block, h).unwrap();
        assert_eq!(ix.occupied(&block).unwrap(), 5000);
        for (i, k) in keys.iter().enumerate() {
            let want = Candidate {
                block: i / 100,
                restart: (i % 100) / 16,
            };
            let found = ix.lookup(&block, k, true, |c| Ok(c == want)).unwrap();
            assert!(found, "key {i}");
        }
        // A corrupted page is reported, not silently read.
        let mut bad = block.clone();
        let last = bad.len() - 3;
        bad[last] ^= 1;
        let ix = HashIndex::parse(&bad, h).unwrap();
        assert!(ix.occupied(&bad).is_err());
        // A corrupted header is rejected at parse.
        let mut bad = block.clone();
        bad[0] ^= 1;
        assert!(HashIndex::parse(&bad, h).is_err());
        assert!(HashIndex::parse(&block[..block.len() - 1], h).is_err());
    }

    #[test]
    fn empty_key_set_has_one_bucket() {
        let block = HashBuilder::default().finish().unwrap();
        assert_eq!(block.len(), HASH_HEADER_LEN + 4 + BUCKET_LEN);
        let h = BlockHandle {
            offset: 0,
            size: block.len() as u64,
        };
        let ix = HashIndex::parse(&block, h).unwrap();
        assert!(!ix.lookup(&block, b"x", true, |_| Ok(true)).unwrap());
    }
}
