//! Fuzz target `paddle_program`: the checks live in `fuzz/checks/paddle_program.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/common.rs"]
mod common;
#[path = "../checks/paddle_program.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
