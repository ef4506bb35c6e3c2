//! PaddlePaddle models and tensor files: reading them and writing what Paddle loads.
//!
//! Inputs, detected by content by [`open_store`] (and so by [`crate::interop::open_any`]):
//!
//! - **A model**: a program (legacy `ProgramDesc` `.pdmodel`, or PIR `.json`) and its combined
//!   parameter file `.pdiparams`, given as the prefix `PREFIX` (with `PREFIX.pdmodel` or
//!   `PREFIX.json`, and `PREFIX.pdiparams`), as the `.pdiparams` path with its program beside
//!   it, as the program path with its `.pdiparams` beside it, or as a directory holding exactly
//!   one such pair. The old inference layout `__model__` + `__params__` (or `params`) works too.
//!   When both `PREFIX.json` and `PREFIX.pdmodel` exist, the `.json` (Paddle 3's default) is
//!   used. The parameter names come from the program ([`Program`]); the records are matched to
//!   them strictly, in bytewise name order.
//! - **A tensor file** (`save_dense_tensor`, the `save` op): exactly one record, ending at EOF.
//!   Its tensor name is the file name.
//! - **A directory of per-variable files** (`save_vars` with `filename=None`): every regular
//!   file, recursively, each exactly one record; the name is the path relative to the
//!   directory, with `/` separators. Symbolic links to files are followed; symbolic links to
//!   directories and special files are refused. If the directory holds a program `__model__`
//!   (legacy) or `__model__.json` (PIR), as `save_inference_model(..., separate_parameters=True)`
//!   and old inference directories have it, and no combined parameters, the names are the
//!   program's parameters instead, each read from `DIR/NAME`; other files are ignored, as
//!   Paddle's loaders ignore them.
//!
//! - **A size-prefixed merged file** (the design document "Merging all params in a single
//!   file"; SPEC.md section 9.1): [`merged`], opened by [`open_merged_store`], registered
//!   before [`open_store`] in the registry. Names from the program beside it, else `#k`.
//!
//! A Python pickle (`.pdparams`/`.pdopt` from `paddle.save`: first bytes `80 02`..`80 05`) is
//! reported as such, not read as a tensor stream.
//!
//! Output, through [`crate::interop::export`]:
//! [`OutputFormat::PaddleCombined`](crate::interop::OutputFormat::PaddleCombined)
//! (`convert --to paddle`, written to [`combined_path`]) and
//! [`OutputFormat::PaddleTensors`](crate::interop::OutputFormat::PaddleTensors)
//! (`convert --to paddle-tensor`, names as [`relative_path`]s) and
//! [`OutputFormat::PaddleMerged`](crate::interop::OutputFormat::PaddleMerged)
//! (`convert --to paddle-merged`, the program at [`merged_program_output`]).

mod combined;
pub mod dygraph;
#[cfg(feature = "s3")]
pub(crate) mod fetched;
pub mod merged;
mod program;
mod store;
mod write;

use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use crate::error::{ensure_within, Error, LooksLike, Result};
use crate::interop::foreign;
use crate::interop::store::{Format, TensorStore};
use crate::name::{display, MAX_NAME_LEN};
use crate::native::Source;
use crate::record::MAX_LOD_LEVELS;

pub use merged::{open_merged, open_merged_store, MergedStore};
pub use program::{
    load_program, parse_pir_json, parse_program_desc, ParamDecl, Program, ProgramKind,
    MAX_PROGRAM_LEN,
};
pub use store::PaddleStore;
pub(crate) use write::{
    cannot_be_a_file, cannot_hold_combined, combined_outputs, export_combined, export_merged,
    export_tensor_files,
};
pub use write::{
    combined_path, merged_program_output, pir_program_path, program_path, relative_path,
    MAX_FILE_NAME_LEN,
};

use store::{Entry, FileSlot};

/// Most files read from one per-variable directory.
pub const MAX_DIR_FILES: usize = 1 << 20;
/// Deepest subdirectory nesting read from a per-variable directory.
pub const MAX_DIR_DEPTH: usize = 64;

/// File extensions that mark a file as Paddle's, so that decoding errors are reported for it
/// rather than the file being passed over as some other format.
const PADDLE_EXTS: [&str; 6] = [
    "pdiparams",
    "pdparams",
    "pdopt",
    "pdmodel",
    "lodtensor",
    "pdtensor",
];

