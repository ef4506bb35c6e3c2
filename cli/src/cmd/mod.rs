//! Command definitions, dispatch, and what every command shares: exit codes, error lines,
//! progress bars, colour.

mod convert;
mod demo;
mod diff;
mod inspect;
mod meta;
mod shards;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use paramdex::Error;

/// Exit status: an error (I/O, bad arguments to a library call, unreadable input).
pub const EXIT_ERROR: u8 = 1;
/// Exit status: the command line is invalid.
pub const EXIT_USAGE: u8 = 2;
/// Exit status: verification found corrupt data or a checksum mismatch.
pub const EXIT_CORRUPT: u8 = 3;
/// Exit status: the named tensor does not exist.
pub const EXIT_NOT_FOUND: u8 = 4;
/// Exit status of `diff`: the inputs differ.
pub const EXIT_DIFFER: u8 = 5;

const EXIT_CODES: &str = "\
Inputs (detected by content, not by extension): a native paramdex file; a TensorFlow checkpoint \
(prefix, .index, data file, or its directory); a Paddle model prefix, .pdiparams, single tensor \
file or per-variable directory; a .safetensors file.

Exit codes:
  0  success (diff: the inputs are equal)
  1  error: I/O, unreadable or unsupported input, invalid value
  2  invalid command line
  3  corrupt data or checksum mismatch
  4  tensor not found
  5  diff: the inputs differ

Errors are one line on standard error: `paramdex: error: ...`. Progress bars and colour appear \
only on a terminal (colour also obeys NO_COLOR and --color); --quiet turns off progress bars and \
messages.";

