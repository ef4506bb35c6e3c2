//! Strict reading of Paddle record streams: a combined `.pdiparams` against its program's names,
//! and a file that must hold exactly one record.
//!
//! Paddle's `load_combine` reads one record per expected name and then requires EOF, but never
//! checks that a record's data was fully read: a short last tensor loads as garbage. paramdex
//! checks every record (via [`crate::record::decode_record`]) and that the file ends exactly
//! after the last expected one, and says which tensor and offset went wrong.

use std::path::Path;

use std::sync::Arc;

use crate::dtype::{paddle_type_name, DType};
use crate::error::{Corruption, Error, Result};
use crate::interop::store::{ForeignType, Kind};
use crate::name::display;
use crate::record::{decode_foreign_header, decode_record, walk};

use super::program::{ParamDecl, Program};

/// Smallest possible record: versions, lod_level, desc_size, a 2-byte desc, no data.
pub(crate) const MIN_RECORD_LEN: u64 = 4 + 8 + 4 + 4 + 2;

/// What a decoded record says, kept by the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecordInfo {
    /// Absolute offset of the record in its file.
    pub(crate) offset: u64,
    pub(crate) header_len: usize,
    pub(crate) data_len: u64,
    pub(crate) dtype: RecType,
    pub(crate) dims: Vec<u64>,
    pub(crate) lod: Vec<Vec<u64>>,
}

/// A record's element type: a paramdex dtype, or a Paddle `data_type` number paramdex has no
/// dtype for (listed as [`Kind::Foreign`], its bytes loaded as stored).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RecType {
    Known(DType),
    Foreign(i64),
}

impl RecType {
    /// The store's kind of a record of this type.
    pub(crate) fn kind(self) -> Kind {
        match self {
            RecType::Known(d) => Kind::Numeric(d),
            RecType::Foreign(code) => {
                Kind::Foreign(Arc::new(ForeignType::new("paddle", &foreign_name(code))))
            }
        }
    }

    /// Whether a program declaration accepts a record of this type and dims: a foreign
    /// record only where the program declares no dtype.
    pub(crate) fn declared_by(self, decl: &ParamDecl, dims: &[u64]) -> bool {
        match self {
            RecType::Known(d) => decl.accepts(d, dims),
            RecType::Foreign(_) => decl.dtype.is_none() && decl.accepts(DType::UInt8, dims),
        }
    }

    /// The type's name for messages (`float32`, `SELECTED_ROWS`, `code 99`).
    pub(crate) fn name(self) -> String {
        match self {
            RecType::Known(d) => d.name().to_string(),
            RecType::Foreign(code) => foreign_name(code),
        }
    }
}

/// What a Paddle number paramdex has no dtype for is called: Paddle's own name where Paddle
/// defines it (`SELECTED_ROWS`), else `code N`.
fn foreign_name(code: i64) -> String {
    paddle_type_name(code).map_or_else(|| format!("code {code}"), str::to_string)
}

/// The dtype and dims of a record, as `name dtype [dims]`, for messages.
pub(crate) fn describe(dtype: RecType, dims: &[u64]) -> String {
    format!("{} {:?}", dtype.name(), dims)
}

/// Adds the file and tensor to a record error, keeping its kind; a limit exceeded by a number
/// in the record (a 2 GiB desc size, 2^63 LoD levels), whose variant has no room for the file,
/// becomes [`Error::Corrupt`] saying which file and tensor hold it.
pub(crate) fn in_file(e: Error, path: &Path, tensor: &[u8]) -> Error {
    with_context(
        e,
        &format!("{}: tensor {}", path.display(), display(tensor)),
    )
}

/// Adds `ctx` (a file, a tensor) to a record error as [`in_file`] does.
pub(crate) fn with_context(e: Error, ctx: &str) -> Error {
    match e {
        Error::LimitExceeded {
            what,
            value,
            limit,
            at: Some(offset),
        } => Error::Corrupt {
            what: "record",
            offset,
            kind: Corruption::Other,
            detail: format!("{ctx}: {what} is {value}, above the limit of {limit}"),
        },
        e => e.context(ctx),
    }
}

