"""The SDDMM schedule space: value lists and named predicates, never copied kernels.

Families:
  rowgroup   G lanes per row keep X[row] in registers (P chunks of G*V columns, so K <= tile =
             G*V*P) and walk the row's edges (cuda/sddmm_rowgroup.cu). chunk > 0 cuts every row
             into chunk-edge pieces, each its own group: hub rows spread out, and since outputs are
             per edge no reduction is needed.
  edge       a group of G lanes per U consecutive edges, row ids from a COO array built in prepare
             (cuda/sddmm_edge.cu): nnz-balanced whatever the degree skew, any K.
"""
from __future__ import annotations

from .schedule import Family, Schedule, register_family
from .spmm_space import lanes_used, vector_fits

THREADS = 256


def fits_registers(s: Schedule, k: int) -> str | None:
    if s.family == "rowgroup" and k > s.tile:
        return f"K={k} exceeds the {s.tile} columns this schedule holds in registers"
    return None


def register_chunks_used(s: Schedule, k: int) -> str | None:
    if s.family == "rowgroup" and s.tile - s.lanes * s.vec >= k:
        return f"{s.tile} register columns leave a whole chunk of {s.lanes * s.vec} idle at K={k}"
    return None


def supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    # heads do not matter: SDDMM runs one head at a time (attention launches it per head).
    for reason in (vector_fits(s, k), lanes_used(s, k), fits_registers(s, k), register_chunks_used(s, k)):
        if reason:
            return reason
    return None


def register_chunks(s: Schedule) -> int:
    """P: chunks of G*V columns each lane of a rowgroup schedule keeps of X[row]."""
    return s.tile // (s.lanes * s.vec)


def _rowgroup_expr(s: Schedule, dtype: str) -> str:
    return f"sddmm_rowgroup<{dtype}, {s.lanes}, {s.vec}, {register_chunks(s)}, {s.unroll}>"


def _edge_expr(s: Schedule, dtype: str) -> str:
    return f"sddmm_edge<{dtype}, {s.lanes}, {s.vec}, {s.unroll}>"


register_family("rowgroup", Family("sddmm_rowgroup.cu", _rowgroup_expr, supports))
register_family("edge", Family("sddmm_edge.cu", _edge_expr, supports))

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


def _unroll_for(v: int, p: int) -> int:
    # U edges' Y slices (U*V*P registers) stay in flight; keep that within ~32 registers.
    return 4 if v * p <= 8 else 2


def _rowgroup() -> list[Schedule]:
    out = [Schedule("sddmm", "rowgroup", lanes=g, vec=v, threads=THREADS, tile=g * v * p,
                    unroll=_unroll_for(v, p)) for g, v, p in ROWGROUP_SHAPES]
    out += [Schedule("sddmm", "rowgroup", lanes=g, vec=v, threads=THREADS, tile=g * v * p, chunk=ROW_CHUNK,
                     unroll=_unroll_for(v, p)) for g, v, p in CHUNKED_SHAPES]
    return out


def _edge() -> list[Schedule]:
    return [Schedule("sddmm", "edge", lanes=g, vec=v, threads=THREADS, unroll=u) for g, v, u in EDGE_SHAPES]


def check_space_rules(s: Schedule) -> None:
    s.validate()
    if s.split or s.reduce != "none":
        raise ValueError(f"{s.name}: SDDMM outputs are per edge; nothing to reduce")
    if s.family == "rowgroup" and (not s.tile or s.tile % (s.lanes * s.vec)):
        raise ValueError(f"{s.name}: a rowgroup tile is a positive multiple of lanes x vec")
    if s.family == "edge" and (s.tile or s.chunk):
        raise ValueError(f"{s.name}: the edge family has no tile or chunk")


SCHEDULES: tuple[Schedule, ...] = tuple(_rowgroup() + _edge())
for _s in SCHEDULES:
    check_space_rules(_s)
