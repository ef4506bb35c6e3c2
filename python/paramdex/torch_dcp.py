"""PyTorch distributed checkpoints (``torch.distributed.checkpoint``, DCP) stored as paramdex
sharded checkpoints: :class:`StorageWriter` and :class:`StorageReader`, reachable as
``paramdex.torch.dcp``::

    import torch.distributed.checkpoint as dcp
    from paramdex.torch.dcp import StorageReader, StorageWriter

    dcp.save(state, storage_writer=StorageWriter("ckpt/step-100"))
    dcp.load(state, storage_reader=StorageReader("ckpt/step-100"))

**Layout.** ``checkpoint_id`` is a directory (or ``s3://bucket/dir``). Each rank writes one shard
of a paramdex sharded checkpoint (SPEC.md 12) at the prefix ``DIR/dcp``: its DTensor chunks as
slices of the global tensors (SPEC.md 13), whole tensors whole, and DCP's non-tensor items
(``BYTE_IO``: optimizer ``param_groups``, step counts, RNG states) as bytes values (SPEC.md
6.1), so the tools list them as ``bytes``. The coordinator's :meth:`StorageWriter.finish` is
the index-only merge (``paramdex.merge_shards``): the shards' indexes are merged into
``DIR/dcp.index``, written last, so a crash anywhere leaves the previous checkpoint or none.
Locally it then writes TensorFlow's ``DIR/checkpoint`` state file naming ``dcp``, so that
``paramdex ls DIR``, ``paramdex.safe_open(DIR)`` and ``tf.train.load_checkpoint(DIR)`` read the
tensors under their DCP names.

**Metadata without pickle.** Each tensor's dtype and global shape come from the paramdex index.
DCP's bytes items are the bytes values. The rest of its ``Metadata`` (version, the planner's
flattening map, storage metadata) is one JSON document in the checkpoint's metadata (key ``dcp``), the
flattening map zlib-compressed; :meth:`StorageReader.read_metadata` checks every field and
refuses anything malformed (:class:`paramdex.CorruptError`). Every tensor is described to DCP
as one chunk covering it: paramdex reads any region of a global tensor whatever slices hold it,
so a checkpoint saved by 4 ranks loads on 3 (or 1) with DCP's default planners.

**Loading.** :meth:`StorageReader.read_data` hands every tensor request of the rank's plan to
paramdex at once (``RegionReader.read_into``): sorted by tensor and position, read on several
threads without the GIL (the local files mapped, a bucket's objects by ranged GETs), every stored
tensor or slice read from checked against its CRC32C, and copied into the destination tensors.

**Crashes.** The coordinator's own shard carries DCP's metadata document too (and every
shard its scalar non-tensor items, a step or an epoch, as metadata, which ``paramdex meta``
shows): a save whose coordinator died after the shards were written but before ``finish`` is
committed whole by ``paramdex merge-shards DIR/dcp`` and then loads.

**Runs.** :meth:`StorageReader.latest` opens the latest complete checkpoint of a run root of
step directories (``runs/step-60``), by the rule of ``paramdex ckpt ROOT`` and
:func:`paramdex.list_run`.

**Out to one file.** :func:`dcp_to_torch_save` and :func:`torch_save_to_dcp` are torch's
``format_utils`` functions for these checkpoints; ``paramdex convert DIR out --to safetensors
--max-shard-size 5GB --strip-prefix model.`` writes a Hugging Face model directory.

**Incremental saves.** ``StorageWriter(DIR, base=EARLIER_DIR)`` refers to the tensors and slices
the earlier local checkpoint holds byte-identical instead of writing them (SPEC.md 12.5).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import uuid
import warnings
import zlib
from torch.futures import Future
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch
from torch.distributed.checkpoint import StorageReader as _TorchStorageReader
from torch.distributed.checkpoint import StorageWriter as _TorchStorageWriter
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import WriteResult

from . import _paramdex
from .errors import CorruptError, NotFoundError
from .sharded import list_run, new_save_id
from .torch import _FROM_TORCH, TORCH_DTYPES

__all__ = [
    "StorageWriter",
    "StorageReader",
    "PREFIX_NAME",
    "METADATA_KEY",
    "dcp_to_torch_save",
    "torch_save_to_dcp",
]

#: The name of the sharded checkpoint's prefix in the checkpoint directory.
PREFIX_NAME = "dcp"
#: The checkpoint metadata key holding DCP's metadata (JSON).
METADATA_KEY = "dcp"
#: The version of that JSON document.
FORMAT = "paramdex-dcp/1"
# Bounds on what the reader accepts from a checkpoint's metadata.
_MAX_JSON = 64 << 20
_MAX_PLANNER = 256 << 20
# Bounds on the scalar items a shard also keeps as metadata (see _scalar_of).
_MAX_SCALARS = 256
_MAX_SCALAR_KEY = 256
_MAX_SCALAR_STR = 256


def _is_url(p: str) -> bool:
    return "://" in p


def _dir_of(checkpoint_id: Union[str, os.PathLike]) -> str:
    p = checkpoint_id if isinstance(checkpoint_id, str) else os.fspath(checkpoint_id)
    if not p:
        raise ValueError("a checkpoint_id is a directory or an s3:// URL, not empty")
    return p


def _prefix_of(d: str) -> str:
    return f"{d.rstrip('/')}/{PREFIX_NAME}" if _is_url(d) else os.path.join(d, PREFIX_NAME)


def _prefix_of_base(base: Any) -> Optional[str]:
    if base is None:
        return None
    if isinstance(base, StorageWriter):
        return base.prefix
    return _prefix_of(_dir_of(base))


@dataclass(frozen=True)
class _RankStorage:
    """What the coordinator tells each rank in its plan: the save and its shard number."""

    save_id: str
    shard: int
    shards: int


def _flat_bytes(t: torch.Tensor) -> Tuple[np.ndarray, str, List[int]]:
    """(uint8 C-contiguous array of the bytes, paramdex dtype name, shape) of a tensor (moved
    to the CPU, made contiguous: DCP may hand over views and device tensors)."""
    kind = _FROM_TORCH.get(t.dtype)
    if kind is None:
        raise TypeError(f"paramdex cannot store torch dtype {t.dtype}")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    shape = [int(d) for d in t.shape]
    a = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.empty(0, np.uint8)
    return a, kind, shape


class StorageWriter(_TorchStorageWriter):
    """Saves a DCP checkpoint as a paramdex sharded checkpoint in the directory (or
    ``s3://bucket/dir``) ``checkpoint_id``.

    ``base``: an earlier checkpoint of this writer (its directory or ``s3://`` URL, or its
    writer), whose unchanged tensors and slices the new one refers to instead of writing
    (SPEC.md 12.5): a local one for a local checkpoint (its files hard-linked), one in the same
    bucket for a bucket's (its data objects copied by the store, server-side).
    ``sync``: fsync the files (off only for tests and benchmarks that say so).
    ``compress="lossless"``: store the tensor data compressed (SPEC.md 3.4); readers need no
    option.
    """

    def __init__(
        self,
        checkpoint_id: Union[str, os.PathLike],
        base: Any = None,
        sync: bool = True,
        compress: Optional[str] = None,
    ) -> None:
        super().__init__()
        self._set_id(checkpoint_id)
        self.base = _prefix_of_base(base)
        if self.base is not None and _is_url(self.prefix) != _is_url(self.base):
            raise ValueError(
                "an incremental save (base=) reuses a checkpoint of the same kind of place: a "
                "local base for a local checkpoint, one in the same bucket for a bucket's "
                "(whose data objects the store copies)"
            )
        self.sync = sync
        self.compress = compress
        self.is_coordinator = False
        self.save_id = str(uuid.uuid4())
        self._save: Optional[str] = None
        self._plan_metadata: Optional[Metadata] = None

    def _set_id(self, checkpoint_id: Union[str, os.PathLike]) -> None:
        self.checkpoint_id = _dir_of(checkpoint_id)
        self.prefix = _prefix_of(self.checkpoint_id)

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        if checkpoint_id is not None:
            self._set_id(checkpoint_id)
        self.save_id = str(uuid.uuid4())

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        if kwargs.get("use_collectives") is False:
            raise ValueError(
                "paramdex's StorageWriter needs the collectives (use_collectives=True): the "
                "coordinator merges every rank's shard into one checkpoint"
            )

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.checkpoint_id, save_id=self.save_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        if not _is_url(self.checkpoint_id):
            os.makedirs(self.checkpoint_id, exist_ok=True)
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        save_id = new_save_id()
        self._save = save_id
        self._plan_metadata = _metadata_of_plans(plans)
        n = len(plans)
        out = []
        seen: set = set()
        for i, p in enumerate(plans):
            # A planner that does not deduplicate replicated items: the first rank's copy is
            # saved (two shards may not hold the same tensor or overlapping slices).
            items = []
            for item in p.items:
                key = (item.index.fqn, tuple(item.index.offset or ()))
                if key in seen:
                    continue
                seen.add(key)
                items.append(item)
            out.append(
                SavePlan(
                    items=items,
                    storage_data=_RankStorage(save_id, i, n),
                    planner_data=p.planner_data,
                    usable=p.usable,
                )
            )
        return out

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(self._write(plan, planner))
        except BaseException as e:  # handed to DCP, which raises it on every rank
            fut.set_exception(e)
        return fut

    def _write(self, plan: SavePlan, planner: SavePlanner) -> List[WriteResult]:
        st = plan.storage_data
        if not isinstance(st, _RankStorage):
            raise ValueError("the plan carries no paramdex storage data (prepare_global_plan)")
        w = _paramdex.ShardWriter(
            self.prefix, st.shard, st.shards, st.save_id, self.base, self.sync, self.compress
        )
        results = []
        meta: Dict[str, Any] = {}
        try:
            for item in plan.items:
                data = planner.resolve_data(item)
                name = item.index.fqn
                if item.type == WriteItemType.BYTE_IO:
                    raw = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data.read())
                    w.add_bytes(name, raw)
                    n = len(raw)
                    v = _scalar_of(planner, name)
                    if v is not None and len(meta) < _MAX_SCALARS:
                        meta[name] = v
                else:
                    a, kind, shape = _flat_bytes(data)
                    td = item.tensor_data
                    size = [int(d) for d in td.size]
                    start = [int(o) for o in td.chunk.offsets]
                    if len(start) != len(shape):
                        raise ValueError(f"{name}: chunk of rank {len(shape)} at {start}")
                    w.add_slice(name, kind, size, start, shape, a)
                    n = a.nbytes
                results.append(WriteResult(index=item.index, size_in_bytes=n, storage_data=None))
            if self.is_coordinator:
                # DCP's metadata rides in the coordinator's shard too: a save whose
                # coordinator died after its shard was written but before finish is committed
                # whole by a manual `paramdex merge-shards DIR/dcp` (finish sets the same key
                # over it).
                meta[METADATA_KEY] = self._carried_doc(planner)
            if meta:
                w.set_metadata(meta)
            w.finish()
        except BaseException:
            w.abort()
            raise
        return results

    def _carried_doc(self, planner: SavePlanner) -> str:
        """The metadata document the coordinator's shard carries: of the global metadata
        DCP's planners keep (``DefaultSavePlanner.metadata``, what ``finish`` is given), else of
        the global plan (the same fields, as the default planner derives them)."""
        md = getattr(planner, "metadata", None)
        if not isinstance(md, Metadata):
            md = self._plan_metadata
        if md is None:
            raise ValueError("the coordinator has no global plan (prepare_global_plan)")
        if md.storage_meta is None:
            md = dataclasses.replace(md, storage_meta=self.storage_meta())
        return _metadata_doc(md)

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        doc = _metadata_doc(metadata)
        # The save id this coordinator chose in prepare_global_plan: shards a killed earlier
        # save left pending at the prefix are not taken.
        _paramdex.merge_shards(
            self.prefix, self._save, len(results), {METADATA_KEY: doc}, self.sync
        )
        if not _is_url(self.checkpoint_id):
            _write_state_file(self.checkpoint_id, self.sync)

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        try:
            _dir_of(checkpoint_id)
        except (TypeError, ValueError):
            return False
        return True


def _scalar_of(planner: SavePlanner, fqn: str) -> Any:
    """The non-tensor item ``fqn`` when it is a scalar (a bool, an int of 64 bits, a float, a
    short str: a step, an epoch, a learning rate), read from the state dict DCP's default
    planners keep (flattened); None otherwise. Saved as metadata too, as paramdex lists a
    torch-written checkpoint's (``paramdex meta``)."""
    sd = getattr(planner, "state_dict", None)
    if not isinstance(sd, dict) or fqn == METADATA_KEY or len(fqn) > _MAX_SCALAR_KEY:
        return None
    v = sd.get(fqn)
    if isinstance(v, bool) or isinstance(v, float):
        return v
    if isinstance(v, int):
        return v if -(1 << 63) <= v < (1 << 63) else None
    if isinstance(v, str):
        return v if len(v) <= _MAX_SCALAR_STR else None
    return None


def _metadata_of_plans(plans: List[SavePlan]) -> Metadata:
    """What DCP's default planner puts in the global ``Metadata`` that :func:`_metadata_doc`
    keeps, derived from the global plan (for planners that keep no ``metadata``): each
    tensor's properties, the ranks' flattening maps merged."""
    sdm: Dict[str, Any] = {}
    merged: Dict[str, Any] = {}
    mappings_ok = True
    for p in plans:
        for item in p.items:
            td = item.tensor_data
            if td is not None and item.index.fqn not in sdm:
                sdm[item.index.fqn] = TensorStorageMetadata(
                    properties=td.properties, size=td.size, chunks=[]
                )
        if isinstance(p.planner_data, dict):
            merged.update(p.planner_data)
        elif p.planner_data is not None:
            mappings_ok = False
    return Metadata(state_dict_metadata=sdm, planner_data=merged if mappings_ok and merged else None)


def _planner_data_json(pd: Any) -> Optional[bytes]:
    """DCP's default planners' flattening map (fqn -> path of keys) as compressed JSON, or
    None when there is none or it is not of that shape (then it is not kept, with a warning)."""
    if pd is None:
        return None
    ok = isinstance(pd, dict) and all(
        isinstance(k, str)
        and isinstance(v, (tuple, list))
        and all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in v)
        for k, v in pd.items()
    )
    if not ok:
        warnings.warn(
            "paramdex.torch.dcp keeps the planner data of DCP's default planners (a map of "
            "names to key paths) and no other: this planner's data is not saved",
            stacklevel=3,
        )
        return None
    # Paths equal to the fqn split at its dots are the common case; they are stored as 1.
    enc = {}
    for k, v in pd.items():
        parts = [str(x) for x in v]
        if all(isinstance(x, str) for x in v) and parts == k.split("."):
            enc[k] = 1
        else:
            enc[k] = list(v)
    return zlib.compress(json.dumps(enc, separators=(",", ":")).encode(), 6)


