//! Issue 26: Ctrl-C (SIGINT) or SIGTERM during `convert` to `s3://` aborts the multipart upload
//! in flight and says so, instead of leaving it open (a store keeps, and bills, the parts of an
//! upload nobody completes or aborts). The store is a stub on loopback that speaks the part of
//! S3 a multipart upload needs (std only): it creates uploads, takes the first part, holds every
//! later part unanswered (a slow link, so the signal always comes mid-upload), and counts the
//! uploads left open.

#[path = "../../tests/support/http_stub.rs"]
mod http_stub;

use std::collections::HashSet;
use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use paramdex::{DType, Tensor, Writer, WriterOptions};

const BIN: &str = env!("CARGO_BIN_EXE_paramdex");

/// What the stub saw.
#[derive(Default)]
struct Seen {
    open: Mutex<HashSet<String>>,
    created: AtomicUsize,
    held: AtomicUsize,
    aborted: AtomicUsize,
}

/// The stub's answer to `r`: creates uploads, takes part 1, holds every later part
/// unanswered, aborts uploads, and knows no object.
fn serve(r: http_stub::Request, stream: &mut TcpStream, seen: &Seen) {
    let etag = ["ETag: \"e\""];
    match (
        r.method.as_str(),
        r.param("uploadId"),
        r.param("partNumber"),
    ) {
        ("POST", None, _) if r.query.starts_with("uploads") => {
            let n = seen.created.fetch_add(1, Ordering::SeqCst);
            let id = format!("upload-{n}");
            seen.open.lock().unwrap().insert(id.clone());
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult>\
                 <Bucket>b</Bucket><Key>big.pdx</Key><UploadId>{id}</UploadId>\
                 </InitiateMultipartUploadResult>"
            );
            http_stub::respond(stream, "200 OK", &etag, body.as_bytes());
        }
        ("PUT", Some(_), Some(part)) if part == "1" => {
            http_stub::respond(stream, "200 OK", &etag, b"")
        }
        ("PUT", Some(_), Some(_)) => {
            // Held: no answer until the client gives up on it.
            seen.held.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 1];
            let _ = stream.set_read_timeout(Some(Duration::from_secs(120)));
            let _ = stream.read(&mut buf);
        }
        ("DELETE", Some(id), None) => {
            seen.aborted.fetch_add(1, Ordering::SeqCst);
            seen.open.lock().unwrap().remove(&id);
            http_stub::respond(stream, "204 No Content", &etag, b"");
        }
        // HEAD or GET of the object: not there.
        _ => {
            let body: &[u8] = if r.method == "HEAD" {
                b""
            } else {
                b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>\
                  <Message>The specified key does not exist.</Message></Error>"
            };
            http_stub::respond(stream, "404 Not Found", &etag, body);
        }
    }
}

fn start_stub() -> (String, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    let endpoint = http_stub::start(move |r, stream| serve(r, stream, &s));
    (endpoint, seen)
}

/// 4 tensors of 4 MiB: four parts of 5 MiB (the smallest S3 allows).
fn input(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("big.pdx");
    let mut w = Writer::create_with(&p, WriterOptions::default()).unwrap();
    for i in 0..4u8 {
        let data = vec![i | 1; 4 << 20];
        w.add(
            format!("t{i}"),
            Tensor::new(DType::Float32, &[(1 << 20) as u64], &data),
        )
        .unwrap();
    }
    w.finish().unwrap();
    p
}

fn interrupted_convert_aborts_its_upload(signal: &str, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let src = input(dir.path());
    let (endpoint, seen) = start_stub();
    let mut child = Command::new(BIN)
        .args(["--endpoint-url", &endpoint, "--region", "us-east-1"])
        .arg("--no-sign-request")
        .arg("convert")
        .arg(&src)
        .arg("s3://b/big.pdx")
        .env("PARAMDEX_S3_PART_SIZE", "5m")
        .env("PARAMDEX_S3_MAX_RETRIES", "0")
        .env_remove("AWS_PROFILE")
        .env_remove("CLICOLOR_FORCE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.held.load(Ordering::SeqCst) == 0 {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "convert ended ({status}) before its upload was under way: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "no part was ever uploaded");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(seen.open.lock().unwrap().len(), 1);
    let ok = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill runs");
    assert!(ok.success());
    let out = child.wait_with_output().unwrap();
    let se = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{se}");
    assert!(
        se.lines()
            .any(|l| l == "paramdex: interrupted; aborted 1 multipart upload to s3://b/big.pdx"),
        "{se}"
    );
    // The store's count of open uploads is back to 0, by one abort.
    assert!(seen.open.lock().unwrap().is_empty(), "{se}");
    assert_eq!(seen.aborted.load(Ordering::SeqCst), 1, "{se}");
    assert_eq!(seen.created.load(Ordering::SeqCst), 1, "{se}");
}

#[test]
fn sigint_during_convert_to_a_url_aborts_the_multipart_upload() {
    interrupted_convert_aborts_its_upload("INT", 130);
}

#[test]
fn sigterm_during_convert_to_a_url_aborts_the_multipart_upload() {
    interrupted_convert_aborts_its_upload("TERM", 143);
}
