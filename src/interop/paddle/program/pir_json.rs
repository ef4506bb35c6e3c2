//! Reading a PIR program in JSON (`.json`, Paddle 3's default): [`parse_pir_json`] streams the
//! text once through [`serde_json::Deserializer`], driving a tree of shapes (the [`Shape`]
//! trait: `Top`, `ProgramObj`, `Regions`, `Blocks`, `Ops`, `Op`, the output's type) that keep
//! only what names and types the parameters and check and drop the rest. Its own file because
//! the streaming reader is most of the program code and apart from the `ProgramDesc` protobuf
//! and the programs paramdex writes (`program.rs`).

use std::borrow::Cow;
use std::path::Path;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::dtype::DType;
use crate::error::Result;

use super::decl::{corrupt, finish, ParamDecl};

/// The PIR type names of element types (`pir/serialize_deserialize`), without the dialect prefix.
fn pir_dtype(name: &str) -> Option<DType> {
    Some(match name {
        "t_bool" => DType::Bool,
        "t_i8" => DType::Int8,
        "t_ui8" => DType::UInt8,
        "t_i16" => DType::Int16,
        "t_i32" => DType::Int32,
        "t_i64" => DType::Int64,
        "t_f16" => DType::Float16,
        "t_bf16" => DType::BFloat16,
        "t_f32" => DType::Float32,
        "t_f64" => DType::Float64,
        "t_c64" => DType::Complex64,
        "t_c128" => DType::Complex128,
        "t_f8e4m3fn" => DType::Float8E4M3FN,
        "t_f8e5m2" => DType::Float8E5M2,
        _ => return None,
    })
}

/// The parameters of a PIR program in JSON (`.json`), sorted bytewise.
///
/// The JSON is read in one pass ([`serde_json::Deserializer`] driving the shapes below): what
/// paramdex uses (`base_code.magic`, and each top-level op's `"#"`, the name at `"A"[3]`,
/// `"OA"[0]` and the output's declared type) is materialised, borrowed where the text has no
/// escapes; everything else is checked and dropped, never built into a tree. A value read as a
/// shape it does not have counts as absent, as `Value::get` and `Value::as_*` found nothing in
/// it, and a key given twice counts by its last value, as in a `Value` map: the result and
/// every error are those of parsing into a [`serde_json::Value`] first.
///
/// # Errors
///
/// As [`load_program`](super::load_program).
pub fn parse_pir_json(bytes: &[u8], path: &Path) -> Result<Vec<ParamDecl>> {
    let mut params = Vec::new();
    // UTF-8 checked once for the whole text spares serde_json checking each string
    // (`from_str`); a text that is not UTF-8 goes through `from_slice`, which says where.
    let top = match std::str::from_utf8(bytes) {
        Ok(text) => read_json(serde_json::Deserializer::from_str(text), &mut params),
        Err(_) => read_json(serde_json::Deserializer::from_slice(bytes), &mut params),
    }
    .map_err(|e| corrupt(path, format!("not valid JSON: {e}")))?;
    if !top.pir {
        return Err(corrupt(
            path,
            "not a PIR program (base_code.magic is not \"pir\")",
        ));
    }
    match top.regions {
        None => Err(corrupt(path, "no program.regions array")),
        Some(Err(missing)) => Err(corrupt(path, missing)),
        Some(Ok(())) => finish(params, path),
    }
}

/// Reads a whole JSON text as [`Top`], as `serde_json::from_slice` would.
fn read_json<'de, R: serde_json::de::Read<'de>>(
    mut de: serde_json::Deserializer<R>,
    params: &mut Vec<ParamDecl>,
) -> serde_json::Result<TopOut> {
    // serde_json bounds its recursion (128 levels), so hostile nesting cannot overflow the
    // stack; `Skip` goes through the same bound, so it refuses what a `Value` parse refuses.
    let top = Read(Top { params }).deserialize(&mut de)?;
    de.end()?;
    Ok(top)
}

/// What the first region, block or op (in document order) that breaks a rule lacks.
#[derive(Debug)]
enum Missing {
    Blocks { ri: usize },
    Ops { ri: usize, bi: usize },
    Name { ri: usize, bi: usize, oi: usize },
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Missing::Blocks { ri } => write!(f, "region {ri} has no blocks array"),
            Missing::Ops { ri, bi } => write!(f, "region {ri} block {bi} has no ops array"),
            Missing::Name { ri, bi, oi } => write!(
                f,
                "region {ri} block {bi} op {oi} is a parameter op (\"#\":\"p\") without a name \
                 (its \"A\" array needs the name at index 3)"
            ),
        }
    }
}

