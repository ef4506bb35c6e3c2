//! Fuzz target `gguf`: the checks live in `fuzz/checks/gguf.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/common.rs"]
mod common;
#[path = "../checks/gguf.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
