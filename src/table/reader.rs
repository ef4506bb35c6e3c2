//! An open table, as LevelDB's `table/table.cc` is one: a [`TableIndex`] paired with the bytes
//! of the file it was read from (a byte slice holding the whole file, typically an mmap), or with
//! the bytes of the file's end held in memory and the read seam ([`ReadAt`]) for the blocks
//! before them ([`Table::new_ranged`]). It loads data blocks on demand (in place, through the
//! block cache, or through the seam; `read.rs` reads each one), looks keys up by binary search,
//! and checks every block's CRC for `verify`. Lookups through the hash index block are in
//! `hashed.rs`, the iterator over all entries in `iter.rs`: each an `impl Table` of its own.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::block::{EntryCursor, Layout};
use super::footer::{BlockHandle, Footer};
use super::index::{TableIndex, TableReadOptions, PARSED, PLAIN, VERIFIED};
use super::read::{bad_type, block_end, decompress, read_raw, verify_crc, BlockBytes};
use super::{Compression, BLOCK_TRAILER_LEN};
use crate::error::{Error, Result};
use crate::format::{get_fixed32, ReadAt};

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
    pub(super) file: &'a [u8],
    pub(super) base: u64,
    /// Where the blocks before `base` are read from, if anywhere.
    pub(super) rest: Option<&'a dyn ReadAt>,
    /// The source of `file` to tell, as a scan passes them, that the data blocks behind it
    /// will not be read again soon ([`Table::releasing_behind_scans`]).
    pub(super) scanned: Option<&'a dyn ReadAt>,
    index: IndexRef<'a>,
}

/// How many bytes of data blocks a scan passes before it releases them
/// ([`Table::releasing_behind_scans`]): one `madvise` per MiB, so a scan of a small index
/// makes none and a 145 MiB index keeps about 1 MiB of its pages resident.
pub(super) const RELEASE_EVERY: u64 = 1 << 20;

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
    pub(super) fn view(&self) -> Table<'_> {
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
    pub(super) fn holds(&self, h: &BlockHandle) -> bool {
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
    pub(super) fn located<T>(&self, r: Result<T>) -> Result<T> {
        match (r, &self.index.location) {
            (Err(e), Some(at)) => Err(located_error(e, at)),
            (r, _) => r,
        }
    }

    /// Figures of the table's blocks (what `stat` reports): every data block is read (and
    /// released behind, as a scan does), so this costs a pass over the index.
    pub fn figures(&self) -> Result<TableFigures> {
        self.located(self.index.ensure_checked())?;
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
        self.located(self.index.ensure_checked())?;
        self.located(self.load_block_in(i))
    }

    /// Loads data block `i`: in place if uncompressed, else decompressed (through the cache).
    /// Its CRC is verified on first load when `verify_checksums` is set.
    fn load_block_in(&self, i: usize) -> Result<BlockBytes<'a>> {
        let ix = &*self.index;
        if i >= ix.data_blocks() {
            return Err(Error::InvalidArgument(format!(
                "data block {i} does not exist (the table has {})",
                ix.data_blocks()
            )));
        }
        self.load_block_at(i, ix.block_handle(i))
    }

    /// [`Table::load_block_in`] of block `i < data_blocks()`, whose handle `h` the caller
    /// has decoded.
    pub(super) fn load_block_at(&self, i: usize, h: BlockHandle) -> Result<BlockBytes<'a>> {
        let ix = &*self.index;
        let state = &ix.state[i];
        let known = state.load(Ordering::Acquire);
        let verify = ix.options().verify_checksums && known & VERIFIED == 0;
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
                let caching = ix.options().cache_capacity > 0;
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
        let caching = ix.options().cache_capacity > 0;
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
    pub(super) fn layout_at(&self, i: usize, base: u64, bytes: &BlockBytes<'_>) -> Result<Layout> {
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
        ix.ensure_checked()?;
        for i in 0..ix.data_blocks() {
            let h = ix.block_handle(i);
            let (contents, ty, stored) = self.raw(&h)?;
            verify_crc(&h, &contents, ty, stored)?;
            ix.state[i].fetch_or(VERIFIED, Ordering::AcqRel);
        }
        for h in [ix.footer().metaindex, ix.footer().index] {
            let (contents, ty, stored) = self.raw(&h)?;
            verify_crc(&h, &contents, ty, stored)?;
        }
        let mut n = ix.data_blocks() as u64 + 2;
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
        if self.index.options().hash_index {
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
        self.index.ensure_checked()?;
        let i = self.index.find_block(key);
        if i >= self.index.data_blocks() {
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
}

/// `e` said to be in `location` (out of line: errors are rare).
#[cold]
fn located_error(e: Error, location: &str) -> Error {
    e.context(location)
}

#[cfg(test)]
mod tests {
    use super::super::{build_test_table as build, TableBuilder, TableIter, TableOptions};
    use super::*;
    use crate::format::{crc32c, crc32c_extend};

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn table_is_send_sync() {
        assert_send_sync::<Table<'static>>();
        assert_send_sync::<TableIndex>();
        assert_send_sync::<TableIter<'static>>();
        assert_send_sync::<BlockBytes<'static>>();
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
        assert_eq!(t.index().lock_cache().used(), 0);
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
}
