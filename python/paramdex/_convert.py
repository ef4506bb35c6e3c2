"""dtype tables and the buffer -> numpy step shared by the framework modules (internal)."""

from __future__ import annotations

import operator
from typing import Any, List, Sequence, Tuple

import numpy as np

try:  # bfloat16 and float8 as real dtypes when ml_dtypes is installed.
    import ml_dtypes as _ml
except ImportError:  # pragma: no cover - exercised only without ml_dtypes
    _ml = None

# paramdex dtype name -> numpy dtype, little-endian as every format stores it.
_NUMPY = {
    "bool": np.dtype("bool"),
    "int8": np.dtype("int8"),
    "uint8": np.dtype("uint8"),
    "int16": np.dtype("<i2"),
    "uint16": np.dtype("<u2"),
    "int32": np.dtype("<i4"),
    "uint32": np.dtype("<u4"),
    "int64": np.dtype("<i8"),
    "uint64": np.dtype("<u8"),
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "complex64": np.dtype("<c8"),
    "complex128": np.dtype("<c16"),
}
# The dtypes numpy has no type of its own for, which ml_dtypes has (one element per byte for the
# sub-byte ones, the value in the low bits, as paramdex stores them; SPEC.md 6).
ML_DTYPES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e4m3b11fnuz",
    "float8_e8m0fnu",
    "int4",
    "uint4",
    "int2",
    "uint2",
    "float4_e2m1fn",
    "float6_e2m3fn",
    "float6_e3m2fn",
)
# Without ml_dtypes (or a type an older ml_dtypes lacks): the raw bits, as unsigned integers of
# the same width.
_RAW = {n: np.dtype("<u2" if n == "bfloat16" else "uint8") for n in ML_DTYPES}
_NUMPY.update(_RAW)
# Packed types (several values per byte; the shape counts bytes): their bytes, as uint8.
for _n in ("float4_e2m1fn_x2", "float6_e2m3fn_x4", "float6_e3m2fn_x4"):
    _NUMPY[_n] = np.dtype("uint8")
if _ml is not None:
    for _n in ML_DTYPES:
        if hasattr(_ml, _n):
            _NUMPY[_n] = np.dtype(getattr(_ml, _n))

# numpy dtype -> paramdex dtype name (for writing).
_FROM_NUMPY = {
    np.dtype("bool"): "bool",
    np.dtype("int8"): "int8",
    np.dtype("uint8"): "uint8",
    np.dtype("int16"): "int16",
    np.dtype("uint16"): "uint16",
    np.dtype("int32"): "int32",
    np.dtype("uint32"): "uint32",
    np.dtype("int64"): "int64",
    np.dtype("uint64"): "uint64",
    np.dtype("float16"): "float16",
    np.dtype("float32"): "float32",
    np.dtype("float64"): "float64",
    np.dtype("complex64"): "complex64",
    np.dtype("complex128"): "complex128",
}
if _ml is not None:
    for _n in ML_DTYPES:
        if hasattr(_ml, _n):
            _FROM_NUMPY[np.dtype(getattr(_ml, _n))] = _n


def array_dtypes() -> List[Tuple[str, np.dtype]]:
    """(paramdex dtype name, numpy dtype) of every dtype whose numpy array is the tensor's bytes
    as they are (what the extension's ``Store.load_array`` builds arrays of): all of
    ``numpy_dtype``'s but the packed float4, which numpy gets unpacked (:func:`unpack_float4`)."""
    return [(k, d) for k, d in _NUMPY.items() if k != "float4_e2m1fn_x2"]


def numpy_dtype(kind: str) -> np.dtype:
    """The numpy dtype paramdex returns for dtype name ``kind``."""
    try:
        return _NUMPY[kind]
    except KeyError:
        raise ValueError(f"paramdex has no numpy dtype for {kind!r}") from None


def paramdex_dtype(dtype: Any, dtype_name: str | None = None) -> str:
    """The paramdex dtype name of numpy dtype ``dtype`` (``dtype_name`` overrides it: raw bits
    written as bfloat16, say)."""
    if dtype_name is not None:
        return dtype_name
    d = np.dtype(dtype)
    name = _FROM_NUMPY.get(d if d.byteorder in "=|" else d.newbyteorder("="))
    if name is None:
        from .errors import UnsupportedDTypeError

        raise UnsupportedDTypeError(f"paramdex cannot store numpy dtype {d}")
    return name


