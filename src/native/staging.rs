//! Staged outputs: temporary files and directories beside the path they will be renamed to.
//!
//! Every output paramdex writes (native files, TensorFlow bundles, Paddle files and
//! directories, safetensors, `recover`, [`write_atomically`]) is built under a temporary name
//! in the destination's own directory (so the final `rename` stays on one file system and is
//! atomic) and renamed into place only when complete. This module is the one place that
//! creates those temporaries, so they all get the same name shape (`.<target name>.<random>
//! <suffix>`), the same permissions, and the same rules:
//!
//! - **Missing parent directories** of the target are created. If the output is never
//!   committed (an error, an interruption), the directories created for it are removed again
//!   when they are empty.
//! - **A process-wide registry** knows every staged item that is neither committed nor
//!   dropped. A [`Staged`] item registers when it is created (while the registry is locked, so
//!   there is no moment when it exists unregistered), unregisters and removes itself when it is
//!   dropped, and unregisters when it is committed.
//! - **Commit** (the rename into the final name) happens while holding the registry lock and
//!   is refused once [`remove_staged`] has run. So a cleanup driven by a signal and a commit
//!   never interleave: the final path is either untouched or complete.
//!
//! [`remove_staged`] is the public door for programs that handle signals; [`write_atomically`]
//! writes one file through the same mechanism.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use crate::error::{Error, IoContext, Result};
use crate::native::fault::{self, Op};

/// The directory that holds `path`: its parent, or `.` for a bare file name.
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Everything staged and not yet committed or dropped, in this process.
static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    closed: false,
    next_id: 0,
    items: Vec::new(),
    dirs: Vec::new(),
});

struct Registry {
    /// Set by [`remove_staged`]: nothing may be staged or committed afterwards.
    closed: bool,
    next_id: u64,
    /// Live staged items, in creation order.
    items: Vec<Item>,
    /// Directories created for outputs that are not committed yet (absolute), each after its
    /// parent.
    dirs: Vec<PathBuf>,
}

/// One staged file or directory.
struct Item {
    id: u64,
    /// Where it is, absolute (the working directory may change before it is removed).
    abs: PathBuf,
    /// Where it is, as the caller named the target (relative if the target was).
    path: PathBuf,
    dir: bool,
}

impl Item {
    /// Removes the item; whether there was something to remove.
    ///
    /// A directory may still be filled by another thread while it is removed (a signal-driven
    /// [`remove_staged`] runs beside the writer): it is first renamed to a name nobody writes
    /// under, so that the writer's next file creation fails instead of racing
    /// `remove_dir_all` (which would then fail with "directory not empty" and leave it).
    fn remove(&self) -> bool {
        if !self.dir {
            return fault::check(Op::Unlink, &self.abs).is_ok()
                && std::fs::remove_file(&self.abs).is_ok();
        }
        let mut doomed = self.abs.clone().into_os_string();
        doomed.push(".removing");
        let doomed = PathBuf::from(doomed);
        let at = if std::fs::rename(&self.abs, &doomed).is_ok() {
            &doomed
        } else {
            &self.abs
        };
        // Files already open in it may still be written; the tree is gone once nothing is
        // being created in it, which the rename ensures after a few attempts at most.
        (0..8).any(|_| std::fs::remove_dir_all(at).is_ok() || !at.exists())
    }
}

fn registry() -> MutexGuard<'static, Registry> {
    // A panic while the lock was held leaves the registry consistent (every change is one
    // push, remove or retain), so a poisoned lock is used as it is.
    REGISTRY.lock().unwrap_or_else(PoisonError::into_inner)
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The error of staging or committing after [`remove_staged`].
fn interrupted(target: &Path) -> Error {
    Error::io(
        format!("writing {}", target.display()),
        io::Error::new(
            io::ErrorKind::Interrupted,
            "interrupted: staged outputs were removed and nothing more is written",
        ),
    )
}

impl Registry {
    /// Registers a staged item; `held` is the handle holding a staged file's lock (`None`
    /// for a directory, or where the file system has no locks).
    fn register(&mut self, path: PathBuf, dir: bool, held: Option<File>) -> Staged {
        let id = self.next_id;
        self.next_id += 1;
        self.items.push(Item {
            id,
            abs: absolute(&path),
            path: path.clone(),
            dir,
        });
        Staged {
            id,
            held,
            path,
            entry: None,
        }
    }

    fn unregister(&mut self, id: u64) -> Option<Item> {
        let i = self.items.iter().position(|it| it.id == id)?;
        Some(self.items.remove(i))
    }

