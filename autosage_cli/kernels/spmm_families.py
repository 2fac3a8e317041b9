"""The SpMM kernel families, each at home in its `Family` entry: its predicates (None, or the
reason a schedule cannot run a width), NVRTC name expression, schedules (value lists, in a fixed
order), space rules, cost model and plan layout; kernels/schedule.py joins their schedules.
Hooks take a `Schedule` (kernels/schedule.py), named in annotations only: schedule.py imports this.

Why these values (H200, the first kernel round): G lanes x V floats per row beat the best cuSPARSE
algorithm 1.3-2.25x on a uniform graph when G*V matched K, and lost 5-60x on power-law graphs (one
group per hub row), hence the split families; G < 32 edge slots in warprow put a warp on one long row.

Families (one CUDA file each, except that both split families share spmm_split.cu):
  subwarp    G lanes per row, 32/G rows per warp (cuda/spmm_subwarp.cu). Short, even rows.
  warprow    a warp per row, 32/G edge slots of G lanes, (col, val) staged by shuffles
             (cuda/spmm_warprow.cu). G = 32 is GE-SpMM; tile = G*V*P > 0 splits K over grid.y.
  split      rows above `split` nonzeros cut into `chunk`-nonzero chunks, a warp each; light rows by
             sub-warp groups; one launch, the last chunk of a row combines its partials (reduce
             "atomic": atomics into a per-row scratch; "twophase": per-chunk partials summed in a
             fixed order) (cuda/spmm_split.cu). Hubs among short rows (hub-200k, products-like).
  splitwarp  the same, light rows by a warp each. Many long rows (reddit-like).
  vector     small K only (tile = KMAX, one schedule per K band KMAX/2 < K <= KMAX): G lanes per
             row split the row's *edges* (CSR-vector), each lane keeps all K sums, summed by shuffles
             (cuda/spmm_vector.cu). vec is 1: B rows are read as vectors when K == KMAX and aligned.
  parreduce  the vector family's row walk (G lanes on a row's nonzeros, KMAX sums per lane) by
             persistent groups striding over the rows longest first; for G < 32 the heavy rows
             (parreduce_heavy_threshold) go first, a warp each (cuda/spmm_parreduce.cu). Skewed
             graphs at K <= 8 (products-like).
  stream     small K only (tile = KMAX, as vector): a block per window of threads x U consecutive
             nonzeros (CSR-stream), products through shared memory, lanes of the block sum the
             window's rows; a second launch sums the partials of rows crossing a window edge
             (cuda/spmm_stream.cu). K <= 8 (H200, products-like K=2: 0.675 ms, best row walk 1.15).
Every family has each fused epilogue (kernels/epilogues.py) as a kernel variant, applied once where
a row's final value is written (split: in the last chunk's reduction; stream: the crossing launch).
"""
from __future__ import annotations

from itertools import product

from . import epilogues
from .family import Family, every_schedule, first_reason

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


def _subwarp_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_subwarp<{dtype}, {s.lanes}, {s.vec}, {s.unroll}>"


def _warprow_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_warprow<{dtype}, {s.lanes}, {s.vec}, {s.unroll}, {feature_chunks(s)}>"


def _split_expr(light_warp: bool):
    """The split kernel's name expression; `light_warp`: light rows get a warp of edge slots
    (splitwarp) rather than a group of lanes each (split)."""
    def expression(s: Schedule, dtype: str) -> str:
        return (f"spmm_split<{dtype}, {s.lanes}, {s.vec}, {s.unroll}, {str(light_warp).lower()}, "
                f"{str(s.reduce == 'twophase').lower()}>")
    return expression


def _vector_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_vector<{dtype}, {s.lanes}, {s.tile}, {s.unroll}>"


def _parreduce_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_parreduce<{dtype}, {s.lanes}, {s.tile}, {s.unroll}>"


def _stream_expr(s: Schedule, dtype: str) -> str:
    return f"spmm_stream<{dtype}, {s.tile}, {s.unroll}, {s.threads}>"


