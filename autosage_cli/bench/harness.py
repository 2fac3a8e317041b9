"""The benchmark loop: for every graph × op × K (× heads) of a run, every way to compute it, timed side
by side in one process (docs/MEASUREMENT.md) and checked against the best vendor output.

Per case, in this order:
  1. every vendor algorithm (backends.vendor): run, time; the best vendor is the fastest whose output
     agrees with another vendor's (a lone vendor is trusted); its output is the case's reference;
  2. autosage: scheduler.tune.tune with the cache (decision "probe", or "cache" on a hit), then the
     chosen plan on the full graph;
  3. with --oracle, tune(full=True) (decision "oracle") and whether the probe agreed with it;
  4. torch.sparse / PyG baselines when importable; with --all-schedules, every supported native
     schedule (decision "fixed").
Before the first case, every kernel file the run's ops may launch is compiled once
(toolkit.precompile, NVRTC), and each graph's fingerprint and features are computed once, before its
first tune is timed: `tune_ms` measures tuning, not compilation (13-16 s on a fresh machine) nor
hashing the graph (reported as `features_ms`). The compile seconds go into the run's environment
(`compile`) and on one stderr line.

Every non-vendor plan is verified first (output poisoned with NaN, run once, compared with the
reference) and timed only if it verifies; a failing plan becomes a row with status "wrong" or
"failed" and its reason — marked, never hidden, never a crash of the suite.

GPU work goes through a *toolkit* (bench.toolkit.GpuToolkit: backends/ and scheduler/ imported
lazily), so the loop itself runs on CPU in tests with a NumPy fake (tests/bench_fakes.py).
"""
from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

from .. import dtypes
from ..environment import now_iso
from ..scheduler.probe import SCREEN_RATIO   # the probe's screen, applied to --exhaustive
from . import guard
from .rows import Row, compulsory_bytes, effective_tbps, gather_bytes, speedup
from .suites import Case, GraphWork

# The oracle probes on the whole graph, where one launch can take tens of ms (products-like at
# K=256) or hundreds (attention H=8): every candidate gets its minimum repeats whatever the budget,
# and the oracle's larger budget buys the rest of its repeats.
ORACLE_BUDGET_MS = 20_000.0


@dataclass
class RunOptions:
    repeat: int = 20
    warmup: int = 3
    flush_l2: bool = False
    oracle: bool = False
    all_schedules: tuple[str, ...] = ()   # ops whose every supported native schedule is timed
    # Time every supported native schedule of every op with a screen (one launch each; the ones
    # within SCREEN_RATIO of the case's best so far are timed again in full): the exhaustive best.
    exhaustive: bool = False
    cache: str | None = ""          # decision cache file ("": the user's default; None: no cache)
    seed: int = 0
    top_k: int | None = None
    budget_ms: float | None = None
    guardrail: float | None = None
    root: str = "datasets"
    tolerance: float | None = None   # None: the case dtype's (dtypes.tolerance; 1e-4 for float32)


@dataclass
class RunContext:
    """What every row of a run shares."""
    commit: str
    gpu: str
    copy_tbps: float
    options: RunOptions
    environment: dict = field(default_factory=dict)   # the run's environment (compile seconds added)


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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300]


def _float(value) -> float:
    return math.nan if value is None else float(value)


