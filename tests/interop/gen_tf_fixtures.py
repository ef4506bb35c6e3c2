#!/usr/bin/env python3
"""Generates the TensorFlow checkpoint fixtures under tests/data/tf/{dtypes,sharded,partitioned,lowp}.

Every checkpoint is written by real TensorFlow (tf.train.Checkpoint, tf.compat.v1 Saver in graph
mode, tf.raw_ops.SaveV2 / MergeV2Checkpoints). Each set gets a manifest.json in the format of
the existing sets: per tensor its name (plus name_hex when not UTF-8), dtype (paramdex names),
shape, nbytes and the sha256 of its raw little-endian row-major bytes (for strings: of the
concatenated elements, plus elements_hex), all taken from what TensorFlow itself restores
(RestoreV2 with an empty slice spec, which assembles partitioned tensors).

Usage: ~/.cache/paramdex/venv/bin/python tests/interop/gen_tf_fixtures.py [--out tests/data/tf]
Deterministic values (fixed seeds); re-running rewrites the three sets.
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import dtypes as tf_dtypes  # noqa: E402

from interop_common import tf_values as values  # noqa: E402

# float8 dtypes are not exported at the top level of the tensorflow module.
F8_E4M3FN = tf_dtypes.float8_e4m3fn
F8_E5M2 = tf_dtypes.float8_e5m2

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 3)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GENERATOR = "tests/interop/gen_tf_fixtures.py"

# TensorFlow dtype -> paramdex dtype name.
PDX_NAME = {
    tf.float32: "float32", tf.float64: "float64", tf.int32: "int32", tf.int64: "int64",
    tf.bool: "bool", tf.float16: "float16", tf.bfloat16: "bfloat16", tf.int8: "int8",
    tf.uint8: "uint8", tf.complex64: "complex64", tf.int16: "int16", tf.uint16: "uint16",
    tf.uint32: "uint32", tf.uint64: "uint64", tf.complex128: "complex128",
    F8_E4M3FN: "float8_e4m3fn", F8_E5M2: "float8_e5m2", tf.string: "string",
}
NUMERIC = [d for d in PDX_NAME if d != tf.string]


def display(name: bytes) -> str:
    """paramdex's lossless display of a name (SPEC.md section 7)."""
    out = []
    i = 0
    while i < len(name):
        for j in range(min(len(name), i + 4), i, -1):
            try:
                s = name[i:j].decode("utf-8")
            except UnicodeDecodeError:
                continue
            out.append(s.replace("\\", "\\\\"))
            i = j
            break
        else:
            out.append("\\x%02x" % name[i])
            i += 1
    return "".join(out)




def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def restore(prefix, name: bytes, dtype):
    """What TensorFlow restores for `name` (partitioned tensors assembled by TF itself)."""
    (t,) = tf.raw_ops.RestoreV2(
        prefix=prefix, tensor_names=tf.constant([name]), shape_and_slices=[""], dtypes=[dtype]
    )
    v = t.numpy()
    return np.array(v, dtype=object) if dtype == tf.string else v


def describe(prefix, ckpt_rel, name: bytes, dtype, extra=None, saved=None):
    """Manifest entry of one tensor, from what TF restores (or, for `saved`, from the value
    that was saved: TF cannot assemble partitioned float8 tensors itself)."""
    arr = restore(prefix, name, dtype) if saved is None else saved
    t = {}
    try:
        t["name"] = name.decode("utf-8")
    except UnicodeDecodeError:
        t["name"] = display(name)
        t["name_hex"] = name.hex()
    t["dtype"] = PDX_NAME[dtype]
    t["shape"] = list(arr.shape)
    t["lod"] = []
    if dtype == tf.string:
        els = [bytes(x) for x in arr.reshape(-1)]
        raw = b"".join(els)
        t["nbytes"] = len(raw)
        t["sha256"] = sha256(raw)
        t["elements_hex"] = [e.hex() for e in els]
        t["element_lengths"] = [len(e) for e in els]
    else:
        raw = np.ascontiguousarray(arr).tobytes()
        t["nbytes"] = len(raw)
        t["sha256"] = sha256(raw)
        flat = arr.reshape(-1)[:4]
        if dtype.is_complex:
            t["first_values"] = [[float(x.real), float(x.imag)] for x in flat]
        elif dtype == tf.bool:
            t["first_values"] = [bool(x) for x in flat]
        elif dtype.is_floating:
            t["first_values"] = [float(x) for x in flat.astype(np.float64)]
        else:
            t["first_values"] = [int(x) for x in flat]
    t["checkpoint"] = ckpt_rel
    if extra:
        t.update(extra)
    return t


