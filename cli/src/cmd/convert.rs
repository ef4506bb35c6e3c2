//! `convert`, `merge` and `export-tf`.

use std::collections::{BTreeMap, BTreeSet};

use clap::ValueEnum;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use paramdex::interop::{
    open_any, Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore,
};
use paramdex::FinishStats;
use paramdex::{name, Error, Metadata, Result, Tensor, Writer};

use super::{human_bytes, metadata_of, LayoutArgs, Target, Ui};

/// Inputs with at least this many data bytes get a progress bar (on a terminal).
const PROGRESS_MIN_BYTES: u64 = 16 << 20;

/// Writes the planned tensors (each from `stores[i]`, in the plan's order, which is name order)
/// and `metadata` into a new native file.
fn write_native(
    ui: Ui,
    stores: &[&dyn TensorStore],
    plan: &[(usize, TensorInfo)],
    metadata: Metadata,
    dst: &Path,
    layout: LayoutArgs,
) -> Result<FinishStats> {
    if let Some((what, s)) = plan
        .iter()
        .find_map(|(_, t)| t.kind.not_numeric().map(|w| (w, t)))
    {
        return Err(Error::Unsupported(format!(
            "tensor {} is {what}; paramdex files hold numeric tensors only (SPEC.md section 6)",
            name::display(&s.name)
        )));
    }
    let total: u64 = plan.iter().map(|(_, t)| t.nbytes).sum();
    let bar = if total >= PROGRESS_MIN_BYTES {
        ui.bytes_bar(total, "writing")
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut w = Writer::create_with(dst, layout.writer_options())?;
    w.set_metadata(metadata)?;
    for (i, info) in plan {
        let store = &stores[*i];
        let t = store.load(&info.name)?.ok_or_else(|| Error::NotFound {
            name: name::display(&info.name),
            path: format!("{} input", store.format().name()),
        })?;
        let (Kind::Numeric(dtype), TensorData::Bytes(data)) = (t.info.kind, &t.data) else {
            return Err(Error::Unsupported(format!(
                "tensor {} is not numeric",
                name::display(&info.name)
            )));
        };
        w.add(
            &t.info.name,
            Tensor::new(dtype, &t.info.shape, data).with_lod(&t.info.lod),
        )?;
        bar.inc(info.nbytes);
    }
    let stats = w.finish();
    bar.finish_and_clear();
    stats
}

/// Why `target` cannot hold tensor `t`, if it cannot.
fn unsupported(target: Target, t: &TensorInfo) -> Option<String> {
    let not_numeric = t.kind.not_numeric();
    match target {
        // A TensorFlow bundle holds strings too, but not what paramdex does not decode.
        Target::Tf => not_numeric.filter(|_| matches!(t.kind, Kind::Opaque(_))),
        Target::Paramdex | Target::Paddle | Target::PaddleTensor => not_numeric,
        Target::Safetensors => {
            if not_numeric.is_some() {
                not_numeric
            } else if t.kind.numeric() == Some(paramdex::DType::Complex128) {
                Some("complex128, which safetensors lacks".into())
            } else if !t.lod.is_empty() {
                Some("a LoD tensor, which safetensors cannot describe".into())
            } else if name::as_utf8(&t.name).is_none() {
                Some("named with bytes that are not UTF-8".into())
            } else {
                None
            }
        }
    }
}

/// A store showing only some of another's tensors (`--skip-unsupported`).
struct Filtered<'a> {
    inner: &'a dyn TensorStore,
    skip: BTreeSet<Vec<u8>>,
}

impl TensorStore for Filtered<'_> {
    fn format(&self) -> Format {
        self.inner.format()
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let it = self.inner.scan(start)?;
        Ok(Box::new(it.filter(|t| {
            t.as_ref().map_or(true, |t| !self.skip.contains(&t.name))
        })))
    }

    fn metadata(&self) -> Result<Metadata> {
        self.inner.metadata()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        if self.skip.contains(name) {
            return Ok(None);
        }
        self.inner.load(name)
    }

    fn verify(&self, threads: usize) -> Result<paramdex::interop::VerifySummary> {
        self.inner.verify(threads)
    }

    fn as_native(&self) -> Option<&paramdex::Reader> {
        self.inner.as_native()
    }
}

