//! Opening a sharded checkpoint at a URL (`s3://`, `file://`): the ranged reader of
//! `native::ranged` ([`RemoteSharded`]) over the objects of a bucket prefix ([`BucketPlace`]),
//! or over local files read with `pread`.

use std::sync::Arc;

use crate::error::{Error, RemoteProblem, Result};
use crate::native::ranged::{sharded_names, DataOpener, RangeRead, RemoteOptions, RemoteSharded};
use crate::native::{FileRange, INDEX_SUFFIX};
use crate::remote::place::BucketPlace;

/// Opens the sharded checkpoint at `url`: `s3://bucket/dir/PREFIX` or its
/// `s3://bucket/dir/PREFIX.index` (or `file://` the same), its data objects beside its index
/// in the same store. One or two requests (the index object's tail, and its header's block
/// unless the tail holds it); the data objects are opened on first use.
pub fn open_sharded(url: &str, opts: RemoteOptions) -> Result<RemoteSharded> {
    let (prefix, _) = sharded_names(url);
    if let Some(path) = prefix.strip_prefix("file://") {
        let path = path.to_string();
        let index = Arc::new(FileRange::open(format!("{path}.index"))?);
        let shown = prefix.clone();
        let open_data = move |suffix: &str| -> Result<Arc<dyn RangeRead>> {
            match FileRange::open(format!("{path}{suffix}")) {
                Ok(f) => Ok(Arc::new(f) as Arc<dyn RangeRead>),
                Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                    Err(Error::remote(
                        format!("{shown}{suffix}"),
                        RemoteProblem::NotFound,
                        "no such file",
                    ))
                }
                Err(e) => Err(e),
            }
        };
        return RemoteSharded::open(index, prefix, Box::new(open_data), opts);
    }
    open_sharded_at(Arc::new(BucketPlace::new(&prefix)?), opts)
}

/// Opens the sharded checkpoint whose objects are `place` (see [`open_sharded`]); it can be
/// the base of an incremental save in the same bucket
/// ([`crate::remote::RemoteShardWriter::with_base`]).
pub(crate) fn open_sharded_at(
    place: Arc<BucketPlace>,
    opts: RemoteOptions,
) -> Result<RemoteSharded> {
    let tail = opts.tail_bytes;
    let index = Arc::new(place.open_range(INDEX_SUFFIX, tail)?);
    let data = place.clone();
    let open_data = move |suffix: &str| -> Result<Arc<dyn RangeRead>> {
        Ok(Arc::new(data.open_range(suffix, tail)?))
    };
    let mut r = RemoteSharded::open(index, place.url(), Box::new(open_data), opts)?;
    r.place = Some(place as Arc<dyn crate::native::Place>);
    Ok(r)
}

/// Opens the data objects of a sharded checkpoint whose prefix is the key `key_prefix` of
/// `store` (shown as `url_prefix`): each with one GET of its last `tail_bytes` bytes
/// ([`ObjectRange::open`](crate::remote::ObjectRange::open)), every later read `If-Match` the
/// entity tag that GET saw.
pub fn object_data_opener(
    store: Arc<dyn object_store::ObjectStore>,
    runtime: Arc<tokio::runtime::Runtime>,
    key_prefix: &str,
    url_prefix: &str,
    tail_bytes: u64,
) -> Box<DataOpener> {
    let (key_prefix, url_prefix) = (key_prefix.to_string(), url_prefix.to_string());
    Box::new(move |suffix: &str| -> Result<Arc<dyn RangeRead>> {
        Ok(Arc::new(crate::remote::object::ObjectRange::open(
            store.clone(),
            crate::remote::url::object_path(&format!("{key_prefix}{suffix}")),
            format!("{url_prefix}{suffix}"),
            runtime.clone(),
            tail_bytes,
        )?))
    })
}
