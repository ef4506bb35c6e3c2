//! Paddle inputs whose files are fetched, not mapped: an object store's objects (issue 26).
//!
//! The same rules as a local file's detection (`detect_file` in the parent module), over a
//! place that can only hand over whole files by name: an input is a file `NAME` and the files
//! beside it (`sibling`), and each file is read whole when needed (Paddle's own loaders read
//! them whole too; the program and the first bytes decide, the parameters are read once). The
//! names follow Paddle's conventions exactly as locally: `STEM.pdiparams` with `STEM.json`
//! (taken first) or `STEM.pdmodel`; `__model__` (or `__model__.json`) with `__params__` or
//! `params`, or with one file per parameter named by it; a merged file `STEM` with `STEM.json`
//! or `STEM.pdmodel`; a tensor file alone. A "directory" (a prefix naming no object) is listed
//! once by the caller ([`open_dir`]): its one model, or its per-variable files.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::store::TensorStore;
use crate::native::Source;

use super::program::parse_program;
use super::{
    check_pickle, looks_like_record, merged, model_from_parts, model_without_params,
    open_tensor_with, PADDLE_EXTS,
};

/// Fetches a file beside the input by its name (`None`: there is none).
pub(crate) type Sibling<'a> = dyn Fn(&str) -> Result<Option<Source>> + 'a;

/// The Paddle input whose file is `name`, at `url` (shown in messages), starting with `head`
/// (its first bytes, up to a few KiB), whose whole bytes `this` reads: a model's parameters
/// or program, a merged file, or a tensor file. `Ok(None)`: not a Paddle input.
///
/// # Errors
///
/// As the local openers: [`Error::Corrupt`] naming the URL, tensor and offset for records
/// that break the rules or do not match the program; [`Error::UnrecognizedFormat`] for a
/// program whose parameters file is missing; errors of `this` and `sibling`.
pub(crate) fn open_file(
    url: &str,
    name: &str,
    head: &[u8],
    this: &dyn Fn() -> Result<Source>,
    sibling: &Sibling<'_>,
) -> Result<Option<Box<dyn TensorStore>>> {
    let path = PathBuf::from(url);
    check_pickle(&path, head)?;
    let (stem, ext) = match name.rsplit_once('.') {
        Some((s, e)) if !s.is_empty() => (s, e),
        _ => (name, ""),
    };
    let boxed = |s: super::PaddleStore| Some(Box::new(s) as Box<dyn TensorStore>);
    let at = |n: &str| beside(url, name, n);

    if ext == "pdiparams" {
        if let Some((prog_name, prog)) = program_of(stem, sibling)? {
            let prog = parse_program(&prog, &at(&prog_name))?;
            return model_from_parts(&path, this()?, prog).map(boxed);
        }
    }
    if name == "__params__" || name == "params" {
        if let Some(prog) = sibling("__model__")? {
            let prog = parse_program(&prog, &at("__model__"))?;
            return model_from_parts(&path, this()?, prog).map(boxed);
        }
    }
    let legacy_program = name == "__model__" || name == "__model__.json";
    let is_desc = ext == "pdmodel" || name == "__model__";
    if is_desc || ext == "json" {
        let is_pir = head.windows(5).any(|w| w == b"\"pir\"");
        let params_names: Vec<String> = if legacy_program {
            vec!["__params__".into(), "params".into()]
        } else {
            vec![format!("{stem}.pdiparams")]
        };
        for p in &params_names {
            if let Some(params) = sibling(p)? {
                let prog = parse_program(&this()?, &path)?;
                check_pickle(&at(p), &params)?;
                return model_from_parts(&at(p), params, prog).map(boxed);
            }
        }
        if legacy_program {
            // An inference directory with one file per parameter beside the program, which
            // names them.
            let prog = parse_program(&this()?, &path)?;
            let dir = url.strip_suffix(&format!("/{name}")).unwrap_or(url);
            let open = |p: &Path| match p.to_str().and_then(|s| s.strip_prefix(&format!("{dir}/")))
            {
                Some(n) => sibling(n),
                None => Ok(None),
            };
            return super::dir_with_program(
                Path::new(dir),
                prog,
                &open,
                &super::store::FileSlot::with_source,
            )
            .map(boxed);
        }
        if is_desc || is_pir {
            let prog = parse_program(&this()?, &path)?;
            return model_without_params(prog, &at(&params_names[0])).map(boxed);
        }
        return Ok(None);
    }
    if merged::claims(head) {
        let program = match program_of(stem, sibling)? {
            Some((prog_name, prog)) if prog_name != name => {
                Some(parse_program(&prog, &at(&prog_name))?)
            }
            _ => None,
        };
        return merged::open_with_program(&path, this()?, program)
            .map(|s| Some(Box::new(s) as Box<dyn TensorStore>));
    }
    if looks_like_record(head) || PADDLE_EXTS.contains(&ext) {
        return open_tensor_with(&path, this()?).map(boxed);
    }
    Ok(None)
}

