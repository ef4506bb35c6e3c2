//! Sorted runs of a writer's index entries spilled to a temporary file, so that the writer's
//! memory stays bounded however many tensors a file holds ([`crate::WriterOptions`]'s
//! `index_memory`).
//!
//! When the entries a [`crate::Writer`] holds in memory exceed the budget, it sorts them and
//! appends them here as one *run*; `finish` merges the runs (and the entries still in memory)
//! into one sorted stream that it feeds to the table builder, which sees the keys in order as
//! it always did. Each run is LevelDB-style prefix-compressed: per entry the varints `shared`,
//! `unshared`, `value_len`, then the unshared key bytes and the value.
//!
//! The file is made by `tempfile::tempfile_in` in the output's directory (or
//! `tempfile::tempfile` in the system's temporary directory for a writer without a local
//! output): it has no name (`O_TMPFILE`, or unlinked at once), so nothing is left behind when
//! the writer is dropped, fails or the process is killed. The output's directory rather than
//! the system's is chosen because the system's temporary directory is often a `tmpfs`, whose
//! pages are memory: spilling there would move the entries from the heap to RAM, not to disk.
//!
//! Duplicate names stay exact across runs: the writer keeps the 64-bit hash of every spilled
//! name (8 bytes a tensor, plus the table's slack, in the one table it also checks the names in
//! memory against), and a name whose hash it finds is looked up here, in the runs whose key
//! range holds it (a read of the run; only an actual duplicate or a hash collision pays it).
//! The merge also refuses two equal keys, as a last check.

use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

use crate::error::{Error, Result};
use crate::format::{get_varint64, put_varint64};
use crate::name;

/// Bytes a run cursor reads at a time (at most; less when many runs share the budget).
const READ_CHUNK: usize = 1 << 20;

/// One sorted run in the spill file.
#[derive(Debug)]
struct Run {
    start: u64,
    len: u64,
    first: Vec<u8>,
    last: Vec<u8>,
}

/// The spill file of one writer.
#[derive(Debug)]
pub(super) struct Spill {
    file: File,
    end: u64,
    runs: Vec<Run>,
    entries: u64,
}

impl Spill {
    /// Creates the (nameless) spill file in `dir`, or in the system's temporary directory.
    pub(super) fn create(dir: Option<&Path>) -> io::Result<Spill> {
        let file = match dir {
            Some(d) => tempfile::tempfile_in(d)?,
            None => tempfile::tempfile()?,
        };
        Ok(Spill {
            file,
            end: 0,
            runs: Vec::new(),
            entries: 0,
        })
    }

    /// Entries spilled so far.
    pub(super) fn entries(&self) -> u64 {
        self.entries
    }

    /// Runs spilled so far.
    pub(super) fn runs(&self) -> usize {
        self.runs.len()
    }

    /// The last key of the last run (the greatest spilled key while names arrive in order).
    pub(super) fn last_key(&self) -> Option<&[u8]> {
        self.runs.last().map(|r| r.last.as_slice())
    }

