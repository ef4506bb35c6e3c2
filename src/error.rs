//! The crate's one error type.
//!
//! Every variant is structured: what was wrong, and where (file offset, tensor name, path).
//! Names are shown with [`crate::name::display`], which escapes bytes that are not UTF-8.
//! Callers decide by variant and by the fields meant for it ([`Corruption`]), never by the
//! message text, which is for people.

use std::io;

use crate::dtype::DType;

/// Result alias used throughout the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in paramdex.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, including the path.
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },

    /// The bytes are not the format they were opened as (bad magic, too short, wrong kind of file).
    ///
    /// Never damage: an input that no format paramdex reads claims is this error, and a
    /// recognisable foreign input (a `torch.save` zip, a pickle, a torch DCP checkpoint) says
    /// so in `looks_like`.
    #[error("{path}: {detail}")]
    UnrecognizedFormat {
        /// The file (or `<memory>`).
        path: String,
        /// What was seen and what it probably is.
        detail: String,
        /// What the input looks like, when it is a format paramdex recognises but does not
        /// read; `None` when nothing more is known than that it is none of paramdex's.
        looks_like: Option<LooksLike>,
    },

    /// A structure inside the file is malformed.
    ///
    /// A paramdex file cut short (or whose end was overwritten), as a write that did not finish
    /// leaves it, is this error of kind [`Corruption::Truncated`], never
    /// [`Error::UnrecognizedFormat`]; [`Error::recoverable`] says when [`crate::recover`] can
    /// rebuild a file from its records.
    #[error("corrupt {what} at offset {offset}: {detail}")]
    Corrupt {
        /// The structure (`footer`, `data block`, `index entry`, `record`...).
        what: &'static str,
        /// Absolute file offset of the structure (or of the bad byte, where known).
        offset: u64,
        /// The kind of damage, for callers that act on it.
        kind: Corruption,
        /// What exactly is wrong, and the context added by [`Error::context`].
        detail: String,
    },

    /// A stored checksum does not match the bytes it covers.
    ///
    /// Shown as `checksum mismatch in WHAT [of tensor NAME] at offset OFFSET (LEN bytes): stored
    /// S, computed C`, or, once [`Error::context`] added a context, as `corrupt WHAT at offset
    /// OFFSET: CONTEXT: checksum mismatch [of tensor NAME] (LEN bytes): stored S, computed C`.
    #[error("{}", checksum_message(what, name.as_deref(), *offset, *len, *stored, *computed, context.as_deref()))]
    ChecksumMismatch {
        /// What the checksum covers (`block`, `tensor data`, ...).
        what: &'static str,
        /// The tensor concerned, if any (displayable form).
        name: Option<String>,
        /// Absolute file offset of the covered bytes.
        offset: u64,
        /// Length of the covered bytes.
        len: u64,
        /// The unmasked checksum stored in the file.
        stored: u32,
        /// The checksum computed over the bytes.
        computed: u32,
        /// Where it happened, as added by [`Error::context`] (a file, a tensor); `None` when the
        /// error comes straight from the layer that found it.
        context: Option<String>,
    },

    /// A number read from a file, or given by a caller, exceeds a documented limit (SPEC.md).
    #[error("{what} is {value}, above the limit of {limit}{}", at.map(|o| format!(" (at offset {o})")).unwrap_or_default())]
    LimitExceeded {
        /// The quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        limit: u64,
        /// File offset, when it came from a file.
        at: Option<u64>,
    },

    /// A dtype number that this format does not define.
    #[error("unknown {system} dtype number {code}{}", location.as_deref().map(|l| format!(" ({l})")).unwrap_or_default())]
    UnknownDType {
        /// Which numbering (`paddle`, `tensorflow`).
        system: &'static str,
        /// The number.
        code: i64,
        /// Where it was found, as far as known: file, tensor, offset (`tensor w`,
        /// `model.pdiparams: tensor w: data_type field at offset 20`).
        location: Option<String>,
    },

    /// A file written by a newer paramdex.
    #[error("{path}: format version {found} is newer than this paramdex supports ({supported})")]
    UnsupportedVersion {
        /// The file.
        path: String,
        /// Version in the file.
        found: u32,
        /// Highest version this build reads.
        supported: u32,
    },

    /// A tensor handed to the writer is inconsistent (shape vs data, LoD vs shape, ...).
    #[error("tensor {name}: {detail}")]
    InvalidTensor {
        /// The tensor (displayable form).
        name: String,
        /// What is inconsistent.
        detail: String,
    },

    /// A typed view ([`crate::TensorView::as_slice`], [`crate::SliceData::as_slice`]) asked for
    /// an element type that the tensor's dtype is not stored as. Nothing was read.
    #[error("tensor {tensor} is {found}, which cannot be viewed as {wanted} (a view of {wanted} reads {})", dtype_list(wanted_dtypes))]
    DTypeMismatch {
        /// The tensor (displayable form).
        tensor: String,
        /// The Rust element type asked for (its `std::any::type_name`).
        wanted: &'static str,
        /// The dtypes that element type views ([`crate::Element::DTYPES`]).
        wanted_dtypes: &'static [DType],
        /// The tensor's dtype.
        found: DType,
    },

    /// A zero-copy typed view needs its data aligned for the element type, and the tensor's
    /// bytes are not: the file was written with an alignment below the type's
    /// (`WriterOptions::alignment`, SPEC.md 2), or the bytes are a region of a tensor that
    /// starts between elements of the wider type. The bytes themselves are fine: copy them
    /// (`data()`) to view them.
    #[error("tensor {tensor} cannot be viewed as {element} in place: its data is aligned to {found} bytes and {element} needs {wanted}; copy it with data()")]
    Misaligned {
        /// The tensor (displayable form).
        tensor: String,
        /// The Rust element type asked for (its `std::any::type_name`).
        element: &'static str,
        /// The alignment the element type needs (`align_of`).
        wanted: usize,
        /// The alignment the data has: the largest power of two, below `wanted`, that its
        /// address is a multiple of.
        found: usize,
    },

    /// A path given as a file names a directory.
    #[error("{path} is a directory, not a file{}", hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    IsADirectory {
        /// The path, as given.
        path: String,
        /// What to do instead, where there is something to say (`None` otherwise).
        hint: Option<&'static str>,
    },

    /// A writer cannot be used any more: an earlier call failed in a way that may have left
    /// its output inconsistent (a write, a sync, a streamed tensor that failed or was dropped
    /// unfinished). Its output is never completed; dropping the writer removes it.
    #[error("writer for {path} is unusable: {}", unusable_message(tensor.as_deref(), why))]
    WriterUnusable {
        /// The output being written.
        path: String,
        /// The streamed tensor ([`crate::TensorWriter`]) that failed or was dropped unfinished,
        /// when that is why (displayable form); `None` when the writer's own I/O failed.
        tensor: Option<String>,
        /// What failed.
        why: String,
    },

    /// A name was added twice to one writer.
    #[error("duplicate tensor name {name}")]
    DuplicateName {
        /// The tensor (displayable form).
        name: String,
    },

    /// The empty name is reserved for the header entry.
    #[error("tensor names must not be empty (the empty key holds the file header)")]
    EmptyName,

    /// A requested tensor does not exist.
    #[error("no tensor named {name} in {path}")]
    NotFound {
        /// The name asked for (displayable form).
        name: String,
        /// The file.
        path: String,
    },

    /// An argument or option is outside what is allowed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The operation cannot be performed on this input (a format limit, not corruption).
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// An output already exists and the caller did not ask to replace it (see
    /// `interop::ExportOptions::overwrite`). Nothing was read or written.
    #[error("{path} already exists; not replacing it")]
    OutputExists {
        /// The existing output (as the caller named it).
        path: String,
    },

    /// The tensor is stored in slices (a partitioned tensor, SPEC.md 13): its bytes are not one
    /// run that a zero-copy view could borrow. `Reader::get_slice` reads any region of it, the
    /// whole tensor included; `TensorStore::load` assembles it.
    #[error("tensor {name} in {path} is stored in {slices} slices: read it with get_slice (any region, the whole tensor included)")]
    Sliced {
        /// The tensor (displayable form).
        name: String,
        /// The file.
        path: String,
        /// How many slices hold it.
        slices: u64,
    },

    /// A file of a sharded checkpoint is missing, is not the file its index records, or was
    /// left behind by a save that did not finish; or the shards of a save cannot be merged
    /// (SPEC.md 12).
    #[error("{path}: {detail}")]
    Shard {
        /// The shard file (or the checkpoint's prefix, when no one file is at fault).
        path: String,
        /// What is wrong, for callers that act on it.
        problem: ShardProblem,
        /// The particulars.
        detail: String,
    },

    /// A request to an object store failed, or its answer is not the object that was opened
    /// (SPEC.md 8.3). Never retried here: the store client retries what can be.
    ///
    /// The message is one line (the server's XML is never in it); the client's own error,
    /// when a request failed, is the `source`: with the `object_store` crate it is an
    /// `object_store::Error`, which callers can reach by downcasting
    /// (`std::error::Error::source(&e)` then `downcast_ref::<object_store::Error>()`).
    #[error("{url}: {detail}")]
    Remote {
        /// The object (its URL).
        url: String,
        /// What went wrong, for callers that act on it.
        problem: RemoteProblem,
        /// The particulars, for people.
        detail: String,
        /// The store client's error, when a request failed (`None` when paramdex found the
        /// answer wrong itself: an object cut short, an upload abandoned).
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
    },

    /// A compressed tensor record (SPEC.md 3.4) that does not decode: a chunk table that breaks
    /// a rule or runs past the record, a decoded length other than the tensor's, a chunk whose
    /// stored bytes do not match their checksum, or a stream that does not decode to its
    /// length. Names the tensor and, where one is at fault, the chunk.
    #[error("tensor {name}: compressed data{} at offset {offset}: {detail}", chunk.map(|c| format!(", chunk {c}")).unwrap_or_default())]
    Compressed {
        /// The tensor (displayable form).
        name: String,
        /// The chunk at fault (from 0), when one is.
        chunk: Option<u64>,
        /// Absolute file offset of the structure at fault (the record's data, a chunk).
        offset: u64,
        /// What is wrong, for callers that act on it.
        problem: CompressedProblem,
        /// The particulars.
        detail: String,
    },

    /// The slices of a tensor do not fit together: they overlap, lie outside its shape,
    /// disagree on dtype or shape, or leave elements without data (SPEC.md 13). The message
    /// names the files that hold the slices at fault.
    #[error("tensor {name}: {detail}")]
    Slices {
        /// The tensor (displayable form).
        name: String,
        /// What is wrong, for callers that act on it.
        problem: SliceProblem,
        /// The particulars, with the files involved.
        detail: String,
    },

    /// A managed checkpoint directory cannot do what was asked: no checkpoint, no such step, a
    /// step already saved, or a `checkpoint` state file that is not one
    /// (`interop::CheckpointManager`).
    #[error("{dir}: {detail}")]
    Checkpoint {
        /// The checkpoint directory.
        dir: String,
        /// What is wrong, for callers that act on it.
        problem: CheckpointProblem,
        /// The particulars.
        detail: String,
    },

    /// A pickle (inside a `torch.save` zip, a Paddle `.pdparams`) that paramdex refuses to
    /// read: it names a global outside the allow-list (nothing is ever called: the restricted
    /// unpickler in `interop::pickle` only builds values), it is cut short or malformed, or it
    /// exceeds one of the unpickler's documented bounds.
    #[error("{path}: pickle at offset {offset}: {detail}")]
    Pickle {
        /// The file (and the entry inside it, for a zip).
        path: String,
        /// Offset of the opcode at fault in the pickle stream.
        offset: u64,
        /// What is wrong, for callers that act on it.
        problem: PickleProblem,
        /// The particulars (a refused global is named here as `module.name`).
        detail: String,
    },

    /// A save that ran in the background failed; reported by the next call on its manager.
    #[error("the background save of step {step} failed: {source}")]
    BackgroundSave {
        /// The step that was being saved.
        step: u64,
        /// Why it failed.
        #[source]
        source: Box<Error>,
    },

    /// A URL (`s3://`, `file://`) was given to a paramdex built without object-storage
    /// support: its `s3` cargo feature (off by default) was not turned on. Nothing was read or
    /// written.
    #[error("{url}: this paramdex was built without object-storage support (URLs need its cargo feature `s3`)")]
    NoObjectStorage {
        /// The URL, as given.
        url: String,
    },
}

