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
use safetensors::{Dtype as StDtype, View};

use crate::dtype::DType;
use crate::error::{path_str, Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

use crate::interop::store::{
    scan_sorted, DataLocation, ExportJob, ForeignType, Format, Kind, LoadedTensor, OutputLimit,
    StoreLayout, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary, Written,
};
use crate::name;
use crate::native::staging;
use crate::native::Metadata;
use crate::native::Source;
use crate::progress::Progress;
#[cfg(feature = "s3")]
use crate::remote::RangeRead;

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
        DType::Float8E4M3FNUZ => StDtype::F8_E4M3FNUZ,
        DType::Float8E5M2FNUZ => StDtype::F8_E5M2FNUZ,
        DType::Float8E8M0FNU => StDtype::F8_E8M0,
        DType::Float4E2M1FNx2 => StDtype::F4,
        DType::Float6E2M3FNx4 => StDtype::F6_E2M3,
        DType::Float6E3M2FNx4 => StDtype::F6_E3M2,
        DType::Complex128
        | DType::Float8E4M3B11FNUZ
        | DType::Int4
        | DType::UInt4
        | DType::Int2
        | DType::UInt2
        | DType::Float4E2M1FN
        | DType::Float6E2M3FN
        | DType::Float6E3M2FN
        | DType::Bytes => return None,
    })
}

/// The safetensors shape of a paramdex tensor of dtype `d` and shape `shape`: the same, except
/// for packed dtypes, whose safetensors shape counts values where paramdex's counts bytes (the
/// last dimension times 2 for `F4`, times 4/3 for `F6_*`). `None` when a packed tensor has no
/// safetensors shape (a scalar, or a last dimension that is not a whole number of groups).
pub fn safetensors_shape(d: DType, shape: &[u64]) -> Option<Vec<u64>> {
    match (d.packing(), d.packed().and_then(DType::packing)) {
        (Some(p), _) => p.unpacked_shape(shape),
        // An unpacked type written packed: the shape counts values in both.
        (None, Some(p)) => p.packed_shape(shape).map(|_| shape.to_vec()),
        (None, None) => Some(shape.to_vec()),
    }
}

/// The bytes a tensor takes in safetensors output: its `nbytes`, or, for an unpacked type
/// written packed, the packed length.
fn output_len(t: &TensorInfo) -> u64 {
    match t
        .kind
        .numeric()
        .filter(|d| to_safetensors_dtype(*d).is_none())
        .and_then(DType::packed)
        .and_then(DType::packing)
    {
        None => t.nbytes,
        Some(p) => t.nbytes / p.values * p.bytes,
    }
}

/// The safetensors dtype a tensor of dtype `d` is written as: its own
/// ([`to_safetensors_dtype`]), or, for an unpacked sub-byte type (`float4_e2m1fn`,
/// `float6_*`, one value per byte), the packed type's (`F4`, `F6_*`): the values are packed
/// exactly ([`crate::Packing::pack`]) as the file is written.
pub fn safetensors_output_dtype(d: DType) -> Option<StDtype> {
    to_safetensors_dtype(d).or_else(|| d.packed().and_then(to_safetensors_dtype))
}

/// The paramdex dtype of a safetensors dtype, if paramdex has it (`F8_E4M3` is float8_e4m3fn,
/// as in PyTorch's `float8_e4m3fn`).
pub fn from_safetensors_dtype(d: StDtype) -> Option<DType> {
    DType::ALL
        .into_iter()
        .find(|&p| to_safetensors_dtype(p) == Some(d))
}

/// A safetensors header, parsed and checked: what the reader of a local file
/// ([`SafetensorsStore`]) and the reader of an object in a store (`RemoteSafetensors`) share.
/// The checks are the `safetensors` crate's own (the JSON, the dtypes, every tensor's offsets
/// contiguous from 0 and its size equal to shape × dtype, through its `Metadata`), plus the
/// file's length: the data must end exactly at the end of the file.
#[derive(Debug)]
pub(crate) struct Header {
    /// The file (a path or URL), for messages.
    path: String,
    /// Offset of the first data byte (8 + header length).
    data_start: u64,
    /// The file's length.
    file_len: u64,
    meta: StMetadata,
    /// Tensor names in bytewise order.
    names: Vec<String>,
    /// The tensors whose dtype string the `safetensors` crate does not know (a newer
    /// safetensors' type), by name: their type and shape as the header gives them. `meta`
    /// holds them as `U8` tensors of their byte length, so the crate checks their offsets.
    foreign: HashMap<String, (Arc<ForeignType>, Vec<u64>)>,
}

