import os
import tempfile

import pytest


@pytest.fixture
def workdir():
    base = os.environ.get("TANDEM_TEST_TMPDIR") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=base, prefix="python_") as d:
        yield d
