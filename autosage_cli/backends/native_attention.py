"""Native attention plans: the fused online-softmax kernels and our unfused pipeline.

  O[i,h] = sum_{j in row i} softmax_j(scale * <Q[i,h], K[j,h]> (+ a_ij)) V[j,h]

`prepare(dgraph, schedule, k, heads, scale)` (k = d) builds, once per input, whatever the schedule's
family needs and returns a Plan whose `run((Q, K, V), out)` only launches. The plan class is the
layout its family entry names (`Family.plan`, a key of `PLANS`):
  rows         (fused) one launch of attention_fused_rows over all (row, head) groups;
  segments     (fused_split) the segment list (chunks of rows above `split` edges first, then the
               light rows) and the partial buffers, built once; two launches (segments, then
               attention_combine);
  pipeline     (unfused) SDDMM per head -> row softmax (light rows by groups, heavy rows by blocks)
               -> SpMM per head, with native SDDMM/SpMM plans chosen at prepare
               (backends/attention_unfused.py).
A's values are ignored unless `use_values=True`, which adds them to the scores as a per-edge bias.
In float16/bfloat16 (`dtype`) Q, K, V and out are of that type; scores, max, sum and exp are float32.
`prepare_additive(dgraph, schedule, d, heads, negative_slope, dtype)` runs a schedule whose family
has the "additive" kernel variant (fused, fused_split; `ADDITIVE_PLANS`) with the additive (GAT)
score LeakyReLU(a_dst[i,h] + a_src[j,h]) instead: inputs (a_dst, a_src, V), and optionally writes
each row's softmax statistics (`run(inputs, out, stats)`); V and out in the plan's dtype, a_dst,
a_src and the statistics float32 in every type.
Derived row lists are kept in `dgraph.derived`, so plans of one graph share them.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..kernels import attention_space as space
from ..kernels.attention_families import FAMILIES
from ..kernels.schedule import Schedule
from .attention_common import attention_scale, check_inputs, index_type, kernel, values_arg
from .attention_unfused import UnfusedAttentionPlan
from .base import DeviceGraph, HeadsOutPlan, Plan, PrepareTimer
from .row_partition import degree_bin_order

LOG2E = 1.4426950408889634


class FusedAttentionPlan(HeadsOutPlan):
    """Layout "rows" (family fused): one group of `lanes` lanes per (row, head), every row in one launch."""
    backend = "native"

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, d: int, heads: int, scale: float,
                 use_values: bool, dtype: str = dtypes.DEFAULT):
        super().__init__(dgraph, "attention", d, heads, dtype)
        self.native_schedule, self.schedule, self.scale, self.use_values = schedule, schedule.name, scale, use_values
        self.provider = "attention_fused.cu"
        with PrepareTimer(self):
            index = index_type(dgraph)
            self.fn = kernel(space.FUSED_SOURCE, self.expression(index))
            self.grid, self.block = schedule.launch(dgraph.n_rows * heads, d)
            self.bias = values_arg(dgraph, use_values)

    def expression(self, index: str) -> str:
        """The name expression of the kernel this plan launches (the dot-product score)."""
        return space.fused_expression(self.native_schedule, dtypes.c_type(self.dtype), index)

    def scalars(self):
        """(qscale, bias_scale): scores are computed in the log2 domain (see attention_fused.cu)."""
        return np.float32(self.scale * LOG2E), np.float32(LOG2E)

    def run(self, inputs: tuple, out) -> None:
        check_inputs(self, inputs, out, self.native_schedule.vec)
        Q, K, V = inputs
        g = self.graph
        qscale, bscale = self.scalars()
        self.fn(self.grid, self.block, (g.indptr, g.indices, self.bias, Q, K, V, out,
                                        np.int64(g.n_rows), np.int32(self.heads), np.int32(self.k),
                                        qscale, bscale))


def split_segments(indptr: np.ndarray, split: int, chunk: int):
    """Host-side work list of fused_split (pure NumPy, tested on the CPU).

    Rows with more than `split` edges are cut into ceil(degree / chunk) chunks of `chunk` edges (the
    last one shorter). Returns (seg_rows, chunk_begin, heavy_rows, chunk_ptr): seg_rows lists every
    chunk's row (grouped by heavy row, in order) followed by every other row (empty rows included:
    they write zeros), longest degree bin first with ascending ids within a bin; chunk_begin is each
    chunk's first edge; chunk_ptr[r]..chunk_ptr[r+1] are the chunk slots of heavy_rows[r].

    The light rows' order matters to the groups of fewer than 32 lanes: a warp walks 32 / lanes rows
    in lockstep and takes as long as the longest. In id order a warp of a power-law graph often pairs
    a 500-edge row with 3-edge ones; within one degree bin its rows differ by less than 2x (the SpMM
    split families order their light rows the same way: row_partition.degree_bin_order)."""
    indptr = np.asarray(indptr)
    itype = indptr.dtype
    deg = np.diff(indptr).astype(np.int64)
    heavy = deg > split
    heavy_rows = np.flatnonzero(heavy).astype(itype)
    counts = -(-deg[heavy] // chunk)
    chunk_ptr = np.zeros(heavy_rows.shape[0] + 1, dtype=itype)
    np.cumsum(counts, out=chunk_ptr[1:])
    chunk_rows = np.repeat(heavy_rows, counts)
    # position of each chunk inside its row: 0, 1, ... restarting at every heavy row
    within = np.arange(chunk_rows.shape[0], dtype=np.int64) - np.repeat(chunk_ptr[:-1].astype(np.int64),
                                                                        counts)
    chunk_begin = (indptr[chunk_rows].astype(np.int64) + within * chunk).astype(itype)
    light_rows = degree_bin_order(np.flatnonzero(~heavy), deg).astype(itype)
    seg_rows = np.concatenate([chunk_rows, light_rows]).astype(itype)
    return seg_rows, chunk_begin, heavy_rows, chunk_ptr


class SplitAttentionPlan(FusedAttentionPlan):
    """Layout "segments" (family fused_split): chunks of heavy rows and whole light rows in one launch, then the
    two-phase merge of the chunk partials (deterministic)."""

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, d: int, heads: int, scale: float,
                 use_values: bool, dtype: str = dtypes.DEFAULT):
        Plan.__init__(self, dgraph, "attention", d, heads, dtype)
        self.native_schedule, self.schedule, self.scale, self.use_values = schedule, schedule.name, scale, use_values
        self.provider = "attention_fused.cu (split + combine)"
        import cupy

        with PrepareTimer(self):
            index = index_type(dgraph)
            self.fn = kernel(space.FUSED_SOURCE, self.expression(index))
            self.combine = kernel(space.FUSED_SOURCE, space.combine_expression(dtypes.c_type(dtype), index))
            key = ("attention_segments", schedule.split, schedule.chunk)
            if key not in dgraph.derived:
                host = split_segments(dgraph.host.indptr, schedule.split, schedule.chunk)
                dgraph.derived[key] = tuple(cupy.asarray(a) for a in host)
            self.seg_rows, self.chunk_begin, self.heavy_rows, self.chunk_ptr = dgraph.derived[key]
            self.n_chunks = int(self.chunk_begin.shape[0])
            self.n_heavy = int(self.heavy_rows.shape[0])
            self.n_segments = int(self.seg_rows.shape[0])
            # Partials: (m, l) pairs and unnormalised accumulators per (chunk, head); made once.
            self.part_ml = cupy.empty(max(1, self.n_chunks * heads) * 2, dtype=cupy.float32)
            self.part_acc = cupy.empty(max(1, self.n_chunks * heads * d), dtype=cupy.float32)
            self.grid, self.block = schedule.launch(self.n_segments * heads, d)
            total = self.n_heavy * heads * d
            # a grid-stride combine: 16 blocks per SM are plenty to cover the heavy rows
            sms = cupy.cuda.Device().attributes["MultiProcessorCount"]
            self.combine_grid = (max(1, min(-(-total // 256), sms * 16)), 1, 1)
            self.bias = values_arg(dgraph, use_values)

    def run(self, inputs: tuple, out) -> None:
        check_inputs(self, inputs, out, self.native_schedule.vec)
        Q, K, V = inputs
        g, h, d = self.graph, np.int32(self.heads), np.int32(self.k)
        qscale, bscale = self.scalars()
        self.fn(self.grid, self.block, (g.indptr, g.indices, self.bias, Q, K, V, out, self.seg_rows,
                                        self.chunk_begin, np.int64(self.n_chunks),
                                        np.int64(self.n_segments), np.int64(self.native_schedule.chunk), h, d,
                                        qscale, bscale, self.part_ml, self.part_acc))
        if self.n_heavy:
            self.combine(self.combine_grid, (256, 1, 1), (self.heavy_rows, self.chunk_ptr, self.part_ml,
                                                          self.part_acc, out, np.int64(self.n_heavy),
                                                          h, d))


class AdditiveScore:
    """The additive (GAT) score on a fused plan: inputs (a_dst, a_src, V) with a_dst (n_rows, H),
    a_src (n_cols, H), V (n_cols, H, d); s_ij = LeakyReLU(a_dst[i,h] + a_src[j,h]) with
    `negative_slope`, no scale and no bias (A's values are ignored). `run(inputs, out, stats)`
    also writes each row's softmax statistics when given `stats`, a float32 (n_rows, H, 2) array:
    (max of s over the row, sum of e^(s - max)); -inf and 0 for a row without edges. V and out are
    of the plan's dtype; a_dst, a_src and stats float32 in every dtype (the kernel reads them so)."""
    score = "additive"

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, d: int, heads: int, negative_slope: float,
                 dtype: str = dtypes.DEFAULT):
        self.negative_slope = negative_slope
        super().__init__(dgraph, schedule, d, heads, 1.0, False, dtype)
        self.provider += ", additive score"

    def expression(self, index: str) -> str:
        return space.additive_expression(self.native_schedule, dtypes.c_type(self.dtype), index)

    def operands(self, inputs: tuple, out, stats) -> tuple:
        """(a_dst, a_src, V, stats pointer), checked like check_inputs checks (Q, K, V): a wrong
        layout would otherwise be read as garbage."""
        if len(inputs) != 3:
            raise ValueError(f"additive attention takes (a_dst, a_src, V), got {len(inputs)} inputs")
        g, h, d, vec = self.graph, self.heads, self.k, self.native_schedule.vec
        value = dtypes.storage_dtype(self.dtype)
        shapes = [("a_dst", (g.n_rows, h), 1, "float32"), ("a_src", (g.n_cols, h), 1, "float32"),
                  ("V", (g.n_cols, h, d), vec, value), ("out", (g.n_rows, h, d), vec, value)]
        arrays = [*inputs, out]
        if stats is not None:
            shapes.append(("stats", (g.n_rows, h, 2), 2, "float32"))
            arrays.append(stats)
        for (name, shape, vec, stored), arr in zip(shapes, arrays):
            if tuple(arr.shape) != shape or arr.dtype != np.dtype(stored) or not arr.flags.c_contiguous:
                raise ValueError(f"{name}: expected a C-contiguous {stored} array of shape {shape}, "
                                 f"got {arr.dtype} {tuple(arr.shape)}")
            if arr.data.ptr % (arr.dtype.itemsize * vec):
                raise ValueError(f"{name}: {arr.dtype.itemsize * vec}-byte aligned base pointer needed")
        return (*inputs, np.uint64(0) if stats is None else stats)


