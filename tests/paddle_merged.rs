//! Paddle's size-prefixed merged parameter file (the design document "Merging all params in a
//! single file"): files written here by hand to the document's layout (`u64` little-endian
//! size, then a DenseTensor record, repeated), read by name and by counter; the damage a
//! reader must name (size fields cut short, above the limit, past the end, not the record's
//! length; empty files); and native -> paddle-merged -> read round trips.

use std::fs;
use std::path::Path;

use paramdex::interop::paddle::merged::{self, MergedRecord};
use paramdex::interop::paddle::{self, open_merged};
use paramdex::interop::{
    export, open_any, ExportOptions, Format, OutputFormat, TensorData, TensorStore,
};
use paramdex::{Corruption, DType, Error, Tensor, Writer};

/// A DenseTensor record as Paddle writes it, by hand: outer version, LoD levels (byte length,
/// offsets), inner version, desc size, TensorDesc {data_type = 1, dims = 2 unpacked}, data.
fn record(dtype: u8, dims: &[u64], lod: &[Vec<u64>], data: &[u8]) -> Vec<u8> {
    let mut desc = vec![0x08, dtype];
    for &d in dims {
        desc.push(0x10);
        let mut v = d;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                desc.push(b);
                break;
            }
            desc.push(b | 0x80);
        }
    }
    let mut r = Vec::new();
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&(lod.len() as u64).to_le_bytes());
    for level in lod {
        r.extend_from_slice(&(level.len() as u64 * 8).to_le_bytes());
        for &o in level {
            r.extend_from_slice(&o.to_le_bytes());
        }
    }
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&(desc.len() as i32).to_le_bytes());
    r.extend_from_slice(&desc);
    r.extend_from_slice(data);
    r
}

/// Records laid out as the design document says: each after its size as a `u64` LE.
fn merged_file(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(&(r.len() as u64).to_le_bytes());
        out.extend_from_slice(r);
    }
    out
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// Three records: fp32 [3] (the reference's example), int64 [2, 2], and fp32 [5, 1] with LoD
/// [[0, 2, 5]] (the reference's LoD example).
fn three_records() -> Vec<Vec<u8>> {
    vec![
        record(5, &[3], &[], &f32s(&[1.0, 2.0, 3.0])),
        record(
            3,
            &[2, 2],
            &[],
            &[1i64, -2, 3, -4]
                .iter()
                .flat_map(|x| x.to_le_bytes())
                .collect::<Vec<u8>>(),
        ),
        record(
            5,
            &[5, 1],
            &[vec![0, 2, 5]],
            &f32s(&[1.0, 2.0, 3.0, 4.0, 5.0]),
        ),
    ]
}

fn bytes_of(t: &paramdex::interop::LoadedTensor<'_>) -> Vec<u8> {
    match &t.data {
        TensorData::Bytes(b) => b.to_vec(),
        TensorData::Strings(_) => panic!("strings"),
    }
}

/// The error of opening `p` (which must fail).
fn open_err(p: &Path) -> Error {
    match open_any(p) {
        Ok(s) => panic!("{} opened as {:?}", p.display(), s.format()),
        Err(e) => e,
    }
}

fn corrupt(e: &Error) -> (&'static str, u64, Corruption, String) {
    match e {
        Error::Corrupt {
            what,
            offset,
            kind,
            detail,
        } => (*what, *offset, *kind, detail.clone()),
        other => panic!("expected Error::Corrupt, got {other:?}"),
    }
}

