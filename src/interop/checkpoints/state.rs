//! TensorFlow's `checkpoint` state file: a `CheckpointState` protobuf in text format, the
//! pointer to a directory's latest checkpoint (docs/checkpoints.md).
//!
//! ```text
//! model_checkpoint_path: "ckpt-3"
//! all_model_checkpoint_paths: "ckpt-1"
//! all_model_checkpoint_paths: "ckpt-3"
//! all_model_checkpoint_timestamps: 1700000000.5
//! all_model_checkpoint_timestamps: 1700000100.25
//! last_preserved_timestamp: 1699999999.0
//! ```
//!
//! Read: at most [`MAX_STATE_BYTES`] bytes, one field per line (as TensorFlow's text format
//! printer writes them), unknown fields skipped, a value that does not parse an error (never a
//! panic), at most [`MAX_STATE_ENTRIES`] paths. Written: the same form, to a temporary file that
//! is fsynced and renamed over the old one, then the directory fsynced.

use std::path::Path;

use crate::error::{CheckpointProblem, Error, Result};

/// The state file's name in its directory.
pub const STATE_FILE: &str = "checkpoint";

/// Most bytes of a state file read.
pub const MAX_STATE_BYTES: u64 = 4 << 20;

/// Most checkpoint paths (and timestamps) a state file may list.
pub const MAX_STATE_ENTRIES: usize = 100_000;

/// TensorFlow's `CheckpointState`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointState {
    /// The latest checkpoint's prefix, relative to the directory (or absolute).
    pub model_checkpoint_path: String,
    /// Every checkpoint kept, oldest first (the latest last).
    pub all_model_checkpoint_paths: Vec<String>,
    /// Seconds since the Unix epoch at which each of those was saved (same order; TensorFlow
    /// writes one per path, older files may have none).
    pub all_model_checkpoint_timestamps: Vec<f64>,
    /// TensorFlow's `keep_checkpoint_every_n_hours` bookkeeping, kept as read.
    pub last_preserved_timestamp: f64,
}

impl CheckpointState {
    /// Parses the text of a state file; `dir` names it in errors.
    pub fn parse(text: &[u8], dir: &Path) -> Result<CheckpointState> {
        let bad = |line: usize, what: &str| Error::Checkpoint {
            dir: dir.display().to_string(),
            problem: CheckpointProblem::StateFile,
            detail: format!("its `{STATE_FILE}` file, line {line}: {what}"),
        };
        let text = std::str::from_utf8(text).map_err(|_| bad(0, "not UTF-8 text"))?;
        let mut st = CheckpointState::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((field, value)) = line.split_once(':') else {
                return Err(bad(i + 1, "not `field: value`"));
            };
            let (field, value) = (field.trim(), value.trim());
            let string = || parse_string(value).ok_or_else(|| bad(i + 1, "not a quoted string"));
            let number = || {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| bad(i + 1, "not a finite number"))
            };
            let full = |n: usize| {
                crate::error::ensure_within(
                    "checkpoints listed in a state file",
                    n + 1,
                    MAX_STATE_ENTRIES,
                    None,
                )
            };
            match field {
                "model_checkpoint_path" => st.model_checkpoint_path = string()?,
                "all_model_checkpoint_paths" => {
                    full(st.all_model_checkpoint_paths.len())?;
                    st.all_model_checkpoint_paths.push(string()?);
                }
                "all_model_checkpoint_timestamps" => {
                    full(st.all_model_checkpoint_timestamps.len())?;
                    st.all_model_checkpoint_timestamps.push(number()?);
                }
                "last_preserved_timestamp" => st.last_preserved_timestamp = number()?,
                // A field of a later TensorFlow: skipped, as its text-format parser would not.
                _ => {}
            }
        }
        Ok(st)
    }

    /// Reads `dir/checkpoint`; `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<CheckpointState>> {
        use std::io::Read;
        let path = dir.join(STATE_FILE);
        let f = match std::fs::File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("reading {}", path.display()), e)),
        };
        let mut text = Vec::new();
        f.take(MAX_STATE_BYTES + 1)
            .read_to_end(&mut text)
            .map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        crate::error::ensure_within("state file bytes", text.len(), MAX_STATE_BYTES, None)?;
        Self::parse(&text, dir).map(Some)
    }

    /// The text TensorFlow's printer writes for this state.
    pub fn to_text(&self) -> String {
        let mut s = format!(
            "model_checkpoint_path: {}\n",
            quote(&self.model_checkpoint_path)
        );
        for p in &self.all_model_checkpoint_paths {
            s += &format!("all_model_checkpoint_paths: {}\n", quote(p));
        }
        for t in &self.all_model_checkpoint_timestamps {
            s += &format!("all_model_checkpoint_timestamps: {}\n", number(*t));
        }
        if self.last_preserved_timestamp != 0.0 {
            s += &format!(
                "last_preserved_timestamp: {}\n",
                number(self.last_preserved_timestamp)
            );
        }
        s
    }

    /// Writes `dir/checkpoint` atomically: a temporary file, fsynced, renamed, the directory
    /// fsynced.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = self.to_text();
        crate::native::staging::write_staged(&dir.join(STATE_FILE), ".tmp", |w| {
            w.write_all(text.as_bytes())
                .map_err(|e| Error::io(format!("writing {}", dir.join(STATE_FILE).display()), e))
        })
    }
}