// The fallible dtype constructors live here, beside the error they return, so that `dtype`
// (which `Error` names) does not import `error` back.
impl DType {
    /// Like [`DType::from_paddle`] but an error naming the number.
    pub fn try_from_paddle(code: i64) -> Result<DType> {
        Self::from_paddle(code).ok_or(Error::UnknownDType {
            system: "paddle",
            code,
            location: None,
        })
    }

    /// Like [`DType::from_tf`] but an error naming the number.
    pub fn try_from_tf(code: i64) -> Result<DType> {
        Self::from_tf(code).ok_or(Error::UnknownDType {
            system: "tensorflow",
            code,
            location: None,
        })
    }
}

/// What an input that paramdex does not read looks like (see [`Error::UnrecognizedFormat`]):
/// recognised from its first bytes, its name, or (for a directory) the files in it, so that the
/// message can say what it is instead of calling it damaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LooksLike {
    /// A zip archive whose entries are those `torch.save` writes (`NAME/data.pkl`,
    /// `NAME/data/0`, `NAME/version`): a PyTorch checkpoint such as `model.pt` or
    /// `pytorch_model.bin`.
    TorchZip,
    /// Another zip archive (a local file header first, entries not recognised).
    Zip,
    /// A Python pickle (first bytes `80 02` to `80 05`): a legacy `torch.save`, a
    /// `paddle.save` output under another name, or any pickled object.
    Pickle,
    /// A Python pickle named `.pdparams` or `.pdopt`: a Paddle dygraph `state_dict` written by
    /// `paddle.save`.
    PaddlePickle,
    /// A torch.distributed.checkpoint (DCP) checkpoint written by `FileSystemWriter`: a
    /// directory with a `.metadata` pickle and `*.distcp` files, or one of those files.
    TorchDcp,
}

