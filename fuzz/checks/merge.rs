//! `merge_shards` on hostile files (SPEC.md 12.3, 12.5): the files of one prefix directory
//! (pending shards, references files of an incremental save, reused data files linked from a
//! base, a previous index and final data files), taken from the input, written to a scratch
//! directory and merged. This drives the index-only readers of shards and references files
//! (`read_shard_index`, `read_references`) and the merge's checks (`check_shard`,
//! `resolve_references`, `merge_entries`), then the reader and `verify` of whatever the merge
//! accepted.
//!
//! Input: `[count: u8]`, then `count` files (at most [`MAX_FILES`]), each `[kind: u8][len: u16
//! LE][len bytes]`; a truncated last file keeps the bytes there are. `kind & 7` names the file
//! (0 and 7: `ckpt.data-k-of-N.pending`; 1: `ckpt.refs-k-of-N.pending`; 2 and 6:
//! `ckpt.reused-<BASE_ID>-k-of-N`; 3: `ckpt.index`; 4: `ckpt.data-k-of-N`; 5:
//! `ckpt.reused-<SAVE_ID>-k-of-N`, a link named for the save being merged), `(kind >> 3) & 3` is
//! k and `(kind >> 5) + 1` is N. A later file of the same name replaces an earlier one. The
//! seeds (`fuzz/examples/gen_seeds.rs`) are real pending saves of ids [`BASE_ID`] and
//! [`SAVE_ID`].
//!
//! Invariants beyond "no panic, no hang, bounded memory":
//! - when the merge succeeds, the checkpoint opens; `verify` passes or finds damaged records
//!   (`Error::Corrupt`, `ChecksumMismatch`, `LimitExceeded`, `UnknownDType`,
//!   `UnsupportedVersion`: the merge never reads records, so it cannot see them), never a data
//!   file missing, of another length or identity; and when every data file verifies alone (as
//!   a native file), the checkpoint verifies (its index agrees with its data files); when
//!   `verify` passes, every tensor the index lists reads (`get`, or `get_slice` of its whole
//!   region for a tensor stored in slices) with the dtype, shape and size of its
//!   entry; reading never fails otherwise than on damaged data;
//! - when the merge fails other than on I/O, it changed nothing: the directory holds exactly
//!   the files written, with their bytes (no `ckpt.index` created, no file renamed or removed,
//!   no temporary file left).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use paramdex::raw::entry::IndexEntry;
use paramdex::raw::record::MAX_RANK;
use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{Error, MergeShardsOptions, Reader, Region, SaveId, VerifyOptions};

/// The id of the base save whose data files the seeds' incremental saves reuse.
pub const BASE_ID: SaveId = SaveId([0xb0; 16]);
/// The id of the seeds' pending saves.
pub const SAVE_ID: SaveId = SaveId([0x5e; 16]);
/// At most this many files per input.
pub const MAX_FILES: usize = 16;
/// At most this many bytes of files per input.
const MAX_BYTES: usize = 1 << 20;

/// The file name (in the prefix's directory, prefix `ckpt`) a kind byte selects.
pub fn file_name(kind: u8) -> String {
    let k = (kind >> 3) & 3;
    let n = u32::from(kind >> 5) + 1;
    match kind & 7 {
        0 | 7 => format!("ckpt.data-{k:05}-of-{n:05}.pending"),
        1 => format!("ckpt.refs-{k:05}-of-{n:05}.pending"),
        2 | 6 => format!("ckpt.reused-{BASE_ID}-{k:05}-of-{n:05}"),
        3 => "ckpt.index".to_string(),
        4 => format!("ckpt.data-{k:05}-of-{n:05}"),
        _ => format!("ckpt.reused-{SAVE_ID}-{k:05}-of-{n:05}"),
    }
}

/// The kind byte of a file name, when it is one [`file_name`] makes (used by the seed
/// generator to pack real files).
#[allow(dead_code)] // the seed generator's
pub fn kind_of(name: &str) -> Option<u8> {
    (0..=255u8).find(|&k| file_name(k) == name)
}

/// Packs files (kind, bytes) in the input format.
#[allow(dead_code)] // the seed generator's
pub fn pack(files: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = vec![files.len() as u8];
    for (kind, bytes) in files {
        out.push(*kind);
        out.extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        out.extend_from_slice(bytes);
    }
    out
}

