//! Verifying a native file (SPEC.md 8.2): every block checksum, every tensor's data checksum on
//! several threads, every record against its index entry, and that the records tile the records
//! region. [`Reader::verify_with`](crate::Reader::verify_with) is the one implementation; the CLI's `verify` calls it.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::{crc32c_combine, crc32c_combine_with, crc32c_shift};
use crate::name;
use crate::native::entry::IndexEntry;
use crate::native::header::FileHeader;
use crate::native::load::LoadOptions;
use crate::native::mapped::MappedReader;
use crate::native::view::TensorView;
use crate::parallel::resolve_threads;
use crate::progress::{Progress, Unit};
use crate::record::{self, MAX_RANK};
use crate::table::Table;

// The data checksums of a batch of tensors are checked on several threads: the bytes are cut
// into pieces of at most [`PIECE`] bytes (a small tensor is one piece, a large one many), the
// pieces are checksummed by scoped threads that claim them from a shared counter, and each
// tensor's CRC32C is assembled from its pieces' CRCs with `crc32c_combine`. So two threads help
// even when the file holds one huge tensor, and memory stays bounded by the batch.

/// Largest piece of one tensor checksummed as a unit: large enough that the per-piece costs
/// (claiming, `crc32c_combine`) vanish, small enough to balance two threads on one tensor.
const PIECE: usize = 1 << 20;

/// Below this many bytes in a batch, one thread does it all (spawning would cost more).
const PARALLEL_MIN_BYTES: u64 = 4 << 20;

/// How [`Reader::verify_with`](crate::Reader::verify_with) runs.
#[derive(Clone, Copy, Default)]
pub struct VerifyOptions<'a> {
    /// Threads for the data checksums (0 = all cores).
    pub threads: usize,
    /// Told the data bytes to check ([`Unit::Bytes`]) and each piece as it is checked, from
    /// the checking threads. Giving one costs a first pass over the index, for the total.
    pub progress: Option<&'a dyn Progress>,
    /// For a reader by ranges: how records are fetched (the reader's
    /// [`RemoteOptions::load`](crate::remote::RemoteOptions::load) when `None`).
    pub load: Option<&'a LoadOptions>,
}

impl std::fmt::Debug for VerifyOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyOptions")
            .field("threads", &self.threads)
            .field("progress", &self.progress.is_some())
            .field("load", &self.load)
            .finish()
    }
}

/// What [`Reader::verify`](crate::Reader::verify) checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Index blocks whose CRC32C matched (data blocks, metaindex and index block; for a
    /// sharded checkpoint, its index's and every data file's).
    pub blocks: u64,
    /// Tensors whose data CRC32C matched and whose record agrees with the index (a tensor
    /// stored in slices once, all its slices checked).
    pub tensors: u64,
    /// Slices of tensors stored in slices, each checked as a tensor is (SPEC.md 13).
    pub slices: u64,
    /// Records checked, each with its data checksum: one per whole tensor and per slice.
    pub records: u64,
    /// Tensor data bytes checksummed.
    pub data_bytes: u64,
}

