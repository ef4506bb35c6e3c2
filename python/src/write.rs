//! Writing from Python: [`NativeWriter`], a native file written one tensor at a time, and
//! [`write_safetensors`], a safetensors file (or its bytes) written by the library's writer
//! from arrays the caller holds, seen as a [`TensorStore`] ([`MemStore`]). Its own file
//! because the writers are apart from reading stores (`lib.rs`). Every call that writes
//! releases the GIL.

use std::borrow::Cow;

use paramdex::interop::{
    export, ExportOptions, Format, Kind, LoadedTensor, OutputFormat, TensorData, TensorInfo,
    TensorInfos, TensorStore, VerifySummary,
};
use paramdex::{DataCompression, Error, Tensor, Writer, WriterOptions};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::slot::WriterSlot;
use crate::{
    dtype_of, metadata_from_py, name_bytes, prepare, py_err, ArrayBytes, OrPy, Prepared,
    PyTensorArgs,
};

/// A native file written one tensor at a time; dropped without `finish`, nothing is left under
/// the final name.
#[pyclass(frozen, module = "paramdex._paramdex")]
pub(crate) struct NativeWriter {
    slot: WriterSlot<Writer>,
}

/// The data compression a `compress=` keyword names: `None` or `"none"` (plain records),
/// `"lossless"` (SPEC.md 3.4); anything else is a ValueError.
pub(crate) fn data_compression(compress: Option<&str>) -> PyResult<DataCompression> {
    match compress {
        None | Some("none") => Ok(DataCompression::None),
        Some("lossless") => Ok(DataCompression::Lossless),
        Some(other) => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "compress={other:?}: paramdex compresses tensor data with \"lossless\" (or None)"
        ))),
    }
}

#[pymethods]
impl NativeWriter {
    /// Starts writing `path` (a temporary file beside it until `finish`).
    #[new]
    #[pyo3(signature = (path, alignment = None, sync = true, compress = None))]
    fn py_new(
        path: String,
        alignment: Option<u64>,
        sync: bool,
        compress: Option<&str>,
    ) -> PyResult<NativeWriter> {
        let mut opts = WriterOptions {
            sync,
            data_compression: data_compression(compress)?,
            ..WriterOptions::default()
        };
        if let Some(a) = alignment {
            opts.alignment = a;
        }
        let w = Writer::create_with(&path, opts).py()?;
        Ok(NativeWriter {
            slot: WriterSlot::new(w, "writer", path),
        })
    }

    /// Adds one tensor: name (str or bytes), dtype name, shape, C-contiguous array.
    fn add(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        dtype: &str,
        shape: Vec<u64>,
        array: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let n = name_bytes(name)?;
        let d = dtype_of(dtype)?;
        let bytes = ArrayBytes::of(array)?;
        // `array` is held (borrowed from the caller) for the whole call.
        py.detach(|| {
            self.slot
                .with(|w| w.add(&n, Tensor::new(d, &shape, bytes.slice())))
        })
    }

    /// Adds a bytes value (SPEC.md 6.1): `value` (bytes-like) under `name`.
    fn add_bytes(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let n = name_bytes(name)?;
        let v: Vec<u8> = if let Ok(b) = value.cast::<PyBytes>() {
            b.as_bytes().to_vec()
        } else {
            value.extract::<Vec<u8>>()?
        };
        py.detach(|| self.slot.with(|w| w.add_bytes(&n, &v)))
    }

    /// Replaces the metadata to be written.
    fn set_metadata(&self, metadata: &Bound<'_, PyDict>) -> PyResult<()> {
        let m = metadata_from_py(Some(metadata))?;
        self.slot.with(|w| w.set_metadata(m))
    }

    /// Writes the index, syncs and renames the file into place.
    fn finish(&self, py: Python<'_>) -> PyResult<()> {
        let w = self.slot.take()?;
        py.detach(|| w.finish()).py()?;
        Ok(())
    }

    /// Abandons the file: its temporary file is removed, nothing appears under the final name.
    fn abort(&self) -> PyResult<()> {
        self.slot.abandon()
    }