def tf2_names(prefix):
    """(name bytes, dtype) of every tensor TF's CheckpointReader lists."""
    r = tf.train.load_checkpoint(prefix)
    dtypes = r.get_variable_to_dtype_map()
    return [(n.encode("utf-8"), dtypes[n]) for n in sorted(dtypes)]


class SetWriter:
    def __init__(self, out_root, name):
        self.set = name
        self.dir = os.path.join(out_root, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.checkpoints = []
        self.tensors = []

    def path(self, rel):
        p = os.path.join(self.dir, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def add_checkpoint(self, rel_prefix, api, tensors):
        prefix = os.path.join(self.dir, rel_prefix)
        d = os.path.dirname(prefix)
        base = os.path.basename(prefix)
        # Keep only the bundle itself (and TF's `checkpoint` state file); drop .meta graphs.
        for f in os.listdir(d):
            if f.startswith(base) and f.endswith(".meta"):
                os.remove(os.path.join(d, f))
        data = sorted(f for f in os.listdir(d) if f.startswith(base + ".data-"))
        self.checkpoints.append({
            "prefix": rel_prefix,
            "api": api,
            "format": "V2",
            "data_shards": len(data),
            "data_files": [os.path.join(os.path.dirname(rel_prefix), f) for f in data],
            "index_file": rel_prefix + ".index",
        })
        self.tensors.extend(tensors)

    def finish(self, notes):
        files = []
        for dirpath, _, names in os.walk(self.dir):
            for n in sorted(names):
                if n == "manifest.json":
                    continue
                p = os.path.join(dirpath, n)
                b = open(p, "rb").read()
                files.append({"path": os.path.relpath(p, self.dir), "size": len(b), "sha256": sha256(b)})
        files.sort(key=lambda f: f["path"])
        total = sum(f["size"] for f in files)
        manifest = {
            "set": "tf/" + self.set,
            "producer": {
                "library": "tensorflow",
                "version": tf.__version__,
                "numpy": np.__version__,
                "python": platform.python_version(),
            },
            "generator": GENERATOR,
            "checkpoints": self.checkpoints,
            "notes": notes,
            "files": files,
            "tensors": self.tensors,
        }
        # One line per tensor keeps large sets readable and small.
        tensors = manifest.pop("tensors")
        text = json.dumps(manifest, indent=1, ensure_ascii=False)
        lines = ",\n".join("  " + json.dumps(t, ensure_ascii=False) for t in tensors)
        text = text[:-2] + ',\n "tensors": [\n' + lines + "\n ]\n}\n"
        json.loads(text)
        with open(os.path.join(self.dir, "manifest.json"), "w", encoding="utf-8") as f:
            f.write(text)
        print(f"tf/{self.set}: {len(self.checkpoints)} checkpoints, {len(self.tensors)} tensors, {total} bytes")
        return total


def gen_dtypes(out_root):
    s = SetWriter(out_root, "dtypes")
    # (1) TF2 object-based checkpoint: every dtype a tf.Variable holds, scalars, zero-element
    # tensors, non-ASCII attribute names, strings with non-UTF-8 elements.
    root = tf.Module()
    for i, d in enumerate(NUMERIC):
        if d in (F8_E4M3FN, F8_E5M2):
            continue  # no float8 variables on CPU; written with SaveV2 below
        setattr(root, "v_" + PDX_NAME[d], tf.Variable(values(d, [2, 3], i)))
        setattr(root, "s_" + PDX_NAME[d], tf.Variable(values(d, [], 100 + i)))
        setattr(root, "e_" + PDX_NAME[d], tf.Variable(values(d, [0, 3], 200 + i)))
    setattr(root, "größe_ünïcode", tf.Variable(values(tf.float32, [3], 7)))
    setattr(root, "日本語_名前", tf.Variable(values(tf.int32, [2], 8)))
    root.strs = tf.Variable(tf.constant([b"", b"plain", "ünï ☃".encode(), b"\x00\xff\xfe raw", b"x" * 130]))
    root.str_scalar = tf.Variable(tf.constant(b"one"))
    root.str_empty = tf.Variable(tf.constant([], dtype=tf.string))
    ck = tf.train.Checkpoint(model=root)
    prefix = ck.write(s.path("tf2/ckpt"))
    s.add_checkpoint("tf2/ckpt", "tf.train.Checkpoint.write",
                     [describe(prefix, "tf2/ckpt", n, d) for n, d in tf2_names(prefix)])

    # (2) SaveV2 directly: every numeric dtype incl. float8, a name that is not UTF-8, a name
    # with a backslash, 200 names with long shared prefixes (check_tf.py writes 1,000+).
    names, tensors, dts = [], [], []
    for i, d in enumerate(NUMERIC):
        names.append(("raw/" + PDX_NAME[d]).encode())
        tensors.append(tf.constant(values(d, [3, 2], 300 + i), dtype=d))
        dts.append(d)
    for n, d, shape in [(b"\xff\xfenot-utf8/\x80", tf.int16, [2]), (b"back\\slash", tf.uint8, [1]),
                        (b"scalar/f8", F8_E5M2, []), (b"empty/f8", F8_E4M3FN, [0])]:
        names.append(n)
        tensors.append(tf.constant(values(d, shape, len(names)), dtype=d))
        dts.append(d)
    for i in range(200):
        names.append(f"encoder/layer_{i // 10:03d}/attention/self/query_key_value/kernel_{i % 10}".encode())
        tensors.append(tf.constant(np.int8(i % 127)))
        dts.append(tf.int8)
    prefix = s.path("raw/bundle")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=tf.constant(names), shape_and_slices=[""] * len(names),
                      tensors=tensors)
    order = sorted(range(len(names)), key=lambda i: names[i])
    s.add_checkpoint("raw/bundle", "tf.raw_ops.SaveV2",
                     [describe(prefix, "raw/bundle", names[i], dts[i]) for i in order])
    return s.finish("strings: nbytes/sha256 cover the concatenated element bytes only; "
                    "names that are not UTF-8 are given in paramdex's escaped form plus name_hex")


def gen_sharded(out_root):
    s = SetWriter(out_root, "sharded")
    # (1) TF2 MaxShardSizePolicy: tensors larger than a shard are split into slices that live
    # in different shards.
    m = tf.Module()
    m.a = tf.Variable(values(tf.float32, [10, 10], 1))
    m.b = tf.Variable(values(tf.int64, [30], 2))
    m.c = tf.Variable(values(tf.float64, [50], 3))
    m.d = tf.Variable(values(tf.bfloat16, [7, 3], 4))
    m.s = tf.Variable(tf.constant([b"alpha", b"beta"]))
    ck = tf.train.Checkpoint(m=m)
    opts = tf.train.CheckpointOptions(
        experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(max_shard_size=200))
    prefix = ck.write(s.path("policy/ckpt"), options=opts)
    s.add_checkpoint("policy/ckpt", "tf.train.Checkpoint.write + MaxShardSizePolicy(200)",
                     [describe(prefix, "policy/ckpt", n, d) for n, d in tf2_names(prefix)])

    # (2) graph-mode sharded Saver with one variable per (virtual) CPU device: 3 shards.
    g = tf.Graph()
    with g.as_default():
        vs = []
        for i, (d, shape) in enumerate([(tf.float32, [4, 2]), (tf.int32, [5]), (tf.complex64, [3])]):
            with tf.device(f"/cpu:{i}"):
                vs.append(tf.compat.v1.get_variable(f"dev{i}/var", initializer=values(d, shape, 10 + i)))
        with tf.device("/cpu:1"):
            vs.append(tf.compat.v1.get_variable("dev1/scalar", initializer=np.float64(2.5)))
        saver = tf.compat.v1.train.Saver(sharded=True, save_relative_paths=True)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            prefix = saver.save(sess, s.path("v1/model.ckpt"), write_meta_graph=False)
    s.add_checkpoint("v1/model.ckpt", "tf.compat.v1.train.Saver(sharded=True), 3 devices",
                     [describe(prefix, "v1/model.ckpt", n, d) for n, d in tf2_names(prefix)])

    # (3) MergeV2Checkpoints of three SaveV2 bundles; a partitioned tensor whose slices come
    # from different bundles (MergeBundles concatenates their slice lists).
    parts = []
    full = values(tf.float32, [6, 4], 20)
    specs = [
        ([b"m/x", b"part"], ["", "6 4 0,2:-"], [values(tf.int64, [3], 21), full[0:2]]),
        ([b"m/y", b"part"], ["", "6 4 2,3:-"], [values(tf.uint16, [2, 2], 22), full[2:5]]),
        ([b"part", b"str"], ["6 4 5,1:-", ""], [full[5:6], np.array([b"merged", b""], dtype=object)]),
    ]
    for i, (names, slices, tensors) in enumerate(specs):
        p = s.path(f"merged/tmp_{i}")
        tf.raw_ops.SaveV2(prefix=p, tensor_names=tf.constant(names), shape_and_slices=slices,
                          tensors=[tf.constant(t) for t in tensors])
        parts.append(p)
    prefix = s.path("merged/m")
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=prefix)
    for f in os.listdir(os.path.dirname(prefix)):
        assert not f.startswith("tmp_"), f
    merged = [(b"m/x", tf.int64), (b"m/y", tf.uint16), (b"part", tf.float32), (b"str", tf.string)]
    s.add_checkpoint("merged/m", "tf.raw_ops.SaveV2 x3 + MergeV2Checkpoints",
                     [describe(prefix, "merged/m", n, d) for n, d in merged])
    return s.finish("sharded checkpoints; partitioned tensors are listed once with their full shape")


