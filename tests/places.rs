//! One engine for every place (issue 26): every compatibility file under `tests/data/native`,
//! and damaged copies of a reference file, read from a mapped file (`open_any` of a path), by
//! ranges through a plain file (`Reader` / `open_sharded` over `FileRange`, `pread`),
//! and through the object code path (`open_any` of a `file://` URL: object_store's local file
//! system behind `ObjectRange`), must give the same listing (LoD included), the same loads
//! (data and LoD), the same regions, the same `info`, the same `verify` counts, and errors of
//! the same variants.
#![cfg(feature = "s3")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use paramdex::interop::{open_any, LoadedTensor, TensorInfo, TensorStore};
use paramdex::remote::{open_sharded, FileRange, ObjectRange, RemoteOptions};
use paramdex::{DType, Error, Reader, Region, Tensor, Writer, WriterOptions};

/// What a store gives for one read, comparable across places: the value, or the error's
/// variant (the messages name the place, which differs).
#[derive(Debug, PartialEq)]
enum Got<T> {
    Value(T),
    Failed(String),
}

impl<T> Got<T> {
    /// A copy of a failure (a value is not copied).
    fn clone_failed(&self) -> Got<T> {
        match self {
            Got::Failed(v) => Got::Failed(v.clone()),
            Got::Value(_) => Got::Failed("a value".into()),
        }
    }
}

fn got<T>(r: paramdex::Result<T>) -> Got<T> {
    match r {
        Ok(v) => Got::Value(v),
        Err(e) => Got::Failed(variant(&e)),
    }
}

