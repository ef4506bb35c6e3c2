//! Sharded checkpoints and slices (SPEC.md 12, 13), against a model:
//!
//! - random tensors cut into random slices, spread over a random number of ranks (threads),
//!   merged, then read back whole and by random regions through every reader (the native
//!   [`Reader`], `open_any`, TensorFlow's layout through `TfCheckpoint`), and the same tensors in
//!   one file;
//! - the merge reads only the shards' indexes (bytes counted, and records corrupted);
//! - each shard is a complete native file; open is lazy and checks each data file on first use;
//! - hostile shard sets give errors that name the shard file and the tensor;
//! - crashes: a merge killed (SIGKILL) after each step of its commit, and at random moments, and
//!   a shard writer killed mid-write, leave the previous checkpoint or nothing, never a partial
//!   one; the leftovers are reported and cleaned only on request.

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use support::Rng;

use paramdex::interop::tf::TfCheckpoint;
use paramdex::interop::{open_any, Format, Kind, TensorData, TensorStore};
use paramdex::raw::entry::{decode_slices, encode_partitioned, FileHeader, IndexEntry};
use paramdex::raw::slices::contiguous;
use paramdex::raw::table::{Table, TableBuilder, TableOptions, TableReadOptions};
use paramdex::{
    clean_shards, merge_shards, shard_files, DType, Error, MergeShardsOptions, MergeStep,
    PartialTensors, ReadOptions, Reader, Region, SaveId, ShardFileKind, ShardProblem, ShardWriter,
    ShardedSave, SliceProblem, Tensor, Writer, WriterOptions,
};

// ---------------------------------------------------------------------------------------------
// The model.

#[derive(Clone, Debug)]
struct T {
    dtype: DType,
    shape: Vec<u64>,
    data: Vec<u8>,
}

type Model = BTreeMap<Vec<u8>, T>;

/// The row-major bytes of `region` of `t`, element by element.
fn cut(t: &T, region: &Region) -> Vec<u8> {
    let es = t.dtype.size();
    let rank = t.shape.len();
    let mut out = Vec::new();
    for k in 0..region.numel().unwrap() {
        let mut rem = k;
        let mut flat = 0u64;
        let mut idx = vec![0u64; rank];
        for d in (0..rank).rev() {
            idx[d] = rem % region.len[d] + region.start[d];
            rem /= region.len[d];
        }
        for (&i, &dim) in idx.iter().zip(&t.shape) {
            flat = flat * dim + i;
        }
        let at = flat as usize * es;
        out.extend_from_slice(&t.data[at..at + es]);
    }
    out
}

fn random_model(rng: &mut Rng, count: usize) -> Model {
    let dtypes = [DType::UInt8, DType::Int16, DType::Float32, DType::Float64];
    let mut m = Model::new();
    for i in 0..count {
        let dtype = dtypes[rng.below(4) as usize];
        let rank = rng.below(3) as usize + 1;
        let shape: Vec<u64> = (0..rank).map(|_| rng.below(7) + 1).collect();
        let n = shape.iter().product::<u64>() as usize * dtype.size();
        let name = format!("layer{}.{}", i % 3, ["w", "b", "emb", "q"][i % 4]).into_bytes();
        let name = [name, format!("{i}").into_bytes()].concat();
        m.insert(
            name,
            T {
                dtype,
                shape,
                data: rng.bytes(n),
            },
        );
    }
    m
}

/// A grid cut of `shape` along one or two axes (one piece when nothing is cut).
fn grid(rng: &mut Rng, shape: &[u64]) -> Vec<Region> {
    let rank = shape.len();
    let mut cuts: Vec<Vec<u64>> = shape.iter().map(|&d| vec![0, d]).collect();
    let axes = if rank > 1 && rng.chance(40) { 2 } else { 1 };
    for _ in 0..axes {
        let a = rng.below(rank as u64) as usize;
        for _ in 0..rng.below(3) + 1 {
            if shape[a] > 1 {
                cuts[a].push(rng.below(shape[a] - 1) + 1);
            }
        }
        cuts[a].sort_unstable();
        cuts[a].dedup();
    }
    let mut regions = vec![Region::new(vec![], vec![]).unwrap()];
    for c in &cuts {
        let mut next = Vec::new();
        for r in &regions {
            for w in c.windows(2) {
                let mut r = r.clone();
                r.start.push(w[0]);
                r.len.push(w[1] - w[0]);
                next.push(r);
            }
        }
        regions = next;
    }
    regions
}

/// What each rank writes: (name, region) pieces, a whole tensor as its full region.
fn assign(rng: &mut Rng, model: &Model, ranks: u32) -> Vec<Vec<(Vec<u8>, Region)>> {
    let mut per_rank = vec![Vec::new(); ranks as usize];
    for (name, t) in model {
        let pieces = if rng.chance(30) {
            vec![Region::full(&t.shape)]
        } else {
            grid(rng, &t.shape)
        };
        if pieces.len() == 1 {
            per_rank[rng.below(u64::from(ranks)) as usize].push((name.clone(), pieces[0].clone()));
            continue;
        }
        for p in pieces {
            per_rank[rng.below(u64::from(ranks)) as usize].push((name.clone(), p));
        }
    }
    per_rank
}

fn quick() -> WriterOptions {
    WriterOptions {
        sync: false,
        ..WriterOptions::default()
    }
}

fn no_sync() -> MergeShardsOptions<'static> {
    MergeShardsOptions {
        no_sync: true,
        ..MergeShardsOptions::default()
    }
}

/// Writes `pieces` into a writer: whole tensors with `add`, slices with `add_slice` or, at
/// random, streamed with `begin_slice`.
fn put_pieces(w: &mut Writer, model: &Model, pieces: &[(Vec<u8>, Region)], stream: bool) {
    for (name, r) in pieces {
        let t = &model[name];
        let data = cut(t, r);
        if stream {
            let mut s = w.begin_slice(name, t.dtype, &t.shape, r).unwrap();
            for chunk in data.chunks(3) {
                s.write_all(chunk).unwrap();
            }
            s.finish().unwrap();
        } else {
            w.add_slice(name, t.dtype, &t.shape, r, &data).unwrap();
        }
    }
}

/// A sharded save of `model` by `ranks` threads at `prefix`, merged.
fn save(prefix: &Path, model: &Model, ranks: u32, rng: &mut Rng) -> ShardedSave {
    let plan = assign(rng, model, ranks);
    let stream: Vec<bool> = (0..ranks).map(|_| rng.chance(50)).collect();
    let s = ShardedSave::with_options(prefix, ranks, SaveId::random(), quick()).unwrap();
    std::thread::scope(|scope| {
        for k in 0..ranks {
            let (s, plan, model, stream) = (&s, &plan, model, &stream);
            scope.spawn(move || {
                let mut w = s.shard(k).unwrap();
                put_pieces(&mut w, model, &plan[k as usize], stream[k as usize]);
                w.insert_metadata("step", 7i64).unwrap();
                w.finish().unwrap();
            });
        }
    });
    s.merge(&no_sync()).unwrap();
    s
}

// ---------------------------------------------------------------------------------------------
// Reading against the model.

/// Whether `get_slice` of `region` must borrow: one stored piece holds it as one run.
fn expect_borrowed(pieces: &[Region], region: &Region) -> bool {
    region.is_empty()
        || pieces.iter().any(|p| {
            p.contains(region) && {
                let local = Region::new(
                    region
                        .start
                        .iter()
                        .zip(&p.start)
                        .map(|(a, b)| a - b)
                        .collect(),
                    region.len.clone(),
                )
                .unwrap();
                contiguous(&p.len, &local).is_some()
            }
        })
}

