//! Blocks: the prefix-compressed sorted runs of entries that make up a table.
//!
//! Block contents (without the trailer):
//!
//! ```text
//! entry*  restart_offset (fixed32) * num_restarts  num_restarts (fixed32)
//! entry = varint32 shared, varint32 non_shared, varint32 value_len,
//!         key[shared..] (non_shared bytes), value (value_len bytes)
//! ```
//!
//! The reader validates the restart array when a block is parsed and every entry as it is
//! decoded, so malformed input yields [`Error::Corrupt`] instead of a panic or a wrong answer.
//! Beyond what LevelDB checks, it also requires that the first restart point is 0, that restart
//! points lie on entry boundaries and hold entries with `shared == 0` (checked as entries are
//! scanned), and that keys are strictly increasing. With those checks, a block that can be fully
//! iterated without error gives the same answers to [`BlockIter::seek`] as to a scan.

use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::format::{get_fixed32, get_varint32, put_fixed32, put_varint32};

/// Bytewise (memcmp) order of two keys, eight bytes at a time. Keys here are short and share
/// long prefixes (`model.layers.`), where a call to the C library's `memcmp` costs more than
/// the comparison; this inlines into the lookups.
#[inline]
pub(crate) fn compare_keys(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let n = a.len().min(b.len());
    let (a, rest_a) = a.split_at(n);
    let (b, rest_b) = b.split_at(n);
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in ca.by_ref().zip(cb.by_ref()) {
        let x = <[u8; 8]>::try_from(x).map_or(0, u64::from_be_bytes);
        let y = <[u8; 8]>::try_from(y).map_or(0, u64::from_be_bytes);
        if x != y {
            return x.cmp(&y);
        }
    }
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        if x != y {
            return x.cmp(y);
        }
    }
    rest_a.len().cmp(&rest_b.len())
}

/// `a < b` in bytewise order.
#[inline]
pub(crate) fn key_lt(a: &[u8], b: &[u8]) -> bool {
    compare_keys(a, b).is_lt()
}

/// Buffer holding the current key of an iterator; keys up to 128 bytes never allocate.
pub(crate) type KeyBuf = SmallVec<[u8; 128]>;

// ---------------------------------------------------------------------------------------------
// Builder
// ---------------------------------------------------------------------------------------------

/// Builds one block, as LevelDB's `BlockBuilder` does (byte-for-byte).
#[derive(Debug, Clone)]
pub struct BlockBuilder {
    restart_interval: usize,
    buffer: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    finished: bool,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    /// A builder that makes every `restart_interval`-th entry a restart point (values below 1
    /// are treated as 1).
    pub fn new(restart_interval: usize) -> Self {
        BlockBuilder {
            restart_interval: restart_interval.max(1),
            buffer: Vec::new(),
            restarts: vec![0],
            counter: 0,
            finished: false,
            last_key: Vec::new(),
        }
    }

    /// Clears the builder for a new block (keeps its allocations).
    pub fn reset(&mut self) {
        self.buffer.clear();
        self.restarts.clear();
        self.restarts.push(0);
        self.counter = 0;
        self.finished = false;
        self.last_key.clear();
    }

    /// Whether no entry has been added since the last reset.
    pub fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// The last key added (empty if none).
    pub fn last_key(&self) -> &[u8] {
        &self.last_key
    }

    /// Where the last added entry is: the number of its restart run, the run's byte offset
    /// in the block and the entries before it in the run.
    pub(crate) fn current_run(&self) -> (usize, usize, usize) {
        let run = self.restarts.len() - 1;
        let at = self.restarts.last().map_or(0, |&r| r as usize);
        (run, at, self.counter.saturating_sub(1))
    }

    /// Size the block would have if finished now (LevelDB's `CurrentSizeEstimate`):
    /// entries + 4 bytes per restart point + 4.
    pub fn size_estimate(&self) -> usize {
        self.buffer.len() + self.restarts.len() * 4 + 4
    }

