//! The ggml tensor types a GGUF file's tensor infos name by number: each type's lower-case ggml
//! name, its block (elements per block, bytes per block) and, for the plain types, the paramdex
//! dtype it is. Its own file: it is a table (gguf-py's `GGMLQuantizationType` and
//! `GGML_QUANT_SIZES`, ggml's `type_traits`), read by the parser and the store alike.
//!
//! Numbers ggml retired (4 and 5, the old `q4_2`/`q4_3`; 31–33, the `q4_0_4_4` family; 36–38,
//! the `iq4_nl_4_4` family) are not in the table: a file naming one is refused as naming an
//! unknown type.

use std::sync::Arc;

use crate::dtype::DType;
use crate::interop::store::{ForeignType, Kind};

/// The system name block types carry as [`Kind::Foreign`] (`ForeignType::system`).
pub const GGML: &str = "ggml";

/// One ggml tensor type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    /// ggml's number (`ggml_type`), as a tensor info stores it.
    pub code: u32,
    /// ggml's name, lower case (`f32`, `q4_0`, `q4_k`, `iq4_xs`, `mxfp4`).
    pub name: &'static str,
    /// Elements per block (1 for the plain types).
    pub block: u64,
    /// Bytes per block.
    pub bytes: u64,
    /// The paramdex dtype of a plain type (`f32` is `float32`); `None` for block types.
    pub plain: Option<DType>,
}

const fn t(
    code: u32,
    name: &'static str,
    block: u64,
    bytes: u64,
    plain: Option<DType>,
) -> GgmlType {
    GgmlType {
        code,
        name,
        block,
        bytes,
        plain,
    }
}

/// ggml's `QK_K`: the elements of a k-quant super-block.
const QK_K: u64 = 256;

/// Every live ggml type, by number (gguf-py 0.19 `GGML_QUANT_SIZES`).
pub const GGML_TYPES: &[GgmlType] = &[
    t(0, "f32", 1, 4, Some(DType::Float32)),
    t(1, "f16", 1, 2, Some(DType::Float16)),
    t(2, "q4_0", 32, 2 + 16, None),
    t(3, "q4_1", 32, 2 + 2 + 16, None),
    t(6, "q5_0", 32, 2 + 4 + 16, None),
    t(7, "q5_1", 32, 2 + 2 + 4 + 16, None),
    t(8, "q8_0", 32, 2 + 32, None),
    t(9, "q8_1", 32, 4 + 4 + 32, None),
    t(10, "q2_k", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4, None),
    t(11, "q3_k", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12, None),
    t(12, "q4_k", QK_K, 2 + 2 + QK_K / 2 + 12, None),
    t(13, "q5_k", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12, None),
    t(14, "q6_k", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16, None),
    t(15, "q8_k", QK_K, 4 + QK_K + QK_K / 8, None),
    t(16, "iq2_xxs", QK_K, 2 + QK_K / 4, None),
    t(17, "iq2_xs", QK_K, 2 + QK_K / 4 + QK_K / 32, None),
    t(18, "iq3_xxs", QK_K, 2 + QK_K / 4 + QK_K / 8, None),
    t(19, "iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16, None),
    t(20, "iq4_nl", 32, 2 + 16, None),
    t(
        21,
        "iq3_s",
        QK_K,
        2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4,
        None,
    ),
    t(22, "iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16, None),
    t(23, "iq4_xs", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64, None),
    t(24, "i8", 1, 1, Some(DType::Int8)),
    t(25, "i16", 1, 2, Some(DType::Int16)),
    t(26, "i32", 1, 4, Some(DType::Int32)),
    t(27, "i64", 1, 8, Some(DType::Int64)),
    t(28, "f64", 1, 8, Some(DType::Float64)),
    t(29, "iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, None),
    t(30, "bf16", 1, 2, Some(DType::BFloat16)),
    t(34, "tq1_0", QK_K, 2 + 4 * 13, None),
    t(35, "tq2_0", QK_K, 2 + 64, None),
    t(39, "mxfp4", 32, 1 + 16, None),
    t(40, "nvfp4", 64, 4 + 32, None),
    t(41, "q1_0", 128, 2 + 16, None),
];

impl GgmlType {
    /// The type numbered `code`, if ggml has it (live).
    pub fn from_code(code: u32) -> Option<&'static GgmlType> {
        GGML_TYPES.iter().find(|t| t.code == code)
    }

    /// The type named `name` (ggml's lower-case name), if there is one.
    pub fn from_name(name: &str) -> Option<&'static GgmlType> {
        GGML_TYPES.iter().find(|t| t.name == name)
    }

    /// The ggml type a paramdex dtype is written as, if GGUF has it (`float32` is `f32`).
    pub fn of_dtype(d: DType) -> Option<&'static GgmlType> {
        GGML_TYPES.iter().find(|t| t.plain == Some(d))
    }

    /// Whether the type stores elements in blocks of more than one (a quantized type).
    pub fn is_block(&self) -> bool {
        self.plain.is_none()
    }

    /// The kind a tensor of this type is listed as: the paramdex dtype of a plain type, else
    /// a [`Kind::Foreign`] of system [`GGML`] named as ggml names it.
    pub fn kind(&self) -> Kind {
        match self.plain {
            Some(d) => Kind::Numeric(d),
            None => Kind::Foreign(Arc::new(ForeignType::new(GGML, self.name))),
        }
    }

    /// Bytes of a tensor of this type and row-major `shape`: its innermost dimension (the
    /// last, ggml's `ne[0]`) a whole number of blocks. `None` when it is not (a scalar of a
    /// block type included) or the size overflows a `u64`.
    pub fn nbytes(&self, shape: &[u64]) -> Option<u64> {
        let (&inner, outer) = match shape.split_last() {
            Some(s) => s,
            None if self.block == 1 => return Some(self.bytes),
            None => return None,
        };
        if !inner.is_multiple_of(self.block) {
            return None;
        }
        outer
            .iter()
            .try_fold((inner / self.block).checked_mul(self.bytes)?, |acc, &d| {
                acc.checked_mul(d)
            })
    }
}

/// The ggml type a tensor of `kind` is stored as in GGUF: a plain dtype GGUF has, or a
/// [`GGML`] foreign type it names.
pub fn of_kind(kind: &Kind) -> Option<&'static GgmlType> {
    match kind {
        Kind::Numeric(d) => GgmlType::of_dtype(*d),
        Kind::Foreign(f) if f.system == GGML => GgmlType::from_name(&f.name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_are_unique() {
        for (i, a) in GGML_TYPES.iter().enumerate() {
            for b in &GGML_TYPES[i + 1..] {
                assert_ne!(a.code, b.code);
                assert_ne!(a.name, b.name);
            }
            assert_eq!(GgmlType::from_code(a.code), Some(a));
            assert_eq!(of_kind(&a.kind()), Some(a));
            if let Some(d) = a.plain {
                assert_eq!(d.size() as u64, a.bytes, "{}", a.name);
            }
        }
    }

    #[test]
    fn sizes_count_whole_blocks_of_the_innermost_dimension() {
        let q4k = GgmlType::from_name("q4_k").unwrap();
        assert_eq!(q4k.bytes, 144);
        assert_eq!(q4k.nbytes(&[3, 512]), Some(3 * 2 * 144));
        assert_eq!(q4k.nbytes(&[512, 3]), None);
        assert_eq!(q4k.nbytes(&[]), None);
        let f32 = GgmlType::from_code(0).unwrap();
        assert_eq!(f32.nbytes(&[]), Some(4));
        assert_eq!(f32.nbytes(&[u64::MAX, 2]), None);
    }
}
