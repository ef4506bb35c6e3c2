//! torch.distributed.checkpoint (DCP) checkpoints written by `FileSystemWriter`: a directory
//! holding `.metadata` (a pickle of `torch.distributed.checkpoint.metadata.Metadata`) and data
//! files `__RANK_K.distcp`, read without running any of the pickle
//! ([`crate::interop::pickle`], with [`DCP_GLOBALS`]).
//!
//! The metadata maps each fully qualified name (`model.layer.weight`, flattened as DCP's
//! planner flattens nested state dicts) to a `TensorStorageMetadata` (dtype, global size, and
//! the chunks the ranks saved: offsets and sizes in the global tensor) or a
//! `BytesStorageMetadata` (an object that is no tensor: an optimizer's `param_groups`, a step
//! count), and its `storage_data` maps each chunk (`MetadataIndex(fqn, offsets)`) to where it
//! is stored (`_StorageInfo(relative_path, offset, length)`). Each tensor chunk is a
//! `torch.save` archive of that chunk at that offset of its data file (read by
//! [`super::TorchStore`]); each non-tensor item is the bytes of `torch.save` of the object.
//!
//! Each tensor is its global tensor, assembled from its chunks: [`TensorStore::load`] copies
//! every chunk into place (a tensor stored in one chunk is borrowed from the mapped file when
//! its view is one run), [`TensorStore::load_slice`] reads only the chunks the region meets.
//! Non-tensor items are bytes values ([`Kind::Bytes`], SPEC.md 6.1): loading one gives its
//! stored bytes (a `torch.save` of the object), which a native output keeps as a bytes value.
//! The scalars among them (a step count, a learning rate) are also the store's metadata, as for
//! `torch.save` files.
//!
//! Checked when the directory is opened, for each tensor: its chunks lie inside its size, do
//! not overlap and cover it; each chunk's stored bytes lie inside their data file, which is a
//! plain file name in the directory. A tensor failing a check is [`Error::Corrupt`] for that
//! tensor only (the listing shows the others). A chunk's archive is checked when it is read
//! (its one tensor must have the chunk's sizes and the tensor's dtype). Transformed items
//! (`_extensions`, zstd) are [`Error::Unsupported`] for their tensor.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use super::{view_bytes, Problem, TorchStore};
use crate::dtype::DType;
use crate::error::{path_str, Error, Result};
use crate::interop::pickle::{
    self, with_torch_dtypes, GlobalName, Object, Pickle, Value, MIN_RECORD_BYTES,
    RECORD_BYTES_PER_BYTE,
};
use crate::interop::store::{
    Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary,
};
use crate::name;
use crate::native::region::copy_region;
use crate::native::{Metadata, Region, Source};
use crate::record::MAX_RANK;

/// The metadata file of a DCP checkpoint directory.
pub const METADATA_FILE: &str = ".metadata";
/// Largest `.metadata` read (bytes): DCP's own are about 200 bytes per tensor chunk, so this
/// holds millions.
pub const MAX_METADATA_BYTES: u64 = 1 << 31;
/// Most data files one checkpoint may name.
pub const MAX_FILES: usize = 1 << 20;
/// Most chunks one tensor may have.
pub const MAX_CHUNKS_PER_TENSOR: usize = 1 << 16;
/// Most non-tensor items whose values are read for the metadata, and the largest read.
pub const MAX_METADATA_ITEMS: usize = 1024;
/// Largest non-tensor item read for the metadata (bytes).
pub const MAX_METADATA_ITEM_BYTES: u64 = 1 << 16;

/// The globals a DCP `.metadata` pickle may name (as torch 2.x writes it): the metadata
/// dataclasses, `torch.Size`, torch's dtypes, the encodings of a layout and a memory format,
/// and the `pathlib` path of `StorageMeta.checkpoint_id`. None of them is called.
pub const DCP_GLOBALS: &[GlobalName] = with_torch_dtypes![
    ("collections", "OrderedDict"),
    ("torch.distributed.checkpoint.metadata", "Metadata"),
    (
        "torch.distributed.checkpoint.metadata",
        "TensorStorageMetadata",
    ),
    (
        "torch.distributed.checkpoint.metadata",
        "BytesStorageMetadata",
    ),
    (
        "torch.distributed.checkpoint.metadata",
        "ChunkStorageMetadata",
    ),
    ("torch.distributed.checkpoint.metadata", "TensorProperties"),
    ("torch.distributed.checkpoint.metadata", "MetadataIndex"),
    ("torch.distributed.checkpoint.metadata", "StorageMeta"),
    (
        "torch.distributed.checkpoint.metadata",
        "_MEM_FORMAT_ENCODING",
    ),
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
    ("torch.serialization", "_get_layout"),
    ("pathlib", "PosixPath"),
    ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"),
    ("pathlib", "PureWindowsPath"),
    ("torch", "Size"),
    ("torch", "complex32"),
    ("torch", "qint8"),
    ("torch", "quint8"),
    ("torch", "qint32"),
];

