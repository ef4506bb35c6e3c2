//! `ls`, `get`, `stat`, `verify`, `recover`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use paramdex::interop::{json as values, open_any, Format, Kind, TensorData, TensorInfo};
use paramdex::raw::table::{Table, TableReadOptions};
use paramdex::{name, Error, Progress, Reader, Recovered, Result, VerifyOptions, WriterOptions};
use serde_json::{json, Map, Value};

use super::style::{DIM, DTYPE, GOOD, HEAD};
use super::{human_bytes, os_bytes, stdout_err, Bar, GetFormat, Ui};

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

/// `ls`'s columns: heading, and whether each is right-aligned (numbers).
const LS_HEAD: [&str; 5] = ["NAME", "DTYPE", "SHAPE", "LOD", "SIZE"];
const LS_RIGHT: [bool; 5] = [false, false, false, true, true];

/// `ls` sets its column widths from the heading and this many first rows, printed once they
/// are in; later rows keep those widths (a wider cell just pushes its line wider), so a
/// listing of millions of tensors starts at once and holds only this window in memory.
const LS_WIDTH_WINDOW: usize = 4096;

/// Terminal columns, not chars: CJK and emoji names take two columns, combining marks none.
fn cols(s: &str) -> usize {
    // Printable ASCII is one column a byte: the common case, without a table look-up per char.
    // (A fold without early exit, which the compiler vectorizes.)
    if s.bytes()
        .fold(true, |ok, b| ok & (b.wrapping_sub(0x20) < 0x5f))
    {
        s.len()
    } else {
        unicode_width::UnicodeWidthStr::width(s)
    }
}

/// Writes `n` spaces.
fn pad<W: Write + ?Sized>(out: &mut W, mut n: usize) -> std::io::Result<()> {
    const SPACES: &[u8; 64] = &[b' '; 64];
    while n > 0 {
        let k = n.min(SPACES.len());
        out.write_all(&SPACES[..k])?;
        n -= k;
    }
    Ok(())
}

/// Appends the decimal digits of `v`.
pub fn push_u64(s: &mut String, mut v: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    s.push_str(std::str::from_utf8(&digits[i..]).unwrap_or_default());
}

/// One row of `ls`'s table, its cells kept between rows so that a row allocates little.
#[derive(Clone, Default)]
struct LsRow {
    name: String,
    dtype: &'static str,
    shape: String,
    lod: String,
    size: String,
}

impl LsRow {
    fn set(&mut self, t: &TensorInfo) {
        self.name = name::display(&t.name);
        self.dtype = t.kind.name();
        // As `shape_str`: `[2, 3]`.
        self.shape.clear();
        self.shape.push('[');
        for (i, &d) in t.shape.iter().enumerate() {
            if i > 0 {
                self.shape.push_str(", ");
            }
            push_u64(&mut self.shape, d);
        }
        self.shape.push(']');
        self.lod.clear();
        push_u64(&mut self.lod, t.lod.len() as u64);
        self.size.clear();
        super::write_human_bytes(&mut self.size, t.nbytes);
    }

    fn cells(&self) -> [&str; 5] {
        [&self.name, self.dtype, &self.shape, &self.lod, &self.size]
    }
}

/// A style's start and end codes, rendered once; empty when colour is off.
struct Codes(String, String);

impl Codes {
    fn of(style: anstyle::Style, colour: bool) -> Codes {
        if colour {
            Codes(style.render().to_string(), style.render_reset().to_string())
        } else {
            Codes(String::new(), String::new())
        }
    }
}

/// `ls`'s table: fixed column widths, and the styles it uses.
struct LsTable {
    width: [usize; 5],
    head: Codes,
    dtype: Codes,
}

impl LsTable {
    /// Widths from the heading and `rows`.
    fn new(rows: &[LsRow], colour: bool) -> LsTable {
        let mut width = LS_HEAD.map(cols);
        for row in rows {
            for (w, c) in width.iter_mut().zip(row.cells()) {
                *w = (*w).max(cols(c));
            }
        }
        LsTable {
            width,
            head: Codes::of(HEAD, colour),
            dtype: Codes::of(DTYPE, colour),
        }
    }

    /// One line: cells padded to the widths (never cut), two spaces apart, the last left-aligned
    /// one without trailing spaces.
    fn line<W: Write + ?Sized>(
        &self,
        out: &mut W,
        cells: [&str; 5],
        heading: bool,
    ) -> std::io::Result<()> {
        let last = cells.len() - 1;
        for (i, c) in cells.into_iter().enumerate() {
            let gap = self.width[i].saturating_sub(cols(c));
            let codes = match (heading, i) {
                (true, _) => Some(&self.head),
                (false, 1) => Some(&self.dtype),
                _ => None,
            };
            if LS_RIGHT[i] {
                pad(out, gap)?;
            }
            match codes {
                Some(Codes(s, e)) => {
                    out.write_all(s.as_bytes())?;
                    out.write_all(c.as_bytes())?;
                    out.write_all(e.as_bytes())?;
                }
                None => out.write_all(c.as_bytes())?,
            }
            if i != last {
                if !LS_RIGHT[i] {
                    pad(out, gap)?;
                }
                out.write_all(b"  ")?;
            }
        }
        out.write_all(b"\n")
    }
}

