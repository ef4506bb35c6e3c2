//! End-to-end tests of the native format: golden bytes, round trips, properties, crash safety.

use std::collections::BTreeMap;

mod support;

use paramdex::raw::format::{crc32c, mask_crc};
use paramdex::{
    Compression, Corruption, DType, Error, ReadOptions, Reader, Recovered, Tensor, Writer,
    WriterOptions,
};
use proptest::prelude::*;
use support::f32_bytes;

/// A tiny file assembled by hand from SPEC.md, byte by byte: one float32 tensor "w" = [1, 2],
/// alignment 64 (`support::golden_file`). Only the block CRCs are computed (by the crc32c crate).
#[test]
fn golden_file_matches_spec() {
    // Index block: the data block is {72, 56}. Footer: metaindex {133, 8}, index {146, 14}.
    let expected = support::golden_file(&[], &[0x48, 0x38], &[0x85, 0x01, 0x08, 0x92, 0x01, 0x0e]);
    assert_eq!(expected.len(), 213);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("golden.pdx");
    // The layout without the optional hash index block and lone header block (SPEC.md 4.2,
    // 4.5; the default layout is pinned by tests/compat_hash.rs and tests/hash_index.rs).
    let mut w = Writer::create_with(&path, legacy_layout()).unwrap();
    w.add(
        "w",
        Tensor::new(DType::Float32, &[2], &f32_bytes(&[1.0, 2.0])),
    )
    .unwrap();
    w.finish().unwrap();
    let got = std::fs::read(&path).unwrap();
    assert_eq!(got, expected, "file bytes differ from SPEC.md's layout");

    let r = Reader::from_bytes(expected).unwrap();
    assert_eq!(
        r.tensor("w").unwrap().as_slice::<f32>().unwrap(),
        &[1.0, 2.0]
    );
}

/// Writer options without the hash index block and the lone header block: the index is what
/// TensorFlow's table builder writes for the same entries.
fn legacy_layout() -> WriterOptions {
    WriterOptions {
        hash_index: false,
        header_alone: false,
        ..WriterOptions::default()
    }
}

/// Sample bytes for `n` elements of `dtype`.
fn sample(dtype: DType, n: usize, seed: u8) -> Vec<u8> {
    (0..n * dtype.size())
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn every_dtype_scalar_and_empty_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("all.pdx");
    let mut w = Writer::create(&path).unwrap();
    let mut expect = Vec::new();
    for (i, d) in DType::ALL.iter().enumerate() {
        for (suffix, shape) in [
            ("mat", vec![3u64, 5]),
            ("scalar", vec![]),
            ("empty", vec![0, 7]),
            ("cube", vec![2, 3, 4]),
        ] {
            let n: u64 = shape.iter().product();
            let data = sample(*d, n as usize, i as u8);
            let name = format!("{}.{suffix}", d.name());
            w.add(&name, Tensor::new(*d, &shape, &data)).unwrap();
            expect.push((name, *d, shape, data));
        }
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.len() as usize, expect.len());
    for (name, d, shape, data) in &expect {
        let t = r.tensor(name).unwrap();
        assert_eq!(t.dtype(), *d);
        assert_eq!(t.shape(), shape.as_slice());
        assert_eq!(t.data(), data.as_slice());
        assert_eq!(t.data_offset() % 64, 0, "{name} is not aligned");
        t.check_record().unwrap();
    }
    let names: Vec<Vec<u8>> = r.iter().map(|t| t.unwrap().name().to_vec()).collect();
    let mut sorted: Vec<Vec<u8>> = expect.iter().map(|e| e.0.as_bytes().to_vec()).collect();
    sorted.sort();
    assert_eq!(names, sorted);
    r.verify().unwrap();
}

