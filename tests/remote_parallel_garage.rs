//! Parallel ranged loads of a native file from a real Garage cluster (3 nodes, replication 3;
//! `tests/support/garage.rs`), through the store `paramdex::remote::resolve_with` builds (the
//! library's own client settings: timeouts, retries, attempts counted):
//!
//! * a full load of a checkpoint of a few hundred MiB equals the local reader's bytes, with one
//!   request per planned part;
//! * one node (not the one the endpoint points at) killed during a full load: the load
//!   completes (a private cluster);
//! * a response broken off mid-body (by a fault-injecting proxy in front of the endpoint) is
//!   retried for the rest, counted in `RequestStats::retries`, the bytes right;
//! * a stalled response times out and is retried; a store that stalls every answer fails with
//!   `RemoteProblem::Unavailable` naming the URL within the configured time.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

mod support;

#[path = "support/fault_proxy.rs"]
mod fault_proxy;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fault_proxy::{Fault, FaultKind, FaultProxy};
use object_store::PutPayload;
use paramdex::remote::{open_object_with, LoadOptions, RemoteConfig, RemoteOptions, RemoteTensor};
use paramdex::{DType, Error, Reader, RemoteProblem, Tensor, Writer, WriterOptions};
use support::garage::{self, Garage};
use support::s3::{new_runtime, plain_store, put_when_writable};

/// Puts `bytes` under `key`, retrying while a new cluster is not writable yet.
fn put(g: &Garage, key: &str, bytes: Vec<u8>) {
    let rt = new_runtime();
    let s = plain_store(g, g.endpoint());
    let pause = Duration::from_millis(300);
    put_when_writable(&rt, &*s, key, PutPayload::from(bytes), pause)
        .unwrap_or_else(|e| panic!("put {key}: {e}"));
}

/// The library's client settings for `endpoint` of cluster `g`.
fn config(g: &Garage, endpoint: &str) -> RemoteConfig {
    RemoteConfig {
        s3_options: vec![
            ("endpoint".into(), endpoint.into()),
            ("region".into(), g.region().into()),
            ("access_key_id".into(), g.access_key_id().into()),
            ("secret_access_key".into(), g.secret_access_key().into()),
            ("allow_http".into(), "true".into()),
        ],
        ..RemoteConfig::default()
    }
}

fn url(g: &Garage, key: &str) -> String {
    format!("s3://{}/{key}", g.bucket())
}

fn open(g: &Garage, key: &str, config: &RemoteConfig) -> paramdex::Result<Reader> {
    let opts = RemoteOptions::with_config(config);
    let src = open_object_with(&url(g, key), opts.tail_bytes, config)?;
    Reader::from_range_read(src, opts)
}

/// A native checkpoint: `big` tensors of `big_len` bytes, with small ones (1..3 KiB) between
/// them, three of the big ones float32; written to `path`. Returns its names.
fn write_checkpoint(path: &Path, big: usize, big_len: usize) -> Vec<String> {
    let mut w = Writer::create_with(
        path,
        WriterOptions {
            sync: false,
            ..Default::default()
        },
    )
    .unwrap();
    let mut names = Vec::new();
    for i in 0..big {
        let name = format!("layers.{i:04}.weight");
        let data: Vec<u8> = (0..big_len)
            .map(|k| ((k as u64 * 2_654_435_761 + i as u64 * 97) >> 7) as u8)
            .collect();
        w.add(&name, Tensor::new(DType::UInt8, &[big_len as u64], &data))
            .unwrap();
        names.push(name);
        for j in 0..3 {
            let name = format!("layers.{i:04}.z_norm{j}");
            let n = 1024 * (j + 1) + i;
            let data: Vec<u8> = (0..n).map(|k| (k + i + j) as u8).collect();
            w.add(&name, Tensor::new(DType::UInt8, &[n as u64], &data))
                .unwrap();
            names.push(name);
        }
    }
    w.finish().unwrap();
    names
}

/// The checkpoint of the shared-cluster tests (about 200 MiB), written once and uploaded
/// once per cluster: (local path, names).
struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    names: Vec<String>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.pdx");
        let names = write_checkpoint(&path, 50, 4 << 20);
        Fixture {
            _dir: dir,
            path,
            names,
        }
    })
}