/// What [`check_reader`] saw: tensors stored in slices, regions read borrowed and copied.
#[derive(Default)]
struct Seen {
    sliced: u64,
    borrowed: u64,
    copied: u64,
}

/// Every check of `r` (a native reader of a file or a sharded checkpoint) against `model`.
fn check_reader(r: &Reader, model: &Model, rng: &mut Rng, seen: &mut Seen) {
    assert_eq!(r.len(), model.len() as u64);
    // Pieces by name, from the iteration (in name order, each piece at its tensor's place).
    let mut pieces: BTreeMap<Vec<u8>, Vec<Region>> = BTreeMap::new();
    let mut order = Vec::new();
    for v in r.iter() {
        let v = v.unwrap();
        let t = &model[v.name()];
        assert_eq!(v.dtype(), t.dtype);
        assert_eq!(v.full_shape(), t.shape.as_slice());
        let region = match v.slice_start() {
            Some(start) => Region::new(start.to_vec(), v.shape().to_vec()).unwrap(),
            None => Region::full(&t.shape),
        };
        assert_eq!(v.data(), cut(t, &region), "{}", v.display_name());
        v.verify_crc().unwrap();
        v.check_record().unwrap();
        if order.last() != Some(&v.name().to_vec()) {
            order.push(v.name().to_vec());
        }
        pieces.entry(v.name().to_vec()).or_default().push(region);
    }
    assert_eq!(order, model.keys().cloned().collect::<Vec<_>>());
    for (name, t) in model {
        let stored = &pieces[name];
        let whole = stored.len() == 1 && stored[0] == Region::full(&t.shape);
        match r.get(name) {
            Ok(Some(v)) => {
                assert!(whole);
                assert_eq!(v.data(), t.data);
            }
            Err(Error::Sliced { slices, .. }) => {
                assert!(!whole);
                assert_eq!(slices, stored.len() as u64);
                seen.sliced += 1;
            }
            other => panic!("get: {other:?}"),
        }
        for _ in 0..6 {
            let region = if rng.chance(20) {
                Region::full(&t.shape)
            } else {
                rng.region_in(&t.shape)
            };
            let got = r.get_slice(name, &region).unwrap().unwrap();
            assert_eq!(got.data(), cut(t, &region), "{region:?}");
            assert_eq!(got.shape(), region.len.as_slice());
            assert_eq!(
                got.is_borrowed(),
                expect_borrowed(stored, &region),
                "{region:?} of {stored:?}"
            );
            if got.is_borrowed() {
                seen.borrowed += 1;
            } else {
                seen.copied += 1;
            }
        }
        let mut outside = Region::full(&t.shape);
        outside.len[0] += 1;
        assert!(matches!(
            r.get_slice(name, &outside),
            Err(Error::InvalidArgument(_))
        ));
    }
    assert!(r
        .get_slice("absent", &Region::full(&[1]))
        .unwrap()
        .is_none());
    let rep = r.verify().unwrap();
    assert_eq!(rep.tensors, model.len() as u64);
    let slices: usize = pieces
        .iter()
        .filter(|(n, p)| !(p.len() == 1 && p[0] == Region::full(&model[*n].shape)))
        .map(|(_, p)| p.len())
        .sum();
    assert_eq!(rep.slices, slices as u64);
}

/// `load`, `info`, `list` and `load_slice` of any store against the model.
fn check_store(s: &dyn TensorStore, model: &Model, rng: &mut Rng) {
    let list = s.list().unwrap();
    assert_eq!(
        list.iter().map(|t| t.name.clone()).collect::<Vec<_>>(),
        model.keys().cloned().collect::<Vec<_>>()
    );
    for (info, (name, t)) in list.iter().zip(model) {
        assert_eq!(info.kind, Kind::Numeric(t.dtype));
        assert_eq!(info.shape, t.shape);
        assert_eq!(s.info(name).unwrap().as_ref(), Some(info));
        let loaded = s.load(name).unwrap().unwrap();
        let TensorData::Bytes(b) = &loaded.data else {
            panic!()
        };
        assert_eq!(&b[..], &t.data[..], "{}", String::from_utf8_lossy(name));
        for _ in 0..4 {
            let region = rng.region_in(&t.shape);
            let got = s.load_slice(name, &region).unwrap().unwrap();
            let TensorData::Bytes(b) = &got.data else {
                panic!()
            };
            assert_eq!(&b[..], &cut(t, &region)[..]);
            assert_eq!(got.info.shape, region.len);
        }
    }
    assert!(s.info(b"absent").unwrap().is_none());
    assert!(s
        .load_slice(b"absent", &Region::full(&[1]))
        .unwrap()
        .is_none());
}

#[test]
fn saves_by_random_ranks_read_back_whole_and_by_any_region_through_every_reader() {
    let mut rng = Rng(0x005e_ed0f_5a7e_5eed);
    let mut seen = Seen::default();
    for case in 0..24 {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ckpt");
        let count = rng.below(6) as usize + 1;
        let model = random_model(&mut rng, count);
        let ranks = rng.below(5) as u32 + 1;
        save(&prefix, &model, ranks, &mut rng);
        // By prefix and by PREFIX.index.
        for path in [prefix.clone(), dir.path().join("ckpt.index")] {
            let r = Reader::open(&path).unwrap();
            assert!(r.is_sharded(), "case {case}");
            assert_eq!(r.header().format_version, 2);
            assert_eq!(r.header().metadata.get("step"), Some(&7i64.into()));
            check_reader(&r, &model, &mut rng, &mut seen);
        }
        // Through the registry: the prefix is a native checkpoint.
        let s = open_any(&prefix).unwrap();
        assert_eq!(s.format(), Format::Native);
        check_store(s.as_ref(), &model, &mut rng);
        assert_eq!(s.verify(0).unwrap().tensors, model.len() as u64);
        // As TensorFlow lays it out: the same files read by the TensorFlow reader.
        let tf = TfCheckpoint::open(&prefix).unwrap();
        assert_eq!(tf.num_shards(), ranks);
        check_store(&tf, &model, &mut rng);
        tf.verify(0).unwrap();

        // The same pieces in one file (a writer may hold several slices of a tensor).
        let one = dir.path().join("one.pdx");
        let mut w = Writer::create_with(&one, quick()).unwrap();
        let plan: Vec<_> = assign(&mut rng, &model, 1).concat();
        put_pieces(&mut w, &model, &plan, rng.chance(50));
        w.finish().unwrap();
        let r = Reader::open(&one).unwrap();
        assert!(!r.is_sharded());
        check_reader(&r, &model, &mut rng, &mut seen);
        check_store(&r, &model, &mut rng);
    }
    // The cases exercised what they are meant to.
    assert!(
        seen.sliced > 40 && seen.borrowed > 200 && seen.copied > 200,
        "sliced {}, borrowed {}, copied {}",
        seen.sliced,
        seen.borrowed,
        seen.copied
    );
}

