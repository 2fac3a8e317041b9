"""autosage_cli.torch ops on the CPU (the torch reference path): values and gradients against dense
float64 references, gradcheck, edge orders, no_grad / inference_mode / torch.compile, bad input.
Graphs have empty rows, hub rows and duplicate edges; widths are not multiples of 4."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from torch_helpers import dense_adjacency, dense_attention, random_edge_index  # noqa: E402
from torch_helpers import grads as _grads, leaf as _leaf  # noqa: E402

N = 37
F64 = torch.float64


def _assert_close(ours, ref, tol=1e-10):
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.fixture(scope="module")
def edges():
    return random_edge_index(N, seed=2)


@pytest.mark.parametrize("k", [1, 3, 7])
@pytest.mark.parametrize("weights", ["none", "graph", "edge_weight"])
def test_spmm_values_and_gradients(edges, k, weights):
    w = _leaf(edges.shape[1], seed=1)
    g = at.Graph.from_edge_index(edges, N, edge_weight=w.detach() if weights == "graph" else None)
    B = _leaf(N, k)
    edge_weight = w if weights == "edge_weight" else None
    ours = at.spmm(g, B, edge_weight)
    # a Graph stores its own weights in float32
    dense_w = {"none": None, "graph": w.detach().float().double(), "edge_weight": w}[weights]
    A = dense_adjacency(edges, N, dense_w)
    ref = A @ B
    tol = 1e-6 if weights == "graph" else 1e-10  # duplicate weights were summed in float32
    _assert_close([ours], [ref], tol)
    inputs = [B, w] if weights == "edge_weight" else [B]
    _assert_close(_grads(ours, inputs), _grads(ref, inputs), tol)


@pytest.mark.parametrize("k", [1, 5])
def test_sddmm_values_and_gradients_in_user_order(edges, k):
    w = _leaf(edges.shape[1], seed=3)
    g = at.Graph.from_edge_index(edges, N)
    X, Y = _leaf(N, k, seed=4), _leaf(N, k, seed=5)
    ours = at.sddmm(g, X, Y, edge_weight=w)
    src, dst = edges
    ref = w * (X[dst] * Y[src]).sum(-1)   # row = target, column = source
    _assert_close([ours], [ref])
    _assert_close(_grads(ours, [X, Y, w]), _grads(ref, [X, Y, w]))


def test_sddmm_uses_the_graph_weights_per_user_edge(edges):
    w = torch.rand(edges.shape[1], dtype=F64) + 0.5
    g = at.Graph.from_edge_index(edges, N, edge_weight=w.float())
    X, Y = _leaf(N, 3), _leaf(N, 3, seed=1)
    ours = at.sddmm(g, X, Y)
    ref = w.float().double() * (X[edges[1]] * Y[edges[0]]).sum(-1)
    _assert_close([ours], [ref], tol=1e-6)


@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("heads, d", [(1, 5), (3, 6)])
def test_attention_values_and_gradients(heads, d, duplicates):
    """With duplicate edges (a sampler drawing with replacement) each listing counts in the softmax,
    as in PyG: the dense reference counts them."""
    edges = random_edge_index(N, seed=6, duplicates=duplicates)
    g = at.Graph.from_edge_index(edges, N)
    assert g.has_duplicates == duplicates
    Q, K, V = (_leaf(N, heads, d, seed=s) for s in (7, 8, 9))
    scale = 0.7
    ours = at.attention(g, Q, K, V, scale=scale)
    ref = dense_attention(dense_adjacency(edges, N), Q, K, V, scale)
    _assert_close([ours], [ref])
    assert ours[0].abs().sum() == 0  # node 0 receives no edge: a zero row
    _assert_close(_grads(ours, [Q, K, V]), _grads(ref, [Q, K, V]))


def test_attention_gradient_of_one_input_only():
    edges = random_edge_index(N, seed=6, duplicates=False)
    g = at.Graph.from_edge_index(edges, N)
    Q, K = _leaf(N, 2, 3, seed=1), _leaf(N, 2, 3, seed=2)
    V = _leaf(N, 2, 3, seed=3).detach()
    (dK,) = _grads(at.attention(g, Q.detach(), K, V), [K])
    (ref,) = _grads(dense_attention(dense_adjacency(edges, N), Q.detach(), K, V, 3 ** -0.5), [K])
    _assert_close([dK], [ref])


def test_gradcheck_all_ops():
    edges = random_edge_index(9, seed=11, avg_degree=2, hub_degree=6, duplicates=False)
    g = at.Graph.from_edge_index(edges, 9)
    B, w = _leaf(9, 3), _leaf(edges.shape[1], seed=2)
    assert torch.autograd.gradcheck(lambda B, w: at.spmm(g, B, w), (B, w))
    # SpMM's and SDDMM's backward are the spmm, spmm_t and sddmm ops again: twice differentiable
    assert torch.autograd.gradgradcheck(lambda B, w: at.spmm(g, B, w), (B, w))
    X, Y = _leaf(9, 3, seed=3), _leaf(9, 3, seed=4)
    assert torch.autograd.gradcheck(lambda X, Y: at.sddmm(g, X, Y), (X, Y))
    assert torch.autograd.gradgradcheck(lambda X, Y: at.sddmm(g, X, Y), (X, Y))
    assert torch.autograd.gradcheck(lambda X, Y, w: at.sddmm(g, X, Y, w), (X, Y, w))
    Q, K, V = (_leaf(9, 2, 3, seed=s) for s in (5, 6, 7))
    assert torch.autograd.gradcheck(lambda Q, K, V: at.attention(g, Q, K, V), (Q, K, V))
    a, b = _leaf(9, 2, seed=8, spread=2.0), _leaf(9, 2, seed=9, spread=2.0)   # both sides of the bend
    assert torch.autograd.gradcheck(lambda a, b, V: at.additive_attention(g, a, b, V, 0.3), (a, b, V))


def test_rectangular_graph_and_coercion():
    import scipy.sparse as sp

    m = sp.random(6, 11, density=0.3, random_state=0, format="csr")
    B = _leaf(11, 4)
    ours = at.spmm(m, B)                              # SciPy accepted directly
    ref = torch.from_numpy(m.toarray()).to(F64) @ B
    _assert_close([ours], [ref], tol=1e-6)
    (dB,) = _grads(ours, [B])
    (ref_dB,) = _grads(ref, [B])
    _assert_close([dB], [ref_dB], tol=1e-6)


def test_no_grad_inference_mode_and_compile(edges):
    g = at.Graph.from_edge_index(edges, N)
    B = torch.randn(N, 6)
    expected = at.spmm(g, B)
    with torch.no_grad():
        assert torch.equal(at.spmm(g, B.requires_grad_()), expected)
    with torch.inference_mode():
        assert torch.equal(at.spmm(g, torch.randn(N, 6).copy_(B)), expected)

    def step(x):
        return at.spmm(g, torch.relu(x)).sum()

    compiled = torch.compile(step, backend="eager")
    x = torch.randn(N, 6, requires_grad=True)
    out = compiled(x)
    (grad,) = torch.autograd.grad(out, x)
    (ref_grad,) = torch.autograd.grad(step(x), x)
    assert torch.allclose(out, step(x)) and torch.allclose(grad, ref_grad)


@pytest.mark.parametrize("call, message", [
    (lambda g: at.spmm(g, torch.randn(5, 3)), "B: expected 2 dimensions with 37 rows"),
    (lambda g: at.spmm(g, torch.randn(N, 0)), "feature dimensions must be >= 1"),
    (lambda g: at.spmm(g, torch.ones(N, 3, dtype=torch.int64)), "floating-point"),
    (lambda g: at.spmm(g, torch.randn(N, 3), torch.ones(2)), "edge_weight: expected 1 dimensions"),
    (lambda g: at.sddmm(g, torch.randn(N, 3), torch.randn(N, 4)), "Y: expected width 3"),
    (lambda g: at.sddmm(g, torch.randn(N, 3), torch.randn(N, 3, dtype=F64)), "Y: expected torch.float32"),
    (lambda g: at.attention(g, torch.randn(N, 2, 3), torch.randn(N, 1, 3), torch.randn(N, 2, 3)),
     "must share"),
])
def test_bad_input_names_the_problem(edges, call, message):
    with pytest.raises(AutosageError, match=message):
        call(at.Graph.from_edge_index(edges, N))
