//! The names most programs need: `use paramdex::prelude::*;`
//!
//! ```
//! use paramdex::prelude::*;
//! # let dir = tempfile::tempdir().unwrap();
//! # let path = dir.path().join("m.pdx");
//! let mut w = Writer::create(&path)?;
//! w.add_values("emb", &[2], &[bf16::from_f32(1.5), bf16::ZERO])?;
//! w.insert_metadata("step", 10i64)?;
//! w.finish()?;
//! let store = open_any(&path)?; // any supported format
//! assert_eq!(store.list()?[0].kind, Kind::Numeric(DType::BFloat16));
//! # Ok::<(), Error>(())
//! ```

pub use crate::dtype::DType;
pub use crate::element::Element;
pub use crate::error::{Error, Result};
pub use crate::interop::{
    open_any, Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorStore,
};
pub use crate::native::{
    MetaValue, Metadata, ReadOptions, Reader, Tensor, TensorView, Writer, WriterOptions,
};
pub use half::{bf16, f16};
