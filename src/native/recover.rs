//! Rebuilding a complete file from the records of a torn one.
//!
//! Every record a paramdex writer produces names its tensor and carries the CRC32C of its header
//! and of its data (SPEC.md, "Records"), so the records region can be re-read without the index.
//! Recovery walks the records from offset 0 and keeps each one that decodes (its header checksum
//! matching), is named, and whose data matches its checksum; it stops at the first record that
//! does not (the torn tail, or the index table of a file that was in fact finished). A slice
//! record (SPEC.md 13) names its slice key and carries its tensor's whole shape, so slices are
//! recovered as slices. A shard's identity (SPEC.md 12.1) is in its index, which a torn file
//! lacks: what is recovered from a torn shard is a file of its own, not a shard of its save.

use std::path::Path;

use crate::error::Result;
use crate::format::{crc32c, unmask_crc};
use crate::native::header::FileHeader;
use crate::native::reader::Reader;
use crate::native::region;
use crate::native::slice_key;
use crate::native::source::Source;
use crate::native::staging;
use crate::native::writer::{Tensor, Writer, WriterOptions};
use crate::native::FORMAT_VERSION;
use crate::record;
use crate::table::{Table, TableReadOptions, FOOTER_LEN, TABLE_MAGIC};

/// What [`recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Complete records copied into the new file.
    pub recovered: u64,
    /// Bytes of the input that were read as complete records.
    pub good_bytes: u64,
    /// Bytes after the last complete record (torn tail, index, or garbage).
    pub discarded_bytes: u64,
    /// Why the scan stopped, when it stopped before the end of the input.
    pub stopped_because: Option<String>,
    /// Complete records skipped because their name had already been recovered.
    pub duplicates_skipped: u64,
}

/// A complete record found by [`scan`].
#[derive(Clone, Debug)]
pub struct FoundRecord<'a> {
    /// Absolute offset of the record.
    pub offset: u64,
    /// The record header.
    pub header: record::RecordHeader<'a>,
    /// The data bytes.
    pub data: &'a [u8],
}

/// Walks `bytes` from offset 0 and returns every leading complete record, plus why it stopped
/// (`None` if the input ended exactly after a record).
pub fn scan(bytes: &[u8]) -> (Vec<FoundRecord<'_>>, Option<String>) {
    let mut found = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let decoded = record::decode_record(&bytes[pos..], pos as u64);
        let (header, data) = match decoded {
            Ok(x) => x,
            Err(e) => return (found, Some(format!("at offset {pos}: {e}"))),
        };
        if header.header_crc.is_none() {
            return (
                found,
                Some(format!(
                    "at offset {pos}: record header has no checksum (not written by paramdex)"
                )),
            );
        }
        if header.name.is_none() {
            return (
                found,
                Some(format!(
                    "at offset {pos}: record has no name (not written by paramdex)"
                )),
            );
        }
        match header.data_crc {
            Some(stored) if unmask_crc(stored) == crc32c(data) => {}
            Some(_) => {
                return (
                    found,
                    Some(format!(
                        "at offset {pos}: record data does not match its checksum (torn write)"
                    )),
                )
            }
            None => {
                return (
                    found,
                    Some(format!("at offset {pos}: record has no checksum")),
                )
            }
        }
        let len = usize::try_from(header.record_len())
            .expect("decode_record checked that the record lies within the input");
        found.push(FoundRecord {
            offset: pos as u64,
            header,
            data,
        });
        pos += len;
    }
    (found, None)
}

