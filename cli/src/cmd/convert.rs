//! `convert`, `merge` and `export-tf`: the arguments become options of the library's one
//! export ([`paramdex::interop::export`]) and merge ([`paramdex::interop::merge`]), whose
//! reports are printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};
use paramdex::interop::{
    export, open_any, ExportOptions, ExportReport, Format, LoadedTensor, MergeInput, MergeOptions,
    OutputFormat, TensorInfos, TensorStore, VerifySummary,
};
use paramdex::{name, Error, Metadata, Progress, Reader, Result};

use super::output::{a_format, count, count_s};
use super::{human_bytes, Bar, LayoutArgs, Target, Ui};

/// `convert --include/--exclude`: the glob patterns choosing the tensors to copy.
#[derive(Debug, Default)]
pub struct Select {
    /// Copy only names matching one of these (all names when empty).
    pub include: Vec<String>,
    /// Leave out names matching one of these.
    pub exclude: Vec<String>,
}

/// [`Select`] compiled: one automaton per list.
struct Patterns {
    include: Option<GlobSet>,
    exclude: GlobSet,
}

/// A glob over a whole tensor name: `*` runs across `/` and `.` (names are not paths), `\`
/// escapes.
pub(super) fn glob(flag: &str, p: &str) -> Result<Glob> {
    GlobBuilder::new(p)
        .literal_separator(false)
        .backslash_escape(true)
        .build()
        .map_err(|e| Error::InvalidArgument(format!("{flag} {p:?}: {e}")))
}

fn glob_set(flag: &str, patterns: &[String]) -> Result<GlobSet> {
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        b.add(glob(flag, p)?);
    }
    b.build()
        .map_err(|e| Error::InvalidArgument(format!("{flag}: {e}")))
}

impl Patterns {
    fn new(sel: &Select) -> Result<Patterns> {
        Ok(Patterns {
            include: if sel.include.is_empty() {
                None
            } else {
                Some(glob_set("--include", &sel.include)?)
            },
            exclude: glob_set("--exclude", &sel.exclude)?,
        })
    }

    /// Whether `name` is copied. Names are matched as bytes (not UTF-8 ones too).
    fn selects(&self, name: &[u8]) -> bool {
        let c = candidate(name);
        self.include
            .as_ref()
            .is_none_or(|s| s.is_match_candidate(&c))
            && !self.exclude.is_match_candidate(&c)
    }
}

/// A name as globset matches it: its bytes.
pub(super) fn candidate(name: &[u8]) -> globset::Candidate<'_> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        globset::Candidate::new(std::ffi::OsStr::from_bytes(name))
    }
    #[cfg(not(unix))]
    {
        globset::Candidate::new(String::from_utf8_lossy(name).into_owned())
    }
}

/// The input as `convert --include/--exclude` copies it: only the selected tensors.
struct Selected<'a> {
    inner: &'a dyn TensorStore,
    patterns: &'a Patterns,
}

impl TensorStore for Selected<'_> {
    fn format(&self) -> Format {
        self.inner.format()
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let it = self.inner.scan(start)?;
        Ok(Box::new(it.filter(|t| {
            t.as_ref().map_or(true, |t| self.patterns.selects(&t.name))
        })))
    }

    fn metadata(&self) -> Result<Metadata> {
        self.inner.metadata()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        if !self.patterns.selects(name) {
            return Ok(None);
        }
        self.inner.load(name)
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        self.inner.verify(threads)
    }

    fn as_native(&self) -> Option<&Reader> {
        // Not every tensor of the reader is visible here.
        None
    }
}

