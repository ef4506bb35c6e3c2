//! Regions of a tensor and the arithmetic slices need (SPEC.md 13).
//!
//! A [`Region`] is a box: per dimension, a first index and a count. A tensor stored in slices
//! (a partitioned tensor) is a full-tensor entry listing the regions of its slices, plus one
//! ordinary entry per slice keyed by [`super::slice_key::encode`]. This module resolves
//! TensorFlow's extents against a shape ([`resolve`], [`Region::extents`]), finds overlapping
//! slices ([`find_overlap`]), tells when a region is one contiguous run of a row-major array
//! ([`contiguous`]), copies a region between row-major arrays ([`copy_region`]), and assembles a
//! whole tensor from slices that must tile it exactly ([`tile`], as TensorFlow's
//! `TensorSliceSet` does). Pure functions: no I/O.

use super::slice_key::Extent;

/// A box inside a tensor: per dimension, the first index and the number of indices.
///
/// ```
/// use paramdex::Region;
/// let rows = Region::new(vec![0, 0], vec![128, 64]).unwrap();
/// assert!(rows.is_within(&[256, 64]));
/// assert_eq!(rows.numel(), Some(128 * 64));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Region {
    /// First index per dimension.
    pub start: Vec<u64>,
    /// Count per dimension.
    pub len: Vec<u64>,
}

impl Region {
    /// A region from its starts and lengths; `None` when they have different ranks.
    pub fn new(start: Vec<u64>, len: Vec<u64>) -> Option<Region> {
        (start.len() == len.len()).then_some(Region { start, len })
    }

    /// The whole of a tensor of shape `shape`.
    pub fn full(shape: &[u64]) -> Region {
        Region {
            start: vec![0; shape.len()],
            len: shape.to_vec(),
        }
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.len.len()
    }

    /// Number of elements (0 if any dimension is empty; 1 for rank 0); `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.len.iter().try_fold(1u64, |a, &l| a.checked_mul(l))
    }

    /// Whether the region has no element.
    pub fn is_empty(&self) -> bool {
        self.len.contains(&0)
    }

    /// Whether the region lies inside a tensor of shape `shape` (same rank, every
    /// `start + len <= dim`, without overflow).
    pub fn is_within(&self, shape: &[u64]) -> bool {
        self.start.len() == shape.len()
            && self.len.len() == shape.len()
            && self
                .start
                .iter()
                .zip(&self.len)
                .zip(shape)
                .all(|((&s, &l), &d)| s.checked_add(l).is_some_and(|e| e <= d))
    }

    /// [`Region::is_within`], as the error every region read gives otherwise:
    /// [`crate::Error::InvalidArgument`] naming the region, the tensor `name` and its shape.
    pub(crate) fn check_within(&self, shape: &[u64], name: &[u8]) -> crate::Result<()> {
        if self.is_within(shape) {
            return Ok(());
        }
        Err(crate::Error::InvalidArgument(format!(
            "region at {:?} of lengths {:?} does not lie inside tensor {} of shape {shape:?}",
            self.start,
            self.len,
            crate::name::display(name)
        )))
    }

    /// Whether the region is the whole of a tensor of shape `shape`.
    pub fn is_full(&self, shape: &[u64]) -> bool {
        self.len == shape && self.start.iter().all(|&s| s == 0)
    }

    /// The elements both regions hold, or `None` when they share none (an empty region shares
    /// nothing). Both must lie inside one shape (so no end overflows).
    pub fn intersect(&self, other: &Region) -> Option<Region> {
        if self.rank() != other.rank() {
            return None;
        }
        let mut r = Region {
            start: Vec::with_capacity(self.rank()),
            len: Vec::with_capacity(self.rank()),
        };
        for d in 0..self.rank() {
            let lo = self.start[d].max(other.start[d]);
            let hi = self.end(d).min(other.end(d));
            if hi <= lo {
                return None;
            }
            r.start.push(lo);
            r.len.push(hi - lo);
        }
        Some(r)
    }

    /// Whether the two regions share an element.
    pub fn overlaps(&self, other: &Region) -> bool {
        self.rank() == other.rank()
            && (0..self.rank())
                .all(|d| self.start[d].max(other.start[d]) < self.end(d).min(other.end(d)))
    }

    /// Whether `other` lies inside this region.
    pub fn contains(&self, other: &Region) -> bool {
        self.rank() == other.rank()
            && (0..self.rank())
                .all(|d| other.start[d] >= self.start[d] && other.end(d) <= self.end(d))
    }

    /// Where this region starts inside `outer`, per dimension (`start − outer.start`), for a
    /// region that [`Region::contains`] says lies inside `outer` (saturating otherwise).
    pub fn offset_in(&self, outer: &Region) -> Vec<u64> {
        self.start
            .iter()
            .zip(&outer.start)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect()
    }

    /// One past the last index in dimension `d` (saturating; inside a shape it is exact).
    pub fn end(&self, d: usize) -> u64 {
        self.start[d].saturating_add(self.len[d])
    }

    /// TensorFlow's extents of this region of a tensor of shape `shape`: a whole dimension is
    /// [`Extent::FULL`], as TensorFlow writes it, any other `(start, length)`.
    pub fn extents(&self, shape: &[u64]) -> Vec<Extent> {
        self.start
            .iter()
            .zip(&self.len)
            .zip(shape)
            .map(|((&s, &l), &d)| {
                if s == 0 && l == d {
                    Extent::FULL
                } else {
                    Extent {
                        start: i64::try_from(s).unwrap_or(i64::MAX),
                        length: i64::try_from(l).unwrap_or(i64::MAX),
                    }
                }
            })
            .collect()
    }
}

