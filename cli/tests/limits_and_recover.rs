//! Issue 13, items 2, 3 and 5: `recover` on inputs that are not paramdex files, usage errors
//! kept whole, limits checked before anything is written, and progress bars on a terminal only.

mod common;
use common::*;

use std::path::Path;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

// ---- usage errors (exit 2): clap's text, whole ----

#[test]
fn a_missing_argument_is_named_with_the_usage_line() {
    let o = run(&[&"convert"], 2);
    let e = stderr(&o);
    assert!(e.contains("<SRC>") && e.contains("<DST>"), "{e}");
    assert!(e.contains("Usage: paramdex convert"), "{e}");
    assert!(e.lines().count() > 1, "{e}");
    assert!(!e.contains("paramdex: error:"), "{e}");
}

#[test]
fn an_invalid_value_lists_the_valid_ones() {
    let o = run(&[&"convert", &"a", &"b", &"--to", &"tff"], 2);
    let e = stderr(&o);
    assert!(e.contains("'tff'"), "{e}");
    for v in ["paramdex", "tf", "paddle", "paddle-tensor", "safetensors"] {
        assert!(e.contains(v), "{v} missing: {e}");
    }
    assert!(e.contains("tip:") || e.contains("possible values"), "{e}");
}

#[test]
fn a_misspelt_command_gets_a_suggestion() {
    let o = run(&[&"convrt", &"a", &"b"], 2);
    let e = stderr(&o);
    assert!(e.contains("'convrt'") && e.contains("convert"), "{e}");
    assert!(e.contains("tip:"), "{e}");
    let o = run(&[&"ls", &"x", &"--jsn"], 2);
    let e = stderr(&o);
    assert!(e.contains("--json"), "{e}");
}
