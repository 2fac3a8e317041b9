"""The attention kernel families, each at home in its `Family` entry: predicates, NVRTC name
expressions (every kernel a schedule's plan launches, and the additive-score variant of the fused
ones), schedules (value lists, in a fixed order), space rules, cost model and plan layout.
attention_space joins the entries' schedules. Hooks take a `Schedule` (kernels/schedule.py), named
in annotations only: schedule.py imports this.

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

Why these values: two group shapes per d in {16, 32, 64, 128} (one vector per lane with more lanes,
or two per lane with fewer lanes and shorter shuffle trees; plus a whole warp of 8-byte loads at
d = 64), E in {2, 4} within a register budget of E x NV x vec <= 32 floats per operand, and a scalar
(vec 1) group of 32 or 4 lanes for any other d up to 256. Split thresholds: reddit-like q99 is 3805
edges and its max 21.7k, products-like q99 378 and max 17.5k; a group takes ~1 us per E edges, so
rows above 512/2048 edges would dominate the tail.
"""
from __future__ import annotations

from itertools import product

from .family import Family, every_schedule, first_reason
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

def _fused_kernel(kernel: str):
    """The name expression of one fused kernel (dot-product or additive score, whole rows or
    segments): every one is a template over the same knobs."""
    def expression(s: Schedule, dtype: str = "float", index: str = "int") -> str:
        return (f"{kernel}<{dtype_info(dtype).c_type}, {index}, {s.lanes}, {s.vec}, {vectors_per_lane(s)}, "
                f"{s.unroll}, {team_width(s)}>")
    return expression


def scores_type_argument(dtype: str) -> str:
    """The softmax kernels' trailing scores-type argument: none for float (its default, so the
    float32 expressions read `<index, lanes>`), else the C++ type."""
    c_type = dtype_info(dtype).c_type
    return "" if c_type == "float" else f", {c_type}"


def fused_expression(s: Schedule, dtype: str = "float", index: str = "int") -> str:
    """The dot-product kernel of a fused or fused_split schedule (its family's own)."""
    return FAMILIES[s.family].name_expression(s, dtype, index)


def additive_expression(s: Schedule, dtype: str = "float", index: str = "int") -> str:
    """The kernel of a fused or fused_split schedule with the additive (GAT) score
    LeakyReLU(a_dst[i] + a_src[j]): the same knobs and template parameters as the dot-product one."""
    return FAMILIES[s.family].variant("additive")(s, dtype, index)


def additive_stats_expression(index: str = "int") -> str:
    """The kernel that merges heavy rows' chunk statistics (fused_split, additive score)."""
    return f"attention_additive_stats<{index}>"


def combine_expression(dtype: str = "float", index: str = "int") -> str:
    """The two-phase merge of fused_split's chunk partials."""
    return f"attention_combine<{dtype_info(dtype).c_type}, {index}>"


def softmax_expression(s: Schedule, index: str = "int", dtype: str = "float") -> str:
    return f"attention_softmax_rows<{index}, {s.lanes}{scores_type_argument(dtype)}>"


def softmax_heavy_expression(s: Schedule, index: str = "int", dtype: str = "float") -> str:
    return f"attention_softmax_heavy<{index}, {s.threads}{scores_type_argument(dtype)}>"


_ROWS, _SEGMENTS = _fused_kernel("attention_fused_rows"), _fused_kernel("attention_fused_segments")


def _rows_launches(s: Schedule, dtype: str, index: str) -> tuple[str, ...]:
    return (_ROWS(s, dtype, index),)


def _segments_launches(s: Schedule, dtype: str, index: str) -> tuple[str, ...]:
    return (_SEGMENTS(s, dtype, index), combine_expression(dtype, index))


def _unfused_launches(s: Schedule, dtype: str, index: str) -> tuple[str, ...]:
    return (softmax_expression(s, index, dtype), softmax_heavy_expression(s, index, dtype))


# ------------------------------------------------------------------ the space, per family
# Each generator takes `make(**knobs)`, a Schedule constructor of its family.

THREADS = 256
MAX_FEATURES = 256           # largest d a fused group holds in registers (vec 1, 32 lanes x 8)
REGISTER_BUDGET = 32         # E x NV x vec floats per operand (K and V) a lane keeps in flight

# (lanes, vec, NV): 16-byte-load shapes, two per d in {16, 32, 64, 128} ...
VECTOR_SHAPES = ((2, 4, 2), (4, 4, 1), (4, 4, 2), (8, 4, 1), (8, 4, 2), (16, 4, 1), (16, 4, 2),
                 (32, 4, 1), (2, 4, 1),
                 # a whole warp per (row, head) at d = 64 with 8-byte loads: no two rows of different
                 # degree share a warp (lockstep), at the price of narrower loads.
                 (32, 2, 1))
# ... and scalar shapes for any d: 4 lanes for d <= 16, 32 lanes up to 256.
SCALAR_SHAPES = ((4, 1, 1), (4, 1, 2), (4, 1, 4), (32, 1, 1), (32, 1, 2), (32, 1, 4), (32, 1, 8))
# 16-byte loads of the 2-byte types (8 halves per lane; float32 refuses them), placed after every
# family's float shapes so every older name keeps its place: d = 32, 64, 128 with one vector per
# lane, and d = 128 with two (fewer lanes, shorter shuffle trees); fused_split takes the same
# shapes (its float chunk partials take 32 bytes per lane: cuda/common.cuh store_partials).
HALF_SHAPES = ((4, 8, 1), (8, 8, 1), (16, 8, 1), (8, 8, 2))
SPLITS = ((512, 256), (2048, 512))      # (split, chunk) of fused_split
UNFUSED_SOFTMAX = ((32, 2048), (8, 512))  # (lanes, split) of the unfused row softmax


