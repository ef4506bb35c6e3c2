//! `torch.save` files (`model.pt`, `pytorch_model.bin`): a zip of stored entries holding
//! `PREFIX/data.pkl` (the pickled object), `PREFIX/data/KEY` (the raw bytes of each storage),
//! `PREFIX/byteorder` and `PREFIX/version`, read without running any of the pickle
//! ([`crate::interop::pickle`], with [`TORCH_GLOBALS`]).
//!
//! The pickled object's tensors are listed under their `state_dict` names: the keys of nested
//! dicts and `OrderedDict`s and the indexes of lists and tuples, joined with `.`
//! (`model.layer.0.weight`, `optimizer.state.0.exp_avg`); a file of one bare tensor lists it
//! under the empty name. Each tensor is `torch._utils._rebuild_tensor_v2(storage, offset,
//! size, stride, ...)` (inside `_rebuild_parameter` for an `nn.Parameter`), its storage a
//! persistent id `('storage', torch.XStorage, key, location, numel)`. Items that are not
//! tensors (an epoch number, a learning rate) are not tensors of the store; the scalars and
//! strings among them become its [`TensorStore::metadata`] (at most [`MAX_METADATA_ITEMS`]).
//!
//! A tensor whose elements are one contiguous run of its storage (row-major strides) is
//! loaded zero-copy, as a range of the mapped file; any other view (a transpose, a slice with a
//! step) is gathered into a new buffer. Tensors sharing a storage (tied weights) are each
//! readable. Every view is checked against the bytes its storage holds when the file is opened:
//! one that reaches past them is [`Error::Corrupt`] naming the tensor, reported for that tensor
//! only (the listing shows the others). Storage types paramdex has no dtype for (quantized,
//! complex32) are [`Error::Unsupported`] for their tensors only.

pub mod dcp;
pub(crate) mod zip;

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{path_str, Error, Result};
use crate::interop::pickle::{
    self, Object, Pickle, Value, MIN_RECORD_BYTES, RECORD_BYTES_PER_BYTE, TORCH_GLOBALS,
};
use crate::interop::store::{
    DataLocation, Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore,
    VerifySummary,
};
use crate::name;
use crate::native::{Metadata, Source};
use crate::record::MAX_RANK;

pub use zip::MAX_ENTRIES;

/// Most non-tensor items kept as metadata.
pub const MAX_METADATA_ITEMS: usize = 1024;
/// Largest `bytes` value kept as metadata (a longer one is left out, as a long string is).
pub const MAX_METADATA_BYTES_VALUE: usize = 4096;

/// Most bytes of a gathered view whose elements repeat those of its storage (a stride of 0, an
/// `expand`): beyond the size of the storage itself, a view may hold at most this many bytes.
pub const MAX_EXPANDED_BYTES: u64 = 1 << 30;

/// Why one tensor cannot be read.
#[derive(Clone, Debug)]
enum Problem {
    Corrupt { offset: u64, detail: String },
    Unsupported(String),
    Limit { value: u64, limit: u64 },
}

#[derive(Clone, Debug)]
struct Tensor {
    name: Vec<u8>,
    dtype: DType,
    /// Offset of the storage's data in the file, and its length.
    storage_at: u64,
    storage_len: u64,
    /// In elements.
    offset: u64,
    shape: Vec<u64>,
    stride: Vec<u64>,
    nbytes: u64,
    problem: Option<Problem>,
}

impl Problem {
    /// The length of its message (for the record budgets).
    fn detail_len(&self) -> usize {
        match self {
            Problem::Corrupt { detail, .. } | Problem::Unsupported(detail) => detail.len(),
            Problem::Limit { .. } => 0,
        }
    }
}

impl Tensor {
    /// The bytes this record holds, for the record budget ([`pickle::RECORD_BYTES_PER_BYTE`]).
    fn heap_size(&self) -> u64 {
        let problem = self.problem.as_ref().map_or(0, Problem::detail_len);
        (std::mem::size_of::<Tensor>()
            + self.name.len()
            + 8 * (self.shape.len() + self.stride.len())
            + problem) as u64
    }

