//! Writing NumPy `.npy` files (format 1.0, or 2.0 for headers over 64 KiB; NEP 1), as
//! `paramdex get --format npy` does.
//!
//! The data is the tensor's little-endian bytes, written as they are after the header, so a
//! tensor is written without converting a single element. Every dtype maps to the numpy type
//! with the same bytes; numpy has no bfloat16 or float8 types, so those are written as their
//! raw bits (see [`descr`] and [`raw_note`]).
//!
//! Why not a crate: the `.npy` header is a fixed magic string and one Python dict literal, and
//! the npy crates write element by element through typed serializers, which would copy every
//! tensor; here the header is 20 lines and the data goes straight from the mapped file.

use std::io::{self, Write};

use crate::dtype::DType;

/// The numpy type string (`descr`) written for `dtype`: `<f4` for float32, `<c8` for complex64,
/// `|b1` for bool, ... bfloat16 is written as `<u2` (its raw bits) and float8 as `|u1`.
pub fn descr(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "|b1",
        DType::Int8 => "|i1",
        DType::UInt8 => "|u1",
        DType::Int16 => "<i2",
        DType::UInt16 => "<u2",
        DType::Int32 => "<i4",
        DType::UInt32 => "<u4",
        DType::Int64 => "<i8",
        DType::UInt64 => "<u8",
        DType::Float16 => "<f2",
        DType::BFloat16 => "<u2",
        DType::Float32 => "<f4",
        DType::Float64 => "<f8",
        DType::Complex64 => "<c8",
        DType::Complex128 => "<c16",
        DType::Int4 | DType::Int2 => "|i1",
        _ => "|u1",
    }
}

/// For dtypes numpy lacks, what was written and how to get the real type back (with the
/// `ml_dtypes` package); `None` when the numpy type is exact.
pub fn raw_note(dtype: DType) -> Option<&'static str> {
    match dtype {
        DType::BFloat16 => Some(
            "bfloat16 is written as its raw bits (uint16); numpy has no bfloat16: \
             a.view(ml_dtypes.bfloat16)",
        ),
        DType::Float8E4M3FN => Some(
            "float8_e4m3fn is written as its raw bits (uint8); numpy has no float8: \
             a.view(ml_dtypes.float8_e4m3fn)",
        ),
        DType::Float8E5M2 => Some(
            "float8_e5m2 is written as its raw bits (uint8); numpy has no float8: \
             a.view(ml_dtypes.float8_e5m2)",
        ),
        DType::Float8E4M3FNUZ => Some(
            "float8_e4m3fnuz is written as its raw bits (uint8): a.view(ml_dtypes.float8_e4m3fnuz)",
        ),
        DType::Float8E5M2FNUZ => Some(
            "float8_e5m2fnuz is written as its raw bits (uint8): a.view(ml_dtypes.float8_e5m2fnuz)",
        ),
        DType::Float8E4M3B11FNUZ => Some(
            "float8_e4m3b11fnuz is written as its raw bits (uint8): \
             a.view(ml_dtypes.float8_e4m3b11fnuz)",
        ),
        DType::Float8E8M0FNU => Some(
            "float8_e8m0fnu is written as its raw bits (uint8): a.view(ml_dtypes.float8_e8m0fnu)",
        ),
        DType::Int4 => Some("int4 is written one per byte as int8: a.astype(ml_dtypes.int4)"),
        DType::UInt4 => Some("uint4 is written one per byte as uint8: a.astype(ml_dtypes.uint4)"),
        DType::Int2 => Some("int2 is written one per byte as int8: a.astype(ml_dtypes.int2)"),
        DType::UInt2 => Some("uint2 is written one per byte as uint8: a.astype(ml_dtypes.uint2)"),
        DType::Float4E2M1FN => Some(
            "float4_e2m1fn is written as its raw bits, one per byte (uint8): \
             a.view(ml_dtypes.float4_e2m1fn)",
        ),
        DType::Float6E2M3FN => Some(
            "float6_e2m3fn is written as its raw bits, one per byte (uint8): \
             a.view(ml_dtypes.float6_e2m3fn)",
        ),
        DType::Float6E3M2FN => Some(
            "float6_e3m2fn is written as its raw bits, one per byte (uint8): \
             a.view(ml_dtypes.float6_e3m2fn)",
        ),
        DType::Float4E2M1FNx2 | DType::Float6E2M3FNx4 | DType::Float6E3M2FNx4 => Some(
            "a packed type's bytes hold several values each (SPEC.md 6): `paramdex get \
             --format npy` writes them unpacked, one value per byte, as the unpacked type",
        ),
        _ => None,
    }
}

