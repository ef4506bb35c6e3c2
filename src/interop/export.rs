//! Writing: every output format through one interface, [`export`] (the write-side twin of
//! [`crate::interop::open_any`]).
//!
//! [`export`] writes any [`TensorStore`] as any [`OutputFormat`]. Before a byte is written it
//! streams the input's listing once and checks every tensor against the format's rules
//! ([`OutputFormat::cannot_hold`]): a tensor the format cannot hold is an error naming it, or,
//! with [`ExportOptions::skip_unsupported`], left out and listed in the report. It then hands
//! the format's writer (its row in `EXPORTERS`) a view of the input that shows only the
//! tensors it can hold, the metadata, and the progress sink; the writer streams the tensors
//! in bytewise name order and says what it wrote, which becomes one [`ExportReport`] whatever
//! the format.
//!
//! Adding an output format: a variant of [`OutputFormat`] (with its name), a function
//! `fn(&ExportJob) -> Result<Written>` and a rule `fn(&TensorInfo) -> Option<String>` in the
//! format's module (and an `OutputLimit` if the output as a whole has a limit, such as the
//! safetensors header size, which the survey checks), and one row in `EXPORTERS` (in the
//! variant's position: checked when the crate compiles).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::store::{record_limits, Format, NoLimit, OutputLimit, VerifySummary, Written};
use crate::interop::store::{ExportJob, Kind, LoadedTensor, TensorInfo, TensorInfos, TensorStore};
use crate::interop::{gguf, native, paddle, safetensors, tf};
use crate::name::{self, MAX_NAME_LEN};
use crate::native::{FinishStats, Metadata, Reader, WriterOptions};
use crate::progress::{NoProgress, Progress, Unit};

/// A format [`export`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OutputFormat {
    /// A native paramdex file (numeric tensors only; metadata kept).
    Native,
    /// A plain TensorFlow checkpoint `DST.index` + `DST.data-00000-of-00001` (numeric and
    /// string tensors; no metadata, and no LoD: a LoD tensor's values are written, and
    /// [`ExportReport::notes`] says its LoD was not kept).
    TensorFlow,
    /// A Paddle model: the combined parameter file `DST.pdiparams` (or `DST` if it ends in
    /// `.pdiparams`), records in bytewise name order, and beside it the programs naming them
    /// (`DST.pdmodel` and the PIR `DST.json` Paddle 3 reads by default: see
    /// [`paddle::program_path`] and [`paddle::pir_program_path`]; which program is written is
    /// decided as the exporter says), so the names are kept (numeric tensors whose names a
    /// Paddle program can declare; no metadata).
    PaddleCombined,
    /// Paddle tensor files: one tensor as the file `DST`, several as a per-variable directory
    /// `DST/NAME...` (numeric tensors only; no metadata).
    PaddleTensors,
    /// A safetensors file (no complex128, LoD, string tensors or names that are not UTF-8;
    /// metadata as `__metadata__` strings).
    Safetensors,
    /// A Paddle merged parameter file `DST` (the design document "Merging all params in a
    /// single file"): each plain record preceded by its length as a `u64` little-endian, in
    /// bytewise name order, and beside it the program naming them (`DST` without its
    /// extension, with `.pdmodel`: [`paddle::merged_program_output`]), chosen as for
    /// [`OutputFormat::PaddleCombined`] (the same tensors; no metadata).
    PaddleMerged,
    /// A GGUF v3 file (llama.cpp): plain dtypes GGUF has and ggml block types (a GGUF
    /// input's), at most 4 dimensions, no LoD; metadata with each GGUF input's value types and
    /// key order kept, other metadata as strings ([`gguf`](crate::interop::gguf)).
    Gguf,
}

impl OutputFormat {
    /// Every output format.
    pub const ALL: [OutputFormat; 7] = [
        OutputFormat::Native,
        OutputFormat::TensorFlow,
        OutputFormat::PaddleCombined,
        OutputFormat::PaddleTensors,
        OutputFormat::Safetensors,
        OutputFormat::PaddleMerged,
        OutputFormat::Gguf,
    ];

