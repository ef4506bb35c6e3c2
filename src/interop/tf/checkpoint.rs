//! Reading a TensorFlow V2 checkpoint: `PREFIX.index` (a LevelDB table of `BundleEntryProto`)
//! and its data shards `PREFIX.data-%05d-of-%05d`. The index is held whole (mapped, or read
//! into memory from an object store); the data shards are read through [`ShardData`]: files
//! mapped the first time a tensor in them is read ([`MappedShards`]), or objects read by
//! ranges (`super::remote`), so that one reader (entries, checksums, slices, strings) serves
//! both.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use prost::Message;

use super::strings::{self, StringsAt};
use crate::dtype::DType;
use crate::error::{path_str, Error, Result};
use crate::format::{crc32c, unmask_crc};
use crate::interop::store::{
    DataLocation, Format, Kind, LoadedTensor, SliceLocation, StoreLayout, TensorData, TensorInfo,
    TensorInfos, TensorStore, VerifySummary,
};
use crate::name::display;
use crate::native::region::{self as slices, Region};
use crate::native::slice_key::{self, describe_extents, display_key as key_display, Extent};
use crate::native::Source;
use crate::progress::{Progress, Unit};
use crate::proto::tensorflow::{
    tensor_slice_proto::extent::HasLength, BundleEntryProto, BundleHeaderProto, TensorSliceProto,
};
use crate::table::{Table, TableIndex, TableIter, TableReadOptions};

/// Largest tensor rank TensorFlow accepts (`TensorShape::kMaxDimensions`).
pub const MAX_RANK: usize = 254;

/// Most data shards a checkpoint may declare (file names have 5-digit shard numbers).
pub const MAX_SHARDS: u32 = 100_000;

/// The TensorFlow bundle version a reader of this build understands (`kTensorBundleVersion`).
const CONSUMER_VERSION: i32 = 1;

/// TensorFlow's `DT_STRING`.
const DT_STRING: i32 = 7;
const DT_VARIANT: i32 = 21;

/// The checksum TensorFlow stores for a `DT_VARIANT` tensor: its data is, per element, a varint64
/// length, the serialized `VariantTensorDataProto`, and a 4-byte checksum; the entry's CRC32C
/// covers, per element, the length as a little-endian u64 (not the varint), the element and
/// the 4 checksum bytes (verified on files TensorFlow 2.21 wrote). `None` if the bytes are not
/// such a sequence.
fn variant_crc(data: &[u8]) -> Option<u32> {
    let mut cur = crate::format::Cursor::new(data, 0);
    let mut crc = 0u32;
    while cur.remaining() > 0 {
        let len = cur.varint64()?;
        let elem = cur.take(usize::try_from(len).ok()?)?;
        let tail = cur.take(4)?;
        crc = crate::format::crc32c_extend(crc, &len.to_le_bytes());
        crc = crate::format::crc32c_extend(crc, elem);
        crc = crate::format::crc32c_extend(crc, tail);
    }
    Some(crc)
}

/// A parsed and checked `BundleEntryProto`.
#[derive(Clone, Debug)]
struct Entry {
    kind: Kind,
    shape: Vec<u64>,
    numel: u64,
    shard: u32,
    offset: u64,
    size: u64,
    /// Unmasked stored CRC32C.
    crc: u32,
    slices: Vec<TensorSliceProto>,
    /// File offset (in the `.index`) of the data block holding the entry, for messages.
    at: u64,
}

/// An open TensorFlow V2 checkpoint.
///
/// Opening reads the `.index` footer, index block and header; data shards are mapped lazily.
/// Every tensor read has its CRC32C checked (as TensorFlow does); partitioned variables are
/// assembled from their slices, also across shards. `Send + Sync`.
#[derive(Debug)]
pub struct TfCheckpoint {
    prefix: PathBuf,
    index_path: String,
    index_src: Source,
    index: TableIndex,
    num_shards: u32,
    big_endian: bool,
    data: Box<dyn ShardData>,
}

/// Where the data shards of a checkpoint are read from.
pub(crate) trait ShardData: Send + Sync + std::fmt::Debug {
    /// The bytes `offset .. offset + size` of data shard `shard` (below the checkpoint's shard
    /// count), which hold (some of) tensor or slice `key`: borrowed where the shard is mapped.
    /// Bytes running past the end of the shard are an error ([`Error::truncated`]) naming the
    /// shard and the tensor.
    fn read(&self, shard: u32, offset: u64, size: u64, key: &[u8]) -> Result<Cow<'_, [u8]>>;

    /// Data shard `shard` (a path or URL), for messages and [`DataLocation::path`].
    fn name(&self, shard: u32) -> String;
}

/// The error for `size` bytes at `offset` of tensor `key` running past the end of `shard` (a
/// path or URL) of `shard_len` bytes.
pub(crate) fn past_end(key: &[u8], shard: &str, offset: u64, size: u64, shard_len: u64) -> Error {
    Error::truncated(
        "tensor data",
        offset,
        format!(
            "tensor {}: {size} bytes at offset {offset} run past the end of {shard} \
             ({shard_len} bytes)",
            key_display(key)
        ),
    )
}

