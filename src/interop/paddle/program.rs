//! A Paddle model's program: which variables are its parameters.
//!
//! - Legacy `.pdmodel` (a `ProgramDesc` protobuf): the variables of block 0 with
//!   `persistable = true`, excluding `feed` (type 9), `fetch` (10) and RAW (17), as Paddle's C++
//!   inference loader does (`paddle/fluid/inference/io.cc`).
//! - PIR `.json` (the default since Paddle 3): the parameter ops (`"#":"p"`) of the program's
//!   top-level blocks whose output is persistable (the first element of their `"OA"` array is
//!   not 0; an op without `"OA"` counts as persistable); the name is the fourth element of
//!   their `"A"` array.
//!
//! A name declared more than once (a parameter shared by several ops) is one parameter, provided
//! the declarations agree on dtype and dims.
//!
//! Either way the `.pdiparams` records follow the names in bytewise order (Paddle sorts them),
//! so [`Program::params`] is sorted. The program's declared dtype and dims are kept, where it
//! states them, to cross-check each record.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use prost::Message;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::dtype::DType;
use crate::error::{ensure_within, Error, IoContext, Result};
use crate::name::{display, MAX_NAME_LEN};
use crate::proto::paddle::var_type::{DenseTensorDesc, TensorDesc};
use crate::proto::paddle::{BlockDesc, ProgramDesc, VarDesc, VarType};

/// Largest program file read (bytes). Programs hold no weights; this only bounds memory.
pub const MAX_PROGRAM_LEN: u64 = 1 << 30;

/// Paddle `VarType.Type` numbers of variables that are never parameters.
const FEED_MINIBATCH: i32 = 9;
const FETCH_LIST: i32 = 10;
const RAW: i32 = 17;
/// `VarType.Type` of a dense tensor (formerly LOD_TENSOR).
const DENSE_TENSOR: i32 = 7;

/// Which serialization a program uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProgramKind {
    /// A legacy `ProgramDesc` protobuf (`.pdmodel`, `__model__`).
    ProgramDesc,
    /// A PIR program in JSON (`.json`).
    PirJson,
}

/// One parameter as the program declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamDecl {
    /// The variable name (arbitrary bytes).
    pub name: Vec<u8>,
    /// The declared element type, when the program states one paramdex knows.
    pub dtype: Option<DType>,
    /// The declared dims (`-1` = unknown), when the program states them.
    pub dims: Option<Vec<i64>>,
}

impl ParamDecl {
    /// Folds a second declaration of the same parameter into this one: what either states is
    /// kept; a dtype or dims that contradict each other are an error (its text says how).
    fn merge(&mut self, other: ParamDecl) -> std::result::Result<(), String> {
        match (self.dtype, other.dtype) {
            (Some(a), Some(b)) if a != b => return Err(format!("{a} and {b}")),
            (None, b) => self.dtype = b,
            _ => {}
        }
        match (&mut self.dims, other.dims) {
            (Some(a), Some(b)) => {
                let agree =
                    a.len() == b.len() && a.iter().zip(&b).all(|(&x, &y)| x == y || x < 0 || y < 0);
                if !agree {
                    return Err(format!("dims {a:?} and {b:?}"));
                }
                for (x, y) in a.iter_mut().zip(b) {
                    if *x < 0 {
                        *x = y;
                    }
                }
            }
            (a @ None, b) => *a = b,
            (Some(_), None) => {}
        }
        Ok(())
    }

    /// Whether a record's dtype and shape agree with this declaration (unknowns agree).
    pub fn accepts(&self, dtype: DType, dims: &[u64]) -> bool {
        let dtype_ok = match self.dtype {
            Some(d) => d == dtype,
            None => true,
        };
        let dims_ok = match &self.dims {
            Some(want) => {
                want.len() == dims.len()
                    && want
                        .iter()
                        .zip(dims)
                        .all(|(&w, &d)| w < 0 || u64::try_from(w) == Ok(d))
            }
            None => true,
        };
        dtype_ok && dims_ok
    }
}

