//! Where a managed checkpoint directory is: a local directory, or a "directory" of an object
//! store (`s3://bucket/dir`: the objects whose keys are `dir/NAME`). The manager needs five
//! things of it, and this is the one place that does each on both: list the names directly in
//! it (with sizes and modification times), read and replace the state file, say whether one
//! name exists, and delete one name. Everything else (how a checkpoint is written, which names
//! make one) is the manager's, the same code for both.
//!
//! A local directory replaces the state file by a staged file renamed over it (then the
//! directory fsynced); an object store by one PUT, which is atomic (readers see the old object
//! or the new one). Neither relies on conditional writes (Garage ignores them): one manager at a
//! time writes a directory.

use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

#[cfg(feature = "s3")]
use object_store::path::Path as ObjectPath;
#[cfg(feature = "s3")]
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Error, Result};
use crate::native::fault::{self, Op};
use crate::native::staging;
#[cfg(feature = "s3")]
use crate::remote::{remote_error as request_error, ObjectLocation};

use super::state::CheckpointState;
#[cfg(feature = "s3")]
use super::state::{MAX_STATE_BYTES, STATE_FILE};

/// One name found directly in a checkpoint directory.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    /// The file (or object) name, without the directory.
    pub name: String,
    /// Its length in bytes.
    pub len: u64,
    /// Its modification time, seconds since the Unix epoch.
    pub modified: Option<f64>,
    /// When its name last changed (linked, renamed) or its bytes: a local file's status
    /// change time (`ctime`; its modification time where there is none), an object's
    /// modification time. What tells a checkpoint committed after the state file was last
    /// written.
    pub changed: Option<f64>,
    /// The file's identity (device, inode), so that a file linked under two names counts once;
    /// `None` for objects (each object is its own bytes).
    pub id: Option<(u64, u64)>,
}

/// A checkpoint directory: local, or under a prefix of an object store.
#[derive(Clone, Debug)]
pub(crate) enum Location {
    /// A local directory.
    Local(PathBuf),
    /// The objects `KEY/NAME` of a store; `loc.path` is `KEY` (no trailing `/`) and `loc.url`
    /// the directory's URL (no trailing `/`). With the `s3` feature only.
    #[cfg(feature = "s3")]
    Object(ObjectLocation),
}

impl Location {
    /// The location `dir` names: an `s3://bucket/dir` URL (resolved, no request made), a
    /// `file:///dir` URL (the local directory `/dir`), or a local path.
    pub fn new(dir: &Path) -> Result<Location> {
        let Some(s) = crate::remote::url_of(dir) else {
            return Ok(Location::Local(dir.to_path_buf()));
        };
        if let Some(p) = s.strip_prefix("file://") {
            if !p.starts_with('/') {
                return Err(Error::InvalidArgument(format!(
                    "{s}: a file URL names an absolute path (file:///dir)"
                )));
            }
            return Ok(Location::Local(PathBuf::from(p)));
        }
        Self::object(s.trim_end_matches('/'))
    }

    /// The object-store directory `url` names (resolved, no request made).
    #[cfg(feature = "s3")]
    fn object(url: &str) -> Result<Location> {
        Ok(Location::Object(crate::remote::resolve(url)?))
    }

    /// Without object storage (the `s3` feature), an `s3://` directory is refused.
    #[cfg(not(feature = "s3"))]
    fn object(url: &str) -> Result<Location> {
        Err(crate::remote::not_built(url))
    }

    /// The directory as the user named it (a URL without its trailing `/`), for `dir()`,
    /// prefixes and messages.
    pub fn display_path(&self) -> PathBuf {
        match self {
            Location::Local(d) => d.clone(),
            #[cfg(feature = "s3")]
            Location::Object(loc) => PathBuf::from(&loc.url),
        }
    }

    /// Whether this is an object store.
    pub fn is_object(&self) -> bool {
        match self {
            Location::Local(_) => false,
            #[cfg(feature = "s3")]
            Location::Object(_) => true,
        }
    }

    /// The local directory (`None` for an object store).
    pub fn local(&self) -> Option<&Path> {
        match self {
            Location::Local(d) => Some(d),
            #[cfg(feature = "s3")]
            Location::Object(_) => None,
        }
    }

    /// Removes the temporary files that writers killed in a local directory left (an object
    /// store has none: an unfinished upload is never an object): the abandoned staged files
    /// ([`staging::abandoned`]: unlocked, of no live writer) whose targets `ours` accepts.
    pub fn remove_abandoned(&self, ours: &dyn Fn(&[u8]) -> bool) -> Result<()> {
        match self {
            Location::Local(d) => staging::abandoned(d, ours, true).map(drop),
            #[cfg(feature = "s3")]
            Location::Object(_) => Ok(()),
        }
    }

