//! Parallel whole-checkpoint loads (issue 17): [`Reader::load_all`](crate::Reader::load_all), [`Reader::load_many`](crate::Reader::load_many) and
//! [`Reader::load_into`](crate::Reader::load_into) copy tensors out of the mapped file into owned or caller-provided
//! buffers on several threads, checking each tensor's CRC32C as it copies.
//!
//! The tensors to load are taken in file order and cut into pieces of at most [`PIECE`] bytes
//! (a small tensor is one piece, a large one several), grouped into batches of consecutive
//! pieces; threads claim batches in order from a shared counter, so each copies contiguous
//! runs of the records region. A piece is copied in chunks of [`CHUNK`] bytes, each first
//! checksummed and then copied while it is still in the CPU cache, so the file's bytes come
//! from memory once. A tensor's CRC32C is assembled from its pieces' with `crc32c_combine`,
//! then compared with the stored one. Work goes in windows of bounded size (tensors and bytes),
//! so the bookkeeping stays small however many tensors are loaded.
//!
//! What the kernel is told about the mapped pages ([`LoadAdvice`]) was chosen by measurement
//! (docs/benchmarks-history.md, "Parallel loads and 10M tensors").

use std::sync::{Arc, Mutex};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::format::crc32c_combine;
use crate::name;
use crate::native::mapped::MappedReader;
use crate::native::source::LoadAdvice;
use crate::native::view::TensorView;
use crate::parallel::{resolve_threads, try_each};

/// Largest piece of a tensor one thread copies as a unit.
const PIECE: usize = 2 << 20;

/// Bytes checksummed and then copied at a time (fits in L1/L2 with room to spare).
const CHUNK: usize = 32 << 10;

/// Most bytes of tensors in one window of the load.
const WINDOW_BYTES: u64 = 512 << 20;

/// Most tensors in one window of the load.
const WINDOW_TENSORS: usize = 1 << 16;

/// Below this many bytes in a window, one thread does it all (spawning would cost more).
const PARALLEL_MIN_BYTES: u64 = 4 << 20;

/// How a load runs ([`Reader::load_all`](crate::Reader::load_all), [`Reader::load_many`](crate::Reader::load_many), [`Reader::load_into`](crate::Reader::load_into),
/// [`Reader::for_each`](crate::Reader::for_each), verify, and [`Reader::get`](crate::Reader::get) of a large tensor read by ranges). A mapped
/// file is copied on `threads` threads, the kernel told `advice`; a file read by ranges is
/// fetched by ranged reads of `part_size` bytes, at most `concurrency` in flight. Tensors that
/// lie together (at most `max_gap` bytes apart) share parts; a tensor larger than a part is
/// split across several, and its bytes are joined without copying.
#[derive(Clone)]
pub struct LoadOptions {
    /// Copying threads for a mapped file (0 = all cores).
    pub threads: usize,
    /// What the kernel is told about a mapped file's pages before they are copied.
    pub advice: LoadAdvice,
    /// Ranged reads in flight at most (at least 1).
    pub concurrency: usize,
    /// Bytes per ranged read (at least 4 KiB).
    pub part_size: u64,
    /// Bytes between two tensors that are read (and dropped) rather than starting another
    /// request: record headers and padding between tensors are small.
    pub max_gap: u64,
    /// For [`Reader::for_each`](crate::Reader::for_each) by ranges: bytes of parts started past the oldest part not yet
    /// received, which bounds the memory of tensors received but not yet handed over (at
    /// least `concurrency` parts); for `get` by ranges, what a read-ahead fetches.
    pub window_bytes: u64,
    /// Called after each part a ranged load receives.
    pub progress: Option<Arc<dyn Fn(LoadProgress) + Send + Sync>>,
}

impl std::fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadOptions")
            .field("threads", &self.threads)
            .field("advice", &self.advice)
            .field("concurrency", &self.concurrency)
            .field("part_size", &self.part_size)
            .field("max_gap", &self.max_gap)
            .field("window_bytes", &self.window_bytes)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

/// Ranged reads in flight at most by default ([`LoadOptions::concurrency`]; `RemoteConfig`'s
/// too).
pub const DEFAULT_LOAD_CONCURRENCY: usize = 8;

