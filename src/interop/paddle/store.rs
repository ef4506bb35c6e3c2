//! [`PaddleStore`]: the [`TensorStore`] over Paddle models, tensor files and per-variable
//! directories.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::interop::store::{
    scan_sorted, DataLocation, Format, LoadedTensor, TensorData, TensorInfo, TensorInfos,
    TensorStore, VerifySummary,
};
use crate::name::display;
use crate::native::Source;
use crate::record::{decode_record, validate_lod};

use super::combined::{self, RecType, RecordInfo};
use super::program::Program;

/// Files at most this large are read into memory when first loaded; larger ones are mapped.
const READ_INTO_MEMORY: u64 = 64 * 1024;

/// One file a store reads, opened (mapped or read) on first use.
#[derive(Debug)]
pub(crate) struct FileSlot {
    pub(crate) path: PathBuf,
    /// Length when the store was opened.
    pub(crate) len: u64,
    pub(crate) src: OnceLock<Source>,
}

impl FileSlot {
    /// A slot whose bytes are already at hand.
    pub(crate) fn with_source(path: PathBuf, src: Source) -> FileSlot {
        let slot = FileSlot {
            path,
            len: src.len() as u64,
            src: OnceLock::new(),
        };
        let _ = slot.src.set(src);
        slot
    }

    /// A slot opened on first use.
    pub(crate) fn lazy(path: PathBuf, len: u64) -> FileSlot {
        FileSlot {
            path,
            len,
            src: OnceLock::new(),
        }
    }

    /// The file's bytes, opening it if needed, checked to have the length seen at open.
    fn bytes(&self) -> Result<&[u8]> {
        if let Some(s) = self.src.get() {
            return Ok(s);
        }
        let src = if self.len <= READ_INTO_MEMORY {
            let b = std::fs::read(&self.path)
                .map_err(|e| Error::io(format!("reading {}", self.path.display()), e))?;
            Source::Memory(b.into())
        } else {
            Source::map(&self.path)?
        };
        if src.len() as u64 != self.len {
            return Err(Error::corrupt(
                "tensor file",
                0,
                format!(
                    "{}: the file changed since it was opened ({} bytes then, {} now)",
                    self.path.display(),
                    self.len,
                    src.len()
                ),
            ));
        }
        // Another thread may have won the race; either source holds the same bytes.
        Ok(self.src.get_or_init(|| src))
    }
}

/// One tensor: where its record is and what its header says.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) name: Vec<u8>,
    /// Index into [`PaddleStore::files`].
    pub(crate) file: usize,
    pub(crate) rec: RecordInfo,
}

/// The tensors of a Paddle model (program + combined `.pdiparams`), a single tensor file, or a
/// directory of per-variable files. Names are bytewise sorted; data is read zero-copy from the
/// mapped files. Opened by [`super::open_store`] and the `open_*` functions of [`super`].
#[derive(Debug)]
pub struct PaddleStore {
    format: Format,
    /// The model's program, if any.
    program: Option<Program>,
    files: Vec<FileSlot>,
    /// Sorted by name, unique.
    entries: Vec<Entry>,
}

