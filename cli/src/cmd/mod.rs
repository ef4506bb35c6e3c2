//! Command definitions, dispatch, and what every command shares: exit codes, error lines,
//! progress bars, colour.

mod ckpt;
mod convert;
mod demo;
mod diff;
mod get;
mod index;
mod interrupt;
mod ls;
mod meta;
mod numbers;
mod output;
mod rename;
mod shards;
mod stat;
mod terminal;
mod verify;

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use paramdex::Error;

pub use terminal::{
    around_bar, human_bytes, listing_stdout, print_error, print_warning, stdout_err, stdout_for,
    style, write_human_bytes, Bar, Ui,
};

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
file, per-variable directory or size-prefixed merged parameter file; a .safetensors file.

Inputs in object storage, read by ranged requests: s3://bucket/key (a native file, a safetensors \
file, a TensorFlow checkpoint by its prefix or its .index, a checkpoint directory s3://bucket/dir \
(its latest) or s3://bucket/dir@STEP) and file:///absolute/path. S3 settings \
come from the AWS_* environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION, \
AWS_ENDPOINT_URL, ...) and from --endpoint-url, --region and --no-sign-request, which win.

Exit codes:
  0  success (diff: the inputs are equal)
  1  error: I/O, unreadable or unsupported input, invalid value
  2  invalid command line
  3  corrupt data or checksum mismatch
  4  tensor not found
  5  diff: the inputs differ

Errors are one line on standard error, `paramdex: error: ...`, except an invalid command line \
(exit 2), reported in full as `error: ...` with the valid values or a suggestion and the usage \
line.

JSON output (every --json, and `get`) is one document: an object's members one per line, \
indented two spaces a level, keys in order; an array holding no objects (a shape, values, LoD) \
on one line, as `[4096, 4096]`; an array of objects one object a line (`ls --json`: one tensor a \
line).

Progress bars (on standard error) and colour appear only on a terminal (colour also obeys \
NO_COLOR and --color); --quiet turns off progress bars and messages.";

/// paramdex: look into, check, compare and convert tensor checkpoints (native paramdex,
/// TensorFlow, Paddle, safetensors).
#[derive(Parser, Debug)]
#[command(name = "paramdex", version, after_help = EXIT_CODES)]
pub struct Cli {
    /// No progress bars and no messages (data output and errors only; `diff`: exit code only).
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    quiet: bool,
    /// When to colour output.
    #[arg(long, global = true, value_enum, default_value_t = ColorArg::Auto, help_heading = GLOBAL)]
    color: ColorArg,
    #[command(flatten)]
    s3: S3Args,
    #[command(subcommand)]
    command: Command,
}

/// The help heading of the options every command takes, after each command's own.
const GLOBAL: &str = "Global options";
/// The help heading of the object-storage options, shown only by the commands whose inputs or
/// outputs may be URLs ([`command`]).
const OBJECT_STORAGE: &str = "Object storage (s3:// inputs and outputs)";
/// The commands that never touch object storage: their help does not show the S3 options.
const LOCAL_ONLY: [&str; 6] = [
    "demo",
    "export-tf",
    "recover",
    "clean-shards",
    "completions",
    "demo-rank",
];

/// The command line as clap parses it and prints its help: [`Cli`], with the object-storage
/// options also on each command that is not in [`LOCAL_ONLY`] (so they come before or after
/// the command's name, and appear in the help of those commands only).
pub fn command() -> clap::Command {
    use clap::Args;
    let s3: Vec<clap::Arg> = S3Args::augment_args(clap::Command::new("s3"))
        .get_arguments()
        .cloned()
        .collect();
    let mut cmd = Cli::command();
    let remote: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| !LOCAL_ONLY.contains(&n.as_str()))
        .collect();
    for name in remote {
        cmd = cmd.mut_subcommand(name, |sub| sub.args(s3.iter().cloned()));
    }
    cmd
}

