//! `ls`, `get`, `stat`, `verify`, `recover`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Instant;

use paramdex::table::{Table, TableReadOptions};
use paramdex::{
    name, open_any, values, Error, Format, Kind, Reader, Result, TensorData, TensorInfo,
    TensorView, WriterOptions,
};
use serde_json::{json, Map, Value};

use super::style::{DIM, DTYPE, GOOD, HEAD};
use super::{human_bytes, metadata_of, os_bytes, stdout_err, GetFormat, Ui};

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

/// A shape as `[2, 3]`.
pub fn shape_str(shape: &[u64]) -> String {
    format!("{shape:?}")
}

/// Writes a table of left-/right-aligned columns (`right[i]` for numbers), a bold heading.
fn write_table(
    out: &mut dyn Write,
    head: &[&str],
    right: &[bool],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    // Terminal columns, not chars: CJK and emoji names take two columns, combining marks none.
    let cols = |s: &str| unicode_width::UnicodeWidthStr::width(s);
    let mut width: Vec<usize> = head.iter().map(|h| cols(h)).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            width[i] = width[i].max(cols(c));
        }
    }
    let line = |out: &mut dyn Write, cells: &[String], heading: bool| -> std::io::Result<()> {
        let last = cells.len() - 1;
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(cols(c));
            let sep = if i == last { "" } else { "  " };
            let (s, e) = match (heading, i) {
                (true, _) => (HEAD.render().to_string(), HEAD.render_reset().to_string()),
                (false, 1) => (DTYPE.render().to_string(), DTYPE.render_reset().to_string()),
                _ => (String::new(), String::new()),
            };
            if right[i] {
                write!(out, "{}{s}{c}{e}{sep}", " ".repeat(pad))?;
            } else if i == last {
                write!(out, "{s}{c}{e}")?;
            } else {
                write!(out, "{s}{c}{e}{}{sep}", " ".repeat(pad))?;
            }
        }
        writeln!(out)
    };
    let head: Vec<String> = head.iter().map(|s| s.to_string()).collect();
    line(out, &head, true)?;
    for row in rows {
        line(out, row, false)?;
    }
    Ok(())
}

