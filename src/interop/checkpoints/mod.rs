//! A training job's checkpoint directory: [`CheckpointManager`] saves step-numbered checkpoints
//! (`DIR/ckpt-STEP`, TensorFlow's naming), keeps TensorFlow's `checkpoint` state file pointing at
//! the latest, prunes by a [`KeepPolicy`], restores any step, and saves in the background
//! ([`CheckpointManager::save_async`]), in a local directory or an object store's
//! (`s3://bucket/dir`, through `location.rs`). docs/checkpoints.md has the guarantees.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::dtype::DType;
use crate::error::{CheckpointProblem, Error, Result};
use crate::interop::store::TensorStore;
use crate::native::{
    index_path, parse_suffix, staging, Metadata, Reader, Sibling, Tensor, WriterOptions,
};

#[cfg(test)]
mod crash_points;
pub(crate) mod location;
mod policy;
mod resolve;
mod run;
mod state;
mod write;

use location::{Listed, Location};

pub use policy::{BestBy, Candidate, KeepPolicy};
pub(crate) use resolve::{resolve_input, resolve_url_input};
pub use run::{
    list_run, run_step_of, RunCheckpoint, RunCheckpointKind, RunListing, DCP_METADATA_KEY,
    DCP_PREFIX, TORCH_DCP_METADATA,
};
pub use state::{CheckpointState, MAX_STATE_BYTES, MAX_STATE_ENTRIES, STATE_FILE};

/// How each checkpoint is laid out on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One native file, `PREFIX.data-00000-of-00001`, with `PREFIX.index` a hard link to it (a
    /// copy where the file system cannot link; in an object store, a server-side copy of the
    /// object): a TensorFlow checkpoint and a native file.
    Single,
    /// A sharded checkpoint (SPEC.md 12) of this many data files, written by as many threads.
    Sharded {
        /// Number of data files (1 to [`crate::MAX_SHARDS`]).
        shards: u32,
        /// Each save reuses the tensors the previous checkpoint (when it is a sharded paramdex
        /// checkpoint) holds byte-identical, linking its data files instead of writing them
        /// again (SPEC.md 12.5); in an object store, the store copies them (12.6).
        incremental: bool,
    },
}

/// Options of a [`CheckpointManager`].
#[derive(Clone, Debug)]
pub struct ManagerOptions {
    /// The checkpoints' name before `-STEP` (`ckpt`, as TensorFlow's `CheckpointManager`).
    pub name: String,
    /// Single file or sharded.
    pub layout: Layout,
    /// Applied after every save (an empty policy keeps every checkpoint).
    pub keep: KeepPolicy,
    /// Most background saves captured but not yet committed; [`CheckpointManager::save_async`]
    /// blocks while that many are (at least 1).
    pub max_in_flight: usize,
    /// How the files are written (`sync: false` skips fsyncs: tests only).
    pub writer: WriterOptions,
    /// Create the directory if it is missing (the default: a training job's first save).
    /// Without it, a missing local directory is an I/O error of kind `NotFound` naming it, as
    /// a program that only lists or restores wants (a bucket prefix exists once it holds an
    /// object, so there is nothing to check there).
    pub create: bool,
}

impl Default for ManagerOptions {
    fn default() -> Self {
        ManagerOptions {
            name: "ckpt".into(),
            layout: Layout::Single,
            keep: KeepPolicy::default(),
            max_in_flight: 1,
            writer: WriterOptions::default(),
            create: true,
        }
    }
}

/// One checkpoint of a directory.
#[derive(Clone, Debug)]
pub struct CheckpointInfo {
    /// Its step (the number after the last `-` of its name).
    pub step: u64,
    /// Its prefix (`DIR/ckpt-STEP`; for an object-store directory, the URL
    /// `s3://bucket/dir/ckpt-STEP`).
    pub prefix: PathBuf,
    /// When it was saved, seconds since the Unix epoch: from the state file, else the index
    /// file's (or object's) modification time.
    pub timestamp: Option<f64>,
    /// Bytes of its files (a file linked under two of its names counted once).
    pub bytes: u64,
    /// Its metadata, when it is a paramdex checkpoint (`None` for one TensorFlow wrote).
    pub metadata: Option<Metadata>,
    /// Whether it is the latest: the one the state file names, or one committed after the
    /// state file was last written (a save killed between its commit and the pointer's
    /// update; see [`CheckpointManager::latest`]).
    pub latest: bool,
}

/// A tensor handed over by ownership to [`CheckpointManager::save_async_owned`].
#[derive(Clone, Debug)]
pub struct OwnedTensor {
    /// Its name.
    pub name: Vec<u8>,
    /// Element type.
    pub dtype: DType,
    /// Dimensions.
    pub shape: Vec<u64>,
    /// Paddle LoD levels (usually none).
    pub lod: Vec<Vec<u64>>,
    /// Little-endian, row-major element bytes.
    pub data: Vec<u8>,
}

impl OwnedTensor {
    /// A tensor without LoD.
    pub fn new(name: impl Into<Vec<u8>>, dtype: DType, shape: Vec<u64>, data: Vec<u8>) -> Self {
        OwnedTensor {
            name: name.into(),
            dtype,
            shape,
            lod: Vec::new(),
            data,
        }
    }

    /// A bytes value (SPEC.md 6.1: arbitrary bytes under a name, beside the tensors; what
    /// [`Writer::add_bytes`] writes), encoded as a tensor of dtype [`DType::Bytes`] holds it.
    /// A [`Tensor`] of such a value's fields is one too, for [`CheckpointManager::save`].
    ///
    /// [`Writer::add_bytes`]: crate::native::Writer::add_bytes
    pub fn bytes_value(name: impl Into<Vec<u8>>, value: &[u8]) -> Self {
        let data = crate::native::bytes_value::encode(value);
        OwnedTensor {
            name: name.into(),
            dtype: DType::Bytes,
            shape: vec![data.len() as u64],
            lod: Vec::new(),
            data,
        }
    }

    fn tensor(&self) -> Tensor<'_> {
        Tensor::new(self.dtype, &self.shape, &self.data).with_lod(&self.lod)
    }
}

/// What a background save cost the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AsyncSaveReport {
    /// Time spent waiting for a slot (too many saves in flight).
    pub blocked: Duration,
    /// Time spent copying the tensors (zero when they were handed over).
    pub captured: Duration,
    /// Bytes of tensor data captured.
    pub bytes: u64,
}