#[test]
fn a_file_without_slices_or_shard_identity_is_version_1_and_one_with_them_version_2() {
    // With version 3's index layout off (by default every file is version 3, whatever it
    // holds: checked at the end).
    let earlier = || WriterOptions {
        index_v3: false,
        ..WriterOptions::default()
    };
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1.pdx");
    let mut w = Writer::create_with(&v1, earlier()).unwrap();
    w.add_values("w", &[2], &[1.0f32, 2.0]).unwrap();
    // A slice covering the whole tensor is an ordinary tensor, as in TensorFlow.
    w.add_slice("b", DType::UInt8, &[3], &Region::full(&[3]), &[1, 2, 3])
        .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&v1).unwrap();
    assert_eq!(r.header().format_version, 1);
    assert_eq!(r.tensor("b").unwrap().data(), &[1, 2, 3]);

    let v2 = dir.path().join("v2.pdx");
    let mut w = Writer::create_with(&v2, earlier()).unwrap();
    let half = Region::new(vec![1], vec![2]).unwrap();
    w.add_slice("b", DType::UInt8, &[3], &half, &[2, 3])
        .unwrap();
    // Errors, nothing written: overlap, another dtype or shape, a whole tensor of that name,
    // wrong data length, outside the shape, a scalar, a reserved name.
    let e = w
        .add_slice(
            "b",
            DType::UInt8,
            &[3],
            &Region::new(vec![2], vec![1]).unwrap(),
            &[3],
        )
        .unwrap_err();
    assert!(e.to_string().contains("overlaps"), "{e}");
    let first = Region::new(vec![0], vec![1]).unwrap();
    assert!(w.add_slice("b", DType::Int8, &[3], &first, &[1]).is_err());
    assert!(w.add_slice("b", DType::UInt8, &[4], &first, &[1]).is_err());
    assert!(matches!(
        w.add("b", Tensor::new(DType::UInt8, &[1], &[1])),
        Err(Error::DuplicateName { .. })
    ));
    assert!(w
        .add_slice("b", DType::UInt8, &[3], &first, &[1, 2])
        .is_err());
    assert!(w
        .add_slice(
            "c",
            DType::UInt8,
            &[3],
            &Region::new(vec![2], vec![2]).unwrap(),
            &[1, 2]
        )
        .is_err());
    assert!(w
        .add_slice(
            "s",
            DType::UInt8,
            &[],
            &Region::new(vec![0], vec![1]).unwrap(),
            &[1]
        )
        .is_err());
    assert!(w.add_values(b"\x00nul", &[1], &[1u8]).is_err());
    // A shape the record cannot carry (a dimension above i64::MAX): refused, nothing listed.
    let corner = Region::new(vec![0, 0], vec![1, 1]).unwrap();
    assert!(w
        .add_slice("huge", DType::UInt8, &[1 << 63, 1], &corner, &[0])
        .is_err());
    w.add_slice("b", DType::UInt8, &[3], &first, &[1]).unwrap();
    assert_eq!(w.len(), 1);
    w.finish().unwrap();
    let r = Reader::open(&v2).unwrap();
    r.verify().unwrap();
    assert_eq!(r.header().format_version, 2);
    assert_eq!((r.header().tensor_count, r.header().slice_count), (1, 2));
    let all = r.get_slice("b", &Region::full(&[3])).unwrap().unwrap();
    assert_eq!(all.data(), &[1, 2, 3]);
    assert!(!all.is_borrowed());
    let one = r.get_slice("b", &half).unwrap().unwrap();
    assert!(one.is_borrowed());
    // Names starting with a NUL byte are slice keys in a version 2 file, not tensors.
    let key = r.iter().nth(1).unwrap().unwrap().key().to_vec();
    assert_eq!(key[0], 0);
    assert!(r.get(&key).unwrap().is_none());
    // A version 1 file may hold such a name; then it takes no slices.
    let mut w = Writer::create(dir.path().join("nul.pdx")).unwrap();
    w.add_values(b"\x00nul", &[1], &[1u8]).unwrap();
    assert!(w.add_slice("b", DType::UInt8, &[3], &first, &[1]).is_err());
    w.finish().unwrap();
    // With the default options that file stays version 1 (version 3 reserves such names,
    // as version 2 does); the others are version 3, slices or not.
    let r = Reader::open(dir.path().join("nul.pdx")).unwrap();
    assert_eq!(r.header().format_version, 1);
    assert_eq!(r.tensor(b"\x00nul").unwrap().data(), &[1]);
    for (file, slices) in [("d1.pdx", false), ("d3.pdx", true)] {
        let p = dir.path().join(file);
        let mut w = Writer::create(&p).unwrap();
        if slices {
            w.add_slice("b", DType::UInt8, &[3], &half, &[2, 3])
                .unwrap();
        } else {
            w.add_values("w", &[2], &[1.0f32, 2.0]).unwrap();
        }
        w.finish().unwrap();
        assert_eq!(Reader::open(&p).unwrap().header().format_version, 3);
    }
}

#[test]
fn a_partial_tensor_reads_where_it_is_stored_and_fails_where_it_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("p");
    let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), quick()).unwrap();
    for k in 0..2u32 {
        let mut w = s.shard(k).unwrap();
        // Rows 0 and 2 of a [4, 2] tensor; rows 1 and 3 nowhere.
        let row = Region::new(vec![u64::from(k) * 2, 0], vec![1, 2]).unwrap();
        w.add_slice("emb", DType::UInt8, &[4, 2], &row, &[k as u8; 2])
            .unwrap();
        w.finish().unwrap();
    }
    let e = s.merge(&no_sync()).unwrap_err();
    assert!(
        matches!(
            &e,
            Error::Slices {
                problem: SliceProblem::Gap,
                name,
                ..
            } if name == "emb"
        ),
        "{e}"
    );
    assert!(
        e.to_string().contains("p.data-00000-of-00002.pending"),
        "{e}"
    );
    assert!(!dir.path().join("p.index").exists());
    let rep = s
        .merge(&MergeShardsOptions {
            partial: PartialTensors::Named([b"emb".to_vec()].into()),
            ..no_sync()
        })
        .unwrap();
    assert_eq!((rep.tensors, rep.slices, rep.partial), (1, 2, 1));
    let r = Reader::open(&prefix).unwrap();
    let row2 = Region::new(vec![2, 0], vec![1, 2]).unwrap();
    assert_eq!(r.get_slice("emb", &row2).unwrap().unwrap().data(), &[1, 1]);
    let e = r.get_slice("emb", &Region::full(&[4, 2])).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Slices {
                problem: SliceProblem::Gap,
                ..
            }
        ),
        "{e}"
    );
    let store = open_any(&prefix).unwrap();
    assert!(store.load(b"emb").is_err());
    r.verify().unwrap();
}

// ---------------------------------------------------------------------------------------------
// What the merge reads.

/// A fixed save (same id, same bytes every time) of 4 shards with large records.
fn fixed_save(prefix: &Path, id: SaveId) -> Model {
    let mut rng = Rng(42);
    let mut model = Model::new();
    for k in 0..4u32 {
        let mut w = ShardWriter::create(prefix, k, 4, id, quick()).unwrap();
        for i in 0..20 {
            let name = format!("r{k}.t{i:02}").into_bytes();
            let t = T {
                dtype: DType::Float32,
                shape: vec![64, 64],
                data: rng.bytes(64 * 64 * 4),
            };
            w.add(&name, Tensor::new(t.dtype, &t.shape, &t.data))
                .unwrap();
            model.insert(name, t);
        }
        // Row slices of a shared tensor.
        let full = [4u64, 1000];
        let row = Region::new(vec![u64::from(k), 0], vec![1, 1000]).unwrap();
        w.add_slice("shared", DType::UInt8, &full, &row, &vec![k as u8; 1000])
            .unwrap();
        w.finish().unwrap();
    }
    model
}

