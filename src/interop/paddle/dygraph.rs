//! Paddle dygraph checkpoints: `paddle.save` of a `state_dict` (`.pdparams`) or of an
//! optimizer's (`.pdopt`), pickles (protocols 2 to 4) of dicts of NumPy arrays, read without
//! running any of the pickle ([`crate::interop::pickle`], with [`PADDLE_GLOBALS`]).
//!
//! `paddle.save` pickles a state dict's tensors as NumPy arrays
//! (`numpy.core.multiarray._reconstruct(numpy.ndarray, (0,), b'b')` whose `BUILD` state is
//! `(1, shape, numpy.dtype(...), is_fortran, raw bytes)`), and other objects' tensors as
//! `tuple((name, ndarray))`; both are tensors here, named by their `state_dict` keys (nested
//! dicts and lists joined with `.`, as for torch). The array bytes are the pickle's own
//! `bytes` (zero-copy from the mapped file), or, at protocol 2, the `latin1` string NumPy
//! pickles them through (decoded). The `StructuredToParameterName@@` table and other scalars
//! and strings become the store's metadata. Paddle's bfloat16 arrays are NumPy `uint16` and
//! read as such. Refused, for that tensor only: big-endian, Fortran-order (of rank above 1)
//! and object arrays, and dtypes paramdex lacks.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{path_str, Error, PickleProblem, Result};
use crate::interop::pickle::{
    self, Bytes, Object, Pickle, Value, MIN_RECORD_BYTES, PADDLE_GLOBALS, RECORD_BYTES_PER_BYTE,
};
use crate::interop::store::{
    Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary,
};
use crate::name;
use crate::native::{Metadata, Source};
use crate::record::MAX_RANK;

/// Most non-tensor items kept as metadata.
pub const MAX_METADATA_ITEMS: usize = 4096;

#[derive(Debug)]
struct Array {
    name: Vec<u8>,
    result: std::result::Result<(DType, Vec<u64>, Bytes), String>,
}

impl Array {
    /// The bytes this record holds, for the record budget ([`RECORD_BYTES_PER_BYTE`]).
    fn heap_size(&self) -> u64 {
        let held = match &self.result {
            Ok((_, shape, _)) => 8 * shape.len(),
            Err(detail) => detail.len(),
        };
        (std::mem::size_of::<Array>() + self.name.len() + held) as u64
    }
}

/// An open `.pdparams` / `.pdopt` file.
#[derive(Debug)]
pub struct DygraphStore {
    path: PathBuf,
    shown: String,
    source: Source,
    arrays: Vec<Array>,
    metadata: Metadata,
}

/// The NumPy `_reconstruct` call of `v`, if it is one.
fn is_ndarray(p: &Pickle, v: &Value) -> bool {
    matches!(
        p.object(v),
        Some(Object::Call {
            func: (
                "numpy.core.multiarray" | "numpy._core.multiarray",
                "_reconstruct"
            ),
            ..
        })
    )
}

/// Paddle's `(name, ndarray)` tuple.
fn is_named_array(p: &Pickle, v: &Value) -> bool {
    match p.object(v) {
        Some(Object::Tuple(t)) => {
            t.len() == 2 && matches!(t[0], Value::Str(_)) && is_ndarray(p, &t[1])
        }
        _ => false,
    }
}

