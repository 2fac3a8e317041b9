"""The backward formulas of the attention ops (the custom ops' backward building blocks run them
in autosage_cli.torch.ops; functions' module docstring derives them and says what each keeps).

They run on real tensors inside an op (the Graph's index tensors never reach a traced graph) and
return None for a gradient not asked for.
"""
from __future__ import annotations

import torch

from . import kernels
from .graph import Graph
from .kernels import widened


def heads_of(T: torch.Tensor, h: int) -> torch.Tensor:
    return T[:, h].contiguous()


def spmm_t(g: Graph, values, X: torch.Tensor) -> torch.Tensor:
    """Aᵀ X with per-edge `values` given in the graph's edge order (None: the graph's own weights,
    which the transpose already holds in its order)."""
    if values is not None:
        values = values.index_select(0, g.on("t_perm", values.device))
    return kernels.spmm(g.T, values, X)


def softmax_backward(g: Graph, probs, V, O, dO, need_v: bool, need_scores: bool):
    """(dV, dS) of O = sum_j P_ij V_j with P the row softmax of the scores S, given P (nnz, H):
    dV = Pᵀ dO, dS = P (dP - <dO_i, O_i>) with dP = SDDMM(dO, V); None where not needed."""
    heads, row = V.shape[1], g.on("row", V.device)
    d_V = None
    if need_v:
        d_V = torch.stack([spmm_t(g, probs[:, h], heads_of(dO, h)) for h in range(heads)], 1)
    if not need_scores:
        return d_V, None
    d_scores = torch.stack([kernels.sddmm(g, heads_of(dO, h), heads_of(V, h)) for h in range(heads)], 1)
    if d_scores.dtype in kernels.TWO_BYTE:
        # sum_e P_e dP_e from the rounded dP itself, so that dS sums to zero over each row as the
        # exact gradient does (<dO_i, O_i> would leave the rounding of dP in every row sum: the
        # additive score's a_dst gradient, a row sum of dS, lost a digit to it in bfloat16)
        d_scores = widened(d_scores)
        row_dot = probs.new_zeros((g.n_rows, heads)).index_add_(0, row, probs * d_scores)
    else:
        row_dot = (dO * O).sum(-1)                                # (n_rows, H) = sum_e P_e dP_e
    return d_V, d_scores.sub_(row_dot.index_select(0, row)).mul_(probs)


def attention_backward(g: Graph, saved: tuple, dO, scale: float, needs: tuple):
    """(dQ, dK, dV), None where not needed; probabilities recomputed (see the module docstring)."""
    Q, K, V, O = saved
    heads = Q.shape[1]
    scores = widened(torch.stack([kernels.sddmm(g, heads_of(Q, h), heads_of(K, h)) for h in range(heads)], 1))
    probs = kernels.edge_softmax(g, scores.mul_(scale))
    del scores
    d_V, d_scores = softmax_backward(g, probs, V, O, dO, needs[2], needs[0] or needs[1])
    del probs
    if d_scores is None:
        return None, None, d_V
    d_scores.mul_(scale)
    d_Q = d_K = None
    if needs[0]:
        d_Q = torch.stack([kernels.spmm(g, d_scores[:, h].contiguous(), heads_of(K, h))
                           for h in range(heads)], 1)
    if needs[1]:
        d_K = torch.stack([spmm_t(g, d_scores[:, h], heads_of(Q, h)) for h in range(heads)], 1)
    return d_Q, d_K, d_V


def additive_backward(g: Graph, saved: tuple, dO, slope: float, needs: tuple):
    """(d a_dst, d a_src, dV), None where not needed; probabilities rebuilt from a_dst, a_src and the
    forward's row statistics (see the module docstring). With x = a_dst[i] + a_src[j] and
    s = LeakyReLU(x): dx = dS (1 where x > 0, else slope); d a_dst = row sums of dx, d a_src =
    column sums."""
    a_dst, a_src, V, O, row_max, row_sum = saved
    dev = V.device
    pre = kernels.additive_scores(g, a_dst, a_src)                 # (nnz, H)
    negative = pre <= 0
    probs = kernels.softmax_from_stats(g, torch.nn.functional.leaky_relu_(pre, slope), row_max, row_sum)
    del pre
    d_V, d_x = softmax_backward(g, probs, V, O, dO, needs[2], needs[0] or needs[1])
    del probs
    if d_x is None:
        return None, None, d_V
    d_x.addcmul_(d_x, negative, value=slope - 1.0)                  # dS -> dx, in place
    d_dst = d_x.new_zeros(a_dst.shape).index_add_(0, g.on("row", dev), d_x) if needs[0] else None
    d_src = d_x.new_zeros(a_src.shape).index_add_(0, g.on("col", dev), d_x) if needs[1] else None
    return (None if d_dst is None else d_dst.to(a_dst.dtype),
            None if d_src is None else d_src.to(a_src.dtype), d_V)
