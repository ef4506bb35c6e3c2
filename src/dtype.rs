//! Element types and their numbers in each format (SPEC.md, "Dtypes").

/// An element type of a numeric tensor.
///
/// Every variant has a name (torch's and ml_dtypes' spelling) and a byte size. Most have a
/// Paddle `VarType.Type` number and a TensorFlow `DataType` number; the low-precision types
/// that one of them lacks are stored as `uint8` bytes for that system (its "visible" number,
/// [`DType::paddle_code`], [`DType::tf_code`]), and a native index entry keeps the real type in
/// its paramdex field 18 ([`DType::pdx_code`], SPEC.md 6).
///
/// Sub-byte types come in two layouts. *Unpacked* (`int4`, `float4_e2m1fn`, `float6_e2m3fn`,
/// ...): one element per byte, the value in the low bits, as TensorFlow, ml_dtypes and torch's
/// shell dtypes store them. *Packed* (`float4_e2m1fn_x2`, `float6_e2m3fn_x4`, ...): the shape
/// counts bytes, as torch's `float4_e2m1fn_x2` does; see [`DType::packing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum DType {
    /// One byte, 0 or 1.
    Bool,
    /// Signed 8-bit integer.
    Int8,
    /// Unsigned 8-bit integer.
    UInt8,
    /// Signed 16-bit integer.
    Int16,
    /// Unsigned 16-bit integer.
    UInt16,
    /// Signed 32-bit integer.
    Int32,
    /// Unsigned 32-bit integer.
    UInt32,
    /// Signed 64-bit integer.
    Int64,
    /// Unsigned 64-bit integer.
    UInt64,
    /// IEEE 754 binary16.
    Float16,
    /// bfloat16 (the upper half of a binary32).
    BFloat16,
    /// IEEE 754 binary32.
    Float32,
    /// IEEE 754 binary64.
    Float64,
    /// Two binary32: real, imaginary.
    Complex64,
    /// Two binary64: real, imaginary.
    Complex128,
    /// 8-bit float, 4 exponent bits, 3 mantissa bits, finite only (OCP FP8 E4M3).
    Float8E4M3FN,
    /// 8-bit float, 5 exponent bits, 2 mantissa bits (OCP FP8 E5M2).
    Float8E5M2,
    /// 8-bit float, 4 exponent bits (bias 8), 3 mantissa bits, finite, no negative zero; `0x80`
    /// is NaN (AMD/Graphcore).
    Float8E4M3FNUZ,
    /// 8-bit float, 5 exponent bits (bias 16), 2 mantissa bits, finite, no negative zero;
    /// `0x80` is NaN.
    Float8E5M2FNUZ,
    /// 8-bit float, 4 exponent bits (bias 11), 3 mantissa bits, finite, no negative zero;
    /// `0x80` is NaN (TPU).
    Float8E4M3B11FNUZ,
    /// Unsigned power of two `2^(b-127)`, no zero, `0xff` NaN: the MX formats' shared scale.
    Float8E8M0FNU,
    /// Signed 4-bit integer, one per byte, in the low nibble.
    Int4,
    /// Unsigned 4-bit integer, one per byte, in the low nibble.
    UInt4,
    /// Signed 2-bit integer, one per byte, in the low 2 bits.
    Int2,
    /// Unsigned 2-bit integer, one per byte, in the low 2 bits.
    UInt2,
    /// 4-bit float (1 sign, 2 exponent, 1 mantissa bit; finite), one per byte, in the low nibble.
    Float4E2M1FN,
    /// 6-bit float (1 sign, 2 exponent, 3 mantissa bits; finite), one per byte, in the low 6 bits.
    Float6E2M3FN,
    /// 6-bit float (1 sign, 3 exponent, 2 mantissa bits; finite), one per byte, in the low 6 bits.
    Float6E3M2FN,
    /// Two `float4_e2m1fn` per byte: element `2i` in the low nibble, `2i+1` in the high one. The
    /// shape counts bytes (torch's `float4_e2m1fn_x2`; safetensors `F4`, whose shape counts
    /// elements).
    Float4E2M1FNx2,
    /// Four `float6_e2m3fn` in every 3 bytes of the last dimension (safetensors `F6_E2M3`): the
    /// shape counts bytes, so its last dimension is a multiple of 3; bit order in SPEC.md 6.
    Float6E2M3FNx4,
    /// Four `float6_e3m2fn` in every 3 bytes of the last dimension (safetensors `F6_E3M2`).
    Float6E3M2FNx4,
    /// A bytes value (SPEC.md 6.1): not a numeric type. In a native file its record is `uint8`
    /// of shape `[S]` holding TensorFlow's encoding of a scalar string (the value's varint
    /// length, the masked CRC32C of the length, the value), and its index entry is a scalar
    /// `DT_STRING` of `S` bytes, so TensorFlow reads it as a scalar string tensor. Not in
    /// [`DType::ALL`]; written with `Writer::add_bytes`, read with `Reader::get_bytes`.
    Bytes,
}

