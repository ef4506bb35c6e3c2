"""paramdex: named tensors by memory map, and a drop-in for ``safetensors``' Python API (every
name of ``safetensors``, ``safetensors.torch``, ``safetensors.numpy`` and the framework modules,
with the same arguments, results and exception types: docs/python.md section 2).

Reading::

    with paramdex.safe_open("model.pdx", framework="np") as f:
        for name in f.keys():
            a = f.get_tensor(name)       # numpy: zero-copy, writable, writes stay private

``safe_open`` opens every input the ``paramdex`` CLI opens, detected by content: paramdex
files, sharded checkpoints (by prefix or ``PREFIX.index``), TensorFlow checkpoints (prefix or
directory), Paddle models and tensor files, safetensors files, ``DIR@STEP`` of a checkpoint
directory, and ``s3://`` URLs.

Writing (``*.safetensors`` names as safetensors files, others as paramdex files; ``format=``
decides): :func:`paramdex.numpy.save_file`, :func:`paramdex.torch.save_file`, the streaming
:class:`Writer`, and :class:`CheckpointManager`.

Errors are :class:`ParamdexError` subclasses chosen by the library's error variant (see
:mod:`paramdex.errors`). The GIL is released while data is read, written or checked, and one
``safe_open`` object may be used by several threads at once.
"""

from __future__ import annotations

import datetime
import os
import threading
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

import numpy as np

from . import _paramdex
from ._convert import (
    apply_picks,
    array_dtypes,
    normalize_index,
    numpy_dtype,
    to_numpy,
    unpack_float4,
    writable_bytes,
)
from . import errors
from .errors import *  # noqa: F403 (the names of errors.__all__, re-exported below)
from .errors import InvalidArgumentError, NotFoundError
from ._safetensors import TensorSpec, deserialize, dtype_code, serialize, serialize_file, strict_index

# The numpy dtype of each paramdex dtype, for the arrays the extension makes (Store.load_array).
_paramdex.set_numpy_dtypes(array_dtypes())

__version__ = _paramdex.__version__

__all__ = [
    "safe_open",
    "SafeOpen",
    "SafeSlice",
    "TensorInfo",
    "VerifyReport",
    "Writer",
    "CheckpointManager",
    "PruneReport",
    "abort_uploads_in_flight",
    "serialize",
    "serialize_file",
    "deserialize",
    "TensorSpec",
    "_safe_open_handle",
    "ShardWriter",
    "merge_shards",
    "new_save_id",
    "list_run",
    *errors.__all__,
]

Name = Union[str, bytes]
_FRAMEWORKS = ("np", "numpy", "pt", "torch", "paddle", "tf", "tensorflow", "flax", "jax", "mlx")
_FRAMEWORK_ALIASES = {"numpy": "np", "torch": "pt", "tensorflow": "tf", "jax": "flax"}
_BACKENDS = ("mmap", "pread")


def _framework(framework: Any) -> str:
    """The canonical name of a ``safe_open`` framework (safetensors' names and aliases)."""
    if not isinstance(framework, str) or framework not in _FRAMEWORKS:
        raise InvalidArgumentError(f"framework {framework} is invalid")
    return _FRAMEWORK_ALIASES.get(framework, framework)


def _check_open_args(framework: str, device: Any, backend: Any) -> None:
    """safetensors' checks of ``safe_open``'s ``backend`` and of a torch ``device``."""
    if backend not in _BACKENDS:
        raise InvalidArgumentError(f'backend "{backend}" is invalid (expected one of: "mmap", "pread")')
    if framework == "pt" and device != "cpu":
        import torch

        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise InvalidArgumentError(f"device {device} is invalid") from None


def abort_uploads_in_flight(timeout: float = 10.0) -> List[Tuple[str, str]]:
    """Aborts every multipart upload of this process in flight (outputs being written to
    ``s3://``), waiting at most ``timeout`` seconds for the stores, and returns ``(url,
    outcome)`` for each: ``"aborted"``, ``"finished"`` (it ended first), ``"timed out"`` or
    ``"failed: ..."``. The writers of aborted uploads raise :class:`RemoteError` and never
    commit. Call it from a SIGTERM handler or a shutdown hook: a process that exits with an
    upload open leaves its parts stored (and billed) until the bucket's lifecycle rule removes
    them, e.g. ``signal.signal(signal.SIGTERM, lambda *_: (abort_uploads_in_flight(),
    sys.exit(143)))``.
    """
    return _paramdex.abort_uploads_in_flight(timeout)


