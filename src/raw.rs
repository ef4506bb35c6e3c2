//! The byte-level layers, for tests, fuzzers, benchmarks and tools that look inside files.
//!
//! Everything here is documented and public, but it follows the format (SPEC.md), not the
//! stability promise of the root API: a format version may change it.
//!
//! | module | holds |
//! |---|---|
//! | [`mod@format`] | fixed-width integers, varints, CRC32C (masked, combined), a bounds-checked cursor, the protobuf wire format ([`format::pbwire`]) |
//! | [`record`] | Paddle DenseTensor records: decode, encode, walk (SPEC.md 3) |
//! | [`table`] | the LevelDB/TensorFlow table: blocks, footer, builder, reader (SPEC.md 4) |
//! | [`entry`] | the index values of a native file: tensor entries and the header (SPEC.md 5) |
//! | [`slices`] | TensorFlow's slice keys and the region arithmetic of partitioned tensors (SPEC.md 13) |
//! | [`source`] | the mapped bytes a [`crate::Reader`] reads |
//! | [`recovery`] | the record scan behind [`crate::recover`] |
//! | `testing` | fault injection for tests: hard links from a directory refused on a thread (hidden) |
//! | `proto` | the prost types generated from `proto/` (hidden: for cross-checking the hand codecs) |

/// Byte codecs (`src/format/`): see the module docs there.
pub mod format {
    pub use crate::format::*;
}

/// Paddle DenseTensor records (`src/record/`, SPEC.md 3).
pub mod record {
    pub use crate::record::*;
}

/// The LevelDB/TensorFlow table (`src/table/`, SPEC.md 4).
pub mod table {
    pub use crate::table::*;
}

/// The index values of a native file (SPEC.md 5).
pub mod entry {
    pub use crate::native::{
        decode_slices, encode_partitioned, Dims, FileHeader, IndexEntry, TF_BUNDLE_VERSION,
    };
}

/// Slices of partitioned tensors (SPEC.md 13): TensorFlow's slice keys and region arithmetic.
pub mod slices {
    pub use crate::native::region::{contiguous, copy_region, find_overlap, resolve, tile};
    pub use crate::native::slice_key::{self, Extent, SliceKey};
}

/// The bytes a reader reads, and the read seam every reader stands on.
pub mod source {
    pub use crate::native::{FileRange, ReadAt, Source};
}

/// The record scan behind [`crate::recover`].
pub mod recovery {
    pub use crate::native::{scan, FoundRecord};
}

/// Limits on metadata (SPEC.md 8.1).
pub mod meta_limits {
    pub use crate::native::meta_limits::*;
}

/// Fault injection for tests: [`refuse_hard_links_from`](testing::refuse_hard_links_from)
/// makes the calling thread's hard links from a directory fail as they do across file systems,
/// so the copy taken instead runs on any machine.
#[doc(hidden)]
pub mod testing {
    pub use crate::native::staging::{refuse_hard_links_from, RefuseHardLinks};
}

/// Generated protobuf types (`proto/*.proto`), for tests that cross-check the hand codecs.
#[doc(hidden)]
pub mod proto {
    pub use crate::proto::*;
}
