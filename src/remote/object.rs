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
use crate::native::check_range;
use crate::native::ranged::{Parallelism, RangeRead, ReadAt, ReadPart, RequestStats};

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

/// The error of a failed request for `url`: the one place where the store client's errors
/// become [`Error::Remote`]. The kind ([`RemoteProblem`]) comes from `object_store`'s variant,
/// refined by what the answer said ([`Answer`]): the S3 error code tells a missing bucket
/// from a missing object, the status and the retries tell a store that could not answer. The
/// message is one line, without the server's XML; the client's error is kept as the source.
pub(crate) fn remote_error(url: &str, e: object_store::Error) -> Error {
    use object_store::Error as E;
    let answer = Answer::of(&e);
    let problem = match &e {
        E::NotFound { .. } if answer.code.as_deref() == Some("NoSuchBucket") => {
            RemoteProblem::NoSuchBucket
        }
        E::NotFound { .. } => RemoteProblem::NotFound,
        E::PermissionDenied { .. } | E::Unauthenticated { .. } => RemoteProblem::Denied,
        E::Precondition { .. } => RemoteProblem::Replaced,
        _ if answer.unavailable() => RemoteProblem::Unavailable {
            status: answer.status,
            retries: answer.retries,
        },
        _ => RemoteProblem::Request,
    };
    // What the store answered; the client's own words when there was no HTTP answer to
    // describe (a local file system's store, a client misconfigured).
    let said = if answer.status.is_some() || answer.code.is_some() || answer.no_answer.is_some() {
        answer.said()
    } else {
        chain_text(&e)
    };
    let detail = match problem {
        RemoteProblem::NoSuchBucket => format!("no such bucket: {said}"),
        RemoteProblem::NotFound => format!("no such object: {said}"),
        RemoteProblem::Denied => format!("access denied: {said}"),
        RemoteProblem::Replaced => format!("the object changed since it was opened: {said}"),
        RemoteProblem::Unavailable { status: None, .. } if answer.no_answer.is_some() => {
            format!("the store did not answer: {said}")
        }
        RemoteProblem::Unavailable { .. } => format!("the store could not answer: {said}"),
        _ if answer.status.is_some() || answer.code.is_some() => {
            format!("the store refused the request: {said}")
        }
        _ => said,
    };
    Error::Remote {
        url: url.to_string(),
        problem,
        detail,
        source: Some(Box::new(e)),
    }
}

/// An error and its causes' messages, each once (a timeout says so only in a cause).
fn chain_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let m = c.to_string();
        if !text.contains(&m) {
            text.push_str(": ");
            text.push_str(&m);
        }
        cause = c.source();
    }
    // Whatever document a server sent is not for people (its code and message, when it is an
    // S3 error, are in `Answer`).
    for xml in ["<?xml", "<Error"] {
        if let Some(i) = text.find(xml) {
            text.truncate(i);
        }
    }
    one_line(&text, 600)
}

