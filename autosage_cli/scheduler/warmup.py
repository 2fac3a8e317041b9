"""Warming CuPy's own kernels ahead of time.

A tune launches CuPy kernels besides autosage's (random inputs, NaN poisoning of outputs, the
vendor pipelines, error norms, work lists, the timing spin), and CuPy compiles each on first use
into the same disk cache. `warm_up` tunes a tiny graph once per op, probing every schedule that
supports the width, so those kernels are compiled and cached too: `autosage compile` on a GPU then
leaves a later first tune nothing to compile. Which CuPy kernels run does not depend on the graph's
size (they are specialised by element type and layout), so a tiny graph serves for all.
"""
from __future__ import annotations

import time

from .. import ops as op_specs

TINY = ("erdos-renyi", {"n": 2048, "p": 8 / 2048})
EVERY_CANDIDATE = 10_000     # top-k: probe every supported schedule
BUDGET_MS = 1.0              # timing repeats beyond the minimum are not the point here


def warm_up(ops, progress=None) -> dict[str, float]:
    """Tune a tiny graph once per op (no decision cache); op -> seconds it took."""
    from ..graphs.synthetic import generate
    from . import tune as tune_mod

    graph = generate(TINY[0], TINY[1], seed=0)
    seconds = {}
    for op in ops:
        k, heads = op_specs.get(op).warmup_shape
        t0 = time.perf_counter()
        tune_mod.tune(graph, op, k, heads, cache=None, top_k=EVERY_CANDIDATE, budget_ms=BUDGET_MS,
                      progress=progress)
        seconds[op] = time.perf_counter() - t0
    return seconds
