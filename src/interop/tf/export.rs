//! Writing TensorFlow checkpoints: a plain bundle from any store (the exporter of
//! [`OutputFormat::TensorFlow`](crate::interop::OutputFormat::TensorFlow)), and a zero-copy
//! export of a native file ([`export_tf`]).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use prost::Message;

use super::checkpoint::{data_path, index_path};
use super::strings;
use crate::error::{Error, IoContext, Result};
use crate::format::{crc32c, mask_crc};
use crate::interop::store::{ExportJob, Kind, TensorData, TensorInfo, Written};
use crate::name::display;
use crate::native::staging;
use crate::native::MappedReader;
use crate::native::{Dims, IndexEntry, TF_BUNDLE_VERSION};
use crate::proto::tensorflow::{BundleHeaderProto, VersionDef};
use crate::table::{TableBuilder, TableOptions};

/// TensorFlow's `DT_STRING`.
const DT_STRING: i32 = 7;

/// What [`export_tf`] made.
#[derive(Clone, Debug)]
pub struct ExportTfReport {
    /// `PREFIX.index`.
    pub index_path: PathBuf,
    /// `PREFIX.data-00000-of-00001` (for a sharded checkpoint, its first data file).
    pub data_path: PathBuf,
    /// Every data file, in order.
    pub data_paths: Vec<PathBuf>,
    /// True when hard links were impossible and the file was copied.
    pub copied: bool,
}

/// Whether `a` and `b` exist and are the same file (same device and inode).
fn same_file(a: &Path, b: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        match (std::fs::metadata(a), std::fs::metadata(b)) {
            (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
            _ => false,
        }
    }
    #[cfg(not(unix))]
    {
        matches!((a.canonicalize(), b.canonicalize()), (Ok(x), Ok(y)) if x == y)
    }
}

/// Stages a file beside `target` that is the same file as `src`: a hard link when possible,
/// else a copy (returned `true`).
fn stage_same(src: &Path, target: &Path) -> Result<(staging::Staged, bool)> {
    if let Ok(link) = staging::stage_link(src, target, ".tf-tmp") {
        return Ok((link, false));
    }
    let (mut tmp, staged) = staging::stage_file(target, ".tf-tmp")?;
    let mut copy = || -> std::io::Result<()> {
        std::io::copy(&mut File::open(src)?, &mut tmp)?;
        tmp.sync_all()
    };
    copy().map_err(|e| {
        Error::io(
            format!("copying {} to {}", src.display(), target.display()),
            e,
        )
    })?;
    Ok((staged, true))
}

