//! Writing what Paddle reads: the exporters of a model, a combined `.pdiparams` with the
//! program naming its tensors ([`export_combined`], [`OutputFormat::PaddleCombined`]), and of
//! tensor files ([`export_tensor_files`], [`OutputFormat::PaddleTensors`]).
//!
//! Records are plain Paddle records (no name, no CRC, alignment 1), byte-identical to what
//! Paddle's `save_combine` / `save` ops write for the same tensors. Every file is written to a
//! temporary file in its destination directory, synced, and renamed into place; a directory of
//! tensor files is written whole under a temporary name and renamed into place when complete.

use std::collections::HashSet;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::find_program;
use super::merged::SIZE_FIELD_LEN;
use super::program::{self, load_program, ParamDecl, ProgramKind, MAX_PROGRAM_LEN};
use crate::error::{Error, IoContext, Result};
use crate::interop::store::{ExportJob, TensorData, TensorInfo, TensorStore, Written};
#[cfg(doc)]
use crate::interop::OutputFormat;
use crate::name::display;
use crate::native::staging;
use crate::record::{data_len, encode_header, RecordSpec};

/// Extension of a combined parameter file.
const PARAMS_EXT: &str = "pdiparams";

/// The path [`OutputFormat::PaddleCombined`] writes for `out`: `out` itself if it already ends in
/// `.pdiparams`, else `out.pdiparams` (so `OUT` is a model prefix, as Paddle's loaders take it).
pub fn combined_path(out: &Path) -> PathBuf {
    if out.extension().is_some_and(|e| e == PARAMS_EXT) {
        out.to_path_buf()
    } else {
        let mut s = out.as_os_str().to_os_string();
        s.push(".");
        s.push(PARAMS_EXT);
        PathBuf::from(s)
    }
}

/// The output [`OutputFormat::PaddleCombined`] refuses to replace unless asked: [`combined_path`].
/// The program beside it is [`export_combined`]'s to judge: one already there that declares
/// exactly the tensors written is kept (nothing is replaced), another is replaced only when
/// asked.
pub(crate) fn combined_outputs(out: &Path) -> Vec<PathBuf> {
    vec![combined_path(out)]
}

/// The path of the program [`OutputFormat::PaddleCombined`] writes beside [`combined_path`]`(out)`
/// when it writes one: the model prefix (`out` without `.pdiparams`) with `.pdmodel`.
pub fn program_path(out: &Path) -> PathBuf {
    with_ext(&model_prefix(out), "pdmodel")
}

/// The path of the PIR program [`OutputFormat::PaddleCombined`] writes beside
/// [`combined_path`]`(out)` with the one at [`program_path`] when it writes them: the model
/// prefix with `.json` (what Paddle 3 reads in its default PIR mode).
pub fn pir_program_path(out: &Path) -> PathBuf {
    with_ext(&model_prefix(out), "json")
}

/// The model prefix of an output: `out` without a final `.pdiparams`.
fn model_prefix(out: &Path) -> PathBuf {
    if out.extension().is_some_and(|e| e == PARAMS_EXT) {
        out.with_extension("")
    } else {
        out.to_path_buf()
    }
}

