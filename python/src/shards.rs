//! Sharded saves from Python (SPEC.md 12): [`PyShardWriter`] is one writer's shard of a save
//! (a local directory or an `s3://` prefix), [`py_merge_shards`] the index-only merge that
//! commits the save, and [`RegionReader`] the batched, checksum-checked reader of regions of
//! global tensors that `paramdex.torch.dcp`'s `StorageReader.read_data` calls. Every call that
//! writes, merges or reads releases the GIL.

use std::path::Path;
use std::sync::Arc;

use paramdex::interop::{open_native_with, Kind, TensorData, TensorStore};
use paramdex::{
    merge_shards, MergeShardsOptions, MergeShardsReport, ReadOptions, Region, SaveId, Saved,
    ShardWriter, WriterOptions,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::slot::WriterSlot;
use super::{dtype_of, metadata_from_py, name_bytes, ArrayBytes, OrPy};

/// The shard being written: in a local directory (pending name, renamed by the merge) or
/// uploaded to an object store under its final name.
/// The save id given as 32 hex digits.
fn save_id_of(hex: &str) -> PyResult<SaveId> {
    SaveId::from_hex(hex).ok_or_else(|| {
        PyValueError::new_err(format!(
            "a save id is 32 hex digits (paramdex.new_save_id()), not {hex:?}"
        ))
    })
}

/// A new random save id, as 32 hex digits: the coordinator makes one and passes it to every
/// writer of the save.
#[pyfunction]
pub(crate) fn new_save_id() -> String {
    SaveId::random().to_string()
}

/// One shard of a sharded save (`paramdex::ShardWriter`, made by `create_shard_writer` for a
/// path prefix or an `s3://` one); dropped without `finish`, nothing is left under a name a
/// reader looks at.
#[pyclass(frozen, name = "ShardWriter", module = "paramdex._paramdex")]
pub(crate) struct PyShardWriter {
    slot: WriterSlot<ShardWriter>,
}

#[pymethods]
impl PyShardWriter {
    /// Starts shard `rank` of `ranks` of the save `save_id` (32 hex digits) of the checkpoint
    /// at `prefix` (a path prefix, or `s3://bucket/dir/PREFIX`). `base`: the prefix of an
    /// earlier sharded checkpoint whose unchanged tensors this shard reuses (SPEC.md 12.5): a
    /// local one for a local prefix, one in the same bucket for a bucket prefix.
    #[new]
    #[pyo3(signature = (prefix, rank, ranks, save_id, base = None, sync = true, compress = None))]
    // The Python constructor's keywords, one argument each (PyO3 maps them by name).
    #[allow(clippy::too_many_arguments)]
    fn py_new(
        py: Python<'_>,
        prefix: String,
        rank: u32,
        ranks: u32,
        save_id: &str,
        base: Option<String>,
        sync: bool,
        compress: Option<&str>,
    ) -> PyResult<PyShardWriter> {
        let id = save_id_of(save_id)?;
        let opts = WriterOptions {
            sync,
            data_compression: crate::write::data_compression(compress)?,
            ..WriterOptions::default()
        };
        let p = prefix.clone();
        let sink = py
            .detach(move || {
                paramdex::create_shard_writer(
                    &p,
                    rank,
                    ranks,
                    id,
                    opts,
                    base.as_deref().map(Path::new),
                )
            })
            .py()?;
        Ok(PyShardWriter {
            slot: WriterSlot::new(sink, "shard writer", prefix),
        })
    }

    /// Adds a whole tensor: name (str or bytes), dtype name, shape, C-contiguous array.
    /// Returns False when it was reused from the base instead of written.
    fn add(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        dtype: &str,
        shape: Vec<u64>,
        array: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let n = name_bytes(name)?;
        let d = dtype_of(dtype)?;
        let bytes = ArrayBytes::of(array)?;
        // `array` is held (borrowed from the caller) for the whole call.
        let saved = py.detach(|| {
            self.slot
                .with(|w| w.add_or_reuse(&n, paramdex::Tensor::new(d, &shape, bytes.slice())))
        })?;
        Ok(saved == Saved::Written)
    }

    /// Adds the slice at `start` of lengths `lens` of the global tensor `name` of dtype `dtype`
    /// and shape `full_shape` (C-contiguous array of the slice). A slice covering the whole
    /// tensor is stored whole. Returns False when it was reused from the base.
    #[allow(clippy::too_many_arguments)]
    fn add_slice(
        &self,
        py: Python<'_>,
        name: &Bound<'_, PyAny>,
        dtype: &str,
        full_shape: Vec<u64>,
        start: Vec<u64>,
        lens: Vec<u64>,
        array: &Bound<'_, PyAny>,
    ) -> PyResult<bool> {
        let n = name_bytes(name)?;
        let d = dtype_of(dtype)?;
        let region = Region::new(start, lens).ok_or_else(|| {
            PyValueError::new_err("a slice's start and lengths must have the same rank")
        })?;
        let bytes = ArrayBytes::of(array)?;
        let saved = py.detach(|| {
            self.slot
                .with(|w| w.add_slice_or_reuse(&n, d, &full_shape, &region, bytes.slice()))
        })?;
        Ok(saved == Saved::Written)
    }

    /// Adds a bytes value (SPEC.md 6.1): arbitrary bytes under `name` (DCP's non-tensor items).
    fn add_bytes(&self, py: Python<'_>, name: &Bound<'_, PyAny>, value: &[u8]) -> PyResult<()> {
        let n = name_bytes(name)?;
        py.detach(|| self.slot.with(|w| w.add_bytes(&n, value)))
    }

    /// Replaces the shard's metadata.
    fn set_metadata(&self, metadata: &Bound<'_, PyDict>) -> PyResult<()> {
        let m = metadata_from_py(Some(metadata))?;
        self.slot.with(|w| w.set_metadata(m))
    }

    /// Finishes the shard (its pending name locally, its upload completed in a bucket); the
    /// checkpoint exists only once `merge_shards` commits the save. Returns a dict of counts.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let sink = self.slot.take()?;
        let (stats, reused) = py
            .detach(move || {
                let reused = sink.reused();
                sink.finish().map(|s| (s, reused))
            })
            .py()?;
        let d = PyDict::new(py);
        d.set_item("tensors", stats.tensors)?;
        d.set_item("slices", stats.slices)?;
        d.set_item("file_len", stats.file_len)?;
        d.set_item("index_len", stats.index_len)?;
        d.set_item("reused_tensors", reused.tensors)?;
        d.set_item("reused_bytes", reused.bytes)?;
        Ok(d)
    }

    /// Abandons the shard: nothing appears under a name a reader or the merge takes.
    fn abort(&self) -> PyResult<()> {
        self.slot.abandon()
    }

    /// Tensors added so far.
    fn __len__(&self) -> PyResult<usize> {
        self.slot.peek(0, |s| s.len())
    }
}

