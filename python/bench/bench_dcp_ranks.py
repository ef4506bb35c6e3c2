"""paramdex.torch.dcp with several ranks: 2 ranks save SIZE MiB of large float32 tensors
(DTensor Shard(0)), 3 ranks load them resharded (Shard(1)); each against a plain write (each
rank its bytes to one file, fsynced) and a plain read (each rank a third of those bytes, page
cache warm as for the load) of the same bytes. gloo process groups on the CPU (spawn).

    PYTHONPATH=python python python/bench/bench_dcp_ranks.py [--mib 1024] [--dir D]
"""

import argparse
import datetime
import multiprocessing
import os
import shutil
import tempfile
import time
import warnings

TENSORS = 16


def _init(rank, world, store):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=600))
    return init_device_mesh("cpu", (world,))


def _shape(mib):
    rows = mib * (1 << 20) // TENSORS // 4 // 1024
    return (rows - rows % 6, 1024)  # divisible by 2 and 3 ranks


def save_job(rank, world, d, mib, out):
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor

    from paramdex.torch.dcp import StorageWriter

    mesh = _init(rank, world, os.path.join(d, "store-save"))
    shape = _shape(mib)
    state = {}
    for i in range(TENSORS):
        full = torch.empty(shape)
        # Only the local rows are filled (src_data_rank=None: no collective).
        state[f"layers.{i}.w"] = distribute_tensor(full, mesh, [Shard(0)], src_data_rank=None)
        state[f"layers.{i}.w"].to_local().normal_()
    dist.barrier()
    t0 = time.perf_counter()
    with open(os.path.join(d, f"plain-{rank}"), "wb") as f:
        for t in state.values():
            f.write(t.to_local().numpy().tobytes())
        f.flush()
        os.fsync(f.fileno())
    dist.barrier()
    t1 = time.perf_counter()
    dcp.save(state, storage_writer=StorageWriter(os.path.join(d, "ckpt")))
    dist.barrier()
    t2 = time.perf_counter()
    if rank == 0:
        out.put(("save", t1 - t0, t2 - t1))
    dist.destroy_process_group()


def load_job(rank, world, d, mib, out):
    warnings.filterwarnings("ignore")
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor

    from paramdex.torch.dcp import StorageReader

    mesh = _init(rank, world, os.path.join(d, "store-load"))
    shape = _shape(mib)
    state = {f"layers.{i}.w": distribute_tensor(torch.zeros(shape), mesh, [Shard(1)], src_data_rank=None)
             for i in range(TENSORS)}
    # The plain read: a third of the plain files' bytes per rank.
    files = sorted(f for f in os.listdir(d) if f.startswith("plain-"))
    total = sum(os.path.getsize(os.path.join(d, f)) for f in files)
    share = total // world
    buf = np.empty(share, np.uint8)
    dist.barrier()
    t0 = time.perf_counter()
    pos, got = rank * share, 0
    for f in files:
        size = os.path.getsize(os.path.join(d, f))
        if pos >= size:
            pos -= size
            continue
        with open(os.path.join(d, f), "rb", buffering=0) as fh:
            fh.seek(pos)
            n = min(size - pos, share - got)
            got += fh.readinto(memoryview(buf)[got:got + n])
        pos = 0
        if got >= share:
            break
    dist.barrier()
    t1 = time.perf_counter()
    dcp.load(state, storage_reader=StorageReader(os.path.join(d, "ckpt")))
    dist.barrier()
    t2 = time.perf_counter()
    if rank == 0:
        out.put(("load", t1 - t0, t2 - t1))
    dist.destroy_process_group()


def run(fn, world, d, mib, q):
    ctx = multiprocessing.get_context("spawn")
    ps = [ctx.Process(target=fn, args=(r, world, d, mib, q)) for r in range(world)]
    for p in ps:
        p.start()
    res = q.get(timeout=1800)
    for p in ps:
        p.join()
        assert p.exitcode == 0, p.exitcode
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    d = a.dir or tempfile.mkdtemp(prefix="bench_dcp_ranks_")
    q = multiprocessing.get_context("spawn").Queue()
    _, pw, ps = run(save_job, 2, d, a.mib, q)
    _, pr, pl = run(load_job, 3, d, a.mib, q)
    gib = TENSORS * _shape(a.mib)[0] * _shape(a.mib)[1] * 4 / (1 << 30)
    print(f"{gib:.2f} GiB in {TENSORS} float32 tensors; 2 ranks save (Shard(0)), 3 ranks load (Shard(1))")
    print(f"save:  plain write+fsync {pw:6.2f} s ({gib / pw:5.2f} GiB/s)   paramdex dcp.save {ps:6.2f} s "
          f"({gib / ps:5.2f} GiB/s)   {pw / ps * 100:5.1f} % of plain")
    print(f"load:  plain read        {pr:6.2f} s ({gib / pr:5.2f} GiB/s)   paramdex dcp.load {pl:6.2f} s "
          f"({gib / pl:5.2f} GiB/s)   {pr / pl * 100:5.1f} % of plain")
    if not a.dir:
        shutil.rmtree(d)


if __name__ == "__main__":
    main()
