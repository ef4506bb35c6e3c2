//! The native format as one of the interop formats: [`TensorStore`] for [`Reader`], its
//! detector, and its exporter (any store into a native file), whose writing loop merges use
//! too.

use std::path::Path;

use std::borrow::Cow;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::interop::store::{
    DataFileLayout, DataLocation, ExportJob, Format, Kind, LoadedTensor, SliceLocation,
    StoreLayout, TensorData, TensorInfo, TensorInfos, TensorStore, VerifySummary, Written,
};
use crate::name;
use crate::native::bytes_value;
use crate::native::ranged::EntryInfo;
use crate::native::{
    Metadata, OwnedTensor, Reader, Region, SliceData, Tensor, TensorView, VerifyOptions, Writer,
    WriterOptions,
};
use crate::progress::{Progress, Unit};
use crate::table::TableFigures;

impl TensorStore for Reader {
    fn format(&self) -> Format {
        Format::Native
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        // A mapped file's index streamed from `start`, one data block at a time, nothing
        // collected; one by ranges in one request. A tensor stored in slices once, from its
        // entry alone.
        Ok(Box::new(
            self.listing(start, None)?.map(move |e| listed(self, e?)),
        ))
    }

    fn scan_with_progress<'a>(&'a self, progress: &'a dyn Progress) -> Result<TensorInfos<'a>> {
        // The header holds the count: the listing streams as `scan` does.
        progress.start(self.len(), Unit::Tensors);
        Ok(Box::new(
            self.scan(b"")?.inspect(move |_| progress.advance(1)),
        ))
    }

    fn scan_prefix<'a>(&'a self, prefix: &[u8]) -> Result<TensorInfos<'a>> {
        // Stops at the end of the prefix's key range, before reading an entry past it.
        let prefix = prefix.to_vec();
        let listing = self.listing(&prefix, None)?;
        Ok(Box::new(
            listing
                .take_while(move |e| e.as_ref().map_or(true, |e| e.name.starts_with(&prefix)))
                .map(move |e| listed(self, e?)),
        ))
    }

    fn metadata(&self) -> Result<Metadata> {
        Ok(self.header().metadata.clone())
    }

    fn layout(&self) -> Result<StoreLayout> {
        let (table, file_len) = self.index_figures()?;
        let layout = native_layout(self.header(), file_len, table);
        Ok(match self.data_files() {
            Some((prefix, at)) => with_data_files(layout, self.header(), prefix, at),
            None => layout,
        })
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let got = if self.as_bytes().is_some() {
            // A mapped file: the view lends the map; its checksum is checked here.
            self.get(name).and_then(|t| match t {
                Some(t) => {
                    t.verify_crc()?;
                    loaded(t).map(Some)
                }
                None => Ok(None),
            })
        } else {
            // By ranges: owned as read (checked then), the tensors after it in name order
            // fetched ahead for a caller that loads them in turn (a conversion, an export).
            self.get_ahead(name)
                .and_then(|t| t.map(|t| loaded_owned(name, t)).transpose())
        };
        match got {
            // Stored in slices: assembled, every slice checked against its checksum.
            Err(Error::Sliced { .. }) => self.assemble(name),
            got => got,
        }
    }

    fn load_many(&self, names: &[&[u8]], threads: usize) -> Result<Vec<LoadedTensor<'_>>> {
        if self.as_bytes().is_none() {
            // By ranges: one by one, each fetched ahead of the next as `load` does.
            return names
                .iter()
                .map(|n| {
                    self.load(n)?.ok_or_else(|| Error::NotFound {
                        name: name::display(n),
                        path: self.path().to_string(),
                    })
                })
                .collect();
        }
        // Whole tensors are looked up first and their checksums checked together, in
        // parallel; a tensor stored in slices is assembled by `load`.
        let mut views = Vec::with_capacity(names.len());
        for n in names {
            match self.get(n) {
                Ok(Some(v)) => views.push(Some(v)),
                Ok(None) => {
                    return Err(Error::NotFound {
                        name: name::display(n),
                        path: self.path().to_string(),
                    })
                }
                Err(Error::Sliced { .. }) => views.push(None),
                Err(e) => return Err(e),
            }
        }
        let whole: Vec<TensorView<'_>> = views.iter().flatten().cloned().collect();
        crate::native::check_crcs(&whole, threads, None)?;
        names
            .iter()
            .zip(views)
            .map(|(n, v)| match v {
                Some(t) => loaded(t),
                None => self.assemble(n)?.ok_or_else(|| Error::NotFound {
                    name: name::display(n),
                    path: self.path().to_string(),
                }),
            })
            .collect()
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        // The tensor's own index block (one request at most by ranges), not a listing of the
        // index from it on.
        self.entry_of(name)?.map(|e| listed(self, e)).transpose()
    }

    fn load_slice(&self, name: &[u8], region: &Region) -> Result<Option<LoadedTensor<'_>>> {
        Ok(self
            .get_slice(name, region)?
            .map(|s| loaded_region(name, s)))
    }

    fn verify(&self, threads: usize) -> Result<VerifySummary> {
        let r = self.verify_with(VerifyOptions {
            load: None,
            threads,
            progress: None,
        })?;
        Ok(VerifySummary {
            tensors: r.tensors,
            data_bytes: r.data_bytes,
            checksums: r.blocks + r.records,
        })
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        Ok(self.data_at(name)?.map(location))
    }

    fn slice_locations(&self, name: &[u8]) -> Result<Vec<SliceLocation>> {
        Ok(self
            .slices_at(name)?
            .into_iter()
            .map(|(region, at)| SliceLocation {
                region,
                location: location(at),
            })
            .collect())
    }

    fn as_native(&self) -> Option<&Reader> {
        Some(self)
    }
}