#[test]
fn the_merge_reads_only_the_shards_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let id = SaveId::random();
    let clean = dir.path().join("clean");
    fixed_save(&clean, id);
    // What a shard's index is: from the first index data block to the end.
    let mut index_bytes = 0u64;
    let mut total = 0u64;
    for k in 0..4 {
        let p = dir
            .path()
            .join(format!("clean.data-{k:05}-of-00004.pending"));
        let bytes = fs::read(&p).unwrap();
        let t = Table::open(&bytes, TableReadOptions::default()).unwrap();
        index_bytes += bytes.len() as u64 - t.first_data_offset().unwrap();
        total += bytes.len() as u64;
    }
    let rep = merge_shards(&clean, &no_sync()).unwrap();
    // Each shard: everything from its first index block on (the footer read once); no
    // record.
    assert_eq!(rep.bytes_read, index_bytes);
    assert_eq!(rep.shard_bytes, total);
    assert!(rep.bytes_read * 20 < total, "{} of {total}", rep.bytes_read);
    assert_eq!((rep.tensors, rep.slices), (81, 4));

    // The same save with every record byte of every shard destroyed merges to the same index.
    let dirty = dir.path().join("dirty");
    fixed_save(&dirty, id);
    for k in 0..4 {
        let p = dir
            .path()
            .join(format!("dirty.data-{k:05}-of-00004.pending"));
        let mut bytes = fs::read(&p).unwrap();
        let records = Reader::open(&p).unwrap().header().records_len as usize;
        bytes[..records].fill(0xa5);
        fs::write(&p, bytes).unwrap();
    }
    merge_shards(&dirty, &no_sync()).unwrap();
    assert_eq!(
        fs::read(dir.path().join("clean.index")).unwrap(),
        fs::read(dir.path().join("dirty.index")).unwrap()
    );
    // The data is another matter: verify finds it.
    assert!(Reader::open(&clean).unwrap().verify().is_ok());
    assert!(Reader::open(&dirty).unwrap().verify().is_err());
}

// ---------------------------------------------------------------------------------------------
// Shards on their own; lazy checks.

#[test]
fn each_shard_is_a_complete_native_file_readable_verifiable_and_recoverable_alone() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck");
    let id = SaveId::random();
    let model = fixed_save(&prefix, id);
    merge_shards(&prefix, &no_sync()).unwrap();
    for k in 0..4u32 {
        let p = dir.path().join(format!("ck.data-{k:05}-of-00004"));
        let r = Reader::open(&p).unwrap();
        assert!(!r.is_sharded());
        let me = r.header().shard_of.unwrap();
        assert_eq!((me.save_id, me.shard_id, me.num_shards), (id, k, 4));
        let rep = r.verify().unwrap();
        assert_eq!((rep.tensors, rep.slices), (21, 1));
        // Its own index lists the shared tensor with just its own slice.
        let row = Region::new(vec![u64::from(k), 0], vec![1, 1000]).unwrap();
        assert_eq!(
            r.get_slice("shared", &row).unwrap().unwrap().data(),
            &[k as u8; 1000][..]
        );
        assert!(r.get_slice("shared", &Region::full(&[4, 1000])).is_err());
        let name = format!("r{k}.t07").into_bytes();
        assert_eq!(r.tensor(&name).unwrap().data(), &model[&name].data[..]);
        // A torn copy (its records without the index) recovers, slices as slices.
        if k == 0 {
            let bytes = fs::read(&p).unwrap();
            let torn = dir.path().join("torn");
            fs::write(&torn, &bytes[..r.header().records_len as usize]).unwrap();
            let out = dir.path().join("recovered.pdx");
            let rep = paramdex::recover(&torn, &out, quick()).unwrap();
            assert_eq!(rep.recovered, 21);
            let rr = Reader::open(&out).unwrap();
            assert_eq!(rr.header().slice_count, 1);
            assert_eq!(
                rr.get_slice("shared", &row).unwrap().unwrap().data(),
                &[0u8; 1000][..]
            );
            assert!(rr.header().shard_of.is_none());
        }
    }
}

#[test]
fn open_is_lazy_and_each_data_file_is_checked_when_first_read() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("lazy");
    fixed_save(&prefix, SaveId::random());
    merge_shards(&prefix, &no_sync()).unwrap();
    let shard = |k: u32| dir.path().join(format!("lazy.data-{k:05}-of-00004"));
    // Shard 1 missing, shard 2 from another save, shard 3 longer than recorded.
    fs::remove_file(shard(1)).unwrap();
    let other = dir.path().join("other");
    fixed_save(&other, SaveId::random());
    fs::copy(
        dir.path().join("other.data-00002-of-00004.pending"),
        shard(2),
    )
    .unwrap();
    let mut f = fs::OpenOptions::new().append(true).open(shard(3)).unwrap();
    f.write_all(b"junk").unwrap();
    drop(f);
    // Opening reads no data file; shard 0 is intact and reads.
    let r = Reader::open(&prefix).unwrap();
    assert_eq!(r.tensor("r0.t00").unwrap().data().len(), 64 * 64 * 4);
    let named = |e: &Error, k: u32| e.to_string().contains(&*shard(k).to_string_lossy());
    let e = r.get("r1.t00").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Missing,
                ..
            }
        ) && named(&e, 1),
        "{e}"
    );
    let e = r.get("r2.t00").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Identity,
                ..
            }
        ) && named(&e, 2),
        "{e}"
    );
    let e = r.get("r3.t00").unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Length,
                ..
            }
        ) && named(&e, 3),
        "{e}"
    );
    // A region spanning slices in good and bad shards fails on the bad one.
    assert!(r.get_slice("shared", &Region::full(&[4, 1000])).is_err());
    assert!(r.verify().is_err());
    // Listing reads the index alone.
    let store = open_any(&prefix).unwrap();
    assert_eq!(store.list().unwrap().len(), 81);
}

// ---------------------------------------------------------------------------------------------
// Hostile shard sets.

/// Rewrites the index of the native file at `path`: `f` gives each entry's new value (the
/// header's too, key ""), `None` to keep it; records are kept byte for byte.
fn rewrite_index(path: &Path, mut f: impl FnMut(&[u8], &[u8]) -> Option<Vec<u8>>) {
    let bytes = fs::read(path).unwrap();
    let t = Table::open(&bytes, TableReadOptions::default()).unwrap();
    let records_len = t.first_data_offset().unwrap();
    let mut out = bytes[..records_len as usize].to_vec();
    let mut it = t.iter();
    let mut entries = Vec::new();
    while it.next().unwrap() {
        let v = f(it.key(), it.value()).unwrap_or_else(|| it.value().to_vec());
        entries.push((it.key().to_vec(), v));
    }
    let mut b = TableBuilder::new(&mut out, records_len, TableOptions::default()).unwrap();
    for (k, v) in &entries {
        b.add(k, v).unwrap();
    }
    b.finish().unwrap();
    fs::write(path, out).unwrap();
}

fn header_with(value: &[u8], f: impl FnOnce(&mut FileHeader)) -> Vec<u8> {
    let mut h = FileHeader::decode(value, 0).unwrap();
    f(&mut h);
    h.encode()
}

/// Pending shards of a save of `n` ranks; `f(k, writer)` fills shard k.
fn pending_save(prefix: &Path, n: u32, f: impl Fn(u32, &mut ShardWriter)) -> SaveId {
    let id = SaveId::random();
    for k in 0..n {
        let mut w = ShardWriter::create(prefix, k, n, id, quick()).unwrap();
        f(k, &mut w);
        w.finish().unwrap();
    }
    id
}

fn rows(k: u32, n: u64) -> Region {
    Region::new(vec![u64::from(k) * n, 0], vec![n, 2]).unwrap()
}