/// The tensors of `list` that `target` cannot hold: an error naming the first unless `skip`,
/// then a note naming them all (unless --quiet).
fn check_supported(
    ui: Ui,
    target: Target,
    list: &[TensorInfo],
    skip: bool,
) -> Result<BTreeSet<Vec<u8>>> {
    let bad: Vec<(&TensorInfo, String)> = list
        .iter()
        .filter_map(|t| unsupported(target, t).map(|why| (t, why)))
        .collect();
    let Some((first, why)) = bad.first() else {
        return Ok(BTreeSet::new());
    };
    let what = target
        .to_possible_value()
        .map_or("this format".to_string(), |v| v.get_name().to_string());
    if !skip {
        return Err(Error::Unsupported(format!(
            "tensor {} is {why}, which {what} output cannot hold{}; pass --skip-unsupported to leave such tensors out",
            name::display(&first.name),
            if bad.len() > 1 {
                format!(" ({} such tensors)", bad.len())
            } else {
                String::new()
            }
        )));
    }
    for (t, why) in &bad {
        ui.note(format!("left out {} ({why})", name::display(&t.name)));
    }
    Ok(bad.into_iter().map(|(t, _)| t.name.clone()).collect())
}

pub fn convert(
    ui: Ui,
    src: &Path,
    dst: &Path,
    to: Target,
    layout: LayoutArgs,
    skip_unsupported: bool,
) -> Result<ExitCode> {
    let opened = open_any(src)?;
    let metadata = metadata_of(opened.as_ref(), src)?;
    let skip = check_supported(ui, to, &opened.list()?, skip_unsupported)?;
    let filtered = Filtered {
        inner: opened.as_ref(),
        skip,
    };
    let store: &dyn TensorStore = &filtered;
    let start = Instant::now();
    let from = store.format().name();
    let dropped = |what: &str| {
        if !metadata.is_empty() {
            ui.note(format!(
                "{} metadata entries are not carried into {what}",
                metadata.len()
            ));
        }
    };
    match to {
        Target::Paramdex => {
            let plan: Vec<(usize, TensorInfo)> =
                store.list()?.into_iter().map(|t| (0, t)).collect();
            let stats = write_native(ui, &[store], &plan, metadata, dst, layout)?;
            ui.say(format!(
                "wrote {} ({} tensors, {}) from {from} in {:.1?}",
                dst.display(),
                stats.tensors,
                human_bytes(stats.file_len),
                start.elapsed()
            ))?;
        }
        Target::Safetensors => {
            let total: u64 = store.list()?.iter().map(|t| t.nbytes).sum();
            let bar = if total >= PROGRESS_MIN_BYTES {
                ui.bytes_bar(total, "writing")
            } else {
                indicatif::ProgressBar::hidden()
            };
            let rep =
                paramdex::interop::safetensors::write_safetensors(store, &metadata, dst, &|n| {
                    bar.inc(n)
                });
            bar.finish_and_clear();
            let rep = rep?;
            ui.say(format!(
                "wrote safetensors {} ({} tensors, {}) from {from} in {:.1?}",
                dst.display(),
                rep.tensors,
                human_bytes(rep.file_len),
                start.elapsed()
            ))?;
        }
        Target::Tf => {
            dropped("a TensorFlow checkpoint");
            let sp = ui.spinner("writing a TensorFlow checkpoint");
            let n = paramdex::interop::tf::write_bundle(store, dst);
            sp.finish_and_clear();
            let n = n?;
            ui.say(format!(
                "wrote TensorFlow checkpoint {} ({n} tensors) from {from} in {:.1?}",
                dst.display(),
                start.elapsed()
            ))?;
        }
        Target::Paddle => {
            dropped("a Paddle parameter file");
            let sp = ui.spinner("writing a Paddle parameter file");
            let out = paramdex::interop::paddle::write_combined(store, dst);
            sp.finish_and_clear();
            let out = out?;
            ui.say(format!(
                "wrote {} from {from} in {:.1?}",
                out.display(),
                start.elapsed()
            ))?;
        }
        Target::PaddleTensor => {
            dropped("Paddle tensor files");
            let sp = ui.spinner("writing Paddle tensor files");
            let outs = paramdex::interop::paddle::write_tensor_files(store, dst);
            sp.finish_and_clear();
            let outs = outs?;
            ui.say(format!(
                "wrote {} Paddle tensor file(s) under {} from {from} in {:.1?}",
                outs.len(),
                dst.display(),
                start.elapsed()
            ))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn merge(
    ui: Ui,
    out: &Path,
    inputs: &[std::path::PathBuf],
    allow_override: bool,
    layout: LayoutArgs,
    skip_unsupported: bool,
) -> Result<ExitCode> {
    let start = Instant::now();
    let mut stores = Vec::with_capacity(inputs.len());
    let mut chosen: BTreeMap<Vec<u8>, (usize, TensorInfo)> = BTreeMap::new();
    let mut metadata = Metadata::new();
    let mut meta_from: BTreeMap<String, usize> = BTreeMap::new();
    let mut overridden = 0usize;
    for (i, path) in inputs.iter().enumerate() {
        let store = open_any(path)?;
        for t in store.list()? {
            if let Some((j, _)) = chosen.get(&t.name) {
                if !allow_override {
                    return Err(Error::InvalidArgument(format!(
                        "tensor {} is in both {} and {}; pass --allow-override to keep the later one",
                        name::display(&t.name),
                        inputs[*j].display(),
                        path.display()
                    )));
                }
                overridden += 1;
            }
            chosen.insert(t.name.clone(), (i, t));
        }
        for (k, v) in metadata_of(store.as_ref(), path)?.iter() {
            if let Some(old) = metadata.get(k) {
                if old != v && !allow_override {
                    return Err(Error::InvalidArgument(format!(
                        "metadata key {k:?} is {} in {} and {} in {}; pass --allow-override to keep the later one",
                        old.to_json(),
                        inputs[meta_from[k]].display(),
                        v.to_json(),
                        path.display()
                    )));
                }
            }
            metadata.insert(k, v.clone())?;
            meta_from.insert(k.to_string(), i);
        }
        stores.push(store);
    }
    let plan: Vec<(usize, TensorInfo)> = chosen.into_values().collect();
    let list: Vec<TensorInfo> = plan.iter().map(|(_, t)| t.clone()).collect();
    let skip = check_supported(ui, Target::Paramdex, &list, skip_unsupported)?;
    let plan: Vec<(usize, TensorInfo)> = plan
        .into_iter()
        .filter(|(_, t)| !skip.contains(&t.name))
        .collect();
    let refs: Vec<&dyn TensorStore> = stores.iter().map(|s| s.as_ref()).collect();
    let stats = write_native(ui, &refs, &plan, metadata, out, layout)?;
    let replaced = if overridden > 0 {
        format!(", {overridden} replaced by later inputs")
    } else {
        String::new()
    };
    ui.say(format!(
        "merged {} inputs into {} ({} tensors{replaced}, {}) in {:.1?}",
        inputs.len(),
        out.display(),
        stats.tensors,
        human_bytes(stats.file_len),
        start.elapsed()
    ))?;
    Ok(ExitCode::SUCCESS)
}

pub fn export_tf(ui: Ui, file: &Path, prefix: &Path) -> Result<ExitCode> {
    let rep = match paramdex::interop::tf::export_tf(file, prefix) {
        Err(Error::UnrecognizedFormat { .. }) => {
            // Say what the input is and what to do instead.
            let store = open_any(file)?;
            return Err(Error::InvalidArgument(format!(
                "export-tf makes a native paramdex file loadable by TensorFlow without copying; \
                 {} is a {}: convert it first (`paramdex convert {} out.pdx`), or write a plain \
                 TensorFlow bundle with `paramdex convert {} PREFIX --to tf`",
                file.display(),
                store.format().name(),
                file.display(),
                file.display()
            )));
        }
        other => other?,
    };
    let how = if rep.copied {
        "copied (hard links were not possible here)"
    } else {
        "hard-linked, zero bytes copied"
    };
    ui.say(format!(
        "{} and {} {how}; load with tf.train.load_checkpoint({:?})",
        rep.index_path.display(),
        rep.data_path.display(),
        prefix.display().to_string()
    ))?;
    Ok(ExitCode::SUCCESS)
}
