//! The parse of a GGUF file's head (v2 and v3, little-endian): the header, the key/value
//! metadata, the tensor infos, the data section's start. Its own file: it is the part of GGUF
//! that reads untrusted bytes, and the fuzz target drives it directly.
//!
//! Layout (all little-endian): `GGUF`, `u32` version, `u64` tensor count, `u64` key/value count;
//! the key/value pairs (a string key, a `u32` value type, the value); the tensor infos (a string
//! name, a `u32` dimension count, that many `u64` dimensions, innermost first, a `u32` ggml type,
//! a `u64` offset into the data section); padding to `general.alignment` (32 when absent); the
//! data section. A string is a `u64` length and that many bytes; an array a `u32` element type,
//! a `u64` count and the elements.
//!
//! Every count, length and offset is checked against the bytes left before it is used or
//! anything is allocated for it, with checked arithmetic: a hostile file is an error naming what
//! is wrong and where, never a panic or an allocation beyond the file's own size. Values are
//! walked, not decoded: a key's value is kept as its type and offset, and decoded only when the
//! metadata is asked for ([`super::value`]), so listing a file with a 150k-token vocabulary does
//! not build 150k strings.

use crate::error::Error;
use crate::name;

use super::types::GgmlType;

/// The magic a GGUF file starts with.
pub const MAGIC: &[u8; 4] = b"GGUF";
/// The data alignment of a file without `general.alignment`.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions a tensor info may declare (ggml itself has 4).
pub const MAX_DIMS: u32 = 8;
/// Deepest nesting of arrays in a value (an array of arrays is depth 2).
pub const MAX_ARRAY_DEPTH: usize = 16;
/// Longest key, in bytes (paramdex metadata's limit).
pub const MAX_KEY_LEN: u64 = crate::native::meta_limits::MAX_KEY_LEN as u64;

/// Value type numbers (`gguf_type`).
pub(crate) mod vt {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The fixed size of a value type, `None` for strings and arrays (and unknown types).
pub(crate) fn fixed_size(ty: u32) -> Option<u64> {
    match ty {
        vt::U8 | vt::I8 | vt::BOOL => Some(1),
        vt::U16 | vt::I16 => Some(2),
        vt::U32 | vt::I32 | vt::F32 => Some(4),
        vt::U64 | vt::I64 | vt::F64 => Some(8),
        _ => None,
    }
}

/// The name of a value type, for messages.
pub fn value_type_name(ty: u32) -> &'static str {
    match ty {
        vt::U8 => "uint8",
        vt::I8 => "int8",
        vt::U16 => "uint16",
        vt::I16 => "int16",
        vt::U32 => "uint32",
        vt::I32 => "int32",
        vt::F32 => "float32",
        vt::BOOL => "bool",
        vt::STRING => "string",
        vt::ARRAY => "array",
        vt::U64 => "uint64",
        vt::I64 => "int64",
        vt::F64 => "float64",
        _ => "unknown",
    }
}

/// One key/value pair, its value not decoded.
#[derive(Clone, Debug)]
pub(crate) struct Kv {
    /// The key's bytes (UTF-8 in every file gguf-py or llama.cpp writes).
    pub key: Vec<u8>,
    /// The value type.
    pub ty: u32,
    /// Offset of the value (after its type) in the file.
    pub at: u64,
}

/// One tensor info.
#[derive(Clone, Debug)]
pub(crate) struct TensorEntry {
    /// The name's bytes.
    pub name: Vec<u8>,
    /// The ggml type.
    pub ty: &'static GgmlType,
    /// Row-major shape: ggml's `ne`, reversed.
    pub shape: Vec<u64>,
    /// The offset the info stores, into the data section.
    pub rel_offset: u64,
    /// Absolute offset of the data in the file.
    pub offset: u64,
    /// Bytes of data.
    pub nbytes: u64,
}

