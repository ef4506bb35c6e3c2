//! Requests, bytes and time to open a checkpoint in an object store and read one tensor by name
//! (issue 15; BENCHMARKS.md "Object storage"), at 1,000, 100,000 and 1,000,000 tensors, for
//! three layouts of the same tensors on the same server (a real 3-node Garage cluster on
//! loopback, `tests/support/garage.rs`):
//!
//! - **paramdex**: a native file read by [`Reader`] (the tail, the header's block if the
//!   tail lacks it, the tensor's index block, its record; SPEC.md 8.4);
//! - **safetensors**: the reads its layout needs at the least: the 8-byte header length, the
//!   JSON header (parsed, as a loader must, to find the tensor), the tensor's bytes;
//! - **TensorFlow**: a checkpoint in TensorFlow's layout (the entries alone in `PREFIX.index`,
//!   the data in `PREFIX.data-00000-of-00001`): the `.index` object whole (as TensorFlow reads it through a
//!   file system), the entry looked up in it, and the tensor's bytes from the data object.
//!
//! Requests and bytes are counted by the reader ([`RangeRead::stats`]) for paramdex and by this
//! program for the two others (each ranged GET is one request). Times are medians of
//! `PARAMDEX_BENCH_REPS` (default 5) rounds, interleaved, each a fresh open.
//!
//! ```sh
//! cargo bench --bench remote_requests
//! PARAMDEX_BENCH_COUNTS=1000,100000 cargo bench --bench remote_requests
//! ```
//!
//! Needs the `garage` binary (`cargo install garage --locked`; `$PARAMDEX_GARAGE`). Nothing here
//! asserts a time.

#[path = "../tests/support/garage.rs"]
#[allow(dead_code)]
mod garage;
#[allow(dead_code)]
#[path = "../tests/support/s3.rs"]
mod s3;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::path::Path as ObjectPath;
use object_store::{GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload};
use paramdex::raw::entry::IndexEntry;
use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::remote::{ObjectRange, RangeRead, RemoteOptions};
use paramdex::Reader;
use paramdex::{DType, MergeShardsOptions, ShardedSave, Tensor, Writer, WriterOptions};

/// Short names: safetensors refuses a header over 100,000,000 bytes, which 1M tensors with
/// names of 40 characters would pass (about 100 bytes of JSON each).
fn name(i: usize) -> String {
    format!("layers.{i}.wq")
}

/// One small float32 tensor per name: the case where the index, not the data, is the cost.
fn values(i: usize) -> Vec<u8> {
    (0..16u32)
        .flat_map(|k| ((i as u32).wrapping_mul(31).wrapping_add(k) as f32).to_le_bytes())
        .collect()
}

const SHAPE: [u64; 2] = [4, 4];

fn write_native(path: &Path, n: usize) {
    let mut w = Writer::create_with(path, WriterOptions::default()).unwrap();
    for i in 0..n {
        w.add(name(i), Tensor::new(DType::Float32, &SHAPE, &values(i)))
            .unwrap();
    }
    w.finish().unwrap();
}

/// TensorFlow's layout: `PREFIX.index` holds only the entries (a sharded checkpoint of one
/// shard, which TensorFlow reads as its own: SPEC.md 12), `PREFIX.data-00000-of-00001` the data.
fn write_tf_layout(prefix: &Path, n: usize) {
    let save = ShardedSave::new(prefix, 1).unwrap();
    let mut w = save.shard(0).unwrap();
    for i in 0..n {
        w.add(name(i), Tensor::new(DType::Float32, &SHAPE, &values(i)))
            .unwrap();
    }
    w.finish().unwrap();
    save.merge(&MergeShardsOptions::default()).unwrap();
}

fn write_safetensors(path: &Path, n: usize) {
    let data: Vec<(String, Vec<u8>)> = (0..n).map(|i| (name(i), values(i))).collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = data
        .iter()
        .map(|(k, v)| {
            let view = safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![4, 4], v)
                .unwrap();
            (k.clone(), view)
        })
        .collect();
    safetensors::tensor::serialize_to_file(views, None, path).unwrap();
}

struct Server {
    store: Arc<dyn ObjectStore>,
    rt: Arc<tokio::runtime::Runtime>,
    bucket: String,
}

impl Server {
    fn put_file(&self, key: &str, path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        let store = self.store.clone();
        let key = ObjectPath::from(key);
        self.rt
            .block_on(async move { store.put(&key, PutPayload::from(bytes)).await })
            .unwrap();
    }

    /// One ranged GET (or the whole object for `None`).
    fn get(&self, key: &str, range: Option<std::ops::Range<u64>>) -> Vec<u8> {
        let store = self.store.clone();
        let key = ObjectPath::from(key);
        let opts = GetOptions {
            range: range.map(GetRange::Bounded),
            ..Default::default()
        };
        self.rt
            .block_on(async move { store.get_opts(&key, opts).await?.bytes().await })
            .unwrap()
            .to_vec()
    }
}

/// Requests, bytes, and the time of one open + get.
#[derive(Clone, Copy, Default)]
struct Cost {
    requests: u64,
    bytes: u64,
    time: Duration,
}

