//! TensorFlow checkpoints, safetensors files and native files read over URLs from a real Garage
//! cluster (3 nodes, replication 3; `tests/support/garage.rs`), through the URL dispatcher
//! (`paramdex::interop::open_location`, which `open_any` uses for URLs):
//!
//! * every fixture of `tests/data/` (TensorFlow checkpoints of every kind there, safetensors
//!   files, native files), uploaded with plain `object_store` puts, reads over its URL exactly
//!   as the local reader reads it: the listing, every tensor's bytes (or the same kind of error),
//!   metadata, `verify`, data locations;
//! * the request counts of docs/remote.md: safetensors open (1 request; 2 for a header longer
//!   than the first read; 2 for a file whose name does not say safetensors) and get (1); a
//!   TensorFlow checkpoint opened by its `.index` (1) or prefix (2: the prefix is not an
//!   object), get (1 per tensor, the first read of a data object opening it);
//! * hostile objects: a truncated safetensors header, a TensorFlow data object cut short, a URL
//!   naming nothing: clear errors naming the URL.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures_util::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};
use paramdex::interop::{open_any, open_location, TensorData, TensorInfo, TensorStore, UrlOptions};
use paramdex::remote::ObjectLocation;
use paramdex::{Error, RemoteProblem};
use support::garage::{self, Garage};
use support::s3::{self, put_retried, runtime};

/// A store that counts the requests made through it (GETs, HEADs: every read; ranged reads
/// of several ranges go through `get_opts` too, by the trait's default `get_ranges`).
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ObjectStore>,
    reads: AtomicU64,
}

impl std::fmt::Display for Counting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Counting {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<ObjectPath>>,
    ) -> BoxStream<'static, object_store::Result<ObjectPath>> {
        self.inner.delete_stream(locations)
    }
    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&ObjectPath>,
        offset: &ObjectPath,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
    async fn rename_opts(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        self.inner.rename_opts(from, to, options).await
    }
}

/// The location of `key` in the bucket, read through `store`.
fn location(
    g: &Garage,
    store: Arc<dyn ObjectStore>,
    rt: &Arc<tokio::runtime::Runtime>,
    key: &str,
) -> ObjectLocation {
    ObjectLocation {
        store,
        multipart: None,
        path: ObjectPath::from(key),
        url: format!("s3://{}/{key}", g.bucket()),
        runtime: rt.clone(),
    }
}

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data")
}

/// Every file under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else {
            out.push(p);
        }
    }
}

/// The variant of an error, to compare a remote error with the local one.
fn variant(e: &Error) -> std::mem::Discriminant<Error> {
    std::mem::discriminant(e)
}

/// Checks that `remote` reads as `local` does: listing, every tensor, metadata, verify, data
/// locations (`local_name`, `remote_name`: how each names the input, for data locations).
///
/// The remote native reader (`RemoteReader`) lists and loads LoD tensors without their LoD (its
/// listing reads no records): LoD is left out of the comparison for native files.
fn same(what: &str, local: &dyn TensorStore, remote: &dyn TensorStore) -> usize {
    assert_eq!(local.format(), remote.format(), "{what}");
    let native = local.format() == paramdex::interop::Format::Native;
    let no_lod = |mut t: TensorInfo| {
        if native {
            t.lod.clear();
        }
        t
    };
    let list = local.list().unwrap();
    assert_eq!(
        list.iter().cloned().map(no_lod).collect::<Vec<_>>(),
        remote
            .list()
            .unwrap()
            .into_iter()
            .map(no_lod)
            .collect::<Vec<_>>(),
        "{what}: listing"
    );
    assert_eq!(
        local.metadata().unwrap(),
        remote.metadata().unwrap(),
        "{what}: metadata"
    );
    for t in &list {
        let at = format!("{what}: tensor {}", String::from_utf8_lossy(&t.name));
        match (local.load(&t.name), remote.load(&t.name)) {
            (Ok(Some(l)), Ok(Some(r))) => {
                assert_eq!(no_lod(l.info), no_lod(r.info), "{at}");
                match (&l.data, &r.data) {
                    (TensorData::Bytes(a), TensorData::Bytes(b)) => assert!(a == b, "{at}"),
                    (TensorData::Strings(a), TensorData::Strings(b)) => assert_eq!(a, b, "{at}"),
                    _ => panic!("{at}: bytes against strings"),
                }
            }
            (Err(a), Err(b)) => assert_eq!(variant(&a), variant(&b), "{at}: {a} / {b}"),
            (l, r) => panic!("{at}: {:?} / {:?}", l.map(|_| ()), r.map(|_| ())),
        }
        let (l, r) = match (local.data_location(&t.name), remote.data_location(&t.name)) {
            (Ok(l), Ok(r)) => (l, r),
            // A tensor stored in slices has no one data location: the local reader says so, a
            // remote store may give none.
            (Err(Error::Sliced { .. }), Ok(None) | Err(Error::Sliced { .. })) => continue,
            (l, r) => panic!("{at}: data location {l:?} / {r:?}"),
        };
        // The remote native reader does not give data locations (its entries are read with
        // the tensors).
        if local.format() == paramdex::interop::Format::Native && r.is_none() {
            continue;
        }
        assert_eq!(
            l.map(|l| (l.offset, l.len, l.crc32c)),
            r.map(|r| (r.offset, r.len, r.crc32c)),
            "{at}: data location"
        );
    }
    assert!(remote.load(b"no such tensor").unwrap().is_none(), "{what}");
    match (local.verify(2), remote.verify(2)) {
        // The remote native reader counts the tensors' checksums, not the index blocks' (it
        // checks those as it reads them).
        (Ok(a), Ok(b)) if local.format() == paramdex::interop::Format::Native => {
            assert_eq!(
                (a.tensors, a.data_bytes),
                (b.tensors, b.data_bytes),
                "{what}: verify"
            )
        }
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{what}: verify"),
        (Err(a), Err(b)) => assert_eq!(variant(&a), variant(&b), "{what}: verify: {a} / {b}"),
        (a, b) => panic!("{what}: verify: {a:?} / {b:?}"),
    }
    list.len()
}