/// Bytes per ranged read by default ([`LoadOptions::part_size`]; `RemoteConfig`'s too).
pub const DEFAULT_LOAD_PART_SIZE: u64 = 16 << 20;

impl Default for LoadOptions {
    /// All cores, default advice, and [`DEFAULT_LOAD_CONCURRENCY`] ranged reads of
    /// [`DEFAULT_LOAD_PART_SIZE`] bytes.
    fn default() -> Self {
        LoadOptions::with_parts(DEFAULT_LOAD_CONCURRENCY, DEFAULT_LOAD_PART_SIZE)
    }
}

impl LoadOptions {
    /// The defaults, with at most `concurrency` ranged reads (at least 1) of `part_size` bytes
    /// (at least 4 KiB) in flight.
    pub fn with_parts(concurrency: usize, part_size: u64) -> LoadOptions {
        LoadOptions {
            threads: 0,
            advice: LoadAdvice::default(),
            concurrency: concurrency.max(1),
            part_size: part_size.max(4 << 10),
            max_gap: 256 << 10,
            window_bytes: 512 << 20,
            progress: None,
        }
    }

    /// The defaults, copying a mapped file on `threads` threads (0 = all cores).
    pub fn with_threads(threads: usize) -> LoadOptions {
        LoadOptions {
            threads,
            ..LoadOptions::default()
        }
    }

    /// Bytes per ranged read, at least 4 KiB.
    pub(crate) fn part_len(&self) -> u64 {
        self.part_size.max(4 << 10)
    }
}

/// How far a ranged load has come (given to [`LoadOptions::progress`] after each part).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadProgress {
    /// Tensor bytes received so far.
    pub bytes: u64,
    /// Tensor bytes to receive in all.
    pub total_bytes: u64,
    /// Tensors handed over so far (checked).
    pub tensors: u64,
    /// Tensors to load in all.
    pub total_tensors: u64,
}

/// A tensor loaded into memory: by [`Reader::load_all`](crate::Reader::load_all) or [`Reader::load_many`](crate::Reader::load_many) from a mapped
/// file, or by the ranged reader (`remote::RangedReader`, whose `RemoteTensor` is this type).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedTensor {
    /// Element type.
    pub dtype: DType,
    /// Shape (empty for a scalar).
    pub shape: Vec<u64>,
    /// Little-endian, row-major data, checked against its CRC32C.
    pub data: Vec<u8>,
    /// The record's LoD (Paddle's level-of-detail offsets; empty for most tensors).
    pub lod: Vec<Vec<u64>>,
}

/// One piece of a tensor to copy: its bytes in the file, where they go, and (once copied)
/// their CRC32C.
struct Piece<'s, 'd> {
    src: &'s [u8],
    dst: &'d mut [u8],
    /// The tensor's number in the window.
    tensor: usize,
    /// Whether this is the tensor's first piece.
    first: bool,
    /// Offset of `src` in the reader's own source, when the tensor lies there (not in a data
    /// file of a sharded checkpoint): where advice applies.
    offset: Option<usize>,
    crc: u32,
}

