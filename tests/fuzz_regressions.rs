//! Replays the checks of every cargo-fuzz target (`fuzz/checks/<target>.rs`, the same code the
//! fuzzer runs) on the target's checked-in seeds (`fuzz/seeds/<target>/`) and on every input a
//! fuzzer ever found a bug with (`fuzz/regressions/<target>/`), so a fixed bug stays fixed
//! without nightly Rust or cargo-fuzz. A failing check panics with the input's path.

use std::path::{Path, PathBuf};

#[path = "../fuzz/checks/common.rs"]
mod common;

#[path = "../fuzz/checks/block.rs"]
mod block;
#[path = "../fuzz/checks/gguf.rs"]
mod gguf;
#[path = "../fuzz/checks/lossless.rs"]
mod lossless;
#[path = "../fuzz/checks/merge.rs"]
mod merge;
#[path = "../fuzz/checks/paddle_program.rs"]
mod paddle_program;
#[path = "../fuzz/checks/pickle.rs"]
mod pickle;
#[path = "../fuzz/checks/reader.rs"]
mod reader;
#[path = "../fuzz/checks/record.rs"]
mod record;
#[path = "../fuzz/checks/slices.rs"]
mod slices;
#[path = "../fuzz/checks/table.rs"]
mod table;
#[path = "../fuzz/checks/tf_bundle.rs"]
mod tf_bundle;
#[path = "../fuzz/checks/writer_ops.rs"]
mod writer_ops;

/// Runs `check` on every file of `fuzz/seeds/<target>` and `fuzz/regressions/<target>`;
/// returns how many inputs ran. Each input runs on its own thread so that a failure names it.
fn replay(target: &str, check: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut inputs: Vec<PathBuf> = Vec::new();
    for kind in ["seeds", "regressions"] {
        let Ok(dir) = std::fs::read_dir(root.join(kind).join(target)) else {
            continue;
        };
        for entry in dir {
            let path = entry.expect("read a fuzz input directory entry").path();
            if path.is_file() {
                inputs.push(path);
            }
        }
    }
    inputs.sort();
    for path in &inputs {
        let data = std::fs::read(path).expect("read a fuzz input");
        let outcome = std::thread::Builder::new()
            .stack_size(16 << 20)
            .spawn(move || check(&data))
            .expect("spawn a thread")
            .join();
        assert!(
            outcome.is_ok(),
            "fuzz check {target} failed on {}",
            path.display()
        );
    }
    inputs.len()
}

#[test]
fn block_inputs() {
    assert!(replay("block", block::check) > 0, "no seeds for block");
}

#[test]
fn merge_inputs() {
    assert!(replay("merge", merge::check) > 0);
}

#[test]
fn paddle_program_inputs() {
    assert!(replay("paddle_program", paddle_program::check) > 0);
}

#[test]
fn pickle_inputs() {
    // The allocation bound the fuzz target asserts is checked by tests/alloc_bounds.rs,
    // alone in its binary (these tests run in parallel and would count each other's bytes).
    assert!(
        replay("pickle", |data| {
            pickle::check(data);
        }) > 0
    );
}

#[test]
fn reader_inputs() {
    assert!(replay("reader", reader::check) > 0);
}

#[test]
fn lossless_inputs() {
    assert!(replay("lossless", lossless::check) > 0);
}

#[test]
fn record_inputs() {
    assert!(replay("record", record::check) > 0);
}

#[test]
fn gguf_inputs() {
    assert!(replay("gguf", gguf::check) > 0);
}

#[test]
fn slices_inputs() {
    assert!(replay("slices", slices::check) > 0);
}

#[test]
fn table_inputs() {
    assert!(replay("table", table::check) > 0);
}

#[test]
fn tf_bundle_inputs() {
    assert!(replay("tf_bundle", tf_bundle::check) > 0);
}

#[test]
fn writer_ops_inputs() {
    assert!(replay("writer_ops", writer_ops::check) > 0);
}