def _group(make, lanes: int, vec: int, nv: int, **knobs) -> Schedule:
    return make(lanes=lanes, vec=vec, threads=THREADS, tile=lanes * vec * nv, **knobs)


def _fused_space(shapes):
    def space(make) -> list:
        out = []
        for (lanes, vec, nv), unroll in product(shapes, (2, 4)):
            if unroll * nv * vec > REGISTER_BUDGET or (vec == 1 and unroll != 2):
                continue
            if lanes % unroll == 0:  # a team of one head must hold whole steps
                out.append(_group(make, lanes, vec, nv, unroll=unroll))
            # Teams of several heads share one staged batch of indices (fewer index loads per edge).
            hpb = min(4, 32 // lanes)
            if vec > 1 and unroll == 4 and hpb > 1:
                out.append(_group(make, lanes, vec, nv, unroll=unroll, heads_per_block=hpb))
        return out
    return space


def _fused_split_space(shapes, scalar_shapes=()):
    def space(make) -> list:
        out = [_group(make, lanes, vec, nv, unroll=min(lanes, 4 if nv == 1 else 2), split=split,
                      chunk=chunk, reduce="twophase")
               for (lanes, vec, nv), (split, chunk) in product(shapes, SPLITS)]
        out += [_group(make, lanes, vec, nv, unroll=2, split=2048, chunk=512, reduce="twophase")
                for lanes, vec, nv in scalar_shapes if lanes == 32]
        return out
    return space


def _unfused_space(make) -> list:
    return [make(lanes=lanes, vec=1, threads=THREADS, split=split, chunk=split, reduce="twophase")
            for lanes, split in UNFUSED_SOFTMAX]


# ------------------------------------------------------------------ space rules (None or a reason)

def _fused_rules(splits_rows: bool):
    """The rules of a fused family; `splits_rows`: it cuts long rows (two-phase), else it never does."""
    def rules(s: Schedule) -> str | None:
        nv = vectors_per_lane(s)
        if s.tile != s.lanes * s.vec * nv or nv not in (1, 2, 4, 8) or s.tile > MAX_FEATURES:
            return "tile must be lanes x vec x NV with NV in 1, 2, 4, 8"
        if team_width(s) > 32 or team_width(s) % s.unroll:
            return (f"a team (lanes x heads_per_block) must fit a warp and hold whole steps of "
                    f"{s.unroll} edges")
        if s.heads_per_block not in (1, 2, 4, 8, 16):
            return "heads_per_block must be a power of two"
        if splits_rows != bool(s.split) or (s.split and s.reduce != "twophase"):
            return "fused_split (only) splits rows, merging two-phase"
        return None
    return rules


def _unfused_rules(s: Schedule) -> str | None:
    if not s.split or s.tile or s.heads_per_block != 1:
        return "unfused needs a heavy-row threshold and no tile or teams"
    return None


# ------------------------------------------------------------------ the families
# plan: the layout in backends/native_attention.py's PLANS; cost: the model in the attention
# spec's cost_models (ops/attention.py).

FAMILIES: dict[str, Family] = {
    "fused": Family(
        "attention", FUSED_SOURCE, _ROWS, fused_supports,
        "lanes: lanes per (row, head) group; vec: floats per load; tile: d held in registers "
        "(lanes x vec x NV); unroll: E edges per step; heads_per_block: heads whose groups share "
        "the row's staged indices (a team of lanes x heads_per_block <= 32 lanes)",
        schedules=_fused_space(VECTOR_SHAPES + SCALAR_SHAPES), half_schedules=_fused_space(HALF_SHAPES),
        space_rules=_fused_rules(splits_rows=False), plan="rows", launches=_rows_launches,
        wide_indices=True, variants={"additive": _fused_kernel("attention_additive_rows")}),
    "fused_split": Family(
        "attention", FUSED_SOURCE, _SEGMENTS, fused_supports,
        "as fused, plus: rows above `split` edges cut into `chunk`-edge chunks whose partial "
        "softmax states are merged two-phase (reduce)",
        schedules=_fused_split_space(VECTOR_SHAPES, SCALAR_SHAPES),
        half_schedules=_fused_split_space(HALF_SHAPES), space_rules=_fused_rules(splits_rows=True),
        plan="segments", host_work_lists=every_schedule,
        launches=_segments_launches, wide_indices=True,
        variants={"additive": _fused_kernel("attention_additive_segments")}),
    "unfused": Family(
        "attention", SOFTMAX_SOURCE, lambda s, dtype, index="int": softmax_expression(s, index, dtype),
        unfused_supports,
        "the row softmax of SDDMM -> softmax -> SpMM: lanes per (row, head); rows above `split` "
        "edges (chunk = split) take a block of `threads` threads; the sub-steps are native "
        "schedules chosen at prepare",
        schedules=_unfused_space, space_rules=_unfused_rules, cost="unfused", plan="pipeline",
        launches=_unfused_launches, wide_indices=True, substeps=("sddmm", "spmm"),
        host_work_lists=every_schedule),
}
