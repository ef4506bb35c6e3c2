//! Tensor names: arbitrary non-empty byte strings, ordered bytewise.
//!
//! Names are usually UTF-8, but TensorFlow and Paddle both allow any bytes, so paramdex does too.
//! For display and JSON, [`display`] escapes every byte that is not part of valid UTF-8, and
//! every control character, as `\xNN` (and a literal backslash as `\\`), which is lossless;
//! [`to_hex`] / [`from_hex`] give the exact bytes.

use std::fmt::Write;

/// Longest accepted tensor name in bytes (SPEC.md, "Limits").
pub const MAX_NAME_LEN: usize = 65_536;

/// A lossless, printable rendering of a name: valid UTF-8 runs verbatim (with `\` doubled),
/// except control characters (C0, DEL, C1: a terminal would act on them or drop them), which
/// are shown as the `\xNN` of their UTF-8 bytes like the bytes that are not UTF-8.
pub fn display(name: &[u8]) -> String {
    // The common case, printable ASCII without `\`, shows as is (listings call this per row).
    // (A fold without early exit, which the compiler vectorizes.)
    let plain = name.iter().fold(true, |ok, &b| {
        ok & (b.wrapping_sub(0x20) < 0x5f) & (b != b'\\')
    });
    if plain {
        if let Ok(s) = std::str::from_utf8(name) {
            return s.to_owned();
        }
    }
    let mut out = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else if c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\x{b:02x}");
                }
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
    if !bytes.len().is_multiple_of(2) {
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
        // Control characters (C0, DEL, C1) are escaped, so a terminal shows them.
        assert_eq!(display(b"\x00lead\x7f"), "\\x00lead\\x7f");
        assert_eq!(
            display(b"tab\tnew\nline\x1b[31m"),
            "tab\\x09new\\x0aline\\x1b[31m"
        );
        assert_eq!(display("a\u{9b}b".as_bytes()), "a\\xc2\\x9bb");
    }

    #[test]
    fn every_single_byte_shows_as_printable_ascii_or_an_escape() {
        for b in 0..=255u8 {
            let want = match b {
                b'\\' => "\\\\".to_string(),
                0x20..=0x7e => char::from(b).to_string(),
                _ => format!("\\x{b:02x}"),
            };
            assert_eq!(display(&[b]), want, "byte {b:#04x}");
            assert_eq!(display(&[b'a', b, b'z']), format!("a{want}z"));
        }
    }

    #[test]
    fn hex_round_trips() {
        let n = b"\x00\xffabc";
        assert_eq!(from_hex(&to_hex(n)).unwrap(), n);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
    }
}
