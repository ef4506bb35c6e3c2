//! The interface every input format implements ([`TensorStore`]) and the types it speaks in.
//! Depends on no format: the formats depend on it, and the registry in `interop/mod.rs` sits
//! above both.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::name;
use crate::native::region::copy_region;
use crate::native::{FinishStats, Metadata, Reader, Region, WriterOptions};
use crate::progress::{Progress, Unit};
use crate::record::{MAX_LOD_LEVELS, MAX_RANK};
use crate::table::TableFigures;

/// The element type of a tensor from any format.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A fixed-width numeric type.
    Numeric(DType),
    /// Variable-length byte strings (TensorFlow `DT_STRING` that is not a scalar).
    String,
    /// A bytes value (SPEC.md 6.1): arbitrary bytes under a name, beside tensors; a native
    /// file's bytes value, a TensorFlow scalar `DT_STRING`. Its shape is `[]`, its `nbytes` the
    /// value's length, and loading gives the value ([`TensorData::Bytes`]).
    Bytes,
    /// A TensorFlow type paramdex lists and checksums but does not decode (`DT_VARIANT`, such as
    /// a `tf.data` iterator's state; quantized and 4-bit types), by its `DataType` number.
    /// Loading gives the bytes as TensorFlow stored them; outputs cannot hold it.
    Opaque(i32),
    /// A dtype of another format that paramdex has no dtype for: a safetensors dtype string
    /// newer than paramdex, a Paddle `VarType` number it does not know. Listed under the
    /// source's name with `nbytes` = the stored size; loading gives the stored bytes; outputs
    /// cannot hold it.
    Foreign(std::sync::Arc<ForeignType>),
}

/// What a [`Kind::Foreign`] tensor's source calls its type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ForeignType {
    /// The source's numbering or naming: `safetensors`, `paddle`.
    pub system: &'static str,
    /// The source's name of the type (`F8_E5M3`; a Paddle number as digits), at most
    /// [`MAX_FOREIGN_NAME`] bytes (a longer one is cut, ending in `...`).
    pub name: String,
}

/// The longest foreign type name kept (bytes); hostile files may declare much longer ones.
pub const MAX_FOREIGN_NAME: usize = 64;

impl ForeignType {
    /// A foreign type, its name cut to [`MAX_FOREIGN_NAME`] bytes at a character boundary.
    pub fn new(system: &'static str, name: &str) -> ForeignType {
        let name = if name.len() <= MAX_FOREIGN_NAME {
            name.to_string()
        } else {
            let mut end = MAX_FOREIGN_NAME - 3;
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            format!("{}...", &name[..end])
        };
        ForeignType { system, name }
    }
}

impl Kind {
    /// The dtype name (`float32`, ..., `string`; for opaque types TensorFlow's name without
    /// `DT_`, lower case: `variant`, `qint8`).
    pub fn name(&self) -> &str {
        match self {
            Kind::Numeric(d) => d.name(),
            Kind::String => "string",
            Kind::Bytes => "bytes",
            Kind::Opaque(code) => crate::dtype::tf_type_name(*code).unwrap_or("unknown"),
            Kind::Foreign(f) => &f.name,
        }
    }

    /// The numeric dtype, if numeric.
    pub fn numeric(&self) -> Option<DType> {
        match self {
            Kind::Numeric(d) => Some(*d),
            Kind::String | Kind::Bytes | Kind::Opaque(_) | Kind::Foreign(_) => None,
        }
    }

    /// Whether loading gives the stored bytes of a type paramdex does not decode (opaque
    /// TensorFlow types, foreign types).
    pub fn is_opaque(&self) -> bool {
        matches!(self, Kind::Opaque(_) | Kind::Foreign(_))
    }

