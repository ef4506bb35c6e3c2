//! An object in an object store (S3 and what speaks its protocol) read by ranges, through the
//! `object_store` crate: each read is one ranged GET, conditional on the ETag the first read
//! saw, so an object replaced while it is read is an error ([`RemoteProblem::Replaced`]),
//! never a mix of two objects' bytes (SPEC.md 8.4).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::stream::{FuturesUnordered, StreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt};

use crate::error::{Error, RemoteProblem, Result};
use crate::remote::range::{check_range, Parallelism, RangeRead, ReadAt, ReadPart, RequestStats};

/// Counts the HTTP attempts of one logical request: put in a request's extensions by
/// [`ObjectRange`], incremented by the client [`crate::remote::resolve`] builds for every attempt it sends
/// (a retry is one more), so that retries made inside `object_store` are counted.
#[derive(Clone, Debug, Default)]
pub(crate) struct Attempts(pub(crate) Arc<AtomicU64>);

impl Attempts {
    /// Attempts sent so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Request extensions carrying this counter.
    pub(crate) fn extensions(&self) -> object_store::Extensions {
        let mut e = object_store::Extensions::new();
        e.insert(self.clone());
        e
    }
}

/// One object of a store, read by ranged GETs.
pub struct ObjectRange {
    store: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    len: u64,
    etag: Option<String>,
    runtime: Arc<tokio::runtime::Runtime>,
    /// The bytes the first read (of the tail) brought, served once to `tail`.
    first: Mutex<Option<Vec<u8>>>,
    requests: AtomicU64,
    bytes: AtomicU64,
    retries: AtomicU64,
}

impl std::fmt::Debug for ObjectRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectRange")
            .field("url", &self.url)
            .field("len", &self.len)
            .field("etag", &self.etag)
            .finish_non_exhaustive()
    }
}

/// The error of a failed request for `url`.
pub(crate) fn remote_error(url: &str, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let problem = match &e {
        E::NotFound { .. } => RemoteProblem::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => RemoteProblem::Denied,
        E::Precondition { .. } => RemoteProblem::Replaced,
        _ => RemoteProblem::Request,
    };
    // The causes' messages too (a timeout says so only there), each once.
    let mut detail = e.to_string();
    let mut cause = std::error::Error::source(&e);
    while let Some(c) = cause {
        let m = c.to_string();
        if !detail.contains(&m) {
            detail.push_str(": ");
            detail.push_str(&m);
        }
        cause = c.source();
    }
    Error::Remote {
        url: url.to_string(),
        problem,
        detail,
    }
}