#[test]
fn typed_views() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("typed.pdx");
    let mut w = Writer::create(&path).unwrap();
    let h: Vec<u8> = [half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    w.add("h", Tensor::new(DType::Float16, &[2], &h)).unwrap();
    w.add(
        "i",
        Tensor::new(
            DType::Int64,
            &[2],
            &[7i64, -9]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
    )
    .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(
        r.tensor("h").unwrap().as_slice::<half::f16>().unwrap(),
        &[half::f16::from_f32(1.5), half::f16::from_f32(-2.0)]
    );
    assert_eq!(r.tensor("i").unwrap().as_slice::<i64>().unwrap(), &[7, -9]);
    assert!(
        r.tensor("i").unwrap().as_slice::<f64>().is_err(),
        "dtype mismatch must be refused"
    );
}

#[test]
fn lod_levels_one_to_three() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lod.pdx");
    let mut w = Writer::create(&path).unwrap();
    let cases: Vec<(&str, Vec<Vec<u64>>)> = vec![
        ("l1", vec![vec![0, 2, 5]]),
        ("l2", vec![vec![0, 1, 3], vec![0, 2, 4, 5]]),
        ("l3", vec![vec![0, 2], vec![0, 1, 2], vec![0, 3, 5]]),
    ];
    for (name, lod) in &cases {
        let rows = *lod.last().unwrap().last().unwrap();
        let data = f32_bytes(&(0..rows * 2).map(|x| x as f32).collect::<Vec<_>>());
        w.add(
            name,
            Tensor::new(DType::Float32, &[rows, 2], &data).with_lod(lod),
        )
        .unwrap();
    }
    // Inconsistent LoD: an error, nothing written.
    let bad = vec![vec![0u64, 2, 9]];
    let err = w
        .add(
            "bad",
            Tensor::new(DType::Float32, &[5, 1], &[0; 20]).with_lod(&bad),
        )
        .unwrap_err();
    assert!(matches!(err, Error::InvalidTensor { .. }), "{err}");
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    for (name, lod) in &cases {
        let t = r.tensor(name).unwrap();
        assert_eq!(t.lod_levels() as usize, lod.len());
        assert_eq!(&t.lod().unwrap().to_vec(), lod);
    }
    assert!(r.get("bad").unwrap().is_none());
    r.verify().unwrap();
}

#[test]
fn writer_rejects_bad_input_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.pdx");
    let mut w = Writer::create(&path).unwrap();
    assert!(matches!(
        w.add("", Tensor::new(DType::Int8, &[1], &[0])),
        Err(Error::EmptyName)
    ));
    assert!(matches!(
        w.add("x", Tensor::new(DType::Int32, &[2], &[0; 7])),
        Err(Error::InvalidTensor { .. })
    ));
    assert!(w
        .add("x", Tensor::new(DType::Int8, &[u64::MAX, 2], &[]))
        .is_err());
    w.add("b", Tensor::new(DType::Int8, &[1], &[1])).unwrap();
    w.add("a", Tensor::new(DType::Int8, &[1], &[2])).unwrap();
    assert!(matches!(
        w.add("b", Tensor::new(DType::Int8, &[1], &[3])),
        Err(Error::DuplicateName { .. })
    ));
    assert!(matches!(
        w.add("a", Tensor::new(DType::Int8, &[1], &[3])),
        Err(Error::DuplicateName { .. })
    ));
    let long = vec![b'n'; paramdex::name::MAX_NAME_LEN + 1];
    assert!(matches!(
        w.add(&long, Tensor::new(DType::Int8, &[1], &[3])),
        Err(Error::LimitExceeded { .. })
    ));
    assert!(Writer::create_with(
        dir.path().join("x"),
        WriterOptions {
            alignment: 3,
            ..Default::default()
        }
    )
    .is_err());
    assert!(Writer::create_with(
        dir.path().join("x"),
        WriterOptions {
            alignment: 8192,
            ..Default::default()
        }
    )
    .is_err());
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.len(), 2);
    assert!(!r.header().records_sorted);
    assert_eq!(r.tensor("a").unwrap().data(), &[2]);
}

