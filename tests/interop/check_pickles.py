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
   nothing runs (the marker file it would create stays absent).
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


def check_store(label, path, want):
    """`want`: name -> (bytes, shape). ls, get --format raw, verify, convert."""
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
            pdx("convert", path, out)
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


def main():
    with tempfile.TemporaryDirectory() as d:
        torch_checks(d)
        hostile_check(d)
    with tempfile.TemporaryDirectory() as d:
        paddle_checks(d)
    if FAILURES:
        print(f"check_pickles: {len(FAILURES)} failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