/// A parsed GGUF head.
#[derive(Clone, Debug)]
pub(crate) struct Header {
    /// The file, for messages.
    pub path: String,
    /// 2 or 3.
    pub version: u32,
    /// The file's length.
    pub file_len: u64,
    /// The data alignment (`general.alignment`, or 32).
    pub alignment: u64,
    /// The key/value pairs, in file order.
    pub kvs: Vec<Kv>,
    /// The tensor infos, in file order.
    pub tensors: Vec<TensorEntry>,
    /// Indices into `tensors`, in bytewise name order.
    pub sorted: Vec<usize>,
    /// Offset of the data section.
    pub data_start: u64,
}

/// Why a parse stopped: an error of the file, or (reading a file's head, not all of it) the
/// bytes up to this offset are needed first.
#[derive(Debug)]
pub(crate) enum Stop {
    /// The file is not a GGUF file this reader accepts.
    Bad(Error),
    /// Read the file up to this offset, then parse again.
    Need(u64),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Stop {
        Stop::Bad(e)
    }
}

type Parse<T> = std::result::Result<T, Stop>;

/// A reader over a file's first bytes, which knows the whole file's length: a read past the
/// file is an error, a read past the bytes held is [`Stop::Need`].
struct Cursor<'a> {
    buf: &'a [u8],
    pos: u64,
    file_len: u64,
    path: &'a str,
}

impl<'a> Cursor<'a> {
    fn left(&self) -> u64 {
        self.file_len.saturating_sub(self.pos)
    }

