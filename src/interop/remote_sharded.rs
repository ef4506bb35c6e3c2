//! Sharded paramdex checkpoints (`PREFIX.index` + `PREFIX.data-k-of-N`, SPEC.md 12) at a URL:
//! the call point of the URL dispatcher ([`super::remote::open_location`]) for an index whose
//! header is a paramdex one that lists shards.
//!
//! MERGE POINT: the reader of sharded checkpoints over object storage is built on another
//! branch (issue 15, sharded checkpoints over URLs, whose `open_sharded_url` has this
//! signature); it replaces this file. Until then such a checkpoint is refused with
//! [`Error::Unsupported`].

use crate::error::{Error, Result};
use crate::interop::store::TensorStore;

/// Opens the sharded paramdex checkpoint whose index object is at `url` (`.../PREFIX.index`).
pub(crate) fn open_sharded_url(url: &str) -> Result<Box<dyn TensorStore>> {
    Err(Error::Unsupported(format!(
        "{url}: the index of a sharded paramdex checkpoint (it lists data shards); reading one \
         from object storage is not part of this build"
    )))
}