class CaseRunner:
    """Measures one graph × case; `run()` returns its rows (speed-ups filled in)."""

    def __init__(self, tk, ctx: RunContext, label: str, graph, dgraph, case: Case):
        self.tk, self.ctx, self.label, self.graph, self.dgraph, self.case = tk, ctx, label, graph, dgraph, case
        self.opts = ctx.options
        self.inputs = None
        self.reference = None
        self.tolerance = ctx.options.tolerance or dtypes.tolerance(case.dtype)

    # ---- measuring one plan
    def _prepare(self, backend: str, schedule: str, prepare: Callable[[], object]):
        try:
            return prepare(), None
        except Exception as exc:  # a failing prepare is an outcome (failures are outcomes, recorded as rows)
            return None, Measured(backend, schedule, "failed", error=f"prepare: {_one_line(exc)}")

    def measure(self, plan, backend: str | None = None, verify: bool = True,
                repeat: int | None = None) -> Measured:
        """Verify against the reference, then time (only if it verified); `repeat` overrides the
        run's repeats (the exhaustive screen times one launch)."""
        name = backend or str(getattr(plan, "backend", ""))
        schedule = getattr(plan, "schedule", name)
        m = Measured(name, str(getattr(schedule, "name", schedule)), "ok",
                     prepare_ms=_float(getattr(plan, "prepare_ms", None)),
                     compile_ms=_float(getattr(plan, "compile_ms", None)),
                     provider=str(getattr(plan, "provider", "") or ""))
        try:
            out = self.tk.run_once(plan, self.inputs)
            if verify and self.reference is None:
                m.status, m.error = "unverified", "no vendor output to verify against"
            elif verify:
                m.rel_error = self.tk.rel_error(out, self.reference)
                if not m.rel_error <= self.tolerance:
                    m.status, m.error = "wrong", f"rel_error {m.rel_error:.3g} > {self.tolerance:g}"
                    return m
            o = self.opts
            median, p20, p80, m.repeats = self.tk.time(plan, self.inputs, out, repeat or o.repeat,
                                                       1 if repeat else o.warmup, o.flush_l2)
            m.ms = (median, p20, p80)
            m.out = out if not verify else None
        except Exception as exc:
            m.status, m.error = "failed", f"run: {_one_line(exc)}"
        return m

    # ---- the case
    def run(self) -> list[Row]:
        tk, c, o = self.tk, self.case, self.opts
        self.inputs = tk.make_inputs(c.op, self.dgraph, c.k, c.heads, o.seed, c.dtype)
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
        c = self.case
        results: list[Measured] = []
        for name in self.tk.vendor_names(c.op):
            plan, failed = self._prepare(name, name, lambda: self.tk.prepare_vendor(self.dgraph, name, c.k, c.heads,
                                                                                   c.dtype))
            results.append(failed or self.measure(plan, backend=name, verify=False))
            del plan
        ok = [m for m in results if m.status == "ok"]
        # The reference is the fastest vendor output that another vendor confirms; each vendor's
        # rel_error is against it (the reference's own against the next vendor that agrees).
        for best in sorted(ok, key=lambda m: m.ms[0]):
            others = [m for m in ok if m is not best]
            errors = [self.tk.rel_error(m.out, best.out) for m in others]
            if not others or any(e <= self.tolerance for e in errors):
                self.reference = best.out
                best.rel_error = min(errors) if errors else 0.0
                for m, e in zip(others, errors):
                    m.rel_error = e
                    if not e <= self.tolerance:
                        m.status, m.error = "wrong", f"disagrees with {best.backend}: rel_error {e:.3g}"
                break
        else:
            for m in ok:
                m.status, m.error = "wrong", "no two vendor algorithms agree"
        for m in results:
            m.out = None
        return results

    def _decision_backend(self, decision) -> tuple[str, str]:
        backend = str(getattr(decision, "backend", ""))
        schedule = getattr(decision, "schedule", "")
        return backend, str(getattr(schedule, "name", schedule) or backend)

    def _autosage(self, full: bool) -> tuple[Row, tuple[str, str]]:
        c, o = self.case, self.opts
        # The graph's fingerprint and features, once per graph and outside the tune's time.
        try:
            features_ms = self.tk.graph_features(self.graph)[1]
        except Exception as exc:
            m = Measured("autosage", "", "failed", error=f"features: {_one_line(exc)}")
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
            m = Measured("autosage", "", "failed", error=f"tune: {_one_line(exc)}")
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
        row.features_ms = _float(features_ms)
        row.compile_ms = math.fsum(x for x in (_float(result.timings.get("compile_ms")), m.compile_ms)
                                   if math.isfinite(x))
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
            plans, skipped = self.tk.prepare_baselines(self.dgraph, c.op, c.k, c.heads)
        except Exception as exc:
            return [self._row(Measured("baselines", "", "failed", error=f"prepare: {_one_line(exc)}"),
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
        for schedule in self.tk.schedules(c.op, c.k, c.heads):
            prepare = lambda s=schedule: self.tk.prepare_native(self.dgraph, s, c.k, c.heads, c.dtype)  # noqa: E731
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
        nbytes = compulsory_bytes(c.op, g.n_rows, g.n_cols, g.nnz, c.k, c.heads, index_bytes)
        return Row(graph=self.label, n_rows=g.n_rows, nnz=g.nnz, op=c.op, k=c.k, heads=c.heads,
                   dtype=c.dtype, backend=m.backend, schedule=m.schedule, decision=decision,
                   ms_median=m.ms[0], ms_p20=m.ms[1], ms_p80=m.ms[2], prepare_ms=m.prepare_ms,
                   rel_error=m.rel_error, compile_ms=m.compile_ms, compulsory_bytes=nbytes,
                   effective_tbps=effective_tbps(nbytes, m.ms[0]), copy_tbps=ctx.copy_tbps,
                   commit=ctx.commit, gpu=ctx.gpu, timestamp=now_iso(), status=m.status, error=m.error,
                   provider=m.provider, n_cols=g.n_cols, gather_bytes=gather_bytes(c.op, g.nnz, c.k, c.heads),
                   repeats=m.repeats, flush_l2=self.opts.flush_l2, seed=self.opts.seed)

    def _fill_speedups(self, rows: list[Row], vendors: list[Measured]) -> None:
        ok = [m for m in vendors if m.status == "ok"]
        best = min(ok, key=lambda m: m.ms[0], default=None)
        default = next((m for m in ok if m.backend.endswith("default")), ok[0] if len(ok) == 1 else None)
        for r in rows:
            r.best_vendor = best.backend if best else ""
            r.best_vendor_ms = best.ms[0] if best else math.nan
            r.speedup_vs_best_vendor = speedup(r.best_vendor_ms, r.ms_median)
            r.speedup_vs_vendor_default = speedup(default.ms[0] if default else math.nan, r.ms_median)


@dataclass
class Listener:
    """Progress hooks (the command draws a rich progress bar from them)."""
    on_graph: Callable[[GraphWork], None] = lambda work: None
    on_case: Callable[[GraphWork, Case], None] = lambda work, case: None
    on_compile: Callable[[dict], None] = lambda info: print(compile_line(info), file=sys.stderr)


def count_cases(work: list[GraphWork]) -> int:
    return sum(len(w.cases) for w in work)


def compile_line(info: dict) -> str:
    if info.get("error"):
        return f"kernel precompile failed ({info['error']}); plans compile as they are prepared"
    files = ", ".join(f"{name} {sec:.1f} s" for name, sec in sorted(info["files"].items(),
                                                                      key=lambda kv: -kv[1]))
    return (f"compiled {len(info['files'])} kernel files for {', '.join(info['ops'])} in "
            f"{info['seconds']:.1f} s before timing ({files})")


def precompile(toolkit, ops: list[str]) -> dict:
    """Compile every kernel file the ops' plans may launch, once: {"ops", "seconds", "files"} (or an
    "error": a kernel that does not compile fails its own plans, as outcomes, later)."""
    t0 = time.perf_counter()
    try:
        files = {name: round(float(sec), 3) for name, sec in toolkit.precompile(ops).items()}
    except Exception as exc:
        return {"ops": ops, "seconds": round(time.perf_counter() - t0, 3), "files": {}, "error": _one_line(exc)}
    return {"ops": ops, "seconds": round(time.perf_counter() - t0, 3), "files": files}


def run_suite(work: list[GraphWork], options: RunOptions, ctx: RunContext, toolkit,
              listener: Listener | None = None) -> Iterator[list[Row]]:
    """Yield each case's rows as soon as it is measured (the caller writes them incrementally, so an
    interrupted run keeps what it measured). Each graph is loaded and moved to the device once, and
    device memory is returned after every case and graph."""
    listener = listener or Listener()
    ops = sorted({c.op for w in work for c in w.cases})
    if ops:
        info = precompile(toolkit, ops)
        ctx.environment["compile"] = info
        listener.on_compile(info)
    faults = guard.FaultState()
    for w in work:
        listener.on_graph(w)
        graph = dgraph = None
        try:
            if not faults.lost:
                graph = w.spec.load(options.root, options.seed)
                dgraph = toolkit.device_graph(graph)
        except Exception as exc:   # out of memory, a CUDA fault, a graph that cannot load
            reason = f"load: {faults.note(exc)}"
        for case in w.cases:
            listener.on_case(w, case)
            if faults.lost or dgraph is None:
                reason = faults.not_run() if faults.lost else reason
                yield [guard.failed_row(ctx, w.spec.label, graph, case, reason)]
                continue
            try:
                guard.check_device_budget(toolkit, graph, case)
                rows = CaseRunner(toolkit, ctx, w.spec.label, graph, dgraph, case).run()
            except Exception as exc:   # the case ends; the run goes on (or stops its GPU work)
                rows = [guard.failed_row(ctx, w.spec.label, graph, case, faults.note(exc))]
            _free(toolkit, faults)
            yield rows
        del dgraph, graph
        _free(toolkit, faults)
    if faults.lost:
        raise faults.fault


def _free(toolkit, faults: "guard.FaultState") -> None:
    if faults.lost:
        return   # every CUDA call fails once the context is lost
    try:
        toolkit.free()
    except Exception as exc:
        faults.note(exc)


def make_context(toolkit, options: RunOptions) -> tuple[RunContext, dict]:
    """Environment once per run and the copy bandwidth measured in this run (the ceiling
    effective bandwidths are compared with). The environment
    dict is shared with the context: run_suite adds the kernel compile seconds (`compile`) to it."""
    env = toolkit.environment()
    device = env.get("device") or {}
    ctx = RunContext(commit=str(env.get("commit", "")), gpu=str(device.get("name", "")),
                     copy_tbps=toolkit.copy_bandwidth_tbps(), options=options, environment=env)
    return ctx, env
