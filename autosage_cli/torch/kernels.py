"""The three kernels every forward and backward pass is made of, dispatched on the tensors' device.

  spmm(graph, values, B)      out[i] = sum over edges e = (i, j) of v_e B[j]      (n_rows, K)
                              v = `values` (canonical order) or, for None, the graph's own weights
  sddmm(graph, X, Y)          out[e] = <X[i], Y[j]> for every edge, canonical order   (nnz,)
  attention(graph, Q, K, V, scale)   fused SDDMM -> row softmax -> SpMM, H heads   (n_rows, H, d)
  additive_attention(graph, a_dst, a_src, V, slope)   the same with the GAT score
                              LeakyReLU(a_dst[i,h] + a_src[j,h]) (fused kernel, no per-edge dot);
                              returns (O, stats): stats (n_rows, H, 2) the row max and sum that
                              backward rebuilds the softmax from
  edge_softmax(graph, S)      softmax of S (nnz, H) over each row's edges
  heads_sddmm(graph, X, Y, scale, rounded)   out[e, h] = scale <X[i, h], Y[j, h]> for X, Y (n, H, d):
                              every head in one pass; (nnz, H) in widened(X)'s type, each dot
                              rounded to X's type first when `rounded`
  heads_spmm(graph, P, X, perm)      out[i, h] = sum over edges e = (i, j) of P[p(e), h] X[j, h],
                              p(e) = perm[e] or e; P (nnz, H) rounded to X's type; (n_rows, H, d)
  softmax_grad(graph, P, dP, row_dot, scale)   dS = scale P (dP - r[i]) in place into dP, with
                              r = row_dot (n_rows, H) or, for None, each row's sum of P dP
  additive_score_grads(graph, a_dst, a_src, stats, V, O, dO, slope, need_scores)   (P, d a_dst,
                              d a_src): the GAT score's backward but dV, P rebuilt from the
                              forward's row statistics

The last four are the attention backward's building blocks (backward.py): on
CUDA, kernels of cuda/util_heads.cu (autosage_cli.torch.cuda_heads), not tuned plans.

CUDA tensors run autosage's tuned plans (autosage_cli.torch.cuda: float32, float16 and bfloat16,
zero-copy). Any other device runs the reference below: plain torch (index_select / index_add),
exact in float64, so the autograd plumbing, the graph handle and the layers are testable without a
GPU and the CUDA path has a float64 reference to be checked against. As the kernels do, the
reference computes 2-byte inputs in float32 and rounds only its outputs to their type.
"""
from __future__ import annotations

import functools

import torch

from ..kernels.attention_space import MAX_FEATURES
from .graph import Graph


TWO_BYTE = (torch.float16, torch.bfloat16)


def _is_cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def widened(t: torch.Tensor) -> torch.Tensor:
    """`t` in float32 when it is of a 2-byte type (a copy), else `t` itself: where per-edge
    softmax arithmetic and reference sums happen, as the kernels keep theirs in float32."""
    return t.float() if t.dtype in TWO_BYTE else t


def spmm(graph: Graph, values: torch.Tensor | None, B: torch.Tensor) -> torch.Tensor:
    if _is_cuda(B):
        from . import cuda

        return cuda.spmm(graph, values, B)
    return reference_product(graph, values, B).to(B.dtype)


def reference_product(graph: Graph, values: torch.Tensor | None, B: torch.Tensor) -> torch.Tensor:
    """A(values) B off CUDA, summed in float32 at least (float64 stays float64), not yet rounded
    to B's type (an epilogue applies first: torch/epilogue.py)."""
    dev, wide = B.device, widened(B)
    row, col = graph.on("row", dev), graph.on("col", dev)
    vals = values if values is not None else graph.on("weight", dev)
    msg = wide.index_select(0, col)
    if vals is not None:
        msg = msg * vals.to(B.dtype).to(wide.dtype).unsqueeze(-1)   # values as the kernels read them
    return wide.new_zeros((graph.n_rows, B.shape[1])).index_add_(0, row, msg)


