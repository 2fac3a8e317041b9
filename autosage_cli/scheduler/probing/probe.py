"""Micro-probes: time the top candidates and every vendor algorithm on the whole graph or on the
sample `sample.py` draws (policy.py says which); how the verified plans are timed is screen.py's.

Measuring goes through the measurer (scheduler/probing/measure.py: the GPU one by default; its reference
rule and verification are the benchmark's too) so the loop itself — verify against the vendor,
time every verified candidate and vendor at least MIN_REPEATS times, spend what is left of the
budget on more repeats — is tested on a CPU with a fake.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

from ... import dtypes, ops as op_specs
from ...errors import one_line  # probe failures are recorded as one line (replay uses it too)
from .measure import GpuMeasurer, compare, vendor_reference  # noqa: F401  (GpuMeasurer: callers' default)
from .phases import PhaseClock
# The screen's constants and merge_batches are the probe's own, as callers (tune, the bench) know them.
from .screen import (COLD_SCREEN_RATIO, MAX_REPEAT, MIN_REPEATS, SCREEN_RATIO, WARMUP, Budget, Live,
                     batch, interleave, merge_batches, screened_cold, time_all)

REL_TOLERANCE = dtypes.tolerance("float32")   # per dtype: dtypes.tolerance (docs/MEASUREMENT.md)
DEFAULT_BUDGET_MS = 600.0   # measured GPU time across all candidates and vendors: what a 1 s cold
                            # tune leaves for it (policy.py). Every plan's verification and one
                            # timed launch, and MIN_REPEATS of the fastest native and vendor, are
                            # spent whatever the budget; it plans the rest.


# ------------------------------------------------------------------ records

@dataclass
class ProbeRecord:
    """One candidate's (or vendor algorithm's) outcome on the probe graph."""
    name: str                   # schedule name or vendor name
    backend: str                # "native" or the vendor name
    estimate_ms: float | None = None
    status: str = "pending"     # "ok" | "failed" | "skipped"
    reason: str = ""
    ms: float | None = None     # median
    p20_ms: float | None = None
    p80_ms: float | None = None
    repeats: int = 0
    rel_error: float | None = None
    prepare_ms: float | None = None
    params: dict = field(default_factory=dict)
    graph: str = ""             # where it was timed: "full" (the whole graph) or "sample"
    compile_ms: float | None = None   # building its kernels, before prepare (natives only)

    @property
    def ok(self) -> bool:
        return self.status == "ok" and self.ms is not None

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["rel_error"] is not None and not math.isfinite(d["rel_error"]):
            d["rel_error"] = "inf"   # JSON has no Infinity
        return d


@dataclass
class ProbeResult:
    natives: list[ProbeRecord]
    vendors: list[ProbeRecord]
    reference: str              # what the natives were checked against
    spent_ms: float             # measured GPU time (the budget's currency)
    wall_ms: float
    budget_ms: float = DEFAULT_BUDGET_MS
    floor_ms: float = 0.0       # GPU time of the guaranteed minimum (verify, warm-up, MIN_REPEATS)
    compile_ms: float = 0.0     # wall time of building the candidates' kernels (part of wall_ms)
    phases: PhaseClock = field(default_factory=PhaseClock)   # where the rest of wall_ms went

    @property
    def overrun_ms(self) -> float:
        """How far the probe went over its budget (the minimum is spent whatever the budget)."""
        return max(0.0, self.spent_ms - self.budget_ms)


# ------------------------------------------------------------------ measuring: scheduler/probing/measure.py

# ------------------------------------------------------------------ the probe loop

def probe_candidates(dgraph, op: str, k: int, heads: int, candidates, vendor_names,
                     budget_ms: float = DEFAULT_BUDGET_MS, measure=None, seed: int = 0,
                     progress=None, where: str = "", dtype: str = dtypes.DEFAULT,
                     clock: PhaseClock | None = None) -> ProbeResult:
    """Verify and time `candidates` [(Schedule, estimate_ms)] and every vendor algorithm on `dgraph`
    with `dtype` operands (`where` it is, "full" or "sample", is recorded in every record).

    1. Every vendor algorithm is prepared and run once; the reference is the first (registry order)
       whose output another vendor confirms (a lone vendor is trusted; if none agree, the float64
       SciPy reference decides), and a vendor that disagrees with it fails.
    2. Each native candidate, in estimate order, is prepared, run once into a NaN-poisoned output and
       compared with the reference (rel. error <= the dtype's tolerance, 1e-4 for float32, or it
       fails "mismatch" and is never timed).
    3. Timing (screen.py): every verified plan gets one timed launch WHATEVER the budget (a
       candidate is never dropped for budget: that is how the vendor once won by default), right
       after its verification run, which serves as its warm-up; a vendor whose verification run
       was already COLD_SCREEN_RATIO behind keeps that run as its one time. Those within
       SCREEN_RATIO of their group's fastest get MIN_REPEATS in all, interleaved vendor / native
       so no group waits on the other: the fastest native and vendor always, the others as the
       budget allows, planned from their measured launch; what is left of the budget then buys
       more repeats (up to MAX_REPEAT), shared equally, for the natives and the fastest vendor (the
       guardrail's bar; a slower vendor cannot lower it). The result says when the minimum alone
       overran the budget, and by how much.
    Any exception is recorded against its candidate; every plan is closed at the end. `clock`
    (phases.PhaseClock) collects the wall time of each phase."""
    measure = measure or GpuMeasurer()
    say = progress or (lambda _msg: None)
    clock = clock if clock is not None else PhaseClock()
    t0 = time.perf_counter()
    budget = Budget(budget_ms)
    tol = op_specs.case_tolerance(op, dtype, k, int(dgraph.host.row_degrees().max(initial=0)))
    # Kernels first: the groups of helper kernels this tune launches (inputs, poisoning,
    # verification, its vendors' steps: kernels/util.py tune_groups) compile on the same thread
    # pool as the candidates' modules (kernels.compile), not before them.
    op_options = op_specs.native_options(op)   # an op running another op's schedules names itself
    compiled, compile_ms = _compile_candidates(measure, dgraph, candidates, k, heads, dtype, say, op_options)
    with clock.phase("inputs"):
        inputs = measure.inputs(dgraph, op, k, heads, seed, dtype)
    vendors = [ProbeRecord(name=v, backend=v, graph=where) for v in vendor_names]
    natives = [ProbeRecord(name=s.name, backend="native", estimate_ms=float(est), params=s.params(), graph=where)
               for s, est in candidates]
    live_vendors: list[Live] = []
    live_natives: list[Live] = []
    try:
        reference, ref_name, scratch = _probe_vendors(measure, dgraph, op_specs.Case(op, k, heads, dtype), vendors,
                                                      live_vendors, inputs, tol, budget, clock, say)
        for rec, (schedule, _est) in zip(natives, candidates):
            rec.compile_ms, error = compiled.get(rec.name, (None, None))
            if error:
                rec.status, rec.reason = "failed", f"compile: {error}"
                continue
            say(f"probe {rec.name}")
            got = _prepare_and_run(measure, rec, lambda s=schedule: measure.prepare_native(
                dgraph, s, k, heads, None, dtype, **op_options), inputs, reference, tol, clock)
            if got is not None:
                live_natives.append(Live(rec, got[0]))
                # The screening launch right after the verification run, which is its warm-up.
                batch(measure, live_natives[-1], inputs, got[1], 1, budget, verify_run=True, warmup=0,
                      clock=clock)
                scratch = got[1] if scratch is None else scratch
        if scratch is None and (live_vendors or live_natives):
            scratch = reference.copy()     # timing writes somewhere; never into the reference

        floor_ms = time_all(measure, interleave(live_vendors, live_natives), inputs, scratch, budget, clock)
    finally:
        for lv in live_vendors + live_natives:
            _close(lv.plan)
    result = ProbeResult(natives, vendors, ref_name, budget.spent, (time.perf_counter() - t0) * 1e3,
                         budget.total, floor_ms, compile_ms, clock)
    if result.overrun_ms > 0:
        say(f"probe used {result.spent_ms:.0f} ms of GPU time, {result.overrun_ms:.0f} ms over its "
            f"{budget.total:g} ms budget: every verified plan is timed once and the fastest native and "
            f"vendor {MIN_REPEATS} times regardless")
    return result


def _probe_vendors(measure, dgraph, case, vendors: list[ProbeRecord], live: list[Live], inputs,
                   tol: float, budget: Budget, clock: PhaseClock, say):
    """Prepare, run and screen every vendor algorithm, the op's default entry first (cuSPARSE's
    default SpMM: within 6% of the fastest vendor at K >= 16 on the H200's 100M-edge graphs, where
    ALG1 ran up to 13x slower: a bar the slow ones are screened against), the rest in vendor
    order: each screening launch right after its verification run, which warms it up, unless
    that run was already COLD_SCREEN_RATIO behind the fastest screened vendor. Then pick the reference by the measurer's rule (vendor order) and drop
    the vendors that disagree with it. Returns (reference output, its name, a spare output)."""
    op, k, heads, dtype = case.op, case.k, case.heads, case.dtype
    outputs = {}
    for rec in _untuned_first(op, vendors):
        say(f"probe vendor {rec.name}")
        got = _prepare_and_run(measure, rec, lambda n=rec.name: measure.prepare_vendor(
            dgraph, n, k, heads, None, dtype), inputs, tol=tol, clock=clock, role="vendor")
        if got is None:
            continue
        item = Live(rec, got[0])
        live.append(item)
        outputs[rec.name] = got[1]
        if not screened_cold(item, got[2], live, budget):
            batch(measure, item, inputs, got[1], 1, budget, verify_run=True, warmup=0, clock=clock)
    outputs = {r.name: outputs[r.name] for r in vendors if r.name in outputs}   # the rule's order
    with clock.phase("reference"):
        reference, ref_name = _vendor_reference(measure, op, dgraph, inputs, [r for r in vendors if r.name in outputs],
                                                outputs, tol, dtype)
    scratch = next((out for out in outputs.values() if out is not reference), None)
    for lv in [lv for lv in live if lv.rec.status == "failed"]:
        _close(lv.plan)
        live.remove(lv)
    return reference, ref_name, scratch


def _untuned_first(op: str, vendors: list[ProbeRecord]) -> list[ProbeRecord]:
    """`vendors` with the op's default entry (what an untuned user gets) first, if it is one."""
    first = op_specs.get(op).default_vendor
    return sorted(vendors, key=lambda r: r.name != first)


