//! The hash index meta block (`paramdex.hash`, SPEC.md 4.5): a bucketized open-addressing table
//! from a key's CRC32C to where its entry is, so that a lookup by key touches one bucket and
//! one run of entries instead of two binary searches. Two kinds:
//!
//! - **kind 0** (versions 1 and 2): a slot names a data block and a restart point in it; the
//!   lookup reads the block's restart array, then decodes the restart run.
//! - **kind 1** (version 3): a slot names where its entry's restart run starts in the data
//!   region (the data blocks before this block) and the entry's position in that run, so the
//!   lookup goes from the bucket straight to the run and decodes at most that many entries,
//!   touching neither the index block nor the data block's restart array. The block also carries a CRC32C of every
//!   4 KiB page of the data blocks before it (the *data pages*), so a lookup checks the page or
//!   two it reads instead of a whole data block: a fresh process's first lookup checksums a few
//!   KiB, which the table-driven CRC does without asking the CPU for its features.
//!
//! Kind 0 contents (stored uncompressed, followed by the usual 5-byte trailer):
//!
//! ```text
//! 0   fixed32 home_buckets H (>= 1)
//! 4   fixed32 total_buckets T (>= H, <= MAX_BUCKETS)
//! 8   u8 hash function (1 = CRC32C of the key), u8 slots per bucket (8), u8 log2 buckets per
//!     page (6), u8 kind (0)
//! 12  fixed32 masked CRC32C of bytes 0..12
//! 16  fixed32 masked CRC32C of each page, P = ceil(T / 64) of them
//! 16 + 4P   T buckets of 8 slots, each slot a fixed64:
//!           0 = empty; else bits 0..31 = data block number + 1,
//!           bits 32..55 = restart point number in that block, bits 56..63 = tag (hash & 0xff)
//! ```
//!
//! Kind 1 contents:
//!
//! ```text
//! 0   fixed32 H, 4 fixed32 T, 8 the same four bytes with kind 1
//! 12  fixed32 Q: data pages
//! 16  fixed64 absolute offset of the data region (its first page); the region ends where
//!     this block begins, and Q = ceil(region length / 4096)
//! 24  fixed32 masked CRC32C of bytes 0..24
//! 28  fixed32 masked CRC32C of each page of this block: the P bucket pages, then the
//!     R = ceil(Q / 1024) pages of the data-page table
//! 28 + 4(P + R)   T buckets of 8 slots: 0 = empty; else bits 0..39 = offset of the entry's
//!                 restart run in the data region + 1, bits 40..47 = entries before it in
//!                 that run, bits 48..55 = 0, bits 56..63 = tag
//! then            the data-page table: Q fixed32, the masked CRC32C of each data page
//! ```
//!
//! A key with hash `h` has home bucket `(h * H) >> 32` and is placed in the first slot free in
//! its home bucket or, when that is full, in the following buckets (never wrapping: the buckets
//! after the H home buckets hold the overflow). A reader scans from the home bucket: an empty
//! slot ends the search (absent); a slot whose tag matches is a candidate, whose key is always
//! compared by decoding the entries it names.
//!
//! The builder keeps 12 bytes per key until `finish`, then lays the buckets out in memory
//! (64 / 6 ≈ 10.7 bytes per key at the load factor used).

use std::sync::atomic::{AtomicU64, Ordering};

use super::footer::BlockHandle;
use crate::error::{Error, Result};
use crate::format::{
    crc32c, get_fixed32, get_fixed64, mask_crc, put_fixed32, put_fixed64, unmask_crc,
};

/// The metaindex key of the hash index block.
pub const HASH_INDEX_KEY: &[u8] = b"paramdex.hash";

