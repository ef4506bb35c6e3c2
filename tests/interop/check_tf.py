#!/usr/bin/env python3
"""Interop check: TensorFlow <-> paramdex, verified by TensorFlow itself.

(a) every tensor of every fixture in tests/data/tf/*/ read through `paramdex ls --json` and
    `paramdex get --format raw` matches the manifest (dtype, shape, nbytes, sha256; string
    elements through `get --format json`);
(b) checkpoints written here by TensorFlow (every numeric dtype incl. bfloat16/half/complex/
    uint*/bool/float8, scalars, zero-element tensors, 1,000+ names with long shared prefixes,
    non-ASCII and non-UTF-8 names, a 64 MiB tensor split across shards by MaxShardSizePolicy,
    MergeV2Checkpoints, a sharded graph-mode Saver, partitioned variables, string tensors) read
    by paramdex equal what TensorFlow reads;
(c) native files made by `paramdex convert CKPT out.pdx --align {1,64,4096} --compress
    {none,snappy}` and exposed with `paramdex export-tf` are read by tf.train.load_checkpoint and
    tf.compat.v1.train.NewCheckpointReader with identical bytes, dtypes and shapes (hard links,
    zero bytes copied); `convert --to tf` output is read by TensorFlow too, including an
    object-based restore;
(d) errors: a corrupt data byte gives exit 3 naming file, tensor, offset and both checksums;
    converting a checkpoint with strings to native fails naming the tensor;
(e) sharded native checkpoints: `paramdex demo --ranks 3` (three writer processes holding
    tensor-parallel slices, merged into PREFIX.index; then the next step saved incrementally,
    reusing unchanged slices from the first, which is removed) is read by tf.train.load_checkpoint and
    NewCheckpointReader, every tensor (assembled from its slices by TensorFlow) equal to what
    paramdex reads; `paramdex get --slice` of TensorFlow's own partitioned variables equals the
    same region of what TensorFlow restores.

Env: PARAMDEX = the paramdex binary, PARAMDEX_ROOT = the repository. Prints one summary line
per check; exits 1 on any mismatch.
"""

import glob
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import dtypes as tf_dtypes  # noqa: E402

from interop_common import tf_values as values  # noqa: E402

PDX = os.environ["PARAMDEX"]
ROOT = os.environ["PARAMDEX_ROOT"]
F8 = [tf_dtypes.float8_e4m3fn, tf_dtypes.float8_e5m2]
NUMERIC = [tf.float32, tf.float64, tf.int32, tf.int64, tf.bool, tf.float16, tf.bfloat16, tf.int8,
           tf.uint8, tf.complex64, tf.int16, tf.uint16, tf.uint32, tf.uint64, tf.complex128] + F8

cpus = tf.config.list_physical_devices("CPU")
tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * 3)

FAILURES = []
START = time.time()


