//! Exporting to object storage (`export` of a URL, which comes here): native output is written straight to the
//! object by multipart upload as the tensors are written; every other format is exported to
//! a staged local directory first and its files are then uploaded, each by multipart upload.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::export::{export, export_checked, ExportOptions, ExportReport, OutputFormat};
use crate::interop::store::TensorStore;
use crate::native::staging;
use crate::remote::{object_exists, split_s3_url, upload_file, UploadOptions};

/// Writes every tensor of `store` as `format` to the object(s) at `url`, as [`export`] does
/// to a path: `s3://bucket/key` for an object (configured as [`crate::remote::resolve`]
/// says), `file:///path` for a local path.
///
/// Native output streams to the object by multipart upload (`crate::remote::ObjectUpload`):
/// parts go out while tensors are written, memory stays bounded by a few parts, and the
/// object appears only when the upload completes; on any error the upload is aborted and
/// nothing appears (an object already under the name stays as it was). Other formats are
/// written to a local temporary directory (under the system's temporary directory, removed
/// afterwards) and each of their files is then uploaded the same way, beside `key` as the
/// format names them (a TensorFlow checkpoint `key.index` and `key.data-00000-of-00001`:
/// the index last; Paddle tensor files under `key/`). Each object appears whole, but a
/// multi-file output appears one object after the other.
///
/// Without [`ExportOptions::overwrite`], an existing object under one of the output names is
/// [`Error::OutputExists`] (one HEAD request per output, before anything is read).
/// [`ExportReport::paths`] are the objects' URLs.
pub(crate) fn export_url(
    store: &dyn TensorStore,
    format: OutputFormat,
    url: &str,
    opts: &ExportOptions<'_>,
    upload: &UploadOptions,
) -> Result<ExportReport> {
    if let Some(path) = url.strip_prefix("file://") {
        return export(store, format, Path::new(path), opts);
    }
    upload.validate()?;
    let (base, dir_url) = check_objects(format, url, opts.overwrite)?;
    let to_url = |rel: &Path| format!("{dir_url}{}", rel.to_string_lossy());
    if format == OutputFormat::Native {
        let mut rep = export_checked(store, format, Path::new(url), opts, Some((url, upload)))?;
        rep.paths = vec![PathBuf::from(url)];
        return Ok(rep);
    }
    let staged = staging::stage_dir(&std::env::temp_dir().join("paramdex-upload"), ".tmp")?;
    let local = staged.path().join(base);
    let mut rep = export(
        store,
        format,
        &local,
        &ExportOptions {
            overwrite: true,
            ..opts.clone()
        },
    )?;
    let mut files = Vec::new();
    collect_files(staged.path(), &mut files)?;
    // The index of a checkpoint last: a reader finds the data files it names complete.
    files.sort_by_key(|f| (f.extension().is_some_and(|e| e == "index"), f.clone()));
    let mut paths = Vec::with_capacity(files.len());
    for f in files {
        let rel = f.strip_prefix(staged.path()).unwrap_or(&f);
        let out = to_url(rel);
        upload_file(&f, &out, upload)?;
        paths.push(PathBuf::from(out));
    }
    rep.paths = paths;
    Ok(rep)
}

/// [`OutputFormat::check_outputs`] of an `s3://` URL: without `overwrite`, an object under one
/// of the format's output names is [`Error::OutputExists`] (one HEAD request per output).
/// Returns the key's last component and the URL of its directory (ending in `/`), beside which
/// the outputs are named.
pub(crate) fn check_objects(
    format: OutputFormat,
    url: &str,
    overwrite: bool,
) -> Result<(&str, &str)> {
    let (_, key) = split_s3_url(url)?;
    let base = key.rsplit('/').next().unwrap_or(key);
    if base.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{url}: names no object (the key ends with /)"
        )));
    }
    let dir_url = &url[..url.len() - base.len()];
    if !overwrite {
        for p in format.outputs(Path::new(base)) {
            let out = format!("{dir_url}{}", p.to_string_lossy());
            if object_exists(&out)? {
                return Err(Error::OutputExists { path: out });
            }
        }
    }
    Ok((base, dir_url))
}

/// Every file under `dir`, recursively.
fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(format!("listing {}", dir.display()), e))?;
        let path = entry.path();
        let kind = entry
            .file_type()
            .map_err(|e| Error::io(format!("listing {}", path.display()), e))?;
        if kind.is_dir() {
            collect_files(&path, out)?;
        } else if kind.is_file() {
            out.push(path);
        }
    }
    Ok(())
}