    /// For a kind that is not numeric, what it is, for messages (`a string tensor`,
    /// `a variant tensor, which paramdex does not decode`); `None` for numeric kinds.
    pub fn not_numeric(&self) -> Option<String> {
        match self {
            Kind::Numeric(_) => None,
            Kind::String => Some("a string tensor".into()),
            Kind::Bytes => Some("a bytes value".into()),
            Kind::Opaque(_) => Some(format!(
                "a {} tensor, which paramdex does not decode",
                self.name()
            )),
            Kind::Foreign(f) => Some(format!(
                "a {} {} tensor, which paramdex does not decode",
                f.system, f.name
            )),
        }
    }
}

/// What a store knows about a tensor without reading its data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The name (arbitrary bytes).
    pub name: Vec<u8>,
    /// Element type.
    pub kind: Kind,
    /// Full logical shape (partitioned TensorFlow variables: the whole tensor's shape).
    pub shape: Vec<u64>,
    /// Paddle LoD levels (empty elsewhere).
    pub lod: Vec<Vec<u64>>,
    /// Bytes of data as `load` returns them (strings: the sum of element lengths).
    pub nbytes: u64,
}

/// A tensor's contents.
#[derive(Clone, Debug)]
pub enum TensorData<'a> {
    /// Little-endian, row-major element bytes (borrowed where the format allows zero-copy).
    Bytes(Cow<'a, [u8]>),
    /// String elements in row-major order.
    Strings(Vec<Vec<u8>>),
}

impl TensorData<'_> {
    /// The bytes `get --format raw` writes: numeric data as is, strings concatenated.
    pub fn raw_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            TensorData::Bytes(b) => Cow::Borrowed(b),
            TensorData::Strings(s) => Cow::Owned(s.concat()),
        }
    }
}

/// A tensor read from a store.
#[derive(Clone, Debug)]
pub struct LoadedTensor<'a> {
    /// Its description.
    pub info: TensorInfo,
    /// Its contents, checked against the format's checksums where it has any.
    pub data: TensorData<'a>,
}

/// Which format a store reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Format {
    /// A native paramdex file.
    Native,
    /// A TensorFlow V2 checkpoint (index + data shards).
    TensorFlow,
    /// A Paddle model: program (`.pdmodel` or PIR `.json`) + combined `.pdiparams`.
    PaddleModel,
    /// One Paddle tensor file (`save_dense_tensor`, the `save` op).
    PaddleTensor,
    /// A directory of Paddle per-variable files (`save_vars` with `filename=None`).
    PaddleDir,
    /// A Paddle merged parameter file: each record preceded by its size as a `u64` (the design
    /// document "Merging all params in a single file"; `interop::paddle::MergedStore`).
    PaddleMerged,
    /// A safetensors file (Hugging Face).
    Safetensors,
    /// A `torch.save` file (a zip of a pickle and raw storages; `interop::torch`).
    Torch,
    /// A Paddle dygraph `paddle.save` pickle (`.pdparams`, `.pdopt`;
    /// `interop::paddle::dygraph`).
    PaddleDygraph,
    /// A torch.distributed.checkpoint directory written by `FileSystemWriter` (`.metadata` and
    /// `*.distcp` files; `interop::torch::dcp`).
    TorchDcp,
    /// A Hugging Face sharded checkpoint: shard files listed by a `*.index.json` weight map
    /// (`interop::hf`).
    HuggingFaceSharded,
    /// A GGUF file (llama.cpp; `interop::gguf`).
    Gguf,
}

impl Format {
    /// A short human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Format::Native => "paramdex",
            Format::TensorFlow => "tensorflow checkpoint",
            Format::PaddleModel => "paddle model",
            Format::PaddleTensor => "paddle tensor file",
            Format::PaddleDir => "paddle per-variable directory",
            Format::PaddleMerged => "paddle merged file",
            Format::Safetensors => "safetensors",
            Format::Torch => "torch.save file",
            Format::PaddleDygraph => "paddle dygraph pickle",
            Format::TorchDcp => "torch DCP checkpoint",
            Format::HuggingFaceSharded => "hugging face sharded checkpoint",
            Format::Gguf => "gguf",
        }
    }
}

