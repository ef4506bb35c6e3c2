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
from collections import defaultdict
from typing import Any, Dict, List, Optional, Set, Tuple, Union

import numpy as np
import torch

from . import SafeOpen, safe_open
from . import _safetensors
from ._convert import ML_DTYPES, to_numpy

Name = Union[str, bytes]

__all__ = [
    "save_file",
    "load_file",
    "save",
    "load",
    "save_model",
    "load_model",
    "storage_ptr",
    "storage_size",
    "TORCH_DTYPES",
]

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
    if kind not in TORCH_DTYPES and f.format == "gguf":
        # A ggml block type (q4_0, q4_k, iq4_xs, mxfp4, ...; f.info(name).dtype names it):
        # its blocks as stored, as uint8, as numpy gives them.
        return _from_numpy(to_numpy(kind, shape, data), device)
    dt = _torch_dtype(kind)
    if data.readonly:
        t = _from_file(f, name, dt, shape, data.nbytes)
        if t is not None:
            return t if device == "cpu" else t.to(device)
    return _from_numpy(to_numpy(kind, shape, data), device, kind)


def _from_file(f: Any, name: Name, dt: Any, shape: List[int], nbytes: int) -> Optional[Any]:
    """A tensor over a private mapping of the file holding ``name``'s bytes, or None when its
    bytes are not one run in one local file."""
    run = f._file_run(name, nbytes)
    if run is None:
        return None
    path, offset, length = run
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
        from .errors import UnsupportedDTypeError

        raise UnsupportedDTypeError(f"paramdex cannot store torch dtype {t.dtype}")
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
    *,
    format: Optional[str] = None,
    compress: Optional[str] = None,
) -> None:
    """Writes torch tensors to ``filename`` (atomically, fsynced): a safetensors file when its
    name ends in ``.safetensors``, else a paramdex file; ``format="safetensors"`` or
    ``"paramdex"`` decides instead. Refuses, as safetensors does, what is not a dict of dense
    tensors, tensors sharing memory (use :func:`save_model`) and non-contiguous tensors. A
    ``bytes`` value is stored as a bytes value in a paramdex file. ``compress="lossless"``
    (paramdex files only) stores the tensor data compressed (bfloat16 weights: about 1.45x
    smaller); reading it needs no option, and a compressed tensor is decoded into a fresh
    buffer."""
    _safetensors.write(_items_for_save(tensors), filename, metadata, format, alignment, compress)


def save(
    tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None, *, format: str = "safetensors"
) -> bytes:
    """The bytes of a safetensors file of ``tensors`` (``format="paramdex"``: of a paramdex
    file), as ``safetensors.torch.save``; the same refusals as :func:`save_file`."""
    return _safetensors.to_bytes(_items_for_save(tensors), metadata, format)


def load(data: bytes, device: str = "cpu") -> Dict[str, Any]:
    """The tensors of a safetensors (or paramdex) file held in memory, as
    ``safetensors.torch.load``: tensors of their own, on ``device``."""
    f = SafeOpen._from_bytes(data, framework="pt")
    out = {}
    for name in f.keys():
        kind, shape, buf = f._store.load(name)
        if isinstance(buf, list):
            raise TypeError(f"tensor {name!r} holds strings, which torch tensors cannot")
        out[name] = _from_numpy(np.array(to_numpy(kind, shape, buf)), device, kind)
    return out


