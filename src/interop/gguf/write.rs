//! GGUF as an output ([`OutputFormat::Gguf`](crate::interop::OutputFormat::Gguf)): a GGUF v3
//! file, little-endian, written atomically (staged beside the destination, synced, renamed).
//! Its own file: the writer's side of the format, with its rules ([`cannot_hold`]) and the
//! encoding of typed metadata.
//!
//! * Tensors in bytewise name order: plain dtypes GGUF has (`float32`, `float16`, `bfloat16`,
//!   `int8`..`int64`, `float64`) as themselves; ggml block types (a GGUF input's `q4_0`,
//!   `q4_k`, ...) as their blocks, byte for byte. Shapes are written as ggml's `ne` (reversed);
//!   each tensor's data starts at a multiple of the alignment.
//! * Metadata: the keys [`super::value::TYPES_KEY`] lists, in its order, each encoded with the
//!   GGUF type it records (so a GGUF input, directly or through a paramdex file, comes back with
//!   every key, value, value type and the key order); then every other key in key order, as a
//!   string (a string as is, any other value as its text: `MetaValue::to_text`). The
//!   alignment is `general.alignment` when the metadata has it (a power of two), else 32.

use std::io::Write;

use crate::error::{Error, Result};
use crate::interop::store::{ExportJob, TensorData, TensorInfo, Written};
use crate::name;
use crate::native::{staging, MetaValue, Metadata};

use super::header::{vt, DEFAULT_ALIGNMENT, MAGIC};
use super::types::of_kind;
use super::value::TYPES_KEY;

/// Most dimensions ggml (and so llama.cpp) reads: `GGML_MAX_DIMS`.
pub const MAX_OUTPUT_DIMS: usize = 4;
/// Longest tensor name llama.cpp reads: `GGML_MAX_NAME` less its terminating zero.
pub const MAX_OUTPUT_NAME: usize = 63;

