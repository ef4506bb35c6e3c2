//! `paramdex._paramdex`: the Rust half of the `paramdex` Python package.
//!
//! Thin by design: it opens stores with [`paramdex::interop::open_any`], hands tensor bytes to
//! Python as [`Buffer`]s (a view of the file's mapping that keeps the store alive, or bytes it
//! owns), writes through [`paramdex::Writer`] and [`CheckpointManager`], and turns
//! [`paramdex::Error`] into the exception classes of `paramdex/errors.py` by variant. The Python
//! modules (`paramdex/__init__.py`, `numpy.py`, `torch.py`) build the safetensors-shaped API on
//! top. Every call that reads, writes or checks data releases the GIL (`Python::detach`).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, RwLock};

use paramdex::interop::{open_any, Kind, LoadedTensor, OwnedTensor, TensorData, TensorStore};
use paramdex::{DType, Error, MetaValue, Metadata, PickleProblem, Region, Tensor};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

mod arrays;
mod checkpoints;
mod shards;
mod slot;
mod write;

/// The exception class (in `paramdex.errors`) for a library error: chosen by variant, never by
/// the message, which is the library's.
fn class_of(e: &Error) -> &'static str {
    match e {
        Error::NotFound { .. } => "NotFoundError",
        Error::Corrupt { .. } | Error::ChecksumMismatch { .. } | Error::Compressed { .. } => {
            "CorruptError"
        }
        // A pickle asking for a global outside the allow-list is refused, not damaged.
        Error::Pickle {
            problem: PickleProblem::ForbiddenGlobal | PickleProblem::UnsupportedOpcode,
            ..
        } => "UnsupportedError",
        Error::Pickle { .. } => "CorruptError",
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            "NoSuchFileError"
        }
        Error::Io { .. } | Error::IsADirectory { .. } => "ParamdexIOError",
        Error::Remote { .. } => "RemoteError",
        Error::UnrecognizedFormat { .. } => "UnrecognizedFormatError",
        Error::UnsupportedVersion { .. } | Error::Unsupported(_) | Error::UnknownDType { .. } => {
            "UnsupportedError"
        }
        Error::InvalidArgument(_)
        | Error::InvalidTensor { .. }
        | Error::DuplicateName { .. }
        | Error::EmptyName
        | Error::DTypeMismatch { .. }
        | Error::Misaligned { .. }
        | Error::WriterUnusable { .. } => "InvalidArgumentError",
        Error::LimitExceeded { .. } => "LimitExceededError",
        Error::OutputExists { .. } => "OutputExistsError",
        Error::Shard { .. } => "ShardError",
        Error::Slices { .. } | Error::Sliced { .. } => "SliceError",
        Error::Checkpoint { .. } => "CheckpointError",
        Error::BackgroundSave { .. } => "BackgroundSaveError",
        _ => "ParamdexError",
    }
}

/// A library error as the Python exception of its variant, with the library's message.
fn py_err(e: Error) -> PyErr {
    exception(class_of(&e), e.to_string())
}

/// The exception `class` of `paramdex.errors` with the message `msg`.
fn exception(class: &str, msg: String) -> PyErr {
    Python::attach(|py| {
        let made = py
            .import("paramdex.errors")
            .and_then(|m| m.getattr(class))
            .and_then(|c| c.call1((msg.clone(),)));
        match made {
            Ok(exc) => PyErr::from_value(exc),
            // The extension used without its package: still an exception, with the message.
            Err(_) => PyRuntimeError::new_err(msg),
        }
    })
}

trait OrPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> OrPy<T> for paramdex::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(py_err)
    }
}

/// A name given as `str` (its UTF-8 bytes) or `bytes` (as is).
fn name_bytes(name: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = name.cast::<PyString>() {
        return Ok(s.to_cow()?.as_bytes().to_vec());
    }
    if let Ok(b) = name.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "a tensor name is a str or bytes, not {}",
        name.get_type().name()?
    )))
}

/// An open store, shared by the `Store` object and every buffer borrowed from it.
type Shared = Arc<dyn TensorStore>;