/// The variant of an error (its name), which every place must agree on.
fn variant(e: &Error) -> String {
    let s = format!("{e:?}");
    s.split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

/// A load as comparable data: the info and the bytes.
fn loaded(t: Option<LoadedTensor<'_>>) -> Load {
    t.map(|t| (t.info.clone(), t.data.raw_bytes().into_owned()))
}

/// A tensor as loaded: its info and its bytes.
type Load = Option<(TensorInfo, Vec<u8>)>;

/// Everything the places must agree on, for one store.
#[derive(Debug, PartialEq)]
struct Reading {
    listing: Got<Vec<TensorInfo>>,
    loads: Vec<Got<Load>>,
    infos: Vec<Got<Option<TensorInfo>>>,
    regions: Vec<Got<Load>>,
    /// Where each tensor stored in slices keeps them: region, data file's name, offset,
    /// length, CRC32C (`ls --long`'s slice rows).
    slices: Vec<Got<Vec<SliceAt>>>,
    absent: Got<Load>,
    verify: Got<(u64, u64, u64)>,
}

/// A slice's region and where it is (the data file by name: a place gives a path or a URL).
type SliceAt = (Vec<u64>, Vec<u64>, String, u64, u64, Option<u32>);

/// Reads everything of `s`, for the names `names` (from the mapped file's listing, so that
/// every place is asked the same).
fn read_all(s: &dyn TensorStore, names: &[(Vec<u8>, Vec<u64>)]) -> Reading {
    let listing = got(s
        .scan(b"")
        .and_then(|it| it.collect::<paramdex::Result<Vec<_>>>()));
    let mut loads = Vec::new();
    let mut infos = Vec::new();
    let mut regions = Vec::new();
    let mut slices = Vec::new();
    for (n, shape) in names {
        slices.push(got(s.slice_locations(n).map(|v| {
            v.into_iter()
                .map(|l| {
                    let file = l.location.path.file_name().unwrap().to_string_lossy();
                    (
                        l.region.start,
                        l.region.len,
                        file.into_owned(),
                        l.location.offset,
                        l.location.len,
                        l.location.crc32c,
                    )
                })
                .collect()
        })));
        loads.push(got(s.load(n).map(loaded)));
        infos.push(got(s.info(n)));
        // The first half (rounded up) of the first dimension, all of the others.
        if let Some(&d0) = shape.first() {
            let mut len = shape.clone();
            len[0] = d0.div_ceil(2);
            let start = vec![0; shape.len()];
            let r = Region::new(start, len).unwrap();
            regions.push(got(s.load_slice(n, &r).map(loaded)));
        } else {
            regions.push(Got::Failed("a scalar".into()));
        }
    }
    let absent = got(s.load(b"no.such.tensor").map(loaded));
    let verify = got(s.verify(1).map(|v| (v.tensors, v.data_bytes, v.checksums)));
    Reading {
        listing,
        loads,
        infos,
        regions,
        slices,
        absent,
        verify,
    }
}

/// The names and shapes a mapped file lists (none if it cannot be listed).
fn names_of(s: &dyn TensorStore) -> Vec<(Vec<u8>, Vec<u64>)> {
    s.scan(b"")
        .map(|it| {
            it.map_while(|t| t.ok())
                .map(|t| (t.name, t.shape))
                .collect()
        })
        .unwrap_or_default()
}

fn url_of(p: &Path) -> String {
    format!("file://{}", std::fs::canonicalize(p).unwrap().display())
}

/// Opens the single native file at `path` in the three places (an error is a reading too).
fn places_of_file(path: &Path) -> Vec<(&'static str, paramdex::Result<Box<dyn TensorStore>>)> {
    let ranged = FileRange::open(path).and_then(|f| {
        Reader::from_range_read(Arc::new(f), RemoteOptions::default())
            .map(|r| Box::new(r) as Box<dyn TensorStore>)
    });
    // The readers themselves: which format a damaged file is detected as is the registry's
    // business (`open_any`, for paths and URLs alike), not the engine's. The object: object_store's local
    // file system behind `ObjectRange`, as a bucket's object is read.
    let mapped = Reader::open(path).map(|r| Box::new(r) as Box<dyn TensorStore>);
    let object = paramdex::remote::resolve(&url_of(path)).and_then(|loc| {
        let opts = RemoteOptions::default();
        let obj = ObjectRange::open(loc.store, loc.path, loc.url, loc.runtime, opts.tail_bytes)?;
        Reader::from_range_read(Arc::new(obj), opts).map(|r| Box::new(r) as Box<dyn TensorStore>)
    });
    vec![("mapped", mapped), ("pread", ranged), ("object", object)]
}

/// Opens the sharded checkpoint at `prefix` in the three places.
fn places_of_prefix(prefix: &Path) -> Vec<(&'static str, paramdex::Result<Box<dyn TensorStore>>)> {
    let url =
        url_of(prefix.parent().unwrap()) + "/" + prefix.file_name().unwrap().to_str().unwrap();
    let ranged =
        open_sharded(&url, RemoteOptions::default()).map(|r| Box::new(r) as Box<dyn TensorStore>);
    vec![
        ("mapped", open_any(prefix)),
        ("pread", ranged),
        ("object", open_any(&url)),
    ]
}

/// Asserts that every place reads the same as the mapped file.
fn assert_same(what: &str, places: Vec<(&'static str, paramdex::Result<Box<dyn TensorStore>>)>) {
    assert_same_but(what, places, None)
}

/// The loads of an undamaged file, by name.
type Originals = BTreeMap<Vec<u8>, (TensorInfo, Vec<u8>)>;

/// [`assert_same`], where a remote place may load a tensor whose load fails in the mapped file
/// with a checksum error if what it loads is exactly the tensor of the undamaged file
/// (`originals`): a remote reader's read-ahead (`get_ahead`, what its `load` is) finds
/// tensors through the sorted index blocks, never through the hash index block, so a damaged
/// hash block that fails the mapped file's lookups leaves its loads whole. Never wrong data.
fn assert_same_but(
    what: &str,
    places: Vec<(&'static str, paramdex::Result<Box<dyn TensorStore>>)>,
    originals: Option<&Originals>,
) {
    let names = match &places[0].1 {
        Ok(s) => names_of(s.as_ref()),
        Err(_) => Vec::new(),
    };
    let mut readings: Vec<(&str, Got<Reading>)> = places
        .into_iter()
        .map(|(place, s)| (place, got(s.map(|s| read_all(s.as_ref(), &names)))))
        .collect();
    // A region of a damaged tensor: a mapped file reads regions without checking data
    // checksums (they cover whole stored tensors, SPEC.md 13), a remote reader fetches the
    // stored tensors whole and checks them (bytes from a network are never returned
    // unchecked). Both fail its load alike: its regions are not compared.
    let damaged: Vec<usize> = (0..names.len())
        .filter(|&i| {
            readings.iter().any(|(_, r)| {
                matches!(r, Got::Value(r) if r.loads[i] == Got::Failed("ChecksumMismatch".into()))
            })
        })
        .collect();
    for (_, r) in readings.iter_mut() {
        if let Got::Value(r) = r {
            for &i in &damaged {
                r.regions[i] = Got::Failed("a damaged tensor's region".into());
            }
        }
    }
    let (first, rest) = readings.split_at_mut(1);
    let first = &first[0].1;
    if let (Some(originals), Got::Value(f)) = (originals, first) {
        for (_, r) in rest.iter_mut() {
            let Got::Value(r) = r else { continue };
            for (i, (n, _)) in names.iter().enumerate() {
                let whole = matches!(
                    (&f.loads[i], &r.loads[i]),
                    (Got::Failed(v), Got::Value(Some(t)))
                        if v == "ChecksumMismatch" && originals.get(n) == Some(t)
                );
                if whole {
                    r.loads[i] = f.loads[i].clone_failed();
                }
            }
        }
    }
    for (place, r) in rest.iter() {
        if r == first {
            continue;
        }
        // Name the first reading that differs, shortly.
        let detail = match (first, r) {
            (Got::Value(a), Got::Value(b)) => {
                let fields = [
                    (
                        "listing",
                        format!("{:?}", a.listing),
                        format!("{:?}", b.listing),
                    ),
                    ("loads", format!("{:?}", a.loads), format!("{:?}", b.loads)),
                    ("infos", format!("{:?}", a.infos), format!("{:?}", b.infos)),
                    (
                        "regions",
                        format!("{:?}", a.regions),
                        format!("{:?}", b.regions),
                    ),
                    (
                        "absent",
                        format!("{:?}", a.absent),
                        format!("{:?}", b.absent),
                    ),
                    (
                        "verify",
                        format!("{:?}", a.verify),
                        format!("{:?}", b.verify),
                    ),
                ];
                let (f, x, y) = fields.into_iter().find(|(_, x, y)| x != y).unwrap();
                let at = x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count();
                let from = at.saturating_sub(150);
                format!(
                    "{f}: mapped …{}… {place} …{}…",
                    &x[from..(at + 250).min(x.len())],
                    &y[from..(at + 250).min(y.len())]
                )
            }
            (a, b) => format!("mapped {a:?}, {place} {b:?}"),
        };
        panic!("{what}: {place} reads otherwise than the mapped file: {detail}");
    }
}

fn native_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/native")
}

/// Every single-file compatibility file (v1, v2, LoD, slices, metadata, dtypes, snappy, hash).
#[test]
fn every_compat_file_reads_the_same_from_every_place() {
    let mut files = Vec::new();
    for dir in ["v1", "v2", "hash"] {
        for e in std::fs::read_dir(native_data().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "pdx") {
                files.push(p);
            }
        }
    }
    files.sort();
    assert!(files.len() >= 15, "{files:?}");
    for f in &files {
        assert_same(&f.display().to_string(), places_of_file(f));
    }
}

/// The sharded checkpoints (one of them incremental: data files of an earlier save reused).
#[test]
fn sharded_compat_checkpoints_read_the_same_from_every_place() {
    for prefix in ["v2/sharded/ckpt", "v2/incremental/base"] {
        let p = native_data().join(prefix);
        assert_same(prefix, places_of_prefix(&p));
    }
}

/// `slice_locations` (what `ls --long` lists under a tensor stored in slices) points at each
/// slice's bytes: the stored CRC32C is that of the bytes at that offset of that file, the
/// regions tile the tensor, and a tensor stored whole has none (its `data_location` says).
#[test]
fn slice_locations_point_at_each_slice_s_bytes() {
    let tf = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tf/partitioned/v1/model.ckpt");
    let cases = [
        (native_data().join("v2/sharded/ckpt"), 2),
        (native_data().join("v2/slices.pdx"), 2),
        (tf, 5),
    ];
    for (input, sliced_tensors) in cases {
        let s = open_any(&input).unwrap();
        let mut sliced = 0;
        for t in s.scan(b"").unwrap() {
            let t = t.unwrap();
            let slices = s.slice_locations(&t.name).unwrap();
            let whole = s.data_location(&t.name).unwrap();
            assert!(slices.is_empty() || whole.is_none(), "{input:?} {t:?}");
            if slices.is_empty() {
                continue;
            }
            sliced += 1;
            let mut elements = 0u64;
            for l in &slices {
                let file = std::fs::read(&l.location.path).unwrap();
                let at = usize::try_from(l.location.offset).unwrap();
                let len = usize::try_from(l.location.len).unwrap();
                let bytes = &file[at..at + len];
                assert_eq!(
                    Some(crc32c::crc32c(bytes)),
                    l.location.crc32c,
                    "{input:?} {t:?}"
                );
                let n: u64 = l.region.len.iter().product();
                assert_eq!(
                    n * (t.nbytes / t.shape.iter().product::<u64>()),
                    l.location.len
                );
                elements += n;
            }
            // (slices.pdx holds a partial tensor: some of it in no slice.)
            assert!(
                elements <= t.shape.iter().product::<u64>(),
                "{input:?} {t:?}"
            );
        }
        assert!(
            sliced >= sliced_tensors,
            "{input:?}: {sliced} tensors in slices"
        );
        assert!(s.slice_locations(b"no.such.tensor").unwrap().is_empty());
    }
}

/// The drift bugs of issue 26, each named: LoD from a bucket, sliced tensors from a bucket,
/// `verify`'s counts.
#[test]
fn lod_slices_and_verify_counts_are_those_of_the_mapped_file() {
    let lod = native_data().join("v1/lod.pdx");
    for (place, s) in places_of_file(&lod) {
        let s = s.unwrap();
        let listed: Vec<TensorInfo> = s.scan(b"").unwrap().map(|t| t.unwrap()).collect();
        assert!(
            listed.iter().any(|t| !t.lod.is_empty()),
            "{place}: the listing lost the LoD"
        );
        for t in &listed {
            let l = s.load(&t.name).unwrap().unwrap();
            assert_eq!(l.info.lod, t.lod, "{place}: {:?}", t.name);
        }
    }
    // Tensors stored in slices (one of them partial: some of it in no slice) load whole,
    // by region, and verify as from the mapped file.
    let slices = native_data().join("v2/slices.pdx");
    let readings: Vec<_> = places_of_file(&slices)
        .into_iter()
        .map(|(place, s)| {
            let s = s.unwrap();
            let mut loads = Vec::new();
            for t in s.scan(b"").unwrap() {
                let t = t.unwrap();
                let whole = got(s.load(&t.name).map(loaded));
                let region = got(s.load_slice(&t.name, &Region::full(&t.shape)).map(loaded));
                assert_eq!(whole, region, "{place}: {:?}", t.name);
                loads.push(whole);
            }
            let v = s.verify(1).unwrap();
            (place, loads, (v.tensors, v.data_bytes, v.checksums))
        })
        .collect();
    assert!(
        readings[0]
            .1
            .iter()
            .filter(|l| matches!(l, Got::Value(_)))
            .count()
            >= 3,
        "{:?}",
        readings[0].1
    );
    for (place, loads, counts) in &readings[1..] {
        assert_eq!(loads, &readings[0].1, "{place}");
        assert_eq!(counts, &readings[0].2, "{place}: verify's counts");
    }
}

/// A sharded checkpoint whose tensors have LoD lists, describes and loads them alike in every
/// place (the ranged sharded reader reads each LoD from its record's header in its data
/// file), and its `info` of one tensor reads that tensor's index block, not the index from
/// that name on.
#[test]
fn a_sharded_checkpoint_s_lod_and_info_are_those_of_the_mapped_one() {
    use paramdex::{merge_shards, MergeShardsOptions, SaveId, ShardWriter};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let id = SaveId::random();
    let opts = WriterOptions {
        sync: false,
        block_size: 256,
        ..Default::default()
    };
    let names: Vec<String> = (0..4000).map(|i| format!("layer.{i:04}")).collect();
    for k in 0..2u32 {
        let mut w = ShardWriter::create(&prefix, k, 2, id, opts.clone()).unwrap();
        for (i, name) in names.iter().enumerate().filter(|(i, _)| *i as u32 % 2 == k) {
            let data: Vec<u8> = (0..48u8).map(|b| b.wrapping_add(i as u8)).collect();
            let lod = [vec![0, 2, 6]];
            let t = Tensor::new(DType::Int64, &[6, 1], &data);
            let t = if i % 3 == 0 { t.with_lod(&lod) } else { t };
            w.add(name, t).unwrap();
        }
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
    // Per place: the listing, every 7th tensor's info, and its load.
    type Seen<'p> = (&'p str, Vec<TensorInfo>, Vec<TensorInfo>, Vec<Load>);
    let readings: Vec<Seen<'_>> = places_of_prefix(&prefix)
        .into_iter()
        .map(|(place, s)| {
            let s = s.unwrap();
            let listed: Vec<TensorInfo> = s.scan(b"").unwrap().map(|t| t.unwrap()).collect();
            // Every 7th tensor described and loaded (with and without LoD).
            let described = names
                .iter()
                .step_by(7)
                .map(|n| s.info(n.as_bytes()).unwrap().unwrap())
                .collect();
            let loads = names
                .iter()
                .step_by(7)
                .map(|n| loaded(s.load(n.as_bytes()).unwrap()))
                .collect();
            (place, listed, described, loads)
        })
        .collect();
    let (_, listed, described, loads) = &readings[0];
    assert_eq!(listed.iter().filter(|t| !t.lod.is_empty()).count(), 1334);
    let every_7th: Vec<TensorInfo> = listed.iter().step_by(7).cloned().collect();
    assert_eq!(
        &every_7th, described,
        "mapped: info is what the listing says"
    );
    for (place, l, d, ld) in &readings[1..] {
        assert_eq!(l, listed, "{place}: listing");
        assert_eq!(d, described, "{place}: info");
        assert_eq!(ld, loads, "{place}: loads");
    }
    // `info` of the first tensor reads its index block (at most one block of 64 KiB), not the
    // index's data blocks from that name on (all of them).
    let url = format!("{}/ckpt", url_of(dir.path()));
    let r = open_sharded(
        &url,
        RemoteOptions {
            tail_bytes: 4096,
            ..RemoteOptions::default()
        },
    )
    .unwrap();
    let index_len = std::fs::metadata(dir.path().join("ckpt.index"))
        .unwrap()
        .len();
    assert!(
        index_len > 2 * paramdex::DEFAULT_BLOCK_SIZE as u64,
        "{index_len}"
    );
    let before = r.stats();
    let e = r.entry_of(names[0].as_bytes()).unwrap().unwrap();
    assert_eq!(e.lod_levels, 1);
    let after = r.stats();
    assert!(after.requests - before.requests <= 1);
    assert!(
        after.bytes - before.bytes <= paramdex::DEFAULT_BLOCK_SIZE as u64 + 4096,
        "{after:?} after {before:?}"
    );
}

/// A version 1 file may hold a name that starts with a NUL byte (only version 2 reserves
/// them for slice keys): every place lists it and reads it.
#[test]
fn a_v1_name_starting_with_nul_is_read_in_every_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nul.pdx");
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            sync: false,
            ..Default::default()
        },
    )
    .unwrap();
    w.add(&b"\x00hidden"[..], Tensor::new(DType::UInt8, &[2], &[1, 2]))
        .unwrap();
    w.add("plain", Tensor::new(DType::UInt8, &[1], &[3]))
        .unwrap();
    w.finish().unwrap();
    for (place, s) in places_of_file(&path) {
        let s = s.unwrap();
        let names: Vec<Vec<u8>> = s.scan(b"").unwrap().map(|t| t.unwrap().name).collect();
        assert_eq!(
            names,
            [b"\x00hidden".to_vec(), b"plain".to_vec()],
            "{place}"
        );
        let t = s.load(b"\x00hidden").unwrap().unwrap();
        assert_eq!(&t.data.raw_bytes()[..], &[1, 2], "{place}");
    }
    assert_same("v1 NUL name", places_of_file(&path));
}

