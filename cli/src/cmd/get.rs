//! `get`: one tensor or several (names, globs), printed, as JSON, or written raw or as `.npy`;
//! `--slice` with NumPy's basic indexing.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use paramdex::interop::{json as values, open_any, Kind, TensorData, TensorInfo, TensorStore};
use paramdex::{name, Error, Result};
use serde_json::{json, Map, Value};

use super::output::{count_s, write_inline, write_json};
use super::{human_bytes, os_bytes, stdout_err, GetFormat};

use super::ls::{describe, shape_str};

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::io(what.to_string(), e)
}

/// JSON for string elements: UTF-8 as strings, other bytes as {"hex": "..."} (lossless).
fn strings_json(strings: &[Vec<u8>], shape: &[u64], limit: usize) -> (Value, bool) {
    let elem = |s: &Vec<u8>| match std::str::from_utf8(s) {
        Ok(u) => json!(u),
        Err(_) => json!({ "hex": name::to_hex(s) }),
    };
    if strings.len() > limit {
        return (
            Value::Array(strings[..limit].iter().map(elem).collect()),
            true,
        );
    }
    fn nest(shape: &[u64], it: &mut dyn Iterator<Item = Value>) -> Value {
        match shape.split_first() {
            None => it.next().unwrap_or(Value::Null),
            Some((&d, rest)) => Value::Array((0..d).map(|_| nest(rest, it)).collect()),
        }
    }
    (nest(shape, &mut strings.iter().map(elem)), false)
}

/// What `get` is asked for, besides the input and the name.
#[derive(Debug)]
pub struct GetOptions {
    /// `--hex`: the name is given in hex.
    pub hex: bool,
    /// `--format`.
    pub format: GetFormat,
    /// `-o`: a file, or `-` for standard output.
    pub output: Option<PathBuf>,
    /// `--limit`: values printed at most.
    pub limit: usize,
    /// `--stats`.
    pub stats: bool,
    /// `--slice`: a region, NumPy style.
    pub slice: Option<String>,
}

pub fn get(file: &Path, name_args: Vec<OsString>, opts: GetOptions) -> Result<ExitCode> {
    let GetOptions {
        hex,
        format,
        output,
        limit,
        stats,
        slice,
    } = opts;
    if stats && matches!(format, GetFormat::Raw | GetFormat::Npy) {
        super::print_error(
            "--stats prints statistics as json or text; it does not go with --format raw or npy \
             (see paramdex get --help)",
        );
        return Ok(ExitCode::from(super::EXIT_USAGE));
    }
    let keys = name_args
        .iter()
        .map(|a| {
            if hex {
                let s = a.to_string_lossy();
                name::from_hex(&s)
                    .ok_or_else(|| Error::InvalidArgument(format!("--hex: {s:?} is not hex")))
            } else {
                Ok(os_bytes(a))
            }
        })
        .collect::<Result<Vec<Vec<u8>>>>()?;
    let store = open_any(file)?;
    let load = |key: &[u8]| match &slice {
        Some(spec) => super::index::load_index(store.as_ref(), key, spec),
        None => store.load(key),
    };
    // One name that is a tensor's: that tensor, in any format.
    if let [key] = keys.as_slice() {
        if let Some(t) = load(key)? {
            return get_one(&t, &key[..], format, output, limit, stats);
        }
    }
    // Several names, or patterns: each name that is a tensor's is that tensor; a name that is
    // none but holds a glob's `*`, `?`, `[` or `{` is the tensors it matches, in name order.
    let mut names: Vec<Vec<u8>> = Vec::new();
    for key in &keys {
        if store.info(key)?.is_some() || load(key)?.is_some() {
            names.push(key.clone());
            continue;
        }
        let pattern = (!hex)
            .then(|| name::as_utf8(key))
            .flatten()
            .filter(|p| p.contains(['*', '?', '[', '{']));
        let Some(pattern) = pattern else {
            return not_found(key, file, store.as_ref());
        };
        let set = super::convert::glob("get", pattern)?.compile_matcher();
        let before = names.len();
        for t in store.scan(b"")? {
            let n = t?.name;
            if set.is_match_candidate(&super::convert::candidate(&n)) {
                names.push(n);
            }
        }
        if names.len() == before {
            super::print_error(format!(
                "no tensor name matches the pattern {pattern} in {}",
                file.display()
            ));
            return Ok(ExitCode::from(super::EXIT_NOT_FOUND));
        }
    }
    if matches!(format, GetFormat::Raw | GetFormat::Npy) {
        return Err(Error::InvalidArgument(format!(
            "--format {} writes one tensor, not the {} that {} name: use --format json or \
             text, or one name at a time",
            if format == GetFormat::Raw {
                "raw"
            } else {
                "npy"
            },
            names.len(),
            name_args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" "),
        )));
    }
    // One JSON array of the tensors' objects, or their text blocks a blank line apart.
    let mut described = Vec::with_capacity(names.len());
    let mut text = Vec::new();
    for n in &names {
        let t = load(n)?.ok_or_else(|| Error::NotFound {
            name: name::display(n),
            path: file.display().to_string(),
        })?;
        let m = description(&t, limit, stats)?;
        if format == GetFormat::Json {
            described.push(Value::Object(m));
        } else {
            if !text.is_empty() {
                text.push(b'\n');
            }
            write_text(&mut text, &t.info, &m, limit)
                .map_err(|e| io_err("formatting the tensor", e))?;
        }
    }
    if format == GetFormat::Json {
        write_json(&mut text, &Value::Array(described))
            .map_err(|e| io_err("formatting the tensors", e))?;
    }
    emit(output, format, &[], &text)?;
    Ok(ExitCode::SUCCESS)
}