/// A parsed program: its file, kind and parameters in bytewise name order.
#[derive(Clone, Debug)]
pub struct Program {
    /// The program file.
    pub path: PathBuf,
    /// Its serialization.
    pub kind: ProgramKind,
    /// The parameters, sorted bytewise by name, names unique.
    pub params: Vec<ParamDecl>,
}

/// Reads and parses the program at `path`, detecting the serialization by name and content (a
/// `.json` file, or anything starting with `{`, is PIR JSON; anything else is parsed as a
/// `ProgramDesc`).
///
/// # Errors
///
/// [`Error::Io`] if it cannot be read, [`Error::LimitExceeded`] above [`MAX_PROGRAM_LEN`],
/// [`Error::Corrupt`] if it does not parse or breaks a rule (missing required field, duplicate
/// or empty name), [`Error::Unsupported`] for a persistable variable that is not a dense tensor.
pub fn load_program(path: &Path) -> Result<Program> {
    let len = std::fs::metadata(path)
        .ctx("reading metadata of", path)?
        .len();
    ensure_within("program file size", len, MAX_PROGRAM_LEN, None)?;
    let bytes = std::fs::read(path).ctx("reading", path)?;
    parse_program(&bytes, path)
}

/// Parses the program `bytes`, found at `path` (a file or an object's URL, named in messages
/// and deciding the serialization with the content as [`load_program`] says).
///
/// # Errors
///
/// As [`load_program`], but for reading: [`Error::LimitExceeded`] above [`MAX_PROGRAM_LEN`].
pub(crate) fn parse_program(bytes: &[u8], path: &Path) -> Result<Program> {
    ensure_within(
        "program file size",
        bytes.len() as u64,
        MAX_PROGRAM_LEN,
        None,
    )?;
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    let json_name = path.extension().is_some_and(|e| e == "json");
    let (kind, params) = if first == Some(&b'{') || json_name {
        (ProgramKind::PirJson, parse_pir_json(bytes, path)?)
    } else {
        (ProgramKind::ProgramDesc, parse_program_desc(bytes, path)?)
    };
    Ok(Program {
        path: path.to_path_buf(),
        kind,
        params,
    })
}

fn corrupt(path: &Path, detail: impl std::fmt::Display) -> Error {
    Error::corrupt("program", 0, format!("{}: {detail}", path.display()))
}

/// Sorts the declarations bytewise and rejects empty, over-long and duplicate names.
fn finish(mut params: Vec<ParamDecl>, path: &Path) -> Result<Vec<ParamDecl>> {
    for p in &params {
        if p.name.is_empty() {
            return Err(corrupt(path, "a parameter has an empty name"));
        }
        if p.name.len() > MAX_NAME_LEN {
            return Err(corrupt(
                path,
                format!(
                    "parameter name of {} bytes is above the limit of {MAX_NAME_LEN}",
                    p.name.len()
                ),
            ));
        }
    }
    params.sort_by(|a, b| a.name.cmp(&b.name));
    // A parameter used by several ops can be declared once per use (weight tying in a static
    // graph, the shared dropout state of every RNN layer in PIR); Paddle stores it once.
    let mut unique: Vec<ParamDecl> = Vec::with_capacity(params.len());
    for p in params {
        match unique.last_mut() {
            Some(last) if last.name == p.name => last.merge(p).map_err(|detail| {
                corrupt(
                    path,
                    format!(
                        "parameter {} is declared twice with different types: {detail}",
                        display(&last.name)
                    ),
                )
            })?,
            _ => unique.push(p),
        }
    }
    Ok(unique)
}