    fn contiguous(&self) -> bool {
        let mut expect = 1u64;
        for (&d, &s) in self.shape.iter().zip(&self.stride).rev() {
            if d != 1 && s != expect {
                return false;
            }
            expect = expect.saturating_mul(d);
        }
        true
    }
}

/// An open `torch.save` file.
#[derive(Debug)]
pub struct TorchStore {
    path: PathBuf,
    shown: String,
    source: Source,
    entries: Vec<zip::Entry>,
    tensors: Vec<Tensor>,
    metadata: Metadata,
    /// The pickled object itself when it is a scalar (a torch DCP non-tensor item).
    root_scalar: Option<crate::native::MetaValue>,
}

/// The dtype of a torch storage class (`torch.FloatStorage`...) of [`TORCH_GLOBALS`].
fn storage_dtype(g: pickle::GlobalName) -> Option<DType> {
    Some(match g {
        ("torch", "FloatStorage") => DType::Float32,
        ("torch", "DoubleStorage") => DType::Float64,
        ("torch", "HalfStorage") => DType::Float16,
        ("torch", "BFloat16Storage") => DType::BFloat16,
        ("torch", "LongStorage") => DType::Int64,
        ("torch", "IntStorage") => DType::Int32,
        ("torch", "ShortStorage") => DType::Int16,
        ("torch", "CharStorage") => DType::Int8,
        ("torch", "ByteStorage") => DType::UInt8,
        ("torch", "BoolStorage") => DType::Bool,
        ("torch", "ComplexFloatStorage") => DType::Complex64,
        ("torch", "ComplexDoubleStorage") => DType::Complex128,
        // torch 2.x's storage of the dtypes without a typed storage class (float8, uint16...),
        // with `_rebuild_tensor_v3`.
        ("torch.storage", "UntypedStorage") => DType::UInt8,
        _ => return None,
    })
}

/// A leaf that is no tensor as a metadata value: a scalar or short string
/// ([`pickle::metadata_value`]), or a `bytes` of at most [`MAX_METADATA_BYTES_VALUE`]
/// (`_codecs.encode`, as `torch.save` pickles `bytes`); `stream` is the pickle's.
fn leaf_metadata(p: &Pickle, v: &Value, stream: &[u8]) -> Option<crate::native::MetaValue> {
    match v {
        Value::Bytes(b) => p
            .bytes(b, stream)
            .filter(|b| b.len() <= MAX_METADATA_BYTES_VALUE)
            .map(|b| crate::native::MetaValue::Bytes(b.to_vec())),
        _ => pickle::metadata_value(v),
    }
}

/// The bytes a metadata value holds, for the record budget.
fn meta_size(m: &crate::native::MetaValue) -> usize {
    use crate::native::MetaValue;
    std::mem::size_of::<MetaValue>()
        + match m {
            MetaValue::String(s) => s.len(),
            MetaValue::Bytes(b) => b.len(),
            _ => 0,
        }
}

/// Why a leaf that is a tensor cannot be read from its rebuild call.
enum NotRead {
    Corrupt(String),
    Unsupported(String),
}

