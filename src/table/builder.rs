//! Writing a table, byte-for-byte as TensorFlow's `tsl::table::TableBuilder` does.

use std::io::Write;

use super::block::BlockBuilder;
use super::footer::{BlockHandle, Footer};
use super::hash::{HashBuilder, HashKind, PageSums, HASH_INDEX_KEY, MAX_RUN_POSITION};
use super::{Compression, BLOCK_TRAILER_LEN, MAX_BLOCK_LEN};
use crate::error::{ensure_within, Error, Result};
use crate::format::{crc32c, crc32c_extend, mask_crc};

/// Options for [`TableBuilder`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableOptions {
    /// Target uncompressed size of a data block: a block is written out as soon as its size
    /// estimate reaches this. Must be in `1..=MAX_BLOCK_LEN`. Default 256 KiB (TensorFlow's).
    pub block_size: usize,
    /// Entries between restart points in data blocks (at least 1). Default 16.
    pub restart_interval: usize,
    /// Compression of data and index blocks. Default none (what TensorFlow bundles use).
    pub compression: Compression,
    /// Write a hash index meta block (`paramdex.hash`, SPEC.md 4.5) and list it in the
    /// metaindex, so that readers find a key without binary searches. Default false (what
    /// TensorFlow writes: an empty metaindex). Readers that do not know the block ignore it.
    pub hash_index: bool,
    /// Cut the first data block right after the first entry (the native header entry), so a
    /// reader of the first entry checksums a block of a few dozen bytes, not `block_size`.
    /// Default false (TensorFlow's cutting rule only).
    pub first_entry_alone: bool,
    /// With `hash_index`: write the hash block of kind 1 (SPEC.md 4.5, version 3), whose slots
    /// lead to their entry's run and position and which carries a checksum of every 4 KiB of
    /// the data blocks, instead of kind 0. Needs uncompressed blocks and a restart interval of
    /// at most 256 (otherwise kind 0 is written). Default false.
    pub hash_entries: bool,
    /// With `first_entry_alone`: place the first entry's block (a native file's header) after
    /// the hash block, just before the metaindex, so that the end of the file holds everything
    /// an open reads (SPEC.md 4.2, version 3). Its index entry stays the first. Default false.
    pub first_entry_last: bool,
}

impl TableOptions {
    /// Whether a builder with these options writes the hash block of kind 1: `hash_index` and
    /// `hash_entries` on, uncompressed blocks, restart runs of at most 256 entries (a slot
    /// holds the position in its run in 8 bits).
    pub(crate) fn writes_kind_1(&self) -> bool {
        self.hash_index
            && self.hash_entries
            && self.compression == Compression::None
            && self.restart_interval <= MAX_RUN_POSITION + 1
    }

