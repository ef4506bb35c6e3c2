//! safetensors files (Hugging Face), both ways, through the `safetensors` crate.
//!
//! * Reading: [`SafetensorsStore`] maps a `.safetensors` file, has the crate parse and check
//!   its header (offsets contiguous and within the file, sizes equal to shape × dtype, header at
//!   most 100 MB), and serves the tensors zero-copy as a [`TensorStore`]. [`open_store`] is the
//!   detector [`crate::interop::open_any`] uses: 8-byte little-endian header length, then `{`.
//! * Writing: the exporter of
//!   [`OutputFormat::Safetensors`](crate::interop::OutputFormat::Safetensors) writes any store
//!   with the crate's serializer ([`crate::interop::export`]).
//!
//! Dtypes: every dtype both formats have (see [`to_safetensors_dtype`]); complex128 has no
//! safetensors type, and safetensors' F4/F6/F8_E8M0/FNUZ types have no paramdex type: those
//! tensors are refused with an error naming them. The `__metadata__` string map becomes
//! [`Metadata`] of string values, and [`Metadata::to_strings`] turns metadata back into it
//! (values that are not strings as their JSON text). safetensors has no LoD and no string
//! tensors, and its names are UTF-8: tensors that need any of these cannot be exported to it
//! ([`OutputFormat::cannot_hold`](crate::interop::OutputFormat::cannot_hold)).

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use safetensors::tensor::Metadata as StMetadata;
use safetensors::{Dtype as StDtype, SafeTensors, View};

use crate::dtype::DType;
use crate::error::{path_str, Error, Result};
use crate::interop::store::{
    scan_sorted, DataLocation, ExportJob, Format, Kind, LoadedTensor, TensorData, TensorInfo,
    TensorInfos, TensorStore, VerifySummary, Written,
};
use crate::name;
use crate::native::staging;
use crate::native::Metadata;
use crate::native::Source;
use crate::progress::Progress;

/// The safetensors dtype of a paramdex dtype, if safetensors has it.
pub fn to_safetensors_dtype(d: DType) -> Option<StDtype> {
    Some(match d {
        DType::Bool => StDtype::BOOL,
        DType::Int8 => StDtype::I8,
        DType::UInt8 => StDtype::U8,
        DType::Int16 => StDtype::I16,
        DType::UInt16 => StDtype::U16,
        DType::Int32 => StDtype::I32,
        DType::UInt32 => StDtype::U32,
        DType::Int64 => StDtype::I64,
        DType::UInt64 => StDtype::U64,
        DType::Float16 => StDtype::F16,
        DType::BFloat16 => StDtype::BF16,
        DType::Float32 => StDtype::F32,
        DType::Float64 => StDtype::F64,
        DType::Complex64 => StDtype::C64,
        DType::Float8E4M3FN => StDtype::F8_E4M3,
        DType::Float8E5M2 => StDtype::F8_E5M2,
        DType::Complex128 => return None,
    })
}

/// The paramdex dtype of a safetensors dtype, if paramdex has it (`F8_E4M3` is float8_e4m3fn,
/// as in PyTorch's `float8_e4m3fn`).
pub fn from_safetensors_dtype(d: StDtype) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&p| to_safetensors_dtype(p) == Some(d))
}

/// An open `.safetensors` file.
#[derive(Debug)]
pub struct SafetensorsStore {
    source: Source,
    path: String,
    /// Offset of the first data byte (8 + header length).
    data_start: usize,
    meta: StMetadata,
    /// Tensor names in bytewise order.
    names: Vec<String>,
}

fn corrupt(path: &str, e: safetensors::SafeTensorError) -> Error {
    Error::corrupt(
        "safetensors header",
        8,
        format!("{path}: {e} (checked by the safetensors crate)"),
    )
}

impl SafetensorsStore {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsStore> {
        let path = path.as_ref();
        Self::from_source(Source::map(path)?, path_str(path))
    }

    /// Parses a safetensors file held in memory.
    pub fn from_bytes(bytes: impl Into<std::sync::Arc<[u8]>>) -> Result<SafetensorsStore> {
        Self::from_source(Source::Memory(bytes.into()), "<memory>".into())
    }

