"""The attention schedule space: value lists and named predicates, never copied kernels.

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

Knobs of the fused families (template parameters of attention_fused.cu):
  lanes x vec      lanes of a group and floats per load (vec 4: 16-byte loads of K and V rows);
  tile             features one group holds in registers: lanes x vec x NV, NV vectors per lane.
                   d must fit in one tile (a group never re-walks a row); d % vec == 0;
  unroll           E, edges per step (2 E NV loads in flight per lane, E interleaved reductions);
  heads_per_block  heads whose groups form one team sharing the row's staged (column, value) pairs:
                   team width W = lanes x heads_per_block <= 32 lanes; needs H % heads_per_block == 0.
Why these values: two group shapes per d in {16, 32, 64, 128} (one vector per lane with more lanes,
or two per lane with fewer lanes and shorter shuffle trees; plus a whole warp of 8-byte loads at
d = 64), E in {2, 4} within a register budget of
E x NV x vec <= 32 floats per operand, and a scalar (vec 1) group of 32 or 4 lanes for any other d up
to 256. Split thresholds: reddit-like q99 is 3805 edges and its max 21.7k, products-like q99 378 and
max 17.5k; a group takes ~1 us per E edges, so rows above 512/2048 edges would dominate the tail.
"""
from __future__ import annotations

from itertools import product

from .schedule import Family, Schedule, register_family

THREADS = 256
MAX_FEATURES = 256           # largest d a fused group holds in registers (vec 1, 32 lanes x 8)
REGISTER_BUDGET = 32         # E x NV x vec floats per operand (K and V) a lane keeps in flight
FUSED_SOURCE = "attention_fused.cu"
SOFTMAX_SOURCE = "attention_softmax.cu"
INDEX_TYPES = {"int32": "int", "int64": "long long"}

# (lanes, vec, NV): 16-byte-load shapes, two per d in {16, 32, 64, 128} ...
VECTOR_SHAPES = ((2, 4, 2), (4, 4, 1), (4, 4, 2), (8, 4, 1), (8, 4, 2), (16, 4, 1), (16, 4, 2),
                 (32, 4, 1), (2, 4, 1),
                 # a whole warp per (row, head) at d = 64 with 8-byte loads: no two rows of different
                 # degree share a warp (lockstep), at the price of narrower loads.
                 (32, 2, 1))
# ... and scalar shapes for any d: 4 lanes for d <= 16, 32 lanes up to 256.
SCALAR_SHAPES = ((4, 1, 1), (4, 1, 2), (4, 1, 4), (32, 1, 1), (32, 1, 2), (32, 1, 4), (32, 1, 8))
SPLITS = ((512, 256), (2048, 512))      # (split, chunk) of fused_split
UNFUSED_SOFTMAX = ((32, 2048), (8, 512))  # (lanes, split) of the unfused row softmax


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


def _first_reason(*reasons: str | None) -> str | None:
    return next((r for r in reasons if r), None)


def fused_supports(s: Schedule, d: int, heads: int = 1) -> str | None:
    if heads < 1:
        return f"heads must be >= 1, got {heads}"
    return _first_reason(vector_fits(s, d), tile_fits(s, d), heads_fit(s, heads))


def unfused_supports(s: Schedule, d: int, heads: int = 1) -> str | None:
    """The softmax takes any d; the sub-steps are checked when they are chosen at prepare (any d
    some native SDDMM and SpMM schedule supports)."""
    if heads < 1:
        return f"heads must be >= 1, got {heads}"
    return None


# ------------------------------------------------------------------ name expressions

def fused_expression(s: Schedule, dtype: str = "float", index: str = "int") -> str:
    kernel = "attention_fused_rows" if s.family == "fused" else "attention_fused_segments"
    return (f"{kernel}<{dtype}, {index}, {s.lanes}, {s.vec}, {vectors_per_lane(s)}, {s.unroll}, "
            f"{team_width(s)}>")


def combine_expression(dtype: str = "float", index: str = "int") -> str:
    return f"attention_combine<{dtype}, {index}>"


def softmax_expression(s: Schedule, index: str = "int") -> str:
    return f"attention_softmax_rows<{index}, {s.lanes}>"


def softmax_heavy_expression(s: Schedule, index: str = "int") -> str:
    return f"attention_softmax_heavy<{index}, {s.threads}>"