    /// An exclusive advisory lock on a local directory, held (the file returned) by the
    /// manager that saves into it for as long as a save runs: the one that removes what
    /// earlier saves left there takes it first, so it never removes the files of a save
    /// running in another process. `None` for an object store, and where the directory cannot
    /// be locked (nothing is then removed that a lock would have to protect).
    pub fn lock_saves(&self) -> Option<std::fs::File> {
        let d = self.local()?;
        let f = std::fs::File::open(d).ok()?;
        f.lock().ok()?;
        Some(f)
    }

    /// [`Location::lock_saves`] without waiting: `None` also while a save holds the lock.
    pub fn try_lock_saves(&self) -> Option<std::fs::File> {
        let d = self.local()?;
        let f = std::fs::File::open(d).ok()?;
        f.try_lock().ok()?;
        Some(f)
    }

    /// Creates a local directory (an object store has nothing to create).
    pub fn create(&self) -> Result<()> {
        match self {
            Location::Local(d) => std::fs::create_dir_all(d)
                .map_err(|e| Error::io(format!("creating {}", d.display()), e)),
            #[cfg(feature = "s3")]
            Location::Object(_) => Ok(()),
        }
    }

    #[cfg(feature = "s3")]
    fn key(loc: &ObjectLocation, name: &str) -> ObjectPath {
        crate::remote::object_path(&format!("{}/{name}", loc.path.as_ref()))
    }

    /// For a local directory: an error naming it unless it is one (an object store's prefix
    /// needs no check: it exists once an object is under it).
    pub fn must_exist(&self) -> Result<()> {
        match self {
            Location::Local(d) if !d.is_dir() => Err(Error::io(
                format!("opening {}", d.display()),
                std::io::Error::new(std::io::ErrorKind::NotFound, "no such directory"),
            )),
            _ => Ok(()),
        }
    }

    /// The path (local) or URL (object) of `name` in the directory.
    pub fn child(&self, name: &str) -> PathBuf {
        match self {
            Location::Local(d) => d.join(name),
            #[cfg(feature = "s3")]
            Location::Object(loc) => PathBuf::from(format!("{}/{name}", loc.url)),
        }
    }

