//! A native file read from a real Garage cluster (3 nodes, replication 3; `tests/support/
//! garage.rs`) through `paramdex::remote`: the request counts SPEC.md 8.3 promises (open <= 2
//! GETs, get <= 2), the bytes, and the errors of an object replaced or cut short while open,
//! a missing object, and refused credentials, each naming the URL.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

mod support;

use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;
use paramdex::remote::{ObjectRange, RangeRead, RemoteOptions};
use paramdex::Reader;
use paramdex::{
    DType, DataCompression, Error, RemoteProblem, Tensor, VerifyOptions, Writer, WriterOptions,
};
use std::sync::Arc;
use support::garage::{self, Garage};
use support::s3::{self, put, runtime, set_aws_env};

fn store(g: &Garage, secret: &str) -> Arc<dyn ObjectStore> {
    Arc::new(s3::client(g, secret))
}

fn name(i: usize) -> String {
    format!("model.layers.{i}.mlp.up_proj.weight")
}

fn data(i: usize) -> Vec<u8> {
    (0..64).map(|k| (i * 7 + k) as u8).collect()
}

/// A native file of `n` tensors, as bytes.
fn native(n: usize) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            sync: false,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..n {
        w.add(name(i), Tensor::new(DType::UInt8, &[64], &data(i)))
            .unwrap();
    }
    w.finish().unwrap();
    std::fs::read(&path).unwrap()
}

fn open(
    g: &Garage,
    rt: &Arc<tokio::runtime::Runtime>,
    key: &str,
) -> paramdex::Result<(Arc<ObjectRange>, Reader)> {
    let url = format!("s3://{}/{key}", g.bucket());
    let src = Arc::new(ObjectRange::open(
        store(g, g.secret_access_key()),
        ObjectPath::from(key),
        url,
        rt.clone(),
        RemoteOptions::default().tail_bytes,
    )?);
    let r = Reader::from_range_read(src.clone(), RemoteOptions::default())?;
    Ok((src, r))
}

/// Open and get of one tensor among 1,000 and 100,000: one GET to open, at most 2 to get, the
/// right bytes.
#[test]
fn open_and_get_are_at_most_two_gets_each() {
    let Some(g) = garage::shared("open_and_get_are_at_most_two_gets_each") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = store(g, g.secret_access_key());
        for n in [1_000usize, 100_000] {
            let key = format!("counts/m{n}.pdx");
            put(&rt, &s, &key, native(n));
            let (src, r) = open(g, &rt, &key).unwrap();
            let opened = src.stats();
            // Version 3: the tail holds the header's block too.
            assert_eq!(opened.requests, 1, "{n}: open {opened:?}");
            let i = n * 2 / 3;
            let before = src.stats().requests;
            let t = r.get(name(i)).unwrap().unwrap();
            assert_eq!(t.data(), data(i));
            assert!(src.stats().requests - before <= 2, "{n}: get");
        }
    });
}

/// The object replaced while open: the next read is refused (`Replaced`), never the new
/// object's bytes; cut short: `Truncated` or `Replaced`; missing: `NotFound`; a wrong secret:
/// `Denied`. Each error names the URL.
#[test]
fn replaced_missing_and_refused_objects_are_errors_naming_the_url() {
    let Some(g) = garage::shared("replaced_missing_and_refused_objects_are_errors_naming_the_url")
    else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = store(g, g.secret_access_key());
        let key = "errors/m.pdx";
        put(&rt, &s, key, native(20_000));
        let (_, r) = open(g, &rt, key).unwrap();
        put(&rt, &s, key, native(20_001));
        match r.get(name(5_000)) {
            Err(Error::Remote { url, problem, .. }) => {
                assert_eq!(problem, RemoteProblem::Replaced);
                assert!(url.ends_with(key), "{url}");
            }
            other => panic!("{other:?}"),
        }
        match open(g, &rt, "errors/absent.pdx") {
            Err(Error::Remote { problem, .. }) => assert_eq!(problem, RemoteProblem::NotFound),
            other => panic!("{other:?}"),
        }
        let url = format!("s3://{}/{key}", g.bucket());
        let denied = ObjectRange::open(
            store(
                g,
                "0000000000000000000000000000000000000000000000000000000000000000",
            ),
            ObjectPath::from(key),
            url,
            rt.clone(),
            4096,
        );
        match denied {
            Err(Error::Remote { problem, .. }) => assert_eq!(problem, RemoteProblem::Denied),
            other => panic!("{other:?}"),
        }
    });
}

