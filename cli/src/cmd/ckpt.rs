//! `ckpt DIR [--json]`: the checkpoints of a training directory (local, or `s3://bucket/dir`);
//! `ckpt DIR --prune POLICY [--dry-run]`: applies a keep policy. A directory holding no
//! `NAME-STEP` checkpoints but step directories (`step-60/`, a DCP run) is listed as a run
//! (`paramdex::interop::list_run`): each step, complete or why not, the latest complete one.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use paramdex::interop::{BestBy, CheckpointManager, KeepPolicy, ManagerOptions, RunListing};
use paramdex::{Error, Result};
use serde_json::{json, Value};

use super::output::write_json;
use super::style::{DIM, GOOD, HEAD};
use super::{human_bytes, stdout_err, Ui};

/// The policy flags of `ckpt --prune`.
pub struct PolicyArgs<'a> {
    pub last: Option<usize>,
    pub every_steps: Option<u64>,
    pub every: Option<&'a str>,
    pub best: Option<&'a str>,
    pub lower_is_better: bool,
}

/// A duration as `90s`, `30m`, `2h`, `1d` (a number with a unit).
fn parse_duration(s: &str) -> Result<Duration> {
    let bad = || {
        Error::InvalidArgument(format!(
            "--keep-every {s:?}: a number and a unit, as 90s, 30m, 2h or 1d"
        ))
    };
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86400.0,
        _ => return Err(bad()),
    };
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(bad)
}