/// Writes `t` as `ls --json` does: the object [`describe`] gives, in serde_json's compact form
/// and key order (sorted), without building it.
fn write_json_info(out: &mut dyn Write, t: &TensorInfo) -> std::io::Result<()> {
    fn array(out: &mut dyn Write, v: &[u64]) -> std::io::Result<()> {
        out.write_all(b"[")?;
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                out.write_all(b",")?;
            }
            write!(out, "{x}")?;
        }
        out.write_all(b"]")
    }
    out.write_all(b"{\"dtype\":")?;
    serde_json::to_writer(&mut *out, t.kind.name())?;
    out.write_all(b",\"lod\":[")?;
    for (i, level) in t.lod.iter().enumerate() {
        if i > 0 {
            out.write_all(b",")?;
        }
        array(out, level)?;
    }
    out.write_all(b"],\"name\":")?;
    match name::as_utf8(&t.name) {
        Some(s) => serde_json::to_writer(&mut *out, s)?,
        None => {
            serde_json::to_writer(&mut *out, &name::display(&t.name))?;
            out.write_all(b",\"name_hex\":")?;
            serde_json::to_writer(&mut *out, &name::to_hex(&t.name))?;
        }
    }
    write!(out, ",\"nbytes\":{},\"shape\":", t.nbytes)?;
    array(out, &t.shape)?;
    out.write_all(b"}")
}

