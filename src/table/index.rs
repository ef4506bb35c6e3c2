//! The validated index of a table, as LevelDB's `table/table.cc` reads it at `Table::Open`:
//! the footer and the index block (one entry per data block: its separator key and handle),
//! checked once at open ([`TableIndex::check`]), with entry `i` decoded again from the block at
//! restart offset `i` whenever it is used ([`locate_index_entry`]); plus what the index keeps
//! for the table's readers: the options it was opened with ([`TableReadOptions`]), the
//! per-block state bits ([`VERIFIED`], [`PARSED`], [`PLAIN`]), the block cache and the hashed
//! lookups' restart offsets (their types are in `cache.rs`), and the hash index block once
//! read.
//!
//! It is its own file because it is all an open costs and all a reader keeps in memory for a
//! table ([`TableIndex`] owns no file bytes, so it lives next to the mapping it came from);
//! reading data blocks is the [`Table`](super::Table)'s (`reader.rs`).

use std::borrow::Cow;
use std::ops::Range;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex, OnceLock};

use super::block::{key_lt, scan_entries, span_of, BlockBuilder, KeyBuf, Layout};
use super::cache::{BlockCache, BlockRuns, RunsChunk, RUNS_CHUNK};
use super::footer::{BlockHandle, Footer};
use super::hash::HashIndex;
use super::read::{bad_type, block_end, decompress, read_raw, verify_crc};
use super::{Compression, FOOTER_LEN, MAX_BLOCK_LEN};
use crate::error::{ensure_within, Error, Result};
use crate::format::{get_fixed32, get_varint32, get_varint64, Cursor};
use crate::name::display;

/// Options for [`Table::open`](super::Table::open).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableReadOptions {
    /// Verify each data block's CRC the first time it is loaded (default true). The index block
    /// is always verified: at open, or, for an index opened in place
    /// ([`TableIndex::open_shared`]), before its first use.
    pub verify_checksums: bool,
    /// Bytes of decompressed (Snappy) blocks, and of blocks read through the seam
    /// ([`Table::new_ranged`](super::Table::new_ranged)), kept in memory; 0 disables the
    /// cache. Uncompressed blocks of the bytes held are read in place and never cached.
    /// Default 8 MiB.
    pub cache_capacity: usize,
    /// Look keys up through the hash index block when the table has one (SPEC.md 4.5; default
    /// true). A table over some bytes of a file
    /// ([`Table::new_ranged`](super::Table::new_ranged)) uses it when they hold the hash
    /// block. Off, or without the block, `get` binary-searches the index block and a data
    /// block.
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

/// Most separator key bytes an index block may expand to (prefix compression lets a small
/// block describe long keys; this bounds the memory a hostile one can make `open` allocate).
const MAX_INDEX_KEY_BYTES: usize = 4 * MAX_BLOCK_LEN;

/// Block state bit: the block's CRC matched.
pub(super) const VERIFIED: u8 = 1;
/// Block state bit: the block's restart array was validated (it depends only on the block's
/// bytes, which never change).
pub(super) const PARSED: u8 = 2;
/// Block state bit: the block is stored uncompressed (its trailer's type byte is 0).
pub(super) const PLAIN: u8 = 4;

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
    /// A copy of the end of the file from the block on (the block, its trailer, the
    /// metaindex and footer after it, as [`TableIndex::open_tail`] held them), `len` bytes of
    /// block: what a deferred check reads ([`TableIndex::ensure_checked`]).
    OwnedTail { tail: Box<[u8]>, len: usize },
}

impl IndexBlock {
    #[inline]
    fn bytes(&self) -> &[u8] {
        match self {
            IndexBlock::Shared { owner, range } => {
                (**owner).as_ref().get(range.clone()).unwrap_or_default()
            }
            IndexBlock::Owned(b) => b,
            IndexBlock::OwnedTail { tail, len } => tail.get(..*len).unwrap_or_default(),
        }
    }
}

impl std::fmt::Debug for IndexBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IndexBlock::Shared { range, .. } => write!(f, "Shared({range:?})"),
            IndexBlock::Owned(b) => write!(f, "Owned({} bytes)", b.len()),
            IndexBlock::OwnedTail { tail, len } => {
                write!(f, "OwnedTail({len} bytes of {})", tail.len())
            }
        }
    }
}

