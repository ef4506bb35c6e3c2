//! Writing a sharded checkpoint (SPEC.md 12): [`ShardWriter`] writes one data file of a save
//! (a complete native file carrying the save's identity), [`ShardedSave`] hands out the shard
//! writers of one save to threads of a process and merges them.
//!
//! A shard is written under a temporary name and renamed, complete, to its pending name
//! `PREFIX.data-k-of-N.pending`; it gets its final name only when [`merge_shards`](crate::merge_shards) commits the
//! save, so an existing checkpoint at the prefix is never disturbed by a save in progress.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::native::backend::WriteDestination;
use crate::native::header::{SaveId, ShardOf};
use crate::native::reader::Reader;
use crate::native::region::Region;
use crate::native::sharded::merge::{merge_shards, MergeShardsOptions, MergeShardsReport};
use crate::native::sharded::place::{pending_suffix, DirPlace, Place};
use crate::native::sharded::reuse::{Reuse, ReuseBase, ReuseStats, SliceAt};
use crate::native::staging;
use crate::native::writer::{FinishStats, Tensor, Writer, WriterOptions};
use crate::native::MAX_SHARDS;

/// The writer of one shard of a sharded save: a [`Writer`] (every method of which it offers,
/// through `Deref`) whose file is shard `shard_id` of `num_shards` of the save `save_id`, at
/// `PREFIX.data-k-of-N.pending` once [`ShardWriter::finish`] returns.
///
/// Each process (or thread) of a save writes its own shard, with the save id the coordinator
/// chose ([`SaveId::random`]) passed to it; when every shard is finished, one of them runs
/// [`merge_shards`](crate::merge_shards). A shard may hold whole tensors and slices of tensors that other shards hold
/// the rest of ([`Writer::add_slice`]).
///
/// ```
/// # let dir = tempfile::tempdir().unwrap();
/// # let prefix = dir.path().join("ckpt");
/// use paramdex::{merge_shards, DType, MergeShardsOptions, Reader, Region, SaveId, ShardWriter};
/// let save = SaveId::random();
/// for rank in 0..2u32 {
///     // Each rank holds one row of a [2, 3] tensor, and a tensor of its own.
///     let mut w = ShardWriter::create(&prefix, rank, 2, save, Default::default())?;
///     let row = Region::new(vec![u64::from(rank), 0], vec![1, 3]).unwrap();
///     w.add_slice("emb", DType::UInt8, &[2, 3], &row, &[rank as u8; 3])?;
///     w.add_values(format!("rank{rank}.step"), &[], &[7i64])?;
///     w.finish()?;
/// }
/// merge_shards(&prefix, &MergeShardsOptions::default())?;
/// let r = Reader::open(&prefix)?;
/// let emb = r.get_slice("emb", &Region::full(&[2, 3]))?.unwrap();
/// assert_eq!(emb.data(), &[0, 0, 0, 1, 1, 1]);
/// # Ok::<(), paramdex::Error>(())
/// ```
#[derive(Debug)]
pub struct ShardWriter {
    writer: Writer,
    shard: ShardOf,
    /// Where the checkpoint's files are (`None` for a shard written through a destination of
    /// its own, [`ShardWriter::create_on`]).
    place: Option<Arc<dyn Place>>,
    pending: PathBuf,
    /// For an incremental save: the earlier checkpoint and what this shard reuses of it.
    reuse: Option<Reuse>,
    sync: bool,
}

/// What [`ShardWriter::add_or_reuse`] did with a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Saved {
    /// Its bytes were written to the shard.
    Written,
    /// The earlier checkpoint holds it byte-identical: the shard refers to it there.
    Reused,
}

impl ShardWriter {
    /// Starts shard `shard_id` of `num_shards` of the save `save_id` of the checkpoint at
    /// `prefix`. Errors if `shard_id` is not below `num_shards` or `num_shards` is not 1 to
    /// [`MAX_SHARDS`], and as [`Writer::create_with`].
    pub fn create(
        prefix: impl AsRef<Path>,
        shard_id: u32,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
    ) -> Result<ShardWriter> {
        let prefix = prefix.as_ref();
        // What writers of this checkpoint that were killed left (their temporary files, up to
        // a whole shard each); live writers' files are locked and stay. Best effort: a
        // directory that cannot be listed fails the create below, which says so.
        if let Some(stem) = prefix.file_name().and_then(|n| n.to_str()) {
            let _ = staging::remove_abandoned(&staging::parent_dir(prefix), &format!("{stem}."));
        }
        let place = DirPlace::new(prefix);
        Self::create_in(
            Arc::new(place),
            &pending_suffix(shard_id, num_shards),
            shard_id,
            num_shards,
            save_id,
            opts,
        )
    }

