"""torch tensors in and out of paramdex files, as ``safetensors.torch``.

Zero-copy: a tensor stored as one run of bytes in a local file (paramdex files, sharded
checkpoints, safetensors) comes back over a private, copy-on-write mapping of that file
(``torch.UntypedStorage.from_file(path, shared=False)``, as safetensors does): no copy, and the
tensor is writable, a write copying only the pages it touches and never reaching the file. Its
data is checked against the file's checksum (paramdex) before it is handed out. Other tensors
(remote objects, TensorFlow checkpoints, Paddle files, regions from ``get_slice``) are one copy,
taken from the numpy array paramdex read. ``device`` other than ``"cpu"`` moves the tensor there
(one more copy, torch's).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from . import Writer, safe_open
from ._convert import ML_DTYPES, to_numpy

Name = Union[str, bytes]

__all__ = ["save_file", "load_file", "TORCH_DTYPES"]

#: paramdex dtype name -> torch dtype (those this torch has).
TORCH_DTYPES: Dict[str, Any] = {}
for _n, _t in [
    ("bool", "bool"),
    ("int8", "int8"),
    ("uint8", "uint8"),
    ("int16", "int16"),
    ("uint16", "uint16"),
    ("int32", "int32"),
    ("uint32", "uint32"),
    ("int64", "int64"),
    ("uint64", "uint64"),
    ("float16", "float16"),
    ("bfloat16", "bfloat16"),
    ("float32", "float32"),
    ("float64", "float64"),
    ("complex64", "complex64"),
    ("complex128", "complex128"),
    ("float8_e4m3fn", "float8_e4m3fn"),
    ("float8_e5m2", "float8_e5m2"),
    ("float8_e4m3fnuz", "float8_e4m3fnuz"),
    ("float8_e5m2fnuz", "float8_e5m2fnuz"),
    ("float8_e8m0fnu", "float8_e8m0fnu"),
    ("float4_e2m1fn_x2", "float4_e2m1fn_x2"),
    ("int4", "int4"),
    ("uint4", "uint4"),
    ("int2", "int2"),
    ("uint2", "uint2"),
]:
    if hasattr(torch, _t):
        TORCH_DTYPES[_n] = getattr(torch, _t)
_FROM_TORCH = {v: k for k, v in TORCH_DTYPES.items()}
# Same-width integer types that carry the bits of dtypes numpy has no type for.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _torch_dtype(kind: str) -> Any:
    try:
        return TORCH_DTYPES[kind]
    except KeyError:
        raise TypeError(f"torch has no dtype for paramdex dtype {kind!r}") from None


def _tensor(f: Any, name: Name, kind: str, shape: List[int], data: Any, device: str) -> Any:
    """The torch tensor of a loaded tensor of ``f`` (a SafeOpen)."""
    if isinstance(data, list):
        raise TypeError(f"tensor {name!r} holds strings, which torch tensors cannot")
    dt = _torch_dtype(kind)
    if data.readonly:
        t = _from_file(f, name, dt, shape, data.nbytes)
        if t is not None:
            return t if device == "cpu" else t.to(device)
    return _from_numpy(to_numpy(kind, shape, data), device, kind)


def _from_file(f: Any, name: Name, dt: Any, shape: List[int], nbytes: int) -> Optional[Any]:
    """A tensor over a private mapping of the file holding ``name``'s bytes, or None when its
    bytes are not one run in one local file."""
    loc = f._store.data_location(name)
    if loc is None or f._file is None:
        return None
    path, offset, length = loc
    if length != nbytes:
        return None
    size = torch.empty((), dtype=dt).element_size()
    if offset % size:
        return None
    with f._lock:
        st = f._torch_files.get(path)
        if st is None:
            # Only the file the store itself mapped (same device, inode, size and mtime before
            # and after torch maps it): a file replaced under the same name since the open is
            # not mapped (its bytes are not the ones paramdex checked); then one copy instead.
            from . import _identity

            if _identity(path) != f._file:
                return None
            st = torch.UntypedStorage.from_file(path, shared=False, nbytes=f._file[2])
            if _identity(path) != f._file:
                return None
            f._torch_files[path] = st
    if offset + length > st.nbytes():
        return None
    t = torch.empty((0,), dtype=dt)
    count = length // size
    t.set_(st, offset // size, (count,), (1,))
    return t.reshape(tuple(shape))


def _from_numpy(arr: np.ndarray, device: str, kind: Optional[str] = None) -> Any:
    """A torch tensor of a numpy array: shared when it is writable, else one copy."""
    if arr.dtype == object:
        raise TypeError("torch tensors cannot hold strings")
    name = kind or arr.dtype.name
    dt = TORCH_DTYPES.get(name)
    if arr.dtype.kind == "V" or name in ML_DTYPES or (kind is not None and arr.dtype == np.uint8):
        # numpy types torch does not import: through same-width integer bits.
        bits = arr.view(np.dtype(f"<i{arr.dtype.itemsize}") if arr.dtype.itemsize > 1 else np.uint8)
        src = bits if arr.flags.writeable else bits.copy()
        t = torch.from_numpy(src).view(dt)
    else:
        src = arr if arr.flags.writeable else arr.copy()
        t = torch.from_numpy(src)
    return t if device == "cpu" else t.to(device)


def _writable(t: Any) -> Tuple[np.ndarray, str, List[int]]:
    """(C-contiguous array of the bytes, dtype name, shape) of torch tensor ``t`` (moved to
    the CPU; no copy for a contiguous CPU tensor)."""
    kind = _FROM_TORCH.get(t.dtype)
    if kind is None:
        raise TypeError(f"paramdex cannot store torch dtype {t.dtype}")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    shape = list(t.shape)
    a = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
    return a, kind, shape


def save_file(
    tensors: Dict[Name, Any],
    filename: Any,
    metadata: Optional[Dict[str, Any]] = None,
    alignment: Optional[int] = None,
) -> None:
    """Writes torch tensors to ``filename`` as a paramdex file (atomically, fsynced); a
    ``bytes`` value is stored as a bytes value."""
    with Writer(filename, metadata=metadata, alignment=alignment) as w:
        for name, t in tensors.items():
            if isinstance(t, (bytes, bytearray, memoryview)):
                w.add(name, t)  # a bytes value
                continue
            a, kind, shape = _writable(t)
            w._w.add(name, kind, shape, a)


def _alloc(kind: str, shape: List[int], nbytes: int) -> Tuple[Any, np.ndarray]:
    """(the tensor handed out, a numpy array of its bytes) of a tensor ``load_file`` copies."""
    t = torch.empty(tuple(shape), dtype=_torch_dtype(kind))
    if t.nbytes != nbytes:
        raise ValueError(f"a {kind} tensor of shape {shape} cannot hold {nbytes} bytes")
    return t, t.reshape(-1).view(torch.uint8).numpy()


def load_file(
    filename: Any, device: str = "cpu", checksums: bool = True, threads: int = 0, copy: bool = False
) -> Dict[Name, Any]:
    """Every tensor of ``filename`` (any format paramdex reads) as torch tensors.

    By default the tensors of a paramdex file or sharded checkpoint are zero-copy (over a
    copy-on-write mapping of the file: see this module's docstring), every tensor's checksum
    checked first, on ``threads`` threads (0: one per core). ``checksums=False`` skips that
    check (files already checked with ``verify()``). ``copy=True`` copies them instead into
    new tensors (``torch.empty``) on ``threads`` threads, every checksum checked as it is
    copied, without the GIL: tensors that own their memory, independent of the file. Other
    formats: as :meth:`paramdex.SafeOpen.get_tensor` gives them. Which is faster is measured in
    BENCHMARKS.md ("Python (issue 18)")."""
    with safe_open(filename, framework="pt", device=device, checksums=checksums) as f:
        if copy:
            out = f._load_all(_alloc, threads)
            if out is not None:
                return out if device == "cpu" else {k: v.to(device) for k, v in out.items()}
        return f._get_all(threads)


# ``paramdex.torch.dcp``: the torch.distributed.checkpoint storage (paramdex/torch_dcp.py),
# loaded on first use. ``__path__`` lets ``import paramdex.torch.dcp`` find ``_torch/dcp.py``.
__path__ = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch")]


def __getattr__(name: str) -> Any:
    if name == "dcp":
        import importlib

        return importlib.import_module("paramdex.torch.dcp")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
