//! Element types and their numbers in each format (SPEC.md, "Dtypes").

use crate::error::{Error, Result};

/// An element type of a numeric tensor.
///
/// Every variant has a Paddle `VarType.Type` number and a TensorFlow `DataType` number, so a
/// paramdex file is readable by both.
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
}

/// One row of the dtype table: (dtype, name, Paddle number, TensorFlow number, element bytes).
const TABLE: [(DType, &str, i32, i32, u8); 17] = [
    (DType::Bool, "bool", 0, 10, 1),
    (DType::Int8, "int8", 21, 6, 1),
    (DType::UInt8, "uint8", 20, 4, 1),
    (DType::Int16, "int16", 1, 5, 2),
    (DType::UInt16, "uint16", 36, 17, 2),
    (DType::Int32, "int32", 2, 3, 4),
    (DType::UInt32, "uint32", 37, 22, 4),
    (DType::Int64, "int64", 3, 9, 8),
    (DType::UInt64, "uint64", 38, 23, 8),
    (DType::Float16, "float16", 4, 19, 2),
    (DType::BFloat16, "bfloat16", 22, 14, 2),
    (DType::Float32, "float32", 5, 1, 4),
    (DType::Float64, "float64", 6, 2, 8),
    (DType::Complex64, "complex64", 23, 8, 8),
    (DType::Complex128, "complex128", 24, 18, 16),
    (DType::Float8E4M3FN, "float8_e4m3fn", 32, 25, 1),
    (DType::Float8E5M2, "float8_e5m2", 33, 24, 1),
];

impl DType {
    /// Every dtype, in table order.
    pub const ALL: [DType; 17] = {
        let mut all = [DType::Bool; 17];
        let mut i = 0;
        while i < 17 {
            all[i] = TABLE[i].0;
            i += 1;
        }
        all
    };

    fn row(self) -> &'static (DType, &'static str, i32, i32, u8) {
        // Every variant has exactly one row (checked by the `table_is_complete` test).
        TABLE
            .iter()
            .find(|r| r.0 == self)
            .expect("every DType variant has a row in TABLE")
    }

    /// The paramdex name (`float32`, `bfloat16`, `float8_e4m3fn`...).
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// Paddle `VarType.Type` number.
    pub fn paddle_code(self) -> i32 {
        self.row().2
    }

    /// TensorFlow `DataType` number.
    pub fn tf_code(self) -> i32 {
        self.row().3
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        usize::from(self.row().4)
    }

    /// Whether the type is a floating-point or complex type (for numeric diffs).
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
        )
    }

    /// Looks a dtype up by its paramdex name.
    pub fn from_name(name: &str) -> Option<DType> {
        TABLE.iter().find(|r| r.1 == name).map(|r| r.0)
    }

    /// Looks a dtype up by its Paddle number.
    pub fn from_paddle(code: i64) -> Option<DType> {
        TABLE.iter().find(|r| i64::from(r.2) == code).map(|r| r.0)
    }

    /// Looks a dtype up by its TensorFlow number.
    pub fn from_tf(code: i64) -> Option<DType> {
        TABLE.iter().find(|r| i64::from(r.3) == code).map(|r| r.0)
    }

    /// Like [`DType::from_paddle`] but an error naming the number.
    pub fn try_from_paddle(code: i64) -> Result<DType> {
        Self::from_paddle(code).ok_or(Error::UnknownDType {
            system: "paddle",
            code,
            location: None,
        })
    }

    /// Like [`DType::from_tf`] but an error naming the number.
    pub fn try_from_tf(code: i64) -> Result<DType> {
        Self::from_tf(code).ok_or(Error::UnknownDType {
            system: "tensorflow",
            code,
            location: None,
        })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
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
            assert_eq!(d.row().0, *d);
            assert_eq!(DType::from_name(d.name()), Some(*d));
            assert_eq!(DType::from_paddle(d.paddle_code().into()), Some(*d));
            assert_eq!(DType::from_tf(d.tf_code().into()), Some(*d));
            for e in &DType::ALL[i + 1..] {
                assert_ne!(d.name(), e.name());
                assert_ne!(d.paddle_code(), e.paddle_code());
                assert_ne!(d.tf_code(), e.tf_code());
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
        assert!(DType::from_tf(7).is_none());
    }
}