    fn from_source(source: Source, path: String) -> Result<SafetensorsStore> {
        let (n, meta) = SafeTensors::read_metadata(&source).map_err(|e| corrupt(&path, e))?;
        let mut names: Vec<String> = meta.tensors().into_keys().collect();
        names.sort_unstable();
        Ok(SafetensorsStore {
            data_start: 8 + n,
            source,
            path,
            meta,
            names,
        })
    }

    /// The file's `__metadata__`, as string values.
    pub fn metadata(&self) -> Result<Metadata> {
        match self.meta.metadata() {
            None => Ok(Metadata::new()),
            Some(m) => Metadata::from_strings(m.iter().map(|(k, v)| (k.clone(), v.clone())))
                .map_err(|e| {
                    Error::corrupt(
                        "safetensors header",
                        8,
                        format!("{}: __metadata__: {e}", self.path),
                    )
                }),
        }
    }

    /// Bytes of the JSON header (after the 8-byte length).
    pub fn header_len(&self) -> u64 {
        self.data_start as u64 - 8
    }

    fn info(&self, name: &str) -> Result<(TensorInfo, usize, usize)> {
        let i = self.meta.info(name).ok_or_else(|| Error::NotFound {
            name: name.to_string(),
            path: self.path.clone(),
        })?;
        let dtype = from_safetensors_dtype(i.dtype).ok_or_else(|| {
            Error::Unsupported(format!(
                "{}: tensor {name} is safetensors {}, which paramdex has no dtype for",
                self.path, i.dtype
            ))
        })?;
        let (s, e) = i.data_offsets;
        let start = self.data_start.checked_add(s);
        let end = self.data_start.checked_add(e);
        let (Some(start), Some(end)) = (start, end) else {
            return Err(Error::corrupt(
                "safetensors header",
                8,
                format!("{}: tensor {name}: data offsets overflow", self.path),
            ));
        };
        if start > end || end > self.source.len() {
            return Err(Error::corrupt(
                "safetensors header",
                8,
                format!(
                    "{}: tensor {name}: data [{start}, {end}) is outside the {}-byte file",
                    self.path,
                    self.source.len()
                ),
            ));
        }
        Ok((
            TensorInfo {
                name: name.as_bytes().to_vec(),
                kind: Kind::Numeric(dtype),
                shape: i.shape.iter().map(|&d| d as u64).collect(),
                lod: Vec::new(),
                nbytes: (end - start) as u64,
            },
            start,
            end,
        ))
    }
}

impl TensorStore for SafetensorsStore {
    fn format(&self) -> Format {
        Format::Safetensors
    }

    fn metadata(&self) -> Result<Metadata> {
        SafetensorsStore::metadata(self)
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(scan_sorted(self.list()?, start))
    }

    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.names
            .iter()
            .map(|n| self.info(n).map(|(i, _, _)| i))
            .collect()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(None);
        };
        if self.meta.info(name).is_none() {
            return Ok(None);
        }
        let (info, start, end) = self.info(name)?;
        Ok(Some(LoadedTensor {
            info,
            data: TensorData::Bytes(Cow::Borrowed(&self.source[start..end])),
        }))
    }

    /// safetensors has no checksums: checks the structure (done at open) and that every dtype
    /// is one paramdex knows.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        let list = self.list()?;
        Ok(VerifySummary {
            tensors: list.len() as u64,
            data_bytes: list.iter().map(|t| t.nbytes).sum(),
            checksums: 0,
        })
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(None);
        };
        if self.meta.info(name).is_none() {
            return Ok(None);
        }
        let (_, start, end) = self.info(name)?;
        Ok(Some(DataLocation {
            path: self.path.clone().into(),
            offset: start as u64,
            len: (end - start) as u64,
            crc32c: None,
        }))
    }
}

/// Whether `head` (the first bytes of a file, at least 9) starts like a safetensors file whose
/// total length is `len`: a header length that fits the file, then `{`.
pub fn looks_like(head: &[u8], len: u64) -> bool {
    if head.len() < 9 {
        return false;
    }
    let mut n = [0u8; 8];
    n.copy_from_slice(&head[..8]);
    let n = u64::from_le_bytes(n);
    head[8] == b'{' && n >= 2 && n <= len.saturating_sub(8)
}

