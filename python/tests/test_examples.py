"""The Python examples run (small settings where they take options) and
reach what they claim."""
import os
import re
import subprocess
import sys

import pytest

SOURCE = os.environ.get("TANDEM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLES = os.path.join(SOURCE, "examples", "python")
CLI = os.environ.get("TANDEM_CLI")


def run(args, **kwargs):
    result = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_numpy_regression_finds_the_weights():
    out = run([sys.executable, os.path.join(EXAMPLES, "numpy_regression.py")])
    found = re.search(r"learned \[([^\]]*)\] \[([^\]]*)\] loss (\S+)", out)
    assert found, out
    w = [float(v) for v in found.group(1).split()]
    assert w == pytest.approx([2.0, -1.0, 0.5], abs=1e-3), out
    assert float(found.group(2)) == pytest.approx(0.3, abs=1e-3), out
    assert float(found.group(3)) < 1e-6, out


def test_custom_model_learns_its_task():
    out = run([sys.executable, os.path.join(EXAMPLES, "custom_model.py")])
    found = re.search(r"final validation accuracy: (\S+)", out)
    assert found, out
    assert float(found.group(1)) > 0.9, out


def test_custom_loop_runs():  # it checks its own result (exit status 1 otherwise)
    run([sys.executable, os.path.join(EXAMPLES, "custom_loop.py")])


@pytest.mark.skipif(not CLI or not os.path.exists("/usr/bin/bible"), reason="needs tandem and bible-kjv")
def test_kjv_transformer_trains(workdir):
    data = os.path.join(workdir, "kjv")
    run([CLI, "data", "text", "--corpus", "kjv", "--output", data])
    out = run([sys.executable, os.path.join(EXAMPLES, "kjv_transformer.py"), "--data", data,
               "--steps", "4", "--layers", "1", "--width", "64", "--heads", "2",
               "--precision", "mixed_bfloat16", "--output", os.path.join(workdir, "run")])
    assert "validation loss" in out
    assert os.path.exists(os.path.join(workdir, "run", "metrics.jsonl"))
