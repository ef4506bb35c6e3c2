//! Foreign inputs are never damage (`Error::Corrupt`): a `torch.save` zip under any name (the
//! Paddle merged-file detector once took its local file header for a record size when the
//! archive's name had up to 7 characters) is read by the `torch.save` reader; inputs paramdex
//! does not read are "not a … file" saying what they look like (`Error::UnrecognizedFormat`
//! with its `LooksLike`), or a pickle refused by its global: a bare pickle, a Paddle dygraph
//! `.pdparams` that is not one, a torch DCP directory; locally, one directory down, and at a
//! `file://` URL (where a `torch.save` zip is read as locally).

use std::fs;
use std::path::Path;

use paramdex::interop::open_any;
use paramdex::interop::paddle::merged;
use paramdex::{Error, LooksLike, PickleProblem};

#[path = "support/torch_zip.rs"]
mod torch_zip;

/// The error of opening `p` (which must fail as not recognized), and what it looks like.
fn refused(p: impl AsRef<Path>) -> (LooksLike, String) {
    let p = p.as_ref();
    match open_any(p) {
        Ok(s) => panic!("{} opened as {:?}", p.display(), s.format()),
        Err(
            e @ Error::UnrecognizedFormat {
                looks_like: Some(kind),
                ..
            },
        ) => (kind, e.to_string()),
        Err(e) => panic!(
            "{}: expected a not-recognized error, got {e:?}",
            p.display()
        ),
    }
}

/// The names the defect was reported with, short and long stems, and the storage sizes on
/// either side of the desc size a zip header gives (1 MiB at most for stems of up to 7
/// characters): none is a merged file, each is a torch.save zip.
#[test]
fn torch_save_files_are_read_under_any_name() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "model.pt",
        "best.pt",
        "last.pt",
        "ckpt.pt",
        "a.pt",
        "abcdefg.pt",
        "abcdefgh.pt",
        "pytorch_model.bin",
        "a_checkpoint_with_a_rather_long_name_epoch_0042.pth",
        "weights",
    ];
    for storage_len in [12usize, 3 << 20] {
        let storage: Vec<u8> = (0..storage_len).map(|i| (i * 7 % 251) as u8).collect();
        for name in names {
            let p = dir.path().join(name);
            let bytes = torch_zip::torch_save(&p, &storage);
            assert!(!merged::claims(&bytes), "{name} taken for a merged file");
            let s = open_any(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.format(), paramdex::interop::Format::Torch, "{name}");
            drop(s);
            fs::remove_file(&p).unwrap();
        }
    }
}

/// Any archive name of 1 to 40 characters, with every length of the first entry's data and
/// extra field a writer may give: the zip's first bytes are never a merged file's.
#[test]
fn no_zip_header_is_taken_for_a_size_field() {
    for stem_len in 1..=40 {
        let stem = "s".repeat(stem_len);
        for first_len in [0usize, 1, 8, 100] {
            let entries = vec![
                (format!("{stem}/data.pkl"), vec![0x80; first_len]),
                (format!("{stem}/version"), b"3\n".to_vec()),
            ];
            let mut bytes = torch_zip::zip(&entries);
            assert!(!merged::claims(&bytes), "stem of {stem_len}");
            // However long the file behind the header.
            bytes.resize(2 << 20, 0);
            assert!(!merged::claims(&bytes), "stem of {stem_len}, 2 MiB");
        }
    }
}

#[test]
fn pickles_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    for (name, proto, want) in [
        ("state.pkl", 4, LooksLike::Pickle),
        // A legacy (non-zip) torch.save.
        ("model.pt", 2, LooksLike::Pickle),
        ("model.pdparams", 2, LooksLike::PaddlePickle),
        ("adam.pdopt", 4, LooksLike::PaddlePickle),
    ] {
        let p = dir.path().join(name);
        fs::write(&p, torch_zip::pickle(proto)).unwrap();
        // Either not recognized, saying it is a pickle, or a pickle refused by the global it
        // names (nothing run): never damage.
        match open_any(&p) {
            Err(
                e @ Error::UnrecognizedFormat {
                    looks_like: Some(kind),
                    ..
                },
            ) => {
                let msg = e.to_string();
                assert_eq!(kind, want, "{msg}");
                assert!(msg.contains("Python pickle"), "{msg}");
                assert!(msg.contains(&format!("protocol {proto}")), "{msg}");
            }
            Err(Error::Pickle {
                problem: PickleProblem::ForbiddenGlobal,
                ..
            }) => {}
            Err(e) => panic!("{name}: {e:?}"),
            Ok(s) => panic!("{name} opened as {:?}", s.format()),
        }
        fs::remove_file(&p).unwrap();
    }
}