/// `get` of one tensor, `t` named `key`, in `format`.
fn get_one(
    t: &paramdex::interop::LoadedTensor<'_>,
    key: &[u8],
    format: GetFormat,
    output: Option<PathBuf>,
    limit: usize,
    stats: bool,
) -> Result<ExitCode> {
    let owned: Vec<u8>;
    let raw;
    let (head, payload): (Vec<u8>, &[u8]) = match format {
        GetFormat::Raw => {
            raw = t.data.raw_bytes();
            (Vec::new(), &raw)
        }
        GetFormat::Npy => {
            let (Some(d), TensorData::Bytes(b)) = (t.info.kind.numeric(), &t.data) else {
                return Err(Error::Unsupported(format!(
                    "tensor {} is a {} tensor, which .npy cannot hold; use --format json or raw",
                    name::display(key),
                    t.info.kind.name()
                )));
            };
            match d.packing() {
                // numpy (ml_dtypes) holds these values one per byte: unpacked exactly, the
                // last dimension in values (SPEC.md 6).
                Some(p) => {
                    let shape = p.unpacked_shape(&t.info.shape).ok_or_else(|| {
                        Error::Unsupported(format!(
                            "tensor {} is a {} scalar, which .npy cannot hold unpacked; use \
                             --format raw",
                            name::display(key),
                            d.name()
                        ))
                    })?;
                    owned = p.unpack(b).ok_or_else(|| Error::InvalidTensor {
                        name: name::display(key),
                        detail: format!("{} bytes are not whole groups of {d}", b.len()),
                    })?;
                    (paramdex::interop::npy::header(p.unpacked, &shape), &owned)
                }
                None => (paramdex::interop::npy::header(d, &t.info.shape), b),
            }
        }
        GetFormat::Json | GetFormat::Text => {
            owned = shown(t, format, limit, stats)?;
            (Vec::new(), &owned)
        }
    };
    emit(output, format, &head, payload)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `head` then `payload` to `output` (atomically: a complete file or none), or to
/// standard output (`-o -`, or no -o; binary formats not to a terminal unless `-o -`).
fn emit(output: Option<PathBuf>, format: GetFormat, head: &[u8], payload: &[u8]) -> Result<()> {
    // `-o -` is standard output, asked for explicitly (so even binary data to a terminal).
    let to_stdout = output.as_deref().is_some_and(|p| p == Path::new("-"));
    match output {
        Some(p) if !to_stdout => {
            // A complete file or none, even if interrupted: staged by the library.
            paramdex::write_atomically(&p, |w| {
                w.write_all(head)?;
                w.write_all(payload)
            })?
        }
        _ => {
            use std::io::IsTerminal;
            if !to_stdout
                && matches!(format, GetFormat::Raw | GetFormat::Npy)
                && std::io::stdout().is_terminal()
            {
                return Err(Error::InvalidArgument(
                    "not writing binary tensor data to a terminal: use -o FILE or redirect standard output".into(),
                ));
            }
            let mut out = std::io::stdout().lock();
            out.write_all(head)
                .and_then(|_| out.write_all(payload))
                .and_then(|_| out.flush())
                .map_err(stdout_err)?;
        }
    }
    Ok(())
}

/// `get` of a name that is not there: the error, with the near names the store holds when
/// there are any (`name::near`; one line; exit code 4 either way). A near name that cannot be
/// typed as shown (escapes, or the name asked for in another Unicode normalisation form) comes
/// with its `--hex`, and the message says where every name's exact bytes are.
fn not_found(key: &[u8], file: &Path, store: &dyn TensorStore) -> Result<ExitCode> {
    let e = Error::NotFound {
        name: name::display(key),
        path: file.display().to_string(),
    };
    // Suggestions are a courtesy: a listing that fails here leaves the plain error.
    let near = store
        .scan(b"")
        .and_then(|names| name::near(key, names.map(|t| t.map(|t| t.name))))
        .unwrap_or_default();
    if near.is_empty() {
        return Err(e);
    }
    let hex = |n: &[u8]| format!("paramdex get --hex {} {}", file.display(), name::to_hex(n));
    let mut msg = format!("{e}; {}", name::did_you_mean(key, &near, &hex));
    if near
        .iter()
        .any(|n| !name::typeable(n) || name::normalisation_differs(key, n).is_some())
    {
        msg.push_str(&format!(
            " (`paramdex ls --json {}` gives every name's bytes as name_hex)",
            file.display()
        ));
    }
    super::print_error(msg);
    Ok(ExitCode::from(super::EXIT_NOT_FOUND))
}

/// What `get --format json|text` prints: the description and the values (at most `limit`,
/// with how many were left out) or, with `stats`, their statistics.
fn shown(
    t: &paramdex::interop::LoadedTensor<'_>,
    format: GetFormat,
    limit: usize,
    stats: bool,
) -> Result<Vec<u8>> {
    let m = description(t, limit, stats)?;
    let mut out = Vec::new();
    let w = if format == GetFormat::Json {
        write_json(&mut out, &Value::Object(m))
    } else {
        write_text(&mut out, &t.info, &m, limit)
    };
    w.map_err(|e| io_err("formatting the tensor", e))?;
    Ok(out)
}

/// The JSON object `get` prints of a tensor (and formats as text): [`describe`], and the
/// values (at most `limit`) or, with `stats`, their statistics.
fn description(
    t: &paramdex::interop::LoadedTensor<'_>,
    limit: usize,
    stats: bool,
) -> Result<Map<String, Value>> {
    let what = |k: &Kind| -> String {
        k.not_numeric()
            .unwrap_or_else(|| format!("a {} tensor", k.name()))
    };
    let mut m = describe(&t.info);
    let mut note = None;
    if stats {
        let s = match (&t.data, t.info.kind.numeric()) {
            (TensorData::Bytes(b), Some(d)) => super::numbers::stats(d, b),
            _ => None,
        };
        let s = s.ok_or_else(|| {
            Error::Unsupported(format!(
                "tensor {} is {}: --stats summarizes real numbers only",
                name::display(&t.info.name),
                what(&t.info.kind)
            ))
        })?;
        m.insert("stats".into(), s);
    } else {
        let (vals, numel) = match (&t.data, &t.info.kind) {
            (TensorData::Bytes(b), Kind::Numeric(d)) => (
                Some(values::to_json(*d, &t.info.shape, b, limit)),
                b.len() / d.size().max(1),
            ),
            (TensorData::Strings(s), _) => (Some(strings_json(s, &t.info.shape, limit)), s.len()),
            (TensorData::Bytes(_), Kind::String) => (None, 0),
            // A bytes value: as text when it is UTF-8, else as hex; at most `limit` bytes.
            (TensorData::Bytes(b), Kind::Bytes) => {
                let shown = &b[..b.len().min(limit)];
                let (v, _) = strings_json(&[shown.to_vec()], &[], 1);
                (Some((v, b.len() > limit)), b.len())
            }
            (TensorData::Bytes(_), Kind::Opaque(_)) => {
                note = Some(format!(
                    "paramdex does not decode {} tensors; --format raw gives the bytes \
                     TensorFlow stored",
                    t.info.kind.name()
                ));
                (None, 0)
            }
            (TensorData::Bytes(_), Kind::Foreign(f)) => {
                note = Some(format!(
                    "paramdex does not decode {} {} tensors; --format raw gives the stored bytes",
                    f.system, f.name
                ));
                (None, 0)
            }
        };
        let (vals, cut) = vals.unwrap_or((Value::Null, false));
        m.insert("data".into(), vals);
        if cut {
            m.insert("truncated".into(), json!(true));
            m.insert("omitted".into(), json!(numel.saturating_sub(limit)));
        }
        if let Some(n) = &note {
            m.insert("note".into(), json!(n));
        }
    }
    Ok(m)
}

/// `get --format text`: one `key  value` line per field, values on one line.
fn write_text(
    out: &mut Vec<u8>,
    info: &TensorInfo,
    m: &Map<String, Value>,
    limit: usize,
) -> std::io::Result<()> {
    let mut rows: Vec<(&str, String)> = vec![
        ("name", name::display(&info.name)),
        ("dtype", info.kind.name().to_string()),
        ("shape", shape_str(&info.shape)),
    ];
    if !info.lod.is_empty() {
        rows.push(("lod", format!("{:?}", info.lod)));
    }
    rows.push((
        "size",
        format!(
            "{} ({})",
            human_bytes(info.nbytes),
            count_s(info.nbytes, "byte")
        ),
    ));
    let inline = |v: &Value| {
        let mut b = Vec::new();
        let _ = write_inline(&mut b, v);
        String::from_utf8_lossy(&b).into_owned()
    };
    if let Some(st) = m.get("stats") {
        for k in ["count", "finite", "nan", "inf", "min", "max", "mean", "std"] {
            let v = st.get(k).unwrap_or(&Value::Null);
            rows.push((k, if v.is_null() { "-".into() } else { inline(v) }));
        }
    } else if let Some(d) = m.get("data").filter(|d| !d.is_null()) {
        let mut v = inline(d);
        if let Some(o) = m.get("omitted").and_then(Value::as_u64) {
            v.push_str(&format!(
                " (the first {limit}; {} more omitted: --limit N shows more)",
                o
            ));
        }
        rows.push(("values", v));
    }
    if let Some(n) = m.get("note").and_then(Value::as_str) {
        rows.push(("note", n.to_string()));
    }
    let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    for (k, v) in rows {
        writeln!(out, "{k:<w$}  {v}")?;
    }
    Ok(())
}