/// Where an item's bytes are: `len` bytes at `offset` of data file `file`.
#[derive(Clone, Copy, Debug)]
struct Stored {
    file: usize,
    offset: u64,
    len: u64,
}

/// Where each chunk `(fqn, offsets)` (a non-tensor item: `(fqn, None)`) is stored, or why
/// that cannot be used. The fqn is the pickle's string, shared, not copied per chunk.
type StorageMap = HashMap<(Arc<str>, Option<Vec<u64>>), std::result::Result<Stored, Problem>>;

/// Most fields of a dataclass's `BUILD` state looked through for one: DCP's have
/// at most a dozen, and a hostile state of a million items shared by a million objects would
/// otherwise be searched a million times.
pub const MAX_FIELDS: usize = 64;
/// Most units of work (steps of the chunk checks: a chunk looked up, compared with another)
/// per byte of the `.metadata` pickle, plus [`MIN_WORK`]. DCP writes about 200 bytes per
/// chunk; this leaves room for a tensor of thousands of chunks compared pairwise.
pub const WORK_PER_BYTE: u64 = 1024;
/// Units of work any `.metadata` may take, however short.
pub const MIN_WORK: u64 = 1 << 24;

#[derive(Clone, Debug)]
struct Chunk {
    region: Region,
    at: Stored,
}

#[derive(Debug)]
enum ItemKind {
    Tensor {
        dtype: DType,
        size: Vec<u64>,
        chunks: Vec<Chunk>,
    },
    Bytes(Stored),
}

#[derive(Debug)]
struct Item {
    name: Vec<u8>,
    kind: ItemKind,
    nbytes: u64,
    problem: Option<Problem>,
}

impl Item {
    /// The bytes this record holds (its chunks are counted as they are made).
    fn heap_size(&self) -> u64 {
        let size = match &self.kind {
            ItemKind::Tensor { size, .. } => 8 * size.len(),
            ItemKind::Bytes(_) => 0,
        };
        (std::mem::size_of::<Item>()
            + self.name.len()
            + size
            + self.problem.as_ref().map_or(0, Problem::detail_len)) as u64
    }
}

/// About the bytes of one `storage_data` entry of a [`StorageMap`] (its offsets aside).
const STORAGE_ENTRY_BYTES: usize = 128;

/// The budgets of [`DcpStore::from_metadata`]: bytes of records built and steps taken.
struct Spend {
    records: pickle::Budget,
    work: pickle::Budget,
}

impl Spend {
    /// What ran out, for the message.
    fn what(&self) -> String {
        if self.records.ran_out() {
            format!("records would pass {} bytes", self.records.limit())
        } else {
            format!("checks would pass {} steps", self.work.limit())
        }
    }
}

#[derive(Debug)]
struct DataFile {
    path: PathBuf,
    len: Option<u64>,
    source: OnceLock<Source>,
}

/// How a data file's bytes are got when another place than a local directory holds them (an
/// object at a URL, read whole): from its plain file name.
pub(crate) type FetchFile = Box<dyn Fn(&str) -> Result<Source> + Send + Sync>;

/// An open DCP checkpoint directory.
#[derive(Debug)]
pub struct DcpStore {
    dir: PathBuf,
    shown: String,
    files: Vec<DataFile>,
    items: Vec<Item>,
    metadata: Metadata,
    /// `None`: the data files are mapped from `dir`.
    fetch: Option<Fetcher>,
}

/// A [`FetchFile`] (a closure, shown by name only).
struct Fetcher(FetchFile);

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fetcher")
    }
}

/// The field `key` of a dataclass's `BUILD` state (a dict of str keys), among its first
/// [`MAX_FIELDS`].
fn field<'p>(p: &'p Pickle, state: Option<&'p Value>, key: &str) -> Option<&'p Value> {
    match state.and_then(|s| p.object(s)) {
        Some(Object::Dict { items, .. }) => items
            .iter()
            .take(MAX_FIELDS)
            .find(|(k, _)| matches!(k, Value::Str(s) if s.as_ref() == key))
            .map(|(_, v)| v),
        _ => None,
    }
}

/// The class and `BUILD` state of an object made by `NEWOBJ` of an allowed DCP class.
fn instance<'p>(p: &'p Pickle, v: &Value) -> Option<(&'static str, Option<&'p Value>)> {
    match p.object(v)? {
        Object::Call {
            func: (_, class),
            state,
            ..
        } => Some((class, state.as_ref())),
        _ => None,
    }
}

/// A tuple or list of non-negative ints (a `torch.Size`) of at most [`MAX_RANK`] (checked
/// before anything is copied: one size may be shared by many chunks).
fn dims(p: &Pickle, v: Option<&Value>) -> Option<Vec<u64>> {
    match p.object(v?)? {
        Object::Tuple(t) | Object::List(t) if t.len() <= MAX_RANK => t
            .iter()
            .map(|x| match x {
                Value::Int(i) => u64::try_from(*i).ok(),
                _ => None,
            })
            .collect(),
        _ => None,
    }
}

