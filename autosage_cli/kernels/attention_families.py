"""The attention kernel families: their predicates, NVRTC name expressions and one `Family` entry
each. The value lists, and the other kernels a schedule launches (combine, heavy-row softmax), live
in attention_space. Hooks take a `Schedule` (kernels/schedule.py), named in annotations only:
schedule.py imports this.

Families (cuda/attention_fused.cu holds both fused families, cuda/attention_softmax.cu the softmax
of the unfused pipeline):
  fused        one group of `lanes` lanes per (row, head) over all rows, online softmax in registers
               (attention_fused_rows). Even degree distributions.
  fused_split  rows above `split` edges cut into `chunk`-edge chunks; chunks and light rows in one
               launch, chunk partials (m, l, acc) merged by attention_combine (reduce "twophase",
               deterministic). Skewed graphs (reddit-like max degree 21.7k).
  unfused      SDDMM -> row softmax -> SpMM per head. The schedule's knobs describe the softmax:
               `lanes` per (row, head), `threads` per block of the block-per-row path taken by rows
               above `split` edges (chunk = split, reduce "twophase": warp partials merged in shared
               memory). The SDDMM and SpMM sub-steps are native schedules chosen at prepare
               (backends/attention_unfused.substep_schedules).

Scores of the fused families: "dot" (scale * <Q[i,h], K[j,h]>, the families' own kernels) and
"additive" (LeakyReLU(a_dst[i,h] + a_src[j,h]), GAT: attention_additive_rows / _segments in the same
file, chosen by the plan, not by the schedule: the knobs below mean the same for both).

Knobs of the fused families (template parameters of attention_fused.cu):
  lanes x vec      lanes of a group and floats per load (vec 4: 16-byte loads of K and V rows);
  tile             features one group holds in registers: lanes x vec x NV, NV vectors per lane.
                   d must fit in one tile (a group never re-walks a row); d % vec == 0;
  unroll           E, edges per step (2 E NV loads in flight per lane, E interleaved reductions);
  heads_per_block  heads whose groups form one team sharing the row's staged (column, value) pairs:
                   team width W = lanes x heads_per_block <= 32 lanes; needs H % heads_per_block == 0.
"""
from __future__ import annotations

from .family import Family, first_reason
from ..dtypes import info as dtype_info

FUSED_SOURCE = "attention_fused.cu"
SOFTMAX_SOURCE = "attention_softmax.cu"


# ------------------------------------------------------------------ predicates (None or a reason)

def vectors_per_lane(s: Schedule) -> int:
    """NV: vectors of `vec` floats one lane holds (the tile is lanes x vec x NV features)."""
    return max(1, s.tile // (s.lanes * s.vec))


def team_width(s: Schedule) -> int:
    return s.lanes * s.heads_per_block


def vector_fits(s: Schedule, d: int) -> str | None:
    if d % s.vec:
        return f"d={d} is not a multiple of the vector width {s.vec}"
    return None


def tile_fits(s: Schedule, d: int) -> str | None:
    """d must fit in the registers of one group, and the smallest NV that holds it is the one used
    (a larger NV only costs registers: another schedule holds d better)."""
    width = s.lanes * s.vec
    need = -(-d // width)
    nv = vectors_per_lane(s)
    if need > nv:
        return f"d={d} exceeds the {s.tile} features a group of {s.lanes}x{s.vec}x{nv} holds"
    if nv > 1 and need <= nv // 2:
        return f"d={d} fits in {need} vectors per lane; {nv} would waste registers"
    if nv == 1 and 2 * d <= width:
        return f"{s.lanes} lanes x {s.vec} cover {width} features, more than twice d={d}: lanes would idle"
    return None


def heads_fit(s: Schedule, heads: int) -> str | None:
    if heads % s.heads_per_block:
        return f"H={heads} is not a multiple of heads_per_block={s.heads_per_block}"
    return None


def fused_supports(s: Schedule, d: int, heads: int = 1) -> str | None:
    if heads < 1:
        return f"heads must be >= 1, got {heads}"
    return first_reason(vector_fits(s, d), tile_fits(s, d), heads_fit(s, heads))


def unfused_supports(s: Schedule, d: int, heads: int = 1) -> str | None:
    """The softmax takes any d; the sub-steps are checked when they are chosen at prepare (any d
    some native SDDMM and SpMM schedule supports)."""
    if heads < 1:
        return f"heads must be >= 1, got {heads}"
    return None


# ------------------------------------------------------------------ name expressions

def fused_expression(s: Schedule, dtype: str = "float", index: str = "int") -> str:
    dtype = dtype_info(dtype).c_type
    kernel = "attention_fused_rows" if s.family == "fused" else "attention_fused_segments"
    return (f"{kernel}<{dtype}, {index}, {s.lanes}, {s.vec}, {vectors_per_lane(s)}, {s.unroll}, "
            f"{team_width(s)}>")


def scores_type_argument(dtype: str) -> str:
    """The softmax kernels' trailing scores-type argument: none for float (its default, so the
    float32 expressions read `<index, lanes>`), else the C++ type."""
    c_type = dtype_info(dtype).c_type
    return "" if c_type == "float" else f", {c_type}"


def additive_expression(s: Schedule, dtype: str = "float", index: str = "int") -> str:
    """The kernel of a fused or fused_split schedule with the additive (GAT) score
    LeakyReLU(a_dst[i] + a_src[j]): the same knobs and template parameters as the dot-product one."""
    kernel = "attention_additive_rows" if s.family == "fused" else "attention_additive_segments"
    return (f"{kernel}<{dtype_info(dtype).c_type}, {index}, {s.lanes}, {s.vec}, {vectors_per_lane(s)}, "
            f"{s.unroll}, {team_width(s)}>")


def additive_stats_expression(index: str = "int") -> str:
    """The kernel that merges heavy rows' chunk statistics (fused_split, additive score)."""
    return f"attention_additive_stats<{index}>"


def softmax_expression(s: Schedule, index: str = "int", dtype: str = "float") -> str:
    return f"attention_softmax_rows<{index}, {s.lanes}{scores_type_argument(dtype)}>"


# ------------------------------------------------------------------ the families

FAMILIES: dict[str, Family] = {
    "fused": Family(
        "attention", FUSED_SOURCE, lambda s, dtype: fused_expression(s, dtype), fused_supports,
        "lanes: lanes per (row, head) group; vec: floats per load; tile: d held in registers "
        "(lanes x vec x NV); unroll: E edges per step; heads_per_block: heads whose groups share "
        "the row's staged indices (a team of lanes x heads_per_block <= 32 lanes)"),
    "fused_split": Family(
        "attention", FUSED_SOURCE, lambda s, dtype: fused_expression(s, dtype), fused_supports,
        "as fused, plus: rows above `split` edges cut into `chunk`-edge chunks whose partial "
        "softmax states are merged two-phase (reduce)"),
    "unfused": Family(
        "attention", SOFTMAX_SOURCE, lambda s, dtype: softmax_expression(s, dtype=dtype), unfused_supports,
        "the row softmax of SDDMM -> softmax -> SpMM: lanes per (row, head); rows above `split` "
        "edges (chunk = split) take a block of `threads` threads; the sub-steps are native "
        "schedules chosen at prepare",
        cost="unfused"),
}