impl MappedReader {
    /// Every tensor of the file (or sharded checkpoint), copied into owned buffers on
    /// `opts.threads` threads in file order, each checked against its CRC32C; returned as
    /// (name, tensor) in file order (name order for files whose records are sorted). The LoD of
    /// a tensor that has one is not copied: [`TensorView::lod`] reads it.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("m.pdx");
    /// # let mut w = paramdex::Writer::create(&path)?;
    /// # w.add_values("b", &[2], &[1.0f32, 2.0])?;
    /// # w.add_values("a", &[1], &[3u8])?;
    /// # w.finish()?;
    /// let r = paramdex::Reader::open(&path)?;
    /// let all = r.load_all(&paramdex::LoadOptions::default())?;
    /// assert_eq!(all[0].0, b"b"); // file order: as written
    /// assert_eq!(all[0].1.data, [1.0f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat());
    /// assert_eq!((all[1].0.as_slice(), all[1].1.data.as_slice()), (&b"a"[..], &[3u8][..]));
    /// # Ok::<(), paramdex::Error>(())
    /// ```
    ///
    /// Errors: [`Error::Sliced`] (before any data is copied) for a tensor stored in slices
    /// (load it with [`Reader::get_slice`](crate::Reader::get_slice)); a checksum mismatch, naming the tensor (the first
    /// in file order); those of [`Reader::iter`](crate::Reader::iter).
    pub fn load_all(&self, opts: &LoadOptions) -> Result<Vec<(Vec<u8>, OwnedTensor)>> {
        if self.may_hold_packed() {
            // A file with compressed records: each is decoded straight into its tensor's
            // buffer, not into a view first (the listing reads the index only).
            let mut names = Vec::with_capacity(usize::try_from(self.len()).unwrap_or(0));
            for l in self.listing(b"", None) {
                let l = l?;
                if l.slices != 0 {
                    // The lookup by name reports it, with its number of slices.
                    self.must_get(&l.name)?;
                }
                names.push(l.name);
            }
            return self.load_many(&names, opts);
        }
        let mut views = Vec::with_capacity(usize::try_from(self.len()).unwrap_or(0));
        for v in self.iter() {
            let v = v?;
            if v.slice_start().is_some() {
                // The lookup by name reports it, with its number of slices.
                self.must_get(v.name())?;
                return Err(Error::Sliced {
                    name: name::display(v.name()),
                    path: self.path().to_string(),
                    slices: 0,
                });
            }
            views.push(v);
        }
        self.load_views(views, opts)
    }

    /// The tensors `names` (each once, however often named), copied as [`Reader::load_all`](crate::Reader::load_all)
    /// copies, returned as (name, tensor) in file order.
    ///
    /// Errors: [`Error::NotFound`] for a name the file does not hold and [`Error::Sliced`] for
    /// a tensor stored in slices (both before any data is copied), and those of
    /// [`Reader::load_all`](crate::Reader::load_all).
    pub fn load_many<N: AsRef<[u8]>>(
        &self,
        names: &[N],
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, OwnedTensor)>> {
        let mut names: Vec<&[u8]> = names.iter().map(|n| n.as_ref()).collect();
        names.sort_unstable();
        names.dedup();
        let mut views = Vec::with_capacity(names.len());
        let mut packed = Vec::new();
        for n in names {
            match self.packed(n)? {
                Some(p) => packed.push(p),
                None => views.push(self.must_get(n)?),
            }
        }
        if packed.is_empty() {
            return self.load_views(views, opts);
        }
        // Plain tensors copied as always, then each compressed one decoded into its buffer;
        // the two lists merged in file order (one file: offsets compare).
        views.sort_by_key(file_order);
        let offsets: Vec<u64> = views.iter().map(|v| v.data_offset).collect();
        let plain = self.load_views(views, opts)?;
        packed.sort_by_key(|p| p.data_offset);
        let mut decoded = Vec::with_capacity(packed.len());
        for p in &packed {
            let len = usize::try_from(p.decoded_len()).map_err(|_| {
                Error::InvalidArgument(format!(
                    "tensor {}: {} bytes do not fit in memory",
                    name::display(&p.name),
                    p.decoded_len()
                ))
            })?;
            let mut data = vec![0u8; len];
            p.decode_into(&mut data, opts.threads)?;
            let t = OwnedTensor {
                dtype: p.dtype,
                shape: p.shape.clone(),
                data,
                lod: p.lod()?,
            };
            decoded.push((p.data_offset, (p.name.clone(), t)));
        }
        let mut all: Vec<(u64, (Vec<u8>, OwnedTensor))> = offsets.into_iter().zip(plain).collect();
        all.extend(decoded);
        all.sort_by_key(|(offset, _)| *offset);
        Ok(all.into_iter().map(|(_, t)| t).collect())
    }

    /// Whether this file can hold compressed records that a load decodes straight into its
    /// buffers ([`MappedReader::packed`]): a file of the version that has them, not a sharded
    /// checkpoint's index.
    fn may_hold_packed(&self) -> bool {
        self.shards.is_none() && self.header.format_version >= crate::native::COMPRESSED_VERSION
    }

