"""SpMM with an epilogue, dispatched on the tensors' device, and the arithmetic autograd needs:

  spmm(graph, values, B, epilogue, bias, scale, alpha)
      out = act(scale * A(values) B + bias, alpha)                                  (n_rows, K)
      CUDA: one launch of the fused op's plan (torch/cuda.py, ops/epilogue.py); elsewhere the
      reference: the product in float32 at least (float64 stays float64), the epilogue on it, and
      one rounding to B's type, as the fused kernels round only what they store.
  backward_terms(epilogue, out, dC, scale, alpha) -> (d pre-activation, d the product)
      act'(pre) read off the saved output (relu: out > 0), times dC; then times the scale.

`epilogue` is a row of kernels/epilogues.py (its `fused` rows: "none" is plain SpMM).
"""
from __future__ import annotations

import torch

from ..kernels import epilogues
from .graph import Graph
from .kernels import widened


def spmm(graph: Graph, values: torch.Tensor | None, B: torch.Tensor, epilogue: epilogues.Epilogue,
         bias: torch.Tensor | None, scale: float, alpha: float) -> torch.Tensor:
    if B.device.type == "cuda":
        from . import cuda

        return cuda.spmm(graph, values, B, epilogue, bias, scale, alpha)
    dev, wide = B.device, widened(B)
    row, col = graph.on("row", dev), graph.on("col", dev)
    vals = values if values is not None else graph.on("weight", dev)
    msg = wide.index_select(0, col)
    if vals is not None:
        msg = msg * vals.to(B.dtype).to(wide.dtype).unsqueeze(-1)   # values as the kernels read them
    product = wide.new_zeros((graph.n_rows, B.shape[1])).index_add_(0, row, msg)
    b = widened(bias.to(B.dtype)) if epilogue.bias else None
    return epilogue.apply(product, b, scale, alpha, torch).to(B.dtype)


def backward_terms(epilogue: epilogues.Epilogue, out: torch.Tensor | None, dC: torch.Tensor,
                   scale: float, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(dL/d pre, dL/d product) for out = act(pre), pre = scale * product + bias."""
    d_pre = dC if epilogue.slope is None else dC * epilogue.slope(out, alpha, torch).to(dC.dtype)
    return d_pre, (d_pre * scale if scale != 1.0 else d_pre)


def saves_output(epilogue: epilogues.Epilogue) -> bool:
    """Whether backward reads the forward's output (an activation's derivative)."""
    return epilogue.slope is not None
