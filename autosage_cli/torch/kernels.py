"""The three kernels every forward and backward pass is made of, dispatched on the tensors' device.

  spmm(graph, values, B)      out[i] = sum over edges e = (i, j) of v_e B[j]      (n_rows, K)
                              v = `values` (canonical order) or, for None, the graph's own weights
  sddmm(graph, X, Y)          out[e] = <X[i], Y[j]> for every edge, canonical order   (nnz,)
  attention(graph, Q, K, V, scale)   fused SDDMM -> row softmax -> SpMM, H heads   (n_rows, H, d)
  edge_softmax(graph, S)      softmax of S (nnz, H) over each row's edges

CUDA tensors run autosage's tuned plans (autosage_cli.torch.cuda: float32, zero-copy). Any other
device runs the reference below: plain torch (index_select / index_add), exact in float64, so the
autograd plumbing, the graph handle and the layers are testable without a GPU and the CUDA path
has a float64 reference to be checked against.
"""
from __future__ import annotations

import torch

from .graph import Graph


def _is_cuda(t: torch.Tensor) -> bool:
    return t.device.type == "cuda"


def spmm(graph: Graph, values: torch.Tensor | None, B: torch.Tensor) -> torch.Tensor:
    if _is_cuda(B):
        from . import cuda

        return cuda.spmm(graph, values, B)
    dev = B.device
    row, col = graph.on("row", dev), graph.on("col", dev)
    vals = values if values is not None else graph.on("weight", dev)
    msg = B.index_select(0, col)
    if vals is not None:
        msg = msg * vals.to(B.dtype).unsqueeze(-1)
    return B.new_zeros((graph.n_rows, B.shape[1])).index_add_(0, row, msg)


def sddmm(graph: Graph, X: torch.Tensor, Y: torch.Tensor) -> torch.Tensor:
    if _is_cuda(X):
        from . import cuda

        return cuda.sddmm(graph, X, Y)
    dev = X.device
    row, col = graph.on("row", dev), graph.on("col", dev)
    return (X.index_select(0, row) * Y.index_select(0, col)).sum(-1)


def edge_softmax(graph: Graph, scores: torch.Tensor) -> torch.Tensor:
    """Row softmax of per-edge scores (nnz, H) over each row's edges (any device)."""
    row = graph.on("row", scores.device)
    shape = (graph.n_rows, scores.shape[1])
    index = row.unsqueeze(1).expand_as(scores)
    row_max = scores.new_full(shape, float("-inf")).scatter_reduce_(0, index, scores, "amax")
    e = (scores - row_max.index_select(0, row)).exp_()
    row_sum = scores.new_zeros(shape).index_add_(0, row, e)
    return e.div_(row_sum.index_select(0, row))


def attention(graph: Graph, Q, K, V, scale: float) -> torch.Tensor:
    if _is_cuda(Q):
        from . import cuda

        return cuda.attention(graph, Q, K, V, scale)
    dev = Q.device
    row, col = graph.on("row", dev), graph.on("col", dev)
    scores = (Q.index_select(0, row) * K.index_select(0, col)).sum(-1) * scale   # (nnz, H)
    probs = edge_softmax(graph, scores)
    msg = probs.unsqueeze(-1) * V.index_select(0, col)
    return Q.new_zeros((graph.n_rows, *Q.shape[1:])).index_add_(0, row, msg)