/// Local data shards, each mapped the first time a tensor in it is read.
#[derive(Debug)]
struct MappedShards {
    prefix: PathBuf,
    num_shards: u32,
    shards: Vec<OnceLock<Source>>,
}

impl MappedShards {
    /// The bytes of data shard `shard`, mapped on first use.
    fn shard(&self, shard: u32) -> Result<&Source> {
        let cell = self.shards.get(shard as usize).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "shard {shard} does not exist ({} has {} shards)",
                self.prefix.display(),
                self.num_shards
            ))
        })?;
        if let Some(s) = cell.get() {
            return Ok(s);
        }
        let src = Source::map(&data_path(&self.prefix, shard, self.num_shards))?;
        Ok(cell.get_or_init(|| src))
    }
}

impl ShardData for MappedShards {
    fn read(&self, shard: u32, offset: u64, size: u64, key: &[u8]) -> Result<Cow<'_, [u8]>> {
        // Say which shard and tensor: a missing data file is the usual way a checkpoint is
        // incomplete (a partial copy or download), and the index alone cannot tell.
        let src = self.shard(shard).map_err(|err| match err {
            Error::Io { source, .. } => Error::io(
                format!(
                    "opening data shard {shard} of {} of checkpoint {} ({}), which holds \
                     tensor {}",
                    self.num_shards,
                    self.prefix.display(),
                    self.name(shard),
                    key_display(key)
                ),
                source,
            ),
            other => other,
        })?;
        let range = usize::try_from(offset)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| Some(o..o.checked_add(s)?))
            .filter(|r| r.end <= src.len());
        match range {
            Some(range) => Ok(Cow::Borrowed(&src[range])),
            None => Err(past_end(
                key,
                &self.name(shard),
                offset,
                size,
                src.len() as u64,
            )),
        }
    }

    fn name(&self, shard: u32) -> String {
        path_str(&data_path(&self.prefix, shard, self.num_shards))
    }
}

/// `PREFIX.index`.
pub fn index_path(prefix: &Path) -> PathBuf {
    crate::native::index_path(prefix)
}

/// `PREFIX.data-SSSSS-of-NNNNN`, as TensorFlow names data shard `shard` of `num_shards`.
pub fn data_path(prefix: &Path, shard: u32, num_shards: u32) -> PathBuf {
    crate::native::data_path(prefix, shard, num_shards)
}

impl TfCheckpoint {
    /// Opens the checkpoint `path` names: its prefix (`dir/model.ckpt` for
    /// `dir/model.ckpt.index`), its `.index`, one of its data files, or a directory holding it
    /// (see [`super::resolve_prefix`]). A path naming none of these is taken as a prefix, so the
    /// error names the missing `PREFIX.index`.
    pub fn open(path: impl AsRef<Path>) -> Result<TfCheckpoint> {
        let path = path.as_ref();
        let prefix = super::resolve_prefix(path)?.unwrap_or_else(|| path.to_path_buf());
        let ipath = index_path(&prefix);
        let index_src = Source::map(&ipath)?;
        let data_prefix = prefix.clone();
        Self::from_index(prefix, index_src, path_str(&ipath), move |num_shards| {
            Box::new(MappedShards {
                prefix: data_prefix,
                num_shards,
                shards: (0..num_shards).map(|_| OnceLock::new()).collect(),
            })
        })
    }

    /// The checkpoint whose whole `.index` is `index_src` (named `index_path` in messages),
    /// its data shards read through what `data` makes of the shard count the header declares.
    pub(crate) fn from_index(
        prefix: PathBuf,
        index_src: Source,
        index_path: String,
        data: impl FnOnce(u32) -> Box<dyn ShardData>,
    ) -> Result<TfCheckpoint> {
        let opts = TableReadOptions::default();
        let index = TableIndex::open(&index_src, &opts).map_err(|e| e.context(&index_path))?;
        let table = Table::new(&index_src, &index);
        let header = table
            .get(b"", |v, at| {
                BundleHeaderProto::decode(v).map_err(|e| {
                    Error::corrupt(
                        "checkpoint header",
                        at,
                        format!("{index_path}: header entry is not parseable: {e}"),
                    )
                })
            })
            .map_err(|e| e.context(&index_path))?
            .ok_or_else(|| {
                Error::corrupt(
                    "checkpoint header",
                    table.first_data_offset().unwrap_or(0),
                    format!("{index_path}: no header entry (empty key): not a TensorFlow checkpoint index"),
                )
            })??;
        let at = table.first_data_offset().unwrap_or(0);
        let bad = |d: String| Error::corrupt("checkpoint header", at, format!("{index_path}: {d}"));
        let num_shards = u32::try_from(header.num_shards)
            .ok()
            .filter(|&n| (1..=MAX_SHARDS).contains(&n))
            .ok_or_else(|| {
                bad(format!(
                    "num_shards is {}, expected 1 to {MAX_SHARDS}",
                    header.num_shards
                ))
            })?;
        let big_endian = match header.endianness {
            0 => false,
            1 => true,
            e => return Err(bad(format!("unknown endianness {e}"))),
        };
        let v = header.version.unwrap_or_default();
        if v.producer < 0
            || v.min_consumer > CONSUMER_VERSION
            || v.bad_consumers.contains(&CONSUMER_VERSION)
        {
            return Err(Error::Unsupported(format!(
                "{index_path}: checkpoint version (producer {}, min_consumer {}, bad_consumers {:?}) cannot be read by a version-{CONSUMER_VERSION} reader",
                v.producer, v.min_consumer, v.bad_consumers
            )));
        }
        Ok(TfCheckpoint {
            prefix,
            index_path,
            index_src,
            index,
            num_shards,
            big_endian,
            data: data(num_shards),
        })
    }

