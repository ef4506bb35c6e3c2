#!/usr/bin/env python3
"""paramdex reading pickle-based checkpoints written by the real libraries, without running them.

Run by tests/interop/run.sh with PARAMDEX (the release binary) set, inside the interop
virtualenv (torch and paddle installed). Prints one line per check and exits non-zero on any
mismatch:

1. `torch.save` of a model with tied weights, a non-contiguous view (a transpose) and a view with
   a storage offset, bfloat16 and float8 tensors, and an Adam optimizer's `state_dict` after a
   step, as `model.pt` and `pytorch_model.bin`: `ls --json` lists every tensor under its
   `state_dict` name, `get --format raw` of each is byte-exact against
   `tensor.contiguous()`, `verify` passes, `convert` to a native file keeps every byte;
2. `paddle.save` of a Layer's `state_dict` (`.pdparams`) and an optimizer's (`.pdopt`): the
   same checks against the numpy arrays Paddle saved;
3. a pickle naming a global outside the allow-list (`posix.system`) is refused (exit 1) and
   nothing runs (the marker file it would create stays absent);
4. a torch.distributed.checkpoint `FileSystemWriter` directory written by 2 gloo ranks (DTensors
   sharded by rows and by columns, a replicated bf16 tensor, a float8 tensor, a plain tensor, a
   step and a learning rate): every tensor byte-exact against what torch reads back
   (`dcp_to_torch_save` then `torch.load`), by the directory and by its `.metadata`, `get
   --slice` across the two ranks' chunks, `verify`, `convert`, and the scalars as metadata;
5. Hugging Face sharded checkpoints written as `save_pretrained` writes them (shards by
   `safetensors.torch.save_file` / `torch.save`, the `*.index.json` weight map by hand):
   byte-exact by the directory and by the index;
6. a full training state (model and AdamW state dicts, `torch.get_rng_state()`,
   `random.getstate()`, `bytes` and `bytearray` values), which torch loads weights-only: every
   tensor byte-exact, the bytes values and scalars as metadata (`meta --json`).
"""

import json
import os
import pickle
import sys
import tempfile

import numpy as np

from interop_common import FAILURES, pdx, report


def raw_of_torch(t):
    import torch

    t = t.detach().contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    return t.view(torch.uint8).numpy().tobytes()


def listed(path):
    """name -> entry of `ls --json`."""
    out = json.loads(pdx("ls", path, "--json"))
    rows = out["tensors"] if isinstance(out, dict) else out
    return {r["name"]: r for r in rows}


def check_store(label, path, want, convert_args=()):
    """`want`: name -> (bytes, shape). ls, get --format raw, verify, convert (with
    `convert_args`)."""
    try:
        names = listed(path)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        report(f"{label}: ls --json", False, str(e))
        return
    missing = sorted(set(want) - set(names))
    report(f"{label}: ls lists all {len(want)} tensors under their state_dict names", not missing,
           f"missing {missing[:5]}, listed {sorted(names)[:8]}")
    bad = []
    for name, (data, shape) in want.items():
        if name not in names:
            continue
        try:
            got = pdx("get", path, name, "--format", "raw")
        except Exception as e:  # noqa: BLE001
            bad.append(f"{name}: {e}")
            continue
        if got != data:
            bad.append(f"{name}: {len(got)} bytes differ from {len(data)}")
        elif list(names[name].get("shape", shape)) != list(shape):
            bad.append(f"{name}: shape {names[name].get('shape')} != {list(shape)}")
    report(f"{label}: get --format raw of every tensor is byte-exact", not bad, "; ".join(bad[:5]))
    try:
        pdx("verify", path)
        report(f"{label}: verify passes", True)
    except Exception as e:  # noqa: BLE001
        report(f"{label}: verify passes", False, str(e))
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.pdx")
        try:
            pdx("convert", path, out, *convert_args)
            wrong = [n for n, (data, _) in want.items()
                     if pdx("get", out, n, "--format", "raw") != data]
            report(f"{label}: convert to a native file keeps every byte", not wrong, str(wrong[:5]))
        except Exception as e:  # noqa: BLE001
            report(f"{label}: convert to a native file keeps every byte", False, str(e))


def torch_checks(d):
    import torch

    torch.manual_seed(0)
    emb = torch.nn.Embedding(16, 8)
    head = torch.nn.Linear(8, 16, bias=False)
    head.weight = emb.weight  # tied
    model = torch.nn.ModuleDict({"emb": emb, "head": head, "proj": torch.nn.Linear(8, 4)})
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = model["head"](model["emb"](torch.tensor([1, 2, 3]))).sum() + model["proj"].weight.sum()
    loss.backward()
    opt.step()
    base = torch.arange(48, dtype=torch.float32).reshape(6, 8)
    extra = {
        "transposed": base.t(),  # non-contiguous view
        "offset_view": base[2:4],  # a view with a storage offset
        "bf16": torch.randn(5, 3).to(torch.bfloat16),
        "fp8": torch.randn(4, 4).to(torch.float8_e4m3fn),
        "i64": torch.arange(7),
        "flag": torch.tensor(True),
    }
    state = {"model": model.state_dict(), "optim": opt.state_dict(), "extra": extra, "epoch": 3}
    want = {}
    for k, v in model.state_dict().items():
        want[f"model.{k}"] = (raw_of_torch(v), list(v.shape))
    for pid, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                want[f"optim.state.{pid}.{k}"] = (raw_of_torch(v), list(v.shape))
    for k, v in extra.items():
        want[f"extra.{k}"] = (raw_of_torch(v), list(v.shape))
    for name in ["model.pt", "pytorch_model.bin"]:
        p = os.path.join(d, name)
        torch.save(state, p)
        check_store(f"torch.save {name} (torch {torch.__version__})", p, want)


