//! Typed metadata kept in the header entry (SPEC.md 5.3): the value types, their JSON and text
//! forms, and the hand codec of header field 21. Changing it in a finished file without touching
//! the records (SPEC.md 10.1) is `native/rewrite.rs`.
//!
//! [`Metadata`] maps UTF-8 keys to [`MetaValue`]s (string, integer, float, bool, bytes, lists of
//! any of them). Keys are kept sorted (a `BTreeMap`), so the encoded header is deterministic.
//! A [`crate::Writer`] stores it with [`crate::Writer::set_metadata`]; a [`crate::Reader`] shows
//! it in [`crate::Reader::header`]; [`crate::rewrite_in_place`] replaces it in a finished file by
//! appending a new index and footer.
//!
//! ```
//! use paramdex::{MetaValue, Metadata};
//! let mut m = Metadata::new();
//! m.insert("model", "llama")?;
//! m.insert("step", 1200i64)?;
//! m.insert("lr", 3e-4)?;
//! m.insert("layers", vec![MetaValue::Int(1), MetaValue::Int(2)])?;
//! assert_eq!(m.get("step"), Some(&MetaValue::Int(1200)));
//! assert_eq!(MetaValue::parse("0.5")?, MetaValue::Float(0.5));
//! assert_eq!(MetaValue::parse("llama")?, MetaValue::String("llama".into()));
//! # Ok::<(), paramdex::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Number, Value};

use crate::error::{ensure_within, Error, Result};
use crate::format::pbwire::{self, WireType};
use crate::proto::paramdex as pb;

/// Most metadata entries a file may hold.
pub const MAX_ENTRIES: usize = 65_536;
/// Longest metadata key, in bytes (keys are non-empty UTF-8).
pub const MAX_KEY_LEN: usize = 1024;
/// Deepest nesting of values: a top-level value is at depth 1, an element of a list at depth 2.
pub const MAX_DEPTH: usize = 16;
/// Most values in all of a file's metadata, every list element counted.
pub const MAX_VALUES: usize = 1 << 20;
/// Largest encoding of all metadata entries together (field 21 of the header), in bytes.
pub const MAX_ENCODED_LEN: usize = 16 << 20;

/// One typed metadata value.
///
/// Equality compares floats by their bits, so `NaN == NaN` and `0.0 != -0.0`: two values are
/// equal exactly when they encode to the same bytes.
#[derive(Clone, Debug)]
pub enum MetaValue {
    /// UTF-8 text.
    String(String),
    /// A signed 64-bit integer.
    Int(i64),
    /// An IEEE 754 binary64.
    Float(f64),
    /// A boolean.
    Bool(bool),
    /// Arbitrary bytes.
    Bytes(Vec<u8>),
    /// A list of values, of any types.
    List(Vec<MetaValue>),
}

impl PartialEq for MetaValue {
    fn eq(&self, other: &Self) -> bool {
        use MetaValue::*;
        match (self, other) {
            (String(a), String(b)) => a == b,
            (Int(a), Int(b)) => a == b,
            (Float(a), Float(b)) => a.to_bits() == b.to_bits(),
            (Bool(a), Bool(b)) => a == b,
            (Bytes(a), Bytes(b)) => a == b,
            (List(a), List(b)) => a == b,
            _ => false,
        }
    }
}

impl Eq for MetaValue {}

macro_rules! from_impl {
    ($($t:ty => |$v:ident| $e:expr),+ $(,)?) => {
        $(impl From<$t> for MetaValue {
            fn from($v: $t) -> Self {
                $e
            }
        })+
    };
}

from_impl! {
    &str => |v| MetaValue::String(v.to_string()),
    String => |v| MetaValue::String(v),
    i64 => |v| MetaValue::Int(v),
    i32 => |v| MetaValue::Int(v.into()),
    u32 => |v| MetaValue::Int(v.into()),
    f64 => |v| MetaValue::Float(v),
    f32 => |v| MetaValue::Float(v.into()),
    bool => |v| MetaValue::Bool(v),
    Vec<u8> => |v| MetaValue::Bytes(v),
    &[u8] => |v| MetaValue::Bytes(v.to_vec()),
    Vec<MetaValue> => |v| MetaValue::List(v),
}

