//! torch.distributed.checkpoint (DCP) `FileSystemWriter` directories (issue 30): built here as
//! two ranks write them (a `.metadata` pickle of the metadata dataclasses, `__R_0.distcp` data
//! files of `torch.save` archives), read through `open_any` as every command does; hostile
//! metadata refused by name, damaged chunk layouts reported for their tensor, never a panic.

#[path = "support/torch_zip.rs"]
mod torch_zip;

use std::path::Path;

use paramdex::interop::{open_any, Format, Kind, TensorData, TensorStore};
use paramdex::{Error, MetaValue, PickleProblem, Region};
use torch_zip::{dcp_checkpoint, torch_int_archive, torch_tensor_archive, DcpChunk, DcpSpec};

fn f32s(v: impl IntoIterator<Item = f32>) -> Vec<u8> {
    v.into_iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn chunk(offsets: &[i64], sizes: &[i64], file: &str) -> DcpChunk {
    DcpChunk {
        offsets: offsets.to_vec(),
        sizes: sizes.to_vec(),
        file: file.into(),
    }
}

fn bytes_of(store: &dyn TensorStore, name: &str) -> Vec<u8> {
    match store.load(name.as_bytes()).unwrap().unwrap().data {
        TensorData::Bytes(b) => b.into_owned(),
        TensorData::Strings(_) => panic!("strings"),
    }
}

/// `w` f32 [4, 3] = 0..12, rows 0..2 on rank 0 and 2..4 on rank 1; `m` f32 [2, 4] = 100..108,
/// columns 0..2 on rank 0 and 2..4 on rank 1; `b` f32 [3] on rank 1; `step` = 7 (bytes).
fn spec() -> DcpSpec {
    DcpSpec {
        tensors: vec![
            (
                "model.w".into(),
                "float32".into(),
                vec![4, 3],
                vec![
                    chunk(&[0, 0], &[2, 3], "__0_0.distcp"),
                    chunk(&[2, 0], &[2, 3], "__1_0.distcp"),
                ],
            ),
            (
                "model.m".into(),
                "float32".into(),
                vec![2, 4],
                vec![
                    chunk(&[0, 0], &[2, 2], "__0_0.distcp"),
                    chunk(&[0, 2], &[2, 2], "__1_0.distcp"),
                ],
            ),
            (
                "b".into(),
                "float32".into(),
                vec![3],
                vec![chunk(&[0], &[3], "__1_0.distcp")],
            ),
        ],
        bytes: vec![("step".into(), torch_int_archive(7), "__1_0.distcp".into())],
        extra_global: None,
    }
}

/// The value of element `i` of the global tensor `name` as [`spec`] has it.
fn global(name: &str) -> Vec<f32> {
    match name {
        "model.w" => (0..12).map(|x| x as f32).collect(),
        "model.m" => (100..108).map(|x| x as f32).collect(),
        "b" => vec![-1.0, 0.5, 2.0],
        _ => unreachable!(),
    }
}

/// Each chunk's archive: the chunk cut from [`global`].
fn archives(name: &str, i: usize) -> Vec<u8> {
    let s = spec();
    let (_, _, size, chunks) = s.tensors.iter().find(|t| t.0 == name).unwrap();
    let c = &chunks[i];
    let g = global(name);
    let mut out = Vec::new();
    if size.len() == 1 {
        out = g[c.offsets[0] as usize..(c.offsets[0] + c.sizes[0]) as usize].to_vec();
    } else {
        for r in c.offsets[0]..c.offsets[0] + c.sizes[0] {
            for col in c.offsets[1]..c.offsets[1] + c.sizes[1] {
                out.push(g[(r * size[1] + col) as usize]);
            }
        }
    }
    let sizes: Vec<i64> = c.sizes.clone();
    torch_tensor_archive("FloatStorage", &sizes, &f32s(out))
}

fn write(dir: &Path, spec: &DcpSpec) {
    dcp_checkpoint(dir, spec, &archives);
}

#[test]
fn a_two_rank_checkpoint_reads_as_its_global_tensors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("step_7");
    write(&dir, &spec());
    let local = [
        dir.display().to_string(),
        dir.join(".metadata").display().to_string(),
    ];
    // At a URL (`file://`, the same dispatcher as `s3://`): by the prefix and by `.metadata`,
    // through the same reader (the objects read whole).
    let urls = [
        format!("file://{}", dir.display()),
        format!("file://{}/", dir.display()),
        format!("file://{}/.metadata", dir.display()),
    ];
    let urls = if cfg!(feature = "s3") { &urls[..] } else { &[] };
    for input in local.iter().chain(urls) {
        let store = open_any(input).unwrap();
        assert_eq!(store.format(), Format::TorchDcp);
        let list = store.list().unwrap();
        let names: Vec<&[u8]> = list.iter().map(|t| t.name.as_slice()).collect();
        assert_eq!(names, [&b"b"[..], b"model.m", b"model.w", b"step"]);
        assert_eq!(list[2].shape, [4, 3]);
        assert_eq!(list[2].nbytes, 48);
        for n in ["model.w", "model.m", "b"] {
            assert_eq!(bytes_of(store.as_ref(), n), f32s(global(n)), "{n}");
        }
        // The non-tensor item: its stored bytes, listed as such; its value as metadata.
        assert_eq!(list[3].kind, Kind::Bytes);
        assert_eq!(list[3].shape, Vec::<u64>::new());
        assert_eq!(bytes_of(store.as_ref(), "step"), torch_int_archive(7));
        assert_eq!(
            store.metadata().unwrap().get("step"),
            Some(&MetaValue::Int(7))
        );
        // A region across both chunks of `w` (rows 1..3, columns 1..3) and inside one of `m`.
        let r = Region::new(vec![1, 1], vec![2, 2]).unwrap();
        let got = store.load_slice(b"model.w", &r).unwrap().unwrap();
        assert_eq!(got.info.shape, [2, 2]);
        match got.data {
            TensorData::Bytes(b) => assert_eq!(b.as_ref(), f32s([4.0, 5.0, 7.0, 8.0])),
            TensorData::Strings(_) => panic!(),
        }
        let r = Region::new(vec![1, 2], vec![1, 2]).unwrap();
        match store.load_slice(b"model.m", &r).unwrap().unwrap().data {
            TensorData::Bytes(b) => assert_eq!(b.as_ref(), f32s([106.0, 107.0])),
            TensorData::Strings(_) => panic!(),
        }
        let v = store.verify(1).unwrap();
        assert_eq!(v.tensors, 4);
        assert!(v.checksums >= 5 * 3, "{v:?}");
        // A region outside the tensor, and a region of a non-tensor item.
        let out = Region::new(vec![3, 0], vec![2, 1]).unwrap();
        assert!(matches!(
            store.load_slice(b"model.w", &out),
            Err(Error::InvalidArgument(_))
        ));
        let r = Region::new(vec![0], vec![1]).unwrap();
        assert!(matches!(
            store.load_slice(b"step", &r),
            Err(Error::Unsupported(_))
        ));
    }
}

