//! Rust element types that tensor data can be viewed as, zero-copy.

use crate::dtype::DType;
use crate::error::{Error, Result};

/// A Rust type whose values are stored as the elements of some dtype(s), bit for bit.
///
/// Implemented for the fixed-width integers, `f32`, `f64`, [`half::f16`], [`half::bf16`], and
/// `[f32; 2]` / `[f64; 2]` for complex numbers. `u8` views any 1-byte dtype (bool, float8 included).
pub trait Element: bytemuck::Pod {
    /// The dtypes whose elements are exactly this type.
    const DTYPES: &'static [DType];
}

macro_rules! element {
    ($t:ty => $($d:ident),+) => {
        impl Element for $t {
            const DTYPES: &'static [DType] = &[$(DType::$d),+];
        }
    };
}

element!(u8 => UInt8, Bool, Float8E4M3FN, Float8E5M2);
element!(i8 => Int8);
element!(i16 => Int16);
element!(u16 => UInt16);
element!(i32 => Int32);
element!(u32 => UInt32);
element!(i64 => Int64);
element!(u64 => UInt64);
element!(f32 => Float32);
element!(f64 => Float64);
element!(half::f16 => Float16);
element!(half::bf16 => BFloat16);
element!([f32; 2] => Complex64);
element!([f64; 2] => Complex128);

/// Views `data` (of `dtype`) as `&[T]`.
pub(crate) fn cast<'a, T: Element>(dtype: DType, data: &'a [u8], name: &str) -> Result<&'a [T]> {
    if !T::DTYPES.contains(&dtype) {
        return Err(Error::InvalidArgument(format!(
            "tensor {name} is {dtype}, which cannot be viewed as {}",
            std::any::type_name::<T>()
        )));
    }
    if cfg!(target_endian = "big") && std::mem::size_of::<T>() > 1 {
        return Err(Error::Unsupported(
            "typed views of multi-byte elements need a little-endian host; use data()".into(),
        ));
    }
    bytemuck::try_cast_slice(data).map_err(|e| {
        Error::InvalidArgument(format!(
            "tensor {name} cannot be viewed as {} in place ({e:?}); the file's alignment is too small, copy it with data()",
            std::any::type_name::<T>()
        ))
    })
}

/// Encodes a slice of elements as little-endian bytes (for writing).
pub fn to_le_bytes<T: Element>(values: &[T]) -> std::borrow::Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        std::borrow::Cow::Borrowed(bytemuck::cast_slice(values))
    } else {
        // Swap each element's bytes; every Element is a sequence of same-width lanes.
        let lane = match std::mem::size_of::<T>() {
            16 => 8,
            8 if T::DTYPES.contains(&DType::Complex64) => 4,
            n => n,
        };
        let mut out = bytemuck::cast_slice::<T, u8>(values).to_vec();
        for chunk in out.chunks_exact_mut(lane) {
            chunk.reverse();
        }
        std::borrow::Cow::Owned(out)
    }
}