/// `s` with every run of white space (line breaks included) one space, cut to at most `max`
/// characters.
fn one_line(s: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, word) in s.split_whitespace().enumerate() {
        if out.len() + word.len() + 1 > max {
            out.push_str(" ...");
            break;
        }
        if i > 0 {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// What a failed request's answer said, read once from the store client's error. Its
/// structure is what `object_store` exposes: the kind of a failure to connect
/// (`object_store::client::HttpError`); the status, the retries and the server's answer
/// only in the text of its retry error (`Error performing GET http://... in 1.2s, after 5
/// retries, ... - Server returned non-2xx status code: 503 Service Unavailable: <?xml ...`),
/// whose S3 error document (`<Error><Code>NoSuchBucket</Code><Message>...`) is the server's
/// protocol, parsed here.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Answer {
    /// The HTTP status of the last answer, if one came.
    status: Option<u16>,
    /// The S3 error code (`NoSuchBucket`, `NoSuchKey`, `AccessDenied`, `SlowDown`, ...).
    code: Option<String>,
    /// The S3 error message, on one line.
    message: Option<String>,
    /// Retries made before giving up.
    retries: u32,
    /// The request, as `GET http://host/bucket/key`.
    request: Option<String>,
    /// No answer came: why (the innermost cause: `Connection refused (os error 111)`).
    no_answer: Option<String>,
}

impl Answer {
    fn of(e: &object_store::Error) -> Answer {
        use object_store::client::{HttpError, HttpErrorKind};
        let mut a = Answer::default();
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(c) = cause {
            if let Some(h) = c.downcast_ref::<HttpError>() {
                if matches!(
                    h.kind(),
                    HttpErrorKind::Connect
                        | HttpErrorKind::Request
                        | HttpErrorKind::Timeout
                        | HttpErrorKind::Interrupted
                ) {
                    // The innermost cause says it best (`Connection refused`).
                    let mut last: &(dyn std::error::Error + 'static) = h;
                    while let Some(n) = last.source() {
                        last = n;
                    }
                    a.no_answer = Some(one_line(&last.to_string(), 200));
                }
            }
            let text = c.to_string();
            if a.request.is_none() {
                a.request = between(&text, "Error performing ", " in ").map(str::to_string);
            }
            if a.retries == 0 {
                a.retries = between(&text, "after ", " retries")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
            }
            if a.status.is_none() {
                a.status = after(&text, "status code: ")
                    .and_then(|t| t.get(..3))
                    .and_then(|n| n.parse().ok());
            }
            if a.code.is_none() {
                a.code = between(&text, "<Code>", "</Code>").map(|c| one_line(&unescape(c), 64));
            }
            if a.message.is_none() {
                a.message =
                    between(&text, "<Message>", "</Message>").map(|m| one_line(&unescape(m), 200));
            }
            cause = c.source();
        }
        a
    }

    /// Whether the store could not answer: a server error, throttling or a request timeout
    /// (each retried by the client before it gave up), or no answer at all.
    fn unavailable(&self) -> bool {
        // S3 may answer an error inside a 200 (a completion that failed): its code says.
        let busy = matches!(
            self.code.as_deref(),
            Some("InternalError" | "ServiceUnavailable" | "SlowDown")
        );
        busy || match self.status {
            Some(s) => s >= 500 || s == 429 || s == 408,
            None => self.no_answer.is_some(),
        }
    }

    /// The answer in a few words: `HTTP 404 NoSuchKey (The specified key does not exist.)
    /// for GET http://host/bucket/key`; `HTTP 503 SlowDown (...) after 5 retries of GET ...`;
    /// `Connection refused (os error 111) after 5 retries of GET ...`.
    fn said(&self) -> String {
        let mut s = match (self.status, &self.no_answer) {
            (Some(st), _) => format!("HTTP {st}"),
            (None, Some(why)) => why.clone(),
            (None, None) => String::new(),
        };
        if let Some(code) = &self.code {
            if !s.is_empty() {
                s.push(' ');
            }
            s.push_str(code);
        }
        if let Some(m) = &self.message {
            s.push_str(&format!(" ({m})"));
        }
        if self.retries > 0 {
            s.push_str(&format!(
                " after {} {}",
                self.retries,
                if self.retries == 1 {
                    "retry"
                } else {
                    "retries"
                }
            ));
        }
        if let Some(r) = &self.request {
            s.push_str(if self.retries > 0 { " of " } else { " for " });
            s.push_str(r);
        }
        s
    }
}

/// The text of `s` after the first `start`.
fn after<'a>(s: &'a str, start: &str) -> Option<&'a str> {
    s.find(start).map(|i| &s[i + start.len()..])
}

/// The text of `s` between the first `start` and the next `end`.
fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let rest = after(s, start)?;
    rest.find(end).map(|j| &rest[..j])
}

