"""Micro-probes: time the top candidates and every vendor algorithm on the sample `sample.py` draws.

Measuring goes through the measurer (scheduler/measure.py: the GPU one by default; its reference
rule and verification are the benchmark's too) so the loop itself — verify against the vendor,
time every verified candidate and vendor at least MIN_REPEATS times, spend what is left of the
budget on more repeats — is tested on a CPU with a fake.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from .. import dtypes, ops as op_specs
from ..errors import one_line   # probe failures are recorded as one line (replay uses it too)
from .measure import GpuMeasurer, compare, vendor_reference  # noqa: F401  (GpuMeasurer: callers' default)
from .phases import PhaseClock

REL_TOLERANCE = dtypes.tolerance("float32")   # per dtype: dtypes.tolerance (docs/MEASUREMENT.md)
DEFAULT_BUDGET_MS = 600.0   # measured GPU time across all candidates and vendors: what a 1 s cold
                            # tune leaves for it (policy.py). Every plan's verification and one
                            # timed launch, and MIN_REPEATS of the fastest native and vendor, are
                            # spent whatever the budget; it plans the rest.
SCREEN_RATIO = 1.3          # a plan this much slower than the fastest of its group after one timed
                            # launch is not timed again (one launch's noise is a few %, not 30%)
MIN_REPEATS = 3             # every plan that survives the screen is timed at least this often...
MAX_REPEAT = 10             # ...and at most this often, as the budget allows (20 at 02a7334: the
                            # extra repeats then spent the whole 1 s budget on 100M-edge graphs,
                            # 0.8 s at K=16 where the screen and minimum took ~0.15 s)
WARMUP = 1                  # per timed batch; the verification run before it paid one-time costs
COLD_SCREEN_RATIO = 3.0     # a vendor whose verification run (cold: it pays the first launch's
                            # costs) takes this much longer than the fastest vendor's timed launch
                            # is not launched again: cuSPARSE's ALG1 at K=128 (8x ALG2), the
                            # gather-dot SDDMM (20-30x) cost a full-graph launch each for nothing


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


# ------------------------------------------------------------------ measuring: scheduler/measure.py

# ------------------------------------------------------------------ the probe loop

class _Budget:
    def __init__(self, total_ms: float):
        self.total, self.spent = float(total_ms), 0.0

    @property
    def left(self) -> float:
        return self.total - self.spent


@dataclass
class _Live:
    """A verified plan waiting to be timed, and its timing batches (median, p20, p80, repeats)."""
    rec: ProbeRecord
    plan: object
    batches: list = field(default_factory=list)
    cold: bool = False          # screened out at its verification run: its one time is that run's

    @property
    def median(self) -> float:
        return self.batches[0][0]


def merge_batches(batches) -> tuple[float, float, float, int]:
    """One (median, p20, p80, repeats) from several timing batches of one plan: the batch medians'
    median weighted by repeats (a short batch at another clock cannot pull it far), p20 and p80
    averaged by repeats, repeats summed."""
    if len(batches) == 1:
        return batches[0]
    reps = np.array([b[3] for b in batches], dtype=float)
    med = np.array([b[0] for b in batches], dtype=float)
    order = np.argsort(med, kind="stable")
    cum = np.cumsum(reps[order])
    median = float(med[order][np.searchsorted(cum, 0.5 * cum[-1])])
    p20 = float(np.dot(reps, [b[1] for b in batches]) / reps.sum())
    p80 = float(np.dot(reps, [b[2] for b in batches]) / reps.sum())
    return median, p20, p80, int(reps.sum())


def interleave(*groups):
    """Round robin over the groups (v1, n1, v2, n2, ...): no group waits for another to finish."""
    out, longest = [], max((len(g) for g in groups), default=0)
    for i in range(longest):
        out += [g[i] for g in groups if i < len(g)]
    return out


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
    3. Timing, interleaved vendor / native so no group waits on the other (_time_all): every
       verified plan gets a warm-up and one timed launch WHATEVER the budget (a candidate is never
       dropped for budget: that is how the vendor once won by default), those within SCREEN_RATIO
       of their group's fastest MIN_REPEATS in all; what is left of the budget then buys more
       repeats (up to MAX_REPEAT), shared equally, for the natives and the fastest vendor (the
       guardrail's bar; a slower vendor cannot lower it). A vendor's screening launch follows its
       verification run at once (step 1), which serves as its warm-up. The result says when the
       minimum alone overran the budget, and by how much.
    Any exception is recorded against its candidate; every plan is closed at the end."""
    measure = measure or GpuMeasurer()
    say = progress or (lambda _msg: None)
    clock = clock if clock is not None else PhaseClock()
    t0 = time.perf_counter()
    budget = _Budget(budget_ms)
    tol = op_specs.case_tolerance(op, dtype, k, int(dgraph.host.row_degrees().max(initial=0)))
    with clock.phase("inputs"):
        inputs = measure.inputs(dgraph, op, k, heads, seed, dtype)
    vendors = [ProbeRecord(name=v, backend=v, graph=where) for v in vendor_names]
    natives = [ProbeRecord(name=s.name, backend="native", estimate_ms=float(est), params=s.params(), graph=where)
               for s, est in candidates]
    live_vendors: list[_Live] = []
    live_natives: list[_Live] = []
    try:
        with clock.timing_imports():
            reference, ref_name, scratch = _probe_vendors(measure, dgraph, (op, k, heads, dtype), vendors,
                                                          live_vendors, inputs, tol, budget, clock, say)
        compiled, compile_ms = _compile_candidates(measure, dgraph, candidates, k, heads, dtype, say)
        for rec, (schedule, _est) in zip(natives, candidates):
            rec.compile_ms, error = compiled.get(rec.name, (None, None))
            if error:
                rec.status, rec.reason = "failed", f"compile: {error}"
                continue
            say(f"probe {rec.name}")
            got = _prepare_and_run(measure, rec, lambda s=schedule: measure.prepare_native(
                dgraph, s, k, heads, None, dtype), inputs, reference, tol, clock)
            if got is not None:
                live_natives.append(_Live(rec, got[0]))
                # The screening launch right after the verification run, which is its warm-up.
                _batch(measure, live_natives[-1], inputs, got[1], 1, budget, verify_run=True, warmup=0,
                       clock=clock)
                scratch = got[1] if scratch is None else scratch
        if scratch is None and (live_vendors or live_natives):
            scratch = reference.copy()     # timing writes somewhere; never into the reference

        floor_ms = _time_all(measure, interleave(live_vendors, live_natives), inputs, scratch, budget, clock)
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