def report(check, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {check}: {detail}", flush=True)
    if not ok:
        FAILURES.append(check)


class Mismatch(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Mismatch(msg)


def pdx(*args, ok=True):
    r = subprocess.run([PDX, *map(str, args)], capture_output=True)
    if ok and r.returncode != 0:
        raise Mismatch(f"paramdex {' '.join(map(str, args))} exited {r.returncode}: {r.stderr.decode(errors='replace')}")
    return r


def name_bytes(t):
    return bytes.fromhex(t["name_hex"]) if "name_hex" in t else t["name"].encode("utf-8")


def pdx_ls(path):
    return {name_bytes(t): t for t in json.loads(pdx("ls", "--json", path).stdout)}


def pdx_raw(path, name):
    return pdx("get", path, "--hex", name.hex(), "--format", "raw").stdout


def pdx_strings(path, name):
    """String elements (row-major) from `get --format json` (UTF-8 or {"hex": ...})."""
    data = json.loads(pdx("get", path, "--hex", name.hex(), "--format", "json", "--limit", "100000000").stdout)["data"]
    out = []

    def walk(x):
        if isinstance(x, list):
            for y in x:
                walk(y)
        elif isinstance(x, dict):
            out.append(bytes.fromhex(x["hex"]))
        else:
            out.append(x.encode("utf-8"))
    walk(data)
    return out


def sha(b):
    return hashlib.sha256(b).hexdigest()




# ---------------------------------------------------------------------------------------------
# What TensorFlow reads.

def tf_read(prefix, names=None):
    """name bytes -> (dtype name, shape, bytes or list of string elements), as TF reads them.
    With `names` (name bytes -> tf dtype) through RestoreV2 (any bytes as names), otherwise
    through tf.train.load_checkpoint."""
    out = {}
    if names is None:
        r = tf.train.load_checkpoint(prefix)
        for n, d in r.get_variable_to_dtype_map().items():
            out[n.encode("utf-8")] = (d, r.get_tensor(n))
    else:
        for n, d in names.items():
            (t,) = tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=tf.constant([n]), shape_and_slices=[""], dtypes=[d])
            out[n] = (d, t.numpy())
    res = {}
    for n, (d, v) in out.items():
        if d == tf.string:
            a = np.array(v, dtype=object)
            res[n] = ("string", list(a.shape), [bytes(x) for x in a.reshape(-1)])
        else:
            a = np.asarray(v)  # not ascontiguousarray: it makes scalars 1-d
            res[n] = (d.name, list(a.shape), a.tobytes(order="C"))
    return res


def compare(path, want, label):
    """paramdex's view of `path` equals `want` (from tf_read). Returns (tensors, bytes)."""
    got = pdx_ls(path)
    expect(sorted(got) == sorted(want),
           f"{label}: names differ: only paramdex {sorted(set(got) - set(want))[:5]}, only TF {sorted(set(want) - set(got))[:5]}")
    nbytes = 0
    for n, (dtype, shape, data) in want.items():
        t = got[n]
        if dtype == "string" and shape == []:
            # A scalar string is a bytes value (SPEC.md 6.1): its value is the one element.
            expect(t["dtype"] == "bytes", f"{label} {n!r}: dtype {t['dtype']} != bytes")
            expect(t["shape"] == [] and t["nbytes"] == len(data[0]), f"{label} {n!r}: shape/nbytes")
            expect(pdx_raw(path, n) == data[0], f"{label} {n!r}: bytes value differs")
            nbytes += len(data[0])
            continue
        expect(t["dtype"] == dtype, f"{label} {n!r}: dtype {t['dtype']} != {dtype}")
        expect(t["shape"] == shape, f"{label} {n!r}: shape {t['shape']} != {shape}")
        if dtype == "string":
            els = pdx_strings(path, n)
            expect(els == data, f"{label} {n!r}: string elements differ")
            expect(pdx_raw(path, n) == b"".join(data), f"{label} {n!r}: raw strings differ")
            nbytes += sum(map(len, data))
        else:
            raw = pdx_raw(path, n)
            expect(len(raw) == len(data) and raw == data, f"{label} {n!r}: bytes differ ({len(raw)} vs {len(data)})")
            nbytes += len(raw)
    pdx("verify", path)
    return len(want), nbytes


# ---------------------------------------------------------------------------------------------
# (a) fixtures

def check_fixtures():
    n_ck = n_t = 0
    for mpath in sorted(glob.glob(os.path.join(ROOT, "tests/data/tf/*/manifest.json"))):
        m = json.load(open(mpath, encoding="utf-8"))
        base = os.path.dirname(mpath)
        for ck in m["checkpoints"]:
            prefix = os.path.join(base, ck["prefix"])
            label = f"{m['set']}/{ck['prefix']}"
            want = {name_bytes(t): t for t in m["tensors"] if t["checkpoint"] == ck["prefix"]}
            got = pdx_ls(prefix)
            expect(sorted(got) == sorted(want), f"{label}: names differ")
            for n, t in want.items():
                g = got[n]
                if t["dtype"] == "string" and t["shape"] == []:
                    t = dict(t, dtype="bytes")  # a scalar string is a bytes value (SPEC.md 6.1)
                for k in ("dtype", "shape", "nbytes"):
                    expect(g[k] == t[k], f"{label} {n!r}: {k} {g[k]} != {t[k]}")
                expect(sha(pdx_raw(prefix, n)) == t["sha256"], f"{label} {n!r}: sha256 differs")
                if t["dtype"] == "string":
                    expect([e.hex() for e in pdx_strings(prefix, n)] == t["elements_hex"], f"{label} {n!r}: elements")
                elif t["dtype"] == "bytes":
                    expect([pdx_raw(prefix, n).hex()] == t["elements_hex"], f"{label} {n!r}: bytes value")
            # Also named by its .index path.
            expect(sorted(pdx_ls(prefix + ".index")) == sorted(want), f"{label}: via .index")
            pdx("verify", prefix)
            n_ck += 1
            n_t += len(want)
    return n_ck, n_t


# ---------------------------------------------------------------------------------------------
# (b) fresh checkpoints written by TensorFlow

def write_fresh(d):
    """Writes the fresh checkpoints; returns [(label, prefix, names-for-RestoreV2 or None)]."""
    out = []
    # 1. Every dtype a tf.Variable holds, scalars, zero-element, non-ASCII, strings (TF2).
    m = tf.Module()
    for i, dt in enumerate(NUMERIC):
        if dt in F8:
            continue
        setattr(m, "v_" + dt.name, tf.Variable(values(dt, [3, 5], i)))
        setattr(m, "s_" + dt.name, tf.Variable(values(dt, [], 50 + i)))
        setattr(m, "e_" + dt.name, tf.Variable(values(dt, [4, 0, 2], 90 + i)))
    setattr(m, "ünïcödé_名前", tf.Variable(values(tf.float32, [2, 2], 7)))
    m.strs = tf.Variable(tf.constant([[b"", b"ascii", "ünï ☃".encode()], [b"\x00\xff\x80", b"y" * 5000, b"z"]]))
    m.str_scalar = tf.Variable(tf.constant(b"scalar string"))
    m.str_empty = tf.Variable(tf.zeros([0, 3], dtype=tf.string))
    p = tf.train.Checkpoint(model=m).save(os.path.join(d, "dtypes", "ckpt"))
    out.append(("tf2 every dtype + strings", p, None))

    # 2. SaveV2: float8 (no float8 variables on CPU), 1,200 names with long shared prefixes,
    #    a name that is not UTF-8.
    names, tensors, dts = [], [], {}
    for i, dt in enumerate(NUMERIC):
        n = f"raw/{dt.name}".encode()
        names.append(n)
        tensors.append(tf.constant(values(dt, [2, 3], 200 + i), dtype=dt))
        dts[n] = dt
    for i in range(1200):
        n = (f"transformer/encoder/layer_{i // 12:04d}/multi_head_attention/"
             f"{['query', 'key', 'value'][i % 3]}/kernel_{i % 4}").encode()
        names.append(n)
        tensors.append(tf.constant(np.float32(i)))
        dts[n] = tf.float32
    for n, dt, shape in [(b"\xff\xfe/not utf-8/\xc3", tf.int32, [3]), (b"f8/scalar", F8[0], []), (b"f8/empty", F8[1], [0])]:
        names.append(n)
        tensors.append(tf.constant(values(dt, shape, len(names)), dtype=dt))
        dts[n] = dt
    p = os.path.join(d, "many", "bundle")
    tf.raw_ops.SaveV2(prefix=p, tensor_names=tf.constant(names), shape_and_slices=[""] * len(names), tensors=tensors)
    out.append(("SaveV2 float8 + 1,200 shared-prefix names + non-UTF-8 name", p, dts))

    # 3. A 64 MiB tensor split across shards by MaxShardSizePolicy.
    m = tf.Module()
    m.big = tf.Variable(values(tf.float32, [4096, 4096], 1))
    m.small = tf.Variable(values(tf.int64, [10], 2))
    m.text = tf.Variable(tf.constant([b"sharded", b"strings"]))
    opts = tf.train.CheckpointOptions(
        experimental_sharding_callback=tf.train.experimental.MaxShardSizePolicy(max_shard_size=20 << 20))
    p = tf.train.Checkpoint(m=m).write(os.path.join(d, "big", "ckpt"), options=opts)
    shards = len(glob.glob(p + ".data-*"))
    out.append((f"64 MiB tensor, MaxShardSizePolicy, {shards} shards", p, None))

    # 4. MergeV2Checkpoints of three bundles, a partitioned tensor spread over them.
    full = values(tf.float64, [9, 5], 3)
    parts = []
    specs = [([b"a", b"part"], ["", "9 5 0,4:-"], [values(tf.int16, [7], 4), full[0:4]]),
             ([b"b", b"part"], ["", "9 5 4,3:-"], [values(tf.complex64, [2], 5), full[4:7]]),
             ([b"part", b"s"], ["9 5 7,2:-", ""], [full[7:9], np.array([b"m", b"erged"], dtype=object)])]
    for i, (n, sl, ts) in enumerate(specs):
        pp = os.path.join(d, "merged", f"part_{i}")
        tf.raw_ops.SaveV2(prefix=pp, tensor_names=tf.constant(n), shape_and_slices=sl, tensors=[tf.constant(t) for t in ts])
        parts.append(pp)
    p = os.path.join(d, "merged", "m")
    tf.raw_ops.MergeV2Checkpoints(checkpoint_prefixes=parts, destination_prefix=p)
    out.append(("MergeV2Checkpoints of 3 bundles", p, None))

    # 5. Graph mode: partitioned variables, sharded Saver over 3 devices.
    g = tf.Graph()
    with g.as_default():
        assigns = []
        specs = [("emb", tf.float32, [1000, 8], tf.compat.v1.fixed_size_partitioner(4), "/cpu:0"),
                 ("cols", tf.int64, [6, 130], tf.compat.v1.fixed_size_partitioner(3, axis=1), "/cpu:1"),
                 # TF's own restore cannot assemble float16/uint*/float8 slices; bfloat16 it can.
                 ("bf", tf.bfloat16, [20000], tf.compat.v1.fixed_size_partitioner(2), "/cpu:2"),
                 ("c", tf.complex128, [7, 2], tf.compat.v1.fixed_size_partitioner(2), "/cpu:0")]
        for i, (n, dt, shape, part, dev) in enumerate(specs):
            with tf.device(dev):
                pv = tf.compat.v1.get_variable(n, shape=shape, dtype=dt, initializer=tf.compat.v1.zeros_initializer(),
                                               partitioner=part)
            fv = values(dt, shape, 60 + i)
            for v in pv:
                off = v._get_save_slice_info().var_offset
                assigns.append(v.assign(fv[tuple(slice(o, o + s) for o, s in zip(off, v.shape.as_list()))]))
        with tf.device("/cpu:2"):
            tf.compat.v1.get_variable("plain", initializer=values(tf.uint8, [3], 9))
        saver = tf.compat.v1.train.Saver(sharded=True)
        os.makedirs(os.path.join(d, "part"))
        with tf.compat.v1.Session() as s:
            s.run(tf.compat.v1.global_variables_initializer())
            s.run(assigns)
            p = saver.save(s, os.path.join(d, "part", "model.ckpt"), write_meta_graph=False)
    out.append(("graph-mode partitioned variables, sharded Saver", p, None))
    return out


def check_fresh(d):
    fresh = write_fresh(d)
    for label, prefix, names in fresh:
        try:
            n, b = compare(prefix, tf_read(prefix, names), label)
            report("b: TF -> paramdex", True, f"{label}: {n} tensors, {b} bytes identical")
        except Mismatch as e:
            report("b: TF -> paramdex", False, str(e))
    return fresh


# ---------------------------------------------------------------------------------------------
# (c) paramdex -> TF

def tf_both_readers(prefix):
    """What load_checkpoint and NewCheckpointReader read; asserts they agree."""
    a = tf_read(prefix)
    r = tf.compat.v1.train.NewCheckpointReader(prefix)
    b = {}
    for n, dt in r.get_variable_to_dtype_map().items():
        v = np.asarray(r.get_tensor(n))
        b[n.encode()] = (dt.name, list(v.shape), v.tobytes(order="C") if dt != tf.string else None)
    expect(sorted(a) == sorted(b), f"{prefix}: load_checkpoint and NewCheckpointReader list different names")
    for n in a:
        if a[n][0] != "string":
            expect(a[n] == b[n], f"{prefix} {n!r}: the two TF readers differ")
    return a


def check_export(d, fresh):
    numeric = [(label, p) for label, p, names in fresh
               if names is None and "strings" not in label and "64 MiB" not in label and "Merge" not in label]
    # A numeric-only TF2 checkpoint as well: every dtype (object graph excluded by conversion
    # failing on it, so build one with SaveV2 through tf.train.Checkpoint-free names).
    p = os.path.join(d, "numeric", "all")
    names = [f"all/{dt.name}".encode() for dt in NUMERIC] + [b"scalar", b"empty", "ünï/名".encode()]
    ts = [tf.constant(values(dt, [3, 4], 300 + i), dtype=dt) for i, dt in enumerate(NUMERIC)]
    ts += [tf.constant(np.float64(1.5)), tf.zeros([0, 7], tf.int32), tf.constant([1, 2], tf.uint16)]
    tf.raw_ops.SaveV2(prefix=p, tensor_names=tf.constant(names), shape_and_slices=[""] * len(names), tensors=ts)
    numeric.insert(0, ("every numeric dtype", p))
    combos = 0
    for label, src in numeric:
        want = tf_read(src)
        for align in (1, 64, 4096):
            for comp in ("none", "snappy"):
                tag = f"{label} align={align} compress={comp}"
                try:
                    out = os.path.join(d, "pdx", f"{abs(hash(tag))}.pdx")
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    pdx("convert", src, out, "--align", align, "--compress", comp)
                    prefix = os.path.join(d, "export", f"{abs(hash(tag))}", "ckpt")
                    os.makedirs(os.path.dirname(prefix), exist_ok=True)
                    msg = pdx("export-tf", out, prefix).stdout.decode()
                    expect("zero bytes copied" in msg, f"{tag}: export-tf did not hard-link: {msg}")
                    ino = os.stat(out).st_ino
                    expect(os.stat(prefix + ".index").st_ino == ino == os.stat(prefix + ".data-00000-of-00001").st_ino,
                           f"{tag}: not hard links")
                    got = tf_both_readers(prefix)
                    expect(got == want, f"{tag}: TensorFlow reads different tensors")
                    combos += 1
                except Mismatch as e:
                    report("c: paramdex export-tf -> TF", False, str(e))
                    return
    report("c: paramdex export-tf -> TF", True,
           f"{combos} native files ({len(numeric)} checkpoints x align 1/64/4096 x none/snappy) read by "
           "load_checkpoint and NewCheckpointReader, identical")

    # The 64 MiB sharded tensor through a native file, once.
    big = next(p for label, p, _ in fresh if "64 MiB" in label)
    try:
        out = os.path.join(d, "pdx", "big.pdx")
        r = pdx("convert", big, out, ok=False)
        # The object graph (a scalar string) is a bytes value; the string tensor is refused by name.
        expect(r.returncode != 0 and b"m/text/.ATTRIBUTES/VARIABLE_VALUE" in r.stderr
               and b"_CHECKPOINTABLE_OBJECT_GRAPH" not in r.stderr,
               "converting a checkpoint with string tensors must fail naming the string tensor")
        # Numeric part only: go through --to tf is not needed; write a numeric copy via SaveV2.
        want = tf_read(big)
        del want[b"_CHECKPOINTABLE_OBJECT_GRAPH"], want[b"m/text/.ATTRIBUTES/VARIABLE_VALUE"]
        num = os.path.join(d, "bignum", "b")
        rr = tf.train.load_checkpoint(big)
        tf.raw_ops.SaveV2(prefix=num, tensor_names=tf.constant(list(want)), shape_and_slices=[""] * len(want),
                          tensors=[tf.constant(rr.get_tensor(n.decode())) for n in want])
        pdx("convert", num, out, "--align", 4096)
        prefix = os.path.join(d, "export", "big", "ckpt")
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        pdx("export-tf", out, prefix)
        expect(tf_both_readers(prefix) == want, "64 MiB export differs")
        report("c: paramdex export-tf -> TF", True, f"64 MiB tensor via native file: identical ({os.path.getsize(out)} bytes)")
    except Mismatch as e:
        report("c: paramdex export-tf -> TF", False, str(e))

    # convert --to tf from TF checkpoints (strings, partitioned, sharded) and from a native file.
    done = []
    try:
        for label, src, names in fresh:
            if "64 MiB" in label:
                continue
            prefix = os.path.join(d, "totf", f"{abs(hash(label))}", "ckpt")
            os.makedirs(os.path.dirname(prefix), exist_ok=True)
            pdx("convert", src, prefix, "--to", "tf")
            expect(tf_read(prefix, names) == tf_read(src, names), f"convert --to tf of {label}: TF reads different tensors")
            done.append(label)
        native = os.path.join(d, "pdx", "all.pdx")
        pdx("convert", p, native)
        prefix = os.path.join(d, "totf", "from-native", "ckpt")
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        pdx("convert", native, prefix, "--to", "tf")
        expect(tf_both_readers(prefix) == tf_read(p), "convert --to tf of a native file differs")
        done.append("a native file")
        # An object-based restore of a TF2 checkpoint rewritten by paramdex.
        src = next(pp for label, pp, _ in fresh if "every dtype" in label)
        prefix = os.path.join(d, "totf", "restore", "ckpt")
        os.makedirs(os.path.dirname(prefix), exist_ok=True)
        pdx("convert", src, prefix, "--to", "tf")
        m = tf.Module()
        m.v_float32 = tf.Variable(tf.zeros([3, 5]))
        m.strs = tf.Variable(tf.zeros([2, 3], tf.string))
        tf.train.Checkpoint(model=m).restore(prefix).expect_partial()
        orig = tf.train.load_checkpoint(src)
        expect(np.array_equal(m.v_float32.numpy(), orig.get_tensor("model/v_float32/.ATTRIBUTES/VARIABLE_VALUE")),
               "object-based restore: v_float32 differs")
        expect(m.strs.numpy().tolist() == orig.get_tensor("model/strs/.ATTRIBUTES/VARIABLE_VALUE").tolist(),
               "object-based restore: strs differs")
        done.append("tf.train.Checkpoint.restore")
        report("c: paramdex convert --to tf -> TF", True, "; ".join(done))
    except Mismatch as e:
        report("c: paramdex convert --to tf -> TF", False, str(e))


def check_object_graph(d):
    """A TF2 checkpoint (tf.train.Checkpoint, numeric variables) converted to a native file keeps
    its _CHECKPOINTABLE_OBJECT_GRAPH as a bytes value (SPEC.md 6.1); TensorFlow reads that native
    file (export-tf: hard links) with the graph as a scalar string, and tf.train.Checkpoint.restore
    works on the native file exposed by export-tf and on `convert --to tf` of it."""
    try:
        src_dir = os.path.join(d, "graph", "src")
        m = tf.Module()
        m.dense = tf.Module()
        m.dense.kernel = tf.Variable(values(tf.float32, [4, 3], 11))
        m.dense.bias = tf.Variable(values(tf.float64, [3], 12))
        m.step = tf.Variable(np.int64(42))
        opt_state = tf.Variable(values(tf.bfloat16, [2, 2], 13))
        src = tf.train.Checkpoint(model=m, opt_state=opt_state).save(os.path.join(src_dir, "ckpt"))
        native = os.path.join(d, "graph", "g.pdx")
        pdx("convert", src, native)
        ls = pdx_ls(native)
        g = ls[b"_CHECKPOINTABLE_OBJECT_GRAPH"]
        expect(g["dtype"] == "bytes" and g["shape"] == [], f"object graph in the native file: {g}")
        orig = tf.train.load_checkpoint(src)
        graph = orig.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
        expect(pdx_raw(native, b"_CHECKPOINTABLE_OBJECT_GRAPH") == graph, "object graph bytes differ")
        pdx("verify", native)
        exp = os.path.join(d, "graph", "exp", "ckpt")
        os.makedirs(os.path.dirname(exp))
        pdx("export-tf", native, exp)
        back = os.path.join(d, "graph", "totf", "ckpt")
        os.makedirs(os.path.dirname(back))
        pdx("convert", native, back, "--to", "tf")
        for label, prefix in (("export-tf of the native file", exp), ("convert --to tf", back)):
            # TensorFlow reads the native file's bytes value as a scalar string tensor.
            expect(tf_both_readers(prefix) == tf_read(src), f"{label}: TensorFlow reads different tensors")
            r = tf.train.load_checkpoint(prefix)
            expect(r.get_variable_to_dtype_map()["_CHECKPOINTABLE_OBJECT_GRAPH"] == tf.string,
                   f"{label}: the object graph is not a string tensor")
            expect(r.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH") == graph, f"{label}: object graph differs")
            m2 = tf.Module()
            m2.dense = tf.Module()
            m2.dense.kernel = tf.Variable(tf.zeros([4, 3]))
            m2.dense.bias = tf.Variable(tf.zeros([3], tf.float64))
            m2.step = tf.Variable(np.int64(0))
            o2 = tf.Variable(tf.zeros([2, 2], tf.bfloat16))
            status = tf.train.Checkpoint(model=m2, opt_state=o2).restore(prefix)
            status.assert_consumed()  # every object of the graph restored: the graph survived
            expect(np.array_equal(m2.dense.kernel.numpy(), m.dense.kernel.numpy()), f"{label}: kernel differs")
            expect(np.array_equal(m2.dense.bias.numpy(), m.dense.bias.numpy()), f"{label}: bias differs")
            expect(int(m2.step.numpy()) == 42, f"{label}: step differs")
            expect(np.array_equal(o2.numpy(), opt_state.numpy()), f"{label}: opt_state differs")
        report("c: TF2 object graph via a native file", True,
               "convert to native keeps _CHECKPOINTABLE_OBJECT_GRAPH as a bytes value; TF reads it from the "
               "native file (export-tf) and from convert --to tf; tf.train.Checkpoint.restore assert_consumed on both")
    except Mismatch as e:
        report("c: TF2 object graph via a native file", False, str(e))
    except Exception as e:  # TensorFlow's own errors (restore) are failures of this check
        report("c: TF2 object graph via a native file", False, f"{type(e).__name__}: {e}")


# ---------------------------------------------------------------------------------------------
# (d) errors

def check_errors(d, fresh):
    try:
        src = next(p for label, p, _ in fresh if "partitioned" in label)
        import shutil
        cd = os.path.join(d, "corrupt")
        shutil.copytree(os.path.dirname(src), cd)
        prefix = os.path.join(cd, os.path.basename(src))
        shard = sorted(glob.glob(prefix + ".data-*"))[-1]
        b = bytearray(open(shard, "rb").read())
        b[5] ^= 0x01
        open(shard, "wb").write(bytes(b))
        r = tf.train.load_checkpoint(prefix)
        bad = []
        for n in r.get_variable_to_shape_map():
            rr = pdx("get", prefix, n, "--format", "raw", ok=False)
            if rr.returncode != 0:
                bad.append((n, rr))
        expect(len(bad) == 1, f"expected exactly one tensor to fail, got {[n for n, _ in bad]}")
        n, rr = bad[0]
        err = rr.stderr.decode()
        expect(rr.returncode == 3, f"exit {rr.returncode}, want 3")
        for needle in (shard, "stored", "computed", "offset"):
            expect(needle in err, f"error message lacks {needle!r}: {err}")
        r = pdx("verify", prefix, ok=False)
        expect(r.returncode == 3, f"verify exit {r.returncode}")
        tf_err = ""
        try:
            tf.train.load_checkpoint(prefix).get_tensor(n)
        except Exception as e:  # TensorFlow agrees that it is corrupt
            tf_err = str(e).splitlines()[0][:100]
        expect("Checksum does not match" in tf_err or "checksum" in tf_err.lower(), f"TF did not notice: {tf_err}")
        report("d: errors", True, f"corrupt byte in {os.path.basename(shard)} -> exit 3 naming file, {n}, offset and "
               f"both checksums (TF: {tf_err!r})")
    except Mismatch as e:
        report("d: errors", False, str(e))


# ---------------------------------------------------------------------------------------------
# (e) sharded native checkpoints and slices

def check_sharded(d, fresh):
    try:
        out = os.path.join(d, "ranks")
        pdx("demo", "--ranks", 3, "--dir", out)
        # The demo's second save is incremental (unchanged slices reused from the first, whose
        # three data files become data files 3..5 of the second) and the first is removed.
        prefix = os.path.join(out, "demo_ckpt_step2")
        files = sorted(os.listdir(out))
        expect(files == [f"demo_ckpt_step2.data-0000{k}-of-00006" for k in range(6)]
               + ["demo_ckpt_step2.index"], f"files: {files}")
        want = tf_read(prefix)
        n, nbytes = compare(prefix, want, "sharded native checkpoint")
        expect(n == 30, f"{n} tensors")
        # The frozen incremental checkpoint (tests/data/native/v2/incremental: two data files of
        # its own, two reused from its base, slices and whole tensors).
        inc = os.path.join(ROOT, "tests", "data", "native", "v2", "incremental", "ckpt")
        n_inc, _ = compare(inc, tf_read(inc), "frozen incremental checkpoint")
        v1 = tf.compat.v1.train.NewCheckpointReader(prefix)
        shapes = v1.get_variable_to_shape_map()
        expect(sorted(shapes) == sorted(k.decode() for k in want), "NewCheckpointReader names")
        for k, (dtype, shape, data) in want.items():
            expect(list(shapes[k.decode()]) == shape, f"{k!r}: shape")
            got = np.asarray(v1.get_tensor(k.decode())).tobytes(order="C")
            expect(got == data, f"{k!r}: NewCheckpointReader bytes differ")
        # Regions of TensorFlow's partitioned variables, read by paramdex from the slices.
        regions = 0
        for label, p, _ in fresh:
            if "partitioned" not in label:
                continue
            r = tf.train.load_checkpoint(p)
            for name, shape in r.get_variable_to_shape_map().items():
                if len(shape) != 2 or r.get_variable_to_dtype_map()[name] == tf.string:
                    continue
                a, b = shape[0] // 3, shape[0] - shape[0] // 5
                c = 1 if shape[1] > 1 else 0
                v = np.asarray(r.get_tensor(name))[a:b, c:]
                got = pdx("get", p, name, "--slice", f"{a}:{b},{c}:", "--format", "raw").stdout
                expect(got == np.ascontiguousarray(v).tobytes(order="C"), f"{label} {name}: region {a}:{b},{c}: differs")
                regions += 1
        expect(regions > 0, "no partitioned variable to read by region")
        report("e: sharded", True, f"{n} tensors ({nbytes} bytes) of a 3-process incremental sharded native checkpoint read by "
               f"TensorFlow, and the {n_inc} tensors of the frozen incremental one; {regions} regions of TF partitioned variables read by `get --slice`")
    except Mismatch as e:
        report("e: sharded", False, str(e))


# The low-precision dtypes TensorFlow has DataType numbers for (26-33, SPEC.md 6).
TF_LOWP = {"float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3b11fnuz", "int4", "uint4", "int2",
           "uint2", "float4_e2m1fn"}


def check_lowp(d):
    """f: TensorFlow reads a native file holding every low-precision dtype as a checkpoint: the
    types it has as themselves, the others (index field 18) as uint8, every byte as paramdex's."""
    try:
        import shutil

        src = os.path.join(ROOT, "tests", "data", "native", "v2", "dtypes.pdx")
        prefix = os.path.join(d, "lowp", "ckpt")
        os.makedirs(os.path.dirname(prefix))
        shutil.copy(src, prefix + ".index")
        shutil.copy(src, prefix + ".data-00000-of-00001")
        listed = pdx_ls(src)
        got = tf_read(prefix)
        expect(set(got) == set(listed), f"names {sorted(got)} vs {sorted(listed)}")
        for n, t in listed.items():
            dt, shape, raw = got[n]
            want = t["dtype"] if t["dtype"] in TF_LOWP else "uint8"
            expect(dt == want, f"{n!r}: TensorFlow reads {dt}, expected {want}")
            expect(shape == t["shape"], f"{n!r}: shape {shape} vs {t['shape']}")
            expect(raw == pdx_raw(src, n), f"{n!r}: bytes differ")
        report("f: low-precision dtypes", True, f"{len(listed)} tensors of a native file read by TensorFlow")
    except Mismatch as e:
        report("f: low-precision dtypes", False, str(e))


def main():
    try:
        n_ck, n_t = check_fixtures()
        report("a: fixtures", True, f"{n_t} tensors of {n_ck} TF fixture checkpoints byte-identical to their manifests")
    except Mismatch as e:
        report("a: fixtures", False, str(e))
    with tempfile.TemporaryDirectory() as d:
        fresh = check_fresh(d)
        check_export(d, fresh)
        check_object_graph(d)
        check_errors(d, fresh)
        check_sharded(d, fresh)
        check_lowp(d)
    print(f"check_tf: {'FAILED: ' + ', '.join(FAILURES) if FAILURES else 'all checks passed'} "
          f"in {time.time() - START:.0f}s", flush=True)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