    /// Starts shard `shard_id` of `num_shards` of the save `save_id` of the checkpoint whose
    /// files are at `place`, written as `PREFIX<suffix>` (its pending name in a directory, its
    /// final name in a bucket: SPEC.md 12.6). Errors as [`ShardWriter::create`].
    pub(crate) fn create_in(
        place: Arc<dyn Place>,
        suffix: &str,
        shard_id: u32,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
    ) -> Result<ShardWriter> {
        let open = |o| Ok((place.writer(suffix, o)?, place.path_of(suffix)));
        Self::start(
            shard_id,
            num_shards,
            save_id,
            opts,
            Some(place.clone()),
            open,
        )
    }

    /// The shard writer of shard `shard_id` of `num_shards` of the save `save_id`, over the
    /// writer `open` starts with `opts` (and the name its file is shown by).
    fn start(
        shard_id: u32,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
        place: Option<Arc<dyn Place>>,
        open: impl FnOnce(WriterOptions) -> Result<(Writer, PathBuf)>,
    ) -> Result<ShardWriter> {
        check_shard_number(shard_id, num_shards)?;
        let sync = opts.sync;
        let (mut writer, pending) = open(opts)?;
        let shard = ShardOf {
            save_id,
            shard_id,
            num_shards,
        };
        writer.set_shard_of(shard)?;
        Ok(ShardWriter {
            writer,
            shard,
            place,
            pending,
            reuse: None,
            sync,
        })
    }

    /// Starts shard `shard_id` of `num_shards` of the save `save_id` written through `dest`
    /// (an object uploaded while the shard is written, under its final name
    /// `PREFIX.data-k-of-N`: object storage has no rename; SPEC.md 12.6), which it commits in
    /// [`ShardWriter::finish`]. Such a shard, which knows no place of its checkpoint, cannot be
    /// part of an incremental save ([`ShardWriter::with_base`] refuses it; a shard written into
    /// a bucket by [`crate::create_shard_writer`] can). Errors as [`ShardWriter::create`].
    pub fn create_on(
        dest: Box<dyn WriteDestination>,
        shard_id: u32,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
    ) -> Result<ShardWriter> {
        let name = PathBuf::from(dest.name());
        let open = |o| Ok((Writer::create_on(dest, o)?, name));
        Self::start(shard_id, num_shards, save_id, opts, None, open)
    }

    /// Makes this shard part of an incremental save (SPEC.md 12.5) whose base is the earlier
    /// sharded checkpoint `base` (opened by its prefix): tensors it holds unchanged are reused
    /// with [`ShardWriter::add_or_reuse`] or [`ShardWriter::reuse_unchanged`] instead of
    /// written. The first tensor reused from one of the base's data files links that file into
    /// this checkpoint's directory (a copy where the file system cannot link), so that
    /// deleting the base afterwards never breaks the new checkpoint.
    ///
    /// Errors when `base` is not a sharded checkpoint opened by its prefix.
    ///
    /// Errors with [`Error::Unsupported`] for a shard written through a destination of its own
    /// ([`ShardWriter::create_on`]); for a shard written into a bucket, for a base at the save's
    /// own prefix (a bucket's shards are written under their final names, replacing the data
    /// objects the save reuses while others are still copied: save each step at its own
    /// prefix), and (at the first reuse) for a base that is not in the same bucket (a bucket's
    /// incremental save reuses a checkpoint there, read by ranges: `remote::open_sharded`).
    pub fn with_base(mut self, base: Arc<Reader>) -> Result<ShardWriter> {
        let Some(place) = self.place.clone() else {
            return Err(Error::Unsupported(format!(
                "{}: an incremental save through a destination that knows no place of its \
                 checkpoint (ShardWriter::create_on): its reused data files have nowhere to go; \
                 save the whole checkpoint",
                self.pending.display()
            )));
        };
        // In a directory a shard waits under its pending name, and the merge renames it once
        // the reused files are linked in: a base at the same prefix is fine there.
        let in_place = !place.as_any().is::<DirPlace>();
        if in_place && base.place().is_ok_and(|b| b.shown("") == place.shown("")) {
            return Err(Error::Unsupported(format!(
                "{}: an incremental save in a bucket at its base's own prefix (its shards would \
                 replace the data objects it reuses); save it at a prefix of its own",
                place.shown("")
            )));
        }
        self.reuse = Some(Reuse::new(base, place)?);
        Ok(self)
    }

