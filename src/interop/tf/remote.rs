//! A TensorFlow checkpoint in an object store (issue 15): its `.index`, read whole (a
//! checkpoint's listing and every lookup need it, and it is small beside the data), and its
//! data objects `PREFIX.data-SSSSS-of-NNNNN`, read by ranged GETs: each object is opened by the
//! first read of a tensor in it (that one request gives the tensor's bytes, the object's length
//! and its ETag), and every later read of it is conditional on that ETag, so an object replaced
//! while the checkpoint is open is an error, never a mix of two objects. Every tensor is checked
//! against the CRC32C its bundle entry stores, as for a local checkpoint: the reader is the
//! local one ([`TfCheckpoint`]), reading its data through [`ObjectShards`].

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use object_store::ObjectStore;

use super::checkpoint::{past_end, ShardData};
use super::TfCheckpoint;
use crate::error::{Error, Result};
use crate::native::Source;
use crate::remote::{ObjectLocation, ObjectRange, RangeRead, ReadAt};

/// The data objects of a checkpoint at `PREFIX` in a store, each opened on first use.
#[derive(Debug)]
pub(crate) struct ObjectShards {
    store: Arc<dyn ObjectStore>,
    runtime: Arc<tokio::runtime::Runtime>,
    /// The prefix's key in the store, and its URL.
    prefix_key: String,
    prefix_url: String,
    num_shards: u32,
    objects: Vec<OnceLock<ObjectRange>>,
}

impl ObjectShards {
    fn suffix(&self, shard: u32) -> String {
        crate::native::data_suffix(shard, self.num_shards)
    }

    /// The open object of `shard`, if a read has opened it.
    fn cell(&self, shard: u32) -> Result<&OnceLock<ObjectRange>> {
        self.objects.get(shard as usize).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "shard {shard} does not exist ({} has {} shards)",
                self.prefix_url, self.num_shards
            ))
        })
    }

    /// A missing or refused data object, said as a local checkpoint says a missing data file.
    fn open_error(&self, shard: u32, key: &[u8], e: Error) -> Error {
        match e {
            Error::Remote {
                url,
                problem,
                detail,
                source,
            } => Error::Remote {
                detail: format!(
                    "data shard {shard} of {} of checkpoint {}, which holds tensor {}: {detail}",
                    self.num_shards,
                    self.prefix_url,
                    crate::native::slice_key::display_key(key)
                ),
                url,
                problem,
                source,
            },
            other => other,
        }
    }
}

impl ShardData for ObjectShards {
    fn read(&self, shard: u32, offset: u64, size: u64, key: &[u8]) -> Result<Cow<'_, [u8]>> {
        let cell = self.cell(shard)?;
        let url = self.name(shard);
        let Some(end) = offset.checked_add(size) else {
            return Err(past_end(key, &url, offset, size, u64::MAX));
        };
        if let Some(obj) = cell.get() {
            if end > obj.len() {
                return Err(past_end(key, &url, offset, size, obj.len()));
            }
            return Ok(Cow::Owned(obj.read(offset..end)?));
        }
        if size == 0 {
            // Nothing to read (an empty tensor): no request.
            return Ok(Cow::Owned(Vec::new()));
        }
        let path =
            crate::remote::object_path(&format!("{}{}", self.prefix_key, self.suffix(shard)));
        let (obj, data) = ObjectRange::open_range(
            self.store.clone(),
            path,
            url.clone(),
            self.runtime.clone(),
            offset..end,
        )
        .map_err(|e| self.open_error(shard, key, e))?;
        let len = obj.len();
        // Another thread may have opened it meanwhile: either object serves later reads.
        let _ = cell.set(obj);
        if data.len() as u64 != size {
            return Err(past_end(key, &url, offset, size, len));
        }
        Ok(Cow::Owned(data))
    }

    fn name(&self, shard: u32) -> String {
        format!("{}{}", self.prefix_url, self.suffix(shard))
    }
}

/// The checkpoint at prefix `prefix` (its key and URL) of the store of `index`, whose whole
/// `.index` object (`index.url`) is `index_bytes`.
pub(crate) fn open_at(
    index: &ObjectLocation,
    prefix_key: &str,
    prefix_url: &str,
    index_bytes: Vec<u8>,
) -> Result<TfCheckpoint> {
    let (store, runtime) = (index.store.clone(), index.runtime.clone());
    let (prefix_key, prefix_url) = (prefix_key.to_string(), prefix_url.to_string());
    TfCheckpoint::from_index(
        PathBuf::from(&prefix_url),
        Source::Memory(index_bytes.into()),
        index.url.clone(),
        move |num_shards| {
            Box::new(ObjectShards {
                store,
                runtime,
                prefix_key,
                prefix_url,
                num_shards,
                objects: (0..num_shards).map(|_| OnceLock::new()).collect(),
            })
        },
    )
}

/// The whole of an object of `len` bytes, of which the bytes from `held_start` to the end are
/// `held`: one more request for the rest, refused above `max_bytes` before it is made.
pub(crate) fn whole_object(
    src: &dyn RangeRead,
    held_start: u64,
    held: &[u8],
    max_bytes: u64,
) -> Result<Vec<u8>> {
    let len = src.len();
    if len > max_bytes {
        return Err(Error::Unsupported(format!(
            "{}: the checkpoint's .index is {len} bytes, above the {max_bytes} bytes a reader \
             holds in memory (a TensorFlow checkpoint is read with its whole .index)",
            src.location()
        )));
    }
    let mut all = if held_start > 0 {
        src.read(0..held_start)?
    } else {
        Vec::new()
    };
    all.extend_from_slice(held);
    Ok(all)
}