    /// The short name messages use (and the CLI's `--to` value): `paramdex`, `tf`, `paddle`,
    /// `paddle-tensor`, `safetensors`, `paddle-merged`.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Native => "paramdex",
            OutputFormat::TensorFlow => "tf",
            OutputFormat::PaddleCombined => "paddle",
            OutputFormat::PaddleTensors => "paddle-tensor",
            OutputFormat::Safetensors => "safetensors",
            OutputFormat::PaddleMerged => "paddle-merged",
            OutputFormat::Gguf => "gguf",
        }
    }

    /// Why this format cannot hold the tensor `info`, or `None` if it can: what the tensor is
    /// (`a string tensor`, `complex128, which safetensors lacks`, `a LoD tensor, which
    /// safetensors cannot describe`, ...). Decided from the description alone, so [`export`]
    /// checks every tensor before it writes a byte. One rule is not here, as it depends on the
    /// other tensors: [`OutputFormat::PaddleTensors`] writes several tensors as one file each
    /// at the path of its name, so among several it cannot hold a tensor whose name no file
    /// can have ([`paddle::relative_path`]); [`export`] applies it when the input holds
    /// several tensors the format can otherwise hold.
    pub fn cannot_hold(self, info: &TensorInfo) -> Option<String> {
        (self.exporter().cannot_hold)(info)
    }

    /// Whether the format stores metadata ([`ExportOptions::metadata`]); formats that do not
    /// leave it out, counted in [`ExportReport::metadata_dropped`].
    pub fn carries_metadata(self) -> bool {
        self.exporter().carries_metadata
    }

    /// The paths an export to `dst` writes: `dst` itself (a native or safetensors file, Paddle
    /// tensor file or directory), `DST.pdiparams`, or a TensorFlow checkpoint's
    /// `PREFIX.index` and `PREFIX.data-00000-of-00001` (with any other `PREFIX.data-*` shard
    /// already there). [`export`] refuses to start when one exists, unless
    /// [`ExportOptions::overwrite`].
    pub fn outputs(self, dst: &Path) -> Vec<PathBuf> {
        (self.exporter().outputs)(dst)
    }

    fn exporter(self) -> &'static Exporter {
        // EXPORTERS holds one row per variant in declaration order (asserted at compile time
        // below), so the discriminant is the row's index.
        &EXPORTERS[self as usize]
    }
}