impl ObjectRange {
    /// Opens the object `path` of `store` (shown as `url`) with one request: a GET of its last
    /// `tail_bytes` bytes, which also gives its length and ETag. Later reads are conditional
    /// on that ETag.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        url: impl Into<String>,
        runtime: Arc<tokio::runtime::Runtime>,
        tail_bytes: u64,
    ) -> Result<ObjectRange> {
        let url = url.into();
        let attempts = Attempts::default();
        let opts = GetOptions {
            range: Some(GetRange::Suffix(tail_bytes.max(1))),
            extensions: attempts.extensions(),
            ..Default::default()
        };
        let (meta, range, data) = runtime
            .block_on(async {
                let r = store.get_opts(&path, opts).await?;
                let (meta, range) = (r.meta.clone(), r.range.clone());
                Ok::<_, object_store::Error>((meta, range, r.bytes().await?))
            })
            .map_err(|e| remote_error(&url, e))?;
        let len = meta.size;
        if range.end != len || data.len() as u64 != range.end - range.start {
            return Err(Error::Remote {
                url,
                problem: RemoteProblem::Truncated,
                detail: format!(
                    "asked for the last {tail_bytes} bytes of {len}, got {} bytes of {}..{}",
                    data.len(),
                    range.start,
                    range.end
                ),
            });
        }
        Ok(ObjectRange {
            store,
            path,
            url,
            len,
            etag: meta.e_tag,
            runtime,
            requests: AtomicU64::new(1),
            bytes: AtomicU64::new(data.len() as u64),
            first: Mutex::new(Some(Vec::from(data))),
            retries: AtomicU64::new(attempts.get().saturating_sub(1)),
        })
    }

    /// Opens the object `path` of `store` (shown as `url`) with one request: a GET of the
    /// bytes `range` (`range.start < range.end`), which also gives the object's length and
    /// ETag. Returns the object and the bytes received: those of `range` that lie within the
    /// object, so fewer than asked when the object ends inside `range` (the first bytes of a
    /// file shorter than the head asked for). A `range` starting at or past the object's end
    /// is [`RemoteProblem::Truncated`], naming the object's length (found with one more
    /// request, a HEAD, on that error path only). Later reads are conditional on the ETag.
    ///
    /// This is how an object is opened where the first bytes needed are not its tail: the
    /// header of a safetensors file, the first tensor read from a TensorFlow data object.
    pub fn open_range(
        store: Arc<dyn ObjectStore>,
        path: ObjectPath,
        url: impl Into<String>,
        runtime: Arc<tokio::runtime::Runtime>,
        range: Range<u64>,
    ) -> Result<(ObjectRange, Vec<u8>)> {
        let url = url.into();
        if range.start >= range.end {
            return Err(Error::InvalidArgument(format!(
                "{url}: an empty range {}..{} opens nothing",
                range.start, range.end
            )));
        }
        let attempts = Attempts::default();
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.clone())),
            extensions: attempts.extensions(),
            ..Default::default()
        };
        let got = runtime.block_on(async {
            let r = store.get_opts(&path, opts).await?;
            let (meta, got) = (r.meta.clone(), r.range.clone());
            Ok::<_, object_store::Error>((meta, got, r.bytes().await?))
        });
        let (meta, got, data) = match got {
            Ok(x) => x,
            Err(
                e @ (object_store::Error::NotFound { .. }
                | object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }),
            ) => return Err(remote_error(&url, e)),
            Err(e) => {
                // A range past the end is refused by the store (416): say how long the object
                // is, when a HEAD can tell.
                let head = runtime.block_on(store.head(&path));
                return Err(match head {
                    Ok(m) if m.size <= range.start => Error::Remote {
                        url,
                        problem: RemoteProblem::Truncated,
                        detail: format!(
                            "bytes {}..{} were asked for, the object has {} bytes",
                            range.start, range.end, m.size
                        ),
                    },
                    _ => remote_error(&url, e),
                });
            }
        };
        let len = meta.size;
        let want_end = range.end.min(len);
        if got.start != range.start
            || got.end != want_end
            || data.len() as u64 != want_end.saturating_sub(range.start)
        {
            return Err(Error::Remote {
                url,
                problem: RemoteProblem::Truncated,
                detail: format!(
                    "asked for bytes {}..{} of {len}, got {} bytes of {}..{}",
                    range.start,
                    range.end,
                    data.len(),
                    got.start,
                    got.end
                ),
            });
        }
        let obj = ObjectRange {
            store,
            path,
            url,
            len,
            etag: meta.e_tag,
            runtime,
            first: Mutex::new(None),
            requests: AtomicU64::new(1),
            bytes: AtomicU64::new(data.len() as u64),
            retries: AtomicU64::new(attempts.get().saturating_sub(1)),
        };
        Ok((obj, data.to_vec()))
    }

    /// The ETag the object had when opened, if the store gives one.
    pub fn etag(&self) -> Option<&str> {
        self.etag.as_deref()
    }

    /// Options of a GET of `range`, conditional on the ETag, counting its attempts.
    fn get_options(&self, range: Range<u64>, attempts: &Attempts) -> GetOptions {
        GetOptions {
            range: Some(GetRange::Bounded(range)),
            if_match: self.etag.clone(),
            extensions: attempts.extensions(),
            ..Default::default()
        }
    }

    /// Counts one request (however often tried) that brought `bytes`.
    fn count(&self, attempts: &Attempts, bytes: u64) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        self.retries
            .fetch_add(attempts.get().saturating_sub(1), Ordering::Relaxed);
    }

    /// The error of an answer of `got` bytes to a GET of `range`.
    fn wrong_length(&self, range: &Range<u64>, got: u64) -> Error {
        let n = range.end - range.start;
        Error::Remote {
            url: self.url.clone(),
            problem: if got < n {
                RemoteProblem::Truncated
            } else {
                RemoteProblem::Request
            },
            detail: format!(
                "bytes {}..{}: got {got} of {n} (the object is {} than when opened?)",
                range.start,
                range.end,
                if got < n { "shorter" } else { "longer" }
            ),
        }
    }

    /// One part of a parallel read: a ranged GET whose body is copied, as it arrives, into
    /// the part's destinations. `k` is given back with the part.
    async fn fetch_part(&self, k: usize, mut part: ReadPart) -> Result<(usize, ReadPart)> {
        let attempts = Attempts::default();
        let range = part.range.clone();
        let mut at = range.start;
        let res = async {
            let r = self
                .store
                .get_opts(&self.path, self.get_options(range.clone(), &attempts))
                .await
                .map_err(|e| remote_error(&self.url, e))?;
            let mut body = r.into_stream();
            while let Some(chunk) = body.next().await {
                let chunk = chunk.map_err(|e| remote_error(&self.url, e))?;
                let end = at
                    .checked_add(chunk.len() as u64)
                    .filter(|&e| e <= range.end);
                let Some(end) = end else {
                    return Err(self.wrong_length(&range, at - range.start + chunk.len() as u64));
                };
                part.scatter(at, &chunk);
                at = end;
            }
            if at != range.end {
                return Err(self.wrong_length(&range, at - range.start));
            }
            Ok(())
        }
        .await;
        self.count(&attempts, at - range.start);
        res.map(|()| (k, part))
    }
}

