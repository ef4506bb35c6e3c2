#!/usr/bin/env python3
"""paramdex against the real PaddlePaddle, both ways.

Run by tests/interop/run.sh with PARAMDEX (the release binary) and PARAMDEX_ROOT (the repo) set,
inside the interop virtualenv. Checks, printing one line per check and exiting non-zero on any
mismatch:

1. every Paddle fixture in tests/data/paddle read by paramdex (`ls --json`, `get --format raw`)
   equals its manifest: names, dtype, shape, LoD, sha256 of the data;
2. models (also tests/data/paddle/pir_cases: RNN, tied weights): `convert PREFIX m.pdx` then
   `convert m.pdx OUT --to paddle` gives Paddle's own .pdiparams byte for byte, and `paddle.static.load_inference_model` of OUT with the original
   program reproduces the reference forward pass (legacy and PIR);
3. `--to paddle-tensor` output read by `paddle.base.core.load_dense_tensor` equals the original
   (dtype, shape, LoD, bytes), single files and per-variable directories;
4. the records region of native files (alignment 64 and 4096, names and CRCs in every record):
   `load_dense_tensor` on each record cut out at the offsets paramdex reports, and combined loads
   over the whole region (load_inference_model with the program, and the load_combine function
   on LoD tensors);
5. `--to paddle` from inputs without a program (a TF2 checkpoint, a safetensors file with names
   holding `/`, spaces, tabs, non-ASCII, `@`): paramdex reads the names back from the program it
   wrote, and Paddle (`load_inference_model`, `load_program_state`) loads every tensor by name
   with its dtype, shape and bytes;
6. `--to paddle-merged` (the size-prefixed merged file of the design document "Merging all
   params in a single file") of the LoD tensors: the size fields, hopped here independently,
   chain exactly to the end of the file; `load_dense_tensor` on each record cut out at the
   offset its size field gives, and `load_combine` over the records with their size fields
   removed, give every tensor; `get OUT '#k'` is record k.

Paddle runs in two worker subprocesses (PIR mode and legacy mode: the IR mode is fixed at import).
"""

import contextlib
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

from interop_common import FAILURES, pdx, report


def sha(b):
    return hashlib.sha256(b).hexdigest()


# ---------------------------------------------------------------------------------------------
# Worker side: runs inside Paddle.


def paddle_dtype(t):
    """paramdex's dtype name for a DenseTensor's dtype, whichever enum Paddle returns."""
    d = t._dtype()
    name = getattr(d, "name", None) or str(d).split(".")[-1]
    legacy = {
        "BOOL": "bool", "INT8": "int8", "UINT8": "uint8", "INT16": "int16", "UINT16": "uint16",
        "INT32": "int32", "UINT32": "uint32", "INT64": "int64", "UINT64": "uint64",
        "FP16": "float16", "BF16": "bfloat16", "FP32": "float32", "FP64": "float64",
        "COMPLEX64": "complex64", "COMPLEX128": "complex128",
        "FP8_E4M3FN": "float8_e4m3fn", "FP8_E5M2": "float8_e5m2",
    }
    return legacy.get(name, name.lower())


def tensor_matches(t, want):
    import numpy as np

    arr = np.array(t)
    got = {
        "dtype": paddle_dtype(t),
        "shape": list(t.shape()),
        "lod": [list(l) for l in t.lod()],
        "sha256": sha(arr.tobytes()),
    }
    exp = {k: want[k] for k in got}
    return got == exp, f"paddle sees {got}, expected {exp}"


# dtypes Paddle 3.3.1 loads but cannot convert to numpy ("cannot be expose to Python").
NOT_EXPOSED = {"uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2"}


