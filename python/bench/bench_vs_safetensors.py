#!/usr/bin/env python3
"""paramdex against the safetensors package, in Python, on the same tensors (issue 18).

Rows:
  1. safe_open + get_tensor of one tensor among N (default 500,000 tiny tensors);
  2. loading every tensor of a ~1.7 GiB model (default 200 float32 tensors) into numpy, and
     into torch (safe_open(..., framework=...) + get_tensor of every key, as a user does, and
     load_file, with and without reading every value after it), each load in a fresh
     interpreter, as a program loads a model once (a load that copies pays for new memory
     there, which repeated loads in one process would hide by reusing freed memory);
  3. save_file of the same model, with fsync (safetensors' save_file does not fsync: the bench
     fsyncs its file after it, so both have the data on disk when the clock stops).

Warm page cache for reads (each file was just written; every run reads the same bytes), median of
--repeat runs (safetensors and paramdex timed in the same run). Prints a Markdown table. Usage:
  python python/bench/bench_vs_safetensors.py [--dir DIR] [--many 500000] [--model-mib 1740]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    dfd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


# One timed load in a fresh interpreter: prints the wall seconds from before the load to after
# it (and the sum of every value, when asked), imports excluded, and the process's CPU seconds
# (user + system, every thread) over the same span: on a shared machine the wall time is mostly
# the share of the CPUs the run got, the CPU time what the load cost.
CHILD = r"""
import json, sys, time
lib, fw, how, path, touch, kw, threads = sys.argv[1:8]
kw = json.loads(kw)
import numpy as np
import torch
if int(threads):
    torch.set_num_threads(int(threads))
if lib == "st":
    import safetensors as mod, safetensors.numpy as mnp, safetensors.torch as mpt
else:
    import paramdex as mod, paramdex.numpy as mnp, paramdex.torch as mpt
import resource
float(torch.ones(1 << 16).sum())  # torch's thread pool started before the clock
r = resource.getrusage(resource.RUSAGE_SELF)
cpu0 = r.ru_utime + r.ru_stime
t0 = time.perf_counter()
if how == "load_file":
    out = (mnp if fw == "np" else mpt).load_file(path, **kw)
else:
    with mod.safe_open(path, framework=fw, **kw) as f:
        out = {k: f.get_tensor(k) for k in f.keys()}
if touch == "1":
    # Every value read (views and mappings are lazy). torch: its own float32 sum (a float64
    # one converts each tensor first, at a fraction of memory speed, hiding the load).
    if fw == "np":
        s = sum(float(v.sum(dtype=np.float64)) for v in out.values())
    else:
        s = sum(float(v.sum()) for v in out.values())
