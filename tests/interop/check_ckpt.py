#!/usr/bin/env python3
"""paramdex's checkpoint directories (docs/checkpoints.md) against TensorFlow's CheckpointManager.

Run by tests/interop/run.sh with PARAMDEX set, inside the interop virtualenv. Prints one line per
check and exits non-zero on any mismatch:

1. a directory `tf.train.CheckpointManager` saved three checkpoints into: `paramdex ckpt DIR
   --json` lists TensorFlow's steps and names TensorFlow's latest; `get DIR VAR` and
   `get DIR@STEP VAR` give the values TensorFlow saved at those steps;
2. `paramdex ckpt DIR --prune --keep-last 2` rewrites the `checkpoint` state file: TensorFlow's
   `get_checkpoint_state` parses it, `tf.train.latest_checkpoint(DIR)` is still the latest, the
   pruned checkpoint's files are gone, and a new `tf.train.CheckpointManager` over the directory
   restores the latest and saves the next step, which paramdex then names as the latest;
3. a directory paramdex's CheckpointManager saved into (examples/train_loop.rs, background saves,
   keeping the last 2 and the best by loss): `tf.train.latest_checkpoint(DIR)` names its latest,
   TensorFlow reads each kept checkpoint's tensor, `get_checkpoint_state` lists exactly the kept
   ones; run again, it resumes after the latest.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

from interop_common import FAILURES, pdx, report

VAR = "v/.ATTRIBUTES/VARIABLE_VALUE"


def values(inp):
    out = json.loads(pdx("get", inp, VAR))
    return np.array(out["data"], dtype=np.float32).ravel()


def main():
    with tempfile.TemporaryDirectory() as d:
        v = tf.Variable(np.zeros(4, dtype=np.float32))
        ck = tf.train.Checkpoint(v=v)
        mgr = tf.train.CheckpointManager(ck, d, max_to_keep=5)
        for step in (1, 2, 3):
            v.assign(np.full(4, step, dtype=np.float32))
            mgr.save(checkpoint_number=step)
        listing = json.loads(pdx("ckpt", d, "--json"))
        steps = [c["step"] for c in listing["checkpoints"]]
        report("ckpt lists TensorFlow's steps", steps == [1, 2, 3], str(steps))
        report("ckpt names TensorFlow's latest", listing["latest"] == 3, str(listing["latest"]))
        report("get DIR reads the latest", np.array_equal(values(d), np.full(4, 3.0)), str(values(d)))
        report("get DIR@2 reads step 2", np.array_equal(values(f"{d}@2"), np.full(4, 2.0)))

        pdx("ckpt", d, "--prune", "--keep-last", "2")
        st = tf.train.get_checkpoint_state(d)
        paths = [os.path.basename(p) for p in st.all_model_checkpoint_paths]
        report("TensorFlow parses paramdex's state file", paths == ["ckpt-2", "ckpt-3"], str(paths))
        report(
            "one timestamp per checkpoint",
            len(st.all_model_checkpoint_timestamps) == 2,
            str(st.all_model_checkpoint_timestamps),
        )
        latest = tf.train.latest_checkpoint(d)
        report("latest_checkpoint is still ckpt-3", latest == os.path.join(d, "ckpt-3"), str(latest))
        gone = [f for f in os.listdir(d) if f.startswith("ckpt-1.")]
        report("the pruned checkpoint's files are gone", gone == [], str(gone))

        v2 = tf.Variable(np.zeros(4, dtype=np.float32))
        ck2 = tf.train.Checkpoint(v=v2)
        mgr2 = tf.train.CheckpointManager(ck2, d, max_to_keep=5)
        ck2.restore(mgr2.latest_checkpoint).assert_consumed()
        report("TensorFlow restores the latest", np.array_equal(v2.numpy(), np.full(4, 3.0)))
        v2.assign(np.full(4, 4.0, dtype=np.float32))
        mgr2.save(checkpoint_number=4)
        listing = json.loads(pdx("ckpt", d, "--json"))
        steps = [c["step"] for c in listing["checkpoints"]]
        report("paramdex sees TensorFlow's next save", steps == [2, 3, 4] and listing["latest"] == 4, str(listing))
        report("get DIR reads it", np.array_equal(values(d), np.full(4, 4.0)))

    root = os.environ.get("PARAMDEX_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
    with tempfile.TemporaryDirectory() as d:
        run = ["cargo", "run", "--quiet", "--release", "--example", "train_loop", "--", d, "4"]
        subprocess.run(run, cwd=root, check=True, capture_output=True)
        latest = tf.train.latest_checkpoint(d)
        report("latest_checkpoint names paramdex's latest", latest == os.path.join(d, "ckpt-4"), str(latest))
        st = tf.train.get_checkpoint_state(d)
        paths = [os.path.basename(p) for p in st.all_model_checkpoint_paths]
        report("the state file lists the kept checkpoints", paths == ["ckpt-1", "ckpt-3", "ckpt-4"], str(paths))
        for step in (1, 3, 4):
            r = tf.train.load_checkpoint(os.path.join(d, f"ckpt-{step}"))
            w = r.get_tensor("w")
            report(f"TensorFlow reads ckpt-{step}", np.array_equal(w, np.full(4, step, dtype=np.float32)), str(w))
        subprocess.run(run[:-1] + ["1"], cwd=root, check=True, capture_output=True)
        latest = tf.train.latest_checkpoint(d)
        report("a second run resumes after the latest", latest == os.path.join(d, "ckpt-5"), str(latest))

    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
