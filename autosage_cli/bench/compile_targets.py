"""The training suite's torch.compile targets: per compile mode, our compiled epoch against our
eager one on the same graph, model and type (the worst pair), no slower (>= 1x). Beside each, the
same ratio of the suite's graph-free control (op CONTROL_OP, backend `torch`: two linear maps with
a ReLU, torch alone) on the same graph: what torch.compile's own runtime does to a step this small
on the machine measured, which no graph op can undo. The control is shown, not judged."""
from __future__ import annotations

import math

from .rows import Row
from .target import Target

# training rows of torch.compile's modes (schedule column): its default and reduce-overhead
COMPILED_MODES = ("compiled", "reduce-overhead")
CONTROL_OP = "train-mlp"


def _ratios(rows: list[Row], backend: str, mode: str) -> list[tuple[float, Row]]:
    """(eager median / `mode`'s median, the mode's row) of every `backend` row of `mode` whose
    eager row (schedule `graph`, the same graph, op and type) ran."""
    eager = {(r.graph, r.op, r.dtype): r for r in rows if r.backend == backend and r.schedule == "graph"
             and r.status == "ok" and not r.reorder}
    return [(eager[key].ms_median / r.ms_median, r) for r in rows
            if r.backend == backend and r.schedule == mode and r.status == "ok"
            and (key := (r.graph, r.op, r.dtype)) in eager and r.ms_median > 0]


def compile_targets(rows: list[Row]) -> list[Target]:
    """One target per compile mode our rows ran in (module docstring)."""
    out = []
    for mode in COMPILED_MODES:
        if not any(r.backend == "autosage" and r.schedule == mode for r in rows):
            continue
        pairs = _ratios(rows, "autosage", mode)
        worst = min(pairs, key=lambda p: p[0], default=None)
        detail = ", ".join(f"{r.graph} {r.op.removeprefix('train-')} {x:.2f}x" for x, r in pairs)
        control = [(x, r) for x, r in _ratios(rows, "torch", mode) if r.op == CONTROL_OP]
        if control:
            detail += ("; torch alone (no graph op): "
                       + ", ".join(f"{r.graph} {x:.2f}x" for x, r in control))
        out.append(Target(f"torch.compile ({mode}) of our models vs our eager epoch, small graphs",
                          worst[0] if worst else math.nan, 1.0, detail or "no timed rows", worst is not None))
    return out