impl ReadAt for ObjectRange {
    fn len(&self) -> u64 {
        self.len
    }

    fn location(&self) -> &str {
        &self.url
    }

    fn tail(&self, n: u64) -> Result<Vec<u8>> {
        let first = self.first.lock().unwrap_or_else(|p| p.into_inner()).take();
        match first {
            // The open's read, when it covers what is asked.
            Some(t) if t.len() as u64 >= n.min(self.len) => {
                let keep = usize::try_from(n.min(self.len)).expect("no more than held");
                Ok(t[t.len() - keep..].to_vec())
            }
            _ => self.read(self.len.saturating_sub(n)..self.len),
        }
    }

    fn read(&self, range: Range<u64>) -> Result<Vec<u8>> {
        let n = check_range(&range, self.len, &self.url)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let attempts = Attempts::default();
        let opts = self.get_options(range.clone(), &attempts);
        let data = self
            .runtime
            .block_on(async { self.store.get_opts(&self.path, opts).await?.bytes().await });
        self.count(&attempts, data.as_ref().map_or(0, |d| d.len() as u64));
        let data = data.map_err(|e| remote_error(&self.url, e))?;
        // A store answers a range past the end with fewer bytes and no error: an object cut
        // short (or replaced by a shorter one without an ETag) is caught here.
        if data.len() != n {
            return Err(self.wrong_length(&range, data.len() as u64));
        }
        // Without a copy when the body arrived as one buffer.
        Ok(Vec::from(data))
    }
}

impl RangeRead for ObjectRange {
    fn read_parts(
        &self,
        parts: &mut dyn Iterator<Item = ReadPart>,
        how: Parallelism,
        done: &mut dyn FnMut(ReadPart) -> Result<()>,
    ) -> Result<()> {
        let concurrency = how.concurrency.max(1);
        let window = how.window.max(concurrency);
        self.runtime.block_on(async {
            let mut running = FuturesUnordered::new();
            // Issue numbers of the parts started and not finished: the oldest bounds how far
            // ahead new parts may start.
            let mut unfinished = std::collections::BTreeSet::new();
            let mut next = 0usize;
            let mut more = true;
            loop {
                while more && running.len() < concurrency {
                    let oldest = unfinished.first().copied().unwrap_or(next);
                    if next - oldest >= window {
                        break;
                    }
                    match parts.next() {
                        Some(p) => {
                            check_range(&p.range, self.len, &self.url)?;
                            p.check(&self.url)?;
                            unfinished.insert(next);
                            running.push(self.fetch_part(next, p));
                            next += 1;
                        }
                        None => more = false,
                    }
                }
                match running.next().await {
                    Some(r) => {
                        let (k, p) = r?;
                        unfinished.remove(&k);
                        done(p)?;
                    }
                    None => return Ok(()),
                }
            }
        })
    }

    fn stats(&self) -> RequestStats {
        RequestStats {
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            retries: self.retries.load(Ordering::Relaxed),
        }
    }
}
