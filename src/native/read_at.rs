//! The read seam's local implementations ([`ReadAt`], `format/read_at.rs`): a memory map or
//! memory ([`Source`]) lends its bytes; a plain file ([`FileRange`], `pread`) copies them into
//! a buffer. (An object in a bucket, `remote::ObjectRange`, reads them with ranged GETs.)

use std::borrow::Cow;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, IoContext, Result};
use crate::format::{check_range, ReadAt};
use crate::native::source::Source;

impl ReadAt for Source {
    fn len(&self) -> u64 {
        <[u8]>::len(self) as u64
    }

    fn location(&self) -> &str {
        match self {
            Source::Mapped(_) => "<mapped file>",
            Source::Memory(_) => "<memory>",
        }
    }

    fn read(&self, range: Range<u64>) -> Result<Vec<u8>> {
        self.read_at(range).map(Cow::into_owned)
    }

    fn read_at(&self, range: Range<u64>) -> Result<Cow<'_, [u8]>> {
        check_range(&range, ReadAt::len(self), ReadAt::location(self))?;
        let at = |v: u64| usize::try_from(v).expect("within the bytes in memory (checked)");
        let (a, b) = (at(range.start), at(range.end));
        Ok(Cow::Borrowed(&self[a..b]))
    }

    fn tail_at(&self, n: u64) -> Result<Cow<'_, [u8]>> {
        let len = ReadAt::len(self);
        self.read_at(len.saturating_sub(n)..len)
    }

    fn release(&self, range: Range<u64>) {
        let at = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        self.release_pages(at(range.start), at(range.end));
    }
}

/// A local file read by ranges with `pread`, counting its reads: what reads a shard's index
/// without its records, and a native file through the ranged code path (the remote reader's,
/// tested without a server).
#[derive(Debug)]
pub struct FileRange {
    file: File,
    len: u64,
    location: String,
    requests: AtomicU64,
    bytes: AtomicU64,
}

impl FileRange {
    /// Opens the file at `path` (its length is read once, now: the file is immutable while
    /// read, SPEC.md 8).
    pub fn open(path: impl AsRef<Path>) -> Result<FileRange> {
        let path = path.as_ref();
        let file = File::open(path).ctx("opening", path)?;
        Self::from_file(file, path)
    }

    /// A file already open, found at `path` (for messages).
    pub fn from_file(file: File, path: &Path) -> Result<FileRange> {
        let len = file.metadata().ctx("reading metadata of", path)?.len();
        Ok(FileRange {
            file,
            len,
            location: path.display().to_string(),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        })
    }

    /// Reads made and bytes read so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.requests.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

impl ReadAt for FileRange {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_lends_and_a_file_copies_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..5000u32).map(|i| (i * 31 + 7) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let mapped = Source::map(&path).unwrap();
        let file = FileRange::open(&path).unwrap();
        for r in [0..0, 0..10, 100..4000, 4990..5000] {
            let m = mapped.read_at(r.clone()).unwrap();
            assert!(matches!(m, Cow::Borrowed(_)));
            assert_eq!(&m[..], &bytes[r.start as usize..r.end as usize]);
            let f = file.read_at(r.clone()).unwrap();
            assert!(matches!(f, Cow::Owned(_)));
            assert_eq!(&f[..], &m[..]);
        }
        assert_eq!(file.counts().0, 4);
        assert_eq!(file.tail(20).unwrap(), &bytes[4980..]);
        for bad in [4999..5001, Range { start: 10, end: 5 }] {
            assert!(matches!(
                mapped.read_at(bad.clone()),
                Err(Error::Corrupt { .. })
            ));
            assert!(matches!(file.read_at(bad), Err(Error::Corrupt { .. })));
        }
    }
}