/// The parameters of a legacy `ProgramDesc` (`.pdmodel`), sorted bytewise.
///
/// # Errors
///
/// As [`load_program`].
pub fn parse_program_desc(bytes: &[u8], path: &Path) -> Result<Vec<ParamDecl>> {
    let prog = ProgramDesc::decode(bytes)
        .map_err(|e| corrupt(path, format!("not a Paddle ProgramDesc protobuf: {e}")))?;
    let block = prog
        .blocks
        .first()
        .ok_or_else(|| corrupt(path, "the ProgramDesc has no blocks"))?;
    if block.idx != 0 {
        return Err(corrupt(
            path,
            format!("block 0 has idx {} (expected 0)", block.idx),
        ));
    }
    let mut params = Vec::new();
    for (i, v) in block.vars.iter().enumerate() {
        let name = display(&v.name);
        let ty = v.r#type.as_ref().ok_or_else(|| {
            corrupt(
                path,
                format!("block 0 variable {i} ({name}) has no type (a required field)"),
            )
        })?;
        if !v.persistable.unwrap_or(false) {
            continue;
        }
        match ty.r#type {
            FEED_MINIBATCH | FETCH_LIST | RAW => continue,
            DENSE_TENSOR => {}
            other => {
                return Err(Error::Unsupported(format!(
                    "{}: persistable variable {name} has Paddle type {other} ({}); paramdex \
                     reads dense-tensor parameters only",
                    path.display(),
                    crate::dtype::paddle_type_name(i64::from(other))
                        .unwrap_or("not a variable kind paramdex knows")
                )))
            }
        }
        let tensor = ty.dense_tensor.as_ref().and_then(|d| d.tensor.as_ref());
        params.push(ParamDecl {
            name: v.name.clone(),
            dtype: tensor.and_then(|t| DType::from_paddle(i64::from(t.data_type))),
            dims: tensor.map(|t| t.dims.clone()),
        });
    }
    finish(params, path)
}

/// Whether `bytes` is a legacy `ProgramDesc` that declares variables only (one block, no ops):
/// a program as paramdex writes beside `convert --to paddle` output, not a model's graph.
pub(crate) fn is_parameters_only(bytes: &[u8]) -> bool {
    ProgramDesc::decode(bytes).is_ok_and(|p| p.blocks.len() == 1 && p.blocks[0].ops.is_empty())
}

/// Why a legacy `ProgramDesc` cannot name a tensor called `name`, or `None` if it can: the
/// name must be UTF-8 (Paddle reads variable names as text: Python's `Variable.name` of a
/// name that is not UTF-8 fails), not empty, and not `feed` or `fetch`, the variables
/// Paddle's executor keeps its feed and fetch lists in (a tensor by those names breaks every
/// later `Executor.run`; checked with Paddle 3.3.1).
pub(crate) fn cannot_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() {
        Some("unnamed (a Paddle program cannot declare a variable without a name)")
    } else if std::str::from_utf8(name).is_err() {
        Some("named by bytes that are not UTF-8 (a Paddle program names its variables in UTF-8)")
    } else if name == b"feed" || name == b"fetch" {
        Some(
            "named like a list of Paddle's executor (it keeps what it feeds and fetches in the \
             variables `feed` and `fetch`)",
        )
    } else {
        None
    }
}

/// The variable paramdex declares for a parameter in the program it writes: a persistable
/// dense tensor with its dtype, dims and LoD level count, as `paddle.static` declares one
/// (`Block.create_var(persistable=True)` in Paddle 3.3.1 gives the same fields).
///
/// # Errors
///
/// [`Error::InvalidArgument`] for a dimension above `i64::MAX` or more LoD levels than an
/// `int32` holds (a record cannot have either).
pub(crate) fn param_var(
    name: &[u8],
    dtype: DType,
    dims: &[u64],
    lod_levels: usize,
) -> Result<VarDesc> {
    let bad = |what: &str| {
        Error::InvalidArgument(format!(
            "tensor {}: {what} does not fit a Paddle program",
            display(name)
        ))
    };
    let dims = dims
        .iter()
        .map(|&d| i64::try_from(d).map_err(|_| bad("a dimension")))
        .collect::<Result<Vec<i64>>>()?;
    let lod = i32::try_from(lod_levels).map_err(|_| bad("the LoD level count"))?;
    Ok(VarDesc {
        name: name.to_vec(),
        r#type: Some(VarType {
            r#type: DENSE_TENSOR,
            selected_rows: None,
            dense_tensor: Some(DenseTensorDesc {
                tensor: Some(TensorDesc {
                    data_type: dtype.paddle_code(),
                    dims,
                }),
                // Paddle leaves the default (0) out.
                legacy_lod_level: (lod > 0).then_some(lod),
            }),
        }),
        persistable: Some(true),
    })
}

