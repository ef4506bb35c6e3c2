//! Fuzz target `merge`: the checks live in `fuzz/checks/merge.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/merge.rs"]
mod checks;
#[path = "../checks/common.rs"]
mod common;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