def worker(mode, jobs_path):
    import numpy as np
    import paddle

    paddle.enable_static()
    from paddle import static
    from paddle.base import core

    assert paddle.framework.in_pir_mode() == (mode == "pir"), "IR mode flag not honoured"
    place = core.CPUPlace()
    exe = static.Executor(paddle.CPUPlace())
    with open(jobs_path) as f:
        jobs = json.load(f)
    for job in jobs:
        label = f"[paddle {mode}] {job['label']}"
        try:
            if job["kind"] == "dense":
                t = core.load_dense_tensor(job["path"])
                report(label, *tensor_matches(t, job["expect"]))
            elif job["kind"] == "combine":
                ts = []
                for _ in job["expect"]:
                    t = core.DenseTensor()
                    t.set(np.zeros([1], np.float32), place)
                    ts.append(t)
                core.load_combine_func(job["path"], [e["name"] for e in job["expect"]], ts, False, place)
                bad = [m for ok, m in (tensor_matches(t, e) for t, e in zip(ts, job["expect"])) if not ok]
                report(label, not bad, "; ".join(bad))
            elif job["kind"] == "infer":
                x = np.array(job["x"]["values"], dtype=np.float32).reshape(job["x"]["shape"])
                outs = []
                for prefix in [job["prefix"]] + ([job["compare_prefix"]] if job.get("compare_prefix") else []):
                    scope = paddle.static.Scope()
                    with paddle.static.scope_guard(scope):
                        if job.get("model_filename"):
                            prog, feeds, fetches = static.load_inference_model(
                                prefix, exe, model_filename=job["model_filename"], params_filename=None
                            )
                        else:
                            prog, feeds, fetches = static.load_inference_model(prefix, exe)
                        (y,) = exe.run(prog, feed={feeds[0]: x}, fetch_list=fetches)
                    outs.append(np.asarray(y, dtype=np.float32).tobytes())
                if job.get("expect_y"):
                    # The reference output was computed when the fixtures were generated, on
                    # another machine: Paddle's kernels pick different SIMD paths per CPU, so
                    # compare values with a tolerance here. The byte-exact check is the one
                    # below, against Paddle's own files run on this machine.
                    ref_y = np.array(job["expect_y"]["values"], dtype=np.float32)
                    got_y = np.frombuffer(outs[0], dtype=np.float32)
                    same_shape = got_y.shape == ref_y.shape
                    close = same_shape and bool(np.allclose(got_y, ref_y, rtol=1e-3, atol=1e-4))
                    worst = float(np.max(np.abs(got_y - ref_y))) if same_shape and got_y.size else 0.0
                    report(label, close,
                           f"output {got_y.tolist()} vs reference {ref_y.tolist()} (max |diff| {worst:g})")
                if len(outs) == 2:
                    report(label + " (same output as Paddle's own files)", outs[0] == outs[1],
                           "outputs differ")
            elif job["kind"] == "named":
                # A --to paddle pair written from an input without a program: Paddle itself
                # reads the names from a program and the values by name. Paddle 3's default
                # (PIR) mode reads DST.json; the legacy mode (FLAGS_enable_pir_api=0, or
                # OldIrGuard under PIR) reads DST.pdmodel. Both must load every tensor.
                want = {e["name"]: e for e in job["expect"]}
                if mode == "pir":
                    ways = [("OldIrGuard, DST.pdmodel", paddle.pir_utils.OldIrGuard)]
                    if job["pir_json"]:
                        ways.insert(0, ("PIR mode, DST.json", contextlib.nullcontext))
                else:
                    ways = [("legacy mode, DST.pdmodel", contextlib.nullcontext)]
                for how, guard in ways:
                    with guard():
                        scope = paddle.static.Scope()
                        with paddle.static.scope_guard(scope):
                            prog, feeds, fetches = static.load_inference_model(job["prefix"], exe)
                            names = [v.name for v in prog.list_vars() if v.persistable]
                            bad = [] if sorted(names) == sorted(want) else [f"program names {names}"]
                            for n in names:
                                if n not in want:
                                    continue
                                t = scope.find_var(n).get_tensor()
                                if want[n]["dtype"] in NOT_EXPOSED:
                                    # Paddle loads these but cannot hand them to numpy.
                                    got = (paddle_dtype(t), list(t.shape()))
                                    if got != (want[n]["dtype"], want[n]["shape"]):
                                        bad.append(f"{n}: {got}")
                                    continue
                                ok, msg = tensor_matches(t, want[n])
                                if not ok:
                                    bad.append(f"{n}: {msg}")
                        report(f"{label} (load_inference_model, {how}, by name)", not bad,
                               "; ".join(bad))
                if job.get("program_state"):
                    with paddle.pir_utils.OldIrGuard() if mode == "pir" else contextlib.nullcontext():
                        prog = static.deserialize_program(open(job["prefix"] + ".pdmodel", "rb").read())
                        state = static.load_program_state(
                            job["prefix"] + ".pdiparams",
                            var_list=[v for v in prog.list_vars() if v.persistable])
                    got = {k: sha(np.ascontiguousarray(v).tobytes()) for k, v in state.items()}
                    exp = {k: e["sha256"] for k, e in want.items()}
                    report(label + " (load_program_state: a dict by name)", got == exp,
                           f"{got} != {exp}")
            else:
                report(label, False, f"unknown job kind {job['kind']}")
        except Exception as e:  # noqa: BLE001 - any Paddle error is a failed check
            report(label, False, f"{type(e).__name__}: {str(e)[:400]}")
    return 1 if FAILURES else 0