/// Bytes of `region` at `esize` bytes per element, as a buffer length: an error naming the
/// region when they do not fit in memory (only on a 32-bit host: a region inside a checked
/// shape has at most as many bytes as the tensor, which fit in 64 bits).
pub(crate) fn byte_len(region: &Region, esize: usize) -> crate::error::Result<usize> {
    region
        .numel()
        .and_then(|n| n.checked_mul(esize as u64))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            crate::error::Error::InvalidArgument(format!(
                "the region at {:?} of lengths {:?} does not fit in memory",
                region.start, region.len
            ))
        })
}

/// Resolves `extents` against `shape`: a full extent (length -1) is the whole dimension (and
/// must start at 0); otherwise `0 <= start`, `0 <= length` and `start + length <= dim`.
pub fn resolve(extents: &[Extent], shape: &[u64]) -> Result<Region, String> {
    if extents.len() != shape.len() {
        return Err(format!(
            "slice has {} dimensions, the tensor {}",
            extents.len(),
            shape.len()
        ));
    }
    let mut r = Region {
        start: Vec::with_capacity(shape.len()),
        len: Vec::with_capacity(shape.len()),
    };
    for (d, (e, &dim)) in extents.iter().zip(shape).enumerate() {
        let (s, l) = if e.length == -1 {
            if e.start != 0 {
                return Err(format!(
                    "dimension {d}: a full extent starting at {}",
                    e.start
                ));
            }
            (0, dim)
        } else {
            let s = u64::try_from(e.start)
                .map_err(|_| format!("dimension {d}: negative start {}", e.start))?;
            let l = u64::try_from(e.length)
                .map_err(|_| format!("dimension {d}: negative length {}", e.length))?;
            if s.checked_add(l).is_none_or(|end| end > dim) {
                return Err(format!(
                    "dimension {d}: extent {s}+{l} exceeds the dimension ({dim})"
                ));
            }
            (s, l)
        };
        r.start.push(s);
        r.len.push(l);
    }
    Ok(r)
}

/// A pair of regions that share an element, if any (each pair reported by its indices in
/// `regions`, lower first). All regions must have one rank and lie inside one shape.
///
/// The regions are swept along the dimension where their starts differ most: the slices of a
/// partitioned tensor cut one or two dimensions, so each region is compared with the few that
/// span the same positions along that dimension.
pub fn find_overlap(regions: &[Region]) -> Option<(usize, usize)> {
    let live: Vec<usize> = (0..regions.len())
        .filter(|&i| !regions[i].is_empty())
        .collect();
    if live.len() < 2 {
        return None;
    }
    let rank = regions[live[0]].rank();
    if rank == 0 {
        return Some((live[0], live[1]));
    }
    let distinct = |d: usize| {
        let mut s: Vec<u64> = live.iter().map(|&i| regions[i].start[d]).collect();
        s.sort_unstable();
        s.dedup();
        s.len()
    };
    let d = (0..rank).max_by_key(|&d| distinct(d)).unwrap_or(0);
    let mut order = live;
    order.sort_by_key(|&i| regions[i].start[d]);
    let mut active: Vec<usize> = Vec::new();
    for &i in &order {
        let r = &regions[i];
        active.retain(|&j| regions[j].end(d) > r.start[d]);
        if let Some(&j) = active.iter().find(|&&j| regions[j].overlaps(r)) {
            return Some((i.min(j), i.max(j)));
        }
        active.push(i);
    }
    None
}

