"""The SpMM kernel families: their predicates (None, or the reason a schedule cannot run a width),
their NVRTC name expressions and one `Family` entry each. The value lists live in spmm_space.
Hooks take a `Schedule` (kernels/schedule.py), named in annotations only: schedule.py imports this.

Families (one CUDA file each, except that both split families share spmm_split.cu):
  subwarp    G lanes per row, 32/G rows per warp (cuda/spmm_subwarp.cu). Short, even rows.
  warprow    a warp per row, 32/G edge slots of G lanes, (col, val) staged by shuffles
             (cuda/spmm_warprow.cu). G = 32 is GE-SpMM; tile = G*V*P > 0 splits K over grid.y.
  split      rows above `split` nonzeros cut into `chunk`-nonzero chunks, a warp each; light rows
             by sub-warp groups; one launch, the last chunk of a row combines its partials
             (reduce "atomic": atomics into a per-row scratch; "twophase": per-chunk partials summed
             in a fixed order, deterministic) (cuda/spmm_split.cu). Hubs among short rows
             (hub-200k, products-like).
  splitwarp  the same, light rows by a warp each. Many long rows (reddit-like).
  vector     small K only (tile = KMAX, one schedule per K band KMAX/2 < K <= KMAX): G lanes per
             row split the row's *edges* (CSR-vector), each lane keeps all K sums, the group sums
             them with shuffles (cuda/spmm_vector.cu). vec is 1: the kernel reads B rows as vectors
             itself when K == KMAX and B's alignment allows.
  parreduce  the vector family's row walk (G lanes on a row's nonzeros, KMAX sums per lane) by
             persistent groups striding over the rows longest first; for G < 32 the heavy rows
             (parreduce_heavy_threshold) are walked by a whole warp each first
             (cuda/spmm_parreduce.cu). Skewed graphs at K <= 8 (products-like).
"""
from __future__ import annotations

from .family import Family, first_reason

# A schedule whose lanes x vector width exceeds 4K leaves more than 3/4 of its lanes idle.
MAX_LANE_WASTE = 4
# More than this many feature passes per row re-read the row's indices too often to ever win.
MAX_FEATURE_PASSES = 64


# ------------------------------------------------------------------ predicates (None or a reason)

def vector_fits(s: Schedule, k: int) -> str | None:
    if k % s.vec:
        return f"K={k} is not a multiple of the vector width {s.vec}"
    return None


def lanes_used(s: Schedule, k: int) -> str | None:
    if s.lanes * s.vec > MAX_LANE_WASTE * k:
        return (f"{s.lanes} lanes x {s.vec} elements cover {s.lanes * s.vec} columns, more than "
                f"{MAX_LANE_WASTE}x K={k}: most lanes would idle")
    return None


