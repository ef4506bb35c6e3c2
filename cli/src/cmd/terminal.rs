//! The terminal: who is listening (`Ui`: quiet or not), progress bars on standard error
//! (`Bar`), colours (`style`), standard output buffered and cleared around a bar, error lines,
//! and byte counts for people (`human_bytes`). Every command prints through these.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use paramdex::Error;

/// What every command needs to know about the session.
#[derive(Clone, Copy, Debug)]
pub struct Ui {
    /// `--quiet`.
    pub quiet: bool,
}

impl Ui {
    fn show_progress(&self) -> bool {
        !self.quiet && std::io::stderr().is_terminal()
    }

    /// A progress bar counting `total` items (`unit`: "tensors"); hidden off a terminal or with
    /// --quiet.
    pub fn count_bar(&self, total: u64, what: &str, unit: &str) -> ProgressBar {
        if !self.show_progress() {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(total);
        pb.set_style(count_style(unit));
        pb.set_message(what.to_string());
        pb
    }

    /// A bar of the fraction done (percent), for work measured in several units at once;
    /// hidden off a terminal or with --quiet.
    pub fn fraction_bar(&self, total: u64, what: &str) -> ProgressBar {
        if !self.show_progress() {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(total);
        pb.set_style(
            ProgressStyle::with_template("{msg} [{wide_bar}] {percent}% ({elapsed}, {eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        pb.set_message(what.to_string());
        pb
    }

    /// A spinner for work of unknown size; hidden off a terminal or with --quiet.
    pub fn spinner(&self, what: &str) -> ProgressBar {
        if !self.show_progress() {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new_spinner();
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        pb.set_message(what.to_string());
        pb.enable_steady_tick(Duration::from_millis(100));
        pb
    }

    /// Prints a message line on standard output unless --quiet.
    pub fn say(&self, msg: impl std::fmt::Display) -> paramdex::Result<()> {
        if self.quiet {
            return Ok(());
        }
        let mut out = anstream::stdout().lock();
        writeln!(out, "{msg}").map_err(stdout_err)
    }

    /// Prints `paramdex: note: ...` on standard error unless --quiet.
    pub fn note(&self, msg: impl std::fmt::Display) {
        if !self.quiet {
            let s = style::NOTE;
            let _ = writeln!(anstream::stderr().lock(), "paramdex: {s}note:{s:#} {msg}");
        }
    }
}

/// The style of a bar counting items of `unit`.
fn count_style(unit: &str) -> ProgressStyle {
    ProgressStyle::with_template(&format!(
        "{{msg}} [{{wide_bar}}] {{human_pos}}/{{human_len}} {unit} ({{elapsed}}, {{eta}} left)"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// The library's progress reports ([`paramdex::Progress`]) drawn on standard error: a spinner
/// until the first pass starts, then a bar per pass, in the pass's unit (bytes for data
/// written or checked, labelled `what`; tensors, or bytes of an index, for a listing, labelled
/// "listing"). Hidden off a terminal and with --quiet.
pub struct Bar {
    /// The bar drawn now: a spinner, then one bar per pass (replaced whole, so that no frame
    /// mixes two passes).
    pb: std::sync::RwLock<ProgressBar>,
    what: String,
    visible: bool,
}

impl Bar {
    /// A bar for work described by `what` ("writing", "verifying").
    pub fn new(ui: Ui, what: &str) -> Bar {
        let pb = ui.spinner(what);
        Bar {
            visible: !pb.is_hidden(),
            pb: std::sync::RwLock::new(pb),
            what: what.to_string(),
        }
    }

    fn current(&self) -> ProgressBar {
        self.pb.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the bar is drawn (on a terminal, without --quiet): callers give the library a
    /// progress sink only then, so that nothing is counted for nobody.
    pub fn visible(&self) -> bool {
        self.visible
    }

    /// Runs `f` (which writes to the terminal) with the bar cleared, then draws it again.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.current().suspend(f)
    }

    /// Removes the bar from the terminal.
    pub fn finish(&self) {
        self.current().finish_and_clear();
    }
}

impl paramdex::Progress for Bar {
    fn start(&self, total: u64, unit: paramdex::Unit) {
        if !self.visible {
            return;
        }
        let (style, what) = match unit {
            paramdex::Unit::Bytes => (bytes_style(""), self.what.as_str()),
            paramdex::Unit::Tensors => (count_style("tensors"), "listing"),
            paramdex::Unit::IndexBytes => (bytes_style(" of index"), "listing"),
            _ => (count_style(""), self.what.as_str()),
        };
        let next = ProgressBar::new(total)
            .with_style(style)
            .with_message(what.to_string());
        let mut pb = self.pb.write().unwrap_or_else(|p| p.into_inner());
        pb.finish_and_clear();
        *pb = next;
        pb.tick();
    }
    fn advance(&self, n: u64) {
        self.pb.read().unwrap_or_else(|p| p.into_inner()).inc(n);
    }
}

/// The style of a bar counting bytes (`what`: text after the byte counts).
fn bytes_style(what: &str) -> ProgressStyle {
    ProgressStyle::with_template(&format!(
        "{{msg}} [{{wide_bar}}] {{binary_bytes}}/{{binary_total_bytes}}{what} \
         ({{binary_bytes_per_sec}}, {{eta}} left)"
    ))
    .unwrap_or_else(|_| ProgressStyle::default_bar())
    .progress_chars("=> ")
}

/// Styles (anstream strips them when colour is off).
pub mod style {
    use anstyle::{AnsiColor, Style};

    /// Headings.
    pub const HEAD: Style = Style::new().bold();
    /// Dimmed secondary text.
    pub const DIM: Style = Style::new().dimmed();
    /// "error".
    pub const ERROR: Style = AnsiColor::Red.on_default().bold();
    /// "note".
    pub const NOTE: Style = AnsiColor::Yellow.on_default().bold();
    /// Good news.
    pub const GOOD: Style = AnsiColor::Green.on_default().bold();
    /// Differences.
    pub const BAD: Style = AnsiColor::Red.on_default();
    /// dtype names.
    pub const DTYPE: Style = AnsiColor::Cyan.on_default();
}

/// An error writing to standard output.
pub fn stdout_err(e: std::io::Error) -> Error {
    Error::io("writing to standard output", e)
}

/// Standard output for a command's result. JSON goes out byte for byte: serde_json escapes what
/// JSON needs, while anstream, which drops colour when stdout is not a terminal, also strips
/// control characters such as DEL that are legitimate bytes of a name. Text goes through
/// anstream (names in text are escaped by `name::display`).
pub fn stdout_for(json: bool) -> std::io::BufWriter<Box<dyn Write>> {
    let w: Box<dyn Write> = if json {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(anstream::stdout().lock())
    };
    std::io::BufWriter::with_capacity(OUT_BUFFER, w)
}

/// Bytes gathered before a write to standard output: listings of millions of lines go out in
/// few system calls.
const OUT_BUFFER: usize = 64 << 10;

/// Standard output for a listing that may run to millions of lines, and whether to style it.
/// With colour off (off a terminal, NO_COLOR, `--color never`) the bytes go out as written:
/// passing them through anstream only to strip styles that are not there costs more than the
/// listing itself. The caller writes styles only when told to, and text escaped by
/// `name::display` (no control characters), so the output is what `stdout_for(false)` gives.
pub fn listing_stdout() -> (std::io::BufWriter<Box<dyn Write>>, bool) {
    let colour = anstream::AutoStream::choice(&std::io::stdout()) != anstream::ColorChoice::Never;
    let w: Box<dyn Write> = if colour {
        Box::new(anstream::stdout().lock())
    } else {
        Box::new(std::io::stdout().lock())
    };
    (std::io::BufWriter::with_capacity(OUT_BUFFER, w), colour)
}

/// A writer of `out` (buffered standard output, as [`stdout_for`] or [`listing_stdout`] give)
/// that clears `bar` from the terminal around each write it passes on, so that rows and the
/// bar do not mix when both go to one terminal.
pub fn around_bar<'a>(
    out: std::io::BufWriter<Box<dyn Write>>,
    bar: &'a Bar,
) -> std::io::BufWriter<Box<dyn Write + 'a>> {
    struct Around<'a> {
        inner: Box<dyn Write>,
        bar: &'a Bar,
    }
    impl Write for Around<'_> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.bar.suspend(|| self.inner.write(buf))
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.bar.suspend(|| self.inner.flush())
        }
    }
    let capacity = out.capacity();
    // An unused BufWriter holds no bytes: taking its writer back cannot lose output.
    let inner = match out.into_inner() {
        Ok(w) => w,
        Err(e) => e.into_inner().into_parts().0,
    };
    std::io::BufWriter::with_capacity(capacity, Box::new(Around { inner, bar }))
}

/// Prints `paramdex: error: MSG` on standard error.
pub fn print_error(msg: impl std::fmt::Display) {
    let s = style::ERROR;
    let _ = writeln!(anstream::stderr().lock(), "paramdex: {s}error:{s:#} {msg}");
}

/// Prints `paramdex: warning: MSG` on standard error (even with --quiet: something is wrong
/// beside what the command did).
pub fn print_warning(msg: impl std::fmt::Display) {
    let s = style::NOTE;
    let _ = writeln!(
        anstream::stderr().lock(),
        "paramdex: {s}warning:{s:#} {msg}"
    );
}

/// Human-readable byte count (binary units).
pub fn human_bytes(n: u64) -> String {
    let mut s = String::new();
    write_human_bytes(&mut s, n);
    s
}

/// Appends [`human_bytes`] of `n` to `out` (`ls` reuses one buffer for millions of rows).
pub fn write_human_bytes(out: &mut String, n: u64) {
    use std::fmt::Write as _;
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        // Most tensors of a checkpoint with millions are this small: no float formatting.
        super::ls::push_u64(out, n);
        out.push_str(" B");
        return;
    }
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    // Writing to a String cannot fail.
    let _ = if u == 0 {
        write!(out, "{n} B")
    } else {
        write!(out, "{v:.1} {}", UNITS[u])
    };
}
