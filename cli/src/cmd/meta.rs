//! `meta FILE [--set KEY=VALUE] [--set-str KEY=VALUE] [--unset KEY] [--json]`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use paramdex::interop::open_any;
use paramdex::{Error, MetaValue, Result};

use super::output::{a_format, count, write_json};
use super::style::{DIM, DTYPE, HEAD};
use super::{human_bytes, stdout_err, Ui};

/// Longest string shown whole in the table (the JSON form is always whole).
const SHOW_MAX: usize = 120;

fn split(assign: &str) -> Result<(&str, &str)> {
    assign
        .split_once('=')
        .ok_or_else(|| Error::InvalidArgument(format!("{assign:?} is not KEY=VALUE")))
}

pub fn meta(
    ui: Ui,
    file: &Path,
    set: &[String],
    set_str: &[String],
    unset: &[String],
    as_json: bool,
) -> Result<ExitCode> {
    let store = open_any(file)?;
    let mut md = store.metadata()?;
    let changing = !(set.is_empty() && set_str.is_empty() && unset.is_empty());
    if changing {
        if store.as_native().is_some_and(|r| r.as_bytes().is_none()) {
            // A native file read by ranges (in a bucket): its index is rewritten in place,
            // which an object cannot be.
            return Err(Error::Unsupported(format!(
                "{}: `meta --set` rewrites a local file's index in place; copy the object to a \
                 file first",
                file.display()
            )));
        }
        if store.as_native().is_none() {
            return Err(Error::Unsupported(format!(
                "{} is {}; `meta --set` changes native paramdex files only (convert it first: paramdex convert {} OUT.pdx)",
                file.display(),
                a_format(store.format()),
                file.display()
            )));
        }
        for a in set {
            let (k, v) = split(a)?;
            md.insert(
                k,
                MetaValue::parse(v).map_err(|e| {
                    Error::InvalidArgument(format!(
                        "--set {a}: {e}; use --set-str for a plain string"
                    ))
                })?,
            )?;
        }
        for a in set_str {
            let (k, v) = split(a)?;
            md.insert(k, MetaValue::String(v.to_string()))?;
        }
        for k in unset {
            if md.remove(k).is_none() {
                ui.note(format!("--unset {k}: no such key"));
            }
        }
        drop(store); // release the mapping before appending
        let rep = paramdex::rewrite_in_place(file, &md, true)?;
        ui.say(format!(
            "updated {}: {}; appended a {} index (records untouched), {} dead bytes",
            file.display(),
            count(md.len() as u64, "metadata entry", Some("metadata entries")),
            human_bytes(rep.index_len),
            human_bytes(rep.dead_bytes)
        ))?;
        if !as_json {
            return Ok(ExitCode::SUCCESS);
        }
    }
    let mut out = super::stdout_for(as_json);
    if as_json {
        write_json(&mut out, &md.to_json()).map_err(stdout_err)?;
    } else if md.is_empty() {
        writeln!(out, "{DIM}no metadata ({}){DIM:#}", store_name(file)).map_err(stdout_err)?;
    } else {
        let kw = md
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0)
            .max(3);
        writeln!(out, "{HEAD}{:<kw$}  {:<6}  VALUE{HEAD:#}", "KEY", "TYPE").map_err(stdout_err)?;
        for (k, v) in md.iter() {
            let mut text = v.to_text().replace('\n', "\\n");
            if text.chars().count() > SHOW_MAX {
                let len = text.len();
                text = text.chars().take(SHOW_MAX).collect::<String>()
                    + &format!("... ({len} bytes; --json shows all)");
            }
            writeln!(
                out,
                "{k:<kw$}  {DTYPE}{:<6}{DTYPE:#}  {text}",
                v.type_name()
            )
            .map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(ExitCode::SUCCESS)
}

fn store_name(file: &Path) -> String {
    file.display().to_string()
}
