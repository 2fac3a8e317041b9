"""Native SpMM plans: C = A @ B with our kernels (cuda/spmm_*.cu), one schedule each.

prepare (once per input and K): kernel lookup (its own module, compiled on first use), the all-ones
check of A's values (then the kernels skip reading them: `plan.values_all_ones`), and for the split
families the row partition (backends/row_partition.py, shared by plans of the same graph through
dgraph.derived) uploaded to the device, plus the split scratch and tickets. Grids are computed here
by Schedule.launch; run() only launches.

One launch per run, for every family. The split families take heavy-row chunks and light rows in
the same grid (chunk blocks first); the last chunk warp of each heavy row combines the row's
partials (cuda/spmm_split.cu says how), so a split plan keeps small scratch state (zero between
runs) and must not run on two streams at once.

Lower-level entry point (used by attention on per-head strided views):
  plan.launch(values, B, out, ldb, ldc)
    values  float32 CuPy vector of A's nnz values in CSR order (e.g. softmax probabilities), or
            None for "all ones";
    B       float32, n_cols rows of K, row j at element j*ldb (2-D view or 1-D buffer);
    out     float32, n_rows rows of K at ldc; every row is written (empty rows as zeros).
  In float16/bfloat16 (the plan's dtype) values, B and out are of that type (bfloat16 as uint16
  bit patterns); sums are float32.
  Vector schedules (vec > 1) need vec-element aligned base pointers and ld % vec == 0; the plan
  checks this and raises AutosageError rather than read misaligned memory. The vector family
  (edge-parallel rows at K <= 8) has vec = 1 and launches like the row families (one group per
  row, grid from Schedule.launch(n_rows, K)); its kernel reads B rows as vectors only when K equals
  its KMAX and B's pointer and ldb are aligned, so any view is accepted. The parreduce family runs
  the same row walk by persistent groups: its grid holds only the blocks that stay resident on the
  device (CUDA's occupancy query for the kernel, times the SMs), and its row lists (heavy rows for
  warps, light rows for groups, longest first) are built once per graph and threshold.

Epilogues (kernels/epilogues.py): a plan prepared with a fused epilogue runs the same layout
with each kernel's epilogue instantiation, whose three extra arguments (bias pointer, scale,
alpha) follow all the others in every launch (the stream plan's crossing launch too: that is
where a crossing row's final value is written). They are per-call operands like B and out
(`run_fused`; `run` uses the plan's defaults), so a packed launch writes them per call.

A family names its launch layout (`Family.plan`, a key of `LAYOUTS`): "rows" (a group or warp
per row, grid from Schedule.launch), "split" (heavy-row chunks and light rows in one grid, with
scratch), "persistent" (a resident-only grid over longest-first row lists, heavy rows above
the family's `heavy_threshold` by warps) or "stream" (a block per window of threads x unroll
nonzeros with the windows' row bounds, then a launch that sums the partials of the rows crossing
a window edge). A new family with one of these layouts changes nothing
here.
"""
from __future__ import annotations

import copy

import numpy as np

from .. import dtypes
from ..errors import AutosageError
from ..kernels import epilogues
from ..kernels.compile import get_function
from ..kernels.schedule import Schedule, family_of
from .base import DeviceGraph, PrepareTimer, RowsOutPlan
from .native_common import NULL, check_dense, check_edge_vector, require_int32, single_head, values_all_ones
from .row_partition import crossing_rows, degree_order, edge_windows, longest_first, partition_rows
from .value_arrays import graph_values

WARP = 32
INT32_MAX = 2**31 - 1
# The per-call arguments of a launch, in kernel-argument order; a launch takes all or a subset.
OPERANDS = ("values", "B", "ldb", "out", "ldc")
# The per-call arguments a fused epilogue adds after all the others, in every launch of its plan.
EPILOGUE_OPERANDS = ("bias", "scale", "alpha")
# Split scratch: n_chunks x K floats (two-phase) or n_heavy x K (atomic); beyond this the plan refuses.
MAX_SCRATCH_BYTES = 2 << 30


def host_degree_order(dgraph: DeviceGraph):
    """Every row, longest degree bin first (row_partition.degree_order), once per graph: the row
    lists of every split and threshold are filtered from it."""
    key = ("spmm_degree_order",)
    if key not in dgraph.derived:
        dgraph.derived[key] = degree_order(dgraph.host.indptr)
    return dgraph.derived[key]


