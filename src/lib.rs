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
//! # Embedding paramdex in a training program
//!
//! What a training loop needs is at the crate root: a [`CheckpointManager`] over a directory
//! of step-numbered checkpoints (TensorFlow's `checkpoint` state file and naming, so
//! `tf.train.latest_checkpoint` finds them), its [`ManagerOptions`] ([`Layout`],
//! [`KeepPolicy`], [`WriterOptions`]), and the [`TensorStore`] a restored checkpoint is read
//! through. docs/checkpoints.md has the guarantees (what a crash leaves, what pruning keeps).
//!
//! **Open** a manager (the directory is created if missing; nothing is read yet) and **save**
//! on the training thread, or **in the background**: [`CheckpointManager::save_async`] copies
//! the tensors into buffers it reuses and returns, a thread writes and commits them, and the
//! next call on the manager reports a failure as [`Error::BackgroundSave`].
//!
//! ```
//! use paramdex::{CheckpointManager, DType, KeepPolicy, Layout, ManagerOptions, Metadata, Tensor};
//! # fn main() -> paramdex::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let dir = dir.path();
//! let opts = ManagerOptions {
//!     layout: Layout::Single,
//!     keep: KeepPolicy { last: Some(3), ..Default::default() },
//!     ..Default::default()
//! };
//! let mut m = CheckpointManager::open(dir, opts)?;
//! let weights: Vec<u8> = [0.5f32; 8].iter().flat_map(|x| x.to_le_bytes()).collect();
//! m.save(100, [("w", Tensor::new(DType::Float32, &[2, 4], &weights))], Metadata::new())?;
//! for step in [200, 300] {
//!     let mut meta = Metadata::new();
//!     meta.insert("loss", 0.25f64)?;
//!     let report =
//!         m.save_async(step, [("w", Tensor::new(DType::Float32, &[2, 4], &weights))], meta)?;
//!     assert_eq!(report.bytes, 32);
//! }
//! m.wait()?; // every background save committed (or its error)
//! assert_eq!(m.steps()?, [100, 200, 300]);
//! # Ok(()) }
//! ```
//!
//! **Restore** the latest checkpoint (what a job resuming after a crash calls) and read its
//! tensors through [`TensorStore`], or the native file itself through
//! [`TensorStore::as_native`]; **verify** checks every checksum.
//!
//! ```
//! # use paramdex::{CheckpointManager, DType, ManagerOptions, Metadata, Tensor};
//! use paramdex::{TensorData, TensorStore};
//! # fn main() -> paramdex::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let dir = dir.path();
//! # let mut m = CheckpointManager::open(dir, ManagerOptions::default())?;
//! # let weights: Vec<u8> = [0.5f32; 8].iter().flat_map(|x| x.to_le_bytes()).collect();
//! # m.save(300, [("w", Tensor::new(DType::Float32, &[2, 4], &weights))], Metadata::new())?;
//! let m = CheckpointManager::open(dir, ManagerOptions::default())?;
//! let (step, store) = m.restore_latest()?;
//! assert_eq!(step, 300);
//! let w = store.load(b"w")?.expect("saved above");
//! assert_eq!(w.info.shape, [2, 4]);
//! let TensorData::Bytes(bytes) = &w.data else { unreachable!("a numeric tensor") };
//! assert_eq!(bytes.len(), 32);
//! // Zero-copy, typed: the native file under the store.
//! let r = store.as_native().expect("a native checkpoint");
//! assert_eq!(r.tensor("w")?.as_slice::<f32>()?, &[0.5; 8]);
//! let summary = store.verify(1)?;
//! assert_eq!(summary.tensors, 1);
//! # Ok(()) }
//! ```
//!
//! **Errors** are one [`Error`] enum; decide by its variant and fields, never by the message
//! (which is for people). A file cut short by a crash is [`Error::Corrupt`] with
//! [`Error::corruption`] `Some(`[`Corruption::Truncated`]`)`, and [`Error::recoverable`] says
//! when [`recover`] rebuilds a file from its records; a file of another kind is
//! [`Error::UnrecognizedFormat`]. Typed views fail with [`Error::DTypeMismatch`] or
//! [`Error::Misaligned`], carrying what was wanted and found.
//!
//! ```
//! use paramdex::{Corruption, DType, Error, Reader, Writer};
//! # fn main() -> paramdex::Result<()> {
//! # let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("w.pdx");
//! let mut w = Writer::create(&path)?;
//! w.add_values("w", &[4], &[1i32, 2, 3, 4])?;
//! w.finish()?;
//! match Reader::open(&path)?.tensor("w")?.as_slice::<f32>() {
//!     Err(Error::DTypeMismatch { found, .. }) => assert_eq!(found, DType::Int32),
//!     other => panic!("{other:?}"),
//! }
//! // A crash cut the file short: damage, not a foreign file, and recover applies.
//! let len = std::fs::metadata(&path).unwrap().len();
//! std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 20).unwrap();
//! let e = Reader::open(&path).unwrap_err();
//! assert_eq!(e.corruption(), Some(Corruption::Truncated));
//! assert!(e.recoverable());
//! let report = paramdex::recover(&path, &dir.path().join("w.recovered.pdx"), Default::default())?;
//! assert_eq!(report.recovered, 1);
//! # Ok(()) }
//! ```
//!
//! # The public API
//!
//! * **Embedding** (above): [`CheckpointManager`], [`ManagerOptions`], [`Layout`],
//!   [`KeepPolicy`], [`BestBy`], [`CheckpointInfo`], [`AsyncSaveReport`], [`PruneReport`];
//!   [`TensorStore`] with [`LoadedTensor`], [`TensorData`] and [`VerifySummary`];
//!   [`interop::open_any`] opens any checkpoint paramdex reads.
//! * **Files**: [`Reader`] (open, `get`, scans, [`Reader::verify_with`]), [`TensorView`],
//!   [`Writer`] and [`TensorWriter`] (with [`WriterOptions`], [`ReadOptions`],
//!   [`VerifyOptions`]), [`ShardWriter`] and [`ShardedSave`] (a checkpoint written by several
//!   processes or threads, SPEC.md 12), [`Metadata`], [`recover`], the vocabulary ([`DType`],
//!   [`Element`], [`Lod`], [`name`]) and one [`Error`] (with [`Corruption`], the kind of a
//!   corrupt-file error).
//! * **Advanced**, documented but not needed to embed paramdex: the rest of the root
//!   (in-place rewrites, merges of shards, staging and [`remove_staged`] for programs that stop
//!   on a signal, loading options, slices), [`interop`] (every other format behind
//!   [`TensorStore`], and the writers of every output format), [`remote`] (object storage),
//!   [`place`], [`prelude`], and [`raw`]: the byte-level layers (table, records, codecs) for
//!   tests, fuzzers, benchmarks and tools that inspect files, which follow the format, not
//!   semver.
//!
//! # Features
//!
//! * `s3` (off by default; the `paramdex` command and the Python package turn it on): object
//!   storage. `s3://bucket/key` and `file:///path` URLs wherever inputs and outputs are named
//!   ([`remote`], `interop::open_any`, `interop::export` to an `s3://` URL, checkpoint directories in a
//!   bucket), through object_store's S3 client, tokio, hyper, reqwest and rustls with ring as
//!   its crypto provider (not aws-lc: Cargo.toml says why). Without it paramdex reads and writes
//!   local files only, builds none of those, and refuses a URL with [`Error::NoObjectStorage`].
//! * `regen-proto` (paramdex's own developers): `build.rs` regenerates the protobuf code
//!   checked in under `proto/generated/` from `proto/*.proto`. Without it a dependent compiles
//!   no protobuf compiler.
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
    CheckpointProblem, CompressedProblem, Corruption, Error, LooksLike, PickleProblem,
    RemoteProblem, Result, ShardProblem, SliceProblem,
};
pub use native::{
    abandoned_temporaries, last_complete_len, recover, recover_any, recover_any_with,
    remove_staged, rewrite_in_place, write_atomically, AbandonedTemporary, DataCompression,
    EarlySync, FileHeader, FinishStats, Iter, LoadAdvice, LoadOptions, MergeShardsOptions,
    MergeShardsReport, MergeStep, MetaValue, Metadata, OwnedTensor, PartialTensors, ReadOptions,
    Reader, RecoverOptions, RecoverReport, Recovered, Region, ReuseStats, RewriteReport, SaveId,
    Saved, ShardFile, ShardFileKind, ShardOf, ShardRef, ShardWriter, ShardedSave, SliceData,
    Tensor, TensorView, TensorWriter, VerifyOptions, VerifyReport, WriteBackend, WriteDestination,
    Writer, WriterOptions, DEFAULT_ALIGNMENT, DEFAULT_BLOCK_SIZE, DEFAULT_INDEX_MEMORY,
    FORMAT_VERSION, MAX_SHARDS, MAX_SLICES, MIN_COMPRESSED_LEN,
};
pub use progress::{NoProgress, Progress, Unit};
pub use remote::{clean_shards, create_shard_writer, merge_shards, shard_files};

// What a program embedding paramdex needs to save and restore its checkpoints (the crate
// docs walk through it), at the root beside the engine; `interop` keeps the same items.
pub use interop::{
    AsyncSaveReport, BestBy, CheckpointInfo, CheckpointManager, KeepPolicy, Layout, LoadedTensor,
    ManagerOptions, PruneReport, TensorData, TensorStore, VerifySummary,
};
pub use record::Lod;
pub use table::Compression;