/// Row-major strides (in elements) of a tensor of shape `shape`; `None` on overflow.
fn strides(shape: &[u64]) -> Option<Vec<u64>> {
    let mut s = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1].checked_mul(shape[d + 1])?;
    }
    Some(s)
}

/// When `region` (inside `shape`) is one contiguous run of a row-major array of shape `shape`,
/// its first element and element count; else `None`. An empty region is the empty run at 0.
///
/// A region is contiguous when every dimension before some `j` has length 1 and every
/// dimension after `j` is whole.
pub fn contiguous(shape: &[u64], region: &Region) -> Option<(u64, u64)> {
    if region.is_empty() {
        return Some((0, 0));
    }
    let rank = shape.len();
    let j = (0..rank)
        .rev()
        .find(|&d| !(region.start[d] == 0 && region.len[d] == shape[d]))
        .unwrap_or(0);
    if (0..j).any(|d| region.len[d] != 1) {
        return None;
    }
    let stride = strides(shape)?;
    let first = (0..rank).try_fold(0u64, |acc, d| {
        acc.checked_add(region.start[d].checked_mul(stride[d])?)
    })?;
    Some((first, region.numel()?))
}

/// The byte ranges `[start, end)` of a row-major array of shape `shape` (elements of `esize`
/// bytes) that hold the box of lengths `len` starting at `at`, in increasing order, with ranges
/// less than `gap` bytes apart merged into one. `f` is called per range and returns whether to
/// go on. What a read of the box needs from storage, to tell the kernel (`madvise`) before it
/// faults the pages in. Nothing is called for an empty box, or when the box does not lie inside
/// the array or a figure overflows.
pub(crate) fn byte_ranges(
    shape: &[u64],
    at: &[u64],
    len: &[u64],
    esize: u64,
    gap: u64,
    mut f: impl FnMut(u64, u64) -> bool,
) {
    let rank = shape.len();
    let inside = at.len() == rank
        && len.len() == rank
        && (0..rank).all(|d| at[d].checked_add(len[d]).is_some_and(|e| e <= shape[d]));
    if !inside || len.contains(&0) {
        return;
    }
    let Some(stride) = strides(shape) else {
        return;
    };
    // Inner dimensions whole in the box are one run with the innermost one that is not.
    let mut j = rank;
    while j > 0 && len[j - 1] == shape[j - 1] {
        j -= 1;
    }
    let j = j.saturating_sub(1);
    let Some(run) = len[j..].iter().try_fold(esize, |a, &l| a.checked_mul(l)) else {
        return;
    };
    let offset = |idx: &[u64]| -> Option<u64> {
        (0..rank).try_fold(0u64, |acc, d| {
            let i = at[d].checked_add(idx.get(d).copied().unwrap_or(0))?;
            acc.checked_add(i.checked_mul(stride[d])?)
        })
    };
    let mut idx = vec![0u64; j];
    let mut open: Option<(u64, u64)> = None;
    loop {
        let Some(start) = offset(&idx).and_then(|e| e.checked_mul(esize)) else {
            return;
        };
        let Some(end) = start.checked_add(run) else {
            return;
        };
        open = match open {
            Some((s, e)) if start.saturating_sub(e) < gap => Some((s, end)),
            Some((s, e)) => {
                if !f(s, e) {
                    return;
                }
                Some((start, end))
            }
            None => Some((start, end)),
        };
        // Odometer over the dimensions before j; done when it wraps around.
        if !odometer_next(&mut idx, &len[..j]) {
            break;
        }
    }
    if let Some((s, e)) = open {
        f(s, e);
    }
}