def device_partition(dgraph: DeviceGraph, split: int, chunk: int) -> dict:
    """The row partition of (split, chunk) on the device, built once per graph."""
    key = ("spmm_row_partition", split, chunk)
    if key not in dgraph.derived:
        import cupy

        part = partition_rows(dgraph.host.indptr, split, chunk, host_degree_order(dgraph))
        dgraph.derived[key] = {"host": part, **{
            name: cupy.asarray(getattr(part, name))
            for name in ("light_rows", "chunk_row", "chunk_start", "chunk_owner", "heavy_chunk_ptr")}}
    return dgraph.derived[key]


def device_row_order(dgraph: DeviceGraph, threshold: int | None) -> dict:
    """The persistent plans' row lists (heavy, light) of one threshold on the device, built once
    per graph."""
    key = ("spmm_longest_first", threshold)
    if key not in dgraph.derived:
        import cupy

        heavy, light = longest_first(dgraph.host.indptr, threshold, host_degree_order(dgraph))
        dgraph.derived[key] = {"heavy": cupy.asarray(heavy), "light": cupy.asarray(light)}
    return dgraph.derived[key]


def device_windows(dgraph: DeviceGraph, width: int) -> dict:
    """The stream plans' window_row list and crossing rows (row_partition.edge_windows,
    crossing_rows) on the device, built once per graph and window width."""
    key = ("spmm_edge_windows", width)
    if key not in dgraph.derived:
        import cupy

        indptr = dgraph.host.indptr
        dgraph.derived[key] = {"window_row": cupy.asarray(edge_windows(indptr, width)),
                               "crossing": cupy.asarray(crossing_rows(indptr, width))}
    return dgraph.derived[key]


def resident_blocks(kernel, threads: int) -> int:
    """Blocks of `threads` threads of `kernel` that the current device keeps resident at once."""
    import cupy
    from cupy_backends.cuda.api import driver

    per_sm = driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0)
    return max(1, per_sm) * cupy.cuda.Device().attributes["MultiProcessorCount"]


def split_blocks(schedule: Schedule, n_chunks: int, n_light: int, k: int) -> tuple[int, int]:
    """(chunk blocks, light-row blocks) of a split launch: a warp per chunk; a group (split) or a
    warp (splitwarp) per light row; no blocks for an empty part."""
    chunk_blocks = schedule.launch(n_chunks, k, lanes_per_item=WARP)[0][0] if n_chunks else 0
    light_blocks = schedule.launch(n_light, k)[0][0] if n_light else 0
    return chunk_blocks, light_blocks