/// How one JSON value is read: each method gets the value when it has that form; the defaults
/// read it as absent ([`Shape::absent`]), skipping a container's contents with [`Skip`].
trait Shape<'de>: Sized {
    /// What the value reads as.
    type Out;
    /// The value is not of the form this shape reads.
    fn absent(self) -> Self::Out;
    fn str(self, _s: &str) -> Self::Out {
        self.absent()
    }
    fn borrowed_str(self, s: &'de str) -> Self::Out {
        self.str(s)
    }
    fn u64(self, _v: u64) -> Self::Out {
        self.absent()
    }
    fn i64(self, _v: i64) -> Self::Out {
        self.absent()
    }
    fn bool(self, _v: bool) -> Self::Out {
        self.absent()
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        while seq.next_element_seed(Read(Skip))?.is_some() {}
        Ok(self.absent())
    }
    fn map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Self::Out, A::Error> {
        while map.next_entry_seed(Read(Skip), Read(Skip))?.is_some() {}
        Ok(self.absent())
    }
}

/// A [`Shape`] as a serde seed and visitor. It always asks for `deserialize_any`, as
/// `Value`'s `Deserialize` does, so serde_json checks each value as a `Value` parse would
/// (number range, escapes, UTF-8, nesting depth); serde's `IgnoredAny` does not (serde_json
/// skips it without those checks, and past the recursion limit).
struct Read<S>(S);

impl<'de, S: Shape<'de>> DeserializeSeed<'de> for Read<S> {
    type Value = S::Out;

    fn deserialize<D: Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> std::result::Result<S::Out, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de, S: Shape<'de>> Visitor<'de> for Read<S> {
    type Value = S::Out;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> std::result::Result<S::Out, E> {
        Ok(self.0.bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> std::result::Result<S::Out, E> {
        Ok(self.0.i64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> std::result::Result<S::Out, E> {
        Ok(self.0.u64(v))
    }
    fn visit_f64<E: de::Error>(self, _v: f64) -> std::result::Result<S::Out, E> {
        Ok(self.0.absent())
    }
    fn visit_str<E: de::Error>(self, v: &str) -> std::result::Result<S::Out, E> {
        Ok(self.0.str(v))
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> std::result::Result<S::Out, E> {
        Ok(self.0.borrowed_str(v))
    }
    fn visit_string<E: de::Error>(self, v: String) -> std::result::Result<S::Out, E> {
        Ok(self.0.str(&v))
    }
    fn visit_unit<E: de::Error>(self) -> std::result::Result<S::Out, E> {
        Ok(self.0.absent())
    }
    fn visit_none<E: de::Error>(self) -> std::result::Result<S::Out, E> {
        Ok(self.0.absent())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> std::result::Result<S::Out, A::Error> {
        self.0.seq(seq)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<S::Out, A::Error> {
        self.0.map(map)
    }
}

/// Any value, checked and dropped.
struct Skip;

impl<'de> Shape<'de> for Skip {
    type Out = ();
    fn absent(self) {}
}

/// An object key: its index in the list, `None` for a key not in it.
struct Key(&'static [&'static str]);

impl<'de> Shape<'de> for Key {
    type Out = Option<usize>;
    fn absent(self) -> Option<usize> {
        None
    }
    fn str(self, s: &str) -> Option<usize> {
        self.0.iter().position(|k| *k == s)
    }
}

/// Reads the entries of an object, giving each key of `keys` (by index) and its value to `f`
/// and skipping the others.
fn entries<'de, A: MapAccess<'de>>(
    mut map: A,
    keys: &'static [&'static str],
    mut f: impl FnMut(usize, &mut A) -> std::result::Result<(), A::Error>,
) -> std::result::Result<(), A::Error> {
    while let Some(key) = map.next_key_seed(Read(Key(keys)))? {
        match key {
            Some(k) => f(k, &mut map)?,
            None => map.next_value_seed(Read(Skip))?,
        }
    }
    Ok(())
}

/// The whole program: whether `base_code.magic` is `"pir"`, and the outcome of its regions
/// (`None`: no `program.regions` array).
struct Top<'a> {
    params: &'a mut Vec<ParamDecl>,
}

struct TopOut {
    pir: bool,
    regions: Option<std::result::Result<(), Missing>>,
}

impl<'de> Shape<'de> for Top<'_> {
    type Out = TopOut;
    fn absent(self) -> TopOut {
        TopOut {
            pir: false,
            regions: None,
        }
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<TopOut, A::Error> {
        let start = self.params.len();
        let mut out = TopOut {
            pir: false,
            regions: None,
        };
        entries(map, &["base_code", "program"], |k, map| {
            if k == 0 {
                out.pir = map.next_value_seed(Read(Magic))?;
            } else {
                // A repeated key counts by its last value.
                self.params.truncate(start);
                out.regions = map.next_value_seed(Read(ProgramObj {
                    params: &mut *self.params,
                }))?;
            }
            Ok(())
        })?;
        Ok(out)
    }
}

/// `base_code`: whether its `magic` is `"pir"`.
struct Magic;

impl<'de> Shape<'de> for Magic {
    type Out = bool;
    fn absent(self) -> bool {
        false
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<bool, A::Error> {
        let mut pir = false;
        entries(map, &["magic"], |_, map| {
            pir = map.next_value_seed(Read(IsStr("pir")))?;
            Ok(())
        })?;
        Ok(pir)
    }
}

/// Whether the value is the string given.
struct IsStr(&'static str);

impl<'de> Shape<'de> for IsStr {
    type Out = bool;
    fn absent(self) -> bool {
        false
    }
    fn str(self, s: &str) -> bool {
        s == self.0
    }
}

/// `program`: the outcome of its `regions` array (`None`: there is none).
struct ProgramObj<'a> {
    params: &'a mut Vec<ParamDecl>,
}

impl<'de> Shape<'de> for ProgramObj<'_> {
    type Out = Option<std::result::Result<(), Missing>>;
    fn absent(self) -> Self::Out {
        None
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Out, A::Error> {
        let start = self.params.len();
        let mut out = None;
        entries(map, &["regions"], |_, map| {
            self.params.truncate(start);
            out = map.next_value_seed(Read(Regions {
                params: &mut *self.params,
            }))?;
            Ok(())
        })?;
        Ok(out)
    }
}

/// `program.regions`: each region's parameters, up to the first that breaks a rule.
struct Regions<'a> {
    params: &'a mut Vec<ParamDecl>,
}

impl<'de> Shape<'de> for Regions<'_> {
    type Out = Option<std::result::Result<(), Missing>>;
    fn absent(self) -> Self::Out {
        None
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        let mut ri = 0;
        loop {
            let region = Read(Region {
                params: &mut *self.params,
                ri,
            });
            match seq.next_element_seed(region)? {
                None => return Ok(Some(Ok(()))),
                Some(Err(missing)) => {
                    while seq.next_element_seed(Read(Skip))?.is_some() {}
                    return Ok(Some(Err(missing)));
                }
                Some(Ok(())) => ri += 1,
            }
        }
    }
}

/// Region `ri`: its blocks' parameters, or the first rule broken.
struct Region<'a> {
    params: &'a mut Vec<ParamDecl>,
    ri: usize,
}

impl<'de> Shape<'de> for Region<'_> {
    type Out = std::result::Result<(), Missing>;
    fn absent(self) -> Self::Out {
        Err(Missing::Blocks { ri: self.ri })
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Out, A::Error> {
        let start = self.params.len();
        let ri = self.ri;
        let mut out = None;
        entries(map, &["blocks"], |_, map| {
            self.params.truncate(start);
            out = map.next_value_seed(Read(Blocks {
                params: &mut *self.params,
                ri,
            }))?;
            Ok(())
        })?;
        Ok(out.unwrap_or(Err(Missing::Blocks { ri })))
    }
}

/// A region's `blocks` array (`None`: not an array).
struct Blocks<'a> {
    params: &'a mut Vec<ParamDecl>,
    ri: usize,
}

impl<'de> Shape<'de> for Blocks<'_> {
    type Out = Option<std::result::Result<(), Missing>>;
    fn absent(self) -> Self::Out {
        None
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        let mut bi = 0;
        loop {
            let block = Read(Block {
                params: &mut *self.params,
                ri: self.ri,
                bi,
            });
            match seq.next_element_seed(block)? {
                None => return Ok(Some(Ok(()))),
                Some(Err(missing)) => {
                    while seq.next_element_seed(Read(Skip))?.is_some() {}
                    return Ok(Some(Err(missing)));
                }
                Some(Ok(())) => bi += 1,
            }
        }
    }
}

