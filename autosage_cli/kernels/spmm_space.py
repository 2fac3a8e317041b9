"""The SpMM schedule space: value lists and space rules, never copied kernels.

Families (their predicates, name expressions and table entries): spmm_families.py.

Why these values (H200 measurements of the first kernel round): a group of G lanes x V floats per
row beat the best cuSPARSE algorithm 1.3-2.25x on a uniform graph when G*V matched K, and lost
5-60x on power-law graphs (one group per hub row), hence the split families; G < 32 edge slots in
warprow put a whole warp on one long row when K is too small to occupy 32 lanes with features.
"""
from __future__ import annotations

from itertools import product

from .schedule import Schedule
from .spmm_families import feature_chunks

THREADS = 256
LANES = (1, 2, 4, 8, 16, 32)
VECS = (1, 2, 4)


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


PARREDUCE_LANES = (8, 16, 32)


def _parreduce() -> list[Schedule]:
    """Persistent edge-parallel groups at K <= 8, per K band (KMAX): a warp per row with one edge
    per lane in flight (the fewest registers: a full SM of warps, for rows shorter than a warp,
    products-like q50 26), two, and four (long rows; more registers, fewer warps); G = 16 and
    G = 8 with a few edges per lane (several short rows per warp). KMAX = 8 keeps U <= 2: at U = 4
    its heavy-row and light-row walks together spill."""
    out = []
    for kmax in VECTOR_KMAX:
        deep = 2 if kmax == 8 else 4
        for g, u in dict.fromkeys(((32, 1), (32, 2), (32, deep), (16, 2), (8, deep))):
            out.append(Schedule("spmm", "parreduce", lanes=g, vec=1, threads=THREADS, tile=kmax, unroll=u))
    return out


# 16-byte loads of the 2-byte types: 8 halves per lane per load. Float32 refuses them (a 32-byte
# vector; Schedule.supports), so they only ever run in float16/bfloat16. Appended after the float
# shapes so every older name keeps its place. One shape per K regime of each family: G x 8 columns
# per pass (subwarp), GE-SpMM at K = 256 in one pass, and the split families' hub shapes.
HALF_VEC = 8
HALF_SUBWARP_LANES = (2, 4, 8, 16, 32)
# The split families have no 16-byte half shapes: with 8 halves per load their heavy-chunk
# partials came out wrong on the H200 (relative errors 0.5-0.95 at K = 8, 64, 256, every graph
# with a heavy row), so they serve float16/bfloat16 through their 4-element (8-byte) schedules.
# (family, lanes, split, chunk, reduce, unroll) shapes to add once that path is fixed.
HALF_SPLIT_SHAPES: tuple = ()


def _half_wide() -> list[Schedule]:
    out = [Schedule("spmm", "subwarp", lanes=g, vec=HALF_VEC, threads=THREADS, unroll=4)
           for g in HALF_SUBWARP_LANES]
    out.append(Schedule("spmm", "warprow", lanes=32, vec=HALF_VEC, threads=THREADS, unroll=4))
    out += [Schedule("spmm", family, lanes=g, vec=HALF_VEC, threads=THREADS, split=split, chunk=chunk,
                     reduce=reduce, unroll=unroll)
            for family, g, split, chunk, reduce, unroll in HALF_SPLIT_SHAPES]
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
    if s.family in ("subwarp", "warprow", "vector", "parreduce") and (s.split or s.chunk):
        raise ValueError(f"{s.name}: family {s.family} does not split rows")
    if s.family == "vector" and (s.tile not in VECTOR_KMAX or s.lanes not in VECTOR_LANES
                                 or s.vec != 1 or s.unroll not in (2, 4, 8)):
        raise ValueError(f"{s.name}: a vector schedule needs tile (KMAX) in {VECTOR_KMAX}, lanes in "
                         f"{VECTOR_LANES}, vec 1 and unroll 2, 4 or 8")


    if s.family == "parreduce" and (s.tile not in VECTOR_KMAX or s.lanes not in PARREDUCE_LANES
                                    or s.vec != 1 or s.unroll not in (1, 2, 4)):
        raise ValueError(f"{s.name}: a parreduce schedule needs tile (KMAX) in {VECTOR_KMAX}, lanes "
                         f"in {PARREDUCE_LANES}, vec 1 and unroll 1, 2 or 4")


SCHEDULES: tuple[Schedule, ...] = tuple(_subwarp() + _warprow() + _split() + _vector() + _parreduce()
                                        + _half_wide())
for _s in SCHEDULES:
    check_space_rules(_s)
