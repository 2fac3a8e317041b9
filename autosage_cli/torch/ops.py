"""autosage's torch ops as PyTorch custom operators (namespace `autosage`), so that autograd,
torch.compile (fullgraph: no graph break inside an op) and CUDA-graph capture see each as one op.

  autosage::spmm(graph, values?, B, n_rows)        A(values) B, canonical edge order     (n_rows, k)
  autosage::spmm_epilogue(graph, values?, B, bias?, n_rows, epilogue, scale, alpha)
                      act(scale A(values) B + bias) in one launch (n_rows, k): ops_epilogue.py
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

Eager calls skip the dispatcher. A custom op's Python dispatch (its autograd wrapper, redispatch,
the output alias check) cost ~95 us of host time per SpMM on the H200's host, several times the
launch: on a small graph, most of a step. So the calls below (`spmm`, `sddmm`, ...) go through the
custom op only when something must see it as one — torch.compile or export tracing, a dispatch
mode (fake tensors, a FLOP counter), a functorch transform, a tensor subclass — and otherwise run
the same implementation under a plain autograd.Function with the same setup and backward (or no
autograd node at all when no input needs a gradient). Both paths share every formula below; the
backward formulas call these dispatching functions again, so a backward traced by AOTAutograd
meets the custom ops and an eager one the direct path.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from . import backward, handles, kernels
from .tracing import direct_when_untraced, traced as _traced   # _traced: patched by tests
from .kernels import TWO_BYTE


# ------------------------------------------------------------------------ SpMM, its transpose, SDDMM
def _on(graph):
    """The Graph of an implementation's graph argument: the handle through the custom op (the
    schema's int), the Graph itself on the eager path."""
    return handles.graph(graph) if isinstance(graph, int) else graph


def _spmm(graph: int, values: Optional[Tensor], B: Tensor, n_rows: int) -> Tensor:
    return kernels.spmm(_on(graph), values, B)


spmm_op = torch.library.custom_op("autosage::spmm", _spmm, mutates_args=())


@spmm_op.register_fake
def _(graph, values, B, n_rows):
    return B.new_empty((n_rows, B.shape[1]))


def _spmm_t(graph: int, values: Optional[Tensor], X: Tensor, n_cols: int) -> Tensor:
    return backward.spmm_t(_on(graph), values, X)


spmm_t_op = torch.library.custom_op("autosage::spmm_t", _spmm_t, mutates_args=())


@spmm_t_op.register_fake
def _(graph, values, X, n_cols):
    return X.new_empty((n_cols, X.shape[1]))


def _sddmm(graph: int, X: Tensor, Y: Tensor, nnz: int) -> Tensor:
    return kernels.sddmm(_on(graph), X, Y)


sddmm_op = torch.library.custom_op("autosage::sddmm", _sddmm, mutates_args=())


@sddmm_op.register_fake
def _(graph, X, Y, nnz):
    return X.new_empty((nnz,))


def _keep(ctx, graph) -> None:
    """The graph argument as the op took it (the Graph on the eager path, its int handle through
    the custom op, which its backward passes on: a traced backward must meet the handle, a
    constant, never the Graph object), and the Graph itself held by the autograd node: a Graph made
    for one call (`spmm(scipy_matrix, B)`) must outlive its forward, as it did when the node held it."""
    ctx.graph, ctx.graph_object = graph, _on(graph)


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
        d_B = spmm_t(ctx.graph, values, dC, ctx.dense_rows)
    if ctx.needs_input_grad[1]:
        d_values = sddmm(ctx.graph, dC, B.contiguous(), values.shape[0]).to(values.dtype)
    return None, d_values, d_B, None


def _spmm_t_backward(ctx, dY):
    # Y = Aᵀ(v) X (Y_j = sum over edges (i, j) of v_e X_i): dX = A(v) dY, dv_e = <X_i, dY_j>
    values, X = ctx.saved_tensors
    dY = dY.contiguous()
    d_values = d_X = None
    if ctx.needs_input_grad[2]:
        d_X = spmm(ctx.graph, values, dY, ctx.dense_rows)
    if ctx.needs_input_grad[1]:
        d_values = sddmm(ctx.graph, X.contiguous(), dY, values.shape[0]).to(values.dtype)
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
    d_X = spmm(ctx.graph, d_s, Y.contiguous(), ctx.shapes[0]) if ctx.needs_input_grad[1] else None
    d_Y = spmm_t(ctx.graph, d_s, X.contiguous(), ctx.shapes[1]) if ctx.needs_input_grad[2] else None
    return None, d_X, d_Y, None


