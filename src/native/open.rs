//! The one open of a native file's index table (SPEC.md 8.2), whatever holds its bytes: the
//! footer and, usually, the index block in one read of the file's tail; the header's block;
//! the header decoded. [`crate::Reader`] (a mapped file: the "read" lends the whole mapping),
//! the remote reader (an object: ranged GETs) and the shard-index reader of a merge (`pread`,
//! or an object) all open through it.

use std::borrow::Cow;

use crate::error::{Corruption, Error, Result};
use crate::format::pbwire::{self, WireType};
use crate::format::ReadAt;
use crate::native::header::FileHeader;
use crate::table::{
    BlockHandle, Footer, SharedBytes, Table, TableIndex, TableReadOptions, BLOCK_TRAILER_LEN,
    FOOTER_LEN, MAX_BLOCK_LEN,
};

/// A native file's index table as an open read it.
#[derive(Debug)]
pub(crate) struct Opened<'s> {
    /// The bytes read, from `held_start` to the file's end (the whole file, borrowed, for a
    /// source that lends its bytes).
    pub(crate) held: Cow<'s, [u8]>,
    pub(crate) held_start: u64,
    pub(crate) index: TableIndex,
    /// The header entry, decoded (not yet checked: [`crate::native::validate_header`]).
    pub(crate) header: FileHeader,
    /// Offset of the first index data block (the header's).
    pub(crate) first_block: u64,
}

/// Opens the index table of the native file `src` (shown as `path`): reads its last
/// `tail_bytes` bytes (at least the footer; a source that lends its bytes is held whole), the
/// rest of the index block if the tail does not hold it, and the header's block if not held;
/// decodes the footer, the index block (checked, [`TableIndex::open_tail`]) and the header.
/// With `hold_index`, every index data block is read too (one read from the first data block
/// to the bytes held, before the header is decoded): what a reader of the whole index (a
/// merge's reader of a shard's index) wants, without a read of the header's block alone.
///
/// Errors name `path` (block reads through the index's location, [`TableIndex::set_location`]):
/// [`Error::UnrecognizedFormat`] for a file too short for a footer or without the
/// table magic, unless it starts with a paramdex record ([`Error::Corrupt`] of kind
/// [`Corruption::Truncated`] then: a torn paramdex file); [`Error::Unsupported`] for a TensorFlow V1 checkpoint; [`Error::Corrupt`] (and
/// the table's errors) for the rest.
pub(crate) fn open_index<'s>(
    src: &'s dyn ReadAt,
    tail_bytes: u64,
    hold_index: bool,
    opts: &TableReadOptions,
    path: &str,
) -> Result<Opened<'s>> {
    open_index_in(src, None, tail_bytes, hold_index, opts, path)
}

/// [`open_index`] of a source that lends its bytes, whose owner `shared` (holding the same
/// bytes as `src`: a mapped file) the index keeps, to read its index block in place
/// ([`TableIndex::open_shared`]) instead of copying it.
pub(crate) fn open_index_shared<'s>(
    src: &'s dyn ReadAt,
    shared: SharedBytes,
    opts: &TableReadOptions,
    path: &str,
) -> Result<Opened<'s>> {
    open_index_in(src, Some(shared), u64::MAX, false, opts, path)
}

