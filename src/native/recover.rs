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

use crate::dtype::DType;
use crate::error::{Corruption, Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::native::bytes_value;
use crate::native::header::FileHeader;
use crate::native::mapped::MappedReader;
use crate::native::region;
use crate::native::slice_key;
use crate::native::source::Source;
use crate::native::staging;
use crate::native::verify::VerifyOptions;
use crate::native::writer::{Tensor, Writer, WriterOptions};
use crate::progress::{NoProgress, Progress, Unit};
use crate::record;
use crate::table::{Table, TableReadOptions, FOOTER_LEN, TABLE_MAGIC};

/// What [`recover`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecoverReport {
    /// Complete records copied into the new file.
    pub recovered: u64,
    /// Bytes of the input that were read as complete records: the offset where the valid
    /// records end, and where the torn tail (if any) starts.
    pub good_bytes: u64,
    /// Bytes after the last complete record (torn tail, index, or garbage), dropped.
    pub discarded_bytes: u64,
    /// Why the scan stopped, when it stopped before the end of the input (for logs: what the
    /// bytes at [`RecoverReport::good_bytes`] are; a torn tail usually does not decode).
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
    /// The data bytes: lent by the input, or for a compressed record (SPEC.md 3.4) decoded
    /// (its stored bytes are the input's `header.data_len` bytes after the header).
    pub data: std::borrow::Cow<'a, [u8]>,
}

/// Why a walk over records stopped before the end of the input.
#[derive(Debug)]
enum Stop {
    /// The bytes do not decode as a record (the error says why).
    Undecodable(Error),
    /// A record without paramdex's header checksum or name: a plain Paddle record.
    NotParamdex(&'static str),
    /// A paramdex record whose data does not match its checksum (a torn write).
    DataMismatch,
}

impl Stop {
    fn describe(&self, pos: u64) -> String {
        match self {
            Stop::Undecodable(e) => format!("at offset {pos}: {e}"),
            Stop::NotParamdex(what) => {
                format!("at offset {pos}: record {what} (not written by paramdex)")
            }
            Stop::DataMismatch => {
                format!("at offset {pos}: record data does not match its checksum (torn write)")
            }
        }
    }
}

/// The leading complete records of `bytes`, one at a time: each decodes (its header checksum
/// matching), is named, and its data matches its checksum. Ends at the first that does not,
/// keeping why in `stop`.
struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    stop: Option<Stop>,
}

impl<'a> Records<'a> {
    fn new(bytes: &'a [u8]) -> Records<'a> {
        Records {
            bytes,
            pos: 0,
            stop: None,
        }
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = FoundRecord<'a>;

    fn next(&mut self) -> Option<FoundRecord<'a>> {
        if self.stop.is_some() || self.pos >= self.bytes.len() {
            return None;
        }
        let pos = self.pos;
        let (mut header, stored) = match record::decode_record(&self.bytes[pos..], pos as u64) {
            Ok(x) => x,
            Err(e) => {
                self.stop = Some(Stop::Undecodable(e));
                return None;
            }
        };
        // A compressed record (SPEC.md 3.4): its data decoded (a chunk table or stream that
        // does not decode stops the walk, as a torn record does), its checksum the decoded
        // data's.
        let data: std::borrow::Cow<'a, [u8]> = if header.codec != 0 {
            let shown = header
                .name
                .map_or_else(|| "<unnamed>".to_string(), crate::name::display);
            let at = record::lossless::At {
                name: &shown,
                offset: (pos + header.header_len) as u64,
            };
            match record::lossless::decode(stored, header.dtype, header.decoded_len, 0, at) {
                Ok(d) => std::borrow::Cow::Owned(d),
                Err(e) => {
                    self.stop = Some(Stop::Undecodable(e));
                    return None;
                }
            }
        } else {
            std::borrow::Cow::Borrowed(stored)
        };
        let stop = if header.header_crc.is_none() {
            Some(Stop::NotParamdex("header has no checksum"))
        } else if header.name.is_none() {
            Some(Stop::NotParamdex("has no name"))
        } else if header
            .data_crc
            .is_none_or(|stored| unmask_crc(stored) != crc32c(&data))
        {
            // A bytes value's `uint8` record carries TensorFlow's string checksum of its
            // encoding (SPEC.md 6.1): that it matches is what marks the record as one.
            let is_bytes_value = header.dtype == DType::UInt8
                && header.full_shape.is_none()
                && header.lod.is_empty()
                && header.data_crc.is_some_and(|stored| {
                    bytes_value::entry_crc(&data, "record", pos as u64).ok() == Some(stored)
                });
            if is_bytes_value {
                header.dtype = DType::Bytes;
                None
            } else {
                Some(Stop::DataMismatch)
            }
        } else {
            None
        };
        if stop.is_some() {
            self.stop = stop;
            return None;
        }
        let len = usize::try_from(header.record_len())
            .expect("decode_record checked that the record lies within the input");
        self.pos += len;
        Some(FoundRecord {
            offset: pos as u64,
            header,
            data,
        })
    }
}

