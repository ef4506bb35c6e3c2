//! A [`Table`]'s lookups through the hash index block (SPEC.md 4.5; the format itself is in
//! `hash.rs`), LevelDB's nearest being the filter block a `table/table.cc` read consults before
//! its data block: reading the metaindex and the hash block on the first lookup by name, never
//! at open; [`Table::get`] through the block (each slot's candidate checked against the key, its
//! block and its separators, so that both ways find the same entry); and
//! [`Table::check_hash_index`], `verify`'s proof that the block maps every key to the entry a
//! binary search finds. Its own file because it is its own path to an entry, with its own
//! checks, beside `reader.rs`'s binary search.

use std::borrow::Cow;

use super::block::{find_in_span, key_lt, span_of, Block, Layout};
use super::cache::BlockRuns;
use super::footer::BlockHandle;
use super::hash::{Candidate, HashIndex, HashKind, HASH_INDEX_KEY};
use super::read::{bad_type, block_end, decompress, read_raw, verify_crc_of, BlockBytes};
use super::reader::Table;
use super::Compression;
use crate::error::{Error, Result};
use crate::format::Cursor;
use crate::name::display;

/// Most cache lines of a restart run [`touch_lines`] touches.
const TOUCH_LINES: usize = 32;

/// Cache lines a kind 1 lookup touches ahead from its run's start: a run of 16 entries of
/// checkpoint names takes about 8.
const RUN_LINES: usize = 8;

