//! Issue 26: errors at a URL name what is wrong, as on a disk. A tiny S3 stub on loopback
//! (std only: a listener and a thread per connection) answers as a store does for a missing
//! bucket (404 `NoSuchBucket`), a missing object (404 `NoSuchKey`), refused credentials (403
//! `AccessDenied`) and a store that cannot answer (503 every time); a closed port is a store
//! that does not answer at all. Each is opened through `open_any`, as `paramdex ls URL` does,
//! and must come back as its own `RemoteProblem`, in one line without the server's XML, with
//! the client's error kept as the source.
//!
//! One test in this binary: it sets the process's S3 settings and environment.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

#[path = "support/http_stub.rs"]
mod http_stub;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use paramdex::remote::{set_s3_settings, S3Settings};
use paramdex::{Error, RemoteProblem};

/// The answer to a request for `/BUCKET/KEY...`, by bucket: status, S3 error code, message.
fn answer(path: &str) -> (u16, &'static str, &'static str, &'static str) {
    let bucket = path
        .trim_start_matches('/')
        .split(['/', '?'])
        .next()
        .unwrap_or("");
    match bucket {
        "nobucket" => (
            404,
            "Not Found",
            "NoSuchBucket",
            "The specified bucket does not exist",
        ),
        "denied" => (403, "Forbidden", "AccessDenied", "Access Denied"),
        "down" => (
            503,
            "Service Unavailable",
            "ServiceUnavailable",
            "Could not reach a quorum of nodes & try again",
        ),
        _ => (
            404,
            "Not Found",
            "NoSuchKey",
            "The specified key does not exist.",
        ),
    }
}

/// Starts the stub: each request answered by [`answer`]; its endpoint and its request count.
fn start_stub() -> (String, Arc<AtomicUsize>) {
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let endpoint = http_stub::start(move |r, stream| {
        counted.fetch_add(1, Ordering::SeqCst);
        let (status, reason, code, message) = answer(&r.path);
        let xml = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\n  <Code>{code}</Code>\n  \
             <Message>{}</Message>\n  <Resource>{}</Resource>\n  <RequestId>4442587FB7D0A2F9</RequestId>\n</Error>\n",
            message.replace('&', "&amp;"),
            r.path
        );
        // A HEAD answer has no body.
        let body = if r.method == "HEAD" {
            &[][..]
        } else {
            xml.as_bytes()
        };
        let headers = ["Content-Type: application/xml"];
        http_stub::respond(stream, &format!("{status} {reason}"), &headers, body);
    });
    (endpoint, requests)
}

fn settings(endpoint: &str) -> S3Settings {
    S3Settings {
        endpoint: Some(endpoint.to_string()),
        region: Some("us-east-1".into()),
        skip_signature: Some(true),
        allow_http: Some(true),
    }
}

/// Opens `url` as `paramdex ls` does; its error, which must be an `Error::Remote` for `url`
/// in one line without XML, its source the client's `object_store::Error`.
fn open_error(url: &str) -> (RemoteProblem, String) {
    let e = match paramdex::interop::open_any(url) {
        Ok(_) => panic!("{url} opened"),
        Err(e) => e,
    };
    let text = e.to_string();
    let problem = match &e {
        Error::Remote {
            problem, url: u, ..
        } => {
            assert_eq!(u, url, "{e:?}");
            *problem
        }
        other => panic!("{url}: {other:?}"),
    };
    assert!(!text.contains('\n'), "{text}");
    assert!(!text.contains('<'), "no XML: {text}");
    assert!(text.starts_with(url), "{text}");
    let source = std::error::Error::source(&e).expect("the client's error is kept");
    assert!(
        source.downcast_ref::<object_store::Error>().is_some(),
        "{source:?}"
    );
    (problem, text)
}

#[test]
fn each_store_answer_is_its_own_error() {
    // Two retries, quickly: the 503s are retried, the 4xx answers are not.
    std::env::set_var("PARAMDEX_S3_MAX_RETRIES", "2");
    std::env::set_var("PARAMDEX_S3_RETRY_TIMEOUT", "30");
    let (endpoint, requests) = start_stub();
    set_s3_settings(settings(&endpoint));

    let (p, text) = open_error("s3://nobucket/m.pdx");
    assert_eq!(p, RemoteProblem::NoSuchBucket, "{text}");
    assert!(text.contains("no such bucket"), "{text}");
    assert!(text.contains("NoSuchBucket"), "{text}");

    let (p, text) = open_error("s3://b/m.pdx");
    assert_eq!(p, RemoteProblem::NotFound, "{text}");
    assert!(text.contains("no such object"), "{text}");

    // Opened as an object alone, the answer is in the message.
    match paramdex::remote::open_object("s3://b/m.pdx", 4096) {
        Err(Error::Remote {
            problem: RemoteProblem::NotFound,
            detail,
            ..
        }) => assert!(
            detail.starts_with(
                "no such object: HTTP 404 NoSuchKey (The specified key does not exist.) for GET"
            ),
            "{detail}"
        ),
        other => panic!("{other:?}"),
    }

    let (p, text) = open_error("s3://denied/m.pdx");
    assert_eq!(p, RemoteProblem::Denied, "{text}");
    assert!(text.contains("access denied"), "{text}");
    assert!(
        text.contains("HTTP 403 AccessDenied (Access Denied)"),
        "{text}"
    );

    let before = requests.load(Ordering::SeqCst);
    let (p, text) = open_error("s3://down/m.pdx");
    assert_eq!(
        p,
        RemoteProblem::Unavailable {
            status: Some(503),
            retries: 2
        },
        "{text}"
    );
    assert_eq!(
        requests.load(Ordering::SeqCst) - before,
        3,
        "one try, two retries"
    );
    assert!(
        text.contains(&format!(
            "the store could not answer: HTTP 503 ServiceUnavailable (Could not reach a quorum \
             of nodes & try again) after 2 retries of GET {endpoint}/down/m.pdx"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("GET {endpoint}/down/m.pdx")),
        "{text}"
    );

    // A store that does not answer at all (nothing listens on the port).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    set_s3_settings(settings(&closed));
    let (p, text) = open_error("s3://b/m.pdx");
    assert_eq!(
        p,
        RemoteProblem::Unavailable {
            status: None,
            retries: 2
        },
        "{text}"
    );
    assert!(
        text.contains("the store did not answer: Connection refused"),
        "{text}"
    );
    assert!(text.contains("after 2 retries of GET"), "{text}");
}
