//! Reading one block of a table, as LevelDB's `table/format.cc` does (`ReadBlock`): the block's
//! stored bytes and trailer, bounds-checked against the bytes held ([`read_raw`]), its CRC
//! ([`verify_crc`]) and its Snappy decompression ([`decompress`]), and what a data block's
//! contents are once loaded ([`BlockBytes`]). Every read of a block from the bytes a
//! [`Table`](super::Table) or a [`TableIndex`](super::TableIndex) holds goes through
//! [`read_raw`], and every trailer CRC through [`verify_crc_of`], so that the bounds and
//! checksum rules live in one place.

use std::ops::Deref;
use std::sync::Arc;

use super::footer::BlockHandle;
use super::{BLOCK_TRAILER_LEN, MAX_BLOCK_LEN};
use crate::error::{ensure_within, Error, Result};
use crate::format::{crc32c, crc32c_extend, get_fixed32, unmask_crc};

/// The contents of a data block: borrowed from the file when stored uncompressed, or a shared
/// decompressed copy.
#[derive(Debug, Clone)]
pub enum BlockBytes<'a> {
    /// Uncompressed block, read in place from the file.
    Mapped(&'a [u8]),
    /// Decompressed block (possibly shared with the block cache).
    Cached(Arc<[u8]>),
    /// Uncompressed block read into memory through the read seam (a table over the end of a
    /// file, [`Table::new_ranged`](super::Table::new_ranged)), shared with the block cache.
    Fetched(Arc<[u8]>),
}

impl Deref for BlockBytes<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            BlockBytes::Mapped(b) => b,
            BlockBytes::Cached(b) | BlockBytes::Fetched(b) => b,
        }
    }
}

/// Extent of a block and its trailer (exclusive end), if it does not overflow.
pub(super) fn block_end(h: &BlockHandle) -> Option<u64> {
    h.offset
        .checked_add(h.size)?
        .checked_add(BLOCK_TRAILER_LEN as u64)
}

/// Decompresses a Snappy block, refusing to allocate more than the format can encode.
pub(super) fn decompress(contents: &[u8], offset: u64) -> Result<Vec<u8>> {
    let bad = |d: String| {
        Error::corrupt(
            "block",
            offset,
            format!("corrupted compressed block contents: {d}"),
        )
    };
    if contents.is_empty() {
        return Err(bad("empty".into()));
    }
    let n = snap::raw::decompress_len(contents).map_err(|e| bad(e.to_string()))?;
    ensure_within("decompressed block length", n, MAX_BLOCK_LEN, Some(offset))?;
    if !matches!(contents.len().checked_mul(32), Some(m) if n <= m) {
        return Err(bad(format!(
            "claims {n} bytes from {} compressed bytes",
            contents.len()
        )));
    }
    let mut out = vec![0u8; n];
    let got = snap::raw::Decoder::new()
        .decompress(contents, &mut out)
        .map_err(|e| bad(e.to_string()))?;
    if got != n {
        return Err(bad(format!("decompressed to {got} bytes, header says {n}")));
    }
    Ok(out)
}

/// The block's stored bytes, type byte and stored (masked) CRC, bounds-checked against `file`,
/// which holds the file's bytes from offset `base` to its end.
pub(super) fn read_raw<'f>(
    file: &'f [u8],
    base: u64,
    h: &BlockHandle,
) -> Result<(&'f [u8], u8, u32)> {
    let out_of_file = || {
        Error::truncated(
            "block",
            h.offset,
            format!(
                "truncated block read: block of {} bytes (+{BLOCK_TRAILER_LEN}) runs past the end of the {}-byte file{}",
                h.size,
                base.saturating_add(file.len() as u64),
                if base > 0 { format!(" (or before offset {base}, where the bytes read start)") } else { String::new() }
            ),
        )
    };
    let start = h
        .offset
        .checked_sub(base)
        .and_then(|o| usize::try_from(o).ok())
        .ok_or_else(out_of_file)?;
    let size = usize::try_from(h.size).map_err(|_| out_of_file())?;
    let end = start
        .checked_add(size)
        .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN))
        .ok_or_else(out_of_file)?;
    let all = file.get(start..end).ok_or_else(out_of_file)?;
    let (contents, trailer) = all.split_at(size);
    let stored = get_fixed32(trailer, 1).ok_or_else(out_of_file)?;
    Ok((contents, trailer[0], stored))
}

pub(super) fn bad_type(offset: u64, ty: u8) -> Error {
    Error::corrupt("block", offset, format!("bad block type {ty}"))
}

/// Checks a block's trailer CRC (over the stored bytes and the type byte).
pub(super) fn verify_crc(
    h: &BlockHandle,
    contents: &[u8],
    ty: u8,
    stored_masked: u32,
) -> Result<()> {
    verify_crc_of("block", h, contents, ty, stored_masked)
}

/// [`verify_crc`] of a block that the error names `what` (the metaindex block).
pub(super) fn verify_crc_of(
    what: &'static str,
    h: &BlockHandle,
    contents: &[u8],
    ty: u8,
    stored_masked: u32,
) -> Result<()> {
    let computed = crc32c_extend(crc32c(contents), &[ty]);
    let stored = unmask_crc(stored_masked);
    if computed != stored {
        return Err(Error::ChecksumMismatch {
            what,
            name: None,
            offset: h.offset,
            len: h.size,
            stored,
            computed,
            context: None,
        });
    }
    Ok(())
}