/// The `torch._utils._rebuild_tensor_v2` arguments of a leaf (`(storage, offset, size,
/// stride, ...)`): `None` when the leaf is no tensor. A tensor made by one of the other rebuild
/// functions torch's weights-only allow-list has (quantized, sparse, meta, subclass wrappers)
/// is one paramdex does not read ([`NotRead::Unsupported`]), listed with that problem.
fn tensor_args<'p>(p: &'p Pickle, v: &Value) -> Option<std::result::Result<&'p [Value], NotRead>> {
    let Object::Call { func, args, .. } = p.object(v)? else {
        return None;
    };
    match *func {
        // `_rebuild_tensor` (torch before 1.x) takes the first four arguments of `_v2`.
        ("torch._utils", "_rebuild_tensor" | "_rebuild_tensor_v2" | "_rebuild_tensor_v3") => {
            Some(Ok(args))
        }
        ("torch._utils", "_rebuild_parameter" | "_rebuild_parameter_with_state") => {
            match args.first().and_then(|a| tensor_args(p, a)) {
                Some(r) => Some(r),
                None => Some(Err(NotRead::Corrupt(
                    "a parameter whose data is not a tensor".into(),
                ))),
            }
        }
        // A tensor with Python attributes (or of a subclass): `_rebuild_from_type_v2(func,
        // type, args, state)`, `func(*args)` the tensor itself.
        ("torch._tensor", "_rebuild_from_type_v2") => {
            let inner = match (args.first().and_then(|f| p.object(f)), args.get(2)) {
                (Some(Object::Global(g)), Some(a)) => p
                    .object(a)
                    .and_then(|o| match o {
                        Object::Tuple(t) => Some(t.as_slice()),
                        _ => None,
                    })
                    .map(|t| (*g, t)),
                _ => None,
            };
            match inner {
                Some((
                    (
                        "torch._utils",
                        "_rebuild_tensor" | "_rebuild_tensor_v2" | "_rebuild_tensor_v3",
                    ),
                    t,
                )) => Some(Ok(t)),
                Some(((m, n), _)) => Some(Err(NotRead::Unsupported(format!(
                    "a tensor rebuilt by {m}.{n}, which paramdex does not read"
                )))),
                None => Some(Err(NotRead::Corrupt(
                    "_rebuild_from_type_v2 of something not a function and a tuple".into(),
                ))),
            }
        }
        ("torch._utils", f) if f.starts_with("_rebuild_") => Some(Err(NotRead::Unsupported(
            format!("a tensor rebuilt by torch._utils.{f}, which paramdex does not read"),
        ))),
        _ => None,
    }
}

fn ints(p: &Pickle, v: &Value, what: &str) -> std::result::Result<Vec<u64>, String> {
    let items = match p.object(v) {
        Some(Object::Tuple(i) | Object::List(i)) => i,
        _ => return Err(format!("its {what} is not a tuple")),
    };
    // Checked before anything is copied: a tensor's size may be shared by many leaves.
    if items.len() > MAX_RANK {
        return Err(format!(
            "its {what} has {} dimensions (at most {MAX_RANK})",
            items.len()
        ));
    }
    items
        .iter()
        .map(|x| match x {
            Value::Int(i) if *i >= 0 => Ok(*i as u64),
            _ => Err(format!("its {what} holds something not a non-negative int")),
        })
        .collect()
}

impl TorchStore {
    /// Maps and opens the `torch.save` file at `path`.
    ///
    /// Errors: [`Error::UnrecognizedFormat`] when it is not a zip holding a `data.pkl`;
    /// [`Error::Corrupt`] for a damaged zip directory; [`Error::Pickle`] for a pickle that is
    /// refused (a global outside [`TORCH_GLOBALS`], named) or damaged.
    pub fn open(path: impl AsRef<Path>) -> Result<TorchStore> {
        let path = path.as_ref();
        Self::from_source(Source::map(path)?, path.to_path_buf())?.ok_or_else(|| {
            Error::UnrecognizedFormat {
                path: path_str(path),
                detail: "not a torch.save file (a zip holding a data.pkl)".into(),
                looks_like: None,
            }
        })
    }

    /// Opens a `torch.save` file held in memory (`None`: not one).
    pub fn from_bytes(bytes: impl Into<std::sync::Arc<[u8]>>) -> Result<Option<TorchStore>> {
        Self::from_source(Source::Memory(bytes.into()), PathBuf::from("<memory>"))
    }

