"""Device arrays in the three value types (autosage_cli/dtypes.py): float32, float16 and bfloat16.

bfloat16 lives on the device as its bit patterns in uint16 arrays. CuPy has no general bfloat16
dtype, and the kernels and cuSPARSE only need a pointer to 2-byte elements, so uint16 storage is
zero-copy and every CuPy operation the plans use on inputs (slicing, take, fill, copy) treats the
bits as they are. The two conversions are explicit elementwise kernels: float32 -> bfloat16 rounds
to nearest even (NaN kept a quiet NaN), exactly as __float2bfloat16_rn and ml_dtypes on the host;
bfloat16 -> float32 is exact (the bits are the top half of a float32). float16 is CuPy's own dtype.
"""
from __future__ import annotations

from ..dtypes import storage_dtype, info as dtype_info

_TO_BF16 = None
_FROM_BF16 = None


def _bf16_kernels():
    global _TO_BF16, _FROM_BF16
    if _TO_BF16 is None:
        import cupy

        _TO_BF16 = cupy.ElementwiseKernel(
            "float32 x", "uint16 y",
            "unsigned int b = __float_as_uint(x);"
            "y = (b & 0x7fffffffu) > 0x7f800000u ? (unsigned short)((b >> 16) | 0x40u)"
            "  : (unsigned short)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);",
            "autosage_float32_to_bfloat16")
        _FROM_BF16 = cupy.ElementwiseKernel(
            "uint16 x", "float32 y", "y = __uint_as_float(((unsigned int)x) << 16);",
            "autosage_bfloat16_to_float32")
    return _TO_BF16, _FROM_BF16


def to_value_type(x, dtype: str, out=None):
    """A device array of `dtype`'s storage holding `x` (any real CuPy array) rounded to nearest even
    (written into `out` when given); `x` itself when it is stored so already and no `out` is given."""
    import cupy

    name = dtype_info(dtype).name
    stored = cupy.dtype(storage_dtype(name))
    if out is None and x.dtype == stored:
        return x
    if name == "bfloat16" and x.dtype != stored:
        args = (x.astype(cupy.float32, copy=False),) + (() if out is None else (out,))
        return _bf16_kernels()[0](*args)
    if out is None:
        return x.astype(stored)
    cupy.copyto(out, x, casting="unsafe")
    return out


def to_float32(x, dtype: str, out=None):
    """float32 values of a device array stored as `dtype` (exact; into `out` when given)."""
    import cupy

    if dtype_info(dtype).name == "bfloat16":
        return _bf16_kernels()[1](*((x,) if out is None else (x, out)))
    if out is None:
        return x.astype(cupy.float32, copy=False)
    cupy.copyto(out, x, casting="unsafe")
    return out


def graph_values(dgraph, dtype: str):
    """The device graph's edge values in `dtype` (made once, kept in dgraph.derived)."""
    name = dtype_info(dtype).name
    if name == "float32":
        return dgraph.values
    key = ("values", name)
    if key not in dgraph.derived:
        dgraph.derived[key] = to_value_type(dgraph.values, name)
    return dgraph.derived[key]


def cuda_data_type(dtype: str) -> int:
    """The cudaDataType_t of `dtype` (CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF)."""
    from cupy_backends.cuda.api import runtime

    name = dtype_info(dtype).name
    # CUDA_R_16BF is 14 in library_types.h; older CuPy builds do not export the name.
    return {"float32": runtime.CUDA_R_32F, "float16": runtime.CUDA_R_16F,
            "bfloat16": getattr(runtime, "CUDA_R_16BF", 14)}[name]
