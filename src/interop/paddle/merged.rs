//! Paddle's size-prefixed merged parameter file, from Paddle's design document "Merging all
//! params in a single file": every record (a plain DenseTensor record, SPEC.md section 3) is
//! preceded by its byte length as a `u64` little-endian, so that a loader reaches the k-th
//! parameter by hopping k size fields instead of parsing the k records before it.
//!
//! ```text
//! u64 LE  size of record 0      | record 0 (size bytes) |
//! u64 LE  size of record 1      | record 1 (size bytes) | ... to the end of the file
//! ```
//!
//! There is no header, count, name or trailer. [`open_merged_store`] claims a file by content
//! (see [`claims`]); [`MergedStore`] holds the offsets of every record (built at open by hopping
//! the size fields, which detection has to do anyway) and decodes a record only when it is
//! read, so [`MergedStore::record`] reaches record k in O(1) without decoding any other.
//! Names come from a program beside the file (`STEM.json`, else `STEM.pdmodel`, `STEM` being
//! the file's path without its extension), matched to the records by counter in bytewise name
//! order as `load_combine` matches them; without a program the k-th record is named `#k`.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::interop::store::{
    DataLocation, Format, LoadedTensor, TensorData, TensorInfo, TensorInfos, TensorStore,
    VerifySummary,
};
use crate::name::display;
use crate::native::Source;
use crate::record::{decode_foreign_header, decode_head, decode_record, validate_lod};

use super::combined::{describe, with_context, RecType, MIN_RECORD_LEN};
use super::find_program;
use super::program::{load_program, Program};

/// Bytes of the size field before each record.
pub const SIZE_FIELD_LEN: u64 = 8;

/// Smallest record size a size field may give: the smallest Paddle record (versions, LoD
/// level count, desc size, a 2-byte desc, no data).
pub const MIN_MERGED_RECORD_LEN: u64 = MIN_RECORD_LEN;

/// Largest record size a size field may give: Paddle writes records to a C++ stream whose
/// sizes are `int64` (`streamsize`), so a larger size is not a size Paddle wrote.
pub const MAX_MERGED_RECORD_LEN: u64 = i64::MAX as u64;

/// Where one record of a merged file is: the offset of its size field, and the record's
/// offset and length as the size field gives them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MergedRecord {
    /// File offset of the record's size field.
    pub size_offset: u64,
    /// File offset of the record's first byte (`size_offset + 8`).
    pub offset: u64,
    /// The record's length, as its size field says.
    pub len: u64,
}

/// Reads the size field at `pos` (the field of record `k`) and checks it against the file:
/// at least [`MIN_MERGED_RECORD_LEN`], at most [`MAX_MERGED_RECORD_LEN`], and inside the file.
///
/// # Errors
///
/// [`Error::Corrupt`] naming `path`, the record's counter and the size field's offset: of kind
/// [`Corruption::Truncated`](crate::Corruption::Truncated) for a size field cut short and for
/// a size running past the end of the file, [`Corruption::Other`](crate::Corruption::Other)
/// for a size above the limit or below the smallest record.
pub fn size_field(buf: &[u8], pos: u64, k: u64, path: &Path) -> Result<MergedRecord> {
    let len = buf.len() as u64;
    // Made only for an error: a hop is a few instructions otherwise.
    let mk_ctx = || format!("{}: record {k}", path.display());
    let remain = len.saturating_sub(pos);
    let field = usize::try_from(pos)
        .ok()
        .and_then(|p| buf.get(p..p.checked_add(8)?));
    let Some(field) = field else {
        let ctx = mk_ctx();
        return Err(Error::truncated(
            "size field",
            pos,
            format!(
                "{ctx}: truncated size field: 8 bytes needed, {remain} remain at the end of the \
                 file"
            ),
        ));
    };
    let mut b = [0u8; 8];
    b.copy_from_slice(field);
    let size = u64::from_le_bytes(b);
    if size > MAX_MERGED_RECORD_LEN {
        let ctx = mk_ctx();
        return Err(Error::corrupt(
            "size field",
            pos,
            format!(
                "{ctx}: record size {size} is above the limit of {MAX_MERGED_RECORD_LEN} (a \
                 Paddle stream size is an int64)"
            ),
        ));
    }
    if size < MIN_MERGED_RECORD_LEN {
        let ctx = mk_ctx();
        return Err(Error::corrupt(
            "size field",
            pos,
            format!(
                "{ctx}: record size {size} is below the smallest record ({MIN_MERGED_RECORD_LEN} bytes)"
            ),
        ));
    }
    // pos + 8 <= len here, as the field was read.
    let offset = pos + SIZE_FIELD_LEN;
    let after = len - offset;
    if size > after {
        let ctx = mk_ctx();
        return Err(Error::truncated(
            "size field",
            pos,
            format!(
                "{ctx}: record size {size} runs past the end of the file ({after} bytes remain \
                 after the size field): the file is cut short or the size is wrong"
            ),
        ));
    }
    Ok(MergedRecord {
        size_offset: pos,
        offset,
        len: size,
    })
}