/// For a header the crate refused: the header with every tensor whose dtype string the crate
/// does not know rewritten as a `U8` tensor of its byte length, and those tensors' types and
/// shapes. `None` when there is no such tensor (the header is bad for another reason) or one
/// of them has offsets or a shape that are not arrays of non-negative integers (end >= start):
/// the crate's own error stands then.
#[allow(clippy::type_complexity)]
fn foreign_dtypes(text: &str) -> Option<(String, HashMap<String, (Arc<ForeignType>, Vec<u64>)>)> {
    let mut v: serde_json::Value = serde_json::from_str(text).ok()?;
    let mut found = HashMap::new();
    for (name, t) in v.as_object_mut()? {
        if name == "__metadata__" {
            continue;
        }
        let Some(dtype) = t.get("dtype").and_then(|d| d.as_str()) else {
            continue;
        };
        if serde_json::from_value::<StDtype>(serde_json::Value::from(dtype)).is_ok() {
            continue;
        }
        let nums = |key: &str| -> Option<Vec<u64>> {
            t.get(key)?
                .as_array()?
                .iter()
                .map(serde_json::Value::as_u64)
                .collect()
        };
        let (offsets, shape) = (nums("data_offsets")?, nums("shape")?);
        let [start, end] = offsets[..] else {
            return None;
        };
        let len = end.checked_sub(start)?;
        let kind = Arc::new(ForeignType::new("safetensors", dtype));
        t["dtype"] = serde_json::Value::from("U8");
        t["shape"] = serde_json::json!([len]);
        found.insert(name.clone(), (kind, shape));
    }
    if found.is_empty() {
        return None;
    }
    Some((v.to_string(), found))
}

fn corrupt(path: &str, e: safetensors::SafeTensorError) -> Error {
    Error::corrupt(
        "safetensors header",
        8,
        format!("{path}: {e} (checked by the safetensors crate)"),
    )
}