class TensorInfo(NamedTuple):
    """What the index says of a tensor, without reading its data."""

    dtype: str
    """paramdex dtype name (``float32``, ``bfloat16``...; ``string``; opaque TensorFlow types)."""
    shape: Tuple[int, ...]
    nbytes: int
    """Bytes of data (strings: the sum of their lengths)."""
    lod: List[List[int]]
    """Paddle LoD levels (empty elsewhere)."""


class VerifyReport(NamedTuple):
    """What :meth:`SafeOpen.verify` checked."""

    tensors: int
    data_bytes: int
    checksums: int


def _name_out(n: bytes) -> Name:
    """A name as Python sees it: str when it is UTF-8, else the bytes."""
    try:
        return n.decode("utf-8")
    except UnicodeDecodeError:
        return n


def _identity(path: str) -> Optional[Tuple[int, int, int, int]]:
    """(device, inode, size, mtime) of a regular local file, else None."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    import stat as _stat

    if not _stat.S_ISREG(st.st_mode):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _path_in(path: Any) -> str:
    if isinstance(path, bytes):
        return os.fsdecode(path)
    return os.fspath(path)


class SafeOpen:
    """An open store; see :func:`safe_open`. Usable as a context manager; arrays and tensors
    taken from it stay valid after it is closed (they hold the mapping themselves)."""

    def __init__(
        self,
        path: Any,
        framework: str = "np",
        device: Any = "cpu",
        checksums: bool = True,
        *,
        backend: str = "mmap",
        readonly: bool = False,
    ) -> None:
        self._framework = _framework(framework)
        _check_open_args(self._framework, device, backend)
        self._device = device
        self._checksums = bool(checksums)
        self._readonly = bool(readonly)
        # (path, private mapping of that file, uint8 array of the mapping)
        self._cow: Optional[Tuple[str, Any, np.ndarray]] = None
        # Names whose numpy array was a view of that mapping (see _get).
        self._served: set = set()
        p = _path_in(path)
        before = _identity(p)
        try:
            self._store = _paramdex.Store(p)
        except errors.NoSuchFileError as e:
            # safetensors' message (code matches on it); the library's, which also names the
            # checkpoint prefixes looked for, is the cause.
            raise errors.NoSuchFileError(f"No such file or directory: {p}") from e
        # The file the store mapped, when it is certain (unchanged across the open): torch maps
        # that file again by its name (paramdex.torch), and only while it is still this one.
        self._file = before if before is not None and _identity(p) == before else None
        self._torch_files: Dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def _from_bytes(cls, data: Any, framework: str = "np") -> "SafeOpen":
        """A file held in memory (safetensors or paramdex), opened as ``safe_open`` opens one."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"argument 'bytes': '{type(data).__name__}' object cannot be converted to 'PyBytes'")
        f = cls.__new__(cls)
        f._framework = _framework(framework)
        f._device = "cpu"
        f._checksums = True
        f._readonly = False
        f._cow = None
        f._served = set()
        f._store = _paramdex.Store.from_bytes(bytes(data))
        f._file = None
        f._torch_files = {}
        f._lock = threading.Lock()
        return f

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> "SafeOpen":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Lets go of the store (tensors already taken stay valid)."""
        self._store.close()
        with self._lock:
            self._torch_files.clear()
            self._cow = None

    # -- listing ---------------------------------------------------------------------------
    def keys(self) -> List[Name]:
        """Every tensor name, sorted bytewise (str, or bytes for names that are not UTF-8)."""
        return [_name_out(n) for n in self._store.names()]

    def offset_keys(self) -> List[Name]:
        """Every tensor name, in the order of their data in the file (as safetensors'
        ``offset_keys``); names whose data is not one run in a local file come last, by name."""
        names = self.keys()
        where = {}
        for n in names:
            loc = self._store.data_location(n)
            where[n] = (0, loc[0], loc[1]) if loc is not None else (1, "", 0)
        return sorted(names, key=lambda n: where[n])

    def get_tensors(self) -> Dict[Name, Any]:
        """Every tensor, keyed by name, as :meth:`get_tensor` gives them (safetensors 0.8)."""
        return self._get_all()

    def __iter__(self) -> Iterator[Name]:
        return iter(self.keys())

    def __len__(self) -> int:
        return int(self._store.count())

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, (str, bytes)):
            return False
        return self._store.info(name) is not None

    @property
    def format(self) -> str:
        """The format's name (``paramdex``, ``safetensors``, ``tensorflow checkpoint``...)."""
        return self._store.format()

    @property
    def path(self) -> str:
        return self._store.path

    def metadata(self) -> Optional[Dict[str, Any]]:
        """The metadata (typed values: str, int, float, bool, bytes, lists), or None when the
        store has none, as safetensors answers."""
        m = self._store.metadata()
        return m if m else None

    def info(self, name: Name) -> TensorInfo:
        """dtype, shape, nbytes and LoD of tensor ``name`` from the index (no data read)."""
        i = self._store.info(name)
        if i is None:
            self._store.load(name)  # raises NotFoundError with the library's message
            raise NotFoundError(name)  # pragma: no cover
        kind, shape, nbytes, lod = i
        return TensorInfo(kind, tuple(shape), nbytes, [list(level) for level in lod])

    def lod(self, name: Name) -> List[List[int]]:
        """The Paddle LoD of tensor ``name`` (empty when it has none)."""
        return self.info(name).lod

    def verify(self, threads: int = 0) -> VerifyReport:
        """Reads and checks everything the format lets one check (every checksum); raises
        :class:`CorruptError` on damage. ``threads=0``: one per core."""
        return VerifyReport(*self._store.verify(threads))

    # -- reading ---------------------------------------------------------------------------
    def get_tensor(self, name: Name) -> Any:
        """Tensor ``name`` in the framework of this ``safe_open``.

        numpy: where the format stores the tensor as one run of bytes of the local file opened
        (a paramdex, safetensors or Paddle tensor file), a view of a private copy-on-write
        mapping of it (zero-copy and writable; writes never reach the file), or with
        ``readonly=True`` a read-only view of the store's own mapping; else one copy
        (writable). As in safetensors, every array is its own: a tensor asked for again
        comes as a copy, so writes to an earlier array are not seen. torch: see
        :mod:`paramdex.torch` (tensors of one ``safe_open`` share storage, as safetensors')."""
        return self._get(name, self._checksums)

    def _get(self, name: Name, checksums: bool) -> Any:
        if self._framework == "pt":
            kind, shape, data = self._store.load(name, checksums)
            if kind == "bytes":
                return data  # a bytes value, in every framework
            from . import torch as _pt

            return _pt._tensor(self, name, kind, shape, data, self._device)
        # The extension makes numeric arrays itself (numpy's C API: no Python-level view,
        # reshape or dtype lookup per tensor); anything else comes as (kind, shape, data).
        if self._framework != "np" or self._readonly or self._file is None:
            # Read-only views of the store's memory: asked for, or no file of our own to map
            # privately (a checkpoint prefix, a directory, a URL, bytes in memory).
            got = self._store.load_array(name, checksums)
        else:
            # As safetensors' numpy arrays, each one is its own: a tensor already handed out
            # as a view of the private mapping (which its holder may have written) comes
            # again as a copy of the store's bytes.
            key = name.encode() if isinstance(name, str) else bytes(name)
            with self._lock:
                again = key in self._served
                self._served.add(key)
            if again:
                return self._copy_of(name, checksums)
            # Views of the private copy-on-write mapping of the file, once it is made.
            cow = self._cow
            got = self._store.load_array(name, checksums, True, None if cow is None else (cow[0], cow[2]))
        if type(got) is not tuple:
            return got if self._framework == "np" else self._convert(got)
        kind, shape, data = got
        if kind == "bytes":
            return data  # a bytes value, in every framework
        if self._framework == "np":
            if kind == "float4_e2m1fn_x2":
                # numpy has no packed type: ml_dtypes' unpacked float4_e2m1fn, a copy.
                return unpack_float4(to_numpy(kind, shape, data))
            if not self._readonly and not isinstance(data, list) and data.readonly:
                arr = self._private_view(name, kind, shape, data.nbytes)
                if arr is not None:
                    return arr
            return to_numpy(kind, shape, data)
        return self._convert(to_numpy(kind, shape, data))

    def _copy_of(self, name: Name, checksums: bool) -> Any:
        """Tensor ``name`` as a writable numpy array of its own (a copy of the store's bytes)."""
        got = self._store.load_array(name, checksums)
        if type(got) is tuple:
            kind, shape, data = got
            if kind == "bytes":
                return data
            if kind == "float4_e2m1fn_x2":
                return unpack_float4(to_numpy(kind, shape, data))
            got = to_numpy(kind, shape, data)
        return got if got.flags.writeable else np.array(got)

    def _file_run(self, name: Name, nbytes: int) -> Optional[Tuple[str, int, int]]:
        """(path, offset, length) of tensor ``name``'s ``nbytes`` bytes when they are one run
        of the local file the store mapped, else None (a new private mapping of that file, by
        numpy here or torch in :mod:`paramdex.torch`, then holds them without a copy)."""
        loc = self._store.data_location(name)
        if loc is None or self._file is None or loc[2] != nbytes:
            return None
        return loc

    def _private_view(self, name: Name, kind: str, shape: List[int], nbytes: int) -> Optional[np.ndarray]:
        """A writable numpy array of tensor ``name`` over a private (copy-on-write) mapping of
        the file: zero-copy, and a write copies only the pages it touches, never reaching the
        file. None when the tensor's bytes are not one run of the file the store mapped (then
        the caller gives the read-only view)."""
        run = self._file_run(name, nbytes)
        if run is None:
            return None
        path, offset, length = run
        import mmap

        with self._lock:
            if self._cow is not None and self._cow[0] == path:
                mm = self._cow[1]
            else:
                # Only the file the store mapped and checked (the same device, inode, size and
                # mtime before and after it is mapped again), as paramdex.torch does; a tensor
                # in another file of the store (a shard, a Paddle model's parameters) is not.
                if self._cow is not None or _identity(path) != self._file or self._file[2] == 0:
                    return None
                with open(path, "rb") as fh:
                    mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY)
                if _identity(path) != self._file:
                    return None
                # (path, mapping, uint8 array of all of it: load_array views it from now on)
                self._cow = (path, mm, np.frombuffer(mm, dtype=np.uint8))
        if offset + length > len(mm):
            return None
        raw = self._cow[2][offset : offset + length]
        return to_numpy(kind, shape, raw)

    def get_slice(self, name: Name) -> "SafeSlice":
        """A lazy handle on tensor ``name``: index it numpy-style (``[1:3, ..., 0]``) to read
        only that region."""
        return SafeSlice(self, name)

    def _load_all(self, make: Any, threads: int = 0) -> Optional[Dict[Name, Any]]:
        """Every tensor of a paramdex file or sharded checkpoint, in ``keys()`` order, copied in
        parallel (``threads``; 0: one per core) into buffers ``make(kind, shape, nbytes)``
        allocates, each tensor's checksum checked as it is copied, without the GIL. ``make``
        returns (the tensor handed out, a writable C-contiguous numpy array of its bytes).
        Tensors stored in slices come from :meth:`get_tensor`. None for other stores."""
        listed = self._store.native_tensors()
        if listed is None:
            return None
        out: Dict[Name, Any] = {}
        names, bufs, sliced = [], [], []
        for name, kind, shape, nbytes, whole in listed:
            key = _name_out(name)
            if whole:
                out[key], buf = make(kind, shape, nbytes)
                names.append(name)
                bufs.append(buf)
            else:
                out[key] = None
                sliced.append(key)
        self._store.load_into(names, bufs, threads)
        for key in sliced:
            out[key] = self.get_tensor(key)
        return out

    def _get_all(self, threads: int = 0) -> Dict[Name, Any]:
        """``get_tensor`` of every name, in ``keys()`` order. With checksums on, a paramdex file
        or sharded checkpoint is verified first on ``threads`` threads (0: one per core; every
        checksum, the data's included), and its tensors are then handed out without a second
        pass over their data."""
        checked = self._checksums
        if checked and self._store.mapping_range() is not None:
            self._store.verify(threads)
            checked = False
        return {k: self._get(k, checked) for k in self.keys()}

    def _mapping_range(self) -> Optional[Tuple[int, int]]:
        """(first address, end address) of a native file's memory map (tests)."""
        r = self._store.mapping_range()
        return None if r is None else (r[0], r[0] + r[1])

    def _convert(self, arr: np.ndarray) -> Any:
        if self._framework == "np":
            return arr
        if self._framework == "pt":
            from . import torch as _pt

            return _pt._from_numpy(arr, self._device)
        if self._framework == "paddle":
            return _to_paddle(arr, self._device)
        if self._framework == "flax":
            import jax.numpy as jnp

            return jnp.array(arr)
        if self._framework == "mlx":
            import mlx.core as mx

            return mx.array(arr)
        return _to_tf(arr, self._device)