#[test]
fn hand_written_file_reads_by_counter_names() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("params.merged");
    let recs = three_records();
    // The reference's fp32 [3] record is 36 bytes.
    assert_eq!(recs[0].len(), 36);
    fs::write(&p, merged_file(&recs)).unwrap();

    let store = open_any(&p).unwrap();
    assert_eq!(store.format(), Format::PaddleMerged);
    let list = store.list().unwrap();
    let names: Vec<&[u8]> = list.iter().map(|t| t.name.as_slice()).collect();
    assert_eq!(names, [&b"#0"[..], b"#1", b"#2"]);
    assert_eq!(list[0].kind.numeric(), Some(DType::Float32));
    assert_eq!(list[1].shape, [2, 2]);
    assert_eq!(list[2].lod, [vec![0, 2, 5]]);

    let t = store.load(b"#2").unwrap().unwrap();
    assert_eq!(t.info.shape, [5, 1]);
    assert_eq!(t.info.lod, [vec![0, 2, 5]]);
    assert_eq!(bytes_of(&t), f32s(&[1.0, 2.0, 3.0, 4.0, 5.0]));
    assert_eq!(
        bytes_of(&store.load(b"#0").unwrap().unwrap()),
        f32s(&[1.0, 2.0, 3.0])
    );
    // Not counters: out of range, leading zeros, signs, other names.
    for absent in [&b"#3"[..], b"#01", b"#+1", b"#", b"0", b"#-1"] {
        assert!(store.load(absent).unwrap().is_none(), "{absent:?}");
    }
    // The data of record 1 starts after size field 0, record 0, size field 1 and its header.
    let loc = store.data_location(b"#1").unwrap().unwrap();
    let header_1 = recs[1].len() as u64 - 32;
    assert_eq!(loc.offset, 8 + 36 + 8 + header_1);
    assert_eq!(loc.len, 32);
    let sum = store.verify(1).unwrap();
    assert_eq!((sum.tensors, sum.data_bytes), (3, 12 + 32 + 20));
}

#[test]
fn counter_access_reads_no_other_record() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.bin");
    let mut recs = three_records();
    // Record 1 keeps its length but is not a record: counter access to 0 and 2 never reads it.
    let len = recs[1].len();
    recs[1] = vec![0xab; len];
    let buf = merged_file(&recs);
    fs::write(&p, &buf).unwrap();

    let table = merged::record_table(&buf, &p).unwrap();
    assert_eq!(table.len(), 3);
    assert_eq!(
        table[2],
        MergedRecord {
            size_offset: 8 + 36 + 8 + len as u64,
            offset: 8 + 36 + 8 + len as u64 + 8,
            len: recs[2].len() as u64
        }
    );
    assert_eq!(merged::hop(&buf, 2, &p).unwrap(), Some(table[2]));
    assert_eq!(merged::hop(&buf, 3, &p).unwrap(), None);

    let store = open_merged(&p).unwrap();
    assert_eq!(store.record_count(), 3);
    let t = store.record(2).unwrap().unwrap();
    assert_eq!(t.info.name, b"#2");
    assert_eq!(t.info.lod, [vec![0, 2, 5]]);
    assert!(store.record(0).unwrap().is_some());
    assert!(store.record(3).unwrap().is_none());
    // Reading record 1 itself, listing and verifying do find it.
    let e = store.record(1).unwrap_err();
    let (_, offset, _, detail) = corrupt(&e);
    assert_eq!(offset, table[1].offset);
    assert!(detail.contains("record 1 of 3"), "{detail}");
    assert!(detail.contains("m.bin"), "{detail}");
    assert!(store.list().is_err());
    assert!(store.verify(1).is_err());
}

#[test]
fn truncated_size_field_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.bin");
    let recs = three_records();
    let mut buf = merged_file(&recs);
    let end = buf.len() as u64;
    buf.extend_from_slice(&[7, 0, 0, 0, 0]);
    fs::write(&p, &buf).unwrap();
    let e = open_err(&p);
    let (what, offset, kind, detail) = corrupt(&e);
    assert_eq!(
        (what, offset, kind),
        ("size field", end, Corruption::Truncated)
    );
    assert!(detail.contains("record 3"), "{detail}");
    assert!(detail.contains("5 remain"), "{detail}");
    assert!(detail.contains("m.bin"), "{detail}");
}

