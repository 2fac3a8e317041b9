"""The float64 reference against dense NumPy on tiny graphs (every shape that hurts)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.backends.reference import segment_softmax
from autosage_cli.ops import reference
from autosage_cli.errors import AutosageError
from autosage_cli.graphs.csr import canonical_csr


def _graph(kind: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    if kind == "empty-rows":        # rows 1 and 3 empty, last row full
        dense = np.zeros((5, 6))
        dense[0, [1, 4]] = [0.5, -2.0]
        dense[2, [0, 2, 3]] = [1.5, 1.0, -1.0]
        dense[4, :] = rng.uniform(-1, 1, 6)
    elif kind == "n1":
        dense = np.array([[0.0, 2.0, 0.0, -1.0]])
    elif kind == "nnz0":
        dense = np.zeros((3, 4))
    elif kind == "half-in-one-row":
        dense = np.zeros((8, 8))
        dense[3, :] = rng.uniform(0.5, 1.5, 8)
        for i in (0, 1, 5, 7):
            dense[i, rng.integers(0, 8)] = 1.0
    else:
        raise ValueError(kind)
    return canonical_csr(sp.csr_matrix(dense)), dense


KINDS = ["empty-rows", "n1", "nnz0", "half-in-one-row"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [1, 3, 5])
def test_spmm_matches_dense(kind, k):
    g, dense = _graph(kind)
    b = np.random.default_rng(1).uniform(-1, 1, (g.n_cols, k)).astype(np.float32)
    np.testing.assert_allclose(reference("spmm", g, (b,)), dense.astype(np.float32) @ b.astype(np.float64),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("k", [1, 4])
def test_sddmm_matches_dense_in_edge_order(kind, k):
    g, dense = _graph(kind)
    rng = np.random.default_rng(2)
    x, y = rng.uniform(-1, 1, (g.n_rows, k)), rng.uniform(-1, 1, (g.n_cols, k))
    full = (x @ y.T) * dense.astype(np.float32)
    rows, cols = np.nonzero(dense)  # row-major order = canonical CSR edge order
    got = reference("sddmm", g, (x, y))
    assert got.shape == (g.nnz,)
    np.testing.assert_allclose(got, full[rows, cols], rtol=1e-12, atol=1e-12)


def _dense_attention(dense, q, k, v, scale, bias=False):
    n, heads, d = q.shape
    out = np.zeros((n, heads, d))
    for i in range(n):
        cols = np.nonzero(dense[i])[0]
        if cols.size == 0:
            continue
        for h in range(heads):
            s = scale * (k[cols, h, :] @ q[i, h, :])
            if bias:
                s = s + dense[i, cols].astype(np.float32)
            w = np.exp(s - s.max())
            out[i, h] = (w / w.sum()) @ v[cols, h, :]
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("heads,d", [(1, 4), (3, 2)])
@pytest.mark.parametrize("bias", [False, True])
def test_attention_matches_dense(kind, heads, d, bias):
    g, dense = _graph(kind)
    rng = np.random.default_rng(3)
    q = rng.uniform(-1, 1, (g.n_rows, heads, d))
    k = rng.uniform(-1, 1, (g.n_cols, heads, d))
    v = rng.uniform(-1, 1, (g.n_cols, heads, d))
    got = reference("attention", g, (q, k, v), attention_bias=bias)
    want = _dense_attention(dense, q, k, v, 1 / math.sqrt(d), bias)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    empty = np.diff(g.indptr) == 0
    assert np.all(got[empty] == 0)


def test_attention_large_scores_do_not_overflow():
    g, dense = _graph("half-in-one-row")
    rng = np.random.default_rng(4)
    q = rng.uniform(-1, 1, (g.n_rows, 2, 8)) * 300   # scores ~ 1e4: a naive exp is inf
    k = rng.uniform(-1, 1, (g.n_cols, 2, 8)) * 300
    v = rng.uniform(-1, 1, (g.n_cols, 2, 8))
    got = reference("attention", g, (q, k, v), scale=1.0)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, _dense_attention(dense, q, k, v, 1.0), rtol=1e-10, atol=1e-12)
    with np.errstate(over="ignore"):
        assert not np.isfinite(np.exp(300.0 * 300 * 8 * 0.25))


def test_attention_explicit_scale_and_float32_inputs():
    g, dense = _graph("empty-rows")
    rng = np.random.default_rng(5)
    q = rng.uniform(-1, 1, (g.n_rows, 1, 3)).astype(np.float32)
    k, v = (rng.uniform(-1, 1, (g.n_cols, 1, 3)).astype(np.float32) for _ in range(2))
    got = reference("attention", g, (q, k, v), scale=0.25)
    np.testing.assert_allclose(got, _dense_attention(dense, q.astype(np.float64), k.astype(np.float64),
                                                     v.astype(np.float64), 0.25), rtol=1e-12)


def test_segment_softmax_rows_sum_to_one_and_skip_empty_rows():
    indptr = np.array([0, 2, 2, 5, 5])
    s = np.array([[1.0], [1000.0], [-5.0], [0.0], [5.0]])
    p = segment_softmax(s, indptr)
    assert np.isfinite(p).all()
    np.testing.assert_allclose([p[0:2].sum(), p[2:5].sum()], [1.0, 1.0])
    assert p[1, 0] == pytest.approx(1.0)


def test_reference_accepts_scipy_matrix():
    m = sp.random(6, 5, density=0.4, random_state=0, format="coo")
    b = np.ones((5, 2))
    np.testing.assert_allclose(reference("spmm", m, (b,)), m.toarray() @ b)


@pytest.mark.parametrize("op,inputs,match", [
    ("spmm", (np.ones((3, 2)),), "B has shape"),
    ("sddmm", (np.ones((5, 2)), np.ones((6, 3))), "Y has shape"),
    ("attention", (np.ones((5, 1, 2)), np.ones((6, 1, 2)), np.ones((6, 2, 2))), "V has shape"),
    ("gemm", (np.ones((6, 2)),), "unknown op"),
])
def test_reference_rejects_bad_shapes(op, inputs, match):
    g, _ = _graph("empty-rows")
    with pytest.raises(AutosageError, match=match):
        reference(op, g, inputs)
