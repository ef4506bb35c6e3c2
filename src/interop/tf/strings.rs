//! TensorFlow `DT_STRING` tensor data, as `WriteStringTensor` lays it out in a bundle:
//!
//! ```text
//! varint64 len_0 ... varint64 len_{n-1}      one per element, row-major
//! fixed32  masked CRC32C of the lengths      each length as a little-endian u32
//!                                            (u64 when it exceeds u32::MAX)
//! bytes of element 0, element 1, ...         concatenated
//! ```
//!
//! The entry's CRC covers the same lengths (as u32/u64), the 4 stored checksum bytes and the
//! element bytes; [`encode`] and [`stored_data_crc`] compute it. Decoding checks every length
//! against the bytes actually present before allocating anything.

use crate::error::{Error, Result};
use crate::format::{crc32c_extend, get_fixed32, get_varint64, mask_crc, put_varint64, unmask_crc};

/// Where string data came from, for error messages.
#[derive(Clone, Copy, Debug)]
pub struct StringsAt<'a> {
    /// The data file.
    pub path: &'a str,
    /// The tensor (displayable form).
    pub name: &'a str,
    /// Absolute offset of the tensor's data in `path`.
    pub offset: u64,
}

impl StringsAt<'_> {
    fn corrupt(&self, at: u64, detail: String) -> Error {
        Error::corrupt(
            "string tensor data",
            self.offset.saturating_add(at),
            format!("tensor {} in {}: {detail}", self.name, self.path),
        )
    }
}

/// Extends a CRC32C over one element length as TensorFlow checksums it: a u32 (u64 when
/// larger), in the data's byte order.
fn crc_len(crc: u32, len: u64, big_endian: bool) -> u32 {
    match u32::try_from(len) {
        Ok(v) if big_endian => crc32c_extend(crc, &v.to_be_bytes()),
        Ok(v) => crc32c_extend(crc, &v.to_le_bytes()),
        Err(_) if big_endian => crc32c_extend(crc, &len.to_be_bytes()),
        Err(_) => crc32c_extend(crc, &len.to_le_bytes()),
    }
}

/// The lengths section of a string tensor, checked: its end (where the element bytes start)
/// and the total of the lengths, which equals the bytes that follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringLayout {
    /// Offset (within the tensor's data) of the first element byte.
    pub bytes_start: usize,
    /// Sum of the element lengths.
    pub total: u64,
}

/// Reads and checks the lengths of `n` elements in `data` (the tensor's whole data, `size`
/// bytes), calling `each` with every length. Checks: `n` varints fit (each takes at least a
/// byte), the masked length checksum, and that the lengths add up to exactly the bytes left.
pub fn read_lengths(
    data: &[u8],
    n: u64,
    big_endian: bool,
    at: StringsAt<'_>,
    mut each: impl FnMut(u64),
) -> Result<StringLayout> {
    if n > data.len() as u64 {
        return Err(at.corrupt(
            0,
            format!("{n} elements cannot fit in {} bytes of data", data.len()),
        ));
    }
    let mut pos = 0usize;
    let mut crc = 0u32;
    let mut total = 0u64;
    for i in 0..n {
        let (len, used) = get_varint64(&data[pos..])
            .ok_or_else(|| at.corrupt(pos as u64, format!("bad varint length of element {i}")))?;
        pos += used;
        crc = crc_len(crc, len, big_endian);
        total = total
            .checked_add(len)
            .ok_or_else(|| at.corrupt(pos as u64, "element lengths overflow".into()))?;
        each(len);
    }
    let lengths_len = pos;
    let stored_masked = get_fixed32(data, pos).ok_or_else(|| {
        at.corrupt(
            pos as u64,
            "data ends before the checksum of the lengths".into(),
        )
    })?;
    let stored = unmask_crc(if big_endian {
        stored_masked.swap_bytes()
    } else {
        stored_masked
    });
    if stored != crc {
        return Err(Error::ChecksumMismatch {
            what: "string lengths",
            name: Some(format!("{} (file {})", at.name, at.path)),
            offset: at.offset,
            len: lengths_len as u64,
            stored,
            computed: crc,
            context: None,
        });
    }
    pos += 4;
    let left = (data.len() - pos) as u64;
    if total != left {
        return Err(at.corrupt(
            pos as u64,
            format!("element lengths add up to {total} bytes but {left} bytes follow"),
        ));
    }
    Ok(StringLayout {
        bytes_start: pos,
        total,
    })
}