#[test]
fn oversized_size_fields_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let recs = three_records();
    // Above the limit, in the middle and first; past the end (no limit crossed).
    let second = 8 + recs[0].len();
    for (at, size, kind, k) in [
        (second, u64::MAX, Corruption::Other, "record 1"),
        (0, u64::MAX, Corruption::Other, "record 0"),
        (second, 1 << 40, Corruption::Truncated, "record 1"),
        (second, 5, Corruption::Other, "record 1"),
    ] {
        let mut buf = merged_file(&recs);
        buf[at..at + 8].copy_from_slice(&size.to_le_bytes());
        let p = dir.path().join(format!("m{at}-{size}.bin"));
        fs::write(&p, &buf).unwrap();
        let e = open_err(&p);
        let (what, offset, got, detail) = corrupt(&e);
        assert_eq!(
            (what, offset, got),
            ("size field", at as u64, kind),
            "{detail}"
        );
        assert!(detail.contains(k), "{detail}");
        assert!(detail.contains(&size.to_string()), "{detail}");
    }
    // The largest accepted size is an int64's.
    assert_eq!(merged::MAX_MERGED_RECORD_LEN, i64::MAX as u64);
}

#[test]
fn record_cut_short_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let recs = three_records();
    let full = merged_file(&recs);
    // The last record cut inside its data, and the only record cut inside its data.
    let one = merged_file(&recs[..1]);
    for (buf, k) in [
        (&full[..full.len() - 3], "record 2"),
        (&one[..one.len() - 3], "record 0"),
    ] {
        let p = dir.path().join(format!("cut-{}.bin", buf.len()));
        fs::write(&p, buf).unwrap();
        let e = open_err(&p);
        let (what, _, kind, detail) = corrupt(&e);
        assert_eq!(
            (what, kind),
            ("size field", Corruption::Truncated),
            "{detail}"
        );
        assert!(detail.contains(k), "{detail}");
        assert!(detail.contains("past the end"), "{detail}");
    }
}

#[test]
fn size_not_matching_its_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let recs = three_records();
    // Size fields one more than the record, with a byte to spare so that the sizes chain.
    for k in [0usize, 2] {
        let mut buf = Vec::new();
        let mut size_at = 0;
        for (i, r) in recs.iter().enumerate() {
            let extra = usize::from(i == k);
            if i == k {
                size_at = buf.len() as u64;
            }
            buf.extend_from_slice(&((r.len() + extra) as u64).to_le_bytes());
            buf.extend_from_slice(r);
            buf.resize(buf.len() + extra, 0);
        }
        let p = dir.path().join(format!("mismatch{k}.bin"));
        fs::write(&p, &buf).unwrap();
        let e = if k == 0 {
            open_err(&p)
        } else {
            let s = open_any(&p).unwrap();
            assert!(s.load(b"#0").unwrap().is_some());
            assert!(s.verify(1).is_err());
            s.load(b"#2").unwrap_err()
        };
        let (what, offset, kind, detail) = corrupt(&e);
        assert_eq!(
            (what, offset, kind),
            ("size field", size_at, Corruption::Other)
        );
        let want = format!(
            "says {} bytes, but the record is {} bytes",
            recs[k].len() + 1,
            recs[k].len()
        );
        assert!(detail.contains(&want), "{detail}");
        assert!(detail.contains(&format!("record {k} of 3")), "{detail}");
    }
}

#[test]
fn record_that_does_not_decode_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut recs = three_records();
    // Record 2 with tensor version 1 (Paddle reads only 0). (An unknown data type is no
    // error in a merged file: see unknown_code_in_a_merged_file_is_sized_by_its_size_field.)
    recs[2] = record(5, &[1], &[], &[0; 4]);
    recs[2][12..16].copy_from_slice(&1u32.to_le_bytes());
    let p = dir.path().join("bad.bin");
    fs::write(&p, merged_file(&recs)).unwrap();
    let s = open_any(&p).unwrap();
    let (_, _, _, detail) = corrupt(&s.load(b"#2").unwrap_err());
    assert!(
        detail.contains("bad.bin") && detail.contains("record 2 of 3"),
        "{detail}"
    );
    assert!(detail.contains("tensor version 1"), "{detail}");
}

