//! The crate's one error type.
//!
//! Every variant is structured: what was wrong, and where (file offset, tensor name, path).
//! Names are shown with [`crate::name::display`], which escapes bytes that are not UTF-8.

use std::io;
use std::path::PathBuf;

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
    #[error("{path}: {detail}")]
    UnrecognizedFormat {
        /// The file (or `<memory>`).
        path: String,
        /// What was seen and what it probably is.
        detail: String,
    },

    /// A structure inside the file is malformed.
    #[error("corrupt {what} at offset {offset}: {detail}")]
    Corrupt {
        /// The structure (`footer`, `data block`, `index entry`, `record`...).
        what: &'static str,
        /// Absolute file offset of the structure (or of the bad byte, where known).
        offset: u64,
        /// What exactly is wrong.
        detail: String,
    },

    /// A stored checksum does not match the bytes it covers.
    #[error(
        "checksum mismatch in {what}{} at offset {offset} ({len} bytes): stored {stored:#010x}, computed {computed:#010x}",
        name.as_deref().map(|n| format!(" of tensor {n}")).unwrap_or_default()
    )]
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
}

impl Error {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    /// Shorthand for [`Error::Corrupt`].
    pub fn corrupt(what: &'static str, offset: u64, detail: impl Into<String>) -> Self {
        Error::Corrupt {
            what,
            offset,
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
}

impl Error {
    /// Says where a lower layer's error happened: prefixes `ctx` (a file, a tensor, an entry)
    /// to the message. Structural errors keep their variant; a block checksum mismatch, whose
    /// variant has no text to carry the context, becomes [`Error::Corrupt`] with the same
    /// figures. Other errors (limits carry their own offset) pass through unchanged.
    pub fn context(self, ctx: &str) -> Error {
        match self {
            Error::Corrupt {
                what,
                offset,
                detail,
            } => Error::Corrupt {
                what,
                offset,
                detail: format!("{ctx}: {detail}"),
            },
            Error::UnknownDType {
                system,
                code,
                location,
            } => Error::UnknownDType {
                system,
                code,
                location: Some(match location {
                    Some(l) => format!("{ctx}: {l}"),
                    None => ctx.to_string(),
                }),
            },

            Error::ChecksumMismatch {
                what,
                name,
                offset,
                len,
                stored,
                computed,
            } => Error::Corrupt {
                what,
                offset,
                detail: format!(
                    "{ctx}: checksum mismatch{} ({len} bytes): stored {stored:#010x}, computed {computed:#010x}",
                    name.map(|n| format!(" of tensor {n}")).unwrap_or_default()
                ),
            },
            other => other,
        }
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

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync + 'static>() {}
    is::<Error>();
    let _ = PathBuf::new();
}