fn paramdex_cost(s: &Server, key: &str, want: &str) -> Cost {
    let t = Instant::now();
    let opts = RemoteOptions::default();
    let loc = ObjectPath::from(key);
    let src: Arc<dyn RangeRead> = Arc::new(
        ObjectRange::open(
            s.store.clone(),
            loc,
            format!("s3://{}/{key}", s.bucket),
            s.rt.clone(),
            opts.tail_bytes,
        )
        .unwrap(),
    );
    let r = Reader::from_range_read(src.clone(), opts).unwrap();
    let got = r.get(want.as_bytes()).unwrap().unwrap();
    let time = t.elapsed();
    assert_eq!(got.data().len(), 64);
    let st = src.stats();
    Cost {
        requests: st.requests,
        bytes: st.bytes,
        time,
    }
}

fn safetensors_cost(s: &Server, key: &str, want: &str) -> Cost {
    let t = Instant::now();
    let head = s.get(key, Some(0..8));
    let n = u64::from_le_bytes(head[..8].try_into().unwrap());
    let header = s.get(key, Some(8..8 + n));
    let json: serde_json::Value = serde_json::from_slice(&header).unwrap();
    let offs = &json[want]["data_offsets"];
    let (a, b) = (offs[0].as_u64().unwrap(), offs[1].as_u64().unwrap());
    let data = s.get(key, Some(8 + n + a..8 + n + b));
    let time = t.elapsed();
    assert_eq!(data.len(), 64);
    Cost {
        requests: 3,
        bytes: (head.len() + header.len() + data.len()) as u64,
        time,
    }
}

fn tf_cost(s: &Server, prefix: &str, want: &str) -> Cost {
    let t = Instant::now();
    let index = s.get(&format!("{prefix}.index"), None);
    let table = Table::open(&index, TableReadOptions::default()).unwrap();
    let entry = table
        .get(want.as_bytes(), |v, at| IndexEntry::decode(v, at, 32))
        .unwrap()
        .unwrap()
        .unwrap();
    let data = s.get(
        &format!("{prefix}.data-00000-of-00001"),
        Some(entry.offset..entry.offset + entry.size),
    );
    let time = t.elapsed();
    assert_eq!(data.len(), 64);
    Cost {
        requests: 2,
        bytes: (index.len() + data.len()) as u64,
        time,
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let g = match garage::Garage::start() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("remote_requests: no Garage cluster ({e}); nothing measured");
            return;
        }
    };
    let rt = s3::runtime();
    let store = s3::plain_store(&g, g.endpoint());
    let s = Server {
        store,
        rt,
        bucket: g.bucket().to_string(),
    };
    let counts: Vec<usize> = std::env::var("PARAMDEX_BENCH_COUNTS")
        .unwrap_or_else(|_| "1000,100000,1000000".into())
        .split(',')
        .map(|c| c.trim().parse().expect("PARAMDEX_BENCH_COUNTS: numbers"))
        .collect();
    let reps: usize = std::env::var("PARAMDEX_BENCH_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5);
    let dir = tempfile::tempdir().unwrap();
    println!(
        "| tensors | layout | object bytes | requests | bytes transferred | open + get (median of {reps}) |"
    );
    println!("|---:|---|---:|---:|---:|---:|");
    for &n in &counts {
        let native = dir.path().join(format!("m{n}.pdx"));
        write_native(&native, n);
        let st = dir.path().join(format!("m{n}.safetensors"));
        write_safetensors(&st, n);
        let tf = dir.path().join(format!("tf{n}"));
        write_tf_layout(&tf, n);
        let tf_index = dir.path().join(format!("tf{n}.index"));
        let tf_data = dir.path().join(format!("tf{n}.data-00000-of-00001"));
        let (kn, ks, kt) = (
            format!("bench/m{n}.pdx"),
            format!("bench/m{n}.safetensors"),
            format!("bench/tf{n}"),
        );
        s.put_file(&kn, &native);
        s.put_file(&ks, &st);
        s.put_file(&format!("{kt}.index"), &tf_index);
        s.put_file(&format!("{kt}.data-00000-of-00001"), &tf_data);
        let sizes = [
            std::fs::metadata(&native).unwrap().len(),
            std::fs::metadata(&st).unwrap().len(),
            std::fs::metadata(&tf_index).unwrap().len()
                + std::fs::metadata(&tf_data).unwrap().len(),
        ];
        let want = name(n / 2 + 1);
        let mut costs = [Cost::default(); 3];
        let mut times: [Vec<Duration>; 3] = Default::default();
        for _ in 0..reps {
            let round = [
                paramdex_cost(&s, &kn, &want),
                safetensors_cost(&s, &ks, &want),
                tf_cost(&s, &kt, &want),
            ];
            for (k, c) in round.iter().enumerate() {
                costs[k] = *c;
                times[k].push(c.time);
            }
        }
        for (k, layout) in ["paramdex", "safetensors", "TensorFlow"].iter().enumerate() {
            println!(
                "| {n} | {layout} | {} | {} | {} | {:.2} ms |",
                sizes[k],
                costs[k].requests,
                costs[k].bytes,
                median(times[k].clone()).as_secs_f64() * 1e3
            );
        }
        for p in [native, st, tf_index, tf_data] {
            std::fs::remove_file(p).ok();
        }
    }
    g.shutdown();
}
