"""The backend contract shared by native kernels and vendor libraries.

`prepare(...) -> Plan` does everything made once per input (row lists, splits, descriptors, buffers)
and records how long it took; `Plan.run(inputs, out)` only launches (no allocation, no sync), so it
can be timed with CUDA events and replayed.

Operands are CuPy arrays, C-contiguous, row-major, of the plan's dtype; each op's spec
(`autosage_cli.ops`) defines their shapes. A plan's output has one of three layouts, its class's
base here: `RowsOutPlan` (n_rows x K: SpMM), `EdgesOutPlan` (one value per edge in CSR order:
SDDMM) and `HeadsOutPlan` (n_rows x H x d: attention).
"""
from __future__ import annotations

import contextvars
import time
from abc import ABC, abstractmethod
from contextlib import contextmanager
from dataclasses import dataclass, field

from .. import dtypes
from ..graphs.csr import CSRGraph
from ..kernels.compile import compile_ms_total


@dataclass(eq=False)
class DeviceGraph:
    """A CSRGraph resident on the GPU. Plans share derived data through `derived` (for example the
    row lists of a degree threshold), built once per input."""
    host: CSRGraph
    indptr: object
    indices: object
    values: object
    derived: dict = field(default_factory=dict)

    @classmethod
    def from_host(cls, graph: CSRGraph) -> "DeviceGraph":
        import cupy

        return cls(graph, cupy.asarray(graph.indptr), cupy.asarray(graph.indices),
                   cupy.asarray(graph.values))

    @property
    def n_rows(self) -> int:
        return self.host.n_rows

    @property
    def n_cols(self) -> int:
        return self.host.n_cols

    @property
    def nnz(self) -> int:
        return self.host.nnz

    def edge_rows(self):
        """The row id of every edge (the graph's index dtype), made once and kept in `derived`."""
        rows = self.derived.get("edge_rows")
        if rows is None:
            import cupy

            from ..kernels import util

            rows = util.edge_rows(self.indptr, self.nnz, cupy.empty(self.nnz, dtype=self.indptr.dtype))
            self.derived["edge_rows"] = rows
        return rows


def random_inputs(shapes, seed: int = 0, dtype: str = dtypes.DEFAULT, operand_dtypes=None) -> tuple:
    """Random (never zero) arrays of `dtype` (or of `operand_dtypes`, one per shape) on the device,
    one per shape, uniform in (-1, 1):
    drawn in float32 and rounded to nearest even into `dtype`, so every dtype sees the same values
    up to its rounding (bfloat16 stored as uint16 bit patterns). A counter-based generator of
    autosage's helper module (kernels/util.py): the same (seed, shapes) give the same values on
    every GPU, which `replay` relies on, and no CuPy random kernel is compiled."""
    from ..kernels import util

    kinds = operand_dtypes or [dtype] * len(shapes)
    return tuple(util.uniform(s, seed, stream, dtypes.storage_dtype(dtypes.info(kind).name))
                 for stream, (s, kind) in enumerate(zip(shapes, kinds)))


class Plan(ABC):
    """One prepared way to run one op on one graph at one width."""
    op: str
    backend: str        # "native", "cusparse-alg1|alg2|alg3|default", "cusparse-sddmm", "torch", ...
    schedule: str       # schedule name, or the vendor algorithm name
    k: int
    heads: int = 1
    dtype: str = dtypes.DEFAULT   # the element type of its operands and output (bfloat16: uint16 bits)
    prepare_ms: float = 0.0
    compile_ms: float = 0.0   # of prepare_ms: building kernel modules (0 when they were built before)

    def __init__(self, graph: DeviceGraph, op: str, k: int, heads: int = 1, dtype: str = dtypes.DEFAULT):
        self.graph, self.op, self.k, self.heads, self.dtype = graph, op, k, heads, dtype

    @staticmethod
    @abstractmethod
    def out_shape(graph: DeviceGraph | CSRGraph, k: int, heads: int = 1) -> tuple[int, ...]:
        """The output's shape for `graph` at width k with `heads` (the layout classes below)."""

    def alloc_out(self):
        import cupy

        return cupy.empty(self.out_shape(self.graph, self.k, self.heads),
                          dtype=dtypes.storage_dtype(self.dtype))

    @abstractmethod
    def run(self, inputs: tuple, out) -> None:
        """Launch on the current stream. No allocation, no synchronization."""

    def __call__(self, *inputs):
        out = self.alloc_out()
        self.run(inputs, out)
        return out


class RowsOutPlan(Plan):
    """Output: n_rows x K, one row of K per graph row (SpMM)."""

    @staticmethod
    def out_shape(graph, k: int, heads: int = 1) -> tuple[int, ...]:
        return (graph.n_rows, k)


class EdgesOutPlan(Plan):
    """Output: one value per edge, in CSR order (SDDMM)."""

    @staticmethod
    def out_shape(graph, k: int, heads: int = 1) -> tuple[int, ...]:
        return (graph.nnz,)


class HeadsOutPlan(Plan):
    """Output: n_rows x H x d, one d-row per (graph row, head) (attention)."""

    @staticmethod
    def out_shape(graph, k: int, heads: int = 1) -> tuple[int, ...]:
        return (graph.n_rows, heads, k)


_SYNCHRONIZED_PREPARE = contextvars.ContextVar("autosage_synchronized_prepare", default=True)


@contextmanager
def unsynchronized_prepare():
    """Plans prepared inside wait for nothing: their prepare_ms is host time only. For callers that
    prepare plans between their own GPU work (a training step on a new graph), where waiting for
    the device would stall the queue once per plan."""
    token = _SYNCHRONIZED_PREPARE.set(False)
    try:
        yield
    finally:
        _SYNCHRONIZED_PREPARE.reset(token)


class PrepareTimer:
    """`with PrepareTimer(plan): ...` records the wall time of preparation (synchronized, unless
    inside `unsynchronized_prepare`) in plan.prepare_ms, and how much of it went into building
    kernel modules in plan.compile_ms."""

    def __init__(self, plan: Plan):
        self.plan = plan

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.compiled0 = compile_ms_total()
        return self

    def __exit__(self, *exc):
        import cupy

        if _SYNCHRONIZED_PREPARE.get():
            cupy.cuda.get_current_stream().synchronize()
        self.plan.prepare_ms = (time.perf_counter() - self.t0) * 1e3
        self.plan.compile_ms = compile_ms_total() - self.compiled0
        return False