def safe_open(
    path: Any,
    framework: str = "np",
    device: Any = "cpu",
    checksums: bool = True,
    *,
    backend: str = "mmap",
    readonly: bool = False,
) -> SafeOpen:
    """Opens ``path`` (a file, directory, checkpoint prefix, ``DIR@STEP`` or ``s3://`` URL) for
    reading tensors as ``framework`` (``"np"``/``"numpy"``, ``"pt"``/``"torch"``,
    ``"paddle"``, ``"tf"``/``"tensorflow"``, ``"flax"``/``"jax"``, ``"mlx"``), as
    ``safetensors.safe_open``.

    ``get_tensor`` checks each tensor's data checksum where the format has one;
    ``checksums=False`` skips it for tensors stored whole in a paramdex file (no pass over the
    data: the view is handed out as mapped), for files already checked with ``verify()``.
    numpy arrays stored as one run of a local file are zero-copy and writable, over a private
    copy-on-write mapping (writes never reach the file); ``readonly=True`` gives read-only
    views of the store's own mapping instead. ``backend`` (``"mmap"`` or ``"pread"``) is
    checked as safetensors checks it; paramdex always maps local files."""
    return SafeOpen(path, framework=framework, device=device, checksums=checksums, backend=backend, readonly=readonly)


def _safe_open_handle(f: Any, framework: str, device: Any = "cpu", *, backend: str = "mmap") -> SafeOpen:
    """safetensors' ``_safe_open_handle``: opens an open file object (a local file, an fsspec
    file...). A file object naming a local file is opened (mapped) by its name; any other is
    read whole into memory."""
    name = getattr(f, "name", None)
    if not isinstance(name, (str, bytes, os.PathLike)):
        name = getattr(f, "path", None)
    if isinstance(name, (str, bytes, os.PathLike)) and os.path.isfile(name):
        return safe_open(name, framework, device, backend=backend)
    fw = _framework(framework)
    _check_open_args(fw, device, backend)
    if hasattr(f, "seek"):
        f.seek(0)
    out = SafeOpen._from_bytes(f.read(), framework=fw)
    out._device = device
    return out