/// Where a tensor's data is stored, and the checksum its format stores for it
/// ([`TensorStore::data_location`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataLocation {
    /// The file holding the data: the native file, a TensorFlow data shard, the `.pdiparams`,
    /// a Paddle tensor file, the safetensors file.
    pub path: PathBuf,
    /// Byte offset of the data's first byte in that file.
    pub offset: u64,
    /// Bytes stored there (TensorFlow strings: with their lengths and the lengths' checksum).
    pub len: u64,
    /// The CRC32C (Castagnoli, unmasked) the format stores for those bytes: a native entry's
    /// or a TensorFlow bundle entry's checksum; `None` for formats without checksums (Paddle,
    /// safetensors).
    pub crc32c: Option<u32>,
}

/// Where one stored slice of a tensor kept in slices is ([`TensorStore::slice_locations`]): a
/// partitioned TensorFlow variable's slices, the shards of a sharded save (FSDP's, one per
/// rank).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SliceLocation {
    /// The part of the tensor the slice holds.
    pub region: Region,
    /// Where the slice's data is stored, and its checksum.
    pub location: DataLocation,
}

/// Summary of a [`TensorStore::verify`] run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifySummary {
    /// Tensors checked.
    pub tensors: u64,
    /// Bytes of tensor data checked, counted as [`TensorInfo::nbytes`] counts them (strings:
    /// the sum of their lengths), so that it is the sum of the listing's `nbytes`.
    pub data_bytes: u64,
    /// Checksums compared (blocks and tensors); 0 for formats without checksums.
    pub checksums: u64,
}

/// How a store's bytes are laid out, as far as its format says ([`TensorStore::layout`]): what
/// `stat` reports beside the listing's counts. A figure the format or the place does not give
/// is `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreLayout {
    /// Bytes of the file read (a native file, a safetensors file; a checkpoint's index file).
    pub file_bytes: Option<u64>,
    /// The native format version (SPEC.md).
    pub format_version: Option<u32>,
    /// Bytes of the records region (native files).
    pub records_bytes: Option<u64>,
    /// Bytes between the records and the index that no record uses (native files).
    pub dead_bytes: Option<u64>,
    /// The records' data alignment in bytes (native files).
    pub alignment: Option<u32>,
    /// Whether the records are in name order (native files).
    pub records_sorted: Option<bool>,
    /// Bytes of the index: a native file's table, a TensorFlow `.index`, a safetensors header
    /// with its 8-byte length.
    pub index_bytes: Option<u64>,
    /// Figures of the index's blocks, for formats whose index is a table.
    pub table: Option<TableFigures>,
    /// Data files or shards the tensors are spread over.
    pub shards: Option<u64>,
    /// A sharded checkpoint's prefix (a path, or a URL in a bucket): where its data files are,
    /// and the leftovers of saves that did not finish ([`crate::shard_files`]).
    pub checkpoint_prefix: Option<String>,
    /// A sharded checkpoint's data files, in order (SPEC.md 12): where each is and what its
    /// index records of it. Empty for every other input.
    pub data_files: Vec<DataFileLayout>,
}

/// One data file of a sharded checkpoint ([`StoreLayout::data_files`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataFileLayout {
    /// Where it is: a path, or a URL for a checkpoint in a bucket.
    pub location: String,
    /// Its length and identity as the checkpoint's index records them.
    pub shard: crate::native::ShardRef,
}

/// A detector: returns `Ok(None)` when the input is not its format (the registry of
/// `interop/mod.rs` tries them in order; `hf.rs` opens a sharded checkpoint's files with one).
pub(crate) type Opener = fn(&Path) -> Result<Option<Box<dyn TensorStore>>>;

/// A stream of tensor descriptions in bytewise name order; see [`TensorStore::scan`].
pub type TensorInfos<'a> = Box<dyn Iterator<Item = Result<TensorInfo>> + 'a>;

