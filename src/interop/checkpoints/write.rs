//! What one save writes, on the caller's thread or the background writer's: [`Dir::run`]
//! sweeps what earlier saves left, writes the checkpoint by one of the four write paths (a
//! single file in a directory or uploaded to an object store, a sharded save in either, each
//! shard on its own thread, incremental ones reusing the latest checkpoint's tensors), then
//! points the state file at it and prunes. Its own file because the write paths are apart
//! from the capture (`background.rs`) and from listing and pruning (`mod.rs`).

use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::native::{
    data_path, index_path, staging, MergeShardsOptions, Metadata, Reader, SaveId, ShardWriter,
    ShardedSave, Tensor, Writer,
};

use super::{Dir, Layout};

impl Dir {
    /// Writes, commits, points the state file at `step`, prunes. Before writing, removes what
    /// earlier saves that did not finish left (see [`Dir::sweep`]); after a failure, what this
    /// one left.
    pub(super) fn run(
        &self,
        step: u64,
        tensors: &[(&[u8], Tensor<'_>)],
        metadata: Metadata,
    ) -> Result<()> {
        let prefix = self.prefix(step);
        // Held until this save is done: another process's manager sweeping the directory
        // waits for it instead of removing its files.
        let _saving = self.at.lock_saves();
        // Best effort: a leftover that cannot be removed does not stop the save (the next
        // save, or `open`, tries again).
        let _ = self.sweep(step);
        let written = match self.opts.layout {
            #[cfg(feature = "s3")]
            Layout::Single if self.at.is_object() => {
                self.write_single_object(step, tensors, metadata)
            }
            Layout::Single => self.write_single(&prefix, tensors, metadata),
            Layout::Sharded {
                shards,
                incremental,
            } => self.write_sharded(&prefix, shards, incremental, tensors, metadata),
        };
        if let Err(e) = written {
            // Its files go too, unless it was committed after all.
            let _ = self.sweep(step);
            return Err(e);
        }
        self.point_to(step)?;
        if !self.opts.keep.is_empty() {
            self.prune(&self.opts.keep, false)?;
        }
        Ok(())
    }

    fn write_single(
        &self,
        prefix: &Path,
        tensors: &[(&[u8], Tensor<'_>)],
        metadata: Metadata,
    ) -> Result<()> {
        let data = data_path(prefix, 0, 1);
        let index = index_path(prefix);
        let mut w = Writer::create_with(&data, self.opts.writer.clone())?;
        w.set_metadata(metadata)?;
        for (name, t) in tensors {
            w.add(name, *t)?;
        }
        w.finish()?;
        // The index is the same file: it appears, complete, in one rename (of a link, or of a
        // copy where the file system cannot link).
        match staging::stage_link(&data, &index, ".tmp") {
            Ok(staged) => staging::commit([(staged, index.as_path())])?,
            Err(_) => {
                let name = |p: &Path| p.file_name().and_then(|n| n.to_str()).map(str::to_string);
                match (name(&data), name(&index)) {
                    (Some(d), Some(i)) => self.at.copy_object(&d, &i)?,
                    _ => {
                        return Err(Error::InvalidArgument(format!(
                            "{}: not a file name",
                            prefix.display()
                        )))
                    }
                }
            }
        }
        if self.opts.writer.sync {
            staging::sync_parent(&index)?;
        }
        Ok(())
    }

    /// A single file in an object store: the native file uploaded as
    /// `PREFIX.data-00000-of-00001` (multipart, appearing whole at the end), then copied by the
    /// store to `PREFIX.index` (the checkpoint exists from then on).
    #[cfg(feature = "s3")]
    fn write_single_object(
        &self,
        step: u64,
        tensors: &[(&[u8], Tensor<'_>)],
        metadata: Metadata,
    ) -> Result<()> {
        let stem = self.stem(step);
        let data = format!("{stem}{}", crate::place::data_suffix(0, 1));
        let url = self.at.child(&data);
        let mut w = crate::remote::create_writer(&url.to_string_lossy(), self.opts.writer.clone())?;
        w.set_metadata(metadata)?;
        for (name, t) in tensors {
            w.add(name, *t)?;
        }
        w.finish()?;
        self.at.copy_object(&data, &format!("{stem}.index"))
    }

    fn write_sharded(
        &self,
        prefix: &Path,
        shards: u32,
        incremental: bool,
        tensors: &[(&[u8], Tensor<'_>)],
        metadata: Metadata,
    ) -> Result<()> {
        // The base: the latest checkpoint, when it is a sharded paramdex one. It stays
        // protected from pruning until the save is committed.
        let mut base = None;
        if incremental {
            let _dir = self
                .shared
                .dir_lock
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if let Ok(latest) = self.list_with(false).and_then(|all| self.latest_of(all)) {
                if let Some(b) = self.open_base(&latest.prefix) {
                    *self.shared.lock().bases.entry(latest.step).or_default() += 1;
                    base = Some((latest.step, b));
                }
            }
        }
        let base_step = base.as_ref().map(|(step, _)| *step);
        let r = self.write_shards_of(prefix, shards, base.map(|(_, b)| b), tensors, metadata);
        if let Some(b) = base_step {
            let mut g = self.shared.lock();
            if let Some(n) = g.bases.get_mut(&b) {
                *n -= 1;
                if *n == 0 {
                    g.bases.remove(&b);
                }
            }
        }
        r
    }

    /// The sharded checkpoint at `prefix`, as the base of an incremental save: `None` when it
    /// is not a sharded paramdex checkpoint (or cannot be opened: the save is then whole).
    fn open_base(&self, prefix: &Path) -> Option<Base> {
        #[cfg(feature = "s3")]
        if self.at.is_object() {
            let url = prefix.to_string_lossy();
            return crate::remote::open_sharded(&url, Default::default())
                .ok()
                .map(|r| Base::Remote(Arc::new(r)));
        }
        Reader::open(index_path(prefix))
            .ok()
            .filter(Reader::is_sharded)
            .map(|r| Base::Local(Arc::new(r)))
    }

    /// Writes the shards of a save at `prefix` (reusing `base`'s tensors when given), each on
    /// its own thread, and merges them: in a directory, or in an object store (where the
    /// checkpoint exists once the merge's PUT of `PREFIX.index` succeeds).
    fn write_shards_of(
        &self,
        prefix: &Path,
        shards: u32,
        base: Option<Base>,
        tensors: &[(&[u8], Tensor<'_>)],
        metadata: Metadata,
    ) -> Result<()> {
        let reuse = base.is_some();
        // In an object store: each shard uploaded under its final name by a shard writer
        // in the bucket (reusing `base`'s tensors, its data objects copied by the store),
        // then merge_shards_url, which PUTs `PREFIX.index` last.
        #[cfg(feature = "s3")]
        if self.at.is_object() {
            let url = prefix.to_string_lossy().into_owned();
            let save = SaveId::random();
            let base = match base {
                Some(Base::Remote(r)) => Some(r),
                Some(Base::Local(_)) | None => None,
            };
            let open = |k: u32| -> Result<ShardWriter> {
                let w = crate::remote::create_shard_writer(
                    &url,
                    k,
                    shards,
                    save,
                    self.opts.writer.clone(),
                    None,
                )?;
                match &base {
                    Some(b) => w.with_base(b.clone()),
                    None => Ok(w),
                }
            };
            write_shards(&open, shards, reuse, tensors)?;
            let opts = MergeShardsOptions {
                metadata,
                save_id: Some(save),
                ..Default::default()
            };
            return crate::remote::merge_shards_url(&url, &opts).map(drop);
        }
        let mut save =
            ShardedSave::with_options(prefix, shards, SaveId::random(), self.opts.writer.clone())?;
        if let Some(Base::Local(r)) = base {
            save = save.with_base(r);
        }
        let open = |k: u32| save.shard(k);
        write_shards(&open, shards, reuse, tensors)?;
        let opts = MergeShardsOptions {
            metadata,
            no_sync: !self.opts.writer.sync,
            ..Default::default()
        };
        save.merge(&opts).map(drop)
    }
}

/// The base of an incremental save: a mapped sharded checkpoint, or one in the bucket.
enum Base {
    Local(Arc<Reader>),
    #[cfg(feature = "s3")]
    Remote(Arc<Reader>),
}

/// Writes `shards` shards, each opened by `open` and written on its own thread, tensors dealt
/// (largest first) to the least-filled one.
fn write_shards(
    open: &(dyn Fn(u32) -> Result<ShardWriter> + Sync),
    shards: u32,
    reuse: bool,
    tensors: &[(&[u8], Tensor<'_>)],
) -> Result<()> {
    let n = shards as usize;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(tensors[i].1.data.len()));
    let mut fill = vec![0usize; n];
    let mut dealt: Vec<Vec<usize>> = vec![Vec::new(); n];
    for i in order {
        let k = (0..n).min_by_key(|&k| fill[k]).unwrap_or(0);
        fill[k] += tensors[i].1.data.len();
        dealt[k].push(i);
    }
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = dealt
            .iter()
            .enumerate()
            .map(|(k, idx)| {
                s.spawn(move || -> Result<()> {
                    let mut w = open(k as u32)?;
                    for &i in idx {
                        let (name, t) = tensors[i];
                        if reuse {
                            w.add_or_reuse(name, t)?;
                        } else {
                            w.add(name, t)?;
                        }
                    }
                    w.finish().map(drop)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(Error::Io {
                        context: "writing a shard".into(),
                        source: std::io::Error::other("the shard writer thread panicked"),
                    })
                })
            })
            .collect()
    });
    results.into_iter().collect()
}
