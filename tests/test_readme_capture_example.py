"""The README's "Captured training steps and torch.compile" example runs exactly as printed (from
the repository root): on the CPU the compiled model equals the eager one; on a GPU the captured
steps also train (the loss below a uniform guess over the 7 classes)."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the example needs it")
ROOT = Path(__file__).resolve().parents[1]


def _example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### Captured training steps and torch.compile"):]
    body = section[section.index("```python\n") + len("```python\n"):]
    return body[:body.index("\n```")]


@pytest.mark.slow
def test_readme_capture_example_runs_verbatim():
    code = _example()
    assert "at.capture_training_step" in code and "fullgraph=True" in code
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0] == "compiled equals eager: True"
    if torch.cuda.is_available():
        loss = float(re.fullmatch(r"captured loss after 50 steps: ([0-9.]+)", lines[1]).group(1))
        assert loss < math.log(7)
    else:
        assert len(lines) == 1