def sddmm(graph: Graph, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    if _is_cuda(X):
        from . import cuda

        return cuda.sddmm(graph, X, Y)
    dev = X.device
    row, col = graph.on("row", dev), graph.on("col", dev)
    return (widened(X).index_select(0, row) * widened(Y).index_select(0, col)).sum(-1).to(X.dtype)


def heads_sddmm(graph: Graph, X: torch.Tensor, Y: torch.Tensor, scale: float = 1.0,
                rounded: bool = True) -> torch.Tensor:
    if _is_cuda(X):
        from . import cuda_heads

        return cuda_heads.heads_sddmm(graph, X, Y, scale, rounded)
    dev = X.device
    row, col = graph.on("row", dev), graph.on("col", dev)
    dots = (widened(X).index_select(0, row) * widened(Y).index_select(0, col)).sum(-1)
    out = widened(dots.to(X.dtype)) if rounded else dots
    return out if scale == 1.0 else out.mul_(scale)


def heads_spmm(graph: Graph, P: torch.Tensor, X: torch.Tensor, perm: torch.Tensor | None = None) -> torch.Tensor:
    if _is_cuda(X):
        from . import cuda_heads

        return cuda_heads.heads_spmm(graph, P, X, perm)
    wide = widened(X)
    values = P if perm is None else P.index_select(0, perm.to(P.device))
    # values rounded to X's type, as the tuned SpMM reads per-call edge values
    return _aggregate(graph, values.to(X.dtype).to(wide.dtype), wide).to(X.dtype)


def softmax_grad(graph: Graph, P: torch.Tensor, dP: torch.Tensor, row_dot: torch.Tensor | None = None,
                 scale: float = 1.0) -> torch.Tensor:
    if _is_cuda(dP):
        from . import cuda_heads

        return cuda_heads.softmax_grad(graph, P, dP, row_dot, scale)
    row = graph.on("row", dP.device)
    if row_dot is None:
        row_dot = dP.new_zeros((graph.n_rows, dP.shape[1])).index_add_(0, row, P * dP)
    dP.sub_(row_dot.index_select(0, row)).mul_(P)
    return dP if scale == 1.0 else dP.mul_(scale)


def additive_probs(graph: Graph, a_dst, a_src, row_max, row_sum, slope: float):
    """(P, negative) of the GAT score off CUDA (the reference additive_score_grads composes)."""
    pre = additive_scores(graph, a_dst, a_src)
    negative = pre <= 0
    return softmax_from_stats(graph, torch.nn.functional.leaky_relu_(pre, slope), row_max, row_sum), negative


def additive_score_grads(graph: Graph, a_dst, a_src, stats, V, O, dO, slope: float, need_scores: bool):
    """(P, d a_dst, d a_src) of O = softmax(LeakyReLU(a_dst[i] + a_src[j])) V: the probabilities
    (nnz, H) rebuilt from the forward's row statistics `stats` (n_rows, H, 2: max, sum), and when
    `need_scores` the gradients of the two per-node terms (None both otherwise), in the widened
    type (float32 for 2-byte inputs). With dP = <dO_i, V_j>, dS = P (dP - r_i), dx = dS where
    a_dst[i] + a_src[j] > 0, else slope dS: d a_dst = row sums of dx, d a_src = column sums. r_i is
    <dO_i, O_i>, or for 2-byte types each row's sum of P dP from the rounded dP (so dS sums to zero
    over each row as the exact gradient does: <dO_i, O_i> would leave the rounding of dP in every
    row sum, and d a_dst, a row sum of dS, lost a digit to it in bfloat16). CUDA: one launch
    (cuda_heads); else this composition."""
    if _is_cuda(V):
        from . import cuda_heads

        return cuda_heads.additive_score_grads(graph, a_dst, a_src, stats, V, O, dO, slope, need_scores)
    probs, negative = additive_probs(graph, a_dst, a_src, stats[..., 0], stats[..., 1], slope)
    if not need_scores:
        return probs, None, None
    d_x = heads_sddmm(graph, dO, V)                                # dP (nnz, H)
    row_dot = None if dO.dtype in TWO_BYTE else (widened(dO) * widened(O)).sum(-1)
    d_x = softmax_grad(graph, probs, d_x, row_dot)
    d_x.addcmul_(d_x, negative, value=slope - 1.0)                # dS -> dx, in place
    dev = V.device
    d_dst = d_x.new_zeros(a_dst.shape).index_add_(0, graph.on("row", dev), d_x)
    d_src = d_x.new_zeros(a_src.shape).index_add_(0, graph.on("col", dev), d_x)
    return probs, d_dst, d_src


def edge_softmax(graph: Graph, scores: torch.Tensor) -> torch.Tensor:
    """Row softmax of per-edge scores (nnz, H) over each row's edges (any device)."""
    return softmax_with_stats(graph, scores)[0]


def softmax_with_stats(graph: Graph, scores: torch.Tensor):
    """(probabilities, row max, row sum of e^(s - max)): the row softmax of scores (nnz, H) and
    the statistics it is rebuilt from (n_rows, H each; -inf and 0 for a row without edges)."""
    row = graph.on("row", scores.device)
    shape = (graph.n_rows, scores.shape[1])
    index = row.unsqueeze(1).expand_as(scores)
    row_max = scores.new_full(shape, float("-inf")).scatter_reduce_(0, index, scores, "amax")
    e = (scores - row_max.index_select(0, row)).exp_()
    row_sum = scores.new_zeros(shape).index_add_(0, row, e)
    return e.div_(row_sum.index_select(0, row)), row_max, row_sum


def softmax_from_stats(graph: Graph, scores: torch.Tensor, row_max, row_sum) -> torch.Tensor:
    """The row softmax of scores (nnz, H) from its row statistics, in place: no row reduction."""
    row = graph.on("row", scores.device)
    return scores.sub_(row_max.index_select(0, row)).exp_().div_(row_sum.index_select(0, row))


def attention(graph: Graph, Q, K, V, scale: float) -> torch.Tensor:
    if _is_cuda(Q):
        from . import cuda_attention

        return cuda_attention.attention(graph, Q, K, V, scale)
    dev = Q.device
    row, col = graph.on("row", dev), graph.on("col", dev)
    scores = (widened(Q).index_select(0, row) * widened(K).index_select(0, col)).sum(-1) * scale
    return _softmax_aggregate(graph, scores, widened(V)).to(V.dtype)          # scores: (nnz, H)


def additive_scores(graph: Graph, a_dst, a_src) -> torch.Tensor:
    """(nnz, H) pre-activation scores a_dst[i] + a_src[j] of every edge (i, j), canonical order."""
    dev = a_dst.device
    return (widened(a_dst).index_select(0, graph.on("row", dev))
            + widened(a_src).index_select(0, graph.on("col", dev)))


@functools.lru_cache(maxsize=None)
def fused_additive_runs(d: int, heads: int, dtype: str) -> bool:
    """Whether a fused additive-score schedule runs d features per head in `dtype` (autosage's
    name): none for d above MAX_FEATURES, nor for d < 3, below every schedule's vector width."""
    from ..ops import candidates

    return d <= MAX_FEATURES and bool(candidates("attention-additive", d, heads, dtype))


def _fused_on_cuda(V: torch.Tensor) -> bool:
    """Whether CUDA's V runs the fused kernel: a width one runs in V's value type; a type the CUDA
    ops do not take goes there too, to be refused in one line (cuda.operand)."""
    from .cuda import VALUE_TYPES

    name = VALUE_TYPES.get(V.dtype)
    return name is None or fused_additive_runs(int(V.shape[2]), int(V.shape[1]), name)


def additive_attention(graph: Graph, a_dst, a_src, V, negative_slope: float):
    """(O, stats): O[i,h] = sum_j softmax_j(s_ij) V[j,h] with s_ij = LeakyReLU(a_dst[i,h] + a_src[j,h]),
    and the softmax statistics of every (row, head), stats (n_rows, H, 2) = (row max, row sum of
    e^(s - max)). CUDA: the fused kernel where one runs the width (fused_additive_runs); other
    widths (GATConv(..., 2, heads=8): 2 features a head) run the torch composition below on the GPU."""
    if _is_cuda(V) and _fused_on_cuda(V):
        from . import cuda_attention

        return cuda_attention.additive_attention(graph, a_dst, a_src, V, negative_slope)
    scores = torch.nn.functional.leaky_relu_(additive_scores(graph, a_dst, a_src), negative_slope)
    probs, row_max, row_sum = softmax_with_stats(graph, scores)
    return _aggregate(graph, probs, widened(V)).to(V.dtype), torch.stack([row_max, row_sum], -1)


def _softmax_aggregate(graph: Graph, scores: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    return _aggregate(graph, edge_softmax(graph, scores), V)


def _aggregate(graph: Graph, probs: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
    """sum over each row's edges of probs (nnz, H) times V[j] (n_cols, H, d)."""
    row, col = graph.on("row", V.device), graph.on("col", V.device)
    msg = probs.unsqueeze(-1) * V.index_select(0, col)
    return V.new_zeros((graph.n_rows, *V.shape[1:])).index_add_(0, row, msg)
