#!/usr/bin/env python3
"""Generates tests/data/paddle/models/ with the real PaddlePaddle (3.x, CPU).

Run with the interop virtualenv:  ~/.cache/paramdex/venv/bin/python tests/interop/gen_paddle_fixtures.py

What it writes (all small), plus manifest.json describing every tensor as Paddle itself sees it
(dtype, shape, LoD, sha256 of the data bytes) and a reference forward pass per model:

- legacy/m.pdmodel + legacy/m.pdiparams   save_inference_model, FLAGS_enable_pir_api=0
- pir/m.json + pir/m.pdiparams            save_inference_model, PIR (Paddle 3 default)
- separate_legacy/{__model__, one file per parameter}      separate_parameters=True, legacy
- separate_pir/{__model__.json, one file per parameter}    separate_parameters=True, PIR
- pervar_nested/                          save_vars(filename=None), names with '/', 2-level LoD

The models' parameters are chosen to exercise what a reader can get wrong: bytewise name order
(uppercase < '.' < digits < '_' < lowercase; "layer.10" < "layer.2"), a non-ASCII name, and the
dtypes float16, bfloat16, float64, int64 and float32.

Each mode runs in its own subprocess because the IR mode is fixed when paddle is imported.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "data", "paddle", "models")

# name -> (dtype, shape); all are used by the forward pass, so the pruned program keeps them.
PARAMS = {
    "Zeta.w_fp16": ("float16", [4, 3]),
    "alpha.w_bf16": ("bfloat16", [4, 3]),
    "beta_b": ("float64", [3]),
    "layer.10.b": ("float32", [3]),
    "layer.2.b": ("float32", [3]),
    "layer_2.b": ("float32", [3]),
    "steps_i64": ("int64", [3]),
    "\u00fcn\u00ef.b": ("float32", [3]),
}


def sha(b):
    return hashlib.sha256(b).hexdigest()


def worker(mode, what, out_dir):
    """Runs inside a subprocess whose FLAGS_enable_pir_api matches `mode`."""
    import numpy as np
    import paddle

    paddle.enable_static()
    from paddle import static

    assert paddle.framework.in_pir_mode() == (mode == "pir"), "IR mode flag not honoured"
    place = paddle.CPUPlace()
    exe = static.Executor(place)
    result = {"tensors": []}

    if what == "pervar":
        main, startup = static.Program(), static.Program()
        with static.program_guard(main, startup):
            ps = [
                static.create_parameter([2, 3], "float32", name="enc/layer0.w"),
                static.create_parameter([3], "float32", name="enc/sub/b"),
                static.create_parameter([7, 2], "float32", name="seq_2lod"),
                static.create_parameter([5], "float32", name="seq_1lod"),
            ]
        exe.run(startup)
        scope = static.global_scope()
        rng = np.random.default_rng(11)
        lods = {"seq_2lod": [[0, 2, 3], [0, 1, 4, 7]], "seq_1lod": [[0, 3, 5]]}
        for p in ps:
            t = scope.find_var(p.name).get_tensor()
            arr = rng.standard_normal(list(p.shape)).astype(np.float32)
            t.set(arr, place)
            if p.name in lods:
                t.set_lod(lods[p.name])
        static.save_vars(exe, out_dir, main, vars=ps, filename=None)
        for p in ps:
            t = scope.find_var(p.name).get_tensor()
            arr = np.array(t)
            result["tensors"].append(
                {
                    "name": p.name,
                    "dtype": "float32",
                    "shape": list(arr.shape),
                    "lod": [list(l) for l in t.lod()],
                    "nbytes": arr.nbytes,
                    "sha256": sha(arr.tobytes()),
                    "file": p.name,
                }
            )
        return result

    main, startup = static.Program(), static.Program()
    main.random_seed = startup.random_seed = 7
    uni = paddle.nn.initializer.Uniform(-1.0, 1.0)
    with static.program_guard(main, startup):
        x = static.data("x", [-1, 4], "float32")
        p = {}
        for name, (dtype, shape) in PARAMS.items():
            init = paddle.nn.initializer.Constant(5) if dtype == "int64" else uni
            p[name] = static.create_parameter(shape, dtype, name=name, default_initializer=init)
        f32 = lambda v: paddle.cast(v, "float32")
        y = paddle.add(paddle.mm(x, f32(p["Zeta.w_fp16"])), paddle.mm(x, f32(p["alpha.w_bf16"])))
        for name in ["beta_b", "layer.10.b", "layer.2.b", "layer_2.b", "steps_i64", "\u00fcn\u00ef.b"]:
            y = paddle.add(y, f32(p[name]))
    exe.run(startup)
    scope = static.global_scope()
    for name, (dtype, shape) in PARAMS.items():
        arr = np.array(scope.find_var(name).get_tensor())
        result["tensors"].append(
            {
                "name": name,
                "dtype": dtype,
                "shape": list(arr.shape),
                "lod": [],
                "nbytes": arr.nbytes,
                "sha256": sha(arr.tobytes()),
            }
        )
    separate = what == "separate"
    prefix = os.path.join(out_dir, "m")
    static.save_inference_model(
        prefix, [x], [y], exe, program=main, **({"separate_parameters": True} if separate else {})
    )
    # Reference forward pass, through Paddle's own loader of what was just written.
    xin = np.random.default_rng(3).standard_normal([2, 4]).astype(np.float32)
    if separate:
        # The "old way": a directory, the program's file name, one file per parameter.
        model_file = "__model__" if mode == "legacy" else "__model__.json"
        prog, feeds, fetches = static.load_inference_model(
            out_dir, exe, model_filename=model_file, params_filename=None
        )
    else:
        prog, feeds, fetches = static.load_inference_model(prefix, exe)
    (yout,) = exe.run(prog, feed={feeds[0]: xin}, fetch_list=fetches)
    yout = np.asarray(yout, dtype=np.float32)
    result["reference_run"] = {
        "feed": feeds[0],
        "x": {"dtype": "float32", "shape": list(xin.shape), "values": [float(v) for v in xin.ravel()],
              "sha256": sha(xin.tobytes())},
        "y": {"dtype": "float32", "shape": list(yout.shape), "values": [float(v) for v in yout.ravel()],
              "sha256": sha(yout.tobytes())},
    }
    return result


def run_worker(mode, what, out_dir):
    env = dict(os.environ, FLAGS_enable_pir_api="1" if mode == "pir" else "0", GLOG_minloglevel="3")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", mode, what, out_dir],
        env=env, check=True, capture_output=True, text=True,
    )
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        res = worker(sys.argv[2], sys.argv[3], sys.argv[4])
        print("RESULT " + json.dumps(res))
        return
    import paddle  # only for the version in the manifest

    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    manifest = {
        "set": "paddle/models",
        "producer": {"library": "paddlepaddle", "version": paddle.__version__,
                     "python": sys.version.split()[0]},
        "generator": "tests/interop/gen_paddle_fixtures.py",
        "models": [],
        "per_variable_dirs": [],
    }
    for mode in ["legacy", "pir"]:
        d = os.path.join(OUT, mode)
        os.makedirs(d)
        res = run_worker(mode, "combined", d)
        program = "m.pdmodel" if mode == "legacy" else "m.json"
        assert os.path.exists(os.path.join(d, program)), os.listdir(d)
        manifest["models"].append({
            "mode": mode, "prefix": f"{mode}/m", "program": f"{mode}/{program}",
            "params": f"{mode}/m.pdiparams", "tensors": res["tensors"],
            "reference_run": res["reference_run"],
        })
        d = os.path.join(OUT, "separate_" + mode)
        os.makedirs(d)
        res = run_worker(mode, "separate", d)
        program = "__model__" if mode == "legacy" else "__model__.json"
        assert os.path.exists(os.path.join(d, program)), os.listdir(d)
        manifest["per_variable_dirs"].append({
            "mode": mode, "dir": f"separate_{mode}", "program": f"separate_{mode}/{program}",
            "tensors": res["tensors"], "reference_run": res["reference_run"],
        })
    d = os.path.join(OUT, "pervar_nested")
    os.makedirs(d)
    res = run_worker("legacy", "pervar", d)
    manifest["per_variable_dirs"].append({"mode": "legacy", "dir": "pervar_nested", "program": None,
                                          "tensors": res["tensors"]})
    files = []
    for r, _, fs in os.walk(OUT):
        for f in sorted(fs):
            p = os.path.join(r, f)
            with open(p, "rb") as fh:
                b = fh.read()
            files.append({"path": os.path.relpath(p, OUT), "size": len(b), "sha256": sha(b)})
    manifest["files"] = sorted(files, key=lambda f: f["path"])
    with open(os.path.join(OUT, "manifest.json"), "w") as fh:
        json.dump(manifest, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    print(f"wrote {OUT}: {len(files)} files")


if __name__ == "__main__":
    main()