/// One output format's writer and rules: a row of `EXPORTERS`.
struct Exporter {
    format: OutputFormat,
    /// Why the format cannot hold a tensor, if it cannot ([`OutputFormat::cannot_hold`]).
    cannot_hold: fn(&TensorInfo) -> Option<String>,
    /// Why the format cannot hold a tensor among several (it can alone), if it cannot: a
    /// name that cannot be a file's when each tensor is a file of a directory.
    cannot_hold_among_several: Option<fn(&TensorInfo) -> Option<String>>,
    /// Whether it writes the job's metadata.
    carries_metadata: bool,
    /// When it writes a LoD tensor's values without its LoD (the tensor is not refused): why,
    /// for the note that says so.
    drops_lod: Option<&'static str>,
    /// The paths an export to a destination writes ([`OutputFormat::outputs`]).
    outputs: fn(&Path) -> Vec<PathBuf>,
    /// Whether the output at the destination is a file (not a directory) whatever the input.
    file_output: bool,
    /// What it can hold as a whole, checked in the survey.
    limit: fn() -> Box<dyn OutputLimit>,
    /// Writes every tensor of the job's store.
    write: fn(&ExportJob<'_>) -> Result<Written>,
}

/// Every output format's writer, in [`OutputFormat`]'s declaration order.
const EXPORTERS: &[Exporter] = &[
    Exporter {
        format: OutputFormat::Native,
        cannot_hold: native_records,
        cannot_hold_among_several: None,
        carries_metadata: true,
        drops_lod: None,
        outputs: just_dst,
        file_output: true,
        limit: no_limit,
        write: native::export,
    },
    Exporter {
        format: OutputFormat::TensorFlow,
        cannot_hold: tf::cannot_hold,
        cannot_hold_among_several: None,
        carries_metadata: false,
        drops_lod: Some("a TensorFlow checkpoint has no LoD"),
        outputs: tf::outputs,
        file_output: true,
        limit: no_limit,
        write: tf::export,
    },
    Exporter {
        format: OutputFormat::PaddleCombined,
        cannot_hold: paddle_output_combined,
        cannot_hold_among_several: None,
        carries_metadata: false,
        drops_lod: None,
        outputs: paddle::combined_outputs,
        file_output: true,
        limit: no_limit,
        write: paddle::export_combined,
    },
    Exporter {
        format: OutputFormat::PaddleTensors,
        cannot_hold: paddle_output,
        cannot_hold_among_several: Some(paddle::cannot_be_a_file),
        carries_metadata: false,
        drops_lod: None,
        outputs: just_dst,
        // One tensor is a file, several a directory.
        file_output: false,
        limit: no_limit,
        write: paddle::export_tensor_files,
    },
    Exporter {
        format: OutputFormat::Safetensors,
        cannot_hold: safetensors::cannot_hold,
        cannot_hold_among_several: None,
        carries_metadata: true,
        drops_lod: None,
        outputs: just_dst,
        file_output: true,
        limit: safetensors::header_limit,
        write: safetensors::export,
    },
    Exporter {
        format: OutputFormat::PaddleMerged,
        // The same tensors as a combined file: the program beside it names them.
        cannot_hold: paddle_output_combined,
        cannot_hold_among_several: None,
        carries_metadata: false,
        drops_lod: None,
        outputs: just_dst,
        file_output: true,
        limit: no_limit,
        write: paddle::export_merged,
    },
    Exporter {
        format: OutputFormat::Gguf,
        cannot_hold: gguf::write::cannot_hold,
        cannot_hold_among_several: None,
        carries_metadata: true,
        drops_lod: None,
        outputs: just_dst,
        file_output: true,
        limit: no_limit,
        write: gguf::write::export,
    },
];

// The table is complete and in order: `OutputFormat::exporter` indexes it by discriminant.
const _: () = {
    assert!(EXPORTERS.len() == OutputFormat::ALL.len());
    let mut i = 0;
    while i < EXPORTERS.len() {
        assert!(EXPORTERS[i].format as usize == i);
        assert!(OutputFormat::ALL[i] as usize == i);
        i += 1;
    }
};

/// The outputs of formats that write `dst` itself.
fn just_dst(dst: &Path) -> Vec<PathBuf> {
    vec![dst.to_path_buf()]
}

/// The rule of Paddle outputs (records without names): numeric tensors only (no strings,
/// nothing paramdex does not decode), within the limits of a record header (rank, LoD levels,
/// dimensions; SPEC.md 8.1), so that a tensor the output cannot hold is found before anything
/// is written.
fn paddle_records(info: &TensorInfo) -> Option<String> {
    info.kind.not_numeric().or_else(|| record_limits(info))
}

/// The rule of Paddle outputs: [`paddle_records`]'s, and a dtype Paddle has a number for (a
/// type Paddle lacks would be written as `uint8` and read back as `uint8`: its type lost).
fn paddle_output(info: &TensorInfo) -> Option<String> {
    paddle_records(info).or_else(|| {
        let d = info.kind.numeric()?;
        d.paddle_number()
            .is_none()
            .then(|| format!("{}, which Paddle has no type for", d.name()))
    })
}

/// The rule of a Paddle combined file with its program: [`paddle_output`]'s, and a name the
/// program can declare.
fn paddle_output_combined(info: &TensorInfo) -> Option<String> {
    paddle_output(info).or_else(|| paddle::cannot_hold_combined(info))
}

/// The rule of native output: [`paddle_records`]'s (bytes values aside), and a name of 1 to
/// [`MAX_NAME_LEN`] bytes.
fn native_records(info: &TensorInfo) -> Option<String> {
    // Bytes values stay bytes values (SPEC.md 6.1).
    let rule = if info.kind == Kind::Bytes {
        None
    } else {
        paddle_records(info)
    };
    rule.or_else(|| {
        if info.name.is_empty() {
            Some("named with the empty name (reserved for the file header)".into())
        } else if info.name.len() > MAX_NAME_LEN {
            Some(format!(
                "named with {} bytes (at most {MAX_NAME_LEN})",
                info.name.len()
            ))
        } else {
            None
        }
    })
}

fn no_limit() -> Box<dyn OutputLimit> {
    Box::new(NoLimit)
}

/// How to [`export`] (and [`crate::interop::merge`]).
#[derive(Clone, Default)]
pub struct ExportOptions<'a> {
    /// Layout of native output (ignored by other formats).
    pub writer: WriterOptions,
    /// The metadata to write; `None`: the input's own ([`TensorStore::metadata`]; for a merge,
    /// the inputs' merged metadata). Formats without metadata leave it out
    /// ([`OutputFormat::carries_metadata`]).
    pub metadata: Option<&'a Metadata>,
    /// Leave out the tensors the format cannot hold, listing them in
    /// [`ExportReport::skipped`], instead of refusing the input.
    pub skip_unsupported: bool,
    /// Told two passes: the input's listing, which is checked before anything is written
    /// (as [`TensorStore::scan_with_progress`] reports it), then the data bytes to write
    /// ([`Unit::Bytes`], the sum of [`TensorInfo::nbytes`] of the tensors written), each
    /// tensor's bytes once written.
    pub progress: Option<&'a dyn Progress>,
    /// Replace outputs that already exist ([`OutputFormat::outputs`]). Without it, [`export`]
    /// and [`crate::interop::merge`] return [`Error::OutputExists`] before reading a tensor
    /// when one exists. Either way an output changes only when the new one is complete: a
    /// file is renamed over the old one, a directory swapped in for it.
    pub overwrite: bool,
}