/// Where a stored tensor's or slice's data is (for a sharded checkpoint, its data file, not
/// the index opened), from [`Reader::data_at`].
fn location((file, offset, len, crc): (String, u64, u64, u32)) -> DataLocation {
    DataLocation {
        path: file.into(),
        offset,
        len,
        crc32c: Some(crc),
    }
}

/// What a listing says of a tensor listed from the index (a tensor stored in slices: its
/// whole shape and bytes); its LoD, when it has one, is read from its record's header.
fn listed(r: &Reader, e: EntryInfo) -> Result<TensorInfo> {
    let lod = if e.lod_levels > 0 {
        r.lod(&e.name)?.ok_or_else(|| Error::NotFound {
            name: name::display(&e.name),
            path: r.path().to_string(),
        })?
    } else {
        Vec::new()
    };
    let nbytes = if e.slices != 0 {
        crate::record::data_len(e.dtype, &e.shape).unwrap_or(0)
    } else {
        e.size
    };
    if e.dtype == DType::Bytes {
        // A bytes value (SPEC.md 6.1): listed as its value, from its entry's size alone.
        return Ok(TensorInfo {
            name: e.name,
            kind: Kind::Bytes,
            shape: Vec::new(),
            lod,
            nbytes: bytes_value::value_len(nbytes).unwrap_or(nbytes),
        });
    }
    Ok(TensorInfo {
        name: e.name,
        kind: Kind::Numeric(e.dtype),
        shape: e.shape,
        lod,
        nbytes,
    })
}

