//! Tensor names: arbitrary non-empty byte strings, ordered bytewise.
//!
//! Names are usually UTF-8, but TensorFlow and Paddle both allow any bytes, so paramdex does too.
//! For display and JSON, [`display`] escapes every byte that is not part of valid UTF-8 as `\xNN`
//! (and a literal backslash as `\\`), which is lossless; [`to_hex`] / [`from_hex`] give the exact bytes.

use std::fmt::Write;

/// Longest accepted tensor name in bytes (SPEC.md, "Limits").
pub const MAX_NAME_LEN: usize = 65_536;

/// A lossless, printable rendering of a name: valid UTF-8 runs verbatim (with `\` doubled),
/// other bytes as `\xNN`.
pub fn display(name: &[u8]) -> String {
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// The name as UTF-8 if it is valid UTF-8.
pub fn as_utf8(name: &[u8]) -> Option<&str> {
    std::str::from_utf8(name).ok()
}

/// Lower-case hex of the name's bytes.
pub fn to_hex(name: &[u8]) -> String {
    let mut s = String::with_capacity(name.len() * 2);
    for b in name {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Parses lower- or upper-case hex into bytes; `None` if malformed.
pub fn from_hex(hex: &str) -> Option<Vec<u8>> {
    let bytes = hex.as_bytes();
    if bytes.len() % 2 != 0 {
        return None;
    }
    bytes
        .chunks_exact(2)
        .map(|p| {
            let hi = (p[0] as char).to_digit(16)?;
            let lo = (p[1] as char).to_digit(16)?;
            Some((hi * 16 + lo) as u8)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_escapes_invalid_utf8_losslessly() {
        assert_eq!(display(b"a.b"), "a.b");
        assert_eq!(display("größe".as_bytes()), "größe");
        assert_eq!(display(b"a\xffb"), "a\\xffb");
        assert_eq!(display(b"a\\b"), "a\\\\b");
    }

    #[test]
    fn hex_round_trips() {
        let n = b"\x00\xffabc";
        assert_eq!(from_hex(&to_hex(n)).unwrap(), n);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
    }
}
