"""Paddle tensors in and out of safetensors and paramdex files, as ``safetensors.paddle``:
``save_file`` writes a safetensors file when the name ends in ``.safetensors``, else a paramdex
file (``format=`` decides); ``load_file`` reads every format paramdex reads."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import paddle

from . import _framework_module as _m
from . import _safetensors

__all__ = ["save", "save_file", "load", "load_file"]


def _np(name: Any, t: Any) -> np.ndarray:
    if not isinstance(t, paddle.Tensor):
        raise ValueError(f"Key `{name}` is invalid, expected paddle.Tensor but received {type(t)}")
    if not t.is_contiguous():
        raise _safetensors.non_contiguous(name)
    kind = str(t.dtype).split(".")[-1]
    if kind in ("bfloat16", "float8_e4m3fn", "float8_e5m2"):
        # Paddle's numpy() of these is their bits as integers (or float32): through float32,
        # which holds every value exactly, then the type itself (ml_dtypes).
        return t.astype("float32").cpu().numpy().astype(kind_np(kind))
    return t.detach().cpu().numpy()


def kind_np(kind: str) -> Any:
    import ml_dtypes

    return getattr(ml_dtypes, kind)


def _paddle(arr: np.ndarray, device: str = "cpu") -> Any:
    from . import _to_paddle

    return _to_paddle(arr, device)


def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None, *, format: str = "safetensors") -> bytes:
    """The bytes of a safetensors (``format="paramdex"``: paramdex) file of ``tensors``."""
    return _m.save(_m.items(tensors, _np, "paddle.Tensor"), metadata, format)


def save_file(
    tensors: Dict[str, Any], filename: Any, metadata: Optional[Dict[str, str]] = None, *, format: Optional[str] = None
) -> None:
    """Writes ``tensors`` to ``filename`` (safetensors for ``*.safetensors``, else paramdex)."""
    _m.save_file(_m.items(tensors, _np, "paddle.Tensor"), filename, metadata, format)


def load(data: bytes, device: str = "cpu") -> Dict[str, Any]:
    """The tensors of a safetensors (or paramdex) file held in memory, on ``device``."""
    return _m.load_bytes(data, lambda a: _paddle(a, device))


def load_file(filename: Any, device: Any = "cpu", *, backend: str = "mmap") -> Dict[str, Any]:
    """Every tensor of ``filename`` (any format paramdex reads) as Paddle tensors."""
    return _m.load_file(filename, "paddle", device, backend)