/// The header length a safetensors file of `file_len` bytes declares in its first 8 bytes
/// (`first`, at least 8 bytes), checked against [`MAX_HEADER_LEN`] and the file's length before
/// anything is read or allocated for it.
pub(crate) fn declared_header_len(first: &[u8], file_len: u64, path: &str) -> Result<u64> {
    use safetensors::SafeTensorError as E;
    let Some(b) = first.get(..8) else {
        return Err(corrupt(path, E::HeaderTooSmall));
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(b);
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_LEN {
        return Err(corrupt(path, E::HeaderTooLarge));
    }
    if n > file_len.saturating_sub(8) {
        return Err(corrupt(path, E::InvalidHeaderLength));
    }
    Ok(n)
}

impl Header {
    /// Parses the header of a safetensors file of `file_len` bytes from `head`, its first
    /// bytes (at least the 8 + header length of them; more are ignored).
    pub(crate) fn parse(head: &[u8], file_len: u64, path: String) -> Result<Header> {
        use safetensors::SafeTensorError as E;
        let n = declared_header_len(head, file_len, &path)?;
        let end = usize::try_from(8 + n).map_err(|_| corrupt(&path, E::HeaderTooLarge))?;
        let Some(json) = head.get(8..end) else {
            return Err(corrupt(&path, E::InvalidHeaderLength));
        };
        let text = std::str::from_utf8(json).map_err(|e| corrupt(&path, E::InvalidHeader(e)))?;
        // The crate's `Metadata` checks offsets and sizes as it is deserialized. A dtype string
        // it does not know fails that: such tensors are then listed as foreign types and the
        // rest of the header is checked by the crate as before.
        let (meta, foreign): (StMetadata, _) = match serde_json::from_str(text) {
            Ok(m) => (m, HashMap::new()),
            Err(e) => match foreign_dtypes(text) {
                None => return Err(corrupt(&path, E::InvalidHeaderDeserialization(e))),
                Some((fixed, foreign)) => (
                    serde_json::from_str(&fixed)
                        .map_err(|e| corrupt(&path, E::InvalidHeaderDeserialization(e)))?,
                    foreign,
                ),
            },
        };
        let data_len = meta.data_len() as u64;
        if (8 + n).checked_add(data_len) != Some(file_len) {
            return Err(corrupt(&path, E::MetadataIncompleteBuffer));
        }
        let mut names: Vec<String> = meta.tensors().into_keys().collect();
        names.sort_unstable();
        Ok(Header {
            path,
            data_start: 8 + n,
            file_len,
            meta,
            names,
            foreign,
        })
    }

    /// The file's `__metadata__`, as string values.
    pub(crate) fn metadata(&self) -> Result<Metadata> {
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
    pub(crate) fn header_len(&self) -> u64 {
        self.data_start - 8
    }

    /// Whether the file holds tensor `name`.
    fn has(&self, name: &str) -> bool {
        self.meta.info(name).is_some()
    }

    /// The description of tensor `name` and where its data lies in the file.
    fn info(&self, name: &str) -> Result<(TensorInfo, u64, u64)> {
        let i = self.meta.info(name).ok_or_else(|| Error::NotFound {
            name: name.to_string(),
            path: self.path.clone(),
        })?;
        if let Some((kind, shape)) = self.foreign.get(name) {
            let (start, end) = self.bounds(name, i.data_offsets)?;
            let info = TensorInfo {
                name: name.as_bytes().to_vec(),
                kind: Kind::Foreign(kind.clone()),
                shape: shape.clone(),
                lod: Vec::new(),
                nbytes: end - start,
            };
            return Ok((info, start, end));
        }
        let dtype = from_safetensors_dtype(i.dtype).ok_or_else(|| {
            Error::Unsupported(format!(
                "{}: tensor {name} is safetensors {}, which paramdex has no dtype for",
                self.path, i.dtype
            ))
        })?;
        let st_shape: Vec<u64> = i.shape.iter().map(|&d| d as u64).collect();
        let shape = match dtype.packing() {
            None => st_shape,
            // The header counts values; paramdex's packed shape counts bytes.
            Some(p) => p.packed_shape(&st_shape).ok_or_else(|| {
                Error::corrupt(
                    "safetensors header",
                    8,
                    format!(
                        "{}: tensor {name} is safetensors {} of shape {st_shape:?}, whose last \
                         dimension is not a multiple of {} ({} packs {} values in {} byte{})",
                        self.path,
                        i.dtype,
                        p.values,
                        i.dtype,
                        p.values,
                        p.bytes,
                        if p.bytes == 1 { "" } else { "s" }
                    ),
                )
            })?,
        };
        let (start, end) = self.bounds(name, i.data_offsets)?;
        Ok((
            TensorInfo {
                name: name.as_bytes().to_vec(),
                kind: Kind::Numeric(dtype),
                shape,
                lod: Vec::new(),
                nbytes: end - start,
            },
            start,
            end,
        ))
    }

    /// The absolute byte range of data offsets `(s, e)` of tensor `name`, checked against the
    /// file.
    fn bounds(&self, name: &str, (s, e): (usize, usize)) -> Result<(u64, u64)> {
        let start = self.data_start.checked_add(s as u64);
        let end = self.data_start.checked_add(e as u64);
        let (Some(start), Some(end)) = (start, end) else {
            return Err(Error::corrupt(
                "safetensors header",
                8,
                format!("{}: tensor {name}: data offsets overflow", self.path),
            ));
        };
        if start > end || end > self.file_len {
            return Err(Error::corrupt(
                "safetensors header",
                8,
                format!(
                    "{}: tensor {name}: data [{start}, {end}) is outside the {}-byte file",
                    self.path, self.file_len
                ),
            ));
        }
        Ok((start, end))
    }

    /// Every tensor, in name order.
    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.names
            .iter()
            .map(|n| self.info(n).map(|(i, _, _)| i))
            .collect()
    }

    /// What `verify` reports: safetensors has no checksums, so the structure (checked at
    /// open) and the dtypes.
    fn verify(&self) -> Result<VerifySummary> {
        let list = self.list()?;
        Ok(VerifySummary {
            tensors: list.len() as u64,
            data_bytes: list.iter().map(|t| t.nbytes).sum(),
            checksums: 0,
        })
    }

    /// The description of tensor `name`, if the file holds it: one lookup in the header's
    /// map (the trait's default lists every tensor to find one).
    fn info_of(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        let Some(name) = std::str::from_utf8(name).ok().filter(|n| self.has(n)) else {
            return Ok(None);
        };
        self.info(name).map(|(info, _, _)| Some(info))
    }

    /// The location of tensor `name`, if the file holds it.
    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        let Some(name) = std::str::from_utf8(name).ok().filter(|n| self.has(n)) else {
            return Ok(None);
        };
        let (_, start, end) = self.info(name)?;
        Ok(Some(DataLocation {
            path: self.path.clone().into(),
            offset: start,
            len: end - start,
            crc32c: None,
        }))
    }
}

