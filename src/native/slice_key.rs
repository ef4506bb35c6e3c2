//! TensorFlow's keys for the slices of a partitioned tensor (`EncodeTensorNameSlice` in
//! `tensorflow/core/util/saved_tensor_slice_util.cc`), built with its OrderedCode
//! (`tensorflow/core/lib/strings/ordered_code.cc`):
//!
//! ```text
//! NumIncreasing(0)                 00
//! String(name)                     name, 0x00 -> 00 ff, 0xff -> ff 00, then 00 01
//! NumIncreasing(rank)              length byte, then the value big-endian without leading zeros
//! per dimension:
//!   SignedNumIncreasing(start)     0 -> 80, 2 -> 82, 100 -> c0 64, ...
//!   SignedNumIncreasing(length)    a full dimension is length -1 -> 7f
//! ```
//!
//! Every slice key starts with `00`, so slice keys sort right after the header entry and before
//! every ordinary name. Decoding never reads past the key and rejects trailing bytes.
//!
//! TensorFlow checkpoints and native files of format version 2 (SPEC.md 13) key slices this way.
// OrderedCode numbers are big-endian by definition; the casts take bytes out of them.
#![allow(clippy::big_endian_bytes, clippy::cast_possible_truncation)]

/// One dimension of a slice: `start` and `length`, where `length == -1` means the whole
/// dimension (TensorFlow's `kFullExtent`, with `start == 0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First index in the dimension.
    pub start: i64,
    /// Number of indices, or -1 for the whole dimension.
    pub length: i64,
}

impl Extent {
    /// The whole dimension.
    pub const FULL: Extent = Extent {
        start: 0,
        length: -1,
    };
}

/// Header bits of a signed OrderedCode number of `len` bytes (index = len), first two bytes.
const LENGTH_TO_HEADER_BITS: [[u8; 2]; 11] = [
    [0, 0],
    [0x80, 0],
    [0xc0, 0],
    [0xe0, 0],
    [0xf0, 0],
    [0xf8, 0],
    [0xfc, 0],
    [0xfe, 0],
    [0xff, 0],
    [0xff, 0x80],
    [0xff, 0xc0],
];

/// Appends OrderedCode `NumIncreasing(v)`: a length byte, then `v` big-endian without leading
/// zero bytes (0 is just the length byte `00`).
pub fn put_num_increasing(dst: &mut Vec<u8>, v: u64) {
    let bytes = v.to_be_bytes();
    let skip = bytes.iter().take_while(|&&b| b == 0).count();
    dst.push((8 - skip) as u8);
    dst.extend_from_slice(&bytes[skip..]);
}

/// Appends OrderedCode `String(s)`: 0x00 escaped as `00 ff`, 0xff as `ff 00`, then `00 01`.
pub fn put_string(dst: &mut Vec<u8>, s: &[u8]) {
    for &b in s {
        match b {
            0x00 => dst.extend_from_slice(&[0x00, 0xff]),
            0xff => dst.extend_from_slice(&[0xff, 0x00]),
            _ => dst.push(b),
        }
    }
    dst.extend_from_slice(&[0x00, 0x01]);
}

/// Bytes OrderedCode uses for a signed number whose magnitude (`v` or `!v`) is `x`.
fn signed_len(x: u64) -> usize {
    let bits = 64 - x.leading_zeros() as usize; // 0 for x == 0
    (bits + 7) / 7
}

/// Appends OrderedCode `SignedNumIncreasing(v)`.
pub fn put_signed_num_increasing(dst: &mut Vec<u8>, v: i64) {
    let x = if v < 0 { !(v as u64) } else { v as u64 };
    let len = signed_len(x);
    if len == 1 {
        dst.push(LENGTH_TO_HEADER_BITS[1][0] ^ (v as u8));
        return;
    }
    let sign: u8 = if v < 0 { 0xff } else { 0 };
    let mut buf = [sign; 10];
    buf[2..].copy_from_slice(&v.to_be_bytes());
    let start = buf.len() - len;
    buf[start] ^= LENGTH_TO_HEADER_BITS[len][0];
    buf[start + 1] ^= LENGTH_TO_HEADER_BITS[len][1];
    dst.extend_from_slice(&buf[start..]);
}

