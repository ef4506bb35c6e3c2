//! The one read seam (issue 26): a file's bytes read by position, whatever holds them. A
//! memory map or memory lends its bytes; a plain file (`pread`) and an object in a bucket
//! (ranged GETs) copy them into a buffer. The open of a native file, its index table and its
//! readers stand on this trait only (LevelDB's `RandomAccessFile`, whose `Read` points into the
//! mapping or into the caller's scratch). The implementations live where their I/O does:
//! `native/read_at.rs` (mapped, memory, `pread`) and `remote/object.rs` (an object).

use std::borrow::Cow;
use std::ops::Range;

use crate::error::{Error, Result};

/// One immutable file (a mapped file, bytes in memory, a file read with `pread`, an object in
/// a bucket) read by byte ranges.
pub trait ReadAt: Send + Sync + std::fmt::Debug {
    /// The file's length in bytes.
    fn len(&self) -> u64;

    /// Whether the file is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the file is (a path or URL), for messages.
    fn location(&self) -> &str;

    /// Exactly the bytes of `range` (within the file), in one read (one request for an
    /// object), copied into a new buffer. A short answer is an error naming the file and the
    /// range, never fewer bytes.
    fn read(&self, range: Range<u64>) -> Result<Vec<u8>>;

    /// Exactly the bytes of `range`: borrowed when the source holds them in memory (a mapped
    /// file, a buffer), else read as [`ReadAt::read`] does.
    fn read_at(&self, range: Range<u64>) -> Result<Cow<'_, [u8]>> {
        self.read(range).map(Cow::Owned)
    }

    /// The last `n` bytes (all of them if the file is shorter), in one read: how an open reads
    /// the footer and, usually, the index block together.
    fn tail(&self, n: u64) -> Result<Vec<u8>> {
        let len = self.len();
        self.read(len.saturating_sub(n)..len)
    }

    /// [`ReadAt::tail`], borrowed when the source holds the bytes in memory.
    fn tail_at(&self, n: u64) -> Result<Cow<'_, [u8]>> {
        self.tail(n).map(Cow::Owned)
    }

    /// A hint that the bytes of `range` will not be read again soon: a scan has passed them.
    /// A mapped file drops those pages from the process (they stay in the page cache, and a
    /// later read faults them back in with the same bytes), so a scan of a whole index does
    /// not keep every page it read resident. Nothing for a source that lends nothing.
    fn release(&self, range: Range<u64>) {
        let _ = range;
    }
}

/// Checks `range` against a file of `len` bytes named `location`; its length.
pub(crate) fn check_range(range: &Range<u64>, len: u64, location: &str) -> Result<usize> {
    if range.start > range.end || range.end > len {
        return Err(Error::corrupt(
            "range",
            range.start,
            format!(
                "{location}: bytes {}..{} lie outside the object's {len} bytes",
                range.start, range.end
            ),
        ));
    }
    usize::try_from(range.end - range.start).map_err(|_| {
        Error::InvalidArgument(format!(
            "{location}: a range of {} bytes does not fit in memory",
            range.end - range.start
        ))
    })
}