class NativeSpmmPlan(RowsOutPlan):
    backend = "native"

    def __init__(self, dgraph: DeviceGraph, schedule: Schedule, k: int, dtype: str = dtypes.DEFAULT,
                 epilogue: epilogues.Epilogue = epilogues.NONE, scale: float | None = None,
                 alpha: float | None = None):
        super().__init__(dgraph, epilogues.op_name(epilogue), k, 1, dtype)
        self.native_schedule, self.schedule = schedule, schedule.name
        # the epilogue and the scalars `run` passes it (run_fused takes its own)
        self.epilogue = epilogue
        self.scale = 1.0 if scale is None else float(scale)
        self.alpha = epilogue.alpha if alpha is None else float(alpha)
        with PrepareTimer(self):
            require_int32(dgraph)
            self.kernel = self._kernel(0)
            self.values_all_ones = values_all_ones(dgraph)
            # Each launch: (kernel, grid, block, args before the operands, the operands it takes
            # (names in OPERANDS order), args after them).
            self.launches: list[tuple] = []
            LAYOUTS[family_of(schedule.family).plan](self)

    def _kernel(self, i: int):
        """The i-th kernel its family launches for this schedule, with the plan's epilogue: its
        own module, built on first use (or found in CuPy's disk cache)."""
        s = self.native_schedule
        expression = family_of(s.family).kernels(s, self.dtype)[i]
        return get_function(s.source_file, epilogues.expression(expression, self.epilogue))

    def _prepare_rows(self) -> None:
        """One launch of a group (or warp) per row."""
        g = self.graph
        grid, block = self.native_schedule.launch(g.n_rows, self.k)
        head = (np.int32(g.n_rows), np.int32(self.k), g.indptr, g.indices)
        self.launches.append((self.kernel, grid, block, head, OPERANDS, ()))

    def _prepare_split(self) -> None:
        """One launch: chunk blocks first, then light-row blocks. Scratch (per heavy row for
        atomics, per chunk for two-phase) and tickets start at zero and the kernel leaves them so."""
        import cupy

        s, g, k = self.native_schedule, self.graph, self.k
        part = device_partition(g, s.split, s.chunk)
        host = part["host"]
        n_light, n_chunks, n_heavy = host.light_rows.size, host.n_chunks, host.heavy_rows.size
        scratch_rows = n_chunks if s.reduce == "twophase" else n_heavy
        if scratch_rows * k * 4 > MAX_SCRATCH_BYTES:
            raise AutosageError(f"{s.name}: split scratch would take {scratch_rows * k * 4 >> 20} MiB")
        self.scratch = cupy.zeros(max(1, scratch_rows * k), dtype=cupy.float32)
        self.tickets = cupy.zeros(max(1, n_heavy), dtype=cupy.int32)
        chunk_blocks, light_blocks = split_blocks(s, n_chunks, n_light, k)
        head = (np.int32(k), g.indptr, g.indices)
        tail = (np.int32(n_chunks), np.int32(chunk_blocks), part["chunk_row"], part["chunk_start"],
                part["chunk_owner"], np.int32(s.chunk), part["heavy_chunk_ptr"], self.scratch,
                self.tickets, np.int32(n_light), part["light_rows"])
        grid = (chunk_blocks + light_blocks, 1, 1)
        self.launches.append((self.kernel, grid, (s.threads, 1, 1), head, OPERANDS, tail))
        self.n_light, self.n_chunks, self.n_heavy = n_light, n_chunks, n_heavy

    def _prepare_persistent(self) -> None:
        """One launch of persistent groups: no more blocks than stay resident, fewer when the rows
        need fewer (a warp per heavy row, a group per light row)."""
        s, g = self.native_schedule, self.graph
        rows = device_row_order(g, family_of(s.family).heavy_rows_above(s))
        n_heavy, n_light = int(rows["heavy"].size), int(rows["light"].size)
        needed = s.launch(max(n_heavy * WARP // s.lanes, n_light), self.k)[0][0]
        blocks = min(needed, resident_blocks(self.kernel, s.threads))
        head = (np.int32(self.k), g.indptr, g.indices)
        tail = (np.int32(n_heavy), rows["heavy"], np.int32(n_light), rows["light"])
        self.launches.append((self.kernel, (blocks, 1, 1), (s.threads, 1, 1), head, OPERANDS, tail))

    def _prepare_stream(self) -> None:
        """Two launches: a block per window of threads x unroll nonzeros (contained rows to C, the
        crossing rows' partials to a head and a tail slot per window), then a thread per crossing
        row summing its partials in window order."""
        import cupy

        s, g = self.native_schedule, self.graph
        width = s.threads * s.unroll
        if g.nnz > INT32_MAX - width:   # the kernel's edge offsets are int32 up to a window past nnz
            raise AutosageError(f"{s.name}: {g.nnz} nonzeros leave less than one window ({width}) below "
                                f"2^31 - 1, which its int32 edge offsets need")
        windows = device_windows(g, width)
        n_windows, n_crossing = int(windows["window_row"].size) - 1, int(windows["crossing"].size)
        self.scratch = cupy.empty(2 * n_windows * s.tile, dtype=cupy.float32)
        head = (np.int32(g.n_rows), np.int32(g.nnz), np.int32(self.k), g.indptr, g.indices)
        self.launches.append((self.kernel, (n_windows, 1, 1), (s.threads, 1, 1), head, OPERANDS,
                              (windows["window_row"], self.scratch)))
        if n_crossing:
            crossing_kernel = self._kernel(1)
            self.launches.append((crossing_kernel, (-(-n_crossing // s.threads), 1, 1), (s.threads, 1, 1),
                                  (np.int32(n_crossing), windows["crossing"], g.indptr, np.int32(width),
                                   np.int32(self.k), self.scratch), ("out", "ldc"), ()))

    def launch(self, values, B, out, ldb: int, ldc: int, bias=None, scale: float | None = None,
               alpha: float | None = None) -> None:
        """Launch on the current stream: out = epilogue(A(values) @ B) with explicit leading
        dimensions (the epilogue's bias, scale and alpha: None for the plan's defaults)."""
        g, k, vec = self.graph, self.k, self.native_schedule.vec
        check_dense("B", B, g.n_cols, k, ldb, vec, self.dtype)
        check_dense("out", out, g.n_rows, k, ldc, vec, self.dtype)
        if values is not None:
            check_edge_vector("values", values, g.nnz, self.dtype)
        if self.epilogue.bias:
            if bias is None:
                raise AutosageError(f"{self.op}: the epilogue {self.epilogue.name!r} needs a bias of K={k}")
            check_dense("bias", bias, 1, k, k, 1, self.dtype)
        for kernel, grid, block, args in self._launch_args(values, B, out, ldb, ldc, bias, scale, alpha):
            kernel(grid, block, args)

    def _launch_args(self, values, B, out, ldb: int, ldc: int, bias=None, scale: float | None = None,
                     alpha: float | None = None) -> list[tuple]:
        """(kernel, grid, block, args) of every launch for these operands (values None: none read);
        a fused epilogue's (bias, scale, alpha) last, a packing Slot kept as it is."""
        vals = NULL if values is None or self.graph.nnz == 0 else values
        operands = dict(zip(OPERANDS, (vals, B, np.int64(ldb), out, np.int64(ldc))))
        epilogue = ()
        if self.epilogue.fused:
            epilogue = (NULL if bias is None or not self.epilogue.bias else bias,
                        _scalar(scale, self.scale), _scalar(alpha, self.alpha))
        return [(kernel, grid, block, head + tuple(operands[n] for n in names) + tail + epilogue)
                for kernel, grid, block, head, names, tail in self.launches]

    def _own_values(self):
        """The graph's values as run() passes them: None for a pattern (all ones, not read)."""
        return None if self.values_all_ones else graph_values(self.graph, self.dtype)

    def run(self, inputs: tuple, out) -> None:
        """inputs: (B,), then the epilogue's operands (`Epilogue.operands`: the bias)."""
        B, *operands = inputs
        self.launch(self._own_values(), B, out, self.k, self.k, *operands)

    def run_values(self, values, B, out) -> None:
        """out = A(values) @ B: the same pattern with per-call edge values (CSR order), e.g.
        gradients or attention probabilities."""
        self.launch(values, B, out, self.k, self.k)

    def run_fused(self, B, out, bias=None, scale: float | None = None, alpha: float | None = None,
                  values=None) -> None:
        """out = epilogue(A(values) @ B) with this call's epilogue operands (values None: the
        graph's own)."""
        own = self._own_values() if values is None else values
        self.launch(own, B, out, self.k, self.k, bias, scale, alpha)

    def packed(self, per_call_values: bool):
        """run (or with `per_call_values`, run_values) as PackedLaunches taking the pointers of
        B, out (and values), contiguous at ld = k, and for a fused epilogue the bias pointer and
        the scale and alpha bits (packed.float_bits) per call; None where an argument cannot be
        packed."""
        packs = self.__dict__.setdefault("_packed", {})
        if per_call_values not in packs:
            from .packed import Slot, pack_all

            values = Slot("values") if per_call_values else self._own_values()
            epilogue = {name: Slot(name) for name in EPILOGUE_OPERANDS if name != "bias" or self.epilogue.bias}
            packs[per_call_values] = pack_all(self._launch_args(values, Slot("B"), Slot("out"), self.k,
                                                                self.k, **epilogue))
        return packs[per_call_values]

    def rebind(self, dgraph: DeviceGraph):
        """This plan's schedule on another graph without preparing it afresh (no kernel lookup, no
        timer, no dispatch), for a decision carried over to a new graph of its kind (a mini-batch
        step prepares some plans per batch); None where the layout builds per-graph work lists
        (then the caller prepares it as usual)."""
        if family_of(self.native_schedule.family).plan != "rows":
            return None
        require_int32(dgraph)
        plan = copy.copy(self)
        plan.__dict__.pop("_packed", None)
        plan.graph, plan.values_all_ones, plan.launches = dgraph, values_all_ones(dgraph), []
        plan.prepare_ms = plan.compile_ms = 0.0
        plan._prepare_rows()
        return plan


def _scalar(value, default: float):
    """A float kernel argument (the plan's default for None), or a packing Slot as it is."""
    from .packed import Slot

    return value if isinstance(value, Slot) else np.float32(default if value is None else value)


# The launch layouts by name (Family.plan).
LAYOUTS = {"rows": NativeSpmmPlan._prepare_rows, "split": NativeSpmmPlan._prepare_split,
           "persistent": NativeSpmmPlan._prepare_persistent, "stream": NativeSpmmPlan._prepare_stream}


def prepare(dgraph: DeviceGraph, schedule: Schedule, k: int, heads: int = 1, scale: float | None = None,
            dtype: str = dtypes.DEFAULT, epilogue: str = "none", alpha: float | None = None,
            **options) -> NativeSpmmPlan:
    """A native SpMM plan, with the epilogue named `epilogue` (kernels/epilogues.py) applied at
    its stores; `scale` and `alpha` are the epilogue's defaults for `run` (SpMM without an
    epilogue has no scale)."""
    single_head(schedule, heads, options)
    row = epilogues.get(epilogue)
    if not row.fused and (scale not in (None, 1.0) or alpha is not None):
        raise AutosageError("spmm without an epilogue takes no scale or alpha (op spmm-scale scales)")
    return NativeSpmmPlan(dgraph, schedule, k, dtype, row, scale, alpha)
