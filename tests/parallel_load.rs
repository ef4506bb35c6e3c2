//! Parallel whole-checkpoint loads (issue 17): `Reader::load_all`, `load_many`, `load_into`
//! copy every tensor (or a chosen set) on several threads, checking each CRC32C as they copy.

use std::collections::BTreeMap;

use paramdex::{
    DType, Error, LoadAdvice, LoadOptions, MergeShardsOptions, Reader, Region, SaveId, ShardedSave,
    Tensor, Writer, WriterOptions,
};

/// Tensors of many sizes: empty, tiny, unaligned, and larger than a copy piece (2 MiB), so a
/// tensor spans pieces, batches and threads.
fn model() -> BTreeMap<String, Vec<u8>> {
    let mut m = BTreeMap::new();
    for (i, len) in [
        0usize,
        1,
        3,
        4096,
        5 << 20,
        17,
        (2 << 20) + 1,
        100_000,
        0,
        7 << 20,
    ]
    .into_iter()
    .enumerate()
    {
        let data: Vec<u8> = (0..len).map(|b| (b * 31 + i * 7) as u8).collect();
        m.insert(format!("t{i:02}"), data);
    }
    for i in 0..3000 {
        m.insert(format!("small.{i}"), vec![i as u8; i % 9]);
    }
    m
}

fn write(path: &std::path::Path, m: &BTreeMap<String, Vec<u8>>) {
    let mut w = Writer::create_with(
        path,
        WriterOptions {
            sync: false,
            ..WriterOptions::default()
        },
    )
    .unwrap();
    // Out of name order, so file order and name order differ.
    for (name, data) in m.iter().rev() {
        w.add(name, Tensor::new(DType::UInt8, &[data.len() as u64], data))
            .unwrap();
    }
    w.finish().unwrap();
}

fn all_options() -> Vec<LoadOptions> {
    let mut v = Vec::new();
    for threads in [1, 2, 3, 0] {
        for advice in [
            LoadAdvice::None,
            LoadAdvice::Sequential,
            LoadAdvice::WillNeed,
            LoadAdvice::PopulateRead,
        ] {
            v.push(LoadOptions {
                threads,
                advice,
                ..LoadOptions::default()
            });
        }
    }
    v
}

#[test]
fn load_all_returns_every_tensor_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    let m = model();
    write(&path, &m);
    let r = Reader::open(&path).unwrap();
    // File order: by data offset.
    let mut by_offset: Vec<(u64, String)> = m
        .keys()
        .map(|n| (r.tensor(n).unwrap().data_offset(), n.clone()))
        .collect();
    by_offset.sort();
    let file_order: Vec<&str> = by_offset.iter().map(|(_, n)| n.as_str()).collect();
    for opts in all_options() {
        let all = r.load_all(&opts).unwrap();
        let names: Vec<&str> = all
            .iter()
            .map(|(n, _)| std::str::from_utf8(n).unwrap())
            .collect();
        assert_eq!(names, file_order, "{opts:?}");
        for (n, t) in &all {
            let n = std::str::from_utf8(n).unwrap();
            assert_eq!(t.data, m[n], "{n} {opts:?}");
            assert_eq!(t.dtype, DType::UInt8);
            assert_eq!(t.shape, [m[n].len() as u64]);
        }
    }
    // From bytes in memory too (no mapping, no advice).
    let mem = Reader::from_bytes(std::fs::read(&path).unwrap()).unwrap();
    let all = mem.load_all(&LoadOptions::default()).unwrap();
    assert_eq!(all.len(), m.len());
}

