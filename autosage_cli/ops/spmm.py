"""SpMM: C = A @ B. B: n_cols x K; C: n_rows x K. Vendors: the cuSPARSE SpMM algorithms."""
from __future__ import annotations

from .. import dtypes
from ..backends import native_spmm
from ..backends.base import RowsOutPlan
from ..backends.cusparse import SPMM_NAMES, prepare_spmm
from .cost.edge_models import parreduce_spmm, stream_spmm, vector_spmm
from .cost.row_walks import spmm_rows
from .spec import OpSpec

# The models of its families' walks, by the name each family's `cost` gives.
COST_MODELS = {"rows": spmm_rows, "edge-parallel": vector_spmm,
               "persistent-edge-parallel": parreduce_spmm, "stream": stream_spmm}


def _input_shapes(graph, k: int, heads: int = 1) -> list[tuple[int, ...]]:
    return [(graph.n_cols, k)]


def _prepare_vendor(dgraph, name: str, k: int, heads: int = 1, scale=None, dtype: str = dtypes.DEFAULT):
    return prepare_spmm(dgraph, name, k, dtype)


def _reference(csr, inputs, scale=None, **options):
    from ..backends.reference import spmm_reference   # SciPy, imported when a reference is made
    return spmm_reference(csr, inputs, scale, **options)


def _device_reference(dgraph, inputs, scale=None, dtype: str = dtypes.DEFAULT):
    from ..backends import reference_device as device   # CuPy, imported when a reference is made
    return device.reference(device.spmm, dgraph, inputs, scale, dtype,
                            out_elements=dgraph.n_rows * int(inputs[0].shape[1]), per_edge=1)


SPEC = OpSpec(
    name="spmm", dtypes=tuple(dtypes.DTYPES), operands=("B",), multi_head=False,
    prepare_native=native_spmm.prepare,
    input_shapes=_input_shapes, output_shape=RowsOutPlan.out_shape, reference=_reference,
    device_reference=_device_reference,
    gathers_per_edge=lambda heads: 1, scores_per_edge=lambda heads: 0,
    vendor_names=lambda: list(SPMM_NAMES), is_vendor=lambda name: name in SPMM_NAMES,
    prepare_vendor=_prepare_vendor,
    vendor_stream=lambda n_rows, nnz, k, heads: n_rows * k * heads,
    baselines=("torch",), default_vendor="cusparse-default", cost_models=COST_MODELS,
)