class FusedAdditivePlan(AdditiveScore, FusedAttentionPlan):
    """Layout "rows" with the additive score (attention_additive_rows). Every (row, head) group
    writes its statistics, a row without edges too (-inf, 0): a caller need not fill them first."""
    writes_every_row = True

    def _args(self, a_dst, a_src, V, out, stats_arg) -> tuple:
        g = self.graph
        return (g.indptr, g.indices, a_dst, a_src, V, out, np.int64(g.n_rows), np.int32(self.heads),
                np.int32(self.k), np.float32(self.negative_slope), stats_arg)

    def run(self, inputs: tuple, out, stats=None) -> None:
        a_dst, a_src, V, stats_arg = self.operands(inputs, out, stats)
        self.fn(self.grid, self.block, self._args(a_dst, a_src, V, out, stats_arg))

    def packed(self):
        """run as a PackedLaunch taking the pointers of a_dst, a_src, V, out and stats per call
        (backends.packed: the caller vouches for them), or None where it cannot be packed."""
        if "_packed" not in self.__dict__:
            from .packed import Slot, pack_all

            names = ("a_dst", "a_src", "V", "out", "stats")
            self._packed = pack_all([(self.fn, self.grid, self.block, self._args(*(Slot(n) for n in names)))])
        return self._packed


