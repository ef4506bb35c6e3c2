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
//! | `bytes_value` | the encoding and checksum of bytes values (SPEC.md 6.1) |
//! | `entry` | [`IndexEntry`], a tensor's index value (hand codec, no allocation on `get`) |
//! | `meta` | [`Metadata`], [`MetaValue`] and their field-21 codec |
//! | `source` | the bytes a reader reads: a memory map or memory (the crate's one `unsafe`) |
//! | `read_at` | [`ReadAt`], the one read seam (mapped bytes lent, a file or an object read into a buffer), and [`FileRange`] (`pread`) |
//! | `open` | the one open of a native file's index table (footer, index block, header) over the read seam |
//! | `reader`, `view` | [`Reader`], [`TensorView`], [`Iter`] |
//! | `verify` | [`Reader::verify_with`]: the one verify implementation |
//! | `load` | [`Reader::load_all`], [`Reader::load_many`], [`Reader::load_into`]: parallel copies out of the file, checked as they copy |
//! | `writer`, `stream`, `backend` | [`Writer`], [`TensorWriter`], [`WriteBackend`] |
//! | `spill` | the writer's sorted runs of index entries in a nameless temporary file, merged at `finish` |
//! | `fault` | the file-system seam of a save: where crash-point tests fail its operations (nothing outside tests) |
//! | `staging` | staged outputs: temporaries beside a target (parents created), a registry that [`remove_staged`] empties, commit by rename |
//! | `rewrite` | [`rewrite_in_place`]: new metadata without touching records |
//! | `recover` | rebuilding a file from a torn one, and the policy of what to do |
//! | `slice_key`, `region` | slices: TensorFlow's slice keys, [`Region`] and its arithmetic |
//! | `sharded` | sharded checkpoints (SPEC.md 12): [`ShardWriter`] and [`ShardedSave`] (`writer`), [`merge_shards`](crate::merge_shards) (the commit), [`shard_files`](crate::shard_files) and [`clean_shards`](crate::clean_shards) (`merge`), the lazily checked data files and their verify (`table`, `reader`), incremental reuse (`reuse`, `unchanged`), where the files are ([`Place`]: `place`) |
//! | `ranged` | the native reader over byte ranges ([`RangedReader`](ranged::RangedReader)): a file by `pread`, an object by ranged GETs, through the same open, lookups, checks and verify |
//!
//! Modules of this layer import each other by file (`crate::native::reader::Reader`); layers
//! above import this facade only.
#![cfg_attr(not(test), deny(clippy::cast_possible_truncation))]

mod backend;
pub(crate) mod bytes_value;
mod entry;
pub(crate) mod fault;
mod header;
mod iter;
mod load;
mod mapped;
mod meta;
mod open;
pub(crate) mod ranged;
mod read_at;
mod reader;
mod recover;
pub(crate) mod region;
mod rewrite;
mod sharded;
pub mod slice_key;
mod source;
mod spill;
pub(crate) mod staging;
mod stream;
mod verify;
mod view;
mod writer;

/// The highest native format version this build reads (SPEC.md 11). With its default options a
/// writer writes version 3 (the index layout of SPEC.md 4.2 and 4.5: the kind 1 hash block, the
/// header's block at the end), or 4 (`COMPRESSED_VERSION`) when the file, or a sharded
/// checkpoint's index, holds a compressed record (SPEC.md 3.4). Without version 3's layout
/// (`WriterOptions::index_v3` off, or options that rule it out) and without compressed records,
/// it writes the lowest version that holds what it writes: 1 for a file without slices or shard
/// identity (byte for byte what version 1 wrote), 2 for a file with either and for a sharded
/// checkpoint's index. Every earlier version stays readable (`tests/compat*.rs`). The hash
/// index block of kind 0 and the lone header block first are optional layout within versions
/// 1 and 2, not a version: earlier readers ignore them (`tests/compat_hash.rs`).
pub const FORMAT_VERSION: u32 = 4;

/// The format version of a file holding at least one compressed record (SPEC.md 3.4, 11):
/// readers that predate it refuse the file at open, never misread its records. A file without
/// a compressed record keeps the version it had (1, 2 or 3).
pub const COMPRESSED_VERSION: u32 = 4;