/// A reference file with LoD tensors, several index blocks and a hash index.
fn reference(dir: &Path) -> PathBuf {
    let path = dir.join("ref.pdx");
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            sync: false,
            block_size: 160,
            restart_interval: 3,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..12u8 {
        let data: Vec<u8> = (0..24u8).map(|k| k.wrapping_mul(i + 1)).collect();
        w.add(
            format!("layer.{i:02}.weight"),
            Tensor::new(DType::Float32, &[2, 3], &data),
        )
        .unwrap();
    }
    let ids: Vec<u8> = (0..48).collect();
    let lod = [vec![0, 2, 6]];
    w.add(
        "seq.ids",
        Tensor::new(DType::Int64, &[6, 1], &ids).with_lod(&lod),
    )
    .unwrap();
    w.finish().unwrap();
    path
}

/// Damaged copies of a reference file (every byte flipped in turn at a stride, and every
/// truncation at a stride): every place fails with the same variant or reads the same.
#[test]
fn damaged_files_fail_alike_in_every_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = reference(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let original = open_any(&path).unwrap();
    let originals: Originals = names_of(original.as_ref())
        .into_iter()
        .map(|(n, _)| {
            let t = loaded(original.load(&n).unwrap()).unwrap();
            (n, t)
        })
        .collect();
    assert_eq!(originals.len(), 13);
    let damaged = dir.path().join("damaged.pdx");
    let stride = 7;
    for at in (0..bytes.len()).step_by(stride) {
        let mut b = bytes.clone();
        b[at] ^= 0x5a;
        std::fs::write(&damaged, &b).unwrap();
        assert_same_but(
            &format!("byte {at} flipped"),
            places_of_file(&damaged),
            Some(&originals),
        );
    }
    for len in (0..bytes.len()).step_by(stride * 3) {
        std::fs::write(&damaged, &bytes[..len]).unwrap();
        assert_same_but(
            &format!("cut to {len} bytes"),
            places_of_file(&damaged),
            Some(&originals),
        );
    }
}

