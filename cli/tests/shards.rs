//! Sharded checkpoints and slices through the real binary: `demo --ranks` (real processes),
//! every command on a sharded prefix, `get --slice`, `merge-shards`, `clean-shards`, and what
//! `stat` and `recover` say about a save that did not finish.

mod common;
use common::*;

use std::path::Path;

use paramdex::interop::tf::TfCheckpoint;
use paramdex::interop::{open_any, TensorData, TensorStore};
use paramdex::{DType, Reader, Region, SaveId, ShardWriter, WriterOptions};

fn quick() -> WriterOptions {
    WriterOptions {
        sync: false,
        ..WriterOptions::default()
    }
}

/// Pending shards of a save of two ranks, each holding a row of `emb` ([2, 3] uint8) and a
/// tensor of its own; `overlap` makes both hold row 0.
fn pending(prefix: &Path, overlap: bool) {
    let id = SaveId::random();
    for k in 0..2u32 {
        let mut w = ShardWriter::create(prefix, k, 2, id, quick()).unwrap();
        let row = if overlap { 0 } else { u64::from(k) };
        let r = Region::new(vec![row, 0], vec![1, 3]).unwrap();
        w.add_slice("emb", DType::UInt8, &[2, 3], &r, &[k as u8 + 1; 3])
            .unwrap();
        w.add_values(format!("own{k}"), &[2], &[k as u8; 2])
            .unwrap();
        w.finish().unwrap();
    }
}