    /// Creates the missing directories of `dir`, outermost first, remembering each.
    fn create_dirs(&mut self, dir: &Path) -> Result<()> {
        let mut missing = Vec::new();
        let mut d = dir;
        while !d.as_os_str().is_empty() && d != Path::new(".") {
            match std::fs::metadata(d) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::NotFound => missing.push(d),
                // Not ours to judge (a permission problem): creating the file will say.
                Err(_) => break,
            }
            match d.parent() {
                Some(p) => d = p,
                None => break,
            }
        }
        for d in missing.into_iter().rev() {
            match std::fs::create_dir(d) {
                Ok(()) => self.dirs.push(absolute(d)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => {
                    self.prune_dirs();
                    return Err(Error::io(format!("creating directory {}", d.display()), e));
                }
            }
        }
        Ok(())
    }

    /// Removes, innermost first, the created directories that no live item is inside and that
    /// are empty.
    fn prune_dirs(&mut self) {
        let mut i = self.dirs.len();
        while i > 0 {
            i -= 1;
            let d = &self.dirs[i];
            if self.items.iter().any(|it| it.abs.starts_with(d)) {
                continue;
            }
            match std::fs::remove_dir(d) {
                Ok(()) => {
                    self.dirs.remove(i);
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.dirs.remove(i);
                }
                // Not empty: something else is in it now; leave it.
                Err(_) => {}
            }
        }
    }

    /// Creates a new staged item beside `target`: `make` is called with candidate names
    /// `.<name>.<random><suffix>` until one is free.
    fn stage<R>(
        &mut self,
        target: &Path,
        suffix: &str,
        dir: bool,
        mut make: impl FnMut(&Path) -> io::Result<R>,
    ) -> Result<(R, Staged)> {
        let name = target.file_name().ok_or_else(|| {
            Error::InvalidArgument(format!("{} does not name a file", target.display()))
        })?;
        if self.closed {
            return Err(interrupted(target));
        }
        let parent = parent_dir(target);
        self.create_dirs(&parent)?;
        let mut attempt = 0u32;
        loop {
            let mut file_name = OsString::from(".");
            file_name.push(name);
            file_name.push(".");
            file_name.push(random_token(attempt));
            file_name.push(suffix);
            let path = target.with_file_name(file_name);
            match make(&path) {
                Ok(r) => {
                    let held = if dir {
                        None
                    } else {
                        match hold(&path) {
                            Held::Live(f) => f,
                            // A cleanup in another process took it for abandoned between
                            // its creation and our lock, and removed it: stage anew.
                            Held::Removed if attempt < 64 => {
                                attempt += 1;
                                continue;
                            }
                            Held::Removed => {
                                self.prune_dirs();
                                return Err(Error::io(
                                    format!("creating a temporary file in {}", parent.display()),
                                    io::Error::other(
                                        "each temporary file created was removed by another process before it could be locked",
                                    ),
                                ));
                            }
                        }
                    };
                    return Ok((r, self.register(path, dir, held)));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 64 => {
                    attempt += 1;
                }
                Err(e) => {
                    self.prune_dirs();
                    let what = if dir { "directory" } else { "file" };
                    return Err(Error::io(
                        format!("creating a temporary {what} in {}", parent.display()),
                        e,
                    ));
                }
            }
        }
    }
}

/// Ten characters from `[0-9a-z]`, different at every call (a per-call random hasher key,
/// the process id, the time and a counter).
fn random_token(attempt: u32) -> String {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u32(attempt);
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    let mut x = h.finish();
    (0..10)
        .map(|_| {
            let c = b"0123456789abcdefghijklmnopqrstuvwxyz"[(x % 36) as usize];
            x /= 36;
            char::from(c)
        })
        .collect()
}

/// A staged temporary file or directory beside its target. Dropping it removes it (and the
/// directories created for it, if they are then empty), unless it was committed.
#[derive(Debug)]
pub(crate) struct Staged {
    id: u64,
    /// For a staged file: a handle holding an exclusive advisory lock on it for as long as the
    /// item lives, so that another process can tell a file being written from one abandoned by
    /// a writer that was killed ([`remove_abandoned`]). The kernel releases it when the process
    /// dies, however it dies. `None` for a directory, or where the file system has no locks.
    #[allow(dead_code)] // held for its lock, never read
    held: Option<File>,
    path: PathBuf,
    /// For a staged directory: commit moves this entry inside it, not the directory.
    entry: Option<PathBuf>,
}

impl Staged {
    /// Where the staged item is, named as the target was (relative if the target was).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// For a staged directory: make commit move the file `name` inside it to the target (and
    /// then remove the directory), instead of the directory itself.
    pub(crate) fn commit_entry(mut self, name: impl Into<PathBuf>) -> Staged {
        self.entry = Some(name.into());
        self
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        let mut reg = registry();
        if let Some(item) = reg.unregister(self.id) {
            item.remove();
            reg.prune_dirs();
        }
    }
}

/// What [`hold`] found.
enum Held {
    /// The staged file is ours and locked (`None`: the file system has no locks).
    Live(Option<File>),
    /// Another process removed it before our lock was taken.
    Removed,
}

/// Opens the staged file at `path` and takes the lock that marks it as live (a second open
/// file description: the caller's handle may be closed before the commit).
///
/// The lock is *shared*: a staged hard link shares its inode with the file it links and with
/// every other writer's link to it (two ranks of an incremental save reusing one base file),
/// and each of them must be able to hold it at once. A cleanup ([`abandoned`]) takes an
/// *exclusive* lock to tell a file abandoned, so it fails while any writer lives.
///
/// Between the creation of the name and this lock, a cleanup in another process (another
/// rank's writer opening the same checkpoint) sees an unlocked staged file: it may take its
/// lock and remove it. So this lock waits (a cleanup holds its lock only while it looks and
/// removes) and then checks that the path still names the file locked; if it does not, the
/// caller stages under a new name. Once the lock is ours, no cleanup can remove the file.
fn hold(path: &Path) -> Held {
    let f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Held::Removed,
        Err(_) => return Held::Live(None),
    };
    if f.lock_shared().is_err() {
        return Held::Live(None);
    }
    match (f.metadata(), std::fs::symlink_metadata(path)) {
        (Ok(locked), Ok(named)) if !same_file(&locked, &named) => Held::Removed,
        (_, Err(e)) if e.kind() == io::ErrorKind::NotFound => Held::Removed,
        _ => Held::Live(Some(f)),
    }
}

