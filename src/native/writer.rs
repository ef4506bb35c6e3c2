//! Writing a native paramdex file.
//!
//! Records are appended to a temporary file in the destination directory as tensors arrive;
//! [`Writer::finish`] appends the sorted index table and footer, syncs, and renames the file
//! into place. Until then the final path is untouched, and dropping the writer removes the
//! temporary file. A crash leaves the temporary file behind; `recover` rebuilds a complete
//! file from its self-describing records (SPEC.md 10).

use std::fs::File;
use std::hash::BuildHasher;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::dtype::DType;
use crate::error::{ensure_within, Error, IoContext, Result};
use crate::format::mask_crc;
use crate::name::{self, MAX_NAME_LEN};
use crate::native::backend::WriteBackend;
use crate::native::entry::{Dims, IndexEntry};
use crate::native::header::FileHeader;
use crate::native::staging;
use crate::native::{FORMAT_VERSION, TF_BUNDLE_VERSION};
use crate::record::{self, RecordSpec, MAX_ALIGNMENT};
use crate::table::{Compression, TableBuilder, TableOptions};

/// Default data alignment: a cache line, and enough for any SIMD load.
pub const DEFAULT_ALIGNMENT: u64 = 64;

/// Default index data block size (SPEC.md "Defaults" records the measurement behind it).
pub const DEFAULT_BLOCK_SIZE: usize = 64 * 1024;

/// Default restart interval of index data blocks (LevelDB's and TensorFlow's).
pub const DEFAULT_RESTART_INTERVAL: usize = 16;

/// Tensors of at least this many bytes are checksummed on a second thread while the calling
/// thread writes them (a thread costs tens of microseconds; 8 MiB takes milliseconds to write).
const OVERLAP_CRC_MIN: usize = 8 << 20;