    /// Appends an entry. Keys must be strictly increasing (bytewise) within a block; this is not
    /// checked here (the caller, [`super::TableBuilder`], does; readers reject such blocks).
    ///
    /// # Panics
    /// If the key or value length, or the block's length, exceeds `u32::MAX` (the format stores
    /// them as 32-bit numbers; `TableBuilder` bounds blocks well below that), or if called after
    /// [`finish`](Self::finish) without [`reset`](Self::reset).
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        assert!(
            !self.finished,
            "BlockBuilder::add after finish without reset"
        );
        let mut shared = 0;
        if self.counter < self.restart_interval {
            shared = key
                .iter()
                .zip(self.last_key.iter())
                .take_while(|(a, b)| a == b)
                .count();
        } else {
            let at = u32::try_from(self.buffer.len())
                .expect("block length fits in u32 (TableBuilder bounds blocks by MAX_BLOCK_LEN)");
            self.restarts.push(at);
            self.counter = 0;
        }
        let non_shared = key.len() - shared;
        let to32 = |n: usize| {
            u32::try_from(n).expect("key/value length fits in u32 (checked by TableBuilder::add)")
        };
        put_varint32(&mut self.buffer, to32(shared));
        put_varint32(&mut self.buffer, to32(non_shared));
        put_varint32(&mut self.buffer, to32(value.len()));
        self.buffer.extend_from_slice(&key[shared..]);
        self.buffer.extend_from_slice(value);
        self.last_key.truncate(shared);
        self.last_key.extend_from_slice(&key[shared..]);
        self.counter += 1;
    }

    /// Appends the restart array and count and returns the finished block contents. Calling it
    /// again without [`reset`](Self::reset) returns the same bytes.
    pub fn finish(&mut self) -> &[u8] {
        if !self.finished {
            for &r in &self.restarts {
                put_fixed32(&mut self.buffer, r);
            }
            let n = u32::try_from(self.restarts.len())
                .expect("restart count fits in u32 (bounded by the block length)");
            put_fixed32(&mut self.buffer, n);
            self.finished = true;
        }
        &self.buffer
    }
}

// ---------------------------------------------------------------------------------------------
// Reader
// ---------------------------------------------------------------------------------------------

/// Validated geometry of a block's contents, separate from the bytes so that an iterator can own
/// the bytes (e.g. a decompressed block) next to it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    /// End of the entries region = start of the restart array.
    restarts_start: usize,
    num_restarts: usize,
    /// File offset used in errors.
    base: u64,
    /// Whether `base + position` is a real file offset (false for decompressed blocks).
    exact: bool,
    what: &'static str,
}

impl Layout {
    /// Validates the restart array of `data`.
    pub(crate) fn parse(data: &[u8], base: u64, exact: bool, what: &'static str) -> Result<Self> {
        let mut lay = Layout {
            restarts_start: 0,
            num_restarts: 0,
            base,
            exact,
            what,
        };
        let len = data.len();
        if len < 4 {
            return Err(lay.err(
                0,
                format!("block is {len} bytes, too short for a restart count"),
            ));
        }
        let num = get_fixed32(data, len - 4).unwrap_or(u32::MAX) as usize;
        let max = (len - 4) / 4;
        if num > max {
            return Err(lay.err(
                len - 4,
                format!(
                    "bad block contents: {num} restart points do not fit in a {len}-byte block"
                ),
            ));
        }
        let restarts_start = len - 4 - 4 * num;
        lay.restarts_start = restarts_start;
        lay.num_restarts = num;
        if restarts_start == 0 {
            // No entries: only the canonical empty block (one restart at 0) or no restarts at all.
            if num > 1 || (num == 1 && lay.restart(data, 0)? != 0) {
                return Err(lay.err(
                    0,
                    "bad block contents: restart points in a block without entries",
                ));
            }
            return Ok(lay);
        }
        if num == 0 {
            return Err(lay.err(
                0,
                format!(
                    "bad block contents: {restarts_start} bytes of entries but no restart points"
                ),
            ));
        }
        let mut prev: Option<usize> = None;
        for i in 0..num {
            let r = lay.restart(data, i)?;
            let at = restarts_start + 4 * i;
            if i == 0 && r != 0 {
                return Err(lay.err(
                    at,
                    format!("bad block contents: first restart point is {r}, not 0"),
                ));
            }
            if r >= restarts_start {
                return Err(lay.err(
                    at,
                    format!("bad block contents: restart point {i} at {r} is outside the entries (which end at {restarts_start})"),
                ));
            }
            if let Some(p) = prev {
                if r <= p {
                    return Err(lay.err(
                        at,
                        format!("bad block contents: restart points not strictly increasing ({p} then {r})"),
                    ));
                }
            }
            prev = Some(r);
        }
        Ok(lay)
    }