/// A `.metadata` naming a global outside the DCP allow-list is refused with its name before
/// anything else is read.
#[test]
fn an_unknown_global_in_the_metadata_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let mut s = spec();
    s.extra_global = Some(("posix".into(), "system".into()));
    write(tmp.path(), &s);
    match open_any(tmp.path()) {
        Err(
            e @ Error::Pickle {
                problem: PickleProblem::ForbiddenGlobal,
                ..
            },
        ) => assert!(e.to_string().contains("posix.system"), "{e}"),
        other => panic!("{:?}", other.map(|s| s.format())),
    }
}

/// Opens `spec` (with `archive_of`) and returns the error of tensor `name`, after checking that
/// the other tensors still read.
fn damaged(spec: &DcpSpec, archive_of: &dyn Fn(&str, usize) -> Vec<u8>, name: &str) -> Error {
    let tmp = tempfile::tempdir().unwrap();
    dcp_checkpoint(tmp.path(), spec, archive_of);
    let store = open_any(tmp.path()).unwrap();
    let listed = store.scan(b"").unwrap().filter(|r| r.is_ok()).count();
    assert!(listed >= 1, "the undamaged items are listed");
    let err = match store.load(name.as_bytes()) {
        Err(e) => e,
        Ok(_) => match store.verify(1) {
            Err(e) => e,
            Ok(_) => panic!("{name} read"),
        },
    };
    assert!(store.verify(1).is_err());
    err
}

fn corrupt_saying(e: Error, what: &str) {
    let msg = e.to_string();
    assert!(matches!(e, Error::Corrupt { .. }), "{e:?}");
    assert!(msg.contains(what), "{msg}");
}

#[test]
fn overlapping_missing_and_outside_chunks_are_damage_of_their_tensor() {
    // Overlap: rank 1's chunk of `w` starts at row 1.
    let mut s = spec();
    s.tensors[0].3[1] = chunk(&[1, 0], &[2, 3], "__1_0.distcp");
    corrupt_saying(damaged(&s, &archives, "model.w"), "overlap");
    // Missing: `w` declared [5, 3], chunks cover 4 rows.
    let mut s = spec();
    s.tensors[0].2 = vec![5, 3];
    corrupt_saying(damaged(&s, &archives, "model.w"), "stored nowhere");
    // A chunk outside the size.
    let mut s = spec();
    s.tensors[0].2 = vec![3, 3];
    corrupt_saying(damaged(&s, &archives, "model.w"), "does not lie inside");
    // Huge sizes: an element count that overflows; one that does not, whose chunk archive
    // holds far less (found when the chunk is read, before anything of its size is allocated).
    let mut s = spec();
    s.tensors[2].2 = vec![1 << 40, 1 << 40];
    s.tensors[2].3 = vec![chunk(&[0, 0], &[1 << 40, 1 << 40], "__1_0.distcp")];
    corrupt_saying(damaged(&s, &archives_b, "b"), "overflows");
    let mut s = spec();
    s.tensors[2].2 = vec![1 << 40];
    s.tensors[2].3 = vec![chunk(&[0], &[1 << 40], "__1_0.distcp")];
    corrupt_saying(damaged(&s, &archives_b, "b"), "shape");
}

