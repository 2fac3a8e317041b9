"""A SAGE layer's two linear maps as one GEMM each way (`stacks` says where), for the layer node
of torch/fused_layer.py:

  [x W_lᵀ | x W_rᵀ] = x [W_l; W_r]ᵀ                   forward: one GEMM, the SpMM reads the left half
  out = act(A (x W_lᵀ) + b + x W_rᵀ)
  D = [Aᵀ d | d], d = act'(out) d_out                 backward: written in place
  [d W_l; d W_r] = Dᵀ x,   d x = D [W_l; W_r],   d b = dᵀ 1
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..kernels import epilogues
from .layer_calls import column_sums


def stacks(weight_l: Tensor, weight_r: Tensor | None, shared: bool) -> bool:
    """Whether a layer transforming first with a root term on its own input (`shared`: no x_dst)
    runs its two linear maps as one GEMM, x [W_l; W_r]ᵀ = [x W_lᵀ | x W_rᵀ], and its backward the
    weights' and the input's gradients as one GEMM each, off [Aᵀ d | d]: on a small graph each GEMM
    is host time (26-31 us a call on the H100's host, where an elementwise launch took ~8), and this
    is two GEMMs fewer per layer each way for a weight concatenation, an add and a copy. The SpMMs
    read and write the halves in place (torch/cuda.py `rows_view`), which needs each half's
    columns to start 16-byte aligned: an output width of a multiple of 16 bytes."""
    return weight_r is not None and shared and (weight_l.shape[0] * weight_l.element_size()) % 16 == 0


def forward(g, x, weight_l, bias, weight_r, relu: bool, calls):
    """act(A (x W_lᵀ) + b + x W_rᵀ) from one GEMM's [x W_lᵀ | x W_rᵀ]: the SpMM (the bias in its
    epilogue) reads the left half in place, then the right half is added."""
    o = weight_l.shape[0]
    h = F.linear(x, torch.cat((weight_l, weight_r)))
    row = epilogues.choose(bias is not None, None)
    out = calls.spmm_epilogue(g, h[:, :o], bias, row) if row.fused else calls.spmm(g, None, h[:, :o])
    out.add_(h[:, o:])
    return out.relu_() if relu else out


def backward(g, d_out, x, weight_l, weight_r, out, needs, calls) -> list:
    """fused_layer._backward of a stacked layer (`stacks`): with D = [Aᵀ d | d] (d the output's gradient
    through the ReLU), [d W_l; d W_r] = Dᵀ x, d x = D [W_l; W_r] and d b = dᵀ 1."""
    need_x, _, need_wl, need_bias, need_wr = needs
    o = weight_l.shape[0]
    stacked = calls.stacked_gradient(g, d_out, out)
    d_x = d_wl = d_bias = d_wr = None
    if need_wl or need_wr:
        d_wl, d_wr = calls.weight_gradients(stacked, x, o)
        d_wl, d_wr = (d_wl if need_wl else None), (d_wr if need_wr else None)
    if need_x:
        d_x = stacked.mm(torch.cat((weight_l, weight_r)))
    if need_bias:
        d_bias = column_sums(stacked[:, o:].t())
    return [d_x, None, d_wl, d_bias, d_wr]