    /// Appends one run: `entries` in strictly increasing key order.
    pub(super) fn write_run<'a>(
        &mut self,
        entries: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    ) -> io::Result<()> {
        let mut out = BufWriter::with_capacity(1 << 20, &self.file);
        out.seek(SeekFrom::Start(self.end))?;
        let mut prev: &[u8] = &[];
        let mut first: Option<&[u8]> = None;
        let mut head = Vec::with_capacity(30);
        let mut len = 0u64;
        let mut count = 0u64;
        for (key, value) in entries {
            let shared = prev.iter().zip(key).take_while(|(a, b)| a == b).count();
            head.clear();
            put_varint64(&mut head, shared as u64);
            put_varint64(&mut head, (key.len() - shared) as u64);
            put_varint64(&mut head, value.len() as u64);
            out.write_all(&head)?;
            out.write_all(&key[shared..])?;
            out.write_all(value)?;
            len += (head.len() + key.len() - shared + value.len()) as u64;
            first.get_or_insert(key);
            prev = key;
            count += 1;
        }
        out.flush()?;
        drop(out);
        let Some(first) = first else {
            return Ok(());
        };
        self.runs.push(Run {
            start: self.end,
            len,
            first: first.to_vec(),
            last: prev.to_vec(),
        });
        self.end += len;
        self.entries += count;
        Ok(())
    }

    /// Whether a spilled key is `key`: the runs whose key range holds it are read (the writer
    /// asks only when the name's hash was spilled or added before).
    pub(super) fn holds(&self, key: &[u8]) -> io::Result<bool> {
        for run in &self.runs {
            if key < run.first.as_slice() || key > run.last.as_slice() {
                continue;
            }
            let mut c = RunCursor::new(&self.file, run, 64 << 10);
            while c.advance()? {
                match c.key.as_slice().cmp(key) {
                    std::cmp::Ordering::Less => {}
                    std::cmp::Ordering::Equal => return Ok(true),
                    std::cmp::Ordering::Greater => break,
                }
            }
        }
        Ok(false)
    }

    /// Merges the runs and `memory` (entries still in memory, in increasing key order) into
    /// one stream in increasing key order, handing each entry to `f`. Two equal keys are a
    /// [`Error::DuplicateName`]. `path` names the output, for messages.
    pub(super) fn merge<'m>(
        &self,
        memory: impl Iterator<Item = (&'m [u8], &'m [u8])>,
        path: &Path,
        mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
    ) -> Result<()> {
        let io_err = |e: io::Error| {
            Error::io(
                format!(
                    "reading the spilled index entries of {} (a temporary file)",
                    path.display()
                ),
                e,
            )
        };
        let chunk = (READ_CHUNK / (self.runs.len() + 1)).clamp(4 << 10, READ_CHUNK);
        let mut cursors: Vec<Cursor<'_, 'm, _>> = Vec::with_capacity(self.runs.len() + 1);
        for run in &self.runs {
            let mut c = RunCursor::new(&self.file, run, chunk);
            if c.advance().map_err(io_err)? {
                cursors.push(Cursor::Disk(c));
            }
        }
        let mut memory = memory;
        if let Some(cur) = memory.next() {
            cursors.push(Cursor::Memory { cur, rest: memory });
        }
        // A binary min-heap of cursor numbers, ordered by current key (ties by number, so the
        // order is deterministic).
        let mut heap: Vec<usize> = (0..cursors.len()).collect();
        for i in (0..heap.len() / 2).rev() {
            sift_down(&mut heap, i, |a, b| less(&cursors, a, b));
        }
        let mut prev: Vec<u8> = Vec::new();
        let mut any = false;
        while let Some(&top) = heap.first() {
            let c = &cursors[top];
            if any && c.key() == prev.as_slice() {
                return Err(Error::DuplicateName {
                    name: name::display(c.key()),
                });
            }
            f(c.key(), c.value())?;
            prev.clear();
            prev.extend_from_slice(c.key());
            any = true;
            if !cursors[top].advance().map_err(io_err)? {
                let last = heap.pop().expect("the heap is not empty");
                if heap.is_empty() {
                    break;
                }
                heap[0] = last;
            }
            sift_down(&mut heap, 0, |a, b| less(&cursors, a, b));
        }
        Ok(())
    }
}

/// Whether cursor `a`'s key comes before cursor `b`'s (ties by number: a stable order).
fn less<'m, I: Iterator<Item = (&'m [u8], &'m [u8])>>(
    cs: &[Cursor<'_, 'm, I>],
    a: usize,
    b: usize,
) -> bool {
    (cs[a].key(), a) < (cs[b].key(), b)
}

fn sift_down(heap: &mut [usize], mut i: usize, less: impl Fn(usize, usize) -> bool) {
    loop {
        let l = 2 * i + 1;
        if l >= heap.len() {
            return;
        }
        let r = l + 1;
        let child = if r < heap.len() && less(heap[r], heap[l]) {
            r
        } else {
            l
        };
        if !less(heap[child], heap[i]) {
            return;
        }
        heap.swap(i, child);
        i = child;
    }
}

