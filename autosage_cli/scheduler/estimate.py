"""Cost model: a cheap, pure prediction of a schedule's time from the graph's features.

It only has to *rank* the registry well enough that the true best schedule is among the top-k that
get probed; the probe decides. Each launch is modelled by the resource that binds it:

* **bytes** — compulsory traffic (indptr, indices, values, gathered dense rows, output) over DRAM
  bandwidth; gathers read whole 32-byte sectors and hit L2 when the dense operand fits in L2 or the
  graph's locality keeps neighbours close (on the H200, locality made cuSPARSE 1.5-1.9x faster on
  products-sized graphs);
* **latency** — a group walks its row edge by edge; each edge costs a dependent index load and a
  gather (hidden only by unrolling), once per feature pass of `lanes x vec` features. Few lanes or
  narrow vectors at a wide K mean many passes; many lanes at a small K mean idle lanes and few groups
  in flight (Little's law: concurrency = resident threads / lanes);
* **issue** — warp instructions over the SMs' issue rate (matters when lanes sit idle);
* **load path** — every warp-wide gather load holds the SM's load/store path for LSU_CYCLES
  whatever its width, added to the bytes' time: the same sectors fetched with scalar loads take
  more instructions (fitted to the H200 attention runs of 6a0dd38: at H=8, d=64 the time grew by
  ~13 ms per extra load per edge on reddit-like, 917M edge-heads: ~3.7 cycles per load per SM);
* **critical path** — the longest single work item: a whole row of `degree_max` edges for an unsplit
  row-per-group schedule, at most `split`/`chunk` edges for a split one. Items reach the SMs in id
  order, so the longest may start last: its path is ADDED to the balanced time (Graham's bound),
  not hidden behind it (on reddit-like, attention H=1, every unsplit fused schedule ran 11.6-22 ms
  and the split ones 7-10 ms at the same bytes). Groups sharing a warp wait for the longest of their
  rows (expected maximum from the degree quantiles) — but the groups of one row's heads (fused
  attention) walk the same edges and do not diverge;
* **launches** — a fixed overhead per kernel launch.

The constants describe the H200 (132 SMs, 60 MiB L2, 4.17 TB/s measured copy bandwidth) and are
rough on purpose: a model that ranks is enough, and its errors are caught by probing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .. import dtypes, ops as op_specs
from ..kernels import schedule as schedule_mod
from ..kernels.family import Family
from ..kernels.schedule import Schedule, family_of, is_family
from .edge_models import parreduce_spmm, stream_spmm, vector_spmm
from .gathers import Walker, edge_step_us, gather_bytes
from .roofline import FLOAT, INDEX, DeviceModel, H200, DegreeProfile, Launch, launch_ms


# ------------------------------------------------------------------ the row walks

def _family(s: Schedule) -> Family | None:
    """The schedule's family entry; None for a family no table knows (a schedule built by hand),
    which the generic row walk models."""
    return family_of(s.family) if is_family(s.family) else None


def walker(s: Schedule, k: int, threads: int | None = None) -> Walker:
    threads = threads or int(getattr(s, "lanes_per_item", s.lanes) or s.lanes)
    width = s.tile if s.tile else s.lanes * s.vec
    chunks = max(1, math.ceil(min(k, width) / (s.lanes * s.vec)))
    family = _family(s)
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

def _spmm_rows(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Feature-parallel rows (and split rows' chunks): the row walk with one gather per edge."""
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        dense_bytes=f.n_cols * k * elem * heads, gathers_per_edge=1, row_in_bytes=0.0,
        out_bytes=f.n_rows * k * elem * heads), elem)


def _sddmm_terms(f, k, s, dev, heads, elem) -> tuple[float, float, float, float]:
    """SDDMM's bytes (gathered Y, X read once per row, per-edge outputs) and its per-edge lane
    reduction, whichever way a family walks."""
    return (f.n_cols * k * elem * heads, f.n_rows * k * elem * heads, f.nnz * elem * heads,
            dev.shuffle_latency_us * math.log2(s.lanes))


