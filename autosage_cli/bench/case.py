"""One benchmark case (graph × op × K × heads × dtype): every way to compute it, measured through the
toolkit (the tuner's measurer, scheduler/measure.py) and turned into rows; the order is the run's
(bench/harness.py says it)."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from .. import ops as op_specs
from ..environment import now_iso
from ..errors import BudgetError, one_line
from ..scheduler.measure import ReferencePick, best_vendor, compare, vendor_reference  # the probe's too
from ..scheduler.probe import SCREEN_RATIO   # the probe's screen, applied to --exhaustive
from .rows import PROBE_COLUMNS, Row, effective_tbps, speedup
from .suites import Case

# The oracle probes on the whole graph, where one launch can take tens of ms (products-like at
# K=256) or hundreds (attention H=8): every candidate gets its minimum repeats whatever the budget,
# and the oracle's larger budget buys the rest of its repeats.
ORACLE_BUDGET_MS = 20_000.0

# The rows' own timing, as the probe spends its budget (scheduler/probe.py): every plan's first
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


def _float(value) -> float:
    return math.nan if value is None else float(value)


class CaseRunner:
    """Measures one graph × case; `run()` returns its rows (speed-ups filled in)."""

    def __init__(self, tk, ctx, label: str, graph, dgraph, case: Case):
        self.tk, self.ctx, self.label, self.graph, self.dgraph, self.case = tk, ctx, label, graph, dgraph, case
        self.opts = ctx.options
        self.inputs = None
        self.reference = None
        self.no_reference = ""
        self.tolerance = ctx.options.tolerance or op_specs.case_tolerance(
            case.op, case.dtype, case.k, int(graph.row_degrees().max(initial=0)))

    # ---- measuring one plan
    def _prepare(self, backend: str, schedule: str, prepare: Callable[[], object]):
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
                     prepare_ms=_float(getattr(plan, "prepare_ms", None)),
                     compile_ms=_float(getattr(plan, "compile_ms", None)),
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
            self._time(m, plan, out, 1, 0)
            if repeat != 1:
                self._time(m, plan, out, *timing_batch(m.ms[0], repeat or self.opts.repeat,
                                                       self.opts.warmup, PLAN_BUDGET_MS))
            m.out = out if not verify else None
        except Exception as exc:
            m.status, m.error = "failed", f"run: {one_line(exc, 300)}"
        return m

    def _time(self, m: Measured, plan, out, repeat: int, warmup: int) -> None:
        stats = self.tk.time(plan, self.inputs, out, repeat, warmup, flush_l2=self.opts.flush_l2)
        m.ms, m.repeats = (stats.median_ms, stats.p20_ms, stats.p80_ms), int(stats.repeats)

    # ---- the case
    def run(self) -> list[Row]:
        tk, c, o = self.tk, self.case, self.opts
        self.inputs = tk.inputs(self.dgraph, c.op, c.k, c.heads, o.seed, c.dtype)
        rows: list[Row] = []
        vendors = self._vendors()
        rows += [self._row(m, "fixed") for m in vendors]
        probe_row, probe_choice = self._autosage(full=False)
        rows.append(probe_row)
        if o.oracle:
            oracle_row, oracle_choice = self._autosage(full=True)
            rows.append(oracle_row)
            self._mark_agreement(probe_row, probe_choice, oracle_row, oracle_choice)
        rows += self._baselines()
        if o.exhaustive or c.op in o.all_schedules:
            rows += self._all_schedules(rows, screen=o.exhaustive)
        self._fill_speedups(rows, vendors)
        self.inputs = self.reference = None
        return rows

    def _vendors(self) -> list[Measured]:
        """Every vendor entry run and screened with one timed launch; then the measurer's reference
        rule picks the case's reference among their outputs (the float64 reference when none
        agree), gives each its error against it and marks those that disagree "wrong"; then the
        vendors that verified are timed again (`_time_vendors`)."""
        c = self.case
        results: list[Measured] = []
        plans: dict = {}
        for name in self.tk.vendor_names(c.op):
            plan, failed = self._prepare(name, name, lambda: self.tk.prepare_vendor(self.dgraph, name, c.k, c.heads,
                                                                                   dtype=c.dtype))
            results.append(failed or self.measure(plan, backend=name, verify=False, repeat=1))
            if results[-1].status == "ok":
                plans[name] = plan
            del plan
        ok = [m for m in results if m.status == "ok"]
        try:
            pick = vendor_reference(self.tk, c.op, self.dgraph, self.inputs, {m.backend: m.out for m in ok},
                                    self.tolerance, c.dtype)
        except (MemoryError, BudgetError) as exc:   # the host cannot hold the float64 reference
            self.no_reference = f"no reference to verify against: {one_line(exc, 300)}"
            pick = ReferencePick(None, "")
        self.reference = pick.output
        for m in ok:
            m.rel_error = pick.errors.get(m.backend, math.nan)
            if m.backend in pick.disagree:
                m.status, m.error = "wrong", pick.disagree[m.backend]
        self._time_vendors([m for m in ok if m.status == "ok"], plans)
        for m in results:
            m.out = None
        return results

    def _time_vendors(self, screened: list[Measured], plans: dict) -> None:
        """The fastest verified vendor after its screening launch gets the run's repeats within
        PLAN_BUDGET_MS, those within VENDOR_SCREEN_RATIO of it within OTHER_VENDOR_BUDGET_MS; the
        rest keep their one launch, with the reason. Each plan is freed once timed; the one whose
        output became the reference is timed into an output of its own."""
        fastest = best_vendor(screened, lambda m: m.ms[0])
        for m in screened:
            plan = plans.pop(m.backend)
            out = plan.alloc_out() if m.out is self.reference else m.out
            ratio = m.ms[0] / fastest.ms[0] if fastest.ms[0] > 0 else 1.0
            if ratio > VENDOR_SCREEN_RATIO:
                m.reason = f"screened: one launch, {ratio:.2f}x the fastest vendor"
                continue
            budget = PLAN_BUDGET_MS if m is fastest else OTHER_VENDOR_BUDGET_MS
            try:
                self._time(m, plan, out, *timing_batch(m.ms[0], self.opts.repeat, self.opts.warmup, budget))
            except Exception as exc:
                m.status, m.error = "failed", f"run: {one_line(exc, 300)}"
            del plan
        plans.clear()

    def _decision_backend(self, decision) -> tuple[str, str]:
        backend = str(getattr(decision, "backend", ""))
        schedule = getattr(decision, "schedule", "")
        return backend, str(getattr(schedule, "name", schedule) or backend)

    def _autosage(self, full: bool) -> tuple[Row, tuple[str, str]]:
        c, o = self.case, self.opts
        # The graph's fingerprint and features, once per graph and outside the tune's time.
        try:
            _, features_ms, fingerprint_ms = self.tk.graph_features(self.graph)
        except Exception as exc:
            m = Measured("autosage", "", "failed", error=f"features: {one_line(exc, 300)}")
            return self._row(m, "oracle" if full else "probe"), ("", "")
        t0 = time.perf_counter()
        try:
            # The oracle never touches the user's cache: its full-graph decision would replace the
            # probe's, and the next run would replay the oracle instead of measuring the probe.
            budget = max(o.budget_ms or 0.0, ORACLE_BUDGET_MS) if full else o.budget_ms
            result = self.tk.tune(self.graph, c.op, c.k, c.heads, cache=None if full else o.cache,
                                  top_k=o.top_k, budget_ms=budget, guardrail=o.guardrail,
                                  full=full, seed=o.seed, dgraph=self.dgraph, dtype=c.dtype)
        except Exception as exc:
            m = Measured("autosage", "", "failed", error=f"tune: {one_line(exc, 300)}")
            return self._row(m, "oracle" if full else "probe"), ("", "")
        tune_ms = (time.perf_counter() - t0) * 1e3
        decision = "oracle" if full else ("cache" if getattr(result, "cache_hit", False) else "probe")
        choice = self._decision_backend(result.decision)
        plan, failed = self._prepare("autosage", choice[1],
                                     lambda: self.tk.plan_for(self.dgraph, result.decision, c.k, c.heads, c.dtype))
        m = failed or self.measure(plan, backend="autosage")
        m.schedule = choice[1]
        row = self._row(m, decision)
        row.chosen_backend, row.tune_ms = choice[0], tune_ms
        row.reason = " ".join(str(getattr(result.decision, "reason", "")).split())
        row.features_ms, row.fingerprint_ms = _float(features_ms), _float(fingerprint_ms)
        row.compile_ms = math.fsum(x for x in (_float(result.timings.get("compile_ms")), m.compile_ms)
                                   if math.isfinite(x))
        for column in PROBE_COLUMNS:     # where the probe's time went (a cache hit has none)
            setattr(row, column, _float(result.timings.get(column)))
        if not full and o.cache is not None:
            row.warm_tune_ms = self._warm_tune_ms()
        return row, choice

    def _warm_tune_ms(self) -> float:
        """The warm-tune overhead: the same tune again, now answered by the cache."""
        c, o = self.case, self.opts
        t0 = time.perf_counter()
        try:
            self.tk.tune(self.graph, c.op, c.k, c.heads, cache=o.cache, top_k=o.top_k,
                         budget_ms=o.budget_ms, guardrail=o.guardrail, full=False, seed=o.seed,
                         dgraph=self.dgraph, dtype=c.dtype)
        except Exception:  # the first tune succeeded; a failing second one is not this row's time
            return math.nan
        return (time.perf_counter() - t0) * 1e3

    def _mark_agreement(self, probe: Row, probe_choice, oracle: Row, oracle_choice) -> None:
        from .report import probe_agrees

        probe.oracle_schedule, probe.oracle_ms = oracle.schedule, oracle.ms_median
        if oracle.status != "ok":
            return  # nothing to compare with
        agrees = probe.status == "ok" and probe_agrees(probe_choice, probe.ms_median, oracle_choice,
                                                       oracle.ms_median)
        probe.probe_agrees = oracle.probe_agrees = "yes" if agrees else "no"

    def _baselines(self) -> list[Row]:
        """torch / PyG rows; a baseline that cannot run here (not installed, would not fit in memory)
        is a "skipped" row with the reason, so a target that needs it says why it is not measured."""
        c = self.case
        try:
            plans, skipped = self.tk.prepare_baselines(self.dgraph, c.op, c.k, c.heads, c.dtype)
        except Exception as exc:
            return [self._row(Measured("baselines", "", "failed", error=f"prepare: {one_line(exc, 300)}"),
                              "fixed")]
        rows = [self._row(Measured(name, name, "skipped", error=reason), "fixed") for name, reason in skipped]
        while plans:
            rows.append(self._row(self.measure(plans.pop(0)), "fixed"))  # each freed after its row
        return rows

    def _all_schedules(self, rows: list[Row], screen: bool) -> list[Row]:
        """Every supported native schedule (decision "fixed"), with the run's repeats. With `screen`
        (--exhaustive) each gets one timed launch first, and only those within SCREEN_RATIO of the
        case's best so far (`rows`, then the schedules before it) are timed again with the run's
        repeats: with the vendors and autosage's rows, the case's exhaustive best is in the CSV."""
        c = self.case
        best = min((r.ms_median for r in rows if r.status == "ok" and math.isfinite(r.ms_median)),
                   default=math.inf)
        out = []
        for schedule in self.tk.schedules(c.op, c.k, c.heads, c.dtype):
            prepare = lambda s=schedule: self.tk.prepare_native(self.dgraph, s, c.k, c.heads, dtype=c.dtype)  # noqa: E731
            plan, failed = self._prepare("native", schedule.name, prepare)
            m = failed or self.measure(plan, backend="native", repeat=1 if screen else None)
            if screen and m.status == "ok" and m.ms[0] <= SCREEN_RATIO * best:
                m = self.measure(plan, backend="native")     # a contender: the run's repeats
                best = min(best, m.ms[0]) if m.status == "ok" else best
            row = self._row(m, "fixed")
            if screen and m.status == "ok" and m.repeats == 1:
                row.reason = f"screened: one launch, {m.ms[0] / best:.2f}x the best so far"
            out.append(row)
            del plan
        return out

    # ---- rows
    def _row(self, m: Measured, decision: str) -> Row:
        g, c, ctx = self.graph, self.case, self.ctx
        index_bytes = g.indices.dtype.itemsize
        spec = op_specs.get(c.op)
        nbytes = spec.compulsory_bytes(g.n_rows, g.n_cols, g.nnz, c.k, c.heads, index_bytes, c.dtype)
        return Row(graph=self.label, n_rows=g.n_rows, nnz=g.nnz, op=c.op, k=c.k, heads=c.heads,
                   dtype=c.dtype, backend=m.backend, schedule=m.schedule, decision=decision,
                   ms_median=m.ms[0], ms_p20=m.ms[1], ms_p80=m.ms[2], prepare_ms=m.prepare_ms,
                   rel_error=m.rel_error, compile_ms=m.compile_ms, compulsory_bytes=nbytes,
                   effective_tbps=effective_tbps(nbytes, m.ms[0]), copy_tbps=ctx.copy_tbps,
                   commit=ctx.commit, gpu=ctx.gpu, timestamp=now_iso(), status=m.status, error=m.error,
                   provider=m.provider, n_cols=g.n_cols, gather_bytes=spec.gather_bytes(g.nnz, c.k, c.heads, c.dtype),
                   repeats=m.repeats, flush_l2=self.opts.flush_l2, seed=self.opts.seed, reason=m.reason)

    def _fill_speedups(self, rows: list[Row], vendors: list[Measured]) -> None:
        ok = [m for m in vendors if m.status == "ok"]
        best = best_vendor(ok, lambda m: m.ms[0])
        # the op's untuned default entry, or the only vendor when there is one
        named = op_specs.get(self.case.op).default_vendor
        default = next((m for m in ok if m.backend == named), ok[0] if len(ok) == 1 else None)
        for r in rows:
            r.best_vendor = best.backend if best else ""
            r.best_vendor_ms = best.ms[0] if best else math.nan
            r.speedup_vs_best_vendor = speedup(r.best_vendor_ms, r.ms_median)
            r.speedup_vs_vendor_default = speedup(default.ms[0] if default else math.nan, r.ms_median)
