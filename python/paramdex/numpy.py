"""numpy arrays in and out of paramdex files, as ``safetensors.numpy``.

``load_file`` returns zero-copy, read-only views of the file's mapping (they keep it mapped);
``np.array(a)`` makes a writable copy. ``save_file`` writes a paramdex file atomically, with an
fsync before the rename.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import Writer, safe_open
from ._convert import to_numpy

Name = Union[str, bytes]

__all__ = ["save_file", "load_file"]


def save_file(
    tensors: Dict[Name, np.ndarray],
    filename: Any,
    metadata: Optional[Dict[str, Any]] = None,
    alignment: Optional[int] = None,
) -> None:
    """Writes ``tensors`` (name -> array; names str or bytes) to ``filename`` as a paramdex
    file, with ``metadata`` (str keys; str, int, float, bool, bytes or list values). A ``bytes``
    value is stored as a bytes value, which ``load_file`` gives back as ``bytes``."""
    with Writer(filename, metadata=metadata, alignment=alignment) as w:
        for name, array in tensors.items():
            w.add(name, array)


def _alloc(kind: str, shape: List[int], nbytes: int) -> Tuple[np.ndarray, np.ndarray]:
    """(the array handed out, its bytes) of a tensor that ``load_file`` copies."""
    buf = np.empty(nbytes, np.uint8)
    return to_numpy(kind, shape, buf), buf


def load_file(
    filename: Any, checksums: bool = True, threads: int = 0, copy: bool = False
) -> Dict[Name, np.ndarray]:
    """Every tensor of ``filename`` (any format paramdex reads) as numpy arrays.

    By default: read-only views of the mapping where the format allows, else copies (see
    :func:`paramdex.safe_open`); a paramdex file's or sharded checkpoint's checksums are all
    checked first, on ``threads`` threads (0: one per core), unless ``checksums=False``.
    ``copy=True``: a paramdex file or sharded checkpoint is copied into new, writable arrays
    on ``threads`` threads, every checksum checked as it is copied, without the GIL."""
    with safe_open(filename, framework="np", checksums=checksums) as f:
        if copy:
            out = f._load_all(_alloc, threads)
            if out is not None:
                return out
        return f._get_all(threads)
