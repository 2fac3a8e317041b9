"""The contract of one op: everything autosage knows about an operation, in one object.

Each op module (`spmm`, `sddmm`, `attention`) defines one `OpSpec` named `SPEC`; the registry
(`autosage_cli.ops`) lists them. Layers above (scheduler, api, bench, commands) ask the spec
instead of testing the op's name, and the byte counts and memory estimates below are written once,
from the operand shapes, for every op.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping

from .. import dtypes
from ..kernels.family import Family

INDEX_BYTES = 4     # CSR indices (int32 below 2^31 nonzeros)


@dataclass(frozen=True)
class OpSpec:
    name: str
    # The dtypes this op accepts, the default first. Only these are instantiated and tuned; asking
    # for another is a one-line error naming them.
    dtypes: tuple[str, ...]
    operands: tuple[str, ...]                     # the dense inputs' names, in order
    multi_head: bool                              # takes H > 1 heads (attention)
    input_shapes: Callable[..., list]             # (graph, k, heads) -> one shape per operand
    output_shape: Callable[..., tuple]            # (graph, k, heads) -> the output's shape
    reference: Callable                           # (csr, inputs, scale=None, **options) -> float64
    gathers_per_edge: Callable[[int], int]        # (heads) -> dense rows of width k fetched per edge
    scores_per_edge: Callable[[int], int]         # (heads) -> values held per edge between stages
    vendor_names: Callable[[], list]              # the vendor entries here, in a stable order
    is_vendor: Callable[[str], bool]              # whether a name is one of its vendor entries
    prepare_vendor: Callable                      # (dgraph, name, k, heads, scale, dtype) -> Plan
    # The vendor time estimate's view of the op: elements streamed besides the gathers (rows
    # written, and read per row), and the stages (kernel launches) a vendor composition takes.
    vendor_stream: Callable[..., float]           # (n_rows, nnz, k, heads) -> elements
    vendor_stages: int = 1
    baselines: tuple[str, ...] = ()               # framework baselines the benchmark times
    # The vendor entry a framework user gets without tuning (cuSPARSE's default algorithm), or
    # None when the op has no such default (then the first vendor entry stands in for it).
    default_vendor: str | None = None
    # (dgraph, schedule, k, heads, scale, dtype=..., **options) -> Plan: its native plans (the
    # built-in ops: backends/native_<op>.py's prepare), called by ops.prepare_native once the
    # schedule is known to run the case; None: the op has no native plans.
    prepare_native: Callable | None = None
    # What one output sums (float32 sums, the verification bound's length): "features" (K products:
    # SDDMM's and attention's dots) and/or "edges" (a row's edges: SpMM, attention's softmax).
    accumulates: tuple[str, ...] = ("edges",)
    # The vendor entries a tune's guardrail measures, when fewer than vendor_names (None: all of
    # them); the benchmark times every vendor entry whatever this says.
    guardrail_vendor_names: Callable[[], list] | None = None
    # (dgraph, inputs, scale, dtype) -> the float64 reference on the device, or None when it does
    # not fit there (backends/reference_device.py); None here: the host reference only
    device_reference: Callable | None = None
    # Its kernel families (name -> kernels.family.Family), for an op whose families are not one of
    # the built-in tables of kernels/: the registry registers them (kernels.schedule.register_op)
    # and their schedules are the op's space. None: the built-in table of kernels/ (spmm, sddmm,
    # attention).
    families: Mapping[str, Family] | None = None
    # (width, heads) of the tiny warm-up tune that compiles the CuPy kernels a tune of this op runs.
    warmup_shape: tuple[int, int] = (64, 1)
    # Whether the op multiplies by the graph's values (SpMM, SDDMM); attention's scores ignore them.
    reads_values: bool = True
    # Its cost models (name -> model, ops/cost/row_walks.py): a family names the model of its walk
    # (`Family.cost`). None: the row walk of this spec alone (scheduler/estimate.spec_rows).
    cost_models: Mapping[str, Callable] | None = None
    # The helper-kernel groups a tune of this op launches besides every tune's (its vendors' and
    # references' steps), as kernels/util.py templates filled with the codec {c} and index type {i}.
    helper_groups: tuple[str, ...] = ()
    # The libraries its guardrail vendors import on first use, as functions that import them: a tune
    # runs them on a thread while the graph loads (scheduler/prefetch.py).
    vendor_imports: tuple[Callable[[], None], ...] = ()
    # The dtype of each operand for an op in `dtype`, when not all are of it ((dtype) -> one name
    # per operand: the additive score's a_dst and a_src are float32 in every type). None: all `dtype`.
    operand_dtypes: Callable[[str], tuple[str, ...]] | None = None
    # An op that runs another op's schedules with kernels of its own: that op (`schedules_of`) and
    # the kernel variant its plans launch (`variant`, a key of Family.variants); its candidates are
    # the schedules of the families that have the variant (the additive score runs the fused
    # attention schedules), and `variant_kernels(schedule, dtype, index)` lists the KernelRefs its
    # plan of one launches. None: the op's own space (schedules whose op is its name).
    schedules_of: str | None = None
    variant: str | None = None
    variant_kernels: Callable | None = None
    # (dtype) -> the KernelRefs of ours its vendor plans launch after the vendor library's call (a
    # fused SpMM's epilogue as a launch of its own), for the install-time listing (ops/listing.py).
    vendor_kernels: Callable[[str], tuple] = lambda dtype: ()

    def require_dtype(self, dtype: str) -> str:
        return dtypes.require(dtype, self.dtypes, self.name)

    def accumulation_length(self, k: int, max_degree: int) -> int:
        """The most terms one output sums at width k on a graph whose longest row has max_degree
        edges (at least one)."""
        lengths = {"features": int(k), "edges": int(max_degree)}
        return max([1] + [lengths[what] for what in self.accumulates])

    def tolerance(self, dtype: str, k: int, max_degree: int) -> float:
        """The verification bound of one case (dtypes.tolerance at this op's accumulation length)."""
        return dtypes.tolerance(dtype, self.accumulation_length(k, max_degree))

    def compulsory_bytes(self, n_rows: int, n_cols: int, nnz: int, k: int, heads: int = 1,
                         index_bytes: int = INDEX_BYTES, dtype: str = dtypes.DEFAULT) -> int:
        """Bytes any implementation must move at least once: the CSR (indptr, indices, values),
        every dense input read once and the output written once."""
        # A's values are read in the dense dtype (the plans keep a copy of them in it)
        sparse = (n_rows + 1) * index_bytes + nnz * index_bytes + nnz * dtypes.itemsize(dtype)
        inputs, output = self._elements(n_rows, n_cols, nnz, k, heads)
        return int(sparse + (inputs + output) * dtypes.itemsize(dtype))

    def gather_bytes(self, nnz: int, k: int, heads: int = 1, dtype: str = dtypes.DEFAULT) -> int:
        """The no-reuse gather bound: every dense row an edge needs, fetched once per edge."""
        return int(nnz * self.gathers_per_edge(heads) * k * dtypes.itemsize(dtype))

    def dense_elements(self, n_rows: int, n_cols: int, nnz: int, k: int, heads: int = 1):
        """(input elements, output elements, per-edge elements held between stages)."""
        inputs, output = self._elements(n_rows, n_cols, nnz, k, heads)
        return inputs, output, nnz * self.scores_per_edge(heads)

    def _elements(self, n_rows, n_cols, nnz, k, heads) -> tuple[int, int]:
        shape = _Shape(n_rows, n_cols, nnz)
        inputs = sum(math.prod(s) for s in self.input_shapes(shape, k, heads))
        return inputs, math.prod(self.output_shape(shape, k, heads))


@dataclass(frozen=True)
class _Shape:
    """The sizes the shape functions read, without a graph."""
    n_rows: int
    n_cols: int
    nnz: int
