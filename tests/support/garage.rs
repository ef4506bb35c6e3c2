//! A real Garage cluster for the object-storage tests (issue 15): three `garage server` processes
//! on loopback with replication factor 3, each with its own config file, metadata and data
//! directories under one temporary directory; the layout is assigned and applied, and an access
//! key and a bucket are created, all through Garage's own CLI.
//!
//! The binary is `$PARAMDEX_GARAGE` if set, else `garage` on `PATH`, else `~/.cargo/bin/garage`
//! (`cargo install garage --locked`; `.ci/run` installs it). Without it, [`start_or_skip`] and
//! [`shared`] print a loud `SKIP` line and return `None` so the test returns early, except when
//! [`must_run`] (the environment variable `CI` set to anything but empty, `0` or `false`, or
//! `PARAMDEX_REQUIRE_ALL=1` as for the Python tests): there they panic, so CI never passes without
//! having run these tests. There `PARAMDEX_GARAGE` must also be set (`.ci/run` exports it): CI runs
//! the binary it chose, not whichever `garage` happens to be on `PATH`.
//!
//! Nodes 0, 1, 2 live in `n1/`, `n2/`, `n3/` of the cluster's directory (`garage.toml`, `meta/`,
//! `data/`, and the node's log `garage.log`); the last lines of every log are printed when
//! starting fails, when a test run through [`Garage::run`] panics, and when a cluster is dropped
//! during a panic. `PARAMDEX_GARAGE_KEEP=1` keeps the directory (its path is printed) instead of
//! removing it.
//!
//! Readiness, each step with a 60 s limit: every node listens; every pair of nodes is connected
//! (`node connect`) and each node sees three healthy nodes; after the layout, key and bucket, each
//! node's `GET /health` says "fully operational". A test should still retry its first write
//! (see `put_when_writable` in `s3.rs`).
//!
//! Only std, `libc` and `tempfile`: every test binary with `mod support;` compiles this module.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use std::{env, fs, thread};

/// How long any one readiness step may take (generous: CI is a loaded 2-core machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one CLI command may take before it is killed.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);
/// Attempts at starting a cluster when a chosen port was taken meanwhile.
const START_ATTEMPTS: usize = 4;
const NODES: usize = 3;

/// Serialises port choice and binding between the clusters of one test binary, so that two
/// clusters started at once cannot be handed the same released port.
static PORTS_LOCK: Mutex<()> = Mutex::new(());

/// One `garage server` process and its ports.
struct Node {
    dir: PathBuf,
    s3_port: u16,
    rpc_port: u16,
    admin_port: u16,
    child: Option<Child>,
}

impl Node {
    fn config(&self) -> PathBuf {
        self.dir.join("garage.toml")
    }
    fn log(&self) -> PathBuf {
        self.dir.join("garage.log")
    }
}

/// A running 3-node Garage cluster with one key and one bucket; dropping it kills every node and
/// removes its directory. Nodes are numbered 0, 1, 2 (the order of [`Garage::endpoints`]).
pub struct Garage {
    bin: PathBuf,
    dir: PathBuf,
    /// `None` once the directory is removed (or kept).
    tmp: Mutex<Option<tempfile::TempDir>>,
    nodes: Mutex<Vec<Node>>,
    endpoints: Vec<String>,
    admin_endpoints: Vec<String>,
    /// Full node ids, `<hex>@127.0.0.1:<rpc port>`.
    ids: Vec<String>,
    key_id: String,
    secret: String,
    bucket: String,
    /// How long [`Garage::start`] took.
    pub startup: Duration,
}