impl PaddleStore {
    pub(crate) fn new(
        format: Format,
        program: Option<Program>,
        files: Vec<FileSlot>,
        mut entries: Vec<Entry>,
    ) -> Result<PaddleStore> {
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = entries.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(Error::DuplicateName {
                name: display(&w[0].name),
            });
        }
        Ok(PaddleStore {
            format,
            program,
            files,
            entries,
        })
    }

    /// The program (`.pdmodel` / `.json`) the parameter names came from, for a model.
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }

    /// The data files read (the `.pdiparams`, the tensor file, or each per-variable file).
    pub fn files(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|f| f.path.as_path())
    }

    /// The tensor names in bytewise order.
    pub fn names(&self) -> impl Iterator<Item = &[u8]> {
        self.entries.iter().map(|e| e.name.as_slice())
    }

    /// Where a tensor's record is: (file, record offset, record length).
    pub fn record_location(&self, name: &[u8]) -> Option<(&Path, u64, u64)> {
        let e = self.find(name)?;
        let len = (e.rec.header_len as u64).saturating_add(e.rec.data_len);
        Some((self.files[e.file].path.as_path(), e.rec.offset, len))
    }

    fn find(&self, name: &[u8]) -> Option<&Entry> {
        self.entries
            .binary_search_by(|e| e.name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.entries[i])
    }

    fn info(e: &Entry) -> TensorInfo {
        TensorInfo {
            name: e.name.clone(),
            kind: e.rec.dtype.kind(),
            shape: e.rec.dims.clone(),
            lod: e.rec.lod.clone(),
            nbytes: e.rec.data_len,
        }
    }

    /// The data of `e`, re-decoding its record when its file was opened lazily (so a file
    /// replaced since open is noticed rather than misread).
    fn data(&self, e: &Entry) -> Result<&[u8]> {
        let slot = &self.files[e.file];
        let buf = slot.bytes()?;
        let start = usize::try_from(e.rec.offset)
            .ok()
            .filter(|&s| s <= buf.len())
            .ok_or_else(|| {
                Error::corrupt("record", e.rec.offset, "record offset beyond the file")
            })?;
        let (again, data) = if let RecType::Foreign(_) = e.rec.dtype {
            // A record of a type paramdex does not know fills its file.
            let mut r = combined::foreign_record(&buf[start..], &slot.path, &e.name)?;
            r.offset = e.rec.offset;
            let data = buf
                .get(start.saturating_add(r.header_len)..)
                .unwrap_or_default();
            (r, data)
        } else {
            let (h, data) = decode_record(&buf[start..], e.rec.offset)
                .map_err(|err| combined::in_file(err, &slot.path, &e.name))?;
            let r = RecordInfo {
                offset: e.rec.offset,
                header_len: h.header_len,
                data_len: h.data_len,
                dtype: RecType::Known(h.dtype),
                dims: h.dims.to_vec(),
                lod: h.lod.to_vec(),
            };
            (r, data)
        };
        if again != e.rec {
            return Err(Error::corrupt(
                "record",
                e.rec.offset,
                format!(
                    "{}: tensor {}: the record changed since the file was opened",
                    slot.path.display(),
                    display(&e.name)
                ),
            ));
        }
        Ok(data)
    }
}

impl TensorStore for PaddleStore {
    fn format(&self) -> Format {
        self.format
    }

    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        Ok(scan_sorted(self.list()?, start))
    }

    fn list(&self) -> Result<Vec<TensorInfo>> {
        Ok(self.entries.iter().map(Self::info).collect())
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        let Some(e) = self.find(name) else {
            return Ok(None);
        };
        let data = self.data(e)?;
        Ok(Some(LoadedTensor {
            info: Self::info(e),
            data: TensorData::Bytes(Cow::Borrowed(data)),
        }))
    }

    /// Re-reads every record: it must still decode to what was seen at open (for a model, the
    /// whole `.pdiparams` is walked again against the program), and its LoD must satisfy
    /// Paddle's rules. Paddle files carry no checksums, so `checksums` is 0.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        if let (Format::PaddleModel, Some(p), Some(slot)) =
            (self.format, &self.program, self.files.first())
        {
            // A model has exactly one data file, the .pdiparams.
            let again = combined::match_records(slot.bytes()?, &slot.path, p)?;
            if again.len() != self.entries.len() {
                return Err(Error::corrupt(
                    "parameter file",
                    0,
                    format!("{}: record count changed", slot.path.display()),
                ));
            }
        }
        let mut sum = VerifySummary::default();
        for e in &self.entries {
            let data = self.data(e)?;
            if let Err(why) = validate_lod(&e.rec.lod, &e.rec.dims) {
                return Err(Error::corrupt(
                    "record",
                    e.rec.offset,
                    format!(
                        "{}: tensor {}: invalid LoD: {why}",
                        self.files[e.file].path.display(),
                        display(&e.name)
                    ),
                ));
            }
            sum.tensors += 1;
            sum.data_bytes += data.len() as u64;
        }
        Ok(sum)
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        Ok(self.find(name).map(|e| DataLocation {
            path: self.files[e.file].path.clone(),
            offset: e.rec.offset.saturating_add(e.rec.header_len as u64),
            len: e.rec.data_len,
            crc32c: None,
        }))
    }

    fn program_file(&self) -> Option<&Path> {
        self.program.as_ref().map(|p| p.path.as_path())
    }
}
