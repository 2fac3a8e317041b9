"""Cost model: a cheap, pure prediction of a schedule's time from the graph's features.

It only has to *rank* the registry well enough that the true best schedule is among the top-k that
get probed; the probe decides. Each launch is modelled by the resource that binds it:

* **bytes** — compulsory traffic (indptr, indices, values, gathered dense rows, output) over DRAM
  bandwidth; gathers read whole 32-byte sectors and hit L2 when the dense operand fits in L2 or the
  graph's locality keeps neighbours close (BENCHMARK.md §7: locality made cuSPARSE 1.5-1.9x faster on
  products-sized graphs);
* **latency** — a group walks its row edge by edge; each edge costs a dependent index load and a
  gather (hidden only by unrolling), once per feature pass of `lanes x vec` features. Few lanes or
  narrow vectors at a wide K mean many passes; many lanes at a small K mean idle lanes and few groups
  in flight (Little's law: concurrency = resident threads / lanes);
* **issue** — warp instructions over the SMs' issue rate (matters when lanes sit idle);
* **critical path** — the longest single work item: a whole row of `degree_max` edges for an unsplit
  row-per-group schedule, at most `split`/`chunk` edges for a split one; groups sharing a warp also
  wait for the longest of their rows (expected maximum from the degree quantiles);
* **launches** — a fixed overhead per kernel launch.

The constants describe the H200 (DESIGN.md facts: 132 SMs, 60 MiB L2, 4.17 TB/s copy) and are
rough on purpose: a model that ranks is enough, and its errors are caught by probing.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from ..kernels import schedule as schedule_mod
from ..kernels.schedule import Schedule

FLOAT = 4          # bytes per float32
INDEX = 4          # bytes per int32 index
SECTOR = 32        # bytes per DRAM/L2 sector: the granularity of a gather


@dataclass(frozen=True)
class DeviceModel:
    name: str = "NVIDIA H200"
    sms: int = 132
    threads_per_sm: int = 2048
    blocks_per_sm: int = 32
    clock_ghz: float = 1.98
    issue_per_sm_cycle: int = 4       # four warp schedulers per SM
    dram_tbps: float = 4.0            # streaming read bandwidth (copy: 4.17 TB/s read + write)
    l2_tbps: float = 10.0             # L2 hit bandwidth, ~2.5x DRAM on Hopper
    l2_bytes: int = 60 * 2**20
    dram_latency_us: float = 0.5      # a dependent DRAM load under load (~1000 cycles)
    l2_latency_us: float = 0.15      # ~300 cycles
    l1_latency_us: float = 0.02      # ~40 cycles
    shuffle_latency_us: float = 0.015  # one warp shuffle step (~30 cycles)
    launch_us: float = 4.0            # back-to-back launch overhead and gap

    @property
    def resident_threads(self) -> int:
        return self.sms * self.threads_per_sm


H200 = DeviceModel()


def device_model(info: dict | None) -> DeviceModel:
    """The model for a device described by environment.device_info() (H200 numbers for the rest)."""
    if not info:
        return H200
    return replace(H200, name=str(info.get("name", H200.name)),
                   sms=int(info.get("sms") or H200.sms),
                   l2_bytes=int(info.get("l2_bytes") or H200.l2_bytes))


# ------------------------------------------------------------------ degree distribution

class DegreeProfile:
    """The row-degree distribution rebuilt from the feature quantiles (min, q50, q90, q99, max),
    interpolated in log(1 + degree) on a probability grid that is dense in the tail, where the
    rows that hurt live."""

    def __init__(self, features):
        n = max(1, int(features.n_rows))
        p_max = max(0.995, 1.0 - 0.5 / n)
        knots_p = np.array([0.0, 0.5, 0.9, 0.99, p_max, 1.0])
        knots_d = np.maximum.accumulate(np.array([
            features.degree_min, features.degree_q50, features.degree_q90, features.degree_q99,
            features.degree_max, features.degree_max], dtype=float))
        edges = np.unique(np.concatenate([np.linspace(0.0, 0.99, 257),
                                          1.0 - np.geomspace(0.01, 0.5 / n if n > 50 else 1e-4, 200),
                                          [1.0]]))
        mids = 0.5 * (edges[:-1] + edges[1:])
        self.edges = edges
        self.weights = np.diff(edges)
        self.degrees = np.expm1(np.interp(mids, knots_p, np.log1p(knots_d)))
        self.n_rows = n
        self.max = float(features.degree_max)

    def rows_above(self, threshold: float) -> float:
        """Expected number of rows with more than `threshold` nonzeros."""
        above = float(self.weights[self.degrees > threshold].sum()) * self.n_rows
        return max(above, 1.0) if self.max > threshold else above

    def nnz_share_above(self, threshold: float) -> float:
        """Share of the nonzeros held by rows with more than `threshold` nonzeros."""
        mass = self.weights * self.degrees
        total = mass.sum()
        return float(mass[self.degrees > threshold].sum() / total) if total > 0 else 0.0

    def lockstep_factor(self, groups_per_warp: int, cap: float = math.inf) -> float:
        """Rows sharing a warp run in lockstep: the warp takes as long as its longest row. Returns
        E[max of g row degrees] / E[degree], with degrees capped at `cap` (a split threshold)."""
        if groups_per_warp <= 1:
            return 1.0
        d = np.minimum(self.degrees, cap)
        mean = float((self.weights * d).sum())
        if mean <= 0:
            return 1.0
        cdf_hi = np.cumsum(self.weights)
        cdf_lo = cdf_hi - self.weights
        exp_max = float((d * (cdf_hi ** groups_per_warp - cdf_lo ** groups_per_warp)).sum())
        return max(1.0, exp_max / mean)


# ------------------------------------------------------------------ one launch

@dataclass(frozen=True)
class Launch:
    """The abstract work of one kernel launch."""
    items: float               # work items (one group each)
    lanes: int
    threads: int
    edge_steps: float          # sum over items of edges x feature passes
    step_us: float             # latency of one edge-step of one group (after unrolling)
    lockstep: float            # >= 1: warp-lockstep waste
    longest_steps: float       # edge-steps of the longest item (the critical path)
    dram_bytes: float
    l2_bytes: float
    instr_per_step: float


def launch_ms(w: Launch, dev: DeviceModel) -> float:
    per_sm = min(dev.threads_per_sm, dev.blocks_per_sm * w.threads)
    resident_groups = dev.sms * per_sm / w.lanes
    concurrency = max(1.0, min(w.items, resident_groups))
    latency_us = w.edge_steps * w.step_us * w.lockstep / concurrency
    warp_instr = w.edge_steps * (w.lanes / 32) * w.lockstep * w.instr_per_step
    issue_us = warp_instr / (dev.sms * dev.issue_per_sm_cycle * dev.clock_ghz * 1e3)
    memory_us = max(w.dram_bytes / (dev.dram_tbps * 1e6), w.l2_bytes / (dev.l2_tbps * 1e6))
    critical_us = w.longest_steps * w.step_us
    return (max(latency_us, issue_us, memory_us, critical_us) + dev.launch_us) / 1e3


# ------------------------------------------------------------------ shared pieces

def feature_passes(k: int, s: Schedule) -> int:
    """Passes a group makes over each edge: ceil(K / (lanes x vec)) within each feature tile."""
    width = s.lanes * s.vec
    if s.tile and s.tile < k:
        full, rest = divmod(k, s.tile)
        return full * math.ceil(s.tile / width) + (math.ceil(rest / width) if rest else 0)
    return math.ceil(k / width)


def gather_hit_rate(f, dense_bytes: float, dev: DeviceModel) -> float:
    """Share of gathers served by L2: all of them when the dense operand fits in L2, else those
    that locality keeps close to recently gathered rows."""
    fits = min(1.0, dev.l2_bytes / max(dense_bytes, 1.0))
    locality = min(1.0, max(0.0, float(getattr(f, "locality", 0.0) or 0.0)))
    return 1.0 - (1.0 - fits) * (1.0 - locality)


def gather_bytes(f, k: int, dense_bytes: float, dev: DeviceModel, gathers: float):
    """(DRAM bytes, L2 bytes) of `gathers` row gathers of width k from a dense operand of
    `dense_bytes`. A gather reads whole sectors; each row is read from DRAM at least once."""
    row = math.ceil(k * FLOAT / SECTOR) * SECTOR
    hit = gather_hit_rate(f, dense_bytes, dev)
    touched = min(dense_bytes, gathers * k * FLOAT)
    return max(touched, (1.0 - hit) * gathers * row), gathers * row


def edge_step_us(f, s: Schedule, dev: DeviceModel, dense_bytes: float, extra_us: float = 0.0) -> float:
    """One edge of one group: the gather (L2 or DRAM latency, by hit rate) behind the edge's
    column index, divided by the edges kept in flight (unroll). The index comes from L1 (a line
    holds 32 consecutive indices) except once per 32 edges; warp-row families stage 32
    (column, value) pairs with one coalesced load, which takes the index off the chain."""
    hit = gather_hit_rate(f, dense_bytes, dev)
    gather_us = hit * dev.l2_latency_us + (1.0 - hit) * dev.dram_latency_us
    index_us = dev.l2_latency_us / 32 + (0.0 if s.family == "warprow" else dev.l1_latency_us)
    return (index_us + gather_us + extra_us) / max(1, s.unroll)


def _row_launches(f, prof: DegreeProfile, k: int, s: Schedule, dev: DeviceModel, *,
                  heads: int, dense_bytes: float, gathers_per_edge: int, step_us: float,
                  row_in_bytes: float, out_bytes: float, instr: float) -> list[Launch]:
    """Row-per-group work (the rows, heads and feature tiles of one op), split or not."""
    nnz = float(f.nnz) * heads
    rows = float(f.n_rows) * heads
    passes = feature_passes(k, s)
    tiles = math.ceil(k / s.tile) if s.tile and s.tile < k else 1
    gpw = max(1, 32 // s.lanes)
    dram_g, l2_g = gather_bytes(f, k, dense_bytes, dev, nnz * gathers_per_edge)
    index_bytes = (f.n_rows + 1) * INDEX + f.nnz * (INDEX + FLOAT)
    dram = index_bytes + dram_g + row_in_bytes + out_bytes
    max_deg = float(f.degree_max)
    if not s.split or max_deg <= s.split:
        return [Launch(rows * tiles, s.lanes, s.threads, nnz * passes, step_us,
                       prof.lockstep_factor(gpw), max_deg * passes / max(1, tiles),
                       dram, l2_g, instr)]
    heavy_share = prof.nnz_share_above(s.split)
    heavy_rows = prof.rows_above(s.split) * heads
    chunks = nnz * heavy_share / s.chunk + heavy_rows
    light = Launch((rows - heavy_rows) * tiles, s.lanes, s.threads, nnz * (1 - heavy_share) * passes,
                   step_us, prof.lockstep_factor(gpw, cap=s.split), s.split * passes / max(1, tiles),
                   dram * (1 - heavy_share), l2_g * (1 - heavy_share), instr)
    partial = chunks * k * FLOAT
    # Atomics are read-modify-writes resolved in L2; a two-phase merge writes partials and reads them.
    heavy = Launch(chunks * tiles, s.lanes, s.threads, nnz * heavy_share * passes, step_us, 1.0,
                   min(max_deg, s.chunk) * passes / max(1, tiles), dram * heavy_share,
                   l2_g * heavy_share + (2 * partial if s.reduce == "atomic" else 0), instr)
    launches = [light, heavy]
    if s.reduce == "twophase":
        launches.append(Launch(heavy_rows, 32, 256, chunks, dev.l2_latency_us, 1.0,
                               chunks / max(heavy_rows, 1), 2 * partial, 2 * partial, 4))
    return launches


# ------------------------------------------------------------------ per op

def _spmm(f, prof, k, s, dev, heads=1) -> list[Launch]:
    dense = f.n_cols * k * FLOAT * heads
    return _row_launches(f, prof, k, s, dev, heads=heads, dense_bytes=dense, gathers_per_edge=1,
                         step_us=edge_step_us(f, s, dev, dense), row_in_bytes=0.0,
                         out_bytes=f.n_rows * k * FLOAT * heads, instr=4 + s.vec)


def _sddmm(f, prof, k, s, dev, heads=1) -> list[Launch]:
    dense = f.n_cols * k * FLOAT * heads
    step_us = edge_step_us(f, s, dev, dense, dev.shuffle_latency_us * math.log2(s.lanes))
    x_bytes = f.n_rows * k * FLOAT * heads
    out_bytes = f.nnz * FLOAT * heads
    if s.family != "edge":
        # The group keeps its row of X in registers and walks the row's edges.
        return _row_launches(f, prof, k, s, dev, heads=heads, dense_bytes=dense, gathers_per_edge=1,
                             step_us=step_us, row_in_bytes=x_bytes, out_bytes=out_bytes,
                             instr=5 + s.vec + math.log2(s.lanes))
    # Edge-parallel: balanced by construction; X is re-gathered per edge, mostly from L2 because
    # consecutive edges share their row.
    nnz = float(f.nnz) * heads
    per_item = max(1, s.chunk or s.unroll)
    passes = feature_passes(k, s)
    dram_y, l2_y = gather_bytes(f, k, dense, dev, nnz)
    dram = f.nnz * (2 * INDEX + FLOAT) + dram_y + x_bytes + out_bytes
    return [Launch(nnz / per_item, s.lanes, s.threads, nnz * passes, step_us, 1.0, per_item * passes,
                   dram, 2 * l2_y, 6 + 2 * s.vec + math.log2(s.lanes))]


def _attention(f, prof, k, s, dev, heads=1) -> list[Launch]:
    if "unfused" in s.family or "pipeline" in s.family:
        # SDDMM writes scores, a row softmax reads and rewrites them, SpMM reads the probabilities.
        scores = f.nnz * heads * FLOAT
        softmax = Launch(f.n_rows * heads, 32, 256, f.nnz * heads / 32, dev.l2_latency_us, 1.0,
                         f.degree_max / 32, 3 * scores, 3 * scores, 6)
        return (_sddmm(f, prof, k, replace(s, family="rowgroup"), dev, heads) + [softmax]
                + _spmm(f, prof, k, replace(s, family="subwarp"), dev, heads))
    # Fused online softmax: per edge a K-row gather and dot (lane reduction, exp) and a V-row
    # gather (independent of the score, so overlapped); scores never touch memory.
    dense = 2 * f.n_cols * heads * k * FLOAT
    step_us = edge_step_us(f, s, dev, dense, dev.shuffle_latency_us * (math.log2(s.lanes) + 2))
    q_bytes = f.n_rows * heads * k * FLOAT
    return _row_launches(f, prof, k, s, dev, heads=heads, dense_bytes=dense, gathers_per_edge=2,
                         step_us=step_us, row_in_bytes=q_bytes, out_bytes=q_bytes,
                         instr=8 + 2 * s.vec + math.log2(s.lanes))


_OPS = {"spmm": _spmm, "sddmm": _sddmm, "attention": _attention}


def estimate_ms(features, op: str, k: int, schedule: Schedule, heads: int = 1,
                device: DeviceModel = H200, profile: DegreeProfile | None = None) -> float:
    """Predicted time (ms) of `schedule` running `op` at width k (d for attention) with `heads`."""
    if op not in _OPS:
        raise ValueError(f"unknown op {op!r}")
    prof = profile or DegreeProfile(features)
    return sum(launch_ms(w, device) for w in _OPS[op](features, prof, k, schedule, device, heads))


def estimate_vendor_ms(features, op: str, k: int, heads: int = 1, device: DeviceModel = H200) -> float:
    """A rough vendor time, shown beside the native estimates (the probe measures the real one):
    the same compulsory traffic at 70% of the bandwidth a native kernel is credited with (cuSPARSE
    is nnz-balanced, so no critical path), plus one launch per stage."""
    nnz, n = float(features.nnz), float(features.n_rows)
    gathers = nnz * heads * (2 if op == "attention" else 1)
    dram_g, l2_g = gather_bytes(features, k, features.n_cols * k * FLOAT * heads, device, gathers)
    out = nnz * FLOAT + n * k * FLOAT if op == "sddmm" else n * k * FLOAT * heads
    stages = 3 if op == "attention" else 1
    dram = (n + 1) * INDEX + nnz * (INDEX + FLOAT) * stages + dram_g + out
    memory_us = max(dram / (device.dram_tbps * 1e6), l2_g / (device.l2_tbps * 1e6)) / 0.7
    return (memory_us + stages * device.launch_us) / 1e3


def rank(features, op: str, k: int, heads: int = 1, device: DeviceModel = H200,
         schedules=None) -> list[tuple[Schedule, float]]:
    """Supported schedules of `op` (schedule.candidates, or the given ones that support k/heads),
    with their estimates, fastest first. Ties go to the simpler schedule (unsplit, then by name)."""
    pool = (schedule_mod.candidates(op, k, heads) if schedules is None
            else [s for s in schedules if s.op == op and s.supports(k, heads) is None])
    prof = DegreeProfile(features)
    scored = [(s, estimate_ms(features, op, k, s, heads, device, prof)) for s in pool]
    return sorted(scored, key=lambda sm: (sm[1], sm[0].split > 0, sm[0].name))