/// Memory a [`Buffer`] owns: a copy made where no view of a mapping was possible. Written to
/// only from Python (through numpy), never read through a Rust reference.
struct Owned {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the allocation is owned by this value alone and freed only in its `drop`; no Rust
// reference to it exists, so sending or sharing the pointer cannot create aliasing references.
unsafe impl Send for Owned {}
// SAFETY: as above; Python code that writes through numpy holds the GIL (numpy's own rules).
unsafe impl Sync for Owned {}

impl Owned {
    fn new(v: Vec<u8>) -> Owned {
        let b = v.into_boxed_slice();
        let len = b.len();
        let ptr = Box::into_raw(b) as *mut u8;
        Owned { ptr, len }
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` come from `Box::into_raw` of a boxed slice of `len` bytes in
        // `Owned::new`, and are freed only here, once.
        unsafe {
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(
                self.ptr, self.len,
            )))
        };
    }
}

/// What keeps a buffer's bytes alive.
enum Backing {
    /// Bytes inside the store (its memory map): kept alive by holding the store.
    Store(#[allow(dead_code)] Shared),
    /// Bytes the buffer owns (freed when it drops).
    Owned(#[allow(dead_code)] Owned),
}

/// One tensor's bytes, seen by numpy through `__array_interface__` (a one-dimensional `uint8`
/// array whose `base` is this object, so the bytes live as long as any array over them).
/// Read-only when it is a view of a file's mapping; writable when it is a copy it owns.
#[pyclass(frozen, module = "paramdex._paramdex")]
struct Buffer {
    addr: usize,
    len: usize,
    readonly: bool,
    _backing: Backing,
}

#[pymethods]
impl Buffer {
    /// numpy's array interface (version 3): the bytes as a one-dimensional `uint8` array.
    #[getter]
    fn __array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("version", 3)?;
        d.set_item("shape", (self.len,))?;
        d.set_item("typestr", "|u1")?;
        d.set_item("data", (self.addr, self.readonly))?;
        Ok(d)
    }

    /// Bytes.
    #[getter]
    fn nbytes(&self) -> usize {
        self.len
    }

    /// Whether the bytes are a view of the file's mapping (read-only) rather than a copy.
    #[getter]
    fn readonly(&self) -> bool {
        self.readonly
    }

    /// The address of the first byte (tests check that it lies inside the mapping).
    #[getter]
    fn address(&self) -> usize {
        self.addr
    }
}

fn buffer_of(store: &Shared, data: Cow<'_, [u8]>) -> Buffer {
    match data {
        Cow::Borrowed(b) => Buffer {
            addr: b.as_ptr() as usize,
            len: b.len(),
            readonly: true,
            _backing: Backing::Store(store.clone()),
        },
        Cow::Owned(v) => {
            let o = Owned::new(v);
            Buffer {
                addr: o.ptr as usize,
                len: o.len,
                readonly: false,
                _backing: Backing::Owned(o),
            }
        }
    }
}

/// (kind name, shape, data) of a loaded tensor: data is a [`Buffer`] for numeric and opaque
/// tensors, a list of `bytes` for strings.
fn loaded<'py>(
    py: Python<'py>,
    store: &Shared,
    t: LoadedTensor<'_>,
) -> PyResult<Bound<'py, PyTuple>> {
    let kind = t.info.kind.name().to_string();
    let shape = t.info.shape.clone();
    let data: Bound<'py, PyAny> = match t.data {
        // A bytes value (SPEC.md 6.1): Python `bytes`.
        TensorData::Bytes(b) if t.info.kind == Kind::Bytes => PyBytes::new(py, &b).into_any(),
        TensorData::Bytes(b) => Bound::new(py, buffer_of(store, b))?.into_any(),
        TensorData::Strings(s) => {
            let items: Vec<Bound<'py, PyBytes>> = s.iter().map(|e| PyBytes::new(py, e)).collect();
            PyList::new(py, items)?.into_any()
        }
    };
    PyTuple::new(
        py,
        [
            kind.into_pyobject(py)?.into_any(),
            shape.into_pyobject(py)?.into_any(),
            data,
        ],
    )
}

fn meta_to_py<'py>(py: Python<'py>, v: &MetaValue) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        MetaValue::String(s) => s.into_pyobject(py)?.into_any(),
        MetaValue::Int(i) => i.into_pyobject(py)?.into_any(),
        MetaValue::Float(f) => f.into_pyobject(py)?.into_any(),
        MetaValue::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        MetaValue::Bytes(b) => PyBytes::new(py, b).into_any(),
        MetaValue::List(l) => {
            let items = l
                .iter()
                .map(|x| meta_to_py(py, x))
                .collect::<PyResult<Vec<_>>>()?;
            PyList::new(py, items)?.into_any()
        }
    })
}

fn meta_from_py(v: &Bound<'_, PyAny>) -> PyResult<MetaValue> {
    // bool before int: Python's bool is an int.
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(MetaValue::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        return Ok(MetaValue::Int(v.extract()?));
    }
    if v.is_instance_of::<PyFloat>() {
        return Ok(MetaValue::Float(v.extract()?));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(MetaValue::String(s.to_cow()?.into_owned()));
    }
    if let Ok(b) = v.cast::<PyBytes>() {
        return Ok(MetaValue::Bytes(b.as_bytes().to_vec()));
    }
    if v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>() {
        let mut out = Vec::new();
        for x in v.try_iter()? {
            out.push(meta_from_py(&x?)?);
        }
        return Ok(MetaValue::List(out));
    }
    Err(PyTypeError::new_err(format!(
        "metadata values are str, int, float, bool, bytes or lists of them, not {}",
        v.get_type().name()?
    )))
}

fn metadata_from_py(d: Option<&Bound<'_, PyDict>>) -> PyResult<Metadata> {
    let mut m = Metadata::new();
    if let Some(d) = d {
        for (k, v) in d.iter() {
            let key: String = k
                .extract()
                .map_err(|_| PyTypeError::new_err("metadata keys are str"))?;
            m.insert(key, meta_from_py(&v)?).py()?;
        }
    }
    Ok(m)
}

fn dtype_of(name: &str) -> PyResult<DType> {
    DType::from_name(name)
        .ok_or_else(|| PyValueError::new_err(format!("paramdex has no dtype named {name}")))
}

/// The bytes of a C-contiguous numpy array (the Python side makes it so), read (or, when it is
/// writable, written) in place through its `__array_interface__`.
struct ArrayBytes {
    addr: usize,
    len: usize,
    readonly: bool,
}

impl ArrayBytes {
    fn of(array: &Bound<'_, PyAny>) -> PyResult<ArrayBytes> {
        let ai = array.getattr("__array_interface__")?;
        let strides = ai.get_item("strides")?;
        if !strides.is_none() {
            return Err(PyValueError::new_err(
                "the array must be C-contiguous (numpy.ascontiguousarray)",
            ));
        }
        let (addr, readonly): (usize, bool) = ai.get_item("data")?.extract()?;
        let len: usize = array.getattr("nbytes")?.extract()?;
        Ok(ArrayBytes {
            addr,
            len,
            readonly,
        })
    }

    /// The bytes of `arrays`, to be written: refused unless every array is writable and no two
    /// share a byte (so the mutable slices [`ArrayBytes::slice_mut`] makes never alias).
    fn writable(arrays: &[Bound<'_, PyAny>]) -> PyResult<Vec<ArrayBytes>> {
        let out = arrays
            .iter()
            .map(ArrayBytes::of)
            .collect::<PyResult<Vec<_>>>()?;
        if out.iter().any(|a| a.readonly) {
            return Err(PyValueError::new_err(
                "the arrays to load into must be writable",
            ));
        }
        let mut spans: Vec<(usize, usize)> = out
            .iter()
            .filter(|a| a.len > 0)
            .map(|a| (a.addr, a.addr.saturating_add(a.len)))
            .collect();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err(PyValueError::new_err(
                "the arrays to load into must not overlap",
            ));
        }
        Ok(out)
    }

    /// The bytes, to be written. The caller holds a reference to the array object for as long
    /// as it uses them, made them with [`ArrayBytes::writable`] (writable, no two overlapping),
    /// and takes each one's slice once.
    #[allow(clippy::mut_from_ref)]
    fn slice_mut(&self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `addr`/`len` are the data pointer and byte length numpy reports for a
        // writable C-contiguous array that the caller keeps alive (and so unresized) while the
        // slice is used; `ArrayBytes::writable` refused overlapping arrays and each slice is
        // taken once, so no other reference to these bytes exists on the Rust side.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }

    /// The bytes. The caller holds a reference to the array object for as long as it uses
    /// them (the array cannot be freed or resized meanwhile).
    fn slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `addr`/`len` are the data pointer and byte length numpy reports for a
        // C-contiguous array; the caller keeps the array alive while the slice is used, and a
        // numpy array with outstanding references cannot be resized.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }
}

/// One tensor to write: (name, dtype name, shape, C-contiguous array).
type PyTensorArgs<'py> = (Bound<'py, PyAny>, String, Vec<u64>, Bound<'py, PyAny>);

struct Prepared {
    name: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
    bytes: ArrayBytes,
}

/// A value a checkpoint manager saves: an array (read in place), or a bytes value (encoded).
enum Value {
    Array(Prepared),
    Bytes(OwnedTensor),
}

impl Value {
    fn tensor(&self) -> (&[u8], Tensor<'_>) {
        match self {
            Value::Array(p) => (&p.name, Tensor::new(p.dtype, &p.shape, p.bytes.slice())),
            Value::Bytes(t) => (&t.name, Tensor::new(t.dtype, &t.shape, &t.data)),
        }
    }
}

/// The values of (name, dtype, shape, array) tuples; a dtype `bytes` names a bytes value (the
/// array is bytes-like).
fn prepare_values(items: Vec<PyTensorArgs<'_>>) -> PyResult<Vec<Value>> {
    items
        .into_iter()
        .map(|(n, d, s, a)| {
            if d == "bytes" {
                let v: Vec<u8> = match a.cast::<PyBytes>() {
                    Ok(b) => b.as_bytes().to_vec(),
                    Err(_) => a.extract::<Vec<u8>>()?,
                };
                return Ok(Value::Bytes(OwnedTensor::bytes_value(name_bytes(&n)?, &v)));
            }
            Ok(Value::Array(Prepared {
                name: name_bytes(&n)?,
                dtype: dtype_of(&d)?,
                shape: s,
                bytes: ArrayBytes::of(&a)?,
            }))
        })
        .collect()
}

fn prepare(items: Vec<PyTensorArgs<'_>>) -> PyResult<Vec<Prepared>> {
    items
        .iter()
        .map(|(n, d, s, a)| {
            Ok(Prepared {
                name: name_bytes(n)?,
                dtype: dtype_of(d)?,
                shape: s.clone(),
                bytes: ArrayBytes::of(a)?,
            })
        })
        .collect()
}

/// An open store of any format ([`open_any`]). Shareable between threads: every method takes
/// `&self`, and the store is `Send + Sync`.
#[pyclass(frozen, module = "paramdex._paramdex")]
struct Store {
    inner: RwLock<Option<Shared>>,
    /// The `base` of the numpy arrays viewing the store's memory (`load_array`), made on
    /// first use; `close` lets go of it with the store.
    keep: Mutex<Option<Py<arrays::Keep>>>,
    path: String,
}

/// Where a tensor's bytes lie: one run of `path` from `offset`.
struct Run<'a> {
    path: &'a str,
    offset: u64,
}

/// A whole numeric tensor of a native file, as `Reader::get` found it.
struct Whole<'a> {
    dtype: DType,
    shape: Vec<u64>,
    data: Cow<'a, [u8]>,
    run: Run<'a>,
}

impl Store {
    fn new(store: Shared, path: String) -> Store {
        Store {
            inner: RwLock::new(Some(store)),
            keep: Mutex::new(None),
            path,
        }
    }

    /// The [`arrays::Keep`] of `store` (this object's open store).
    fn keep<'py>(&self, py: Python<'py>, store: &Shared) -> PyResult<Bound<'py, arrays::Keep>> {
        let lock = || {
            self.keep
                .lock()
                .map_err(|_| PyRuntimeError::new_err("store lock poisoned"))
        };
        if let Some(k) = lock()?.as_ref() {
            return Ok(k.bind(py).clone());
        }
        // Made outside the lock: allocating a Python object may run the garbage collector,
        // whose finalizers may close this store (which takes the lock).
        let k = Bound::new(py, arrays::Keep::new(store.clone()))?;
        let mut g = lock()?;
        if self.closed()? {
            // Closed while the tensor was read: the arrays keep the store, this object not.
            return Ok(k);
        }
        Ok(g.get_or_insert_with(|| k.unbind()).bind(py).clone())
    }

    /// Loads tensor `name` (as [`Store::load`] describes, `verify` included) and hands it to
    /// `then` with the store and, when the lookup told it, where its bytes lie in which file;
    /// NotFoundError when absent. A whole numeric tensor of a native file is read straight
    /// from `Reader::get` (its CRC32C checked unless `verify` is false, as `load` checks it),
    /// which also gives its file and offset without a second lookup.
    fn with_loaded<'py, R>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        verify: bool,
        then: impl FnOnce(&Shared, LoadedTensor<'_>, Option<Run<'_>>) -> PyResult<R>,
    ) -> PyResult<R> {
        let n = name_bytes(name)?;
        let s = self.get()?;
        if let Some(r) = s.as_native() {
            // Some(None): absent; None: `load` below reads it.
            let got = py.detach(|| -> paramdex::Result<Option<Option<Whole<'_>>>> {
                match r.get(&n) {
                    // A bytes value's encoding is always checked, and with checksums on a LoD
                    // is read as `load` reads it: both by `load` below.
                    Ok(Some(v)) if v.dtype() == DType::Bytes || (verify && v.lod_levels() > 0) => {
                        Ok(None)
                    }
                    Ok(Some(v)) => {
                        if verify {
                            v.verify_crc()?;
                        }
                        let run = Run {
                            path: v.path(),
                            offset: v.data_offset(),
                        };
                        Ok(Some(Some(Whole {
                            dtype: v.dtype(),
                            shape: v.shape().to_vec(),
                            data: v.into_data(),
                            run,
                        })))
                    }
                    Ok(None) => Ok(Some(None)),
                    // Stored in slices: assembled by `load` below.
                    Err(Error::Sliced { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            });
            match got.py()? {
                Some(Some(w)) => {
                    let t = LoadedTensor {
                        info: paramdex::interop::TensorInfo {
                            name: n.clone(),
                            kind: Kind::Numeric(w.dtype),
                            shape: w.shape,
                            lod: Vec::new(),
                            nbytes: w.data.len() as u64,
                        },
                        data: TensorData::Bytes(w.data),
                    };
                    return then(&s, t, Some(w.run));
                }
                Some(None) => return Err(self.not_found(&n)),
                None => {}
            }
        }
        let t = py.detach(|| s.load(&n)).py()?;
        match t {
            Some(t) => then(&s, t, None),
            None => Err(self.not_found(&n)),
        }
    }

    fn get(&self) -> PyResult<Shared> {
        self.inner
            .read()
            .map_err(|_| PyRuntimeError::new_err("store lock poisoned"))?
            .clone()
            .ok_or_else(|| exception("ClosedError", format!("{} is closed", self.path)))
    }

    /// Loads the region at `start` of lengths `lens` of numeric tensor `name` and hands it to
    /// `then` with the store; NotFoundError when absent.
    fn with_region<'py, R>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        start: Vec<u64>,
        lens: Vec<u64>,
        then: impl FnOnce(&Shared, LoadedTensor<'_>) -> PyResult<R>,
    ) -> PyResult<R> {
        let n = name_bytes(name)?;
        let region = Region::new(start, lens).ok_or_else(|| {
            PyValueError::new_err("a region's start and lengths must have the same rank")
        })?;
        let s = self.get()?;
        let t = py.detach(|| s.load_slice(&n, &region)).py()?;
        match t {
            Some(t) => then(&s, t),
            None => Err(self.not_found(&n)),
        }
    }

    /// [`Store::load_array`]'s array (or tuple) of loaded tensor `t` of store `s`, whose bytes
    /// lie at `run` when the lookup said so (else `data_location` tells, where needed).
    fn array_of<'py>(
        &self,
        py: Python<'py>,
        s: &Shared,
        t: LoadedTensor<'_>,
        run: Option<Run<'_>>,
        private: bool,
        cow: Option<&(String, Bound<'py, numpy::PyArray1<u8>>)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let LoadedTensor { info, data } = t;
        let (layout, bytes) = match (&info.kind, data) {
            (Kind::Numeric(d), TensorData::Bytes(b)) if *d != DType::Bytes => {
                match arrays::layout(*d, &info.shape, b.len()) {
                    Some(l) => (l, b),
                    None => {
                        let t = LoadedTensor {
                            info,
                            data: TensorData::Bytes(b),
                        };
                        return Ok(loaded(py, s, t)?.into_any());
                    }
                }
            }
            (_, data) => return Ok(loaded(py, s, LoadedTensor { info, data })?.into_any()),
        };
        let mem = match bytes {
            Cow::Borrowed(b) if private => {
                let Some((path, arr)) = cow else {
                    let t = LoadedTensor {
                        info,
                        data: TensorData::Bytes(Cow::Borrowed(b)),
                    };
                    return Ok(loaded(py, s, t)?.into_any());
                };
                let offset = match run {
                    Some(r) => (r.path == path.as_str()).then_some(r.offset),
                    None => py
                        .detach(|| s.data_location(&info.name))
                        .py()?
                        .filter(|l| {
                            l.len == b.len() as u64 && l.path.to_string_lossy() == path.as_str()
                        })
                        .map(|l| l.offset),
                };
                match offset.and_then(|off| arrays::Memory::within(arr, off, b.len())) {
                    Some(m) => m,
                    None => arrays::Memory::Store(b, self.keep(py, s)?),
                }
            }
            Cow::Borrowed(b) => arrays::Memory::Store(b, self.keep(py, s)?),
            Cow::Owned(v) => arrays::Memory::Owned(v),
        };
        arrays::new_array(py, layout, mem)
    }

    /// `NotFoundError` (a `KeyError`) for `name`, with the near names the store holds, as the
    /// CLI's `get` gives them (`paramdex::name::near`): "did you mean ...?", and the
    /// `bytes.fromhex(...)` of a near name that cannot be typed as shown (escapes, or the name
    /// asked for in another Unicode normalisation form).
    fn not_found(&self, name: &[u8]) -> PyErr {
        let e = Error::NotFound {
            name: paramdex::name::display(name),
            path: self.path.clone(),
        };
        // Suggestions are a courtesy: a store that cannot list its names leaves the plain error.
        let near = self
            .get()
            .ok()
            .and_then(|s| {
                let names = s.scan(b"").ok()?;
                paramdex::name::near(name, names.map(|t| t.map(|t| t.name))).ok()
            })
            .unwrap_or_default();
        let hex = |n: &[u8]| format!("bytes.fromhex('{}')", paramdex::name::to_hex(n));
        let hint = paramdex::name::did_you_mean(name, &near, &hex);
        let msg = if hint.is_empty() {
            e.to_string()
        } else {
            format!("{e}; {hint}")
        };
        exception(class_of(&e), msg)
    }
}

#[pymethods]
impl Store {
    /// Opens any input `open_any` opens: a file, a directory, a checkpoint prefix, `DIR@STEP`,
    /// an `s3://` URL.
    #[new]
    fn py_new(py: Python<'_>, path: String) -> PyResult<Store> {
        let p = path.clone();
        let s = py.detach(move || open_any(&p)).py()?;
        Ok(Store::new(Arc::from(s), path))
    }

    /// Opens a file held in memory (what `safetensors.deserialize` takes): a safetensors file
    /// or a paramdex file, told apart by their first bytes.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<Store> {
        let bytes: Arc<[u8]> = Arc::from(data.extract::<Cow<'_, [u8]>>()?.as_ref());
        let s: Shared = py
            .detach(move || -> paramdex::Result<Shared> {
                let len = bytes.len() as u64;
                if bytes.len() >= 9 && paramdex::interop::safetensors::looks_like(&bytes, len) {
                    Ok(Arc::new(
                        paramdex::interop::safetensors::SafetensorsStore::from_bytes(bytes)?,
                    ))
                } else {
                    // The native reader says what else it is, if it is not a paramdex file.
                    Ok(Arc::new(paramdex::Reader::from_bytes(bytes)?))
                }
            })
            .py()?;
        Ok(Store::new(s, "<memory>".into()))
    }

    /// Another handle on the same open store, which `close` of this one does not close (a
    /// `get_slice` object keeps reading after its `safe_open` is closed, as in safetensors).
    fn share(&self) -> PyResult<Store> {
        Ok(Store::new(self.get()?, self.path.clone()))
    }

    /// The path or URL it was opened with.
    #[getter]
    fn path(&self) -> String {
        self.path.clone()
    }

    /// The format's short name (`paramdex`, `safetensors`, `tensorflow checkpoint`, ...).
    fn format(&self) -> PyResult<&'static str> {
        Ok(self.get()?.format().name())
    }