    /// Adds `tensor` under `name`, unless the base (see [`ShardWriter::with_base`]) holds it
    /// byte-identical ([`Reader::holds_unchanged`]: the same dtype, shape and LoD, the same
    /// size and CRC32C, confirmed by comparing the bytes), in which case the shard refers to
    /// it there and writes nothing. Without a base, it is [`Writer::add`].
    ///
    /// Errors as [`Writer::add`], and with [`Error::DuplicateName`] when this shard holds
    /// `name` already, written or reused.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let (old, new) = (dir.path().join("step1"), dir.path().join("step2"));
    /// use std::sync::Arc;
    /// use paramdex::{DType, Reader, Saved, ShardedSave, Tensor};
    /// let save = ShardedSave::new(&old, 1)?;
    /// let mut w = save.shard(0)?;
    /// w.add("frozen", Tensor::new(DType::UInt8, &[4], &[1, 2, 3, 4]))?;
    /// w.add("trained", Tensor::new(DType::UInt8, &[4], &[5, 6, 7, 8]))?;
    /// w.finish()?;
    /// save.merge(&Default::default())?;
    ///
    /// let base = Arc::new(Reader::open(&old)?);
    /// let save = ShardedSave::new(&new, 1)?.with_base(base);
    /// let mut w = save.shard(0)?;
    /// let frozen = Tensor::new(DType::UInt8, &[4], &[1, 2, 3, 4]);
    /// assert_eq!(w.add_or_reuse("frozen", frozen)?, Saved::Reused);
    /// let trained = Tensor::new(DType::UInt8, &[4], &[5, 6, 7, 9]);
    /// assert_eq!(w.add_or_reuse("trained", trained)?, Saved::Written);
    /// w.finish()?;
    /// save.merge(&Default::default())?;
    ///
    /// // The old checkpoint can go: the new one holds links to the data files it reuses.
    /// for f in std::fs::read_dir(dir.path()).unwrap() {
    ///     let f = f.unwrap().path();
    ///     if f.file_name().unwrap().to_string_lossy().starts_with("step1") {
    ///         std::fs::remove_file(f).unwrap();
    ///     }
    /// }
    /// let r = Reader::open(&new)?;
    /// assert_eq!(r.get("frozen")?.unwrap().data(), &[1, 2, 3, 4]);
    /// assert_eq!(r.get("trained")?.unwrap().data(), &[5, 6, 7, 9]);
    /// # Ok::<(), paramdex::Error>(())
    /// ```
    pub fn add_or_reuse(&mut self, name: impl AsRef<[u8]>, tensor: Tensor<'_>) -> Result<Saved> {
        let name = name.as_ref();
        if let Some(reuse) = &mut self.reuse {
            // A name this shard refers to already (whole, or slices of it): refused now, as a
            // second `add` would be (written, it would only make `finish` fail).
            if reuse.holds(name) || reuse.slices_of(name).is_some() {
                return Err(Error::DuplicateName {
                    name: crate::name::display(name),
                });
            }
            if !self.writer.holds(name)? && reuse.base().holds_unchanged(name, tensor)? {
                reuse.refer(name)?;
                return Ok(Saved::Reused);
            }
        }
        self.writer.add(name, tensor)?;
        Ok(Saved::Written)
    }

    /// Refers to the base's tensor `name` without comparing anything: the caller's word that
    /// the tensor is unchanged since the base was saved (a frozen layer, say). The base must
    /// hold it whole. Costs an index lookup, no byte of the tensor is read.
    ///
    /// Errors: no base ([`Error::InvalidArgument`]); the base does not hold `name`
    /// ([`Error::NotFound`]) or holds it in slices ([`Error::Sliced`]); this shard holds it
    /// already ([`Error::DuplicateName`]); the base's data file is missing or not the one its
    /// index records ([`Error::Shard`]).
    pub fn reuse_unchanged(&mut self, name: impl AsRef<[u8]>) -> Result<()> {
        let name = name.as_ref();
        if self.reuse.is_none() {
            return Err(self.no_base(name));
        }
        let reuse = self.reuse.as_mut().expect("checked above");
        if self.writer.holds(name)? {
            return Err(Error::DuplicateName {
                name: crate::name::display(name),
            });
        }
        reuse.refer(name)
    }