/// A readable collection of named tensors, whatever its format.
pub trait TensorStore: Send + Sync {
    /// The format.
    fn format(&self) -> Format;
    /// Every tensor, in bytewise name order, each logical tensor once. Collects
    /// [`TensorStore::scan`]: prefer `scan` for inputs that may hold millions of tensors.
    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.scan(b"")?.collect()
    }
    /// The tensors whose names are at or after `start` in bytewise order, as a stream. A store
    /// whose index is sorted on disk (native files, TensorFlow checkpoints) seeks to `start`
    /// and reads its index only as the stream is consumed, so the first item costs the same at
    /// any tensor count and memory stays bounded; others sort what they hold in memory.
    ///
    /// An `Err` item about one tensor only (its description needs data that cannot be read,
    /// as the size of a TensorFlow string tensor whose data shard is missing or damaged) is
    /// followed by the tensors after it, so a listing can show everything it can and then name
    /// what it could not read; after an error of the index itself the stream ends.
    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>>;
    /// The tensors whose names start with `prefix`, as a stream (a [`TensorStore::scan`] from
    /// `prefix`, stopped at the first name past it).
    fn scan_prefix(&self, prefix: &[u8]) -> Result<TensorInfos<'_>> {
        let prefix = prefix.to_vec();
        let it = self.scan(&prefix)?;
        Ok(Box::new(it.take_while(move |t| {
            t.as_ref().map_or(true, |t| t.name.starts_with(&prefix))
        })))
    }
    /// The whole listing, as [`TensorStore::scan`] from the first name gives it, telling
    /// `progress` how far it has got: [`Progress::start`] once with the total, then
    /// [`Progress::advance`] as items come. The total is the tensor count ([`Unit::Tensors`])
    /// where the store knows it without reading its listing (a native file's header, formats
    /// held in memory), else the bytes of the index it reads ([`Unit::IndexBytes`], a
    /// TensorFlow checkpoint). The default collects [`TensorStore::list`]: stores that stream
    /// their listing override it.
    fn scan_with_progress<'a>(&'a self, progress: &'a dyn Progress) -> Result<TensorInfos<'a>> {
        let list = self.list()?;
        progress.start(list.len() as u64, Unit::Tensors);
        Ok(Box::new(list.into_iter().map(move |t| {
            progress.advance(1);
            Ok(t)
        })))
    }
    /// The store's typed metadata: a native file's header metadata, a safetensors file's
    /// `__metadata__` (strings); empty for formats that have none.
    fn metadata(&self) -> Result<Metadata> {
        Ok(Metadata::new())
    }
    /// One tensor by name; `Ok(None)` if absent. Checksums are checked where the format has them.
    /// A tensor stored in slices (a partitioned tensor) is assembled, as TensorFlow's
    /// `get_tensor` does.
    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>>;
    /// The tensors `names`, in that order, each as [`TensorStore::load`] returns it (checked),
    /// on up to `threads` threads (0 = all cores) where the format can: a native file checks
    /// their checksums in parallel, its data staying borrowed from the mapped file. The
    /// default loads them one at a time with `load`. Exporters load a window of tensors so
    /// while they write the previous one.
    ///
    /// Errors: [`Error::NotFound`] for a name the store does not hold; those of `load`.
    fn load_many(&self, names: &[&[u8]], threads: usize) -> Result<Vec<LoadedTensor<'_>>> {
        let _ = threads;
        names
            .iter()
            .map(|n| {
                self.load(n)?.ok_or_else(|| Error::NotFound {
                    name: crate::name::display(n),
                    path: format!("{} input", self.format().name()),
                })
            })
            .collect()
    }
    /// The description of one tensor by name; `Ok(None)` if absent. The default takes it from
    /// a [`TensorStore::scan`] from `name`.
    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        match self.scan(name)?.next() {
            Some(Ok(t)) if t.name == name => Ok(Some(t)),
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        }
    }
    /// The region `region` of numeric tensor `name` (`Ok(None)` if absent): `info.shape` is the
    /// region's lengths, the data its row-major bytes (no LoD). Formats that store tensors in
    /// slices (native files, TensorFlow checkpoints) read only the bytes inside the region,
    /// from whichever stored tensor or slices hold them, and do not check data checksums, which
    /// cover whole stored tensors ([`TensorStore::verify`] checks them). The default loads the
    /// whole tensor and cuts the region out of it.
    ///
    /// Errors: [`Error::InvalidArgument`] for a region of another rank or outside the shape;
    /// [`Error::Unsupported`] for a tensor that is not numeric; [`Error::Slices`] when some of
    /// the region is stored nowhere (a partial tensor).
    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        let Some(t) = self.load(name)? else {
            return Ok(None);
        };
        let (Some(d), TensorData::Bytes(data)) = (t.info.kind.numeric(), &t.data) else {
            return Err(Error::Unsupported(format!(
                "tensor {} is {}: only numeric tensors are read by region",
                name::display(name),
                t.info.kind.not_numeric().unwrap_or_default()
            )));
        };
        let out = cut_region(name, d, &t.info.shape, data, region)?;
        Ok(Some(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: Kind::Numeric(d),
                shape: region.len.clone(),
                lod: Vec::new(),
                nbytes: out.len() as u64,
            },
            data: TensorData::Bytes(Cow::Owned(out)),
        }))
    }
    /// Reads and checks everything the format lets one check.
    fn verify(&self, threads: usize) -> Result<VerifySummary>;
    /// Where the data of tensor `name` is stored and the checksum stored with it, from the
    /// index alone (no data is read). `Ok(None)` when the tensor is absent, when its data is
    /// not one run of bytes in one file (a partitioned TensorFlow variable: see its slices),
    /// or when the store does not say (the default).
    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        let _ = name;
        Ok(None)
    }
    /// Where each stored slice of tensor `name` is, when the tensor is stored in slices, in
    /// the order its entry lists them, from the index alone (no data is read). Empty when the
    /// tensor is stored whole ([`TensorStore::data_location`] says where), absent, or the store
    /// does not say (the default). An entry that does not fit the file is an error, as it is
    /// for a read.
    fn slice_locations(&self, name: &[u8]) -> Result<Vec<SliceLocation>> {
        let _ = name;
        Ok(Vec::new())
    }
    /// How the store's bytes are laid out ([`StoreLayout`]); the default says nothing. For a
    /// table index this reads every index block once.
    fn layout(&self) -> Result<StoreLayout> {
        Ok(StoreLayout::default())
    }
    /// The native reader, when the store is a native file (zero-copy access, records).
    fn as_native(&self) -> Option<&Reader> {
        None
    }
    /// The file that declares these tensors beside their data, when the format has one: a
    /// Paddle model's program (`.pdmodel`, PIR `.json`, `__model__`). A Paddle writer copies it
    /// when it declares exactly the tensors written.
    fn program_file(&self) -> Option<&Path> {
        None
    }
}