/// Whether two metadata are of one file (device and inode; where the platform does not say,
/// assumed so).
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        a.dev() == b.dev() && a.ino() == b.ino()
    }
    #[cfg(not(unix))]
    {
        let _ = (a, b);
        true
    }
}

/// The target name of a staged file's name, `.<target name>.<random><suffix>` (the shape
/// [`Registry::stage`] gives every temporary: ten characters of `[0-9a-z]`, then a suffix of
/// `.` and `[a-z-]`), when the name has that shape.
pub(crate) fn staged_target(name: &[u8]) -> Option<&[u8]> {
    let rest = name.strip_prefix(b".")?;
    let dot = rest.iter().rposition(|&b| b == b'.')?;
    let (rest, suffix) = (&rest[..dot], &rest[dot + 1..]);
    if suffix.is_empty() || !suffix.iter().all(|&b| b.is_ascii_lowercase() || b == b'-') {
        return None;
    }
    let token_at = rest.len().checked_sub(10)?;
    let (target, token) = rest.split_at(token_at);
    let target = target.strip_suffix(b".")?;
    let token_ok = token
        .iter()
        .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase());
    (token_ok && !target.is_empty()).then_some(target)
}

/// A temporary file that a writer which was killed left beside its output
/// ([`abandoned_temporaries`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbandonedTemporary {
    /// The file.
    pub path: PathBuf,
    /// Its length in bytes.
    pub len: u64,
}

