"""The SDDMM schedule space: value lists and space rules, never copied kernels.

Families (their predicates, name expressions and table entries): sddmm_families.py.
"""
from __future__ import annotations

from .schedule import Schedule

THREADS = 256


# (G, V, P) for rowgroup: each covers K up to G*V*P and, by the predicates, down to ~G*V/4.
ROWGROUP_SHAPES = (
    (1, 1, 1), (2, 1, 1), (4, 1, 1), (8, 1, 1), (1, 2, 1),          # K 1..8, any K for V = 1
    (1, 4, 1), (2, 4, 1), (4, 4, 1), (8, 4, 1), (16, 4, 1), (32, 4, 1),  # K % 4 == 0 up to 128
    (16, 4, 2), (32, 4, 2),                                         # up to 128 / 256 in one group
    (32, 1, 2), (32, 1, 4), (32, 1, 8),                             # odd K up to 256
)
# Row chunking (skew): the shapes that matter on long rows.
CHUNKED_SHAPES = ((1, 1, 1), (4, 1, 1), (1, 4, 1), (4, 4, 1), (8, 4, 1), (32, 4, 1), (32, 4, 2))
ROW_CHUNK = 256
# (G, V, U) for the edge family.
EDGE_SHAPES = ((1, 1, 4), (4, 1, 4), (32, 1, 2), (1, 4, 2), (2, 4, 2), (4, 4, 2), (8, 4, 2), (32, 4, 2))
# 16-byte loads of the 2-byte types (8 halves per lane; float32 refuses them): appended after the
# float shapes so every older name keeps its place. rowgroup (G, 8, 1) holds K = 8G in registers.
HALF_ROWGROUP_SHAPES = ((2, 8, 1), (4, 8, 1), (8, 8, 1), (16, 8, 1), (32, 8, 1))
HALF_CHUNKED_SHAPES = ((8, 8, 1), (32, 8, 1))
HALF_EDGE_SHAPES = ((4, 8, 2), (8, 8, 2), (32, 8, 2))


def _unroll_for(v: int, p: int) -> int:
    # U edges' Y slices (U*V*P registers) stay in flight; keep that within ~32 registers.
    return 4 if v * p <= 8 else 2


def _rowgroup(shapes=ROWGROUP_SHAPES, chunked_shapes=CHUNKED_SHAPES) -> list[Schedule]:
    out = [Schedule("sddmm", "rowgroup", lanes=g, vec=v, threads=THREADS, tile=g * v * p,
                    unroll=_unroll_for(v, p)) for g, v, p in shapes]
    out += [Schedule("sddmm", "rowgroup", lanes=g, vec=v, threads=THREADS, tile=g * v * p, chunk=ROW_CHUNK,
                     unroll=_unroll_for(v, p)) for g, v, p in chunked_shapes]
    return out


def _edge(shapes=EDGE_SHAPES) -> list[Schedule]:
    return [Schedule("sddmm", "edge", lanes=g, vec=v, threads=THREADS, unroll=u) for g, v, u in shapes]


def check_space_rules(s: Schedule) -> None:
    s.validate()
    if s.split or s.reduce != "none":
        raise ValueError(f"{s.name}: SDDMM outputs are per edge; nothing to reduce")
    if s.family == "rowgroup" and (not s.tile or s.tile % (s.lanes * s.vec)):
        raise ValueError(f"{s.name}: a rowgroup tile is a positive multiple of lanes x vec")
    if s.family == "edge" and (s.tile or s.chunk):
        raise ValueError(f"{s.name}: the edge family has no tile or chunk")


SCHEDULES: tuple[Schedule, ...] = tuple(_rowgroup() + _edge() + _rowgroup(HALF_ROWGROUP_SHAPES, HALF_CHUNKED_SHAPES)
                                        + _edge(HALF_EDGE_SHAPES))
for _s in SCHEDULES:
    check_space_rules(_s)
