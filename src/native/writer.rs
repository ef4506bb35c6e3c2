//! Writing a native paramdex file.
//!
//! Records are appended to a temporary file in the destination directory as tensors arrive;
//! [`Writer::finish`] appends the sorted index table and footer, syncs, and renames the file
//! into place. Until then the final path is untouched, and dropping the writer removes the
//! temporary file (so does [`crate::remove_staged`], which also makes `finish` fail). Missing
//! parent directories of the destination are created (and removed again if the file is never
//! finished and they are empty). A crash leaves the temporary file behind; `recover` rebuilds
//! a complete file from its self-describing records (SPEC.md 10).
//!
//! Index entries wait in memory until `finish` sorts them into the index, up to
//! [`WriterOptions::index_memory`] bytes; past that, the writer sorts what it holds and spills
//! it as one run to a nameless temporary file beside the output (`native/spill.rs`), and
//! `finish` merges the runs into the one sorted stream the table builder takes. A name added
//! twice is refused by `add` whether its first entry is in memory or spilled.
//!
//! A writer made by [`Writer::create_on`] writes through a [`WriteDestination`] instead (an
//! object uploaded in parts): `finish` commits it, and dropping the writer unfinished drops
//! the destination, which discards what was written. The records' checksum fields the
//! writer patches are announced first ([`WriteBackend::will_patch`]), so such a destination
//! knows which bytes it must keep until then.

use std::fs::File;
use std::hash::BuildHasher;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{ensure_within, Error, IoContext, Result};
use crate::format::mask_crc;
use crate::name::{self, MAX_NAME_LEN};
use crate::native::backend::{EarlySync, WriteBackend, WriteDestination};
use crate::native::bytes_value;
use crate::native::entry::{Dims, IndexEntry};
use crate::native::fault::{self, Op};
use crate::native::header::{FileHeader, ShardOf};
use crate::native::region::Region;
use crate::native::spill::Spill;
use crate::native::staging;
use crate::native::TF_BUNDLE_VERSION;
use crate::record::{self, RecordSpec, MAX_ALIGNMENT};
use crate::table::{Compression, TableBuilder, TableOptions};

mod slices;

/// How a writer stores tensor data ([`WriterOptions::data_compression`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataCompression {
    /// Every record plain: the data as it is, readable in place (zero-copy) and by Paddle.
    #[default]
    None,
    /// Lossless compression (SPEC.md 3.4): each tensor of at least
    /// [`MIN_COMPRESSED_LEN`] bytes is byte-grouped by its dtype and entropy-coded in chunks,
    /// and stored so when that saves at least 1/64 of its bytes, else plain. A file holding a
    /// compressed record is format version 4; readers decode into a fresh buffer.
    Lossless,
}

/// Tensors below this many bytes are stored plain even with [`DataCompression::Lossless`]:
/// the chunk table and zstd's frame headers take a visible part of them, and a small tensor's
/// read would pay for decoding what it saved in storage.
pub const MIN_COMPRESSED_LEN: usize = 4096;

/// Default data alignment: a cache line, and enough for any SIMD load.
pub const DEFAULT_ALIGNMENT: u64 = 64;

/// Default index data block size (SPEC.md "Defaults" records the measurement behind it).
pub const DEFAULT_BLOCK_SIZE: usize = 64 * 1024;

/// Default restart interval of index data blocks (LevelDB's and TensorFlow's).
pub const DEFAULT_RESTART_INTERVAL: usize = 16;

/// Default [`WriterOptions::index_memory`]: 64 MiB, about 550,000 entries of 45-byte names,
/// so files of fewer tensors never spill, and 10M tensors spill in about 18 runs.
pub const DEFAULT_INDEX_MEMORY: usize = 64 << 20;

/// Tensors of at least this many bytes are checksummed on a second thread while the calling
/// thread writes them (a thread costs tens of microseconds; 8 MiB takes milliseconds to write).
const OVERLAP_CRC_MIN: usize = 8 << 20;

/// Below this many bytes of records, `finish` does not start an early sync of them on a
/// second thread (see [`WriteBackend::early_sync`]): a thread would cost more than it saves.
const EARLY_SYNC_MIN: u64 = 16 << 20;

/// With sync on, every time this many more bytes of records were written the writer starts a
/// sync of what it wrote ([`WriteBackend::early_sync`]) on a background thread (unless the one
/// before is still running), so that the device writes the records while the writer goes on
/// adding tensors instead of all of them at `finish` (BENCHMARKS.md, issue 31).
const BACKGROUND_SYNC_STEP: u64 = 256 << 20;

/// How a [`Writer`] lays out its file.
#[derive(Clone, Debug)]
pub struct WriterOptions {
    /// Every record's first data byte is a multiple of this (a power of two, 1..=4096; 1 = packed).
    pub alignment: u64,
    /// Target size of index data blocks in bytes.
    pub block_size: usize,
    /// Keys between restart points in index data blocks.
    pub restart_interval: usize,
    /// Compression of index blocks (never of tensor data).
    pub compression: Compression,
    /// Whether `finish` fsyncs the file before the rename and the directory after it.
    pub sync: bool,
    /// Write the hash index block (SPEC.md 4.5), which makes `get` by name one bucket probe
    /// instead of two binary searches (about 10.7 bytes per tensor). Default true. Readers that
    /// predate it, and TensorFlow, ignore it.
    pub hash_index: bool,
    /// Put the header entry alone in the first index data block (SPEC.md 4.2), so that open
    /// checksums a block of a few dozen bytes instead of `block_size`. Default true. With this
    /// and `hash_index` both false, the index is byte for byte what earlier versions wrote
    /// (and what TensorFlow's table builder writes for the same entries).
    pub header_alone: bool,
    /// Write version 3's index layout (SPEC.md 4.2, 4.5) when the other options allow it
    /// (`hash_index`, `header_alone`, no compression, restart runs of at most 256 entries):
    /// a lookup goes from the hash bucket straight to its entry and checks the 4 KiB it reads,
    /// and the header sits at the end of the file, read with the footer. Default true. False
    /// writes the version 1 or 2 layout, which readers built before version 3 read.
    pub index_v3: bool,
    /// Bytes of index entries (names, values and their bookkeeping) the writer holds in memory
    /// before it sorts them and spills them as one run to a nameless temporary file in the
    /// output's directory, to be merged at `finish`. Bounds the writer's memory however many
    /// tensors it writes (beside it, the writer keeps an 8-byte hash of every spilled name and
    /// of every name added once names stopped arriving in increasing order, for exact
    /// duplicate checks). `usize::MAX` never spills. Default [`DEFAULT_INDEX_MEMORY`].
    pub index_memory: usize,
    /// How tensor data is stored: plain (the default) or compressed losslessly
    /// ([`DataCompression`], SPEC.md 3.4). Tensors streamed through [`Writer::begin`] are
    /// always stored plain (their bytes are not held whole).
    pub data_compression: DataCompression,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            alignment: DEFAULT_ALIGNMENT,
            block_size: DEFAULT_BLOCK_SIZE,
            restart_interval: DEFAULT_RESTART_INTERVAL,
            compression: Compression::None,
            sync: true,
            hash_index: true,
            header_alone: true,
            index_v3: true,
            index_memory: DEFAULT_INDEX_MEMORY,
            data_compression: DataCompression::None,
        }
    }
}