#[test]
fn empty_and_foreign_files_are_not_merged_files() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.bin");
    fs::write(&empty, b"").unwrap();
    assert!(matches!(open_err(&empty), Error::UnrecognizedFormat { .. }));
    assert!(matches!(
        open_merged(&empty).unwrap_err(),
        Error::UnrecognizedFormat { .. }
    ));
    // A plain record stream (as in a .pdiparams), a single record, a LoD record, a native
    // file: none is claimed.
    let recs = three_records();
    let plain: Vec<u8> = recs.concat();
    assert!(!merged::claims(&plain));
    assert!(!merged::claims(&recs[0]));
    assert!(!merged::claims(&recs[2]));
    let native = dir.path().join("n.pdx");
    let mut w = Writer::create(&native).unwrap();
    w.add(
        "a",
        Tensor::new(DType::Float32, &[3], &f32s(&[1.0, 2.0, 3.0])),
    )
    .unwrap();
    w.finish().unwrap();
    assert!(!merged::claims(&fs::read(&native).unwrap()));
    assert_eq!(open_any(&native).unwrap().format(), Format::Native);
    let single = dir.path().join("w_0");
    fs::write(&single, &recs[2]).unwrap();
    assert_eq!(open_any(&single).unwrap().format(), Format::PaddleTensor);
    // Zeros, and bytes of nothing in particular.
    assert!(!merged::claims(&[0u8; 64]));
    assert!(!merged::claims(&(0..=255u8).collect::<Vec<u8>>()));
    assert!(merged::claims(&merged_file(&recs)));
}

/// A native file of several dtypes, LoD included, whose names sort differently from their
/// insertion order.
fn native_model(p: &Path) {
    let mut w = Writer::create(p).unwrap();
    let lod = [vec![0u64, 1, 4]];
    w.add(
        "emb.w_0",
        Tensor::new(DType::Float32, &[4], &f32s(&[1.0, -2.0, 3.5, 0.25])).with_lod(&lod),
    )
    .unwrap();
    w.add("a.b_0", Tensor::new(DType::Int64, &[2], &[1u8; 16]))
        .unwrap();
    w.add("scalar", Tensor::new(DType::Float64, &[], &[2u8; 8]))
        .unwrap();
    w.add("empty", Tensor::new(DType::Float16, &[0, 5], &[]))
        .unwrap();
    w.add("u8", Tensor::new(DType::UInt8, &[3, 1], &[9, 8, 7]))
        .unwrap();
    w.finish().unwrap();
}

#[test]
fn round_trip_native_to_merged_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let native = dir.path().join("model.pdx");
    native_model(&native);
    let src = open_any(&native).unwrap();
    let out = dir.path().join("out").join("model.merged");
    let report = export(
        src.as_ref(),
        OutputFormat::PaddleMerged,
        &out,
        &ExportOptions::default(),
    )
    .unwrap();
    let program = paddle::merged_program_output(&out);
    assert_eq!(program, dir.path().join("out").join("model.pdmodel"));
    assert_eq!(report.paths, [out.clone(), program.clone()]);
    assert_eq!(
        report.output_bytes,
        fs::metadata(&out).unwrap().len() + fs::metadata(&program).unwrap().len()
    );

    let back = open_any(&out).unwrap();
    assert_eq!(back.format(), Format::PaddleMerged);
    assert_eq!(back.program_file(), Some(program.as_path()));
    assert_eq!(back.list().unwrap(), src.list().unwrap());
    for t in src.list().unwrap() {
        let a = src.load(&t.name).unwrap().unwrap();
        let b = back.load(&t.name).unwrap().unwrap();
        assert_eq!(a.info, b.info);
        assert_eq!(bytes_of(&a), bytes_of(&b));
    }
    back.verify(1).unwrap();
    // By counter too: record k is the k-th name in bytewise order.
    let names: Vec<Vec<u8>> = src.list().unwrap().into_iter().map(|t| t.name).collect();
    for (k, n) in names.iter().enumerate() {
        let t = back.load(format!("#{k}").as_bytes()).unwrap().unwrap();
        assert_eq!(&t.info.name, n);
    }

    // Byte layout: without its size fields the file is the combined .pdiparams of the same
    // tensors, and each size is its record's length.
    let combined = dir.path().join("c");
    export(
        src.as_ref(),
        OutputFormat::PaddleCombined,
        &combined,
        &ExportOptions::default(),
    )
    .unwrap();
    let plain = fs::read(dir.path().join("c.pdiparams")).unwrap();
    let buf = fs::read(&out).unwrap();
    let table = merged::record_table(&buf, &out).unwrap();
    assert_eq!(table.len(), names.len());
    let stripped: Vec<u8> = table
        .iter()
        .flat_map(|r| buf[r.offset as usize..(r.offset + r.len) as usize].to_vec())
        .collect();
    assert_eq!(stripped, plain);

    // Back to native: the same tensors.
    let again = dir.path().join("again.pdx");
    export(
        back.as_ref(),
        OutputFormat::Native,
        &again,
        &ExportOptions::default(),
    )
    .unwrap();
    assert_eq!(
        open_any(&again).unwrap().list().unwrap(),
        src.list().unwrap()
    );

    // A second export over the first is refused, then allowed with overwrite (the program
    // there declares exactly these tensors and is kept).
    let e = export(
        src.as_ref(),
        OutputFormat::PaddleMerged,
        &out,
        &ExportOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(e, Error::OutputExists { .. }));
    let opts = ExportOptions {
        overwrite: true,
        ..ExportOptions::default()
    };
    let r = export(src.as_ref(), OutputFormat::PaddleMerged, &out, &opts).unwrap();
    assert_eq!(r.paths, std::slice::from_ref(&out));
}

