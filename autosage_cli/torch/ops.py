"""autosage's torch ops as PyTorch custom operators (namespace `autosage`), so that autograd,
torch.compile (fullgraph: no graph break inside an op) and CUDA-graph capture see each as one op.

  autosage::spmm(graph, values?, B, n_rows)        A(values) B, canonical edge order     (n_rows, k)
  autosage::spmm_t(graph, values?, X, n_cols)      Aᵀ(values) X, values in A's order    (n_cols, k)
  autosage::sddmm(graph, X, Y, nnz)                <X_i, Y_j> per edge, canonical order   (nnz,)
  autosage::attention(graph, Q, K, V, scale)       fused row-softmax attention        (n_rows, H, d)
  autosage::attention_backward(graph, Q, K, V, O, dO, scale, need_q, need_k, need_v) -> dQ, dK, dV
  autosage::additive_attention(graph, a_dst, a_src, V, slope) -> O, stats (n_rows, H, 2: max, sum)
  autosage::additive_attention_backward(graph, a_dst, a_src, V, O, stats, dO, slope, needs) -> 3

`graph` is the Graph's int handle (autosage_cli.torch.handles). The sizes a fake (shape) function
cannot read off its tensors come as ints (n_rows, n_cols, nnz), so the fakes never look a Graph up.
The implementations are kernels.py's (CUDA plans, or the CPU reference) and backward.py's formulas,
on real tensors: the Graph's index tensors never enter a traced graph. A backward op returns an
empty tensor for a gradient not asked for (an op's outputs are tensors, never None).

SpMM and SDDMM are differentiable to any order (their backward is spmm, spmm_t and sddmm again);
the attention backward ops are not (as before, once_differentiable).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import backward, handles, kernels
from .kernels import TWO_BYTE


# ------------------------------------------------------------------------ SpMM, its transpose, SDDMM
@torch.library.custom_op("autosage::spmm", mutates_args=())
def spmm_op(graph: int, values: Optional[Tensor], B: Tensor, n_rows: int) -> Tensor:
    return kernels.spmm(handles.graph(graph), values, B)


@spmm_op.register_fake
def _(graph, values, B, n_rows):
    return B.new_empty((n_rows, B.shape[1]))


@torch.library.custom_op("autosage::spmm_t", mutates_args=())
def spmm_t_op(graph: int, values: Optional[Tensor], X: Tensor, n_cols: int) -> Tensor:
    return backward.spmm_t(handles.graph(graph), values, X)


@spmm_t_op.register_fake
def _(graph, values, X, n_cols):
    return X.new_empty((n_cols, X.shape[1]))


@torch.library.custom_op("autosage::sddmm", mutates_args=())
def sddmm_op(graph: int, X: Tensor, Y: Tensor, nnz: int) -> Tensor:
    return kernels.sddmm(handles.graph(graph), X, Y)


@sddmm_op.register_fake
def _(graph, X, Y, nnz):
    return X.new_empty((nnz,))


def _keep(ctx, graph: int) -> None:
    """The handle for backward, and the Graph itself held by the autograd node: a Graph made for
    one call (`spmm(scipy_matrix, B)`) must outlive its forward, as it did when the node held it."""
    ctx.graph, ctx.graph_object = graph, handles.graph(graph)


def _setup_product(ctx, inputs, output):
    """spmm and spmm_t: (graph, values, dense, size). The dense operand is kept only when the
    values need a gradient (it is what their SDDMM reads)."""
    graph, values, dense, _ = inputs
    _keep(ctx, graph)
    ctx.dense_rows = dense.shape[0]
    ctx.save_for_backward(values, dense if ctx.needs_input_grad[1] else None)


def _spmm_backward(ctx, dC):
    # C = A(v) B: dB = Aᵀ(v) dC, dv_e = <dC_i, B_j>
    values, B = ctx.saved_tensors
    dC = dC.contiguous()
    d_values = d_B = None
    if ctx.needs_input_grad[2]:
        d_B = spmm_t_op(ctx.graph, values, dC, ctx.dense_rows)
    if ctx.needs_input_grad[1]:
        d_values = sddmm_op(ctx.graph, dC, B.contiguous(), values.shape[0]).to(values.dtype)
    return None, d_values, d_B, None


def _spmm_t_backward(ctx, dY):
    # Y = Aᵀ(v) X (Y_j = sum over edges (i, j) of v_e X_i): dX = A(v) dY, dv_e = <X_i, dY_j>
    values, X = ctx.saved_tensors
    dY = dY.contiguous()
    d_values = d_X = None
    if ctx.needs_input_grad[2]:
        d_X = spmm_op(ctx.graph, values, dY, ctx.dense_rows)
    if ctx.needs_input_grad[1]:
        d_values = sddmm_op(ctx.graph, X.contiguous(), dY, values.shape[0]).to(values.dtype)
    return None, d_values, d_X, None


def _setup_sddmm(ctx, inputs, output):
    graph, X, Y, _ = inputs
    _keep(ctx, graph)
    ctx.shapes = (X.shape[0], Y.shape[0])
    ctx.save_for_backward(X if ctx.needs_input_grad[2] else None, Y if ctx.needs_input_grad[1] else None)


def _sddmm_backward(ctx, d_s):
    # s_e = <X_i, Y_j>: dX = A(ds) Y, dY = Aᵀ(ds) X
    X, Y = ctx.saved_tensors
    d_s = d_s.contiguous()
    d_X = spmm_op(ctx.graph, d_s, Y.contiguous(), ctx.shapes[0]) if ctx.needs_input_grad[1] else None
    d_Y = spmm_t_op(ctx.graph, d_s, X.contiguous(), ctx.shapes[1]) if ctx.needs_input_grad[2] else None
    return None, d_X, d_Y, None


spmm_op.register_autograd(_spmm_backward, setup_context=_setup_product)
spmm_t_op.register_autograd(_spmm_t_backward, setup_context=_setup_product)
sddmm_op.register_autograd(_sddmm_backward, setup_context=_setup_sddmm)


# ------------------------------------------------------------------------ attention (dot-product score)
def _grad_or_empty(grad, like: Tensor) -> Tensor:
    return like.new_empty(0) if grad is None else grad.to(like.dtype)


def _grads_fake(wanted, likes):
    return tuple(like.new_empty(like.shape if need else 0) for need, like in zip(wanted, likes))


@torch.library.custom_op("autosage::attention", mutates_args=())
def attention_op(graph: int, Q: Tensor, K: Tensor, V: Tensor, scale: float) -> Tensor:
    return kernels.attention(handles.graph(graph), Q, K, V, scale)


@attention_op.register_fake
def _(graph, Q, K, V, scale):
    return V.new_empty((Q.shape[0], V.shape[1], V.shape[2]))


@torch.library.custom_op("autosage::attention_backward", mutates_args=())
def attention_backward_op(graph: int, Q: Tensor, K: Tensor, V: Tensor, O: Tensor, dO: Tensor,
                          scale: float, need_q: bool, need_k: bool,
                          need_v: bool) -> tuple[Tensor, Tensor, Tensor]:
    grads = backward.attention_backward(handles.graph(graph), (Q, K, V, O), dO.contiguous(), scale,
                                        (need_q, need_k, need_v))
    return tuple(_grad_or_empty(d, like) for d, like in zip(grads, (Q, K, V)))


@attention_backward_op.register_fake
def _(graph, Q, K, V, O, dO, scale, need_q, need_k, need_v):
    return _grads_fake((need_q, need_k, need_v), (Q, K, V))


def _setup_attention(ctx, inputs, output):
    graph, Q, K, V, scale = inputs
    _keep(ctx, graph)
    ctx.scale = scale
    ctx.save_for_backward(Q, K, V, output)


def _attention_grads(ctx, dO):
    needs = tuple(ctx.needs_input_grad[1:4])
    grads = attention_backward_op(ctx.graph, *ctx.saved_tensors, dO, ctx.scale, *needs)
    return (None, *(g if need else None for g, need in zip(grads, needs)), None)


attention_op.register_autograd(_attention_grads, setup_context=_setup_attention)


# ------------------------------------------------------------------------ additive (GAT) attention
def _wide(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in TWO_BYTE else dtype


def _stats_dtype(a_dst: Tensor, a_src: Tensor) -> torch.dtype:
    """The row statistics' type: the per-node terms' (float32 for the 2-byte types), as the
    kernels and the reference compute the scores in it."""
    return torch.promote_types(_wide(a_dst.dtype), _wide(a_src.dtype))


@torch.library.custom_op("autosage::additive_attention", mutates_args=())
def additive_attention_op(graph: int, a_dst: Tensor, a_src: Tensor, V: Tensor,
                          negative_slope: float) -> tuple[Tensor, Tensor]:
    O, row_max, row_sum = kernels.additive_attention(handles.graph(graph), a_dst, a_src, V,
                                                     negative_slope)
    # one stats tensor: an op's outputs may not alias each other (CUDA's max and sum are views)
    return O, torch.stack([row_max, row_sum], -1).to(_stats_dtype(a_dst, a_src))


@additive_attention_op.register_fake
def _(graph, a_dst, a_src, V, negative_slope):
    stats = a_dst.new_empty((a_dst.shape[0], V.shape[1], 2), dtype=_stats_dtype(a_dst, a_src))
    return V.new_empty((a_dst.shape[0], V.shape[1], V.shape[2])), stats


@torch.library.custom_op("autosage::additive_attention_backward", mutates_args=())
def additive_attention_backward_op(graph: int, a_dst: Tensor, a_src: Tensor, V: Tensor, O: Tensor,
                                   stats: Tensor, dO: Tensor, negative_slope: float, need_dst: bool,
                                   need_src: bool, need_v: bool) -> tuple[Tensor, Tensor, Tensor]:
    saved = (a_dst, a_src, V, O, stats[..., 0], stats[..., 1])
    grads = backward.additive_backward(handles.graph(graph), saved, dO.contiguous(), negative_slope,
                                       (need_dst, need_src, need_v))
    return tuple(_grad_or_empty(d, like) for d, like in zip(grads, (a_dst, a_src, V)))


@additive_attention_backward_op.register_fake
def _(graph, a_dst, a_src, V, O, stats, dO, negative_slope, need_dst, need_src, need_v):
    return _grads_fake((need_dst, need_src, need_v), (a_dst, a_src, V))


def _setup_additive(ctx, inputs, output):
    graph, a_dst, a_src, V, slope = inputs
    _keep(ctx, graph)
    ctx.slope = slope
    ctx.mark_non_differentiable(output[1])
    ctx.save_for_backward(a_dst, a_src, V, *output)


def _additive_grads(ctx, dO, _d_stats):
    needs = tuple(ctx.needs_input_grad[1:4])
    a_dst, a_src, V, O, stats = ctx.saved_tensors
    grads = additive_attention_backward_op(ctx.graph, a_dst, a_src, V, O, stats, dO, ctx.slope, *needs)
    return (None, *(g if need else None for g, need in zip(grads, needs)), None)


additive_attention_op.register_autograd(_additive_grads, setup_context=_setup_additive)


# ------------------------------------------------------------------------ calls on a Graph
def spmm(g, values: Tensor | None, B: Tensor) -> Tensor:
    """A(values) B on Graph g (values canonical, None: g's weights)."""
    return spmm_op(handles.handle(g), values, B, g.n_rows)


def sddmm(g, X: Tensor, Y: Tensor) -> Tensor:
    return sddmm_op(handles.handle(g), X, Y, g.nnz)


def attention(g, Q: Tensor, K: Tensor, V: Tensor, scale: float) -> Tensor:
    return attention_op(handles.handle(g), Q, K, V, scale)


def additive_attention(g, a_dst: Tensor, a_src: Tensor, V: Tensor, negative_slope: float) -> Tensor:
    return additive_attention_op(handles.handle(g), a_dst, a_src, V, negative_slope)[0]
