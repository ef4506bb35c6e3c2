//! One `Reader`, every way of reading (issue 38): the same native file or sharded checkpoint,
//! mapped and by ranges (`Reader::from_range_read` over `FileRange`, `Reader::from_place` over a
//! `DirPlace`), answers every method of the public reader alike: the walk (`iter`, `prefix`),
//! the listing (`list_from`, `entry_of`), lookups (`get`, `get_bytes`, `lod`, `get_slice`), the
//! loads (`load_all`, `load_many`, `load_into`, `for_each`, `get_ahead`) and verify. Built with
//! or without object storage.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paramdex::place::DirPlace;
use paramdex::remote::{FileRange, RemoteOptions};
use paramdex::{DType, Error, LoadOptions, Reader, Region};

fn native_data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/native")
}

/// A result compared across readers: the value, or the error's variant (messages name the
/// place, which differs).
fn same<T: PartialEq + std::fmt::Debug>(
    what: &str,
    a: paramdex::Result<T>,
    b: paramdex::Result<T>,
) {
    match (a, b) {
        (Ok(x), Ok(y)) => assert_eq!(x, y, "{what}"),
        (Err(x), Err(y)) => assert_eq!(
            std::mem::discriminant(&x),
            std::mem::discriminant(&y),
            "{what}: {x} / {y}"
        ),
        (x, y) => panic!("{what}: mapped {x:?}, by ranges {y:?}"),
    }
}

/// (name, where a slice sits, dtype, shape, data, LoD) of every stored tensor or slice.
type Walked = Vec<(
    Vec<u8>,
    Option<Vec<u64>>,
    DType,
    Vec<u64>,
    Vec<u8>,
    Vec<Vec<u64>>,
)>;

fn walk(it: paramdex::Iter<'_>) -> paramdex::Result<Walked> {
    it.map(|v| {
        let v = v?;
        let lod = v.lod()?.to_vec();
        Ok((
            v.name().to_vec(),
            v.slice_start().map(<[u64]>::to_vec),
            v.dtype(),
            v.shape().to_vec(),
            v.data().to_vec(),
            lod,
        ))
    })
    .collect()
}

/// Holds reader `r` (by ranges) to reader `m` (mapped) over the same bytes.
fn assert_alike(what: &str, m: &Reader, r: &Reader) {
    assert_eq!(m.header(), r.header(), "{what}: header");
    assert_eq!(
        (m.len(), m.is_sharded()),
        (r.len(), r.is_sharded()),
        "{what}"
    );
    assert_eq!(m.data_blocks(), r.data_blocks(), "{what}: data blocks");
    assert!(m.as_bytes().is_some() && r.as_bytes().is_none(), "{what}");
    assert_eq!(
        m.stats().requests,
        0,
        "{what}: a mapped file makes no request"
    );

    let walked = walk(m.iter());
    same(&format!("{what}: iter"), walk(m.iter()), walk(r.iter()));
    let listed = m.list_from(b"").unwrap();
    assert_eq!(listed, r.list_from(b"").unwrap(), "{what}: list_from");
    if let Some(first) = listed.first() {
        let p = &first.name[..first.name.len().min(3)];
        same(
            &format!("{what}: prefix"),
            walk(m.prefix(p)),
            walk(r.prefix(p)),
        );
    }
    let opts = LoadOptions::with_parts(3, 4096);
    let mut whole = Vec::new();
    for e in &listed {
        let n = e.name.as_slice();
        let shown = format!("{what}: {}", String::from_utf8_lossy(n));
        assert_eq!(m.entry_of(n).unwrap().as_ref(), Some(e), "{shown}");
        assert_eq!(r.entry_of(n).unwrap().as_ref(), Some(e), "{shown}");
        let get = |x: &Reader| {
            x.get(n).and_then(|v| match v {
                None => Ok(None),
                Some(v) => {
                    let lod = v.lod()?.to_vec();
                    Ok(Some((v.data().to_vec(), lod)))
                }
            })
        };
        same(&format!("{shown}: get"), get(m), get(r));
        same(&format!("{shown}: lod"), m.lod(n), r.lod(n));
        let bytes = |x: &Reader| x.get_bytes(n).map(|b| b.map(|b| b.into_owned()));
        same(&format!("{shown}: get_bytes"), bytes(m), bytes(r));
        if e.dtype != DType::Bytes {
            let region = Region::full(&e.shape);
            let slice = |x: &Reader| x.get_slice(n, &region).map(|s| s.map(|s| s.into_vec()));
            same(&format!("{shown}: get_slice"), slice(m), slice(r));
        }
        same(
            &format!("{shown}: get_ahead"),
            m.get_ahead(n),
            r.get_ahead(n),
        );
        if e.slices == 0 && m.get(n).is_ok() {
            whole.push(e.name.clone());
        }
    }
    assert!(m.entry_of(b"\xffabsent").unwrap().is_none());
    assert!(r.entry_of(b"\xffabsent").unwrap().is_none());

    // In file order; across the data files of a sharded checkpoint, grouped by file in an
    // order of the engine's own (a map's by address), so compared by name there.
    let by_name = |l: paramdex::Result<Vec<(Vec<u8>, paramdex::OwnedTensor)>>| {
        l.map(|mut l| {
            if m.is_sharded() {
                l.sort_by(|a, b| a.0.cmp(&b.0));
            }
            l
        })
    };
    same(
        &format!("{what}: load_all"),
        by_name(m.load_all(&opts)),
        by_name(r.load_all(&opts)),
    );
    same(
        &format!("{what}: load_many"),
        by_name(m.load_many(&whole, &opts)),
        by_name(r.load_many(&whole, &opts)),
    );
    let into = |x: &Reader| -> paramdex::Result<Vec<Vec<u8>>> {
        let mut bufs: Vec<Vec<u8>> = listed
            .iter()
            .filter(|e| whole.contains(&e.name))
            .map(|e| vec![0u8; e.size as usize])
            .collect();
        let mut dst: Vec<&mut [u8]> = bufs.iter_mut().map(Vec::as_mut_slice).collect();
        x.load_into(&whole, &mut dst, &opts)?;
        Ok(bufs)
    };
    same(&format!("{what}: load_into"), into(m), into(r));
    let each = |x: &Reader| {
        let mut out = Vec::new();
        x.for_each(&opts, |n, t| {
            out.push((n, t));
            Ok(())
        })
        .map(|()| {
            out.sort_by(|a, b| a.0.cmp(&b.0));
            out
        })
    };
    same(&format!("{what}: for_each"), each(m), each(r));
    same(&format!("{what}: verify"), m.verify(), r.verify());
    same(
        &format!("{what}: verify_index"),
        m.verify_index(),
        r.verify_index(),
    );
    // The walk found what the lookups found.
    if let Ok(w) = walked {
        assert!(w.len() >= listed.len(), "{what}");
    }
}