/// Tag of `BlockDesc.vars` (field 3, length-delimited) and of `ProgramDesc.blocks` (field 1).
const VARS_TAG: u8 = (3 << 3) | 2;
const BLOCKS_TAG: u8 = (1 << 3) | 2;

/// Bytes `var` takes in its block: tag, length, message.
pub(crate) fn var_len(var: &VarDesc) -> u64 {
    let n = var.encoded_len();
    (1 + prost::length_delimiter_len(n) + n) as u64
}

/// Appends `var` as an element of `BlockDesc.vars`.
pub(crate) fn put_var(var: &VarDesc, out: &mut Vec<u8>) {
    out.push(VARS_TAG);
    // Writing to a Vec cannot fail (it grows as needed).
    let _ = var.encode_length_delimited(out);
}

/// The bytes of a parameters-only `ProgramDesc` (block 0, no ops) before its variables, when
/// they take `vars_len` bytes ([`var_len`] of each); the variables follow ([`put_var`]), and
/// nothing after them. Written as a stream so that a program of millions of variables is never
/// held in memory.
pub(crate) fn program_head(vars_len: u64) -> Vec<u8> {
    let block = BlockDesc {
        idx: 0,
        parent_idx: -1,
        vars: Vec::new(),
        ops: Vec::new(),
    };
    let fields = block.encode_to_vec();
    let block_len = (fields.len() as u64).saturating_add(vars_len);
    let mut out = vec![BLOCKS_TAG];
    // A length above usize::MAX cannot be written; the caller bounds it by MAX_PROGRAM_LEN.
    let _ =
        prost::encode_length_delimiter(usize::try_from(block_len).unwrap_or(usize::MAX), &mut out);
    out.extend_from_slice(&fields);
    out
}

/// The size of the program [`program_head`] starts, with variables of `vars_len` bytes.
pub(crate) fn program_len(vars_len: u64) -> u64 {
    (program_head(vars_len).len() as u64).saturating_add(vars_len)
}

/// The PIR program paramdex writes beside a parameters-only `ProgramDesc` (`PREFIX.json`, read
/// by Paddle 3's default PIR mode): its text before the parameter ops, as
/// `paddle.static.save_inference_model` writes it in Paddle 3.3.1 (`base_code` version 4, one
/// region holding one block).
pub(crate) const PIR_HEAD: &[u8] = br##"{"base_code":{"magic":"pir","trainable":true,"version":4},"program":{"regions":[{"#":"region_0","blocks":[{"#":"block_0","args":[],"ops":["##;

/// The text after the parameter ops of [`PIR_HEAD`]'s program.
pub(crate) const PIR_TAIL: &[u8] = b"]}]}]}}";

/// The PIR element type name of `dtype` (`"0.t_f32"`), if PIR has one: PIR has no unsigned
/// types but `uint8` (`pir/include/core/builtin_type.h`), so `uint16`, `uint32` and `uint64`
/// have none.
pub(crate) fn pir_dtype_name(dtype: DType) -> Option<&'static str> {
    Some(match dtype {
        DType::Bool => "0.t_bool",
        DType::Int8 => "0.t_i8",
        DType::UInt8 => "0.t_ui8",
        DType::Int16 => "0.t_i16",
        DType::Int32 => "0.t_i32",
        DType::Int64 => "0.t_i64",
        DType::Float16 => "0.t_f16",
        DType::BFloat16 => "0.t_bf16",
        DType::Float32 => "0.t_f32",
        DType::Float64 => "0.t_f64",
        DType::Complex64 => "0.t_c64",
        DType::Complex128 => "0.t_c128",
        DType::Float8E4M3FN => "0.t_f8e4m3fn",
        DType::Float8E5M2 => "0.t_f8e5m2",
        // PIR has no unsigned types but uint8, and none of the low-precision types Paddle has
        // no number for (those are refused by the Paddle outputs before, SPEC.md 6).
        _ => return None,
    })
}