    fn from_source(source: Source, path: PathBuf) -> Result<Option<TorchStore>> {
        let shown = path_str(&path);
        let all = 0..source.len();
        Self::from_source_range(source, all, path, shown)
    }

    /// Opens the `torch.save` archive held in `range` of `source` (`None`: not one), as a
    /// torch DCP data file holds one per item; `shown` names it in messages. Every offset
    /// kept is one of `source`.
    pub(crate) fn from_source_range(
        source: Source,
        range: std::ops::Range<usize>,
        path: PathBuf,
        shown: String,
    ) -> Result<Option<TorchStore>> {
        let bytes = source.get(range.clone()).ok_or_else(|| {
            Error::corrupt(
                "torch archive",
                range.start as u64,
                format!("{shown}: bytes {range:?} lie outside the file"),
            )
        })?;
        let Some(mut entries) = zip::entries(bytes).map_err(|e| e.context(&shown))? else {
            return Ok(None);
        };
        for e in &mut entries {
            // Inside `range`, checked by zip::entries.
            e.data_offset += range.start as u64;
        }
        // `PREFIX/data.pkl` with a prefix of one directory (torch names it after the file).
        let Some(pkl) = entries.iter().position(|e| {
            e.name == b"data.pkl"
                || (e.name.ends_with(b"/data.pkl") && !e.name[..e.name.len() - 9].contains(&b'/'))
        }) else {
            return Ok(None);
        };
        let prefix = entries[pkl].name[..entries[pkl].name.len() - 8].to_vec();
        let entry_bytes = |e: &zip::Entry| -> Result<&[u8]> {
            if e.method != 0 {
                return Err(Error::Unsupported(format!(
                    "{shown}: zip entry {} is compressed (method {}); torch.save writes \
                     stored entries, which is what paramdex reads",
                    name::display(&e.name),
                    e.method
                )));
            }
            // zip::entries checked the range against the file.
            Ok(&source[e.data_offset as usize..(e.data_offset + e.len) as usize])
        };
        let find = |suffix: &[u8]| {
            let mut want = prefix.clone();
            want.extend_from_slice(suffix);
            entries.iter().find(|e| e.name == want)
        };
        if let Some(order) = find(b"byteorder") {
            let b = entry_bytes(order)?;
            if b != b"little" {
                return Err(Error::Unsupported(format!(
                    "{shown}: byteorder {:?}: only little-endian torch files are read",
                    String::from_utf8_lossy(&b[..b.len().min(16)])
                )));
            }
        }
        let pkl_name = format!("{shown}: {}", name::display(&entries[pkl].name));
        let data = entry_bytes(&entries[pkl])?;
        let p = pickle::parse(data, &pkl_name, TORCH_GLOBALS)?;
        let leaves = p.named_leaves(&pkl_name)?;
        // Storages are looked up by name once per tensor.
        let by_name: HashMap<&[u8], usize> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.as_slice(), i))
            .collect();
        let mut tensors = Vec::new();
        let mut metadata = Metadata::new();
        let mut root_scalar = None;
        let mut records = p.budget(RECORD_BYTES_PER_BYTE, MIN_RECORD_BYTES);
        let over = |records: &pickle::Budget| Error::Pickle {
            path: pkl_name.clone(),
            offset: p.end() as u64,
            problem: crate::error::PickleProblem::Limit,
            detail: format!(
                "its leaves make more than {} bytes of tensor and metadata records \
                 ({RECORD_BYTES_PER_BYTE} per byte of the {}-byte pickle): values shared many \
                 times over",
                records.limit(),
                p.end()
            ),
        };
        for (leaf_name, v) in leaves {
            if leaf_name.is_empty() {
                // Scalars only: a DCP item that is a bytes object stays a bytes item.
                root_scalar = pickle::metadata_value(&v);
            }
            let Some(args) = tensor_args(&p, &v) else {
                if metadata.len() < MAX_METADATA_ITEMS && !leaf_name.is_empty() {
                    if let Some(m) = leaf_metadata(&p, &v, data) {
                        if !records.spend((2 * leaf_name.len() + meta_size(&m)) as u64) {
                            return Err(over(&records));
                        }
                        // A key the metadata cannot hold (too long) is left out.
                        let _ = metadata.insert(leaf_name, m);
                    }
                }
                continue;
            };
            let t = match args {
                Ok(args) => Self::tensor(
                    &p,
                    &entries,
                    &by_name,
                    &prefix,
                    &shown,
                    leaf_name.as_bytes(),
                    args,
                ),
                Err(NotRead::Corrupt(detail)) => Err(Problem::Corrupt {
                    offset: 0,
                    detail: format!("{pkl_name}: {detail}"),
                }),
                Err(NotRead::Unsupported(detail)) => Err(Problem::Unsupported(format!(
                    "{pkl_name}: tensor {}: {detail}",
                    name::display(leaf_name.as_bytes())
                ))),
            };
            let t = t.unwrap_or_else(|problem| Tensor {
                name: leaf_name.into_bytes(),
                dtype: DType::UInt8,
                storage_at: 0,
                storage_len: 0,
                offset: 0,
                shape: Vec::new(),
                stride: Vec::new(),
                nbytes: 0,
                problem: Some(problem),
            });
            // Each record is bounded (a name of at most MAX_NAME_LEN, at most MAX_RANK
            // dimensions): counted once built, the budget is passed by at most one.
            if !records.spend(t.heap_size()) {
                return Err(over(&records));
            }
            tensors.push(t);
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = tensors.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::corrupt(
                "torch pickle",
                0,
                format!(
                    "{pkl_name}: two tensors are both named {}",
                    name::display(&w[0].name)
                ),
            ));
        }
        Ok(Some(TorchStore {
            path,
            shown,
            source,
            entries,
            tensors,
            metadata,
            root_scalar,
        }))
    }

    /// One tensor from its `_rebuild_tensor_v2` (or `_v3`) arguments, checked against its
    /// storage.
    #[allow(clippy::too_many_arguments)]
    fn tensor(
        p: &Pickle,
        entries: &[zip::Entry],
        by_name: &HashMap<&[u8], usize>,
        prefix: &[u8],
        shown: &str,
        tname: &[u8],
        args: &[Value],
    ) -> std::result::Result<Tensor, Problem> {
        let corrupt = |offset: u64, d: String| Problem::Corrupt {
            offset,
            detail: format!("{shown}: tensor {}: {d}", name::display(tname)),
        };
        let [storage, offset, size, stride, ..] = args else {
            return Err(corrupt(
                0,
                "_rebuild_tensor_v2 with fewer than 4 arguments".into(),
            ));
        };
        let pid = match p.object(storage) {
            Some(Object::PersistentId(pid)) => pid,
            _ => return Err(corrupt(0, "its storage is not a persistent id".into())),
        };
        let (stype, key, numel) = match p.object(pid) {
            Some(Object::Tuple(t)) => match t.as_slice() {
                [Value::Str(tag), st, Value::Str(key), _location, Value::Int(numel)]
                    if tag.as_ref() == "storage" && *numel >= 0 =>
                {
                    (st, key, *numel as u64)
                }
                _ => return Err(corrupt(
                    0,
                    "its storage's persistent id is not ('storage', type, key, location, numel)"
                        .into(),
                )),
            },
            _ => {
                return Err(corrupt(
                    0,
                    "its storage's persistent id is not a tuple".into(),
                ))
            }
        };
        let stype = match p.object(stype) {
            Some(Object::Global(g)) => *g,
            _ => return Err(corrupt(0, "its storage type is not a storage class".into())),
        };
        // `_rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, ...)`:
        // the dtype is the seventh argument (a `torch.<dtype>` global) and the storage is
        // untyped (its numel counts bytes). `_rebuild_tensor_v2`'s seventh, when present, is
        // its metadata dict.
        let v3_dtype = match args.get(6).and_then(|a| p.object(a)) {
            Some(Object::Global(("torch", d))) => Some(DType::from_name(d).ok_or_else(|| {
                Problem::Unsupported(format!(
                    "{shown}: tensor {} is torch.{d}, a dtype paramdex does not read",
                    name::display(tname)
                ))
            })?),
            _ => None,
        };
        let dtype = storage_dtype(stype).ok_or_else(|| {
            Problem::Unsupported(format!(
                "{shown}: tensor {} is stored as {}.{}, a dtype paramdex does not read",
                name::display(tname),
                stype.0,
                stype.1
            ))
        })?;
        let Value::Int(offset) = *offset else {
            return Err(corrupt(0, "its storage offset is not an int".into()));
        };
        let offset = u64::try_from(offset)
            .map_err(|_| corrupt(0, format!("a negative storage offset {offset}")))?;
        let shape = ints(p, size, "size").map_err(|d| corrupt(0, d))?;
        let stride = ints(p, stride, "stride").map_err(|d| corrupt(0, d))?;
        if shape.len() != stride.len() {
            return Err(corrupt(
                0,
                format!("size {shape:?} and stride {stride:?} differ in rank"),
            ));
        }
        let mut want = prefix.to_vec();
        want.extend_from_slice(b"data/");
        want.extend_from_slice(key.as_bytes());
        let entry = by_name
            .get(want.as_slice())
            .map(|&i| &entries[i])
            .ok_or_else(|| {
                corrupt(
                    0,
                    format!("its storage {} is not in the file", name::display(&want)),
                )
            })?;
        if entry.method != 0 {
            return Err(Problem::Unsupported(format!(
                "{shown}: tensor {}: its storage entry is compressed (method {})",
                name::display(tname),
                entry.method
            )));
        }
        let (dtype, storage_es) = match v3_dtype {
            Some(d) => (d, 1),
            None => (dtype, dtype.size() as u64),
        };
        let es = dtype.size() as u64;
        let at = entry.data_offset;
        let declared = numel.saturating_mul(storage_es);
        if declared > entry.len {
            return Err(corrupt(
                at,
                format!(
                    "its storage {key} is declared as {numel} elements ({declared} bytes) but \
                     holds {} bytes",
                    entry.len
                ),
            ));
        }
        let overflow = || corrupt(at, format!("size {shape:?} overflows"));
        let count = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(overflow)?;
        let nbytes = count.checked_mul(es).ok_or_else(overflow)?;
        let storage_elems = entry.len / es;
        let past = |last: u64| {
            corrupt(
                at,
                format!(
                    "storage offset {offset}, size {shape:?} and stride {stride:?} reach \
                     element {last}, past the {storage_elems} elements of storage {key}"
                ),
            )
        };
        if count == 0 {
            if offset > storage_elems {
                return Err(past(offset));
            }
        } else {
            let last = shape
                .iter()
                .zip(&stride)
                .try_fold(offset, |a, (&d, &s)| a.checked_add((d - 1).checked_mul(s)?))
                .ok_or_else(|| past(u64::MAX))?;
            if last >= storage_elems {
                return Err(past(last));
            }
        }
        if nbytes > entry.len && nbytes > MAX_EXPANDED_BYTES {
            return Err(Problem::Limit {
                value: nbytes,
                limit: MAX_EXPANDED_BYTES.max(entry.len),
            });
        }
        Ok(Tensor {
            name: tname.to_vec(),
            dtype,
            storage_at: at,
            storage_len: entry.len,
            offset,
            shape,
            stride,
            nbytes,
            problem: None,
        })
    }

    fn error(&self, t: &Tensor, problem: &Problem) -> Error {
        match problem {
            Problem::Corrupt { offset, detail } => {
                Error::corrupt("torch tensor", *offset, detail.clone())
            }
            Problem::Unsupported(d) => Error::Unsupported(d.clone()),
            Problem::Limit { value, limit } => {
                let _ = t;
                Error::limit(
                    "bytes of a torch view repeating elements of its storage",
                    *value,
                    *limit,
                    Some(t.storage_at),
                )
            }
        }
    }

    fn find(&self, name: &[u8]) -> Option<&Tensor> {
        self.tensors
            .binary_search_by(|t| t.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.tensors[i])
    }

    fn info_of(t: &Tensor) -> TensorInfo {
        TensorInfo {
            name: t.name.clone(),
            kind: Kind::Numeric(t.dtype),
            shape: t.shape.clone(),
            lod: Vec::new(),
            nbytes: t.nbytes,
        }
    }

    fn data(&self, t: &Tensor) -> Result<Cow<'_, [u8]>> {
        view_bytes(t, &self.source, &self.shown)
    }

    /// The tensors' names whose views are gathered (not one run of their storage).
    pub fn gathered(&self) -> Vec<Vec<u8>> {
        self.tensors
            .iter()
            .filter(|t| t.problem.is_none() && !t.contiguous())
            .map(|t| t.name.clone())
            .collect()
    }
}

