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

/// Views `data` (of `dtype`) as `&[T]`: [`Error::DTypeMismatch`] when `T` is not the dtype's
/// element type, [`Error::Misaligned`] when `data` does not start at a multiple of `T`'s
/// alignment.
pub(crate) fn cast<'a, T: Element>(dtype: DType, data: &'a [u8], name: &str) -> Result<&'a [T]> {
    let element = std::any::type_name::<T>();
    if !T::DTYPES.contains(&dtype) {
        return Err(Error::DTypeMismatch {
            tensor: name.to_string(),
            wanted: element,
            wanted_dtypes: T::DTYPES,
            found: dtype,
        });
    }
    if cfg!(target_endian = "big") && std::mem::size_of::<T>() > 1 {
        return Err(Error::Unsupported(
            "typed views of multi-byte elements need a little-endian host; use data()".into(),
        ));
    }
    if data.is_empty() {
        // No element to misplace: an empty tensor views as an empty slice wherever it lies.
        return Ok(&[]);
    }
    let wanted = std::mem::align_of::<T>();
    // The address's alignment, as the largest power of two (up to `wanted`) dividing it.
    let found = 1usize
        << (data.as_ptr() as usize)
            .trailing_zeros()
            .min(wanted.trailing_zeros());
    if found < wanted {
        return Err(Error::Misaligned {
            tensor: name.to_string(),
            element,
            wanted,
            found,
        });
    }
    // Aligned, and the length is a whole number of elements: every dtype's element is
    // `size_of::<T>()` bytes and the data is `numel` of them (checked where the entry is read).
    bytemuck::try_cast_slice(data).map_err(|_| Error::InvalidTensor {
        name: name.to_string(),
        detail: format!(
            "{} bytes of data are not a whole number of {element} elements",
            data.len()
        ),
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
