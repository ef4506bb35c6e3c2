//! Assembling a partitioned TensorFlow tensor from its slices.
//!
//! A partitioned variable is stored as a full-tensor entry (full shape, the list of slices, no
//! data) plus one ordinary entry per slice, keyed by [`super::slice_key::encode`]. The slices
//! may live in different data shards (TF2's `MaxShardSizePolicy` splits one tensor across
//! shards). Assembling checks that every slice lies inside the full shape, that no two slices
//! overlap and that together they cover every element, as TensorFlow's `TensorSliceSet` does.

use super::slice_key::Extent;
use crate::proto::tensorflow::{tensor_slice_proto::extent::HasLength, TensorSliceProto};

/// One slice resolved against the full shape: per dimension, the first index and the count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// First index per dimension.
    pub start: Vec<u64>,
    /// Count per dimension.
    pub len: Vec<u64>,
}

impl Region {
    /// Number of elements (0 if any dimension is empty); `None` on overflow.
    pub fn numel(&self) -> Option<u64> {
        self.len.iter().try_fold(1u64, |a, &l| a.checked_mul(l))
    }
}

/// The extents of a `TensorSliceProto` (a missing length is the whole dimension), with the
/// rank checked against the full tensor's.
pub fn extents_of(slice: &TensorSliceProto, rank: usize) -> Result<Vec<Extent>, String> {
    if slice.extent.len() != rank {
        return Err(format!(
            "slice has {} dimensions, the tensor {rank}",
            slice.extent.len()
        ));
    }
    Ok(slice
        .extent
        .iter()
        .map(|e| match e.has_length {
            Some(HasLength::Length(l)) => Extent {
                start: e.start,
                length: l,
            },
            None => Extent {
                start: e.start,
                length: -1,
            },
        })
        .collect())
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
            let mut done = true;
            for d in (0..j).rev() {
                idx[d] += 1;
                if idx[d] < r.len[d] {
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
    if cov.set != numel as u64 {
        return Err(format!("the slices cover {} of {numel} elements", cov.set));
    }
    Ok(())
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
}