/// The validated index of a table: footer and index block (separator keys and data block
/// handles, every entry checked at open and decoded again when used), plus the per-block
/// "checksum verified" flags and the block cache.
///
/// It holds the index block alone (a copy, or the shared bytes of the whole file with
/// [`TableIndex::open_shared`]), so it can live next to the mapping it was read from; combine
/// the two with [`Table::new`](super::Table::new). `TableIndex` is `Send + Sync`.
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
    pub(super) state: Vec<AtomicU8>,
    cache: Mutex<BlockCache>,
    /// The hash index block, once the metaindex has been read (on the first lookup, so that
    /// open never reads it): `None` when the table has none.
    pub(super) hash: OnceLock<Option<HashIndex>>,
    /// Per data block, once the hash index has led a lookup to it: its restart offsets and
    /// where its entries end (allocated by chunks of [`RUNS_CHUNK`] blocks, on first use).
    runs: OnceLock<Box<[RunsChunk]>>,
    /// The file (or object) the table is read from, when its reader named it
    /// ([`TableIndex::set_location`]): errors of reading its blocks say it.
    pub(super) location: Option<Box<str>>,
    /// Whether open left the index block's checksum and entries to be checked on first use
    /// ([`TableIndex::open_shared`]), and whether that check passed.
    deferred: bool,
    checked: OnceLock<()>,
}

