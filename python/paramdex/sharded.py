"""Sharded saves from Python (SPEC.md 12): each process (rank) writes its own shard of one save
with :class:`ShardWriter`, and one of them commits the save with :func:`merge_shards`, the
index-only merge (the shards' records are never read; the index is written last, so a crash
anywhere leaves the previous checkpoint or none).

For JAX, Paddle and hand-written loops; ``paramdex.torch.dcp`` builds PyTorch's distributed
checkpoints on it::

    save_id = paramdex.new_save_id()          # on the coordinator; broadcast it to every rank
    with paramdex.ShardWriter("ckpt/model", rank, world, save_id) as w:
        w.add("step", np.array(100))                       # a whole tensor
        w.add_slice("emb", local_rows, global_shape=(1000, 64), start=(rank * 250, 0))
    # every rank done (a barrier), then on one:
    paramdex.merge_shards("ckpt/model", save_id=save_id, num_shards=world)

The prefix is a path prefix (``DIR/NAME``: files ``NAME.index``, ``NAME.data-k-of-N``) or
``s3://bucket/dir/NAME``. Every write, the merge and every read release the GIL.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Union

from . import _paramdex
from ._convert import writable_bytes

Name = Union[str, bytes]

__all__ = ["ShardWriter", "merge_shards", "new_save_id", "list_run"]


def new_save_id() -> str:
    """A new random save id (32 hex digits): made once per save by the coordinator and given
    to every writer of the save."""
    return _paramdex.new_save_id()


def _prefix(p: Any) -> str:
    import os

    return p if isinstance(p, str) else os.fspath(p)


def _bytes_of(array: Any, dtype: Optional[str]):
    if type(array).__module__.startswith("torch"):
        from . import torch as _pt

        a, kind, shape = _pt._writable(array)
    else:
        a, kind, shape = writable_bytes(array)
    return a, (dtype or kind), shape


class ShardWriter:
    """Shard ``rank`` of ``ranks`` of the save ``save_id`` (from :func:`new_save_id`) of the
    sharded checkpoint at ``prefix``.

    Locally, the shard is written under a temporary name and renamed, complete, to its pending
    name ``PREFIX.data-k-of-N.pending`` by :meth:`finish`; in a bucket it is uploaded (multipart,
    bounded memory) under its final name. Either way the checkpoint changes only when
    :func:`merge_shards` commits the save. ``base``: the prefix of an earlier sharded
    checkpoint (a local one for a local save; one in the same bucket, ``s3://...``, for a
    bucket's, whose data objects the store then copies server-side); tensors and slices it
    holds byte-identical are referred to there instead of written (an incremental save,
    SPEC.md 12.5). Used as a context manager it finishes when the
    block ends and is abandoned when the block raises.
    """

    def __init__(
        self,
        prefix: Any,
        rank: int,
        ranks: int,
        save_id: str,
        base: Optional[Any] = None,
        sync: bool = True,
        compress: Optional[str] = None,
    ) -> None:
        self.prefix = _prefix(prefix)
        self._w = _paramdex.ShardWriter(
            self.prefix,
            rank,
            ranks,
            save_id,
            None if base is None else _prefix(base),
            sync,
            compress,
        )

    def add(self, name: Name, array: Any, dtype: Optional[str] = None) -> bool:
        """Adds a whole tensor (numpy array, torch tensor, or anything ``numpy.asarray``
        takes). ``dtype`` names the paramdex dtype of raw bits. Returns False when the base
        held it unchanged (nothing written)."""
        a, kind, shape = _bytes_of(array, dtype)
        return self._w.add(name, kind, shape, a)

    def add_slice(
        self,
        name: Name,
        array: Any,
        global_shape: Sequence[int],
        start: Sequence[int],
        dtype: Optional[str] = None,
    ) -> bool:
        """Adds ``array`` as the slice at ``start`` of the global tensor ``name`` of shape
        ``global_shape``; the other slices come from this or other shards of the save (they
        must not overlap, and together cover the tensor). Readers get any region of the global
        tensor, whatever the slicing (``safe_open(...).get_slice``). Returns False when the base
        held this slice unchanged."""
        a, kind, shape = _bytes_of(array, dtype)
        start = [int(s) for s in start]
        if len(start) != len(shape):
            raise ValueError(f"slice of rank {len(shape)} with a start of rank {len(start)}")
        return self._w.add_slice(name, kind, [int(d) for d in global_shape], start, shape, a)

    def add_bytes(self, name: Name, value: bytes) -> None:
        """Adds a bytes value (SPEC.md 6.1): arbitrary bytes under ``name`` (serialized state,
        a tokenizer, RNG state), listed with dtype ``bytes``."""
        self._w.add_bytes(name, bytes(value))

    def set_metadata(self, metadata: Dict[str, Any]) -> None:
        """The shard's metadata (the merged checkpoint's is the shards' with the merge's over
        it; shards must agree where they share a key)."""
        self._w.set_metadata(dict(metadata))

    def finish(self) -> Dict[str, int]:
        """Finishes the shard; returns counts (``tensors``, ``slices``, ``file_len``,
        ``index_len``, ``reused_tensors``, ``reused_bytes``)."""
        return self._w.finish()

    def abort(self) -> None:
        """Abandons the shard: nothing is left under a name the merge takes."""
        self._w.abort()

    def __len__(self) -> int:
        return len(self._w)

    def __enter__(self) -> "ShardWriter":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.finish()
        else:
            self.abort()


def merge_shards(
    prefix: Any,
    save_id: Optional[str] = None,
    num_shards: Optional[int] = None,
    metadata: Optional[Dict[str, Any]] = None,
    sync: bool = True,
) -> Dict[str, Any]:
    """Commits the save whose shards are finished at ``prefix``: reads only their footers and
    indexes, checks them (a missing shard, overlapping or uncovering slices, a shard of another
    save: :class:`ShardError` / :class:`SliceError`, nothing changed), and writes the index last.
    ``save_id`` picks the save when shards of several are pending; ``num_shards`` is the number
    of writers; ``metadata`` is set over the shards' own. Returns counts and the ``save_id``."""
    return _paramdex.merge_shards(
        _prefix(prefix), save_id, num_shards, None if metadata is None else dict(metadata), sync
    )


def list_run(root: Any) -> Dict[str, Any]:
    """The checkpoints of a training run: the step directories of ``root`` (a directory or
    ``s3://bucket/dir``; ``step-60``, ``step_60``, ``checkpoint-60``, ``60``: a name ending in its
    step), complete or not, by step, and the latest complete one: the rule of
    ``paramdex ckpt ROOT`` (docs/checkpoints.md). A directory is complete when the file its
    writer puts there last is there (``dcp.index`` holding DCP's metadata for
    ``paramdex.torch.dcp``, ``.metadata`` for torch's ``FileSystemWriter``, ``PREFIX.index``,
    ``model.safetensors``).

    Returns ``{"dir", "latest", "checkpoints"}``: ``checkpoints`` a list of dicts (``step``,
    ``name``, ``path``, ``format``, ``complete``, ``why_not``, ``bytes``, ``modified``),
    ``latest`` the latest complete one's dict, or None."""
    r = _paramdex.list_run(_prefix(root))
    i = r["latest"]
    r["latest"] = None if i is None else r["checkpoints"][i]
    return r
