//! Fuzz target `lossless`: the checks live in `fuzz/checks/lossless.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/lossless.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
