#!/usr/bin/env python3
"""Generates tests/data/paddle/pir_cases/ with the real PaddlePaddle (3.x, CPU, PIR mode).

Run with the interop virtualenv:  ~/.cache/paramdex/venv/bin/python tests/interop/gen_paddle_pir_cases.py

PIR programs that a reader of `"#":"p"` ops can get wrong, each saved by Paddle and loaded back
by Paddle to record what Paddle itself sees (manifest.json: dtype, shape, sha256 of every
parameter, and a reference forward pass):

- rnn/m.json + m.pdiparams      paddle.jit.save of a 2-layer LSTM + GRU: every RNN declares a
                                non-persistable parameter (its dropout state, "OA":[0,1,0]) that
                                has no record, and the layers declare it once each
- tied/m.json + m.pdiparams     static graph, two Linear layers sharing ParamAttr(name="shared_w"):
                                one parameter declared by two ops, stored once
- noparams/m.json               a model without parameters: Paddle writes no .pdiparams
"""

import hashlib
import json
import os
import shutil
import sys

os.environ.setdefault("GLOG_minloglevel", "3")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "paddle", "pir_cases")


def sha(b):
    return hashlib.sha256(b).hexdigest()


def main():
    import numpy as np
    import paddle

    paddle.seed(5)
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)

    class Rnn(paddle.nn.Layer):
        def __init__(self):
            super().__init__()
            self.lstm = paddle.nn.LSTM(4, 6, num_layers=2)
            self.gru = paddle.nn.GRU(6, 3)

        def forward(self, x):
            return self.gru(self.lstm(x)[0])[0]

    class NoParams(paddle.nn.Layer):
        def forward(self, x):
            return paddle.nn.functional.relu(x) * 2.0

    spec = [paddle.static.InputSpec([None, 3, 4], "float32", "x")]
    os.makedirs(os.path.join(OUT, "rnn"))
    paddle.jit.save(Rnn(), os.path.join(OUT, "rnn", "m"), input_spec=spec)
    os.makedirs(os.path.join(OUT, "noparams"))
    paddle.jit.save(NoParams(), os.path.join(OUT, "noparams", "m"), input_spec=spec)

    paddle.enable_static()
    from paddle import static

    assert paddle.framework.in_pir_mode(), "these cases are about PIR programs"
    exe = static.Executor(paddle.CPUPlace())
    main_prog, startup = static.Program(), static.Program()
    main_prog.random_seed = startup.random_seed = 7
    with static.program_guard(main_prog, startup):
        x = static.data("x", [-1, 4], "float32")
        a = paddle.nn.Linear(4, 4, weight_attr=paddle.ParamAttr(name="shared_w"))
        b = paddle.nn.Linear(4, 4, weight_attr=paddle.ParamAttr(name="shared_w"))
        y = b(paddle.nn.functional.relu(a(x)))
    exe.run(startup)
    os.makedirs(os.path.join(OUT, "tied"))
    static.save_inference_model(os.path.join(OUT, "tied", "m"), [x], [y], exe, program=main_prog)

    manifest = {
        "set": "paddle/pir_cases",
        "producer": {"library": "paddlepaddle", "version": paddle.__version__},
        "generator": "tests/interop/gen_paddle_pir_cases.py",
        "models": [],
    }
    rng = np.random.default_rng(3)
    for case, shape in [("rnn", [2, 3, 4]), ("tied", [2, 4]), ("noparams", [2, 3, 4])]:
        prefix = os.path.join(OUT, case, "m")
        prog, feeds, fetches = static.load_inference_model(prefix, exe)
        scope = static.global_scope()
        tensors = {}  # a parameter declared by several ops is listed once per declaration
        for v in prog.list_vars():
            op = v.get_defining_op()
            if op.name() != "builtin.parameter" or not v.persistable:
                continue
            name = op.attrs()["parameter_name"]
            arr = np.array(scope.find_var(name).get_tensor())
            tensors[name] = {"name": name, "dtype": str(arr.dtype), "shape": list(arr.shape),
                             "lod": [], "nbytes": arr.nbytes, "sha256": sha(arr.tobytes())}
        tensors = sorted(tensors.values(), key=lambda t: t["name"].encode())
        xin = rng.standard_normal(shape).astype(np.float32)
        (yout,) = exe.run(prog, feed={feeds[0]: xin}, fetch_list=fetches)
        yout = np.asarray(yout, dtype=np.float32)
        manifest["models"].append({
            "case": case, "prefix": f"{case}/m", "program": f"{case}/m.json",
            "params": f"{case}/m.pdiparams" if tensors else None, "tensors": tensors,
            "reference_run": {
                "feed": feeds[0],
                "x": {"shape": list(xin.shape), "values": [float(v) for v in xin.ravel()]},
                "y": {"shape": list(yout.shape), "values": [float(v) for v in yout.ravel()]},
            },
        })
        assert os.path.exists(prefix + ".pdiparams") == bool(tensors), case
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1)
        fh.write("\n")
    print(f"wrote {OUT}: " + ", ".join(f"{m['case']} ({len(m['tensors'])} tensors)"
                                       for m in manifest["models"]))


if __name__ == "__main__":
    sys.exit(main())
