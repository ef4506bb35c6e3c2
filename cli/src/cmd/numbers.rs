//! Tensor elements as numbers: what `diff` compares and `get --stats` summarizes. Both read the
//! data in place (a borrowed slice of the mapped file where the format allows), one element
//! at a time, keeping a few numbers, never a copy of the tensor.

use paramdex::DType;
use serde_json::{json, Value};

/// Element `i` of `b` (of `dtype`) as a complex number (real types: imaginary 0). Integers
/// beyond 2^53 are rounded; [`int_value`] has them exactly. `b` holds at least `i + 1`
/// elements.
pub fn value(dtype: DType, b: &[u8], i: usize) -> (f64, f64) {
    let s = dtype.size();
    let e = &b[i * s..(i + 1) * s];
    let f32_at = |o: usize| f64::from(f32::from_le_bytes([e[o], e[o + 1], e[o + 2], e[o + 3]]));
    let f64_at = |o: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&e[o..o + 8]);
        f64::from_le_bytes(a)
    };
    let re = match dtype {
        DType::Float16 => half::f16::from_le_bytes([e[0], e[1]]).to_f64(),
        DType::BFloat16 => half::bf16::from_le_bytes([e[0], e[1]]).to_f64(),
        DType::Float32 | DType::Complex64 => f32_at(0),
        DType::Float64 | DType::Complex128 => f64_at(0),
        d if d.is_float() && s == 1 => {
            paramdex::interop::json::small_float_value(d, e[0]).unwrap_or(f64::NAN)
        }
        _ => int_value(dtype, b, i).map_or(f64::NAN, |v| v as f64),
    };
    let im = match dtype {
        DType::Complex64 => f32_at(4),
        DType::Complex128 => f64_at(8),
        _ => 0.0,
    };
    (re, im)
}

/// Element `i` of `b` exactly, for integer and bool dtypes; `None` for the others.
pub fn int_value(dtype: DType, b: &[u8], i: usize) -> Option<i128> {
    let s = dtype.size();
    let e = &b[i * s..(i + 1) * s];
    let mut a8 = [0u8; 8];
    a8[..s.min(8)].copy_from_slice(&e[..s.min(8)]);
    Some(match dtype {
        DType::Bool | DType::UInt8 => i128::from(e[0]),
        DType::Int8 => i128::from(e[0] as i8),
        DType::Int16 => i128::from(i16::from_le_bytes([e[0], e[1]])),
        DType::UInt16 => i128::from(u16::from_le_bytes([e[0], e[1]])),
        DType::Int32 => i128::from(i32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        DType::UInt32 => i128::from(u32::from_le_bytes([e[0], e[1], e[2], e[3]])),
        DType::Int64 => i128::from(i64::from_le_bytes(a8)),
        DType::UInt64 => i128::from(u64::from_le_bytes(a8)),
        DType::Int4 | DType::UInt4 | DType::Int2 | DType::UInt2 => {
            i128::from(paramdex::interop::json::small_int_value(dtype, e[0])?)
        }
        // Packed types compare and summarize as their bytes.
        DType::Float4E2M1FNx2 | DType::Float6E2M3FNx4 | DType::Float6E3M2FNx4 => i128::from(e[0]),
        _ => return None,
    })
}

fn is_complex(dtype: DType) -> bool {
    matches!(dtype, DType::Complex64 | DType::Complex128)
}

/// When two elements count as equal (`diff`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tolerance {
    /// Absolute tolerance.
    pub atol: f64,
    /// Relative tolerance, times `|b|`.
    pub rtol: f64,
    /// Whether a NaN equals a NaN.
    pub equal_nan: bool,
    /// Whether any of the three was given (`--atol 0` too): elements are then compared as
    /// numbers, else by their bytes.
    pub given: bool,
}

impl Tolerance {
    /// Whether elements are compared as numbers (else by their bytes).
    pub fn numeric(&self) -> bool {
        self.given
    }
}