/// `prefix` with `.ext` appended (not replacing an extension: `m.v2` gives `m.v2.pdmodel`).
fn with_ext(prefix: &Path, ext: &str) -> PathBuf {
    let mut s = prefix.as_os_str().to_os_string();
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Why [`OutputFormat::PaddleCombined`] cannot hold a tensor: not numeric, or a name the
/// program beside the parameters cannot declare ([`program::cannot_name`]).
pub(crate) fn cannot_hold_combined(info: &TensorInfo) -> Option<String> {
    info.kind
        .not_numeric()
        .or_else(|| program::cannot_name(&info.name).map(str::to_string))
}

/// The exporter of [`OutputFormat::PaddleCombined`]: the job's store as a Paddle model, the
/// parameters in [`combined_path`]`(dst)` and their names in a program beside them, so that
/// paramdex (`ls DST`) and Paddle read the names back.
///
/// The parameters: one plain record per tensor, in bytewise name order (the order
/// `load_combine` expects), nothing else, streaming the store's listing. The program, chosen
/// before anything is written, is the one Paddle and paramdex read with it (`DST.json`, else
/// `DST.pdmodel`):
///
/// 1. a program already there that declares exactly the tensors written (same names; dtype
///    and dims where it states them) is kept, so new weights can be written beside a model's
///    own program;
/// 2. otherwise, when the input is a Paddle model whose program declares exactly the tensors
///    written, that program is copied (as `DST.pdmodel` or `DST.json`, after its kind), so the
///    output is that model again;
/// 3. otherwise paramdex writes two parameters-only programs, one for each of Paddle 3's
///    modes: [`program_path`]`(dst)` (`DST.pdmodel`), a legacy `ProgramDesc` whose block 0
///    declares each tensor, in record order, as a persistable dense tensor with its dtype,
///    dims and LoD level count, and holds no ops; and [`pir_program_path`]`(dst)`
///    (`DST.json`), a PIR program whose one block holds a parameter op (`builtin.parameter`)
///    per tensor, in record order, with its name, dtype and dims, persistable, as Paddle
///    3.3.1 writes one. `paddle.static.load_inference_model(DST, exe)` reads `DST.json` in
///    Paddle 3's default PIR mode and `DST.pdmodel` in the legacy one
///    (`FLAGS_enable_pir_api=0`, `paddle.pir_utils.OldIrGuard()`, Paddle 2) and puts each
///    tensor in the scope under its name; `paddle.static.load_program_state(DST.pdiparams,
///    var_list)` returns them as a dict. PIR has no type for `uint16`, `uint32` and
///    `uint64`: with such a tensor only `DST.pdmodel` is written.
///
/// A parameters-only program kept as it is (1) gets the other kind written beside it when
/// that is absent (an output of an older paramdex gains its `DST.json`).
/// A program already there that declares other tensors is replaced by the input's own
/// program when that is of the same kind, or by generated ones when it is a parameters-only
/// program as paramdex writes (and so is the other kind beside it, if any), and only when
/// replacing outputs was asked for
/// ([`ExportOptions::overwrite`](crate::interop::ExportOptions::overwrite); otherwise
/// [`Error::OutputExists`]); a model's graph is never replaced by a parameters-only program,
/// nor left to shadow the new one: that is an error. paramdex's own PIR program, when no PIR
/// program is written in its place (a tensor PIR has no type for), is removed. Names a program cannot declare (not
/// UTF-8, empty, `feed`, `fetch`) are refused by [`OutputFormat::cannot_hold`] before this
/// runs.
///
/// # Errors
///
/// [`Error::Unsupported`] for a store without tensors or with tensors that are not numeric,
/// or a program that would exceed [`MAX_PROGRAM_LEN`]; [`Error::InvalidArgument`] for a program
/// at the output prefix that declares other tensors and is not paramdex's, for a name listed
/// twice or out of order; [`Error::InvalidTensor`] for data whose length does not match dtype
/// and shape; the input's program and read errors; I/O errors.
pub(crate) fn export_combined(job: &ExportJob<'_>) -> Result<Written> {
    export_model(job, combined_path(job.dst), model_prefix(job.dst), false)
}

/// The path of the program [`OutputFormat::PaddleMerged`] writes beside the merged file `out`
/// when it writes one: `out` without its extension, with `.pdmodel` (the program a reader
/// takes for `out`, see [`super::merged::merged_program_path`]).
pub fn merged_program_output(out: &Path) -> PathBuf {
    with_ext(&out.with_extension(""), "pdmodel")
}

/// The exporter of [`OutputFormat::PaddleMerged`]: the job's store as a merged parameter file
/// at `dst` itself, each record preceded by its length as a `u64` little-endian (the design
/// document "Merging all params in a single file"), in bytewise name order, and beside it the
/// program naming the records, chosen and written as [`export_combined`] chooses and writes it,
/// with `dst` without its extension as the prefix (`DST.pdmodel` for a `dst` without one),
/// except that a generated program is the `ProgramDesc` alone: Paddle's
/// `load_inference_model` does not read a merged file, so the PIR program would serve no
/// loader.
///
/// # Errors
///
/// As [`export_combined`].
pub(crate) fn export_merged(job: &ExportJob<'_>) -> Result<Written> {
    if job
        .dst
        .extension()
        .is_some_and(|e| e == "pdmodel" || e == "json")
    {
        return Err(Error::InvalidArgument(format!(
            "{}: a merged parameter file named as a program; its program is written beside it as {}: name the file otherwise",
            job.dst.display(),
            merged_program_output(job.dst).display()
        )));
    }
    let prefix = job.dst.with_extension("");
    export_model(job, job.dst.to_path_buf(), prefix, true)
}

/// The records at `dst` (each preceded by its size when `size_prefixed`) and the programs at
/// the model prefix `prefix` (`PREFIX.json` and/or `PREFIX.pdmodel`).
fn export_model(
    job: &ExportJob<'_>,
    dst: PathBuf,
    prefix: PathBuf,
    size_prefixed: bool,
) -> Result<Written> {
    let store = job.store;
    let desc_out = with_ext(&prefix, "pdmodel");
    let json_out = with_ext(&prefix, "json");
    // The candidates: the program at the output prefix, and the input's own.
    let existing = find_program(&prefix).map(|p| {
        let parsed = load_program(&p);
        (p, parsed)
    });
    let source = match store.program_file() {
        Some(p) => Some(load_program(p)?),
        None => None,
    };
    // Pass 1, over the listing only: order, the generated programs' sizes, whether PIR can
    // declare every tensor, which candidate declares exactly these tensors.
    let mut count = 0u64;
    let mut vars_len = 0u64;
    let mut json_len = (program::PIR_HEAD.len() + program::PIR_TAIL.len()) as u64;
    // The first tensor of a dtype PIR has no type for, if any.
    let mut not_pir: Option<String> = None;
    let mut op = Vec::new();
    let mut previous: Option<Vec<u8>> = None;
    let mut keep = existing
        .as_ref()
        .and_then(|(_, r)| r.as_ref().ok())
        .map(|p| Matcher::new(&p.params));
    let mut copy = source.as_ref().map(|p| Matcher::new(&p.params));
    for info in store.scan(b"")? {
        let info = info?;
        check_order(previous.as_deref(), &info.name)?;
        let var = var_of(&info)?;
        vars_len = vars_len.saturating_add(program::var_len(&var));
        if not_pir.is_none() {
            op.clear();
            match program::put_pir_param(&var, count + 1, count == 0, &mut op) {
                Some(()) => json_len = json_len.saturating_add(op.len() as u64),
                None => {
                    not_pir = Some(format!(
                        "tensor {} is {}, which a PIR program has no type for",
                        display(&info.name),
                        info.kind.name()
                    ))
                }
            }
        }
        for m in [&mut keep, &mut copy].into_iter().flatten() {
            m.see(&info);
        }
        count += 1;
        previous = Some(info.name);
    }
    if count == 0 {
        return Err(no_tensors());
    }
    // Why no PIR program is written, if none is: a merged file is not loaded by
    // `load_inference_model`, so it gets the `ProgramDesc` alone.
    let no_json = if size_prefixed {
        Some("a merged parameter file is named by a ProgramDesc alone".to_string())
    } else {
        not_pir.clone()
    };
    let json_gen = no_json.is_none().then(|| json_out.clone());
    let kept = keep.as_ref().filter(|m| m.matches());
    let copied = copy.as_ref().filter(|m| m.matches());
    let plan = match (&existing, kept, copied) {
        (Some((path, parsed)), Some(_), _) => {
            // A parameters-only program kept as it is gets the other kind beside it when
            // that is absent, so that both of Paddle 3's modes load the pair.
            match (kind_of(path), is_ours(path, parsed)) {
                (ProgramKind::ProgramDesc, true) if !json_out.exists() && json_gen.is_some() => {
                    Plan::Generate {
                        desc: None,
                        json: json_gen.clone(),
                        stale: None,
                    }
                }
                (ProgramKind::PirJson, true) if !desc_out.exists() => Plan::Generate {
                    desc: Some(desc_out.clone()),
                    json: None,
                    stale: None,
                },
                _ => Plan::Keep,
            }
        }
        (Some((path, parsed)), None, copied) => {
            let existing_kind = kind_of(path);
            let ours = is_ours(path, parsed);
            let mismatch = || match (parsed, &keep) {
                (Err(e), _) => format!("it cannot be read ({e})"),
                (Ok(_), Some(m)) => m.difference(count),
                (Ok(_), None) => "it declares other tensors".into(),
            };
            let replacement = match (copied, &source) {
                // The input's own program, in the place of one of its kind.
                (Some(_), Some(src)) if src.kind == existing_kind => {
                    Some(Plan::Copy(src.path.clone(), path.clone()))
                }
                // Parameters-only programs as paramdex writes: both are written again.
                _ if ours => {
                    // paramdex's PIR program, when none is written again, is removed rather
                    // than left to shadow the new `ProgramDesc`.
                    let mut stale = None;
                    if existing_kind == ProgramKind::PirJson {
                        check_sibling_ours(&desc_out, path)?;
                        if json_gen.is_none() {
                            stale = Some(path.clone());
                        }
                    }
                    Some(Plan::Generate {
                        desc: Some(desc_out.clone()),
                        json: json_gen.clone(),
                        stale,
                    })
                }
                // A model's graph is never replaced by a parameters-only program.
                _ => None,
            };
            match replacement {
                Some(plan) if job.overwrite => plan,
                Some(_) => {
                    return Err(Error::OutputExists {
                        path: path.display().to_string(),
                    })
                }
                None => {
                    return Err(Error::InvalidArgument(format!(
                        "{} is the program Paddle and paramdex would read with {}, but {}; \
                         it is not a parameters-only program as paramdex writes, so it is \
                         left alone: remove it, or write to another prefix",
                        path.display(),
                        dst.display(),
                        mismatch()
                    )));
                }
            }
        }
        (None, _, Some(_)) => {
            let src = source.as_ref().map(|s| (s.path.clone(), s.kind));
            match src {
                Some((p, ProgramKind::PirJson)) => Plan::Copy(p, json_out.clone()),
                Some((p, ProgramKind::ProgramDesc)) => Plan::Copy(p, desc_out.clone()),
                None => Plan::Generate {
                    desc: Some(desc_out.clone()),
                    json: json_gen.clone(),
                    stale: None,
                },
            }
        }
        (None, _, None) => Plan::Generate {
            desc: Some(desc_out.clone()),
            json: json_gen.clone(),
            stale: None,
        },
    };
    let desc_bytes = program::program_len(vars_len);
    if let Plan::Generate { desc, json, .. } = &plan {
        for (len, wanted) in [(desc_bytes, desc.is_some()), (json_len, json.is_some())] {
            if wanted && len > MAX_PROGRAM_LEN {
                return Err(Error::Unsupported(format!(
                    "the program naming the {count} tensors would take {len} bytes, above \
                     the {MAX_PROGRAM_LEN} bytes of a program paramdex reads back"
                )));
            }
        }
    }

    // Pass 2: the records, and the generated programs' declarations alongside.
    let mut written = Written::default();
    let mut params = StagedOut::new(&dst)?;
    let (mut gen_desc, mut gen_json) = match &plan {
        Plan::Generate { desc, json, .. } => {
            let d = match desc {
                Some(path) => {
                    let mut w = StagedOut::new(path)?;
                    w.write_all(&program::program_head(vars_len))?;
                    Some(w)
                }
                None => None,
            };
            let j = match json {
                Some(path) => {
                    let mut w = StagedOut::new(path)?;
                    w.write_all(program::PIR_HEAD)?;
                    Some(w)
                }
                None => None,
            };
            (d, j)
        }
        _ => (None, None),
    };
    let mut offset = 0u64;
    let mut var = Vec::new();
    let mut previous: Option<Vec<u8>> = None;
    let mut vars_written = 0u64;
    let mut json_written = (program::PIR_HEAD.len() + program::PIR_TAIL.len()) as u64;
    for info in store.scan(b"")? {
        let info = info?;
        check_order(previous.as_deref(), &info.name)?;
        let len = write_record(&mut params.w, store, &info, offset, size_prefixed)?;
        offset = offset.saturating_add(len);
        if gen_desc.is_some() || gen_json.is_some() {
            let decl = var_of(&info)?;
            if let Some(w) = &mut gen_desc {
                var.clear();
                program::put_var(&decl, &mut var);
                vars_written = vars_written.saturating_add(var.len() as u64);
                w.write_all(&var)?;
            }
            if let Some(w) = &mut gen_json {
                op.clear();
                let first = written.tensors == 0;
                if program::put_pir_param(&decl, written.tensors + 1, first, &mut op).is_none() {
                    return Err(changed_listing());
                }
                json_written = json_written.saturating_add(op.len() as u64);
                w.write_all(&op)?;
            }
        }
        written.tensors += 1;
        written.data_bytes = written.data_bytes.saturating_add(info.nbytes);
        job.progress.advance(info.nbytes);
        previous = Some(info.name);
    }
    if written.tensors != count
        || (gen_desc.is_some() && vars_written != vars_len)
        || (gen_json.is_some() && json_written != json_len)
    {
        return Err(changed_listing());
    }
    written.output_bytes = offset;
    // The parameters and their programs are renamed into place together, under one hold of
    // the staging registry: an interrupt sees all staged or all committed.
    let mut outputs = vec![params.finish()?];
    if let (
        Some(why),
        Plan::Generate {
            desc: Some(desc), ..
        },
    ) = (&not_pir, &plan)
    {
        written.notes.push(format!(
            "no PIR program written beside {}: {why}; Paddle 3 loads the parameters in its \
             legacy mode only, by {} (FLAGS_enable_pir_api=0 or paddle.pir_utils.OldIrGuard())",
            dst.display(),
            desc.display()
        ));
    }
    written.paths.push(dst);
    match plan {
        Plan::Generate { desc, json, stale } => {
            if let Some(stale) = stale {
                // Everything is staged: the old pair stays readable by its `ProgramDesc`
                // until the new one is committed.
                std::fs::remove_file(&stale).ctx("removing", &stale)?;
            }
            if let (Some(w), Some(path)) = (gen_desc, desc) {
                outputs.push(w.finish()?);
                written.output_bytes = written.output_bytes.saturating_add(desc_bytes);
                written.paths.push(path);
            }
            if let (Some(mut w), Some(path)) = (gen_json, json) {
                w.write_all(program::PIR_TAIL)?;
                outputs.push(w.finish()?);
                written.output_bytes = written.output_bytes.saturating_add(json_len);
                written.paths.push(path);
            }
        }
        Plan::Copy(from, to) => {
            let bytes = std::fs::read(&from).ctx("reading", &from)?;
            let mut w = StagedOut::new(&to)?;
            w.write_all(&bytes)?;
            outputs.push(w.finish()?);
            written.output_bytes = written.output_bytes.saturating_add(bytes.len() as u64);
            written.paths.push(to);
        }
        Plan::Keep => {}
    }
    let (staged, targets): (Vec<_>, Vec<_>) = outputs.into_iter().unzip();
    staging::commit(staged.into_iter().zip(targets.iter().map(PathBuf::as_path)))?;
    staging::sync_parent(&targets[0])?;
    Ok(written)
}

fn changed_listing() -> Error {
    Error::InvalidArgument("the input listed other tensors the second time it was read".into())
}

/// The serialization of the program at `path`, after its name (as [`find_program`] finds it).
fn kind_of(path: &Path) -> ProgramKind {
    if path.extension().is_some_and(|e| e == "json") {
        ProgramKind::PirJson
    } else {
        ProgramKind::ProgramDesc
    }
}

/// Whether the program at `path` (parsed as `parsed`) is a parameters-only program as paramdex
/// writes: a `ProgramDesc` without ops ([`program::is_parameters_only`]), or a PIR program
/// exactly as [`export_combined`] writes it ([`program::is_parameters_only_json`]).
fn is_ours(path: &Path, parsed: &Result<program::Program>) -> bool {
    // A program too large to parse is read no further.
    let small = std::fs::metadata(path).is_ok_and(|m| m.len() <= MAX_PROGRAM_LEN);
    if !small {
        return false;
    }
    match kind_of(path) {
        ProgramKind::ProgramDesc => {
            std::fs::read(path).is_ok_and(|b| program::is_parameters_only(&b))
        }
        ProgramKind::PirJson => match parsed {
            Ok(p) => {
                std::fs::read(path).is_ok_and(|b| program::is_parameters_only_json(&b, &p.params))
            }
            Err(_) => false,
        },
    }
}

/// Before a parameters-only PIR program `json` is written again with the `ProgramDesc` beside
/// it at `desc`: that one must be absent or parameters-only too (a model's graph is never
/// replaced).
fn check_sibling_ours(desc: &Path, json: &Path) -> Result<()> {
    if !desc.exists() {
        return Ok(());
    }
    let small = std::fs::metadata(desc).is_ok_and(|m| m.is_file() && m.len() <= MAX_PROGRAM_LEN);
    if small && std::fs::read(desc).is_ok_and(|b| program::is_parameters_only(&b)) {
        return Ok(());
    }
    Err(Error::InvalidArgument(format!(
        "{} would be written again with {} beside it, but that is not a parameters-only \
         program as paramdex writes, so it is left alone: remove it, or write to another prefix",
        json.display(),
        desc.display()
    )))
}

/// Which programs [`export_combined`] leaves beside the parameters.
enum Plan {
    /// The one at the output prefix declares exactly the tensors written: left as it is.
    Keep,
    /// The input's own program (from, to).
    Copy(PathBuf, PathBuf),
    /// Parameters-only programs written at these paths: a `ProgramDesc` (`PREFIX.pdmodel`)
    /// and a PIR program (`PREFIX.json`); `stale`, paramdex's own PIR program at the prefix
    /// when no PIR program is written, is removed just before they are committed.
    Generate {
        desc: Option<PathBuf>,
        json: Option<PathBuf>,
        stale: Option<PathBuf>,
    },
}

/// The variable the generated program declares for `info`.
fn var_of(info: &TensorInfo) -> Result<crate::proto::paddle::VarDesc> {
    let dtype = info.kind.numeric().ok_or_else(|| {
        Error::Unsupported(format!(
            "tensor {} is {}; Paddle records hold numeric tensors only",
            display(&info.name),
            info.kind.not_numeric().unwrap_or_default()
        ))
    })?;
    program::param_var(&info.name, dtype, &info.shape, info.lod.len())
}

/// Follows a listing against the parameters a program declares (both in bytewise order).
struct Matcher<'p> {
    params: &'p [ParamDecl],
    seen: usize,
    /// The first tensor that the program does not declare as it is, for messages.
    first_difference: Option<String>,
}

