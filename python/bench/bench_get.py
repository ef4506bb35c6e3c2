#!/usr/bin/env python3
"""Per-tensor get_tensor after open, hot, into numpy (issue 31): what a small tensor costs.

Files of --tensors float32 tensors of 4x4 (64 bytes; written in this run, in the page cache): a
paramdex file and a safetensors file of the same tensors. Each row opens the file once, then
times get_tensor of every tensor in a shuffled order; median of --repeat passes, per tensor.
safetensors' own `safe_open(..., framework="np")` is timed in the same process, alternating
with paramdex pass by pass. The `Store.*` rows time the extension's calls alone (no Python
above them), to show what of a get is the lookup and what the array.

    PYTHONPATH=python python python/bench/bench_get.py [--tensors 5000] [--repeat 15] [--dir /tmp]
"""

import argparse
import os
import random
import statistics
import tempfile
import time

import numpy as np
import safetensors
import safetensors.numpy as sn

import paramdex
import paramdex.numpy as pn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    tensors = {f"t{i:05d}": rng.standard_normal((4, 4), dtype=np.float32) for i in range(args.tensors)}
    names = list(tensors)
    random.Random(1).shuffle(names)
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        pdx, st = os.path.join(d, "m.pdx"), os.path.join(d, "m.safetensors")
        pn.save_file(tensors, pdx)
        sn.save_file(tensors, st)
        print(f"paramdex {paramdex.__file__}; load average {os.getloadavg()[0]:.2f}; "
              f"{args.tensors} tensors of 4x4 float32")
        rows = []
        for path in (pdx, st):
            kind = "paramdex file" if path == pdx else "safetensors file"
            handles = [
                ("get_tensor (default: private copy-on-write views)", paramdex.safe_open(path, "np").get_tensor),
                ("get_tensor, readonly=True", paramdex.safe_open(path, "np", readonly=True).get_tensor),
                ("get_tensor, readonly=True, checksums=False",
                 paramdex.safe_open(path, "np", readonly=True, checksums=False).get_tensor),
            ]
            store = paramdex.safe_open(path, "np")._store
            # (Before issue 31 a safetensors store's info listed every tensor: timed on the
            # first 250 names only, per call like the others.)
            handles.append(("Store.info alone (the lookup, a small tuple)", store.info, names[:250]))
            if hasattr(store, "load_array"):
                handles.append(("Store.load_array alone (lookup, checksum, array)", store.load_array))
            else:
                handles.append(("Store.load alone (lookup, checksum, Buffer)", store.load))
            ref = None
            if path == st:
                ref = safetensors.safe_open(path, framework="np")
            for label, fn, *some in handles:
                use = some[0] if some else names
                ta, tb = [], []
                for _ in range(args.repeat):
                    if ref is not None and use is names:
                        g = ref.get_tensor
                        t0 = time.perf_counter()
                        for n in names:
                            g(n)
                        ta.append(time.perf_counter() - t0)
                    t0 = time.perf_counter()
                    for n in use:
                        fn(n)
                    tb.append(time.perf_counter() - t0)
                b = statistics.median(tb) / len(use)
                a = statistics.median(ta) / len(names) if ta else None
                rows.append((kind, label, a, b))
        print("| file | paramdex call | safetensors get_tensor | paramdex | speed-up |")
        print("|---|---|---|---|---|")
        for kind, label, a, b in rows:
            ref = f"{a * 1e6:.2f} µs" if a is not None else ""
            ratio = f"{a / b:.2f}×" if a is not None else ""
            print(f"| {kind} | {label} | {ref} | {b * 1e6:.2f} µs | {ratio} |")
        print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
