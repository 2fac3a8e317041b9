"""autosage's rows of a benchmark case: the tune (the probe, or the oracle's whole-graph probe), its
plan measured like every other plan, the warm (cache-hit) tune's overhead, and whether the probe
agreed with the oracle."""
from __future__ import annotations

import math
import time

from ..errors import one_line
from .plan_timing import Measured, as_float as _float
from .rows import PROBE_COLUMNS, Row

# The oracle probes on the whole graph, where one launch can take tens of ms (products-like at
# K=256) or hundreds (attention H=8): every candidate gets its minimum repeats whatever the budget,
# and the oracle's larger budget buys the rest of its repeats.
ORACLE_BUDGET_MS = 20_000.0


def decision_backend(decision) -> tuple[str, str]:
    backend = str(getattr(decision, "backend", ""))
    schedule = getattr(decision, "schedule", "")
    return backend, str(getattr(schedule, "name", schedule) or backend)


def autosage_row(runner, full: bool) -> tuple[Row, tuple[str, str]]:
    """autosage's row of the case (`runner`, a bench.case.CaseRunner): its tune (the probe, or with
    `full` the oracle's whole-graph probe, which never touches the user's cache), then its plan
    measured like the others; and what it chose (backend, schedule)."""
    c, o = runner.case, runner.opts
    # The graph's fingerprint and features, once per graph and outside the tune's time.
    try:
        _, features_ms, fingerprint_ms = runner.tk.graph_features(runner.graph, runner.dgraph)
    except Exception as exc:
        m = Measured("autosage", "", "failed", error=f"features: {one_line(exc, 300)}")
        return runner.row(m, "oracle" if full else "probe"), ("", "")
    t0 = time.perf_counter()
    try:
        # The oracle never touches the user's cache: its full-graph decision would replace the
        # probe's, and the next run would replay the oracle instead of measuring the probe.
        budget = max(o.budget_ms or 0.0, ORACLE_BUDGET_MS) if full else o.budget_ms
        result = runner.tk.tune(runner.graph, c.op, c.k, c.heads, cache=None if full else o.cache,
                              top_k=o.top_k, budget_ms=budget, guardrail=o.guardrail,
                              full=full, seed=o.seed, dgraph=runner.dgraph, dtype=c.dtype)
    except Exception as exc:
        m = Measured("autosage", "", "failed", error=f"tune: {one_line(exc, 300)}")
        return runner.row(m, "oracle" if full else "probe"), ("", "")
    tune_ms = (time.perf_counter() - t0) * 1e3
    decision = "oracle" if full else ("cache" if getattr(result, "cache_hit", False) else "probe")
    choice = decision_backend(result.decision)
    plan, failed = runner.timer.prepare("autosage", choice[1],
                                 lambda: runner.tk.plan_for(runner.dgraph, result.decision, c.k, c.heads, c.dtype))
    m = failed or runner.timer.measure(plan, backend="autosage")
    m.schedule = choice[1]
    row = runner.row(m, decision)
    row.chosen_backend, row.tune_ms = choice[0], tune_ms
    row.reason = " ".join(str(getattr(result.decision, "reason", "")).split())
    row.features_ms, row.fingerprint_ms = _float(features_ms), _float(fingerprint_ms)
    row.compile_ms = math.fsum(x for x in (_float(result.timings.get("compile_ms")), m.compile_ms)
                               if math.isfinite(x))
    for column in PROBE_COLUMNS:     # where the probe's time went (a cache hit has none)
        setattr(row, column, _float(result.timings.get(column)))
    if not full and o.cache is not None:
        row.warm_tune_ms = warm_tune_ms(runner)
    return row, choice


def warm_tune_ms(runner) -> float:
    """The warm-tune overhead: the same tune again, now answered by the cache."""
    c, o = runner.case, runner.opts
    t0 = time.perf_counter()
    try:
        runner.tk.tune(runner.graph, c.op, c.k, c.heads, cache=o.cache, top_k=o.top_k,
                     budget_ms=o.budget_ms, guardrail=o.guardrail, full=False, seed=o.seed,
                     dgraph=runner.dgraph, dtype=c.dtype)
    except Exception:  # the first tune succeeded; a failing second one is not this row's time
        return math.nan
    return (time.perf_counter() - t0) * 1e3


def mark_agreement(probe: Row, probe_choice, oracle: Row, oracle_choice) -> None:
    from .report import probe_agrees

    probe.oracle_schedule, probe.oracle_ms = oracle.schedule, oracle.ms_median
    if oracle.status != "ok":
        return  # nothing to compare with
    agrees = probe.status == "ok" and probe_agrees(probe_choice, probe.ms_median, oracle_choice,
                                                   oracle.ms_median)
    probe.probe_agrees = oracle.probe_agrees = "yes" if agrees else "no"
