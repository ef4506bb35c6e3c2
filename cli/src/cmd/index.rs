//! `get --slice`: NumPy's basic indexing of one tensor, `x[0, 1:5, ::-2, ...]`, written without
//! the brackets (`0,1:5,::-2,...`).
//!
//! The rules are NumPy's (and Python's `slice.indices`): an integer index removes its axis and
//! may count from the end (`-1`); one out of range is an error. A slice `start:stop:step`
//! clamps its bounds to the axis (`:20` of 10 rows is all 10), negative bounds count from the
//! end, the step may be negative (reversed) but not zero. `...` stands for as many whole axes
//! as needed (at most one); missing trailing axes are whole.
//!
//! Reading: the smallest box holding every selected element is read from the store (only those
//! bytes, from whichever slices of a partitioned tensor hold them); steps other than 1 then
//! pick their elements out of it, and integer indices drop their axes from the shape.

use paramdex::interop::{Kind, LoadedTensor, TensorData, TensorStore};
use paramdex::{Error, Region, Result};

/// How one axis of the tensor is indexed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Axis {
    /// The first element selected (when `count > 0`).
    first: u64,
    /// The distance between selected elements (negative: backwards); never 0.
    step: i64,
    /// How many elements are selected.
    count: u64,
    /// Whether the axis stays in the result (a slice) or is dropped (an integer index).
    keep: bool,
}

impl Axis {
    /// The lowest index selected and the extent of the box holding the selection.
    fn span(&self) -> (u64, u64) {
        if self.count == 0 {
            return (0, 0);
        }
        let reach = (self.count - 1) * self.step.unsigned_abs();
        if self.step > 0 {
            (self.first, reach + 1)
        } else {
            (self.first - reach, reach + 1)
        }
    }
}

/// A parsed `--slice` against a tensor's shape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Index {
    axes: Vec<Axis>,
}

impl Index {
    /// Parses `spec` (items separated by commas) for a tensor of `shape`.
    pub fn parse(spec: &str, shape: &[u64]) -> Result<Index> {
        let bad = |why: String| Error::InvalidArgument(format!("--slice '{spec}': {why}"));
        let items: Vec<&str> = if spec.trim().is_empty() {
            Vec::new()
        } else {
            spec.split(',').map(str::trim).collect()
        };
        let ellipses = items.iter().filter(|i| **i == "...").count();
        if ellipses > 1 {
            return Err(bad(
                "an index can only have a single ellipsis ('...')".into()
            ));
        }
        let given = items.len() - ellipses;
        if given > shape.len() {
            return Err(bad(format!(
                "too many indices: the tensor is {}-dimensional, but {given} were indexed",
                shape.len()
            )));
        }
        let mut axes = Vec::with_capacity(shape.len());
        for item in &items {
            if *item == "..." {
                for _ in 0..shape.len() - given {
                    let n = shape[axes.len()];
                    axes.push(whole(n));
                }
                continue;
            }
            let d = axes.len();
            axes.push(parse_item(item, shape[d], d).map_err(bad)?);
        }
        while axes.len() < shape.len() {
            axes.push(whole(shape[axes.len()]));
        }
        Ok(Index { axes })
    }

    /// The box read from the store: every selected element is inside it.
    pub fn region(&self) -> Region {
        let mut r = Region::full(&vec![0; self.axes.len()]);
        for (d, a) in self.axes.iter().enumerate() {
            (r.start[d], r.len[d]) = a.span();
        }
        r
    }

    /// The shape of the result: the selected counts of the axes that stay.
    pub fn shape(&self) -> Vec<u64> {
        self.axes
            .iter()
            .filter(|a| a.keep)
            .map(|a| a.count)
            .collect()
    }

    /// Whether the box read is the result itself, in order (every step is 1): nothing to pick.
    fn is_box(&self) -> bool {
        self.axes.iter().all(|a| a.step == 1 || a.count <= 1)
    }

    /// For each selected element in row-major order of the result, its position (in elements)
    /// inside the box of [`Index::region`], row-major.
    fn positions(&self) -> Vec<usize> {
        let spans: Vec<(u64, u64)> = self.axes.iter().map(Axis::span).collect();
        let total: u64 = self.axes.iter().map(|a| a.count).product();
        let mut out = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        if total == 0 {
            return out;
        }
        // Row-major strides of the box, in elements.
        let mut strides = vec![1u64; spans.len()];
        for d in (0..spans.len().saturating_sub(1)).rev() {
            strides[d] = strides[d + 1] * spans[d + 1].1;
        }
        let mut k = vec![0u64; self.axes.len()];
        loop {
            let mut at = 0u64;
            for (d, a) in self.axes.iter().enumerate() {
                let i = if a.step > 0 {
                    a.first + k[d] * a.step.unsigned_abs()
                } else {
                    a.first - k[d] * a.step.unsigned_abs()
                };
                at += (i - spans[d].0) * strides[d];
            }
            out.push(at as usize);
            // The next multi-index, last axis fastest.
            let mut d = self.axes.len();
            loop {
                if d == 0 {
                    return out;
                }
                d -= 1;
                k[d] += 1;
                if k[d] < self.axes[d].count {
                    break;
                }
                k[d] = 0;
            }
        }
    }

