//! A training run's checkpoints: a directory (or an object store's `s3://bucket/dir`) of step
//! directories, one checkpoint each (`step-60/`, `checkpoint-60/`, `60/`), as a job saving with
//! `torch.distributed.checkpoint` (through `paramdex.torch.dcp` or torch's own
//! `FileSystemWriter`) or Hugging Face's `Trainer` lays them out. [`list_run`] says which
//! steps are there, which of them are complete (and why the others are not), and which is the
//! latest complete one: the one rule `paramdex ckpt ROOT`, the Python `paramdex.list_run` and
//! `paramdex.torch.dcp.StorageReader.latest` share.
//!
//! Whether a step directory is complete is decided by the file its writer puts there last:
//!
//! | writer | complete when it holds | incomplete when it holds only |
//! |---|---|---|
//! | `paramdex.torch.dcp.StorageWriter` | `dcp.index`, whose metadata holds DCP's (key `dcp`) | pending shards `dcp.data-*.pending` |
//! | torch's `FileSystemWriter` | `.metadata` | `*.distcp` data files |
//! | a paramdex or TensorFlow checkpoint `PREFIX` | `PREFIX.index` | pending shards, `PREFIX.data-*` |
//! | Hugging Face `save_pretrained` | `model.safetensors` or `model.safetensors.index.json` | |
//!
//! A paramdex DCP index is opened (its header read) only for the steps looked at when the
//! latest complete one is chosen, from the highest step down: an index committed without DCP's
//! metadata (by a manual `merge-shards` of a save paramdex wrote before it carried that
//! metadata in its shards) cannot be loaded by DCP, so it is not complete.

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::native::{split_data_name, Sibling, INDEX_SUFFIX};

use super::location::{Listed, Location};

/// The prefix `paramdex.torch.dcp.StorageWriter` writes in a checkpoint directory.
pub const DCP_PREFIX: &str = "dcp";
/// The metadata key under which `paramdex.torch.dcp.StorageWriter` keeps DCP's metadata.
pub const DCP_METADATA_KEY: &str = "dcp";
/// The file torch's `FileSystemWriter` writes last in a checkpoint directory.
pub const TORCH_DCP_METADATA: &str = ".metadata";
/// Longest step number read from a directory name (digits).
const MAX_STEP_DIGITS: usize = 19;

/// What kind of checkpoint a step directory holds (or was being written).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RunCheckpointKind {
    /// A `paramdex.torch.dcp` checkpoint: the sharded checkpoint `DIR/dcp`.
    ParamdexDcp,
    /// A DCP checkpoint of torch's `FileSystemWriter` (`.metadata`, `*.distcp`).
    TorchDcp,
    /// A paramdex or TensorFlow checkpoint `DIR/PREFIX` (`PREFIX.index`) other than `dcp`.
    Native,
    /// Hugging Face safetensors weights (`model.safetensors`, or its sharded index).
    Safetensors,
    /// Nothing paramdex recognises.
    Unknown,
}

impl RunCheckpointKind {
    /// A short name, as the CLI's listing and JSON show it.
    pub fn name(self) -> &'static str {
        match self {
            RunCheckpointKind::ParamdexDcp => "paramdex-dcp",
            RunCheckpointKind::TorchDcp => "torch-dcp",
            RunCheckpointKind::Native => "paramdex",
            RunCheckpointKind::Safetensors => "safetensors",
            RunCheckpointKind::Unknown => "unknown",
        }
    }
}

/// One step directory of a run.
#[derive(Clone, Debug)]
pub struct RunCheckpoint {
    /// Its step (the number its name ends with).
    pub step: u64,
    /// Its directory's name (`step-60`).
    pub name: String,
    /// Its directory: a path, or for an object store a URL (`s3://bucket/run/step-60`).
    pub path: PathBuf,
    /// What it holds.
    pub kind: RunCheckpointKind,
    /// Whether it is complete (see the module's table).
    pub complete: bool,
    /// Why not, when it is not complete; the message names what to run, where that helps.
    pub why_not: Option<String>,
    /// Bytes of the files directly in it.
    pub bytes: u64,
    /// The latest modification time of those files, seconds since the Unix epoch.
    pub modified: Option<f64>,
}

/// The step directories of a run, by step (then name).
#[derive(Clone, Debug)]
pub struct RunListing {
    /// The run's directory, as given.
    pub dir: PathBuf,
    /// Its step directories.
    pub checkpoints: Vec<RunCheckpoint>,
    /// Index in `checkpoints` of the latest complete one.
    pub latest_complete: Option<usize>,
}

impl RunListing {
    /// The latest complete checkpoint: the highest step whose directory is complete.
    pub fn latest(&self) -> Option<&RunCheckpoint> {
        self.latest_complete.map(|i| &self.checkpoints[i])
    }
}

/// The step a directory name gives: its trailing decimal digits, after a prefix of ASCII
/// letters, `_` and `-` (or none): `step-60`, `step_60`, `checkpoint-60`, `global_step60`,
/// `ckpt-60` and `60` are step 60; `v2-final`, `60.bak`, `run-60a` are no steps.
pub fn run_step_of(name: &str) -> Option<u64> {
    let split = name.len() - name.bytes().rev().take_while(u8::is_ascii_digit).count();
    let (prefix, digits) = name.split_at(split);
    if digits.is_empty()
        || digits.len() > MAX_STEP_DIGITS
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'_' || b == b'-')
    {
        return None;
    }
    digits.parse().ok()
}