impl std::fmt::Display for LooksLike {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LooksLike::TorchZip => {
                "a zip archive written by torch.save (a PyTorch checkpoint such as model.pt or \
                 pytorch_model.bin)"
            }
            LooksLike::Zip => {
                "a zip archive, e.g. written by torch.save / pytorch_model.bin, or a NumPy .npz"
            }
            LooksLike::Pickle => {
                "a Python pickle, e.g. a legacy torch.save file or a .pdparams/.pdopt written by \
                 paddle.save"
            }
            LooksLike::PaddlePickle => {
                "a Python pickle of a Paddle dygraph state_dict, as paddle.save writes to \
                 .pdparams/.pdopt"
            }
            LooksLike::TorchDcp => {
                "a torch.distributed.checkpoint (DCP) checkpoint written by FileSystemWriter (a \
                 .metadata file and *.distcp files)"
            }
        })
    }
}

/// Why a pickle was refused (see [`Error::Pickle`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PickleProblem {
    /// The pickle names a global (`GLOBAL`, `STACK_GLOBAL`, `INST`) that is not on the
    /// allow-list, or calls an allowed one in a way the format never does. Nothing was run.
    ForbiddenGlobal,
    /// The stream ends before its `STOP`, or a length runs past its end.
    Truncated,
    /// An opcode the unpickler does not implement (protocol 0/1 text forms, extension codes,
    /// out-of-band buffers), or an unknown one.
    UnsupportedOpcode,
    /// The opcodes do not make a value: a stack underflow, a missing mark, a memo index never
    /// stored, an item of the wrong type for its opcode.
    Malformed,
    /// A documented bound of the unpickler is exceeded (stack depth, marks, memo entries,
    /// objects, nesting depth), or a value refers to itself where a tree is needed.
    Limit,
}

