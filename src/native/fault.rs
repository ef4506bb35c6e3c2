//! The file-system seam of a save: every operation a save does to a local directory (create a
//! temporary, write it, fsync it, fsync the directory, hard-link, rename, unlink) asks
//! [`check`] first. In a release or ordinary build `check` is an empty inline function (the
//! seam costs nothing); in the crate's own unit tests it consults a fault plan, which fails one
//! operation, or every operation from one on (a process that died there: the disk stays as it
//! is and nothing is cleaned up), under one directory. The crash-point tests of the checkpoint
//! manager (`interop/checkpoints/crash_points.rs`) enumerate the operations of a save with it:
//! the `j`-th operation of each kind, so that each kind is hit whatever order the threads of a
//! sharded save interleave their operations in.
//!
//! A temporary file's writes count as one operation per file (the last one, before its final
//! flush): whichever write fails, what is left is the same, a partial temporary.

#[cfg(not(test))]
use std::io;
#[cfg(not(test))]
use std::path::Path;

/// One file-system operation of a save.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Op {
    /// Creating a temporary file.
    Create,
    /// Writing a file's last bytes.
    Write,
    /// `fsync` of a file.
    SyncFile,
    /// `fsync` of a directory.
    SyncDir,
    /// Creating a hard link.
    Link,
    /// Renaming a file.
    Rename,
    /// Removing a file.
    Unlink,
}

/// Whether `op` on `path` may run: always, outside the crate's unit tests.
#[cfg(not(test))]
#[inline(always)]
pub(crate) fn check(_op: Op, _path: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
pub(crate) use plan::{check, install, Mode};

#[cfg(test)]
mod plan {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex, MutexGuard};

    use super::Op;

    /// What happens at the planned operation.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(crate) enum Mode {
        /// Only that operation fails (an I/O error the process survives).
        Fail,
        /// That operation and every later one under the directory fail, cleanup included: the
        /// process died there, leaving the disk as it was.
        Stop,
    }

    /// The operations seen under one directory, and the one to fail.
    #[derive(Debug)]
    pub(crate) struct Plan {
        dir: PathBuf,
        fail_at: Option<(Op, usize)>,
        mode: Mode,
        seen: Mutex<Vec<(Op, PathBuf)>>,
        dead: Mutex<bool>,
    }

    static PLANS: Mutex<Vec<Arc<Plan>>> = Mutex::new(Vec::new());
    /// How many plans are installed: the check of a path outside them takes no lock.
    static INSTALLED: AtomicUsize = AtomicUsize::new(0);

    fn plans() -> MutexGuard<'static, Vec<Arc<Plan>>> {
        PLANS.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs a plan over `dir` (until the guard is dropped): `fail_at`, `(op, j)`, the
    /// `j`-th operation `op` (from 0, in the order they happen; `None`: none, a dry run that
    /// counts) fails as `mode` says.
    pub(crate) fn install(dir: &Path, fail_at: Option<(Op, usize)>, mode: Mode) -> Installed {
        let plan = Arc::new(Plan {
            dir: dir.to_path_buf(),
            fail_at,
            mode,
            seen: Mutex::new(Vec::new()),
            dead: Mutex::new(false),
        });
        plans().push(plan.clone());
        INSTALLED.fetch_add(1, Ordering::SeqCst);
        Installed(plan)
    }

    /// An installed plan; dropping it uninstalls it.
    #[derive(Debug)]
    pub(crate) struct Installed(Arc<Plan>);

    impl Installed {
        /// The operations seen so far, in order (the failed ones included).
        pub(crate) fn seen(&self) -> Vec<(Op, PathBuf)> {
            self.0
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
        }

        /// The planned operation, once it was reached (its path).
        pub(crate) fn fired(&self) -> Option<PathBuf> {
            let (op, j) = self.0.fail_at?;
            let seen = self.0.seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.iter()
                .filter(|(o, _)| *o == op)
                .nth(j)
                .map(|(_, p)| p.clone())
        }
    }

    impl Drop for Installed {
        fn drop(&mut self) {
            plans().retain(|p| !Arc::ptr_eq(p, &self.0));
            INSTALLED.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn injected(op: Op, path: &Path, k: usize) -> io::Error {
        io::Error::other(format!(
            "injected failure of operation {k} ({op:?} {})",
            path.display()
        ))
    }

    /// Counts `op` on `path` in the plan covering it, failing it when planned.
    pub(crate) fn check(op: Op, path: &Path) -> io::Result<()> {
        if INSTALLED.load(Ordering::SeqCst) == 0 {
            return Ok(());
        }
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let Some(plan) = plans().iter().find(|p| abs.starts_with(&p.dir)).cloned() else {
            return Ok(());
        };
        let mut dead = plan.dead.lock().unwrap_or_else(|e| e.into_inner());
        let mut seen = plan.seen.lock().unwrap_or_else(|e| e.into_inner());
        let k = seen.len();
        let j = seen.iter().filter(|(o, _)| *o == op).count();
        seen.push((op, abs));
        if *dead {
            return Err(injected(op, path, k));
        }
        if plan.fail_at == Some((op, j)) {
            if plan.mode == Mode::Stop {
                *dead = true;
            }
            return Err(injected(op, path, k));
        }
        Ok(())
    }
}
