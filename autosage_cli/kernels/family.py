"""The kernel-family contract: what one family (one templated kernel in a cuda/ file) tells the
rest of autosage about itself.

A family is one `Family` value in its op's family module (`spmm_families`, `sddmm_families`,
`attention_families`); `schedule.FAMILIES` joins those tables explicitly, so importing
`kernels.schedule` is enough for every family to be known. The hooks receive a
`kernels.schedule.Schedule`; this module and the family modules never import it (schedule.py
imports them), so the imports stay one way. A family's schedules are therefore generated through
a `make(**knobs)` the space passes in: a Schedule constructor with the op and family filled in.

What the layers above need of a family they read from its entry, by name where the code lives
above `kernels/`: `cost` names the cost model in its op spec's `cost_models` (the models live in
ops/cost/, above kernels, since they need the roofline types),
`plan` names the launch layout in the op's native plan module (backends/native_spmm.py's and
native_sddmm.py's `LAYOUTS`, backends/native_attention.py's `PLANS`). A new family that walks its work like an
existing one names that model and layout and changes neither module. What else a plan needs to
know (more kernels per schedule, 64-bit index instantiations, score variants, sub-steps run by
other ops' schedules) is data here too, so no layer above branches on a family's name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from ..dtypes import info as dtype_info


def every_schedule(schedule) -> bool:
    """A `host_work_lists` rule: every schedule of the family builds them."""
    return True


@dataclass(frozen=True)
class Family:
    op: str                                        # the op it computes: "spmm" | "sddmm" | "attention"
    source_file: str                               # file name under cuda/
    name_expression: Callable[..., str]            # (schedule, dtype) -> "kernel<dtype, ...>"
    supports: Callable[..., Optional[str]]         # (schedule, k, heads) -> None or the reason it cannot
    knobs: str                                     # one line: what the Schedule fields mean here
    # Threads one work item takes when it is not `lanes` (e.g. a warp per row with lanes < 32).
    lanes_per_item: Optional[Callable[..., int]] = None
    # The family's part of its op's space, in a fixed order (names are cache keys):
    # (make) -> schedules, where make(**knobs) builds a Schedule of this op and family.
    schedules: Optional[Callable[..., Sequence]] = None
    # Shapes only the 2-byte types run (16-byte vectors of 8 halves; float32 refuses them), placed
    # after every family's own schedules so that float32's names keep their order.
    half_schedules: Optional[Callable[..., Sequence]] = None
    # Rules beyond Schedule.validate() that its schedules keep: (schedule) -> None or the reason.
    space_rules: Optional[Callable[..., Optional[str]]] = None
    # The cost model of its walk (a name in its op spec's cost_models, ops/cost/).
    cost: str = "rows"
    # The launch layout of its native plan (a name in the op's plan module's LAYOUTS or PLANS).
    plan: str = "rows"
    # A warp stages each edge's (column, value) ahead of use: the index load leaves the latency
    # chain of the edge walk (the cost model's `Walker.staged`).
    stages_edges: bool = False
    # Rows above this many nonzeros get a whole warp in a persistent plan's row lists:
    # (schedule) -> threshold, or None for no heavy rows.
    heavy_threshold: Optional[Callable[..., Optional[int]]] = None
    # Every kernel one schedule's plan launches, its own first, in a dtype and an index type
    # ("int" or "long long"): (schedule, dtype, index) -> name expressions. None: the name
    # expression alone (in int indices).
    launches: Optional[Callable[..., tuple]] = None
    # Its kernels are instantiated for 64-bit indices too (graphs past 2^31 nonzeros).
    wide_indices: bool = False
    # The same schedule's kernels for another score, which the plan chooses (the schedule does
    # not), built on first use: variant name -> (schedule, dtype, index) -> name expression.
    variants: Optional[Mapping[str, Callable[..., str]]] = None
    # The ops whose native schedules its plan also runs, chosen at prepare (their kernels are part
    # of its plan's, and of its op's precompiled set): () for a plan of its own kernels only.
    substeps: tuple[str, ...] = ()
    # Its plan builds work lists (row partitions, segments, windows) from the graph on the host:
    # (schedule) -> bool; None: never. Such a plan copies the graph to the host and walks it once
    # per new graph, so a decision that carries over to new graphs (scheduler/decisions/kinds.py) takes one
    # of the others.
    host_work_lists: Optional[Callable[..., bool]] = None

    def reads_host_graph(self, schedule) -> bool:
        return bool(self.host_work_lists and self.host_work_lists(schedule))

    def kernels(self, schedule, dtype: str, index: str = "int") -> tuple[str, ...]:
        """The name expressions of every kernel a plan of `schedule` launches itself, in `dtype` (a
        dtype name or its C++ type)."""
        c_type = dtype_info(dtype).c_type
        if self.launches:
            return tuple(self.launches(schedule, c_type, index))
        return (self.name_expression(schedule, c_type),)

    def variant(self, name: str) -> Optional[Callable[..., str]]:
        """The name expression of the kernel variant `name` (e.g. "additive"), None if it has none."""
        return (self.variants or {}).get(name)

    def heavy_rows_above(self, schedule) -> Optional[int]:
        """The nonzeros above which a row of `schedule` is heavy (walked by a warp); None: no row is."""
        return self.heavy_threshold(schedule) if self.heavy_threshold else None


def first_reason(*reasons: Optional[str]) -> Optional[str]:
    """The first refusal among a family's predicates (None when every one accepts)."""
    return next((r for r in reasons if r), None)
