//! Writing what Paddle reads: the exporters of a combined `.pdiparams` ([`export_combined`],
//! [`OutputFormat::PaddleCombined`]) and of tensor files ([`export_tensor_files`],
//! [`OutputFormat::PaddleTensors`]).
//!
//! Records are plain Paddle records (no name, no CRC, alignment 1), byte-identical to what
//! Paddle's `save_combine` / `save` ops write for the same tensors. Every file is written to a
//! temporary file in its destination directory, synced, and renamed into place.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::interop::store::{ExportJob, Kind, TensorData, TensorInfo, TensorStore, Written};
#[cfg(doc)]
use crate::interop::OutputFormat;
use crate::name::display;
use crate::record::{data_len, encode_header, RecordSpec};

/// Extension of a combined parameter file.
const PARAMS_EXT: &str = "pdiparams";

/// The path [`OutputFormat::PaddleCombined`] writes for `out`: `out` itself if it already ends in
/// `.pdiparams`, else `out.pdiparams` (so `OUT` is a model prefix, as Paddle's loaders take it).
pub fn combined_path(out: &Path) -> PathBuf {
    if out.extension().is_some_and(|e| e == PARAMS_EXT) {
        out.to_path_buf()
    } else {
        let mut s = out.as_os_str().to_os_string();
        s.push(".");
        s.push(PARAMS_EXT);
        PathBuf::from(s)
    }
}

/// The exporter of [`OutputFormat::PaddleCombined`]: the job's store as a Paddle combined
/// parameter file, one plain record per tensor, in bytewise name order (the order
/// `load_combine` expects), nothing else, streaming the store's listing. The output is
/// [`combined_path`]`(dst)`, which Paddle's `load_inference_model` reads together with the
/// model's original program placed beside it as `DST.pdmodel` or `DST.json`.
///
/// # Errors
///
/// [`Error::Unsupported`] for a store without tensors or with tensors that are not numeric;
/// [`Error::DuplicateName`] (or [`Error::InvalidArgument`]) for a store listing a name twice
/// (or out of order); [`Error::InvalidTensor`] for data whose length does not match dtype and
/// shape; I/O errors.
pub(crate) fn export_combined(job: &ExportJob<'_>) -> Result<Written> {
    let store = job.store;
    let mut tensors = store.scan(b"")?.peekable();
    if tensors.peek().is_none() {
        return Err(no_tensors());
    }
    let dst = combined_path(job.dst);
    let mut written = Written::default();
    atomic_write(&dst, |w| {
        let mut offset = 0u64;
        let mut previous: Option<Vec<u8>> = None;
        for info in tensors {
            let info = info?;
            check_order(previous.as_deref(), &info.name)?;
            let len = write_record(w, store, &info, offset)?;
            offset = offset.saturating_add(len);
            written.tensors += 1;
            written.data_bytes = written.data_bytes.saturating_add(info.nbytes);
            job.progress.advance(info.nbytes);
            previous = Some(info.name);
        }
        written.output_bytes = offset;
        Ok(())
    })?;
    written.paths.push(dst);
    Ok(written)
}