# ---------------------------------------------------------------------------------------------
# Driver side: runs paramdex, prepares files and jobs.

PARAMDEX = os.environ.get("PARAMDEX", "")
ROOT = os.environ.get("PARAMDEX_ROOT", "")
DATA = os.path.join(ROOT, "tests", "data", "paddle")


def ls_json(path):
    return json.loads(pdx("ls", path, "--json"))


def check_read(label, path, want):
    """paramdex's view of `path` equals the manifest tensors `want`."""
    try:
        got = ls_json(path)
        names = sorted((t["name"] for t in want), key=lambda s: s.encode())
        ok = [t["name"] for t in got] == names
        report(f"{label}: names in bytewise order", ok, f"{[t['name'] for t in got]} != {names}")
        by = {t["name"]: t for t in got}
        for w in want:
            g = by.get(w["name"])
            if g is None:
                continue
            meta_ok = (g["dtype"], g["shape"], g["lod"], g["nbytes"]) == (
                w["dtype"], w["shape"], w["lod"], w["nbytes"])
            raw = pdx("get", path, w["name"], "--format", "raw")
            report(f"{label}: {w['name']}", meta_ok and sha(raw) == w["sha256"],
                   f"paramdex says {g}, data sha256 {sha(raw)}; manifest {w}")
    except Exception as e:  # noqa: BLE001
        report(label, False, str(e))


def walk_records(buf, count):
    """Independent parse of the first `count` Paddle records of `buf`: (offset, length,
    data offset, name from TensorDesc field 1000)."""
    out, pos = [], 0
    sizes = {0: 1, 1: 2, 2: 4, 3: 8, 4: 2, 5: 4, 6: 8, 20: 1, 21: 1, 22: 2, 23: 8, 24: 16,
             32: 1, 33: 1, 36: 2, 37: 4, 38: 8}

    def varint(b, i):
        v = s = 0
        while True:
            c = b[i]
            i += 1
            v |= (c & 0x7F) << s
            s += 7
            if c < 0x80:
                return v, i

    for _ in range(count):
        start = pos
        (ver,) = struct.unpack_from("<I", buf, pos)
        (levels,) = struct.unpack_from("<Q", buf, pos + 4)
        pos += 12
        for _ in range(levels):
            (n,) = struct.unpack_from("<Q", buf, pos)
            pos += 8 + n
        ver2, dsize = struct.unpack_from("<Ii", buf, pos)
        pos += 8
        assert ver == 0 and ver2 == 0, f"record at {start}: versions {ver}, {ver2}"
        desc, pos = buf[pos:pos + dsize], pos + dsize
        i, dtype, dims, name = 0, None, [], None
        while i < len(desc):
            tag, i = varint(desc, i)
            field, wire = tag >> 3, tag & 7
            if wire == 0:
                v, i = varint(desc, i)
                if field == 1:
                    dtype = v
                elif field == 2:
                    dims.append(v)
            elif wire == 2:
                n, i = varint(desc, i)
                if field == 1000:
                    name = bytes(desc[i:i + n]).decode("utf-8", "surrogateescape")
                i += n
            elif wire == 5:
                i += 4
            elif wire == 1:
                i += 8
            else:
                raise AssertionError(f"wire type {wire} in desc at {start}")
        numel = 1
        for d in dims:
            numel *= d
        data_at = pos
        pos += numel * sizes[dtype]
        out.append((start, pos - start, data_at, name))
    return out