def gen_partitioned(out_root):
    s = SetWriter(out_root, "partitioned")
    # (1) graph-mode partitioned variables (tf.compat.v1 partitioners) saved by the v1 Saver.
    # Each partition is assigned its part of a deterministic full value.
    g = tf.Graph()
    with g.as_default():
        specs = {  # saver name -> (variable name, dtype, shape, partitioner)
            "emb": ("emb", tf.float32, [200, 3], tf.compat.v1.fixed_size_partitioner(3)),
            "wide": ("wide", tf.int8, [16400], tf.compat.v1.fixed_size_partitioner(2)),
            "ünï/çødé": ("cols", tf.float64, [4, 6], tf.compat.v1.fixed_size_partitioner(2, axis=1)),
            "c128": ("c128", tf.complex128, [5, 2], tf.compat.v1.fixed_size_partitioner(2)),
            "flags": ("flags", tf.bool, [9], tf.compat.v1.fixed_size_partitioner(3)),
        }
        var_list, assigns = {}, []
        for i, (key, (vname, d, shape, part)) in enumerate(specs.items()):
            pv = tf.compat.v1.get_variable(vname, shape=shape, dtype=d,
                                           initializer=tf.compat.v1.zeros_initializer(), partitioner=part)
            full = values(d, shape, 40 + i)
            for p in pv:
                off = p._get_save_slice_info().var_offset
                idx = tuple(slice(o, o + n) for o, n in zip(off, p.shape.as_list()))
                assigns.append(p.assign(full[idx]))
            var_list[key] = pv
        var_list["plain"] = tf.compat.v1.get_variable("plain", initializer=values(tf.float32, [2], 6))
        saver = tf.compat.v1.train.Saver(var_list, save_relative_paths=True)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(assigns)
            prefix = saver.save(sess, s.path("v1/model.ckpt"), write_meta_graph=False)
    s.add_checkpoint("v1/model.ckpt", "tf.compat.v1.train.Saver + fixed_size_partitioner",
                     [describe(prefix, "v1/model.ckpt", n, d, {"partitioned": n != b"plain"})
                      for n, d in tf2_names(prefix)])

    # (2) SaveV2 with explicit slice specs: a 3-D tensor cut on two axes, slices with starts
    # of 1-3 ordered-code bytes, a bfloat16 and a float8 tensor in slices.
    full = values(tf.float32, [3, 4, 5], 30)
    big = values(tf.uint8, [9000], 31)
    bf = values(tf.bfloat16, [4, 4], 32)
    f8 = values(F8_E4M3FN, [6], 33)
    entries = [
        (b"cube", "3 4 5 0,3:0,1:-", full[:, 0:1, :]),
        (b"cube", "3 4 5 0,2:1,3:-", full[0:2, 1:4, :]),
        (b"cube", "3 4 5 2,1:1,3:0,2", full[2:3, 1:4, 0:2]),
        (b"cube", "3 4 5 2,1:1,3:2,3", full[2:3, 1:4, 2:5]),
        (b"big", "9000 0,70", big[0:70]),
        (b"big", "9000 70,8130", big[70:8200]),
        (b"big", "9000 8200,800", big[8200:9000]),
        (b"bf", "4 4 -:0,1", bf[:, 0:1]),
        (b"bf", "4 4 -:1,3", bf[:, 1:4]),
        (b"f8", "6 0,4", f8[0:4]),
        (b"f8", "6 4,2", f8[4:6]),
    ]
    prefix = s.path("raw/slices")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=tf.constant([e[0] for e in entries]),
                      shape_and_slices=[e[1] for e in entries],
                      tensors=[tf.constant(e[2]) for e in entries])
    dts = {b"big": tf.uint8, b"bf": tf.bfloat16, b"cube": tf.float32, b"f8": F8_E4M3FN}
    tensors = []
    for n in sorted(dts):
        if n == b"f8":
            note = {"partitioned": True,
                    "note": "TensorFlow does not assemble float8 slices (RestoreV2: Dtype not supported); "
                            "values are the saved ones"}
            tensors.append(describe(prefix, "raw/slices", n, dts[n], note, saved=f8))
        else:
            tensors.append(describe(prefix, "raw/slices", n, dts[n], {"partitioned": True}))
    s.add_checkpoint("raw/slices", "tf.raw_ops.SaveV2 with slice specs", tensors)
    return s.finish("partitioned tensors are listed once with their full shape; sha256 covers the "
                    "tensor as TensorFlow assembles it")