    /// The geometry of a block whose restart array [`Layout::parse`] already accepted (the
    /// caller remembers that per block): reads only the restart count, skipping the
    /// O(restarts) validation. Falls back to the full check if the bytes do not fit.
    pub(crate) fn trusted(data: &[u8], base: u64, exact: bool, what: &'static str) -> Result<Self> {
        let len = data.len();
        let num = len
            .checked_sub(4)
            .and_then(|p| get_fixed32(data, p))
            .map(|n| n as usize);
        let start = num.and_then(|n| {
            n.checked_mul(4)?
                .checked_add(4)
                .and_then(|t| len.checked_sub(t))
        });
        match (num, start) {
            (Some(num), Some(restarts_start)) if num > 0 && restarts_start > 0 => Ok(Layout {
                restarts_start,
                num_restarts: num,
                base,
                exact,
                what,
            }),
            _ => Self::parse(data, base, exact, what),
        }
    }

    /// Restart offset number `i`.
    pub(crate) fn restart(&self, data: &[u8], i: usize) -> Result<usize> {
        get_fixed32(data, self.restarts_start + 4 * i)
            .map(|v| v as usize)
            .ok_or_else(|| self.err(self.restarts_start, "restart array out of bounds"))
    }

    /// A corruption error at position `pos` of the block contents.
    fn err(&self, pos: usize, detail: impl Into<String>) -> Error {
        let detail = detail.into();
        if self.exact {
            Error::corrupt(self.what, self.base.saturating_add(pos as u64), detail)
        } else {
            Error::corrupt(
                self.what,
                self.base,
                format!("{detail} (at position {pos} of the decompressed block)"),
            )
        }
    }

    /// Whether the block has no entries.
    fn is_empty(&self) -> bool {
        self.restarts_start == 0
    }
}

/// A decoded entry header.
struct EntryHeader {
    shared: usize,
    key_start: usize,
    key_end: usize,
    end: usize,
}

/// Where the `count` entries starting at `start` end (their headers decoded, nothing
/// compared): how far a lookup through a kind 1 hash slot reads (SPEC.md 4.5).
pub(crate) fn span_of(data: &[u8], lay: &Layout, start: usize, count: usize) -> Result<usize> {
    let mut p = start;
    for _ in 0..count {
        p = decode_header(data, lay, p)?.end;
    }
    Ok(p)
}

/// Decodes the header of the entry at `p`, bounds-checking it against the entries region.
fn decode_header(data: &[u8], lay: &Layout, p: usize) -> Result<EntryHeader> {
    let region = data
        .get(p..lay.restarts_start)
        .ok_or_else(|| lay.err(p, "entry offset outside the block"))?;
    // Fast path: three one-byte varints (keys and values under 128 bytes: the common case).
    if let [a, b, c, ..] = *region {
        if (a | b | c) < 0x80 {
            let key_start = p + 3;
            let key_end = key_start + b as usize;
            let end = key_end + c as usize;
            if end <= lay.restarts_start {
                return Ok(EntryHeader {
                    shared: a as usize,
                    key_start,
                    key_end,
                    end,
                });
            }
        }
    }
    let mut pos = 0;
    let mut next = || -> Option<usize> {
        let (v, n) = get_varint32(region.get(pos..)?)?;
        pos += n;
        Some(v as usize)
    };
    let (shared, non_shared, value_len) = match (next(), next(), next()) {
        (Some(a), Some(b), Some(c)) => (a, b, c),
        _ => {
            return Err(lay.err(
                p,
                "bad entry in block: truncated or over-long length varint",
            ))
        }
    };
    let key_start = p + pos;
    let key_end = key_start.checked_add(non_shared);
    let end = key_end.and_then(|k| k.checked_add(value_len));
    match (key_end, end) {
        (Some(key_end), Some(end)) if end <= lay.restarts_start => Ok(EntryHeader {
            shared,
            key_start,
            key_end,
            end,
        }),
        _ => Err(lay.err(
            p,
            format!(
                "bad entry in block: key suffix of {non_shared} bytes and value of {value_len} bytes run past the end of the entries ({} bytes)",
                lay.restarts_start
            ),
        )),
    }
}