#[test]
fn program_names_the_records_and_counter_names_still_answer() {
    let dir = tempfile::tempdir().unwrap();
    let native = dir.path().join("n.pdx");
    let mut w = Writer::create(&native).unwrap();
    // `#1` is a real name here: it wins over counter 1.
    w.add("#1", Tensor::new(DType::Int32, &[1], &11i32.to_le_bytes()))
        .unwrap();
    w.add("a", Tensor::new(DType::Int32, &[1], &22i32.to_le_bytes()))
        .unwrap();
    w.add("b", Tensor::new(DType::Int32, &[1], &33i32.to_le_bytes()))
        .unwrap();
    w.finish().unwrap();
    let src = open_any(&native).unwrap();
    let out = dir.path().join("m.merged");
    export(
        src.as_ref(),
        OutputFormat::PaddleMerged,
        &out,
        &ExportOptions::default(),
    )
    .unwrap();
    let s = open_any(&out).unwrap();
    let val = |n: &[u8]| {
        let t = s.load(n).unwrap().unwrap();
        (t.info.name.clone(), bytes_of(&t))
    };
    assert_eq!(val(b"#1"), (b"#1".to_vec(), 11i32.to_le_bytes().to_vec()));
    assert_eq!(val(b"#0"), (b"#1".to_vec(), 11i32.to_le_bytes().to_vec()));
    assert_eq!(val(b"#2"), (b"b".to_vec(), 33i32.to_le_bytes().to_vec()));
    assert!(s.load(b"#3").unwrap().is_none());

    // A program listing another number of parameters than the file holds records.
    let buf = fs::read(&out).unwrap();
    let table = merged::record_table(&buf, &out).unwrap();
    fs::write(&out, &buf[..table[2].size_offset as usize]).unwrap();
    let e = open_err(&out);
    let (what, _, _, detail) = corrupt(&e);
    assert_eq!(what, "parameter file");
    assert!(
        detail.contains("lists 3 parameters, but the file holds 2 records"),
        "{detail}"
    );
}

#[test]
fn program_declaring_another_shape_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let native = dir.path().join("n.pdx");
    native_model(&native);
    let src = open_any(&native).unwrap();
    let out = dir.path().join("m.merged");
    export(
        src.as_ref(),
        OutputFormat::PaddleMerged,
        &out,
        &ExportOptions::default(),
    )
    .unwrap();
    // Swap the records' order by hand: the program's declarations no longer fit.
    let buf = fs::read(&out).unwrap();
    let table = merged::record_table(&buf, &out).unwrap();
    let mut swapped = Vec::new();
    for r in table.iter().rev() {
        swapped.extend_from_slice(&buf[r.size_offset as usize..(r.offset + r.len) as usize]);
    }
    fs::write(&out, &swapped).unwrap();
    let e = open_err(&out);
    let (what, _, _, detail) = corrupt(&e);
    assert_eq!(what, "record");
    assert!(
        detail.contains("record 0 of 5") && detail.contains("declares"),
        "{detail}"
    );
}