/// Walks `bytes` from offset 0 and returns every leading complete record, plus why it stopped
/// (`None` if the input ended exactly after a record).
pub fn scan(bytes: &[u8]) -> (Vec<FoundRecord<'_>>, Option<String>) {
    let mut it = Records::new(bytes);
    let found: Vec<_> = it.by_ref().collect();
    let why = it.stop.map(|s| s.describe(it.pos as u64));
    (found, why)
}

/// Reads the torn file `input` and writes every complete record into a new file at `output`.
///
/// # Errors
///
/// Before `output` is created: [`Error::UnrecognizedFormat`] when `input` is not a paramdex
/// file at all (a directory, an empty file, bytes that do not start with a paramdex record,
/// records without paramdex's names and checksums such as a Paddle `.pdiparams`), and
/// [`Error::Corrupt`] when it starts like one but holds no complete record (kind
/// [`Corruption::Truncated`] when it ends inside its first record). Then I/O errors.
pub fn recover(input: &Path, output: &Path, opts: WriterOptions) -> Result<RecoverReport> {
    let source = map_file(input)?;
    recover_records(input, &source, output, opts, &NoProgress)
}

/// Maps `input`, refusing a directory.
fn map_file(input: &Path) -> Result<Source> {
    if input.is_dir() {
        return Err(Error::UnrecognizedFormat {
            path: input.display().to_string(),
            looks_like: None,
            detail: "a directory, not a paramdex file (recover reads one torn file)".into(),
        });
    }
    Source::map(input)
}

/// [`recover`] of the mapped `source`, reporting its bytes to `progress` as records are copied.
fn recover_records(
    input: &Path,
    source: &[u8],
    output: &Path,
    opts: WriterOptions,
    progress: &dyn Progress,
) -> Result<RecoverReport> {
    let mut records = Records::new(source);
    let Some(first) = records.next() else {
        return Err(nothing_to_recover(input, source, records.stop.take()));
    };
    progress.start(source.len() as u64, Unit::Bytes);
    let mut w = Writer::create_with(output, opts)?;
    let mut report = RecoverReport::default();
    let mut end = 0u64;
    for r in std::iter::once(first).chain(records.by_ref()) {
        let len = r.header.record_len();
        end = r.offset + len;
        let lod = r.header.lod.to_vec();
        let name = r.header.name.expect("scan keeps only named records");
        let added = match (&r.header.full_shape, slice_key::decode(name)) {
            // A slice (SPEC.md 13): its record names its key and the whole tensor's shape.
            (Some(full), Some(key)) => match region::resolve(&key.extents, full) {
                Ok(region) if region.len.as_slice() == r.header.dims.as_slice() => {
                    w.add_slice(&key.name, r.header.dtype, full, &region, &r.data)
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
                Tensor::new(r.header.dtype, &r.header.dims, &r.data).with_lod(&lod),
            ),
        };
        match added {
            Ok(()) => report.recovered += 1,
            Err(Error::DuplicateName { .. }) => report.duplicates_skipped += 1,
            Err(e) => return Err(e),
        }
        progress.advance(len);
    }
    report.stopped_because = records.stop.take().map(|s| s.describe(end));
    report.good_bytes = end;
    report.discarded_bytes = source.len() as u64 - end;
    w.finish()?;
    progress.advance(report.discarded_bytes);
    Ok(report)
}

/// Why a walk that found no complete record found none, as the error [`recover`] returns.
fn nothing_to_recover(input: &Path, source: &[u8], stop: Option<Stop>) -> Error {
    let path = input.display().to_string();
    let unrecognized = |detail: String| Error::UnrecognizedFormat {
        path: path.clone(),
        looks_like: None,
        detail,
    };
    if source.is_empty() {
        return unrecognized(
            "the file is empty: not a paramdex file, and no record to recover".into(),
        );
    }
    let hint = "recover rebuilds a paramdex file from the records of a torn one";
    match stop {
        Some(Stop::Undecodable(e)) if e.corruption() == Some(Corruption::Truncated) => {
            Error::Corrupt {
                what: "record",
                offset: 0,
                kind: Corruption::Truncated,
                detail: format!(
                    "{path}: the file ({} bytes) ends inside its first record: no complete \
                     record to recover ({e})",
                    source.len()
                ),
            }
        }
        Some(Stop::Undecodable(_)) => {
            let head: Vec<String> = source.iter().take(8).map(|b| format!("{b:02x}")).collect();
            unrecognized(format!(
                "does not start with a paramdex record (its first bytes are {}): not a paramdex \
                 file; {hint}",
                head.join(" ")
            ))
        }
        Some(Stop::NotParamdex(what)) => unrecognized(format!(
            "its first record {what}: a Paddle tensor stream (a .pdiparams or tensor file), not \
             a paramdex file; {hint}"
        )),
        Some(Stop::DataMismatch) => Error::corrupt(
            "record",
            0,
            format!(
                "{path}: the data of the first record does not match its checksum: no complete \
                 record to recover"
            ),
        ),
        None => unrecognized(format!("no record found: not a paramdex file; {hint}")),
    }
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
    /// The input is a complete native file whose every checksum matches ([`Reader::verify`](crate::Reader::verify)):
    /// it needs no recovery, and nothing was written.
    Intact {
        /// Its tensors.
        tensors: u64,
    },
}

/// How to [`recover_any_with`].
#[derive(Clone, Default)]
pub struct RecoverOptions<'a> {
    /// Layout of a file rebuilt from records.
    pub writer: WriterOptions,
    /// Told each pass over the input ([`Unit::Bytes`]): the check of a file that opens (its
    /// data bytes, as [`Reader::verify_with`](crate::Reader::verify_with) reports them), then, if the input must be
    /// rebuilt, the input's bytes as they are copied.
    pub progress: Option<&'a dyn Progress>,
}

