"""paramdex.torch.dcp under torchrun (not collected by pytest: tests/interop/run.sh runs it).

    torchrun --standalone --nproc_per_node=2 torchrun_dcp.py save DIR
    torchrun --standalone --nproc_per_node=3 torchrun_dcp.py load DIR

The save job writes a DTensor sharded by rows, a replicated DTensor, a model, an Adam state after
step() and a non-tensor value through ``StorageWriter``; the load job, with another number of
ranks, loads them resharded through ``StorageReader`` and compares each with the values the save
job held; rank 0 also reads the checkpoint with ``paramdex.safe_open``. Any mismatch exits
non-zero (torchrun then fails)."""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import paramdex
from paramdex.torch.dcp import StorageReader, StorageWriter

FULL = torch.arange(12 * 10, dtype=torch.float32).reshape(12, 10)
REP = torch.arange(5, dtype=torch.float32) / 4


def trained(seed):
    """A small model and its Adam state after one step (the same values in every process)."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 6)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    model(torch.ones(2, 8)).sum().backward()
    opt.step()
    return model, opt


def main(mode, where):
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    model, opt = trained(0)
    if mode == "save":
        state = {
            "emb": distribute_tensor(FULL, mesh, [Shard(0)], src_data_rank=None),
            "rep": distribute_tensor(REP, mesh, [Replicate()], src_data_rank=None),
            "model": model.state_dict(),
            "optim": opt.state_dict(),
            "extra": {"step": 7, "name": "run-1"},
        }
        dcp.save(state, storage_writer=StorageWriter(where))
    else:
        other, other_opt = trained(5)
        state = {
            "emb": distribute_tensor(torch.zeros(12, 10), mesh, [Shard(0)], src_data_rank=None),
            "rep": distribute_tensor(torch.zeros(5), mesh, [Replicate()], src_data_rank=None),
            "model": other.state_dict(),
            "optim": other_opt.state_dict(),
            "extra": {"step": 0, "name": ""},
        }
        dcp.load(state, storage_reader=StorageReader(where))
        assert torch.equal(state["emb"].full_tensor(), FULL)
        assert torch.equal(state["rep"].full_tensor(), REP)
        for k, v in model.state_dict().items():
            assert torch.equal(state["model"][k], v), k
        want = opt.state_dict()["state"]
        got = state["optim"]["state"]
        for p, s in want.items():
            for k in ("exp_avg", "exp_avg_sq"):
                assert torch.equal(got[p][k], s[k]), (p, k)
        assert state["extra"] == {"step": 7, "name": "run-1"}, state["extra"]
        if dist.get_rank() == 0:
            with paramdex.safe_open(where, framework="pt") as f:
                assert torch.equal(f.get_tensor("emb"), FULL)
                assert "optim.state.0.exp_avg" in f.keys(), f.keys()
    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: {mode} ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    # Every check has passed and the process group is destroyed. Leave without the
    # interpreter's teardown: torch's gloo threads have aborted a rank there ("terminate called
    # without an active exception", SIGABRT after "load ok"; once in a CI run, never in 4 local
    # runs), which says nothing of the checkpoint this test checks.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