/// Block `bi` of region `ri`: its parameter ops, or the first rule broken.
struct Block<'a> {
    params: &'a mut Vec<ParamDecl>,
    ri: usize,
    bi: usize,
}

impl<'de> Shape<'de> for Block<'_> {
    type Out = std::result::Result<(), Missing>;
    fn absent(self) -> Self::Out {
        Err(Missing::Ops {
            ri: self.ri,
            bi: self.bi,
        })
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Out, A::Error> {
        let start = self.params.len();
        let (ri, bi) = (self.ri, self.bi);
        let mut out = None;
        entries(map, &["ops"], |_, map| {
            self.params.truncate(start);
            out = map.next_value_seed(Read(Ops {
                params: &mut *self.params,
                ri,
                bi,
            }))?;
            Ok(())
        })?;
        Ok(out.unwrap_or(Err(Missing::Ops { ri, bi })))
    }
}

/// A block's `ops` array (`None`: not an array): the persistable parameter ops' declarations
/// go to `params`, in program order.
struct Ops<'a> {
    params: &'a mut Vec<ParamDecl>,
    ri: usize,
    bi: usize,
}

impl<'de> Shape<'de> for Ops<'_> {
    type Out = Option<std::result::Result<(), Missing>>;
    fn absent(self) -> Self::Out {
        None
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        let mut oi = 0;
        while let Some(op) = seq.next_element_seed(Read(Op))? {
            if op.is_param {
                let Some(name) = op.name else {
                    while seq.next_element_seed(Read(Skip))?.is_some() {}
                    return Ok(Some(Err(Missing::Name {
                        ri: self.ri,
                        bi: self.bi,
                        oi,
                    })));
                };
                // "OA" holds the output's attributes [persistable, stop_gradient, trainable].
                // Paddle saves and loads only persistable parameters: an RNN's dropout state
                // is declared as a non-persistable parameter and has no record.
                if op.persistable {
                    let (dtype, dims) = if op.dense { op.ty } else { (None, None) };
                    self.params.push(ParamDecl {
                        name: name.into_owned().into_bytes(),
                        dtype,
                        dims,
                    });
                }
            }
            oi += 1;
        }
        Ok(Some(Ok(())))
    }
}

