"""The native backend: `prepare(dgraph, schedule, k, heads=1, scale=None, dtype="float32") -> Plan`
for our kernels, instantiated for `dtype` (its C++ type from the dtypes table).

Dispatches on schedule.op: "spmm" to native_spmm, "sddmm" to native_sddmm, "attention" to
native_attention (imported only when asked for). `schedule` is a Schedule or a registered name.
A schedule that cannot run width k says why (Schedule.supports) and is refused here with that
reason, before anything is compiled; so is an int64-index graph (the kernels take int32).

`compile_plans(dgraph, schedules, k, heads)` builds, in parallel, the kernels the plans of several
schedules will launch (the tuner calls it before it prepares its candidates one by one), and
`kernel_refs` lists them for one schedule.
"""
from __future__ import annotations

from .. import dtypes
from ..errors import AutosageError
from ..kernels import compile as kcompile
from ..kernels.schedule import Schedule, get
from .attention_common import index_type
from .base import DeviceGraph, Plan


def prepare(dgraph: DeviceGraph, schedule: Schedule | str, k: int, heads: int = 1,
            scale: float | None = None, dtype: str = dtypes.DEFAULT, **attention_options) -> Plan:
    """A prepared native plan. `attention_options` (e.g. use_values, substeps) go to
    native_attention.prepare and are refused for the other ops."""
    if isinstance(schedule, str):
        schedule = get(schedule)
    dtypes.info(dtype)
    reason = schedule.supports(k, heads)
    if reason:
        raise AutosageError(f"{schedule.name} cannot run K={k}: {reason}")
    if attention_options and schedule.op != "attention":
        raise AutosageError(f"options {sorted(attention_options)} apply to attention only")
    if schedule.op == "spmm":
        if heads != 1:
            raise AutosageError(f"spmm runs one head; got heads={heads}")
        from . import native_spmm

        return native_spmm.prepare(dgraph, schedule, k, dtype)
    if schedule.op == "sddmm":
        if heads != 1:
            raise AutosageError(f"sddmm runs one head; got heads={heads}")
        from . import native_sddmm

        return native_sddmm.prepare(dgraph, schedule, k, scale, dtype)
    if schedule.op == "attention":
        from .native_attention import prepare as prepare_attention

        return prepare_attention(dgraph, schedule, k, heads, scale, dtype=dtype, **attention_options)
    raise AutosageError(f"no native backend for op {schedule.op!r}")


def kernel_refs(schedule: Schedule, k: int, index: str = "int",
                dtype: str = dtypes.DEFAULT) -> tuple[kcompile.KernelRef, ...]:
    """Every kernel instantiation a plan of `schedule` at width k with `dtype` operands launches:
    its own, plus, for the unfused attention pipeline, those of the SDDMM and SpMM sub-step
    schedules it picks for d = k (none when no sub-step fits: prepare then says why)."""
    c_type = dtypes.c_type(dtype)
    refs = kcompile.schedule_kernels(schedule, c_type, index)
    if schedule.op == "attention" and schedule.family == "unfused":
        from .attention_unfused import substep_schedules

        try:
            steps = substep_schedules(schedule, k)
        except ValueError:
            steps = ()
        refs += tuple(r for step in steps for r in kcompile.schedule_kernels(step, c_type))
    return tuple(dict.fromkeys(refs))


def compile_plans(dgraph: DeviceGraph, schedules, k: int, heads: int = 1,
                  dtype: str = dtypes.DEFAULT, workers: int | None = None) -> dict[str, tuple[float, str | None]]:
    """Build the kernels of every schedule that can run (k, heads) on `dgraph`, all at once on a
    thread pool. Returns schedule name -> (ms, error): ms is what building its kernels took (a
    kernel shared by several schedules counts for each), error the first failure's one line, or
    None. Schedules that cannot run are left out (prepare refuses them with the reason), and so
    are SpMM and SDDMM schedules on an int64-index graph (their kernels take int32)."""
    index = index_type(dgraph)
    wanted = {s.name: kernel_refs(s, k, index, dtype) for s in schedules
              if s.supports(k, heads) is None and (index == "int" or s.op == "attention")}
    records = kcompile.compile_kernels(r for refs in wanted.values() for r in refs)
    outcome = {}
    for name, refs in wanted.items():
        errors = [f"{r.expression}: {records[r].error}" for r in refs if records[r].error]
        outcome[name] = (sum(records[r].ms for r in refs), errors[0] if errors else None)
    return outcome