/// Lists the step directories of the run in `dir` (a local directory, or `s3://bucket/dir`
/// with the `s3` feature) and names the latest complete one (see the module doc for the rule).
/// Subdirectories whose names are no step ([`run_step_of`]) are left aside.
///
/// Errors: [`crate::Error::Io`] when a local `dir` cannot be listed (it does not exist);
/// [`crate::Error::Remote`] when the store refuses a listing; an index that cannot be opened
/// while the latest is chosen makes its step incomplete, not an error.
pub fn list_run(dir: impl AsRef<Path>) -> Result<RunListing> {
    let dir = dir.as_ref();
    let at = Location::new(dir)?;
    let mut checkpoints = Vec::new();
    for name in at.list_dirs()? {
        let Some(step) = run_step_of(&name) else {
            continue;
        };
        let path = at.child(&name);
        let files = Location::new(&path)?.list()?;
        checkpoints.push(classify(step, name, path, &files));
    }
    checkpoints.sort_by(|a, b| (a.step, &a.name).cmp(&(b.step, &b.name)));
    let mut latest_complete = None;
    for i in (0..checkpoints.len()).rev() {
        let c = &mut checkpoints[i];
        if !c.complete {
            continue;
        }
        if c.kind == RunCheckpointKind::ParamdexDcp {
            if let Some(why) = dcp_index_problem(&c.path, at.is_object()) {
                c.complete = false;
                c.why_not = Some(why);
                continue;
            }
        }
        latest_complete = Some(i);
        break;
    }
    Ok(RunListing {
        dir: at.display_path(),
        checkpoints,
        latest_complete,
    })
}

/// What a step directory holding `files` is (module table), from the names alone.
fn classify(step: u64, name: String, path: PathBuf, files: &[Listed]) -> RunCheckpoint {
    let has = |n: &str| files.iter().any(|f| f.name == n);
    let bytes = files.iter().map(|f| f.len).sum();
    let modified = files
        .iter()
        .filter_map(|f| f.modified)
        .max_by(f64::total_cmp);
    let dcp_index = format!("{DCP_PREFIX}{INDEX_SUFFIX}");
    let pending = |prefix: &str| {
        files
            .iter()
            .filter(|f| {
                matches!(
                    split_data_name(f.name.as_bytes()),
                    Some((p, Sibling::Data { pending: true, .. })) if p == prefix.as_bytes()
                )
            })
            .count()
    };
    let shown = path.display().to_string();
    let (kind, why_not) = if has(&dcp_index) {
        (RunCheckpointKind::ParamdexDcp, None)
    } else if has(TORCH_DCP_METADATA) {
        (RunCheckpointKind::TorchDcp, None)
    } else if files.iter().any(|f| f.name.ends_with(INDEX_SUFFIX)) {
        (RunCheckpointKind::Native, None)
    } else if has("model.safetensors") || has("model.safetensors.index.json") {
        (RunCheckpointKind::Safetensors, None)
    } else if pending(DCP_PREFIX) > 0 {
        let prefix = format!("{shown}/{DCP_PREFIX}");
        (
            RunCheckpointKind::ParamdexDcp,
            Some(format!(
                "the save was not committed: {} pending shard(s) and no {dcp_index}; \
                 `paramdex merge-shards {prefix}` commits it if all its shards are there, \
                 `paramdex clean-shards {prefix}` removes them",
                pending(DCP_PREFIX)
            )),
        )
    } else if files.iter().any(|f| f.name.ends_with(".distcp")) {
        (
            RunCheckpointKind::TorchDcp,
            Some(format!(
                "torch DCP data files without {TORCH_DCP_METADATA}: the save did not finish"
            )),
        )
    } else if files.iter().any(|f| f.name.ends_with(".pending")) {
        (
            RunCheckpointKind::Native,
            Some("pending shards and no index: the save was not committed".into()),
        )
    } else if files.is_empty() {
        (RunCheckpointKind::Unknown, Some("empty".into()))
    } else {
        (
            RunCheckpointKind::Unknown,
            Some(format!(
                "no checkpoint paramdex recognises in it ({} file(s))",
                files.len()
            )),
        )
    };
    RunCheckpoint {
        step,
        name,
        path,
        kind,
        complete: why_not.is_none(),
        why_not,
        bytes,
        modified,
    }
}

/// Why the paramdex DCP checkpoint in step directory `dir` cannot be loaded by DCP, if it
/// cannot: its index does not open, or holds no DCP metadata.
fn dcp_index_problem(dir: &Path, object: bool) -> Option<String> {
    let prefix = if object {
        PathBuf::from(format!("{}/{DCP_PREFIX}", dir.display()))
    } else {
        dir.join(DCP_PREFIX)
    };
    let store = match super::open_checkpoint(&prefix, object) {
        Ok(s) => s,
        Err(e) => return Some(format!("its index does not open: {e}")),
    };
    match store.metadata() {
        Ok(m) if m.get(DCP_METADATA_KEY).is_some() => None,
        Ok(_) => Some(format!(
            "its {DCP_PREFIX}{INDEX_SUFFIX} holds no DCP metadata (key {DCP_METADATA_KEY:?}): \
             committed without it, torch.distributed.checkpoint cannot load it"
        )),
        Err(e) => Some(format!("its metadata cannot be read: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_names() {
        for (n, s) in [
            ("step-60", 60),
            ("step_60", 60),
            ("checkpoint-60", 60),
            ("global_step60", 60),
            ("ckpt-0060", 60),
            ("60", 60),
            ("step-0", 0),
        ] {
            assert_eq!(run_step_of(n), Some(s), "{n}");
        }
        for n in [
            "",
            "step-",
            "v2-final",
            "60.bak",
            "run-60a",
            "step 60",
            "a/60",
            "99999999999999999999",
        ] {
            assert_eq!(run_step_of(n), None, "{n}");
        }
    }
}
