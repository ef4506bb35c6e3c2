"""What the tests/interop/check_*.py scripts share: reporting one check, and running the CLI.

Not a check itself (run.sh runs only check_*.py). Each script imports it from its own folder,
which Python puts first on sys.path, also in the worker processes check_paddle.py starts.
"""

import os
import subprocess
import sys

# The labels of the checks that failed so far; a script exits non-zero when it is not empty.
FAILURES = []


def report(label, ok, detail=""):
    """Prints one check's line (its detail only when it failed) and remembers a failure."""
    print(f"{'ok  ' if ok else 'FAIL'} {label}" + (f": {detail}" if detail and not ok else ""))
    sys.stdout.flush()
    if not ok:
        FAILURES.append(label)


def pdx(*args, code=0):
    """Runs the paramdex binary of $PARAMDEX; its stdout, or RuntimeError if it did not exit `code`."""
    p = subprocess.run([os.environ["PARAMDEX"], *map(str, args)], capture_output=True)
    if p.returncode != code:
        raise RuntimeError(
            f"paramdex {' '.join(map(str, args))}: exit {p.returncode}: "
            f"{p.stderr.decode(errors='replace').strip()}"
        )
    return p.stdout


def tf_values(dtype, shape, seed):
    """Deterministic test values of a TensorFlow dtype (any numeric one, or bool) and shape."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = int(np.prod(shape)) if shape else 1
    np_dtype = dtype.as_numpy_dtype
    if dtype.is_bool:
        v = rng.integers(0, 2, n).astype(bool)
    elif dtype.is_complex:
        v = (rng.normal(size=n) + 1j * rng.normal(size=n)).astype(np_dtype)
    elif dtype.is_floating:
        v = (rng.normal(size=n) * 3).astype(np.float32).astype(np_dtype)
    else:
        info = np.iinfo(np_dtype)
        v = rng.integers(max(info.min, -(2**62)), min(info.max, 2**62), n, endpoint=True).astype(np_dtype)
    return v.reshape(shape)