#[test]
fn streaming_writes_check_the_byte_count() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stream.pdx");
    let mut w = Writer::create(&path).unwrap();
    let data: Vec<u8> = (0..4 * 1000u32).map(|i| (i % 251) as u8).collect();
    {
        use std::io::Write;
        let mut t = w.begin("big", DType::Float32, &[10, 100], &[]).unwrap();
        for chunk in data.chunks(333) {
            t.write_all(chunk).unwrap();
        }
        assert!(t.write_all(&[0]).is_err(), "one byte too many");
        t.finish().unwrap();
    }
    w.add("small", Tensor::new(DType::Int8, &[1], &[5]))
        .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert_eq!(r.tensor("big").unwrap().data(), data.as_slice());
    r.verify().unwrap();

    // Too few bytes: an error, and the writer refuses to go on.
    let path2 = dir.path().join("short.pdx");
    let mut w = Writer::create(&path2).unwrap();
    {
        use std::io::Write;
        let mut t = w.begin("t", DType::Int8, &[10], &[]).unwrap();
        t.write_all(&[1, 2, 3]).unwrap();
        assert!(t.finish().is_err());
    }
    assert!(w.add("u", Tensor::new(DType::Int8, &[1], &[5])).is_err());
    assert!(w.finish().is_err());
    assert!(!path2.exists());
}

#[test]
fn names_shared_prefixes_unicode_and_binary() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("names.pdx");
    let mut names: Vec<Vec<u8>> = Vec::new();
    let long = "encoder.".repeat(200);
    for i in 0..300 {
        names.push(format!("{long}layer.{i:05}.weight").into_bytes());
    }
    names.push("模型.权重".as_bytes().to_vec());
    names.push("größe/ß".as_bytes().to_vec());
    names.push("emoji.🙂".as_bytes().to_vec());
    names.push(vec![0x00]);
    names.push(vec![0xff, 0xfe, 0x00, 0x01]);
    names.push(vec![0xff; 40]);
    names.push(b"a\\b".to_vec());
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            block_size: 512,
            ..Default::default()
        },
    )
    .unwrap();
    for (i, n) in names.iter().enumerate() {
        w.add(n, Tensor::new(DType::UInt8, &[1], &[i as u8]))
            .unwrap();
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    assert!(r.data_blocks() > 3);
    for (i, n) in names.iter().enumerate() {
        assert_eq!(
            r.tensor(n).unwrap().data(),
            &[i as u8],
            "{}",
            paramdex::name::display(n)
        );
    }
    let mut sorted = names.clone();
    sorted.sort();
    let listed: Vec<Vec<u8>> = r.iter().map(|t| t.unwrap().name().to_vec()).collect();
    assert_eq!(listed, sorted);
    let with_prefix: Vec<Vec<u8>> = r
        .prefix(&long)
        .map(|t| t.unwrap().name().to_vec())
        .collect();
    assert_eq!(with_prefix.len(), 300);
    let ff: Vec<Vec<u8>> = r
        .prefix([0xff])
        .map(|t| t.unwrap().name().to_vec())
        .collect();
    assert_eq!(ff, vec![vec![0xff, 0xfe, 0x00, 0x01], vec![0xff; 40]]);
    assert!(r.get([0xff; 41]).unwrap().is_none());
    assert!(r.get("").unwrap().is_none(), "the header is not a tensor");
}

#[test]
fn every_alignment_is_honoured() {
    let dir = tempfile::tempdir().unwrap();
    for align in [1u64, 2, 8, 64, 256, 4096] {
        let path = dir.path().join(format!("a{align}.pdx"));
        let mut w = Writer::create_with(
            &path,
            WriterOptions {
                alignment: align,
                ..Default::default()
            },
        )
        .unwrap();
        for i in 0..40u64 {
            let name = "n".repeat(i as usize % 140 + 1) + &i.to_string();
            let data = sample(DType::Int8, i as usize * 7 % 33, i as u8);
            w.add(&name, Tensor::new(DType::Int8, &[data.len() as u64], &data))
                .unwrap();
        }
        w.finish().unwrap();
        let r = Reader::open(&path).unwrap();
        assert_eq!(u64::from(r.header().alignment), align);
        for t in r.iter() {
            let t = t.unwrap();
            assert_eq!(t.data_offset() % align, 0, "alignment {align}");
        }
        r.verify().unwrap();
        if align == 1 {
            // Packed: the records region has no padding fields.
            assert!(r
                .iter()
                .all(|t| !t.unwrap().record().windows(2).any(|w| w == [0xd2, 0x3e])));
        }
    }
}