/// Hops the size fields from the start of `buf` to record `k`, reading `k + 1` size fields and
/// no record: O(k) reads of 8 bytes. `Ok(None)` when the file ends after fewer records.
///
/// # Errors
///
/// As [`size_field`], for any of the fields hopped.
pub fn hop(buf: &[u8], k: u64, path: &Path) -> Result<Option<MergedRecord>> {
    let mut pos = 0u64;
    let mut i = 0u64;
    while pos < buf.len() as u64 {
        let r = size_field(buf, pos, i, path)?;
        if i == k {
            return Ok(Some(r));
        }
        pos = r.offset + r.len;
        i += 1;
    }
    Ok(None)
}

/// Every record of a merged file, in counter order, by hopping the size fields: the sizes must
/// chain exactly to the end of the file. No record is decoded.
///
/// # Errors
///
/// As [`size_field`]; a truncated size field is what bytes after the last record that are
/// fewer than a size field are.
pub fn record_table(buf: &[u8], path: &Path) -> Result<Vec<MergedRecord>> {
    let len = buf.len() as u64;
    // Grown as records are found (each takes at least 30 bytes of the file), never reserved
    // from the file's length.
    let mut out = Vec::new();
    let mut pos = 0u64;
    while pos < len {
        let r = size_field(buf, pos, out.len() as u64, path)?;
        pos = r.offset + r.len;
        out.push(r);
    }
    Ok(out)
}

/// Whether `buf` is a merged file, judged by its content alone: the bytes after the first
/// size field are the whole header of a Paddle record, well formed: outer version 0, at most
/// [`crate::record::MAX_LOD_LEVELS`] LoD levels each a multiple of 8 bytes and inside the
/// file, inner version 0, a desc size inside the file and below
/// [`crate::record::MAX_DESC_LEN`], and a tensor desc that parses with non-negative dims (its
/// data type known or not). Only the record's data may be missing (a file cut short) or disagree with
/// the size field (a damaged size), which [`open_merged`] then reports as damage: a file is
/// claimed, and its errors are called corruption, only when its first record is beyond doubt a
/// Paddle record.
///
/// So no zip archive (a `torch.save` file), pickle or text is claimed: their bytes after the
/// first eight fail the header long before a desc parses (a zip's local header gives a desc
/// size of its entry name's length times 65536, whose bytes are no tensor desc). A plain
/// record stream (a `.pdiparams`, a tensor file, a native file) is not claimed either: its
/// first four bytes are an outer version 0, which no size field of a record below 4 GiB has,
/// and a record does not decode eight bytes into it; such a first word is taken for a size
/// only when the record after it decodes whole and is exactly that size.
pub fn claims(buf: &[u8]) -> bool {
    let Some((field, rest)) = buf.split_first_chunk::<8>() else {
        return false;
    };
    if field[..4] == [0; 4] {
        let size = u64::from_le_bytes(*field);
        return decode_record(rest, SIZE_FIELD_LEN).is_ok_and(|(h, data)| {
            (h.header_len as u64).saturating_add(data.len() as u64) == size
        });
    }
    decode_head(rest, SIZE_FIELD_LEN).is_ok()
        || decode_foreign_header(rest, SIZE_FIELD_LEN).is_ok_and(|h| h.is_some())
}

/// The program that names the records of the merged file `path`: `STEM.json`, else
/// `STEM.pdmodel`, where `STEM` is `path` without its extension (the file itself excepted).
pub fn merged_program_path(path: &Path) -> Option<PathBuf> {
    find_program(&path.with_extension("")).filter(|p| p != path)
}

/// Opens `path` as a merged file if it is one ([`claims`]), or `Ok(None)`.
///
/// # Errors
///
/// As [`open_merged`], for a file that is claimed.
pub fn open_merged_store(path: &Path) -> Result<Option<Box<dyn TensorStore>>> {
    if !path.is_file() {
        return Ok(None);
    }
    let src = Source::map(path)?;
    if !claims(&src) {
        return Ok(None);
    }
    open_with(path, src).map(|s| Some(Box::new(s) as Box<dyn TensorStore>))
}

