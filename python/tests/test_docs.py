"""docs/python.md shows python/tests/torchrun_life.py (the whole life of a training run) verbatim:
the script is what tests/interop/run.sh runs under torchrun, so the example cannot drift from
what runs."""

import os

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "..", "docs", "python.md")
SCRIPT = os.path.join(HERE, "torchrun_life.py")
MARK = "<!-- python/tests/torchrun_life.py, verbatim (python/tests/test_docs.py checks) -->"


def test_the_run_life_example_is_the_script_ci_runs():
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    assert MARK in doc, "docs/python.md lost the run life example's marker"
    after = doc.split(MARK, 1)[1]
    assert after.startswith("\n```python\n"), after[:40]
    block = after[len("\n```python\n") :].split("\n```\n", 1)[0] + "\n"
    with open(SCRIPT, encoding="utf-8") as f:
        script = f.read()
    assert block == script, "docs/python.md's run life example differs from torchrun_life.py"
