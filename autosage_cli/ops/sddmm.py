"""SDDMM: out[e] = a_e * <X[i], Y[j]> for every edge e = (i, j). X: n_rows x K, Y: n_cols x K;
out: nnz values in CSR order. Vendors: cusparseSDDMM (nvmath-python, torch) and the gather-dot
composition."""
from __future__ import annotations

from .. import dtypes
from ..backends import native_sddmm
from ..backends.base import EdgesOutPlan
from ..backends.sddmm_providers import nvmath_cusparse
from ..backends.sddmm_vendor import VENDOR_PROVIDERS, prepare_sddmm, sddmm_vendor_names
from .cost.row_walks import sddmm_edges, sddmm_rows
from .spec import OpSpec

COST_MODELS = {"rows": sddmm_rows, "edges": sddmm_edges}
# The helper groups of its vendors (the gather-dot composition, and the check of a library
# provider): they gather rows per edge (kernels/util.py).
HELPER_GROUPS = ("edges/{i}", "gather/{c}/{i}", "sddmm_vendor", "sddmm_vendor/{c}")


def _import_cusparse_sddmm() -> None:
    """cusparseSDDMM's binding (nvmath-python), imported ahead of a tune's vendors."""
    nvmath_cusparse()


def _input_shapes(graph, k: int, heads: int = 1) -> list[tuple[int, ...]]:
    return [(graph.n_rows, k), (graph.n_cols, k)]


def _prepare_vendor(dgraph, name: str, k: int, heads: int = 1, scale=None, dtype: str = dtypes.DEFAULT):
    return prepare_sddmm(dgraph, name, k, dtype)


def _reference(csr, inputs, scale=None, **options):
    from ..backends.reference import sddmm_reference   # SciPy, imported when a reference is made
    return sddmm_reference(csr, inputs, scale, **options)


def _device_reference(dgraph, inputs, scale=None, dtype: str = dtypes.DEFAULT):
    from ..backends import reference_device as device   # CuPy, imported when a reference is made
    return device.reference(device.sddmm, dgraph, inputs, scale, dtype, out_elements=dgraph.nnz,
                            per_edge=2)


SPEC = OpSpec(
    name="sddmm", dtypes=tuple(dtypes.DTYPES), operands=("X", "Y"), multi_head=False,
    prepare_native=native_sddmm.prepare,
    input_shapes=_input_shapes, output_shape=EdgesOutPlan.out_shape, reference=_reference,
    device_reference=_device_reference,
    gathers_per_edge=lambda heads: 1, scores_per_edge=lambda heads: 0,
    vendor_names=sddmm_vendor_names,
    guardrail_vendor_names=lambda: sddmm_vendor_names(guardrail=True),
    is_vendor=lambda name: name in VENDOR_PROVIDERS,     # every provider, installed or not
    prepare_vendor=_prepare_vendor,
    # the output (one value per edge) and X, read once per row
    vendor_stream=lambda n_rows, nnz, k, heads: nnz + n_rows * k,
    accumulates=("features",), cost_models=COST_MODELS, helper_groups=HELPER_GROUPS,
    vendor_imports=(_import_cusparse_sddmm,),
)