/// What an open that defers the index block's check found ([`TableIndex::check_light`]): the
/// footer, the block's range in the bytes read, where its restart array starts and its number
/// of entries.
struct LightIndex {
    footer: Footer,
    range: Range<usize>,
    restarts_at: usize,
    blocks: usize,
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
        Self::open_copied(file, 0, opts)
    }

    /// The index of the table ending `tail` (the file's bytes from `base` on), checked in full
    /// ([`TableIndex::check`]), keeping a copy of its index block.
    fn open_copied(tail: &[u8], base: u64, opts: &TableReadOptions) -> Result<TableIndex> {
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

    /// [`TableIndex::open`] on the end of a file only: `tail` holds the file's bytes from
    /// offset `base` to its end (for instance from the first data block on, read without the
    /// records before it). Offsets in errors and handles stay absolute. The index keeps a copy
    /// of the index block and what follows it (not of the tail). As with
    /// [`TableIndex::open_shared`], an uncompressed block with a restart point at every entry
    /// has its checksum and entries checked at their first use
    /// ([`TableIndex::ensure_checked`]), not at open.
    pub fn open_tail(tail: &[u8], base: u64, opts: &TableReadOptions) -> Result<TableIndex> {
        if let Some(LightIndex {
            footer,
            range,
            restarts_at,
            blocks,
        }) = Self::check_light(tail, base)?
        {
            // The block and what follows it, kept for the deferred check.
            let block = IndexBlock::OwnedTail {
                tail: tail[range.start..].into(),
                len: range.len(),
            };
            let mut ix = Self::assemble(footer, block, restarts_at, blocks, opts);
            ix.deferred = true;
            return Ok(ix);
        }
        Self::open_copied(tail, base, opts)
    }

    /// [`TableIndex::open`] of the table that ends the bytes `file` holds, keeping `file`
    /// (shared, e.g. a mapped file's) to read the index block in place: nothing of the block
    /// is copied. For an uncompressed block with a restart point at every entry (what every
    /// writer of the format writes), open checks the footer, the handles and the block's
    /// restart array, and leaves its checksum and entries to the first use that needs them
    /// ([`TableIndex::ensure_checked`]: a binary search, a scan past the first block,
    /// `figures`, `verify`), so that an open reads the end of the file and nothing that grows
    /// with the table; a lookup through a kind 1 hash block and a read of the first block
    /// never need them. Other blocks are checked in full at open (a compressed one, or one
    /// without a restart point at every entry, decoded into a copy).
    pub fn open_shared(file: SharedBytes, opts: &TableReadOptions) -> Result<TableIndex> {
        if let Some(LightIndex {
            footer,
            range,
            restarts_at,
            blocks,
        }) = Self::check_light((*file).as_ref(), 0)?
        {
            let block = IndexBlock::Shared {
                owner: file.clone(),
                range,
            };
            let mut ix = Self::assemble(footer, block, restarts_at, blocks, opts);
            ix.deferred = true;
            return Ok(ix);
        }
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
            cache: Mutex::new(BlockCache::new(opts.cache_capacity)),
            hash: OnceLock::new(),
            runs: OnceLock::new(),
            location: None,
            deferred: false,
            checked: OnceLock::new(),
        }
    }

    /// Checks the index block in full (its checksum and every entry, as
    /// [`TableIndex::open`] does) if [`TableIndex::open_shared`] left that to the first use,
    /// once; a failure is reported again at every call. Every path that uses the separators or
    /// the handles of blocks after the first (binary searches, scans past the first block,
    /// figures, verify) calls it first; a lookup through a kind 1 hash block never does.
    pub fn ensure_checked(&self) -> Result<()> {
        if !self.deferred || self.checked.get().is_some() {
            return Ok(());
        }
        let (c, same) = match &self.block {
            IndexBlock::Shared { owner, range } => {
                let c = Self::check((**owner).as_ref(), 0)?;
                let same = c.in_file.as_ref() == Some(range);
                (c.blocks, same)
            }
            IndexBlock::OwnedTail { tail, .. } => {
                let c = Self::check(tail, self.footer.index.offset)?;
                (c.blocks, c.in_file.is_some())
            }
            IndexBlock::Owned(_) => return Ok(()),
        };
        if c != self.blocks || !same {
            return Err(Error::corrupt(
                "index block",
                self.footer.index.offset,
                "its entries are not each at a restart point, as a native file's index is written",
            ));
        }
        let _ = self.checked.set(());
        Ok(())
    }

    /// Reads and checks the footer and the index block of the table ending `tail` (the file's
    /// bytes from `base` on): the checks of [`TableIndex::open`], every entry visited once.
    /// The block is returned as stored when every entry is a restart point (LevelDB's and
    /// TensorFlow's index blocks, restart interval 1), else re-encoded so.
    /// What [`TableIndex::open_shared`] checks at open of an uncompressed index block: the
    /// footer and handles (as [`TableIndex::check`]) and the block's restart array, one entry
    /// per restart point assumed; its checksum and entries are left to
    /// [`TableIndex::ensure_checked`], so that an open reads the end of the file and nothing
    /// that grows with the number of data blocks but their restart offsets. `None` for a
    /// compressed block (checked in full at open). Returns the footer, the block's range in
    /// `file`, where its restart array starts and its number of entries.
    fn check_light(file: &[u8], base: u64) -> Result<Option<LightIndex>> {
        let (footer, raw, ty) = Self::footer_and_index(file, base)?;
        if Compression::from_type_byte(ty) != Some(Compression::None) {
            return Ok(None);
        }
        let idx = footer.index;
        let lay = Layout::parse(raw, idx.offset, true, "index block")?;
        let blocks = if lay.entries_end() == 0 {
            0
        } else {
            lay.restarts()
        };
        // One entry per restart point, as every writer of the format makes it: the first
        // entry ends where the second restart point is, and the last restart point's entry
        // where the entries end. (Else the block is checked, and re-encoded, at open.)
        if blocks > 0 {
            let one_each = |i: usize, end: usize| -> bool {
                lay.restart(raw, i)
                    .and_then(|r| span_of(raw, &lay, r, 1))
                    .is_ok_and(|e| e == end)
            };
            let second = if blocks > 1 {
                lay.restart(raw, 1).ok()
            } else {
                Some(lay.entries_end())
            };
            if !second.is_some_and(|s| one_each(0, s)) || !one_each(blocks - 1, lay.entries_end()) {
                return Ok(None);
            }
        }
        // In bounds: `footer_and_index` read the block from `file`.
        let at = usize::try_from(idx.offset.saturating_sub(base)).unwrap_or(usize::MAX);
        Ok(Some(LightIndex {
            footer,
            range: at..at + raw.len(),
            restarts_at: lay.entries_end(),
            blocks,
        }))
    }

    /// The footer of the table ending `tail` (the file's bytes from `base` on), its handles
    /// checked, and the index block's stored bytes and type byte (not checksummed).
    fn footer_and_index(tail: &[u8], base: u64) -> Result<(Footer, &[u8], u8)> {
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

        let (raw, ty, _) = read_raw(file, base, &idx)?;
        Ok((footer, raw, ty))
    }

    fn check(tail: &[u8], base: u64) -> Result<CheckedIndex<'_>> {
        let file = tail;
        let (footer, _, _) = Self::footer_and_index(file, base)?;
        let (meta, idx) = (footer.metaindex, footer.index);
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
        // One pass over the entries, checking each (most of the cost of a full check, so it
        // avoids the general-purpose block cursor); nothing is kept but the count: lookups
        // decode an entry from the block when they use it.
        // Key buffers on the stack for keys up to 128 bytes: the check runs inside a lookup when
        // open deferred it, and lookups do not allocate.
        let mut prev = KeyBuf::new();
        let mut key = KeyBuf::new();
        let mut key_bytes = 0usize;
        let mut prev_end: Option<u64> = None;
        let mut first_handle: Option<BlockHandle> = None;
        let mut first_after: Option<BlockHandle> = None;
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
            if n == 1 && first_after.is_none() && h.offset < prev_end.unwrap_or(0) {
                // The first block placed after the others (SPEC.md 4.2): checked below, once
                // the last block is known; the second block starts the ascending run.
                first_after = first_handle;
                prev_end = None;
            }
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
            if n == 0 {
                first_handle = Some(h);
            }
            std::mem::swap(&mut prev, &mut key);
            n += 1;
            Ok(())
        })?;
        if let Some(h) = first_after {
            // After the last data block, and before the metaindex (checked with the others).
            if h.offset < prev_end.unwrap_or(0) {
                return Err(Error::corrupt(
                    "index entry",
                    idx.offset,
                    format!(
                        "the first data block (offset {}, size {}) overlaps or precedes a \
                         later one: it is neither before the second nor after the last data \
                         block (which ends at {})",
                        h.offset,
                        h.size,
                        prev_end.unwrap_or(0)
                    ),
                ));
            }
        }
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
    pub(super) fn entry(&self, i: usize) -> (&[u8], BlockHandle) {
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
    pub(super) fn locate(&self, i: usize) -> (Range<usize>, BlockHandle) {
        assert!(
            i < self.blocks,
            "data block {i} of a table of {} data blocks",
            self.blocks
        );
        locate_index_entry(self.block.bytes(), self.restarts_at, i)
            .unwrap_or((0..0, BlockHandle { offset: 0, size: 0 }))
    }

    /// The index block's bytes, where [`TableIndex::locate`]'s separator ranges lie.
    #[inline]
    pub(super) fn block_bytes(&self) -> &[u8] {
        self.block.bytes()
    }

    /// The restart-offset cache slot of data block `i < blocks`.
    pub(super) fn runs_slot(&self, i: usize) -> &OnceLock<BlockRuns> {
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

    /// File offset of the data block that comes first in the file, if there is one: the first
    /// block's, or the second's when the first is placed after the others (a version 3
    /// header block, SPEC.md 4.2).
    pub fn first_data_offset(&self) -> Option<u64> {
        let first = (self.blocks > 0).then(|| self.block_handle(0).offset)?;
        Some(
            match (self.blocks > 1).then(|| self.block_handle(1).offset) {
                Some(second) => first.min(second),
                None => first,
            },
        )
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

    pub(super) fn lock_cache(&self) -> std::sync::MutexGuard<'_, BlockCache> {
        // A panic while holding the lock cannot leave the cache inconsistent in a way that
        // matters (worst case a slightly wrong byte count), so recover from poisoning.
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::super::block::Block;
    use super::super::{build_test_table as build, Table, TableBuilder, TableOptions};
    use super::*;
    use crate::format::crc32c;

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
    fn a_shared_open_checks_the_index_block_at_its_first_use() {
        let opts = TableOptions {
            block_size: 256,
            ..TableOptions::default()
        };
        let file = build(600, opts);
        let ix = TableIndex::open(&file, &TableReadOptions::default()).unwrap();
        let at = ix.footer().index.offset as usize;
        let sep = ix.separator(5).to_vec();
        let pos = at
            + file[at..]
                .windows(sep.len())
                .position(|w| w == sep.as_slice())
                .unwrap();
        let mut bad = file.clone();
        bad[pos + sep.len() - 1] ^= 0x01;
        // A full open refuses it; a shared one opens, and its first search reports it.
        assert!(TableIndex::open(&bad, &TableReadOptions::default()).is_err());
        let shared: SharedBytes = Arc::new(bad.clone());
        let ix = TableIndex::open_shared(shared, &TableReadOptions::default()).unwrap();
        assert!(ix.deferred);
        let t = Table::new(&bad, &ix);
        for _ in 0..2 {
            assert!(matches!(
                t.get_by_search(b"key00300", |_, _| ()),
                Err(Error::ChecksumMismatch { .. })
            ));
            let mut it = t.iter();
            assert!(it.seek(b"key00300").is_err());
            assert!(t.verify_all_blocks().is_err());
        }
        // The first block alone (a native file's header) reads without the check.
        let mut it = t.iter();
        it.seek_to_first().unwrap();
        assert_eq!(it.key(), b"key00000");
        // Undamaged, the check passes once and is kept.
        let shared: SharedBytes = Arc::new(file.clone());
        let ix = TableIndex::open_shared(shared, &TableReadOptions::default()).unwrap();
        let t = Table::new(&file, &ix);
        assert!(t.get_by_search(b"key00300", |_, _| ()).unwrap().is_some());
        assert!(ix.checked.get().is_some());
    }

    #[test]
    fn index_read_in_place_or_copied_gives_the_same_entries() {
        let opts = TableOptions {
            block_size: 256,
            ..TableOptions::default()
        };
        let file = build(600, opts);
        let copied = TableIndex::open(&file, &TableReadOptions::default()).unwrap();
        let tail = TableIndex::open_tail(&file, 0, &TableReadOptions::default()).unwrap();
        assert!(matches!(tail.block, IndexBlock::OwnedTail { .. }));
        for i in 0..copied.data_blocks() {
            assert_eq!(tail.entry(i), copied.entry(i));
        }
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
