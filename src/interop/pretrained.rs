//! Hugging Face model directories written (`save_pretrained`'s layout, read back by
//! [`crate::interop::hf`] and by `transformers`): [`export_pretrained`] writes
//! `DIR/model.safetensors`, or past a size the shards `DIR/model-00001-of-0000N.safetensors`
//! and their index `DIR/model.safetensors.index.json`
//! (`{"metadata": {"total_size": N}, "weight_map": {name: file}}`).
//!
//! The tensors go to the shards in bytewise name order, as `huggingface_hub`'s
//! `split_torch_state_dict_into_shards` fills them: a shard takes tensors until the next would
//! take it past the size; a tensor larger than the size is a shard by itself. Each file's
//! `__metadata__` is `{"format": "pt"}`, as `save_pretrained` writes it (`transformers`
//! refuses a safetensors file whose `format` is not a framework's); the input's own metadata
//! is not carried. The directory is written whole under a temporary name and renamed into
//! place, so a failed export leaves no partial model.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::export::{export, ExportOptions, ExportReport, OutputFormat};
use crate::interop::hf::{INDEX_FILES, MODEL_FILES};
use crate::interop::store::{
    Format, LoadedTensor, TensorInfo, TensorInfos, TensorStore, VerifySummary,
};
use crate::native::{staging, MetaValue, Metadata, Reader};

/// transformers' default `max_shard_size` (`"5GB"`: powers of 1000).
pub const DEFAULT_MAX_SHARD_SIZE: u64 = 5_000_000_000;

/// What [`export_pretrained`] wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PretrainedReport {
    /// The model files, in order (one `model.safetensors`, or the shards).
    pub files: Vec<PathBuf>,
    /// The index, when the model is sharded.
    pub index: Option<PathBuf>,
    /// Tensors written.
    pub tensors: u64,
    /// Their data bytes (the index's `total_size`).
    pub data_bytes: u64,
    /// Bytes of every file written.
    pub output_bytes: u64,
    /// What the safetensors exports left out ([`ExportOptions::skip_unsupported`]) and
    /// noted, over all files.
    pub skipped: Vec<crate::interop::export::Skipped>,
}

/// The tensors of one shard: a view of the input listing only `names` (sorted).
struct Shard<'a> {
    inner: &'a dyn TensorStore,
    names: &'a [Vec<u8>],
}

impl Shard<'_> {
    fn holds(&self, name: &[u8]) -> bool {
        self.names
            .binary_search_by(|n| n.as_slice().cmp(name))
            .is_ok()
    }
}

impl TensorStore for Shard<'_> {
    fn format(&self) -> Format {
        self.inner.format()
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let from = self.names.partition_point(|n| n.as_slice() < start);
        Ok(Box::new(self.names[from..].iter().map(|n| {
            self.inner.info(n)?.ok_or_else(|| Error::NotFound {
                name: crate::name::display(n),
                path: format!("{} input", self.inner.format().name()),
            })
        })))
    }

    fn metadata(&self) -> Result<Metadata> {
        self.inner.metadata()
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        if !self.holds(name) {
            return Ok(None);
        }
        self.inner.load(name)
    }

    fn load_many(&self, names: &[&[u8]], threads: usize) -> Result<Vec<LoadedTensor<'_>>> {
        if let Some(n) = names.iter().find(|n| !self.holds(n)) {
            return Err(Error::NotFound {
                name: crate::name::display(n),
                path: format!("{} input", self.inner.format().name()),
            });
        }
        self.inner.load_many(names, threads)
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        if !self.holds(name) {
            return Ok(None);
        }
        self.inner.info(name)
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        self.inner.verify(threads)
    }

    fn as_native(&self) -> Option<&Reader> {
        // Not every tensor of the reader is one of the shard's.
        None
    }
}

/// The shards' tensor names: whole tensors in name order, a shard closed when the next tensor
/// would take it past `max` bytes (a tensor larger than `max` alone).
fn split(tensors: &[TensorInfo], max: u64) -> Vec<Vec<Vec<u8>>> {
    let mut shards: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut size = 0u64;
    for t in tensors {
        let open = shards.last().is_some_and(|s| !s.is_empty());
        if !open || size.saturating_add(t.nbytes) > max {
            shards.push(Vec::new());
            size = 0;
        }
        size = size.saturating_add(t.nbytes);
        shards
            .last_mut()
            .expect("a shard was pushed")
            .push(t.name.clone());
    }
    shards
}

