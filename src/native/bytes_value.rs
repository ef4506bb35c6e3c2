//! Bytes values (SPEC.md 6.1): arbitrary bytes stored under a name beside tensors.
//!
//! A value `v` of `n` bytes is stored as TensorFlow stores a scalar `DT_STRING` tensor:
//!
//! ```text
//! varint64 n | fixed32 mask(crc32c(n as u32 LE, or u64 LE when n > u32::MAX)) | v
//! ```
//!
//! Its record is `uint8` of shape `[S]` (`S` = the encoded length) holding those bytes, with
//! the usual record checksum over them; its index entry is a scalar `DT_STRING` of size `S`
//! whose checksum is TensorFlow's string checksum ([`entry_crc`]): over the length as an
//! integer (not its varint), the 4 stored length-checksum bytes and the value.

use crate::error::{Error, Result};
use crate::format::{crc32c_extend, get_fixed32, get_varint64, mask_crc, put_varint64, unmask_crc};

/// Extends a CRC32C over a length as TensorFlow checksums string lengths: a little-endian u32,
/// or u64 when it does not fit.
fn crc_len(crc: u32, len: u64) -> u32 {
    match u32::try_from(len) {
        Ok(v) => crc32c_extend(crc, &v.to_le_bytes()),
        Err(_) => crc32c_extend(crc, &len.to_le_bytes()),
    }
}

/// The encoding of `value` (see the module documentation).
pub fn encode(value: &[u8]) -> Vec<u8> {
    let n = value.len() as u64;
    let mut out = Vec::with_capacity(value.len() + 14);
    put_varint64(&mut out, n);
    out.extend_from_slice(&mask_crc(crc_len(0, n)).to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// The length of the value whose encoding takes `encoded` bytes, if there is one (the
/// encoding's length grows strictly with the value's, so there is at most one).
pub fn value_len(encoded: u64) -> Option<u64> {
    (1..=10u64).find_map(|v| {
        let n = encoded.checked_sub(v + 4)?;
        (crate::format::varint_len(n) as u64 == v).then_some(n)
    })
}

/// Decodes an encoded value (`data`: the whole stored data), checking that the varint length
/// is well formed, that its checksum matches, and that exactly that many bytes follow. `name`
/// and `offset` (of the data in the file) are for messages.
pub fn decode<'a>(data: &'a [u8], name: &str, offset: u64) -> Result<&'a [u8]> {
    let bad = |at: usize, detail: String| {
        Error::corrupt(
            "bytes value",
            offset.saturating_add(at as u64),
            format!("{name}: {detail}"),
        )
    };
    let (n, used) =
        get_varint64(data).ok_or_else(|| bad(0, "bad or truncated varint length".into()))?;
    let stored = get_fixed32(data, used)
        .ok_or_else(|| bad(used, "data ends before the checksum of the length".into()))?;
    let computed = crc_len(0, n);
    if unmask_crc(stored) != computed {
        return Err(Error::ChecksumMismatch {
            what: "bytes value length",
            name: Some(name.to_string()),
            offset,
            len: used as u64,
            stored: unmask_crc(stored),
            computed,
            context: None,
        });
    }
    let start = used + 4;
    let left = (data.len() - start) as u64;
    if n != left {
        return Err(bad(
            0,
            format!("the length field says {n} bytes but {left} bytes are stored"),
        ));
    }
    Ok(&data[start..])
}

/// The masked checksum an index entry stores for encoded value `data` (TensorFlow's string
/// checksum), or a corruption error when `data` is not a valid encoding ([`decode`]).
pub fn entry_crc(data: &[u8], name: &str, offset: u64) -> Result<u32> {
    let value = decode(data, name, offset)?;
    let start = data.len() - value.len();
    let crc = crc_len(0, value.len() as u64);
    Ok(mask_crc(crc32c_extend(crc, &data[start - 4..])))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_tensorflow_scalar_string() {
        // TensorFlow's encoding of the scalar string "ab": 02, mask(crc(02 00 00 00)), "ab".
        let enc = encode(b"ab");
        assert_eq!(enc[0], 2);
        assert_eq!(enc.len(), 7);
        assert_eq!(decode(&enc, "v", 0).unwrap(), b"ab");
        let empty = encode(b"");
        assert_eq!(decode(&empty, "v", 0).unwrap(), b"");
        for n in [0u64, 1, 127, 128, 16_383, 16_384, 1 << 40] {
            let enc_len = n + crate::format::varint_len(n) as u64 + 4;
            assert_eq!(value_len(enc_len), Some(n));
        }
        assert_eq!(value_len(4), None);
        // 127 encodes in 127 + 1 + 4 = 132 bytes, 128 in 128 + 2 + 4 = 134: none in 133.
        assert_eq!(value_len(132), Some(127));
        assert_eq!(value_len(133), None);
        assert_eq!(
            entry_crc(&empty, "v", 0).unwrap(),
            entry_crc(&encode(b""), "v", 0).unwrap()
        );
    }

    #[test]
    fn lying_or_truncated_lengths_are_errors() {
        let enc = encode(&[7u8; 300]);
        for n in 0..enc.len() {
            assert!(decode(&enc[..n], "v", 0).is_err(), "{n}");
        }
        // A length that lies, with its checksum recomputed: caught by the byte count.
        let mut lie = Vec::new();
        put_varint64(&mut lie, 301);
        lie.extend_from_slice(&mask_crc(crc_len(0, 301)).to_le_bytes());
        lie.extend_from_slice(&[7u8; 300]);
        let e = decode(&lie, "v", 0).unwrap_err();
        assert!(e.to_string().contains("says 301 bytes"), "{e}");
        // A length that lies without its checksum: a checksum mismatch.
        let mut d = enc.clone();
        d[0] ^= 1;
        assert!(matches!(
            decode(&d, "v", 0),
            Err(Error::ChecksumMismatch { .. })
        ));
        // A huge varint length never allocates or reads past the data.
        let mut huge = Vec::new();
        put_varint64(&mut huge, u64::MAX);
        huge.extend_from_slice(&mask_crc(crc_len(0, u64::MAX)).to_le_bytes());
        assert!(decode(&huge, "v", 0).is_err());
    }
}