/// paramdex: look into, check, compare and convert tensor checkpoints (native paramdex,
/// TensorFlow, Paddle, safetensors).
#[derive(Parser, Debug)]
#[command(name = "paramdex", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// No progress bars and no messages (data output and errors only; `diff`: exit code only).
    #[arg(short, long, global = true)]
    quiet: bool,
    /// When to colour output.
    #[arg(long, global = true, value_enum, default_value_t = ColorArg::Auto)]
    color: ColorArg,
    #[command(subcommand)]
    command: Command,
}

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ColorArg {
    /// On a terminal, unless NO_COLOR is set.
    Auto,
    /// Always.
    Always,
    /// Never.
    Never,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Write a sample transformer-shaped checkpoint, read tensors back by name, verify it.
    Demo {
        /// Directory for demo.pdx (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Number of tensors to write (default: a small 4-layer model).
        #[arg(long)]
        tensors: Option<u64>,
        /// Instead: R writer processes save one sharded checkpoint (tensor-parallel slices),
        /// merged, then loaded as 3 ranks.
        #[arg(long, value_name = "R", conflicts_with = "tensors")]
        ranks: Option<u32>,
    },
    /// List tensors in name order: name, dtype, shape, LoD levels, size; then totals.
    Ls {
        /// The input (any supported format).
        file: PathBuf,
        /// Print one JSON array of {name, dtype, shape, lod, nbytes} objects (plus name_hex
        /// for names that are not UTF-8).
        #[arg(long)]
        json: bool,
        /// Only names starting with this prefix.
        #[arg(long)]
        prefix: Option<OsString>,
    },
    /// Print or extract one tensor.
    Get {
        /// The input (any supported format).
        file: PathBuf,
        /// The tensor's name (raw bytes on Unix; see --hex).
        name: OsString,
        /// Output format.
        #[arg(long, value_enum, default_value_t = GetFormat::Json)]
        format: GetFormat,
        /// Write to this file instead of standard output.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// NAME is the name's bytes in hex (for names that are not valid UTF-8; see `ls --json`).
        #[arg(long)]
        hex: bool,
        /// At most this many values in JSON output (more are cut, and "truncated" is set).
        #[arg(long, default_value_t = 1000)]
        limit: usize,
        /// Only this region, NumPy style, one item per dimension: `0:128,:` (A:B, A:, :B, :, or
        /// an index); missing trailing dimensions are whole. Reads only those bytes, from
        /// whichever slices hold them (no checksum: `verify` checks them).
        #[arg(long, value_name = "REGION")]
        slice: Option<String>,
    },
    /// Summarize a checkpoint: tensors, bytes by dtype, index size and blocks, compression,
    /// alignment, format version, shards, metadata.
    Stat {
        /// The input (any supported format).
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check every checksum (index blocks, tensor data) and that records and index agree, on
    /// all cores; formats without checksums are checked for structure.
    Verify {
        /// The input (any supported format).
        file: PathBuf,
        /// Threads for the data checksums (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
        /// Print one JSON object: {ok, file, format, tensors, data_bytes, checksums, seconds}, or
        /// {ok: false, file, error, exit_code}.
        #[arg(long)]
        json: bool,
    },
    /// Convert any supported input into another format (default: a native paramdex file).
    /// Metadata is carried into paramdex and safetensors outputs.
    Convert {
        /// The input (any supported format).
        src: PathBuf,
        /// The output (for --to tf: the checkpoint prefix; for --to paddle: DST.pdiparams is
        /// written; for --to paddle-tensor: a file for one tensor, else a directory).
        dst: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Target::Paramdex)]
        to: Target,
        #[command(flatten)]
        layout: LayoutArgs,
        /// Leave out, with a note, tensors the output cannot hold (string tensors such as
        /// TensorFlow's _CHECKPOINTABLE_OBJECT_GRAPH, TensorFlow types paramdex does not
        /// decode such as a tf.data iterator's variant state; for safetensors also complex128, LoD
        /// tensors and names that are not UTF-8) instead of failing.
        #[arg(long = "skip-unsupported")]
        skip_unsupported: bool,
    },
    /// Compare two inputs (any formats): names only in one, dtype, shape and LoD differences,
    /// and for common tensors whether the bytes are equal, else how many elements differ and
    /// the largest absolute difference. Exit code 0 when equal, 5 when they differ.
    Diff {
        /// First input.
        a: PathBuf,
        /// Second input.
        b: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
        /// Do not compare metadata.
        #[arg(long = "ignore-metadata")]
        ignore_metadata: bool,
    },
    /// Combine several inputs (any formats) into one native file. A name in more than one
    /// input, or a metadata key with different values, is an error unless --allow-override
    /// (then the later input wins).
    Merge {
        /// The native file to write.
        out: PathBuf,
        /// The inputs, in order.
        #[arg(required = true, num_args = 1..)]
        inputs: Vec<PathBuf>,
        /// Let later inputs replace tensors and metadata of earlier ones.
        #[arg(long = "allow-override")]
        allow_override: bool,
        #[command(flatten)]
        layout: LayoutArgs,
        /// Leave out, with a note, tensors that are not numeric (native files hold numeric
        /// tensors only): string tensors, and TensorFlow types paramdex does not decode.
        #[arg(long = "skip-unsupported")]
        skip_unsupported: bool,
    },
    /// Show or change typed metadata (string, int, float, bool, bytes, lists). Changing it
    /// appends a new index and footer to a native file; records are never rewritten.
    Meta {
        /// The input (any format to show; a native paramdex file to change).
        file: PathBuf,
        /// Set KEY to VALUE, typed as JSON when VALUE is JSON (12 int, 0.5 float, true bool,
        /// [1,"a"] list, {"hex":"00ff"} bytes, "12" string), else as the string VALUE. Repeatable.
        #[arg(long, value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Set KEY to the string VALUE exactly as written. Repeatable.
        #[arg(long = "set-str", value_name = "KEY=VALUE")]
        set_str: Vec<String>,
        /// Remove KEY. Repeatable.
        #[arg(long, value_name = "KEY")]
        unset: Vec<String>,
        /// Print the metadata as one JSON object (bytes as {"hex": ...}, non-finite floats as
        /// {"float": "NaN"}).
        #[arg(long)]
        json: bool,
    },
    /// Make a native file loadable by TensorFlow as checkpoint PREFIX (hard links, no copy).
    #[command(name = "export-tf")]
    ExportTf {
        /// The native paramdex file.
        file: PathBuf,
        /// The checkpoint prefix to create (PREFIX.index, PREFIX.data-00000-of-00001).
        prefix: PathBuf,
    },
    /// Rebuild a complete file from a torn one: a writer's temporary file after a crash, or a
    /// file whose `meta --set` was interrupted (then the previous file is restored exactly).
    Recover {
        /// The torn file.
        torn: PathBuf,
        /// Where to write the rebuilt file.
        out: PathBuf,
    },
    /// Commit a sharded save: check the pending shards PREFIX.data-k-of-N.pending against each
    /// other (reading only their indexes), write PREFIX.index, give the shards their final
    /// names. A crash leaves the previous checkpoint or none, never a partial one.
    #[command(name = "merge-shards")]
    MergeShards {
        /// The checkpoint prefix.
        prefix: PathBuf,
        /// A tensor whose slices need not cover it (repeatable).
        #[arg(long = "allow-partial", value_name = "NAME")]
        allow_partial: Vec<OsString>,
        /// Every tensor's slices need not cover it.
        #[arg(long = "allow-all-partial")]
        allow_all_partial: bool,
        /// Merge this save (32 hex digits), leaving pending shards of other saves alone.
        #[arg(long)]
        save: Option<String>,
    },
    /// Remove what saves that did not finish left at PREFIX (pending and orphan shards,
    /// temporary files); never the committed checkpoint. Not while a save is running.
    #[command(name = "clean-shards")]
    CleanShards {
        /// The checkpoint prefix.
        prefix: PathBuf,
        /// Only list what would be removed.
        #[arg(long = "dry-run")]
        dry_run: bool,
    },
    /// One rank of `demo --ranks` (run by it).
    #[command(name = "demo-rank", hide = true)]
    DemoRank {
        prefix: PathBuf,
        #[arg(long)]
        rank: u32,
        #[arg(long)]
        ranks: u32,
        #[arg(long)]
        save: String,
    },
    /// Print a shell completion script (e.g. `paramdex completions bash > /etc/bash_completion.d/paramdex`).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Layout options of native output (`convert`, `merge`).
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LayoutArgs {
    /// Data alignment of native output (power of two, 1..=4096).
    #[arg(long = "align", default_value_t = paramdex::DEFAULT_ALIGNMENT)]
    pub align: u64,
    /// Compression of native index blocks.
    #[arg(long, value_enum, default_value_t = CompressArg::None)]
    pub compress: CompressArg,
    /// Index data block size of native output, in bytes.
    #[arg(long = "block-size", default_value_t = paramdex::DEFAULT_BLOCK_SIZE)]
    pub block_size: usize,
}