/// Every fixture of tests/data (TensorFlow checkpoints by prefix and by `.index`, safetensors
/// files, native files) read over its URL equals what the local reader gives.
#[test]
fn every_fixture_reads_over_its_url_as_locally() {
    let Some(g) = garage::shared("every_fixture_reads_over_its_url_as_locally") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        let root = data_dir();
        let mut all = Vec::new();
        for sub in ["tf", "tf_nul", "tf_opaque", "safetensors", "native/v1"] {
            files(&root.join(sub), &mut all);
        }
        let key_of = |p: &Path| {
            format!(
                "fixtures/{}",
                p.strip_prefix(&root).unwrap().to_str().unwrap()
            )
        };
        for f in &all {
            put_retried(&rt, &s, &key_of(f), std::fs::read(f).unwrap());
        }
        // The inputs: TF prefixes (and their .index), safetensors and native files.
        let mut inputs: Vec<(PathBuf, String)> = Vec::new();
        for f in &all {
            let name = f.file_name().unwrap().to_str().unwrap();
            if let Some(stem) = name.strip_suffix(".index") {
                let prefix = f.with_file_name(stem);
                inputs.push((prefix.clone(), key_of(&prefix)));
                inputs.push((f.clone(), key_of(f)));
            } else if name.ends_with(".safetensors") || name.ends_with(".pdx") {
                inputs.push((f.clone(), key_of(f)));
            }
        }
        let (mut tf, mut st, mut native, mut tensors) = (0, 0, 0, 0);
        for (path, key) in &inputs {
            let what = key.as_str();
            let local = match open_any(path) {
                Ok(l) => l,
                Err(e) => {
                    // A fixture the local reader refuses is refused over its URL too.
                    let r = open_location(location(g, s.clone(), &rt, key), &UrlOptions::default());
                    let r = r
                        .err()
                        .unwrap_or_else(|| panic!("{what}: opens remotely, not locally: {e}"));
                    assert_eq!(variant(&e), variant(&r), "{what}: {e} / {r}");
                    continue;
                }
            };
            let remote = open_location(location(g, s.clone(), &rt, key), &UrlOptions::default())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            tensors += same(what, &*local, &*remote);
            match local.format() {
                paramdex::interop::Format::TensorFlow => tf += 1,
                paramdex::interop::Format::Safetensors => st += 1,
                _ => native += 1,
            }
        }
        eprintln!("{tf} TensorFlow inputs, {st} safetensors, {native} native: {tensors} tensors");
        assert!(tf >= 10 && st >= 2 && native >= 10, "{tf} {st} {native}");
    });
}