impl std::fmt::Debug for ExportOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportOptions")
            .field("writer", &self.writer)
            .field("metadata", &self.metadata)
            .field("skip_unsupported", &self.skip_unsupported)
            .field("progress", &self.progress.is_some())
            .field("overwrite", &self.overwrite)
            .finish()
    }
}

/// A tensor left out of an export because the format cannot hold it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// Its name.
    pub name: Vec<u8>,
    /// Why ([`OutputFormat::cannot_hold`]).
    pub reason: String,
}

/// What [`export`] (or [`crate::interop::merge`]) wrote, whatever the format.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExportReport {
    /// The format written.
    pub format: OutputFormat,
    /// Tensors written.
    pub tensors: u64,
    /// Their data bytes (the sum of [`TensorInfo::nbytes`]).
    pub data_bytes: u64,
    /// The tensors left out ([`ExportOptions::skip_unsupported`]), in name order.
    pub skipped: Vec<Skipped>,
    /// Every file written: the native or safetensors file; the `.pdiparams` and the programs
    /// written beside it (none if a program already there was kept, see
    /// [`OutputFormat::PaddleCombined`]); a TensorFlow checkpoint's index and data file; each
    /// Paddle tensor file.
    pub paths: Vec<PathBuf>,
    /// Bytes of all the files written.
    pub output_bytes: u64,
    /// Metadata entries left out because the format has no metadata.
    pub metadata_dropped: usize,
    /// The native writer's figures (index blocks, records and index lengths), for native
    /// output.
    pub native: Option<FinishStats>,
    /// What the user should know of the output beyond the above: for
    /// [`OutputFormat::PaddleCombined`], that no PIR program was written beside the
    /// parameters (a tensor of a dtype PIR has no type for), so that Paddle 3 loads them in
    /// its legacy mode only.
    pub notes: Vec<String>,
}

