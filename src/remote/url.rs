//! Where a remote checkpoint is: `s3://bucket/key` (an S3-compatible store, configured by the
//! usual `AWS_*` environment variables: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_REGION`, `AWS_ENDPOINT_URL` for a store other than AWS, `AWS_ALLOW_HTTP=true` for a
//! plain-HTTP endpoint), or `file:///path` (a local file read by ranges, as the remote reader
//! reads an object).
//!
//! This module is the one place that turns a URL into a store: every reader and writer of
//! objects resolves its URL with [`resolve`] (or [`resolve_with`]), so configuration
//! (endpoint, credentials, retries, timeouts) is decided here once, by a [`RemoteConfig`]:
//! its defaults, overridden by the `PARAMDEX_S3_*` environment variables
//! ([`RemoteConfig::from_env`]) or set by the caller; and, over the `AWS_*` environment, by the
//! [`S3Settings`] a program set ([`set_s3_settings`]: the `paramdex` command's endpoint, region
//! and signing options).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::multipart::MultipartStore;
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, RetryConfig};

use crate::error::{Error, RemoteProblem, Result};
use crate::native::ranged::{FileRange, RangeRead, RemoteOptions};
use crate::native::LoadOptions;
use crate::remote::object::{Attempts, ObjectRange};

/// How requests to object stores are made: timeouts, retries, and how many ranged GETs a
/// parallel load keeps in flight and how large each is (docs/remote.md, "Parallel loads,
/// retries and timeouts", says why the defaults are what they are).
///
/// [`RemoteConfig::default`] gives the defaults; [`RemoteConfig::from_env`] reads overrides
/// from the environment:
///
/// | field | variable | default |
/// |---|---|---|
/// | `connect_timeout` | `PARAMDEX_S3_CONNECT_TIMEOUT` (seconds) | 5 s |
/// | `read_timeout` | `PARAMDEX_S3_READ_TIMEOUT` (seconds) | 15 s |
/// | `request_timeout` | `PARAMDEX_S3_REQUEST_TIMEOUT` (seconds) | 120 s |
/// | `max_retries` | `PARAMDEX_S3_MAX_RETRIES` | 5 |
/// | `retry_timeout` | `PARAMDEX_S3_RETRY_TIMEOUT` (seconds) | 300 s |
/// | `concurrency` | `PARAMDEX_S3_CONCURRENCY` | 8 |
/// | `part_size` | `PARAMDEX_S3_PART_SIZE` (bytes; `k`, `m`, `g` suffixes are KiB, MiB, GiB) | 16 MiB |
///
/// Durations are decimal seconds (`2.5`). A variable that is set but does not parse is an
/// error naming it, never silently ignored.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteConfig {
    /// Longest wait for a connection to be established.
    pub connect_timeout: Duration,
    /// Longest wait for any bytes of an answer (headers or body) while a request is under way:
    /// a stalled connection is abandoned (and the request retried) after this long, however
    /// large the answer.
    pub read_timeout: Duration,
    /// Longest time one request may take from connecting to its last byte.
    pub request_timeout: Duration,
    /// How many times a failed request is retried: connection errors, timeouts, 5xx answers,
    /// and an answer whose body breaks off (the rest is asked for again, `If-Match` the same
    /// ETag).
    pub max_retries: usize,
    /// No retry starts later than this after a request's first attempt.
    pub retry_timeout: Duration,
    /// Ranged GETs a parallel load keeps in flight at most.
    pub concurrency: usize,
    /// Bytes each ranged GET of a parallel load asks for (small tensors that lie together
    /// share one; a large tensor is split across several).
    pub part_size: u64,
    /// Settings of the S3 client as `object_store` names them (`endpoint`, `region`,
    /// `access_key_id`, `secret_access_key`, `allow_http`, ...: its `AmazonS3ConfigKey`),
    /// applied after the `AWS_*` environment, so they win over it.
    pub s3_options: Vec<(String, String)>,
}

impl Default for RemoteConfig {
    fn default() -> Self {
        RemoteConfig {
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(15),
            request_timeout: Duration::from_secs(120),
            max_retries: 5,
            retry_timeout: Duration::from_secs(300),
            concurrency: crate::native::DEFAULT_LOAD_CONCURRENCY,
            part_size: crate::native::DEFAULT_LOAD_PART_SIZE,
            s3_options: Vec::new(),
        }
    }
}