fn float_json(v: f64) -> Value {
    match Number::from_f64(v) {
        Some(n) => Value::Number(n),
        None if v.is_nan() => json!({ "float": "NaN" }),
        None if v > 0.0 => json!({ "float": "Infinity" }),
        None => json!({ "float": "-Infinity" }),
    }
}

fn invalid(detail: String) -> Error {
    Error::InvalidArgument(detail)
}

impl MetaValue {
    /// The type's name: `string`, `int`, `float`, `bool`, `bytes` or `list`.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::String(_) => "string",
            MetaValue::Int(_) => "int",
            MetaValue::Float(_) => "float",
            MetaValue::Bool(_) => "bool",
            MetaValue::Bytes(_) => "bytes",
            MetaValue::List(_) => "list",
        }
    }

    /// The JSON form: strings, numbers, booleans and arrays as themselves; bytes as
    /// `{"hex": "..."}`; a float that JSON cannot hold (NaN, infinities) as
    /// `{"float": "NaN" | "Infinity" | "-Infinity"}`. [`MetaValue::from_json`] reads it back
    /// exactly, except that a float with an integral value prints with `.0`.
    pub fn to_json(&self) -> Value {
        match self {
            MetaValue::String(s) => json!(s),
            MetaValue::Int(i) => json!(i),
            MetaValue::Float(f) => float_json(*f),
            MetaValue::Bool(b) => json!(b),
            MetaValue::Bytes(b) => json!({ "hex": crate::name::to_hex(b) }),
            MetaValue::List(l) => Value::Array(l.iter().map(MetaValue::to_json).collect()),
        }
    }

    /// Reads the JSON form (see [`MetaValue::to_json`]): an integer that fits `i64` is an int,
    /// any other number a float. `null`, other objects and integers beyond `i64` are errors.
    pub fn from_json(v: &Value) -> Result<MetaValue> {
        Self::from_json_at(v, 1)
    }

    fn from_json_at(v: &Value, depth: usize) -> Result<MetaValue> {
        ensure_within("metadata nesting depth", depth, MAX_DEPTH, None)?;
        Ok(match v {
            Value::Null => {
                return Err(invalid(
                    "metadata values cannot be null (use a string, number, bool, bytes or list)"
                        .into(),
                ))
            }
            Value::Bool(b) => MetaValue::Bool(*b),
            Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => MetaValue::Int(i),
                (None, Some(u), _) => {
                    return Err(invalid(format!(
                        "integer {u} does not fit a signed 64-bit metadata int"
                    )))
                }
                (None, None, Some(f)) => MetaValue::Float(f),
                _ => return Err(invalid(format!("number {n} is not representable"))),
            },
            Value::String(s) => MetaValue::String(s.clone()),
            Value::Array(a) => MetaValue::List(
                a.iter()
                    .map(|x| Self::from_json_at(x, depth + 1))
                    .collect::<Result<_>>()?,
            ),
            Value::Object(o) => match (o.len(), o.get("hex"), o.get("float")) {
                (1, Some(Value::String(h)), _) => {
                    MetaValue::Bytes(crate::name::from_hex(h).ok_or_else(|| {
                        invalid(format!("{{\"hex\": {h:?}}}: not an even number of hex digits"))
                    })?)
                }
                (1, _, Some(f)) => MetaValue::Float(match f {
                    Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
                    Value::String(s) if s == "NaN" => f64::NAN,
                    Value::String(s) if s == "Infinity" => f64::INFINITY,
                    Value::String(s) if s == "-Infinity" => f64::NEG_INFINITY,
                    other => {
                        return Err(invalid(format!(
                            "{{\"float\": {other}}}: expected a number, \"NaN\", \"Infinity\" or \"-Infinity\""
                        )))
                    }
                }),
                _ => {
                    return Err(invalid(format!(
                        "metadata object {v} is neither {{\"hex\": \"...\"}} (bytes) nor {{\"float\": ...}}"
                    )))
                }
            },
        })
    }

    /// A value typed from command-line text: the text is read as JSON when it is valid JSON
    /// (`12` is an int, `0.5` a float, `true` a bool, `"12"` a string, `[1, "a"]` a list,
    /// `{"hex": "00ff"}` bytes), and is otherwise a string as written (`llama` → `"llama"`).
    /// Valid JSON that is no metadata value (`null`, other objects) is an error.
    pub fn parse(text: &str) -> Result<MetaValue> {
        match serde_json::from_str::<Value>(text) {
            Ok(v) => Self::from_json(&v),
            Err(_) => Ok(MetaValue::String(text.to_string())),
        }
    }

    /// The value as one line of text: a string as itself, anything else as compact JSON.
    pub fn to_text(&self) -> String {
        match self {
            MetaValue::String(s) => s.clone(),
            other => other.to_json().to_string(),
        }
    }

    fn to_proto(&self) -> pb::MetaValue {
        use pb::meta_value::Kind;
        let kind = match self {
            MetaValue::String(s) => Kind::StringValue(s.clone()),
            MetaValue::Int(i) => Kind::IntValue(*i),
            MetaValue::Float(f) => Kind::FloatValue(*f),
            MetaValue::Bool(b) => Kind::BoolValue(*b),
            MetaValue::Bytes(b) => Kind::BytesValue(b.clone()),
            MetaValue::List(l) => Kind::ListValue(pb::MetaList {
                values: l.iter().map(MetaValue::to_proto).collect(),
            }),
        };
        pb::MetaValue { kind: Some(kind) }
    }

    /// Number of values, this one and every nested list element, and the deepest nesting.
    fn count(&self, depth: usize, values: &mut usize, max_depth: &mut usize) {
        *values += 1;
        *max_depth = (*max_depth).max(depth);
        if let MetaValue::List(l) = self {
            for v in l {
                v.count(depth + 1, values, max_depth);
            }
        }
    }
}

