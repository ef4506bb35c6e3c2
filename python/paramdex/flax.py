"""flax arrays in and out of safetensors and paramdex files, as ``safetensors.flax``
(``save_file`` writes a safetensors file when the name ends in ``.safetensors``, else a
paramdex file; ``format=`` decides). Needs flax installed, as safetensors' module does."""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np
import jax.numpy as jnp

from . import _framework_module as _m

__all__ = ["save", "save_file", "load", "load_file"]


def _np(name: Any, t: Any) -> np.ndarray:
    return np.asarray(t)


def save(tensors: Dict[str, Any], metadata: Optional[Dict[str, str]] = None, *, format: str = "safetensors") -> bytes:
    """The bytes of a safetensors (``format="paramdex"``: paramdex) file of ``tensors``."""
    return _m.save(_m.items(tensors, _np, "jax Array"), metadata, format)


def save_file(
    tensors: Dict[str, Any], filename: Any, metadata: Optional[Dict[str, str]] = None, *, format: Optional[str] = None
) -> None:
    """Writes ``tensors`` to ``filename`` (safetensors for ``*.safetensors``, else paramdex)."""
    _m.save_file(_m.items(tensors, _np, "jax Array"), filename, metadata, format)


def load(data: bytes) -> Dict[str, Any]:
    """The arrays of a safetensors (or paramdex) file held in memory."""
    return _m.load_bytes(data, jnp.array)


def load_file(filename: Any, *, backend: str = "mmap") -> Dict[str, Any]:
    """Every tensor of ``filename`` (any format paramdex reads) as flax arrays."""
    return _m.load_file(filename, "flax", "cpu", backend)
