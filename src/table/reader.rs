//! Reading a table from a byte slice holding the whole file (typically an mmap), or from the
//! bytes of its end held in memory and the read seam ([`ReadAt`]) for the blocks before them.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::ops::{Deref, Range};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::block::{find_in_span, key_lt, scan_entries, Block, BlockBuilder, EntryCursor, Layout};
use super::footer::{BlockHandle, Footer};
use super::hash::{HashIndex, HASH_INDEX_KEY};
use super::{Compression, BLOCK_TRAILER_LEN, FOOTER_LEN, MAX_BLOCK_LEN};
use crate::error::{ensure_within, Error, Result};
use crate::format::{
    crc32c, crc32c_extend, get_fixed32, get_varint32, get_varint64, unmask_crc, Cursor, ReadAt,
};
use crate::name::display;

/// Options for [`Table::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableReadOptions {
    /// Verify each data block's CRC the first time it is loaded (default true). The index block
    /// is always verified at open.
    pub verify_checksums: bool,
    /// Bytes of decompressed (Snappy) blocks, and of blocks read through the seam
    /// ([`Table::new_ranged`]), kept in memory; 0 disables the cache. Uncompressed blocks of
    /// the bytes held are read in place and never cached. Default 8 MiB.
    pub cache_capacity: usize,
    /// Look keys up through the hash index block when the table has one (SPEC.md 4.5; default
    /// true). A table over some bytes of a file ([`Table::new_ranged`]) uses it when they hold
    /// the hash block. Off, or without the block, `get` binary-searches the index block and a
    /// data block.
    pub hash_index: bool,
}

impl Default for TableReadOptions {
    fn default() -> Self {
        TableReadOptions {
            verify_checksums: true,
            cache_capacity: 8 << 20,
            hash_index: true,
        }
    }
}

/// The contents of a data block: borrowed from the file when stored uncompressed, or a shared
/// decompressed copy.
#[derive(Debug, Clone)]
pub enum BlockBytes<'a> {
    /// Uncompressed block, read in place from the file.
    Mapped(&'a [u8]),
    /// Decompressed block (possibly shared with the block cache).
    Cached(Arc<[u8]>),
    /// Uncompressed block read into memory through the read seam (a table over the end of a
    /// file, [`Table::new_ranged`]), shared with the block cache.
    Fetched(Arc<[u8]>),
}

impl Deref for BlockBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Mapped(b) => b,
            BlockBytes::Cached(b) | BlockBytes::Fetched(b) => b,
        }
    }
}

/// Most separator key bytes an index block may expand to (prefix compression lets a small
/// block describe long keys; this bounds the memory a hostile one can make `open` allocate).
const MAX_INDEX_KEY_BYTES: usize = 4 * MAX_BLOCK_LEN;

/// Block state bit: the block's CRC matched.
const VERIFIED: u8 = 1;
/// Block state bit: the block's restart array was validated (it depends only on the block's
/// bytes, which never change).
const PARSED: u8 = 2;
/// Block state bit: the block is stored uncompressed (its trailer's type byte is 0).
const PLAIN: u8 = 4;

/// Bytes that hold a table's whole file and can be shared with its [`TableIndex`] (a mapped
/// file): the index then reads its block in place instead of keeping a copy
/// ([`TableIndex::open_shared`]).
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// The index block's contents, with a restart point at every entry (as every writer of the
/// format makes it, SPEC.md 4.2): entry `i` starts at restart offset `i`, its key stored whole.
enum IndexBlock {
    /// In place, in the bytes of the file: `range` of `owner`.
    Shared {
        owner: SharedBytes,
        range: Range<usize>,
    },
    /// A copy: a decompressed block, one re-encoded with a restart at every entry, or the
    /// block of bytes the index cannot keep ([`TableIndex::open_tail`]).
    Owned(Box<[u8]>),
}

impl IndexBlock {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            IndexBlock::Shared { owner, range } => {
                (**owner).as_ref().get(range.clone()).unwrap_or_default()
            }
            IndexBlock::Owned(b) => b,
        }
    }
}

impl std::fmt::Debug for IndexBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexBlock::Shared { range, .. } => write!(f, "Shared({range:?})"),
            IndexBlock::Owned(b) => write!(f, "Owned({} bytes)", b.len()),
        }
    }
}

/// Data blocks per lazily allocated chunk of [`TableIndex`]'s restart-offset cache: a lookup
/// allocates the chunk of its block, not a slot for every block of the table (7,665 of them,
/// 245 KB of fresh memory, at 10M tensors).
const RUNS_CHUNK: usize = 64;

/// A small LRU of decompressed blocks keyed by block number.
#[derive(Debug, Default)]
struct BlockCache {
    capacity: usize,
    used: usize,
    tick: u64,
    map: HashMap<usize, (Arc<[u8]>, u64)>,
    lru: BTreeMap<u64, usize>,
}

impl BlockCache {
    fn get(&mut self, block: usize) -> Option<Arc<[u8]>> {
        let (bytes, t) = self.map.get_mut(&block)?;
        self.lru.remove(t);
        self.tick += 1;
        *t = self.tick;
        self.lru.insert(self.tick, block);
        Some(bytes.clone())
    }

    fn insert(&mut self, block: usize, bytes: Arc<[u8]>) {
        if bytes.len() > self.capacity || self.map.contains_key(&block) {
            return;
        }
        while self.used + bytes.len() > self.capacity {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            if let Some((b, _)) = self.map.remove(&victim) {
                self.used -= b.len();
            }
        }
        self.tick += 1;
        self.used += bytes.len();
        self.lru.insert(self.tick, block);
        self.map.insert(block, (bytes, self.tick));
    }
}

/// The validated index of a table: footer and index block (separator keys and data block
/// handles, every entry checked at open and decoded again when used), plus the per-block
/// "checksum verified" flags and the block cache.
///
/// It holds the index block alone (a copy, or the shared bytes of the whole file with
/// [`TableIndex::open_shared`]), so it can live next to the mapping it was read from; combine
/// the two with [`Table::new`]. `TableIndex` is `Send + Sync`.
#[derive(Debug)]
pub struct TableIndex {
    footer: Footer,
    opts: TableReadOptions,
    /// The index block: entry `i` (data block `i`'s separator and handle) is decoded from it
    /// on use, at restart offset `i` (every entry was checked at open).
    block: IndexBlock,
    /// Where the block's restart array starts.
    restarts_at: usize,
    /// Number of entries (data blocks).
    blocks: usize,
    /// Per data block: what is already known about it ([`VERIFIED`], [`PARSED`], [`PLAIN`]),
    /// so that later loads skip the work.
    state: Vec<AtomicU8>,
    cache: Mutex<BlockCache>,
    /// The hash index block, once the metaindex has been read (on the first lookup, so that
    /// open never reads it): `None` when the table has none.
    hash: OnceLock<Option<HashIndex>>,
    /// Per data block, once the hash index has led a lookup to it: its restart offsets and
    /// where its entries end (allocated by chunks of [`RUNS_CHUNK`] blocks, on first use).
    runs: OnceLock<Box<[RunsChunk]>>,
    /// The file (or object) the table is read from, when its reader named it
    /// ([`TableIndex::set_location`]): errors of reading its blocks say it.
    location: Option<Box<str>>,
}

/// The restart offsets of [`RUNS_CHUNK`] data blocks, allocated on first use.
type RunsChunk = OnceLock<Box<[OnceLock<BlockRuns>]>>;

/// A data block's validated restart offsets, kept in memory for hashed lookups.
#[derive(Debug)]
struct BlockRuns {
    restarts: Box<[u32]>,
    entries_end: usize,
    /// The block's handle, and where its separator and the previous block's (empty for block
    /// 0) lie in the index block: what every hashed lookup into the block checks its key
    /// against, kept here so that a lookup decodes no index entry.
    handle: BlockHandle,
    sep: Range<usize>,
    prev_sep: Range<usize>,
}

/// Most cache lines of a restart run [`touch_lines`] touches.
const TOUCH_LINES: usize = 32;

/// Reads one byte of each 64-byte line of `span` (its first [`TOUCH_LINES`] lines), so that a
/// run of entries about to be scanned is fetched from memory all at once: the scan finds each
/// entry's position from the one before, so the lines it misses on would otherwise be waited
/// for one after the other.
#[inline]
fn touch_lines(span: &[u8]) {
    let x = span
        .iter()
        .step_by(64)
        .take(TOUCH_LINES)
        .fold(0u8, |x, &b| x ^ b);
    std::hint::black_box(x);
}

/// Extent of a block and its trailer (exclusive end), if it does not overflow.
fn block_end(h: &BlockHandle) -> Option<u64> {
    h.offset
        .checked_add(h.size)?
        .checked_add(BLOCK_TRAILER_LEN as u64)
}