    /// The checkpoint prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// Number of data shards declared by the header.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// Whether tensor data is big-endian (written on a big-endian host); paramdex byte-swaps it.
    pub fn big_endian(&self) -> bool {
        self.big_endian
    }

    /// Path of data shard `shard`.
    pub fn data_path(&self, shard: u32) -> PathBuf {
        data_path(&self.prefix, shard, self.num_shards)
    }

    fn table(&self) -> Table<'_> {
        Table::new(&self.index_src, &self.index).releasing_behind_scans(&self.index_src)
    }

    /// Parses and checks the entry stored under `key` (found in the data block at `at`).
    fn parse_entry(&self, key: &[u8], value: &[u8], at: u64) -> Result<Entry> {
        let bad = |d: String| {
            Error::corrupt(
                "index entry",
                at,
                format!(
                    "{}: entry for key {}: {d}",
                    self.index_path,
                    key_display(key)
                ),
            )
        };
        let p = BundleEntryProto::decode(value).map_err(|e| bad(format!("not parseable: {e}")))?;
        let kind = if p.dtype == DT_STRING {
            Kind::String
        } else if p.dtype == DType::UInt8.tf_code() {
            // A native paramdex file read as a checkpoint (`export-tf` links it): a type
            // TensorFlow lacks is DT_UINT8 with paramdex's field 18 naming it (SPEC.md 6).
            let e = crate::native::IndexEntry::decode(value, at, usize::MAX)?;
            match e.dtype() {
                Some(d) => Kind::Numeric(d),
                None => Kind::Opaque(p.dtype),
            }
        } else {
            match DType::from_tf(i64::from(p.dtype)) {
                Some(d) => Kind::Numeric(d),
                // Types paramdex does not decode, and numbers of a TensorFlow newer than
                // paramdex: listed, checksummed, loadable as their stored bytes (quantized,
                // resource, variant). Not DT_INVALID (0) nor the TF1 reference types (>= 100),
                // which no bundle holds.
                None if (1..100).contains(&p.dtype) => Kind::Opaque(p.dtype),
                None => {
                    return Err(Error::Unsupported(format!(
                    "tensor {} in {} has TensorFlow dtype {} ({}), which paramdex does not read",
                    key_display(key),
                    self.index_path,
                    crate::dtype::tf_type_name(p.dtype).map_or_else(
                        || "an unknown DataType".to_string(),
                        |n| format!("DT_{}", n.to_uppercase())
                    ),
                    p.dtype
                )))
                }
            }
        };
        let shape_proto = p.shape.unwrap_or_default();
        if shape_proto.unknown_rank {
            return Err(bad("shape has unknown rank".into()));
        }
        if shape_proto.dim.len() > MAX_RANK {
            return Err(bad(format!(
                "rank {} is above TensorFlow's limit of {MAX_RANK}",
                shape_proto.dim.len()
            )));
        }
        // A scalar string whole (not partitioned) is a bytes value (SPEC.md 6.1): a TF2
        // checkpoint's object graph, a native file's bytes value linked by `export-tf`.
        let kind = if kind == Kind::String && shape_proto.dim.is_empty() && p.slices.is_empty() {
            Kind::Bytes
        } else {
            kind
        };
        let mut shape = Vec::with_capacity(shape_proto.dim.len());
        for (i, d) in shape_proto.dim.iter().enumerate() {
            shape.push(
                u64::try_from(d.size)
                    .map_err(|_| bad(format!("dimension {i} has size {}", d.size)))?,
            );
        }
        let numel = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| bad(format!("shape {shape:?} has too many elements")))?;
        let shard = u32::try_from(p.shard_id)
            .ok()
            .filter(|&s| s < self.num_shards)
            .ok_or_else(|| {
                bad(format!(
                    "shard_id {} is not below num_shards {}",
                    p.shard_id, self.num_shards
                ))
            })?;
        let offset =
            u64::try_from(p.offset).map_err(|_| bad(format!("negative offset {}", p.offset)))?;
        let size = u64::try_from(p.size).map_err(|_| bad(format!("negative size {}", p.size)))?;
        if let (Some(d), true) = (kind.numeric(), p.slices.is_empty()) {
            let expected = numel.checked_mul(d.size() as u64);
            if expected != Some(size) {
                return Err(bad(format!(
                    "invalid size in bundle entry: stored size {size}; expected size {} ({numel} {} elements)",
                    expected.map_or_else(|| "overflow".to_string(), |e| e.to_string()),
                    d.name()
                )));
            }
        }
        Ok(Entry {
            kind,
            shape,
            numel,
            shard,
            offset,
            size,
            crc: unmask_crc(p.crc32c),
            slices: p.slices,
            at,
        })
    }

    /// Looks up and parses the entry of `key`.
    fn entry(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.table()
            .get(key, |v, at| self.parse_entry(key, v, at))
            .map_err(|e| e.context(&self.index_path))?
            .transpose()
    }

    /// The stored bytes of an entry (bounds-checked against its shard). The shard's path
    /// (`self.data.name`) is formatted only where a message or a string decoder needs it: a
    /// get of a small tensor spent a tenth of its time formatting it.
    fn raw(&self, name: &[u8], e: &Entry) -> Result<Cow<'_, [u8]>> {
        let data = self.data.read(e.shard, e.offset, e.size, name)?;
        if data.len() as u64 != e.size {
            // A reader of shards must give exactly what is asked for.
            return Err(past_end(
                name,
                &self.data.name(e.shard),
                e.offset,
                e.size,
                e.offset.saturating_add(data.len() as u64),
            ));
        }
        Ok(data)
    }

    /// The stored bytes of an entry with its CRC32C checked.
    fn checked(&self, name: &[u8], e: &Entry) -> Result<Cow<'_, [u8]>> {
        let data = self.raw(name, e)?;
        let computed = match e.kind {
            Kind::Numeric(_) => crc32c(&data),
            Kind::Opaque(DT_VARIANT) => variant_crc(&data).ok_or_else(|| {
                Error::corrupt(
                    "tensor data",
                    e.offset,
                    format!(
                        "variant tensor {} in {}: its {} bytes are not a sequence of \
                         (varint length, element, 4-byte checksum)",
                        key_display(name),
                        self.data.name(e.shard),
                        data.len()
                    ),
                )
            })?,
            Kind::Opaque(_) | Kind::Foreign(_) => crc32c(&data),
            Kind::String | Kind::Bytes => strings::stored_data_crc(
                &data,
                e.numel,
                self.big_endian,
                StringsAt {
                    path: &self.data.name(e.shard),
                    name: &key_display(name),
                    offset: e.offset,
                },
            )?,
        };
        if computed != e.crc {
            return Err(Error::ChecksumMismatch {
                what: "tensor data",
                name: Some(format!(
                    "{} (file {})",
                    key_display(name),
                    self.data.name(e.shard)
                )),
                offset: e.offset,
                len: e.size,
                stored: e.crc,
                computed,
                context: None,
            });
        }
        Ok(data)
    }

    /// Numeric bytes in little-endian order (swapped when the checkpoint is big-endian).
    fn to_le<'a>(&self, d: DType, data: Cow<'a, [u8]>) -> Cow<'a, [u8]> {
        let unit = match d {
            DType::Complex64 | DType::Complex128 => d.size() / 2,
            _ => d.size(),
        };
        if !self.big_endian || unit == 1 {
            return data;
        }
        let mut v = data.into_owned();
        for c in v.chunks_exact_mut(unit) {
            c.reverse();
        }
        Cow::Owned(v)
    }

    /// Where an entry's data is: its data shard, offset, length and stored CRC32C.
    fn location(&self, e: &Entry) -> DataLocation {
        DataLocation {
            path: self.data.name(e.shard).into(),
            offset: e.offset,
            len: e.size,
            crc32c: Some(e.crc),
        }
    }

    /// The slices of a partitioned tensor: resolved regions and their checked entries.
    fn slice_parts(&self, name: &[u8], full: &Entry) -> Result<Vec<(Region, Vec<u8>, Entry)>> {
        let bad = |d: String| {
            Error::corrupt(
                "partitioned tensor",
                full.at,
                format!("{}: tensor {}: {d}", self.index_path, display(name)),
            )
        };
        let mut parts = Vec::with_capacity(full.slices.len());
        for (i, s) in full.slices.iter().enumerate() {
            let extents =
                extents_of(s, full.shape.len()).map_err(|d| bad(format!("slice {i}: {d}")))?;
            let region = slices::resolve(&extents, &full.shape)
                .map_err(|d| bad(format!("slice {i}: {d}")))?;
            let key = slice_key::encode(name, &extents);
            let e = self.entry(&key)?.ok_or_else(|| {
                bad(format!(
                    "does not have sufficient slices: the entry of slice {i} ({}) is missing",
                    describe_extents(&extents)
                ))
            })?;
            if e.kind != full.kind || e.shape != region.len || !e.slices.is_empty() {
                return Err(bad(format!(
                    "slice {i} ({}) is stored as {} {:?}, expected {} {:?}",
                    describe_extents(&extents),
                    e.kind.name(),
                    e.shape,
                    full.kind.name(),
                    region.len
                )));
            }
            parts.push((region, key, e));
        }
        Ok(parts)
    }

    /// Checks and (with `copy`) assembles a partitioned numeric tensor.
    fn assemble(&self, name: &[u8], full: &Entry, d: DType, copy: bool) -> Result<Option<Vec<u8>>> {
        if full.kind == Kind::String {
            return Err(self.partitioned_string(name));
        }
        let parts = self.slice_parts(name, full)?;
        let mut datas = Vec::with_capacity(parts.len());
        let mut have = 0u64;
        for (_, key, e) in &parts {
            let data = if copy {
                self.checked(key, e)?
            } else {
                self.raw(key, e)?
            };
            have = have.saturating_add(data.len() as u64);
            datas.push(data);
        }
        // Bound the allocation by the bytes actually present before allocating.
        let need = full.numel.checked_mul(d.size() as u64).filter(|&n| n <= have).ok_or_else(|| {
            Error::corrupt(
                "partitioned tensor",
                full.at,
                format!(
                    "{}: tensor {}: does not have sufficient slices: {:?} {} needs {} elements ({} bytes), the slices hold {have} bytes",
                    self.index_path,
                    display(name),
                    full.shape,
                    d.name(),
                    full.numel,
                    full.numel
                        .checked_mul(d.size() as u64)
                        .map_or_else(|| "more than 2^64".to_string(), |b| b.to_string())
                ),
            )
        })?;
        let regions: Vec<Region> = parts.into_iter().map(|(r, _, _)| r).collect();
        let mut out = if copy {
            Some(vec![0u8; need as usize])
        } else {
            None
        };
        let datas: Vec<&[u8]> = datas.iter().map(|d| &d[..]).collect();
        slices::tile(&full.shape, d.size(), &regions, &datas, out.as_deref_mut()).map_err(
            |detail| {
                Error::corrupt(
                    "partitioned tensor",
                    full.at,
                    format!("{}: tensor {}: {detail}", self.index_path, display(name)),
                )
            },
        )?;
        Ok(out)
    }

    fn partitioned_string(&self, name: &[u8]) -> Error {
        Error::Unsupported(format!(
            "tensor {} in {} is a partitioned string tensor, which TensorFlow itself cannot restore",
            display(name),
            self.index_path
        ))
    }

    /// Whether `key` is the slice key of a slice that its partitioned tensor's entry lists
    /// (then it is not a tensor of its own, as in TensorFlow).
    fn is_listed_slice(&self, key: &[u8]) -> Result<bool> {
        let Some(k) = slice_key::is_slice_key(key)
            .then(|| slice_key::decode(key))
            .flatten()
        else {
            return Ok(false);
        };
        let Some(full) = self.entry(&k.name)? else {
            return Ok(false);
        };
        let listed = referenced_slice_keys(&k.name, &full).any(|r| r == key);
        Ok(listed)
    }

    fn partitioned_opaque(&self, name: &[u8], e: &Entry) -> Error {
        Error::Unsupported(format!(
            "tensor {} in {} is a partitioned {} tensor, which paramdex does not assemble",
            display(name),
            self.index_path,
            e.kind.name()
        ))
    }

    fn info(&self, name: &[u8], e: &Entry) -> Result<TensorInfo> {
        let nbytes = match e.kind {
            Kind::Numeric(d) => e.numel.saturating_mul(d.size() as u64),
            // Partitioned tensors that paramdex does not assemble (strings, opaque types) are
            // still listed, as TensorFlow lists them: their size is that of their slices.
            Kind::Opaque(_) | Kind::Foreign(_) | Kind::String if !e.slices.is_empty() => {
                let mut total = 0u64;
                for (_, key, part) in self.slice_parts(name, e)? {
                    total = total.saturating_add(self.info(&key, &part)?.nbytes);
                }
                total
            }
            Kind::Opaque(_) | Kind::Foreign(_) => e.size,
            Kind::String | Kind::Bytes => {
                let data = self.raw(name, e)?;
                let path = self.data.name(e.shard);
                let at = StringsAt {
                    path: &path,
                    name: &display(name),
                    offset: e.offset,
                };
                strings::read_lengths(&data, e.numel, self.big_endian, at, |_| {})?.total
            }
        };
        Ok(TensorInfo {
            name: name.to_vec(),
            kind: e.kind.clone(),
            shape: e.shape.clone(),
            lod: Vec::new(),
            nbytes,
        })
    }

    /// Every entry of the table (header and slice entries included), in key order.
    fn for_each_entry(&self, mut f: impl FnMut(&[u8], &[u8], u64) -> Result<()>) -> Result<()> {
        let table = self.table();
        let mut it = table.iter();
        while it.next().map_err(|e| e.context(&self.index_path))? {
            f(it.key(), it.value(), it.block_offset())?;
        }
        Ok(())
    }
}