pub fn ls(file: &Path, as_json: bool, prefix: Option<OsString>) -> Result<ExitCode> {
    let store = open_any(file)?;
    let mut list = store.list()?;
    if let Some(p) = &prefix {
        let p = os_bytes(p);
        list.retain(|t| t.name.starts_with(&p));
    }
    let mut out = super::stdout_for(as_json);
    if as_json {
        let all: Vec<Value> = list.iter().map(|t| Value::Object(describe(t))).collect();
        serde_json::to_writer(&mut out, &Value::Array(all))
            .map_err(|e| io_err("writing JSON", e.into()))?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        let total: u64 = list.iter().map(|t| t.nbytes).sum();
        let rows: Vec<Vec<String>> = list
            .iter()
            .map(|t| {
                vec![
                    name::display(&t.name),
                    t.kind.name().to_string(),
                    shape_str(&t.shape),
                    t.lod.len().to_string(),
                    human_bytes(t.nbytes),
                ]
            })
            .collect();
        write_table(
            &mut out,
            &["NAME", "DTYPE", "SHAPE", "LOD", "SIZE"],
            &[false, false, false, true, true],
            &rows,
        )
        .map_err(stdout_err)?;
        writeln!(
            out,
            "{DIM}{} tensors, {} of data ({} bytes), {}{DIM:#}",
            rows.len(),
            human_bytes(total),
            total,
            store.format().name()
        )
        .map_err(stdout_err)?;
    }
    out.flush().map_err(stdout_err)?;
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
    let owned: Vec<u8>;
    let raw;
    let (head, payload): (Vec<u8>, &[u8]) = match format {
        GetFormat::Raw => {
            raw = t.data.raw_bytes();
            (Vec::new(), &raw)
        }
        GetFormat::Npy => {
            let (Kind::Numeric(d), TensorData::Bytes(b)) = (t.info.kind, &t.data) else {
                return Err(Error::Unsupported(format!(
                    "tensor {} is a {} tensor, which .npy cannot hold; use --format json or raw",
                    name::display(&key),
                    t.info.kind.name()
                )));
            };
            (paramdex::npy::header(d, &t.info.shape), b)
        }
        GetFormat::Json => {
            let mut m = describe(&t.info);
            let (vals, cut) = match (&t.data, t.info.kind) {
                (TensorData::Bytes(b), Kind::Numeric(d)) => {
                    values::to_json(d, &t.info.shape, b, limit)
                }
                (TensorData::Strings(s), _) => strings_json(s, &t.info.shape, limit),
                (TensorData::Bytes(_), Kind::String) => (Value::Null, false),
                (TensorData::Bytes(_), Kind::Opaque(_)) => {
                    m.insert(
                        "note".into(),
                        json!(format!(
                            "paramdex does not decode {} tensors; --format raw gives the bytes \
                             TensorFlow stored",
                            t.info.kind.name()
                        )),
                    );
                    (Value::Null, false)
                }
            };
            m.insert("data".into(), vals);
            if cut {
                m.insert("truncated".into(), json!(true));
            }
            let mut s = serde_json::to_vec_pretty(&Value::Object(m))
                .map_err(|e| io_err("encoding JSON", e.into()))?;
            s.push(b'\n');
            owned = s;
            (Vec::new(), &owned)
        }
    };
    match output {
        Some(p) => {
            let write = || -> std::io::Result<()> {
                let mut f = std::io::BufWriter::new(std::fs::File::create(&p)?);
                f.write_all(&head)?;
                f.write_all(payload)?;
                f.flush()
            };
            write().map_err(|e| io_err(&format!("writing {}", p.display()), e))?
        }
        None => {
            use std::io::IsTerminal;
            if format != GetFormat::Json && std::io::stdout().is_terminal() {
                return Err(Error::InvalidArgument(
                    "not writing binary tensor data to a terminal: use -o FILE or redirect standard output".into(),
                ));
            }
            let mut out = std::io::stdout().lock();
            out.write_all(&head)
                .and_then(|_| out.write_all(payload))
                .and_then(|_| out.flush())
                .map_err(stdout_err)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Figures of a LevelDB/TensorFlow table (a native index or a TensorFlow `.index`).
struct TableFigures {
    data_blocks: u64,
    stored: u64,
    raw: u64,
    first_data_offset: u64,
    snappy_blocks: u64,
}

fn table_figures(bytes: &[u8]) -> Result<TableFigures> {
    let table = Table::open(bytes, TableReadOptions::default())?;
    let mut f = TableFigures {
        data_blocks: table.data_blocks() as u64,
        stored: 0,
        raw: 0,
        first_data_offset: table.first_data_offset().unwrap_or(0),
        snappy_blocks: 0,
    };
    for i in 0..table.data_blocks() {
        let h = table.block_handle(i);
        let b = table.load_block(i)?;
        f.stored += h.size;
        f.raw += b.len() as u64;
        if matches!(b, paramdex::table::BlockBytes::Cached(_)) {
            f.snappy_blocks += 1;
        }
    }
    Ok(f)
}

pub fn stat(file: &Path, as_json: bool) -> Result<ExitCode> {
    let store = open_any(file)?;
    let list = store.list()?;
    let metadata = metadata_of(store.as_ref(), file)?;
    let mut by_dtype: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for t in &list {
        let e = by_dtype.entry(t.kind.name()).or_default();
        e.0 += 1;
        e.1 += t.nbytes;
    }
    let data_bytes: u64 = list.iter().map(|t| t.nbytes).sum();
    let n = list.len() as u64;
    let mut o = Map::new();
    o.insert("file".into(), json!(file.display().to_string()));
    o.insert("format".into(), json!(store.format().name()));
    o.insert("tensors".into(), json!(n));
    o.insert("data_bytes".into(), json!(data_bytes));
    o.insert(
        "by_dtype".into(),
        Value::Object(
            by_dtype
                .iter()
                .map(|(d, (c, b))| (d.to_string(), json!({"tensors": c, "bytes": b})))
                .collect(),
        ),
    );
    let put_table = |o: &mut Map<String, Value>, f: &TableFigures, index_bytes: u64| {
        o.insert("index_bytes".into(), json!(index_bytes));
        o.insert(
            "index_bytes_per_tensor".into(),
            json!(index_bytes as f64 / n.max(1) as f64),
        );
        o.insert("index_blocks".into(), json!(f.data_blocks));
        let comp = match f.snappy_blocks {
            0 => "none",
            k if k == f.data_blocks => "snappy",
            _ => "snappy (some blocks)",
        };
        o.insert("index_compression".into(), json!(comp));
        o.insert(
            "compression_ratio".into(),
            json!(f.raw as f64 / f.stored.max(1) as f64),
        );
    };
    match store.format() {
        Format::Native => {
            let r = store.as_native().ok_or_else(|| {
                Error::InvalidArgument("native store without a native reader".into())
            })?;
            let bytes = r.as_bytes();
            let f = table_figures(bytes)?;
            let h = r.header();
            o.insert("file_bytes".into(), json!(bytes.len()));
            o.insert("format_version".into(), json!(h.format_version));
            o.insert("records_bytes".into(), json!(h.records_len));
            put_table(&mut o, &f, bytes.len() as u64 - f.first_data_offset);
            o.insert(
                "dead_bytes".into(),
                json!(f.first_data_offset - h.records_len),
            );
            o.insert("alignment".into(), json!(h.alignment));
            o.insert("shards".into(), json!(1));
            o.insert("records_sorted".into(), json!(h.records_sorted));
        }
        Format::TensorFlow => {
            if let Some(prefix) = paramdex::tf::resolve_prefix(file)? {
                let ck = paramdex::tf::TfCheckpoint::open(&prefix)?;
                let index = paramdex::tf::index_path(&prefix);
                let bytes = paramdex::source::Source::map(&index)?;
                let f = table_figures(&bytes)?;
                o.insert("shards".into(), json!(ck.num_shards()));
                put_table(&mut o, &f, bytes.len() as u64);
            }
        }
        Format::Safetensors => {
            let s = paramdex::safetensors::SafetensorsStore::open(file)?;
            o.insert("index_bytes".into(), json!(s.header_len() + 8));
            o.insert(
                "index_bytes_per_tensor".into(),
                json!((s.header_len() + 8) as f64 / n.max(1) as f64),
            );
            o.insert("shards".into(), json!(1));
        }
        _ => {}
    }
    o.insert("metadata_entries".into(), json!(metadata.len()));
    let mut out = super::stdout_for(as_json);
    if as_json {
        serde_json::to_writer_pretty(&mut out, &Value::Object(o))
            .map_err(|e| io_err("writing JSON", e.into()))?;
        writeln!(out).map_err(stdout_err)?;
    } else {
        let get = |k: &str| o.get(k).cloned().unwrap_or(Value::Null);
        let num = |k: &str| get(k).as_u64();
        let mut rows: Vec<(String, String)> = vec![
            ("file".into(), file.display().to_string()),
            (
                "format".into(),
                match num("format_version") {
                    Some(v) => format!("{} (format version {v})", store.format().name()),
                    None => store.format().name().to_string(),
                },
            ),
            ("tensors".into(), n.to_string()),
            (
                "data".into(),
                format!("{} ({data_bytes} bytes)", human_bytes(data_bytes)),
            ),
        ];
        for (d, (c, b)) in &by_dtype {
            rows.push((
                format!("  {d}"),
                format!(
                    "{} in {c} tensor{}",
                    human_bytes(*b),
                    if *c == 1 { "" } else { "s" }
                ),
            ));
        }
        if let Some(f) = num("file_bytes") {
            rows.push(("file size".into(), human_bytes(f)));
        }
        if let Some(r) = num("records_bytes") {
            rows.push(("records".into(), human_bytes(r)));
        }
        if let Some(i) = num("index_bytes") {
            let per = get("index_bytes_per_tensor").as_f64().unwrap_or(0.0);
            rows.push((
                "index".into(),
                format!("{} ({per:.1} bytes per tensor)", human_bytes(i)),
            ));
        }
        if let Some(b) = num("index_blocks") {
            rows.push(("index blocks".into(), b.to_string()));
            rows.push((
                "compression".into(),
                format!(
                    "{} (ratio {:.2})",
                    get("index_compression").as_str().unwrap_or("none"),
                    get("compression_ratio").as_f64().unwrap_or(1.0)
                ),
            ));
        }
        if let Some(d) = num("dead_bytes") {
            let note = if d > 0 {
                " (old indexes left by `meta --set`; `convert` drops them)"
            } else {
                ""
            };
            rows.push(("dead bytes".into(), format!("{}{note}", human_bytes(d))));
        }
        if let Some(a) = num("alignment") {
            rows.push(("alignment".into(), a.to_string()));
        }
        if let Some(s) = num("shards") {
            rows.push(("shards".into(), s.to_string()));
        }
        if let Some(s) = get("records_sorted").as_bool() {
            rows.push((
                "records sorted".into(),
                if s { "yes" } else { "no" }.to_string(),
            ));
        }
        rows.push(("metadata".into(), format!("{} entries", metadata.len())));
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(out, "{HEAD}{k:<w$}{HEAD:#}  {v}").map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(ExitCode::SUCCESS)
}

/// What `verify` found.
struct Verified {
    tensors: u64,
    data_bytes: u64,
    checksums: u64,
}

/// Tensors checked together: bounded, so memory does not grow with the number of tensors.
const BATCH_VIEWS: usize = 4096;
/// Data bytes checked together.
const BATCH_BYTES: u64 = 256 << 20;
/// A large tensor is checksummed in pieces of this size on several threads, then combined.
const PIECE: usize = 1 << 20;

/// Verifies a native file with a progress bar over the data bytes: every block checksum, every
/// record against its entry, the tensor count, and every data checksum, in batches of bounded
/// size whose pieces are spread over `threads` threads. The first error in name order wins.
fn verify_native(ui: Ui, r: &Reader, threads: usize) -> Result<Verified> {
    let table = Table::open(r.as_bytes(), TableReadOptions::default())?;
    let blocks = table.verify_all_blocks()?;
    let threads = match threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // Listing costs no data reads; it gives the bar its total.
    let total: u64 = r
        .iter()
        .map(|v| v.map_or(0, |v| v.data().len() as u64))
        .sum();
    let bar = ui.bytes_bar(total, "verifying");
    let mut batch: Vec<TensorView<'_>> = Vec::with_capacity(BATCH_VIEWS);
    let (mut batch_bytes, mut count, mut data_bytes) = (0u64, 0u64, 0u64);
    let mut it = r.iter();
    let result = loop {
        let mut failed = None;
        let mut full = false;
        for v in it.by_ref() {
            match v.and_then(|v| v.check_record().map(|()| v)) {
                Ok(v) => {
                    count += 1;
                    batch_bytes += v.data().len() as u64;
                    batch.push(v);
                    if batch.len() >= BATCH_VIEWS || batch_bytes >= BATCH_BYTES {
                        full = true;
                        break;
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        // Tensors before a bad record come first in name order: check them first.
        if let Err(e) = check_batch(&batch, threads, &bar) {
            break Err(e);
        }
        data_bytes += batch_bytes;
        batch.clear();
        batch_bytes = 0;
        if let Some(e) = failed {
            break Err(e);
        }
        if !full {
            break Ok(());
        }
    };
    bar.finish_and_clear();
    result?;
    if count != r.header().tensor_count {
        return Err(Error::corrupt(
            "header entry",
            table.first_data_offset().unwrap_or(0),
            format!(
                "header says {} tensors, the index holds {count}",
                r.header().tensor_count
            ),
        ));
    }
    Ok(Verified {
        tensors: count,
        data_bytes,
        checksums: blocks + count,
    })
}

/// Checks the data CRC32C of every view: the bytes are cut into pieces of at most [`PIECE`],
/// checksummed by `threads` threads, and each tensor's CRC is assembled with `crc32c_combine`.
fn check_batch(
    views: &[TensorView<'_>],
    threads: usize,
    bar: &indicatif::ProgressBar,
) -> Result<()> {
    let mut pieces: Vec<(usize, usize, usize)> = Vec::new();
    for (i, v) in views.iter().enumerate() {
        let n = v.data().len();
        let mut start = 0;
        loop {
            let end = (start + PIECE).min(n);
            pieces.push((i, start, end));
            if end == n {
                break;
            }
            start = end;
        }
    }
    let bytes: usize = views.iter().map(|v| v.data().len()).sum();
    let threads = if bytes < (4 << 20) {
        1
    } else {
        threads.min(pieces.len()).max(1)
    };
    let crcs: Vec<AtomicU32> = pieces.iter().map(|_| AtomicU32::new(0)).collect();
    let next = AtomicUsize::new(0);
    let work = || loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        let Some(&(i, s, e)) = pieces.get(k) else {
            break;
        };
        crcs[k].store(crc32c::crc32c(&views[i].data()[s..e]), Ordering::Relaxed);
        bar.inc((e - s) as u64);
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|sc| {
            for _ in 0..threads {
                sc.spawn(work);
            }
        });
    }
    let mut k = 0;
    for v in views {
        let mut crc = 0u32;
        let mut first = true;
        while let Some(&(i, s, e)) = pieces.get(k) {
            if !std::ptr::eq(&views[i], v) {
                break;
            }
            let c = crcs[k].load(Ordering::Relaxed);
            crc = if first {
                c
            } else {
                crc32c::crc32c_combine(crc, c, e - s)
            };
            first = false;
            k += 1;
        }
        let stored = paramdex::coding::unmask_crc(v.stored_crc());
        if crc != stored {
            return Err(Error::ChecksumMismatch {
                what: "tensor data",
                name: Some(v.display_name()),
                offset: v.data_offset(),
                len: v.data().len() as u64,
                stored,
                computed: crc,
            });
        }
    }
    Ok(())
}

pub fn verify(ui: Ui, file: &Path, threads: usize, as_json: bool) -> Result<ExitCode> {
    let start = Instant::now();
    let result = (|| -> Result<(Format, Verified)> {
        let store = open_any(file)?;
        let v = match store.as_native() {
            Some(r) => verify_native(ui, r, threads)?,
            None => {
                let sp = ui.spinner(&format!("verifying {}", store.format().name()));
                let rep = store.verify(threads);
                sp.finish_and_clear();
                let rep = rep?;
                Verified {
                    tensors: rep.tensors,
                    data_bytes: rep.data_bytes,
                    checksums: rep.checksums,
                }
            }
        };
        Ok((store.format(), v))
    })();
    let secs = start.elapsed().as_secs_f64();
    match result {
        Ok((format, v)) => {
            if as_json {
                let o = json!({
                    "ok": true,
                    "file": file.display().to_string(),
                    "format": format.name(),
                    "tensors": v.tensors,
                    "data_bytes": v.data_bytes,
                    "checksums": v.checksums,
                    "seconds": secs,
                });
                writeln!(std::io::stdout().lock(), "{o}").map_err(stdout_err)?;
            } else {
                let checks = if v.checksums == 0 {
                    format!("structure checked ({} has no checksums)", format.name())
                } else {
                    format!("{} checksums matched", v.checksums)
                };
                ui.say(format!(
                    "{}: {GOOD}OK{GOOD:#} ({}): {} tensors, {} of data, {checks} in {secs:.2} s",
                    file.display(),
                    format.name(),
                    v.tensors,
                    human_bytes(v.data_bytes),
                ))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if as_json {
                let o = json!({
                    "ok": false,
                    "file": file.display().to_string(),
                    "error": e.to_string(),
                    "exit_code": super::exit_status(&e),
                });
                writeln!(std::io::stdout().lock(), "{o}").map_err(stdout_err)?;
            }
            Err(e)
        }
    }
}

pub fn recover(ui: Ui, torn: &Path, out: &Path) -> Result<ExitCode> {
    // A file whose `meta --set` was interrupted: the previous file is a prefix of it.
    if Reader::open(torn).is_err() {
        let src = paramdex::source::Source::map(torn)?;
        if let Some(len) = paramdex::meta::last_complete_len(&src) {
            let bytes = &src[..len as usize];
            paramdex::staging::write_atomically(bytes, out)?;
            Reader::open(out)?.verify()?;
            ui.say(format!(
                "{} ends with an incomplete index ({} bytes, an interrupted `meta --set`); \
                 restored the previous complete file ({}) into {}",
                torn.display(),
                src.len() as u64 - len,
                human_bytes(len),
                out.display()
            ))?;
            return Ok(ExitCode::SUCCESS);
        }
    }
    let rep = paramdex::recover::recover(torn, out, WriterOptions::default())?;
    ui.say(format!(
        "recovered {} tensors ({} of records) from {} into {}; discarded {}",
        rep.recovered,
        human_bytes(rep.good_bytes),
        torn.display(),
        out.display(),
        human_bytes(rep.discarded_bytes)
    ))?;
    if let Some(why) = rep.stopped_because {
        ui.say(format!("scan stopped {why}"))?;
    }
    if rep.duplicates_skipped > 0 {
        ui.say(format!(
            "skipped {} records whose names were already recovered",
            rep.duplicates_skipped
        ))?;
    }
    Ok(ExitCode::SUCCESS)
}
