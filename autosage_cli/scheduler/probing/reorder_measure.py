"""The measurement behind a reordering decision (scheduler.reorder_decision): the op tuned (or
looked up) and timed on the original order and on the reordered graph, with the features moved
with the vertices (B_new = B[perm]), so that the reordered result must equal the original one
permuted (C_new = C[perm], within the op's tolerance at this width and longest row).

`OrderMeasurer(cache)` is the callable `decide` and `autosage replay` take; its `measure` is the
GpuMeasurer (a NumPy fake in CPU tests, with the same `take_rows`).
"""
from __future__ import annotations

import numpy as np

from ... import dtypes, ops as op_specs
from ...graphs.csr import CSRGraph
from ..decisions.reorder_decision import OrderTimes

REPEAT, WARMUP = 20, 3


class OrderMeasurer:
    def __init__(self, cache, measure=None, repeat: int = REPEAT, warmup: int = WARMUP, seed: int = 0,
                 **tune_kwargs):
        self.cache, self.measure = cache, measure
        self.repeat, self.warmup, self.seed = repeat, warmup, seed
        self.tune_kwargs = tune_kwargs   # device_info, software_info, features... for the tunes

    def _measurer(self):
        if self.measure is None:
            from .measure import GpuMeasurer
            self.measure = GpuMeasurer()
        return self.measure

    def _timed(self, graph: CSRGraph, dgraph, inputs, op: str, k: int, dtype: str):
        from .. import tune as tune_mod
        from ..decisions.plans import plan_for

        m = self._measurer()
        result = tune_mod.lookup_or_tune(graph, op, k, cache=self.cache, measure=m, dtype=dtype,
                                         **self.tune_kwargs)
        plan = plan_for(dgraph, result.decision.to_dict(), k, 1, measure=m, dtype=dtype)
        out = m.run(plan, inputs)
        stats = m.time(plan, inputs, out, repeat=self.repeat, warmup=self.warmup)
        return float(stats.median_ms), result.decision.schedule, out

    def __call__(self, original: CSRGraph, reordered: CSRGraph, perm: np.ndarray, op: str, k: int,
                 dtype: str = dtypes.DEFAULT) -> OrderTimes:
        m = self._measurer()
        d_original = m.to_device(original)
        inputs = m.inputs(d_original, op, k, 1, self.seed, dtype)
        before_ms, before_schedule, c_original = self._timed(original, d_original, inputs, op, k, dtype)
        d_reordered = m.to_device(reordered)
        moved = tuple(m.take_rows(x, perm) for x in inputs)
        after_ms, after_schedule, c_reordered = self._timed(reordered, d_reordered, moved, op, k, dtype)
        error = m.rel_error(c_reordered, m.take_rows(c_original, perm))
        longest = int(np.diff(original.indptr).max(initial=0))
        bound = op_specs.case_tolerance(op, dtype, k, longest)
        return OrderTimes(before_ms, after_ms, before_schedule, after_schedule, error,
                          bool(error <= bound))
