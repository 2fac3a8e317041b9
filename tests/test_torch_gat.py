"""GAT on the CPU (the torch reference path): `additive_attention` values and gradients against a
dense float64 reference and gradcheck, on graphs with empty rows, hub rows and odd widths; GATConv
against torch_geometric's GATConv with the same weights (outputs and every gradient); what is
refused."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from torch_helpers import (DispatchRecorder, autograd_nodes, dense_adjacency, dense_additive_attention,  # noqa: E402
                           leaf, random_edge_index)
from torch_helpers import grads as _grads  # noqa: E402

N, IN = 37, 13
F64 = torch.float64


def _leaf(*shape, seed=0, spread=2.0):
    return leaf(*shape, seed=seed, spread=spread)


def _close(ours, ref, tol=1e-10):
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def edges():
    return random_edge_index(N, seed=6, duplicates=False)


@pytest.mark.parametrize("heads, d, slope", [(1, 5, 0.2), (3, 7, 0.2), (8, 1, 0.01), (2, 3, 1.5)])
def test_additive_attention_values_and_gradients(edges, heads, d, slope):
    g = at.Graph.from_edge_index(edges, N)
    a_dst, a_src, V = _leaf(N, heads, seed=1), _leaf(N, heads, seed=2), _leaf(N, heads, d, seed=3)
    ours = at.additive_attention(g, a_dst, a_src, V, negative_slope=slope)
    ref = dense_additive_attention(dense_adjacency(edges, N), a_dst, a_src, V, slope)
    _close([ours], [ref])
    assert ours[0].abs().sum() == 0  # node 0 receives no edge: a zero row
    assert (ours[1:3].abs().sum(-1) > 0).all()  # the hubs
    _close(_grads(ours, [a_dst, a_src, V]), _grads(ref, [a_dst, a_src, V]))


def test_row_statistics_are_the_softmax_max_and_sum(edges):
    """What the forward keeps for backward: per (row, head) the max of the scores and the sum of
    e^(s - max); -inf and 0 on rows without edges."""
    from autosage_cli.torch import kernels

    g = at.Graph.from_edge_index(edges, N)
    a_dst, a_src, V = _leaf(N, 3, seed=1), _leaf(N, 3, seed=2), _leaf(N, 3, 4, seed=3)
    row_max, row_sum = kernels.additive_attention(g, a_dst.detach(), a_src.detach(), V.detach(), 0.2)[1].unbind(-1)
    scores = torch.nn.functional.leaky_relu(a_dst.detach().T[:, :, None] + a_src.detach().T[:, None, :], 0.2)
    mask = dense_adjacency(edges, N) != 0
    dense_max = scores.masked_fill(~mask, float("-inf")).amax(-1).T            # (N, H)
    dense_sum = ((scores - dense_max.T[:, :, None]).exp() * mask).sum(-1).T
    empty = ~mask.any(1)
    assert empty[0] and (row_max[empty] == float("-inf")).all() and (row_sum[empty] == 0).all()
    _close([row_max[~empty], row_sum[~empty]], [dense_max[~empty], dense_sum[~empty]])


def test_additive_attention_gradient_of_some_inputs_only(edges):
    g = at.Graph.from_edge_index(edges, N)
    a_dst, a_src, V = _leaf(N, 2, seed=1), _leaf(N, 2, seed=2), _leaf(N, 2, 3, seed=3)
    A = dense_adjacency(edges, N)
    for wanted in ([a_src], [V], [a_dst, V]):
        leaves = [t if any(t is w for w in wanted) else t.detach() for t in (a_dst, a_src, V)]
        ours = _grads(at.additive_attention(g, *leaves), wanted)
        _close(ours, _grads(dense_additive_attention(A, *leaves, 0.2), wanted))


def test_additive_attention_gradcheck_on_a_rectangular_graph():
    """A 7 x 9 graph (targets x sources) with an empty row and a hub row; scores around 0, where
    LeakyReLU bends."""
    rows = torch.tensor([0, 0, 0, 0, 0, 0, 0, 2, 3, 3, 5, 6, 6])
    cols = torch.tensor([0, 1, 2, 3, 5, 7, 8, 4, 0, 8, 6, 1, 2])
    g = at.Graph.from_coo(rows, cols, None, (7, 9))
    a_dst, a_src, V = _leaf(7, 2, seed=4, spread=0.5), _leaf(9, 2, seed=5), _leaf(9, 2, 3, seed=6)
    assert torch.autograd.gradcheck(lambda a, b, v: at.additive_attention(g, a, b, v, 0.3),
                                    (a_dst, a_src, V))


def test_graph_without_edges_gives_zeros():
    g = at.Graph.from_coo(torch.empty(0, dtype=torch.long), torch.empty(0, dtype=torch.long), None, (4, 4))
    a, b, V = _leaf(4, 2), _leaf(4, 2, seed=1), _leaf(4, 2, 3, seed=2)
    out = at.additive_attention(g, a, b, V)
    assert out.shape == (4, 2, 3) and out.abs().sum() == 0
    assert all(x.abs().sum() == 0 for x in _grads(out, [a, b, V]))


@pytest.mark.parametrize("call, message", [
    (lambda g, a, V: at.additive_attention(g, a[:, :1], a, V), "one score per head"),
    (lambda g, a, V: at.additive_attention(g, a, a[:-1], V), "expected 2 dimensions with 37 rows"),
    (lambda g, a, V: at.additive_attention(g, a.float(), a, V), "expected torch.float64"),
    (lambda g, a, V: at.additive_attention(g, a, a, V, float("nan")), "negative_slope must be finite"),
])
def test_bad_input_names_the_problem(edges, call, message):
    g = at.Graph.from_edge_index(edges, N)
    with pytest.raises(AutosageError, match=message):
        call(g, _leaf(N, 2), _leaf(N, 2, 3))


def test_duplicate_edges_count_once_per_listing():
    """A sampler drawing with replacement lists some edges twice: each listing weighs in the
    softmax, as in PyG's GATConv (the dense reference counts them), values and gradients."""
    dup = random_edge_index(N, seed=6, duplicates=True)
    g = at.Graph.from_edge_index(dup, N)
    assert g.has_duplicates
    a_dst, a_src, V = _leaf(N, 2, seed=1), _leaf(N, 2, seed=2), _leaf(N, 2, 3, seed=3)
    ours = at.additive_attention(g, a_dst, a_src, V)
    ref = dense_additive_attention(dense_adjacency(dup, N), a_dst, a_src, V, 0.2)
    _close([ours], [ref])
    _close(_grads(ours, (a_dst, a_src, V)), _grads(ref, (a_dst, a_src, V)))
    coalesced = at.Graph.from_edge_index(torch.unique(dup, dim=1), N)
    assert not torch.allclose(at.additive_attention(coalesced, a_dst, a_src, V), ours)