/// An open `.safetensors` file.
#[derive(Debug)]
pub struct SafetensorsStore {
    source: Source,
    header: Header,
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
        let header = Header::parse(&source, <[u8]>::len(&source) as u64, path)?;
        Ok(SafetensorsStore { source, header })
    }

    /// The file's `__metadata__`, as string values.
    pub fn metadata(&self) -> Result<Metadata> {
        self.header.metadata()
    }

    /// Bytes of the JSON header (after the 8-byte length).
    pub fn header_len(&self) -> u64 {
        self.header.header_len()
    }
}

impl TensorStore for SafetensorsStore {
    fn format(&self) -> Format {
        Format::Safetensors
    }

    fn layout(&self) -> Result<StoreLayout> {
        Ok(StoreLayout {
            index_bytes: Some(self.header_len().saturating_add(8)),
            shards: Some(1),
            ..StoreLayout::default()
        })
    }

    fn metadata(&self) -> Result<Metadata> {
        SafetensorsStore::metadata(self)
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(scan_sorted(self.list()?, start))
    }

    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.header.list()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(name) = std::str::from_utf8(name)
            .ok()
            .filter(|n| self.header.has(n))
        else {
            return Ok(None);
        };
        let (info, start, end) = self.header.info(name)?;
        // Within the mapped file: `info` checked `end` against its length.
        let range = usize::try_from(start).unwrap_or(usize::MAX)
            ..usize::try_from(end).unwrap_or(usize::MAX);
        let data = self.source.get(range).ok_or_else(|| {
            Error::corrupt(
                "safetensors header",
                8,
                format!(
                    "{}: tensor {name}: data [{start}, {end}) is outside the file",
                    self.header.path
                ),
            )
        })?;
        Ok(Some(LoadedTensor {
            info,
            data: TensorData::Bytes(Cow::Borrowed(data)),
        }))
    }

    /// safetensors has no checksums: checks the structure (done at open) and that every dtype
    /// is one paramdex knows.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        self.header.verify()
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        self.header.info_of(name)
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        self.header.data_location(name)
    }
}

/// How a [`RemoteSafetensors`] opens its object.
#[cfg(feature = "s3")]
#[derive(Clone, Copy, Debug)]
pub struct RemoteSafetensorsOptions {
    /// Bytes asked for by the first request, from the start of the object: the 8-byte header
    /// length and, when the header is no longer, the whole header (one more request reads the
    /// rest of a longer one). 64 KiB holds the header of a file of several hundred tensors.
    pub head_bytes: u64,
}

#[cfg(feature = "s3")]
impl Default for RemoteSafetensorsOptions {
    fn default() -> Self {
        RemoteSafetensorsOptions {
            head_bytes: 64 << 10,
        }
    }
}

/// A safetensors file in an object store (or any object read by ranges: [`RangeRead`]), read
/// by ranges: open reads the header (one request for the object's first
/// [`RemoteSafetensorsOptions::head_bytes`] bytes, which usually hold it all, and one more for
/// the rest of a longer header, at most [`MAX_HEADER_LEN`] bytes), checked as a local file's
/// is; `load` reads a tensor's bytes with one request.
///
/// safetensors stores no checksums: the bytes of a tensor read over the network cannot be
/// checked beyond their length (a short answer is an error). [`TensorStore::verify`] checks the
/// header's structure only, as for a local file.
#[cfg(feature = "s3")]
#[derive(Debug)]
pub struct RemoteSafetensors {
    src: std::sync::Arc<dyn RangeRead>,
    header: Header,
}

#[cfg(feature = "s3")]
impl RemoteSafetensors {
    /// Opens `src`, whose first bytes `head` the caller has already read (none, or any number:
    /// more are read as needed).
    pub fn open_with_head(
        src: std::sync::Arc<dyn RangeRead>,
        mut head: Vec<u8>,
        opts: RemoteSafetensorsOptions,
    ) -> Result<RemoteSafetensors> {
        let len = src.len();
        let location = src.location().to_string();
        if head.len() < 8 {
            head = src.read(0..opts.head_bytes.max(8).min(len))?;
        }
        let n = declared_header_len(&head, len, &location)?;
        let need = 8 + n;
        if (head.len() as u64) < need {
            let more = src.read(head.len() as u64..need)?;
            head.extend_from_slice(&more);
        }
        let header = Header::parse(&head, len, location)?;
        Ok(RemoteSafetensors { src, header })
    }

    /// Opens `src` (see [`RemoteSafetensors::open_with_head`]).
    pub fn open(
        src: std::sync::Arc<dyn RangeRead>,
        opts: RemoteSafetensorsOptions,
    ) -> Result<RemoteSafetensors> {
        Self::open_with_head(src, Vec::new(), opts)
    }

