"""The SDDMM schedule space: the schedules every SDDMM family's entry generates (sddmm_families.py:
value lists, space rules and the reasons behind them), in table order, then the 16-byte shapes
of the 2-byte types, so float32's names keep their order. Never copied kernels.
"""
from __future__ import annotations

from .schedule import Schedule, check_family_rules, family_space
from .sddmm_families import FAMILIES


def check_space_rules(s: Schedule) -> None:
    """Family rules beyond Schedule.validate(); raises ValueError."""
    check_family_rules(s)


SCHEDULES: tuple[Schedule, ...] = family_space(FAMILIES)
for _s in SCHEDULES:
    check_space_rules(_s)