/// Why GGUF cannot hold `t`, if it cannot: a kind that is not a GGUF type (strings, bytes
/// values, `bool`, unsigned integers, complex, 8-bit and smaller floats; foreign types of
/// other systems), LoD, more than [`MAX_OUTPUT_DIMS`] dimensions, a name longer than
/// [`MAX_OUTPUT_NAME`] bytes, a block type's innermost dimension not whole blocks.
pub(crate) fn cannot_hold(t: &TensorInfo) -> Option<String> {
    let Some(ty) = of_kind(&t.kind) else {
        return Some(match t.kind.numeric() {
            Some(d) => format!("{}, which GGUF has no type for", d.name()),
            None => t.kind.not_numeric().unwrap_or_default(),
        });
    };
    if !t.lod.is_empty() {
        return Some("a LoD tensor, which GGUF cannot describe".into());
    }
    if t.shape.len() > MAX_OUTPUT_DIMS {
        return Some(format!(
            "of rank {} (ggml tensors have at most {MAX_OUTPUT_DIMS} dimensions)",
            t.shape.len()
        ));
    }
    if t.name.len() > MAX_OUTPUT_NAME {
        return Some(format!(
            "named with {} bytes (llama.cpp reads names of at most {MAX_OUTPUT_NAME})",
            t.name.len()
        ));
    }
    if let Some(d) = t.shape.iter().find(|&&d| d > i64::MAX as u64) {
        return Some(format!("of dimension {d} (at most i64::MAX)"));
    }
    match ty.nbytes(&t.shape) {
        Some(n) if n == t.nbytes => None,
        _ => Some(format!(
            "{} of shape {:?} and {} bytes, which is not whole {}-element blocks of {} bytes \
             along its last dimension",
            ty.name, t.shape, t.nbytes, ty.block, ty.bytes
        )),
    }
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

/// A value type as [`TYPES_KEY`] records it.
#[derive(Debug, PartialEq)]
enum Spec {
    Scalar(u32),
    /// An array of scalars (or strings) of this type.
    Array(u32),
    /// An array of arrays, each element's own type.
    Arrays(Vec<Spec>),
}

fn scalar_type(name: &str) -> Option<u32> {
    Some(match name {
        "uint8" => vt::U8,
        "int8" => vt::I8,
        "uint16" => vt::U16,
        "int16" => vt::I16,
        "uint32" => vt::U32,
        "int32" => vt::I32,
        "float32" => vt::F32,
        "bool" => vt::BOOL,
        "string" => vt::STRING,
        "uint64" => vt::U64,
        "int64" => vt::I64,
        "float64" => vt::F64,
        _ => return None,
    })
}

/// Parses a type of [`TYPES_KEY`]'s grammar from the start of `s`; returns it and the rest.
fn parse_spec(s: &str, depth: usize) -> Option<(Spec, &str)> {
    if depth > super::header::MAX_ARRAY_DEPTH {
        return None;
    }
    if let Some(rest) = s.strip_prefix("array[") {
        if let Some(rest) = rest.strip_prefix(']') {
            return Some((Spec::Arrays(Vec::new()), rest));
        }
        if rest.starts_with("array[") {
            let mut inner = Vec::new();
            let mut rest = rest;
            loop {
                let (spec, r) = parse_spec(rest, depth + 1)?;
                inner.push(spec);
                if let Some(r) = r.strip_prefix(',') {
                    rest = r;
                } else {
                    return Some((Spec::Arrays(inner), r.strip_prefix(']')?));
                }
            }
        }
        let end = rest.find(']')?;
        return Some((Spec::Array(scalar_type(&rest[..end])?), &rest[end + 1..]));
    }
    let end = s.find([',', ']']).unwrap_or(s.len());
    Some((Spec::Scalar(scalar_type(&s[..end])?), &s[end..]))
}

/// Encodes `v` as a scalar of type `ty` (after its type number, which the caller writes).
fn put_scalar(out: &mut Vec<u8>, ty: u32, v: &MetaValue) -> std::result::Result<(), String> {
    let int = |lo: i128, hi: i128| -> std::result::Result<i128, String> {
        let n = match v {
            MetaValue::Int(n) => i128::from(*n),
            // A uint64 above i64::MAX is kept as its decimal text.
            MetaValue::String(s) if ty == vt::U64 => {
                s.parse::<u64>()
                    .map_err(|_| format!("{s:?} is not a uint64"))? as i128
            }
            MetaValue::Bool(b) => i128::from(*b),
            other => return Err(format!("a {} is not an integer", other.type_name())),
        };
        if n < lo || n > hi {
            return Err(format!("{n} is outside the type's range"));
        }
        Ok(n)
    };
    match ty {
        vt::U8 => out.push(int(0, u8::MAX.into())? as u8),
        vt::I8 => out.push(int(i8::MIN.into(), i8::MAX.into())? as i8 as u8),
        vt::U16 => out.extend_from_slice(&(int(0, u16::MAX.into())? as u16).to_le_bytes()),
        vt::I16 => {
            out.extend_from_slice(&(int(i16::MIN.into(), i16::MAX.into())? as i16).to_le_bytes())
        }
        vt::U32 => out.extend_from_slice(&(int(0, u32::MAX.into())? as u32).to_le_bytes()),
        vt::I32 => {
            out.extend_from_slice(&(int(i32::MIN.into(), i32::MAX.into())? as i32).to_le_bytes())
        }
        vt::U64 => out.extend_from_slice(&(int(0, u64::MAX.into())? as u64).to_le_bytes()),
        vt::I64 => {
            out.extend_from_slice(&(int(i64::MIN.into(), i64::MAX.into())? as i64).to_le_bytes())
        }
        vt::F32 | vt::F64 => {
            let f = match v {
                MetaValue::Float(f) => *f,
                MetaValue::Int(n) => *n as f64,
                other => return Err(format!("a {} is not a number", other.type_name())),
            };
            if ty == vt::F32 {
                // Exact for a value read from a float32 (the only kind TYPES_KEY records so).
                out.extend_from_slice(&(f as f32).to_le_bytes());
            } else {
                out.extend_from_slice(&f.to_le_bytes());
            }
        }
        vt::BOOL => match v {
            MetaValue::Bool(b) => out.push(u8::from(*b)),
            other => return Err(format!("a {} is not a bool", other.type_name())),
        },
        vt::STRING => match v {
            MetaValue::String(s) => put_str(out, s.as_bytes()),
            // A string that was not UTF-8.
            MetaValue::Bytes(b) => put_str(out, b),
            other => return Err(format!("a {} is not a string", other.type_name())),
        },
        _ => return Err(format!("value type {ty} is not a scalar")),
    }
    Ok(())
}

/// Encodes `v` as a value of type `spec` (the type number first).
fn put_value(out: &mut Vec<u8>, spec: &Spec, v: &MetaValue) -> std::result::Result<(), String> {
    match spec {
        Spec::Scalar(ty) => {
            out.extend_from_slice(&ty.to_le_bytes());
            put_scalar(out, *ty, v)
        }
        Spec::Array(_) | Spec::Arrays(_) => {
            out.extend_from_slice(&vt::ARRAY.to_le_bytes());
            put_array(out, spec, v)
        }
    }
}

/// Encodes the list `v` as an array of type `spec` (after the array's type number).
fn put_array(out: &mut Vec<u8>, spec: &Spec, v: &MetaValue) -> std::result::Result<(), String> {
    let MetaValue::List(items) = v else {
        return Err(format!("a {} is not a list", v.type_name()));
    };
    match spec {
        Spec::Array(ty) => {
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_scalar(out, *ty, item)?;
            }
        }
        Spec::Arrays(inner) => {
            if inner.len() != items.len() {
                return Err(format!(
                    "a list of {} values where the type lists {}",
                    items.len(),
                    inner.len()
                ));
            }
            out.extend_from_slice(&vt::ARRAY.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for (s, item) in inner.iter().zip(items) {
                put_array(out, s, item)?;
            }
        }
        Spec::Scalar(_) => return Err("not an array type".into()),
    }
    Ok(())
}

/// The key/value section for `metadata` (see the module docs), its pair count, and the
/// alignment it sets.
fn kv_section(metadata: &Metadata) -> Result<(Vec<u8>, u64, u64)> {
    let bad = |key: &str, why: String| {
        Error::InvalidArgument(format!(
            "metadata key {key} cannot be written to GGUF: {why}"
        ))
    };
    let mut out = Vec::new();
    let mut n = 0u64;
    let mut typed = std::collections::HashSet::new();
    let mut alignment = None;
    if let Some(types) = metadata.get(TYPES_KEY) {
        let MetaValue::List(pairs) = types else {
            return Err(bad(TYPES_KEY, "not a list of [key, type] pairs".into()));
        };
        for pair in pairs {
            let (key, ty) = match pair {
                MetaValue::List(kv) => match kv.as_slice() {
                    [MetaValue::String(k), MetaValue::String(t)] => (k, t),
                    _ => return Err(bad(TYPES_KEY, "an item is not a [key, type] pair".into())),
                },
                _ => return Err(bad(TYPES_KEY, "an item is not a [key, type] pair".into())),
            };
            let spec = match parse_spec(ty, 0) {
                Some((spec, "")) => spec,
                _ => return Err(bad(key, format!("its type {ty:?} is not a GGUF type"))),
            };
            // A key removed since (`meta --delete`) is left out; a key listed twice, once.
            let Some(v) = metadata.get(key) else { continue };
            if !typed.insert(key.as_str()) {
                continue;
            }
            put_str(&mut out, key.as_bytes());
            put_value(&mut out, &spec, v).map_err(|why| bad(key, format!("as {ty}: {why}")))?;
            if key == "general.alignment" {
                alignment = Some(v.clone());
            }
            n += 1;
        }
    }
    for (key, v) in metadata.iter() {
        if key == TYPES_KEY || typed.contains(key) {
            continue;
        }
        put_str(&mut out, key.as_bytes());
        if key == "general.alignment" {
            // ggml reads it as a uint32 only.
            out.extend_from_slice(&vt::U32.to_le_bytes());
            put_scalar(&mut out, vt::U32, v).map_err(|why| bad(key, why))?;
            alignment = Some(v.clone());
        } else {
            out.extend_from_slice(&vt::STRING.to_le_bytes());
            put_str(&mut out, v.to_text().as_bytes());
        }
        n += 1;
    }
    let alignment = match alignment {
        None => DEFAULT_ALIGNMENT,
        Some(MetaValue::Int(a)) if a > 0 && (a as u64).is_power_of_two() => a as u64,
        Some(v) => {
            return Err(bad(
                "general.alignment",
                format!("{} is not a power of two", v.to_text()),
            ))
        }
    };
    Ok((out, n, alignment))
}

/// Writes the job's tensors and metadata as a GGUF v3 file at `job.dst`.
pub(crate) fn export(job: &ExportJob<'_>) -> Result<Written> {
    let (store, dst) = (job.store, job.dst);
    let list = store.list()?;
    let (kv, n_kv, alignment) = kv_section(job.metadata)?;
    let mut head = MAGIC.to_vec();
    head.extend_from_slice(&3u32.to_le_bytes());
    head.extend_from_slice(&(list.len() as u64).to_le_bytes());
    head.extend_from_slice(&n_kv.to_le_bytes());
    head.extend_from_slice(&kv);
    let mut offset = 0u64;
    let mut offsets = Vec::with_capacity(list.len());
    for t in &list {
        // The export's survey checked every tensor with `cannot_hold`.
        let ty = of_kind(&t.kind).ok_or_else(|| {
            Error::Unsupported(format!(
                "tensor {}: {}",
                name::display(&t.name),
                cannot_hold(t).unwrap_or_default()
            ))
        })?;
        put_str(&mut head, &t.name);
        head.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
        for d in t.shape.iter().rev() {
            head.extend_from_slice(&d.to_le_bytes());
        }
        head.extend_from_slice(&ty.code.to_le_bytes());
        head.extend_from_slice(&offset.to_le_bytes());
        offsets.push(offset);
        offset = offset
            .checked_add(t.nbytes)
            .and_then(|o| o.checked_next_multiple_of(alignment))
            .ok_or_else(|| Error::limit("bytes of GGUF tensor data", u64::MAX, u64::MAX, None))?;
    }
    let data_start = (head.len() as u64).next_multiple_of(alignment);
    let zeros = vec![
        0u8;
        usize::try_from(alignment)
            .unwrap_or(usize::MAX)
            .min(1 << 20)
    ];
    let mut data_bytes = 0u64;
    staging::write_staged(dst, ".gguf-tmp", |w| {
        let io = |e| Error::io(format!("writing {}", dst.display()), e);
        w.write_all(&head).map_err(io)?;
        let mut at = head.len() as u64;
        let pad = |w: &mut dyn Write, at: &mut u64, to: u64| -> Result<()> {
            while *at < to {
                let n = (to - *at).min(zeros.len() as u64);
                w.write_all(&zeros[..n as usize]).map_err(io)?;
                *at += n;
            }
            Ok(())
        };
        pad(w, &mut at, data_start)?;
        for (t, &off) in list.iter().zip(&offsets) {
            pad(w, &mut at, data_start + off)?;
            let loaded = store.load(&t.name)?.ok_or_else(|| Error::NotFound {
                name: name::display(&t.name),
                path: format!("{} input", store.format().name()),
            })?;
            let TensorData::Bytes(b) = &loaded.data else {
                return Err(Error::Unsupported(format!(
                    "tensor {}: string tensors have no GGUF type",
                    name::display(&t.name)
                )));
            };
            if b.len() as u64 != t.nbytes {
                return Err(Error::InvalidArgument(format!(
                    "tensor {}: {} bytes loaded where its listing says {}",
                    name::display(&t.name),
                    b.len(),
                    t.nbytes
                )));
            }
            w.write_all(b).map_err(io)?;
            at += t.nbytes;
            data_bytes += t.nbytes;
            job.progress.advance(t.nbytes);
        }
        // The file ends padded, as gguf-py writes it.
        let end = at.next_multiple_of(alignment);
        pad(w, &mut at, end)
    })?;
    let file_len = std::fs::metadata(dst)
        .map_err(|e| Error::io(format!("reading metadata of {}", dst.display()), e))?
        .len();
    Ok(Written {
        tensors: list.len() as u64,
        data_bytes,
        paths: vec![dst.to_path_buf()],
        output_bytes: file_len,
        native: None,
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_parse_back() {
        let p = |s| parse_spec(s, 0).map(|(s, r)| (s, r.to_string()));
        assert_eq!(p("uint32"), Some((Spec::Scalar(vt::U32), String::new())));
        assert_eq!(
            p("array[string]"),
            Some((Spec::Array(vt::STRING), String::new()))
        );
        assert_eq!(
            p("array[array[uint8],array[]]"),
            Some((
                Spec::Arrays(vec![Spec::Array(vt::U8), Spec::Arrays(vec![])]),
                String::new()
            ))
        );
        assert_eq!(p("array[nope]"), None);
        assert_eq!(p("array[uint8"), None);
        let deep = "array[".repeat(40) + &"]".repeat(40);
        assert_eq!(p(&deep), None);
    }
}
