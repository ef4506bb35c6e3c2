//! Where a remote checkpoint is: `s3://bucket/key` (an S3-compatible store, configured by the
//! usual `AWS_*` environment variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ENDPOINT_URL` for a store other than AWS (a plain-HTTP one is allowed
//! unless `AWS_ALLOW_HTTP=false`), then the [`S3Settings`] a program set), or `file:///path`
//! (the local file system through the same interface; [`open_url`] reads one by `pread`).
//!
//! This module is the one place that turns a URL into a store: every reader and writer of
//! objects resolves its URL with [`resolve`], so configuration (endpoint, credentials,
//! retries, timeouts) is decided here once. A program may set [`S3Settings`] over the
//! environment ([`set_s3_settings`]).

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
    /// writers use; `None` for a store without one (the local file system of `file://`, which
    /// writers reach as files).
    pub multipart: Option<Arc<dyn MultipartStore>>,
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

/// How `s3://` URLs reach their store, over the `AWS_*` environment: each field that is set
/// replaces what the environment says; unset fields leave it in force. A program sets these
/// once ([`set_s3_settings`]), before it opens URLs (the `paramdex` command sets them from its
/// command line), and every later [`resolve`] uses them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct S3Settings {
    /// The endpoint (`https://s3.example.com`, `http://127.0.0.1:3900`), instead of AWS's;
    /// environment: `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT`). A plain `http://` endpoint, from
    /// here or the environment, is allowed (it was asked for; unless `allow_http` or
    /// `AWS_ALLOW_HTTP` say otherwise) and reached with path-style requests
    /// (`http://host/bucket/key`), as private deployments (MinIO, Garage, Ceph) expect.
    pub endpoint: Option<String>,
    /// The region (`us-east-1`; Garage's default is `garage`); environment: `AWS_REGION` (or
    /// `AWS_DEFAULT_REGION`).
    pub region: Option<String>,
    /// Whether requests go unsigned, with no credentials (public buckets); environment:
    /// `AWS_SKIP_SIGNATURE=true`.
    pub skip_signature: Option<bool>,
    /// Whether a plain-HTTP endpoint is allowed; environment: `AWS_ALLOW_HTTP=true`. An
    /// `http://` endpoint allows it by itself unless this or `AWS_ALLOW_HTTP` is set.
    pub allow_http: Option<bool>,
}

static SETTINGS: std::sync::RwLock<Option<S3Settings>> = std::sync::RwLock::new(None);

/// Sets the [`S3Settings`] every later [`resolve`] of this process uses.
pub fn set_s3_settings(settings: S3Settings) {
    *SETTINGS.write().unwrap_or_else(|p| p.into_inner()) = Some(settings);
}

/// The [`S3Settings`] in force ([`set_s3_settings`]; none set: the default, the environment
/// alone).
pub fn s3_settings() -> S3Settings {
    SETTINGS
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default()
}

/// Resolves a URL to its store and key, with the [`S3Settings`] in force. No request is made.
///
/// * `s3://bucket/key`: an S3-compatible store, configured from the `AWS_*` environment
///   (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
///   `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_SKIP_SIGNATURE`, and the others
///   `object_store`'s `AmazonS3Builder::from_env` reads), then the settings.
/// * `file:///absolute/path`: the local file system through the same interface (objects are
///   files; ETags come from the file's identity and modification time).
pub fn resolve(url: &str) -> Result<ObjectLocation> {
    resolve_with_settings(url, &s3_settings())
}

/// [`resolve`] with the given settings instead of those in force.
pub fn resolve_with_settings(url: &str, settings: &S3Settings) -> Result<ObjectLocation> {
    if let Some(p) = url.strip_prefix("file://") {
        let path = ObjectPath::from_absolute_path(p).map_err(|e| {
            Error::InvalidArgument(format!(
                "{url}: a file URL names an absolute path (file:///dir/file): {e}"
            ))
        })?;
        return Ok(ObjectLocation {
            store: Arc::new(object_store::local::LocalFileSystem::new()),
            multipart: None,
            path,
            url: url.to_string(),
            runtime: runtime()?,
        });
    }
    let (bucket, key) = split_s3_url(url)?;
    let mut b = AmazonS3Builder::from_env().with_bucket_name(bucket);
    // object_store reads AWS_ENDPOINT; the AWS tools' name is AWS_ENDPOINT_URL.
    let endpoint = settings
        .endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok());
    if let Some(endpoint) = &endpoint {
        b = b.with_endpoint(endpoint);
    }
    if let Some(region) = &settings.region {
        b = b.with_region(region);
    }
    if let Some(skip) = settings.skip_signature {
        b = b.with_skip_signature(skip);
    }
    if let Some(allow) = settings.allow_http {
        b = b.with_allow_http(allow);
    }
    let http_endpoint = endpoint
        .or_else(|| std::env::var("AWS_ENDPOINT").ok())
        .is_some_and(|e| e.starts_with("http://"));
    if http_endpoint {
        // A store on a private network (a test cluster): path-style requests, as virtual-hosted
        // names need DNS for every bucket.
        b = b.with_virtual_hosted_style_request(false);
        // An http:// endpoint was asked for: allowed, unless AWS_ALLOW_HTTP or the settings
        // say otherwise.
        if settings.allow_http.is_none() && std::env::var_os("AWS_ALLOW_HTTP").is_none() {
            b = b.with_allow_http(true);
        }
    }
    let store = b.build().map_err(|e| Error::Remote {
        url: url.to_string(),
        problem: RemoteProblem::Request,
        detail: format!("configuring the S3 client: {e}"),
    })?;
    let store = Arc::new(store);
    Ok(ObjectLocation {
        store: store.clone(),
        multipart: Some(store),
        path: ObjectPath::from(key),
        url: url.to_string(),
        runtime: runtime()?,
    })
}

impl ObjectLocation {
    /// The object whose key (and URL) is this one's followed by `suffix` (`.index`), in the
    /// same store.
    pub fn with_suffix(&self, suffix: &str) -> ObjectLocation {
        ObjectLocation {
            store: self.store.clone(),
            multipart: self.multipart.clone(),
            path: ObjectPath::from(format!("{}{suffix}", self.path.as_ref())),
            url: format!("{}{suffix}", self.url),
            runtime: self.runtime.clone(),
        }
    }

    /// The object whose key (and URL) is this one's without the ending `suffix`, if it ends so
    /// and something is left before it.
    pub fn without_suffix(&self, suffix: &str) -> Option<ObjectLocation> {
        let key = self.path.as_ref().strip_suffix(suffix)?;
        let url = self.url.strip_suffix(suffix)?;
        if key.is_empty() || key.ends_with('/') {
            return None;
        }
        Some(ObjectLocation {
            store: self.store.clone(),
            multipart: self.multipart.clone(),
            path: ObjectPath::from(key),
            url: url.to_string(),
            runtime: self.runtime.clone(),
        })
    }
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
