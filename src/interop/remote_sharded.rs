//! Sharded paramdex checkpoints (`PREFIX.index` + `PREFIX.data-k-of-N`, SPEC.md 12) at a URL:
//! the call point of the URL dispatcher ([`super::remote::open_location`]) for an index whose
//! header is a paramdex one that lists shards.
//!
//! MERGE POINT: the reader of sharded checkpoints over object storage is built on another
//! branch (issue 15, sharded checkpoints over URLs); it replaces the body of
//! [`open_sharded_url`]. Until then such a checkpoint is refused with [`Error::Unsupported`].

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::interop::remote::UrlOptions;
use crate::interop::store::TensorStore;
use crate::remote::{ObjectLocation, RangeRead};

/// Opens the sharded paramdex checkpoint at `prefix`, whose index object is `index`, already
/// opened as `index_src` (its tail read: served again without a request).
pub(crate) fn open_sharded_url(
    prefix: &ObjectLocation,
    index: &ObjectLocation,
    index_src: Arc<dyn RangeRead>,
    opts: &UrlOptions,
) -> Result<Box<dyn TensorStore>> {
    let _ = (index_src, opts);
    Err(Error::Unsupported(format!(
        "{}: a sharded paramdex checkpoint (its index {} lists data shards); reading one from \
         object storage is not part of this build",
        prefix.url, index.url
    )))
}