/// How a packed dtype stores its values ([`DType::packing`]): `values` elements in every
/// `bytes` bytes of the last dimension, each of `bits` bits, element `k` of a group in bits
/// `k·bits ..` of the group read as a little-endian integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packing {
    /// Values per group.
    pub values: u64,
    /// Bytes per group.
    pub bytes: u64,
    /// Bits per value.
    pub bits: u32,
    /// The unpacked dtype of one value (one per byte).
    pub unpacked: DType,
}

/// One row of the dtype table.
struct Row {
    dtype: DType,
    name: &'static str,
    /// Paddle `VarType.Type`, if Paddle has the type.
    paddle: Option<i32>,
    /// TensorFlow `DataType`, if TensorFlow has the type.
    tf: Option<i32>,
    /// paramdex's number (index entry field 18), for types TensorFlow lacks.
    pdx: Option<u32>,
    size: u8,
}

const fn row(
    dtype: DType,
    name: &'static str,
    paddle: Option<i32>,
    tf: Option<i32>,
    pdx: Option<u32>,
) -> Row {
    let size = match dtype {
        DType::Int16 | DType::UInt16 | DType::Float16 | DType::BFloat16 => 2,
        DType::Int32 | DType::UInt32 | DType::Float32 => 4,
        DType::Int64 | DType::UInt64 | DType::Float64 | DType::Complex64 => 8,
        DType::Complex128 => 16,
        _ => 1,
    };
    Row {
        dtype,
        name,
        paddle,
        tf,
        pdx,
        size,
    }
}

const N: usize = 31;
/// Rows of [`TABLE`]: the numeric dtypes, then `bytes`.
const ROWS: usize = N + 1;

/// The dtype table (SPEC.md 6).
const TABLE: [Row; ROWS] = [
    row(DType::Bool, "bool", Some(0), Some(10), None),
    row(DType::Int8, "int8", Some(21), Some(6), None),
    row(DType::UInt8, "uint8", Some(20), Some(4), None),
    row(DType::Int16, "int16", Some(1), Some(5), None),
    row(DType::UInt16, "uint16", Some(36), Some(17), None),
    row(DType::Int32, "int32", Some(2), Some(3), None),
    row(DType::UInt32, "uint32", Some(37), Some(22), None),
    row(DType::Int64, "int64", Some(3), Some(9), None),
    row(DType::UInt64, "uint64", Some(38), Some(23), None),
    row(DType::Float16, "float16", Some(4), Some(19), None),
    row(DType::BFloat16, "bfloat16", Some(22), Some(14), None),
    row(DType::Float32, "float32", Some(5), Some(1), None),
    row(DType::Float64, "float64", Some(6), Some(2), None),
    row(DType::Complex64, "complex64", Some(23), Some(8), None),
    row(DType::Complex128, "complex128", Some(24), Some(18), None),
    row(
        DType::Float8E4M3FN,
        "float8_e4m3fn",
        Some(32),
        Some(25),
        None,
    ),
    row(DType::Float8E5M2, "float8_e5m2", Some(33), Some(24), None),
    row(
        DType::Float8E4M3FNUZ,
        "float8_e4m3fnuz",
        None,
        Some(26),
        None,
    ),
    row(
        DType::Float8E5M2FNUZ,
        "float8_e5m2fnuz",
        None,
        Some(28),
        None,
    ),
    row(
        DType::Float8E4M3B11FNUZ,
        "float8_e4m3b11fnuz",
        None,
        Some(27),
        None,
    ),
    row(DType::Float8E8M0FNU, "float8_e8m0fnu", None, None, Some(1)),
    row(DType::Int4, "int4", None, Some(29), None),
    row(DType::UInt4, "uint4", None, Some(30), None),
    row(DType::Int2, "int2", None, Some(31), None),
    row(DType::UInt2, "uint2", None, Some(32), None),
    row(DType::Float4E2M1FN, "float4_e2m1fn", None, Some(33), None),
    row(DType::Float6E2M3FN, "float6_e2m3fn", None, None, Some(2)),
    row(DType::Float6E3M2FN, "float6_e3m2fn", None, None, Some(3)),
    row(
        DType::Float4E2M1FNx2,
        "float4_e2m1fn_x2",
        None,
        None,
        Some(4),
    ),
    row(
        DType::Float6E2M3FNx4,
        "float6_e2m3fn_x4",
        None,
        None,
        Some(5),
    ),
    row(
        DType::Float6E3M2FNx4,
        "float6_e3m2fn_x4",
        None,
        None,
        Some(6),
    ),
    // Bytes values: a scalar DT_STRING for TensorFlow, a `uint8` record for Paddle.
    row(DType::Bytes, "bytes", None, Some(7), None),
];