/// Slots per bucket: a bucket is 64 bytes, one cache line.
pub const SLOTS_PER_BUCKET: usize = 8;
const BUCKET_LEN: usize = SLOTS_PER_BUCKET * 8;
/// log2 of the buckets covered by one page checksum (64 buckets = 4 KiB).
const PAGE_LOG2: u32 = 6;
const PAGE_BUCKETS: usize = 1 << PAGE_LOG2;
/// Length of a kind 0 block's header (before the page checksums).
pub const HASH_HEADER_LEN: usize = 16;
/// Length of a kind 1 block's header (before the page checksums).
const ENTRY_HEADER_LEN: usize = 28;
/// Bytes of the data region one data-page checksum covers.
pub(crate) const DATA_PAGE: usize = 4096;
/// Data-page checksums per page of the data-page table (4 KiB of them).
const CRCS_PER_PAGE: usize = DATA_PAGE / 4;
/// The hash function id of CRC32C (of the whole key, as `crate::format::crc32c`).
const HASH_CRC32C: u8 = 1;
/// Most buckets a hash block may have (4 GiB of buckets; 2^29 keys).
pub const MAX_BUCKETS: u32 = 1 << 26;
/// Keys per home bucket the builder aims at (load factor 6/8).
const KEYS_PER_HOME_BUCKET: u64 = 6;
/// Largest restart point number a kind 0 slot holds (24 bits).
const MAX_RESTART: usize = (1 << 24) - 1;
/// Largest offset of a run in the data region a kind 1 slot holds (40 bits, less the 1 added).
const MAX_RUN_OFFSET: u64 = (1 << 40) - 2;
/// Most entries before a key in its restart run that a kind 1 slot can say (restart
/// intervals up to 256).
pub(crate) const MAX_RUN_POSITION: usize = 255;

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

/// Which slots a hash block has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HashKind {
    /// Kind 0: a slot names a block and a restart point number.
    Runs,
    /// Kind 1: a slot names a block, its entry's run by byte offset and the entry's position
    /// in the run; the block carries the data pages' checksums.
    Entries,
}

/// The data region a kind 1 block covers, as the table builder wrote it: where it starts and
/// the masked CRC32C of each of its [`DATA_PAGE`]-byte pages (the last one partial).
#[derive(Debug, Default)]
pub(crate) struct DataPages {
    /// Absolute offset of the region's first byte.
    pub(crate) start: u64,
    /// Length of the region.
    pub(crate) len: u64,
    /// Masked CRC32C of each page.
    pub(crate) crcs: Vec<u32>,
}

/// The running checksums of the data pages, fed every byte the table builder writes from the
/// region's start until the hash block.
#[derive(Debug)]
pub(crate) struct PageSums {
    pages: DataPages,
    /// CRC of the page being filled, and how many of its bytes are in.
    crc: u32,
    fill: usize,
}

impl PageSums {
    /// Sums of a region starting at absolute offset `start`.
    pub(crate) fn new(start: u64) -> PageSums {
        PageSums {
            pages: DataPages {
                start,
                ..DataPages::default()
            },
            crc: 0,
            fill: 0,
        }
    }

    /// Adds the next bytes of the region.
    pub(crate) fn update(&mut self, mut bytes: &[u8]) {
        self.pages.len += bytes.len() as u64;
        while !bytes.is_empty() {
            let take = (DATA_PAGE - self.fill).min(bytes.len());
            self.crc = crate::format::crc32c_extend(self.crc, &bytes[..take]);
            self.fill += take;
            bytes = &bytes[take..];
            if self.fill == DATA_PAGE {
                self.pages.crcs.push(mask_crc(self.crc));
                self.crc = 0;
                self.fill = 0;
            }
        }
    }

    /// The region's pages, the last partial page closed.
    pub(crate) fn finish(mut self) -> DataPages {
        if self.fill > 0 {
            self.pages.crcs.push(mask_crc(self.crc));
        }
        self.pages
    }
}

