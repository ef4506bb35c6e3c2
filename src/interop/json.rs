//! Decoding tensor elements into JSON values (for `paramdex get --format json`).

use serde_json::{json, Number, Value};

use crate::dtype::DType;

/// Value of a float8 E4M3FN byte (no infinities; `S.1111.111` is NaN).
pub fn f8_e4m3fn_to_f32(b: u8) -> f32 {
    let sign = if b & 0x80 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from((b >> 3) & 0x0f);
    let man = f32::from(b & 0x07);
    if exp == 0x0f && b & 0x07 == 0x07 {
        return f32::NAN;
    }
    if exp == 0 {
        sign * man / 8.0 * 2f32.powi(-6)
    } else {
        sign * (1.0 + man / 8.0) * 2f32.powi(exp - 7)
    }
}

/// Value of a float8 E5M2 byte (IEEE-like: infinities and NaNs at exponent 31).
pub fn f8_e5m2_to_f32(b: u8) -> f32 {
    // E5M2 is the top byte of an IEEE binary16.
    half::f16::from_bits(u16::from(b) << 8).to_f32()
}

/// Value of a small float's bits `b` (in the low bits of the byte; higher bits ignored) with
/// `e` exponent bits of bias `bias` and `m` mantissa bits, finite only. `fnuz`: no negative zero,
/// the pattern sign-only (`0x80` for 8 bits) is NaN; otherwise all bits one in exponent and
/// mantissa is NaN when `nan_at_max` (e4m3fn), else every pattern is a number (fp4, fp6).
fn small_float(b: u8, e: u32, m: u32, bias: i32, fnuz: bool, nan_at_max: bool) -> f64 {
    let width = 1 + e + m;
    let v = u32::from(b) & ((1 << width) - 1);
    let sign_bit = 1 << (e + m);
    let exp = ((v >> m) & ((1 << e) - 1)) as i32;
    let man = f64::from(v & ((1 << m) - 1));
    if fnuz && v == sign_bit {
        return f64::NAN;
    }
    if nan_at_max && v & !sign_bit == sign_bit - 1 {
        return f64::NAN;
    }
    let sign = if v & sign_bit != 0 { -1.0 } else { 1.0 };
    let scale = f64::from(1u32 << m);
    if exp == 0 {
        sign * man / scale * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + man / scale) * 2f64.powi(exp - bias)
    }
}

/// The value of element bytes `b` of a one-byte float dtype (float8, and the unpacked fp4 and
/// fp6 types); `None` for other dtypes.
pub fn small_float_value(dtype: DType, b: u8) -> Option<f64> {
    Some(match dtype {
        DType::Float8E4M3FN => f64::from(f8_e4m3fn_to_f32(b)),
        DType::Float8E5M2 => f64::from(f8_e5m2_to_f32(b)),
        DType::Float8E4M3FNUZ => small_float(b, 4, 3, 8, true, false),
        DType::Float8E5M2FNUZ => small_float(b, 5, 2, 16, true, false),
        DType::Float8E4M3B11FNUZ => small_float(b, 4, 3, 11, true, false),
        DType::Float8E8M0FNU if b == 0xff => f64::NAN,
        DType::Float8E8M0FNU => 2f64.powi(i32::from(b) - 127),
        DType::Float4E2M1FN => small_float(b, 2, 1, 1, false, false),
        DType::Float6E2M3FN => small_float(b, 2, 3, 1, false, false),
        DType::Float6E3M2FN => small_float(b, 3, 2, 3, false, false),
        _ => return None,
    })
}

/// The value of element byte `b` of a one-byte integer dtype stored in the low bits (`int4`,
/// `uint4`, `int2`, `uint2`; signed ones sign-extended from their width); `None` for others.
pub fn small_int_value(dtype: DType, b: u8) -> Option<i64> {
    Some(match dtype {
        DType::Int4 => i64::from(((b << 4) as i8) >> 4),
        DType::UInt4 => i64::from(b & 0x0f),
        DType::Int2 => i64::from(((b << 6) as i8) >> 6),
        DType::UInt2 => i64::from(b & 0x03),
        _ => return None,
    })
}