/// Opens `path` as a Paddle model, tensor file or per-variable directory, or `Ok(None)` if it
/// is none of them (see the module docs for what is recognised and how).
///
/// # Errors
///
/// [`Error::UnrecognizedFormat`] for a pickle or a half model (a program without parameters,
/// parameters without program); [`Error::Corrupt`] (naming file, tensor and offset) for a Paddle
/// input that breaks the rules; I/O errors.
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    Ok(detect(path)?.map(|s| Box::new(s) as Box<dyn TensorStore>))
}

fn detect(path: &Path) -> Result<Option<PaddleStore>> {
    // PREFIX form: PREFIX.pdiparams beside PREFIX.json / PREFIX.pdmodel.
    let params = with_suffix(path, ".pdiparams");
    if params.is_file() {
        if let Some(prog) = find_program(path) {
            return open_model(&params, &prog).map(Some);
        }
        if !path.exists() {
            return Err(unrecognized(
                path,
                format!(
                    "{} exists, but no program ({}.json or {}.pdmodel) is beside it: the \
                     parameter names are in the program",
                    params.display(),
                    path.display(),
                    path.display()
                ),
            ));
        }
    }
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            if let Some(prog) = find_program(path) {
                if prog.extension().is_some_and(|e| e == "pdmodel") || is_pir_json(&prog) {
                    return program_without_params(&prog, &params).map(Some);
                }
            }
            return Ok(None);
        }
        Err(e) => {
            return Err(Error::io(
                format!("reading metadata of {}", path.display()),
                e,
            ))
        }
    };
    if meta.is_dir() {
        detect_dir(path)
    } else if meta.is_file() {
        detect_file(path)
    } else {
        Ok(None)
    }
}

/// A file: a model's `.pdiparams` or program, or a tensor file.
fn detect_file(path: &Path) -> Result<Option<PaddleStore>> {
    let src = Source::map(path)?;
    check_pickle(path, &src)?;
    let fname = path.file_name().unwrap_or_default();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let dir = path.parent().unwrap_or(Path::new(""));

    if ext == "pdiparams" {
        if let Some(prog) = find_program(&path.with_extension("")) {
            return open_model_with(path, src, &prog).map(Some);
        }
    }
    if fname == "__params__" || fname == "params" {
        let prog = dir.join("__model__");
        if prog.is_file() {
            return open_model_with(path, src, &prog).map(Some);
        }
    }
    let legacy_dir_program = fname == "__model__" || fname == "__model__.json";
    let is_desc = ext == "pdmodel" || fname == "__model__";
    if is_desc || ext == "json" {
        let params = if legacy_dir_program {
            ["__params__", "params"]
                .iter()
                .map(|p| dir.join(p))
                .find(|p| p.is_file())
        } else {
            Some(path.with_extension("pdiparams")).filter(|p| p.is_file())
        };
        match params {
            Some(params) => return open_model(&params, path).map(Some),
            None if legacy_dir_program => {
                // An inference directory with one file per parameter.
                return open_dir_with_program(dir, path).map(Some);
            }
            None if is_desc || is_pir_json(path) => {
                return program_without_params(path, &path.with_extension("pdiparams")).map(Some)
            }
            None => return Ok(None),
        }
    }
    // A foreign format by its bytes (a zip) or its name (a DCP `.distcp`) is no Paddle tensor
    // file, whatever its first bytes or extension: not claimed, so not called damaged.
    if foreign::looks_like(&fname.to_string_lossy(), &src).is_some() {
        return Ok(None);
    }
    if looks_like_record(&src) || PADDLE_EXTS.contains(&ext) {
        return open_tensor_with(path, src).map(Some);
    }
    Ok(None)
}

/// A directory: a model inside it, a `__model__` per-variable directory, or per-variable files.
fn detect_dir(dir: &Path) -> Result<Option<PaddleStore>> {
    let mut models = Vec::new();
    let mut legacy_program: Option<PathBuf> = None;
    let rd = fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let p = ent.path();
        if !p.is_file() {
            continue;
        }
        let fname = ent.file_name();
        if p.extension().is_some_and(|e| e == "pdiparams") {
            if let Some(prog) = find_program(&p.with_extension("")) {
                models.push((p, prog));
            }
        } else if fname == "__model__" || fname == "__model__.json" {
            let keep_json = matches!(&legacy_program, Some(l) if !l.ends_with("__model__"));
            if !keep_json {
                // `__model__.json` (PIR) over `__model__`, as for PREFIX.json over .pdmodel.
                legacy_program = Some(p.clone());
            }
            for params in ["__params__", "params"] {
                let params = dir.join(params);
                if params.is_file() {
                    models.push((params, p.clone()));
                    break;
                }
            }
        }
    }
    models.sort();
    match models.as_slice() {
        [(params, prog)] => return open_model(params, prog).map(Some),
        [] => {}
        several => {
            let list: Vec<String> = several
                .iter()
                .map(|(p, _)| p.display().to_string())
                .collect();
            return Err(Error::InvalidArgument(format!(
                "{} holds {} Paddle models ({}): give the prefix of one",
                dir.display(),
                several.len(),
                list.join(", ")
            )));
        }
    }
    if let Some(prog) = legacy_program {
        return open_dir_with_program(dir, &prog).map(Some);
    }
    open_dir_detect(dir)
}

