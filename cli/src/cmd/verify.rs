//! `verify`: every checksum and structure check of an input; `recover`: a complete file rebuilt
//! from the records of a torn one.

use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use paramdex::interop::{open_any, Format};
use paramdex::{
    Error, Progress, Reader, RecoverOptions, Recovered, Result, VerifyOptions, WriterOptions,
};
use serde_json::json;

use super::output::{count_s, write_json};
use super::style::GOOD;
use super::{human_bytes, stdout_err, Bar, Ui};

/// What `verify` found.
struct Verified {
    tensors: u64,
    data_bytes: u64,
    checksums: u64,
}

/// Verifies a native file with the library's one verify ([`Reader::verify_with`]), drawing its
/// progress over the data bytes.
fn verify_native(ui: Ui, r: &Reader, threads: usize) -> Result<Verified> {
    let bar = Bar::new(ui, "verifying");
    // A progress hook costs the library a first pass over the index (for the total): give one
    // only when the bar is drawn.
    let rep = r.verify_with(VerifyOptions {
        load: None,
        threads,
        progress: bar.visible().then_some(&bar as &dyn Progress),
    });
    bar.finish();
    let rep = rep?;
    Ok(Verified {
        tensors: rep.tensors,
        data_bytes: rep.data_bytes,
        checksums: rep.blocks + rep.records,
    })
}

pub fn verify(ui: Ui, file: &Path, threads: usize, as_json: bool) -> Result<ExitCode> {
    let start = Instant::now();
    let result = (|| -> Result<(Format, Verified)> {
        let store = open_any(file)?;
        let v = match store.as_native() {
            Some(r) => verify_native(ui, r, threads)?,
            None => {
                let sp = ui.spinner(&format!("verifying {}", store.format().name()));
                let rep = store.verify(threads);
                sp.finish_and_clear();
                let rep = rep?;
                Verified {
                    tensors: rep.tensors,
                    data_bytes: rep.data_bytes,
                    checksums: rep.checksums,
                }
            }
        };
        Ok((store.format(), v))
    })();
    let secs = start.elapsed().as_secs_f64();
    match result {
        Ok((format, v)) => {
            let left = leftover_temporaries(file);
            if as_json {
                let left: Vec<_> = left
                    .iter()
                    .map(|t| json!({"path": t.path.display().to_string(), "bytes": t.len}))
                    .collect();
                let mut o = json!({
                    "ok": true,
                    "file": file.display().to_string(),
                    "format": format.name(),
                    "tensors": v.tensors,
                    "data_bytes": v.data_bytes,
                    "checksums": v.checksums,
                    "seconds": secs,
                });
                // Only when there are some: the key's absence is the usual, clean case.
                if !left.is_empty() {
                    o["leftover_temporaries"] = serde_json::Value::Array(left);
                }
                write_json(&mut std::io::stdout().lock(), &o).map_err(stdout_err)?;
            } else {
                let checks = if v.checksums == 0 {
                    format!("structure checked ({} has no checksums)", format.name())
                } else {
                    format!("{} matched", count_s(v.checksums, "checksum"))
                };
                ui.say(format!(
                    "{}: {GOOD}OK{GOOD:#} ({}): {}, {} of data, {checks} in {secs:.2} s",
                    file.display(),
                    format.name(),
                    count_s(v.tensors, "tensor"),
                    human_bytes(v.data_bytes),
                ))?;
                // Not the input's problem (it verified), so the exit status stays 0: disk
                // that a killed writer left, which nothing else would report.
                for t in &left {
                    super::print_warning(format!(
                        "{}: a temporary file a writer that was killed left ({}); the next save \
                         into this directory removes it, or remove it yourself",
                        t.path.display(),
                        human_bytes(t.len)
                    ));
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if as_json {
                let o = json!({
                    "ok": false,
                    "file": file.display().to_string(),
                    "error": e.to_string(),
                    "exit_code": super::exit_status(&e),
                });
                write_json(&mut std::io::stdout().lock(), &o).map_err(stdout_err)?;
            }
            Err(e)
        }
    }
}

/// The abandoned temporary files ([`paramdex::abandoned_temporaries`]) beside an input: in a
/// directory input, all of them; beside a file (or a checkpoint's prefix), those of outputs
/// named like it (`NAME`, `NAME.index`, `NAME.data-...` for `NAME` or `NAME.index`). None when
/// the directory cannot be listed (verify says nothing of what it did not check).
fn leftover_temporaries(input: &Path) -> Vec<paramdex::AbandonedTemporary> {
    if input.is_dir() {
        return paramdex::abandoned_temporaries(input).unwrap_or_default();
    }
    let Some(name) = input.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let stem = name.strip_suffix(".index").unwrap_or(name);
    let dir = match input.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let hidden = format!(".{stem}");
    paramdex::abandoned_temporaries(dir)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| {
            t.path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_prefix(&hidden))
                .is_some_and(|rest| rest.starts_with('.'))
        })
        .collect()
}

