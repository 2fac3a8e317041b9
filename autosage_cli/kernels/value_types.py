"""The element types the kernels are instantiated for: the dtype names autosage takes, the C++ type
each one is in the kernels (a template argument of every family) and its size in bytes.

Every kernel accumulates in float32 whatever it loads and stores (cuda/common.cuh): the 2-byte
types only change what moves through memory. A vector load moves at most 16 bytes, so the widest
vector is 4 floats or 8 halves; `vector_bytes_fit` says when a schedule's width is too wide for a
type.
"""
from __future__ import annotations

from dataclasses import dataclass

MAX_VECTOR_BYTES = 16   # one ld.global.v4.u32 / ld.global.v2.u64: the widest load the kernels issue


@dataclass(frozen=True)
class ValueType:
    name: str       # the dtype name users give: "float32", "float16", "bfloat16"
    c_type: str     # the C++ type in the kernels' name expressions
    itemsize: int   # bytes per element

    @property
    def max_vec(self) -> int:
        """The widest vector (elements per load) of this type."""
        return MAX_VECTOR_BYTES // self.itemsize


VALUE_TYPES: dict[str, ValueType] = {
    "float32": ValueType("float32", "float", 4),
    "float16": ValueType("float16", "__half", 2),
    "bfloat16": ValueType("bfloat16", "__nv_bfloat16", 2),
}
_BY_C_TYPE = {t.c_type: t for t in VALUE_TYPES.values()}


def value_type(dtype: str) -> ValueType:
    """The value type of a dtype name ("bfloat16") or of its C++ type ("__nv_bfloat16");
    ValueError naming the choices otherwise."""
    found = VALUE_TYPES.get(str(dtype)) or _BY_C_TYPE.get(str(dtype))
    if found is None:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(VALUE_TYPES)}")
    return found


def vector_bytes_fit(vec: int, dtype: str) -> str | None:
    """None when `vec` elements of `dtype` fit one vector load; otherwise the reason."""
    t = value_type(dtype)
    if vec > t.max_vec:
        return (f"vec={vec} x {t.itemsize}-byte {t.name} is {vec * t.itemsize} bytes, wider than "
                f"the {MAX_VECTOR_BYTES}-byte vector loads (at most {t.max_vec} per load)")
    return None


# ------------------------------------------------------------------ rounding and tolerance

# Unit roundoff u = 2^-p of each type (p significand bits, the implicit one included): the largest
# relative error of rounding one value to nearest.
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}
# The float32 bound: two float32 implementations summing in widely different orders (long rows).
FLOAT32_TOLERANCE = 1e-4
# Roundings to the value type whose errors can reach an output: the output's own, the unfused
# attention's scores and probabilities, and a vendor's own output when it is the reference.
ROUNDINGS = 3
# lambda of the probabilistic bound on a float32 sum of n terms, lambda * sqrt(n) * u (Higham and
# Mary, 2019): holds with probability above 1 - 2 exp(-lambda^2 / 2) per sum.
SUM_LAMBDA = 4.0


def tolerance(dtype: str, length: int) -> float:
    """The relative-error bound (docs/MEASUREMENT.md) of an output in `dtype` whose longest float32
    sum has `length` terms, against a float64 reference computed from the inputs as rounded to
    `dtype`: the float32 bound, or the roundings to `dtype` plus the float32 sum's drift when that
    is larger. A function of the type and the length only, never of a case; float32 keeps 1e-4 for
    every sum shorter than ~170k terms."""
    t = value_type(dtype)
    u_out = UNIT_ROUNDOFF[t.name] if t.itemsize < 4 else 0.0
    drift = SUM_LAMBDA * max(1, int(length)) ** 0.5 * UNIT_ROUNDOFF["float32"]
    return max(FLOAT32_TOLERANCE, ROUNDINGS * u_out + drift)


def accumulation_length(op: str, k: int, max_degree: int) -> int:
    """The most terms one output sums: a row's edges (SpMM; attention's softmax and weighted sum)
    or K products (SDDMM; attention's dot products)."""
    if op == "sddmm":
        return max(1, int(k))
    if op == "spmm":
        return max(1, int(max_degree))
    return max(1, int(k), int(max_degree))


def to_storage(x, dtype: str):
    """Host values rounded to nearest even into `dtype`'s storage: float32, float16, or the bit
    patterns (uint16) of bfloat16 (the kernels read them as __nv_bfloat16; NumPy has no bfloat16,
    ml_dtypes rounds exactly as __float2bfloat16_rn)."""
    import numpy as np

    t = value_type(dtype)
    x = np.asarray(x)
    if t.name == "bfloat16":
        import ml_dtypes

        return x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    return x.astype(np.float16 if t.name == "float16" else np.float32)


def storage_dtype(dtype: str) -> str:
    """The NumPy/CuPy dtype an array of `dtype` is stored in: "float32", "float16", "uint16"."""
    t = value_type(dtype)
    return {"float32": "float32", "float16": "float16", "bfloat16": "uint16"}[t.name]


def from_storage(a, dtype: str):
    """float64 values of a host array stored as `dtype` (exact: every value of the 2-byte types
    and of float32 is a float64)."""
    import numpy as np

    a = np.asarray(a)
    if value_type(dtype).name == "bfloat16":
        # a bfloat16 is the top half of the float32 with the same bits
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)