    /// Copies the tensors `names` into the caller's buffers, `dst[i]` receiving `names[i]`
    /// (which must be exactly as long as the tensor's data), on `opts.threads` threads in
    /// file order, each checked against its CRC32C as it is copied. A buffer of a tensor that
    /// fails its check holds unchecked bytes: the error names the tensor.
    ///
    /// Errors: `names` and `dst` of different lengths, or a buffer of the wrong length
    /// ([`Error::InvalidArgument`], before any data is copied), and those of
    /// [`Reader::load_many`](crate::Reader::load_many).
    pub fn load_into<N: AsRef<[u8]>>(
        &self,
        names: &[N],
        dst: &mut [&mut [u8]],
        opts: &LoadOptions,
    ) -> Result<()> {
        if names.len() != dst.len() {
            return Err(Error::InvalidArgument(format!(
                "{} names but {} buffers to load them into",
                names.len(),
                dst.len()
            )));
        }
        let mut jobs = Vec::with_capacity(names.len());
        let mut packed = Vec::new();
        for (n, d) in names.iter().zip(dst.iter_mut()) {
            if let Some(p) = self.packed(n.as_ref())? {
                // A compressed record: decoded straight into the buffer, after the copies.
                if p.decoded_len() != d.len() as u64 {
                    return Err(Error::InvalidArgument(format!(
                        "tensor {} of {}: a buffer of {} bytes for {} bytes of data",
                        name::display(n.as_ref()),
                        self.path(),
                        d.len(),
                        p.decoded_len()
                    )));
                }
                packed.push((p, &mut **d));
                continue;
            }
            let v = self.must_get(n.as_ref())?;
            if v.data().len() != d.len() {
                return Err(Error::InvalidArgument(format!(
                    "tensor {} of {}: a buffer of {} bytes for {} bytes of data",
                    name::display(n.as_ref()),
                    self.path(),
                    d.len(),
                    v.data().len()
                )));
            }
            jobs.push((v, &mut **d));
        }
        jobs.sort_by_key(|(v, _)| file_order(v));
        self.copy_checked(jobs, opts)?;
        for (p, d) in packed {
            p.decode_into(d, opts.threads)?;
        }
        Ok(())
    }

