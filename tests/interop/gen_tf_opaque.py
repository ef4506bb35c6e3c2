#!/usr/bin/env python3
"""Generates tests/data/tf_opaque/ with the real TensorFlow (2.x, CPU).

Run with the interop virtualenv:  ~/.cache/paramdex/venv/bin/python tests/interop/gen_tf_opaque.py

TensorFlow checkpoints holding types paramdex lists and checksums but does not decode:

- iterator/ckpt   tf.train.Checkpoint of a tf.data iterator (its state is a DT_VARIANT tensor)
                  next to a float variable
- quantized/ckpt  tf.raw_ops.SaveV2 of a qint8 and a quint8 tensor next to a float tensor

manifest.json lists, per checkpoint, every tensor's name, dtype name, shape (as TensorFlow's
own reader reports them) and, where TensorFlow returns the stored bytes, their sha256.
"""

import hashlib
import json
import os
import shutil

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "tf_opaque")


def main():
    import numpy as np
    import tensorflow as tf

    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    it = iter(tf.data.Dataset.range(10).batch(2))
    next(it)
    tf.train.Checkpoint(it=it, v=tf.Variable([1.0, 2.0])).write(os.path.join(OUT, "iterator", "ckpt"))
    tf.raw_ops.SaveV2(
        prefix=os.path.join(OUT, "quantized", "ckpt"),
        tensor_names=["f", "q8", "qu8"],
        shape_and_slices=["", "", ""],
        tensors=[
            tf.constant([0.5, 1.5]),
            tf.constant(np.array([-3, 0, 7], np.int8), dtype=tf.qint8),
            tf.constant(np.array([[1, 2], [250, 255]], np.uint8), dtype=tf.quint8),
        ],
    )
    manifest = {"set": "tf_opaque", "producer": {"library": "tensorflow", "version": tf.__version__},
                "generator": "tests/interop/gen_tf_opaque.py", "checkpoints": []}
    for ck in ["iterator", "quantized"]:
        prefix = os.path.join(OUT, ck, "ckpt")
        r = tf.train.load_checkpoint(prefix)
        dtypes = r.get_variable_to_dtype_map()
        shapes = r.get_variable_to_shape_map()
        tensors = []
        for name in sorted(dtypes, key=lambda n: n.encode()):
            t = {"name": name, "dtype": dtypes[name].name, "shape": list(shapes[name])}
            if dtypes[name] in (tf.qint8, tf.quint8, tf.float32):
                t["sha256"] = hashlib.sha256(np.asarray(r.get_tensor(name)).tobytes()).hexdigest()
            tensors.append(t)
        manifest["checkpoints"].append({"prefix": f"{ck}/ckpt", "tensors": tensors})
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