/// How two same-dtype, same-shape data buffers differ.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Comparison {
    /// Elements that differ under the rule (see [`compare_across`]).
    pub differing: u64,
    /// Of those, the pairs where a side is NaN.
    pub nan: u64,
    /// Of those, the pairs with no NaN and an infinity (`inf` against a number or `-inf`).
    pub inf: u64,
    /// The largest `|a − b|` over differing pairs of finite numbers (`None` when there are
    /// none); complex: `|a − b|` in the plane.
    pub max_abs_diff: Option<f64>,
}

/// Compares `a` of `da` and `b` of `db` (the same number of elements) element by element.
///
/// Of the same dtype, elements with the same bytes are equal (so data always equals itself,
/// NaNs included). Without tolerance (`!tol.numeric()`) all others differ (`-0.0` and `0.0`,
/// NaNs with other payloads). With tolerance they are equal, as in `numpy.allclose`, when
/// `|a − b| ≤ atol + rtol·|b|`, or both are the same infinity, or, with `equal_nan`, both NaN;
/// otherwise a NaN equals nothing. Integers are subtracted exactly.
///
/// Of different dtypes (a bfloat16 export against its float32 master),
/// each element is decoded from its own dtype and they are compared as numbers (as f64;
/// integers of both sides exactly): with the tolerance, else equal when the same number.
pub fn compare_across(da: DType, a: &[u8], db: DType, b: &[u8], tol: Tolerance) -> Comparison {
    let (sa, sb) = (da.size(), db.size());
    let n = (a.len() / sa.max(1)).min(b.len() / sb.max(1));
    let same = da == db;
    // Across dtypes, elements are always compared as numbers (the tolerance, or exactly).
    let numeric = tol.numeric() || !same;
    let mut c = Comparison::default();
    for i in 0..n {
        if same && a[i * sa..(i + 1) * sa] == b[i * sb..(i + 1) * sb] {
            continue;
        }
        if let (Some(x), Some(y)) = (int_value(da, a, i), int_value(db, b, i)) {
            let d = (x - y).unsigned_abs() as f64;
            if numeric && d <= tol.atol + tol.rtol * (y.unsigned_abs() as f64) {
                continue;
            }
            c.differing += 1;
            c.max_abs_diff = Some(c.max_abs_diff.map_or(d, |m| m.max(d)));
            continue;
        }
        let (ar, ai) = value(da, a, i);
        let (br, bi) = value(db, b, i);
        let a_nan = ar.is_nan() || ai.is_nan();
        let b_nan = br.is_nan() || bi.is_nan();
        if a_nan || b_nan {
            // Bytes differ: without tolerance that is a difference (two NaNs' payloads); with
            // it, two NaNs are equal only under `equal_nan`.
            if tol.numeric() && tol.equal_nan && a_nan && b_nan {
                continue;
            }
            c.differing += 1;
            c.nan += 1;
            continue;
        }
        let infinite = !(ar.is_finite() && ai.is_finite() && br.is_finite() && bi.is_finite());
        if infinite {
            if numeric && ar == br && ai == bi {
                continue; // the same infinity
            }
            c.differing += 1;
            c.inf += 1;
            continue;
        }
        let d = (ar - br).hypot(ai - bi);
        if numeric && d <= tol.atol + tol.rtol * br.hypot(bi) {
            continue;
        }
        c.differing += 1;
        c.max_abs_diff = Some(c.max_abs_diff.map_or(d, |m| m.max(d)));
    }
    c
}