def _metadata_doc(metadata: Metadata) -> str:
    """The JSON document of DCP's ``Metadata`` beyond what the paramdex index says."""
    props = {}
    for k, v in metadata.state_dict_metadata.items():
        if isinstance(v, TensorStorageMetadata):
            p = v.properties
            flags = {}
            if p.requires_grad:
                flags["requires_grad"] = True
            if p.pin_memory:
                flags["pin_memory"] = True
            if flags:
                props[k] = flags
    sm = metadata.storage_meta
    doc: Dict[str, Any] = {
        "format": FORMAT,
        "version": metadata.version,
        "properties": props,
        "storage_meta": None
        if sm is None
        else {
            "checkpoint_id": None if sm.checkpoint_id is None else os.fspath(sm.checkpoint_id),
            "save_id": sm.save_id,
            "modules": list(sm.modules),
        },
    }
    pd = _planner_data_json(metadata.planner_data)
    if pd is not None:
        doc["planner_data_zlib_hex"] = pd.hex()
    return json.dumps(doc, separators=(",", ":"))


def _write_state_file(d: str, sync: bool) -> None:
    """TensorFlow's ``checkpoint`` state file naming the prefix (``tf.train.load_checkpoint(DIR)``
    and ``tf.train.latest_checkpoint(DIR)`` find it), replaced in one rename, if not there."""
    text = f'model_checkpoint_path: "{PREFIX_NAME}"\nall_model_checkpoint_paths: "{PREFIX_NAME}"\n'
    path = os.path.join(d, "checkpoint")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return
    except OSError:
        pass
    tmp = os.path.join(d, f".checkpoint.{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)


def _bad(where: str, what: str) -> CorruptError:
    return CorruptError(f"{where}: DCP metadata (key {METADATA_KEY!r}): {what}")


def _parse_doc(where: str, meta: Dict[str, Any]) -> Dict[str, Any]:
    raw = meta.get(METADATA_KEY)
    if raw is None:
        raise _bad(where, "missing: not a checkpoint saved by paramdex.torch.dcp.StorageWriter")
    if not isinstance(raw, str) or len(raw) > _MAX_JSON:
        raise _bad(where, f"not a JSON text of at most {_MAX_JSON} bytes")
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise _bad(where, f"not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _bad(where, f"not a {FORMAT} document")
    if not (doc.get("version") is None or isinstance(doc["version"], str)):
        raise _bad(where, "'version' is not a string")
    props = doc.get("properties")
    if not isinstance(props, dict) or not all(
        isinstance(k, str)
        and isinstance(v, dict)
        and set(v) <= {"requires_grad", "pin_memory"}
        and all(isinstance(x, bool) for x in v.values())
        for k, v in props.items()
    ):
        raise _bad(where, "'properties' is not a map of names to flags")
    sm = doc.get("storage_meta")
    if sm is not None:
        if not (
            isinstance(sm, dict)
            and set(sm) <= {"checkpoint_id", "save_id", "modules"}
            and all(sm.get(k) is None or isinstance(sm[k], str) for k in ("checkpoint_id", "save_id"))
            and isinstance(sm.get("modules", []), list)
            and all(isinstance(m, str) for m in sm.get("modules", []))
        ):
            raise _bad(where, "'storage_meta' is malformed")
    pd = doc.get("planner_data_zlib_hex")
    if pd is not None:
        if not isinstance(pd, str):
            raise _bad(where, "'planner_data_zlib_hex' is not a string")
        try:
            z = zlib.decompressobj()
            text = z.decompress(bytes.fromhex(pd), _MAX_PLANNER)
            if z.unconsumed_tail or not z.eof:
                raise _bad(where, f"the planner data is damaged or over {_MAX_PLANNER} bytes")
            enc = json.loads(text)
        except (ValueError, zlib.error) as e:
            raise _bad(where, f"the planner data is damaged ({e})") from None
        if not isinstance(enc, dict):
            raise _bad(where, "the planner data is not a map")
        out = {}
        for k, v in enc.items():
            if v == 1 and not isinstance(v, bool):
                out[k] = tuple(k.split("."))
            elif isinstance(v, list) and all(
                isinstance(x, (str, int)) and not isinstance(x, bool) for x in v
            ):
                out[k] = tuple(v)
            else:
                raise _bad(where, f"the planner data's path of {k!r} is malformed")
        doc["planner_data"] = out
    else:
        doc["planner_data"] = None
    return doc


def _what_is_there(d: str) -> Optional[str]:
    """What the local path ``d`` given as a ``checkpoint_id`` holds instead of a checkpoint of
    :class:`StorageWriter`, and what to give instead (None when there is nothing to add)."""
    if _is_url(d):
        return None
    if d.endswith(".index") and os.path.isfile(d):
        return (
            f"{d} is the index file: give its directory "
            f"({os.path.dirname(d) or '.'!r}) as the checkpoint_id"
        )
    if not os.path.isdir(d):
        return None
    if os.path.isfile(os.path.join(d, ".metadata")):
        return (
            f"{d} is a checkpoint of torch's FileSystemWriter (it holds .metadata): load it with "
            "torch.distributed.checkpoint.FileSystemReader"
        )
    try:
        run = list_run(d)
    except Exception:
        return None
    if run["checkpoints"]:
        latest = run["latest"]
        return (
            f"{d} is the root of a run of {len(run['checkpoints'])} step directories: give one of "
            "them, or StorageReader.latest(ROOT)"
            + (f" (the latest complete: {latest['path']})" if latest else "")
        )
    return None


class StorageReader(_TorchStorageReader):
    """Loads a DCP checkpoint saved by :class:`StorageWriter` from the directory (or
    ``s3://bucket/dir``) ``checkpoint_id``, resharded to whatever the loading ranks hold.
    ``threads``: reading threads per rank (0: one per core, at most 8)."""

    def __init__(self, checkpoint_id: Union[str, os.PathLike], threads: int = 0) -> None:
        super().__init__()
        self.threads = threads
        self._reader: Any = None
        self._set_id(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    @classmethod
    def latest(cls, root: Union[str, os.PathLike], threads: int = 0) -> "StorageReader":
        """A reader of the latest complete checkpoint of the run ``root`` (a directory or
        ``s3://bucket/dir`` of step directories, ``step-60``, ...): the one
        ``paramdex ckpt ROOT`` and :func:`paramdex.list_run` name, by the same rule. What a job
        resuming after a crash calls::

            reader = StorageReader.latest("runs/")
            dcp.load(state, storage_reader=reader)
            step = int(os.path.basename(reader.checkpoint_id).rsplit("-", 1)[-1])

        Raises :class:`paramdex.NotFoundError` when no step directory is complete, and
        ``ValueError`` when the latest complete one was written by another writer than
        :class:`StorageWriter` (torch's ``FileSystemReader`` reads a ``torch-dcp`` one)."""
        run = list_run(root)
        c = run["latest"]
        if c is None:
            seen = ", ".join(
                f"{x['name']} ({x['why_not']})" for x in run["checkpoints"][-3:]
            )
            raise NotFoundError(
                f"{run['dir']}: no complete checkpoint in this run"
                + (f"; the last step directories: {seen}" if seen else ": no step directories")
            )
        if c["format"] != "paramdex-dcp":
            raise ValueError(
                f"{c['path']}: the latest complete checkpoint of {run['dir']} is a {c['format']} "
                "checkpoint, not one of paramdex.torch.dcp.StorageWriter"
                + (
                    ": torch's FileSystemReader reads it"
                    if c["format"] == "torch-dcp"
                    else ""
                )
            )
        return cls(c["path"], threads=threads)

    def _set_id(self, checkpoint_id: Union[str, os.PathLike]) -> None:
        self.checkpoint_id = _dir_of(checkpoint_id)
        self.prefix = _prefix_of(self.checkpoint_id)
        self._reader = None

    def reset(self, checkpoint_id: Union[str, os.PathLike, None] = None) -> None:
        if checkpoint_id is not None:
            self._set_id(checkpoint_id)
        self.load_id = str(uuid.uuid4())

    def _open(self) -> Any:
        if self._reader is None:
            try:
                self._reader = _paramdex.RegionReader(self.prefix)
            except Exception as e:
                hint = _what_is_there(self.checkpoint_id)
                if hint is None:
                    raise
                raise type(e)(f"{e}; {hint}") from e
        return self._reader

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        r = self._open()
        doc = _parse_doc(self.prefix, r.metadata())
        props = doc["properties"]
        sdm: Dict[str, Any] = {}
        # Tensors of one dtype, shape and flags share one (read-only) description: building
        # DCP's dataclasses is most of this method's time.
        made: Dict[Tuple[Any, ...], TensorStorageMetadata] = {}
        bytes_md = BytesStorageMetadata()
        for raw, kind, shape in r.tensors():
            try:
                name = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise _bad(self.prefix, f"tensor name {raw!r} is not UTF-8") from None
            if kind == "bytes":
                sdm[name] = bytes_md
                continue
            flags = props.get(name)
            key = (kind, tuple(shape), None if flags is None else tuple(sorted(flags.items())))
            md = made.get(key)
            if md is None:
                dt = TORCH_DTYPES.get(kind)
                if dt is None:
                    raise _bad(self.prefix, f"tensor {name!r} has dtype {kind}, which torch lacks")
                flags = flags or {}
                size = torch.Size(shape)
                md = made[key] = TensorStorageMetadata(
                    properties=TensorProperties(
                        dtype=dt,
                        requires_grad=flags.get("requires_grad", False),
                        pin_memory=flags.get("pin_memory", False),
                    ),
                    size=size,
                    chunks=[ChunkStorageMetadata(offsets=torch.Size([0] * len(shape)), sizes=size)],
                )
            sdm[name] = md
        sm = doc["storage_meta"]
        storage_meta = StorageMeta(
            checkpoint_id=None if sm is None else sm.get("checkpoint_id"),
            save_id=None if sm is None else sm.get("save_id"),
            load_id=self.load_id,
            modules=[] if sm is None else list(sm.get("modules", [])),
        )
        return Metadata(
            state_dict_metadata=sdm,
            planner_data=doc["planner_data"],
            storage_data=None,
            storage_meta=storage_meta,
            version=doc["version"],
        )

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        fut: Future = Future()
        try:
            self._read(plan, planner)
            fut.set_result(None)
        except BaseException as e:
            fut.set_exception(e)
        return fut

    def _read(self, plan: LoadPlan, planner: LoadPlanner) -> None:
        r = self._open()
        names, starts, lens, arrays = [], [], [], []
        # (request, destination tensor, staging tensor or None)
        tensors = []
        byte_reqs = []
        for req in plan.items:
            if req.type == LoadItemType.BYTE_IO:
                byte_reqs.append(req)
                continue
            fqn = req.storage_index.fqn
            base = [int(x) for x in (req.storage_index.offset or [])]
            so = [int(x) for x in req.storage_offsets]
            ln = [int(x) for x in req.lengths]
            # The region in the global tensor's coordinates (read_metadata describes each tensor
            # as one chunk at 0, but a planner may name any chunk).
            start = [b + s for b, s in zip(base, so)] if base else so
            target = planner.resolve_tensor(req).detach()
            if list(target.shape) != ln:
                raise ValueError(
                    f"{fqn}: DCP asks for lengths {ln} into a tensor of shape {list(target.shape)}"
                )
            staged = None
            dst = target
            if target.device.type != "cpu" or not target.is_contiguous():
                staged = dst = torch.empty(ln, dtype=target.dtype)
            a = dst.reshape(-1).view(torch.uint8).numpy() if dst.numel() else np.empty(0, np.uint8)
            tensors.append((req, target, staged))
            names.append(fqn)
            starts.append(start)
            lens.append(ln)
            arrays.append(a)
        if names:
            r.read_into(names, starts, lens, arrays, self.threads)
        for req, target, staged in tensors:
            if staged is not None:
                target.copy_(staged)
            planner.commit_tensor(req, target)
        if byte_reqs:
            values = r.read_bytes([req.storage_index.fqn for req in byte_reqs])
            for req, v in zip(byte_reqs, values):
                planner.load_bytes(req, io.BytesIO(v))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: Union[str, os.PathLike]) -> bool:
        try:
            d = _dir_of(checkpoint_id)
        except (TypeError, ValueError):
            return False
        return _is_url(d) or os.path.exists(_prefix_of(d) + ".index")


def dcp_to_torch_save(
    dcp_checkpoint_dir: Union[str, os.PathLike], torch_save_path: Union[str, os.PathLike]
) -> None:
    """Writes the checkpoint saved by :class:`StorageWriter` in ``dcp_checkpoint_dir`` (a
    directory or ``s3://bucket/dir``) as one ``torch.save`` file ``torch_save_path``: every
    tensor whole, the state dict nested as it was saved (DCP's flattening undone). What
    ``torch.distributed.checkpoint.format_utils.dcp_to_torch_save`` does for a
    ``FileSystemWriter`` directory, in one process, without a process group. The file is
    written under a temporary name and renamed into place."""
    # What torch's format_utils.dcp_to_torch_save calls (dcp.load keeps only the keys the
    # state dict it is given holds: none here).
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    sd: Dict[str, Any] = {}
    _load_state_dict(
        sd,
        storage_reader=StorageReader(dcp_checkpoint_dir),
        planner=_EmptyStateDictLoadPlanner(),
        no_dist=True,
    )
    out = os.fspath(torch_save_path)
    tmp = os.path.join(os.path.dirname(out) or ".", f".{os.path.basename(out)}.{uuid.uuid4().hex}.tmp")
    try:
        torch.save(sd, tmp)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def torch_save_to_dcp(
    torch_save_path: Union[str, os.PathLike],
    dcp_checkpoint_dir: Union[str, os.PathLike],
    weights_only: bool = True,
) -> None:
    """Saves the state dict of the ``torch.save`` file ``torch_save_path`` as a checkpoint of
    :class:`StorageWriter` in ``dcp_checkpoint_dir`` (a directory or ``s3://bucket/dir``), in
    one process: what ``torch.distributed.checkpoint.format_utils.torch_save_to_dcp`` does for
    ``FileSystemWriter``. ``weights_only``: load the file with torch's restricted unpickler
    (the default; ``False`` runs whatever the pickle names: only for files you trust)."""
    import torch.distributed.checkpoint as dcp

    state_dict = torch.load(os.fspath(torch_save_path), weights_only=weights_only)
    if not isinstance(state_dict, dict):
        raise ValueError(
            f"{os.fspath(torch_save_path)}: holds a {type(state_dict).__name__}, not a state dict"
        )
    dcp.save(state_dict, storage_writer=StorageWriter(dcp_checkpoint_dir), no_dist=True)
