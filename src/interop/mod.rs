//! Advanced: other formats. A program that saves and restores its own checkpoints needs only
//! what the crate root re-exports from here ([`CheckpointManager`] and its options,
//! [`TensorStore`]); the crate docs walk through it.
//!
//! One interface ([`TensorStore`]) over every input paramdex reads (native
//! files, TensorFlow checkpoints, Paddle models and tensor files, safetensors, GGUF), the registry
//! that detects them by content ([`open_any`]), one interface that writes every output format
//! ([`export`], [`OutputFormat`]), and [`merge`] (several stores into one native file).
//!
//! Layering inside: `store` (the trait and its types, and the writers' side of [`export`])
//! depends on no format; each format module depends on `store` and the layers below; the
//! registries (`OPENERS` in `registry`, for paths and URLs alike; `EXPORTERS` in `export`)
//! and `merge` sit above them all.

use std::path::{Path, PathBuf};

use crate::error::{Error, RemoteProblem, Result};

mod checkpoints;
mod export;
pub(crate) mod foreign;
pub mod gguf;
pub mod hf;
pub mod json;
mod merge;
pub(crate) mod native;
pub mod npy;
pub mod paddle;
pub mod pickle;
mod pretrained;
// A native file or sharded checkpoint read by ranges (`native::ranged`), as a store.
// The one list of input formats, for paths and URLs alike.
mod registry;
// Object storage (the `s3` feature): what a URL names, resolved once, and each format's
// detector over it.
#[cfg(feature = "s3")]
mod remote;
pub mod safetensors;
mod store;
mod survey;
pub mod tf;
pub mod torch;

pub use checkpoints::{
    list_run, run_step_of, step_of, AsyncSaveReport, BestBy, Candidate, CheckpointInfo,
    CheckpointManager, CheckpointState, KeepPolicy, Layout, ManagerOptions, OwnedTensor,
    PruneReport, RunCheckpoint, RunCheckpointKind, RunListing, DCP_METADATA_KEY, DCP_PREFIX,
    MAX_STATE_BYTES, MAX_STATE_ENTRIES, STATE_FILE, TORCH_DCP_METADATA,
};
pub use export::{export, ExportOptions, ExportReport, OutputFormat, Skipped};
pub use merge::{merge, MergeInput, MergeOptions, MergeReport};
pub use pretrained::{export_pretrained, PretrainedReport, DEFAULT_MAX_SHARD_SIZE};
#[cfg(feature = "s3")]
pub use registry::open_location;
#[cfg(feature = "s3")]
pub use remote::{UrlOptions, MAX_WHOLE_OBJECT_BYTES};
pub use store::{
    DataFileLayout, DataLocation, ForeignType, Format, Kind, LoadedTensor, SliceLocation,
    StoreLayout, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary, MAX_FOREIGN_NAME,
};
pub use survey::{is_directory, survey, Found, MAX_SURVEYED};

use registry::detect;

