//! numpy arrays made in Rust, through numpy's C API (`PyArray_NewFromDescr`), for `get_tensor`
//! with `framework="np"`: one call from Python hands back the finished array, without the
//! `__array_interface__` dict, `np.asarray`, `view` and `reshape` steps of `_convert.to_numpy`
//! (about 2 µs of Python-level work a tensor, most of a small tensor's `get_tensor`).
//!
//! The dtype of each paramdex dtype is the `numpy.dtype` the Python side chose for it
//! (`_convert._NUMPY`: ml_dtypes' types where installed, raw bits otherwise), registered once
//! with [`set_numpy_dtypes`], so both paths give the same arrays. An array's `base` keeps its
//! bytes alive: a [`Keep`] (one per open store) for a view of the store's memory, a [`Buffer`]
//! for bytes the library copied, the caller's array for a view of a private mapping.

use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::OnceLock;

use numpy::npyffi::{
    self, npy_intp, NpyTypes, NPY_ARRAY_C_CONTIGUOUS, NPY_ARRAY_WRITEABLE, PY_ARRAY_API,
};
use numpy::{PyArray1, PyArrayDescr, PyArrayDescrMethods, PyUntypedArrayMethods};
use paramdex::DType;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::{Backing, Buffer, Owned, Shared};

/// The numpy dtype (and its item size) of each paramdex dtype that has one, as registered.
static DTYPES: OnceLock<Vec<(DType, Py<PyArrayDescr>, usize)>> = OnceLock::new();

