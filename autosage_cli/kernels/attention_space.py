"""The attention schedule space: the schedules every attention family's entry generates
(attention_families.py: value lists, space rules and the reasons behind them), in table order, then
the 16-byte shapes of the 2-byte types, so float32's names keep their order. Never copied kernels.

It also lists every kernel an attention schedule launches, from the entries (`expressions`,
`file_expressions`: the combine and heavy-row softmax kernels are not families of their own), and
`additive_expressions`: the kernels of the families with an additive (GAT) score variant, which
plans build on first use (a tune of the dot-product attention never compiles them).
"""
from __future__ import annotations

from .attention_families import (  # the sources and expressions are the plans' too
    FAMILIES, FUSED_SOURCE, MAX_FEATURES, SOFTMAX_SOURCE, additive_expression,
    additive_stats_expression, combine_expression, fused_expression, softmax_expression,
    softmax_heavy_expression, vectors_per_lane)
from .schedule import Schedule, check_family_rules, family_space
from ..dtypes import vector_bytes_fit

INDEX_TYPES = {"int32": "int", "int64": "long long"}


def expressions(s: Schedule, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """Every kernel one schedule launches (the primary one first)."""
    return FAMILIES[s.family].kernels(s, dtype, index)


def additive_expressions(dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """Every additive-score (GAT) instantiation over the schedules whose family has that variant.
    They are not part of `expressions`: a tune of the dot-product attention never builds them; a
    plan builds its own on first use."""
    return tuple(sorted({additive_expression(s, dtype, index) for s in SCHEDULES
                         if FAMILIES[s.family].variant("additive") and vector_bytes_fit(s.vec, dtype) is None}
                        | {additive_stats_expression(index)}))


def file_expressions(source_file: str, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """All instantiations of one kernel file over the registry (the schedules whose vector width
    `dtype` allows): compiled into one module."""
    return tuple(sorted({e for s in SCHEDULES if s.source_file == source_file
                         and vector_bytes_fit(s.vec, dtype) is None
                         for e in expressions(s, dtype, index)}))


def check_space_rules(s: Schedule) -> None:
    """Family rules beyond Schedule.validate(); raises ValueError."""
    s.validate()
    if s.family not in FAMILIES:
        raise ValueError(f"{s.name}: not an attention schedule")
    check_family_rules(s)


SCHEDULES: tuple[Schedule, ...] = family_space(FAMILIES)
for _s in SCHEDULES:
    check_space_rules(_s)
