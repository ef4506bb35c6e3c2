//! The zip container of `torch.save` files, read from its central directory with every offset
//! and length checked against the file (hand-written rather than the `zip` crate: torch
//! writes stored entries only, so what is needed is the directory and the data offsets, in
//! about as many lines as the glue to a crate, with no decompressor to audit).

use crate::error::{Error, Result};

/// Most entries read from one central directory.
pub const MAX_ENTRIES: u64 = 1 << 20;

/// One entry of the central directory.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) name: Vec<u8>,
    /// Offset of its data in the file (past the local header).
    pub(crate) data_offset: u64,
    /// Its stored length.
    pub(crate) len: u64,
    /// The CRC-32 the directory records for its uncompressed bytes.
    pub(crate) crc32: u32,
    /// The compression method (0: stored).
    pub(crate) method: u16,
}

const EOCD: u32 = 0x0605_4b50;
const EOCD64: u32 = 0x0606_4b50;
const EOCD64_LOCATOR: u32 = 0x0706_4b50;
const CENTRAL: u32 = 0x0201_4b50;
const LOCAL: u32 = 0x0403_4b50;

/// Whether `head` starts with a zip local header signature.
pub(crate) fn starts_like(head: &[u8]) -> bool {
    head.len() >= 4 && head[..4] == LOCAL.to_le_bytes()
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn bad(offset: u64, detail: impl Into<String>) -> Error {
    Error::corrupt("zip directory", offset, detail)
}

/// `bytes[start..start+len]`, or a corruption naming `what`.
fn range(bytes: &[u8], start: u64, len: u64, what: &str) -> Result<std::ops::Range<usize>> {
    let end = start
        .checked_add(len)
        .filter(|&e| e <= bytes.len() as u64)
        .ok_or_else(|| {
            bad(
                start,
                format!(
                    "{what} of {len} bytes at offset {start} runs past the end of the file ({} bytes)",
                    bytes.len()
                ),
            )
        })?;
    // Both at most bytes.len().
    Ok(start as usize..end as usize)
}

/// The entries of the zip file `bytes`, in directory order; `None` when no end-of-directory
/// record is found (not a zip file, or one cut short).
pub(crate) fn entries(bytes: &[u8]) -> Result<Option<Vec<Entry>>> {
    // The end-of-central-directory record: 22 bytes, then a comment of at most 65535 bytes.
    let min = bytes.len().saturating_sub(22 + 0xffff);
    let Some(eocd) = (min..=bytes.len().saturating_sub(22))
        .rev()
        .find(|&i| u32_at(bytes, i) == Some(EOCD))
    else {
        return Ok(None);
    };
    let e = &bytes[eocd..];
    let short = || bad(eocd as u64, "the end-of-directory record is cut short");
    let mut count = u64::from(u16_at(e, 10).ok_or_else(short)?);
    let mut cd_len = u64::from(u32_at(e, 12).ok_or_else(short)?);
    let mut cd_off = u64::from(u32_at(e, 16).ok_or_else(short)?);
    if count == 0xffff || cd_len == 0xffff_ffff || cd_off == 0xffff_ffff {
        // Zip64: the locator sits just before the record and points at the zip64 record.
        let loc = eocd
            .checked_sub(20)
            .filter(|&l| u32_at(bytes, l) == Some(EOCD64_LOCATOR))
            .ok_or_else(|| bad(eocd as u64, "zip64 sizes without a zip64 locator"))?;
        let at = u64_at(bytes, loc + 8).ok_or_else(short)?;
        let r = range(bytes, at, 56, "the zip64 end-of-directory record")?;
        let z = &bytes[r];
        if u32_at(z, 0) != Some(EOCD64) {
            return Err(bad(
                at,
                "no zip64 end-of-directory record where its locator points",
            ));
        }
        count = u64_at(z, 32).ok_or_else(short)?;
        cd_len = u64_at(z, 40).ok_or_else(short)?;
        cd_off = u64_at(z, 48).ok_or_else(short)?;
    }
    crate::error::ensure_within("zip entries", count, MAX_ENTRIES, Some(eocd as u64))?;
    let cd = range(bytes, cd_off, cd_len, "the central directory")?;
    let cd_start = cd.start;
    let cd = &bytes[cd];
    // Each entry takes at least 46 bytes of the directory: no more are reserved.
    let mut out = Vec::with_capacity((count as usize).min(cd.len() / 46));
    let mut p = 0usize;
    for i in 0..count {
        let at = (cd_start + p) as u64;
        let cut = || bad(at, format!("central directory entry {i} is cut short"));
        if u32_at(cd, p) != Some(CENTRAL) {
            return Err(bad(
                at,
                format!("central directory entry {i} has a bad signature"),
            ));
        }
        let method = u16_at(cd, p + 10).ok_or_else(cut)?;
        let crc32 = u32_at(cd, p + 16).ok_or_else(cut)?;
        let mut len = u64::from(u32_at(cd, p + 20).ok_or_else(cut)?);
        let mut uncompressed = u64::from(u32_at(cd, p + 24).ok_or_else(cut)?);
        let name_len = usize::from(u16_at(cd, p + 28).ok_or_else(cut)?);
        let extra_len = usize::from(u16_at(cd, p + 30).ok_or_else(cut)?);
        let comment_len = usize::from(u16_at(cd, p + 32).ok_or_else(cut)?);
        let mut local = u64::from(u32_at(cd, p + 42).ok_or_else(cut)?);
        let name = cd.get(p + 46..p + 46 + name_len).ok_or_else(cut)?.to_vec();
        let extra = cd
            .get(p + 46 + name_len..p + 46 + name_len + extra_len)
            .ok_or_else(cut)?;
        // Zip64 extended information: the 64-bit values of the fields stored as 0xffffffff,
        // in the order uncompressed, compressed, local header offset.
        let mut x = 0usize;
        while x + 4 <= extra.len() {
            let id = u16_at(extra, x).ok_or_else(cut)?;
            let n = usize::from(u16_at(extra, x + 2).ok_or_else(cut)?);
            let body = extra.get(x + 4..x + 4 + n).ok_or_else(cut)?;
            if id == 1 {
                let mut k = 0usize;
                for field in [&mut uncompressed, &mut len, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = u64_at(body, k).ok_or_else(cut)?;
                        k += 8;
                    }
                }
            }
            x += 4 + n;
        }
        p += 46 + name_len + extra_len + comment_len;
        // The local header repeats the name and has its own extra field: the data follows.
        let lh = range(bytes, local, 30, "a local header")?;
        let lh = &bytes[lh];
        if u32_at(lh, 0) != Some(LOCAL) {
            return Err(bad(
                local,
                "no local header where the central directory points",
            ));
        }
        let skip = 30
            + u64::from(u16_at(lh, 26).ok_or_else(cut)?)
            + u64::from(u16_at(lh, 28).ok_or_else(cut)?);
        let data_offset = local + skip;
        if method == 0 && uncompressed != len {
            return Err(bad(
                at,
                format!(
                    "stored entry {} has {len} bytes and an uncompressed size of {uncompressed}",
                    crate::name::display(&name)
                ),
            ));
        }
        range(bytes, data_offset, len, "an entry's data")
            .map_err(|e| e.context(&format!("zip entry {}", crate::name::display(&name))))?;
        out.push(Entry {
            name,
            data_offset,
            len,
            crc32,
            method,
        });
    }
    Ok(Some(out))
}

/// The CRC-32 (ISO-HDLC, zip's) of `bytes`.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xedb8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !0u32;
    for &b in bytes {
        c = TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    #[test]
    fn crc32_check_value() {
        assert_eq!(super::crc32(b"123456789"), 0xcbf4_3926);
    }
}