r = resource.getrusage(resource.RUSAGE_SELF)  # every thread's, since cpu0
print(time.perf_counter() - t0, r.ru_utime + r.ru_stime - cpu0)
"""


class Timing(float):
    """Median wall seconds, with the median CPU seconds (user + system, every thread) beside."""

    cpu = 0.0


def fresh(lib, fw, how, path, touch, kw, repeat, torch_threads=0):
    """Median seconds of ``repeat`` loads, each in a new interpreter (torch's intra-op threads
    set to ``torch_threads`` unless 0)."""
    walls, cpus = [], []
    for _ in range(repeat):
        out = subprocess.run(
            [sys.executable, "-c", CHILD, lib, fw, how, path, "1" if touch else "0", json.dumps(kw),
             str(torch_threads)],
            check=True, capture_output=True, text=True,
        ).stdout
        wall, cpu = out.split()[-2:]
        walls.append(float(wall))
        cpus.append(float(cpu))
    t = Timing(statistics.median(walls))
    t.cpu = statistics.median(cpus)
    return t


def fmt(s):
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--many", type=int, default=500_000)
    ap.add_argument("--model-mib", type=int, default=1740)
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--load-repeat", type=int, default=5, help="fresh interpreters per load timing")
    ap.add_argument("--frameworks", default="np,pt", help="the load rows' frameworks (np, pt)")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="torch.set_num_threads in the load children (0: torch's default)")
    args = ap.parse_args()

    import safetensors
    import safetensors.numpy as stn

    import paramdex
    import paramdex.numpy as pdn

    work = tempfile.mkdtemp(dir=args.dir, prefix="pdx-bench-")
    print("| operation | safetensors | paramdex | paramdex speed-up | CPU time, safetensors / paramdex |")
    print("|---|---|---|---|---|", flush=True)

    class Rows(list):
        def append(self, row):
            name, a, b = row
            cpu = f"{fmt(a.cpu)} / {fmt(b.cpu)}" if isinstance(a, Timing) else ""
            print(f"| {name} | {fmt(a)} | {fmt(b)} | {a / b:.2f}× | {cpu} |", flush=True)
            super().append(row)

    rows = Rows()
    try:
        # Row 1: one tensor among many.
        many = {f"layers.{i:07d}.weight": np.full((4,), i, np.float32) for i in range(args.many)}
        sp, pp = os.path.join(work, "many.safetensors"), os.path.join(work, "many.pdx")
        stn.save_file(many, sp)
        pdn.save_file(many, pp)
        del many
        target = f"layers.{args.many // 2:07d}.weight"

        def st_one():
            with safetensors.safe_open(sp, framework="np") as f:
                return f.get_tensor(target)

        def pdx_one():
            with paramdex.safe_open(pp, framework="np") as f:
                return f.get_tensor(target)

        assert (st_one() == pdx_one()).all()
        a, b = timed(st_one, args.repeat), timed(pdx_one, max(args.repeat, 20))
        rows.append((f"safe_open + get_tensor of 1 among {args.many:,} (numpy)", a, b))
        os.remove(sp)
        os.remove(pp)

        # Rows 2-3: a ~1.7 GiB model.
        per = args.model_mib * (1 << 20) // args.tensors // 4 // 256 * 256
        rng = np.random.default_rng(0)
        model = {f"model.layers.{i:03d}.weight": rng.standard_normal(per, dtype=np.float32).reshape(-1, 256)
                 for i in range(args.tensors)}
        total = sum(a.nbytes for a in model.values())
        sp, pp = os.path.join(work, "model.safetensors"), os.path.join(work, "model.pdx")

        def st_save():
            stn.save_file(model, sp)
            fsync_file(sp)

        def pdx_save():
            pdn.save_file(model, pp)

        a, b = timed(st_save, args.repeat), timed(pdx_save, args.repeat)
        rows.append((f"save_file of {total / (1 << 30):.2f} GiB ({args.tensors} tensors), fsync", a, b))

        # Loads: each timed in a fresh interpreter (imports not timed), as a program loads a
        # model once: a load that copies pays for new memory there, which a loop in one process
        # would hide by reusing the memory the previous iteration freed.
        gib = f"{total / (1 << 30):.2f} GiB"
        for fw, label in (("np", "numpy"), ("pt", "torch")):
            if fw not in args.frameworks.split(","):
                continue
            def both(how, touch, variants, title):
                a = fresh("st", fw, how, sp, touch, {}, args.load_repeat, args.torch_threads)
                for i, (kw, what) in enumerate(variants):
                    b = fresh("pdx", fw, how, pp, touch, kw, args.load_repeat, args.torch_threads)
                    rows.append((title if i == 0 else f"the same, paramdex {what}", a, b))

            both("get", True, [({}, ""), ({"checksums": False}, "with checksums=False")],
                 f"safe_open + get_tensor of every tensor into {label}, then sum it ({gib})")
            loads = [({}, ""), ({"copy": True}, "with copy=True"), ({"checksums": False}, "with checksums=False")]
            both("load_file", True, loads, f"{label} load_file, then sum every tensor ({gib})")
            both("load_file", False, loads, f"{label} load_file ({gib}; values not touched)")
    finally:
        shutil.rmtree(work, ignore_errors=True)



if __name__ == "__main__":
    main()