fn env_value(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|v| !v.trim().is_empty())
}

fn bad_env(var: &str, value: &str, want: &str) -> Error {
    Error::InvalidArgument(format!(
        "environment variable {var}={value:?}: expected {want}"
    ))
}

/// Decimal seconds (`5`, `2.5`), positive and below a day.
fn parse_seconds(var: &str, v: &str) -> Result<Duration> {
    v.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s < 86_400.0)
        .map(Duration::from_secs_f64)
        .ok_or_else(|| bad_env(var, v, "a positive number of seconds below a day"))
}

/// A count: a non-negative integer (at least `min`).
fn parse_count(var: &str, v: &str, min: usize) -> Result<usize> {
    v.trim()
        .parse::<usize>()
        .ok()
        .filter(|&n| n >= min)
        .ok_or_else(|| bad_env(var, v, &format!("an integer, at least {min}")))
}

/// A byte count: an integer with an optional `k`, `m` or `g` suffix (KiB, MiB, GiB), at least
/// 4 KiB and at most 4 GiB.
pub(crate) fn parse_size(var: &str, v: &str) -> Result<u64> {
    let t = v.trim().to_ascii_lowercase();
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, 'k')) => (&t[..i], 10),
        Some((i, 'm')) => (&t[..i], 20),
        Some((i, 'g')) => (&t[..i], 30),
        _ => (t, 0),
    };
    digits
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|n| (4 << 10..=4 << 30).contains(n))
        .ok_or_else(|| {
            bad_env(
                var,
                v,
                "a byte count from 4k to 4g (an integer, optionally with k, m or g)",
            )
        })
}

impl RemoteConfig {
    /// The defaults, overridden by the `PARAMDEX_S3_*` variables that are set (see the table
    /// above). Errors: [`Error::InvalidArgument`] naming a variable whose value does not parse.
    pub fn from_env() -> Result<RemoteConfig> {
        let mut c = RemoteConfig::default();
        let secs = |var: &str, d: &mut Duration| -> Result<()> {
            if let Some(v) = env_value(var) {
                *d = parse_seconds(var, &v)?;
            }
            Ok(())
        };
        secs("PARAMDEX_S3_CONNECT_TIMEOUT", &mut c.connect_timeout)?;
        secs("PARAMDEX_S3_READ_TIMEOUT", &mut c.read_timeout)?;
        secs("PARAMDEX_S3_REQUEST_TIMEOUT", &mut c.request_timeout)?;
        secs("PARAMDEX_S3_RETRY_TIMEOUT", &mut c.retry_timeout)?;
        if let Some(v) = env_value("PARAMDEX_S3_MAX_RETRIES") {
            c.max_retries = parse_count("PARAMDEX_S3_MAX_RETRIES", &v, 0)?;
        }
        if let Some(v) = env_value("PARAMDEX_S3_CONCURRENCY") {
            c.concurrency = parse_count("PARAMDEX_S3_CONCURRENCY", &v, 1)?.min(1024);
        }
        if let Some(v) = env_value("PARAMDEX_S3_PART_SIZE") {
            c.part_size = parse_size("PARAMDEX_S3_PART_SIZE", &v)?;
        }
        Ok(c)
    }

    /// The `object_store` client settings (timeouts) these settings give.
    fn client_keys(&self) -> [(ClientConfigKey, String); 3] {
        [
            (
                ClientConfigKey::ConnectTimeout,
                secs_text(self.connect_timeout),
            ),
            (ClientConfigKey::ReadTimeout, secs_text(self.read_timeout)),
            (ClientConfigKey::Timeout, secs_text(self.request_timeout)),
        ]
    }

