//! The one registry of input formats ([`OPENERS`]): every input, a path or what a URL names,
//! goes through the same ordered list of detectors, so that a format is found in a directory
//! and in a bucket alike, in the same order. Each detector has a side for each place: a path
//! (the format's `open_store`, which maps a local file) and, with object storage, an input a
//! URL was resolved to once (`remote::ObjectInput`: its first read held). Its own file: the
//! list sits above every format and below `open_any` (`mod.rs`), which resolves checkpoint
//! directories and looks one level down around it.

use std::path::Path;

use crate::error::Result;

#[cfg(feature = "s3")]
use super::remote::{self, ObjectInput, UrlOptions};
use super::store::TensorStore;
use super::{foreign, gguf, hf, native, paddle, safetensors, tf, torch};
#[cfg(feature = "s3")]
use crate::remote::{ObjectLocation, RemoteOptions};

/// What a detector answers: the store of its format, `Ok(None)` when the input is not its
/// format, an error naming what is wrong when it is but cannot be opened.
type Found = Result<Option<Box<dyn TensorStore>>>;

/// One format's detector, for each place an input can be.
pub(crate) struct Detector {
    /// A path: a file, a directory, or a prefix naming no file. Decides by content (never by
    /// extension); claims a directory only when it is the input itself.
    path: fn(&Path) -> Found,
    /// What a URL names (an object, a checkpoint by its index, or nothing there). Reads what
    /// the input holds before asking for more.
    #[cfg(feature = "s3")]
    object: fn(&ObjectInput<'_>) -> Found,
}

/// A path detector with nothing to do: the format is decided elsewhere in the list.
fn no_path(_: &Path) -> Found {
    Ok(None)
}

/// An object detector with nothing to do: the format is decided elsewhere in the list.
#[cfg(feature = "s3")]
fn no_object(_: &ObjectInput<'_>) -> Found {
    Ok(None)
}

/// The formats, tried in this order for every input, path or URL, until one claims it (order
/// matters: specific, cheap checks first; formats whose tests overlap, the more specific
/// first). Other formats register here.
pub(crate) const OPENERS: &[Detector] = &[
    // A torch DCP directory (or its `.metadata`) first: the Paddle per-variable detector
    // would take a `.distcp` file starting with zeros for a damaged tensor file.
    Detector {
        path: torch::dcp::open_store,
        #[cfg(feature = "s3")]
        object: remote::dcp,
    },
    // A Hugging Face directory (its model file, or its sharded checkpoint's index) or index.
    Detector {
        path: open_hf,
        #[cfg(feature = "s3")]
        object: open_hf_object,
    },
    // Safetensors, when its first bytes are at hand (a file; an object whose first read held
    // its start): they decide it, and no native file starts like one (a native file's first
    // record starts with a zero version: as a header length, 0 or at least 2^32).
    Detector {
        path: safetensors::open_store,
        #[cfg(feature = "s3")]
        object: remote::safetensors_held,
    },
    Detector {
        path: native::open_native,
        #[cfg(feature = "s3")]
        object: remote::native,
    },
    // Safetensors whose start was not at hand (an object read from its end first): read now,
    // after the native test, which the end decided with no request more.
    Detector {
        path: no_path,
        #[cfg(feature = "s3")]
        object: remote::safetensors_read,
    },
    // GGUF: its magic `GGUF` (a safetensors header length of 0x46554747 would be followed by
    // `{`, a native file starts with a zero version); an object's start is the one the
    // safetensors test above read.
    Detector {
        path: gguf::open_store,
        #[cfg(feature = "s3")]
        object: remote::gguf,
    },
    Detector {
        path: tf::open_store,
        #[cfg(feature = "s3")]
        object: remote::tf,
    },
    // Before the merged-file detector, which would take a zip's header for a size field.
    Detector {
        path: torch::open_store,
        #[cfg(feature = "s3")]
        object: remote::torch,
    },
    // Before the merged-file detector, which would take a pickle's header for a size field.
    Detector {
        path: paddle::dygraph::open_store,
        #[cfg(feature = "s3")]
        object: remote::dygraph,
    },
    // An object's merged file is found by the Paddle detector below, which follows Paddle's
    // local rules over fetched files (a merged file among them).
    Detector {
        path: paddle::open_merged_store,
        #[cfg(feature = "s3")]
        object: no_object,
    },
    Detector {
        path: paddle::open_store,
        #[cfg(feature = "s3")]
        object: remote::paddle,
    },
];

/// A Hugging Face layout ([`hf`]), its files opened by the same detection as any file.
fn open_hf(path: &Path) -> Found {
    hf::open_store(path, detect)
}

/// A Hugging Face layout in a bucket, its shards opened as any URL, its model file as any
/// object.
#[cfg(feature = "s3")]
fn open_hf_object(o: &ObjectInput<'_>) -> Found {
    remote::hf(o, open_location, open_input)
}

/// The store of the first format that claims `path`, if one does. A file that none claims
/// (or that a format refuses as not its own) but that looks like a format recognised in
/// [`foreign`] (a zip, a pickle, a torch DCP data file) is [`Error::UnrecognizedFormat`]
/// saying so; a DCP data file (`*.distcp`) is, before any format looks at it (its directory,
/// or its `.metadata`, is the input).
///
/// [`Error::UnrecognizedFormat`]: crate::Error::UnrecognizedFormat
pub(crate) fn detect(path: &Path) -> Found {
    let is_dir = path.is_dir();
    // A DCP data file alone: its `.distcp` bytes hold raw storages and zips that other
    // detectors would take for damaged files of theirs; its directory is the input.
    // So is a directory of data files without its `.metadata` (a save that did not finish),
    // which the Paddle per-variable detector would take for damaged tensor files.
    let distcp = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(".distcp"));
    if distcp || (is_dir && !torch::dcp::is_dcp(path)) {
        if let Some(e) = foreign::refusal(path) {
            return Err(e);
        }
    }
    let mut result = Ok(None);
    for d in OPENERS {
        result = (d.path)(path);
        if !matches!(result, Ok(None)) {
            break;
        }
    }
    match result {
        Ok(None) | Err(crate::Error::UnrecognizedFormat { .. }) if !is_dir => {
            foreign::refusal(path).map_or(result, Err)
        }
        r => r,
    }
}

