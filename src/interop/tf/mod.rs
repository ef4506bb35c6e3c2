//! TensorFlow V2 checkpoints, both ways.
//!
//! * Reading: [`TfCheckpoint`] opens a checkpoint (index + data shards) and serves it as a
//!   [`TensorStore`]; [`open_store`] is the detector [`crate::interop::open_any`] uses. A checkpoint is
//!   named by its prefix (`dir/model.ckpt`, `dir/ckpt-1`), the path of its `.index`, the path of
//!   one of its data files, or a directory holding it (through TensorFlow's `checkpoint` file, or
//!   a single `.index`).
//! * Writing: [`crate::interop::export`] with
//!   [`OutputFormat::TensorFlow`](crate::interop::OutputFormat::TensorFlow) writes any store as
//!   a plain TensorFlow bundle; [`export_tf`] makes a native paramdex file loadable by
//!   TensorFlow without copying a byte (hard links).
//!
//! Layout of the modules: the private `checkpoint` (the reader, [`TfCheckpoint`]),
//! [`strings`] (`DT_STRING` data), and the private `export` module (writers). TensorFlow's keys
//! of partitioned-tensor slices and the region arithmetic live in the native layer, which
//! stores slices the same way ([`crate::raw::slices`]).
// TensorFlow's ordered-code slice keys and big-endian checkpoints are big-endian by definition.
#![allow(clippy::big_endian_bytes)]

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::store::TensorStore;

mod checkpoint;
mod export;
#[cfg(feature = "s3")]
pub(crate) mod remote;
pub mod strings;

pub use checkpoint::{data_path, index_path, TfCheckpoint};
pub(crate) use export::{cannot_hold, export, outputs};
pub use export::{export_tf, ExportTfReport};

/// Opens `path` as a TensorFlow checkpoint, or returns `Ok(None)` if it does not name one (see
/// [`resolve_prefix`] for what names one). Errors when it names a checkpoint that cannot be read.
///
/// A directory whose `checkpoint` state file (or single `.index` file) names a paramdex sharded
/// checkpoint (SPEC.md 12; `paramdex.torch.dcp` writes one so) opens it as the native reader
/// does, with its metadata and checks, not as a TensorFlow bundle.
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    match resolve_prefix(path)? {
        Some(prefix) => {
            if path.is_dir() {
                if let Some(native) = crate::interop::native::open_native(&prefix)? {
                    return Ok(Some(native));
                }
            }
            Ok(Some(Box::new(TfCheckpoint::open(prefix)?)))
        }
        None => Ok(None),
    }
}

/// The checkpoint prefix that `path` names, if it names one:
///
/// 1. `path` is `PREFIX.index` (a file);
/// 2. `path` is a prefix: `path.index` is a file;
/// 3. `path` is a data file `PREFIX.data-SSSSS-of-NNNNN` and `PREFIX.index` is a file;
/// 4. `path` is a directory with a TensorFlow `checkpoint` file: its `model_checkpoint_path`
///    (relative to the directory; an absolute path that no longer exists is looked up by its
///    file name in the directory, for checkpoints that were moved);
/// 5. `path` is a directory without such a `checkpoint` file (none, or one without a
///    `model_checkpoint_path` line) holding exactly one `.index` file that ends with the table
///    magic.
///
/// Otherwise `Ok(None)`. A `checkpoint` file naming a missing checkpoint, or several candidate
/// `.index` files, is an error that says so.
pub fn resolve_prefix(path: &Path) -> Result<Option<PathBuf>> {
    let file_name = path.file_name().map(|n| n.to_string_lossy().into_owned());
    if let Some(stem) = file_name.as_deref().and_then(|n| n.strip_suffix(".index")) {
        if !stem.is_empty() && path.is_file() {
            return Ok(Some(path.with_file_name(stem)));
        }
    }
    if file_name.is_some() && index_path(path).is_file() {
        return Ok(Some(path.to_path_buf()));
    }
    if let Some(stem) = file_name.as_deref().and_then(data_file_stem) {
        let prefix = path.with_file_name(stem);
        if path.is_file() && index_path(&prefix).is_file() {
            return Ok(Some(prefix));
        }
    }
    // The graph a TF1 Saver writes beside the checkpoint (PREFIX.meta).
    if let Some(stem) = file_name.as_deref().and_then(|n| n.strip_suffix(".meta")) {
        let prefix = path.with_file_name(stem);
        if !stem.is_empty() && path.is_file() && index_path(&prefix).is_file() {
            return Ok(Some(prefix));
        }
    }
    // TensorFlow's `checkpoint` state file: the checkpoint it names, as for its directory.
    if file_name.as_deref() == Some("checkpoint") && path.is_file() {
        return resolve_dir(&crate::native::staging::parent_dir(path));
    }
    if path.is_dir() {
        // A SavedModel directory keeps its variables as the checkpoint variables/variables.
        let saved = path.join("variables").join("variables");
        if index_path(&saved).is_file() && !path.join("checkpoint").is_file() {
            return Ok(Some(saved));
        }
        return resolve_dir(path);
    }
    Ok(None)
}

