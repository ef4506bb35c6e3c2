//! Merging several stores, of any formats, into one native file ([`merge`]).
//!
//! The inputs' listings are merged as they stream (each is in bytewise name order), so memory
//! stays bounded at any tensor count: one listed tensor per input, plus the tensors left out.
//! A first pass finds conflicts and what a native file cannot hold before anything is written;
//! the second writes, loading each tensor from the input it is taken from, through the same
//! native writing loop as [`crate::interop::export`].

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::{Error, Result};
use crate::interop::export::{
    check_outputs, survey, ExportOptions, ExportReport, OutputFormat, Skipped,
};
use crate::interop::native::write_native;
use crate::interop::store::{NoLimit, TensorInfo, TensorInfos, TensorStore};
use crate::name;
use crate::native::Metadata;
use crate::progress::{NoProgress, Unit};

/// One input of a [`merge`].
#[derive(Clone, Copy)]
pub struct MergeInput<'a> {
    /// The store.
    pub store: &'a dyn TensorStore,
    /// Where it comes from (its path), as messages name it.
    pub path: &'a Path,
}

impl std::fmt::Debug for MergeInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MergeInput")
            .field("format", &self.store.format())
            .field("path", &self.path)
            .finish()
    }
}

/// How to [`merge`].
#[derive(Clone, Debug, Default)]
pub struct MergeOptions<'a> {
    /// Layout, metadata (`None`: the inputs' metadata merged), skipping and progress, as for
    /// [`crate::interop::export`] to a native file.
    pub export: ExportOptions<'a>,
    /// Let later inputs replace the tensors and metadata values of earlier ones; without it a
    /// name in two inputs, or a metadata key with two different values, is an error.
    pub allow_override: bool,
}

/// What [`merge`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MergeReport {
    /// The native file written (tensors, bytes, the tensors left out, the writer's figures).
    pub written: ExportReport,
    /// Tensors of earlier inputs replaced by a later input's tensor of the same name.
    pub replaced: u64,
}