/// A tensor held in memory, as handed to [`Writer::add`].
#[derive(Clone, Copy, Debug)]
pub struct Tensor<'a> {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first; empty for a scalar.
    pub shape: &'a [u64],
    /// Paddle LoD levels (offsets into the next level, the last into dimension 0); usually empty.
    pub lod: &'a [Vec<u64>],
    /// Raw little-endian, row-major element bytes.
    pub data: &'a [u8],
}

impl<'a> Tensor<'a> {
    /// A tensor without LoD.
    pub fn new(dtype: DType, shape: &'a [u64], data: &'a [u8]) -> Self {
        Tensor {
            dtype,
            shape,
            lod: &[],
            data,
        }
    }

    /// The same tensor with LoD levels.
    pub fn with_lod(self, lod: &'a [Vec<u64>]) -> Self {
        Tensor { lod, ..self }
    }
}

/// Figures about a finished file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FinishStats {
    /// Tensors written: whole tensors, and each partitioned tensor once.
    pub tensors: u64,
    /// Slices written (stored slices of partitioned tensors; SPEC.md 13).
    pub slices: u64,
    /// Bytes of the records region.
    pub records_len: u64,
    /// Bytes of the index table, footer included.
    pub index_len: u64,
    /// Index data blocks.
    pub data_blocks: u64,
    /// Total file size.
    pub file_len: u64,
}

/// Where one pending entry's name and value live in the writer's arenas.
#[derive(Clone, Copy, Debug)]
struct Pending {
    name_start: usize,
    name_len: usize,
    value_start: usize,
    value_len: usize,
}

/// A tensor this writer holds slices of: its full entry is written at `finish`.
#[derive(Debug)]
struct Partitioned {
    dtype: DType,
    full_shape: Dims,
    regions: Vec<Region>,
}

/// What a [`Writer`] writes through: the staged local file (wrapped by the caller of
/// [`Writer::create_with_backend`]), or a destination that commits itself (an object).
enum Output {
    Local(Box<dyn WriteBackend>),
    Destination(Box<dyn WriteDestination>),
}

impl Output {
    fn backend(&mut self) -> &mut dyn WriteBackend {
        match self {
            Output::Local(b) => b.as_mut(),
            Output::Destination(d) => d.as_mut(),
        }
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.backend().write(buf)
    }

    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        self.backend().write_all(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.backend().flush()
    }
}

impl Seek for Output {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.backend().seek(pos)
    }
}

impl WriteBackend for Output {
    fn sync(&mut self) -> std::io::Result<()> {
        self.backend().sync()
    }

    fn early_sync(&self) -> Option<EarlySync> {
        match self {
            Output::Local(b) => b.early_sync(),
            Output::Destination(d) => d.early_sync(),
        }
    }

    fn will_patch(&mut self, offset: u64) -> std::io::Result<()> {
        self.backend().will_patch(offset)
    }
}

/// Why a [`Writer`] became unusable (see [`Error::WriterUnusable`]).
#[derive(Debug)]
pub(super) struct Poison {
    /// The streamed tensor at fault, if that is why (displayable form).
    tensor: Option<String>,
    /// What failed.
    why: String,
}

/// Builds a native paramdex file. See the module documentation.
pub struct Writer {
    /// The output's path; for a [`WriteDestination`], its name (a URL), for messages only.
    final_path: PathBuf,
    out: BufWriter<Output>,
    /// Removes the temporary file when dropped; taken by `finish`. `None` for a destination.
    temp: Option<staging::Staged>,
    opts: WriterOptions,
    /// End of the records written so far (= next record's offset).
    pos: u64,
    names: Vec<u8>,
    values: Vec<u8>,
    entries: Vec<Pending>,
    /// Whether every name so far was greater than the one before (then no duplicate is possible
    /// and `hashes` is needed only for spilled names).
    sorted: bool,
    /// The 64-bit hash (`hasher`) of every name pushed since names stopped arriving in order,
    /// and of every spilled name: one probe of this table tells whether a new name may have
    /// been added before, wherever its entry is (in memory or spilled). Only a hit (an actual
    /// duplicate, or two names of equal 64-bit hashes) compares names.
    hashes: hashbrown::HashTable<u64>,
    /// Randomly seeded per process (foldhash), so hostile names cannot force collisions.
    hasher: hashbrown::DefaultHashBuilder,
    /// Set when a write failed half-way or a streamed tensor failed or was abandoned.
    pub(super) poisoned: Option<Poison>,
    scratch: Vec<u8>,
    /// Typed metadata for the header entry (see `set_metadata`, at the end of this file).
    metadata: crate::native::meta::Metadata,
    /// Tensors this writer holds slices of, by name; their full entries are added at `finish`.
    partitioned: hashbrown::HashMap<Vec<u8>, Partitioned>,
    /// Slice entries pushed so far.
    slice_entries: usize,
    /// The shard identity written in the header (field 22), for a shard of a sharded save.
    shard_of: Option<ShardOf>,
    /// A name starting with a NUL byte was added (allowed only in a version 1 file).
    nul_name: bool,
    /// For a shard of an incremental save: the tensors it reuses instead of writing (header
    /// field 25), listed in its references file by `ShardWriter`.
    references: u64,
    /// Compressed records written so far (SPEC.md 3.4): the file is then format version 4.
    compressed: u64,
    /// Sorted runs of entries spilled so far (`WriterOptions::index_memory`); `entries` then
    /// holds only the entries added since the last run.
    spill: Option<Spill>,
    /// Where the spill file goes: the output's directory; `None`: the system's temporary one.
    spill_dir: Option<PathBuf>,
    /// The sync started in the background while tensors are added (`BACKGROUND_SYNC_STEP`),
    /// if one was; `finish` waits for it and reports its error.
    background_sync: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    /// Records offset at which the next background sync is due.
    next_background_sync: u64,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("final_path", &self.final_path)
            .field("entries", &self.entry_count())
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Starts a file that will appear at `path` when [`Writer::finish`] succeeds (replacing
    /// an existing file atomically). Missing parent directories are created.
    pub fn create(path: impl AsRef<Path>) -> Result<Writer> {
        Self::create_with(path, WriterOptions::default())
    }

    /// Like [`Writer::create`] with explicit options.
    pub fn create_with(path: impl AsRef<Path>, opts: WriterOptions) -> Result<Writer> {
        Self::create_with_backend(path, opts, |file| Box::new(file))
    }

    /// Like [`Writer::create_with`], with the temporary file wrapped by `wrap` before anything
    /// is written to it: every byte of the file, and its `fsync`, go through the returned
    /// [`WriteBackend`] (fault injection in tests, accounting). The temporary file is still
    /// created, renamed and removed by the writer itself.
    pub fn create_with_backend(
        path: impl AsRef<Path>,
        opts: WriterOptions,
        wrap: impl FnOnce(File) -> Box<dyn WriteBackend>,
    ) -> Result<Writer> {
        let path = path.as_ref();
        Self::check_options(&opts)?;
        let (file, temp) = staging::stage_file(path, ".pdx-tmp")?;
        let mut w = Self::new(
            path.to_path_buf(),
            Output::Local(wrap(file)),
            Some(temp),
            opts,
        );
        // The staged file's directory exists (staging made it).
        w.spill_dir = Some(match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        });
        Ok(w)
    }