/// Parses the command line ([`command`]): the object-storage options given after the
/// command's name win over those given before it.
fn parse() -> Result<Cli, clap::Error> {
    use clap::FromArgMatches;
    let mut m = command().try_get_matches()?;
    // Decided by the same rule that gave the command the options ([`command`]), not by asking
    // the matches: clap checks argument ids only in debug builds, so in a release build
    // `try_contains_id` answers Ok for a command without them, and reading the options from its
    // matches then fails ("required argument was not provided: no_sign_request").
    let after = match m.subcommand() {
        Some((name, sub)) if !LOCAL_ONLY.contains(&name) => Some(S3Args::from_arg_matches(sub)?),
        _ => None,
    };
    let mut cli = Cli::from_arg_matches_mut(&mut m)?;
    if let Some(after) = after {
        cli.s3 = S3Args {
            endpoint_url: after.endpoint_url.or(cli.s3.endpoint_url),
            region: after.region.or(cli.s3.region),
            no_sign_request: after.no_sign_request || cli.s3.no_sign_request,
        };
    }
    Ok(cli)
}

/// How `s3://` inputs are reached, over the `AWS_*` environment (which gives the defaults:
/// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION, AWS_ENDPOINT_URL,
/// AWS_ALLOW_HTTP, AWS_SKIP_SIGNATURE).
#[derive(clap::Args, Debug, Clone, Default)]
struct S3Args {
    /// S3 endpoint for s3:// inputs, instead of AWS's [env: AWS_ENDPOINT_URL].
    ///
    /// E.g. http://127.0.0.1:3900 for MinIO or Garage; a plain http:// endpoint is allowed and
    /// reached path-style [env: AWS_ENDPOINT_URL].
    #[arg(long = "endpoint-url", value_name = "URL", help_heading = OBJECT_STORAGE)]
    endpoint_url: Option<String>,
    /// Region of s3:// inputs [env: AWS_REGION].
    #[arg(long, value_name = "REGION", help_heading = OBJECT_STORAGE)]
    region: Option<String>,
    /// Send s3:// requests unsigned, without credentials (public buckets) [env:
    /// AWS_SKIP_SIGNATURE=true].
    #[arg(long = "no-sign-request", help_heading = OBJECT_STORAGE)]
    no_sign_request: bool,
}

