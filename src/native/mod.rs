//! The native paramdex container (SPEC.md 1-11): a records region of Paddle tensor records,
//! then a LevelDB/TensorFlow table indexing them by name.
//!
//! This layer builds on `record` (the record codec) and `table` (the index codec) and adds what
//! makes the pair a file: the header entry and tensor entries, metadata, the mapped source, the
//! reader and its zero-copy views, verification, the writer (buffered and streaming) and its
//! storage backend, atomic staging of outputs, in-place metadata rewrites and recovery.
//!
//! | module | holds |
//! |---|---|
//! | `header` | [`FileHeader`], the `""` entry |
//! | `entry` | [`IndexEntry`], a tensor's index value (hand codec, no allocation on `get`) |
//! | `meta` | [`Metadata`], [`MetaValue`] and their field-21 codec |
//! | `source` | the bytes a reader reads: a memory map or memory (the crate's one `unsafe`) |
//! | `reader`, `view` | [`Reader`], [`TensorView`], [`Iter`] |
//! | `verify` | [`Reader::verify_with`]: the one verify implementation |
//! | `writer`, `stream`, `backend` | [`Writer`], [`TensorWriter`], [`WriteBackend`] |
//! | `staging` | temporary files beside a target, renamed into place after fsync |
//! | `rewrite` | [`rewrite_in_place`]: new metadata without touching records |
//! | `recover` | rebuilding a file from a torn one, and the policy of what to do |
//! | `slice_key`, `region` | slices: TensorFlow's slice keys, [`Region`] and its arithmetic |
//!
//! Modules of this layer import each other by file (`crate::native::reader::Reader`); layers
//! above import this facade only.
#![cfg_attr(not(test), deny(clippy::cast_possible_truncation))]

mod backend;
mod entry;
mod header;
mod meta;
mod reader;
mod recover;
pub(crate) mod region;
mod rewrite;
pub mod slice_key;
mod source;
pub(crate) mod staging;
mod stream;
mod verify;
mod view;
mod writer;

/// The native format version this build writes and the highest it reads (SPEC.md 11).
/// Version 1 files stay readable by every later version (`tests/compat.rs`).
pub const FORMAT_VERSION: u32 = 1;

/// The `version.producer` written into the header, as TensorFlow's bundle writer does.
pub const TF_BUNDLE_VERSION: i32 = 1;

pub use backend::{EarlySync, WriteBackend};
pub use entry::{Dims, IndexEntry};
pub use header::FileHeader;
pub use meta::{MetaValue, Metadata};
pub use reader::{Iter, ReadOptions, Reader};
pub use recover::{
    last_complete_len, recover, recover_any, scan, FoundRecord, RecoverReport, Recovered,
};
pub use region::Region;
pub use rewrite::{rewrite_in_place, RewriteReport};
pub use source::Source;
pub use stream::TensorWriter;
pub use verify::{VerifyOptions, VerifyReport};
pub use view::TensorView;
pub use writer::{
    FinishStats, Tensor, Writer, WriterOptions, DEFAULT_ALIGNMENT, DEFAULT_BLOCK_SIZE,
};

/// Limits on metadata (SPEC.md 8.1).
pub mod meta_limits {
    pub use super::meta::{MAX_DEPTH, MAX_ENCODED_LEN, MAX_ENTRIES, MAX_KEY_LEN, MAX_VALUES};
}
