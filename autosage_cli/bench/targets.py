"""Benchmark arithmetic, pure functions over `Row`s (tested on CPU): geomeans, probe agreement with
the oracle, per op × graph summaries, and the performance targets, each MET / MISSED / NOT MEASURED with
its number and what it covers. `bench.report` renders them (README, rich tables, --json).
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from .compile_targets import COMPILED_MODES, compile_targets
from .reorder_targets import reorder_targets
from .rows import Row
from .target import Target

AGREEMENT_TOLERANCE = 0.05        # a probe choice within 5% of the oracle's time counts as agreeing
ATTENTION_TARGET_GRAPHS = ("reddit-like", "products-like")   # the attention targets: d = 64, H ∈ {1, 8}
ATTENTION_TARGET_D = 64
TUNE_TARGET_GRAPH = "reddit-like"  # the cache-hit target is read on reddit-like
COLD_TUNE_TARGET = "Cold tune (features + probe), per (op, K), graphs >= 10M nonzeros"
COLD_TUNE_MS = 1000.0              # a cold tune (features + probe) of one (op, K)...
COLD_TUNE_MIN_NNZ = 10_000_000     # ...on every graph of at least this many nonzeros
EXHAUSTIVE_TOLERANCE = 0.05       # the choice counts as reaching the exhaustive best within 5%
LARGE_NNZ = 10_000_000            # "at scale": graphs with at least this many nonzeros
NOT_VENDORS = ("native", "autosage", "torch", "pyg")   # backends that are not a vendor algorithm
TRAINING_PREFIX = "train-"        # ops of the training suite (epochs, not kernels)
MINIBATCH_PREFIX = "minibatch-"   # ops of the mini-batch suite (steps on sampled subgraphs)
# training rows of a mode of their own beside the eager ones (schedule column): a captured CUDA
# graph per step (ours), torch.compile in its default and reduce-overhead modes (both libraries;
# torch/training.py's COMPILE_MODES runs them). The targets judge the eager rows.
TRAINING_MODES = ("captured", *COMPILED_MODES)
# (op, model, our epoch speed-up over PyG's to reach) of the training suite
TRAINING_TARGETS = (("train-gcn", "GCN", 1.3), ("train-sage", "GraphSAGE", 1.3), ("train-gat", "GAT", 5.0))
LOSS_TOLERANCE = 1e-3
# small graphs (below this many nonzeros: a step is host-bound there): the captured epoch against
# PyG's fastest mode, and each torch.compile mode of our model against our eager epoch (>= 1: no slower)
SMALL_GRAPH_NNZ = 1_000_000
CAPTURED_TARGETS = (("train-gcn", "GCN", 8.0), ("train-sage", "GraphSAGE", 8.0), ("train-gat", "GAT", 4.0))
# the same for the mini-batch suite (steps 6..50 on sampled subgraphs, PyG's fastest mode), a new
# batch's step against the same batch stepped again (its Graph and plans built), and the first step
MINIBATCH_TARGETS = (("minibatch-gcn", "GCN", 1.6), ("minibatch-sage", "GraphSAGE", 1.25),
                     ("minibatch-gat", "GAT", 1.5))
NEW_BATCH_OVER_FLOOR = 1.15
FIRST_STEP_MS = 1000.0


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of the finite positive values; NaN when there are none."""
    logs = [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def probe_agrees(probe: tuple[str, str], probe_ms: float, oracle: tuple[str, str], oracle_ms: float,
                 tolerance: float = AGREEMENT_TOLERANCE) -> bool:
    """The probe agrees with the oracle when it chose the same (backend, schedule), or a choice whose
    full-graph time is within `tolerance` of the oracle's (both timed side by side in the run)."""
    if tuple(probe) == tuple(oracle):
        return True
    if not (math.isfinite(probe_ms) and math.isfinite(oracle_ms)) or oracle_ms <= 0:
        return False
    return probe_ms <= (1.0 + tolerance) * oracle_ms


def is_main(row: Row) -> bool:
    """The autosage row of a case: what a user gets (a fresh probe or a cache hit)."""
    return row.backend == "autosage" and row.decision in ("probe", "cache")


def agreement(rows: Iterable[Row]) -> tuple[int, int]:
    """(agreeing, compared) over autosage rows that have an oracle to compare with."""
    marks = [r.probe_agrees for r in rows if is_main(r) and r.probe_agrees in ("yes", "no")]
    return sum(m == "yes" for m in marks), len(marks)


def case_key(row: Row) -> tuple:
    return (row.graph, row.op, row.k, row.heads, row.dtype)


def attention_kind(schedule: str) -> str | None:
    """"fused" or "unfused" for a native attention schedule name (op.family....), else None. The
    unfused pipelines are the families named *unfused* / *pipeline*; every other attention family
    is a fused kernel."""
    parts = schedule.split(".")
    if len(parts) < 2 or parts[0] != "attention":
        return None
    return "unfused" if ("unfused" in parts[1] or "pipeline" in parts[1]) else "fused"


@dataclass(frozen=True)
class ExhaustiveCase:
    """One case timed exhaustively (--exhaustive): the best of every native schedule and vendor
    algorithm on the full graph, and autosage's choice against it."""
    graph: str
    op: str
    k: int
    heads: int
    dtype: str
    nnz: int
    best_ms: float
    best: str              # backend or schedule of the exhaustive best
    choice_ms: float
    choice: str

    @property
    def ratio(self) -> float:
        """exhaustive best / choice: 1.0 when the choice is the best, 0.5 when it is 2x slower."""
        return self.best_ms / self.choice_ms if self.choice_ms > 0 else math.nan

    @property
    def within(self) -> bool:
        return math.isfinite(self.ratio) and self.choice_ms <= (1 + EXHAUSTIVE_TOLERANCE) * self.best_ms


def exhaustive_cases(rows: list[Row]) -> list[ExhaustiveCase]:
    """The cases whose every native schedule was timed ("fixed" native rows): per case, the best
    verified time over those, the vendor algorithms and autosage's own rows."""
    by_case: dict[tuple, list[Row]] = defaultdict(list)
    for r in rows:
        by_case[case_key(r)].append(r)
    out = []
    for key, rs in sorted(by_case.items()):
        main = next((r for r in rs if is_main(r)), None)
        if main is None or not any(r.backend == "native" and r.decision == "fixed" for r in rs):
            continue
        contenders = [r for r in rs if r.status == "ok" and math.isfinite(r.ms_median) and
                      (r.backend in ("native", "autosage") or r.backend not in NOT_VENDORS)]
        if not contenders:
            continue
        best = min(contenders, key=lambda r: r.ms_median)
        choice_ms = main.ms_median if main.status == "ok" else math.nan
        out.append(ExhaustiveCase(*key, main.nnz, best.ms_median,
                                  best.schedule if best.backend in ("native", "autosage") else best.backend,
                                  choice_ms, main.schedule or main.chosen_backend))
    return out


def _exhaustive_targets(rows: list[Row]) -> list[Target]:
    """The choice against the exhaustive best: within 5% in >= 90% of the cases on graphs of
    >= 10M nonzeros and overall; the worst case >= 0.90x the exhaustive best."""
    cases = exhaustive_cases(rows)
    large = [c for c in cases if c.nnz >= LARGE_NNZ]
    out = []
    for name, group in ((f"Choice within 5% of the exhaustive best (>= {LARGE_NNZ // 1_000_000}M nonzeros)",
                         large), ("Choice within 5% of the exhaustive best (all graphs)", cases)):
        hits = sum(c.within for c in group)
        missed = [f"{c.graph} {c.op} K={c.k} {c.ratio:.2f}x" for c in group if not c.within]
        detail = f"{hits} of {len(group)} cases" + (f"; missed: {', '.join(missed[:8])}" if missed else "")
        out.append(Target(name, hits / len(group) if group else math.nan, 0.9, detail, bool(group), ""))
    worst = min(cases, key=lambda c: c.ratio if math.isfinite(c.ratio) else -1.0, default=None)
    out.append(Target("Choice vs the exhaustive best, worst case", worst.ratio if worst else math.nan, 0.9,
                      f"{worst.graph} {worst.op} K={worst.k}: {worst.choice} vs {worst.best}" if worst else
                      "no exhaustive rows (run with --exhaustive)", worst is not None))
    return out


@dataclass(frozen=True)
class GroupSummary:
    op: str
    graph: str
    cases: int
    geomean: float        # autosage speed-up vs best vendor
    worst: float
    worst_k: int
    failed: int           # autosage rows that failed or were wrong


def group_summaries(rows: list[Row]) -> list[GroupSummary]:
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if is_main(r):
            groups[(r.op, r.graph + (f" [{r.reorder}]" if r.reorder else ""))].append(r)
    out = []
    for (op, graph), rs in sorted(groups.items()):
        timed = [r for r in rs if math.isfinite(r.speedup_vs_best_vendor)]
        worst = min(timed, key=lambda r: r.speedup_vs_best_vendor, default=None)
        out.append(GroupSummary(op, graph, len(rs), geomean(r.speedup_vs_best_vendor for r in rs),
                                worst.speedup_vs_best_vendor if worst else math.nan,
                                worst.k if worst else 0, sum(r.status != "ok" for r in rs)))
    return out


def _target(name: str, values: list[float], threshold: float, how: str, detail: str = "",
            gaps: str = "") -> Target:
    """`gaps` says which cases could not be measured and why (shown whether or not others were)."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return Target(name, math.nan, threshold, gaps or detail or "no rows", False)
    value = geomean(values) if how == "geomean" else min(values)
    text = f"{how} of {len(values)} rows" + (f"; {detail}" if detail else "") + (f"; {gaps}" if gaps else "")
    return Target(name, value, threshold, text, True)


def _vendors(main: list[Row], rows: list[Row] | None = None) -> str:
    """'vs alg1 ×3, alg3 ×5': which vendor was the best in the rows a target covers (and, given
    all rows, which provider ran it, e.g. torch.sparse.sampled_addmm)."""
    names: dict[str, int] = defaultdict(int)
    for r in main:
        if r.best_vendor:
            names[r.best_vendor] += 1
    text = ", ".join(f"{n} ×{c}" for n, c in sorted(names.items()))
    providers = sorted({r.provider for r in rows or [] if r.backend in names and r.provider})
    return ("vs " + text if text else "") + (f" ({', '.join(providers)})" if providers else "")


def _worst(main: list[Row]) -> str:
    timed = [r for r in main if math.isfinite(r.speedup_vs_best_vendor)]
    if not timed:
        return ""
    w = min(timed, key=lambda r: r.speedup_vs_best_vendor)
    return f"worst: {w.graph} K={w.k} ({w.schedule} vs {w.best_vendor})"


def _attention_cases(rows: list[Row]) -> list[dict]:
    """Per attention case at d = 64 on the target graphs (all attention cases at d = 64 when those
    graphs are absent): the best fused and unfused native times, PyG and the best vendor."""
    att = [r for r in _by_op(rows)["attention"] if r.k == ATTENTION_TARGET_D]
    if any(r.graph in ATTENTION_TARGET_GRAPHS for r in att):
        att = [r for r in att if r.graph in ATTENTION_TARGET_GRAPHS]
    cases: dict[tuple, dict] = defaultdict(lambda: {"fused": math.inf, "unfused": math.inf,
                                                    "pyg": math.nan, "vendor": math.nan})
    for r in att:
        c = cases[case_key(r)]
        ok = r.status == "ok" and math.isfinite(r.ms_median)
        kind = attention_kind(r.schedule) if r.backend in ("native", "autosage") else None
        if ok and kind:
            c[kind] = min(c[kind], r.ms_median)
        if ok and r.backend == "pyg":
            c["pyg"] = r.ms_median
        elif r.backend == "pyg" and r.error:
            c["pyg_reason"] = f"PyG {r.status} on {r.graph} H={r.heads}: {r.error}"
        if math.isfinite(r.best_vendor_ms):
            c["vendor"] = r.best_vendor_ms
    return [dict(v, case=k) for k, v in sorted(cases.items())]


def _by_op(rows: list[Row]) -> dict[str, list[Row]]:
    grouped: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        grouped[r.op].append(r)
    return grouped


def evaluate_targets(rows: list[Row]) -> list[Target]:
    """The performance targets, each MET / MISSED / NOT MEASURED with its number. The kernel
    targets judge the user's orders; reordered graphs have targets of their own (bench.reorder_targets)."""
    reordered, rows = rows, [r for r in rows if not r.reorder]
    main = [r for r in rows if is_main(r)]
    by_op = _by_op(main)
    spmm, sddmm = by_op["spmm"], by_op["sddmm"]   # the targets name their ops
    sp = lambda rs: [r.speedup_vs_best_vendor for r in rs]  # noqa: E731
    small = [r for r in spmm if r.k <= 16]
    targets = [
        _target("SpMM geomean speed-up vs best cuSPARSE", sp(spmm), 1.5, "geomean", _vendors(spmm)),
        _target("SpMM geomean speed-up at K <= 16", sp(small), 2.0, "geomean", _vendors(small)),
        _target("SpMM worst row vs best cuSPARSE", sp(spmm), 0.97, "min", _worst(spmm)),
        _target("SDDMM worst row vs best vendor", sp(sddmm), 0.97, "min", _worst(sddmm)),
        # The SDDMM vendor is cusparseSDDMM when nvmath or torch provides it, else the gather-dot
        # composition: the detail names the provider so a MET against gather-dot is not misread.
        _target("SDDMM geomean speed-up vs the best vendor SDDMM", sp(sddmm), 2.0, "geomean",
                _vendors(sddmm, rows)),
    ]
    cases = _attention_cases(rows)
    names = sorted({c["case"][0] for c in cases})
    where = f"d={ATTENTION_TARGET_D} on {', '.join(names)}" if names else ""
    ratio = lambda base, ours: base / ours if math.isfinite(ours) and base > 0 else math.nan  # noqa: E731
    targets += [
        _target("Attention fused vs PyG", [ratio(c["pyg"], c["fused"]) for c in cases], 25.0, "min", where,
                gaps="; ".join(c["pyg_reason"] for c in cases if "pyg_reason" in c)),
        _target("Attention fused vs best unfused vendor",
                [ratio(c["vendor"], c["fused"]) for c in cases], 3.0, "min", where),
        _target("Attention fused vs our unfused", [ratio(c["unfused"], c["fused"]) for c in cases],
                1.5, "min", where),
    ]
    agreed, compared = agreement(rows)
    targets.append(Target("Probe agrees with the full-graph top-k probe (--oracle)",
                          agreed / compared if compared else math.nan, 0.9,
                          f"{agreed} of {compared} cases (same choice or within 5%); not exhaustive",
                          compared > 0, ""))
    targets += _exhaustive_targets(rows)
    targets += training_targets(rows)
    targets += reorder_targets(reordered)
    targets += _tuning_targets([r for r in main if not r.op.startswith((TRAINING_PREFIX, MINIBATCH_PREFIX))])
    bad = [r for r in main if r.status != "ok"]
    targets.append(Target("Autosage rows verified", 1.0 - len(bad) / len(main) if main else math.nan,
                          1.0, f"{len(main) - len(bad)} of {len(main)} rows", bool(main), ""))
    return targets


def training_targets(rows: list[Row]) -> list[Target]:
    """The training suite's targets (training epochs) and the mini-batch suite's (steps), each only
    when its rows are there; the mini-batch suite also a new batch's step against its floor (the
    worst row) and the first step (the slowest)."""
    eager = [r for r in rows if r.schedule not in TRAINING_MODES]
    out = _model_targets(eager, TRAINING_TARGETS, "training epoch", "Training")
    small = [r for r in rows if r.op.startswith("train-") and r.nnz < SMALL_GRAPH_NNZ]
    captured = [r for r in small if r.backend == "pyg" or r.schedule == "captured"]
    out += [t for t in _model_targets(captured, CAPTURED_TARGETS, "captured epoch on small graphs", "Captured")
            if "loss" not in t.name]
    out += compile_targets(small)
    # the mini-batch suite's captured step (its own rows, PyG's beside them) is a second set
    captured = [r for r in rows if r.op.startswith(MINIBATCH_PREFIX) and (r.backend == "pyg" or r.schedule == "captured")]
    for label, minibatch in (("Mini-batch", eager), ("Mini-batch captured", captured)):
        what = "mini-batch step" if label == "Mini-batch" else "captured mini-batch step"
        out += _model_targets(minibatch, MINIBATCH_TARGETS, what, label)
        ours = [r for r in minibatch if r.op.startswith(MINIBATCH_PREFIX) and r.backend == "autosage" and r.status == "ok"]
        if ours:
            over = [(r.ms_median / r.floor_ms, r) for r in ours if r.floor_ms > 0]
            worst = max(over, key=lambda o: o[0], default=None)
            out.append(Target(f"{label} step on a new batch vs the same batch again (floor)",
                              worst[0] if worst else math.nan, NEW_BATCH_OVER_FLOOR,
                              f"worst: {worst[1].graph} {worst[1].op} {worst[1].dtype}" if worst else "no floor",
                              worst is not None, "×", True))
            first = max(ours, key=lambda r: r.first_step_ms)
            out.append(Target(f"{label} first step (tuning included)", first.first_step_ms, FIRST_STEP_MS,
                              f"slowest: {first.graph} {first.op} {first.dtype}, {first.probes:g} probes in all",
                              True, "ms", True))
    return out


def _model_targets(rows: list[Row], table, what: str, suite: str) -> list[Target]:
    """Per model of `table` (op, name, floor): our time vs PyG's, the worst graph (GAT also meets
    its target on a graph where PyG cannot run at all), and the last losses of the two libraries
    equal within LOSS_TOLERANCE (relative, the worst row)."""
    out, ours_all = [], []
    for op, name, floor in table:
        ours = [r for r in rows if r.op == op and r.backend == "autosage"]
        if not ours:
            continue
        ours_all += ours
        pyg: dict = {}     # every PyG row of a (graph, dtype): one per mode
        for t in (t for t in rows if t.op == op and t.backend == "pyg"):
            pyg.setdefault((t.graph, t.dtype), []).append(t)
        ratios, gaps = [], []
        for r in ours:
            theirs = pyg.get((r.graph, r.dtype), [])
            if theirs and not any(t.status == "ok" for t in theirs) and r.status == "ok":
                gaps.append(f"PyG cannot run {r.graph}: " + "; ".join(dict.fromkeys(t.error for t in theirs if t.error)))
                ratios.append(math.inf if op.endswith("-gat") else math.nan)
            else:
                ratios.append(r.speedup_vs_best_vendor if r.status == "ok" else 0.0)
        detail = ", ".join(f"{r.graph}{'' if r.dtype == 'float32' else ' ' + r.dtype} {x:.2f}x"
                           for r, x in zip(ours, ratios) if math.isfinite(x))
        measured = [x for x in ratios if not math.isnan(x)]
        out.append(Target(f"{name} {what} vs PyG", min(measured, default=math.nan), floor,
                          "; ".join(filter(None, [detail, *gaps])) or "no rows", bool(measured)))
    if ours_all:
        # float32 runs only: in a 2-byte type the two libraries round differently at every step
        diffs = [(r.rel_error, r) for r in ours_all if math.isfinite(r.rel_error) and r.dtype == "float32"]
        worst = max(diffs, key=lambda d: d[0], default=None)
        out.append(Target(f"{suite} loss equal to PyG's after the same steps (relative)",
                          worst[0] if worst else math.nan, LOSS_TOLERANCE,
                          f"worst of {len(diffs)} rows: {worst[1].graph} {worst[1].op}" if worst
                          else "PyG ran no model", worst is not None, "", True))
    return out


def _tuning_targets(main: list[Row]) -> list[Target]:
    """The tuning-overhead targets. A cold tune costs at most COLD_TUNE_MS per (op, K) on every
    graph of COLD_TUNE_MIN_NNZ nonzeros or more (tune_ms + features_ms: the probe plus the graph's
    features, which the benchmark computes once per graph; the fingerprint is reported on its own);
    a warm one (a cache hit) at most 50 ms, read on reddit-like (on every graph when it is not in
    the run)."""
    large = [r for r in main if r.nnz >= COLD_TUNE_MIN_NNZ]
    on = [r for r in main if r.graph == TUNE_TARGET_GRAPH] or main
    where = f"on {TUNE_TARGET_GRAPH}" if on and on[0].graph == TUNE_TARGET_GRAPH else "on every graph (no reddit-like rows)"
    cold = [(r.tune_ms + (r.features_ms if math.isfinite(r.features_ms) else 0.0), r)
            for r in large if r.decision == "probe" and math.isfinite(r.tune_ms)]
    warm = [(r.warm_tune_ms, r) for r in on if math.isfinite(r.warm_tune_ms)]
    cold_where = f"on graphs >= {COLD_TUNE_MIN_NNZ / 1e6:g}M nonzeros"
    out = []
    for name, pairs, limit, place in ((COLD_TUNE_TARGET, cold, COLD_TUNE_MS, cold_where),
                                      ("Warm tune (cache hit)", warm, 50.0, where)):
        if not pairs:
            out.append(Target(name, math.nan, limit, f"no rows {place}" if pairs is cold else "no rows",
                              False, " ms", True))
            continue
        value, worst = max(pairs, key=lambda p: p[0])
        out.append(Target(name, value, limit, f"max of {len(pairs)} rows {place}; worst: {worst.graph} "
                          f"{worst.op} K={worst.k}", True, " ms", True))
    return out
