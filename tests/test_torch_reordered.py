"""autosage_cli.torch.reordered on the CPU (torch's reference path): a model run through a
ReorderedGraph gives the outputs and gradients of the same model on the original graph, in the
user's node order; the features move once per tensor; `method="auto"` follows the scheduler's
decision (a fake measurement here) and moves nothing when no order is applied."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.graphs.synthetic import generate  # noqa: E402
from autosage_cli.scheduler.decisions import reorder_decision as rd  # noqa: E402

from scheduler_fakes import DEVICE, SOFTWARE  # noqa: E402

GRAPH = generate("power-law", {"n": 3000, "nnz": 40_000, "q50": 8, "q90": 30, "q99": 80, "max": 200,
                               "locality": 0.8, "block": 256, "shuffle": 1})


class Net(torch.nn.Module):
    def __init__(self, kind="GCNConv"):
        super().__init__()
        layer = getattr(at, kind)
        self.a, self.b = layer(16, 32), layer(32, 5)

    def forward(self, x, g):
        return self.b(torch.relu(self.a(x, g)), g)


@pytest.mark.parametrize("kind", ["GCNConv", "SAGEConv"])
@pytest.mark.parametrize("method", ["hubcluster", "rcm"])
def test_outputs_and_gradients_match_the_original_order(kind, method):
    torch.manual_seed(0)
    net = Net(kind).double()
    x = torch.randn(GRAPH.n_rows, 16, dtype=torch.float64)
    plain = net(x, at.Graph.from_csr_graph(GRAPH))
    rg = at.reorder(GRAPH, method)
    assert rg.applied and rg.method == method
    assert not torch.equal(rg.perm, torch.arange(GRAPH.n_rows))   # a real renumbering
    model = at.Reordered(net, rg)
    out = model(x)
    torch.testing.assert_close(out, plain, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(out.square().sum(), list(net.parameters()))
    expected = torch.autograd.grad(plain.square().sum(), list(net.parameters()))
    for got, want in zip(grads, expected):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-9)


def test_features_move_once_per_tensor():
    net = Net().double()
    rg = at.reorder(GRAPH, "hubcluster")
    model = at.Reordered(net, rg)
    x = torch.randn(GRAPH.n_rows, 16, dtype=torch.float64)
    for _ in range(3):
        model(x)
    assert rg.moves == 1
    x.add_(1.0)                      # changed in place: moved again
    model(x)
    assert rg.moves == 2
    leaf = x.clone().requires_grad_()
    out = model(leaf)
    (grad,) = torch.autograd.grad(out.sum(), leaf)   # the gradient reaches the user's tensor
    assert grad.shape == x.shape and rg.moves == 3
    with pytest.raises(AutosageError, match="features have 7 rows"):
        rg.to_internal(torch.zeros(7, 16))


def _fake_orders(speedup):
    def measure(original, reordered, perm, op, k, dtype):
        return rd.OrderTimes(10.0, 10.0 / speedup, "a", "b", 0.0, True)
    return measure


@pytest.mark.parametrize("speedup, applied", [(2.0, True), (0.8, False)])
def test_auto_applies_only_a_measured_gain(tmp_path, speedup, applied):
    rg = at.reorder(GRAPH, "auto", width=64, expected_calls=10**6, cache=tmp_path / "d.json",
                    measure_orders=_fake_orders(speedup), methods=("hubcluster", "rcm"),
                    decide_options={"device_info": DEVICE, "software_info": SOFTWARE})
    assert rg.applied is applied and rg.decision.applied is applied
    x = torch.randn(GRAPH.n_rows, 16, dtype=torch.float64)
    out = at.Reordered(Net().double(), rg)(x)
    assert out.shape == (GRAPH.n_rows, 5)
    if not applied:
        assert rg.method == "identity" and rg.moves == 0 and rg.to_internal(x) is x


def test_auto_on_a_graph_weighs_and_keeps_its_own_relabelling(tmp_path, monkeypatch):
    # a Graph already on its device: each measured order is relabelled there once, timed as the
    # decision's apply cost, and the chosen one is the graph the wrapper runs on (not relabelled again)
    from autosage_cli.graphs import reorder as reorder_mod
    from autosage_cli.torch import relabel

    made = []
    real = relabel.permuted_graph
    def counted(graph, perm):
        made.append(real(graph, perm))
        return made[-1]
    monkeypatch.setattr(relabel, "permuted_graph", counted)
    host_relabels = []
    real_permute = reorder_mod.permute
    monkeypatch.setattr(reorder_mod, "permute", lambda *a, **k: host_relabels.append(1) or real_permute(*a, **k))
    graph = at.Graph.from_csr_graph(GRAPH)
    rg = at.reorder(graph, "auto", width=64, expected_calls=10**6, cache=tmp_path / "d.json",
                    measure_orders=_fake_orders(2.0), methods=("hubcluster", "rcm"),
                    decide_options={"device_info": DEVICE, "software_info": SOFTWARE})
    measured = [c for c in rg.decision.candidates if c.times is not None]
    assert rg.applied and len(made) == len(measured) >= 1
    # what was measured is the device relabelling's host copy: the host's relabelling, bit for bit
    # (the stored fingerprint `autosage replay` checks the permutation against)
    assert host_relabels == []
    host = graph.host_csr(weighted=True)
    assert rg.decision.reordered.fingerprint == real_permute(host, rg.decision.perm).fingerprint
    assert rg.decision.reordered.source["reorder"] == rg.method
    assert rg.graph is made[[c.method for c in measured].index(rg.method)]
    assert all(0 < c.apply_s < rg.cost_s for c in measured)
    net = Net().double()
    x = torch.randn(GRAPH.n_rows, 16, dtype=torch.float64)
    torch.testing.assert_close(at.Reordered(net, rg)(x), net(x, graph), rtol=1e-10, atol=1e-10)


def test_a_cached_decision_on_a_graph_is_not_relabelled_on_the_host(tmp_path, monkeypatch):
    from autosage_cli.graphs import reorder as reorder_mod

    options = dict(width=64, expected_calls=10**6, cache=tmp_path / "d.json", methods=("hubcluster", "rcm"),
                   decide_options={"device_info": DEVICE, "software_info": SOFTWARE})
    first = at.reorder(at.Graph.from_csr_graph(GRAPH), "auto", measure_orders=_fake_orders(2.0), **options)
    assert first.applied and not first.decision.from_cache
    host_relabels = []
    real = reorder_mod.permute
    monkeypatch.setattr(reorder_mod, "permute", lambda *a, **k: host_relabels.append(1) or real(*a, **k))
    def not_measured(*args):
        raise AssertionError("a cached decision measures nothing")
    again = at.reorder(at.Graph.from_csr_graph(GRAPH), "auto", measure_orders=not_measured, **options)
    assert again.decision.from_cache and again.method == first.method and host_relabels == []
    assert torch.equal(again.perm, first.perm)
    torch.testing.assert_close(again.graph.col, first.graph.col, rtol=0, atol=0)
    # a CSRGraph caller (a reordered file) gets the host's relabelling, once, on first use
    assert again.decision.relabelled().fingerprint == again.decision.relabelled().fingerprint
    assert host_relabels == [1]


def test_auto_without_a_gpu_or_a_measurer_is_one_line(monkeypatch):
    from autosage_cli import capability
    from autosage_cli.errors import NoGPUError

    def no_gpu(what="", hint=""):
        raise NoGPUError(f"{what}: no GPU here")
    monkeypatch.setattr(capability, "require_gpu", no_gpu)
    with pytest.raises(NoGPUError, match="measures both orders"):
        at.reorder(GRAPH, "auto")
    with pytest.raises(AutosageError, match="takes a CSRGraph"):
        at.reorder(np.zeros((3, 3)), "rcm")
