//! Other formats: one interface ([`TensorStore`]) over every input paramdex reads (native
//! files, TensorFlow checkpoints, Paddle models and tensor files, safetensors), the registry
//! that detects them by content ([`open_any`]), one interface that writes every output format
//! ([`export`], [`OutputFormat`]), and [`merge`] (several stores into one native file).
//!
//! Layering inside: `store` (the trait and its types, and the writers' side of [`export`])
//! depends on no format; each format module depends on `store` and the layers below; the
//! registries (`OPENERS` here, `EXPORTERS` in `export`) and `merge` sit above them all.

use std::path::Path;

use crate::error::{Error, Result};

mod export;
pub mod json;
mod merge;
pub(crate) mod native;
pub mod npy;
pub mod paddle;
pub mod safetensors;
mod store;
pub mod tf;

pub use export::{export, ExportOptions, ExportReport, OutputFormat, Skipped};
pub use merge::{merge, MergeInput, MergeOptions, MergeReport};
pub use store::{
    DataLocation, Format, Kind, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore,
    VerifySummary,
};

/// A detector: returns `Ok(None)` when the input is not its format.
type Opener = fn(&Path) -> Result<Option<Box<dyn TensorStore>>>;

/// Format openers tried in order by [`open_any`]. Other formats register here.
const OPENERS: &[Opener] = &[
    native::open_native,
    safetensors::open_store,
    tf::open_store,
    paddle::open_store,
];

/// Opens any supported input, detecting its format by content (not by extension).
pub fn open_any(path: impl AsRef<Path>) -> Result<Box<dyn TensorStore>> {
    let path = path.as_ref();
    for open in OPENERS {
        if let Some(store) = open(path)? {
            return Ok(store);
        }
    }
    if !path.exists() {
        return Err(Error::io(
            format!("opening {}", path.display()),
            std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such file, directory or checkpoint prefix",
            ),
        ));
    }
    let kinds = "a paramdex file, a safetensors file, a TensorFlow checkpoint or a Paddle model/tensor file";
    let detail = match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() == 0 => format!("the file is empty: not {kinds}"),
        Ok(m) if m.is_dir() => format!(
            "a directory holding no checkpoint, model or tensor files: not {kinds}, nor a \
             directory of them"
        ),
        _ => format!("not {kinds}"),
    };
    Err(Error::UnrecognizedFormat {
        path: path.display().to_string(),
        detail,
    })
}
