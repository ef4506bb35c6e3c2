//! The bytes of one object, read by ranges, each read one request: what a reader of a remote
//! checkpoint stands on (issue 15). [`FileRange`] reads a local file so (with `pread`), which
//! is how the remote reader is tested request by request without a server; the object-storage
//! implementation counts its ranged GETs the same way.

use std::ops::Range;

use bytes::BytesMut;

use crate::error::{Error, Result};
pub(crate) use crate::native::check_range;
pub use crate::native::{FileRange, ReadAt};

/// Requests made and bytes received so far by a [`RangeRead`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestStats {
    /// Reads (ranged GETs for an object store), each counted once however often it was tried.
    pub requests: u64,
    /// Bytes received.
    pub bytes: u64,
    /// Attempts beyond the first made for those reads: a request retried after a connection
    /// error, a timeout, a server error or a body that broke off (counted for the stores
    /// `remote::resolve` builds, whose client counts the attempts it sends).
    pub retries: u64,
}

/// Where some bytes of a [`ReadPart`] go: the object's bytes from `offset` on, `buf.len()`
/// of them. The CRC32C of what is written is kept as it is written (while the bytes are still
/// in cache), so that a tensor's checksum costs no second pass over it.
#[derive(Debug)]
pub struct Dest {
    /// Offset in the object of the first byte of `buf`.
    pub offset: u64,
    /// Filled by the read.
    pub buf: BytesMut,
    /// CRC32C of `buf[..written]`.
    crc: u32,
    written: usize,
}

impl Dest {
    /// A destination for the object's bytes from `offset` on, `buf.len()` of them.
    pub fn new(offset: u64, buf: BytesMut) -> Dest {
        Dest {
            offset,
            buf,
            crc: 0,
            written: 0,
        }
    }

    /// The CRC32C of the bytes written into `buf` so far (all of it once the part is read).
    pub fn crc(&self) -> u32 {
        self.crc
    }
}

/// One request of a parallel read ([`RangeRead::read_parts`]): the bytes of `range`, scattered
/// into `dests` (in order, not overlapping, inside `range`); bytes of `range` outside every
/// destination (gaps between tensors read together) are dropped.
#[derive(Debug)]
pub struct ReadPart {
    /// The caller's number for the part (given back with it).
    pub id: usize,
    /// The object's bytes asked for.
    pub range: Range<u64>,
    /// Where they go.
    pub dests: Vec<Dest>,
}

impl ReadPart {
    /// Checks that the destinations lie in order inside the range.
    pub(crate) fn check(&self, location: &str) -> Result<()> {
        let mut at = self.range.start;
        for d in &self.dests {
            let end = d.offset.checked_add(d.buf.len() as u64);
            if d.offset < at || end.is_none_or(|e| e > self.range.end) {
                return Err(Error::InvalidArgument(format!(
                    "{location}: part {} ({}..{}): destinations out of order or outside it",
                    self.id, self.range.start, self.range.end
                )));
            }
            at = end.unwrap_or(at);
        }
        Ok(())
    }

    /// Copies `chunk`, the object's bytes from `at` on, into the destinations it overlaps
    /// (chunks come in the object's order), extending each destination's CRC32C.
    pub(crate) fn scatter(&mut self, at: u64, chunk: &[u8]) {
        let end = at + chunk.len() as u64;
        for d in &mut self.dests {
            let (ds, de) = (d.offset, d.offset + d.buf.len() as u64);
            let (s, e) = (ds.max(at), de.min(end));
            if s < e {
                // Offsets inside `d.buf` and `chunk`, both in memory: each fits in a usize.
                let within = |v: u64| usize::try_from(v).expect("an offset inside a buffer");
                let (a, b) = (within(s - ds), within(e - ds));
                d.buf[a..b].copy_from_slice(&chunk[within(s - at)..within(e - at)]);
                if a == d.written {
                    d.crc = crc32c::crc32c_append(d.crc, &d.buf[a..b]);
                    d.written = b;
                } else {
                    // Out of order (not how parts are read): checksum the whole again.
                    d.crc = crc32c::crc32c(&d.buf[..b]);
                    d.written = b;
                }
            }
        }
    }
}