class SafeSlice:
    """A tensor not read yet; ``slice[...]`` reads only the region indexed (integers, slices
    with any step, ``...``), from whichever stored tensor or slices hold it."""

    def __init__(self, f: SafeOpen, name: Name) -> None:
        self._f = f
        self._name = name
        self._info = f.info(name)
        # Its own handle on the store: the slice keeps working after ``f`` is closed.
        self._store = f._store.share()

    def get_shape(self) -> List[int]:
        return list(self._info.shape)

    def get_dtype(self) -> str:
        """safetensors' dtype code: ``"F32"``, ``"BF16"``, ``"I64"``, ``"BOOL"``... (a dtype
        safetensors lacks keeps its paramdex name; :attr:`dtype` is always that name)."""
        return dtype_code(self._info.dtype)

    @property
    def shape(self) -> Tuple[int, ...]:
        return self._info.shape

    @property
    def dtype(self) -> str:
        return self._info.dtype

    def __len__(self) -> int:
        if not self._info.shape:
            raise TypeError("len() of a 0-d tensor")
        return self._info.shape[0]

    def __getitem__(self, key: Any) -> Any:
        fw = self._f._framework
        if fw in ("pt", "paddle"):
            # As safetensors: the framework's own indexing rules (None adds an axis, a stop
            # past the end is clamped, an index out of range is its IndexError).
            return self._framework_index(key)
        start, lens, picks, drop = strict_index(self._info.shape, key)
        got = self._store.load_region_array(self._name, start, lens)
        arr = apply_picks(got if type(got) is not tuple else to_numpy(*got), picks, drop)
        if fw == "np" and not arr.flags.writeable:
            arr = arr.copy()  # safetensors' slices are writable arrays of their own
        return self._f._convert(arr)

    def _framework_index(self, key: Any) -> Any:
        """``key`` applied by the framework (torch, paddle) to the region it touches: the
        region is read (numpy rules, which clamp and count from the end as torch does), and
        the framework indexes it with the key's own terms relative to the region."""
        shape = self._info.shape
        if not isinstance(key, tuple):
            key = (key,)
        # The region: for the axes the key addresses with ints and positive-step slices,
        # only what they touch; anything else (None, lists, tensors, negative steps) reads
        # the whole axis and leaves the indexing to the framework.
        plain = all(isinstance(k, slice) or k is Ellipsis or (type(k) is int) for k in key)
        if plain and sum(1 for k in key if k is Ellipsis) <= 1 and all(
            not isinstance(k, slice) or k.step is None or (isinstance(k.step, int) and k.step > 0) for k in key
        ):
            try:
                start, lens, picks, drop = normalize_index(shape, key)
            except IndexError:
                start = None
            if start is not None:
                got = self._store.load_region_array(self._name, start, lens)
                arr = apply_picks(got if type(got) is not tuple else to_numpy(*got), picks, drop)
                return self._f._convert(np.array(arr) if not arr.flags.writeable else arr)
        kind, rshape, data = self._store.load(self._name)
        whole = self._f._convert(np.array(to_numpy(kind, rshape, data)))
        return whole[key]