impl S3Args {
    /// The library's settings these select (unset: the environment's).
    fn settings(&self) -> paramdex::remote::S3Settings {
        paramdex::remote::S3Settings {
            endpoint: self.endpoint_url.clone(),
            region: self.region.clone(),
            skip_signature: self.no_sign_request.then_some(true),
            allow_http: None,
        }
    }
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
    /// Write a sample checkpoint, read tensors back by name, verify it.
    ///
    /// The sample is transformer-shaped (a small 4-layer model), or N tiny tensors, or a
    /// sharded checkpoint saved by several writer processes.
    #[command(after_help = "Examples:
  paramdex demo
  paramdex demo --dir . --tensors 1000000
  paramdex demo --ranks 4")]
    Demo {
        /// Directory for demo.pdx (default: a temporary directory, removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Write N tiny tensors instead of a small 4-layer model (1 to 10000000, about 240
        /// bytes of file each; refused up front when the directory has less space free).
        #[arg(long, value_name = "N", value_parser = demo::parse_tensors)]
        tensors: Option<u64>,
        /// Instead: R writer processes save one sharded checkpoint (tensor-parallel slices),
        /// merged, then loaded as 3 ranks; then they save the next training step
        /// incrementally (unchanged tensors and slices reused, not written).
        #[arg(long, value_name = "R", conflicts_with = "tensors")]
        ranks: Option<u32>,
    },
    /// List tensors in name order: name, dtype, shape, LoD levels, size; then totals.
    #[command(after_help = "Examples:
  paramdex ls model.safetensors
  paramdex ls ckpt/ --prefix model.layers.0.
  paramdex ls model.pdx --json      (exact names: name_hex for names that are not UTF-8)")]
    Ls {
        /// The inputs (any supported format): several are listed one after the other.
        #[arg(value_name = "FILE", required = true, num_args = 1..)]
        files: Vec<PathBuf>,
        /// Print one JSON array of {name, dtype, shape, lod, nbytes} objects (plus name_hex
        /// for names that are not UTF-8).
        #[arg(long)]
        json: bool,
        /// Only names starting with this prefix.
        #[arg(long)]
        prefix: Option<OsString>,
        /// Also where each tensor's data is: data file, offset, stored CRC32C.
        ///
        /// The data file, the byte offset of the data in it, and the CRC32C stored for it ("-"
        /// for formats without checksums). JSON: data_file, data_offset, crc32c (null where
        /// unknown).
        #[arg(short, long)]
        long: bool,
    },
    /// Print or extract one tensor.
    #[command(after_help = "Examples:
  paramdex get model.safetensors lm_head.weight
  paramdex get model.pdx embed --format npy -o embed.npy
  paramdex get model.pdx embed --slice 0:4,-1 --format text
  paramdex get model.pdx --hex 75cc886265722e62696173   (a name by its bytes, from ls --json)")]
    Get {
        /// The input (any supported format).
        file: PathBuf,
        /// The tensor's name, or several, or a glob pattern (`'model.layers.*.bias'`).
        ///
        /// Raw bytes on Unix; see --hex. In a Paddle merged parameter file, `#K` is also the
        /// K-th record by counter (from 0), unless a tensor is named `#K`. A name that no
        /// tensor has but that holds `*`, `?`, `[` or `{` is a glob pattern (`*` runs across
        /// `/` and `.`), standing for the tensors it matches. Several tensors print as one
        /// JSON array of their objects (or their text blocks); raw and npy take one.
        #[arg(value_name = "NAME", required = true, num_args = 1..)]
        names: Vec<OsString>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = GetFormat::Json)]
        format: GetFormat,
        /// Write to this file instead of standard output (atomically: a complete file or
        /// none; missing directories are created). `-o -` writes to standard output.
        #[arg(short = 'o', long = "output")]
        output: Option<PathBuf>,
        /// NAME is the name's bytes in hex (for names that are not valid UTF-8; see `ls --json`).
        #[arg(long)]
        hex: bool,
        /// At most this many values in json and text output (when there are more, the first
        /// N are shown as a flat list, "truncated" is set and "omitted" counts the others).
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Instead of the values: count, NaN and infinity counts, and min, max, mean and
        /// standard deviation of the finite values (json or text format).
        #[arg(long)]
        stats: bool,
        /// Only this selection, as NumPy's x[...] without the brackets: `0:128,:`, `-1`.
        ///
        /// As NumPy's basic indexing: `0:128,:`, `-1`, `::2`, `...,0` (an integer drops its
        /// axis; negative counts from the end; bounds clamp; steps may be negative). Reads only
        /// the box holding it, from whichever slices hold it (no checksum: `verify` checks
        /// them).
        #[arg(long, value_name = "INDEX", allow_hyphen_values = true)]
        slice: Option<String>,
    },
    /// Summarize a checkpoint: tensors, bytes by dtype, format, metadata.
    ///
    /// Also the index size and blocks, compression, alignment, format version and shards; for
    /// a checkpoint directory, the step it resolved to.
    #[command(after_help = "Examples:
  paramdex stat model.pdx
  paramdex stat train/            (its latest checkpoint; DIR@STEP for another)
  paramdex stat s3://bucket/model.safetensors --json")]
    Stat {
        /// The input (any supported format).
        file: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Check every checksum and that records and index agree.
    ///
    /// Index blocks and tensor data are checked on all cores; formats without checksums are
    /// checked for structure.
    #[command(after_help = "Examples:
  paramdex verify model.pdx
  paramdex verify ckpt/model.ckpt-1000 --json")]
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
    /// Convert any supported input into another format (default: native paramdex).
    ///
    /// Metadata is carried into paramdex and safetensors outputs.
    #[command(after_help = "Examples:
  paramdex convert model.safetensors model.pdx
  paramdex convert train/ model.safetensors --to safetensors --skip-unsupported
  paramdex convert model.pdx ckpt/model --to tf --include 'model.layers.*'
  paramdex convert runs/step-60 hf/ --to safetensors --max-shard-size 5GB \
      --include 'model.*' --strip-prefix model.   (a Hugging Face model directory)")]
    Convert {
        /// The input (any supported format).
        src: PathBuf,
        /// The output: a file, a prefix or a directory by --to, or an s3://bucket/key URL.
        ///
        /// For --to tf: the checkpoint prefix; for --to paddle: DST.pdiparams is written; for
        /// --to paddle-tensor: a file for one tensor, else a directory; for --to paddle-merged:
        /// the file DST, its program beside it. An s3://bucket/key URL writes to object
        /// storage (AWS_* environment variables): a paramdex file streamed by multipart
        /// upload, other formats written locally first and then uploaded; nothing appears
        /// under the key unless the upload completes.
        dst: PathBuf,
        /// Output format.
        #[arg(long, value_enum, default_value_t = Target::Paramdex)]
        to: Target,
        #[command(flatten)]
        layout: LayoutArgs,
        /// Leave out, with a note, tensors the output cannot hold, instead of failing.
        ///
        /// String tensors such as TensorFlow's _CHECKPOINTABLE_OBJECT_GRAPH, TensorFlow types
        /// paramdex does not decode such as a tf.data iterator's variant state; for safetensors
        /// also complex128, LoD tensors and names that are not UTF-8.
        #[arg(long = "skip-unsupported")]
        skip_unsupported: bool,
        /// Copy only tensors whose names match this glob pattern (`*` any run of characters,
        /// `/` and `.` included; `?` one character; `[abc]`; `{a,b}`). Repeatable: any matches.
        #[arg(long, value_name = "PATTERN")]
        include: Vec<String>,
        /// Leave out tensors whose names match this glob pattern (wins over --include).
        /// Repeatable.
        #[arg(long, value_name = "PATTERN")]
        exclude: Vec<String>,
        /// Rename tensors: a name starting with FROM gets TO instead (model.layers.=layers.).
        ///
        /// Repeatable: the first rule that matches a name applies, --rename rules in the order
        /// given, then --strip-prefix ones. Names are selected (--include, --exclude) before
        /// they are renamed. Two tensors given one name is an error naming both.
        #[arg(long, value_name = "FROM=TO")]
        rename: Vec<String>,
        /// Remove this prefix from the names that start with it (a --rename P= rule).
        /// Repeatable.
        #[arg(long = "strip-prefix", value_name = "PREFIX")]
        strip_prefix: Vec<String>,
        /// With --to safetensors: write DST as a Hugging Face model directory
        /// (save_pretrained's layout): DST/model.safetensors, or past this size
        /// DST/model-00001-of-0000N.safetensors files and DST/model.safetensors.index.json.
        ///
        /// SIZE: bytes, or a number with KB, MB, GB (powers of 1000, as transformers) or KiB,
        /// MiB, GiB; 5GB is transformers' default. Each file holds whole tensors in name
        /// order; a tensor larger than SIZE is a file by itself.
        #[arg(long = "max-shard-size", value_name = "SIZE")]
        max_shard_size: Option<String>,
        /// Replace outputs that already exist (without it, convert refuses before doing any
        /// work); the old output is replaced only by a complete new one.
        #[arg(long)]
        force: bool,
    },
    /// Compare two inputs (any formats); exit 0 when equal, 5 when they differ.
    ///
    /// Names only in one, dtype, shape and LoD differences, and for common tensors whether the
    /// bytes are equal, else how many elements differ (those with a NaN or an infinity counted
    /// apart) and the largest absolute difference over pairs of finite numbers.
    #[command(after_help = "Examples:
  paramdex diff a.pdx b.safetensors
  paramdex diff export.pdx master.pdx --atol 1e-2 --rtol 1e-2   (values within a tolerance)")]
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
        /// Absolute tolerance: a, b are equal when |a - b| <= atol + rtol * |b|.
        ///
        /// As numpy.allclose: elements a, b are equal when |a - b| <= atol + rtol * |b|.
        /// Without --atol, --rtol or --equal-nan, elements are equal when their bytes are.
        /// With them, tensors of different numeric dtypes (a bfloat16 export against its
        /// float32 master) are compared too: each element decoded from its own dtype, as f64.
        #[arg(long, value_name = "ATOL", value_parser = tolerance)]
        atol: Option<f64>,
        /// Relative tolerance (times |b|, the element of B).
        #[arg(long, value_name = "RTOL", value_parser = tolerance)]
        rtol: Option<f64>,
        /// With tolerance, a NaN equals a NaN (else a NaN equals nothing).
        #[arg(long = "equal-nan")]
        equal_nan: bool,
    },
    /// Combine several inputs (any formats) into one native file.
    ///
    /// A name in more than one input, or a metadata key with different values, is an error
    /// unless --allow-override (then the later input wins).
    #[command(after_help = "Examples:
  paramdex merge all.pdx model-00001-of-00002.safetensors model-00002-of-00002.safetensors")]
    Merge {
        /// The native file to write (or an s3://bucket/key URL: streamed by multipart upload).
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
        /// Replace OUT if it exists (without it, merge refuses before doing any work); the old
        /// file is replaced only by a complete new one.
        #[arg(long)]
        force: bool,
    },
    /// Show or change typed metadata (string, int, float, bool, bytes, lists).
    ///
    /// Changing it appends a new index and footer to a native file; records are never
    /// rewritten.
    #[command(after_help = "Examples:
  paramdex meta model.pdx
  paramdex meta model.pdx --set step=1000 --set-str run=baseline --unset tmp")]
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
    #[command(
        name = "export-tf",
        after_help = "Examples:
  paramdex export-tf model.pdx ckpt/model   (then tf.train.load_checkpoint('ckpt/model'))"
    )]
    ExportTf {
        /// The native paramdex file.
        file: PathBuf,
        /// The checkpoint prefix to create (PREFIX.index, PREFIX.data-00000-of-00001).
        prefix: PathBuf,
    },
    /// Rebuild a complete file from a torn one.
    ///
    /// A writer's temporary file after a crash (its complete records are kept; the report says
    /// where the torn tail starts), or a file whose `meta --set` was interrupted (then the
    /// previous file is restored exactly). Exit 1, writing nothing, when the input is not a
    /// paramdex file (it says what the input is) or is complete and every checksum matches (it
    /// needs no recovery); 3 when it holds no complete record.
    #[command(after_help = "Examples:
  paramdex recover torn.pdx restored.pdx")]
    Recover {
        /// The torn file.
        torn: PathBuf,
        /// Where to write the rebuilt file.
        out: PathBuf,
    },
    /// Commit a sharded save: check its pending shards, write PREFIX.index.
    ///
    /// The pending shards PREFIX.data-k-of-N.pending are checked against each other (reading
    /// only their indexes), PREFIX.index is written and the shards get their final names. A
    /// crash leaves the previous checkpoint or none, never a partial one.
    #[command(
        name = "merge-shards",
        after_help = "Examples:
  paramdex merge-shards ckpt/model.ckpt-1000
  paramdex merge-shards s3://bucket/run/model.ckpt-1000"
    )]
    MergeShards {
        /// The checkpoint prefix: a path, or s3://bucket/dir/PREFIX (shards uploaded under
        /// their final names; the index is written last).
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
    /// Remove what saves that did not finish left at PREFIX.
    ///
    /// Pending and orphan shards, temporary files; never the committed checkpoint. Not while a
    /// save is running.
    #[command(
        name = "clean-shards",
        after_help = "Examples:
  paramdex clean-shards ckpt/model.ckpt-1000 --dry-run"
    )]
    CleanShards {
        /// The checkpoint prefix (a path, or s3://bucket/dir/PREFIX).
        prefix: PathBuf,
        /// Only list what would be removed.
        #[arg(long = "dry-run")]
        dry_run: bool,
    },
    /// List the checkpoints of a training directory, or prune them.
    ///
    /// Step, size, when saved, metadata, the latest marked `*`: those TensorFlow's `checkpoint`
    /// state file lists and NAME-STEP checkpoints beside it. With --prune, apply a keep policy
    /// (the latest, and a checkpoint being written, are always kept). Any command reads DIR
    /// (its latest) or DIR@STEP. DIR may be an object-store directory, s3://bucket/dir.
    ///
    /// A run of step directories (runs/step-60/, checkpoint-60/, 60/: one DCP or Hugging Face
    /// checkpoint each) is listed step by step, complete or why not, the latest complete one
    /// marked `*` (the rule paramdex.torch.dcp.StorageReader.latest follows).
    #[command(after_help = "Examples:
  paramdex ckpt train/
  paramdex ckpt runs/                (step-60/, step-120/, ...: the latest complete one)
  paramdex ckpt train/ --prune --keep-last 3 --keep-every-steps 10000 --dry-run
  paramdex ckpt train/ --prune --keep-best loss=2 --lower-is-better
  paramdex ls train/@5000          (any command reads DIR@STEP)")]
    Ckpt {
        /// The checkpoint directory (a path, or s3://bucket/dir).
        dir: PathBuf,
        /// The checkpoints' name before -STEP.
        #[arg(long, default_value = "ckpt")]
        name: String,
        /// Delete the checkpoints the --keep-* policy does not keep.
        #[arg(long)]
        prune: bool,
        /// With --prune: only say what would be deleted.
        #[arg(long = "dry-run", requires = "prune")]
        dry_run: bool,
        /// Keep the N most recent saves (the state file's order, as TensorFlow's max_to_keep).
        #[arg(long = "keep-last", value_name = "N", requires = "prune")]
        keep_last: Option<usize>,
        /// Keep one checkpoint every K steps (the lowest step of each K).
        #[arg(long = "keep-every-steps", value_name = "K", requires = "prune")]
        keep_every_steps: Option<u64>,
        /// Keep one checkpoint every span of wall time (90s, 30m, 2h, 1d): the earliest of each.
        #[arg(long = "keep-every", value_name = "DURATION", requires = "prune")]
        keep_every: Option<String>,
        /// Keep the COUNT best by the metadata number KEY (higher is better).
        #[arg(long = "keep-best", value_name = "KEY=COUNT", requires = "prune")]
        keep_best: Option<String>,
        /// With --keep-best: lower is better (a loss).
        #[arg(long = "lower-is-better", requires = "keep_best")]
        lower_is_better: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
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
        /// The earlier checkpoint to save incrementally against.
        #[arg(long)]
        base: Option<PathBuf>,
        /// The training step whose values to save.
        #[arg(long, default_value_t = 1)]
        step: u32,
    },
    /// Print a shell completion script.
    #[command(after_help = "Examples:
  paramdex completions bash > ~/.local/share/bash-completion/completions/paramdex
  paramdex completions zsh > ~/.zfunc/_paramdex")]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// Layout options of native output (`convert`, `merge`). Options, not defaults, so that giving
