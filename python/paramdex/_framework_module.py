"""The body shared by the safetensors-shaped modules of frameworks other than torch and numpy
(:mod:`paramdex.paddle`, :mod:`paramdex.tensorflow`, :mod:`paramdex.flax`,
:mod:`paramdex.mlx`): their tensors go through numpy arrays (internal)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from . import SafeOpen, safe_open
from . import _safetensors
from ._convert import to_numpy, writable_bytes

Item = Tuple[Any, str, List[int], np.ndarray]


def items(tensors: Any, to_numpy_one: Callable[[Any, Any], np.ndarray], what: str) -> List[Item]:
    """(name, dtype, shape, bytes) of each tensor of ``tensors``; ``to_numpy_one(name, t)``
    gives its numpy array (refusing what safetensors refuses)."""
    if not isinstance(tensors, dict):
        raise ValueError(f"Expected a dict of [str, {what}] but received {type(tensors)}")
    out = []
    for name, t in tensors.items():
        a, kind, shape = writable_bytes(to_numpy_one(name, t))
        out.append((name, kind, shape, a))
    return out


def load_bytes(data: Any, convert: Callable[[np.ndarray], Any]) -> Dict[str, Any]:
    """The tensors of a file held in memory, each array (a copy of its own) through ``convert``."""
    f = SafeOpen._from_bytes(data)
    out = {}
    for name in f.keys():
        kind, shape, buf = f._store.load(name)
        out[name] = convert(np.array(to_numpy(kind, shape, buf)))
    return out


def load_file(filename: Any, framework: str, device: Any = "cpu", backend: str = "mmap") -> Dict[str, Any]:
    with safe_open(filename, framework=framework, device=device, backend=backend) as f:
        return f.get_tensors()


def save(items_: List[Item], metadata: Optional[Dict[str, str]], format: str) -> bytes:
    return _safetensors.to_bytes(items_, metadata, format)


def save_file(items_: List[Item], filename: Any, metadata: Optional[Dict[str, Any]], format: Optional[str]) -> None:
    _safetensors.write(items_, filename, metadata, format)
