//! Sharded checkpoints (SPEC.md 12) on a real Garage cluster (3 nodes, replication 3;
//! `tests/support/garage.rs`): a checkpoint written locally and uploaded reads over its URL as
//! it reads locally (whole tensors and slices, request counts of open and get); four processes
//! write one checkpoint straight into the bucket and one merge commits it (the bucket then
//! holds exactly TensorFlow's layout, which the local reader verifies once downloaded); a data
//! object written over by another save is an error naming its URL, never the other save's
//! bytes; a merge with a shard missing writes nothing.
//!
//! The library resolves `s3://` URLs from the `AWS_*` environment, which every test here sets
//! once (the same values: one shared cluster) before any request; child processes inherit it.
// Object storage: built with the `s3` feature (on by default) only.
#![cfg(feature = "s3")]

mod support;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use paramdex::remote::{open_sharded, RemoteOptions};
use paramdex::{
    merge_shards, DType, Error, MergeShardsOptions, Reader, Region, RemoteProblem, SaveId, Saved,
    ShardProblem, ShardWriter, ShardedSave, Tensor, WriterOptions,
};
use std::path::Path;
use std::sync::Arc;
use support::f32_bytes;
use support::s3::{list_names, put, with_bucket};

const RANK: &str = "PARAMDEX_RSH_RANK";
const PREFIX: &str = "PARAMDEX_RSH_PREFIX";
const SAVE: &str = "PARAMDEX_RSH_SAVE";
const RANKS: u32 = 4;

/// The bytes of tensor `i` of rank `rank` (varied lengths: some shards have several blocks).
fn own(rank: u32, i: u32) -> Vec<u8> {
    let n = 16 + (i as usize * 37 + rank as usize * 11) % 300;
    (0..n)
        .map(|k| (k as u32 * 31 + i * 7 + rank * 101) as u8)
        .collect()
}

/// The whole `emb` tensor ([RANKS * 2, 6] float32), of which rank k holds rows 2k and 2k+1.
fn emb() -> Vec<f32> {
    (0..RANKS * 2 * 6).map(|v| v as f32 * 0.5 - 3.0).collect()
}

/// Rank `rank`'s rows of `emb` (2k and 2k+1): their region and bytes.
fn emb_rows(rank: u32) -> (Region, Vec<u8>) {
    let all = emb();
    let rows = &all[(rank as usize * 12)..(rank as usize * 12 + 12)];
    let region = Region::new(vec![u64::from(rank) * 2, 0], vec![2, 6]).unwrap();
    (region, f32_bytes(rows))
}

/// Writes rank `rank`'s tensors: `r{rank}.t{i}` (`count` of them), its rows of `emb`, and (with
/// `big`) a 20 MiB tensor, so that its shard is uploaded in parts.
fn fill(w: &mut ShardWriter, rank: u32, count: u32, big: bool) {
    for i in 0..count {
        let d = own(rank, i);
        w.add_values(format!("r{rank}.t{i:04}"), &[d.len() as u64], &d)
            .unwrap();
    }
    let (region, rows) = emb_rows(rank);
    w.add_slice(
        "emb",
        DType::Float32,
        &[u64::from(RANKS) * 2, 6],
        &region,
        &rows,
    )
    .unwrap();
    if big {
        let d: Vec<u8> = (0..20u32 << 20).map(|k| (k % 251) as u8).collect();
        w.add_values(format!("r{rank}.big"), &[d.len() as u64], &d)
            .unwrap();
    }
}

const COUNT: u32 = 150;
/// Tensors of each rank in the uploaded checkpoint (several index blocks per data object).
const PER_RANK: u32 = 200;

fn opts() -> WriterOptions {
    WriterOptions {
        sync: false,
        ..Default::default()
    }
}

/// The child side of `four_processes_write_one_checkpoint`: writes shard `$RANK` of the save
/// `$SAVE` at `$PREFIX`, then exits. Does nothing unless started so.
#[test]
fn remote_shard_child_helper() {
    let (Ok(rank), Ok(prefix), Ok(save)) = (
        std::env::var(RANK),
        std::env::var(PREFIX),
        std::env::var(SAVE),
    ) else {
        return;
    };
    let rank: u32 = rank.parse().unwrap();
    let save = SaveId::from_hex(&save).unwrap();
    let mut w = paramdex::create_shard_writer(&prefix, rank, RANKS, save, opts(), None).unwrap();
    fill(&mut w, rank, COUNT, rank == 2);
    w.finish().unwrap();
    std::process::exit(0);
}

