#!/usr/bin/env python3
"""paramdex's `get --format npy` and safetensors output against numpy, safetensors and
TensorFlow.

Run by tests/interop/run.sh with PARAMDEX (the release binary) and PARAMDEX_ROOT (the repo) set,
inside the interop virtualenv. Prints one line per check and exits non-zero on any mismatch:

1. numpy arrays of every dtype safetensors and paramdex share (bfloat16 and float8 through
   ml_dtypes; scalars, empty tensors), saved by the Python safetensors package with metadata,
   converted to a native file by paramdex: `np.load` of each `get --format npy` has the right
   dtype, shape and values (bfloat16/float8 arrive as uint16/uint8 bits, as `--help` says, and
   view back exactly);
2. that native file converted back with `--to safetensors`: the safetensors package loads every
   tensor with the right dtype, shape and values, and `__metadata__` survives the trip (typed
   metadata set with `meta --set` goes out as JSON text);
3. `get --format npy` of every tensor of a TensorFlow checkpoint (complex128 included) equals
   what TensorFlow's own reader returns;
4. after `meta --set` (a new index appended to the file), `export-tf` still gives a checkpoint
   TensorFlow loads with every value intact.
"""

import json
import os
import sys
import tempfile

import ml_dtypes
import numpy as np
import safetensors
from safetensors.numpy import load_file, save_file

from interop_common import FAILURES, pdx, report