def _to_paddle(arr: np.ndarray, device: str) -> Any:
    import paddle

    if arr.dtype == object:
        raise TypeError("paddle tensors cannot hold strings")
    place = device if device != "cpu" else paddle.CPUPlace()
    name = arr.dtype.name
    if name in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        # Paddle takes no ml_dtypes arrays: through float32, which holds these values exactly.
        return paddle.to_tensor(arr.astype(np.float32), place=place).astype(name)
    if arr.dtype.kind == "c":
        # Paddle's array import takes no complex arrays: real and imaginary parts.
        real = paddle.to_tensor(np.ascontiguousarray(arr.real), place=place)
        imag = paddle.to_tensor(np.ascontiguousarray(arr.imag), place=place)
        return paddle.complex(real, imag)
    if name in ("uint16", "uint32", "uint64"):
        raise TypeError(f"paddle has no {name} tensors")
    return paddle.to_tensor(arr, place=place)


def _to_tf(arr: np.ndarray, device: str) -> Any:
    import tensorflow as tf

    with tf.device(device):
        return tf.convert_to_tensor(arr)


class Writer:
    """Writes a paramdex file one tensor at a time (for models that do not fit in memory).

    The file is written under a temporary name beside ``path`` and renamed into place, after an
    fsync, by :meth:`finish`; used as a context manager, it finishes when the block ends and is
    abandoned (nothing appears under ``path``) when the block raises::

        with paramdex.Writer("model.pdx", metadata={"step": 3}) as w:
            for name, array in arrays():
                w.add(name, array)
    """

    def __init__(
        self,
        path: Any,
        metadata: Optional[Dict[str, Any]] = None,
        alignment: Optional[int] = None,
        sync: bool = True,
        compress: Optional[str] = None,
    ) -> None:
        self._w = _paramdex.NativeWriter(_path_in(path), alignment, sync, compress)
        if metadata:
            self._w.set_metadata(dict(metadata))

    def add(self, name: Name, array: Any, dtype: Optional[str] = None) -> None:
        """Adds one tensor (a numpy array or anything ``numpy.asarray`` takes; torch tensors
        through :mod:`paramdex.torch`). ``dtype`` names the paramdex dtype when the array holds
        raw bits (``"bfloat16"`` for uint16 bits, say). ``bytes`` (or ``bytearray``,
        ``memoryview``) is stored as a bytes value, which ``get_tensor`` gives back as
        ``bytes``."""
        if isinstance(array, (bytes, bytearray, memoryview)):
            self._w.add_bytes(name, bytes(array))
            return
        a, kind, shape = writable_bytes(array)
        if dtype is not None:
            kind = dtype
        self._w.add(name, kind, shape, a)

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        self._w.set_metadata(dict(metadata))

    def finish(self) -> None:
        """Writes the index, fsyncs and renames the file into place."""
        self._w.finish()

    def abort(self) -> None:
        """Abandons the file: nothing is left under its name."""
        self._w.abort()

    def __len__(self) -> int:
        return len(self._w)

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.abort()


