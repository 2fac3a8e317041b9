"""The attention schedule space: value lists and space rules, never copied kernels.

Families (their predicates, name expressions and table entries): attention_families.py.

Why these values: two group shapes per d in {16, 32, 64, 128} (one vector per lane with more lanes,
or two per lane with fewer lanes and shorter shuffle trees; plus a whole warp of 8-byte loads at
d = 64), E in {2, 4} within a register budget of
E x NV x vec <= 32 floats per operand, and a scalar (vec 1) group of 32 or 4 lanes for any other d up
to 256. Split thresholds: reddit-like q99 is 3805 edges and its max 21.7k, products-like q99 378 and
max 17.5k; a group takes ~1 us per E edges, so rows above 512/2048 edges would dominate the tail.
"""
from __future__ import annotations

from itertools import product

from .attention_families import (  # the sources and expressions are the plans' too
    FUSED_SOURCE, SOFTMAX_SOURCE, additive_expression, additive_stats_expression, fused_expression,
    scores_type_argument, softmax_expression, team_width, vectors_per_lane)
from . import attention_families
from .schedule import Schedule
from ..dtypes import info as dtype_info, vector_bytes_fit

THREADS = 256
MAX_FEATURES = 256           # largest d a fused group holds in registers (vec 1, 32 lanes x 8)
REGISTER_BUDGET = 32         # E x NV x vec floats per operand (K and V) a lane keeps in flight
INDEX_TYPES = {"int32": "int", "int64": "long long"}

# (lanes, vec, NV): 16-byte-load shapes, two per d in {16, 32, 64, 128} ...
VECTOR_SHAPES = ((2, 4, 2), (4, 4, 1), (4, 4, 2), (8, 4, 1), (8, 4, 2), (16, 4, 1), (16, 4, 2),
                 (32, 4, 1), (2, 4, 1),
                 # a whole warp per (row, head) at d = 64 with 8-byte loads: no two rows of different
                 # degree share a warp (lockstep), at the price of narrower loads.
                 (32, 2, 1))
# ... and scalar shapes for any d: 4 lanes for d <= 16, 32 lanes up to 256.
SCALAR_SHAPES = ((4, 1, 1), (4, 1, 2), (4, 1, 4), (32, 1, 1), (32, 1, 2), (32, 1, 4), (32, 1, 8))
# 16-byte loads of the 2-byte types (8 halves per lane; float32 refuses them), appended after the
# float shapes so every older name keeps its place: d = 32, 64, 128 with one vector per lane, and
# d = 128 with two (fewer lanes, shorter shuffle trees).
HALF_SHAPES = ((4, 8, 1), (8, 8, 1), (16, 8, 1), (8, 8, 2))
SPLITS = ((512, 256), (2048, 512))      # (split, chunk) of fused_split
UNFUSED_SOFTMAX = ((32, 2048), (8, 512))  # (lanes, split) of the unfused row softmax


# ------------------------------------------------------------------ name expressions

def combine_expression(dtype: str = "float", index: str = "int") -> str:
    return f"attention_combine<{dtype_info(dtype).c_type}, {index}>"


def softmax_heavy_expression(s: Schedule, index: str = "int", dtype: str = "float") -> str:
    return f"attention_softmax_heavy<{index}, {s.threads}{scores_type_argument(dtype)}>"


def expressions(s: Schedule, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """Every kernel one schedule launches (the primary one first)."""
    if s.family == "fused":
        return (fused_expression(s, dtype, index),)
    if s.family == "fused_split":
        return (fused_expression(s, dtype, index), combine_expression(dtype, index))
    return (softmax_expression(s, index, dtype), softmax_heavy_expression(s, index, dtype))


def additive_expressions(dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """Every additive-score (GAT) instantiation over the fused schedules. They are not part of
    `expressions`: a tune of the dot-product attention never builds them; a plan builds its own on
    first use."""
    return tuple(sorted({additive_expression(s, dtype, index) for s in SCHEDULES
                         if s.family in ("fused", "fused_split") and vector_bytes_fit(s.vec, dtype) is None}
                        | {additive_stats_expression(index)}))


def file_expressions(source_file: str, dtype: str = "float", index: str = "int") -> tuple[str, ...]:
    """All instantiations of one kernel file over the registry (the schedules whose vector width
    `dtype` allows): compiled into one module."""
    return tuple(sorted({e for s in SCHEDULES if s.source_file == source_file
                         and vector_bytes_fit(s.vec, dtype) is None
                         for e in expressions(s, dtype, index)}))


# ------------------------------------------------------------------ the space

def _fused(lanes: int, vec: int, nv: int, **knobs) -> Schedule:
    return Schedule("attention", knobs.pop("family", "fused"), lanes=lanes, vec=vec, threads=THREADS,
                    tile=lanes * vec * nv, **knobs)


def _fused_space(shapes=VECTOR_SHAPES + SCALAR_SHAPES) -> list[Schedule]:
    out = []
    for (lanes, vec, nv), unroll in product(shapes, (2, 4)):
        if unroll * nv * vec > REGISTER_BUDGET or (vec == 1 and unroll != 2):
            continue
        if lanes % unroll == 0:  # a team of one head must hold whole steps
            out.append(_fused(lanes, vec, nv, unroll=unroll))
        # Teams of several heads share one staged batch of indices (fewer index loads per edge).
        hpb = min(4, 32 // lanes)
        if vec > 1 and unroll == 4 and hpb > 1:
            out.append(_fused(lanes, vec, nv, unroll=unroll, heads_per_block=hpb))
    return out


def _fused_split_space(shapes=VECTOR_SHAPES, scalar_shapes=SCALAR_SHAPES) -> list[Schedule]:
    out = []
    for (lanes, vec, nv), (split, chunk) in product(shapes, SPLITS):
        out.append(_fused(lanes, vec, nv, family="fused_split",
                          unroll=min(lanes, 4 if nv == 1 else 2),
                          split=split, chunk=chunk, reduce="twophase"))
    for lanes, vec, nv in scalar_shapes:
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
    if s.family not in attention_families.FAMILIES:
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


SCHEDULES: tuple[Schedule, ...] = tuple(_fused_space() + _fused_split_space() + _unfused_space()
                                        + _fused_space(HALF_SHAPES))
# No 16-byte fused_split shapes: their segment merge gave wrong outputs (relative errors up to
# inf) in float16/bfloat16 on the H200; long rows in half types take the 8-byte fused_split shapes.
for _s in SCHEDULES:
    check_space_rules(_s)
