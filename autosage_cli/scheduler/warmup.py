"""A tiny tune of each op after `autosage compile` on a GPU.

What a tune launches besides the candidates' kernels (random inputs, NaN poisoning of outputs, the
vendor compositions' elementwise steps, error norms, work lists, the timing spin) runs in
autosage's helper kernels (kernels/util.py), which `autosage compile` builds with the rest, so the
kernels alone leave a later first tune nothing to compile. `warm_up` tunes a tiny graph once per
op, probing every schedule that supports the width: every module just built is loaded and run
once, and anything a tune still compiles beyond them (a CuPy kernel on some path, compiled on
first use into the same disk cache) is cached too. What runs does not depend on the graph's size
(kernels are specialised by element type and layout), so a tiny graph serves for all.
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
