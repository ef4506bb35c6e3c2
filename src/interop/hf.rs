//! Hugging Face model layouts (`save_pretrained`): a directory holding `model.safetensors` or
//! `pytorch_model.bin` (beside its `config.json`), and sharded checkpoints: shard files
//! (`model-00001-of-00003.safetensors`, `pytorch_model-00001-of-00002.bin`) listed by an index
//! (`model.safetensors.index.json`, `pytorch_model.bin.index.json`: `{"metadata": {...},
//! "weight_map": {tensor name: shard file name}}`), opened as one store by the directory or by
//! the index file.
//!
//! Every shard the weight map names is opened (each by its own format's reader: safetensors,
//! `torch.save`) when the checkpoint is opened, and the map is checked against them: a shard
//! that is missing, a name missing from the shard the map says holds it, a name held by two
//! shards, are errors naming the index, the shard and the tensor. A tensor a shard holds that
//! the map does not name is read too (the shards are what holds the data). The index's
//! `metadata` scalars (`total_size`) are the store's metadata.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::interop::store::{
    scan_sorted, DataLocation, Format, LoadedTensor, TensorInfo, TensorInfos, TensorStore,
    VerifySummary,
};
use crate::name;
use crate::native::{MetaValue, Metadata, Region};

/// The single-file model names a `save_pretrained` directory holds, in the order they are
/// preferred (safetensors first, as `transformers` loads it).
pub const MODEL_FILES: &[&str] = &["model.safetensors", "pytorch_model.bin"];
/// The index names of sharded checkpoints, in the order they are preferred.
pub const INDEX_FILES: &[&str] = &[
    "model.safetensors.index.json",
    "pytorch_model.bin.index.json",
];
/// Largest index file read (bytes).
pub const MAX_INDEX_BYTES: u64 = 256 << 20;
/// Most shards one index may name.
pub const MAX_SHARDS: usize = 1 << 16;

/// A parsed index: its weight map (tensor name, shard file name) and metadata scalars.
#[derive(Debug)]
pub(crate) struct Index {
    pub(crate) weight_map: Vec<(String, String)>,
    pub(crate) metadata: Metadata,
    /// The shard file names, sorted, each once.
    pub(crate) shards: Vec<String>,
}

fn bad_index(shown: &str, detail: impl Into<String>) -> Error {
    Error::corrupt(
        "Hugging Face index",
        0,
        format!("{shown}: {}", detail.into()),
    )
}

/// Parses the index `bytes` (named `shown` in messages). Shard names must be plain file names
/// (no directory, so that no shard is read from outside the checkpoint).
pub(crate) fn parse_index(bytes: &[u8], shown: &str) -> Result<Index> {
    let v: serde_json::Value =
        serde_json::from_slice(bytes).map_err(|e| bad_index(shown, format!("not JSON: {e}")))?;
    let Some(map) = v.get("weight_map").and_then(|m| m.as_object()) else {
        return Err(bad_index(shown, "no \"weight_map\" object"));
    };
    let mut weight_map = Vec::with_capacity(map.len());
    let mut shards = Vec::new();
    for (name, shard) in map {
        let Some(shard) = shard.as_str() else {
            return Err(bad_index(
                shown,
                format!("the shard of {name:?} is not a string"),
            ));
        };
        if shard.is_empty() || shard == "." || shard == ".." || shard.contains(['/', '\\', '\0']) {
            return Err(bad_index(
                shown,
                format!("the shard of {name:?} is {shard:?}, not a file name beside the index"),
            ));
        }
        weight_map.push((name.clone(), shard.to_string()));
        shards.push(shard.to_string());
    }
    shards.sort();
    shards.dedup();
    crate::error::ensure_within(
        "shards of a Hugging Face index",
        shards.len(),
        MAX_SHARDS,
        None,
    )?;
    let mut metadata = Metadata::new();
    if let Some(m) = v.get("metadata").and_then(|m| m.as_object()) {
        for (k, x) in m {
            let value = match x {
                serde_json::Value::Bool(b) => MetaValue::Bool(*b),
                serde_json::Value::Number(n) => match n.as_i64() {
                    Some(i) => MetaValue::Int(i),
                    None => match n.as_f64() {
                        Some(f) => MetaValue::Float(f),
                        None => continue,
                    },
                },
                serde_json::Value::String(s) => MetaValue::String(s.clone()),
                _ => continue,
            };
            // A key the metadata cannot hold is left out.
            let _ = metadata.insert(k.clone(), value);
        }
    }
    Ok(Index {
        weight_map,
        metadata,
        shards,
    })
}

