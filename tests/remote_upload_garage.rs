//! Native files written straight to a real Garage cluster (3 nodes, replication 3;
//! `tests/support/garage.rs`) by multipart upload (`paramdex::remote::ObjectUpload` under a
//! `Writer`): the object is byte for byte the file the same writes give locally, read back by
//! ranges with every checksum checked; a writer dropped unfinished, a write failing half-way
//! and refused credentials leave nothing under the name (and an object already there intact),
//! the multipart upload aborted (Garage's own count of open uploads goes back to 0).
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

mod support;

use std::io::{self, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::aws::AmazonS3;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStoreExt, PutPayload};
use paramdex::remote::{
    ObjectLocation, ObjectRange, ObjectUpload, RemoteOptions, UploadCounters, UploadOptions,
    MIN_PART_SIZE,
};
use paramdex::Reader;
use paramdex::{
    DType, Error, RemoteProblem, Tensor, WriteBackend, WriteDestination, Writer, WriterOptions,
};
use support::garage::{self, Garage};
use support::s3::{get, put_when_writable, runtime};

const PART: usize = MIN_PART_SIZE;

fn s3(g: &Garage, secret: &str) -> Arc<AmazonS3> {
    Arc::new(support::s3::client(g, secret))
}

fn location(
    g: &Garage,
    rt: &Arc<tokio::runtime::Runtime>,
    key: &str,
    secret: &str,
) -> ObjectLocation {
    let s = s3(g, secret);
    ObjectLocation {
        store: s.clone(),
        multipart: Some(s),
        path: ObjectPath::from(key),
        url: format!("s3://{}/{key}", g.bucket()),
        runtime: rt.clone(),
    }
}

/// The shared cluster, once it takes writes (its first write may come a moment after start).
fn cluster(test: &str) -> Option<&'static Garage> {
    let g = garage::shared(test)?;
    let rt = runtime();
    let s = s3(g, g.secret_access_key());
    let ready = PutPayload::from_static(b"ok");
    put_when_writable(&rt, &*s, "ready", ready, Duration::from_millis(200))
        .unwrap_or_else(|e| panic!("garage still not writable after 60 s: {e}"));
    Some(g)
}

/// The bucket's unfinished multipart uploads as `garage bucket info` counts them (a line
/// `Unfinished uploads: N multipart uploads`, absent when there are none).
fn unfinished_multipart(g: &Garage) -> u64 {
    let info = g.cli(0, &["bucket", "info", g.bucket()]).unwrap();
    info.lines()
        .find_map(|l| {
            let rest = l.trim().strip_prefix("Unfinished uploads:")?;
            let n = rest.trim().strip_suffix("multipart uploads")?;
            n.trim().parse().ok()
        })
        .unwrap_or(0)
}