#[test]
fn hostile_shard_sets_give_errors_naming_the_file_and_the_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    let pending = |name: &str, k: u32, n: u32| p(&format!("{name}.data-{k:05}-of-{n:05}.pending"));
    let says = |e: &Error, what: &[&str]| {
        let text = e.to_string();
        for w in what {
            assert!(text.contains(w), "{text:?} does not name {w:?}");
        }
    };
    let fill = |k: u32, w: &mut ShardWriter| {
        w.add_slice("emb", DType::UInt8, &[4, 2], &rows(k, 2), &[k as u8; 4])
            .unwrap();
    };

    // A missing shard.
    pending_save(&p("miss"), 3, |k, w| {
        w.add_values(format!("t{k}"), &[1], &[1u8]).unwrap()
    });
    fs::remove_file(pending("miss", 1, 3)).unwrap();
    let e = merge_shards(p("miss"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Missing,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["miss.data-00001-of-00003.pending", "shard 1 of 3"]);

    // A shard of another save in the set: two saves pending at once.
    pending_save(&p("mix"), 2, fill);
    let first = fs::read(pending("mix", 1, 2)).unwrap();
    let other = pending_save(&p("mix"), 2, fill);
    fs::write(pending("mix", 1, 2), first).unwrap();
    let e = merge_shards(p("mix"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Leftover,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["several saves"]);
    // Naming the save to merge: its shard 1 is missing (the other save's is ignored).
    let e = merge_shards(
        p("mix"),
        &MergeShardsOptions {
            save_id: Some(other),
            ..no_sync()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Missing,
                ..
            }
        ),
        "{e}"
    );

    // Overlapping slices in two shards.
    pending_save(&p("over"), 2, |k, w| {
        let r = Region::new(vec![u64::from(k), 0], vec![2, 2]).unwrap();
        w.add_slice("emb", DType::UInt8, &[4, 2], &r, &[0; 4])
            .unwrap();
    });
    let e = merge_shards(p("over"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Slices {
                problem: SliceProblem::Overlap,
                ..
            }
        ),
        "{e}"
    );
    says(
        &e,
        &[
            "emb",
            "over.data-00000-of-00002.pending",
            "over.data-00001-of-00002.pending",
        ],
    );

    // The same tensor whole in two shards.
    pending_save(&p("dup"), 2, |_, w| {
        w.add_values("w", &[1], &[1u8]).unwrap()
    });
    let e = merge_shards(p("dup"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Slices {
                problem: SliceProblem::Overlap,
                ..
            }
        ),
        "{e}"
    );
    says(
        &e,
        &[
            "tensor w",
            "dup.data-00000-of-00002.pending",
            "dup.data-00001-of-00002.pending",
        ],
    );

    // Whole in one shard, sliced in another; slices of different shapes.
    pending_save(&p("mixed"), 2, |k, w| {
        if k == 0 {
            w.add_values("emb", &[4, 2], &[0u8; 8]).unwrap()
        } else {
            fill(k, w)
        }
    });
    let e = merge_shards(p("mixed"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Slices {
                problem: SliceProblem::Mismatch,
                ..
            }
        ),
        "{e}"
    );
    pending_save(&p("shape"), 2, |k, w| {
        let full = [4 + u64::from(k), 2];
        w.add_slice("emb", DType::UInt8, &full, &rows(k, 2), &[0; 4])
            .unwrap();
    });
    let e = merge_shards(p("shape"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Slices {
                problem: SliceProblem::Mismatch,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["emb", "[4, 2]", "[5, 2]"]);

    // A slice outside the full shape (a shard's full entry rewritten to claim a larger slice).
    pending_save(&p("out"), 2, fill);
    rewrite_index(&pending("out", 1, 2), |k, v| {
        (k == b"emb").then(|| {
            let mut e = Vec::new();
            let bad = vec![
                paramdex::raw::slices::Extent {
                    start: 2,
                    length: 9,
                },
                paramdex::raw::slices::Extent::FULL,
            ];
            let d = IndexEntry::decode(v, 0, 254).unwrap();
            assert_eq!(decode_slices(v, 0, 2).unwrap().len(), 1);
            encode_partitioned(&mut e, d.dtype().unwrap(), &d.shape, &[bad]);
            e
        })
    });
    let e = merge_shards(p("out"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Slices {
                problem: SliceProblem::OutOfBounds,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["emb", "out.data-00001-of-00002.pending"]);

    // A shard number not below the number of shards.
    pending_save(&p("count"), 2, fill);
    rewrite_index(&pending("count", 1, 2), |k, v| {
        k.is_empty().then(|| {
            header_with(v, |h| {
                h.shard_of = h.shard_of.map(|mut s| {
                    s.shard_id = 5;
                    s
                })
            })
        })
    });
    let e = merge_shards(p("count"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Count,
                ..
            }
        ),
        "{e}"
    );
    says(&e, &["count.data-00001-of-00002.pending", "shard 5 of 2"]);

    // A shard that is not a shard (a plain native file under a shard's name).
    pending_save(&p("plain"), 2, fill);
    let mut w = Writer::create(pending("plain", 0, 2)).unwrap();
    w.add_values("emb", &[4, 2], &[0u8; 8]).unwrap();
    w.finish().unwrap();
    let e = merge_shards(p("plain"), &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Identity,
                ..
            }
        ),
        "{e}"
    );

    // Nothing was committed by any failed merge.
    for name in [
        "miss", "mix", "over", "dup", "mixed", "shape", "out", "count", "plain",
    ] {
        assert!(!p(&format!("{name}.index")).exists(), "{name}");
    }

    // After a commit: an index entry pointing outside its shard, and one naming a shard that
    // does not exist.
    pending_save(&p("idx"), 2, |k, w| {
        w.add_values(format!("t{k}"), &[2], &[k as u8; 2]).unwrap()
    });
    merge_shards(p("idx"), &no_sync()).unwrap();
    rewrite_index(&p("idx.index"), |k, v| {
        let mut e = IndexEntry::decode(v, 0, 254).ok()?;
        match k {
            b"t0" => e.offset += 1 << 20,
            b"t1" => e.shard_id = 2,
            _ => return None,
        }
        let mut out = Vec::new();
        e.encode(&mut out);
        Some(out)
    });
    let r = Reader::open(p("idx")).unwrap();
    let e = r.get("t0").unwrap_err();
    says(
        &e,
        &[
            "tensor t0",
            "idx.data-00000-of-00002",
            "outside the records region",
        ],
    );
    let e = r.get("t1").unwrap_err();
    says(&e, &["tensor t1", "shard_id 2"]);
    assert!(r.verify().is_err());
}

// ---------------------------------------------------------------------------------------------
// Leftovers.

#[test]
fn leftovers_are_reported_and_removed_only_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck");
    // A committed checkpoint of 3 shards, then a save of 2 whose merge never ran.
    let a = pending_save(&prefix, 3, |k, w| {
        w.add_values(format!("a{k}"), &[1], &[1u8]).unwrap()
    });
    merge_shards(&prefix, &no_sync()).unwrap();
    pending_save(&prefix, 2, |k, w| {
        w.add_values(format!("b{k}"), &[1], &[2u8]).unwrap()
    });
    let files = shard_files(&prefix).unwrap();
    let kinds =
        |files: &[paramdex::ShardFile], kind| files.iter().filter(|f| f.kind == kind).count();
    assert_eq!(kinds(&files, ShardFileKind::Committed), 3);
    assert_eq!(kinds(&files, ShardFileKind::Pending), 2);
    assert!(files
        .iter()
        .filter(|f| f.kind == ShardFileKind::Committed)
        .all(|f| f.shard.unwrap().save_id == a));
    // Reading the checkpoint is not disturbed by the pending save.
    Reader::open(&prefix).unwrap().verify().unwrap();
    let removed = clean_shards(&prefix).unwrap();
    assert_eq!(removed.len(), 2);
    assert_eq!(shard_files(&prefix).unwrap().len(), 3);
    Reader::open(&prefix).unwrap().verify().unwrap();
    // Shards of a checkpoint whose index is gone are orphans.
    fs::remove_file(dir.path().join("ck.index")).unwrap();
    let files = shard_files(&prefix).unwrap();
    assert_eq!(kinds(&files, ShardFileKind::Orphan), 3);
    assert_eq!(clean_shards(&prefix).unwrap().len(), 3);
    assert!(fs::read_dir(dir.path()).unwrap().next().is_none());
}