spmm_op.register_autograd(_spmm_backward, setup_context=_setup_product)
spmm_t_op.register_autograd(_spmm_t_backward, setup_context=_setup_product)
sddmm_op.register_autograd(_sddmm_backward, setup_context=_setup_sddmm)


# ------------------------------------------------------------------------ attention (dot-product score)
def _grad_or_empty(grad, like: Tensor) -> Tensor:
    return like.new_empty(0) if grad is None else grad.to(like.dtype)


def _grads_fake(wanted, likes):
    return tuple(like.new_empty(like.shape if need else 0) for need, like in zip(wanted, likes))


def _attention(graph: int, Q: Tensor, K: Tensor, V: Tensor, scale: float) -> Tensor:
    return kernels.attention(_on(graph), Q, K, V, scale)


attention_op = torch.library.custom_op("autosage::attention", _attention, mutates_args=())


@attention_op.register_fake
def _(graph, Q, K, V, scale):
    return V.new_empty((Q.shape[0], V.shape[1], V.shape[2]))


def _attention_backward_impl(graph: int, Q: Tensor, K: Tensor, V: Tensor, O: Tensor, dO: Tensor,
                             scale: float, need_q: bool, need_k: bool,
                             need_v: bool) -> tuple[Tensor, Tensor, Tensor]:
    grads = backward.attention_backward(_on(graph), (Q, K, V, O), dO.contiguous(), scale,
                                        (need_q, need_k, need_v))
    return tuple(_grad_or_empty(d, like) for d, like in zip(grads, (Q, K, V)))


attention_backward_op = torch.library.custom_op("autosage::attention_backward", _attention_backward_impl,
                                                mutates_args=())


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
    grads = _attention_backward(ctx.graph, *ctx.saved_tensors, dO, ctx.scale, *needs)
    return (None, *(g if need else None for g, need in zip(grads, needs)), None)


attention_op.register_autograd(_attention_grads, setup_context=_setup_attention)


# ------------------------------------------------------------------------ additive (GAT) attention
def _wide(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in TWO_BYTE else dtype


def _stats_dtype(a_dst: Tensor, a_src: Tensor) -> torch.dtype:
    """The row statistics' type: the per-node terms' (float32 for the 2-byte types), as the
    kernels and the reference compute the scores in it."""
    return torch.promote_types(_wide(a_dst.dtype), _wide(a_src.dtype))


def _additive_attention(graph: int, a_dst: Tensor, a_src: Tensor, V: Tensor,
                        negative_slope: float) -> tuple[Tensor, Tensor]:
    O, stats = kernels.additive_attention(_on(graph), a_dst, a_src, V, negative_slope)
    return O, stats.to(_stats_dtype(a_dst, a_src))


additive_attention_op = torch.library.custom_op("autosage::additive_attention", _additive_attention,
                                                mutates_args=())


@additive_attention_op.register_fake
def _(graph, a_dst, a_src, V, negative_slope):
    stats = a_dst.new_empty((a_dst.shape[0], V.shape[1], 2), dtype=_stats_dtype(a_dst, a_src))
    return V.new_empty((a_dst.shape[0], V.shape[1], V.shape[2])), stats


def _additive_attention_backward_impl(graph: int, a_dst: Tensor, a_src: Tensor, V: Tensor, O: Tensor,
                                      stats: Tensor, dO: Tensor, negative_slope: float, need_dst: bool,
                                      need_src: bool, need_v: bool) -> tuple[Tensor, Tensor, Tensor]:
    grads = backward.additive_backward(_on(graph), (a_dst, a_src, V, O, stats), dO.contiguous(), negative_slope,
                                       (need_dst, need_src, need_v))
    return tuple(_grad_or_empty(d, like) for d, like in zip(grads, (a_dst, a_src, V)))


additive_attention_backward_op = torch.library.custom_op("autosage::additive_attention_backward",
                                                         _additive_attention_backward_impl, mutates_args=())


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
    grads = _additive_backward(ctx.graph, a_dst, a_src, V, O, stats, dO, ctx.slope, *needs)
    return (None, *(g if need else None for g, need in zip(grads, needs)), None)


additive_attention_op.register_autograd(_additive_grads, setup_context=_setup_additive)


# ------------------------------------------------------------------------ calls on a Graph
def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _eager(name: str, impl, setup, grads, differentiable: bool = True):
    """The eager twin of a custom op: an autograd.Function running the op's implementation `impl`
    with the op's own setup_context and backward (once differentiable where the op's is not).
    Its forward takes ctx and calls the setup itself: a Function with a separate setup_context
    binds its arguments to forward's signature (inspect.signature) on every apply, ~20 us."""
    backward_fn = grads if differentiable else torch.autograd.function.once_differentiable(grads)

    def forward(ctx, *args):
        output = impl(*args)
        setup(ctx, args, output)
        return output
    return type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                   "backward": staticmethod(backward_fn)})