/// Appends to `out` the parameter op (`builtin.parameter`, `"#":"p"`) declaring `var` in the
/// program [`PIR_HEAD`] starts, as Paddle 3.3.1 writes one for `paddle.create_parameter`:
/// `"A"` is `[is_distributed, is_parameter, need_clip, name]`, the output (value id `id`,
/// counted from 1) a dense tensor of the dtype and dims, and `"OA"` is
/// `[persistable, stop_gradient, trainable]`. The op after the first is preceded by a comma
/// (`first` false). `None` if PIR has no type for the dtype ([`pir_dtype_name`]) or the name
/// is not UTF-8 (which [`cannot_name`] refuses before).
pub(crate) fn put_pir_param(var: &VarDesc, id: u64, first: bool, out: &mut Vec<u8>) -> Option<()> {
    let name = std::str::from_utf8(&var.name).ok()?;
    let tensor = var
        .r#type
        .as_ref()?
        .dense_tensor
        .as_ref()?
        .tensor
        .as_ref()?;
    let dtype = pir_dtype_name(DType::from_paddle(i64::from(tensor.data_type))?)?;
    if !first {
        out.push(b',');
    }
    out.extend_from_slice(br##"{"#":"p","A":[0,1,1,"##);
    // A string always serializes (escaping `"`, `\` and control characters).
    out.extend_from_slice(serde_json::to_string(name).ok()?.as_bytes());
    out.extend_from_slice(
        format!(r##"],"DA":[],"O":{{"%":{id},"TT":{{"#":"0.t_dtensor","D":[{{"#":"{dtype}"}},["##)
            .as_bytes(),
    );
    for (i, d) in tensor.dims.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(d.to_string().as_bytes());
    }
    out.extend_from_slice(br##"],"NCHW",[],0]}},"OA":[1,0,1],"QA":[]}"##);
    Some(())
}

/// Whether `bytes` is a PIR program exactly as paramdex writes it ([`PIR_HEAD`], a parameter
/// op per entry of `params`, in order, [`PIR_TAIL`]), `params` being what it declares (as
/// [`parse_pir_json`] read them): a parameters-only program, not a model's graph.
pub(crate) fn is_parameters_only_json(bytes: &[u8], params: &[ParamDecl]) -> bool {
    let Some(mut rest) = bytes.strip_prefix(PIR_HEAD) else {
        return false;
    };
    let mut op = Vec::new();
    for (i, p) in params.iter().enumerate() {
        let (Some(dtype), Some(dims)) = (p.dtype, &p.dims) else {
            return false;
        };
        let Some(dims) = dims
            .iter()
            .map(|&d| u64::try_from(d).ok())
            .collect::<Option<Vec<u64>>>()
        else {
            return false;
        };
        let Ok(var) = param_var(&p.name, dtype, &dims, 0) else {
            return false;
        };
        op.clear();
        if put_pir_param(&var, i as u64 + 1, i == 0, &mut op).is_none() {
            return false;
        }
        match rest.strip_prefix(op.as_slice()) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest == PIR_TAIL
}

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
/// As [`load_program`].
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

    /// The program paramdex writes, streamed as head + variables, parses back to the same
    /// declarations, in the same (bytewise) order, and counts as parameters-only.
    #[test]
    fn written_program_desc_reads_back() {
        let vars = [
            param_var(b"a.w", DType::Float32, &[2, 3], 0).unwrap(),
            param_var(b"z seq", DType::Int64, &[5, 1], 2).unwrap(),
            param_var("ünï/b".as_bytes(), DType::BFloat16, &[], 0).unwrap(),
        ];
        let vars_len: u64 = vars.iter().map(var_len).sum();
        let mut bytes = program_head(vars_len);
        for v in &vars {
            put_var(v, &mut bytes);
        }
        assert_eq!(bytes.len() as u64, program_len(vars_len));
        let params = parse_program_desc(&bytes, p()).unwrap();
        type Decl<'a> = (&'a [u8], Option<DType>, Option<Vec<i64>>);
        let got: Vec<Decl<'_>> = params
            .iter()
            .map(|d| (d.name.as_slice(), d.dtype, d.dims.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (&b"a.w"[..], Some(DType::Float32), Some(vec![2, 3])),
                (b"z seq", Some(DType::Int64), Some(vec![5, 1])),
                ("ünï/b".as_bytes(), Some(DType::BFloat16), Some(vec![])),
            ]
        );
        let prog = ProgramDesc::decode(bytes.as_slice()).unwrap();
        let lod = prog.blocks[0].vars[1].r#type.as_ref().unwrap();
        assert_eq!(lod.dense_tensor.as_ref().unwrap().legacy_lod_level, Some(2));
        assert!(is_parameters_only(&bytes));
        assert!(!is_parameters_only(b"\xff\xff"));
        assert_eq!(cannot_name(b"ok/name"), None);
        for bad in [&b""[..], b"\xff", b"feed", b"fetch"] {
            assert!(cannot_name(bad).is_some(), "{bad:?}");
        }
        assert!(param_var(b"x", DType::Float32, &[u64::MAX], 0).is_err());
    }

    /// The PIR program paramdex writes parses back to its declarations, and only a program
    /// byte for byte as paramdex writes it counts as parameters-only.
    #[test]
    fn generated_pir_program() {
        let vars = [
            param_var(b"a \"q\"\\", DType::Float32, &[2, 3], 0).unwrap(),
            param_var("ünï\tb".as_bytes(), DType::BFloat16, &[], 0).unwrap(),
            param_var(b"z", DType::Int64, &[5, 1], 1).unwrap(),
        ];
        let mut bytes = PIR_HEAD.to_vec();
        for (i, v) in vars.iter().enumerate() {
            put_pir_param(v, i as u64 + 1, i == 0, &mut bytes).unwrap();
        }
        bytes.extend_from_slice(PIR_TAIL);
        let params = parse_pir_json(&bytes, p()).unwrap();
        let names: Vec<&[u8]> = params.iter().map(|d| d.name.as_slice()).collect();
        assert_eq!(names, [&b"a \"q\"\\"[..], b"z", "ünï\tb".as_bytes()]);
        assert_eq!(params[2].dtype, Some(DType::BFloat16));
        assert_eq!(params[2].dims, Some(vec![]));
        // In record (bytewise) order the text is what paramdex writes.
        let mut sorted = vars.to_vec();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        let mut ours = PIR_HEAD.to_vec();
        for (i, v) in sorted.iter().enumerate() {
            put_pir_param(v, i as u64 + 1, i == 0, &mut ours).unwrap();
        }
        ours.extend_from_slice(PIR_TAIL);
        assert!(is_parameters_only_json(&ours, &params));
        assert!(
            !is_parameters_only_json(&bytes, &params),
            "not in record order"
        );
        let mut graph = ours.clone();
        let at = graph.len() - PIR_TAIL.len();
        graph.splice(
            at..at,
            br##",{"#":"1.data","A":[],"O":[]}"##.iter().copied(),
        );
        assert!(!is_parameters_only_json(&graph, &params));
        assert!(!is_parameters_only_json(&ours, &params[..2]));
        let var = param_var(b"u", DType::UInt32, &[2], 0).unwrap();
        assert_eq!(put_pir_param(&var, 1, true, &mut Vec::new()), None);
    }

    #[test]
    fn program_desc_errors() {
        assert!(parse_program_desc(b"\xff\xff", p())
            .unwrap_err()
            .to_string()
            .contains("not a Paddle ProgramDesc"));
        assert!(parse_program_desc(b"", p())
            .unwrap_err()
            .to_string()
            .contains("no blocks"));
    }
}
