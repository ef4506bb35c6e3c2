//! Converting any readable store into a native paramdex file.

use std::path::Path;

use crate::any::{TensorData, TensorStore};
use crate::error::{Error, Result};
use crate::name;
use crate::writer::{FinishStats, Tensor, Writer, WriterOptions};

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
