"""The README's torch examples run exactly as printed (from the repository root): the first one's
ops give what plain torch gives on its graph, and GraphSAGE on Cora (full-graph, and mini-batch over
sampled subgraphs) trains: the loss each prints is below the loss of a uniform guess over its 7
classes."""
from __future__ import annotations

import math
import re

import pytest
from readme_examples import python_example, run_python

torch = pytest.importorskip("torch", reason="torch is not installed: the example needs it")


def _run(code: str) -> str:
    run = run_python(code, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def test_readme_first_torch_example_runs_verbatim():
    """Every name it uses is defined in it; its SpMM is the dense product over its edges."""
    code = python_example("### PyTorch: differentiable ops and GNN layers")
    assert "at.Graph.from_edge_index" in code
    check = ("\ndense = torch.zeros(num_nodes, num_nodes, device=device)\n"
             "dense[edge_index[1], edge_index[0]] = 1.0\n"
             "assert torch.allclose(h, dense @ x, atol=1e-5), (h, dense @ x)\n"
             "assert s.shape == (edge_index.shape[1],) and o.shape == Q.shape\n"
             "print('ok')\n")
    assert _run(code + check) == "ok\n"


@pytest.mark.slow
def test_readme_sage_example_runs_verbatim():
    code = python_example("GraphSAGE on Cora, with autosage's layers")
    assert "datasets/cora.mtx.gz" in code and "at.SAGEConv" in code
    loss = float(re.fullmatch(r"loss after 50 epochs: ([0-9.]+)\n", _run(code)).group(1))
    assert loss < math.log(7)


@pytest.mark.slow
def test_readme_minibatch_example_runs_verbatim():
    code = python_example("### Mini-batch training")
    assert "NeighborSampler" in code and "Graph.from_edge_index" in code
    loss = float(re.fullmatch(r"loss after 60 batches: ([0-9.]+)\n", _run(code)).group(1))
    assert loss < math.log(7)


@pytest.mark.slow
def test_readme_captured_minibatch_example_runs_verbatim():
    """Off a GPU it runs every step eagerly on the padded batches, and still trains."""
    code = python_example("**Captured mini-batch steps.**")
    assert "capture_batch_step" in code
    found = re.fullmatch(r"loss after 60 batches: ([0-9.]+); captured (\d+), replayed (\d+)\n", _run(code))
    assert float(found.group(1)) < math.log(7)
    if not torch.cuda.is_available():
        assert found.group(2, 3) == ("0", "0")


def test_readme_reordering_example_runs_verbatim():
    """The reordered model's output comes back in the user's node order: the same as the layer's
    output on the original graph."""
    code = python_example("### Reordering as a scheduler decision")
    assert "at.Reordered" in code and "at.reorder" in code
    check = ("\nplain = model.module(x, at.Graph.from_csr_graph(csr, device=device))\n"
             "assert rg.applied and torch.allclose(out, plain, atol=1e-5)\n")
    lines = _run(code + check).splitlines()
    assert lines[0].startswith("labelprop torch.Size([2708, 7])") and lines[0].endswith("s to reorder")
