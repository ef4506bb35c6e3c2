//! Opening a sharded checkpoint at a URL (`s3://`, `file://`): the ranged reader of
//! `native::ranged` ([`Reader`] by ranges) over the objects of a bucket prefix ([`BucketPlace`]),
//! or over the files of a directory read with `pread` ([`DirPlace`]).

use std::sync::Arc;

use crate::error::Result;
use crate::native::ranged::{sharded_names, RemoteOptions};
use crate::native::Reader;
use crate::native::{DirPlace, FileRange, Place, INDEX_SUFFIX};
use crate::remote::place::BucketPlace;

/// Opens the sharded checkpoint at `url`: `s3://bucket/dir/PREFIX` or its
/// `s3://bucket/dir/PREFIX.index` (or `file://` the same), its data objects beside its index
/// in the same store. One or two requests (the index object's tail, and its header's block
/// unless the tail holds it); the data objects are opened on first use.
pub fn open_sharded(url: &str, opts: RemoteOptions) -> Result<Reader> {
    let (prefix, _) = sharded_names(url);
    if let Some(path) = prefix.strip_prefix("file://") {
        let index = Arc::new(FileRange::open(format!("{path}{INDEX_SUFFIX}"))?);
        return Reader::from_place(index, prefix.clone(), Arc::new(DirPlace::new(path)), opts);
    }
    open_sharded_at(Arc::new(BucketPlace::new(&prefix)?), opts)
}

/// Opens the sharded checkpoint whose objects are `place` (see [`open_sharded`]); it can be
/// the base of an incremental save in the same bucket
/// ([`crate::ShardWriter::with_base`]).
pub(crate) fn open_sharded_at(place: Arc<BucketPlace>, opts: RemoteOptions) -> Result<Reader> {
    let index = Arc::new(place.open_range(INDEX_SUFFIX, opts.tail_bytes)?);
    Reader::from_place(
        index,
        place.url().to_string(),
        place as Arc<dyn Place>,
        opts,
    )
}
