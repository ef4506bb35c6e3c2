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
//! ([`RemoteConfig::from_env`]) or set by the caller.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::client::{
    HttpClient, HttpConnector, HttpError, HttpRequest, HttpResponse, HttpService, ReqwestConnector,
};
use object_store::path::Path as ObjectPath;
use object_store::{BackoffConfig, ClientConfigKey, ClientOptions, ObjectStore, RetryConfig};

use crate::error::{Error, RemoteProblem, Result};
use crate::remote::object::{Attempts, ObjectRange};
use crate::remote::range::{FileRange, RangeRead};

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
            concurrency: 8,
            part_size: 16 << 20,
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

/// Resolves an `s3://bucket/key` URL to its store (configured from the `AWS_*` environment
/// and [`RemoteConfig::from_env`]) and key. No request is made.
pub fn resolve(url: &str) -> Result<ObjectLocation> {
    resolve_with(url, &RemoteConfig::from_env()?)
}

/// Resolves an `s3://bucket/key` URL with the settings `config` (endpoint, region and
/// credentials from the `AWS_*` environment unless `config.s3_options` sets them). No request
/// is made.
pub fn resolve_with(url: &str, config: &RemoteConfig) -> Result<ObjectLocation> {
    let (bucket, key) = split_s3_url(url)?;
    let configuring = |detail: String| Error::Remote {
        url: url.to_string(),
        problem: RemoteProblem::Request,
        detail: format!("configuring the S3 client: {detail}"),
    };
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
    if endpoint.is_some_and(|e| e.starts_with("http://")) {
        // A store on a private network (a test cluster): path-style requests, as virtual-hosted
        // names need DNS for every bucket.
        b = b.with_virtual_hosted_style_request(false);
    }
    let store = b.build().map_err(|e| configuring(e.to_string()))?;
    Ok(ObjectLocation {
        store: Arc::new(store),
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
    open_url_with(url, tail_bytes, &RemoteConfig::from_env()?)
}

/// [`open_url`] with the settings `config` (for an `s3://` URL).
pub fn open_url_with(
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
