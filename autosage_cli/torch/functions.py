"""Differentiable ops on torch tensors, with autograd: `spmm`, `sddmm`, `attention`,
`additive_attention`.

Backward passes are the same kernels on the transposed graph (built once per Graph, tuned as its
own input, since its structure differs):
  spmm       C = A(v) B:         dB = Aᵀ(v) dC;  dv = SDDMM(dC, B) (only when v requires grad)
  sddmm      s_e = <X_i, Y_j>:   dX = A(ds) Y;   dY = Aᵀ(ds) X   (SpMM with the edge gradients as values)
  attention  O = softmax(S) V, S = scale <Q_i, K_j> per head, row softmax over each row's edges:
             the probabilities P are *recomputed* in backward (one SDDMM and one row softmax per
             head), then dV = Pᵀ dO, dP = SDDMM(dO, V), dS = P (dP - <dO_i, O_i>),
             dQ = scale A(dS) K, dK = scale Aᵀ(dS) Q.
  Memory kept from forward to backward: Q, K, V and O (4 · n · H · d floats) — the fused forward
  never materialises P. Saving P instead would keep nnz · H floats alive for the whole step (3.7 GB
  on reddit-like with 8 heads) to save one SDDMM and a softmax. Flash attention keeps only the row
  max and sum (2 · n · H floats) and rebuilds P from them; our fused kernel does not write those
  statistics out, so backward recomputes them with the softmax. Backward itself needs two
  nnz · H buffers (P, then dP reused for dS) while it runs.

  additive_attention (GAT)  O = softmax(S) V with S = LeakyReLU(x), x_ij = a_dst[i] + a_src[j] per
             head: the fused forward also writes each row's softmax statistics (the row max M and
             the sum L of e^(s - M), flash attention's choice), and backward rebuilds every
             probability as P = e^(s - M_i) / L_i from the saved per-node terms (two gathers, the
             LeakyReLU, one elementwise pass: no SDDMM and no row reduction), then dV and dS as for
             attention, and dx = dS (1 where x > 0, else the slope), d a_dst = row sums of dx
             (index_add over rows), d a_src = column sums. Kept from forward to backward: a_dst,
             a_src, V, O and the statistics ((4 + 2d) · n · H floats). Saving P instead would keep
             nnz · H floats (3.7 GB on reddit-like with 8 heads, about 25x all of the above at d = 8)
             to spare that elementwise pass. Backward itself holds about three nnz · H float
             buffers while it runs (x turned into P in place, dP turned into dS and then dx in
             place, the gathers' temporaries) plus an nnz · H mask.

Every op works under torch.no_grad() and torch.inference_mode(), and is hidden from torch.compile
(torch.compiler.disable): a compiled model breaks its graph cleanly around each call.

Value types: float32, float16 and bfloat16, every operand of one op in one type (the additive
score's a_dst and a_src may also be float32 next to a 2-byte V, as autocast leaves them). Outputs
and gradients are in the inputs' type; the kernels sum in float32, and backward keeps its per-edge
softmax arithmetic (scores, P, dP, dS) in float32, rounding P and dS to the type only as the SpMM's
edge values, as the forward kernels do. Under torch.autocast the layers' linear maps produce the
half type and the ops run in it; the ops themselves never cast their operands.

Edge order: `edge_weight` inputs and `sddmm` outputs follow the order in which the graph's edges
were given (edge_index columns, a CSR's stored order); Graph.to_canonical / to_user map them.
"""
from __future__ import annotations

import math

import torch
from torch.autograd.function import once_differentiable

from ..errors import AutosageError
from . import kernels
from .graph import Graph
from .kernels import widened


def _heads(T: torch.Tensor, h: int) -> torch.Tensor:
    return T[:, h].contiguous()


def _spmm_t(g: Graph, values, X: torch.Tensor) -> torch.Tensor:
    """Aᵀ X with per-edge `values` given in the graph's edge order (None: the graph's own weights,
    which the transpose already holds in its order)."""
    if values is not None:
        values = values.index_select(0, g.on("t_perm", values.device))
    return kernels.spmm(g.T, values, X)