/// The shared cluster with the fixture uploaded under `parallel/ckpt.pdx`.
fn shared(test: &str) -> Option<&'static Garage> {
    static UPLOADED: OnceLock<()> = OnceLock::new();
    let g = garage::shared(test)?;
    UPLOADED.get_or_init(|| {
        put(
            g,
            "parallel/ckpt.pdx",
            std::fs::read(&fixture().path).unwrap(),
        )
    });
    Some(g)
}

/// Checks `got` (a full load, in file order) against the local reader of `path`.
fn check_against_local(path: &Path, names: &[String], got: &[(Vec<u8>, RemoteTensor)]) {
    let local = Reader::open(path).unwrap();
    assert_eq!(got.len(), names.len());
    let mut got_names: Vec<&[u8]> = got.iter().map(|(n, _)| n.as_slice()).collect();
    got_names.sort();
    let mut want: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
    want.sort();
    assert_eq!(got_names, want);
    for (n, t) in got {
        let v = local.tensor(n).unwrap();
        assert!(
            t.data == v.data(),
            "{}: bytes differ",
            String::from_utf8_lossy(n)
        );
        assert_eq!(t.dtype, v.dtype());
        assert_eq!(t.shape, v.shape());
    }
}

#[test]
fn a_full_parallel_load_equals_the_local_reader_one_request_per_part() {
    let Some(g) = shared("a_full_parallel_load_equals_the_local_reader_one_request_per_part")
    else {
        return;
    };
    g.run(|| {
        let f = fixture();
        let c = config(g, g.endpoint());
        let r = open(g, "parallel/ckpt.pdx", &c).unwrap();
        for (part, concurrency) in [(8u64 << 20, 8usize), (1 << 20, 16), (3 << 20, 3)] {
            let opts = LoadOptions {
                part_size: part,
                concurrency,
                ..LoadOptions::with_config(&c)
            };
            let plan = r.load_plan(&opts).unwrap();
            let before = r.stats();
            let t = Instant::now();
            let got = r.load_all(&opts).unwrap();
            let took = t.elapsed();
            let after = r.stats();
            check_against_local(&f.path, &f.names, &got);
            let data: u64 = got.iter().map(|(_, t)| t.data.len() as u64).sum();
            eprintln!(
                "part {part}, concurrency {concurrency}: {} MiB in {took:?}, {} requests",
                data >> 20,
                after.requests - before.requests
            );
            // One request per part, each no larger than a part; only the parts' bytes.
            assert_eq!(after.requests - before.requests, plan.len() as u64);
            assert_eq!(
                after.bytes - before.bytes,
                plan.iter().map(|p| p.end - p.start).sum::<u64>()
            );
            assert!(plan.iter().all(|p| p.end - p.start <= part));
            // Parts are full but where a big gap would cross a boundary: at most one short
            // part per tensor that starts one.
            assert!(plan.len() as u64 >= data.div_ceil(part));
            assert!(plan.len() as u64 <= data.div_ceil(part) + got.len() as u64);
            assert_eq!(
                after.retries, before.retries,
                "no retries on a healthy cluster"
            );
        }
        // for_each with a memory window and the CLI's path (verify) give the same bytes.
        let mut n = 0;
        r.for_each(
            &LoadOptions {
                window_bytes: 16 << 20,
                ..LoadOptions::with_config(&c)
            },
            |name, t| {
                let local = Reader::open(&f.path).unwrap();
                assert!(t.data == local.tensor(&name).unwrap().data());
                n += 1;
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(n, f.names.len());
        // A large tensor's get: parallel parts.
        let small = LoadOptions {
            part_size: 256 << 10,
            ..LoadOptions::with_config(&c)
        };
        let r2 = Reader::from_range_read(
            open_object_with(&url(g, "parallel/ckpt.pdx"), 256 << 10, &c).unwrap(),
            RemoteOptions {
                load: small,
                ..RemoteOptions::with_config(&c)
            },
        )
        .unwrap();
        let before = r2.stats().requests;
        let t = r2.get("layers.0007.weight").unwrap().unwrap();
        let local = Reader::open(&f.path).unwrap();
        assert!(t.data() == local.tensor("layers.0007.weight").unwrap().data());
        let used = r2.stats().requests - before;
        assert!(
            (16..=17).contains(&used),
            "get of 4 MiB in 256 KiB parts: {used}"
        );
    });
}

#[test]
fn a_response_cut_mid_body_is_retried_for_the_rest() {
    let Some(g) = shared("a_response_cut_mid_body_is_retried_for_the_rest") else {
        return;
    };
    g.run(|| {
        let f = fixture();
        // Responses 1 (the open's tail) and 2 (the index's blocks, if the tail did not hold
        // them) pass; the 4th is a part: cut after 100 000 bytes of its body.
        let proxy = FaultProxy::start(
            g.endpoint(),
            Some(Fault {
                kind: FaultKind::Cut { after: 100_000 },
                first: 4,
                count: 1,
            }),
        );
        let c = config(g, &proxy.endpoint());
        let r = open(g, "parallel/ckpt.pdx", &c).unwrap();
        let opts = LoadOptions {
            part_size: 4 << 20,
            concurrency: 4,
            ..LoadOptions::with_config(&c)
        };
        let plan = r.load_plan(&opts).unwrap();
        let before = r.stats();
        let got = r.load_all(&opts).unwrap();
        let after = r.stats();
        check_against_local(&f.path, &f.names, &got);
        assert_eq!(proxy.faulted(), 1, "the proxy cut one response");
        assert_eq!(after.retries - before.retries, 1, "{after:?}");
        // The retry is counted as a retry, not as another request.
        assert_eq!(after.requests - before.requests, plan.len() as u64);
        // The proxy saw every attempt: the open's, the parts', and the retry.
        assert_eq!(
            proxy.responses() as u64,
            after.requests + after.retries,
            "{after:?}"
        );
    });
}

#[test]
fn a_stalled_response_times_out_and_is_retried() {
    let Some(g) = shared("a_stalled_response_times_out_and_is_retried") else {
        return;
    };
    g.run(|| {
        let f = fixture();
        let proxy = FaultProxy::start(
            g.endpoint(),
            Some(Fault {
                kind: FaultKind::Stall {
                    after: Some(64 << 10),
                },
                first: 5,
                count: 1,
            }),
        );
        let c = RemoteConfig {
            read_timeout: Duration::from_millis(1500),
            ..config(g, &proxy.endpoint())
        };
        let r = open(g, "parallel/ckpt.pdx", &c).unwrap();
        let t = Instant::now();
        let got = r.load_all(&LoadOptions::with_config(&c)).unwrap();
        let took = t.elapsed();
        check_against_local(&f.path, &f.names, &got);
        assert_eq!(proxy.faulted(), 1);
        assert!(r.stats().retries >= 1, "{:?}", r.stats());
        assert!(
            took < Duration::from_secs(30),
            "a stall of one part costs about the read timeout, not {took:?}"
        );
    });
}

#[test]
fn a_store_that_stalls_every_answer_fails_in_the_configured_time() {
    let Some(g) = shared("a_store_that_stalls_every_answer_fails_in_the_configured_time") else {
        return;
    };
    g.run(|| {
        // The open passes; every later answer stalls: before its headers, or inside its body.
        for after in [None, Some(1000)] {
            let proxy = FaultProxy::start(
                g.endpoint(),
                Some(Fault {
                    kind: FaultKind::Stall { after },
                    first: 3,
                    count: usize::MAX,
                }),
            );
            let c = RemoteConfig {
                read_timeout: Duration::from_secs(1),
                request_timeout: Duration::from_secs(3),
                max_retries: 1,
                retry_timeout: Duration::from_secs(4),
                ..config(g, &proxy.endpoint())
            };
            let r = open(g, "parallel/ckpt.pdx", &c).unwrap();
            let t = Instant::now();
            let e = r
                .load_all(&LoadOptions::with_config(&c))
                .expect_err("every answer stalls");
            let took = t.elapsed();
            match &e {
                Error::Remote {
                    url: u, problem, ..
                } => {
                    // No answer came: a store that cannot answer, whatever the retries.
                    assert!(
                        matches!(problem, RemoteProblem::Unavailable { status: None, .. }),
                        "{e}"
                    );
                    assert_eq!(u, &url(g, "parallel/ckpt.pdx"));
                }
                other => panic!("stalled store: {other:?}"),
            }
            assert!(e.to_string().contains("s3://"), "{e}");
            // The cause is in the message (it is in object_store's error's sources).
            assert!(e.to_string().contains("timed out"), "{e}");
            // Two attempts of at most the read timeout each, a backoff, some slack.
            assert!(
                took < Duration::from_secs(8),
                "stall {after:?}: failed after {took:?}"
            );
            assert!(
                took >= Duration::from_millis(900),
                "failed before the timeout?"
            );
            eprintln!("stall {after:?}: {e} after {took:?}");
        }
    });
}

/// The node-kill case gets its own cluster, so that the shared one stays whole.
#[test]
fn one_node_killed_during_a_full_parallel_load_the_load_completes() {
    let Some(g) = garage::start_or_skip("one_node_killed_during_a_full_parallel_load") else {
        return;
    };
    let g = Arc::new(g);
    g.run(|| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kill.pdx");
        let names = write_checkpoint(&path, 64, 4 << 20);
        put(&g, "kill/ckpt.pdx", std::fs::read(&path).unwrap());
        let c = config(&g, g.endpoint());
        let r = open(&g, "kill/ckpt.pdx", &c).unwrap();
        // Parts of 2 MiB, 4 in flight: node 2 is killed when a quarter has arrived.
        let killed_at = Arc::new(AtomicU64::new(0));
        let killed = Arc::new(AtomicBool::new(false));
        let (g2, k2, ka2) = (g.clone(), killed.clone(), killed_at.clone());
        let opts = LoadOptions {
            part_size: 2 << 20,
            concurrency: 4,
            progress: Some(Arc::new(move |p| {
                if p.bytes * 4 >= p.total_bytes && !k2.swap(true, Ordering::SeqCst) {
                    g2.kill_node(2);
                    ka2.store(p.bytes, Ordering::SeqCst);
                    eprintln!("killed node 2 at {} of {} bytes", p.bytes, p.total_bytes);
                }
            })),
            ..LoadOptions::with_config(&c)
        };
        let t = Instant::now();
        let got = r.load_all(&opts).unwrap();
        let took = t.elapsed();
        assert!(killed.load(Ordering::SeqCst));
        let total: u64 = got.iter().map(|(_, t)| t.data.len() as u64).sum();
        assert!(
            killed_at.load(Ordering::SeqCst) < total,
            "the kill came during the load"
        );
        check_against_local(&path, &names, &got);
        eprintln!(
            "full load with node 2 killed: {} MiB in {took:?}, {:?}",
            total >> 20,
            r.stats()
        );
        // And a second full load with the node still down.
        let again = r.load_all(&LoadOptions::with_config(&c)).unwrap();
        check_against_local(&path, &names, &again);
    });
}

/// What `paramdex convert s3://... out.pdx` and `paramdex verify s3://...` run: export of the
/// remote store (which loads tensor by tensor in name order: fetched ahead in parallel) and
/// its verify (a parallel load of every tensor).
#[test]
fn convert_and_verify_of_a_url_use_parallel_loads() {
    let Some(g) = shared("convert_and_verify_of_a_url_use_parallel_loads") else {
        return;
    };
    g.run(|| {
        use paramdex::interop::{export, ExportOptions, OutputFormat, TensorStore};
        let f = fixture();
        let c = config(g, g.endpoint());
        let r = open(g, "parallel/ckpt.pdx", &c).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("copy.pdx");
        let before = r.stats().requests;
        let t = Instant::now();
        let rep = export(
            &r,
            OutputFormat::Native,
            &out,
            &ExportOptions {
                writer: WriterOptions {
                    sync: false,
                    ..Default::default()
                },
                metadata: None,
                skip_unsupported: false,
                progress: None,
                overwrite: false,
            },
        )
        .unwrap();
        let used = r.stats().requests - before;
        eprintln!(
            "export of {} tensors: {used} requests in {:?}",
            rep.tensors,
            t.elapsed()
        );
        assert_eq!(rep.tensors as usize, f.names.len());
        // Far fewer requests than tensors: read ahead in parts.
        assert!(used * 4 < f.names.len() as u64, "{used} requests");
        let (a, b) = (Reader::open(&f.path).unwrap(), Reader::open(&out).unwrap());
        for n in &f.names {
            assert!(
                a.tensor(n).unwrap().data() == b.tensor(n).unwrap().data(),
                "{n}"
            );
        }

        let plan = r.load_plan(&RemoteOptions::with_config(&c).load).unwrap();
        let before = r.stats().requests;
        let v = TensorStore::verify(&r, 0).unwrap();
        assert_eq!(v.tensors as usize, f.names.len());
        assert_eq!(r.stats().requests - before, plan.len() as u64);
    });
}
