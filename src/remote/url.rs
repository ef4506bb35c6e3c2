//! Where a remote checkpoint is: `s3://bucket/key` (an S3-compatible store, configured by the
//! usual `AWS_*` environment variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ENDPOINT_URL` for a store other than AWS, `AWS_ALLOW_HTTP=true` for a
//! plain-HTTP endpoint), or `file:///path` (a local file read by ranges, as the remote reader
//! reads an object).
//!
//! This module is the one place that turns a URL into a store: every reader and writer of
//! objects resolves its URL with [`resolve`], so configuration (endpoint, credentials,
//! retries, timeouts) is decided here once.

use std::sync::{Arc, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use crate::error::{Error, RemoteProblem, Result};
use crate::remote::object::ObjectRange;
use crate::remote::range::{FileRange, RangeRead};

/// Whether `s` names a remote object (`s3://`, `file://`) rather than a local path.
pub fn is_url(s: &str) -> bool {
    s.starts_with("s3://") || s.starts_with("file://")
}

/// The runtime that runs the object store's futures for every blocking call of paramdex.
pub(crate) fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    static RT: OnceLock<Arc<tokio::runtime::Runtime>> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt.clone());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("starting the object-store runtime", e))?;
    Ok(RT.get_or_init(|| Arc::new(rt)).clone())
}

/// An `s3://` URL resolved: the bucket's store, the object's key in it, and the runtime that
/// runs its requests.
#[derive(Clone)]
pub struct ObjectLocation {
    /// The bucket's store.
    pub store: Arc<dyn ObjectStore>,
    /// The same store's multipart-upload interface (parts uploaded in any order), which
    /// writers use.
    pub multipart: Arc<dyn MultipartStore>,
    /// The object's key.
    pub path: ObjectPath,
    /// The URL, for messages.
    pub url: String,
    /// The runtime the blocking API runs requests on.
    pub runtime: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for ObjectLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectLocation")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// Splits `s3://bucket/key` into bucket and key (both non-empty).
pub fn split_s3_url(url: &str) -> Result<(&str, &str)> {
    let Some(rest) = url.strip_prefix("s3://") else {
        return Err(Error::InvalidArgument(format!(
            "{url}: not a URL paramdex reads (s3://bucket/key, file:///path)"
        )));
    };
    rest.split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{url}: an S3 URL names a bucket and a key (s3://bucket/key)"
            ))
        })
}

/// Resolves an `s3://bucket/key` URL to its store (configured from the `AWS_*` environment)
/// and key. No request is made.
pub fn resolve(url: &str) -> Result<ObjectLocation> {
    let (bucket, key) = split_s3_url(url)?;
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    // object_store reads AWS_ENDPOINT; the AWS tools' name is AWS_ENDPOINT_URL.
    if let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") {
        b = b.with_endpoint(endpoint);
    }
    if std::env::var("AWS_ENDPOINT_URL")
        .or_else(|_| std::env::var("AWS_ENDPOINT"))
        .is_ok_and(|e| e.starts_with("http://"))
    {
        // A store on a private network (a test cluster): path-style requests, as virtual-hosted
        // names need DNS for every bucket.
        b = b.with_virtual_hosted_style_request(false);
    }
    let store = b.build().map_err(|e| Error::Remote {
        url: url.to_string(),
        problem: RemoteProblem::Request,
        detail: format!("configuring the S3 client: {e}"),
    })?;
    let store = Arc::new(store);
    Ok(ObjectLocation {
        store: store.clone(),
        multipart: store,
        path: ObjectPath::from(key),
        url: url.to_string(),
        runtime: runtime()?,
    })
}

/// Opens the object at `url` for reading by ranges; an `s3://` object is opened with one GET
/// of its last `tail_bytes` bytes (which [`crate::remote::RemoteReader::open`] then uses).
pub fn open_url(url: &str, tail_bytes: u64) -> Result<Arc<dyn RangeRead>> {
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(Arc::new(FileRange::open(path)?));
    }
    let loc = resolve(url)?;
    Ok(Arc::new(ObjectRange::open(
        loc.store,
        loc.path,
        url,
        loc.runtime,
        tail_bytes,
    )?))
}