def passes_bounded(s: Schedule, k: int) -> str | None:
    passes = -(-k // (s.lanes * s.vec))
    if passes > MAX_FEATURE_PASSES:
        return f"K={k} needs {passes} feature passes of {s.lanes * s.vec} columns (> {MAX_FEATURE_PASSES})"
    return None


def register_chunks_used(s: Schedule, k: int) -> str | None:
    """A feature tile of P chunks: refuse when a whole register chunk would hold no column."""
    if s.tile and s.tile - s.lanes * s.vec >= k:
        return f"feature tile {s.tile} leaves a whole chunk of {s.lanes * s.vec} columns idle at K={k}"
    return None


def vector_band(s: Schedule, k: int) -> str | None:
    """The vector family keeps KMAX = tile sums per lane: it serves KMAX/2 < K <= KMAX (a wider K
    does not fit, a narrower one is served by the next smaller KMAX with fewer registers)."""
    if k > s.tile:
        return f"K={k} exceeds the {s.tile} sums a lane keeps"
    if 2 * k <= s.tile:
        return f"K={k} leaves half of the {s.tile} sums idle (a smaller KMAX serves it)"
    return None


def supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    # heads do not matter: SpMM runs one head at a time (attention launches it per head).
    return first_reason(vector_fits(s, k), lanes_used(s, k), passes_bounded(s, k),
                         register_chunks_used(s, k))


def vector_supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    return vector_band(s, k)


# ------------------------------------------------------------------ name expressions

def feature_chunks(s: Schedule) -> int:
    """P: chunks of G*V columns a warprow lane holds; the tile is one pass of P chunks."""
    return s.tile // (s.lanes * s.vec) if s.tile else 1


def _cpp_bool(flag: bool) -> str:
    return "true" if flag else "false"


def _subwarp_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_subwarp<{dtype}, {s.lanes}, {s.vec}, {s.unroll}>"


def _warprow_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_warprow<{dtype}, {s.lanes}, {s.vec}, {s.unroll}, {feature_chunks(s)}>"


def _split_expr(s: Schedule, dtype: str) -> str:
    light_warp = s.family == "splitwarp"
    return (f"spmm_split<{dtype}, {s.lanes}, {s.vec}, {s.unroll}, {_cpp_bool(light_warp)}, "
            f"{_cpp_bool(s.reduce == 'twophase')}>")


def _vector_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_vector<{dtype}, {s.lanes}, {s.tile}, {s.unroll}>"


def _parreduce_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_parreduce<{dtype}, {s.lanes}, {s.tile}, {s.unroll}>"


# A parreduce row is heavy (walked by a whole warp) when a G-lane group would take more than this
# many steps of one edge per lane on it: beyond that a row of a narrow group outlasts the rows the
# other groups of its warp take meanwhile.
PARREDUCE_HEAVY_STEPS = 16


def parreduce_heavy_threshold(s: Schedule) -> int | None:
    """Rows with more nonzeros than this are walked by a warp each; None for G = 32 (every row
    already has a warp)."""
    return None if s.lanes >= 32 else PARREDUCE_HEAVY_STEPS * s.lanes


def _whole_warp(s: Schedule) -> int:
    return 32


# ------------------------------------------------------------------ the families

FAMILIES: dict[str, Family] = {
    "subwarp": Family(
        "spmm", "spmm_subwarp.cu", _subwarp_expr, supports,
        "lanes: G lanes per row (32/G rows per warp); vec: floats per lane per load; unroll: edges "
        "in flight; K > lanes x vec loops over feature chunks; no tile, split or chunk"),
    "warprow": Family(
        "spmm", "spmm_warprow.cu", _warprow_expr, supports,
        "a warp per row; lanes: G lanes per edge slot (32/G slots); vec: floats per load; unroll: "
        "staged edges in flight; tile: features per staging pass (P = tile / (lanes x vec) register "
        "chunks, one pass per grid.y block; 0: one chunk, all passes in one block)",
        _whole_warp),
    "split": Family(
        "spmm", "spmm_split.cu", _split_expr, supports,
        "rows above `split` nonzeros cut into `chunk`-nonzero chunks, a warp of 32/lanes edge slots "
        "each, partials combined by `reduce`; light rows: lanes per row (32/lanes rows per warp); "
        "vec: floats per load; unroll: edges in flight"),
    "splitwarp": Family(
        "spmm", "spmm_split.cu", _split_expr, supports,
        "as split, but a warp of 32/lanes edge slots per light row too",
        _whole_warp),
    "vector": Family(
        "spmm", "spmm_vector.cu", _vector_expr, vector_supports,
        "lanes: G lanes per row splitting its edges; tile: KMAX, the sums each lane keeps (serves "
        "KMAX/2 < K <= KMAX); unroll: edges per lane in flight; vec is 1 (the kernel vectorises "
        "itself when K == KMAX)"),
    "parreduce": Family(
        "spmm", "spmm_parreduce.cu", _parreduce_expr, vector_supports,
        f"lanes: G lanes per light row splitting its edges (rows above {PARREDUCE_HEAVY_STEPS} x G "
        "edges: a warp each); "
        "tile: KMAX, the sums each lane keeps (serves KMAX/2 < K <= KMAX); unroll: edges per lane "
        "in flight; persistent groups, rows longest first; vec is 1"),
}