/// The files an input describes, by name (a later one of a name replaces an earlier one).
fn unpack(data: &[u8]) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let Some((&count, mut rest)) = data.split_first() else {
        return files;
    };
    let mut total = 0usize;
    for _ in 0..usize::from(count).min(MAX_FILES) {
        let Some((&kind, r)) = rest.split_first() else {
            break;
        };
        let len = match r.get(..2) {
            Some(l) => usize::from(u16::from_le_bytes([l[0], l[1]])),
            None => break,
        };
        let r = &r[2..];
        let (bytes, r) = r.split_at(len.min(r.len()));
        rest = r;
        total += bytes.len();
        if total > MAX_BYTES {
            break;
        }
        files.insert(file_name(kind), bytes.to_vec());
    }
    files
}

/// The scratch directory's files: name and bytes.
fn listing(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .expect("list the scratch directory")
        .map(|e| {
            let p = e.expect("a directory entry").path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap_or_default();
            (name, bytes)
        })
        .collect()
}

/// An error about bytes the merge never reads (a data file's records: record headers, data,
/// their checksums), not about the files it checks (their presence, length, identity, index).
fn damaged(e: &Error) -> bool {
    matches!(
        e,
        Error::Corrupt { .. }
            | Error::ChecksumMismatch { .. }
            | Error::LimitExceeded { .. }
            | Error::UnknownDType { .. }
            | Error::UnsupportedVersion { .. }
    )
}

/// Verification on the calling thread: threads that exit while the fuzzer runs leave glibc's
/// thread-local destructor records behind, which LeakSanitizer reports as leaks.
fn one_thread() -> VerifyOptions<'static> {
    VerifyOptions {
        load: None,
        threads: 1,
        progress: None,
    }
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    static DIR: OnceLock<Mutex<PathBuf>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| Mutex::new(crate::common::scratch_dir("paramdex-fuzz-merge")))
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    for e in std::fs::read_dir(&*dir).expect("list the scratch directory") {
        let p = e.expect("a directory entry").path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).expect("clear the scratch directory");
        } else {
            std::fs::remove_file(&p).expect("clear the scratch directory");
        }
    }
    let files = unpack(data);
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).expect("write an input file");
    }
    let prefix = dir.join("ckpt");
    let opts = MergeShardsOptions {
        no_sync: true,
        ..Default::default()
    };
    let report = match paramdex::merge_shards(&prefix, &opts) {
        Ok(r) => r,
        Err(Error::Io { .. }) => return,
        Err(e) => {
            let after = listing(&dir);
            assert!(
                after == files,
                "the merge failed ({e}) but changed the directory: {:?} became {:?}",
                files.keys().collect::<Vec<_>>(),
                after.keys().collect::<Vec<_>>()
            );
            return;
        }
    };
    let r = match Reader::open(&prefix) {
        Ok(r) => r,
        Err(e) => panic!("the merge succeeded ({report:?}) but the checkpoint does not open: {e}"),
    };
    // Whether every data file verifies alone (as a native file): then the checkpoint must.
    let files_verify = report.data_paths.iter().all(|p| {
        Reader::open(p)
            .and_then(|f| f.verify_with(one_thread()))
            .is_ok()
    });
    let verified = match r.verify_with(one_thread()) {
        Ok(_) => true,
        Err(e) if damaged(&e) && !files_verify => false,
        Err(e) => panic!(
            "the merge succeeded but verify fails (every data file verifies alone: \
             {files_verify}): {e}"
        ),
    };
    // Every tensor the index lists, by its entry.
    let index = std::fs::read(&report.index_path).expect("read the index the merge wrote");
    let table = Table::open(&index, TableReadOptions::default()).expect("the merged index");
    let mut it = table.iter();
    let mut seen = 0;
    while it.next().expect("iterate the merged index") && seen < 256 {
        let (key, value) = (it.key(), it.value());
        if key.is_empty() || key[0] == 0 {
            continue;
        }
        seen += 1;
        let e = IndexEntry::decode(value, it.block_offset(), MAX_RANK)
            .expect("an entry of the merged index");
        let shape = e.shape.to_vec();
        let got = if e.num_slices != 0 {
            r.get_slice(key, &Region::full(&shape))
                .map(|s| s.map(|s| (s.dtype(), s.shape().to_vec(), s.data().len() as u64)))
        } else {
            r.get(key)
                .map(|t| t.map(|t| (t.dtype(), t.shape().to_vec(), t.data().len() as u64)))
        };
        match got {
            Ok(Some((dtype, got_shape, len))) => {
                assert_eq!(Some(dtype), e.dtype(), "dtype of {key:?}");
                assert_eq!(got_shape, shape, "shape of {key:?}");
                let want = paramdex::raw::record::data_len(dtype, &shape).expect("a stored size");
                assert_eq!(len, want, "data size of {key:?}");
            }
            Ok(None) => panic!("tensor {key:?} is in the index but not found"),
            Err(e) if !verified && damaged(&e) => {}
            Err(e) => panic!("tensor {key:?} does not read (verified: {verified}): {e}"),
        }
    }
}
