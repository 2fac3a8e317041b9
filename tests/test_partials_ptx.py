"""The heavy-row partial sums of the 16-byte half schedules move whole (CPU only; nvcc on PATH).

split/splitwarp (scratch rows) and fused_split (chunk partials) keep their partial sums in float32
whatever the value type, so a lane of a vec-8 half schedule moves 8 floats (32 bytes) of partials
per column group. A float vector helper that took V = 8 for a scalar moved one float of the eight:
light rows stayed right and every heavy row came out wrong. The PTX of each such kernel must move
its float partials only as 16-byte pieces: no scalar float store or L2-only (cg) float load.
"""
from __future__ import annotations

import re
import shutil

import pytest

from autosage_cli.dtypes import vector_bytes_fit
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")

SPLIT_FAMILIES = ("split", "splitwarp", "fused_split")
HALF_TYPES = ("float16", "bfloat16")
# A scalar float store (st.global.f32) or L2-only scalar float load (ld.global.cg.f32): in these
# kernels only partials are float in global memory and written or read through L2.
SCALAR_PARTIAL = re.compile(r"\b(st\.global\.f32|ld\.global\.cg\.f32)\b")
WHOLE_PARTIAL = re.compile(r"\b(st\.global\.v4\.f32|ld\.global\.cg\.v4\.f32)\b")
ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(")


def half_only_split_schedules() -> list:
    return [s for s in sched.all_schedules()
            if s.family in SPLIT_FAMILIES and vector_bytes_fit(s.vec, "float32") is not None]


def entries(ptx: str) -> dict[str, str]:
    """Each kernel's PTX body by mangled name."""
    starts = [(m.start(), m.group(1)) for m in ENTRY.finditer(ptx)]
    ends = [start for start, _ in starts[1:]] + [len(ptx)]
    return {name: ptx[start:end] for (start, name), end in zip(starts, ends)}


def test_every_split_family_has_half_schedules():
    assert {s.family for s in half_only_split_schedules()} == set(SPLIT_FAMILIES)
    reductions = {s.reduce for s in half_only_split_schedules() if s.family != "fused_split"}
    assert reductions == {"atomic", "twophase"}


@pytest.mark.parametrize("source_file", sorted({s.source_file for s in half_only_split_schedules()}))
def test_half_schedules_move_float_partials_in_16_byte_pieces(source_file):
    exprs = sorted({kcompile.schedule_kernels(s, dtype)[0].expression
                    for s in half_only_split_schedules() if s.source_file == source_file
                    for dtype in HALF_TYPES})
    kernels = entries(kcompile.nvcc_ptx(source_file, exprs))
    assert len(kernels) == len(exprs)
    bad = {name: sorted(set(SCALAR_PARTIAL.findall(body))) for name, body in kernels.items()
           if SCALAR_PARTIAL.search(body)}
    assert not bad, bad
    # and the partials are moved at all, two float4s per 8 columns
    assert all(len(WHOLE_PARTIAL.findall(body)) >= 2 for body in kernels.values())
