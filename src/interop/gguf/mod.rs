//! GGUF files (llama.cpp, ollama, LM Studio; versions 2 and 3), as an input.
//!
//! * [`GgufStore`] reads a GGUF file as a [`TensorStore`]: mapped from a path, held in
//!   memory, or (with the `s3` feature) read by ranges from an object, its head read first and
//!   each tensor by one request. [`open_store`] is the detector [`crate::interop::open_any`]
//!   uses: the magic `GGUF`, never the extension.
//! * Tensors keep their ggml type ([`types`]): a plain type is its paramdex dtype (`f32` is
//!   `float32`, `bf16` `bfloat16`, `i8`..`i64`, `f64`); a block type (`q4_0`, `q4_k`,
//!   `iq4_xs`, `mxfp4`, `tq2_0`, ...) is listed under its ggml name with the bytes its blocks
//!   take, and loads as those blocks, byte for byte. Shapes are row-major (ggml's `ne`
//!   reversed), as numpy and torch see them; a block type's innermost dimension is a whole
//!   number of blocks, and a region of such a tensor is read by whole rows.
//! * Metadata: every key with its value ([`value`] says how the thirteen GGUF value types map
//!   to paramdex's), decoded only when asked for: the parse ([`header`]) walks the values and
//!   keeps their offsets, so a listing never decodes a vocabulary.
//!
//! * As an output ([`crate::interop::OutputFormat::Gguf`]), `write` writes GGUF v3: plain
//!   dtypes and block types, metadata re-encoded with the GGUF types [`TYPES_KEY`] records.
//!
//! Parsing is bounded: see [`header`]. GGUF stores no checksums: `verify` checks the structure
//! (done at open: every tensor within the file, aligned, no two overlapping, sizes whole
//! blocks).

pub mod header;
pub mod types;
pub mod value;
pub(crate) mod write;

use std::borrow::Cow;
use std::io::Read;
use std::path::Path;

use crate::error::{path_str, Error, Result};
use crate::interop::store::{
    cut_region, DataLocation, Format, LoadedTensor, StoreLayout, TensorData, TensorInfo,
    TensorInfos, TensorStore, VerifySummary,
};
use crate::name;
use crate::native::region::copy_region;
use crate::native::{MetaValue, Metadata, Region, Source};
#[cfg(feature = "s3")]
use crate::remote::RangeRead;

pub use header::{starts_like, DEFAULT_ALIGNMENT, MAGIC, MAX_DIMS};
use header::{Header, Stop, TensorEntry};
pub use types::{GgmlType, GGML, GGML_TYPES};
pub use value::TYPES_KEY;
pub use write::{MAX_OUTPUT_DIMS, MAX_OUTPUT_NAME};

/// The most bytes of a GGUF head (header, metadata, tensor infos) read from an object: a
/// vocabulary of a few hundred thousand tokens takes tens of MiB.
pub const MAX_HEAD_LEN: u64 = 1 << 30;

/// Where a [`GgufStore`]'s tensor data is read from.
#[derive(Debug)]
enum Data {
    /// The head's bytes are the whole file.
    Whole,
    /// An object read by ranges; the head holds its first bytes only.
    #[cfg(feature = "s3")]
    Ranged(std::sync::Arc<dyn RangeRead>),
}

/// An open GGUF file.
#[derive(Debug)]
pub struct GgufStore {
    /// The file's bytes (mapped or in memory), or, read by ranges, its head.
    head: Source,
    data: Data,
    header: Header,
}

