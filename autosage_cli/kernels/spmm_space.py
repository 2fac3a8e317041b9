"""The SpMM schedule space: value lists and named predicates, never copied kernels.

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

Why these values (H200 measurements of the first kernel round): a group of G lanes x V floats per
row beat the best cuSPARSE algorithm 1.3-2.25x on a uniform graph when G*V matched K, and lost
5-60x on power-law graphs (one group per hub row), hence the split families; G < 32 edge slots in
warprow put a whole warp on one long row when K is too small to occupy 32 lanes with features.
"""
from __future__ import annotations

from itertools import product

from .schedule import Family, Schedule, register_family

THREADS = 256
LANES = (1, 2, 4, 8, 16, 32)
VECS = (1, 2, 4)
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


def _first_reason(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


def supports(s: Schedule, k: int, heads: int = 1) -> str | None:
    # heads do not matter: SpMM runs one head at a time (attention launches it per head).
    return _first_reason(vector_fits(s, k), lanes_used(s, k), passes_bounded(s, k),
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


def _whole_warp(s: Schedule) -> int:
    return 32


register_family("subwarp", Family("spmm_subwarp.cu", _subwarp_expr, supports))
register_family("warprow", Family("spmm_warprow.cu", _warprow_expr, supports, _whole_warp))
register_family("split", Family("spmm_split.cu", _split_expr, supports))
register_family("splitwarp", Family("spmm_split.cu", _split_expr, supports, _whole_warp))
register_family("vector", Family("spmm_vector.cu", _vector_expr, vector_supports))


# ------------------------------------------------------------------ the space

def _subwarp() -> list[Schedule]:
    out = []
    for g, v in product(LANES, VECS):
        out.append(Schedule("spmm", "subwarp", lanes=g, vec=v, threads=THREADS, unroll=4))
        # Narrow groups (tiny K) do little per edge: more edges in flight hide the gather latency.
        if g * v <= 4:
            out.append(Schedule("spmm", "subwarp", lanes=g, vec=v, threads=THREADS, unroll=8))
    return out


def _warprow() -> list[Schedule]:
    out = []
    # Edge-sliced warps: 32/G slots on one row; for long rows at small and medium K.
    for g, v in product((1, 2, 4, 8, 16), (1, 4)):
        out.append(Schedule("spmm", "warprow", lanes=g, vec=v, threads=THREADS, unroll=4))
    # GE-SpMM: all 32 lanes on features, the whole K per staging pass or a tile per grid.y block.
    for v in VECS:
        out.append(Schedule("spmm", "warprow", lanes=32, vec=v, threads=THREADS, unroll=4))
    out.append(Schedule("spmm", "warprow", lanes=32, vec=4, threads=THREADS, tile=128, unroll=4))
    # Two register chunks (P = 2): K = 256 in one staging pass; fewer edges in flight (registers).
    out.append(Schedule("spmm", "warprow", lanes=32, vec=4, threads=THREADS, tile=256, unroll=2))
    return out


# (G, V) pairs for the split families: one per K regime, G*V ~ K up to 128 columns per pass.
SPLIT_SHAPES = ((1, 1), (2, 1), (1, 4), (2, 4), (4, 4), (8, 4), (16, 4), (32, 4), (32, 1))
SPLITWARP_SHAPES = ((1, 1), (1, 4), (4, 4), (8, 4), (32, 4))
DETERMINISTIC_SHAPES = ((1, 1), (4, 4), (32, 4))


# The split variants as data: (family, shapes, split threshold, chunk, reduction).
# - "split": light rows by groups. hub-200k has 4 hubs of 30k among rows of ~0.5 edges; any row
#   above 256 nonzeros is spread over 256-nonzero chunks (deterministic variants: 1024/1024).
# - "splitwarp": light rows by warps. reddit-like rows are mostly hundreds to a few thousand long
#   (q99 3805), a warp each; only the ~1% above 2048 are chunked.
SPLIT_VARIANTS = (
    ("split", SPLIT_SHAPES, 256, 256, "atomic"),
    ("split", DETERMINISTIC_SHAPES, 1024, 1024, "twophase"),
    ("splitwarp", SPLITWARP_SHAPES, 2048, 512, "atomic"),
    ("splitwarp", DETERMINISTIC_SHAPES, 2048, 1024, "twophase"),
)


def _split() -> list[Schedule]:
    return [Schedule("spmm", family, lanes=g, vec=v, threads=THREADS, split=split, chunk=chunk,
                     reduce=reduce, unroll=4)
            for family, shapes, split, chunk, reduce in SPLIT_VARIANTS for g, v in shapes]


VECTOR_KMAX = (1, 2, 4, 8)
VECTOR_LANES = (4, 8, 16, 32)


def _vector() -> list[Schedule]:
    """Edge-parallel rows at K <= 8 (H200: at K <= 4 the feature-parallel families read the
    index stream through 16-32 narrow streams per warp, 0.9 TB/s effective on products-like K=2).
    Per K band: a warp per row (G = 32: long rows, reddit-like q50 230) and G = 8 (products-like
    q50 26: 32 lanes would mostly idle), both with 4 edges per lane in flight; G = 16 and G = 4 in
    between and below; U = 8 for a warp per row at K <= 2 (little work per edge, more gathers in
    flight), U = 2 where KMAX = 8 sums per edge already keep registers busy."""
    out = []
    for kmax in VECTOR_KMAX:
        lanes = (32, 16, 8, 4)
        unrolls = (2,) if kmax == 8 else (4,)
        for g, u in product(lanes, unrolls):
            out.append(Schedule("spmm", "vector", lanes=g, vec=1, threads=THREADS, tile=kmax, unroll=u))
        if kmax <= 2:
            out.append(Schedule("spmm", "vector", lanes=32, vec=1, threads=THREADS, tile=kmax, unroll=8))
            out.append(Schedule("spmm", "vector", lanes=8, vec=1, threads=THREADS, tile=kmax, unroll=2))
        if kmax == 8:
            out.append(Schedule("spmm", "vector", lanes=32, vec=1, threads=THREADS, tile=kmax, unroll=4))
    # 512-thread blocks: more rows per block for the short-row regime.
    out.append(Schedule("spmm", "vector", lanes=8, vec=1, threads=512, tile=4, unroll=4))
    return out


def check_space_rules(s: Schedule) -> None:
    """Family rules beyond Schedule.validate(); raises ValueError."""
    s.validate()
    if s.family in ("subwarp", "split", "splitwarp") and s.tile:
        raise ValueError(f"{s.name}: family {s.family} has no feature tile")
    if s.family == "warprow" and s.tile and (s.tile % (s.lanes * s.vec)
                                            or feature_chunks(s) not in (1, 2, 4)):
        raise ValueError(f"{s.name}: a warprow tile must be 1, 2 or 4 chunks of lanes x vec")
    if s.family in ("split", "splitwarp") and (not s.split or s.reduce == "none"):
        raise ValueError(f"{s.name}: split families need split > 0 and a reduction")
    if s.family in ("subwarp", "warprow", "vector") and (s.split or s.chunk):
        raise ValueError(f"{s.name}: family {s.family} does not split rows")
    if s.family == "vector" and (s.tile not in VECTOR_KMAX or s.lanes not in VECTOR_LANES
                                 or s.vec != 1 or s.unroll not in (2, 4, 8)):
        raise ValueError(f"{s.name}: a vector schedule needs tile (KMAX) in {VECTOR_KMAX}, lanes in "
                         f"{VECTOR_LANES}, vec 1 and unroll 2, 4 or 8")


SCHEDULES: tuple[Schedule, ...] = tuple(_subwarp() + _warprow() + _split() + _vector())
for _s in SCHEDULES:
    check_space_rules(_s)
