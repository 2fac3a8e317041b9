"""Differentiable ops on torch tensors, with autograd: `spmm`, `sddmm`, `attention`,
`additive_attention`.

Backward passes are the same kernels on the transposed graph (built once per Graph, tuned as its
own input, since its structure differs):
  spmm       C = A(v) B:         dB = Aᵀ(v) dC;  dv = SDDMM(dC, B) (only when v requires grad)
  spmm with an epilogue (bias, activation, scale; one fused launch, kernels/epilogues.py)
             C = act(P), P = s A(v) B + b:  dP = act'(P) dC, read off the saved C (relu: dC where
             C > 0, the same mask as P > 0); db = column sums of dP; then SpMM's gradients of
             s dP: dB = Aᵀ(v) (s dP), dv = SDDMM(s dP, B). Kept: C (only for an activation), v,
             and B only when v requires grad: P is never stored.
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

Every op is a PyTorch custom operator (autosage_cli.torch.ops: autosage::spmm, ::sddmm,
::attention, ::additive_attention and the backward building blocks, each with a shape function and
its autograd formula), taking the Graph as an int handle (autosage_cli.torch.handles). So the ops
work under torch.no_grad() and torch.inference_mode(), torch.compile traces through them with no
graph break (fullgraph=True; each Graph is a constant its compiled graph specialises on), and a
CUDA graph captures them (autosage_cli.torch.capture).

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

from ..errors import AutosageError
from ..kernels import epilogues
from . import kernels, ops, ops_epilogue
from .graph import Graph


class SpMMFunction:
    """`SpMMFunction.apply(graph, values, B)`: C = A(values) @ B in canonical edge order (values
    None = the graph's own, fixed weights), differentiable in values and B; the autosage::spmm
    custom op under the name the layers call."""

    apply = staticmethod(ops.spmm)


# ------------------------------------------------------------------------------------ checks
def check_tensor(name: str, t, dims: int, rows: int, like: torch.Tensor | None = None,
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
    check_tensor("edge_weight", edge_weight, 1, g.num_user_edges)
    return g.to_canonical(edge_weight.to(device=like.device, dtype=like.dtype))


# ------------------------------------------------------------------------------------ ops
def spmm(graph, B: torch.Tensor, edge_weight: torch.Tensor | None = None, *,
         bias: torch.Tensor | None = None, activation=None, scale: float | None = None) -> torch.Tensor:
    """out[i] = sum over edges (i, j) of w_e B[j]: `graph @ B` with the graph's weights, or with
    `edge_weight` (one per edge, in the graph's input order; duplicates summed) instead.

    With `bias` (K values, added to every row), `activation` (a name: "relu"; or a (name, alpha)
    pair for an activation with a parameter) and/or `scale` (multiplies the sum), out[i] =
    act(scale * sum + bias) in the same launch (the fused SpMM ops), differentiable in bias too."""
    g = Graph.coerce(graph)
    check_tensor("B", B, 2, g.n_cols)
    values = _edge_values(g, edge_weight, B)
    if bias is None and activation is None and scale is None:
        return ops.spmm(g, values, B)
    name, alpha = activation if isinstance(activation, (tuple, list)) else (activation, None)
    factor = 1.0 if scale is None else float(scale)
    if not math.isfinite(factor) or (alpha is not None and not math.isfinite(float(alpha))):
        raise AutosageError(f"scale and the activation's parameter must be finite, got {scale!r}, {alpha!r}")
    if name is not None and not isinstance(name, str):
        raise AutosageError(f"activation: expected a name ({', '.join(epilogues.activations())}) or None, "
                            f"got {type(name).__name__}")
    epilogue = epilogues.choose(bias is not None, name, factor)
    if bias is not None:
        check_tensor("bias", bias, 1, B.shape[1])
        if bias.device != B.device:
            raise AutosageError(f"bias: expected a tensor on {B.device}, got {bias.device}")
        bias = bias.to(B.dtype)
    if not epilogue.fused:   # a scale of 1 and nothing else: plain SpMM
        return ops.spmm(g, values, B)
    return ops_epilogue.spmm_epilogue(g, values, B, bias, epilogue.name, factor, alpha)


def sddmm(graph, X: torch.Tensor, Y: torch.Tensor, edge_weight: torch.Tensor | None = None):
    """out[e] = w_e <X[i], Y[j]> for every edge e = (i, j), in the graph's input order; w is
    `edge_weight`, else the graph's weights (all ones for a pattern)."""
    g = Graph.coerce(graph)
    check_tensor("X", X, 2, g.n_rows)
    check_tensor("Y", Y, 2, g.n_cols, like=X)
    if Y.shape[1] != X.shape[1]:
        raise AutosageError(f"Y: expected width {X.shape[1]} (X's), got {Y.shape[1]}")
    dots = g.to_user(ops.sddmm(g, X, Y))
    if edge_weight is not None:
        check_tensor("edge_weight", edge_weight, 1, g.num_user_edges)
        return dots * edge_weight.to(device=X.device, dtype=X.dtype)
    weight = g.on("user_weight", X.device)
    if weight is None and g.weight is not None:
        weight = g.to_user(g.on("weight", X.device))
    return dots if weight is None else dots * weight.to(X.dtype)


def attention(graph, Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, scale: float | None = None):
    """O[i, h] = sum over edges (i, j) of softmax_j(scale <Q[i,h], K[j,h]>) V[j, h], shapes
    Q (n_rows, H, d), K and V (n_cols, H, d); rows without edges give zeros; scale defaults to
    1/sqrt(d). The graph's weights are not used; a duplicate edge counts once per listing in the
    softmax, as in PyG's layers."""
    g = Graph.coerce(graph)
    check_tensor("Q", Q, 3, g.n_rows)
    check_tensor("K", K, 3, g.n_cols, like=Q)
    check_tensor("V", V, 3, g.n_cols, like=Q)
    if K.shape[1:] != Q.shape[1:] or V.shape[1:] != Q.shape[1:]:
        raise AutosageError(f"Q, K, V must share (heads, d); got {tuple(Q.shape[1:])}, "
                            f"{tuple(K.shape[1:])}, {tuple(V.shape[1:])}")
    g = g.with_duplicates()
    value = 1.0 / math.sqrt(Q.shape[2]) if scale is None else float(scale)
    if not math.isfinite(value):
        raise AutosageError(f"scale must be finite, got {scale!r}")
    return ops.attention(g, Q, K, V, value)


def additive_attention(graph, a_dst: torch.Tensor, a_src: torch.Tensor, V: torch.Tensor,
                       negative_slope: float = 0.2):
    """GAT attention: O[i, h] = sum over edges (i, j) of softmax_j(LeakyReLU(a_dst[i,h] +
    a_src[j,h])) V[j, h], shapes a_dst (n_rows, H), a_src (n_cols, H), V (n_cols, H, d); rows without
    edges give zeros. In PyG's terms (edge_index = [src, dst]) a_dst is the target's term and a_src
    the source's. The graph's weights are not used; a duplicate edge counts once per listing."""
    g = Graph.coerce(graph)
    check_tensor("V", V, 3, g.n_cols)
    wide = torch.float32 if V.dtype in kernels.TWO_BYTE else None   # autocast's per-node terms
    check_tensor("a_dst", a_dst, 2, g.n_rows, like=V, also=wide)
    check_tensor("a_src", a_src, 2, g.n_cols, like=V, also=wide)
    if a_dst.shape[1] != V.shape[1] or a_src.shape[1] != V.shape[1]:
        raise AutosageError(f"a_dst and a_src need one score per head ({V.shape[1]}), got shapes "
                            f"{tuple(a_dst.shape)}, {tuple(a_src.shape)}")
    g = g.with_duplicates()
    slope = float(negative_slope)
    if not math.isfinite(slope):
        raise AutosageError(f"negative_slope must be finite, got {negative_slope!r}")
    return ops.additive_attention(g, a_dst, a_src, V, slope)