/// A DCP directory is read (tests/torch_dcp.rs); one whose `.metadata` is a pickle of something
/// else is refused by the global it names, never given Paddle's advice; its data files alone
/// say what they are (a DCP data file, read through its directory), and so does a directory of
/// data files without `.metadata` (a save that did not finish).
#[test]
fn torch_dcp_directories_and_files_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let dcp = dir.path().join("step_100");
    torch_zip::dcp_dir(&dcp);
    let forbidden = |p: &Path| match open_any(p) {
        Err(
            e @ Error::Pickle {
                problem: PickleProblem::ForbiddenGlobal,
                ..
            },
        ) => {
            let msg = e.to_string();
            assert!(msg.contains(".metadata"), "{msg}");
            assert!(!msg.contains("paddle.load"), "{msg}");
        }
        other => panic!("{}: {:?}", p.display(), other.map(|s| s.format())),
    };
    forbidden(&dcp);
    forbidden(&dcp.join(".metadata"));
    // One level down: the only input there, with its error.
    forbidden(dir.path());
    let (kind, msg) = refused(dcp.join("__0_0.distcp"));
    assert_eq!(kind, LooksLike::TorchDcp, "{msg}");
    assert!(msg.contains("give its directory"), "{msg}");
    // A .distcp file alone, whatever its first bytes, and its directory.
    let lone = dir.path().join("x");
    fs::create_dir(&lone).unwrap();
    fs::write(lone.join("__1_0.distcp"), [0u8; 40]).unwrap();
    assert_eq!(refused(lone.join("__1_0.distcp")).0, LooksLike::TorchDcp);
    let (kind, msg) = refused(&lone);
    assert_eq!(kind, LooksLike::TorchDcp, "{msg}");
    assert!(msg.contains("did not finish"), "{msg}");
}

/// The same classification at a URL (`file://`: object storage, the `s3` feature).
#[cfg(feature = "s3")]
#[test]
fn urls_say_what_foreign_objects_are() {
    let dir = tempfile::tempdir().unwrap();
    let pt = dir.path().join("model.pt");
    torch_zip::torch_save(&pt, &[1, 2, 3, 4]);
    // A torch.save zip is read there (read whole, by the local reader), as locally.
    let url = format!("file://{}", pt.display());
    let names = |s: Box<dyn paramdex::interop::TensorStore>| {
        assert_eq!(s.format(), paramdex::interop::Format::Torch);
        s.scan(b"")
            .unwrap()
            .map(|t| t.unwrap().name)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        names(open_any(&url).unwrap()),
        names(open_any(&pt).unwrap())
    );
    let pkl = dir.path().join("m.pdparams");
    fs::write(&pkl, torch_zip::pickle(2)).unwrap();
    // A pickle there goes to the Paddle dygraph reader, as locally: this one names a global
    // outside its allow-list, refused by name (nothing run), at the URL and locally alike.
    let url = format!("file://{}", pkl.display());
    for input in [url.clone(), pkl.display().to_string()] {
        match open_any(&input) {
            Err(
                e @ Error::Pickle {
                    problem: PickleProblem::ForbiddenGlobal,
                    ..
                },
            ) => {
                let msg = e.to_string();
                assert!(msg.contains(&input), "{msg}");
                assert!(msg.contains("torch._utils._rebuild_tensor_v2"), "{msg}");
            }
            other => panic!("{input}: {:?}", other.map(|s| s.format())),
        }
    }
    // A DCP directory (a prefix naming no object, with `.metadata` under it) goes to the DCP
    // reader, as locally: this `.metadata` names a global outside its allow-list, refused by
    // name. Its data file alone says what it is.
    let dcp = dir.path().join("dcp");
    torch_zip::dcp_dir(&dcp);
    for url in [
        format!("file://{}", dcp.display()),
        format!("file://{}/", dcp.display()),
        format!("file://{}/.metadata", dcp.display()),
    ] {
        match open_any(&url) {
            Err(
                e @ Error::Pickle {
                    problem: PickleProblem::ForbiddenGlobal,
                    ..
                },
            ) => {
                let msg = e.to_string();
                assert!(msg.contains(".metadata"), "{msg}");
                assert!(!msg.contains("paddle.load"), "{msg}");
            }
            other => panic!("{url}: {:?}", other.map(|s| s.format())),
        }
    }
    let url = format!("file://{}/__0_0.distcp", dcp.display());
    let (kind, msg) = refused(&url);
    assert_eq!(kind, LooksLike::TorchDcp, "{url}: {msg}");
    assert!(msg.starts_with(&url), "{msg}");
    // A prefix naming nothing stays not found.
    match open_any(format!("file://{}/nothing", dir.path().display())) {
        Err(Error::Remote { .. } | Error::Io { .. }) => {}
        other => panic!("{:?}", other.map(|s| s.format())),
    }
}

/// Bytes of nothing in particular stay "not a … file" with nothing more to say.
#[test]
fn other_bytes_look_like_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("noise.bin");
    fs::write(&p, (0..=255u8).cycle().take(5000).collect::<Vec<u8>>()).unwrap();
    match open_any(&p) {
        Err(Error::UnrecognizedFormat {
            looks_like: None, ..
        }) => {}
        other => panic!("{:?}", other.map(|s| s.format())),
    }
}