class SplitAdditivePlan(AdditiveScore, SplitAttentionPlan):
    """Layout "segments" with the additive score: segments, then the same two-phase combine."""

    def __init__(self, *args):
        super().__init__(*args)
        self.stats_fn = kernel(space.FUSED_SOURCE, space.additive_stats_expression(index_type(self.graph)))

    def run(self, inputs: tuple, out, stats=None) -> None:
        a_dst, a_src, V, stats_arg = self.operands(inputs, out, stats)
        g, h, d = self.graph, np.int32(self.heads), np.int32(self.k)
        self.fn(self.grid, self.block, (g.indptr, g.indices, a_dst, a_src, V, out, self.seg_rows,
                                        self.chunk_begin, np.int64(self.n_chunks),
                                        np.int64(self.n_segments), np.int64(self.native_schedule.chunk), h, d,
                                        np.float32(self.negative_slope), self.part_ml, self.part_acc,
                                        stats_arg))
        if self.n_heavy:
            self.combine(self.combine_grid, (256, 1, 1), (self.heavy_rows, self.chunk_ptr, self.part_ml,
                                                          self.part_acc, out, np.int64(self.n_heavy),
                                                          h, d))
            if stats is not None:
                self.stats_fn(self.combine_grid, (256, 1, 1), (self.heavy_rows, self.chunk_ptr,
                                                               self.part_ml, stats,
                                                               np.int64(self.n_heavy), h))


