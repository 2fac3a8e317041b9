"""The vendor attention baseline: the best unfused composition of vendor pieces only.

  S[h] = <Q[:,h], K[:,h]> on A's pattern     cusparseSDDMM (sddmm_vendor.VendorSDDMM: nvmath-python or
                                             torch.sparse.sampled_addmm; strided per-head views)
  row softmax of scale * S (+ a)             CuPy: cupyx.scatter_max for the row maxima, elementwise
                                             exp, cupyx.scatter_add for the row sums
  O[:,h] = P[h] @ V[:,h]                     cuSPARSE SpMM (cusparse.CusparseSpMM, caller-given values,
                                             ld = H*d views), one entry per algorithm

Names: `vendor-unfused-alg1|alg2|alg3|default` (the SpMM algorithm differs). Making it the *best*
composition: the scale is folded into the exponent when it is positive and there is no bias
(exp(scale*(s - max s)) = the softmax of scale*s), and the division by the row sum is applied to the
n x H x d output instead of the nnz x H probabilities (out /= l), which reads and writes far less on
graphs with more edges than d per row. Rows without edges keep max -inf and sum 0; their sum is
raised to 1 so the (zero) SpMM row stays zero. Buffers are made once at prepare; `run` only launches (CuPy
may draw small temporaries from its pool).
"""
from __future__ import annotations

import numpy as np

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
                 use_values: bool):
        super().__init__(dgraph, "attention", d, heads)
        import cupy

        self.backend = self.schedule = name
        self.scale, self.use_values = scale, use_values
        # exp(scale * (s - max s)) is the softmax of scale * s only for scale > 0.
        self.fold_scale = scale > 0 and not use_values
        ld = heads * d
        with PrepareTimer(self):
            self.sddmm = VendorSDDMM(dgraph, d, ldx=ld, ldy=ld, launch_sets=heads)
            self.spmm = CusparseSpMM(dgraph, VENDOR_SPMM[name], d, ldb=ld, ldc=ld)
            nnz = max(1, dgraph.nnz)
            self.rows = edge_rows(dgraph)
            # One head at a time on one stream: a single scores buffer serves every head.
            self.scores = cupy.empty(nnz, dtype=cupy.float32)
            self.gathered = cupy.empty(nnz, dtype=cupy.float32)
            self.row_max = cupy.empty((heads, dgraph.n_rows), dtype=cupy.float32)
            self.row_sum = cupy.empty((heads, dgraph.n_rows), dtype=cupy.float32)
            self.inv_sum = cupy.empty((dgraph.n_rows, heads, 1), dtype=cupy.float32)
        self.provider = (f"{self.sddmm.provider} -> cupyx scatter softmax -> cusparseSpMM "
                         f"{VENDOR_SPMM[name]}")

    def _softmax_numerators(self, h: int) -> None:
        """scores <- exp(scale * (s - row max)) (or exp(s' - max s') with s' = scale s + a) for
        head h, row_sum[h] <- their row sums."""
        import cupy
        import cupyx

        nnz = self.graph.nnz
        s, t = self.scores[:nnz], self.gathered[:nnz]
        if not self.fold_scale:
            cupy.multiply(s, np.float32(self.scale), out=s)
            if self.use_values:
                cupy.add(s, self.graph.values, out=s)
        m = self.row_max[h]
        m.fill(-np.inf)
        cupyx.scatter_max(m, self.rows, s)
        cupy.take(m, self.rows, out=t)
        cupy.subtract(s, t, out=s)
        if self.fold_scale:
            cupy.multiply(s, np.float32(self.scale), out=s)
        cupy.exp(s, out=s)
        l = self.row_sum[h]
        l.fill(0)
        cupyx.scatter_add(l, self.rows, s)

    def run(self, inputs: tuple, out) -> None:
        import cupy

        check_inputs(self, inputs, out)
        Q, K, V = inputs
        g, H = self.graph, self.heads
        if g.nnz == 0:
            out.fill(0)
            return
        for h in range(H):
            scores = self.scores[:g.nnz]
            self.sddmm.launch(Q[:, h, :], K[:, h, :], scores)
            self._softmax_numerators(h)
            self.spmm.launch(V[:, h, :], out[:, h, :], values=scores)
        # out[i, h] /= l[h, i]. A non-empty row has l >= 1 (its max edge adds exp(0) = 1), an empty
        # row l = 0 and a zero SpMM row: max(l, 1) keeps that row zero.
        l = self.row_sum
        cupy.maximum(l, np.float32(1), out=l)
        cupy.divide(np.float32(1), l.T[:, :, None], out=self.inv_sum)
        cupy.multiply(out, self.inv_sum, out=out)

    def close(self) -> None:
        self.sddmm.close()
        self.spmm.close()


def prepare(dgraph: DeviceGraph, name: str, k: int, heads: int = 1, scale: float | None = None,
            *, use_values: bool = False) -> VendorAttentionPlan:
    """The vendor composition `name` at d = k with `heads` heads (A's values ignored unless
    use_values, then an additive per-edge bias)."""
    if name not in VENDOR_SPMM:
        raise ValueError(f"unknown vendor attention {name!r}; choose one of {', '.join(VENDOR_NAMES)}")
    return VendorAttentionPlan(dgraph, name, k, heads, attention_scale(k, scale), use_values)