/// A sharded paramdex checkpoint at a URL (by its prefix, its `.index`, or one of its data
/// objects) reaches the sharded reader's call point: it reads as locally once that reader is
/// wired there, and until then is `Error::Unsupported` naming the index's URL, never read as a
/// TensorFlow checkpoint or anything else.
#[test]
fn a_sharded_paramdex_checkpoint_reads_over_its_url_as_locally() {
    let Some(g) = garage::shared("a_sharded_paramdex_checkpoint_reads_over_its_url_as_locally")
    else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        let dir = data_dir().join("native/v2/sharded");
        let mut fs = Vec::new();
        files(&dir, &mut fs);
        for f in &fs {
            let name = f.file_name().unwrap().to_str().unwrap();
            put_retried(
                &rt,
                &s,
                &format!("sharded/{name}"),
                std::fs::read(f).unwrap(),
            );
        }
        let local = open_any(dir.join("ckpt")).unwrap();
        for key in [
            "sharded/ckpt",
            "sharded/ckpt.index",
            "sharded/ckpt.data-00001-of-00003",
        ] {
            let remote = open_location(location(g, s.clone(), &rt, key), &UrlOptions::default())
                .unwrap_or_else(|e| panic!("{key}: {e:?}"));
            assert!(same(key, &*local, &*remote) > 0, "{key}");
        }
    });
}

/// A safetensors file of `n` float32 tensors of `elems` elements, named long enough that the
/// header of 1,000 tensors is larger than the first read (64 KiB).
fn safetensors_file(n: usize, elems: usize) -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
    let tensors: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| {
            (
                format!("model.encoder.layers.{i}.self_attention.query_key_value.weight"),
                (0..elems * 4).map(|k| (i * 3 + k) as u8).collect(),
            )
        })
        .collect();
    let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d)| {
            (
                n.clone(),
                safetensors::tensor::TensorView::new(safetensors::Dtype::F32, vec![elems], d)
                    .unwrap(),
            )
        })
        .collect();
    let bytes = safetensors::serialize(views, None).unwrap();
    // In the file's order (one dtype: by name).
    let mut tensors = tensors;
    tensors.sort();
    (bytes, tensors)
}

/// Request counts of safetensors files over a URL. Open: one request (the first 64 KiB hold
/// the header length and the header); two for a header longer than that; two when the name
/// does not say safetensors and the object is larger than the first read from its end (256
/// KiB; then its start is read). Get: one request, none when the first read held the whole
/// file.
#[test]
fn safetensors_request_counts() {
    let Some(g) = garage::shared("safetensors_request_counts") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        // (tensors, elements each, key, open requests, requests per get)
        for (n, elems, key, open_requests, get_requests) in [
            (10, 4, "st-count/small.safetensors", 1, 0),
            (10, 4, "st-count/small-unnamed", 1, 0),
            (1000, 4, "st-count/long-header.safetensors", 2, 1),
            (100, 4096, "st-count/big.safetensors", 1, 1),
            (100, 4096, "st-count/big-unnamed", 2, 1),
        ] {
            let (bytes, tensors) = safetensors_file(n, elems);
            let header = u64::from_le_bytes(bytes[..8].try_into().unwrap());
            assert_eq!(header > 64 << 10, n == 1000, "{header}");
            put_retried(&rt, &s, key, bytes);
            let counting = Arc::new(Counting {
                inner: s.clone(),
                reads: AtomicU64::new(0),
            });
            let store = open_location(
                location(g, counting.clone(), &rt, key),
                &UrlOptions::default(),
            )
            .unwrap();
            assert_eq!(store.format(), paramdex::interop::Format::Safetensors);
            assert_eq!(
                counting.reads.load(Ordering::SeqCst),
                open_requests,
                "{key}: open"
            );
            assert_eq!(store.list().unwrap().len(), n);
            assert_eq!(
                counting.reads.load(Ordering::SeqCst),
                open_requests,
                "{key}: list"
            );
            // Tensors in the middle: their data lies outside the first reads (the first 64
            // KiB, or the last 256 KiB and then the first 256 KiB, which the native open's
            // probe of a file without its footer read and keeps).
            for i in (n * 2 / 10..n * 8 / 10).step_by(n / 10) {
                let (name, data) = &tensors[i];
                let before = counting.reads.load(Ordering::SeqCst);
                let t = store.load(name.as_bytes()).unwrap().unwrap();
                assert_eq!(&*t.data.raw_bytes(), data.as_slice(), "{key}: tensor {i}");
                assert_eq!(t.info.shape, vec![elems as u64]);
                let after = counting.reads.load(Ordering::SeqCst);
                assert_eq!(after - before, get_requests, "{key}: get");
            }
        }
    });
}

