"""The attention backward's multi-head products (cuda/util_heads.cu; autosage_cli/torch/backward.py
calls them through torch/cuda_heads.py): every head in one launch. Their groups are util.GROUPS'
`heads/{codec}/{index}` and `heads/{index}`, built on first use like every helper group.

  heads_sddmm(rows, cols, X, Y, scale, out, rounded)   out[e, h] = scale <X[rows e, h], Y[cols e, h]>
  heads_spmm(indptr, cols, P, X, out, perm)            out[i, h] = sum_e P[p(e), h] X[cols e, h]
  heads_softmax_grad(indptr, P, dP, row_dot, scale)    dP = scale P (dP - r[row]) in place
  heads_additive_probs(rows, cols, a_dst, a_src, row_max, row_sum, slope, P, negative)
                                                       the GAT score's P and its negative mask

Arrays are C-contiguous CuPy arrays; per-edge arrays are (nnz, H) in the graph's edge order, node
arrays (n, H) or (n, H, d); the index arrays of one call share one type (int32 or int64).
"""
from __future__ import annotations

import numpy as np

from .util import _launch, codec, index_type


def lanes_per(width: int) -> int:
    """How many consecutive lanes share one dot of `width` elements or one row of `width` outputs:
    the power of two at or above it, at most a warp (so a warp reads 32 consecutive elements)."""
    return min(32, 1 << max(0, int(width) - 1).bit_length())


def heads_sddmm(rows, cols, X, Y, scale: float, out, rounded: bool = True):
    """out (float32) = scale x the dots of X (n_rows, H, d) and Y (n_cols, H, d), one type, summed
    in float32 and, when `rounded`, rounded to X's type before the scale."""
    nnz, (heads, d) = int(cols.size), X.shape[1:]
    group = lanes_per(d)
    warps = -(-nnz * heads // (32 // group))
    _launch(f"autosage_heads_sddmm<{codec(X)}, {index_type(cols)}>", warps * 32,
            (rows, cols, X, Y, np.int64(nnz), np.int32(heads), np.int32(d), np.int32(group),
             np.float32(scale), np.int32(rounded), out))
    return out


def heads_spmm(indptr, cols, P, X, out, perm=None):
    """out (n_rows, H, d) = the product with a float32 P (nnz, H), read at perm[e] when given (the
    transpose's edge e is the graph's edge perm[e]), each value rounded to X's type; X and out of
    one type."""
    n_rows, (heads, d) = int(indptr.size) - 1, X.shape[1:]
    group = lanes_per(heads * d)
    _launch(f"autosage_heads_spmm<{codec(X)}, {index_type(cols)}>", n_rows * group,
            (indptr, cols, P, np.uint64(0) if perm is None else perm, X, np.int64(n_rows), np.int32(heads),
             np.int32(d), np.int32(group), out))
    return out


def heads_softmax_grad(indptr, P, dP, row_dot=None, scale: float = 1.0):
    """dP (float32, in place) = scale x P (dP - r[row]): r = row_dot (n_rows, H), or when None each
    row's sum of P dP per head."""
    n_rows, heads = int(indptr.size) - 1, P.shape[1]
    _launch(f"autosage_heads_softmax_grad<{index_type(indptr)}>", n_rows * 32,
            (indptr, P, dP, np.uint64(0) if row_dot is None else row_dot, np.int64(n_rows), np.int32(heads),
             np.float32(scale)))
    return dP


def heads_additive_probs(rows, cols, a_dst, a_src, row_max, row_sum, slope: float, P, negative):
    """P = e^(LeakyReLU(a_dst[i] + a_src[j]) - row_max[i]) / row_sum[i] and negative = (a_dst[i] +
    a_src[j] <= 0) per (edge, head); all float32 but the mask (uint8, 0 or 1)."""
    nnz, heads = int(cols.size), a_dst.shape[1]
    _launch(f"autosage_heads_additive_probs<{index_type(cols)}>", nnz * heads,
            (rows, cols, a_dst, a_src, row_max, row_sum, np.float32(slope), np.int64(nnz), np.int32(heads),
             P, negative))
    return P, negative
