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
#![deny(missing_docs)]
// On-disk integers have a fixed byte order (little-endian, SPEC.md 1): never the host's.
#![deny(clippy::host_endian_bytes)]
// Big-endian bytes appear only where a foreign format defines them (see `tf`).
#![deny(clippy::big_endian_bytes)]
// The modules that parse and write the native format may not narrow an integer with `as`
// (a `u64` from the file to `usize`, a length to `u32`): they use checked conversions
// (`try_from`), so a number from a file can never wrap silently. Unit tests are exempt.

pub mod any;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod coding;
pub mod convert;
pub mod dtype;
pub mod element;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod entry;
pub mod error;
pub mod meta;
pub mod name;
pub mod npy;
pub mod paddle;
mod parallel;
pub mod prelude;
pub mod proto;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod reader;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod record;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod recover;
pub mod safetensors;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod source;
pub mod staging;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod table;
// TensorFlow's ordered-code slice keys and big-endian checkpoints are big-endian by definition.
#[allow(clippy::big_endian_bytes)]
pub mod tf;
pub mod values;
#[cfg_attr(not(test), deny(clippy::cast_possible_truncation))]
pub mod writer;

pub use any::{open_any, Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorStore};
pub use dtype::DType;
pub use element::Element;
pub use error::{Error, Result};
pub use meta::{MetaValue, Metadata};
pub use reader::{ReadOptions, Reader, TensorView, VerifyReport};
pub use record::Lod;
pub use table::Compression;
pub use writer::{
    EarlySync, FinishStats, Tensor, TensorWriter, WriteBackend, Writer, WriterOptions,
};