/// A NumPy dtype string (`f4`, `<f4`, `i8`, `b1`, `?`) as a paramdex dtype; `Err` says why not.
fn numpy_dtype(code: &str, order: &str) -> std::result::Result<DType, String> {
    let d = match code.trim_start_matches(['<', '>', '|', '=']) {
        "f2" | "e" => DType::Float16,
        "f4" | "f" => DType::Float32,
        "f8" | "d" => DType::Float64,
        "i1" | "b" => DType::Int8,
        "i2" | "h" => DType::Int16,
        "i4" | "i" => DType::Int32,
        "i8" | "q" | "l" => DType::Int64,
        "u1" | "B" => DType::UInt8,
        "u2" | "H" => DType::UInt16,
        "u4" | "I" => DType::UInt32,
        "u8" | "Q" | "L" => DType::UInt64,
        "b1" | "?" => DType::Bool,
        "c8" | "F" => DType::Complex64,
        "c16" | "D" => DType::Complex128,
        other => {
            return Err(format!(
                "NumPy dtype {other:?}, which paramdex does not read"
            ))
        }
    };
    if order == ">" && d.size() > 1 {
        return Err(format!("a big-endian NumPy array ({code})"));
    }
    Ok(d)
}

/// The dtype, shape and bytes of an ndarray `_reconstruct` call.
fn array(p: &Pickle, v: &Value) -> std::result::Result<(DType, Vec<u64>, Bytes), String> {
    let Some(Object::Call {
        state: Some(state), ..
    }) = p.object(v)
    else {
        return Err("an ndarray without its state".into());
    };
    let Some(Object::Tuple(st)) = p.object(state) else {
        return Err("an ndarray whose state is not a tuple".into());
    };
    let [Value::Int(1), shape, dtype, fortran, data] = st.as_slice() else {
        return Err("an ndarray state other than (1, shape, dtype, is_fortran, data)".into());
    };
    let shape: Vec<u64> = match p.object(shape) {
        // Checked before anything is copied: one shape may be shared by many arrays.
        Some(Object::Tuple(s)) if s.len() > MAX_RANK => {
            return Err(format!(
                "an ndarray of {} dimensions (at most {MAX_RANK})",
                s.len()
            ))
        }
        Some(Object::Tuple(s)) => s
            .iter()
            .map(|d| match d {
                Value::Int(i) if *i >= 0 => Ok(*i as u64),
                _ => Err("an ndarray shape holding something not a non-negative int".to_string()),
            })
            .collect::<std::result::Result<_, _>>()?,
        _ => return Err("an ndarray shape that is not a tuple".into()),
    };
    let Some(Object::Call {
        func: ("numpy", "dtype"),
        args,
        state: dstate,
    }) = p.object(dtype)
    else {
        return Err("an ndarray whose dtype is not numpy.dtype(...)".into());
    };
    let Some(Value::Str(code)) = args.first() else {
        return Err("numpy.dtype(...) of something not a str".into());
    };
    // The dtype's state: (version, byte order, ...).
    let order = match dstate.as_ref().and_then(|s| p.object(s)) {
        Some(Object::Tuple(t)) => match t.get(1) {
            Some(Value::Str(o)) => o.to_string(),
            _ => "|".into(),
        },
        _ => "|".into(),
    };
    let d = numpy_dtype(code, &order)?;
    if matches!(fortran, Value::Bool(true)) && shape.iter().filter(|&&x| x > 1).count() > 1 {
        return Err("a Fortran-order array".into());
    }
    let Value::Bytes(b) = data else {
        return Err(format!(
            "an array of dtype {code} whose data is not bytes (an object array?)"
        ));
    };
    Ok((d, shape, b.clone()))
}

impl DygraphStore {
    /// Maps and opens the `paddle.save` pickle at `path`.
    ///
    /// Errors: [`Error::Pickle`] for a pickle refused (a global outside [`PADDLE_GLOBALS`],
    /// named) or damaged; [`Error::UnrecognizedFormat`] for a pickle that holds no arrays.
    pub fn open(path: impl AsRef<Path>) -> Result<DygraphStore> {
        let path = path.as_ref();
        Self::from_source(Source::map(path)?, path.to_path_buf())
    }

    /// Opens a `paddle.save` pickle held in memory.
    pub fn from_bytes(bytes: impl Into<std::sync::Arc<[u8]>>) -> Result<DygraphStore> {
        Self::from_source(Source::Memory(bytes.into()), PathBuf::from("<memory>"))
    }

