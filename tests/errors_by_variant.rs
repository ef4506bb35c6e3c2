//! Errors a program decides by (issue 44): a paramdex file cut short is damage of a paramdex
//! file, told from a foreign file by variant, with `recoverable` saying when `recover` applies;
//! typed views that cannot be made say what was wanted and found; a directory given as a file
//! says so; a writer whose streamed tensor failed names that tensor.

use std::io::Write;
use std::path::Path;

use paramdex::interop::open_any;
use paramdex::{Corruption, DType, Error, Reader, Tensor, Writer, WriterOptions};

/// A native file of three float32 tensors (`a`, `b`, `c`), as written.
fn three_tensors(path: &Path) -> Vec<u8> {
    let mut w = Writer::create(path).unwrap();
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        let values = vec![i as f32; 64];
        w.add_values(name, &[64], &values).unwrap();
    }
    w.finish().unwrap();
    std::fs::read(path).unwrap()
}

#[test]
fn a_paramdex_file_cut_short_is_truncation_and_recoverable() {
    let dir = tempfile::tempdir().unwrap();
    let whole = three_tensors(&dir.path().join("whole.pdx"));
    // The first record (tensor `a`: its header, then 256 data bytes) starts the file.
    let first_data = Reader::open(dir.path().join("whole.pdx"))
        .unwrap()
        .tensor("a")
        .unwrap()
        .data_offset();
    let first_record = first_data + 256;
    for cut in [
        whole.len() - 1,
        whole.len() - 20,
        whole.len() - 48,
        whole.len() - 49,
        whole.len() / 2,
        first_record as usize,
        first_data as usize + 10,
    ] {
        let path = dir.path().join(format!("cut-{cut}.pdx"));
        std::fs::write(&path, &whole[..cut]).unwrap();
        let e = Reader::open(&path).unwrap_err();
        assert!(matches!(e, Error::Corrupt { .. }), "cut at {cut}: {e:?}");
        assert_eq!(
            e.corruption(),
            Some(Corruption::Truncated),
            "cut at {cut}: {e}"
        );
        assert!(e.to_string().contains(&path.display().to_string()), "{e}");
        let whole_first_record = cut as u64 >= first_record;
        assert_eq!(e.recoverable(), whole_first_record, "cut at {cut}: {e}");
        // The same through format detection: not "no format claims it".
        let e = open_any(&path).err().expect("a torn file does not open");
        assert_eq!(
            e.corruption(),
            Some(Corruption::Truncated),
            "cut at {cut}: {e}"
        );
        assert_eq!(e.recoverable(), whole_first_record, "cut at {cut}: {e}");
        if whole_first_record {
            let out = dir.path().join(format!("recovered-{cut}.pdx"));
            let report = paramdex::recover(&path, &out, WriterOptions::default()).unwrap();
            assert!(report.recovered >= 1, "cut at {cut}: {report:?}");
            Reader::open(&out).unwrap().verify().unwrap();
        }
    }
}

#[test]
fn a_foreign_file_is_not_truncation() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in [
        (
            "text.pdx",
            b"hello, this is a text file and not a checkpoint\n".repeat(4),
        ),
        ("short.pdx", b"tiny".to_vec()),
        ("zeros.pdx", vec![0u8; 4096]),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, &bytes).unwrap();
        let e = Reader::open(&path).unwrap_err();
        assert!(
            matches!(e, Error::UnrecognizedFormat { .. }),
            "{name}: {e:?}"
        );
        assert_eq!(e.corruption(), None);
        assert!(!e.recoverable());
    }
}