    /// Adds the slice `region` of the tensor `name` (of `dtype` and shape `full_shape`; see
    /// [`Writer::add_slice`]), unless the base stores that very slice (a stored slice with the
    /// same start and lengths) byte-identical ([`Reader::holds_unchanged_slice`]), in which case
    /// the shard refers to it there. A tensor-parallel rank saving the same part of a tensor
    /// as in the base reuses it so. Without a base, it is [`Writer::add_slice`].
    ///
    /// A region that is the whole tensor is a whole tensor, as in [`Writer::add_slice`]:
    /// [`ShardWriter::add_or_reuse`].
    pub fn add_slice_or_reuse(
        &mut self,
        name: impl AsRef<[u8]>,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
        data: &[u8],
    ) -> Result<Saved> {
        let name = name.as_ref();
        if region.is_full(full_shape) {
            return self.add_or_reuse(name, Tensor::new(dtype, full_shape, data));
        }
        if let Some(reuse) = &self.reuse {
            if reuse.holds(name)
                || reuse
                    .slices_of(name)
                    .is_some_and(|r| r.regions.iter().any(|x| x.overlaps(region)))
            {
                return Err(Error::InvalidTensor {
                    name: crate::name::display(name),
                    detail: format!(
                        "slice at {:?} of lengths {:?} overlaps what this shard reuses of it",
                        region.start, region.len
                    ),
                });
            }
            if self.slice_is_free(name, dtype, full_shape, region)?
                && reuse.base().holds_unchanged_slice(
                    SliceAt {
                        name,
                        dtype,
                        full_shape,
                        region,
                    },
                    data,
                )?
            {
                self.reuse_unchanged_slice(name, dtype, full_shape, region)?;
                return Ok(Saved::Reused);
            }
        }
        self.writer
            .add_slice(name, dtype, full_shape, region, data)?;
        Ok(Saved::Written)
    }

    /// Refers to the base's stored slice `region` of `name` without comparing anything: the
    /// caller's word that it is unchanged. The base must store `name` in slices of `dtype`
    /// and `full_shape`, one of them exactly `region`.
    ///
    /// Errors: no base ([`Error::InvalidArgument`]); the base has no such slice
    /// ([`Error::NotFound`]); the region overlaps a slice this shard holds or reused already,
    /// or `name` is whole in this shard ([`Error::InvalidTensor`], [`Error::DuplicateName`]).
    pub fn reuse_unchanged_slice(
        &mut self,
        name: impl AsRef<[u8]>,
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<()> {
        let name = name.as_ref();
        if self.reuse.is_none() {
            return Err(self.no_base(name));
        }
        if !self.slice_is_free(name, dtype, full_shape, region)? {
            return Err(match self.writer.slices_of(name) {
                None => Error::DuplicateName {
                    name: crate::name::display(name),
                },
                Some(_) => Error::InvalidTensor {
                    name: crate::name::display(name),
                    detail: format!(
                        "slice at {:?} of lengths {:?} of {dtype} {full_shape:?} overlaps a \
                         slice this shard holds, or disagrees with its dtype or shape",
                        region.start, region.len
                    ),
                },
            });
        }
        self.reuse
            .as_mut()
            .expect("checked above")
            .refer_slice(name, dtype, full_shape, region)
    }

    /// Whether this shard's writer leaves room for a reused slice `region` of `name`: it does
    /// not hold `name` whole, and its own slices of `name` (if any) agree on dtype and shape
    /// and do not overlap `region`.
    fn slice_is_free(
        &self,
        name: &[u8],
        dtype: DType,
        full_shape: &[u64],
        region: &Region,
    ) -> Result<bool> {
        Ok(match self.writer.slices_of(name) {
            Some((d, shape, regions)) => {
                d == dtype && shape == full_shape && !regions.iter().any(|r| r.overlaps(region))
            }
            None => !self.writer.holds(name)?,
        })
    }

    fn no_base(&self, name: &[u8]) -> Error {
        Error::InvalidArgument(format!(
            "{}: reusing {} needs a base checkpoint (ShardWriter::with_base)",
            self.pending.display(),
            crate::name::display(name)
        ))
    }

    /// What this shard reuses so far.
    pub fn reused(&self) -> ReuseStats {
        self.reuse
            .as_ref()
            .map(|r| r.stats.clone())
            .unwrap_or_default()
    }

    /// Which shard of which save this is.
    pub fn shard(&self) -> ShardOf {
        self.shard
    }

    /// Where the shard appears when finished: `PREFIX.data-k-of-N.pending`.
    pub fn pending_path(&self) -> &Path {
        &self.pending
    }

    /// Finishes the shard's file (index, footer, fsync) and renames it to its pending name.
    /// The checkpoint exists only once [`merge_shards`](crate::merge_shards) has committed every shard.
    ///
    /// A shard that reuses tensors writes its references file (`PREFIX.refs-k-of-N.pending`)
    /// first; its header counts them, so the merge never takes the shard without them.
    pub fn finish(mut self) -> Result<FinishStats> {
        if let Some(reuse) = &self.reuse {
            if reuse.len() > 0 {
                // A tensor added (whole, or in slices) after it was reused whole; or added whole
                // after slices of it were reused; or in slices overlapping reused ones.
                for name in reuse.names() {
                    let clash = match (reuse.slices_of(name), self.writer.slices_of(name)) {
                        (Some(r), Some((d, shape, own))) => {
                            d != r.dtype
                                || shape != r.full_shape.as_slice()
                                || own.iter().any(|o| r.regions.iter().any(|x| x.overlaps(o)))
                        }
                        _ => self.writer.holds(name)?,
                    };
                    if clash {
                        return Err(Error::DuplicateName {
                            name: crate::name::display(name),
                        });
                    }
                }
                self.writer.set_references(reuse.len());
                reuse.write_file(self.shard, self.sync)?;
            }
        }
        self.writer.finish()
    }
}

/// Refuses a shard number not below the number of shards, or a number of shards not 1 to
/// [`MAX_SHARDS`].
pub(crate) fn check_shard_number(shard_id: u32, num_shards: u32) -> Result<()> {
    if num_shards == 0 || num_shards > MAX_SHARDS || shard_id >= num_shards {
        return Err(Error::InvalidArgument(format!(
            "shard {shard_id} of {num_shards}: the shard number must be below the number of \
             shards, which is 1 to {MAX_SHARDS}"
        )));
    }
    Ok(())
}

impl Deref for ShardWriter {
    type Target = Writer;
    fn deref(&self) -> &Writer {
        &self.writer
    }
}

impl DerefMut for ShardWriter {
    fn deref_mut(&mut self) -> &mut Writer {
        &mut self.writer
    }
}

/// One sharded save, shared by the threads of a process: its prefix, number of shards, save id
/// and writer options. [`ShardedSave::shard`] hands out shard writers (from any thread: it takes
/// `&self`), and [`ShardedSave::merge`] commits the save once every shard is finished. Processes
/// create their [`ShardWriter`]s themselves with the save id of the coordinator's
/// `ShardedSave` ([`ShardedSave::save_id`]).
#[derive(Clone, Debug)]
pub struct ShardedSave {
    prefix: PathBuf,
    num_shards: u32,
    save_id: SaveId,
    opts: WriterOptions,
    base: Option<Arc<Reader>>,
}

impl ShardedSave {
    /// A new save of `num_shards` shards at `prefix`, with a fresh random save id and default
    /// writer options.
    pub fn new(prefix: impl AsRef<Path>, num_shards: u32) -> Result<ShardedSave> {
        Self::with_options(
            prefix,
            num_shards,
            SaveId::random(),
            WriterOptions::default(),
        )
    }

