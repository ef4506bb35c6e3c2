//! Fuzz target `pickle`: the checks live in `fuzz/checks/pickle.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/common.rs"]
mod common;
#[path = "../checks/pickle.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