/// Checks `sel` against the input's names before anything is written: a note for each
/// pattern that matches no name; an error when no tensor would be copied. Returns the
/// compiled patterns and (selected, all) tensor counts.
fn survey_selection(ui: Ui, store: &dyn TensorStore, sel: &Select) -> Result<(Patterns, u64, u64)> {
    let patterns = Patterns::new(sel)?;
    // Every pattern in one automaton, to see which match some name.
    let flags: Vec<(&str, &String)> = sel
        .include
        .iter()
        .map(|p| ("--include", p))
        .chain(sel.exclude.iter().map(|p| ("--exclude", p)))
        .collect();
    let mut b = GlobSetBuilder::new();
    for (flag, p) in &flags {
        b.add(glob(flag, p)?);
    }
    let every = b
        .build()
        .map_err(|e| Error::InvalidArgument(format!("--include/--exclude: {e}")))?;
    let mut hit = vec![false; flags.len()];
    let mut matched = Vec::new();
    let (mut selected, mut all) = (0u64, 0u64);
    for t in store.scan(b"")? {
        let t = t?;
        all += 1;
        if patterns.selects(&t.name) {
            selected += 1;
        }
        every.matches_candidate_into(&candidate(&t.name), &mut matched);
        for &i in &matched {
            hit[i] = true;
        }
    }
    let unmatched: Vec<String> = hit
        .iter()
        .zip(&flags)
        .filter(|(hit, _)| !**hit)
        .map(|(_, (flag, p))| format!("{flag} {p:?} matches no tensor name"))
        .collect();
    if selected == 0 {
        let why = if unmatched.is_empty() {
            String::new()
        } else {
            format!(" ({})", unmatched.join("; "))
        };
        return Err(Error::InvalidArgument(format!(
            "--include/--exclude select none of the input's {}{why}; nothing written",
            count_s(all, "tensor")
        )));
    }
    for u in unmatched {
        ui.note(u);
    }
    Ok((patterns, selected, all))
}

/// Notes what the export left behind: each tensor left out, metadata the format cannot carry.
fn note_left_out(ui: Ui, rep: &ExportReport) {
    for t in &rep.skipped {
        ui.note(format!(
            "left out {} ({})",
            name::display(&t.name),
            t.reason
        ));
    }
    for n in &rep.notes {
        ui.note(n.clone());
    }
    if rep.metadata_dropped > 0 {
        let into = match rep.format {
            OutputFormat::TensorFlow => "a TensorFlow checkpoint",
            OutputFormat::PaddleCombined => "a Paddle parameter file",
            OutputFormat::PaddleTensors => "Paddle tensor files",
            OutputFormat::PaddleMerged => "a Paddle merged parameter file",
            _ => rep.format.name(),
        };
        ui.note(format!(
            "{} not carried into {into}",
            count(
                rep.metadata_dropped as u64,
                "metadata entry is",
                Some("metadata entries are")
            )
        ));
    }
}

/// The library's refusal to replace an output, with the flag that allows it.
fn force_hint(e: Error) -> Error {
    match e {
        Error::OutputExists { path } => {
            Error::InvalidArgument(format!("{path} already exists; pass --force to replace it"))
        }
        e => e,
    }
}

/// What `convert` is asked to write, besides its input and output paths.
#[derive(Debug)]
pub struct ConvertOptions {
    /// `--to`.
    pub to: Target,
    /// `--align`, `--compress`, `--block-size`.
    pub layout: LayoutArgs,
    /// `--skip-unsupported`.
    pub skip_unsupported: bool,
    /// `--include`, `--exclude`.
    pub select: Select,
    /// `--rename`, `--strip-prefix`.
    pub rename: super::rename::Rules,
    /// `--max-shard-size` (bytes): a Hugging Face model directory.
    pub max_shard_size: Option<u64>,
    /// `--force`.
    pub force: bool,
}

