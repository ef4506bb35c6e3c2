//! Checkpoints read by byte ranges (issue 15): the layer between the native engine and the
//! object stores that hold checkpoints past one machine. [`RangeRead`] is one object read by
//! ranges, each read one request ([`FileRange`]: a local file, for tests and `file://`);
//! [`RemoteReader`] reads a native file through it at the cost SPEC.md 8.4 gives (open: the
//! tail, and the header's block; `get`: the tensor's index block unless cached, and its
//! record), checking every tensor's CRC32C.

mod object;
mod range;
mod reader;
mod sharded;
mod sharded_write;
mod upload;
mod url;

pub(crate) use object::remote_error;
pub use object::ObjectRange;
pub use range::{Dest, FileRange, Parallelism, RangeRead, ReadAt, ReadPart, RequestStats};
pub use reader::{
    LoadOptions, LoadProgress, RemoteEntry, RemoteOptions, RemoteReader, RemoteTensor,
};
pub use sharded::{
    data_suffix, object_data_opener, open_sharded, sharded_names, DataOpener, RemoteSharded,
};
pub use sharded_write::{merge_shards_url, RemoteShardWriter};
pub use upload::{
    create_writer, create_writer_with, object_exists, upload_file, ObjectUpload, UploadCounters,
    UploadOptions, UploadStats, DEFAULT_PART_SIZE, DEFAULT_UPLOAD_CONCURRENCY, MAX_PARTS,
    MAX_PART_SIZE, MIN_PART_SIZE,
};
pub use url::{
    is_url, open_url, open_url_with, resolve, resolve_with, s3_settings, set_s3_settings,
    split_s3_url, ObjectLocation, RemoteConfig, S3Settings,
};