def _stream_launches(s: Schedule, dtype: str, index: str) -> tuple[str, ...]:
    """The window kernel, then the one that sums the crossing rows' partials."""
    return _stream_expr(s, dtype), f"spmm_stream_crossing<{dtype}, {s.tile}>"


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


# ------------------------------------------------------------------ the space, per family
# Each generator takes `make(**knobs)`, a Schedule constructor of its family.

THREADS = 256
LANES = (1, 2, 4, 8, 16, 32)
VECS = (1, 2, 4)


def _subwarp_space(make) -> list:
    out = []
    for g, v in product(LANES, VECS):
        out.append(make(lanes=g, vec=v, threads=THREADS, unroll=4))
        # Narrow groups (tiny K) do little per edge: more edges in flight hide the gather latency.
        if g * v <= 4:
            out.append(make(lanes=g, vec=v, threads=THREADS, unroll=8))
    return out


def _warprow_space(make) -> list:
    # Edge-sliced warps: 32/G slots on one row; for long rows at small and medium K.
    out = [make(lanes=g, vec=v, threads=THREADS, unroll=4) for g, v in product((1, 2, 4, 8, 16), (1, 4))]
    # GE-SpMM: all 32 lanes on features, the whole K per staging pass or a tile per grid.y block.
    out += [make(lanes=32, vec=v, threads=THREADS, unroll=4) for v in VECS]
    out.append(make(lanes=32, vec=4, threads=THREADS, tile=128, unroll=4))
    # Two register chunks (P = 2): K = 256 in one staging pass; fewer edges in flight (registers).
    out.append(make(lanes=32, vec=4, threads=THREADS, tile=256, unroll=2))
    return out


# (G, V) pairs for the split families: one per K regime, G*V ~ K up to 128 columns per pass.
SPLIT_SHAPES = ((1, 1), (2, 1), (1, 4), (2, 4), (4, 4), (8, 4), (16, 4), (32, 4), (32, 1))
SPLITWARP_SHAPES = ((1, 1), (1, 4), (4, 4), (8, 4), (32, 4))
DETERMINISTIC_SHAPES = ((1, 1), (4, 4), (32, 4))

# The split variants as data: (shapes, split threshold, chunk, reduction).
# - split: light rows by groups. hub-200k has 4 hubs of 30k among rows of ~0.5 edges; any row
#   above 256 nonzeros is spread over 256-nonzero chunks (deterministic variants: 1024/1024).
# - splitwarp: light rows by warps. reddit-like rows are mostly hundreds to a few thousand long
#   (q99 3805), a warp each; only the ~1% above 2048 are chunked.
# - split, short chunks: at K >= 64 a warp walks a light row K / (G x V) times over, so rows of a
#   hundred-odd nonzeros set the time on hub graphs (wiki-Vote, facebook_combined, ca-CondMat at
#   K = 64-256 on an H100: 256-nonzero chunks 0.64-1.05x cuSPARSE's best, these 1.14-2.04x).
SPLIT_VARIANTS = ((SPLIT_SHAPES, 256, 256, "atomic"), (DETERMINISTIC_SHAPES, 1024, 1024, "twophase"),
                  (((16, 4), (32, 4)), 64, 64, "atomic"), (((32, 4),), 32, 32, "atomic"))
SPLITWARP_VARIANTS = ((SPLITWARP_SHAPES, 2048, 512, "atomic"),
                      (DETERMINISTIC_SHAPES, 2048, 1024, "twophase"))


def _split_space(variants):
    def space(make) -> list:
        return [make(lanes=g, vec=v, threads=THREADS, split=split, chunk=chunk, reduce=reduce, unroll=4)
                for shapes, split, chunk, reduce in variants for g, v in shapes]
    return space


VECTOR_KMAX = (1, 2, 4, 8)
VECTOR_LANES = (4, 8, 16, 32)


