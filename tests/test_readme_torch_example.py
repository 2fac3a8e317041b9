"""The README's GraphSAGE-on-Cora examples (full-graph, and mini-batch over sampled subgraphs) run
exactly as printed (from the repository root) and train: the loss each prints is below the loss of
a uniform guess over its 7 classes."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: the example needs it")
ROOT = Path(__file__).resolve().parents[1]


def _example(anchor: str = "GraphSAGE on Cora, with autosage's layers") -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index(anchor):]
    body = section[section.index("```python\n") + len("```python\n"):]
    return body[:body.index("\n```")]


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.slow
def test_readme_sage_example_runs_verbatim():
    code = _example()
    assert "datasets/cora.mtx.gz" in code and "at.SAGEConv" in code
    loss = float(re.fullmatch(r"loss after 50 epochs: ([0-9.]+)\n", _run(code)).group(1))
    assert loss < math.log(7)


@pytest.mark.slow
def test_readme_minibatch_example_runs_verbatim():
    code = _example("### Mini-batch training")
    assert "NeighborSampler" in code and "Graph.from_edge_index" in code
    loss = float(re.fullmatch(r"loss after 60 batches: ([0-9.]+)\n", _run(code)).group(1))
    assert loss < math.log(7)