/// TensorFlow's `DT_UINT8`: what TensorFlow sees for a type it has no number for.
const TF_UINT8: i32 = 4;
/// Paddle's `UINT8`: the record type of a type Paddle has no number for.
const PADDLE_UINT8: i32 = 20;

impl DType {
    /// Every numeric dtype, in table order ([`DType::Bytes`] is not one).
    pub const ALL: [DType; N] = {
        let mut all = [DType::Bool; N];
        let mut i = 0;
        while i < N {
            all[i] = TABLE[i].dtype;
            i += 1;
        }
        all
    };

    fn row(self) -> &'static Row {
        // Every variant has exactly one row (checked by the `table_is_complete` test).
        TABLE
            .iter()
            .find(|r| r.dtype == self)
            .expect("every DType variant has a row in TABLE")
    }

    /// The paramdex name, torch's and ml_dtypes' spelling (`float32`, `bfloat16`,
    /// `float8_e4m3fn`, `float4_e2m1fn_x2`...).
    pub fn name(self) -> &'static str {
        self.row().name
    }

    /// The Paddle `VarType.Type` number a record of this dtype carries: the type's own, or
    /// `UINT8` (20) for types Paddle lacks (Paddle then sees the bytes as `uint8`).
    pub fn paddle_code(self) -> i32 {
        self.row().paddle.unwrap_or(PADDLE_UINT8)
    }

    /// Paddle's own number for the type, if Paddle has one.
    pub fn paddle_number(self) -> Option<i32> {
        self.row().paddle
    }

    /// The TensorFlow `DataType` number an index entry of this dtype carries in field 1: the
    /// type's own, or `DT_UINT8` (4) for types TensorFlow lacks (TensorFlow then reads the
    /// bytes as `uint8`; [`DType::pdx_code`] names the type).
    pub fn tf_code(self) -> i32 {
        self.row().tf.unwrap_or(TF_UINT8)
    }

    /// TensorFlow's own number for the type, if TensorFlow has one.
    pub fn tf_number(self) -> Option<i32> {
        self.row().tf
    }

    /// paramdex's number for a type TensorFlow lacks (index entry field 18), else `None`.
    pub fn pdx_code(self) -> Option<u32> {
        self.row().pdx
    }

    /// Bytes per element (for packed types, per byte of the shape: 1).
    pub fn size(self) -> usize {
        usize::from(self.row().size)
    }

    /// How a packed dtype stores its values; `None` for every other dtype.
    pub fn packing(self) -> Option<Packing> {
        let (values, bytes, bits, unpacked) = match self {
            DType::Float4E2M1FNx2 => (2, 1, 4, DType::Float4E2M1FN),
            DType::Float6E2M3FNx4 => (4, 3, 6, DType::Float6E2M3FN),
            DType::Float6E3M2FNx4 => (4, 3, 6, DType::Float6E3M2FN),
            _ => return None,
        };
        Some(Packing {
            values,
            bytes,
            bits,
            unpacked,
        })
    }

    /// The packed dtype holding values of this unpacked one (`float4_e2m1fn` →
    /// `float4_e2m1fn_x2`), if there is one.
    pub fn packed(self) -> Option<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.packing().is_some_and(|p| p.unpacked == self))
    }

    /// Whether the type is a floating-point or complex type (for numeric diffs). Packed types
    /// are not: their elements are bytes.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::Float16
                | DType::BFloat16
                | DType::Float32
                | DType::Float64
                | DType::Complex64
                | DType::Complex128
                | DType::Float8E4M3FN
                | DType::Float8E5M2
                | DType::Float8E4M3FNUZ
                | DType::Float8E5M2FNUZ
                | DType::Float8E4M3B11FNUZ
                | DType::Float8E8M0FNU
                | DType::Float4E2M1FN
                | DType::Float6E2M3FN
                | DType::Float6E3M2FN
        )
    }

    /// Looks a dtype up by its paramdex name.
    pub fn from_name(name: &str) -> Option<DType> {
        TABLE.iter().find(|r| r.name == name).map(|r| r.dtype)
    }

    /// Looks a dtype up by its Paddle number (Paddle's own numbers only: 20 is `uint8`).
    pub fn from_paddle(code: i64) -> Option<DType> {
        TABLE
            .iter()
            .find(|r| r.paddle.is_some_and(|c| i64::from(c) == code))
            .map(|r| r.dtype)
    }

    /// Looks a dtype up by its TensorFlow number (TensorFlow's own numbers only: 4 is `uint8`).
    pub fn from_tf(code: i64) -> Option<DType> {
        TABLE
            .iter()
            .find(|r| r.tf.is_some_and(|c| i64::from(c) == code))
            .map(|r| r.dtype)
    }

    /// Looks a dtype up by its paramdex number (index entry field 18).
    pub fn from_pdx(code: u32) -> Option<DType> {
        TABLE.iter().find(|r| r.pdx == Some(code)).map(|r| r.dtype)
    }

    /// The dtype of a native index entry: its paramdex number (field 18) when set, which
    /// requires the TensorFlow number (field 1) to be `DT_UINT8`; else its TensorFlow number.
    pub fn from_entry(tf: i32, pdx: u32) -> Option<DType> {
        if pdx == 0 {
            Self::from_tf(tf.into())
        } else if tf == TF_UINT8 {
            Self::from_pdx(pdx)
        } else {
            None
        }
    }
}