def record_locations(native, listing, align, label):
    """Record offsets of a native file: from `ls --json` if paramdex reports them
    (record_offset / record_len), else from walking the records region, cross-checked with the
    names paramdex lists."""
    with open(native, "rb") as f:
        buf = f.read()
    if listing and all("record_offset" in t and "record_len" in t for t in listing):
        locs = [(t["record_offset"], t["record_len"], None, t["name"]) for t in listing]
        source = "offsets reported by paramdex ls --json"
    else:
        locs = walk_records(buf, len(listing))
        source = "offsets from walking the records region"
    names_ok = [l[3] for l in locs] == [t["name"] for t in listing]
    aligned = all(l[2] is None or l[2] % align == 0 for l in locs)
    report(f"{label}: records in name order, data aligned to {align} ({source})",
           names_ok and aligned, f"names {[l[3] for l in locs]}")
    return buf, locs


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        sys.exit(worker(sys.argv[2], sys.argv[3]))
    if not PARAMDEX or not ROOT:
        print("PARAMDEX and PARAMDEX_ROOT must be set (run tests/interop/run.sh)", file=sys.stderr)
        sys.exit(2)
    work = tempfile.mkdtemp(prefix="paramdex-paddle-")
    jobs = {"pir": [], "legacy": []}
    try:
        drive(work, jobs)
        for mode in ["pir", "legacy"]:
            jp = os.path.join(work, f"jobs-{mode}.json")
            with open(jp, "w") as f:
                json.dump(jobs[mode], f)
            env = dict(os.environ, FLAGS_enable_pir_api="1" if mode == "pir" else "0",
                       GLOG_minloglevel="3", GLOG_v="0")
            r = subprocess.run([sys.executable, __file__, "--worker", mode, jp], env=env,
                               capture_output=True, text=True)
            lines = [l for l in r.stdout.splitlines() if l.startswith(("ok  ", "FAIL"))]
            for l in lines:
                print(l)
                if l.startswith("FAIL"):
                    FAILURES.append(l)
            if r.returncode != 0 and not any(l.startswith("FAIL") for l in lines):
                report(f"paddle {mode} worker", False,
                       f"exit {r.returncode}: {r.stderr.strip()[-2000:]}")
            if len(lines) == 0:
                report(f"paddle {mode} worker ran its checks", False, r.stderr.strip()[-2000:])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if FAILURES:
        print(f"check_paddle: {len(FAILURES)} check(s) FAILED", file=sys.stderr)
        sys.exit(1)
    print("check_paddle: all checks passed")