ROOT = os.environ.get("PARAMDEX_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))


def sample():
    r = np.random.default_rng(11)
    return {
        "bool": np.array([[True, False], [False, True]]),
        "uint8": np.arange(5, dtype=np.uint8),
        "int8": np.array([-128, 0, 127], dtype=np.int8),
        "int16": np.array([-32768, 1, 32767], dtype=np.int16),
        "uint16": np.array([0, 65535], dtype=np.uint16),
        "int32": r.integers(-(2**31), 2**31 - 1, (3, 2)).astype(np.int32),
        "uint32": np.array([0, 2**32 - 1], dtype=np.uint32),
        "int64": np.array(-(2**62), dtype=np.int64),
        "uint64": np.array([2**64 - 1], dtype=np.uint64),
        "float16": r.standard_normal((2, 3)).astype(np.float16),
        "bfloat16": r.standard_normal((3, 2)).astype(ml_dtypes.bfloat16),
        "float32": np.array([[1.5, -np.inf], [np.nan, 1e-30]], dtype=np.float32),
        "float64": r.standard_normal(4),
        "complex64": np.array([1 - 2j, 3.5 + 0.25j], dtype=np.complex64),
        "float8_e4m3fn": np.array([1, -2, 448, 0.5], dtype=ml_dtypes.float8_e4m3fn),
        "float8_e5m2": np.array([1, -0.25, 57344], dtype=ml_dtypes.float8_e5m2),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "scalar": np.array(3.25, dtype=np.float64),
    }


RAW_VIEW = {"bfloat16": np.uint16, "float8_e4m3fn": np.uint8, "float8_e5m2": np.uint8}


def same(a, b):
    """Equal dtype, shape and bytes (NaN-safe)."""
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_npy_and_safetensors(tmp):
    arrays = sample()
    src = os.path.join(tmp, "src.safetensors")
    save_file(arrays, src, metadata={"format": "np", "note": "from numpy"})
    native = os.path.join(tmp, "n.pdx")
    pdx("convert", src, native)
    for name, want in arrays.items():
        out = os.path.join(tmp, f"{name}.npy")
        pdx("get", native, name, "--format", "npy", "-o", out)
        got = np.load(out)
        raw = RAW_VIEW.get(want.dtype.name)
        if raw is not None:
            ok = got.dtype == np.dtype(raw) and got.shape == want.shape
            ok = ok and same(got.view(want.dtype), want)
            report(f"npy {name}: raw {np.dtype(raw).name} bits view back as {want.dtype.name}", ok,
                   f"{got.dtype} {got.shape}")
        else:
            report(f"npy {name}: {want.dtype} {want.shape}", same(got, want),
                   f"got {got.dtype} {got.shape} {got!r}")
    # Typed metadata out to safetensors as text.
    pdx("meta", native, "--set", "step=12", "--set", "flags=[true,1]", "-q")
    back = os.path.join(tmp, "back.safetensors")
    pdx("convert", native, back, "--to", "safetensors")
    with open(back, "rb") as f:
        blob = f.read()
    views = dict(safetensors.deserialize(blob))
    for name, want in arrays.items():
        v = views.get(name)
        ok = v is not None and list(v["shape"]) == list(want.shape)
        got = np.frombuffer(bytes(v["data"]), dtype=want.dtype).reshape(want.shape) if ok else None
        report(f"safetensors {name}: {want.dtype} {want.shape}", ok and same(got, want),
               f"{v and v['dtype']}")
    # The package's numpy frontend has no bfloat16/float8: read the others through it.
    numeric = {k: v for k, v in arrays.items() if v.dtype.name not in RAW_VIEW}
    with safetensors.safe_open(back, framework="np") as f:
        meta = f.metadata()
        ok = all(same(f.get_tensor(k), v) for k, v in numeric.items())
    report("safetensors.safe_open(framework='np') reads paramdex's file", ok)
    only = os.path.join(tmp, "numeric.safetensors")
    save_file(numeric, only)
    pdx("convert", only, os.path.join(tmp, "numeric.pdx"))
    pdx("convert", os.path.join(tmp, "numeric.pdx"), os.path.join(tmp, "numeric2.safetensors"),
        "--to", "safetensors")
    loaded = load_file(os.path.join(tmp, "numeric2.safetensors"))
    report("safetensors.numpy.load_file reads paramdex's file",
           loaded.keys() == numeric.keys() and all(same(loaded[k], v) for k, v in numeric.items()))
    report("__metadata__ carried through paramdex and back",
           meta == {"format": "np", "note": "from numpy", "step": "12", "flags": "[true,1]"},
           repr(meta))


def check_tensorflow(tmp):
    import tensorflow as tf

    prefix = os.path.join(ROOT, "tests", "data", "tf", "basic", "tf2", "ckpt-1")
    reader = tf.train.load_checkpoint(prefix)
    listed = json.loads(pdx("ls", prefix, "--json"))
    for t in listed:
        if t["dtype"] in ("string", "bytes"):  # no npy form
            continue
        out = os.path.join(tmp, "t.npy")
        pdx("get", prefix, t["name"], "--format", "npy", "-o", out)
        got = np.load(out)
        want = np.asarray(reader.get_tensor(t["name"]))
        if t["dtype"] == "bfloat16":
            got = got.view(ml_dtypes.bfloat16)
            want = want.astype(ml_dtypes.bfloat16)
        report(f"npy of TensorFlow {t['name']} ({t['dtype']})", same(got, want),
               f"{got.dtype}{got.shape} vs {want.dtype}{want.shape}")

    # A native file whose metadata was changed in place still loads in TensorFlow.
    native = os.path.join(tmp, "tf.pdx")
    pdx("convert", prefix, native, "--skip-unsupported", "-q")
    pdx("meta", native, "--set", "step=3", "--set", "name=x", "-q")
    pdx("meta", native, "--set", "step=4", "-q")
    stat = json.loads(pdx("stat", native, "--json"))
    report("meta --set left dead bytes (appended index)", stat["dead_bytes"] > 0, str(stat))
    exported = os.path.join(tmp, "exported")
    pdx("export-tf", native, exported)
    r2 = tf.train.load_checkpoint(exported)
    ok = True
    for t in listed:
        if t["dtype"] == "string":
            continue
        a = np.asarray(reader.get_tensor(t["name"]))
        b = np.asarray(r2.get_tensor(t["name"]))
        ok = ok and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
    report("TensorFlow loads a file after meta --set (export-tf), every value intact", ok)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for check in (check_npy_and_safetensors, check_tensorflow):
            try:
                check(tmp)
            except Exception as e:  # a crash is a failure, reported as one
                report(check.__name__, False, repr(e))
    if FAILURES:
        print(f"check_cli: {len(FAILURES)} FAILED")
        sys.exit(1)
    print("check_cli: all passed")


if __name__ == "__main__":
    main()
