//! `ls`, `get`, `stat`, `verify`, `recover`.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use paramdex::interop::{
    json as values, open_any, DataLocation, Format, Kind, TensorData, TensorInfo, TensorStore,
};
use paramdex::{
    name, Error, Progress, Reader, RecoverOptions, Recovered, Result, VerifyOptions, WriterOptions,
};
use serde_json::{json, Map, Value};

use super::output::{count, count_s, write_inline, write_json};
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

#[cfg(test)]
/// [`describe`] and, for `ls --long`, where the data is: data_file, data_offset, crc32c (null
/// where the store does not say).
fn describe_long(t: &TensorInfo, loc: Option<&DataLocation>) -> Map<String, Value> {
    let mut m = describe(t);
    m.insert(
        "data_file".into(),
        json!(loc.map(|l| l.path.display().to_string())),
    );
    m.insert("data_offset".into(), json!(loc.map(|l| l.offset)));
    m.insert("crc32c".into(), json!(loc.and_then(|l| l.crc32c)));
    m
}

/// A shape as `[2, 3]`.
pub fn shape_str(shape: &[u64]) -> String {
    format!("{shape:?}")
}

/// `ls`'s columns (the first 5; `--long`: all): heading, and whether each is right-aligned
/// (numbers).
const LS_HEAD: [&str; 8] = [
    "NAME", "DTYPE", "SHAPE", "LOD", "SIZE", "OFFSET", "CRC32C", "FILE",
];
const LS_RIGHT: [bool; 8] = [false, false, false, true, true, true, false, false];
/// Columns of `ls`, and of `ls --long`.
const LS_COLUMNS: usize = 5;
const LS_LONG_COLUMNS: usize = 8;

/// On a terminal, `ls` shortens names to the columns left by the other cells, but not below
/// this many.
const LS_NAME_MIN: usize = 24;

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
    dtype: String,
    shape: String,
    lod: String,
    size: String,
    offset: String,
    crc: String,
    file: String,
}

impl LsRow {
    /// The `--long` cells: where the data is, "-" where the store does not say.
    fn set_location(&mut self, loc: Option<&DataLocation>) {
        use std::fmt::Write as _;
        self.offset.clear();
        self.crc.clear();
        self.file.clear();
        match loc {
            Some(l) => {
                push_u64(&mut self.offset, l.offset);
                match l.crc32c {
                    // Writing to a String cannot fail.
                    Some(c) => drop(write!(self.crc, "{c:08x}")),
                    None => self.crc.push('-'),
                }
                let file = l.path.file_name().unwrap_or(l.path.as_os_str());
                self.file.push_str(&name::display(&os_bytes(&file.into())));
            }
            None => {
                self.offset.push('-');
                self.crc.push('-');
                self.file.push('-');
            }
        }
    }