#[test]
fn merged_output_named_as_a_program_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let native = dir.path().join("n.pdx");
    native_model(&native);
    let src = open_any(&native).unwrap();
    for name in ["m.pdmodel", "m.json"] {
        let e = export(
            src.as_ref(),
            OutputFormat::PaddleMerged,
            &dir.path().join(name),
            &ExportOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e:?}");
    }
}

#[test]
fn counter_names_are_listed_in_bytewise_order() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("twelve");
    let recs: Vec<Vec<u8>> = (0..12)
        .map(|i: i32| record(2, &[1], &[], &i.to_le_bytes()))
        .collect();
    fs::write(&p, merged_file(&recs)).unwrap();
    let s = open_merged(&p).unwrap();
    let names: Vec<String> = s
        .list()
        .unwrap()
        .into_iter()
        .map(|t| String::from_utf8(t.name).unwrap())
        .collect();
    let want = [
        "#0", "#1", "#10", "#11", "#2", "#3", "#4", "#5", "#6", "#7", "#8", "#9",
    ];
    assert_eq!(names, want);
    // A scan from a name starts there; each name is its counter's record.
    let from: Vec<Vec<u8>> = s.scan(b"#2").unwrap().map(|t| t.unwrap().name).collect();
    assert_eq!(from.len(), 8);
    assert_eq!(from[0], b"#2");
    for k in 0..12 {
        let t = s.load(format!("#{k}").as_bytes()).unwrap().unwrap();
        assert_eq!(bytes_of(&t), (k as i32).to_le_bytes());
        assert_eq!(s.name_of(k).unwrap().as_ref(), format!("#{k}").as_bytes());
    }
    assert!(s.name_of(12).is_none());
    assert_eq!(merged::parse_counter(b"#18446744073709551616"), None);
    assert_eq!(merged::parse_counter(b"#007"), None);
    assert_eq!(merged::parse_counter(b"#0"), Some(0));
}

// Records whose data_type is a number paramdex has no dtype for (issue 27 item 3): listed as
// Kind::Foreign where their size is known, refused by name, code and offset where it is not.

/// The foreign kind `(system, name)` of a listed tensor, if foreign.
fn foreign_kind(k: &paramdex::interop::Kind) -> Option<(&'static str, String)> {
    match k {
        paramdex::interop::Kind::Foreign(f) => Some((f.system, f.name.clone())),
        _ => None,
    }
}

#[test]
fn unknown_code_in_a_tensor_file_lists_and_reads_raw() {
    let dir = tempfile::tempdir().unwrap();
    // Code 99: no Paddle type; 10 data bytes for dims [2, 3] (the element size is unknown).
    let p = dir.path().join("w");
    let data: Vec<u8> = (1..=10).collect();
    fs::write(&p, record(99, &[2, 3], &[], &data)).unwrap();
    let store = open_any(&p).unwrap();
    assert_eq!(store.format(), Format::PaddleTensor);
    let list = store.list().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(
        foreign_kind(&list[0].kind),
        Some(("paddle", "code 99".to_string()))
    );
    assert_eq!(list[0].shape, [2, 3]);
    assert_eq!(list[0].nbytes, 10);
    assert_eq!(bytes_of(&store.load(b"w").unwrap().unwrap()), data);
    store.verify(1).unwrap();

    // A type Paddle defines but paramdex does not read is listed under Paddle's name; a record
    // with no data bytes at all reads as empty.
    fs::write(&p, record(8, &[4], &[], &[])).unwrap();
    let store = open_any(&p).unwrap();
    let list = store.list().unwrap();
    assert_eq!(
        foreign_kind(&list[0].kind),
        Some(("paddle", "SELECTED_ROWS".to_string()))
    );
    assert_eq!(list[0].nbytes, 0);

    // Native output cannot hold it: one refusal naming it, or left out when asked.
    fs::write(&p, record(99, &[2, 3], &[], &data)).unwrap();
    let store = open_any(&p).unwrap();
    let out = dir.path().join("o.pdx");
    let e = export(
        &*store,
        OutputFormat::Native,
        &out,
        &ExportOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("paddle code 99"), "{e}");
    assert!(!out.exists());
    let opts = ExportOptions {
        skip_unsupported: true,
        ..ExportOptions::default()
    };
    let r = export(&*store, OutputFormat::Native, &out, &opts).unwrap();
    assert_eq!(r.skipped.len(), 1, "{r:?}");

    // In a per-variable directory, beside a float32 tensor file.
    let vars = dir.path().join("vars");
    fs::create_dir(&vars).unwrap();
    fs::write(
        vars.join("a"),
        record(5, &[3], &[], &f32s(&[1.0, 2.0, 3.0])),
    )
    .unwrap();
    fs::write(vars.join("odd"), record(99, &[2, 3], &[], &data)).unwrap();
    let store = open_any(&vars).unwrap();
    assert_eq!(store.format(), Format::PaddleDir);
    let list = store.list().unwrap();
    assert_eq!(list[0].kind.numeric(), Some(DType::Float32));
    assert_eq!(
        foreign_kind(&list[1].kind),
        Some(("paddle", "code 99".to_string()))
    );
    assert_eq!(bytes_of(&store.load(b"odd").unwrap().unwrap()), data);
    store.verify(1).unwrap();
}

