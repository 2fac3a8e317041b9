"""The SDDMM kernel families, each at home in its `Family` entry: predicates, NVRTC name
expression, schedules (value lists, in a fixed order), space rules and cost model; kernels/schedule.py
joins their schedules. Hooks take a `Schedule` (kernels/schedule.py), named in annotations only:
schedule.py imports this.

Families:
  rowgroup   G lanes per row keep X[row] in registers (P chunks of G*V columns, so K <= tile =
             G*V*P) and walk the row's edges (cuda/sddmm_rowgroup.cu). chunk > 0 cuts every row
             into chunk-edge pieces, each its own group: hub rows spread out, and since outputs are
             per edge no reduction is needed.
  edge       a group of G lanes per U consecutive edges, row ids from a COO array built in prepare
             (cuda/sddmm_edge.cu): nnz-balanced whatever the degree skew, any K.
"""
from __future__ import annotations

from .family import Family, first_reason
from .spmm_families import lanes_used, vector_fits


def fits_registers(s: Schedule, k: int) -> str | None:
    if k > s.tile:
        return f"K={k} exceeds the {s.tile} columns this schedule holds in registers"
    return None


def register_chunks_used(s: Schedule, k: int) -> str | None:
    if s.tile - s.lanes * s.vec >= k:
        return f"{s.tile} register columns leave a whole chunk of {s.lanes * s.vec} idle at K={k}"
    return None


def supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    """What every SDDMM family needs. Heads do not matter: SDDMM runs one head at a time
    (attention launches it per head)."""
    return first_reason(vector_fits(s, k), lanes_used(s, k))


def rowgroup_supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    """rowgroup holds X[row] in registers: K must fit its tile without a whole idle chunk."""
    return first_reason(supports(s, k, heads), fits_registers(s, k), register_chunks_used(s, k))


def register_chunks(s: Schedule) -> int:
    """P: chunks of G*V columns each lane of a rowgroup schedule keeps of X[row]."""
    return s.tile // (s.lanes * s.vec)


def _rowgroup_expr(s: Schedule, dtype: str) -> str:
    return f"sddmm_rowgroup<{dtype}, {s.lanes}, {s.vec}, {register_chunks(s)}, {s.unroll}>"


def _edge_expr(s: Schedule, dtype: str) -> str:
    return f"sddmm_edge<{dtype}, {s.lanes}, {s.vec}, {s.unroll}>"


# ------------------------------------------------------------------ the space, per family
# Each generator takes `make(**knobs)`, a Schedule constructor of its family.

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
# 16-byte loads of the 2-byte types (8 halves per lane; float32 refuses them), placed after every
# family's float shapes so every older name keeps its place. rowgroup (G, 8, 1) holds K = 8G.
HALF_ROWGROUP_SHAPES = ((2, 8, 1), (4, 8, 1), (8, 8, 1), (16, 8, 1), (32, 8, 1))
HALF_CHUNKED_SHAPES = ((8, 8, 1), (32, 8, 1))
HALF_EDGE_SHAPES = ((4, 8, 2), (8, 8, 2), (32, 8, 2))


def _unroll_for(v: int, p: int) -> int:
    # U edges' Y slices (U*V*P registers) stay in flight; keep that within ~32 registers.
    return 4 if v * p <= 8 else 2


def _rowgroup_space(shapes, chunked_shapes):
    def space(make) -> list:
        out = [make(lanes=g, vec=v, threads=THREADS, tile=g * v * p, unroll=_unroll_for(v, p))
               for g, v, p in shapes]
        out += [make(lanes=g, vec=v, threads=THREADS, tile=g * v * p, chunk=ROW_CHUNK,
                     unroll=_unroll_for(v, p)) for g, v, p in chunked_shapes]
        return out
    return space


def _edge_space(shapes):
    return lambda make: [make(lanes=g, vec=v, threads=THREADS, unroll=u) for g, v, u in shapes]


# ------------------------------------------------------------------ space rules (None or a reason)

def _nothing_to_reduce(s: Schedule) -> str | None:
    return "SDDMM outputs are per edge; nothing to reduce" if s.split or s.reduce != "none" else None


def _rowgroup_rules(s: Schedule) -> str | None:
    bad_tile = not s.tile or s.tile % (s.lanes * s.vec)
    return first_reason(_nothing_to_reduce(s),
                        "a rowgroup tile is a positive multiple of lanes x vec" if bad_tile else None)


def _edge_rules(s: Schedule) -> str | None:
    return first_reason(_nothing_to_reduce(s),
                        "the edge family has no tile or chunk" if s.tile or s.chunk else None)


# ------------------------------------------------------------------ the families

FAMILIES: dict[str, Family] = {
    "rowgroup": Family(
        "sddmm", "sddmm_rowgroup.cu", _rowgroup_expr, rowgroup_supports,
        "lanes: G lanes per row (or row chunk) holding X[row]; vec: floats per load; tile: K held in "
        "registers (G x V x P, so K <= tile); chunk: edges per row piece (0: whole rows); unroll: "
        "edges in flight",
        schedules=_rowgroup_space(ROWGROUP_SHAPES, CHUNKED_SHAPES),
        half_schedules=_rowgroup_space(HALF_ROWGROUP_SHAPES, HALF_CHUNKED_SHAPES),
        space_rules=_rowgroup_rules, host_work_lists=lambda s: bool(s.chunk)),
    "edge": Family(
        "sddmm", "sddmm_edge.cu", _edge_expr, supports,
        "lanes: G lanes per group; vec: floats per load; unroll: U consecutive edges per group; any "
        "K (loops over lanes x vec column chunks); no tile or chunk",
        schedules=_edge_space(EDGE_SHAPES), half_schedules=_edge_space(HALF_EDGE_SHAPES),
        space_rules=_edge_rules, cost="edges", plan="edges"),
}