/// A sharded checkpoint: the stores of its shards, and which shard holds each tensor.
pub struct ShardedStore {
    index: String,
    shards: Vec<(String, Box<dyn TensorStore>)>,
    /// Tensor name -> shard number.
    holder: BTreeMap<Vec<u8>, usize>,
    metadata: Metadata,
}

impl std::fmt::Debug for ShardedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardedStore")
            .field("index", &self.index)
            .field("shards", &self.shards.len())
            .field("tensors", &self.holder.len())
            .finish()
    }
}

impl ShardedStore {
    /// The checkpoint of `index` (named `shown`), its shards opened by `open_shard` (given a
    /// shard's file name), the weight map checked against them.
    pub(crate) fn new(
        shown: &str,
        index: Index,
        open_shard: &dyn Fn(&str) -> Result<Box<dyn TensorStore>>,
    ) -> Result<ShardedStore> {
        let mut shards = Vec::with_capacity(index.shards.len());
        let mut number = HashMap::new();
        for s in &index.shards {
            let store = open_shard(s).map_err(|e| match e {
                Error::Io { .. } | Error::Remote { .. } => Error::InvalidArgument(format!(
                    "{shown}: shard {s} of the weight map cannot be opened: {e}"
                )),
                e => e.context(&format!("{shown}: shard {s}")),
            })?;
            number.insert(s.clone(), shards.len());
            shards.push((s.clone(), store));
        }
        let mut holder = BTreeMap::new();
        for (i, (s, store)) in shards.iter().enumerate() {
            for t in store.scan(b"")? {
                let t = t?;
                if let Some(j) = holder.insert(t.name.clone(), i) {
                    return Err(bad_index(
                        shown,
                        format!(
                            "tensor {} is held by two shards, {} and {s}",
                            name::display(&t.name),
                            shards[j].0
                        ),
                    ));
                }
            }
        }
        for (t, s) in &index.weight_map {
            let want = number[s];
            match holder.get(t.as_bytes()) {
                Some(&i) if i == want => {}
                Some(&i) => {
                    return Err(bad_index(
                        shown,
                        format!(
                            "the weight map puts tensor {t:?} in {s}, but {} holds it",
                            shards[i].0
                        ),
                    ))
                }
                None => {
                    return Err(bad_index(
                        shown,
                        format!("the weight map puts tensor {t:?} in {s}, which does not hold it"),
                    ))
                }
            }
        }
        Ok(ShardedStore {
            index: shown.to_string(),
            shards,
            holder,
            metadata: index.metadata,
        })
    }

    fn shard_of(&self, name: &[u8]) -> Option<&dyn TensorStore> {
        self.holder.get(name).map(|&i| self.shards[i].1.as_ref())
    }

    /// The shards' file names and formats, in name order.
    pub fn shards(&self) -> Vec<(String, Format)> {
        self.shards
            .iter()
            .map(|(n, s)| (n.clone(), s.format()))
            .collect()
    }

    /// The index the checkpoint was opened by.
    pub fn index(&self) -> &str {
        &self.index
    }
}

impl TensorStore for ShardedStore {
    fn format(&self) -> Format {
        Format::HuggingFaceSharded
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.metadata.clone())
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let mut list = Vec::new();
        for (_, s) in &self.shards {
            for t in s.scan(b"")? {
                list.push(t?);
            }
        }
        list.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(scan_sorted(list, start))
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        match self.shard_of(name) {
            Some(s) => s.info(name),
            None => Ok(None),
        }
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        match self.shard_of(name) {
            Some(s) => s.load(name),
            None => Ok(None),
        }
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        match self.shard_of(name) {
            Some(s) => s.load_slice(name, region),
            None => Ok(None),
        }
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        let mut sum = VerifySummary::default();
        for (n, s) in &self.shards {
            let v = s
                .verify(threads)
                .map_err(|e| e.context(&format!("{}: shard {n}", self.index)))?;
            sum.tensors += v.tensors;
            sum.data_bytes += v.data_bytes;
            sum.checksums += v.checksums;
        }
        Ok(sum)
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        match self.shard_of(name) {
            Some(s) => s.data_location(name),
            None => Ok(None),
        }
    }
}