/// The dtype of a `TensorProperties`: its state is a tuple starting with the dtype (torch
/// 2.x's `__getstate__`), or a dict with a `dtype` field.
fn properties_dtype(p: &Pickle, props: Option<&Value>) -> std::result::Result<DType, Problem> {
    let corrupt = |detail: &str| Problem::Corrupt {
        offset: 0,
        detail: detail.into(),
    };
    let Some((_, state)) = props.and_then(|v| instance(p, v)) else {
        return Err(corrupt("its properties are not a TensorProperties"));
    };
    let dtype = match state.and_then(|s| p.object(s)) {
        Some(Object::Tuple(t)) => t.first(),
        _ => field(p, state, "dtype"),
    };
    match dtype.and_then(|d| p.object(d)) {
        Some(Object::Global(("torch", d))) => DType::from_name(d).ok_or_else(|| {
            Problem::Unsupported(format!("torch.{d}, a dtype paramdex does not read"))
        }),
        _ => Err(corrupt("its properties name no torch dtype")),
    }
}

/// A data file name as DCP writes it: one plain name inside the directory.
fn plain_file_name(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains(['/', '\\', '\0'])
}

impl DcpStore {
    /// Opens the DCP checkpoint in directory `dir` (or `dir` naming its `.metadata` file).
    ///
    /// Errors: [`Error::Io`] when `.metadata` cannot be read; [`Error::Pickle`] when it is
    /// refused (a global outside [`DCP_GLOBALS`], named) or damaged; [`Error::Corrupt`] when
    /// it is not a DCP `Metadata`; [`Error::LimitExceeded`] past [`MAX_METADATA_BYTES`],
    /// [`MAX_FILES`] or [`MAX_CHUNKS_PER_TENSOR`].
    pub fn open(dir: impl AsRef<Path>) -> Result<DcpStore> {
        let mut dir = dir.as_ref().to_path_buf();
        if dir.file_name().is_some_and(|n| n == METADATA_FILE) {
            dir.pop();
            if dir.as_os_str().is_empty() {
                dir.push(".");
            }
        }
        let meta_path = dir.join(METADATA_FILE);
        let len = std::fs::metadata(&meta_path)
            .map_err(|e| Error::io(format!("reading {}", meta_path.display()), e))?
            .len();
        crate::error::ensure_within(
            "bytes of a DCP .metadata file",
            len,
            MAX_METADATA_BYTES,
            None,
        )?;
        let bytes = std::fs::read(&meta_path)
            .map_err(|e| Error::io(format!("reading {}", meta_path.display()), e))?;
        let lens = |name: &str| std::fs::metadata(dir.join(name)).ok().map(|m| m.len());
        Self::from_metadata(&bytes, dir.clone(), &lens, None)
    }

    /// Opens a DCP checkpoint from the bytes of its `.metadata` alone, with no data file
    /// (every item is then reported as stored in a missing file): for fuzzing and for checking
    /// a metadata file by itself.
    pub fn from_metadata_bytes(bytes: &[u8]) -> Result<DcpStore> {
        Self::from_metadata(bytes, PathBuf::from("<memory>"), &|_| None, None)
    }

    /// Opens a DCP checkpoint from the bytes of its `.metadata` held somewhere else than a
    /// local directory (objects under a URL prefix, `dir`): `file_len` is the length of a data
    /// file (`None`: missing), `fetch` gets its bytes when first needed. The same parsing and
    /// checks as [`DcpStore::open`].
    #[cfg(feature = "s3")]
    pub(crate) fn from_fetched(
        bytes: &[u8],
        dir: PathBuf,
        file_len: &dyn Fn(&str) -> Option<u64>,
        fetch: FetchFile,
    ) -> Result<DcpStore> {
        Self::from_metadata(bytes, dir, file_len, Some(Fetcher(fetch)))
    }