/// Makes the native file `native` loadable by TensorFlow as checkpoint `prefix`:
/// `PREFIX.index` and `PREFIX.data-00000-of-00001` become hard links to it (copies when the
/// file system cannot link them, reported in [`ExportTfReport::copied`]). Existing files of those
/// names are replaced, both in one step under the staging lock; missing parent directories of
/// the prefix are created. The file is opened and validated as a native file first.
///
/// A sharded native checkpoint (named by its prefix or its `PREFIX.index`) is already a
/// TensorFlow checkpoint: its index and every data file are linked under the new prefix's
/// names, data files first (each of them checked against the index first).
///
/// TensorFlow sees every tensor with its name, dtype, shape and bytes; it does not see LoD,
/// alignment or the Paddle record headers. A file holding compressed records (SPEC.md 3.4) is
/// not one TensorFlow reads: its tensors are decoded into a new checkpoint instead (`copied`).
pub fn export_tf(native: &Path, prefix: &Path) -> Result<ExportTfReport> {
    // Only a native file can serve as both index and data. Anything else (a directory, a
    // prefix, another format) is refused before a path is created; the caller can say what it
    // is (`open_any`) and what to do instead.
    let sharded_index = crate::native::index_path(native);
    if !native.exists() && !sharded_index.exists() {
        return Err(Error::io(
            format!("opening {}", native.display()),
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
        ));
    }
    if !native.is_file() {
        let sharded = MappedReader::open(&sharded_index)
            .ok()
            .filter(MappedReader::is_sharded);
        match sharded {
            Some(r) => return export_sharded(&r, prefix),
            None => {
                return Err(Error::UnrecognizedFormat {
                    path: native.display().to_string(),
                    looks_like: None,
                    detail: "not a native paramdex file (export-tf needs one: it serves as both \
                             the index and the data file)"
                        .into(),
                })
            }
        }
    }
    let r = MappedReader::open(native)?;
    if r.is_sharded() {
        return export_sharded(&r, prefix);
    }
    if r.header().format_version >= crate::native::COMPRESSED_VERSION {
        return export_decoded(r, prefix);
    }
    let index = index_path(prefix);
    let data = data_path(prefix, 0, 1);
    let dir = staging::parent_dir(&index);
    let mut copied = false;
    let mut moves = Vec::new();
    // Each name that is not already the native file gets a staged link (or copy). When the
    // index had to be copied, the data name links to that copy instead of making a second one.
    let mut data_src = native.to_path_buf();
    if !same_file(native, &index) {
        let (staged, c) = stage_same(native, &index)?;
        if c {
            data_src = staged.path().to_path_buf();
        }
        copied |= c;
        moves.push((staged, index.as_path()));
    }
    if !same_file(native, &data) {
        let (staged, c) = stage_same(&data_src, &data)?;
        copied |= c;
        moves.push((staged, data.as_path()));
    }
    staging::commit(moves)?;
    staging::sync_dir(&dir)?;
    Ok(ExportTfReport {
        index_path: index,
        data_path: data.clone(),
        data_paths: vec![data],
        copied,
    })
}

/// [`export_tf`] of a native file holding compressed records (SPEC.md 3.4), which TensorFlow
/// cannot read in place: a TensorFlow checkpoint of its decoded tensors, written as
/// `convert --to tf` writes one (a copy, reported as such).
fn export_decoded(r: MappedReader, prefix: &Path) -> Result<ExportTfReport> {
    let reader = crate::native::Reader::from_mapped(r);
    let job = ExportJob {
        store: &reader,
        dst: prefix,
        writer: &crate::native::WriterOptions::default(),
        metadata: &crate::native::Metadata::new(),
        progress: &crate::progress::NoProgress,
        overwrite: true,
        upload: None,
    };
    export(&job)?;
    let data = data_path(prefix, 0, 1);
    Ok(ExportTfReport {
        index_path: index_path(prefix),
        data_path: data.clone(),
        data_paths: vec![data],
        copied: true,
    })
}

/// [`export_tf`] of a sharded checkpoint: its data files, then its index, under `prefix`,
/// each a staged hard link (or copy) renamed into place in that order, so the index appears
/// last.
fn export_sharded(r: &MappedReader, prefix: &Path) -> Result<ExportTfReport> {
    let index = index_path(prefix);
    let dir = staging::parent_dir(&index);
    let n = r.header().shards.len() as u32;
    let mut copied = false;
    let mut data_paths = Vec::with_capacity(n as usize);
    let mut staged = Vec::new();
    for k in 0..n {
        let shard = r.shard(k)?;
        let src = Path::new(shard.path());
        let target = data_path(prefix, k, n);
        if !same_file(src, &target) {
            let (s, c) = stage_same(src, &target)?;
            copied |= c;
            staged.push((s, target.clone()));
        }
        data_paths.push(target);
    }
    if !same_file(Path::new(r.path()), &index) {
        let (s, c) = stage_same(Path::new(r.path()), &index)?;
        copied |= c;
        staged.push((s, index.clone()));
    }
    let (items, targets): (Vec<_>, Vec<_>) = staged.into_iter().unzip();
    staging::commit(items.into_iter().zip(targets.iter().map(PathBuf::as_path)))?;
    staging::sync_dir(&dir)?;
    Ok(ExportTfReport {
        index_path: index,
        data_path: data_paths[0].clone(),
        data_paths,
        copied,
    })
}

