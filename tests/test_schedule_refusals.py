"""The refusals of the GPU schedule grids (tests/schedule_grids.py), on the CPU: a (schedule, width,
dtype) a schedule does not support is no GPU test case, so it is checked here instead. Each one
says why in a non-empty reason, and ops.prepare_native refuses it with that reason before it touches a
device (so a caller never launches a kernel the schedule cannot run). And no schedule falls out
of the GPU tests: every schedule runs in a grid."""
from __future__ import annotations

import pytest

from autosage_cli import ops
from autosage_cli.errors import AutosageError
from schedule_grids import GRIDS, HALF, HALF_ATTENTION, NATIVE, SPMM_SDDMM

REFUSING = [pytest.param(grid, s, id=f"{grid.name.replace(' ', '-')}-{s.name}")
            for grid in GRIDS for s in grid.schedules
            if any(r[0] is s for r in grid.refused())]


@pytest.mark.parametrize("grid,schedule", REFUSING)
def test_every_refusal_says_why_and_prepare_refuses_it(grid, schedule):
    problems = []
    for s, dtype, k, reason in grid.refused():
        if s is not schedule:
            continue
        if not reason.strip():
            problems.append(f"{dtype} K={k}: an empty reason")
            continue
        try:
            ops.prepare_native(None, s, k, grid.heads(s), dtype=dtype)   # refused before the device graph is read
            problems.append(f"{dtype} K={k}: prepared although refused ({reason})")
        except AutosageError as exc:
            if reason not in str(exc):
                problems.append(f"{dtype} K={k}: refused with {exc!s}, not its reason {reason!r}")
    assert not problems, f"{schedule.name}:\n" + "\n".join(problems)


def _runs(grid) -> set[str]:
    return {p.values[0].name for p in grid.supported()}


def test_every_spmm_and_sddmm_schedule_runs_in_a_gpu_grid():
    missing = [s.name for s in SPMM_SDDMM if s.name not in _runs(NATIVE) | _runs(HALF)]
    assert not missing, missing


def test_every_attention_layout_runs_in_the_half_grid():
    missing = [s.name for s in HALF_ATTENTION.schedules if s.name not in _runs(HALF_ATTENTION)]
    assert not missing, missing


def test_a_schedule_outside_the_widths_runs_at_its_smallest_supported_width():
    """spmm.vector with 2 sums a lane runs no width of the grid (1, 3, 4, 5, 32, ...): K=2 is its case."""
    narrow = next(s for s in NATIVE.schedules if s.name.startswith("spmm.vector") and ".k2." in s.name)
    assert [p.values[1] for p in NATIVE.supported(with_dtype=False) if p.values[0] is narrow] == [2]