/// How a parallel read runs.
#[derive(Clone, Copy, Debug)]
pub struct Parallelism {
    /// Requests in flight at most.
    pub concurrency: usize,
    /// Parts started at most past the first part not finished (bounds the memory of parts
    /// finished but not yet consumed); at least `concurrency`.
    pub window: usize,
}

/// One immutable object (a file, an object in a bucket) read by byte ranges ([`ReadAt`],
/// the native layer's read seam), counting its requests, with parallel reads of many parts.
pub trait RangeRead: ReadAt {
    /// Requests and bytes so far.
    fn stats(&self) -> RequestStats;

    /// Reads every part the iterator gives (one request each), at most `how.concurrency` at
    /// once, handing each part, filled, to `done` as it finishes (in any order). The first
    /// error (of a read or of `done`) ends the read. This default reads one part at a time.
    fn read_parts(
        &self,
        parts: &mut dyn Iterator<Item = ReadPart>,
        how: Parallelism,
        done: &mut dyn FnMut(ReadPart) -> Result<()>,
    ) -> Result<()> {
        let _ = how;
        for mut part in parts {
            check_range(&part.range, self.len(), self.location())?;
            part.check(self.location())?;
            let data = self.read(part.range.clone())?;
            part.scatter(part.range.start, &data);
            done(part)?;
        }
        Ok(())
    }

    /// The bytes of each range, read with at most `concurrency` requests at once (one request
    /// per range), in the order of `ranges`.
    fn read_parallel(&self, ranges: &[Range<u64>], concurrency: usize) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Option<Vec<u8>>> = vec![None; ranges.len()];
        let mut parts = Vec::with_capacity(ranges.len());
        for (id, r) in ranges.iter().enumerate() {
            let n = check_range(r, self.len(), self.location())?;
            parts.push(ReadPart {
                id,
                range: r.clone(),
                dests: vec![Dest::new(r.start, BytesMut::zeroed(n))],
            });
        }
        let how = Parallelism {
            concurrency: concurrency.max(1),
            window: usize::MAX,
        };
        self.read_parts(&mut parts.into_iter(), how, &mut |p| {
            let buf = p
                .dests
                .into_iter()
                .next()
                .map(|d| d.buf)
                .unwrap_or_default();
            out[p.id] = Some(Vec::from(buf));
            Ok(())
        })?;
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }
}

impl RangeRead for FileRange {
    fn stats(&self) -> RequestStats {
        let (requests, bytes) = self.counts();
        RequestStats {
            requests,
            bytes,
            retries: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_parallel_and_read_parts_over_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("obj");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 300) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let f = FileRange::open(&path).unwrap();
        let ranges = [10..20, 0..0, 99_000..100_000, 5..50_005];
        let got = f.read_parallel(&ranges, 3).unwrap();
        for (r, g) in ranges.iter().zip(&got) {
            assert_eq!(g.as_slice(), &bytes[r.start as usize..r.end as usize]);
        }
        assert_eq!(f.stats().requests, 4);
        let past_the_end = vec![5..10, 0..100_001];
        assert!(f.read_parallel(&past_the_end, 2).is_err());

        // A part scattered into two destinations with a gap between them; CRCs kept.
        let part = ReadPart {
            id: 7,
            range: 1000..3000,
            dests: vec![
                Dest::new(1000, BytesMut::zeroed(500)),
                Dest::new(2500, BytesMut::zeroed(500)),
            ],
        };
        let how = Parallelism {
            concurrency: 2,
            window: 2,
        };
        let mut seen = 0;
        f.read_parts(&mut std::iter::once(part), how, &mut |p| {
            assert_eq!(p.id, 7);
            assert_eq!(&p.dests[0].buf[..], &bytes[1000..1500]);
            assert_eq!(&p.dests[1].buf[..], &bytes[2500..3000]);
            assert_eq!(p.dests[1].crc(), crc32c::crc32c(&bytes[2500..3000]));
            seen += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, 1);
        // Destinations out of order are refused before anything is read.
        let bad = ReadPart {
            id: 0,
            range: 0..100,
            dests: vec![
                Dest::new(50, BytesMut::zeroed(10)),
                Dest::new(0, BytesMut::zeroed(10)),
            ],
        };
        let before = f.stats().requests;
        assert!(f
            .read_parts(&mut std::iter::once(bad), how, &mut |_| Ok(()))
            .is_err());
        assert_eq!(f.stats().requests, before);
    }
}
