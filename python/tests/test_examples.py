"""The Python examples run (small settings where they take options) and
reach what they claim."""
import os
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


@pytest.mark.parametrize("script", ["numpy_regression.py", "custom_model.py", "custom_loop.py"])
def test_example_runs(script):
    run([sys.executable, os.path.join(EXAMPLES, script)])


@pytest.mark.skipif(not CLI or not os.path.exists("/usr/bin/bible"), reason="needs tandem and bible-kjv")
def test_kjv_transformer_trains(workdir):
    data = os.path.join(workdir, "kjv")
    run([CLI, "data", "text", "--corpus", "kjv", "--output", data])
    out = run([sys.executable, os.path.join(EXAMPLES, "kjv_transformer.py"), "--data", data,
               "--steps", "4", "--layers", "1", "--width", "64", "--heads", "2",
               "--precision", "mixed_bfloat16", "--output", os.path.join(workdir, "run")])
    assert "validation loss" in out
    assert os.path.exists(os.path.join(workdir, "run", "metrics.jsonl"))