/// Opens any supported input, detecting its format by content (not by extension).
///
/// A directory with TensorFlow's `checkpoint` state file opens its latest checkpoint, and
/// `DIR@STEP` the checkpoint of step `STEP` in `DIR` (see [`CheckpointManager`]); the same for
/// a directory URL (`s3://bucket/dir`, `file:///dir`, and `URL@STEP`) that names no object.
///
/// A directory that no format claims itself (it is not a checkpoint directory, a Paddle model
/// directory or a directory of tensor files) is looked into one level down, the same way for
/// every format: its subdirectories (hidden ones, starting with `.`, left aside) are tried as
/// inputs, and when exactly one of them is one, it is opened, so `DIR` opens `DIR/legacy/` when
/// that holds the only model. Several are an error listing them.
pub fn open_any(path: impl AsRef<Path>) -> Result<Box<dyn TensorStore>> {
    let path = path.as_ref();
    if let Some(url) = crate::remote::url_of(path) {
        return match open_url_input(url) {
            // Nothing there: a "directory" of the bucket holding one input one level down?
            Err(
                e @ Error::Remote {
                    problem: RemoteProblem::NotFound,
                    ..
                },
            ) => {
                // A checkpoint directory of `paramdex.torch.dcp` (its `checkpoint_id`): the
                // sharded checkpoint at its prefix `dcp` (a bucket holds no state file naming it).
                // (A `file://` directory has the state file `finish` writes locally.)
                if !url.starts_with("file://") {
                    let dcp = format!("{}/{}", url.trim_end_matches('/'), checkpoints::DCP_PREFIX);
                    match open_url_input(&dcp) {
                        Err(Error::Remote {
                            problem: RemoteProblem::NotFound,
                            ..
                        }) => {}
                        r => return r,
                    }
                }
                // A listing that fails says nothing more than the not-found error already does.
                #[cfg(feature = "s3")]
                let subdirs = remote::subdirectories(url).unwrap_or_default();
                #[cfg(not(feature = "s3"))]
                let subdirs: Vec<String> = Vec::new();
                let steps = subdirs
                    .iter()
                    .filter(|d| {
                        d.rsplit('/')
                            .next()
                            .and_then(checkpoints::run_step_of)
                            .is_some()
                    })
                    .count();
                // Several step directories are a run, not one input one level down: say so
                // (looking into each would only stop at the first damaged or unfinished step).
                if steps > 1 {
                    return Err(with_run_hint(e, url, steps));
                }
                let subdirs = subdirs.into_iter().map(PathBuf::from).collect();
                match one_of(path, subdirs, |sub| {
                    let url = sub.to_string_lossy();
                    match open_url_input(&url) {
                        Err(Error::Remote {
                            problem: RemoteProblem::NotFound,
                            ..
                        }) => Ok(None),
                        r => r.map(Some),
                    }
                })? {
                    Some(store) => Ok(store),
                    None => Err(with_run_hint(e, url, steps)),
                }
            }
            r => r,
        };
    }
    // A checkpoint directory (its latest) or `DIR@STEP`.
    if let Some(index) = checkpoints::resolve_input(path)? {
        return open_any(index);
    }
    if let Some(store) = detect(path)? {
        return Ok(store);
    }
    if let Some(e) = unfinished_save(path) {
        return Err(e);
    }
    if !path.exists() {
        return Err(Error::io(
            format!("opening {}", path.display()),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file, directory or checkpoint prefix",
            ),
        ));
    }
    if path.is_dir() {
        if let Some(store) = one_level_down(path)? {
            return Ok(store);
        }
    }
    let kinds = foreign::READ_KINDS;
    let detail = match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => format!("the file is empty: not {kinds}"),
        Ok(m) if m.is_dir() => format!(
            "a directory holding no checkpoint, model or tensor files: not {kinds}, nor a \
             directory of them, and none of its subdirectories is one"
        ),
        _ => format!("not {kinds}"),
    };
    Err(Error::UnrecognizedFormat {
        path: path.display().to_string(),
        looks_like: None,
        detail,
    })
}

/// A not-found error `e` for the URL `url`, which holds `steps` step directories: it says that
/// this is a run, and how to list its checkpoints.
fn with_run_hint(e: Error, url: &str, steps: usize) -> Error {
    match e {
        Error::Remote {
            url: u,
            problem,
            detail,
            source,
        } if steps > 0 => Error::Remote {
            url: u,
            problem,
            detail: format!(
                "{detail}; it holds {steps} step directories, a run: `paramdex ckpt {url}` lists \
                 them and names the latest complete one"
            ),
            source,
        },
        e => e,
    }
}

/// What the URL `url` names: an object or checkpoint prefix, else a managed checkpoint
/// directory (its latest) or `URL@STEP`. The index found is an `s3://` URL in a bucket and a
/// local path for `file:///dir` (whose checkpoints are the local directory's).
fn open_url_input(url: &str) -> Result<Box<dyn TensorStore>> {
    match registry::dispatch(url) {
        Err(
            e @ Error::Remote {
                problem: RemoteProblem::NotFound,
                ..
            },
        ) => match checkpoints::resolve_url_input(url)? {
            Some(index) => open_any(index),
            None => Err(e),
        },
        r => r,
    }
}

