"""autosage's torch ops as custom operators, on the CPU (the reference path): torch.library.opcheck
of every op (schema, fake shape functions, autograd registration, AOT dispatch), gradcheck in
float64 (tests/test_torch_ops.py: first and second order, through the ops), the Graph handle registry, and torch.compile(fullgraph=True) of GCN, SAGE, GAT
and TransformerConv stacks: one graph, no break, outputs and gradients equal to eager."""
from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.torch import handles, ops  # noqa: E402
from torch_helpers import DispatchRecorder, leaf, random_edge_index  # noqa: E402

N = 23
F64 = torch.float64


@pytest.fixture(scope="module")
def graph():
    """Empty rows (every 5th node), two hub rows, no duplicates (attention refuses them)."""
    return at.Graph.from_edge_index(random_edge_index(N, seed=3, duplicates=False), N)


def _samples(g):
    h, nnz = handles.handle(g), g.nnz
    B, X, Y = leaf(N, 3, seed=1), leaf(N, 3, seed=2), leaf(N, 3, seed=3)
    values = leaf(nnz, seed=4)
    Q, K, V = (leaf(N, 2, 3, seed=s) for s in (5, 6, 7))
    a_dst, a_src = leaf(N, 2, seed=8, spread=2.0), leaf(N, 2, seed=9, spread=2.0)
    O = ops.attention_op(h, Q.detach(), K.detach(), V.detach(), 0.6)
    O_add, stats = ops.additive_attention_op(h, a_dst.detach(), a_src.detach(), V.detach(), 0.2)
    dO = leaf(N, 2, 3, seed=10).detach()
    return {
        ops.spmm_op: [(h, None, B, N), (h, values, B, N)],
        ops.spmm_t_op: [(h, values, X, N), (h, None, X, N)],
        ops.sddmm_op: [(h, X, Y, nnz)],
        ops.attention_op: [(h, Q, K, V, 0.6)],
        ops.attention_backward_op: [(h, Q.detach(), K.detach(), V.detach(), O, dO, 0.6, True, False, True)],
        ops.additive_attention_op: [(h, a_dst, a_src, V, 0.2)],
        ops.additive_attention_backward_op: [(h, a_dst.detach(), a_src.detach(), V.detach(), O_add, stats,
                                              dO, 0.2, True, True, False)],
    }


@pytest.mark.parametrize("name", ["spmm_op", "spmm_t_op", "sddmm_op", "attention_op", "attention_backward_op",
                                  "additive_attention_op", "additive_attention_backward_op"])
def test_opcheck_every_op(graph, name):
    op = getattr(ops, name)
    for args in _samples(graph)[op]:
        torch.library.opcheck(op, args)


def test_ops_are_registered_in_the_autosage_namespace():
    for name in ("spmm", "spmm_t", "sddmm", "attention", "attention_backward", "additive_attention",
                 "additive_attention_backward"):
        assert hasattr(torch.ops.autosage, name), name


def test_backward_ops_return_empty_tensors_for_gradients_not_asked_for(graph):
    (args,) = _samples(graph)[ops.attention_backward_op]
    dQ, dK, dV = ops.attention_backward_op(*args)
    assert dQ.shape == (N, 2, 3) and dK.numel() == 0 and dV.shape == (N, 2, 3)


def test_handles_hold_graphs_weakly_and_a_dead_handle_is_one_line():
    gc.collect()       # Graphs an earlier test left in reference cycles (compiled code's) go first
    before = handles.live_count()
    g = at.Graph.from_edge_index(random_edge_index(N, seed=5), N)
    h = handles.handle(g)
    assert handles.handle(g) == h and handles.graph(h) is g and handles.live_count() == before + 1
    del g
    gc.collect()
    assert handles.live_count() == before
    with pytest.raises(AutosageError, match=f"graph handle {h} names no live Graph") as info:
        ops.spmm_op(h, None, torch.randn(N, 2), N)
    assert "\n" not in str(info.value)


def test_a_graph_made_for_one_call_lives_until_backward():
    """spmm(scipy_matrix, B): the Graph exists only inside the call; its autograd node keeps it."""
    import scipy.sparse as sp

    B = leaf(11, 3)
    out = at.spmm(sp.random(6, 11, density=0.3, random_state=0, format="csr"), B)
    gc.collect()
    (dB,) = torch.autograd.grad(out.sum(), B)
    assert dB.shape == (11, 3)


