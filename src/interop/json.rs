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
        DType::Float8E4M3FN => float(f64::from(f8_e4m3fn_to_f32(b[0]))),
        DType::Float8E5M2 => float(f64::from(f8_e5m2_to_f32(b[0]))),
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
