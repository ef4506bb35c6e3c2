//! Tensor names: arbitrary non-empty byte strings, ordered bytewise.
//!
//! Names are usually UTF-8, but TensorFlow and Paddle both allow any bytes, so paramdex does too.
//! For display and JSON, [`display`] escapes every byte that is not part of valid UTF-8, and
//! every control character, as `\xNN` (a backslash is doubled only where it would otherwise
//! read as the start of an escape), which is lossless; [`to_hex`] / [`from_hex`] give the exact
//! bytes. [`near`] finds the names nearest one that is not there (for "did you mean").

use std::fmt::Write;

mod near;

pub use near::{
    did_you_mean, near, normal_form, normalisation_differs, typeable, NormalForm, MAX_NEAR,
};

/// Longest accepted tensor name in bytes (SPEC.md, "Limits").
pub const MAX_NAME_LEN: usize = 65_536;

/// A lossless, printable rendering of a name: valid UTF-8 runs verbatim, except control
/// characters (C0, DEL, C1: a terminal would act on them or drop them), which are shown as the
/// `\xNN` of their UTF-8 bytes like the bytes that are not UTF-8. A backslash is shown as
/// itself (`a\b`, so a name from a Windows path can be typed back as shown) unless what follows
/// it would make it read as an escape: another backslash, an escape, or `x` and two hex digits;
/// then it is doubled (`\\`). Read back, `\\` is one backslash, `\xNN` one byte and any other
/// backslash itself.
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
    /// A piece of the name: a character shown as itself, or bytes shown escaped.
    enum Piece<'a> {
        Char(char),
        Escaped(&'a [u8]),
    }
    let mut pieces = Vec::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        let valid = chunk.valid();
        for (i, c) in valid.char_indices() {
            if c.is_control() {
                pieces.push(Piece::Escaped(&valid.as_bytes()[i..i + c.len_utf8()]));
            } else {
                pieces.push(Piece::Char(c));
            }
        }
        if !chunk.invalid().is_empty() {
            pieces.push(Piece::Escaped(chunk.invalid()));
        }
    }
    let is_char =
        |p: Option<&Piece>, f: &dyn Fn(char) -> bool| matches!(p, Some(Piece::Char(c)) if f(*c));
    let mut out = String::with_capacity(name.len() + 8);
    for (i, p) in pieces.iter().enumerate() {
        match p {
            Piece::Char('\\') => {
                let next = pieces.get(i + 1);
                let ambiguous = matches!(next, Some(Piece::Escaped(_)))
                    || is_char(next, &|c| c == '\\')
                    || (is_char(next, &|c| c == 'x')
                        && is_char(pieces.get(i + 2), &|c| c.is_ascii_hexdigit())
                        && is_char(pieces.get(i + 3), &|c| c.is_ascii_hexdigit()));
                out.push_str(if ambiguous { "\\\\" } else { "\\" });
            }
            Piece::Char(c) => out.push(*c),
            Piece::Escaped(bytes) => {
                for b in *bytes {
                    let _ = write!(out, "\\x{b:02x}");
                }
            }
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
        // A backslash is itself unless it would read as the start of an escape.
        assert_eq!(display(b"a\\b"), "a\\b");
        assert_eq!(display(b"a\\"), "a\\");
        assert_eq!(display(b"a\\\\b"), "a\\\\\\b");
        assert_eq!(display(b"a\\x41"), "a\\\\x41");
        assert_eq!(display(b"a\\xg1"), "a\\xg1");
        assert_eq!(display(b"a\\\x00"), "a\\\\\\x00");
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
                0x20..=0x7e => char::from(b).to_string(),
                _ => format!("\\x{b:02x}"),
            };
            assert_eq!(display(&[b]), want, "byte {b:#04x}");
            assert_eq!(display(&[b'a', b, b'z']), format!("a{want}z"));
        }
    }

    /// The reading of a display back into bytes, as the docs of [`display`] give it.
    fn read_back(shown: &str) -> Vec<u8> {
        let s = shown.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < s.len() {
            if s[i] == b'\\' && s.get(i + 1) == Some(&b'\\') {
                out.push(b'\\');
                i += 2;
            } else if s[i] == b'\\'
                && s.get(i + 1) == Some(&b'x')
                && i + 4 <= s.len()
                && s[i + 2..i + 4].iter().all(u8::is_ascii_hexdigit)
            {
                out.extend(from_hex(std::str::from_utf8(&s[i + 2..i + 4]).unwrap()).unwrap());
                i += 4;
            } else {
                out.push(s[i]);
                i += 1;
            }
        }
        out
    }

    #[test]
    fn display_reads_back_to_the_same_bytes() {
        // Every sequence of up to 4 symbols from an alphabet of the bytes that matter.
        let alphabet: &[&[u8]] = &[
            b"\\",
            b"x",
            b"4",
            b"g",
            b"\x00",
            b"\xff",
            "\u{e9}".as_bytes(),
            b"\xc3",
        ];
        let mut names: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..4 {
            let mut longer = Vec::new();
            for n in &names {
                for a in alphabet {
                    let mut m = n.clone();
                    m.extend_from_slice(a);
                    longer.push(m);
                }
            }
            names.extend(longer);
        }
        for n in names {
            let shown = display(&n);
            assert_eq!(read_back(&shown), n, "{shown}");
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
