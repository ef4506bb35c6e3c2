//! A [`Table`]'s lookups through the hash index block (SPEC.md 4.5; the format itself is in
//! `hash.rs`), LevelDB's nearest being the filter block a `table/table.cc` read consults before
//! its data block: reading the metaindex and the hash block on the first lookup by name, never
//! at open; [`Table::get`] through the block (each slot's candidate checked against the key, its
//! block and its separators, so that both ways find the same entry); and
//! [`Table::check_hash_index`], `verify`'s proof that the block maps every key to the entry a
//! binary search finds. Its own file because it is its own path to an entry, with its own
//! checks, beside `reader.rs`'s binary search.

use std::borrow::Cow;

use super::block::{find_in_span, key_lt, Block, Layout};
use super::cache::BlockRuns;
use super::footer::BlockHandle;
use super::hash::{HashIndex, HASH_INDEX_KEY};
use super::read::{bad_type, block_end, decompress, read_raw, verify_crc_of, BlockBytes};
use super::reader::Table;
use super::Compression;
use crate::error::{Error, Result};
use crate::format::Cursor;
use crate::name::display;

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

impl<'a> Table<'a> {
    /// The hash index block, reading the metaindex the first time (`None` if there is none).
    pub(super) fn hash_index(&self) -> Result<Option<&HashIndex>> {
        if let Some(h) = self.index().hash.get() {
            return Ok(h.as_ref());
        }
        let h = self.read_hash_index()?;
        if h.is_none() && self.rest.is_some() {
            // Perhaps only outside the bytes this table holds: not remembered, so that a
            // table over more of the file (verify's) finds it.
            return Ok(None);
        }
        Ok(self.index().hash.get_or_init(|| h).as_ref())
    }

    /// Reads the metaindex (checking its CRC) and, if it names a hash index block, validates
    /// that block's handle (between the last data block and the metaindex, stored
    /// uncompressed) and header ([`HashIndex::parse`]). Other metaindex entries are ignored.
    fn read_hash_index(&self) -> Result<Option<HashIndex>> {
        let ix = self.index();
        let meta = ix.footer().metaindex;
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
            .data_blocks()
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

    /// [`Table::get`] through the hash index block `hx`, which the bytes held hold.
    pub(super) fn get_hashed<R>(
        &self,
        hx: &HashIndex,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        let contents = self.hash_contents(hx)?;
        let ix = self.index();
        let mut f = Some(f);
        let mut out = None;
        hx.lookup(contents, key, ix.options().verify_checksums, |c| {
            if c.block >= ix.data_blocks() {
                return Err(Error::corrupt(
                    "hash index block",
                    hx.handle.offset,
                    format!(
                        "a slot names data block {}, but the table has {}",
                        c.block, ix.data_blocks()
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
            let seps = ix.block_bytes();
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
        let ix = self.index();
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
        let blocks = self.index().data_blocks();
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
}
