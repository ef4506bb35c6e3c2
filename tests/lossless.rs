//! Lossless compression of tensor records (issue 40, SPEC.md 3.4): every dtype round-trips byte
//! for byte through every reader (mapped, by ranges), slices and loads; incompressible data is
//! stored plain; damage inside a compressed record is refused naming the tensor and chunk; the
//! format version says what the file holds.

use std::path::Path;
use std::sync::Arc;

use paramdex::remote::{FileRange, RemoteOptions};
use paramdex::{
    CompressedProblem, DType, DataCompression, Error, LoadOptions, Reader, Region, Tensor, Writer,
    WriterOptions,
};

/// Weights as a trained layer has them: normal-ish values with a scale per row of 1024.
fn weights(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed | 1;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let scale = 0.02 * (0.5 * (next() - 0.5)).exp();
        for _ in 0..1024 {
            let (u, v) = (next().max(1e-12), next());
            let g = (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos();
            out.push((g * scale) as f32);
        }
    }
    out.truncate(n);
    out
}

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 56) as u8
        })
        .collect()
}

/// A test tensor: name, dtype, shape, bytes, and whether the writer compresses it.
type Case = (String, DType, Vec<u64>, Vec<u8>, bool);

/// Every fixed-width dtype, compressible and not.
fn tensors() -> Vec<Case> {
    let w = weights(3 << 19, 7);
    let mut out = Vec::new();
    let rows = |bytes: usize, esize: usize| vec![(bytes / esize / 1024) as u64, 1024];
    let bf16: Vec<u8> = w
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    let f16: Vec<u8> = w
        .iter()
        .flat_map(|&v| half::f16::from_f32(v * 16.0).to_le_bytes())
        .collect();
    let f32b: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
    let f64b: Vec<u8> = w[..1 << 19]
        .iter()
        .flat_map(|&v| f64::from(v).to_le_bytes())
        .collect();
    let fp8: Vec<u8> = bf16.chunks_exact(2).map(|c| c[1]).collect();
    let ints: Vec<u8> = w[..1 << 18]
        .iter()
        .flat_map(|&v| ((v * 1e4) as i32).to_le_bytes())
        .collect();
    out.push((
        "w.bf16".into(),
        DType::BFloat16,
        rows(bf16.len(), 2),
        bf16,
        true,
    ));
    out.push((
        "w.f16".into(),
        DType::Float16,
        rows(f16.len(), 2),
        f16,
        true,
    ));
    out.push((
        "w.f32".into(),
        DType::Float32,
        rows(f32b.len(), 4),
        f32b,
        true,
    ));
    out.push((
        "w.f64".into(),
        DType::Float64,
        rows(f64b.len(), 8),
        f64b,
        true,
    ));
    out.push((
        "w.fp8".into(),
        DType::Float8E4M3FN,
        rows(fp8.len(), 1),
        fp8,
        true,
    ));
    out.push((
        "w.i32".into(),
        DType::Int32,
        rows(ints.len(), 4),
        ints,
        true,
    ));
    // Not a whole number of chunks, odd row count.
    let odd: Vec<u8> = w[..(1 << 19) + 3 * 1024]
        .iter()
        .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
        .collect();
    out.push((
        "w.odd".into(),
        DType::BFloat16,
        rows(odd.len(), 2),
        odd,
        true,
    ));
    // Incompressible: stored plain.
    out.push((
        "r.u8".into(),
        DType::UInt8,
        vec![1 << 20],
        random_bytes(1 << 20, 3),
        false,
    ));
    out.push((
        "r.bf16".into(),
        DType::BFloat16,
        vec![1 << 19],
        random_bytes(1 << 20, 5),
        false,
    ));
    // Small: stored plain.
    out.push(("small".into(), DType::Float32, vec![4], vec![0; 16], false));
    for (d, esize) in [
        (DType::Int8, 1),
        (DType::UInt16, 2),
        (DType::Int64, 8),
        (DType::Complex64, 8),
        (DType::Complex128, 16),
        (DType::Bool, 1),
    ] {
        out.push((
            format!("z.{d}"),
            d,
            vec![(1 << 16) / esize as u64],
            vec![0; 1 << 16],
            true,
        ));
    }
    out
}