def training_state_check(d):
    """A full training state (issue 37): model and optimizer state dicts, torch's and Python's
    RNG states, `bytes` and `bytearray` values; torch loads it weights-only, and so must
    paramdex: every tensor byte-exact, the bytes values as metadata."""
    import random

    import torch

    torch.manual_seed(1)
    random.seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    state = {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "rng": torch.get_rng_state(),
        "py_rng": random.getstate(),
        "blob": b"\x00\x01\xfe\xffbytes",
        "buf": bytearray(b"buffer"),
        "epoch": 2,
    }
    p = os.path.join(d, "training_state.pt")
    torch.save(state, p)
    label = f"torch.save of a training state with bytes and RNG states (torch {torch.__version__})"
    try:
        torch.load(p, weights_only=True)
    except Exception as e:  # noqa: BLE001
        report(f"{label}: torch loads it weights-only", False, str(e))
        return
    want = {f"model.{k}": (raw_of_torch(v), list(v.shape)) for k, v in model.state_dict().items()}
    for pid, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            if torch.is_tensor(v):
                want[f"optim.state.{pid}.{k}"] = (raw_of_torch(v), list(v.shape))
    want["rng"] = (raw_of_torch(state["rng"]), list(state["rng"].shape))
    check_store(label, p, want)
    try:
        meta = json.loads(pdx("meta", p, "--json"))
        meta = meta.get("metadata", meta)
        ok = (meta.get("blob") == {"hex": state["blob"].hex()}
              and meta.get("buf") == {"hex": bytes(state["buf"]).hex()}
              and meta.get("epoch") == 2 and meta.get("py_rng.0") == 3)
        report(f"{label}: bytes values and scalars as metadata", ok, json.dumps(meta)[:400])
    except Exception as e:  # noqa: BLE001
        report(f"{label}: bytes values and scalars as metadata", False, str(e))


def paddle_checks(d):
    import paddle

    paddle.seed(0)
    layer = paddle.nn.Sequential(paddle.nn.Linear(6, 4), paddle.nn.LayerNorm(4))
    opt = paddle.optimizer.Adam(parameters=layer.parameters(), learning_rate=1e-3)
    layer(paddle.randn([2, 6])).sum().backward()
    opt.step()
    p = os.path.join(d, "model.pdparams")
    sd = layer.state_dict()
    paddle.save(sd, p)
    want = {k: (v.numpy().tobytes(), list(v.shape)) for k, v in sd.items()}
    check_store(f"paddle.save .pdparams (paddle {paddle.__version__})", p, want)
    po = os.path.join(d, "adam.pdopt")
    osd = opt.state_dict()
    paddle.save(osd, po)
    want = {k: (v.numpy().tobytes(), list(v.shape)) for k, v in osd.items()
            if isinstance(v, paddle.Tensor)}
    check_store(f"paddle.save .pdopt (paddle {paddle.__version__})", po, want)


def hostile_check(d):
    marker = os.path.join(d, "ran")

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    p = os.path.join(d, "evil.pt")
    with open(p, "wb") as f:
        pickle.dump({"w": Evil()}, f, protocol=4)
    try:
        pdx("ls", p, code=1)
        ok = not os.path.exists(marker)
        report("a pickle naming posix.system is refused (exit 1) and nothing runs", ok,
               "the marker file exists")
    except Exception as e:  # noqa: BLE001
        report("a pickle naming posix.system is refused (exit 1) and nothing runs", False, str(e))


def dcp_worker(rank, out, store):
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    mesh = init_device_mesh("cpu", (2,))
    g = dcp_globals()
    sd = {
        "model": {
            "w": distribute_tensor(g["model.w"], mesh, [Shard(0)]),
            "m": distribute_tensor(g["model.m"], mesh, [Shard(1)]),
            "rep": distribute_tensor(g["model.rep"], mesh, [Replicate()]),
            # gloo has no float8 collectives: each rank takes its own chunk.
            "fp8": distribute_tensor(g["model.fp8"], mesh, [Shard(0)], src_data_rank=None),
        },
        "plain": g["plain"],
        "step": 5,
        "lr": 0.25,
    }
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def dcp_globals():
    import torch

    gen = torch.Generator().manual_seed(1)
    return {
        "model.w": torch.randn(10, 6, generator=gen),
        "model.m": torch.arange(24, dtype=torch.int64).reshape(4, 6),
        "model.rep": torch.randn(7, generator=gen).to(torch.bfloat16),
        "model.fp8": torch.randn(8, 4, generator=gen).to(torch.float8_e4m3fn),
        "plain": torch.ones(3),
    }