/// True when the environment variable `CI` is set to anything but empty, `0` or `false`.
pub fn in_ci() -> bool {
    env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// True when the object-storage tests must run rather than skip: under CI ([`in_ci`]) or with
/// `PARAMDEX_REQUIRE_ALL=1` (the variable the Python tests obey).
pub fn must_run() -> bool {
    in_ci() || env::var("PARAMDEX_REQUIRE_ALL").is_ok_and(|v| v == "1")
}

fn is_executable(p: &Path) -> bool {
    fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The garage binary: `$PARAMDEX_GARAGE` (which must then exist), `garage` on `PATH`, or
/// `~/.cargo/bin/garage`.
pub fn binary() -> Option<PathBuf> {
    if let Some(p) = env::var_os("PARAMDEX_GARAGE").filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        assert!(
            is_executable(&p),
            "PARAMDEX_GARAGE={} is not an executable file",
            p.display()
        );
        return Some(p);
    }
    let on_path = env::var_os("PATH")
        .map(|path| {
            env::split_paths(&path)
                .map(|d| d.join("garage"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let cargo_bin = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .map(|d| d.join("bin/garage"));
    on_path
        .into_iter()
        .chain(cargo_bin)
        .find(|p| is_executable(p))
}

/// The binary, or `None` after a loud SKIP line naming `test`. When [`must_run`], panics instead
/// unless `PARAMDEX_GARAGE` names the binary (then there is one: [`binary`] panics if it is not
/// executable).
fn binary_or_skip(test: &str) -> Option<PathBuf> {
    if must_run() && env::var_os("PARAMDEX_GARAGE").is_none_or(|p| p.is_empty()) {
        panic!(
            "{test}: CI or PARAMDEX_REQUIRE_ALL=1 is set, so this object-storage test must run, but \
             PARAMDEX_GARAGE does not name a garage binary (`.ci/run` exports it)"
        );
    }
    let bin = binary();
    if bin.is_none() {
        let why = "no garage binary (set PARAMDEX_GARAGE, put garage on PATH, or run \
                   `cargo install garage --locked`)";
        // Straight to the process's stderr: the test harness captures `eprintln!` of passing tests.
        let _ = writeln!(
            std::io::stderr(),
            "\n!!!!! SKIP {test}: {why}; this test did NOT run !!!!!\n"
        );
    }
    bin
}

/// A new cluster owned by the caller, or `None` (after a loud SKIP line) when there is no garage
/// binary outside CI. Panics, with the nodes' logs, if the cluster cannot be started.
pub fn start_or_skip(test: &str) -> Option<Garage> {
    let bin = binary_or_skip(test)?;
    Some(Garage::start_with(bin).unwrap_or_else(|e| panic!("{test}: {e}")))
}

static SHARED: OnceLock<Result<Garage, String>> = OnceLock::new();

extern "C" fn stop_shared() {
    if let Some(Ok(g)) = SHARED.get() {
        g.shutdown();
    }
}

/// One cluster shared by every test of this test binary that calls it (started by the first),
/// stopped when the process exits; `None` as for [`start_or_skip`]. Tests sharing it must not kill
/// nodes (use [`start_or_skip`] for that) and should use their own key prefixes.
pub fn shared(test: &str) -> Option<&'static Garage> {
    let bin = binary_or_skip(test)?;
    let g = SHARED.get_or_init(|| {
        let g = Garage::start_with(bin);
        if g.is_ok() {
            // A static is never dropped: stop the nodes when the test binary exits.
            // SAFETY: registering a plain extern "C" fn without captured state.
            unsafe { libc::atexit(stop_shared) };
        }
        g
    });
    match g {
        Ok(g) => Some(g),
        Err(e) => panic!("{test}: {e}"),
    }
}

/// Ports that were free a moment ago: all are bound at once (so they differ), then released.
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("binding 127.0.0.1:0: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())
}

fn random_hex(bytes: usize) -> String {
    let mut b = vec![0u8; bytes];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .expect("/dev/urandom");
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn tail(path: &Path, lines: usize) -> String {
    match fs::read(path) {
        Ok(b) => {
            let text = String::from_utf8_lossy(&b);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// Polls `f` until it returns `Ok(Some(_))`, an `Err` (given up at once) or `timeout` passes.
fn wait_for<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<Option<T>, String>,
) -> Result<T, String> {
    let start = Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(format!("timed out after {timeout:?} waiting for {what}"));
        }
        thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(250));
    }
}

/// The whole response (status line, headers, body) to `GET path` on `127.0.0.1:port`, or
/// `None` if the request failed.
fn http_get(port: u16, path: &str) -> Option<String> {
    let addr = ("127.0.0.1", port);
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    s.read_to_string(&mut response).ok()?;
    Some(response)
}

/// Whether a previous start's failure is worth another attempt with other ports.
fn port_taken(err: &str) -> bool {
    err.contains("Address already in use") || err.contains("AddrInUse")
}

impl Garage {
    /// Starts a cluster with the binary found by [`binary`] (`Err` if there is none).
    pub fn start() -> Result<Garage, String> {
        let bin = binary().ok_or("no garage binary (PARAMDEX_GARAGE, PATH, ~/.cargo/bin)")?;
        Self::start_with(bin)
    }

    /// Starts a cluster with the given binary, retrying with new ports when one was taken.
    pub fn start_with(bin: PathBuf) -> Result<Garage, String> {
        let t0 = Instant::now();
        let mut attempt = 1;
        loop {
            match Self::start_once(&bin) {
                Ok(mut g) => {
                    g.startup = t0.elapsed();
                    return Ok(g);
                }
                Err(e) if attempt < START_ATTEMPTS && port_taken(&e) => {
                    eprintln!("garage: a port was taken, retrying ({attempt}): {e}");
                    attempt += 1;
                }
                Err(e) => return Err(format!("starting a Garage cluster: {e}")),
            }
        }
    }

    fn start_once(bin: &Path) -> Result<Garage, String> {
        let tmp = tempfile::Builder::new()
            .prefix("paramdex-garage-")
            .tempdir()
            .map_err(|e| format!("temporary directory: {e}"))?;
        let dir = tmp.path().to_path_buf();
        let rpc_secret = random_hex(32);
        let admin_token = random_hex(16);

        let lock = PORTS_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        let ports = free_ports(3 * NODES)?;
        let mut nodes = Vec::new();
        for i in 0..NODES {
            let ndir = dir.join(format!("n{}", i + 1));
            fs::create_dir_all(&ndir).map_err(|e| e.to_string())?;
            let node = Node {
                dir: ndir,
                s3_port: ports[3 * i],
                rpc_port: ports[3 * i + 1],
                admin_port: ports[3 * i + 2],
                child: None,
            };
            let config = format!(
                "metadata_dir = \"{d}/meta\"\n\
                 data_dir = \"{d}/data\"\n\
                 db_engine = \"sqlite\"\n\
                 replication_factor = 3\n\
                 rpc_bind_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_public_addr = \"127.0.0.1:{rpc}\"\n\
                 rpc_secret = \"{rpc_secret}\"\n\
                 \n[s3_api]\n\
                 s3_region = \"garage\"\n\
                 api_bind_addr = \"127.0.0.1:{s3}\"\n\
                 root_domain = \".s3.garage.localhost\"\n\
                 \n[admin]\n\
                 api_bind_addr = \"127.0.0.1:{admin}\"\n\
                 admin_token = \"{admin_token}\"\n",
                d = node.dir.display(),
                rpc = node.rpc_port,
                s3 = node.s3_port,
                admin = node.admin_port,
            );
            // Garage refuses a config file (it holds the RPC secret) readable by others.
            fs::write(node.config(), config).map_err(|e| e.to_string())?;
            fs::set_permissions(node.config(), fs::Permissions::from_mode(0o600))
                .map_err(|e| e.to_string())?;
            nodes.push(node);
        }
        let mut g = Garage {
            bin: bin.to_path_buf(),
            dir,
            tmp: Mutex::new(Some(tmp)),
            endpoints: nodes
                .iter()
                .map(|n| format!("http://127.0.0.1:{}", n.s3_port))
                .collect(),
            admin_endpoints: nodes
                .iter()
                .map(|n| format!("http://127.0.0.1:{}", n.admin_port))
                .collect(),
            nodes: Mutex::new(nodes),
            ids: Vec::new(),
            key_id: String::new(),
            secret: String::new(),
            bucket: "pdx".into(),
            startup: Duration::ZERO,
        };
        // From here on, dropping `g` on an error kills whatever was started.
        for i in 0..NODES {
            g.spawn(i)?;
        }
        for i in 0..NODES {
            g.wait_listening(i).map_err(|e| g.with_logs(e))?;
        }
        drop(lock);
        // A port taken by another process after it was chosen shows up in the logs only.
        let r = g
            .setup()
            .and_then(|()| (0..NODES).try_for_each(|i| g.check_alive(i)));
        match r {
            Ok(()) => Ok(g),
            Err(e) => Err(g.with_logs(e)),
        }
    }

    /// Connects the nodes, applies the layout, creates the key and the bucket, and waits until
    /// every node reports the cluster healthy.
    fn setup(&mut self) -> Result<(), String> {
        let ids = (0..NODES)
            .map(|i| {
                wait_for("node id", READY_TIMEOUT, || {
                    Ok(self.cli(i, &["node", "id", "-q"]).ok())
                })
                .map(|s| s.trim().to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.ids.clone_from(&ids);
        // Every pair, not only node 0 to the others: nodes 1 and 2 would otherwise meet later
        // through peer exchange, and with node 0 killed before they have, neither reaches a
        // quorum ("Could not reach quorum of 2 ... Not connected").
        for (i, j) in [(0, 1), (0, 2), (1, 2)] {
            wait_for("node connect", READY_TIMEOUT, || {
                Ok(self.cli(i, &["node", "connect", &ids[j]]).ok())
            })?;
        }
        self.wait_healthy_nodes(NODES)?;
        for (i, id) in ids.iter().enumerate() {
            let prefix = &id[..16];
            let zone = format!("dc{}", i + 1);
            self.cli(0, &["layout", "assign", "-z", &zone, "-c", "1G", prefix])?;
        }
        self.cli(0, &["layout", "apply", "--version", "1"])?;
        let key = self.cli(0, &["key", "create", "pdx-key"])?;
        let field = |name: &str| {
            key.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim().to_string())
                .ok_or_else(|| format!("no {name:?} in `garage key create` output:\n{key}"))
        };
        self.key_id = field("Key ID:")?;
        self.secret = field("Secret key:")?;
        self.cli(0, &["bucket", "create", &self.bucket])?;
        self.cli(
            0,
            &[
                "bucket",
                "allow",
                "--read",
                "--write",
                "--owner",
                &self.bucket,
                "--key",
                "pdx-key",
            ],
        )?;
        for i in 0..NODES {
            self.wait_health(i)?;
        }
        Ok(())
    }

    /// Starts node `i`'s server process (appending to its log).
    fn spawn(&self, i: usize) -> Result<(), String> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let node = &mut nodes[i];
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(node.log())
            .map_err(|e| format!("{}: {e}", node.log().display()))?;
        let log2 = log.try_clone().map_err(|e| e.to_string())?;
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(node.config())
            .arg("server")
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "garage=info")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", self.bin.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// `Err` (with the log's tail) if node `i`'s process has exited or could not bind a port.
    /// Garage 2.5.0 does not exit when its S3 port is taken: it logs `S3 API server exited with
    /// error: IO error: Address already in use` and runs on, so the log is read too.
    fn check_alive(&self, i: usize) -> Result<(), String> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        let node = &mut nodes[i];
        let log = fs::read(node.log()).unwrap_or_default();
        if String::from_utf8_lossy(&log).contains("Address already in use") {
            return Err(format!(
                "garage node {i} could not bind a port; {}:\n{}",
                node.log().display(),
                tail(&node.log(), 30)
            ));
        }
        if let Some(child) = node.child.as_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                node.child = None;
                return Err(format!(
                    "garage node {i} exited ({status}); {}:\n{}",
                    node.log().display(),
                    tail(&node.log(), 30)
                ));
            }
        }
        Ok(())
    }

    /// Waits until node `i` accepts connections on its S3 and admin ports.
    fn wait_listening(&self, i: usize) -> Result<(), String> {
        let ports = {
            let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            [nodes[i].s3_port, nodes[i].admin_port]
        };
        wait_for(&format!("node {i} to listen"), READY_TIMEOUT, || {
            self.check_alive(i)?;
            Ok(ports
                .iter()
                .all(|&p| TcpStream::connect(("127.0.0.1", p)).is_ok())
                .then_some(()))
        })
    }

    /// Waits until node `i`'s admin API answers `GET /health` with 200 and "Garage is fully
    /// operational" (it sees every node up and knows the layout; with a node down it says
    /// "degraded", still with 200 while a quorum is up).
    fn wait_health(&self, i: usize) -> Result<(), String> {
        let port = self.nodes.lock().unwrap_or_else(|p| p.into_inner())[i].admin_port;
        wait_for(
            &format!("node {i} to report full health"),
            READY_TIMEOUT,
            || {
                self.check_alive(i)?;
                Ok(http_get(port, "/health")
                    .is_some_and(|r| {
                        r.starts_with("HTTP/1.1 200") && r.contains("fully operational")
                    })
                    .then_some(()))
            },
        )
    }

    /// Has every other live node connect to node `i` now: after a node comes back, Garage 2.5.0's
    /// peers retry their connection to it on a backoff that reached ~30 s in our runs.
    fn connect_to(&self, i: usize) -> Result<(), String> {
        let live: Vec<usize> = {
            let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            (0..NODES)
                .filter(|&j| j != i && nodes[j].child.is_some())
                .collect()
        };
        for j in live {
            wait_for("node connect", READY_TIMEOUT, || {
                Ok(self.cli(j, &["node", "connect", &self.ids[i]]).ok())
            })?;
        }
        Ok(())
    }

    /// Waits until every live node lists `n` healthy nodes in `garage status` (each node's own
    /// view: the CLI asks the node whose config it is given).
    fn wait_healthy_nodes(&self, n: usize) -> Result<(), String> {
        let live: Vec<usize> = {
            let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            (0..NODES).filter(|&i| nodes[i].child.is_some()).collect()
        };
        for i in live {
            self.wait_node_sees(i, n)?;
        }
        Ok(())
    }

    fn wait_node_sees(&self, i: usize, n: usize) -> Result<(), String> {
        wait_for(
            &format!("node {i} to see {n} healthy nodes"),
            READY_TIMEOUT,
            || {
                let Ok(out) = self.cli(i, &["status"]) else {
                    return Ok(None);
                };
                let healthy = out
                    .split("====")
                    .skip_while(|s| !s.contains("HEALTHY NODES"))
                    .nth(1)
                    .map_or(0, |sec| {
                        sec.lines().filter(|l| l.contains("127.0.0.1:")).count()
                    });
                Ok((healthy >= n).then_some(()))
            },
        )
    }

    /// Runs `garage -c <node i's config> args...`; its stdout, or `Err` with both outputs.
    pub fn cli(&self, i: usize, args: &[&str]) -> Result<String, String> {
        let config = self.nodes.lock().unwrap_or_else(|p| p.into_inner())[i].config();
        let child = Command::new(&self.bin)
            .arg("-c")
            .arg(&config)
            .args(args)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", self.bin.display()))?;
        let pid = child.id() as libc::pid_t;
        let (tx, rx) = std::sync::mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let what = format!("garage {}", args.join(" "));
        let out = match rx.recv_timeout(CLI_TIMEOUT) {
            Ok(out) => out.map_err(|e| format!("{what}: {e}"))?,
            Err(_) => {
                // SAFETY: kill(2) on the pid of our own child, which has not been reaped yet.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                return Err(format!("{what}: no answer in {CLI_TIMEOUT:?}"));
            }
        };
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            Ok(stdout)
        } else {
            Err(format!(
                "{what}: {}\n{stdout}{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The S3 endpoint of node 0, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoints[0]
    }
    /// The S3 endpoints of all three nodes; any of them serves the whole bucket.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }
    /// The admin API endpoints of all three nodes (`GET /health` needs no token).
    pub fn admin_endpoints(&self) -> &[String] {
        &self.admin_endpoints
    }
    /// The S3 region the nodes are configured with (request signatures must name it).
    pub fn region(&self) -> &str {
        "garage"
    }
    pub fn access_key_id(&self) -> &str {
        &self.key_id
    }
    pub fn secret_access_key(&self) -> &str {
        &self.secret
    }
    pub fn bucket(&self) -> &str {
        &self.bucket
    }
    /// The cluster's directory (configs, metadata, data and one `garage.log` per node).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// SIGKILLs node `i` (0, 1 or 2) and reaps it; the other two still hold a quorum.
    pub fn kill_node(&self, i: usize) {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut child) = nodes[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts node `i` again on its old ports and data, and waits until the cluster sees three
    /// healthy nodes and node `i` reports health.
    pub fn restart_node(&self, i: usize) -> Result<(), String> {
        self.kill_node(i);
        let r = self
            .spawn(i)
            .and_then(|()| self.wait_listening(i))
            .and_then(|()| self.connect_to(i))
            .and_then(|()| self.wait_healthy_nodes(NODES))
            .and_then(|()| self.wait_health(i));
        r.map_err(|e| self.with_logs(format!("restarting garage node {i}: {e}")))
    }

    /// The last `lines` lines of every node's log, headed by the log's path.
    pub fn log_tails(&self, lines: usize) -> String {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                format!(
                    "----- garage node {i} ({}), last {lines} lines -----\n{}\n",
                    n.log().display(),
                    tail(&n.log(), lines)
                )
            })
            .collect()
    }

    fn with_logs(&self, e: String) -> String {
        format!("{e}\n{}", self.log_tails(40))
    }

    /// Runs `f`; if it panics, prints the tail of every node's log, then panics on.
    pub fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(p) => {
                eprintln!("{}", self.log_tails(40));
                std::panic::resume_unwind(p)
            }
        }
    }

    /// Kills every node and removes the directory (or keeps it if `PARAMDEX_GARAGE_KEEP` is
    /// set); idempotent.
    pub fn shutdown(&self) {
        for i in 0..NODES {
            self.kill_node(i);
        }
        let tmp = self.tmp.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(tmp) = tmp {
            if env::var_os("PARAMDEX_GARAGE_KEEP").is_some() {
                let _ = writeln!(
                    std::io::stderr(),
                    "garage: keeping {}",
                    tmp.keep().display()
                );
            } else {
                let _ = tmp.close();
            }
        }
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if thread::panicking() {
            eprintln!("{}", self.log_tails(40));
        }
        self.shutdown();
    }
}
