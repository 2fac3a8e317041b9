"""The row walks: the cost model of a work item (a row, a chunk of a row, a run of edges) walked
edge by edge, and each built-in op's models on it. An op spec names its models in `cost_models`
(name -> model), and a family names the model of its walk (`Family.cost`, "rows" by default);
scheduler/estimate.py sums a schedule's launches over the device model (roofline.py). A model is
`(features, degree profile, k, schedule, device, heads, element bytes) -> [Launch]`. Why each
term is there: scheduler/estimate.py's docstring.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ...kernels.family import Family
from ...kernels.schedule import Schedule, family_of, is_family
from .gathers import Walker, edge_step_us, gather_bytes
from .roofline import FLOAT, INDEX, DeviceModel, DegreeProfile, Launch


def family_entry(s: Schedule) -> Family | None:
    """The schedule's family entry; None for a family no table knows (a schedule built by hand),
    which the generic row walk models."""
    return family_of(s.family) if is_family(s.family) else None


def walker(s: Schedule, k: int, threads: int | None = None) -> Walker:
    threads = threads or int(getattr(s, "lanes_per_item", s.lanes) or s.lanes)
    width = s.tile if s.tile else s.lanes * s.vec
    chunks = max(1, math.ceil(min(k, width) / (s.lanes * s.vec)))
    family = family_entry(s)
    staged = (threads >= 32 and s.lanes < 32) or bool(family and family.stages_edges)
    return Walker(threads, max(1, threads // s.lanes), width, chunks, staged)


@dataclass(frozen=True)
class RowWork:
    """The row-walking part of one op: what a single edge costs besides the walk itself."""
    dense_bytes: float        # the gathered operand(s), for the L2 hit rate
    gathers_per_edge: int
    row_in_bytes: float       # read once per row (SDDMM's X, attention's Q)
    out_bytes: float
    extra_us: float = 0.0     # per-edge latency beyond the gather (lane reductions, exp)
    instr: float = 4.0        # warp instructions per step and register chunk, beyond the load
    heads_in_warp: bool = False  # groups of one row's heads sit side by side in a warp (fused
                                 # attention): they walk the same edges, so only rows diverge


def _items(prof, rows, nnz, max_deg, cap, w, k, s, step_us, share, dram, l2, work, groups_per_warp, dev):
    """Launch of `rows` items walking `share` of the nonzeros (rows capped at `cap` edges) and the
    same share of the traffic. Edge slots sum their partials with log2(slots) shuffles per pass."""
    passes = w.passes(k)
    tiles = math.ceil(k / s.tile) if s.tile and s.tile < k else 1
    merge_steps = rows * passes * math.log2(w.slots) * dev.shuffle_latency_us / step_us
    steps = nnz * share * passes * prof.steps_per_edge(w.slots, cap) + merge_steps
    return Launch(rows * tiles, w.threads, s.threads, steps, step_us,
                  prof.lockstep_factor(groups_per_warp, cap=cap), min(max_deg, cap) * passes / tiles / w.slots,
                  dram * share, l2 * share, work.instr + (1 + s.vec) * w.chunks_per_pass,
                  work.gathers_per_edge * w.chunks_per_pass)


def row_launches(f, prof: DegreeProfile, k: int, s: Schedule, dev: DeviceModel, heads: int,
                 work: RowWork, elem: int = FLOAT) -> list[Launch]:
    """Rows (x heads) walked by groups; rows above `split` cut into `chunk`-edge pieces taken by a
    warp of edge slots and merged by atomics or a two-phase pass (float32 partials whatever the
    element size `elem`); `chunk` without `split` cuts every row (outputs per edge need no merge)."""
    nnz, rows = float(f.nnz) * heads, float(f.n_rows) * heads
    w = walker(s, k)
    dram_g, l2_g = gather_bytes(f, k, work.dense_bytes, dev, nnz * work.gathers_per_edge, w.width, elem)
    index_bytes = (f.n_rows + 1) * INDEX + f.nnz * (INDEX + elem)
    dram = index_bytes + dram_g + work.row_in_bytes + work.out_bytes
    max_deg = float(f.degree_max)
    team = max(1, s.heads_per_block)      # heads of one row walked side by side: no divergence
    lockstep_groups = max(1, 32 // (w.threads * team))
    if work.heads_in_warp:                # consecutive groups are the heads of one row
        lockstep_groups = max(1, math.ceil(max(1, 32 // w.threads) / max(heads, team)))
    step = edge_step_us(f, s, w, dev, work.dense_bytes, work.extra_us)
    if not s.split:
        cap = float(s.chunk) if s.chunk else math.inf
        pieces = rows + (nnz / s.chunk if s.chunk else 0.0)
        return [_items(prof, pieces, nnz, max_deg, cap, w, k, s, step, 1.0, dram, l2_g, work,
                       lockstep_groups, dev)]
    heavy_share = prof.nnz_share_above(s.split)
    heavy_rows = min(rows, prof.rows_above(s.split) * heads)
    light = _items(prof, rows - heavy_rows, nnz, max_deg, float(s.split), w, k, s, step,
                   1.0 - heavy_share, dram, l2_g, work, lockstep_groups, dev)
    if heavy_rows <= 0 or heavy_share <= 0:
        return [light]
    chunks = nnz * heavy_share / s.chunk + heavy_rows
    cw = walker(s, k, threads=32)         # a chunk is always a warp of 32/G edge slots
    heavy = _items(prof, chunks, nnz, max_deg, float(s.chunk), cw, k, s,
                   edge_step_us(f, s, cw, dev, work.dense_bytes, work.extra_us), heavy_share,
                   dram, l2_g, work, 1, dev)
    partial = chunks * k * FLOAT * (2 if work.gathers_per_edge > 1 else 1)
    if s.reduce == "atomic":   # read-modify-writes resolved in L2
        return [light, replace(heavy, l2_bytes=heavy.l2_bytes + 2 * partial)]
    merge = Launch(heavy_rows, 32, 256, chunks, dev.l2_latency_us, 1.0,
                   chunks / max(heavy_rows, 1.0), 2 * partial, 2 * partial, 4)
    return [light, heavy, merge]


# ------------------------------------------------------------------ per op

def spmm_rows(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Feature-parallel rows (and split rows' chunks): the row walk with one gather per edge."""
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        dense_bytes=f.n_cols * k * elem * heads, gathers_per_edge=1, row_in_bytes=0.0,
        out_bytes=f.n_rows * k * elem * heads), elem)


