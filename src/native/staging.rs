//! Temporary files beside the path they will be renamed to.
//!
//! Every output paramdex writes (native files, TensorFlow bundles, Paddle files, safetensors,
//! `recover`) is built under a temporary name in the destination's own directory (so the final
//! `rename` stays on one file system and is atomic) and renamed into place only when complete.
//! This module is the one place that creates those files, so they all get the same name shape
//! and the same permissions.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};

/// The directory that holds `path`: its parent, or `.` for a bare file name.
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Creates a temporary file `.<file name>.<random><suffix>` in the directory of `target`,
/// removed on drop unless persisted.
///
/// Permissions: on Unix the file is created with mode 0666 filtered by the process umask, like
/// any file a program creates with `open(2)` (typically 0644), so that the renamed result is
/// readable as an ordinary file would be (a plain temporary file would be 0600, and a checkpoint
/// written by one user could not be served by another).
pub fn temp_beside(target: &Path, suffix: &str) -> Result<tempfile::NamedTempFile> {
    let name = target.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!("{} does not name a file", target.display()))
    })?;
    let dir = parent_dir(target);
    let mut prefix = OsString::from(".");
    prefix.push(name);
    prefix.push(".");
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(suffix);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    builder
        .tempfile_in(&dir)
        .ctx("creating a temporary file in", &dir)
}

/// Makes a rename inside `dir` durable by syncing the directory (a no-op where directories
/// cannot be opened, such as Windows).
pub fn sync_dir(dir: &Path) -> Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)
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

/// Writes `bytes` to `out` atomically: a temporary file beside it, written, fsynced, renamed into
/// place, and the directory synced. On error `out` is untouched and the temporary file removed.
pub fn write_atomically(bytes: &[u8], out: &Path) -> Result<()> {
    let mut t = temp_beside(out, ".tmp")?;
    t.write_all(bytes).ctx("writing", t.path())?;
    t.as_file().sync_all().ctx("syncing", t.path())?;
    t.persist(out)
        .map_err(|e| Error::io(format!("renaming into {}", out.display()), e.error))?;
    sync_parent(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporary_files_sit_beside_the_target_and_are_not_private() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("model.pdx");
        let t = temp_beside(&target, ".pdx-tmp").unwrap();
        assert_eq!(t.path().parent(), Some(dir.path()));
        let name = t.path().file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.starts_with(".model.pdx.") && name.ends_with(".pdx-tmp"),
            "{name}"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = t.as_file().metadata().unwrap().permissions().mode() & 0o777;
            // Whatever the umask, the owner can read and write; it only takes bits away from
            // 0666, where tempfile's default is 0600.
            assert_eq!(mode & 0o600, 0o600);
            assert_eq!(mode & 0o111, 0);
            let umask_allows_group_read = {
                let probe = dir.path().join("probe");
                std::fs::write(&probe, b"").unwrap();
                std::fs::metadata(&probe).unwrap().permissions().mode() & 0o040 != 0
            };
            assert_eq!(mode & 0o040 != 0, umask_allows_group_read);
        }
        assert!(temp_beside(Path::new("/"), ".x").is_err());
    }
}