    /// Bytes of the JSON header (after the 8-byte length).
    pub fn header_len(&self) -> u64 {
        self.header.header_len()
    }

    /// The object read.
    pub fn source(&self) -> &std::sync::Arc<dyn RangeRead> {
        &self.src
    }
}

#[cfg(feature = "s3")]
impl TensorStore for RemoteSafetensors {
    fn format(&self) -> Format {
        Format::Safetensors
    }

    fn layout(&self) -> Result<StoreLayout> {
        Ok(StoreLayout {
            index_bytes: Some(self.header_len().saturating_add(8)),
            shards: Some(1),
            ..StoreLayout::default()
        })
    }

    fn metadata(&self) -> Result<Metadata> {
        self.header.metadata()
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(scan_sorted(self.list()?, start))
    }

    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.header.list()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(name) = std::str::from_utf8(name)
            .ok()
            .filter(|n| self.header.has(n))
        else {
            return Ok(None);
        };
        let (info, start, end) = self.header.info(name)?;
        let data = self.src.read(start..end)?;
        Ok(Some(LoadedTensor {
            info,
            data: TensorData::Bytes(Cow::Owned(data)),
        }))
    }

    /// safetensors has no checksums: checks the structure (done at open) and that every dtype
    /// is one paramdex knows. No tensor data is read.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        self.header.verify()
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        self.header.info_of(name)
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        self.header.data_location(name)
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

/// Whether `head` (the first bytes of an object, at least 9) starts like a safetensors file,
/// whatever its length: a header length of at least 2 and at most [`MAX_HEADER_LEN`], then `{`.
/// The detector of objects read by ranges, which sees their first bytes before their length
/// matters: an object cut short inside its header is then a safetensors file with a
/// clear error ("invalid header length"), not an unrecognized object.
#[cfg(feature = "s3")]
pub(crate) fn starts_like(head: &[u8]) -> bool {
    let Some(n) = head.get(..8) else {
        return false;
    };
    let mut b = [0u8; 8];
    b.copy_from_slice(n);
    let n = u64::from_le_bytes(b);
    head.get(8) == Some(&b'{') && (2..=MAX_HEADER_LEN).contains(&n)
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
    if safetensors_output_dtype(dtype).is_none() {
        Some(format!("{}, which safetensors lacks", dtype.name()))
    } else if safetensors_shape(dtype, &t.shape).is_none() {
        Some(format!(
            "{} of shape {:?}, which safetensors cannot describe (a packed tensor needs a last \
             dimension of whole groups of bytes)",
            dtype.name(),
            t.shape
        ))
    } else if !t.lod.is_empty() {
        Some("a LoD tensor, which safetensors cannot describe".into())
    } else if name::as_utf8(&t.name).is_none() {
        Some("named with bytes that are not UTF-8".into())
    } else {
        None
    }
}

/// The most bytes a safetensors header (its JSON, padded with spaces to a multiple of 8) may
/// have: the `safetensors` crate's `MAX_HEADER_SIZE` (a private constant, 100,000,000 in
/// safetensors 0.8.0, `src/tensor.rs`), which its writer and every reader built on it enforce.
pub const MAX_HEADER_LEN: u64 = 100_000_000;

/// Counts bytes written to it.
struct Count(u64);

