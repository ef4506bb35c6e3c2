"""paramdex.torch.dcp against torch's FileSystemWriter/FileSystemReader, one process
(``no_dist=True``), N small tensors (16 float32 each, as the issue's figures), DCP's default
planners for both. Also measures DCP's own cost: a storage writer/reader that stores nothing.

    PYTHONPATH=python python python/bench/bench_dcp.py [--tensors 20000] [--repeat 3] [--dir D]

Prints, per backend: best save and load wall time over the repeats, the checkpoint's bytes
beyond the tensor data per tensor, and (paramdex) the index file's bytes per tensor. Files are
fsynced by both (FileSystemWriter's sync_files=True default; paramdex's sync=True default).
"""

import argparse
import os
import shutil
import tempfile
import time
import warnings

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.storage import StorageReader as _SR
from torch.distributed.checkpoint.storage import StorageWriter as _SW
from torch.distributed.checkpoint.storage import WriteResult
from torch.futures import Future

from paramdex.torch.dcp import StorageReader, StorageWriter

warnings.filterwarnings("ignore")


class NullWriter(_SW):
    """Writes nothing: what DCP's planning and bookkeeping cost on their own."""

    def __init__(self):
        super().__init__()
        self.metadata = None

    def reset(self, checkpoint_id=None):
        pass

    def set_up_storage_writer(self, is_coordinator, *args, **kwargs):
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def write_data(self, plan, planner):
        res = []
        for item in plan.items:
            planner.resolve_data(item)
            res.append(WriteResult(index=item.index, size_in_bytes=0, storage_data=None))
        f = Future()
        f.set_result(res)
        return f

    def finish(self, metadata, results):
        self.metadata = metadata

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return True


class NullReader(_SR):
    """Hands DCP the metadata NullWriter kept and reads nothing."""

    def __init__(self, metadata):
        super().__init__()
        self.md = metadata

    def reset(self, checkpoint_id=None):
        pass

    def read_metadata(self, *args, **kwargs):
        return self.md

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        pass

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        for req in plan.items:
            planner.commit_tensor(req, planner.resolve_tensor(req))
        f = Future()
        f.set_result(None)
        return f

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return True


def du(path):
    return sum(
        os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(path) for f in fs
    )


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    n = a.tensors
    g = torch.Generator().manual_seed(0)
    state = {f"model.layers.{i // 8}.p{i % 8}": torch.randn(16, generator=g) for i in range(n)}
    data = sum(t.numel() * t.element_size() for t in state.values())
    root = a.dir or tempfile.mkdtemp(prefix="bench_dcp_")

    def dest():
        return {k: torch.empty_like(v) for k, v in state.items()}

    rows = []

    def run(name, make_writer, make_reader, path):
        saves, loads = [], []
        for _ in range(a.repeat):
            if path and os.path.exists(path):
                shutil.rmtree(path)
            w = make_writer(path)
            t0 = time.perf_counter()
            dcp.save(state, storage_writer=w, no_dist=True)
            saves.append(time.perf_counter() - t0)
            d = dest()
            r = make_reader(path, w)
            t0 = time.perf_counter()
            dcp.load(d, storage_reader=r, no_dist=True)
            loads.append(time.perf_counter() - t0)
            if path:
                k = next(iter(state))
                assert torch.equal(d[k], state[k])
        size = du(path) if path else 0
        extra = (size - data) / n if path else 0
        idx = None
        if name == "paramdex":
            idx = os.path.getsize(os.path.join(path, "dcp.index")) / n
        elif name.startswith("FileSystem"):
            idx = os.path.getsize(os.path.join(path, ".metadata")) / n
        rows.append((name, min(saves), min(loads), extra, idx))

    run("DCP only (writes/reads nothing)", lambda p: NullWriter(), lambda p, w: NullReader(w.metadata), None)
    run(
        "FileSystemWriter/Reader",
        lambda p: FileSystemWriter(p),
        lambda p, w: FileSystemReader(p),
        os.path.join(root, "fs"),
    )
    run(
        "paramdex",
        lambda p: StorageWriter(p),
        lambda p, w: StorageReader(p),
        os.path.join(root, "pdx"),
    )
    print(f"{n} tensors of 16 x f32, one process (no_dist=True), best of {a.repeat}, torch {torch.__version__}")
    print(f"{'backend':34} {'save s':>8} {'load s':>8} {'B/tensor beyond data':>22} {'index/.metadata B/tensor':>26}")
    for name, s, l, extra, idx in rows:
        print(f"{name:34} {s:8.2f} {l:8.2f} {extra:22.1f} {'' if idx is None else f'{idx:.1f}':>26}")
    if not a.dir:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