def _items_for_save(tensors: Any) -> List[Tuple[Name, str, List[int], np.ndarray]]:
    """safetensors' checks of the tensors to save (same exception types and messages), then
    (name, dtype, shape, bytes) of each."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, torch.Tensor] but received {type(tensors)}")
    # Bytes values (paramdex files only: a safetensors output refuses them).
    values = {k: v for k, v in tensors.items() if isinstance(v, (bytes, bytearray, memoryview))}
    tensors = {k: v for k, v in tensors.items() if k not in values}
    sparse = []
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor):
            raise ValueError(f"Key `{k}` is invalid, expected torch.Tensor but received {type(v)}")
        if v.layout != torch.strided:
            sparse.append(k)
    if sparse:
        raise ValueError(
            f"You are trying to save a sparse tensors: `{sparse}` which this library does not support."
            " You can make it a dense tensor before saving with `.to_dense()` but be aware this might"
            " make a much larger file than needed."
        )
    failing = [names for names in _find_shared_tensors(tensors) if len(names) > 1]
    if failing:
        raise RuntimeError(
            f"""
            Some tensors share memory, this will lead to duplicate memory on disk and potential differences when loading them again: {failing}.
            A potential way to correctly save your model is to use `save_model`.
            More information at https://huggingface.co/docs/safetensors/torch_shared_tensors
            """
        )
    items = [(k, "bytes", [], bytes(v)) for k, v in values.items()]
    for k, v in tensors.items():
        if not v.is_contiguous():
            raise _safetensors.non_contiguous(k)
        a, kind, shape = _writable(v)
        items.append((k, kind, shape, a))
    return items


#: Bytes per element of each torch dtype paramdex stores (safetensors.torch's ``_SIZE``).
_SIZE: Dict[Any, int] = {t: torch.empty((), dtype=t).element_size() for t in _FROM_TORCH}
#: safetensors dtype code -> torch dtype (safetensors.torch's ``_TYPES``).
_TYPES: Dict[str, Any] = {
    _safetensors.ST_CODE[k]: t for k, t in TORCH_DTYPES.items() if k in _safetensors.ST_CODE
}


def _getdtype(dtype_str: str) -> Any:
    """The torch dtype of a safetensors dtype code (``"BF16"`` -> ``torch.bfloat16``)."""
    return _TYPES[dtype_str]


# -- shared tensors: safetensors' rules --------------------------------------------------------


def storage_ptr(tensor: Any) -> int:
    """The address of the storage under ``tensor`` (0 for meta tensors)."""
    try:
        return tensor.untyped_storage().data_ptr()
    except Exception:
        return 0


def storage_size(tensor: Any) -> int:
    """Bytes of the storage under ``tensor`` (a meta tensor: its own bytes)."""
    try:
        return tensor.untyped_storage().nbytes()
    except Exception:
        return tensor.nelement() * tensor.element_size()


def _end_ptr(tensor: Any) -> int:
    """The address one past ``tensor``'s last byte (its first for an empty tensor)."""
    if tensor.nelement():
        return tensor.view(-1)[-1].data_ptr() + tensor.element_size()
    return tensor.data_ptr()


def _filter_shared_not_shared(tensors: List[Set[str]], state_dict: Dict[str, Any]) -> List[Set[str]]:
    """Splits each group of names on one storage into the groups whose bytes overlap."""
    out: List[Set[str]] = []
    for shared in tensors:
        if len(shared) < 2:
            out.append(shared)
            continue
        areas = sorted((state_dict[n].data_ptr(), _end_ptr(state_dict[n]), n) for n in shared)
        _, last_stop, first = areas[0]
        out.append({first})
        for start, stop, name in areas[1:]:
            if start >= last_stop:
                out.append({name})
            else:
                out[-1].add(name)
            last_stop = stop
    return out


def _find_shared_tensors(state_dict: Dict[str, Any]) -> List[Set[str]]:
    """Groups of names whose tensors share bytes (each name in one group)."""
    groups: Dict[Any, Set[str]] = defaultdict(set)
    for k, v in state_dict.items():
        if v.device != torch.device("meta") and storage_ptr(v) != 0 and storage_size(v) != 0:
            groups[(v.device, storage_ptr(v), storage_size(v))].add(k)
    return _filter_shared_not_shared(list(sorted(groups.values())), state_dict)


def _is_complete(tensor: Any) -> bool:
    """Whether ``tensor`` covers its whole storage."""
    return tensor.data_ptr() == storage_ptr(tensor) and tensor.nelement() * tensor.element_size() == storage_size(
        tensor
    )


def _remove_duplicate_names(
    state_dict: Dict[str, Any],
    *,
    preferred_names: Optional[List[str]] = None,
    discard_names: Optional[List[str]] = None,
) -> Dict[str, List[str]]:
    """For each group of shared tensors, the name kept (one covering the whole storage: the
    first by name among ``preferred_names``, else among those not in ``discard_names``, else
    of all) -> the names dropped. RuntimeError when no tensor of a group covers its storage."""
    preferred = set(preferred_names or [])
    discard = set(discard_names or [])
    to_remove: Dict[str, List[str]] = defaultdict(list)
    for shared in _find_shared_tensors(state_dict):
        complete = {n for n in shared if _is_complete(state_dict[n])}
        if not complete:
            raise RuntimeError(
                "Error while trying to find names to remove to save state dict, but found no suitable name to keep"
                f" for saving amongst: {shared}. None is covering the entire storage.Refusing to save/load the model"
                " since you could be storing much more memory than needed. Please refer to"
                " https://huggingface.co/docs/safetensors/torch_shared_tensors for more information. Or open an"
                " issue."
            )
        keep = sorted(complete)[0]
        kept_ones = complete - discard
        if kept_ones:
            keep = sorted(kept_ones)[0]
        if preferred and preferred & complete:
            keep = sorted(preferred & complete)[0]
        for name in sorted(shared):
            if name != keep:
                to_remove[keep].append(name)
    return to_remove


