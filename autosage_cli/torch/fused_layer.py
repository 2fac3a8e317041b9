"""A graph layer's linear maps and its aggregation as one autograd node (eager calls) or one custom
op each way (torch.compile and export):

  out = act(A (x W_lᵀ) + b [+ x_dst W_rᵀ])      transform first (`aggregate_first` False)
  out = act((A x) W_lᵀ + b [+ x_dst W_rᵀ])      aggregate first
act the identity or ReLU.
A is a graph with fixed weights (GCN's normalised graph, SAGE's mean graph), W_r the root term
(SAGEConv's lin_r; GCNConv has none), x_dst the root's input (None: x itself, the layer's one
node set; else a bipartite layer's targets).

Why one node: on a small graph an eager training step is host time, and each op PyTorch records
costs a node to create, to run in the backward and to hand its gradients on. Built from separate
ops, a SAGE layer records four (the two linear maps, the SpMM, the root's add) and adds x's two
gradients in a pass of its own. Here the forward launches a GEMM, the SpMM (the bias in its
epilogue when the GEMM runs first) and a GEMM that accumulates the root term into the output
(addmm_); the backward accumulates x's two gradients the same way, in the GEMM's epilogue. The
kernels are those of the separate ops, so outputs and gradients are theirs.

A layer without a root term aggregating first an input that needs no gradient (GCN's first layer)
is no node of ours in an eager call: its backward runs no SpMM, so its GEMM is left to autograd's
own nodes, whose backward runs in C++ (`gemms_only`).

A layer whose input recurs unchanged and needs no gradient (a full graph's features, step after
step) reads A x kept from an earlier call (kept_aggregation.py) and runs its GEMMs only, as
autograd's own nodes: no SpMM either way.

Why one op under torch.compile: a compiled small-graph step is host time too, and built from the
separate ops Inductor adds kernels of its own around ours (the ReLU and its mask, each bias
gradient as two reductions), each a Triton launch from Python. As `autosage::linear_aggregate`
and `autosage::linear_aggregate_backward` the compiled graphs hold one call per layer each way,
running what the eager node runs (`_forward`, `_backward`); the backward op is once differentiable.

The eager node's backward is differentiable (the SpMM's transpose through ops.py's dispatching
call), so a second derivative through create_graph still works. Layers use these paths only where
they compute what their separate ops do: outside autocast, every tensor of one dtype and device,
and not under another tracer (a dispatch mode, a functorch transform, a tensor subclass), which
meets the separate custom ops.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ..kernels import epilogues
from . import handles, kept_aggregation, ops, ops_epilogue
from .functions import check_tensor
from .tracing import direct_when_untraced, traced


def applies(*tensors) -> bool:
    """Whether a layer call on these tensors (None: absent) may run as one node (eager) or one
    custom op (torch.compile or export tracing it)."""
    # called on every eager layer call: a loop, not generators, and each device read once
    present = [t for t in tensors if t is not None]
    dtype, device = present[0].dtype, present[0].device
    if torch.is_autocast_enabled(device.type):
        return False
    if not torch.compiler.is_compiling() and ops._traced(*present):
        return False
    for t in present:
        if t.dtype != dtype or t.device != device:
            return False
    return True


def linear_aggregate(g, x: Tensor, x_dst: Tensor | None, weight_l: Tensor, bias: Tensor | None,
                     weight_r: Tensor | None, aggregate_first: bool, relu: bool = False) -> Tensor:
    """The layer's output, its input checked as the SpMM checks it: as one node (LinearAggregate),
    or as GEMMs autograd records itself where the aggregation needs no gradient (`gemms_only`);
    under torch.compile or export, as the custom op autosage::linear_aggregate."""
    check_tensor("B", x, 2, g.n_cols)
    if x_dst is not None:
        check_tensor("x_dst", x_dst, 2, g.n_rows)
    if torch.compiler.is_compiling():
        return layer_op(handles.handle(g), x, x_dst, weight_l, bias, weight_r, aggregate_first, relu,
                        g.n_rows)[0]
    if kept_aggregation.eligible(g, x, x_dst):
        aggregated = kept_aggregation.kept(g, x, _aggregate)
        if aggregated is not None:
            return _gemms_after(aggregated, x if x_dst is None else x_dst, weight_l, bias, weight_r, relu)
    if gemms_only(aggregate_first, x, x_dst, weight_r):
        return _gemms_after(ops.spmm(g, None, x), None, weight_l, bias, None, relu)
    return _apply_node(g, x, x_dst, weight_l, bias, weight_r, aggregate_first, relu)


def gemms_only(aggregate_first: bool, x: Tensor, x_dst: Tensor | None, weight_r: Tensor | None) -> bool:
    """Whether the layer is its aggregation, a constant, then its GEMM: aggregated first from an
    input needing no gradient (a first layer's features), with no root term. Its backward then runs
    no SpMM, only the GEMM's gradients, and autograd's own nodes compute those in C++; a Python
    node's backward runs on autograd's device thread, where Python ran 2-4x slower than on the
    calling thread on the GPU hosts measured. Measured on an H100 (interleaved eager steps of the
    training suite's models, two calls): GCN's steps 2-8% faster this way in one call (cora 1.350
    against 1.461 ms), within the method's 1.5% noise in the other; SAGE's, whose root term adds a
    second GEMM, its transpose's node and a ReLU pass of its own, 1-13% slower (wiki-Vote 2.156
    against 1.913 ms), so a layer with a root term stays one node.
    Not while a CUDA graph captures: a replay has no host time to save, and the node's kernels are
    fewer (the ReLU in cuBLASLt's epilogue) and its bias gradient a matrix-vector product."""
    return (aggregate_first and weight_r is None and not x.requires_grad
            and (x_dst is None or not x_dst.requires_grad)
            and not (x.is_cuda and torch.cuda.is_current_stream_capturing()))


def _aggregate(g, x: Tensor) -> Tensor:
    return _Direct.spmm(g, None, x)


def _gemms_after(aggregated, root_input, weight_l, bias, weight_r, relu):
    """act((A x) W_lᵀ + b [+ x_dst W_rᵀ]) from A x (computed now, or kept by kept_aggregation.py)
    as LinearAggregate's forward computes it: GEMMs only, which autograd records as its own nodes
    (their backward runs in C++, see `gemms_only`); the root term accumulates into the output in
    place, then the ReLU is a pass of its own (cuBLASLt's ReLU epilogue has no derivative in torch)."""
    out = F.linear(aggregated, weight_l, bias)
    if weight_r is not None:
        out = out.addmm_(root_input, weight_r.t())
    return out.relu_() if relu else out


_ONES: dict = {}       # (rows, dtype, device) -> a vector of ones, the column sums' operand
_ONES_KEPT = 8         # a mini-batch's row counts vary: keep the latest few


def _ones(rows: int, like: Tensor) -> Tensor:
    key = (rows, like.dtype, like.device)
    ones = _ONES.get(key)
    if ones is None:
        ones = like.new_ones(rows)
        # one made inside a CUDA-graph capture lives in the capture's pool, and a tracer's
        # (compiled autograd meeting this backward) is no tensor to keep: used there only
        capturing = like.is_cuda and torch.cuda.is_current_stream_capturing()
        if type(like) in (Tensor, torch.nn.Parameter) and not capturing:
            _ONES[key] = ones
            for stale in list(_ONES)[:-_ONES_KEPT]:
                del _ONES[stale]
    return ones


def _column_sums(d_t: Tensor) -> Tensor:
    """The bias's gradient from d's transpose `d_t`, dᵀ 1 as a matrix-vector product: on the H200
    7.6 us for 19717 x 256 (pubmed's hidden layer) where PyTorch's column reduction d.sum(0) takes
    24.8, 60 against 148 us at reddit-like's 232965 x 256, and never slower down to 2708 x 16."""
    return torch.mv(d_t, _ones(d_t.shape[1], d_t))


class _Dispatched:
    """The aggregations as ops.py's dispatching calls: what the custom ops' bodies run (a dispatch
    mode around a compiled graph sees each SpMM as an op of its own) and a backward that may record
    a graph (create_graph)."""
    spmm = staticmethod(ops.spmm)
    spmm_t = staticmethod(ops.spmm_t)

    @staticmethod
    def spmm_epilogue(g, B, bias, row):
        return ops_epilogue.spmm_epilogue(g, None, B, bias, row.name)


class _Direct:
    """The same aggregations as the custom ops' own implementations (ops._spmm, ops._spmm_t,
    ops_epilogue._spmm_epilogue), for the eager node where nothing traces (`applies` checked) and
    nothing records: ops.py's dispatch (its tracer, gradient and handle checks) was ~12 of an SpMM
    call's ~30 us of host time on the H100's host. The handle is still taken: a captured step
    checks every Graph its ops ran on (handles.recording)."""

    @staticmethod
    def spmm(g, values, B):
        handles.handle(g)
        return ops._spmm(g, values, B, g.n_rows)

    @staticmethod
    def spmm_t(g, values, X):
        handles.handle(g)
        return ops._spmm_t(g, values, X, g.n_cols)

    @staticmethod
    def spmm_epilogue(g, B, bias, row):
        handles.handle(g)
        return ops_epilogue._spmm_epilogue(g, None, B, bias, g.n_rows, row.name, 1.0, row.alpha)


# relu's derivative, by its overload (the op packet's lookup is host time on every call)
_THRESHOLD_BACKWARD = torch.ops.aten.threshold_backward.default


def _forward(g, x, x_dst, weight_l, bias, weight_r, aggregate_first: bool, relu: bool, calls=_Dispatched):
    """(out, A x) aggregating first, else (out, None): the layer's output and what its backward
    reads besides the inputs. Runs without grad (a node's forward, or the custom op's body)."""
    # F.linear is x Wᵀ (+ b) in one call where mm needs the transpose's view first: on a
    # small graph each call from Python is host time
    root_input = x if x_dst is None else x_dst
    relu_pending = relu and weight_r is not None    # after the root term's GEMM
    aggregated = None
    if aggregate_first:
        aggregated = calls.spmm(g, None, x)
        if relu and bias is not None and weight_r is None:   # cuBLASLt's bias-ReLU epilogue
            out = torch._addmm_activation(bias, aggregated, weight_l.t())
        else:
            out = F.linear(aggregated, weight_l, bias)
            relu_pending = relu
    else:
        h = F.linear(x, weight_l)
        row = epilogues.choose(bias is not None, "relu" if relu and not relu_pending else None)
        out = calls.spmm_epilogue(g, h, bias, row) if row.fused else calls.spmm(g, None, h)
    # The root term accumulates into the output, which this function made: in place, then the
    # ReLU in place. torch._addmm_activation(out, ...) would copy `out` into a new tensor first
    # (its ReLU rides on cuBLASLt only for a bias vector): a launch more for the same result.
    if weight_r is not None:
        out.addmm_(root_input, weight_r.t())
    if relu_pending:
        out.relu_()
    return out, aggregated


def _kept(x, x_dst, weight_l, weight_r, aggregate_first: bool, relu: bool, out, aggregated) -> tuple:
    """What `_backward` reads after d_out: (kept, root_input, weight_l, weight_r, out or None)."""
    root_input = x if x_dst is None else x_dst
    return (aggregated if aggregate_first else x, root_input if weight_r is not None else None,
            weight_l, weight_r, out if relu else None)


def _backward(g, d_out, kept, root_input, weight_l, weight_r, out, aggregate_first: bool, shared: bool,
              needs, calls=_Dispatched) -> list:
    """[d_x, d_x_dst, d_weight_l, d_bias, d_weight_r] (None where `needs`, five flags in that
    order, asks for none). kept: A x aggregating first, else x; root_input: the root term's input
    (None without one); out: the output when the ReLU is the layer's (its derivative), else None;
    shared: the root term reads x itself (no x_dst)."""
    need_x, need_dst, need_wl, need_bias, need_wr = needs
    d_out = d_out.contiguous()
    if out is not None:            # relu's derivative off its output, in one pass
        d_out = _THRESHOLD_BACKWARD(d_out, out, 0)
    d_out_t = d_out.t()            # one view for every product that reads d_outᵀ
    d_x = d_dst = d_wl = d_bias = d_wr = None
    if aggregate_first:            # kept: A x
        if need_wl:
            d_wl = d_out_t.mm(kept)
        if need_x:
            d_x = calls.spmm_t(g, None, d_out.mm(weight_l))
    elif need_x or need_wl:        # kept: x
        d_h = calls.spmm_t(g, None, d_out)
        d_wl = d_h.t().mm(kept) if need_wl else None
        d_x = d_h.mm(weight_l) if need_x else None
    if need_bias:
        d_bias = _column_sums(d_out_t)
    if weight_r is not None:
        if need_wr:
            d_wr = d_out_t.mm(root_input)
        if shared and need_x:
            d_x = d_out.mm(weight_r) if d_x is None else d_x.addmm_(d_out, weight_r)
        elif need_dst:
            d_dst = d_out.mm(weight_r)
    return [d_x, d_dst, d_wl, d_bias, d_wr]


class LinearAggregate(torch.autograd.Function):
    """`LinearAggregate.apply(graph, x, x_dst, weight_l, bias, weight_r, aggregate_first, relu)`;
    bias, weight_r and x_dst may be None; `relu`: the output's ReLU in the node too (in the
    SpMM's or cuBLASLt's epilogue where nothing is added after it)."""

    @staticmethod
    def forward(ctx, g, x, x_dst, weight_l, bias, weight_r, aggregate_first, relu):
        # called by `linear_aggregate` only where `applies` held: untraced, so the direct calls
        out, aggregated = _forward(g, x, x_dst, weight_l, bias, weight_r, aggregate_first, relu, _Direct)
        ctx.graph, ctx.aggregate_first, ctx.shared = g, aggregate_first, x_dst is None
        ctx.save_for_backward(*_kept(x, x_dst, weight_l, weight_r, aggregate_first, relu, out, aggregated))
        return out

    @staticmethod
    def backward(ctx, d_out):
        # differentiable: under create_graph (grad enabled) or a tracer (compiled autograd meeting
        # this node) the SpMM's transpose goes through ops.py's dispatching call, which records it
        direct = not torch.is_grad_enabled() and not traced(d_out)
        grads = _backward(ctx.graph, d_out, *ctx.saved_tensors, ctx.aggregate_first, ctx.shared,
                          ctx.needs_input_grad[1:6], _Direct if direct else _Dispatched)
        return None, *grads, None, None


# Function.apply's Python runs on every eager layer call: a functorch check and a generator that
# unwraps, argument by argument, a functorch wrapper that outlived its transform (a "dead" one).
# `applies` has ruled active transforms out, so torch's C apply runs the node; the inputs are
# unwrapped as Function.apply would (the weights are a module's parameters, never a wrapper
# outside a transform). About 10 against 6-7 us per call on a CPU, for these eight arguments.
_c_apply = super(torch.autograd.Function, LinearAggregate).apply
_unwrap_if_dead = torch._C._functorch.unwrap_if_dead


def _apply_node(g, x, x_dst, weight_l, bias, weight_r, aggregate_first: bool, relu: bool) -> Tensor:
    x_dst = None if x_dst is None else _unwrap_if_dead(x_dst)
    return _c_apply(g, _unwrap_if_dead(x), x_dst, weight_l, bias, weight_r, aggregate_first, relu)


# ------------------------------------------------------------------ the layer as custom ops (compiled)
def _layer(graph: int, x: Tensor, x_dst: Optional[Tensor], weight_l: Tensor, bias: Optional[Tensor],
           weight_r: Optional[Tensor], aggregate_first: bool, relu: bool, n_rows: int) -> tuple[Tensor, Tensor]:
    # no_grad: below the op's autograd the inputs still require grad, and the body's dispatching
    # calls (ops.spmm) would record nodes of their own
    with torch.no_grad():
        out, aggregated = _forward(ops._on(graph), x, x_dst, weight_l, bias, weight_r, aggregate_first, relu)
    return out, (x.new_empty(0) if aggregated is None else aggregated)


layer_op = torch.library.custom_op("autosage::linear_aggregate", _layer, mutates_args=())


@layer_op.register_fake
def _(graph, x, x_dst, weight_l, bias, weight_r, aggregate_first, relu, n_rows):
    out = x.new_empty((n_rows, weight_l.shape[0]))
    return out, x.new_empty((n_rows, x.shape[1]) if aggregate_first else (0,))


def _layer_backward_impl(graph: int, d_out: Tensor, kept: Tensor, root_input: Optional[Tensor],
                         weight_l: Tensor, weight_r: Optional[Tensor], out: Optional[Tensor],
                         aggregate_first: bool, shared: bool, x_rows: int, need_x: bool, need_dst: bool,
                         need_wl: bool, need_bias: bool, need_wr: bool) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    with torch.no_grad():
        grads = _backward(ops._on(graph), d_out, kept, root_input, weight_l, weight_r, out, aggregate_first,
                          shared, (need_x, need_dst, need_wl, need_bias, need_wr))
    return tuple(d_out.new_empty(0) if d is None else d for d in grads)


layer_backward_op = torch.library.custom_op("autosage::linear_aggregate_backward", _layer_backward_impl,
                                            mutates_args=())


@layer_backward_op.register_fake
def _(graph, d_out, kept, root_input, weight_l, weight_r, out, aggregate_first, shared, x_rows,
      need_x, need_dst, need_wl, need_bias, need_wr):
    def grad(need, shape):
        return d_out.new_empty(shape if need else (0,))
    return (grad(need_x, (x_rows, weight_l.shape[1])),
            grad(need_dst, (0,) if root_input is None else root_input.shape),
            grad(need_wl, weight_l.shape), grad(need_bias, (weight_l.shape[0],)),
            grad(need_wr, (0,) if weight_r is None else weight_r.shape))


def _setup_layer(ctx, inputs, output):
    graph, x, x_dst, weight_l, bias, weight_r, aggregate_first, relu, _ = inputs
    out, aggregated = output
    ops._keep(ctx, graph)
    ctx.mark_non_differentiable(aggregated)
    ctx.aggregate_first, ctx.shared, ctx.x_rows = aggregate_first, x_dst is None, x.shape[0]
    ctx.save_for_backward(*_kept(x, x_dst, weight_l, weight_r, aggregate_first, relu, out, aggregated))


def _layer_grads(ctx, d_out, _d_aggregated):
    saved = ctx.saved_tensors
    # x_dst without a root term is read by nothing: no gradient (None, as the node's)
    need_x, need_dst, need_wl, need_bias, need_wr = ctx.needs_input_grad[1:6]
    needs = (need_x, need_dst and saved[1] is not None, need_wl, need_bias, need_wr)
    grads = layer_backward_op(ctx.graph, d_out, *saved, ctx.aggregate_first, ctx.shared, ctx.x_rows, *needs)
    return (None, *(d if need else None for d, need in zip(grads, needs)), None, None, None)


layer_op.register_autograd(_layer_grads, setup_context=_setup_layer)
for _op, _impl in ((layer_op, _layer), (layer_backward_op, _layer_backward_impl)):
    direct_when_untraced(_op, _impl)