// ---------------------------------------------------------------------------------------------
// Crashes: real processes killed with SIGKILL.

const CHILD_DIR: &str = "PARAMDEX_SHARD_CHILD_DIR";
const CHILD_JOB: &str = "PARAMDEX_SHARD_CHILD_JOB";

/// The child side of the crash tests: does nothing unless started by a parent test. Jobs:
/// `merge-block-N` merges the pending save at `DIR/ck`, blocking after its N-th step;
/// `merge` merges it; `write-slow` writes shard 1 of 2 of a save, slowly.
#[test]
fn shard_crash_child_helper() {
    let (Ok(dir), Ok(job)) = (std::env::var(CHILD_DIR), std::env::var(CHILD_JOB)) else {
        return;
    };
    let prefix = Path::new(&dir).join("ck");
    let say = |s: &str| {
        println!("\nPDX-{s}");
        std::io::stdout().flush().unwrap();
    };
    let block = || -> ! {
        let mut line = String::new();
        loop {
            line.clear();
            if std::io::stdin().lock().read_line(&mut line).unwrap_or(0) == 0 {
                std::process::exit(3);
            }
        }
    };
    if let Some(n) = job.strip_prefix("merge-block-") {
        let n: usize = n.parse().unwrap();
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let on_step = |s: MergeStep| {
            if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1 == n {
                say(&format!("BLOCKED {s:?}"));
                block();
            }
        };
        merge_shards(
            &prefix,
            &MergeShardsOptions {
                on_step: Some(&on_step),
                ..MergeShardsOptions::default()
            },
        )
        .unwrap();
    } else if job == "merge" {
        say("STARTED");
        merge_shards(&prefix, &MergeShardsOptions::default()).unwrap();
    } else if job == "write-slow" {
        let id = SaveId::from_hex(&std::env::var("PARAMDEX_SHARD_SAVE").unwrap()).unwrap();
        let mut w = ShardWriter::create(&prefix, 1, 2, id, WriterOptions::default()).unwrap();
        for i in 0..1000 {
            w.add_values(format!("slow{i:04}"), &[1 << 16], &vec![7u8; 1 << 16])
                .unwrap();
            if i == 20 {
                say("WRITING");
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        w.finish().unwrap();
    }
    say("FINISHED");
    std::process::exit(4);
}

fn child(dir: &Path, job: &str, env: &[(&str, String)]) -> std::process::Child {
    let mut c = std::process::Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        "shard_crash_child_helper",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD_DIR, dir)
    .env(CHILD_JOB, job)
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::inherit());
    for (k, v) in env {
        c.env(k, v);
    }
    c.spawn().unwrap()
}

/// Waits for a line of the child's holding `marker`; returns the line.
fn wait_for(c: &mut std::process::Child, marker: &str) -> String {
    let out = c.stdout.as_mut().unwrap();
    let mut reader = std::io::BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "the child ended before {marker}"
        );
        assert!(
            !line.contains("PDX-FINISHED") || marker == "FINISHED",
            "the child finished"
        );
        if line.contains(marker) {
            return line;
        }
    }
}

/// What is at the prefix: the model of the checkpoint there (verified), or `None`.
fn checkpoint_at(prefix: &Path) -> Option<Vec<Vec<u8>>> {
    let r = Reader::open(prefix).ok()?;
    r.verify().unwrap();
    Some(r.iter().map(|v| v.unwrap().name().to_vec()).collect())
}

/// A committed checkpoint A (3 shards: a0..a2) and a pending save B (2 shards: b0, b1).
fn previous_and_pending(prefix: &Path) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    pending_save(prefix, 3, |k, w| {
        w.add_values(format!("a{k}"), &[1000], &[k as u8; 1000])
            .unwrap()
    });
    merge_shards(prefix, &MergeShardsOptions::default()).unwrap();
    pending_save(prefix, 2, |k, w| {
        w.add_values(format!("b{k}"), &[1000], &[k as u8; 1000])
            .unwrap();
        let r = Region::new(vec![u64::from(k)], vec![1]).unwrap();
        w.add_slice("s", DType::UInt8, &[2], &r, &[k as u8])
            .unwrap();
    });
    let a = (0..3).map(|k| format!("a{k}").into_bytes()).collect();
    let mut b: Vec<Vec<u8>> = (0..2).map(|k| format!("b{k}").into_bytes()).collect();
    b.push(b"s".to_vec());
    b.push(b"s".to_vec());
    (a, b)
}

