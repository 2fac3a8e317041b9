"""SpMM with an epilogue as a PyTorch custom operator, beside the others (ops.py says why custom
ops, and how eager calls skip the dispatcher):

  autosage::spmm_epilogue(graph, values?, B, bias?, n_rows, epilogue, scale, alpha)
      act(scale A(values) B + bias, alpha), canonical edge order, one launch        (n_rows, k)

`epilogue` is the name of a fused row of kernels/epilogues.py (a string in the schema, so a
compiled graph holds it as a constant), scale and alpha its per-call scalars. Backward (derived
in torch/functions.py): dP = act'(P) dC read off the saved output, db = column sums of dP, and
SpMM's own gradients of scale dP (spmm_t and sddmm through ops.py's dispatching calls, so a
traced backward meets the custom ops and an eager one the direct path). Differentiable again
where those are: the activation's derivative is a constant of the saved output.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from ..kernels import epilogues
from . import epilogue as fused
from .ops import _call, _eager, _keep, _on, sddmm, spmm_t
from .tracing import direct_when_untraced


def _spmm_epilogue(graph: int, values: Optional[Tensor], B: Tensor, bias: Optional[Tensor], n_rows: int,
                   epilogue: str, scale: float, alpha: float) -> Tensor:
    return fused.spmm(_on(graph), values, B, epilogues.get(epilogue), bias, scale, alpha)


spmm_epilogue_op = torch.library.custom_op("autosage::spmm_epilogue", _spmm_epilogue, mutates_args=())


@spmm_epilogue_op.register_fake
def _(graph, values, B, bias, n_rows, epilogue, scale, alpha):
    return B.new_empty((n_rows, B.shape[1]))


def _setup_epilogue(ctx, inputs, output):
    """The output is kept when the activation's derivative is read off it (relu: out > 0), B only
    when the values need a gradient (their SDDMM reads it)."""
    graph, values, B, bias, _, epilogue, scale, alpha = inputs
    _keep(ctx, graph)
    ctx.dense_rows, ctx.scale, ctx.alpha = B.shape[0], scale, alpha
    ctx.epilogue = epilogues.get(epilogue)
    ctx.save_for_backward(values, B if ctx.needs_input_grad[1] else None,
                          output if fused.saves_output(ctx.epilogue) else None)


def _spmm_epilogue_backward(ctx, dC):
    # C = act(P), P = scale A(v) B + b: dP = act'(P) dC (from C), db = column sums of dP,
    # and the SpMM's gradients of scale dP: dB = Aᵀ(v) scale dP, dv_e = <scale dP_i, B_j>
    values, B, out = ctx.saved_tensors
    d_pre, d_product = fused.backward_terms(ctx.epilogue, out, dC, ctx.scale, ctx.alpha)
    d_product = d_product.contiguous()
    d_values = d_B = d_bias = None
    if ctx.needs_input_grad[2]:
        d_B = spmm_t(ctx.graph, values, d_product, ctx.dense_rows)
    if ctx.needs_input_grad[1]:
        d_values = sddmm(ctx.graph, d_product, B.contiguous(), values.shape[0]).to(values.dtype)
    if ctx.needs_input_grad[3]:
        d_bias = d_pre.sum(0)
    return None, d_values, d_B, d_bias, None, None, None, None


spmm_epilogue_op.register_autograd(_spmm_epilogue_backward, setup_context=_setup_epilogue)

direct_when_untraced(spmm_epilogue_op, _spmm_epilogue)
_EagerSpMMEpilogue = _eager("EagerSpMMEpilogue", _spmm_epilogue, _setup_epilogue, _spmm_epilogue_backward)


def spmm_epilogue(g, values: Tensor | None, B: Tensor, bias: Tensor | None, epilogue: str,
                  scale: float = 1.0, alpha: float | None = None, n_rows: int | None = None) -> Tensor:
    """act(scale A(values) B + bias, alpha) on Graph g, `epilogue` a fused row's name
    (kernels/epilogues.py); alpha None: the row's own."""
    n_rows = g.n_rows if n_rows is None else n_rows
    alpha = epilogues.get(epilogue).alpha if alpha is None else float(alpha)
    return _call(spmm_epilogue_op, _spmm_epilogue, _EagerSpMMEpilogue, g, (values, B, bias),
                 (values, B, bias, n_rows, epilogue, float(scale), alpha))
