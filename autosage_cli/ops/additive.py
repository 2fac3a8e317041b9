"""The additive (GAT) attention score, H heads of width d (= K):
out[i,h] = sum over row i's edges j of softmax_j(LeakyReLU(a_dst[i,h] + a_src[j,h])) V[j,h], rows
without edges give zeros. a_dst: n_rows x H and a_src: n_cols x H, float32 in every dtype (the
kernels read them as float32 scalars); V: n_cols x H x d and out: n_rows x H x d in the op's dtype.

Its schedules are the attention schedules whose family has the "additive" kernel variant (fused,
fused_split: `Family.variants`), run by the additive plans (backends/native_attention.
prepare_additive), so their names are the attention schedules' ("attention.fused...."), and a
decision names one of them under this op. The probe runs them at DEFAULT_SLOPE: the slope is a
runtime scalar of the same kernel (the same instructions and bytes for every slope), so it is not
part of the decision's key, as attention's scale is not.

No vendor baseline. Nothing vendor-made computes this score, and the nearest composition (a
per-edge score kernel, a row softmax and one cuSPARSE SpMM per head) would have to write the
row statistics the GAT backward reads, which the fused plans write as they go: the torch path
could not run its decision. So the guardrail of this op is verification against the float64
reference, every candidate before it is timed, and the choice is the fastest verified native
candidate (scheduler/decisions/select.decide without vendors). The reference runs on the device
(`_device_reference`, where the inputs are) in every dtype, so its kernel module is one of the
groups a tune compiles ahead; the host one (`additive_reference`) stays its definition.
"""
from __future__ import annotations

import math
from functools import partial

from .. import dtypes
from ..backends import native_attention
from ..backends.base import HeadsOutPlan
from ..errors import AutosageError
from ..kernels import attention_families
from ..kernels.compile import KernelRef
from .cost.roofline import FLOAT
from .cost.row_walks import RowWork, row_launches
from .spec import OpSpec

NAME = "attention-additive"
VARIANT = "additive"
DEFAULT_SLOPE = 0.2            # PyG's GATConv default: what a probe verifies and times
REFERENCE_GROUPS = ("reference/additive/{c}/{i}",)   # its float64 reference's module (kernels/util.py)


def additive_rows(f, prof, k, s, dev, heads=1, elem=FLOAT):
    """The fused online softmax of the additive score: per edge a V-row gather and one float32
    a_src[j,h] (beside the V row, so its latency overlaps the row's); no dot product, so no lane
    reduction before the exp, and a_dst is read once per (row, head)."""
    v_bytes = f.n_cols * heads * k * elem
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        v_bytes + f.n_cols * heads * FLOAT, 1, f.n_rows * heads * FLOAT, f.n_rows * heads * k * elem,
        extra_us=2 * dev.shuffle_latency_us, instr=6, heads_in_warp=True), elem)


def kernels(schedule, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """Every kernel the additive plan of `schedule` launches (in its file): the variant, and for
    a plan that merges chunk partials (fused_split) the combine and the statistics merge."""
    variant = attention_families.additive_expression(schedule, dtype, index)
    own = attention_families.FAMILIES[schedule.family].kernels(schedule, dtype, index)
    merges = own[1:]   # the family's kernels after its own score kernel: the partials' combine
    stats = (attention_families.additive_stats_expression(index),) if merges else ()
    return (variant, *merges, *stats)


def kernel_refs(schedule, dtype: str = "float", index: str = "int") -> tuple[KernelRef, ...]:
    return tuple(KernelRef(schedule.source_file, e) for e in kernels(schedule, dtype, index))


def _input_shapes(graph, k: int, heads: int = 1) -> list[tuple[int, ...]]:
    return [(graph.n_rows, heads), (graph.n_cols, heads), (graph.n_cols, heads, k)]


def _operand_dtypes(dtype: str) -> tuple[str, ...]:
    return ("float32", "float32", dtype)


def _prepare_native(dgraph, schedule, k: int, heads: int = 1, scale=None, dtype: str = dtypes.DEFAULT,
                    negative_slope: float = DEFAULT_SLOPE):
    return native_attention.prepare_additive(dgraph, schedule, k, heads, negative_slope, dtype)


def _no_vendor(dgraph, name: str, *args, **kwargs):
    raise AutosageError(f"{NAME} has no vendor plan (its guardrail is the float64 reference): {name!r}")


def _reference(csr, inputs, scale=None, negative_slope: float = DEFAULT_SLOPE, dtype: str = dtypes.DEFAULT,
               **options):
    from ..backends.reference import additive_reference   # SciPy, imported when a reference is made
    return additive_reference(csr, inputs, negative_slope, dtype)


def _device_reference(dgraph, inputs, scale=None, dtype: str = dtypes.DEFAULT):
    from ..backends import reference_device as device   # CuPy, imported when a reference is made
    return device.reference(partial(device.additive, negative_slope=DEFAULT_SLOPE), dgraph, inputs, scale,
                            dtype, out_elements=math.prod(inputs[2].shape),
                            per_edge=3 * int(inputs[2].shape[1]))   # the scores, their two terms


SPEC = OpSpec(
    name=NAME, dtypes=tuple(dtypes.DTYPES), operands=("a_dst", "a_src", "V"), multi_head=True,
    reads_values=False, prepare_native=_prepare_native,
    input_shapes=_input_shapes, output_shape=HeadsOutPlan.out_shape, reference=_reference,
    device_reference=_device_reference, operand_dtypes=_operand_dtypes,
    gathers_per_edge=lambda heads: heads,              # V rows (a_src is one scalar per head)
    scores_per_edge=lambda heads: 0,                   # fused: scores never leave the registers
    vendor_names=lambda: [], is_vendor=lambda name: False, prepare_vendor=_no_vendor,
    vendor_stream=lambda n_rows, nnz, k, heads: n_rows * k * heads,
    accumulates=("edges",), warmup_shape=(64, 4), cost_models={"rows": additive_rows},
    schedules_of="attention", variant=VARIANT, variant_kernels=kernel_refs,
    helper_groups=REFERENCE_GROUPS,
)
