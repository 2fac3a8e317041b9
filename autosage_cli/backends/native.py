"""The native backend: `prepare(dgraph, schedule, k, heads=1, scale=None) -> Plan` for our kernels.

Dispatches on schedule.op: "spmm" to native_spmm, "sddmm" to native_sddmm, "attention" to
native_attention (imported only when asked for). `schedule` is a Schedule or a registered name.
A schedule that cannot run width k says why (Schedule.supports) and is refused here with that
reason, before anything is compiled; so is an int64-index graph (the kernels take int32).
"""
from __future__ import annotations

from ..errors import AutosageError
from ..kernels.schedule import Schedule, get
from .base import DeviceGraph, Plan


def prepare(dgraph: DeviceGraph, schedule: Schedule | str, k: int, heads: int = 1,
            scale: float | None = None, **attention_options) -> Plan:
    """A prepared native plan. `attention_options` (e.g. use_values, substeps) go to
    native_attention.prepare and are refused for the other ops."""
    if isinstance(schedule, str):
        schedule = get(schedule)
    reason = schedule.supports(k, heads)
    if reason:
        raise AutosageError(f"{schedule.name} cannot run K={k}: {reason}")
    if attention_options and schedule.op != "attention":
        raise AutosageError(f"options {sorted(attention_options)} apply to attention only")
    if schedule.op == "spmm":
        if heads != 1:
            raise AutosageError(f"spmm runs one head; got heads={heads}")
        from . import native_spmm

        return native_spmm.prepare(dgraph, schedule, k)
    if schedule.op == "sddmm":
        if heads != 1:
            raise AutosageError(f"sddmm runs one head; got heads={heads}")
        from . import native_sddmm

        return native_sddmm.prepare(dgraph, schedule, k, scale)
    if schedule.op == "attention":
        from .native_attention import prepare as prepare_attention

        return prepare_attention(dgraph, schedule, k, heads, scale, **attention_options)
    raise AutosageError(f"no native backend for op {schedule.op!r}")