#[test]
fn unknown_code_in_a_merged_file_is_sized_by_its_size_field() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("params.merged");
    let mut recs = three_records();
    let odd: Vec<u8> = vec![7, 7, 7, 7, 7, 7, 7];
    recs.insert(1, record(99, &[4], &[], &odd));
    fs::write(&p, merged_file(&recs)).unwrap();
    let store = open_any(&p).unwrap();
    assert_eq!(store.format(), Format::PaddleMerged);
    let list = store.list().unwrap();
    assert_eq!(list.len(), 4);
    assert_eq!(
        foreign_kind(&list[1].kind),
        Some(("paddle", "code 99".to_string()))
    );
    assert_eq!((list[1].shape.as_slice(), list[1].nbytes), (&[4u64][..], 7));
    assert_eq!(bytes_of(&store.load(b"#1").unwrap().unwrap()), odd);
    assert_eq!(
        bytes_of(&store.load(b"#2").unwrap().unwrap()),
        recs[2][recs[2].len() - 32..]
    );
    store.verify(1).unwrap();

    // The first record unknown: the file is still claimed.
    fs::write(&p, merged_file(&recs[1..])).unwrap();
    let store = open_any(&p).unwrap();
    assert_eq!(store.format(), Format::PaddleMerged);
    assert!(store.list().unwrap()[0].kind.is_opaque());
}

#[test]
fn unknown_code_with_hostile_sizes_is_refused_not_misread() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("params.merged");
    let recs = three_records();
    let odd = record(99, &[4], &[], &[1, 2, 3]);
    // Header of the unknown record is 24 bytes: a size of 23 cuts it short.
    for size in [23u64, 22] {
        let mut file = merged_file(&recs[..2]);
        file.extend_from_slice(&size.to_le_bytes());
        file.extend_from_slice(&odd[..size as usize]);
        fs::write(&p, &file).unwrap();
        let store = open_any(&p).unwrap();
        let e = store.list().unwrap_err();
        let (_, _, kind, detail) = corrupt(&e);
        assert_eq!(kind, Corruption::Truncated, "{detail}");
        assert!(detail.contains("record 2 of 3"), "{detail}");
    }
    // A tensor file whose unknown record's header runs past the end: truncated, named.
    let t = dir.path().join("w");
    fs::write(&t, &odd[..20]).unwrap();
    assert!(open_any(&t).is_err());
    // An unknown code whose dims overflow any element size is listed with the bytes present.
    fs::write(&t, record(99, &[u64::MAX >> 1, 4], &[], &[9])).unwrap();
    let store = open_any(&t).unwrap();
    assert_eq!(store.list().unwrap()[0].nbytes, 1);
}