/// A size as `--max-shard-size` takes it: bytes, or a number with KB, MB, GB, TB (powers of
/// 1000, as transformers reads them) or KiB, MiB, GiB, TiB.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad = || {
        Error::InvalidArgument(format!(
            "--max-shard-size {s:?}: bytes, or a number and a unit, as 5GB, 500MB or 2GiB"
        ))
    };
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: f64 = n.parse().map_err(|_| bad())?;
    let mult: f64 = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 1.0,
        "KB" => 1e3,
        "MB" => 1e6,
        "GB" => 1e9,
        "TB" => 1e12,
        "KIB" => 1024.0,
        "MIB" => 1024.0 * 1024.0,
        "GIB" => 1024.0 * 1024.0 * 1024.0,
        "TIB" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(bad()),
    };
    let v = (n * mult).floor();
    if !(v >= 1.0 && v < u64::MAX as f64) {
        return Err(bad());
    }
    Ok(v as u64)
}

pub fn convert(ui: Ui, src: &Path, dst: &Path, opts: ConvertOptions) -> Result<ExitCode> {
    let ConvertOptions {
        to,
        layout,
        skip_unsupported,
        select,
        rename,
        max_shard_size,
        force,
    } = opts;
    let sel = &select;
    if max_shard_size.is_some() && to != Target::Safetensors {
        return Err(Error::InvalidArgument(format!(
            "--max-shard-size writes a Hugging Face model directory of safetensors files; it \
             cannot be used with --to {}",
            to.format().name()
        )));
    }
    // Before the input is even opened (export checks again, just before it starts); an
    // s3:// URL by HEAD requests. A Hugging Face directory (--max-shard-size) is local only:
    // export_pretrained refuses a URL and checks the directory.
    if max_shard_size.is_none() {
        to.format().check_outputs(dst, force).map_err(force_hint)?;
    }
    let store = open_any(src)?;
    let start = Instant::now();
    let selection = if sel.include.is_empty() && sel.exclude.is_empty() {
        None
    } else {
        Some(survey_selection(ui, store.as_ref(), sel)?)
    };
    let selected;
    let input: &dyn TensorStore = match &selection {
        Some((patterns, ..)) => {
            selected = Selected {
                inner: store.as_ref(),
                patterns,
            };
            &selected
        }
        None => store.as_ref(),
    };
    let renamed;
    let (input, renames): (&dyn TensorStore, usize) = if rename.is_empty() {
        (input, 0)
    } else {
        renamed = super::rename::Renamed::new(input, &rename)?;
        (&renamed, renamed.changed())
    };
    let bar = Bar::new(ui, "writing");
    let export_opts = ExportOptions {
        writer: layout.writer_options(),
        metadata: None,
        skip_unsupported,
        progress: bar.visible().then_some(&bar as &dyn Progress),
        overwrite: force,
    };
    if let Some(max) = max_shard_size {
        let rep = paramdex::interop::export_pretrained(input, dst, max, &export_opts);
        bar.finish();
        let rep = rep.map_err(force_hint)?;
        for t in &rep.skipped {
            ui.note(format!(
                "left out {} ({})",
                name::display(&t.name),
                t.reason
            ));
        }
        let files = match &rep.index {
            Some(index) => format!(
                "{} and {}",
                count_s(rep.files.len() as u64, "safetensors file"),
                index.file_name().unwrap_or_default().to_string_lossy()
            ),
            None => "model.safetensors".to_string(),
        };
        ui.say(format!(
            "wrote Hugging Face model {} ({files}; {}, {}) from {} in {:.1?}",
            dst.display(),
            count_s(rep.tensors, "tensor"),
            human_bytes(rep.output_bytes),
            if rename.is_empty() {
                store.format().name().to_string()
            } else {
                format!(
                    "{}, {} renamed",
                    store.format().name(),
                    count_s(renames as u64, "tensor")
                )
            },
            start.elapsed()
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let rep = export(input, to.format(), dst, &export_opts);
    bar.finish();
    let rep = rep.map_err(force_hint)?;
    note_left_out(ui, &rep);
    let from = match &selection {
        Some((_, selected, all)) => format!(
            "{} (selected {selected} of {})",
            store.format().name(),
            count_s(*all, "tensor")
        ),
        None => store.format().name().to_string(),
    };
    let from = if rename.is_empty() {
        from
    } else {
        format!("{from}, {} renamed", count_s(renames as u64, "tensor"))
    };
    let took = start.elapsed();
    let (dst, n) = (dst.display(), count_s(rep.tensors, "tensor"));
    ui.say(match to {
        Target::Paramdex => format!(
            "wrote {dst} ({n}, {}) from {from} in {took:.1?}",
            human_bytes(rep.output_bytes)
        ),
        Target::Safetensors => format!(
            "wrote safetensors {dst} ({n}, {}) from {from} in {took:.1?}",
            human_bytes(rep.output_bytes)
        ),
        Target::Gguf => format!(
            "wrote GGUF {dst} ({n}, {}) from {from} in {took:.1?}",
            human_bytes(rep.output_bytes)
        ),
        Target::Tf => {
            format!("wrote TensorFlow checkpoint {dst} ({n}) from {from} in {took:.1?}")
        }
        Target::Paddle | Target::PaddleMerged => {
            let files: Vec<String> = rep.paths.iter().map(|p| p.display().to_string()).collect();
            let kept = if rep.paths.len() == 1 {
                " (the program beside it declares these tensors: kept)"
            } else {
                ""
            };
            let listed = match files.split_last() {
                Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
                _ => files.join(""),
            };
            format!("wrote {listed} ({n}){kept} from {from} in {took:.1?}")
        }
        Target::PaddleTensor => format!(
            "wrote {} under {dst} from {from} in {took:.1?}",
            count_s(rep.paths.len() as u64, "Paddle tensor file"),
        ),
    })?;
    Ok(ExitCode::SUCCESS)
}

pub fn merge(
    ui: Ui,
    out: &Path,
    inputs: &[PathBuf],
    allow_override: bool,
    layout: LayoutArgs,
    skip_unsupported: bool,
    force: bool,
) -> Result<ExitCode> {
    // Before the inputs are opened (an s3:// output by one HEAD request).
    OutputFormat::Native
        .check_outputs(out, force)
        .map_err(force_hint)?;
    let start = Instant::now();
    let stores = inputs.iter().map(open_any).collect::<Result<Vec<_>>>()?;
    let merged: Vec<MergeInput<'_>> = stores
        .iter()
        .zip(inputs)
        .map(|(store, path)| MergeInput {
            store: store.as_ref(),
            path,
        })
        .collect();
    let bar = Bar::new(ui, "writing");
    let rep = paramdex::interop::merge(
        &merged,
        out,
        &MergeOptions {
            export: ExportOptions {
                writer: layout.writer_options(),
                metadata: None,
                skip_unsupported,
                progress: bar.visible().then_some(&bar as &dyn Progress),
                overwrite: force,
            },
            allow_override,
        },
    );
    bar.finish();
    let rep = rep.map_err(force_hint)?;
    note_left_out(ui, &rep.written);
    let replaced = if rep.replaced > 0 {
        format!(", {} replaced by later inputs", rep.replaced)
    } else {
        String::new()
    };
    ui.say(format!(
        "merged {} into {} ({}{replaced}, {}) in {:.1?}",
        count_s(inputs.len() as u64, "input"),
        out.display(),
        count_s(rep.written.tensors, "tensor"),
        human_bytes(rep.written.output_bytes),
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
                 {} is {}: convert it first (`paramdex convert {} out.pdx`), or write a plain \
                 TensorFlow bundle with `paramdex convert {} PREFIX --to tf`",
                file.display(),
                a_format(store.format()),
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

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    /// The library names a format as `--to` does (its messages say `which tf output cannot
    /// hold`), and every output format has a `--to` value.
    #[test]
    fn targets_are_the_output_formats() {
        for t in Target::value_variants() {
            let v = t.to_possible_value().unwrap();
            assert_eq!(v.get_name(), t.format().name());
        }
        for f in OutputFormat::ALL {
            assert!(Target::value_variants().iter().any(|t| t.format() == f));
        }
    }
}