    fn from_source(source: Source, path: PathBuf) -> Result<DygraphStore> {
        let shown = path_str(&path);
        let p = pickle::parse(&source, &shown, PADDLE_GLOBALS)?;
        let leaves = p.named_leaves_with(&shown, &|p, v| is_named_array(p, v))?;
        let mut arrays = Vec::new();
        let mut metadata = Metadata::new();
        // A leaf shared under many names is one value but one record per name: bounded by
        // the pickle's size (issue 43).
        let mut records = p.budget(RECORD_BYTES_PER_BYTE, MIN_RECORD_BYTES);
        let over = |limit: u64| Error::Pickle {
            path: shown.clone(),
            offset: p.end() as u64,
            problem: PickleProblem::Limit,
            detail: format!(
                "its leaves make more than {limit} bytes of array and metadata records \
                 ({RECORD_BYTES_PER_BYTE} per byte of the {}-byte pickle): values shared many \
                 times over",
                p.end()
            ),
        };
        for (leaf, v) in leaves {
            let arr = match p.object(&v) {
                Some(Object::Tuple(t)) if is_named_array(&p, &v) => &t[1],
                _ if is_ndarray(&p, &v) => &v,
                _ => {
                    if metadata.len() < MAX_METADATA_ITEMS && !leaf.is_empty() {
                        if let Some(m) = pickle::metadata_value(&v) {
                            let size = match &m {
                                crate::native::MetaValue::String(s) => s.len(),
                                _ => 0,
                            };
                            if !records.spend((2 * leaf.len() + size + 32) as u64) {
                                return Err(over(records.limit()));
                            }
                            // A key the metadata cannot hold (too long) is left out.
                            let _ = metadata.insert(leaf, m);
                        }
                    }
                    continue;
                }
            };
            let result = array(&p, arr).and_then(|(d, shape, bytes)| {
                let count = shape
                    .iter()
                    .try_fold(1u64, |a, &x| a.checked_mul(x))
                    .and_then(|c| c.checked_mul(d.size() as u64))
                    .ok_or_else(|| format!("shape {shape:?} overflows"))?;
                let have = p.bytes(&bytes, &source).map_or(0, |b| b.len() as u64);
                if have != count {
                    return Err(format!(
                        "shape {shape:?} of {} needs {count} bytes, the array holds {have}",
                        d.name()
                    ));
                }
                Ok((d, shape, bytes))
            });
            let a = Array {
                name: leaf.into_bytes(),
                result,
            };
            if !records.spend(a.heap_size()) {
                return Err(over(records.limit()));
            }
            arrays.push(a);
        }
        if arrays.is_empty() {
            return Err(Error::UnrecognizedFormat {
                path: shown,
                detail: "a pickle that holds no NumPy arrays: not a Paddle .pdparams / .pdopt \
                         file"
                    .into(),
                looks_like: Some(crate::error::LooksLike::Pickle),
            });
        }
        arrays.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = arrays.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::corrupt(
                "paddle pickle",
                0,
                format!(
                    "{shown}: two arrays are both named {}",
                    name::display(&w[0].name)
                ),
            ));
        }
        Ok(DygraphStore {
            path,
            shown,
            source,
            arrays,
            metadata,
        })
    }

    fn find(&self, name: &[u8]) -> Option<&Array> {
        self.arrays
            .binary_search_by(|a| a.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.arrays[i])
    }

    fn error(&self, a: &Array, why: &str) -> Error {
        Error::Unsupported(format!(
            "{}: tensor {} is {why}",
            self.shown,
            name::display(&a.name)
        ))
    }

    fn info_of(&self, a: &Array) -> Result<TensorInfo> {
        match &a.result {
            Ok((d, shape, bytes)) => Ok(TensorInfo {
                name: a.name.clone(),
                kind: Kind::Numeric(*d),
                shape: shape.clone(),
                lod: Vec::new(),
                nbytes: match bytes {
                    Bytes::Span(r) => (r.end - r.start) as u64,
                    Bytes::Owned(o) => o.len() as u64,
                },
            }),
            Err(why) => Err(self.error(a, why)),
        }
    }

    /// The file this store reads.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl TensorStore for DygraphStore {
    fn format(&self) -> Format {
        Format::PaddleDygraph
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.metadata.clone())
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let from = self.arrays.partition_point(|a| a.name.as_slice() < start);
        Ok(Box::new(
            self.arrays[from..].iter().map(|a| self.info_of(a)),
        ))
    }

    fn list(&self) -> Result<Vec<TensorInfo>> {
        self.scan(b"")?.collect()
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        self.find(name).map(|a| self.info_of(a)).transpose()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(a) = self.find(name) else {
            return Ok(None);
        };
        let info = self.info_of(a)?;
        let data = match &a.result {
            Ok((_, _, Bytes::Span(r))) => {
                Cow::Borrowed(self.source.get(r.clone()).ok_or_else(|| Error::Pickle {
                    path: self.shown.clone(),
                    offset: r.start as u64,
                    problem: PickleProblem::Truncated,
                    detail: "array bytes outside the file".into(),
                })?)
            }
            Ok((_, _, Bytes::Owned(o))) => Cow::Owned(o.to_vec()),
            Err(why) => return Err(self.error(a, why)),
        };
        Ok(Some(LoadedTensor {
            info,
            data: TensorData::Bytes(data),
        }))
    }

    /// Paddle's pickles carry no checksums: checks that the pickle parsed (done at open) and
    /// that every array is one paramdex reads.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        let mut s = VerifySummary::default();
        for a in &self.arrays {
            let info = self.info_of(a)?;
            s.tensors += 1;
            s.data_bytes += info.nbytes;
        }
        Ok(s)
    }
}