/// The slice keys a partitioned tensor's entry lists (none for a whole tensor).
fn referenced_slice_keys<'e>(name: &'e [u8], e: &'e Entry) -> impl Iterator<Item = Vec<u8>> + 'e {
    e.slices.iter().filter_map(move |s| {
        extents_of(s, e.shape.len())
            .ok()
            .map(|ext| slice_key::encode(name, &ext))
    })
}

/// [`TfCheckpoint`]'s listing, streamed from its `.index` in key order: each entry is parsed as
/// it is reached, so memory does not grow with the number of tensors.
///
/// As TensorFlow's `CheckpointReader`, the slice keys hidden are exactly those that a
/// partitioned tensor's entry lists; any other key (one starting with a NUL byte included) is a
/// tensor. A key that a partitioned tensor `T` lists decodes to `T`'s name ([`slice_key::decode`]
/// inverts [`slice_key::encode`] exactly), so whether a slice key is hidden is decided by looking
/// `T` up: no pass over the whole index first. The slice keys of one tensor are adjacent (the
/// name comes first in the key), so the last tensor looked up is kept.
///
/// Listing needs the `.index` only, except for the size of a string tensor (the sum of its
/// element lengths, stored in its data shard): when that shard is missing or damaged, that
/// tensor's item is the error (naming the shard file and the tensor) and the listing goes on.
struct Scan<'a> {
    ck: &'a TfCheckpoint,
    it: TableIter<'a>,
    /// Where to seek before the first entry.
    start: Option<Vec<u8>>,
    /// Stop at the first key without this prefix.
    prefix: Option<Vec<u8>>,
    done: bool,
    /// Set when the index itself could not be read further: nothing follows that error.
    broken: bool,
    /// The partitioned tensor last looked up for a slice key, and the slice keys it lists.
    owner: Option<(Vec<u8>, Vec<Vec<u8>>)>,
}

