//! `ls`: listing one input or several, as rows or JSON, streamed as the store is read; `ls DIR/`
//! of a directory of inputs lists each with what it is.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use paramdex::interop::{open_any, DataLocation, SliceLocation, TensorInfo};
use paramdex::{name, Error, Result};
use serde_json::{json, Map, Value};

use super::output::{count_s, write_json};
use super::style::{DIM, DTYPE, HEAD};
use super::{human_bytes, os_bytes, stdout_err, Bar, Ui};

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
/// where the store does not say), and for a tensor stored in slices, `slices`: each one's
/// start, shape, nbytes and where it is.
fn describe_long(t: &TensorInfo, loc: &Located) -> Map<String, Value> {
    fn place(m: &mut Map<String, Value>, loc: Option<&DataLocation>) {
        m.insert(
            "data_file".into(),
            json!(loc.map(|l| l.path.display().to_string())),
        );
        m.insert("data_offset".into(), json!(loc.map(|l| l.offset)));
        m.insert("crc32c".into(), json!(loc.and_then(|l| l.crc32c)));
    }
    let mut m = describe(t);
    place(&mut m, loc.whole.as_ref());
    if !loc.slices.is_empty() {
        let slices = loc.slices.iter().map(|s| {
            let mut o = Map::new();
            place(&mut o, Some(&s.location));
            o.insert("nbytes".into(), json!(s.location.len));
            o.insert("shape".into(), json!(s.region.len));
            o.insert("start".into(), json!(s.region.start));
            Value::Object(o)
        });
        m.insert("slices".into(), Value::Array(slices.collect()));
    }
    m
}

/// Where a tensor's data is, for `ls --long`: one run of bytes, or its stored slices (a
/// partitioned variable, a sharded save's shards), or neither where the store does not say.
#[derive(Default)]
struct Located {
    whole: Option<DataLocation>,
    slices: Vec<SliceLocation>,
}

impl Located {
    fn of(store: &dyn paramdex::interop::TensorStore, name: &[u8]) -> Result<Located> {
        let whole = store.data_location(name)?;
        let slices = match whole {
            Some(_) => Vec::new(),
            None => store.slice_locations(name)?,
        };
        Ok(Located { whole, slices })
    }
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
    /// The tensor's data bytes (the size cell's figure).
    nbytes: u64,
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

    /// Sets the `--long` cells of this tensor's row from `loc`; returns the rows of its stored
    /// slices, listed after it.
    fn locate(&mut self, loc: &Located) -> Vec<LsRow> {
        if loc.slices.is_empty() {
            self.set_location(loc.whole.as_ref());
            // A compressed record (SPEC.md 3.4): its data size, then what it takes stored.
            if let Some(l) = loc.whole.as_ref().filter(|l| l.len < self.nbytes) {
                self.size.push_str(" (");
                super::write_human_bytes(&mut self.size, l.len);
                self.size.push_str(" stored)");
            }
            return Vec::new();
        }
        self.set_sliced(loc.slices.len());
        loc.slices.iter().map(|s| LsRow::slice(self, s)).collect()
    }

    /// The `--long` cells of a tensor stored in slices (listed in the rows after it).
    fn set_sliced(&mut self, slices: usize) {
        self.offset.clear();
        self.offset.push('-');
        self.crc.clear();
        self.crc.push('-');
        self.file.clear();
        self.file.push_str(&count_s(slices as u64, "slice"));
    }