/// What is wrong in a managed checkpoint directory (see [`Error::Checkpoint`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckpointProblem {
    /// The directory holds no checkpoint.
    Empty,
    /// No checkpoint of the step asked for.
    NoSuchStep,
    /// A checkpoint of that step exists or is being written.
    StepExists,
    /// The `checkpoint` state file is not a TensorFlow `CheckpointState` in text format.
    StateFile,
}

/// What is wrong with a file of a sharded checkpoint (see [`Error::Shard`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ShardProblem {
    /// The file does not exist.
    Missing,
    /// Its length is not the one the index records.
    Length,
    /// It is a shard of another save, or another shard than expected, or not a shard at all.
    Identity,
    /// A shard number is not below the number of shards, or the shards of a save disagree on
    /// how many there are.
    Count,
    /// Files left by a save that did not finish (pending shards, shards no index refers to)
    /// stand in the way.
    Leftover,
    /// A tensor an incremental save reuses is not what the earlier data file holds under its
    /// name (SPEC.md 12.5).
    Reference,
}

/// What is wrong with a compressed tensor record (see [`Error::Compressed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CompressedProblem {
    /// The layout header or chunk table breaks a rule (an unknown layout, grouping or chunk
    /// size; lengths that do not add up to the record; a table checksum that does not match).
    Table,
    /// The decoded length the record declares is not the tensor's (`numel · element size`).
    Length,
    /// A chunk's stored bytes do not match the checksum the table holds for them.
    Checksum,
    /// A stream does not decode, or decodes to another length than its chunk needs.
    Stream,
}