/// one with a `--to` that is not native is refused ([`check_args`]); the help shows the
/// defaults.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct LayoutArgs {
    // Data alignment of native output.
    #[arg(long = "align", help = format!(
        "Data alignment of native output (power of two, 1..=4096) [default: {}]",
        paramdex::DEFAULT_ALIGNMENT
    ))]
    pub align: Option<u64>,
    // Compression of native output: its tensor data (lossless) or its index blocks (snappy).
    #[arg(
        long,
        value_enum,
        help = "Compression of native output: `lossless` compresses tensor data (byte grouping \
                + zstd, decoded by every reader), `snappy` index blocks [default: none]"
    )]
    pub compress: Option<CompressArg>,
    // Index data block size of native output.
    #[arg(long = "block-size", help = format!(
        "Index data block size of native output, in bytes [default: {}]",
        paramdex::DEFAULT_BLOCK_SIZE
    ))]
    pub block_size: Option<usize>,
}

impl LayoutArgs {
    /// The writer options these select.
    pub fn writer_options(&self) -> paramdex::WriterOptions {
        let default = paramdex::WriterOptions::default();
        paramdex::WriterOptions {
            alignment: self.align.unwrap_or(default.alignment),
            block_size: self.block_size.unwrap_or(default.block_size),
            compression: match self.compress {
                None => default.compression,
                Some(CompressArg::None | CompressArg::Lossless) => paramdex::Compression::None,
                Some(CompressArg::Snappy) => paramdex::Compression::Snappy,
            },
            data_compression: match self.compress {
                Some(CompressArg::Lossless) => paramdex::DataCompression::Lossless,
                _ => default.data_compression,
            },
            ..default
        }
    }