impl std::fmt::Debug for RecoverOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecoverOptions")
            .field("writer", &self.writer)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// [`recover_any_with`] without progress reports.
pub fn recover_any(input: &Path, output: &Path, opts: WriterOptions) -> Result<Recovered> {
    recover_any_with(
        input,
        output,
        &RecoverOptions {
            writer: opts,
            progress: None,
        },
    )
}

/// Rebuilds a complete native file at `output` from a torn one, choosing how (the policy the
/// CLI's `recover` reports):
///
/// 1. a file that opens and passes [`Reader::verify`](crate::Reader::verify) needs nothing: [`Recovered::Intact`],
///    and `output` is not written;
/// 2. a file that does not open but whose prefix is a complete file (an interrupted metadata
///    rewrite) gets that previous file back exactly, checked by [`Reader::verify`](crate::Reader::verify);
/// 3. otherwise (a writer's temporary file after a crash, a file whose index or data is
///    damaged) every complete leading record is copied into a new file ([`recover`]).
///
/// `output` appears only when it is complete.
///
/// # Errors
///
/// As [`recover`]: an input that is not a paramdex file is [`Error::UnrecognizedFormat`] and
/// nothing is written.
pub fn recover_any_with(
    input: &Path,
    output: &Path,
    opts: &RecoverOptions<'_>,
) -> Result<Recovered> {
    let progress = opts.progress.unwrap_or(&NoProgress);
    let source = map_file(input)?;
    match MappedReader::open(input) {
        Ok(r) => {
            let checked = r.verify_with(VerifyOptions {
                load: None,
                progress: opts.progress,
                ..VerifyOptions::default()
            });
            if let Ok(rep) = checked {
                return Ok(Recovered::Intact {
                    tensors: rep.tensors,
                });
            }
        }
        Err(_) => {
            if let Some(len) = last_complete_len(&source) {
                let end = usize::try_from(len).expect("a prefix of the mapped file");
                // One write (fast beside the checks): reported when done.
                progress.start(len, Unit::Bytes);
                staging::write_staged(output, ".tmp", |w| {
                    w.write_all(&source[..end])
                        .map_err(|e| crate::Error::io(format!("writing {}", output.display()), e))
                })?;
                progress.advance(len);
                MappedReader::open(output)?.verify()?;
                return Ok(Recovered::PreviousFile {
                    len,
                    discarded: source.len() as u64 - len,
                });
            }
        }
    }
    recover_records(input, &source, output, opts.writer.clone(), progress).map(Recovered::Records)
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
        Ok(h) if crate::native::is_known_version(h.format_version) && h.records_len <= first)
}
