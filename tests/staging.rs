//! `paramdex::remove_staged` closes staging for the whole process, so it has a test binary of
//! its own: one test, which stages outputs of every kind, removes them, and checks that
//! nothing can be staged or committed afterwards.

use std::fs;

use paramdex::interop::{export, ExportOptions, OutputFormat};
use paramdex::{Reader, Writer};

#[test]
fn remove_staged_removes_everything_staged_and_blocks_later_commits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A finished file, to export from and to keep.
    let src = d.join("src.pdx");
    let mut w = Writer::create(&src).unwrap();
    w.add_values("a", &[2], &[1.0f32, 2.0]).unwrap();
    w.add_values("b", &[1], &[3i32]).unwrap();
    w.finish().unwrap();
    let keep = fs::read(&src).unwrap();

    // A writer in progress, in a directory it had to create.
    let out = d.join("new/sub/out.pdx");
    let mut w = Writer::create(&out).unwrap();
    w.add_values("x", &[1], &[1.0f32]).unwrap();
    let temp = w.temp_path().unwrap().to_path_buf();
    assert!(temp.exists() && d.join("new/sub").is_dir());
    // An existing output that a second writer would replace.
    let existing = d.join("existing.pdx");
    fs::copy(&src, &existing).unwrap();
    let w2 = Writer::create(&existing).unwrap();
    let temp2 = w2.temp_path().unwrap().to_path_buf();

    let removed = paramdex::remove_staged();
    assert_eq!(removed, [temp.clone(), temp2.clone()]);
    assert!(!temp.exists() && !temp2.exists());
    assert!(
        !d.join("new").exists(),
        "directories made for the output removed"
    );
    // The final paths are untouched: absent, or as they were.
    assert!(!out.exists());
    assert_eq!(fs::read(&existing).unwrap(), keep);
    let e = w.finish().unwrap_err();
    assert!(
        matches!(&e, paramdex::Error::Io { source, .. } if source.kind() == std::io::ErrorKind::Interrupted),
        "{e}"
    );
    assert!(!out.exists());
    drop(w2);
    assert_eq!(fs::read(&existing).unwrap(), keep);

    // Nothing more can be staged: every writer fails before creating anything.
    assert!(Writer::create(d.join("later.pdx")).is_err());
    assert!(paramdex::write_atomically(d.join("later.bin"), |w| w.write_all(b"x")).is_err());
    let r = Reader::open(&src).unwrap();
    for format in OutputFormat::ALL {
        let dst = d.join(format!("later/{}", format.name()));
        assert!(export(&r, format, &dst, &ExportOptions::default()).is_err());
    }
    assert!(!d.join("later").exists());
    assert_eq!(paramdex::remove_staged(), Vec::<std::path::PathBuf>::new());
    let mut left: Vec<_> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["existing.pdx", "src.pdx"]);
}