/// Opens what `loc` names: resolved once (by its name where the name says, with the first read
/// that name suggests), then detected by the same list of formats as a path, in the same order:
///
/// * `KEY.index`: the index of a checkpoint at prefix `KEY`: a TensorFlow checkpoint, or a
///   sharded paramdex checkpoint (a paramdex header in the index); a native single file so
///   named is read as one. `KEY.data-SSSSS-of-NNNNN`: the data object of a checkpoint at
///   prefix `KEY` (opened by its `.index`).
/// * any other key naming an object: a native paramdex file (the table magic ends it and its
///   header is a paramdex one), or a safetensors file (an 8-byte little-endian header length,
///   then `{`). A key ending in `.safetensors` is read from its start first (one request holds
///   the header length and, usually, the header), any other from its end (one request holds a
///   native file's footer and, usually, its index block), and the other end only when the
///   first read did not decide. A `torch.save` zip, a Paddle dygraph pickle and a Paddle
///   model's files are read whole and opened by the local readers.
/// * a key naming no object, where `KEY.index` is one: the checkpoint at prefix `KEY`, as
///   above. Neither is [`RemoteProblem::NotFound`] naming both URLs, unless `KEY/.metadata` is
///   a pickle: then `KEY` is a torch DCP checkpoint, read as a local directory is (so is
///   `KEY/.metadata` named itself); or `KEY` holds a Hugging Face layout or a Paddle model.
/// * an object that is none of these is [`Error::UnrecognizedFormat`], saying what it looks
///   like where it is recognised (a `torch.save` zip, a pickle, a DCP `.distcp`), as a local
///   file would.
///
/// [`RemoteProblem::NotFound`]: crate::RemoteProblem::NotFound
/// [`Error::UnrecognizedFormat`]: crate::Error::UnrecognizedFormat
#[cfg(feature = "s3")]
pub fn open_location(loc: ObjectLocation, opts: &UrlOptions) -> Result<Box<dyn TensorStore>> {
    open_input(&ObjectInput::resolve(loc, opts)?)
}

/// The store of the first format that claims the resolved input `o`; the error saying what it
/// is not when none does.
#[cfg(feature = "s3")]
fn open_input(o: &ObjectInput<'_>) -> Result<Box<dyn TensorStore>> {
    for d in OPENERS {
        if let Some(store) = (d.object)(o)? {
            return Ok(store);
        }
    }
    Err(o.unclaimed())
}

/// Opens what `url` names (`s3://bucket/key`, `file:///path`), resolved with
/// [`crate::remote::resolve`] (the `AWS_*` environment and the [`crate::remote::S3Settings`]
/// in force), with default [`UrlOptions`]. See [`open_location`].
#[cfg(feature = "s3")]
pub(crate) fn dispatch(url: &str) -> Result<Box<dyn TensorStore>> {
    let config = crate::remote::RemoteConfig::from_env()?;
    let opts = UrlOptions {
        native: RemoteOptions::with_config(&config),
        ..UrlOptions::default()
    };
    open_location(crate::remote::resolve_with(url, &config)?, &opts)
}

/// Without object storage (the `s3` feature), a URL is refused as one
/// ([`crate::Error::NoObjectStorage`]), never taken for a path.
#[cfg(not(feature = "s3"))]
pub(crate) fn dispatch(url: &str) -> Result<Box<dyn TensorStore>> {
    Err(crate::remote::not_built(url))
}