/// Opens `path` as a safetensors file, or `Ok(None)` if it does not start like one
/// ([`looks_like`]). A file that starts like one but does not parse is an error.
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let len = f
        .metadata()
        .map_err(|e| Error::io(format!("reading metadata of {}", path.display()), e))?
        .len();
    let mut head = [0u8; 9];
    if len < 9 || f.read_exact(&mut head).is_err() || !looks_like(&head, len) {
        return Ok(None);
    }
    Ok(Some(Box::new(SafetensorsStore::open(path)?)))
}

/// Why safetensors cannot hold `t`, if it cannot: a tensor that is not numeric, a dtype
/// safetensors lacks (complex128), LoD, a name that is not UTF-8.
pub(crate) fn cannot_hold(t: &TensorInfo) -> Option<String> {
    let Some(dtype) = t.kind.numeric() else {
        return t.kind.not_numeric();
    };
    if to_safetensors_dtype(dtype).is_none() {
        Some(format!("{}, which safetensors lacks", dtype.name()))
    } else if !t.lod.is_empty() {
        Some("a LoD tensor, which safetensors cannot describe".into())
    } else if name::as_utf8(&t.name).is_none() {
        Some("named with bytes that are not UTF-8".into())
    } else {
        None
    }
}

/// One tensor of the source, loaded when the serializer asks for its bytes.
struct LazyView<'s> {
    store: &'s dyn TensorStore,
    name: Vec<u8>,
    dtype: StDtype,
    shape: Vec<usize>,
    len: usize,
    failed: &'s Mutex<Option<Error>>,
    progress: &'s dyn Progress,
}

impl LazyView<'_> {
    fn fail(&self, e: Error) -> Cow<'_, [u8]> {
        let mut f = self.failed.lock().unwrap_or_else(|p| p.into_inner());
        f.get_or_insert(e);
        Cow::Owned(vec![0; self.len])
    }
}

impl View for LazyView<'_> {
    fn dtype(&self) -> StDtype {
        self.dtype
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        if self
            .failed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return Cow::Owned(vec![0; self.len]); // the output is discarded
        }
        let t = match self.store.load(&self.name) {
            Ok(Some(t)) => t,
            Ok(None) => {
                return self.fail(Error::NotFound {
                    name: name::display(&self.name),
                    path: format!("{} input", self.store.format().name()),
                })
            }
            Err(e) => return self.fail(e),
        };
        let bytes = match t.data {
            TensorData::Bytes(b) => b,
            TensorData::Strings(_) => {
                return self.fail(Error::Unsupported(format!(
                    "tensor {} is a string tensor; safetensors holds numeric tensors only",
                    name::display(&self.name)
                )))
            }
        };
        if bytes.len() != self.len {
            return self.fail(Error::InvalidTensor {
                name: name::display(&self.name),
                detail: format!(
                    "listed with {} bytes, loaded {} bytes",
                    self.len,
                    bytes.len()
                ),
            });
        }
        self.progress.advance(self.len as u64);
        bytes
    }

    fn data_len(&self) -> usize {
        self.len
    }
}