/// Request counts of a TensorFlow checkpoint over a URL: open by its `.index` is one request
/// (the index, small, read whole), by its prefix two (the prefix is no object: one 404); each
/// tensor one (the first in a data object opens it with the tensor's own range).
#[test]
fn tf_request_counts() {
    let Some(g) = garage::shared("tf_request_counts") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        let dir = data_dir().join("tf/basic/tf2");
        let mut fs = Vec::new();
        files(&dir, &mut fs);
        let index = fs
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "index"))
            .expect("a TF checkpoint in tests/data/tf/basic/tf2");
        let stem = index.file_stem().unwrap().to_str().unwrap().to_string();
        for f in &fs {
            let name = f.file_name().unwrap().to_str().unwrap();
            put_retried(
                &rt,
                &s,
                &format!("tf-count/{name}"),
                std::fs::read(f).unwrap(),
            );
        }
        let local = open_any(index).unwrap();
        let names: Vec<Vec<u8>> = local
            .list()
            .unwrap()
            .into_iter()
            .filter(|t| t.kind.numeric().is_some())
            .map(|t| t.name)
            .collect();
        assert!(names.len() >= 2, "{names:?}");
        for (key, open_requests) in [
            (format!("tf-count/{stem}.index"), 1),
            (format!("tf-count/{stem}"), 2),
        ] {
            let counting = Arc::new(Counting {
                inner: s.clone(),
                reads: AtomicU64::new(0),
            });
            let store = open_location(
                location(g, counting.clone(), &rt, &key),
                &UrlOptions::default(),
            )
            .unwrap();
            assert_eq!(store.format(), paramdex::interop::Format::TensorFlow);
            assert_eq!(
                counting.reads.load(Ordering::SeqCst),
                open_requests,
                "{key}: open"
            );
            for name in &names {
                let before = counting.reads.load(Ordering::SeqCst);
                let t = store.load(name).unwrap().unwrap();
                let l = local.load(name).unwrap().unwrap();
                assert!(l.data.raw_bytes() == t.data.raw_bytes());
                let after = counting.reads.load(Ordering::SeqCst);
                let size = l.info.nbytes;
                assert_eq!(after - before, u64::from(size > 0), "{key}: get");
            }
        }
    });
}

/// A TensorFlow checkpoint whose `.index` is larger than the first read (256 KiB): open by its
/// `.index` is two requests (its tail, then the rest: the reader needs all of it), and each
/// tensor one.
#[test]
fn tf_request_counts_with_a_large_index() {
    let Some(g) = garage::shared("tf_request_counts_with_a_large_index") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        let dir = tempfile::tempdir().unwrap();
        let native = dir.path().join("m.pdx");
        let mut w = paramdex::Writer::create(&native).unwrap();
        let n = 5000;
        let name = |i: usize| format!("model.encoder.layers.{i:05}.self_attention.dense.weight");
        for i in 0..n {
            w.add_values(name(i), &[2], &[i as f32, -(i as f32)])
                .unwrap();
        }
        w.finish().unwrap();
        let prefix = dir.path().join("ckpt");
        let src = open_any(&native).unwrap();
        paramdex::interop::export(
            &*src,
            paramdex::interop::OutputFormat::TensorFlow,
            &prefix,
            &paramdex::interop::ExportOptions::default(),
        )
        .unwrap();
        let index = std::fs::read(dir.path().join("ckpt.index")).unwrap();
        assert!(index.len() > 256 << 10, "{}", index.len());
        put_retried(&rt, &s, "tf-large/ckpt.index", index);
        let data = dir.path().join("ckpt.data-00000-of-00001");
        put_retried(
            &rt,
            &s,
            "tf-large/ckpt.data-00000-of-00001",
            std::fs::read(data).unwrap(),
        );
        let counting = Arc::new(Counting {
            inner: s.clone(),
            reads: AtomicU64::new(0),
        });
        let store = open_location(
            location(g, counting.clone(), &rt, "tf-large/ckpt.index"),
            &UrlOptions::default(),
        )
        .unwrap();
        assert_eq!(store.format(), paramdex::interop::Format::TensorFlow);
        assert_eq!(counting.reads.load(Ordering::SeqCst), 2, "open");
        assert_eq!(store.list().unwrap().len(), n);
        assert_eq!(counting.reads.load(Ordering::SeqCst), 2, "list");
        for i in [0, 1234, 4999] {
            let before = counting.reads.load(Ordering::SeqCst);
            let t = store.load(name(i).as_bytes()).unwrap().unwrap();
            let want: Vec<u8> = [i as f32, -(i as f32)]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect();
            assert_eq!(&*t.data.raw_bytes(), want.as_slice());
            assert_eq!(counting.reads.load(Ordering::SeqCst), before + 1, "get {i}");
        }
    });
}

