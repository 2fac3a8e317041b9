"""The README's "Captured training steps and torch.compile" example runs exactly as printed (from
the repository root): on the CPU the compiled model equals the eager one; on a GPU the captured
steps also train (the loss below a uniform guess over the 7 classes)."""
from __future__ import annotations

import math
import re

import pytest
from readme_examples import python_example, run_python

torch = pytest.importorskip("torch", reason="torch is not installed: the example needs it")


def _example() -> str:
    return python_example("### Captured training steps and torch.compile")


@pytest.mark.slow
def test_readme_capture_example_runs_verbatim():
    code = _example()
    assert "at.capture_training_step" in code and "fullgraph=True" in code
    run = run_python(code, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "compiled equals eager: True"
    if torch.cuda.is_available():
        loss = float(re.fullmatch(r"captured loss after 50 steps: ([0-9.]+)", lines[1]).group(1))
        assert loss < math.log(7)
    else:
        assert len(lines) == 1
