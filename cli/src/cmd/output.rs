//! What every command's output shares: the one JSON layout, counts with their nouns, how an
//! input's format is named in a sentence, and the terminal's width.
//!
//! # The JSON rule
//!
//! Every command that prints JSON (`ls --json`, `get`, `stat --json`, `verify --json`,
//! `diff --json`, `meta --json`) prints one JSON document, laid out by [`write_json`]:
//!
//! - an object's members one per line, indented by two spaces per level, keys in bytewise
//!   order, `": "` after each key;
//! - an array that holds no object anywhere inside it (shapes, values, LoD offsets, lists of
//!   names) on one line: `[4096, 4096]`, `[[0, 3, 7]]`, `["a", "b"]`;
//! - an array that holds objects with one element per line; each object element itself on one
//!   line (`ls --json`: one tensor a line, so a listing of millions streams out and works with
//!   line tools);
//! - on one line, items are separated by `", "` and keys by `": "`; `[]` and `{}` when empty;
//!   the document ends with a newline.
//!
//! Numbers and strings are written by serde_json (shortest round-trip floats, JSON escapes).

use std::io::{self, Write};

use paramdex::interop::Format;
use serde_json::Value;

/// Writes `v` as the module's JSON rule lays it out, then a newline.
pub fn write_json<W: Write + ?Sized>(out: &mut W, v: &Value) -> io::Result<()> {
    write_block(out, v, 0)?;
    out.write_all(b"\n")
}

/// [`write_json`] into a byte vector.
#[cfg(test)]
pub fn json_bytes(v: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_json(&mut out, v);
    out
}

/// Whether `v` holds no object at any depth (it then goes on one line).
fn flat(v: &Value) -> bool {
    match v {
        Value::Object(_) => false,
        Value::Array(a) => a.iter().all(flat),
        _ => true,
    }
}

fn indent<W: Write + ?Sized>(out: &mut W, level: usize) -> io::Result<()> {
    for _ in 0..level {
        out.write_all(b"  ")?;
    }
    Ok(())
}

fn scalar<W: Write + ?Sized>(out: &mut W, v: &Value) -> io::Result<()> {
    serde_json::to_writer(&mut *out, v).map_err(io::Error::other)
}

/// `v` laid out over lines, its first line at the cursor and its later lines at `level`.
fn write_block<W: Write + ?Sized>(out: &mut W, v: &Value, level: usize) -> io::Result<()> {
    match v {
        Value::Object(m) if !m.is_empty() => {
            out.write_all(b"{\n")?;
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",\n")?;
                }
                indent(out, level + 1)?;
                serde_json::to_writer(&mut *out, k).map_err(io::Error::other)?;
                out.write_all(b": ")?;
                write_block(out, x, level + 1)?;
            }
            out.write_all(b"\n")?;
            indent(out, level)?;
            out.write_all(b"}")
        }
        Value::Array(a) if !flat(v) => {
            out.write_all(b"[\n")?;
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.write_all(b",\n")?;
                }
                indent(out, level + 1)?;
                if x.is_object() {
                    write_inline(out, x)?;
                } else {
                    write_block(out, x, level + 1)?;
                }
            }
            out.write_all(b"\n")?;
            indent(out, level)?;
            out.write_all(b"]")
        }
        _ => write_inline(out, v),
    }
}

/// `v` on one line: `[1, 2]`, `{"a": 1, "b": [2]}`.
pub fn write_inline<W: Write + ?Sized>(out: &mut W, v: &Value) -> io::Result<()> {
    match v {
        Value::Array(a) => {
            out.write_all(b"[")?;
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.write_all(b", ")?;
                }
                write_inline(out, x)?;
            }
            out.write_all(b"]")
        }
        Value::Object(m) => {
            out.write_all(b"{")?;
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.write_all(b", ")?;
                }
                serde_json::to_writer(&mut *out, k).map_err(io::Error::other)?;
                out.write_all(b": ")?;
                write_inline(out, x)?;
            }
            out.write_all(b"}")
        }
        _ => scalar(out, v),
    }
}

/// `n` and a noun that follows it: `1 tensor`, `2 tensors`, `0 tensors`. `plural` is the
/// noun's plural (`entries`); `None` adds an `s`.
pub fn count(n: u64, singular: &str, plural: Option<&str>) -> String {
    if n == 1 {
        format!("1 {singular}")
    } else {
        match plural {
            Some(p) => format!("{n} {p}"),
            None => format!("{n} {singular}s"),
        }
    }
}

/// [`count`] with a regular plural: `count_s(3, "tensor")` is `3 tensors`.
pub fn count_s(n: u64, singular: &str) -> String {
    count(n, singular, None)
}