/// The safetensors exporter: every tensor of the job's store as a safetensors file at the
/// job's destination (atomically: a temporary file renamed into place), with the job's
/// metadata as `__metadata__` ([`Metadata::to_strings`]; omitted when empty). The header comes
/// first and lists every tensor, so the listing is collected; each tensor is loaded when the
/// serializer writes it.
pub(crate) fn export(job: &ExportJob<'_>) -> Result<Written> {
    let (store, dst) = (job.store, job.dst);
    let list = store.list()?;
    let failed = Mutex::new(None);
    let mut views = Vec::with_capacity(list.len());
    let mut data_bytes = 0u64;
    for t in &list {
        // `export` shows this writer only what `cannot_hold` accepts (numeric, a safetensors
        // dtype, no LoD, a UTF-8 name); anything else is refused, naming the tensor.
        let (None, Some(dtype), Some(n)) = (
            cannot_hold(t),
            t.kind.numeric().and_then(to_safetensors_dtype),
            name::as_utf8(&t.name),
        ) else {
            return Err(Error::Unsupported(format!(
                "tensor {} is {}, which safetensors output cannot hold",
                name::display(&t.name),
                cannot_hold(t).unwrap_or_default()
            )));
        };
        let too_big = || Error::Unsupported(format!("tensor {n} is too large for this platform"));
        let shape = t
            .shape
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| too_big()))
            .collect::<Result<Vec<_>>>()?;
        let len = usize::try_from(t.nbytes).map_err(|_| too_big())?;
        data_bytes = data_bytes.saturating_add(t.nbytes);
        views.push((
            n.to_string(),
            LazyView {
                store,
                name: t.name.clone(),
                dtype,
                shape,
                len,
                failed: &failed,
                progress: job.progress,
            },
        ));
    }
    // serialize_to_file writes a temporary file of its own beside the path it is given and
    // renames it over that path, with the owner-only mode and without fsync. Given a path
    // inside a staged directory, its temporary file is staged too (an interruption removes
    // the whole directory); `inner` is created first to learn the mode an ordinary new file
    // gets (0666 less the umask), which is restored before the sync and the rename into place.
    let staged = staging::stage_dir(dst, ".safetensors-tmp")?;
    let inner_name = "out.safetensors";
    let inner = staged.path().join(inner_name);
    let probe =
        new_file_mode(&inner).map_err(|e| Error::io(format!("writing {}", dst.display()), e))?;
    let info = (!job.metadata.is_empty()).then(|| job.metadata.to_strings());
    let written = safetensors::serialize_to_file(views, info, &inner);
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    written.map_err(|e| match e {
        safetensors::SafeTensorError::IoError(io) => Error::io(
            format!("writing {}", dst.display()),
            staging::without_path(io),
        ),
        other => Error::InvalidArgument(format!("writing {}: {other}", dst.display())),
    })?;
    std::fs::set_permissions(&inner, probe)
        .and_then(|()| std::fs::File::open(&inner)?.sync_all())
        .map_err(|e| Error::io(format!("syncing {}", dst.display()), e))?;
    staging::commit([(staged.commit_entry(inner_name), dst)])?;
    staging::sync_parent(dst)?;
    let file_len = std::fs::metadata(dst)
        .map_err(|e| Error::io(format!("reading metadata of {}", dst.display()), e))?
        .len();
    Ok(Written {
        tensors: list.len() as u64,
        data_bytes,
        paths: vec![dst.to_path_buf()],
        output_bytes: file_len,
        native: None,
    })
}

/// Creates the empty file `p` as any new file is created (on Unix mode 0666 less the umask) and
/// returns its permissions.
fn new_file_mode(p: &Path) -> std::io::Result<std::fs::Permissions> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o666);
    }
    Ok(o.open(p)?.metadata()?.permissions())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_table_is_a_bijection_on_shared_types() {
        for d in DType::ALL {
            match to_safetensors_dtype(d) {
                Some(s) => assert_eq!(from_safetensors_dtype(s), Some(d)),
                None => assert_eq!(d, DType::Complex128),
            }
        }
        assert_eq!(from_safetensors_dtype(StDtype::F8_E8M0), None);
    }

    #[test]
    fn detection_and_hostile_headers() {
        assert!(looks_like(b"\x02\0\0\0\0\0\0\0{}", 10));
        assert!(!looks_like(b"\x02\0\0\0\0\0\0\0{}", 9));
        assert!(!looks_like(b"\x00\0\0\0\0\0\0\0{}", 10));
        assert!(!looks_like(b"\xff\xff\xff\xff\xff\xff\xff\xff{", 100));
        // Parsed by the crate: errors, never panics.
        for bad in [
            &b"\x02\0\0\0\0\0\0\0{]"[..],
            b"\x10\0\0\0\0\0\0\0{}",
            b"\x2a\0\0\0\0\0\0\0{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        ] {
            let e = SafetensorsStore::from_bytes(bad.to_vec()).unwrap_err();
            assert!(matches!(e, Error::Corrupt { .. }), "{e}");
        }
        let ok = b"\x02\0\0\0\0\0\0\0{}";
        let s = SafetensorsStore::from_bytes(ok.to_vec()).unwrap();
        assert!(s.list().unwrap().is_empty());
    }
}
