"""One question asked of an op: `Case(op, k, heads, dtype)`, the value the tuner passes down its
probe (scheduler/tune.py -> probe_run -> probe) instead of a tuple whose order each step has to
know."""
from __future__ import annotations

from dataclasses import dataclass

from .. import dtypes


@dataclass(frozen=True)
class Case:
    op: str
    k: int                          # the dense width (d for attention)
    heads: int = 1
    dtype: str = dtypes.DEFAULT