impl MappedReader {
    /// [`Reader::verify_with`](crate::Reader::verify_with) on all cores, without progress reports.
    pub(crate) fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(VerifyOptions::default())
    }

    /// [`Reader::verify_index`](crate::Reader::verify_index): every index block's CRC32C and the hash index.
    pub(crate) fn verify_index(&self) -> Result<u64> {
        self.table().verify_all_blocks()
    }

    /// Checks everything SPEC.md 8.2 lets a reader check: every block checksum, every tensor's
    /// data checksum, that every record's header agrees with its index entry (dtype, shape,
    /// name, position), that the header's tensor count is right, and that the records tile the
    /// records region. The first error in name order is reported. The CLI's `verify` is this.
    ///
    /// For a sharded checkpoint, every data file is verified so (several at once), and the
    /// index is checked against them: see [`Reader::shard`](crate::Reader::shard) and SPEC.md 12.4.
    pub fn verify_with(&self, opts: VerifyOptions<'_>) -> Result<VerifyReport> {
        if self.shards.is_some() {
            return self.verify_sharded(opts);
        }
        let blocks = self.table().verify_all_blocks()?;
        let threads = resolve_threads(opts.threads);
        let progress = opts.progress;
        if let Some(p) = progress {
            // The index alone gives the total; no data is read.
            let mut total = 0u64;
            for v in self.iter() {
                total += v?.data().len() as u64;
            }
            p.start(total, Unit::Bytes);
        }
        // Tensors are checked in batches of bounded size, so memory does not grow with the
        // number of tensors; the first error in name order is reported, whatever its kind.
        const BATCH_VIEWS: usize = 4096;
        const BATCH_BYTES: u64 = 256 << 20;
        let mut batch: Vec<TensorView<'_>> = Vec::with_capacity(BATCH_VIEWS);
        let mut batch_bytes = 0u64;
        let mut tally = Tally::new();
        let mut last_sliced: Option<Vec<u8>> = None;
        let mut it = self.iter();
        loop {
            let mut full = false;
            let mut failed = None;
            for v in it.by_ref() {
                match v.and_then(|v| tally.add(&v).map(|()| v)) {
                    Ok(v) => {
                        // A tensor stored in slices counts once (its slices come together,
                        // in name order).
                        if v.slice_start().is_none() || last_sliced.as_deref() != Some(v.name()) {
                            tally.tensors += 1;
                        }
                        if v.slice_start().is_some() && last_sliced.as_deref() != Some(v.name()) {
                            last_sliced = Some(v.name().to_vec());
                        }
                        batch_bytes += v.data().len() as u64;
                        batch.push(v);
                        if batch.len() >= BATCH_VIEWS || batch_bytes >= BATCH_BYTES {
                            full = true;
                            break;
                        }
                    }
                    Err(e) => {
                        failed = Some(e);
                        break;
                    }
                }
            }
            // Tensors before a bad record come first in name order: check them first.
            tally.data_bytes += check_crcs(&batch, threads, progress)?;
            for v in &batch {
                tally.uncount_framing(v)?;
            }
            batch.clear();
            batch_bytes = 0;
            if let Some(e) = failed {
                return Err(e);
            }
            if !full {
                break;
            }
        }
        let keyed = self.slice_keys()?;
        let first_block = self.index.first_data_offset().unwrap_or(0);
        tally.finish(&self.header, first_block, keyed, blocks, |stored| {
            // The fingerprints say that the records do not tile the region: walk it to say
            // where (the walk reports the first record that is not its entry's, or a gap).
            self.check_records_tile(stored)
        })
    }

    /// Number of keys in the slice space (starting with a NUL byte) of a version 2 file.
    fn slice_keys(&self) -> Result<u64> {
        slice_keys(&self.table(), self.header.format_version >= 2)
    }

    /// Walks the records region from offset 0, record by record (O(1) memory), and checks that
    /// every record is the one the index entry of its name points at, and that there are as
    /// many as index entries: the records then tile the region exactly, so no two tensors'
    /// records overlap and no bytes hide between them (SPEC.md 2, 8.2).
    fn check_records_tile(&self, entries: u64) -> Result<()> {
        let mut walked = 0u64;
        // In a file whose records are in name order (`records_sorted`: written in that order, as
        // `convert` and `merge` do) an index cursor walked alongside finds each record's entry
        // without a lookup. A record that is not the cursor's next name is looked up instead, so
        // any order gives the same checks, and a file in another order pays one key comparison
        // per record more.
        let table = self.table();
        let mut cursor = table.iter();
        let mut on_entry = cursor.next()?;
        while on_entry && cursor.key().is_empty() {
            on_entry = cursor.next()?; // the header entry
        }
        for r in record::walk(self.records(), 0) {
            let (offset, h, _) = r?;
            let bad = |detail: String| Error::corrupt("record", offset, detail);
            let name = h
                .name
                .filter(|n| !n.is_empty())
                .ok_or_else(|| bad("a record of a native file without a name".into()))?;
            // The entry itself (not a view, which would checksum the data a second time).
            let entry = if on_entry && cursor.key() == name {
                let e = IndexEntry::decode(cursor.value(), cursor.block_offset(), MAX_RANK)?;
                on_entry = cursor.next()?;
                Some(e)
            } else {
                table
                    .get(name, |value, at| IndexEntry::decode(value, at, MAX_RANK))?
                    .transpose()?
            };
            let entry = entry.ok_or_else(|| {
                bad(format!(
                    "record of tensor {} has no index entry",
                    name::display(name)
                ))
            })?;
            let points_at = entry.offset.checked_sub(u64::from(entry.record_header_len));
            if points_at != Some(offset) {
                return Err(bad(format!(
                    "record of tensor {} is not the one its index entry points at (offset {} - {})",
                    name::display(name),
                    entry.offset,
                    entry.record_header_len
                )));
            }
            walked += 1;
        }
        if walked != entries {
            return Err(Error::corrupt(
                "record",
                0,
                format!("the records region holds {walked} records, the index {entries}"),
            ));
        }
        Ok(())
    }
}