/// Hostile objects: a safetensors header cut short, a TensorFlow data object cut short, and a URL
/// naming nothing are errors naming the URL, never data.
#[test]
fn hostile_objects_are_clear_errors_naming_the_url() {
    let Some(g) = garage::shared("hostile_objects_are_clear_errors_naming_the_url") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        let open =
            |key: &str| open_location(location(g, s.clone(), &rt, key), &UrlOptions::default());
        let url = |key: &str| format!("s3://{}/{key}", g.bucket());

        // A safetensors header cut short: its length says more than the object holds, or the
        // JSON stops in the middle.
        let (whole, _) = safetensors_file(10, 4);
        let n = u64::from_le_bytes(whole[..8].try_into().unwrap()) as usize;
        for (key, bytes) in [
            ("hostile/cut.safetensors", whole[..8 + n / 2].to_vec()),
            ("hostile/cut-unnamed", whole[..8 + n / 2].to_vec()),
            ("hostile/json.safetensors", {
                let mut b = (n as u64 / 2).to_le_bytes().to_vec();
                b.extend_from_slice(&whole[8..8 + n / 2]);
                b.extend_from_slice(&whole[8 + n..]);
                b
            }),
        ] {
            put_retried(&rt, &s, key, bytes);
            let e = open(key).err().expect(key);
            assert!(matches!(e, Error::Corrupt { .. }), "{key}: {e:?}");
            assert!(e.to_string().contains(&url(key)), "{key}: {e}");
            assert!(e.to_string().contains("safetensors header"), "{key}: {e}");
        }

        // A TensorFlow data object cut short: the index opens, the tensors past the cut are
        // errors naming the data object, the ones before it read and check.
        let dir = data_dir().join("tf/basic/tf2");
        let mut fs = Vec::new();
        files(&dir, &mut fs);
        let index = fs
            .iter()
            .find(|p| p.extension().is_some_and(|e| e == "index"))
            .unwrap();
        let stem = index.file_stem().unwrap().to_str().unwrap().to_string();
        let data = fs
            .iter()
            .find(|p| p.to_str().unwrap().contains(".data-"))
            .unwrap();
        let data_bytes = std::fs::read(data).unwrap();
        let cut = data_bytes.len() / 2;
        put_retried(
            &rt,
            &s,
            &format!("hostile-tf/{stem}.index"),
            std::fs::read(index).unwrap(),
        );
        let data_key = format!("hostile-tf/{}", data.file_name().unwrap().to_str().unwrap());
        put_retried(&rt, &s, &data_key, data_bytes[..cut].to_vec());
        let local = open_any(index).unwrap();
        let remote = open(&format!("hostile-tf/{stem}")).unwrap();
        let (mut short, mut whole_read) = (0, 0);
        for t in local.list().unwrap() {
            let Some(loc) = local.data_location(&t.name).unwrap() else {
                continue;
            };
            match remote.load(&t.name) {
                Ok(Some(r)) => {
                    assert!(loc.offset + loc.len <= cut as u64, "{:?}", t.name);
                    let l = local.load(&t.name).unwrap().unwrap();
                    assert!(l.data.raw_bytes() == r.data.raw_bytes());
                    whole_read += 1;
                }
                Err(e) => {
                    assert!(loc.offset + loc.len > cut as u64, "{:?}: {e}", t.name);
                    assert!(
                        matches!(
                            e,
                            Error::Corrupt { .. }
                                | Error::Remote {
                                    problem: RemoteProblem::Truncated,
                                    ..
                                }
                        ),
                        "{e:?}"
                    );
                    assert!(e.to_string().contains(&url(&data_key)), "{e}");
                    short += 1;
                }
                Ok(None) => panic!("{:?} missing", t.name),
            }
        }
        assert!(short > 0, "no tensor past the cut");
        let _ = whole_read;
        let e = remote.verify(2).unwrap_err();
        assert!(e.to_string().contains(&url(&data_key)), "{e}");

        // A URL naming nothing, and a prefix whose .index is missing.
        let e = open("hostile/nothing-here").err().unwrap();
        assert!(
            matches!(
                e,
                Error::Remote {
                    problem: RemoteProblem::NotFound,
                    ..
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains(&url("hostile/nothing-here")), "{msg}");
        assert!(msg.contains(&url("hostile/nothing-here.index")), "{msg}");
        let e = open("hostile/nothing.index").err().unwrap();
        assert!(
            matches!(
                e,
                Error::Remote {
                    problem: RemoteProblem::NotFound,
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains(&url("hostile/nothing.index")), "{e}");
    });
}

/// `file://` URLs go through the same dispatcher (object_store's local file system): every
/// TensorFlow checkpoint and safetensors fixture reads as locally. Needs no cluster.
#[test]
fn file_urls_read_as_local_paths() {
    let root = data_dir();
    let mut all = Vec::new();
    for sub in ["tf", "safetensors", "native/v1"] {
        files(&root.join(sub), &mut all);
    }
    let mut seen = HashMap::new();
    for f in &all {
        let name = f.file_name().unwrap().to_str().unwrap();
        let input = match name.strip_suffix(".index") {
            Some(stem) => f.with_file_name(stem),
            None if name.ends_with(".safetensors") || name.ends_with(".pdx") => f.clone(),
            None => continue,
        };
        let Ok(local) = open_any(&input) else {
            continue;
        };
        let url = format!("file://{}", input.display());
        let remote = open_any(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        same(&url, &*local, &*remote);
        *seen.entry(local.format().name()).or_insert(0) += 1;
    }
    assert!(seen.len() >= 3, "{seen:?}");
}

/// A Hugging Face sharded safetensors checkpoint in a bucket: opened by its index object and
/// by its prefix, every tensor as the local directory gives it; and `survey` of the prefix
/// (`ls s3://bucket/prefix/`) lists each object with the input it is.
#[test]
fn a_hugging_face_sharded_checkpoint_and_a_prefix_survey() {
    let Some(g) = garage::shared("a_hugging_face_sharded_checkpoint_and_a_prefix_survey") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        let tmp = tempfile::tempdir().unwrap();
        s3::set_aws_env_once(g);
        let (a, _) = safetensors_file(2, 8);
        let la = safetensors::SafeTensors::deserialize(&a).unwrap();
        let mut map = serde_json::Map::new();
        for n in la.names() {
            map.insert(n.to_string(), "model-00001-of-00002.safetensors".into());
        }
        let index = serde_json::json!({"metadata": {"total_size": 1}, "weight_map": map});
        let files: Vec<(&str, Vec<u8>)> = vec![
            ("model-00001-of-00002.safetensors", a.clone()),
            (
                "model.safetensors.index.json",
                index.to_string().into_bytes(),
            ),
            ("notes.txt", b"hello".to_vec()),
        ];
        for (n, bytes) in &files {
            std::fs::write(tmp.path().join(n), bytes).unwrap();
            put_retried(&rt, &s, &format!("hf/gpt2/{n}"), bytes.clone());
        }
        let local = open_any(tmp.path()).unwrap();
        let base = format!("s3://{}/hf/gpt2", g.bucket());
        for url in [format!("{base}/model.safetensors.index.json"), base.clone()] {
            let remote = open_any(&url).unwrap();
            assert_eq!(
                remote.format(),
                paramdex::interop::Format::HuggingFaceSharded
            );
            assert!(same(&url, local.as_ref(), remote.as_ref()) > 0, "{url}");
        }
        let found = paramdex::interop::survey(Path::new(&format!("{base}/"))).unwrap();
        let kinds: Vec<(String, bool)> = found
            .iter()
            .map(|f| (f.name.clone(), f.what.is_ok()))
            .collect();
        assert_eq!(
            kinds,
            [
                ("model-00001-of-00002.safetensors".to_string(), true),
                ("model.safetensors.index.json".to_string(), true),
                ("notes.txt".to_string(), false),
            ]
        );
    });
}

#[path = "support/torch_zip.rs"]
mod torch_zip;

/// `torch.save` files, Paddle dygraph pickles, a torch DCP checkpoint of two data files and a
/// Hugging Face index of `.bin` shards, read from the bucket (objects read whole, then the
/// local readers) exactly as the local reader reads them.
#[test]
fn torch_paddle_dcp_and_bin_shards_read_over_their_urls_as_locally() {
    let Some(g) = garage::shared("torch_paddle_dcp_and_bin_shards_read_over_their_urls_as_locally")
    else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        s3::set_aws_env_once(g);
        let tmp = tempfile::tempdir().unwrap();
        // Single files, from tests/data/pickle.
        for name in [
            "torch_state_dict.pt",
            "paddle_p2.pdparams",
            "paddle_p4.pdparams",
            "paddle_nested.pdopt",
        ] {
            let path = data_dir().join("pickle").join(name);
            put_retried(
                &rt,
                &s,
                &format!("pk/{name}"),
                std::fs::read(&path).unwrap(),
            );
            let local = open_any(&path).unwrap();
            let url = format!("s3://{}/pk/{name}", g.bucket());
            let remote = open_any(&url).unwrap();
            assert!(same(&url, local.as_ref(), remote.as_ref()) > 0, "{url}");
        }
        // A DCP checkpoint: `.metadata` and two data files, each chunk a tensor's archive.
        let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        let chunk = |offsets: &[i64], sizes: &[i64], file: &str| torch_zip::DcpChunk {
            offsets: offsets.to_vec(),
            sizes: sizes.to_vec(),
            file: file.into(),
        };
        let spec = torch_zip::DcpSpec {
            tensors: vec![(
                "w".into(),
                "float32".into(),
                vec![4],
                vec![
                    chunk(&[0], &[2], "__0_0.distcp"),
                    chunk(&[2], &[2], "__1_0.distcp"),
                ],
            )],
            bytes: vec![],
            extra_global: None,
        };
        let dcp = tmp.path().join("dcp");
        torch_zip::dcp_checkpoint(&dcp, &spec, &|_, i| {
            let v = [i as f32 * 2.0, i as f32 * 2.0 + 1.0];
            torch_zip::torch_tensor_archive("FloatStorage", &[2], &f32s(&v))
        });
        for e in std::fs::read_dir(&dcp).unwrap() {
            let p = e.unwrap().path();
            let n = p.file_name().unwrap().to_str().unwrap().to_string();
            put_retried(
                &rt,
                &s,
                &format!("dcp/step_1/{n}"),
                std::fs::read(&p).unwrap(),
            );
        }
        let local = open_any(&dcp).unwrap();
        let base = format!("s3://{}/dcp/step_1", g.bucket());
        for url in [base.clone(), format!("{base}/.metadata")] {
            let remote = open_any(&url).unwrap();
            assert_eq!(
                remote.format(),
                paramdex::interop::Format::TorchDcp,
                "{url}"
            );
            assert_eq!(same(&url, local.as_ref(), remote.as_ref()), 1, "{url}");
        }
        // A Hugging Face index of one `.bin` shard (a bare tensor, named "").
        let hf = tmp.path().join("hf");
        std::fs::create_dir(&hf).unwrap();
        let files: Vec<(&str, Vec<u8>)> = vec![
            (
                "pytorch_model-00001-of-00001.bin",
                torch_zip::torch_tensor_archive("FloatStorage", &[2], &f32s(&[1.0, 2.0])),
            ),
            (
                "pytorch_model.bin.index.json",
                br#"{"weight_map": {"": "pytorch_model-00001-of-00001.bin"}}"#.to_vec(),
            ),
        ];
        for (n, bytes) in &files {
            std::fs::write(hf.join(n), bytes).unwrap();
            put_retried(&rt, &s, &format!("hf-bin/m/{n}"), bytes.clone());
        }
        let local = open_any(&hf).unwrap();
        let base = format!("s3://{}/hf-bin/m", g.bucket());
        for url in [format!("{base}/pytorch_model.bin.index.json"), base.clone()] {
            let remote = open_any(&url).unwrap();
            assert_eq!(same(&url, local.as_ref(), remote.as_ref()), 1, "{url}");
        }
    });
}