# The low-precision types TensorFlow 2.21 writes (tf.dtypes.experimental), DataType 26-33.
LOWP = ["float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "int4", "uint4", "int2",
        "uint2", "float4_e2m1fn"]


def gen_lowp(out_root):
    """tf/lowp: one [2, 3] tensor of each low-precision type, written by SaveV2 from ml_dtypes
    arrays (one element per byte, the value in the low bits: int4 -2 is 0x0e)."""
    import ml_dtypes

    s = SetWriter(out_root, "lowp")
    names, tensors, dts = [], [], []
    for n in LOWP:
        d = getattr(tf.dtypes.experimental, n)
        PDX_NAME[d] = n
        signed = [[1, -2, 3], [0, 1, -1]]
        unsigned = [[1, 2, 3], [0, 1, 3]]
        v = np.array(unsigned if n.startswith("u") else signed, dtype=np.float32)
        names.append(n.encode())
        tensors.append(tf.constant(v.astype(getattr(ml_dtypes, n))))
        dts.append(d)
    prefix = s.path("raw/bundle")
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=tf.constant(names), shape_and_slices=[""] * len(names),
                      tensors=tensors)
    order = sorted(range(len(names)), key=lambda i: names[i])
    s.add_checkpoint("raw/bundle", "tf.raw_ops.SaveV2",
                     [describe(prefix, "raw/bundle", names[i], dts[i]) for i in order])
    return s.finish("low-precision types, one element per byte (DataType 26-33)")


SETS = {"dtypes": gen_dtypes, "sharded": gen_sharded, "partitioned": gen_partitioned}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "tf"))
    ap.add_argument("--sets", default="dtypes,sharded,partitioned,lowp",
                    help="comma-separated sets to (re)generate")
    a = ap.parse_args()
    SETS["lowp"] = gen_lowp
    total = sum(SETS[n](a.out) for n in a.sets.split(","))
    print(f"total {total} bytes")
    if total > 1 << 20:
        print("fixtures exceed 1 MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