#[test]
fn dropped_writer_leaves_nothing_and_keeps_the_previous_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.pdx");
    {
        let mut w = Writer::create(&path).unwrap();
        w.add("a", Tensor::new(DType::Int8, &[1], &[1])).unwrap();
        // dropped without finish
    }
    assert!(!path.exists());
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "temporary file left behind"
    );

    let mut w = Writer::create(&path).unwrap();
    w.add("a", Tensor::new(DType::Int8, &[1], &[1])).unwrap();
    w.finish().unwrap();
    let before = std::fs::read(&path).unwrap();
    {
        let mut w = Writer::create(&path).unwrap();
        w.add("b", Tensor::new(DType::Int8, &[1], &[2])).unwrap();
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

/// A finished file has the permissions of any file the process creates (0666 less the umask),
/// not the owner-only mode of a temporary file: a checkpoint saved by a trainer must be
/// readable by the server that loads it.
#[cfg(unix)]
#[test]
fn finished_files_have_ordinary_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain");
    std::fs::write(&plain, b"").unwrap();
    let expected = std::fs::metadata(&plain).unwrap().permissions().mode() & 0o777;
    let path = dir.path().join("m.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add("a", Tensor::new(DType::Int8, &[1], &[1])).unwrap();
    w.finish().unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, expected, "{mode:o} vs {expected:o}");
}

#[test]
fn recover_restores_complete_records_of_a_torn_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.pdx");
    let mut w = Writer::create(&path).unwrap();
    let mut datas = Vec::new();
    for i in 0..10u8 {
        let data = sample(DType::Float32, 50 + i as usize, i);
        w.add(
            format!("t{i}"),
            Tensor::new(DType::Float32, &[data.len() as u64 / 4], &data),
        )
        .unwrap();
        datas.push(data);
    }
    w.finish().unwrap();
    let full = std::fs::read(&path).unwrap();
    let r = Reader::open(&path).unwrap();
    let ends: Vec<u64> = (0..10)
        .map(|i| {
            let t = r.tensor(format!("t{i}")).unwrap();
            t.data_offset() + t.data().len() as u64
        })
        .collect();
    let records_len = r.header().records_len as usize;

    // Every truncation inside the records region keeps exactly the complete records.
    for cut in (0..records_len)
        .step_by(37)
        .chain([records_len, full.len()])
    {
        let torn = dir.path().join("torn");
        std::fs::write(&torn, &full[..cut]).unwrap();
        let out = dir.path().join("out.pdx");
        let complete = ends.iter().filter(|&&e| e as usize <= cut).count();
        let rep = paramdex::recover(&torn, &out, WriterOptions::default());
        if complete == 0 {
            // Nothing to recover: an error, and no empty file written.
            let e = rep.unwrap_err();
            let want = if cut == 0 {
                None
            } else {
                Some(Corruption::Truncated)
            };
            assert_eq!(e.corruption(), want, "cut at {cut}: {e}");
            assert!(!out.exists(), "cut at {cut}");
            continue;
        }
        let rep = rep.unwrap();
        assert_eq!(rep.good_bytes, ends[complete - 1], "cut at {cut}");
        assert_eq!(rep.recovered as usize, complete, "cut at {cut}");
        let r2 = Reader::open(&out).unwrap();
        assert_eq!(r2.len() as usize, complete);
        for (i, data) in datas.iter().enumerate().take(complete) {
            assert_eq!(r2.tensor(format!("t{i}")).unwrap().data(), data.as_slice());
        }
        r2.verify().unwrap();
    }
    // A torn last record whose bytes are present but wrong is not recovered.
    let mut bad = full[..records_len].to_vec();
    let last = ends[9] as usize - 1;
    bad[last] ^= 0xff;
    let torn = dir.path().join("torn2");
    std::fs::write(&torn, &bad).unwrap();
    let rep =
        paramdex::recover(&torn, &dir.path().join("o2.pdx"), WriterOptions::default()).unwrap();
    assert_eq!(rep.recovered, 9);
}