/// Polls [`unfinished_multipart`] until `ok` holds (Garage updates its counters
/// asynchronously), for at most 30 s.
fn wait_unfinished(g: &Garage, ok: impl Fn(u64) -> bool) {
    let start = Instant::now();
    loop {
        let n = unfinished_multipart(g);
        if ok(n) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "unfinished multipart uploads: {n}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
        .collect()
}

fn upload(loc: ObjectLocation, concurrency: usize) -> (ObjectUpload, UploadCounters) {
    let up = ObjectUpload::new(
        loc,
        &UploadOptions {
            part_size: PART,
            concurrency,
        },
    )
    .unwrap();
    let c = up.counters();
    (up, c)
}

/// What the round trip writes: small tensors, two of 9 MiB (checksum patched after the data),
/// and a streamed one of 3.5 parts (its header's part held while later parts upload).
fn write_model(w: &mut Writer) -> Vec<(String, Vec<u8>)> {
    let mut tensors = Vec::new();
    for i in 0..40 {
        tensors.push((format!("layers.{i:02}.bias"), pattern(256 + i, i as u8)));
    }
    tensors.push(("layers.big.a".into(), pattern(9 << 20, 1)));
    tensors.push(("layers.big.b".into(), pattern((9 << 20) + 3, 2)));
    for (name, data) in &tensors {
        w.add(name, Tensor::new(DType::UInt8, &[data.len() as u64], data))
            .unwrap();
    }
    let streamed = pattern(3 * PART + PART / 2, 3);
    let mut t = w
        .begin("z.streamed", DType::UInt8, &[streamed.len() as u64], &[])
        .unwrap();
    for chunk in streamed.chunks(1 << 20) {
        t.write_all(chunk).unwrap();
    }
    t.finish().unwrap();
    tensors.push(("z.streamed".into(), streamed));
    tensors
}

/// Several parts, out of order around the held ones; the object is the local file's bytes,
/// and reads back by ranges with every checksum checked.
#[test]
fn a_native_file_is_uploaded_in_parts_and_reads_back() {
    let Some(g) = cluster("a_native_file_is_uploaded_in_parts_and_reads_back") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let key = "upload/m.pdx";
        let (up, counters) = upload(location(g, &rt, key, g.secret_access_key()), 3);
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        let tensors = write_model(&mut w);
        let stats = w.finish().unwrap();

        let dir = tempfile::tempdir().unwrap();
        let local = dir.path().join("m.pdx");
        let mut lw = Writer::create(&local).unwrap();
        write_model(&mut lw);
        lw.finish().unwrap();
        let expect = std::fs::read(&local).unwrap();

        let s = s3(g, g.secret_access_key());
        let got = get(&rt, &s, key).unwrap();
        assert_eq!(got.len() as u64, stats.file_len);
        assert!(
            got == expect,
            "the uploaded object differs from the local file"
        );
        let c = counters.stats();
        let parts = expect.len().div_ceil(PART) as u64;
        assert_eq!((c.parts, c.completed, c.aborted), (parts, 1, 0), "{c:?}");
        assert_eq!(c.requests, parts + 2, "create, the parts, complete: {c:?}");
        // Bounded memory: the parts in flight (3), one queued, the one filling, two held.
        assert!(c.peak_buffered <= 7 * PART as u64, "{c:?}");

        let src = ObjectRange::open(
            s.clone(),
            ObjectPath::from(key),
            format!("s3://{}/{key}", g.bucket()),
            rt.clone(),
            RemoteOptions::default().tail_bytes,
        )
        .unwrap();
        let r = Reader::from_range_read(Arc::new(src), RemoteOptions::default()).unwrap();
        for (name, data) in &tensors {
            let t = r.get(name).unwrap().unwrap();
            assert!(t.data() == data.as_slice(), "{name}");
        }
    });
}

/// A writer dropped before `finish`: the multipart upload is aborted, no object appears, and
/// an object already under the name is untouched.
#[test]
fn a_dropped_writer_leaves_nothing_and_the_old_object_intact() {
    let Some(g) = cluster("a_dropped_writer_leaves_nothing_and_the_old_object_intact") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3(g, g.secret_access_key());
        let (up, counters) = upload(location(g, &rt, "drop/new.pdx", g.secret_access_key()), 2);
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        let data = pattern(3 * PART, 5);
        w.add("x", Tensor::new(DType::UInt8, &[data.len() as u64], &data))
            .unwrap();
        // Garage counts the bucket's open multipart uploads (`garage bucket info`): ours is.
        wait_unfinished(g, |n| n >= 1);
        drop(w);
        let c = counters.stats();
        assert!(c.parts >= 1, "parts went out before the drop: {c:?}");
        assert_eq!((c.aborted, c.completed), (1, 0), "{c:?}");
        assert_eq!(get(&rt, &s, "drop/new.pdx"), None);
        // And once aborted, no upload is left open (other tests of this binary finish or
        // abort theirs too).
        wait_unfinished(g, |n| n == 0);

        rt.block_on(s.put(
            &ObjectPath::from("drop/old.pdx"),
            PutPayload::from_static(b"old"),
        ))
        .unwrap();
        let (up, counters) = upload(location(g, &rt, "drop/old.pdx", g.secret_access_key()), 2);
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        let mut t = w
            .begin("s", DType::UInt8, &[(4 * PART) as u64], &[])
            .unwrap();
        t.write_all(&pattern(3 * PART, 6)).unwrap();
        drop(t);
        assert!(
            w.finish().is_err(),
            "a dropped stream makes the writer unusable"
        );
        assert_eq!(counters.stats().aborted, 1);
        assert_eq!(get(&rt, &s, "drop/old.pdx").unwrap(), b"old");
    });
}