def drive(work, jobs):
    def load(p):
        with open(p, encoding="utf-8") as f:
            return json.load(f)

    lod = load(os.path.join(DATA, "lod", "manifest.json"))
    inf = load(os.path.join(DATA, "inference", "manifest.json"))
    gen = load(os.path.join(DATA, "models", "manifest.json"))
    pir_cases = load(os.path.join(DATA, "pir_cases", "manifest.json"))

    # 1. Fixtures read by paramdex.
    lod_files = [t for t in lod["tensors"] if "/" not in t["file"]]
    for t in lod_files:
        check_read(f"read lod/{t['file']}", os.path.join(DATA, "lod", t["file"]), [t])
    save_vars = [t for t in lod["tensors"] if t["file"].startswith("save_vars/")]
    check_read("read lod/save_vars", os.path.join(DATA, "lod", "save_vars"), save_vars)
    for m in inf["models"]:
        want = [t for t in inf["tensors"] if t["file"] == m["params_file"]]
        prefix = os.path.join(DATA, "inference", m["params_file"][: -len(".pdiparams")])
        check_read(f"read inference/{m['mode']}", prefix, want)
        order = ls_json(prefix)
        report(f"read inference/{m['mode']}: record order = manifest order",
               [t["name"] for t in order] == inf["pdiparams_order"][m["params_file"]])
    for m in gen["models"]:
        check_read(f"read models/{m['prefix']}", os.path.join(DATA, "models", m["prefix"]), m["tensors"])
    for d in gen["per_variable_dirs"]:
        check_read(f"read models/{d['dir']}", os.path.join(DATA, "models", d["dir"]), d["tensors"])
    for m in pir_cases["models"]:
        check_read(f"read pir_cases/{m['prefix']}", os.path.join(DATA, "pir_cases", m["prefix"]), m["tensors"])

    # 2. Models: Paddle -> paramdex -> Paddle, byte-exact, and the forward pass.
    rng_x = {"shape": [2, 8], "values": [((i * 37) % 17 - 8) / 8.0 for i in range(16)]}
    models = []
    for m in inf["models"]:
        prog = m["model_file"]
        models.append({
            "label": f"inference/{m['mode']}", "mode": m["mode"],
            "prefix": os.path.join(DATA, "inference", m["params_file"][: -len(".pdiparams")]),
            "program": os.path.join(DATA, "inference", prog),
            "params": os.path.join(DATA, "inference", m["params_file"]),
            "x": rng_x, "y": None,
            "tensors": [t for t in inf["tensors"] if t["file"] == m["params_file"]],
        })
    for m in gen["models"]:
        ref = m["reference_run"]
        models.append({
            "label": f"models/{m['mode']}", "mode": m["mode"],
            "prefix": os.path.join(DATA, "models", m["prefix"]),
            "program": os.path.join(DATA, "models", m["program"]),
            "params": os.path.join(DATA, "models", m["params"]),
            "x": {"shape": ref["x"]["shape"], "values": ref["x"]["values"]},
            "y": ref["y"], "tensors": m["tensors"],
        })
    for m in pir_cases["models"]:
        if not m["params"]:
            continue  # no parameters: nothing to write back
        ref = m["reference_run"]
        models.append({
            "label": f"pir_cases/{m['case']}", "mode": "pir",
            "prefix": os.path.join(DATA, "pir_cases", m["prefix"]),
            "program": os.path.join(DATA, "pir_cases", m["program"]),
            "params": os.path.join(DATA, "pir_cases", m["params"]),
            "x": {"shape": ref["x"]["shape"], "values": ref["x"]["values"]},
            "y": ref["y"], "tensors": m["tensors"],
        })
    for i, m in enumerate(models):
        d = os.path.join(work, f"model{i}")
        os.makedirs(d)
        ext = ".json" if m["program"].endswith(".json") else ".pdmodel"
        try:
            native = os.path.join(d, "m.pdx")
            pdx("convert", m["prefix"], native)
            pdx("verify", native)
            out = os.path.join(d, "out")
            pdx("convert", native, out, "--to", "paddle")
            with open(out + ".pdiparams", "rb") as f, open(m["params"], "rb") as g:
                report(f"{m['label']}: convert model -> .pdx -> --to paddle is Paddle's .pdiparams byte for byte",
                       f.read() == g.read())
            shutil.copy(m["program"], out + ext)
            jobs[m["mode"]].append({
                "kind": "infer", "label": f"{m['label']}: load_inference_model(--to paddle output) forward pass",
                "prefix": out, "x": m["x"], "expect_y": m["y"],
                "compare_prefix": m["prefix"],
            })
            # 4. The records region of native files, aligned 64 and 4096.
            for align in [64, 4096]:
                native = os.path.join(d, f"a{align}.pdx")
                pdx("convert", m["prefix"], native, "--align", align)
                listing = ls_json(native)
                buf, locs = record_locations(native, listing, align, f"{m['label']} native align {align}")
                end = max(o + n for o, n, _, _ in locs)
                region = os.path.join(d, f"region{align}")
                with open(region + ".pdiparams", "wb") as f:
                    f.write(buf[:end])
                shutil.copy(m["program"], region + ext)
                jobs[m["mode"]].append({
                    "kind": "infer",
                    "label": f"{m['label']}: load_inference_model(records region of native file, align {align}) forward pass",
                    "prefix": region, "x": m["x"], "expect_y": m["y"],
                    "compare_prefix": m["prefix"],
                })
                by = {t["name"]: t for t in m["tensors"]}
                for j, (o, n, _, name) in enumerate(locs):
                    rec = os.path.join(d, f"rec{align}_{j}")
                    with open(rec, "wb") as f:
                        f.write(buf[o:o + n])
                    jobs["pir"].append({
                        "kind": "dense", "path": rec, "expect": by[name],
                        "label": f"{m['label']} align {align}: load_dense_tensor(record {j} = {name} at offset {o})",
                    })
        except Exception as e:  # noqa: BLE001
            report(f"{m['label']}: paramdex side", False, str(e))

    # Per-variable directories with a program: Paddle's own per-variable loader reads
    # paramdex's --to paddle-tensor output.
    for d in gen["per_variable_dirs"]:
        src = os.path.join(DATA, "models", d["dir"])
        out = os.path.join(work, "pv_" + d["dir"])
        try:
            native = os.path.join(work, d["dir"] + ".pdx")
            pdx("convert", src, native)
            pdx("convert", native, out, "--to", "paddle-tensor")
            for t in d["tensors"]:
                with open(os.path.join(out, t.get("file", t["name"])), "rb") as f, open(os.path.join(src, t.get("file", t["name"])), "rb") as g:
                    report(f"models/{d['dir']}: --to paddle-tensor {t['name']} is Paddle's file byte for byte",
                           f.read() == g.read())
                jobs["pir"].append({"kind": "dense", "path": os.path.join(out, t.get("file", t["name"])), "expect": t,
                                    "label": f"models/{d['dir']}: load_dense_tensor(--to paddle-tensor {t['name']})"})
            if d.get("program"):
                prog = os.path.join(DATA, "models", d["program"])
                shutil.copy(prog, os.path.join(out, os.path.basename(prog)))
                ref = d["reference_run"]
                jobs[d["mode"]].append({
                    "kind": "infer", "label": f"models/{d['dir']}: load_inference_model(per-variable files) forward pass",
                    "prefix": out, "model_filename": os.path.basename(prog),
                    "x": {"shape": ref["x"]["shape"], "values": ref["x"]["values"]},
                    "expect_y": ref["y"],
                })
        except Exception as e:  # noqa: BLE001
            report(f"models/{d['dir']}: paramdex side", False, str(e))

    # 5. --to paddle from inputs without a program (a TF2 checkpoint; a safetensors file with
    # names that need care: `/`, spaces, non-ASCII, `@`; every dtype; paramdex's demo):
    # paramdex writes the names in two programs beside the records, DST.json (PIR, Paddle 3's
    # default mode) and DST.pdmodel (legacy). paramdex reads the pair back by either; Paddle
    # loads it by name in both modes.
    try:
        import numpy as np
        from safetensors.numpy import save_file

        odd = os.path.join(work, "odd.safetensors")
        save_file({
            "enc/layer 0/w": np.arange(6, dtype=np.float32).reshape(2, 3),
            "ünï.b@GRAD": np.array([1.5, -2.0], dtype=np.float64),
            "emb\tx": np.arange(4, dtype=np.int64),
            "z": np.array(7, dtype=np.int32),
        }, odd)
    except Exception as e:  # noqa: BLE001
        report("names: write the safetensors input", False, str(e))
        odd = None
    sources = [("tf/basic/tf2", os.path.join(ROOT, "tests", "data", "tf", "basic", "tf2"), False)]
    if odd:
        sources.append(("safetensors with odd names", odd, True))
    try:
        # Every dtype numpy and safetensors share, an empty tensor and a scalar.
        every = os.path.join(work, "dtypes.safetensors")
        save_file({
            "b": np.array([True, False, True]),
            "i8": np.arange(-3, 3, dtype=np.int8), "u8": np.arange(4, dtype=np.uint8),
            "i16": np.arange(-2, 4, dtype=np.int16).reshape(2, 3),
            "i32": np.arange(4, dtype=np.int32), "i64": np.arange(5, dtype=np.int64),
            "f16": np.linspace(-1, 1, 6, dtype=np.float16), "f64": np.linspace(0, 1, 3),
            "empty": np.zeros((0, 3), np.float32), "scalar": np.array(2.5, np.float32),
        }, every)
        sources.append(("safetensors of every dtype", every, False))
    except Exception as e:  # noqa: BLE001
        report("names: write the every-dtype input", False, str(e))
    try:
        # bfloat16, float16, float32, int64 and a LoD tensor.
        pdx("demo", "--dir", os.path.join(work, "demo"))
        sources.append(("paramdex demo", os.path.join(work, "demo", "demo.pdx"), True))
    except Exception as e:  # noqa: BLE001
        report("names: write the demo input", False, str(e))
    for i, (label, src, state) in enumerate(sources):
        try:
            out = os.path.join(work, f"named{i}", "out")
            os.makedirs(os.path.dirname(out))
            r = subprocess.run([PARAMDEX, "convert", src, out, "--to", "paddle", "--skip-unsupported"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                raise RuntimeError(f"convert --to paddle: exit {r.returncode}: {r.stderr.strip()}")
            want = []
            for t in ls_json(src):
                if t["dtype"] in ("string", "bytes"):  # Paddle outputs cannot hold them
                    continue
                t = dict(t)
                t["sha256"] = sha(pdx("get", src, t["name"], "--format", "raw"))
                want.append(t)
            # PIR has no type for uint16/32/64: with such a tensor only DST.pdmodel is
            # written (Paddle 3 then loads the pair in its legacy mode only), and paramdex
            # says so.
            pir = not any(t["dtype"] in ("uint16", "uint32", "uint64") for t in want)
            if pir:
                report(f"--to paddle from {label}: wrote both programs beside the parameters",
                       os.path.isfile(out + ".pdmodel") and os.path.isfile(out + ".json"))
            else:
                report(f"--to paddle from {label}: wrote DST.pdmodel, no DST.json, and said so",
                       os.path.isfile(out + ".pdmodel") and not os.path.exists(out + ".json")
                       and "no PIR program written" in r.stderr, r.stderr)
            check_read(f"--to paddle from {label}: paramdex reads the names back", out, want)
            for prog in [".json", ".pdmodel"] if pir else [".pdmodel"]:
                check_read(f"--to paddle from {label}: paramdex reads the pair by its {prog}",
                           out + prog, want)
            for mode in ["pir", "legacy"]:
                jobs[mode].append({"kind": "named", "prefix": out, "expect": want,
                                   "program_state": state, "pir_json": pir,
                                   "label": f"--to paddle from {label}: Paddle loads the names and values"})
        except Exception as e:  # noqa: BLE001
            report(f"--to paddle from {label}: paramdex side", False, str(e))

    # 3. --to paddle-tensor for every single-tensor fixture, LoD included.
    for t in lod_files:
        src = os.path.join(DATA, "lod", t["file"])
        try:
            native = os.path.join(work, t["file"] + ".pdx")
            pdx("convert", src, native)
            out = os.path.join(work, "out_" + t["file"])
            pdx("convert", native, out, "--to", "paddle-tensor")
            with open(out, "rb") as f, open(src, "rb") as g:
                report(f"lod/{t['file']}: --to paddle-tensor is Paddle's file byte for byte", f.read() == g.read())
            jobs["pir"].append({"kind": "dense", "path": out, "expect": t,
                                "label": f"lod/{t['file']}: load_dense_tensor(--to paddle-tensor)"})
        except Exception as e:  # noqa: BLE001
            report(f"lod/{t['file']}: paramdex side", False, str(e))

    # 4a. Bytes values (SPEC.md 6.1): the records region of the frozen golden file is read by
    #     load_combine; a bytes value's record is uint8 [S] holding varint length, masked CRC32C
    #     of the length, then the value.
    try:
        golden = os.path.join(ROOT, "tests", "data", "native", "bytes", "bytes.pdx")
        records = json.loads(pdx("stat", golden, "--json"))["records_bytes"]
        with open(golden, "rb") as f:
            buf = f.read()
        region = os.path.join(work, "bytes_region.bin")
        with open(region, "wb") as f:
            f.write(buf[:records])
        graph = pdx("get", golden, "_CHECKPOINTABLE_OBJECT_GRAPH", "--format", "raw")
        enc = bytes([len(graph)]) + buf[buf.index(graph) - 4:buf.index(graph)] + graph
        expect = [  # in record order (the order of the writer's adds)
            {"name": "w", "dtype": "float32", "shape": [2], "lod": [], "sha256": sha(bytes.fromhex("0000803f00000040"))},
            {"name": "_CHECKPOINTABLE_OBJECT_GRAPH", "dtype": "uint8", "shape": [len(enc)], "lod": [],
             "sha256": sha(enc)},
            {"name": "empty", "dtype": "uint8", "shape": [5], "lod": [],
             "sha256": sha(buf[records - 5:records])},
        ]
        jobs["pir"].append({"kind": "combine", "path": region, "expect": expect,
                            "label": "load_combine over a native file with bytes values: uint8 records"})
    except Exception as e:  # noqa: BLE001
        report("bytes values: paramdex side", False, str(e))

    # 4b. LoD tensors in a native records region: one record at a time and load_combine over it.
    pv = os.path.join(work, "lod_all")
    os.makedirs(pv)
    everything = lod_files + save_vars
    for t in everything:
        name = os.path.basename(t["file"])
        shutil.copy(os.path.join(DATA, "lod", t["file"]), os.path.join(pv, name))
    expect = sorted(({**t, "name": os.path.basename(t["file"])} for t in everything),
                    key=lambda t: t["name"].encode())
    for align in [64, 4096]:
        try:
            native = os.path.join(work, f"lod_all_{align}.pdx")
            pdx("convert", pv, native, "--align", align)
            listing = ls_json(native)
            buf, locs = record_locations(native, listing, align, f"lod tensors native align {align}")
            end = max(o + n for o, n, _, _ in locs)
            region = os.path.join(work, f"lod_region_{align}.bin")
            with open(region, "wb") as f:
                f.write(buf[:end])
            jobs["pir"].append({"kind": "combine", "path": region, "expect": expect,
                                "label": f"load_combine over the records region of a native file of {len(expect)} LoD/dtype tensors, align {align}"})
            by = {t["name"]: t for t in expect}
            for j, (o, n, _, name) in enumerate(locs):
                rec = os.path.join(work, f"lodrec{align}_{j}")
                with open(rec, "wb") as f:
                    f.write(buf[o:o + n])
                jobs["pir"].append({"kind": "dense", "path": rec, "expect": by[name],
                                    "label": f"lod align {align}: load_dense_tensor(record {j} = {name} at offset {o})"})
        except Exception as e:  # noqa: BLE001
            report(f"lod tensors native align {align}: paramdex side", False, str(e))

    # 6. --to paddle-merged: each record after its size as a u64 LE.
    try:
        native = os.path.join(work, "lod_all.pdx")
        pdx("convert", pv, native)
        merged = os.path.join(work, "lod_all.merged")
        pdx("convert", native, merged, "--to", "paddle-merged")
        with open(merged, "rb") as f:
            buf = f.read()
        records, pos = [], 0
        while pos + 8 <= len(buf):
            (size,) = struct.unpack_from("<Q", buf, pos)
            records.append((pos + 8, size))
            pos += 8 + size
        report("--to paddle-merged: the size fields chain to the end of the file",
               pos == len(buf) and len(records) == len(expect),
               f"end {pos} of {len(buf)}, {len(records)} records for {len(expect)} tensors")
        stripped = os.path.join(work, "lod_all_stripped.bin")
        with open(stripped, "wb") as f:
            for o, n in records:
                f.write(buf[o:o + n])
        jobs["pir"].append({"kind": "combine", "path": stripped, "expect": expect,
                            "label": f"load_combine over the records of a --to paddle-merged file of {len(expect)} LoD/dtype tensors"})
        for k, ((o, n), t) in enumerate(zip(records, expect)):
            rec = os.path.join(work, f"mergedrec_{k}")
            with open(rec, "wb") as f:
                f.write(buf[o:o + n])
            jobs["pir"].append({"kind": "dense", "path": rec, "expect": t,
                                "label": f"--to paddle-merged: load_dense_tensor(record {k} = {t['name']} at offset {o})"})
            raw = pdx("get", merged, f"#{k}", "--format", "raw")
            report(f"--to paddle-merged: get '#{k}' is {t['name']}", sha(raw) == t["sha256"])
    except Exception as e:  # noqa: BLE001
        report("--to paddle-merged: paramdex side", False, str(e))


if __name__ == "__main__":
    main()
