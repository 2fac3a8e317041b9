"""The attention backward's multi-head products on CUDA tensors (kernels/util_heads.py,
cuda/util_heads.cu): one launch for every head, where a loop over heads ran one tuned SDDMM or
SpMM plan per head. They are not tuned (no plan, no decision): coalesced kernels whose cost is
one pass over the edges for all heads. Operands reach CuPy as views of the torch tensors
(autosage_cli.torch.cuda), outputs are torch allocations, launches go to torch's current stream.

Index arrays are the Graph's own (int64) tensors on the device, so nothing is converted per call.
"""
from __future__ import annotations

import torch

from ..kernels import util_heads as util
from .cuda import _cupy, _on_torch_stream, operand
from .graph import Graph


def _index(graph: Graph, name: str, device: torch.device):
    return _cupy(graph.on(name, device).contiguous())


def heads_sddmm(graph: Graph, X: torch.Tensor, Y: torch.Tensor, scale: float = 1.0,
                rounded: bool = True) -> torch.Tensor:
    X = operand("X", X)
    Y = operand("Y", Y, X.dtype)
    out = torch.empty((graph.nnz, X.shape[1]), dtype=torch.float32, device=X.device)
    if graph.nnz == 0:
        return out
    with _on_torch_stream(X.device):
        util.heads_sddmm(_index(graph, "row", X.device), _index(graph, "col", X.device), _cupy(X), _cupy(Y),
                         scale, _cupy(out), rounded)
    return out


def heads_spmm(graph: Graph, P: torch.Tensor, X: torch.Tensor, perm: torch.Tensor | None = None) -> torch.Tensor:
    X = operand("X", X)
    out = torch.empty((graph.n_rows, *X.shape[1:]), dtype=X.dtype, device=X.device)
    if graph.nnz == 0:
        return out.zero_()
    P = operand("P", P, torch.float32)
    with _on_torch_stream(X.device):
        util.heads_spmm(_index(graph, "rowptr", X.device), _index(graph, "col", X.device), _cupy(P), _cupy(X),
                        _cupy(out), None if perm is None else _cupy(perm.contiguous()))
    return out


def softmax_grad(graph: Graph, P: torch.Tensor, dP: torch.Tensor, row_dot: torch.Tensor | None,
                 scale: float) -> torch.Tensor:
    """dP = scale x P (dP - r[row]) in place (float32, contiguous: backward's own buffer)."""
    if dP.dtype != torch.float32 or not dP.is_contiguous():
        raise ValueError(f"softmax_grad writes dP in place: a contiguous float32 tensor, got {dP.dtype}")
    if graph.nnz == 0:
        return dP
    P = operand("P", P, torch.float32)
    with _on_torch_stream(dP.device):
        util.heads_softmax_grad(_index(graph, "rowptr", dP.device), _cupy(P), _cupy(dP),
                                None if row_dot is None else _cupy(operand("row_dot", row_dot, torch.float32)),
                                scale)
    return dP


def additive_probs(graph: Graph, a_dst, a_src, row_max, row_sum, slope: float):
    """(P float32 (nnz, H), negative bool (nnz, H)): see kernels.additive_probs."""
    dev = a_dst.device
    P = torch.empty((graph.nnz, a_dst.shape[1]), dtype=torch.float32, device=dev)
    negative = torch.empty(P.shape, dtype=torch.bool, device=dev)
    if graph.nnz == 0:
        return P, negative
    terms = [_cupy(operand(name, t, torch.float32)) for name, t in
             (("a_dst", a_dst), ("a_src", a_src), ("row_max", row_max), ("row_sum", row_sum))]
    with _on_torch_stream(dev):
        util.heads_additive_probs(_index(graph, "row", dev), _index(graph, "col", dev), *terms, slope, _cupy(P),
                                  _cupy(negative.view(torch.uint8)))   # bool: one byte, 0 or 1
    return P, negative