    /// Drops this object's hold on the store; buffers still hold it until they go.
    fn close(&self) -> PyResult<()> {
        *self
            .inner
            .write()
            .map_err(|_| PyRuntimeError::new_err("store lock poisoned"))? = None;
        *self
            .keep
            .lock()
            .map_err(|_| PyRuntimeError::new_err("store lock poisoned"))? = None;
        Ok(())
    }

    /// Whether `close` has been called.
    #[getter]
    fn closed(&self) -> PyResult<bool> {
        Ok(self
            .inner
            .read()
            .map_err(|_| PyRuntimeError::new_err("store lock poisoned"))?
            .is_none())
    }

    /// Every name, in bytewise order, as bytes.
    fn names<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyBytes>>> {
        let s = self.get()?;
        let names: Vec<Vec<u8>> = py
            .detach(|| -> paramdex::Result<Vec<Vec<u8>>> {
                s.scan(b"")?.map(|t| t.map(|t| t.name)).collect()
            })
            .py()?;
        Ok(names.iter().map(|n| PyBytes::new(py, n)).collect())
    }

    /// The number of tensors (a native file's header count; others count their listing).
    fn count(&self, py: Python<'_>) -> PyResult<u64> {
        let s = self.get()?;
        if let Some(r) = s.as_native() {
            // A paramdex file's header counts its tensors (each partitioned one once).
            if r.header().num_shards <= 1 && r.header().format_version >= 1 {
                return Ok(r.header().tensor_count);
            }
        }
        py.detach(|| -> paramdex::Result<u64> {
            let mut n = 0u64;
            for t in s.scan(b"")? {
                t?;
                n += 1;
            }
            Ok(n)
        })
        .py()
    }