    /// The `object_store` retry policy these settings give.
    fn retry(&self) -> RetryConfig {
        RetryConfig {
            backoff: BackoffConfig {
                init_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_secs(10),
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }
}

/// A duration as `object_store`'s configuration parses it.
fn secs_text(d: Duration) -> String {
    format!("{}ms", d.as_millis().max(1))
}

/// The HTTP client of the stores [`resolve`] builds: reqwest, counting attempts.
#[derive(Debug)]
struct CountingConnector;

#[derive(Debug)]
struct CountingService(HttpClient);

impl HttpConnector for CountingConnector {
    fn connect(&self, options: &ClientOptions) -> object_store::Result<HttpClient> {
        let inner = ReqwestConnector::default().connect(options)?;
        Ok(HttpClient::new(CountingService(inner)))
    }
}

impl HttpService for CountingService {
    fn call<'a, 'b>(
        &'a self,
        req: HttpRequest,
    ) -> Pin<Box<dyn Future<Output = std::result::Result<HttpResponse, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        if let Some(a) = req.extensions().get::<Attempts>() {
            a.0.fetch_add(1, Ordering::Relaxed);
        }
        Box::pin(self.0.execute(req))
    }
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

/// Makes `ring` the process's TLS crypto provider (rustls'), unless one is installed already:
/// the S3 client's TLS is rustls without a built-in provider (Cargo.toml says why), and it
/// refuses to build a client before one is installed. [`resolve`] calls it; a program that
/// builds its own `object_store` S3 client with paramdex's dependency set calls it first.
pub fn install_tls_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err: the program installed a provider of its own, which stays.
        // rustls 0.23.48 deprecates `ring::default_provider` in favour of aws-lc-rs ("no
        // support for post-quantum algorithms"): ring is chosen on purpose (Cargo.toml says
        // why), and the function is the only way to name it, so the warning is not a dependent
        // crate's to see.
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let _ = provider.install_default();
    });
}

/// The object key `key` as it is named (an S3 key, the raw text a listing gives): kept as is
/// (`ObjectPath::parse`), so that a key with non-ASCII characters (`ünï.b`) names that object,
/// not its percent-encoded spelling (which `ObjectPath::from` makes of it). A key that is no
/// valid path (an empty, `.` or `..` segment, a control character) is encoded instead.
pub(crate) fn object_path(key: &str) -> ObjectPath {
    ObjectPath::parse(key).unwrap_or_else(|_| ObjectPath::from(key))
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

/// Resolves a URL to its store and key, with [`RemoteConfig::from_env`] and the
/// [`S3Settings`] in force. No request is made.
///
/// * `s3://bucket/key`: an S3-compatible store, configured from the `AWS_*` environment
///   (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`,
///   `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP`, `AWS_SKIP_SIGNATURE`, and the others
///   `object_store`'s `AmazonS3Builder::from_env` reads), then the configuration's
///   `s3_options`, then the settings.
/// * `file:///absolute/path`: the local file system through the same interface (objects are
///   files; ETags come from the file's identity and modification time).
pub fn resolve(url: &str) -> Result<ObjectLocation> {
    resolve_with(url, &RemoteConfig::from_env()?)
}

/// [`resolve`] with the configuration `config` (endpoint, region and credentials from the
/// `AWS_*` environment unless `config.s3_options` or the [`S3Settings`] in force set them).
/// No request is made.
pub fn resolve_with(url: &str, config: &RemoteConfig) -> Result<ObjectLocation> {
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
    let settings = s3_settings();
    let (bucket, key) = split_s3_url(url)?;
    let configuring = |detail: String| {
        Error::remote(
            url,
            RemoteProblem::Request,
            format!("configuring the S3 client: {detail}"),
        )
    };
    install_tls_provider();
    let mut b = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_retry(config.retry())
        .with_http_connector(CountingConnector);
    // Set one by one, so that the client settings the AWS_* environment gave stay.
    for (k, v) in config.client_keys() {
        b = b.with_config(AmazonS3ConfigKey::Client(k), v);
    }
    // object_store reads AWS_ENDPOINT; the AWS tools' name is AWS_ENDPOINT_URL.
    let mut endpoint = std::env::var("AWS_ENDPOINT_URL")
        .or_else(|_| std::env::var("AWS_ENDPOINT"))
        .ok();
    if let Some(e) = &endpoint {
        b = b.with_endpoint(e);
    }
    for (k, v) in &config.s3_options {
        let key: AmazonS3ConfigKey = k
            .parse()
            .map_err(|e| configuring(format!("setting {k:?}: {e}")))?;
        if key == AmazonS3ConfigKey::Endpoint {
            endpoint = Some(v.clone());
        }
        b = b.with_config(key, v);
    }
    if let Some(e) = &settings.endpoint {
        endpoint = Some(e.clone());
        b = b.with_endpoint(e);
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
    if endpoint.is_some_and(|e| e.starts_with("http://")) {
        // A store on a private network (a test cluster): path-style requests, as virtual-hosted
        // names need DNS for every bucket.
        b = b.with_virtual_hosted_style_request(false);
        // An http:// endpoint was asked for: allowed, unless AWS_ALLOW_HTTP or the settings
        // say otherwise.
        if settings.allow_http.is_none() && std::env::var_os("AWS_ALLOW_HTTP").is_none() {
            b = b.with_allow_http(true);
        }
    }
    let store = Arc::new(b.build().map_err(|e| configuring(e.to_string()))?);
    Ok(ObjectLocation {
        store: store.clone(),
        multipart: Some(store),
        path: object_path(key),
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
            path: object_path(&format!("{}{suffix}", self.path.as_ref())),
            url: format!("{}{suffix}", self.url),
            runtime: self.runtime.clone(),
        }
    }

    /// The object named `name` beside this one: its key (and URL) with the last component
    /// replaced by `name` (Paddle's sibling files: `model.pdiparams` beside `model.json`).
    pub fn sibling(&self, name: &str) -> ObjectLocation {
        let key = self.path.as_ref();
        let dir = key.rfind('/').map_or("", |i| &key[..=i]);
        let url_dir = self.url.rfind('/').map_or("", |i| &self.url[..=i]);
        ObjectLocation {
            store: self.store.clone(),
            multipart: self.multipart.clone(),
            path: object_path(&format!("{dir}{name}")),
            url: format!("{url_dir}{name}"),
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
            path: object_path(key),
            url: url.to_string(),
            runtime: self.runtime.clone(),
        })
    }
}

/// Opens the object at `url` for reading by ranges (the bytes, not a format: `open_any` of
/// `interop` opens a URL as a tensor store); an `s3://` object is opened with one GET of its
/// last `tail_bytes` bytes (which [`crate::Reader::from_range_read`] then uses).
pub fn open_object(url: &str, tail_bytes: u64) -> Result<Arc<dyn RangeRead>> {
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(Arc::new(FileRange::open(path)?));
    }
    open_object_with(url, tail_bytes, &RemoteConfig::from_env()?)
}

