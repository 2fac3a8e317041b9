"""The schedule of the additive (GAT) attention score for a torch graph, decided like every op's.

The op itself (its candidates, the fused attention schedules with the "additive" kernel variant;
its float64 reference; its cost model; why its guardrail is the reference and not a vendor) is
`ops/additive.py`, op `attention-additive`. Its decisions go where the other ops' go:
  fixed     Graph(schedules={"attention-additive": name}): that attention schedule, checked
            (`additive_schedule`), never probed;
  kind      a graph of up to kinds.KIND_MAX_NNZ edges: its kind's decision (kinds.decide). The first
            graph of a kind is tuned (scheduler.tune: the cached decision, else a probe of the cost
            model's best few within the budget, each verified against the float64 reference before
            it is timed), recorded in the decision cache with its kind; later graphs of the kind
            probe nothing;
  larger    by fingerprint: the cached decision, else a tune of the graph (tune.lookup_or_tune);
  tune off  the kind's or the graph's cached decision when there is one, else the cost model's
            best (`additive_schedule`: ranked by ops/additive.additive_rows), once per kind; never
            a probe.
A cached decision is replayed by `autosage replay` like any other (the plan re-run, verified
against the float64 reference, timed).
"""
from __future__ import annotations

from ... import dtypes, ops as op_specs
from ...errors import AutosageError
from ...graphs.csr import CSRGraph
from ...kernels.attention_families import FAMILIES
from ...kernels.schedule import Schedule, family_of, get
from ...ops.additive import NAME as OP, VARIANT

# The families with an additive-score kernel, in table order (named in messages).
ADDITIVE_FAMILIES = tuple(name for name, family in FAMILIES.items() if family.variant(VARIANT))


def runs_additive(schedule: Schedule) -> bool:
    return op_specs.runs_schedule(OP, schedule) is None


def _ranked(graph: CSRGraph, d: int, heads: int, dtype: str) -> list[Schedule]:
    from ...features import compute_features
    from ..estimate import rank

    ranked = [s for s, _ms in rank(compute_features(graph, symmetry=False), OP, d, heads, dtype=dtype)]
    if not ranked:
        raise AutosageError(f"no fused attention schedule runs d={d}, heads={heads} in {dtype} (d must "
                            f"be at most 256 features per head)")
    return ranked


def additive_schedule(graph: CSRGraph, d: int, heads: int, schedule: str | None = None,
                      dtype: str = dtypes.DEFAULT) -> Schedule:
    """`schedule` (the name of a schedule of an ADDITIVE_FAMILIES family), checked against (d,
    heads, dtype); or the cost model's best of those families for this graph in `dtype`."""
    if schedule is None:
        return _ranked(graph, d, heads, dtype)[0]
    chosen = get(schedule)  # AutosageError for an unknown name
    if not runs_additive(chosen):
        raise AutosageError(f"schedule {schedule!r}: the additive score runs on the attention "
                            f"families {', '.join(ADDITIVE_FAMILIES)} only")
    reason = chosen.supports(d, heads, dtype)
    if reason is not None:
        raise AutosageError(f"schedule {schedule!r} cannot run d={d}, heads={heads} in {dtype}: {reason}")
    return chosen


def _cost_model_of_kind(features: dict, checksum: int, host_graph, d: int, heads: int,
                        dtype: str, own_host: bool = True) -> Schedule:
    """With tuning off and the kind unknown: the cost model's best for the first graph of the kind
    (`host_graph()`, built only then), and for the kind's other graphs its best whose plan builds
    no work lists on the host; decided once per kind in this process, recorded nowhere."""
    from . import kinds

    def ranked_once() -> kinds.Kind:
        ranked = _ranked(host_graph(), d, heads, dtype)
        on_device = [c for c in ranked if not family_of(c.family).reads_host_graph(c)]
        return kinds.Kind(features, checksum, {"schedule": ranked[0].name},
                          {"schedule": (on_device or ranked)[0].name})

    # a graph of every listing takes the other graphs' choice (kinds.decide's own_host says why)
    chosen = kinds.lookup(("cost-model", OP, d, heads, dtype), features, checksum if own_host else None,
                          ranked_once)
    return get(chosen["schedule"])


def _native(decision: dict) -> Schedule:
    from .plans import schedule_of_decision

    if decision.get("backend") != "native":
        raise AutosageError(f"{OP}: decision {decision.get('schedule')!r} is not a native schedule")
    return schedule_of_decision(decision)


def schedule_for(dgraph, d: int, heads: int, dtype: str = dtypes.DEFAULT, *, fixed: str | None = None,
                 kind: tuple | None = None, cache=None, tune: bool = True, own_host: bool = True,
                 static: bool = False) -> Schedule:
    """The additive schedule for `dgraph` (a DeviceGraph whose host side gives the CSRGraph on
    demand) at (d, heads, dtype): `fixed`, checked; else, with `kind` = (kind features, structure
    checksum) (autosage_cli.torch.Graph's), its kind's decision; else the graph's own, by
    fingerprint (module docstring). `cache` is a DecisionCache, a path or None (the default file)."""
    from . import kinds

    if fixed is not None:
        return additive_schedule(dgraph.host.csr(), d, heads, fixed, dtype)
    if kind is not None:
        features, checksum = kind
        decision = kinds.decide(features, checksum, (OP, d, heads, dtype, False), cache=cache, tune=tune,
                                host_graph=dgraph.host.csr, own_host=own_host, static=static)
        if decision is None:
            return _cost_model_of_kind(features, checksum, dgraph.host.csr, d, heads, dtype, own_host)
        return _native(decision)
    from .. import tune as tuner
    from ... import cache as cache_mod

    store = cache if isinstance(cache, cache_mod.DecisionCache) else cache_mod.DecisionCache(cache)
    host = dgraph.host.csr()
    if tune:
        return _native(tuner.lookup_or_tune(host, OP, d, heads, cache=store, dtype=dtype).decision.to_dict())
    found = tuner.recall(host, OP, d, heads, cache=store, dtype=dtype)
    return additive_schedule(host, d, heads, None, dtype) if found is None else _native(found.decision.to_dict())


def prepare_additive_plan(dgraph, schedule: Schedule, d: int, heads: int, negative_slope: float,
                          dtype: str = dtypes.DEFAULT):
    """A prepared additive-score plan of `schedule` on `dgraph`, V and the output in `dtype`, with
    the caller's slope (the op spec's plan: ops.prepare_native)."""
    return op_specs.prepare_native(dgraph, schedule, d, heads, None, dtype, op=OP,
                                   negative_slope=float(negative_slope))