#[test]
fn typed_views_say_what_was_wanted_and_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ints.pdx");
    let mut w = Writer::create(&path).unwrap();
    w.add_values("w", &[4], &[1i32, 2, 3, 4]).unwrap();
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    let e = r.tensor("w").unwrap().as_slice::<f32>().unwrap_err();
    match &e {
        Error::DTypeMismatch {
            tensor,
            wanted,
            wanted_dtypes,
            found,
        } => {
            assert_eq!(tensor, "w");
            assert_eq!(*wanted, "f32");
            assert_eq!(*wanted_dtypes, &[DType::Float32]);
            assert_eq!(*found, DType::Int32);
        }
        other => panic!("{other:?}"),
    }
    assert!(!e.to_string().contains("bytemuck"), "{e}");
    assert_eq!(
        r.tensor("w").unwrap().as_slice::<i32>().unwrap(),
        &[1, 2, 3, 4]
    );
    let e = r.tensor("w").unwrap().bytes_value().unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                found: DType::Int32,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn a_misaligned_view_says_the_alignments() {
    // Alignment 1: records packed back to back, so some tensors' data start off an 8-byte
    // boundary (names of different lengths move them).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("packed.pdx");
    let opts = WriterOptions {
        alignment: 1,
        ..Default::default()
    };
    let mut w = Writer::create_with(&path, opts).unwrap();
    let names: Vec<String> = (1..=8).map(|n| "x".repeat(n)).collect();
    for name in &names {
        w.add_values(name, &[3], &[1.5f64, 2.5, 3.5]).unwrap();
    }
    w.finish().unwrap();
    let r = Reader::open(&path).unwrap();
    let mut misaligned = 0;
    for name in &names {
        let t = r.tensor(name).unwrap();
        let address_align = 1usize << (t.data().as_ptr() as usize).trailing_zeros().min(3);
        match t.as_slice::<f64>() {
            Ok(v) => {
                assert_eq!(address_align, 8, "{name}");
                assert_eq!(v, &[1.5, 2.5, 3.5]);
            }
            Err(Error::Misaligned {
                tensor,
                element,
                wanted,
                found,
            }) => {
                misaligned += 1;
                assert_eq!(&tensor, name);
                assert_eq!(element, "f64");
                assert_eq!(wanted, 8);
                assert_eq!(found, address_align);
                assert!(found < 8);
            }
            Err(e) => panic!("{name}: {e:?}"),
        }
    }
    assert!(
        misaligned > 0,
        "no tensor was misaligned: the test shows nothing"
    );
}

#[test]
fn a_directory_given_as_a_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("ckpt");
    std::fs::create_dir(&sub).unwrap();
    let e = Reader::open(&sub).unwrap_err();
    match &e {
        Error::IsADirectory { path, .. } => assert_eq!(path, &sub.display().to_string()),
        other => panic!("{other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("is a directory"), "{msg}");
    assert!(!msg.contains("os error"), "{msg}");
}

#[test]
fn a_failed_streamed_tensor_is_named_by_later_calls() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = Writer::create(dir.path().join("s.pdx")).unwrap();
    let mut t = w.begin("streamed", DType::Float32, &[4], &[]).unwrap();
    t.write_all(&[0u8; 8]).unwrap();
    // Half the bytes: finish fails, and says why.
    let e = t.finish().unwrap_err();
    assert!(matches!(e, Error::InvalidTensor { .. }), "{e:?}");
    let later = w
        .add("next", Tensor::new(DType::UInt8, &[1], &[1]))
        .unwrap_err();
    match &later {
        Error::WriterUnusable { tensor, why, .. } => {
            assert_eq!(tensor.as_deref(), Some("streamed"));
            assert!(why.contains("expected 16 data bytes, got 8"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!later.to_string().contains("dropped"), "{later}");
    assert!(
        later
            .to_string()
            .contains("streamed tensor streamed failed"),
        "{later}"
    );
    assert!(matches!(w.finish(), Err(Error::WriterUnusable { .. })));

    // Dropped unfinished: said so, naming the tensor.
    let mut w = Writer::create(dir.path().join("d.pdx")).unwrap();
    drop(w.begin("left", DType::Float32, &[4], &[]).unwrap());
    match w.finish() {
        Err(Error::WriterUnusable {
            tensor: Some(t),
            why,
            ..
        }) => {
            assert_eq!(t, "left");
            assert!(why.contains("dropped before finish()"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}