/// TensorFlow's key for the slice `extents` of tensor `name`.
pub fn encode(name: &[u8], extents: &[Extent]) -> Vec<u8> {
    let mut k = Vec::with_capacity(name.len() + 4 + 4 * extents.len());
    put_num_increasing(&mut k, 0);
    put_string(&mut k, name);
    put_num_increasing(&mut k, extents.len() as u64);
    for e in extents {
        put_signed_num_increasing(&mut k, e.start);
        put_signed_num_increasing(&mut k, e.length);
    }
    k
}

/// Reads `NumIncreasing` from the front of `src`; returns the value and the bytes used.
/// Rejects a leading zero byte (not what `put_num_increasing` writes), so decoding and
/// encoding are inverse.
fn get_num_increasing(src: &[u8]) -> Option<(u64, usize)> {
    let len = usize::from(*src.first()?);
    if len > 8 {
        return None;
    }
    let body = src.get(1..1 + len)?;
    if body.first() == Some(&0) {
        return None;
    }
    let v = body.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b));
    Some((v, 1 + len))
}

/// Reads `String` from the front of `src`; returns the unescaped bytes and the bytes used.
fn get_string(src: &[u8]) -> Option<(Vec<u8>, usize)> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        match *src.get(i)? {
            0x00 => match *src.get(i + 1)? {
                0x01 => return Some((out, i + 2)),
                0xff => out.push(0x00),
                _ => return None,
            },
            0xff => match *src.get(i + 1)? {
                0x00 => out.push(0xff),
                _ => return None,
            },
            b => {
                out.push(b);
                i += 1;
                continue;
            }
        }
        i += 2;
    }
}

/// Reads `SignedNumIncreasing` from the front of `src`; returns the value and the bytes used.
/// Rejects non-canonical (over-long) encodings, so decoding and encoding are inverse.
fn get_signed_num_increasing(src: &[u8]) -> Option<(i64, usize)> {
    let first = *src.first()?;
    // Negative numbers have their header bits inverted; undo that to read the length.
    let mask: u8 = if first & 0x80 == 0 { 0xff } else { 0 };
    let b0 = first ^ mask;
    let len = if b0 != 0xff {
        b0.leading_ones() as usize
    } else {
        let b1 = *src.get(1)? ^ mask;
        8 + b1.leading_ones() as usize
    };
    if !(1..=10).contains(&len) {
        return None;
    }
    let body = src.get(..len)?;
    let mut buf = [mask; 10];
    buf[10 - len..].copy_from_slice(body);
    buf[10 - len] ^= LENGTH_TO_HEADER_BITS[len][0];
    if len >= 2 {
        buf[10 - len + 1] ^= LENGTH_TO_HEADER_BITS[len][1];
    }
    // The two sign-extension bytes must agree with the sign of the 64-bit value.
    let v = i64::from_be_bytes(buf[2..].try_into().ok()?);
    let sign: u8 = if v < 0 { 0xff } else { 0 };
    if buf[0] != sign || buf[1] != sign {
        return None;
    }
    let x = if v < 0 { !(v as u64) } else { v as u64 };
    if signed_len(x) != len {
        return None;
    }
    Some((v, len))
}

/// A decoded slice key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SliceKey {
    /// The tensor's name.
    pub name: Vec<u8>,
    /// The slice, one extent per dimension.
    pub extents: Vec<Extent>,
}

/// Whether `key` is in the slice-key space (starts with `NumIncreasing(0)` = `00`). Ordinary
/// tensor names never start with a NUL byte in TensorFlow checkpoints.
pub fn is_slice_key(key: &[u8]) -> bool {
    key.first() == Some(&0)
}

/// Decodes a slice key, or `None` if `key` is not exactly one.
pub fn decode(key: &[u8]) -> Option<SliceKey> {
    let (zero, mut pos) = get_num_increasing(key)?;
    if zero != 0 {
        return None;
    }
    let (name, n) = get_string(&key[pos..])?;
    pos += n;
    let (rank, n) = get_num_increasing(&key[pos..])?;
    pos += n;
    // Each extent takes at least 2 bytes: bound the allocation by the key's length.
    let rank = usize::try_from(rank).ok()?;
    if rank.checked_mul(2)? > key.len() - pos {
        return None;
    }
    let mut extents = Vec::with_capacity(rank);
    for _ in 0..rank {
        let (start, n) = get_signed_num_increasing(&key[pos..])?;
        pos += n;
        let (length, n) = get_signed_num_increasing(&key[pos..])?;
        pos += n;
        extents.push(Extent { start, length });
    }
    if pos != key.len() {
        return None;
    }
    Some(SliceKey { name, extents })
}