/// What an op's JSON says of it as a parameter op (`"#":"p"`, the name at `"A"[3]`, the
/// persistable flag at `"OA"[0]`, the output type at `"O"."TT"`).
struct OpOut<'de> {
    is_param: bool,
    name: Option<Cow<'de, str>>,
    persistable: bool,
    /// Whether `"O"."TT"."#"` names a dense tensor (`….t_dtensor`); `ty` counts only then.
    dense: bool,
    ty: (Option<DType>, Option<Vec<i64>>),
}

/// One op of a block.
struct Op;

impl<'de> Shape<'de> for Op {
    type Out = OpOut<'de>;
    fn absent(self) -> OpOut<'de> {
        OpOut {
            is_param: false,
            name: None,
            persistable: true,
            dense: false,
            ty: (None, None),
        }
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<OpOut<'de>, A::Error> {
        let mut out = Op.absent();
        entries(map, &["#", "A", "OA", "O"], |k, map| {
            match k {
                0 => out.is_param = map.next_value_seed(Read(IsStr("p")))?,
                1 => out.name = map.next_value_seed(Read(Nth(3, Name)))?.flatten(),
                // An op without "OA", or whose "OA" has no first element, counts as persistable.
                2 => {
                    out.persistable = map
                        .next_value_seed(Read(Nth(0, Persistable)))?
                        .unwrap_or(true)
                }
                _ => (out.dense, out.ty) = map.next_value_seed(Read(Output))?,
            }
            Ok(())
        })?;
        Ok(out)
    }
}

/// Element `.0` of an array, read as `.1` (`None`: not an array, or too short).
struct Nth<S>(usize, S);

impl<'de, S: Shape<'de>> Shape<'de> for Nth<S> {
    type Out = Option<S::Out>;
    fn absent(self) -> Self::Out {
        None
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        let Nth(n, shape) = self;
        for _ in 0..n {
            if seq.next_element_seed(Read(Skip))?.is_none() {
                return Ok(None);
            }
        }
        let out = seq.next_element_seed(Read(shape))?;
        if out.is_some() {
            while seq.next_element_seed(Read(Skip))?.is_some() {}
        }
        Ok(out)
    }
}

/// A string, borrowed from the JSON text where it has no escapes.
struct Name;

impl<'de> Shape<'de> for Name {
    type Out = Option<Cow<'de, str>>;
    fn absent(self) -> Self::Out {
        None
    }
    fn str(self, s: &str) -> Self::Out {
        Some(Cow::Owned(s.to_owned()))
    }
    fn borrowed_str(self, s: &'de str) -> Self::Out {
        Some(Cow::Borrowed(s))
    }
}

/// `"OA"[0]`: persistable unless it is the integer 0 or `false`.
struct Persistable;

impl<'de> Shape<'de> for Persistable {
    type Out = bool;
    fn absent(self) -> bool {
        true
    }
    fn u64(self, v: u64) -> bool {
        v != 0
    }
    fn i64(self, v: i64) -> bool {
        v != 0
    }
    fn bool(self, v: bool) -> bool {
        v
    }
}

/// An op's `"O"` object: whether its `"TT"` is a dense tensor type, and the dtype and dims
/// that type declares (`"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"}, dims, layout, lod,
/// offset]}`); `None` where not stated as expected.
struct Output;

type TypeDecl = (bool, (Option<DType>, Option<Vec<i64>>));