#[test]
fn load_many_and_load_into_take_a_chosen_set() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    let m = model();
    write(&path, &m);
    let r = Reader::open(&path).unwrap();
    let want = ["t04", "small.5", "t09", "t04", "t00"];
    for opts in all_options() {
        let got = r.load_many(&want, &opts).unwrap();
        let names: BTreeMap<Vec<u8>, Vec<u8>> = got.into_iter().map(|(n, t)| (n, t.data)).collect();
        assert_eq!(names.len(), 4, "each name once");
        for n in want {
            assert_eq!(names[n.as_bytes()], m[n]);
        }
        let mut bufs: Vec<Vec<u8>> = want.iter().map(|n| vec![0xEE; m[*n].len()]).collect();
        let mut dst: Vec<&mut [u8]> = bufs.iter_mut().map(|b| b.as_mut_slice()).collect();
        r.load_into(&want, &mut dst, &opts).unwrap();
        for (n, b) in want.iter().zip(&bufs) {
            assert_eq!(b, &m[*n], "{n} {opts:?}");
        }
    }
    let e = r
        .load_many(&["t01", "missing"], &LoadOptions::default())
        .unwrap_err();
    assert!(matches!(e, Error::NotFound { .. }), "{e}");
    let mut short = vec![0u8; 2];
    let e = r
        .load_into(
            &["t02"],
            &mut [short.as_mut_slice()],
            &LoadOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = r
        .load_into(
            &["t02", "t01"],
            &mut [short.as_mut_slice()],
            &LoadOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
}

#[test]
fn a_corrupted_tensor_is_named_whatever_the_threads() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    let m = model();
    write(&path, &m);
    let bytes = std::fs::read(&path).unwrap();
    let r = Reader::open(&path).unwrap();
    // A byte inside the large tensor t09 (in its third piece), and one in a small tensor.
    for (victim, at) in [("t09", 5usize << 20), ("small.77", 2)] {
        let off = r.tensor(victim).unwrap().data_offset() as usize + at;
        let mut bad = bytes.clone();
        bad[off] ^= 0x40;
        let br = Reader::from_bytes(bad).unwrap();
        for threads in [1, 2] {
            let opts = LoadOptions {
                threads,
                ..LoadOptions::default()
            };
            for e in [
                br.load_all(&opts).unwrap_err(),
                br.load_many(&[victim, "t04"], &opts).unwrap_err(),
            ] {
                match e {
                    Error::ChecksumMismatch { name, .. } => {
                        assert_eq!(name.as_deref(), Some(victim))
                    }
                    e => panic!("{e}"),
                }
            }
        }
    }
}

#[test]
fn sharded_checkpoints_load_and_sliced_tensors_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ckpt");
    let opts = WriterOptions {
        sync: false,
        ..WriterOptions::default()
    };
    let s = ShardedSave::with_options(&prefix, 2, SaveId::random(), opts).unwrap();
    let m = model();
    let names: Vec<&String> = m.keys().collect();
    for k in 0..2u32 {
        let mut w = s.shard(k).unwrap();
        for n in names.iter().skip(k as usize).step_by(2) {
            let d = &m[*n];
            w.add(n.as_str(), Tensor::new(DType::UInt8, &[d.len() as u64], d))
                .unwrap();
        }
        w.finish().unwrap();
    }
    let no_sync = MergeShardsOptions {
        no_sync: true,
        ..MergeShardsOptions::default()
    };
    s.merge(&no_sync).unwrap();
    let r = Reader::open(&prefix).unwrap();
    assert!(r.is_sharded());
    let all = r
        .load_all(&LoadOptions {
            threads: 2,
            ..LoadOptions::default()
        })
        .unwrap();
    let got: BTreeMap<String, Vec<u8>> = all
        .into_iter()
        .map(|(n, t)| (String::from_utf8(n).unwrap(), t.data))
        .collect();
    assert_eq!(got, m);

    // A tensor stored in slices: load_all and load_many refuse it, before copying anything.
    let path = dir.path().join("sliced.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add("plain", Tensor::new(DType::UInt8, &[1], &[1]))
        .unwrap();
    let half = Region::new(vec![0], vec![2]).unwrap();
    w.add_slice("emb", DType::UInt8, &[4], &half, &[1, 2])
        .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    for e in [
        r.load_all(&LoadOptions::default()).unwrap_err(),
        r.load_many(&["emb"], &LoadOptions::default()).unwrap_err(),
    ] {
        assert!(matches!(e, Error::Sliced { .. }), "{e}");
    }
    assert_eq!(
        r.load_many(&["plain"], &LoadOptions::default()).unwrap()[0]
            .1
            .data,
        [1]
    );
}

/// A whole-file load keeps each tensor's LoD, as `get` and the ranged reader's loads do.
#[test]
fn load_all_and_load_many_keep_lod() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lod.pdx");
    let mut w = paramdex::Writer::create(&path).unwrap();
    let lod = [vec![0u64, 2, 3], vec![0u64, 1, 2, 3]];
    w.add(
        b"seq",
        paramdex::Tensor::new(paramdex::DType::UInt8, &[3], &[4, 5, 6]).with_lod(&lod),
    )
    .unwrap();
    w.add(
        b"w",
        paramdex::Tensor::new(paramdex::DType::UInt8, &[2], &[1, 2]),
    )
    .unwrap();
    w.finish().unwrap();
    let r = paramdex::Reader::open(&path).unwrap();
    let all = r.load_all(&Default::default()).unwrap();
    let by_name: std::collections::HashMap<_, _> = all.into_iter().collect();
    assert_eq!(by_name[&b"seq".to_vec()].lod, lod.to_vec());
    assert!(by_name[&b"w".to_vec()].lod.is_empty());
    let many = r.load_many(&["seq"], &Default::default()).unwrap();
    assert_eq!(many[0].1.lod, lod.to_vec());
    assert_eq!(many[0].1.data, vec![4, 5, 6]);
}
