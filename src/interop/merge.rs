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
use crate::interop::export::{survey, ExportOptions, ExportReport, OutputFormat};
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
/// file cannot hold (not numeric) are an error naming the first, or left out with
/// [`ExportOptions::skip_unsupported`]; only the tensor that wins is checked.
///
/// # Errors
///
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
    // Pass 1: every conflict and every tensor the format cannot hold, before a byte is written.
    let mut replaced = 0u64;
    let winners = Union::new(inputs)?.map(|u| {
        let u = u?;
        if let Some(second) = u.second {
            if !opts.allow_override {
                return Err(Error::InvalidArgument(format!(
                    "tensor {} is in both {} and {}; pass --allow-override to keep the later one",
                    name::display(&u.info.name),
                    inputs[u.first].path.display(),
                    inputs[second].path.display()
                )));
            }
            replaced += u.holders - 1;
        }
        Ok(u.info)
    });
    let survey = survey(winners, format, opts.export.skip_unsupported, &mut NoLimit)?;
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
        Ok(u) => format
            .cannot_hold(&u.info)
            .is_none()
            .then(|| Ok((inputs[u.winner].store, u.info))),
    });
    let written = write_native(tensors, dst, &opts.export.writer, metadata, progress)?;
    Ok(MergeReport {
        written: ExportReport::new(format, written, survey.skipped, metadata),
        replaced,
    })
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
struct Held {
    /// The tensor as the winning input lists it.
    info: TensorInfo,
    /// The last input holding the name (the one that wins).
    winner: usize,
    /// The first input holding it.
    first: usize,
    /// The second input holding it, if there is one (a conflict).
    second: Option<usize>,
    /// How many inputs hold it.
    holders: u64,
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
    type Item = Result<Held>;

    fn next(&mut self) -> Option<Result<Held>> {
        // The first input whose head has the smallest name (`min_by` keeps the first of equal
        // elements): no earlier input holds that name.
        let first = (0..self.heads.len())
            .filter_map(|i| self.heads[i].as_ref().map(|t| (i, t)))
            .min_by(|(_, a), (_, b)| a.name.cmp(&b.name))?
            .0;
        let mut info = match self.advance(first) {
            Ok(Some(t)) => t,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let (mut winner, mut second, mut holders) = (first, None, 1);
        for j in first + 1..self.heads.len() {
            if self.heads[j].as_ref().is_some_and(|t| t.name == info.name) {
                match self.advance(j) {
                    Ok(Some(t)) => info = t,
                    Ok(None) => {}
                    Err(e) => return Some(Err(e)),
                }
                second.get_or_insert(j);
                winner = j;
                holders += 1;
            }
        }
        Some(Ok(Held {
            info,
            winner,
            first,
            second,
            holders,
        }))
    }
}
