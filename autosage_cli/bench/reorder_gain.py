"""What a reordering gains for SpMM on this GPU: the same op at the same width, tuned and timed on
the original order and on the reordered graph, with the reordered result checked against the
original one permuted.

Each order gets the plan the API would run (`api.prepare_plan` with tuning: the cached decision,
or a tune that stores one), CUDA-event timing of that plan (backends.timing.time_plan), and the
features B of the original order moved with the vertices (B_new = B[perm]), so
C_new = C[perm] up to the summation order of the two plans (checked against the op's tolerance).
GPU only: callers check capability.require_gpu first.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from .. import dtypes, ops as op_specs
from ..graphs.csr import CSRGraph

OP = "spmm"


@dataclass(frozen=True)
class OrderTiming:
    backend: str        # "native" or the vendor's name
    schedule: str
    median_ms: float
    p20_ms: float
    p80_ms: float
    repeats: int


@dataclass(frozen=True)
class Gain:
    width: int
    before: OrderTiming
    after: OrderTiming
    rel_error: float    # ||C_new − C[perm]|| / ||C[perm]||
    tolerance: float    # the op's bound at this width and longest row
    verified: bool

    @property
    def speedup(self) -> float:
        """The original order's median time over the reordered one's (> 1: reordering helps)."""
        return self.before.median_ms / self.after.median_ms if self.after.median_ms > 0 else float("inf")

    def to_dict(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


def _timed(graph: CSRGraph, k: int, features, cache, repeat: int, warmup: int):
    """(OrderTiming, output) of the tuned SpMM plan on `graph` with dense input `features`, or
    with fresh random ones when `features` is None (then returned too)."""
    from .. import api
    from ..backends import timing
    from ..backends.base import DeviceGraph

    dgraph = DeviceGraph.from_host(graph)
    plan = api.prepare_plan(graph, dgraph, OP, k, cache=cache)
    if features is None:
        (features,) = op_specs.make_inputs(OP, dgraph, k, 1, seed=0)
    out = plan.alloc_out()
    stats = timing.time_plan(plan, (features,), out, repeat=repeat, warmup=warmup)
    # time_plan's launches all write `out`: after it, `out` holds the plan's result.
    return (OrderTiming(plan.backend, plan.schedule, stats.median_ms, stats.p20_ms, stats.p80_ms,
                        stats.repeats), out, features)


def measure_gain(original: CSRGraph, reordered: CSRGraph, perm: np.ndarray, k: int, *, cache=None,
                 repeat: int = 20, warmup: int = 3) -> Gain:
    """SpMM at width k on both orders (perm[new] = old), timed and cross-checked."""
    import cupy
    from ..backends import timing

    before, c_original, b = _timed(original, k, None, cache, repeat, warmup)
    moved = cupy.asarray(perm)
    after, c_reordered, _ = _timed(reordered, k, b[moved], cache, repeat, warmup)
    error = float(timing.rel_error(c_reordered, c_original[moved]))
    longest = int(np.diff(original.indptr).max())
    tolerance = op_specs.case_tolerance(OP, dtypes.DEFAULT, k, longest)
    return Gain(k, before, after, error, tolerance, bool(error <= tolerance))