/// For an input that is no checkpoint: when it is the prefix of a sharded save that never
/// committed (only pending, orphan or temporary files of it are there: a writer or the merge was
/// killed), or a directory holding such files (`paramdex.torch.dcp` saves at `DIR/dcp`), the
/// error that names them and what to do, instead of "no such file".
fn unfinished_save(path: &Path) -> Option<Error> {
    use crate::native::{shard_files, ShardFileKind};
    let prefixes: Vec<PathBuf> = if path.is_dir() {
        // Prefixes of the pending data files directly in the directory.
        let mut found: Vec<PathBuf> = std::fs::read_dir(path)
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                match crate::native::split_data_name(name.as_bytes())? {
                    // The prefix ends where `.data-` starts: an ASCII boundary of `name`.
                    (prefix, crate::native::Sibling::Data { pending: true, .. }) => {
                        Some(path.join(name.get(..prefix.len())?))
                    }
                    _ => None,
                }
            })
            .collect();
        found.sort();
        found.dedup();
        found
    } else if path.exists() {
        return None;
    } else {
        vec![path.to_path_buf()]
    };
    for prefix in prefixes {
        if crate::native::index_path(&prefix).exists() {
            continue;
        }
        let Ok(files) = shard_files(&prefix) else {
            continue;
        };
        let left: Vec<String> = files
            .iter()
            .filter(|f| f.kind != ShardFileKind::Committed)
            .map(|f| {
                let name = f.path.file_name().map_or_else(
                    || f.path.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
                format!("{name} ({:?})", f.kind).to_lowercase()
            })
            .collect();
        if left.is_empty() {
            continue;
        }
        let shown = prefix.display();
        return Some(Error::Shard {
            path: shown.to_string(),
            problem: crate::error::ShardProblem::Leftover,
            detail: format!(
                "no checkpoint here: only the files of a sharded save that never committed \
                 ({}); `paramdex clean-shards {shown}` removes them, `paramdex merge-shards \
                 {shown}` commits the save if all its shards are there",
                left.join(", ")
            ),
        });
    }
    None
}

/// The checkpoint [`open_any`] opens for a checkpoint-directory input, as its `.index` file
/// (a path, or a URL for a directory in a bucket): `DIR` (its latest, the one its `checkpoint`
/// state file names) or `DIR@STEP`. `None` for any other input. (`paramdex stat DIR` says
/// which step it read.) A URL costs a request for its `checkpoint` object.
pub fn resolve_checkpoint_dir(path: impl AsRef<Path>) -> Result<Option<PathBuf>> {
    let path = path.as_ref();
    if let Some(url) = crate::remote::url_of(path) {
        // `file:///dir`: the local directory's checkpoints, as `open_any` reads them.
        if let Some(local) = url.strip_prefix("file://") {
            return checkpoints::resolve_input(Path::new(local));
        }
        #[cfg(feature = "s3")]
        return Ok(checkpoints::resolve_url_input(url)?
            .map(PathBuf::from)
            // As locally: a state naming a checkpoint without a step is read by the
            // TensorFlow format as its own checkpoint, not as a managed one.
            .filter(|index| {
                index
                    .file_stem()
                    .and_then(|n| n.to_str())
                    .and_then(step_of)
                    .is_some()
            }));
        #[cfg(not(feature = "s3"))]
        return Err(crate::remote::not_built(url));
    }
    checkpoints::resolve_input(path)
}

/// Most subdirectories [`open_any`] tries as inputs when it looks into a directory.
pub const MAX_SUBDIRS_TRIED: usize = 4096;