/// An input's format as the object of a sentence: `a safetensors file`, `a paramdex file`,
/// `a tensorflow checkpoint`, `a paddle model`.
pub fn a_format(f: Format) -> String {
    let name = f.name();
    match f {
        Format::Native | Format::Safetensors | Format::Gguf => format!("a {name} file"),
        _ => format!("a {name}"),
    }
}

/// The width of the terminal standard output is, in columns; `None` off a terminal. `COLUMNS`,
/// when set to a number, wins over what the terminal reports (as for `ls`).
pub fn terminal_columns() -> Option<usize> {
    use std::io::IsTerminal;
    if !std::io::stdout().is_terminal() {
        return None;
    }
    if let Some(n) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return Some(n);
    }
    Some(
        console::Term::stdout()
            .size_checked()
            .map_or(80, |(_, c)| usize::from(c)),
    )
}

/// Terminal columns of `s`: CJK and emoji take two, combining marks none.
pub fn columns(s: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(s)
}

/// `s` shortened to at most `max` terminal columns by replacing its middle with `…` (the
/// start and the end of a tensor name are what tell it apart); `s` itself if it fits.
pub fn shorten(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    use unicode_width::UnicodeWidthChar;
    if columns(s) <= max {
        return s.into();
    }
    if max == 0 {
        return "".into();
    }
    // The ellipsis takes one column; the rest is shared, the end getting the larger half.
    let room = max - 1;
    let (head_room, tail_room) = (room / 2, room - room / 2);
    let w = |c: char| c.width().unwrap_or(0);
    let mut head_end = 0;
    let mut used = 0;
    for (i, c) in s.char_indices() {
        if used + w(c) > head_room {
            break;
        }
        used += w(c);
        head_end = i + c.len_utf8();
    }
    let mut tail_start = s.len();
    let mut used = 0;
    for (i, c) in s.char_indices().rev() {
        if i < head_end || used + w(c) > tail_room {
            break;
        }
        used += w(c);
        tail_start = i;
    }
    format!("{}…{}", &s[..head_end], &s[tail_start..]).into()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn text(v: &Value) -> String {
        String::from_utf8(json_bytes(v)).unwrap()
    }

    #[test]
    fn the_json_rule() {
        let v = json!({
            "shape": [4096, 4096],
            "lod": [[0, 3, 7]],
            "empty": [],
            "none": {},
            "name": "a\"b",
            "nested": {"x": 1.5, "y": [true, null, "s"]},
            "rows": [{"b": 2, "a": [1, 2]}, {"c": {"d": 1}}],
            "mixed": [[{"a": 1}], 3],
        });
        let want = r#"{
  "empty": [],
  "lod": [[0, 3, 7]],
  "mixed": [
    [
      {"a": 1}
    ],
    3
  ],
  "name": "a\"b",
  "nested": {
    "x": 1.5,
    "y": [true, null, "s"]
  },
  "none": {},
  "rows": [
    {"a": [1, 2], "b": 2},
    {"c": {"d": 1}}
  ],
  "shape": [4096, 4096]
}
"#;
        assert_eq!(text(&v), want);
        // Whatever the layout, the same document.
        assert_eq!(serde_json::from_str::<Value>(&text(&v)).unwrap(), v);
        assert_eq!(text(&json!([])), "[]\n");
        assert_eq!(text(&json!(7)), "7\n");
    }

    #[test]
    fn counts_and_formats() {
        assert_eq!(count_s(1, "tensor"), "1 tensor");
        assert_eq!(count_s(0, "tensor"), "0 tensors");
        assert_eq!(count(2, "entry", Some("entries")), "2 entries");
        assert_eq!(a_format(Format::Safetensors), "a safetensors file");
        assert_eq!(a_format(Format::Gguf), "a gguf file");
        assert_eq!(a_format(Format::TensorFlow), "a tensorflow checkpoint");
    }

    #[test]
    fn shortening_keeps_both_ends_within_the_width() {
        assert_eq!(shorten("abcdef", 6), "abcdef");
        assert_eq!(shorten("abcdefghij", 7), "abc…hij");
        assert_eq!(shorten("abcdefghij", 6), "ab…hij");
        // Wide characters count two columns, and are never split.
        let s = shorten("日本語のテンソル名", 8);
        assert!(columns(&s) <= 8, "{s}");
        assert!(
            s.starts_with("日") && s.ends_with("名") && s.contains('…'),
            "{s}"
        );
        for max in 1..12 {
            assert!(columns(&shorten("model.layers.0.weight", max)) <= max);
        }
    }
}