    /// Starts a file written through `dest`, which makes it appear under its final name when
    /// [`Writer::finish`] succeeds ([`WriteDestination::commit`]); dropped without a
    /// successful `finish`, the writer drops `dest`, which discards what was written. This is
    /// how a file is written straight to object storage (`paramdex::remote::create_writer`).
    /// [`Writer::temp_path`] is `None`: there is no local temporary file to recover from.
    pub fn create_on(dest: Box<dyn WriteDestination>, opts: WriterOptions) -> Result<Writer> {
        Self::check_options(&opts)?;
        Ok(Self::new(
            PathBuf::from(dest.name()),
            Output::Destination(dest),
            None,
            opts,
        ))
    }

    /// Refuses options that could not make a valid file, before anything is written.
    fn check_options(opts: &WriterOptions) -> Result<()> {
        if !opts.alignment.is_power_of_two() || opts.alignment > MAX_ALIGNMENT {
            return Err(Error::InvalidArgument(format!(
                "alignment {} is not a power of two between 1 and {MAX_ALIGNMENT}",
                opts.alignment
            )));
        }
        // Validates block size and restart interval up front, not at finish.
        table_options(opts, true).validate()
    }

    fn new(
        final_path: PathBuf,
        out: Output,
        temp: Option<staging::Staged>,
        opts: WriterOptions,
    ) -> Writer {
        Writer {
            final_path,
            out: BufWriter::with_capacity(1 << 20, out),
            temp,
            opts,
            pos: 0,
            names: Vec::new(),
            values: Vec::new(),
            entries: Vec::new(),
            sorted: true,
            hashes: hashbrown::HashTable::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            poisoned: None,
            scratch: Vec::with_capacity(256),
            metadata: crate::native::meta::Metadata::new(),
            partitioned: hashbrown::HashMap::new(),
            slice_entries: 0,
            shard_of: None,
            nul_name: false,
            references: 0,
            compressed: 0,
            spill: None,
            spill_dir: None,
            background_sync: None,
            next_background_sync: BACKGROUND_SYNC_STEP,
        }
    }

    /// Starts a background sync of the records written so far when `BACKGROUND_SYNC_STEP` more
    /// bytes were written since the last one and none is running (local outputs with sync on
    /// only: a destination syncs at its commit). A failure to flush poisons the writer as any
    /// failed write does.
    fn maybe_sync_in_background(&mut self) -> Result<()> {
        if !self.opts.sync
            || self.pos < self.next_background_sync
            || !matches!(self.out.get_ref(), Output::Local(_))
        {
            return Ok(());
        }
        if let Some(running) = &self.background_sync {
            if !running.is_finished() {
                return Ok(());
            }
            self.join_background_sync()?;
        }
        self.next_background_sync = self.pos.saturating_add(BACKGROUND_SYNC_STEP);
        if let Err(e) = self.out.flush() {
            self.poison(format!("a write failed: {e}"));
            return Err(Error::io(
                format!("writing {}", self.final_path.display()),
                e,
            ));
        }
        if let Some(job) = self.out.get_ref().early_sync() {
            // A thread that cannot start only loses the overlap: `finish` syncs everything.
            self.background_sync = std::thread::Builder::new()
                .name("paramdex-sync".into())
                .spawn(job)
                .ok();
        }
        Ok(())
    }

    /// Waits for the background sync, if one was started, and returns its error (the writer
    /// is then poisoned: what was written may not be durable).
    fn join_background_sync(&mut self) -> Result<()> {
        let Some(h) = self.background_sync.take() else {
            return Ok(());
        };
        let r = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        if let Err(e) = r {
            self.poison(format!("a sync failed: {e}"));
            return Err(Error::io(
                format!("syncing {}", self.final_path.display()),
                e,
            ));
        }
        Ok(())
    }

    /// Path of the temporary file being written (what `recover` reads after a crash).
    pub fn temp_path(&self) -> Option<&Path> {
        self.temp.as_ref().map(staging::Staged::path)
    }

    /// Tensors added so far: whole tensors, and each tensor with slices once.
    pub fn len(&self) -> usize {
        self.entry_count() - self.slice_entries + self.partitioned.len()
    }

    /// Whether no tensor was added yet.
    pub fn is_empty(&self) -> bool {
        self.entry_count() == 0
    }

    /// Entries pushed so far, spilled or in memory.
    fn entry_count(&self) -> usize {
        let spilled = self.spill.as_ref().map_or(0, Spill::entries);
        self.entries.len() + usize::try_from(spilled).expect("spilled entries were in memory")
    }

    /// Runs of sorted index entries spilled to the temporary file so far (see
    /// [`WriterOptions::index_memory`]).
    pub fn spilled_runs(&self) -> usize {
        self.spill.as_ref().map_or(0, Spill::runs)
    }

