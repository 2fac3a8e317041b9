"""Device arrays in the three value types (autosage_cli/dtypes.py): float32, float16 and bfloat16.

bfloat16 lives on the device as its bit patterns in uint16 arrays. CuPy has no general bfloat16
dtype, and the kernels and cuSPARSE only need a pointer to 2-byte elements, so uint16 storage is
zero-copy and every CuPy operation the plans use on inputs (slicing, copies) treats the bits as they
are. The conversions run in autosage's helper module (kernels/util.py), not as CuPy elementwise
kernels (each of those is a compile the first time a machine runs it): float32 -> float16/bfloat16
rounds to nearest even (NaN kept a quiet NaN), exactly as __float2bfloat16_rn and ml_dtypes on the
host; float16/bfloat16 -> float32 is exact (a bfloat16 is the top half of a float32).
"""
from __future__ import annotations

from ..dtypes import DEFAULT, of_storage, info as dtype_info


def _helper_converts(x, out) -> bool:
    """Whether the helper module converts x into out (contiguous float32 <-> a narrow type)."""
    types = [of_storage(x.dtype), of_storage(out.dtype)]
    names = {t.name for t in types if t is not None}
    return (x.flags.c_contiguous and out.flags.c_contiguous and None not in types and DEFAULT in names
            and sum(t.narrow for t in types) == 1)


def _convert(x, stored, out):
    """x converted into a new array of `stored` (or into out): the helper module where it reads
    both types, else CuPy's own conversion (other source types: not on the tuning path)."""
    import cupy

    if out is None:
        out = cupy.empty(x.shape, dtype=stored)
    if _helper_converts(x, out):
        from ..kernels import util

        return util.convert(x, out)
    cupy.copyto(out, x, casting="unsafe")
    return out


def to_value_type(x, dtype: str, out=None):
    """A device array of `dtype`'s storage holding `x` (any real CuPy array) rounded to nearest even
    (written into `out` when given); `x` itself when it is stored so already and no `out` is given."""
    import cupy

    t = dtype_info(dtype)
    stored = cupy.dtype(t.storage)
    if out is None and x.dtype == stored:
        return x
    if t.bit_patterns and x.dtype != cupy.float32:   # only the helper module writes its bits
        x = _convert(x, cupy.float32, None)
    return _convert(x, stored, out)


def to_float32(x, dtype: str, out=None):
    """float32 values of a device array stored as `dtype` (exact; into `out` when given)."""
    import cupy

    if out is None and x.dtype == cupy.float32:
        return x
    return _convert(x, cupy.float32, out)


def graph_values(dgraph, dtype: str):
    """The device graph's edge values in `dtype` (made once, kept in dgraph.derived)."""
    name = dtype_info(dtype).name
    if name == DEFAULT:   # the device graph's own values are float32
        return dgraph.values
    key = ("values", name)
    if key not in dgraph.derived:
        dgraph.derived[key] = to_value_type(dgraph.values, name)
    return dgraph.derived[key]


def cuda_data_type(dtype: str) -> int:
    """The cudaDataType_t of `dtype` (CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF): its row's, the values
    of library_types.h (older CuPy builds do not export CUDA_R_16BF's name)."""
    return dtype_info(dtype).cuda_data_type