impl<'p> Matcher<'p> {
    fn new(params: &'p [ParamDecl]) -> Matcher<'p> {
        Matcher {
            params,
            seen: 0,
            first_difference: None,
        }
    }

    fn see(&mut self, info: &TensorInfo) {
        if self.first_difference.is_none() {
            let what = match (self.params.get(self.seen), info.kind.numeric()) {
                (Some(p), Some(d)) if p.name == info.name => {
                    (!p.accepts(d, &info.shape)).then(|| {
                        format!(
                            "it declares tensor {} with another dtype or shape than {} {:?}",
                            display(&info.name),
                            d.name(),
                            info.shape
                        )
                    })
                }
                _ => Some(format!(
                    "it does not declare tensor {} (or not in that place)",
                    display(&info.name)
                )),
            };
            self.first_difference = what;
        }
        self.seen += 1;
    }

    fn matches(&self) -> bool {
        self.first_difference.is_none() && self.seen == self.params.len()
    }

    /// How the program differs from the `count` tensors written.
    fn difference(&self, count: u64) -> String {
        self.first_difference.clone().unwrap_or_else(|| {
            format!(
                "it declares {} parameters and {count} tensors are written",
                self.params.len()
            )
        })
    }
}

/// A file of [`export_combined`]'s output being written under a staged name beside it.
struct StagedOut {
    w: std::io::BufWriter<std::fs::File>,
    staged: staging::Staged,
    dst: PathBuf,
}

impl StagedOut {
    fn new(dst: &Path) -> Result<StagedOut> {
        let (file, staged) = staging::stage_file(dst, ".paddle-tmp")?;
        Ok(StagedOut {
            w: std::io::BufWriter::with_capacity(1 << 20, file),
            staged,
            dst: dst.to_path_buf(),
        })
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.w
            .write_all(bytes)
            .map_err(|e| Error::io(format!("writing {}", self.dst.display()), e))
    }