/// What went wrong with an object in an object store (see [`Error::Remote`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RemoteProblem {
    /// No such object: the bucket exists (or the store did not say which of the two is
    /// missing, as an answer to a HEAD request cannot).
    NotFound,
    /// No such bucket (the store's error code `NoSuchBucket`).
    NoSuchBucket,
    /// The credentials were refused, or they do not allow the request (HTTP 401, 403).
    Denied,
    /// The object changed since it was opened (another ETag).
    Replaced,
    /// The store answered with fewer bytes than asked for.
    Truncated,
    /// The store could not answer: server errors (HTTP 5xx), throttling (429) or a
    /// connection that failed or timed out, still so after the client's retries.
    Unavailable {
        /// The HTTP status of the last answer; `None` when no answer came (a connection
        /// refused, reset or timed out).
        status: Option<u16>,
        /// How many times the request was retried before giving up.
        retries: u32,
    },
    /// The multipart upload was aborted by `remote::abort_uploads_in_flight` (the `s3` feature) (an
    /// interrupt, a program shutting down): nothing appears under the object's name.
    Aborted,
    /// The request failed otherwise (a request the store refused as invalid, a client
    /// misconfigured, an answer that makes no sense).
    Request,
}

/// What is wrong with the slices of a tensor (see [`Error::Slices`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SliceProblem {
    /// Two slices share elements, or two shards both hold the tensor.
    Overlap,
    /// A slice lies outside the tensor's shape.
    OutOfBounds,
    /// Slices disagree on the tensor's dtype or shape, or a tensor is whole in one place and
    /// sliced in another.
    Mismatch,
    /// Some elements are in no slice (a partial tensor) where all were needed.
    Gap,
}

/// The kind of damage an [`Error::Corrupt`] reports: what a caller may act on. The message says
/// the particulars.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Corruption {
    /// The file (or the region being read) ends before the structure does: the bytes were cut
    /// short. A length inside a structure that runs past the structure itself is
    /// [`Corruption::Other`].
    Truncated,
    /// A magic number is wrong: the bytes are probably not this format at all.
    BadMagic,
    /// Any other damage: a malformed encoding, a value out of range, an inconsistency.
    Other,
}

/// The dtypes of [`Error::DTypeMismatch`], as its message lists them.
fn dtype_list(dtypes: &[DType]) -> String {
    let names: Vec<String> = dtypes.iter().map(ToString::to_string).collect();
    names.join(", ")
}

/// The reason of [`Error::WriterUnusable`], with its tensor.
fn unusable_message(tensor: Option<&str>, why: &str) -> String {
    match tensor {
        Some(t) => format!("the streamed tensor {t} failed: {why}"),
        None => why.to_string(),
    }
}

/// The text of [`Error::ChecksumMismatch`] (see the variant).
fn checksum_message(
    what: &str,
    name: Option<&str>,
    offset: u64,
    len: u64,
    stored: u32,
    computed: u32,
    context: Option<&str>,
) -> String {
    let name = name.map(|n| format!(" of tensor {n}")).unwrap_or_default();
    let sums = format!("stored {stored:#010x}, computed {computed:#010x}");
    match context {
        None => {
            format!("checksum mismatch in {what}{name} at offset {offset} ({len} bytes): {sums}")
        }
        Some(ctx) => {
            format!("corrupt {what} at offset {offset}: {ctx}: checksum mismatch{name} ({len} bytes): {sums}")
        }
    }
}

impl Error {
    /// The structure ([`Error::Corrupt`]'s `what`) of a paramdex file that ends without its
    /// index table and footer but starts with whole records: what [`Error::recoverable`] looks
    /// for.
    pub const TORN_FILE: &'static str = "paramdex file (index table missing)";

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// An [`Error::Remote`] that paramdex found itself, with no client error behind it.
    pub fn remote(
        url: impl Into<String>,
        problem: RemoteProblem,
        detail: impl Into<String>,
    ) -> Self {
        Error::Remote {
            url: url.into(),
            problem,
            detail: detail.into(),
            source: None,
        }
    }

