//! paramdex: a storage engine for named tensors.
#![deny(missing_docs)]

pub mod coding;
pub mod dtype;
pub mod error;
pub mod name;
pub mod proto;

pub use dtype::DType;
pub use error::{Error, Result};