class SpMMFunction(torch.autograd.Function):
    """C = A(values) @ B in canonical edge order; values None = the graph's own (fixed) weights."""

    @staticmethod
    def forward(ctx, graph: Graph, values, B):
        ctx.graph = graph
        ctx.save_for_backward(values, B if ctx.needs_input_grad[1] else None)
        return kernels.spmm(graph, values, B)

    @staticmethod
    @once_differentiable
    def backward(ctx, dC):
        values, B = ctx.saved_tensors
        g, dC = ctx.graph, dC.contiguous()
        d_values = d_B = None
        if ctx.needs_input_grad[2]:
            d_B = _spmm_t(g, values, dC)
        if ctx.needs_input_grad[1]:
            d_values = kernels.sddmm(g, dC, B.contiguous()).to(values.dtype)
        return None, d_values, d_B


class SDDMMFunction(torch.autograd.Function):
    """s[e] = <X[i], Y[j]> for every edge e = (i, j), canonical order."""

    @staticmethod
    def forward(ctx, graph: Graph, X, Y):
        ctx.graph = graph
        ctx.save_for_backward(X if ctx.needs_input_grad[2] else None,
                              Y if ctx.needs_input_grad[1] else None)
        return kernels.sddmm(graph, X, Y)

    @staticmethod
    @once_differentiable
    def backward(ctx, d_s):
        X, Y = ctx.saved_tensors
        g, d_s = ctx.graph, d_s.contiguous()
        d_X = kernels.spmm(g, d_s, Y.contiguous()) if ctx.needs_input_grad[1] else None
        d_Y = _spmm_t(g, d_s, X.contiguous()) if ctx.needs_input_grad[2] else None
        return None, d_X, d_Y


def _softmax_backward(g: Graph, probs, V, O, dO, need_v: bool, need_scores: bool):
    """(dV, dS) of O = sum_j P_ij V_j with P the row softmax of the scores S, given P (nnz, H):
    dV = Pᵀ dO, dS = P (dP - <dO_i, O_i>) with dP = SDDMM(dO, V); None where not needed."""
    heads, row = V.shape[1], g.on("row", V.device)
    d_V = None
    if need_v:
        d_V = torch.stack([_spmm_t(g, probs[:, h], _heads(dO, h)) for h in range(heads)], 1)
    if not need_scores:
        return d_V, None
    d_scores = torch.stack([kernels.sddmm(g, _heads(dO, h), _heads(V, h)) for h in range(heads)], 1)
    if d_scores.dtype in kernels.TWO_BYTE:
        # sum_e P_e dP_e from the rounded dP itself, so that dS sums to zero over each row as the
        # exact gradient does (<dO_i, O_i> would leave the rounding of dP in every row sum: the
        # additive score's a_dst gradient, a row sum of dS, lost a digit to it in bfloat16)
        d_scores = widened(d_scores)
        row_dot = probs.new_zeros((g.n_rows, heads)).index_add_(0, row, probs * d_scores)
    else:
        row_dot = (dO * O).sum(-1)                                # (n_rows, H) = sum_e P_e dP_e
    return d_V, d_scores.sub_(row_dot.index_select(0, row)).mul_(probs)


def _attention_backward(g: Graph, saved: tuple, dO, scale: float, needs: tuple):
    """(dQ, dK, dV), None where not needed; probabilities recomputed (see the module docstring)."""
    Q, K, V, O = saved
    heads = Q.shape[1]
    scores = widened(torch.stack([kernels.sddmm(g, _heads(Q, h), _heads(K, h)) for h in range(heads)], 1))
    probs = kernels.edge_softmax(g, scores.mul_(scale))
    del scores
    d_V, d_scores = _softmax_backward(g, probs, V, O, dO, needs[2], needs[0] or needs[1])
    del probs
    if d_scores is None:
        return None, None, d_V
    d_scores.mul_(scale)
    d_Q = d_K = None
    if needs[0]:
        d_Q = torch.stack([kernels.spmm(g, d_scores[:, h].contiguous(), _heads(K, h))
                           for h in range(heads)], 1)
    if needs[1]:
        d_K = torch.stack([_spmm_t(g, d_scores[:, h], _heads(Q, h)) for h in range(heads)], 1)
    return d_Q, d_K, d_V


