//! A stand-in for an S3 store on loopback, std only: a listener, a thread per connection, each
//! request read (request line, headers, body) and handed to the test's handler, which answers on
//! the stream (or holds it unanswered). Shared by the tests of what paramdex does with a store's
//! answers (`tests/remote_errors.rs`) and with an upload interrupted by a signal
//! (`cli/tests/remote_interrupt.rs`, through `#[path]`). Each uses only some of the request's
//! parts, hence the `allow(dead_code)`.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// One request as the stub read it.
pub struct Request {
    /// `GET`, `PUT`, `POST`, `DELETE`, `HEAD`.
    pub method: String,
    /// The path, `/BUCKET/KEY`, without the query.
    pub path: String,
    /// The query string after `?` (empty without one).
    pub query: String,
    /// The body, as long as its `Content-Length` said.
    pub body: Vec<u8>,
}

impl Request {
    /// The value of query parameter `name`, if given with a value.
    pub fn param(&self, name: &str) -> Option<String> {
        self.query
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_string)
    }
}

/// Writes an answer of `status` (e.g. `404 Not Found`) with `headers` (each `Name: value`) and
/// `body`, and `Connection: close`.
pub fn respond(stream: &mut TcpStream, status: &str, headers: &[&str], body: &[u8]) {
    let mut head = format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\n", body.len());
    for h in headers {
        head.push_str(h);
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(body);
    let _ = stream.flush();
}

/// Reads one request from `stream`; `None` when the client sent nothing.
fn read_request(stream: TcpStream) -> Option<(Request, TcpStream)> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (path, query) = (path.to_string(), query.to_string());
    let mut body_len = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                body_len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; body_len];
    let _ = reader.read_exact(&mut body);
    let request = Request {
        method,
        path,
        query,
        body,
    };
    Some((request, reader.into_inner()))
}

/// Starts the stub on a free loopback port, answering each request with `handler`; returns
/// its endpoint (`http://127.0.0.1:PORT`).
pub fn start(handler: impl Fn(Request, &mut TcpStream) + Send + Sync + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let handler = Arc::new(handler);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let handler = handler.clone();
            std::thread::spawn(move || {
                if let Some((request, mut stream)) = read_request(stream) {
                    handler(request, &mut stream);
                }
            });
        }
    });
    endpoint
}
