"""The roofline pieces of the cost model: the device's rates, the degree distribution as the
quantiles describe it, and the time of one launch from the resource that binds it (estimate.py
explains each term)."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

FLOAT = 4          # bytes per float32
INDEX = 4          # bytes per int32 index
SECTOR = 32        # bytes per DRAM/L2 sector: the granularity of a gather
LSU_CYCLES = 3.7   # SM cycles per warp-wide gather load (fitted: see "load path" in estimate.py)


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
    chained_launch_us: float = 1.0    # a plan's later launch, queued behind its first: the gap only
    lsu_cycles: float = LSU_CYCLES    # SM cycles one warp-wide gather load holds the load path


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
    """The row-degree distribution rebuilt from the feature quantiles (min, q50, q90, q99, max).
    log(1 + degree) is interpolated against -log(1 - p), a Pareto-like tail: between q99 and the
    maximum (one row, p = 1 - 1/2n) the degrees climb only in the last few rows, as they do in
    power-law graphs (interpolating in p would put hundreds of rows near a lone hub's degree).
    The probability grid is dense in the tail, where the rows that hurt live."""

    def __init__(self, features):
        n = max(1, int(features.n_rows))
        p_max = max(0.995, 1.0 - 0.5 / n)
        knots_p = np.array([0.0, 0.5, 0.9, 0.99, p_max])
        knots_d = np.maximum.accumulate(np.array([
            features.degree_min, features.degree_q50, features.degree_q90, features.degree_q99,
            features.degree_max], dtype=float))
        edges = np.unique(np.concatenate([np.linspace(0.0, 0.99, 257),
                                          1.0 - np.geomspace(0.01, min(0.005, 0.25 / n), 256), [1.0]]))
        mids = 0.5 * (edges[:-1] + edges[1:])
        tail = lambda p: -np.log1p(-np.minimum(p, p_max))  # noqa: E731  (beyond p_max: the max)
        self.edges = edges
        self.weights = np.diff(edges)
        self.degrees = np.expm1(np.interp(tail(mids), tail(knots_p), np.log1p(knots_d)))
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

    def steps_per_edge(self, slots: int, cap: float = math.inf) -> float:
        """Steps per nonzero when `slots` edges of a row go side by side: ceil(d / slots) / d
        averaged over the nonzeros (short rows leave slots idle), degrees capped at `cap`."""
        d = np.minimum(self.degrees, cap)
        total = float((self.weights * d).sum())
        if slots <= 1 or total <= 0:
            return 1.0
        return float((self.weights * np.ceil(d / slots)).sum()) / total

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
    lanes: int                 # threads per item
    threads: int
    edge_steps: float          # sum over items of edges x feature passes
    step_us: float             # latency of one edge-step of one group (after unrolling)
    lockstep: float            # >= 1: warp-lockstep waste
    longest_steps: float       # edge-steps of the longest item (the critical path)
    dram_bytes: float
    l2_bytes: float
    instr_per_step: float
    loads_per_step: float = 0.0  # gather load instructions per lane and step (the LSU's share)
    chained: bool = False        # queued right behind another launch of the same plan


SOFT_MAX_P = 4   # roofline terms combine as a 4-norm: ~the binding one, but near-ties still rank


def _soft_max(*terms: float) -> float:
    return sum(t ** SOFT_MAX_P for t in terms) ** (1.0 / SOFT_MAX_P)


def launch_ms(w: Launch, dev: DeviceModel) -> float:
    per_sm = min(dev.threads_per_sm, dev.blocks_per_sm * w.threads)
    resident_groups = dev.sms * per_sm / w.lanes
    concurrency = max(1.0, min(w.items, resident_groups))
    latency_us = w.edge_steps * w.step_us * w.lockstep / concurrency
    warp_instr = w.edge_steps * (w.lanes / 32) * w.lockstep * w.instr_per_step
    issue_us = warp_instr / (dev.sms * dev.issue_per_sm_cycle * dev.clock_ghz * 1e3)
    # Every warp-wide gather load holds the SM's load/store path for some cycles whatever its width,
    # on top of the bytes it moves: a narrow load moves the same sectors in more instructions.
    lsu_us = (w.edge_steps * (w.lanes / 32) * w.lockstep * w.loads_per_step * dev.lsu_cycles
              / (dev.sms * dev.clock_ghz * 1e3))
    memory_us = max(w.dram_bytes / (dev.dram_tbps * 1e6), w.l2_bytes / (dev.l2_tbps * 1e6)) + lsu_us
    critical_us = w.longest_steps * w.step_us
    # Items go to the SMs in id order, so the longest one may start last: its critical path adds
    # to the balanced time (Graham's list-scheduling bound) instead of hiding behind it.
    launch_us = dev.chained_launch_us if w.chained else dev.launch_us
    return (_soft_max(latency_us, issue_us, memory_us) + critical_us + launch_us) / 1e3
