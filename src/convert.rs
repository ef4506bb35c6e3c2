//! Converting any readable store into a native paramdex file.

use std::path::Path;

use crate::any::{Kind, TensorData, TensorStore};
use crate::error::{Error, Result};
use crate::name;
use crate::writer::{FinishStats, Tensor, Writer, WriterOptions};

/// Writes every tensor of `store` into a new native file at `dst`, in name order (so the
/// records region is also a Paddle combined stream in Paddle's order). String tensors are
/// refused: native files hold numeric tensors only (SPEC.md section 6). `progress` is called
/// after each tensor with (tensors done, total).
pub fn to_native(
    store: &dyn TensorStore,
    dst: &Path,
    opts: WriterOptions,
    progress: &mut dyn FnMut(usize, usize),
) -> Result<FinishStats> {
    let list = store.list()?;
    if let Some(s) = list.iter().find(|t| t.kind == Kind::String) {
        return Err(Error::Unsupported(format!(
            "tensor {} is a string tensor; paramdex files hold numeric tensors only (SPEC.md section 6)",
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
            .expect("string tensors were refused above");
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
