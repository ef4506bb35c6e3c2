//! What a directory or an object-store prefix holds ([`survey`]): each file or object (and,
//! locally, each subdirectory) with the input it is as [`crate::interop::open_any`] detects
//! it, the same detection as when it is opened by itself; for `paramdex ls DIR/` of a
//! directory that is not one input (several checkpoints, loose files).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::checkpoints::location::Location;
use crate::interop::store::Format;

/// Most entries of a directory or prefix looked at.
pub const MAX_SURVEYED: usize = 4096;

/// One entry of a [`survey`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Found {
    /// Its name in the directory.
    pub name: String,
    /// Its path or URL.
    pub path: PathBuf,
    /// Whether it is a (local) directory.
    pub is_dir: bool,
    /// Bytes (files and objects; 0 for directories).
    pub len: u64,
    /// The input it is, or why it is none: [`Error::UnrecognizedFormat`] (saying what it looks
    /// like where it is recognised) or the error opening it gave.
    pub what: Result<Format>,
}

/// Whether `input` names a directory that [`survey`] lists: a local directory, or a URL
/// (`s3://bucket/prefix/`, `file:///dir/`) ending in `/`, which names no object (an object
/// store has no directories to ask about; the `/` says the caller means one).
pub fn is_directory(input: &Path) -> bool {
    match crate::remote::url_of(input) {
        Some(url) => url.ends_with('/'),
        None => input.is_dir(),
    }
}

/// The entries of `dir` (a local directory, `file:///dir`, or `s3://bucket/prefix`), sorted by
/// name, hidden ones (starting with `.`) left out, each opened as an input to say what it is.
/// An object prefix lists its objects (not the prefixes under it).
///
/// Errors: the directory cannot be listed; [`Error::LimitExceeded`] past [`MAX_SURVEYED`]
/// entries.
pub fn survey(dir: &Path) -> Result<Vec<Found>> {
    let at = Location::new(dir)?;
    let mut found = Vec::new();
    let mut push = |name: String, path: PathBuf, is_dir: bool, len: u64| -> Result<()> {
        crate::error::ensure_within(
            "entries of a directory surveyed",
            found.len() + 1,
            MAX_SURVEYED,
            None,
        )?;
        let what = crate::interop::open_any(&path).map(|s| s.format());
        found.push(Found {
            name,
            path,
            is_dir,
            len,
            what,
        });
        Ok(())
    };
    match &at {
        Location::Local(d) => {
            let listing = |e| Error::io(format!("listing {}", d.display()), e);
            let mut entries = Vec::new();
            for ent in std::fs::read_dir(d).map_err(listing)? {
                let ent = ent.map_err(listing)?;
                let name = ent.file_name().to_string_lossy().into_owned();
                if name.starts_with('.') {
                    continue;
                }
                let Ok(m) = std::fs::metadata(ent.path()) else {
                    continue;
                };
                entries.push((
                    name,
                    ent.path(),
                    m.is_dir(),
                    if m.is_file() { m.len() } else { 0 },
                ));
                crate::error::ensure_within(
                    "entries of a directory surveyed",
                    entries.len(),
                    MAX_SURVEYED,
                    None,
                )?;
            }
            entries.sort();
            for (name, path, is_dir, len) in entries {
                push(name, path, is_dir, len)?;
            }
        }
        #[cfg(feature = "s3")]
        Location::Object(_) => {
            for l in at.list()? {
                if l.name.starts_with('.') {
                    continue;
                }
                let path = at.child(&l.name);
                push(l.name, path, false, l.len)?;
            }
        }
    }
    Ok(found)
}