/// `open_any` of an `s3://bucket/key` URL, configured by the usual `AWS_*` variables, lists
/// and loads as a local file does (every command of the CLI reads through `open_any`).
#[test]
fn open_any_reads_an_s3_url_configured_by_the_environment() {
    let Some(g) = garage::shared("open_any_reads_an_s3_url_configured_by_the_environment") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = store(g, g.secret_access_key());
        put(&rt, &s, "any/m.pdx", native(300));
        // The only test of this binary that sets them (tests run on threads of one process).
        set_aws_env(g);
        let url = format!("s3://{}/any/m.pdx", g.bucket());
        let store = paramdex::interop::open_any(&url).unwrap();
        let list = store.list().unwrap();
        assert_eq!(list.len(), 300);
        let mut names: Vec<Vec<u8>> = (0..300).map(|i| name(i).into_bytes()).collect();
        names.sort();
        assert_eq!(
            list.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
            names
        );
        let t = store.load(name(123).as_bytes()).unwrap().unwrap();
        assert_eq!(&*t.data.raw_bytes(), data(123).as_slice());
        let v = store.verify(0).unwrap();
        assert_eq!(v.tensors, 300);
        assert!(store.load(b"absent").unwrap().is_none());
        // A missing bucket and a missing key: two errors, each naming the URL.
        for (missing, want) in [
            (
                "s3://no-such-bucket-pdx/any/m.pdx".to_string(),
                RemoteProblem::NoSuchBucket,
            ),
            (
                format!("s3://{}/any/no-such.pdx", g.bucket()),
                RemoteProblem::NotFound,
            ),
        ] {
            match paramdex::interop::open_any(&missing) {
                Err(e @ Error::Remote { .. }) => {
                    let Error::Remote { url, problem, .. } = &e else {
                        unreachable!()
                    };
                    assert_eq!(*problem, want, "{missing}: {e}");
                    assert!(url.contains(&missing), "{missing}: {url}");
                    assert!(!e.to_string().contains('<'), "no XML: {e}");
                }
                Err(e) => panic!("{missing}: {e:?}"),
                Ok(_) => panic!("{missing}: opened"),
            }
        }
    });
}

/// Float32 values of a smooth wave, as bytes: data that lossless compression shrinks.
fn wave(i: usize, n: usize) -> Vec<u8> {
    (0..n)
        .flat_map(|k| (((i * n + k) as f32) * 0.001).sin().to_le_bytes())
        .collect()
}

/// A file with compressed records (issue 40) in the bucket: it reads byte for byte (get, a
/// slice, a load of every tensor), verifies, and fetches fewer bytes than the plain file holds;
/// a damaged chunk is refused naming the tensor.
#[test]
fn compressed_records_read_and_verify_from_the_bucket() {
    let Some(g) = garage::shared("compressed_records_read_and_verify_from_the_bucket") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = store(g, g.secret_access_key());
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.pdx");
        let mut w = Writer::create_with(
            &path,
            WriterOptions {
                sync: false,
                data_compression: DataCompression::Lossless,
                ..Default::default()
            },
        )
        .unwrap();
        let n = 64 * 1024;
        for i in 0..4 {
            w.add(
                format!("w{i}"),
                Tensor::new(DType::Float32, &[64, 1024], &wave(i, n)),
            )
            .unwrap();
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.len() < 4 * 4 * n, "compressed: {} bytes", bytes.len());
        put(&rt, &s, "lossless/c.pdx", bytes.clone());
        let (src, r) = open(g, &rt, "lossless/c.pdx").unwrap();
        assert_eq!(r.header().format_version, 4);
        for i in 0..4 {
            let t = r.get(format!("w{i}")).unwrap().unwrap();
            assert!(t.is_compressed());
            assert_eq!(t.data(), wave(i, n).as_slice(), "w{i}");
        }
        let region = paramdex::Region::new(vec![10, 100], vec![3, 7]).unwrap();
        let part = r.get_slice("w2", &region).unwrap().unwrap();
        let whole = wave(2, n);
        let want: Vec<u8> = (10..13)
            .flat_map(|row| whole[(row * 1024 + 100) * 4..(row * 1024 + 107) * 4].to_vec())
            .collect();
        assert_eq!(part.data(), want.as_slice());
        drop(src);
        // A load of every tensor by a fresh reader fetches the stored bytes, not the decoded.
        let (src, r) = open(g, &rt, "lossless/c.pdx").unwrap();
        let opened = src.stats().bytes;
        let all = r.load_all(&paramdex::LoadOptions::default()).unwrap();
        assert_eq!(all.len(), 4);
        let fetched = src.stats().bytes - opened;
        let stored: u64 = (0..4)
            .map(|i| r.get(format!("w{i}")).unwrap().unwrap().stored_len())
            .sum();
        assert!(stored < 4 * 4 * n as u64, "{stored}");
        // The stored bytes and the records' headers, a few hundred bytes each.
        assert!(fetched <= stored + 4096, "{fetched} for {stored} stored");
        r.verify_with(VerifyOptions::default()).unwrap();

        // A byte of the second tensor's stored data damaged: refused, the tensor named.
        let (offset, _) = {
            let m = Reader::open(&path).unwrap();
            let t = m.tensor("w1").unwrap();
            (t.data_offset(), t.stored_len())
        };
        let mut bad = bytes;
        bad[offset as usize + 100] ^= 0x40;
        put(&rt, &s, "lossless/bad.pdx", bad);
        let (_, r) = open(g, &rt, "lossless/bad.pdx").unwrap();
        let e = r.get("w1").map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("w1"), "{e}");
        assert!(r.verify().is_err());
        assert_eq!(r.get("w0").unwrap().unwrap().data(), wave(0, n).as_slice());
    });
}
