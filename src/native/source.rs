//! The bytes a reader works on: a memory-mapped file or a buffer in memory.
//!
//! This module holds the crate's only `unsafe` code: mapping a file, and dropping pages a scan
//! has passed from the mapping.

use std::fs::File;
use std::ops::Deref;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, IoContext, Result};

/// Immutable bytes shared by a reader and the views it hands out.
#[derive(Clone, Debug)]
pub enum Source {
    /// A read-only memory map of a whole file.
    Mapped(Arc<memmap2::Mmap>),
    /// Bytes in memory (tests, fuzzing, data received over a network).
    Memory(Arc<[u8]>),
}

#[allow(unsafe_code)] // one of the crate's two `unsafe` blocks, both on the memory map (SAFETY below)
impl Source {
    /// Maps the whole file at `path` read-only. An empty file becomes an empty buffer
    /// (a zero-length mapping is not portable).
    pub fn map(path: &Path) -> Result<Source> {
        let file = File::open(path).ctx("opening", path)?;
        let meta = file.metadata().ctx("reading metadata of", path)?;
        if meta.is_dir() {
            // Opening a directory succeeds on Unix; mapping it would fail with ENODEV ("No such
            // device"), which says nothing of what is wrong.
            return Err(Error::IsADirectory {
                path: path.display().to_string(),
                hint: None,
            });
        }
        let len = meta.len();
        if len == 0 {
            return Ok(Source::Memory(Arc::from(Vec::new())));
        }
        // SAFETY: memmap2 requires that the mapped bytes are not modified (in particular not
        // truncated away) while the map is alive, or reads may observe changing bytes or fault.
        // paramdex never changes a byte of a published file: writers build a temporary file and
        // rename it over the final path (existing maps keep the old inode), and `meta --set`
        // only appends after the old end and then rewrites nothing but bytes past it, so the
        // mapped range [0, len) stays identical. A file changed in place by another program is
        // outside that contract; SPEC.md ("Memory mapping") documents it, as every mmap-based
        // reader must. The map is read-only, so safe code can never write through it, and it
        // lives as long as every slice handed out (they borrow the Reader that owns this Arc).
        let map = unsafe { memmap2::MmapOptions::new().map(&file) }.ctx("memory-mapping", path)?;
        Ok(Source::Mapped(Arc::new(map)))
    }
}

/// What a parallel load ([`crate::Reader::load_all`]) tells the kernel about the pages of the
/// mapped file it is about to read (`madvise`; ignored where the platform has no such advice,
/// and for bytes in memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LoadAdvice {
    /// Nothing: pages fault in on first touch, with the kernel's default readahead. The
    /// default: as fast as any advice with the file in the page cache, and the fastest from
    /// disk on two threads in the measurements of docs/benchmarks-history.md ("Parallel loads
    /// and 10M tensors").
    #[default]
    None,
    /// `MADV_SEQUENTIAL` on each window of the load: aggressive readahead, pages dropped
    /// early behind.
    Sequential,
    /// `MADV_WILLNEED` on each window of the load: readahead started at once, asynchronously.
    WillNeed,
    /// `MADV_POPULATE_READ` (Linux 5.14+; elsewhere nothing) by each loading thread on the
    /// range it is about to copy: the pages are read and mapped in one call instead of one
    /// fault per page (or group of 16 pages). Measured slower than `None` (each call reads
    /// its batch before the thread copies a byte of it).
    PopulateRead,
}

impl Source {
    /// Gives `advice` for the bytes `offset..offset + len` of a mapped source (a hint: errors,
    /// e.g. from a kernel without the advice, are ignored, and nothing changes for memory).
    pub fn advise(&self, advice: LoadAdvice, offset: usize, len: usize) {
        let Source::Mapped(map) = self else {
            return;
        };
        let end = offset.saturating_add(len).min(map.len());
        if offset >= end {
            return;
        }
        #[cfg(unix)]
        {
            let a = match advice {
                LoadAdvice::None => return,
                LoadAdvice::Sequential => memmap2::Advice::Sequential,
                LoadAdvice::WillNeed => memmap2::Advice::WillNeed,
                #[cfg(target_os = "linux")]
                LoadAdvice::PopulateRead => memmap2::Advice::PopulateRead,
                #[cfg(not(target_os = "linux"))]
                LoadAdvice::PopulateRead => return,
            };
            // A hint only: a kernel without the advice (EINVAL) loses nothing but speed.
            let _ = map.advise_range(a, offset, end - offset);
        }
        #[cfg(not(unix))]
        let _ = (advice, end);
    }
}