/// Typed metadata: UTF-8 keys, sorted bytewise, each with a [`MetaValue`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metadata {
    map: BTreeMap<String, MetaValue>,
}

impl Metadata {
    /// No entries.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.map.get(key)
    }

    /// Sets `key` (non-empty, at most [`MAX_KEY_LEN`] bytes) to `value`; returns the previous
    /// value. The other limits (SPEC.md 8.1) are checked by [`Metadata::validate`], which the
    /// writer and [`crate::rewrite_in_place`] call.
    pub fn insert(
        &mut self,
        key: impl Into<String>,
        value: impl Into<MetaValue>,
    ) -> Result<Option<MetaValue>> {
        let key = key.into();
        check_key(&key, None)?;
        Ok(self.map.insert(key, value.into()))
    }

    /// Removes `key`; returns its value.
    pub fn remove(&mut self, key: &str) -> Option<MetaValue> {
        self.map.remove(key)
    }

    /// Entries in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &MetaValue)> {
        self.map.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Checks every limit of SPEC.md 8.1: entry count, key length, nesting depth, value count
    /// and encoded size.
    pub fn validate(&self) -> Result<()> {
        ensure_within("metadata entries", self.map.len(), MAX_ENTRIES, None)?;
        let (mut values, mut depth) = (0usize, 0usize);
        for (k, v) in &self.map {
            check_key(k, None)?;
            v.count(1, &mut values, &mut depth);
        }
        ensure_within("metadata nesting depth", depth, MAX_DEPTH, None)?;
        ensure_within("metadata values", values, MAX_VALUES, None)?;
        let len = self.encoded_len();
        ensure_within("encoded metadata bytes", len, MAX_ENCODED_LEN, None)?;
        Ok(())
    }

    /// Bytes the entries take in the header (field 21 tags and lengths included).
    pub fn encoded_len(&self) -> usize {
        use prost::Message;
        // A wrapper message with only field 21 encodes exactly as the header's field 21.
        let h = pb::PdxHeader {
            metadata: self.to_proto(),
            ..Default::default()
        };
        h.encoded_len()
    }

    /// The entries as the header's protobuf field 21, in key order.
    pub(crate) fn to_proto(&self) -> Vec<pb::MetaEntry> {
        self.map
            .iter()
            .map(|(k, v)| pb::MetaEntry {
                key: k.clone(),
                value: Some(v.to_proto()),
            })
            .collect()
    }

    /// A JSON object of every entry in the JSON form of [`MetaValue::to_json`].
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.map
                .iter()
                .map(|(k, v)| (k.clone(), v.to_json()))
                .collect(),
        )
    }

    /// Reads a JSON object of values (see [`MetaValue::from_json`]).
    pub fn from_json(v: &Value) -> Result<Metadata> {
        let Value::Object(o) = v else {
            return Err(invalid("metadata JSON must be an object".into()));
        };
        let mut m = Metadata::new();
        for (k, v) in o {
            m.insert(k.clone(), MetaValue::from_json(v)?)?;
        }
        Ok(m)
    }

    /// safetensors-style string metadata: every value as a [`MetaValue::String`].
    pub fn from_strings<K: Into<String>, V: Into<String>>(
        items: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Metadata> {
        let mut m = Metadata::new();
        for (k, v) in items {
            m.insert(k, MetaValue::String(v.into()))?;
        }
        Ok(m)
    }

    /// As string metadata (safetensors' `__metadata__`): strings as they are, every other value
    /// as its compact JSON text ([`MetaValue::to_text`]).
    pub fn to_strings(&self) -> HashMap<String, String> {
        self.map
            .iter()
            .map(|(k, v)| (k.clone(), v.to_text()))
            .collect()
    }

    /// Decodes the payloads of the header's field-21 occurrences (one `MetaEntry` each), found in
    /// the header entry at file offset `at`, checking every limit as it goes so that hostile
    /// input never allocates beyond them.
    pub(crate) fn decode_entries<'b>(
        entries: impl IntoIterator<Item = &'b [u8]>,
        at: u64,
    ) -> Result<Metadata> {
        let mut m = Metadata::new();
        let mut values = 0usize;
        let mut last: Option<String> = None;
        for (i, buf) in entries.into_iter().enumerate() {
            ensure_within("metadata entries", i + 1, MAX_ENTRIES, Some(at))?;
            let (k, v) = decode_entry(buf, at, i, &mut values)?;
            if let Some(prev) = &last {
                if k.as_bytes() <= prev.as_bytes() {
                    return Err(bad(
                        at,
                        format!(
                            "metadata entry {i}: key {k:?} does not follow {prev:?} in strictly increasing order"
                        ),
                    ));
                }
            }
            last = Some(k.clone());
            m.map.insert(k, v);
        }
        Ok(m)
    }
}