/// Opens a model from its combined parameter file and its program.
///
/// # Errors
///
/// As [`open_store`]: the program must parse, and the records must match its parameters
/// exactly (count, order, dtype and shape where declared), ending at the end of the file.
pub fn open_model(params: &Path, program: &Path) -> Result<PaddleStore> {
    let src = Source::map(params)?;
    check_pickle(params, &src)?;
    open_model_with(params, src, program)
}

/// A model whose `.pdiparams` does not exist: valid when its program declares no parameters
/// (Paddle then writes no `.pdiparams`), and an error naming the missing file otherwise.
fn program_without_params(program: &Path, params: &Path) -> Result<PaddleStore> {
    model_without_params(load_program(program)?, params)
}

/// [`program_without_params`] of a parsed program, whose parameters file `params` (a path or
/// an object's URL) is not there.
fn model_without_params(prog: Program, params: &Path) -> Result<PaddleStore> {
    if !prog.params.is_empty() {
        return Err(unrecognized(
            &prog.path,
            format!(
                "a Paddle program declaring {} parameters, but its parameters file {} does not exist",
                prog.params.len(),
                params.display()
            ),
        ));
    }
    PaddleStore::new(Format::PaddleModel, Some(prog), Vec::new(), Vec::new())
}

fn open_model_with(params: &Path, src: Source, program: &Path) -> Result<PaddleStore> {
    let prog = load_program(program)?;
    model_from_parts(params, src, prog).map_err(|e| {
        // Both program forms beside one .pdiparams: the .json was taken; say that the other
        // one exists, as it may be the one that belongs to these parameters.
        let other = match program.extension().and_then(|e| e.to_str()) {
            Some("json") => program.with_extension("pdmodel"),
            Some("pdmodel") => program.with_extension("json"),
            _ => return e,
        };
        match e {
            Error::Corrupt {
                what,
                offset,
                kind,
                detail,
            } if other.is_file() => Error::Corrupt {
                what,
                offset,
                kind,
                detail: format!(
                    "{detail} ({} was used; {} exists too: give it explicitly to use it)",
                    program.display(),
                    other.display()
                ),
            },
            e => e,
        }
    })
}

/// A model from its parameter file's bytes `src` (found at `params`, a path or an object's
/// URL) and its parsed program: the records matched to the program's parameters (count,
/// order, dtype and shape where declared), ending at the end of the bytes. What a model opens
/// to wherever its two files are.
pub(crate) fn model_from_parts(params: &Path, src: Source, prog: Program) -> Result<PaddleStore> {
    let recs = combined::match_records(&src, params, &prog)?;
    let entries = prog
        .params
        .iter()
        .zip(recs)
        .map(|(d, rec)| Entry {
            name: d.name.clone(),
            file: 0,
            rec,
        })
        .collect();
    PaddleStore::new(
        Format::PaddleModel,
        Some(prog),
        vec![FileSlot::with_source(params.to_path_buf(), src)],
        entries,
    )
}

/// Opens a single tensor file (exactly one record, nothing after it); the tensor's name is the
/// file name.
///
/// # Errors
///
/// [`Error::Corrupt`] if the file is not exactly one record; [`Error::UnrecognizedFormat`] for
/// a pickle; I/O errors.
pub fn open_tensor_file(path: &Path) -> Result<PaddleStore> {
    let src = Source::map(path)?;
    check_pickle(path, &src)?;
    open_tensor_with(path, src)
}