    /// Shorthand for [`Error::Corrupt`] of kind [`Corruption::Other`].
    pub fn corrupt(what: &'static str, offset: u64, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what,
            offset,
            kind: Corruption::Other,
            detail: detail.into(),
        }
    }

    /// Shorthand for [`Error::Corrupt`] of kind [`Corruption::Truncated`]: the bytes end before
    /// the structure `what` at `offset` does.
    pub fn truncated(what: &'static str, offset: u64, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what,
            offset,
            kind: Corruption::Truncated,
            detail: detail.into(),
        }
    }

    /// Shorthand for [`Error::LimitExceeded`] on a value read from a file.
    pub fn limit(what: &'static str, value: u64, limit: u64, at: Option<u64>) -> Self {
        Error::LimitExceeded {
            what,
            value,
            limit,
            at,
        }
    }

    /// Whether [`crate::recover`] applies: the error is an [`Error::Corrupt`] of kind
    /// [`Corruption::Truncated`] on a paramdex file that ends without its index table and
    /// footer (cut short, or a write that did not finish: structure [`Error::TORN_FILE`]) and starts
    /// with at least one whole record, which `recover` rebuilds a file from. `false` for every
    /// other error, a file cut inside its first record included (nothing to recover).
    ///
    /// ```
    /// # fn main() -> paramdex::Result<()> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let path = dir.path().join("model.pdx");
    /// # let mut w = paramdex::Writer::create(&path)?;
    /// # w.add_values("w", &[4], &[1.0f32, 2.0, 3.0, 4.0])?;
    /// # w.finish()?;
    /// # let len = std::fs::metadata(&path).unwrap().len();
    /// # std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 10).unwrap();
    /// match paramdex::Reader::open(&path) {
    ///     Err(e) if e.recoverable() => {
    ///         let fixed = dir.path().join("model.recovered.pdx");
    ///         let report = paramdex::recover(&path, &fixed, Default::default())?;
    ///         assert_eq!(report.recovered, 1);
    ///     }
    ///     other => panic!("{:?}", other.err()),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn recoverable(&self) -> bool {
        matches!(
            self,
            Error::Corrupt {
                what,
                kind: Corruption::Truncated,
                ..
            } if *what == Error::TORN_FILE
        )
    }

    /// The kind of damage, for an [`Error::Corrupt`]; `None` for every other variant.
    pub fn corruption(&self) -> Option<Corruption> {
        match self {
            Error::Corrupt { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    /// Says where a lower layer's error happened: prefixes `ctx` (a file, a tensor, an entry)
    /// to the message. Every error keeps its variant and its figures: [`Error::Corrupt`] and
    /// [`Error::UnknownDType`] carry the context in their text, [`Error::Pickle`] before its
    /// path, [`Error::ChecksumMismatch`] in its `context` field (an earlier context stays after
    /// the new one; the same context twice in a row is kept once). Other errors (limits carry
    /// their own offset) pass through unchanged.
    pub fn context(self, ctx: &str) -> Error {
        match self {
            Error::Corrupt {
                what,
                offset,
                kind,
                detail,
            } => Error::Corrupt {
                what,
                offset,
                kind,
                detail: prefix(ctx, Some(detail)),
            },
            Error::UnknownDType {
                system,
                code,
                location,
            } => Error::UnknownDType {
                system,
                code,
                location: Some(prefix(ctx, location)),
            },
            Error::ChecksumMismatch {
                what,
                name,
                offset,
                len,
                stored,
                computed,
                context,
            } => Error::ChecksumMismatch {
                what,
                name,
                offset,
                len,
                stored,
                computed,
                context: Some(prefix(ctx, context)),
            },
            Error::Pickle {
                path,
                offset,
                problem,
                detail,
            } => Error::Pickle {
                path: format!("{ctx}: {path}"),
                offset,
                problem,
                detail,
            },
            other => other,
        }
    }
}

/// `ctx`, then `: ` and an earlier context if there is one. The same context given twice in a
/// row (a layer and its caller both naming the file) is said once.
fn prefix(ctx: &str, earlier: Option<String>) -> String {
    match earlier {
        Some(e) if e == ctx || e.strip_prefix(ctx).is_some_and(|r| r.starts_with(": ")) => e,
        Some(e) => format!("{ctx}: {e}"),
        None => ctx.to_string(),
    }
}

/// Fails with [`Error::LimitExceeded`] when `value` is above `limit` (the check behind every
/// documented limit, SPEC.md 8.1). `at` is the file offset when the value was read from a file,
/// `None` when a caller gave it.
#[inline]
pub(crate) fn ensure_within(
    what: &'static str,
    value: impl Count,
    limit: impl Count,
    at: Option<u64>,
) -> Result<()> {
    let (value, limit) = (value.count(), limit.count());
    if value > limit {
        return Err(Error::limit(what, value, limit, at));
    }
    Ok(())
}

/// An unsigned count or size that widens to `u64` without loss (the types limits are checked
/// on).
pub(crate) trait Count: Copy {
    /// The value as a `u64`.
    fn count(self) -> u64;
}

impl Count for u64 {
    fn count(self) -> u64 {
        self
    }
}

impl Count for u32 {
    fn count(self) -> u64 {
        u64::from(self)
    }
}

impl Count for usize {
    fn count(self) -> u64 {
        // usize is at most 64 bits on every target this crate builds for (memmap2, u64 offsets).
        self as u64
    }
}

/// Extension for attaching a path to I/O results.
pub(crate) trait IoContext<T> {
    /// Maps an I/O error into [`Error::Io`] with `what` and `path` as context.
    fn ctx(self, what: &str, path: &std::path::Path) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, what: &str, path: &std::path::Path) -> Result<T> {
        self.map_err(|e| Error::io(format!("{what} {}", path.display()), e))
    }
}

/// A path as shown in messages.
pub fn path_str(p: &std::path::Path) -> String {
    p.display().to_string()
}

// Errors cross threads (parallel verify, the CLI's worker pools): a compile-time check.
const _: () = {
    const fn send_sync<T: Send + Sync + 'static>() {}
    send_sync::<Error>();
};

#[cfg(test)]
mod tests {
    use super::*;

    fn mismatch() -> Error {
        Error::ChecksumMismatch {
            what: "record header",
            name: Some("w".into()),
            offset: 64,
            len: 30,
            stored: 1,
            computed: 2,
            context: None,
        }
    }

    #[test]
    fn context_keeps_a_checksum_mismatch_a_checksum_mismatch() {
        let plain = mismatch();
        assert_eq!(
            plain.to_string(),
            "checksum mismatch in record header of tensor w at offset 64 (30 bytes): \
             stored 0x00000001, computed 0x00000002"
        );
        let e = mismatch().context("a.pdiparams: tensor w").context("model");
        assert!(
            matches!(
                &e,
                Error::ChecksumMismatch {
                    what: "record header",
                    offset: 64,
                    len: 30,
                    stored: 1,
                    computed: 2,
                    context: Some(c),
                    ..
                } if c == "model: a.pdiparams: tensor w"
            ),
            "{e:?}"
        );
        // The message names what and where, as the context-free one does, plus the context.
        assert_eq!(
            e.to_string(),
            "corrupt record header at offset 64: model: a.pdiparams: tensor w: checksum \
             mismatch of tensor w (30 bytes): stored 0x00000001, computed 0x00000002"
        );
        assert_eq!(e.corruption(), None);
    }

    #[test]
    fn context_keeps_the_corruption_kind() {
        let e = Error::truncated("record", 12, "cut").context("f");
        assert_eq!(e.corruption(), Some(Corruption::Truncated));
        assert_eq!(e.to_string(), "corrupt record at offset 12: f: cut");
        let e = Error::corrupt("record", 12, "bad").context("f");
        assert_eq!(e.corruption(), Some(Corruption::Other));
        let e = Error::limit("tensor rank", 300, 254, Some(9)).context("f");
        assert!(matches!(e, Error::LimitExceeded { at: Some(9), .. }));
        let e = Error::UnknownDType {
            system: "paddle",
            code: 99,
            location: None,
        };
        assert_eq!(
            e.context("t").context("f").to_string(),
            "unknown paddle dtype number 99 (f: t)"
        );
    }

    #[test]
    fn ensure_within_checks_above_the_limit_only() {
        assert!(ensure_within("x", 4usize, 4usize, None).is_ok());
        assert!(ensure_within("x", 0u32, 0u64, None).is_ok());
        let e = ensure_within("tensor rank", 255usize, 254u64, Some(7)).unwrap_err();
        assert!(matches!(
            e,
            Error::LimitExceeded {
                what: "tensor rank",
                value: 255,
                limit: 254,
                at: Some(7)
            }
        ));
        assert_eq!(
            e.to_string(),
            "tensor rank is 255, above the limit of 254 (at offset 7)"
        );
    }
}