    /// Flushes and syncs the staged file; it is then ready to be committed.
    fn finish(self) -> Result<(staging::Staged, PathBuf)> {
        let file = self
            .w
            .into_inner()
            .map_err(|e| Error::io(format!("writing {}", self.dst.display()), e.into_error()))?;
        file.sync_all().ctx("syncing", &self.dst)?;
        Ok((self.staged, self.dst))
    }
}

/// The exporter of [`OutputFormat::PaddleTensors`]: the job's store as Paddle tensor files
/// (each one record, as `paddle.base.core.save_dense_tensor` and the `save` op write, LoD
/// included):
///
/// - one tensor: the file `dst` (which may not be an existing directory);
/// - several tensors: the directory `dst` with one file per tensor at the relative path NAME,
///   as `paddle.static.save_vars(filename=None)` lays them out (a `/` in a name makes a
///   subdirectory). The directory is written under a temporary name beside `dst` and renamed
///   into place when complete (replacing an existing `dst`, which [`crate::interop::export`]
///   allows only with [`ExportOptions::overwrite`](crate::interop::ExportOptions::overwrite)).
///   Names must be safe relative paths ([`relative_path`]; [`crate::interop::export`] has
///   refused or left out the others before: [`cannot_be_a_file`]); a name may not also be a
///   directory of another name (`a` and `a/b`). All names are checked before anything is
///   written (the listing is held in memory for that: one name per file).
///
/// # Errors
///
/// [`Error::Unsupported`] for a store without tensors or with tensors that are not numeric;
/// [`Error::InvalidArgument`] for an unsafe or conflicting name, or `dst` being an existing
/// directory when one tensor is written; [`Error::InvalidTensor`] for inconsistent data; I/O
/// errors.
pub(crate) fn export_tensor_files(job: &ExportJob<'_>) -> Result<Written> {
    let (store, out) = (job.store, job.dst);
    let list = numeric_list(store)?;
    let mut written = Written::default();
    if let [info] = list.as_slice() {
        if out.is_dir() {
            return Err(Error::InvalidArgument(format!(
                "{} is a directory: the input holds one tensor, which is written as one Paddle \
                 tensor file; name the file to write",
                out.display()
            )));
        }
        written.output_bytes = write_one(store, info, out)?;
        written.tensors = 1;
        written.data_bytes = info.nbytes;
        written.paths.push(out.to_path_buf());
        job.progress.advance(info.nbytes);
        return Ok(written);
    }
    let mut rels = Vec::with_capacity(list.len());
    for info in &list {
        rels.push(relative_path(&info.name)?);
    }
    let all: HashSet<&[u8]> = list.iter().map(|i| i.name.as_slice()).collect();
    for info in &list {
        let n = info.name.as_slice();
        for (i, _) in n.iter().enumerate().filter(|(_, &b)| b == b'/') {
            if all.contains(&n[..i]) {
                return Err(Error::InvalidArgument(format!(
                    "tensor names {} and {} cannot both be files: the first would have to be a \
                     directory for the second",
                    display(&n[..i]),
                    display(n)
                )));
            }
        }
    }
    // The whole directory is staged: an error or an interruption removes it, and `out`
    // changes only when every file is written.
    let staged = staging::stage_dir(out, ".paddle-tmp")?;
    for (info, rel) in list.iter().zip(rels) {
        let file = staged.path().join(&rel);
        let final_path = out.join(&rel);
        // Subdirectories one at a time below the staged root, never the root itself: if an
        // interrupt has removed it, creating fails here instead of bringing it back.
        let mut at = staged.path().to_path_buf();
        for part in rel.parent().into_iter().flat_map(Path::components) {
            at.push(part);
            match std::fs::create_dir(&at) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(Error::io(
                        format!("creating the directory of {}", final_path.display()),
                        e,
                    ))
                }
                _ => {}
            }
        }
        let f = File::create(&file).ctx("creating", &final_path)?;
        let mut w = std::io::BufWriter::new(f);
        let len = write_record(&mut w, store, info, 0, false)?;
        let f = w
            .into_inner()
            .map_err(|e| Error::io(format!("writing {}", final_path.display()), e.into_error()))?;
        f.sync_all().ctx("syncing", &final_path)?;
        written.output_bytes = written.output_bytes.saturating_add(len);
        written.tensors += 1;
        written.data_bytes = written.data_bytes.saturating_add(info.nbytes);
        written.paths.push(final_path);
        job.progress.advance(info.nbytes);
    }
    staging::commit([(staged, out)])?;
    staging::sync_parent(out)?;
    Ok(written)
}