/// The model at prefix `url` (whose last component is `name`): `NAME.pdiparams` with its
/// program, or a program alone (`NAME.json`, `NAME.pdmodel`) declaring no parameters, as a
/// local `PREFIX` opens. `Ok(None)`: none of those files is there.
///
/// # Errors
///
/// As [`open_file`].
pub(crate) fn open_prefix(
    url: &str,
    name: &str,
    sibling: &Sibling<'_>,
) -> Result<Option<Box<dyn TensorStore>>> {
    let params_name = format!("{name}.pdiparams");
    let Some((prog_name, prog)) = program_of(name, sibling)? else {
        if sibling(&params_name)?.is_some() {
            return Err(Error::UnrecognizedFormat {
                path: url.to_string(),
                looks_like: None,
                detail: format!(
                    "{url}.pdiparams exists, but no program ({url}.json or {url}.pdmodel) is \
                     beside it: the parameter names are in the program"
                ),
            });
        }
        return Ok(None);
    };
    let prog = parse_program(&prog, &beside(url, name, &prog_name))?;
    let params_path = beside(url, name, &params_name);
    let store = match sibling(&params_name)? {
        Some(params) => {
            check_pickle(&params_path, &params)?;
            model_from_parts(&params_path, params, prog)?
        }
        None => model_without_params(prog, &params_path)?,
    };
    Ok(Some(Box::new(store)))
}

/// The program of `STEM`: `STEM.json`, else `STEM.pdmodel` (the local order), with its name.
fn program_of(stem: &str, sibling: &Sibling<'_>) -> Result<Option<(String, Source)>> {
    for ext in ["json", "pdmodel"] {
        let n = format!("{stem}.{ext}");
        if let Some(bytes) = sibling(&n)? {
            return Ok(Some((n, bytes)));
        }
    }
    Ok(None)
}

/// Where the file `other` beside the file `name` at `url` is, for messages.
fn beside(url: &str, name: &str, other: &str) -> PathBuf {
    let dir = url.strip_suffix(name).unwrap_or(url);
    Path::new(&format!("{dir}{other}")).to_path_buf()
}