/// The paths a TensorFlow export to `prefix` writes, `PREFIX.index` and
/// `PREFIX.data-00000-of-00001`, and any other data shard `PREFIX.data-*` already there (a new
/// checkpoint written over an old one would sit beside its stale shards).
pub(crate) fn outputs(prefix: &Path) -> Vec<PathBuf> {
    let mut v = vec![index_path(prefix), data_path(prefix, 0, 1)];
    let (Some(dir), Some(name)) = (prefix.parent(), prefix.file_name()) else {
        return v;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let mut shard_prefix = name.to_os_string();
    shard_prefix.push(".data-");
    let shard_prefix = shard_prefix.as_encoded_bytes();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let n = e.file_name();
            if n.as_encoded_bytes().starts_with(shard_prefix) {
                let p = prefix.with_file_name(&n);
                if !v.contains(&p) {
                    v.push(p);
                }
            }
        }
    }
    v
}

/// For a packed dtype whose unpacked type TensorFlow has a number for, how it is packed.
fn unpacked_for_tf(d: crate::DType) -> Option<crate::dtype::Packing> {
    d.packing().filter(|p| p.unpacked.tf_number().is_some())
}

/// Why a TensorFlow bundle cannot hold `t`, if it cannot: it holds numeric and string tensors,
/// but not what paramdex does not decode (opaque types); not a name that is empty or starts
/// with a NUL byte (TensorFlow reserves the empty key for its header and keys starting with NUL
/// for slices); not a rank above 254 or a dimension above `i64::MAX`.
pub(crate) fn cannot_hold(t: &TensorInfo) -> Option<String> {
    if t.kind.is_opaque() {
        return t.kind.not_numeric();
    }
    if let Some(d) = t.kind.numeric().filter(|d| d.tf_number().is_none()) {
        // A packed type whose values TensorFlow has (float4_e2m1fn_x2) is written unpacked, one
        // value per byte; any other would be read as uint8, its type lost.
        match unpacked_for_tf(d) {
            Some(p) if p.unpacked_shape(&t.shape).is_some() => {}
            Some(p) => {
                return Some(format!(
                    "a {} scalar, which TensorFlow's {} (one value per byte) cannot hold",
                    d.name(),
                    p.unpacked.name()
                ))
            }
            None => {
                return Some(format!(
                    "{}, which TensorFlow has no DataType for",
                    d.name()
                ))
            }
        }
    }
    if t.name.first().is_none_or(|&b| b == 0) {
        return Some(
            "named with an empty name or one starting with a NUL byte (TensorFlow's keys for \
             its header and for slices)"
                .into(),
        );
    }
    crate::interop::store::shape_limits(t)
}