/// Commits the sharded save at `prefix` (a path prefix or `s3://` URL): the index-only merge
/// of SPEC.md 12.3 (12.6 in a bucket), the index written last. `save_id` names the save to
/// commit, `num_shards` the number of its writers; `metadata` is set over the shards' own.
/// Returns a dict of counts.
#[pyfunction]
#[pyo3(name = "merge_shards", signature = (prefix, save_id = None, num_shards = None, metadata = None, sync = true))]
pub(crate) fn merge_shards_py<'py>(
    py: Python<'py>,
    prefix: String,
    save_id: Option<&str>,
    num_shards: Option<u32>,
    metadata: Option<&Bound<'py, PyDict>>,
    sync: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let opts = MergeShardsOptions {
        save_id: save_id.map(save_id_of).transpose()?,
        num_shards,
        metadata: metadata_from_py(metadata)?,
        no_sync: !sync,
        ..MergeShardsOptions::default()
    };
    let report: MergeShardsReport = py.detach(|| merge_shards(&prefix, &opts)).py()?;
    let d = PyDict::new(py);
    d.set_item("save_id", report.save_id.to_string())?;
    d.set_item("tensors", report.tensors)?;
    d.set_item("slices", report.slices)?;
    d.set_item("reused_tensors", report.reused_tensors)?;
    d.set_item("reused_bytes", report.reused_bytes)?;
    d.set_item(
        "index_path",
        report.index_path.to_string_lossy().into_owned(),
    )?;
    Ok(d)
}