    /// Tensors added so far.
    fn __len__(&self) -> PyResult<usize> {
        self.slot.peek(0, |w| w.len())
    }
}

/// Tensors held by Python (C-contiguous arrays the caller keeps alive for the whole call), as
/// a [`TensorStore`], so that the library's writers (`interop::export`,
/// `interop::safetensors::serialize`) write them.
struct MemStore {
    /// Sorted by name.
    tensors: Vec<Prepared>,
}

impl MemStore {
    fn new(mut tensors: Vec<Prepared>) -> PyResult<MemStore> {
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = tensors.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(py_err(Error::DuplicateName {
                name: paramdex::name::display(&w[0].name),
            }));
        }
        for t in &tensors {
            let want = t
                .shape
                .iter()
                .try_fold(t.dtype.size() as u64, |n, &d| n.checked_mul(d));
            if want != Some(t.bytes.len as u64) {
                return Err(py_err(Error::InvalidTensor {
                    name: paramdex::name::display(&t.name),
                    detail: format!(
                        "{} of shape {:?} needs {want:?} bytes, the array has {}",
                        t.dtype.name(),
                        t.shape,
                        t.bytes.len
                    ),
                }));
            }
        }
        Ok(MemStore { tensors })
    }

    fn info(t: &Prepared) -> TensorInfo {
        TensorInfo {
            name: t.name.clone(),
            kind: Kind::Numeric(t.dtype),
            shape: t.shape.clone(),
            lod: Vec::new(),
            nbytes: t.bytes.len as u64,
        }
    }
}

impl TensorStore for MemStore {
    fn format(&self) -> Format {
        Format::Native
    }

    fn scan(&self, start: &[u8]) -> paramdex::Result<TensorInfos<'_>> {
        let from = self.tensors.partition_point(|t| t.name.as_slice() < start);
        Ok(Box::new(
            self.tensors[from..].iter().map(|t| Ok(MemStore::info(t))),
        ))
    }

    fn load(&self, name: &[u8]) -> paramdex::Result<Option<LoadedTensor<'_>>> {
        let Ok(i) = self
            .tensors
            .binary_search_by(|t| t.name.as_slice().cmp(name))
        else {
            return Ok(None);
        };
        let t = &self.tensors[i];
        Ok(Some(LoadedTensor {
            info: MemStore::info(t),
            data: TensorData::Bytes(Cow::Borrowed(t.bytes.slice())),
        }))
    }

    /// Arrays in memory have no checksums: their count and bytes.
    fn verify(&self, threads: usize) -> paramdex::Result<VerifySummary> {
        let _ = threads;
        Ok(VerifySummary {
            tensors: self.tensors.len() as u64,
            data_bytes: self.tensors.iter().map(|t| t.bytes.len as u64).sum(),
            checksums: 0,
        })
    }
}

/// Writes `items` (name, dtype name, shape, C-contiguous array) with `metadata` as a
/// safetensors file: to `path` (staged and renamed into place, replacing it) and returns None,
/// or, without a path, returns the file's bytes. The library's safetensors writer does it.
#[pyfunction]
#[pyo3(signature = (path, items, metadata = None))]
pub(crate) fn write_safetensors<'py>(
    py: Python<'py>,
    path: Option<String>,
    items: Vec<PyTensorArgs<'py>>,
    metadata: Option<&Bound<'py, PyDict>>,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let m = metadata_from_py(metadata)?;
    let store = MemStore::new(prepare(items.clone())?)?;
    // `items` holds every array for the whole call.
    let out = py
        .detach(|| match &path {
            Some(p) => {
                let opts = ExportOptions {
                    metadata: Some(&m),
                    overwrite: true,
                    ..ExportOptions::default()
                };
                export(
                    &store,
                    OutputFormat::Safetensors,
                    std::path::Path::new(p),
                    &opts,
                )
                .map(|_| None)
            }
            None => paramdex::interop::safetensors::serialize(&store, &m).map(Some),
        })
        .py()?;
    drop(items);
    Ok(out.map(|b| PyBytes::new(py, &b)))
}
