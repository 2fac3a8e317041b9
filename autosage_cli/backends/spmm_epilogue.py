"""The SpMM epilogue (kernels/epilogues.py) where the SpMM does not apply it itself: after a vendor
SpMM (cuSPARSE has no epilogue), as a launch of its own over the output, and in the float64
references a fused plan is verified against.

  VendorEpiloguePlan(plan, epilogue)   the vendor plan's product, then cuda/spmm_epilogue.cu in
                                       place over out: what a fused native candidate's guardrail
                                       is measured against (whole results, both launches timed)
  device_reference / host_reference    the op's float64 SpMM reference, then the row's `apply`

Narrow types: the vendor's output is rounded to the type before the epilogue reads it and again
after, one rounding more than a fused kernel's; within the vendors' slack (dtypes.VENDOR_SLACK_2BYTE).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import AutosageError
from ..kernels import epilogues
from ..kernels.compile import get_function
from .base import PrepareTimer, RowsOutPlan
from .native_common import NULL, check_dense

THREADS = 256
MAX_BLOCKS = 8192   # a grid-stride loop: enough blocks to fill an H200 many times over


class EpilogueStep:
    """The epilogue of one (row, dtype) as a launch over an n_rows x k output."""

    def __init__(self, epilogue: epilogues.Epilogue, dtype: str):
        if not epilogue.fused:
            raise AutosageError("the 'none' epilogue has no launch")
        self.epilogue, self.dtype = epilogue, dtypes.info(dtype).name
        self.kernel = get_function(epilogues.VENDOR_FILE,
                                   epilogues.vendor_expression(dtypes.c_type(dtype), epilogue))

    def launch(self, out, n_rows: int, k: int, bias=None, scale: float = 1.0, alpha: float | None = None) -> None:
        if self.epilogue.bias:
            if bias is None:
                raise AutosageError(f"the epilogue {self.epilogue.name!r} needs a bias of K={k}")
            check_dense("bias", bias, 1, k, k, 1, self.dtype)
        blocks = max(1, min(MAX_BLOCKS, -(-n_rows * k // THREADS)))
        self.kernel((blocks,), (THREADS,), (np.int64(n_rows), np.int32(k), out, np.int64(k),
                                            bias if self.epilogue.bias else NULL, np.float32(scale),
                                            np.float32(self.epilogue.alpha if alpha is None else alpha)))


class VendorEpiloguePlan(RowsOutPlan):
    """A vendor SpMM plan followed by the epilogue: the same `run` / `run_fused` as a fused
    native plan (backends/native_spmm.py), in two launches."""

    def __init__(self, inner, epilogue: epilogues.Epilogue, scale: float | None = None,
                 alpha: float | None = None):
        super().__init__(inner.graph, epilogues.op_name(epilogue), inner.k, 1, inner.dtype)
        self.inner, self.epilogue = inner, epilogue
        self.backend, self.schedule = inner.backend, inner.schedule
        self.provider = f"{getattr(inner, 'provider', inner.backend)} + epilogue"
        self.scale = 1.0 if scale is None else float(scale)
        self.alpha = epilogue.alpha if alpha is None else float(alpha)
        with PrepareTimer(self):
            self.step = EpilogueStep(epilogue, inner.dtype)
        self.prepare_ms += inner.prepare_ms
        self.compile_ms += inner.compile_ms

    def run(self, inputs: tuple, out) -> None:
        B, *operands = inputs
        self.run_fused(B, out, *operands)

    def run_fused(self, B, out, bias=None, scale: float | None = None, alpha: float | None = None,
                  values=None) -> None:
        if values is None:
            self.inner.run((B,), out)
        else:
            self.inner.run_values(values, B, out)
        self.step.launch(out, self.graph.n_rows, self.k, bias, self.scale if scale is None else scale,
                         self.alpha if alpha is None else alpha)

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


def host_reference(epilogue: epilogues.Epilogue, product: np.ndarray, operands, scale, dtype: str):
    """The float64 epilogue of a float64 SpMM reference `product`, its operands as stored in `dtype`."""
    bias = dtypes.from_storage(operands[0], dtype) if epilogue.bias else None
    return epilogue.apply(product, bias, 1.0 if scale is None else float(scale), None, np)


def device_reference(epilogue: epilogues.Epilogue, product, operands, scale, dtype: str):
    """The same on the device (CuPy), for the device SpMM reference; None stays None (it did not
    fit: the host reference then decides)."""
    if product is None:
        return None
    import cupy

    from .value_arrays import to_float32

    bias = to_float32(operands[0], dtype).astype(cupy.float64) if epilogue.bias else None
    return epilogue.apply(product, bias, 1.0 if scale is None else float(scale), None, cupy)