    /// A save with a given id (the one another process chose) and writer options.
    pub fn with_options(
        prefix: impl AsRef<Path>,
        num_shards: u32,
        save_id: SaveId,
        opts: WriterOptions,
    ) -> Result<ShardedSave> {
        if num_shards == 0 || num_shards > MAX_SHARDS {
            return Err(Error::InvalidArgument(format!(
                "{num_shards} shards: a save has 1 to {MAX_SHARDS}"
            )));
        }
        Ok(ShardedSave {
            prefix: prefix.as_ref().to_path_buf(),
            num_shards,
            save_id,
            opts,
            base: None,
        })
    }

    /// Makes this an incremental save whose shards reuse unchanged tensors of `base`, an
    /// earlier sharded checkpoint (see [`ShardWriter::with_base`]).
    pub fn with_base(mut self, base: Arc<Reader>) -> ShardedSave {
        self.base = Some(base);
        self
    }

    /// The save's id, to pass to the processes that write its shards.
    pub fn save_id(&self) -> SaveId {
        self.save_id
    }

    /// The number of shards.
    pub fn num_shards(&self) -> u32 {
        self.num_shards
    }

    /// The checkpoint's prefix.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The writer of shard `k`.
    pub fn shard(&self, k: u32) -> Result<ShardWriter> {
        let w = ShardWriter::create(
            &self.prefix,
            k,
            self.num_shards,
            self.save_id,
            self.opts.clone(),
        )?;
        match &self.base {
            Some(base) => w.with_base(base.clone()),
            None => Ok(w),
        }
    }

    /// Commits the save: [`merge_shards`](crate::merge_shards) of exactly this save's shards (its id and number of
    /// shards replace those of `opts`).
    pub fn merge(&self, opts: &MergeShardsOptions<'_>) -> Result<MergeShardsReport> {
        let opts = MergeShardsOptions {
            save_id: Some(self.save_id),
            num_shards: Some(self.num_shards),
            ..opts.clone()
        };
        merge_shards(&self.prefix, &opts)
    }
}
