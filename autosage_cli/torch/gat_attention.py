"""GATConv's attention on the eager path as one autograd node: the per-node score terms
a_src = <h_src, att_src> and a_dst = <h_dst, att_dst>, the fused additive attention, and in
backward every gradient from the one attention backward (kernels: the score's gradients and P,
then dV = Pᵀ dO):

  d h_src   = dV + d a_src ⊗ att_src (+ d a_dst ⊗ att_dst when the targets are the sources)
  d h_dst   = d a_dst ⊗ att_dst      (bipartite)
  d att_src = sum over nodes of d a_src ⊗ h_src,   d att_dst likewise

The layer's composition (two products and sums, then the op) makes seven autograd nodes and ten
backward kernels of a layer into this one node and six kernels, with dV's buffer taking the score
terms' gradients in place. A small graph's step is host-bound, and autograd runs a CUDA backward on
its own device thread, where each node and each Python line costs several times what it costs on
the calling thread (scripts/percall.py): fewer nodes are most of what a layer can save there.

Traced calls (torch.compile, dispatch modes, functorch transforms) take the composition instead,
whose ops are the custom operators a traced graph must meet; both compute the same function.
"""
from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import handles, ops
from .graph import Graph


def _score_terms(h_src, h_dst, att_src, att_dst):
    """(a_dst, a_src): each node's term of every score, per head (h_dst None: the sources')."""
    return ((h_src if h_dst is None else h_dst) * att_dst).sum(-1), (h_src * att_src).sum(-1)


class _GATAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g: Graph, h_src, h_dst, att_src, att_dst, slope: float):
        a_dst, a_src = _score_terms(h_src, h_dst, att_src, att_dst)
        out, stats = ops._additive_attention(g, a_dst, a_src, h_src, slope)
        ctx.g, ctx.slope = g, slope
        ctx.save_for_backward(h_src, h_dst, att_src, att_dst, a_dst, a_src, out, stats)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, d_out):
        h_src, h_dst, att_src, att_dst, a_dst, a_src, out, stats = ctx.saved_tensors
        _, need_src, need_dst, need_att_src, need_att_dst, _ = ctx.needs_input_grad
        d_dst, d_src, d_h_src = ops._additive_attention_backward_impl(
            ctx.g, a_dst, a_src, h_src, out, stats, d_out, ctx.slope, True, True, need_src)
        d_src, d_dst = d_src.unsqueeze(-1), d_dst.unsqueeze(-1)
        if need_src:
            d_h_src.addcmul_(d_src, att_src)          # dV's own buffer
            if h_dst is None:
                d_h_src.addcmul_(d_dst, att_dst)
        d_h_dst = d_dst * att_dst if need_dst else None
        d_att_src = (d_src * h_src).sum(0, keepdim=True) if need_att_src else None
        d_att_dst = (d_dst * (h_src if h_dst is None else h_dst)).sum(0, keepdim=True) if need_att_dst else None
        return None, d_h_src if need_src else None, d_h_dst, d_att_src, d_att_dst, None


def gat_attention(g: Graph, h_src: torch.Tensor, h_dst: torch.Tensor | None, att_src: torch.Tensor,
                  att_dst: torch.Tensor, slope: float) -> torch.Tensor:
    """softmax_j(LeakyReLU(<h_dst[i], att_dst> + <h_src[j], att_src>)) weighting h_src[j], per head:
    h_src (n_src, H, C), h_dst (n_dst, H, C) or None when the targets are the sources, att_* (1, H, C);
    g the layer's graph (self-loops added). One autograd node eagerly; traced, the composition."""
    g = g.with_duplicates()
    if ops._traced(h_src, h_dst, att_src, att_dst):
        return ops.additive_attention(g, *_score_terms(h_src, h_dst, att_src, att_dst), h_src, slope)
    # noted, as ops' calls do: a captured step checks every Graph its ops ran on (handles.recording)
    handles.handle(g)
    return _GATAttention.apply(g, h_src, h_dst, att_src, att_dst, slope)
