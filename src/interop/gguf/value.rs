//! Decoding a GGUF key's value into paramdex metadata ([`MetaValue`]), on demand: the parse
//! (`header.rs`) only walks values and keeps where each one is, so a listing never decodes a
//! vocabulary; `meta`, `stat` and Python's `metadata()` decode here. Its own file: the mapping
//! from GGUF's thirteen value types to paramdex's six is one decision, made in one place.
//!
//! Integers of every width become `int` (a `uint64` above `i64::MAX` becomes its decimal
//! `string`, the one GGUF value `int` cannot hold), `float32`/`float64` become `float`, `bool`
//! `bool`, a string `string` (its bytes as `bytes` when they are not UTF-8), an array a `list`
//! of its elements (arrays of arrays included). The types themselves are kept beside the values
//! under the reserved key [`TYPES_KEY`], so a GGUF file written back has every key with its own
//! type, in its order.

use crate::error::{Error, Result};
use crate::native::{MetaValue, Metadata};

use super::header::{fixed_size, value_type_name, vt, Header};

/// Reads values out of the bytes the header was parsed from; every read was walked by the
/// parse, so a short read here means the bytes changed, and is an error, not a panic.
struct Values<'a> {
    buf: &'a [u8],
    pos: usize,
    path: &'a str,
}

impl<'a> Values<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&e| e <= self.buf.len());
        let Some(end) = end else {
            return Err(Error::truncated(
                "gguf metadata",
                self.pos as u64,
                format!("{}: a value runs past the bytes read", self.path),
            ));
        };
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn value(&mut self, ty: u32) -> Result<MetaValue> {
        if let Some(n) = fixed_size(ty) {
            let b = self.take(n)?;
            return Ok(scalar(ty, b));
        }
        match ty {
            vt::STRING => {
                let n = self.u64()?;
                let b = self.take(n)?;
                Ok(match std::str::from_utf8(b) {
                    Ok(s) => MetaValue::String(s.to_string()),
                    Err(_) => MetaValue::Bytes(b.to_vec()),
                })
            }
            vt::ARRAY => {
                let elem = self.u32()?;
                let count = self.u64()?;
                // The parse checked that `count` elements fit the file; the bytes read bound it
                // again here (each element takes at least one byte).
                let cap = usize::try_from(count)
                    .unwrap_or(usize::MAX)
                    .min(self.buf.len() - self.pos);
                let mut out = Vec::with_capacity(cap);
                for _ in 0..count {
                    out.push(self.value(elem)?);
                }
                Ok(MetaValue::List(out))
            }
            _ => Err(Error::corrupt(
                "gguf metadata",
                self.pos as u64,
                format!("{}: unknown value type {ty}", self.path),
            )),
        }
    }
}

/// A fixed-size value of type `ty` from its bytes `b` (of its size).
fn scalar(ty: u32, b: &[u8]) -> MetaValue {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    let u = u64::from_le_bytes(w);
    match ty {
        vt::U8 | vt::U16 | vt::U32 => MetaValue::Int(u as i64),
        vt::I8 => MetaValue::Int(i64::from(b[0] as i8)),
        vt::I16 => MetaValue::Int(i64::from(u as u16 as i16)),
        vt::I32 => MetaValue::Int(i64::from(u as u32 as i32)),
        vt::I64 => MetaValue::Int(u as i64),
        vt::U64 => match i64::try_from(u) {
            Ok(v) => MetaValue::Int(v),
            Err(_) => MetaValue::String(u.to_string()),
        },
        vt::F32 => MetaValue::Float(f64::from(f32::from_bits(u as u32))),
        vt::F64 => MetaValue::Float(f64::from_bits(u)),
        // vt::BOOL: GGUF writes 0 or 1; any other byte is true, as ggml reads it.
        _ => MetaValue::Bool(b[0] != 0),
    }
}

/// The value of the key/value pair `i` of `h`, decoded from `buf` (the bytes `h` was parsed
/// from).
pub(crate) fn decode(h: &Header, buf: &[u8], i: usize) -> Result<MetaValue> {
    let kv = &h.kvs[i];
    let pos = usize::try_from(kv.at).map_err(|_| {
        Error::corrupt(
            "gguf metadata",
            kv.at,
            "offset beyond this machine's memory",
        )
    })?;
    Values {
        buf,
        pos,
        path: &h.path,
    }
    .value(kv.ty)
}

/// The reserved metadata key that holds a GGUF file's keys in file order with their GGUF
/// value types (SPEC.md 9.2): a list of `[key, type]` pairs, each type a string of the grammar
/// given there (`uint32`, `array[string]`, `array[array[int32],array[]]`). With it, paramdex
/// metadata carries a GGUF file's key/value section faithfully: the GGUF writer re-encodes each
/// value with its own type, in order.
pub const TYPES_KEY: &str = "paramdex.gguf.types";

/// The key as paramdex metadata shows it: its text, or, when it is not UTF-8, as
/// [`crate::name::display`] shows a name.
pub(crate) fn key_text(key: &[u8]) -> String {
    match std::str::from_utf8(key) {
        Ok(k) => k.to_string(),
        Err(_) => crate::name::display(key),
    }
}

/// Every key of `h` with its decoded value, and [`TYPES_KEY`] listing them with their types.
pub(crate) fn metadata(h: &Header, buf: &[u8]) -> Result<Metadata> {
    let mut m = Metadata::new();
    let mut types = Vec::with_capacity(h.kvs.len());
    for (i, kv) in h.kvs.iter().enumerate() {
        let key = key_text(&kv.key);
        let pos = usize::try_from(kv.at).unwrap_or(usize::MAX);
        let ty = type_of(
            &mut Values {
                buf,
                pos,
                path: &h.path,
            },
            kv.ty,
        )?;
        types.push(MetaValue::List(vec![
            MetaValue::String(key.clone()),
            MetaValue::String(ty),
        ]));
        m.insert(key, decode(h, buf, i)?)?;
    }
    if !types.is_empty() {
        m.insert(TYPES_KEY, MetaValue::List(types))?;
    }
    Ok(m)
}

/// The type of the value of type `ty` at `v`'s position, walked over (not decoded), as
/// [`TYPES_KEY`] writes it: a scalar type's name (`uint8`, `int8`, `uint16`, `int16`,
/// `uint32`, `int32`, `float32`, `bool`, `string`, `uint64`, `int64`, `float64`); an array of
/// such values `array[T]`; an array of arrays `array[S1,S2,...]`, each element's own type
/// (`array[]` when it has none).
fn type_of(v: &mut Values<'_>, ty: u32) -> Result<String> {
    if let Some(n) = fixed_size(ty) {
        v.take(n)?;
        return Ok(value_type_name(ty).to_string());
    }
    match ty {
        vt::STRING => {
            let n = v.u64()?;
            v.take(n)?;
            Ok("string".into())
        }
        vt::ARRAY => {
            let elem = v.u32()?;
            let count = v.u64()?;
            if elem == vt::ARRAY {
                let mut inner = Vec::new();
                for _ in 0..count {
                    inner.push(type_of(v, vt::ARRAY)?);
                }
                return Ok(format!("array[{}]", inner.join(",")));
            }
            let name = value_type_name(elem);
            match fixed_size(elem) {
                Some(n) => {
                    v.take(count.saturating_mul(n))?;
                }
                None => {
                    for _ in 0..count {
                        type_of(v, elem)?;
                    }
                }
            }
            Ok(format!("array[{name}]"))
        }
        _ => Err(Error::corrupt(
            "gguf metadata",
            v.pos as u64,
            format!("{}: unknown value type {ty}", v.path),
        )),
    }
}
