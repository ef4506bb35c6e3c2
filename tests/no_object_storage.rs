//! A paramdex built without its `s3` feature (`--no-default-features`) reads and writes local
//! files only, and refuses a URL as a URL: `Error::NoObjectStorage` naming it, from every entry
//! point that takes one, before anything is read or written; never "no such file", never a
//! panic. CI runs it with `cargo test -p paramdex --no-default-features --test
//! no_object_storage`; with the feature, URLs are the object-storage tests' (tests/remote*.rs).
#![cfg(not(feature = "s3"))]

use std::path::Path;

use paramdex::interop::{
    merge, open_any, CheckpointManager, ManagerOptions, MergeInput, MergeOptions,
};
use paramdex::{DType, Error, Tensor, Writer};

/// `r` is the refusal of `url` for want of object storage.
fn assert_refused<T>(r: paramdex::Result<T>, url: &str) {
    match r {
        Err(Error::NoObjectStorage { url: u }) => {
            assert_eq!(u, url);
            let e = Error::NoObjectStorage { url: u };
            let msg = e.to_string();
            assert!(msg.contains("without object-storage support"), "{msg}");
            assert!(msg.contains("`s3`"), "{msg}");
        }
        Err(e) => panic!("{url}: expected NoObjectStorage, got {e:?}"),
        Ok(_) => panic!("{url}: expected NoObjectStorage, got a value"),
    }
}

/// A native file `a.pdx` in `dir` holding one float32 tensor `w`.
fn one_tensor_file(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("a.pdx");
    let mut w = Writer::create(&src).unwrap();
    w.add("w", Tensor::new(DType::Float32, &[1], &[0u8; 4]))
        .unwrap();
    w.finish().unwrap();
    src
}

#[test]
fn urls_are_recognised_without_the_feature() {
    assert!(paramdex::remote::is_url("s3://bucket/model.pdx"));
    assert!(paramdex::remote::is_url("file:///tmp/model.pdx"));
    assert!(!paramdex::remote::is_url("model.pdx"));
}

#[test]
fn opening_a_url_is_refused_as_a_url() {
    for url in [
        "s3://bucket/model.pdx",
        "s3://bucket/ckpt@3",
        "file:///nonexistent/model.pdx",
    ] {
        assert_refused(open_any(url), url);
    }
    // A missing local path is still a missing path.
    match open_any("/nonexistent/model.pdx") {
        Err(Error::Io { .. }) => {}
        other => panic!("expected Io, got {:?}", other.err()),
    }
}

#[test]
fn a_checkpoint_directory_in_a_bucket_is_refused() {
    assert_refused(
        CheckpointManager::open("s3://bucket/run", ManagerOptions::default()),
        "s3://bucket/run",
    );
}

#[test]
fn merging_into_an_object_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let src = one_tensor_file(dir.path());
    let store = open_any(&src).unwrap();
    let inputs = [MergeInput {
        store: &*store,
        path: &src,
    }];
    let url = "s3://bucket/merged.pdx";
    assert_refused(
        merge(&inputs, Path::new(url), &MergeOptions::default()),
        url,
    );
    // Nothing was written locally under a path spelled like the URL.
    assert!(!Path::new("s3:").exists());
}