impl<'de> Shape<'de> for Output {
    type Out = TypeDecl;
    fn absent(self) -> TypeDecl {
        (false, (None, None))
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<TypeDecl, A::Error> {
        let mut out = Output.absent();
        entries(map, &["TT"], |_, map| {
            out = map.next_value_seed(Read(TensorType))?;
            Ok(())
        })?;
        Ok(out)
    }
}

/// `"O"."TT"`.
struct TensorType;

impl<'de> Shape<'de> for TensorType {
    type Out = TypeDecl;
    fn absent(self) -> TypeDecl {
        (false, (None, None))
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<TypeDecl, A::Error> {
        let mut out = TensorType.absent();
        entries(map, &["#", "D"], |k, map| {
            if k == 0 {
                out.0 = map.next_value_seed(Read(TypeIs("t_dtensor")))?;
            } else {
                out.1 = map.next_value_seed(Read(TypeData))?;
            }
            Ok(())
        })?;
        Ok(out)
    }
}

/// The last dot-separated part of a PIR type name (`"0.t_f32"` → `t_f32`).
fn type_name(s: &str) -> &str {
    s.rsplit('.').next().unwrap_or(s)
}

/// Whether the value is a PIR type name of the type given (`"0.t_dtensor"` for `t_dtensor`).
struct TypeIs(&'static str);

impl<'de> Shape<'de> for TypeIs {
    type Out = bool;
    fn absent(self) -> bool {
        false
    }
    fn str(self, s: &str) -> bool {
        type_name(s) == self.0
    }
}

/// A PIR element type name (`"0.t_f32"`): the dtype it names, if paramdex knows it.
struct DTypeName;

impl<'de> Shape<'de> for DTypeName {
    type Out = Option<DType>;
    fn absent(self) -> Self::Out {
        None
    }
    fn str(self, s: &str) -> Self::Out {
        pir_dtype(type_name(s))
    }
}

/// `"TT"."D"`: the element type (`[0]`) and dims (`[1]`).
struct TypeData;

impl<'de> Shape<'de> for TypeData {
    type Out = (Option<DType>, Option<Vec<i64>>);
    fn absent(self) -> Self::Out {
        (None, None)
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        let Some(dtype) = seq.next_element_seed(Read(ElementType))? else {
            return Ok((None, None));
        };
        let Some(dims) = seq.next_element_seed(Read(Dims))? else {
            return Ok((dtype, None));
        };
        while seq.next_element_seed(Read(Skip))?.is_some() {}
        Ok((dtype, dims))
    }
}

/// `{"#":"0.t_f32"}`: the dtype it names, if paramdex knows it.
struct ElementType;

impl<'de> Shape<'de> for ElementType {
    type Out = Option<DType>;
    fn absent(self) -> Self::Out {
        None
    }
    fn map<A: MapAccess<'de>>(self, map: A) -> std::result::Result<Self::Out, A::Error> {
        let mut out = None;
        entries(map, &["#"], |_, map| {
            out = map.next_value_seed(Read(DTypeName))?;
            Ok(())
        })?;
        Ok(out)
    }
}

/// An array of integers that fit an `i64` (`None`: not an array, or an element is not one).
struct Dims;

impl<'de> Shape<'de> for Dims {
    type Out = Option<Vec<i64>>;
    fn absent(self) -> Self::Out {
        None
    }
    fn seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Self::Out, A::Error> {
        let mut dims = Some(Vec::new());
        while let Some(d) = seq.next_element_seed(Read(Dim))? {
            match (&mut dims, d) {
                (Some(v), Some(d)) => v.push(d),
                _ => dims = None,
            }
        }
        Ok(dims)
    }
}

/// An integer that fits an `i64`.
struct Dim;

impl<'de> Shape<'de> for Dim {
    type Out = Option<i64>;
    fn absent(self) -> Option<i64> {
        None
    }
    fn u64(self, v: u64) -> Option<i64> {
        i64::try_from(v).ok()
    }
    fn i64(self, v: i64) -> Option<i64> {
        Some(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("m.json")
    }

    use serde_json::Value;

    // The reader before it was streamed (paramdex 0.1, issue 17): the JSON parsed into a
    // `Value` tree, then walked. `parse_pir_json` must give what it gives, errors included.
    fn pir_output_type(op: &Value) -> (Option<DType>, Option<Vec<i64>>) {
        let tt = op.get("O").and_then(|o| o.get("TT"));
        let is_dense = tt
            .and_then(|t| t.get("#"))
            .and_then(Value::as_str)
            .is_some_and(|s| s.rsplit('.').next() == Some("t_dtensor"));
        if !is_dense {
            return (None, None);
        }
        let d = tt.and_then(|t| t.get("D")).and_then(Value::as_array);
        let dtype = d
            .and_then(|d| d.first())
            .and_then(|t| t.get("#"))
            .and_then(Value::as_str)
            .and_then(|s| s.rsplit('.').next())
            .and_then(pir_dtype);
        let dims = d
            .and_then(|d| d.get(1))
            .and_then(Value::as_array)
            .and_then(|a| a.iter().map(Value::as_i64).collect::<Option<Vec<i64>>>());
        (dtype, dims)
    }

    fn by_value(bytes: &[u8], path: &Path) -> Result<Vec<ParamDecl>> {
        // serde_json bounds its recursion (128 levels), so hostile nesting cannot overflow the stack.
        let v: Value = serde_json::from_slice(bytes)
            .map_err(|e| corrupt(path, format!("not valid JSON: {e}")))?;
        let magic = v
            .get("base_code")
            .and_then(|b| b.get("magic"))
            .and_then(Value::as_str);
        if magic != Some("pir") {
            return Err(corrupt(
                path,
                "not a PIR program (base_code.magic is not \"pir\")",
            ));
        }
        let regions = v
            .get("program")
            .and_then(|p| p.get("regions"))
            .and_then(Value::as_array)
            .ok_or_else(|| corrupt(path, "no program.regions array"))?;
        let mut params = Vec::new();
        for (ri, region) in regions.iter().enumerate() {
            let blocks = region
                .get("blocks")
                .and_then(Value::as_array)
                .ok_or_else(|| corrupt(path, format!("region {ri} has no blocks array")))?;
            for (bi, block) in blocks.iter().enumerate() {
                let ops = block.get("ops").and_then(Value::as_array).ok_or_else(|| {
                    corrupt(path, format!("region {ri} block {bi} has no ops array"))
                })?;
                for (oi, op) in ops.iter().enumerate() {
                    if op.get("#").and_then(Value::as_str) != Some("p") {
                        continue;
                    }
                    let name = op
                        .get("A")
                        .and_then(Value::as_array)
                        .and_then(|a| a.get(3))
                        .and_then(Value::as_str)
                        .ok_or_else(|| {
                            corrupt(
                                path,
                                format!(
                                    "region {ri} block {bi} op {oi} is a parameter op (\"#\":\"p\") \
                                     without a name (its \"A\" array needs the name at index 3)"
                                ),
                            )
                        })?;
                    // "OA" holds the output's attributes [persistable, stop_gradient, trainable].
                    // Paddle saves and loads only persistable parameters: an RNN's dropout state
                    // is declared as a non-persistable parameter and has no record.
                    let persistable = op
                        .get("OA")
                        .and_then(Value::as_array)
                        .and_then(|a| a.first())
                        .is_none_or(|v| v.as_i64() != Some(0) && v.as_bool() != Some(false));
                    if !persistable {
                        continue;
                    }
                    let (dtype, dims) = pir_output_type(op);
                    params.push(ParamDecl {
                        name: name.as_bytes().to_vec(),
                        dtype,
                        dims,
                    });
                }
            }
        }
        finish(params, path)
    }

    /// Both readers over one input: the same parameters, or the same error text.
    fn same_as_value(j: &[u8]) {
        let got = parse_pir_json(j, p()).map_err(|e| e.to_string());
        let want = by_value(j, p()).map_err(|e| e.to_string());
        assert_eq!(got, want, "input: {}", String::from_utf8_lossy(j));
    }

    /// Inputs that a typed reader could read differently from a `Value` tree: keys given
    /// twice (the last counts), values of unexpected shapes (absent, not an error), escapes,
    /// and JSON that a `Value` parse refuses in parts the reader does not use (nesting past
    /// serde_json's limit, numbers out of range, lone surrogates, bytes that are not UTF-8).
    #[test]
    fn pir_json_reads_as_value_tree_does() {
        let op = |s: &str| {
            format!(
                r##"{{"base_code":{{"magic":"pir"}},"program":{{"regions":[{{"blocks":[{{"ops":[{s}]}}]}}]}}}}"##
            )
        };
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let mut cases: Vec<Vec<u8>> = [
            r##"{"base_code":{"magic":"pir"},"base_code":{"magic":"xyz"},"program":{"regions":[]}}"##.to_string(),
            r##"{"base_code":{"magic":"xyz"},"base_code":{"magic":"pir"},"program":{"regions":[]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir","magic":1},"program":{"regions":[]}}"##.to_string(),
            r##"{"base_code":{"magic":"p\u0069r"},"program":{"regions":[]}}"##.to_string(),
            r##"{"base_code":{"m\u0061gic":"pir"},"program":{"regions":[]}}"##.to_string(),
            r##"{"base_code":["pir"],"program":{"regions":[]}}"##.to_string(),
            r##"["base_code"]"##.to_string(),
            r##""pir""##.to_string(),
            "null".to_string(),
            "{} x".to_string(),
            "{} ".to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":{}}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":[{"regions":[]}]}"##.to_string(),
            r##"{"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}]}]}],"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"b"]}]}]}]},"base_code":{"magic":"pir"}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}]}]}]},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[]}]}]}]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[]}]}]}]},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}]}]}]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[]},{"blocks":5},{"blocks":[{"ops":[{"#":"p"}]}]}]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}]},{"ops":{}},{"ops":[{"#":"p"}]}]}]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}]},"x"]}]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}],"ops":[]}]},["blocks"]]}}"##.to_string(),
            r##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,"a"]}]}],"blocks":[{"ops":[{"#":"p","A":[0,0,0,"b"]}]}]}]}}"##.to_string(),
            op(r##"{"#":"p","A":[0,0,0,"a"],"#":"q"},{"#":"q","A":[0,0,0,"b"],"#":"p"},{"A":[0,0,0,"c"],"#":"p"}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"A":[0,0,0]}"##),
            op(r##"{"#":"p","A":[0,0,0,"a\u00e9\n\"b"]},{"#":"\u0070","A":[0,0,0,"\ud83d\ude00"]}"##),
            op(r##"{"#":"p","A":[0,0,0,7]}"##),
            op(r##"{"#":"p","A":{"3":"a"}}"##),
            op(r##"{"#":["p"],"A":[0,0,0,"a"]},{"#":"p","A":[0,0,0,"b",{"x":[1e5]}],"A2":[[[]]]}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"OA":[0]},{"#":"p","A":[0,0,0,"b"],"OA":[false]},{"#":"p","A":[0,0,0,"c"],"OA":[-0]},{"#":"p","A":[0,0,0,"d"],"OA":[0.0]},{"#":"p","A":[0,0,0,"e"],"OA":["0"]},{"#":"p","A":[0,0,0,"f"],"OA":[]},{"#":"p","A":[0,0,0,"g"],"OA":0},{"#":"p","A":[0,0,0,"h"],"OA":[null]},{"#":"p","A":[0,0,0,"i"],"OA":[1],"OA":[0]},{"#":"p","A":[0,0,0,"j"],"OA":[0],"OA":[true]}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"D":[{"#":"0.t_f32"},[1,2]],"#":"x.y.t_dtensor"}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"t_dtensor","D":[{"#":"t_i64","#":"0.t_bf16"},[9223372036854775807,-9223372036854775808,-1]]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[1,9223372036854775808]]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[1,2.0]]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"}]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[[{"#":"0.t_f32"}],[3]]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_x"},[3],"NCHW",[[[]]],0]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_vec","D":[{"#":"0.t_f32"},[3]]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[3]]},"TT":{}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":[{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[3]]}}]}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":{"0":{"#":"0.t_f32"}}}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[3]],"D":5}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[3]]}}},{"#":"p","A":[0,0,0,"a"],"O":{"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[-1]]}}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":1e400}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":-1e400}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":"\ud800"}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":"\ud800\u0041"}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":"\x"}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":"a	b"}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":01}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":[1,]}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":{"a":1,}}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X":tru}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],1:2}"##),
            op(r##"{"#":"p","A":[0,0,0,"a"],"X"}"##),
            op(&format!(r##"{{"#":"p","A":[0,0,0,"a"],"X":{}}}"##, deep(120))),
            op(&format!(r##"{{"#":"p","A":[0,0,0,"a"],"X":{}}}"##, deep(121))),
            op(&format!(r##"{{"#":"p","A":[0,0,0,"a"],"X":{}}}"##, deep(10_000))),
            op(&format!(r##"{{"#":"q","A":[0,0,0,{}]}}"##, deep(200))),
            deep(100_000),
        ]
        .into_iter()
        .map(String::into_bytes)
        .collect();
        let mut bad_utf8 = op(r##"{"#":"p","A":[0,0,0,"a"],"X":"??"}"##).into_bytes();
        let at = bad_utf8.windows(2).position(|w| w == b"??").unwrap();
        bad_utf8[at] = 0xff;
        cases.push(bad_utf8.clone());
        bad_utf8[at] = 0xc3;
        bad_utf8[at + 1] = 0xa9;
        cases.push(bad_utf8);
        for c in &cases {
            same_as_value(c);
        }
    }

    /// The fixtures' PIR programs (real Paddle 3.3.1 output), whole, cut short at every byte,
    /// and with one byte changed at every position: both readers agree.
    #[test]
    fn pir_json_fixtures_read_as_value_tree_does() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/paddle");
        let mut programs = 0;
        for rel in [
            "inference/pir/model.json",
            "models/pir/m.json",
            "pir_cases/noparams/m.json",
            "pir_cases/rnn/m.json",
            "pir_cases/tied/m.json",
        ] {
            let j = std::fs::read(dir.join(rel)).unwrap();
            assert!(!parse_pir_json(&j, p()).unwrap().is_empty() || rel.contains("noparams"));
            same_as_value(&j);
            programs += 1;
        }
        assert_eq!(programs, 5);
        let j = std::fs::read(dir.join("inference/pir/model.json")).unwrap();
        for n in 0..j.len() {
            same_as_value(&j[..n]);
        }
        let mut m = j.clone();
        for i in 0..j.len() {
            for b in [b'"', b']'] {
                m[i] = b;
                same_as_value(&m);
            }
            m[i] = j[i];
        }
    }

    #[test]
    fn pir_json_params_sorted_and_typed() {
        let j = br##"{"base_code":{"magic":"pir","version":4},"program":{"regions":[{"blocks":[{"ops":[
            {"#":"p","A":[0,1,1,"b"],"O":{"%":1,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_bf16"},[2,-1],"NCHW",[],0]}}},
            {"#":"1.data","A":[]},
            {"#":"p","A":[0,1,1,"A"],"O":{"%":2,"TT":{"#":"0.t_vec","D":[]}}}
        ]}]}]}}"##;
        let ps = parse_pir_json(j, p()).unwrap();
        assert_eq!(ps.len(), 2);
        assert_eq!(ps[0].name, b"A");
        assert_eq!(ps[0].dtype, None);
        assert_eq!(ps[1].name, b"b");
        assert_eq!(ps[1].dtype, Some(DType::BFloat16));
        assert_eq!(ps[1].dims, Some(vec![2, -1]));
        assert!(ps[1].accepts(DType::BFloat16, &[2, 7]));
        assert!(!ps[1].accepts(DType::BFloat16, &[3, 7]));
        assert!(!ps[1].accepts(DType::Float32, &[2, 7]));
        assert!(!ps[1].accepts(DType::BFloat16, &[2]));
    }

    /// Real Paddle 3.3.1 output: an LSTM's dropout state is a parameter op whose output is not
    /// persistable (`"OA":[0,1,0]`) and has no record; tied weights and the dropout state of
    /// every RNN layer are declared once per use.
    #[test]
    fn pir_json_skips_non_persistable_and_folds_repeated_declarations() {
        let j = br##"{"base_code":{"magic":"pir","version":4},"program":{"regions":[{"blocks":[{"ops":[
            {"#":"p","A":[0,1,1,"lstm_0.dropout_state__non_persistable"],"DA":[],"O":{"%":1,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_ui8"},[],"NCHW",[],0]}},"OA":[0,1,0],"QA":[]},
            {"#":"p","A":[0,1,1,"lstm_cell_0.b_0"],"DA":[],"O":{"%":2,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[32],"NCHW",[],0]}},"OA":[1,0,1],"QA":[]},
            {"#":"p","A":[0,1,1,"shared_w"],"O":{"%":3,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[-1,4],"NCHW",[],0]}},"OA":[1,0,1]},
            {"#":"p","A":[0,1,1,"shared_w"],"O":{"%":4,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[3,-1],"NCHW",[],0]}},"OA":[1,0,1]},
            {"#":"p","A":[0,1,1,"shared_w"],"O":{"%":5,"TT":{"#":"0.t_vec","D":[]}}}
        ]}]}]}}"##;
        let ps = parse_pir_json(j, p()).unwrap();
        let names: Vec<&[u8]> = ps.iter().map(|d| d.name.as_slice()).collect();
        assert_eq!(names, [&b"lstm_cell_0.b_0"[..], b"shared_w"]);
        assert_eq!(ps[1].dtype, Some(DType::Float32));
        assert_eq!(ps[1].dims, Some(vec![3, 4]));
        let clash = br##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[
            {"#":"p","A":[0,0,0,"x"],"O":{"%":1,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[2,3],"NCHW",[],0]}}},
            {"#":"p","A":[0,0,0,"x"],"O":{"%":2,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[2],"NCHW",[],0]}}}
        ]}]}]}}"##;
        let e = parse_pir_json(clash, p()).unwrap_err().to_string();
        assert!(e.contains("dims [2, 3] and [2]"), "{e}");
    }

    #[test]
    fn pir_json_errors() {
        let cases: [(&[u8], &str); 6] = [
            (b"{", "not valid JSON"),
            (br##"{"base_code":{"magic":"xyz"}}"##, "not a PIR program"),
            (br##"{"base_code":{"magic":"pir"}}"##, "program.regions"),
            (
                br##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[1]}]}]}]}}"##,
                "without a name",
            ),
            (
                br##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[
                    {"#":"p","A":[0,0,0,"x"],"O":{"%":1,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f32"},[2],"NCHW",[],0]}}},
                    {"#":"p","A":[0,0,0,"x"],"O":{"%":2,"TT":{"#":"0.t_dtensor","D":[{"#":"0.t_f16"},[2],"NCHW",[],0]}}}
                ]}]}]}}"##,
                "declared twice with different types: float32 and float16",
            ),
            (
                br##"{"base_code":{"magic":"pir"},"program":{"regions":[{"blocks":[{"ops":[{"#":"p","A":[0,0,0,""]}]}]}]}}"##,
                "empty name",
            ),
        ];
        for (j, want) in cases {
            let e = parse_pir_json(j, p()).unwrap_err().to_string();
            assert!(e.contains(want), "{e} lacks {want}");
        }
        // Deep nesting is refused by serde_json's recursion limit, not by a stack overflow.
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_pir_json(deep.as_bytes(), p()).is_err());
    }
}