/// What a prune deleted (or, in a dry run, would delete).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneReport {
    /// Steps deleted.
    pub deleted: Vec<u64>,
    /// Steps kept.
    pub kept: Vec<u64>,
    /// Bytes of the deleted checkpoints' files (files still linked elsewhere included).
    pub bytes: u64,
}

/// State shared with the background writer.
#[derive(Default)]
struct Inner {
    /// Steps captured and not yet committed or failed.
    in_flight: BTreeSet<u64>,
    /// Steps an incremental save in progress reads from.
    bases: BTreeMap<u64, usize>,
    /// Failures not yet reported, oldest first.
    errors: VecDeque<Error>,
    /// Buffers of finished copied saves, for the next ones.
    pool: Vec<Vec<u8>>,
}

struct Shared {
    inner: Mutex<Inner>,
    changed: Condvar,
    /// Held while the state file is read, changed and written, and while pruning.
    dir_lock: Mutex<()>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain data: still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The directory's configuration, shared by the caller and the background writer.
struct Dir {
    /// The directory as named (a URL for an object store).
    dir: PathBuf,
    at: Location,
    opts: ManagerOptions,
    shared: Shared,
}

/// Saves, lists, prunes and restores the step-numbered checkpoints of a directory, with
/// TensorFlow's `checkpoint` state file as the pointer to the latest (so
/// `tf.train.latest_checkpoint(DIR)` and `tf.train.CheckpointManager` find them, and this finds
/// theirs). The directory is a local path or an object store's: `s3://bucket/dir` (the objects
/// `dir/NAME`; see [`CheckpointManager::open`]).
///
/// ```
/// use paramdex::interop::{CheckpointManager, KeepPolicy, ManagerOptions};
/// use paramdex::{DType, Metadata, Tensor};
/// # fn main() -> paramdex::Result<()> {
/// # let dir = tempfile::tempdir().unwrap();
/// let opts = ManagerOptions {
///     keep: KeepPolicy { last: Some(2), ..Default::default() },
///     ..Default::default()
/// };
/// let mut m = CheckpointManager::open(dir.path(), opts)?;
/// for step in [100, 200, 300] {
///     let w = [step as f32; 4];
///     let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
///     m.save_async(step, [("w", Tensor::new(DType::Float32, &[4], &bytes))], Metadata::new())?;
/// }
/// m.wait()?;
/// assert_eq!(m.steps()?, [200, 300]);
/// let store = m.restore(m.latest()?.step)?;
/// assert_eq!(store.load(b"w")?.unwrap().info.shape, [4]);
/// # Ok(()) }
/// ```
pub struct CheckpointManager {
    d: Arc<Dir>,
    worker: Option<(mpsc::Sender<Job>, std::thread::JoinHandle<()>)>,
    blocked_total: Duration,
}

impl std::fmt::Debug for CheckpointManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointManager")
            .field("dir", &self.d.dir)
            .field("opts", &self.d.opts)
            .finish()
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Whether a staged file's target name (`t`) is one a manager of checkpoints `name` writes:
/// a file of `name-STEP`, or the state file.
fn ours(t: &[u8], name: &str) -> bool {
    t == STATE_FILE.as_bytes()
        || t.strip_prefix(name.as_bytes())
            .and_then(|r| r.strip_prefix(b"-"))
            .is_some_and(|r| r.first().is_some_and(u8::is_ascii_digit))
}

/// The step and kind of a file `NAME-STEP.<suffix>` of a checkpoint of `name`
/// ([`parse_suffix`]: index, data file, pending shard, references file, reused link).
fn sibling_of(file: &str, name: &str) -> Option<(u64, Sibling)> {
    let rest = file.strip_prefix(name)?.strip_prefix('-')?;
    let digits = rest.find(|c: char| !c.is_ascii_digit())?;
    let step = rest[..digits].parse().ok()?;
    Some((step, parse_suffix(&rest.as_bytes()[digits..])?))
}

/// The step of a checkpoint name `NAME-STEP` (the digits after the last `-`).
pub fn step_of(name: &str) -> Option<u64> {
    let (_, digits) = name.rsplit_once('-')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

impl CheckpointManager {
    /// Manages `dir` (created if missing). Reads nothing yet: a damaged state file is reported
    /// by the calls that read it.
    ///
    /// `dir` may be an object-store URL, `s3://bucket/dir` (with the `s3` feature, else
    /// [`Error::NoObjectStorage`]; resolved by `paramdex::remote::resolve`: the `AWS_*`
    /// environment and the S3 settings in force; no request is made here): checkpoints are
    /// written straight into the bucket, each object appearing whole (a single file is
    /// uploaded as `ckpt-STEP.data-00000-of-00001`, then copied by the store to
    /// `ckpt-STEP.index`; a sharded one is uploaded shard by shard, its index PUT last), and
    /// the state object is PUT after the checkpoint is complete.
    /// An incremental [`Layout::Sharded`] there reuses the latest checkpoint's data objects by
    /// server-side copy (SPEC.md 12.5, 12.6). `file:///dir` is the local directory `/dir`.
    pub fn open(dir: impl AsRef<Path>, opts: ManagerOptions) -> Result<CheckpointManager> {
        let dir = dir.as_ref().to_path_buf();
        if opts.name.is_empty() || opts.name.contains(['/', '\\']) || opts.name == STATE_FILE {
            return Err(Error::InvalidArgument(format!(
                "checkpoint name {:?}: a file name, not empty, not {STATE_FILE:?}",
                opts.name
            )));
        }
        if let Layout::Sharded { shards, .. } = opts.layout {
            if shards == 0 || shards > crate::native::MAX_SHARDS {
                return Err(Error::InvalidArgument(format!(
                    "{shards} shards: a save has 1 to {}",
                    crate::native::MAX_SHARDS
                )));
            }
        }
        let at = Location::new(&dir)?;
        if opts.create {
            at.create()?;
        } else {
            at.must_exist()?;
        }
        // What saves of a process that was killed left behind: each a whole checkpoint's
        // worth of disk that nothing else would remove (a staged index link, once its step is
        // pruned, the only name left of that step's data).
        at.remove_abandoned(&|t| ours(t, &opts.name))?;
        let m = CheckpointManager {
            d: Arc::new(Dir {
                dir: at.display_path(),
                at,
                opts,
                shared: Shared {
                    inner: Mutex::new(Inner::default()),
                    changed: Condvar::new(),
                    dir_lock: Mutex::new(()),
                },
            }),
            worker: None,
            blocked_total: Duration::ZERO,
        };
        // Best effort, as a reader may open a directory it cannot write.
        let _ = m.d.sweep_at_open();
        Ok(m)
    }

    /// The directory (for an object store, its URL without a trailing `/`).
    pub fn dir(&self) -> &Path {
        &self.d.dir
    }

    /// The options.
    pub fn options(&self) -> &ManagerOptions {
        &self.d.opts
    }

    /// The prefix of step `step`: `DIR/NAME-STEP`.
    pub fn prefix(&self, step: u64) -> PathBuf {
        self.d.prefix(step)
    }

    /// Every checkpoint of the directory, by step: those the state file lists (any name ending
    /// in `-STEP`, as TensorFlow's savers name them) and those named `NAME-STEP` found beside it
    /// (a save committed just before a crash, before the pointer was updated). A checkpoint
    /// exists when its `.index` file does.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>> {
        self.surface()?;
        self.d.list()
    }

    /// The steps of [`CheckpointManager::list`], ascending.
    pub fn steps(&self) -> Result<Vec<u64>> {
        self.surface()?;
        Ok(self
            .d
            .list_with(false)?
            .into_iter()
            .map(|c| c.step)
            .collect())
    }

    /// The latest checkpoint: the newest committed one. That is the one the state file names,
    /// unless a checkpoint was committed (its `.index` in place) after the state file was last
    /// written: a save killed between its commit and the pointer's update, whose step exists
    /// and is the latest (the newest such, when several). With no state file, or one naming a
    /// checkpoint that is gone, the highest step. A job resuming from here never saves a step
    /// that exists.
    pub fn latest(&self) -> Result<CheckpointInfo> {
        self.surface()?;
        // Only the latest one's index is opened (for its metadata).
        let mut c = self.d.latest_of(self.d.list_with(false)?)?;
        c.metadata = self.d.read_metadata(&c.prefix);
        Ok(c)
    }

    /// Opens the checkpoint of `step` (any format paramdex reads: a TensorFlow checkpoint in the
    /// directory opens too). Checks only what opening checks; call `verify` for the rest.
    pub fn restore(&self, step: u64) -> Result<Box<dyn TensorStore>> {
        self.surface()?;
        let info = self
            .d
            .list_with(false)?
            .into_iter()
            .find(|c| c.step == step)
            .ok_or_else(|| self.d.problem(CheckpointProblem::NoSuchStep, step))?;
        open_checkpoint(&info.prefix, self.d.at.is_object())
    }

    /// Opens the latest checkpoint (as [`CheckpointManager::latest`] chooses it) and says its
    /// step: what a job resuming after a crash calls.
    pub fn restore_latest(&self) -> Result<(u64, Box<dyn TensorStore>)> {
        self.surface()?;
        let c = self.d.latest_of(self.d.list_with(false)?)?;
        Ok((c.step, open_checkpoint(&c.prefix, self.d.at.is_object())?))
    }

    /// The checkpoint of `step`, or [`CheckpointProblem::NoSuchStep`].
    pub fn find(&self, step: u64) -> Result<CheckpointInfo> {
        self.surface()?;
        let mut c = self
            .d
            .list_with(false)?
            .into_iter()
            .find(|c| c.step == step)
            .ok_or_else(|| self.d.problem(CheckpointProblem::NoSuchStep, step))?;
        c.metadata = self.d.read_metadata(&c.prefix);
        Ok(c)
    }

    /// Saves `tensors` as step `step` on this thread, after every background save finished,
    /// then points the state file at it and applies the keep policy. Errors if `step` exists.
    pub fn save<'t, N: AsRef<[u8]>>(
        &mut self,
        step: u64,
        tensors: impl IntoIterator<Item = (N, Tensor<'t>)>,
        metadata: Metadata,
    ) -> Result<()> {
        self.wait()?;
        self.d.claim(step)?;
        let list: Vec<(N, Tensor<'t>)> = tensors.into_iter().collect();
        let refs: Vec<(&[u8], Tensor<'_>)> = list.iter().map(|(n, t)| (n.as_ref(), *t)).collect();
        let r = self.d.run(step, &refs, metadata);
        self.d.release(step);
        r
    }

    /// Waits for every background save, then returns the first failure not yet reported, if
    /// any (call again for the next).
    pub fn wait(&mut self) -> Result<()> {
        let sh = &self.d.shared;
        let mut g = sh.lock();
        while !g.in_flight.is_empty() {
            g = sh.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        drop(g);
        self.surface()
    }

    /// How many background saves are captured and not yet committed (or failed): never more
    /// than [`ManagerOptions::max_in_flight`].
    pub fn in_flight(&self) -> usize {
        self.d.shared.lock().in_flight.len()
    }

    /// Total time [`CheckpointManager::save_async`] calls spent blocked waiting for a slot.
    pub fn blocked_total(&self) -> Duration {
        self.blocked_total
    }

    /// Applies `policy` (never deleting the latest, a step being written, or the base of an
    /// incremental save in progress): updates the state file, then deletes each pruned
    /// checkpoint's index (so it no longer exists) and its data files. `dry_run` changes
    /// nothing and says what would go.
    pub fn prune(&self, policy: &KeepPolicy, dry_run: bool) -> Result<PruneReport> {
        self.surface()?;
        self.d.prune(policy, dry_run)
    }

    /// The oldest unreported background failure, as [`Error::BackgroundSave`].
    fn surface(&self) -> Result<()> {
        match self.d.shared.lock().errors.pop_front() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for CheckpointManager {
    /// Waits for the background saves (their errors, unless reported by [`wait`], are lost
    /// with the manager: call `wait` before dropping it).
    ///
    /// [`wait`]: CheckpointManager::wait
    fn drop(&mut self) {
        if let Some((tx, h)) = self.worker.take() {
            drop(tx);
            let _ = h.join();
        }
    }
}

impl Dir {
    fn prefix(&self, step: u64) -> PathBuf {
        self.at.child(&self.stem(step))
    }

    /// `NAME-STEP`, the prefix's last part.
    fn stem(&self, step: u64) -> String {
        format!("{}-{step}", self.opts.name)
    }

    fn problem(&self, problem: CheckpointProblem, step: u64) -> Error {
        let detail = match problem {
            CheckpointProblem::Empty => "no checkpoint".to_string(),
            CheckpointProblem::NoSuchStep => format!("no checkpoint of step {step}"),
            CheckpointProblem::StepExists => {
                format!("step {step} is saved already or being saved")
            }
            _ => format!("step {step}"),
        };
        Error::Checkpoint {
            dir: self.dir.display().to_string(),
            problem,
            detail,
        }
    }

    /// Marks `step` in flight; errors if it is, or exists.
    fn claim(&self, step: u64) -> Result<()> {
        let mut g = self.shared.lock();
        if g.in_flight.contains(&step) {
            return Err(Error::Checkpoint {
                dir: self.dir.display().to_string(),
                problem: CheckpointProblem::StepExists,
                detail: format!(
                    "step {step} is being saved (an earlier save of it is still in flight); \
                     wait() for it, or save another step"
                ),
            });
        }
        // Claimed before the (possibly remote) check, which runs without the lock.
        g.in_flight.insert(step);
        drop(g);
        let index = format!("{}.index", self.stem(step));
        match self.at.exists(&index) {
            Ok(false) => Ok(()),
            Ok(true) => {
                self.release(step);
                Err(Error::Checkpoint {
                    dir: self.dir.display().to_string(),
                    problem: CheckpointProblem::StepExists,
                    detail: format!(
                        "step {step} is saved already: its index {} is in place, so it is \
                         committed (latest() and restore_latest() report it, or a later \
                         step); a job resuming from latest() saves later steps. Save another \
                         step, or prune this one first",
                        self.at.child(&index).display()
                    ),
                })
            }
            Err(e) => {
                self.release(step);
                Err(e)
            }
        }
    }

    fn release(&self, step: u64) {
        self.shared.lock().in_flight.remove(&step);
        self.shared.changed.notify_all();
    }

    /// Every checkpoint, by step, with metadata.
    fn list(&self) -> Result<Vec<CheckpointInfo>> {
        self.list_with(true)
    }

    /// Every checkpoint, by step; each one's metadata read (its index opened) when asked.
    fn list_with(&self, with_metadata: bool) -> Result<Vec<CheckpointInfo>> {
        let mut all = self.list_from(self.at.read_state()?, with_metadata)?;
        all.sort_by_key(|c| c.step);
        Ok(all)
    }

    /// Every checkpoint `state` lists, and those found beside it, in the order they were saved
    /// (oldest first; see [`in_save_order`]).
    fn list_from(
        &self,
        state: Option<CheckpointState>,
        with_metadata: bool,
    ) -> Result<Vec<CheckpointInfo>> {
        // The directory is read once: which checkpoints exist (their `.index`), the ones named
        // NAME-STEP, and the files of each.
        let listed = self.at.list()?;
        let names: BTreeSet<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        let mut found: BTreeMap<u64, (String, Option<f64>)> = BTreeMap::new();
        // Where each step stands in the state file's list, which is in the order of saving.
        let mut saved_at: BTreeMap<u64, usize> = BTreeMap::new();
        let mut latest_stem = None;
        if let Some(st) = &state {
            for (i, p) in st.all_model_checkpoint_paths.iter().enumerate() {
                if let Some((step, stem)) = resolve_stem(p, &names) {
                    let ts = st.all_model_checkpoint_timestamps.get(i).copied();
                    found.insert(step, (stem, ts));
                    saved_at.insert(step, i);
                }
            }
            if let Some((step, stem)) = resolve_stem(&st.model_checkpoint_path, &names) {
                found.entry(step).or_insert((stem.clone(), None));
                latest_stem = Some(stem);
            }
        }
        let found_in_state: BTreeSet<u64> = found.keys().copied().collect();
        for l in &listed {
            let Some(stem) = l.name.strip_suffix(".index") else {
                continue;
            };
            let step = stem
                .strip_prefix(self.opts.name.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok());
            if let Some(step) = step {
                found
                    .entry(step)
                    .or_insert_with(|| (stem.to_string(), None));
            }
        }
        if state.is_some() {
            if let Some(stem) = self.committed_since_state(&listed, &found, &found_in_state) {
                latest_stem = Some(stem);
            }
        }
        let mut out = Vec::with_capacity(found.len());
        for (step, (stem, ts)) in found {
            let index_name = format!("{stem}.index");
            let Some(index) = listed.iter().find(|l| l.name == index_name) else {
                continue;
            };
            let prefix = self.at.child(&stem);
            let metadata = if with_metadata {
                self.read_metadata(&prefix)
            } else {
                None
            };
            out.push(CheckpointInfo {
                step,
                bytes: files_of(&stem, &listed).iter().map(|l| l.len).sum(),
                latest: latest_stem.as_ref() == Some(&stem),
                timestamp: ts.or(index.modified),
                prefix,
                metadata,
            });
        }
        Ok(in_save_order(out, &saved_at))
    }

    /// The newest checkpoint of `found` committed after the state file was last written: one
    /// the state file does not list (`in_state`) whose index changed (was linked or renamed
    /// into place) no earlier than the state file. The manager rewrites the state file,
    /// listing every checkpoint, after each save and prune, so such a checkpoint is a save
    /// whose pointer update did not happen (a crash, a failed write): newer than everything
    /// the state file names. A checkpoint the state file does not list that is older than it
    /// (one copied in, one a TensorFlow saver's state file never listed) is not the latest.
    fn committed_since_state(
        &self,
        listed: &[Listed],
        found: &BTreeMap<u64, (String, Option<f64>)>,
        in_state: &BTreeSet<u64>,
    ) -> Option<String> {
        let changed: BTreeMap<&str, f64> = listed
            .iter()
            .filter_map(|l| Some((l.name.as_str(), l.changed?)))
            .collect();
        let state_at = *changed.get(STATE_FILE)?;
        found
            .iter()
            .filter(|(step, _)| !in_state.contains(step))
            .filter_map(|(step, (stem, _))| {
                let at = *changed.get(format!("{stem}.index").as_str())?;
                (at >= state_at).then_some((at, *step, stem))
            })
            .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, _, stem)| stem.clone())
    }

    /// Removes what saves that did not finish left in a local directory (an object store has
    /// no such files: an unfinished upload is never an object), run by each save before it
    /// writes, under the directory's save lock:
    ///
    /// - abandoned temporary files (unlocked: of no live writer) of the checkpoints and of
    ///   the state file, as `open` does;
    /// - the files of a step that does not exist (no `NAME-STEP.index`): data files (a
    ///   single file committed before its index was linked, shards renamed before the index),
    ///   pending shards, references files, reused data files' links;
    /// - the pending shards, references files and reused links of a step that exists (a
    ///   crash after its commit).
    ///
    /// `current`: the step this save writes (before it starts, or after it failed). The other
    /// steps claimed by this manager are spared: they wait for this save (saves run one at a
    /// time), so any file of theirs is an earlier save's, which their own save sweeps.
    fn sweep(&self, current: u64) -> Result<()> {
        let busy: BTreeSet<u64> = {
            let g = self.shared.lock();
            g.in_flight
                .iter()
                .copied()
                .filter(|s| *s != current)
                .collect()
        };
        self.sweep_where(&|step, _| !busy.contains(&step))
    }

    /// What `open` removes besides the abandoned temporaries, when no save holds the
    /// directory's lock: the leftovers ([`Dir::sweep`]) of the steps up to the newest
    /// committed one (what a prune or a save of an earlier step that died left). Those of a
    /// later step are left to the next save: opening is also what readers do, and a later
    /// step may be a save in progress by a writer that takes no lock (a TensorFlow saver
    /// renames its data files into place before its index).
    fn sweep_at_open(&self) -> Result<()> {
        let Some(_lock) = self.at.try_lock_saves() else {
            return Ok(());
        };
        self.sweep_where(&|step, newest| newest.is_some_and(|n| step <= n))
    }

    /// [`Dir::sweep`] of the steps `take(step, newest committed step)` accepts.
    fn sweep_where(&self, take: &dyn Fn(u64, Option<u64>) -> bool) -> Result<()> {
        let Some(d) = self.at.local() else {
            return Ok(());
        };
        let name = self.opts.name.as_str();
        self.at.remove_abandoned(&|t| ours(t, name))?;
        let listed = self.at.list()?;
        let names: BTreeSet<&str> = listed.iter().map(|l| l.name.as_str()).collect();
        let newest = listed
            .iter()
            .filter_map(|l| match sibling_of(&l.name, name) {
                Some((step, Sibling::Index)) => Some(step),
                _ => None,
            })
            .max();
        let mut removed = false;
        for l in &listed {
            let Some((step, sibling)) = sibling_of(&l.name, name) else {
                continue;
            };
            if !take(step, newest) {
                continue;
            }
            let committed = names.contains(format!("{}.index", self.stem(step)).as_str());
            let leftover = match sibling {
                Sibling::Index => false,
                Sibling::Data { pending, .. } => pending || !committed,
                Sibling::Refs { .. } | Sibling::Reused(_) => true,
            };
            if leftover {
                self.at.remove(&l.name, false)?;
                removed = true;
            }
        }
        if removed && self.opts.writer.sync {
            staging::sync_dir(d)?;
        }
        Ok(())
    }

    /// The metadata of the paramdex checkpoint at `prefix` (`None` for one TensorFlow wrote, or
    /// one that does not open).
    fn read_metadata(&self, prefix: &Path) -> Option<Metadata> {
        match &self.at {
            Location::Local(_) => Reader::open(index_path(prefix))
                .ok()
                .map(|r| r.header().metadata.clone()),
            #[cfg(feature = "s3")]
            Location::Object(_) => {
                let store = open_checkpoint(prefix, true).ok()?;
                (store.format() == crate::interop::store::Format::Native)
                    .then(|| store.metadata().ok())
                    .flatten()
            }
        }
    }

    /// The checkpoint of `all` (in any order) the state file names as the latest, else the
    /// highest step.
    fn latest_of(&self, all: Vec<CheckpointInfo>) -> Result<CheckpointInfo> {
        let named = all.iter().position(|c| c.latest);
        let highest = all
            .iter()
            .enumerate()
            .max_by_key(|(_, c)| c.step)
            .map(|(i, _)| i);
        match named.or(highest) {
            Some(i) => Ok(all.into_iter().nth(i).unwrap_or_else(|| unreachable!())),
            None => Err(self.problem(CheckpointProblem::Empty, 0)),
        }
    }

    /// Points the state file at `step` (which exists), listing every checkpoint.
    fn point_to(&self, step: u64) -> Result<()> {
        let _dir = self
            .shared
            .dir_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let old = self.at.read_state().ok().flatten().unwrap_or_default();
        let mut all = self.list_lenient()?;
        let latest = self.prefix(step);
        let i = all.iter().position(|c| c.prefix == latest);
        let mut entry = match i {
            Some(i) => all.remove(i),
            None => return Err(self.problem(CheckpointProblem::NoSuchStep, step)),
        };
        entry.timestamp = Some(now());
        all.push(entry);
        self.write_state(&all, old.last_preserved_timestamp)
    }

    /// `list` without metadata, with a damaged state file read as none (the caller replaces
    /// it).
    fn list_lenient(&self) -> Result<Vec<CheckpointInfo>> {
        // The damaged file stays until the new one replaces it (one rename).
        match self.at.read_state() {
            Err(Error::Checkpoint {
                problem: CheckpointProblem::StateFile,
                ..
            })
            | Err(Error::LimitExceeded { .. }) => self.list_from(None, false),
            Err(e) => Err(e),
            Ok(st) => self.list_from(st, false),
        }
    }

    /// Writes the state file: `all` in order, the last one the latest.
    fn write_state(&self, all: &[CheckpointInfo], last_preserved: f64) -> Result<()> {
        let rel = |c: &CheckpointInfo| -> String {
            match c.prefix.strip_prefix(&self.dir) {
                Ok(r) => r.to_string_lossy().into_owned(),
                Err(_) => c.prefix.to_string_lossy().into_owned(),
            }
        };
        let st = CheckpointState {
            model_checkpoint_path: all.last().map(rel).unwrap_or_default(),
            all_model_checkpoint_paths: all.iter().map(rel).collect(),
            all_model_checkpoint_timestamps: all
                .iter()
                .map(|c| c.timestamp.unwrap_or(0.0))
                .collect(),
            last_preserved_timestamp: last_preserved,
        };
        self.at.write_state(&st)
    }

    fn prune(&self, policy: &KeepPolicy, dry_run: bool) -> Result<PruneReport> {
        let _dir = self
            .shared
            .dir_lock
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // In the order of saving: `KeepPolicy::last` keeps the most recent saves.
        let all = self.list_from(self.at.read_state()?, true)?;
        if all.is_empty() {
            return Ok(PruneReport::default());
        }
        let latest = self.latest_of(all.clone())?;
        let candidates: Vec<Candidate<'_>> = all
            .iter()
            .map(|c| Candidate {
                step: c.step,
                timestamp: c.timestamp,
                metadata: c.metadata.as_ref(),
            })
            .collect();
        let mut keep = policy.keep(&candidates);
        keep.insert(latest.step);
        {
            let g = self.shared.lock();
            keep.extend(g.in_flight.iter().copied());
            keep.extend(g.bases.keys().copied());
        }
        let (kept, gone): (Vec<CheckpointInfo>, Vec<CheckpointInfo>) =
            all.into_iter().partition(|c| keep.contains(&c.step));
        let report = PruneReport {
            deleted: gone.iter().map(|c| c.step).collect(),
            kept: kept.iter().map(|c| c.step).collect(),
            bytes: gone.iter().map(|c| c.bytes).sum(),
        };
        if dry_run || gone.is_empty() {
            return Ok(report);
        }
        // Each pruned checkpoint's index first (from then on it does not exist; a state file
        // still listing it is read without it), then the pointer (the latest last, as it was),
        // then the data files. A crash in between leaves data files of steps that do not
        // exist, which the next save removes, and never a checkpoint that exists but that the
        // state file no longer lists (which would read as committed after it: the latest).
        let listed = self.at.list()?;
        let sync = self.opts.writer.sync;
        let stems: Vec<&str> = gone
            .iter()
            .filter_map(|c| c.prefix.file_name().and_then(|n| n.to_str()))
            .collect();
        for stem in &stems {
            self.at.remove(&format!("{stem}.index"), false)?;
        }
        if let (Some(d), true) = (self.at.local(), sync) {
            staging::sync_dir(d)?;
        }
        let old = self.at.read_state().ok().flatten().unwrap_or_default();
        let mut order: Vec<CheckpointInfo> =
            kept.into_iter().filter(|c| c.step != latest.step).collect();
        order.push(latest);
        self.write_state(&order, old.last_preserved_timestamp)?;
        for stem in &stems {
            for l in files_of(stem, &listed) {
                self.at.remove(&l.name, false)?;
            }
        }
        if let (Some(d), true) = (self.at.local(), sync) {
            staging::sync_dir(d)?;
        }
        Ok(report)
    }
}

/// Opens the checkpoint at `prefix`: a native one (single file or sharded), else a TensorFlow
/// one (the two kinds a checkpoint directory holds; the format openers directly, as `open_any`
/// sits above this module). `object`: `prefix` is an `s3://` URL, opened by its `.index`
/// through the format registry, as any URL.
fn open_checkpoint(prefix: &Path, object: bool) -> Result<Box<dyn TensorStore>> {
    let index = index_path(prefix);
    if object {
        return crate::interop::registry::dispatch(&index.to_string_lossy());
    }
    if let Some(s) = crate::interop::native::open_native(&index)? {
        return Ok(s);
    }
    match crate::interop::tf::open_store(&index)? {
        Some(s) => Ok(s),
        None => Err(Error::UnrecognizedFormat {
            path: index.display().to_string(),
            looks_like: None,
            detail: "neither a paramdex nor a TensorFlow checkpoint".into(),
        }),
    }
}

/// `all` (by step) in the order the checkpoints were saved, oldest first: those the state file
/// lists in its order (`saved_at`: each step's position there; TensorFlow's savers append each
/// save to the list, and a save that reuses a step moves it last), and each checkpoint it does
/// not list (committed just before a crash, before the pointer moved) after the last one saved
/// no later than it, by timestamp (first when it has none). The order is what "the most recent
/// saves" means: after a job resumed from an earlier step, its new saves are more recent than
/// the higher steps it abandoned.
fn in_save_order(all: Vec<CheckpointInfo>, saved_at: &BTreeMap<u64, usize>) -> Vec<CheckpointInfo> {
    let (mut listed, mut unlisted): (Vec<CheckpointInfo>, Vec<CheckpointInfo>) = all
        .into_iter()
        .partition(|c| saved_at.contains_key(&c.step));
    listed.sort_by_key(|c| saved_at.get(&c.step).copied());
    unlisted.sort_by(|a, b| {
        let ts = |c: &CheckpointInfo| c.timestamp.filter(|t| t.is_finite());
        match (ts(a), ts(b)) {
            (Some(x), Some(y)) => x.total_cmp(&y),
            (x, y) => x.is_some().cmp(&y.is_some()),
        }
        .then(a.step.cmp(&b.step))
    });
    let mut out = listed;
    for c in unlisted {
        let at = match c.timestamp.filter(|t| t.is_finite()) {
            Some(t) => out
                .iter()
                .rposition(|o| o.timestamp.is_some_and(|x| x <= t))
                .map_or(0, |i| i + 1),
            None => 0,
        };
        out.insert(at, c);
    }
    out
}

/// The step and stem (`NAME-STEP`) of a path from the state file, when its checkpoint's
/// `.index` is among `names`. Only checkpoints in the directory itself are managed (pruning
/// deletes them): a path is looked up by its last part in the directory, so an absolute path
/// from before the directory moved is found (as TensorFlow finds it), and a hostile state file
/// cannot name files elsewhere (`../x-1`, `/etc/x-1`) for pruning to delete.
fn resolve_stem(p: &str, names: &BTreeSet<&str>) -> Option<(u64, String)> {
    let name = p.rsplit(['/', '\\']).next()?;
    let step = step_of(name)?;
    names
        .contains(format!("{name}.index").as_str())
        .then(|| (step, name.to_string()))
}

/// The files of the checkpoint `stem` (`STEM.index`, `STEM.data-*`) among `listed`, a file
/// linked under two of these names listed once.
fn files_of<'a>(stem: &str, listed: &'a [Listed]) -> Vec<&'a Listed> {
    let data = format!("{stem}.data-");
    let index = format!("{stem}.index");
    let mut seen = BTreeSet::new();
    listed
        .iter()
        .filter(|l| l.name == index || l.name.starts_with(&data))
        .filter(|l| l.id.is_none_or(|id| seen.insert(id)))
        .collect()
}

// Background saves: `save_async` captures the tensors (one copy into a pooled buffer, or
// tensors handed over by `save_async_owned`), waits for a slot among the saves in flight, and
// hands the save to the writer thread, which writes them one at a time in the order they were
// captured and reports failures to the next call.

/// The captured tensors of a background save.
enum Captured {
    Owned(Vec<OwnedTensor>),
    /// One buffer holding every tensor's bytes; the buffer goes back to the pool after.
    Copied {
        buf: Vec<u8>,
        items: Vec<CopiedItem>,
    },
}

struct CopiedItem {
    name: Vec<u8>,
    dtype: DType,
    shape: Vec<u64>,
    lod: Vec<Vec<u64>>,
    range: std::ops::Range<usize>,
}

impl Captured {
    fn tensors(&self) -> Vec<(&[u8], Tensor<'_>)> {
        match self {
            Captured::Owned(v) => v.iter().map(|t| (&t.name[..], t.tensor())).collect(),
            Captured::Copied { buf, items } => items
                .iter()
                .map(|i| {
                    let t = Tensor::new(i.dtype, &i.shape, &buf[i.range.clone()]).with_lod(&i.lod);
                    (&i.name[..], t)
                })
                .collect(),
        }
    }
}

pub(super) struct Job {
    step: u64,
    tensors: Captured,
    metadata: Metadata,
}

impl CheckpointManager {
    /// Copies `tensors` into buffers of the manager (reused from save to save) and returns; a
    /// background thread writes them as step `step`, commits, points the state file at it and
    /// applies the keep policy. Blocks while [`ManagerOptions::max_in_flight`] saves are in
    /// flight. An earlier background save's error is returned here instead (this save is then
    /// not started), as [`Error::BackgroundSave`].
    ///
    /// [`ManagerOptions::max_in_flight`]: super::ManagerOptions::max_in_flight
    pub fn save_async<'t, N: AsRef<[u8]>>(
        &mut self,
        step: u64,
        tensors: impl IntoIterator<Item = (N, Tensor<'t>)>,
        metadata: Metadata,
    ) -> Result<AsyncSaveReport> {
        let blocked = self.wait_for_slot(step)?;
        let t0 = Instant::now();
        let list: Vec<(N, Tensor<'t>)> = tensors.into_iter().collect();
        let mut items = Vec::with_capacity(list.len());
        let mut total = 0usize;
        for (n, t) in &list {
            let start = total;
            total = total.checked_add(t.data.len()).ok_or_else(|| {
                self.d.release(step);
                Error::limit("bytes of one save", u64::MAX, usize::MAX as u64, None)
            })?;
            items.push(CopiedItem {
                name: n.as_ref().to_vec(),
                dtype: t.dtype,
                shape: t.shape.to_vec(),
                lod: t.lod.to_vec(),
                range: start..total,
            });
        }
        let mut buf = self.take_buffer(total);
        capture_copy(&mut buf, list.iter().map(|(_, t)| t.data));
        let captured = t0.elapsed();
        self.enqueue(Job {
            step,
            tensors: Captured::Copied { buf, items },
            metadata,
        })?;
        Ok(AsyncSaveReport {
            blocked,
            captured,
            bytes: total as u64,
        })
    }

    /// [`CheckpointManager::save_async`] of tensors handed over: nothing is copied.
    pub fn save_async_owned(
        &mut self,
        step: u64,
        tensors: Vec<OwnedTensor>,
        metadata: Metadata,
    ) -> Result<AsyncSaveReport> {
        let blocked = self.wait_for_slot(step)?;
        let bytes = tensors.iter().map(|t| t.data.len() as u64).sum();
        self.enqueue(Job {
            step,
            tensors: Captured::Owned(tensors),
            metadata,
        })?;
        Ok(AsyncSaveReport {
            blocked,
            captured: Duration::ZERO,
            bytes,
        })
    }

    /// Waits until fewer than `max_in_flight` saves are in flight, reports an earlier failure
    /// (one that finished while waiting included), then claims `step`.
    fn wait_for_slot(&mut self, step: u64) -> Result<Duration> {
        let t0 = Instant::now();
        let max = self.d.opts.max_in_flight.max(1);
        {
            let sh = &self.d.shared;
            let mut g = sh.lock();
            while g.in_flight.len() >= max {
                g = sh.changed.wait(g).unwrap_or_else(|e| e.into_inner());
            }
        }
        let blocked = t0.elapsed();
        self.blocked_total += blocked;
        self.surface()?;
        self.d.claim(step)?;
        Ok(blocked)
    }

    /// Allocates a capture buffer of `bytes` bytes and touches every page of it, so that the
    /// first [`CheckpointManager::save_async`] of up to that many bytes copies into memory
    /// already mapped (as later ones do) instead of paying for page faults while the caller
    /// waits. Call it once before training, with the size of the tensors saved. Does nothing
    /// when [`ManagerOptions::max_in_flight`] buffers are kept already (the memory bound:
    /// never more buffers than saves in flight).
    ///
    /// [`ManagerOptions::max_in_flight`]: super::ManagerOptions::max_in_flight
    pub fn prepare_capture(&mut self, bytes: usize) {
        let max = self.d.opts.max_in_flight.max(1);
        let held = |g: &Inner| g.pool.len() + g.in_flight.len();
        if held(&self.d.shared.lock()) >= max {
            return;
        }
        let mut b = vec![0u8; bytes];
        // A write per page maps it (the values do not matter: a capture overwrites them).
        for x in b.iter_mut().step_by(4096) {
            *x = 1;
        }
        std::hint::black_box(&mut b);
        let mut g = self.d.shared.lock();
        if held(&g) < max {
            g.pool.push(b);
        }
    }

    /// A buffer of exactly `len` bytes (their values unspecified: they are all overwritten): a
    /// buffer of the pool with room for them, whose pages an earlier save already touched, else
    /// a new one (zeroed lazily by the system: its pages are mapped as the copy first writes
    /// them, which is what a first save pays for).
    fn take_buffer(&self, len: usize) -> Vec<u8> {
        let mut g = self.d.shared.lock();
        let i = g.pool.iter().position(|b| b.capacity() >= len);
        let b = i.map(|i| g.pool.swap_remove(i));
        drop(g);
        match b {
            Some(mut b) => {
                // Buffers go back to the pool full: shortening costs nothing; lengthening
                // within the capacity writes only the difference.
                b.resize(len, 0);
                b
            }
            None => vec![0u8; len],
        }
    }

    fn enqueue(&mut self, job: Job) -> Result<()> {
        let step = job.step;
        if self.worker.is_none() {
            let (tx, rx) = mpsc::channel::<Job>();
            let d = self.d.clone();
            let h = std::thread::Builder::new()
                .name("paramdex-ckpt".into())
                .spawn(move || background(&d, rx))
                .map_err(|e| Error::io("starting the checkpoint writer thread", e));
            match h {
                Ok(h) => self.worker = Some((tx, h)),
                Err(e) => {
                    self.d.release(step);
                    return Err(e);
                }
            }
        }
        let Some((tx, _)) = &self.worker else {
            unreachable!("the worker was started above")
        };
        if tx.send(job).is_err() {
            // The thread is gone (it never exits while the sender lives, unless it panicked).
            self.d.release(step);
            return Err(Error::Io {
                context: format!("saving step {step}"),
                source: std::io::Error::other("the checkpoint writer thread stopped"),
            });
        }
        Ok(())
    }
}

/// Below this many bytes a capture copies on the caller's thread alone.
const CAPTURE_PARALLEL_MIN: usize = 64 << 20;

/// Most threads a capture copies on (memory bandwidth, not cores, is the limit beyond).
const CAPTURE_THREADS: usize = 4;

/// A piece of a capture: source bytes and where they go (as long).
type CopyPiece<'s, 'd> = (&'s [u8], &'d mut [u8]);

/// Copies `sources`, one after the other, into `buf` (exactly as long as they are together):
/// the capture of a background save, the one copy of the tensors' bytes (the writer writes
/// from `buf`). A large capture is split into equal contiguous shares, one per thread (the
/// caller's included, up to [`CAPTURE_THREADS`] and the cores): two threads copied 2 GiB in
/// 0.4x to 0.85x the time of one on the 2-core benchmark machine, loaded or not (BENCHMARKS.md,
/// issue 31). Each share is copied a tensor (or the part of one inside the share) per
/// `memcpy`: large copies stay above glibc's non-temporal threshold (pieces of 16 MiB or less
/// were 1.5x slower, issue 16).
fn capture_copy<'a>(buf: &mut [u8], sources: impl Iterator<Item = &'a [u8]>) {
    let total = buf.len();
    let threads = if total < CAPTURE_PARALLEL_MIN {
        1
    } else {
        crate::parallel::resolve_threads(0).min(CAPTURE_THREADS)
    };
    let share = total.div_ceil(threads.max(1)).max(1);
    // (source piece, destination piece) per share; a source crossing a share's end is cut.
    let mut shares: Vec<std::sync::Mutex<Vec<CopyPiece<'_, '_>>>> = Vec::new();
    let mut current: Vec<CopyPiece<'_, '_>> = Vec::new();
    let mut room = share;
    let mut rest: &mut [u8] = buf;
    for mut src in sources {
        while !src.is_empty() {
            let n = src.len().min(room);
            let (s, s_rest) = src.split_at(n);
            let (d, d_rest) = std::mem::take(&mut rest).split_at_mut(n);
            current.push((s, d));
            (src, rest, room) = (s_rest, d_rest, room - n);
            if room == 0 {
                shares.push(std::sync::Mutex::new(std::mem::take(&mut current)));
                room = share;
            }
        }
    }
    if !current.is_empty() {
        shares.push(std::sync::Mutex::new(current));
    }
    // Copying cannot fail.
    let _ = crate::parallel::try_each(&shares, threads, |pieces| {
        for (s, d) in pieces.lock().unwrap_or_else(|p| p.into_inner()).iter_mut() {
            d.copy_from_slice(s);
        }
        Ok(())
    });
}

/// The background writer: one save at a time, in the order they were captured.
fn background(d: &Dir, rx: mpsc::Receiver<Job>) {
    while let Ok(job) = rx.recv() {
        let tensors = job.tensors.tensors();
        let r = d.run(job.step, &tensors, job.metadata);
        drop(tensors);
        let buf = match job.tensors {
            Captured::Copied { buf, .. } => Some(buf),
            Captured::Owned(_) => None,
        };
        let mut g = d.shared.lock();
        if let Err(e) = r {
            g.errors.push_back(Error::BackgroundSave {
                step: job.step,
                source: Box::new(e),
            });
        }
        if let Some(b) = buf {
            // Never more buffers than saves may be in flight.
            if g.pool.len() < d.opts.max_in_flight.max(1) {
                g.pool.push(b);
            }
        }
        g.in_flight.remove(&job.step);
        drop(g);
        d.shared.changed.notify_all();
    }
}

#[cfg(test)]
mod background_tests {
    use super::*;

    /// Bytes that differ from position to position and from source to source.
    fn bytes(len: usize, seed: u64) -> Vec<u8> {
        (0..len as u64)
            .map(|k| (k.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(seed) >> 29) as u8)
            .collect()
    }

    #[test]
    fn capture_copy_concatenates_its_sources_on_any_number_of_shares() {
        // Small (one thread), and past the parallel threshold with sources that straddle the
        // shares' ends, empty ones among them.
        for lens in [
            vec![0, 5, 0, 17],
            vec![],
            vec![
                CAPTURE_PARALLEL_MIN / 3 + 1,
                0,
                CAPTURE_PARALLEL_MIN / 2 + 7,
                3,
                CAPTURE_PARALLEL_MIN / 5,
            ],
        ] {
            let sources: Vec<Vec<u8>> = lens
                .iter()
                .enumerate()
                .map(|(i, &n)| bytes(n, i as u64))
                .collect();
            let want = sources.concat();
            let mut buf = vec![0xa5u8; want.len()];
            capture_copy(&mut buf, sources.iter().map(Vec::as_slice));
            assert!(buf == want, "lengths {lens:?}");
        }
    }
}
