//! Walking an index in name order ([`Iter`]), written once for every [`Reader`]: the bounds,
//! the skipping of the header entry and of slice keys, and the walk through a tensor stored in
//! slices are here; what a reader does with an entry (a view of a mapped file's bytes, or a
//! record fetched by ranges) is its [`Walk`].
//!
//! [`Reader`]: crate::Reader

use std::ops::Bound;

use crate::error::Result;
use crate::native::entry::Partition;
use crate::native::view::TensorView;
use crate::table::{Table, TableIter};

/// The smallest key that is not in the slice space of a version 2 file (names starting with a
/// NUL byte are slice keys there, SPEC.md 13).
pub(crate) const FIRST_NAME: &[u8] = b"\x01";

/// What an index entry holds.
pub(crate) enum Found<'r> {
    /// A tensor stored whole.
    Whole(TensorView<'r>),
    /// A tensor stored in slices.
    Partitioned(Partition),
}

/// What walking an index needs of a reader: its index table, whether version 2 rules apply,
/// and the view of an entry (checked) and of a partitioned tensor's slice.
pub(crate) trait Walk: Sync {
    /// The index table.
    fn walk_table(&self) -> Table<'_>;
    /// Whether names starting with a NUL byte are slice keys (a version 2 file).
    fn walk_is_v2(&self) -> bool;
    /// Checks the entry `value` of `key` (in the block at `at`) and says what it holds.
    fn found<'r>(&'r self, key: &[u8], value: &[u8], at: u64) -> Result<Found<'r>>;
    /// The view of slice `i` of partitioned tensor `p`.
    fn piece<'r>(&'r self, p: &Partition, i: usize) -> Result<TensorView<'r>>;
}

/// Moves `it` past the header entry and, in a version 2 file, past the slice keys.
pub(crate) fn skip_non_names(it: &mut TableIter<'_>, is_v2: bool) -> Result<()> {
    while it.valid() {
        let key = it.key();
        if key.is_empty() {
            it.next()?;
        } else if is_v2 && key[0] == 0 {
            it.seek(FIRST_NAME)?;
        } else {
            break;
        }
    }
    Ok(())
}

/// The smallest byte string greater than every string starting with `p`, if any.
pub(crate) fn prefix_successor(p: &[u8]) -> Option<Vec<u8>> {
    let mut s = p.to_vec();
    while let Some(last) = s.pop() {
        if last < 0xff {
            s.push(last + 1);
            return Some(s);
        }
    }
    None
}

/// Iterator over stored tensors in name order; see [`Reader::iter`](crate::Reader::iter).
pub struct Iter<'r> {
    reader: &'r dyn Walk,
    inner: TableIter<'r>,
    start: Option<Bound<Vec<u8>>>,
    end: Bound<Vec<u8>>,
    done: bool,
    /// The tensor stored in slices being walked, and its next slice.
    pieces: Option<(Partition, usize)>,
}

impl<'r> Iter<'r> {
    /// The stored tensors of `reader` whose names fall in the given bounds.
    pub(crate) fn new(reader: &'r dyn Walk, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Self {
        Iter {
            reader,
            inner: reader.walk_table().into_iter_owned(),
            start: Some(start),
            end,
            done: false,
            pieces: None,
        }
    }

    fn step(&mut self) -> Result<Option<TensorView<'r>>> {
        loop {
            if let Some((p, i)) = &mut self.pieces {
                if *i < p.regions.len() {
                    let v = self.reader.piece(p, *i)?;
                    *i += 1;
                    return Ok(Some(v));
                }
                self.pieces = None;
            }
            match self.start.take() {
                Some(Bound::Unbounded) => self.inner.seek_to_first()?,
                Some(Bound::Included(k)) => self.inner.seek(&k)?,
                Some(Bound::Excluded(k)) => {
                    self.inner.seek(&k)?;
                    if self.inner.valid() && self.inner.key() == k.as_slice() {
                        self.inner.next()?;
                    }
                }
                None => {
                    self.inner.next()?;
                }
            }
            // Skip the header entry (and, in a version 2 file, the slice keys).
            skip_non_names(&mut self.inner, self.reader.walk_is_v2())?;
            if !self.inner.valid() {
                return Ok(None);
            }
            let key = self.inner.key();
            let past = match &self.end {
                Bound::Unbounded => false,
                Bound::Included(e) => key > e.as_slice(),
                Bound::Excluded(e) => key >= e.as_slice(),
            };
            if past {
                return Ok(None);
            }
            let at = self.inner.block_offset();
            match self.reader.found(key, self.inner.value(), at)? {
                Found::Whole(v) => return Ok(Some(v)),
                Found::Partitioned(p) => self.pieces = Some((p, 0)),
            }
        }
    }
}

impl<'r> Iterator for Iter<'r> {
    type Item = Result<TensorView<'r>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(v)) => Some(Ok(v)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}