/// Visits every entry of a block in order with its `shared` length, key suffix and value,
/// checking the block's structure as [`EntryCursor`] does (restart points on entry
/// boundaries, restart entries with `shared == 0`, lengths within the entries). Assembling the
/// keys (and so checking `shared` against the previous key and the key order) is the
/// caller's: this is the fast path for reading a whole block once, such as the index block
/// at open. `f` also gets the entry's position in the block, for errors.
pub(crate) fn scan_entries<'d>(
    data: &'d [u8],
    lay: &Layout,
    mut f: impl FnMut(usize, &'d [u8], &'d [u8], usize) -> Result<()>,
) -> Result<()> {
    let mut p = 0;
    let mut next_restart = 0;
    let mut next_r = if lay.num_restarts > 0 {
        lay.restart(data, 0)?
    } else {
        usize::MAX
    };
    while p < lay.restarts_start {
        let mut at_restart = false;
        if next_r < p {
            return Err(lay.err(
                next_r,
                format!(
                    "bad block contents: restart point {next_restart} at {next_r} is not at an entry boundary"
                ),
            ));
        }
        if next_r == p {
            at_restart = true;
            next_restart += 1;
            next_r = if next_restart < lay.num_restarts {
                lay.restart(data, next_restart)?
            } else {
                usize::MAX
            };
        }
        let h = decode_header(data, lay, p)?;
        if at_restart && h.shared != 0 {
            return Err(lay.err(
                p,
                format!(
                    "bad entry in block: restart entry shares {} bytes with the previous key",
                    h.shared
                ),
            ));
        }
        f(
            h.shared,
            &data[h.key_start..h.key_end],
            &data[h.key_end..h.end],
            p,
        )?;
        p = h.end;
    }
    // (The canonical empty block has one restart point, at 0, and no entries.)
    if lay.restarts_start > 0 && next_restart < lay.num_restarts {
        return Err(lay.err(
            next_r,
            format!(
                "bad block contents: restart point {next_restart} at {next_r} is not at an entry boundary"
            ),
        ));
    }
    Ok(())
}

