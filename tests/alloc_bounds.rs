//! Hostile pickles are read in memory proportional to their size (issue 43): every seed and
//! every past finding of the `pickle` fuzz target replayed through the fuzz check under the
//! fuzz target's own allocation bound (`fuzz/checks/pickle.rs`, `alloc_bound`), and the two
//! slow units the fuzzer kept (`fuzz/regressions/pickle/pickle-slow-*.bin`: a few hundred
//! bytes of `DUP`s of one object nested under `MARK`/`TUPLE`, millions of paths to one value)
//! opened as a `torch.save` file, a Paddle `.pdparams` and a DCP `.metadata`, each refused
//! within a few MB. Before the fix each took seconds and hundreds of MB.
//!
//! The other readers that build values from counts and references get the same check: a zip
//! central directory of 20 000 entries all pointing at one local header (a `torch.save`
//! file), and a Hugging Face index of 100 000 weight-map entries naming one shard; each
//! allocates a small multiple of its size.
//!
//! Measured with a counting global allocator (`fuzz/checks/alloc.rs`: every byte allocated,
//! freed or not), never a clock; this file holds a single test so that no other test thread
//! allocates while it counts.

use std::path::{Path, PathBuf};

use paramdex::interop::paddle::dygraph::DygraphStore;
use paramdex::interop::torch::dcp::DcpStore;
use paramdex::interop::torch::TorchStore;
use paramdex::interop::{open_any, TensorStore};
use paramdex::{Error, PickleProblem};

#[path = "../fuzz/checks/alloc.rs"]
mod alloc;
#[path = "../fuzz/checks/pickle.rs"]
mod pickle;
#[allow(dead_code)]
#[path = "support/torchzip.rs"]
mod torchzip;

#[global_allocator]
static COUNTING: alloc::Counting = alloc::Counting::new();

/// What one of the findings may allocate when a reader opens it: a few MB, whatever form it
/// takes (the readers' fixed floors: 1 MiB of records, 64 KiB of names per walk).
const FINDING_BOUND: u64 = 4 << 20;

fn fuzz_dir(kind: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz")
        .join(kind)
        .join("pickle")
}

fn inputs(kind: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(fuzz_dir(kind))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    v.sort();
    v
}

/// Bytes allocated by `f`.
fn allocated_by<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = COUNTING.allocated();
    let out = f();
    (out, COUNTING.allocated() - before)
}

/// `r` is a refusal for a bound (not a panic, not a parse that went through).
fn assert_limit<T: std::fmt::Debug>(r: Result<T, Error>, what: &str) {
    match r {
        Err(Error::Pickle {
            problem: PickleProblem::Limit,
            ..
        }) => {}
        other => panic!("{what}: not refused for a bound: {other:?}"),
    }
}

fn check_finding(path: &Path, dir: &Path) {
    let data = std::fs::read(path).unwrap();
    let name = path.file_name().unwrap().to_string_lossy().into_owned();

    // As the body of a torch.save zip.
    let pt = dir.join(format!("{name}.pt"));
    std::fs::write(
        &pt,
        torchzip::zip(&[
            ("archive/data.pkl", &data),
            ("archive/byteorder", b"little"),
        ]),
    )
    .unwrap();
    let (r, used) = allocated_by(|| TorchStore::open(&pt));
    assert_limit(r, &format!("{name} as a torch.save file"));
    eprintln!("{name} as torch.save: {used} bytes allocated");
    assert!(used <= FINDING_BOUND, "{name} as torch.save: {used} bytes");

    // As a Paddle .pdparams (a bare pickle).
    let pd = dir.join(format!("{name}.pdparams"));
    std::fs::write(&pd, &data).unwrap();
    let (r, used) = allocated_by(|| DygraphStore::open(&pd));
    assert_limit(r, &format!("{name} as a .pdparams"));
    eprintln!("{name} as .pdparams: {used} bytes allocated");
    assert!(used <= FINDING_BOUND, "{name} as .pdparams: {used} bytes");

    // As a DCP .metadata: the walk of state_dict_metadata is what reads it; refused as no
    // Metadata, never walked through its paths.
    let dcp = dir.join(format!("{name}.dcp"));
    std::fs::create_dir_all(&dcp).unwrap();
    std::fs::write(dcp.join(".metadata"), &data).unwrap();
    let (r, used) = allocated_by(|| DcpStore::open(&dcp));
    assert!(r.is_err(), "{name} as a DCP .metadata opened");
    eprintln!("{name} as DCP .metadata: {used} bytes allocated");
    assert!(
        used <= FINDING_BOUND,
        "{name} as DCP .metadata: {used} bytes"
    );

    // Through the fuzz check, under its own bound, and under the tighter one.
    let (_, used) = allocated_by(|| pickle::check_bounded(&data, &|| COUNTING.allocated()));
    eprintln!("{name} through the fuzz check: {used} bytes allocated");
    assert!(
        used <= 4 * FINDING_BOUND,
        "{name} through the fuzz check: {used} bytes"
    );
}