    /// Checks that `block_size` is in `1..=MAX_BLOCK_LEN` and `restart_interval >= 1`.
    pub fn validate(&self) -> Result<()> {
        if self.block_size == 0 || self.block_size > MAX_BLOCK_LEN {
            return Err(Error::InvalidArgument(format!(
                "table block_size must be in 1..={MAX_BLOCK_LEN}, got {}",
                self.block_size
            )));
        }
        if self.restart_interval == 0 {
            return Err(Error::InvalidArgument(
                "table restart_interval must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

impl Default for TableOptions {
    fn default() -> Self {
        TableOptions {
            block_size: 256 * 1024,
            restart_interval: 16,
            compression: Compression::None,
            hash_index: false,
            first_entry_alone: false,
            hash_entries: false,
            first_entry_last: false,
        }
    }
}

/// Figures about a finished table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableStats {
    /// Number of entries added.
    pub entries: u64,
    /// Number of data blocks written.
    pub data_blocks: u64,
    /// Total uncompressed length of the data blocks (without trailers).
    pub raw_data_block_bytes: u64,
    /// Total stored length of the data blocks (after compression, without trailers).
    pub stored_data_block_bytes: u64,
    /// Stored length of the index block (without its trailer).
    pub index_block_len: u64,
    /// Length of the hash index block (without its trailer), 0 when none was written.
    pub hash_block_len: u64,
    /// Total bytes written by the builder (the whole table, footer included).
    pub table_len: u64,
}

/// LevelDB's `BytewiseComparator::FindShortestSeparator`: if `start < limit` differ at a byte
/// that can be incremented while staying below `limit`'s byte there, increment it and cut
/// `start` after it; otherwise (one is a prefix of the other, or no room) leave `start` as is.
/// The result `s` satisfies `start <= s < limit` when `start < limit`.
pub fn find_shortest_separator(start: &mut Vec<u8>, limit: &[u8]) {
    let min_len = start.len().min(limit.len());
    let diff = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
    if diff >= min_len {
        return; // one is a prefix of the other
    }
    let b = start[diff];
    if b < 0xff && b + 1 < limit[diff] {
        start[diff] = b + 1;
        start.truncate(diff + 1);
    }
}

/// LevelDB's `BytewiseComparator::FindShortSuccessor`: increment the first byte that is not
/// 0xff and cut after it; a key made only of 0xff bytes (or empty) is left alone.
pub fn find_short_successor(key: &mut Vec<u8>) {
    if let Some(i) = key.iter().position(|&b| b != 0xff) {
        key[i] += 1;
        key.truncate(i + 1);
    }
}

/// Largest overhead of one block entry beyond key and value: three 5-byte varints.
const ENTRY_OVERHEAD: usize = 15;

/// Writes a table to `W`. Keys must be added in strictly increasing bytewise order.
///
/// Every block handle written is absolute: `start_offset` is where the table's first byte lands
/// in the file. After an error the builder refuses further use.
#[derive(Debug)]
pub struct TableBuilder<W: Write> {
    writer: W,
    opts: TableOptions,
    start_offset: u64,
    /// Absolute offset of the next byte to be written.
    offset: u64,
    data_block: BlockBuilder,
    /// The index entries (separator, handle), encoded at `finish` (the first one's handle is
    /// only known then when the first block is held back).
    index_entries: Vec<(Vec<u8>, BlockHandle)>,
    /// Size estimate of the index block the entries make.
    index_estimate: usize,
    last_key: Vec<u8>,
    /// Handle of the last flushed data block whose index entry awaits the next key.
    pending_index: Option<BlockHandle>,
    stats: TableStats,
    handle_buf: Vec<u8>,
    compressed: Vec<u8>,
    encoder: snap::raw::Encoder,
    failed: bool,
    /// The hash index being accumulated (`opts.hash_index`).
    hash: Option<HashBuilder>,
    /// Kind 1 hash: the checksums of the data pages, fed every byte written before the hash
    /// block.
    sums: Option<PageSums>,
    /// `first_entry_last`: the first block, finished (contents and trailer), waiting to be
    /// written after the hash block.
    held: Option<Vec<u8>>,
}

impl<W: Write> TableBuilder<W> {
    /// A builder writing to `writer`, whose first byte is at absolute file offset `start_offset`.
    /// Fails with [`Error::InvalidArgument`] if the options are out of range
    /// ([`TableOptions::validate`]).
    pub fn new(writer: W, start_offset: u64, opts: TableOptions) -> Result<Self> {
        opts.validate()?;
        let entries_hash = opts.writes_kind_1();
        let kind = if entries_hash {
            HashKind::Entries
        } else {
            HashKind::Runs
        };
        Ok(TableBuilder {
            writer,
            opts,
            start_offset,
            offset: start_offset,
            data_block: BlockBuilder::new(opts.restart_interval),
            index_entries: Vec::new(),
            index_estimate: 8,
            last_key: Vec::new(),
            pending_index: None,
            stats: TableStats::default(),
            handle_buf: Vec::with_capacity(BlockHandle::MAX_ENCODED_LEN),
            compressed: Vec::new(),
            encoder: snap::raw::Encoder::new(),
            failed: false,
            hash: opts.hash_index.then(|| HashBuilder::new(kind)),
            sums: entries_hash.then(|| PageSums::new(start_offset)),
            held: None,
        })
    }

    /// Number of entries added so far.
    pub fn entries(&self) -> u64 {
        self.stats.entries
    }

    /// Bytes written to the writer so far.
    pub fn bytes_written(&self) -> u64 {
        self.offset - self.start_offset
    }

    fn check_usable(&self) -> Result<()> {
        if self.failed {
            Err(Error::InvalidArgument(
                "table builder used after an earlier error".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// Adds an entry. `key` must be strictly greater (bytewise) than the previous key.
    pub fn add(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_usable()?;
        if self.stats.entries > 0 && key <= self.last_key.as_slice() {
            return Err(Error::InvalidArgument(format!(
                "table keys must be strictly increasing: {} added after {}",
                crate::name::display(key),
                crate::name::display(&self.last_key)
            )));
        }
        let entry_len = key.len().saturating_add(value.len());
        // Largest entry that fits, alone, in a block the reader accepts.
        let max_entry = MAX_BLOCK_LEN - ENTRY_OVERHEAD - 8;
        ensure_within("table entry size (key + value)", entry_len, max_entry, None)?;
        let r = self.add_inner(key, value, entry_len);
        if r.is_err() {
            self.failed = true;
        }
        r
    }

    fn add_inner(&mut self, key: &[u8], value: &[u8], entry_len: usize) -> Result<()> {
        // TensorFlow: an entry of at least twice the block size starts a block of its own.
        // Also start a new block if the entry would push this one past what readers accept
        // (TensorFlow would write a block we could not read; it cannot happen with its options).
        if (entry_len >= 2 * self.opts.block_size
            || self.data_block.size_estimate() + ENTRY_OVERHEAD + 4 + entry_len > MAX_BLOCK_LEN)
            && !self.data_block.is_empty()
        {
            self.flush()?;
        }
        if let Some(handle) = self.pending_index.take() {
            find_shortest_separator(&mut self.last_key, key);
            self.add_index_entry(handle)?;
        }
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.stats.entries += 1;
        self.data_block.add(key, value);
        // A kind 1 block leaves out the first data block's keys (it may be placed after the
        // hash block, outside the data region the block covers): they are found by binary
        // search (SPEC.md 4.5).
        let unhashed = self.sums.is_some() && self.stats.data_blocks == 0;
        if let Some(h) = self.hash.as_mut().filter(|_| !unhashed) {
            // The block being built is the next one to be written.
            // It will be written at `self.offset` (the held block is not written before it),
            // so its run lies there in the data region, which starts at `start_offset`.
            let (restart, run_offset, position) = self.data_block.current_run();
            let in_region = self.offset - self.start_offset + run_offset as u64;
            h.add(key, self.stats.data_blocks, restart, in_region, position);
        }
        if self.data_block.size_estimate() >= self.opts.block_size
            || (self.opts.first_entry_alone && self.stats.entries == 1)
        {
            self.flush()?;
        }
        Ok(())
    }

    /// Adds the index entry (`self.last_key` -> `handle`).
    fn add_index_entry(&mut self, handle: BlockHandle) -> Result<()> {
        let est = self.index_estimate
            + ENTRY_OVERHEAD
            + 4
            + self.last_key.len()
            + BlockHandle::MAX_ENCODED_LEN;
        ensure_within("index block length", est, MAX_BLOCK_LEN, None)?;
        self.index_estimate = est;
        self.index_entries.push((self.last_key.clone(), handle));
        Ok(())
    }

    /// Writes out the current data block, if any.
    fn flush(&mut self) -> Result<()> {
        if self.data_block.is_empty() {
            return Ok(());
        }
        debug_assert!(self.pending_index.is_none());
        let hold = self.opts.first_entry_alone
            && self.opts.first_entry_last
            && self.stats.data_blocks == 0;
        let (handle, raw_len) = if hold {
            // Written after the hash block; its handle is filled in then.
            let mut held = Vec::new();
            let (h, n) = write_block(
                &mut held,
                &mut 0,
                &mut self.data_block,
                self.opts.compression,
                &mut self.encoder,
                &mut self.compressed,
                None,
            )?;
            self.held = Some(held);
            (h, n)
        } else {
            write_block(
                &mut self.writer,
                &mut self.offset,
                &mut self.data_block,
                self.opts.compression,
                &mut self.encoder,
                &mut self.compressed,
                self.sums.as_mut(),
            )?
        };
        self.stats.data_blocks += 1;
        self.stats.raw_data_block_bytes += raw_len as u64;
        self.stats.stored_data_block_bytes += handle.size;
        self.pending_index = Some(handle);
        Ok(())
    }

    /// Writes the held first block (`first_entry_last`) here and gives its index entry its
    /// offset.
    fn place_held(&mut self, held: &[u8]) -> Result<()> {
        let offset = self.offset;
        write_all(&mut self.writer, &mut self.offset, held)?;
        let h = if self.index_entries.is_empty() {
            self.pending_index.as_mut()
        } else {
            self.index_entries.first_mut().map(|(_, h)| h)
        };
        if let Some(h) = h {
            h.offset = offset;
        }
        Ok(())
    }

    /// Writes the last data block, the metaindex block, the index block and the footer, flushes
    /// the writer and returns it with the table's figures.
    pub fn finish(mut self) -> Result<(W, TableStats)> {
        self.check_usable()?;
        self.flush()?;
        // The hash index block (uncompressed: it is read in place), then the metaindex listing
        // it; without it the metaindex is the empty block, as TensorFlow writes it.
        if self.stats.data_blocks == 1 {
            // The first block alone (a file without tensors) stays first: the hash block must
            // follow the last data block.
            if let Some(held) = self.held.take() {
                self.place_held(&held)?;
                if let Some(sums) = &mut self.sums {
                    sums.update(&held);
                }
            }
        }
        let mut meta = BlockBuilder::new(self.opts.restart_interval);
        let pages = self.sums.take().map(PageSums::finish);
        if let Some(contents) = self.hash.take().and_then(|h| h.finish(pages)) {
            let handle = BlockHandle {
                offset: self.offset,
                size: contents.len() as u64,
            };
            let crc = crc32c_extend(crc32c(&contents), &[Compression::None.type_byte()]);
            let mut trailer = [0u8; BLOCK_TRAILER_LEN];
            trailer[1..].copy_from_slice(&mask_crc(crc).to_le_bytes());
            write_all(&mut self.writer, &mut self.offset, &contents)?;
            write_all(&mut self.writer, &mut self.offset, &trailer)?;
            self.stats.hash_block_len = handle.size;
            self.handle_buf.clear();
            handle.encode_to(&mut self.handle_buf);
            meta.add(HASH_INDEX_KEY, &self.handle_buf);
        }
        if let Some(held) = self.held.take() {
            // The first block, after the hash block.
            self.place_held(&held)?;
        }
        let (metaindex, _) = write_block(
            &mut self.writer,
            &mut self.offset,
            &mut meta,
            Compression::None,
            &mut self.encoder,
            &mut self.compressed,
            None,
        )?;
        if let Some(handle) = self.pending_index.take() {
            find_short_successor(&mut self.last_key);
            self.add_index_entry(handle)?;
        }
        let mut index_block = BlockBuilder::new(1);
        for (key, handle) in std::mem::take(&mut self.index_entries) {
            self.handle_buf.clear();
            handle.encode_to(&mut self.handle_buf);
            index_block.add(&key, &self.handle_buf);
        }
        let (index, _) = write_block(
            &mut self.writer,
            &mut self.offset,
            &mut index_block,
            self.opts.compression,
            &mut self.encoder,
            &mut self.compressed,
            None,
        )?;
        let footer = Footer { metaindex, index }.encode();
        write_all(&mut self.writer, &mut self.offset, &footer)?;
        self.writer
            .flush()
            .map_err(|e| Error::io("writing index table", e))?;
        self.stats.index_block_len = index.size;
        self.stats.table_len = self.offset - self.start_offset;
        Ok((self.writer, self.stats))
    }
}

fn write_all<W: Write>(w: &mut W, offset: &mut u64, bytes: &[u8]) -> Result<()> {
    *offset = offset
        .checked_add(bytes.len() as u64)
        .ok_or_else(|| Error::InvalidArgument("table offsets overflow u64".into()))?;
    w.write_all(bytes)
        .map_err(|e| Error::io("writing index table", e))
}

/// Finishes `block`, compresses it if asked and worthwhile, writes it and its trailer (adding
/// both to `sums` when given), resets the block. Returns its handle and its uncompressed
/// length.
fn write_block<W: Write>(
    w: &mut W,
    offset: &mut u64,
    block: &mut BlockBuilder,
    compression: Compression,
    encoder: &mut snap::raw::Encoder,
    compressed: &mut Vec<u8>,
    sums: Option<&mut PageSums>,
) -> Result<(BlockHandle, usize)> {
    let raw = block.finish();
    let raw_len = raw.len();
    let mut contents: &[u8] = raw;
    let mut kind = Compression::None;
    if compression == Compression::Snappy {
        compressed.clear();
        compressed.resize(snap::raw::max_compress_len(raw.len()), 0);
        if let Ok(n) = encoder.compress(raw, compressed) {
            if n < raw.len() - raw.len() / 8 {
                compressed.truncate(n);
                contents = compressed;
                kind = Compression::Snappy;
            }
        }
    }
    let handle = BlockHandle {
        offset: *offset,
        size: contents.len() as u64,
    };
    let type_byte = kind.type_byte();
    let crc = crc32c_extend(crc32c(contents), &[type_byte]);
    let mut trailer = [0u8; BLOCK_TRAILER_LEN];
    trailer[0] = type_byte;
    trailer[1..].copy_from_slice(&mask_crc(crc).to_le_bytes());
    write_all(w, offset, contents)?;
    write_all(w, offset, &trailer)?;
    if let Some(sums) = sums {
        sums.update(contents);
        sums.update(&trailer);
    }
    block.reset();
    Ok((handle, raw_len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separator_matches_leveldb() {
        let sep = |a: &[u8], b: &[u8]| {
            let mut s = a.to_vec();
            find_shortest_separator(&mut s, b);
            s
        };
        assert_eq!(sep(b"abc1xyz", b"abc5"), b"abc2");
        assert_eq!(sep(b"abc1xyz", b"abc2"), b"abc1xyz"); // no room: +1 not < limit byte
        assert_eq!(sep(b"abc", b"abcd"), b"abc"); // prefix
        assert_eq!(sep(b"abcd", b"abc"), b"abcd");
        assert_eq!(sep(b"a\xffz", b"b\x00"), b"a\xffz".to_vec()); // 'a'+1 == 'b'
        assert_eq!(sep(b"\xff\x01", b"\xff\x05"), b"\xff\x02".to_vec());
        assert_eq!(sep(b"x\xff", b"y"), b"x\xff".to_vec());
        assert_eq!(
            sep(b"layer_02946/x", b"layer_02947/y"),
            b"layer_02946/x".to_vec()
        );
        assert_eq!(sep(b"", b"a"), b"".to_vec());
        assert_eq!(sep(b"the quick brown fox", b"the who"), b"the r".to_vec());
    }

    #[test]
    fn successor_matches_leveldb() {
        let succ = |a: &[u8]| {
            let mut s = a.to_vec();
            find_short_successor(&mut s);
            s
        };
        assert_eq!(succ(b"w"), b"x");
        assert_eq!(succ(b"v"), b"w");
        assert_eq!(succ(b"layer_05999/abc"), b"m");
        assert_eq!(succ(b"\xff\xffa\xff"), b"\xff\xffb".to_vec());
        assert_eq!(succ(b"\xff\xff"), b"\xff\xff".to_vec());
        assert_eq!(succ(b""), b"".to_vec());
    }

    #[test]
    fn options_validated() {
        let bad = |o: TableOptions| TableBuilder::new(Vec::new(), 0, o).is_err();
        let d = TableOptions::default();
        assert_eq!(d.block_size, 262_144);
        assert_eq!(d.restart_interval, 16);
        assert_eq!(d.compression, Compression::None);
        assert!(bad(TableOptions { block_size: 0, ..d }));
        assert!(bad(TableOptions {
            block_size: MAX_BLOCK_LEN + 1,
            ..d
        }));
        assert!(bad(TableOptions {
            restart_interval: 0,
            ..d
        }));
        assert!(!bad(TableOptions {
            block_size: 1,
            restart_interval: 1,
            ..d
        }));
        assert!(!bad(TableOptions {
            block_size: MAX_BLOCK_LEN,
            ..d
        }));
    }

    #[test]
    fn rejects_unordered_keys() {
        let mut b = TableBuilder::new(Vec::new(), 0, TableOptions::default()).unwrap();
        b.add(b"", b"h").unwrap();
        b.add(b"b", b"1").unwrap();
        let e = b.add(b"a", b"2").unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)));
        let s = e.to_string();
        assert!(s.contains('a') && s.contains('b'), "{s}");
        assert!(b.add(b"b", b"2").is_err());
        assert_eq!(b.entries(), 2);
        b.add(b"c", b"3").unwrap();
        let (out, stats) = b.finish().unwrap();
        assert_eq!(stats.entries, 3);
        assert_eq!(stats.table_len, out.len() as u64);
    }

    #[test]
    fn empty_table_and_start_offset() {
        let b = TableBuilder::new(Vec::new(), 1000, TableOptions::default()).unwrap();
        assert_eq!(b.bytes_written(), 0);
        let (out, stats) = b.finish().unwrap();
        // metaindex (8+5), empty index (8+5), footer.
        assert_eq!(out.len(), 13 + 13 + 48);
        assert_eq!(stats.data_blocks, 0);
        let f = Footer::decode(&out[26..], 1026).unwrap();
        assert_eq!(
            f.metaindex,
            BlockHandle {
                offset: 1000,
                size: 8
            }
        );
        assert_eq!(
            f.index,
            BlockHandle {
                offset: 1013,
                size: 8
            }
        );
    }

    #[test]
    fn flush_rules_follow_tensorflow() {
        let opts = TableOptions {
            block_size: 64,
            ..TableOptions::default()
        };
        // Small entries: flush once the estimate reaches 64.
        let mut b = TableBuilder::new(Vec::new(), 0, opts).unwrap();
        let mut blocks_after = Vec::new();
        for i in 0..10u8 {
            b.add(&[b'k', i], &[0u8; 10]).unwrap();
            blocks_after.push(b.stats.data_blocks);
        }
        // Each entry is 3 + 2 + 10 (first) / 3 + 1 + 10 (rest); estimate = buf + 8.
        // 15+8=23, 29+8=37, 43+8=51, 57+8=65 -> flush at the 4th entry.
        assert_eq!(blocks_after[..4], [0, 0, 0, 1]);
        // Exactly reaching block_size flushes too (>=, as TensorFlow).
        let mut b = TableBuilder::new(
            Vec::new(),
            0,
            TableOptions {
                block_size: 65,
                ..opts
            },
        )
        .unwrap();
        for i in 0..4u8 {
            b.add(&[b'k', i], &[0u8; 10]).unwrap();
        }
        assert_eq!(b.stats.data_blocks, 1);
        // An entry of >= 2*block_size starts its own block.
        let mut b = TableBuilder::new(Vec::new(), 0, opts).unwrap();
        b.add(b"a", b"x").unwrap();
        b.add(b"b", &[0u8; 127]).unwrap(); // 128 >= 128: flush "a" first
        assert_eq!(b.stats.data_blocks, 2);
        let (_, st) = b.finish().unwrap();
        assert_eq!(st.data_blocks, 2);
        assert_eq!(st.raw_data_block_bytes, st.stored_data_block_bytes);
    }

    #[test]
    fn io_errors_are_reported() {
        struct Fail;
        impl Write for Fail {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::other("disk full"))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let opts = TableOptions {
            block_size: 1,
            ..TableOptions::default()
        };
        let mut b = TableBuilder::new(Fail, 0, opts).unwrap();
        let e = b.add(b"a", b"1").unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        assert!(e.to_string().contains("writing index table"));
        assert!(b.add(b"b", b"1").is_err());
        assert!(b.finish().is_err());
    }
}
