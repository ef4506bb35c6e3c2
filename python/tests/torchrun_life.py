"""A training run's whole life on paramdex: train, save, async save, resume from the latest
complete checkpoint (on any number of ranks), export. Run it under torchrun:

    torchrun --standalone --nproc_per_node=2 torchrun_life.py runs/ 20
    torchrun --standalone --nproc_per_node=3 torchrun_life.py runs/ 40
"""

import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

import paramdex
from paramdex.torch.dcp import StorageReader, StorageWriter, dcp_to_torch_save


def build():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    fully_shard(model)  # FSDP2: each rank holds a shard of every parameter (DTensors)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def state(model, opt, step):
    model_sd, optim_sd = get_state_dict(model, opt)
    return {"model": model_sd, "optim": optim_sd, "step": step}


def main(root, last_step):
    dist.init_process_group("gloo")
    cpu_group = dist.new_group(backend="gloo")  # async_save runs its collectives on a CPU group
    model, opt = build()
    start = 0
    if paramdex.list_run(root)["latest"] is not None:  # resume: the latest complete checkpoint
        s = state(model, opt, 0)
        dcp.load(s, storage_reader=StorageReader.latest(root))  # any number of ranks
        set_state_dict(model, opt, model_state_dict=s["model"], optim_state_dict=s["optim"])
        start = s["step"]
    saving = None
    for step in range(start + 1, last_step + 1):
        torch.manual_seed(step)
        model(torch.randn(8, 16)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        if step % 10 == 0:
            if saving is not None:
                saving.result()  # one save in flight at a time
            saving = dcp.async_save(
                state(model, opt, step),
                storage_writer=StorageWriter(os.path.join(root, f"step-{step}")),
                process_group=cpu_group,
            )
    if saving is not None:
        saving.result()
    dist.barrier()
    if dist.get_rank() == 0:  # out to inference: one torch.save file of the latest checkpoint
        latest = paramdex.list_run(root)["latest"]
        dcp_to_torch_save(latest["path"], os.path.join(root, "final.pt"))
        print(f"latest complete: step {latest['step']}; exported {root}/final.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.makedirs(sys.argv[1], exist_ok=True)
    main(sys.argv[1], int(sys.argv[2]))
    # Leave without the interpreter's teardown, where torch's gloo threads have aborted a rank
    # after its work was done ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
