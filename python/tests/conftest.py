import gc
import os
import tempfile

import numpy as np
import pytest


@pytest.fixture
def workdir():
    base = os.environ.get("TANDEM_TEST_TMPDIR") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base, prefix="python_") as d:
        yield d


@pytest.fixture
def expect_parameters_outlive_their_owner():
    """check(model, expected): with the model's owner (an engine, a trainer)
    deleted by the caller, collects, reuses the freed memory, and expects the
    model's parameters still to be `expected` (they were freed memory)."""
    def check(model, expected):
        gc.collect()
        junk = [np.ones(1000) for _ in range(1000)]
        assert len(junk) == 1000
        for got, want in zip(model.parameters(), expected):
            np.testing.assert_array_equal(got.numpy(), want)
    return check
