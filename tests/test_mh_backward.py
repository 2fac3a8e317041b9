"""The attention backward's multi-head building blocks on the CPU (autosage_cli.torch.kernels:
heads_sddmm, heads_spmm, softmax_grad), against edge loops and dense per-head products in float64,
on graphs with empty rows and a hub row; the 2-byte rounding they keep; and the backward formulas
(torch/backward.py) calling them with no per-head SDDMM or SpMM. tests/test_mh_backward_gpu.py
holds the CUDA kernels to these references."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.torch import backward, kernels  # noqa: E402
from torch_helpers import random_edge_index  # noqa: E402

N = 41
HEADS = (1, 3, 8)
WIDTHS = (1, 8, 33)


@pytest.fixture(scope="module")
def graph():
    edges = random_edge_index(N, seed=5, avg_degree=3, hubs=1, hub_degree=N - 4, duplicates=False)
    g = at.Graph.from_edge_index(edges, N)
    degrees = g.rowptr.diff()
    assert int((degrees == 0).sum()) >= 5 and int(degrees.max()) >= N // 2   # empty rows, a hub row
    return g


def _rand(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return (torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) * 2 - 1).to(dtype)


def _dense(g, values: torch.Tensor) -> torch.Tensor:
    """(H, n_rows, n_cols): values (nnz, H) at each edge's (row, col), per head."""
    A = torch.zeros(values.shape[1], g.n_rows, g.n_cols, dtype=values.dtype)
    A[:, g.row, g.col] = values.t()
    return A


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("d", WIDTHS)
def test_heads_sddmm_is_every_edges_dot_per_head(graph, heads, d):
    X, Y = _rand(N, heads, d, seed=1), _rand(N, heads, d, seed=2)
    out = kernels.heads_sddmm(graph, X, Y, 0.75)
    assert out.shape == (graph.nnz, heads) and out.dtype == torch.float64
    expected = torch.tensor([[0.75 * float(X[int(i), h] @ Y[int(j), h]) for h in range(heads)]
                             for i, j in zip(graph.row, graph.col)], dtype=torch.float64)
    torch.testing.assert_close(out, expected.reshape(graph.nnz, heads), rtol=1e-12, atol=1e-12)
    # the per-head SDDMM it replaces, head by head
    for h in range(heads):
        torch.testing.assert_close(out[:, h], 0.75 * kernels.sddmm(graph, X[:, h].contiguous(), Y[:, h].contiguous()))


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("d", WIDTHS)
def test_heads_spmm_is_a_dense_product_per_head(graph, heads, d):
    P, X = _rand(graph.nnz, heads, seed=3), _rand(N, heads, d, seed=4)
    out = kernels.heads_spmm(graph, P, X)
    assert out.shape == (N, heads, d) and out.dtype == torch.float64
    expected = torch.einsum("hij,jhk->ihk", _dense(graph, P), X)
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
    assert out[graph.rowptr.diff() == 0].abs().sum() == 0          # empty rows stay zero


@pytest.mark.parametrize("heads", HEADS)
@pytest.mark.parametrize("d", WIDTHS)
def test_the_transposed_product_reads_values_in_the_graphs_order(graph, heads, d):
    """dV = Pᵀ dO with P in the forward graph's edge order: the product on g.T through t_perm."""
    P, X = _rand(graph.nnz, heads, seed=5), _rand(N, heads, d, seed=6)
    out = backward.heads_spmm_t(graph, P, X)
    torch.testing.assert_close(out, torch.einsum("hij,ihk->jhk", _dense(graph, P), X), rtol=1e-12, atol=1e-12)
    for h in range(heads):   # the per-head transposed SpMM it replaces
        torch.testing.assert_close(out[:, h], backward.spmm_t(graph, P[:, h], X[:, h].contiguous()))