impl GgufStore {
    /// Maps and parses the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufStore> {
        let path = path.as_ref();
        Self::whole(Source::map(path)?, path_str(path))
    }

    /// Parses a GGUF file held in memory.
    pub fn from_bytes(bytes: impl Into<std::sync::Arc<[u8]>>) -> Result<GgufStore> {
        Self::whole(Source::Memory(bytes.into()), "<memory>".into())
    }

    fn whole(head: Source, path: String) -> Result<GgufStore> {
        let header = match Header::parse(&head, <[u8]>::len(&head) as u64, &path) {
            Ok(h) => h,
            Err(Stop::Bad(e)) => return Err(e),
            // All the file's bytes are held: a parse never asks for more.
            Err(Stop::Need(n)) => {
                return Err(Error::truncated(
                    "gguf header",
                    n,
                    format!("{path}: ends early"),
                ))
            }
        };
        Ok(GgufStore {
            head,
            data: Data::Whole,
            header,
        })
    }

    /// Opens the object `src` read by ranges, whose first bytes `head` the caller has already
    /// read (any number of them): the head is read on until the tensor infos end (at most
    /// [`MAX_HEAD_LEN`] bytes), each read at least doubling what is held, the first up to at
    /// least 1 MiB.
    #[cfg(feature = "s3")]
    pub fn open_ranged(src: std::sync::Arc<dyn RangeRead>, mut head: Vec<u8>) -> Result<GgufStore> {
        let len = src.len();
        let location = src.location().to_string();
        loop {
            match Header::parse(&head, len, &location) {
                Ok(header) => {
                    return Ok(GgufStore {
                        head: Source::Memory(head.into()),
                        data: Data::Ranged(src),
                        header,
                    })
                }
                Err(Stop::Bad(e)) => return Err(e),
                Err(Stop::Need(n)) => {
                    crate::error::ensure_within(
                        "bytes of a GGUF head (header, metadata, tensor infos)",
                        n,
                        MAX_HEAD_LEN,
                        None,
                    )?;
                    let held = head.len() as u64;
                    let to = n.max(held.saturating_mul(2)).max(1 << 20).min(len);
                    let more = src.read(held..to)?;
                    head.extend_from_slice(&more);
                }
            }
        }
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// The data alignment (`general.alignment`, or 32).
    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Offset of the data section (the bytes before it are the head).
    pub fn data_start(&self) -> u64 {
        self.header.data_start
    }

    /// The keys, in file order, each with its GGUF value type's name (`uint32`, `string`,
    /// `array`, ...), without decoding a value.
    pub fn keys(&self) -> impl Iterator<Item = (&[u8], &'static str)> {
        self.header
            .kvs
            .iter()
            .map(|kv| (kv.key.as_slice(), header::value_type_name(kv.ty)))
    }

    /// The value of `key`, decoded (only this one), if the file has the key.
    pub fn value(&self, key: &[u8]) -> Result<Option<MetaValue>> {
        match self.header.kvs.iter().position(|kv| kv.key == key) {
            Some(i) => value::decode(&self.header, &self.head, i).map(Some),
            None => Ok(None),
        }
    }

    /// Every key with its decoded value ([`value`] says how GGUF's types map to paramdex's).
    pub fn metadata(&self) -> Result<Metadata> {
        value::metadata(&self.header, &self.head)
    }

    fn info_of(t: &TensorEntry) -> TensorInfo {
        TensorInfo {
            name: t.name.clone(),
            kind: t.ty.kind(),
            shape: t.shape.clone(),
            lod: Vec::new(),
            nbytes: t.nbytes,
        }
    }

    /// The stored bytes of `t`.
    fn bytes_of(&self, t: &TensorEntry) -> Result<Cow<'_, [u8]>> {
        match &self.data {
            Data::Whole => {
                // The parse checked the range against the file's length, which is the
                // mapping's.
                let range = usize::try_from(t.offset).unwrap_or(usize::MAX)
                    ..usize::try_from(t.offset + t.nbytes).unwrap_or(usize::MAX);
                self.head.get(range).map(Cow::Borrowed).ok_or_else(|| {
                    Error::truncated(
                        "gguf tensor data",
                        t.offset,
                        format!(
                            "{}: tensor {} is outside the file",
                            self.header.path,
                            name::display(&t.name)
                        ),
                    )
                })
            }
            #[cfg(feature = "s3")]
            Data::Ranged(src) => Ok(Cow::Owned(src.read(t.offset..t.offset + t.nbytes)?)),
        }
    }
}

impl TensorStore for GgufStore {
    fn format(&self) -> Format {
        Format::Gguf
    }

    fn layout(&self) -> Result<StoreLayout> {
        Ok(StoreLayout {
            file_bytes: Some(self.header.file_len),
            alignment: u32::try_from(self.header.alignment).ok(),
            index_bytes: Some(self.header.head_len()),
            shards: Some(1),
            ..StoreLayout::default()
        })
    }