_EagerSpMM = _eager("EagerSpMM", _spmm, _setup_product, _spmm_backward)
_EagerSpMMT = _eager("EagerSpMMT", _spmm_t, _setup_product, _spmm_t_backward)
_EagerSDDMM = _eager("EagerSDDMM", _sddmm, _setup_sddmm, _sddmm_backward)
_EagerAttention = _eager("EagerAttention", _attention, _setup_attention, _attention_grads, False)
_EagerAdditive = _eager("EagerAdditive", _additive_attention, _setup_additive, _additive_grads, False)


def _call(op, impl, eager, g, tensors: tuple, args: tuple):
    """op(handle, *args) through the dispatcher when traced, or when g is a handle (a custom op's
    backward passes its graph on as it got it); else eager.apply(g, *args), or the implementation
    impl(g, *args) itself when no input needs a gradient."""
    if isinstance(g, int):
        return op(g, *args)
    if _traced(*tensors):
        return op(handles.handle(g), *args)
    # noted: a captured step checks every Graph its ops ran on (handles.recording)
    handles.handle(g)
    if _needs_grad(*tensors):
        return eager.apply(g, *args)
    return impl(g, *args)


def spmm(g, values: Tensor | None, B: Tensor, n_rows: int | None = None) -> Tensor:
    """A(values) B on Graph g (values canonical, None: g's weights). g may be a handle, with
    n_rows given (the backward formulas)."""
    n_rows = g.n_rows if n_rows is None else n_rows
    return _call(spmm_op, _spmm, _EagerSpMM, g, (values, B), (values, B, n_rows))


def spmm_t(g, values: Tensor | None, X: Tensor, n_cols: int | None = None) -> Tensor:
    """Aᵀ(values) X on Graph g, values in g's canonical order."""
    n_cols = g.n_cols if n_cols is None else n_cols
    return _call(spmm_t_op, _spmm_t, _EagerSpMMT, g, (values, X), (values, X, n_cols))


def sddmm(g, X: Tensor, Y: Tensor, nnz: int | None = None) -> Tensor:
    return _call(sddmm_op, _sddmm, _EagerSDDMM, g, (X, Y), (X, Y, g.nnz if nnz is None else nnz))


def attention(g, Q: Tensor, K: Tensor, V: Tensor, scale: float) -> Tensor:
    return _call(attention_op, _attention, _EagerAttention, g, (Q, K, V), (Q, K, V, scale))


def additive_attention(g, a_dst: Tensor, a_src: Tensor, V: Tensor, negative_slope: float) -> Tensor:
    return _call(additive_attention_op, _additive_attention, _EagerAdditive, g, (a_dst, a_src, V),
                 (a_dst, a_src, V, negative_slope))[0]


# ------------------------------------------------------------------------ calls through the dispatcher
for _op, _impl in ((spmm_op, _spmm), (spmm_t_op, _spmm_t), (sddmm_op, _sddmm), (attention_op, _attention),
                   (attention_backward_op, _attention_backward_impl),
                   (additive_attention_op, _additive_attention),
                   (additive_attention_backward_op, _additive_attention_backward_impl)):
    direct_when_untraced(_op, _impl)


def _untracked(op, impl, g, tensors: tuple, args: tuple):
    """A backward op (once differentiable: no autograd node of its own): through the dispatcher
    when traced or given a handle, else its implementation."""
    if isinstance(g, int) or _traced(*tensors):
        return op(g if isinstance(g, int) else handles.handle(g), *args)
    return impl(g, *args)


def _attention_backward(g, *args):
    return _untracked(attention_backward_op, _attention_backward_impl, g, args[:5], args)


def _additive_backward(g, *args):
    return _untracked(additive_attention_backward_op, _additive_attention_backward_impl, g, args[:6], args)