def _probe_vendors(measure, dgraph, case, vendors: list[ProbeRecord], live: list[_Live], inputs,
                   tol: float, budget: _Budget, clock: PhaseClock, say):
    """Prepare, run and screen every vendor algorithm, the op's default entry first (cuSPARSE's
    default SpMM: within 6% of the fastest vendor at K >= 16 on the H200's 100M-edge graphs, where
    ALG1 ran up to 13x slower: a bar the slow ones are screened against), the rest in vendor
    order: each screening launch right after its
    verification run, which warms it up, unless that run was already COLD_SCREEN_RATIO behind the
    fastest screened vendor. Then pick the reference by the measurer's rule (vendor order) and drop
    the vendors that disagree with it. Returns (reference output, its name, a spare output)."""
    op, k, heads, dtype = case
    outputs = {}
    for rec in _untuned_first(op, vendors):
        say(f"probe vendor {rec.name}")
        got = _prepare_and_run(measure, rec, lambda n=rec.name: measure.prepare_vendor(
            dgraph, n, k, heads, None, dtype), inputs, tol=tol, clock=clock, role="vendor")
        if got is None:
            continue
        item = _Live(rec, got[0])
        live.append(item)
        outputs[rec.name] = got[1]
        if not _screened_cold(item, got[2], live, budget):
            _batch(measure, item, inputs, got[1], 1, budget, verify_run=True, warmup=0, clock=clock)
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


def _screened_cold(item: _Live, cold_ms, live: list[_Live], budget: _Budget) -> bool:
    """Whether `item`'s verification run (`cold_ms`, None when the measurer does not time it) is
    COLD_SCREEN_RATIO behind the fastest vendor timed so far; then that run is its one time."""
    timed = [it.median for it in live if it.batches and not it.cold]
    if cold_ms is None or not timed or not cold_ms > COLD_SCREEN_RATIO * min(timed):
        return False
    item.cold = True
    item.batches.append((float(cold_ms), float(cold_ms), float(cold_ms), 1))
    item.rec.reason = (f"screened out at its verification run: {cold_ms / min(timed):.2f}x the fastest "
                       f"vendor's timed launch")
    budget.spent += cold_ms
    return True


def _compile_candidates(measure, dgraph, candidates, k: int, heads: int, dtype: str,
                        say) -> tuple[dict, float]:
    """({name: (ms, error)}, wall ms): every candidate's kernels built in parallel before the first
    is prepared, so the probe pays the slowest compile rather than the sum. A measurer without
    `compile_native` builds nothing here (its plans compile when prepared)."""
    compile_native = getattr(measure, "compile_native", None)
    if compile_native is None or not candidates:
        return {}, 0.0
    say(f"compiling the kernels of {len(candidates)} candidates")
    t0 = time.perf_counter()
    try:
        compiled = compile_native(dgraph, [s for s, _ in candidates], k, heads, dtype)
    except Exception as exc:   # e.g. no NVRTC: each candidate then fails at prepare with its reason
        say(f"compiling ahead failed ({one_line(exc)}); each candidate compiles when prepared")
        compiled = {}
    return compiled, (time.perf_counter() - t0) * 1e3