/// Below this many bytes of records, `finish` does not start an early sync of them on a
/// second thread (see [`WriteBackend::early_sync`]): a thread would cost more than it saves.
const EARLY_SYNC_MIN: u64 = 16 << 20;

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
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions {
            alignment: DEFAULT_ALIGNMENT,
            block_size: DEFAULT_BLOCK_SIZE,
            restart_interval: DEFAULT_RESTART_INTERVAL,
            compression: Compression::None,
            sync: true,
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
    /// Tensors written.
    pub tensors: u64,
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

/// Builds a native paramdex file. See the module documentation.
pub struct Writer {
    final_path: PathBuf,
    out: BufWriter<Box<dyn WriteBackend>>,
    /// Deletes the temporary file when dropped; taken by `finish`.
    temp: Option<tempfile::TempPath>,
    opts: WriterOptions,
    /// End of the records written so far (= next record's offset).
    pos: u64,
    names: Vec<u8>,
    values: Vec<u8>,
    entries: Vec<Pending>,
    /// Whether every name so far was greater than the one before (then no duplicate is possible
    /// and `seen` is not needed).
    sorted: bool,
    /// (name hash, entry index) of every name; built only once names arrive out of order.
    /// The hash is stored so that growing the table never hashes a name again.
    seen: hashbrown::HashTable<(u64, usize)>,
    /// Randomly seeded per process (foldhash), so hostile names cannot force collisions.
    hasher: hashbrown::DefaultHashBuilder,
    /// Hash of the name `check_name` accepted last, for `push_entry` (None while sorted).
    pending_hash: Option<u64>,
    /// Set when a write failed half-way or a streamed tensor was abandoned.
    pub(super) poisoned: Option<String>,
    scratch: Vec<u8>,
    /// Typed metadata for the header entry (see `set_metadata`, at the end of this file).
    metadata: crate::native::meta::Metadata,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("final_path", &self.final_path)
            .field("tensors", &self.entries.len())
            .field("pos", &self.pos)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// Starts a file that will appear at `path` when [`Writer::finish`] succeeds.
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
        if !opts.alignment.is_power_of_two() || opts.alignment > MAX_ALIGNMENT {
            return Err(Error::InvalidArgument(format!(
                "alignment {} is not a power of two between 1 and {MAX_ALIGNMENT}",
                opts.alignment
            )));
        }
        // Validates block size and restart interval up front, not at finish.
        TableOptions {
            block_size: opts.block_size,
            restart_interval: opts.restart_interval,
            compression: opts.compression,
        }
        .validate()?;
        let temp = staging::temp_beside(path, ".pdx-tmp")?;
        let (file, temp_path) = temp.into_parts();
        Ok(Writer {
            final_path: path.to_path_buf(),
            out: BufWriter::with_capacity(1 << 20, wrap(file)),
            temp: Some(temp_path),
            opts,
            pos: 0,
            names: Vec::new(),
            values: Vec::new(),
            entries: Vec::new(),
            sorted: true,
            seen: hashbrown::HashTable::new(),
            hasher: hashbrown::DefaultHashBuilder::default(),
            pending_hash: None,
            poisoned: None,
            scratch: Vec::with_capacity(256),
            metadata: crate::native::meta::Metadata::new(),
        })
    }

    /// Path of the temporary file being written (what `recover` reads after a crash).
    pub fn temp_path(&self) -> Option<&Path> {
        self.temp.as_deref()
    }

    /// Tensors added so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no tensor was added yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn check_usable(&self) -> Result<()> {
        match &self.poisoned {
            Some(why) => Err(Error::InvalidArgument(format!(
                "writer for {} is unusable: {why}",
                self.final_path.display()
            ))),
            None => Ok(()),
        }
    }

    fn entry_name(&self, i: usize) -> &[u8] {
        let p = self.entries[i];
        &self.names[p.name_start..p.name_start + p.name_len]
    }

    /// Checks a new name: non-empty, within the limit, not added before.
    fn check_name(&mut self, name: &[u8]) -> Result<()> {
        if name.is_empty() {
            return Err(Error::EmptyName);
        }
        ensure_within("tensor name length", name.len(), MAX_NAME_LEN, None)?;
        self.pending_hash = None;
        let Some(last) = self.entries.len().checked_sub(1) else {
            return Ok(());
        };
        if self.sorted {
            if name > self.entry_name(last) {
                return Ok(());
            }
            // First out-of-order name: from now on duplicates are found by hash.
            self.sorted = false;
            self.seen.reserve(self.entries.len() + 1, |&(h, _)| h);
            for i in 0..self.entries.len() {
                let h = self.hasher.hash_one(self.entry_name(i));
                self.seen.insert_unique(h, (h, i), |&(h, _)| h);
            }
        }
        let h = self.hasher.hash_one(name);
        let (names, entries) = (&self.names, &self.entries);
        let duplicate = self.seen.find(h, |&(eh, j)| {
            let p = entries[j];
            eh == h && &names[p.name_start..p.name_start + p.name_len] == name
        });
        if duplicate.is_some() {
            return Err(Error::DuplicateName {
                name: name::display(name),
            });
        }
        self.pending_hash = Some(h);
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
        let i = self.entries.len();
        self.entries.push(p);
        if !self.sorted {
            let h = match self.pending_hash.take() {
                Some(h) => h,
                None => self.hasher.hash_one(name),
            };
            self.seen.insert_unique(h, (h, i), |&(h, _)| h);
        }
    }

    fn validate(&self, name: &[u8], dtype: DType, shape: &[u64], lod: &[Vec<u64>]) -> Result<u64> {
        let invalid = |detail: String| Error::InvalidTensor {
            name: name::display(name),
            detail,
        };
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
            self.poisoned = Some(format!("a write failed: {e}"));
            return Err(Error::io(
                format!("writing {}", self.final_path.display()),
                e,
            ));
        }
        self.pos += bytes.len() as u64;
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
            self.poisoned = Some(format!("patching a checksum failed: {e}"));
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
    pub fn add(&mut self, name: impl AsRef<[u8]>, tensor: Tensor<'_>) -> Result<()> {
        let name = name.as_ref();
        self.check_usable()?;
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
        // Small tensors are checksummed first, so the header goes out complete. Large ones are
        // checksummed on a second thread while this one writes them, and the header's CRC
        // field is patched afterwards: the CRC then costs no wall time next to the write.
        let overlap = tensor.data.len() >= OVERLAP_CRC_MIN;
        let upfront_crc = (!overlap).then(|| mask_crc(crc32c::crc32c(tensor.data)));
        let record_offset = self.pos;
        let mut header = std::mem::take(&mut self.scratch);
        header.clear();
        let spec = RecordSpec {
            dtype: tensor.dtype,
            dims: tensor.shape,
            lod: tensor.lod,
            name: Some(name),
            data_crc: Some(upfront_crc.unwrap_or(0)),
        };
        let layout = record::encode_header(&spec, record_offset, self.opts.alignment, &mut header)
            .and_then(|layout| header_fits(name, layout));
        let result = layout.and_then(|layout| {
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
        Ok(())
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
        let record_offset = self.pos;
        let mut header = Vec::new();
        let spec = RecordSpec {
            dtype,
            dims: shape,
            lod,
            name: Some(name),
            data_crc: Some(0), // patched when the stream finishes
        };
        let layout = record::encode_header(&spec, record_offset, self.opts.alignment, &mut header)
            .and_then(|layout| header_fits(name, layout))?;
        let crc_pos = layout
            .crc_pos
            .expect("encode_header reserves the crc field when data_crc is Some");
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
        let header = FileHeader {
            num_shards: 1,
            big_endian: false,
            producer: TF_BUNDLE_VERSION,
            min_consumer: 0,
            format_version: FORMAT_VERSION,
            alignment: u32::try_from(self.opts.alignment)
                .expect("the alignment is validated at create (at most 4096)"),
            records_len,
            tensor_count: self.entries.len() as u64,
            records_sorted: self.sorted,
            metadata: std::mem::take(&mut self.metadata),
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
        self.out.flush().ctx("writing", &path)?;
        if self.opts.sync {
            self.out.get_mut().sync().ctx("syncing", &path)?;
        }
        let temp = self
            .temp
            .take()
            .expect("the temporary path is present until finish");
        temp.persist(&path).map_err(|e| {
            Error::io(
                format!("renaming the temporary file to {}", path.display()),
                e.error,
            )
        })?;
        if self.opts.sync {
            staging::sync_parent(&path)?;
        }
        Ok(FinishStats {
            tensors: self.entries.len() as u64,
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
        if self.sorted {
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
        let table_opts = TableOptions {
            block_size: self.opts.block_size,
            restart_interval: self.opts.restart_interval,
            compression: self.opts.compression,
        };
        let records_len = self.pos;
        let mut builder = TableBuilder::new(&mut self.out, records_len, table_opts)?;
        builder.add(b"", &header.encode())?;
        for &i in &order {
            let p = self.entries[i];
            builder.add(
                &self.names[p.name_start..p.name_start + p.name_len],
                &self.values[p.value_start..p.value_start + p.value_len],
            )?;
        }
        let (_, stats) = builder.finish()?;
        Ok(stats)
    }
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