impl<K: Into<String>, V: Into<MetaValue>> FromIterator<(K, V)> for Metadata {
    /// Collects entries; a later duplicate key replaces an earlier one. Keys are not checked
    /// here ([`Metadata::validate`] does).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        Metadata {
            map: iter
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
}

fn check_key(key: &str, at: Option<u64>) -> Result<()> {
    if key.is_empty() {
        return Err(match at {
            Some(at) => bad(at, "a metadata key is empty".into()),
            None => invalid("metadata keys must not be empty".into()),
        });
    }
    ensure_within("metadata key length", key.len(), MAX_KEY_LEN, at)?;
    Ok(())
}

fn bad(at: u64, detail: String) -> Error {
    Error::corrupt("header metadata", at, detail)
}

fn decode_entry(buf: &[u8], at: u64, i: usize, values: &mut usize) -> Result<(String, MetaValue)> {
    let e = |d: &str| bad(at, format!("metadata entry {i}: {d}"));
    let mut key: Option<String> = None;
    let mut value: Option<MetaValue> = None;
    let mut pos = 0;
    while pos < buf.len() {
        let (tag, p) = pbwire::read_tag(buf, pos).ok_or_else(|| e("bad field tag"))?;
        match (tag.field, tag.wire) {
            (1, WireType::LEN) => {
                let (b, end) =
                    pbwire::read_len(buf, p).ok_or_else(|| e("key runs past the entry"))?;
                if key.is_some() {
                    return Err(e("key given twice"));
                }
                let k = std::str::from_utf8(b).map_err(|_| e("key is not UTF-8"))?;
                check_key(k, Some(at))?;
                key = Some(k.to_string());
                pos = end;
            }
            (2, WireType::LEN) => {
                let (b, end) =
                    pbwire::read_len(buf, p).ok_or_else(|| e("value runs past the entry"))?;
                if value.is_some() {
                    return Err(e("value given twice"));
                }
                value = Some(
                    decode_value(b, at, 1, values)
                        .map_err(|err| err.context(&format!("metadata entry {i}")))?,
                );
                pos = end;
            }
            _ => {
                return Err(e(&format!(
                    "unexpected field {} (wire type {}) in MetaEntry",
                    tag.field, tag.wire
                )))
            }
        }
    }
    let key = key.ok_or_else(|| e("no key"))?;
    let value = value.ok_or_else(|| e(&format!("key {key:?} has no value")))?;
    Ok((key, value))
}

