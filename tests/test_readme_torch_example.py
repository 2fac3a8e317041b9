"""The README's GraphSAGE-on-Cora example runs exactly as printed (from the repository root) and
trains: the loss it prints is below the loss of a uniform guess over its 7 classes."""
from __future__ import annotations

import math
import re

import pytest
from readme_examples import python_example, run_python

pytest.importorskip("torch", reason="torch is not installed: the example needs it")


def _example() -> str:
    return python_example("GraphSAGE on Cora, with autosage's layers")


@pytest.mark.slow
def test_readme_sage_example_runs_verbatim():
    code = _example()
    assert "datasets/cora.mtx.gz" in code and "at.SAGEConv" in code
    run = run_python(code, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    loss = float(re.fullmatch(r"loss after 50 epochs: ([0-9.]+)\n", run.stdout).group(1))
    assert loss < math.log(7)
