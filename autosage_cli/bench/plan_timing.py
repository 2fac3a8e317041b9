"""How the benchmark measures one plan of a case: verified against the case's reference, then timed
within a budget (`PlanTimer`), into a `Measured` outcome; bench/case.py turns outcomes into rows."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..errors import one_line
from ..scheduler.probing.measure import compare

# The rows' own timing, as the probe spends its budget (scheduler/probing/probe.py): every plan's first
# timed launch follows its verification run, which is its warm-up; the run's repeats and warm-ups
# are cut to fit PLAN_BUDGET_MS (never below MIN_REPEATS) for autosage's rows, the natives, the
# baselines and the fastest vendor, and to OTHER_VENDOR_BUDGET_MS for the other vendors (they are
# not the bar anything is compared with). A vendor more than VENDOR_SCREEN_RATIO x the fastest
# after its first timed launch keeps that one launch, and its row says so. A case whose launches
# take milliseconds is timed exactly as before; one whose vendor composition takes hundreds of ms
# per launch (attention in bfloat16 on 100M edges: the gather-dot SDDMM) costs seconds, not minutes.
PLAN_BUDGET_MS = 3000.0
OTHER_VENDOR_BUDGET_MS = 1000.0
VENDOR_SCREEN_RATIO = 3.0
MIN_REPEATS = 3


def timing_batch(first_ms: float, repeat: int, warmup: int, budget_ms: float) -> tuple[int, int]:
    """(repeats, warm-ups) of a plan whose first timed launch took `first_ms`: the run's when all
    of them fit `budget_ms`, else one warm-up and as many repeats as fit the rest (at least
    min(MIN_REPEATS, repeat))."""
    if not math.isfinite(first_ms) or first_ms * (repeat + warmup) <= budget_ms:
        return repeat, warmup
    fit = int((budget_ms - first_ms) // max(first_ms, 1e-6))
    return max(min(MIN_REPEATS, repeat), min(repeat, fit)), 1


@dataclass
class Measured:
    """One plan's outcome: status "ok" (verified and timed), "wrong" or "failed"."""
    backend: str
    schedule: str
    status: str
    ms: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    repeats: int = 0
    prepare_ms: float = math.nan
    compile_ms: float = math.nan
    rel_error: float = math.nan
    error: str = ""
    provider: str = ""
    out: object = None
    reason: str = ""       # why it was timed less than the run's repeats (a screened vendor)


def as_float(value) -> float:
    return math.nan if value is None else float(value)


class PlanTimer:
    """Verifies and times the plans of one case through the toolkit `tk` on the case's inputs and
    reference (set by the case once made; `no_reference` says why there is none)."""

    def __init__(self, tk, opts, tolerance: float):
        self.tk, self.opts, self.tolerance = tk, opts, tolerance
        self.inputs = None
        self.reference = None
        self.no_reference = ""

    def prepare(self, backend: str, schedule: str, prepare: Callable[[], object]):
        try:
            return prepare(), None
        except Exception as exc:  # a failing prepare is an outcome (failures are outcomes, recorded as rows)
            return None, Measured(backend, schedule, "failed", error=f"prepare: {one_line(exc, 300)}")

    def measure(self, plan, backend: str | None = None, verify: bool = True,
                repeat: int | None = None) -> Measured:
        """Verify against the reference, then time (only if it verified): one launch right after
        the verification run (its warm-up), then the run's repeats within PLAN_BUDGET_MS
        (`timing_batch`); `repeat`=1 keeps the one launch (the exhaustive screen). Without
        `verify` the output is kept in `out` (the vendors', for the reference rule)."""
        name = backend or str(getattr(plan, "backend", ""))
        schedule = getattr(plan, "schedule", name)
        m = Measured(name, str(getattr(schedule, "name", schedule)), "ok",
                     prepare_ms=as_float(getattr(plan, "prepare_ms", None)),
                     compile_ms=as_float(getattr(plan, "compile_ms", None)),
                     provider=str(getattr(plan, "provider", "") or ""))
        try:
            out = self.tk.run(plan, self.inputs)
            if verify and self.reference is None:
                m.status, m.error = "unverified", self.no_reference
            elif verify:
                m.rel_error, failure = compare(self.tk, out, self.reference, self.tolerance)
                if failure:
                    m.status, m.error = "wrong", failure
                    return m
            self.time(m, plan, out, 1, 0)
            if repeat != 1:
                self.time(m, plan, out, *timing_batch(m.ms[0], repeat or self.opts.repeat,
                                                       self.opts.warmup, PLAN_BUDGET_MS))
            m.out = out if not verify else None
        except Exception as exc:
            m.status, m.error = "failed", f"run: {one_line(exc, 300)}"
        return m

    def time(self, m: Measured, plan, out, repeat: int, warmup: int) -> None:
        stats = self.tk.time(plan, self.inputs, out, repeat, warmup, flush_l2=self.opts.flush_l2)
        m.ms, m.repeats = (stats.median_ms, stats.p20_ms, stats.p80_ms), int(stats.repeats)
