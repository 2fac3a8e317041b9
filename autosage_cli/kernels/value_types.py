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