    /// `t` (the box of [`Index::region`], as the store read it) reduced to the selection.
    pub fn apply<'s>(&self, mut t: LoadedTensor<'s>) -> Result<LoadedTensor<'s>> {
        let shape = self.shape();
        if !self.is_box() {
            let picks = self.positions();
            t.data = match t.data {
                TensorData::Bytes(b) => {
                    let Kind::Numeric(d) = t.info.kind else {
                        return Err(Error::Unsupported(format!(
                            "--slice with a step on a {} tensor held as bytes",
                            t.info.kind.name()
                        )));
                    };
                    let size = d.size();
                    let mut out = Vec::with_capacity(picks.len() * size);
                    for p in picks {
                        out.extend_from_slice(&b[p * size..(p + 1) * size]);
                    }
                    TensorData::Bytes(out.into())
                }
                TensorData::Strings(s) => {
                    TensorData::Strings(picks.into_iter().map(|p| s[p].clone()).collect())
                }
            };
        }
        t.info.nbytes = match &t.data {
            TensorData::Bytes(b) => b.len() as u64,
            TensorData::Strings(s) => s.iter().map(|e| e.len() as u64).sum(),
        };
        t.info.shape = shape;
        Ok(t)
    }
}

/// The whole axis of length `n`.
fn whole(n: u64) -> Axis {
    Axis {
        first: 0,
        step: 1,
        count: n,
        keep: true,
    }
}

/// One item: an integer index or a slice `start:stop[:step]`, on an axis of length `n` (axis
/// number `d`, for messages).
fn parse_item(item: &str, n: u64, d: usize) -> std::result::Result<Axis, String> {
    let num = |s: &str| -> std::result::Result<Option<i128>, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(None);
        }
        s.parse::<i64>()
            .map(|v| Some(i128::from(v)))
            .map_err(|_| format!("'{s}' is not an integer"))
    };
    let n_i = i128::from(n);
    let parts: Vec<&str> = item.split(':').collect();
    if parts.len() == 1 {
        let Some(i) = num(item)? else {
            return Err(format!("axis {d}: an empty index"));
        };
        let at = if i < 0 { i + n_i } else { i };
        if at < 0 || at >= n_i {
            return Err(format!(
                "index {i} is out of bounds for axis {d} with size {n}"
            ));
        }
        return Ok(Axis {
            first: at as u64,
            step: 1,
            count: 1,
            keep: false,
        });
    }
    if parts.len() > 3 {
        return Err(format!("axis {d}: '{item}' is not start:stop:step"));
    }
    let step = match parts.get(2) {
        Some(s) => num(s)?.unwrap_or(1),
        None => 1,
    };
    if step == 0 {
        return Err("slice step cannot be zero".into());
    }
    // Python's slice.indices(n).
    let (start, stop) = (num(parts[0])?, num(parts[1])?);
    let adjust = |v: i128, lo: i128, hi: i128| {
        let v = if v < 0 { v + n_i } else { v };
        v.clamp(lo, hi)
    };
    let (first, count) = if step > 0 {
        let a = start.map_or(0, |v| adjust(v, 0, n_i));
        let b = stop.map_or(n_i, |v| adjust(v, 0, n_i));
        (a, if b > a { (b - a + step - 1) / step } else { 0 })
    } else {
        let a = start.map_or(n_i - 1, |v| adjust(v, -1, n_i - 1));
        let b = stop.map_or(-1, |v| adjust(v, -1, n_i - 1));
        (
            a,
            if a > b {
                (a - b + (-step) - 1) / (-step)
            } else {
                0
            },
        )
    };
    Ok(Axis {
        first: if count > 0 { first as u64 } else { 0 },
        step: step as i64,
        count: count as u64,
        keep: true,
    })
}