# ------------------------------------------------------------------ GATConv against PyG

pyg_nn = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed: no layer parity")


@pytest.mark.parametrize("out, options", [
    (5, {}), (7, {"heads": 3}), (4, {"heads": 2, "concat": False}), (6, {"add_self_loops": False}),
    (3, {"heads": 4, "negative_slope": 0.5, "bias": False}), (33, {"heads": 8})])
def test_gat_matches_pyg(edges, out, options):
    loops = torch.tensor([[3, 4], [3, 4]])  # nodes with their own loops: replaced by one, as PyG does
    graph_edges = torch.cat([edges, loops], 1) if options.get("add_self_loops", True) else edges
    x = torch.randn(N, IN, dtype=F64, generator=torch.Generator().manual_seed(0))
    theirs = pyg_nn.GATConv(IN, out, **options).double()
    ours = at.GATConv(IN, out, **options).double()
    ours.load_state_dict(theirs.state_dict())  # strict: the parameter names and shapes match
    for graph in (graph_edges, at.Graph.from_edge_index(graph_edges, N)):
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        a, b = ours(x1, graph), theirs(x2, graph_edges)
        _close([a], [b])
        ours.zero_grad(), theirs.zero_grad()
        upstream = torch.randn(a.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
        (a * upstream).sum().backward()
        (b * upstream).sum().backward()
        _close([x1.grad], [x2.grad])
        theirs_params = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            torch.testing.assert_close(p.grad, theirs_params[name].grad, rtol=1e-10, atol=1e-10, msg=name)


@pytest.mark.parametrize("bipartite", [False, True])
def test_gat_layer_attention_is_one_autograd_node(edges, bipartite):
    """The score terms, the softmax and the weighted sum are one node (gat_attention): no products
    and sums of their own, and x's gradient reaches the linear map once; under a dispatch mode (as
    torch.compile traces) the layer takes the custom operator instead, with the same output."""
    x = torch.randn(N, IN, dtype=F64, requires_grad=True)
    layer = (at.GATConv((IN, IN), 4, heads=2) if bipartite else at.GATConv(IN, 4, heads=2)).double()
    g = at.Graph.from_edge_index(edges, N)
    from autosage_cli.torch import handles

    with handles.recording() as seen:    # registered, as every op's graph (captures check them)
        out = layer((x, x) if bipartite else x, g)
    assert len(seen) == 1 and all(getattr(s, "_op_handle", None) is not None for s in seen.values())
    names = [type(node).__name__ for node in autograd_nodes(out)]
    assert names.count("_GATAttentionBackward") == 1, names
    assert not any(n.startswith(("MulBackward", "SumBackward")) for n in names), names
    assert names.count("MmBackward0") == (2 if bipartite else 1), names
    with DispatchRecorder() as calls:
        traced = layer((x, x) if bipartite else x, g)
    assert any(n.startswith("autosage.additive_attention") for n in calls.names), calls.names
    torch.testing.assert_close(traced, out, rtol=1e-12, atol=1e-12)


def test_gat_trains_in_float32(edges):
    x = torch.randn(N, IN, generator=torch.Generator().manual_seed(1))
    labels = torch.randint(0, 3, (N,), generator=torch.Generator().manual_seed(2))
    layers = [at.GATConv(IN, 4, heads=2), at.GATConv(8, 3, heads=1, concat=False)]
    opt = torch.optim.Adam([p for layer in layers for p in layer.parameters()], lr=0.05)
    losses = []
    for _ in range(5):
        opt.zero_grad()
        h = torch.relu(layers[0](x, edges))
        loss = torch.nn.functional.cross_entropy(layers[1](h, edges), labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


@pytest.mark.parametrize("make, message", [
    (lambda: at.GATConv(4, 4, dropout=0.5), "dropout"),
    (lambda: at.GATConv(4, 4, edge_dim=3), "edge_dim"),
    (lambda: at.GATConv(4, 4, residual=True), "residual"),
])
def test_unsupported_options_are_refused(make, message):
    with pytest.raises(AutosageError, match=message):
        make()


def test_widths_without_a_fused_schedule_take_the_composition():
    """The fused kernels' vector widths leave d = 1 and 2 features a head without a schedule (and d
    above MAX_FEATURES): on CUDA those run the torch composition instead of failing to tune."""
    from autosage_cli.kernels.attention_space import MAX_FEATURES
    from autosage_cli.torch.kernels import fused_additive_runs

    assert not fused_additive_runs(1, 1, "float32") and not fused_additive_runs(2, 8, "bfloat16")
    assert fused_additive_runs(8, 8, "float32") and fused_additive_runs(3, 1, "float16")
    assert not fused_additive_runs(MAX_FEATURES + 1, 1, "float32")

