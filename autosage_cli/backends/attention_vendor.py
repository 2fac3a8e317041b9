"""The vendor attention baseline: the best unfused composition of vendor pieces only.

  S[h] = <Q[:,h], K[:,h]> on A's pattern     cusparseSDDMM (sddmm_vendor.VendorSDDMM: nvmath-python or
                                             torch.sparse.sampled_addmm; strided per-head views)
  row softmax of scale * S (+ a)             elementwise steps as a framework composes them: an
                                             atomic scatter-max for the row maxima, exp of the
                                             difference, an atomic scatter-add for the row sums
                                             (autosage's helper module, kernels/util.py: no CuPy
                                             kernel to compile on a first run)
  O[:,h] = P[h] @ V[:,h]                     cuSPARSE SpMM (cusparse.CusparseSpMM, caller-given values,
                                             ld = H*d views), one entry per algorithm

Names: `vendor-unfused-alg1|alg2|alg3|default` (the SpMM algorithm differs). Making it the *best*
composition: the scale is folded into the exponent when it is positive and there is no bias
(exp(scale*(s - max s)) = the softmax of scale*s), and the division by the row sum is applied to the
n x H x d output instead of the nnz x H probabilities (out /= l), which reads and writes far less on
graphs with more edges than d per row. Rows without edges keep max -inf and sum 0; their sum is
raised to 1 so the (zero) SpMM row stays zero. Buffers are made once at prepare; `run` only launches.

In float16/bfloat16 the SDDMM and the SpMM run in the type (float32 compute) and the softmax in
float32 between them; the probabilities are normalised per edge before they are rounded to the type
(out /= l on a 2-byte output would be one more rounding and a float32 copy of the output).
"""
from __future__ import annotations

import numpy as np

from ..dtypes import storage_dtype, info as dtype_info
from ..kernels import util
from .base import DeviceGraph, HeadsOutPlan, PrepareTimer
from .cusparse import CusparseSpMM
from .attention_common import attention_scale, check_inputs
from .sddmm_vendor import VendorSDDMM, edge_rows

# vendor name -> cuSPARSE SpMM vendor name (cusparse.SPMM_ALGORITHMS)
VENDOR_SPMM = {
    "vendor-unfused-alg1": "cusparse-alg1",
    "vendor-unfused-alg2": "cusparse-alg2",
    "vendor-unfused-alg3": "cusparse-alg3",
    "vendor-unfused-default": "cusparse-default",
}
VENDOR_NAMES = list(VENDOR_SPMM)


def vendor_names() -> list[str]:
    return list(VENDOR_NAMES)


class VendorAttentionPlan(HeadsOutPlan):

    def __init__(self, dgraph: DeviceGraph, name: str, d: int, heads: int, scale: float,
                 use_values: bool, dtype: str = "float32"):
        super().__init__(dgraph, "attention", d, heads)
        import cupy

        self.backend = self.schedule = name
        self.dtype = dtype_info(dtype).name
        self.scale, self.use_values = scale, use_values
        # exp(scale * (s - max s)) is the softmax of scale * s only for scale > 0.
        self.fold_scale = scale > 0 and not use_values
        ld = heads * d
        with PrepareTimer(self):
            self.sddmm = VendorSDDMM(dgraph, d, ldx=ld, ldy=ld, launch_sets=heads, dtype=self.dtype)
            self.spmm = CusparseSpMM(dgraph, VENDOR_SPMM[name], d, ldb=ld, ldc=ld, dtype=self.dtype)
            nnz = max(1, dgraph.nnz)
            self.rows = edge_rows(dgraph)
            # One head at a time on one stream: a single scores buffer serves every head.
            self.scores = cupy.empty(nnz, dtype=cupy.float32)
            self.row_max = cupy.empty((heads, dgraph.n_rows), dtype=cupy.float32)
            self.row_sum = cupy.empty((heads, dgraph.n_rows), dtype=cupy.float32)
            # the SDDMM's scores and the SpMM's probabilities as stored in a 2-byte type
            self.stored = (cupy.empty(nnz, dtype=storage_dtype(self.dtype))
                           if self.dtype != "float32" else None)
        self.provider = (f"{self.sddmm.provider} -> scatter softmax -> cusparseSpMM "
                         f"{VENDOR_SPMM[name]}")

    def _softmax_numerators(self, h: int) -> None:
        """scores <- exp(scale * (s - row max)) (or exp(s' - max s') with s' = scale s + a) for
        head h, row_sum[h] <- their row sums."""
        nnz = self.graph.nnz
        s = self.scores[:nnz]
        if not self.fold_scale:
            util.scale_bias(s, self.scale, self.graph.values if self.use_values else None)
        m = self.row_max[h]
        util.fill(m, -np.inf)
        util.scatter_max(m, self.rows, s)
        util.sub_row_exp(s, m, self.rows, self.scale if self.fold_scale else 1.0)
        l = self.row_sum[h]
        util.fill(l, 0)
        util.scatter_add(l, self.rows, s)

    def run(self, inputs: tuple, out) -> None:
        check_inputs(self, inputs, out)
        Q, K, V = inputs
        g, H = self.graph, self.heads
        if g.nnz == 0:
            util.fill(out, 0)
            return
        if self.stored is not None:
            self._run_two_byte(Q, K, V, out)
            return
        for h in range(H):
            scores = self.scores[:g.nnz]
            self.sddmm.launch(Q[:, h, :], K[:, h, :], scores)
            self._softmax_numerators(h)
            self.spmm.launch(V[:, h, :], out[:, h, :], values=scores)
        # out[i, h] /= l[h, i]. A non-empty row has l >= 1 (its max edge adds exp(0) = 1), an empty
        # row l = 0 and a zero SpMM row: max(l, 1) keeps that row zero.
        util.normalize_heads(out, self.row_sum)

    def _run_two_byte(self, Q, K, V, out) -> None:
        """float16/bfloat16: scores in the type -> float32 softmax normalised per edge -> the
        probabilities rounded to the type -> SpMM in the type."""
        nnz = self.graph.nnz
        stored, s = self.stored[:nnz], self.scores[:nnz]
        for h in range(self.heads):
            self.sddmm.launch(Q[:, h, :], K[:, h, :], stored)
            util.convert(stored, s)
            self._softmax_numerators(h)
            util.divide_rows(s, self.row_sum[h], self.rows, stored)   # l >= 1 on every edge's row
            self.spmm.launch(V[:, h, :], out[:, h, :], values=stored)

    def close(self) -> None:
        self.sddmm.close()
        self.spmm.close()


def prepare(dgraph: DeviceGraph, name: str, k: int, heads: int = 1, scale: float | None = None,
            *, use_values: bool = False, dtype: str = "float32") -> VendorAttentionPlan:
    """The vendor composition `name` at d = k with `heads` heads in `dtype` (A's values ignored
    unless use_values, then an additive per-edge bias)."""
    if name not in VENDOR_SPMM:
        raise ValueError(f"unknown vendor attention {name!r}; choose one of {', '.join(VENDOR_NAMES)}")
    return VendorAttentionPlan(dgraph, name, k, heads, attention_scale(k, scale), use_values, dtype)
