"""The pieces of safetensors' Python API that are not framework-specific (internal; the names
are re-exported by :mod:`paramdex`): the output format chosen by file name, ``TensorSpec``,
``serialize`` / ``serialize_file`` / ``deserialize``, the dtype codes (``"F32"``...), and
safetensors' slicing rules for ``get_slice`` of numpy and TensorFlow tensors.

Both formats are written by the library (Rust): paramdex files by its native writer,
safetensors files by its safetensors exporter (the ``safetensors`` crate's serializer).
"""

from __future__ import annotations

import ctypes
import os
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _paramdex
from .errors import InvalidArgumentError, SafetensorError, SliceIndexError, SliceTypeError

Name = Union[str, bytes]
#: One tensor to write: (name, paramdex dtype name, shape, C-contiguous little-endian array).
Item = Tuple[Name, str, List[int], np.ndarray]

FORMATS = ("safetensors", "paramdex")

# paramdex dtype name <-> safetensors dtype code ("F32", "BF16", "F8_E4M3"...), from the library.
ST_CODE: Dict[str, str] = {}
for _kind, _ in _paramdex.dtypes():
    _code = _paramdex.safetensors_dtype(_kind)
    if _code is not None:
        ST_CODE[_kind] = _code
FROM_ST_CODE: Dict[str, str] = {v: k for k, v in ST_CODE.items()}


def dtype_code(kind: str) -> str:
    """safetensors' code of paramdex dtype ``kind`` (``"F32"``); a dtype safetensors lacks
    (complex128, strings) keeps its paramdex name."""
    return ST_CODE.get(kind, kind)


def output_format(filename: Any, format: Optional[str]) -> str:
    """The format a file is written in: ``format`` when given, else safetensors for a name
    ending in ``.safetensors`` and paramdex for any other."""
    if format is not None:
        if format not in FORMATS:
            raise ValueError(f"format is one of {', '.join(FORMATS)}, not {format!r}")
        return format
    name = os.fsdecode(filename) if isinstance(filename, bytes) else os.fspath(filename)
    return "safetensors" if str(name).lower().endswith(".safetensors") else "paramdex"


def _check_metadata(metadata: Any) -> Optional[Dict[str, str]]:
    """safetensors' metadata: a dict of str to str (a TypeError otherwise, as safetensors)."""
    if metadata is None:
        return None
    if not isinstance(metadata, dict):
        raise TypeError(f"argument 'metadata': '{type(metadata).__name__}' object is not a dict")
    for k, v in metadata.items():
        for x in (k, v):
            if not isinstance(x, str):
                raise TypeError(f"argument 'metadata': '{type(x).__name__}' object is not an instance of 'str'")
    return metadata


def write(
    items: List[Item],
    filename: Any,
    metadata: Optional[Dict[str, Any]],
    format: Optional[str],
    alignment: Optional[int] = None,
    compress: Optional[str] = None,
) -> None:
    """Writes ``items`` to ``filename`` in the format :func:`output_format` chooses;
    ``compress="lossless"`` compresses a paramdex file's tensor data (SPEC.md 3.4)."""
    fmt = output_format(filename, format)
    path = os.fsdecode(filename) if isinstance(filename, bytes) else os.fspath(filename)
    if fmt == "safetensors" and compress not in (None, "none"):
        raise ValueError(
            f"compress={compress!r} applies to paramdex files; safetensors files are not compressed"
        )
    if fmt == "safetensors":
        _check_names(items)
        _refuse_bytes_values(items)
        _paramdex.write_safetensors(str(path), items, _check_metadata(metadata))
        return
    from . import Writer

    with Writer(path, metadata=metadata, alignment=alignment, compress=compress) as w:
        for name, kind, shape, a in items:
            if kind == "bytes":
                w.add(name, a)  # a bytes value
            else:
                w._w.add(name, kind, shape, a)


def to_bytes(items: List[Item], metadata: Optional[Dict[str, Any]], format: str) -> bytes:
    """The bytes of the file :func:`write` would write in ``format``."""
    if output_format("", format) == "safetensors":
        _check_names(items)
        _refuse_bytes_values(items)
        out = _paramdex.write_safetensors(None, items, _check_metadata(metadata))
        return bytes(out)
    with tempfile.TemporaryDirectory(prefix="paramdex-") as d:
        p = os.path.join(d, "bytes.pdx")
        write(items, p, metadata, "paramdex")
        with open(p, "rb") as f:
            return f.read()