/// Copies `part` of a tensor from `src`, which holds its region `src_region` row-major, into
/// `dst`, which holds its region `dst_region`: [`copy_region`] with `part` placed inside each
/// (it must lie inside both; otherwise an error and nothing copied). This is how a region is
/// assembled from the stored slices that overlap it.
pub fn copy_part(
    src: &[u8],
    src_region: &Region,
    dst: &mut [u8],
    dst_region: &Region,
    part: &Region,
    esize: usize,
) -> Result<(), String> {
    if !src_region.contains(part) || !dst_region.contains(part) {
        return Err("the part does not lie inside both regions".into());
    }
    copy_region(
        src,
        &src_region.len,
        &part.offset_in(src_region),
        dst,
        &dst_region.len,
        &part.offset_in(dst_region),
        &part.len,
        esize,
    )
}

/// Copies the box of lengths `len` from `src` (a row-major array of shape `src_shape`, the box
/// starting at `src_at`) into `dst` (shape `dst_shape`, starting at `dst_at`); elements are
/// `esize` bytes. Dimensions whole in both arrays are copied as one run.
///
/// Errors (nothing copied) when a rank differs, a box does not lie inside its array, or a
/// buffer is not exactly its array's size.
#[allow(clippy::too_many_arguments)]
pub fn copy_region(
    src: &[u8],
    src_shape: &[u64],
    src_at: &[u64],
    dst: &mut [u8],
    dst_shape: &[u64],
    dst_at: &[u64],
    len: &[u64],
    esize: usize,
) -> Result<(), String> {
    let rank = len.len();
    if [src_shape.len(), src_at.len(), dst_shape.len(), dst_at.len()]
        .iter()
        .any(|&r| r != rank)
    {
        return Err("ranks differ".into());
    }
    let size = |shape: &[u64]| {
        shape
            .iter()
            .try_fold(esize as u64, |a, &d| a.checked_mul(d))
            .and_then(|n| usize::try_from(n).ok())
    };
    if size(src_shape) != Some(src.len()) || size(dst_shape) != Some(dst.len()) {
        return Err("a buffer is not the size of its array".into());
    }
    let inside = |at: &[u64], shape: &[u64]| {
        at.iter()
            .zip(len)
            .zip(shape)
            .all(|((&a, &l), &d)| a.checked_add(l).is_some_and(|e| e <= d))
    };
    if !inside(src_at, src_shape) || !inside(dst_at, dst_shape) {
        return Err("the box does not lie inside both arrays".into());
    }
    if len.contains(&0) {
        return Ok(());
    }
    // Every figure below is at most an array's element count, which fits in usize (the buffers
    // exist), so the arithmetic on them cannot overflow.
    let to_usize = |v: &[u64]| -> Result<Vec<usize>, String> {
        v.iter()
            .map(|&x| {
                usize::try_from(x).map_err(|_| "a figure exceeds the address space".to_string())
            })
            .collect()
    };
    let (src_shape, src_at, dst_shape, dst_at, len) = (
        to_usize(src_shape)?,
        to_usize(src_at)?,
        to_usize(dst_shape)?,
        to_usize(dst_at)?,
        to_usize(len)?,
    );
    let strides = |shape: &[usize]| {
        let mut s = vec![1usize; shape.len()];
        for d in (0..shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * shape[d + 1];
        }
        s
    };
    let (ss, ds) = (strides(&src_shape), strides(&dst_shape));
    // Merge inner dimensions that are whole in the box and in both arrays into one run.
    let mut j = rank;
    let mut run = 1usize;
    while j > 0 && len[j - 1] == src_shape[j - 1] && len[j - 1] == dst_shape[j - 1] {
        j -= 1;
        run *= len[j];
    }
    if j > 0 {
        // The innermost dimension that is not merged is also part of the run.
        j -= 1;
        run *= len[j];
    }
    let run_bytes = run * esize;
    let mut idx = vec![0usize; j];
    loop {
        let (mut s, mut t) = if rank > 0 {
            (src_at[j] * ss[j], dst_at[j] * ds[j])
        } else {
            (0, 0)
        };
        for d in 0..j {
            s += (src_at[d] + idx[d]) * ss[d];
            t += (dst_at[d] + idx[d]) * ds[d];
        }
        let (s, t) = (s * esize, t * esize);
        dst[t..t + run_bytes].copy_from_slice(&src[s..s + run_bytes]);
        // Odometer over the dimensions before j; done when it wraps around.
        if !odometer_next(&mut idx, &len[..j]) {
            return Ok(());
        }
    }
}

/// A bit per element of the full tensor, to detect overlaps and gaps.
struct Coverage {
    words: Vec<u64>,
    set: u64,
}

