#!/usr/bin/env python3
"""What new memory costs a process: fills 200 new torch.empty tensors (1.70 GiB by default),
each run in a fresh interpreter, (a) as allocated, (b) after madvise(MADV_HUGEPAGE) on them
(what numpy's np.empty asks for on large arrays), (c) after madvise(MADV_POPULATE_WRITE) (the
populate timed too). Linux only. This is the price a copying load (paramdex's load_file with
copy=True, safetensors.numpy.load_file) pays that a zero-copy one does not
(docs/benchmarks-history.md, "Python (issue 18)").
Usage: python python/bench/fresh_memory.py [--repeat 3] [--model-mib 1740]
"""

import argparse
import statistics
import subprocess
import sys

CHILD = r"""
import ctypes, resource, sys, time
import torch
mode, mib = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(1)  # one filling thread, no busy-waiting helpers
torch.ones(1 << 16).fill_(1.0)  # torch's start-up before the clock
libc = ctypes.CDLL(None, use_errno=True)
libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
MADV_HUGEPAGE, MADV_POPULATE_WRITE = 14, 23
per = mib * (1 << 20) // 200 // 4
ts = [torch.empty(per, dtype=torch.float32) for _ in range(200)]
r0 = resource.getrusage(resource.RUSAGE_SELF)
t0 = time.perf_counter()
if mode != "plain":
    step = (2 << 20) if mode == "hugepage" else 4096
    advice = MADV_HUGEPAGE if mode == "hugepage" else MADV_POPULATE_WRITE
    for t in ts:
        a = t.data_ptr()
        lo, hi = (a + step - 1) // step * step, (a + t.nbytes) // step * step
        if hi > lo and libc.madvise(lo, hi - lo, advice) != 0:
            raise OSError(ctypes.get_errno(), "madvise")
for t in ts:
    t.fill_(1.0)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(time.perf_counter() - t0, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--model-mib", type=int, default=1740)
    args = ap.parse_args()
    print("| new memory filled | wall | system CPU | page faults |")
    print("|---|---|---|---|")
    runs = {m: [] for m in ("plain", "hugepage", "populate")}
    for _ in range(args.repeat):  # interleaved
        for m in runs:
            out = subprocess.run([sys.executable, "-c", CHILD, m, str(args.model_mib)],
                                 check=True, capture_output=True, text=True).stdout.split()
            runs[m].append(tuple(float(x) for x in out))
    for m, rs in runs.items():
        wall, sys_cpu, faults = (statistics.median(r[i] for r in rs) for i in range(3))
        print(f"| {m} | {wall * 1e3:.0f} ms | {sys_cpu * 1e3:.0f} ms | {faults:,.0f} |")


if __name__ == "__main__":
    main()