/// The step directories of the run at `root` (a directory or `s3://bucket/dir`) and the
/// latest complete one, by the rule of `paramdex ckpt ROOT` (`paramdex::interop::list_run`):
/// `{"dir", "latest": index or None, "checkpoints": [{"step", "name", "path", "format",
/// "complete", "why_not", "bytes", "modified"}, ...]}`, by step.
#[pyfunction]
pub(crate) fn list_run<'py>(py: Python<'py>, root: String) -> PyResult<Bound<'py, PyDict>> {
    let run = py.detach(|| paramdex::interop::list_run(&root)).py()?;
    let list = pyo3::types::PyList::empty(py);
    for c in &run.checkpoints {
        let d = PyDict::new(py);
        d.set_item("step", c.step)?;
        d.set_item("name", &c.name)?;
        d.set_item("path", c.path.to_string_lossy().into_owned())?;
        d.set_item("format", c.kind.name())?;
        d.set_item("complete", c.complete)?;
        d.set_item("why_not", c.why_not.as_deref())?;
        d.set_item("bytes", c.bytes)?;
        d.set_item("modified", c.modified)?;
        list.append(d)?;
    }
    let d = PyDict::new(py);
    d.set_item("dir", run.dir.to_string_lossy().into_owned())?;
    d.set_item("latest", run.latest_complete)?;
    d.set_item("checkpoints", list)?;
    Ok(d)
}

/// A checkpoint opened to read regions of its tensors with every stored tensor or slice read
/// from checked against its CRC32C: a local one mapped (`Reader` with `verify_tensors`), one in
/// a bucket by ranged GETs (whose reads always check).
#[pyclass(frozen, module = "paramdex._paramdex")]
pub(crate) struct RegionReader {
    store: Arc<dyn TensorStore>,
    path: String,
}

/// A tensor as listed: name, dtype name, shape.
type Listed = (Vec<u8>, String, Vec<u64>);

/// One region to read: its tensor, start and lengths, and the index of its destination.
struct Want {
    name: Vec<u8>,
    region: Region,
    dst: usize,
}

#[pymethods]
impl RegionReader {
    /// Opens the checkpoint at `path` (a prefix, `PREFIX.index`, a native file, or an `s3://`
    /// URL).
    #[new]
    fn py_new(py: Python<'_>, path: String) -> PyResult<RegionReader> {
        let p = path.clone();
        let store: Arc<dyn TensorStore> = py
            .detach(move || -> paramdex::Result<Arc<dyn TensorStore>> {
                let opts = ReadOptions {
                    verify_tensors: true,
                    ..ReadOptions::default()
                };
                Ok(Arc::from(open_native_with(&p, opts)?))
            })
            .py()?;
        Ok(RegionReader { store, path })
    }

    /// Every tensor as (name, dtype name, shape), in bytewise name order.
    fn tensors(&self, py: Python<'_>) -> PyResult<Vec<Listed>> {
        let s = self.store.clone();
        let infos = py.detach(move || s.list()).py()?;
        Ok(infos
            .into_iter()
            .map(|t| (t.name, t.kind.name().to_string(), t.shape))
            .collect())
    }