/// Registers the numpy dtype of each paramdex dtype name (`(name, numpy.dtype)` pairs), which
/// [`new_array`] then uses. Called once, by the package at import; a later call keeps the first
/// table (the package computes the same one). A dtype left out is handed to Python as a
/// `Buffer` (`Store.load_array` returns the `(kind, shape, data)` tuple of `Store.load`).
#[pyfunction]
pub fn set_numpy_dtypes(pairs: Vec<(String, Bound<'_, PyArrayDescr>)>) -> PyResult<()> {
    let mut table = Vec::with_capacity(pairs.len());
    for (name, descr) in pairs {
        let d = DType::from_name(&name)
            .filter(|d| *d != DType::Bytes)
            .ok_or_else(|| PyValueError::new_err(format!("paramdex has no dtype named {name}")))?;
        let size = descr.itemsize();
        table.push((d, descr.unbind(), size));
    }
    let _ = DTYPES.set(table);
    Ok(())
}

/// The registered numpy dtype of `d` and its item size.
fn descr_of(d: DType) -> Option<(&'static Py<PyArrayDescr>, usize)> {
    DTYPES
        .get()?
        .iter()
        .find(|(x, _, _)| *x == d)
        .map(|(_, descr, size)| (descr, *size))
}

/// What keeps a store's memory alive for the arrays viewing it: one per open `Store`, the
/// `base` of each of those arrays (so an array outlives the `Store` object and its `close`).
#[pyclass(frozen, module = "paramdex._paramdex")]
pub struct Keep {
    _store: Shared,
}

impl Keep {
    pub fn new(store: Shared) -> Keep {
        Keep { _store: store }
    }
}

/// The memory a new array views and what keeps it alive.
pub enum Memory<'a, 'py> {
    /// Bytes inside a store: `Keep` of that store (read-only).
    Store(&'a [u8], Bound<'py, Keep>),
    /// Bytes the library copied out (writable; freed with the array).
    Owned(Vec<u8>),
    /// Writable bytes inside a numpy array (a private mapping), which keeps them alive: the
    /// address made by [`Memory::within`].
    Within(*mut u8, Bound<'py, PyArray1<u8>>),
}

impl<'py> Memory<'_, 'py> {
    /// The `len` bytes at `offset` of `arr`, when `arr` is a writable C-contiguous array that
    /// holds them.
    pub fn within(arr: &Bound<'py, PyArray1<u8>>, offset: u64, len: usize) -> Option<Self> {
        let offset = usize::try_from(offset).ok()?;
        let end = offset.checked_add(len)?;
        if !arr.is_c_contiguous() || end > arr.len() {
            return None;
        }
        // SAFETY: `arr` is a live numpy array (held by `arr`), so its fields are readable and
        // its data pointer valid for its `len()` bytes (u8 items, C-contiguous);
        // `offset + len <= arr.len()` was checked above, so the result and the `len` bytes
        // after it stay inside them.
        let ptr = unsafe {
            let fields = npyffi::_PyArray_GET_ITEM_DATA(arr.as_array_ptr());
            if (*fields).flags & NPY_ARRAY_WRITEABLE == 0 {
                return None;
            }
            (*fields).data.cast::<u8>().add(offset)
        };
        Some(Memory::Within(ptr, arr.clone()))
    }
}

/// How a tensor of dtype `d`, `shape` and `nbytes` bytes becomes a numpy array: its registered
/// numpy dtype and its dimensions.
pub struct Layout {
    descr: &'static Py<PyArrayDescr>,
    dims: Vec<npy_intp>,
}

/// The [`Layout`] of a tensor, or None when it cannot be a numpy array made here: no numpy
/// dtype registered for `d`, a dimension beyond `npy_intp`, more dimensions than a C `int`, or
/// a byte count that is not the shape's (the caller then takes the `Buffer` path, whose
/// `reshape` says what is wrong).
pub fn layout(d: DType, shape: &[u64], nbytes: usize) -> Option<Layout> {
    let (descr, size) = descr_of(d)?;
    let dims = shape
        .iter()
        .map(|&n| npy_intp::try_from(n).ok())
        .collect::<Option<Vec<npy_intp>>>()?;
    c_int::try_from(dims.len()).ok()?;
    let want = shape
        .iter()
        .try_fold(size as u64, |n, &dim| n.checked_mul(dim))?;
    (want == nbytes as u64).then_some(Layout { descr, dims })
}

/// The C-ordered numpy array of `layout` over `mem`, whose byte count is the one `layout` was
/// made for.
pub fn new_array<'py>(
    py: Python<'py>,
    layout: Layout,
    mem: Memory<'_, 'py>,
) -> PyResult<Bound<'py, PyAny>> {
    let (ptr, writable, base): (*mut u8, bool, Bound<'py, PyAny>) = match mem {
        Memory::Store(b, keep) => (b.as_ptr().cast_mut(), false, keep.into_any()),
        Memory::Owned(v) => {
            let o = Owned::new(v);
            let ptr = o.ptr;
            let buf = Buffer {
                addr: ptr as usize,
                len: o.len,
                readonly: false,
                _backing: Backing::Owned(o),
            };
            (ptr, true, Bound::new(py, buf)?.into_any())
        }
        Memory::Within(ptr, arr) => (ptr, true, arr.into_any()),
    };
    let flags: c_int = NPY_ARRAY_C_CONTIGUOUS | if writable { NPY_ARRAY_WRITEABLE } else { 0 };
    let Layout { descr, mut dims } = layout;
    // `layout` checked that the rank fits.
    let rank = c_int::try_from(dims.len()).unwrap_or(c_int::MAX);
    // SAFETY: numpy's C API with the GIL held (`py`). `PyArray_NewFromDescr` steals a reference
    // to the descr, hence the new one (`clone_ref`, then `into_ptr`); it reads `rank` dims from
    // `dims` (alive for the call), computes C strides itself (strides NULL) and does not free
    // `ptr`, which points to the shape's byte count (`layout` checked the count, `Memory` the
    // bytes) that `base` keeps alive: the array holds `base` through `PyArray_SetBaseObject`
    // (which steals the reference passed, also when it fails) for as long as it lives. A NULL
    // result is a raised Python exception.
    unsafe {
        let subtype = npyffi::get_type_object(py, NpyTypes::PyArray_Type);
        let raw = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            subtype,
            descr.clone_ref(py).into_ptr().cast(),
            rank,
            dims.as_mut_ptr(),
            std::ptr::null_mut(),
            ptr.cast::<c_void>(),
            flags,
            std::ptr::null_mut(),
        );
        let arr = Bound::from_owned_ptr_or_err(py, raw)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(py, raw.cast(), base.into_ptr()) != 0 {
            return Err(PyErr::fetch(py));
        }
        Ok(arr)
    }
}