def _sddmm_terms(f, k, s, dev, heads, elem) -> tuple[float, float, float, float]:
    """SDDMM's bytes (gathered Y, X read once per row, per-edge outputs) and its per-edge lane
    reduction, whichever way a family walks."""
    return (f.n_cols * k * elem * heads, f.n_rows * k * elem * heads, f.nnz * elem * heads,
            dev.shuffle_latency_us * math.log2(s.lanes))


def sddmm_rows(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """A group keeps its row of X in registers and walks the row's edges."""
    dense, x_bytes, out_bytes, reduce_us = _sddmm_terms(f, k, s, dev, heads, elem)
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        dense, 1, x_bytes, out_bytes, extra_us=reduce_us, instr=4 + math.log2(s.lanes)), elem)


def sddmm_edges(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Edge-parallel: U consecutive edges per group, balanced by construction; X is re-gathered per
    edge, mostly from L2 because consecutive edges share their row."""
    dense, x_bytes, out_bytes, reduce_us = _sddmm_terms(f, k, s, dev, heads, elem)
    nnz = float(f.nnz) * heads
    w = walker(s, k)
    dram_y, l2_y = gather_bytes(f, k, dense, dev, nnz, w.width, elem)
    dram = f.nnz * (2 * INDEX + elem) + dram_y + x_bytes + out_bytes
    step = edge_step_us(f, s, w, dev, dense, reduce_us)
    return [Launch(nnz / max(1, s.unroll), w.threads, s.threads, nnz * w.passes(k), step, 1.0,
                   max(1, s.unroll) * w.passes(k), dram, 2 * l2_y,
                   6 + math.log2(s.lanes) + 2 * (1 + s.vec) * w.chunks_per_pass)]


def unfused_substeps(k: int, s: Schedule) -> tuple[Schedule, Schedule]:
    """The SDDMM and SpMM sub-steps the unfused pipeline is costed with: a fixed representative
    pair (an edge-family SDDMM and a split SpMM, vector loads when d allows, a group as wide as d,
    long rows split at the schedule's `split`). They are NOT the ones its plan runs:
    backends/attention_unfused.substep_schedules picks those at prepare, by tiers (a row-chunked
    rowgroup SDDMM first; the SpMM family paired with the softmax's lanes), and the tuner measures
    the plan as prepared. The estimate only has to rank the unfused schedules among the others."""
    vec = 4 if k % 4 == 0 else 1
    lanes = max(1, min(32, 1 << max(0, math.ceil(math.log2(max(1, k // vec))))))
    sddmm = Schedule("attention", "edge", lanes=lanes, vec=vec, threads=256, unroll=2)
    spmm = Schedule("attention", "split", lanes=lanes, vec=vec, threads=256, split=s.split or 2048,
                    chunk=512, reduce="atomic", unroll=4)
    return sddmm, spmm


def attention_unfused(substep_models):
    """The unfused pipeline's model: SDDMM writes scores, a row softmax reads and rewrites them,
    SpMM reads the probabilities; the two sub-steps are costed by their own ops' models
    (`substep_models`: {"sddmm": models, "spmm": models}, the specs' `cost_models`)."""

    def model(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
        scores = f.nnz * heads * elem
        sm_threads = max(1, s.lanes)
        softmax = Launch(f.n_rows * heads, sm_threads, s.threads, f.nnz * heads / sm_threads,
                         dev.l2_latency_us, prof.lockstep_factor(max(1, 32 // sm_threads), cap=s.split or math.inf),
                         min(f.degree_max, s.split or math.inf) / sm_threads, 3 * scores, 3 * scores, 6)
        sddmm, spmm = unfused_substeps(k, s)
        return (launches(substep_models["sddmm"], f, prof, k, sddmm, dev, heads, elem) + [softmax]
                + launches(substep_models["spmm"], f, prof, k, spmm, dev, heads, elem))
    return model


def launches(models, f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """The launches of `s` by the model its family names (`Family.cost`) among `models` (an op
    spec's `cost_models`); a family no table knows gets the row walk."""
    family = family_entry(s)
    return models[family.cost if family else "rows"](f, prof, k, s, dev, heads, elem)


def attention_rows(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Fused online softmax: per edge a K-row gather and dot (lane reduction, exp) and a V-row
    gather (independent of the score, so overlapped); scores never touch memory."""
    q_bytes = f.n_rows * heads * k * elem
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        2 * f.n_cols * heads * k * elem, 2, q_bytes, q_bytes,
        extra_us=dev.shuffle_latency_us * (math.log2(s.lanes) + 2), instr=8 + math.log2(s.lanes),
        heads_in_warp=True), elem)