#[test]
fn recover_any_refuses_what_is_no_paramdex_file_and_leaves_intact_files_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.pdx");
    let path = dir.path().join("full.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add("a", Tensor::new(DType::Int8, &[2], &[1, 2])).unwrap();
    w.finish().unwrap();
    // Complete and every checksum matching: nothing to do, nothing written.
    let rep = paramdex::recover_any(&path, &out, WriterOptions::default()).unwrap();
    assert_eq!(rep, Recovered::Intact { tensors: 1 });
    assert!(!out.exists());
    // Not paramdex at all: decided by variant, nothing written.
    let paddle = dir.path().join("x.pdiparams");
    let mut plain = Vec::new();
    let spec = paramdex::raw::record::RecordSpec {
        dtype: DType::Int8,
        dims: &[2],
        lod: &[],
        name: None,
        data_crc: None,
        full_shape: None,
        stored_len: None,
    };
    paramdex::raw::record::encode_header(&spec, 0, 1, &mut plain).unwrap();
    plain.extend_from_slice(&[1, 2]);
    std::fs::write(&paddle, &plain).unwrap();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let text = dir.path().join("text");
    std::fs::write(&text, b"hello, world").unwrap();
    for input in [&paddle, &empty, &text, &dir.path().to_path_buf()] {
        let e = paramdex::recover_any(input, &out, WriterOptions::default()).unwrap_err();
        assert!(
            matches!(e, Error::UnrecognizedFormat { .. }),
            "{}: {e}",
            input.display()
        );
        assert!(!out.exists());
    }
}

#[test]
fn corrupt_data_is_caught_by_verify_and_checked_get() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add(
        "x",
        Tensor::new(DType::Float32, &[4], &f32_bytes(&[1.0, 2.0, 3.0, 4.0])),
    )
    .unwrap();
    w.finish().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let off = Reader::open(&path)
        .unwrap()
        .tensor("x")
        .unwrap()
        .data_offset() as usize;
    bytes[off + 5] ^= 1;
    let r = Reader::from_bytes_with(
        bytes.clone(),
        ReadOptions {
            verify_tensors: true,
            ..Default::default()
        },
    )
    .unwrap();
    let err = r.get("x").unwrap_err();
    assert!(matches!(err, Error::ChecksumMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains("x") && err.to_string().contains(&off.to_string()),
        "{err}"
    );
    let r = Reader::from_bytes(bytes).unwrap();
    assert!(r.verify().is_err());
}

#[test]
fn large_tensors_get_the_right_checksum_and_corruption_is_caught() {
    // Tensors of 8 MiB and more are checksummed on a second thread while they are written,
    // and the CRC field of their record header is patched afterwards: check that the field,
    // the index entry and the data agree, for tensors on both sides of the threshold.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.pdx");
    let sizes = [(8 << 20) - 1, 8 << 20, (9 << 20) + 3];
    let data: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| (i * 31 + k * 7) as u8).collect())
        .collect();
    let mut w = Writer::create(&path).unwrap();
    w.add("a_small", Tensor::new(DType::UInt8, &[3], &[1, 2, 3]))
        .unwrap();
    for (k, d) in data.iter().enumerate() {
        w.add(
            format!("big{k}"),
            Tensor::new(DType::UInt8, &[d.len() as u64], d),
        )
        .unwrap();
    }
    w.add("z_small", Tensor::new(DType::UInt8, &[1], &[9]))
        .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    r.verify().unwrap();
    for (k, d) in data.iter().enumerate() {
        let t = r.tensor(format!("big{k}")).unwrap();
        assert_eq!(t.data(), &d[..]);
        assert_eq!(t.stored_crc(), mask_crc(crc32c(d)), "big{k}");
    }
    // The record headers carry the same CRC: recover rebuilds the index from the records
    // alone and keeps only records whose data matches the CRC in their header.
    let recovered = dir.path().join("recovered.pdx");
    let report = paramdex::recover(&path, &recovered, WriterOptions::default()).unwrap();
    assert_eq!(report.recovered, 5, "{report:?}");
    Reader::open(&recovered).unwrap().verify().unwrap();
    let bytes = std::fs::read(&path).unwrap();
    let off = r.tensor("big2").unwrap().data_offset() as usize;
    drop(r);
    let mut bad = bytes.clone();
    bad[off + (9 << 20)] ^= 0x40;
    let r = Reader::from_bytes(bad).unwrap();
    let err = r.verify().unwrap_err();
    assert!(
        matches!(err, Error::ChecksumMismatch { .. }) && err.to_string().contains("big2"),
        "{err}"
    );
}