mod props {
    use super::*;
    use paramdex::Compression;
    use proptest::prelude::*;

    /// A tensor the writer can write: name, dtype, shape, LoD.
    fn tensor() -> impl Strategy<Value = (Vec<u8>, DType, Vec<u64>, bool)> {
        (
            prop::collection::vec(prop::sample::select(b"ab.\x00\xff7".to_vec()), 1..6),
            prop::sample::select(vec![
                DType::Float32,
                DType::Int64,
                DType::UInt8,
                DType::Float16,
            ]),
            prop::collection::vec(0u64..4, 0..3),
            any::<bool>(),
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        /// Any file the writer produces (version 1, any block size, restart interval,
        /// compression, with or without a hash index; names starting with a NUL byte, LoD)
        /// reads the same from every place, whole and with one byte flipped.
        #[test]
        fn writer_files_read_the_same_from_every_place(
            tensors in prop::collection::vec(tensor(), 0..12),
            block_size in 64usize..600,
            restart_interval in 1usize..5,
            snappy in any::<bool>(),
            hash_index in any::<bool>(),
            flip in any::<prop::sample::Index>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("p.pdx");
            let mut w = Writer::create_with(
                &path,
                WriterOptions {
                    sync: false,
                    block_size,
                    restart_interval,
                    compression: if snappy { Compression::Snappy } else { Compression::None },
                    hash_index,
                    ..Default::default()
                },
            )
            .unwrap();
            let mut seen = std::collections::BTreeSet::new();
            for (i, (name, dtype, shape, lod)) in tensors.iter().enumerate() {
                if !seen.insert(name.clone()) {
                    continue;
                }
                let n: u64 = shape.iter().product();
                let data: Vec<u8> = (0..n as usize * dtype.size()).map(|k| (k * 7 + i) as u8).collect();
                // One LoD level over the first dimension, when there is one.
                let levels = match shape.first() {
                    Some(&d0) if *lod => vec![vec![0, d0 / 2, d0]],
                    _ => Vec::new(),
                };
                w.add(&name[..], Tensor::new(*dtype, shape, &data).with_lod(&levels))
                    .unwrap();
            }
            w.finish().unwrap();
            assert_same("a writer's file", places_of_file(&path));
            let mut bytes = std::fs::read(&path).unwrap();
            let originals: Originals = {
                let r = Reader::open(&path).unwrap();
                names_of(&r)
                    .into_iter()
                    .map(|(n, _)| {
                        let t = loaded(r.load(&n).unwrap()).unwrap();
                        (n, t)
                    })
                    .collect()
            };
            let at = flip.index(bytes.len());
            bytes[at] ^= 0x21;
            std::fs::write(&path, &bytes).unwrap();
            assert_same_but(&format!("byte {at} flipped"), places_of_file(&path), Some(&originals));
        }
    }
}
