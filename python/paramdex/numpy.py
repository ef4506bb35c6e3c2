"""numpy arrays in and out of paramdex files, as ``safetensors.numpy``.

``load_file`` returns zero-copy arrays of the file's mapping (they keep it mapped), writable
through a private copy-on-write mapping (a write never reaches the file; ``readonly=True``:
read-only views). ``save_file`` writes a safetensors file when the name ends in
``.safetensors``, else a paramdex file, atomically, with an fsync before the rename; ``save``
and ``load`` are the same in memory, as ``safetensors.numpy``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import SafeOpen, safe_open
from . import _safetensors
from ._convert import to_numpy, unpack_float4, writable_bytes

Name = Union[str, bytes]

__all__ = ["save_file", "load_file", "save", "load"]


def _getdtype(dtype_str: str) -> np.dtype:
    """The numpy dtype of a safetensors dtype code (``"F32"`` -> float32; ``"BF16"`` and the
    float8 codes when ml_dtypes is installed)."""
    from ._convert import numpy_dtype

    kind = _safetensors.FROM_ST_CODE.get(dtype_str)
    if kind is None:
        raise KeyError(dtype_str)
    return numpy_dtype(kind)


def _items(tensors: Any) -> List[Tuple[Name, str, List[int], np.ndarray]]:
    if not isinstance(tensors, dict):
        raise TypeError(f"Expected a dict of [str, np.ndarray] but received {type(tensors)}")
    out = []
    for name, array in tensors.items():
        if isinstance(array, (bytes, bytearray, memoryview)):
            # A bytes value (paramdex files only: a safetensors output refuses it).
            out.append((name, "bytes", [], bytes(array)))
            continue
        a, kind, shape = writable_bytes(array)
        out.append((name, kind, shape, a))
    return out


def save_file(
    tensors: Dict[Name, np.ndarray],
    filename: Any,
    metadata: Optional[Dict[str, Any]] = None,
    alignment: Optional[int] = None,
    *,
    format: Optional[str] = None,
    compress: Optional[str] = None,
) -> None:
    """Writes ``tensors`` (name -> array) to ``filename``: a safetensors file when its name
    ends in ``.safetensors`` (names and metadata str, as safetensors has them), else a paramdex
    file (names str or bytes; metadata with str keys and str, int, float, bool, bytes or list
    values; a ``bytes`` value is stored as a bytes value, which ``load_file`` gives back as
    ``bytes``); ``format="safetensors"`` or ``"paramdex"`` decides instead.
    ``compress="lossless"`` (paramdex files only) stores the tensor data compressed; reading
    it needs no option, and a compressed tensor is decoded into a fresh buffer."""
    _safetensors.write(_items(tensors), filename, metadata, format, alignment, compress)


def save(
    tensor_dict: Dict[str, np.ndarray], metadata: Optional[Dict[str, str]] = None, *, format: str = "safetensors"
) -> bytes:
    """The bytes of a safetensors file of ``tensor_dict`` (``format="paramdex"``: of a
    paramdex file), as ``safetensors.numpy.save``."""
    return _safetensors.to_bytes(_items(tensor_dict), metadata, format)


def load(data: bytes) -> Dict[str, np.ndarray]:
    """The arrays of a safetensors (or paramdex) file held in memory (writable arrays of their
    own), as ``safetensors.numpy.load``."""
    f = SafeOpen._from_bytes(data)
    out = {}
    for name in f.keys():
        got = f._store.load_array(name)
        if type(got) is not tuple:  # a numeric array, a view of ``data``
            out[name] = np.array(got)
            continue
        kind, shape, buf = got
        if kind == "bytes":
            out[name] = buf  # a bytes value
        elif kind == "float4_e2m1fn_x2":
            out[name] = unpack_float4(to_numpy(kind, shape, buf))
        else:
            out[name] = np.array(to_numpy(kind, shape, buf))
    return out


def _alloc(kind: str, shape: List[int], nbytes: int) -> Tuple[np.ndarray, np.ndarray]:
    """(the array handed out, its bytes) of a tensor that ``load_file`` copies."""
    buf = np.empty(nbytes, np.uint8)
    return to_numpy(kind, shape, buf), buf


def load_file(
    filename: Any,
    checksums: bool = True,
    threads: int = 0,
    copy: bool = False,
    *,
    backend: str = "mmap",
    readonly: bool = False,
) -> Dict[Name, np.ndarray]:
    """Every tensor of ``filename`` (any format paramdex reads) as numpy arrays.

    By default: zero-copy arrays over a private copy-on-write mapping where the format stores a
    tensor as one run of a local file (writable; ``readonly=True``: read-only views of the
    store's mapping), else copies (see :func:`paramdex.safe_open`); a paramdex file's or sharded checkpoint's checksums are all
    checked first, on ``threads`` threads (0: one per core), unless ``checksums=False``.
    ``copy=True``: a paramdex file or sharded checkpoint is copied into new, writable arrays
    on ``threads`` threads, every checksum checked as it is copied, without the GIL."""
    with safe_open(filename, framework="np", checksums=checksums, backend=backend, readonly=readonly) as f:
        if copy:
            out = f._load_all(_alloc, threads)
            if out is not None:
                # Packed float4 copied as its bytes: unpacked as get_tensor gives it.
                for k, v in out.items():
                    if isinstance(v, np.ndarray) and v.dtype == np.uint8 and f.info(k).dtype == "float4_e2m1fn_x2":
                        out[k] = unpack_float4(v)
                return out
        return f._get_all(threads)