def _items(tensors: Dict[Name, Any]) -> List[Tuple[Name, str, List[int], Any]]:
    out: List[Tuple[Name, str, List[int], Any]] = []
    for name, array in tensors.items():
        if isinstance(array, (bytes, bytearray, memoryview)):
            # A bytes value (optimizer state, RNG state), as save_file and Writer.add take it.
            out.append((name, "bytes", [], bytes(array)))
            continue
        if type(array).__module__.startswith("torch"):
            from . import torch as _pt

            a, kind, shape = _pt._writable(array)
        else:
            a, kind, shape = writable_bytes(array)
        out.append((name, kind, shape, a))
    return out


class PruneReport(NamedTuple):
    """What :meth:`CheckpointManager.prune` deleted (or would delete) and kept."""

    deleted: List[int]
    kept: List[int]
    bytes: int


def _seconds(keep_every: Union[None, int, float, datetime.timedelta]) -> Optional[float]:
    if keep_every is None:
        return None
    if isinstance(keep_every, datetime.timedelta):
        return keep_every.total_seconds()
    if isinstance(keep_every, bool) or not isinstance(keep_every, (int, float)):
        raise TypeError(f"keep_every is seconds or a datetime.timedelta, not {type(keep_every).__name__}")
    return float(keep_every)