/// A tensor file from its bytes `src`, found at `path` (a path or an object's URL; its last
/// component is the tensor's name): exactly one record, nothing after it.
pub(crate) fn open_tensor_with(path: &Path, src: Source) -> Result<PaddleStore> {
    let name = path
        .file_name()
        .map(os_bytes)
        .transpose()?
        .ok_or_else(|| Error::InvalidArgument(format!("{}: no file name", path.display())))?;
    if src.len() > 12 && looks_like_record(&src) {
        // A paramdex file whose index is gone: its records carry names; say so.
        if let Ok(h) = crate::record::decode_header(&src, 0) {
            let end = (h.header_len as u64).saturating_add(h.data_len);
            if h.name.is_some() && end < src.len() as u64 {
                return Err(unrecognized(
                    path,
                    "records with paramdex names, but no valid paramdex footer: a truncated or \
                     torn paramdex file? `paramdex recover` rebuilds one from its records"
                        .into(),
                ));
            }
        }
    }
    let rec = combined::single_record(&src, path, &name)?;
    PaddleStore::new(
        Format::PaddleTensor,
        None,
        vec![FileSlot::with_source(path.to_path_buf(), src)],
        vec![Entry { name, file: 0, rec }],
    )
}

/// Opens a directory of per-variable files (see the module docs).
///
/// # Errors
///
/// [`Error::UnrecognizedFormat`] if no file in it is a Paddle record; [`Error::Corrupt`] naming
/// the file for one that is not exactly one record; [`Error::InvalidArgument`] for symbolic
/// links to directories and special files; [`Error::LimitExceeded`] above [`MAX_DIR_FILES`]
/// files or [`MAX_DIR_DEPTH`] levels.
pub fn open_dir(dir: &Path) -> Result<PaddleStore> {
    open_dir_detect(dir)?.ok_or_else(|| {
        unrecognized(
            dir,
            "not a directory of Paddle per-variable files (none of its files is a tensor \
             record, or it holds Paddle models, TensorFlow checkpoints or paramdex files)"
                .into(),
        )
    })
}

fn open_dir_detect(dir: &Path) -> Result<Option<PaddleStore>> {
    let mut files = Vec::new();
    scan_dir(dir, Vec::new(), 0, &mut files)?;
    let place = DirFiles {
        open: &|p| Source::map(p),
        is_dcp_metadata: &|p| {
            p.file_name()
                .is_some_and(|n| n == crate::interop::torch::dcp::METADATA_FILE)
                && crate::interop::torch::dcp::is_dcp(p)
        },
        is_model_file: &is_model_file,
        // Thousands of files: each mapped again when first read, not kept mapped.
        slot: &|path, src| FileSlot::lazy(path, src.len() as u64),
    };
    per_variable_files(dir, files, &place)
}

/// What [`per_variable_files`] needs of the place its files are in (a directory, or a bucket's
/// prefix whose objects were fetched).
struct DirFiles<'a> {
    /// The bytes of a file.
    open: &'a dyn Fn(&Path) -> Result<Source>,
    /// Whether a file is a torch DCP checkpoint's `.metadata`.
    is_dcp_metadata: &'a dyn Fn(&Path) -> bool,
    /// Whether a file is part of a Paddle model ([`is_model_file`]).
    is_model_file: &'a dyn Fn(&Path) -> bool,
    /// How the store holds a file it read.
    slot: &'a dyn Fn(PathBuf, Source) -> FileSlot,
}

/// The store of a directory of per-variable files `files` (relative name, path, length), or
/// `None` when the directory is not one: the detection of [`open_dir_detect`], wherever the
/// files are.
fn per_variable_files(
    dir: &Path,
    mut files: Vec<(Vec<u8>, PathBuf, u64)>,
    place: &DirFiles<'_>,
) -> Result<Option<PaddleStore>> {
    files.sort_by(|a, b| a.0.cmp(&b.0));
    // Detection: some file must start like a record; otherwise this is some other directory
    // (a pickle in it is reported, as the likely mistake). Then every file must be a record: a
    // stray file (a README, .DS_Store) is named rather than ignored, as it could be a tensor
    // file that was damaged.
    let mut sample = None;
    for (_, p, _) in &files {
        // A torch DCP checkpoint's `.metadata` (here or in a subdirectory): the directory
        // holds an input of another format, not tensor files.
        if (place.is_dcp_metadata)(p) {
            return Ok(None);
        }
        let s = (place.open)(p)?;
        check_pickle(p, &s)?;
        if looks_like_record(&s) {
            sample = Some(p.clone());
            break;
        }
    }
    let Some(sample) = sample else {
        return Ok(None);
    };
    // A file that belongs to an input of its own (a Paddle model, a TensorFlow checkpoint, a
    // native file) means the directory holds inputs, not tensor files: it is not claimed, so
    // that `open_any` looks into its subdirectories. Every file is looked at before the first
    // error of a stray file is reported, as such a file may be part of one of those inputs.
    let mut slots = Vec::with_capacity(files.len());
    let mut entries = Vec::with_capacity(files.len());
    let mut first_error = None;
    for (i, (name, path, _)) in files.into_iter().enumerate() {
        if (place.is_model_file)(&path) {
            return Ok(None);
        }
        let src = (place.open)(&path)?;
        if ends_with_table_magic(&src) {
            return Ok(None);
        }
        if first_error.is_some() {
            continue;
        }
        let rec = check_pickle(&path, &src).and_then(|()| {
            if !looks_like_record(&src) {
                return Err(unrecognized(
                    dir,
                    format!(
                        "read as a directory of Paddle per-variable files ({} is a tensor \
                         record), but {} is not a tensor record ({} bytes); remove it or give \
                         the files one by one",
                        sample.display(),
                        path.display(),
                        src.len()
                    ),
                ));
            }
            combined::single_record(&src, &path, &name)
        });
        match rec {
            Ok(rec) => {
                slots.push((place.slot)(path, src));
                entries.push(Entry { name, file: i, rec });
            }
            Err(e) => first_error = Some(e),
        }
    }
    if let Some(e) = first_error {
        return Err(e);
    }
    PaddleStore::new(Format::PaddleDir, None, slots, entries).map(Some)
}