impl Packing {
    /// The shape of the unpacked tensor (one value per byte) of a packed tensor of `shape`
    /// (bytes): the last dimension times `values / bytes`. `None` for a scalar, a last
    /// dimension that is not a multiple of `bytes`, or an overflow.
    pub fn unpacked_shape(&self, shape: &[u64]) -> Option<Vec<u64>> {
        let (&last, _) = shape.split_last()?;
        if !last.is_multiple_of(self.bytes) {
            return None;
        }
        let mut out = shape.to_vec();
        *out.last_mut()? = (last / self.bytes).checked_mul(self.values)?;
        Some(out)
    }

    /// The shape of the packed tensor (bytes) holding an unpacked tensor of `shape` (values):
    /// the last dimension times `bytes / values`. `None` for a scalar or a last dimension that
    /// is not a multiple of `values`.
    pub fn packed_shape(&self, shape: &[u64]) -> Option<Vec<u64>> {
        let (&last, _) = shape.split_last()?;
        if !last.is_multiple_of(self.values) {
            return None;
        }
        let mut out = shape.to_vec();
        *out.last_mut()? = (last / self.values).checked_mul(self.bytes)?;
        Some(out)
    }

    /// Unpacks `data` (whole groups) into one value per byte, value `k` of a group from bits
    /// `k·bits ..` of the group read as a little-endian integer. `None` when `data` is not a
    /// whole number of groups.
    pub fn unpack(&self, data: &[u8]) -> Option<Vec<u8>> {
        let gb = self.bytes as usize;
        if !data.len().is_multiple_of(gb) {
            return None;
        }
        let mask = (1u32 << self.bits) - 1;
        let mut out = Vec::with_capacity(data.len() / gb * self.values as usize);
        for g in data.chunks_exact(gb) {
            let word = g
                .iter()
                .rev()
                .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
            for k in 0..self.values as u32 {
                out.push(((word >> (k * self.bits)) & mask) as u8);
            }
        }
        Some(out)
    }

