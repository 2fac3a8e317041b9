"""The schedule of the additive (GAT) attention score, chosen without a probe.

The additive score LeakyReLU(a_dst[i,h] + a_src[j,h]) runs on the attention families whose entry has
the "additive" kernel variant, the fused ones (backends.native_attention.prepare_additive). Its walk over a row is the dot-product walk without
the K-row loads and the dot product: the V-row loads, the online softmax and the split of long rows
are the same, so the cost model's ranking of the fused schedules for the dot-product attention at
the same (d, H) ranks them for this score too, and the best fused or fused_split schedule is taken
as it stands. No kernel is timed (there is no vendor additive attention to verify a probe against);
a fixed schedule can be asked for by name instead.
"""
from __future__ import annotations

from ... import dtypes
from ...errors import AutosageError
from ...graphs.csr import CSRGraph
from ...kernels.attention_families import FAMILIES
from ...kernels.schedule import Schedule, family_of, get

# The families with an additive-score kernel, in table order (named in messages).
ADDITIVE_FAMILIES = tuple(name for name, family in FAMILIES.items() if family.variant("additive"))


def runs_additive(schedule: Schedule) -> bool:
    return schedule.family in ADDITIVE_FAMILIES


def additive_schedule(graph: CSRGraph, d: int, heads: int, schedule: str | None = None,
                      dtype: str = dtypes.DEFAULT) -> Schedule:
    """`schedule` (the name of a schedule of an ADDITIVE_FAMILIES family), checked against (d,
    heads, dtype); or the cost model's best of those families for this graph in `dtype`."""
    if schedule is not None:
        chosen = get(schedule)  # AutosageError for an unknown name
        if not runs_additive(chosen):
            raise AutosageError(f"schedule {schedule!r}: the additive score runs on the attention "
                                f"families {', '.join(ADDITIVE_FAMILIES)} only")
        reason = chosen.supports(d, heads, dtype)
        if reason is not None:
            raise AutosageError(f"schedule {schedule!r} cannot run d={d}, heads={heads} in {dtype}: "
                                f"{reason}")
        return chosen
    from ...features import compute_features
    from ..estimate import rank

    features = compute_features(graph, symmetry=False)
    for candidate, _ms in rank(features, "attention", d, heads, dtype=dtype):
        if runs_additive(candidate):
            return candidate
    raise AutosageError(f"no fused attention schedule runs d={d}, heads={heads} (d must be at most "
                        f"256 features per head)")


def additive_schedule_of_kind(features: dict, checksum: int, host_graph, d: int, heads: int,
                              dtype: str = dtypes.DEFAULT) -> Schedule:
    """The additive schedule for a graph of `features` (autosage_cli.torch.Graph.kind_features),
    chosen once per kind (scheduler/decisions/kinds.py): the cost model's best for the first graph of the
    kind (`host_graph()`, its CSRGraph, built only then), and for the kind's other graphs its best
    whose plan builds no work lists on the host."""
    from . import kinds

    def ranked_once() -> kinds.Kind:
        from ...features import compute_features
        from ..estimate import rank

        ranked = [c for c, _ms in rank(compute_features(host_graph(), symmetry=False), "attention", d,
                                       heads, dtype=dtype) if runs_additive(c)]
        if not ranked:
            additive_schedule(host_graph(), d, heads, None, dtype)   # raises, saying why
        on_device = [c for c in ranked if not family_of(c.family).reads_host_graph(c)]
        return kinds.Kind(features, checksum, {"schedule": ranked[0].name},
                          {"schedule": (on_device or ranked)[0].name})

    chosen = kinds.lookup(("attention-additive", d, heads, dtype), features, checksum, ranked_once)
    return get(chosen["schedule"])


def prepare_additive_plan(dgraph, schedule: Schedule, d: int, heads: int, negative_slope: float,
                          dtype: str = dtypes.DEFAULT):
    """A prepared additive-score plan of `schedule` on `dgraph`, V and the output in `dtype`."""
    from ...backends.native_attention import prepare_additive

    return prepare_additive(dgraph, schedule, d, heads, negative_slope, dtype)