    /// The view of a whole stored tensor `name`: NotFound or Sliced otherwise.
    fn must_get(&self, n: &[u8]) -> Result<TensorView<'_>> {
        self.get(n)?.ok_or_else(|| Error::NotFound {
            name: name::display(n),
            path: self.path().to_string(),
        })
    }

    /// Copies `views` into new buffers (in file order) and returns them in that order.
    fn load_views(
        &self,
        mut views: Vec<TensorView<'_>>,
        opts: &LoadOptions,
    ) -> Result<Vec<(Vec<u8>, OwnedTensor)>> {
        views.sort_by_key(file_order);
        let mut out: Vec<(Vec<u8>, OwnedTensor)> = views
            .iter()
            .map(|v| {
                Ok((
                    v.name().to_vec(),
                    OwnedTensor {
                        dtype: v.dtype(),
                        shape: v.shape().to_vec(),
                        data: vec![0u8; v.data().len()],
                        // From the record's header, checked there (nothing read without LoD).
                        lod: v.lod()?.to_vec(),
                    },
                ))
            })
            .collect::<Result<_>>()?;
        let jobs = views
            .into_iter()
            .zip(out.iter_mut())
            .map(|(v, (_, t))| (v, t.data.as_mut_slice()))
            .collect();
        self.copy_checked(jobs, opts)?;
        Ok(out)
    }

    /// Copies each view's data into its buffer (of its length), checking its CRC32C; `jobs`
    /// in file order.
    fn copy_checked(
        &self,
        mut jobs: Vec<(TensorView<'_>, &mut [u8])>,
        opts: &LoadOptions,
    ) -> Result<()> {
        let threads = resolve_threads(opts.threads);
        let base = self.source.as_ptr() as usize;
        let source_len = self.source.len();
        // The offset of a view's data in this reader's own source, if it lies there.
        let own_offset = |data: &[u8]| {
            let at = (data.as_ptr() as usize).wrapping_sub(base);
            (at < source_len && at + data.len() <= source_len).then_some(at)
        };
        while !jobs.is_empty() {
            // The next window: up to WINDOW_TENSORS tensors and WINDOW_BYTES bytes (at least
            // one tensor).
            let mut bytes = 0u64;
            let mut n = 0;
            while n < jobs.len() && n < WINDOW_TENSORS && (n == 0 || bytes < WINDOW_BYTES) {
                bytes += jobs[n].0.data().len() as u64;
                n += 1;
            }
            let rest = jobs.split_off(n);
            let window = std::mem::replace(&mut jobs, rest);
            let views: Vec<TensorView<'_>> = window.iter().map(|(v, _)| v.clone()).collect();
            // Advice given once for the window's span of the file.
            if matches!(opts.advice, LoadAdvice::Sequential | LoadAdvice::WillNeed) {
                let starts = views.iter().filter_map(|v| own_offset(v.data()));
                let ends = views
                    .iter()
                    .filter_map(|v| own_offset(v.data()).map(|o| o + v.data().len()));
                if let (Some(lo), Some(hi)) = (starts.min(), ends.max()) {
                    self.source.advise(opts.advice, lo, hi - lo);
                }
            }
            // Pieces, grouped into batches of about PIECE bytes.
            let mut batches: Vec<Mutex<Vec<Piece<'_, '_>>>> = Vec::new();
            let mut batch: Vec<Piece<'_, '_>> = Vec::new();
            let mut batch_bytes = 0usize;
            for (i, (_, dst)) in window.into_iter().enumerate() {
                // Lent by the file, or held by the view (a compressed record, decoded).
                let mut src = views[i].data();
                let mut dst = dst;
                let mut first = true;
                loop {
                    let take = src.len().min(PIECE - batch_bytes);
                    let (s, s_rest) = src.split_at(take);
                    let (d, d_rest) = dst.split_at_mut(take);
                    batch.push(Piece {
                        src: s,
                        dst: d,
                        tensor: i,
                        first,
                        offset: own_offset(s),
                        crc: 0,
                    });
                    batch_bytes += take;
                    first = false;
                    (src, dst) = (s_rest, d_rest);
                    if batch_bytes >= PIECE {
                        batches.push(Mutex::new(std::mem::take(&mut batch)));
                        batch_bytes = 0;
                    }
                    if src.is_empty() {
                        break;
                    }
                }
            }
            if !batch.is_empty() {
                batches.push(Mutex::new(batch));
            }
            let threads = if bytes < PARALLEL_MIN_BYTES {
                1
            } else {
                threads
            };
            try_each(&batches, threads, |b| {
                let mut pieces = b.lock().unwrap_or_else(|p| p.into_inner());
                if opts.advice == LoadAdvice::PopulateRead {
                    let lo = pieces.iter().find_map(|p| p.offset);
                    let hi = pieces
                        .iter()
                        .rev()
                        .find_map(|p| p.offset.map(|o| o + p.src.len()));
                    if let (Some(lo), Some(hi)) = (lo, hi) {
                        if hi > lo {
                            self.source.advise(LoadAdvice::PopulateRead, lo, hi - lo);
                        }
                    }
                }
                for p in pieces.iter_mut() {
                    p.crc = copy_crc(p.src, p.dst);
                }
                Ok(())
            })?;
            // Each tensor's CRC from its pieces', checked in file order.
            let mut crcs = vec![0u32; views.len()];
            for b in batches {
                for p in b.into_inner().unwrap_or_else(|p| p.into_inner()) {
                    let c = &mut crcs[p.tensor];
                    *c = if p.first {
                        p.crc
                    } else {
                        crc32c_combine(*c, p.crc, p.src.len() as u64)
                    };
                }
            }
            for (v, crc) in views.iter().zip(crcs) {
                v.check_computed_crc(crc)?;
            }
        }
        Ok(())
    }
}

/// Sort key of a view in file order: its file (a sharded checkpoint's data files are mapped
/// apart), then its offset.
fn file_order(v: &TensorView<'_>) -> (usize, u64) {
    (v.file.as_ptr() as usize, v.data_offset)
}

/// Copies `src` into `dst` (as long) and returns its CRC32C: chunk by chunk, each checksummed
/// and then copied while it is in the CPU cache.
fn copy_crc(src: &[u8], dst: &mut [u8]) -> u32 {
    let mut crc = 0;
    for (s, d) in src.chunks(CHUNK).zip(dst.chunks_mut(CHUNK)) {
        crc = crc32c::crc32c_append(crc, s);
        d.copy_from_slice(s);
    }
    crc
}
