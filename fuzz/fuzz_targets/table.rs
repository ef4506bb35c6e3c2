//! Fuzz target `table`: the checks live in `fuzz/checks/table.rs`, shared with
//! `tests/fuzz_regressions.rs`, which replays every seed and every past finding.
#![no_main]

#[path = "../checks/common.rs"]
mod common;
#[path = "../checks/table.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::check(data));