/// The TensorFlow exporter: every tensor of the job's store as a plain TensorFlow bundle,
/// `PREFIX.data-00000-of-00001` (the raw bytes of each tensor, in name order, unaligned, as
/// TensorFlow's `BundleWriter` writes them; string tensors in TensorFlow's `DT_STRING` layout)
/// and `PREFIX.index` (a table byte-compatible with TensorFlow's), streaming the store's
/// listing. Both are written under temporary names, synced, then renamed together.
/// Partitioned inputs are written as whole tensors; LoD and metadata are dropped (TensorFlow
/// has neither).
pub(crate) fn export(job: &ExportJob<'_>) -> Result<Written> {
    let (store, prefix) = (job.store, job.dst);
    let index_target = index_path(prefix);
    let data_target = data_path(prefix, 0, 1);
    let dir = staging::parent_dir(&index_target);

    let (data_file, data_tmp) = staging::stage_file(&data_target, ".tf-tmp")?;
    let (index_file, index_tmp) = staging::stage_file(&index_target, ".tf-tmp")?;
    let mut data_out = BufWriter::with_capacity(8 << 20, &data_file);
    let mut index_out = BufWriter::new(&index_file);
    let mut table = TableBuilder::new(&mut index_out, 0, TableOptions::default())?;
    let header = BundleHeaderProto {
        num_shards: 1,
        endianness: 0,
        version: Some(VersionDef {
            producer: TF_BUNDLE_VERSION,
            min_consumer: 0,
            bad_consumers: vec![],
        }),
    };
    table.add(b"", &header.encode_to_vec())?;

    let mut offset = 0u64;
    let mut written = Written::default();
    let mut value = Vec::new();
    for info in store.scan(b"")? {
        let info = info?;
        if info.name.first().is_none_or(|&b| b == 0) {
            return Err(Error::InvalidArgument(format!(
                "tensor name {} cannot be written to a TensorFlow checkpoint: TensorFlow reserves the empty key for the header and keys starting with a NUL byte for slices",
                display(&info.name)
            )));
        }
        let t = store.load(&info.name)?.ok_or_else(|| Error::NotFound {
            name: display(&info.name),
            path: format!("{} input", store.format().name()),
        })?;
        let mut shape = Dims::from_slice(&t.info.shape);
        let (tf_dtype, bytes, crc) = match (&t.data, &t.info.kind) {
            // float4_e2m1fn_x2 as TensorFlow's float4_e2m1fn, one value per byte (`cannot_hold`
            // let only such packed types through).
            (TensorData::Bytes(b), Kind::Numeric(d)) if d.tf_number().is_none() => {
                let (Some(p), Some(s)) = (
                    unpacked_for_tf(*d),
                    unpacked_for_tf(*d).and_then(|p| p.unpacked_shape(&t.info.shape)),
                ) else {
                    return Err(Error::Unsupported(format!(
                        "tensor {} is {}, which TensorFlow has no DataType for",
                        display(&info.name),
                        d.name()
                    )));
                };
                let v = p.unpack(b).ok_or_else(|| Error::InvalidTensor {
                    name: display(&info.name),
                    detail: format!("{} bytes are not whole groups of {}", b.len(), d.name()),
                })?;
                shape = Dims::from_slice(&s);
                let crc = mask_crc(crc32c(&v));
                (p.unpacked.tf_code(), std::borrow::Cow::Owned(v), crc)
            }
            (TensorData::Bytes(b), Kind::Numeric(d)) => (
                d.tf_code(),
                std::borrow::Cow::Borrowed(&b[..]),
                mask_crc(crc32c(b)),
            ),
            // A bytes value is a scalar string tensor (SPEC.md 6.1).
            (TensorData::Bytes(b), Kind::Bytes) => {
                let (b, crc) = strings::encode(&[b.to_vec()]);
                shape = Dims::new();
                (DT_STRING, std::borrow::Cow::Owned(b), crc)
            }
            (TensorData::Strings(s), Kind::String) => {
                let (b, crc) = strings::encode(s);
                (DT_STRING, std::borrow::Cow::Owned(b), crc)
            }
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "tensor {}: the store returned data that does not match its dtype {}",
                    display(&info.name),
                    t.info.kind.name()
                )))
            }
        };
        data_out.write_all(&bytes).ctx("writing", &data_target)?;
        let e = IndexEntry {
            tf_dtype,
            shape,
            offset,
            size: bytes.len() as u64,
            crc32c: crc,
            ..IndexEntry::default()
        };
        offset += bytes.len() as u64;
        value.clear();
        e.encode(&mut value);
        table.add(&info.name, &value)?;
        written.tensors += 1;
        written.data_bytes = written.data_bytes.saturating_add(info.nbytes);
        job.progress.advance(info.nbytes);
    }
    table.finish()?;
    index_out.flush().ctx("writing", &index_target)?;
    drop(index_out);
    data_out.flush().ctx("writing", &data_target)?;
    drop(data_out);
    data_file.sync_all().ctx("syncing", &data_target)?;
    index_file.sync_all().ctx("syncing", &index_target)?;
    // Both names in one commit: an interruption leaves both old files or both new ones.
    staging::commit([
        (data_tmp, data_target.as_path()),
        (index_tmp, index_target.as_path()),
    ])?;
    staging::sync_dir(&dir)?;
    for path in [index_target, data_target] {
        let len = std::fs::metadata(&path)
            .ctx("reading metadata of", &path)?
            .len();
        written.output_bytes = written.output_bytes.saturating_add(len);
        written.paths.push(path);
    }
    Ok(written)
}