fn decode_value(buf: &[u8], at: u64, depth: usize, values: &mut usize) -> Result<MetaValue> {
    ensure_within("metadata nesting depth", depth, MAX_DEPTH, Some(at))?;
    *values += 1;
    ensure_within("metadata values", *values, MAX_VALUES, Some(at))?;
    let e = |d: String| bad(at, d);
    let mut out: Option<MetaValue> = None;
    let mut pos = 0;
    while pos < buf.len() {
        let (tag, p) =
            pbwire::read_tag(buf, pos).ok_or_else(|| e("bad field tag in a value".into()))?;
        let (v, end) = match (tag.field, tag.wire) {
            (1 | 5 | 6, WireType::LEN) => {
                let (b, end) = pbwire::read_len(buf, p)
                    .ok_or_else(|| e("a value runs past its message".into()))?;
                let v = match tag.field {
                    1 => MetaValue::String(
                        std::str::from_utf8(b)
                            .map_err(|_| e("a string value is not UTF-8".into()))?
                            .to_string(),
                    ),
                    5 => MetaValue::Bytes(b.to_vec()),
                    _ => MetaValue::List(decode_list(b, at, depth, values)?),
                };
                (v, end)
            }
            (2 | 4, WireType::VARINT) => {
                let (n, end) = pbwire::read_varint(buf, p).ok_or_else(|| e("bad varint".into()))?;
                let v = if tag.field == 2 {
                    MetaValue::Int(((n >> 1) as i64) ^ -((n & 1) as i64))
                } else {
                    MetaValue::Bool(n != 0)
                };
                (v, end)
            }
            (3, WireType::FIXED64) => {
                let (bits, end) =
                    pbwire::read_fixed64(buf, p).ok_or_else(|| e("truncated double".into()))?;
                (MetaValue::Float(f64::from_bits(bits)), end)
            }
            _ => {
                return Err(e(format!(
                    "unknown field {} (wire type {}) in MetaValue",
                    tag.field, tag.wire
                )))
            }
        };
        if out.is_some() {
            return Err(e("a value has more than one type".into()));
        }
        out = Some(v);
        pos = end;
    }
    out.ok_or_else(|| e("a value has no type".into()))
}

fn decode_list(buf: &[u8], at: u64, depth: usize, values: &mut usize) -> Result<Vec<MetaValue>> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let (tag, p) =
            pbwire::read_tag(buf, pos).ok_or_else(|| bad(at, "bad field tag in a list".into()))?;
        if tag != pbwire::Tag::new(1, WireType::LEN) {
            return Err(bad(
                at,
                format!(
                    "unknown field {} (wire type {}) in MetaList",
                    tag.field, tag.wire
                ),
            ));
        }
        let (b, end) = pbwire::read_len(buf, p)
            .ok_or_else(|| bad(at, "a list element runs past the list".into()))?;
        out.push(decode_value(b, at, depth + 1, values)?);
        pos = end;
    }
    Ok(out)
}

/// A header value split by [`split_header`]: the other fields, and the field-21 payloads.
pub(crate) type SplitHeader<'a> = (std::borrow::Cow<'a, [u8]>, Vec<&'a [u8]>);