/// A double as the text format prints it (always with a decimal point or exponent).
fn number(x: f64) -> String {
    let s = format!("{x}");
    if s.contains(['.', 'e', 'E', 'i', 'N']) {
        s
    } else {
        format!("{s}.0")
    }
}

/// A protobuf text-format string literal.
fn quote(s: &str) -> String {
    let mut out = String::from("\"");
    for b in s.bytes() {
        match b {
            b'"' => out += "\\\"",
            b'\\' => out += "\\\\",
            b'\n' => out += "\\n",
            b'\r' => out += "\\r",
            b'\t' => out += "\\t",
            0x20..=0x7e => out.push(char::from(b)),
            // Other bytes as octal escapes, as TensorFlow's printer writes them.
            _ => out += &format!("\\{b:03o}"),
        }
    }
    out.push('"');
    out
}

/// Parses a text-format string literal (`"..."` or `'...'`, C escapes, octal and hex bytes);
/// the whole value must be the literal. The bytes must be UTF-8.
fn parse_string(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let q = *b.first().filter(|c| **c == b'"' || **c == b'\'')?;
    let mut out = Vec::new();
    let mut i = 1;
    loop {
        let c = *b.get(i)?;
        i += 1;
        if c == q {
            break;
        }
        if c != b'\\' {
            out.push(c);
            continue;
        }
        let e = *b.get(i)?;
        i += 1;
        out.push(match e {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'a' => 7,
            b'b' => 8,
            b'f' => 12,
            b'v' => 11,
            b'\\' | b'\'' | b'"' | b'?' => e,
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match b.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                u8::try_from(v).ok()?
            }
            b'x' => {
                let mut v = 0u32;
                let mut n = 0;
                while n < 2 {
                    match b.get(i).and_then(|d| char::from(*d).to_digit(16)) {
                        Some(d) => {
                            v = v * 16 + d;
                            i += 1;
                            n += 1;
                        }
                        None => break,
                    }
                }
                if n == 0 {
                    return None;
                }
                u8::try_from(v).ok()?
            }
            _ => return None,
        });
    }
    if i != b.len() {
        return None;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_round_trip() {
        for s in ["ckpt-1", "a \"b\" \\ c\n", "é/ü", ""] {
            assert_eq!(parse_string(&quote(s)).as_deref(), Some(s));
        }
        assert_eq!(parse_string("'x\\101\\x41'").as_deref(), Some("xAA"));
        for bad in [
            "",
            "\"",
            "\"abc",
            "\"a\" b",
            "x",
            "\"\\q\"",
            "\"\\777\"",
            "\"\\x\"",
        ] {
            assert_eq!(parse_string(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn numbers_print_as_doubles() {
        assert_eq!(number(5.0), "5.0");
        assert_eq!(number(1700000000.25), "1700000000.25");
    }
}
