"""The kernel-family contract: what one family (one templated kernel in a cuda/ file) tells the
rest of autosage about itself.

A family is one `Family` value in its op's family module (`spmm_families`, `sddmm_families`,
`attention_families`); `schedule.FAMILIES` joins those tables explicitly, so importing
`kernels.schedule` is enough for every family to be known. The hooks receive a
`kernels.schedule.Schedule`; this module and the family modules never import it (schedule.py
imports them), so the imports stay one way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Family:
    op: str                                        # the op it computes: "spmm" | "sddmm" | "attention"
    source_file: str                               # file name under cuda/
    name_expression: Callable[..., str]            # (schedule, dtype) -> "kernel<dtype, ...>"
    supports: Callable[..., Optional[str]]         # (schedule, k, heads) -> None or the reason it cannot
    knobs: str                                     # one line: what the Schedule fields mean here
    # Threads one work item takes when it is not `lanes` (e.g. a warp per row with lanes < 32).
    lanes_per_item: Optional[Callable[..., int]] = None


def first_reason(*reasons: Optional[str]) -> Optional[str]:
    """The first refusal among a family's predicates (None when every one accepts)."""
    return next((r for r in reasons if r), None)
