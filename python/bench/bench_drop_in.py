"""What the safetensors drop-in (issue 29) costs: numpy `load_file` with writable arrays over a
private copy-on-write mapping (the default) against read-only views of paramdex's own mapping
(`readonly=True`) and against safetensors' `load_file`, on a paramdex file and a safetensors
file of the same tensors; and `save` to bytes (both through the `safetensors` crate's
serializer). Best of 5 (3 for `save`), in one process, files in the page cache.

    PYTHONPATH=python python python/bench/bench_drop_in.py [--tensors 5000] [--dir /tmp]
"""

import argparse
import os
import tempfile
import time

import numpy as np
import safetensors.numpy as sn

import paramdex.numpy as pn


def best(fn, n):
    t = 1e9
    for _ in range(n):
        s = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - s)
    return t * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, default=5000)
    ap.add_argument("--dir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        many = {f"t{i:05d}": np.full((1024,), i, np.float32) for i in range(args.tensors)}
        pdx, st = os.path.join(d, "m.pdx"), os.path.join(d, "m.safetensors")
        pn.save_file(many, pdx)
        pn.save_file(many, st)
        print(f"load average {os.getloadavg()[0]:.1f}; {args.tensors} tensors of 4 KiB")
        print("| call | ms |\n|---|---|")
        for p in (pdx, st):
            name = os.path.basename(p)
            print(f"| paramdex `load_file({name})` (writable, copy-on-write) | {best(lambda: pn.load_file(p), 5):.1f} |")
            print(f"| paramdex `load_file({name}, readonly=True)` | {best(lambda: pn.load_file(p, readonly=True), 5):.1f} |")
        print(f"| safetensors `load_file(m.safetensors)` | {best(lambda: sn.load_file(st), 5):.1f} |")
        big = {"w": np.ones((4096, 4096), np.float32)}
        print(f"| paramdex `numpy.save` of 64 MiB | {best(lambda: pn.save(big), 3):.1f} |")
        print(f"| safetensors `numpy.save` of 64 MiB | {best(lambda: sn.save(big), 3):.1f} |")


if __name__ == "__main__":
    main()