    fn metadata(&self) -> Result<Metadata> {
        GgufStore::metadata(self)
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let h = &self.header;
        let from = h
            .sorted
            .partition_point(|&i| h.tensors[i].name.as_slice() < start);
        Ok(Box::new(
            h.sorted[from..]
                .iter()
                .map(move |&i| Ok(Self::info_of(&h.tensors[i]))),
        ))
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(t) = self.header.find(name) else {
            return Ok(None);
        };
        Ok(Some(LoadedTensor {
            info: Self::info_of(t),
            data: TensorData::Bytes(self.bytes_of(t)?),
        }))
    }

    /// A plain type's region as any numeric tensor's; a block type's by whole rows: the
    /// region must span the innermost dimension (whose blocks are not cut).
    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        let Some(t) = self.header.find(name) else {
            return Ok(None);
        };
        let shown = name::display(name);
        region.check_within(&t.shape, name)?;
        let data = self.bytes_of(t)?;
        let out = match t.ty.plain {
            Some(d) => cut_region(name, d, &t.shape, &data, region)?,
            None => {
                let (&inner, outer) = t.shape.split_last().expect("a block type has a dimension");
                let (start, len) = (region.start[outer.len()], region.len[outer.len()]);
                if start != 0 || len != inner {
                    return Err(Error::InvalidArgument(format!(
                        "tensor {shown} is {}, stored in blocks of {} along its last dimension: \
                         a region takes whole rows (all {inner} of its last dimension), not \
                         [{start}, {})",
                        t.ty.name,
                        t.ty.block,
                        start + len
                    )));
                }
                let row = t.ty.nbytes(&[inner]).expect("checked at open");
                // Checked: a shape with a zero dimension can hold others whose product
                // overflows (its size, 0, was all open could check).
                let lens = &region.len[..outer.len()];
                let bytes = if lens.contains(&0) {
                    Some(0)
                } else {
                    lens.iter()
                        .try_fold(1u64, |a, &d| a.checked_mul(d))
                        .and_then(|rows| rows.checked_mul(row))
                        .and_then(|n| usize::try_from(n).ok())
                };
                let bytes = bytes.ok_or_else(|| {
                    Error::InvalidArgument(format!("tensor {shown}: a region beyond memory"))
                })?;
                let mut out = vec![0u8; bytes];
                let row = usize::try_from(row).map_err(|_| {
                    Error::InvalidArgument(format!("tensor {shown}: rows beyond memory"))
                })?;
                copy_region(
                    &data,
                    outer,
                    &region.start[..outer.len()],
                    &mut out,
                    &region.len[..outer.len()],
                    &vec![0; outer.len()],
                    &region.len[..outer.len()],
                    row,
                )
                .map_err(|detail| Error::InvalidArgument(format!("tensor {shown}: {detail}")))?;
                out
            }
        };
        let mut info = Self::info_of(t);
        info.shape = region.len.clone();
        info.nbytes = out.len() as u64;
        Ok(Some(LoadedTensor {
            info,
            data: TensorData::Bytes(Cow::Owned(out)),
        }))
    }

    /// GGUF has no checksums: the structure, checked at open (every tensor within the file,
    /// aligned, none overlapping another, sizes whole blocks of known types).
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        Ok(VerifySummary {
            tensors: self.header.tensors.len() as u64,
            data_bytes: self.header.tensors.iter().map(|t| t.nbytes).sum(),
            checksums: 0,
        })
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        Ok(self.header.find(name).map(Self::info_of))
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        Ok(self.header.find(name).map(|t| DataLocation {
            path: self.header.path.clone().into(),
            offset: t.offset,
            len: t.nbytes,
            crc32c: None,
        }))
    }
}

/// Opens `path` as a GGUF file, or `Ok(None)` if it does not start with the magic `GGUF`. A
/// file that does but does not parse is an error.
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let mut magic = [0u8; 4];
    if f.read_exact(&mut magic).is_err() || !starts_like(&magic) {
        return Ok(None);
    }
    Ok(Some(Box::new(GgufStore::open(path)?)))
}
