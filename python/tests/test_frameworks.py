"""TensorFlow and Paddle: tensors paramdex hands out equal what the libraries themselves load
from the same files. Each check runs in its own interpreter (TensorFlow and Paddle crash when
imported into one process)."""

import glob
import os

import pytest

from conftest import DATA, need, run_child

TF_CHECK = r'''
import glob, sys
import numpy as np
import tensorflow as tf
import paramdex

def same(got, want, label):
    if isinstance(got, bytes):
        # A scalar string (a TF2 checkpoint's object graph) is a bytes value: bytes in every
        # framework, as TensorFlow's reader gives it.
        assert want.shape == () and want.item() == got, label
        return
    assert isinstance(got, tf.Tensor), (label, type(got))
    got = got.numpy()
    # A string scalar comes back from .numpy() and get_tensor as bare bytes.
    got = np.array(got, dtype=object) if isinstance(got, bytes) else got
    want = np.array(want.item() if want.dtype.kind == "S" else want, dtype=object) if want.dtype.kind == "S" else want
    assert got.shape == want.shape, (label, got.shape, want.shape)
    assert got.dtype == want.dtype, (label, got.dtype, want.dtype)
    if want.dtype == object:
        assert got.tolist() == want.tolist(), label
    else:
        assert got.tobytes() == want.tobytes(), label

work, data = sys.argv[1], sys.argv[2]
# (a) a checkpoint TensorFlow writes here: every dtype it saves, a scalar, strings, an empty one.
import ml_dtypes
vals = {
    "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
    "f64": np.array([1.5, -2.25]),
    "f16": np.array([0.5, 2.0], np.float16),
    "bf16": np.array([1.5, -3.0, 0.125], ml_dtypes.bfloat16),
    "i8": np.array([-1, 2], np.int8), "u8": np.array([1, 255], np.uint8),
    "i16": np.array([-300], np.int16), "u16": np.array([65535], np.uint16),
    "i32": np.array([[7]], np.int32), "u32": np.array([4000000000], np.uint32),
    "i64": np.array([-(2**40)], np.int64), "u64": np.array([2**63], np.uint64),
    "c64": np.array([1 + 2j], np.complex64), "c128": np.array([3 - 4j], np.complex128),
    "flag": np.array([True, False]), "scalar": np.array(2.5, np.float32),
    "empty": np.zeros((0, 3), np.float32),
    "names/\u00fcn\u00efc\u00f6de": np.array([1.0], np.float32),
    "strings": np.array([b"a", b"", b"\xff\x00bytes"], dtype=object),
}
prefix = work + "/ckpt"
tf.raw_ops.SaveV2(prefix=prefix, tensor_names=list(vals), shape_and_slices=[""] * len(vals),
                  tensors=[tf.constant(v) for v in vals.values()])
prefixes = [prefix] + [p[: -len(".index")] for p in sorted(glob.glob(data + "/tf/*/*/*.index"))]
n = 0
for pre in prefixes:
    r = tf.train.load_checkpoint(pre)
    try:
        names = sorted(r.get_variable_to_shape_map())
    except UnicodeDecodeError:
        # TensorFlow's Python reader cannot list a checkpoint holding a name that is not UTF-8
        # (tf/dtypes has one): nothing to compare with there.
        continue
    with paramdex.safe_open(pre, framework="tf") as f:
        keys = [k if isinstance(k, str) else k.decode("utf-8", "surrogateescape") for k in f.keys()]
        assert sorted(keys) == names, (pre, keys, names)
        for k in f.keys():
            try:
                want = r.get_tensor(k if isinstance(k, str) else k.decode("utf-8", "surrogateescape"))
            except ValueError as e:  # TensorFlow's reader cannot give float8 ("not supported")
                assert "not supported" in str(e), e
                continue
            if isinstance(want, bytes):
                # A scalar string is a bytes value (SPEC.md 6.1): bytes in every framework.
                assert f.get_tensor(k) == want, (pre, k)
                n += 1
                continue
            want = np.asarray(want)
            same(f.get_tensor(k), want, f"{pre}:{k}")
            n += 1
print("tf tensors compared:", n)
assert n > len(vals)
'''

PADDLE_CHECK = r'''
import glob, os, sys
import numpy as np
import paddle
from paddle.base import core
import paramdex

work, data = sys.argv[1], sys.argv[2]
place = core.CPUPlace()
# (a) tensor files Paddle writes here (save_dense_tensor), every dtype it saves, LoD too.
made = []
for dt in ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "bool",
           "complex64", "complex128"]:
    a = (np.arange(12) % 3).astype(dt).reshape(3, 4)
    t = core.DenseTensor()
    t.set(a, place)
    p = os.path.join(work, f"{dt}.lodtensor")
    core.save_dense_tensor(t, p)
    made.append(p)
t = core.DenseTensor()
t.set(np.arange(10, dtype=np.float32).reshape(5, 2), place)
t.set_recursive_sequence_lengths([[2, 3]])
p = os.path.join(work, "lod.lodtensor")
core.save_dense_tensor(t, p)
made.append(p)
files = made + sorted(glob.glob(data + "/paddle/lod/*.lodtensor"))
n = 0
for p in files:
    want_t = core.load_dense_tensor(p)
    want = np.array(want_t)
    with paramdex.safe_open(p, framework="paddle") as f:
        (k,) = f.keys()
        if f.info(k).dtype in ("uint16", "uint32", "uint64"):
            continue
        got = f.get_tensor(k)
        assert isinstance(got, paddle.Tensor), type(got)
        g = got.numpy()
        assert g.shape == want.shape and g.dtype == want.dtype, (p, g.shape, want.shape, g.dtype, want.dtype)
        assert g.tobytes() == want.tobytes(), p
        assert f.lod(k) == [list(level) for level in want_t.lod()], (p, f.lod(k), want_t.lod())
        # numpy through paramdex is the same bytes too.
    with paramdex.safe_open(p, framework="np") as f:
        assert f.get_tensor(k).tobytes() == want.tobytes()
    n += 1
# (b) a model Paddle saved (program + combined parameters): every parameter equals what Paddle
# loads with load_combine.
for d in sorted(glob.glob(data + "/paddle/models/legacy")):
    with paramdex.safe_open(d, framework="np") as f:
        names = [k for k in f.keys()]
        ts = []
        for _ in names:
            t = core.DenseTensor()
            t.set(np.zeros([1], np.float32), place)
            ts.append(t)
        core.load_combine_func(os.path.join(d, "m.pdiparams"), names, ts, False, place)
        for k, t in zip(names, ts):
            assert f.get_tensor(k).tobytes() == np.array(t).tobytes(), (d, k)
            n += 1
print("paddle tensors compared:", n)
assert n >= len(made)
'''


def test_tensorflow_reads_equal_paramdex(tmp_path):
    need("tensorflow", load=False)
    run_child(TF_CHECK, str(tmp_path), DATA)


def test_paddle_reads_equal_paramdex(tmp_path):
    need("paddle", load=False)
    run_child(PADDLE_CHECK, str(tmp_path), DATA)