/// A whole stored tensor as the mapped store loads it, its checksum checked by the caller: its
/// description, and its bytes (a bytes value's value, its encoding checked), borrowed from the
/// map. (A reader by ranges loads owned tensors as they were read: `loaded_owned`.)
fn loaded(t: TensorView<'_>) -> Result<LoadedTensor<'_>> {
    Ok(LoadedTensor {
        info: info(&t)?,
        data: TensorData::Bytes(value_of(t)?),
    })
}

/// A region of tensor `name` as a store loads it: its lengths as its shape, no LoD, its bytes
/// borrowed where the reader lent them. Every native store's (mapped or read by ranges).
pub(super) fn loaded_region<'a>(name: &[u8], s: SliceData<'a>) -> LoadedTensor<'a> {
    let info = TensorInfo {
        name: name.to_vec(),
        kind: Kind::Numeric(s.dtype()),
        shape: s.shape().to_vec(),
        lod: Vec::new(),
        nbytes: s.data().len() as u64,
    };
    LoadedTensor {
        info,
        data: TensorData::Bytes(s.into_cow()),
    }
}

/// The data a store gives of a whole stored tensor: its bytes, or a bytes value's value (its
/// encoding checked).
fn value_of(t: TensorView<'_>) -> Result<Cow<'_, [u8]>> {
    if t.dtype() != DType::Bytes {
        return Ok(t.into_data());
    }
    // The value is the end of the data, after its length field.
    let n = t.bytes_value()?.len();
    Ok(match t.into_data() {
        Cow::Borrowed(d) => Cow::Borrowed(&d[d.len() - n..]),
        Cow::Owned(mut d) => {
            d.drain(..d.len() - n);
            Cow::Owned(d)
        }
    })
}

impl Reader {
    /// A tensor stored in slices, assembled, every slice checked against its checksum (a
    /// mapped file's slices checked whole first; by ranges, each slice as it is read).
    fn assemble(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(info) = TensorStore::info(self, name)? else {
            return Ok(None);
        };
        if self.as_bytes().is_some() {
            for piece in self.prefix(name) {
                let piece = piece?;
                if piece.name() != name {
                    break;
                }
                piece.verify_crc()?;
            }
        }
        let Some(whole) = self.get_slice(name, &Region::full(&info.shape))? else {
            return Ok(None);
        };
        Ok(Some(LoadedTensor {
            info,
            data: TensorData::Bytes(Cow::Owned(whole.into_vec())),
        }))
    }
}

/// Tensor `name` as read by ranges (owned, its checksum checked when read), as a store
/// returns it: a bytes value's value (its encoding checked here).
fn loaded_owned(name: &[u8], t: OwnedTensor) -> Result<LoadedTensor<'static>> {
    if t.dtype == DType::Bytes {
        let value = bytes_value::decode(&t.data, &name::display(name), 0)?.to_vec();
        return Ok(LoadedTensor {
            info: TensorInfo {
                name: name.to_vec(),
                kind: Kind::Bytes,
                shape: Vec::new(),
                lod: Vec::new(),
                nbytes: value.len() as u64,
            },
            data: TensorData::Bytes(Cow::Owned(value)),
        });
    }
    Ok(LoadedTensor {
        info: TensorInfo {
            name: name.to_vec(),
            kind: Kind::Numeric(t.dtype),
            shape: t.shape,
            lod: t.lod,
            nbytes: t.data.len() as u64,
        },
        data: TensorData::Bytes(Cow::Owned(t.data)),
    })
}

/// What a listing says of a tensor. Reads only its index entry, unless it has LoD: only then is
/// its record header read (`TensorView::lod`), so listing touches no record of a tensor without.
fn info(t: &TensorView<'_>) -> Result<TensorInfo> {
    if t.dtype() == DType::Bytes {
        return Ok(TensorInfo {
            name: t.name().to_vec(),
            kind: Kind::Bytes,
            shape: Vec::new(),
            lod: Vec::new(),
            nbytes: bytes_value::value_len(t.data().len() as u64).unwrap_or(t.data().len() as u64),
        });
    }
    Ok(TensorInfo {
        name: t.name().to_vec(),
        kind: Kind::Numeric(t.dtype()),
        shape: t.shape().to_vec(),
        lod: t.lod()?.to_vec(),
        nbytes: t.data().len() as u64,
    })
}