/// `get --stats`: count, NaN and infinity counts, and min, max, mean and standard deviation
/// (population, as numpy's `std`) over the finite values. Integers' min and max are exact.
/// `None` for complex dtypes (which order and which mean would be a guess).
pub fn stats(dtype: DType, data: &[u8]) -> Option<Value> {
    if is_complex(dtype) {
        return None;
    }
    let n = data.len() / dtype.size().max(1);
    let (mut nan, mut inf, mut finite) = (0u64, 0u64, 0u64);
    let (mut mean, mut m2) = (0f64, 0f64);
    let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
    let (mut imin, mut imax) = (i128::MAX, i128::MIN);
    let int = !dtype.is_float();
    for i in 0..n {
        let x = if let Some(v) = int_value(dtype, data, i) {
            imin = imin.min(v);
            imax = imax.max(v);
            v as f64
        } else {
            let x = value(dtype, data, i).0;
            if x.is_nan() {
                nan += 1;
                continue;
            }
            if x.is_infinite() {
                inf += 1;
                continue;
            }
            min = min.min(x);
            max = max.max(x);
            x
        };
        // Welford's update: stable for long runs of similar values.
        finite += 1;
        let d = x - mean;
        mean += d / finite as f64;
        m2 += d * (x - mean);
    }
    let some = finite > 0;
    let num = |x: f64| if some { json!(x) } else { Value::Null };
    let (lo, hi) = if int {
        if some {
            (int_json(imin), int_json(imax))
        } else {
            (Value::Null, Value::Null)
        }
    } else {
        (num(min), num(max))
    };
    Some(json!({
        "count": n,
        "finite": finite,
        "nan": nan,
        "inf": inf,
        "min": lo,
        "max": hi,
        "mean": num(mean),
        "std": num((m2 / finite.max(1) as f64).sqrt()),
    }))
}