/// The complete header (magic, version, length, dict, padding) for a C-order array of `dtype`
/// and `shape`; the data follows it, and starts at a multiple of 64 bytes.
pub fn header(dtype: DType, shape: &[u64]) -> Vec<u8> {
    let dims = match shape {
        [] => String::new(),
        [d] => format!("{d},"),
        _ => shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    };
    let dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': ({dims}), }}",
        descr(dtype)
    );
    // Version 1.0 has a u16 header length; 2.0 a u32.
    let (version, len_bytes) = if dict.len() + 1 + 10 < 65_536 {
        (1u8, 2)
    } else {
        (2u8, 4)
    };
    let prefix = 6 + 2 + len_bytes;
    let total = (prefix + dict.len() + 1).div_ceil(64) * 64;
    let header_len = total - prefix;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"\x93NUMPY");
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header_len as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header_len as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

/// Writes a `.npy` file: [`header`] then `data` (little-endian, row-major, as stored).
pub fn write(out: &mut dyn Write, dtype: DType, shape: &[u64], data: &[u8]) -> io::Result<()> {
    out.write_all(&header(dtype, shape))?;
    out.write_all(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_aligned_and_exact() {
        let h = header(DType::Float32, &[2, 3]);
        assert_eq!(h.len() % 64, 0);
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        let len = u16::from_le_bytes([h[8], h[9]]) as usize;
        assert_eq!(len + 10, h.len());
        let text = std::str::from_utf8(&h[10..]).unwrap();
        assert!(text.starts_with("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"));
        assert!(text.ends_with(" \n"));
        let s = String::from_utf8_lossy(&header(DType::Bool, &[])).into_owned();
        assert!(s.contains("'shape': ()"), "{s}");
        let s = String::from_utf8_lossy(&header(DType::Complex128, &[5])).into_owned();
        assert!(
            s.contains("'descr': '<c16'") && s.contains("'shape': (5,)"),
            "{s}"
        );
        // Every dtype's descr has its element size.
        for d in DType::ALL {
            let size: usize = descr(d)[2..].parse().unwrap();
            assert_eq!(size, d.size(), "{d}");
            // numpy's own type for exactly the types it has.
            let exact = matches!(
                d,
                DType::Bool
                    | DType::Int8
                    | DType::UInt8
                    | DType::Int16
                    | DType::UInt16
                    | DType::Int32
                    | DType::UInt32
                    | DType::Int64
                    | DType::UInt64
                    | DType::Float16
                    | DType::Float32
                    | DType::Float64
                    | DType::Complex64
                    | DType::Complex128
            );
            assert_eq!(raw_note(d).is_none(), exact, "{d}");
        }
    }

    #[test]
    fn large_headers_use_version_2() {
        // Ranks paramdex allows always fit version 1; a header over 64 KiB switches to 2.0.
        assert_eq!(header(DType::Int8, &[u64::MAX; 254])[6], 1);
        let h = header(DType::Int8, &vec![1u64; 30_000]);
        assert_eq!(h[6], 2);
        assert_eq!(h.len() % 64, 0);
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        assert_eq!(len + 12, h.len());
    }
}