impl std::io::Write for Count {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Bytes of a value as serde_json writes it compactly (as the crate does).
macro_rules! json_len {
    ($v:expr) => {{
        let mut c = Count(0);
        // Writing to a counter cannot fail, and these values always serialize.
        let _ = serde_json::to_writer(&mut c, $v);
        c.0
    }};
}

/// Bytes of the string `s` as serde_json writes it: quoted, with `"`, `\\` and control
/// characters escaped (short forms for backspace, tab, newline, form feed and carriage return,
/// `\u00XX` for the others), everything else as is. Counted byte by byte: names may be long.
fn json_str_len(s: &str) -> u64 {
    2 + s
        .bytes()
        .map(|b| match b {
            b'"' | b'\\' | 0x08 | 0x09 | 0x0a | 0x0c | 0x0d => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum::<u64>()
}

/// Decimal digits of `n`.
fn digits(n: u64) -> u64 {
    u64::from(n.checked_ilog10().unwrap_or(0)) + 1
}

/// The size of the safetensors header [`export`] will write, counted tensor by tensor as the
/// export's survey lists them, and checked against [`MAX_HEADER_LEN`] before anything is
/// written. Exact: the crate orders tensors by dtype (descending) then name, so the data
/// offsets, whose digits count, are known once every tensor is listed; 16 bytes are kept per
/// tensor for that.
#[derive(Default)]
pub(crate) struct HeaderSize {
    /// Every byte but the offsets' digits and the separators between entries.
    fixed: u64,
    /// Each tensor's dtype and data length, in name order.
    tensors: Vec<(StDtype, u64)>,
}

/// The safetensors exporter's [`OutputLimit`] (its row in `EXPORTERS`).
pub(crate) fn header_limit() -> Box<dyn OutputLimit> {
    Box::<HeaderSize>::default()
}

impl HeaderSize {
    /// The header's length once padded, with `metadata` as `__metadata__`.
    fn len(&mut self, metadata: &Metadata) -> u64 {
        // A stable sort keeps name order within a dtype, as the crate's sort by (dtype, name).
        self.tensors.sort_by_key(|t| std::cmp::Reverse(t.0));
        let mut total = self.fixed;
        let mut offset = 0u64;
        for &(_, n) in &self.tensors {
            let end = offset.saturating_add(n);
            total = total.saturating_add(digits(offset) + digits(end));
            offset = end;
        }
        let mut entries = self.tensors.len() as u64;
        if !metadata.is_empty() {
            entries += 1;
            total = total
                .saturating_add(json_len!("__metadata__") + 1)
                .saturating_add(json_len!(&metadata.to_strings()));
        }
        // The braces, and a comma between entries.
        total = total.saturating_add(2 + entries.saturating_sub(1));
        total.div_ceil(8).saturating_mul(8)
    }
}

impl OutputLimit for HeaderSize {
    fn add(&mut self, t: &TensorInfo) {
        // The survey adds only tensors `cannot_hold` accepts: numeric, a safetensors dtype, a
        // UTF-8 name.
        let (Some(dtype), Some(name)) = (
            t.kind.numeric().and_then(safetensors_output_dtype),
            name::as_utf8(&t.name),
        ) else {
            return;
        };
        let shape = t
            .kind
            .numeric()
            .and_then(|d| safetensors_shape(d, &t.shape));
        let info = safetensors::tensor::TensorInfo {
            dtype,
            shape: shape
                .unwrap_or_default()
                .iter()
                .map(|&d| d as usize)
                .collect(),
            data_offsets: (0, 0),
        };
        // `"name":{...,"data_offsets":[0,0]}` less the two zeros, which `len` counts.
        let entry = json_str_len(name) + 1 + json_len!(&info) - 2;
        self.fixed = self.fixed.saturating_add(entry);
        self.tensors.push((dtype, output_len(t)));
    }

    fn check(&mut self, metadata: &Metadata) -> Result<()> {
        let len = self.len(metadata);
        if len > MAX_HEADER_LEN {
            return Err(Error::limit(
                "the safetensors header (JSON) in bytes",
                len,
                MAX_HEADER_LEN,
                None,
            ));
        }
        Ok(())
    }
}

/// One tensor of the source, loaded when the serializer asks for its bytes.
struct LazyView<'s> {
    store: &'s dyn TensorStore,
    name: Vec<u8>,
    dtype: StDtype,
    shape: Vec<usize>,
    len: usize,
    /// For an unpacked type written packed: how, and the bytes `load` gives (one per value).
    pack: Option<(crate::dtype::Packing, usize)>,
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
        let loaded_len = self.pack.map_or(self.len, |(_, n)| n);
        if bytes.len() != loaded_len {
            return self.fail(Error::InvalidTensor {
                name: name::display(&self.name),
                detail: format!(
                    "listed with {} bytes, loaded {} bytes",
                    loaded_len,
                    bytes.len()
                ),
            });
        }
        self.progress.advance(loaded_len as u64);
        match self.pack {
            None => bytes,
            Some((p, _)) => match p.pack(&bytes) {
                Ok(v) if v.len() == self.len => Cow::Owned(v),
                Ok(_) | Err(_) => self.fail(Error::InvalidTensor {
                    name: name::display(&self.name),
                    detail: format!(
                        "a value has bits above the {} bits of {}: packing it into {} would \
                         lose them",
                        p.bits, p.unpacked, self.dtype
                    ),
                }),
            },
        }
    }

    fn data_len(&self) -> usize {
        self.len
    }
}

/// The views the serializer writes: one per tensor of `list` (a listing of `store`), each
/// loaded when the serializer asks for its bytes (a failure is kept in `failed`), and the sum
/// of their data bytes. A tensor safetensors cannot hold ([`cannot_hold`]) is refused, naming it.
fn lazy_views<'s>(
    store: &'s dyn TensorStore,
    list: &[TensorInfo],
    failed: &'s Mutex<Option<Error>>,
    progress: &'s dyn Progress,
) -> Result<(Vec<(String, LazyView<'s>)>, u64)> {
    let mut views = Vec::with_capacity(list.len());
    let mut data_bytes = 0u64;
    for t in list {
        // `export` shows this writer only what `cannot_hold` accepts (numeric, a safetensors
        // dtype, no LoD, a UTF-8 name); anything else is refused, naming the tensor.
        let (None, Some(dtype), Some(n)) = (
            cannot_hold(t),
            t.kind.numeric().and_then(safetensors_output_dtype),
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
            .kind
            .numeric()
            .and_then(|d| safetensors_shape(d, &t.shape))
            .unwrap_or_default()
            .iter()
            .map(|&d| usize::try_from(d).map_err(|_| too_big()))
            .collect::<Result<Vec<_>>>()?;
        let loaded = usize::try_from(t.nbytes).map_err(|_| too_big())?;
        // An unpacked type written packed (`cannot_hold` checked its last dimension).
        let pack = t
            .kind
            .numeric()
            .filter(|d| to_safetensors_dtype(*d).is_none())
            .and_then(DType::packed)
            .and_then(DType::packing)
            .map(|p| (p, loaded));
        let len = usize::try_from(output_len(t)).map_err(|_| too_big())?;
        data_bytes = data_bytes.saturating_add(t.nbytes);
        views.push((
            n.to_string(),
            LazyView {
                store,
                name: t.name.clone(),
                dtype,
                shape,
                len,
                pack,
                failed,
                progress,
            },
        ));
    }
    Ok((views, data_bytes))
}

/// `store`'s tensors as the bytes of a safetensors file held in memory (what
/// `safetensors.serialize` returns), with `metadata` as `__metadata__`
/// ([`Metadata::to_strings`]; omitted when empty): the safetensors writer of
/// [`crate::interop::export`] without the file.
///
/// # Errors
///
/// [`Error::Unsupported`] naming the first tensor safetensors cannot hold
/// ([`OutputFormat::cannot_hold`](crate::interop::OutputFormat::cannot_hold));
/// [`Error::LimitExceeded`] for a header over [`MAX_HEADER_LEN`]; the store's errors loading a
/// tensor.
pub fn serialize(store: &dyn TensorStore, metadata: &Metadata) -> Result<Vec<u8>> {
    let list = store.list()?;
    let failed = Mutex::new(None);
    let (views, _) = lazy_views(store, &list, &failed, &crate::progress::NoProgress)?;
    let info = (!metadata.is_empty()).then(|| metadata.to_strings());
    let out = safetensors::serialize(views, info);
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    out.map_err(|e| match e {
        safetensors::SafeTensorError::HeaderTooLarge => Error::limit(
            "the safetensors header (JSON) in bytes",
            MAX_HEADER_LEN + 1,
            MAX_HEADER_LEN,
            None,
        ),
        other => Error::InvalidArgument(format!("serializing safetensors: {other}")),
    })
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
    let (views, data_bytes) = lazy_views(store, &list, &failed, job.progress)?;
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
        // `export` checked the header size against this limit before anything was written.
        safetensors::SafeTensorError::HeaderTooLarge => Error::limit(
            "the safetensors header (JSON) in bytes",
            MAX_HEADER_LEN + 1,
            MAX_HEADER_LEN,
            None,
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
        notes: Vec::new(),
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
    use safetensors::SafeTensors;

    #[test]
    fn dtype_table_is_a_bijection_on_shared_types() {
        for d in DType::ALL {
            match to_safetensors_dtype(d) {
                Some(s) => assert_eq!(from_safetensors_dtype(s), Some(d)),
                // Unpacked sub-byte types reach safetensors only packed; the others it lacks.
                None => assert!(
                    d == DType::Complex128
                        || d == DType::Float8E4M3B11FNUZ
                        || d.packed().is_some()
                        || d.name().contains("int") && d.size() == 1 && d.name().len() <= 5,
                    "{d}"
                ),
            }
        }
        // Every safetensors 0.8 dtype has a paramdex dtype.
        for s in [
            StDtype::F8_E8M0,
            StDtype::F8_E4M3FNUZ,
            StDtype::F8_E5M2FNUZ,
            StDtype::F4,
            StDtype::F6_E2M3,
            StDtype::F6_E3M2,
        ] {
            assert!(from_safetensors_dtype(s).is_some(), "{s}");
        }
    }

    /// The header length the crate writes for `tensors` (name, dtype, shape): its first 8 bytes.
    fn written_header_len(tensors: &[(&str, StDtype, Vec<usize>)], metadata: &Metadata) -> u64 {
        let data: Vec<Vec<u8>> = tensors
            .iter()
            .map(|t| {
                vec![
                    0u8;
                    t.2.iter().product::<usize>() * from_safetensors_dtype(t.1).unwrap().size()
                ]
            })
            .collect();
        let views: Vec<(String, safetensors::tensor::TensorView<'_>)> = tensors
            .iter()
            .zip(&data)
            .map(|(t, d)| {
                let v = safetensors::tensor::TensorView::new(t.1, t.2.clone(), d).unwrap();
                (t.0.to_string(), v)
            })
            .collect();
        let info = (!metadata.is_empty()).then(|| metadata.to_strings());
        let bytes = safetensors::serialize(views, info).unwrap();
        u64::from_le_bytes(bytes[..8].try_into().unwrap())
    }

    #[test]
    fn the_header_size_is_counted_exactly() {
        let mut md = Metadata::new();
        md.insert("format", "pt").unwrap();
        md.insert("step", 12i64).unwrap();
        md.insert("quote\"d \\ \u{1} ü", "日本").unwrap();
        let cases: Vec<Vec<(&str, StDtype, Vec<usize>)>> = vec![
            vec![],
            vec![("a", StDtype::F32, vec![2, 3])],
            vec![
                ("z.weight", StDtype::F16, vec![4]),
                ("a\"quoted\\name\u{7}", StDtype::F32, vec![]),
                ("émoji 🎉", StDtype::I64, vec![0, 3]),
                ("m", StDtype::BF16, vec![5000]),
                ("b", StDtype::F32, vec![1; 40]),
                ("c", StDtype::F32, vec![3, 1000]),
                ("big", StDtype::U8, vec![1_234_567]),
            ],
        ];
        for tensors in &cases {
            for metadata in [Metadata::new(), md.clone()] {
                // The survey lists tensors in name order.
                let mut sorted = tensors.clone();
                sorted.sort_by(|a, b| a.0.cmp(b.0));
                let mut h = HeaderSize::default();
                for (name, dtype, shape) in &sorted {
                    let numel: usize = shape.iter().product();
                    h.add(&TensorInfo {
                        name: name.as_bytes().to_vec(),
                        kind: Kind::Numeric(from_safetensors_dtype(*dtype).unwrap()),
                        shape: shape.iter().map(|&d| d as u64).collect(),
                        lod: Vec::new(),
                        nbytes: (numel * from_safetensors_dtype(*dtype).unwrap().size()) as u64,
                    });
                }
                let want = written_header_len(tensors, &metadata);
                assert_eq!(h.len(&metadata), want, "{tensors:?} {metadata:?}");
                assert!(h.check(&metadata).is_ok());
            }
        }
    }

    /// `MAX_HEADER_LEN` is the crate's limit (`MAX_HEADER_SIZE`, which its reader checks
    /// before anything else, as its writer does): a header length one above it is "too
    /// large", the limit itself is not.
    #[test]
    fn max_header_len_is_the_crate_limit() {
        for (n, too_large) in [(MAX_HEADER_LEN, false), (MAX_HEADER_LEN + 1, true)] {
            let mut bytes = n.to_le_bytes().to_vec();
            bytes.extend_from_slice(b"{}");
            let e = SafeTensors::read_metadata(&bytes).unwrap_err();
            assert_eq!(
                matches!(e, safetensors::SafeTensorError::HeaderTooLarge),
                too_large,
                "{n}: {e}"
            );
        }
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

    #[test]
    fn info_is_the_listed_entry_of_one_name() {
        let header = br#"{"b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]},"a":{"dtype":"F32","shape":[2,1],"data_offsets":[0,8]},"__metadata__":{"k":"v"}}"#;
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend_from_slice(header);
        file.extend_from_slice(&[0u8; 16]);
        let s = SafetensorsStore::from_bytes(file).unwrap();
        let listed = s.list().unwrap();
        assert_eq!(listed.len(), 2);
        for t in &listed {
            assert_eq!(s.info(&t.name).unwrap().as_ref(), Some(t));
        }
        assert_eq!(s.info(b"a").unwrap().unwrap().shape, vec![2, 1]);
        for absent in [&b"c"[..], b"__metadata__", b"", b"\xff"] {
            assert!(s.info(absent).unwrap().is_none(), "{absent:?}");
        }
    }
}