/// Every single-file compatibility file (v1, v2, LoD, slices, bytes values, metadata, dtypes,
/// snappy, hash), mapped and read by ranges through the one `Reader`.
#[test]
fn every_compat_file_reads_alike_mapped_and_by_ranges() {
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
        let m = Reader::open(f).unwrap();
        for tail_bytes in [u64::MAX, 64] {
            let opts = RemoteOptions {
                tail_bytes,
                ..RemoteOptions::default()
            };
            let r = Reader::from_range_read(Arc::new(FileRange::open(f).unwrap()), opts).unwrap();
            assert_alike(&format!("{} (tail {tail_bytes})", f.display()), &m, &r);
        }
    }
}

/// The sharded compatibility checkpoints (one of them incremental), mapped and by ranges with
/// their data files opened through a directory place.
#[test]
fn sharded_checkpoints_read_alike_mapped_and_by_ranges() {
    for prefix in ["v2/sharded/ckpt", "v2/incremental/base"] {
        let p = native_data().join(prefix);
        let m = Reader::open(&p).unwrap();
        let index = Arc::new(FileRange::open(format!("{}.index", p.display())).unwrap());
        let place = Arc::new(DirPlace::new(&p));
        let r = Reader::from_place(
            index,
            p.display().to_string(),
            place,
            RemoteOptions::default(),
        )
        .unwrap();
        assert_alike(prefix, &m, &r);
        assert!(
            r.stats().requests > 0,
            "{prefix}: reads by ranges are counted"
        );
    }
}

/// What only a map gives is `None` by ranges, and a single file by ranges is no base of an
/// incremental save; a sharded index is opened by ranges only with its place.
#[test]
fn by_ranges_a_reader_refuses_what_needs_a_map_or_a_place() {
    let f = native_data().join("v1/golden.pdx");
    let r = Reader::from_range_read(
        Arc::new(FileRange::open(&f).unwrap()),
        RemoteOptions::default(),
    )
    .unwrap();
    assert!(r.as_bytes().is_none() && r.records().is_none());
    assert!(r.checkpoint_prefix().is_none());
    let index = native_data().join("v2/sharded/ckpt.index");
    let e = Reader::from_range_read(
        Arc::new(FileRange::open(&index).unwrap()),
        RemoteOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e:?}");
    let e = Reader::from_place(
        Arc::new(FileRange::open(&f).unwrap()),
        "single",
        Arc::new(DirPlace::new(native_data().join("v1/single"))),
        RemoteOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
}

/// A sharded checkpoint read by ranges loads each data file's tensors in parallel parts, not
/// one request per tensor: 2 data files of 300 tensors each load in a handful of reads.
#[test]
fn a_sharded_load_by_ranges_fetches_parts_not_tensors() {
    use paramdex::{MergeShardsOptions, SaveId, ShardedSave, Tensor, WriterOptions};
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let opts = WriterOptions {
        sync: false,
        ..WriterOptions::default()
    };
    let save = ShardedSave::with_options(&prefix, 2, SaveId::random(), opts).unwrap();
    for k in 0..2u32 {
        let mut w = save.shard(k).unwrap();
        for i in 0..300u32 {
            let v = [(k * 7 + i) as u8; 24];
            w.add(
                format!("r{k}.t{i:04}"),
                Tensor::new(DType::UInt8, &[24], &v),
            )
            .unwrap();
        }
        w.finish().unwrap();
    }
    save.merge(&MergeShardsOptions::default()).unwrap();
    let m = Reader::open(&prefix).unwrap();
    let r = Reader::from_place(
        Arc::new(FileRange::open(format!("{}.index", prefix.display())).unwrap()),
        prefix.display().to_string(),
        Arc::new(DirPlace::new(&prefix)),
        RemoteOptions::default(),
    )
    .unwrap();
    let before = r.stats().requests;
    let all = r.load_all(&LoadOptions::default()).unwrap();
    let used = r.stats().requests - before;
    assert_eq!(all.len(), 600);
    // The index's blocks, each data file's open (tail, header block) and one part each.
    assert!(used <= 12, "{used} requests for 600 tensors");
    let mut mapped = m.load_all(&LoadOptions::default()).unwrap();
    let mut ranged = all;
    mapped.sort_by(|a, b| a.0.cmp(&b.0));
    ranged.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(mapped, ranged);
    // Names are all looked up before any data is read.
    let e = r.load_many(&["r0.t0001", "absent"], &LoadOptions::default());
    assert!(matches!(e, Err(Error::NotFound { .. })), "{e:?}");
}