    /// (kind, shape, nbytes, lod) of tensor `name`, or None when absent.
    #[allow(clippy::type_complexity)]
    fn info(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(String, Vec<u64>, u64, Vec<Vec<u64>>)>> {
        let n = name_bytes(name)?;
        let s = self.get()?;
        let info = py.detach(|| s.info(&n)).py()?;
        Ok(info.map(|t| (t.kind.name().to_string(), t.shape, t.nbytes, t.lod)))
    }

    /// (kind, shape, data) of tensor `name` (checksums checked where the format has them);
    /// raises NotFoundError when absent. `verify=False` skips the data checksum of a tensor
    /// stored whole in a native file (a view straight from `Reader::get`), for callers that
    /// checked the file with `verify` already.
    #[pyo3(signature = (name, verify = true))]
    fn load<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        verify: bool,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.with_loaded(py, name, verify, |s, t, _| loaded(py, s, t))
    }

    /// Tensor `name` as a numpy array made here (numpy's C API), as `load` reads it (`verify`
    /// alike), for a numeric tensor whose dtype has a numpy dtype (`set_numpy_dtypes`): a
    /// read-only view of the store's memory, or a writable array over the bytes the library
    /// copied. Any other tensor (strings, bytes values, opaque TensorFlow types, dtypes without
    /// a numpy dtype) gives the `(kind, shape, data)` tuple of `load`.
    ///
    /// `private` asks for a writable view of a private (copy-on-write) mapping of the file
    /// instead of the read-only view: with `cow` (the mapped file's path and a `uint8` array
    /// over the whole mapping) the array views `cow` where the tensor is one run of that
    /// file (`data_location`), else the store's memory, read-only; without `cow`, a tensor
    /// in the store's memory gives the tuple (the caller maps the file).
    #[pyo3(signature = (name, verify = true, private = false, cow = None))]
    fn load_array<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        verify: bool,
        private: bool,
        cow: Option<(String, Bound<'py, numpy::PyArray1<u8>>)>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.with_loaded(py, name, verify, |s, t, run| {
            self.array_of(py, s, t, run, private, cow.as_ref())
        })
    }

    /// (kind, shape, data) of the region at `start` of lengths `lens` of numeric tensor `name`.
    fn load_region<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        start: Vec<u64>,
        lens: Vec<u64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.with_region(py, name, start, lens, |s, t| loaded(py, s, t))
    }

    /// The region of `load_region` as a numpy array made here, as `load_array` makes them
    /// (its tuple for a tensor that cannot be one).
    fn load_region_array<'py>(
        &self,
        py: Python<'py>,
        name: &Bound<'py, PyAny>,
        start: Vec<u64>,
        lens: Vec<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.with_region(py, name, start, lens, |s, t| {
            self.array_of(py, s, t, None, false, None)
        })
    }

    /// The store's metadata as a dict.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.get()?;
        let m = py.detach(|| s.metadata()).py()?;
        let d = PyDict::new(py);
        for (k, v) in m.iter() {
            d.set_item(k, meta_to_py(py, v)?)?;
        }
        Ok(d)
    }

    /// Reads and checks everything; (tensors, data bytes, checksums compared).
    #[pyo3(signature = (threads = 0))]
    fn verify(&self, py: Python<'_>, threads: usize) -> PyResult<(u64, u64, u64)> {
        let s = self.get()?;
        let v = py.detach(|| s.verify(threads)).py()?;
        Ok((v.tensors, v.data_bytes, v.checksums))
    }

    /// (path, offset, length) of tensor `name`'s bytes when they are one run in one local file.
    fn data_location(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(String, u64, u64)>> {
        let n = name_bytes(name)?;
        let s = self.get()?;
        let loc = py.detach(|| s.data_location(&n)).py()?;
        Ok(loc.map(|l| (l.path.to_string_lossy().into_owned(), l.offset, l.len)))
    }

    /// For a paramdex file or sharded checkpoint: (name, kind, shape, nbytes, whole) of every
    /// tensor in bytewise name order, `whole` False for a tensor stored in slices and for a bytes
    /// value (its shape then `[]` and its nbytes 0: `load` gives it); None for other stores.
    #[allow(clippy::type_complexity)]
    fn native_tensors<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<Option<Vec<(Bound<'py, PyBytes>, &'static str, Vec<u64>, u64, bool)>>> {
        let s = self.get()?;
        let Some(r) = s.as_native() else {
            return Ok(None);
        };
        let listed = py
            .detach(
                || -> paramdex::Result<Vec<(Vec<u8>, DType, Vec<u64>, u64, bool)>> {
                    // From the index alone (no record is read, by ranges neither).
                    let out = r
                        .list_from(b"")?
                        .into_iter()
                        .map(|e| {
                            if e.dtype == DType::Bytes || e.slices != 0 {
                                // A bytes value, or a tensor stored in slices (once, however
                                // many slices hold it): `load` gives it.
                                (e.name, e.dtype, Vec::new(), 0, false)
                            } else {
                                (e.name, e.dtype, e.shape, e.size, true)
                            }
                        })
                        .collect();
                    Ok(out)
                },
            )
            .py()?;
        Ok(Some(
            listed
                .into_iter()
                .map(|(n, d, shape, nbytes, whole)| {
                    (PyBytes::new(py, &n), d.name(), shape, nbytes, whole)
                })
                .collect(),
        ))
    }

    /// Copies the tensors `names` (stored whole in a paramdex file or sharded checkpoint) into
    /// `arrays` (writable C-contiguous numpy arrays, `arrays[i]` exactly as long in bytes as
    /// tensor `names[i]`, none overlapping), on `threads` threads (0: one per core), checking
    /// every tensor's CRC32C as it is copied (`Reader::load_into`), without the GIL. The
    /// arrays must not be resized or freed by another thread meanwhile (the caller made them).
    #[pyo3(signature = (names, arrays, threads = 0))]
    fn load_into(
        &self,
        py: Python<'_>,
        names: Vec<Bound<'_, PyAny>>,
        arrays: Vec<Bound<'_, PyAny>>,
        threads: usize,
    ) -> PyResult<()> {
        let s = self.get()?;
        let Some(r) = s.as_native() else {
            return Err(PyValueError::new_err(format!(
                "{} is not a paramdex file or sharded checkpoint",
                self.path
            )));
        };
        let names = names.iter().map(name_bytes).collect::<PyResult<Vec<_>>>()?;
        let bytes = ArrayBytes::writable(&arrays)?;
        let opts = paramdex::LoadOptions {
            threads,
            ..paramdex::LoadOptions::default()
        };
        // `arrays` is held (borrowed from the caller) for the whole call.
        py.detach(|| {
            let mut dst: Vec<&mut [u8]> = bytes.iter().map(ArrayBytes::slice_mut).collect();
            r.load_into(&names, &mut dst, &opts)
        })
        .py()
    }

    /// (address, length) of the native file's memory map, or None for other stores.
    fn mapping_range(&self) -> PyResult<Option<(usize, usize)>> {
        let s = self.get()?;
        Ok(s.as_native()
            .and_then(paramdex::Reader::as_bytes)
            .map(|b| (b.as_ptr() as usize, b.len())))
    }
}