fn float(v: f64) -> Value {
    match Number::from_f64(v) {
        Some(n) => Value::Number(n),
        None if v.is_nan() => json!("NaN"),
        None if v > 0.0 => json!("Infinity"),
        None => json!("-Infinity"),
    }
}

/// The `i`-th element of `data` (of `dtype`) as JSON. NaN and infinities become the strings
/// `"NaN"`, `"Infinity"`, `"-Infinity"`; complex numbers `[re, im]`; bool `true`/`false`.
/// `data` must hold at least `i + 1` elements.
pub fn element(dtype: DType, data: &[u8], i: usize) -> Value {
    let s = dtype.size();
    let b = &data[i * s..(i + 1) * s];
    let le = |n: usize| -> [u8; 8] {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(&b[..n]);
        a
    };
    match dtype {
        DType::Bool => Value::Bool(b[0] != 0),
        DType::Int8 => json!(b[0] as i8),
        DType::UInt8 => json!(b[0]),
        DType::Int16 => json!(i16::from_le_bytes([b[0], b[1]])),
        DType::UInt16 => json!(u16::from_le_bytes([b[0], b[1]])),
        DType::Int32 => json!(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::UInt32 => json!(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        DType::Int64 => json!(i64::from_le_bytes(le(8))),
        DType::UInt64 => json!(u64::from_le_bytes(le(8))),
        DType::Float16 => float(half::f16::from_le_bytes([b[0], b[1]]).to_f64()),
        DType::BFloat16 => float(half::bf16::from_le_bytes([b[0], b[1]]).to_f64()),
        DType::Float32 => float(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        DType::Float64 => float(f64::from_le_bytes(le(8))),
        DType::Complex64 => json!([
            float(f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
            float(f64::from(f32::from_le_bytes([b[4], b[5], b[6], b[7]])))
        ]),
        DType::Complex128 => {
            let mut im = [0u8; 8];
            im.copy_from_slice(&b[8..16]);
            json!([
                float(f64::from_le_bytes(le(8))),
                float(f64::from_le_bytes(im))
            ])
        }
        DType::Float8E4M3FN
        | DType::Float8E5M2
        | DType::Float8E4M3FNUZ
        | DType::Float8E5M2FNUZ
        | DType::Float8E4M3B11FNUZ
        | DType::Float8E8M0FNU
        | DType::Float4E2M1FN
        | DType::Float6E2M3FN
        | DType::Float6E3M2FN => float(small_float_value(dtype, b[0]).unwrap_or(f64::NAN)),
        DType::Int4 | DType::UInt4 | DType::Int2 | DType::UInt2 => {
            json!(small_int_value(dtype, b[0]).unwrap_or_default())
        }
        // Packed types: each element is a byte holding several values; shown as that byte.
        // (A bytes value's encoded bytes likewise, one by one.)
        DType::Float4E2M1FNx2 | DType::Float6E2M3FNx4 | DType::Float6E3M2FNx4 | DType::Bytes => {
            json!(b[0])
        }
    }
}

/// All elements nested by `shape` (like numpy's `tolist`), or, when there are more than
/// `limit` elements, the first `limit` as a flat list. Returns the value and whether it was cut.
pub fn to_json(dtype: DType, shape: &[u64], data: &[u8], limit: usize) -> (Value, bool) {
    let numel = data.len() / dtype.size().max(1);
    if numel > limit {
        let vals = (0..limit).map(|i| element(dtype, data, i)).collect();
        return (Value::Array(vals), true);
    }
    fn nest(dtype: DType, shape: &[u64], data: &[u8], start: &mut usize) -> Value {
        match shape.split_first() {
            None => {
                let v = element(dtype, data, *start);
                *start += 1;
                v
            }
            Some((&d, rest)) => {
                Value::Array((0..d).map(|_| nest(dtype, rest, data, start)).collect())
            }
        }
    }
    let mut start = 0;
    (nest(dtype, shape, data, &mut start), false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_float_values() {
        let v = |d, b| small_float_value(d, b).unwrap();
        // ml_dtypes' encodings: fp4 0bSEEM, fp6 0bSEEMMM / 0bSEEEMM.
        assert_eq!(v(DType::Float4E2M1FN, 0b0010), 1.0);
        assert_eq!(v(DType::Float4E2M1FN, 0b0111), 6.0);
        assert_eq!(v(DType::Float4E2M1FN, 0b1001), -0.5);
        assert_eq!(v(DType::Float6E2M3FN, 0b011111), 7.5);
        assert_eq!(v(DType::Float6E2M3FN, 0b000001), 0.125);
        assert_eq!(v(DType::Float6E3M2FN, 0b011111), 28.0);
        assert_eq!(v(DType::Float6E3M2FN, 0b000001), 0.0625);
        assert_eq!(v(DType::Float8E8M0FNU, 127), 1.0);
        assert_eq!(v(DType::Float8E8M0FNU, 0), 2f64.powi(-127));
        assert!(v(DType::Float8E8M0FNU, 0xff).is_nan());
        // fnuz: bias 8 / 16 / 11, 0x80 NaN, largest 240 / 57344.
        assert_eq!(v(DType::Float8E4M3FNUZ, 0x40), 1.0);
        assert_eq!(v(DType::Float8E4M3FNUZ, 0x7f), 240.0);
        assert!(v(DType::Float8E4M3FNUZ, 0x80).is_nan());
        assert_eq!(v(DType::Float8E5M2FNUZ, 0x40), 1.0);
        assert_eq!(v(DType::Float8E5M2FNUZ, 0x7f), 57344.0);
        assert!(v(DType::Float8E5M2FNUZ, 0x80).is_nan());
        assert_eq!(v(DType::Float8E4M3B11FNUZ, 0x58), 1.0);
        assert!(v(DType::Float8E4M3B11FNUZ, 0x80).is_nan());
        assert_eq!(small_int_value(DType::Int4, 0x0e), Some(-2));
        assert_eq!(small_int_value(DType::Int4, 0x07), Some(7));
        assert_eq!(small_int_value(DType::UInt4, 0x0e), Some(14));
        assert_eq!(small_int_value(DType::Int2, 0x02), Some(-2));
        assert_eq!(small_int_value(DType::UInt2, 0x03), Some(3));
        assert_eq!(small_int_value(DType::Float32, 0), None);
    }

    #[test]
    fn float8_values() {
        assert_eq!(f8_e4m3fn_to_f32(0x38), 1.0);
        assert_eq!(f8_e4m3fn_to_f32(0x40), 2.0);
        assert_eq!(f8_e4m3fn_to_f32(0xb8), -1.0);
        assert_eq!(f8_e4m3fn_to_f32(0x7e), 448.0);
        assert!(f8_e4m3fn_to_f32(0x7f).is_nan());
        assert_eq!(f8_e4m3fn_to_f32(0x01), 2f32.powi(-9));
        assert_eq!(f8_e5m2_to_f32(0x3c), 1.0);
        assert_eq!(f8_e5m2_to_f32(0x7b), 57344.0);
        assert!(f8_e5m2_to_f32(0x7c).is_infinite());
    }

    #[test]
    fn nested_json() {
        let data: Vec<u8> = [1.0f32, 2.0, 3.0, f32::NAN, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let (v, cut) = to_json(DType::Float32, &[2, 3], &data, 100);
        assert!(!cut);
        assert_eq!(v, json!([[1.0, 2.0, 3.0], ["NaN", 5.0, 6.0]]));
        let (v, cut) = to_json(DType::Float32, &[2, 3], &data, 2);
        assert!(cut);
        assert_eq!(v, json!([1.0, 2.0]));
        let (v, _) = to_json(DType::Int64, &[], &7i64.to_le_bytes(), 10);
        assert_eq!(v, json!(7));
    }
}
