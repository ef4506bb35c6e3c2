"""numpy arrays in and out of paramdex files, as ``safetensors.numpy``.

``load_file`` returns zero-copy, read-only views of the file's mapping (they keep it mapped);
``np.array(a)`` makes a writable copy. ``save_file`` writes a paramdex file atomically, with an
fsync before the rename.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

import numpy as np

from . import Writer, safe_open

Name = Union[str, bytes]

__all__ = ["save_file", "load_file"]


def save_file(
    tensors: Dict[Name, np.ndarray],
    filename: Any,
    metadata: Optional[Dict[str, Any]] = None,
    alignment: Optional[int] = None,
) -> None:
    """Writes ``tensors`` (name -> array; names str or bytes) to ``filename`` as a paramdex
    file, with ``metadata`` (str keys; str, int, float, bool, bytes or list values)."""
    with Writer(filename, metadata=metadata, alignment=alignment) as w:
        for name, array in tensors.items():
            w.add(name, array)


def load_file(filename: Any, checksums: bool = True) -> Dict[Name, np.ndarray]:
    """Every tensor of ``filename`` (any format paramdex reads) as numpy arrays: read-only views
    of the mapping where the format allows, else copies. ``checksums=False``: see
    :func:`paramdex.safe_open`."""
    with safe_open(filename, framework="np", checksums=checksums) as f:
        return {name: f.get_tensor(name) for name in f.keys()}