/// The sharded-checkpoint functions and `export` take a path or a URL: a URL is refused as
/// one (never written as a local path spelled like it), a path works as before, and an
/// incremental shard whose base is in another place than the save says so.
#[test]
fn sharded_functions_and_export_refuse_a_url_as_a_url() {
    use paramdex::interop::{export, ExportOptions, OutputFormat};
    use paramdex::{
        clean_shards, create_shard_writer, merge_shards, shard_files, MergeShardsOptions, SaveId,
        WriterOptions,
    };
    let url = "s3://bucket/dir/ckpt";
    assert_refused(merge_shards(url, &MergeShardsOptions::default()), url);
    assert_refused(shard_files(url), url);
    assert_refused(clean_shards(url), url);
    let id = SaveId::random();
    assert_refused(
        create_shard_writer(url, 0, 1, id, WriterOptions::default(), None),
        url,
    );
    let dir = tempfile::tempdir().unwrap();
    let src = one_tensor_file(dir.path());
    let store = open_any(&src).unwrap();
    let out = "s3://bucket/out.safetensors";
    assert_refused(
        export(
            &*store,
            OutputFormat::Safetensors,
            Path::new(out),
            &ExportOptions::default(),
        ),
        out,
    );
    assert_refused(
        OutputFormat::Safetensors.check_outputs(Path::new(out), false),
        out,
    );
    assert!(!Path::new("s3:").exists());
    // A local save: a shard, merged, listed, with nothing left to clean; a base in a bucket
    // for a local save is refused as being elsewhere.
    let prefix = dir.path().join("ckpt");
    let mut s = create_shard_writer(&prefix, 0, 1, id, WriterOptions::default(), None).unwrap();
    s.add("w", Tensor::new(DType::Float32, &[1], &[0u8; 4]))
        .unwrap();
    s.finish().unwrap();
    let rep = merge_shards(&prefix, &MergeShardsOptions::default()).unwrap();
    assert_eq!(rep.tensors, 1);
    assert!(shard_files(&prefix).unwrap().len() == 1);
    assert!(clean_shards(&prefix).unwrap().is_empty());
    let other = dir.path().join("next");
    match create_shard_writer(
        &other,
        0,
        1,
        SaveId::random(),
        WriterOptions::default(),
        Some(Path::new(url)),
    ) {
        Err(Error::Unsupported(m)) => assert!(m.contains(url), "{m}"),
        other => panic!("expected Unsupported, got {:?}", other.err()),
    }
}

/// The ranged reader is the engine's, not object storage's: without the feature it reads a
/// local file through `pread` (`FileRange`), one read per request, with the same tensors, LoD
/// and verify report as the mapped reader, and its store lists the same.
#[test]
fn the_ranged_reader_reads_a_local_file_without_the_feature() {
    use paramdex::remote::{FileRange, RangeRead};
    use paramdex::Reader;
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add_values("a", &[2, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0])
        .unwrap();
    let lod = [vec![0u64, 1, 3]];
    let b: Vec<u8> = [7i64, 8, 9].iter().flat_map(|v| v.to_le_bytes()).collect();
    w.add(b"b", Tensor::new(DType::Int64, &[3], &b).with_lod(&lod))
        .unwrap();
    w.add(b"c", Tensor::new(DType::UInt8, &[2], &[1, 2]))
        .unwrap();
    w.finish().unwrap();
    let mapped = paramdex::Reader::open(&path).unwrap();
    let file = Arc::new(FileRange::open(&path).unwrap());
    let ranged = Reader::from_range_read(file.clone(), Default::default()).unwrap();
    for name in ["a", "b", "c"] {
        let m = mapped.tensor(name).unwrap();
        let r = ranged.get(name).unwrap().unwrap();
        assert_eq!(r.data(), m.data(), "{name}");
        assert_eq!(
            r.lod().unwrap().to_vec(),
            m.lod().unwrap().to_vec(),
            "{name}"
        );
        assert_eq!(r.dtype(), m.dtype(), "{name}");
    }
    assert!(ranged.get("missing").unwrap().is_none());
    assert!(file.stats().requests >= 1);
    let mv = mapped.verify().unwrap();
    let rv = ranged.verify().unwrap();
    assert_eq!(mv, rv);
    // Whole-file loads: the same owned tensors, LoD included, from both readers.
    let ml = mapped.load_all(&Default::default()).unwrap();
    let rl = ranged.load_all(&Default::default()).unwrap();
    assert_eq!(ml, rl);
    assert_eq!(ml[1].1.lod, vec![vec![0, 1, 3]]);
}
