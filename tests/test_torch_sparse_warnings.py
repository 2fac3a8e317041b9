"""torch's UserWarnings about sparse CSR tensors (beta layout, invariant checks off) do not reach
the output of `bench` or the training suite: they are silenced where autosage builds the tensors,
and only there. torch warns once per process, so each check runs in a fresh one (CPU)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="torch is not installed: the CSR tensors are torch's")
ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", code], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_training_suites_pyg_inputs_warn_nothing():
    code = ("import torch\n"
            "from autosage_cli.torch.graph import Graph\n"
            "from autosage_cli.torch.training import pyg_inputs\n"
            "g = Graph.from_edge_index(torch.tensor([[0, 1, 2], [1, 2, 0]]), 3)\n"
            "adj = pyg_inputs(g)['sparse-csr']\n"
            "assert adj.layout == torch.sparse_csr and adj.shape == (3, 3)\n")
    proc = run_fresh(code)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_torch_warns_outside_autosages_construction():
    """The warning the helper silences is real in this torch (else the test above proves nothing),
    and the silencing does not outlive the call."""
    code = ("import torch\n"
            "from autosage_cli.backends.torch_sparse import csr_tensor\n"
            "csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1), (1, 1))\n"
            "torch.sparse_csr_tensor(torch.tensor([0, 1]), torch.tensor([0]), torch.ones(1), (1, 1))\n")
    proc = run_fresh(code)
    assert proc.returncode != 0 and "UserWarning" in proc.stderr and "Sparse" in proc.stderr