/// Bytes advised per `madvise(MADV_WILLNEED)` call by [`Source::will_read`]: the chunk in which
/// Linux's forced readahead submits reads (`force_page_cache_ra`).
const WILL_NEED_PIECE: usize = 2 << 20;

impl Source {
    /// Whether `part` lies inside this source's bytes, and where: its offset.
    fn offset_of(&self, part: &[u8]) -> Option<usize> {
        let base = self.as_ptr() as usize;
        let at = (part.as_ptr() as usize).checked_sub(base)?;
        (at.checked_add(part.len())? <= self.len()).then_some(at)
    }

    /// Tells the kernel that the byte ranges `[start, end)` of `part` (a slice of this source)
    /// are about to be read ([`LoadAdvice::WillNeed`]: their reads start at once), in at most
    /// `max_calls` calls, so that the page faults of the read find them instead of reading
    /// around each fault (the device's readahead, often megabytes). Returns false, advising
    /// nothing, when `part` is not in this source. A hint: nothing happens for memory.
    pub(crate) fn will_read(
        &self,
        part: &[u8],
        max_calls: usize,
        ranges: impl FnOnce(&mut dyn FnMut(u64, u64) -> bool),
    ) -> bool {
        let Some(base) = self.offset_of(part) else {
            return false;
        };
        if !matches!(self, Source::Mapped(_)) {
            return true;
        }
        let mut calls = 0usize;
        ranges(&mut |start, end| {
            let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
                return false;
            };
            if end > part.len() || start >= end {
                return false;
            }
            // Linux reads at most the device's readahead window (or its optimal I/O size) per
            // call and drops the rest of a longer range, so a range goes in pieces no larger
            // than the kernel's own readahead chunk: a device with a smaller window still
            // reads only its window's worth past each piece's start.
            let mut at = start;
            while at < end {
                let n = (end - at).min(WILL_NEED_PIECE);
                self.advise(LoadAdvice::WillNeed, base + at, n);
                at += n;
                calls += 1;
                if calls >= max_calls {
                    return false;
                }
            }
            true
        });
        true
    }
}

#[allow(unsafe_code)] // the other of the crate's two `unsafe` blocks (SAFETY below)
impl Source {
    /// Drops the pages lying wholly inside `start..end` of a mapped source from the process's
    /// page tables (`MADV_DONTNEED`): they stop counting in its resident set, stay in the page
    /// cache, and fault back in, with the same bytes, if read again. A hint: errors are
    /// ignored, and nothing happens for memory or on platforms without the advice.
    pub fn release_pages(&self, start: usize, end: usize) {
        #[cfg(target_os = "linux")]
        {
            const PAGE: usize = 4096;
            let Source::Mapped(map) = self else {
                return;
            };
            // Whole pages only: a page shared with bytes outside the range stays. (The map
            // starts page-aligned, so offsets in it align as file offsets do; a larger page
            // size only makes the kernel refuse the unaligned call, which is ignored.)
            let first = start.div_ceil(PAGE).saturating_mul(PAGE);
            let last = end.min(map.len()) / PAGE * PAGE;
            if first >= last {
                return;
            }
            // SAFETY: `map` is a read-only, shared (MAP_SHARED) mapping of a file that is not
            // modified while mapped (the contract of `Source::map` above). On such a mapping
            // MADV_DONTNEED only unmaps the pages from this process: a later access faults
            // the same file bytes back in from the page cache, so every slice borrowed from
            // the map keeps reading identical bytes. (The zero-fill that makes the advice
            // unsafe in general applies to private and anonymous mappings only.)
            let _ = unsafe {
                map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, first, last - first)
            };
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (start, end);
    }
}

impl AsRef<[u8]> for Source {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl Deref for Source {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Source::Mapped(m) => m,
            Source::Memory(b) => b,
        }
    }
}