#[test]
fn snappy_index_blocks_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.pdx");
    let opts = WriterOptions {
        compression: Compression::Snappy,
        block_size: 1024,
        ..Default::default()
    };
    let mut w = Writer::create_with(&path, opts).unwrap();
    for i in 0..2000 {
        w.add(
            format!("model.layers.{i}.self_attn.q_proj.weight"),
            Tensor::new(DType::Int8, &[1], &[i as u8]),
        )
        .unwrap();
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    for i in (0..2000).step_by(7) {
        assert_eq!(
            r.tensor(format!("model.layers.{i}.self_attn.q_proj.weight"))
                .unwrap()
                .data(),
            &[i as u8]
        );
    }
    assert_eq!(r.iter().count(), 2000);
    r.verify().unwrap();
}

#[test]
fn reader_is_send_sync_and_serves_many_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Reader>();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mt.pdx");
    let mut w = Writer::create_with(
        &path,
        WriterOptions {
            block_size: 256,
            ..Default::default()
        },
    )
    .unwrap();
    for i in 0..500u32 {
        w.add(
            format!("t{i:04}"),
            Tensor::new(DType::UInt32, &[1], &i.to_le_bytes()),
        )
        .unwrap();
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    std::thread::scope(|s| {
        for k in 0..4u32 {
            let r = &r;
            s.spawn(move || {
                for i in (k..500).step_by(3) {
                    assert_eq!(
                        r.tensor(format!("t{i:04}"))
                            .unwrap()
                            .as_slice::<u32>()
                            .unwrap(),
                        &[i]
                    );
                }
            });
        }
    });
}

#[test]
fn replaced_file_keeps_serving_old_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add("v", Tensor::new(DType::Int8, &[1], &[1])).unwrap();
    w.finish().unwrap();
    let old = Reader::open(&path).unwrap();
    let mut w = Writer::create(&path).unwrap();
    w.add("v", Tensor::new(DType::Int8, &[1], &[2])).unwrap();
    w.finish().unwrap();
    assert_eq!(old.tensor("v").unwrap().data(), &[1]);
    assert_eq!(
        Reader::open(&path).unwrap().tensor("v").unwrap().data(),
        &[2]
    );
}

