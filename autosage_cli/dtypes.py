"""Element types as values: one table of what autosage knows about each dense value type.

A dtype travels through autosage as its NumPy name ("float32", "float16", "bfloat16"): op inputs,
plans, verification, the decision cache key, probe records and benchmark rows all carry it. This
table answers every question about a name: the C++ type the kernels are instantiated with, the
element size (the cost model and memory estimates), and the verification tolerance. Which dtypes an
op *accepts* is the op spec's to say (`autosage_cli.ops`); a name missing here is unknown everywhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import AutosageError

DEFAULT = "float32"


@dataclass(frozen=True)
class DType:
    name: str          # the NumPy name, as the CLI, the cache and the results take it
    c_type: str        # the kernels' template argument (NVRTC name expressions)
    itemsize: int      # bytes per element
    # Verification limit on ||out - ref|| / ||ref|| against the float64 reference (or another
    # implementation): float32 sums in different reduction orders drift to ~1e-5 on long rows, so
    # 1e-4. The half types are a few units of their output rounding (2^-11, 2^-8) above that.
    tolerance: float


DTYPES: dict[str, DType] = {
    "float32": DType("float32", "float", 4, 1e-4),
    "float16": DType("float16", "__half", 2, 2e-3),
    "bfloat16": DType("bfloat16", "__nv_bfloat16", 2, 1.6e-2),
}


def info(dtype: str) -> DType:
    """The table row of `dtype`; an unknown name is a one-line AutosageError naming the known ones."""
    try:
        return DTYPES[dtype]
    except (KeyError, TypeError):
        raise AutosageError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}") from None


def c_type(dtype: str) -> str:
    return info(dtype).c_type


def itemsize(dtype: str) -> int:
    return info(dtype).itemsize


def tolerance(dtype: str) -> float:
    return info(dtype).tolerance


def require(dtype: str, supported, what: str) -> str:
    """`dtype` when it is among `supported`, else a one-line AutosageError naming them."""
    info(dtype)
    if dtype not in supported:
        raise AutosageError(f"dtype {dtype} is not supported for {what}; supported: {', '.join(supported)}")
    return dtype


def parse_list(text: str) -> tuple[str, ...]:
    """'float32,float16' -> ('float32', 'float16'): known names only, no empties, no repeats."""
    names = tuple(dict.fromkeys(part.strip() for part in str(text).split(",")))
    if not names or any(not n for n in names):
        raise AutosageError(f"--dtypes takes a comma list of dtype names, got {text!r}")
    for name in names:
        info(name)
    return names
