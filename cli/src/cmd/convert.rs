//! `convert`, `merge` and `export-tf`: the arguments become options of the library's one
//! export ([`paramdex::interop::export`]) and merge ([`paramdex::interop::merge`]), whose
//! reports are printed.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use paramdex::interop::{
    export, open_any, ExportOptions, ExportReport, MergeInput, MergeOptions, OutputFormat,
};
use paramdex::{name, Error, Progress, Result};

use super::{human_bytes, Bar, LayoutArgs, Target, Ui};

/// Notes what the export left behind: each tensor left out, metadata the format cannot carry.
fn note_left_out(ui: Ui, rep: &ExportReport) {
    for t in &rep.skipped {
        ui.note(format!(
            "left out {} ({})",
            name::display(&t.name),
            t.reason
        ));
    }
    if rep.metadata_dropped > 0 {
        let into = match rep.format {
            OutputFormat::TensorFlow => "a TensorFlow checkpoint",
            OutputFormat::PaddleCombined => "a Paddle parameter file",
            OutputFormat::PaddleTensors => "Paddle tensor files",
            _ => rep.format.name(),
        };
        ui.note(format!(
            "{} metadata entries are not carried into {into}",
            rep.metadata_dropped
        ));
    }
}

pub fn convert(
    ui: Ui,
    src: &Path,
    dst: &Path,
    to: Target,
    layout: LayoutArgs,
    skip_unsupported: bool,
) -> Result<ExitCode> {
    let store = open_any(src)?;
    let start = Instant::now();
    let bar = Bar::new(ui, "writing");
    let rep = export(
        store.as_ref(),
        to.format(),
        dst,
        &ExportOptions {
            writer: layout.writer_options(),
            metadata: None,
            skip_unsupported,
            progress: bar.visible().then_some(&bar as &dyn Progress),
        },
    );
    bar.finish();
    let rep = rep?;
    note_left_out(ui, &rep);
    let from = store.format().name();
    let took = start.elapsed();
    let (dst, n) = (dst.display(), rep.tensors);
    ui.say(match to {
        Target::Paramdex => format!(
            "wrote {dst} ({n} tensors, {}) from {from} in {took:.1?}",
            human_bytes(rep.output_bytes)
        ),
        Target::Safetensors => format!(
            "wrote safetensors {dst} ({n} tensors, {}) from {from} in {took:.1?}",
            human_bytes(rep.output_bytes)
        ),
        Target::Tf => {
            format!("wrote TensorFlow checkpoint {dst} ({n} tensors) from {from} in {took:.1?}")
        }
        Target::Paddle => format!(
            "wrote {} from {from} in {took:.1?}",
            rep.paths.first().map_or(dst, |p| p.display())
        ),
        Target::PaddleTensor => format!(
            "wrote {} Paddle tensor file(s) under {dst} from {from} in {took:.1?}",
            rep.paths.len()
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
) -> Result<ExitCode> {
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
            },
            allow_override,
        },
    );
    bar.finish();
    let rep = rep?;
    note_left_out(ui, &rep.written);
    let replaced = if rep.replaced > 0 {
        format!(", {} replaced by later inputs", rep.replaced)
    } else {
        String::new()
    };
    ui.say(format!(
        "merged {} inputs into {} ({} tensors{replaced}, {}) in {:.1?}",
        inputs.len(),
        out.display(),
        rep.written.tensors,
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
