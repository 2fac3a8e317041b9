"""One benchmark case (graph × op × K × heads × dtype): every way to compute it, measured through the
toolkit (the tuner's measurer, scheduler/probing/measure.py) and turned into rows; the order is the run's
(bench/harness.py says it). One plan's verification and timing is bench/plan_timing.py; autosage's
own rows, bench/case_autosage.py."""
from __future__ import annotations

import math

from .. import ops as op_specs
from ..environment import now_iso
from ..errors import BudgetError, one_line
from ..scheduler.probing.measure import ReferencePick, best_vendor, vendor_reference  # the probe's too
from ..scheduler.probing.probe import SCREEN_RATIO  # the probe's screen, applied to --exhaustive
from .case_autosage import autosage_row, mark_agreement
from .plan_timing import (MIN_REPEATS, OTHER_VENDOR_BUDGET_MS, PLAN_BUDGET_MS,  # noqa: F401  (the run's budgets)
                          VENDOR_SCREEN_RATIO, Measured, PlanTimer, timing_batch)
from .rows import Row, effective_tbps, speedup
from .suites import Case


class CaseRunner:
    """Measures one graph × case; `run()` returns its rows (speed-ups filled in)."""

    def __init__(self, tk, ctx, label: str, graph, dgraph, case: Case):
        self.tk, self.ctx, self.label, self.graph, self.dgraph, self.case = tk, ctx, label, graph, dgraph, case
        self.opts = ctx.options
        self.timer = PlanTimer(tk, ctx.options, ctx.options.tolerance or op_specs.case_tolerance(
            case.op, case.dtype, case.k, int(graph.row_degrees().max(initial=0))))

    def run(self) -> list[Row]:
        tk, c, o = self.tk, self.case, self.opts
        self.timer.inputs = tk.inputs(self.dgraph, c.op, c.k, c.heads, o.seed, c.dtype)
        rows: list[Row] = []
        vendors = self._vendors()
        rows += [self.row(m, "fixed") for m in vendors]
        probe_row, probe_choice = autosage_row(self, full=False)
        rows.append(probe_row)
        if o.oracle:
            oracle_row, oracle_choice = autosage_row(self, full=True)
            rows.append(oracle_row)
            mark_agreement(probe_row, probe_choice, oracle_row, oracle_choice)
        rows += self._baselines()
        if o.exhaustive or c.op in o.all_schedules:
            rows += self._all_schedules(rows, screen=o.exhaustive)
        self._fill_speedups(rows, vendors)
        self.timer.inputs = self.timer.reference = None
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
            plan, failed = self.timer.prepare(name, name, lambda: self.tk.prepare_vendor(
                self.dgraph, name, c.k, c.heads, dtype=c.dtype))
            results.append(failed or self.timer.measure(plan, backend=name, verify=False, repeat=1))
            if results[-1].status == "ok":
                plans[name] = plan
            del plan
        ok = [m for m in results if m.status == "ok"]
        try:
            pick = vendor_reference(self.tk, c.op, self.dgraph, self.timer.inputs, {m.backend: m.out for m in ok},
                                    self.timer.tolerance, c.dtype)
        except (MemoryError, BudgetError) as exc:   # the host cannot hold the float64 reference
            self.timer.no_reference = f"no reference to verify against: {one_line(exc, 300)}"
            pick = ReferencePick(None, "")
        self.timer.reference = pick.output
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
            out = plan.alloc_out() if m.out is self.timer.reference else m.out
            ratio = m.ms[0] / fastest.ms[0] if fastest.ms[0] > 0 else 1.0
            if ratio > VENDOR_SCREEN_RATIO:
                m.reason = f"screened: one launch, {ratio:.2f}x the fastest vendor"
                continue
            budget = PLAN_BUDGET_MS if m is fastest else OTHER_VENDOR_BUDGET_MS
            try:
                self.timer.time(m, plan, out, *timing_batch(m.ms[0], self.opts.repeat, self.opts.warmup, budget))
            except Exception as exc:
                m.status, m.error = "failed", f"run: {one_line(exc, 300)}"
            del plan
        plans.clear()

    def _baselines(self) -> list[Row]:
        """torch / PyG rows; a baseline that cannot run here (not installed, would not fit in memory)
        is a "skipped" row with the reason, so a target that needs it says why it is not measured."""
        c = self.case
        try:
            plans, skipped = self.tk.prepare_baselines(self.dgraph, c.op, c.k, c.heads, c.dtype)
        except Exception as exc:
            return [self.row(Measured("baselines", "", "failed", error=f"prepare: {one_line(exc, 300)}"),
                              "fixed")]
        rows = [self.row(Measured(name, name, "skipped", error=reason), "fixed") for name, reason in skipped]
        while plans:
            rows.append(self.row(self.timer.measure(plans.pop(0)), "fixed"))  # each freed after its row
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
            plan, failed = self.timer.prepare("native", schedule.name, prepare)
            m = failed or self.timer.measure(plan, backend="native", repeat=1 if screen else None)
            if screen and m.status == "ok" and m.ms[0] <= SCREEN_RATIO * best:
                m = self.timer.measure(plan, backend="native")     # a contender: the run's repeats
                best = min(best, m.ms[0]) if m.status == "ok" else best
            row = self.row(m, "fixed")
            if screen and m.status == "ok" and m.repeats == 1:
                row.reason = f"screened: one launch, {m.ms[0] / best:.2f}x the best so far"
            out.append(row)
            del plan
        return out

    # ---- rows
    def row(self, m: Measured, decision: str) -> Row:
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