/// Number of keys in the slice space (starting with a NUL byte) of the index `table` of a
/// version 2 file (`is_v2`; none in version 1).
pub(crate) fn slice_keys(table: &Table<'_>, is_v2: bool) -> Result<u64> {
    if !is_v2 {
        return Ok(0);
    }
    let mut it = table.iter();
    it.seek(b"\x00")?;
    let mut n = 0u64;
    while it.valid() && it.key().first() == Some(&0) {
        n += 1;
        it.next()?;
    }
    Ok(n)
}

/// What verify finds of each stored tensor and slice, and the checks of the whole it ends
/// with: the one verify of a native file for every reader (a mapped file's views, the records
/// a remote reader fetches). The caller checks each view's data CRC32C and counts
/// `tensors` (a tensor stored in slices once).
pub(crate) struct Tally {
    /// Tensors seen (a tensor stored in slices once).
    pub(crate) tensors: u64,
    slices: u64,
    stored: u64,
    /// Data bytes checksummed.
    pub(crate) data_bytes: u64,
    tiling: Tiling,
}

impl Tally {
    pub(crate) fn new() -> Self {
        Tally {
            tensors: 0,
            slices: 0,
            stored: 0,
            data_bytes: 0,
            tiling: Tiling::new(),
        }
    }

    /// Takes back from `data_bytes` what of `v`'s data is a bytes value's length field: a bytes
    /// value counts its value's bytes, as listings show it (SPEC.md 6.1); reading the value
    /// checks that field too. Both readers call it after counting a view's data, so their
    /// reports agree.
    pub(crate) fn uncount_framing(&mut self, v: &TensorView<'_>) -> Result<()> {
        if v.dtype() == DType::Bytes {
            let framing = v.data().len() - v.bytes_value()?.len();
            self.data_bytes -= framing as u64;
        }
        Ok(())
    }

    /// Checks the record of `v` against its index entry ([`TensorView::check_record`]) and
    /// counts it, and its extent towards the tiling of the records region.
    pub(crate) fn add(&mut self, v: &TensorView<'_>) -> Result<()> {
        v.check_record()?;
        self.stored += 1;
        // check_record: the record's header ends where its data begins.
        self.tiling
            .add(v.record_offset, v.data_offset + v.stored_len());
        if v.slice_start().is_some() {
            self.slices += 1;
        }
        Ok(())
    }

    /// The checks of the whole, against `header` (whose entry is in the block at
    /// `first_block`) and the `keyed` slice keys of the index: the tensor and slice counts,
    /// and that the records tile the records region (`walk`, given the number of records,
    /// names the culprit where it can). `blocks`: the index blocks whose CRC32C matched.
    pub(crate) fn finish(
        self,
        header: &FileHeader,
        first_block: u64,
        keyed: u64,
        blocks: u64,
        walk: impl FnOnce(u64) -> Result<()>,
    ) -> Result<VerifyReport> {
        if self.tensors != header.tensor_count {
            return Err(Error::corrupt(
                "header entry",
                first_block,
                format!(
                    "header says {} tensors, the index holds {}",
                    header.tensor_count, self.tensors
                ),
            ));
        }
        // Every slice key is one that a partitioned tensor lists (each listed one was reached,
        // and they are distinct since slices do not overlap).
        if self.slices != header.slice_count || keyed != self.slices {
            return Err(Error::corrupt(
                "header entry",
                first_block,
                format!(
                    "header says {} slices, the partitioned tensors list {}, the index \
                     holds {keyed} slice keys",
                    header.slice_count, self.slices
                ),
            ));
        }
        if !self.tiling.tiles(header.records_len) {
            walk(self.stored)?;
            return Err(Error::corrupt(
                "record",
                0,
                "the index entries' records do not tile the records region".to_string(),
            ));
        }
        Ok(VerifyReport {
            blocks,
            tensors: self.tensors,
            slices: self.slices,
            records: self.stored,
            data_bytes: self.data_bytes,
        })
    }
}