/// One input of the merge.
enum Cursor<'f, 'm, I> {
    Disk(RunCursor<'f>),
    Memory { cur: (&'m [u8], &'m [u8]), rest: I },
}

impl<'m, I: Iterator<Item = (&'m [u8], &'m [u8])>> Cursor<'_, 'm, I> {
    fn key(&self) -> &[u8] {
        match self {
            Cursor::Disk(c) => &c.key,
            Cursor::Memory { cur, .. } => cur.0,
        }
    }

    fn value(&self) -> &[u8] {
        match self {
            Cursor::Disk(c) => &c.buf[c.value.clone()],
            Cursor::Memory { cur, .. } => cur.1,
        }
    }

    fn advance(&mut self) -> io::Result<bool> {
        match self {
            Cursor::Disk(c) => c.advance(),
            Cursor::Memory { cur, rest } => match rest.next() {
                Some(next) => {
                    *cur = next;
                    Ok(true)
                }
                None => Ok(false),
            },
        }
    }
}

/// Reads one run entry by entry, `chunk` bytes at a time (more for an entry that needs it).
struct RunCursor<'a> {
    file: &'a File,
    /// File offset of the next byte not yet read into `buf`.
    next: u64,
    end: u64,
    buf: Vec<u8>,
    /// Offset in `buf` of the next entry.
    at: usize,
    chunk: usize,
    key: Vec<u8>,
    value: std::ops::Range<usize>,
}

fn corrupt(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("spill file: {what} (the temporary file was changed)"),
    )
}

impl<'a> RunCursor<'a> {
    fn new(file: &'a File, run: &Run, chunk: usize) -> RunCursor<'a> {
        RunCursor {
            file,
            next: run.start,
            end: run.start + run.len,
            buf: Vec::new(),
            at: 0,
            chunk,
            key: Vec::new(),
            value: 0..0,
        }
    }

    /// Makes `buf[at..]` hold at least `need` bytes, or all that is left of the run.
    fn fill(&mut self, need: usize) -> io::Result<()> {
        let have = self.buf.len() - self.at;
        if have >= need || self.next == self.end {
            return Ok(());
        }
        self.buf.drain(..self.at);
        self.at = 0;
        let left = self.end - self.next;
        let want = u64::try_from((need - have).max(self.chunk)).unwrap_or(u64::MAX);
        let n = usize::try_from(want.min(left)).map_err(|_| corrupt("run too long"))?;
        let old = self.buf.len();
        self.buf.resize(old + n, 0);
        let mut f = self.file;
        f.seek(SeekFrom::Start(self.next))?;
        f.read_exact(&mut self.buf[old..])?;
        self.next += n as u64;
        Ok(())
    }

    /// Moves to the next entry; `false` at the end of the run.
    fn advance(&mut self) -> io::Result<bool> {
        self.fill(30)?;
        if self.at == self.buf.len() {
            return Ok(false);
        }
        let mut pos = self.at;
        let mut varint = |buf: &[u8]| -> io::Result<usize> {
            let (v, n) = get_varint64(&buf[pos..]).ok_or_else(|| corrupt("bad varint"))?;
            pos += n;
            usize::try_from(v).map_err(|_| corrupt("length overflows"))
        };
        let shared = varint(&self.buf)?;
        let unshared = varint(&self.buf)?;
        let value_len = varint(&self.buf)?;
        let head = pos - self.at;
        let body = unshared
            .checked_add(value_len)
            .and_then(|b| b.checked_add(head))
            .ok_or_else(|| corrupt("length overflows"))?;
        self.fill(body)?;
        if self.buf.len() - self.at < body || shared > self.key.len() {
            return Err(corrupt("truncated entry"));
        }
        let key_at = self.at + head;
        self.key.truncate(shared);
        self.key
            .extend_from_slice(&self.buf[key_at..key_at + unshared]);
        self.value = key_at + unshared..key_at + unshared + value_len;
        self.at = self.value.end;
        Ok(true)
    }
}