/// Length of the common prefix of `a` and `b`, eight bytes at a time.
#[inline]
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut i = 0;
    while i + 8 <= n {
        let x = <[u8; 8]>::try_from(&a[i..i + 8]).map_or(0, u64::from_le_bytes);
        let y = <[u8; 8]>::try_from(&b[i..i + 8]).map_or(0, u64::from_le_bytes);
        let d = x ^ y;
        if d != 0 {
            return i + (d.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// Finds `target` among the entries of `data` from byte `start`, an entry with `shared == 0`
/// (a restart point), up to byte `end` (the next restart point, or the end of the entries):
/// returns the range of its value, or `None` once a key above it, or `end`, is reached. Every
/// entry is bounds-checked against the entries region and its `shared` against the previous
/// key's length. (The hash index lookup: `start` and `end` come from the block's validated
/// restart array.)
///
/// Keys are not assembled: the scan keeps how many leading bytes of the current key equal
/// `target`'s, which the next entry's `shared` and suffix update, so an entry matches exactly
/// when the key a full scan assembles equals `target`. (Key order is checked by iteration and
/// `verify`, not here.)
pub(crate) fn find_in_span(
    data: &[u8],
    lay: &Layout,
    start: usize,
    end: usize,
    target: &[u8],
) -> Result<Option<(usize, usize)>> {
    // Length of the previous key, and of its common prefix with `target`.
    let (mut key_len, mut matched) = (0usize, 0usize);
    let mut p = start;
    let end = end.min(lay.restarts_start);
    while p < end {
        let h = decode_header(data, lay, p)?;
        if (p == start && h.shared != 0) || h.shared > key_len {
            return Err(lay.err(
                p,
                format!(
                    "bad entry in block: {} shares {} bytes with a previous key of {key_len} bytes",
                    if p == start {
                        "a restart entry"
                    } else {
                        "an entry"
                    },
                    h.shared,
                ),
            ));
        }
        let suffix = &data[h.key_start..h.key_end];
        key_len = h.shared + suffix.len();
        if h.shared <= matched {
            // The key's first `shared` bytes are the target's: compare the rest.
            let rest = &target[h.shared..];
            let l = common_prefix(suffix, rest);
            matched = h.shared + l;
            match (suffix.get(l), rest.get(l)) {
                (None, None) => return Ok(Some((h.key_end, h.end))),
                (Some(a), Some(b)) if a > b => return Ok(None),
                (Some(_), None) => return Ok(None),
                _ => {}
            }
        }
        // Otherwise the key keeps the previous key's byte at `matched`, below the target's:
        // still below the target, with the same common prefix.
        p = h.end;
    }
    Ok(None)
}

impl Layout {
    /// The restart offsets of a block whose layout was validated, copied out (the hash index
    /// keeps them so that a lookup does not touch the block's end).
    pub(crate) fn restart_offsets(&self, data: &[u8]) -> Result<Vec<u32>> {
        (0..self.num_restarts)
            // A restart offset is a fixed32 read as usize: it fits back.
            .map(|i| {
                self.restart(data, i)
                    .map(|r| u32::try_from(r).unwrap_or(u32::MAX))
            })
            .collect()
    }

    /// End of the entries region (start of the restart array).
    pub(crate) fn entries_end(&self) -> usize {
        self.restarts_start
    }

    /// The layout of a block already validated by [`Layout::parse`], from its remembered
    /// geometry (no byte of the block is read).
    pub(crate) fn known(
        restarts_start: usize,
        num_restarts: usize,
        base: u64,
        exact: bool,
        what: &'static str,
    ) -> Layout {
        Layout {
            restarts_start,
            num_restarts,
            base,
            exact,
            what,
        }
    }

    /// A corruption error at position `pos` of the block contents (for callers of
    /// [`scan_entries`]).
    pub(crate) fn error(&self, pos: usize, detail: impl Into<String>) -> Error {
        self.err(pos, detail)
    }

    /// Number of restart points.
    pub(crate) fn restarts(&self) -> usize {
        self.num_restarts
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Unpositioned,
    Valid,
    Done,
    Failed,
}

/// The position of an iterator inside a block, kept apart from the block's bytes.
#[derive(Debug, Clone)]
pub(crate) struct EntryCursor {
    state: State,
    /// Offset of the next entry to decode.
    next: usize,
    /// Index of the first restart point not yet reached by the scan.
    next_restart: usize,
    /// Whether `key` holds the previous key of the scan (false right after a restart seek).
    have_prev: bool,
    key: KeyBuf,
    value: (usize, usize),
}

impl EntryCursor {
    pub(crate) fn new() -> Self {
        EntryCursor {
            state: State::Unpositioned,
            next: 0,
            next_restart: 0,
            have_prev: false,
            key: KeyBuf::new(),
            value: (0, 0),
        }
    }

    pub(crate) fn valid(&self) -> bool {
        self.state == State::Valid
    }

    /// The current key (empty unless valid).
    pub(crate) fn key(&self) -> &[u8] {
        if self.valid() {
            &self.key
        } else {
            &[]
        }
    }

    /// The restart run holding the current entry (the last restart point at or before it), if
    /// valid and the entry is not before the first restart point.
    pub(crate) fn run(&self) -> Option<usize> {
        // After a step onto an entry, `next_restart` counts the restart points at or before it
        // (`step` checks that the scan meets each restart point at an entry boundary).
        self.next_restart.checked_sub(1).filter(|_| self.valid())
    }

    /// The current value within `data` (empty unless valid).
    pub(crate) fn value<'d>(&self, data: &'d [u8]) -> &'d [u8] {
        if self.valid() {
            data.get(self.value.0..self.value.1).unwrap_or(&[])
        } else {
            &[]
        }
    }

    /// Marks the cursor failed if `r` is an error.
    fn guard<T>(&mut self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.state = State::Failed;
        }
        r
    }

    /// Positions before the entry at restart point `i`.
    fn at_restart(&mut self, data: &[u8], lay: &Layout, i: usize) -> Result<()> {
        self.next = lay.restart(data, i)?;
        self.next_restart = i;
        self.have_prev = false;
        self.key.clear();
        Ok(())
    }

    pub(crate) fn seek_to_first(&mut self, data: &[u8], lay: &Layout) -> Result<bool> {
        if lay.num_restarts == 0 {
            self.state = State::Done;
            return Ok(false);
        }
        let r = self
            .at_restart(data, lay, 0)
            .and_then(|()| self.step(data, lay));
        self.guard(r)
    }

    pub(crate) fn seek(&mut self, data: &[u8], lay: &Layout, target: &[u8]) -> Result<bool> {
        let r = self.seek_inner(data, lay, target);
        self.guard(r)
    }

    fn seek_inner(&mut self, data: &[u8], lay: &Layout, target: &[u8]) -> Result<bool> {
        if lay.num_restarts == 0 {
            self.state = State::Done;
            return Ok(false);
        }
        // Binary search for the last restart point whose key is < target.
        let (mut left, mut right) = (0usize, lay.num_restarts - 1);
        while left < right {
            let mid = left + (right - left).div_ceil(2);
            let p = lay.restart(data, mid)?;
            let h = decode_header(data, lay, p)?;
            if h.shared != 0 {
                return Err(lay.err(
                    p,
                    format!(
                        "bad entry in block: restart entry shares {} bytes with the previous key",
                        h.shared
                    ),
                ));
            }
            let k = &data[h.key_start..h.key_end];
            if key_lt(k, target) {
                left = mid;
            } else {
                right = mid - 1;
            }
        }
        self.at_restart(data, lay, left)?;
        loop {
            if !self.step(data, lay)? {
                return Ok(false);
            }
            if !key_lt(&self.key, target) {
                return Ok(true);
            }
        }
    }

    pub(crate) fn next(&mut self, data: &[u8], lay: &Layout) -> Result<bool> {
        match self.state {
            State::Unpositioned => self.seek_to_first(data, lay),
            State::Valid => {
                let r = self.step(data, lay);
                self.guard(r)
            }
            State::Done => Ok(false),
            State::Failed => Err(lay.err(0, "iterator used after an error")),
        }
    }

    /// Decodes the entry at `self.next`.
    fn step(&mut self, data: &[u8], lay: &Layout) -> Result<bool> {
        let p = self.next;
        let mut at_restart = false;
        if self.next_restart < lay.num_restarts {
            let r = lay.restart(data, self.next_restart)?;
            if r < p {
                return Err(lay.err(
                    r,
                    format!(
                        "bad block contents: restart point {} at {r} is not at an entry boundary",
                        self.next_restart
                    ),
                ));
            }
            at_restart = r == p;
        }
        if p >= lay.restarts_start {
            self.state = State::Done;
            return Ok(false);
        }
        let h = decode_header(data, lay, p)?;
        if at_restart && h.shared != 0 {
            return Err(lay.err(
                p,
                format!(
                    "bad entry in block: restart entry shares {} bytes with the previous key",
                    h.shared
                ),
            ));
        }
        if h.shared > self.key.len() {
            return Err(lay.err(
                p,
                format!(
                    "bad entry in block: shares {} bytes with a previous key of {} bytes",
                    h.shared,
                    self.key.len()
                ),
            ));
        }
        let suffix = &data[h.key_start..h.key_end];
        if self.have_prev && !key_lt(&self.key[h.shared..], suffix) {
            return Err(lay.err(p, "keys not strictly increasing"));
        }
        self.key.truncate(h.shared);
        self.key.extend_from_slice(suffix);
        self.value = (h.key_end, h.end);
        self.next = h.end;
        if at_restart {
            self.next_restart += 1;
        }
        self.have_prev = true;
        self.state = State::Valid;
        Ok(true)
    }
}

/// A parsed block: borrowed contents (without trailer) whose restart array has been validated.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    data: &'a [u8],
    layout: Layout,
}