def _compile_candidates(measure, dgraph, candidates, k: int, heads: int, dtype: str,
                        say, op_options=None) -> tuple[dict, float]:
    """({name: (ms, error)}, wall ms): every candidate's kernels built in parallel before the first
    is prepared, so the probe pays the slowest compile rather than the sum. A measurer without
    `compile_native` builds nothing here (its plans compile when prepared)."""
    compile_native = getattr(measure, "compile_native", None)
    if compile_native is None or not candidates:
        return {}, 0.0
    say(f"compiling the kernels of {len(candidates)} candidates")
    t0 = time.perf_counter()
    try:
        compiled = compile_native(dgraph, [s for s, _ in candidates], k, heads, dtype, **(op_options or {}))
    except Exception as exc:   # e.g. no NVRTC: each candidate then fails at prepare with its reason
        say(f"compiling ahead failed ({one_line(exc)}); each candidate compiles when prepared")
        compiled = {}
    return compiled, (time.perf_counter() - t0) * 1e3


def _vendor_reference(measure, op, dgraph, inputs, ran: list[ProbeRecord], outputs: dict,
                      tol: float = REL_TOLERANCE, dtype: str = dtypes.DEFAULT):
    """(reference output, its name) by the measurer's one rule; marks each vendor's error
    against it, and fails those that disagree."""
    pick = vendor_reference(measure, op, dgraph, inputs, {r.name: outputs[r.name] for r in ran}, tol,
                            dtype)
    for r in ran:
        r.rel_error = pick.errors.get(r.name)
        if r.name in pick.disagree:
            r.status, r.reason = "failed", pick.disagree[r.name]
    return pick.output, pick.name


