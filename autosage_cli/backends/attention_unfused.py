"""Our unfused attention pipeline (schedule family "unfused"): per head a native SDDMM writes the
scaled scores, one row-softmax launch (cuda/attention_softmax.cu) turns every head's scores into
probabilities in place, and per head a native SpMM multiplies them with V.

  S[h] = scale * <Q[:,h], K[:,h]> on A's pattern      (native SDDMM, strided views, ld = H*d)
  S[h] = softmax_row(S[h] (+ a))                       (light rows: a group each; heavy: a block)
  O[:,h] = S[h] @ V[:,h]                               (native SpMM with caller-given values)

The sub-step schedules are chosen at prepare, by a fixed rule that is data (no cost model: backends
do not import the scheduler; a caller that can rank, e.g. the tuner, passes `substeps`):
  * SDDMM: a row-chunked rowgroup schedule (rows cut into chunks, so hub rows spread over many
    groups, and no reduction is needed since outputs are per edge), else the nnz-balanced edge
    family;
  * SpMM: the family paired with the softmax's row model (UNFUSED_SPMM_FAMILY): a warp per light row
    (splitwarp) with the warp-per-row softmax, sub-warp groups (split) with the 8-lane softmax, else
    the other split family;
  * a tier counts only if one of its schedules covers d in at most two feature passes; within it,
    the shape with the fewest passes and idle lanes, then the widest vector, then atomic merging
    (one launch fewer than two-phase).
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..kernels import attention_space as space, sddmm_families, spmm_families, util
from ..kernels.schedule import Schedule, get, registry
from . import native_sddmm, native_spmm
from .attention_common import check_inputs, index_type, kernel, values_arg
from .base import DeviceGraph, HeadsOutPlan, PrepareTimer

# The SpMM family paired with each softmax row model (the unfused schedule's `lanes`).
UNFUSED_SPMM_FAMILY = {32: "splitwarp", 8: "split"}
# Preference tiers per sub-step: (family or None, row-chunked or None). The first tier with a
# schedule covering d in at most MAX_PASSES feature passes wins; all of them are long-row aware
# except the last resort.
SDDMM_TIERS = (("rowgroup", True), ("edge", None), (None, None))
SPMM_SKEW_FAMILIES = ("split", "splitwarp")
MAX_PASSES = 2


def _fit_key(s: Schedule, d: int):
    """Fewest feature passes over each edge, then fewest idle features, widest vector, atomic
    merging, and the name for a stable order."""
    width = s.lanes * s.vec * max(1, s.tile // (s.lanes * s.vec) if s.tile else 1)
    passes = -(-d // width)
    return (passes, width * passes - d, -s.vec, s.reduce != "atomic", s.name)


def best_fit(op: str, d: int, tiers, dtype: str = "float32") -> Schedule:
    """The best-fitting `op` schedule supported in `dtype` of the first tier (family, chunked)
    that covers d in at most MAX_PASSES passes; the best fit overall when no tier does."""
    supported = [s for s in registry(op) if s.supports(d, 1, dtype) is None]
    if not supported:
        raise ValueError(f"no native {op} schedule supports d={d}")
    for family, chunked in tiers:
        tier = [s for s in supported if (family is None or s.family == family)
                and (chunked is None or bool(s.chunk) == chunked)
                and _fit_key(s, d)[0] <= MAX_PASSES]
        if tier:
            return min(tier, key=lambda s: _fit_key(s, d))
    return min(supported, key=lambda s: _fit_key(s, d))


def substep_schedules(schedule: Schedule, d: int, substeps=None,
                      dtype: str = "float32") -> tuple[Schedule, Schedule]:
    """(SDDMM schedule, SpMM schedule) for an unfused attention schedule at width d in `dtype`."""
    if substeps is not None:
        chosen = tuple(s if isinstance(s, Schedule) else get(s) for s in substeps)
        if (len(chosen) != 2 or chosen[0].family not in sddmm_families.FAMILIES
                or chosen[1].family not in spmm_families.FAMILIES):
            raise ValueError("substeps must name an SDDMM schedule and an SpMM schedule")
        for s in chosen:
            reason = s.supports(d, 1, dtype)
            if reason:
                raise ValueError(f"{s.name} cannot run d={d}: {reason}")
        return chosen
    paired = UNFUSED_SPMM_FAMILY.get(schedule.lanes)
    spmm_tiers = ((paired, None),) + tuple((f, None) for f in SPMM_SKEW_FAMILIES) + ((None, None),)
    return best_fit("sddmm", d, SDDMM_TIERS, dtype), best_fit("spmm", d, spmm_tiers, dtype)


def heavy_rows(dgraph: DeviceGraph, split: int):
    """Rows with more than `split` edges (CuPy, index dtype), shared through dgraph.derived."""
    import cupy

    key = ("attention_heavy_rows", split)
    if key not in dgraph.derived:
        deg = np.diff(dgraph.host.indptr)
        dgraph.derived[key] = cupy.asarray(np.flatnonzero(deg > split).astype(dgraph.host.indptr.dtype))
    return dgraph.derived[key]


class UnfusedAttentionPlan(HeadsOutPlan):
    backend = "native"

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, d: int, heads: int, scale: float,
                 use_values: bool, substeps=None, dtype: str = dtypes.DEFAULT):
        super().__init__(dgraph, "attention", d, heads, dtype)
        import cupy

        self.native_schedule, self.schedule, self.scale, self.use_values = schedule, schedule.name, scale, use_values
        with PrepareTimer(self):
            self.sddmm_schedule, self.spmm_schedule = substep_schedules(schedule, d, substeps, dtype)
            self.provider = (f"{self.sddmm_schedule.name} -> attention_softmax.cu -> "
                             f"{self.spmm_schedule.name}")
            # Without edges run() only writes zeros: no sub-step plans to make.
            # substep_schedules returns only schedules that support d, so the op's own prepare is
            # called directly (native.prepare, the dispatcher, sits above this module)
            self.sddmm = native_sddmm.prepare(dgraph, self.sddmm_schedule, d, dtype=dtype) if dgraph.nnz else None
            self.spmm = native_spmm.prepare(dgraph, self.spmm_schedule, d, dtype=dtype) if dgraph.nnz else None
            index = index_type(dgraph)
            self.softmax = kernel(space.SOFTMAX_SOURCE, space.softmax_expression(schedule, index, dtype))
            self.softmax_heavy = kernel(space.SOFTMAX_SOURCE,
                                        space.softmax_heavy_expression(schedule, index, dtype))
            self.heavy = heavy_rows(dgraph, schedule.split)
            self.n_heavy = int(self.heavy.shape[0])
            self.grid, self.block = schedule.launch(dgraph.n_rows * heads, d)
            # Scores of every head, head-major: row h is one SDDMM output (made once), in the value
            # type (the SpMM reads them back as A's values); the softmax computes in float32.
            self.scores = cupy.empty((heads, max(1, dgraph.nnz)), dtype=dtypes.storage_dtype(dtype))
            self.bias = values_arg(dgraph, use_values)
            self.vec = max(self.sddmm_schedule.vec, self.spmm_schedule.vec)

    def run(self, inputs: tuple, out) -> None:
        check_inputs(self, inputs, out, self.vec)
        Q, K, V = inputs
        g, H, d = self.graph, self.heads, self.k
        ld = H * d
        nnz = g.nnz
        if nnz == 0:  # no edges anywhere: every row is empty, O = 0
            util.fill(out, 0)
            return
        S = self.scores[:, :nnz]
        for h in range(H):
            self.sddmm.launch(Q[:, h, :], K[:, h, :], S[h], ld, ld, scale=self.scale, use_values=False)
        args = (g.indptr, self.bias, self.scores)
        self.softmax(self.grid, self.block, args + (np.int64(g.n_rows), np.int64(self.scores.shape[1]),
                                                    np.int32(H), np.int64(self.native_schedule.split)))
        if self.n_heavy:
            self.softmax_heavy((self.n_heavy * H, 1, 1), (self.native_schedule.threads, 1, 1),
                               args + (self.heavy, np.int64(self.n_heavy),
                                       np.int64(self.scores.shape[1]), np.int32(H)))
        for h in range(H):
            self.spmm.launch(S[h], V[:, h, :], out[:, h, :], ld, ld)