/// The bytes of `region` of a whole numeric tensor `name` of dtype `d` and shape `shape`, held
/// in `data`.
pub(crate) fn cut_region(
    name: &[u8],
    d: DType,
    shape: &[u64],
    data: &[u8],
    region: &Region,
) -> Result<Vec<u8>> {
    region.check_within(shape, name)?;
    let bytes = crate::native::region::byte_len(region, d.size())?;
    let mut out = vec![0u8; bytes];
    copy_region(
        data,
        shape,
        &region.start,
        &mut out,
        &region.len,
        &vec![0; region.rank()],
        &region.len,
        d.size(),
    )
    .map_err(|detail| {
        Error::InvalidArgument(format!("tensor {}: {detail}", name::display(name)))
    })?;
    Ok(out)
}

/// [`TensorStore::scan`] for a store that holds its whole list in memory (sorted by name): the
/// tensors at or after `start`.
pub(crate) fn scan_sorted<'a>(list: Vec<TensorInfo>, start: &[u8]) -> TensorInfos<'a> {
    let from = list.partition_point(|t| t.name.as_slice() < start);
    Box::new(list.into_iter().skip(from).map(Ok))
}

/// One export as a format's writer receives it from [`crate::interop::export`], which has
/// already checked every tensor against the format's rules: the writer's side of the one
/// interface every output format is written through (each format module has a function
/// `fn(&ExportJob) -> Result<Written>`, listed in `EXPORTERS` in `interop/export.rs`).
pub(crate) struct ExportJob<'a> {
    /// The tensors to write: a view of the input that lists, in bytewise name order, only the
    /// tensors the format can hold.
    pub(crate) store: &'a dyn TensorStore,
    /// Where to write (a file, a checkpoint prefix or a directory, as the format defines).
    pub(crate) dst: &'a Path,
    /// Layout of native output (other formats ignore it).
    pub(crate) writer: &'a WriterOptions,
    /// The metadata to write, for formats that carry metadata.
    pub(crate) metadata: &'a Metadata,
    /// Told [`TensorInfo::nbytes`] of each tensor once it is written (`interop::export` has
    /// already called [`Progress::start`] with the total).
    pub(crate) progress: &'a dyn Progress,
    /// Existing outputs may be replaced ([`crate::interop::ExportOptions::overwrite`]);
    /// `interop::export` has already refused them when not.
    pub(crate) overwrite: bool,
    /// For native output: write it to this object (`s3://` URL) by multipart upload, with
    /// these options, instead of to `dst` (which then only names it). Other formats are
    /// exported locally and uploaded afterwards (`interop::upload`), so they ignore it.
    pub(crate) upload: Option<(&'a str, &'a crate::remote::UploadOptions)>,
}