def dcp_checks(d):
    import torch
    import torch.multiprocessing as mp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ckpt = os.path.join(d, "dcp")
    label = f"torch DCP FileSystemWriter, 2 gloo ranks (torch {torch.__version__})"
    try:
        mp.spawn(dcp_worker, args=(ckpt, os.path.join(d, "store")), nprocs=2)
    except Exception as e:  # noqa: BLE001
        report(f"{label}: written", False, str(e))
        return
    files = sorted(os.listdir(ckpt))
    report(f"{label}: two ranks' data files and .metadata", ".metadata" in files
           and sum(f.endswith(".distcp") for f in files) >= 2, str(files))
    # What torch itself reads back.
    back = os.path.join(d, "back.pt")
    dcp_to_torch_save(ckpt, back)
    loaded = torch.load(back, weights_only=True)

    def flat(prefix, v, out):
        if isinstance(v, dict):
            for k, x in v.items():
                flat(f"{prefix}{k}.", x, out)
        else:
            out[prefix[:-1]] = v
        return out

    theirs = flat("", loaded, {})
    want = {k: (raw_of_torch(v), list(v.shape)) for k, v in theirs.items() if torch.is_tensor(v)}
    mine = dcp_globals()
    same = all(raw_of_torch(mine[k]) == want[k][0] for k in mine)
    report(f"{label}: torch reads back the tensors saved", same)
    for path in (ckpt, os.path.join(ckpt, ".metadata")):
        check_store(f"{label} ({os.path.basename(path)})", path, want)
    # A region across both ranks' chunks: rows 3..7 of the row-sharded w, columns 2..5 of m.
    try:
        got = pdx("get", ckpt, "model.w", "--slice", "3:7,1:4", "--format", "raw")
        exp = raw_of_torch(mine["model.w"][3:7, 1:4])
        got2 = pdx("get", ckpt, "model.m", "--slice", "1:3,2:5", "--format", "raw")
        exp2 = raw_of_torch(mine["model.m"][1:3, 2:5])
        report(f"{label}: get --slice across the ranks' chunks is byte-exact",
               got == exp and got2 == exp2)
    except Exception as e:  # noqa: BLE001
        report(f"{label}: get --slice across the ranks' chunks is byte-exact", False, str(e))
    try:
        meta = json.loads(pdx("meta", ckpt, "--json"))
        ok = json.dumps(meta).find('"step"') >= 0 and json.dumps(meta).find("0.25") >= 0
        report(f"{label}: the step and learning rate are its metadata", ok, json.dumps(meta)[:200])
    except Exception as e:  # noqa: BLE001
        report(f"{label}: the step and learning rate are its metadata", False, str(e))


def hf_checks(d):
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(2)
    sd = {
        "transformer.wte.weight": torch.randn(16, 8),
        "transformer.h.0.attn.c_attn.weight": torch.randn(8, 24).to(torch.bfloat16),
        "transformer.h.0.ln_1.bias": torch.randn(8),
        "lm_head.weight": torch.randn(16, 8).to(torch.float16),
    }
    want = {k: (raw_of_torch(v), list(v.shape)) for k, v in sd.items()}
    names = sorted(sd)
    parts = [names[:2], names[2:]]
    for kind, ext, index in (("safetensors", "safetensors", "model.safetensors.index.json"),
                             ("torch.save", "bin", "pytorch_model.bin.index.json")):
        root = os.path.join(d, f"hf_{ext}")
        os.makedirs(root)
        with open(os.path.join(root, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2"}, f)
        weight_map = {}
        stem = "model" if ext == "safetensors" else "pytorch_model"
        for i, part in enumerate(parts):
            shard = f"{stem}-{i + 1:05d}-of-{len(parts):05d}.{ext}"
            piece = {k: sd[k].contiguous() for k in part}
            if ext == "safetensors":
                save_file(piece, os.path.join(root, shard), metadata={"format": "pt"})
            else:
                torch.save(piece, os.path.join(root, shard))
            weight_map.update({k: shard for k in part})
        total = sum(v.numel() * v.element_size() for v in sd.values())
        with open(os.path.join(root, index), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
        for path in (root, os.path.join(root, index)):
            check_store(f"Hugging Face sharded {kind} ({os.path.basename(path)})", path, want)


def main():
    with tempfile.TemporaryDirectory() as d:
        torch_checks(d)
        training_state_check(d)
        hostile_check(d)
    with tempfile.TemporaryDirectory() as d:
        dcp_checks(d)
    with tempfile.TemporaryDirectory() as d:
        hf_checks(d)
    with tempfile.TemporaryDirectory() as d:
        paddle_checks(d)
    if FAILURES:
        print(f"check_pickles: {len(FAILURES)} failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
