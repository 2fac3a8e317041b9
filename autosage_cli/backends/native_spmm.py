"""Native SpMM plans: C = A @ B with our kernels (cuda/spmm_*.cu), one schedule each.

prepare (once per input and K): kernel lookup (one NVRTC compile per source file), the all-ones
check of A's values (then the kernels skip reading them: `plan.values_all_ones`), and for the split
families the row partition (backends/row_partition.py, shared by plans of the same graph through
dgraph.derived) uploaded to the device, plus the two-phase partials buffer. Grids are computed here
by Schedule.launch; run() only launches.

Launches per run:
  subwarp, warprow      one.
  split*, atomic        light rows + zeroing of heavy rows, then the heavy chunks (atomicAdd).
  split*, twophase      light rows and chunk partials in one launch, then the per-row reduction.
A launch with no items is skipped (a split plan on a graph without heavy rows launches once).

Lower-level entry point (used by attention on per-head strided views):
  plan.launch(values, B, out, ldb, ldc)
    values  float32 CuPy vector of A's nnz values in CSR order (e.g. softmax probabilities), or
            None for "all ones";
    B       float32, n_cols rows of K, row j at element j*ldb (2-D view or 1-D buffer);
    out     float32, n_rows rows of K at ldc; every row is written (empty rows as zeros).
  Vector schedules (vec > 1) need 4*vec-byte aligned base pointers and ld % vec == 0; the plan
  checks this and raises AutosageError rather than read misaligned memory.
"""
from __future__ import annotations

import numpy as np

from ..errors import AutosageError
from ..kernels.schedule import Schedule
from .base import DeviceGraph, Plan, PrepareTimer
from .native_common import (NULL, check_dense, check_edge_vector, kernel_for, require_int32,
                            values_all_ones)
from .row_partition import partition_rows

WARP = 32
# Two-phase partials are n_chunks x K floats; beyond this the plan refuses (atomic schedules remain).
MAX_PARTIAL_BYTES = 2 << 30


def device_partition(dgraph: DeviceGraph, split: int, chunk: int) -> dict:
    """The row partition of (split, chunk) on the device, built once per graph."""
    key = ("spmm_row_partition", split, chunk)
    if key not in dgraph.derived:
        import cupy

        part = partition_rows(dgraph.host.indptr, split, chunk)
        dgraph.derived[key] = {
            "host": part,
            "light_zeroing": cupy.asarray(part.light_list(zero_heavy=True)),
            "light": cupy.asarray(part.light_list(zero_heavy=False)),
            "chunk_row": cupy.asarray(part.chunk_row),
            "chunk_start": cupy.asarray(part.chunk_start),
            "heavy_rows": cupy.asarray(part.heavy_rows),
            "heavy_chunk_ptr": cupy.asarray(part.heavy_chunk_ptr),
        }
    return dgraph.derived[key]


class NativeSpmmPlan(Plan):
    backend = "native"

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, k: int):
        super().__init__(dgraph, "spmm", k)
        self.sched, self.schedule = schedule, schedule.name
        with PrepareTimer(self):
            require_int32(dgraph)
            self.kernel = kernel_for(schedule)
            self.values_all_ones = values_all_ones(dgraph)
            # Each launch: (grid, block, args before the operands, args after them).
            self.launches: list[tuple] = []
            if schedule.family in ("split", "splitwarp"):
                self._prepare_split()
            else:
                grid, block = schedule.launch(dgraph.n_rows, k)
                head = (np.int32(dgraph.n_rows), np.int32(k), dgraph.indptr, dgraph.indices)
                self.launches.append((grid, block, head, ()))

    def _prepare_split(self) -> None:
        import cupy

        s, g, k = self.sched, self.graph, self.k
        part = device_partition(g, s.split, s.chunk)
        host = part["host"]
        twophase = s.reduce == "twophase"
        light = part["light"] if twophase else part["light_zeroing"]
        n_light, n_chunks, n_heavy = int(light.shape[0]), host.n_chunks, int(host.heavy_rows.shape[0])
        self.partial = None
        if twophase and n_chunks:
            if n_chunks * k * 4 > MAX_PARTIAL_BYTES:
                raise AutosageError(f"{s.name}: two-phase partials would take {n_chunks * k * 4 >> 20} MiB")
            self.partial = cupy.empty(n_chunks * k, dtype=cupy.float32)
        light_blocks = s.launch(n_light, k)[0][0] if n_light else 0
        chunk_blocks = s.launch(n_chunks, k, lanes_per_item=WARP)[0][0] if n_chunks else 0
        block = (s.threads, 1, 1)

        def tail(light_blocks_arg: int) -> tuple:
            return (np.int32(n_light), light, np.int32(light_blocks_arg), np.int32(n_chunks),
                    part["chunk_row"], part["chunk_start"], np.int32(s.chunk), np.int32(n_heavy),
                    part["heavy_rows"], part["heavy_chunk_ptr"],
                    self.partial if self.partial is not None else NULL)

        def head(phase: int) -> tuple:
            return (np.int32(phase), np.int32(k), g.indptr, g.indices)

        if twophase:
            self.launches.append(((light_blocks + chunk_blocks, 1, 1), block, head(0), tail(light_blocks)))
            if n_heavy:
                reduce_blocks = s.launch(n_heavy, k, lanes_per_item=WARP)[0][0]
                self.launches.append(((reduce_blocks, 1, 1), block, head(1), tail(0)))
        else:
            self.launches.append(((light_blocks, 1, 1), block, head(0), tail(light_blocks)))
            if n_chunks:
                self.launches.append(((chunk_blocks, 1, 1), block, head(0), tail(0)))
        self.n_light, self.n_chunks, self.n_heavy = n_light, n_chunks, n_heavy

    def launch(self, values, B, out, ldb: int, ldc: int) -> None:
        """Launch on the current stream: out = A(values) @ B with explicit leading dimensions."""
        g, k, vec = self.graph, self.k, self.sched.vec
        check_dense("B", B, g.n_cols, k, ldb, vec)
        check_dense("out", out, g.n_rows, k, ldc, vec)
        if values is not None:
            check_edge_vector("values", values, g.nnz)
        vals = NULL if values is None or g.nnz == 0 else values
        operands = (vals, B, np.int64(ldb), out, np.int64(ldc))
        for grid, block, head, tail in self.launches:
            self.kernel(grid, block, head + operands + tail)

    def run(self, inputs: tuple, out) -> None:
        (B,) = inputs
        values = None if self.values_all_ones else self.graph.values
        self.launch(values, B, out, self.k, self.k)


def prepare(dgraph: DeviceGraph, schedule: Schedule, k: int) -> NativeSpmmPlan:
    return NativeSpmmPlan(dgraph, schedule, k)