/// `get --slice`: the selection `spec` of tensor `key` (`None` when the store has no such
/// tensor).
pub fn load_index<'s>(
    store: &'s dyn TensorStore,
    key: &[u8],
    spec: &str,
) -> Result<Option<LoadedTensor<'s>>> {
    let Some(info) = store.info(key)? else {
        return Ok(None);
    };
    let index = Index::parse(spec, &info.shape)?;
    match store.load_slice(key, &index.region())? {
        Some(t) => index.apply(t).map(Some),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NumPy's result for `x[spec]` of `x = arange(prod(shape)).reshape(shape)`, as (shape,
    /// values), computed here through `Index`.
    fn select(spec: &str, shape: &[u64]) -> std::result::Result<(Vec<u64>, Vec<u64>), String> {
        let ix = Index::parse(spec, shape).map_err(|e| e.to_string())?;
        let r = ix.region();
        // The box, row-major, of the arange.
        let mut boxed = Vec::new();
        let total: u64 = r.len.iter().product();
        for flat in 0..total {
            let mut rem = flat;
            let mut global = 0u64;
            let mut stride = 1u64;
            let mut idx = vec![0u64; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = r.start[d] + rem % r.len[d];
                rem /= r.len[d];
            }
            for d in (0..shape.len()).rev() {
                global += idx[d] * stride;
                stride *= shape[d];
            }
            boxed.push(global);
        }
        let vals = if ix.is_box() {
            boxed
        } else {
            ix.positions().into_iter().map(|p| boxed[p]).collect()
        };
        Ok((ix.shape(), vals))
    }

    #[test]
    fn integer_indices_drop_their_axis_and_count_from_the_end() {
        assert_eq!(select("1", &[3, 2]).unwrap(), (vec![2], vec![2, 3]));
        assert_eq!(select("-1", &[3, 2]).unwrap(), (vec![2], vec![4, 5]));
        assert_eq!(select("0,-1", &[3, 2]).unwrap(), (vec![], vec![1]));
        assert_eq!(
            select("3", &[3, 2]).unwrap_err(),
            "invalid argument: --slice '3': index 3 is out of bounds for axis 0 with size 3"
        );
        assert!(select("-4", &[3, 2]).is_err());
    }

    #[test]
    fn slices_clamp_take_negative_bounds_and_steps() {
        let shape = [10u64];
        let all: Vec<u64> = (0..10).collect();
        assert_eq!(select(":20", &shape).unwrap(), (vec![10], all.clone()));
        assert_eq!(select("-2:", &shape).unwrap(), (vec![2], vec![8, 9]));
        assert_eq!(select("-100:3", &shape).unwrap(), (vec![3], vec![0, 1, 2]));
        assert_eq!(select("::3", &shape).unwrap(), (vec![4], vec![0, 3, 6, 9]));
        assert_eq!(
            select("::-1", &shape).unwrap(),
            (vec![10], all.iter().rev().copied().collect())
        );
        assert_eq!(select("8:2:-3", &shape).unwrap(), (vec![2], vec![8, 5]));
        assert_eq!(select("5:2", &shape).unwrap(), (vec![0], vec![]));
        assert_eq!(select("20:30", &shape).unwrap(), (vec![0], vec![]));
        assert!(select("::0", &shape)
            .unwrap_err()
            .contains("step cannot be zero"));
        assert!(select("1:2:3:4", &shape).is_err());
        assert!(select("a:", &shape)
            .unwrap_err()
            .contains("'a' is not an integer"));
    }

    #[test]
    fn ellipsis_and_missing_axes_are_whole() {
        let shape = [2u64, 3, 4];
        assert_eq!(select("...,1", &shape).unwrap().0, vec![2, 3]);
        assert_eq!(select("1,...", &shape).unwrap().0, vec![3, 4]);
        assert_eq!(select("1", &shape).unwrap().0, vec![3, 4]);
        assert_eq!(select("", &shape).unwrap().0, vec![2, 3, 4]);
        assert_eq!(
            select("...,1,::2", &shape).unwrap(),
            (vec![2, 2], vec![4, 6, 16, 18])
        );
        assert!(select("...,...", &shape).is_err());
        assert!(select("0,0,0,0", &shape)
            .unwrap_err()
            .contains("too many indices"));
    }

    #[test]
    fn a_two_dimensional_selection_matches_numpy() {
        // x = np.arange(20).reshape(4, 5); x[1:, ::-2] == [[9, 7, 5], [14, 12, 10], [19, 17, 15]]
        assert_eq!(
            select("1:,::-2", &[4, 5]).unwrap(),
            (vec![3, 3], vec![9, 7, 5, 14, 12, 10, 19, 17, 15])
        );
        // x[-1, 1:4] == [16, 17, 18]
        assert_eq!(
            select("-1,1:4", &[4, 5]).unwrap(),
            (vec![3], vec![16, 17, 18])
        );
    }
}