fn no_tensors() -> Error {
    Error::Unsupported("the input holds no tensors: nothing to write".into())
}

/// Records go out in bytewise name order, each name once: `name` must come after `previous`.
fn check_order(previous: Option<&[u8]>, name: &[u8]) -> Result<()> {
    match previous {
        Some(p) if p == name => Err(Error::DuplicateName {
            name: display(name),
        }),
        Some(p) if p > name => Err(Error::InvalidArgument(format!(
            "the input listed tensor {} after {}: not in bytewise name order",
            display(name),
            display(p)
        ))),
        _ => Ok(()),
    }
}

/// The store's tensors in bytewise name order, refusing an empty store and tensors that are
/// not numeric.
fn numeric_list(store: &dyn TensorStore) -> Result<Vec<TensorInfo>> {
    let mut list = store.list()?;
    if list.is_empty() {
        return Err(no_tensors());
    }
    if let Some((what, s)) = list
        .iter()
        .find_map(|t| t.kind.not_numeric().map(|w| (w, t)))
    {
        return Err(Error::Unsupported(format!(
            "tensor {} is {what}; Paddle records hold numeric tensors only",
            display(&s.name)
        )));
    }
    list.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = list.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::DuplicateName {
            name: display(&w[0].name),
        });
    }
    Ok(list)
}

