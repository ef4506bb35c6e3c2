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

use std::path::{Path, PathBuf};

use prost::Message;

use crate::dtype::DType;
use crate::error::{ensure_within, Error, IoContext, Result};
use crate::name::display;
use crate::proto::paddle::var_type::{DenseTensorDesc, TensorDesc};
use crate::proto::paddle::{BlockDesc, ProgramDesc, VarDesc, VarType};

mod decl;
mod pir_json;

pub use decl::ParamDecl;
use decl::{corrupt, finish};
pub use pir_json::parse_pir_json;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("m.json")
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
