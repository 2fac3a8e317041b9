"""One performance target and its verdict (MET / MISSED / NOT MEASURED), as bench.targets and
bench.reorder_targets report them."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .rows import json_value


@dataclass(frozen=True)
class Target:
    name: str
    value: float
    threshold: float
    detail: str
    measured: bool
    unit: str = "×"
    at_most: bool = False        # a time budget (value <= threshold), not a floor

    @property
    def met(self) -> bool:
        # +inf is a value: a floor met because the baseline cannot run at all (GAT training)
        if not self.measured or math.isnan(self.value) or self.value == -math.inf:
            return False
        return self.value <= self.threshold if self.at_most else self.value >= self.threshold

    @property
    def bound(self) -> str:
        return f"{'≤' if self.at_most else '≥'} {self.threshold:g}{self.unit}"

    @property
    def verdict(self) -> str:
        return "NOT MEASURED" if not self.measured else ("MET" if self.met else "MISSED")

    def to_dict(self) -> dict:
        return {"name": self.name, "value": json_value(self.value), "threshold": self.threshold,
                "at_most": self.at_most, "unit": self.unit.strip(), "verdict": self.verdict,
                "detail": self.detail}