/// Decodes the records of a combined `.pdiparams` (`buf`, the whole file at `path`) against
/// the program's parameters, one record per name in bytewise order, and requires the file to
/// end exactly after the last one.
///
/// # Errors
///
/// [`Error::Corrupt`] naming the file, tensor, record index and offset for: a record that does
/// not decode (including a truncated last tensor), fewer records than names, more records than
/// names, trailing bytes that are not a record, and a record whose dtype or shape disagrees with
/// the program.
pub(crate) fn match_records(buf: &[u8], path: &Path, program: &Program) -> Result<Vec<RecordInfo>> {
    let names = &program.params;
    let n = names.len();
    let file_len = buf.len() as u64;
    let prog = program.path.display();
    let max_records = file_len / MIN_RECORD_LEN;
    if n as u64 > max_records {
        return Err(Error::corrupt(
            "parameter file",
            0,
            format!(
                "{}: the program {prog} lists {n} parameters, but a file of {file_len} bytes \
                 holds at most {max_records} records: names and records do not match",
                path.display()
            ),
        ));
    }
    let mut out = Vec::with_capacity(n);
    let mut pos = 0usize;
    for (i, decl) in names.iter().enumerate() {
        let name = display(&decl.name);
        if pos == buf.len() {
            return Err(Error::corrupt(
                "parameter file",
                file_len,
                format!(
                    "{}: fewer records than names: the file ends after {i} records, but the \
                     program {prog} lists {n} parameters (first missing: {name})",
                    path.display()
                ),
            ));
        }
        let last = if i + 1 == n { ", the last" } else { "" };
        let ctx = format!(
            "{}: tensor {name} (record {i} of {n}{last})",
            path.display()
        );
        let (h, data) = decode_record(&buf[pos..], pos as u64).map_err(|e| {
            let e = match e {
                // Nothing in a combined stream says where such a record ends: no record after
                // it can be found, so the whole file is refused.
                Error::UnknownDType { .. } => e.context(&format!(
                    "{ctx}; a combined stream has no record sizes, so a record of a type \
                     paramdex does not know cannot be sized or skipped"
                )),
                // A limit broken (a LoD level count, a desc size) becomes damage naming the
                // file and tensor, as in a tensor file.
                e => with_context(e, &ctx),
            };
            if i + 1 == n {
                hint_truncated(e)
            } else {
                e
            }
        })?;
        if !decl.accepts(h.dtype, &h.dims) {
            let want_dtype = decl.dtype.map_or("?", DType::name);
            return Err(Error::corrupt(
                "record",
                pos as u64,
                format!(
                    "{ctx}: the record is {} but the program {prog} declares {want_dtype} {:?}: \
                     the program does not belong to this parameter file, or the records are \
                     out of order",
                    describe(RecType::Known(h.dtype), &h.dims),
                    decl.dims.as_deref().unwrap_or(&[])
                ),
            ));
        }
        out.push(RecordInfo {
            offset: pos as u64,
            header_len: h.header_len,
            data_len: h.data_len,
            dtype: RecType::Known(h.dtype),
            dims: h.dims.to_vec(),
            lod: h.lod.to_vec(),
        });
        // decode_record checked header_len + data.len() <= remaining.
        pos += h.header_len + data.len();
    }
    if pos < buf.len() {
        let rest = &buf[pos..];
        let extra = rest.len();
        let (whole, clean) = count_records(rest, pos as u64);
        let detail = if whole > 0 && clean {
            format!(
                "more records than names: the file holds {} records, but the program {prog} \
                 lists {n} parameters (record {n} starts at offset {pos})",
                n + whole
            )
        } else if whole > 0 {
            format!(
                "more records than names: the program {prog} lists {n} parameters, but {extra} \
                 bytes follow the last of them: {whole} more whole records, then bytes that are \
                 not a record"
            )
        } else {
            let s = if extra == 1 { "" } else { "s" };
            format!(
                "{extra} trailing byte{s} after the last expected tensor ({}, which ends at \
                 offset {pos}); Paddle's load_combine refuses them too",
                names.last().map_or_else(String::new, |d| display(&d.name))
            )
        };
        return Err(Error::corrupt(
            "parameter file",
            pos as u64,
            format!("{}: {detail}", path.display()),
        ));
    }
    Ok(out)
}