/// Accumulates (hash, block, place in block) per key as a table builder adds keys, and lays
/// out the hash block at the end.
#[derive(Debug)]
pub(crate) struct HashBuilder {
    kind: HashKind,
    /// Per key, 12 bytes (the writer keeps them until `finish`): kind 0, (hash, block,
    /// restart number); kind 1, (hash, low 32 bits of the run's offset in the data region,
    /// its high 8 bits | the position in the run << 8).
    items: Vec<[u32; 3]>,
    /// Set when a key could not be recorded (a block or restart number too large for a slot,
    /// too many keys): no hash block is written then.
    unusable: bool,
}

impl HashBuilder {
    /// A builder of a block of `kind`.
    pub(crate) fn new(kind: HashKind) -> HashBuilder {
        HashBuilder {
            kind,
            items: Vec::new(),
            unusable: false,
        }
    }

    fn give_up(&mut self) {
        self.unusable = true;
        self.items = Vec::new();
    }

    /// Records that `key` is in data block `block`, in the restart run numbered `restart`
    /// that starts at byte `run_offset` of the data region (kind 1), with `position` entries
    /// before it in the run.
    pub(crate) fn add(
        &mut self,
        key: &[u8],
        block: u64,
        restart: usize,
        run_offset: u64,
        position: usize,
    ) {
        if self.unusable {
            return;
        }
        let item = match self.kind {
            HashKind::Runs => {
                let (Ok(b), Ok(r)) = (u32::try_from(block), u32::try_from(restart)) else {
                    return self.give_up();
                };
                if b == u32::MAX || restart > MAX_RESTART {
                    return self.give_up();
                }
                [key_hash(key), b, r]
            }
            HashKind::Entries => {
                if run_offset > MAX_RUN_OFFSET || position > MAX_RUN_POSITION {
                    return self.give_up();
                }
                // In range (40 and 8 bits): checked just above.
                let low = u32::try_from(run_offset & 0xffff_ffff).unwrap_or(0);
                let high = u32::try_from(run_offset >> 32).unwrap_or(0);
                let position = u32::try_from(position).unwrap_or(0);
                [key_hash(key), low, high | (position << 8)]
            }
        };
        self.items.push(item);
    }