/// What a format's writer wrote; `interop::export` adds what it knows (skipped tensors,
/// metadata left behind) to make the public report.
#[derive(Debug, Default)]
pub(crate) struct Written {
    /// Tensors written.
    pub(crate) tensors: u64,
    /// The sum of their [`TensorInfo::nbytes`].
    pub(crate) data_bytes: u64,
    /// Every file written.
    pub(crate) paths: Vec<PathBuf>,
    /// Bytes of all the files written.
    pub(crate) output_bytes: u64,
    /// The native writer's figures (native output only).
    pub(crate) native: Option<FinishStats>,
    /// Notes for the user ([`crate::interop::ExportReport::notes`]).
    pub(crate) notes: Vec<String>,
}

/// Why a record header (native or Paddle) cannot describe `info`, if it cannot: a rank above
/// [`MAX_RANK`], more than [`MAX_LOD_LEVELS`] LoD levels, a dimension above `i64::MAX`.
pub(crate) fn record_limits(info: &TensorInfo) -> Option<String> {
    if info.lod.len() as u64 > MAX_LOD_LEVELS {
        Some(format!(
            "a tensor with {} LoD levels (at most {MAX_LOD_LEVELS})",
            info.lod.len()
        ))
    } else {
        shape_limits(info)
    }
}

/// Why a shape of at most [`MAX_RANK`] dimensions, each at most `i64::MAX` (TensorFlow's
/// shapes, and record headers), cannot describe `info`, if it cannot.
pub(crate) fn shape_limits(info: &TensorInfo) -> Option<String> {
    if info.shape.len() > MAX_RANK {
        return Some(format!(
            "of rank {} (at most {MAX_RANK} dimensions)",
            info.shape.len()
        ));
    }
    info.shape
        .iter()
        .find(|&&d| d > i64::MAX as u64)
        .map(|d| format!("of dimension {d} (at most i64::MAX)"))
}

/// What an output format can hold as a whole, beyond each tensor's rules (the safetensors
/// header size): `interop::export`'s survey adds every tensor to be written, then checks the total
/// with the metadata, before a byte is written.
pub(crate) trait OutputLimit {
    /// Counts a tensor that will be written.
    fn add(&mut self, t: &TensorInfo);
    /// Fails with [`crate::Error::LimitExceeded`] if the tensors added and `metadata` exceed the limit.
    fn check(&mut self, metadata: &Metadata) -> Result<()>;
}

/// The limit of formats that have no whole-output limit.
pub(crate) struct NoLimit;

impl OutputLimit for NoLimit {
    fn add(&mut self, _: &TensorInfo) {}
    fn check(&mut self, _: &Metadata) -> Result<()> {
        Ok(())
    }
}