impl Coverage {
    fn new(numel: usize) -> Coverage {
        Coverage {
            words: vec![0; numel.div_ceil(64)],
            set: 0,
        }
    }

    /// Marks `[start, start + n)`; false if any of them was already marked.
    fn mark(&mut self, start: usize, n: usize) -> bool {
        let end = start + n;
        let mut i = start;
        while i < end {
            let (w, b) = (i / 64, i % 64);
            let take = (64 - b).min(end - i);
            let mask = if take == 64 {
                u64::MAX
            } else {
                ((1u64 << take) - 1) << b
            };
            if self.words[w] & mask != 0 {
                return false;
            }
            self.words[w] |= mask;
            i += take;
        }
        self.set += n as u64;
        true
    }
}

/// Checks that `regions` tile `shape` exactly (inside, no overlap, full coverage) and, when
/// `out` is given, copies each region's row-major data (`datas[i]`, exactly
/// `numel(region) * elsize` bytes) into `out` (the full tensor, `numel(shape) * elsize`
/// bytes). The caller has bounded `numel(shape) * elsize` by the data actually present.
// Every index below is at most `numel`, which was checked to fit in usize.
#[allow(clippy::cast_possible_truncation)]
pub fn tile(
    shape: &[u64],
    elsize: usize,
    regions: &[Region],
    datas: &[&[u8]],
    mut out: Option<&mut [u8]>,
) -> Result<(), String> {
    let numel = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .and_then(|n| usize::try_from(n).ok())
        .ok_or("the tensor's element count overflows")?;
    if let Some(o) = &out {
        if numel.checked_mul(elsize) != Some(o.len()) {
            return Err("output buffer has the wrong size".into());
        }
    }
    let rank = shape.len();
    // Row-major strides of the full tensor, in elements (all products <= numel).
    let mut stride = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        stride[d] = stride[d + 1] * shape[d + 1] as usize;
    }
    let mut cov = Coverage::new(numel);
    for (i, (r, data)) in regions.iter().zip(datas).enumerate() {
        let n = r.numel().ok_or("slice element count overflows")?;
        if n.checked_mul(elsize as u64) != Some(data.len() as u64) {
            return Err(format!(
                "slice {i} holds {} bytes, its extent needs {n} elements of {elsize} bytes",
                data.len()
            ));
        }
        if n == 0 {
            continue;
        }
        // Dimensions from `j` on are copied as one contiguous run: every dimension after `j`
        // is whole. All values below are <= numel since the region lies inside the shape.
        let j = (0..rank).rev().find(|&d| r.len[d] != shape[d]).unwrap_or(0);
        let run = if rank == 0 {
            1
        } else {
            r.len[j] as usize * stride[j]
        };
        let mut idx = vec![0u64; j];
        let mut src = 0usize;
        loop {
            let mut dst = 0usize;
            for d in 0..j {
                dst += (r.start[d] + idx[d]) as usize * stride[d];
            }
            if rank > 0 {
                dst += r.start[j] as usize * stride[j];
            }
            if !cov.mark(dst, run) {
                return Err(format!("slice {i} overlaps another slice"));
            }
            if let Some(o) = out.as_deref_mut() {
                o[dst * elsize..(dst + run) * elsize]
                    .copy_from_slice(&data[src * elsize..(src + run) * elsize]);
            }
            src += run;
            // Odometer over the dimensions before j; done when it wraps around.
            if !odometer_next(&mut idx, &r.len[..j]) {
                break;
            }
        }
    }
    if cov.set != numel as u64 {
        return Err(format!("the slices cover {} of {numel} elements", cov.set));
    }
    Ok(())
}