impl<'a> Scan<'a> {
    fn new(ck: &'a TfCheckpoint, start: &[u8], prefix: Option<&[u8]>) -> Scan<'a> {
        Scan {
            ck,
            it: ck.table().into_iter_owned(),
            start: Some(start.to_vec()),
            prefix: prefix.map(<[u8]>::to_vec),
            done: false,
            broken: false,
            owner: None,
        }
    }

    /// Whether slice key `key` is listed by its partitioned tensor's entry (so not a tensor).
    fn is_listed_slice(&mut self, key: &[u8]) -> Result<bool> {
        let Some(k) = slice_key::decode(key) else {
            return Ok(false);
        };
        // The header (empty key) lists no slices.
        if k.name.is_empty() {
            return Ok(false);
        }
        if self.owner.as_ref().is_none_or(|(name, _)| *name != k.name) {
            let listed = match self.ck.entry(&k.name)? {
                Some(full) => referenced_slice_keys(&k.name, &full).collect(),
                None => Vec::new(),
            };
            self.owner = Some((k.name, listed));
        }
        Ok(self
            .owner
            .as_ref()
            .is_some_and(|(_, listed)| listed.iter().any(|l| l == key)))
    }

    fn step(&mut self) -> Result<Option<TensorInfo>> {
        let ck = self.ck;
        loop {
            let moved = match self.start.take() {
                Some(start) => self.it.seek(&start),
                None => self.it.next().map(drop),
            };
            if let Err(e) = moved {
                self.broken = true;
                return Err(e.context(&ck.index_path));
            }
            if !self.it.valid() {
                return Ok(None);
            }
            let key = self.it.key();
            if self.prefix.as_ref().is_some_and(|p| !key.starts_with(p)) {
                return Ok(None);
            }
            if key.is_empty() {
                continue; // the header
            }
            let e = ck.parse_entry(key, self.it.value(), self.it.block_offset())?;
            if !slice_key::is_slice_key(key) {
                return ck.info(key, &e).map(Some);
            }
            let key = key.to_vec();
            if !self.is_listed_slice(&key)? {
                return ck.info(&key, &e).map(Some);
            }
        }
    }
}

impl Iterator for Scan<'_> {
    type Item = Result<TensorInfo>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = self.step().transpose();
        // Nothing follows the end or an error of the index itself. An error about one entry
        // (its description does not parse, or a string tensor's lengths cannot be read from
        // its data shard) is that entry's item: the entries after it are still listed.
        self.done = r.is_none() || self.broken;
        r
    }
}

