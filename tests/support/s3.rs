//! object_store clients and helpers for the Garage cluster of `garage.rs`, shared by the
//! object-storage tests (`support::s3` in the root's tests; `#[path]` next to `garage.rs` in
//! `cli/tests/`): a current-thread tokio runtime, S3 clients with Garage's settings (plain HTTP
//! on loopback, path-style requests, the cluster's region, bucket and key), puts and gets that
//! block, and the `AWS_*` environment the library and the CLI resolve `s3://` URLs with.
//!
//! Only std, `object_store` and `tokio` beside `garage.rs` (reached as `super::garage`).

use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use super::garage::Garage;

/// A current-thread tokio runtime with IO and time enabled.
pub fn new_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// [`new_runtime`], shareable (as `ObjectLocation::runtime` wants it).
pub fn runtime() -> Arc<tokio::runtime::Runtime> {
    Arc::new(new_runtime())
}

/// A client builder for `g`'s bucket at `endpoint` (one of its nodes, or a proxy in front of
/// one), signing with `g`'s key id and `secret`: plain HTTP, path-style requests
/// (`http://host:port/bucket/key`; virtual-hosted style would need DNS for
/// `bucket.s3.garage.localhost`) and the region of its config (signatures name it).
pub fn builder(g: &Garage, endpoint: &str, secret: &str) -> AmazonS3Builder {
    // The client's TLS has no built-in crypto provider (paramdex's Cargo.toml).
    paramdex::remote::install_tls_provider();
    AmazonS3Builder::new()
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region(g.region())
        .with_bucket_name(g.bucket())
        .with_access_key_id(g.access_key_id())
        .with_secret_access_key(secret)
}

/// A client of `g`'s first node signing with `secret`; at most 2 retries within 10 s, so a
/// wrong answer fails a test quickly.
pub fn client(g: &Garage, secret: &str) -> AmazonS3 {
    builder(g, g.endpoint(), secret)
        .with_retry(RetryConfig {
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
            ..Default::default()
        })
        .build()
        .unwrap()
}

/// [`client`] with `g`'s own secret, as a trait object.
pub fn store(g: &Garage) -> Arc<dyn ObjectStore> {
    Arc::new(client(g, g.secret_access_key()))
}

/// A client of `endpoint` with `g`'s key and object_store's default retries.
pub fn plain_store(g: &Garage, endpoint: &str) -> Arc<dyn ObjectStore> {
    Arc::new(builder(g, endpoint, g.secret_access_key()).build().unwrap())
}

/// Puts `bytes` at `key` once; panics on any error.
pub fn put(rt: &tokio::runtime::Runtime, s: &dyn ObjectStore, key: &str, bytes: Vec<u8>) {
    rt.block_on(s.put(&ObjectPath::parse(key).unwrap(), PutPayload::from(bytes)))
        .unwrap();
}

/// Puts `payload` at `key`, retrying every `pause` while the cluster is not writable yet (its
/// first writes may come a moment after start); the last error once 60 s have passed.
pub fn put_when_writable(
    rt: &tokio::runtime::Runtime,
    s: &dyn ObjectStore,
    key: &str,
    payload: PutPayload,
    pause: Duration,
) -> Result<(), object_store::Error> {
    let start = Instant::now();
    loop {
        match rt.block_on(s.put(&ObjectPath::parse(key).unwrap(), payload.clone())) {
            Ok(_) => return Ok(()),
            Err(e) if start.elapsed() < Duration::from_secs(60) => {
                eprintln!("garage not writable yet: {e}");
                std::thread::sleep(pause);
            }
            Err(e) => return Err(e),
        }
    }
}

/// Puts `bytes` at `key`, retrying while the cluster is not yet writable.
pub fn put_retried(rt: &tokio::runtime::Runtime, s: &dyn ObjectStore, key: &str, bytes: Vec<u8>) {
    let pause = Duration::from_millis(200);
    put_when_writable(rt, s, key, PutPayload::from(bytes), pause)
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

/// The bytes of the object at `key`; `None` when there is none.
pub fn get(rt: &tokio::runtime::Runtime, s: &dyn ObjectStore, key: &str) -> Option<Vec<u8>> {
    rt.block_on(async {
        match s.get(&ObjectPath::parse(key).unwrap()).await {
            Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("get {key}: {e}"),
        }
    })
}

/// The `AWS_*` environment that reaches `g` with `secret`: key id and secret first, then
/// region, endpoint and `AWS_ALLOW_HTTP`.
pub fn aws_env(g: &Garage, secret: &str) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID", g.access_key_id().to_string()),
        ("AWS_SECRET_ACCESS_KEY", secret.to_string()),
        ("AWS_REGION", g.region().to_string()),
        ("AWS_ENDPOINT_URL", g.endpoint().to_string()),
        ("AWS_ALLOW_HTTP", "true".to_string()),
    ]
}

/// Sets [`aws_env`] with `g`'s own secret in this process (the library's URLs resolve with it).
pub fn set_aws_env(g: &Garage) {
    for (k, v) in aws_env(g, g.secret_access_key()) {
        std::env::set_var(k, v);
    }
}

/// [`set_aws_env`] once for the process, whatever the number of tests calling it.
pub fn set_aws_env_once(g: &Garage) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| set_aws_env(g));
}

/// Sorted names of the objects directly under `dir/` (one level, no common prefixes).
pub fn list_names(rt: &tokio::runtime::Runtime, s: &dyn ObjectStore, dir: &str) -> Vec<String> {
    let l = rt
        .block_on(s.list_with_delimiter(Some(&ObjectPath::parse(dir).unwrap())))
        .unwrap();
    let mut v: Vec<String> = l
        .objects
        .iter()
        .map(|o| o.location.filename().unwrap().to_string())
        .collect();
    v.sort();
    v
}

/// Runs `f` as a test of the shared cluster of `garage.rs` (nothing without one: the test is
/// skipped), with [`set_aws_env_once`] done: the cluster, a runtime and a client of its bucket.
/// The cluster's logs are printed should `f` panic.
pub fn with_bucket(
    test: &str,
    f: impl FnOnce(&'static Garage, Arc<tokio::runtime::Runtime>, Arc<dyn ObjectStore>),
) {
    let Some(g) = super::garage::shared(test) else {
        return;
    };
    set_aws_env_once(g);
    g.run(|| f(g, runtime(), store(g)));
}
