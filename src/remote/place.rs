//! The sibling files of a checkpoint in a bucket ([`BucketPlace`]): the objects whose keys
//! start with the key of `s3://bucket/dir/PREFIX`, listed, read by ranges ([`ObjectRange`]),
//! written by multipart upload ([`ObjectUpload`]) or one PUT, deleted, and copied from another
//! checkpoint in the same bucket by the store itself (`CopyObject`: no byte through this
//! process). The directory's counterpart is [`crate::place::DirPlace`].

use std::any::Any;
use std::sync::Arc;

use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::{Error, RemoteProblem, Result, ShardProblem};
use crate::native::ranged::RangeRead;
use crate::native::{Brought, Place, Writer, WriterOptions, INDEX_SUFFIX};
use crate::remote::object::{remote_error, ObjectRange};
use crate::remote::upload::{ObjectUpload, UploadOptions};
use crate::remote::url::{object_path, resolve, split_s3_url, ObjectLocation};

/// Bytes of an object's end read when it is opened: a shard's footer and index, usually.
const OPEN_TAIL: u64 = 256 << 10;

/// The objects of a checkpoint at `s3://bucket/dir/PREFIX`: every key `dir/PREFIX<suffix>`.
#[derive(Clone)]
pub struct BucketPlace {
    /// The store, its runtime, and (as `path` and `url`) the prefix's key and URL.
    loc: ObjectLocation,
    /// The bucket (two places exchange objects only within one).
    bucket: String,
    /// The key of the prefix's "directory", to list.
    dir: Option<ObjectPath>,
    /// The prefix's last part: the start of every name.
    stem: String,
    upload: UploadOptions,
}

impl std::fmt::Debug for BucketPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BucketPlace")
            .field("prefix", &self.loc.url)
            .finish_non_exhaustive()
    }
}

impl BucketPlace {
    /// The objects of the checkpoint at `prefix` (`s3://bucket/dir/PREFIX`, or its
    /// `PREFIX.index`), written with the default [`UploadOptions`]. No request is made.
    ///
    /// Errors: [`Error::Unsupported`] for a `file://` URL (a directory is written at its path:
    /// [`crate::place::DirPlace`]); [`Error::InvalidArgument`] for a URL that names no prefix.
    pub fn new(prefix: &str) -> Result<BucketPlace> {
        let prefix = prefix.strip_suffix(INDEX_SUFFIX).unwrap_or(prefix);
        if prefix.starts_with("file://") {
            return Err(Error::Unsupported(format!(
                "{prefix}: a sharded checkpoint in a local directory is written by ShardWriter \
                 and merge_shards at its path, not at a file:// URL"
            )));
        }
        let bucket = split_s3_url(prefix)?.0.to_string();
        BucketPlace::at(resolve(prefix)?, &bucket)
    }

    /// The objects of the checkpoint whose prefix is `loc` (its store, the prefix's key as
    /// `path`, its URL as `url`) in the bucket `bucket`: for stores built by the caller (tests
    /// use object_store's in-memory store).
    pub fn at(loc: ObjectLocation, bucket: &str) -> Result<BucketPlace> {
        let key = loc.path.to_string();
        let (dir, stem) = match key.rsplit_once('/') {
            Some((d, s)) => (Some(object_path(d)), s.to_string()),
            None => (None, key.clone()),
        };
        if stem.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: a sharded checkpoint's prefix names its files (s3://bucket/dir/PREFIX)",
                loc.url
            )));
        }
        Ok(BucketPlace {
            loc,
            bucket: bucket.to_string(),
            dir,
            stem,
            upload: UploadOptions::default(),
        })
    }

    /// The same place, its writers uploading with `upload`.
    pub fn with_upload(mut self, upload: UploadOptions) -> BucketPlace {
        self.upload = upload;
        self
    }

    /// The prefix's URL.
    pub fn url(&self) -> &str {
        &self.loc.url
    }

    /// The key of `PREFIX<suffix>`.
    pub(crate) fn key(&self, suffix: &str) -> ObjectPath {
        object_path(&format!("{}{suffix}", self.loc.path))
    }

    /// The location of `PREFIX<suffix>`.
    fn location(&self, suffix: &str) -> ObjectLocation {
        ObjectLocation {
            path: self.key(suffix),
            url: self.shown(suffix),
            ..self.loc.clone()
        }
    }

    fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.loc.store
    }

    /// Opens `PREFIX<suffix>` to read by ranges: one GET of its last `tail_bytes` bytes, every
    /// later read `If-Match` the entity tag that GET saw.
    pub(crate) fn open_range(&self, suffix: &str, tail_bytes: u64) -> Result<ObjectRange> {
        ObjectRange::open(
            self.store().clone(),
            self.key(suffix),
            self.shown(suffix),
            self.loc.runtime.clone(),
            tail_bytes,
        )
    }
}

impl Place for BucketPlace {
    fn shown(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.loc.url)
    }

    fn list(&self) -> Result<Vec<String>> {
        let listed = self
            .loc
            .runtime
            .block_on(self.store().list_with_delimiter(self.dir.as_ref()))
            .map_err(|e| remote_error(&self.loc.url, e))?;
        let mut out: Vec<String> = listed
            .objects
            .iter()
            .filter_map(|o| o.location.filename()?.strip_prefix(self.stem.as_str()))
            .map(str::to_string)
            .collect();
        out.sort();
        Ok(out)
    }

    fn open(&self, suffix: &str) -> Result<Arc<dyn RangeRead>> {
        match self.open_range(suffix, OPEN_TAIL) {
            Ok(r) => Ok(Arc::new(r)),
            Err(Error::Remote {
                problem: RemoteProblem::NotFound,
                detail,
                ..
            }) => Err(Error::Shard {
                path: self.shown(suffix),
                problem: ShardProblem::Missing,
                detail: format!("the object is missing ({detail})"),
            }),
            Err(e) => Err(e),
        }
    }

    fn writer(&self, suffix: &str, opts: WriterOptions) -> Result<Writer> {
        let dest = ObjectUpload::new(self.location(suffix), &self.upload)?;
        Writer::create_on(Box::new(dest), opts)
    }

    fn put(&self, suffix: &str, bytes: &[u8], _sync: bool) -> Result<()> {
        // One PUT: the object appears whole or not at all.
        self.loc
            .runtime
            .block_on(
                self.store()
                    .put(&self.key(suffix), PutPayload::from(bytes.to_vec())),
            )
            .map(drop)
            .map_err(|e| remote_error(&self.shown(suffix), e))
    }

    fn delete(&self, suffix: &str) -> Result<bool> {
        match self
            .loc
            .runtime
            .block_on(self.store().delete(&self.key(suffix)))
        {
            Ok(()) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(remote_error(&self.shown(suffix), e)),
        }
    }

    fn bring_in(&self, from: &dyn Place, from_suffix: &str, to_suffix: &str) -> Result<Brought> {
        let other = from.as_any().downcast_ref::<BucketPlace>();
        let Some(from) = other.filter(|f| f.bucket == self.bucket) else {
            return Err(Error::Unsupported(format!(
                "{}: an incremental save in a bucket reuses a checkpoint of the same bucket \
                 (copied there by the store), not {}; save the whole checkpoint",
                self.shown(to_suffix),
                from.shown(from_suffix)
            )));
        };
        // CopyObject: the store copies the bytes, none pass through this process.
        self.loc
            .runtime
            .block_on(
                self.store()
                    .copy(&from.key(from_suffix), &self.key(to_suffix)),
            )
            .map_err(|e| remote_error(&from.shown(from_suffix), e))?;
        Ok(Brought::ServerCopied)
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}
