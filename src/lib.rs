//! paramdex: a storage engine for named tensors.
//!
//! A paramdex file holds tensor records in PaddlePaddle's own serialization, followed by a
//! sorted index in the LevelDB table format that TensorFlow uses for checkpoint `.index` files.
//! [`Reader`] maps a file and finds a tensor by name with two binary searches, returning a
//! zero-copy [`TensorView`]; [`Writer`] builds one, atomically. SPEC.md is the normative format.
//!
//! ```
//! use paramdex::{DType, Reader, Tensor, Writer};
//! # fn main() -> paramdex::Result<()> {
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("model.pdx");
//! let mut w = Writer::create(&path)?;
//! let bias: Vec<u8> = [1.0f32, 2.0, 3.0].iter().flat_map(|x| x.to_le_bytes()).collect();
//! w.add("layer0.bias", Tensor::new(DType::Float32, &[3], &bias))?;
//! w.finish()?;
//!
//! let r = Reader::open(&path)?;
//! let t = r.tensor("layer0.bias")?;
//! assert_eq!(t.shape(), &[3]);
//! assert_eq!(t.as_slice::<f32>()?, &[1.0, 2.0, 3.0]);
//! r.verify()?;
//! # Ok(()) }
//! ```
//!
//! # The public API
//!
//! * At the root, the engine: [`Reader`] (open, `get`, scans, [`Reader::verify_with`]),
//!   [`TensorView`], [`Writer`] and [`TensorWriter`], [`Metadata`], [`rewrite_in_place`],
//!   [`recover_any`], [`write_atomically`], [`remove_staged`] (for programs that stop on a
//!   signal: every output being written is staged and can be removed), the vocabulary ([`DType`], [`Element`], [`Lod`], [`name`]) and one
//!   [`Error`] (with [`Corruption`], the kind of a corrupt-file error).
//! * [`interop`]: every other format behind one [`interop::TensorStore`] trait, detected by
//!   [`interop::open_any`], and the writers of every output format.
//! * [`raw`]: the byte-level layers (table, records, codecs) for tests, fuzzers, benchmarks and
//!   tools that inspect files. Documented and public, but it follows the format, not semver.
//!
//! # Features
//!
//! * `s3` (on by default): object storage. `s3://bucket/key` and `file:///path` URLs wherever
//!   inputs and outputs are named ([`remote`], `interop::open_url`, `interop::export_url`,
//!   checkpoint directories in a bucket), through object_store's S3 client, tokio, hyper,
//!   reqwest, rustls and aws-lc. With `default-features = false` paramdex reads and writes local
//!   files only, builds none of those, and refuses a URL with [`Error::NoObjectStorage`].
//!
//! # Layers
//!
//! `vocabulary → format → record, table → native → interop`, and the `paramdex` CLI (its own
//! crate) on top; no module imports a layer to its right (`tests/layers.rs` checks it).
//! `docs/architecture.md` has the map.
#![deny(missing_docs)]
// `unsafe` lives in one place (the memory map in `native/source.rs`), where it is allowed.
#![deny(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]
// On-disk integers have a fixed byte order (little-endian, SPEC.md 1): never the host's.
#![deny(clippy::host_endian_bytes)]
// Big-endian bytes appear only where a foreign format defines them (see `interop::tf`).
#![deny(clippy::big_endian_bytes)]

// Vocabulary: the words every layer uses.
mod dtype;
mod element;
mod error;
pub mod name;
mod parallel;
mod progress;
mod proto;

// Byte codecs, then the two codecs built on them (records, index table).
mod format;
mod record;
mod table;

// The native container engine.
mod native;

// Checkpoints read by byte ranges (object storage), above the engine.
pub mod remote;

// Other formats, above the engine.
pub mod interop;

pub mod prelude;
pub mod raw;

pub use dtype::{DType, Packing};
pub use element::Element;
/// Where a checkpoint's sibling files are (a directory, or a bucket prefix with the `s3`
/// feature: `remote::BucketPlace`) and how each is named: one formatter and one parser per
/// name convention of a sharded checkpoint (SPEC.md 12).
pub mod place {
    pub use crate::native::{
        data_suffix, parse_suffix, pending_suffix, refs_suffix, reused_suffix, split_data_name,
        Brought, DirPlace, Place, Sibling, INDEX_SUFFIX,
    };
}

pub use error::{
    CheckpointProblem, Corruption, Error, LooksLike, PickleProblem, RemoteProblem, Result,
    ShardProblem, SliceProblem,
};
pub use native::{
    abandoned_temporaries, clean_shards, last_complete_len, merge_shards, recover, recover_any,
    recover_any_with, remove_staged, rewrite_in_place, shard_files, write_atomically,
    AbandonedTemporary, EarlySync, FileHeader, FinishStats, Iter, LoadAdvice, LoadOptions,
    MergeShardsOptions, MergeShardsReport, MergeStep, MetaValue, Metadata, OwnedTensor,
    PartialTensors, ReadOptions, Reader, RecoverOptions, RecoverReport, Recovered, Region,
    ReuseStats, RewriteReport, SaveId, Saved, ShardFile, ShardFileKind, ShardOf, ShardRef,
    ShardWriter, ShardedSave, SliceData, Tensor, TensorView, TensorWriter, VerifyOptions,
    VerifyReport, WriteBackend, WriteDestination, Writer, WriterOptions, DEFAULT_ALIGNMENT,
    DEFAULT_BLOCK_SIZE, DEFAULT_INDEX_MEMORY, FORMAT_VERSION, MAX_SHARDS, MAX_SLICES,
};
pub use progress::{NoProgress, Progress, Unit};
pub use record::Lod;
pub use table::Compression;