impl<'a> Block<'a> {
    /// Validates the block structure: at least 4 bytes, the restart array fits
    /// (`4 * num_restarts + 4 <= len`), restart points start at 0, are strictly increasing and
    /// lie inside the entries region. A block without entries is accepted (it yields nothing).
    /// `file_offset` is the absolute file offset of `contents[0]`, used in errors.
    pub fn parse(contents: &'a [u8], file_offset: u64) -> Result<Block<'a>> {
        let layout = Layout::parse(contents, file_offset, true, "block")?;
        Ok(Block {
            data: contents,
            layout,
        })
    }

    /// The block contents.
    pub fn contents(&self) -> &'a [u8] {
        self.data
    }

    /// Number of restart points.
    pub fn num_restarts(&self) -> usize {
        self.layout.num_restarts
    }

    /// Whether the block holds no entries.
    pub fn is_empty(&self) -> bool {
        self.layout.is_empty()
    }

    /// An unpositioned iterator over the block.
    pub fn iter(&self) -> BlockIter<'a> {
        BlockIter {
            block: *self,
            cur: EntryCursor::new(),
        }
    }
}

/// A LevelDB-style cursor over a [`Block`].
///
/// A new iterator is unpositioned; [`next`](Self::next) on it moves to the first entry, so
/// `while it.next()? { .. }` visits every entry. After an error the iterator is invalid and
/// `next` keeps failing until it is re-positioned with `seek`/`seek_to_first`.
#[derive(Debug, Clone)]
pub struct BlockIter<'a> {
    block: Block<'a>,
    cur: EntryCursor,
}

impl<'a> BlockIter<'a> {
    /// Moves to the first entry; [`valid`](Self::valid) tells whether there is one.
    pub fn seek_to_first(&mut self) -> Result<()> {
        self.cur
            .seek_to_first(self.block.data, &self.block.layout)
            .map(drop)
    }

    /// Moves to the first entry whose key is `>= target`; [`valid`](Self::valid) tells whether
    /// there is one.
    pub fn seek(&mut self, target: &[u8]) -> Result<()> {
        self.cur
            .seek(self.block.data, &self.block.layout, target)
            .map(drop)
    }