def _vector_space(make) -> list:
    """Edge-parallel rows at K <= 8 (H200: at K <= 4 the feature-parallel families read the
    index stream through 16-32 narrow streams per warp, 0.9 TB/s effective on products-like K=2).
    Per K band: a warp per row (G = 32: long rows, reddit-like q50 230) and G = 8 (products-like
    q50 26: 32 lanes would mostly idle), both with 4 edges per lane in flight; G = 16 and G = 4 in
    between and below; U = 8 for a warp per row at K <= 2 (little work per edge, more gathers in
    flight), U = 2 where KMAX = 8 sums per edge already keep registers busy."""
    out = []
    for kmax in VECTOR_KMAX:
        unrolls = (2,) if kmax == 8 else (4,)
        out += [make(lanes=g, vec=1, threads=THREADS, tile=kmax, unroll=u)
                for g, u in product((32, 16, 8, 4), unrolls)]
        if kmax <= 2:
            out.append(make(lanes=32, vec=1, threads=THREADS, tile=kmax, unroll=8))
            out.append(make(lanes=8, vec=1, threads=THREADS, tile=kmax, unroll=2))
        if kmax == 8:
            out.append(make(lanes=32, vec=1, threads=THREADS, tile=kmax, unroll=4))
    # 512-thread blocks: more rows per block for the short-row regime.
    out.append(make(lanes=8, vec=1, threads=512, tile=4, unroll=4))
    return out


PARREDUCE_LANES = (8, 16, 32)


def _parreduce_space(make) -> list:
    """Persistent edge-parallel groups at K <= 8, per K band (KMAX): a warp per row with one edge
    per lane in flight (the fewest registers: a full SM of warps, for rows shorter than a warp,
    products-like q50 26), two, and four (long rows; more registers, fewer warps); G = 16 and
    G = 8 with a few edges per lane (several short rows per warp). KMAX = 8 keeps U <= 2: at U = 4
    its heavy-row and light-row walks together spill."""
    out = []
    for kmax in VECTOR_KMAX:
        deep = 2 if kmax == 8 else 4
        for g, u in dict.fromkeys(((32, 1), (32, 2), (32, deep), (16, 2), (8, deep))):
            out.append(make(lanes=g, vec=1, threads=THREADS, tile=kmax, unroll=u))
    return out


# (KMAX, U) of the stream family: a window of 256 x U nonzeros and U x KMAX products per thread in
# shared memory (at most 32 KB a block). A standalone H200 experiment on products-like: U = 8 ran
# K = 1 in 0.41 ms against 0.46 at U = 4 and tied at K = 2; at K = 4 U = 8 (32 KB) ran 1.9x slower
# than U = 4 (fewer resident blocks), so wide KMAX keep U small.
STREAM_SHAPES = ((1, 4), (1, 8), (2, 4), (2, 8), (4, 2), (4, 4), (8, 2), (8, 4))
STREAM_UNROLLS = (2, 4, 8)
STREAM_MAX_SHARED = 48 * 1024   # a block's static shared memory, where a window's products live


def _stream_space(make) -> list:
    return [make(lanes=1, vec=1, threads=THREADS, tile=kmax, unroll=u) for kmax, u in STREAM_SHAPES]


