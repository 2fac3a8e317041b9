"""The attention backward's multi-head products on CUDA tensors (kernels/util_heads.py,
cuda/util_heads.cu): one launch for every head, where a loop over heads ran one tuned SDDMM or
SpMM plan per head. They are not tuned (no plan, no decision): coalesced kernels whose cost is
one pass over the edges for all heads. Operands are checked by `operand` (type, contiguity,
alignment) and handed to the kernels as their addresses (no CuPy views), outputs are torch
allocations, launches go to torch's current stream.

Index arrays are the Graph's own tensors on the device, so nothing is converted per call.
"""
from __future__ import annotations

import torch

from ..dtypes import DTYPES
from ..kernels import util_heads as util
from .cuda import _on_torch_stream, _stream, operand
from .graph import Graph

_CODECS = {getattr(torch, t.torch_name): t.codec for t in DTYPES.values()}   # a value type's helper codec
_INDEX = {torch.int32: "int", torch.int64: "long long"}


def _indices(graph: Graph, device: torch.device, *names: str) -> tuple[dict, str, list]:
    """({name: address}, index type, tensors) of the Graph's index tensors `names` on `device`, in
    the first one's type (a converted copy kept with the graph's device state, `graph.gpu`)."""
    key = ("heads-indices", device.index, names)
    found = graph.gpu.get(key)
    if found is None:    # made once per graph: the Graph's index tensors do not change
        tensors = [graph.on(name, device) for name in names]
        kind = tensors[0].dtype
        tensors = [t if t.dtype == kind and t.is_contiguous() else t.to(kind).contiguous() for t in tensors]
        found = graph.gpu[key] = ({name: t.data_ptr() for name, t in zip(names, tensors)}, _INDEX[kind], tensors)
    return dict(found[0]), found[1], found[2]


def _address(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def _launch(device: torch.device, fn, *args) -> None:
    """fn(*args, stream) on torch's current stream of `device`. The driver launches into the
    calling thread's current device, which is the tensors' in every call torch makes (autograd's
    device thread included), so CuPy's device and stream contexts (a few microseconds each, more on
    autograd's thread) are entered only when another device is current."""
    index = torch._C._cuda_getDevice()
    if device.index in (None, index):
        fn(*args, torch._C._cuda_getCurrentRawStream(index))
        return
    with _on_torch_stream(device):
        fn(*args, _stream(device).ptr)


def heads_sddmm(graph: Graph, X: torch.Tensor, Y: torch.Tensor, scale: float = 1.0,
                rounded: bool = True) -> torch.Tensor:
    X = operand("X", X)
    Y = operand("Y", Y, X.dtype)
    out = torch.empty((graph.nnz, X.shape[1]), dtype=torch.float32, device=X.device)
    if graph.nnz == 0:
        return out
    p, index, _ = _indices(graph, X.device, "row", "col")
    p.update(rows=p.pop("row"), cols=p.pop("col"), X=X.data_ptr(), Y=Y.data_ptr(), out=out.data_ptr())
    _launch(X.device, util.heads_sddmm, p, graph.nnz, int(X.shape[1]), int(X.shape[2]), scale, rounded,
            _CODECS[X.dtype], index)
    return out


def heads_spmm(graph: Graph, P: torch.Tensor, X: torch.Tensor, perm: torch.Tensor | None = None) -> torch.Tensor:
    X = operand("X", X)
    out = torch.empty((graph.n_rows, *X.shape[1:]), dtype=X.dtype, device=X.device)
    if graph.nnz == 0:
        return out.zero_()
    P = operand("P", P, torch.float32)
    p, index, indices = _indices(graph, X.device, "rowptr", "col")
    if perm is not None:
        perm = perm.to(indices[1].dtype).contiguous()
    p.update(indptr=p.pop("rowptr"), cols=p.pop("col"), P=P.data_ptr(), perm=_address(perm), X=X.data_ptr(),
             out=out.data_ptr())
    _launch(X.device, util.heads_spmm, p, graph.n_rows, int(X.shape[1]), int(X.shape[2]), _CODECS[X.dtype], index)
    return out


def softmax_grad(graph: Graph, P: torch.Tensor, dP: torch.Tensor, row_dot: torch.Tensor | None,
                 scale: float) -> torch.Tensor:
    """dP = scale x P (dP - r[row]) in place (float32, contiguous: backward's own buffer)."""
    if dP.dtype != torch.float32 or not dP.is_contiguous():
        raise ValueError(f"softmax_grad writes dP in place: a contiguous float32 tensor, got {dP.dtype}")
    if graph.nnz == 0:
        return dP
    P = operand("P", P, torch.float32)
    row_dot = None if row_dot is None else operand("row_dot", row_dot, torch.float32)
    p, index, _ = _indices(graph, dP.device, "rowptr")
    p.update(indptr=p.pop("rowptr"), P=P.data_ptr(), dP=dP.data_ptr(), row_dot=_address(row_dot))
    _launch(dP.device, util.heads_softmax_grad, p, graph.n_rows, int(P.shape[1]), scale, index)
    return dP


def additive_score_grads(graph: Graph, a_dst, a_src, stats, V, O, dO, slope: float, need_scores: bool):
    """(P float32 (nnz, H), d a_dst, d a_src float32, or None for both unless `need_scores`) of the
    GAT score in one launch (kernels.additive_score_grads)."""
    dev = V.device
    V = operand("V", V)
    O, dO = operand("O", O, V.dtype), operand("dO", dO, V.dtype)
    a_dst, a_src = operand("a_dst", a_dst, torch.float32), operand("a_src", a_src, torch.float32)
    stats = operand("stats", stats, torch.float32)
    heads, d = int(V.shape[1]), int(V.shape[2])
    P = torch.empty((graph.nnz, heads), dtype=torch.float32, device=dev)
    d_dst = torch.empty(a_dst.shape, dtype=torch.float32, device=dev) if need_scores else None
    d_src = torch.zeros(a_src.shape, dtype=torch.float32, device=dev) if need_scores else None
    if graph.nnz == 0:
        return P, None if d_dst is None else d_dst.zero_(), d_src
    p, index, _ = _indices(graph, dev, "rowptr", "col")
    p.update(indptr=p.pop("rowptr"), cols=p.pop("col"))
    p.update({name: _address(t) for name, t in (("a_dst", a_dst), ("a_src", a_src), ("stats", stats), ("V", V),
                                                 ("O", O), ("dO", dO), ("P", P), ("d_dst", d_dst),
                                                 ("d_src", d_src))})
    _launch(dev, util.heads_additive_backward, p, graph.n_rows, heads, d, slope, V.dtype == torch.float32,
            _CODECS[V.dtype], index)
    return P, d_dst, d_src