# The plan of each layout a family entry names (Family.plan), and of those with the additive score.
PLANS = {"rows": FusedAttentionPlan, "segments": SplitAttentionPlan, "pipeline": UnfusedAttentionPlan}
ADDITIVE_PLANS = {"rows": FusedAdditivePlan, "segments": SplitAdditivePlan}


def prepare_additive(dgraph: DeviceGraph, schedule: Schedule, d: int, heads: int = 1,
                     negative_slope: float = 0.2, dtype: str = dtypes.DEFAULT) -> Plan:
    """A native plan of the additive (GAT) score for a schedule whose family has that variant, V
    and the output in `dtype`."""
    family = FAMILIES.get(schedule.family)
    if family is None or family.variant("additive") is None:
        raise ValueError(f"{schedule.name}: the additive score runs on the fused families only")
    _check_supported(schedule, d, heads, dtype)
    slope = float(negative_slope)
    if not np.isfinite(slope):
        raise ValueError(f"negative_slope must be finite, got {negative_slope}")
    return ADDITIVE_PLANS[family.plan](dgraph, schedule, d, heads, slope, dtype)


def _check_supported(schedule: Schedule, k: int, heads: int, dtype: str = dtypes.DEFAULT) -> None:
    reason = schedule.supports(k, heads, dtype)
    if reason:
        raise ValueError(f"{schedule.name} cannot run d={k}, H={heads}: {reason}")


def prepare(dgraph: DeviceGraph, schedule: Schedule, k: int, heads: int = 1, scale: float | None = None,
            dtype: str = dtypes.DEFAULT, *, use_values: bool = False, substeps=None) -> Plan:
    """A native attention plan for `schedule` at d = k with `heads` heads in `dtype`. `substeps`
    (a family whose plan runs sub-steps: unfused) optionally names the (SDDMM, SpMM) native
    schedules to use instead of the default choice. That the schedule runs (d, H, dtype) is
    ops.prepare_native's to check, once."""
    family = FAMILIES.get(schedule.family)
    if family is None:
        raise ValueError(f"{schedule.name} is not an attention schedule")
    options = {"substeps": substeps} if family.substeps else {}
    return PLANS[family.plan](dgraph, schedule, k, heads, attention_scale(k, scale), use_values,
                              dtype=dtype, **options)