/// `PREFIX` of a file name `PREFIX.data-SSSSS-of-NNNNN` (digits: at least 5 each), by the one
/// parser of data-file names (`place::split_data_name`).
fn data_file_stem(name: &str) -> Option<&str> {
    match crate::native::split_data_name(name.as_bytes())? {
        // The prefix ends where `.data-` starts: an ASCII boundary of `name`.
        (stem, crate::native::Sibling::Data { pending: false, .. }) => name.get(..stem.len()),
        _ => None,
    }
}

fn resolve_dir(dir: &Path) -> Result<Option<PathBuf>> {
    let state = dir.join("checkpoint");
    if state.is_file() {
        // TensorFlow's state file is a few lines; read at most 1 MiB of whatever is there.
        let mut text = Vec::new();
        std::fs::File::open(&state)
            .and_then(|f| {
                std::io::Read::read_to_end(&mut std::io::Read::take(f, 1 << 20), &mut text)
            })
            .map_err(|e| Error::io(format!("reading {}", state.display()), e))?;
        let text = String::from_utf8_lossy(&text);
        let named = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("model_checkpoint_path:"))
            .and_then(|v| parse_text_string(v.trim()));
        // A file named `checkpoint` that is not TensorFlow's state file says nothing.
        if let Some(named) = named {
            return resolve_state(dir, PathBuf::from(named)).map(Some);
        }
    }
    resolve_single_index(dir)
}

/// The checkpoint a `checkpoint` state file in `dir` names.
fn resolve_state(dir: &Path, named: PathBuf) -> Result<PathBuf> {
    let mut candidates = vec![dir.join(&named)];
    if let Some(base) = named.file_name().filter(|_| named.is_absolute()) {
        candidates.push(dir.join(base));
    }
    match candidates.iter().find(|p| index_path(p).is_file()) {
        Some(p) => Ok(p.clone()),
        // A V1 checkpoint (TensorSliceWriter) is a single file at the prefix itself.
        None if candidates.iter().any(|p| p.is_file()) => Err(Error::Unsupported(format!(
            "the `checkpoint` file of {} names {}, a single file without {}: a TensorFlow V1 \
             checkpoint, which paramdex does not read (save it again in TensorFlow with the \
             default V2 format)",
            dir.display(),
            named.display(),
            index_path(&named).display()
        ))),
        None => Err(Error::io(
            format!(
                "opening the latest checkpoint of {} (its `checkpoint` file names {})",
                dir.display(),
                named.display()
            ),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} does not exist", index_path(&candidates[0]).display()),
            ),
        )),
    }
}

/// The prefix of the one `*.index` table in `dir`, if there is exactly one.
fn resolve_single_index(dir: &Path) -> Result<Option<PathBuf>> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    let mut found = Vec::new();
    for ent in entries {
        let ent = ent.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let p = ent.path();
        let is_index =
            p.extension().is_some_and(|x| x == "index") && p.is_file() && ends_with_table_magic(&p);
        if is_index {
            found.push(p);
        }
    }
    found.sort();
    match found.len() {
        0 => Ok(None),
        1 => Ok(found.pop().map(|p| p.with_extension(""))),
        _ => Err(Error::InvalidArgument(format!(
            "{} holds several checkpoints ({}); name one by its prefix",
            dir.display(),
            found
                .iter()
                .map(|p| p.with_extension("").display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

/// Whether the file ends with the LevelDB/TensorFlow table magic.
fn ends_with_table_magic(p: &Path) -> bool {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8)).is_ok()
        && f.read_exact(&mut tail).is_ok()
        && u64::from_le_bytes(tail) == crate::table::TABLE_MAGIC
}

/// Parses a protobuf text-format string literal (`"..."` or `'...'`, C escapes, octal bytes).
fn parse_text_string(s: &str) -> Option<String> {
    let q = s.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let body = s.get(1..)?;
    let mut out = Vec::new();
    let mut it = body.bytes().peekable();
    loop {
        let b = it.next()?;
        if char::from(b) == q {
            break;
        }
        if b != b'\\' {
            out.push(b);
            continue;
        }
        let e = it.next()?;
        out.push(match e {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match it.peek() {
                        Some(&d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            it.next();
                        }
                        _ => break,
                    }
                }
                u8::try_from(v).ok()?
            }
            other => other, // \\ \" \' and anything else taken literally
        });
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_strings() {
        assert_eq!(parse_text_string("\"ckpt-1\"").as_deref(), Some("ckpt-1"));
        assert_eq!(
            parse_text_string(r#""a\"b\\c\303\274""#).as_deref(),
            Some("a\"b\\cü")
        );
        assert_eq!(parse_text_string("'x'").as_deref(), Some("x"));
        assert_eq!(parse_text_string("\"unterminated"), None);
        assert_eq!(parse_text_string("bare"), None);
    }

    #[test]
    fn data_file_names() {
        assert_eq!(data_file_stem("m.ckpt.data-00000-of-00001"), Some("m.ckpt"));
        assert_eq!(data_file_stem("ckpt-1.data-00003-of-00010"), Some("ckpt-1"));
        assert_eq!(data_file_stem("x.data-0-of-1"), None);
        assert_eq!(data_file_stem(".data-00000-of-00001"), None);
        assert_eq!(data_file_stem("model.pdiparams"), None);
    }
}