    /// Packs one value per byte into groups, the inverse of [`Packing::unpack`]. `Err` with the
    /// index of the first value that has bits above its width (which packing would lose), or
    /// `Err(len)` when `values` is not a whole number of groups.
    pub fn pack(&self, values: &[u8]) -> std::result::Result<Vec<u8>, usize> {
        let n = self.values as usize;
        if !values.len().is_multiple_of(n) {
            return Err(values.len());
        }
        if let Some(i) = values.iter().position(|&v| u32::from(v) >> self.bits != 0) {
            return Err(i);
        }
        let mut out = Vec::with_capacity(values.len() / n * self.bytes as usize);
        for g in values.chunks_exact(n) {
            let word = g.iter().enumerate().fold(0u32, |acc, (k, &v)| {
                acc | (u32::from(v) << (k as u32 * self.bits))
            });
            out.extend_from_slice(&word.to_le_bytes()[..self.bytes as usize]);
        }
        Ok(out)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Paddle's `VarType.Type` name of a number that is not an element type (a container kind:
/// `SELECTED_ROWS`, `STRINGS`, `SPARSE_COO`, ...), as its framework.proto spells it; `None` for
/// element types and numbers Paddle does not define.
pub fn paddle_type_name(code: i64) -> Option<&'static str> {
    Some(match code {
        7 => "DENSE_TENSOR",
        8 => "SELECTED_ROWS",
        9 => "FEED_MINIBATCH",
        10 => "FETCH_LIST",
        11 => "STEP_SCOPES",
        12 => "LOD_RANK_TABLE",
        13 => "DENSE_TENSOR_ARRAY",
        14 => "PLACE_LIST",
        15 => "READER",
        16 => "FETCH_VAR_LIST",
        17 => "RAW",
        18 => "TUPLE",
        25 => "STRING",
        26 => "STRINGS",
        27 => "VOCAB",
        28 => "FEED_LIST",
        29 => "PSTRING",
        30 => "SPARSE_COO",
        31 => "SPARSE_CSR",
        _ => return None,
    })
}

/// TensorFlow's name of a `DataType` number without `DT_`, in lower case (`float`, `variant`,
/// `qint8`), for the numbers TensorFlow defines.
pub fn tf_type_name(code: i32) -> Option<&'static str> {
    const NAMES: [&str; 34] = [
        "invalid",
        "float",
        "double",
        "int32",
        "uint8",
        "int16",
        "int8",
        "string",
        "complex64",
        "int64",
        "bool",
        "qint8",
        "quint8",
        "qint32",
        "bfloat16",
        "qint16",
        "quint16",
        "uint16",
        "complex128",
        "half",
        "resource",
        "variant",
        "uint32",
        "uint64",
        "float8_e5m2",
        "float8_e4m3fn",
        "float8_e4m3fnuz",
        "float8_e4m3b11fnuz",
        "float8_e5m2fnuz",
        "int4",
        "uint4",
        "int2",
        "uint2",
        "float4_e2m1fn",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_complete_and_unique() {
        for (i, d) in DType::ALL.iter().enumerate() {
            assert_eq!(d.row().dtype, *d);
            assert_eq!(DType::from_name(d.name()), Some(*d));
            // A type has its own TensorFlow number or a paramdex number, never both.
            assert_ne!(d.tf_number().is_some(), d.pdx_code().is_some(), "{d}");
            assert_eq!(
                DType::from_entry(d.tf_code(), d.pdx_code().unwrap_or(0)),
                Some(*d)
            );
            if let Some(c) = d.paddle_number() {
                assert_eq!(DType::from_paddle(c.into()), Some(*d));
            } else {
                assert_eq!(d.paddle_code(), 20);
                assert_eq!(d.size(), 1, "{d}: only 1-byte types are recorded as uint8");
            }
            if d.tf_number().is_none() {
                assert_eq!(d.tf_code(), 4);
                assert_eq!(
                    d.size(),
                    1,
                    "{d}: only 1-byte types are read by TF as uint8"
                );
            }
            for e in &DType::ALL[i + 1..] {
                assert_ne!(d.name(), e.name());
                assert!(d.paddle_number().is_none() || d.paddle_number() != e.paddle_number());
                assert!(d.tf_number().is_none() || d.tf_number() != e.tf_number());
                assert!(d.pdx_code().is_none() || d.pdx_code() != e.pdx_code());
            }
        }
    }

    #[test]
    fn known_numbers() {
        assert_eq!(DType::Float32.paddle_code(), 5);
        assert_eq!(DType::Float32.tf_code(), 1);
        assert_eq!(DType::BFloat16.tf_code(), 14);
        assert_eq!(DType::Complex128.size(), 16);
        assert!(DType::from_paddle(7).is_none());
        assert_eq!(DType::from_tf(7), Some(DType::Bytes));
        assert_eq!(DType::from_tf(29), Some(DType::Int4));
        assert_eq!(DType::from_tf(30), Some(DType::UInt4));
        assert_eq!(DType::from_tf(26), Some(DType::Float8E4M3FNUZ));
        assert_eq!(DType::from_tf(27), Some(DType::Float8E4M3B11FNUZ));
        assert_eq!(DType::from_tf(28), Some(DType::Float8E5M2FNUZ));
        assert_eq!(DType::from_tf(4), Some(DType::UInt8));
        assert_eq!(DType::from_paddle(20), Some(DType::UInt8));
        assert_eq!(DType::from_entry(4, 1), Some(DType::Float8E8M0FNU));
        // A paramdex number is only valid beside DT_UINT8; an unknown one is no dtype.
        assert_eq!(DType::from_entry(1, 1), None);
        assert_eq!(DType::from_entry(4, 99), None);
        for (i, name) in ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"]
            .iter()
            .enumerate()
        {
            assert_eq!(tf_type_name(29 + i as i32), Some(*name));
            assert_eq!(DType::from_tf(29 + i as i64).map(DType::name), Some(*name));
        }
    }

    #[test]
    fn packing_bit_order() {
        let f4 = DType::Float4E2M1FNx2.packing().unwrap();
        // Element 2i in the low nibble (torch's float4_e2m1fn_x2).
        assert_eq!(f4.unpack(&[0x21, 0xf0]).unwrap(), vec![1, 2, 0, 15]);
        assert_eq!(f4.pack(&[1, 2, 0, 15]).unwrap(), vec![0x21, 0xf0]);
        assert_eq!(f4.pack(&[1, 16]), Err(1), "a value wider than 4 bits");
        assert_eq!(f4.pack(&[1]), Err(1), "half a byte");
        assert_eq!(f4.unpacked_shape(&[2, 3]), Some(vec![2, 6]));
        assert_eq!(f4.packed_shape(&[2, 6]), Some(vec![2, 3]));
        assert_eq!(f4.packed_shape(&[3]), None);
        assert_eq!(f4.packed_shape(&[]), None);
        let f6 = DType::Float6E2M3FNx4.packing().unwrap();
        // Values a, b, c, d: the 24-bit little-endian word d<<18 | c<<12 | b<<6 | a.
        let (a, b, c, d) = (0x01u32, 0x3f, 0x15, 0x2a);
        let word = d << 18 | c << 12 | b << 6 | a;
        let bytes = word.to_le_bytes()[..3].to_vec();
        assert_eq!(f6.unpack(&bytes).unwrap(), vec![1, 0x3f, 0x15, 0x2a]);
        assert_eq!(f6.pack(&[1, 0x3f, 0x15, 0x2a]).unwrap(), bytes);
        assert_eq!(f6.unpack(&bytes[..2]), None);
        assert_eq!(f6.unpacked_shape(&[6]), Some(vec![8]));
        assert_eq!(f6.unpacked_shape(&[4]), None);
        assert_eq!(f6.pack(&[0x40, 0, 0, 0]), Err(0));
        // Every byte pattern survives unpack then pack.
        let all: Vec<u8> = (0..=255).collect();
        for p in [f4, f6] {
            let n = all.len() / p.bytes as usize * p.bytes as usize;
            assert_eq!(p.pack(&p.unpack(&all[..n]).unwrap()).unwrap(), all[..n]);
        }
        assert_eq!(DType::Float4E2M1FN.packed(), Some(DType::Float4E2M1FNx2));
        assert_eq!(DType::Float6E3M2FN.packed(), Some(DType::Float6E3M2FNx4));
        assert_eq!(DType::Int4.packed(), None);
    }
}
