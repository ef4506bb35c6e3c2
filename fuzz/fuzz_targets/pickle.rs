//! Fuzz target `pickle`: the checks live in `fuzz/checks/pickle.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding, and with
//! `tests/alloc_bounds.rs`, which replays them under the same allocation bound. Every byte
//! allocated while the checks run is counted (`fuzz/checks/alloc.rs`): an input that makes
//! them allocate more than a fixed multiple of its size (`checks::alloc_bound`) is a finding,
//! as a crash is (libFuzzer's own allocations go through malloc, not Rust's allocator).
#![no_main]

#[path = "../checks/alloc.rs"]
mod alloc;
#[path = "../checks/pickle.rs"]
mod checks;
#[path = "../checks/common.rs"]
mod common;

#[global_allocator]
static COUNTING: alloc::Counting = alloc::Counting::new();

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    checks::check_bounded(data, &|| COUNTING.allocated());
});