/// Decompresses a Snappy block, refusing to allocate more than the format can encode.
fn decompress(contents: &[u8], offset: u64) -> Result<Vec<u8>> {
    let bad = |d: String| {
        Error::corrupt(
            "block",
            offset,
            format!("corrupted compressed block contents: {d}"),
        )
    };
    if contents.is_empty() {
        return Err(bad("empty".into()));
    }
    let n = snap::raw::decompress_len(contents).map_err(|e| bad(e.to_string()))?;
    ensure_within("decompressed block length", n, MAX_BLOCK_LEN, Some(offset))?;
    if !matches!(contents.len().checked_mul(32), Some(m) if n <= m) {
        return Err(bad(format!(
            "claims {n} bytes from {} compressed bytes",
            contents.len()
        )));
    }
    let mut out = vec![0u8; n];
    let got = snap::raw::Decoder::new()
        .decompress(contents, &mut out)
        .map_err(|e| bad(e.to_string()))?;
    if got != n {
        return Err(bad(format!("decompressed to {got} bytes, header says {n}")));
    }
    Ok(out)
}

/// The block's stored bytes, type byte and stored (masked) CRC, bounds-checked against `file`,
/// which holds the file's bytes from offset `base` to its end.
fn read_raw<'f>(file: &'f [u8], base: u64, h: &BlockHandle) -> Result<(&'f [u8], u8, u32)> {
    let out_of_file = || {
        Error::truncated(
            "block",
            h.offset,
            format!(
                "truncated block read: block of {} bytes (+{BLOCK_TRAILER_LEN}) runs past the end of the {}-byte file{}",
                h.size,
                base.saturating_add(file.len() as u64),
                if base > 0 { format!(" (or before offset {base}, where the bytes read start)") } else { String::new() }
            ),
        )
    };
    let start = h
        .offset
        .checked_sub(base)
        .and_then(|o| usize::try_from(o).ok())
        .ok_or_else(out_of_file)?;
    let size = usize::try_from(h.size).map_err(|_| out_of_file())?;
    let end = start
        .checked_add(size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
        .ok_or_else(out_of_file)?;
    let all = file.get(start..end).ok_or_else(out_of_file)?;
    let (contents, trailer) = all.split_at(size);
    let stored = get_fixed32(trailer, 1).ok_or_else(out_of_file)?;
    Ok((contents, trailer[0], stored))
}

/// A checked index block ([`TableIndex::check`]).
struct CheckedIndex<'f> {
    footer: Footer,
    /// The block's contents, a restart point at every entry.
    contents: Cow<'f, [u8]>,
    /// Where `contents` lie in the bytes checked, when they are those bytes.
    in_file: Option<Range<usize>>,
    restarts_at: usize,
    blocks: usize,
}

/// Key and handle of entry `i` of an index block whose every entry is a restart point, the
/// restart array starting at `restarts_at` (`None` if the bytes do not decode).
#[inline]
fn decode_index_entry(b: &[u8], restarts_at: usize, i: usize) -> Option<(&[u8], BlockHandle)> {
    let (key, h) = locate_index_entry(b, restarts_at, i)?;
    Some((b.get(key)?, h))
}

/// [`decode_index_entry`], the key given as its range in `b`.
#[inline]
fn locate_index_entry(
    b: &[u8],
    restarts_at: usize,
    i: usize,
) -> Option<(Range<usize>, BlockHandle)> {
    let p = get_fixed32(b, restarts_at.checked_add(i.checked_mul(4)?)?)? as usize;
    let e = b.get(p..restarts_at)?;
    // Fast path: three one-byte varints (separators under 128 bytes, the common case).
    let (non_shared, value_len, at) = match *e {
        [0, k, v, ..] if (k | v) < 0x80 => (usize::from(k), usize::from(v), 3),
        _ => {
            let (_, n1) = get_varint32(e)?;
            let (k, n2) = get_varint32(e.get(n1..)?)?;
            let (v, n3) = get_varint32(e.get(n1 + n2..)?)?;
            (k as usize, v as usize, n1 + n2 + n3)
        }
    };
    let key_end = at.checked_add(non_shared)?;
    let value = e.get(key_end..key_end.checked_add(value_len)?)?;
    let (offset, n) = get_varint64(value)?;
    let (size, _) = get_varint64(value.get(n..)?)?;
    Some((p + at..p + key_end, BlockHandle { offset, size }))
}

impl TableIndex {
    /// Reads and validates the footer and index block of the table that ends `file` (the whole
    /// file, e.g. an mmap).
    ///
    /// Checks: the file holds a footer; the magic number; the index block ends exactly where the
    /// footer begins and the metaindex block ends at or before it; the index block's CRC (always,
    /// whatever the options); its structure (strictly increasing separators); every data block
    /// handle lies before the metaindex block, after the previous data block, and is at most
    /// [`MAX_BLOCK_LEN`] long. Data blocks are not touched: the cost is O(size of the index
    /// block). Every failure is [`Error::Corrupt`] (or [`Error::ChecksumMismatch`] /
    /// [`Error::LimitExceeded`]) with the file offset.
    pub fn open(file: &[u8], opts: &TableReadOptions) -> Result<TableIndex> {
        Self::open_tail(file, 0, opts)
    }

    /// [`TableIndex::open`] on the end of a file only: `tail` holds the file's bytes from
    /// offset `base` to its end (for instance from the first data block on, read without the
    /// records before it). Offsets in errors and handles stay absolute. The index keeps a copy
    /// of the index block (of its bytes only: not of the tail).
    pub fn open_tail(tail: &[u8], base: u64, opts: &TableReadOptions) -> Result<TableIndex> {
        let c = Self::check(tail, base)?;
        let block = IndexBlock::Owned(c.contents.into_owned().into_boxed_slice());
        Ok(Self::assemble(
            c.footer,
            block,
            c.restarts_at,
            c.blocks,
            opts,
        ))
    }

    /// [`TableIndex::open`] of the table that ends the bytes `file` holds, keeping `file`
    /// (shared, e.g. a mapped file's) to read the index block in place: nothing of the block
    /// is copied, so an open costs the block's checksum and one pass over its entries, and no
    /// memory that grows with it (a compressed index block, or one without a restart point at
    /// every entry, is still decoded into a copy). Same checks as [`TableIndex::open`].
    pub fn open_shared(file: SharedBytes, opts: &TableReadOptions) -> Result<TableIndex> {
        let c = Self::check((*file).as_ref(), 0)?;
        let block = match c.in_file {
            Some(range) => IndexBlock::Shared {
                owner: file.clone(),
                range,
            },
            None => IndexBlock::Owned(c.contents.into_owned().into_boxed_slice()),
        };
        Ok(Self::assemble(
            c.footer,
            block,
            c.restarts_at,
            c.blocks,
            opts,
        ))
    }

    fn assemble(
        footer: Footer,
        block: IndexBlock,
        restarts_at: usize,
        blocks: usize,
        opts: &TableReadOptions,
    ) -> TableIndex {
        let state = (0..blocks).map(|_| AtomicU8::new(0)).collect();
        TableIndex {
            footer,
            opts: *opts,
            block,
            restarts_at,
            blocks,
            state,
            cache: Mutex::new(BlockCache {
                capacity: opts.cache_capacity,
                ..BlockCache::default()
            }),
            hash: OnceLock::new(),
            runs: OnceLock::new(),
            location: None,
        }
    }

    /// Reads and checks the footer and the index block of the table ending `tail` (the file's
    /// bytes from `base` on): the checks of [`TableIndex::open`], every entry visited once.
    /// The block is returned as stored when every entry is a restart point (LevelDB's and
    /// TensorFlow's index blocks, restart interval 1), else re-encoded so.
    fn check(tail: &[u8], base: u64) -> Result<CheckedIndex<'_>> {
        let file = tail;
        let len = file.len();
        if len < FOOTER_LEN {
            return Err(Error::truncated(
                "table",
                0,
                format!("file is too short to be a table ({len} bytes, the footer alone is {FOOTER_LEN})"),
            ));
        }
        let footer_start = len - FOOTER_LEN;
        let fs = base.saturating_add(footer_start as u64);
        let footer = Footer::decode(&file[footer_start..], fs)?;
        let (meta, idx) = (footer.metaindex, footer.index);

        if block_end(&idx) != Some(fs) {
            return Err(Error::corrupt(
                "footer",
                fs,
                format!(
                    "index block handle (offset {}, size {}) does not end where the footer begins ({fs})",
                    idx.offset, idx.size
                ),
            ));
        }
        if !matches!(block_end(&meta), Some(e) if e <= idx.offset) {
            return Err(Error::corrupt(
                "footer",
                fs,
                format!(
                    "metaindex block handle (offset {}, size {}) overlaps the index block at {}",
                    meta.offset, meta.size, idx.offset
                ),
            ));
        }
        for (what, h) in [
            ("index block length", idx),
            ("metaindex block length", meta),
        ] {
            ensure_within(what, h.size, MAX_BLOCK_LEN, Some(h.offset))?;
        }

