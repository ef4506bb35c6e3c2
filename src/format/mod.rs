//! The byte codecs every layer shares: LevelDB fixed-width integers and varints, CRC32C with
//! LevelDB's mask and a fast combine, a bounds-checked cursor, and the protobuf wire format.
//! Pure functions over byte slices, and the read seam's trait ([`ReadAt`]): no I/O, no `unsafe`, no allocation on decode (the Miri
//! target, `fuzz/miri.sh`).
#![cfg_attr(not(test), deny(clippy::cast_possible_truncation))]

mod crc;
mod cursor;
mod fixed;
pub mod pbwire;
mod read_at;
mod varint;

pub use crc::{
    crc32c, crc32c_combine, crc32c_combine_with, crc32c_extend, crc32c_shift, mask_crc, unmask_crc,
};
pub use cursor::Cursor;
pub use fixed::{get_fixed32, get_fixed64, put_fixed32, put_fixed64};
pub(crate) use read_at::check_range;
pub use read_at::ReadAt;
pub use varint::{get_varint32, get_varint64, put_varint32, put_varint64, varint_len};