fn write(path: &Path, compression: DataCompression) -> Vec<Case> {
    let t = tensors();
    let opts = WriterOptions {
        data_compression: compression,
        ..WriterOptions::default()
    };
    let mut w = Writer::create_with(path, opts).unwrap();
    for (name, dtype, shape, data, _) in &t {
        w.add(name, Tensor::new(*dtype, shape, data)).unwrap();
    }
    w.finish().unwrap();
    t
}

#[test]
fn every_dtype_round_trips_through_every_reader() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.pdx");
    let packed = dir.path().join("packed.pdx");
    write(&plain, DataCompression::None);
    let t = write(&packed, DataCompression::Lossless);
    let (plain_len, packed_len) = (
        std::fs::metadata(&plain).unwrap().len(),
        std::fs::metadata(&packed).unwrap().len(),
    );
    assert!(
        packed_len * 5 < plain_len * 4,
        "{packed_len} vs {plain_len}"
    );

    let m = Reader::open(&packed).unwrap();
    assert_eq!(m.header().format_version, 4);
    assert_eq!(Reader::open(&plain).unwrap().header().format_version, 3);
    let r = Reader::from_range_read(
        Arc::new(FileRange::open(&packed).unwrap()),
        RemoteOptions::default(),
    )
    .unwrap();
    for reader in [&m, &r] {
        for (name, dtype, shape, data, compressed) in &t {
            let v = reader.tensor(name).unwrap();
            assert_eq!(v.dtype(), *dtype);
            assert_eq!(v.shape(), &shape[..]);
            assert!(v.data() == &data[..], "{name}");
            assert_eq!(v.is_compressed(), *compressed, "{name}");
            if *compressed {
                assert!(v.stored_len() < data.len() as u64, "{name}");
            } else {
                assert_eq!(v.stored_len(), data.len() as u64);
            }
            // A region across chunks, and one row.
            if shape.len() == 2 {
                let rows = shape[0];
                let region = Region::new(vec![rows / 3, 0], vec![rows / 3 + 1, shape[1]]).unwrap();
                let got = reader.get_slice(name, &region).unwrap().unwrap();
                let row = data.len() / rows as usize;
                let a = (rows / 3) as usize * row;
                assert!(
                    got.data() == &data[a..a + (rows / 3 + 1) as usize * row],
                    "{name}"
                );
            }
        }
        // An empty region, and the last row alone.
        let empty = Region::new(vec![5, 0], vec![0, 1024]).unwrap();
        assert!(reader
            .get_slice("w.f32", &empty)
            .unwrap()
            .unwrap()
            .data()
            .is_empty());
        let last = Region::new(vec![1535, 0], vec![1, 1024]).unwrap();
        let (_, _, _, f32b, _) = &t[2];
        assert!(
            reader.get_slice("w.f32", &last).unwrap().unwrap().data() == &f32b[f32b.len() - 4096..]
        );
        let infos = reader.list_from(b"").unwrap();
        let bf = infos.iter().find(|i| i.name == b"w.bf16").unwrap();
        assert_eq!(bf.size, 3 << 20);
        assert!(bf.stored_size < bf.size * 3 / 4, "{}", bf.stored_size);
        let all = reader.load_all(&LoadOptions::default()).unwrap();
        assert_eq!(all.len(), t.len());
        for (name, got) in &all {
            let (_, _, _, data, _) = t.iter().find(|x| x.0.as_bytes() == name).unwrap();
            assert!(&got.data == data);
        }
        let report = reader.verify().unwrap();
        assert_eq!(report.tensors, t.len() as u64);
        // Some of them, in file order, and into the caller's buffers (a wrong length refused
        // before anything is written).
        let some = reader
            .load_many(&["r.u8", "w.f32", "w.bf16"], &LoadOptions::default())
            .unwrap();
        let got: Vec<&[u8]> = some.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(got, [&b"w.bf16"[..], b"w.f32", b"r.u8"]);
        for (name, loaded) in &some {
            let (_, _, _, data, _) = t.iter().find(|x| x.0.as_bytes() == name).unwrap();
            assert!(&loaded.data == data);
        }
        let (mut a, mut b) = (vec![0u8; 3 << 20], vec![0u8; 1 << 20]);
        reader
            .load_into(
                &["w.bf16", "r.u8"],
                &mut [&mut a, &mut b],
                &LoadOptions::default(),
            )
            .unwrap();
        assert!(a == t[0].3 && b == t[7].3);
        let mut short = vec![0u8; 10];
        assert!(matches!(
            reader.load_into(&["w.bf16"], &mut [&mut short], &LoadOptions::default()),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[test]
fn a_file_without_a_compressed_record_keeps_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.pdx");
    let opts = WriterOptions {
        data_compression: DataCompression::Lossless,
        ..WriterOptions::default()
    };
    let mut w = Writer::create_with(&p, opts).unwrap();
    w.add(
        "rand",
        Tensor::new(DType::UInt8, &[1 << 16], &random_bytes(1 << 16, 9)),
    )
    .unwrap();
    w.add("tiny", Tensor::new(DType::Float32, &[2], &[0; 8]))
        .unwrap();
    w.finish().unwrap();
    let r = Reader::open(&p).unwrap();
    assert_eq!(r.header().format_version, 3);
    assert!(!r.tensor("rand").unwrap().is_compressed());
}

/// Offset and length of the stored data of tensor `name` (the entry's offset and size).
fn stored_range(path: &Path, name: &str) -> (u64, u64) {
    let r = Reader::open(path).unwrap();
    let v = r.tensor(name).unwrap();
    (v.data_offset(), v.stored_len())
}

#[test]
fn damage_inside_a_compressed_record_names_the_tensor_and_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.pdx");
    write(&p, DataCompression::Lossless);
    let (off, len) = stored_range(&p, "w.f32");
    let mut bytes = std::fs::read(&p).unwrap();
    // The last stored byte belongs to the last of the 6 chunks' streams.
    bytes[(off + len - 1) as usize] ^= 0x10;
    std::fs::write(&p, &bytes).unwrap();
    let r = Reader::open(&p).unwrap();
    for e in [r.verify().unwrap_err(), r.tensor("w.f32").unwrap_err()] {
        match &e {
            Error::Compressed {
                name,
                chunk,
                problem,
                ..
            } => {
                assert_eq!(name, "w.f32");
                assert_eq!(*chunk, Some(5), "{e}");
                assert_eq!(*problem, CompressedProblem::Checksum);
            }
            other => panic!("{other}"),
        }
        assert!(
            e.to_string().contains("w.f32") && e.to_string().contains("chunk 5"),
            "{e}"
        );
    }
    // Other tensors still read, and so does a region of this one in undamaged chunks: a
    // region decodes only the chunks holding its rows.
    assert!(r.tensor("w.bf16").is_ok());
    let first_rows = Region::new(vec![0, 0], vec![2, 1024]).unwrap();
    let got = r.get_slice("w.f32", &first_rows).unwrap().unwrap();
    let clean = &tensors()[2].3;
    assert!(got.data() == &clean[..2 * 4096]);
    let last_row = Region::new(vec![1535, 0], vec![1, 1024]).unwrap();
    assert!(matches!(
        r.get_slice("w.f32", &last_row),
        Err(Error::Compressed { chunk: Some(5), .. })
    ));
}

#[test]
fn a_lying_decoded_length_and_a_table_past_the_record_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.pdx");
    write(&p, DataCompression::Lossless);
    let (off, _) = stored_range(&p, "w.bf16");
    let clean = std::fs::read(&p).unwrap();
    // Byte 8.. of the stored data: the decoded length.
    let mut bytes = clean.clone();
    bytes[off as usize + 8] ^= 2;
    std::fs::write(&p, &bytes).unwrap();
    match Reader::open(&p).unwrap().tensor("w.bf16").unwrap_err() {
        Error::Compressed { name, problem, .. } => {
            assert_eq!(name, "w.bf16");
            assert_eq!(problem, CompressedProblem::Length);
        }
        other => panic!("{other}"),
    }
    // The chunk count (bytes 4..8): a table of 2^24 rows runs past the record.
    let mut bytes = clean.clone();
    bytes[off as usize + 7] = 1;
    std::fs::write(&p, &bytes).unwrap();
    match Reader::open(&p).unwrap().tensor("w.bf16").unwrap_err() {
        Error::Compressed { name, problem, .. } => {
            assert_eq!(name, "w.bf16");
            assert_eq!(problem, CompressedProblem::Table);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn a_sharded_incremental_save_compresses_and_reuses_compressed_records() {
    use paramdex::{merge_shards, MergeShardsOptions, SaveId, Saved, ShardWriter};
    let dir = tempfile::tempdir().unwrap();
    let t = tensors();
    let opts = WriterOptions {
        data_compression: DataCompression::Lossless,
        sync: false,
        ..WriterOptions::default()
    };
    let merge = MergeShardsOptions {
        no_sync: true,
        ..MergeShardsOptions::default()
    };
    let save = |prefix: &Path, base: Option<Arc<Reader>>| -> Vec<Saved> {
        let id = SaveId::random();
        let mut saved = Vec::new();
        for k in 0..2u32 {
            let mut w = ShardWriter::create(prefix, k, 2, id, opts.clone()).unwrap();
            if let Some(b) = &base {
                w = w.with_base(b.clone()).unwrap();
            }
            for (i, (name, dtype, shape, data, _)) in t.iter().enumerate() {
                if i % 2 == k as usize {
                    saved.push(
                        w.add_or_reuse(name, Tensor::new(*dtype, shape, data))
                            .unwrap(),
                    );
                }
            }
            w.finish().unwrap();
        }
        merge_shards(prefix, &merge).unwrap();
        saved
    };
    let first = dir.path().join("step1");
    save(&first, None);
    let r = Arc::new(Reader::open(&first).unwrap());
    assert_eq!(r.header().format_version, 4);
    for (name, _, _, data, compressed) in &t {
        let v = r.tensor(name).unwrap();
        assert!(v.data() == &data[..], "{name}");
        assert_eq!(v.is_compressed(), *compressed, "{name}");
    }
    r.verify().unwrap();
    // The next step, every tensor unchanged: each one reused as stored (compressed or not).
    let second = dir.path().join("step2");
    let saved = save(&second, Some(r));
    assert!(
        saved.iter().all(|s| matches!(s, Saved::Reused)),
        "{saved:?}"
    );
    let r2 = Reader::open(&second).unwrap();
    for (name, _, _, data, compressed) in &t {
        let v = r2.tensor(name).unwrap();
        assert!(v.data() == &data[..], "{name}");
        assert_eq!(v.is_compressed(), *compressed, "{name}");
    }
    r2.verify().unwrap();
}

#[test]
fn recover_reads_compressed_records_of_a_torn_file() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.pdx");
    let t = write(&p, DataCompression::Lossless);
    let records_len = Reader::open(&p).unwrap().header().records_len;
    // Torn: the index never written, and the last record cut short.
    let bytes = std::fs::read(&p).unwrap();
    let torn = dir.path().join("torn.pdx");
    std::fs::write(&torn, &bytes[..records_len as usize - 1]).unwrap();
    for compression in [DataCompression::None, DataCompression::Lossless] {
        let out = dir.path().join(format!("out-{compression:?}.pdx"));
        let opts = WriterOptions {
            data_compression: compression,
            sync: false,
            ..WriterOptions::default()
        };
        paramdex::recover(&torn, &out, opts).unwrap();
        let r = Reader::open(&out).unwrap();
        // Every record but the last (cut short) is back, byte for byte.
        assert_eq!(r.len(), t.len() as u64 - 1);
        for (name, _, _, data, compressed) in &t[..t.len() - 1] {
            let v = r.tensor(name).unwrap();
            assert!(v.data() == &data[..], "{name}");
            assert_eq!(
                v.is_compressed(),
                *compressed && compression == DataCompression::Lossless
            );
        }
        r.verify().unwrap();
    }
}
