"""Shared helpers of the paramdex Python tests.

Frameworks that are not installed skip their tests, unless PARAMDEX_REQUIRE_ALL=1 (set by
tests/interop/run.sh in CI), which turns a missing torch, TensorFlow, Paddle, safetensors or
ml_dtypes into a failure: CI must not pass by skipping.
"""

import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATA = os.path.join(REPO, "tests", "data")


def need(module, load=True):
    """Imports ``module`` (only finds it when ``load`` is false: TensorFlow and Paddle are
    imported by child processes, never here), or skips (fails under PARAMDEX_REQUIRE_ALL=1)
    when it is missing. Works inside a test and at a test module's top level, where the skip
    is of the whole module (``allow_module_level``: without it pytest reports a module-level
    skip as a collection error) and the failure is a collection error naming the module."""
    try:
        if not load:
            if importlib.util.find_spec(module) is None:
                raise ImportError(f"no module named {module}")
            return None
        return importlib.import_module(module)
    except ImportError as e:
        if os.environ.get("PARAMDEX_REQUIRE_ALL") == "1":
            pytest.fail(f"{module} is required (PARAMDEX_REQUIRE_ALL=1) but cannot be imported: {e}")
        pytest.skip(f"{module} is not installed ({e})", allow_module_level=True)


def run_child(code, *args, timeout=600):
    """Runs ``code`` in a fresh interpreter (TensorFlow and Paddle crash when imported into one
    process together, and a crash must fail the test, not the suite); asserts it exits 0."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", GLOG_minloglevel="3")
    p = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert p.returncode == 0, f"child exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr[-4000:]}"
    return p.stdout
