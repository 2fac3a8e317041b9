"""CSR attention, H heads of width d (= K): out[i,h] = sum over row i's edges of
softmax_j(scale * <Q[i,h], K[j,h]>) V[j,h]; scale defaults to 1/sqrt(d), rows without edges give
zeros. Q: n_rows x H x d; K, V: n_cols x H x d; out: n_rows x H x d. Vendors: cusparseSDDMM, a CuPy
row softmax and each cuSPARSE SpMM algorithm; baseline: PyG."""
from __future__ import annotations

import math

from .. import dtypes
from ..backends import attention_vendor, native_attention
from ..backends.base import HeadsOutPlan
from . import sddmm, spmm
from .cost.row_walks import attention_rows, attention_unfused
from .spec import OpSpec

# The unfused pipeline's sub-steps are costed by the SDDMM and SpMM models.
COST_MODELS = {"rows": attention_rows,
               "unfused": attention_unfused({"sddmm": sddmm.COST_MODELS, "spmm": spmm.COST_MODELS})}
# Its vendor composition's SDDMM is one of SDDMM's vendors; then the row softmax's steps.
HELPER_GROUPS = sddmm.HELPER_GROUPS + ("softmax", "softmax/{i}", "softmax/{c}/{i}")


def _input_shapes(graph, k: int, heads: int = 1) -> list[tuple[int, ...]]:
    return [(graph.n_rows, heads, k), (graph.n_cols, heads, k), (graph.n_cols, heads, k)]


def _prepare_vendor(dgraph, name: str, k: int, heads: int = 1, scale=None, dtype: str = dtypes.DEFAULT):
    return attention_vendor.prepare(dgraph, name, k, heads=heads, scale=scale, dtype=dtype)


def _reference(csr, inputs, scale=None, **options):
    from ..backends.reference import attention_reference   # SciPy, imported when a reference is made
    return attention_reference(csr, inputs, scale, **options)


def _device_reference(dgraph, inputs, scale=None, dtype: str = dtypes.DEFAULT):
    from ..backends import reference_device as device   # CuPy, imported when a reference is made
    return device.reference(device.attention, dgraph, inputs, scale, dtype,
                            out_elements=math.prod(inputs[0].shape),
                            per_edge=2 * int(inputs[0].shape[1]) + 1)   # scores, a gathered row term


SPEC = OpSpec(
    name="attention", dtypes=tuple(dtypes.DTYPES), operands=("Q", "K", "V"), multi_head=True, reads_values=False,
    prepare_native=native_attention.prepare,
    input_shapes=_input_shapes, output_shape=HeadsOutPlan.out_shape, reference=_reference,
    device_reference=_device_reference,
    gathers_per_edge=lambda heads: 2 * heads,          # K and V rows
    scores_per_edge=lambda heads: 2 * heads,           # scores, then probabilities
    vendor_names=attention_vendor.vendor_names,
    is_vendor=lambda name: name in attention_vendor.vendor_names(),
    prepare_vendor=_prepare_vendor,
    vendor_stream=lambda n_rows, nnz, k, heads: n_rows * k * heads,
    vendor_stages=3,                                   # SDDMM, softmax, SpMM
    baselines=("pyg",), default_vendor="vendor-unfused-default",
    accumulates=("features", "edges"), warmup_shape=(64, 4), cost_models=COST_MODELS,
    helper_groups=HELPER_GROUPS, vendor_imports=sddmm.SPEC.vendor_imports,
)