#[cfg(unix)]
#[test]
fn a_merge_killed_after_any_step_leaves_the_previous_checkpoint_or_nothing() {
    // Steps: Checked, IndexWritten, PreviousRemoved, PreviousDataRemoved, ShardRenamed(0),
    // ShardRenamed(1), Committed.
    for n in 1..=7usize {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ck");
        let (a, b) = previous_and_pending(&prefix);
        let mut c = child(dir.path(), &format!("merge-block-{n}"), &[]);
        let line = wait_for(&mut c, "PDX-BLOCKED");
        c.kill().unwrap();
        assert!(!c.wait().unwrap().success());
        let step = line.trim().trim_start_matches("PDX-BLOCKED ").to_string();
        let now = checkpoint_at(&prefix);
        match n {
            1 | 2 => assert_eq!(now, Some(a.clone()), "after {step}"),
            3..=6 => {
                assert_eq!(now, None, "after {step}: no index, no checkpoint");
                // The files left are reported: B's shards, pending or already renamed.
                let files = shard_files(&prefix).unwrap();
                assert!(files.iter().all(|f| f.kind != ShardFileKind::Committed));
                assert!(files.iter().any(|f| f.kind == ShardFileKind::Temporary));
            }
            _ => assert_eq!(now, Some(b.clone()), "after {step}"),
        }
        // A merge run again finishes the job (or finds nothing to do after the commit).
        let again = merge_shards(&prefix, &no_sync());
        if n == 7 {
            assert!(again.is_err(), "after {step}: nothing pending");
        } else {
            again.unwrap();
        }
        assert_eq!(checkpoint_at(&prefix), Some(b.clone()), "after {step}");
        clean_shards(&prefix).unwrap();
        // Only B's index and data files remain.
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "ck.data-00000-of-00002",
                "ck.data-00001-of-00002",
                "ck.index"
            ],
            "after {step}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_merge_killed_at_a_random_moment_leaves_the_previous_checkpoint_nothing_or_the_new_one() {
    let mut rng = Rng(0xdead_beef_1234_5678);
    for _ in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("ck");
        let (a, b) = previous_and_pending(&prefix);
        let mut c = child(dir.path(), "merge", &[]);
        wait_for(&mut c, "PDX-STARTED");
        std::thread::sleep(std::time::Duration::from_micros(rng.below(30_000)));
        let _ = c.kill();
        let _ = c.wait();
        let now = checkpoint_at(&prefix);
        assert!(
            now.is_none() || now == Some(a.clone()) || now == Some(b.clone()),
            "{now:?}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_shard_writer_killed_mid_write_leaves_the_previous_checkpoint_and_named_leftovers() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck");
    let (a, _) = previous_and_pending(&prefix);
    clean_shards(&prefix).unwrap();
    // A new save: shard 0 finished, shard 1 killed while it writes.
    let id = SaveId::random();
    let mut w = ShardWriter::create(&prefix, 0, 2, id, quick()).unwrap();
    w.add_values("c0", &[1], &[0u8]).unwrap();
    w.finish().unwrap();
    let mut c = child(
        dir.path(),
        "write-slow",
        &[("PARAMDEX_SHARD_SAVE", id.to_string())],
    );
    wait_for(&mut c, "PDX-WRITING");
    c.kill().unwrap();
    assert!(!c.wait().unwrap().success());
    assert_eq!(checkpoint_at(&prefix), Some(a.clone()));
    let files = shard_files(&prefix).unwrap();
    let temp: Vec<_> = files
        .iter()
        .filter(|f| f.kind == ShardFileKind::Temporary)
        .collect();
    assert_eq!(temp.len(), 1, "{files:?}");
    assert!(temp[0]
        .path
        .to_string_lossy()
        .contains("ck.data-00001-of-00002.pending"));
    assert_eq!(
        files
            .iter()
            .filter(|f| f.kind == ShardFileKind::Pending)
            .count(),
        1
    );
    // The torn shard's records are recoverable; the save cannot be merged without it.
    let rec = dir.path().join("rec.pdx");
    // (Records reach the file 1 MiB at a time: at least the first 15 of the 21 written.)
    let rep = paramdex::recover(&temp[0].path, &rec, quick()).unwrap();
    assert!(rep.recovered >= 15, "{rep:?}");
    let r = Reader::open(&rec).unwrap();
    for v in r.iter() {
        assert_eq!(v.unwrap().data(), &[7u8; 1 << 16][..]);
    }
    let e = merge_shards(&prefix, &no_sync()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Shard {
                problem: ShardProblem::Missing,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(checkpoint_at(&prefix), Some(a));
    assert_eq!(clean_shards(&prefix).unwrap().len(), 2);
}

/// Issue 37: the staged file a killed shard writer left (up to a whole shard) is removed by
/// the next shard writer of the prefix (so by every save of a `ShardedSave`, the DCP writer
/// and `paramdex.ShardWriter`), and so is one of any writer of the prefix; a staged file a
/// live writer holds (locked), and those of other prefixes, stay.
#[cfg(unix)]
#[test]
fn a_shard_writer_removes_what_killed_writers_of_its_prefix_left() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck");
    let (a, _) = previous_and_pending(&prefix);
    clean_shards(&prefix).unwrap();
    let id = SaveId::random();
    let mut c = child(
        dir.path(),
        "write-slow",
        &[("PARAMDEX_SHARD_SAVE", id.to_string())],
    );
    wait_for(&mut c, "PDX-WRITING");
    c.kill().unwrap();
    assert!(!c.wait().unwrap().success());
    let temporaries = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        v.sort();
        v
    };
    let killed = temporaries(dir.path());
    assert_eq!(killed.len(), 1, "{killed:?}");
    assert!(killed[0].starts_with(".ck.data-00001-of-00002.pending."));
    // What verify reports (and what the next writer removes), with its size.
    let found = paramdex::abandoned_temporaries(dir.path()).unwrap();
    assert_eq!(found.len(), 1);
    assert!(found[0].len > 0);
    // Another writer's leftovers at the prefix (a merge's index), a live writer's staged file,
    // another prefix's.
    let index_tmp = dir.path().join(".ck.index.q1w2e3r4t5.pdx-tmp");
    fs::write(&index_tmp, b"half an index").unwrap();
    let live = dir
        .path()
        .join(".ck.data-00000-of-00003.pending.z9x8c7v6b5.pdx-tmp");
    fs::write(&live, b"being written").unwrap();
    let holder = fs::File::open(&live).unwrap();
    holder.try_lock().unwrap();
    let other = dir
        .path()
        .join(".other.data-00000-of-00002.pending.z9x8c7v6b5.pdx-tmp");
    fs::write(&other, b"another prefix").unwrap();
    let found = paramdex::abandoned_temporaries(dir.path()).unwrap();
    assert_eq!(found.len(), 3, "the live one is not abandoned: {found:?}");

    let mut w = ShardWriter::create(&prefix, 0, 1, SaveId::random(), quick()).unwrap();
    let during = temporaries(dir.path());
    assert_eq!(
        during.len(),
        3,
        "the new writer's own, the live one, the other prefix's: {during:?}"
    );
    assert!(live.exists() && other.exists() && !index_tmp.exists());
    w.add_values("c0", &[1], &[0u8]).unwrap();
    w.finish().unwrap();
    drop(holder);
    assert_eq!(checkpoint_at(&prefix), Some(a));
    merge_shards(&prefix, &no_sync()).unwrap();
    let left = temporaries(dir.path());
    let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(left, [name(&live), name(&other)]);
}

// ---------------------------------------------------------------------------------------------
// Reading by region reads only the region.

#[test]
fn get_slice_reads_only_the_bytes_of_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cols.pdx");
    // An [8, 16] float32 tensor stored as 4 column slices; then the bytes of every slice
    // outside rows 2..5 are destroyed.
    let mut rng = Rng(7);
    let t = T {
        dtype: DType::Float32,
        shape: vec![8, 16],
        data: rng.bytes(8 * 16 * 4),
    };
    let mut w = Writer::create(&path).unwrap();
    for c in 0..4u64 {
        let r = Region::new(vec![0, c * 4], vec![8, 4]).unwrap();
        w.add_slice("w", t.dtype, &t.shape, &r, &cut(&t, &r))
            .unwrap();
    }
    w.finish().unwrap();
    let band = Region::new(vec![2, 0], vec![3, 16]).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    {
        let r = Reader::from_bytes(bytes.clone()).unwrap();
        for piece in r.iter() {
            let piece = piece.unwrap();
            let at = piece.data_offset() as usize;
            let row = 4 * 4; // a slice row: 4 float32
            for rowi in (0..2).chain(5..8) {
                bytes[at + rowi * row..at + (rowi + 1) * row].fill(0xff);
            }
        }
    }
    let r = Reader::from_bytes(bytes.clone()).unwrap();
    let got = r.get_slice("w", &band).unwrap().unwrap();
    assert_eq!(got.data(), cut(&t, &band));
    assert!(!got.is_borrowed());
    assert!(got.as_slice::<f32>().is_ok(), "the copy is aligned for f32");
    // Inside one slice, contiguous: borrowed.
    let inside = Region::new(vec![3, 4], vec![1, 4]).unwrap();
    assert!(r.get_slice("w", &inside).unwrap().unwrap().is_borrowed());
    // Checking checksums reads whole slices, and finds the damage.
    let checked = Reader::from_bytes_with(
        bytes,
        ReadOptions {
            verify_tensors: true,
            ..ReadOptions::default()
        },
    )
    .unwrap();
    assert!(matches!(
        checked.get_slice("w", &band),
        Err(Error::ChecksumMismatch { .. })
    ));
    assert!(r.verify().is_err());
}

#[test]
fn tensorflow_partitioned_tensors_read_by_region() {
    let mut rng = Rng(99);
    let ck = TfCheckpoint::open(support::data("tf/partitioned/v1/model.ckpt")).unwrap();
    let mut partitioned = 0;
    for info in ck.list().unwrap() {
        let Kind::Numeric(d) = info.kind else {
            continue;
        };
        let loaded = ck.load(&info.name).unwrap().unwrap();
        let TensorData::Bytes(all) = &loaded.data else {
            panic!()
        };
        let t = T {
            dtype: d,
            shape: info.shape.clone(),
            data: all.to_vec(),
        };
        if !info.shape.is_empty() {
            partitioned += 1;
        }
        for _ in 0..20 {
            let region = rng.region_in(&info.shape);
            let got = ck.load_slice(&info.name, &region).unwrap().unwrap();
            let TensorData::Bytes(b) = &got.data else {
                panic!()
            };
            assert_eq!(&b[..], &cut(&t, &region)[..]);
        }
    }
    assert!(partitioned > 0);
}