impl LayoutArgs {
    /// The writer options these select.
    pub fn writer_options(&self) -> paramdex::WriterOptions {
        paramdex::WriterOptions {
            alignment: self.align,
            block_size: self.block_size,
            compression: match self.compress {
                CompressArg::None => paramdex::Compression::None,
                CompressArg::Snappy => paramdex::Compression::Snappy,
            },
            ..paramdex::WriterOptions::default()
        }
    }
}

/// Output format of `convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// A native paramdex file.
    Paramdex,
    /// A plain TensorFlow checkpoint (DST.index + DST.data-00000-of-00001).
    Tf,
    /// A Paddle combined parameter file DST.pdiparams, records in bytewise name order.
    Paddle,
    /// Paddle tensor file(s), as `paddle.base.core.load_dense_tensor` reads them.
    PaddleTensor,
    /// A safetensors file (no complex128, LoD or string tensors; metadata as __metadata__).
    Safetensors,
}

impl Target {
    /// The library's output format.
    pub fn format(self) -> paramdex::interop::OutputFormat {
        use paramdex::interop::OutputFormat;
        match self {
            Target::Paramdex => OutputFormat::Native,
            Target::Tf => OutputFormat::TensorFlow,
            Target::Paddle => OutputFormat::PaddleCombined,
            Target::PaddleTensor => OutputFormat::PaddleTensors,
            Target::Safetensors => OutputFormat::Safetensors,
        }
    }
}

/// Index compression of `convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressArg {
    /// No compression.
    None,
    /// Snappy, where it saves at least 12.5 %.
    Snappy,
}