/// Whether `path` is part of a Paddle model: a program of an inference directory
/// (`__model__`, `__model__.json`) or a `.pdiparams` with its program beside it.
fn is_model_file(path: &Path) -> bool {
    let fname = path.file_name().unwrap_or_default();
    fname == "__model__"
        || fname == "__model__.json"
        || (path.extension().is_some_and(|e| e == "pdiparams")
            && find_program(&path.with_extension("")).is_some())
}

/// Whether `buf` ends with the LevelDB table magic: a TensorFlow checkpoint's `.index` or a
/// native paramdex file, never a Paddle tensor file.
fn ends_with_table_magic(buf: &[u8]) -> bool {
    buf.len() >= 8 && buf[buf.len() - 8..] == crate::table::TABLE_MAGIC.to_le_bytes()
}

/// A directory of per-variable files whose names come from a program (`__model__`).
fn open_dir_with_program(dir: &Path, program: &Path) -> Result<PaddleStore> {
    let prog = load_program(program)?;
    dir_with_program(
        dir,
        prog,
        &|path| {
            if path.is_file() {
                Source::map(path).map(Some)
            } else {
                Ok(None)
            }
        },
        &|path, src| FileSlot::lazy(path, src.len() as u64),
    )
}

/// The per-variable files that the program `prog` names in `dir` (a directory or a bucket's
/// prefix): each parameter's file (`open`: its bytes, `None` when it is not there) must be one
/// record of the declared dtype and shape. What [`open_dir_with_program`] opens to wherever
/// the files are; `slot` says how the store holds a file it read.
fn dir_with_program(
    dir: &Path,
    prog: Program,
    open: &dyn Fn(&Path) -> Result<Option<Source>>,
    slot: &dyn Fn(PathBuf, Source) -> FileSlot,
) -> Result<PaddleStore> {
    let program = prog.path.clone();
    let mut slots = Vec::with_capacity(prog.params.len());
    let mut entries = Vec::with_capacity(prog.params.len());
    for (i, d) in prog.params.iter().enumerate() {
        let path = dir.join(relative_path(&d.name)?);
        let Some(src) = open(&path)? else {
            return Err(Error::corrupt(
                "per-variable directory",
                0,
                format!(
                    "{}: the program {} lists parameter {}, but {} is not a file",
                    dir.display(),
                    program.display(),
                    display(&d.name),
                    path.display()
                ),
            ));
        };
        check_pickle(&path, &src)?;
        let rec = combined::single_record(&src, &path, &d.name)?;
        if !rec.dtype.declared_by(d, &rec.dims) {
            return Err(Error::corrupt(
                "record",
                0,
                format!(
                    "{}: tensor {}: the record is {} but the program {} declares {} {:?}",
                    path.display(),
                    display(&d.name),
                    combined::describe(rec.dtype, &rec.dims),
                    program.display(),
                    d.dtype.map_or("?", |t| t.name()),
                    d.dims.as_deref().unwrap_or(&[])
                ),
            ));
        }
        slots.push(slot(path, src));
        entries.push(Entry {
            name: d.name.clone(),
            file: i,
            rec,
        });
    }
    PaddleStore::new(Format::PaddleDir, Some(prog), slots, entries)
}

