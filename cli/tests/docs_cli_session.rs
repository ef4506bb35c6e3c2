//! The example session of docs/cli.md is the real output of the commands it shows.
//!
//! Every `$ COMMAND` line of docs/cli.md's ```console block is run, in order, with `sh` in a
//! scratch directory that holds what the page says it holds (`model.safetensors`, a TF2
//! checkpoint directory `train/`), with this build's `paramdex` first on `PATH`. Its standard
//! output and standard error (merged, as a terminal shows them) must match the lines under it:
//!
//! - a line `...` stands for any number of lines (the page trims long listings);
//! - a line ending in `...` matches any line that starts with what precedes the dots;
//! - durations (`1.7ms`, `0.00 s`, `"seconds":0.0001`) match any duration.
//!
//! `PARAMDEX_BLESS_CLI_DOCS=1 cargo test -p paramdex-cli --test docs_cli_session` rewrites the block from a
//! real run instead, keeping its trimming (the same number of lines kept before and after each
//! `...`, the same prefix of each cut line): that is how the examples are regenerated.

mod common;
use common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the session block starts and ends in docs/cli.md (line indexes of the fences).
fn session_block(lines: &[&str]) -> (usize, usize) {
    let start = lines
        .iter()
        .position(|l| l.trim_end() == "```console")
        .expect("docs/cli.md has a ```console block");
    let end = start
        + 1
        + lines[start + 1..]
            .iter()
            .position(|l| l.trim_end() == "```")
            .expect("the ```console block is closed");
    (start, end)
}

/// One `$ COMMAND` of the session and the lines shown under it (blank lines end it).
struct Step {
    command: String,
    expected: Vec<String>,
    /// Blank lines after the output (kept when blessing).
    blank_after: usize,
}

fn parse_steps(block: &[&str]) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in block {
        if let Some(cmd) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: cmd.to_string(),
                expected: Vec::new(),
                blank_after: 0,
            });
        } else {
            let step = steps
                .last_mut()
                .expect("the console block starts with a `$ ` command");
            if line.trim().is_empty() {
                step.blank_after += 1;
            } else {
                assert_eq!(
                    step.blank_after, 0,
                    "output after a blank line under `$ {}`",
                    step.command
                );
                step.expected.push(line.to_string());
            }
        }
    }
    steps
}

/// Replaces every duration with `<T>` so that runs on different machines compare equal.
fn normalize(line: &str) -> String {
    let duration =
        regex::Regex::new(r#"("seconds":\s*)[0-9.eE+-]+|\b[0-9]+(\.[0-9]+)?\s?(ns|µs|us|ms|s)\b"#)
            .expect("a valid pattern");
    duration
        .replace_all(line, |c: &regex::Captures| match c.get(1) {
            Some(key) => format!("{}<T>", key.as_str()),
            None => "<T>".to_string(),
        })
        .into_owned()
}

/// Whether `actual` is what `expected` shows, with its elisions.
fn matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((e, rest)) if e == "..." => (0..=actual.len()).any(|k| matches(rest, &actual[k..])),
        Some((e, rest)) => match actual.split_first() {
            None => false,
            Some((a, arest)) => {
                let (e, a) = (normalize(e), normalize(a));
                let line_ok = match e.strip_suffix("...") {
                    Some(prefix) if !prefix.is_empty() => a.starts_with(prefix),
                    _ => e == a,
                };
                line_ok && matches(rest, arest)
            }
        },
    }
}

/// The real output trimmed the way `expected` trims it.
fn trim_like(expected: &[String], actual: &[String]) -> Vec<String> {
    let Some(cut) = expected.iter().position(|l| l == "...") else {
        return actual
            .iter()
            .zip(expected.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(a, e)| match e.and_then(|e| e.strip_suffix("...")) {
                Some(prefix) if !prefix.is_empty() && a.len() > prefix.len() => {
                    let mut end = prefix.len();
                    while !a.is_char_boundary(end) {
                        end += 1;
                    }
                    format!("{}...", &a[..end])
                }
                _ => a.clone(),
            })
            .collect();
    };
    let tail = expected.len() - cut - 1;
    if actual.len() <= cut + tail {
        return actual.to_vec();
    }
    let mut out = trim_like(&expected[..cut], &actual[..cut]);
    out.push("...".into());
    out.extend(trim_like(
        &expected[cut + 1..],
        &actual[actual.len() - tail..],
    ));
    out
}