/// Uploads every file of the local directory `dir` under `key_dir/`.
fn upload_dir(rt: &tokio::runtime::Runtime, s: &Arc<dyn ObjectStore>, dir: &Path, key_dir: &str) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().into_string().unwrap();
        let bytes = std::fs::read(e.path()).unwrap();
        put(rt, s, &format!("{key_dir}/{name}"), bytes);
    }
}

/// A checkpoint of three shards written and merged locally, uploaded as it is: the URL reads
/// equal the local reads, whole tensors and regions (within one slice, across slices of
/// several data objects); open is at most 2 GETs, a `get` at most 2 once its data object is
/// open (its first use adds at most 2 for the data object's open); `open_any` reads it by its
/// prefix and by its index.
#[test]
fn an_uploaded_checkpoint_reads_as_it_does_locally() {
    with_bucket(
        "an_uploaded_checkpoint_reads_as_it_does_locally",
        |g, rt, s| {
            let dir = tempfile::tempdir().unwrap();
            let prefix = dir.path().join("ck");
            let save = SaveId::random();
            for rank in 0..RANKS {
                let mut w = ShardWriter::create(&prefix, rank, RANKS, save, opts()).unwrap();
                fill(&mut w, rank, PER_RANK, false);
                w.finish().unwrap();
            }
            merge_shards(
                &prefix,
                &MergeShardsOptions {
                    no_sync: true,
                    ..Default::default()
                },
            )
            .unwrap();
            upload_dir(&rt, &s, dir.path(), "uploaded");
            let local = Reader::open(&prefix).unwrap();
            let url = format!("s3://{}/uploaded/ck", g.bucket());

            let r = open_sharded(&url, RemoteOptions::default()).unwrap();
            assert!(r.stats().requests <= 2, "open: {}", r.stats().requests);
            eprintln!(
                "open of a {RANKS}-shard checkpoint: {} GETs",
                r.stats().requests
            );
            assert_eq!(r.header().shards.len() as u32, RANKS);
            // Whole tensors: the first of a data object opens it, the next ones do not.
            for rank in 0..RANKS {
                let before = r.stats().requests;
                let t = r.get(format!("r{rank}.t0007")).unwrap().unwrap();
                assert_eq!(t.data(), own(rank, 7));
                assert!(
                    r.stats().requests - before <= 4,
                    "first get in shard {rank}"
                );
                eprintln!(
                    "first get in data object {rank}: {} GETs",
                    r.stats().requests - before
                );
                let before = r.stats().requests;
                let name = format!("r{rank}.t0121");
                let t = r.get(&name).unwrap().unwrap();
                assert_eq!(t.data(), local.tensor(&name).unwrap().data());
                assert!(r.stats().requests - before <= 2, "get in shard {rank}");
                eprintln!(
                    "next get in data object {rank}: {} GETs",
                    r.stats().requests - before
                );
            }
            // Every tensor, and regions of the partitioned one.
            for e in r.list_from(b"").unwrap() {
                if e.slices != 0 {
                    continue;
                }
                let t = r.get(&e.name).unwrap().unwrap();
                assert_eq!(t.data(), local.tensor(&e.name).unwrap().data());
            }
            let shape = [u64::from(RANKS) * 2, 6];
            for region in [
                Region::full(&shape),
                Region::new(vec![2, 1], vec![2, 4]).unwrap(), // inside rank 1's rows
                Region::new(vec![1, 2], vec![5, 3]).unwrap(), // across ranks 0, 1, 2
                Region::new(vec![3, 0], vec![0, 6]).unwrap(), // empty
            ] {
                let want = local.get_slice("emb", &region).unwrap().unwrap();
                let got = r.get_slice("emb", &region).unwrap().unwrap();
                assert_eq!(got.data(), want.data(), "{region:?}");
                assert_eq!(got.shape(), region.len);
            }
            assert!(matches!(r.get("emb"), Err(Error::Sliced { .. })));
            assert!(r.get("absent").unwrap().is_none());

            for u in [url.clone(), format!("{url}.index")] {
                let st = paramdex::interop::open_any(&u).unwrap();
                assert_eq!(
                    st.list().unwrap().len(),
                    RANKS as usize * PER_RANK as usize + 1
                );
                let t = st.load(b"emb").unwrap().unwrap();
                assert_eq!(&*t.data.raw_bytes(), f32_bytes(&emb()).as_slice());
            }
            let st = paramdex::interop::open_any(&url).unwrap();
            let v = st.verify(0).unwrap();
            assert_eq!(v.tensors, u64::from(RANKS * PER_RANK) + 1);
        },
    );
}

