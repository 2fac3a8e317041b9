"""The targets of reordered graphs (`autosage bench --reorder`), each only when its rows are there:

- SpMM on a shuffled graph (a graph `G-shuffled` whose twin `G`, the same graph in its natural
  order, is in the run) after its best reordering within REORDER_NATURAL_RATIO of G's time, at
  every K: the order recovered, measured as time;
- that reordering's cost (computing the order and relabelling) within REORDER_COST_S;
- a full-graph training epoch with reordering, its cost spread over rows.AMORTISE_EPOCHS epochs,
  at least TRAINING_REORDER_SPEEDUP times faster than the same model on the user's order.
"""
from __future__ import annotations

import math

from ..scheduler.decisions.reorder_decision import OPS
from .rows import Row
from .target import Target

SHUFFLED_SUFFIX = "-shuffled"
REORDER_NATURAL_RATIO = 1.1
REORDER_COST_S = 10.0
TRAINING_REORDER_SPEEDUP = 1.5


def _main(row: Row) -> bool:
    return row.backend == "autosage" and row.decision in ("probe", "cache") and row.status == "ok" \
        and math.isfinite(row.ms_median)


def _kernel_cases(rows: list[Row]) -> list[tuple[str, int, float, Row]]:
    """(graph, K, best reordered ms / natural ms, the best reordered row) per shuffled case of the
    op a reordering is decided on (SpMM)."""
    natural = {(r.graph, r.k, r.dtype): r for r in rows if _main(r) and r.op in OPS and not r.reorder}
    best: dict[tuple, Row] = {}
    for r in rows:
        if not (_main(r) and r.op in OPS and r.reorder and r.graph.endswith(SHUFFLED_SUFFIX)):
            continue
        key = (r.graph, r.k, r.dtype)
        if key not in best or r.ms_median < best[key].ms_median:
            best[key] = r
    out = []
    for (graph, k, dtype), r in sorted(best.items()):
        twin = natural.get((graph.removesuffix(SHUFFLED_SUFFIX), k, dtype))
        if twin is not None:
            out.append((graph, k, r.ms_median / twin.ms_median, r))
    return out


def reorder_targets(rows: list[Row]) -> list[Target]:
    out = []
    cases = _kernel_cases(rows)
    if cases:
        worst = max(cases, key=lambda c: c[2])
        detail = ", ".join(f"{g} K={k} {r.reorder} {ratio:.2f}x" for g, k, ratio, r in cases)
        out.append(Target("SpMM on a shuffled graph after its best reordering vs its natural order",
                          worst[2], REORDER_NATURAL_RATIO, detail, True, "×", True))
        costly = max(cases, key=lambda c: c[3].reorder_s)
        out.append(Target("Reordering cost (order + relabel) of those best reorderings",
                          costly[3].reorder_s, REORDER_COST_S,
                          f"slowest: {costly[3].reorder} on {costly[0]}", True, " s", True))
    training = [r for r in rows if r.op.startswith("train-") and r.reorder and r.backend == "autosage"
                and r.status == "ok" and math.isfinite(r.speedup_vs_user_order)]
    if training:
        worst = min(training, key=lambda r: r.speedup_vs_user_order)
        out.append(Target("Training epoch with reordering (cost over 100 epochs) vs the user's order",
                          worst.speedup_vs_user_order, TRAINING_REORDER_SPEEDUP,
                          f"worst: {worst.graph} {worst.op} {worst.reorder}; "
                          + ", ".join(f"{r.graph} {r.op} {r.reorder} {r.speedup_vs_user_order:.2f}x"
                                      for r in training), True))
    return out