/// The bytes of tensor `t` (row-major), whose storage lies in `source` (the file `shown`):
/// borrowed when its view is one run of its storage, gathered otherwise.
fn view_bytes<'a>(t: &Tensor, source: &'a [u8], shown: &str) -> Result<Cow<'a, [u8]>> {
    let es = t.dtype.size();
    let storage = source
        .get(t.storage_at as usize..(t.storage_at + t.storage_len) as usize)
        .ok_or_else(|| Error::corrupt("torch tensor", t.storage_at, "storage outside the file"))?;
    // The view was checked against the storage when the file was opened.
    let outside = || {
        Error::corrupt(
            "torch tensor",
            t.storage_at,
            format!(
                "{}: tensor {}: view outside its storage",
                shown,
                name::display(&t.name)
            ),
        )
    };
    if t.nbytes == 0 {
        return Ok(Cow::Borrowed(&[]));
    }
    if t.contiguous() {
        let start = (t.offset as usize).checked_mul(es).ok_or_else(outside)?;
        let end = start.checked_add(t.nbytes as usize).ok_or_else(outside)?;
        return storage
            .get(start..end)
            .map(Cow::Borrowed)
            .ok_or_else(outside);
    }
    // A view that is not one run: gathered, innermost dimension by innermost dimension.
    let mut out = Vec::with_capacity(t.nbytes as usize);
    let rank = t.shape.len();
    let (inner_len, inner_stride) = (t.shape[rank - 1] as usize, t.stride[rank - 1] as usize);
    let mut idx = vec![0u64; rank - 1];
    loop {
        let base = t.offset as usize
            + idx
                .iter()
                .zip(&t.stride)
                .map(|(&i, &s)| (i * s) as usize)
                .sum::<usize>();
        if inner_stride == 1 {
            out.extend_from_slice(
                storage
                    .get(base * es..(base + inner_len) * es)
                    .ok_or_else(outside)?,
            );
        } else {
            for k in 0..inner_len {
                let e = base + k * inner_stride;
                out.extend_from_slice(storage.get(e * es..(e + 1) * es).ok_or_else(outside)?);
            }
        }
        // Next index of the outer dimensions (odometer).
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return Ok(Cow::Owned(out));
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < t.shape[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

impl TensorStore for TorchStore {
    fn format(&self) -> Format {
        Format::Torch
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.metadata.clone())
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let from = self.tensors.partition_point(|t| t.name.as_slice() < start);
        Ok(Box::new(self.tensors[from..].iter().map(
            |t| match &t.problem {
                Some(p) => Err(self.error(t, p)),
                None => Ok(Self::info_of(t)),
            },
        )))
    }

    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.scan(b"")?.collect()
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        match self.find(name) {
            None => Ok(None),
            Some(t) => match &t.problem {
                Some(p) => Err(self.error(t, p)),
                None => Ok(Some(Self::info_of(t))),
            },
        }
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(t) = self.find(name) else {
            return Ok(None);
        };
        if let Some(p) = &t.problem {
            return Err(self.error(t, p));
        }
        Ok(Some(LoadedTensor {
            info: Self::info_of(t),
            data: TensorData::Bytes(self.data(t)?),
        }))
    }

    /// Checks the CRC-32 the zip directory records for every entry, then that every tensor
    /// can be read (its dtype known, its view inside its storage).
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        let mut s = VerifySummary::default();
        for e in &self.entries {
            if e.method != 0 {
                continue;
            }
            // Checked against the file by zip::entries.
            let data = &self.source[e.data_offset as usize..(e.data_offset + e.len) as usize];
            let computed = zip::crc32(data);
            if computed != e.crc32 {
                return Err(Error::ChecksumMismatch {
                    what: "zip entry (CRC-32)",
                    name: Some(name::display(&e.name)),
                    offset: e.data_offset,
                    len: e.len,
                    stored: e.crc32,
                    computed,
                    context: Some(self.shown.clone()),
                });
            }
            s.checksums += 1;
        }
        for t in &self.tensors {
            if let Some(p) = &t.problem {
                return Err(self.error(t, p));
            }
            s.tensors += 1;
            s.data_bytes += t.nbytes;
        }
        Ok(s)
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        let Some(t) = self.find(name) else {
            return Ok(None);
        };
        if t.problem.is_some() || !t.contiguous() {
            return Ok(None);
        }
        Ok(Some(DataLocation {
            path: self.path.clone(),
            offset: t.storage_at + t.offset * t.dtype.size() as u64,
            len: t.nbytes,
            crc32c: None,
        }))
    }
}

