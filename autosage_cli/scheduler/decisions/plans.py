"""A decision, fresh or cached, to a runnable Plan without probing: `plan_for(dgraph, decision, k,
heads, scale, measure, dtype)`; the API, the benchmark and `autosage replay` use it."""
from __future__ import annotations

from ... import dtypes, ops as op_specs
from ...errors import AutosageError
from ...kernels import schedule as schedule_mod
from ..probing.measure import GpuMeasurer
from .select import Decision


def schedule_of_decision(decision) -> object:
    """The Schedule of a native decision: by name from the registry, else rebuilt from the
    recorded parameters (the registry may have been regenerated since)."""
    name, params = (decision.schedule, decision.params) if isinstance(decision, Decision) else (
        decision["schedule"], decision.get("params") or {})
    try:
        return schedule_mod.get(name)
    except AutosageError:
        if not params:
            raise
    s = schedule_mod.Schedule(**params)
    try:
        s.validate()
    except ValueError as exc:
        raise AutosageError(f"recorded schedule {name!r} is no longer valid: {exc}") from None
    return s


def plan_for(dgraph, decision, k: int, heads: int = 1, scale=None, measure=None,
             dtype: str = dtypes.DEFAULT, op: str | None = None):
    """A Plan that runs `decision` (a Decision, its dict, or a TuneResult) on `dgraph` with `dtype`
    operands, without probing. `op`: the decision's op, needed for one that runs another op's
    schedules (the additive score on an attention schedule: ops.native_options)."""
    measure = measure or GpuMeasurer()
    decision = getattr(decision, "decision", decision)
    backend = decision.backend if isinstance(decision, Decision) else decision["backend"]
    if backend == "native":
        return measure.prepare_native(dgraph, schedule_of_decision(decision), k, heads, scale, dtype,
                                      **op_specs.native_options(op))
    name = decision.schedule if isinstance(decision, Decision) else decision["schedule"]
    return measure.prepare_vendor(dgraph, name, k, heads, scale, dtype)
