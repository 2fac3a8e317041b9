"""What the native SpMM and SDDMM plans share: the kernel lookup (one module per instantiation), the
int32 index check, the all-ones values check, and the host-side checks of dense operands that keep
a mis-laid array from being read as garbage (shape, stride, dtype, alignment for vector loads)."""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..errors import AutosageError
from ..kernels.compile import get_function
from ..kernels.schedule import Schedule
from .base import DeviceGraph

NULL = np.uint64(0)  # a null device pointer, passed by value (8 zero bytes)


def kernel_for(schedule: Schedule, dtype: str = dtypes.DEFAULT):
    """The compiled kernel of `schedule` for `dtype` operands: its own module, built on first use
    (or found in CuPy's disk cache), so a plan compiles only what it launches."""
    return get_function(schedule.source_file, schedule.name_expression(dtypes.c_type(dtype)))


def single_head(schedule: Schedule, heads: int, options: dict) -> None:
    """The check of the one-head ops' plans (SpMM, SDDMM): attention launches them per head."""
    if heads != 1:
        raise AutosageError(f"{schedule.op} runs one head; got heads={heads}")
    if options:
        raise AutosageError(f"options {sorted(options)} apply to attention only")


def require_int32(dgraph: DeviceGraph) -> None:
    if dgraph.indptr.dtype != np.int32 or dgraph.indices.dtype != np.int32:
        raise AutosageError(f"native kernels take int32 indices; this graph ({dgraph.host.describe()}) "
                            f"uses {dgraph.indices.dtype}: use a vendor backend")


def values_all_ones(dgraph: DeviceGraph) -> bool:
    """True when every value of A is exactly 1 (a pattern graph): the kernels then skip reading
    values (4 bytes per nonzero). Checked on the device once per graph."""
    key = "values_all_ones"
    if key not in dgraph.derived:
        from ..kernels import util

        dgraph.derived[key] = dgraph.nnz == 0 or util.count_not_equal(dgraph.values, 1.0) == 0
    return dgraph.derived[key]


def check_dense(name: str, arr, rows: int, k: int, ld: int, vec: int, dtype: str = dtypes.DEFAULT) -> None:
    """`arr` must hold `rows` rows of `k` `dtype` elements, row i at element i*ld from its first
    element, with base pointer and ld aligned for `vec`-wide vector accesses. Accepts a 2-D array
    (row stride ld, unit column stride) or a 1-D contiguous buffer."""
    size = check_dtype(name, arr, dtype)
    if ld < k:
        raise AutosageError(f"{name}: leading dimension {ld} is smaller than K={k}")
    if arr.ndim == 2:
        r, c = arr.shape
        if r < rows or c < k:
            raise AutosageError(f"{name}: expected at least {rows} x {k}, got {r} x {c}")
        if (c > 1 and arr.strides[1] != size) or (r > 1 and arr.strides[0] != ld * size):
            raise AutosageError(f"{name}: strides {arr.strides} do not match leading dimension {ld}")
    elif arr.ndim == 1:
        if arr.size > 1 and arr.strides[0] != size:
            raise AutosageError(f"{name}: a 1-D operand must be contiguous")
        if rows and arr.size < (rows - 1) * ld + k:
            raise AutosageError(f"{name}: {arr.size} elements cannot hold {rows} rows at ld={ld}")
    else:
        raise AutosageError(f"{name}: expected a 1-D or 2-D array, got {arr.ndim}-D")
    if vec > 1 and (arr.data.ptr % (vec * size) or ld % vec):
        raise AutosageError(f"{name}: {vec * size}-byte vector access needs an aligned base "
                            f"pointer and a leading dimension divisible by {vec} (ld={ld})")


def check_dtype(name: str, arr, dtype: str) -> int:
    """`arr` must be stored as `dtype` (bfloat16: uint16 bit patterns); returns the element size."""
    stored = dtypes.storage_dtype(dtype)
    if arr.dtype != np.dtype(stored):
        want = dtype if stored == dtype else f"{dtype} (stored as {stored})"
        raise AutosageError(f"{name}: expected {want}, got {arr.dtype}")
    return dtypes.itemsize(dtype)


def check_edge_vector(name: str, arr, nnz: int, dtype: str = dtypes.DEFAULT) -> None:
    """A per-edge `dtype` vector (values or SDDMM output): contiguous, at least nnz elements."""
    check_dtype(name, arr, dtype)
    if arr.size < nnz or (arr.size > 1 and not arr.flags.c_contiguous):
        raise AutosageError(f"{name}: expected a contiguous array of at least {nnz} elements")