/// The registry's detector for native files.
pub(crate) fn open_native(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        // A sharded native checkpoint named by its prefix. A prefix whose PREFIX.index is a
        // TensorFlow index, or a single native file exported for TensorFlow (`export_tf`), is
        // left to the TensorFlow opener.
        let index = crate::native::index_path(path);
        if !index.is_file() {
            return Ok(None);
        }
        return match Reader::open(&index) {
            Ok(r) if r.is_sharded() => Ok(Some(Box::new(r))),
            Ok(_) | Err(Error::UnrecognizedFormat { .. }) => Ok(None),
            Err(e) => Err(e),
        };
    }
    match Reader::open(path) {
        Ok(r) => Ok(Some(Box::new(r))),
        Err(Error::UnrecognizedFormat { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The native exporter: every tensor of the job's store into a new native file, in name order
/// (so the records region is also a Paddle combined stream in Paddle's order), with the job's
/// metadata.
pub(crate) fn export(job: &ExportJob<'_>) -> Result<Written> {
    let tensors = job.store.scan(b"")?.map(|t| t.map(|t| (job.store, t)));
    write_native(
        tensors,
        job.dst,
        job.upload,
        job.writer,
        job.metadata,
        job.progress,
    )
}

/// Most tensors, and bytes of tensors (by their listing), in a window that `write_native`
/// loads while it writes the window before: bounds the memory of inputs that are not mapped.
const WINDOW_TENSORS: usize = 4096;
const WINDOW_BYTES: u64 = 64 << 20;

/// A loaded window: each tensor with its listed size.
type Window<'s> = Vec<(u64, LoadedTensor<'s>)>;

/// Loads a window of tensors, each store's consecutive run with one `load_many`; returns each
/// with its listed size, in the window's order.
fn load_window<'s>(window: &[(&'s dyn TensorStore, TensorInfo)]) -> Result<Window<'s>> {
    let mut out = Vec::with_capacity(window.len());
    let mut i = 0;
    while i < window.len() {
        let store = window[i].0;
        let mut j = i + 1;
        while j < window.len() && std::ptr::addr_eq(window[j].0, store) {
            j += 1;
        }
        let names: Vec<&[u8]> = window[i..j]
            .iter()
            .map(|(_, t)| t.name.as_slice())
            .collect();
        let loaded = store.load_many(&names, 0)?;
        if loaded.len() != names.len() {
            return Err(Error::InvalidArgument(format!(
                "a {} input loaded {} tensors for {} names",
                store.format().name(),
                loaded.len(),
                names.len()
            )));
        }
        out.extend(window[i..j].iter().map(|(_, t)| t.nbytes).zip(loaded));
        i = j;
    }
    Ok(out)
}

