//! Where a remote checkpoint is: `s3://bucket/key` (an S3-compatible store, configured by the
//! usual `AWS_*` environment variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ENDPOINT_URL` for a store other than AWS, `AWS_ALLOW_HTTP=true` for a
//! plain-HTTP endpoint), or `file:///path` (a local file read by ranges, as the remote reader
//! reads an object).

use std::sync::{Arc, OnceLock};

use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;

use crate::error::{Error, Result};
use crate::remote::object::ObjectRange;
use crate::remote::range::{FileRange, RangeRead};

/// Whether `s` names a remote object (`s3://`, `file://`) rather than a local path.
pub fn is_url(s: &str) -> bool {
    s.starts_with("s3://") || s.starts_with("file://")
}

/// The runtime that runs the object store's futures for every blocking call of paramdex.
fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
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

/// Opens the object at `url` for reading by ranges; an `s3://` object is opened with one GET
/// of its last `tail_bytes` bytes (which [`crate::remote::RemoteReader::open`] then uses).
pub fn open_url(url: &str, tail_bytes: u64) -> Result<Arc<dyn RangeRead>> {
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(Arc::new(FileRange::open(path)?));
    }
    let Some(rest) = url.strip_prefix("s3://") else {
        return Err(Error::InvalidArgument(format!(
            "{url}: not a URL paramdex reads (s3://bucket/key, file:///path)"
        )));
    };
    let (bucket, key) = rest
        .split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| {
            Error::InvalidArgument(format!(
                "{url}: an S3 URL names a bucket and a key (s3://bucket/key)"
            ))
        })?;
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
        problem: crate::RemoteProblem::Request,
        detail: format!("configuring the S3 client: {e}"),
    })?;
    Ok(Arc::new(ObjectRange::open(
        Arc::new(store),
        ObjectPath::from(key),
        url,
        runtime()?,
        tail_bytes,
    )?))
}
