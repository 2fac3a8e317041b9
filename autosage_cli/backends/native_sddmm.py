"""Native SDDMM plans: out[e] = a_e * <X[row_e], Y[col_e]> with our kernels (cuda/sddmm_*.cu).

prepare (once per input and K): kernel lookup (its own module, compiled on first use), the all-ones
check of A's values (then they are not read: `plan.values_all_ones`), and, shared by plans of the
same graph through dgraph.derived, the work list of the layout the family's entry names
(`Family.plan`, a key of `LAYOUTS`):
  rows, chunk = 0       (rowgroup) none: group i takes row i.
  rows, chunk > 0       (item_row, item_start): every non-empty row cut into chunk-edge pieces.
  edges                 (edge) the COO row id of every edge (DeviceGraph.edge_rows).
One launch per run; none when the graph has no edges (the output is empty).

`scale` (native.prepare's argument) multiplies every output; None means 1.

Lower-level entry point (used by attention on per-head strided views):
  plan.launch(X, Y, out, ldx, ldy, scale=1.0, use_values=True)
    X       float32, n_rows rows of K, row i at element i*ldx (2-D view or 1-D buffer);
    Y       float32, n_cols rows of K at ldy;
    out     float32 contiguous vector of at least nnz elements, CSR edge order;
    out[e] = scale * (a_e if use_values else 1) * <X[row_e], Y[col_e]>.
  In float16/bfloat16 (the plan's dtype) X, Y, A's values and out are of that type (bfloat16 as
  uint16 bit patterns); products are summed in float32 and the result rounded once.
  Vector schedules (vec > 1) need vec-element aligned base pointers and ld % vec == 0; the plan
  checks this and raises AutosageError rather than read misaligned memory.
"""
from __future__ import annotations

import numpy as np

from .. import dtypes
from ..kernels.schedule import Schedule, family_of
from .base import DeviceGraph, EdgesOutPlan, PrepareTimer
from .native_common import (NULL, check_dense, check_edge_vector, kernel_for, require_int32, single_head,
                            values_all_ones)
from .row_partition import chunk_rows
from .value_arrays import graph_values


def device_row_chunks(dgraph: DeviceGraph, chunk: int) -> tuple:
    key = ("sddmm_row_chunks", chunk)
    if key not in dgraph.derived:
        import cupy

        rows = np.arange(dgraph.n_rows, dtype=np.int64)
        item_row, item_start, _ = chunk_rows(dgraph.host.indptr, rows, chunk)
        dgraph.derived[key] = (cupy.asarray(item_row), cupy.asarray(item_start))
    return dgraph.derived[key]


def device_coo_rows(dgraph: DeviceGraph):
    """Row id of every edge: the last row whose indptr entry is <= e (empty rows never match);
    int32, as the plans require int32 graphs."""
    return dgraph.edge_rows()


class NativeSddmmPlan(EdgesOutPlan):
    backend = "native"

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, k: int, scale: float | None = None,
                 dtype: str = dtypes.DEFAULT):
        super().__init__(dgraph, "sddmm", k, 1, dtype)
        self.native_schedule, self.schedule = schedule, schedule.name
        self.scale = 1.0 if scale is None else float(scale)
        with PrepareTimer(self):
            require_int32(dgraph)
            self.kernel = kernel_for(schedule, dtype)
            self.values_all_ones = values_all_ones(dgraph)
            # the work list of the layout the family's entry names (Family.plan)
            self.n_items, self.head, self.tail_before_values = LAYOUTS[family_of(schedule.family).plan](self)
            self.grid, self.block = schedule.launch(self.n_items, k)

    def _edge_work(self) -> tuple[int, tuple, tuple]:
        """Runs of `unroll` consecutive edges, their rows from the COO row ids: (items, leading
        kernel args, args between the items and the values pointer)."""
        s, g, k = self.native_schedule, self.graph, self.k
        n_items = -(-g.nnz // s.unroll)
        rows = device_coo_rows(g) if g.nnz else NULL
        return n_items, (np.int32(g.nnz), np.int32(k), rows, g.indices), ()

    def _row_work(self) -> tuple[int, tuple, tuple]:
        """Rows, or `chunk`-edge pieces of every row: as _edge_work."""
        s, g, k = self.native_schedule, self.graph, self.k
        if s.chunk:
            item_row, item_start = device_row_chunks(g, s.chunk)
            n_items = int(item_row.shape[0])
            head = (np.int32(n_items), np.int32(k), item_row, item_start, np.int32(s.chunk))
        else:
            n_items = g.n_rows
            head = (np.int32(n_items), np.int32(k), NULL, NULL, np.int32(0))
        return n_items, head, (g.indptr, g.indices)

    def launch(self, X, Y, out, ldx: int, ldy: int, scale: float = 1.0, use_values: bool = True) -> None:
        """Launch on the current stream: out[e] = scale * (a_e or 1) * <X[row_e], Y[col_e]>."""
        g, k, vec = self.graph, self.k, self.native_schedule.vec
        check_dense("X", X, g.n_rows, k, ldx, vec, self.dtype)
        check_dense("Y", Y, g.n_cols, k, ldy, vec, self.dtype)
        check_edge_vector("out", out, g.nnz, self.dtype)
        if g.nnz == 0:
            return  # no edges: the output is empty
        self.kernel(self.grid, self.block, self._args(X, Y, out, ldx, ldy, scale, use_values))

    def _args(self, X, Y, out, ldx: int, ldy: int, scale: float, use_values: bool) -> tuple:
        vals = graph_values(self.graph, self.dtype) if use_values and not self.values_all_ones else NULL
        return (self.head + self.tail_before_values +
                (vals, X, np.int64(ldx), Y, np.int64(ldy), out, np.float32(scale)))

    def run(self, inputs: tuple, out) -> None:
        X, Y = inputs
        self.launch(X, Y, out, self.k, self.k, scale=self.scale, use_values=True)

    def packed(self):
        """run as PackedLaunches taking the pointers of X, Y and out (contiguous, ld = k), for a
        graph with edges; None where an argument cannot be packed."""
        packs = self.__dict__.setdefault("_packed", {})
        if "run" not in packs:
            from .packed import Slot, pack_all

            args = self._args(Slot("X"), Slot("Y"), Slot("out"), self.k, self.k, self.scale, True)
            packs["run"] = pack_all([(self.kernel, self.grid, self.block, args)])
        return packs["run"]


# The work lists by layout name (Family.plan).
LAYOUTS = {"rows": NativeSddmmPlan._row_work, "edges": NativeSddmmPlan._edge_work}


def prepare(dgraph: DeviceGraph, schedule: Schedule, k: int, heads: int = 1, scale: float | None = None,
            dtype: str = dtypes.DEFAULT, **options) -> NativeSddmmPlan:
    single_head(schedule, heads, options)
    return NativeSddmmPlan(dgraph, schedule, k, scale, dtype)