#[test]
fn not_a_paramdex_file_is_reported_as_such() {
    for bytes in [vec![], vec![0u8; 10], vec![7u8; 100]] {
        let err = Reader::from_bytes(bytes).unwrap_err();
        assert!(matches!(err, Error::UnrecognizedFormat { .. }), "{err}");
    }
    let tf = std::fs::read(support::data("tf/basic/tf2/ckpt-1.index")).unwrap();
    let err = Reader::from_bytes(tf).unwrap_err();
    assert!(err.to_string().contains("TensorFlow"), "{err}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Names sharing a long prefix and differing around the 8-byte window the writer sorts by
    /// (suffixes of 0-12 bytes from a tiny alphabet with 0x00 and 0xff, so many are prefixes of
    /// others), added in any order, come back in bytewise order and are all found.
    #[test]
    fn any_insertion_order_gives_bytewise_order(
        prefix in prop_oneof![Just(Vec::new()), Just(b"model.layers.".to_vec()), Just(vec![0u8; 3])],
        suffixes in proptest::collection::btree_set(
            proptest::collection::vec(prop_oneof![Just(0u8), Just(b'1'), Just(b'9'), Just(0xffu8)], 0..13),
            1..80),
        shuffle_seed in any::<u64>(),
    ) {
        let mut names: Vec<Vec<u8>> = suffixes
            .into_iter()
            .map(|s| [prefix.as_slice(), s.as_slice()].concat())
            .filter(|n| !n.is_empty())
            .collect();
        let mut want = names.clone();
        want.sort();
        // A deterministic shuffle (xorshift) so every order, not only reversed, is tried.
        let mut x = shuffle_seed | 1;
        for i in (1..names.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            names.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("o.pdx");
        let opts = WriterOptions { sync: false, ..Default::default() };
        let mut w = Writer::create_with(&path, opts).unwrap();
        for (i, n) in names.iter().enumerate() {
            w.add(n, Tensor::new(DType::UInt32, &[1], &(i as u32).to_le_bytes())).unwrap();
        }
        w.finish().unwrap();
        let r = Reader::open(&path).unwrap();
        let got: Vec<Vec<u8>> = r.iter().map(|t| t.unwrap().name().to_vec()).collect();
        prop_assert_eq!(&got, &want);
        for (i, n) in names.iter().enumerate() {
            let t = r.get(n).unwrap().unwrap();
            prop_assert_eq!(t.data(), &(i as u32).to_le_bytes()[..]);
        }
    }

    /// The reader agrees with a BTreeMap model for any set of names, tiny blocks and every
    /// restart interval.
    #[test]
    fn reader_matches_a_btreemap_model(
        entries in proptest::collection::btree_map(
            proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(0u8), Just(0xffu8), any::<u8>()], 1..24),
            proptest::collection::vec(any::<u8>(), 0..40),
            0..120),
        block_size in prop_oneof![Just(1usize), Just(64), Just(300), Just(4096)],
        restart_interval in prop_oneof![Just(1usize), Just(2), Just(16), Just(1024)],
        snappy in any::<bool>(),
        align in prop_oneof![Just(1u64), Just(64)],
        probes in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..6), 0..20),
    ) {
        let model: BTreeMap<Vec<u8>, Vec<u8>> = entries;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.pdx");
        let opts = WriterOptions {
            block_size, restart_interval, alignment: align, sync: false,
            compression: if snappy { Compression::Snappy } else { Compression::None },
            // The hash index block and the lone header block on some layouts, not others.
            hash_index: block_size != 64, header_alone: restart_interval != 2,
            ..WriterOptions::default()
        };
        let mut w = Writer::create_with(&path, opts).unwrap();
        // Insert in reverse order so the writer has to sort.
        for (k, v) in model.iter().rev() {
            w.add(k, Tensor::new(DType::UInt8, &[v.len() as u64], v)).unwrap();
        }
        w.finish().unwrap();
        let r = Reader::open(&path).unwrap();
        prop_assert_eq!(r.len() as usize, model.len());
        let listed: Vec<(Vec<u8>, Vec<u8>)> = r.iter().map(|t| { let t = t.unwrap(); (t.name().to_vec(), t.data().to_vec()) }).collect();
        let expect: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        prop_assert_eq!(listed, expect);
        for (k, v) in &model {
            let t = r.tensor(k).unwrap();
            prop_assert_eq!(t.data(), v.as_slice());
        }
        for p in &probes {
            prop_assert_eq!(r.get(p).unwrap().map(|t| t.data().to_vec()), if p.is_empty() { None } else { model.get(p).cloned() });
            let scanned: Vec<Vec<u8>> = r.prefix(p).map(|t| t.unwrap().name().to_vec()).collect();
            let expected: Vec<Vec<u8>> = model.keys().filter(|k| k.starts_with(p)).cloned().collect();
            prop_assert_eq!(scanned, expected);
        }
        r.verify().unwrap();
    }
}