/// A [`Scan`] of the whole index that reports the index bytes it has passed
/// ([`Unit::IndexBytes`]: a checkpoint's tensor count is not known before its index is read).
struct ReportedScan<'a> {
    scan: Scan<'a>,
    progress: &'a dyn Progress,
    /// Index bytes reported so far, and the index's length.
    reported: u64,
    total: u64,
}

impl Iterator for ReportedScan<'_> {
    type Item = Result<TensorInfo>;

    fn next(&mut self) -> Option<Self::Item> {
        let item = self.scan.next();
        // At the end, the rest of the index (its last block, index block and footer) is read.
        let at = match item {
            Some(Ok(_)) => self.scan.it.block_offset(),
            _ => self.total,
        };
        if at > self.reported {
            self.progress.advance(at - self.reported);
            self.reported = at;
        }
        item
    }
}

impl TensorStore for TfCheckpoint {
    fn format(&self) -> Format {
        Format::TensorFlow
    }

    fn layout(&self) -> Result<StoreLayout> {
        let table = self
            .table()
            .figures()
            .map_err(|e| e.context(&self.index_path))?;
        Ok(StoreLayout {
            index_bytes: Some(self.index_src.len() as u64),
            table: Some(table),
            shards: Some(u64::from(self.num_shards)),
            ..StoreLayout::default()
        })
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(Box::new(Scan::new(self, start, None)))
    }