    /// The names directly in the directory, sorted. A local directory that does not exist is
    /// an error; an object prefix with nothing under it is empty.
    pub fn list(&self) -> Result<Vec<Listed>> {
        let mut out = Vec::new();
        match self {
            Location::Local(d) => {
                for (name, path) in local_entries(d)? {
                    // Gone since listed (a prune, a rename): not there.
                    let Ok(m) = std::fs::metadata(&path) else {
                        continue;
                    };
                    if !m.is_file() {
                        continue;
                    }
                    #[cfg(unix)]
                    let id = {
                        use std::os::unix::fs::MetadataExt;
                        Some((m.dev(), m.ino()))
                    };
                    #[cfg(not(unix))]
                    let id = None;
                    let modified = m
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map(|d| d.as_secs_f64());
                    #[cfg(unix)]
                    let changed = {
                        use std::os::unix::fs::MetadataExt;
                        Some(m.ctime() as f64 + m.ctime_nsec() as f64 * 1e-9)
                    };
                    #[cfg(not(unix))]
                    let changed = modified;
                    out.push(Listed {
                        name,
                        len: m.len(),
                        modified,
                        changed,
                        id,
                    });
                }
            }
            #[cfg(feature = "s3")]
            Location::Object(loc) => {
                let listed = loc
                    .runtime
                    .block_on(loc.store.list_with_delimiter(Some(&loc.path)))
                    .map_err(|e| request_error(&loc.url, e))?;
                for o in listed.objects {
                    let Some(name) = o.location.filename() else {
                        continue;
                    };
                    let modified = Some(o.last_modified.timestamp_millis() as f64 / 1e3);
                    out.push(Listed {
                        name: name.to_string(),
                        len: o.size,
                        modified,
                        changed: modified,
                        id: None,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Whether `name` exists in the directory (a local file; an object: one HEAD request).
    pub fn exists(&self, name: &str) -> Result<bool> {
        match self {
            Location::Local(d) => Ok(d.join(name).is_file()),
            #[cfg(feature = "s3")]
            Location::Object(loc) => {
                let key = Self::key(loc, name);
                match loc.runtime.block_on(loc.store.head(&key)) {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(e) => Err(request_error(&self.child(name).to_string_lossy(), e)),
                }
            }
        }
    }

    /// Deletes `name` (one that is already gone is not an error); a local deletion is made
    /// durable (the directory fsynced) when `sync`.
    pub fn remove(&self, name: &str, sync: bool) -> Result<()> {
        match self {
            Location::Local(d) => {
                let p = d.join(name);
                match fault::check(Op::Unlink, &p).and_then(|()| std::fs::remove_file(&p)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                    Err(e) => return Err(Error::io(format!("removing {}", p.display()), e)),
                }
                if sync {
                    crate::native::staging::sync_parent(&p)?;
                }
                Ok(())
            }
            #[cfg(feature = "s3")]
            Location::Object(loc) => {
                let key = Self::key(loc, name);
                match loc.runtime.block_on(loc.store.delete(&key)) {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(request_error(&self.child(name).to_string_lossy(), e)),
                }
            }
        }
    }

    /// Copies `from` to `to` inside the directory, `to` appearing whole: a staged local copy
    /// renamed in, or an object store's server-side copy (no bytes through this process).
    pub fn copy_object(&self, from: &str, to: &str) -> Result<()> {
        match self {
            Location::Local(d) => {
                // A staged copy, fsynced, renamed in: for a file system that cannot link.
                let (src, dst) = (d.join(from), d.join(to));
                let (mut f, staged) = crate::native::staging::stage_file(&dst, ".tmp")?;
                std::fs::File::open(&src)
                    .and_then(|mut s| std::io::copy(&mut s, &mut f))
                    .and_then(|_| fault::check(Op::Write, staged.path()))
                    .and_then(|()| fault::check(Op::SyncFile, staged.path()))
                    .and_then(|()| f.sync_all())
                    .map_err(|e| Error::io(format!("copying {}", src.display()), e))?;
                crate::native::staging::commit([(staged, dst.as_path())])
            }
            #[cfg(feature = "s3")]
            Location::Object(loc) => {
                let (a, b) = (Self::key(loc, from), Self::key(loc, to));
                loc.runtime
                    .block_on(loc.store.copy(&a, &b))
                    .map_err(|e| request_error(&self.child(to).to_string_lossy(), e))
            }
        }
    }

    /// Reads the state file; `Ok(None)` when there is none.
    pub fn read_state(&self) -> Result<Option<CheckpointState>> {
        match self {
            Location::Local(d) => CheckpointState::read(d),
            #[cfg(feature = "s3")]
            Location::Object(loc) => self.read_object_state(loc),
        }
    }

    /// [`Location::read_state`] of an object store: one GET, refused when too large.
    #[cfg(feature = "s3")]
    fn read_object_state(&self, loc: &ObjectLocation) -> Result<Option<CheckpointState>> {
        let key = Self::key(loc, STATE_FILE);
        let url = self.child(STATE_FILE).to_string_lossy().into_owned();
        let got = loc.runtime.block_on(async {
            let r = loc.store.get(&key).await?;
            // Checked before the body is read: a huge object is refused, not downloaded.
            if r.meta.size > MAX_STATE_BYTES {
                return Ok(Err(r.meta.size));
            }
            r.bytes().await.map(Ok)
        });
        let bytes = match got {
            Ok(Ok(b)) => b,
            Ok(Err(size)) => {
                return Err(Error::limit(
                    "state file bytes",
                    size,
                    MAX_STATE_BYTES,
                    None,
                ))
            }
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(request_error(&url, e)),
        };
        crate::error::ensure_within("state file bytes", bytes.len(), MAX_STATE_BYTES, None)?;
        CheckpointState::parse(&bytes, &self.display_path()).map(Some)
    }

    /// Replaces the state file at once: a staged file renamed over it (local), one PUT
    /// (object).
    pub fn write_state(&self, st: &CheckpointState) -> Result<()> {
        match self {
            Location::Local(d) => st.write(d),
            #[cfg(feature = "s3")]
            Location::Object(loc) => {
                let key = Self::key(loc, STATE_FILE);
                let payload = PutPayload::from(st.to_text().into_bytes());
                loc.runtime
                    .block_on(loc.store.put(&key, payload))
                    .map(drop)
                    .map_err(|e| request_error(&self.child(STATE_FILE).to_string_lossy(), e))
            }
        }
    }
}

/// The entries of the local directory `d` whose names are UTF-8 (others are none of a
/// checkpoint's), with their paths: what `list` and `list_dirs` walk.
fn local_entries(d: &Path) -> Result<Vec<(String, PathBuf)>> {
    let listing = |e| Error::io(format!("listing {}", d.display()), e);
    let mut out = Vec::new();
    for ent in std::fs::read_dir(d).map_err(listing)? {
        let ent = ent.map_err(listing)?;
        if let Some(name) = ent.file_name().to_str() {
            out.push((name.to_string(), ent.path()));
        }
    }
    Ok(out)
}

impl Location {
    /// The subdirectories directly in the directory (an object store's: the common prefixes
    /// one `/` below it), sorted, hidden ones (`.NAME`) left aside. A local directory that does
    /// not exist is an error; an object prefix with nothing under it has none.
    pub fn list_dirs(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        match self {
            Location::Local(d) => {
                for (name, path) in local_entries(d)? {
                    // Followed through a symbolic link, as `list` follows files.
                    if !name.starts_with('.') && path.is_dir() {
                        out.push(name);
                    }
                }
            }
            #[cfg(feature = "s3")]
            Location::Object(loc) => {
                let listed = loc
                    .runtime
                    .block_on(loc.store.list_with_delimiter(Some(&loc.path)))
                    .map_err(|e| request_error(&loc.url, e))?;
                out.extend(
                    listed
                        .common_prefixes
                        .iter()
                        .filter_map(|p| p.filename())
                        .filter(|n| !n.starts_with('.'))
                        .map(str::to_string),
                );
            }
        }
        out.sort();
        Ok(out)
    }
}
