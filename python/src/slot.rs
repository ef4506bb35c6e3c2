//! [`WriterSlot`]: a writer that a Python object holds until `finish` or `abort` takes it out,
//! shared by the native file writer (`write.rs`) and the shard writer (`shards.rs`), which
//! differ only in what they hold.

use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;

use crate::OrPy;

/// A writer held behind a lock (Python may call from several threads), empty once finished or
/// abandoned: every later call is then a `ValueError` naming what was written where.
pub(crate) struct WriterSlot<W> {
    inner: Mutex<Option<W>>,
    /// What the writer is, for messages ("writer", "shard writer").
    what: &'static str,
    /// Where it writes (a path or a URL), for messages.
    at: String,
}

impl<W> WriterSlot<W> {
    /// `writer`, called `what`, writing `at`.
    pub(crate) fn new(writer: W, what: &'static str, at: String) -> WriterSlot<W> {
        WriterSlot {
            inner: Mutex::new(Some(writer)),
            what,
            at,
        }
    }

    fn lock(&self) -> PyResult<MutexGuard<'_, Option<W>>> {
        self.inner
            .lock()
            .map_err(|_| PyRuntimeError::new_err("writer lock poisoned"))
    }

    fn closed(&self) -> PyErr {
        PyValueError::new_err(format!("the {} of {} is closed", self.what, self.at))
    }

    /// Runs `f` on the writer; a `ValueError` once it is finished or abandoned.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut W) -> paramdex::Result<T>) -> PyResult<T> {
        let mut g = self.lock()?;
        let w = g.as_mut().ok_or_else(|| self.closed())?;
        f(w).py()
    }

    /// Takes the writer out to finish it; a `ValueError` once it is finished or abandoned.
    pub(crate) fn take(&self) -> PyResult<W> {
        self.lock()?.take().ok_or_else(|| self.closed())
    }

    /// Drops the writer (which abandons what it wrote), if it is still held.
    pub(crate) fn abandon(&self) -> PyResult<()> {
        let w = self.lock()?.take();
        drop(w);
        Ok(())
    }

    /// `f` of the writer, or `none` once it is finished or abandoned.
    pub(crate) fn peek<T>(&self, none: T, f: impl FnOnce(&W) -> T) -> PyResult<T> {
        Ok(self.lock()?.as_ref().map_or(none, f))
    }
}