    /// The hash block's contents, or `None` when it cannot be written (see `unusable`, or more
    /// keys than [`MAX_BUCKETS`] allows). A kind 1 block needs the data pages.
    pub(crate) fn finish(self, pages: Option<DataPages>) -> Option<Vec<u8>> {
        if self.unusable {
            return None;
        }
        let n = self.items.len() as u64;
        let home = u32::try_from(n.div_ceil(KEYS_PER_HOME_BUCKET).max(1)).ok()?;
        if home > MAX_BUCKETS {
            return None;
        }
        let kind = self.kind;
        let mut slots: Vec<u64> = vec![0; home as usize * SLOTS_PER_BUCKET];
        for [h, lo, hi] in self.items {
            let tag = u64::from(h & 0xff) << 56;
            let slot = match kind {
                HashKind::Runs => u64::from(lo + 1) | (u64::from(hi) << 32) | tag,
                HashKind::Entries => {
                    let run = u64::from(lo) | (u64::from(hi & 0xff) << 32);
                    (run + 1) | (u64::from(hi >> 8) << 40) | tag
                }
            };
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
        let bucket_pages = (total as usize).div_ceil(PAGE_BUCKETS);
        let mut out = Vec::new();
        put_fixed32(&mut out, home);
        put_fixed32(&mut out, total);
        let (table_pages, data) = match kind {
            HashKind::Runs => {
                out.extend_from_slice(&[HASH_CRC32C, 8, 6, 0]); // SLOTS_PER_BUCKET, PAGE_LOG2
                (0, None)
            }
            HashKind::Entries => {
                let data = pages?;
                let q = u32::try_from(data.crcs.len()).ok()?;
                out.extend_from_slice(&[HASH_CRC32C, 8, 6, 1]);
                put_fixed32(&mut out, q);
                put_fixed64(&mut out, data.start);
                (data.crcs.len().div_ceil(CRCS_PER_PAGE), Some(data))
            }
        };
        let hc = mask_crc(crc32c(&out));
        put_fixed32(&mut out, hc);
        let crcs_at = out.len();
        out.resize(crcs_at + 4 * (bucket_pages + table_pages), 0);
        let buckets_at = out.len();
        out.reserve(slots.len() * 8 + data.as_ref().map_or(0, |d| 4 * d.crcs.len()));
        for s in &slots {
            out.extend_from_slice(&s.to_le_bytes());
        }
        let table_at = out.len();
        if let Some(d) = &data {
            for &c in &d.crcs {
                put_fixed32(&mut out, c);
            }
        }
        let page_ranges = (0..bucket_pages)
            .map(|p| {
                let start = buckets_at + p * PAGE_BUCKETS * BUCKET_LEN;
                (start, (start + PAGE_BUCKETS * BUCKET_LEN).min(table_at))
            })
            .chain((0..table_pages).map(|p| {
                let start = table_at + p * DATA_PAGE;
                (start, (start + DATA_PAGE).min(out.len()))
            }))
            .collect::<Vec<_>>();
        for (i, (start, end)) in page_ranges.into_iter().enumerate() {
            let c = mask_crc(crc32c(&out[start..end]));
            out[crcs_at + 4 * i..crcs_at + 4 * i + 4].copy_from_slice(&c.to_le_bytes());
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
    kind: HashKind,
    home: u32,
    total: u32,
    /// Where the page checksums start in the contents.
    crcs_at: usize,
    /// Where the buckets start.
    buckets_at: usize,
    /// Kind 1: the data region (absolute start, length, pages) and where its page table
    /// starts in the contents.
    region_start: u64,
    region_len: u64,
    data_pages: usize,
    table_at: usize,
    /// One bit per page of this block: its checksum matched.
    verified: Box<[AtomicU64]>,
    /// Kind 1: one bit per data page: its checksum matched.
    data_verified: Box<[AtomicU64]>,
}

/// What a slot names: a run of entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Candidate {
    /// Kind 0: the data block number; kind 1: 0.
    pub(crate) block: usize,
    /// Kind 0: the restart point number in the block; kind 1: the run's byte offset in the
    /// data region.
    pub(crate) run: u64,
    /// Kind 1: entries before the key in its run (0 in kind 0).
    pub(crate) position: usize,
}

/// A bitmap of `n` bits, all clear.
fn bitmap(n: usize) -> Box<[AtomicU64]> {
    (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect()
}

/// Whether bit `i` of `bits` (a [`bitmap`]) is set.
fn bit_is_set(bits: &[AtomicU64], i: usize) -> bool {
    bits[i / 64].load(Ordering::Acquire) & (1u64 << (i % 64)) != 0
}

/// Sets bit `i` of `bits`.
fn set_bit(bits: &[AtomicU64], i: usize) {
    bits[i / 64].fetch_or(1u64 << (i % 64), Ordering::AcqRel);
}

/// `Ok` if `bytes`, at absolute offset `offset`, have the CRC32C whose masked form is
/// `stored`; else the mismatch, as `what`.
fn check_masked(what: &'static str, stored: u32, bytes: &[u8], offset: u64) -> Result<()> {
    let (stored, computed) = (unmask_crc(stored), crc32c(bytes));
    if stored != computed {
        return Err(Error::ChecksumMismatch {
            what,
            name: None,
            offset,
            len: bytes.len() as u64,
            stored,
            computed,
            context: None,
        });
    }
    Ok(())
}

impl HashIndex {
    /// Validates the header of a hash block whose contents are `contents` (stored at
    /// `handle`): its checksum, the hash function and geometry, and that its length is exactly
    /// what the geometry says. O(1): the slots are not read. A kind 1 block's data region must
    /// end where the block begins.
    pub(crate) fn parse(contents: &[u8], handle: BlockHandle) -> Result<HashIndex> {
        let bad = |d: String| Error::corrupt("hash index block", handle.offset, d);
        if contents.len() < HASH_HEADER_LEN {
            return Err(bad(format!(
                "{} bytes, shorter than its {HASH_HEADER_LEN}-byte header",
                contents.len()
            )));
        }
        let kind = match contents[11] {
            0 => HashKind::Runs,
            1 => HashKind::Entries,
            k => {
                return Err(bad(format!(
                    "unknown hash block kind {k}; this reader knows kinds 0 and 1"
                )))
            }
        };
        let header_len = match kind {
            HashKind::Runs => HASH_HEADER_LEN,
            HashKind::Entries => ENTRY_HEADER_LEN,
        };
        if contents.len() < header_len {
            return Err(bad(format!(
                "{} bytes, shorter than its {header_len}-byte header",
                contents.len()
            )));
        }
        let crc_at = header_len - 4;
        check_masked(
            "hash index block header",
            get_fixed32(contents, crc_at).unwrap_or(0),
            &contents[..crc_at],
            handle.offset,
        )?;
        let home = get_fixed32(contents, 0).unwrap_or(0);
        let total = get_fixed32(contents, 4).unwrap_or(0);
        let (hash, spb, log2) = (contents[8], contents[9], contents[10]);
        if hash != HASH_CRC32C
            || usize::from(spb) != SLOTS_PER_BUCKET
            || u32::from(log2) != PAGE_LOG2
        {
            return Err(bad(format!(
                "unknown hash block layout (hash {hash}, {spb} slots per bucket, page log2 \
                 {log2}); this reader knows hash 1, 8 slots, page log2 6"
            )));
        }
        if home == 0 || total < home || total > MAX_BUCKETS {
            return Err(bad(format!(
                "{home} home buckets of {total} in all (1 <= home <= total <= {MAX_BUCKETS})"
            )));
        }
        let bucket_pages = (total as usize).div_ceil(PAGE_BUCKETS);
        let (data_pages, region_start, region_len) = match kind {
            HashKind::Runs => (0usize, 0u64, 0u64),
            HashKind::Entries => {
                let q = get_fixed32(contents, 12).unwrap_or(0) as usize;
                let start = get_fixed64(contents, 16).unwrap_or(0);
                let len = handle.offset.checked_sub(start).ok_or_else(|| {
                    bad(format!(
                        "its data region starts at {start}, after the block itself"
                    ))
                })?;
                if len.div_ceil(DATA_PAGE as u64) != q as u64 {
                    return Err(bad(format!(
                        "{q} data pages for a data region of {len} bytes (from {start})"
                    )));
                }
                (q, start, len)
            }
        };
        let table_pages = data_pages.div_ceil(CRCS_PER_PAGE);
        let crcs_at = header_len;
        let buckets_at = crcs_at + 4 * (bucket_pages + table_pages);
        let table_at = buckets_at + total as usize * BUCKET_LEN;
        let want = table_at as u64 + 4 * data_pages as u64;
        if contents.len() as u64 != want {
            return Err(bad(format!(
                "{} bytes, but {total} buckets and {data_pages} data pages make {want}",
                contents.len()
            )));
        }
        Ok(HashIndex {
            handle,
            kind,
            home,
            total,
            crcs_at,
            buckets_at,
            region_start,
            region_len,
            data_pages,
            table_at,
            verified: bitmap(bucket_pages + table_pages),
            data_verified: bitmap(data_pages),
        })
    }

    /// The block's kind.
    pub(crate) fn kind(&self) -> HashKind {
        self.kind
    }

    fn bucket_pages(&self) -> usize {
        (self.total as usize).div_ceil(PAGE_BUCKETS)
    }

    fn table_pages(&self) -> usize {
        self.data_pages.div_ceil(CRCS_PER_PAGE)
    }

    /// Checks the checksum of page `p` of this block (a bucket page, then the pages of the
    /// data-page table) unless already done.
    fn check_page(&self, contents: &[u8], p: usize) -> Result<()> {
        if bit_is_set(&self.verified, p) {
            return Ok(());
        }
        let bucket_pages = self.bucket_pages();
        let (start, end) = if p < bucket_pages {
            let start = self.buckets_at + p * PAGE_BUCKETS * BUCKET_LEN;
            (
                start,
                (start + PAGE_BUCKETS * BUCKET_LEN).min(self.table_at),
            )
        } else {
            let start = self.table_at + (p - bucket_pages) * DATA_PAGE;
            (start, (start + DATA_PAGE).min(contents.len()))
        };
        check_masked(
            "hash index page",
            get_fixed32(contents, self.crcs_at + 4 * p).unwrap_or(0),
            contents.get(start..end).unwrap_or_default(),
            self.handle.offset.saturating_add(start as u64),
        )?;
        set_bit(&self.verified, p);
        Ok(())
    }

    /// Kind 1: checks the data pages that bytes `start..end` (absolute offsets) of the file
    /// `file` (whose byte 0 is at absolute offset `base`) lie in, each once. Errors if the
    /// range is not inside the data region.
    pub(crate) fn check_data(
        &self,
        contents: &[u8],
        file: &[u8],
        base: u64,
        start: u64,
        end: u64,
    ) -> Result<()> {
        let (region_start, region_end) = self.region();
        if start < region_start || end > region_end || start > end {
            return Err(Error::corrupt(
                "hash index block",
                self.handle.offset,
                format!(
                    "a slot leads to bytes {start}..{end}, outside the data region {region_start}..{region_end} it covers"
                ),
            ));
        }
        if end == start {
            return Ok(());
        }
        // Pages of a region whose page table the block holds: they fit a usize.
        let page_of =
            |at: u64| usize::try_from((at - region_start) / DATA_PAGE as u64).unwrap_or(0);
        for q in page_of(start)..=page_of(end - 1) {
            if bit_is_set(&self.data_verified, q) {
                continue;
            }
            self.check_page(contents, self.bucket_pages() + q / CRCS_PER_PAGE)?;
            let page_start = region_start + (q * DATA_PAGE) as u64;
            let page_end = (page_start + DATA_PAGE as u64).min(region_end);
            let bytes = page_start
                .checked_sub(base)
                .and_then(|s| usize::try_from(s).ok())
                .zip(
                    page_end
                        .checked_sub(base)
                        .and_then(|e| usize::try_from(e).ok()),
                )
                .and_then(|(s, e)| file.get(s..e))
                .ok_or_else(|| {
                    Error::truncated(
                        "data page",
                        page_start,
                        format!("bytes {page_start}..{page_end} are not in the bytes read"),
                    )
                })?;
            check_masked(
                "index data page",
                get_fixed32(contents, self.table_at + 4 * q).unwrap_or(0),
                bytes,
                page_start,
            )?;
            set_bit(&self.data_verified, q);
        }
        Ok(())
    }

    /// Kind 1: checks every data page against the region's bytes in `file` (byte 0 at
    /// absolute offset `base`): `verify`'s pass.
    pub(crate) fn check_all_data(&self, contents: &[u8], file: &[u8], base: u64) -> Result<()> {
        if self.kind != HashKind::Entries || self.region_len == 0 {
            return Ok(());
        }
        self.check_data(
            contents,
            file,
            base,
            self.region_start,
            self.region_start + self.region_len,
        )
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
        let at = self.buckets_at;
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
                    let c = self.decode_slot(v).ok_or_else(|| {
                        Error::corrupt(
                            "hash index block",
                            self.handle.offset.saturating_add((base + 8 * s) as u64),
                            "a slot that is not empty names block or run number 0 - 1",
                        )
                    })?;
                    if probe(c)? {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }

    /// What the occupied slot `v` names; `None` if its block number (kind 0) or run offset
    /// (kind 1) is 0 - 1.
    #[inline]
    fn decode_slot(&self, v: u64) -> Option<Candidate> {
        // A number beyond usize names no block (refused by the caller).
        let us = |x: u64| usize::try_from(x).unwrap_or(usize::MAX);
        Some(match self.kind {
            HashKind::Runs => Candidate {
                block: us((v & 0xffff_ffff).checked_sub(1)?),
                run: (v >> 32) & 0xff_ffff,
                position: 0,
            },
            HashKind::Entries => Candidate {
                block: 0,
                run: (v & 0xff_ffff_ffff).checked_sub(1)?,
                position: us((v >> 40) & 0xff),
            },
        })
    }

    /// Kind 1: the data region, absolute (start, end).
    pub(crate) fn region(&self) -> (u64, u64) {
        (
            self.region_start,
            self.region_start.saturating_add(self.region_len),
        )
    }

    /// Whether the probe sequence of `key`, before its first empty slot, holds a slot with the
    /// key's tag naming `want` (pages not checked here: [`HashIndex::occupied`] checks them
    /// all first).
    pub(crate) fn has_slot(&self, contents: &[u8], key: &[u8], want: Candidate) -> Result<bool> {
        self.lookup(contents, key, false, |c| Ok(c == want))
    }

    /// Checks that `names(candidate)` holds for every occupied slot, else the error names the
    /// slot's offset.
    pub(crate) fn check_slots(
        &self,
        contents: &[u8],
        names: impl Fn(Candidate) -> bool,
    ) -> Result<()> {
        let at = self.buckets_at;
        let end = self.table_at;
        for (i, s) in contents[at..end].chunks_exact(8).enumerate() {
            let v = get_fixed64(s, 0).unwrap_or(0);
            if v == 0 {
                continue;
            }
            let c = self.decode_slot(v);
            if !c.is_some_and(&names) {
                return Err(Error::corrupt(
                    "hash index block",
                    self.handle.offset.saturating_add((at + 8 * i) as u64),
                    match c {
                        Some(c) if self.kind == HashKind::Runs => format!(
                            "a slot names restart run {} of data block {}, which the table \
                             does not have",
                            c.run, c.block
                        ),
                        Some(c) => format!(
                            "a slot names entry {} of a run at byte {} of the data region, \
                             which the table does not have",
                            c.position, c.run
                        ),
                        None => "a slot names block or run number 0 - 1".to_string(),
                    },
                ));
            }
        }
        Ok(())
    }

    /// Number of occupied slots (reads, and checks, every page of the block).
    pub(crate) fn occupied(&self, contents: &[u8]) -> Result<u64> {
        for p in 0..self.bucket_pages() + self.table_pages() {
            self.check_page(contents, p)?;
        }
        Ok(contents[self.buckets_at..self.table_at]
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
        let mut b = HashBuilder::new(HashKind::Runs);
        let keys: Vec<Vec<u8>> = (0..5000).map(|i| format!("k{i}").into_bytes()).collect();
        for (i, k) in keys.iter().enumerate() {
            b.add(k, (i / 100) as u64, (i % 100) / 16, 0, 0);
        }
        let block = b.finish(None).unwrap();
        let h = BlockHandle {
            offset: 0,
            size: block.len() as u64,
        };
        let ix = HashIndex::parse(&block, h).unwrap();
        assert_eq!(ix.occupied(&block).unwrap(), 5000);
        for (i, k) in keys.iter().enumerate() {
            let want = Candidate {
                block: i / 100,
                run: ((i % 100) / 16) as u64,
                position: 0,
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
        let block = HashBuilder::new(HashKind::Runs).finish(None).unwrap();
        assert_eq!(block.len(), HASH_HEADER_LEN + 4 + BUCKET_LEN);
        let h = BlockHandle {
            offset: 0,
            size: block.len() as u64,
        };
        let ix = HashIndex::parse(&block, h).unwrap();
        assert!(!ix.lookup(&block, b"x", true, |_| Ok(true)).unwrap());
    }
}
