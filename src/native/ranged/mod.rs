//! A native file, or a sharded checkpoint, read by byte ranges (issue 15; SPEC.md 8.4): the
//! reader that fetches what it needs through [`RangeRead`] instead of mapping the file, so
//! that each read is one request where the bytes are in an object store. It stands on the
//! native engine (the open, the index table over the read seam, the entry checks, LoD, slices,
//! verify's tally) and adds only what fetching needs: the parallel fetch planner, the
//! read-ahead of `get_ahead`, owned tensors.
//!
//! None of it needs a network: [`FileRange`] reads a local file so (`pread`), which is how the
//! ranged path is tested and fuzzed in a build without object storage; `remote::ObjectRange`
//! (the `s3` feature) reads an object in a bucket, with parallel ranged GETs.

mod entry_source;
mod plan;
mod range;
mod reader;
mod sharded;
mod sharded_reuse;

pub(crate) use entry_source::{get_whole_data, locate, locate_slices, DataAt};
pub use range::{Dest, FileRange, Parallelism, RangeRead, ReadAt, ReadPart, RequestStats};
pub(crate) use reader::{entry_info, RangedReader};
pub use reader::{EntryInfo, RemoteOptions, RemoteTensor};
pub use sharded::sharded_names;
pub(crate) use sharded::RangedSharded;