def _time_all(measure, items: list[_Live], inputs, out, budget: _Budget, clock: PhaseClock) -> float:
    """Screen, then time the survivors, then spend what is left of the budget.

    1. Screen: every item has had ONE timed launch right after its verification run (its warm-up);
       one that has not (none, in the probe's own use) gets a warm-up and that launch here.
    2. Survivors, the items within SCREEN_RATIO of the fastest of their group (natives, vendors),
       get MIN_REPEATS - 1 more (after a warm-up), planned from their measured launch: the fastest
       first while they fit what is left of the budget, the fastest native and the fastest vendor
       (the guardrail's two sides) whatever it costs. The rest keep their one launch, marked as
       screened out. On the whole graph of a large input a launch takes milliseconds: timing a
       candidate that is 1.3x behind three more times buys nothing but budget.
    3. What is left of the budget buys the survivors more repeats (up to MAX_REPEAT), shared equally.
    Returns the GPU time of 1 and 2 (the guaranteed minimum)."""
    for it in items:
        if not it.batches:
            _batch(measure, it, inputs, out, 1, budget, verify_run=True, clock=clock)
    survivors = _affordable(_survivors([it for it in items if it.batches]), budget)
    for it in survivors:
        _batch(measure, it, inputs, out, MIN_REPEATS - 1, budget, clock=clock)
    floor_ms = budget.spent
    timed = _worth_more_repeats([it for it in survivors if it.batches])
    for i, it in enumerate(timed):
        share = max(budget.left, 0.0) / (len(timed) - i)
        extra = min(MAX_REPEAT - MIN_REPEATS, int(share // max(it.median, 1e-6)) - WARMUP)
        if extra >= 1:
            _batch(measure, it, inputs, out, extra, budget, clock=clock)
    for it in items:
        if it.batches:
            rec = it.rec
            rec.ms, rec.p20_ms, rec.p80_ms, rec.repeats = merge_batches(it.batches)
            rec.status = "ok"
    return floor_ms


def _affordable(survivors: list[_Live], budget: _Budget) -> list[_Live]:
    """The survivors (in their order) whose MIN_REPEATS - 1 more launches and warm-up fit what is
    left of the budget, taken fastest first; the fastest of each group always. The others get
    their reason."""
    launches = MIN_REPEATS - 1 + WARMUP
    fastest: dict[bool, _Live] = {}
    for it in sorted(survivors, key=lambda it: it.median):
        fastest.setdefault(it.rec.backend == "native", it)
    kept = {id(it) for it in fastest.values()}
    left = budget.left - sum(launches * it.median for it in fastest.values())
    for it in sorted(survivors, key=lambda it: it.median):
        native = it.rec.backend == "native"
        if id(it) in kept:
            continue
        if launches * it.median <= left:
            kept.add(id(it))
            left -= launches * it.median
            continue
        it.rec.reason = (f"screened out: {it.median / fastest[native].median:.2f}x the fastest of its "
                         f"group after one timed launch, and {MIN_REPEATS} timings of it would not fit "
                         f"the {budget.total:g} ms budget")
    return [it for it in survivors if id(it) in kept]


def _worth_more_repeats(timed: list[_Live]) -> list[_Live]:
    """The natives and the fastest vendor after MIN_REPEATS: the guardrail compares with the best
    vendor time, so more repeats of a slower vendor cannot change a decision."""
    vendors = [it for it in timed if it.rec.backend != "native"]
    fastest = min(vendors, key=lambda it: merge_batches(it.batches)[0], default=None)
    return [it for it in timed if it.rec.backend == "native" or it is fastest]


def _survivors(timed: list[_Live]) -> list[_Live]:
    """The items within SCREEN_RATIO of the fastest screened item of their group (native or vendor);
    the others get their reason."""
    best: dict[bool, float] = {}
    for it in timed:
        native = it.rec.backend == "native"
        if not it.cold:
            best[native] = min(best.get(native, float("inf")), it.batches[0][0])
    keep = []
    for it in timed:
        if it.cold:
            continue      # its reason says so already
        lead = best[it.rec.backend == "native"]
        if it.batches[0][0] <= SCREEN_RATIO * lead:
            keep.append(it)
        else:
            it.rec.reason = (f"screened out: {it.batches[0][0] / lead:.2f}x the fastest of its group "
                             f"after one timed launch")
    return keep


def _batch(measure, it: _Live, inputs, out, repeat: int, budget: _Budget, verify_run: bool = False,
           warmup: int = WARMUP, clock: PhaseClock | None = None) -> None:
    """One timed batch (`warmup` + `repeat` launches), charged to the budget (with the verification
    run before it, the first time) and to the clock's timing phase of its group. A failure marks
    the record and drops its batches."""
    if it.rec.status == "failed":
        return
    clock = clock if clock is not None else PhaseClock()
    try:
        with clock.phase("native_timing" if it.rec.backend == "native" else "vendor_timing"):
            stats = measure.time(it.plan, inputs, out, repeat=repeat, warmup=warmup)
    except Exception as exc:
        it.rec.status, it.rec.reason = "failed", f"time: {one_line(exc)}"
        it.batches.clear()
        return
    budget.spent += stats.median_ms * (stats.repeats + warmup + (1 if verify_run else 0))
    it.batches.append((float(stats.median_ms), float(stats.p20_ms), float(stats.p80_ms), int(stats.repeats)))


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