/// The staged files (`.<target name>.<random><suffix>`, of every writer: `.pdx-tmp`, `.tmp`,
/// `.old`, ...) in `dir` whose target names `ours` accepts and whose writer is gone: a process
/// that was killed (SIGKILL, a preemption) while writing leaves its staged file, up to the
/// size of a whole output, and nothing else would ever remove it. A staged file is abandoned
/// when its lock (taken for as long as the item lives, see [`Staged`]) can be taken: the
/// kernel released it with the process. One that is locked (being written by a live process),
/// one this process has staged, and one whose lock cannot be tested (a file system without
/// locks) are not abandoned. With `remove`, each is removed as it is found (under the lock
/// that told it abandoned, so its writer cannot be live); returns those found (and, with
/// `remove`, removed).
pub(crate) fn abandoned(
    dir: &Path,
    ours: &dyn Fn(&[u8]) -> bool,
    remove: bool,
) -> Result<Vec<AbandonedTemporary>> {
    let entries = std::fs::read_dir(dir).ctx("listing", dir)?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.ctx("listing", dir)?;
        let name = entry.file_name();
        if !staged_target(name.as_encoded_bytes()).is_some_and(ours) {
            continue;
        }
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let path = entry.path();
        let abs = absolute(&path);
        let reg = registry();
        if reg.items.iter().any(|it| it.abs == abs) {
            continue;
        }
        let Ok(f) = File::open(&path) else {
            continue;
        };
        if f.try_lock().is_err() {
            continue;
        }
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        // One that cannot be removed (a read-only directory opened by a reader) stays, as
        // found: whoever can write there removes it.
        if remove
            && fault::check(Op::Unlink, &path)
                .and_then(|()| std::fs::remove_file(&path))
                .is_err()
        {
            continue;
        }
        drop(reg);
        found.push(AbandonedTemporary { path, len });
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The temporary files in `dir` that writers which were killed left (of every paramdex
/// writer: `.<output name>.<random><suffix>`, no live writer holding its lock on it), with
/// their lengths, by path. Nothing is removed: opening a checkpoint manager, and each save
/// of a manager, a [`ShardWriter`](crate::ShardWriter) or the DCP writer, removes those of
/// its outputs.
pub fn abandoned_temporaries(dir: impl AsRef<Path>) -> Result<Vec<AbandonedTemporary>> {
    abandoned(dir.as_ref(), &|_| true, false)
}

/// Removes the abandoned staged files ([`abandoned`]) of `dir` whose target names start with
/// `target_prefix`; returns each removed file and its size.
pub(crate) fn remove_abandoned(dir: &Path, target_prefix: &str) -> Result<Vec<(PathBuf, u64)>> {
    let prefix = target_prefix.as_bytes();
    let ours = |t: &[u8]| t.starts_with(prefix);
    Ok(abandoned(dir, &ours, true)?
        .into_iter()
        .map(|a| (a.path, a.len))
        .collect())
}

/// Creates a temporary file `.<file name>.<random><suffix>` beside `target` (creating missing
/// parent directories), open for writing.
///
/// Permissions: on Unix the file is created with mode 0666 filtered by the process umask, like
/// any file a program creates with `open(2)` (typically 0644), so that the renamed result is
/// readable as an ordinary file would be (a private temporary file would be 0600, and a
/// checkpoint written by one user could not be served by another).
pub(crate) fn stage_file(target: &Path, suffix: &str) -> Result<(File, Staged)> {
    registry().stage(target, suffix, false, |p| {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            o.mode(0o666);
        }
        fault::check(Op::Create, p)?;
        o.open(p)
    })
}

/// Creates an empty temporary directory `.<file name>.<random><suffix>` beside `target`
/// (creating missing parent directories), with the mode a new directory gets (0777 filtered
/// by the umask). Its contents go with it: dropping it removes the whole tree.
pub(crate) fn stage_dir(target: &Path, suffix: &str) -> Result<Staged> {
    registry()
        .stage(target, suffix, true, |p| std::fs::create_dir(p))
        .map(|((), s)| s)
}

/// Stages a hard link to `src` beside `target`. Fails where the file system cannot link
/// (another device, no hard links) or where [`refuse_hard_links_from`] says so; the caller
/// then stages a copy.
pub(crate) fn stage_link(src: &Path, target: &Path, suffix: &str) -> Result<Staged> {
    registry()
        .stage(target, suffix, false, |p| {
            if links_refused_from(src) {
                return Err(io::Error::other(format!(
                    "hard links from {} refused on this thread (raw::testing::refuse_hard_links_from)",
                    src.display()
                )));
            }
            fault::check(Op::Link, p)?;
            std::fs::hard_link(src, p)
        })
        .map(|((), s)| s)
}

thread_local! {
    /// The directories of the [`RefuseHardLinks`] guards alive on this thread (each as given
    /// and canonical).
    static REFUSED_LINKS: std::cell::RefCell<Vec<(PathBuf, PathBuf)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether a [`RefuseHardLinks`] guard of this thread covers `src`.
fn links_refused_from(src: &Path) -> bool {
    REFUSED_LINKS.with(|dirs| {
        let dirs = dirs.borrow();
        if dirs.is_empty() {
            return false;
        }
        let canonical = src.canonicalize().ok();
        dirs.iter().any(|(given, canon)| {
            src.starts_with(given) || canonical.as_ref().is_some_and(|c| c.starts_with(canon))
        })
    })
}

/// Makes every hard link paramdex would stage on the calling thread from a file under `dir`
/// fail, as if `dir` were on another file system, until the returned guard is dropped: the
/// fault injection that lets a test run the copy taken instead (incremental saves reusing a
/// base's data files, `export_tf`) on any machine, not only where a second file system is at
/// hand. Links from elsewhere still work, as they would. Only the calling thread is affected;
/// guards nest.
pub fn refuse_hard_links_from(dir: &Path) -> RefuseHardLinks {
    let given = dir.to_path_buf();
    let canonical = dir.canonicalize().unwrap_or_else(|_| given.clone());
    REFUSED_LINKS.with(|dirs| dirs.borrow_mut().push((given.clone(), canonical)));
    RefuseHardLinks {
        dir: given,
        _this_thread: std::marker::PhantomData,
    }
}

/// The guard of [`refuse_hard_links_from`]: links from its directory work again on this
/// thread once it is dropped. Not `Send`: it belongs to its thread.
#[must_use = "hard links are refused only while the guard is alive"]
#[derive(Debug)]
pub struct RefuseHardLinks {
    dir: PathBuf,
    _this_thread: std::marker::PhantomData<*const ()>,
}

impl Drop for RefuseHardLinks {
    fn drop(&mut self) {
        REFUSED_LINKS.with(|dirs| {
            let mut dirs = dirs.borrow_mut();
            if let Some(i) = dirs.iter().rposition(|(given, _)| *given == self.dir) {
                dirs.remove(i);
            }
        });
    }
}

/// Renames staged items into their targets, in order, while holding the registry lock (so a
/// concurrent [`remove_staged`] waits for all of them, or runs before and makes this fail).
///
/// A staged file replaces an existing file atomically (`rename`). A staged directory whose
/// target exists (a directory or a file) is swapped in: the old one is moved aside under a
/// staged name, the new one renamed into place, and the old one removed.
pub(crate) fn commit<'a>(moves: impl IntoIterator<Item = (Staged, &'a Path)>) -> Result<()> {
    let moves: Vec<(Staged, &Path)> = moves.into_iter().collect();
    let mut trash = Vec::new();
    let r = {
        let mut reg = registry();
        commit_locked(&mut reg, &moves, &mut trash)
    };
    // Dropped with the lock released: the staged items (no longer registered when committed)
    // and the replaced outputs moved aside (removed now).
    drop(moves);
    drop(trash);
    r
}