/// Writes every tensor of `store` (and its metadata, where the format has metadata) as
/// `format` at `dst`: a file, a checkpoint prefix or a directory, as [`OutputFormat`]'s
/// variants say. Tensors are written in bytewise name order. Every output is staged (written
/// under a temporary name beside it, synced, renamed into place; a directory is written whole
/// under a temporary name), so a failed or interrupted export ([`crate::remove_staged`])
/// leaves no partial output and the previous one, if any, untouched. Missing parent
/// directories of `dst` are created (and removed again if the export fails and they are
/// empty).
///
/// `dst` may be a URL (the `s3` feature; without it, [`Error::NoObjectStorage`]):
/// `s3://bucket/key` writes the object(s) named as the format names its outputs, beside `key`
/// (native output streamed by multipart upload as the tensors are written, appearing only when
/// complete; other formats written to a local temporary directory first, then each file
/// uploaded, a checkpoint's index last); `file:///path` is the path. [`ExportReport::paths`]
/// are then URLs, and [`Error::Remote`] reports a failed request.
///
/// # Errors
///
/// Before anything is read: [`Error::OutputExists`] when an output exists
/// ([`OutputFormat::outputs`]) and [`ExportOptions::overwrite`] is off;
/// [`Error::InvalidArgument`] when a file output would replace a directory. Before anything
/// is written: [`Error::Unsupported`] naming the first tensor the format
/// cannot hold (its kind, or a limit of the format: rank, LoD levels, dimensions, name; for
/// [`OutputFormat::PaddleTensors`] of several tensors, a name no file can have),
/// unless [`ExportOptions::skip_unsupported`]; [`Error::LimitExceeded`] when the output as a
/// whole would exceed a limit of the format (the safetensors header size); the input's
/// listing errors. Then
/// the format's own refusals (a TensorFlow name starting with a NUL byte, two Paddle tensor
/// names of which one would be a directory of the other, an input with no tensors for Paddle
/// output),
/// the input's read errors (checksum mismatches, corruption) and I/O errors.
pub fn export(
    store: &dyn TensorStore,
    format: OutputFormat,
    dst: &Path,
    opts: &ExportOptions<'_>,
) -> Result<ExportReport> {
    if let Some(url) = crate::remote::url_of(dst) {
        #[cfg(feature = "s3")]
        return export_url(
            store,
            format,
            url,
            opts,
            &crate::remote::UploadOptions::default(),
        );
        #[cfg(not(feature = "s3"))]
        return Err(crate::remote::not_built(url));
    }
    check_outputs(format, dst, opts.overwrite)?;
    export_checked(store, format, dst, opts, None)
}

/// [`export`] after its check of the outputs; with `upload`, native output goes to that
/// object (`s3://` URL) by multipart upload instead of to `dst`, which only names it.
pub(crate) fn export_checked(
    store: &dyn TensorStore,
    format: OutputFormat,
    dst: &Path,
    opts: &ExportOptions<'_>,
    upload: Option<(&str, &crate::remote::UploadOptions)>,
) -> Result<ExportReport> {
    let owned;
    let metadata = match opts.metadata {
        Some(m) => m,
        None => {
            owned = store.metadata()?;
            &owned
        }
    };
    let exporter = format.exporter();
    let mut limit = (exporter.limit)();
    // Pass 1, the listing: reported when someone asks (a store that streams its listing
    // reports it as it streams; others list it in memory, as they do anyway).
    let listing = match opts.progress {
        Some(p) => store.scan_with_progress(p)?,
        None => store.scan(b"")?,
    };
    let survey = survey(listing, format, opts.skip_unsupported, limit.as_mut())?;
    limit.check(metadata)?;
    // Pass 2, writing: the data bytes.
    let progress = opts.progress.unwrap_or(&NoProgress);
    progress.start(survey.data_bytes, Unit::Bytes);
    let holdable = Holdable {
        inner: store,
        format,
        several: survey.several,
    };
    let written = (exporter.write)(&ExportJob {
        store: &holdable,
        dst,
        writer: &opts.writer,
        metadata,
        progress,
        overwrite: opts.overwrite,
        upload,
    })?;
    let mut rep = ExportReport::new(format, written, survey.skipped, metadata);
    if let (Some(first), Some(why)) = (&survey.lod_dropped_first, format.exporter().drops_lod) {
        let first = name::display(first);
        rep.notes.push(match survey.lod_dropped {
            1 => format!("the LoD of tensor {first} was not kept ({why}); its values were"),
            n => format!(
                "the LoD of {n} tensors ({first}, ...) was not kept ({why}); their values were"
            ),
        });
    }
    Ok(rep)
}