    /// Opens a DCP checkpoint from the bytes of its `.metadata`; `dir` is where its data
    /// files are, `file_len` the length of one (`None`: missing), `fetch` how their bytes are
    /// got (`None`: mapped from `dir`).
    fn from_metadata(
        bytes: &[u8],
        dir: PathBuf,
        file_len: &dyn Fn(&str) -> Option<u64>,
        fetch: Option<Fetcher>,
    ) -> Result<DcpStore> {
        let shown = path_str(&dir);
        let meta_shown = path_str(&dir.join(METADATA_FILE));
        let p = pickle::parse(bytes, &meta_shown, DCP_GLOBALS)?;
        let bad = |detail: String| {
            Error::corrupt("torch DCP metadata", 0, format!("{meta_shown}: {detail}"))
        };
        let Some(("Metadata", state)) = instance(&p, p.root()) else {
            return Err(bad(
                "the pickle is not a torch.distributed.checkpoint Metadata".into(),
            ));
        };
        let Some(Object::Dict {
            items: sd_items, ..
        }) = field(&p, state, "state_dict_metadata").and_then(|v| p.object(v))
        else {
            return Err(bad("its state_dict_metadata is not a dict".into()));
        };
        // What the records built here may cost, in bytes and in steps: the pickle shares
        // values (one chunk list under many tensors, one MetadataIndex under many keys), the
        // records do not.
        let mut budget = Spend {
            records: p.budget(RECORD_BYTES_PER_BYTE, MIN_RECORD_BYTES),
            work: p.budget(WORK_PER_BYTE, MIN_WORK),
        };
        let over = |what: String| Error::Pickle {
            path: meta_shown.clone(),
            offset: p.end() as u64,
            problem: crate::error::PickleProblem::Limit,
            detail: format!(
                "its {what} ({RECORD_BYTES_PER_BYTE} bytes of records and {WORK_PER_BYTE} steps \
                 per byte of the {}-byte pickle): values shared many times over",
                p.end()
            ),
        };
        // storage_data: MetadataIndex(fqn, offset) -> _StorageInfo.
        let mut files: Vec<DataFile> = Vec::new();
        let mut file_ids: HashMap<String, usize> = HashMap::new();
        let mut stored: StorageMap = HashMap::new();
        let storage = match field(&p, state, "storage_data").and_then(|v| p.object(v)) {
            Some(Object::Dict { items, .. }) => items.as_slice(),
            _ => return Err(bad("its storage_data is not a dict".into())),
        };
        for (k, v) in storage {
            let Some(("MetadataIndex", kstate)) = instance(&p, k) else {
                return Err(bad("a storage_data key is not a MetadataIndex".into()));
            };
            let Some(Value::Str(fqn)) = field(&p, kstate, "fqn") else {
                return Err(bad("a MetadataIndex without a str fqn".into()));
            };
            let offset = match field(&p, kstate, "offset") {
                None | Some(Value::None) => None,
                o => Some(dims(&p, o).ok_or_else(|| {
                    bad(format!(
                        "the MetadataIndex of {fqn:?} has an offset that is not a torch.Size"
                    ))
                })?),
            };
            let Some(("_StorageInfo", vstate)) = instance(&p, v) else {
                return Err(bad(format!("the storage of {fqn:?} is not a _StorageInfo")));
            };
            // The entry's key (its fqn hashed, its offsets copied), then whatever the entry
            // adds below (a data file, a message) is counted once it is made.
            let offsets_len = offset.as_ref().map_or(0, Vec::len);
            // Its data file's name is checked and hashed too (one name may be shared by all).
            let rel_len = match field(&p, vstate, "relative_path") {
                Some(Value::Str(r)) => r.len(),
                _ => 0,
            };
            if !budget.work.spend((1 + fqn.len() + rel_len) as u64)
                || !budget
                    .records
                    .spend((STORAGE_ENTRY_BYTES + 8 * offsets_len) as u64)
            {
                return Err(over(budget.what()));
            }
            let files_before = files.len();
            let corrupt = |detail: String| Problem::Corrupt { offset: 0, detail };
            let info = (|| {
                let Some(Value::Str(rel)) = field(&p, vstate, "relative_path") else {
                    return Err(corrupt("its _StorageInfo has no str relative_path".into()));
                };
                let (Some(Value::Int(off)), Some(Value::Int(len))) =
                    (field(&p, vstate, "offset"), field(&p, vstate, "length"))
                else {
                    return Err(corrupt(
                        "its _StorageInfo has no int offset and length".into(),
                    ));
                };
                let (Ok(offset), Ok(len)) = (u64::try_from(*off), u64::try_from(*len)) else {
                    return Err(corrupt(format!("a negative offset {off} or length {len}")));
                };
                match field(&p, vstate, "transform_descriptors") {
                    None | Some(Value::None) => {}
                    Some(v) if matches!(p.object(v), Some(Object::List(l) | Object::Tuple(l)) if l.is_empty()) =>
                        {}
                    Some(_) => {
                        return Err(Problem::Unsupported(
                            "its bytes are transformed (FileSystemWriter _extensions, such as \
                             zstd), which paramdex does not read"
                                .into(),
                        ))
                    }
                }
                if !plain_file_name(rel) {
                    return Err(corrupt(format!(
                        "its data file {rel:?} is not a plain file name inside the directory"
                    )));
                }
                let file = match file_ids.get(rel.as_ref()) {
                    Some(&i) => i,
                    None => {
                        if files.len() >= MAX_FILES {
                            return Err(Problem::Limit {
                                value: files.len() as u64 + 1,
                                limit: MAX_FILES as u64,
                            });
                        }
                        files.push(DataFile {
                            path: dir.join(rel.as_ref()),
                            len: file_len(rel),
                            source: OnceLock::new(),
                        });
                        file_ids.insert(rel.to_string(), files.len() - 1);
                        files.len() - 1
                    }
                };
                let flen = files[file].len.ok_or_else(|| {
                    corrupt(format!(
                        "its data file {} is missing",
                        files[file].path.display()
                    ))
                })?;
                if offset.checked_add(len).is_none_or(|end| end > flen) {
                    return Err(corrupt(format!(
                        "its {len} bytes at offset {offset} run past the end of {} ({flen} bytes)",
                        files[file].path.display()
                    )));
                }
                Ok(Stored { file, offset, len })
            })();
            let added = files[files_before..]
                .iter()
                .map(|f| std::mem::size_of::<DataFile>() + 2 * f.path.as_os_str().len())
                .sum::<usize>()
                + info.as_ref().err().map_or(0, Problem::detail_len);
            if !budget.records.spend(added as u64) {
                return Err(over(budget.what()));
            }
            stored.insert((fqn.clone(), offset), info);
        }
        let mut items = Vec::with_capacity(sd_items.len());
        let mut metadata = Metadata::new();
        for (k, v) in sd_items {
            let Value::Str(fqn) = k else {
                return Err(bad("a state_dict_metadata key is not a str".into()));
            };
            if !budget.work.spend(1 + fqn.len() as u64) {
                return Err(over(budget.what()));
            }
            let item = match instance(&p, v) {
                Some(("BytesStorageMetadata", _)) => match stored.get(&(fqn.clone(), None)) {
                    Some(Ok(at)) => Item {
                        name: fqn.as_bytes().to_vec(),
                        kind: ItemKind::Bytes(*at),
                        nbytes: at.len,
                        problem: None,
                    },
                    other => Item {
                        name: fqn.as_bytes().to_vec(),
                        kind: ItemKind::Bytes(Stored {
                            file: 0,
                            offset: 0,
                            len: 0,
                        }),
                        nbytes: 0,
                        problem: Some(named(
                            match other {
                                Some(Err(e)) => e.clone(),
                                _ => Problem::Corrupt {
                                    offset: 0,
                                    detail: "no storage_data entry says where it is stored".into(),
                                },
                            },
                            &meta_shown,
                            "item",
                            fqn,
                        )),
                    },
                },
                Some(("TensorStorageMetadata", tstate)) => {
                    Self::tensor(&p, fqn, tstate, &stored, &meta_shown, &mut budget)
                        .ok_or_else(|| over(budget.what()))?
                }
                _ => {
                    return Err(bad(format!(
                        "the metadata of {fqn:?} is neither a TensorStorageMetadata nor a \
                         BytesStorageMetadata"
                    )))
                }
            };
            if !budget.records.spend(item.heap_size()) {
                return Err(over(budget.what()));
            }
            items.push(item);
        }
        items.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = items.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(bad(format!(
                "two items are both named {}",
                name::display(&w[0].name)
            )));
        }
        let mut store = DcpStore {
            dir,
            shown,
            files,
            items,
            metadata: Metadata::new(),
            fetch,
        };
        // The scalars among the non-tensor items, as metadata.
        for it in &store.items {
            if metadata.len() >= MAX_METADATA_ITEMS {
                break;
            }
            if let (ItemKind::Bytes(at), None) = (&it.kind, &it.problem) {
                if at.len <= MAX_METADATA_ITEM_BYTES {
                    if let Some(v) = store.scalar(at) {
                        let _ = metadata.insert(String::from_utf8_lossy(&it.name).into_owned(), v);
                    }
                }
            }
        }
        store.metadata = metadata;
        Ok(store)
    }

    /// One tensor item from its `TensorStorageMetadata` state, its chunks checked; `None`
    /// when `budget` runs out (the file is then refused).
    fn tensor(
        p: &Pickle,
        fqn: &Arc<str>,
        state: Option<&Value>,
        stored: &StorageMap,
        meta_shown: &str,
        budget: &mut Spend,
    ) -> Option<Item> {
        let mut exhausted = false;
        let result = (|| -> std::result::Result<(DType, Vec<u64>, Vec<Chunk>, u64), Problem> {
            // Running out of budget ends the checks; the caller refuses the file.
            let mut out_of_budget = || {
                exhausted = true;
                Problem::Limit { value: 0, limit: 0 }
            };
            let corrupt = |detail: String| Problem::Corrupt { offset: 0, detail };
            let dtype = properties_dtype(p, field(p, state, "properties"))?;
            let size = dims(p, field(p, state, "size"))
                .ok_or_else(|| corrupt("its size is not a torch.Size".into()))?;
            let numel = size
                .iter()
                .try_fold(1u64, |a, &d| a.checked_mul(d))
                .ok_or_else(|| corrupt(format!("its size {size:?} overflows")))?;
            let nbytes = numel
                .checked_mul(dtype.size() as u64)
                .ok_or_else(|| corrupt(format!("its size {size:?} overflows")))?;
            let list = match field(p, state, "chunks").and_then(|c| p.object(c)) {
                Some(Object::List(l) | Object::Tuple(l)) => l,
                _ => return Err(corrupt("its chunks are not a list".into())),
            };
            if list.len() > MAX_CHUNKS_PER_TENSOR {
                return Err(Problem::Limit {
                    value: list.len() as u64,
                    limit: MAX_CHUNKS_PER_TENSOR as u64,
                });
            }
            let mut chunks = Vec::with_capacity(list.len());
            let mut covered = 0u64;
            for c in list {
                // A chunk: its key hashed (the fqn), its offsets and sizes copied twice.
                if !budget
                    .work
                    .spend(1 + fqn.len() as u64 + 2 * size.len() as u64)
                    || !budget
                        .records
                        .spend((std::mem::size_of::<Chunk>() + 4 * 8 * size.len()) as u64)
                {
                    return Err(out_of_budget());
                }
                let Some(("ChunkStorageMetadata", cstate)) = instance(p, c) else {
                    return Err(corrupt("a chunk is not a ChunkStorageMetadata".into()));
                };
                let (Some(offsets), Some(sizes)) = (
                    dims(p, field(p, cstate, "offsets")),
                    dims(p, field(p, cstate, "sizes")),
                ) else {
                    return Err(corrupt(
                        "a chunk's offsets or sizes are not a torch.Size".into(),
                    ));
                };
                let region = Region::new(offsets.clone(), sizes.clone())
                    .filter(|r| r.rank() == size.len() && r.is_within(&size))
                    .ok_or_else(|| {
                        corrupt(format!(
                            "its chunk at {offsets:?} of sizes {sizes:?} does not lie inside its \
                             size {size:?}"
                        ))
                    })?;
                let at = match stored.get(&(fqn.clone(), Some(offsets.clone()))) {
                    Some(Ok(at)) => *at,
                    Some(Err(e)) => {
                        return Err(match e.clone() {
                            Problem::Corrupt { offset, detail } => Problem::Corrupt {
                                offset,
                                detail: format!("its chunk at {offsets:?}: {detail}"),
                            },
                            Problem::Unsupported(d) => {
                                Problem::Unsupported(format!("its chunk at {offsets:?}: {d}"))
                            }
                            p => p,
                        });
                    }
                    None => {
                        return Err(corrupt(format!(
                            "no storage_data entry says where its chunk at {offsets:?} is stored"
                        )))
                    }
                };
                // Within the size, so no overflow.
                covered = covered.saturating_add(region.numel().unwrap_or(u64::MAX));
                chunks.push(Chunk { region, at });
            }
            // Sorted by offsets: an overlap is found comparing each chunk with those after it
            // that start before it ends along the first dimension.
            chunks.sort_by(|a, b| a.region.start.cmp(&b.region.start));
            for (i, a) in chunks.iter().enumerate() {
                if a.region.is_empty() {
                    continue;
                }
                for b in &chunks[i + 1..] {
                    if !size.is_empty() && b.region.start[0] >= a.region.end(0) {
                        break;
                    }
                    if !budget.work.spend(1 + size.len() as u64) {
                        return Err(out_of_budget());
                    }
                    if !b.region.is_empty() && a.region.overlaps(&b.region) {
                        return Err(corrupt(format!(
                            "its chunks at {:?} (sizes {:?}) and at {:?} (sizes {:?}) overlap",
                            a.region.start, a.region.len, b.region.start, b.region.len
                        )));
                    }
                }
            }
            if covered != numel {
                return Err(corrupt(format!(
                    "its chunks hold {covered} of its {numel} elements (size {size:?}): some of \
                     it is stored nowhere"
                )));
            }
            Ok((dtype, size, chunks, nbytes))
        })();
        if exhausted {
            return None;
        }
        Some(match result {
            Ok((dtype, size, chunks, nbytes)) => Item {
                name: fqn.as_bytes().to_vec(),
                kind: ItemKind::Tensor {
                    dtype,
                    size,
                    chunks,
                },
                nbytes,
                problem: None,
            },
            Err(problem) => Item {
                name: fqn.as_bytes().to_vec(),
                kind: ItemKind::Tensor {
                    dtype: DType::UInt8,
                    size: Vec::new(),
                    chunks: Vec::new(),
                },
                nbytes: 0,
                problem: Some(named(problem, meta_shown, "tensor", fqn)),
            },
        })
    }

    /// The mapped data file `i`.
    fn source(&self, i: usize) -> Result<&Source> {
        let f = &self.files[i];
        if let Some(s) = f.source.get() {
            return Ok(s);
        }
        let s = match &self.fetch {
            // A plain file name (checked at open): the path's last component.
            Some(Fetcher(fetch)) => {
                let name = f.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let s = fetch(name)?;
                // The bytes got must be the length the open checked every offset against.
                if Some(s.len() as u64) != f.len {
                    return Err(Error::corrupt(
                        "torch DCP data file",
                        0,
                        format!(
                            "{}: {} bytes read where its length was {:?} at open (it changed)",
                            path_str(&f.path),
                            s.len(),
                            f.len
                        ),
                    ));
                }
                s
            }
            None => Source::map(&f.path)?,
        };
        // Another thread may have mapped it first: either map serves.
        Ok(f.source.get_or_init(|| s))
    }

    /// The stored bytes at `at`, checked against the mapped file.
    fn stored(&self, at: &Stored) -> Result<(&Source, std::ops::Range<usize>)> {
        let s = self.source(at.file)?;
        let path = &self.files[at.file].path;
        let r = at
            .offset
            .checked_add(at.len)
            .filter(|&e| e <= s.len() as u64)
            .map(|e| at.offset as usize..e as usize)
            .ok_or_else(|| {
                Error::corrupt(
                    "torch DCP data file",
                    at.offset,
                    format!(
                        "{}: {} bytes at offset {} run past its end ({} bytes)",
                        path_str(path),
                        at.len,
                        at.offset,
                        s.len()
                    ),
                )
            })?;
        Ok((s, r))
    }

    /// A scalar `torch.save`d as the non-tensor item at `at` (an int, float, bool, short str).
    fn scalar(&self, at: &Stored) -> Option<crate::native::MetaValue> {
        let (s, r) = self.stored(at).ok()?;
        let ts = TorchStore::from_source_range(
            s.clone(),
            r,
            self.files[at.file].path.clone(),
            String::new(),
        )
        .ok()??;
        ts.root_scalar.clone()
    }

    /// The bytes of `chunk` of tensor `it` (row-major, the chunk's sizes), read from its
    /// `torch.save` archive and checked against the metadata.
    fn chunk_bytes(&self, it: &Item, dtype: DType, chunk: &Chunk) -> Result<Cow<'_, [u8]>> {
        let (ts, t) = self.chunk_tensor(it, dtype, chunk)?;
        let (s, _) = self.stored(&chunk.at)?;
        match view_bytes(&t, s, &ts.shown)? {
            Cow::Borrowed(b) => Ok(Cow::Borrowed(b)),
            Cow::Owned(o) => Ok(Cow::Owned(o)),
        }
    }

    /// The archive of `chunk` and its one tensor, checked.
    fn chunk_tensor(
        &self,
        it: &Item,
        dtype: DType,
        chunk: &Chunk,
    ) -> Result<(TorchStore, super::Tensor)> {
        let (s, r) = self.stored(&chunk.at)?;
        let path = &self.files[chunk.at.file].path;
        let shown = format!(
            "{} (tensor {}, chunk at {:?}, bytes {}..{})",
            path_str(path),
            name::display(&it.name),
            chunk.region.start,
            r.start,
            r.end
        );
        let bad = |detail: String| {
            Error::corrupt(
                "torch DCP chunk",
                r.start as u64,
                format!("{shown}: {detail}"),
            )
        };
        let ts = TorchStore::from_source_range(s.clone(), r.clone(), path.clone(), shown.clone())?
            .ok_or_else(|| bad("not a torch.save archive".into()))?;
        let t = match ts.tensors.as_slice() {
            [t] if t.name.is_empty() => t.clone(),
            _ => {
                return Err(bad(
                    "the archive does not hold exactly one bare tensor".into()
                ))
            }
        };
        if let Some(p) = &t.problem {
            return Err(ts.error(&t, p));
        }
        if t.shape != chunk.region.len || t.dtype.size() != dtype.size() {
            return Err(bad(format!(
                "it holds a {} tensor of shape {:?} where the metadata says {} of shape {:?}",
                t.dtype.name(),
                t.shape,
                dtype.name(),
                chunk.region.len
            )));
        }
        Ok((ts, t))
    }

    fn find(&self, name: &[u8]) -> Option<&Item> {
        self.items
            .binary_search_by(|t| t.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.items[i])
    }

    fn error(&self, p: &Problem) -> Error {
        match p {
            Problem::Corrupt { offset, detail } => {
                Error::corrupt("torch DCP checkpoint", *offset, detail.clone())
            }
            Problem::Unsupported(d) => Error::Unsupported(d.clone()),
            Problem::Limit { value, limit } => {
                Error::limit("chunks of a DCP tensor", *value, *limit, None)
            }
        }
    }

    fn info_of(it: &Item) -> TensorInfo {
        let (kind, shape) = match &it.kind {
            ItemKind::Tensor { dtype, size, .. } => (Kind::Numeric(*dtype), size.clone()),
            ItemKind::Bytes(_) => (Kind::Bytes, Vec::new()),
        };
        TensorInfo {
            name: it.name.clone(),
            kind,
            shape,
            lod: Vec::new(),
            nbytes: it.nbytes,
        }
    }

    /// The non-tensor items' names (DCP `BYTE_IO`: objects saved with `torch.save`).
    pub fn byte_items(&self) -> Vec<Vec<u8>> {
        self.items
            .iter()
            .filter(|i| matches!(i.kind, ItemKind::Bytes(_)))
            .map(|i| i.name.clone())
            .collect()
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn checked(&self, name: &[u8]) -> Result<Option<&Item>> {
        match self.find(name) {
            None => Ok(None),
            Some(it) => match &it.problem {
                Some(p) => Err(self.error(p)),
                None => Ok(Some(it)),
            },
        }
    }
}