def _best(keep_best: Optional[Tuple[Any, ...]]) -> Optional[Tuple[str, int, bool]]:
    if keep_best is None:
        return None
    if not isinstance(keep_best, tuple) or len(keep_best) not in (2, 3):
        raise TypeError("keep_best is (metadata key, count) or (metadata key, count, higher_is_better)")
    key, count = keep_best[0], keep_best[1]
    higher = keep_best[2] if len(keep_best) == 3 else True
    if not isinstance(key, str) or isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise TypeError("keep_best is (metadata key: str, count: int >= 0[, higher_is_better: bool])")
    return key, count, bool(higher)


class CheckpointManager:
    """A directory of numbered checkpoints (``DIR/ckpt-STEP``, with TensorFlow's
    ``checkpoint`` state file), saved synchronously or in the background.

    ``tensors`` are dicts of name -> numpy array (or torch tensor). ``restore`` gives a
    :class:`SafeOpen` of a checkpoint.

    The keep policy, applied after each save (the latest checkpoint and any being written are
    never deleted; a checkpoint any rule keeps is kept), the rules of ``paramdex ckpt --prune``:

    - ``keep_last=N``: the N most recent saves (TensorFlow's ``max_to_keep``);
    - ``keep_every_steps=K``: one checkpoint every K steps (the lowest step of each K);
    - ``keep_every=T``: one checkpoint every span of wall time, T in seconds or a
      ``datetime.timedelta`` (the earliest of each span);
    - ``keep_best=(key, count)`` or ``(key, count, higher_is_better)``: the ``count`` best by
      the number ``key`` of their metadata (higher is better unless the third item is False,
      as for a loss).

    No rule keeps everything."""

    def __init__(
        self,
        directory: Any,
        name: str = "ckpt",
        keep_last: Optional[int] = None,
        shards: Optional[int] = None,
        incremental: bool = False,
        max_in_flight: int = 1,
        sync: bool = True,
        keep_every_steps: Optional[int] = None,
        keep_every: Union[None, int, float, datetime.timedelta] = None,
        keep_best: Optional[Tuple[Any, ...]] = None,
        compress: Optional[str] = None,
    ) -> None:
        self._m = _paramdex.CheckpointManager(
            _path_in(directory),
            name,
            keep_last,
            shards,
            incremental,
            max_in_flight,
            sync,
            keep_every_steps,
            _seconds(keep_every),
            _best(keep_best),
            compress,
        )

    def prune(
        self,
        keep_last: Optional[int] = None,
        keep_every_steps: Optional[int] = None,
        keep_every: Union[None, int, float, datetime.timedelta] = None,
        keep_best: Optional[Tuple[Any, ...]] = None,
        dry_run: bool = False,
    ) -> PruneReport:
        """Applies a keep policy now (the rules as the constructor takes them; the manager's
        own policy when none is given; ``ValueError`` when there is none either), as
        ``paramdex ckpt DIR --prune`` does. ``dry_run`` deletes nothing and says what would go."""
        deleted, kept, nbytes = self._m.prune(
            keep_last, keep_every_steps, _seconds(keep_every), _best(keep_best), dry_run
        )
        return PruneReport(list(deleted), list(kept), int(nbytes))

    @property
    def directory(self) -> str:
        return self._m.directory

    def save(self, step: int, tensors: Dict[Name, Any], metadata: Optional[Dict[str, Any]] = None) -> None:
        """Saves ``tensors`` as ``step`` on this thread (after any background save). A value
        that is ``bytes`` (or bytearray, memoryview) is saved as a bytes value (optimizer or RNG
        state), which ``restore`` gives back as ``bytes``. A step whose checkpoint exists is
        refused (:class:`CheckpointError`); ``latest()`` reports every committed step, so a job
        resuming from it saves later ones."""
        self._m.save(step, _items(tensors), dict(metadata) if metadata else None)

    def save_async(
        self, step: int, tensors: Dict[Name, Any], metadata: Optional[Dict[str, Any]] = None
    ) -> float:
        """Copies ``tensors`` (arrays, and ``bytes`` values as :meth:`save` takes them) and
        returns; a background thread saves them as ``step``. Returns
        the seconds this call was blocked (waiting for a slot and copying). A failure is
        raised by the next call (:class:`BackgroundSaveError`)."""
        blocked, captured = self._m.save_async(step, _items(tensors), dict(metadata) if metadata else None)
        return blocked + captured

    def wait(self) -> None:
        """Waits for every background save; raises the first failure not yet reported."""
        self._m.wait()

    def steps(self) -> List[int]:
        return list(self._m.steps())

    def latest(self) -> int:
        """The latest step (:class:`CheckpointError` when there is none)."""
        return int(self._m.latest())

    def restore(self, step: Optional[int] = None, framework: str = "np", device: str = "cpu") -> SafeOpen:
        """The checkpoint of ``step`` (the latest when None), open for reading."""
        f = SafeOpen.__new__(SafeOpen)
        f._framework = _framework(framework)
        f._device = device
        f._checksums = True
        f._readonly = False
        f._cow = None
        f._store = self._m.restore(step)
        f._file = None  # a checkpoint's files are found by the library: torch tensors are copies
        f._torch_files = {}
        f._lock = threading.Lock()
        return f


# Sharded saves (paramdex/sharded.py): imported last, it uses the helpers above.
from .sharded import ShardWriter, list_run, merge_shards, new_save_id  # noqa: E402