/// Whether this build reads native format version `v`: every version from 1 to
/// [`FORMAT_VERSION`].
pub(crate) const fn is_known_version(v: u32) -> bool {
    v >= 1 && v <= FORMAT_VERSION
}

/// Most slices one partitioned tensor may have (SPEC.md 8.1).
pub const MAX_SLICES: usize = 65_536;

/// Most data files a sharded checkpoint may have (file names number them with at least five
/// digits; the same bound as TensorFlow checkpoints).
pub const MAX_SHARDS: u32 = 100_000;

/// The `version.producer` written into the header, as TensorFlow's bundle writer does.
pub const TF_BUNDLE_VERSION: i32 = 1;

pub(crate) use crate::format::check_range;
pub use crate::format::ReadAt;
pub use backend::{EarlySync, WriteBackend, WriteDestination};
pub use entry::{decode_slices, encode_partitioned, Dims, IndexEntry};
pub use header::{FileHeader, SaveId, ShardOf, ShardRef};
pub use load::{
    LoadOptions, LoadProgress, OwnedTensor, DEFAULT_LOAD_CONCURRENCY, DEFAULT_LOAD_PART_SIZE,
};
pub use sharded::housekeeping::{clean_shards, shard_files, ShardFile, ShardFileKind};
pub use sharded::merge::{
    merge_shards, MergeShardsOptions, MergeShardsReport, MergeStep, PartialTensors,
};
// The engine's insides that the object-storage reader and writer (`remote/`, the `s3` feature)
// share.
pub use iter::Iter;
pub use mapped::ReadOptions;
pub(crate) use mapped::{
    check_data, check_partition, entry_dtype, is_tensor_name, list_entry, piece_entry, plan_region,
    validate_header, Listed, MappedReader, RegionPlan,
};
pub use meta::{MetaValue, Metadata};
pub(crate) use open::{hold_from, open_index, Opened};
pub use read_at::FileRange;
pub use reader::Reader;
pub use recover::{
    last_complete_len, recover, recover_any, recover_any_with, scan, FoundRecord, RecoverOptions,
    RecoverReport, Recovered,
};
pub use region::Region;
pub use rewrite::{rewrite_in_place, RewriteReport};
#[cfg(feature = "s3")]
pub(crate) use sharded::housekeeping::sibling_files;
#[cfg(feature = "s3")]
pub(crate) use sharded::index::{read_shard_index_from, ShardIndex};
#[cfg(feature = "s3")]
pub(crate) use sharded::merge::{plan_index, read_all_references, reused_files, write_index};
pub use sharded::place::{
    data_suffix, parse_suffix, pending_suffix, refs_suffix, reused_suffix, split_data_name,
    Brought, DirPlace, Place, Sibling, INDEX_SUFFIX,
};
pub(crate) use sharded::reader::{check_against_shards, check_shard_identity, check_shard_len};
pub use sharded::reuse::ReuseStats;
pub(crate) use sharded::reuse::{ReuseBase, SliceAt};
pub(crate) use sharded::table::{data_path, index_path};
pub(crate) use sharded::unchanged::same_bytes;
#[cfg(feature = "s3")]
pub(crate) use sharded::writer::check_shard_number;
pub use sharded::writer::{Saved, ShardWriter, ShardedSave};
pub use source::{LoadAdvice, Source};
pub use staging::{abandoned_temporaries, remove_staged, write_atomically, AbandonedTemporary};
pub use stream::TensorWriter;
pub(crate) use verify::check_crcs;
pub(crate) use verify::{slice_keys, Tally};
pub use verify::{VerifyOptions, VerifyReport};
pub(crate) use view::{record_header, view_of_record, SlicePiece, ViewBytes};
pub use view::{SliceData, TensorView};
pub use writer::{
    DataCompression, FinishStats, Tensor, Writer, WriterOptions, DEFAULT_ALIGNMENT,
    DEFAULT_BLOCK_SIZE, DEFAULT_INDEX_MEMORY, MIN_COMPRESSED_LEN,
};

/// Limits on metadata (SPEC.md 8.1).
pub mod meta_limits {
    pub use super::meta::{MAX_DEPTH, MAX_ENCODED_LEN, MAX_ENTRIES, MAX_KEY_LEN, MAX_VALUES};
}