/// The one input among the subdirectories of `dir`, if there is exactly one; an error listing
/// them if there are several. A subdirectory that a format claims but cannot open (a damaged
/// model) counts as an input: when it is the only one, its error is the result. A
/// subdirectory that looks like a foreign format (a torch DCP checkpoint, see [`foreign`])
/// is no input, but when there is no input and exactly one such, its error is the result.
fn one_level_down(dir: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    let listing = |e| Error::io(format!("listing {}", dir.display()), e);
    let mut subdirs = Vec::new();
    for ent in std::fs::read_dir(dir).map_err(listing)? {
        let ent = ent.map_err(listing)?;
        let hidden = ent.file_name().to_string_lossy().starts_with('.');
        // Symbolic links to directories are followed (one level only: no recursion).
        if !hidden && ent.path().is_dir() {
            subdirs.push(ent.path());
            crate::error::ensure_within(
                "subdirectories to look into for an input",
                subdirs.len(),
                MAX_SUBDIRS_TRIED,
                None,
            )?;
        }
    }
    subdirs.sort();
    one_of(dir, subdirs, detect)
}

/// The one input among `subdirs`, the subdirectories of `dir` (a path, or a URL in a bucket),
/// each opened by `open` (`Ok(None)`: not an input). Several are an error listing them; none
/// is `Ok(None)`, or the one foreign format recognised there.
fn one_of(
    dir: &Path,
    subdirs: Vec<PathBuf>,
    open: impl Fn(&Path) -> Result<Option<Box<dyn TensorStore>>>,
) -> Result<Option<Box<dyn TensorStore>>> {
    crate::error::ensure_within(
        "subdirectories to look into for an input",
        subdirs.len(),
        MAX_SUBDIRS_TRIED,
        None,
    )?;
    let mut found: Vec<(PathBuf, Result<Box<dyn TensorStore>>)> = Vec::new();
    let mut foreign = Vec::new();
    for sub in subdirs {
        match open(&sub) {
            Ok(None) => {}
            Ok(Some(store)) => found.push((sub, Ok(store))),
            Err(
                e @ Error::UnrecognizedFormat {
                    looks_like: Some(_),
                    ..
                },
            ) => foreign.push(e),
            Err(e) => found.push((sub, Err(e))),
        }
    }
    if found.is_empty() && foreign.len() == 1 {
        return foreign.pop().map(Err).transpose();
    }
    if found.len() <= 1 {
        return found.pop().map(|(_, r)| r).transpose();
    }
    let list: Vec<String> = found
        .iter()
        .map(|(p, r)| match r {
            Ok(s) => format!("{} ({})", p.display(), s.format().name()),
            Err(_) => format!("{} (cannot be opened)", p.display()),
        })
        .collect();
    Err(Error::InvalidArgument(format!(
        "{} is not an input itself, and {} of its subdirectories are: {}; give one of them",
        dir.display(),
        found.len(),
        list.join(", ")
    )))
}

/// Opens the native file or sharded checkpoint at `at` as a store, reading as `opts` says: a
/// path (`FILE`, `PREFIX` or `PREFIX.index`) is mapped ([`crate::Reader::open_with`]); a URL
/// (`s3://`, `file://`) is opened as [`open_any`] opens it, by
/// ranges, every tensor read checked against its CRC32C whatever `opts` says (bytes from a
/// network are never returned unchecked). The one open of a native checkpoint for callers that
/// take a path or a URL alike and want its reads checked (the Python package's region reader).
///
/// Errors: those of [`crate::Reader::open_with`] and of `open_any`; [`Error::UnrecognizedFormat`]
/// for a URL naming another format.
pub fn open_native_with(
    at: impl AsRef<Path>,
    opts: crate::ReadOptions,
) -> Result<Box<dyn TensorStore>> {
    let at = at.as_ref();
    if crate::remote::url_of(at).is_none() {
        return Ok(Box::new(crate::Reader::open_with(at, opts)?));
    }
    let store = open_any(at)?;
    if store.format() != Format::Native {
        return Err(Error::UnrecognizedFormat {
            path: at.display().to_string(),
            detail: format!(
                "a {} input, not a native paramdex file or sharded checkpoint",
                store.format().name()
            ),
            looks_like: None,
        });
    }
    Ok(store)
}