    /// The first layout option given, by its flag.
    fn first_given(&self) -> Option<&'static str> {
        [
            self.align.map(|_| "--align"),
            self.compress.map(|_| "--compress"),
            self.block_size.map(|_| "--block-size"),
        ]
        .into_iter()
        .flatten()
        .next()
    }
}

/// Usage errors clap cannot express by itself: a native layout option with a `--to` that is
/// not native.
fn check_args(cli: &Cli) -> Result<(), clap::Error> {
    let Command::Convert { to, layout, .. } = &cli.command else {
        return Ok(());
    };
    match layout.first_given() {
        Some(flag) if *to != Target::Paramdex => {
            let mut cmd = Cli::command();
            cmd.build();
            let convert = cmd
                .find_subcommand_mut("convert")
                .expect("convert is a subcommand");
            Err(convert.error(
                clap::error::ErrorKind::ArgumentConflict,
                format!(
                    "{flag} sets the layout of native paramdex output; it cannot be used with \
                     --to {}",
                    to.format().name()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// Output format of `convert`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// A native paramdex file.
    Paramdex,
    /// A plain TensorFlow checkpoint (DST.index + DST.data-00000-of-00001).
    Tf,
    /// A Paddle combined parameter file DST.pdiparams, records in bytewise name order, with
    /// their names in DST.pdmodel and DST.json (what Paddle 3 reads in its legacy and default
    /// modes).
    Paddle,
    /// Paddle tensor file(s), as `paddle.base.core.load_dense_tensor` reads them.
    PaddleTensor,
    /// A safetensors file (no complex128, LoD or string tensors; metadata as __metadata__).
    Safetensors,
    /// A Paddle merged parameter file DST: each record after its size as a u64 (read back by
    /// counter, `get DST '#K'`), with its program beside it (DST without extension + .pdmodel).
    PaddleMerged,
    /// A GGUF v3 file (llama.cpp): float32/16, bfloat16, int8..64, float64 and a GGUF
    /// input's ggml block types; a GGUF input's metadata with its value types and order,
    /// other metadata as strings.
    Gguf,
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
            Target::PaddleMerged => OutputFormat::PaddleMerged,
            Target::Gguf => OutputFormat::Gguf,
        }
    }
}

/// Compression of `convert`'s and `merge`'s native output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum CompressArg {
    /// No compression.
    None,
    /// Index blocks with snappy, where it saves at least 12.5 %.
    Snappy,
    /// Tensor data, losslessly (SPEC.md 3.4): each tensor byte-grouped by its dtype and
    /// zstd-coded where that saves at least 1/64 of it (bf16 weights: about 1.45x smaller).
    /// The file is format version 4; every reader decodes.
    Lossless,
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
    /// The same as aligned text lines, for reading.
    Text,
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> paramdex::Result<ExitCode> {
    let ui = Ui { quiet: cli.quiet };
    paramdex::remote::set_s3_settings(cli.s3.settings());
    match cli.command {
        Command::Demo {
            dir,
            ranks: Some(ranks),
            ..
        } => shards::demo(ranks, dir),
        Command::Demo { dir, tensors, .. } => demo::run(ui, dir, tensors),
        Command::Ls {
            files,
            json,
            prefix,
            long,
        } => ls::ls_many(ui, &files, json, prefix, long),
        Command::Get {
            file,
            names,
            format,
            output,
            hex,
            limit,
            stats,
            slice,
        } => get::get(
            &file,
            names,
            get::GetOptions {
                hex,
                format,
                output,
                limit,
                stats,
                slice,
            },
        ),
        Command::Stat { file, json } => stat::stat(ui, &file, json),
        Command::Verify {
            file,
            threads,
            json,
        } => verify::verify(ui, &file, threads, json),
        Command::Convert {
            src,
            dst,
            to,
            layout,
            skip_unsupported,
            include,
            exclude,
            rename,
            strip_prefix,
            max_shard_size,
            force,
        } => convert::convert(
            ui,
            &src,
            &dst,
            convert::ConvertOptions {
                to,
                layout,
                skip_unsupported,
                select: convert::Select { include, exclude },
                rename: rename::Rules::new(&rename, &strip_prefix)?,
                max_shard_size: max_shard_size
                    .as_deref()
                    .map(convert::parse_size)
                    .transpose()?,
                force,
            },
        ),
        Command::Diff {
            a,
            b,
            json,
            ignore_metadata,
            atol,
            rtol,
            equal_nan,
        } => diff::diff(
            ui,
            &a,
            &b,
            json,
            ignore_metadata,
            numbers::Tolerance {
                atol: atol.unwrap_or(0.0),
                rtol: rtol.unwrap_or(0.0),
                equal_nan,
                given: atol.is_some() || rtol.is_some() || equal_nan,
            },
        ),
        Command::Merge {
            out,
            inputs,
            allow_override,
            layout,
            skip_unsupported,
            force,
        } => convert::merge(
            ui,
            &out,
            &inputs,
            allow_override,
            layout,
            skip_unsupported,
            force,
        ),
        Command::Meta {
            file,
            set,
            set_str,
            unset,
            json,
        } => meta::meta(ui, &file, &set, &set_str, &unset, json),
        Command::ExportTf { file, prefix } => convert::export_tf(ui, &file, &prefix),
        Command::Recover { torn, out } => verify::recover(ui, &torn, &out),
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
        Command::Ckpt {
            dir,
            name,
            prune,
            dry_run,
            keep_last,
            keep_every_steps,
            keep_every,
            keep_best,
            lower_is_better,
            json,
        } => {
            let policy = prune.then_some(ckpt::PolicyArgs {
                last: keep_last,
                every_steps: keep_every_steps,
                every: keep_every.as_deref(),
                best: keep_best.as_deref(),
                lower_is_better,
            });
            ckpt::ckpt(ui, &dir, Some(&name), policy, dry_run, json)
        }
        Command::DemoRank {
            prefix,
            rank,
            ranks,
            save,
            base,
            step,
        } => shards::demo_rank(&prefix, rank, ranks, &save, base.as_deref(), step),
        Command::Completions { shell } => {
            let mut out = std::io::stdout().lock();
            clap_complete::generate(shell, &mut command(), "paramdex", &mut out);
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
        // Damage inside a compressed record (SPEC.md 3.4), named by tensor and chunk.
        | Error::Compressed { .. }
        | Error::LimitExceeded { at: Some(_), .. }
        | Error::Slices { .. }
        // A pickle cut short, malformed or past a bound; a refused global is exit 1.
        | Error::Pickle {
            problem:
                paramdex::PickleProblem::Truncated
                | paramdex::PickleProblem::Malformed
                | paramdex::PickleProblem::Limit,
            ..
        }
        // An object shorter than its reader was told (cut short, or replaced by a shorter one
        // without an ETag): corrupt data, as a truncated local file is.
        | Error::Remote {
            problem: paramdex::RemoteProblem::Truncated,
            ..
        }
        | Error::Shard {
            problem:
                paramdex::ShardProblem::Length
                | paramdex::ShardProblem::Identity
                | paramdex::ShardProblem::Count,
            ..
        } => EXIT_CORRUPT,
        // A missing bucket or object, refused credentials, a store that could not answer: an
        // error, as a missing or unreadable local file is (exit 4 is a tensor not found).
        _ => EXIT_ERROR,
    }
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
    let cli = match parse() {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    if let Err(e) = check_args(&cli) {
        return usage_error(e);
    }
    interrupt::watch();
    match cli.color {
        ColorArg::Auto => {}
        ColorArg::Always => anstream::ColorChoice::Always.write_global(),
        ColorArg::Never => anstream::ColorChoice::Never.write_global(),
    }
    let result = run(cli);
    interrupt::settle();
    match result {
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

/// Help and version go to standard output as clap prints them; a usage error goes to standard
/// error whole, as clap renders it (what is wrong, the valid values or a "did you mean" tip, the
/// usage line), with exit status 2.
fn usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_USAGE),
    }
}

/// A tolerance of `diff`: a finite number, at least 0.
fn tolerance(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a finite number >= 0")),
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

#[cfg(test)]
mod exit_tests {
    use super::*;
    use paramdex::RemoteProblem;

    /// Objects cut short are corrupt data (3); every other problem at a URL is an error (1),
    /// as on a disk: the message, not the status, says which.
    #[test]
    fn remote_problems_exit_as_on_a_disk() {
        let status = |p| exit_status(&Error::remote("s3://b/k", p, "x"));
        assert_eq!(status(RemoteProblem::Truncated), EXIT_CORRUPT);
        for p in [
            RemoteProblem::NotFound,
            RemoteProblem::NoSuchBucket,
            RemoteProblem::Denied,
            RemoteProblem::Replaced,
            RemoteProblem::Unavailable {
                status: Some(503),
                retries: 2,
            },
            RemoteProblem::Aborted,
            RemoteProblem::Request,
        ] {
            assert_eq!(status(p), EXIT_ERROR, "{p:?}");
        }
    }
}
