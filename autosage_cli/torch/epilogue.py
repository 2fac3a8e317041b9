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
from .kernels import reference_product, widened


def spmm(graph: Graph, values: torch.Tensor | None, B: torch.Tensor, epilogue: epilogues.Epilogue,
         bias: torch.Tensor | None, scale: float, alpha: float) -> torch.Tensor:
    if B.device.type == "cuda":
        from . import cuda

        return cuda.spmm(graph, values, B, epilogue, bias, scale, alpha)
    product = reference_product(graph, values, B)
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