    /// Advances to the next entry (to the first one if unpositioned); returns whether the
    /// iterator is on an entry.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<bool> {
        self.cur.next(self.block.data, &self.block.layout)
    }

    /// Whether the iterator is on an entry.
    pub fn valid(&self) -> bool {
        self.cur.valid()
    }

    /// The current key (empty if not valid).
    pub fn key(&self) -> &[u8] {
        self.cur.key()
    }

    /// The current value (empty if not valid).
    pub fn value(&self) -> &'a [u8] {
        self.cur.value(self.block.data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(entries: &[(&[u8], &[u8])], interval: usize) -> Vec<u8> {
        let mut b = BlockBuilder::new(interval);
        for (k, v) in entries {
            b.add(k, v);
        }
        b.finish().to_vec()
    }

    fn sought(it: &mut BlockIter<'_>, target: &[u8]) -> bool {
        it.seek(target).unwrap();
        it.valid()
    }

    fn collect(block: &Block<'_>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut it = block.iter();
        let mut out = Vec::new();
        while it.next()? {
            out.push((it.key().to_vec(), it.value().to_vec()));
        }
        Ok(out)
    }

    #[test]
    fn empty_block_is_canonical() {
        let mut b = BlockBuilder::new(16);
        assert!(b.is_empty());
        assert_eq!(b.size_estimate(), 8);
        assert_eq!(b.finish(), &[0, 0, 0, 0, 1, 0, 0, 0]);
        let data = b.finish().to_vec();
        let blk = Block::parse(&data, 0).unwrap();
        assert!(blk.is_empty());
        assert!(collect(&blk).unwrap().is_empty());
        assert!(!sought(&mut blk.iter(), b""));
        // Zero restarts and no entries: also empty.
        let blk = Block::parse(&[0, 0, 0, 0], 0).unwrap();
        let mut it = blk.iter();
        it.seek_to_first().unwrap();
        assert!(!it.valid());
    }

    #[test]
    fn golden_tf_data_block() {
        let v1: &[u8] = &[0x08, 0x01, 0x1a, 0x02, 0x08, 0x01];
        let v2: &[u8] = &[
            0x08, 0x01, 0x12, 0x04, 0x12, 0x02, 0x08, 0x02, 0x28, 0x08, 0x35, 0x59, 0x3c, 0xe5,
            0x35,
        ];
        let mut b = BlockBuilder::new(16);
        b.add(b"", v1);
        b.add(b"w", v2);
        assert_eq!(b.size_estimate(), 36);
        assert_eq!(b.last_key(), b"w");
        let mut want = vec![0, 0, 6];
        want.extend_from_slice(v1);
        want.extend_from_slice(&[0, 1, 0x0f, b'w']);
        want.extend_from_slice(v2);
        want.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0]);
        assert_eq!(b.finish(), &want[..]);
        b.reset();
        assert!(b.is_empty());
        assert_eq!(b.last_key(), b"");
    }

    #[test]
    fn prefix_compression_and_restarts() {
        let keys: Vec<Vec<u8>> = (0..40u32)
            .map(|i| format!("key{i:04}").into_bytes())
            .collect();
        let entries: Vec<(&[u8], &[u8])> = keys.iter().map(|k| (&k[..], &b"v"[..])).collect();
        for interval in [1, 2, 16, 1024] {
            let data = build(&entries, interval);
            let blk = Block::parse(&data, 0).unwrap();
            assert_eq!(blk.num_restarts(), 40usize.div_ceil(interval));
            let got = collect(&blk).unwrap();
            assert_eq!(got.len(), 40);
            for (g, k) in got.iter().zip(&keys) {
                assert_eq!(&g.0, k);
            }
            for (i, k) in keys.iter().enumerate() {
                let mut it = blk.iter();
                assert!(sought(&mut it, k));
                assert_eq!(it.key(), &k[..]);
                // A key just below lands on it too.
                let mut lower = k.clone();
                lower.pop();
                assert!(sought(&mut it, &lower));
                assert!(it.key() <= &k[..]);
                // Just above lands on the next one.
                let mut upper = k.clone();
                upper.push(0);
                let found = sought(&mut it, &upper);
                assert_eq!(found, i + 1 < keys.len());
                if found {
                    assert_eq!(it.key(), &keys[i + 1][..]);
                    assert!(it.next().unwrap() == (i + 2 < keys.len()));
                }
            }
            assert!(!sought(&mut blk.iter(), b"z"));
        }
        // shared > 0 inside a restart run.
        let data = build(&entries[..3], 16);
        assert_eq!(&data[..3], &[0, 7, 1]);
        assert_eq!(data[11], 6); // second entry shares "key000"
    }

    fn err_of(data: &[u8]) -> String {
        match Block::parse(data, 1000) {
            Err(e) => e.to_string(),
            Ok(b) => match collect(&b) {
                Err(e) => e.to_string(),
                Ok(v) => panic!("no error, got {v:?}"),
            },
        }
    }

    #[test]
    fn rejects_bad_restart_arrays() {
        assert!(err_of(&[1, 0, 0]).contains("too short"));
        assert!(err_of(&[0, 0, 0, 0, 2, 0, 0, 0]).contains("restart points do not fit"));
        assert!(err_of(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]).contains("do not fit"));
        let good = build(&[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], 1);
        // Entries of 5 bytes at 0, 5, 10; restart array at 15 (0, 5, 10); count at 27.
        assert_eq!(good.len(), 31);
        let mut bad = good.clone();
        bad[15] = 1; // first restart != 0
        assert!(err_of(&bad).contains("first restart point"));
        let mut bad = good.clone();
        bad[19] = 10; // 0, 10, 10
        assert!(err_of(&bad).contains("strictly increasing"));
        let mut bad = good.clone();
        bad[23] = 15; // outside the entries
        assert!(err_of(&bad).contains("outside the entries"));
        let mut bad = good.clone();
        bad[19] = 6; // 0, 6, 10: 6 is inside the second entry
        assert!(err_of(&bad).contains("entry boundary"), "{}", err_of(&bad));
        // Entries but no restarts.
        assert!(err_of(&[0, 1, 1, b'a', b'x', 0, 0, 0, 0]).contains("no restart points"));
    }

    #[test]
    fn rejects_bad_entries_with_offsets() {
        let good = build(&[(b"abc", b"1"), (b"abd", b"2")], 16);
        // entry 0 at 0: 00 03 01 'abc' '1'; entry 1 at 7: 02 01 01 'd' '2'
        let mut bad = good.clone();
        bad[7] = 4; // shared 4 > previous key length 3
        let e = err_of(&bad);
        assert!(
            e.contains("shares 4 bytes") && e.contains("offset 1007"),
            "{e}"
        );
        let mut bad = good.clone();
        bad[10] = b'c'; // "abc" again
        assert!(err_of(&bad).contains("not strictly increasing"));
        let mut bad = good.clone();
        bad[10] = b'a'; // "aba" < "abc"
        assert!(err_of(&bad).contains("not strictly increasing"));
        let mut bad = good.clone();
        bad[9] = 50; // value runs past the entries
        assert!(err_of(&bad).contains("run past"));
        let mut bad = good.clone();
        bad[0] = 1; // restart entry with shared != 0
        assert!(err_of(&bad).contains("bad entry in block"));
        let mut bad = good.clone();
        bad[7..10].copy_from_slice(&[0x80, 0x80, 0x80]);
        assert!(err_of(&bad).contains("varint"));
        // Over-long varint: 6 bytes.
        let mut blk = vec![0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0, 0];
        blk.extend_from_slice(&[0, 0, 0, 0, 1, 0, 0, 0]);
        assert!(err_of(&blk).contains("varint"));
        // Seek on a restart entry with shared != 0.
        let good = build(&[(b"a", b"1"), (b"b", b"2"), (b"c", b"3")], 1);
        let mut bad = good.clone();
        bad[5] = 1; // second restart entry claims a shared prefix
        let blk = Block::parse(&bad, 0).unwrap();
        assert!(collect(&blk)
            .unwrap_err()
            .to_string()
            .contains("bad entry in block"));
        let e = blk.iter().seek(b"c").unwrap_err().to_string();
        assert!(e.contains("bad entry in block"), "{e}");
        // Iterator stays failed after an error.
        let mut it = blk.iter();
        assert!(it.seek(b"c").is_err());
        assert!(!it.valid());
        assert!(it.next().is_err());
        it.seek_to_first().unwrap();
        assert!(it.valid());
    }

    #[test]
    fn long_keys_spill_and_work() {
        let k1 = vec![7u8; 300];
        let mut k2 = k1.clone();
        k2.push(0);
        let data = build(&[(&k1, b"x"), (&k2, b"y")], 16);
        let blk = Block::parse(&data, 0).unwrap();
        let got = collect(&blk).unwrap();
        assert_eq!(got[0].0, k1);
        assert_eq!(got[1].0, k2);
        let mut it = blk.iter();
        assert!(sought(&mut it, &k2));
        assert_eq!(it.value(), b"y");
    }
}