/// Whether the records of the index entries tile the records region `[0, L)` exactly (no gap,
/// no overlap, nothing after the last), checked in one pass over the entries in any order and
/// O(1) memory, instead of walking the region and looking up each record's entry (which was a
/// quarter of `verify`'s time when names are not written in bytewise order: BENCHMARKS.md).
///
/// Each record `[start, end)` (with `start < end`, its header parsed and checked against its
/// entry) is an edge `start -> end`. The edges tile `[0, L)` iff the multiset of starts plus
/// `{L}` equals the multiset of ends plus `{0}`: then every position has as many edges in as
/// out except 0 (one more out) and L (one more in), so the edges form one path from 0 to L
/// plus cycles, and there are no cycles since every edge goes forward; a path from 0 to L
/// through every edge is exactly a tiling. The multisets are compared by sums of a keyed hash
/// of each element (an additive multiset hash), two independent 64-bit lanes keyed at random
/// per verify (`RandomState`: SipHash with random keys), so a file cannot be crafted to
/// collide; an accidental collision has probability about 2^-128. A mismatch falls back to the
/// exact walk, which names the offending record.
struct Tiling {
    keys: [std::collections::hash_map::RandomState; 2],
    starts: [u64; 2],
    ends: [u64; 2],
    backwards: bool,
}

impl Tiling {
    fn new() -> Self {
        Tiling {
            keys: [Default::default(), Default::default()],
            starts: [0; 2],
            ends: [0; 2],
            backwards: false,
        }
    }

    fn add(&mut self, start: u64, end: u64) {
        self.backwards |= end <= start;
        for lane in 0..2 {
            let k = &self.keys[lane];
            self.starts[lane] = self.starts[lane].wrapping_add(k.hash_one(start));
            self.ends[lane] = self.ends[lane].wrapping_add(k.hash_one(end));
        }
    }

    fn tiles(&self, len: u64) -> bool {
        !self.backwards
            && (0..2).all(|lane| {
                let k = &self.keys[lane];
                self.starts[lane].wrapping_add(k.hash_one(len))
                    == self.ends[lane].wrapping_add(k.hash_one(0u64))
            })
    }
}

/// One piece: the tensor it belongs to and its byte range in that tensor's data.
struct Piece {
    view: usize,
    start: usize,
    len: usize,
}

/// Checks the CRC32C of every view on up to `threads` threads (0 = available parallelism).
/// Returns the bytes checked, or the first mismatch in the order of `views`.
pub(crate) fn check_crcs(
    views: &[TensorView<'_>],
    threads: usize,
    progress: Option<&dyn Progress>,
) -> Result<u64> {
    let total: u64 = views.iter().map(|v| v.data().len() as u64).sum();
    let threads = resolve_threads(threads);
    if threads <= 1 || total < PARALLEL_MIN_BYTES {
        for v in views {
            v.verify_crc()?;
        }
        if let Some(p) = progress {
            p.advance(total);
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
            if let Some(progress) = progress {
                progress.advance(p.len as u64);
            }
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
    let full_piece = crc32c_shift(PIECE as u64);
    let mut k = 0;
    for (i, v) in views.iter().enumerate() {
        let mut crc = crcs[k].load(Ordering::Relaxed);
        k += 1;
        while k < pieces.len() && pieces[k].view == i {
            let piece = crcs[k].load(Ordering::Relaxed);
            crc = if pieces[k].len == PIECE {
                crc32c_combine_with(full_piece, crc, piece)
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
    use super::Tiling;

    fn tiles(ranges: &[(u64, u64)], len: u64) -> bool {
        let mut t = Tiling::new();
        for &(s, e) in ranges {
            t.add(s, e);
        }
        t.tiles(len)
    }

    #[test]
    fn ranges_in_any_order_that_chain_from_zero_to_the_end_tile() {
        assert!(tiles(&[], 0));
        assert!(tiles(&[(0, 10)], 10));
        assert!(tiles(&[(0, 3), (3, 7), (7, 10)], 10));
        assert!(tiles(&[(7, 10), (0, 3), (3, 7)], 10));
    }

    #[test]
    fn gaps_overlaps_duplicates_and_short_or_long_regions_do_not() {
        assert!(!tiles(&[], 10)); // records hidden from the index
        assert!(!tiles(&[(0, 10)], 12)); // bytes after the last record
        assert!(!tiles(&[(0, 3), (4, 10)], 10)); // a gap
        assert!(!tiles(&[(0, 5), (3, 10)], 10)); // an overlap
        assert!(!tiles(&[(0, 5), (0, 5), (5, 10)], 10)); // one record twice
        assert!(!tiles(&[(0, 10), (3, 5)], 10)); // a record inside another
        assert!(!tiles(&[(0, 10)], 5)); // past the region

        // Balanced in and out, but through an edge that goes backwards (or nowhere).
        assert!(!tiles(&[(0, 5), (5, 3), (3, 5), (5, 10)], 10));
        assert!(!tiles(&[(0, 5), (5, 5), (5, 10)], 10));
    }
}
