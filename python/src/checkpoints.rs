//! `CheckpointManager` for Python: [`PyCheckpointManager`] wraps the library's
//! [`CheckpointManager`] (saves from arrays, background saves, restore as a [`Store`],
//! pruning), and [`keep_policy`] builds its [`KeepPolicy`] from the Python keyword arguments.
//! Its own file because the manager's surface is apart from reading stores and writing
//! single files (`lib.rs`, `write.rs`). Every call that saves, waits or prunes releases the GIL.

use std::sync::{Arc, Mutex};

use paramdex::interop::{BestBy, CheckpointManager, KeepPolicy, Layout, ManagerOptions};
use paramdex::WriterOptions;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{metadata_from_py, prepare_values, py_err, OrPy, PyTensorArgs, Store, Value};

/// A directory of numbered checkpoints ([`CheckpointManager`]).
#[pyclass(frozen, name = "CheckpointManager", module = "paramdex._paramdex")]
pub(crate) struct PyCheckpointManager {
    inner: Mutex<CheckpointManager>,
}

impl PyCheckpointManager {
    fn lock(&self) -> PyResult<std::sync::MutexGuard<'_, CheckpointManager>> {
        self.inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("checkpoint manager lock poisoned"))
    }
}

#[pymethods]
impl PyCheckpointManager {
    /// Opens (creating it if needed) the checkpoint directory `directory`.
    #[new]
    // The keyword arguments of the Python constructor, one each.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (directory, name = "ckpt".to_string(), keep_last = None, shards = None, incremental = false, max_in_flight = 1, sync = true, keep_every_steps = None, keep_every = None, keep_best = None, compress = None))]
    fn py_new(
        py: Python<'_>,
        directory: String,
        name: String,
        keep_last: Option<usize>,
        shards: Option<u32>,
        incremental: bool,
        max_in_flight: usize,
        sync: bool,
        keep_every_steps: Option<u64>,
        keep_every: Option<f64>,
        keep_best: Option<(String, usize, bool)>,
        compress: Option<&str>,
    ) -> PyResult<PyCheckpointManager> {
        let opts = ManagerOptions {
            name,
            layout: match shards {
                None => Layout::Single,
                Some(shards) => Layout::Sharded {
                    shards,
                    incremental,
                },
            },
            keep: keep_policy(keep_last, keep_every_steps, keep_every, keep_best)?,
            max_in_flight,
            writer: WriterOptions {
                sync,
                data_compression: crate::write::data_compression(compress)?,
                ..WriterOptions::default()
            },
            ..ManagerOptions::default()
        };
        let m = py
            .detach(|| CheckpointManager::open(&directory, opts))
            .py()?;
        Ok(PyCheckpointManager {
            inner: Mutex::new(m),
        })
    }

    /// Saves the tensors ((name, dtype, shape, array) tuples) as `step`, on this thread.
    #[pyo3(signature = (step, tensors, metadata = None))]
    fn save(
        &self,
        py: Python<'_>,
        step: u64,
        tensors: Vec<PyTensorArgs<'_>>,
        metadata: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<()> {
        let items = prepare_values(tensors)?;
        let meta = metadata_from_py(metadata)?;
        py.detach(|| {
            self.lock()?
                .save(step, items.iter().map(Value::tensor), meta)
                .map_err(py_err)
        })
    }

    /// Copies the tensors and returns; a background thread saves them as `step`. Returns the
    /// seconds spent blocked waiting for a slot and copying.
    #[pyo3(signature = (step, tensors, metadata = None))]
    fn save_async(
        &self,
        py: Python<'_>,
        step: u64,
        tensors: Vec<PyTensorArgs<'_>>,
        metadata: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<(f64, f64)> {
        let items = prepare_values(tensors)?;
        let meta = metadata_from_py(metadata)?;
        let r = py.detach(|| {
            self.lock()?
                .save_async(step, items.iter().map(Value::tensor), meta)
                .map_err(py_err)
        })?;
        Ok((r.blocked.as_secs_f64(), r.captured.as_secs_f64()))
    }

    /// Waits for every background save; raises the first failure not yet reported.
    fn wait(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.lock()?.wait().map_err(py_err))
    }

    /// The steps saved, ascending.
    fn steps(&self, py: Python<'_>) -> PyResult<Vec<u64>> {
        py.detach(|| self.lock()?.steps().map_err(py_err))
    }

    /// The latest step.
    fn latest(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.lock()?.latest().map_err(py_err).map(|c| c.step))
    }

    /// The store of checkpoint `step` (the latest when None).
    #[pyo3(signature = (step = None))]
    fn restore(&self, py: Python<'_>, step: Option<u64>) -> PyResult<Store> {
        py.detach(|| {
            let m = self.lock()?;
            let (step, s) = match step {
                Some(k) => m.restore(k).map(|s| (k, s)),
                None => m.restore_latest(),
            }
            .map_err(py_err)?;
            Ok(Store::new(
                Arc::from(s),
                m.prefix(step).to_string_lossy().into_owned(),
            ))
        })
    }

    /// Applies a keep policy now: the one given (any of the rules), or the manager's own when
    /// none is given. Never deletes the latest checkpoint or one being written. Returns
    /// (deleted steps, kept steps, bytes of the deleted files); `dry_run` deletes nothing.
    #[pyo3(signature = (keep_last = None, keep_every_steps = None, keep_every = None, keep_best = None, dry_run = false))]
    fn prune(
        &self,
        py: Python<'_>,
        keep_last: Option<usize>,
        keep_every_steps: Option<u64>,
        keep_every: Option<f64>,
        keep_best: Option<(String, usize, bool)>,
        dry_run: bool,
    ) -> PyResult<(Vec<u64>, Vec<u64>, u64)> {
        let given = keep_policy(keep_last, keep_every_steps, keep_every, keep_best)?;
        py.detach(|| {
            let m = self.lock()?;
            let policy = if given.is_empty() {
                m.options().keep.clone()
            } else {
                given
            };
            if policy.is_empty() {
                return Err(PyValueError::new_err(
                    "prune needs a policy: keep_last, keep_every_steps, keep_every or keep_best \
                     (here or when the manager was made)",
                ));
            }
            let r = m.prune(&policy, dry_run).map_err(py_err)?;
            Ok((r.deleted, r.kept, r.bytes))
        })
    }

    /// The directory.
    #[getter]
    fn directory(&self) -> PyResult<String> {
        Ok(self.lock()?.dir().to_string_lossy().into_owned())
    }
}

/// The [`KeepPolicy`] of the Python keyword arguments (`keep_every` in seconds; `keep_best` as
/// (metadata key, count, higher is better)). Zero steps or a span that is not a positive
/// number of seconds is a `ValueError`, not a rule that keeps nothing.
fn keep_policy(
    last: Option<usize>,
    every_steps: Option<u64>,
    every: Option<f64>,
    best: Option<(String, usize, bool)>,
) -> PyResult<KeepPolicy> {
    if every_steps == Some(0) {
        return Err(PyValueError::new_err(
            "keep_every_steps must be a positive number of steps",
        ));
    }
    let every_duration = match every {
        None => None,
        Some(secs) => Some(
            std::time::Duration::try_from_secs_f64(secs)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    PyValueError::new_err(format!(
                        "keep_every must be a positive number of seconds or a timedelta, not {secs}"
                    ))
                })?,
        ),
    };
    Ok(KeepPolicy {
        last,
        every_steps,
        every_duration,
        best: best.map(|(key, count, higher_is_better)| BestBy {
            key,
            count,
            higher_is_better,
        }),
    })
}
