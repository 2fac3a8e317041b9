"""The SDDMM kernel families: their predicates, NVRTC name expressions and one `Family` entry each.
The value lists live in sddmm_space. Hooks take a `Schedule` (kernels/schedule.py), named in
annotations only: schedule.py imports this.

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
    if s.family == "rowgroup" and k > s.tile:
        return f"K={k} exceeds the {s.tile} columns this schedule holds in registers"
    return None


def register_chunks_used(s: Schedule, k: int) -> str | None:
    if s.family == "rowgroup" and s.tile - s.lanes * s.vec >= k:
        return f"{s.tile} register columns leave a whole chunk of {s.lanes * s.vec} idle at K={k}"
    return None


def supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    # heads do not matter: SDDMM runs one head at a time (attention launches it per head).
    return first_reason(vector_fits(s, k), lanes_used(s, k), fits_registers(s, k),
                        register_chunks_used(s, k))


def register_chunks(s: Schedule) -> int:
    """P: chunks of G*V columns each lane of a rowgroup schedule keeps of X[row]."""
    return s.tile // (s.lanes * s.vec)


def _rowgroup_expr(s: Schedule, dtype: str) -> str:
    return f"sddmm_rowgroup<{dtype}, {s.lanes}, {s.vec}, {register_chunks(s)}, {s.unroll}>"


def _edge_expr(s: Schedule, dtype: str) -> str:
    return f"sddmm_edge<{dtype}, {s.lanes}, {s.vec}, {s.unroll}>"


# ------------------------------------------------------------------ the families

FAMILIES: dict[str, Family] = {
    "rowgroup": Family(
        "sddmm", "sddmm_rowgroup.cu", _rowgroup_expr, supports,
        "lanes: G lanes per row (or row chunk) holding X[row]; vec: floats per load; tile: K held in "
        "registers (G x V x P, so K <= tile); chunk: edges per row piece (0: whole rows); unroll: "
        "edges in flight"),
    "edge": Family(
        "sddmm", "sddmm_edge.cu", _edge_expr, supports,
        "lanes: G lanes per group; vec: floats per load; unroll: U consecutive edges per group; any "
        "K (loops over lanes x vec column chunks); no tile or chunk",
        cost="edges"),
}
