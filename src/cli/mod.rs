//! Command definitions and dispatch.

mod convert;
mod demo;
mod inspect;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use paramdex::Error;

/// Exit status: an error (I/O, bad arguments to a library call, unreadable input).
pub const EXIT_ERROR: u8 = 1;
/// Exit status: verification found corrupt data or a checksum mismatch.
pub const EXIT_CORRUPT: u8 = 3;
/// Exit status: the named tensor does not exist.
pub const EXIT_NOT_FOUND: u8 = 4;

const EXIT_CODES: &str = "Exit codes: 0 success; 1 error (I/O, unreadable or unsupported input); \
2 invalid command line; 3 corrupt data or checksum mismatch; 4 tensor not found.";

/// paramdex: named-tensor checkpoints. Paddle-format records behind a LevelDB/TensorFlow-format
/// name index, read by name through mmap.
#[derive(Parser, Debug)]
#[command(name = "paramdex", version, about, after_help = EXIT_CODES)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
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
    },
    /// List tensors in name order: name, dtype, shape, LoD levels, bytes.
    Ls {
        /// The file.
        file: PathBuf,
        /// Print one JSON array of {name, dtype, shape, lod, nbytes} objects.
        #[arg(long)]
        json: bool,
        /// Only names starting with this prefix.
        #[arg(long)]
        prefix: Option<OsString>,
    },
    /// Print or extract one tensor.
    Get {
        /// The file.
        file: PathBuf,
        /// The tensor's name (raw bytes on Unix; see --hex).
        name: OsString,
        /// raw: the data bytes exactly (little-endian, row-major); json: metadata and values.
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
    },
    /// Check every block and tensor checksum and the agreement of records and index.
    Verify {
        /// The file.
        file: PathBuf,
        /// Threads for the data checksums (0 = all cores).
        #[arg(long, default_value_t = 0)]
        threads: usize,
    },
    /// Convert any supported input into another format (default: a native paramdex file).
    Convert {
        /// The input (detected by content).
        src: PathBuf,
        /// The output file.
        dst: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Target::Paramdex)]
        to: Target,
        /// Data alignment of native output (power of two, 1..=4096).
        #[arg(long = "align", default_value_t = paramdex::writer::DEFAULT_ALIGNMENT)]
        align: u64,
        /// Compression of native index blocks.
        #[arg(long, value_enum, default_value_t = CompressArg::None)]
        compress: CompressArg,
        /// Index data block size of native output, in bytes.
        #[arg(long = "block-size", default_value_t = paramdex::writer::DEFAULT_BLOCK_SIZE)]
        block_size: usize,
    },
    /// Rebuild a complete file from the records of a torn one (e.g. a writer's temporary file).
    Recover {
        /// The torn file.
        torn: PathBuf,
        /// Where to write the rebuilt file.
        out: PathBuf,
    },
}

/// Output format of `convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// A native paramdex file.
    Paramdex,
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
    /// The data bytes exactly.
    Raw,
    /// Name, dtype, shape, LoD and values as JSON.
    Json,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> paramdex::Result<ExitCode> {
    match cli.command {
        Command::Demo { dir, tensors } => demo::run(dir, tensors),
        Command::Ls { file, json, prefix } => inspect::ls(&file, json, prefix),
        Command::Get {
            file,
            name,
            format,
            output,
            hex,
            limit,
        } => inspect::get(&file, name, hex, format, output, limit),
        Command::Verify { file, threads } => inspect::verify(&file, threads),
        Command::Convert {
            src,
            dst,
            to,
            align,
            compress,
            block_size,
        } => convert::convert(convert::ConvertArgs {
            src: &src,
            dst: &dst,
            to,
            align,
            compress,
            block_size,
        }),
        Command::Recover { torn, out } => inspect::recover(&torn, &out),
    }
}

/// Maps an error to the documented exit status.
pub fn exit_code_for(e: &Error) -> ExitCode {
    ExitCode::from(match e {
        Error::NotFound { .. } => EXIT_NOT_FOUND,
        Error::Corrupt { .. } | Error::ChecksumMismatch { .. } => EXIT_CORRUPT,
        _ => EXIT_ERROR,
    })
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
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