    fn scan_with_progress<'a>(&'a self, progress: &'a dyn Progress) -> Result<TensorInfos<'a>> {
        let total = self.index_src.len() as u64;
        progress.start(total, Unit::IndexBytes);
        Ok(Box::new(ReportedScan {
            scan: Scan::new(self, b"", None),
            progress,
            reported: 0,
            total,
        }))
    }

    fn scan_prefix(&self, prefix: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(Box::new(Scan::new(self, prefix, Some(prefix))))
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        if name.is_empty() || self.is_listed_slice(name)? {
            return Ok(None);
        }
        let Some(e) = self.entry(name)? else {
            return Ok(None);
        };
        let data = match e.kind {
            Kind::Numeric(d) if e.slices.is_empty() => {
                TensorData::Bytes(self.to_le(d, self.checked(name, &e)?))
            }
            Kind::Numeric(d) => {
                let v = self.assemble(name, &e, d, true)?.unwrap_or_default();
                TensorData::Bytes(self.to_le(d, Cow::Owned(v)))
            }
            Kind::Opaque(_) | Kind::Foreign(_) if !e.slices.is_empty() => {
                return Err(self.partitioned_opaque(name, &e))
            }
            Kind::Opaque(_) | Kind::Foreign(_) => TensorData::Bytes(self.checked(name, &e)?),
            Kind::String if !e.slices.is_empty() => return Err(self.partitioned_string(name)),
            Kind::String => {
                let data = self.checked(name, &e)?;
                let path = self.data.name(e.shard);
                let at = StringsAt {
                    path: &path,
                    name: &display(name),
                    offset: e.offset,
                };
                TensorData::Strings(strings::decode(&data, e.numel, self.big_endian, at)?)
            }
            Kind::Bytes => {
                let data = self.checked(name, &e)?;
                let path = self.data.name(e.shard);
                let at = StringsAt {
                    path: &path,
                    name: &display(name),
                    offset: e.offset,
                };
                let start = strings::read_lengths(&data, 1, self.big_endian, at, |_| {})?;
                TensorData::Bytes(match data {
                    Cow::Borrowed(d) => Cow::Borrowed(&d[start.bytes_start..]),
                    Cow::Owned(mut d) => {
                        d.drain(..start.bytes_start);
                        Cow::Owned(d)
                    }
                })
            }
        };
        let nbytes = match &data {
            TensorData::Bytes(b) => b.len() as u64,
            TensorData::Strings(s) => s.iter().map(|x| x.len() as u64).sum(),
        };
        Ok(Some(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: e.kind,
                shape: e.shape,
                lod: Vec::new(),
                nbytes,
            },
            data,
        }))
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        if name.is_empty() || self.is_listed_slice(name)? {
            return Ok(None);
        }
        let Some(e) = self.entry(name)? else {
            return Ok(None);
        };
        let Kind::Numeric(d) = e.kind else {
            return Err(Error::Unsupported(format!(
                "tensor {} in {} is {}: only numeric tensors are read by region",
                display(name),
                self.index_path,
                e.kind.not_numeric().unwrap_or_default()
            )));
        };
        region.check_within(&e.shape, name)?;
        let esize = d.size();
        let want = region.numel().unwrap_or(u64::MAX);
        let bytes = slices::byte_len(region, esize)?;
        let zero = vec![0u64; region.rank()];
        let copy_err = |detail: String| {
            Error::corrupt(
                "tensor data",
                e.offset,
                format!("{}: tensor {}: {detail}", self.index_path, display(name)),
            )
        };
        let mut out = vec![0u8; bytes];
        if e.slices.is_empty() {
            // Only the bytes of the region are read (no checksum: it covers the whole tensor).
            let data = self.raw(name, &e)?;
            slices::copy_region(
                &data,
                &e.shape,
                &region.start,
                &mut out,
                &region.len,
                &zero,
                &region.len,
                esize,
            )
            .map_err(copy_err)?;
        } else {
            let parts = self.slice_parts(name, &e)?;
            let regions: Vec<Region> = parts.iter().map(|(r, _, _)| r.clone()).collect();
            if let Some((i, j)) = slices::find_overlap(&regions) {
                return Err(copy_err(format!("slices {i} and {j} overlap")));
            }
            let have: u64 = regions
                .iter()
                .filter_map(|r| r.intersect(region)?.numel())
                .fold(0, u64::saturating_add);
            if have != want {
                return Err(Error::Slices {
                    name: display(name),
                    problem: crate::error::SliceProblem::Gap,
                    detail: format!(
                        "the region at {:?} of lengths {:?} holds {want} elements, the slices \
                         in {} only {have} of them",
                        region.start, region.len, self.index_path
                    ),
                });
            }
            for (r, key, pe) in &parts {
                let Some(part) = r.intersect(region) else {
                    continue;
                };
                let data = self.raw(key, pe)?;
                slices::copy_part(&data, r, &mut out, region, &part, esize).map_err(copy_err)?;
            }
        }
        let out = self.to_le(d, Cow::Owned(out)).into_owned();
        Ok(Some(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: e.kind,
                shape: region.len.clone(),
                lod: Vec::new(),
                nbytes: out.len() as u64,
            },
            data: TensorData::Bytes(Cow::Owned(out)),
        }))
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        let blocks = self
            .table()
            .verify_all_blocks()
            .map_err(|e| e.context(&self.index_path))?;
        // Every entry holding data has its checksum checked; every partitioned tensor has its
        // slices checked for presence, shape, bounds, overlap and coverage; every slice entry
        // must belong to a partitioned tensor that lists it.
        let mut with_data: Vec<(Vec<u8>, Entry)> = Vec::new();
        let mut partitioned: Vec<(Vec<u8>, Entry)> = Vec::new();
        let mut slice_entries: BTreeMap<Vec<u8>, (u64, Entry)> = BTreeMap::new();
        let mut tensors = 0u64;
        let mut data_bytes = 0u64;
        let mut first = true;
        self.for_each_entry(|key, value, at| {
            if first {
                first = false;
                if !key.is_empty() {
                    return Err(Error::corrupt(
                        "checkpoint header",
                        at,
                        format!(
                            "{}: the first key is not the header's empty key",
                            self.index_path
                        ),
                    ));
                }
                return Ok(());
            }
            let e = self.parse_entry(key, value, at)?;
            if slice_key::is_slice_key(key) && slice_key::decode(key).is_some() {
                // A slice if its partitioned tensor lists it (decided below), else a tensor.
                slice_entries.insert(key.to_vec(), (at, e.clone()));
            } else {
                tensors += 1;
                // Counted as the listing counts it. Partitioned tensors are counted below.
                if e.slices.is_empty() {
                    // For strings, decoding checks the layout and the checksum of the lengths.
                    data_bytes = data_bytes.saturating_add(self.info(key, &e)?.nbytes);
                }
            }
            if e.slices.is_empty() {
                with_data.push((key.to_vec(), e));
            } else {
                partitioned.push((key.to_vec(), e));
            }
            Ok(())
        })?;
        crate::parallel::try_each(&with_data, threads, |(k, e)| self.checked(k, e).map(drop))?;
        let mut referenced = BTreeSet::new();
        for (name, e) in &partitioned {
            // Tensors not assembled (get refuses them) are checked by `info` below: the slices
            // must be there, with the right type and shape; their data was checksummed
            // above, string layouts by info.
            if let Some(d) = e.kind.numeric() {
                self.assemble(name, e, d, false)?;
            }
            data_bytes = data_bytes.saturating_add(self.info(name, e)?.nbytes);
            referenced.extend(referenced_slice_keys(name, e));
        }
        // A key that looks like a slice key but that no partitioned tensor lists is a tensor of
        // its own (TensorFlow lists it too).
        for (key, (_, e)) in slice_entries
            .iter()
            .filter(|(k, _)| !referenced.contains(*k))
        {
            tensors += 1;
            data_bytes = data_bytes.saturating_add(self.info(key, e)?.nbytes);
        }
        Ok(VerifySummary {
            tensors,
            data_bytes,
            checksums: blocks + with_data.len() as u64,
        })
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        if name.is_empty() || self.is_listed_slice(name)? {
            return Ok(None);
        }
        Ok(self
            .entry(name)?
            .filter(|e| e.slices.is_empty())
            .map(|e| self.location(&e)))
    }

    fn slice_locations(&self, name: &[u8]) -> Result<Vec<SliceLocation>> {
        if name.is_empty() || self.is_listed_slice(name)? {
            return Ok(Vec::new());
        }
        let Some(full) = self.entry(name)?.filter(|e| !e.slices.is_empty()) else {
            return Ok(Vec::new());
        };
        Ok(self
            .slice_parts(name, &full)?
            .into_iter()
            .map(|(region, _, e)| SliceLocation {
                region,
                location: self.location(&e),
            })
            .collect())
    }
}

/// The extents of a `TensorSliceProto` (a missing length is the whole dimension), with the
/// rank checked against the full tensor's.
fn extents_of(slice: &TensorSliceProto, rank: usize) -> std::result::Result<Vec<Extent>, String> {
    if slice.extent.len() != rank {
        return Err(format!(
            "slice has {} dimensions, the tensor {rank}",
            slice.extent.len()
        ));
    }
    Ok(slice
        .extent
        .iter()
        .map(|e| match e.has_length {
            Some(HasLength::Length(l)) => Extent {
                start: e.start,
                length: l,
            },
            None => Extent {
                start: e.start,
                length: -1,
            },
        })
        .collect())
}
