//! The sharded-checkpoint functions of the crate root, which take a path or a URL: a path goes
//! to the native engine's directory implementation (`native::sharded`), a URL (`s3://`,
//! `file://`) to the bucket's (`sharded_write`, the `s3` feature). Here, not in `native/`,
//! because the engine is the layer below object storage and must not know it; the one place
//! where a prefix is told to be a URL, so that callers (the CLI, the Python package) never
//! branch on it.

use std::path::Path;

use super::url_of;
use crate::error::Result;
use crate::native::{
    MergeShardsOptions, MergeShardsReport, SaveId, ShardFile, ShardWriter, WriterOptions,
};

/// Commits a sharded save at `prefix` (SPEC.md 12.3): reads the index of each of its shards
/// (never their records), checks them (every shard present, of one save, each readable alone;
/// no tensor in two shards; the slices of a tensor of one dtype and shape, inside it, not
/// overlapping, and covering it unless [`MergeShardsOptions::partial`] allows otherwise) and
/// writes `PREFIX.index`, so that a crash at any point leaves the previous checkpoint or
/// nothing, never a partial one.
///
/// `prefix` is a path prefix (`dir/ckpt`: the shards `PREFIX.data-k-of-N.pending` are renamed
/// to their final names in the order SPEC.md 12.3 gives, the index renamed in last) or a URL,
/// `s3://bucket/dir/PREFIX` (the shards are objects under their final names, their footers and
/// indexes read by ranged GETs, the index PUT last: SPEC.md 12.6; the report's paths are URLs).
///
/// Errors: [`Error::Shard`](crate::Error::Shard) for a missing shard, a shard of another save
/// or several saves at once, disagreeing shard counts or a shard number out of range;
/// [`Error::Slices`](crate::Error::Slices) for tensors whose pieces do not fit together, naming
/// the tensor and the files; [`Error::Corrupt`](crate::Error::Corrupt) for a shard whose index
/// is damaged; [`Error::Remote`](crate::Error::Remote) for a failed request;
/// [`Error::NoObjectStorage`](crate::Error::NoObjectStorage) for a URL in a build without the
/// `s3` feature. Nothing is changed at the prefix when an error is reported before the commit
/// starts.
pub fn merge_shards(
    prefix: impl AsRef<Path>,
    opts: &MergeShardsOptions<'_>,
) -> Result<MergeShardsReport> {
    let prefix = prefix.as_ref();
    match url_of(prefix) {
        #[cfg(feature = "s3")]
        Some(url) => super::sharded_write::merge_shards_url(url, opts),
        #[cfg(not(feature = "s3"))]
        Some(url) => Err(super::not_built(url)),
        None => crate::native::merge_shards(prefix, opts),
    }
}

/// The files of a sharded checkpoint at `prefix` (a path prefix or an `s3://` URL, as for
/// [`merge_shards`](crate::merge_shards)), and those a save that did not finish left there: pending and orphan
/// shards, temporary files (a directory's only), an incremental save's references and reused
/// objects. Reads each shard's header (its index, not its records; by ranged GETs in a
/// bucket, where paths are URLs). Data files of a TensorFlow checkpoint at the prefix are not
/// listed.
pub fn shard_files(prefix: impl AsRef<Path>) -> Result<Vec<ShardFile>> {
    let prefix = prefix.as_ref();
    match url_of(prefix) {
        #[cfg(feature = "s3")]
        Some(url) => super::sharded_write::shard_files_url(url),
        #[cfg(not(feature = "s3"))]
        Some(url) => Err(super::not_built(url)),
        None => crate::native::shard_files(prefix),
    }
}

/// Removes what [`shard_files`](crate::shard_files) reports as left behind at `prefix` (a path prefix or an `s3://`
/// URL), never the committed checkpoint's files, and returns them. Run it only when no save at
/// that prefix is in progress: the shards of a running save are left behind too until its
/// merge.
pub fn clean_shards(prefix: impl AsRef<Path>) -> Result<Vec<ShardFile>> {
    let prefix = prefix.as_ref();
    match url_of(prefix) {
        #[cfg(feature = "s3")]
        Some(url) => super::sharded_write::clean_shards_url(url),
        #[cfg(not(feature = "s3"))]
        Some(url) => Err(super::not_built(url)),
        None => crate::native::clean_shards(prefix),
    }
}

/// Starts shard `shard_id` of `num_shards` of the save `save_id` of the sharded checkpoint at
/// `prefix`, a path prefix or a URL (`s3://bucket/dir/PREFIX`): in a directory as
/// [`ShardWriter::create`] (under its pending name, renamed by the merge), in a bucket
/// uploaded under its final name while it is written (SPEC.md 12.6; by multipart upload with
/// the default `remote::UploadOptions`). With `base`, the shard is part of an incremental save
/// (SPEC.md 12.5) over the sharded checkpoint at that prefix: a local one for a local save
/// ([`ShardWriter::with_base`]), one in the same bucket for a bucket's (its data objects copied
/// by the store).
///
/// Errors: as those constructors; [`Error::Unsupported`](crate::Error::Unsupported) for a base
/// in another place than the save (a local base of a bucket's save, or the reverse);
/// [`Error::NoObjectStorage`](crate::Error::NoObjectStorage) for a URL in a build without the
/// `s3` feature.
pub fn create_shard_writer(
    prefix: impl AsRef<Path>,
    shard_id: u32,
    num_shards: u32,
    save_id: SaveId,
    opts: WriterOptions,
    base: Option<&Path>,
) -> Result<ShardWriter> {
    let prefix = prefix.as_ref();
    let base_url = base.map(|b| (b, url_of(b)));
    match url_of(prefix) {
        #[cfg(feature = "s3")]
        Some(url) => {
            let upload = super::UploadOptions::default();
            let mut w = super::sharded_write::create_at_url(
                url, shard_id, num_shards, save_id, opts, &upload,
            )?;
            match base_url {
                Some((_, Some(b))) => {
                    let b = super::open_sharded(b, super::RemoteOptions::default())?;
                    w = w.with_base(std::sync::Arc::new(b))?;
                }
                Some((b, None)) => return Err(other_place(url, b)),
                None => {}
            }
            Ok(w)
        }
        #[cfg(not(feature = "s3"))]
        Some(url) => Err(super::not_built(url)),
        None => {
            let w = ShardWriter::create(prefix, shard_id, num_shards, save_id, opts)?;
            match base_url {
                Some((b, None)) => {
                    w.with_base(std::sync::Arc::new(crate::native::Reader::open(b)?))
                }
                Some((b, Some(_))) => Err(other_place(&prefix.display().to_string(), b)),
                None => Ok(w),
            }
        }
    }
}

/// The error of an incremental save whose base is in another place than the save.
fn other_place(prefix: &str, base: &Path) -> crate::Error {
    crate::Error::Unsupported(format!(
        "{prefix}: an incremental save reuses a checkpoint of the same place (a local prefix for \
         a local save, one in the same bucket for a bucket's), not {}; save the whole checkpoint",
        base.display()
    ))
}