/// Writes `tensors` (each loaded from the store beside it, in the order given) and `metadata`
/// into a new native file at `dst`, telling `progress` each tensor's bytes once written: the
/// one native writing loop, shared by [`export`] and `interop::merge`. Streams by windows: at
/// most two windows of tensors in memory (none when the input maps its file).
pub(crate) fn write_native<'s>(
    tensors: impl Iterator<Item = Result<(&'s dyn TensorStore, TensorInfo)>>,
    dst: &Path,
    upload: Option<(&str, &crate::remote::UploadOptions)>,
    opts: &WriterOptions,
    metadata: &Metadata,
    progress: &dyn Progress,
) -> Result<Written> {
    let mut w = match upload {
        #[cfg(feature = "s3")]
        Some((url, up)) => crate::remote::create_writer_with(url, opts.clone(), up)?,
        // No uploads without object storage: the type has no values.
        #[cfg(not(feature = "s3"))]
        Some((_, up)) => match *up {},
        None => Writer::create_with(dst, opts.clone())?,
    };
    w.set_metadata(metadata.clone())?;
    let mut data_bytes = 0u64;
    let mut tensors = tensors;
    // The inputs of the next window of tensors are loaded (and their checksums checked, in
    // parallel where the format can: `TensorStore::load_many`) on a second thread while this
    // one writes the window before.
    std::thread::scope(|s| -> Result<()> {
        let mut ahead: Option<std::thread::ScopedJoinHandle<'_, Result<Window<'s>>>> = None;
        loop {
            let mut window: Vec<(&'s dyn TensorStore, TensorInfo)> = Vec::new();
            let mut bytes = 0u64;
            while window.len() < WINDOW_TENSORS && bytes < WINDOW_BYTES {
                let Some(t) = tensors.next() else { break };
                let t = t?;
                bytes = bytes.saturating_add(t.1.nbytes);
                window.push(t);
            }
            // The previous window's load is joined before the next one starts: one loader at
            // a time (two would interleave their names, which defeats a remote store's
            // read-ahead in name order, and hold a third window in memory).
            let loaded = match ahead.take() {
                Some(h) => Some(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?),
                None => None,
            };
            let next = (!window.is_empty()).then(|| s.spawn(move || load_window(&window)));
            if let Some(loaded) = loaded {
                for (listed, t) in loaded {
                    // Bytes values (a native file's, a TensorFlow scalar string) stay bytes
                    // values (SPEC.md 6.1).
                    if let (Kind::Bytes, TensorData::Bytes(value)) = (&t.info.kind, &t.data) {
                        w.add_bytes(&t.info.name, value)?;
                        data_bytes = data_bytes.saturating_add(value.len() as u64);
                        progress.advance(listed);
                        continue;
                    }
                    // The survey refused what is not numeric; a store whose data disagrees
                    // with its listing is refused here.
                    let (Kind::Numeric(dtype), TensorData::Bytes(data)) = (t.info.kind, &t.data)
                    else {
                        return Err(Error::Unsupported(format!(
                            "tensor {} is not numeric; paramdex files hold numeric tensors only \
                             (SPEC.md section 6)",
                            name::display(&t.info.name)
                        )));
                    };
                    w.add(
                        &t.info.name,
                        Tensor::new(dtype, &t.info.shape, data).with_lod(&t.info.lod),
                    )?;
                    data_bytes = data_bytes.saturating_add(data.len() as u64);
                    progress.advance(listed);
                }
            }
            match next {
                Some(h) => ahead = Some(h),
                None => return Ok(()),
            }
        }
    })?;
    let stats = w.finish()?;
    Ok(Written {
        tensors: stats.tensors,
        data_bytes,
        paths: vec![dst.to_path_buf()],
        output_bytes: stats.file_len,
        native: Some(stats),
        notes: Vec::new(),
    })
}

/// The layout of a native file of `file_len` bytes with `header` and index `table`, from a path
/// or a URL alike.
pub(crate) fn native_layout(
    header: &crate::native::FileHeader,
    file_len: u64,
    table: TableFigures,
) -> StoreLayout {
    let index_start = table.first_data_offset;
    StoreLayout {
        file_bytes: Some(file_len),
        format_version: Some(header.format_version),
        records_bytes: Some(header.records_len),
        dead_bytes: Some(index_start.saturating_sub(header.records_len)),
        alignment: Some(header.alignment),
        records_sorted: Some(header.records_sorted),
        index_bytes: Some(file_len.saturating_sub(index_start)),
        shards: Some(header.shards.len().max(1) as u64),
        table: Some(table),
        ..StoreLayout::default()
    }
}

/// `layout` with the data files of the sharded checkpoint at `prefix` (a path or a URL) whose
/// index header is `header`, data file `k` at `location(k)`.
pub(crate) fn with_data_files(
    mut layout: StoreLayout,
    header: &crate::native::FileHeader,
    prefix: String,
    location: impl Fn(u32) -> String,
) -> StoreLayout {
    layout.data_files = (0u32..)
        .zip(&header.shards)
        .map(|(k, s)| DataFileLayout {
            location: location(k),
            shard: *s,
        })
        .collect();
    layout.checkpoint_prefix = Some(prefix);
    layout
}