/// Writes the tensors of every input into one new native file at `dst`, in bytewise name
/// order, with the inputs' metadata merged (or [`ExportOptions::metadata`]). A name in several
/// inputs, or a metadata key with different values in several inputs, is an error unless
/// [`MergeOptions::allow_override`]: then the latest input holding it wins. Tensors a native
/// file cannot hold (not numeric) are an error naming the first (only the tensor that wins is
/// checked), or, with [`ExportOptions::skip_unsupported`], left out: they then take no part in
/// the merge at all, so a name that several inputs hold only as such tensors (the
/// `_CHECKPOINTABLE_OBJECT_GRAPH` string of every TensorFlow 2 checkpoint) is no conflict, and
/// the tensor of a name is the latest one that is kept.
///
/// `dst` may be a URL, as for [`crate::interop::export`]: `s3://bucket/key` streams the file
/// to the object by multipart upload, and it appears only when complete (with the `s3`
/// feature, else [`Error::NoObjectStorage`]); `file:///path` is the path.
///
/// # Errors
///
/// Before anything is read: [`Error::OutputExists`] when `dst` exists and
/// [`ExportOptions::overwrite`] is off, [`Error::InvalidArgument`] when it is a directory.
/// Before anything is written: [`Error::InvalidArgument`] for a conflict (naming the tensor
/// or key and the two inputs), [`Error::Unsupported`] for a tensor a native file cannot hold,
/// the inputs' listing and metadata errors. Then the inputs' read errors and I/O errors; the
/// output appears only when complete.
pub fn merge(
    inputs: &[MergeInput<'_>],
    dst: &Path,
    opts: &MergeOptions<'_>,
) -> Result<MergeReport> {
    let format = OutputFormat::Native;
    // A URL destination, as `export` takes it: `file:///path` is the path; an `s3://` object is
    // written by multipart upload, refused up front if it exists and overwrite is off.
    // Without the `s3` feature every URL is refused as one (by `upload_to`), `file://` too,
    // as `open_any` and `export` refuse it.
    let (dst, url) = match crate::remote::url_of(dst) {
        Some(u) if cfg!(feature = "s3") && u.starts_with("file://") => {
            (Path::new(&u["file://".len()..]), None)
        }
        Some(u) => (dst, Some(u)),
        None => (dst, None),
    };
    let upload = match url {
        Some(url) => Some(upload_to(url, opts.export.overwrite)?),
        None => {
            check_outputs(format, dst, opts.export.overwrite)?;
            None
        }
    };
    let skip = opts.export.skip_unsupported;
    // Pass 1: every conflict and every tensor the format cannot hold, before a byte is written.
    let mut replaced = 0u64;
    let mut skipped = Vec::new();
    let winners = Union::new(inputs)?.filter_map(|u| {
        let u = match u {
            Ok(u) => u,
            Err(e) => return Some(Err(e)),
        };
        let (kept, left_out) = u.split(format, skip);
        for (i, t) in left_out {
            let reason = format.cannot_hold(&t).unwrap_or_default();
            // The tensor of a name that another input's tensor replaces is not written either:
            // say whose it was.
            let reason = if u.holders.len() > 1 {
                format!("{reason}, in {}", inputs[i].path.display())
            } else {
                reason
            };
            skipped.push(Skipped {
                name: t.name,
                reason,
            });
        }
        if let [(first, _), (second, _), ..] = kept.as_slice() {
            if !opts.allow_override {
                return Some(Err(Error::InvalidArgument(format!(
                    "tensor {} is in both {} and {}; pass --allow-override to keep the later one",
                    name::display(&u.name),
                    inputs[*first].path.display(),
                    inputs[*second].path.display()
                ))));
            }
        }
        replaced += kept.len().saturating_sub(1) as u64;
        // Without skipping, the winner is checked (and refused) by the survey.
        kept.into_iter().last().map(|(_, t)| Ok(t))
    });
    // What is left is kept: the survey refuses a winner the format cannot hold (there is none
    // when skipping) and totals the bytes. `skipped` is in name order, as the union is.
    let survey = survey(winners, format, false, &mut NoLimit)?;
    let owned;
    let metadata = match opts.export.metadata {
        Some(m) => m,
        None => {
            owned = merge_metadata(inputs, opts.allow_override)?;
            &owned
        }
    };
    let progress = opts.export.progress.unwrap_or(&NoProgress);
    progress.start(survey.data_bytes, Unit::Bytes);
    // Pass 2: each winner the format holds, loaded from the input it comes from.
    let tensors = Union::new(inputs)?.filter_map(|u| match u {
        Err(e) => Some(Err(e)),
        Ok(u) => u
            .split(format, skip)
            .0
            .into_iter()
            .last()
            .filter(|(_, t)| format.cannot_hold(t).is_none())
            .map(|(i, t)| Ok((inputs[i].store, t))),
    });
    let written = write_native(
        tensors,
        dst,
        url.zip(upload.as_ref()),
        &opts.export.writer,
        metadata,
        progress,
    )?;
    Ok(MergeReport {
        written: ExportReport::new(format, written, skipped, metadata),
        replaced,
    })
}

/// The upload of a merge to the object `url`, refused up front if the object exists and
/// `overwrite` is off.
#[cfg(feature = "s3")]
fn upload_to(url: &str, overwrite: bool) -> Result<crate::remote::UploadOptions> {
    if !overwrite && crate::remote::object_exists(url)? {
        return Err(Error::OutputExists {
            path: url.to_string(),
        });
    }
    Ok(crate::remote::UploadOptions::default())
}

/// Without object storage (the `s3` feature), a merge to an object is refused before anything
/// is read.
#[cfg(not(feature = "s3"))]
fn upload_to(url: &str, _overwrite: bool) -> Result<crate::remote::UploadOptions> {
    Err(crate::remote::not_built(url))
}

/// The inputs' metadata, later inputs' values replacing earlier ones' when `allow_override`;
/// without it a key with two different values is an error naming both inputs.
fn merge_metadata(inputs: &[MergeInput<'_>], allow_override: bool) -> Result<Metadata> {
    let mut metadata = Metadata::new();
    // Which input each key's value came from, for messages.
    let mut from: BTreeMap<String, usize> = BTreeMap::new();
    for (i, input) in inputs.iter().enumerate() {
        for (k, v) in input.store.metadata()?.iter() {
            if let (Some(old), Some(&j)) = (metadata.get(k), from.get(k)) {
                if old != v && !allow_override {
                    return Err(Error::InvalidArgument(format!(
                        "metadata key {k:?} is {} in {} and {} in {}; pass --allow-override to \
                         keep the later one",
                        old.to_json(),
                        inputs[j].path.display(),
                        v.to_json(),
                        input.path.display()
                    )));
                }
            }
            metadata.insert(k, v.clone())?;
            from.insert(k.to_string(), i);
        }
    }
    Ok(metadata)
}

/// The inputs' listings merged in bytewise name order: each name once, with who holds it. Holds
/// the next tensor of each input, nothing more.
struct Union<'a> {
    streams: Vec<TensorInfos<'a>>,
    /// The next tensor of each stream (`None`: the stream is done).
    heads: Vec<Option<TensorInfo>>,
}

/// One name of a [`Union`].
struct Holders {
    /// The name.
    name: Vec<u8>,
    /// Each input holding it (index, its tensor), in input order: the last one wins.
    holders: Vec<(usize, TensorInfo)>,
}

/// Holders of one name: those that take part in a merge into `format`, and those left out.
type Split = (Vec<(usize, TensorInfo)>, Vec<(usize, TensorInfo)>);

impl Holders {
    /// With `skip`, the holders whose tensor `format` cannot hold are left out (they take no
    /// part in conflicts or in choosing the winner); otherwise every holder takes part.
    fn split(&self, format: OutputFormat, skip: bool) -> Split {
        self.holders
            .iter()
            .cloned()
            .partition(|(_, t)| !skip || format.cannot_hold(t).is_none())
    }
}

impl<'a> Union<'a> {
    fn new(inputs: &[MergeInput<'a>]) -> Result<Union<'a>> {
        let mut streams = inputs
            .iter()
            .map(|i| i.store.scan(b""))
            .collect::<Result<Vec<_>>>()?;
        let heads = streams
            .iter_mut()
            .map(|s| s.next().transpose())
            .collect::<Result<Vec<_>>>()?;
        Ok(Union { streams, heads })
    }

    /// Takes stream `i`'s head and reads its next tensor in its place.
    fn advance(&mut self, i: usize) -> Result<Option<TensorInfo>> {
        let next = self.streams[i].next().transpose()?;
        Ok(std::mem::replace(&mut self.heads[i], next))
    }
}

impl Iterator for Union<'_> {
    type Item = Result<Holders>;

    fn next(&mut self) -> Option<Result<Holders>> {
        // The first input whose head has the smallest name (`min_by` keeps the first of equal
        // elements): no earlier input holds that name.
        let first = (0..self.heads.len())
            .filter_map(|i| self.heads[i].as_ref().map(|t| (i, t)))
            .min_by(|(_, a), (_, b)| a.name.cmp(&b.name))?
            .0;
        let info = match self.advance(first) {
            Ok(Some(t)) => t,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let name = info.name.clone();
        let mut holders = vec![(first, info)];
        for j in first + 1..self.heads.len() {
            if self.heads[j].as_ref().is_some_and(|t| t.name == name) {
                match self.advance(j) {
                    Ok(Some(t)) => holders.push((j, t)),
                    Ok(None) => {}
                    Err(e) => return Some(Err(e)),
                }
            }
        }
        Some(Ok(Holders { name, holders }))
    }
}
