//! `ls`, `get`, `verify`, `recover` on native files.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use paramdex::{
    name, open_any, values, Error, Kind, Result, TensorData, TensorInfo, WriterOptions,
};
use serde_json::{json, Map, Value};

use super::{human_bytes, os_bytes, GetFormat};

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::io(what.to_string(), e)
}

/// JSON description of a tensor: name (plus name_hex when not UTF-8), dtype, shape, lod, nbytes.
pub fn describe(t: &TensorInfo) -> Map<String, Value> {
    let mut m = Map::new();
    match name::as_utf8(&t.name) {
        Some(s) => {
            m.insert("name".into(), json!(s));
        }
        None => {
            m.insert("name".into(), json!(name::display(&t.name)));
            m.insert("name_hex".into(), json!(name::to_hex(&t.name)));
        }
    }
    m.insert("dtype".into(), json!(t.kind.name()));
    m.insert("shape".into(), json!(t.shape));
    m.insert("lod".into(), json!(t.lod));
    m.insert("nbytes".into(), json!(t.nbytes));
    m
}

pub fn ls(file: &Path, as_json: bool, prefix: Option<OsString>) -> Result<ExitCode> {
    let store = open_any(file)?;
    let mut list = store.list()?;
    if let Some(p) = &prefix {
        let p = os_bytes(p);
        list.retain(|t| t.name.starts_with(&p));
    }
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let w = |e| io_err("writing to standard output", e);
    if as_json {
        let all: Vec<Value> = list.iter().map(|t| Value::Object(describe(t))).collect();
        serde_json::to_writer(&mut out, &Value::Array(all))
            .map_err(|e| io_err("writing JSON", e.into()))?;
        writeln!(out).map_err(w)?;
    } else {
        let mut total = 0u64;
        let rows: Vec<[String; 5]> = list
            .iter()
            .map(|t| {
                total += t.nbytes;
                [
                    name::display(&t.name),
                    t.kind.name().to_string(),
                    format!("{:?}", t.shape),
                    t.lod.len().to_string(),
                    t.nbytes.to_string(),
                ]
            })
            .collect();
        let head = ["NAME", "DTYPE", "SHAPE", "LOD", "BYTES"];
        let mut width = head.map(str::len);
        for row in &rows {
            for (i, c) in row.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let line = |out: &mut dyn Write, cells: [&str; 5]| -> std::io::Result<()> {
            writeln!(
                out,
                "{:<w0$}  {:<w1$}  {:<w2$}  {:>w3$}  {:>w4$}",
                cells[0],
                cells[1],
                cells[2],
                cells[3],
                cells[4],
                w0 = width[0],
                w1 = width[1],
                w2 = width[2],
                w3 = width[3],
                w4 = width[4]
            )
        };
        line(&mut out, head).map_err(w)?;
        for row in &rows {
            line(&mut out, [&row[0], &row[1], &row[2], &row[3], &row[4]]).map_err(w)?;
        }
        writeln!(
            out,
            "{} tensors, {} of data ({})",
            rows.len(),
            human_bytes(total),
            store.format().name()
        )
        .map_err(w)?;
    }
    out.flush().map_err(w)?;
    Ok(ExitCode::SUCCESS)
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

pub fn get(
    file: &Path,
    name_arg: OsString,
    hex: bool,
    format: GetFormat,
    output: Option<PathBuf>,
    limit: usize,
) -> Result<ExitCode> {
    let key = if hex {
        let s = name_arg.to_string_lossy();
        name::from_hex(&s)
            .ok_or_else(|| Error::InvalidArgument(format!("--hex: {s:?} is not hex")))?
    } else {
        os_bytes(&name_arg)
    };
    let store = open_any(file)?;
    let t = store.load(&key)?.ok_or_else(|| Error::NotFound {
        name: name::display(&key),
        path: file.display().to_string(),
    })?;
    let bytes: Vec<u8>;
    let raw;
    let payload: &[u8] = match format {
        GetFormat::Raw => {
            raw = t.data.raw_bytes();
            &raw
        }
        GetFormat::Json => {
            let mut m = describe(&t.info);
            let (vals, cut) = match (&t.data, t.info.kind) {
                (TensorData::Bytes(b), Kind::Numeric(d)) => {
                    values::to_json(d, &t.info.shape, b, limit)
                }
                (TensorData::Strings(s), _) => strings_json(s, &t.info.shape, limit),
                (TensorData::Bytes(_), Kind::String) => (Value::Null, false),
            };
            m.insert("data".into(), vals);
            if cut {
                m.insert("truncated".into(), json!(true));
            }
            let mut s = serde_json::to_vec_pretty(&Value::Object(m))
                .map_err(|e| io_err("encoding JSON", e.into()))?;
            s.push(b'\n');
            bytes = s;
            &bytes
        }
    };
    match output {
        Some(p) => std::fs::write(&p, payload)
            .map_err(|e| io_err(&format!("writing {}", p.display()), e))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(payload)
                .and_then(|_| out.flush())
                .map_err(|e| io_err("writing to standard output", e))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn verify(file: &Path, threads: usize) -> Result<ExitCode> {
    let start = std::time::Instant::now();
    let store = open_any(file)?;
    let rep = store.verify(threads)?;
    println!(
        "{}: OK ({}): {} tensors, {} of data, {} checksums matched in {:.1?}",
        file.display(),
        store.format().name(),
        rep.tensors,
        human_bytes(rep.data_bytes),
        rep.checksums,
        start.elapsed()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn recover(torn: &Path, out: &Path) -> Result<ExitCode> {
    let rep = paramdex::recover::recover(torn, out, WriterOptions::default())?;
    println!(
        "recovered {} tensors ({} of records) from {} into {}; discarded {}",
        rep.recovered,
        human_bytes(rep.good_bytes),
        torn.display(),
        out.display(),
        human_bytes(rep.discarded_bytes)
    );
    if let Some(why) = rep.stopped_because {
        println!("scan stopped {why}");
    }
    if rep.duplicates_skipped > 0 {
        println!(
            "skipped {} records whose names were already recovered",
            rep.duplicates_skipped
        );
    }
    Ok(ExitCode::SUCCESS)
}
