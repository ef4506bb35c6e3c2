//! Checkpoints read by byte ranges (issue 15): the layer between the native engine and the
//! object stores that hold checkpoints past one machine. [`RangeRead`] is one object read by
//! ranges, each read one request ([`FileRange`]: a local file, for tests and `file://`);
//! [`RemoteReader`] reads a native file through it at the cost SPEC.md 8.4 gives (open: the
//! tail, and the header's block; `get`: the tensor's index block unless cached, and its
//! record), checking every tensor's CRC32C.

mod object;
mod range;
mod reader;
mod url;

pub use object::ObjectRange;
pub use range::{Dest, FileRange, Parallelism, RangeRead, ReadPart, RequestStats};
pub use reader::{
    LoadOptions, LoadProgress, RemoteEntry, RemoteOptions, RemoteReader, RemoteTensor,
};
pub use url::{
    is_url, open_url, open_url_with, resolve, resolve_with, split_s3_url, ObjectLocation,
    RemoteConfig,
};