/// Collects every regular file under `dir` as (name, path, len), name = relative path bytes.
fn scan_dir(
    dir: &Path,
    prefix: Vec<u8>,
    depth: usize,
    out: &mut Vec<(Vec<u8>, PathBuf, u64)>,
) -> Result<()> {
    ensure_within("per-variable directory depth", depth, MAX_DIR_DEPTH, None)?;
    let listing = |e| Error::io(format!("listing {}", dir.display()), e);
    for ent in fs::read_dir(dir).map_err(listing)? {
        let ent = ent.map_err(listing)?;
        let path = ent.path();
        let mut name = prefix.clone();
        name.extend_from_slice(&os_bytes(&ent.file_name())?);
        let ft = ent.file_type().map_err(listing)?;
        let is_dir = if ft.is_symlink() {
            let m = fs::metadata(&path)
                .map_err(|e| Error::io(format!("following {}", path.display()), e))?;
            if m.is_dir() {
                return Err(Error::InvalidArgument(format!(
                    "{}: symbolic links to directories are not followed in a per-variable \
                     directory",
                    path.display()
                )));
            }
            if !m.is_file() {
                return Err(not_regular(&path));
            }
            false
        } else if ft.is_dir() {
            true
        } else if ft.is_file() {
            false
        } else {
            return Err(not_regular(&path));
        };
        if is_dir {
            name.push(b'/');
            scan_dir(&path, name, depth + 1, out)?;
            continue;
        }
        ensure_within("tensor name length", name.len(), MAX_NAME_LEN, None)?;
        ensure_within(
            "files in a per-variable directory",
            out.len() + 1,
            MAX_DIR_FILES,
            None,
        )?;
        let len = ent
            .metadata()
            .map_err(|e| Error::io(format!("reading metadata of {}", path.display()), e))?
            .len();
        out.push((name, path, len));
    }
    Ok(())
}

fn not_regular(path: &Path) -> Error {
    Error::InvalidArgument(format!(
        "{}: not a regular file (per-variable directories hold regular files only)",
        path.display()
    ))
}

/// `PREFIX.json` if it is a file, else `PREFIX.pdmodel` if it is a file.
fn find_program(prefix: &Path) -> Option<PathBuf> {
    [".json", ".pdmodel"]
        .iter()
        .map(|s| with_suffix(prefix, s))
        .find(|p| p.is_file())
}

/// Whether a `.json` file starts like a PIR program.
fn is_pir_json(path: &Path) -> bool {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    let head = &head[..n];
    head.windows(5).any(|w| w == b"\"pir\"")
}

/// `path` with `suffix` appended to its last component.
fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s: OsString = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// Whether `buf` starts like a Paddle record: outer version 0 and a plausible LoD level count.
fn looks_like_record(buf: &[u8]) -> bool {
    match (buf.get(0..4), buf.get(4..12)) {
        (Some(v), Some(l)) => {
            let mut lod = [0u8; 8];
            lod.copy_from_slice(l);
            v == [0, 0, 0, 0] && u64::from_le_bytes(lod) <= MAX_LOD_LEVELS
        }
        _ => false,
    }
}

/// Refuses a Python pickle (first bytes `80 02`..`80 05`), saying what it is (a `.pdparams` /
/// `.pdopt` written by `paddle.save`, DCP's `.metadata`, another pickle: see
/// [`foreign::looks_like`]).
fn check_pickle(path: &Path, buf: &[u8]) -> Result<()> {
    if foreign::pickle_protocol(buf).is_some() {
        let kind = foreign::looks_like(&foreign::file_name(path), buf).unwrap_or(LooksLike::Pickle);
        return Err(foreign::not_recognized(
            path.display().to_string(),
            kind,
            buf,
        ));
    }
    Ok(())
}

fn unrecognized(path: &Path, detail: String) -> Error {
    Error::UnrecognizedFormat {
        path: path.display().to_string(),
        looks_like: None,
        detail,
    }
}

/// The bytes of a file name (Unix: exact; elsewhere: UTF-8 or an error).
fn os_bytes(s: &std::ffi::OsStr) -> Result<Vec<u8>> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(s.as_bytes().to_vec())
    }
    #[cfg(not(unix))]
    {
        s.to_str()
            .map(|s| s.as_bytes().to_vec())
            .ok_or_else(|| Error::InvalidArgument(format!("file name {s:?} is not UTF-8")))
    }
}