def _fused_attention_function(name: str, doc: str, run, grads) -> type:
    """An autograd Function O = run(graph, A, B, V, param) with a fused forward (`run` may return
    (O, *kept): tensors backward needs besides the inputs), keeping A, B, V, O and those for
    backward = grads(graph, (A, B, V, O, *kept), dO, param, needs) -> (dA, dB, dV)."""

    def forward(ctx, graph: Graph, A, B, V, param: float):
        result = run(graph, A, B, V, param)
        O, kept = (result, ()) if isinstance(result, torch.Tensor) else (result[0], result[1:])
        ctx.graph, ctx.param = graph, param
        ctx.save_for_backward(A, B, V, O, *kept)
        return O

    @once_differentiable
    def backward(ctx, dO):
        return (None, *grads(ctx.graph, ctx.saved_tensors, dO.contiguous(), ctx.param,
                             ctx.needs_input_grad[1:4]), None)

    return type(name, (torch.autograd.Function,), {"__doc__": doc, "forward": staticmethod(forward),
                                                   "backward": staticmethod(backward)})


AttentionFunction = _fused_attention_function(
    "AttentionFunction", "O = per-head row-softmax attention over the graph's edges (fused forward); "
    "inputs (Q, K, V, scale).", kernels.attention, _attention_backward)


def _additive_backward(g: Graph, saved: tuple, dO, slope: float, needs: tuple):
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
    d_V, d_x = _softmax_backward(g, probs, V, O, dO, needs[2], needs[0] or needs[1])
    del probs
    if d_x is None:
        return None, None, d_V
    d_x.addcmul_(d_x, negative, value=slope - 1.0)                  # dS -> dx, in place
    d_dst = d_x.new_zeros(a_dst.shape).index_add_(0, g.on("row", dev), d_x) if needs[0] else None
    d_src = d_x.new_zeros(a_src.shape).index_add_(0, g.on("col", dev), d_x) if needs[1] else None
    return (None if d_dst is None else d_dst.to(a_dst.dtype),
            None if d_src is None else d_src.to(a_src.dtype), d_V)


AdditiveAttentionFunction = _fused_attention_function(
    "AdditiveAttentionFunction", "O = per-head row-softmax attention with the additive (GAT) score "
    "(fused forward); inputs (a_dst, a_src, V, negative_slope).", kernels.additive_attention,
    _additive_backward)


# ------------------------------------------------------------------------------------ checks
def _check(name: str, t, dims: int, rows: int, like: torch.Tensor | None = None,
           also: torch.dtype | None = None) -> None:
    """Type, shape and (with `like`) the device and dtype of `like`, or the dtype `also`."""
    if not isinstance(t, torch.Tensor):
        raise AutosageError(f"{name}: expected a torch tensor, got {type(t).__name__}")
    if t.dim() != dims or t.shape[0] != rows:
        raise AutosageError(f"{name}: expected {dims} dimensions with {rows} rows, got shape {tuple(t.shape)}")
    if any(s < 1 for s in t.shape[1:]):
        raise AutosageError(f"{name}: feature dimensions must be >= 1, got shape {tuple(t.shape)}")
    if not t.dtype.is_floating_point:
        raise AutosageError(f"{name}: expected a floating-point tensor, got {t.dtype}")
    if like is not None and (t.device != like.device or t.dtype not in (like.dtype, also)):
        wanted = like.dtype if also in (None, like.dtype) else f"{like.dtype} or {also}"
        raise AutosageError(f"{name}: expected {wanted} on {like.device}, got {t.dtype} on {t.device}")


def _edge_values(g: Graph, edge_weight, like: torch.Tensor):
    """Canonical values from user-order edge weights (None stays None: the graph's weights)."""
    if edge_weight is None:
        return None
    _check("edge_weight", edge_weight, 1, g.num_user_edges)
    return g.to_canonical(edge_weight.to(device=like.device, dtype=like.dtype))


# ------------------------------------------------------------------------------------ ops
@torch.compiler.disable
def spmm(graph, B: torch.Tensor, edge_weight: torch.Tensor | None = None) -> torch.Tensor:
    """out[i] = sum over edges (i, j) of w_e B[j]: `graph @ B` with the graph's weights, or with
    `edge_weight` (one per edge, in the graph's input order; duplicates summed) instead."""
    g = Graph.coerce(graph)
    _check("B", B, 2, g.n_cols)
    return SpMMFunction.apply(g, _edge_values(g, edge_weight, B), B)


