//! Helpers shared by several fuzz checks. Every crate that includes a check (each fuzz target,
//! and `tests/fuzz_regressions.rs`) declares this file as its root module `common`.
#![allow(dead_code)] // each fuzz target uses only some of these

use std::path::PathBuf;

/// A new directory for the files one check rewrites on every input: in `/dev/shm` when it
/// exists (no disk traffic), kept for the life of the process.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    let base = std::path::Path::new("/dev/shm");
    let dir = if base.is_dir() {
        tempfile::Builder::new().prefix(prefix).tempdir_in(base)
    } else {
        tempfile::Builder::new().prefix(prefix).tempdir()
    }
    .expect("a temporary directory for the fuzzer");
    dir.keep()
}

/// Splits `[len: u32 LE][len bytes][rest]` into its two parts; an input whose length prefix
/// does not fit is all first part.
pub fn split_prefixed(data: &[u8]) -> (&[u8], &[u8]) {
    match data.get(..4) {
        Some(n) => {
            let n = u32::from_le_bytes([n[0], n[1], n[2], n[3]]) as usize;
            match data[4..].len().checked_sub(n) {
                Some(_) => data[4..].split_at(n),
                None => (data, &[][..]),
            }
        }
        None => (data, &[][..]),
    }
}