impl ExportReport {
    /// The report of a writer's work: what it wrote, what was `skipped` before, and the
    /// `metadata` it was given (counted as dropped if the format has none).
    pub(crate) fn new(
        format: OutputFormat,
        written: Written,
        skipped: Vec<Skipped>,
        metadata: &Metadata,
    ) -> ExportReport {
        ExportReport {
            format,
            tensors: written.tensors,
            data_bytes: written.data_bytes,
            skipped,
            paths: written.paths,
            output_bytes: written.output_bytes,
            metadata_dropped: if format.carries_metadata() {
                0
            } else {
                metadata.len()
            },
            native: written.native,
            notes: written.notes,
        }
    }
}

/// [`OutputFormat::check_outputs`], the check [`export`] and [`crate::interop::merge`] begin with.
pub(crate) fn check_outputs(format: OutputFormat, dst: &Path, overwrite: bool) -> Result<()> {
    format.check_outputs(dst, overwrite)
}

impl OutputFormat {
    /// The check [`export`] (and, for native output, [`crate::interop::merge`]) begins with,
    /// for callers that want it before they even open the input: [`Error::OutputExists`] if
    /// one of [`OutputFormat::outputs`]`(dst)` exists and `overwrite` is off;
    /// [`Error::InvalidArgument`] if a file output would replace a directory (whatever
    /// `overwrite` says: a file does not replace a directory). For an `s3://` URL, one HEAD
    /// request per output name (the `s3` feature; without it, [`Error::NoObjectStorage`]).
    pub fn check_outputs(self, dst: &Path, overwrite: bool) -> Result<()> {
        if let Some(url) = crate::remote::url_of(dst) {
            if let Some(path) = url.strip_prefix("file://") {
                return self.check_outputs(Path::new(path), overwrite);
            }
            #[cfg(feature = "s3")]
            return check_objects(self, url, overwrite).map(drop);
            #[cfg(not(feature = "s3"))]
            return Err(crate::remote::not_built(url));
        }
        for p in self.outputs(dst) {
            let Ok(m) = std::fs::symlink_metadata(&p) else {
                continue;
            };
            if m.is_dir() && self.exporter().file_output {
                return Err(Error::InvalidArgument(format!(
                    "{} is a directory; {} output is a file there: name a path that is not a \
                 directory",
                    p.display(),
                    self.name()
                )));
            }
            if !overwrite {
                return Err(Error::OutputExists {
                    path: p.display().to_string(),
                });
            }
        }
        Ok(())
    }
}

/// What one pass over the tensors to export found.
#[derive(Debug, Default)]
pub(crate) struct Survey {
    /// The tensors the format cannot hold (left out).
    pub(crate) skipped: Vec<Skipped>,
    /// Data bytes of the others (saturating: a total for progress only).
    pub(crate) data_bytes: u64,
    /// Whether more than one tensor passed the format's rules for a tensor alone: its rule
    /// for a tensor among several applied.
    pub(crate) several: bool,
    /// Tensors written whose LoD the format does not keep (TensorFlow), and the first of them.
    pub(crate) lod_dropped: u64,
    pub(crate) lod_dropped_first: Option<Vec<u8>>,
}