        // The index block: always checksummed.
        let (raw, ty, stored) = read_raw(file, base, &idx)?;
        verify_crc(&idx, raw, ty, stored)?;
        let contents: Cow<'_, [u8]> = match Compression::from_type_byte(ty) {
            Some(Compression::None) => Cow::Borrowed(raw),
            Some(Compression::Snappy) => Cow::Owned(decompress(raw, idx.offset)?),
            None => return Err(bad_type(idx.offset, ty)),
        };
        let exact = matches!(contents, Cow::Borrowed(_));
        let lay = Layout::parse(&contents, idx.offset, exact, "index block")?;
        // One pass over the entries, checking each (this is most of the cost of opening a
        // file, so it avoids the general-purpose block cursor); nothing is kept but the
        // count: lookups decode an entry from the block when they use it.
        let mut prev: Vec<u8> = Vec::new();
        let mut key: Vec<u8> = Vec::new();
        let mut key_bytes = 0usize;
        let mut prev_end: Option<u64> = None;
        let mut n = 0usize;
        scan_entries(&contents, &lay, |shared, suffix, value, pos| {
            if shared > prev.len() {
                return Err(lay.error(
                    pos,
                    format!(
                        "bad entry in block: shares {shared} bytes with a previous key of {} bytes",
                        prev.len()
                    ),
                ));
            }
            key.clear();
            key.extend_from_slice(&prev[..shared]);
            key.extend_from_slice(suffix);
            key_bytes = key_bytes.saturating_add(key.len());
            ensure_within(
                "index block key bytes",
                key_bytes,
                MAX_INDEX_KEY_BYTES,
                Some(idx.offset),
            )?;
            if n > 0 && !key_lt(&prev, &key) {
                return Err(lay.error(pos, "keys not strictly increasing"));
            }
            let bad = |d: String| {
                Error::corrupt(
                    "index entry",
                    idx.offset,
                    format!("entry {n} (separator {}): {d}", display(&key)),
                )
            };
            let mut vc = Cursor::new(value, idx.offset);
            let h = BlockHandle::decode(&mut vc)
                .ok_or_else(|| bad("value is not a block handle".into()))?;
            if vc.remaining() != 0 {
                return Err(bad(format!(
                    "{} bytes after the block handle",
                    vc.remaining()
                )));
            }
            ensure_within("data block length", h.size, MAX_BLOCK_LEN, Some(h.offset))?;
            if let Some(pe) = prev_end {
                if h.offset < pe {
                    return Err(bad(format!(
                        "data block at {} overlaps or precedes the previous block (which ends at {pe})",
                        h.offset
                    )));
                }
            }
            let end = block_end(&h).filter(|&e| e <= meta.offset).ok_or_else(|| {
                bad(format!(
                    "data block (offset {}, size {}) runs past the metaindex block at {}",
                    h.offset, h.size, meta.offset
                ))
            })?;
            prev_end = Some(end);
            std::mem::swap(&mut prev, &mut key);
            n += 1;
            Ok(())
        })?;
        if n == lay.restarts() || (n == 0 && lay.restarts() <= 1) {
            // Every entry is a restart point (or there is none; the empty block has one
            // restart point, at 0).
            let in_file = match contents {
                Cow::Borrowed(raw) => idx
                    .offset
                    .checked_sub(base)
                    .and_then(|o| usize::try_from(o).ok())
                    .map(|at| at..at + raw.len()),
                Cow::Owned(_) => None,
            };
            return Ok(CheckedIndex {
                footer,
                restarts_at: lay.entries_end(),
                blocks: n,
                contents,
                in_file,
            });
        }
        // Prefix-compressed entries (a writer with a longer restart interval): the same
        // entries again, each a restart point, so that entry `i` is found in O(1).
        let mut b = BlockBuilder::new(1);
        scan_entries(&contents, &lay, |shared, suffix, value, _| {
            key.clear();
            key.extend_from_slice(&prev[..shared.min(prev.len())]);
            key.extend_from_slice(suffix);
            b.add(&key, value);
            std::mem::swap(&mut prev, &mut key);
            Ok(())
        })?;
        let rebuilt = b.finish().to_vec();
        let lay = Layout::parse(&rebuilt, idx.offset, false, "index block")?;
        Ok(CheckedIndex {
            footer,
            restarts_at: lay.entries_end(),
            blocks: n,
            contents: Cow::Owned(rebuilt),
            in_file: None,
        })
    }

    /// Names the file (or object) the table is read from: errors of reading its blocks
    /// (checksums, structure) then say where, as every error about a file's bytes must.
    pub fn set_location(&mut self, location: &str) {
        self.location = Some(location.into());
    }

    /// Number of data blocks.
    pub fn data_blocks(&self) -> usize {
        self.blocks
    }

    /// Separator key and handle of data block `i`, decoded from the index block (checked at
    /// open; should the bytes have changed since, which the file's contract rules out, an
    /// empty key and an empty handle, never a panic).
    ///
    /// # Panics
    /// If `i >= self.data_blocks()`.
    #[inline]
    fn entry(&self, i: usize) -> (&[u8], BlockHandle) {
        assert!(
            i < self.blocks,
            "data block {i} of a table of {} data blocks",
            self.blocks
        );
        let b = self.block.bytes();
        decode_index_entry(b, self.restarts_at, i)
            .unwrap_or((&[], BlockHandle { offset: 0, size: 0 }))
    }

    /// Handle of data block `i`.
    ///
    /// # Panics
    /// If `i >= self.data_blocks()`.
    pub fn block_handle(&self, i: usize) -> BlockHandle {
        self.locate(i).1
    }

    /// [`TableIndex::entry`], the separator given as its range in the index block.
    fn locate(&self, i: usize) -> (Range<usize>, BlockHandle) {
        assert!(
            i < self.blocks,
            "data block {i} of a table of {} data blocks",
            self.blocks
        );
        locate_index_entry(self.block.bytes(), self.restarts_at, i)
            .unwrap_or((0..0, BlockHandle { offset: 0, size: 0 }))
    }

    /// The restart-offset cache slot of data block `i < blocks`.
    fn runs_slot(&self, i: usize) -> &OnceLock<BlockRuns> {
        let chunks = self.runs.get_or_init(|| {
            (0..self.blocks.div_ceil(RUNS_CHUNK))
                .map(|_| OnceLock::new())
                .collect()
        });
        let all = chunks[i / RUNS_CHUNK]
            .get_or_init(|| (0..RUNS_CHUNK).map(|_| OnceLock::new()).collect());
        &all[i % RUNS_CHUNK]
    }

    /// Separator key of data block `i` from the index (>= every key of the block, < every key of
    /// later blocks).
    ///
    /// # Panics
    /// If `i >= self.data_blocks()`.
    pub fn separator(&self, i: usize) -> &[u8] {
        self.entry(i).0
    }

    /// File offset of the first data block, if there is one.
    pub fn first_data_offset(&self) -> Option<u64> {
        (self.blocks > 0).then(|| self.block_handle(0).offset)
    }

    /// The footer.
    pub fn footer(&self) -> &Footer {
        &self.footer
    }

    /// The options the index was opened with.
    pub fn options(&self) -> &TableReadOptions {
        &self.opts
    }

    /// Number of the data block that would hold `key`: the first whose separator is >= key.
    pub(crate) fn find_block(&self, key: &[u8]) -> usize {
        let (mut lo, mut hi) = (0, self.blocks);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if key_lt(self.separator(mid), key) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
        // A panic while holding the lock cannot leave the cache inconsistent in a way that
        // matters (worst case a slightly wrong byte count), so recover from poisoning.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The index a [`Table`] uses: its own, or one owned elsewhere.
#[derive(Debug)]
enum IndexRef<'a> {
    Owned(Box<TableIndex>),
    Borrowed(&'a TableIndex),
}

impl Deref for IndexRef<'_> {
    type Target = TableIndex;
    fn deref(&self) -> &TableIndex {
        match self {
            IndexRef::Owned(b) => b,
            IndexRef::Borrowed(r) => r,
        }
    }
}

/// Figures of a table's blocks ([`Table::figures`]): what `stat` reports of a native index or
/// a TensorFlow `.index`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableFigures {
    /// Number of data blocks.
    pub data_blocks: u64,
    /// Bytes of the data blocks as stored (compressed or not), trailers excluded.
    pub stored_bytes: u64,
    /// Bytes of the data blocks once decompressed.
    pub raw_bytes: u64,
    /// How many data blocks are snappy-compressed.
    pub snappy_blocks: u64,
    /// File offset of the first data block (where the index begins).
    pub first_data_offset: u64,
    /// Whether the table has the hash index block (SPEC.md 4.5).
    pub hash_index: bool,
}

impl TableFigures {
    /// Every block that carries its own CRC32C (what `verify` counts): the data blocks, the
    /// metaindex block, the index block and, when present, the hash index block.
    pub fn checksummed_blocks(&self) -> u64 {
        self.data_blocks + 2 + u64::from(self.hash_index)
    }

    /// How the data blocks are compressed: `none`, `snappy`, or `snappy (some blocks)`.
    pub fn compression(&self) -> &'static str {
        match self.snappy_blocks {
            0 => "none",
            k if k == self.data_blocks => "snappy",
            _ => "snappy (some blocks)",
        }
    }
}