fn policy(p: &PolicyArgs<'_>) -> Result<KeepPolicy> {
    let best = match p.best {
        None => None,
        Some(b) => {
            let (key, count) = b.rsplit_once('=').ok_or_else(|| {
                Error::InvalidArgument(format!("--keep-best {b:?}: KEY=COUNT, as acc=3"))
            })?;
            let count = count.parse().map_err(|_| {
                Error::InvalidArgument(format!("--keep-best {b:?}: COUNT is not a number"))
            })?;
            Some(BestBy {
                key: key.to_string(),
                count,
                higher_is_better: !p.lower_is_better,
            })
        }
    };
    let policy = KeepPolicy {
        last: p.last,
        every_steps: p.every_steps.filter(|k| *k > 0),
        every_duration: p.every.map(parse_duration).transpose()?,
        best,
    };
    if policy.is_empty() {
        return Err(Error::InvalidArgument(
            "--prune needs a policy: --keep-last, --keep-every-steps, --keep-every or --keep-best"
                .into(),
        ));
    }
    Ok(policy)
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of seconds since the Unix epoch.
fn utc(ts: f64) -> String {
    let secs = ts.floor() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// What the METADATA column shows for a checkpoint without paramdex metadata: what it is (a
/// TensorFlow checkpoint has none), or that it cannot be read and what says why.
fn no_metadata(prefix: &Path) -> String {
    match paramdex::interop::open_any(prefix) {
        Ok(s) => format!("({})", s.format().name()),
        Err(_) => format!(
            "(unreadable: paramdex verify {} says why)",
            prefix.display()
        ),
    }
}

pub fn ckpt(
    ui: Ui,
    dir: &Path,
    name: Option<&str>,
    prune: Option<PolicyArgs<'_>>,
    dry_run: bool,
    as_json: bool,
) -> Result<ExitCode> {
    // Listing and pruning never create the directory (a URL's prefix needs no check).
    let mut opts = ManagerOptions {
        create: false,
        ..ManagerOptions::default()
    };
    if let Some(n) = name {
        opts.name = n.to_string();
    }
    let m = CheckpointManager::open(dir, opts)?;
    let mut out = super::stdout_for(as_json);
    if let Some(p) = prune {
        let rep = m.prune(&policy(&p)?, dry_run)?;
        if as_json {
            let v = json!({
                "dir": dir.display().to_string(),
                "dry_run": dry_run,
                "deleted": rep.deleted,
                "kept": rep.kept,
                "bytes": rep.bytes,
            });
            write_json(&mut out, &v).map_err(stdout_err)?;
        } else {
            let verb = if dry_run { "would delete" } else { "deleted" };
            for s in &rep.deleted {
                writeln!(out, "{verb} step {s} ({})", m.prefix(*s).display())
                    .map_err(stdout_err)?;
            }
            out.flush().map_err(stdout_err)?;
            ui.say(format!(
                "{verb} {} checkpoint(s), {}; kept {}: {}",
                rep.deleted.len(),
                human_bytes(rep.bytes),
                rep.kept.len(),
                rep.kept
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ))?;
        }
        out.flush().map_err(stdout_err)?;
        return Ok(ExitCode::SUCCESS);
    }
    let all = m.list()?;
    if all.is_empty() {
        // No NAME-STEP checkpoints: a run of step directories (`step-60/`), perhaps.
        let run = paramdex::interop::list_run(dir)?;
        if !run.checkpoints.is_empty() {
            return run_listing(ui, &run, as_json);
        }
    }
    let latest = m.latest().ok().map(|c| c.step);
    if as_json {
        let list: Vec<Value> = all
            .iter()
            .map(|c| {
                json!({
                    "step": c.step,
                    "prefix": c.prefix.display().to_string(),
                    "bytes": c.bytes,
                    "timestamp": c.timestamp,
                    "latest": Some(c.step) == latest,
                    "metadata": c.metadata.as_ref().map(|m| m.to_json()),
                })
            })
            .collect();
        let v = json!({
            "dir": dir.display().to_string(),
            "latest": latest,
            "checkpoints": list,
        });
        write_json(&mut out, &v).map_err(stdout_err)?;
    } else if all.is_empty() {
        writeln!(out, "{DIM}no checkpoints in {}{DIM:#}", dir.display()).map_err(stdout_err)?;
    } else {
        let sw = all
            .iter()
            .map(|c| c.step.to_string().len())
            .max()
            .unwrap_or(0)
            .max(4);
        writeln!(
            out,
            "{HEAD}  {:>sw$}  {:>10}  {:<19}  METADATA{HEAD:#}",
            "STEP", "SIZE", "SAVED (UTC)"
        )
        .map_err(stdout_err)?;
        for c in &all {
            let md = c
                .metadata
                .as_ref()
                .map(|m| {
                    m.iter()
                        .map(|(k, v)| format!("{k}={}", v.to_text().replace('\n', "\\n")))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|| no_metadata(&c.prefix));
            let mark = if Some(c.step) == latest { "*" } else { " " };
            let saved = c.timestamp.map(utc).unwrap_or_else(|| "-".into());
            write!(
                out,
                "{mark} {:>sw$}  {:>10}  {saved:<19}  {md}",
                c.step,
                human_bytes(c.bytes)
            )
            .map_err(stdout_err)?;
            if mark == "*" {
                write!(out, "  {GOOD}(latest){GOOD:#}").map_err(stdout_err)?;
            }
            writeln!(out).map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(ExitCode::SUCCESS)
}

/// `ckpt ROOT` of a run of step directories: each step, complete or why not, the latest
/// complete one marked `*` (the rule of `paramdex::interop::list_run`).
fn run_listing(ui: Ui, run: &RunListing, as_json: bool) -> Result<ExitCode> {
    let mut out = super::stdout_for(as_json);
    let latest = run.latest();
    if as_json {
        let list: Vec<Value> = run
            .checkpoints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                json!({
                    "step": c.step,
                    "name": c.name,
                    "path": c.path.display().to_string(),
                    "format": c.kind.name(),
                    "complete": c.complete,
                    "why_not": c.why_not,
                    "bytes": c.bytes,
                    "timestamp": c.modified,
                    "latest": Some(i) == run.latest_complete,
                })
            })
            .collect();
        let v = json!({
            "dir": run.dir.display().to_string(),
            "latest": latest.map(|c| c.step),
            "latest_path": latest.map(|c| c.path.display().to_string()),
            "checkpoints": list,
        });
        write_json(&mut out, &v).map_err(stdout_err)?;
        out.flush().map_err(stdout_err)?;
        return Ok(ExitCode::SUCCESS);
    }
    let sw = run
        .checkpoints
        .iter()
        .map(|c| c.step.to_string().len())
        .max()
        .unwrap_or(0)
        .max(4);
    let nw = run
        .checkpoints
        .iter()
        .map(|c| c.name.len())
        .max()
        .unwrap_or(0)
        .max(9);
    writeln!(
        out,
        "{HEAD}  {:>sw$}  {:<nw$}  {:<12}  {:>10}  {:<19}  STATE{HEAD:#}",
        "STEP", "DIRECTORY", "FORMAT", "SIZE", "SAVED (UTC)"
    )
    .map_err(stdout_err)?;
    for (i, c) in run.checkpoints.iter().enumerate() {
        let is_latest = Some(i) == run.latest_complete;
        let mark = if is_latest { "*" } else { " " };
        let saved = c.modified.map(utc).unwrap_or_else(|| "-".into());
        write!(
            out,
            "{mark} {:>sw$}  {:<nw$}  {:<12}  {:>10}  {saved:<19}  ",
            c.step,
            c.name,
            c.kind.name(),
            human_bytes(c.bytes)
        )
        .map_err(stdout_err)?;
        match &c.why_not {
            None if is_latest => write!(out, "complete  {GOOD}(latest){GOOD:#}"),
            None => write!(out, "complete"),
            Some(w) => write!(out, "{DIM}incomplete: {w}{DIM:#}"),
        }
        .map_err(stdout_err)?;
        writeln!(out).map_err(stdout_err)?;
    }
    out.flush().map_err(stdout_err)?;
    match latest {
        Some(c) => ui.say(format!(
            "{} step directories; the latest complete checkpoint is step {} ({})",
            run.checkpoints.len(),
            c.step,
            c.path.display()
        ))?,
        None => ui.say(format!(
            "{} step directories, none complete",
            run.checkpoints.len()
        ))?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_durations() {
        assert_eq!(utc(0.0), "1970-01-01 00:00:00");
        assert_eq!(utc(1_763_900_000.9), "2025-11-23 12:13:20");
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5400));
        for bad in ["", "5", "h", "5x", "0m", "-1h"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
