"""The backward formulas of the attention ops (the custom ops' backward building blocks run them
in autosage_cli.torch.ops; functions' module docstring derives them and says what each keeps).

They run on real tensors inside an op (the Graph's index tensors never reach a traced graph) and
return None for a gradient not asked for.
"""
from __future__ import annotations

import torch

from . import kernels
from .graph import Graph


def spmm_t(g: Graph, values, X: torch.Tensor) -> torch.Tensor:
    """Aᵀ X with per-edge `values` given in the graph's edge order (None: the graph's own weights,
    which the transpose already holds in its order)."""
    if values is not None:
        values = values.index_select(0, g.on("t_perm", values.device))
    return kernels.spmm(g.T, values, X)


def heads_spmm_t(g: Graph, values: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """Aᵀ X per head: out[j, h] = sum over edges e = (i, j) of values[e, h] X[i, h], `values`
    (nnz, H) in the graph's edge order, read through t_perm by the kernel (no gathered copy)."""
    return kernels.heads_spmm(g.T, values, X, g.on("t_perm", X.device))


def softmax_backward(g: Graph, probs, V, O, dO, need_v: bool, need_scores: bool, scale: float = 1.0):
    """(dV, scale dS) of O = sum_j P_ij V_j with P the row softmax of the scores S, given P (nnz, H):
    dV = Pᵀ dO, dS = P (dP - <dO_i, O_i>) with dP = SDDMM(dO, V); None where not needed. Every
    head in each kernel (kernels.heads_*): no loop over heads."""
    d_V = heads_spmm_t(g, probs, dO) if need_v else None
    if not need_scores:
        return d_V, None
    d_scores = kernels.heads_sddmm(g, dO, V)                      # dP (nnz, H), float32 for 2-byte types
    row_dot = None if dO.dtype in kernels.TWO_BYTE else (dO * O).sum(-1)   # (n_rows, H) = sum_e P_e dP_e
    # 2-byte types: row_dot = None, so softmax_grad sums P_e dP_e over each row from the rounded dP
    # itself, so that dS sums to zero over each row as the exact gradient does (<dO_i, O_i> would
    # leave the rounding of dP in every row sum: the additive score's a_dst gradient, a row sum of
    # dS, lost a digit to it in bfloat16)
    return d_V, kernels.softmax_grad(g, probs, d_scores, row_dot, scale)


def attention_backward(g: Graph, saved: tuple, dO, scale: float, needs: tuple):
    """(dQ, dK, dV), None where not needed; probabilities recomputed (see the module docstring)."""
    Q, K, V, O = saved
    # scores in float32, not rounded to the type: the fused forward never rounds them, so the
    # recomputed P is the forward's
    probs = kernels.edge_softmax(g, kernels.heads_sddmm(g, Q, K, scale, rounded=False))
    d_V, d_scores = softmax_backward(g, probs, V, O, dO, needs[2], needs[0] or needs[1], scale)
    del probs
    if d_scores is None:
        return None, None, d_V
    d_Q = kernels.heads_spmm(g, d_scores, K) if needs[0] else None
    d_K = heads_spmm_t(g, d_scores, Q) if needs[1] else None
    return d_Q, d_K, d_V


def additive_backward(g: Graph, saved: tuple, dO, slope: float, needs: tuple):
    """(d a_dst, d a_src, dV), None where not needed: the score's gradients and the probabilities
    in one pass (kernels.additive_score_grads, P rebuilt from the forward's row statistics), then
    dV = Pᵀ dO."""
    a_dst, a_src, V, O, stats = saved
    probs, d_dst, d_src = kernels.additive_score_grads(g, a_dst, a_src, stats, V, O, dO, slope,
                                                       needs[0] or needs[1])
    d_V = heads_spmm_t(g, probs, dO) if needs[2] else None
    return (None if d_dst is None or not needs[0] else d_dst.to(a_dst.dtype),
            None if d_src is None or not needs[1] else d_src.to(a_src.dtype), d_V)