/// An open table: the file bytes and their validated [`TableIndex`]; data blocks are read on
/// demand.
///
/// `Table` is `Send + Sync`; lookups from several threads share the block cache.
#[derive(Debug)]
pub struct Table<'a> {
    /// The file's bytes from offset `base` to its end.
    file: &'a [u8],
    base: u64,
    /// Where the blocks before `base` are read from, if anywhere.
    rest: Option<&'a dyn ReadAt>,
    /// The source of `file` to tell, as a scan passes them, that the data blocks behind it
    /// will not be read again soon ([`Table::releasing_behind_scans`]).
    scanned: Option<&'a dyn ReadAt>,
    index: IndexRef<'a>,
}

/// How many bytes of data blocks a scan passes before it releases them
/// ([`Table::releasing_behind_scans`]): one `madvise` per MiB, so a scan of a small index
/// makes none and a 145 MiB index keeps about 1 MiB of its pages resident.
const RELEASE_EVERY: u64 = 1 << 20;

impl<'a> Table<'a> {
    /// Opens the table that ends `file` (the whole file, e.g. an mmap); see [`TableIndex::open`]
    /// for what is checked. Costs O(size of the index block).
    pub fn open(file: &'a [u8], opts: TableReadOptions) -> Result<Table<'a>> {
        let index = TableIndex::open(file, &opts)?;
        Ok(Table {
            file,
            base: 0,
            rest: None,
            scanned: None,
            index: IndexRef::Owned(Box::new(index)),
        })
    }

    /// A table over `file` using an index already read from that same file (cheap). With an
    /// index from another file, reads fail or return garbage but never panic.
    pub fn new(file: &'a [u8], index: &'a TableIndex) -> Table<'a> {
        Self::new_tail(file, 0, index)
    }