@pytest.mark.parametrize("heads", HEADS)
def test_softmax_grad_subtracts_each_rows_weighted_mean(graph, heads):
    P, dP = _rand(graph.nnz, heads, seed=7), _rand(graph.nnz, heads, seed=8)
    row_dot = _rand(N, heads, seed=9)
    given = kernels.softmax_grad(graph, P, dP.clone(), row_dot, 0.5)
    expected = torch.empty_like(dP)
    for e, i in enumerate(graph.row.tolist()):
        expected[e] = 0.5 * P[e] * (dP[e] - row_dot[i])
    torch.testing.assert_close(given, expected, rtol=1e-12, atol=1e-12)
    # without row_dot, each row's sum of P dP: for probabilities P, dS then sums to zero over
    # every row, as the exact gradient does
    P = kernels.edge_softmax(graph, P * 3)
    summed = kernels.softmax_grad(graph, P, dP.clone())
    sums = torch.zeros(N, heads, dtype=torch.float64).index_add_(0, graph.row, P * dP)
    torch.testing.assert_close(summed, P * (dP - sums[graph.row]), rtol=1e-12, atol=1e-12)
    row_sums = torch.zeros(N, heads, dtype=torch.float64).index_add_(0, graph.row, summed)
    assert float(row_sums.abs().max()) < 1e-12 < float(summed.abs().max())
    buffer = dP.clone()
    assert kernels.softmax_grad(graph, P, buffer) is buffer               # in place: backward's buffer


@pytest.mark.parametrize("heads", HEADS)
def test_additive_probs_rebuild_the_forwards_softmax(graph, heads):
    a_dst, a_src = _rand(N, heads, seed=21), _rand(N, heads, seed=22)
    stats = kernels.additive_attention(graph, a_dst, a_src, _rand(N, heads, 2, seed=23), 0.2)[1]
    row_max, row_sum = stats.unbind(-1)
    P, negative = kernels.additive_probs(graph, a_dst, a_src, row_max, row_sum, 0.2)
    x = a_dst[graph.row] + a_src[graph.col]
    torch.testing.assert_close(P, kernels.edge_softmax(graph, torch.where(x > 0, x, 0.2 * x)), rtol=1e-12, atol=1e-12)
    assert torch.equal(negative, x <= 0) and 0 < int(negative.sum()) < negative.numel()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_two_byte_operands_round_as_the_per_head_ops_did(graph, dtype):
    """heads_sddmm: each dot rounded to the type, then float32; heads_spmm: values rounded to the
    type, sums in float32, the output in the type."""
    X, Y = _rand(N, 3, 8, seed=10, dtype=dtype), _rand(N, 3, 8, seed=11, dtype=dtype)
    dots = kernels.heads_sddmm(graph, X, Y)
    assert dots.dtype == torch.float32 and torch.equal(dots, dots.to(dtype).float())
    exact = kernels.heads_sddmm(graph, X.double(), Y.double())
    rounding = float((dots.double() - exact).abs().max())
    assert rounding > 0                                      # rounded, not float32 sums
    unrounded = kernels.heads_sddmm(graph, X, Y, rounded=False)   # the attention scores: float32
    assert unrounded.dtype == torch.float32 and float((unrounded.double() - exact).abs().max()) < rounding / 100
    P = _rand(graph.nnz, 3, seed=12, dtype=torch.float32)
    out = kernels.heads_spmm(graph, P, X)
    assert out.dtype == dtype
    expected = kernels.heads_spmm(graph, P.to(dtype).double(), X.double()).to(dtype)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


@pytest.fixture
def no_per_head_ops(monkeypatch):
    """The single-head SDDMM and SpMM refuse to run: the attention backward must not call them."""
    def refuse(*args, **kwargs):
        raise AssertionError("a per-head SDDMM or SpMM ran in the attention backward")
    monkeypatch.setattr(kernels, "sddmm", refuse)
    monkeypatch.setattr(kernels, "spmm", refuse)


@pytest.mark.parametrize("heads, d", [(1, 1), (3, 8), (8, 33)])
def test_the_attention_backwards_run_no_per_head_op(graph, no_per_head_ops, heads, d):
    Q, K, V = (_rand(N, heads, d, seed=s).requires_grad_() for s in (13, 14, 15))
    out = at.attention(graph, Q, K, V)
    grads = torch.autograd.grad(out, (Q, K, V), _rand(*out.shape, seed=16))
    a_dst, a_src = _rand(N, heads, seed=17).requires_grad_(), _rand(N, heads, seed=18).requires_grad_()
    V2 = _rand(N, heads, d, seed=19).requires_grad_()
    out2 = at.additive_attention(graph, a_dst, a_src, V2)
    grads += torch.autograd.grad(out2, (a_dst, a_src, V2), _rand(*out2.shape, seed=20))
    assert all(g is not None and bool(torch.isfinite(g).all()) and float(g.abs().sum()) > 0 for g in grads)