/// `get --format raw` (with `--slice` when given): the bytes written, which may hold any byte
/// (the common helper refuses escape bytes in output, so this one runs the binary itself).
fn raw(path: &Path, name: &str, slice: Option<&str>) -> Vec<u8> {
    let mut c = std::process::Command::new(BIN);
    c.arg("get").arg(path).arg(name).args(["--format", "raw"]);
    if let Some(s) = slice {
        c.args(["--slice", s]);
    }
    let o = c.output().unwrap();
    assert!(
        o.status.success(),
        "get {name} {slice:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o.stdout
}

#[test]
fn demo_ranks_saves_with_real_processes_and_every_command_reads_the_prefix() {
    let dir = tempfile::tempdir().unwrap();
    let o = run(&[&"demo", &"--ranks", &"3", &"--dir", &dir.path()], 0);
    let text = stdout(&o);
    for want in [
        "with 3 writer processes",
        "rank 0 (pid",
        "rank 2 (pid",
        "index renamed into place: the checkpoint exists",
        "(indexes only)",
        "values match",
        "zero-copy",
        "one strided copy",
        ": OK",
        // The second save is incremental: unchanged slices reused, the first save removed.
        "processes save",
        "reused 19 unchanged",
        "are step 1's, in 3 of its 6 data files",
        "step 2 verified without it",
    ] {
        assert!(text.contains(want), "{want:?} not in:\n{text}");
    }
    assert!(!text.contains("DIFFER"));
    // Every command below reads the incremental checkpoint of step 2: 3 data files of its own
    // and 3 linked from step 1, which is gone.
    assert!(!dir.path().join("demo_ckpt.index").exists());
    let prefix = dir.path().join("demo_ckpt_step2");
    let r = Reader::open(&prefix).unwrap();
    assert!(r.is_sharded());
    assert_eq!(r.header().shards.len(), 6);
    let reused: Vec<bool> = r.header().shards.iter().map(|s| s.reused).collect();
    assert_eq!(reused, [false, false, false, true, true, true]);

    // ls, stat, verify on the prefix and on PREFIX.index.
    let index = dir.path().join("demo_ckpt_step2.index");
    for p in [&prefix, &index] {
        let list = json(&run(&[&"ls", p, &"--json"], 0));
        assert_eq!(list.as_array().unwrap().len() as u64, r.len());
        let st = json(&run(&[&"stat", p, &"--json"], 0));
        assert_eq!(st["format"], "paramdex");
        assert_eq!(st["format_version"], 2);
        assert_eq!(st["shards"], 6);
        assert_eq!(st["data_files"].as_array().unwrap().len(), 6);
        assert_eq!(st["data_files"][5]["reused"], true);
        assert!(st["leftovers"].as_array().unwrap().is_empty());
        let v = json(&run(&[&"verify", p, &"--json"], 0));
        assert_eq!(v["ok"], true);
        assert_eq!(v["tensors"].as_u64(), Some(r.len()));
    }
    let st = stdout(&run(&[&"stat", &prefix], 0));
    assert!(st.contains("demo_ckpt_step2.data-00005-of-00006"), "{st}");
    assert!(st.contains("reused from save"), "{st}");

    // get: a tensor stored in slices is assembled; --slice reads a region.
    let name = "model.layers.1.mlp.down_proj.weight";
    let whole = r
        .get_slice(name, &Region::full(&[256, 688]))
        .unwrap()
        .unwrap();
    assert_eq!(raw(&prefix, name, None), whole.data());
    let region = Region::new(vec![0, 100], vec![128, 300]).unwrap();
    let want = r.get_slice(name, &region).unwrap().unwrap();
    assert_eq!(raw(&prefix, name, Some("0:128,100:400")), want.data());
    assert_eq!(
        raw(&prefix, name, Some("5")),
        r.get_slice(name, &Region::new(vec![5, 0], vec![1, 688]).unwrap())
            .unwrap()
            .unwrap()
            .data()
    );
    let j = json(&run(&[&"get", &prefix, &name, &"--slice", &":2,686:"], 0));
    assert_eq!(j["shape"], serde_json::json!([2, 2]));
    // NumPy's basic indexing: an integer drops its axis, negative indices count from the end,
    // bounds clamp, steps (negative too) pick elements; `-2:` needs no `=`.
    let shape_of = |spec: &str| {
        json(&run(
            &[&"get", &prefix, &name, &"--slice", &spec, &"--limit", &"0"],
            0,
        ))["shape"]
            .clone()
    };
    assert_eq!(shape_of("5"), serde_json::json!([688]));
    assert_eq!(shape_of("-1,-2:"), serde_json::json!([2]));
    assert_eq!(shape_of("0:999,:"), serde_json::json!([256, 688]));
    assert_eq!(shape_of("3:1"), serde_json::json!([0, 688]));
    assert_eq!(shape_of("...,0"), serde_json::json!([256]));
    assert_eq!(shape_of("::-100,::344"), serde_json::json!([3, 2]));
    // x[-1, -2:] is the last two bytes of the last row; x[::-1, 0] the first column reversed.
    let last_row = r
        .get_slice(name, &Region::new(vec![255, 0], vec![1, 688]).unwrap())
        .unwrap()
        .unwrap();
    let esz = whole.data().len() / (256 * 688);
    assert_eq!(
        raw(&prefix, name, Some("-1,-2:")),
        &last_row.data()[686 * esz..]
    );
    let column: Vec<u8> = (0..256)
        .rev()
        .flat_map(|i| whole.data()[i * 688 * esz..(i * 688 + 1) * esz].to_vec())
        .collect();
    assert_eq!(raw(&prefix, name, Some("::-1,0")), column);
    for (bad, says) in [
        ("a:b", "'a' is not an integer"),
        ("1,2,3", "too many indices"),
        ("256", "index 256 is out of bounds for axis 0 with size 256"),
        ("-257", "out of bounds"),
        ("::0", "slice step cannot be zero"),
    ] {
        let o = run(&[&"get", &prefix, &name, &"--slice", &bad], 1);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains(&format!("--slice '{bad}'")) && err.contains(says),
            "{err}"
        );
    }

    // convert assembles every tensor into one file; export-tf links the files under a new
    // prefix that TensorFlow's layout reads.
    let out = dir.path().join("one.pdx");
    run(&[&"convert", &prefix, &out], 0);
    let one = Reader::open(&out).unwrap();
    assert_eq!(one.tensor(name).unwrap().data(), whole.data());
    std::fs::create_dir(dir.path().join("tf")).unwrap();
    let tf_prefix = dir.path().join("tf/ckpt");
    run(&[&"export-tf", &prefix, &tf_prefix], 0);
    let ck = TfCheckpoint::open(&tf_prefix).unwrap();
    let TensorData::Bytes(b) = ck.load(name.as_bytes()).unwrap().unwrap().data else {
        panic!()
    };
    assert_eq!(&b[..], whole.data());
}