def _sddmm_rows(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """A group keeps its row of X in registers and walks the row's edges."""
    dense, x_bytes, out_bytes, reduce_us = _sddmm_terms(f, k, s, dev, heads, elem)
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        dense, 1, x_bytes, out_bytes, extra_us=reduce_us, instr=4 + math.log2(s.lanes)), elem)


def _sddmm_edges(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
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


def _unfused_substeps(k: int, s: Schedule) -> tuple[Schedule, Schedule]:
    """Representative SDDMM and SpMM sub-steps of the unfused pipeline (the real ones are chosen
    at prepare): vector loads when d allows, a group as wide as d, long rows split."""
    vec = 4 if k % 4 == 0 else 1
    lanes = max(1, min(32, 1 << max(0, math.ceil(math.log2(max(1, k // vec))))))
    sddmm = Schedule("attention", "edge", lanes=lanes, vec=vec, threads=256, unroll=2)
    spmm = Schedule("attention", "split", lanes=lanes, vec=vec, threads=256, split=s.split or 2048,
                    chunk=512, reduce="atomic", unroll=4)
    return sddmm, spmm


def _attention_unfused(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """SDDMM writes scores, a row softmax reads and rewrites them, SpMM reads the probabilities."""
    scores = f.nnz * heads * elem
    sm_threads = max(1, s.lanes)
    softmax = Launch(f.n_rows * heads, sm_threads, s.threads, f.nnz * heads / sm_threads,
                     dev.l2_latency_us, prof.lockstep_factor(max(1, 32 // sm_threads), cap=s.split or math.inf),
                     min(f.degree_max, s.split or math.inf) / sm_threads, 3 * scores, 3 * scores, 6)
    sddmm, spmm = _unfused_substeps(k, s)
    return (_launches(f, prof, k, sddmm, dev, heads, elem, "sddmm") + [softmax]
            + _launches(f, prof, k, spmm, dev, heads, elem, "spmm"))


def _attention_rows(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Fused online softmax: per edge a K-row gather and dot (lane reduction, exp) and a V-row
    gather (independent of the score, so overlapped); scores never touch memory."""
    q_bytes = f.n_rows * heads * k * elem
    return row_launches(f, prof, k, s, dev, heads, RowWork(
        2 * f.n_cols * heads * k * elem, 2, q_bytes, q_bytes,
        extra_us=dev.shuffle_latency_us * (math.log2(s.lanes) + 2), instr=8 + math.log2(s.lanes),
        heads_in_warp=True), elem)


def spec_rows(op: str):
    """The row walk of an op that has no cost models here, from its spec alone: each edge gathers
    the spec's dense rows of width k (`gathers_per_edge`, from operands of n_cols rows), and the
    output is written once; a new op is ranked by this until it brings models of its own."""
    spec = op_specs.get(op)

    def model(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
        gathers = max(1, spec.gathers_per_edge(heads) // max(1, heads))
        out_elements = math.prod(spec.output_shape(f, k, heads))
        return row_launches(f, prof, k, s, dev, heads, RowWork(
            dense_bytes=f.n_cols * k * elem * heads * gathers, gathers_per_edge=gathers,
            row_in_bytes=0.0, out_bytes=out_elements * elem), elem)
    return model


# The cost models per op, by name: a family names the model of its walk (Family.cost, "rows" by
# default), so a new family that walks its work like an existing one needs no change here. An op
# without an entry is ranked by `spec_rows`.
COST_MODELS = {
    "spmm": {"rows": _spmm_rows, "edge-parallel": vector_spmm,
             "persistent-edge-parallel": parreduce_spmm, "stream": stream_spmm},
    "sddmm": {"rows": _sddmm_rows, "edges": _sddmm_edges},
    "attention": {"rows": _attention_rows, "unfused": _attention_unfused},
}


def _launches(f, prof, k, s, dev, heads, elem, op) -> list[Launch]:
    """The launches of `s` running `op`, by its family's cost model. A sub-step of a composite
    schedule is costed as the op it computes (the unfused attention's SDDMM and SpMM)."""
    family = _family(s)
    models = COST_MODELS.get(op) or {"rows": spec_rows(op)}
    return models[family.cost if family else "rows"](f, prof, k, s, dev, heads, elem)


def estimate_ms(features, op: str, k: int, schedule: Schedule, heads: int = 1,
                device: DeviceModel = H200, profile: DegreeProfile | None = None,
                dtype: str = dtypes.DEFAULT) -> float:
    """Predicted time (ms) of `schedule` running `op` at width k (d for attention) with `heads`
    on `dtype` operands (dense, value and output bytes in its element size)."""
    if op not in op_specs.names():
        raise ValueError(f"unknown op {op!r}")
    prof = profile or DegreeProfile(features)
    elem = dtypes.itemsize(dtype)
    return sum(launch_ms(w, device)
               for w in _launches(features, prof, k, schedule, device, heads, elem, op))


def estimate_vendor_ms(features, op: str, k: int, heads: int = 1, device: DeviceModel = H200,
                       dtype: str = dtypes.DEFAULT) -> float:
    """A rough vendor time, shown beside the native estimates (the probe measures the real one):
    the same compulsory traffic at 70% of the bandwidth a native kernel is credited with (cuSPARSE
    is nnz-balanced, so no critical path), plus one launch per stage. The op's spec says what is
    gathered per edge, what is streamed and how many stages a vendor composition takes; dense
    bytes and A's values are in the dtype's element size."""
    spec, size = op_specs.get(op), dtypes.itemsize(dtype)
    nnz, n = float(features.nnz), float(features.n_rows)
    gathers = nnz * spec.gathers_per_edge(heads)
    dram_g, l2_g = gather_bytes(features, k, features.n_cols * k * size * heads, device, gathers,
                                element_bytes=size)
    out = spec.vendor_stream(n, nnz, k, heads) * size
    stages = spec.vendor_stages
    dram = (n + 1) * INDEX + nnz * (INDEX + size) * stages + dram_g + out
    memory_us = max(dram / (device.dram_tbps * 1e6), l2_g / (device.l2_tbps * 1e6)) / 0.7
    return (memory_us + stages * device.launch_us) / 1e3


def rank(features, op: str, k: int, heads: int = 1, device: DeviceModel = H200,
         schedules=None, dtype: str = dtypes.DEFAULT) -> list[tuple[Schedule, float]]:
    """Supported schedules of `op` in `dtype` (schedule.candidates, or the given ones that support
    k/heads/dtype), with their estimates, fastest first. Ties go to the simpler schedule (unsplit,
    then by name)."""
    pool = (schedule_mod.candidates(op, k, heads, dtype) if schedules is None
            else [s for s in schedules if s.op == op and s.supports(k, heads, dtype) is None])
    prof = DegreeProfile(features)
    scored = [(s, estimate_ms(features, op, k, s, heads, device, prof, dtype)) for s in pool]
    return sorted(scored, key=lambda sm: (sm[1], sm[0].split > 0, sm[0].name))


def shortlist(ranked: list[tuple[Schedule, float]], top_k: int,
              spread: float = 2.0) -> list[tuple[Schedule, float]]:
    """The `top_k` to probe: first the best schedule of every family whose best estimate is within
    `spread` x the overall best (estimates within a family share their errors, so one
    representative per plausible family guards against a family-wide miss), then the rest by rank.
    Returned in estimate order."""
    if not ranked or top_k <= 0:
        return []
    best = ranked[0][1]
    picked, seen = [], set()
    for s, ms in ranked:
        if s.family not in seen and ms <= spread * best and len(picked) < top_k:
            picked.append((s, ms))
        seen.add(s.family)
    for item in ranked:
        if len(picked) >= top_k:
            break
        if item not in picked:
            picked.append(item)
    order = {id(s): i for i, (s, _) in enumerate(ranked)}
    return sorted(picked, key=lambda sm: order[id(sm[0])])
