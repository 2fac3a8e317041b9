"""The attention backward's multi-head products (cuda/util_heads.cu; autosage_cli/torch/backward.py
calls them through torch/cuda_heads.py): every head in one launch. Their groups are util.GROUPS'
`heads/{codec}/{index}` and `heads/{index}`, built on first use like every helper group.

  heads_sddmm        out[e, h] = scale <X[rows e, h], Y[cols e, h]>
  heads_spmm         out[i, h] = sum_e P[p(e), h] X[cols e, h]
  heads_softmax_grad dP = scale P (dP - r[row]) in place
  heads_additive_backward   the GAT score's P, d a_dst and d a_src

Each takes `p`, the device addresses of its arrays by name (0: null), the sizes, the value codec
and index type ("int" or "long long") its kernel is instantiated for, and the raw CUDA stream to
launch on (the torch path's): no CuPy array and no CuPy argument conversion per call, which cost
more host time than the kernels on a small graph (kernels/launch.py). Arrays are C-contiguous;
per-edge arrays are (nnz, H) in the graph's edge order, node arrays (n, H) or (n, H, d).
"""
from __future__ import annotations

import numpy as np

from .util import _launch


def lanes_per(width: int) -> int:
    """How many consecutive lanes share one dot of `width` elements or one row of `width` outputs:
    the power of two at or above it, at most a warp (so a warp reads 32 consecutive elements)."""
    return min(32, 1 << max(0, int(width) - 1).bit_length())


def heads_sddmm(p: dict, nnz: int, heads: int, d: int, scale: float, rounded: bool, value_codec: str,
                index: str, stream: int) -> None:
    """out (float32 (nnz, H)) = scale x the dots of X (n_rows, H, d) and Y (n_cols, H, d), one
    type, summed in float32 and, when `rounded`, rounded to X's type before the scale; `p`: rows,
    cols, X, Y, out."""
    group = lanes_per(d)
    warps = -(-nnz * heads // (32 // group))
    _launch(f"autosage_heads_sddmm<{value_codec}, {index}>", warps * 32,
            (p["rows"], p["cols"], p["X"], p["Y"], np.int64(nnz), np.int32(heads), np.int32(d), np.int32(group),
             np.float32(scale), np.int32(rounded), p["out"]), stream=stream)


def heads_spmm(p: dict, n_rows: int, heads: int, d: int, value_codec: str, index: str, stream: int) -> None:
    """out (n_rows, H, d) = the product with a float32 P (nnz, H), read at perm[e] when perm is not
    0 (the transpose's edge e is the graph's edge perm[e]), each value rounded to X's type; X and
    out of one type; `p`: indptr, cols, P, perm, X, out."""
    group = lanes_per(heads * d)
    _launch(f"autosage_heads_spmm<{value_codec}, {index}>", n_rows * group,
            (p["indptr"], p["cols"], p["P"], p["perm"], p["X"], np.int64(n_rows), np.int32(heads), np.int32(d),
             np.int32(group), p["out"]), stream=stream)


def heads_softmax_grad(p: dict, n_rows: int, heads: int, scale: float, index: str, stream: int) -> None:
    """dP (float32, in place) = scale x P (dP - r[row]): r = row_dot (n_rows, H), or when its
    pointer is 0 each row's sum of P dP per head; `p`: indptr, P, dP, row_dot."""
    _launch(f"autosage_heads_softmax_grad<{index}>", n_rows * 32,
            (p["indptr"], p["P"], p["dP"], p["row_dot"], np.int64(n_rows), np.int32(heads), np.float32(scale)),
            stream=stream)


def heads_additive_backward(p: dict, n_rows: int, heads: int, d: int, slope: float,
                            row_dot_from_O: bool, value_codec: str, index: str, stream: int) -> None:
    """The GAT score's backward but dV: P (nnz, H) float32 and, when their pointers are not 0,
    d_dst (n_rows, H) and d_src (n_cols, H, zeros on entry: summed into); `p`: indptr, cols, a_dst,
    a_src, stats, V, O, dO, P, d_dst, d_src; V, O and dO of `value_codec`."""
    _launch(f"autosage_heads_additive_backward<{value_codec}, {index}>", n_rows * 32,
            (p["indptr"], p["cols"], p["a_dst"], p["a_src"], p["stats"], p["V"], p["O"], p["dO"],
             np.int64(n_rows), np.int32(heads), np.int32(d), np.float32(slope), np.int32(row_dot_from_O),
             p["P"], p["d_dst"], p["d_src"]), stream=stream)
