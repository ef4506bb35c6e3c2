//! Checkpoints read by byte ranges (issue 15): the layer between the native engine and the
//! object stores that hold checkpoints past one machine.
//!
//! [`RangeRead`] is one file read by ranges, each read one request; [`crate::Reader::from_range_read`]
//! reads a native file through it at the cost SPEC.md 8.4 gives (open: the tail, and the
//! header's block; `get`: the tensor's index block unless cached, and its record), checking
//! every tensor's CRC32C, and [`crate::Reader::from_place`] a sharded checkpoint. The seam
//! is the native engine's (`native::ranged`), re-exported here and built with or without object
//! storage: [`FileRange`] reads a local file so (`pread`).
//!
//! The rest (objects in buckets: `ObjectRange`, uploads, URLs, the bucket
//! place) is built with the `s3` cargo feature (off by default), which brings object_store and
//! its S3 client. Without it, paramdex reads and writes local files only: [`is_url`] still
//! tells a URL from a path, and the entry points that take URLs (`interop::open_any`,
//! `interop::CheckpointManager::open`, `interop::merge`) refuse one with
//! [`Error::NoObjectStorage`](crate::Error::NoObjectStorage) instead of taking it for a path.

#[cfg(feature = "s3")]
mod object;
#[cfg(feature = "s3")]
mod place;
#[cfg(feature = "s3")]
mod sharded_open;
#[cfg(feature = "s3")]
mod sharded_write;
mod shards;
#[cfg(feature = "s3")]
mod upload;
#[cfg(feature = "s3")]
mod url;

#[cfg(feature = "s3")]
pub(crate) use object::remote_error;
#[cfg(feature = "s3")]
pub use object::ObjectRange;
#[cfg(feature = "s3")]
pub use place::BucketPlace;
// The ranged reader is the native engine's (`native::ranged`, built with or without the `s3`
// feature); re-exported here, where readers of objects have always found it.
pub use crate::native::ranged::{
    sharded_names, Dest, EntryInfo, FileRange, Parallelism, RangeRead, ReadAt, ReadPart,
    RemoteOptions, RemoteTensor, RequestStats,
};
pub use crate::native::{
    LoadOptions, LoadProgress, DEFAULT_LOAD_CONCURRENCY, DEFAULT_LOAD_PART_SIZE,
};
#[cfg(feature = "s3")]
pub use sharded_open::open_sharded;
#[cfg(feature = "s3")]
pub(crate) use sharded_write::merge_shards_url;
pub use shards::{clean_shards, create_shard_writer, merge_shards, shard_files};
#[cfg(feature = "s3")]
pub use upload::{
    abort_uploads_in_flight, create_writer, create_writer_with, object_exists, upload_file,
    AbortOutcome, AbortedUpload, ObjectUpload, UploadCounters, UploadOptions, UploadStats,
    DEFAULT_PART_SIZE, DEFAULT_UPLOAD_CONCURRENCY, MAX_PARTS, MAX_PART_SIZE, MIN_PART_SIZE,
};
#[cfg(feature = "s3")]
pub(crate) use url::object_path;
#[cfg(feature = "s3")]
pub use url::{
    install_tls_provider, open_object, open_object_with, resolve, resolve_with, s3_settings,
    set_s3_settings, split_s3_url, ObjectLocation, RemoteConfig, S3Settings,
};

/// Whether `s` names a remote object (`s3://`, `file://`) rather than a local path. Pure
/// string logic, there with or without the `s3` feature, so that a URL is always recognised
/// (and, without the feature, refused as one).
pub fn is_url(s: &str) -> bool {
    s.starts_with("s3://") || s.starts_with("file://")
}

/// The URL a path-or-URL argument names ([`is_url`]), when it is one rather than a path: the
/// one test every entry point that takes either makes.
pub(crate) fn url_of(p: &std::path::Path) -> Option<&str> {
    p.to_str().filter(|s| is_url(s))
}

/// Without the `s3` feature there are no uploads: this type has no values, so an export's
/// `upload` (`Option<(&str, &UploadOptions)>`) is always `None`, and the code that would
/// upload is statically unreachable instead of compiled out line by line.
#[cfg(not(feature = "s3"))]
#[derive(Debug)]
pub(crate) enum UploadOptions {}

/// The error for `url` in a paramdex built without the `s3` feature.
#[cfg(not(feature = "s3"))]
pub(crate) fn not_built(url: &str) -> crate::Error {
    crate::Error::NoObjectStorage {
        url: url.to_string(),
    }
}