    /// The checkpoint's metadata.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.store.clone();
        let m = py.detach(move || s.metadata()).py()?;
        let d = PyDict::new(py);
        for (k, v) in m.iter() {
            d.set_item(k, super::meta_to_py(py, v)?)?;
        }
        Ok(d)
    }

    /// The bytes values `names` (SPEC.md 6.1), each checked against its checksum.
    fn read_bytes<'py>(
        &self,
        py: Python<'py>,
        names: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<Vec<Bound<'py, pyo3::types::PyBytes>>> {
        let names = names.iter().map(name_bytes).collect::<PyResult<Vec<_>>>()?;
        let s = self.store.clone();
        let path = self.path.clone();
        let values = py
            .detach(move || -> paramdex::Result<Vec<Vec<u8>>> {
                names
                    .iter()
                    .map(|n| read_bytes_value(s.as_ref(), &path, n))
                    .collect()
            })
            .py()?;
        Ok(values
            .iter()
            .map(|v| pyo3::types::PyBytes::new(py, v))
            .collect())
    }

    /// Reads region `i` (tensor `names[i]`, at `starts[i]` of lengths `lens[i]`, in the
    /// tensor's global coordinates) into `arrays[i]` (writable, C-contiguous, exactly the
    /// region's bytes, none overlapping), on `threads` threads (0: one per core, at most 8),
    /// in the order of the tensors' names and starts, without the GIL.
    #[pyo3(signature = (names, starts, lens, arrays, threads = 0))]
    fn read_into(
        &self,
        py: Python<'_>,
        names: Vec<Bound<'_, PyAny>>,
        starts: Vec<Vec<u64>>,
        lens: Vec<Vec<u64>>,
        arrays: Vec<Bound<'_, PyAny>>,
        threads: usize,
    ) -> PyResult<()> {
        let n = names.len();
        if starts.len() != n || lens.len() != n || arrays.len() != n {
            return Err(PyValueError::new_err(format!(
                "{n} names, {} starts, {} lengths and {} arrays: one of each per region",
                starts.len(),
                lens.len(),
                arrays.len()
            )));
        }
        let mut wants = Vec::with_capacity(n);
        for (i, ((name, start), len)) in names.iter().zip(starts).zip(lens).enumerate() {
            let region = Region::new(start, len).ok_or_else(|| {
                PyValueError::new_err("a region's start and lengths must have the same rank")
            })?;
            wants.push(Want {
                name: name_bytes(name)?,
                region,
                dst: i,
            });
        }
        // The checkpoint's order: by tensor (its stored slices are together), then position.
        wants.sort_by(|a, b| (&a.name, &a.region.start).cmp(&(&b.name, &b.region.start)));
        let bytes = ArrayBytes::writable(&arrays)?;
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get().min(8)),
            t => t,
        }
        .clamp(1, n.max(1));
        let store = &self.store;
        let path = &self.path;
        // `arrays` is held (borrowed from the caller) for the whole call.
        py.detach(|| -> paramdex::Result<()> {
            let mut dst: Vec<Option<&mut [u8]>> =
                bytes.iter().map(|b| Some(b.slice_mut())).collect();
            let mut jobs: Vec<(&Want, &mut [u8])> = Vec::with_capacity(n);
            for w in &wants {
                // Each destination is taken once: `wants` holds each index once.
                if let Some(d) = dst[w.dst].take() {
                    jobs.push((w, d));
                }
            }
            let per = jobs.len().div_ceil(threads).max(1);
            let mut chunks: Vec<Vec<(&Want, &mut [u8])>> = Vec::new();
            let mut it = jobs.into_iter().peekable();
            while it.peek().is_some() {
                chunks.push(it.by_ref().take(per).collect());
            }
            std::thread::scope(|s| -> paramdex::Result<()> {
                let handles: Vec<_> = chunks
                    .into_iter()
                    .map(|chunk| s.spawn(move || read_chunk(store.as_ref(), path, chunk)))
                    .collect();
                let mut first = Ok(());
                for h in handles {
                    let r = h.join().unwrap_or_else(|_| {
                        Err(paramdex::Error::InvalidArgument(format!(
                            "{path}: a reading thread panicked"
                        )))
                    });
                    if first.is_ok() {
                        first = r;
                    }
                }
                first
            })
        })
        .py()
    }
}

/// The bytes value `name` of `store`: through the native reader's own decoding locally (its
/// checksum checked by a reader opened with `verify_tensors`).
fn read_bytes_value(store: &dyn TensorStore, path: &str, name: &[u8]) -> paramdex::Result<Vec<u8>> {
    let shown = paramdex::name::display(name);
    let not_found = || paramdex::Error::NotFound {
        name: shown.clone(),
        path: path.to_string(),
    };
    if let Some(r) = store.as_native() {
        return r
            .get_bytes(name)?
            .map(|b| b.into_owned())
            .ok_or_else(not_found);
    }
    // Another store (a bucket's) loads a bytes value as its value, its checksum checked.
    let t = store.load(name)?.ok_or_else(not_found)?;
    match (&t.info.kind, t.data) {
        (Kind::Bytes, TensorData::Bytes(b)) => Ok(b.into_owned()),
        _ => Err(paramdex::Error::InvalidArgument(format!(
            "{path}: {shown} is not a bytes value"
        ))),
    }
}

/// Reads each region of `chunk` into its destination.
fn read_chunk(
    store: &dyn TensorStore,
    path: &str,
    chunk: Vec<(&Want, &mut [u8])>,
) -> paramdex::Result<()> {
    for (w, dst) in chunk {
        let shown = paramdex::name::display(&w.name);
        let t = store
            .load_slice(&w.name, &w.region)?
            .ok_or_else(|| paramdex::Error::NotFound {
                name: shown.clone(),
                path: path.to_string(),
            })?;
        let data = match &t.data {
            TensorData::Bytes(b) => b.as_ref(),
            _ => {
                return Err(paramdex::Error::InvalidArgument(format!(
                    "{path}: tensor {shown} is not numeric"
                )))
            }
        };
        if data.len() != dst.len() {
            return Err(paramdex::Error::InvalidArgument(format!(
                "{path}: the region at {:?} of lengths {:?} of tensor {shown} is {} bytes, its \
                 destination {}",
                w.region.start,
                w.region.len,
                data.len(),
                dst.len()
            )));
        }
        dst.copy_from_slice(data);
    }
    Ok(())
}