#[test]
fn a_sharded_checkpoint_exports_for_tensorflow_and_keeps_its_data_files_identity() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck");
    let model = fixed_save(&prefix, SaveId::random());
    merge_shards(&prefix, &no_sync()).unwrap();
    fs::create_dir(dir.path().join("out")).unwrap();
    let to = dir.path().join("out/tf");
    let rep = paramdex::interop::tf::export_tf(&prefix, &to).unwrap();
    assert_eq!(rep.data_paths.len(), 4);
    let ck = TfCheckpoint::open(&to).unwrap();
    for (name, t) in &model {
        let TensorData::Bytes(b) = ck.load(name).unwrap().unwrap().data else {
            panic!()
        };
        assert_eq!(&b[..], &t.data[..]);
    }
    // Under the new prefix it is still a native sharded checkpoint.
    Reader::open(&to).unwrap().verify().unwrap();
    let _: PathBuf = rep.index_path;
}

/// `Reader::holds_unchanged` on a sharded checkpoint (the base of an incremental save): a tensor
/// in any data file is found unchanged only when byte-identical; slices are not compared whole.
#[test]
fn holds_unchanged_in_sharded_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let save = ShardedSave::new(&prefix, 2).unwrap();
    for k in 0..2u32 {
        let mut w = save.shard(k).unwrap();
        let data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(k as u8 + 3)).collect();
        w.add(format!("t{k}"), Tensor::new(DType::UInt8, &[8, 8], &data))
            .unwrap();
        let row = Region::new(vec![u64::from(k), 0], vec![1, 4]).unwrap();
        w.add_slice("s", DType::UInt8, &[2, 4], &row, &[k as u8; 4])
            .unwrap();
        w.finish().unwrap();
    }
    save.merge(&Default::default()).unwrap();
    let r = Reader::open(&prefix).unwrap();
    for k in 0..2u32 {
        let mut data: Vec<u8> = (0..64u8).map(|i| i.wrapping_mul(k as u8 + 3)).collect();
        let name = format!("t{k}");
        assert!(r
            .holds_unchanged(&name, Tensor::new(DType::UInt8, &[8, 8], &data))
            .unwrap());
        // Same size, other bytes.
        data[63] ^= 1;
        assert!(!r
            .holds_unchanged(&name, Tensor::new(DType::UInt8, &[8, 8], &data))
            .unwrap());
        data[63] ^= 1;
        assert!(!r
            .holds_unchanged(&name, Tensor::new(DType::UInt8, &[64], &data))
            .unwrap());
    }
    assert!(!r
        .holds_unchanged(
            "s",
            Tensor::new(DType::UInt8, &[2, 4], &[0, 0, 0, 0, 1, 1, 1, 1])
        )
        .unwrap());
    assert!(!r
        .holds_unchanged("t2", Tensor::new(DType::UInt8, &[1], &[0]))
        .unwrap());
}

/// A checksum that does not match names the file holding the damaged bytes: the data file of a
/// sharded checkpoint (not just its index), and the file for an index block, so a user can tell
/// which of a checkpoint's files, or which input of `diff`/`convert`, is damaged.
#[test]
fn checksum_mismatches_name_the_damaged_file() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("named");
    let model = fixed_save(&prefix, SaveId::random());
    merge_shards(&prefix, &no_sync()).unwrap();
    let data1 = dir.path().join("named.data-00001-of-00004");
    let r = Reader::open(&data1).unwrap();
    let victim = r.tensor("r1.t03").unwrap().data_offset();
    drop(r);
    let mut bytes = fs::read(&data1).unwrap();
    bytes[victim as usize] ^= 0xff;
    fs::write(&data1, &bytes).unwrap();
    let index = dir.path().join("named.index");
    let context_of = |e: Error| match e {
        Error::ChecksumMismatch {
            context: Some(c), ..
        } => c,
        other => panic!("expected a checksum mismatch with its file, got {other:?}"),
    };
    let r = Reader::open(&index).unwrap();
    let c = context_of(r.verify().unwrap_err());
    assert!(c.contains(&data1.display().to_string()), "{c}");
    let t = r.tensor("r1.t03").unwrap();
    let c = context_of(t.verify_crc().unwrap_err());
    assert!(c.contains(&data1.display().to_string()), "{c}");
    assert!(model.contains_key(&b"r1.t03"[..]));

    // An index block of a single file.
    let single = dir.path().join("named.data-00002-of-00004");
    let r = Reader::open(&single).unwrap();
    let h = r.header().records_len;
    drop(r);
    let mut bytes = fs::read(&single).unwrap();
    // The first data block of the index starts right after the records.
    bytes[h as usize + 2] ^= 0xff;
    fs::write(&single, &bytes).unwrap();
    let e = Reader::open(&single).and_then(|r| r.verify().map(drop));
    let c = context_of(e.unwrap_err());
    assert!(c.contains(&single.display().to_string()), "{c}");
}

/// `data_location` of a sharded checkpoint's tensor names its data file, where its offset is,
/// whether the checkpoint is opened by its prefix or by `PREFIX.index` (it once named the
/// index, and the Python package then mapped the index's bytes at the shard's offset).
#[test]
fn data_location_names_the_data_file_not_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let mut rng = Rng(29);
    let model = random_model(&mut rng, 8);
    let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), quick()).unwrap();
    let mut writers: Vec<ShardWriter> = (0..2).map(|k| s.shard(k).unwrap()).collect();
    for (i, (name, t)) in model.iter().enumerate() {
        writers[i % 2]
            .add(name, Tensor::new(t.dtype, &t.shape, &t.data))
            .unwrap();
    }
    for w in writers {
        w.finish().unwrap();
    }
    s.merge(&no_sync()).unwrap();
    let index = dir.path().join("ckpt.index");
    for opened in [&prefix, &index] {
        let store = open_any(opened).unwrap();
        let mut files = std::collections::BTreeSet::new();
        for (name, t) in &model {
            let loc = store.data_location(name).unwrap().unwrap();
            assert_ne!(loc.path, index, "{}", String::from_utf8_lossy(name));
            let file = fs::read(&loc.path).unwrap();
            let at = usize::try_from(loc.offset).unwrap();
            assert_eq!(&file[at..at + t.data.len()], &t.data[..]);
            files.insert(loc.path);
        }
        assert_eq!(files.len(), 2);
    }
}

/// A prefix (or a directory) holding only the pending shards of a save that never committed
/// (a writer killed, the merge never run) is an error naming them and `clean-shards`, not
/// "no such file"; once merged, the checkpoint opens.
#[test]
fn open_any_names_the_pending_shards_of_an_unfinished_save() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("dcp");
    let save = SaveId::random();
    let mut w = ShardWriter::create(&prefix, 0, 2, save, WriterOptions::default()).unwrap();
    w.add_values("a", &[2], &[1.0f32, 2.0]).unwrap();
    w.finish().unwrap();
    for input in [prefix.clone(), dir.path().to_path_buf()] {
        match open_any(&input) {
            Err(paramdex::Error::Shard {
                problem: paramdex::ShardProblem::Leftover,
                detail,
                ..
            }) => {
                assert!(
                    detail.contains("dcp.data-00000-of-00002.pending"),
                    "{detail}"
                );
                assert!(detail.contains("clean-shards"), "{detail}");
            }
            other => panic!("{}: {:?}", input.display(), other.map(|s| s.format())),
        }
    }
    let mut w = ShardWriter::create(&prefix, 1, 2, save, WriterOptions::default()).unwrap();
    w.add_values("b", &[1], &[3.0f32]).unwrap();
    w.finish().unwrap();
    merge_shards(&prefix, &MergeShardsOptions::default()).unwrap();
    assert_eq!(open_any(&prefix).unwrap().format(), Format::Native);
}