# 16-byte loads of the 2-byte types: 8 halves per lane per load. Float32 refuses them (a 32-byte
# vector; Schedule.supports), so they only ever run in float16/bfloat16. One shape per K regime of
# each family: G x 8 columns per pass (subwarp), GE-SpMM at K = 256 in one pass, and the split
# families' hub shapes (their float partials take 32 bytes per lane: cuda/common.cuh store_partials).
HALF_VEC = 8
HALF_SUBWARP_LANES = (2, 4, 8, 16, 32)
# (lanes, split, chunk, reduce, unroll) per split family. G = 8 and 16 cover K = 64, 128 in one pass
# of 16-byte loads. The loads in flight are held as loaded (cuda/common.cuh Raw: 8 halves in 4
# registers), which leaves room under the 64-register cap for more edges in flight: split G = 8
# keeps 8 (64 registers, no spill; G = 16 spills at 8 and keeps 4), splitwarp G = 16 and warprow
# G = 8 keep 4, splitwarp G = 8 keeps 2 (fewer registers). On the H200 (bf16, reddit-/products-like,
# K = 64, 128, bf87f24) each kept U was its shape's fastest or within 4% of it (split G = 16 at U = 8:
# up to 6% faster, but it spills). 64/64 chunks: float32's short-chunk split's (SPLIT_VARIANTS).
HALF_SPLIT_SHAPES = {"split": ((4, 256, 256, "atomic", 2), (16, 256, 256, "atomic", 4),
                               (8, 256, 256, "atomic", 8), (8, 64, 64, "atomic", 8), (16, 64, 64, "atomic", 4)),
                     "splitwarp": ((32, 2048, 512, "atomic", 4), (32, 2048, 1024, "twophase", 4),
                                   (8, 2048, 512, "atomic", 2), (16, 2048, 512, "atomic", 4))}
# (lanes, unroll) of warprow's 16-byte half shapes.
HALF_WARPROW_SHAPES = ((32, 4), (8, 4), (16, 4))


def _subwarp_half(make) -> list:
    return [make(lanes=g, vec=HALF_VEC, threads=THREADS, unroll=4) for g in HALF_SUBWARP_LANES]


def _warprow_half(make) -> list:
    return [make(lanes=g, vec=HALF_VEC, threads=THREADS, unroll=u) for g, u in HALF_WARPROW_SHAPES]


def _split_half(family: str):
    def space(make) -> list:
        return [make(lanes=g, vec=HALF_VEC, threads=THREADS, split=split, chunk=chunk, reduce=reduce,
                     unroll=unroll)
                for g, split, chunk, reduce, unroll in HALF_SPLIT_SHAPES[family]]
    return space


# ------------------------------------------------------------------ space rules (None or a reason)

def _no_tile(s: Schedule) -> str | None:
    return f"family {s.family} has no feature tile" if s.tile else None


def _no_split(s: Schedule) -> str | None:
    return f"family {s.family} does not split rows" if s.split or s.chunk else None


def _warprow_tile(s: Schedule) -> str | None:
    if s.tile and (s.tile % (s.lanes * s.vec) or feature_chunks(s) not in (1, 2, 4)):
        return "a warprow tile must be 1, 2 or 4 chunks of lanes x vec"
    return None


def _splits_rows(s: Schedule) -> str | None:
    if not s.split or s.reduce == "none":
        return "split families need split > 0 and a reduction"
    return None


def _vector_knobs(s: Schedule) -> str | None:
    if s.tile not in VECTOR_KMAX or s.lanes not in VECTOR_LANES or s.vec != 1 or s.unroll not in (2, 4, 8):
        return (f"a vector schedule needs tile (KMAX) in {VECTOR_KMAX}, lanes in {VECTOR_LANES}, "
                "vec 1 and unroll 2, 4 or 8")
    return None


def _parreduce_knobs(s: Schedule) -> str | None:
    if s.tile not in VECTOR_KMAX or s.lanes not in PARREDUCE_LANES or s.vec != 1 or s.unroll not in (1, 2, 4):
        return (f"a parreduce schedule needs tile (KMAX) in {VECTOR_KMAX}, lanes in "
                f"{PARREDUCE_LANES}, vec 1 and unroll 1, 2 or 4")
    return None


def _stream_knobs(s: Schedule) -> str | None:
    if (s.tile not in VECTOR_KMAX or s.lanes != 1 or s.vec != 1 or s.unroll not in STREAM_UNROLLS
            or s.threads * s.unroll * s.tile * 4 > STREAM_MAX_SHARED):
        return (f"a stream schedule needs tile (KMAX) in {VECTOR_KMAX}, lanes 1, vec 1, unroll in "
                f"{STREAM_UNROLLS} and threads x unroll x KMAX floats within {STREAM_MAX_SHARED} bytes")
    return None


def _rules(*rules):
    """Space rules checked in order: the first refusal is the reason."""
    return lambda s: first_reason(*(rule(s) for rule in rules))


