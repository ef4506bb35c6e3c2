#!/usr/bin/env bash
# Interop step: checks paramdex against the real TensorFlow and PaddlePaddle.
# Creates (once) a virtualenv in ${PARAMDEX_CACHE:-~/.cache/paramdex}/venv with tensorflow-cpu,
# paddlepaddle, numpy and safetensors from PyPI, builds the release binary, and runs every
# tests/interop/check_*.py with PARAMDEX pointing at it. Then the Python package (issue 18):
# adds torch, pytest, ml_dtypes and gguf to the same virtualenv, builds and installs python/ with
# `pip install ./python` (maturin, into python/target), and runs its pytest suite with every
# framework required. Any failure, including a failed install, fails the step loudly.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
cache="${PARAMDEX_CACHE:-$HOME/.cache/paramdex}"
venv="$cache/venv"
mkdir -p "$cache"
# Each library is imported in its own process: importing tensorflow and then paddle in one
# process crashes (segfault) with the current wheels, which would look like a missing install.
have_all() {
  for mod in tensorflow paddle numpy safetensors; do
    "$venv/bin/python" -c "import $mod" >/dev/null 2>&1 || return 1
  done
}
if ! have_all; then
  echo "interop: creating virtualenv $venv (tensorflow-cpu, paddlepaddle, numpy, safetensors)"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --upgrade pip
  # The versions the interop checks were verified with.
  "$venv/bin/pip" install --quiet --no-cache-dir "tensorflow-cpu==2.21.0" "paddlepaddle==3.3.1" "numpy==2.4.6" "safetensors==0.8.0"
  have_all || { echo "interop: FAILED to install tensorflow-cpu/paddlepaddle/numpy/safetensors" >&2; exit 1; }
fi
# torch, pytest, ml_dtypes and gguf before the checks: check_pickles.py reads files torch writes,
# and the Python package's suite below needs them too (gguf: llama.cpp's own GGUF package, which
# python/tests/test_gguf.py writes and reads GGUF files with).
# torch from PyPI (its CPU-only index is not reachable everywhere).
have_py() {
  for mod in torch pytest ml_dtypes gguf; do
    "$venv/bin/python" -c "import $mod" >/dev/null 2>&1 || return 1
  done
}
if ! have_py; then
  echo "python: installing torch, pytest, ml_dtypes and gguf into $venv"
  "$venv/bin/pip" install --quiet --no-cache-dir "torch==2.15.0" "pytest==9.2.0" "ml_dtypes==0.6.0" "gguf==0.19.0"
  have_py || { echo "python: FAILED to install torch/pytest/ml_dtypes/gguf" >&2; exit 1; }
fi
(cd "$root" && cargo build --release --quiet)
export PARAMDEX="$root/target/release/paramdex"
export PARAMDEX_ROOT="$root"
export TF_CPP_MIN_LOG_LEVEL=3 GLOG_minloglevel=3 GLOG_v=0
status=0
ran=0
for script in "$here"/check_*.py; do
  [ -e "$script" ] || continue
  ran=$((ran + 1))
  echo "interop: $(basename "$script")"
  if ! "$venv/bin/python" "$script"; then
    echo "interop: FAILED: $(basename "$script")" >&2
    status=1
  fi
done
if [ "$ran" -eq 0 ]; then
  echo "interop: no check scripts found" >&2
  exit 1
fi

echo "python: pip install ./python (maturin; a cold release build takes minutes)"
py_start=$(date +%s)
if ! "$venv/bin/pip" install --quiet --force-reinstall --no-deps "$root/python"; then
  echo "python: FAILED to build or install the paramdex package" >&2
  exit 1
fi
echo "python: built and installed in $(($(date +%s) - py_start)) s"
# From a directory without a paramdex/ folder, so that the installed package is the one tested.
if ! (cd "$cache" && PARAMDEX_REQUIRE_ALL=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"); then
  echo "python: FAILED: pytest python/tests" >&2
  status=1
fi
# paramdex.torch.dcp under torchrun (the launcher training jobs use; the pytest suite spawns its
# gloo ranks itself): 2 ranks save, 3 ranks load resharded.
echo "python: torchrun: 2 ranks save through paramdex.torch.dcp, 3 ranks load resharded"
dcp_dir=$(mktemp -d "${TMPDIR:-/tmp}/paramdex-torchrun.XXXXXX")
if ! (cd "$cache" && "$venv/bin/torchrun" --standalone --nproc_per_node=2 "$root/python/tests/torchrun_dcp.py" save "$dcp_dir" \
      && "$venv/bin/torchrun" --standalone --nproc_per_node=3 "$root/python/tests/torchrun_dcp.py" load "$dcp_dir"); then
  echo "python: FAILED: torchrun python/tests/torchrun_dcp.py" >&2
  status=1
fi
rm -rf "$dcp_dir"
# The whole life of a run (docs/python.md shows this script): FSDP2 on 2 ranks to step 20; a
# save of step 30 killed after its shards were written (a shard of another save id left
# pending); 3 ranks resume from the latest complete checkpoint (20) to step 40 and export it.
echo "python: torchrun: a run's life (save, kill, resume on another world size, export)"
life=$(mktemp -d "${TMPDIR:-/tmp}/paramdex-life.XXXXXX")
if ! (cd "$cache" && "$venv/bin/torchrun" --standalone --nproc_per_node=2 "$root/python/tests/torchrun_life.py" "$life/runs" 20 \
      && mkdir "$life/runs/step-30" \
      && cp "$life/runs/step-20/dcp.data-00000-of-00002" "$life/runs/step-30/dcp.data-00000-of-00002.pending" \
      && "$venv/bin/torchrun" --standalone --nproc_per_node=3 "$root/python/tests/torchrun_life.py" "$life/runs" 40 \
      && "$venv/bin/python" -c 'import sys, paramdex, torch
run = paramdex.list_run(sys.argv[1])
assert [c["step"] for c in run["checkpoints"]] == [10, 20, 30, 40], run
assert all(c["complete"] for c in run["checkpoints"]), run
assert run["latest"]["step"] == 40, run
assert torch.load(sys.argv[1] + "/final.pt", weights_only=True)["step"] == 40' "$life/runs"); then
  echo "python: FAILED: torchrun python/tests/torchrun_life.py" >&2
  status=1
fi
rm -rf "$life"
exit $status