@torch.compiler.disable
def sddmm(graph, X: torch.Tensor, Y: torch.Tensor, edge_weight: torch.Tensor | None = None):
    """out[e] = w_e <X[i], Y[j]> for every edge e = (i, j), in the graph's input order; w is
    `edge_weight`, else the graph's weights (all ones for a pattern)."""
    g = Graph.coerce(graph)
    _check("X", X, 2, g.n_rows)
    _check("Y", Y, 2, g.n_cols, like=X)
    if Y.shape[1] != X.shape[1]:
        raise AutosageError(f"Y: expected width {X.shape[1]} (X's), got {Y.shape[1]}")
    dots = g.to_user(SDDMMFunction.apply(g, X, Y))
    if edge_weight is not None:
        _check("edge_weight", edge_weight, 1, g.num_user_edges)
        return dots * edge_weight.to(device=X.device, dtype=X.dtype)
    weight = g.on("user_weight", X.device)
    if weight is None and g.weight is not None:
        weight = g.to_user(g.on("weight", X.device))
    return dots if weight is None else dots * weight.to(X.dtype)


@torch.compiler.disable
def attention(graph, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, scale: float | None = None):
    """O[i, h] = sum over edges (i, j) of softmax_j(scale <Q[i,h], K[j,h]>) V[j, h], shapes
    Q (n_rows, H, d), K and V (n_cols, H, d); rows without edges give zeros; scale defaults to
    1/sqrt(d). The graph's weights are not used; a duplicate edge counts once per listing in the
    softmax, as in PyG's layers."""
    g = Graph.coerce(graph)
    _check("Q", Q, 3, g.n_rows)
    _check("K", K, 3, g.n_cols, like=Q)
    _check("V", V, 3, g.n_cols, like=Q)
    if K.shape[1:] != Q.shape[1:] or V.shape[1:] != Q.shape[1:]:
        raise AutosageError(f"Q, K, V must share (heads, d); got {tuple(Q.shape[1:])}, "
                            f"{tuple(K.shape[1:])}, {tuple(V.shape[1:])}")
    g = g.with_duplicates()
    value = 1.0 / math.sqrt(Q.shape[2]) if scale is None else float(scale)
    if not math.isfinite(value):
        raise AutosageError(f"scale must be finite, got {scale!r}")
    return AttentionFunction.apply(g, Q, K, V, value)


@torch.compiler.disable
def additive_attention(graph, a_dst: torch.Tensor, a_src: torch.Tensor, V: torch.Tensor,
                       negative_slope: float = 0.2):
    """GAT attention: O[i, h] = sum over edges (i, j) of softmax_j(LeakyReLU(a_dst[i,h] +
    a_src[j,h])) V[j, h], shapes a_dst (n_rows, H), a_src (n_cols, H), V (n_cols, H, d); rows without
    edges give zeros. In PyG's terms (edge_index = [src, dst]) a_dst is the target's term and a_src
    the source's. The graph's weights are not used; a duplicate edge counts once per listing."""
    g = Graph.coerce(graph)
    _check("V", V, 3, g.n_cols)
    wide = torch.float32 if V.dtype in kernels.TWO_BYTE else None   # autocast's per-node terms
    _check("a_dst", a_dst, 2, g.n_rows, like=V, also=wide)
    _check("a_src", a_src, 2, g.n_cols, like=V, also=wide)
    if a_dst.shape[1] != V.shape[1] or a_src.shape[1] != V.shape[1]:
        raise AutosageError(f"a_dst and a_src need one score per head ({V.shape[1]}), got shapes "
                            f"{tuple(a_dst.shape)}, {tuple(a_src.shape)}")
    g = g.with_duplicates()
    slope = float(negative_slope)
    if not math.isfinite(slope):
        raise AutosageError(f"negative_slope must be finite, got {negative_slope!r}")
    return AdditiveAttentionFunction.apply(g, a_dst, a_src, V, slope)