# ------------------------------------------------------------------ the families

FAMILIES: dict[str, Family] = {
    "subwarp": Family(
        "spmm", "spmm_subwarp.cu", _subwarp_expr, supports,
        "lanes: G lanes per row (32/G rows per warp); vec: floats per lane per load; unroll: edges "
        "in flight; K > lanes x vec loops over feature chunks; no tile, split or chunk",
        schedules=_subwarp_space, half_schedules=_subwarp_half, space_rules=_rules(_no_tile, _no_split)),
    "warprow": Family(
        "spmm", "spmm_warprow.cu", _warprow_expr, supports,
        "a warp per row; lanes: G lanes per edge slot (32/G slots); vec: floats per load; unroll: "
        "staged edges in flight; tile: features per staging pass (P = tile / (lanes x vec) register "
        "chunks, one pass per grid.y block; 0: one chunk, all passes in one block)",
        _whole_warp, schedules=_warprow_space, half_schedules=_warprow_half,
        space_rules=_rules(_warprow_tile, _no_split), stages_edges=True),
    "split": Family(
        "spmm", "spmm_split.cu", _split_expr(light_warp=False), supports,
        "rows above `split` nonzeros cut into `chunk`-nonzero chunks, a warp of 32/lanes edge slots "
        "each, partials combined by `reduce`; light rows: lanes per row (32/lanes rows per warp); "
        "vec: floats per load; unroll: edges in flight",
        schedules=_split_space(SPLIT_VARIANTS), half_schedules=_split_half("split"),
        space_rules=_rules(_no_tile, _splits_rows), plan="split", host_work_lists=every_schedule),
    "splitwarp": Family(
        "spmm", "spmm_split.cu", _split_expr(light_warp=True), supports,
        "as split, but a warp of 32/lanes edge slots per light row too",
        _whole_warp, schedules=_split_space(SPLITWARP_VARIANTS), half_schedules=_split_half("splitwarp"),
        space_rules=_rules(_no_tile, _splits_rows), plan="split", stages_edges=True, host_work_lists=every_schedule),
    "vector": Family(
        "spmm", "spmm_vector.cu", _vector_expr, vector_supports,
        "lanes: G lanes per row splitting its edges; tile: KMAX, the sums each lane keeps (serves "
        "KMAX/2 < K <= KMAX); unroll: edges per lane in flight; vec is 1 (the kernel vectorises "
        "itself when K == KMAX)",
        schedules=_vector_space, space_rules=_rules(_no_split, _vector_knobs), cost="edge-parallel"),
    "parreduce": Family(
        "spmm", "spmm_parreduce.cu", _parreduce_expr, vector_supports,
        f"lanes: G lanes per light row splitting its edges (rows above {PARREDUCE_HEAVY_STEPS} x G "
        "edges: a warp each); "
        "tile: KMAX, the sums each lane keeps (serves KMAX/2 < K <= KMAX); unroll: edges per lane "
        "in flight; persistent groups, rows longest first; vec is 1",
        schedules=_parreduce_space, space_rules=_rules(_no_split, _parreduce_knobs), host_work_lists=every_schedule,
        cost="persistent-edge-parallel", plan="persistent", heavy_threshold=parreduce_heavy_threshold),
    "stream": Family(
        "spmm", "spmm_stream.cu", _stream_expr, vector_supports,
        "a block per window of threads x unroll consecutive nonzeros (rows crossing a window edge "
        "summed by a second launch, in window order); tile: KMAX, the products each edge keeps "
        "(serves KMAX/2 < K <= KMAX); lanes 1 and vec 1 (B rows are gathered as vectors when "
        "K == KMAX)",
        schedules=_stream_space, space_rules=_rules(_no_split, _stream_knobs), cost="stream",
        plan="stream", launches=_stream_launches, host_work_lists=every_schedule),
}

FAMILIES = epilogues.with_variants(FAMILIES)   # the fused epilogues as variants (see the docstring)