/// The Paddle inputs of `root` that the test reads at a URL, relative to it: models by prefix,
/// by their parameters and by their program, a directory holding one model, tensor files,
/// directories of per-variable files (nested too), and the merged file `merged/m` written by
/// the exporter.
const PADDLE_INPUTS: &[&str] = &[
    "inference/pir/model",
    "inference/pir/model.pdiparams",
    "inference/pir/model.json",
    "inference/legacy/model",
    "inference/legacy/model.pdmodel",
    "inference/pir",
    "models/pir/m",
    "lod/lod1_i64.lodtensor",
    "lod/plain_bf16.lodtensor",
    "lod/save_vars",
    "models/pervar_nested",
    "models/separate_legacy",
    "models/separate_legacy/__model__",
    "models/separate_pir",
    "merged/m",
];

/// A copy of tests/data/paddle in `dir`, with a merged file (`merged/m`, and its program
/// beside it) exported from the PIR model, and a damaged copy of that model's
/// parameters (`bad/model.*`: one byte of a record's header changed).
fn paddle_tree(dir: &Path) {
    let src = data_dir().join("paddle");
    let mut all = Vec::new();
    files(&src, &mut all);
    for f in all {
        let to = dir.join(f.strip_prefix(&src).unwrap());
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(&f, &to).unwrap();
    }
    let model = open_any(dir.join("inference/pir/model")).unwrap();
    std::fs::create_dir_all(dir.join("merged")).unwrap();
    paramdex::interop::export(
        model.as_ref(),
        paramdex::interop::OutputFormat::PaddleMerged,
        &dir.join("merged/m"),
        &paramdex::interop::ExportOptions::default(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("bad")).unwrap();
    for ext in ["json", "pdiparams"] {
        let from = dir.join(format!("inference/pir/model.{ext}"));
        std::fs::copy(from, dir.join(format!("bad/model.{ext}"))).unwrap();
    }
    let bad = dir.join("bad/model.pdiparams");
    let mut bytes = std::fs::read(&bad).unwrap();
    // The first record's LoD level count (bytes 4..12): far past any limit.
    bytes[9] = 0x7f;
    std::fs::write(&bad, bytes).unwrap();
}

/// Paddle inputs (issue 26): each reads at a `file://` URL exactly as at its path; a damaged
/// model is the same error from both.
#[test]
fn paddle_inputs_read_at_file_urls_as_locally() {
    let tmp = tempfile::tempdir().unwrap();
    paddle_tree(tmp.path());
    for rel in PADDLE_INPUTS {
        let path = tmp.path().join(rel);
        let local = open_any(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let url = format!("file://{}", path.display());
        let remote = open_any(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(same(&url, local.as_ref(), remote.as_ref()) > 0, "{url}");
    }
    let bad = tmp.path().join("bad/model");
    let local = open_any(&bad).map(|_| ()).unwrap_err();
    let remote = open_any(format!("file://{}", bad.display()))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(variant(&local), variant(&remote), "{local} / {remote}");
    assert!(matches!(remote, Error::Corrupt { .. }), "{remote}");
}

/// The same Paddle inputs in a bucket of a real S3 server.
#[test]
fn paddle_inputs_read_over_their_urls_as_locally() {
    let Some(g) = garage::shared("paddle_inputs_read_over_their_urls_as_locally") else {
        return;
    };
    g.run(|| {
        let rt = runtime();
        let s = s3::store(g);
        s3::set_aws_env_once(g);
        let tmp = tempfile::tempdir().unwrap();
        paddle_tree(tmp.path());
        let mut all = Vec::new();
        files(tmp.path(), &mut all);
        for f in &all {
            let rel = f.strip_prefix(tmp.path()).unwrap().to_str().unwrap();
            put_retried(&rt, &s, &format!("pd/{rel}"), std::fs::read(f).unwrap());
        }
        for rel in PADDLE_INPUTS {
            let local = open_any(tmp.path().join(rel)).unwrap();
            let url = format!("s3://{}/pd/{rel}", g.bucket());
            let remote = open_any(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(same(&url, local.as_ref(), remote.as_ref()) > 0, "{url}");
        }
        let e = open_any(format!("s3://{}/pd/bad/model", g.bucket()))
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        assert!(e.to_string().contains("bad/model.pdiparams"), "{e}");
        // A key with non-ASCII characters, as a user's tools upload it (not percent-encoded):
        // named by its URL, it is that object.
        let golden = data_dir().join("native/v1/golden.pdx");
        put_retried(&rt, &s, "pd/ünï.pdx", std::fs::read(&golden).unwrap());
        let local = open_any(&golden).unwrap();
        let url = format!("s3://{}/pd/ünï.pdx", g.bucket());
        let remote = open_any(&url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert!(same(&url, local.as_ref(), remote.as_ref()) > 0, "{url}");
    });
}