    /// A row of `ls --long` for one stored slice of the tensor of `tensor`'s row: its region
    /// as `[start:end, ...]` in the name column, its shape, size and where it is.
    fn slice(tensor: &LsRow, s: &SliceLocation) -> LsRow {
        let mut row = LsRow {
            dtype: tensor.dtype.clone(),
            ..LsRow::default()
        };
        row.name.push_str("  [");
        for (i, (&start, &len)) in s.region.start.iter().zip(&s.region.len).enumerate() {
            if i > 0 {
                row.name.push_str(", ");
            }
            push_u64(&mut row.name, start);
            row.name.push(':');
            push_u64(&mut row.name, start.saturating_add(len));
        }
        row.name.push(']');
        row.shape.push_str(&shape_str(&s.region.len));
        row.lod.push('0');
        super::write_human_bytes(&mut row.size, s.location.len);
        row.set_location(Some(&s.location));
        row
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
        self.nbytes = t.nbytes;
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
    long: Option<&Located>,
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
    /// `"crc32c": .., "data_file": .., "data_offset": .., ` of `loc`.
    fn place(out: &mut dyn Write, loc: Option<&DataLocation>) -> std::io::Result<()> {
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
        out.write_all(b", ")
    }
    out.write_all(b"{")?;
    if let Some(loc) = long {
        place(out, loc.whole.as_ref())?;
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
    if let Some(loc) = long.filter(|l| !l.slices.is_empty()) {
        out.write_all(b", \"slices\": [")?;
        for (i, s) in loc.slices.iter().enumerate() {
            out.write_all(if i > 0 { b", {" } else { b"{" })?;
            place(out, Some(&s.location))?;
            write!(out, "\"nbytes\": {}, \"shape\": ", s.location.len)?;
            array(out, &s.region.len)?;
            out.write_all(b", \"start\": ")?;
            array(out, &s.region.start)?;
            out.write_all(b"}")?;
        }
        out.write_all(b"]")?;
    }
    // A compressed record (SPEC.md 3.4): the bytes its data takes stored.
    if let Some(l) = long
        .and_then(|l| l.whole.as_ref())
        .filter(|l| l.len < t.nbytes)
    {
        write!(out, ", \"stored_nbytes\": {}", l.len)?;
    }
    out.write_all(b"}")
}

/// The tensors a listing could not describe. A store's listing goes on after an error about
/// one tensor (`TensorStore::scan`: a TensorFlow string tensor whose data shard is missing or
/// damaged), so `ls` and `stat` show everything else, then name what they could not read, and
/// exit with the status of the first such error.
#[derive(Default)]
pub(super) struct Unlisted {
    first: Option<Error>,
    /// The errors after the first, up to [`UNLISTED_NOTES`].
    others: Vec<Error>,
    count: u64,
}

/// Most errors after the first that a listing notes one by one.
const UNLISTED_NOTES: usize = 20;

impl Unlisted {
    /// The tensors of `items` that could be described; the errors are kept here.
    pub(super) fn filter<'a, I>(&'a mut self, items: I) -> impl Iterator<Item = TensorInfo> + 'a
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
    pub(super) fn finish(self, ui: Ui, listed: u64) -> ExitCode {
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
    let store = match open_any(file) {
        Ok(s) => s,
        // A directory (or an object prefix) that is not one input: what it holds.
        Err(e) if json_file.is_none() && prefix.is_none() && is_survey(file, &e) => {
            return ls_survey(file, as_json, e)
        }
        Err(e) => return Err(e),
    };
    // Progress on standard error, cleared around each write to standard output and before the
    // totals line.
    let bar = Bar::new(ui, "listing");
    let tensors = match prefix {
        Some(p) => store.scan_prefix(&os_bytes(&p.to_os_string()))?,
        None if bar.visible() => store.scan_with_progress(&bar)?,
        None => store.scan(b"")?,
    };
    let locate = |t: &TensorInfo| -> Result<Located> {
        if long {
            Located::of(&*store, &t.name)
        } else {
            Ok(Located::default())
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
                None => write_json_info(&mut out, &t, long.then_some(&loc)).map_err(stdout_err)?,
                Some(f) => {
                    // The object with "file" as its first member.
                    row.clear();
                    write_json_info(&mut row, &t, long.then_some(&loc)).map_err(stdout_err)?;
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
    // The window's rows: each tensor's, then (`--long`) one for each of its stored slices.
    let mut window = Vec::new();
    let mut last = LsRow::default();
    for t in tensors.by_ref().take(LS_WIDTH_WINDOW) {
        last.set(&t);
        let slices = if long {
            last.locate(&locate(&t)?)
        } else {
            Vec::new()
        };
        window.push(last.clone());
        window.extend(slices);
    }
    let table = LsTable::new(&window, columns, super::output::terminal_columns(), colour);
    table.line(&mut out, LS_HEAD, true).map_err(stdout_err)?;
    for row in &window {
        table
            .line(&mut out, row.cells(), false)
            .map_err(stdout_err)?;
    }
    drop(window);
    let mut row = last;
    for t in tensors.by_ref() {
        row.set(&t);
        let slices = if long {
            row.locate(&locate(&t)?)
        } else {
            Vec::new()
        };
        for r in std::iter::once(&row).chain(&slices) {
            table.line(&mut out, r.cells(), false).map_err(stdout_err)?;
        }
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

/// Whether `ls` of `input`, which `open_any` refused with `e`, lists what the directory or
/// prefix holds instead: a local directory that is no input or holds several, or a URL ending
/// in `/` that names no object nor checkpoint.
fn is_survey(input: &Path, e: &Error) -> bool {
    paramdex::interop::is_directory(input)
        && matches!(
            e,
            Error::UnrecognizedFormat {
                looks_like: None,
                ..
            } | Error::InvalidArgument(_)
                | Error::Remote {
                    problem: paramdex::RemoteProblem::NotFound,
                    ..
                }
        )
}

/// `ls DIR/`: each file, object or subdirectory of `dir` with the input it is (the same
/// detection as opening it), or why it is none. A directory holding no input at all is the
/// error `open_any` gave, `refused` (which says where it looked).
fn ls_survey(dir: &Path, as_json: bool, refused: Error) -> Result<ExitCode> {
    let found = paramdex::interop::survey(dir)?;
    if !found.iter().any(|f| f.what.is_ok()) {
        return Err(refused);
    }
    let why = |e: &Error| match e {
        Error::UnrecognizedFormat {
            looks_like: Some(k),
            ..
        } => format!("not read: looks like {k}"),
        Error::UnrecognizedFormat { .. } => "not read".to_string(),
        e => format!("cannot be opened: {e}"),
    };
    let mut out = super::stdout_for(as_json);
    if as_json {
        let rows: Vec<Value> = found
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "path": f.path.to_string_lossy(),
                    "dir": f.is_dir,
                    "size": f.len,
                    "format": f.what.as_ref().ok().map(|x| x.name()),
                    "error": f.what.as_ref().err().map(why),
                })
            })
            .collect();
        write_json(&mut out, &Value::Array(rows)).map_err(stdout_err)?;
    } else {
        let width = found
            .iter()
            .map(|f| f.name.chars().count() + usize::from(f.is_dir))
            .max()
            .unwrap_or(4)
            .max(4);
        writeln!(out, "{HEAD}{:width$}  {:>9}  WHAT{HEAD:#}", "NAME", "SIZE")
            .map_err(stdout_err)?;
        for f in &found {
            let name = if f.is_dir {
                format!("{}/", f.name)
            } else {
                f.name.clone()
            };
            let size = if f.is_dir {
                "-".to_string()
            } else {
                human_bytes(f.len)
            };
            let what = match &f.what {
                Ok(x) => x.name().to_string(),
                Err(e) => format!("{DIM}{}{DIM:#}", why(e)),
            };
            writeln!(out, "{name:width$}  {size:>9}  {what}").map_err(stdout_err)?;
        }
        let inputs = found.iter().filter(|f| f.what.is_ok()).count();
        writeln!(
            out,
            "{} entries, {inputs} of them inputs paramdex reads: {} holds no one input itself",
            found.len(),
            dir.display()
        )
        .map_err(stdout_err)?;
    }
    out.flush().map_err(stdout_err)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::super::output::write_inline;
    use super::*;
    use paramdex::interop::Kind;

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
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data");
        let store = open_any(data.join("tf/basic/v1/model.ckpt")).unwrap();
        let whole = Located::of(&*store, b"layer1/W").unwrap();
        assert!(whole.whole.as_ref().is_some_and(|l| l.crc32c.is_some()));
        assert!(whole.slices.is_empty());
        let store = open_any(data.join("native/v2/sharded/ckpt.index")).unwrap();
        let sliced = Located::of(&*store, b"emb").unwrap();
        assert!(sliced.whole.is_none());
        assert_eq!(sliced.slices.len(), 3);
        let locs = [Located::default(), whole, sliced];
        for t in &cases {
            let mut ours = Vec::new();
            write_json_info(&mut ours, t, None).unwrap();
            let mut theirs = Vec::new();
            write_inline(&mut theirs, &Value::Object(describe(t))).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&theirs)
            );
            for l in &locs {
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
