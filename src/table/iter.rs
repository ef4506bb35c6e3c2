//! The iterator over all entries of a [`Table`], as LevelDB's
//! `table/two_level_iterator.cc` is for its tables: the index block's entries at the first
//! level, each data block's at the second ([`TableIter`]), checking each key against the
//! separators around its block as it goes, and releasing the data blocks a scan has passed
//! ([`Table::releasing_behind_scans`]). Its own file because the cursor is its own state
//! machine, which lookups never use.

use super::block::{EntryCursor, Layout};
use super::read::BlockBytes;
use super::reader::{Table, RELEASE_EVERY};
use crate::error::{Error, Result};
use crate::name::display;

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

impl<'a> Table<'a> {
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

impl TableIter<'_> {
    /// Moves to the first entry.
    pub fn seek_to_first(&mut self) -> Result<()> {
        let r = self.settle(0, None);
        self.guard(r).map(drop)
    }

    /// Moves to the first entry whose key is `>= target`.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        if let Err(e) = self.table.index().ensure_checked() {
            return self.guard(Err(e)).map(drop);
        }
        let i = self.table.index().find_block(target);
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
            if i > 0 || target.is_some() {
                // Past the first block, the index's separators and handles are used: checked
                // first if open deferred it (the first block alone is how an open reads its
                // header).
                self.table.index().ensure_checked()?;
            }
            if i >= self.table.index().data_blocks() {
                self.block = None;
                return Ok(false);
            }
            let (sep, h) = self.table.index().entry(i);
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
        let ix = self.table.index();
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
    use super::super::{build_test_table as build, TableIndex, TableOptions, TableReadOptions};
    use super::*;
    use crate::format::ReadAt;

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
}