/// The Paddle input in the "directory" `url` (a prefix ending without `/`), whose files are
/// `files` (name relative to it, `/` between levels, and length), read whole by `read` (by
/// that name): the one model in it (`NAME.pdiparams` with its program, or `__model__` with
/// `__params__`/`params`), else a directory of per-variable files, with the local rules.
/// `Ok(None)`: neither.
///
/// # Errors
///
/// [`Error::InvalidArgument`] for several models; [`Error::LimitExceeded`] above
/// [`super::MAX_DIR_FILES`] files; as [`open_file`] and the local directory's detection.
pub(crate) fn open_dir(
    url: &str,
    files: &[(String, u64)],
    read: &dyn Fn(&str) -> Result<Source>,
) -> Result<Option<Box<dyn TensorStore>>> {
    crate::error::ensure_within(
        "files in a per-variable directory",
        files.len(),
        super::MAX_DIR_FILES,
        None,
    )?;
    let has = |n: &str| files.iter().any(|(f, _)| f == n);
    // The models directly in it, as the local directory's detection finds them.
    let mut models: Vec<String> = files
        .iter()
        .filter_map(|(f, _)| {
            let stem = f.strip_suffix(".pdiparams")?;
            (!f.contains('/') && (has(&format!("{stem}.json")) || has(&format!("{stem}.pdmodel"))))
                .then(|| stem.to_string())
        })
        .collect();
    let legacy = has("__model__") || has("__model__.json");
    if legacy && (has("__params__") || has("params")) {
        models.push("__model__".into());
    }
    let child = |n: &str| format!("{url}/{n}");
    let sibling = |n: &str| -> Result<Option<Source>> {
        if has(n) {
            read(n).map(Some)
        } else {
            Ok(None)
        }
    };
    match models.as_slice() {
        [one] if one == "__model__" => {
            let name = if has("__model__.json") {
                "__model__.json"
            } else {
                "__model__"
            };
            let program = read(name)?;
            let this = || Ok(program.clone());
            let head = &program[..program.len().min(256)];
            return open_file(&child(name), name, head, &this, &sibling);
        }
        [one] => return open_prefix(&child(one), one, &sibling),
        [] => {}
        several => {
            return Err(Error::InvalidArgument(format!(
                "{url} holds {} Paddle models ({}): give the prefix of one",
                several.len(),
                several.join(", ")
            )))
        }
    }
    let prefix_len = url.len() + 1;
    let relative = |p: &Path| {
        p.to_str()
            .and_then(|s| s.get(prefix_len..))
            .map(str::to_string)
    };
    if legacy {
        // An inference directory with one file per parameter: the program names them.
        let name = if has("__model__.json") {
            "__model__.json"
        } else {
            "__model__"
        };
        let prog = parse_program(&read(name)?, Path::new(&child(name)))?;
        let open = |p: &Path| match relative(p) {
            Some(n) if has(&n) => read(&n).map(Some),
            _ => Ok(None),
        };
        return super::dir_with_program(
            Path::new(url),
            prog,
            &open,
            &super::store::FileSlot::with_source,
        )
        .map(|s| Some(Box::new(s) as Box<dyn TensorStore>));
    }
    let listed: Vec<(Vec<u8>, PathBuf, u64)> = files
        .iter()
        .map(|(n, len)| (n.as_bytes().to_vec(), PathBuf::from(child(n)), *len))
        .collect();
    let prefix_len = url.len() + 1;
    let relative = |p: &Path| {
        p.to_str()
            .and_then(|s| s.get(prefix_len..))
            .map(str::to_string)
    };
    let place = super::DirFiles {
        open: &|p| match relative(p) {
            Some(n) => read(&n),
            None => Err(Error::InvalidArgument(format!(
                "{}: not in {url}",
                p.display()
            ))),
        },
        is_dcp_metadata: &|p| {
            relative(p).is_some_and(|n| {
                n.rsplit('/').next() == Some(crate::interop::torch::dcp::METADATA_FILE)
            })
        },
        is_model_file: &|p| {
            relative(p).is_some_and(|n| {
                let (dir, f) = n.rsplit_once('/').unwrap_or(("", &n));
                let at = |x: &str| {
                    if dir.is_empty() {
                        x.to_string()
                    } else {
                        format!("{dir}/{x}")
                    }
                };
                f == "__model__"
                    || f == "__model__.json"
                    || f.strip_suffix(".pdiparams").is_some_and(|s| {
                        has(&at(&format!("{s}.json"))) || has(&at(&format!("{s}.pdmodel")))
                    })
            })
        },
        slot: &super::store::FileSlot::with_source,
    };
    Ok(super::per_variable_files(Path::new(url), listed, &place)?
        .map(|s| Box::new(s) as Box<dyn TensorStore>))
}