/// The exporter of [`OutputFormat::PaddleTensors`]: the job's store as Paddle tensor files
/// (each one record, as `paddle.base.core.save_dense_tensor` and the `save` op write, LoD
/// included):
///
/// - one tensor: the file `dst`; if `dst` is an existing directory, the file `dst/NAME`;
/// - several tensors: the directory `dst` (created if needed) with one file per tensor at the
///   relative path NAME, as `paddle.static.save_vars(filename=None)` lays them out (a `/` in a
///   name makes a subdirectory). Names must be safe relative paths ([`relative_path`]); a name
///   may not also be a directory of another name (`a` and `a/b`). All names are checked
///   before anything is written (the listing is held in memory for that: one name per file).
///
/// # Errors
///
/// [`Error::Unsupported`] for a store without tensors or with tensors that are not numeric;
/// [`Error::InvalidArgument`] for an unsafe or conflicting name, or `dst` being an existing
/// file when several tensors are written; [`Error::InvalidTensor`] for inconsistent data; I/O
/// errors.
pub(crate) fn export_tensor_files(job: &ExportJob<'_>) -> Result<Written> {
    let (store, out) = (job.store, job.dst);
    let list = numeric_list(store)?;
    let mut written = Written::default();
    let mut write = |info: &TensorInfo, dst: PathBuf| -> Result<()> {
        written.output_bytes = written
            .output_bytes
            .saturating_add(write_one(store, info, &dst)?);
        written.tensors += 1;
        written.data_bytes = written.data_bytes.saturating_add(info.nbytes);
        written.paths.push(dst);
        job.progress.advance(info.nbytes);
        Ok(())
    };
    if let [info] = list.as_slice() {
        let dst = if out.is_dir() {
            let dst = out.join(relative_path(&info.name)?);
            if let Some(parent) = dst.parent() {
                std::fs::create_dir_all(parent).ctx("creating directory", parent)?;
            }
            dst
        } else {
            out.to_path_buf()
        };
        write(info, dst)?;
        return Ok(written);
    }
    if out.exists() && !out.is_dir() {
        return Err(Error::InvalidArgument(format!(
            "{}: the input holds {} tensors, so --to paddle-tensor writes a directory of \
             per-variable files, but this path is an existing file",
            out.display(),
            list.len()
        )));
    }
    let mut rels = Vec::with_capacity(list.len());
    for info in &list {
        rels.push(relative_path(&info.name)?);
    }
    let all: HashSet<&[u8]> = list.iter().map(|i| i.name.as_slice()).collect();
    for info in &list {
        let n = info.name.as_slice();
        for (i, _) in n.iter().enumerate().filter(|(_, &b)| b == b'/') {
            if all.contains(&n[..i]) {
                return Err(Error::InvalidArgument(format!(
                    "tensor names {} and {} cannot both be files: the first would have to be a \
                     directory for the second",
                    display(&n[..i]),
                    display(n)
                )));
            }
        }
    }
    std::fs::create_dir_all(out).ctx("creating directory", out)?;
    for (info, rel) in list.iter().zip(rels) {
        let dst = out.join(rel);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).ctx("creating directory", parent)?;
        }
        write(info, dst)?;
    }
    Ok(written)
}

fn no_tensors() -> Error {
    Error::Unsupported("the input holds no tensors: nothing to write".into())
}

/// Records go out in bytewise name order, each name once: `name` must come after `previous`.
fn check_order(previous: Option<&[u8]>, name: &[u8]) -> Result<()> {
    match previous {
        Some(p) if p == name => Err(Error::DuplicateName {
            name: display(name),
        }),
        Some(p) if p > name => Err(Error::InvalidArgument(format!(
            "the input listed tensor {} after {}: not in bytewise name order",
            display(name),
            display(p)
        ))),
        _ => Ok(()),
    }
}

/// The store's tensors in bytewise name order, refusing an empty store and tensors that are
/// not numeric.
fn numeric_list(store: &dyn TensorStore) -> Result<Vec<TensorInfo>> {
    let mut list = store.list()?;
    if list.is_empty() {
        return Err(no_tensors());
    }
    if let Some((what, s)) = list
        .iter()
        .find_map(|t| t.kind.not_numeric().map(|w| (w, t)))
    {
        return Err(Error::Unsupported(format!(
            "tensor {} is {what}; Paddle records hold numeric tensors only",
            display(&s.name)
        )));
    }
    list.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = list.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::DuplicateName {
            name: display(&w[0].name),
        });
    }
    Ok(list)
}

/// Writes one tensor file; returns its length.
fn write_one(store: &dyn TensorStore, info: &TensorInfo, dst: &Path) -> Result<u64> {
    let mut len = 0;
    atomic_write(dst, |w| {
        len = write_record(w, store, info, 0)?;
        Ok(())
    })?;
    Ok(len)
}