/// Opens the merged file `path` (whatever its content looks like): hops every size field,
/// decodes the first record, and takes the names from the program beside it, if any
/// ([`merged_program_path`]).
///
/// # Errors
///
/// [`Error::UnrecognizedFormat`] for an empty file; [`Error::Corrupt`] naming the file, the
/// record's counter and the offset for a size field cut short, above the limit or past the
/// end, and a first record that does not decode or whose length is not its size; a program
/// beside the file that does not parse, or lists another number of parameters than the file
/// holds records, or declares another dtype or shape for the first; I/O errors.
pub fn open_merged(path: &Path) -> Result<MergedStore> {
    open_with(path, Source::map(path)?)
}

fn open_with(path: &Path, src: Source) -> Result<MergedStore> {
    let program = match merged_program_path(path) {
        Some(p) => Some(load_program(&p)?),
        None => None,
    };
    open_with_program(path, src, program)
}

/// A merged file from its bytes `src`, found at `path` (a path or an object's URL), its
/// records named by `program` when there is one: what [`open_merged`] opens to wherever the
/// file and its program are.
pub(crate) fn open_with_program(
    path: &Path,
    src: Source,
    program: Option<Program>,
) -> Result<MergedStore> {
    if src.is_empty() {
        return Err(Error::UnrecognizedFormat {
            path: path.display().to_string(),
            looks_like: None,
            detail: "the file is empty: a merged parameter file holds at least one record".into(),
        });
    }
    let records = record_table(&src, path)?;
    let names: Option<Vec<Vec<u8>>> = match &program {
        Some(p) => {
            if p.params.len() != records.len() {
                return Err(Error::corrupt(
                    "parameter file",
                    0,
                    format!(
                        "{}: the program {} lists {} parameters, but the file holds {} records: \
                         names and records do not match",
                        path.display(),
                        p.path.display(),
                        p.params.len(),
                        records.len()
                    ),
                ));
            }
            Some(p.params.iter().map(|d| d.name.clone()).collect())
        }
        // `#k`, made when asked for: no name is held per record.
        None => None,
    };
    let by_name = OnceLock::new();
    if let Some(names) = &names {
        // A program's parameters are in bytewise order, each once (load_program sorts and
        // merges them), as records are matched to them: name order is counter order.
        let mut order: Vec<usize> = (0..records.len()).collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]));
        if let Some(w) = order.windows(2).find(|w| names[w[0]] == names[w[1]]) {
            return Err(Error::DuplicateName {
                name: display(&names[w[0]]),
            });
        }
        let _ = by_name.set(order);
    }
    let store = MergedStore {
        path: path.to_path_buf(),
        src,
        program,
        records,
        names,
        by_name,
    };
    // Detection saw the bytes after the first size field; now the first record must be whole.
    store.decode(0)?;
    Ok(store)
}

/// The decimal digits of `k`, in `buf`.
fn decimal(mut k: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        // k % 10 < 10.
        buf[i] = b'0' + (k % 10) as u8;
        k /= 10;
        if k == 0 {
            return &buf[i..];
        }
    }
}

/// The name of the k-th record of a merged file without a program: `#k`.
pub fn counter_name(k: usize) -> Vec<u8> {
    format!("#{k}").into_bytes()
}

