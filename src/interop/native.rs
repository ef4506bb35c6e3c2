//! The native format as one of the interop formats: [`TensorStore`] for [`Reader`], its
//! detector, and conversion of any store into a native file.

use std::path::Path;

use std::borrow::Cow;
use std::ops::Bound;

use crate::error::{Error, Result};
use crate::interop::store::{
    Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary,
};
use crate::name;
use crate::native::{
    FinishStats, Metadata, Reader, Tensor, TensorView, VerifyOptions, Writer, WriterOptions,
};

impl TensorStore for Reader {
    fn format(&self) -> Format {
        Format::Native
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        // Streams the index from `start`: one data block at a time, nothing collected.
        let it = self.range(Bound::Included(start.to_vec()), Bound::Unbounded);
        Ok(Box::new(it.map(|t| info(&t?))))
    }

    fn scan_prefix(&self, prefix: &[u8]) -> Result<TensorInfos<'_>> {
        // Stops at the end of the prefix's key range, before building a view past it.
        Ok(Box::new(self.prefix(prefix).map(|t| info(&t?))))
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.header().metadata.clone())
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(t) = self.get(name)? else {
            return Ok(None);
        };
        t.verify_crc()?;
        Ok(Some(LoadedTensor {
            info: info(&t)?,
            data: TensorData::Bytes(Cow::Borrowed(t.data())),
        }))
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        let r = self.verify_with(VerifyOptions {
            threads,
            progress: None,
        })?;
        Ok(VerifySummary {
            tensors: r.tensors,
            data_bytes: r.data_bytes,
            checksums: r.blocks + r.tensors,
        })
    }

    fn as_native(&self) -> Option<&Reader> {
        Some(self)
    }
}

/// What a listing says of a tensor. Reads only its index entry, unless it has LoD: only then is
/// its record header read (`TensorView::lod`), so listing touches no record of a tensor without.
fn info(t: &TensorView<'_>) -> Result<TensorInfo> {
    Ok(TensorInfo {
        name: t.name().to_vec(),
        kind: Kind::Numeric(t.dtype()),
        shape: t.shape().to_vec(),
        lod: t.lod()?.to_vec(),
        nbytes: t.data().len() as u64,
    })
}

/// The registry's detector for native files.
pub(crate) fn open_native(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        return Ok(None);
    }
    match Reader::open(path) {
        Ok(r) => Ok(Some(Box::new(r))),
        Err(Error::UnrecognizedFormat { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes every tensor of `store` into a new native file at `dst`, in name order (so the
/// records region is also a Paddle combined stream in Paddle's order). Tensors that are not
/// numeric (strings, TensorFlow types paramdex does not decode) are refused: native files hold
/// numeric tensors only (SPEC.md section 6). `progress` is called
/// after each tensor with (tensors done, total).
pub fn to_native(
    store: &dyn TensorStore,
    dst: &Path,
    opts: WriterOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<FinishStats> {
    let list = store.list()?;
    if let Some((what, s)) = list
        .iter()
        .find_map(|t| t.kind.not_numeric().map(|w| (w, t)))
    {
        return Err(Error::Unsupported(format!(
            "tensor {} is {what}; paramdex files hold numeric tensors only (SPEC.md section 6)",
            name::display(&s.name)
        )));
    }
    let mut w = Writer::create_with(dst, opts)?;
    for (i, info) in list.iter().enumerate() {
        let t = store.load(&info.name)?.ok_or_else(|| Error::NotFound {
            name: name::display(&info.name),
            path: format!("{} input", store.format().name()),
        })?;
        let dtype = t
            .info
            .kind
            .numeric()
            .expect("tensors that are not numeric were refused above");
        let TensorData::Bytes(data) = &t.data else {
            unreachable!("numeric tensors load as bytes")
        };
        w.add(
            &t.info.name,
            Tensor::new(dtype, &t.info.shape, data).with_lod(&t.info.lod),
        )?;
        progress(i + 1, list.len());
    }
    w.finish()
}