    /// Bytes the entries in memory take (what [`WriterOptions::index_memory`] bounds).
    fn run_bytes(&self) -> usize {
        self.names.len() + self.values.len() + self.entries.len() * std::mem::size_of::<Pending>()
    }

    /// Sorts the entries in memory and appends them to the spill file as one run.
    fn spill_run(&mut self) -> Result<()> {
        let order = self.name_order();
        let io_err = |e: std::io::Error, path: &Path| {
            Error::io(
                format!(
                    "spilling index entries of {} to a temporary file",
                    path.display()
                ),
                e,
            )
        };
        if self.spill.is_none() {
            match Spill::create(self.spill_dir.as_deref()) {
                Ok(s) => self.spill = Some(s),
                Err(e) => return Err(io_err(e, &self.final_path)),
            }
        }
        if self.sorted {
            // Out-of-order names to come must find these by hash (pushed in order, they were
            // not hashed).
            self.hashes.reserve(self.entries.len(), |&h| h);
            for i in 0..self.entries.len() {
                let h = self.hasher.hash_one(self.entry_name(i));
                self.hashes.insert_unique(h, h, |&h| h);
            }
        }
        let (names, values, entries) = (&self.names, &self.values, &self.entries);
        let run = order.iter().map(|&i| {
            let p = entries[i];
            (
                &names[p.name_start..p.name_start + p.name_len],
                &values[p.value_start..p.value_start + p.value_len],
            )
        });
        let spill = self.spill.as_mut().expect("created above");
        if let Err(e) = spill.write_run(run) {
            self.poison(format!("spilling index entries failed: {e}"));
            return Err(io_err(e, &self.final_path));
        }
        self.names.clear();
        self.values.clear();
        self.entries.clear();
        Ok(())
    }

    /// Makes this writer a shard of a sharded save: `shard` goes into the header (field 22) and
    /// the file is version 2, where names starting with a NUL byte are reserved.
    pub(super) fn set_shard_of(&mut self, shard: ShardOf) -> Result<()> {
        if self.nul_name {
            return Err(self.nul_reserved());
        }
        self.shard_of = Some(shard);
        Ok(())
    }

    /// The version the file is written as (SPEC.md 11): 4 when it holds a compressed record
    /// (SPEC.md 3.4); else 3 when its index takes version 3's layout (the kind 1 hash block and
    /// the header block at the end: the default options, uncompressed index, hash block on,
    /// header alone, no name starting with a NUL byte, which version 2 and later reserve);
    /// else the lowest version that holds what it holds.
    fn format_version(&self) -> u32 {
        if self.compressed != 0 {
            crate::native::COMPRESSED_VERSION
        } else if self.v3_index() {
            3
        } else if self.is_v2() {
            2
        } else {
            1
        }
    }

    /// Whether the index takes version 3's layout (SPEC.md 4.2, 4.5): when the options allow it
    /// and no name starts with a NUL byte (version 3 and later reserve those for slice keys).
    fn v3_index(&self) -> bool {
        writes_v3_index(&self.opts) && !self.nul_name
    }

    /// Whether the file will be version 2 (SPEC.md 11): it holds slices or a shard identity.
    fn is_v2(&self) -> bool {
        self.shard_of.is_some() || !self.partitioned.is_empty()
    }