/// The counter `k` of a name `#k` (decimal, no sign, no leading zero but in `#0`).
pub fn parse_counter(name: &[u8]) -> Option<usize> {
    let digits = name.strip_prefix(b"#")?;
    let canonical = match digits {
        [] => false,
        [b'0'] => true,
        [first, ..] => *first != b'0' && digits.iter().all(u8::is_ascii_digit),
    };
    if !canonical || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The [`TensorStore`] over a merged file ([`open_merged`]): records found by hopping size
/// fields, decoded when read.
///
/// A tensor is found by name, and also by counter as `#k` (the k-th record, from 0) when no
/// tensor has that name: a file without a program names its records so, and one with a program
/// still answers `#k` unless the program declares a tensor named `#k`, which then wins.
#[derive(Debug)]
pub struct MergedStore {
    path: PathBuf,
    src: Source,
    program: Option<Program>,
    /// Every record in counter order.
    records: Vec<MergedRecord>,
    /// The name of each record, in counter order, from the program; `None`: `#k`.
    names: Option<Vec<Vec<u8>>>,
    /// Counters in bytewise name order: set at open for a program's names, made on first use
    /// for `#k` names (only a listing needs it).
    by_name: OnceLock<Vec<usize>>,
}

impl MergedStore {
    /// The merged file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The program the names came from, if one is beside the file.
    pub fn program(&self) -> Option<&Program> {
        self.program.as_ref()
    }

    /// How many records the file holds.
    pub fn record_count(&self) -> usize {
        self.records.len()
    }

    /// Where record `k` is (from the table built at open; nothing is read).
    pub fn record_location(&self, k: usize) -> Option<MergedRecord> {
        self.records.get(k).copied()
    }

    /// The name of record `k`: the program's, or `#k`.
    pub fn name_of(&self, k: usize) -> Option<Cow<'_, [u8]>> {
        (k < self.records.len()).then(|| self.name(k))
    }

    /// Counters in bytewise name order.
    fn order(&self) -> &[usize] {
        self.by_name.get_or_init(|| {
            // `#k` names: their order is that of the digits.
            let mut order: Vec<usize> = (0..self.records.len()).collect();
            let (mut x, mut y) = ([0u8; 20], [0u8; 20]);
            order.sort_unstable_by(|&a, &b| decimal(a, &mut x).cmp(decimal(b, &mut y)));
            order
        })
    }

    /// The name of record `k` (`k` in range).
    fn name(&self, k: usize) -> Cow<'_, [u8]> {
        match &self.names {
            Some(n) => Cow::Borrowed(n[k].as_slice()),
            None => Cow::Owned(counter_name(k)),
        }
    }

    /// The counter of the record named `name`, or of `#k` when no record has that name.
    pub fn counter_of(&self, name: &[u8]) -> Option<usize> {
        let found = self.names.as_ref().and_then(|names| {
            let order = self.order();
            order
                .binary_search_by(|&k| names[k].as_slice().cmp(name))
                .ok()
                .map(|i| order[i])
        });
        found.or_else(|| parse_counter(name).filter(|&k| k < self.records.len()))
    }

    /// Record `k` (from 0) by counter: its offset from the table, then that record alone is
    /// decoded. `Ok(None)` past the last record.
    ///
    /// # Errors
    ///
    /// [`Error::Corrupt`] naming the file, the counter and the tensor for a record that does not
    /// decode, whose length is not its size field's, or whose dtype or shape is not what the
    /// program declares. A record of a data type paramdex does not know fills its size and
    /// loads as its stored bytes ([`Kind::Foreign`](crate::interop::Kind::Foreign)).
    pub fn record(&self, k: usize) -> Result<Option<LoadedTensor<'_>>> {
        if k >= self.records.len() {
            return Ok(None);
        }
        let d = self.decode(k)?;
        Ok(Some(LoadedTensor {
            info: self.info_of(k, &d),
            data: TensorData::Bytes(Cow::Borrowed(d.data)),
        }))
    }

    fn info_of(&self, k: usize, h: &Decoded<'_>) -> TensorInfo {
        TensorInfo {
            name: self.name(k).into_owned(),
            kind: h.dtype.kind(),
            shape: h.dims.clone(),
            lod: h.lod.clone(),
            nbytes: h.data.len() as u64,
        }
    }

    /// Decodes record `k`, which must fill its size exactly and agree with the program. A
    /// record whose data type paramdex does not know is taken to fill its size.
    fn decode(&self, k: usize) -> Result<Decoded<'_>> {
        let r = self.records[k];
        let n = self.records.len();
        let mk_ctx = || {
            format!(
                "{}: record {k} of {n} (tensor {})",
                self.path.display(),
                display(&self.name(k))
            )
        };
        // The table checked offset + len <= file length.
        let start = usize::try_from(r.offset)
            .map_err(|_| Error::corrupt("record", r.offset, "offset beyond memory"))?;
        let end = usize::try_from(r.offset + r.len)
            .map_err(|_| Error::corrupt("record", r.offset, "record beyond memory"))?;
        let d = match decode_record(&self.src[start..], r.offset) {
            Ok((h, data)) => Decoded {
                dtype: RecType::Known(h.dtype),
                dims: h.dims.to_vec(),
                lod: h.lod.to_vec(),
                header_len: h.header_len,
                data,
            },
            Err(Error::UnknownDType { .. }) => {
                // Its size field says where it ends; its header must lie inside that size.
                let rec = &self.src[start..end];
                let h = decode_foreign_header(rec, r.offset)
                    .map_err(|e| with_context(e, &mk_ctx()))?
                    .ok_or_else(|| {
                        Error::corrupt("record", r.offset, format!("{}: record changed", mk_ctx()))
                    })?;
                Decoded {
                    dtype: RecType::Foreign(h.code),
                    dims: h.dims.to_vec(),
                    lod: h.lod.to_vec(),
                    header_len: h.header_len,
                    data: &rec[h.header_len..],
                }
            }
            Err(e) => return Err(with_context(e, &mk_ctx())),
        };
        let rec_len = (d.header_len as u64).saturating_add(d.data.len() as u64);
        if rec_len != r.len {
            let ctx = mk_ctx();
            return Err(Error::corrupt(
                "size field",
                r.size_offset,
                format!(
                    "{ctx}: the size field says {} bytes, but the record is {rec_len} bytes",
                    r.len
                ),
            ));
        }
        if let Some(p) = &self.program {
            let decl = &p.params[k];
            if !d.dtype.declared_by(decl, &d.dims) {
                let ctx = mk_ctx();
                return Err(Error::corrupt(
                    "record",
                    r.offset,
                    format!(
                        "{ctx}: the record is {} but the program {} declares {} {:?}: the program \
                         does not belong to this file, or the records are out of order",
                        describe(d.dtype, &d.dims),
                        p.path.display(),
                        decl.dtype.map_or("?", DType::name),
                        decl.dims.as_deref().unwrap_or(&[])
                    ),
                ));
            }
        }
        Ok(d)
    }
}