/// `problem` of the item `what` `fqn` of the checkpoint whose metadata is `meta_shown`, its
/// message naming both.
fn named(problem: Problem, meta_shown: &str, what: &str, fqn: &str) -> Problem {
    let prefix = format!("{meta_shown}: {what} {}: ", name::display(fqn.as_bytes()));
    match problem {
        Problem::Corrupt { offset, detail } => Problem::Corrupt {
            offset,
            detail: prefix + &detail,
        },
        Problem::Unsupported(d) => Problem::Unsupported(prefix + &d),
        p => p,
    }
}

impl TensorStore for DcpStore {
    fn format(&self) -> Format {
        Format::TorchDcp
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.metadata.clone())
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let from = self.items.partition_point(|t| t.name.as_slice() < start);
        Ok(Box::new(self.items[from..].iter().map(
            |it| match &it.problem {
                Some(p) => Err(self.error(p)),
                None => Ok(Self::info_of(it)),
            },
        )))
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        Ok(self.checked(name)?.map(Self::info_of))
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(it) = self.checked(name)? else {
            return Ok(None);
        };
        let data = match &it.kind {
            ItemKind::Bytes(at) => {
                let (s, r) = self.stored(at)?;
                Cow::Borrowed(&s[r])
            }
            ItemKind::Tensor {
                dtype,
                size,
                chunks,
            } => match chunks.as_slice() {
                [c] => self.chunk_bytes(it, *dtype, c)?,
                _ => {
                    let full = Region::full(size);
                    return self.load_slice(name, &full).map(|o| {
                        o.map(|mut t| {
                            t.info = Self::info_of(it);
                            t
                        })
                    });
                }
            },
        };
        Ok(Some(LoadedTensor {
            info: Self::info_of(it),
            data: TensorData::Bytes(data),
        }))
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        let Some(it) = self.checked(name)? else {
            return Ok(None);
        };
        let ItemKind::Tensor {
            dtype,
            size,
            chunks,
        } = &it.kind
        else {
            return Err(Error::Unsupported(format!(
                "{}: item {} is no tensor (an object saved with torch.save): only tensors are \
                 read by region",
                self.shown,
                name::display(name)
            )));
        };
        region.check_within(size, name)?;
        let es = dtype.size();
        // Every chunk the region meets is parsed and checked before the output is allocated.
        let mut parts = Vec::new();
        for c in chunks {
            if let Some(inter) = c.region.intersect(region) {
                if inter.is_empty() {
                    continue;
                }
                parts.push((c, inter, self.chunk_bytes(it, *dtype, c)?));
            }
        }
        let bytes = crate::native::region::byte_len(region, es)?;
        let mut out = vec![0u8; bytes];
        for (c, inter, data) in &parts {
            copy_region(
                data,
                &c.region.len,
                &inter.offset_in(&c.region),
                &mut out,
                &region.len,
                &inter.offset_in(region),
                &inter.len,
                es,
            )
            .map_err(|d| {
                Error::corrupt(
                    "torch DCP chunk",
                    c.at.offset,
                    format!("{}: tensor {}: {d}", self.shown, name::display(name)),
                )
            })?;
        }
        Ok(Some(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: Kind::Numeric(*dtype),
                shape: region.len.clone(),
                lod: Vec::new(),
                nbytes: bytes as u64,
            },
            data: TensorData::Bytes(Cow::Owned(out)),
        }))
    }

    /// Checks every tensor's chunks (each archive's zip CRC-32s, its tensor against the
    /// metadata) and that every non-tensor item's bytes lie inside their file.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        let mut s = VerifySummary::default();
        for it in &self.items {
            if let Some(p) = &it.problem {
                return Err(self.error(p));
            }
            match &it.kind {
                ItemKind::Bytes(at) => {
                    self.stored(at)?;
                }
                ItemKind::Tensor { dtype, chunks, .. } => {
                    for c in chunks {
                        let (ts, _) = self.chunk_tensor(it, *dtype, c)?;
                        s.checksums += ts.verify(1)?.checksums;
                    }
                }
            }
            s.tensors += 1;
            s.data_bytes += it.nbytes;
        }
        Ok(s)
    }
}

/// Whether `path` is a DCP checkpoint directory (it holds a `.metadata` file starting like a
/// pickle) or its `.metadata` file.
pub(crate) fn is_dcp(path: &Path) -> bool {
    let meta = if path.file_name().is_some_and(|n| n == METADATA_FILE) {
        path.to_path_buf()
    } else {
        path.join(METADATA_FILE)
    };
    let mut head = [0u8; 2];
    meta.is_file()
        && std::fs::File::open(&meta)
            .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
            .is_ok()
        && crate::interop::foreign::pickle_protocol(&head).is_some()
}

/// Opens `path` as a DCP checkpoint (a directory holding `.metadata`, or that file), or
/// `Ok(None)` if it is not one.
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !is_dcp(path) {
        return Ok(None);
    }
    Ok(Some(Box::new(DcpStore::open(path)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_file_names_stay_inside() {
        assert!(plain_file_name("__0_0.distcp"));
        for n in ["", ".", "..", "../x", "/etc/passwd", "a\\b", "a/b"] {
            assert!(!plain_file_name(n), "{n}");
        }
    }
}