    fn take(&mut self, n: u64, what: &'static str, of: &dyn Fn() -> String) -> Parse<&'a [u8]> {
        let end = match self.pos.checked_add(n) {
            Some(e) if e <= self.file_len => e,
            _ => {
                return Err(Stop::Bad(Error::truncated(
                    what,
                    self.pos,
                    format!(
                        "{}: {} needs {n} bytes, {} are left in the {}-byte file",
                        self.path,
                        of(),
                        self.left(),
                        self.file_len
                    ),
                )))
            }
        };
        if end > self.buf.len() as u64 {
            return Err(Stop::Need(end));
        }
        // Both within `buf` (checked just above), so within `usize`.
        let s = &self.buf[self.pos as usize..end as usize];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self, what: &'static str, of: &dyn Fn() -> String) -> Parse<u32> {
        let b = self.take(4, what, of)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &'static str, of: &dyn Fn() -> String) -> Parse<u64> {
        let b = self.take(8, what, of)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A string of at most `max` bytes.
    fn string(&mut self, max: u64, what: &'static str, of: &dyn Fn() -> String) -> Parse<&'a [u8]> {
        let at = self.pos;
        let len = self.u64(what, of)?;
        if len > max {
            return Err(Stop::Bad(Error::corrupt(
                what,
                at,
                format!(
                    "{}: {} is {len} bytes long, above the limit of {max}",
                    self.path,
                    of()
                ),
            )));
        }
        self.take(len, what, of)
    }

    /// Walks over one value of type `ty` (an array's elements included) without decoding it.
    fn skip_value(&mut self, ty: u32, depth: usize, of: &dyn Fn() -> String) -> Parse<()> {
        const WHAT: &str = "gguf metadata";
        if let Some(n) = fixed_size(ty) {
            self.take(n, WHAT, of)?;
            return Ok(());
        }
        match ty {
            vt::STRING => {
                self.string(u64::MAX, WHAT, of)?;
                Ok(())
            }
            vt::ARRAY => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(Stop::Bad(Error::corrupt(
                        WHAT,
                        self.pos,
                        format!(
                            "{}: {} nests arrays deeper than {MAX_ARRAY_DEPTH}",
                            self.path,
                            of()
                        ),
                    )));
                }
                let at = self.pos;
                let elem = self.u32(WHAT, of)?;
                let count = self.u64(WHAT, of)?;
                // The least bytes an element takes: its fixed size, a string's length, an
                // array's type and count. Checked before walking so a huge count fails at once.
                let least = match (fixed_size(elem), elem) {
                    (Some(n), _) => n,
                    (None, vt::STRING) => 8,
                    (None, vt::ARRAY) => 12,
                    _ => {
                        return Err(Stop::Bad(Error::corrupt(
                            WHAT,
                            at,
                            format!(
                                "{}: {} is an array of unknown value type {elem}",
                                self.path,
                                of()
                            ),
                        )))
                    }
                };
                match count.checked_mul(least) {
                    Some(n) if n <= self.left() => {}
                    _ => {
                        return Err(Stop::Bad(Error::corrupt(
                            WHAT,
                            at,
                            format!(
                                "{}: {} declares {count} elements of {}, more than the {} bytes \
                                 left in the file can hold",
                                self.path,
                                of(),
                                value_type_name(elem),
                                self.left()
                            ),
                        )))
                    }
                }
                if let Some(n) = fixed_size(elem) {
                    // count × n ≤ left: checked just above.
                    self.take(count * n, WHAT, of)?;
                } else {
                    for _ in 0..count {
                        self.skip_value(elem, depth + 1, of)?;
                    }
                }
                Ok(())
            }
            _ => Err(Stop::Bad(Error::corrupt(
                WHAT,
                self.pos.saturating_sub(4),
                format!("{}: {} has unknown value type {ty}", self.path, of()),
            ))),
        }
    }
}

/// Whether `head` starts like a GGUF file: the magic.
pub fn starts_like(head: &[u8]) -> bool {
    head.starts_with(MAGIC)
}

impl Header {
    /// Parses the head of the GGUF file of `file_len` bytes whose first bytes are `buf` (the
    /// whole file, or its start: [`Stop::Need`] then says how much more to read).
    pub(crate) fn parse(buf: &[u8], file_len: u64, path: &str) -> Parse<Header> {
        let mut c = Cursor {
            buf,
            pos: 0,
            file_len,
            path,
        };
        let head = || "the header".to_string();
        let magic = c.take(4, "gguf header", &head)?;
        if magic != MAGIC {
            return Err(Stop::Bad(Error::Corrupt {
                what: "gguf header",
                offset: 0,
                kind: crate::error::Corruption::BadMagic,
                detail: format!("{path}: does not start with GGUF"),
            }));
        }
        let version = c.u32("gguf header", &head)?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(Stop::Bad(Error::Unsupported(format!(
                    "{path}: GGUF version 1 (32-bit counts, before August 2023) is not read; \
                     convert it with a current llama.cpp"
                ))))
            }
            v if v.swap_bytes() <= 3 && v.swap_bytes() > 0 => {
                return Err(Stop::Bad(Error::Unsupported(format!(
                    "{path}: a big-endian GGUF file (version {}); only little-endian GGUF is \
                     read",
                    v.swap_bytes()
                ))))
            }
            v => {
                return Err(Stop::Bad(Error::corrupt(
                    "gguf header",
                    4,
                    format!("{path}: GGUF version {v} is unknown (2 and 3 are read)"),
                )))
            }
        }
        let n_tensors = c.u64("gguf header", &head)?;
        let n_kv = c.u64("gguf header", &head)?;
        // Each key/value pair takes at least 13 bytes (key length, type, one byte of value),
        // each tensor info at least 24 (name length, dimension count, type, offset).
        let left = c.left();
        if n_kv.checked_mul(13).is_none_or(|n| n > left) {
            return Err(Stop::Bad(Error::limit(
                "gguf key/value count (at 13 bytes each, at most the bytes left in the file)",
                n_kv,
                left / 13,
                Some(16),
            )));
        }
        if n_tensors.checked_mul(24).is_none_or(|n| n > left) {
            return Err(Stop::Bad(Error::limit(
                "gguf tensor count (at 24 bytes each, at most the bytes left in the file)",
                n_tensors,
                left / 24,
                Some(8),
            )));
        }
        let kv_start = c.pos;
        // Bounded by the bytes held, not only by the file's length (an object's may be far
        // more than is read of it).
        let held = (buf.len() as u64).saturating_sub(c.pos);
        let mut kvs: Vec<Kv> = Vec::with_capacity(n_kv.min(held / 13) as usize);
        let mut alignment = DEFAULT_ALIGNMENT;
        for i in 0..n_kv {
            let key_at = c.pos;
            let key = c
                .string(MAX_KEY_LEN, "gguf metadata", &|| format!("key {i}"))?
                .to_vec();
            let shown = name::display(&key);
            let of = || format!("key {shown}");
            if key.is_empty() {
                return Err(Stop::Bad(Error::corrupt(
                    "gguf metadata",
                    key_at,
                    format!("{path}: key {i} is empty"),
                )));
            }
            let ty = c.u32("gguf metadata", &of)?;
            let at = c.pos;
            c.skip_value(ty, 0, &of)?;
            if key == b"general.alignment" {
                alignment = read_alignment(buf, ty, at, path)?;
            }
            kvs.push(Kv { key, ty, at });
        }
        let kv_end = c.pos;
        {
            let mut keys: Vec<&[u8]> = kvs.iter().map(|k| k.key.as_slice()).collect();
            keys.sort_unstable();
            if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
                return Err(Stop::Bad(Error::corrupt(
                    "gguf metadata",
                    kv_start,
                    format!("{path}: key {} appears twice", name::display(w[0])),
                )));
            }
        }
        let held = (buf.len() as u64).saturating_sub(c.pos);
        let mut tensors: Vec<TensorEntry> = Vec::with_capacity(n_tensors.min(held / 24) as usize);
        for i in 0..n_tensors {
            let info_at = c.pos;
            let name = c
                .string(name::MAX_NAME_LEN as u64, "gguf tensor info", &|| {
                    format!("tensor info {i}")
                })?
                .to_vec();
            let shown = name::display(&name);
            let of = || format!("tensor {shown}");
            let n_dims = c.u32("gguf tensor info", &of)?;
            if n_dims > MAX_DIMS {
                return Err(Stop::Bad(Error::corrupt(
                    "gguf tensor info",
                    info_at,
                    format!("{path}: tensor {shown} has {n_dims} dimensions (at most {MAX_DIMS})"),
                )));
            }
            let mut ne = Vec::with_capacity(n_dims as usize);
            for _ in 0..n_dims {
                let d = c.u64("gguf tensor info", &of)?;
                // ggml's dimensions are `int64_t`.
                if d > i64::MAX as u64 {
                    return Err(Stop::Bad(Error::corrupt(
                        "gguf tensor info",
                        info_at,
                        format!("{path}: tensor {shown} has dimension {d} (at most i64::MAX)"),
                    )));
                }
                ne.push(d);
            }
            let ty_at = c.pos;
            let code = c.u32("gguf tensor info", &of)?;
            let ty = GgmlType::from_code(code).ok_or_else(|| Error::UnknownDType {
                system: super::types::GGML,
                code: code.into(),
                location: Some(format!(
                    "{path}: tensor {shown}: type field at offset {ty_at}"
                )),
            })?;
            let rel_offset = c.u64("gguf tensor info", &of)?;
            ne.reverse();
            let shape = ne;
            let nbytes = ty.nbytes(&shape).ok_or_else(|| {
                Error::corrupt(
                    "gguf tensor info",
                    info_at,
                    format!(
                        "{path}: tensor {shown} of type {} and shape {shape:?}: {}",
                        ty.name,
                        if ty.block > 1 && shape.last().is_none_or(|d| !d.is_multiple_of(ty.block))
                        {
                            format!(
                                "its innermost dimension is not a whole number of {}-element \
                                 blocks",
                                ty.block
                            )
                        } else {
                            "its size overflows 64 bits".to_string()
                        }
                    ),
                )
            })?;
            if !rel_offset.is_multiple_of(alignment) {
                return Err(Stop::Bad(Error::corrupt(
                    "gguf tensor info",
                    info_at,
                    format!(
                        "{path}: tensor {shown}: data offset {rel_offset} is not a multiple of \
                         the alignment {alignment}"
                    ),
                )));
            }
            tensors.push(TensorEntry {
                name,
                ty,
                shape,
                rel_offset,
                offset: 0,
                nbytes,
            });
        }
        let infos_end = c.pos;
        let data_start = infos_end
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| Error::corrupt("gguf tensor info", infos_end, "data start overflows"))?;
        for t in &mut tensors {
            let shown = name::display(&t.name);
            let offset = data_start.checked_add(t.rel_offset);
            let end = offset.and_then(|o| o.checked_add(t.nbytes));
            match (offset, end) {
                (Some(o), Some(e)) if e <= file_len => t.offset = o,
                _ => {
                    return Err(Stop::Bad(Error::corrupt(
                        "gguf tensor info",
                        data_start,
                        format!(
                            "{path}: tensor {shown}: data at {data_start} + {} ({} bytes) is \
                             outside the {file_len}-byte file",
                            t.rel_offset, t.nbytes
                        ),
                    )))
                }
            }
        }
        let mut sorted: Vec<usize> = (0..tensors.len()).collect();
        sorted.sort_unstable_by(|&a, &b| tensors[a].name.cmp(&tensors[b].name));
        if let Some(w) = sorted
            .windows(2)
            .find(|w| tensors[w[0]].name == tensors[w[1]].name)
        {
            return Err(Stop::Bad(Error::corrupt(
                "gguf tensor info",
                kv_end,
                format!(
                    "{path}: tensor {} appears twice",
                    name::display(&tensors[w[0]].name)
                ),
            )));
        }
        // No two tensors' data may overlap (a polyglot or hostile file).
        let mut by_offset: Vec<&TensorEntry> = tensors.iter().filter(|t| t.nbytes > 0).collect();
        by_offset.sort_unstable_by_key(|t| t.offset);
        if let Some(w) = by_offset
            .windows(2)
            .find(|w| w[0].offset + w[0].nbytes > w[1].offset)
        {
            return Err(Stop::Bad(Error::corrupt(
                "gguf tensor info",
                w[1].offset,
                format!(
                    "{path}: the data of tensors {} [{}, {}) and {} [{}, {}) overlap",
                    name::display(&w[0].name),
                    w[0].offset,
                    w[0].offset + w[0].nbytes,
                    name::display(&w[1].name),
                    w[1].offset,
                    w[1].offset + w[1].nbytes
                ),
            )));
        }
        Ok(Header {
            path: path.to_string(),
            version,
            file_len,
            alignment,
            kvs,
            tensors,
            sorted,
            data_start,
        })
    }

    /// The tensor named `name`, if the file holds it.
    pub(crate) fn find(&self, name: &[u8]) -> Option<&TensorEntry> {
        self.sorted
            .binary_search_by(|&i| self.tensors[i].name.as_slice().cmp(name))
            .ok()
            .map(|i| &self.tensors[self.sorted[i]])
    }

    /// Bytes of the head: header, metadata and tensor infos, and the padding to the data.
    pub(crate) fn head_len(&self) -> u64 {
        self.data_start.min(self.file_len)
    }
}

/// The value of `general.alignment` (of type `ty` at `at` in `buf`, already walked): an
/// unsigned integer that is a power of two.
fn read_alignment(buf: &[u8], ty: u32, at: u64, path: &str) -> Parse<u64> {
    let size = match ty {
        vt::U8 => 1,
        vt::U16 => 2,
        vt::U32 => 4,
        vt::U64 => 8,
        _ => {
            return Err(Stop::Bad(Error::corrupt(
                "gguf metadata",
                at,
                format!(
                    "{path}: general.alignment is a {}, not an unsigned integer",
                    value_type_name(ty)
                ),
            )))
        }
    };
    // The value was walked over within `buf`.
    let b = &buf[at as usize..at as usize + size];
    let mut v = [0u8; 8];
    v[..size].copy_from_slice(b);
    let a = u64::from_le_bytes(v);
    if a == 0 || !a.is_power_of_two() {
        return Err(Stop::Bad(Error::corrupt(
            "gguf metadata",
            at,
            format!("{path}: general.alignment is {a}, not a power of two"),
        )));
    }
    Ok(a)
}