    fn nul_reserved(&self) -> Error {
        Error::InvalidArgument(format!(
            "{}: names starting with a NUL byte are reserved for slice keys in a file with \
             slices, a shard identity (format version 2) or a compressed record (version 4), \
             and one was added",
            self.final_path.display()
        ))
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(p) => Err(Error::WriterUnusable {
                path: self.final_path.display().to_string(),
                tensor: p.tensor.clone(),
                why: p.why.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Makes the writer unusable for `why` (its own I/O failed).
    fn poison(&mut self, why: String) {
        self.poisoned = Some(Poison { tensor: None, why });
    }

    /// Makes the writer unusable because the streamed tensor `tensor` (displayable form)
    /// failed or was dropped unfinished (`why`), unless it is already: an I/O failure under the
    /// stream keeps its reason, and gains the tensor.
    pub(super) fn poison_stream(&mut self, tensor: String, why: String) {
        match &mut self.poisoned {
            Some(p) => {
                p.tensor.get_or_insert(tensor);
            }
            None => {
                self.poisoned = Some(Poison {
                    tensor: Some(tensor),
                    why,
                })
            }
        }
    }

    fn entry_name(&self, i: usize) -> &[u8] {
        let p = self.entries[i];
        &self.names[p.name_start..p.name_start + p.name_len]
    }

    /// Sets header field 25 of a shard of an incremental save: the tensors its references file
    /// lists.
    pub(super) fn set_references(&mut self, n: u64) {
        self.references = n;
    }

    /// The dtype, full shape and regions of the slices of `name` added so far, if any.
    pub(super) fn slices_of(&self, name: &[u8]) -> Option<(DType, &[u64], &[Region])> {
        self.partitioned
            .get(name)
            .map(|p| (p.dtype, p.full_shape.as_slice(), p.regions.as_slice()))
    }

    /// Whether a tensor `name` was added, whole or in slices (no state change).
    pub(super) fn holds(&self, name: &[u8]) -> Result<bool> {
        Ok(self.partitioned.contains_key(name) || self.has_entry(name)?)
    }

    /// Whether an entry named `name` was pushed (no state change).
    fn has_entry(&self, name: &[u8]) -> Result<bool> {
        if self.sorted
            && self
                .entries
                .binary_search_by(|p| self.names[p.name_start..p.name_start + p.name_len].cmp(name))
                .is_ok()
        {
            return Ok(true);
        }
        let h = self.hasher.hash_one(name);
        if self.hashes.find(h, |&x| x == h).is_none() {
            return Ok(false);
        }
        self.holds_exactly(name)
    }

    /// Whether an entry named `name` is in memory or spilled, comparing names: what a hit in
    /// `hashes` costs (a linear search of the entries in memory, then the spilled runs whose
    /// key range holds the name).
    fn holds_exactly(&self, name: &[u8]) -> Result<bool> {
        if (0..self.entries.len()).any(|i| self.entry_name(i) == name) {
            return Ok(true);
        }
        let Some(spill) = &self.spill else {
            return Ok(false);
        };
        spill.holds(name).map_err(|e| {
            Error::io(
                format!(
                    "reading the spilled index entries of {} (a temporary file)",
                    self.final_path.display()
                ),
                e,
            )
        })
    }

    /// Checks a new name of a whole tensor: non-empty, within the limit, not added before (whole
    /// or in slices), and not starting with a NUL byte in a version 2 file.
    fn check_name(&mut self, name: &[u8]) -> Result<()> {
        if name.first() == Some(&0) {
            // Version 2 and later reserve such names for slice keys: a file that already
            // holds slices, a shard identity or a compressed record refuses them (and once
            // one is added, no record is compressed, so the file stays version 1).
            if self.is_v2() || self.compressed != 0 {
                return Err(self.nul_reserved());
            }
            self.nul_name = true;
        }
        if self.partitioned.contains_key(name) {
            return Err(Error::DuplicateName {
                name: name::display(name),
            });
        }
        self.check_key(name)
    }

    /// Checks a new index key (a name, or a slice key): non-empty, within the limit, not
    /// pushed before.
    fn check_key(&mut self, name: &[u8]) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        ensure_within("tensor name length", name.len(), MAX_NAME_LEN, None)?;
        if !self.entries.is_empty() && self.run_bytes() > self.opts.index_memory {
            self.spill_run()?;
        }
        let last = match self.entries.len().checked_sub(1) {
            Some(last) => Some(self.entry_name(last)),
            None => self.spill.as_ref().and_then(Spill::last_key),
        };
        let Some(last) = last else {
            return Ok(());
        };
        if self.sorted {
            if name > last {
                return Ok(());
            }
            // First out-of-order name: from now on duplicates are found by hash.
            self.sorted = false;
            self.hashes.reserve(self.entries.len() + 1, |&h| h);
            for i in 0..self.entries.len() {
                let h = self.hasher.hash_one(self.entry_name(i));
                self.hashes.insert_unique(h, h, |&h| h);
            }
        }
        // One probe both checks and records the name's hash (recorded before the record is
        // written: if the add fails after this, the stale hash only makes a later add of the
        // same name compare names, and find none).
        let h = self.hasher.hash_one(name);
        match self.hashes.entry(h, |&x| x == h, |&x| x) {
            hashbrown::hash_table::Entry::Vacant(v) => {
                v.insert(h);
            }
            hashbrown::hash_table::Entry::Occupied(_) => {
                if self.holds_exactly(name)? {
                    return Err(Error::DuplicateName {
                        name: name::display(name),
                    });
                }
            }
        }
        Ok(())
    }

    /// Remembers a written tensor's name and index value. `name` is the one `check_name`
    /// accepted last.
    pub(super) fn push_entry(&mut self, name: &[u8], entry: &IndexEntry) {
        let value_start = self.values.len();
        entry.encode(&mut self.values);
        let p = Pending {
            name_start: self.names.len(),
            name_len: name.len(),
            value_start,
            value_len: self.values.len() - value_start,
        };
        self.names.extend_from_slice(name);
        self.entries.push(p);
    }

    fn validate(&self, name: &[u8], dtype: DType, shape: &[u64], lod: &[Vec<u64>]) -> Result<u64> {
        let invalid = |detail: String| Error::InvalidTensor {
            name: name::display(name),
            detail,
        };
        if dtype == DType::Bytes {
            return Err(invalid(
                "a bytes value is written whole, with Writer::add_bytes (not streamed, not in \
                 slices)"
                    .into(),
            ));
        }
        if shape.len() > record::MAX_RANK {
            return Err(invalid(format!(
                "rank {} exceeds the limit of {}",
                shape.len(),
                record::MAX_RANK
            )));
        }
        let len = record::data_len(dtype, shape).ok_or_else(|| {
            invalid(format!(
                "shape {shape:?} of {dtype} overflows 64 bits of bytes"
            ))
        })?;
        if lod.len() as u64 > record::MAX_LOD_LEVELS {
            return Err(invalid(format!(
                "{} LoD levels exceed the limit of {}",
                lod.len(),
                record::MAX_LOD_LEVELS
            )));
        }
        if !lod.is_empty() {
            record::validate_lod(lod, shape)
                .map_err(|why| invalid(format!("inconsistent LoD: {why}")))?;
        }
        Ok(len)
    }

    /// Writes `bytes` to the temporary file, poisoning the writer on failure.
    pub(super) fn write_raw(&mut self, bytes: &[u8]) -> Result<()> {
        if let Err(e) = self.out.write_all(bytes) {
            self.poison(format!("a write failed: {e}"));
            return Err(Error::io(
                format!("writing {}", self.final_path.display()),
                e,
            ));
        }
        self.pos += bytes.len() as u64;
        Ok(())
    }

    /// Tells the backend that the checksum field at `crc_offset` of the record header about to
    /// be written will be patched ([`WriteBackend::will_patch`]), poisoning the writer on
    /// failure.
    fn announce_patch(&mut self, crc_offset: u64) -> Result<()> {
        if let Err(e) = self.out.get_mut().will_patch(crc_offset) {
            self.poison(format!("the output refused a checksum patch: {e}"));
            return Err(Error::io(
                format!("writing {}", self.final_path.display()),
                e,
            ));
        }
        Ok(())
    }

    /// Overwrites the data CRC field of a record header already written (at file offset
    /// `crc_offset`) and returns to the end of the records, poisoning the writer on failure.
    pub(super) fn patch_crc(&mut self, crc_offset: u64, masked: u32) -> Result<()> {
        let end = self.pos;
        let out = &mut self.out;
        let patch = (|| -> std::io::Result<()> {
            out.seek(SeekFrom::Start(crc_offset))?;
            out.write_all(&masked.to_le_bytes())?;
            out.seek(SeekFrom::Start(end))?;
            Ok(())
        })();
        if let Err(e) = patch {
            self.poison(format!("patching a checksum failed: {e}"));
            return Err(Error::io(
                format!("writing {}", self.final_path.display()),
                e,
            ));
        }
        Ok(())
    }

    /// Adds a tensor held in memory.
    ///
    /// Errors (nothing is written): empty, over-long or duplicate name; `data.len()` not equal
    /// to the byte count of `shape` and `dtype`; LoD inconsistent with the shape.
    ///
    /// A tensor of dtype [`DType::Bytes`] must be an encoded bytes value, as a reader's view of
    /// one holds it (shape `[data.len()]`, no LoD, SPEC.md 6.1): this is how copies carry
    /// bytes values; [`Writer::add_bytes`] encodes one.
    pub fn add(&mut self, name: impl AsRef<[u8]>, tensor: Tensor<'_>) -> Result<()> {
        let name = name.as_ref();
        self.check_usable()?;
        if tensor.dtype == DType::Bytes {
            return self.add_encoded_bytes(name, tensor.shape, tensor.lod, tensor.data);
        }
        let len = self.validate(name, tensor.dtype, tensor.shape, tensor.lod)?;
        if len != tensor.data.len() as u64 {
            return Err(Error::InvalidTensor {
                name: name::display(name),
                detail: format!(
                    "shape {:?} of {} needs {len} bytes but {} were given",
                    tensor.shape,
                    tensor.dtype,
                    tensor.data.len()
                ),
            });
        }
        self.check_name(name)?;
        self.write_tensor(name, tensor, len, None)
    }

    /// Adds a bytes value: arbitrary bytes under a name, beside the tensors (SPEC.md 6.1).
    /// TensorFlow reads it as a scalar string tensor, Paddle as a `uint8` record (of the
    /// encoded value); [`Reader::get_bytes`](crate::native::Reader::get_bytes) gives it back.
    /// It is checksummed like a tensor. The value is copied once (to prefix its length).
    ///
    /// Errors (nothing is written): empty, over-long or duplicate name.
    pub fn add_bytes(&mut self, name: impl AsRef<[u8]>, value: &[u8]) -> Result<()> {
        let name = name.as_ref();
        self.check_usable()?;
        let enc = bytes_value::encode(value);
        self.add_encoded_bytes(name, &[enc.len() as u64], &[], &enc)
    }

    /// Adds an encoded bytes value (shape `[data.len()]`, no LoD), checking the encoding.
    fn add_encoded_bytes(
        &mut self,
        name: &[u8],
        shape: &[u64],
        lod: &[Vec<u64>],
        data: &[u8],
    ) -> Result<()> {
        let invalid = |detail: String| Error::InvalidTensor {
            name: name::display(name),
            detail,
        };
        if shape != [data.len() as u64] || !lod.is_empty() {
            return Err(invalid(format!(
                "a bytes value's data has shape [{}] and no LoD, not {shape:?} with {} LoD levels",
                data.len(),
                lod.len()
            )));
        }
        bytes_value::decode(data, &name::display(name), 0)
            .map_err(|e| invalid(format!("not an encoded bytes value: {e}")))?;
        self.check_name(name)?;
        self.write_tensor(
            name,
            Tensor::new(DType::Bytes, shape, data),
            data.len() as u64,
            None,
        )
    }

    /// Writes the record of a checked tensor under index key `key` (a name, or a slice key with
    /// the whole tensor's shape `full_shape`) and pushes its entry. `check_name` or `check_key`
    /// accepted `key` last.
    fn write_tensor(
        &mut self,
        key: &[u8],
        tensor: Tensor<'_>,
        len: u64,
        full_shape: Option<&[u64]>,
    ) -> Result<()> {
        let name = key;
        if self.opts.data_compression == DataCompression::Lossless
            && !self.nul_name
            && tensor.dtype != DType::Bytes
            && tensor.data.len() >= MIN_COMPRESSED_LEN
        {
            if let Some(stored) = record::lossless::encode(tensor.dtype, tensor.data, 0) {
                return self.write_compressed(key, tensor, &stored, full_shape);
            }
        }
        // Small tensors are checksummed first, so the header goes out complete. Large ones are
        // checksummed on a second thread while this one writes them, and the header's CRC
        // field is patched afterwards: the CRC then costs no wall time next to the write.
        // A bytes value's record and entry carry TensorFlow's string checksum (SPEC.md 6.1),
        // computed up front (its encoding was checked by `add_encoded_bytes`).
        let bytes_crc = if tensor.dtype == DType::Bytes {
            Some(bytes_value::entry_crc(tensor.data, &name::display(key), 0)?)
        } else {
            None
        };
        let overlap = bytes_crc.is_none() && tensor.data.len() >= OVERLAP_CRC_MIN;
        let upfront_crc =
            bytes_crc.or_else(|| (!overlap).then(|| mask_crc(crc32c::crc32c(tensor.data))));
        let record_offset = self.pos;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        let spec = RecordSpec {
            dtype: tensor.dtype,
            dims: tensor.shape,
            lod: tensor.lod,
            name: Some(name),
            data_crc: Some(upfront_crc.unwrap_or(0)),
            full_shape,
            stored_len: None,
        };
        let layout = record::encode_header(&spec, record_offset, self.opts.alignment, &mut header)
            .and_then(|layout| header_fits(name, layout));
        let result = layout.and_then(|layout| {
            if upfront_crc.is_none() {
                let crc_pos = layout
                    .crc_pos
                    .expect("encode_header reserves the crc field when data_crc is Some");
                self.announce_patch(record_offset + crc_pos as u64)?;
            }
            self.write_raw(&header)?;
            let crc = match upfront_crc {
                Some(crc) => {
                    self.write_raw(tensor.data)?;
                    crc
                }
                None => {
                    let (written, crc) = std::thread::scope(|s| {
                        let crc = s.spawn(|| crc32c::crc32c(tensor.data));
                        let written = self.write_raw(tensor.data);
                        let crc = crc.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                        (written, crc)
                    });
                    written?;
                    let crc_pos = layout
                        .crc_pos
                        .expect("encode_header reserves the crc field when data_crc is Some");
                    let masked = mask_crc(crc);
                    self.patch_crc(record_offset + crc_pos as u64, masked)?;
                    masked
                }
            };
            Ok((layout, crc))
        });
        self.scratch = header;
        let (layout, crc) = result?;
        let entry = self.index_entry(
            tensor.dtype,
            tensor.shape,
            tensor.lod.len(),
            record_offset,
            layout.header_len,
            len,
            crc,
        );
        self.push_entry(name, &entry);
        self.maybe_sync_in_background()
    }

    /// Writes the compressed record (SPEC.md 3.4) of a checked tensor under index key `key`:
    /// its header announces `stored` (the codec's output) and carries the checksum of the
    /// decoded data, as the entry does; the entry's size is the stored length.
    fn write_compressed(
        &mut self,
        key: &[u8],
        tensor: Tensor<'_>,
        stored: &[u8],
        full_shape: Option<&[u64]>,
    ) -> Result<()> {
        let crc = mask_crc(crc32c::crc32c(tensor.data));
        let record_offset = self.pos;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        let spec = RecordSpec {
            dtype: tensor.dtype,
            dims: tensor.shape,
            lod: tensor.lod,
            name: Some(key),
            data_crc: Some(crc),
            full_shape,
            stored_len: Some(stored.len() as u64),
        };
        let result = record::encode_header(&spec, record_offset, self.opts.alignment, &mut header)
            .and_then(|layout| header_fits(key, layout))
            .and_then(|layout| {
                self.write_raw(&header)?;
                self.write_raw(stored)?;
                Ok(layout)
            });
        self.scratch = header;
        let layout = result?;
        let mut entry = self.index_entry(
            tensor.dtype,
            tensor.shape,
            tensor.lod.len(),
            record_offset,
            layout.header_len,
            stored.len() as u64,
            crc,
        );
        entry.codec = record::lossless::CODEC_LOSSLESS;
        self.compressed += 1;
        self.push_entry(key, &entry);
        self.maybe_sync_in_background()
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn index_entry(
        &self,
        dtype: DType,
        shape: &[u64],
        lod_levels: usize,
        record_offset: u64,
        header_len: usize,
        size: u64,
        crc: u32,
    ) -> IndexEntry {
        IndexEntry {
            tf_dtype: dtype.tf_code(),
            shape: Dims::from_slice(shape),
            shard_id: 0,
            offset: record_offset + header_len as u64,
            size,
            crc32c: crc,
            num_slices: 0,
            record_header_len: u32::try_from(header_len)
                .expect("header lengths are checked by header_fits before the record is written"),
            lod_levels: u32::try_from(lod_levels).expect("LoD levels are validated (at most 32)"),
            pdx_dtype: dtype.pdx_code().unwrap_or(0),
            codec: 0,
        }
    }

    /// Validates a tensor whose data will be streamed and writes its record header, with a
    /// zero data checksum that the stream patches when it completes (`native/stream.rs`, which
    /// holds [`Writer::begin`]; this file does not know the stream type, so the two do not import
    /// each other).
    pub(super) fn begin_record(
        &mut self,
        name: &[u8],
        dtype: DType,
        shape: &[u64],
        lod: &[Vec<u64>],
    ) -> Result<BegunRecord> {
        self.check_usable()?;
        let data_len = self.validate(name, dtype, shape, lod)?;
        self.check_name(name)?;
        self.write_record_header(name, dtype, shape, lod, None, data_len)
    }

    /// Writes a record header whose data checksum is patched later.
    fn write_record_header(
        &mut self,
        name: &[u8],
        dtype: DType,
        shape: &[u64],
        lod: &[Vec<u64>],
        full_shape: Option<&[u64]>,
        data_len: u64,
    ) -> Result<BegunRecord> {
        let record_offset = self.pos;
        let mut header = Vec::new();
        let spec = RecordSpec {
            dtype,
            dims: shape,
            lod,
            name: Some(name),
            data_crc: Some(0), // patched when the stream finishes
            full_shape,
            stored_len: None,
        };
        let layout = record::encode_header(&spec, record_offset, self.opts.alignment, &mut header)
            .and_then(|layout| header_fits(name, layout))?;
        let crc_pos = layout
            .crc_pos
            .expect("encode_header reserves the crc field when data_crc is Some");
        self.announce_patch(record_offset + crc_pos as u64)?;
        self.write_raw(&header)?;
        Ok(BegunRecord {
            record_offset,
            header_len: layout.header_len,
            crc_offset: record_offset + crc_pos as u64,
            data_len,
        })
    }

    /// Writes the index and footer, syncs, and atomically renames the file into place.
    pub fn finish(mut self) -> Result<FinishStats> {
        self.check_usable()?;
        let records_len = self.pos;
        let format_version = self.format_version();
        // Every entry so far has a record, so this is the order of the records.
        let records_sorted = self.sorted;
        self.push_partitioned();
        let slice_count = self.slice_entries as u64;
        let tensor_count = self.entry_count() as u64 - slice_count;
        let header = FileHeader {
            num_shards: 1,
            big_endian: false,
            producer: TF_BUNDLE_VERSION,
            min_consumer: 0,
            format_version,
            alignment: u32::try_from(self.opts.alignment)
                .expect("the alignment is validated at create (at most 4096)"),
            records_len,
            tensor_count,
            records_sorted,
            metadata: std::mem::take(&mut self.metadata),
            shard_of: self.shard_of,
            shards: Vec::new(),
            slice_count,
            references: self.references,
        };
        let path = self.final_path.clone();
        // With sync on, the records go to disk on a second thread while this one sorts the
        // names and writes the index (large files spend about as long on each); the final
        // sync below then has little left to do. Its result is checked all the same.
        let early_sync = if self.opts.sync && records_len >= EARLY_SYNC_MIN {
            self.out.flush().ctx("writing", &path)?;
            self.out.get_ref().early_sync()
        } else {
            None
        };
        let (stats, early) = std::thread::scope(|s| {
            let early = early_sync.map(|job| s.spawn(job));
            let stats = self.write_index(&header);
            let early = early.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            (stats, early)
        });
        let stats = stats?;
        if let Some(early) = early {
            early.ctx("syncing", &path)?;
        }
        self.join_background_sync()?;
        let temp = &self.temp;
        let seam = |op| temp.as_ref().map_or(Ok(()), |t| fault::check(op, t.path()));
        seam(Op::Write)
            .and_then(|()| self.out.flush())
            .ctx("writing", &path)?;
        if self.opts.sync {
            seam(Op::SyncFile)
                .and_then(|()| self.out.get_mut().sync())
                .ctx("syncing", &path)?;
        }
        match (self.out.get_mut(), self.temp.take()) {
            (Output::Destination(dest), _) => {
                if let Err(e) = dest.commit() {
                    self.poison(format!("completing the output failed: {e}"));
                    return Err(e);
                }
            }
            (Output::Local(_), Some(temp)) => {
                staging::commit([(temp, path.as_path())])?;
                if self.opts.sync {
                    staging::sync_parent(&path)?;
                }
            }
            (Output::Local(_), None) => {
                unreachable!("a local output keeps its temporary file until finish")
            }
        }
        Ok(FinishStats {
            tensors: tensor_count,
            slices: slice_count,
            records_len,
            index_len: stats.table_len,
            data_blocks: stats.data_blocks,
            file_len: records_len + stats.table_len,
        })
    }
}

impl Writer {
    /// Entry numbers in bytewise order of their names.
    ///
    /// Checkpoint names share long prefixes (`model.layers.`), so comparing whole names spends
    /// most of its time re-reading the common part. Each entry is first keyed by the 8 bytes
    /// that follow the prefix common to all names (zero-padded, big-endian): when two keys
    /// differ, their order is the names' order; only equal keys compare the whole names.
    fn name_order(&self) -> Vec<usize> {
        if self.sorted || self.entries.len() < 2 {
            return (0..self.entries.len()).collect();
        }
        // Not sorted means a name arrived out of order, so there are at least two entries.
        let first = self.entry_name(0);
        let common = (1..self.entries.len()).fold(first.len(), |common, i| {
            let name = self.entry_name(i);
            first[..common]
                .iter()
                .zip(name)
                .take_while(|(a, b)| a == b)
                .count()
        });
        let mut keyed: Vec<(u64, usize)> = (0..self.entries.len())
            .map(|i| {
                let rest = &self.entry_name(i)[common..];
                let mut window = [0u8; 8];
                let n = rest.len().min(8);
                window[..n].copy_from_slice(&rest[..n]);
                // In memory only: big-endian so that integer order is the bytes' order.
                #[allow(clippy::big_endian_bytes)]
                let key = u64::from_be_bytes(window);
                (key, i)
            })
            .collect();
        keyed.sort_unstable_by(|&(ka, a), &(kb, b)| {
            ka.cmp(&kb)
                .then_with(|| self.entry_name(a).cmp(self.entry_name(b)))
        });
        keyed.into_iter().map(|(_, i)| i).collect()
    }

    /// Sorts the names and appends the index table and footer after the records.
    fn write_index(&mut self, header: &FileHeader) -> Result<crate::table::TableStats> {
        let order = self.name_order();
        let table_opts = table_options(&self.opts, self.v3_index());
        let records_len = self.pos;
        let mut builder = TableBuilder::new(&mut self.out, records_len, table_opts)?;
        builder.add(b"", &header.encode())?;
        let (names, values, entries) = (&self.names, &self.values, &self.entries);
        let in_memory = order.iter().map(|&i| {
            let p = entries[i];
            (
                &names[p.name_start..p.name_start + p.name_len],
                &values[p.value_start..p.value_start + p.value_len],
            )
        });
        match &self.spill {
            None => {
                for (key, value) in in_memory {
                    builder.add(key, value)?;
                }
            }
            // The runs and the entries in memory, merged into one sorted stream.
            Some(spill) => spill.merge(in_memory, &self.final_path, |key, value| {
                builder.add(key, value)
            })?,
        }
        let (_, stats) = builder.finish()?;
        Ok(stats)
    }
}

/// Whether a writer with `opts` writes version 3's index layout (SPEC.md 4.2, 4.5): the
/// table must take the kind 1 hash block (`TableOptions::writes_kind_1`: the hash block on,
/// uncompressed blocks, restart runs of at most 256 entries), and the header block at the end
/// needs the header alone in its block.
pub(crate) fn writes_v3_index(opts: &WriterOptions) -> bool {
    opts.index_v3 && opts.header_alone && table_options(opts, true).writes_kind_1()
}

/// The index table options a writer's options select, with version 3's layout (`v3`: the
/// header block last and the kind 1 hash block, in a file of version 3 or later) or not.
pub(crate) fn table_options(opts: &WriterOptions, v3: bool) -> TableOptions {
    TableOptions {
        block_size: opts.block_size,
        restart_interval: opts.restart_interval,
        compression: opts.compression,
        hash_index: opts.hash_index,
        first_entry_alone: opts.header_alone,
        hash_entries: v3,
        first_entry_last: v3,
    }
}

/// The index table options of a native file written with the default options and
/// `compression` (sharded checkpoint indexes, references files, metadata rewrites), with
/// version 3's layout when `format_version` is 3 or later.
pub(crate) fn default_table_options(compression: Compression, format_version: u32) -> TableOptions {
    table_options(
        &WriterOptions {
            compression,
            ..WriterOptions::default()
        },
        format_version >= 3,
    )
}

/// Where a streamed tensor's record went, from [`Writer::begin_record`].
pub(super) struct BegunRecord {
    /// Absolute offset of the record.
    pub(super) record_offset: u64,
    pub(super) header_len: usize,
    /// Absolute offset of the header's data checksum field.
    pub(super) crc_offset: u64,
    /// The data bytes the record's dtype and shape call for.
    pub(super) data_len: u64,
}

/// Checks that a record header's length fits the index entry's 32-bit `record_header_len` (only
/// a LoD of hundreds of millions of offsets could exceed it).
fn header_fits(name: &[u8], layout: record::HeaderLayout) -> Result<record::HeaderLayout> {
    if u32::try_from(layout.header_len).is_err() {
        return Err(Error::InvalidTensor {
            name: name::display(name),
            detail: format!(
                "record header of {} bytes (its LoD) exceeds the 4 GiB an index entry can describe",
                layout.header_len
            ),
        });
    }
    Ok(layout)
}

// Metadata and typed tensors (kept together at the end of the file).
impl Writer {
    /// Sets the typed metadata stored in the header entry at [`Writer::finish`] (SPEC.md 5.3),
    /// replacing any set before. Errors if it breaks a limit of SPEC.md 8.1.
    pub fn set_metadata(&mut self, metadata: crate::native::meta::Metadata) -> Result<()> {
        metadata.validate()?;
        self.metadata = metadata;
        Ok(())
    }

    /// Sets one metadata entry (see [`Writer::set_metadata`]).
    pub fn insert_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<crate::native::meta::MetaValue>,
    ) -> Result<()> {
        let mut m = self.metadata.clone();
        m.insert(key, value)?;
        self.set_metadata(m)
    }

    /// The metadata set so far.
    pub fn metadata(&self) -> &crate::native::meta::Metadata {
        &self.metadata
    }

    /// Adds a tensor from a typed slice: the dtype is `T`'s (`f32` is float32, [`half::bf16`]
    /// bfloat16, `[f32; 2]` complex64, `u8` uint8; see [`crate::Element`]), the data its
    /// little-endian bytes. Errors as [`Writer::add`] does.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("m.pdx");
    /// let mut w = paramdex::Writer::create(&path)?;
    /// w.add_values("w", &[2, 2], &[1.0f32, 2.0, 3.0, 4.0])?;
    /// w.add_values("h", &[2], &[half::f16::ONE, half::f16::ZERO])?;
    /// w.finish()?;
    /// let r = paramdex::Reader::open(&path)?;
    /// assert_eq!(r.tensor("w")?.as_slice::<f32>()?, &[1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), paramdex::Error>(())
    /// ```
    pub fn add_values<T: crate::element::Element>(
        &mut self,
        name: impl AsRef<[u8]>,
        shape: &[u64],
        values: &[T],
    ) -> Result<()> {
        let data = crate::element::to_le_bytes(values);
        self.add(name, Tensor::new(T::DTYPES[0], shape, &data))
    }
}