/// Writes one tensor file; returns its length.
fn write_one(store: &dyn TensorStore, info: &TensorInfo, dst: &Path) -> Result<u64> {
    let mut len = 0;
    atomic_write(dst, |w| {
        len = write_record(w, store, info, 0, false)?;
        Ok(())
    })?;
    Ok(len)
}

/// Appends the plain Paddle record of tensor `info` (loaded from `store`) at `offset`, after
/// its length as a `u64` little-endian when `size_prefixed` (a merged file); returns the bytes
/// written.
fn write_record(
    w: &mut dyn Write,
    store: &dyn TensorStore,
    info: &TensorInfo,
    offset: u64,
    size_prefixed: bool,
) -> Result<u64> {
    let t = store.load(&info.name)?.ok_or_else(|| Error::NotFound {
        name: display(&info.name),
        path: format!("{} input", store.format().name()),
    })?;
    let (Some(dtype), TensorData::Bytes(data)) = (t.info.kind.numeric(), &t.data) else {
        return Err(Error::Unsupported(format!(
            "tensor {} is {}; Paddle records hold numeric tensors only",
            display(&info.name),
            t.info.kind.not_numeric().unwrap_or_default()
        )));
    };
    let want = data_len(dtype, &t.info.shape);
    if want != Some(data.len() as u64) {
        return Err(Error::InvalidTensor {
            name: display(&info.name),
            detail: format!(
                "{} data bytes, but {} {:?} needs {}",
                data.len(),
                dtype.name(),
                t.info.shape,
                want.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
            ),
        });
    }
    let mut header = Vec::new();
    let spec = RecordSpec {
        dtype,
        dims: &t.info.shape,
        lod: &t.info.lod,
        name: None,
        data_crc: None,
        full_shape: None,
        stored_len: None,
    };
    encode_header(&spec, offset, 1, &mut header)?;
    let io = |e| Error::io(format!("writing tensor {}", display(&info.name)), e);
    let record_len = (header.len() as u64).saturating_add(data.len() as u64);
    let mut prefix_len = 0;
    if size_prefixed {
        w.write_all(&record_len.to_le_bytes()).map_err(io)?;
        prefix_len = SIZE_FIELD_LEN;
    }
    w.write_all(&header).map_err(io)?;
    w.write_all(data).map_err(io)?;
    Ok(record_len.saturating_add(prefix_len))
}