/// The safetensors dtype string (`"F32"`, `"BF16"`, `"F8_E4M3"`...) of a paramdex dtype, or
/// None when safetensors has none.
#[pyfunction]
fn safetensors_dtype(kind: &str) -> Option<String> {
    DType::from_name(kind)
        .and_then(paramdex::interop::safetensors::to_safetensors_dtype)
        .map(|d| format!("{d:?}"))
}

/// Every dtype name paramdex knows, with its element size in bytes.
#[pyfunction]
fn dtypes() -> Vec<(&'static str, usize)> {
    DType::ALL.iter().map(|d| (d.name(), d.size())).collect()
}

/// The kind names that are not numeric dtypes (`string`, opaque TensorFlow types) give
/// `Kind::numeric() == None`; this tells Python whether a kind name is numeric.
#[pyfunction]
fn is_numeric(kind: &str) -> bool {
    DType::from_name(kind)
        .filter(|d| *d != DType::Bytes)
        .map(Kind::Numeric)
        .is_some()
}

/// Aborts every multipart upload of this process in flight (outputs being written to `s3://`),
/// waiting at most `timeout` seconds for the stores: for a program's own SIGTERM handler or
/// shutdown hook (`paramdex::remote::abort_uploads_in_flight`). Returns `(url, outcome)` per
/// upload, the outcome `"aborted"`, `"finished"` (it ended first), `"timed out"` or
/// `"failed: ..."`; the writers of aborted uploads raise `RemoteError` and never commit.
#[pyfunction]
#[pyo3(signature = (timeout = 10.0))]
fn abort_uploads_in_flight(py: Python<'_>, timeout: f64) -> PyResult<Vec<(String, String)>> {
    use paramdex::remote::AbortOutcome;
    let timeout = std::time::Duration::try_from_secs_f64(timeout).map_err(|_| {
        PyValueError::new_err(format!(
            "timeout must be a number of seconds, at least 0 (got {timeout})"
        ))
    })?;
    let report = py.detach(|| paramdex::remote::abort_uploads_in_flight(timeout));
    Ok(report
        .into_iter()
        .map(|u| {
            let outcome = match u.outcome {
                AbortOutcome::Aborted => "aborted".to_string(),
                AbortOutcome::Finished => "finished".to_string(),
                AbortOutcome::TimedOut => "timed out".to_string(),
                AbortOutcome::Failed(e) => format!("failed: {e}"),
                other => format!("{other:?}"),
            };
            (u.url, outcome)
        })
        .collect())
}

#[pymodule]
fn _paramdex(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Store>()?;
    m.add_class::<Buffer>()?;
    m.add_class::<write::NativeWriter>()?;
    m.add_class::<checkpoints::PyCheckpointManager>()?;
    m.add_function(wrap_pyfunction!(dtypes, m)?)?;
    m.add_function(wrap_pyfunction!(arrays::set_numpy_dtypes, m)?)?;
    m.add_class::<arrays::Keep>()?;
    m.add_function(wrap_pyfunction!(is_numeric, m)?)?;
    m.add_function(wrap_pyfunction!(abort_uploads_in_flight, m)?)?;
    m.add_function(wrap_pyfunction!(write::write_safetensors, m)?)?;
    m.add_function(wrap_pyfunction!(safetensors_dtype, m)?)?;
    m.add_class::<shards::PyShardWriter>()?;
    m.add_class::<shards::RegionReader>()?;
    m.add_function(wrap_pyfunction!(shards::new_save_id, m)?)?;
    m.add_function(wrap_pyfunction!(shards::merge_shards_py, m)?)?;
    m.add_function(wrap_pyfunction!(shards::list_run, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