/// Opens `path` as a `paddle.save` pickle, or `Ok(None)` if it is not one. The file must
/// start with a pickle `PROTO` opcode of protocol 2 to 5; it is claimed when it parses to a
/// value holding NumPy arrays, when it names a global outside the allow-list (a pickle beyond
/// doubt, refused by name), or when it is damaged and names NumPy's array reconstruction
/// (`_reconstruct`: a NumPy pickle beyond doubt). Other pickles, and fragments that name nothing, are left to
/// the other detectors (which report them as pickles paramdex does not read).
pub fn open_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let mut head = [0u8; 2];
    let ok = std::fs::File::open(path)
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut head))
        .is_ok();
    if !ok || head[0] != 0x80 || !(2..=5).contains(&head[1]) {
        return Ok(None);
    }
    open_source(Source::map(path)?, path.to_path_buf())
}

/// Opens the bytes of `source` as a `paddle.save` pickle, or `Ok(None)` if they are not one,
/// by the same test as [`open_store`]: a local file mapped, or an object read whole at a URL
/// (`path` names it in messages).
pub(crate) fn open_source(source: Source, path: PathBuf) -> Result<Option<Box<dyn TensorStore>>> {
    if source.len() < 2 || source[0] != 0x80 || !(2..=5).contains(&source[1]) {
        return Ok(None);
    }
    // Protocol 4 frames the whole pickle: a file cut short fails at its first FRAME, before
    // any global, so the evidence is looked for in the whole file.
    let numpy = |s: &[u8]| {
        s.windows(b"_reconstruct".len())
            .any(|w| w == b"_reconstruct")
    };
    match DygraphStore::from_source(source.clone(), path) {
        Ok(s) => Ok(Some(Box::new(s))),
        Err(
            e @ Error::Pickle {
                problem: PickleProblem::ForbiddenGlobal,
                ..
            },
        ) => Err(e),
        Err(e @ Error::Pickle { .. }) if numpy(&source) => Err(e),
        Err(e @ Error::Corrupt { .. }) => Err(e),
        Err(_) => Ok(None),
    }
}