/// Output format of `get`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum GetFormat {
    /// The data bytes exactly (little-endian, row-major; strings concatenated).
    Raw,
    /// A NumPy .npy file: np.load gives the dtype and shape. numpy has no bfloat16 or float8:
    /// they are written as raw bits (uint16, uint8); view them with ml_dtypes, e.g.
    /// np.load(f).view(ml_dtypes.bfloat16) or .view(ml_dtypes.float8_e4m3fn).
    Npy,
    /// Name, dtype, shape, LoD and values, pretty-printed (NaN and infinities as strings,
    /// complex as [re, im]; at most --limit values).
    Json,
}

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

    /// A progress bar counting bytes; hidden off a terminal or with --quiet.
    pub fn bytes_bar(&self, total: u64, what: &str) -> ProgressBar {
        if !self.show_progress() {
            return ProgressBar::hidden();
        }
        let pb = ProgressBar::new(total);
        pb.set_style(
            ProgressStyle::with_template(
                "{msg} [{bar:32}] {binary_bytes}/{binary_total_bytes} ({binary_bytes_per_sec}, {eta})",
            )
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

/// The library's progress reports ([`paramdex::Progress`]), drawn as an indicatif bar (hidden
/// off a terminal or with --quiet when made by [`Ui::bytes_bar`]).
pub struct Bar(pub ProgressBar);

impl paramdex::Progress for Bar {
    fn start(&self, total: u64, _unit: paramdex::Unit) {
        self.0.set_length(total);
    }
    fn advance(&self, n: u64) {
        self.0.inc(n);
    }
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

/// Runs a parsed command line.
pub fn run(cli: Cli) -> paramdex::Result<ExitCode> {
    let ui = Ui { quiet: cli.quiet };
    match cli.command {
        Command::Demo {
            dir,
            ranks: Some(ranks),
            ..
        } => shards::demo(ranks, dir),
        Command::Demo { dir, tensors, .. } => demo::run(dir, tensors),
        Command::Ls { file, json, prefix } => inspect::ls(&file, json, prefix),
        Command::Get {
            file,
            name,
            format,
            output,
            hex,
            limit,
            slice,
        } => inspect::get(&file, name, hex, format, output, limit, slice),
        Command::Stat { file, json } => inspect::stat(&file, json),
        Command::Verify {
            file,
            threads,
            json,
        } => inspect::verify(ui, &file, threads, json),
        Command::Convert {
            src,
            dst,
            to,
            layout,
            skip_unsupported,
        } => convert::convert(ui, &src, &dst, to, layout, skip_unsupported),
        Command::Diff {
            a,
            b,
            json,
            ignore_metadata,
        } => diff::diff(ui, &a, &b, json, ignore_metadata),
        Command::Merge {
            out,
            inputs,
            allow_override,
            layout,
            skip_unsupported,
        } => convert::merge(ui, &out, &inputs, allow_override, layout, skip_unsupported),
        Command::Meta {
            file,
            set,
            set_str,
            unset,
            json,
        } => meta::meta(ui, &file, &set, &set_str, &unset, json),
        Command::ExportTf { file, prefix } => convert::export_tf(ui, &file, &prefix),
        Command::Recover { torn, out } => inspect::recover(ui, &torn, &out),
        Command::MergeShards {
            prefix,
            allow_partial,
            allow_all_partial,
            save,
        } => shards::merge(
            ui,
            &prefix,
            &allow_partial,
            allow_all_partial,
            save.as_deref(),
        ),
        Command::CleanShards { prefix, dry_run } => shards::clean(ui, &prefix, dry_run),
        Command::DemoRank {
            prefix,
            rank,
            ranks,
            save,
        } => shards::demo_rank(&prefix, rank, ranks, &save),
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut Cli::command(), "paramdex", &mut out);
            out.flush().map_err(stdout_err)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Maps an error to the documented exit status.
pub fn exit_code_for(e: &Error) -> ExitCode {
    ExitCode::from(exit_status(e))
}

fn exit_status(e: &Error) -> u8 {
    match e {
        Error::NotFound { .. } => EXIT_NOT_FOUND,
        // A number read from a file beyond a documented limit is a corrupt (or hostile) file.
        Error::Corrupt { .. }
        | Error::ChecksumMismatch { .. }
        | Error::LimitExceeded { at: Some(_), .. }
        | Error::Slices { .. }
        | Error::Shard {
            problem:
                paramdex::ShardProblem::Length
                | paramdex::ShardProblem::Identity
                | paramdex::ShardProblem::Count,
            ..
        } => EXIT_CORRUPT,
        _ => EXIT_ERROR,
    }
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

/// Prints `paramdex: error: MSG` on standard error.
fn print_error(msg: impl std::fmt::Display) {
    let s = style::ERROR;
    let _ = writeln!(anstream::stderr().lock(), "paramdex: {s}error:{s:#} {msg}");
}

/// The whole program: parses the command line, runs it, reports errors as one line with the
/// documented exit code. Never shows a panic message.
pub fn main() -> ExitCode {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown".into());
        let at = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        print_error(format!(
            "internal error (a bug in paramdex; please report it): {}{at}",
            msg.replace('\n', " ")
        ));
        std::process::exit(i32::from(EXIT_ERROR));
    }));
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    match cli.color {
        ColorArg::Auto => {}
        ColorArg::Always => anstream::ColorChoice::Always.write_global(),
        ColorArg::Never => anstream::ColorChoice::Never.write_global(),
    }
    match run(cli) {
        Ok(code) => code,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            // The reader of our output went away (`paramdex ls big.pdx | head`): not an error.
            ExitCode::SUCCESS
        }
        Err(e) => {
            print_error(&e);
            exit_code_for(&e)
        }
    }
}

/// Help and version go to standard output as clap prints them; a usage error becomes one line.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(EXIT_USAGE)
        }
        _ => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("invalid command line")
                .trim_start_matches("error: ")
                .to_string();
            let usage = text
                .lines()
                .find_map(|l| l.trim().strip_prefix("Usage: "))
                .map(|u| format!(" (usage: {u}; see --help)"))
                .unwrap_or_else(|| " (see paramdex --help)".into());
            print_error(format!("{first}{usage}"));
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// The bytes of a command-line name (Unix: exact bytes; elsewhere: UTF-8).
pub fn os_bytes(s: &OsString) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        s.as_os_str().as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        s.to_string_lossy().into_owned().into_bytes()
    }
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
        inspect::push_u64(out, n);
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