/// An object upload whose writes fail after `budget` bytes (the injected fault).
struct FailAfter {
    inner: ObjectUpload,
    budget: u64,
}

impl Write for FailAfter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.len() as u64 > self.budget {
            return Err(io::Error::other("injected write failure"));
        }
        self.budget -= buf.len() as u64;
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl Seek for FailAfter {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        self.inner.seek(pos)
    }
}

impl WriteBackend for FailAfter {
    fn sync(&mut self) -> io::Result<()> {
        self.inner.sync()
    }
    fn will_patch(&mut self, offset: u64) -> io::Result<()> {
        self.inner.will_patch(offset)
    }
}

impl WriteDestination for FailAfter {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn commit(&mut self) -> paramdex::Result<()> {
        self.inner.commit()
    }
}

/// A write failing half-way (after parts went out): the error comes back, nothing is visible,
/// the previous object stays; refused credentials: `Denied`, naming the URL, nothing visible.
#[test]
fn a_failed_write_or_refused_credentials_leave_the_old_object() {
    let Some(g) = cluster("a_failed_write_or_refused_credentials_leave_the_old_object") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3(g, g.secret_access_key());
        let key = "fail/m.pdx";
        rt.block_on(s.put(&ObjectPath::from(key), PutPayload::from_static(b"previous")))
            .unwrap();
        let (up, counters) = upload(location(g, &rt, key, g.secret_access_key()), 2);
        let failing = FailAfter {
            inner: up,
            budget: (3 * PART) as u64,
        };
        let mut w = Writer::create_on(Box::new(failing), WriterOptions::default()).unwrap();
        let data = pattern(PART, 7);
        let mut failed = None;
        for i in 0..8 {
            if let Err(e) = w.add(
                format!("t{i}"),
                Tensor::new(DType::UInt8, &[PART as u64], &data),
            ) {
                failed = Some(e);
                break;
            }
        }
        let e = failed.expect("the injected failure surfaces as an error");
        assert!(e.to_string().contains("injected write failure"), "{e}");
        assert!(w.finish().is_err());
        // The multipart upload was open (parts had gone out) and is aborted.
        let c = counters.stats();
        assert_eq!((c.aborted, c.completed), (1, 0), "{c:?}");
        assert_eq!(get(&rt, &s, key).unwrap(), b"previous");

        // Refused credentials: the first part's upload is refused; the error names the URL.
        let bad = "0000000000000000000000000000000000000000000000000000000000000000";
        let (up, _) = upload(location(g, &rt, key, bad), 2);
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        let mut err = None;
        for i in 0..8 {
            if let Err(e) = w.add(
                format!("t{i}"),
                Tensor::new(DType::UInt8, &[PART as u64], &data),
            ) {
                err = Some(e);
                break;
            }
        }
        let e = match err {
            Some(e) => e,
            None => w.finish().unwrap_err(),
        };
        let text = e.to_string();
        assert!(
            text.contains(&format!("s3://{}/{key}", g.bucket())),
            "{text}"
        );
        assert!(
            matches!(
                &e,
                Error::Remote {
                    problem: RemoteProblem::Denied,
                    ..
                }
            ) || text.contains("Denied")
                || text.contains("403"),
            "{e:?}"
        );
        assert_eq!(get(&rt, &s, key).unwrap(), b"previous");

        // A small object refused at its one PUT at finish: a structured Remote error.
        let (up, _) = upload(location(g, &rt, key, bad), 2);
        let mut w = Writer::create_on(Box::new(up), WriterOptions::default()).unwrap();
        w.add("x", Tensor::new(DType::UInt8, &[3], b"abc")).unwrap();
        match w.finish() {
            Err(Error::Remote { problem, url, .. }) => {
                assert_eq!(problem, RemoteProblem::Denied);
                assert!(url.ends_with(key), "{url}");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(get(&rt, &s, key).unwrap(), b"previous");
    });
}
