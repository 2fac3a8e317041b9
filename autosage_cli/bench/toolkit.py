"""The GPU side of the benchmark: every device operation the harness needs, in one object.

Backends and the scheduler are imported when a `GpuToolkit` is made (after the GPU check), so
`bench.harness` imports and its loop is tested on machines without a GPU, against a NumPy fake with
the same methods (tests/bench_fakes.py). CuPy itself is touched only for synchronization and for
returning pooled device memory between widths and graphs.
"""
from __future__ import annotations

import gc
import sys
import time

from ..scheduler.probing.measure import GpuMeasurer


class GpuToolkit(GpuMeasurer):
    """The real GPU operations: the tuner's measurer (scheduler/probing/measure.py: device graphs,
    inputs, plans, verification runs, the float64 reference, timing), plus what only the benchmark
    does (baselines, every schedule, tuning, the environment, freeing memory)."""

    def __init__(self):
        from .. import cache, environment
        from .. import ops
        from ..backends import baselines, timing
        from ..kernels import compile as kcompile
        from ..kernels import schedule
        from ..scheduler import tune

        self._baselines, self._timing, self._ops = baselines, timing, ops
        self._schedule, self._tune, self._cache_mod, self._env = schedule, tune, cache, environment
        self._compile = kcompile
        self._features = (None, None, 0.0, 0.0)  # (graph, GraphFeatures, features ms, fingerprint ms)
        self._device_info = self._software_info = None

    def vendor_names(self, op: str) -> list[str]:
        """Every vendor entry of `op`: the benchmark's ratios are against the best vendor measured
        in the same process, whichever library it comes from."""
        return self._ops.vendor_names(op)

    def environment(self) -> dict:
        env = self._env.environment()
        # The scheduler's cache key needs these on every tune; look them up once per run.
        self._device_info, self._software_info = self._env.device_info(), self._env.software_info()
        return env

    def device_free_bytes(self) -> int:
        from ..backends.memory import device_free_bytes
        return device_free_bytes()

    def copy_bandwidth_tbps(self) -> float:
        return float(self._timing.copy_bandwidth_tbps())

    def prepare_baselines(self, dgraph, op, k, heads, dtype="float32"):
        """(plans, [(backend, reason) for each baseline that cannot run here])."""
        skipped: list = []
        wanted = self._ops.get(op).baselines
        plans = list(self._baselines.prepare_baselines(dgraph, wanted, k, heads, None, skipped=skipped,
                                                       dtype=dtype))
        return plans, skipped

    def schedules(self, op, k, heads, dtype="float32"):
        return list(self._schedule.candidates(op, k, heads, dtype))

    def precompile(self, ops, dtype="float32"):
        """Compile every kernel file the ops' plans may launch in `dtype`, and every group of the
        helper kernels the cases' inputs, checks, vendors and timing run on: {file: seconds}."""
        from ..kernels import util

        return self._compile.precompile(ops, dtype=dtype, extra=tuple(util.MODULES.values()))

    def graph_features(self, graph, dgraph=None):
        """(features, features_ms, fingerprint_ms): the graph's features and fingerprint, computed
        once per graph and timed apart (the features are part of a cold tune, the fingerprint is
        the cache's lookup key; both are reported in every row of the graph, apart from tune_ms)."""
        if self._features[0] is not graph:
            from ..scheduler import tune_features

            t0 = time.perf_counter()
            _ = graph.fingerprint  # cached on the graph; the cache key needs it
            t1 = time.perf_counter()
            features = tune_features.compute(graph, dgraph, self)   # as a tune computes them
            t2 = time.perf_counter()
            self._features = (graph, features, (t2 - t1) * 1e3, (t1 - t0) * 1e3)
        return self._features[1:]

    def tune(self, graph, op, k, heads, *, cache, top_k, budget_ms, guardrail, full, seed=0, dgraph=None,
             dtype="float32"):
        """scheduler.tune.tune; `cache` None: no cache (the oracle), "": the default file, else a path;
        `dgraph` the graph already on the device (a whole-graph probe reuses it)."""
        kwargs = {name: value for name, value in (("top_k", top_k), ("budget_ms", budget_ms),
                                                  ("guardrail", guardrail)) if value is not None}
        store = None if cache is None else self._cache_mod.DecisionCache(cache or None)
        features, features_ms, _ = self.graph_features(graph)
        result = self._tune.tune(graph, op, k, heads, cache=store, full=full, seed=seed, dtype=dtype,
                                 features=features, device_info=self._device_info,
                                 software_info=self._software_info, device_graph=dgraph, **kwargs)
        if isinstance(getattr(result, "timings", None), dict):
            result.timings["graph_features_ms"] = features_ms
        return result

    def plan_for(self, dgraph, decision, k, heads, dtype="float32"):
        return self._tune.plan_for(dgraph, decision, k, heads, None, measure=self, dtype=dtype)

    def free(self) -> None:
        """Return cached device memory between widths and graphs (a products-sized graph and its
        K=256 inputs hold several GB; the pools would otherwise keep them)."""
        gc.collect()
        import cupy

        cupy.cuda.get_current_stream().synchronize()
        cupy.get_default_memory_pool().free_all_blocks()
        cupy.get_default_pinned_memory_pool().free_all_blocks()
        torch = sys.modules.get("torch")  # only if a baseline already imported it
        if torch is not None and torch.cuda.is_available():
            torch.cuda.empty_cache()
