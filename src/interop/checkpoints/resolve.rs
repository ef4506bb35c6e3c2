//! Inputs that name a managed checkpoint directory rather than a file: `DIR` (its latest
//! checkpoint, by its `checkpoint` state file) or `DIR@STEP`, locally ([`resolve_input`]) or in
//! an object store ([`resolve_url_input`]), resolved to the checkpoint's `.index` for the
//! format openers. Its own file because it is the readers' entry to the manager, used by
//! `open_any` (for paths and URLs), not by the manager itself.

use std::path::{Path, PathBuf};

use crate::error::{CheckpointProblem, Error, Result};
use crate::native::index_path;

use super::{
    step_of, CheckpointInfo, CheckpointManager, CheckpointState, ManagerOptions, STATE_FILE,
};

/// The index file an input names when it is a managed checkpoint directory: `DIR` with a
/// `checkpoint` state file naming a checkpoint (its latest), or `DIR@STEP` (the checkpoint of
/// that step in `DIR`). `Ok(None)` for anything else.
pub(crate) fn resolve_input(path: &Path) -> Result<Option<PathBuf>> {
    if path.is_dir() {
        // A `checkpoint` file that is not a state file, or names nothing that exists, is left
        // to the formats' own detection (which says what is missing).
        let named = CheckpointState::read(path)
            .ok()
            .flatten()
            .is_some_and(|st| {
                Path::new(&st.model_checkpoint_path)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(step_of)
                    .is_some()
            });
        if !named {
            return Ok(None);
        }
        let m = CheckpointManager::open(path, ManagerOptions::default())?;
        // Only the checkpoint the pointer names: one naming a missing checkpoint is left to the
        // TensorFlow detector, which says so (the manager's fallback to the highest step is for
        // saving, not for reading what the user named).
        return Ok(m
            .latest()
            .ok()
            .filter(|c| c.latest)
            .map(|c| index_path(&c.prefix)));
    }
    if path.exists() {
        return Ok(None);
    }
    let Some((dir, step)) = path.to_str().and_then(|s| s.rsplit_once('@')) else {
        return Ok(None);
    };
    let (dir, Ok(step)) = (Path::new(dir), step.parse::<u64>()) else {
        return Ok(None);
    };
    if !dir.is_dir() {
        return Ok(None);
    }
    let m = CheckpointManager::open(dir, ManagerOptions::default())?;
    Ok(Some(index_path(&m.find(step)?.prefix)))
}

/// The `.index` URL an object-store URL names when it is a managed checkpoint directory, asked
/// once the URL names no object nor checkpoint prefix: `s3://bucket/dir` with a `checkpoint`
/// state object naming a checkpoint (its latest), or `s3://bucket/dir@STEP` (the checkpoint of
/// that step there). `Ok(None)` for anything else.
pub(crate) fn resolve_url_input(url: &str) -> Result<Option<String>> {
    let at_step = url
        .rsplit_once('@')
        .filter(|(dir, d)| {
            !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()) && crate::remote::is_url(dir)
        })
        .and_then(|(dir, d)| Some((dir, d.parse::<u64>().ok()?)));
    let index_url = |c: &CheckpointInfo| index_path(&c.prefix).to_string_lossy().into_owned();
    if let Some((dir, step)) = at_step {
        let m = CheckpointManager::open(dir, ManagerOptions::default())?;
        let c =
            m.d.list_with(false)?
                .into_iter()
                .find(|c| c.step == step)
                .ok_or_else(|| m.d.problem(CheckpointProblem::NoSuchStep, step))?;
        return Ok(Some(index_url(&c)));
    }
    let m = CheckpointManager::open(url, ManagerOptions::default())?;
    let Some(st) = m.d.at.read_state()? else {
        return Ok(None);
    };
    let all = m.d.list_from(Some(st.clone()), false)?;
    // A state naming a checkpoint without a step (TensorFlow 1's `model.ckpt`): its prefix in
    // the directory, as a local directory's TensorFlow detector reads it.
    let named = Path::new(&st.model_checkpoint_path)
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|n| step_of(n).is_none())
        .map(|n| format!("{n}.index"));
    match all.iter().find(|c| c.latest) {
        Some(c) => Ok(Some(index_url(c))),
        None if named.as_deref().map(|n| m.d.at.exists(n)).transpose()? == Some(true) => {
            Ok(named.map(|n| format!("{}/{n}", url.trim_end_matches('/'))))
        }
        None => Err(Error::Checkpoint {
            dir: m.d.dir.display().to_string(),
            problem: CheckpointProblem::NoSuchStep,
            detail: format!(
                "its `{STATE_FILE}` object names {:?} as the latest checkpoint, which does not \
                 exist (no {:?}.index object in the directory)",
                st.model_checkpoint_path, st.model_checkpoint_path
            ),
        }),
    }
}