/// Checks every tensor of `tensors` against `format`'s rules: the tensors it cannot hold are
/// an error naming the first (and how many there are) unless `skip_unsupported`. The rule a
/// format has for a tensor among several applies when more than one tensor passes the others.
pub(crate) fn survey(
    tensors: impl Iterator<Item = Result<TensorInfo>>,
    format: OutputFormat,
    skip_unsupported: bool,
    limit: &mut dyn OutputLimit,
) -> Result<Survey> {
    let among_several = format.exporter().cannot_hold_among_several;
    let mut survey = Survey::default();
    // Without skipping, only the first refusal is named: keep it and count the rest.
    let mut first: Option<Skipped> = None;
    let mut refused = 0u64;
    // Tensors the format holds alone, and those of them it cannot hold among several.
    let mut held = 0u64;
    let mut alone_only: Vec<(TensorInfo, String)> = Vec::new();
    let mut refuse = |s: Skipped, survey: &mut Survey, first: &mut Option<Skipped>| {
        refused += 1;
        if skip_unsupported {
            survey.skipped.push(s);
        } else if first.as_ref().is_none_or(|f| s.name < f.name) {
            *first = Some(s);
        }
    };
    for t in tensors {
        let t = t?;
        match format.cannot_hold(&t) {
            None => {
                held += 1;
                if !t.lod.is_empty() && format.exporter().drops_lod.is_some() {
                    // Written with its values, without its LoD: said in the report's notes.
                    survey.lod_dropped += 1;
                    if survey.lod_dropped_first.is_none() {
                        survey.lod_dropped_first = Some(t.name.clone());
                    }
                }
                if let Some(reason) = among_several.and_then(|rule| rule(&t)) {
                    alone_only.push((t, reason));
                    continue;
                }
                survey.data_bytes = survey.data_bytes.saturating_add(t.nbytes);
                limit.add(&t);
            }
            Some(reason) => refuse(
                Skipped {
                    name: t.name,
                    reason,
                },
                &mut survey,
                &mut first,
            ),
        }
    }
    survey.several = held > 1;
    let merge = !alone_only.is_empty() && survey.several;
    for (t, reason) in alone_only {
        if survey.several {
            refuse(
                Skipped {
                    name: t.name,
                    reason,
                },
                &mut survey,
                &mut first,
            );
        } else {
            survey.data_bytes = survey.data_bytes.saturating_add(t.nbytes);
            limit.add(&t);
        }
    }
    if merge {
        // Both kinds of refusal, in name order as the listing is.
        survey.skipped.sort_by(|a, b| a.name.cmp(&b.name));
    }
    if let Some(first) = first {
        return Err(Error::Unsupported(format!(
            "tensor {} is {}, which {} output cannot hold{}; pass --skip-unsupported to leave \
             such tensors out",
            name::display(&first.name),
            first.reason,
            format.name(),
            if refused > 1 {
                format!(" ({refused} such tensors)")
            } else {
                String::new()
            }
        )));
    }
    Ok(survey)
}

/// The input as a format's writer sees it: only the tensors the format can hold.
struct Holdable<'a> {
    inner: &'a dyn TensorStore,
    format: OutputFormat,
    /// Whether the format's rule for a tensor among several applies ([`Survey::several`]).
    several: bool,
}

impl Holdable<'_> {
    fn holds(&self, t: &TensorInfo) -> bool {
        let among_several = || {
            self.several
                && self
                    .format
                    .exporter()
                    .cannot_hold_among_several
                    .is_some_and(|rule| rule(t).is_some())
        };
        self.format.cannot_hold(t).is_none() && !among_several()
    }
}

impl TensorStore for Holdable<'_> {
    fn format(&self) -> Format {
        self.inner.format()
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let it = self.inner.scan(start)?;
        Ok(Box::new(
            it.filter(|t| t.as_ref().map_or(true, |t| self.holds(t))),
        ))
    }

    fn scan_with_progress<'a>(&'a self, progress: &'a dyn Progress) -> Result<TensorInfos<'a>> {
        let it = self.inner.scan_with_progress(progress)?;
        Ok(Box::new(
            it.filter(|t| t.as_ref().map_or(true, |t| self.holds(t))),
        ))
    }

    fn metadata(&self) -> Result<Metadata> {
        self.inner.metadata()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        Ok(self.inner.load(name)?.filter(|t| self.holds(&t.info)))
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        self.inner.verify(threads)
    }

    fn as_native(&self) -> Option<&Reader> {
        // Not every tensor of the reader is visible here.
        None
    }

    fn program_file(&self) -> Option<&Path> {
        // A writer checks that the program declares exactly the tensors it writes.
        self.inner.program_file()
    }
}

// Exporting to object storage (`export` of an `s3://` URL): native output is written straight
// to the object by multipart upload as the tensors are written; every other format is exported
// to a staged local directory first and its files are then uploaded, each by multipart upload.