/// Writes `dst` through a staged temporary file beside it: `fill`, flush, fsync, rename. On
/// error the temporary file is removed and `dst` is untouched.
fn atomic_write(dst: &Path, fill: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    staging::write_staged(dst, ".paddle-tmp", fill)
}

/// Longest path component [`relative_path`] accepts, in bytes: `NAME_MAX` of the common file
/// systems (ext4, XFS, Btrfs, APFS; NTFS counts 255 UTF-16 units).
pub const MAX_FILE_NAME_LEN: usize = 255;

/// A tensor name as a safe relative path, as [`OutputFormat::PaddleTensors`] needs it: not
/// empty, no NUL, not absolute, no empty, `.` or `..` component, no component above
/// [`MAX_FILE_NAME_LEN`] bytes, at most [`super::MAX_DIR_DEPTH`] directories deep (what
/// paramdex reads back), and, off Unix, valid UTF-8 without `\` or `:`.
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what is unsafe about the name.
pub fn relative_path(name: &[u8]) -> Result<PathBuf> {
    if let Some(why) = not_a_file_name(name) {
        return Err(Error::InvalidArgument(format!(
            "tensor name {} cannot be used as a file name: {why}",
            display(name)
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
    }
    #[cfg(not(unix))]
    {
        // not_a_file_name has checked it is UTF-8 off Unix.
        let s = String::from_utf8_lossy(name);
        Ok(s.split('/').collect())
    }
}

/// Why `name` cannot be a relative file path ([`relative_path`]'s rules), or `None`.
fn not_a_file_name(name: &[u8]) -> Option<String> {
    if name.is_empty() {
        return Some("it is empty".into());
    }
    if name.contains(&0) {
        return Some("it contains a NUL byte".into());
    }
    if name.first() == Some(&b'/') {
        return Some("it is an absolute path".into());
    }
    let mut depth = 0usize;
    for comp in name.split(|&b| b == b'/') {
        match comp {
            b"" => return Some("it has an empty path component (`//` or a trailing `/`)".into()),
            b"." | b".." => return Some("it has a `.` or `..` path component".into()),
            c if c.len() > MAX_FILE_NAME_LEN => {
                return Some(format!(
                    "a path component of {} bytes is longer than a file name can be \
                     ({MAX_FILE_NAME_LEN} bytes)",
                    c.len()
                ))
            }
            _ => depth += 1,
        }
    }
    if depth - 1 > super::MAX_DIR_DEPTH {
        return Some(format!(
            "it would be {} directories deep (paramdex reads per-variable directories {} deep)",
            depth - 1,
            super::MAX_DIR_DEPTH
        ));
    }
    if cfg!(not(unix)) {
        let Ok(s) = std::str::from_utf8(name) else {
            return Some("it is not UTF-8".into());
        };
        if s.contains('\\') || s.contains(':') {
            return Some("it contains `\\` or `:`".into());
        }
    }
    None
}

/// Why [`OutputFormat::PaddleTensors`] cannot write a tensor in a directory of several, one file
/// per tensor at the path of its name: a name that cannot be a file path ([`relative_path`]).
/// (One tensor alone is written to the file named on the command line: its name does not
/// matter.)
pub(crate) fn cannot_be_a_file(info: &TensorInfo) -> Option<String> {
    not_a_file_name(&info.name).map(|why| format!("named by a path no file can have: {why}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(b"a/b.w_0").unwrap(),
            Path::new("a").join("b.w_0")
        );
        assert!(relative_path("ünï/cödé".as_bytes()).is_ok());
        for bad in [
            &b""[..],
            b"/abs",
            b"a//b",
            b"a/",
            b"..",
            b"a/../b",
            b"./a",
            b"a\0b",
            &[b'x'; 256],
            &[b"d/".repeat(65), b"x".to_vec()].concat(),
        ] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
        assert!(relative_path(&[b'x'; 255]).is_ok());
        assert!(relative_path(&[b"d/".repeat(64), b"x".to_vec()].concat()).is_ok());
    }

    #[test]
    fn combined_paths() {
        assert_eq!(combined_path(Path::new("o/m")), Path::new("o/m.pdiparams"));
        assert_eq!(
            combined_path(Path::new("o/m.pdiparams")),
            Path::new("o/m.pdiparams")
        );
        assert_eq!(
            combined_path(Path::new("o/m.v2")),
            Path::new("o/m.v2.pdiparams")
        );
    }
}
