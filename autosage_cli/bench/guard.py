"""Failures of a whole case or graph as rows, so a benchmark run goes on and records them.

Running out of memory (host or GPU), a CUDA fault, or a graph or case that would not fit in memory
ends only the case (or graph) it happened in: each of its cases becomes one "failed"
autosage row with the reason, and the run continues with the next. A fault that leaves the CUDA
context unusable (an illegal address, a failed launch) stops the GPU work: every later case is
recorded as not run, with the fault as its reason, and `run_suite` raises the fault once everything
measured has been yielded, so the command exits with the CUDA fault's code after writing its files.
"""
from __future__ import annotations

from .. import budget, ops as op_specs
from ..environment import now_iso
from ..errors import (AutosageError, BudgetError, CudaFault, OutOfMemory, is_sticky_cuda_fault,
                      resource_error)
from .rows import Row


def failure_text(exc: BaseException) -> str | None:
    """The one-line reason for a failure a run survives (out of memory, a CUDA fault, a case that
    would not fit), or None for anything else: bad input stops the run as it always does, and a bug
    is not hidden in a row."""
    known = resource_error(exc)
    return str(known) if isinstance(known, (OutOfMemory, CudaFault, BudgetError)) else None


def failed_row(ctx, label: str, graph, case, reason: str) -> Row:
    """One autosage row, status "failed", for a case that did not run."""
    return Row(graph=label, n_rows=graph.n_rows if graph is not None else 0,
               nnz=graph.nnz if graph is not None else 0, op=case.op, k=case.k, heads=case.heads,
               dtype=case.dtype, backend="autosage", schedule="", decision="probe",
               commit=ctx.commit, gpu=ctx.gpu, timestamp=now_iso(), status="failed", error=reason,
               n_cols=graph.n_cols if graph is not None else 0, seed=ctx.options.seed,
               flush_l2=ctx.options.flush_l2)


def check_device_budget(toolkit, graph, case) -> None:
    """BudgetError when the case's estimated GPU memory exceeds what the device has free."""
    free_bytes = getattr(toolkit, "device_free_bytes", None)
    if free_bytes is None:
        return
    need = op_specs.device_bytes(case.op, graph.n_rows, graph.n_cols, graph.nnz, case.k, case.heads,
                                 case.dtype)
    budget.require_device(need, free_bytes(), f"{case.describe()} on this graph")


class FaultState:
    """Remembers the first fault that made the CUDA context unusable."""

    def __init__(self):
        self.fault: AutosageError | None = None

    def note(self, exc: BaseException) -> str:
        """The reason for a survivable failure (and whether the context is lost); re-raises a bug."""
        text = failure_text(exc)
        if text is None:
            raise exc
        if self.fault is None and is_sticky_cuda_fault(exc):
            self.fault = CudaFault(f"{text} (the benchmark stopped its GPU work here; the results "
                                   f"measured before it are written)")
        return text

    @property
    def lost(self) -> bool:
        return self.fault is not None

    def not_run(self) -> str:
        return f"not run: the CUDA context is unusable after an earlier fault ({self.fault})"
