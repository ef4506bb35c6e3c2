//! A TensorFlow checkpoint opened over arbitrary `.index` bytes (and arbitrary bytes for its
//! first data shard): open, list, load every listed tensor and some unlisted names, verify.
//!
//! Input: `[index_len: u32 LE][index bytes][data shard 0 bytes]`; an input whose length prefix
//! does not fit is all index. The files live in a per-process directory (in /dev/shm when it
//! exists) and are rewritten on every run.

use std::path::PathBuf;
use std::sync::OnceLock;

use paramdex::interop::tf::{data_path, index_path, TfCheckpoint};
use paramdex::interop::TensorStore;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| crate::common::scratch_dir("pdx-fuzz-tf"))
}

/// Runs the checks on one input (the body of the fuzz target).
pub fn check(data: &[u8]) {
    let (index, shard) = crate::common::split_prefixed(data);
    let prefix = dir().join("ck");
    std::fs::write(index_path(&prefix), index).expect("write index");
    std::fs::write(data_path(&prefix, 0, 1), shard).expect("write shard");
    let Ok(ck) = TfCheckpoint::open(&prefix) else {
        return;
    };
    if ck.num_shards() > 1 {
        // Shards 1.. do not exist: reading them must fail cleanly.
        let _ = std::fs::write(data_path(&prefix, 0, ck.num_shards()), shard);
    }
    let listed = ck.list();
    if let Ok(infos) = &listed {
        for (i, info) in infos.iter().enumerate().take(100) {
            if i > 0 {
                assert!(infos[i - 1].name < info.name, "list not in name order");
            }
            match ck.load(&info.name) {
                Ok(Some(t)) => {
                    assert_eq!(t.info.name, info.name);
                    assert_eq!(t.info.shape, info.shape);
                }
                Ok(None) => panic!("a listed tensor is not found by load"),
                Err(_) => {}
            }
        }
    }
    for probe in [&b"a"[..], b"w", b"\xff", &index[..index.len().min(5)]] {
        let _ = ck.load(probe);
    }
    let _ = ck.verify(1);
}