def writable_bytes(array: Any) -> Tuple[np.ndarray, str, List[int]]:
    """(C-contiguous little-endian array, dtype name, shape) of what a writer stores."""
    a = np.asarray(array)
    name = paramdex_dtype(a.dtype)
    if a.dtype.byteorder == ">" or (a.dtype.byteorder == "=" and not _little()):
        a = a.astype(a.dtype.newbyteorder("<"))
    shape = [int(d) for d in a.shape]
    # ascontiguousarray makes a 0-d array 1-d: the shape is taken before.
    a = np.ascontiguousarray(a)
    return a, name, shape


def _little() -> bool:
    import sys

    return sys.byteorder == "little"


def to_numpy(kind: str, shape: Sequence[int], data: Any) -> np.ndarray:
    """The numpy array of a loaded tensor: a view of ``data`` (a paramdex Buffer) when numeric;
    an object array of bytes for strings; the raw bytes (uint8) of opaque TensorFlow types."""
    # The extension hands out shapes as lists of Python ints: tuple() is all reshape needs
    # (a generator of int() per dimension was a tenth of a small tensor's get_tensor).
    shape = tuple(shape)
    if isinstance(data, list):  # strings
        out = np.empty(len(data), dtype=object)
        out[:] = data
        return out.reshape(shape)
    raw = np.asarray(data)  # zero-copy: uint8 view whose base is the Buffer
    dt = _NUMPY.get(kind)
    if dt is None:  # opaque (variant, quantized...): the bytes as stored
        return raw
    return raw.view(dt).reshape(shape)


def unpack_float4(packed: np.ndarray) -> np.ndarray:
    """A ``float4_e2m1fn_x2`` tensor's bytes (two elements a byte, element 2i in the low nibble,
    as torch packs them) as ``ml_dtypes.float4_e2m1fn`` (one element a byte, the value in the
    low bits): a copy, the last axis doubled. Without ml_dtypes, the bytes unchanged."""
    if _ml is None or not hasattr(_ml, "float4_e2m1fn"):
        return packed
    b = np.asarray(packed, dtype=np.uint8)
    if b.ndim == 0:
        b = b.reshape(1)
    out = np.empty(b.shape[:-1] + (2 * b.shape[-1],), dtype=np.uint8)
    out[..., 0::2] = b & 0x0F
    out[..., 1::2] = b >> 4
    return out.view(_ml.float4_e2m1fn)


def normalize_index(shape: Sequence[int], key: Any):
    """Turns a numpy-style basic index into (region start, region lengths, per-axis picks,
    axes to drop). ``picks[i]`` is None (the whole region along axis i) or a list of offsets
    inside the region (steps other than 1)."""
    if not isinstance(key, tuple):
        key = (key,)
    rank = len(shape)
    n_ell = sum(1 for k in key if k is Ellipsis)
    if n_ell > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_ell:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        fill = rank - (len(key) - 1)
        if fill < 0:
            raise IndexError(f"too many indices for a tensor of rank {rank}")
        key = key[:i] + (slice(None),) * fill + key[i + 1 :]
    if len(key) > rank:
        raise IndexError(f"too many indices for a tensor of rank {rank}")
    key = key + (slice(None),) * (rank - len(key))
    start: List[int] = []
    lens: List[int] = []
    picks: List[Any] = []
    drop: List[int] = []
    for axis, (k, dim) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            r = range(*k.indices(dim))
            if len(r) == 0:
                start.append(0)
                lens.append(0)
                picks.append(None)
            elif r.step == 1:
                start.append(r.start)
                lens.append(len(r))
                picks.append(None)
            else:
                lo, hi = min(r[0], r[-1]), max(r[0], r[-1])
                start.append(lo)
                lens.append(hi - lo + 1)
                picks.append([j - lo for j in r])
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise TypeError(
                    f"get_slice indices are integers, slices and '...', not {type(k).__name__}"
                ) from None
            if i < 0:
                i += dim
            if not 0 <= i < dim:
                raise IndexError(f"index {k} is out of bounds for axis {axis} of size {dim}")
            start.append(i)
            lens.append(1)
            picks.append(None)
            drop.append(axis)
    return start, lens, picks, drop


def apply_picks(a: np.ndarray, picks, drop) -> np.ndarray:
    """Applies the strided picks and drops the integer-indexed axes of a region's array."""
    for axis, p in enumerate(picks):
        if p is not None:
            a = np.take(a, p, axis=axis)
    if drop:
        a = a.reshape(tuple(d for i, d in enumerate(a.shape) if i not in drop))
    return a
