//! The bytes of one object, read by ranges, each read one request: what a reader of a remote
//! checkpoint stands on (issue 15). [`FileRange`] reads a local file so (with `pread`), which
//! is how the remote reader is tested request by request without a server; the object-storage
//! implementation counts its ranged GETs the same way.

use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};

/// Requests made and bytes received so far by a [`RangeRead`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Reads (ranged GETs for an object store).
    pub requests: u64,
    /// Bytes received.
    pub bytes: u64,
}

/// One immutable object (a file, an object in a bucket) read by byte ranges.
pub trait RangeRead: Send + Sync + std::fmt::Debug {
    /// The object's length in bytes.
    fn len(&self) -> u64;

    /// Whether the object is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Where the object is (a path or URL), for messages.
    fn location(&self) -> &str;

    /// Exactly the bytes of `range` (within the object), in one request. A short answer is an
    /// error naming the object and the range, never fewer bytes.
    fn read(&self, range: Range<u64>) -> Result<Vec<u8>>;

    /// The last `n` bytes (all of them if the object is shorter), in one request: how an
    /// open reads the footer and, usually, the index block together.
    fn tail(&self, n: u64) -> Result<Vec<u8>> {
        let len = self.len();
        self.read(len.saturating_sub(n)..len)
    }

    /// Requests and bytes so far.
    fn stats(&self) -> RequestStats;
}

/// Checks `range` against an object of `len` bytes named `location`.
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

/// A local file read by ranges with `pread`, counting its reads as requests.
#[derive(Debug)]
pub struct FileRange {
    file: File,
    len: u64,
    location: String,
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl FileRange {
    /// Opens the file at `path` (its length is read once, now: the object is immutable while
    /// read, SPEC.md 8).
    pub fn open(path: impl AsRef<Path>) -> Result<FileRange> {
        let path = path.as_ref();
        let file = File::open(path).ctx("opening", path)?;
        let len = file.metadata().ctx("reading metadata of", path)?.len();
        Ok(FileRange {
            file,
            len,
            location: path.display().to_string(),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }
}

impl RangeRead for FileRange {
    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn read(&self, range: Range<u64>) -> Result<Vec<u8>> {
        let n = check_range(&range, self.len, &self.location)?;
        let mut buf = vec![0u8; n];
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file
                .read_exact_at(&mut buf, range.start)
                .map_err(|e| Error::io(format!("reading {}", self.location), e))?;
        }
        #[cfg(not(unix))]
        {
            use std::io::{Read, Seek, SeekFrom};
            let mut f = &self.file;
            f.seek(SeekFrom::Start(range.start))
                .and_then(|_| f.read_exact(&mut buf))
                .map_err(|e| Error::io(format!("reading {}", self.location), e))?;
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(buf)
    }

    fn stats(&self) -> RequestStats {
        RequestStats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}