    /// [`Table::new`] over the end of a file: `tail` holds its bytes from offset `base` on, as
    /// given to [`TableIndex::open_tail`].
    pub fn new_tail(tail: &'a [u8], base: u64, index: &'a TableIndex) -> Table<'a> {
        Table {
            file: tail,
            base,
            rest: None,
            scanned: None,
            index: IndexRef::Borrowed(index),
        }
    }

    /// [`Table::new_tail`] over a file read by positions: `held` holds its bytes from offset
    /// `base` on (what the open read, [`TableIndex::open_tail`]), and a block before them is
    /// read from `rest` (one read), checked, and kept in the index's block cache
    /// ([`TableReadOptions::cache_capacity`]). The hash index block is used for lookups when
    /// `held` holds it (a hash block read whole for one lookup would cost more than the one
    /// data block a binary search reads); both ways give the same answers.
    pub fn new_ranged(
        held: &'a [u8],
        base: u64,
        rest: &'a dyn ReadAt,
        index: &'a TableIndex,
    ) -> Table<'a> {
        Table {
            file: held,
            base,
            rest: Some(rest),
            scanned: None,
            index: IndexRef::Borrowed(index),
        }
    }

    /// A view of this table sharing its index.
    fn view(&self) -> Table<'_> {
        Table {
            file: self.file,
            base: self.base,
            rest: self.rest,
            scanned: self.scanned,
            index: IndexRef::Borrowed(&self.index),
        }
    }

    /// This table, its iterators telling `source` (the file whose bytes the table holds, from
    /// offset 0) to [`release`](ReadAt::release) the data blocks they have passed, a MiB at a
    /// time: a scan of a mapped file's whole index then keeps about a MiB of it resident
    /// instead of every page it read. Lookups are not affected.
    pub fn releasing_behind_scans(mut self, source: &'a dyn ReadAt) -> Table<'a> {
        self.scanned = Some(source);
        self
    }

    /// The block of handle `h` and its trailer (type byte, stored CRC): from the bytes held,
    /// else read through the seam.
    fn raw(&self, h: &BlockHandle) -> Result<(Cow<'a, [u8]>, u8, u32)> {
        match self.rest {
            Some(rest) if h.offset < self.base => {
                let end = block_end(h).filter(|&e| e <= rest.len()).ok_or_else(|| {
                    Error::truncated(
                        "block",
                        h.offset,
                        format!(
                            "truncated block read: block of {} bytes (+{BLOCK_TRAILER_LEN}) runs past the end of the {}-byte file",
                            h.size,
                            rest.len()
                        ),
                    )
                })?;
                let mut all = rest.read(h.offset..end)?;
                let size = all.len() - BLOCK_TRAILER_LEN;
                let ty = all[size];
                let stored = get_fixed32(&all, size + 1).unwrap_or(0);
                all.truncate(size);
                Ok((Cow::Owned(all), ty, stored))
            }
            _ => {
                let (c, ty, stored) = read_raw(self.file, self.base, h)?;
                Ok((Cow::Borrowed(c), ty, stored))
            }
        }
    }

    /// Whether the bytes held hold the block of handle `h` (always, for a table over a
    /// whole file).
    fn holds(&self, h: &BlockHandle) -> bool {
        self.rest.is_none() || h.offset >= self.base
    }

    /// The table's index.
    pub fn index(&self) -> &TableIndex {
        &self.index
    }

    /// Number of data blocks.
    pub fn data_blocks(&self) -> usize {
        self.index.data_blocks()
    }

    /// Handle of data block `i`.
    ///
    /// # Panics
    /// If `i >= self.data_blocks()`.
    pub fn block_handle(&self, i: usize) -> BlockHandle {
        self.index.block_handle(i)
    }

    /// File offset of the first data block, if there is one.
    pub fn first_data_offset(&self) -> Option<u64> {
        self.index.first_data_offset()
    }

    /// The footer.
    pub fn footer(&self) -> &Footer {
        self.index.footer()
    }

    /// `r`, its error said to be in the table's file when the index names one.
    #[inline]
    fn located<T>(&self, r: Result<T>) -> Result<T> {
        match (r, &self.index.location) {
            (Err(e), Some(at)) => Err(located_error(e, at)),
            (r, _) => r,
        }
    }

    /// Figures of the table's blocks (what `stat` reports): every data block is read (and
    /// released behind, as a scan does), so this costs a pass over the index.
    pub fn figures(&self) -> Result<TableFigures> {
        let mut f = TableFigures {
            data_blocks: self.data_blocks() as u64,
            first_data_offset: self.first_data_offset().unwrap_or(0),
            hash_index: self.has_hash_index()?,
            ..TableFigures::default()
        };
        let mut unreleased = f.first_data_offset;
        for i in 0..self.data_blocks() {
            let h = self.block_handle(i);
            let b = self.load_block(i)?;
            f.stored_bytes = f.stored_bytes.saturating_add(h.size);
            f.raw_bytes = f.raw_bytes.saturating_add(b.len() as u64);
            if matches!(b, BlockBytes::Cached(_)) {
                f.snappy_blocks += 1;
            }
            if let Some(source) = self.scanned {
                if h.offset.saturating_sub(unreleased) >= RELEASE_EVERY {
                    source.release(unreleased..h.offset);
                    unreleased = h.offset;
                }
            }
        }
        Ok(f)
    }

    /// Loads data block `i`: in place if uncompressed, else decompressed (through the cache).
    /// Its CRC is verified on first load when `verify_checksums` is set. Errors name the file
    /// when the index was given one ([`TableIndex::set_location`]).
    pub fn load_block(&self, i: usize) -> Result<BlockBytes<'a>> {
        self.located(self.load_block_in(i))
    }

    /// Loads data block `i`: in place if uncompressed, else decompressed (through the cache).
    /// Its CRC is verified on first load when `verify_checksums` is set.
    fn load_block_in(&self, i: usize) -> Result<BlockBytes<'a>> {
        let ix = &*self.index;
        if i >= ix.blocks {
            return Err(Error::InvalidArgument(format!(
                "data block {i} does not exist (the table has {})",
                ix.blocks
            )));
        }
        self.load_block_at(i, ix.block_handle(i))
    }

    /// [`Table::load_block_in`] of block `i < data_blocks()`, whose handle `h` the caller
    /// has decoded.
    fn load_block_at(&self, i: usize, h: BlockHandle) -> Result<BlockBytes<'a>> {
        let ix = &*self.index;
        let state = &ix.state[i];
        let known = state.load(Ordering::Acquire);
        let verify = ix.opts.verify_checksums && known & VERIFIED == 0;
        if known & PLAIN != 0 && !verify {
            // Fast path: an uncompressed block seen before; the trailer need not be read again.
            // (The handle was bounds-checked against the file when the block was first read.)
            let contents = h
                .offset
                .checked_sub(self.base)
                .and_then(|o| usize::try_from(o).ok())
                .zip(usize::try_from(h.size).ok())
                .and_then(|(o, n)| self.file.get(o..o.checked_add(n)?));
            if let Some(c) = contents {
                return Ok(BlockBytes::Mapped(c));
            }
        }
        if !self.holds(&h) {
            return self.load_fetched(i, &h, verify);
        }
        let (contents, ty, stored) = read_raw(self.file, self.base, &h)?;
        match Compression::from_type_byte(ty) {
            Some(Compression::None) => {
                if verify {
                    verify_crc(&h, contents, ty, stored)?;
                    state.fetch_or(VERIFIED | PLAIN, Ordering::AcqRel);
                } else {
                    state.fetch_or(PLAIN, Ordering::AcqRel);
                }
                Ok(BlockBytes::Mapped(contents))
            }
            Some(Compression::Snappy) => {
                let caching = ix.opts.cache_capacity > 0;
                if caching {
                    if let Some(b) = ix.lock_cache().get(i) {
                        return Ok(BlockBytes::Cached(b));
                    }
                }
                if verify {
                    verify_crc(&h, contents, ty, stored)?;
                    state.fetch_or(VERIFIED, Ordering::AcqRel);
                }
                let bytes: Arc<[u8]> = decompress(contents, h.offset)?.into();
                if caching {
                    ix.lock_cache().insert(i, bytes.clone());
                }
                Ok(BlockBytes::Cached(bytes))
            }
            None => {
                if verify {
                    verify_crc(&h, contents, ty, stored)?;
                }
                Err(bad_type(h.offset, ty))
            }
        }
    }

    /// [`Table::load_block`] of a block outside the bytes held: from the block cache, else
    /// read through the seam, checked (CRC when `verify`), decompressed, and cached.
    fn load_fetched(&self, i: usize, h: &BlockHandle, verify: bool) -> Result<BlockBytes<'a>> {
        let ix = &*self.index;
        let state = &ix.state[i];
        let caching = ix.opts.cache_capacity > 0;
        if caching {
            if let Some(b) = ix.lock_cache().get(i) {
                return Ok(if state.load(Ordering::Acquire) & PLAIN != 0 {
                    BlockBytes::Fetched(b)
                } else {
                    BlockBytes::Cached(b)
                });
            }
        }
        let (contents, ty, stored) = self.raw(h)?;
        if verify {
            verify_crc(h, &contents, ty, stored)?;
            state.fetch_or(VERIFIED, Ordering::AcqRel);
        }
        let out = match Compression::from_type_byte(ty) {
            Some(Compression::None) => {
                state.fetch_or(PLAIN, Ordering::AcqRel);
                BlockBytes::Fetched(Arc::from(contents.into_owned()))
            }
            Some(Compression::Snappy) => {
                BlockBytes::Cached(decompress(&contents, h.offset)?.into())
            }
            None => return Err(bad_type(h.offset, ty)),
        };
        if caching {
            if let BlockBytes::Fetched(b) | BlockBytes::Cached(b) = &out {
                ix.lock_cache().insert(i, b.clone());
            }
        }
        Ok(out)
    }

    /// Parses the layout of data block `i`, which starts at `base`, held in `bytes`.
    fn layout_at(&self, i: usize, base: u64, bytes: &BlockBytes<'_>) -> Result<Layout> {
        let exact = matches!(bytes, BlockBytes::Mapped(_) | BlockBytes::Fetched(_));
        let state = &self.index.state[i];
        if state.load(Ordering::Acquire) & PARSED != 0 {
            return Layout::trusted(bytes, base, exact, "data block");
        }
        let lay = Layout::parse(bytes, base, exact, "data block")?;
        state.fetch_or(PARSED, Ordering::AcqRel);
        Ok(lay)
    }

    /// Checks every block's CRC32C: each data block, the metaindex and the index block, and the
    /// hash index block with its slots when there is one (the rules are the private
    /// `verify_all_blocks_in`'s, below). Returns the number of blocks checked (data blocks + 2,
    /// + 1 with a hash index block). Errors name the file when the index was given one.
    pub fn verify_all_blocks(&self) -> Result<u64> {
        self.located(self.verify_all_blocks_in())
    }

    /// Checks the CRC of every data block, the metaindex block, the index block and the hash
    /// index block if there is one (its trailer CRC, over the whole block), whatever the options
    /// say, and remembers the data blocks as verified; with a hash index block, also
    /// [`Table::check_hash_index`]. Returns the number of blocks checked (data blocks + 2, + 1
    /// with a hash index block).
    fn verify_all_blocks_in(&self) -> Result<u64> {
        let ix = &*self.index;
        for i in 0..ix.blocks {
            let h = ix.block_handle(i);
            let (contents, ty, stored) = self.raw(&h)?;
            verify_crc(&h, &contents, ty, stored)?;
            ix.state[i].fetch_or(VERIFIED, Ordering::AcqRel);
        }
        for h in [ix.footer.metaindex, ix.footer.index] {
            let (contents, ty, stored) = self.raw(&h)?;
            verify_crc(&h, &contents, ty, stored)?;
        }
        let mut n = ix.blocks as u64 + 2;
        if let Some(hx) = self.hash_index()? {
            let (contents, ty, stored) = self.raw(&hx.handle)?;
            verify_crc(&hx.handle, &contents, ty, stored)?;
            n += 1;
            self.check_hash_index()?;
        }
        Ok(n)
    }

    /// Looks `key` up; if present, calls `f` with its value and the absolute file offset of the
    /// data block holding it, and returns `Some` of `f`'s result. Through the hash index block
    /// when the table has one and the options allow, else by [`Table::get_by_search`]. Does not
    /// allocate for uncompressed blocks and keys up to 128 bytes. Errors name the file when the
    /// index was given one.
    pub fn get<R>(&self, key: &[u8], f: impl FnOnce(&[u8], u64) -> R) -> Result<Option<R>> {
        self.located(self.get_in(key, f))
    }

    /// Looks `key` up; if present, calls `f` with its value and the absolute file offset of the
    /// data block holding it (for error messages), and returns `Some` of `f`'s result. (If `f`
    /// itself returns a `Result`, `Option::transpose` flattens the two.)
    ///
    /// Does not allocate for uncompressed blocks and keys up to 128 bytes.
    ///
    /// With the hash index block (SPEC.md 4.5) and [`TableReadOptions::hash_index`], the key is
    /// found through it: the key is always compared with the entry's, and a slot naming a block
    /// or restart point that does not exist, or an entry outside its block's separator range,
    /// is an error. Without it, two binary searches ([`Table::get_by_search`]).
    fn get_in<R>(&self, key: &[u8], f: impl FnOnce(&[u8], u64) -> R) -> Result<Option<R>> {
        if self.index.opts.hash_index {
            if let Some(hx) = self.hash_index()? {
                if self.holds(&hx.handle) {
                    return self.get_hashed(hx, key, f);
                }
            }
        }
        self.get_by_search(key, f)
    }

    /// [`Table::get`] by binary search of the index block and the data block's restart points,
    /// whether or not the table has a hash index.
    pub fn get_by_search<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        self.located(self.get_by_search_in(key, f))
    }

    fn get_by_search_in<R>(
        &self,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        let i = self.index.find_block(key);
        if i >= self.index.blocks {
            return Ok(None);
        }
        let h = self.index.block_handle(i);
        let bytes = self.located(self.load_block_at(i, h))?;
        let lay = self.layout_at(i, h.offset, &bytes)?;
        let mut cur = EntryCursor::new();
        if cur.seek(&bytes, &lay, key)? && cur.key() == key {
            Ok(Some(f(cur.value(&bytes), h.offset)))
        } else {
            Ok(None)
        }
    }

    /// The hash index block, reading the metaindex the first time (`None` if there is none).
    fn hash_index(&self) -> Result<Option<&HashIndex>> {
        if let Some(h) = self.index.hash.get() {
            return Ok(h.as_ref());
        }
        let h = self.read_hash_index()?;
        if h.is_none() && self.rest.is_some() {
            // Perhaps only outside the bytes this table holds: not remembered, so that a
            // table over more of the file (verify's) finds it.
            return Ok(None);
        }
        Ok(self.index.hash.get_or_init(|| h).as_ref())
    }

    /// Reads the metaindex (checking its CRC) and, if it names a hash index block, validates
    /// that block's handle (between the last data block and the metaindex, stored
    /// uncompressed) and header ([`HashIndex::parse`]). Other metaindex entries are ignored.
    fn read_hash_index(&self) -> Result<Option<HashIndex>> {
        let ix = &*self.index;
        let meta = ix.footer.metaindex;
        if !self.holds(&meta) {
            return Ok(None);
        }
        let (raw, ty, stored) = read_raw(self.file, self.base, &meta)?;
        verify_crc_of("metaindex block", &meta, raw, ty, stored)?;
        let contents: Cow<'_, [u8]> = match Compression::from_type_byte(ty) {
            Some(Compression::None) => Cow::Borrowed(raw),
            Some(Compression::Snappy) => Cow::Owned(decompress(raw, meta.offset)?),
            None => return Err(bad_type(meta.offset, ty)),
        };
        let block = Block::parse(&contents, meta.offset)?;
        let mut it = block.iter();
        it.seek(HASH_INDEX_KEY)?;
        if !it.valid() || it.key() != HASH_INDEX_KEY {
            return Ok(None);
        }
        let bad = |d: String| Error::corrupt("metaindex block", meta.offset, d);
        let mut vc = Cursor::new(it.value(), meta.offset);
        let h = BlockHandle::decode(&mut vc)
            .filter(|_| vc.remaining() == 0)
            .ok_or_else(|| bad("the paramdex.hash entry is not a block handle".into()))?;
        let data_end = ix
            .blocks
            .checked_sub(1)
            .and_then(|last| block_end(&ix.block_handle(last)))
            .unwrap_or(0);
        if h.offset < data_end || !matches!(block_end(&h), Some(e) if e <= meta.offset) {
            return Err(bad(format!(
                "hash index block (offset {}, size {}) is not between the data blocks (which end at {data_end}) and the metaindex at {}",
                h.offset, h.size, meta.offset
            )));
        }
        if !self.holds(&h) {
            return Ok(None);
        }
        let (raw, ty, _) = read_raw(self.file, self.base, &h)?;
        if ty != Compression::None.type_byte() {
            return Err(bad(format!(
                "hash index block stored with block type {ty}: it must be uncompressed (0)"
            )));
        }
        HashIndex::parse(raw, h).map(Some)
    }

    /// The bytes of the hash block (checked by `read_hash_index`).
    fn hash_contents(&self, hx: &HashIndex) -> Result<&'a [u8]> {
        Ok(read_raw(self.file, self.base, &hx.handle)?.0)
    }

    fn get_hashed<R>(
        &self,
        hx: &HashIndex,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        let contents = self.hash_contents(hx)?;
        let ix = &*self.index;
        let mut f = Some(f);
        let mut out = None;
        hx.lookup(contents, key, ix.opts.verify_checksums, |c| {
            if c.block >= ix.blocks {
                return Err(Error::corrupt(
                    "hash index block",
                    hx.handle.offset,
                    format!(
                        "a slot names data block {}, but the table has {}",
                        c.block, ix.blocks
                    ),
                ));
            }
            let (bytes, runs) = self.block_runs(c.block)?;
            let h = runs.handle;
            let Some(&start) = runs.restarts.get(c.restart) else {
                return Err(Error::corrupt(
                    "hash index block",
                    hx.handle.offset,
                    format!(
                        "a slot names restart point {} of data block {} (at {}), which has {}",
                        c.restart,
                        c.block,
                        h.offset,
                        runs.restarts.len()
                    ),
                ));
            };
            let end = runs
                .restarts
                .get(c.restart + 1)
                .map_or(runs.entries_end, |&r| r as usize);
            touch_lines(bytes.get(start as usize..end).unwrap_or_default());
            let lay = Layout::known(
                runs.entries_end,
                runs.restarts.len(),
                h.offset,
                matches!(bytes, BlockBytes::Mapped(_)),
                "data block",
            );
            let Some((vs, ve)) = find_in_span(&bytes, &lay, start as usize, end, key)? else {
                return Ok(false);
            };
            // The entry must be where a binary search finds it: in this block's separator
            // range, so that both paths give the same answer.
            let seps = ix.block.bytes();
            let sep = seps.get(runs.sep.clone()).unwrap_or_default();
            let prev = seps.get(runs.prev_sep.clone()).unwrap_or_default();
            let above_prev = c.block == 0 || key_lt(prev, key);
            if !above_prev || key_lt(sep, key) {
                return Err(Error::corrupt(
                    "hash index block",
                    hx.handle.offset,
                    format!(
                        "a slot names key {} in data block {} (at {}), outside that block's separator range",
                        display(key),
                        c.block,
                        h.offset
                    ),
                ));
            }
            if let Some(f) = f.take() {
                out = Some(f(&bytes[vs..ve], h.offset));
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Data block `i < data_blocks()` loaded, and its restart offsets, handle and the
    /// separators around it: decoded from the index, validated and kept the first time.
    fn block_runs(&self, i: usize) -> Result<(BlockBytes<'a>, &BlockRuns)> {
        let ix = &*self.index;
        let slot = ix.runs_slot(i);
        if let Some(r) = slot.get() {
            return Ok((self.located(self.load_block_at(i, r.handle))?, r));
        }
        let (sep, h) = ix.locate(i);
        let prev_sep = match i.checked_sub(1) {
            Some(p) => ix.locate(p).0,
            None => 0..0,
        };
        let bytes = self.located(self.load_block_at(i, h))?;
        let lay = self.layout_at(i, h.offset, &bytes)?;
        let runs = BlockRuns {
            restarts: lay.restart_offsets(&bytes)?.into_boxed_slice(),
            entries_end: lay.entries_end(),
            handle: h,
            sep,
            prev_sep,
        };
        Ok((bytes, slot.get_or_init(|| runs)))
    }

    /// Whether the table has a hash index block (reads the metaindex the first time).
    pub fn has_hash_index(&self) -> Result<bool> {
        Ok(self.hash_index()?.is_some())
    }

    /// Checks the hash index block against the table, if there is one: every page checksum, and
    /// that it maps every key to the entry a binary search finds. Returns the number of keys
    /// checked (0 without the block). Errors name the file when the index was given one.
    pub fn check_hash_index(&self) -> Result<u64> {
        self.located(self.check_hash_index_in())
    }

    /// Checks the hash index block against the table, if there is one: every page checksum,
    /// and that it maps every key of the table to the entry a binary search finds, and nothing
    /// else (as many occupied slots as entries). Returns the number of keys checked (0 without
    /// the block). O(entries); `verify` runs it.
    fn check_hash_index_in(&self) -> Result<u64> {
        let Some(hx) = self.hash_index()? else {
            return Ok(0);
        };
        let contents = self.hash_contents(hx)?;
        // Every page's checksum first: the slots read below are then the written ones.
        let occupied = hx.occupied(contents)?;
        let blocks = self.index.blocks;
        let bad = |d: String| Error::corrupt("hash index block", hx.handle.offset, d);
        // Each key must have, in its probe sequence before the first empty slot, a slot naming
        // its own block and restart run with its tag: a lookup then reaches that run and finds
        // the key there (the scan below decoded every run with the lookup's rules, and keys are
        // unique, so an earlier candidate's run cannot hold it). That is what a lookup of every
        // key would check, without decoding a run per key (verify's cost: BENCHMARKS.md).
        let mut restarts = vec![0usize; blocks];
        let mut n = 0u64;
        let mut it = self.iter();
        while it.next()? {
            let (key, at) = (it.key(), it.block_offset());
            let found = match it.position() {
                Some((block, run, in_block)) => {
                    if let Some(r) = restarts.get_mut(block) {
                        *r = in_block;
                    }
                    hx.has_slot(contents, key, block, run)?
                }
                None => false,
            };
            if !found {
                return Err(bad(format!(
                    "key {} (in the data block at {at}) is not found through the hash index",
                    display(key)
                )));
            }
            n += 1;
        }
        // Every other candidate a lookup may meet must name a run that exists (else that lookup
        // fails where this check passed): the scan visited every block.
        hx.check_slots(contents, |block, run| {
            restarts.get(block).is_some_and(|&r| run < r)
        })?;
        if occupied != n {
            return Err(bad(format!(
                "{occupied} occupied slots for the table's {n} keys"
            )));
        }
        Ok(n)
    }

    /// An unpositioned iterator over all entries.
    pub fn iter(&self) -> TableIter<'_> {
        self.view().into_iter_owned()
    }

    /// An unpositioned iterator over all entries that owns this table (view).
    pub fn into_iter_owned(self) -> TableIter<'a> {
        TableIter {
            table: self,
            state: IterState::Unpositioned,
            block: None,
            cur: EntryCursor::new(),
            sep: Vec::new(),
            block_at: 0,
            unreleased: 0,
        }
    }
}

fn bad_type(offset: u64, ty: u8) -> Error {
    Error::corrupt("block", offset, format!("bad block type {ty}"))
}

/// `e` said to be in `location` (out of line: errors are rare).
#[cold]
fn located_error(e: Error, location: &str) -> Error {
    e.context(location)
}

/// Checks a block's trailer CRC (over the stored bytes and the type byte).
fn verify_crc(h: &BlockHandle, contents: &[u8], ty: u8, stored_masked: u32) -> Result<()> {
    verify_crc_of("block", h, contents, ty, stored_masked)
}

/// [`verify_crc`] of a block that the error names `what` (the metaindex block).
fn verify_crc_of(
    what: &'static str,
    h: &BlockHandle,
    contents: &[u8],
    ty: u8,
    stored_masked: u32,
) -> Result<()> {
    let computed = crc32c_extend(crc32c(contents), &[ty]);
    let stored = unmask_crc(stored_masked);
    if computed != stored {
        return Err(Error::ChecksumMismatch {
            what,
            name: None,
            offset: h.offset,
            len: h.size,
            stored,
            computed,
            context: None,
        });
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IterState {
    Unpositioned,
    Valid,
    Done,
    Failed,
}

/// A cursor over all entries of a [`Table`], moving across data blocks.
///
/// Same protocol as [`super::BlockIter`]: a new iterator is unpositioned and `next` moves it to
/// the first entry, so `while it.next()? { .. }` visits every entry; after `seek*`,
/// [`valid`](Self::valid) tells whether it is on an entry. Besides the in-block checks, it
/// verifies that each key lies above the previous block's separator and at or below its own
/// block's separator, hence that keys increase strictly across blocks. After an error it is
/// invalid and `next` keeps failing until it is re-positioned.
#[derive(Debug)]
pub struct TableIter<'a> {
    table: Table<'a>,
    state: IterState,
    /// Current block number, its bytes and layout.
    block: Option<(usize, BlockBytes<'a>, Layout)>,
    cur: EntryCursor,
    /// The current block's separator and offset, decoded from the index once per block (the
    /// scan checks every key against them).
    sep: Vec<u8>,
    block_at: u64,
    /// Offset of the first data block passed but not yet released
    /// ([`Table::releasing_behind_scans`]).
    unreleased: u64,
}

impl TableIter<'_> {
    /// Moves to the first entry.
    pub fn seek_to_first(&mut self) -> Result<()> {
        let r = self.settle(0, None);
        self.guard(r).map(drop)
    }

    /// Moves to the first entry whose key is `>= target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        let i = self.table.index.find_block(target);
        let r = self.settle(i, Some(target));
        self.guard(r).map(drop)
    }

    /// Advances to the next entry (to the first one if unpositioned); returns whether the
    /// iterator is on an entry.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<bool> {
        match self.state {
            IterState::Unpositioned => {
                let r = self.settle(0, None);
                self.guard(r)
            }
            IterState::Done => Ok(false),
            IterState::Failed => Err(Error::corrupt(
                "table",
                self.block_offset(),
                "iterator used after an error",
            )),
            IterState::Valid => {
                let r = self.advance();
                self.guard(r)
            }
        }
    }

    fn advance(&mut self) -> Result<bool> {
        let Some((i, bytes, lay)) = &self.block else {
            return Ok(false);
        };
        let i = *i;
        if self.cur.next(bytes, lay)? {
            self.check_key(i, false)?;
            return Ok(true);
        }
        self.settle(i + 1, None)
    }

    fn guard(&mut self, r: Result<bool>) -> Result<bool> {
        let r = self.table.located(r);
        match r {
            Ok(true) => self.state = IterState::Valid,
            Ok(false) => self.state = IterState::Done,
            Err(_) => self.state = IterState::Failed,
        }
        r
    }

    /// Positions on the first entry (>= target, in the first block tried) at or after block `i`.
    fn settle(&mut self, mut i: usize, mut target: Option<&[u8]>) -> Result<bool> {
        loop {
            if i >= self.table.index.blocks {
                self.block = None;
                return Ok(false);
            }
            let (sep, h) = self.table.index.entry(i);
            self.sep.clear();
            self.sep.extend_from_slice(sep);
            self.block_at = h.offset;
            self.release_behind(i);
            let bytes = self.table.located(self.table.load_block_at(i, h))?;
            let lay = self.table.layout_at(i, h.offset, &bytes)?;
            let found = match target.take() {
                Some(t) => self.cur.seek(&bytes, &lay, t)?,
                None => self.cur.seek_to_first(&bytes, &lay)?,
            };
            self.block = Some((i, bytes, lay));
            if found {
                self.check_key(i, true)?;
                return Ok(true);
            }
            i += 1;
        }
    }

    /// Before block `i` is read: when the scan is moving on from block `i - 1`, releases the
    /// blocks passed since the last release once they add up to [`RELEASE_EVERY`]; after a
    /// seek, starts counting again at block `i`.
    fn release_behind(&mut self, i: usize) {
        let Some(source) = self.table.scanned else {
            return;
        };
        let at = self.block_at;
        let moving_on = i > 0 && matches!(self.block, Some((p, ..)) if p + 1 == i);
        if !moving_on || at < self.unreleased {
            self.unreleased = at;
        } else if at - self.unreleased >= RELEASE_EVERY {
            source.release(self.unreleased..at);
            self.unreleased = at;
        }
    }

    /// Checks the current key against the separators around block `i`.
    fn check_key(&self, i: usize, first: bool) -> Result<()> {
        let key = self.cur.key();
        let ix = &*self.table.index;
        let sep = &self.sep[..];
        if key > sep {
            return Err(Error::corrupt(
                "data block",
                self.block_at,
                format!(
                    "key {} is above the block's index separator {}",
                    display(key),
                    display(sep)
                ),
            ));
        }
        if first && i > 0 {
            let prev = ix.separator(i - 1);
            if key <= prev {
                return Err(Error::corrupt(
                    "data block",
                    self.block_at,
                    format!(
                        "keys not strictly increasing across blocks: key {} is not above the previous block's separator {}",
                        display(key),
                        display(prev)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether the iterator is on an entry.
    pub fn valid(&self) -> bool {
        self.state == IterState::Valid
    }

    /// The current key (empty if not valid).
    pub fn key(&self) -> &[u8] {
        if self.valid() {
            self.cur.key()
        } else {
            &[]
        }
    }

    /// The current value (empty if not valid).
    pub fn value(&self) -> &[u8] {
        match (&self.block, self.valid()) {
            (Some((_, bytes, _)), true) => self.cur.value(bytes),
            _ => &[],
        }
    }

    /// Where the current entry lies: its data block's number, the restart run holding it, and
    /// that block's number of restart points (`None` unless on an entry).
    pub(crate) fn position(&self) -> Option<(usize, usize, usize)> {
        let (i, _, lay) = self.block.as_ref()?;
        Some((*i, self.cur.run()?, lay.restarts()))
    }

    /// Absolute file offset of the data block the iterator is in (0 if none).
    pub fn block_offset(&self) -> u64 {
        self.block.as_ref().map_or(0, |_| self.block_at)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{TableBuilder, TableOptions};
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn table_is_send_sync() {
        assert_send_sync::<Table<'static>>();
        assert_send_sync::<TableIndex>();
        assert_send_sync::<TableIter<'static>>();
        assert_send_sync::<BlockBytes<'static>>();
    }

    fn build(n: usize, opts: TableOptions) -> Vec<u8> {
        let mut b = TableBuilder::new(Vec::new(), 0, opts).unwrap();
        for i in 0..n {
            let v = format!("value-{i}-").repeat(8);
            b.add(format!("key{i:05}").as_bytes(), v.as_bytes())
                .unwrap();
        }
        b.finish().unwrap().0
    }

    /// A file in memory that records what a scan releases.
    #[derive(Debug)]
    struct Releases {
        bytes: Vec<u8>,
        released: std::sync::Mutex<Vec<std::ops::Range<u64>>>,
    }

    impl ReadAt for Releases {
        fn len(&self) -> u64 {
            self.bytes.len() as u64
        }
        fn location(&self) -> &str {
            "<releases>"
        }
        fn read(&self, range: std::ops::Range<u64>) -> Result<Vec<u8>> {
            Ok(self.bytes[range.start as usize..range.end as usize].to_vec())
        }
        fn release(&self, range: std::ops::Range<u64>) {
            self.released.lock().unwrap().push(range);
        }
    }

    #[test]
    fn a_scan_releases_the_blocks_behind_it_and_a_lookup_nothing() {
        let n = 30_000;
        let file = Releases {
            bytes: build(n, TableOptions::default()),
            released: Default::default(),
        };
        let index = TableIndex::open(&file.bytes, &TableReadOptions::default()).unwrap();
        let table = Table::new(&file.bytes, &index).releasing_behind_scans(&file);
        assert!(table.get(b"key12345", |v, _| v.to_vec()).unwrap().is_some());
        assert!(file.released.lock().unwrap().is_empty());

        let mut it = table.iter();
        let mut seen = 0;
        while it.next().unwrap() {
            // Nothing released reaches the block being read.
            let at = it.block_offset();
            assert!(file.released.lock().unwrap().iter().all(|r| r.end <= at));
            seen += 1;
        }
        assert_eq!(seen, n);
        let released = file.released.lock().unwrap().clone();
        // More than 1 MiB of blocks, released a MiB or more at a time, in order, without gaps,
        // from the first block on.
        assert!(released.len() >= 2, "{released:?}");
        assert_eq!(released[0].start, table.block_handle(0).offset);
        for w in released.windows(2) {
            assert_eq!(w[0].end, w[1].start);
        }
        assert!(released.iter().all(|r| r.end - r.start >= RELEASE_EVERY));

        // A seek starts counting again from where it lands.
        file.released.lock().unwrap().clear();
        let mut it = table.iter();
        it.seek(b"key29000").unwrap();
        while it.next().unwrap() {}
        assert!(file.released.lock().unwrap().is_empty());
    }

    #[test]
    fn cache_is_bounded_and_lru() {
        let mut c = BlockCache {
            capacity: 10,
            ..BlockCache::default()
        };
        c.insert(1, Arc::from(&[0u8; 4][..]));
        c.insert(2, Arc::from(&[0u8; 4][..]));
        assert!(c.get(1).is_some()); // 1 is now most recent
        c.insert(3, Arc::from(&[0u8; 4][..])); // evicts 2
        assert!(c.get(2).is_none());
        assert!(c.get(1).is_some() && c.get(3).is_some());
        assert_eq!(c.used, 8);
        c.insert(4, Arc::from(&[0u8; 11][..])); // larger than capacity: not cached
        assert!(c.get(4).is_none());
        assert_eq!(c.used, 8);
    }

    #[test]
    fn snappy_blocks_are_cached_and_verified_once() {
        let opts = TableOptions {
            block_size: 512,
            compression: Compression::Snappy,
            ..TableOptions::default()
        };
        let file = build(200, opts);
        let t = Table::open(&file, TableReadOptions::default()).unwrap();
        assert!(t.data_blocks() > 3);
        let b0 = t.load_block(0).unwrap();
        assert!(matches!(b0, BlockBytes::Cached(_)));
        assert!(t.index().state[0].load(Ordering::Relaxed) & VERIFIED != 0);
        let b0b = t.load_block(0).unwrap();
        match (&b0, &b0b) {
            (BlockBytes::Cached(a), BlockBytes::Cached(b)) => assert!(Arc::ptr_eq(a, b)),
            _ => unreachable!(),
        }
        // Capacity 0: no caching, still correct.
        let t = Table::open(
            &file,
            TableReadOptions {
                cache_capacity: 0,
                ..TableReadOptions::default()
            },
        )
        .unwrap();
        for i in 0..200 {
            let k = format!("key{i:05}");
            let v = t.get(k.as_bytes(), |v, _| v.to_vec()).unwrap().unwrap();
            assert_eq!(v, format!("value-{i}-").repeat(8).into_bytes());
        }
        assert_eq!(t.index().lock_cache().used, 0);
    }

    #[test]
    fn checksum_checked_first_time_only_when_enabled() {
        let opts = TableOptions {
            block_size: 256,
            ..TableOptions::default()
        };
        let mut file = build(50, opts);
        let t = Table::open(&file, TableReadOptions::default()).unwrap();
        let h = t.block_handle(1);
        drop(t);
        // Corrupt a value byte in block 1 (the last byte before the restart array is a value byte).
        let pos = (h.offset + h.size) as usize - 20;
        file[pos] ^= 0x01;
        let t = Table::open(&file, TableReadOptions::default()).unwrap();
        assert!(t.load_block(0).is_ok());
        let e = t.load_block(1).unwrap_err();
        match e {
            Error::ChecksumMismatch {
                what, offset, len, ..
            } => {
                assert_eq!(what, "block");
                assert_eq!(offset, h.offset);
                assert_eq!(len, h.size);
            }
            other => panic!("{other}"),
        }
        assert!(t.verify_all_blocks().is_err());
        let t = Table::open(
            &file,
            TableReadOptions {
                verify_checksums: false,
                ..TableReadOptions::default()
            },
        )
        .unwrap();
        assert!(t.load_block(1).is_ok());
        assert!(t.verify_all_blocks().is_err());
    }

    #[test]
    fn open_rejects_bad_handles() {
        let file = build(
            30,
            TableOptions {
                block_size: 128,
                ..TableOptions::default()
            },
        );
        assert!(Table::open(&file[..47], TableReadOptions::default())
            .unwrap_err()
            .to_string()
            .contains("too short"));
        // Table preceded by other data is found at the end of the file.
        let mut prefixed = vec![0xaau8; 100];
        let mut b = TableBuilder::new(Vec::new(), 100, TableOptions::default()).unwrap();
        b.add(b"a", b"1").unwrap();
        prefixed.extend_from_slice(&b.finish().unwrap().0);
        let t = Table::open(&prefixed, TableReadOptions::default()).unwrap();
        assert_eq!(t.first_data_offset(), Some(100));
        assert_eq!(
            t.get(b"a", |v, at| {
                assert_eq!(at, 100);
                v.to_vec()
            })
            .unwrap(),
            Some(b"1".to_vec())
        );
        t.verify_all_blocks().unwrap();
        // The same table bytes without the prefix: handles now point past the index.
        assert!(Table::open(&prefixed[100..], TableReadOptions::default()).is_err());
    }

    #[test]
    fn bad_block_type_reported() {
        let mut b = TableBuilder::new(Vec::new(), 0, TableOptions::default()).unwrap();
        b.add(b"a", b"1").unwrap();
        let mut file = b.finish().unwrap().0;
        let t = Table::open(&file, TableReadOptions::default()).unwrap();
        let h = t.block_handle(0);
        drop(t);
        // Set type 2 and fix the CRC so only the type is wrong.
        let end = (h.offset + h.size) as usize;
        file[end] = 2;
        let crc = crc32c_extend(crc32c(&file[h.offset as usize..end]), &[2]);
        file[end + 1..end + 5].copy_from_slice(&crate::format::mask_crc(crc).to_le_bytes());
        let t = Table::open(&file, TableReadOptions::default()).unwrap();
        let e = t.get(b"a", |_, _| ()).unwrap_err().to_string();
        assert!(e.contains("bad block type 2"), "{e}");
    }

    /// `file` with its index block re-encoded with restart interval `interval` (prefix
    /// compression, as LevelDB's index block options could ask), trailer and footer redone.
    fn reencode_index(file: &[u8], interval: usize) -> Vec<u8> {
        use crate::format::mask_crc;
        let footer = Footer::decode(&file[file.len() - FOOTER_LEN..], 0).unwrap();
        let idx = footer.index;
        let old = &file[idx.offset as usize..(idx.offset + idx.size) as usize];
        let block = Block::parse(old, idx.offset).unwrap();
        let mut it = block.iter();
        it.seek_to_first().unwrap();
        let mut b = BlockBuilder::new(interval);
        while it.valid() {
            b.add(it.key(), it.value());
            it.next().unwrap();
        }
        let contents = b.finish().to_vec();
        let mut out = file[..idx.offset as usize].to_vec();
        out.extend_from_slice(&contents);
        out.push(0);
        let mut covered = contents.clone();
        covered.push(0);
        out.extend_from_slice(&mask_crc(crc32c(&covered)).to_le_bytes());
        let index = BlockHandle {
            offset: idx.offset,
            size: contents.len() as u64,
        };
        out.extend_from_slice(
            &Footer {
                metaindex: footer.metaindex,
                index,
            }
            .encode(),
        );
        out
    }

    #[test]
    fn index_read_in_place_or_copied_gives_the_same_entries() {
        let opts = TableOptions {
            block_size: 256,
            ..TableOptions::default()
        };
        let file = build(600, opts);
        let copied = TableIndex::open(&file, &TableReadOptions::default()).unwrap();
        let shared: SharedBytes = Arc::new(file.clone());
        let in_place = TableIndex::open_shared(shared, &TableReadOptions::default()).unwrap();
        assert!(matches!(in_place.block, IndexBlock::Shared { .. }));
        assert!(matches!(copied.block, IndexBlock::Owned(_)));
        // An index block with prefix-compressed entries opens too (re-encoded, one restart
        // point per entry), and so does one of a single restart run.
        let compressed = reencode_index(&file, 4);
        let one_run = reencode_index(&file, usize::MAX);
        assert_ne!(compressed, file);
        let shared: SharedBytes = Arc::new(compressed.clone());
        let rebuilt = TableIndex::open_shared(shared, &TableReadOptions::default()).unwrap();
        assert!(matches!(rebuilt.block, IndexBlock::Owned(_)));
        let run = TableIndex::open(&one_run, &TableReadOptions::default()).unwrap();
        assert!(copied.data_blocks() > 20, "{}", copied.data_blocks());
        for ix in [&in_place, &rebuilt, &run] {
            assert_eq!(ix.data_blocks(), copied.data_blocks());
            for i in 0..copied.data_blocks() {
                assert_eq!(ix.separator(i), copied.separator(i));
                assert_eq!(ix.block_handle(i), copied.block_handle(i));
            }
            assert_eq!(ix.first_data_offset(), copied.first_data_offset());
        }
        for (bytes, ix) in [
            (&file, &in_place),
            (&compressed, &rebuilt),
            (&one_run, &run),
        ] {
            let t = Table::new(bytes, ix);
            for i in (0..600).step_by(7) {
                let k = format!("key{i:05}");
                let v = format!("value-{i}-").repeat(8);
                assert_eq!(
                    t.get(k.as_bytes(), |v, _| v.to_vec()).unwrap().unwrap(),
                    v.as_bytes()
                );
                assert_eq!(
                    t.get_by_search(k.as_bytes(), |v, _| v.to_vec())
                        .unwrap()
                        .unwrap(),
                    v.as_bytes()
                );
            }
            assert!(t.get(b"key0", |_, _| ()).unwrap().is_none());
            assert!(t.get(b"kez", |_, _| ()).unwrap().is_none());
            let mut it = t.iter();
            let mut n = 0;
            while it.next().unwrap() {
                n += 1;
            }
            assert_eq!(n, 600);
        }
    }

    #[test]
    fn an_empty_index_block_opens_in_place() {
        let file = build(0, TableOptions::default());
        let shared: SharedBytes = Arc::new(file.clone());
        let ix = TableIndex::open_shared(shared, &TableReadOptions::default()).unwrap();
        assert_eq!(ix.data_blocks(), 0);
        assert_eq!(ix.first_data_offset(), None);
        let t = Table::new(&file, &ix);
        assert!(t.get(b"a", |_, _| ()).unwrap().is_none());
        assert!(!t.iter().next().unwrap());
    }
}