/// Writes every tensor of `store` as `format` to the object(s) at `url`, as [`export`] does
/// to a path: `s3://bucket/key` for an object (configured as [`crate::remote::resolve`]
/// says), `file:///path` for a local path.
///
/// Native output streams to the object by multipart upload (`crate::remote::ObjectUpload`):
/// parts go out while tensors are written, memory stays bounded by a few parts, and the
/// object appears only when the upload completes; on any error the upload is aborted and
/// nothing appears (an object already under the name stays as it was). Other formats are
/// written to a local temporary directory (under the system's temporary directory, removed
/// afterwards) and each of their files is then uploaded the same way, beside `key` as the
/// format names them (a TensorFlow checkpoint `key.index` and `key.data-00000-of-00001`:
/// the index last; Paddle tensor files under `key/`). Each object appears whole, but a
/// multi-file output appears one object after the other.
///
/// Without [`ExportOptions::overwrite`], an existing object under one of the output names is
/// [`Error::OutputExists`] (one HEAD request per output, before anything is read).
/// [`ExportReport::paths`] are the objects' URLs.
#[cfg(feature = "s3")]
fn export_url(
    store: &dyn TensorStore,
    format: OutputFormat,
    url: &str,
    opts: &ExportOptions<'_>,
    upload: &crate::remote::UploadOptions,
) -> Result<ExportReport> {
    if let Some(path) = url.strip_prefix("file://") {
        return export(store, format, Path::new(path), opts);
    }
    upload.validate()?;
    let (base, dir_url) = check_objects(format, url, opts.overwrite)?;
    let to_url = |rel: &Path| format!("{dir_url}{}", rel.to_string_lossy());
    if format == OutputFormat::Native {
        let mut rep = export_checked(store, format, Path::new(url), opts, Some((url, upload)))?;
        rep.paths = vec![PathBuf::from(url)];
        return Ok(rep);
    }
    let staged =
        crate::native::staging::stage_dir(&std::env::temp_dir().join("paramdex-upload"), ".tmp")?;
    let local = staged.path().join(base);
    let mut rep = export(
        store,
        format,
        &local,
        &ExportOptions {
            overwrite: true,
            ..opts.clone()
        },
    )?;
    let mut files = Vec::new();
    collect_files(staged.path(), &mut files)?;
    // The index of a checkpoint last: a reader finds the data files it names complete.
    files.sort_by_key(|f| (f.extension().is_some_and(|e| e == "index"), f.clone()));
    let mut paths = Vec::with_capacity(files.len());
    for f in files {
        let rel = f.strip_prefix(staged.path()).unwrap_or(&f);
        let out = to_url(rel);
        crate::remote::upload_file(&f, &out, upload)?;
        paths.push(PathBuf::from(out));
    }
    rep.paths = paths;
    Ok(rep)
}

/// [`OutputFormat::check_outputs`] of an `s3://` URL: without `overwrite`, an object under one
/// of the format's output names is [`Error::OutputExists`] (one HEAD request per output).
/// Returns the key's last component and the URL of its directory (ending in `/`), beside which
/// the outputs are named.
#[cfg(feature = "s3")]
fn check_objects(format: OutputFormat, url: &str, overwrite: bool) -> Result<(&str, &str)> {
    let (_, key) = crate::remote::split_s3_url(url)?;
    let base = key.rsplit('/').next().unwrap_or(key);
    if base.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{url}: names no object (the key ends with /)"
        )));
    }
    let dir_url = &url[..url.len() - base.len()];
    if !overwrite {
        for p in format.outputs(Path::new(base)) {
            let out = format!("{dir_url}{}", p.to_string_lossy());
            if crate::remote::object_exists(&out)? {
                return Err(Error::OutputExists { path: out });
            }
        }
    }
    Ok((base, dir_url))
}

/// Every file under `dir`, recursively.
#[cfg(feature = "s3")]
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| Error::io(format!("listing {}", path.display()), e))?;
        if kind.is_dir() {
            collect_files(&path, out)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}