/// [`open_object`] with the settings `config` (for an `s3://` URL).
pub fn open_object_with(
    url: &str,
    tail_bytes: u64,
    config: &RemoteConfig,
) -> Result<Arc<dyn RangeRead>> {
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(Arc::new(FileRange::open(path)?));
    }
    let loc = resolve_with(url, config)?;
    Ok(Arc::new(ObjectRange::open(
        loc.store,
        loc.path,
        url,
        loc.runtime,
        tail_bytes,
    )?))
}

impl RemoteOptions {
    /// The defaults, with the parallel-load settings of `config`.
    pub fn with_config(config: &RemoteConfig) -> RemoteOptions {
        RemoteOptions {
            load: LoadOptions::with_config(config),
            ..Default::default()
        }
    }
}

impl LoadOptions {
    /// The parallel-load settings (`concurrency`, `part_size`) of `config`.
    pub fn with_config(config: &RemoteConfig) -> LoadOptions {
        LoadOptions::with_parts(config.concurrency, config.part_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_durations_parse_or_name_the_variable() {
        assert_eq!(parse_size("V", "8m").unwrap(), 8 << 20);
        assert_eq!(parse_size("V", "8MiB").unwrap(), 8 << 20);
        assert_eq!(parse_size("V", " 65536 ").unwrap(), 65536);
        assert_eq!(parse_size("V", "1G").unwrap(), 1 << 30);
        for bad in ["", "m", "-1", "1k5", "100", "5g", "99999999999999999999"] {
            match parse_size("PARAMDEX_S3_PART_SIZE", bad) {
                Err(Error::InvalidArgument(m)) => assert!(m.contains("PARAMDEX_S3_PART_SIZE")),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert_eq!(
            parse_seconds("V", "2.5").unwrap(),
            Duration::from_millis(2500)
        );
        for bad in ["0", "-3", "nan", "inf", "1e9", "x"] {
            assert!(parse_seconds("V", bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_count("V", "0", 0).unwrap(), 0);
        assert!(parse_count("V", "0", 1).is_err());
        assert_eq!(secs_text(Duration::from_millis(1500)), "1500ms");
    }
}
