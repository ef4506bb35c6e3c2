//! A fault-injecting TCP proxy for the object-storage tests (issue 15): it forwards every
//! connection to an HTTP endpoint (a Garage node) and, for chosen responses, breaks them off
//! after some bytes of body (the connection is closed) or stalls them (nothing more is sent, the
//! connection stays open). Responses are numbered from 1 in the order their status lines come
//! back from the endpoint, over every connection of the proxy.
//!
//! Responses are framed by `Content-Length` (what Garage sends for object GETs); a response
//! without it (chunked) ends the framing of its connection, which is then forwarded as is.
//! Only std: threads and blocking sockets. Include it with
//! `#[path = "support/fault_proxy.rs"] mod fault_proxy;`.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// What happens to a faulted response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Forward the headers and this many bytes of body, then close the connection.
    Cut { after: usize },
    /// Forward the headers (unless `after` is `None`: not even those) and this many bytes of
    /// body, then send nothing more until the client gives up.
    Stall { after: Option<usize> },
}

/// Which responses are faulted, and how.
#[derive(Clone, Copy, Debug)]
pub struct Fault {
    pub kind: FaultKind,
    /// The number (from 1) of the first response faulted.
    pub first: usize,
    /// How many responses from `first` on are faulted (`usize::MAX`: all).
    pub count: usize,
}

impl Fault {
    fn hits(&self, n: usize) -> bool {
        n >= self.first && n - self.first < self.count
    }
}