/// `b`'s archive whatever its declared chunk.
fn archives_b(name: &str, i: usize) -> Vec<u8> {
    if name == "b" {
        torch_tensor_archive("FloatStorage", &[3], &f32s(global("b")))
    } else {
        archives(name, i)
    }
}

#[test]
fn stored_bytes_past_their_file_or_outside_the_directory_are_damage() {
    let tmp = tempfile::tempdir().unwrap();
    let meta = dcp_checkpoint(tmp.path(), &spec(), &archives);
    // Cut rank 1's file short: its chunks now run past its end.
    let f = tmp.path().join("__1_0.distcp");
    let len = std::fs::metadata(&f).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&f)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let store = open_any(tmp.path()).unwrap();
    corrupt_saying(store.load(b"step").err().unwrap(), "past the end");
    // Rank 0's tensors are still read.
    let w = store.load_slice(b"model.w", &Region::new(vec![0, 0], vec![2, 3]).unwrap());
    assert!(w.is_ok());
    // A data file missing.
    std::fs::remove_file(&f).unwrap();
    let store = open_any(tmp.path()).unwrap();
    corrupt_saying(store.load(b"b").err().unwrap(), "missing");
    // The same at a URL (no object there).
    #[cfg(feature = "s3")]
    {
        let store = open_any(format!("file://{}", tmp.path().display())).unwrap();
        corrupt_saying(store.load(b"b").err().unwrap(), "missing");
    }
    // A relative path leaving the directory.
    let bad = String::from_utf8_lossy(&meta)
        .contains("__0_0.distcp")
        .then(|| {
            let mut m = meta.clone();
            let at = m.windows(12).position(|w| w == b"__0_0.distcp").unwrap();
            m[at..at + 12].copy_from_slice(b"../0_0.distc");
            m
        })
        .unwrap();
    std::fs::write(tmp.path().join(".metadata"), bad).unwrap();
    let store = open_any(tmp.path()).unwrap();
    corrupt_saying(store.load(b"model.w").err().unwrap(), "plain file name");
}

/// A chunk whose archive holds another shape than the metadata says is damage of its tensor,
/// and truncated metadata is a truncated pickle, never a panic.
#[test]
fn chunks_that_disagree_and_truncated_metadata() {
    let wrong = |name: &str, i: usize| {
        if name == "model.w" && i == 1 {
            torch_tensor_archive("FloatStorage", &[3, 2], &f32s((0..6).map(|x| x as f32)))
        } else {
            archives(name, i)
        }
    };
    corrupt_saying(damaged(&spec(), &wrong, "model.w"), "shape");
    let tmp = tempfile::tempdir().unwrap();
    let meta = dcp_checkpoint(tmp.path(), &spec(), &archives);
    for cut in [3, meta.len() / 2, meta.len() - 1] {
        std::fs::write(tmp.path().join(".metadata"), &meta[..cut]).unwrap();
        match open_any(tmp.path()) {
            Err(Error::Pickle { .. }) => {}
            other => panic!("cut at {cut}: {:?}", other.map(|s| s.format())),
        }
    }
}

/// The `.metadata` torch 2.15 wrote for two gloo ranks (tests/data/pickle, also a fuzz seed):
/// every item listed with its dtype and global size; its data files are not there, so each
/// item is reported as stored in a missing file.
#[test]
fn the_metadata_torch_writes_parses() {
    let bytes = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/pickle/dcp_two_ranks.metadata"),
    )
    .unwrap();
    let store = paramdex::interop::torch::dcp::DcpStore::from_metadata_bytes(&bytes).unwrap();
    let items: Vec<_> = store.scan(b"").unwrap().collect();
    assert_eq!(items.len(), 6);
    for r in items {
        let e = r.err().unwrap();
        assert!(e.to_string().contains("missing"), "{e}");
    }
    // With its data files: a directory holding only that metadata names what is missing.
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join(".metadata"), &bytes).unwrap();
    let store = open_any(tmp.path()).unwrap();
    assert_eq!(store.format(), Format::TorchDcp);
    let e = store.load(b"model.w").err().unwrap();
    assert!(e.to_string().contains("__0_0.distcp"), "{e}");
}