def expressions(s: Schedule, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """Every kernel one schedule launches (the primary one first)."""
    if s.family == "fused":
        return (fused_expression(s, dtype, index),)
    if s.family == "fused_split":
        return (fused_expression(s, dtype, index), combine_expression(dtype, index))
    return (softmax_expression(s, index), softmax_heavy_expression(s, index))


def file_expressions(source_file: str, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """All instantiations of one kernel file over the registry: compiled into one module."""
    return tuple(sorted({e for s in SCHEDULES if s.source_file == source_file
                         for e in expressions(s, dtype, index)}))


register_family("fused", Family(FUSED_SOURCE, lambda s, dtype: fused_expression(s, dtype), fused_supports))
register_family("fused_split", Family(FUSED_SOURCE, lambda s, dtype: fused_expression(s, dtype),
                                      fused_supports))
register_family("unfused", Family(SOFTMAX_SOURCE, lambda s, dtype: softmax_expression(s),
                                  unfused_supports))


# ------------------------------------------------------------------ the space

def _fused(lanes: int, vec: int, nv: int, **knobs) -> Schedule:
    return Schedule("attention", knobs.pop("family", "fused"), lanes=lanes, vec=vec, threads=THREADS,
                    tile=lanes * vec * nv, **knobs)


def _fused_space() -> list[Schedule]:
    out = []
    for (lanes, vec, nv), unroll in product(VECTOR_SHAPES + SCALAR_SHAPES, (2, 4)):
        if unroll * nv * vec > REGISTER_BUDGET or (vec == 1 and unroll != 2):
            continue
        if lanes % unroll == 0:  # a team of one head must hold whole steps
            out.append(_fused(lanes, vec, nv, unroll=unroll))
        # Teams of several heads share one staged batch of indices (fewer index loads per edge).
        hpb = min(4, 32 // lanes)
        if vec > 1 and unroll == 4 and hpb > 1:
            out.append(_fused(lanes, vec, nv, unroll=unroll, heads_per_block=hpb))
    return out


def _fused_split_space() -> list[Schedule]:
    out = []
    for (lanes, vec, nv), (split, chunk) in product(VECTOR_SHAPES, SPLITS):
        out.append(_fused(lanes, vec, nv, family="fused_split",
                          unroll=min(lanes, 4 if nv == 1 else 2),
                          split=split, chunk=chunk, reduce="twophase"))
    for lanes, vec, nv in SCALAR_SHAPES:
        if lanes == 32:
            out.append(_fused(lanes, vec, nv, family="fused_split", unroll=2, split=2048, chunk=512,
                              reduce="twophase"))
    return out


def _unfused_space() -> list[Schedule]:
    return [Schedule("attention", "unfused", lanes=lanes, vec=1, threads=THREADS, split=split,
                     chunk=split, reduce="twophase") for lanes, split in UNFUSED_SOFTMAX]


def check_space_rules(s: Schedule) -> None:
    """Family rules beyond Schedule.validate(); raises ValueError."""
    s.validate()
    if s.op != "attention":
        raise ValueError(f"{s.name}: not an attention schedule")
    if s.family in ("fused", "fused_split"):
        nv = vectors_per_lane(s)
        if s.tile != s.lanes * s.vec * nv or nv not in (1, 2, 4, 8) or s.tile > MAX_FEATURES:
            raise ValueError(f"{s.name}: tile must be lanes x vec x NV with NV in 1, 2, 4, 8")
        if team_width(s) > 32 or team_width(s) % s.unroll:
            raise ValueError(f"{s.name}: a team (lanes x heads_per_block) must fit a warp and hold "
                             f"whole steps of {s.unroll} edges")
        if s.heads_per_block not in (1, 2, 4, 8, 16):
            raise ValueError(f"{s.name}: heads_per_block must be a power of two")
        if (s.family == "fused_split") != bool(s.split) or (s.split and s.reduce != "twophase"):
            raise ValueError(f"{s.name}: fused_split (only) splits rows, merging two-phase")
    elif s.family == "unfused":
        if not s.split or s.tile or s.heads_per_block != 1:
            raise ValueError(f"{s.name}: unfused needs a heavy-row threshold and no tile or teams")
    else:
        raise ValueError(f"{s.name}: unknown attention family")


SCHEDULES: tuple[Schedule, ...] = tuple(_fused_space() + _fused_split_space() + _unfused_space())
for _s in SCHEDULES:
    check_space_rules(_s)