/// A decoded merged record.
struct Decoded<'a> {
    dtype: RecType,
    dims: Vec<u64>,
    lod: Vec<Vec<u64>>,
    header_len: usize,
    data: &'a [u8],
}

impl TensorStore for MergedStore {
    fn format(&self) -> Format {
        Format::PaddleMerged
    }

    /// Decodes each record's header as the stream reaches it.
    fn scan(&self, start: &[u8]) -> Result<TensorInfos<'_>> {
        let order = self.order();
        let from = order.partition_point(|&k| *self.name(k) < *start);
        Ok(Box::new(order[from..].iter().map(move |&k| {
            self.decode(k).map(|d| self.info_of(k, &d))
        })))
    }

    fn load(&self, name: &[u8]) -> Result<Option<LoadedTensor<'_>>> {
        match self.counter_of(name) {
            Some(k) => self.record(k),
            None => Ok(None),
        }
    }

    fn info(&self, name: &[u8]) -> Result<Option<TensorInfo>> {
        match self.counter_of(name) {
            Some(k) => self.decode(k).map(|d| Some(self.info_of(k, &d))),
            None => Ok(None),
        }
    }

    /// Hops every size field again (they must still chain to the end of the file), decodes
    /// every record (its length must be its size, its dtype and shape the program's), and
    /// checks each LoD against Paddle's rules. No checksums: `checksums` is 0.
    fn verify(&self, _threads: usize) -> Result<VerifySummary> {
        let again = record_table(&self.src, &self.path)?;
        if again != self.records {
            return Err(Error::corrupt(
                "parameter file",
                0,
                format!(
                    "{}: the size fields changed since the file was opened",
                    self.path.display()
                ),
            ));
        }
        let mut sum = VerifySummary::default();
        for k in 0..self.records.len() {
            let d = self.decode(k)?;
            if let Err(why) = validate_lod(&d.lod, &d.dims) {
                return Err(Error::corrupt(
                    "record",
                    self.records[k].offset,
                    format!(
                        "{}: record {k} (tensor {}): invalid LoD: {why}",
                        self.path.display(),
                        display(&self.name(k))
                    ),
                ));
            }
            sum.tensors += 1;
            sum.data_bytes += d.data.len() as u64;
        }
        Ok(sum)
    }

    fn data_location(&self, name: &[u8]) -> Result<Option<DataLocation>> {
        let Some(k) = self.counter_of(name) else {
            return Ok(None);
        };
        let d = self.decode(k)?;
        Ok(Some(DataLocation {
            path: self.path.clone(),
            offset: self.records[k].offset + d.header_len as u64,
            len: d.data.len() as u64,
            crc32c: None,
        }))
    }

    fn program_file(&self) -> Option<&Path> {
        self.program.as_ref().map(|p| p.path.as_path())
    }
}
