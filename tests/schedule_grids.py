"""The (schedule, width, dtype) grids of the GPU schedule tests, parametrised over what each
schedule supports: a case a schedule refuses is not a GPU test case (it could only skip, and it
did, 3,800 times). The refusals are tests of their own, on the CPU (tests/test_schedule_refusals.py):
every refused case says why, and ops.prepare_native refuses it with that reason.

A grid is (schedules, widths, dtypes, heads): `heads(schedule)` is the head count a case runs with.
A schedule that runs none of the grid's widths in a dtype (a vector schedule of 2 sums a lane, a
fused attention group of 16 features) gets its smallest supported width below FILL_LIMIT instead,
so every schedule runs in every grid where it runs at all.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import pytest

from autosage_cli.kernels.schedule import Schedule, registry

FILL_LIMIT = 1025


@dataclass(frozen=True)
class Grid:
    name: str
    schedules: tuple[Schedule, ...]
    widths: tuple[int, ...]
    dtypes: tuple[str, ...]
    heads: Callable[[Schedule], int] = lambda s: 1

    @functools.cached_property
    def _cases(self) -> tuple:
        return tuple(self._each_case())

    def cases(self):
        """(schedule, dtype, width, reason): every case of the grid, reason None where supported,
        then the fill case of a schedule that runs none of the widths in that dtype."""
        return self._cases

    def _each_case(self):
        for s in self.schedules:
            for dtype in self.dtypes:
                reasons = [(k, s.supports(k, self.heads(s), dtype)) for k in self.widths]
                yield from ((s, dtype, k, reason) for k, reason in reasons)
                if all(reason is not None for _, reason in reasons):
                    fill = next((k for k in range(1, FILL_LIMIT) if k not in self.widths
                                 and s.supports(k, self.heads(s), dtype) is None), None)
                    if fill is not None:
                        yield s, dtype, fill, None

    def supported(self, with_dtype: bool = True) -> list:
        """The supported cases as pytest params (schedule, dtype, width), or (schedule, width)
        without the dtype, with the ids the stacked parametrisation gave them."""
        params = []
        for s, dtype, k, reason in self.cases():
            if reason is None:
                values = (s, dtype, k) if with_dtype else (s, k)
                params.append(pytest.param(*values, id="-".join([s.name, *([dtype] if with_dtype else []), str(k)])))
        return params

    def refused(self) -> list[tuple]:
        return [(s, dtype, k, reason) for s, dtype, k, reason in self.cases() if reason is not None]


def attention_schedules() -> tuple[Schedule, ...]:
    """One attention schedule per family, vector width, tile and vectors per lane (NV): each NV is
    its own register layout of the state and of fused_split's chunk partials."""
    from autosage_cli.kernels.attention_families import vectors_per_lane

    chosen = {}
    for s in registry("attention"):
        chosen.setdefault((s.family, s.vec, s.tile, vectors_per_lane(s)), s)
    return tuple(chosen.values())


SPMM_SDDMM = tuple(registry("spmm") + registry("sddmm"))
# tests/test_native_gpu.py: every SpMM and SDDMM schedule in float32
NATIVE = Grid("native float32", SPMM_SDDMM, (1, 3, 4, 5, 32, 33, 64, 127, 256), ("float32",))
# tests/test_half_gpu.py: the same schedules in the 2-byte types, and attention in them with two
# head blocks (heads = 2 x heads_per_block)
HALF = Grid("native half", SPMM_SDDMM, (1, 3, 4, 5, 8, 33, 64, 127, 256), ("float16", "bfloat16"))
HALF_ATTENTION = Grid("attention half", attention_schedules(), (1, 3, 4, 5, 8, 32, 64, 127, 128, 256),
                      ("float16", "bfloat16"), heads=lambda s: 2 * s.heads_per_block)
GRIDS = (NATIVE, HALF, HALF_ATTENTION)