/// What an input is, with its article, for messages (`a TensorFlow checkpoint`).
fn a_format(f: Format) -> String {
    match f {
        Format::Native => "a paramdex file".into(),
        Format::TensorFlow => "a TensorFlow checkpoint".into(),
        Format::PaddleModel => "a Paddle model".into(),
        Format::PaddleTensor => "a Paddle tensor file".into(),
        Format::PaddleDir => "a directory of Paddle per-variable files".into(),
        Format::PaddleMerged => "a Paddle merged parameter file".into(),
        Format::Safetensors => "a safetensors file".into(),
        Format::Torch => "a torch.save file".into(),
        Format::PaddleDygraph => "a Paddle dygraph pickle (.pdparams / .pdopt)".into(),
        Format::TorchDcp => "a torch.distributed.checkpoint directory (.metadata + .distcp)".into(),
        Format::HuggingFaceSharded => "a Hugging Face sharded checkpoint (*.index.json)".into(),
        Format::Gguf => "a GGUF file".into(),
        other => format!("a {} input", other.name()),
    }
}

/// `recover TORN OUT`. Exit 0 when OUT was written; 1 when the input is not a paramdex file or
/// needs no recovery (nothing is written then); 3 when it holds no complete record.
pub fn recover(ui: Ui, torn: &Path, out: &Path) -> Result<ExitCode> {
    if let Some(e) = super::shards::explain_leftovers(ui, torn) {
        return Err(e);
    }
    let bar = Bar::new(ui, "recovering");
    let result = paramdex::recover_any_with(
        torn,
        out,
        &RecoverOptions {
            writer: WriterOptions::default(),
            progress: bar.visible().then_some(&bar as &dyn Progress),
        },
    );
    bar.finish();
    let (t, o) = (torn.display(), out.display());
    let rep = match result {
        Ok(Recovered::PreviousFile { len, discarded }) => {
            ui.say(format!(
                "{t} ends with an incomplete index ({discarded} bytes, an interrupted `meta \
                 --set`); restored the previous complete file ({}) into {o}",
                human_bytes(len),
            ))?;
            return Ok(ExitCode::SUCCESS);
        }
        Ok(Recovered::Intact { tensors }) => {
            super::print_error(format!(
                "{t} is a complete paramdex file ({tensors} tensors, every checksum matches): it \
                 needs no recovery, and {o} was not written"
            ));
            return Ok(ExitCode::from(super::EXIT_ERROR));
        }
        Ok(Recovered::Records(rep)) => rep,
        Ok(other) => {
            return Err(Error::Unsupported(format!(
                "recover: an outcome this paramdex cannot report: {other:?}"
            )))
        }
        // Not a paramdex file: say what it is, if it is another input paramdex reads.
        Err(e @ Error::UnrecognizedFormat { .. }) => {
            return match open_any(torn) {
                Ok(store) if store.format() != Format::Native => {
                    super::print_error(format!(
                        "{t} is {}, not a paramdex file: recover rebuilds paramdex files torn by \
                         a crash ({o} was not written); to check it, run `paramdex verify {t}`",
                        a_format(store.format())
                    ));
                    Ok(ExitCode::from(super::EXIT_ERROR))
                }
                _ => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let tail = if rep.discarded_bytes == 0 {
        "the input ends after its last complete record (nothing dropped)".to_string()
    } else {
        format!(
            "the torn tail starts at offset {} ({} bytes dropped)",
            rep.good_bytes, rep.discarded_bytes
        )
    };
    ui.say(format!(
        "recovered {} tensors ({} bytes of records) from {t} into {o}; {tail}",
        rep.recovered, rep.good_bytes,
    ))?;
    if rep.duplicates_skipped > 0 {
        ui.say(format!(
            "skipped {} records whose names were already recovered (the first of each is kept)",
            rep.duplicates_skipped
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
