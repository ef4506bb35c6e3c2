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

pub mod any;
pub mod coding;
pub mod convert;
pub mod dtype;
pub mod element;
pub mod entry;
pub mod error;
pub mod name;
mod parallel;
pub mod proto;
pub mod reader;
pub mod record;
pub mod recover;
pub mod source;
pub mod table;
pub mod values;
pub mod writer;

pub use any::{open_any, Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorStore};
pub use dtype::DType;
pub use element::Element;
pub use error::{Error, Result};
pub use reader::{ReadOptions, Reader, TensorView, VerifyReport};
pub use record::Lod;
pub use table::Compression;
pub use writer::{FinishStats, Tensor, TensorWriter, Writer, WriterOptions};
