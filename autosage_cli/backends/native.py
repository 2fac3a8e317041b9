"""What the native plans of every op share: the kernels a plan of a schedule launches and their
parallel build. The plans themselves live in `native_X.py` (native_spmm, native_sddmm,
native_attention), each with the same `prepare(dgraph, schedule, k, heads, scale, dtype, **options)`
signature; the op specs name them (`OpSpec.prepare_native`) and `ops.prepare_native` is the one way
to them, which refuses a schedule that cannot run width k with its reason (Schedule.supports)
before anything is compiled.

`compile_plans(dgraph, schedules, k, heads)` builds, in parallel, the kernels the plans of several
schedules will launch and the groups of autosage's helper kernels a tune of their op launches
(kernels/util.py; the tuner calls it before it makes its inputs and prepares its candidates one by
one), and
`kernel_refs` lists them for one schedule.
"""
from __future__ import annotations

from .. import dtypes
from ..kernels import compile as kcompile
from ..kernels.schedule import Schedule, family_of
from .attention_common import index_type
from .base import DeviceGraph


def kernel_refs(schedule: Schedule, k: int, index: str = "int",
                dtype: str = dtypes.DEFAULT) -> tuple[kcompile.KernelRef, ...]:
    """Every kernel instantiation a plan of `schedule` at width k with `dtype` operands launches:
    its own, plus, for the unfused attention pipeline, those of the SDDMM and SpMM sub-step
    schedules it picks for d = k in `dtype` (none when no sub-step fits: prepare then says why)."""
    c_type = dtypes.c_type(dtype)
    refs = kcompile.schedule_kernels(schedule, c_type, index)
    if family_of(schedule.family).substeps:   # attention's pipeline: its sub-steps' kernels too
        from .attention_unfused import substep_schedules

        try:
            steps = substep_schedules(schedule, k, dtype=dtype)
        except ValueError:
            steps = ()
        refs += tuple(r for step in steps for r in kcompile.schedule_kernels(step, c_type))
    return tuple(dict.fromkeys(refs))


def takes_wide_indices(schedule: Schedule) -> bool:
    """Whether the schedule's kernels are instantiated for 64-bit indices too (its family entry
    says: the attention families are; the SpMM and SDDMM kernels take int32)."""
    return family_of(schedule.family).wide_indices


def compile_plans(dgraph: DeviceGraph, schedules, k: int, heads: int = 1,
                  dtype: str = dtypes.DEFAULT, workers: int | None = None,
                  helper_groups=None, helper_ops=None, refs_of=None) -> dict[str, tuple[float, str | None]]:
    """Build the kernels of every schedule that can run (k, heads) on `dgraph`, all at once on a
    thread pool. Returns schedule name -> (ms, error): ms is what building its kernels took (a
    kernel shared by several schedules counts for each), error the first failure's one line, or
    None. Schedules that cannot run are left out (prepare refuses them with the reason), and so
    are SpMM and SDDMM schedules on an int64-index graph (their kernels take int32).
    `helper_groups` maps an op to its own helper groups (its spec's, `ops.helper_groups`);
    `helper_ops` are the ops whose tune helpers are built (default: the schedules' ops), and
    `refs_of(schedule, k, index, dtype)` the kernels of each plan (default: `kernel_refs`; an op
    running another op's schedules with a kernel variant: ops.kernel_refs_of)."""
    from ..kernels import util

    index = index_type(dgraph)
    wanted = {s.name: (refs_of or kernel_refs)(s, k, index, dtype) for s in schedules
              if s.supports(k, heads, dtype) is None and (index == "int" or takes_wide_indices(s))}
    # the helper kernels the tune launches (inputs, poisoning, verification, its vendors' steps)
    # build on the same pool; their time is in the wall time of this call, not in any candidate's
    own = helper_groups or {}
    helpers = [m for op in dict.fromkeys(helper_ops or [s.op for s in schedules])
               for m in util.tune_modules(op, dtype, index, own.get(op, ()))]
    records = kcompile.compile_kernels(helpers + [r for refs in wanted.values() for r in refs])
    outcome = {}
    for name, refs in wanted.items():
        errors = [f"{r.expression}: {records[r].error}" for r in refs if records[r].error]
        outcome[name] = (sum(records[r].ms for r in refs), errors[0] if errors else None)
    return outcome