/// Decodes the `n` elements of a string tensor (see [`read_lengths`] for the checks).
pub fn decode(data: &[u8], n: u64, big_endian: bool, at: StringsAt<'_>) -> Result<Vec<Vec<u8>>> {
    // n <= data.len() is checked by read_lengths before anything is allocated.
    let mut lens = Vec::new();
    let lay = read_lengths(data, n, big_endian, at, |l| lens.push(l))?;
    let mut out = Vec::with_capacity(lens.len());
    let mut pos = lay.bytes_start;
    for len in lens {
        // Every length is <= total == bytes left, so these fit in usize and in data.
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| pos.checked_add(l))
            .filter(|&e| e <= data.len())
            .ok_or_else(|| at.corrupt(pos as u64, "element runs past the data".into()))?;
        out.push(data[pos..end].to_vec());
        pos = end;
    }
    Ok(out)
}

/// Encodes string elements as TensorFlow writes them (little-endian); returns the bytes and
/// the masked CRC32C to store in the entry.
pub fn encode(elements: &[Vec<u8>]) -> (Vec<u8>, u32) {
    let mut out = Vec::new();
    let mut crc = 0u32;
    for e in elements {
        put_varint64(&mut out, e.len() as u64);
        crc = crc_len(crc, e.len() as u64, false);
    }
    let len_crc = mask_crc(crc).to_le_bytes();
    out.extend_from_slice(&len_crc);
    for e in elements {
        out.extend_from_slice(e);
    }
    (out, mask_crc(string_tensor_crc(elements, len_crc)))
}

/// The (unmasked) CRC32C TensorFlow stores in a string tensor's entry: over the lengths as
/// little-endian u32/u64, the 4 stored length-checksum bytes, then the element bytes.
fn string_tensor_crc(elements: &[Vec<u8>], len_crc: [u8; 4]) -> u32 {
    let mut crc = 0u32;
    for e in elements {
        crc = crc_len(crc, e.len() as u64, false);
    }
    crc = crc32c_extend(crc, &len_crc);
    for e in elements {
        crc = crc32c_extend(crc, e);
    }
    crc
}

/// The (unmasked) entry CRC of string data exactly as stored (`data` = the tensor's bytes,
/// already checked by [`read_lengths`] to have layout `lay`).
pub fn stored_data_crc(data: &[u8], n: u64, big_endian: bool, at: StringsAt<'_>) -> Result<u32> {
    let mut crc = 0u32;
    let lay = read_lengths(data, n, big_endian, at, |l| {
        crc = crc_len(crc, l, big_endian)
    })?;
    let tail = &data[lay.bytes_start - 4..];
    Ok(crc32c_extend(crc, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: StringsAt<'static> = StringsAt {
        path: "mem",
        name: "s",
        offset: 0,
    };

    #[test]
    fn matches_tensorflow_bytes() {
        // Reference section 5: ["ab", "c"] -> 02 01 03 71 7c 67 61 62 63, crc 0x5fd830d5.
        let els = vec![b"ab".to_vec(), b"c".to_vec()];
        let (data, crc) = encode(&els);
        assert_eq!(data, [0x02, 0x01, 0x03, 0x71, 0x7c, 0x67, 0x61, 0x62, 0x63]);
        assert_eq!(crc, 0x5fd8_30d5);
        assert_eq!(decode(&data, 2, false, AT).unwrap(), els);
        assert_eq!(mask_crc(stored_data_crc(&data, 2, false, AT).unwrap()), crc);
    }

    #[test]
    fn rejects_corruption_without_panicking() {
        let els = vec![b"hello".to_vec(), Vec::new(), vec![0xff; 300]];
        let (data, _) = encode(&els);
        for n in 0..data.len() {
            assert!(decode(&data[..n], 3, false, AT).is_err());
        }
        for i in 0..data.len() {
            let mut d = data.clone();
            d[i] ^= 0x40;
            // Either detected, or (element bytes only) decoded to something different.
            if let Ok(v) = decode(&d, 3, false, AT) {
                assert!(i >= data.len() - 305 && v != els);
            }
        }
        let e = decode(&data, u64::MAX, false, AT).unwrap_err();
        assert!(e.to_string().contains("cannot fit"), "{e}");
        let mut d = data.clone();
        d[0] = 6; // length 6 instead of 5: checksum of lengths no longer matches
        assert!(matches!(
            decode(&d, 3, false, AT),
            Err(Error::ChecksumMismatch { .. })
        ));
    }
}