/// How many whole records `buf` starts with, and whether they fill it exactly.
fn count_records(buf: &[u8], base: u64) -> (usize, bool) {
    let mut n = 0;
    for r in walk(buf, base) {
        if r.is_err() {
            return (n, false);
        }
        n += 1;
    }
    (n, true)
}

/// Adds a hint to a truncation error on the last tensor (the case Paddle itself misses): the
/// record runs past the end of the file.
fn hint_truncated(e: Error) -> Error {
    match e {
        Error::Corrupt {
            what,
            offset,
            kind: kind @ Corruption::Truncated,
            detail,
        } => Error::Corrupt {
            what,
            offset,
            kind,
            detail: format!(
                "{detail}; the file is cut short (Paddle would load the missing tail as garbage)"
            ),
        },
        other => other,
    }
}

/// Decodes a file that must hold exactly one record (a tensor file, a per-variable file).
///
/// # Errors
///
/// [`Error::Corrupt`] naming the file and tensor when the record does not decode, or when
/// stray bytes follow it; [`Error::UnrecognizedFormat`] when whole records follow it (a
/// combined stream, which needs its program).
pub(crate) fn single_record(buf: &[u8], path: &Path, name: &[u8]) -> Result<RecordInfo> {
    let (h, data) = match decode_record(buf, 0) {
        Ok(r) => r,
        Err(Error::UnknownDType { .. }) => return foreign_record(buf, path, name),
        Err(e) => return Err(in_file(e, path, name)),
    };
    let end = h.header_len + data.len();
    if end < buf.len() {
        let rest = &buf[end..];
        let (more, clean) = count_records(rest, end as u64);
        if more > 0 && clean {
            // A valid file of another kind, not a damaged one: say what it is (exit 1, not 3).
            let stem = path.with_extension("");
            let programs = [stem.with_extension("json"), stem.with_extension("pdmodel")];
            let hint = match programs.iter().find(|p| p.is_file()) {
                // Read as one tensor file although its program is there (given as a member
                // of a directory of tensor files): say which model it is.
                Some(prog) => format!(
                    "its names are in the program {} beside it: give the model as {} (its \
                     prefix), or the directory holding only that model",
                    prog.display(),
                    stem.display()
                ),
                None => format!(
                    "its names are in the model's program, which must be beside it as {} or {}",
                    programs[0].display(),
                    programs[1].display()
                ),
            };
            return Err(Error::UnrecognizedFormat {
                path: path.display().to_string(),
                looks_like: None,
                detail: format!(
                    "holds {} records, not one: this is a combined parameter stream (a \
                     .pdiparams); {hint}",
                    more + 1
                ),
            });
        }
        let s = if rest.len() == 1 { "" } else { "s" };
        let detail = format!(
            "{} trailing byte{s} after the tensor (it ends at offset {end})",
            rest.len()
        );
        return Err(Error::corrupt(
            "tensor file",
            end as u64,
            format!("{}: {detail}", path.display()),
        ));
    }
    Ok(RecordInfo {
        offset: 0,
        header_len: h.header_len,
        data_len: h.data_len,
        dtype: RecType::Known(h.dtype),
        dims: h.dims.to_vec(),
        lod: h.lod.to_vec(),
    })
}

/// A file's one record whose `data_type` paramdex does not know: its data runs to the end of
/// the file (the element size, which would say where it ends, is what is unknown).
pub(crate) fn foreign_record(buf: &[u8], path: &Path, name: &[u8]) -> Result<RecordInfo> {
    let h = decode_foreign_header(buf, 0)
        .map_err(|e| in_file(e, path, name))?
        .ok_or_else(|| {
            Error::corrupt("record", 0, format!("{}: record changed", path.display()))
        })?;
    Ok(RecordInfo {
        offset: 0,
        header_len: h.header_len,
        data_len: (buf.len() - h.header_len) as u64,
        dtype: RecType::Foreign(h.code),
        dims: h.dims.to_vec(),
        lod: h.lod.to_vec(),
    })
}
