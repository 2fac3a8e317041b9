"""What every native attention plan shares, the fused ones (native_attention) and the unfused
pipeline (attention_unfused): the score scale, the index type of a graph's arrays, the kernel lookup,
the check of (Q, K, V, out) and the bias pointer."""
from __future__ import annotations

import math

import numpy as np

from ..kernels import attention_space as space
from ..kernels.compile import get_function
from .base import DeviceGraph, HeadsOutPlan, Plan


def attention_scale(d: int, scale: float | None = None) -> float:
    """The score scale: `scale` when given, else 1/sqrt(d)."""
    if scale is not None:
        value = float(scale)
        if not math.isfinite(value):
            raise ValueError(f"attention scale must be finite, got {scale}")
        return value
    if d < 1:
        raise ValueError(f"d must be >= 1, got {d}")
    return 1.0 / math.sqrt(d)


def index_type(dgraph: DeviceGraph) -> str:
    """The C++ index type of the graph's arrays (int while nnz < 2^31, else long long)."""
    return space.INDEX_TYPES["int64" if dgraph.indices.dtype == np.int64 else "int32"]


def kernel(source_file: str, expression: str):
    """A compiled kernel: its own module, built on first use (or found in CuPy's disk cache)."""
    return get_function(source_file, expression)


def check_inputs(plan: Plan, inputs: tuple, out, vec: int = 1) -> None:
    """Shapes, dtype and layout of (Q, K, V) and out; vector loads also need aligned pointers.
    Raises ValueError: a wrong layout would otherwise be read as garbage."""
    names = ("Q", "K", "V")
    if len(inputs) != 3:
        raise ValueError(f"attention takes (Q, K, V), got {len(inputs)} inputs")
    g, heads, d = plan.graph, plan.heads, plan.k
    shapes = ((g.n_rows, heads, d), (g.n_cols, heads, d), (g.n_cols, heads, d))
    arrays = list(zip(names, inputs, shapes)) + [("out", out, HeadsOutPlan.out_shape(g, d, heads))]
    for name, arr, shape in arrays:
        if tuple(arr.shape) != tuple(shape) or str(arr.dtype) != plan.dtype or not arr.flags.c_contiguous:
            raise ValueError(f"{name}: expected a C-contiguous {plan.dtype} array of shape {tuple(shape)}, "
                             f"got {arr.dtype} {tuple(arr.shape)}")
        if arr.data.ptr % (4 * vec):
            raise ValueError(f"{name}: {4 * vec}-byte vector loads need an aligned base pointer")


def values_arg(dgraph: DeviceGraph, use_values: bool):
    """The bias pointer the kernels take: A's values, or a null pointer (no bias)."""
    return dgraph.values if use_values and dgraph.nnz else np.uint64(0)