def save_model(
    model: Any,
    filename: Any,
    metadata: Optional[Dict[str, str]] = None,
    force_contiguous: bool = True,
    *,
    format: Optional[str] = None,
) -> None:
    """Saves ``model.state_dict()`` to ``filename`` (format by name, as :func:`save_file`),
    each group of shared tensors once (the others named in the metadata: dropped name -> kept
    name, unless the metadata has that key), as ``safetensors.torch.save_model``."""
    state_dict = model.state_dict()
    for kept, dropped in _remove_duplicate_names(state_dict).items():
        for name in dropped:
            if metadata is None:
                metadata = {}
            if name not in metadata:
                metadata[name] = kept
            del state_dict[name]
    if force_contiguous:
        state_dict = {k: v.contiguous() for k, v in state_dict.items()}
    try:
        save_file(state_dict, filename, metadata=metadata, format=format)
    except ValueError as e:
        raise ValueError(
            f"{e} Or use save_model(..., force_contiguous=True), read the docs for potential caveats."
        ) from None


def load_model(
    model: Any,
    filename: Any,
    strict: bool = True,
    device: Union[str, int] = "cpu",
    *,
    backend: str = "mmap",
) -> Tuple[List[str], List[str]]:
    """Loads ``filename`` into ``model`` (tensors shared in the model filled once), as
    ``safetensors.torch.load_model``: returns (missing, unexpected) names; ``strict`` raises
    RuntimeError when either is not empty."""
    state_dict = load_file(filename, device=device, backend=backend)
    to_removes = _remove_duplicate_names(model.state_dict(), preferred_names=list(state_dict.keys()))
    missing, unexpected = model.load_state_dict(state_dict, strict=False)
    missing = set(missing)
    for group in to_removes.values():
        for name in group:
            if name not in missing:
                unexpected.append(name)
            else:
                missing.remove(name)
    if strict and (missing or unexpected):
        error = f"Error(s) in loading state_dict for {model.__class__.__name__}:"
        if missing:
            error += "\n    Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing))
        if unexpected:
            error += "\n    Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected))
        raise RuntimeError(error)
    return missing, unexpected


def _alloc(kind: str, shape: List[int], nbytes: int) -> Tuple[Any, np.ndarray]:
    """(the tensor handed out, a numpy array of its bytes) of a tensor ``load_file`` copies."""
    t = torch.empty(tuple(shape), dtype=_torch_dtype(kind))
    if t.nbytes != nbytes:
        raise ValueError(f"a {kind} tensor of shape {shape} cannot hold {nbytes} bytes")
    return t, t.reshape(-1).view(torch.uint8).numpy()


def load_file(
    filename: Any,
    device: Union[str, int] = "cpu",
    checksums: bool = True,
    threads: int = 0,
    copy: bool = False,
    *,
    backend: str = "mmap",
) -> Dict[Name, Any]:
    """Every tensor of ``filename`` (any format paramdex reads) as torch tensors.

    By default the tensors of a paramdex file or sharded checkpoint are zero-copy (over a
    copy-on-write mapping of the file: see this module's docstring), every tensor's checksum
    checked first, on ``threads`` threads (0: one per core). ``checksums=False`` skips that
    check (files already checked with ``verify()``). ``copy=True`` copies them instead into
    new tensors (``torch.empty``) on ``threads`` threads, every checksum checked as it is
    copied, without the GIL: tensors that own their memory, independent of the file. Other
    formats: as :meth:`paramdex.SafeOpen.get_tensor` gives them. Which is faster is measured in
    docs/benchmarks-history.md ("Python (issue 18)")."""
    with safe_open(filename, framework="pt", device=device, checksums=checksums, backend=backend) as f:
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
