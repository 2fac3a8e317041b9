"""The calls a GCNConv or SAGEConv layer's node (torch/fused_layer.py, torch/stacked_layer.py) makes
for its aggregations and its bias gradient: `Dispatched` through ops.py's dispatching calls (what
the custom ops' bodies and a recording backward run), `Direct` to their implementations (the eager
node, where nothing traces and nothing records)."""
from __future__ import annotations

import torch
from torch import Tensor

from . import backward, handles, ops, ops_epilogue

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


def column_sums(d_t: Tensor) -> Tensor:
    """The bias's gradient from d's transpose `d_t`, dᵀ 1 as a matrix-vector product: on the H200
    7.6 us for 19717 x 256 (pubmed's hidden layer) where PyTorch's column reduction d.sum(0) takes
    24.8, 60 against 148 us at reddit-like's 232965 x 256, and never slower down to 2708 x 16."""
    return torch.mv(d_t, _ones(d_t.shape[1], d_t))


# relu's derivative, by its overloads (the op packet's lookup is host time on every call); the
# second writes into a given tensor (a column block of the stacked gradient)
THRESHOLD_BACKWARD = torch.ops.aten.threshold_backward.default
THRESHOLD_BACKWARD_INTO = torch.ops.aten.threshold_backward.grad_input


class Dispatched:
    """The aggregations as ops.py's dispatching calls: what the custom ops' bodies run (a dispatch
    mode around a compiled graph sees each SpMM as an op of its own) and a backward that may record
    a graph (create_graph)."""
    spmm = staticmethod(ops.spmm)
    spmm_t = staticmethod(ops.spmm_t)

    @staticmethod
    def spmm_epilogue(g, B, bias, row):
        return ops_epilogue.spmm_epilogue(g, None, B, bias, row.name)

    @staticmethod
    def stacked_gradient(g, d_out, out):
        """[Aᵀ d | d], d = relu'(out) d_out (out None: d_out), as recordable ops (no out=)."""
        d = d_out if out is None else THRESHOLD_BACKWARD(d_out, out, 0)
        return torch.cat((ops.spmm_t(g, None, d), d), 1)

    @staticmethod
    def weight_gradients(stacked, x, o: int):
        """(d W_l, d W_r) as tensors of their own: a custom op's outputs may not alias each other."""
        return stacked[:, :o].t().mm(x), stacked[:, o:].t().mm(x)


class Direct:
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

    @staticmethod
    def stacked_gradient(g, d_out, out):
        """[Aᵀ d | d] written in place: relu's derivative into the right half, the transposed
        SpMM from there into the left (no concatenation pass)."""
        handles.handle(g)
        o = d_out.shape[1]
        stacked = d_out.new_empty((d_out.shape[0], 2 * o))
        d = stacked[:, o:]
        if out is None:
            d.copy_(d_out)
        else:
            THRESHOLD_BACKWARD_INTO(d_out, out, 0, grad_input=d)
        backward.spmm_t(g, None, d, stacked[:, :o])
        return stacked

    @staticmethod
    def weight_gradients(stacked, x, o: int):
        """(d W_l, d W_r) from one GEMM, as row blocks of its [d W_l; d W_r]."""
        d_w = stacked.t().mm(x)
        return d_w[:o], d_w[o:]
