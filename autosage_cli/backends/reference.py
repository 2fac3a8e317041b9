"""Float64 reference results on the host (SciPy/NumPy): what every kernel is checked against.

  spmm       C = A @ B
  sddmm      out[e] = a_e * <X[i], Y[j]>                   for edge e = (i, j)
  attention  per head h: s_e = scale * <Q[i,h], K[j,h]> (+ a_e when attention_bias), p = the
             softmax of s over row i's edges (stable: the row maximum is subtracted first),
             O[i,h] = sum_e p_e V[j,h]; a row without edges gives zeros. scale defaults to
             1/sqrt(d), as `native_attention.attention_scale` does. A's values are ignored unless
             attention_bias=True (then they are an additive per-edge bias).
  additive   the GAT score: s_e = LeakyReLU(a_dst[i,h] + a_src[j,h]), then as attention (a_dst
             and a_src float32 in every type, V as stored).
Inputs may be NumPy or CuPy arrays (CuPy ones are copied to the host). Work is chunked over edges
so memory stays bounded on larger graphs. In float16/bfloat16 (`dtype`) the inputs are read as
stored (bfloat16 as its uint16 bit patterns) and A's values are rounded to the type as the plans
read them, so the float64 result is that of the rounded inputs; an attention bias stays float32,
as the kernels read it.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from ..errors import AutosageError
from ..graphs.csr import CSRGraph
from ..dtypes import from_storage, info as dtype_info, rounded

_CHUNK_ELEMENTS = 1 << 24   # float64 elements per temporary (128 MiB)


def default_attention_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)


def _host64(arr) -> np.ndarray:
    if hasattr(arr, "get") and not isinstance(arr, np.ndarray):  # CuPy
        arr = arr.get()
    return np.asarray(arr, dtype=np.float64)


def _as_csr(csr) -> sp.csr_matrix:
    if isinstance(csr, CSRGraph):
        m = csr.to_scipy()
    elif sp.issparse(csr):
        m = sp.csr_matrix(csr)
    else:
        raise AutosageError(f"reference needs a CSRGraph or SciPy sparse matrix, got {type(csr).__name__}")
    m = sp.csr_matrix((m.data.astype(np.float64), m.indices, m.indptr), shape=m.shape)
    m.sum_duplicates()
    return m


def _edge_rows(a: sp.csr_matrix) -> np.ndarray:
    return np.repeat(np.arange(a.shape[0], dtype=np.int64), np.diff(a.indptr))


def _edge_dots(x: np.ndarray, y: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """<x[rows[e]], y[cols[e]]> over the last axis for every edge, in bounded-memory chunks.
    x: (n, ..., d), y: (m, ..., d) -> (nnz, ...)."""
    per_edge = int(np.prod(x.shape[1:])) or 1
    step = max(1, _CHUNK_ELEMENTS // per_edge)
    out = np.empty((rows.shape[0],) + x.shape[1:-1], dtype=np.float64)
    for s in range(0, rows.shape[0], step):
        e = min(s + step, rows.shape[0])
        out[s:e] = np.einsum("e...d,e...d->e...", x[rows[s:e]], y[cols[s:e]])
    return out


def _check_shapes(name: str, arr: np.ndarray, shape: tuple) -> None:
    if arr.shape != shape:
        raise AutosageError(f"reference: {name} has shape {arr.shape}, expected {shape}")


def segment_softmax(scores: np.ndarray, indptr: np.ndarray) -> np.ndarray:
    """Row-wise softmax of per-edge scores (nnz, ...) for CSR row pointers: the row maximum is
    subtracted before exp, so large scores do not overflow. Rows without edges have no entries."""
    nnz = scores.shape[0]
    if nnz == 0:
        return scores.copy()
    deg = np.diff(indptr)
    starts = indptr[:-1][deg > 0]
    rows = np.repeat(np.arange(deg.shape[0]), deg)
    row_max = np.maximum.reduceat(scores, starts, axis=0)        # one entry per non-empty row
    slot = np.cumsum(deg > 0) - 1                                 # row -> its non-empty slot
    shifted = np.exp(scores - row_max[slot[rows]])
    row_sum = np.add.reduceat(shifted, starts, axis=0)
    return shifted / row_sum[slot[rows]]


def _operands(csr, inputs, dtype: str):
    """(A as float64 CSR, the inputs in float64, A's values as an attention bias). In a 2-byte
    type the inputs are read as stored and A's values rounded to the type, as the plans read them;
    the bias stays float32, as the kernels read it."""
    a = _as_csr(csr)
    if dtype_info(dtype).name == "float32":
        return a, [_host64(x) for x in inputs], a.data
    arrays = [from_storage(x.get() if hasattr(x, "get") and not isinstance(x, np.ndarray) else x, dtype)
              for x in inputs]
    bias = a.data.astype(np.float32).astype(np.float64)
    a.data = rounded(a.data, dtype)
    return a, arrays, bias


def spmm_reference(csr, inputs, scale: float | None = None, dtype: str = "float32") -> np.ndarray:
    """A @ B in float64 (`scale` does not apply)."""
    a, (b,), _ = _operands(csr, inputs, dtype)
    if b.ndim != 2:
        raise AutosageError(f"reference: B must be 2-D, got shape {b.shape}")
    _check_shapes("B", b, (a.shape[1], b.shape[1]))
    return np.asarray(a @ b)


def sddmm_reference(csr, inputs, scale: float | None = None, dtype: str = "float32") -> np.ndarray:
    """a_e * <X[i], Y[j]> per edge, in float64 (`scale` does not apply)."""
    a, (x, y), _ = _operands(csr, inputs, dtype)
    if x.ndim != 2:
        raise AutosageError(f"reference: X must be 2-D, got shape {x.shape}")
    _check_shapes("X", x, (a.shape[0], x.shape[1]))
    _check_shapes("Y", y, (a.shape[1], x.shape[1]))
    return a.data * _edge_dots(x, y, _edge_rows(a), a.indices.astype(np.int64))


def attention_reference(csr, inputs, scale: float | None = None,
                        attention_bias: bool = False, dtype: str = "float32") -> np.ndarray:
    """Per head, the row softmax of scale * <Q[i], K[j]> (plus a_e with `attention_bias`)
    times V, in float64; rows without edges give zeros."""
    a, (q, k, v), bias = _operands(csr, inputs, dtype)
    n, m = a.shape
    if q.ndim != 3:
        raise AutosageError(f"reference: Q must be n x H x d, got shape {q.shape}")
    heads, d = q.shape[1:]
    _check_shapes("Q", q, (n, heads, d))
    _check_shapes("K", k, (m, heads, d))
    _check_shapes("V", v, (m, heads, d))
    rows, cols = _edge_rows(a), a.indices.astype(np.int64)
    s = (scale if scale is not None else default_attention_scale(d)) * _edge_dots(q, k, rows, cols)
    if attention_bias:
        s = s + bias[:, None]
    p = segment_softmax(s, a.indptr)                           # nnz x H
    out = np.zeros((n, heads, d), dtype=np.float64)
    for h in range(heads):
        ph = sp.csr_matrix((p[:, h], a.indices, a.indptr), shape=a.shape)
        out[:, h, :] = ph @ v[:, h, :]
    return out


def additive_reference(csr, inputs, negative_slope: float = 0.2, dtype: str = "float32") -> np.ndarray:
    """Per head, the row softmax of s_e = LeakyReLU(a_dst[i,h] + a_src[j,h]) (slope
    `negative_slope`) times V, in float64, over every listed edge e = (i, j) (duplicates each
    count, as the plans walk them); rows without edges give zeros. a_dst and a_src are float32 in
    every type; V is read as stored in `dtype`. A's values are ignored."""
    a_dst, a_src, v = inputs
    indptr = np.asarray(csr.indptr, dtype=np.int64)
    indices = np.asarray(csr.indices, dtype=np.int64)
    n, m = int(csr.shape[0]), int(csr.shape[1])
    a_dst, a_src = _host64(a_dst), _host64(a_src)
    if dtype_info(dtype).name == "float32":
        v = _host64(v)
    else:
        v = from_storage(v.get() if hasattr(v, "get") and not isinstance(v, np.ndarray) else v, dtype)
    if v.ndim != 3 or a_dst.ndim != 2:
        raise AutosageError(f"reference: V must be n x H x d and a_dst n x H, got {v.shape}, {a_dst.shape}")
    heads, d = v.shape[1:]
    _check_shapes("a_dst", a_dst, (n, heads))
    _check_shapes("a_src", a_src, (m, heads))
    _check_shapes("V", v, (m, heads, d))
    rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(indptr))
    s = a_dst[rows] + a_src[indices]                              # nnz x H
    s = np.where(s > 0, s, float(negative_slope) * s)
    p = segment_softmax(s, indptr)
    out = np.zeros((n, heads, d), dtype=np.float64)
    for h in range(heads):
        ph = sp.csr_matrix((p[:, h], indices, indptr), shape=(n, m))   # duplicates are summed: p adds
        out[:, h, :] = ph @ v[:, h, :]
    return out