/// Reads one byte of each 64-byte line of `span` (its first [`TOUCH_LINES`] lines), so that a
/// run of entries about to be scanned is fetched from memory all at once: the scan finds each
/// entry's position from the one before, so the lines it misses on would otherwise be waited
/// for one after the other.
#[inline]
fn touch_lines(span: &[u8], lines: usize) {
    let x = span.iter().step_by(64).take(lines).fold(0u8, |x, &b| x ^ b);
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

    /// [`Table::get`] through the hash index block `hx`, which the bytes held hold (a kind 1
    /// block only when they hold the whole table: its slots lead into the data blocks).
    pub(super) fn get_hashed<R>(
        &self,
        hx: &HashIndex,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        match hx.kind() {
            HashKind::Runs => self.get_by_run(hx, key, f),
            HashKind::Entries => self.get_by_entry(hx, key, f),
        }
    }

    /// A kind 1 lookup (SPEC.md 4.5): the slot names where the entry's restart run starts in
    /// the data region and the entry's position in the run; the entries up to it are decoded,
    /// the pages they lie in checked against the block's data-page checksums (each page once),
    /// and the last key compared. Neither the index block nor the data block's restart array is
    /// read: `verify` checks that every slot leads to the entry a binary search finds.
    fn get_by_entry<R>(
        &self,
        hx: &HashIndex,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        let ix = self.index();
        if ix.data_blocks() > 0 && !key_lt(ix.separator(0), key) {
            // In the first block, which may lie after the hash block, outside the data region
            // it covers (a native header's): not in the hash block.
            return self.get_by_search(key, f);
        }
        let contents = self.hash_contents(hx)?;
        let verify = ix.options().verify_checksums;
        let (region_start, region_end) = hx.region();
        let mut f = Some(f);
        let mut out = None;
        hx.lookup(contents, key, verify, |c| {
            let at = region_start.saturating_add(c.run);
            if at >= region_end {
                return Err(Error::corrupt(
                    "hash index block",
                    hx.handle.offset,
                    format!(
                        "a slot names a run at byte {} of the data region \
                         {region_start}..{region_end}, outside it",
                        c.run
                    ),
                ));
            }
            // The run and what follows it in the region: in place in the bytes held, or (a
            // table over the end of a file) its pages read through the seam.
            let (window, window_at) = self.region_window(hx, at, c.position + 1)?;
            let window_end = (window_at + window.len() as u64).min(region_end);
            let bytes = usize::try_from(at - window_at)
                .ok()
                .zip(usize::try_from(window_end - window_at).ok())
                .and_then(|(s, e)| window.get(s..e))
                .unwrap_or_default();
            // The run's lines fetched all at once (the header walk below finds each entry
            // from the one before it): as many as its entries usually fill.
            touch_lines(bytes.get(..RUN_LINES * 64).unwrap_or(bytes), RUN_LINES);
            let lay = Layout::known(bytes.len(), 0, at, true, "data block");
            let end = span_of(bytes, &lay, 0, c.position + 1)?;
            if verify {
                hx.check_data(contents, &window, window_at, at, at + end as u64)?;
            }
            let Some((vs, ve)) = find_in_span(bytes, &lay, 0, end, key)? else {
                return Ok(false);
            };
            if let Some(f) = f.take() {
                out = Some(f(&bytes[vs..ve], at));
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// Bytes holding the data region from the data page of `at` on, and the absolute offset
    /// of the first: the bytes held when they hold `at`; else pages of the region read through
    /// the seam, enough for `entries` entries from `at` and whole pages (a first read of two
    /// pages, doubled until their headers fit).
    fn region_window(
        &self,
        hx: &HashIndex,
        at: u64,
        entries: usize,
    ) -> Result<(Cow<'a, [u8]>, u64)> {
        let (region_start, region_end) = hx.region();
        let page = super::hash::DATA_PAGE as u64;
        let from = region_start + (at - region_start) / page * page;
        let rest = match self.rest {
            Some(rest) if from < self.base => rest,
            _ => return Ok((Cow::Borrowed(self.file), self.base)),
        };
        let mut pages = 2u64;
        loop {
            let to = from.saturating_add(pages * page).min(region_end);
            let got = rest.read(from..to)?;
            let off = usize::try_from(at - from).unwrap_or(usize::MAX);
            let lay = Layout::known(got.len(), 0, from, true, "data block");
            // Enough when the entries' headers decode and their last page is whole (for its
            // checksum); all there is when the read reached the region's end.
            let enough = match span_of(&got, &lay, off, entries) {
                Ok(end) => (from + (end as u64).div_ceil(page) * page).min(region_end) <= to,
                Err(_) if to < region_end => false,
                Err(e) => return Err(e),
            };
            if enough || to == region_end {
                return Ok((Cow::Owned(got), from));
            }
            pages = pages.saturating_mul(2);
        }
    }

    /// A kind 0 lookup: the slot names the block and restart point; the block is loaded (its
    /// checksum checked on first use), the run decoded and the entry checked against the
    /// block's separators.
    fn get_by_run<R>(
        &self,
        hx: &HashIndex,
        key: &[u8],
        f: impl FnOnce(&[u8], u64) -> R,
    ) -> Result<Option<R>> {
        self.index().ensure_checked()?;
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
            let Some(&start) = usize::try_from(c.run)
                .ok()
                .and_then(|r| runs.restarts.get(r))
            else {
                return Err(Error::corrupt(
                    "hash index block",
                    hx.handle.offset,
                    format!(
                        "a slot names restart point {} of data block {} (at {}), which has {}",
                        c.run,
                        c.block,
                        h.offset,
                        runs.restarts.len()
                    ),
                ));
            };
            let end = runs
                .restarts
                .get(usize::try_from(c.run).unwrap_or(usize::MAX).saturating_add(1))
                .map_or(runs.entries_end, |&r| r as usize);
            touch_lines(bytes.get(start as usize..end).unwrap_or_default(), TOUCH_LINES);
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
        // Kind 1: each run met (block, byte offset) and its number of entries.
        let entries_kind = hx.kind() == HashKind::Entries;
        let mut runs: std::collections::HashMap<u64, usize> = Default::default();
        let (region_start, _) = hx.region();
        let mut cur: Option<(usize, usize, usize)> = None;
        let mut n = 0u64;
        let mut it = self.iter();
        while it.next()? {
            let (key, at) = (it.key(), it.block_offset());
            let found = match it.position() {
                // Kind 1 leaves the first block's keys out (lookups binary-search them).
                Some((0, _, _)) if entries_kind => continue,
                Some((block, run, in_block)) => {
                    if let Some(r) = restarts.get_mut(block) {
                        *r = in_block;
                    }
                    let want = if entries_kind {
                        let position = match cur {
                            Some((b, r, p)) if b == block && r == run => p + 1,
                            _ => 0,
                        };
                        cur = Some((block, run, position));
                        let (_, br) = self.block_runs(block)?;
                        let offset = br.restarts.get(run).map_or(u64::MAX, |&o| {
                            (br.handle.offset + u64::from(o)).saturating_sub(region_start)
                        });
                        runs.insert(offset, position + 1);
                        Candidate {
                            block: 0,
                            run: offset,
                            position,
                        }
                    } else {
                        Candidate {
                            block,
                            run: run as u64,
                            position: 0,
                        }
                    };
                    hx.has_slot(contents, key, want)?
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
        hx.check_slots(contents, |c| {
            if entries_kind {
                runs.get(&c.run).is_some_and(|&k| c.position < k)
            } else {
                restarts.get(c.block).is_some_and(|&r| c.run < r as u64)
            }
        })?;
        // Kind 1: the data pages' checksums, which lookups check page by page.
        if entries_kind && self.rest.is_none() {
            hx.check_all_data(contents, self.file, self.base)?;
        }
        if occupied != n {
            return Err(bad(format!(
                "{occupied} occupied slots for the table's {n} keys"
            )));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{TableBuilder, TableIndex, TableOptions, TableReadOptions};
    use super::*;

    /// A table whose first entry is `""` (a header) and then `n` keys, written with version
    /// 3's layout (kind 1 hash block, first block last).
    fn v3_table(n: usize, block_size: usize) -> Vec<u8> {
        let opts = TableOptions {
            block_size,
            hash_index: true,
            first_entry_alone: true,
            hash_entries: true,
            first_entry_last: true,
            ..TableOptions::default()
        };
        let mut b = TableBuilder::new(Vec::new(), 100, opts).unwrap();
        b.add(b"", b"header").unwrap();
        for i in 0..n {
            let v = format!("value-{i}-").repeat(3);
            b.add(format!("model.layers.{i:06}.w").as_bytes(), v.as_bytes())
                .unwrap();
        }
        let mut file = vec![0u8; 100];
        file.extend(b.finish().unwrap().0);
        file
    }

    #[test]
    fn kind_1_finds_every_key_and_places_the_first_block_last() {
        for (n, block_size) in [(0, 4096), (1, 4096), (5000, 4096), (3000, 1 << 16)] {
            let file = v3_table(n, block_size);
            let ix = TableIndex::open(&file, &TableReadOptions::default()).unwrap();
            let t = Table::new(&file, &ix);
            assert_eq!(
                t.hash_index().unwrap().map(HashIndex::kind),
                Some(HashKind::Entries)
            );
            // The header's block is after the hash block, the others from offset 100 on (a
            // table of the header alone keeps it first).
            let hx = t.hash_index().unwrap().unwrap().handle;
            assert_eq!(ix.block_handle(0).offset > hx.offset, n > 0, "n = {n}");
            assert_eq!(ix.first_data_offset(), Some(100));
            assert_eq!(t.get(b"", |v, _| v.to_vec()).unwrap().unwrap(), b"header");
            for i in 0..n {
                let k = format!("model.layers.{i:06}.w");
                let v = t.get(k.as_bytes(), |v, _| v.to_vec()).unwrap();
                assert_eq!(
                    v.unwrap(),
                    format!("value-{i}-").repeat(3).as_bytes(),
                    "{k}"
                );
                assert!(t
                    .get(format!("{k}x").as_bytes(), |_, _| ())
                    .unwrap()
                    .is_none());
            }
            assert!(t.get(b"zzz", |_, _| ()).unwrap().is_none());
            assert_eq!(t.check_hash_index().unwrap(), n as u64);
            t.verify_all_blocks().unwrap();
        }
    }

    #[test]
    fn kind_1_checks_the_data_pages_it_reads() {
        let mut file = v3_table(5000, 4096);
        // Damage a byte of a key in the middle of the data blocks: the lookups that read its
        // page report it, as does verify; a lookup elsewhere is unaffected.
        let ix = TableIndex::open(&file, &TableReadOptions::default()).unwrap();
        let h = ix.block_handle(ix.data_blocks() / 2);
        drop(ix);
        let at = h.offset as usize + 3;
        file[at] ^= 0x20;
        let ix = TableIndex::open(&file, &TableReadOptions::default()).unwrap();
        let t = Table::new(&file, &ix);
        let errors = (0..5000)
            .filter(|i| {
                let k = format!("model.layers.{i:06}.w");
                match t.get(k.as_bytes(), |_, _| ()) {
                    Err(Error::ChecksumMismatch { what, .. }) => {
                        assert_eq!(what, "index data page");
                        true
                    }
                    Ok(Some(())) => false,
                    other => panic!("{k}: {other:?}"),
                }
            })
            .count();
        assert!(errors > 0 && errors < 200, "{errors} lookups failed");
        assert!(t.verify_all_blocks().is_err());
    }
}