    fn set(&mut self, t: &TensorInfo) {
        self.name = name::display(&t.name);
        self.dtype.clear();
        self.dtype.push_str(t.kind.name());
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

    fn cells(&self) -> [&str; 8] {
        [
            &self.name,
            &self.dtype,
            &self.shape,
            &self.lod,
            &self.size,
            &self.offset,
            &self.crc,
            &self.file,
        ]
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

/// `ls`'s table: its columns, fixed column widths, and the styles it uses.
struct LsTable {
    columns: usize,
    width: [usize; 8],
    /// On a terminal, the widest a name may be (longer ones are shortened with `…`).
    name_max: Option<usize>,
    head: Codes,
    dtype: Codes,
}

impl LsTable {
    /// Widths from the heading and `rows`, for the first `columns` columns; on a terminal
    /// `terminal` columns wide, the name column gets what the others leave (at least
    /// [`LS_NAME_MIN`]).
    fn new(rows: &[LsRow], columns: usize, terminal: Option<usize>, colour: bool) -> LsTable {
        let mut width = LS_HEAD.map(cols);
        for row in rows {
            for (w, c) in width.iter_mut().zip(row.cells()) {
                *w = (*w).max(cols(c));
            }
        }
        let name_max = terminal.map(|t| {
            let others: usize = width[1..columns].iter().map(|w| w + 2).sum();
            t.saturating_sub(others).max(LS_NAME_MIN)
        });
        if let Some(m) = name_max {
            width[0] = width[0].min(m);
        }
        LsTable {
            columns,
            width,
            name_max,
            head: Codes::of(HEAD, colour),
            dtype: Codes::of(DTYPE, colour),
        }
    }

    /// One line: cells padded to the widths (never cut, but for names on a terminal), two
    /// spaces apart, the last left-aligned one without trailing spaces.
    fn line<W: Write + ?Sized>(
        &self,
        out: &mut W,
        cells: [&str; 8],
        heading: bool,
    ) -> std::io::Result<()> {
        let short;
        let mut cells = cells;
        if let Some(m) = self.name_max.filter(|&m| !heading && cols(cells[0]) > m) {
            short = super::output::shorten(cells[0], m);
            cells[0] = &short;
        }
        let last = self.columns - 1;
        for (i, c) in cells.into_iter().take(self.columns).enumerate() {
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

/// Writes `t` as `ls --json` writes an element: the object [`describe`] (or, for `--long`,
/// [`describe_long`]) gives, on one line as [`write_inline`] lays it out, keys in order,
/// without building it.
fn write_json_info(
    out: &mut dyn Write,
    t: &TensorInfo,
    long: Option<Option<&DataLocation>>,
) -> std::io::Result<()> {
    fn array(out: &mut dyn Write, v: &[u64]) -> std::io::Result<()> {
        out.write_all(b"[")?;
        for (i, x) in v.iter().enumerate() {
            if i > 0 {
                out.write_all(b", ")?;
            }
            write!(out, "{x}")?;
        }
        out.write_all(b"]")
    }
    out.write_all(b"{")?;
    if let Some(loc) = long {
        out.write_all(b"\"crc32c\": ")?;
        match loc.and_then(|l| l.crc32c) {
            Some(c) => write!(out, "{c}")?,
            None => out.write_all(b"null")?,
        }
        out.write_all(b", \"data_file\": ")?;
        match loc {
            Some(l) => serde_json::to_writer(&mut *out, &l.path.display().to_string())?,
            None => out.write_all(b"null")?,
        }
        out.write_all(b", \"data_offset\": ")?;
        match loc {
            Some(l) => write!(out, "{}", l.offset)?,
            None => out.write_all(b"null")?,
        }
        out.write_all(b", ")?;
    }
    out.write_all(b"\"dtype\": ")?;
    serde_json::to_writer(&mut *out, t.kind.name())?;
    out.write_all(b", \"lod\": [")?;
    for (i, level) in t.lod.iter().enumerate() {
        if i > 0 {
            out.write_all(b", ")?;
        }
        array(out, level)?;
    }
    out.write_all(b"], \"name\": ")?;
    match name::as_utf8(&t.name) {
        Some(s) => serde_json::to_writer(&mut *out, s)?,
        None => {
            serde_json::to_writer(&mut *out, &name::display(&t.name))?;
            out.write_all(b", \"name_hex\": ")?;
            serde_json::to_writer(&mut *out, &name::to_hex(&t.name))?;
        }
    }
    write!(out, ", \"nbytes\": {}, \"shape\": ", t.nbytes)?;
    array(out, &t.shape)?;
    out.write_all(b"}")
}

/// The tensors a listing could not describe. A store's listing goes on after an error about
/// one tensor (`TensorStore::scan`: a TensorFlow string tensor whose data shard is missing or
/// damaged), so `ls` and `stat` show everything else, then name what they could not read, and
/// exit with the status of the first such error.
#[derive(Default)]
struct Unlisted {
    first: Option<Error>,
    /// The errors after the first, up to [`UNLISTED_NOTES`].
    others: Vec<Error>,
    count: u64,
}

/// Most errors after the first that a listing notes one by one.
const UNLISTED_NOTES: usize = 20;

impl Unlisted {
    /// The tensors of `items` that could be described; the errors are kept here.
    fn filter<'a, I>(&'a mut self, items: I) -> impl Iterator<Item = TensorInfo> + 'a
    where
        I: Iterator<Item = Result<TensorInfo>> + 'a,
    {
        items.filter_map(move |t| match t {
            Ok(t) => Some(t),
            Err(e) => {
                self.count += 1;
                if self.first.is_none() {
                    self.first = Some(e);
                } else if self.others.len() < UNLISTED_NOTES {
                    self.others.push(e);
                }
                None
            }
        })
    }

    /// Success if every tensor was described; otherwise notes the errors after the first,
    /// prints the first as the error line (with how many tensors were listed) and returns its
    /// exit status.
    fn finish(self, ui: Ui, listed: u64) -> ExitCode {
        let Some(first) = self.first else {
            return ExitCode::SUCCESS;
        };
        for e in &self.others {
            ui.note(format!("could not list: {e}"));
        }
        let unnoted = self.count - 1 - self.others.len() as u64;
        if unnoted > 0 {
            ui.note(format!("{unnoted} more tensors could not be listed"));
        }
        let errors = match self.count {
            1 => "1 error".to_string(),
            n => format!("{n} errors, the others noted above; the first"),
        };
        let s = if listed == 1 { "" } else { "s" };
        super::print_error(format!("listed {listed} tensor{s}; {errors}: {first}"));
        super::exit_code_for(&first)
    }
}

/// `ls` of several inputs: each input's listing under a `FILE:` line, a blank line apart; with
/// `--json`, one array of every input's tensor objects, each with its `file` first. An input
/// that cannot be listed is reported (one error line) and the others are still listed; the
/// exit status is the first failure's.
pub fn ls_many(
    ui: Ui,
    files: &[PathBuf],
    as_json: bool,
    prefix: Option<OsString>,
    long: bool,
) -> Result<ExitCode> {
    if let [file] = files {
        return ls(ui, file, as_json, prefix.as_deref(), long, None);
    }
    let mut status = ExitCode::SUCCESS;
    let mut first = true;
    if as_json {
        let mut out = super::stdout_for(true);
        out.write_all(b"[").map_err(stdout_err)?;
        out.flush().map_err(stdout_err)?;
    }
    for (i, file) in files.iter().enumerate() {
        if !as_json {
            let mut out = super::stdout_for(false);
            let blank = if i > 0 { "\n" } else { "" };
            writeln!(out, "{blank}{HEAD}{}:{HEAD:#}", file.display()).map_err(stdout_err)?;
            out.flush().map_err(stdout_err)?;
        }
        let json_file = as_json.then(|| (file.display().to_string(), &mut first));
        let code = match ls(ui, file, as_json, prefix.as_deref(), long, json_file) {
            Ok(code) => code,
            // The reader of the output went away: stop.
            Err(e @ Error::Io { .. }) if is_broken_pipe(&e) => return Err(e),
            Err(e) => {
                super::print_error(&e);
                super::exit_code_for(&e)
            }
        };
        if status == ExitCode::SUCCESS {
            status = code;
        }
    }
    if as_json {
        let mut out = super::stdout_for(true);
        out.write_all(if first { b"]\n" } else { b"\n]\n" })
            .map_err(stdout_err)?;
        out.flush().map_err(stdout_err)?;
    }
    Ok(status)
}

/// Whether `e` is standard output's reader having gone away.
fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::BrokenPipe)
}

/// `ls` of one input. `json_file`: one of several inputs of `ls --json` ([`ls_many`]): its
/// tensors are elements of the array the caller opened, each with `"file"` first, after a
/// comma unless `first` (which this clears).
pub fn ls(
    ui: Ui,
    file: &Path,
    as_json: bool,
    prefix: Option<&std::ffi::OsStr>,
    long: bool,
    json_file: Option<(String, &mut bool)>,
) -> Result<ExitCode> {
    let store = open_any(file)?;
    // Progress on standard error, cleared around each write to standard output and before the
    // totals line.
    let bar = Bar::new(ui, "listing");
    let tensors = match prefix {
        Some(p) => store.scan_prefix(&os_bytes(&p.to_os_string()))?,
        None if bar.visible() => store.scan_with_progress(&bar)?,
        None => store.scan(b"")?,
    };
    let locate = |t: &TensorInfo| -> Result<Option<DataLocation>> {
        if long {
            store.data_location(&t.name)
        } else {
            Ok(None)
        }
    };
    let mut unlisted = Unlisted::default();
    let tensors = unlisted.filter(tensors);
    if as_json {
        // The array streams out as the store is read, one tensor a line: the layout of
        // `output::write_json` for the whole array.
        let mut out = super::around_bar(super::stdout_for(true), &bar);
        let (label, mut own_first) = match &json_file {
            Some((f, _)) => (Some(json!(f).to_string()), false),
            None => (None, true),
        };
        let first = match json_file {
            Some((_, first)) => first,
            None => &mut own_first,
        };
        let opening = label.is_none();
        let mut count = 0u64;
        let mut row = Vec::new();
        for t in tensors {
            let loc = locate(&t)?;
            count += 1;
            let sep: &[u8] = match (*first, opening) {
                (true, true) => b"[\n  ",
                (true, false) => b"\n  ",
                (false, _) => b",\n  ",
            };
            out.write_all(sep).map_err(stdout_err)?;
            *first = false;
            match &label {
                None => write_json_info(&mut out, &t, long.then_some(loc.as_ref()))
                    .map_err(stdout_err)?,
                Some(f) => {
                    // The object with "file" as its first member.
                    row.clear();
                    write_json_info(&mut row, &t, long.then_some(loc.as_ref()))
                        .map_err(stdout_err)?;
                    out.write_all(b"{\"file\": ").map_err(stdout_err)?;
                    out.write_all(f.as_bytes()).map_err(stdout_err)?;
                    out.write_all(b", ").map_err(stdout_err)?;
                    out.write_all(row.get(1..).unwrap_or_default())
                        .map_err(stdout_err)?;
                }
            }
        }
        bar.finish();
        if opening {
            out.write_all(if *first { b"[]\n" } else { b"\n]\n" })
                .map_err(stdout_err)?;
        }
        out.flush().map_err(stdout_err)?;
        return Ok(unlisted.finish(ui, count));
    }
    let (out, colour) = super::listing_stdout();
    let mut out = super::around_bar(out, &bar);
    let columns = if long { LS_LONG_COLUMNS } else { LS_COLUMNS };
    let mut n = 0u64;
    let mut total = 0u64;
    let mut tensors = tensors.inspect(|t| {
        n += 1;
        total = total.saturating_add(t.nbytes);
    });
    let mut window = Vec::new();
    for t in tensors.by_ref().take(LS_WIDTH_WINDOW) {
        let mut row = LsRow::default();
        row.set(&t);
        if long {
            row.set_location(locate(&t)?.as_ref());
        }
        window.push(row);
    }
    let table = LsTable::new(&window, columns, super::output::terminal_columns(), colour);
    table.line(&mut out, LS_HEAD, true).map_err(stdout_err)?;
    for row in &window {
        table
            .line(&mut out, row.cells(), false)
            .map_err(stdout_err)?;
    }
    let mut row = window.pop().unwrap_or_default();
    drop(window);
    for t in tensors.by_ref() {
        row.set(&t);
        if long {
            row.set_location(locate(&t)?.as_ref());
        }
        table
            .line(&mut out, row.cells(), false)
            .map_err(stdout_err)?;
    }
    drop(tensors);
    bar.finish();
    let dim = Codes::of(DIM, colour);
    writeln!(
        out,
        "{}{}, {} of data ({}), {}{}",
        dim.0,
        count_s(n, "tensor"),
        human_bytes(total),
        count_s(total, "byte"),
        store.format().name(),
        dim.1
    )
    .map_err(stdout_err)?;
    out.flush().map_err(stdout_err)?;
    Ok(unlisted.finish(ui, n))
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

pub fn stat(ui: Ui, file: &Path, as_json: bool) -> Result<ExitCode> {
    let store = match open_any(file) {
        Ok(s) => s,
        // A prefix where a save left files but no checkpoint: say what is there.
        Err(e) => {
            let ui = Ui {
                quiet: ui.quiet || as_json,
            };
            return Err(super::shards::explain_leftovers(ui, file).unwrap_or(e));
        }
    };
    let metadata = store.metadata()?;
    // One pass over the listing: counts and bytes by dtype, nothing kept per tensor.
    let mut by_dtype: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut n = 0u64;
    let mut data_bytes = 0u64;
    let bar = Bar::new(ui, "reading");
    let listing = if bar.visible() {
        store.scan_with_progress(&bar)?
    } else {
        store.scan(b"")?
    };
    let mut unlisted = Unlisted::default();
    for t in unlisted.filter(listing) {
        let e = by_dtype.entry(t.kind.name().to_string()).or_default();
        e.0 += 1;
        e.1 = e.1.saturating_add(t.nbytes);
        n += 1;
        data_bytes = data_bytes.saturating_add(t.nbytes);
    }
    bar.finish();
    let mut o = Map::new();
    o.insert("file".into(), json!(file.display().to_string()));
    // A checkpoint directory (or DIR@STEP): which checkpoint was read.
    let resolved = paramdex::interop::resolve_checkpoint_dir(file)?.map(|index| {
        let prefix = index.with_extension("");
        let step = prefix
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(paramdex::interop::step_of);
        (prefix, step)
    });
    if let Some((prefix, step)) = &resolved {
        o.insert("checkpoint".into(), json!(prefix.display().to_string()));
        o.insert("step".into(), json!(step));
    }
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
    // The layout figures the library computes for any store, from a path or a URL alike.
    let layout = store.layout()?;
    let put = |o: &mut Map<String, Value>, k: &str, v: Option<Value>| {
        if let Some(v) = v {
            o.insert(k.into(), v);
        }
    };
    put(&mut o, "file_bytes", layout.file_bytes.map(|v| json!(v)));
    put(
        &mut o,
        "format_version",
        layout.format_version.map(|v| json!(v)),
    );
    put(
        &mut o,
        "records_bytes",
        layout.records_bytes.map(|v| json!(v)),
    );
    put(&mut o, "shards", layout.shards.map(|v| json!(v)));
    if let Some(index_bytes) = layout.index_bytes {
        put(&mut o, "index_bytes", Some(json!(index_bytes)));
        put(
            &mut o,
            "index_bytes_per_tensor",
            Some(json!(index_bytes as f64 / n.max(1) as f64)),
        );
    }
    if let Some(f) = &layout.table {
        // A table's blocks, each with its own CRC32C (what `verify` counts).
        put(&mut o, "index_blocks", Some(json!(f.checksummed_blocks())));
        put(&mut o, "hash_index", Some(json!(f.hash_index)));
        put(&mut o, "index_data_blocks", Some(json!(f.data_blocks)));
        put(&mut o, "index_compression", Some(json!(f.compression())));
        put(
            &mut o,
            "compression_ratio",
            Some(json!(f.raw_bytes as f64 / f.stored_bytes.max(1) as f64)),
        );
    }
    put(&mut o, "dead_bytes", layout.dead_bytes.map(|v| json!(v)));
    put(&mut o, "alignment", layout.alignment.map(|v| json!(v)));
    if let Some(r) = store.as_native() {
        // A local sharded checkpoint: its data files and what failed saves left beside them.
        super::shards::stat_fields(r, &mut o)?;
    }
    put(
        &mut o,
        "records_sorted",
        layout.records_sorted.map(|v| json!(v)),
    );
    o.insert("metadata_entries".into(), json!(metadata.len()));
    let mut out = super::stdout_for(as_json);
    if as_json {
        write_json(&mut out, &Value::Object(o)).map_err(stdout_err)?;
    } else {
        let get = |k: &str| o.get(k).cloned().unwrap_or(Value::Null);
        let num = |k: &str| get(k).as_u64();
        let mut rows: Vec<(String, String)> = vec![("file".into(), file.display().to_string())];
        if let Some((prefix, step)) = &resolved {
            let step = step.map_or_else(|| "?".to_string(), |s| s.to_string());
            let latest = if file.is_dir() { ", the latest" } else { "" };
            rows.push((
                "checkpoint".into(),
                format!("{} (step {step}{latest})", prefix.display()),
            ));
        }
        rows.extend([
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
        ]);
        for (d, (c, b)) in &by_dtype {
            rows.push((
                format!("  {d}"),
                format!("{} in {}", human_bytes(*b), count_s(*c, "tensor")),
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
            let data = num("index_data_blocks").unwrap_or(0);
            rows.push((
                "index blocks".into(),
                format!(
                    "{b} ({}, {}the metaindex and the index block)",
                    count_s(data, "data block"),
                    if get("hash_index").as_bool() == Some(true) {
                        "the hash index block, "
                    } else {
                        ""
                    }
                ),
            ));
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
        rows.push((
            "metadata".into(),
            count(metadata.len() as u64, "entry", Some("entries")),
        ));
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(out, "{HEAD}{k:<w$}{HEAD:#}  {v}").map_err(stdout_err)?;
        }
    }
    out.flush().map_err(stdout_err)?;
    Ok(unlisted.finish(ui, n))
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
    let bar = Bar::new(ui, "verifying");
    // A progress hook costs the library a first pass over the index (for the total): give one
    // only when the bar is drawn.
    let rep = r.verify_with(VerifyOptions {
        threads,
        progress: bar.visible().then_some(&bar as &dyn Progress),
    });
    bar.finish();
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
                write_json(&mut std::io::stdout().lock(), &o).map_err(stdout_err)?;
            } else {
                let checks = if v.checksums == 0 {
                    format!("structure checked ({} has no checksums)", format.name())
                } else {
                    format!("{} matched", count_s(v.checksums, "checksum"))
                };
                ui.say(format!(
                    "{}: {GOOD}OK{GOOD:#} ({}): {}, {} of data, {checks} in {secs:.2} s",
                    file.display(),
                    format.name(),
                    count_s(v.tensors, "tensor"),
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
                write_json(&mut std::io::stdout().lock(), &o).map_err(stdout_err)?;
            }
            Err(e)
        }
    }
}

/// What an input is, with its article, for messages (`a TensorFlow checkpoint`).
fn a_format(f: Format) -> String {
    match f {
        Format::Native => "a paramdex file".into(),
        Format::TensorFlow => "a TensorFlow checkpoint".into(),
        Format::PaddleModel => "a Paddle model".into(),
        Format::PaddleTensor => "a Paddle tensor file".into(),
        Format::PaddleDir => "a directory of Paddle per-variable files".into(),
        Format::PaddleMerged => "a Paddle merged parameter file".into(),
        Format::Safetensors => "a safetensors file".into(),
        Format::Torch => "a torch.save file".into(),
        Format::PaddleDygraph => "a Paddle dygraph pickle (.pdparams / .pdopt)".into(),
        other => format!("a {} input", other.name()),
    }
}

/// `recover TORN OUT`. Exit 0 when OUT was written; 1 when the input is not a paramdex file or
/// needs no recovery (nothing is written then); 3 when it holds no complete record.
pub fn recover(ui: Ui, torn: &Path, out: &Path) -> Result<ExitCode> {
    if let Some(e) = super::shards::explain_leftovers(ui, torn) {
        return Err(e);
    }
    let bar = Bar::new(ui, "recovering");
    let result = paramdex::recover_any_with(
        torn,
        out,
        &RecoverOptions {
            writer: WriterOptions::default(),
            progress: bar.visible().then_some(&bar as &dyn Progress),
        },
    );
    bar.finish();
    let (t, o) = (torn.display(), out.display());
    let rep = match result {
        Ok(Recovered::PreviousFile { len, discarded }) => {
            ui.say(format!(
                "{t} ends with an incomplete index ({discarded} bytes, an interrupted `meta \
                 --set`); restored the previous complete file ({}) into {o}",
                human_bytes(len),
            ))?;
            return Ok(ExitCode::SUCCESS);
        }
        Ok(Recovered::Intact { tensors }) => {
            super::print_error(format!(
                "{t} is a complete paramdex file ({tensors} tensors, every checksum matches): it \
                 needs no recovery, and {o} was not written"
            ));
            return Ok(ExitCode::from(super::EXIT_ERROR));
        }
        Ok(Recovered::Records(rep)) => rep,
        Ok(other) => {
            return Err(Error::Unsupported(format!(
                "recover: an outcome this paramdex cannot report: {other:?}"
            )))
        }
        // Not a paramdex file: say what it is, if it is another input paramdex reads.
        Err(e @ Error::UnrecognizedFormat { .. }) => {
            return match open_any(torn) {
                Ok(store) if store.format() != Format::Native => {
                    super::print_error(format!(
                        "{t} is {}, not a paramdex file: recover rebuilds paramdex files torn by \
                         a crash ({o} was not written); to check it, run `paramdex verify {t}`",
                        a_format(store.format())
                    ));
                    Ok(ExitCode::from(super::EXIT_ERROR))
                }
                _ => Err(e),
            };
        }
        Err(e) => return Err(e),
    };
    let tail = if rep.discarded_bytes == 0 {
        "the input ends after its last complete record (nothing dropped)".to_string()
    } else {
        format!(
            "the torn tail starts at offset {} ({} bytes dropped)",
            rep.good_bytes, rep.discarded_bytes
        )
    };
    ui.say(format!(
        "recovered {} tensors ({} bytes of records) from {t} into {o}; {tail}",
        rep.recovered, rep.good_bytes,
    ))?;
    if rep.duplicates_skipped > 0 {
        ui.say(format!(
            "skipped {} records whose names were already recovered (the first of each is kept)",
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
    fn streamed_json_is_the_one_json_layout() {
        let cases = [
            info(b"a.weight", &[2, 3], vec![]),
            info(b"scalar", &[], vec![]),
            info(b"lod", &[5, 1], vec![vec![0, 2, 5], vec![0, 1, 3, 4, 5, 5]]),
            info(b"q\"uote\\ \x01 \xe6\x97\xa5", &[0], vec![]),
            info(b"not utf-8 \xff\xfe", &[1], vec![]),
            info(b"", &[1], vec![vec![]]),
        ];
        let loc: Option<DataLocation> = paramdex::interop::open_any(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/tf/basic/v1/model.ckpt"),
        )
        .unwrap()
        .data_location(b"layer1/W")
        .unwrap();
        assert!(loc.as_ref().is_some_and(|l| l.crc32c.is_some()));
        for t in &cases {
            let mut ours = Vec::new();
            write_json_info(&mut ours, t, None).unwrap();
            let mut theirs = Vec::new();
            write_inline(&mut theirs, &Value::Object(describe(t))).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs)
            );
            for l in [None, loc.as_ref()] {
                let mut ours = Vec::new();
                write_json_info(&mut ours, t, Some(l)).unwrap();
                let mut theirs = Vec::new();
                write_inline(&mut theirs, &Value::Object(describe_long(t, l))).unwrap();
                assert_eq!(
                    String::from_utf8_lossy(&ours),
                    String::from_utf8_lossy(&theirs)
                );
            }
        }
        // The streamed array is the whole array as write_json lays it out.
        let whole = super::super::output::json_bytes(&Value::Array(
            cases.iter().map(|t| Value::Object(describe(t))).collect(),
        ));
        let mut streamed = Vec::new();
        for (i, t) in cases.iter().enumerate() {
            streamed.extend_from_slice(if i == 0 { b"[\n  " } else { b",\n  " });
            write_json_info(&mut streamed, t, None).unwrap();
        }
        streamed.extend_from_slice(b"\n]\n");
        assert_eq!(
            String::from_utf8_lossy(&streamed),
            String::from_utf8_lossy(&whole)
        );
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
        let table = LsTable::new(std::slice::from_ref(&short), LS_COLUMNS, None, false);
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

    #[test]
    fn on_a_terminal_long_names_are_shortened_to_its_width() {
        let mut rows = vec![LsRow::default(), LsRow::default()];
        rows[0].set(&info(b"short", &[1], vec![]));
        let long = format!("model.{}.weight", "x".repeat(300));
        rows[1].set(&info(long.as_bytes(), &[1], vec![]));
        for width in [None, Some(60)] {
            let table = LsTable::new(&rows, LS_COLUMNS, width, false);
            let mut out = Vec::new();
            table.line(&mut out, LS_HEAD, true).unwrap();
            for r in &rows {
                table.line(&mut out, r.cells(), false).unwrap();
            }
            let text = String::from_utf8(out).unwrap();
            let widest = text.lines().map(cols).max().unwrap();
            match width {
                None => assert!(text.contains(&long) && widest > 300, "{text}"),
                Some(w) => {
                    assert_eq!(widest, w, "{text}");
                    assert!(
                        text.contains("model.xx")
                            && text.contains("…")
                            && text.contains("x.weight")
                    );
                }
            }
        }
    }
}