/// XML text with its five predefined entities decoded.
fn unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
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
            return Err(Error::remote(
                url,
                RemoteProblem::Truncated,
                format!(
                    "asked for the last {tail_bytes} bytes of {len}, got {} bytes of {}..{}",
                    data.len(),
                    range.start,
                    range.end
                ),
            ));
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
            Err(e) => {
                let err = remote_error(&url, e);
                // A range past the end is refused by the store (416, a request refused): say
                // how long the object is, when a HEAD can tell.
                if !matches!(
                    err,
                    Error::Remote {
                        problem: RemoteProblem::Request,
                        ..
                    }
                ) {
                    return Err(err);
                }
                let head = runtime.block_on(store.head(&path));
                return Err(match head {
                    Ok(m) if m.size <= range.start => Error::remote(
                        url,
                        RemoteProblem::Truncated,
                        format!(
                            "bytes {}..{} were asked for, the object has {} bytes",
                            range.start, range.end, m.size
                        ),
                    ),
                    _ => err,
                });
            }
        };
        let len = meta.size;
        let want_end = range.end.min(len);
        if got.start != range.start
            || got.end != want_end
            || data.len() as u64 != want_end.saturating_sub(range.start)
        {
            return Err(Error::remote(
                url,
                RemoteProblem::Truncated,
                format!(
                    "asked for bytes {}..{} of {len}, got {} bytes of {}..{}",
                    range.start,
                    range.end,
                    data.len(),
                    got.start,
                    got.end
                ),
            ));
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
        Error::remote(
            self.url.clone(),
            if got < n {
                RemoteProblem::Truncated
            } else {
                RemoteProblem::Request
            },
            format!(
                "bytes {}..{}: got {got} of {n} (the object is {} than when opened?)",
                range.start,
                range.end,
                if got < n { "shorter" } else { "longer" }
            ),
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The text of object_store's retry error, as its `Display` gives it.
    fn retry_text(method_uri: &str, retries: u32, status: &str, body: &str) -> String {
        let mut t = format!("Error performing {method_uri} in 1.2s");
        if retries > 0 {
            t.push_str(&format!(
                ", after {retries} retries, max_retries: {retries}, retry_timeout: 300s "
            ));
        }
        t.push_str(&format!(
            " - Server returned non-2xx status code: {status}: {body}"
        ));
        t
    }

    fn s3_xml(code: &str, message: &str) -> String {
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>{message}</Message><Resource>/b/k</Resource></Error>"
        )
    }

    fn problem_and_detail(e: object_store::Error) -> (RemoteProblem, String) {
        match remote_error("s3://b/k", e) {
            Error::Remote {
                problem,
                detail,
                source,
                ..
            } => {
                let source = source.expect("the client's error is kept");
                assert!(source.downcast_ref::<object_store::Error>().is_some());
                assert!(!detail.contains('<') && !detail.contains('\n'), "{detail}");
                (problem, detail)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_missing_bucket_and_a_missing_object_differ() {
        let get = "GET http://127.0.0.1:3900/b/k";
        let e = object_store::Error::NotFound {
            path: "k".into(),
            source: retry_text(
                get,
                0,
                "404 Not Found",
                &s3_xml("NoSuchBucket", "The specified bucket does not exist"),
            )
            .into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(p, RemoteProblem::NoSuchBucket);
        assert_eq!(
            d,
            format!(
                "no such bucket: HTTP 404 NoSuchBucket (The specified bucket does not exist) \
                 for {get}"
            )
        );
        let e = object_store::Error::NotFound {
            path: "k".into(),
            source: retry_text(
                get,
                0,
                "404 Not Found",
                &s3_xml("NoSuchKey", "Key &amp; gone"),
            )
            .into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(p, RemoteProblem::NotFound);
        assert_eq!(
            d,
            format!("no such object: HTTP 404 NoSuchKey (Key & gone) for {get}")
        );
        // No HTTP answer to describe (a local file system's store): the client's words.
        let e = object_store::Error::NotFound {
            path: "/d/k".into(),
            source: "No such file or directory (os error 2)".into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(p, RemoteProblem::NotFound);
        assert_eq!(
            d,
            "no such object: Object at location /d/k not found: No such file or directory (os \
             error 2)"
        );
        // A HEAD's 404 has no body: a missing object, as far as anyone can tell.
        let e = object_store::Error::NotFound {
            path: "k".into(),
            source: retry_text("HEAD http://h/b/k", 0, "404 Not Found", "").into(),
        };
        assert_eq!(problem_and_detail(e).0, RemoteProblem::NotFound);
    }

    #[test]
    fn refused_credentials_and_an_unavailable_store() {
        let e = object_store::Error::PermissionDenied {
            path: "k".into(),
            source: retry_text(
                "GET http://h/b/k",
                0,
                "403 Forbidden",
                &s3_xml("InvalidAccessKeyId", "No such key:\n GK123"),
            )
            .into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(p, RemoteProblem::Denied);
        assert_eq!(
            d,
            "access denied: HTTP 403 InvalidAccessKeyId (No such key: GK123) for GET http://h/b/k"
        );
        let e = object_store::Error::Generic {
            store: "S3",
            source: retry_text(
                "GET http://h/b/k",
                5,
                "503 Service Unavailable",
                &s3_xml(
                    "ServiceUnavailable",
                    "Could not reach quorum of 2. 1 of 3 request succeeded",
                ),
            )
            .into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(
            p,
            RemoteProblem::Unavailable {
                status: Some(503),
                retries: 5
            }
        );
        assert_eq!(
            d,
            "the store could not answer: HTTP 503 ServiceUnavailable (Could not reach quorum of \
             2. 1 of 3 request succeeded) after 5 retries of GET http://h/b/k"
        );
        // A request the store refuses as invalid is not a store that cannot answer.
        let e = object_store::Error::Generic {
            store: "S3",
            source: retry_text(
                "PUT http://h/b/k",
                0,
                "400 Bad Request",
                &s3_xml(
                    "InvalidPart",
                    "One or more of the specified parts could not be found.",
                ),
            )
            .into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(p, RemoteProblem::Request);
        assert!(
            d.starts_with("the store refused the request: HTTP 400 InvalidPart"),
            "{d}"
        );
        // An error inside a 200 (a completion): its code decides; no XML either way.
        let e = object_store::Error::Generic {
            store: "S3",
            source: format!(
                "Error performing POST http://h/b/k?uploadId=1 in 3s, after 2 retries, \
                 max_retries: 2, retry_timeout: 300s  - Server returned error response: {}",
                s3_xml("InternalError", "We encountered an internal error.")
            )
            .into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(
            p,
            RemoteProblem::Unavailable {
                status: None,
                retries: 2
            }
        );
        assert_eq!(
            d,
            "the store could not answer: InternalError (We encountered an internal error.) \
             after 2 retries of POST http://h/b/k?uploadId=1"
        );
        // No answer at all and no status: the client's own words, causes included.
        let e = object_store::Error::Generic {
            store: "S3",
            source: "some other failure".into(),
        };
        let (p, d) = problem_and_detail(e);
        assert_eq!(p, RemoteProblem::Request);
        assert_eq!(d, "Generic S3 error: some other failure");
    }
}
