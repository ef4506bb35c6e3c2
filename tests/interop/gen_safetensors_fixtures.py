"""Generates tests/data/safetensors/ with the Python `safetensors` package (and numpy, ml_dtypes
for bfloat16 and float8). Run with the interop virtualenv:

    ~/.cache/paramdex/venv/bin/python tests/interop/gen_safetensors_fixtures.py

Writes:
  model.safetensors   one tensor of every dtype safetensors and paramdex share, a scalar, an
                      empty tensor, and __metadata__ {"format": "pt", "source": "paramdex fixture"}
  plain.safetensors   two float32 tensors, no __metadata__
  manifest.json       per file: metadata, and per tensor the paramdex dtype, shape and the
                      SHA-256 of its little-endian data bytes
"""

import hashlib
import json
import os

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "safetensors")


def model():
    r = np.random.default_rng(7)
    t = {
        "bool.mask": np.array([[True, False, True], [False, False, True]]),
        "u8.bytes": np.arange(6, dtype=np.uint8).reshape(2, 3),
        "i8.q": np.array([-128, -1, 0, 1, 127], dtype=np.int8),
        "i16.x": np.array([-32768, 12345, 32767], dtype=np.int16),
        "u16.x": np.array([0, 65535, 7], dtype=np.uint16),
        "i32.ids": np.array([[1, -2], [3, 2147483647]], dtype=np.int32),
        "u32.x": np.array([4294967295, 0], dtype=np.uint32),
        "i64.steps": np.array(1234567890123, dtype=np.int64),  # a scalar
        "u64.x": np.array([18446744073709551615, 1], dtype=np.uint64),
        "f16.w": r.standard_normal((4, 2)).astype(np.float16),
        "bf16.embed": r.standard_normal((3, 4)).astype(ml_dtypes.bfloat16),
        "model.layers.0.weight": r.standard_normal((4, 3)).astype(np.float32),
        "model.layers.0.bias": np.array([0.5, -0.25, np.inf], dtype=np.float32),
        "f64.x": np.array([np.pi, -np.e], dtype=np.float64),
        "c64.z": np.array([1 + 2j, -3.5 - 0.5j], dtype=np.complex64),
        "f8e4m3.s": np.array([1.0, -2.0, 448.0, 0.015625], dtype=ml_dtypes.float8_e4m3fn),
        "f8e5m2.s": np.array([1.0, -0.5, 57344.0], dtype=ml_dtypes.float8_e5m2),
        "empty.rows": np.zeros((0, 3), dtype=np.float32),
    }
    meta = {"format": "pt", "source": "paramdex fixture"}
    return t, meta


def plain():
    return {
        "a": np.array([1.0, 2.0, 3.0], dtype=np.float32),
        "b": np.array([[4.0]], dtype=np.float32),
    }, None


NAMES = {
    "bool": "bool", "uint8": "uint8", "int8": "int8", "int16": "int16", "uint16": "uint16",
    "int32": "int32", "uint32": "uint32", "int64": "int64", "uint64": "uint64",
    "float16": "float16", "bfloat16": "bfloat16", "float32": "float32", "float64": "float64",
    "complex64": "complex64", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
}


def main():
    os.makedirs(OUT, exist_ok=True)
    manifest = {}
    for fname, make in [("model.safetensors", model), ("plain.safetensors", plain)]:
        tensors, meta = make()
        path = os.path.join(OUT, fname)
        save_file(tensors, path, metadata=meta)
        os.chmod(path, 0o644)
        manifest[fname] = {
            "metadata": meta or {},
            "tensors": {
                k: {
                    "dtype": NAMES[v.dtype.name],
                    "shape": list(v.shape),
                    "sha256": hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest(),
                }
                for k, v in sorted(tensors.items())
            },
        }
    with open(os.path.join(OUT, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
