"""The op registry: one spec per op (`spmm`, `sddmm`, `attention`), in a fixed order.

`get(op)` is the spec (an unknown op is a one-line error naming the known ones), `names()` the ops in
order, `require_dtype(op, dtype)` the check every entry point makes, `supported_dtypes()` the dtypes
some op accepts.
"""
from __future__ import annotations

from ..dtypes import DTYPES
from ..errors import AutosageError
from . import attention, sddmm, spmm
from .spec import OpSpec

SPECS: dict[str, OpSpec] = {s.name: s for s in (spmm.SPEC, sddmm.SPEC, attention.SPEC)}


def names() -> tuple[str, ...]:
    return tuple(SPECS)


def get(op: str) -> OpSpec:
    try:
        return SPECS[op]
    except (KeyError, TypeError):
        raise AutosageError(f"unknown op {op!r}; choose one of {', '.join(SPECS)}") from None


def require_dtype(op: str, dtype: str) -> str:
    return get(op).require_dtype(dtype)


def supported_dtypes(ops=None) -> tuple[str, ...]:
    """The dtypes at least one of `ops` (default: every op) accepts, in table order."""
    wanted = [get(op) for op in (ops or SPECS)]
    return tuple(d for d in DTYPES if any(d in spec.dtypes for spec in wanted))
