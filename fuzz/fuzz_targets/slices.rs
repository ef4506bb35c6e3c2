//! Fuzz target `slices`: the checks live in `fuzz/checks/slices.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/slices.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