fn commit_locked(
    reg: &mut Registry,
    moves: &[(Staged, &Path)],
    trash: &mut Vec<Staged>,
) -> Result<()> {
    for (staged, target) in moves {
        if reg.closed {
            return Err(interrupted(target));
        }
        let Some(item) = reg.items.iter().find(|it| it.id == staged.id) else {
            return Err(interrupted(target));
        };
        let rename_err = |from: &Path, e| {
            Error::io(
                format!("renaming {} to {}", from.display(), target.display()),
                e,
            )
        };
        match &staged.entry {
            Some(entry) => {
                let from = staged.path.join(entry);
                fault::check(Op::Rename, target)
                    .and_then(|()| std::fs::rename(&from, target))
                    .map_err(|e| rename_err(&from, e))?;
            }
            None if item.dir => swap_in(reg, &staged.path, target, trash)?,
            None => {
                fault::check(Op::Rename, target)
                    .and_then(|()| std::fs::rename(&staged.path, target))
                    .map_err(|e| rename_err(&staged.path, e))?;
                // A staged hard link whose target is already a link to the same file (two
                // shard writers of an incremental save linking one base file at once):
                // rename(2) then does nothing and leaves both names, so the staged one goes.
                if std::fs::symlink_metadata(&staged.path).is_ok() {
                    fault::check(Op::Unlink, &staged.path)
                        .and_then(|()| std::fs::remove_file(&staged.path))
                        .map_err(|e| Error::io(format!("removing {}", staged.path.display()), e))?;
                }
            }
        }
        let item = reg.unregister(staged.id);
        if staged.entry.is_some() {
            // What is left of the staged directory (nothing, or the writer's leftovers).
            if let Some(item) = item {
                item.remove();
            }
        }
        // The directories created for this output now hold it.
        let abs = absolute(target);
        reg.dirs.retain(|d| !abs.starts_with(d));
    }
    Ok(())
}

/// Renames the staged directory `new` to `target`, moving an existing `target` aside first
/// (into `trash`, removed by the caller) and back if the second rename fails.
fn swap_in(reg: &mut Registry, new: &Path, target: &Path, trash: &mut Vec<Staged>) -> Result<()> {
    let rename_err = |e| {
        Error::io(
            format!("renaming {} to {}", new.display(), target.display()),
            e,
        )
    };
    let old_is_dir = match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return std::fs::rename(new, target).map_err(rename_err)
        }
        Err(e) => {
            return Err(Error::io(
                format!("reading metadata of {}", target.display()),
                e,
            ))
        }
        Ok(m) => m.is_dir(),
    };
    // The old output goes to a free staged name (a new empty file or directory, which the
    // rename replaces), registered so that an interruption removes it.
    let ((), aside) = if old_is_dir {
        reg.stage(target, ".old", true, |p| std::fs::create_dir(p))?
    } else {
        reg.stage(target, ".old", false, |p| {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(p)
                .map(drop)
        })?
    };
    // Dropped by the caller once the lock is released: removes the old output, or nothing
    // if it is unregistered below.
    let aside_path = aside.path().to_path_buf();
    let aside_id = aside.id;
    trash.push(aside);
    if let Err(e) = std::fs::rename(target, &aside_path) {
        return Err(Error::io(
            format!("moving {} aside to replace it", target.display()),
            e,
        ));
    }
    if let Err(e) = std::fs::rename(new, target) {
        // Put the old output back; it is no longer staged, so the aside name is forgotten
        // without removing anything.
        let _ = std::fs::rename(&aside_path, target);
        reg.unregister(aside_id);
        return Err(rename_err(e));
    }
    Ok(())
}