def _refuse_bytes_values(items: List[Item]) -> None:
    """A safetensors file holds tensors only: a bytes value is refused, naming it."""
    for name, kind, *_ in items:
        if kind == "bytes":
            raise ValueError(
                f"{name!r} is a bytes value, which a safetensors file cannot hold: write a paramdex"
                ' file (a name not ending in .safetensors, or format="paramdex")'
            )


def non_contiguous(name: Any) -> ValueError:
    """safetensors' refusal of a non-contiguous tensor (torch, Paddle), word for word."""
    return ValueError(
        f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. It either means you"
        " are trying to save tensors which are reference of each other in which case it's recommended to save"
        " only the full tensors, and reslice at load time, or simply call `.contiguous()` on your tensor to"
        " pack it before saving."
    )


def _check_names(items: List[Item]) -> None:
    for name, *_ in items:
        if not isinstance(name, str):
            raise TypeError(f"argument 'tensor_dict': '{type(name).__name__}' object is not an instance of 'str'")


class TensorSpec:
    """One tensor given to :func:`serialize` by address, as ``safetensors.TensorSpec``:
    ``TensorSpec(dtype="float32", shape=[2, 3], data_ptr=..., data_len=24)``. The caller keeps
    the memory alive during the call. ``dtype`` is the safetensors code (``"F32"``)."""

    __slots__ = ("_dtype", "_shape", "_data_ptr", "_data_len")

    def __init__(self, *, dtype: str, shape: Sequence[int], data_ptr: int, data_len: int) -> None:
        kind = dtype if dtype in ST_CODE else FROM_ST_CODE.get(dtype)
        if kind is None:
            raise SafetensorError(
                f"Unknown dtype {dtype!r}. Supported dtypes: {', '.join(ST_CODE)}"
            )
        self._dtype = ST_CODE[kind]
        shape = [int(d) for d in shape]
        if kind == "float4_e2m1fn_x2" and shape:
            shape[-1] *= 2  # the logical shape counts values, two a byte
        self._shape = shape
        self._data_ptr = int(data_ptr)
        self._data_len = int(data_len)

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def shape(self) -> List[int]:
        return list(self._shape)

    @property
    def data_ptr(self) -> int:
        return self._data_ptr

    @property
    def data_len(self) -> int:
        return self._data_len

    def __repr__(self) -> str:
        return f"TensorSpec(dtype={self._dtype!r}, shape={self._shape}, data_len={self._data_len})"


def _spec_item(name: Any, spec: Any) -> Item:
    """(name, dtype, shape, bytes) of a TensorSpec, or of the dict older safetensors took
    (``{"dtype": ..., "shape": ..., "data": bytes}``)."""
    if isinstance(spec, TensorSpec):
        kind = FROM_ST_CODE[spec.dtype]
        shape = spec.shape
        if kind == "float4_e2m1fn_x2" and shape:
            shape[-1] //= 2
        if spec.data_len:
            buf = ctypes.cast(spec.data_ptr, ctypes.POINTER(ctypes.c_ubyte))
            a = np.ctypeslib.as_array(buf, (spec.data_len,))
        else:
            a = np.empty(0, np.uint8)
        return name, kind, shape, a
    if isinstance(spec, dict) and set(spec) == {"dtype", "shape", "data"}:
        code = spec["dtype"]
        kind = code if code in ST_CODE else FROM_ST_CODE.get(code)
        if kind is None:
            raise SafetensorError(f"Unknown dtype {code!r}")
        data = spec["data"]
        a = np.frombuffer(data, np.uint8) if len(data) else np.empty(0, np.uint8)
        return name, kind, [int(d) for d in spec["shape"]], a
    raise TypeError(f"argument 'tensor_dict': {type(spec).__name__} is not a TensorSpec")


def serialize(
    tensor_dict: Dict[str, Any], metadata: Optional[Dict[str, str]] = None, *, format: str = "safetensors"
) -> bytes:
    """The bytes of a safetensors file (``format="paramdex"``: a paramdex file) of
    ``tensor_dict`` (name -> :class:`TensorSpec`), as ``safetensors.serialize``."""
    items = [_spec_item(k, v) for k, v in tensor_dict.items()]
    return to_bytes(items, metadata, format)


def serialize_file(
    tensor_dict: Dict[str, Any],
    filename: Any,
    metadata: Optional[Dict[str, str]] = None,
    *,
    format: Optional[str] = None,
) -> None:
    """Writes ``tensor_dict`` (name -> :class:`TensorSpec`) to ``filename``: a safetensors file
    when its name ends in ``.safetensors``, else a paramdex file (``format=`` decides)."""
    items = [_spec_item(k, v) for k, v in tensor_dict.items()]
    write(items, filename, metadata, format)