/// Advances `idx`, an odometer over dimensions of lengths `len` (the last fastest), by one;
/// `false` once it wraps around to all zeros, every index having been visited.
fn odometer_next<T>(idx: &mut [T], len: &[T]) -> bool
where
    T: Copy + PartialOrd + std::ops::AddAssign + From<u8>,
{
    for (i, &l) in idx.iter_mut().zip(len).rev() {
        *i += T::from(1);
        if *i < l {
            return true;
        }
        *i = T::from(0);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(start: &[u64], len: &[u64]) -> Region {
        Region {
            start: start.to_vec(),
            len: len.to_vec(),
        }
    }

    /// Row-major values of `r` within a tensor of `shape` whose element i is i (as u8).
    fn cut(shape: &[u64], r: &Region) -> Vec<u8> {
        let full: Vec<u8> = (0..shape.iter().product::<u64>())
            .map(|i| i as u8)
            .collect();
        let mut out = Vec::new();
        let n = r.numel().unwrap();
        for k in 0..n {
            let mut rem = k;
            let mut flat = 0u64;
            let mut mul = 1u64;
            for d in (0..shape.len()).rev() {
                let i = rem % r.len[d] + r.start[d];
                rem /= r.len[d];
                flat += i * mul;
                mul *= shape[d];
            }
            out.push(full[flat as usize]);
        }
        out
    }

    fn check(shape: &[u64], regions: &[Region]) -> Result<Vec<u8>, String> {
        let datas: Vec<Vec<u8>> = regions.iter().map(|r| cut(shape, r)).collect();
        let refs: Vec<&[u8]> = datas.iter().map(|d| &d[..]).collect();
        let mut out = vec![0xaa; shape.iter().product::<u64>() as usize];
        tile(shape, 1, regions, &refs, Some(&mut out))?;
        Ok(out)
    }

    #[test]
    fn tiles_rows_columns_and_blocks() {
        let want = |n: u64| (0..n).map(|i| i as u8).collect::<Vec<u8>>();
        // rows
        let r = [reg(&[0, 0], &[2, 3]), reg(&[2, 0], &[2, 3])];
        assert_eq!(check(&[4, 3], &r).unwrap(), want(12));
        // columns
        let r = [reg(&[0, 0], &[4, 1]), reg(&[0, 1], &[4, 2])];
        assert_eq!(check(&[4, 3], &r).unwrap(), want(12));
        // 3-D blocks on two axes, uneven
        let s = [3, 4, 5];
        let r = [
            reg(&[0, 0, 0], &[3, 1, 5]),
            reg(&[0, 1, 0], &[2, 3, 5]),
            reg(&[2, 1, 0], &[1, 3, 2]),
            reg(&[2, 1, 2], &[1, 3, 3]),
        ];
        assert_eq!(check(&s, &r).unwrap(), want(60));
        // scalar and empty
        assert_eq!(check(&[], &[reg(&[], &[])]).unwrap(), want(1));
        assert_eq!(check(&[0, 4], &[reg(&[0, 0], &[0, 4])]).unwrap(), want(0));
    }

    #[test]
    fn rejects_gaps_overlaps_and_bad_sizes() {
        let gap = [reg(&[0, 0], &[1, 3]), reg(&[2, 0], &[2, 3])];
        assert!(check(&[4, 3], &gap).unwrap_err().contains("cover 9 of 12"));
        let overlap = [reg(&[0, 0], &[3, 3]), reg(&[2, 0], &[2, 3])];
        assert!(check(&[4, 3], &overlap).unwrap_err().contains("overlaps"));
        let r = [reg(&[0], &[4])];
        assert!(tile(&[4], 1, &r, &[&[0u8; 3][..]], None).is_err());
        assert!(resolve(
            &[Extent {
                start: 3,
                length: 2
            }],
            &[4]
        )
        .is_err());
        assert!(resolve(
            &[Extent {
                start: -1,
                length: 2
            }],
            &[4]
        )
        .is_err());
        assert!(resolve(
            &[Extent {
                start: 1,
                length: -1
            }],
            &[4]
        )
        .is_err());
        assert!(resolve(
            &[Extent {
                start: i64::MAX,
                length: i64::MAX
            }],
            &[4]
        )
        .is_err());
        assert_eq!(
            resolve(
                &[
                    Extent::FULL,
                    Extent {
                        start: 1,
                        length: 2
                    }
                ],
                &[4, 3]
            )
            .unwrap(),
            reg(&[0, 1], &[4, 2])
        );
    }

    /// A small deterministic generator for the randomized tests below.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n.max(1)
        }
        fn region_in(&mut self, shape: &[u64]) -> Region {
            let mut r = Region::full(shape);
            for (d, &dim) in shape.iter().enumerate() {
                r.start[d] = self.below(dim + 1);
                r.len[d] = self.below(dim - r.start[d] + 1);
            }
            r
        }
    }

    /// Flat row-major index of `at` in `shape`.
    fn flat(shape: &[u64], at: &[u64]) -> u64 {
        at.iter().zip(shape).fold(0, |acc, (&i, &d)| acc * d + i)
    }

    #[test]
    fn byte_ranges_cover_exactly_the_box() {
        let mut rng = Rng(0x0bad_cafe_f00d_1234);
        for _ in 0..2000 {
            let rank = rng.below(4) as usize;
            let shape: Vec<u64> = (0..rank).map(|_| rng.below(6) + 1).collect();
            let b = rng.region_in(&shape);
            let esize = [1u64, 2, 4][rng.below(3) as usize];
            let gap = [0u64, 1, 8, 64][rng.below(4) as usize];
            let numel: u64 = shape.iter().product();
            // Bytes of the box, element by element.
            let mut want = vec![false; (numel * esize) as usize];
            let mut idx = vec![0u64; rank];
            if !b.is_empty() {
                loop {
                    let at: Vec<u64> = (0..rank).map(|d| b.start[d] + idx[d]).collect();
                    let e = flat(&shape, &at) * esize;
                    want[e as usize..(e + esize) as usize].fill(true);
                    let mut d = rank;
                    let mut done = true;
                    while d > 0 {
                        d -= 1;
                        idx[d] += 1;
                        if idx[d] < b.len[d] {
                            done = false;
                            break;
                        }
                        idx[d] = 0;
                    }
                    if done {
                        break;
                    }
                }
            }
            let mut ranges = Vec::new();
            byte_ranges(&shape, &b.start, &b.len, esize, gap, |s, e| {
                ranges.push((s, e));
                true
            });
            let mut got = vec![false; want.len()];
            for (k, &(s, e)) in ranges.iter().enumerate() {
                assert!(
                    s < e && e <= want.len() as u64,
                    "{shape:?} {b:?}: {ranges:?}"
                );
                if k > 0 {
                    // In order, apart by at least the gap (and never touching when gap > 0).
                    assert!(s >= ranges[k - 1].1 + gap.max(1) || gap == 0 && s >= ranges[k - 1].1);
                }
                got[s as usize..e as usize].fill(true);
            }
            // Every byte of the box is in a range; with no merging, only those bytes.
            for (i, (&w, &g)) in want.iter().zip(&got).enumerate() {
                assert!(!w || g, "{shape:?} {b:?} byte {i} missed: {ranges:?}");
                assert!(
                    gap > 1 || w == g,
                    "{shape:?} {b:?} byte {i} extra: {ranges:?}"
                );
            }
            // The callback stops the walk.
            let mut calls = 0;
            byte_ranges(&shape, &b.start, &b.len, esize, 0, |_, _| {
                calls += 1;
                false
            });
            assert!(calls <= 1);
        }
        // A box outside the array gives nothing.
        byte_ranges(&[4, 4], &[3, 0], &[2, 4], 4, 0, |_, _| panic!("outside"));
    }

    #[test]
    fn copy_region_matches_an_element_by_element_copy() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for _ in 0..2000 {
            let rank = rng.below(4) as usize;
            let src_shape: Vec<u64> = (0..rank).map(|_| rng.below(5) + 1).collect();
            let b = rng.region_in(&src_shape);
            let dst_shape: Vec<u64> = b.len.iter().map(|&l| l + rng.below(3)).collect();
            let dst_at: Vec<u64> = dst_shape
                .iter()
                .zip(&b.len)
                .map(|(&d, &l)| rng.below(d - l + 1))
                .collect();
            let esize = [1usize, 2, 4][rng.below(3) as usize];
            let n = |s: &[u64]| s.iter().product::<u64>() as usize * esize;
            let src: Vec<u8> = (0..n(&src_shape)).map(|i| (i * 7 + 3) as u8).collect();
            let mut got = vec![0xee; n(&dst_shape)];
            let mut want = got.clone();
            copy_region(
                &src, &src_shape, &b.start, &mut got, &dst_shape, &dst_at, &b.len, esize,
            )
            .unwrap();
            let count = b.numel().unwrap();
            for k in 0..count {
                // The k-th element of the box, in row-major order of the box.
                let mut rem = k;
                let mut idx = vec![0u64; rank];
                for d in (0..rank).rev() {
                    idx[d] = rem % b.len[d];
                    rem /= b.len[d];
                }
                let s: Vec<u64> = (0..rank).map(|d| b.start[d] + idx[d]).collect();
                let t: Vec<u64> = (0..rank).map(|d| dst_at[d] + idx[d]).collect();
                let (s, t) = (
                    flat(&src_shape, &s) as usize * esize,
                    flat(&dst_shape, &t) as usize * esize,
                );
                want[t..t + esize].copy_from_slice(&src[s..s + esize]);
            }
            assert_eq!(
                got, want,
                "{src_shape:?} {b:?} into {dst_shape:?} at {dst_at:?}"
            );
        }
        // Boxes outside an array and wrong buffer sizes are refused.
        let mut out = [0u8; 4];
        // copy_part places the part inside each array, and refuses one outside either.
        let src_region = Region::new(vec![2], vec![4]).unwrap();
        let dst_region = Region::new(vec![3], vec![4]).unwrap();
        let mut dst = [0u8; 4];
        let part = Region::new(vec![3], vec![3]).unwrap();
        copy_part(&[1, 2, 3, 4], &src_region, &mut dst, &dst_region, &part, 1).unwrap();
        assert_eq!(dst, [2, 3, 4, 0]);
        assert_eq!(part.offset_in(&src_region), [1]);
        let outside = Region::new(vec![1], vec![2]).unwrap();
        assert!(copy_part(
            &[1, 2, 3, 4],
            &src_region,
            &mut dst,
            &dst_region,
            &outside,
            1
        )
        .is_err());
        assert!(copy_region(&[0; 4], &[4], &[2], &mut out, &[4], &[0], &[3], 1).is_err());
        assert!(copy_region(&[0; 3], &[4], &[0], &mut out, &[4], &[0], &[1], 1).is_err());
        assert!(copy_region(&[0; 4], &[4], &[0], &mut out, &[2, 2], &[0], &[1], 1).is_err());
    }

    #[test]
    fn contiguous_runs_of_a_row_major_array() {
        let s = [4, 3, 2];
        assert_eq!(contiguous(&s, &reg(&[1, 0, 0], &[2, 3, 2])), Some((6, 12)));
        assert_eq!(contiguous(&s, &reg(&[1, 1, 0], &[1, 2, 2])), Some((8, 4)));
        assert_eq!(contiguous(&s, &reg(&[1, 1, 1], &[1, 1, 1])), Some((9, 1)));
        assert_eq!(contiguous(&s, &reg(&[0, 1, 0], &[2, 1, 2])), None);
        assert_eq!(contiguous(&s, &reg(&[0, 0, 1], &[1, 3, 1])), None);
        assert_eq!(contiguous(&s, &reg(&[3, 0, 0], &[0, 3, 2])), Some((0, 0)));
        assert_eq!(contiguous(&[], &reg(&[], &[])), Some((0, 1)));
    }

    #[test]
    fn the_overlap_sweep_agrees_with_every_pair() {
        let mut rng = Rng(0x0bad_cafe_dead_beef);
        let mut found = 0;
        for _ in 0..3000 {
            let rank = rng.below(3) as usize + 1;
            let shape: Vec<u64> = (0..rank).map(|_| rng.below(6) + 1).collect();
            let regions: Vec<Region> = (0..rng.below(6) + 1)
                .map(|_| rng.region_in(&shape))
                .collect();
            let any = (0..regions.len())
                .any(|i| (i + 1..regions.len()).any(|j| regions[i].overlaps(&regions[j])));
            let got = find_overlap(&regions);
            assert_eq!(got.is_some(), any, "{regions:?}");
            if let Some((i, j)) = got {
                assert!(i < j && regions[i].overlaps(&regions[j]));
                assert!(regions[i].intersect(&regions[j]).unwrap().numel().unwrap() > 0);
                found += 1;
            }
        }
        assert!(found > 100, "the generator makes overlaps: {found}");
        // Disjoint grids, as tensor-parallel ranks cut them.
        let grid: Vec<Region> = (0..4)
            .flat_map(|i| (0..3).map(move |j| reg(&[i * 2, j * 5], &[2, 5])))
            .collect();
        assert_eq!(find_overlap(&grid), None);
        assert!(Region::full(&[8, 15]).contains(&grid[7]));
        assert_eq!(
            grid[0].intersect(&reg(&[1, 4], &[4, 4])),
            Some(reg(&[1, 4], &[1, 1]))
        );
        assert_eq!(grid[0].intersect(&grid[1]), None);
    }
}