/// A key as shown in messages: a slice key as `NAME (slice START,LENGTH:...)` (`-` for a whole
/// dimension), other keys as [`crate::name::display`] shows names, with NUL bytes escaped.
pub fn display_key(key: &[u8]) -> String {
    match decode(key) {
        Some(k) => format!(
            "{} (slice {})",
            crate::name::display(&k.name),
            describe_extents(&k.extents)
        ),
        None => crate::name::display(key).replace('\0', "\\x00"),
    }
}

/// Extents as `START,LENGTH:...`, `-` for a whole dimension.
pub fn describe_extents(ext: &[Extent]) -> String {
    let parts: Vec<String> = ext
        .iter()
        .map(|e| {
            if e.length == -1 {
                "-".to_string()
            } else {
                format!("{},{}", e.start, e.length)
            }
        })
        .collect();
    parts.join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_tensorflow_bytes() {
        // Reference section 5: rows 0-2 and 2-4 of a [4,2] tensor "v".
        let rows = |s| {
            encode(
                b"v",
                &[
                    Extent {
                        start: s,
                        length: 2,
                    },
                    Extent::FULL,
                ],
            )
        };
        assert_eq!(
            rows(0),
            [0x00, 0x76, 0x00, 0x01, 0x01, 0x02, 0x80, 0x82, 0x80, 0x7f]
        );
        assert_eq!(
            rows(2),
            [0x00, 0x76, 0x00, 0x01, 0x01, 0x02, 0x82, 0x82, 0x80, 0x7f]
        );
        // Written by TF 2.21 (fixed_size_partitioner): 67 -> c0 43, 8200 -> e0 20 08.
        let mut b = Vec::new();
        put_signed_num_increasing(&mut b, 67);
        assert_eq!(b, [0xc0, 0x43]);
        b.clear();
        put_signed_num_increasing(&mut b, 8200);
        assert_eq!(b, [0xe0, 0x20, 0x08]);
    }

    #[test]
    fn signed_round_trip_and_order() {
        let mut vals: Vec<i64> = vec![i64::MIN, i64::MAX, 0, -1, 63, 64, -64, -65, 8191, 8192];
        for s in 0..63 {
            let p = 1i64 << s;
            vals.extend([p, p - 1, p + 1, -p, -p - 1, -p + 1]);
        }
        vals.sort_unstable();
        vals.dedup();
        let mut prev: Option<Vec<u8>> = None;
        for &v in &vals {
            let mut b = Vec::new();
            put_signed_num_increasing(&mut b, v);
            assert_eq!(get_signed_num_increasing(&b), Some((v, b.len())), "{v}");
            if let Some(p) = &prev {
                assert!(p < &b, "order at {v}");
            }
            prev = Some(b);
        }
    }

    #[test]
    fn keys_round_trip_and_reject_garbage() {
        let ext = [
            Extent {
                start: 8200,
                length: 8200,
            },
            Extent::FULL,
            Extent {
                start: 3,
                length: 3,
            },
        ];
        for name in [&b"emb"[..], b"a\x00b\xffc", "ünï/çødé".as_bytes(), b""] {
            let k = encode(name, &ext);
            assert!(is_slice_key(&k));
            let d = decode(&k).unwrap();
            assert_eq!(d.name, name);
            assert_eq!(d.extents, ext);
            for n in 0..k.len() {
                assert_eq!(decode(&k[..n]), None);
            }
            let mut long = k.clone();
            long.push(0x80);
            assert_eq!(decode(&long), None);
        }
        assert_eq!(decode(b"plain/name"), None);
        // A rank written with a leading zero byte (01 00 for 0) is not TensorFlow's encoding.
        assert_eq!(decode(&[0x00, 0x00, 0x01, 0x01, 0x00]), None);
        assert!(decode(&[0x00, 0x00, 0x01, 0x00]).is_some());
        assert_eq!(
            decode(&[0x00, 0x61, 0x00, 0x01, 0x08, 0xff, 0xff, 0xff, 0xff]),
            None
        );
    }
}