fn int_json(v: i128) -> Value {
    if let Ok(x) = i64::try_from(v) {
        json!(x)
    } else if let Ok(x) = u64::try_from(v) {
        json!(x)
    } else {
        json!(v as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn across_dtypes_elements_are_compared_as_numbers() {
        // A bfloat16 export of float32 values: each side decoded from its own dtype.
        let master = [1.0f32, 0.1, -3.3, 1000.5];
        let a: Vec<u8> = master
            .iter()
            .flat_map(|x| half::bf16::from_f32(*x).to_le_bytes())
            .collect();
        let b = f32s(&master);
        let exact = compare_across(
            DType::BFloat16,
            &a,
            DType::Float32,
            &b,
            Tolerance::default(),
        );
        // 1.0 is exact in bfloat16; the others are rounded.
        assert_eq!(exact.differing, 3);
        assert!(exact.max_abs_diff.unwrap() < 2.0, "{exact:?}");
        let tol = Tolerance {
            rtol: 1e-2,
            given: true,
            ..Tolerance::default()
        };
        let c = compare_across(DType::BFloat16, &a, DType::Float32, &b, tol);
        assert_eq!(c.differing, 0, "{c:?}");
        let tight = Tolerance {
            rtol: 1e-5,
            given: true,
            ..Tolerance::default()
        };
        assert_eq!(
            compare_across(DType::BFloat16, &a, DType::Float32, &b, tight).differing,
            3
        );
        // Integers against integers of another width exactly; against floats as numbers.
        let c = compare_across(
            DType::Int8,
            &[1, 0xff],
            DType::Int64,
            &[
                1, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
            Tolerance::default(),
        );
        assert_eq!(c.differing, 0);
        let c = compare_across(
            DType::Int32,
            &7i32.to_le_bytes(),
            DType::Float64,
            &7.5f64.to_le_bytes(),
            Tolerance::default(),
        );
        assert_eq!((c.differing, c.max_abs_diff), (1, Some(0.5)));
    }

    #[test]
    fn exact_comparison_counts_and_measures() {
        let a = f32s(&[1.0, 2.0, 3.0]);
        let b = f32s(&[1.0, 2.5, 1.0]);
        let c = compare_across(DType::Float32, &a, DType::Float32, &b, Tolerance::default());
        assert_eq!((c.differing, c.max_abs_diff), (2, Some(2.0)));
        let n = f32s(&[1.0, f32::NAN, 3.0]);
        let c = compare_across(DType::Float32, &a, DType::Float32, &n, Tolerance::default());
        assert_eq!((c.differing, c.nan, c.max_abs_diff), (1, 1, None));
        let a: Vec<u8> = [3.0f64, 0.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let b: Vec<u8> = [0.0f64, 4.0].iter().flat_map(|x| x.to_le_bytes()).collect();
        let c = compare_across(
            DType::Complex128,
            &a,
            DType::Complex128,
            &b,
            Tolerance::default(),
        );
        assert_eq!((c.differing, c.max_abs_diff), (1, Some(5.0)));
        let c = compare_across(
            DType::Int8,
            &[1, 0xff],
            DType::Int8,
            &[1, 1],
            Tolerance::default(),
        );
        assert_eq!((c.differing, c.max_abs_diff), (1, Some(2.0)));
        // Exact at 64 bits, where f64 would round both to the same number.
        let a = (1i64 << 60).to_le_bytes();
        let b = ((1i64 << 60) + 1).to_le_bytes();
        let c = compare_across(DType::Int64, &a, DType::Int64, &b, Tolerance::default());
        assert_eq!((c.differing, c.max_abs_diff), (1, Some(1.0)));
    }

    #[test]
    fn tolerance_is_numpy_allclose() {
        // Two NaNs with different payloads.
        let other_nan = f32::from_bits(f32::NAN.to_bits() | 1);
        let a = f32s(&[1.0, 100.0, f32::NAN, f32::INFINITY, f32::INFINITY, 0.0]);
        let b = f32s(&[
            1.05,
            101.0,
            other_nan,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
        ]);
        let tol = Tolerance {
            atol: 0.1,
            rtol: 0.0,
            equal_nan: false,
            given: true,
        };
        let c = compare_across(DType::Float32, &a, DType::Float32, &b, tol);
        // 100 vs 101 (|d| 1 > 0.1), NaN vs NaN, inf vs -inf; not 1 vs 1.05, inf vs inf, 0 vs -0.
        assert_eq!((c.differing, c.nan, c.inf), (3, 1, 1));
        assert_eq!(c.max_abs_diff, Some(1.0));
        let tol = Tolerance {
            rtol: 0.01,
            equal_nan: true,
            ..tol
        };
        let c = compare_across(DType::Float32, &a, DType::Float32, &b, tol);
        assert_eq!((c.differing, c.nan, c.inf, c.max_abs_diff), (1, 0, 1, None));
        // Without tolerance, -0.0 and 0.0 differ by their bytes, and so do the NaNs.
        let c = compare_across(DType::Float32, &a, DType::Float32, &b, Tolerance::default());
        assert_eq!((c.differing, c.nan, c.inf), (5, 1, 1));
        assert_eq!(c.max_abs_diff, Some(1.0));
        // The same bytes are equal, a NaN included, whatever the tolerance.
        let c = compare_across(DType::Float32, &a, DType::Float32, &a, tol);
        assert_eq!(c, Comparison::default());
    }

    #[test]
    fn stats_over_finite_values() {
        let s = stats(
            DType::Float32,
            &f32s(&[1.0, 2.0, 3.0, 4.0, f32::NAN, f32::NEG_INFINITY]),
        )
        .unwrap();
        assert_eq!(
            s,
            json!({"count": 6, "finite": 4, "nan": 1, "inf": 1, "min": 1.0, "max": 4.0,
                   "mean": 2.5, "std": 1.25f64.sqrt()})
        );
        let big: Vec<u8> = [u64::MAX, 1].iter().flat_map(|x| x.to_le_bytes()).collect();
        let s = stats(DType::UInt64, &big).unwrap();
        assert_eq!((&s["min"], &s["max"]), (&json!(1), &json!(u64::MAX)));
        let s = stats(DType::Float16, &[]).unwrap();
        assert_eq!(
            (&s["count"], &s["min"], &s["mean"]),
            (&json!(0), &Value::Null, &Value::Null)
        );
        assert!(stats(DType::Complex64, &[0; 8]).is_none());
    }
}