def _prepare_and_run(measure, rec: ProbeRecord, prepare, inputs, reference=None, tol: float = REL_TOLERANCE,
                     clock: PhaseClock | None = None, role: str = "native"):
    """Prepare, run once, verify (when a reference is given), each on the clock (`role`: "native"
    or "vendor" names the preparation phase). Returns (plan, output, cold ms) — the plan still
    open, to be timed; the cold ms is the verification run's CUDA-event time, for a vendor when the
    measurer times it (`run_timed`), else None — or None with the failure recorded (and the plan
    closed)."""
    clock = clock if clock is not None else PhaseClock()
    try:
        with clock.phase(f"{role}_prepare"):
            plan = prepare()
    except Exception as exc:  # a compile or prepare failure is an outcome, never a crash
        rec.status, rec.reason = "failed", f"prepare: {one_line(exc)}"
        return None
    rec.prepare_ms = float(getattr(plan, "prepare_ms", 0.0) or 0.0)
    stage = "run"
    try:
        with clock.phase("verify"):
            run_timed = getattr(measure, "run_timed", None) if role == "vendor" else None
            out, cold_ms = run_timed(plan, inputs) if run_timed else (measure.run(plan, inputs), None)
            if reference is not None:
                stage = "verify"
                rec.rel_error, failure = compare(measure, out, reference, tol)
    except Exception as exc:
        rec.status, rec.reason = "failed", f"{stage}: {one_line(exc)}"
        _close(plan)
        return None
    if reference is not None and failure:
        rec.status, rec.reason = "failed", failure
        _close(plan)
        return None
    return plan, out, cold_ms


def _close(plan) -> None:
    close = getattr(plan, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass
