"""A layer's aggregation of an unchanged input kept across calls (autosage_cli.torch.kept_aggregation):
GCNConv and SAGEConv (one node set and bipartite, either multiplication order, with and without
the ReLU) give the outputs and gradients they give without it, call after call; the first sight
runs the layer's usual SpMMs, the second one SpMM (A x) and later calls none either way; an input
written in place, a new tensor, an input needing a gradient, a call under inference mode and
`keep_aggregations(False)` are aggregated anew; the product goes when the input does. On the CPU (the reference kernels), in
float64."""
from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.torch import kept_aggregation  # noqa: E402
from autosage_cli.torch.norm import gcn_graph, mean_graph  # noqa: E402
from torch_helpers import bipartite_graph, kept_on, random_edge_index, record_spmms  # noqa: E402,F401

pytestmark = pytest.mark.usefixtures("kept_on")
N, N_DST = 37, 15
F64 = torch.float64


@pytest.fixture
def graph():
    return at.Graph.from_edge_index(random_edge_index(N, seed=3), N)


@pytest.fixture
def spmms(monkeypatch):
    """The SpMM kernels' calls, by name and width, as the layers run them."""
    return record_spmms(monkeypatch)


def _features(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, cols, dtype=F64, generator=torch.Generator().manual_seed(seed))


def _step(layer, x, graph):
    """(output, parameter gradients) of one call, against a fixed upstream gradient."""
    layer.zero_grad()
    out = layer(x, graph)
    upstream = torch.randn(out.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    out.backward(upstream)
    return out.detach(), [p.grad.clone() for p in layer.parameters()]


def _reference(layer, x, graph):
    """_step with nothing kept (turning it off drops what was kept)."""
    at.keep_aggregations(False)
    try:
        return _step(layer, x, graph)
    finally:
        at.keep_aggregations(True)


def _assert_equal(got, want):
    torch.testing.assert_close(got[0], want[0])
    for a, b in zip(got[1], want[1]):
        torch.testing.assert_close(a, b)


LAYERS = {
    "gcn-transform-first": lambda act: at.GCNConv(9, 4, act=act),
    "gcn-aggregate-first": lambda act: at.GCNConv(4, 9, act=act),
    "sage-transform-first": lambda act: at.SAGEConv(9, 4, act=act),
    "sage-aggregate-first": lambda act: at.SAGEConv(4, 9, act=act),
    "sage-no-root": lambda act: at.SAGEConv(9, 4, root_weight=False, act=act),
}


@pytest.mark.parametrize("act", [None, "relu"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_a_recurring_input_gives_what_every_call_aggregating_gives(graph, spmms, name, act):
    layer = LAYERS[name](act).double()
    x = _features(N, layer.in_channels, seed=2)
    want = _reference(layer, x, graph)   # no optimizer step: every call's output and gradients
    for call in range(4):
        spmms.clear()
        got = _step(layer, x, graph)
        ran = list(spmms)
        _assert_equal(got, want)
        if call == 0:                    # noted only: the layer's own SpMMs
            assert ran and all(width == layer.aggregation_width for _, width in ran), ran
        elif call == 1:                  # kept now: A x at the input's width, nothing else
            assert ran == [("_spmm", layer.in_channels)], ran
        else:
            assert ran == [], ran


@pytest.mark.parametrize("widths", [(9, 4), (4, 9)], ids=["transform-first", "aggregate-first"])
def test_a_bipartite_layer_keeps_its_sources_aggregation(spmms, widths):
    block = bipartite_graph(N, N_DST, 90)
    layer = at.SAGEConv(widths, 6, act="relu").double()
    x = (_features(N, widths[0], seed=4), _features(N_DST, widths[1], seed=5))
    want = _reference(layer, x, block)
    for _ in range(3):
        spmms.clear()
        _assert_equal(_step(layer, x, block), want)
    assert spmms == []


def test_an_input_written_in_place_is_aggregated_anew(graph, spmms):
    layer = at.SAGEConv(9, 4).double()
    x = _features(N, 9, seed=6)
    for _ in range(3):
        _step(layer, x, graph)
    with torch.no_grad():
        x.mul_(-2.0)                     # through a view moves the same version counter
        x[:, :3].add_(1.0)
    spmms.clear()
    got = _step(layer, x, graph)
    assert spmms and all(width == 4 for _, width in spmms)
    _assert_equal(got, _reference(layer, x, graph))


def test_an_equal_new_tensor_a_gradient_or_turning_it_off_aggregates_every_call(graph, spmms):
    layer = at.GCNConv(9, 4).double()
    x = _features(N, 9, seed=7)
    _step(layer, x.clone(), graph)
    one_call = list(spmms)               # transform first: the SpMM and its transpose
    assert sorted(one_call) == [("_spmm_epilogue", 4), ("_spmm_t", 4)]
    needs_grad = x.clone().requires_grad_()
    for inputs in ([x.clone() for _ in range(3)],     # a new tensor each call, as a mini-batch's
                   [needs_grad] * 3):
        spmms.clear()
        for x_i in inputs:
            _step(layer, x_i, graph)
        assert spmms == one_call * 3
    at.keep_aggregations(False)
    spmms.clear()
    for _ in range(3):
        _step(layer, x, graph)
    assert spmms == one_call * 3


def test_the_product_goes_with_its_input(graph):
    layer = at.GCNConv(9, 4).double()
    x = _features(N, 9, seed=8)
    for _ in range(2):
        _step(layer, x, graph)
    table = gcn_graph(graph).derived[kept_aggregation._KEY]
    noted = kept_aggregation.noted(gcn_graph(graph), x)
    assert noted.aggregated is not None and noted.aggregated.shape == (N, 9) and len(table) == 1
    del x, noted
    gc.collect()
    assert table == {}


def test_inference_mode_keeps_nothing_and_a_later_training_call_keeps_as_before(graph, spmms):
    layer = at.SAGEConv(9, 4).double()
    x = _features(N, 9, seed=9)
    with torch.inference_mode():
        made_there = _features(N, 9, seed=9)     # an inference tensor: no version counter
        outs = [layer(t, graph) for t in (made_there, made_there, x, x)]
    assert len(spmms) == 4 and all(width == 4 for _, width in spmms)
    torch.testing.assert_close(outs[3], outs[0])
    want = _reference(layer, x, graph)
    for _ in range(3):                   # a product made under inference mode could not be saved
        _assert_equal(_step(layer, x, graph), want)
    assert kept_aggregation.noted(mean_graph(graph), x).aggregated is not None


def test_a_stack_without_gradients_keeps_its_first_layers_product(graph, spmms):
    """Inference: every layer's input needs no gradient, on one graph; the features recur, the
    hidden layers' inputs are new each call."""
    from autosage_cli.torch.training import build
    net = build(at, "sage", 9, 3).double().eval()
    x = _features(N, 9, seed=10)
    with torch.no_grad():
        first = net(x, graph)
        for _ in range(2):
            spmms.clear()
            out = net(x, graph)
    assert ("_spmm", 9) not in spmms and len(spmms) == 2       # the two later layers' own
    torch.testing.assert_close(out, first)
    assert len(mean_graph(graph).derived[kept_aggregation._KEY]) == 1   # the hidden inputs went