/// Whether `name` is the name of a sharded checkpoint's index (`*.safetensors.index.json`,
/// `*.bin.index.json`).
pub(crate) fn is_index_name(name: &str) -> bool {
    name.ends_with(".safetensors.index.json") || name.ends_with(".bin.index.json")
}

/// Opens the local sharded checkpoint of index file `index`, each shard with `open_file`.
pub(crate) fn open_index(
    index: &Path,
    open_file: crate::interop::store::Opener,
) -> Result<ShardedStore> {
    let shown = index.display().to_string();
    let len = std::fs::metadata(index)
        .map_err(|e| Error::io(format!("reading {shown}"), e))?
        .len();
    crate::error::ensure_within("bytes of a Hugging Face index", len, MAX_INDEX_BYTES, None)?;
    let bytes = std::fs::read(index).map_err(|e| Error::io(format!("reading {shown}"), e))?;
    let parsed = parse_index(&bytes, &shown)?;
    let dir = index.parent().unwrap_or(Path::new("."));
    ShardedStore::new(&shown, parsed, &|s| {
        let p = dir.join(s);
        if !p.is_file() {
            return Err(bad_index(
                &shown,
                format!("its shard {} is missing", p.display()),
            ));
        }
        open_file(&p)?.ok_or_else(|| Error::UnrecognizedFormat {
            path: p.display().to_string(),
            looks_like: None,
            detail: "a shard of a Hugging Face checkpoint that is neither a safetensors nor a \
                     torch.save file"
                .into(),
        })
    })
}

/// What a local `path` is as a Hugging Face layout: the index of a sharded checkpoint (the
/// index file itself, or the preferred index in a directory), or a directory's single model
/// file. `None` for anything else.
pub(crate) fn resolve(path: &Path) -> Option<(PathBuf, bool)> {
    if path.is_file() {
        let name = path.file_name()?.to_str()?;
        return is_index_name(name).then(|| (path.to_path_buf(), true));
    }
    if !path.is_dir() {
        return None;
    }
    INDEX_FILES
        .iter()
        .map(|n| (path.join(n), true))
        .chain(MODEL_FILES.iter().map(|n| (path.join(n), false)))
        .find(|(p, _)| p.is_file())
}

/// Opens `path` as a Hugging Face layout (see [`resolve`]), each file with `open_file` (the
/// registry's detection of a single file); `Ok(None)` if it is not one.
pub(crate) fn open_store(
    path: &Path,
    open_file: crate::interop::store::Opener,
) -> Result<Option<Box<dyn TensorStore>>> {
    match resolve(path) {
        None => Ok(None),
        Some((index, true)) => Ok(Some(Box::new(open_index(&index, open_file)?))),
        Some((model, false)) => open_file(&model),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_names_and_shard_names() {
        assert!(is_index_name("model.safetensors.index.json"));
        assert!(is_index_name(
            "diffusion_pytorch_model.safetensors.index.json"
        ));
        assert!(is_index_name("pytorch_model.bin.index.json"));
        assert!(!is_index_name("model.json"));
        let ok = br#"{"metadata": {"total_size": 12}, "weight_map": {"a": "s1.safetensors"}}"#;
        let i = parse_index(ok, "x").unwrap();
        assert_eq!(i.shards, ["s1.safetensors"]);
        assert_eq!(i.metadata.get("total_size"), Some(&MetaValue::Int(12)));
        for bad in [
            &br#"{"weight_map": {"a": "../s1.safetensors"}}"#[..],
            br#"{"weight_map": {"a": "/etc/passwd"}}"#,
            br#"{"weight_map": {"a": 3}}"#,
            br#"{"metadata": {}}"#,
            b"not json",
        ] {
            assert!(matches!(parse_index(bad, "x"), Err(Error::Corrupt { .. })));
        }
    }
}