/// Splits a header entry value into the bytes of every field except 21 (for prost) and the
/// payloads of field 21 (for [`Metadata::decode_entries`]). `None` if the value is not
/// well-formed protobuf.
pub(crate) fn split_header(buf: &[u8]) -> Option<SplitHeader<'_>> {
    let mut rest: Vec<u8> = Vec::new();
    let mut metas = Vec::new();
    let mut pos = 0;
    let mut copied_to = 0;
    while pos < buf.len() {
        let start = pos;
        let (tag, p) = pbwire::read_tag(buf, pos)?;
        if tag.field == 0 {
            return None;
        }
        if tag == pbwire::Tag::new(21, WireType::LEN) {
            let (b, end) = pbwire::read_len(buf, p)?;
            rest.extend_from_slice(&buf[copied_to..start]);
            copied_to = end;
            metas.push(b);
            pos = end;
        } else {
            pos = pbwire::skip_field(buf, p, tag.wire)?;
        }
    }
    if metas.is_empty() {
        return Some((std::borrow::Cow::Borrowed(buf), metas));
    }
    rest.extend_from_slice(&buf[copied_to..]);
    Some((std::borrow::Cow::Owned(rest), metas))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        m.insert("name", "llama").unwrap();
        m.insert("step", -7i64).unwrap();
        m.insert("lr", 0.25).unwrap();
        m.insert("ok", true).unwrap();
        m.insert("raw", vec![0u8, 255]).unwrap();
        m.insert(
            "list",
            vec![
                MetaValue::Int(0),
                MetaValue::List(vec![]),
                MetaValue::String(String::new()),
                MetaValue::Float(f64::NAN),
            ],
        )
        .unwrap();
        m
    }

    fn encode(m: &Metadata) -> Vec<u8> {
        pb::PdxHeader {
            metadata: m.to_proto(),
            ..Default::default()
        }
        .encode_to_vec()
    }

    fn decode(buf: &[u8]) -> Result<Metadata> {
        let (_, metas) = split_header(buf).ok_or_else(|| bad(0, "bad protobuf".into()))?;
        Metadata::decode_entries(metas, 0)
    }

    #[test]
    fn round_trips_and_matches_prost() {
        let m = sample();
        let bytes = encode(&m);
        assert_eq!(bytes.len(), m.encoded_len());
        assert_eq!(decode(&bytes).unwrap(), m);
        // prost reads what the hand decoder reads.
        let p = pb::PdxHeader::decode(&bytes[..]).unwrap();
        let keys: Vec<&str> = p.metadata.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["list", "lr", "name", "ok", "raw", "step"]);
    }

    #[test]
    fn golden_bytes() {
        let mut m = Metadata::new();
        m.insert("a", 1i64).unwrap();
        m.insert("b", vec![MetaValue::Bool(true)]).unwrap();
        // field 21 (aa 01), len 7: key (0a 01 'a'), value (12 02: sint64 field 2 = zigzag 2);
        // field 21, len 11: key (0a 01 'b'), value (12 06: list field 6 (32 04): one element
        // (0a 02: bool field 4 = 1)).
        let b = encode(&m);
        assert_eq!(
            b,
            [
                0xaa, 0x01, 0x07, 0x0a, 0x01, b'a', 0x12, 0x02, 0x10, 0x02, //
                0xaa, 0x01, 0x0b, 0x0a, 0x01, b'b', 0x12, 0x06, 0x32, 0x04, 0x0a, 0x02, 0x20, 0x01,
            ]
        );
    }

    #[test]
    fn rejects_hostile_metadata() {
        // Keys out of order.
        let mut b = encode(&[("b", 1i64)].into_iter().collect());
        b.extend(encode(&[("a", 1i64)].into_iter().collect()));
        assert!(decode(&b).is_err());
        // Duplicate key.
        let one = encode(&[("a", 1i64)].into_iter().collect());
        assert!(decode(&[one.clone(), one].concat()).is_err());
        // Nesting too deep.
        let mut v = MetaValue::Int(1);
        for _ in 0..MAX_DEPTH {
            v = MetaValue::List(vec![v]);
        }
        let deep: Metadata = [("d", v)].into_iter().collect();
        assert!(deep.validate().is_err());
        let e = decode(&encode(&deep)).unwrap_err();
        assert!(matches!(e, Error::LimitExceeded { .. }), "{e}");
        // Empty key; over-long key.
        let empty: Metadata = [("", 1i64)].into_iter().collect();
        assert!(decode(&encode(&empty)).is_err());
        let long: Metadata = [("k".repeat(MAX_KEY_LEN + 1), 1i64)].into_iter().collect();
        assert!(matches!(
            decode(&encode(&long)).unwrap_err(),
            Error::LimitExceeded { .. }
        ));
        // A value with two types; a value with none; unknown field.
        let two = [
            0xaa, 0x01, 0x09, 0x0a, 0x01, b'a', 0x12, 0x04, 0x10, 0x02, 0x20, 0x01,
        ];
        assert!(decode(&two).is_err());
        let none = [0xaa, 0x01, 0x05, 0x0a, 0x01, b'a', 0x12, 0x00];
        assert!(decode(&none).is_err());
        let unknown = [0xaa, 0x01, 0x07, 0x0a, 0x01, b'a', 0x12, 0x02, 0x38, 0x01];
        assert!(decode(&unknown).is_err());
        // Every truncation of a valid encoding fails or decodes; never panics.
        let full = encode(&sample());
        for n in 0..full.len() {
            let _ = decode(&full[..n]);
        }
        // Invalid UTF-8 in a string value.
        let bad_utf8 = [
            0xaa, 0x01, 0x08, 0x0a, 0x01, b'a', 0x12, 0x03, 0x0a, 0x01, 0xff,
        ];
        assert!(decode(&bad_utf8).is_err());
    }

    #[test]
    fn too_many_values_is_refused_while_decoding() {
        // One list of MAX_VALUES empty-list elements: each costs 2 bytes ("0a 00" as a value
        // with an empty list is "32 00"), so the bound trips before the allocation grows.
        let elem = [0x0a, 0x02, 0x32, 0x00];
        let mut list = Vec::new();
        for _ in 0..MAX_VALUES {
            list.extend_from_slice(&elem);
        }
        let mut value = vec![0x32];
        crate::format::put_varint64(&mut value, list.len() as u64);
        value.extend_from_slice(&list);
        let mut entry = vec![0x0a, 0x01, b'x', 0x12];
        crate::format::put_varint64(&mut entry, value.len() as u64);
        entry.extend_from_slice(&value);
        let e = Metadata::decode_entries([&entry[..]], 9).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LimitExceeded {
                    what: "metadata values",
                    at: Some(9),
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn json_and_text_forms() {
        let m = sample();
        let j = m.to_json();
        assert_eq!(j["raw"], json!({"hex": "00ff"}));
        assert_eq!(j["list"][3], json!({"float": "NaN"}));
        assert_eq!(Metadata::from_json(&j).unwrap(), m);
        assert_eq!(MetaValue::parse("12").unwrap(), MetaValue::Int(12));
        assert_eq!(MetaValue::parse("1.0").unwrap(), MetaValue::Float(1.0));
        assert_eq!(MetaValue::parse("false").unwrap(), MetaValue::Bool(false));
        assert_eq!(
            MetaValue::parse("\"12\"").unwrap(),
            MetaValue::String("12".into())
        );
        assert_eq!(
            MetaValue::parse("hello world").unwrap(),
            MetaValue::String("hello world".into())
        );
        assert_eq!(
            MetaValue::parse("{\"hex\":\"0a0b\"}").unwrap(),
            MetaValue::Bytes(vec![10, 11])
        );
        assert!(MetaValue::parse("null").is_err());
        assert!(MetaValue::parse("{\"x\":1}").is_err());
        assert!(MetaValue::parse("18446744073709551615").is_err());
        assert_eq!(MetaValue::Int(3).to_text(), "3");
        assert_eq!(MetaValue::String("a b".into()).to_text(), "a b");
        let s = m.to_strings();
        assert_eq!(s["name"], "llama");
        assert_eq!(s["step"], "-7");
    }
}