/// Reads the torn file `input` and writes every complete record into a new file at `output`.
pub fn recover(input: &Path, output: &Path, opts: WriterOptions) -> Result<RecoverReport> {
    let source = Source::map(input)?;
    let (found, stopped) = scan(&source);
    let mut w = Writer::create_with(output, opts)?;
    let mut report = RecoverReport {
        stopped_because: stopped,
        ..Default::default()
    };
    let mut end = 0u64;
    for r in &found {
        end = r.offset + r.header.record_len();
        let lod = r.header.lod.to_vec();
        let name = r.header.name.expect("scan keeps only named records");
        let added = match (&r.header.full_shape, slice_key::decode(name)) {
            // A slice (SPEC.md 13): its record names its key and the whole tensor's shape.
            (Some(full), Some(key)) => match region::resolve(&key.extents, full) {
                Ok(region) if region.len.as_slice() == r.header.dims.as_slice() => {
                    w.add_slice(&key.name, r.header.dtype, full, &region, r.data)
                }
                _ => Err(crate::Error::corrupt(
                    "record",
                    r.offset,
                    format!(
                        "slice {} does not fit the shape {:?} its record gives",
                        slice_key::display_key(name),
                        full.as_slice()
                    ),
                )),
            },
            _ => w.add(
                name,
                Tensor::new(r.header.dtype, &r.header.dims, r.data).with_lod(&lod),
            ),
        };
        match added {
            Ok(()) => report.recovered += 1,
            Err(crate::Error::DuplicateName { .. }) => report.duplicates_skipped += 1,
            Err(e) => return Err(e),
        }
    }
    report.good_bytes = end;
    report.discarded_bytes = source.len() as u64 - end;
    w.finish()?;
    Ok(report)
}

/// What [`recover_any`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Recovered {
    /// The input is a complete file followed by a partial index (an interrupted
    /// [`crate::rewrite_in_place`]): the complete file before it was restored byte for byte.
    PreviousFile {
        /// Length of the restored file.
        len: u64,
        /// Bytes of the interrupted index that were dropped.
        discarded: u64,
    },
    /// Tensors were rebuilt from the input's records.
    Records(RecoverReport),
}

/// Rebuilds a complete native file at `output` from a torn one, choosing how (the policy the
/// CLI's `recover` reports): a file that does not open but whose prefix is a complete file
/// (an interrupted metadata rewrite) gets that previous file back exactly, checked by
/// [`Reader::verify`]; otherwise every complete record is copied into a new file
/// ([`recover`]). `output` appears only when it is complete.
pub fn recover_any(input: &Path, output: &Path, opts: WriterOptions) -> Result<Recovered> {
    if Reader::open(input).is_err() {
        let source = Source::map(input)?;
        if let Some(len) = last_complete_len(&source) {
            let end = usize::try_from(len).expect("a prefix of the mapped file");
            staging::write_atomically(&source[..end], output)?;
            Reader::open(output)?.verify()?;
            return Ok(Recovered::PreviousFile {
                len,
                discarded: source.len() as u64 - len,
            });
        }
    }
    recover(input, output, opts).map(Recovered::Records)
}

/// The length of the longest prefix of `bytes` that is a complete native file (footer, index
/// block and every data block checksum valid, a native header), if any: after a crash during
/// [`crate::rewrite_in_place`], the previous file. Candidates are the positions just after an
/// occurrence of the footer magic, tried from the end of `bytes` backwards.
pub fn last_complete_len(bytes: &[u8]) -> Option<u64> {
    let magic = TABLE_MAGIC.to_le_bytes();
    let mut end = bytes.len();
    while end >= FOOTER_LEN {
        let p = (FOOTER_LEN..=end)
            .rev()
            .find(|&p| bytes[p - magic.len()..p] == magic)?;
        if is_complete(&bytes[..p]) {
            return Some(p as u64);
        }
        end = p - 1;
    }
    None
}

fn is_complete(bytes: &[u8]) -> bool {
    let Ok(table) = Table::open(bytes, TableReadOptions::default()) else {
        return false;
    };
    if table.verify_all_blocks().is_err() {
        return false;
    }
    let mut it = table.iter();
    if it.seek_to_first().is_err() || !it.valid() || !it.key().is_empty() {
        return false;
    }
    let first = table.first_data_offset().unwrap_or(0);
    matches!(FileHeader::decode(it.value(), first),
        Ok(h) if (1..=FORMAT_VERSION).contains(&h.format_version) && h.records_len <= first)
}