/// Opens `path` as a `torch.save` file, or `Ok(None)` if it is not one: it must be a file
/// starting with a zip local header whose central directory parses and holds a `data.pkl`
/// (one directory deep). A zip whose directory is damaged is not claimed (it cannot be told
/// from any other zip).
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let mut head = [0u8; 4];
    let ok = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok();
    if !ok || !zip::starts_like(&head) {
        return Ok(None);
    }
    open_source(Source::map(path)?, path.to_path_buf())
}

/// Opens the bytes of `source` as a `torch.save` file, or `Ok(None)` if they are not one, by
/// the same test as [`open_store`]: a local file mapped, or an object read whole at a URL
/// (`path` names it in messages).
pub(crate) fn open_source(source: Source, path: PathBuf) -> Result<Option<Box<dyn TensorStore>>> {
    if !zip::starts_like(source.get(..source.len().min(4)).unwrap_or_default()) {
        return Ok(None);
    }
    if !matches!(zip::entries(&source), Ok(Some(_))) {
        return Ok(None);
    }
    Ok(TorchStore::from_source(source, path)?.map(|s| Box::new(s) as Box<dyn TensorStore>))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(shape: &[u64], stride: &[u64]) -> Tensor {
        Tensor {
            name: b"t".to_vec(),
            dtype: DType::Float32,
            storage_at: 0,
            storage_len: 0,
            offset: 0,
            shape: shape.to_vec(),
            stride: stride.to_vec(),
            nbytes: 0,
            problem: None,
        }
    }

    #[test]
    fn contiguity() {
        assert!(t(&[2, 3], &[3, 1]).contiguous());
        assert!(!t(&[3, 2], &[1, 3]).contiguous());
        // Dimensions of 1 may have any stride.
        assert!(t(&[1, 3], &[99, 1]).contiguous());
        assert!(t(&[], &[]).contiguous());
        assert!(!t(&[4], &[2]).contiguous());
        assert!(!t(&[2, 2], &[0, 1]).contiguous());
    }
}