pub fn ls(file: &Path, as_json: bool, prefix: Option<OsString>) -> Result<ExitCode> {
    let store = open_any(file)?;
    let tensors = match &prefix {
        Some(p) => store.scan_prefix(&os_bytes(p))?,
        None => store.scan(b"")?,
    };
    if as_json {
        // The array streams out as the store is read: the same bytes serde_json writes for the
        // whole array.
        let mut out = super::stdout_for(true);
        out.write_all(b"[").map_err(stdout_err)?;
        for (i, t) in tensors.enumerate() {
            let t = t?;
            if i > 0 {
                out.write_all(b",").map_err(stdout_err)?;
            }
            write_json_info(&mut out, &t).map_err(stdout_err)?;
        }
        out.write_all(b"]\n").map_err(stdout_err)?;
        out.flush().map_err(stdout_err)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (mut out, colour) = super::listing_stdout();
    let mut count = 0u64;
    let mut total = 0u64;
    let mut tensors = tensors.inspect(|t| {
        if let Ok(t) = t {
            count += 1;
            total = total.saturating_add(t.nbytes);
        }
    });
    let mut window = Vec::new();
    for t in tensors.by_ref().take(LS_WIDTH_WINDOW) {
        let mut row = LsRow::default();
        row.set(&t?);
        window.push(row);
    }
    let table = LsTable::new(&window, colour);
    table.line(&mut out, LS_HEAD, true).map_err(stdout_err)?;
    for row in &window {
        table
            .line(&mut out, row.cells(), false)
            .map_err(stdout_err)?;
    }
    let mut row = window.pop().unwrap_or_default();
    drop(window);
    for t in tensors.by_ref() {
        row.set(&t?);
        table
            .line(&mut out, row.cells(), false)
            .map_err(stdout_err)?;
    }
    drop(tensors);
    let dim = Codes::of(DIM, colour);
    writeln!(
        out,
        "{}{count} tensors, {} of data ({total} bytes), {}{}",
        dim.0,
        human_bytes(total),
        store.format().name(),
        dim.1
    )
    .map_err(stdout_err)?;
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
    slice: Option<String>,
) -> Result<ExitCode> {
    let key = if hex {
        let s = name_arg.to_string_lossy();
        name::from_hex(&s)
            .ok_or_else(|| Error::InvalidArgument(format!("--hex: {s:?} is not hex")))?
    } else {
        os_bytes(&name_arg)
    };
    let store = open_any(file)?;
    let t = match &slice {
        Some(spec) => super::shards::load_region(store.as_ref(), &key, spec)?,
        None => store.load(&key)?,
    };
    let t = t.ok_or_else(|| Error::NotFound {
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
            (paramdex::interop::npy::header(d, &t.info.shape), b)
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
        if matches!(b, paramdex::raw::table::BlockBytes::Cached(_)) {
            f.snappy_blocks += 1;
        }
    }
    Ok(f)
}

pub fn stat(file: &Path, as_json: bool) -> Result<ExitCode> {
    let store = match open_any(file) {
        Ok(s) => s,
        // A prefix where a save left files but no checkpoint: say what is there.
        Err(e) => {
            let ui = Ui { quiet: as_json };
            return Err(super::shards::explain_leftovers(ui, file).unwrap_or(e));
        }
    };
    let metadata = store.metadata()?;
    // One pass over the listing: counts and bytes by dtype, nothing kept per tensor.
    let mut by_dtype: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut n = 0u64;
    let mut data_bytes = 0u64;
    for t in store.scan(b"")? {
        let t = t?;
        let e = by_dtype.entry(t.kind.name()).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(t.nbytes);
        n += 1;
        data_bytes = data_bytes.saturating_add(t.nbytes);
    }
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
            super::shards::stat_fields(r, &mut o)?;
            o.insert("records_sorted".into(), json!(h.records_sorted));
        }
        Format::TensorFlow => {
            if let Some(prefix) = paramdex::interop::tf::resolve_prefix(file)? {
                let ck = paramdex::interop::tf::TfCheckpoint::open(&prefix)?;
                let index = paramdex::interop::tf::index_path(&prefix);
                let bytes = paramdex::raw::source::Source::map(&index)?;
                let f = table_figures(&bytes)?;
                o.insert("shards".into(), json!(ck.num_shards()));
                put_table(&mut o, &f, bytes.len() as u64);
            }
        }
        Format::Safetensors => {
            let s = paramdex::interop::safetensors::SafetensorsStore::open(file)?;
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
        super::shards::stat_rows(&o, &mut rows);
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

/// Verifies a native file with the library's one verify ([`Reader::verify_with`]), drawing its
/// progress over the data bytes.
fn verify_native(ui: Ui, r: &Reader, threads: usize) -> Result<Verified> {
    let bar = Bar(ui.bytes_bar(0, "verifying"));
    // A progress hook costs the library a first pass over the index (for the total): give one
    // only when the bar is drawn.
    let rep = r.verify_with(VerifyOptions {
        threads,
        progress: (!bar.0.is_hidden()).then_some(&bar as &dyn Progress),
    });
    bar.0.finish_and_clear();
    let rep = rep?;
    Ok(Verified {
        tensors: rep.tensors,
        data_bytes: rep.data_bytes,
        checksums: rep.blocks + rep.records,
    })
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
    if let Some(e) = super::shards::explain_leftovers(ui, torn) {
        return Err(e);
    }
    let rep = match paramdex::recover_any(torn, out, WriterOptions::default())? {
        Recovered::PreviousFile { len, discarded } => {
            ui.say(format!(
                "{} ends with an incomplete index ({} bytes, an interrupted `meta --set`); \
                 restored the previous complete file ({}) into {}",
                torn.display(),
                discarded,
                human_bytes(len),
                out.display()
            ))?;
            return Ok(ExitCode::SUCCESS);
        }
        Recovered::Records(rep) => rep,
        other => {
            return Err(Error::Unsupported(format!(
                "recover: an outcome this paramdex cannot report: {other:?}"
            )))
        }
    };
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &[u8], shape: &[u64], lod: Vec<Vec<u64>>) -> TensorInfo {
        TensorInfo {
            name: name.to_vec(),
            kind: Kind::Numeric(paramdex::DType::Float32),
            shape: shape.to_vec(),
            lod,
            nbytes: 4 * shape.iter().product::<u64>(),
        }
    }

    #[test]
    fn streamed_json_is_what_serde_json_writes() {
        let cases = [
            info(b"a.weight", &[2, 3], vec![]),
            info(b"scalar", &[], vec![]),
            info(b"lod", &[5, 1], vec![vec![0, 2, 5], vec![0, 1, 3, 4, 5, 5]]),
            info(b"q\"uote\\ \x01 \xe6\x97\xa5", &[0], vec![]),
            info(b"not utf-8 \xff\xfe", &[1], vec![]),
            info(b"", &[1], vec![vec![]]),
        ];
        for t in &cases {
            let mut ours = Vec::new();
            write_json_info(&mut ours, t).unwrap();
            let theirs = serde_json::to_vec(&Value::Object(describe(t))).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs)
            );
        }
    }

    #[test]
    fn rows_render_as_shape_str_and_human_bytes() {
        let mut row = LsRow::default();
        for (shape, nbytes) in [(vec![], 4), (vec![0], 0), (vec![7, 1 << 40], 3 << 30)] {
            let mut t = info(b"x", &shape, vec![vec![0, 1]]);
            t.nbytes = nbytes;
            row.set(&t);
            assert_eq!(row.shape, shape_str(&shape));
            assert_eq!(row.size, human_bytes(nbytes));
            assert_eq!(row.lod, "1");
        }
        let mut digits = String::new();
        for v in [0, 9, 10, 12345, u64::MAX] {
            digits.clear();
            push_u64(&mut digits, v);
            assert_eq!(digits, v.to_string());
        }
    }

    #[test]
    fn later_rows_keep_the_window_widths() {
        let mut short = LsRow::default();
        short.set(&info(b"ab", &[1], vec![]));
        let table = LsTable::new(std::slice::from_ref(&short), false);
        let mut out = Vec::new();
        table.line(&mut out, LS_HEAD, true).unwrap();
        table.line(&mut out, short.cells(), false).unwrap();
        let mut long = LsRow::default();
        long.set(&info(b"a much longer name", &[1], vec![]));
        table.line(&mut out, long.cells(), false).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "NAME  DTYPE    SHAPE  LOD  SIZE");
        assert_eq!(lines[1], "ab    float32  [1]      0   4 B");
        // Wider than the window: the line is pushed wider, nothing is cut.
        assert_eq!(lines[2], "a much longer name  float32  [1]      0   4 B");
    }
}