/// Most bytes a reader of counts and references (a zip directory, a JSON index, a DCP
/// `.metadata`) may allocate in all per byte of its input, plus [`FINDING_BOUND`]: its records
/// are copies of what the input holds, at most 64 bytes of them per byte
/// (`pickle::RECORD_BYTES_PER_BYTE`), and the messages and `Vec`s are built through
/// temporaries that the count includes (each record's bytes about three times over).
const PER_BYTE: u64 = 256;

/// A zip whose central directory holds `n` entries `archive/data/K`, all pointing at the local
/// header of one stored `archive/data.pkl` (an empty dict): each entry is 46 bytes of the
/// directory and its name, never a copy of the shared data.
fn zip_sharing_one_header(n: usize) -> Vec<u8> {
    let pkl = b"\x80\x02}q\x00.";
    let name = b"archive/data.pkl";
    let crc = torchzip::crc32(pkl);
    let mut out = Vec::new();
    out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
    out.extend_from_slice(&[20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(pkl.len() as u32).to_le_bytes());
    out.extend_from_slice(&(pkl.len() as u32).to_le_bytes());
    out.extend_from_slice(&(name.len() as u16).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(name);
    out.extend_from_slice(pkl);
    let cd_at = out.len();
    for i in 0..=n {
        let entry = if i == 0 {
            name.to_vec()
        } else {
            format!("archive/data/{i}").into_bytes()
        };
        out.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        out.extend_from_slice(&[20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        out.extend_from_slice(&crc.to_le_bytes());
        out.extend_from_slice(&(pkl.len() as u32).to_le_bytes());
        out.extend_from_slice(&(pkl.len() as u32).to_le_bytes());
        out.extend_from_slice(&(entry.len() as u16).to_le_bytes());
        out.extend_from_slice(&[0; 12]);
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&entry);
    }
    let cd_len = out.len() - cd_at;
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&((n + 1) as u16).to_le_bytes());
    out.extend_from_slice(&((n + 1) as u16).to_le_bytes());
    out.extend_from_slice(&(cd_len as u32).to_le_bytes());
    out.extend_from_slice(&(cd_at as u32).to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

fn check_counted_readers(dir: &Path) {
    let zip = zip_sharing_one_header(20_000);
    let pt = dir.join("shared_header.pt");
    std::fs::write(&pt, &zip).unwrap();
    let (r, used) = allocated_by(|| TorchStore::open(&pt));
    eprintln!("a {}-byte zip directory: {used} bytes allocated", zip.len());
    let store = r.expect("a zip of one data.pkl and unreferenced entries opens");
    assert_eq!(store.list().unwrap().len(), 0);
    let bound = PER_BYTE * zip.len() as u64 + FINDING_BOUND;
    assert!(
        used <= bound,
        "a {}-byte zip directory: {used} bytes (bound {bound})",
        zip.len()
    );

    let hf = dir.join("hf");
    std::fs::create_dir_all(&hf).unwrap();
    let mut index = String::from("{\"metadata\": {\"total_size\": 1}, \"weight_map\": {");
    for i in 0..100_000 {
        if i > 0 {
            index.push(',');
        }
        index.push_str(&format!("\"layers.{i}.w\": \"model-1.safetensors\""));
    }
    index.push_str("}}");
    std::fs::write(hf.join("model.safetensors.index.json"), &index).unwrap();
    let (r, used) = allocated_by(|| open_any(&hf));
    eprintln!("a {}-byte HF index: {used} bytes allocated", index.len());
    assert!(r.is_err(), "an index whose one shard is missing opened");
    let bound = PER_BYTE * index.len() as u64 + FINDING_BOUND;
    assert!(
        used <= bound,
        "a {}-byte Hugging Face index: {used} bytes (bound {bound})",
        index.len()
    );
}

/// A DCP `.metadata` whose `state_dict_metadata` holds one `BytesStorageMetadata` under one
/// 50 000-byte name `n` times (memo references): each item's record copies the name and
/// names it in its message, 100 KB a reference, 200 MB in all from 58 KB.
fn dcp_sharing_one_long_name(n: usize) -> Vec<u8> {
    let m = "torch.distributed.checkpoint.metadata";
    let mut p = b"\x80\x02".to_vec();
    p.extend_from_slice(format!("c{m}\nMetadata\n)").as_bytes());
    p.extend_from_slice(b"\x81}(");
    let key = "state_dict_metadata";
    p.push(b'X');
    p.extend_from_slice(&(key.len() as u32).to_le_bytes());
    p.extend_from_slice(key.as_bytes());
    p.extend_from_slice(b"}(X");
    p.extend_from_slice(&50_000u32.to_le_bytes());
    p.extend(std::iter::repeat_n(b'a', 50_000));
    p.extend_from_slice(format!("q\x00c{m}\nBytesStorageMetadata\n)").as_bytes());
    p.extend_from_slice(b"\x81q\x01");
    for _ in 1..n {
        p.extend_from_slice(b"h\x00h\x01");
    }
    p.push(b'u');
    let key = "storage_data";
    p.push(b'X');
    p.extend_from_slice(&(key.len() as u32).to_le_bytes());
    p.extend_from_slice(key.as_bytes());
    p.extend_from_slice(b"}ub.");
    p
}

/// A pickled `str`.
fn pstr(p: &mut Vec<u8>, s: &str) {
    p.push(b'X');
    p.extend_from_slice(&(s.len() as u32).to_le_bytes());
    p.extend_from_slice(s.as_bytes());
}

/// A DCP `.metadata` whose one `storage_data` key is a `MetadataIndex` with `junk` fields
/// before its `fqn`: a dataclass field is looked for among the first 64 only, so a state
/// shared by many keys cannot make each lookup scan it whole.
fn dcp_with_fields_before_fqn(junk: usize) -> Vec<u8> {
    let m = "torch.distributed.checkpoint.metadata";
    let mut p = b"\x80\x02".to_vec();
    p.extend_from_slice(format!("c{m}\nMetadata\n)").as_bytes());
    p.extend_from_slice(b"\x81}(");
    pstr(&mut p, "state_dict_metadata");
    p.push(b'}');
    pstr(&mut p, "storage_data");
    p.extend_from_slice(b"}(");
    p.extend_from_slice(format!("c{m}\nMetadataIndex\n)").as_bytes());
    p.extend_from_slice(b"\x81}(");
    for i in 0..junk {
        pstr(&mut p, &format!("k{i}"));
        p.push(b'N');
    }
    pstr(&mut p, "fqn");
    pstr(&mut p, "x");
    p.extend_from_slice(b"ubNuub.");
    p
}

fn check_dcp_records(dir: &Path) {
    for (junk, found) in [(10, true), (100, false)] {
        let e = DcpStore::from_metadata_bytes(&dcp_with_fields_before_fqn(junk)).unwrap_err();
        assert_eq!(
            !e.to_string().contains("without a str fqn"),
            found,
            "{junk} fields before fqn: {e}"
        );
    }
    let meta = dcp_sharing_one_long_name(2000);
    let dcp = dir.join("shared_name.dcp");
    std::fs::create_dir_all(&dcp).unwrap();
    std::fs::write(dcp.join(".metadata"), &meta).unwrap();
    let (r, used) = allocated_by(|| DcpStore::open(&dcp));
    eprintln!(
        "a {}-byte DCP .metadata: {used} bytes allocated",
        meta.len()
    );
    assert_limit(r, "a DCP .metadata sharing one long name");
    let bound = PER_BYTE * meta.len() as u64 + FINDING_BOUND;
    assert!(
        used <= bound,
        "a {}-byte DCP .metadata: {used} bytes (bound {bound})",
        meta.len()
    );
    // The same with two references is within its budget: refused for its duplicate name.
    let meta = dcp_sharing_one_long_name(2);
    std::fs::write(dcp.join(".metadata"), &meta).unwrap();
    let e = DcpStore::open(&dcp).unwrap_err();
    assert!(e.to_string().contains("both named"), "{e}");
}

fn run() {
    let dir = tempfile::tempdir().unwrap();
    check_counted_readers(dir.path());
    check_dcp_records(dir.path());
    let findings: Vec<PathBuf> = inputs("regressions")
        .into_iter()
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("pickle-slow-"))
        })
        .collect();
    assert_eq!(findings.len(), 2, "the two slow units of issue 43");
    for f in &findings {
        check_finding(f, dir.path());
    }
    // Every seed and regression under the fuzz target's bound.
    let mut n = 0;
    for kind in ["seeds", "regressions"] {
        for path in inputs(kind) {
            let data = std::fs::read(&path).unwrap();
            let before = COUNTING.allocated();
            let outcome =
                std::panic::catch_unwind(|| pickle::check_bounded(&data, &|| COUNTING.allocated()));
            let used = COUNTING.allocated() - before;
            eprintln!(
                "{}: {} bytes, {used} bytes allocated by the fuzz check",
                path.display(),
                data.len()
            );
            assert!(outcome.is_ok(), "{} passed its bound", path.display());
            n += 1;
        }
    }
    assert!(n > findings.len());
}

#[test]
fn hostile_pickles_allocate_in_proportion_to_their_size() {
    // On a thread of its own with room for the walks' recursion (nesting up to MAX_DEPTH).
    std::thread::Builder::new()
        .stack_size(16 << 20)
        .spawn(run)
        .unwrap()
        .join()
        .unwrap();
}
