//! Upload of a native checkpoint to object storage (issue 15, "Upload of a 2 GiB checkpoint
//! against a plain multipart upload of the same bytes"), on a private 3-node Garage cluster
//! on loopback (`tests/support/garage.rs`; the binary as the tests find it, else SKIP).
//!
//! ```sh
//! cargo bench --bench remote_upload                                   # 2 GiB, defaults
//! PARAMDEX_BENCH_UPLOAD_MIB=512 PARAMDEX_BENCH_UPLOAD_SWEEP=1 cargo bench --bench remote_upload
//! ```
//!
//! Per configuration (part size, concurrency), interleaved, `PARAMDEX_BENCH_REPS` rounds
//! (default 1), the median printed:
//! - **paramdex**: a `Writer` on `remote::ObjectUpload` adds `PARAMDEX_BENCH_UPLOAD_MIB` MiB
//!   (default 2048) as 4 MiB uint8 tensors, and `finish` completes the upload (records,
//!   index, checksums: what `paramdex convert model.pdx s3://...` does).
//! - **object_store**: the crate's own `WriteMultipart` with the same part size, waiting for
//!   capacity at the same concurrency, given the same number of bytes from the same buffers.
//!
//! `PARAMDEX_BENCH_UPLOAD_SWEEP=1` runs part sizes 8, 16, 32 MiB at concurrency 4 and 8 (to
//! choose the defaults); otherwise the defaults only. Objects are deleted after each upload
//! (the cluster keeps 3 replicas on this machine's disk). Nothing here asserts a time.

#[allow(dead_code)]
#[path = "../tests/support/garage.rs"]
mod garage;

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::WriteMultipart;
use object_store::{ObjectStoreExt, PutPayload};
use paramdex::remote::{
    ObjectLocation, ObjectUpload, UploadOptions, DEFAULT_PART_SIZE, DEFAULT_UPLOAD_CONCURRENCY,
};
use paramdex::{DType, Tensor, Writer, WriterOptions};

const MIB: usize = 1 << 20;
const TENSOR: usize = 4 * MIB;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn s3(g: &garage::Garage) -> Arc<AmazonS3> {
    Arc::new(
        AmazonS3Builder::new()
            .with_endpoint(g.endpoint())
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_region(g.region())
            .with_bucket_name(g.bucket())
            .with_access_key_id(g.access_key_id())
            .with_secret_access_key(g.secret_access_key())
            .build()
            .unwrap(),
    )
}

/// Tensor `i`'s bytes: the shared buffer with its number in the first 8 bytes.
fn tensor(buf: &mut [u8], i: usize) {
    buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
}

/// paramdex: the checkpoint written through the Writer into a multipart upload. Returns the
/// seconds and the object's length.
fn ours(
    s: &Arc<AmazonS3>,
    rt: &Arc<tokio::runtime::Runtime>,
    key: &str,
    tensors: usize,
    opts: &UploadOptions,
) -> (f64, u64) {
    let mut buf: Vec<u8> = (0..TENSOR).map(|i| ((i * 131) >> 7) as u8).collect();
    let start = Instant::now();
    let loc = ObjectLocation {
        store: s.clone(),
        multipart: Some(s.clone()),
        path: ObjectPath::from(key),
        url: format!("s3://bench/{key}"),
        runtime: rt.clone(),
    };
    let up = ObjectUpload::new(loc, opts).unwrap();
    let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
    for i in 0..tensors {
        tensor(&mut buf, i);
        w.add(
            format!("model.layers.{i:04}.weight"),
            Tensor::new(DType::UInt8, &[TENSOR as u64], &buf),
        )
        .unwrap();
    }
    let stats = w.finish().unwrap();
    (start.elapsed().as_secs_f64(), stats.file_len)
}

/// object_store's WriteMultipart: `len` bytes from the same buffers, `part` bytes per part,
/// at most `concurrency` parts in flight.
fn plain(
    s: &Arc<AmazonS3>,
    rt: &tokio::runtime::Runtime,
    key: &str,
    len: u64,
    part: usize,
    concurrency: usize,
) -> f64 {
    let mut buf: Vec<u8> = (0..TENSOR).map(|i| ((i * 131) >> 7) as u8).collect();
    let start = Instant::now();
    rt.block_on(async {
        let upload = s.put_multipart(&ObjectPath::from(key)).await.unwrap();
        let mut w = WriteMultipart::new_with_chunk_size(upload, part);
        let mut left = len;
        let mut i = 0;
        while left > 0 {
            tensor(&mut buf, i);
            let n = (TENSOR as u64).min(left) as usize;
            w.wait_for_capacity(concurrency).await.unwrap();
            w.write(&buf[..n]);
            left -= n as u64;
            i += 1;
        }
        w.finish().await.unwrap();
    });
    start.elapsed().as_secs_f64()
}

fn delete(s: &AmazonS3, rt: &tokio::runtime::Runtime, key: &str) {
    rt.block_on(s.delete(&ObjectPath::from(key))).unwrap();
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` runs it with no argument: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    let Some(g) = garage::start_or_skip("benches/remote_upload.rs") else {
        return;
    };
    let rt = Arc::new(
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
    );
    let s = s3(&g);
    let ready = Instant::now();
    while let Err(e) =
        rt.block_on(s.put(&ObjectPath::from("ready"), PutPayload::from_static(b"ok")))
    {
        assert!(
            ready.elapsed() < Duration::from_secs(60),
            "garage not writable: {e}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let mib = env_usize("PARAMDEX_BENCH_UPLOAD_MIB", 2048);
    let reps = env_usize("PARAMDEX_BENCH_REPS", 1).max(1);
    let tensors = (mib * MIB).div_ceil(TENSOR);
    let configs: Vec<(usize, usize)> = if std::env::var("PARAMDEX_BENCH_UPLOAD_SWEEP").is_ok() {
        [8, 16, 32]
            .iter()
            .flat_map(|&p| [4, 8].map(|c| (p * MIB, c)))
            .collect()
    } else {
        vec![(DEFAULT_PART_SIZE, DEFAULT_UPLOAD_CONCURRENCY)]
    };
    println!(
        "upload of a native checkpoint of {tensors} x 4 MiB tensors to a 3-node Garage cluster \
         on loopback; median of {reps}"
    );
    println!(
        "{:>9} {:>11} | {:>22} | {:>22} | {:>6}",
        "part MiB", "concurrency", "paramdex Writer s  MB/s", "WriteMultipart s  MB/s", "ratio"
    );
    for (part, concurrency) in configs {
        let opts = UploadOptions {
            part_size: part,
            concurrency,
        };
        let (mut a, mut b) = (Vec::new(), Vec::new());
        let mut len = 0;
        for _ in 0..reps {
            let (t, n) = ours(&s, &rt, "bench/paramdex.pdx", tensors, &opts);
            delete(&s, &rt, "bench/paramdex.pdx");
            len = n;
            a.push(t);
            b.push(plain(&s, &rt, "bench/plain.bin", len, part, concurrency));
            delete(&s, &rt, "bench/plain.bin");
        }
        let (ta, tb) = (median(&mut a), median(&mut b));
        let mbps = |t: f64| len as f64 / t / 1e6;
        println!(
            "{:>9} {:>11} | {:>12.2} {:>9.0} | {:>12.2} {:>9.0} | {:>5.0}%",
            part / MIB,
            concurrency,
            ta,
            mbps(ta),
            tb,
            mbps(tb),
            100.0 * tb / ta
        );
    }
    g.shutdown();
}