/// Four processes each write one shard straight into the bucket (one of them over 16 MiB, so
/// uploaded in parts), then one merge reads their footers and indexes by ranged GETs and writes
/// the index last: every tensor reads back, the bucket holds exactly `PREFIX.index` and the four
/// `PREFIX.data-k-of-00004` (TensorFlow's layout), whose index lists the four data objects with
/// this save's identity; downloaded, the local reader verifies it whole.
#[test]
fn four_processes_write_one_checkpoint() {
    with_bucket("four_processes_write_one_checkpoint", |g, rt, s| {
        let url = format!("s3://{}/four/ck", g.bucket());
        let save = SaveId::random();
        let children: Vec<_> = (0..RANKS)
            .map(|rank| {
                std::process::Command::new(std::env::current_exe().unwrap())
                    .args([
                        "--exact",
                        "remote_shard_child_helper",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(RANK, rank.to_string())
                    .env(PREFIX, &url)
                    .env(SAVE, save.to_string())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for mut c in children {
            assert!(c.wait().unwrap().success());
        }
        // No index before the merge: no checkpoint.
        assert_eq!(
            list_names(&rt, &s, "four"),
            (0..RANKS)
                .map(|k| format!("ck.data-{k:05}-of-00004"))
                .collect::<Vec<_>>()
        );
        let started = std::time::Instant::now();
        let report = merge_shards(&url, &MergeShardsOptions::default()).unwrap();
        eprintln!(
            "merge of 4 data objects ({} bytes): read {} bytes of indexes, wrote a {}-byte \
             index, {:.1?}",
            report.shard_bytes,
            report.bytes_read,
            report.index_len,
            started.elapsed()
        );
        assert_eq!(report.save_id, save);
        assert_eq!(report.tensors, u64::from(RANKS * COUNT) + 2);
        assert_eq!(report.slices, u64::from(RANKS));
        // Footers and indexes only: far less than the records (one shard alone has 20 MiB).
        assert!(report.bytes_read < report.shard_bytes / 20, "{report:?}");
        let mut want: Vec<String> = (0..RANKS)
            .map(|k| format!("ck.data-{k:05}-of-00004"))
            .collect();
        want.insert(0, "ck.index".into());
        want.sort();
        assert_eq!(list_names(&rt, &s, "four"), want);

        let r = open_sharded(&url, RemoteOptions::default()).unwrap();
        let h = r.header();
        assert_eq!(h.num_shards, 4);
        assert_eq!(h.shards.len(), 4);
        for (k, sr) in h.shards.iter().enumerate() {
            assert_eq!(sr.shard.save_id, save);
            assert_eq!(sr.shard.shard_id as usize, k);
            assert_eq!(sr.shard.num_shards, 4);
            assert!(!sr.reused);
        }
        for rank in 0..RANKS {
            for i in 0..COUNT {
                let t = r.get(format!("r{rank}.t{i:04}")).unwrap().unwrap();
                assert_eq!(t.data(), own(rank, i), "r{rank}.t{i:04}");
            }
        }
        let big = r.get("r2.big").unwrap().unwrap();
        assert_eq!(big.data().len(), 20 << 20);
        assert!(big
            .data()
            .iter()
            .enumerate()
            .all(|(k, &b)| b == (k % 251) as u8));
        let e = r
            .get_slice("emb", &Region::full(&[u64::from(RANKS) * 2, 6]))
            .unwrap()
            .unwrap();
        assert_eq!(e.data(), f32_bytes(&emb()));

        // The same objects downloaded are a local sharded checkpoint that verifies whole.
        let dir = tempfile::tempdir().unwrap();
        for name in &want {
            let got = rt
                .block_on(async {
                    s.get(&ObjectPath::from(format!("four/{name}")))
                        .await?
                        .bytes()
                        .await
                })
                .unwrap();
            std::fs::write(dir.path().join(name), &got).unwrap();
        }
        let local = Reader::open(dir.path().join("ck")).unwrap();
        let v = local.verify().unwrap();
        assert_eq!(v.tensors, u64::from(RANKS * COUNT) + 2);
    });
}

/// Writes a save of `n` shards at `url` (each shard `COUNT` tensors) and merges it.
fn save_at(url: &str, n: u32, seed: u32) -> SaveId {
    let save = SaveId::random();
    for k in 0..n {
        let mut w = paramdex::create_shard_writer(url, k, n, save, opts(), None).unwrap();
        for i in 0..50 {
            let d = own(k + seed, i);
            w.add_values(format!("r{k}.t{i:04}"), &[d.len() as u64], &d)
                .unwrap();
        }
        w.finish().unwrap();
    }
    merge_shards(url, &MergeShardsOptions::default()).unwrap();
    save
}

/// A second save at the prefix of a checkpoint with the same number of shards writes over its
/// data objects: a reader of the first checkpoint gets an error naming the object's URL (of
/// another identity or length when it opens it now; `Replaced` for one it had opened before),
/// never the second save's bytes. A third save of another number of shards leaves, once
/// merged, only its own data objects.
#[test]
fn a_data_object_written_over_by_another_save_is_an_error_naming_it() {
    with_bucket(
        "a_data_object_written_over_by_another_save_is_an_error_naming_it",
        |g, rt, s| {
            let url = format!("s3://{}/over/ck", g.bucket());
            save_at(&url, 2, 0);
            // A small first read, so that the records asked for below are not among the bytes
            // it brought (those are served as they were read, without a request).
            let small = RemoteOptions {
                tail_bytes: 4096,
                ..RemoteOptions::default()
            };
            let r = open_sharded(&url, small).unwrap();
            assert_eq!(r.get("r0.t0003").unwrap().unwrap().data(), own(0, 3));
            // The second save's shards are uploaded; its index is not written yet.
            let second = SaveId::random();
            for k in 0..2 {
                let mut w =
                    paramdex::create_shard_writer(&url, k, 2, second, opts(), None).unwrap();
                for i in 0..50 {
                    let d = own(k + 9, i);
                    w.add_values(format!("r{k}.t{i:04}"), &[d.len() as u64], &d)
                        .unwrap();
                }
                w.finish().unwrap();
            }
            // Data object 0 was open: its ETag changed.
            match r.get("r0.t0004") {
                Err(Error::Remote {
                    url: u, problem, ..
                }) => {
                    assert_eq!(problem, RemoteProblem::Replaced);
                    assert!(u.ends_with("over/ck.data-00000-of-00002"), "{u}");
                }
                other => panic!("{other:?}"),
            }
            // Data object 1 was not: it is opened now, and is not the one the index records.
            match r.get("r1.t0004") {
                Err(Error::Shard { path, problem, .. }) => {
                    assert!(
                        problem == ShardProblem::Identity || problem == ShardProblem::Length,
                        "{problem:?}"
                    );
                    assert_eq!(path, format!("{url}.data-00001-of-00002"));
                }
                other => panic!("{other:?}"),
            }
            // Committed, the second save reads.
            let report = merge_shards(&url, &MergeShardsOptions::default()).unwrap();
            assert_eq!(report.save_id, second);
            let r = open_sharded(&url, RemoteOptions::default()).unwrap();
            assert_eq!(r.get("r1.t0004").unwrap().unwrap().data(), own(10, 4));
            // A save of three shards: the two-shard data objects go once its index is in.
            save_at(&url, 3, 20);
            assert_eq!(
                list_names(&rt, &s, "over"),
                vec![
                    "ck.data-00000-of-00003".to_string(),
                    "ck.data-00001-of-00003".into(),
                    "ck.data-00002-of-00003".into(),
                    "ck.index".into(),
                ]
            );
            let r = open_sharded(&url, RemoteOptions::default()).unwrap();
            assert_eq!(r.get("r2.t0049").unwrap().unwrap().data(), own(22, 49));
        },
    );
}

/// A save with a shard missing: the merge names the missing object and writes no index.
#[test]
fn the_merge_refuses_a_missing_shard() {
    with_bucket("the_merge_refuses_a_missing_shard", |g, rt, s| {
        let url = format!("s3://{}/missing/ck", g.bucket());
        let save = SaveId::random();
        for k in [0, 1, 3] {
            let mut w = paramdex::create_shard_writer(&url, k, 4, save, opts(), None).unwrap();
            w.add_values(format!("r{k}"), &[3], &[k as u8; 3]).unwrap();
            w.finish().unwrap();
        }
        match merge_shards(&url, &MergeShardsOptions::default()) {
            Err(Error::Shard { path, problem, .. }) => {
                assert_eq!(problem, ShardProblem::Missing);
                assert_eq!(path, format!("{url}.data-00002-of-00004"));
            }
            other => panic!("{other:?}"),
        }
        assert!(!list_names(&rt, &s, "missing").contains(&"ck.index".to_string()));
        match open_sharded(&url, RemoteOptions::default()) {
            Err(Error::Remote { problem, .. }) => assert_eq!(problem, RemoteProblem::NotFound),
            other => panic!("{other:?}"),
        }
    });
}

/// Writes a local sharded checkpoint of `n` shards at `prefix` (save `save`), merged.
fn local_save(prefix: &Path, n: u32, save: SaveId, seed: u32) {
    for k in 0..n {
        let mut w = ShardWriter::create(prefix, k, n, save, opts()).unwrap();
        for i in 0..20 {
            let d = own(k + seed, i);
            w.add_values(format!("r{k}.t{i:04}"), &[d.len() as u64], &d)
                .unwrap();
        }
        w.finish().unwrap();
    }
    merge_shards(
        prefix,
        &MergeShardsOptions {
            no_sync: true,
            ..Default::default()
        },
    )
    .unwrap();
}

/// The checks of SPEC.md 12.4 on each data object, through `file://` URLs (no server): a data
/// object of another save put in its place (same length or not), one missing, and one cut
/// short are each an error naming that object, raised when it is first read; the others still
/// read.
#[test]
fn each_data_object_is_checked_against_the_index_when_first_read() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a");
    let b = dir.path().join("b");
    local_save(&a, 4, SaveId::random(), 0);
    // The same tensors (same lengths) in another save.
    local_save(&b, 4, SaveId::random(), 0);
    let data = |p: &Path, k: u32| {
        let mut s = p.as_os_str().to_owned();
        s.push(format!(".data-{k:05}-of-00004"));
        std::path::PathBuf::from(s)
    };
    std::fs::copy(data(&b, 1), data(&a, 1)).unwrap();
    std::fs::remove_file(data(&a, 2)).unwrap();
    let bytes = std::fs::read(data(&a, 3)).unwrap();
    std::fs::write(data(&a, 3), &bytes[..bytes.len() - 10]).unwrap();
    let url = format!("file://{}", a.display());
    let r = open_sharded(&url, RemoteOptions::default()).unwrap();
    assert_eq!(r.get("r0.t0005").unwrap().unwrap().data(), own(0, 5));
    let problem = |name: &str, k: u32| match r.get(name) {
        Err(Error::Shard { path, problem, .. }) => {
            assert_eq!(path, format!("{url}.data-{k:05}-of-00004"));
            problem
        }
        other => panic!("{name}: {other:?}"),
    };
    assert_eq!(problem("r1.t0005", 1), ShardProblem::Identity);
    assert_eq!(problem("r2.t0005", 2), ShardProblem::Missing);
    assert_eq!(problem("r3.t0005", 3), ShardProblem::Length);
    // The error stays (nothing was cached for a refused object), and shard 0 still reads.
    assert_eq!(problem("r1.t0000", 1), ShardProblem::Identity);
    assert_eq!(r.get("r0.t0019").unwrap().unwrap().data(), own(0, 19));
    // A native single file (a data object) is not a sharded checkpoint's index.
    let single = b.with_extension("single");
    std::fs::copy(data(&b, 0), format!("{}.index", single.display())).unwrap();
    assert!(matches!(
        open_sharded(
            &format!("file://{}", single.display()),
            RemoteOptions::default()
        ),
        Err(Error::InvalidArgument(_))
    ));
}

/// A shard of an incremental save (written locally with a base, so it counts references)
/// uploaded under a data object's name without its references object: the merge over object
/// storage refuses it (`Missing`, naming the references object it needs), and writes no index.
#[test]
fn the_merge_refuses_a_shard_of_an_incremental_save_without_its_references() {
    with_bucket(
        "the_merge_refuses_a_shard_of_an_incremental_save_without_its_references",
        |g, rt, s| {
            let dir = tempfile::tempdir().unwrap();
            let base = dir.path().join("base");
            local_save(&base, 1, SaveId::random(), 0);
            let save = ShardedSave::new(dir.path().join("next"), 1)
                .unwrap()
                .with_base(Arc::new(Reader::open(&base).unwrap()));
            let mut w = save.shard(0).unwrap();
            let d = own(0, 3);
            let saved = w
                .add_or_reuse("r0.t0003", Tensor::new(DType::UInt8, &[d.len() as u64], &d))
                .unwrap();
            assert_eq!(saved, Saved::Reused);
            w.add_values("new", &[3], &[1u8; 3]).unwrap();
            let pending = w.pending_path().to_path_buf();
            w.finish().unwrap();
            put(
                &rt,
                &s,
                "incr/ck.data-00000-of-00001",
                std::fs::read(&pending).unwrap(),
            );
            let url = format!("s3://{}/incr/ck", g.bucket());
            match merge_shards(&url, &MergeShardsOptions::default()) {
                Err(Error::Shard {
                    path,
                    problem: ShardProblem::Missing,
                    ..
                }) => assert_eq!(path, format!("{url}.refs-00000-of-00001.pending")),
                other => panic!("{other:?}"),
            }
            assert_eq!(
                list_names(&rt, &s, "incr"),
                vec!["ck.data-00000-of-00001".to_string()]
            );
        },
    );
}

/// The same incremental save (SPEC.md 12.5) in a directory and in the bucket: a base of four
/// shards, then one shard that writes one changed tensor, reuses the others (compared, or on
/// the caller's word) and every row of `emb`. In the bucket the base's data objects are copied
/// by Garage (`CopyObject`), no byte of them through the writer; the checkpoint lists, reads
/// and verifies as the directory's, also once the base is deleted; a damaged reused object is
/// refused, naming the tensor.
#[test]
fn an_incremental_save_in_a_bucket_reads_as_in_a_directory() {
    with_bucket(
        "an_incremental_save_in_a_bucket_reads_as_in_a_directory",
        |g, rt, s| {
            let dir = tempfile::tempdir().unwrap();
            let (url1, url2) = (
                format!("s3://{}/inc/step1", g.bucket()),
                format!("s3://{}/inc/step2", g.bucket()),
            );
            let (p1, p2) = (dir.path().join("step1"), dir.path().join("step2"));
            let base_save = SaveId::random();
            for rank in 0..RANKS {
                let mut local = ShardWriter::create(&p1, rank, RANKS, base_save, opts()).unwrap();
                fill(&mut local, rank, 20, false);
                local.finish().unwrap();
                let mut remote =
                    paramdex::create_shard_writer(&url1, rank, RANKS, base_save, opts(), None)
                        .unwrap();
                fill(&mut remote, rank, 20, false);
                remote.finish().unwrap();
            }
            merge_shards(&p1, &MergeShardsOptions::default()).unwrap();
            merge_shards(&url1, &MergeShardsOptions::default()).unwrap();

            // The incremental save, the same calls on both sides.
            let save = SaveId::random();
            let step = |w: &mut ShardWriter| {
                let changed = vec![9u8; 33];
                let t = Tensor::new(DType::UInt8, &[33], &changed);
                assert_eq!(w.add_or_reuse("r0.t0000", t).unwrap(), Saved::Written);
                for rank in 0..RANKS {
                    for i in 0..20 {
                        let name = format!("r{rank}.t{i:04}");
                        if name == "r0.t0000" {
                            continue;
                        }
                        if i % 2 == 0 {
                            let d = own(rank, i);
                            let shape = [d.len() as u64];
                            let t = Tensor::new(DType::UInt8, &shape, &d);
                            assert_eq!(w.add_or_reuse(&name, t).unwrap(), Saved::Reused);
                        } else {
                            w.reuse_unchanged(&name).unwrap();
                        }
                    }
                    let (region, rows) = emb_rows(rank);
                    let shape = [u64::from(RANKS) * 2, 6];
                    let got = w
                        .add_slice_or_reuse("emb", DType::Float32, &shape, &region, &rows)
                        .unwrap();
                    assert_eq!(got, Saved::Reused);
                }
            };
            let base = Arc::new(Reader::open(&p1).unwrap());
            let mut local = ShardWriter::create(&p2, 0, 1, save, opts())
                .unwrap()
                .with_base(base)
                .unwrap();
            step(&mut local);
            let local_stats = local.reused();
            local.finish().unwrap();
            let remote_base = Arc::new(open_sharded(&url1, RemoteOptions::default()).unwrap());
            let mut remote = paramdex::create_shard_writer(&url2, 0, 1, save, opts(), None)
                .unwrap()
                .with_base(remote_base)
                .unwrap();
            step(&mut remote);
            let st = remote.reused();
            let written = remote.finish().unwrap();
            // Every base data object copied by the store; the shard uploaded holds one tensor.
            assert_eq!(
                (st.files, st.server_copied),
                (u64::from(RANKS), u64::from(RANKS))
            );
            assert_eq!((st.linked, st.copied, st.copied_bytes), (0, 0, 0));
            assert_eq!(
                (st.tensors, st.bytes),
                (local_stats.tensors, local_stats.bytes)
            );
            assert_eq!(written.tensors, 1);
            let local_rep = merge_shards(&p2, &MergeShardsOptions::default()).unwrap();
            let rep = merge_shards(&url2, &MergeShardsOptions::default()).unwrap();
            assert_eq!(
                (
                    rep.tensors,
                    rep.slices,
                    rep.reused_tensors,
                    rep.reused_bytes
                ),
                (
                    local_rep.tensors,
                    local_rep.slices,
                    local_rep.reused_tensors,
                    local_rep.reused_bytes
                )
            );
            assert_eq!(rep.reused_files, u64::from(RANKS));
            // Exactly the checkpoint's objects at its prefix.
            let names: Vec<String> = list_names(&rt, s.as_ref(), "inc")
                .into_iter()
                .filter(|n| n.starts_with("step2"))
                .collect();
            let mut want: Vec<String> = (0..=RANKS)
                .map(|k| format!("step2.data-{k:05}-of-{:05}", RANKS + 1))
                .collect();
            want.push("step2.index".into());
            assert_eq!(names, want);

            // The base goes, in the bucket and in the directory.
            for n in list_names(&rt, s.as_ref(), "inc") {
                if n.starts_with("step1") {
                    rt.block_on(s.delete(&ObjectPath::from(format!("inc/{n}"))))
                        .unwrap();
                }
            }
            for f in std::fs::read_dir(dir.path()).unwrap() {
                let f = f.unwrap().path();
                if f.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with("step1")
                {
                    std::fs::remove_file(f).unwrap();
                }
            }
            let local = Reader::open(&p2).unwrap();
            let remote = open_sharded(&url2, RemoteOptions::default()).unwrap();
            let listed = remote.list_from(b"").unwrap();
            assert_eq!(listed.len() as u64, local.header().tensor_count);
            for e in &listed {
                let l = local
                    .get_slice(&e.name, &Region::full(&e.shape))
                    .unwrap()
                    .unwrap();
                let r = remote
                    .get_slice(&e.name, &Region::full(&e.shape))
                    .unwrap()
                    .unwrap();
                assert_eq!((r.dtype(), r.shape()), (l.dtype(), e.shape.as_slice()));
                assert_eq!(r.data(), l.data(), "{}", String::from_utf8_lossy(&e.name));
            }
            let (lv, rv) = (local.verify().unwrap(), remote.verify().unwrap());
            assert_eq!((rv.tensors, rv.slices), (lv.tensors, lv.slices));

            // A reused object damaged (one byte of a reused tensor, its length kept).
            let key = format!("inc/step2.data-00002-of-{:05}", RANKS + 1);
            let mut bytes = support::s3::get(&rt, s.as_ref(), &key).unwrap();
            let d = own(1, 3);
            let at = bytes.windows(d.len()).position(|w| w == d).unwrap();
            bytes[at + 1] ^= 0x55;
            put(&rt, s.as_ref(), &key, bytes);
            let remote = open_sharded(&url2, RemoteOptions::default()).unwrap();
            match remote.get("r1.t0003") {
                Err(Error::ChecksumMismatch { .. }) => {}
                other => panic!("{other:?}"),
            }
            assert!(remote.verify().is_err());
        },
    );
}