/// Removes everything this process has staged and not committed (temporary files and
/// directories beside outputs being written, and the directories created for them if they are
/// then empty), and makes every later attempt to stage or commit an output fail, so that an
/// output cannot appear after this returns. Returns the paths removed, named as the outputs
/// were (relative if the output path was relative), in the order they were staged.
///
/// For a program that stops on a signal: call it from a thread that waits for the signal
/// (`signal_hook::iterator::Signals`, for example), then exit. It takes a lock, allocates and
/// removes files, so it must not be called inside an asynchronous signal handler. An output
/// whose rename into place has begun is finished first: each final path is either untouched
/// or complete.
pub fn remove_staged() -> Vec<PathBuf> {
    let mut reg = registry();
    reg.closed = true;
    let items = std::mem::take(&mut reg.items);
    let removed = items
        .into_iter()
        .filter(|it| it.remove())
        .map(|it| it.path)
        .collect();
    reg.prune_dirs();
    removed
}

/// Writes `path` atomically: `fill` writes the contents to a temporary file beside it (through
/// a buffer), which is then synced and renamed into place, and the directory synced. Missing
/// parent directories are created (and removed again, if empty, when the write fails). On
/// error, or if [`remove_staged`] runs first, `path` is untouched and the temporary file is
/// removed; an existing `path` is replaced only by a complete file.
///
/// ```
/// # fn main() -> paramdex::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let out = dir.path().join("new/dir/values.bin");
/// paramdex::write_atomically(&out, |w| w.write_all(&[1, 2, 3]))?;
/// assert_eq!(std::fs::read(&out).unwrap(), [1, 2, 3]);
/// # Ok(()) }
/// ```
pub fn write_atomically(
    path: impl AsRef<Path>,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<()> {
    let path = path.as_ref();
    write_staged(path, ".tmp", |w| {
        fill(w).map_err(|e| Error::io(format!("writing {}", path.display()), e))
    })
}

/// [`write_atomically`] with a crate error from `fill` and a chosen suffix.
pub(crate) fn write_staged(
    dst: &Path,
    suffix: &str,
    fill: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let (file, staged) = stage_file(dst, suffix)?;
    let mut w = io::BufWriter::with_capacity(1 << 20, file);
    fill(&mut w)?;
    fault::check(Op::Write, staged.path()).ctx("writing", dst)?;
    let file = w
        .into_inner()
        .map_err(|e| Error::io(format!("writing {}", dst.display()), e.into_error()))?;
    fault::check(Op::SyncFile, staged.path())
        .and_then(|()| file.sync_all())
        .ctx("syncing", dst)?;
    drop(file);
    commit([(staged, dst)])?;
    sync_parent(dst)
}

/// `e` without the path a wrapper added to its message: the `tempfile` crate (which the
/// `safetensors` crate uses) turns `No such file or directory (os error 2)` into `... at path
/// "/absolute/temporary/path"`, and keeps the operating system's code nowhere else. The kind
/// is kept; the caller names the output as the user gave it.
pub(crate) fn without_path(e: io::Error) -> io::Error {
    if e.raw_os_error().is_some() || e.get_ref().is_none() {
        return e;
    }
    let text = e.to_string();
    match text.find(" at path ") {
        Some(i) => io::Error::new(e.kind(), text[..i].to_string()),
        None => e,
    }
}

/// Makes a rename inside `dir` durable by syncing the directory (a no-op where directories
/// cannot be opened, such as Windows).
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    fault::check(Op::SyncDir, dir)
        .and_then(|()| std::fs::File::open(dir))
        .and_then(|d| d.sync_all())
        .ctx("syncing directory", dir)?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Makes a rename to `path` durable by syncing the directory that holds it.
pub fn sync_parent(path: &Path) -> Result<()> {
    sync_dir(&parent_dir(path))
}

// `remove_staged` closes the registry for the whole process, so it is tested in its own test
// binary (tests/staging.rs); these tests never call it.
#[cfg(test)]
mod tests {
    use super::*;

    fn live(s: &Staged) -> bool {
        registry().items.iter().any(|it| it.id == s.id)
    }

    /// Another rank's cleanup may see a staged file between its creation and its writer's
    /// lock, take it for abandoned and remove it (a 3-rank DCP save lost a shard that way:
    /// the rename at commit found no file). The writer's lock waits for the cleanup's and
    /// then sees that the file is gone, so the stager makes a new one.
    #[test]
    fn a_staged_file_removed_before_its_lock_is_staged_anew() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".t.0123456789.pdx-tmp");
        for removed in [true, false] {
            std::fs::write(&path, b"").unwrap();
            let cleanup = File::open(&path).unwrap();
            cleanup.try_lock().unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let p = path.clone();
            let t = std::thread::spawn(move || {
                rx.recv().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(50));
                if removed {
                    std::fs::remove_file(&p).unwrap();
                }
                drop(cleanup);
            });
            tx.send(()).unwrap();
            let held = hold(&path);
            t.join().unwrap();
            match held {
                Held::Removed => assert!(removed, "a file still there was said removed"),
                Held::Live(f) => {
                    assert!(!removed, "a removed file was said live");
                    let f = f.expect("this file system has locks");
                    // Shared: another writer's link to the same file can hold it too, and
                    // a cleanup cannot.
                    assert!(File::open(&path).unwrap().try_lock_shared().is_ok());
                    assert!(File::open(&path).unwrap().try_lock().is_err());
                    drop(f);
                }
            }
        }
        let staged = stage_file(&dir.path().join("t"), ".pdx-tmp").unwrap().1;
        assert!(abandoned(dir.path(), &|_| true, false)
            .unwrap()
            .iter()
            .all(|a| a.path != staged.path()));
    }

    /// A staged hard link committed onto a target that is already a link to the same file:
    /// `rename(2)` of one name of a file onto another of its names does nothing, and the
    /// staged name must not stay behind (two shard writers of an incremental save linking one
    /// base data file at once left `.PREFIX.reused-....pdx-tmp` files).
    #[test]
    fn a_staged_link_onto_a_link_to_the_same_file_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, b"bytes").unwrap();
        let target = dir.path().join("target");
        std::fs::hard_link(&src, &target).unwrap();
        let staged = stage_link(&src, &target, ".pdx-tmp").unwrap();
        let path = staged.path().to_path_buf();
        commit([(staged, target.as_path())]).unwrap();
        assert!(!path.exists(), "{} left behind", path.display());
        assert_eq!(std::fs::read(&target).unwrap(), b"bytes");
        let mut names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(names, ["src", "target"]);
    }

    #[test]
    fn temporary_files_sit_beside_the_target_and_are_not_private() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("model.pdx");
        let (file, t) = stage_file(&target, ".pdx-tmp").unwrap();
        assert_eq!(t.path().parent(), Some(dir.path()));
        let name = t.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".model.pdx.") && name.ends_with(".pdx-tmp"),
            "{name}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = file.metadata().unwrap().permissions().mode() & 0o777;
            // Whatever the umask, the owner can read and write; it only takes bits away from
            // 0666, where a private temporary file would be 0600.
            assert_eq!(mode & 0o600, 0o600);
            assert_eq!(mode & 0o111, 0);
            let umask_allows_group_read = {
                let probe = dir.path().join("probe");
                std::fs::write(&probe, b"").unwrap();
                std::fs::metadata(&probe).unwrap().permissions().mode() & 0o040 != 0
            };
            assert_eq!(mode & 0o040 != 0, umask_allows_group_read);
        }
        assert!(stage_file(Path::new("/"), ".x").is_err());
    }

    #[test]
    fn a_relative_target_gives_a_relative_staged_path() {
        let (_f, t) = stage_file(Path::new("target/staging-test/rel/x.bin"), ".tmp").unwrap();
        assert!(t.path().starts_with("target/staging-test/rel"));
        assert!(t.path().is_relative());
        drop(t);
        assert!(!Path::new("target/staging-test/rel").exists());
    }

    #[test]
    fn dropping_removes_the_item_and_the_directories_made_for_it() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b/c/out.pdx");
        let (mut f, t) = stage_file(&target, ".tmp").unwrap();
        f.write_all(b"partial").unwrap();
        // A second item in the same new directory keeps it while it lives.
        let (_g, u) = stage_file(&dir.path().join("a/b/c/other"), ".tmp").unwrap();
        let (p, q) = (t.path().to_path_buf(), u.path().to_path_buf());
        assert!(p.exists() && live(&t));
        drop(t);
        assert!(!p.exists() && q.exists());
        assert!(dir.path().join("a/b/c").is_dir());
        drop(u);
        assert!(!q.exists());
        assert!(
            !dir.path().join("a").exists(),
            "created directories removed"
        );
        assert!(dir.path().exists(), "an existing directory is kept");
    }

    #[test]
    fn a_created_directory_that_is_not_empty_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (_f, t) = stage_file(&dir.path().join("new/out"), ".tmp").unwrap();
        std::fs::write(dir.path().join("new/someone-elses"), b"x").unwrap();
        drop(t);
        assert!(dir.path().join("new/someone-elses").exists());
    }

    #[test]
    fn commit_renames_and_keeps_the_created_directories() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("new/out.bin");
        write_atomically(&target, |w| w.write_all(b"one")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"one");
        write_atomically(&target, |w| w.write_all(b"two")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        // A failing fill leaves the old file and no temporary.
        let e = write_atomically(&target, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(e.to_string().contains("out.bin"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"two");
        let names: Vec<_> = std::fs::read_dir(dir.path().join("new"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["out.bin"]);
        // A failing write into missing directories removes them again.
        let deep = dir.path().join("x/y/z.bin");
        write_atomically(&deep, |_| Err(io::Error::other("boom"))).unwrap_err();
        assert!(!dir.path().join("x").exists());
    }

    #[test]
    fn a_staged_directory_replaces_a_directory_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("vars");
        for old_is_dir in [true, false] {
            if old_is_dir {
                std::fs::create_dir(&target).unwrap();
                std::fs::write(target.join("old"), b"old").unwrap();
            } else {
                std::fs::remove_dir_all(&target).unwrap();
                std::fs::write(&target, b"old file").unwrap();
            }
            let s = stage_dir(&target, ".tmp").unwrap();
            std::fs::write(s.path().join("new"), b"new").unwrap();
            commit([(s, target.as_path())]).unwrap();
            assert_eq!(std::fs::read(target.join("new")).unwrap(), b"new");
            assert!(!target.join("old").exists());
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["vars"], "nothing moved aside is left");
        }
    }

    #[test]
    fn an_entry_of_a_staged_directory_is_committed_and_the_rest_removed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("m.safetensors");
        let s = stage_dir(&target, ".tmp").unwrap();
        std::fs::write(s.path().join("inner"), b"data").unwrap();
        std::fs::write(s.path().join("leftover"), b"x").unwrap();
        commit([(s.commit_entry("inner"), target.as_path())]).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"data");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn errors_of_other_crates_lose_their_absolute_paths() {
        let dir = tempfile::tempdir().unwrap();
        let e = tempfile::NamedTempFile::new_in(dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("at path"), "{e}");
        let plain = without_path(e);
        assert_eq!(plain.kind(), io::ErrorKind::NotFound);
        assert!(!plain.to_string().contains("at path"), "{plain}");
        let other = io::Error::other("no os error inside");
        assert_eq!(without_path(other).to_string(), "no os error inside");
    }

    #[test]
    fn links_are_staged_like_files() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::write(&src, b"abc").unwrap();
        let target = dir.path().join("sub/link");
        let s = stage_link(&src, &target, ".tmp").unwrap();
        assert_eq!(std::fs::read(s.path()).unwrap(), b"abc");
        commit([(s, target.as_path())]).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"abc");
    }

    /// `refuse_hard_links_from` refuses links from under its directory only, on its thread
    /// only, while its guard lives (guards nest), and a refused link leaves nothing behind.
    #[test]
    fn refused_hard_links_fail_like_links_across_file_systems() {
        let dir = tempfile::tempdir().unwrap();
        let (far, near) = (dir.path().join("far"), dir.path().join("near"));
        std::fs::create_dir_all(far.join("sub")).unwrap();
        std::fs::create_dir(&near).unwrap();
        let (from_far, from_near) = (far.join("sub/src"), near.join("src"));
        std::fs::write(&from_far, b"abc").unwrap();
        std::fs::write(&from_near, b"abc").unwrap();
        let target = near.join("out/link");
        let links = |src: &Path| stage_link(src, &target, ".tmp").is_ok();
        {
            let _outer = refuse_hard_links_from(&far);
            let e = stage_link(&from_far, &target, ".tmp").unwrap_err();
            assert!(matches!(e, Error::Io { .. }), "{e}");
            assert!(
                !near.join("out").exists(),
                "a refused link leaves no directory"
            );
            assert!(links(&from_near), "links from elsewhere still work");
            #[cfg(unix)]
            {
                let alias = dir.path().join("alias");
                std::os::unix::fs::symlink(&far, &alias).unwrap();
                let by_alias = alias.join("sub/src");
                assert!(
                    !links(&by_alias),
                    "the same file by another path is refused"
                );
            }
            {
                let _inner = refuse_hard_links_from(&far);
                assert!(!links(&from_far));
            }
            assert!(!links(&from_far), "the outer guard still holds");
            let other_thread = std::thread::scope(|s| s.spawn(|| links(&from_far)).join());
            assert!(other_thread.unwrap(), "other threads are not affected");
        }
        assert!(
            links(&from_far),
            "links work again once every guard is dropped"
        );
    }
}