def deserialize(data: Any) -> List[Tuple[str, Dict[str, Any]]]:
    """``[(name, {"shape": [...], "dtype": "F32", "data": bytearray}), ...]`` of a safetensors
    (or paramdex) file held in memory, as ``safetensors.deserialize``."""
    from . import SafeOpen

    f = SafeOpen._from_bytes(data)
    out = []
    for name in f.offset_keys():
        kind, shape, buf = f._store.load(name)
        if isinstance(buf, list):
            raise InvalidArgumentError(f"tensor {name!r} holds strings, which safetensors cannot")
        out.append((name, {"shape": list(shape), "dtype": dtype_code(kind), "data": bytearray(np.asarray(buf))}))
    return out


# -- get_slice: safetensors' rules ------------------------------------------------------------


def _show(key: Tuple[Any, ...]) -> str:
    def one(k: Any) -> str:
        if isinstance(k, slice):
            s = f"{'' if k.start is None else k.start}:{'' if k.stop is None else k.stop}"
            return s if k.step is None else f"{s}:{k.step}"
        return "..." if k is Ellipsis else repr(k)

    return "[" + ", ".join(one(k) for k in key) + "]"


def strict_index(shape: Sequence[int], key: Any) -> Tuple[List[int], List[int], List[Any], List[int]]:
    """safetensors' slicing rules (numpy, TensorFlow): integers, slices with a positive step,
    one ``...`` and the empty list ``[]`` (an empty axis); a stop past the end, an index out of
    range, ``None``, a negative or zero step and non-empty lists raise
    :class:`SafetensorError` (subclasses that are also ``IndexError``, ``TypeError`` or
    ``ValueError``). Returns what :func:`paramdex._convert.normalize_index` returns."""
    if not isinstance(key, tuple):
        key = (key,)
    rank = len(shape)
    for pos, k in enumerate(key):
        if isinstance(k, list):
            if k:
                raise SliceTypeError("Non empty lists are not implemented")
        elif not (isinstance(k, slice) or k is Ellipsis or _is_int(k)):
            raise SliceTypeError(f"Unsupported slice index at position {pos}: expected slice, int, or ellipsis")
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise SliceIndexError("Only one ellipsis (...) is allowed in slice index")
    if len([k for k in key if k is not Ellipsis]) > rank:
        raise SliceIndexError(
            f"Error during slicing {_show(key)} with shape {list(shape)}: more slicing indexes than dimensions in tensor"
        )
    if Ellipsis in [k for k in key if not isinstance(k, list)]:
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (rank - (len(key) - 1)) + key[i + 1 :]
    shown = _show(key)
    key = key + (slice(None),) * (rank - len(key))
    start: List[int] = []
    lens: List[int] = []
    picks: List[Any] = []
    drop: List[int] = []

    def out_of_bounds(i: int, axis: int, dim: int) -> SafetensorError:
        return SliceIndexError(
            f"Error during slicing {shown} with shape {list(shape)}: index {i} out of bounds for "
            f"tensor dimension #{axis} of size {dim}"
        )

    for axis, (k, dim) in enumerate(zip(key, shape)):
        if isinstance(k, list):  # [[]]: no element along this axis
            start.append(0)
            lens.append(0)
            picks.append(None)
            continue
        if isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise InvalidArgumentError(f"Slice step must be a positive integer, got {step}")
            lo = 0 if k.start is None else _bound(int(k.start), axis, dim)
            hi = dim if k.stop is None else _bound(int(k.stop), axis, dim)
            if hi > dim:
                raise out_of_bounds(hi - 1, axis, dim)
            if lo > dim:
                raise out_of_bounds(lo, axis, dim)
            r = range(lo, max(lo, hi), step)
            if len(r) == 0:
                start.append(0)
                lens.append(0)
                picks.append(None)
            else:
                start.append(r[0])
                lens.append(r[-1] - r[0] + 1)
                picks.append(None if step == 1 else [j - r[0] for j in r])
            continue
        i = int(k)
        if i < 0:
            if i + dim < 0:
                raise SliceIndexError(f"Invalid index {i} for dimension {axis} of size {dim}")
            i += dim
        if i >= dim:
            raise out_of_bounds(i, axis, dim)
        start.append(i)
        lens.append(1)
        picks.append(None)
        drop.append(axis)
    return start, lens, picks, drop


def _bound(v: int, axis: int, dim: int) -> int:
    """A slice bound; a negative one counts from the end (safetensors fails on those with an
    ``OverflowError``: paramdex takes them as numpy does)."""
    if v < 0:
        v = max(0, v + dim)
    return v


def _is_int(k: Any) -> bool:
    try:
        import operator

        operator.index(k)
        return True
    except TypeError:
        return False