/// Writes `store` as the Hugging Face model directory `dir` (module doc): `model.safetensors`
/// when its tensors' data is at most `max_shard_size` bytes, else shards and their index.
/// `opts`: as [`export`]'s (its `metadata` is ignored: each file says `{"format": "pt"}`);
/// with [`ExportOptions::skip_unsupported`] the tensors safetensors cannot hold are left out
/// (listed in the report), else the first is an error before anything is written.
///
/// Errors: [`Error::OutputExists`] when `dir` exists and [`ExportOptions::overwrite`] is off;
/// [`Error::InvalidArgument`] for a `max_shard_size` of 0 or a `dir` that is a file; those of
/// [`export`].
pub fn export_pretrained(
    store: &dyn TensorStore,
    dir: &Path,
    max_shard_size: u64,
    opts: &ExportOptions<'_>,
) -> Result<PretrainedReport> {
    if max_shard_size == 0 {
        return Err(Error::InvalidArgument(
            "a maximum shard size of 0 bytes".into(),
        ));
    }
    if crate::remote::url_of(dir).is_some() {
        return Err(Error::InvalidArgument(format!(
            "{}: a Hugging Face model directory is written locally: export into a directory, \
             then upload it",
            dir.display()
        )));
    }
    match std::fs::symlink_metadata(dir) {
        Ok(m) if !m.is_dir() => {
            return Err(Error::InvalidArgument(format!(
                "{} is a file; a Hugging Face model is a directory",
                dir.display()
            )))
        }
        Ok(_) if !opts.overwrite => {
            return Err(Error::OutputExists {
                path: dir.display().to_string(),
            })
        }
        _ => {}
    }
    // The tensors safetensors holds (the others: an error, or left out and reported).
    let mut tensors = Vec::new();
    let mut skipped = Vec::new();
    for t in store.scan(b"")? {
        let t = t?;
        match OutputFormat::Safetensors.cannot_hold(&t) {
            None => tensors.push(t),
            Some(reason) if opts.skip_unsupported => {
                skipped.push(crate::interop::export::Skipped {
                    name: t.name.clone(),
                    reason,
                })
            }
            Some(reason) => {
                return Err(Error::Unsupported(format!(
                    "tensor {}: {reason}, which safetensors cannot hold",
                    crate::name::display(&t.name)
                )))
            }
        }
    }
    let shards = split(&tensors, max_shard_size);
    let n = shards.len();
    let mut md = Metadata::new();
    md.insert("format", MetaValue::String("pt".into()))?;
    let staged = staging::stage_dir(dir, ".hf-tmp")?;
    let mut report = PretrainedReport {
        files: Vec::new(),
        index: None,
        tensors: 0,
        data_bytes: 0,
        output_bytes: 0,
        skipped,
    };
    let mut weight_map = BTreeMap::new();
    for (k, names) in shards.iter().enumerate() {
        let file = if n <= 1 {
            MODEL_FILES[0].to_string()
        } else {
            format!("model-{:05}-of-{n:05}.safetensors", k + 1)
        };
        let shard = Shard {
            inner: store,
            names,
        };
        let rep: ExportReport = export(
            &shard,
            OutputFormat::Safetensors,
            &staged.path().join(&file),
            &ExportOptions {
                metadata: Some(&md),
                skip_unsupported: false,
                overwrite: false,
                progress: opts.progress,
                writer: opts.writer.clone(),
            },
        )?;
        report.tensors += rep.tensors;
        report.data_bytes += rep.data_bytes;
        report.output_bytes += rep.output_bytes;
        for name in names {
            weight_map.insert(String::from_utf8_lossy(name).into_owned(), file.clone());
        }
        report.files.push(dir.join(&file));
    }
    if n == 0 {
        // No tensor: an empty model.safetensors, as save_pretrained writes for an empty model.
        let rep = export(
            &Shard {
                inner: store,
                names: &[],
            },
            OutputFormat::Safetensors,
            &staged.path().join(MODEL_FILES[0]),
            &ExportOptions {
                metadata: Some(&md),
                ..Default::default()
            },
        )?;
        report.output_bytes += rep.output_bytes;
        report.files.push(dir.join(MODEL_FILES[0]));
    }
    if n > 1 {
        let index = serde_json::json!({
            "metadata": {"total_size": report.data_bytes},
            "weight_map": weight_map,
        });
        let text = serde_json::to_vec_pretty(&index)
            .map_err(|e| Error::InvalidArgument(format!("the index of {}: {e}", dir.display())))?;
        let path = staged.path().join(INDEX_FILES[0]);
        staging::write_atomically(&path, |w| w.write_all(&text))?;
        report.output_bytes += text.len() as u64;
        report.index = Some(dir.join(INDEX_FILES[0]));
    }
    staging::sync_dir(staged.path())?;
    staging::commit([(staged, dir)])?;
    staging::sync_parent(dir)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::interop::store::Kind;
    use crate::DType;

    fn info(name: &str, nbytes: u64) -> TensorInfo {
        TensorInfo {
            name: name.as_bytes().to_vec(),
            kind: Kind::Numeric(DType::UInt8),
            shape: vec![nbytes],
            lod: Vec::new(),
            nbytes,
        }
    }

    #[test]
    fn shards_fill_in_order_and_a_big_tensor_is_alone() {
        let t = [
            info("a", 4),
            info("b", 4),
            info("c", 3),
            info("d", 20),
            info("e", 1),
        ];
        let s = split(&t, 10);
        let names: Vec<Vec<&str>> = s
            .iter()
            .map(|s| s.iter().map(|n| std::str::from_utf8(n).unwrap()).collect())
            .collect();
        assert_eq!(names, [vec!["a", "b"], vec!["c"], vec!["d"], vec!["e"]]);
        assert_eq!(split(&t, 1000).len(), 1);
        assert!(split(&[], 10).is_empty());
    }
}