/// A scratch directory holding what the session's prose says it holds.
fn scratch() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        data("safetensors/model.safetensors"),
        dir.path().join("model.safetensors"),
    )
    .unwrap();
    let train = dir.path().join("train");
    std::fs::create_dir(&train).unwrap();
    for e in std::fs::read_dir(data("tf/basic/tf2")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), train.join(e.file_name())).unwrap();
    }
    dir
}

fn run_step(dir: &Path, command: &str) -> Vec<String> {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = std::env::join_paths(std::iter::once(bin_dir.to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("exec 2>&1; {command}"))
        .current_dir(dir)
        .env("PATH", path)
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE")
        .output()
        .expect("sh runs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_end().to_string())
        .collect()
}

fn session_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/cli.md")
}

#[test]
fn the_cli_docs_session_is_real_output() {
    let text = std::fs::read_to_string(session_path()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (start, end) = session_block(&lines);
    let steps = parse_steps(&lines[start + 1..end]);
    assert!(steps.len() >= 10, "the session shows the commands");
    let bless = std::env::var_os("PARAMDEX_BLESS_CLI_DOCS").is_some();
    let dir = scratch();
    let mut blessed: Vec<String> = Vec::new();
    let mut wrong = Vec::new();
    for step in &steps {
        let actual = run_step(dir.path(), &step.command);
        if bless {
            blessed.push(format!("$ {}", step.command));
            blessed.extend(trim_like(&step.expected, &actual));
            blessed.extend(std::iter::repeat_n(String::new(), step.blank_after));
        } else if !matches(&step.expected, &actual) {
            wrong.push(format!(
                "$ {}\n--- docs/cli.md shows:\n{}\n--- the command prints:\n{}",
                step.command,
                step.expected.join("\n"),
                actual.join("\n")
            ));
        }
    }
    if bless {
        let mut out: Vec<String> = lines[..=start].iter().map(|s| s.to_string()).collect();
        out.extend(blessed);
        out.extend(lines[end..].iter().map(|s| s.to_string()));
        std::fs::write(session_path(), out.join("\n") + "\n").unwrap();
        return;
    }
    assert!(
        wrong.is_empty(),
        "docs/cli.md's session is not what the commands print (regenerate it with \
         PARAMDEX_BLESS_CLI_DOCS=1 cargo test -p paramdex-cli --test docs_cli_session):\n\n{}",
        wrong.join("\n\n")
    );
}

#[test]
fn elisions_match_what_they_stand_for_and_nothing_else() {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(matches(&s(&["a", "...", "z"]), &s(&["a", "b", "c", "z"])));
    assert!(matches(&s(&["a", "...", "z"]), &s(&["a", "z"])));
    assert!(!matches(&s(&["a", "...", "z"]), &s(&["a", "b"])));
    assert!(!matches(&s(&["a"]), &s(&["a", "b"])));
    assert!(matches(
        &s(&["[{\"x\":1,..."]),
        &s(&["[{\"x\":1,\"y\":2}]"])
    ));
    assert!(!matches(
        &s(&["[{\"x\":2,..."]),
        &s(&["[{\"x\":1,\"y\":2}]"])
    ));
    assert!(matches(
        &s(&["done in 1.7ms: OK", "{\"seconds\":0.5}"]),
        &s(&["done in 12µs: OK", "{\"seconds\":1e-5}"])
    ));
    assert!(!matches(&s(&["41 tensors"]), &s(&["42 tensors"])));
    assert_eq!(
        trim_like(&s(&["a", "...", "z"]), &s(&["a", "b", "c", "y", "z"])),
        s(&["a", "...", "z"])
    );
    assert_eq!(trim_like(&s(&["ab..."]), &s(&["abcdef"])), s(&["ab..."]));
}