/// A running proxy; dropping it stops accepting (open connections end with their clients).
pub struct FaultProxy {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    responses: Arc<AtomicUsize>,
    faulted: Arc<AtomicUsize>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards to `upstream` (`http://host:port`).
    pub fn start(upstream: &str, fault: Option<Fault>) -> FaultProxy {
        let up: SocketAddr = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .unwrap_or_else(|e| panic!("proxy upstream {upstream}: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let addr = listener.local_addr().expect("proxy address");
        let stop = Arc::new(AtomicBool::new(false));
        let responses = Arc::new(AtomicUsize::new(0));
        let faulted = Arc::new(AtomicUsize::new(0));
        let (s, r, f) = (stop.clone(), responses.clone(), faulted.clone());
        thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let (s, r, f) = (s.clone(), r.clone(), f.clone());
                        thread::spawn(move || serve(client, up, fault, s, r, f));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FaultProxy {
            addr,
            stop,
            responses,
            faulted,
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Responses whose status line came back so far.
    pub fn responses(&self) -> usize {
        self.responses.load(Ordering::Relaxed)
    }

    /// Responses cut or stalled so far.
    pub fn faulted(&self) -> usize {
        self.faulted.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(
    client: TcpStream,
    up: SocketAddr,
    fault: Option<Fault>,
    stop: Arc<AtomicBool>,
    responses: Arc<AtomicUsize>,
    faulted: Arc<AtomicUsize>,
) {
    let Ok(upstream) = TcpStream::connect(up) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = upstream.set_nodelay(true);
    let _ = client.set_nodelay(true);
    // Requests: copied as they come.
    let (mut c_in, mut u_out) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match c_in.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if u_out.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = u_out.shutdown(Shutdown::Write);
    });
    responses_loop(client, upstream, fault, stop, responses, faulted);
}

/// Where the parser is in the response stream of one connection.
enum State {
    /// Reading a status line and headers (bytes so far).
    Head(Vec<u8>),
    /// Forwarding a body: bytes left, bytes forwarded, and whether this response is faulted.
    Body { left: u64, sent: usize, fault: bool },
    /// No framing (no Content-Length): forward everything.
    Raw,
}

fn content_length(head: &[u8]) -> Option<u64> {
    let text = String::from_utf8_lossy(head);
    let status: u16 = text.split_whitespace().nth(1)?.parse().ok()?;
    if status < 200 || status == 204 || status == 304 {
        return Some(0);
    }
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("content-length")
            .then(|| v.trim().parse().ok())
            .flatten()
    })
}

fn responses_loop(
    mut client: TcpStream,
    mut upstream: TcpStream,
    fault: Option<Fault>,
    stop: Arc<AtomicBool>,
    responses: Arc<AtomicUsize>,
    faulted: Arc<AtomicUsize>,
) {
    let mut state = State::Head(Vec::new());
    let mut buf = vec![0u8; 64 << 10];
    // Sends nothing more until the client goes (or two minutes, or the proxy stops).
    let stall = |client: &TcpStream| {
        let t = Instant::now();
        let _ = client.set_read_timeout(Some(Duration::from_millis(100)));
        let probe = client.try_clone().expect("clone");
        let mut one = [0u8; 1];
        while t.elapsed() < Duration::from_secs(120) && !stop.load(Ordering::Relaxed) {
            match probe.peek(&mut one) {
                Ok(0) => break,
                Err(e)
                    if e.kind() == std::io::ErrorKind::WouldBlock
                        || e.kind() == std::io::ErrorKind::TimedOut =>
                {
                    continue
                }
                Err(_) => break,
                // The client sent more (another request on this connection): keep stalling.
                Ok(_) => thread::sleep(Duration::from_millis(100)),
            }
        }
        let _ = client.shutdown(Shutdown::Both);
    };
    loop {
        let n = match upstream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut data = &buf[..n];
        while !data.is_empty() {
            match &mut state {
                State::Raw => {
                    if client.write_all(data).is_err() {
                        return;
                    }
                    data = &[];
                }
                State::Head(head) => {
                    let before = head.len();
                    head.extend_from_slice(data);
                    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                        data = &[];
                        continue;
                    };
                    let end = end + 4;
                    let used = end - before;
                    data = &data[used..];
                    let head = std::mem::take(head);
                    let head = &head[..end];
                    let number = responses.fetch_add(1, Ordering::Relaxed) + 1;
                    let hit = fault.filter(|f| f.hits(number));
                    if let Some(f) = hit {
                        faulted.fetch_add(1, Ordering::Relaxed);
                        if f.kind == (FaultKind::Stall { after: None }) {
                            stall(&client);
                            let _ = upstream.shutdown(Shutdown::Both);
                            return;
                        }
                    }
                    if client.write_all(head).is_err() {
                        return;
                    }
                    state = match content_length(head) {
                        Some(0) => State::Head(Vec::new()),
                        Some(left) => State::Body {
                            left,
                            sent: 0,
                            fault: hit.is_some(),
                        },
                        None => State::Raw,
                    };
                }
                State::Body {
                    left,
                    sent,
                    fault: f,
                } => {
                    let take = (*left).min(data.len() as u64) as usize;
                    let mut chunk = &data[..take];
                    let limit = match (*f, fault.map(|f| f.kind)) {
                        (true, Some(FaultKind::Cut { after })) => Some(after),
                        (true, Some(FaultKind::Stall { after: Some(after) })) => Some(after),
                        _ => None,
                    };
                    if let Some(limit) = limit {
                        if *sent + chunk.len() >= limit {
                            chunk = &chunk[..limit - *sent];
                            let _ = client.write_all(chunk);
                            let _ = client.flush();
                            if let Some(FaultKind::Stall { .. }) = fault.map(|f| f.kind) {
                                stall(&client);
                            }
                            let _ = client.shutdown(Shutdown::Both);
                            let _ = upstream.shutdown(Shutdown::Both);
                            return;
                        }
                    }
                    if client.write_all(chunk).is_err() {
                        return;
                    }
                    *sent += take;
                    *left -= take as u64;
                    data = &data[take..];
                    if *left == 0 {
                        state = State::Head(Vec::new());
                    }
                }
            }
        }
    }
    let _ = client.shutdown(Shutdown::Both);
}