# ------------------------------------------------------------------ torch.compile of layer stacks
def _models():
    from autosage_cli.torch.training import Net

    return {
        "gcn": lambda: Net([at.GCNConv(13, 8), at.GCNConv(8, 3)]),
        "sage": lambda: Net([at.SAGEConv(13, 16), at.SAGEConv(16, 8), at.SAGEConv(8, 3)]),
        "gat": lambda: Net([at.GATConv(13, 4, heads=2), at.GATConv(8, 3, heads=1)]),
        "transformer": lambda: Net([at.TransformerConv(13, 4, heads=2), at.TransformerConv(8, 3)]),
    }


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gcn", "sage", "gat", "transformer"])
def test_compiled_layer_stack_is_one_graph_and_equals_eager(model):
    torch.manual_seed(0)
    edges = random_edge_index(41, seed=4, duplicates=False)
    g = at.Graph.from_edge_index(edges, 41)
    net = _models()[model]().double()
    x = torch.randn(41, 13, dtype=F64)
    eager_x = x.clone().requires_grad_()
    eager = net(eager_x, g)        # eagerly first: builds the normalised graphs (see INTERNALS)
    eager.square().sum().backward()
    eager_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)

    explained = torch._dynamo.explain(net)(x, g)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch._dynamo.reset()

    compiled_x = x.clone().requires_grad_()
    out = torch.compile(net, fullgraph=True)(compiled_x, g)
    out.square().sum().backward()
    torch.testing.assert_close(out, eager, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(compiled_x.grad, eager_x.grad, rtol=1e-10, atol=1e-10)
    for p, ref in zip(net.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, ref, rtol=1e-10, atol=1e-10)


def test_compiled_ops_with_user_order_edge_weights_need_no_break(graph):
    """The public ops' own Python (checks, edge orders, the handle) traces into one graph."""
    w = torch.rand(graph.num_user_edges, dtype=F64)

    def f(x, w):
        return at.sddmm(graph, x, x, w).sum() + at.spmm(graph, x, w).square().sum()

    x = torch.randn(N, 4, dtype=F64)
    explained = torch._dynamo.explain(f)(x, w)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch.testing.assert_close(torch.compile(f, fullgraph=True, backend="aot_eager")(x, w), f(x, w))


def test_a_graph_has_its_handle_from_birth_and_compiles_before_any_eager_op():
    """Every Graph registers when it is made (nothing to register while dynamo traces, which torch
    2.11 cannot do for a Graph), and opening a recording block does not note it."""
    with handles.recording() as seen:
        fresh = at.Graph.from_edge_index(random_edge_index(N, seed=8), N)
    assert handles.graph(fresh._op_handle) is fresh and seen == {}

    def f(x):
        return at.spmm(fresh, x).square().sum()

    x = torch.randn(N, 3, dtype=F64)
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    torch.testing.assert_close(out, f(x))


def test_an_untraced_call_without_grad_runs_the_implementation_and_a_traced_one_the_op(graph, monkeypatch):
    """A compiled graph's run-time calls (no grad, no tracer) skip torch.library's wrappers; a
    dispatch mode, or a gradient to record, still meets the op and its autograd node."""
    h, B = handles.handle(graph), leaf(N, 3, seed=1)
    backend = []
    fns = ops.spmm_op._backend_fns
    monkeypatch.setitem(fns, None, lambda *a, _f=fns[None]: backend.append(1) or _f(*a))
    with torch.no_grad():
        direct = torch.ops.autosage.spmm.default(h, None, B, N)
    assert backend == []
    assert torch.equal(direct, ops._spmm(graph, None, B.detach(), N))
    with torch.no_grad(), DispatchRecorder() as mode:
        traced = torch.ops.autosage.spmm.default(h, None, B, N)
    assert backend == [1] and "autosage.spmm.default" in mode.names
    assert torch.equal(traced, direct)
    out = torch.ops.autosage.spmm.default(h, None, B, N)
    assert out.grad_fn is not None
    out.sum().backward()
    assert torch.allclose(B.grad, ops._spmm_t(graph, None, torch.ones_like(direct), N))