#[test]
fn merge_shards_commits_a_save_and_leftovers_are_explained_then_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("ck");
    pending(&prefix, false);
    // No checkpoint yet: stat and recover say what is there and what to do.
    for args in [
        vec![&"stat" as &dyn AsRef<std::ffi::OsStr>, &prefix],
        vec![&"recover", &prefix, &dir.path().join("out.pdx")],
    ] {
        let o = run(&args, 1);
        let (so, se) = (stdout(&o), String::from_utf8_lossy(&o.stderr).into_owned());
        assert_eq!(so.matches("pending shard").count(), 2, "{so}");
        assert!(
            se.contains("merge-shards") && se.contains("clean-shards"),
            "{se}"
        );
    }
    let o = run(&[&"merge-shards", &prefix], 0);
    assert!(stdout(&o).contains("2 data files"), "{}", stdout(&o));
    let store = open_any(&prefix).unwrap();
    let TensorData::Bytes(b) = store.load(b"emb").unwrap().unwrap().data else {
        panic!()
    };
    assert_eq!(&b[..], &[1, 1, 1, 2, 2, 2]);
    assert_eq!(raw(&prefix, "emb", Some("1:2,1:3")), [2, 2]);

    // Another save that never merges: stat lists it, clean-shards removes only it.
    pending(&prefix, false);
    let st = json(&run(&[&"stat", &prefix, &"--json"], 0));
    assert_eq!(st["leftovers"].as_array().unwrap().len(), 2);
    let dry = stdout(&run(&[&"clean-shards", &prefix, &"--dry-run"], 0));
    assert_eq!(dry.matches("would remove").count(), 2 + 1, "{dry}");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        5,
        "--dry-run removes nothing"
    );
    run(&[&"clean-shards", &prefix], 0);
    let st = json(&run(&[&"stat", &prefix, &"--json"], 0));
    assert!(st["leftovers"].as_array().unwrap().is_empty());
    run(&[&"verify", &prefix], 0);
}

#[test]
fn hostile_shard_sets_fail_with_one_line_naming_the_tensor_and_the_files() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("bad");
    pending(&prefix, true);
    let o = run(&[&"merge-shards", &prefix], 3);
    let e = String::from_utf8_lossy(&o.stderr).into_owned();
    for want in [
        "tensor emb",
        "is in both",
        "bad.data-00000-of-00002.pending",
        "bad.data-00001-of-00002.pending",
    ] {
        assert!(e.contains(want), "{want:?} not in {e}");
    }
    assert!(!dir.path().join("bad.index").exists());
    // A missing shard.
    let prefix = dir.path().join("miss");
    pending(&prefix, false);
    std::fs::remove_file(dir.path().join("miss.data-00001-of-00002.pending")).unwrap();
    let o = run(&[&"merge-shards", &prefix], 1);
    assert!(String::from_utf8_lossy(&o.stderr).contains("shard 1 of 2"));
    // A committed checkpoint whose data file was replaced: the reader's check (exit 3).
    let prefix = dir.path().join("swap");
    pending(&prefix, false);
    run(&[&"merge-shards", &prefix], 0);
    std::fs::write(dir.path().join("swap.data-00001-of-00002"), b"not the file").unwrap();
    let o = run(&[&"get", &prefix, &"own1"], 3);
    assert!(String::from_utf8_lossy(&o.stderr).contains("swap.data-00001-of-00002"));
    run(&[&"verify", &prefix], 3);
    // A partial tensor is committed only when allowed.
    let prefix = dir.path().join("part");
    let id = SaveId::random();
    let mut w = ShardWriter::create(&prefix, 0, 1, id, quick()).unwrap();
    let r = Region::new(vec![0], vec![2]).unwrap();
    w.add_slice("half", DType::UInt8, &[4], &r, &[1, 2])
        .unwrap();
    w.finish().unwrap();
    let o = run(&[&"merge-shards", &prefix], 3);
    assert!(String::from_utf8_lossy(&o.stderr).contains("tensor half"));
    run(&[&"merge-shards", &prefix, &"--allow-partial", &"half"], 0);
    assert_eq!(raw(&prefix, "half", Some("0:2")), [1, 2]);
    run(&[&"get", &prefix, &"half"], 3);
}

#[test]
fn get_slice_reads_tensorflow_partitioned_tensors() {
    let ckpt = data("tf/partitioned/v1/model.ckpt");
    let store = open_any(&ckpt).unwrap();
    let mut seen = 0;
    for t in store.list().unwrap() {
        if t.shape.len() != 2 {
            continue;
        }
        let name = String::from_utf8(t.name.clone()).unwrap();
        let (rows, cols) = (t.shape[0], t.shape[1]);
        let spec = format!("{}:{},1:{}", rows / 3, rows, cols);
        let region = Region::new(vec![rows / 3, 1], vec![rows - rows / 3, cols - 1]).unwrap();
        let want = store.load_slice(&t.name, &region).unwrap().unwrap();
        let TensorData::Bytes(w) = want.data else {
            panic!()
        };
        assert_eq!(raw(&ckpt, &name, Some(&spec)), &w[..]);
        seen += 1;
    }
    assert!(seen > 0);
}
