"""The exceptions paramdex raises.

Every error of the library is a :class:`ParamdexError`; the subclass is chosen by the library's
error variant (never by its message, which is the library's own text):

=========================  =========================================  ======================
class                      library variant                            also a
=========================  =========================================  ======================
NotFoundError              ``NotFound`` (no tensor of that name)      ``KeyError``
CorruptError               ``Corrupt``, ``ChecksumMismatch``,
                           ``Pickle`` (cut short, malformed, a bound)
ParamdexIOError            ``Io`` (an operating-system call failed)   ``OSError``
NoSuchFileError            ``Io`` of a missing file                   ``FileNotFoundError``
RemoteError                ``Remote`` (an object-store request)       ``OSError``
UnrecognizedFormatError    ``UnrecognizedFormat``
UnsupportedError           ``Unsupported``, ``UnsupportedVersion``,
                           ``UnknownDType``, ``Pickle`` (a global
                           outside the allow-list, an opcode not read)
InvalidArgumentError       ``InvalidArgument``, ``InvalidTensor``,    ``ValueError``
                           ``DuplicateName``, ``EmptyName``
LimitExceededError         ``LimitExceeded``
OutputExistsError          ``OutputExists``                           ``FileExistsError``
ShardError                 ``Shard`` (a sharded checkpoint's file)
SliceError                 ``Slices``, ``Sliced``
CheckpointError            ``Checkpoint`` (a checkpoint directory)
BackgroundSaveError        ``BackgroundSave``
ClosedError                (a ``safe_open`` used after ``close``)     ``ValueError``
SliceIndexError            (``get_slice``: an index out of range)     ``IndexError``
SliceTypeError             (``get_slice``: an index of another type)  ``TypeError``
UnsupportedDTypeError      (an array or tensor of a dtype not stored) ``TypeError``
=========================  =========================================  ======================

As a drop-in for ``safetensors``, every class is also a :class:`SafetensorError` (where the
``safetensors`` package is installed, a subclass of its own ``safetensors.SafetensorError``, so
that ``except safetensors.SafetensorError`` catches paramdex's errors too), and a missing file
is a ``FileNotFoundError``, as safetensors raises them.
"""

__all__ = [
    "SafetensorError",
    "ParamdexError",
    "NotFoundError",
    "CorruptError",
    "ParamdexIOError",
    "RemoteError",
    "UnrecognizedFormatError",
    "UnsupportedError",
    "InvalidArgumentError",
    "LimitExceededError",
    "OutputExistsError",
    "ShardError",
    "SliceError",
    "CheckpointError",
    "BackgroundSaveError",
    "NoSuchFileError",
    "ClosedError",
    "SliceIndexError",
    "SliceTypeError",
    "UnsupportedDTypeError",
]

try:  # safetensors' own class, when it is installed: code catching it catches paramdex's too.
    from safetensors import SafetensorError as _SafetensorsBase
except ImportError:  # pragma: no cover - safetensors is not a dependency
    _SafetensorsBase = Exception


class SafetensorError(_SafetensorsBase):  # type: ignore[valid-type,misc]
    """The exception class of ``safetensors`` (``safetensors.SafetensorError``), as paramdex's
    safetensors-compatible API raises it: the base of every paramdex error, and what a slice
    index safetensors refuses raises."""


class ParamdexError(SafetensorError):
    """Any error of the paramdex library; ``str(e)`` is the library's message."""

    def __str__(self) -> str:
        # KeyError (a base of NotFoundError) would show the message quoted.
        return str(self.args[0]) if self.args else ""


class NotFoundError(ParamdexError, KeyError):
    """No tensor of the name asked for."""


class CorruptError(ParamdexError):
    """The file is damaged: a malformed structure or a checksum that does not match."""


class ParamdexIOError(ParamdexError, OSError):
    """An operating-system I/O call failed (a missing file, permissions, a full disk)."""


class NoSuchFileError(ParamdexIOError, FileNotFoundError):
    """The file (or directory) to open does not exist."""


class ClosedError(ParamdexError, ValueError):
    """A ``safe_open`` object was used after it was closed."""


class SliceIndexError(ParamdexError, IndexError):
    """A ``get_slice`` index safetensors refuses: out of range, or more indices than axes."""


class SliceTypeError(ParamdexError, TypeError):
    """A ``get_slice`` index of a type safetensors refuses (``None``, a float, a non-empty
    list...)."""


class RemoteError(ParamdexError, OSError):
    """A request to an object store failed, or its answer is not the object opened."""


class UnrecognizedFormatError(ParamdexError):
    """The input is none of the formats paramdex reads; the message says what it looks like
    where paramdex recognises it (a ``torch.save`` zip, a pickle, a torch DCP checkpoint). Never
    a :class:`CorruptError`: damage is reported only inside a format paramdex reads."""


class UnsupportedError(ParamdexError):
    """The input is valid but uses something this paramdex cannot do."""


class InvalidArgumentError(ParamdexError, ValueError):
    """An argument is outside what is allowed (a tensor inconsistent with its shape, a
    duplicate or empty name, a region outside the tensor)."""


class LimitExceededError(ParamdexError):
    """A number exceeds a documented limit of the format."""


class OutputExistsError(ParamdexError, FileExistsError):
    """The output exists and replacing it was not asked for."""


class ShardError(ParamdexError):
    """A file of a sharded checkpoint is missing or is not the one its index records."""


class SliceError(ParamdexError):
    """The slices of a partitioned tensor do not fit together."""


class CheckpointError(ParamdexError):
    """A checkpoint directory cannot do what was asked (no checkpoint, no such step...)."""


class BackgroundSaveError(ParamdexError):
    """A background save (``CheckpointManager.save_async``) failed."""


class UnsupportedDTypeError(UnsupportedError, TypeError):
    """An array or tensor to write has a dtype paramdex cannot store (numpy ``object``
    arrays, say): a ``SafetensorError``, as safetensors raises it, and a ``TypeError``."""
