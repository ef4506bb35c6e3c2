#!/usr/bin/env python3
"""paramdex against TensorFlow's and Paddle's own loaders, in Python, on files they wrote (issue 17).

TensorFlow (a real checkpoint written by `tf.train.Checkpoint.write`, 5,000 float32 tensors of 16
elements, and one of 8 float32 tensors totalling ~1 GiB):
  1. get of one tensor by name after open, hot: `tf.train.load_checkpoint(prefix)` opened once,
     then `reader.get_tensor(name)` of every tensor in a shuffled order, against
     `paramdex.safe_open(prefix, framework="np")` opened once, then `f.get_tensor(name)`; the
     time per get;
  2. open + get of one tensor: `tf.train.load_checkpoint(prefix).get_tensor(name)` against
     `with paramdex.safe_open(prefix) as f: f.get_tensor(name)`;
  3. a full load: open + get of every tensor (`get_variable_to_shape_map()` for TensorFlow,
     `keys()` for paramdex; both include TensorFlow's `_CHECKPOINTABLE_OBJECT_GRAPH` string);
     for the 1 GiB checkpoint also into `tf.Tensor`s (TensorFlow: `get_tensor` +
     `tf.convert_to_tensor`; paramdex: `framework="tf"`).
Both return numpy arrays: TensorFlow's are copies (its `BundleReader` reads each tensor with
`pread` into a new buffer and checks its CRC32C); paramdex's are read-only views of its mapping of
the data file where the tensor is aligned for its dtype (else one copy), also after checking the
tensor's CRC32C, so both have read every byte of what they hand out.

Paddle (a real inference model written by `paddle.static.save_inference_model` in Paddle 3's
default PIR mode: `PREFIX.json` + `PREFIX.pdiparams`; one model of 5,000 float32 parameters of 16
elements, and one of 8 float32 parameters totalling ~1 GiB):
  4. one parameter: Paddle has no way to read one parameter of a combined `.pdiparams`: the file
     is a sequence of records without an index, and `load_combine_func` refuses to stop early ("Not
     allowed to load partial data via load_combine_op, please use load_op instead": the bench
     checks it), so Paddle's cost for one parameter is the load of the whole file; paramdex: open + get
     of the middle parameter (it indexes the records through the program in the `.json`), and for
     the 1 GiB model also with that parameter then copied (`np.array`);
  5. a full load: `core.load_combine_func(path, names, tensors, False, place)`, the pybind
     function of the `load_combine` kernel, which is what Paddle's own Python calls in PIR mode
     (`paddle.static.load_vars` -> `pir_io.load_vars_pir`, `paddle.jit.load` ->
     `pir_translated_layer._load_pir_parameter_vars`): the most direct loader of the file, given
     the names (sorted, as Paddle sorts them) and fresh `DenseTensor`s (made inside the timing,
     as a load must); against paramdex open + `get_tensor` of every parameter into numpy (views:
     Paddle records have no checksum, so nothing is read), the same with every array copied
     (`np.array`: the values in process memory, as `load_combine_func` leaves them), and into
     Paddle tensors (`framework="paddle"`: one copy each, `paddle.to_tensor`, in dynamic mode);
  6. the user's whole path, for reference: `paddle.static.load_inference_model(prefix, exe)` (parses
     the program, creates the variables in a fresh scope and runs `load_combine_func`).

Each library runs where it must: TensorFlow and Paddle cannot share a process, so the parent
(which imports neither) runs each part in a child interpreter, generation and measurement
separately; paramdex runs in the measuring child beside the library it is compared with, and the
two sides alternate run by run. Warm page cache (each file was just written; every run reads the
same bytes); median of --repeat runs (more for the microsecond rows). Prints Markdown tables.
Usage:
  python python/bench/bench_vs_tf_paddle.py [--dir DIR] [--small 5000] [--big-mib 1024]
      [--big-tensors 8] [--repeat 5] [--only tf|paddle] [--before DIR]
(--before DIR: DIR holds another build of the paramdex package, e.g. main's; each measuring
child runs once with it and once with the default package, on the same files, rows side by side)
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SMALL_ELEMS = 16  # float32 elements of each small tensor (64 bytes)


def timed_pair(fa, fb, repeat):
    """Medians of fa and fb, run alternately (a, b, a, b, ...) so that both see the same load."""
    ta, tb = [], []
    for _ in range(repeat):
        for fn, times in ((fa, ta), (fb, tb)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(ta), statistics.median(tb)


def row(part, op, ref, pdx, order=None):
    print("ROW " + json.dumps({"part": part, "op": op, "ref": ref, "pdx": pdx, "order": order}), flush=True)


def info(key, value):
    print("INFO " + json.dumps({key: value}), flush=True)


def fmt(s):
    if s < 1e-5:
        return f"{s * 1e6:.2f} µs"
    if s < 1e-3:
        return f"{s * 1e6:.0f} µs"
    if s < 1:
        return f"{s * 1e3:.1f} ms"
    return f"{s:.2f} s"


def big_shapes(mib, count):
    """count float32 shapes [rows, 1024] adding up to about mib MiB."""
    rows = max(1, mib * (1 << 20) // count // 4 // 1024)
    return [[rows, 1024] for _ in range(count)]


# ------------------------------------------------------------------------------------------------
# TensorFlow children


def tf_gen(work, args):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    small = {f"layer_{i:05d}": tf.Variable(rng.standard_normal(SMALL_ELEMS, dtype=np.float32))
             for i in range(args["small"])}
    tf.train.Checkpoint(**small).write(os.path.join(work, "tf_small", "ckpt"))
    del small
    big = {f"block_{i:02d}": tf.Variable(rng.standard_normal(shape, dtype=np.float32))
           for i, shape in enumerate(big_shapes(args["big_mib"], args["big_tensors"]))}
    tf.train.Checkpoint(**big).write(os.path.join(work, "tf_big", "ckpt"))


def tf_bench(work, args):
    import numpy as np
    import tensorflow as tf

    import paramdex

    info("tensorflow", tf.__version__)
    info("numpy", np.__version__)
    info("paramdex", paramdex.__version__)
    repeat = args["repeat"]
    small = os.path.join(work, "tf_small", "ckpt")
    big = os.path.join(work, "tf_big", "ckpt")

    for prefix, label in ((small, f"{args['small']:,} tensors of {SMALL_ELEMS} float32"),
                          (big, None)):
        r = tf.train.load_checkpoint(prefix)
        names = sorted(r.get_variable_to_shape_map())
        views = 0
        # readonly: views of paramdex's own mapping (the default hands out writable views of a
        # private copy-on-write mapping, as safetensors does), counted by their flag.
        with paramdex.safe_open(prefix, framework="np", readonly=True) as f:
            assert sorted(f.keys()) == names, "paramdex and TensorFlow list different names"
            for n in names:
                a, b = r.get_tensor(n), f.get_tensor(n)
                if isinstance(b, bytes):  # a bytes value (the object graph): bytes in both
                    assert np.asarray(a, dtype=object).item() == b, n
                    continue
                if b.dtype == object:  # strings: TensorFlow gives bytes for a scalar
                    assert np.asarray(a, dtype=object).ravel().tolist() == b.ravel().tolist(), n
                else:
                    assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), n
                views += not b.flags.writeable
        with paramdex.safe_open(prefix + ".index", framework="np") as f:
            assert len(f) == len(names)
        values = [n for n in names if n != "_CHECKPOINTABLE_OBJECT_GRAPH"]
        total = sum(r.get_tensor(n).nbytes for n in values)
        if label is None:
            label = f"{len(values)} float32 tensors, {total / (1 << 30):.2f} GiB"
        info("tf " + ("small" if prefix == small else "big"),
             {"tensors": len(names), "bytes": total, "paramdex views (not copies)": views,
              "files": sorted(os.listdir(os.path.dirname(prefix)))})
        mid = values[len(values) // 2]

        if prefix == small:
            # 1. Hot get, reader opened once. Every tensor once per run, shuffled.
            order = list(values)
            random.Random(1).shuffle(order)
            rt = tf.train.load_checkpoint(prefix)
            fp = paramdex.safe_open(prefix, framework="np")

            def tf_gets():
                g = rt.get_tensor
                for n in order:
                    g(n)

            def pdx_gets():
                g = fp.get_tensor
                for n in order:
                    g(n)

            a, b = timed_pair(tf_gets, pdx_gets, max(repeat, 7))
            row("tf", f"get_tensor after open, per tensor ({label}; every tensor, shuffled)",
                a / len(order), b / len(order))
            fp.close()
            del rt

        # 2. Open + get of one tensor.
        def tf_one():
            return tf.train.load_checkpoint(prefix).get_tensor(mid)

        def pdx_one():
            with paramdex.safe_open(prefix, framework="np") as f:
                return f.get_tensor(mid)

        a, b = timed_pair(tf_one, pdx_one, max(repeat, 21) if prefix == small else repeat)
        row("tf", f"open + get_tensor of 1 ({label})", a, b)

        # 3. Full load.
        def tf_all():
            rr = tf.train.load_checkpoint(prefix)
            return {n: rr.get_tensor(n) for n in rr.get_variable_to_shape_map()}

        def pdx_all(fw):
            def run():
                with paramdex.safe_open(prefix, framework=fw) as f:
                    return {n: f.get_tensor(n) for n in f.keys()}
            return run

        a, b = timed_pair(tf_all, pdx_all("np"), repeat)
        row("tf", f"open + get_tensor of every tensor into numpy ({label})", a, b)
        if prefix == big:
            def tf_all_tensors():
                rr = tf.train.load_checkpoint(prefix)
                return {n: tf.convert_to_tensor(rr.get_tensor(n)) for n in values}

            def pdx_all_tensors():
                with paramdex.safe_open(prefix, framework="tf") as f:
                    return {n: f.get_tensor(n) for n in values}

            a, b = timed_pair(tf_all_tensors, pdx_all_tensors, repeat)
            row("tf", "the same into tf.Tensor (TensorFlow: get_tensor + tf.convert_to_tensor; "
                "paramdex: framework=\"tf\")", a, b)


# ------------------------------------------------------------------------------------------------
# Paddle children


def paddle_gen(work, args):
    import numpy as np
    import paddle

    paddle.enable_static()
    from paddle import static

    assert paddle.framework.in_pir_mode(), "expected Paddle 3's default PIR mode"
    exe = static.Executor(paddle.CPUPlace())
    rng = np.random.default_rng(0)

    def save(out, params, make_y):
        main, startup = static.Program(), static.Program()
        with static.program_guard(main, startup):
            x = static.data("x", [-1, SMALL_ELEMS], "float32")
            ps = [static.create_parameter(shape, "float32", name=name,
                                          default_initializer=paddle.nn.initializer.Constant(0.0))
                  for name, shape in params]
            y = make_y(x, ps)
        scope = static.Scope()
        with static.scope_guard(scope):
            exe.run(startup)
            for name, shape in params:
                scope.find_var(name).get_tensor().set(rng.standard_normal(shape, dtype=np.float32),
                                                      paddle.CPUPlace())
            static.save_inference_model(os.path.join(work, out, "model"), [x], [y], exe, program=main)

    # The small parameters all feed one add_n (one op, so the program stays small); the big ones
    # are each reduced to a scalar and added.
    save("pd_small", [(f"layer_{i:05d}.w", [SMALL_ELEMS]) for i in range(args["small"])],
         lambda x, ps: paddle.add(x, paddle.add_n(ps)))

    def big_y(x, ps):
        y = x
        for p in ps:
            y = paddle.add(y, paddle.sum(p))
        return y

    save("pd_big", [(f"block_{i:02d}.w", s) for i, s in enumerate(big_shapes(args["big_mib"], args["big_tensors"]))],
         big_y)


def paddle_bench(work, args):
    import numpy as np
    import paddle
    from paddle import static
    from paddle.base import core

    import paramdex

    info("paddle", paddle.__version__)
    info("numpy", np.__version__)
    info("paramdex", paramdex.__version__)
    # Dynamic mode (Paddle's default) for everything but load_inference_model, which needs static
    # mode and runs last: in static mode paddle.to_tensor adds ops to a program instead of making
    # a tensor, which is not what a user of framework="paddle" gets.
    assert paddle.in_dynamic_mode()
    repeat = args["repeat"]
    place = core.CPUPlace()
    one = np.zeros([1], np.float32)
    models = []

    for m, out in enumerate(("pd_small", "pd_big")):
        prefix = os.path.join(work, out, "model")
        params = prefix + ".pdiparams"
        with paramdex.safe_open(prefix, framework="np") as f:
            names = f.keys()
        assert names == sorted(names)

        def pd_all(upto=None, names=names, params=params):
            use = names if upto is None else names[:upto]
            ts = []
            for _ in use:  # load_combine_func needs initialized tensors (it reads their place)
                t = core.DenseTensor()
                t.set(one, place)
                ts.append(t)
            core.load_combine_func(params, use, ts, False, place)
            return ts

        # Paramdex's values equal what load_combine loads, name by name.
        with paramdex.safe_open(prefix, framework="np") as f:
            for n, t in zip(names, pd_all()):
                assert f.get_tensor(n).tobytes() == np.array(t).tobytes(), n
        # load_combine cannot stop after the parameter it is asked for.
        try:
            pd_all(len(names) // 2)
            partial = "loaded"
        except Exception as e:  # noqa: BLE001 - Paddle raises its own error types
            lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
            partial = " / ".join(lines[-2:])[:240] if lines else type(e).__name__
        info(f"paddle {out}: load_combine_func of the first half of the names", partial)

        total = os.path.getsize(params)
        if out == "pd_small":
            label = f"{len(names):,} parameters of {SMALL_ELEMS} float32"
        else:
            label = f"{len(names)} float32 parameters, {total / (1 << 30):.2f} GiB"
        info(f"paddle {out}", {"parameters": len(names), "pdiparams_bytes": total,
                               "program_bytes": os.path.getsize(prefix + ".json"),
                               "files": sorted(os.listdir(os.path.dirname(prefix)))})
        mid = names[len(names) // 2]

        def pdx_one(prefix=prefix, mid=mid):
            with paramdex.safe_open(prefix, framework="np") as f:
                return f.get_tensor(mid)

        def pdx_open(prefix=prefix):
            paramdex.safe_open(prefix, framework="np").close()

        few = max(repeat, 21) if out == "pd_small" else repeat
        _, b = timed_pair(pdx_open, pdx_open, few)
        info(f"paddle {out}: paramdex safe_open alone (median)", fmt(b))
        a, b = timed_pair(pd_all, pdx_one, few)
        row("paddle", f"one parameter: load_combine_func of the file vs paramdex open + get_tensor of 1 ({label})",
            a, b, (m, 0))
        if out == "pd_big":
            def pdx_one_copy(prefix=prefix, mid=mid):
                with paramdex.safe_open(prefix, framework="np") as f:
                    return np.array(f.get_tensor(mid))

            a, b = timed_pair(pd_all, pdx_one_copy, few)
            row("paddle", "the same, paramdex then copying it (np.array: its values read into process memory)",
                a, b, (m, 0.5))

        def pdx_all(fw, prefix=prefix):
            def run():
                with paramdex.safe_open(prefix, framework=fw) as f:
                    return {n: f.get_tensor(n) for n in f.keys()}
            return run

        a, b = timed_pair(pd_all, pdx_all("np"), repeat)
        row("paddle", f"full load: load_combine_func vs paramdex open + get_tensor of every parameter into numpy "
            f"({label})", a, b, (m, 1))
        def pdx_all_copies(prefix=prefix):
            with paramdex.safe_open(prefix, framework="np") as f:
                return {n: np.array(f.get_tensor(n)) for n in f.keys()}

        a, b = timed_pair(pd_all, pdx_all_copies, repeat)
        row("paddle", "the same, paramdex then copying each (np.array: the values in process memory, as "
            "load_combine leaves them)", a, b, (m, 1.5))
        a, b = timed_pair(pd_all, pdx_all("paddle"), repeat)
        row("paddle", "the same, paramdex with framework=\"paddle\" (paddle.Tensor: one copy each)", a, b, (m, 2))
        models.append((m, prefix, pdx_all("np")))

    paddle.enable_static()
    exe = static.Executor(paddle.CPUPlace())
    for m, prefix, pdx_np in models:
        def pd_infer(prefix=prefix):
            with static.scope_guard(static.Scope()):
                return static.load_inference_model(prefix, exe)

        a, b = timed_pair(pd_infer, pdx_np, repeat)
        row("paddle", "the same, Paddle's load_inference_model (program + parameters) vs paramdex into numpy",
            a, b, (m, 3))


# ------------------------------------------------------------------------------------------------
# Parent


CHILDREN = {"tf_gen": tf_gen, "tf_bench": tf_bench, "paddle_gen": paddle_gen, "paddle_bench": paddle_bench}


def run_child(role, work, args, rows, infos, before=None):
    """Runs child ``role`` and prints its rows; with ``before`` (a directory holding another
    build of the ``paramdex`` package), runs the bench child a first time with that package
    first on its path, and prints each row with both runs' figures side by side."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", GLOG_minloglevel="3")
    t0 = time.perf_counter()

    def run(env):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", role, work, json.dumps(args)],
                           env=env, capture_output=True, text=True)
        if p.returncode != 0:
            sys.stderr.write(p.stdout[-4000:] + p.stderr[-8000:])
            raise SystemExit(f"child {role} failed with exit {p.returncode}")
        mine = []
        for line in p.stdout.splitlines():
            if line.startswith("ROW "):
                mine.append(json.loads(line[4:]))
            elif line.startswith("INFO "):
                infos.update(json.loads(line[5:]))
        return [r for _, r in sorted(enumerate(mine), key=lambda ir: (ir[1]["order"] or [0, ir[0]], ir[0]))]

    old = None
    if before is not None and role.endswith("_bench"):
        path = os.pathsep.join([os.path.abspath(before)] + [q for q in [env.get("PYTHONPATH")] if q])
        old = run(dict(env, PYTHONPATH=path))
    mine = run(env)
    for i, r in enumerate(mine):
        rows.append(r)
        line = f"| {r['op']} | {fmt(r['ref'])} | {fmt(r['pdx'])} | {r['ref'] / r['pdx']:.2f}× |"
        if old is not None:
            o = old[i]
            line += f" {fmt(o['ref'])} | {fmt(o['pdx'])} | {o['ref'] / o['pdx']:.2f}× |"
        print(line, flush=True)
    infos[f"{role} seconds"] = round(time.perf_counter() - t0, 1)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        CHILDREN[sys.argv[2]](sys.argv[3], json.loads(sys.argv[4]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default=None)
    ap.add_argument("--small", type=int, default=5000)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--big-tensors", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--only", choices=("tf", "paddle"), default=None)
    ap.add_argument("--before", default=None,
                    help="a directory with another build of the paramdex package: each bench child "
                         "runs with it first, then with the default one, rows side by side")
    args = ap.parse_args()
    cargs = {"small": args.small, "big_mib": args.big_mib, "big_tensors": args.big_tensors, "repeat": args.repeat}

    work = tempfile.mkdtemp(dir=args.dir, prefix="pdx-bench-tfpd-")
    rows, infos = [], {}
    infos["load average before"] = os.getloadavg()
    try:
        if args.only in (None, "tf"):
            extra = " TensorFlow (before) | paramdex before | speed-up before |" if args.before else ""
            print("| TensorFlow checkpoint | TensorFlow | paramdex | paramdex speed-up |" + extra)
            print("|---|---|---|---|" + "---|" * (3 if args.before else 0), flush=True)
            run_child("tf_gen", work, cargs, rows, infos)
            run_child("tf_bench", work, cargs, rows, infos, args.before)
            shutil.rmtree(os.path.join(work, "tf_small"), ignore_errors=True)
            shutil.rmtree(os.path.join(work, "tf_big"), ignore_errors=True)
            print()
        if args.only in (None, "paddle"):
            extra = " Paddle (before) | paramdex before | speed-up before |" if args.before else ""
            print("| Paddle model (.json + .pdiparams) | Paddle | paramdex | paramdex speed-up |" + extra)
            print("|---|---|---|---|" + "---|" * (3 if args.before else 0), flush=True)
            run_child("paddle_gen", work, cargs, rows, infos)
            run_child("paddle_bench", work, cargs, rows, infos, args.before)
            print()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    infos["load average after"] = os.getloadavg()
    for k, v in infos.items():
        print(f"- {k}: {v}")


if __name__ == "__main__":
    main()