fn open_index_in<'s>(
    src: &'s dyn ReadAt,
    shared: Option<SharedBytes>,
    tail_bytes: u64,
    hold_index: bool,
    opts: &TableReadOptions,
    path: &str,
) -> Result<Opened<'s>> {
    let len = src.len();
    if len < FOOTER_LEN as u64 {
        return Err(
            torn(src, len, path).unwrap_or_else(|| Error::UnrecognizedFormat {
                path: path.to_string(),
                looks_like: None,
                detail: format!("{len} bytes is too short to be a paramdex file (48-byte footer)"),
            }),
        );
    }
    let mut held = src.tail_at(tail_bytes.clamp(FOOTER_LEN as u64, len))?;
    if held.len() < FOOTER_LEN || held.len() as u64 > len {
        return Err(Error::truncated(
            "footer",
            len,
            format!("{path}: a read of the tail gave {} bytes", held.len()),
        ));
    }
    let mut held_start = len - held.len() as u64;
    let footer_at = len - FOOTER_LEN as u64;
    let footer =
        Footer::decode(&held[held.len() - FOOTER_LEN..], footer_at).map_err(|e| match e {
            Error::Corrupt {
                kind: Corruption::BadMagic,
                detail,
                ..
            } => torn(src, len, path).unwrap_or_else(|| Error::UnrecognizedFormat {
                path: path.to_string(),
                looks_like: None,
                detail: format!("not a paramdex file: {detail}"),
            }),
            other => other.context(path),
        })?;
    let idx: BlockHandle = footer.index;
    // The index block ends at the footer (checked again by the table reader); its size is
    // bounded before anything is read for it.
    footer_at
        .checked_sub(idx.offset)
        .filter(|&n| n <= (MAX_BLOCK_LEN + BLOCK_TRAILER_LEN) as u64)
        .ok_or_else(|| {
            Error::corrupt(
                "footer",
                footer_at,
                format!(
                    "index block handle (offset {}) does not end at the footer",
                    idx.offset
                ),
            )
            .context(path)
        })?;
    if idx.offset < held_start {
        // A larger index block than the tail held: one more read.
        (held, held_start) = hold_from(src, held, held_start, idx.offset)?;
    }
    let index = match shared {
        // The whole file, lent by the source that `shared` owns.
        Some(file) if held_start == 0 && (*file).as_ref().len() == held.len() => {
            TableIndex::open_shared(file, opts)
        }
        _ => TableIndex::open_tail(&held, held_start, opts),
    };
    let mut index = index.map_err(|e| e.context(path))?;
    // Errors of reading its blocks name the file.
    index.set_location(path);
    let first_block = index.first_data_offset().unwrap_or(idx.offset);
    if hold_index {
        (held, held_start) = hold_from(src, held, held_start, first_block)?;
    }
    let header = {
        let table = Table::new_ranged(&held, held_start, src, &index);
        let mut it = table.iter();
        it.seek_to_first()?;
        if !it.valid() || !it.key().is_empty() {
            return Err(Error::corrupt(
                "header entry",
                first_block,
                "the first key is not the empty header key",
            )
            .context(path));
        }
        let value = it.value();
        FileHeader::decode(value, first_block).map_err(|e| {
            // TensorFlow's V1 checkpoints (TensorSliceWriter) are LevelDB tables too, and
            // their "" entry is a SavedTensorSlices whose field 1 is a message, where a
            // bundle header has the varint num_shards.
            let v1 = pbwire::read_tag(value, 0)
                .is_some_and(|(tag, _)| tag == pbwire::Tag::new(1, WireType::LEN));
            if v1 {
                Error::Unsupported(format!(
                    "{path}: a TensorFlow V1 checkpoint (TensorSliceWriter, \
                     tf.compat.v1.train.Saver(write_version=V1)), which paramdex does not \
                     read: load it in TensorFlow and save it again with the default V2 \
                     format (a PREFIX.index and PREFIX.data-* files)"
                ))
            } else {
                e.context(path)
            }
        })?
    };
    Ok(Opened {
        held,
        held_start,
        index,
        header,
        first_block,
    })
}

/// Most bytes read from the start of a file without a footer to tell whether it starts with a
/// paramdex record: a record header of the longest name (64 KiB), a LoD and a shape fits.
const TORN_PROBE: u64 = 256 * 1024;

/// The error for `src` (shown as `path`, `len` bytes), whose end is no paramdex footer, when it
/// starts with a paramdex record (a header whose checksum matches and that names its tensor,
/// SPEC.md 3.2): a paramdex file cut short or whose end was damaged, most often a write that
/// did not finish. [`Error::Corrupt`] of kind [`Corruption::Truncated`]: on structure
/// [`Error::TORN_FILE`] (which [`Error::recoverable`] tells) when its first record is whole, so
/// `recover` has something to rebuild a file from; on structure `record` when it ends inside
/// its first record. `None` for any other start (the caller's `UnrecognizedFormat`).
fn torn(src: &dyn ReadAt, len: u64, path: &str) -> Option<Error> {
    let head = src.read(0..len.min(TORN_PROBE)).ok()?;
    let h = crate::record::decode_head(&head, 0).ok()?;
    let name = h.name.filter(|_| h.header_crc.is_some())?;
    let name = crate::name::display(name);
    let first_end = (h.header_len as u64).saturating_add(h.data_len);
    Some(if first_end <= len {
        Error::Corrupt {
            what: Error::TORN_FILE,
            offset: len,
            kind: Corruption::Truncated,
            detail: format!(
                "{path}: whole records with paramdex names (the first is tensor {name}), but \
                 no index table and footer after them: a truncated or torn paramdex file (a \
                 write that did not finish); `paramdex recover` rebuilds one from its records"
            ),
        }
    } else {
        Error::truncated(
            "record",
            0,
            format!(
                "{path}: a paramdex file cut short inside its first record (tensor {name}, \
                 {first_end} bytes; the file has {len}): no complete record to recover"
            ),
        )
    })
}

/// The bytes `held` (the file's from `held_start` on) extended back to `from`, with one read
/// of `src` for the bytes before them (none when they are held already).
pub(crate) fn hold_from<'s>(
    src: &'s dyn ReadAt,
    held: Cow<'s, [u8]>,
    held_start: u64,
    from: u64,
) -> Result<(Cow<'s, [u8]>, u64)> {
    if from >= held_start {
        return Ok((held, held_start));
    }
    let mut more = src.read(from..held_start)?;
    more.extend_from_slice(&held);
    Ok((Cow::Owned(more), from))
}