/// Appends the plain Paddle record of tensor `info` (loaded from `store`) at `offset`; returns
/// its length.
fn write_record(
    w: &mut dyn Write,
    store: &dyn TensorStore,
    info: &TensorInfo,
    offset: u64,
) -> Result<u64> {
    let t = store.load(&info.name)?.ok_or_else(|| Error::NotFound {
        name: display(&info.name),
        path: format!("{} input", store.format().name()),
    })?;
    let (Kind::Numeric(dtype), TensorData::Bytes(data)) = (t.info.kind, &t.data) else {
        return Err(Error::Unsupported(format!(
            "tensor {} is {}; Paddle records hold numeric tensors only",
            display(&info.name),
            t.info.kind.not_numeric().unwrap_or_default()
        )));
    };
    let want = data_len(dtype, &t.info.shape);
    if want != Some(data.len() as u64) {
        return Err(Error::InvalidTensor {
            name: display(&info.name),
            detail: format!(
                "{} data bytes, but {} {:?} needs {}",
                data.len(),
                dtype.name(),
                t.info.shape,
                want.map_or_else(|| "more than 2^64".to_string(), |n| n.to_string())
            ),
        });
    }
    let mut header = Vec::new();
    let spec = RecordSpec {
        dtype,
        dims: &t.info.shape,
        lod: &t.info.lod,
        name: None,
        data_crc: None,
        full_shape: None,
    };
    encode_header(&spec, offset, 1, &mut header)?;
    let io = |e| Error::io(format!("writing tensor {}", display(&info.name)), e);
    w.write_all(&header).map_err(io)?;
    w.write_all(data).map_err(io)?;
    Ok((header.len() as u64).saturating_add(data.len() as u64))
}

/// Writes `dst` through a temporary file in its directory: `fill`, flush, fsync, rename. On
/// error the temporary file is removed and `dst` is untouched.
fn atomic_write(dst: &Path, fill: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    let tmp = crate::native::staging::temp_beside(dst, ".pdx-tmp")?;
    let mut w = std::io::BufWriter::new(tmp);
    fill(&mut w)?;
    let tmp = w
        .into_inner()
        .map_err(|e| Error::io(format!("writing {}", dst.display()), e.into_error()))?;
    tmp.as_file().sync_all().ctx("syncing", dst)?;
    tmp.persist(dst)
        .map_err(|e| Error::io(format!("renaming into {}", dst.display()), e.error))?;
    Ok(())
}

/// A tensor name as a safe relative path, as [`OutputFormat::PaddleTensors`] needs it: not
/// empty, no NUL, not absolute, no empty, `.` or `..` component (and, off Unix, valid UTF-8
/// without `\` or `:`).
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what is unsafe about the name.
pub fn relative_path(name: &[u8]) -> Result<PathBuf> {
    let bad = |why: &str| {
        Err(Error::InvalidArgument(format!(
            "tensor name {} cannot be used as a file name: {why}",
            display(name)
        )))
    };
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.contains(&0) {
        return bad("it contains a NUL byte");
    }
    if name.first() == Some(&b'/') {
        return bad("it is an absolute path");
    }
    for comp in name.split(|&b| b == b'/') {
        match comp {
            b"" => return bad("it has an empty path component (`//` or a trailing `/`)"),
            b"." | b".." => return bad("it has a `.` or `..` path component"),
            _ => {}
        }
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
    }
    #[cfg(not(unix))]
    {
        let Ok(s) = std::str::from_utf8(name) else {
            return bad("it is not UTF-8");
        };
        if s.contains('\\') || s.contains(':') {
            return bad("it contains `\\` or `:`");
        }
        Ok(s.split('/').collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths() {
        assert_eq!(
            relative_path(b"a/b.w_0").unwrap(),
            Path::new("a").join("b.w_0")
        );
        assert!(relative_path("ünï/cödé".as_bytes()).is_ok());
        for bad in [
            &b""[..],
            b"/abs",
            b"a//b",
            b"a/",
            b"..",
            b"a/../b",
            b"./a",
            b"a\0b",
        ] {
            assert!(relative_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn combined_paths() {
        assert_eq!(combined_path(Path::new("o/m")), Path::new("o/m.pdiparams"));
        assert_eq!(
            combined_path(Path::new("o/m.pdiparams")),
            Path::new("o/m.pdiparams")
        );
        assert_eq!(
            combined_path(Path::new("o/m.v2")),
            Path::new("o/m.v2.pdiparams")
        );
    }
}
