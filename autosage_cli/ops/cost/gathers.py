"""What the cost models share about gathers: how often a gathered dense row is served by L2, the
bytes gathers move (whole 32-byte sectors), how a family walks a row (`Walker`) and what one step
of that walk costs in latency. estimate.py (the row walks) and edge_models.py (the edge-parallel
SpMM walks) build their launches from these."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...kernels.schedule import Schedule
from .roofline import FLOAT, SECTOR, DeviceModel


def neighbour_reuse(f) -> float:
    """How close columns are to their row, in [0, 1]: features.locality is mean |col - row| /
    n_cols, ~1/3 for random columns and ~0 for banded ones, so 1 - 3 x locality is ~0 for random
    graphs and ~0.8 for graphs with 80% of each row's edges inside a block of nearby ids."""
    locality = float(getattr(f, "locality", 1.0 / 3.0) or 0.0)
    return min(1.0, max(0.0, 1.0 - 3.0 * locality))


def gather_hit_rate(f, dense_bytes: float, dev: DeviceModel) -> float:
    """Share of gathers served by L2: all of them when the dense operand fits in L2, else those
    that locality keeps close to recently gathered rows."""
    fits = min(1.0, dev.l2_bytes / max(dense_bytes, 1.0))
    return 1.0 - (1.0 - fits) * (1.0 - neighbour_reuse(f))


def sector_bytes(nbytes: float) -> float:
    return math.ceil(nbytes / SECTOR) * SECTOR


def gather_bytes(f, k: int, dense_bytes: float, dev: DeviceModel, gathers: float,
                 pass_width: int | None = None, element_bytes: int = FLOAT):
    """(DRAM bytes, L2 bytes) of `gathers` row gathers of width k from a dense operand of
    `dense_bytes`, read in passes of `pass_width` features (default: all K at once). Every pass
    reads whole 32-byte sectors (a pass of 4 floats or 8 halves wastes half of each), and each
    dense row is read from DRAM at least once."""
    width = min(k, pass_width or k)
    row = math.ceil(k / width) * sector_bytes(width * element_bytes)
    hit = gather_hit_rate(f, dense_bytes, dev)
    touched = min(dense_bytes, gathers * k * element_bytes)
    return max(touched, (1.0 - hit) * gathers * row), gathers * row


@dataclass(frozen=True)
class Walker:
    """How one family walks a row: threads per work item, edges it handles side by side (edge
    slots of `lanes` lanes within a warp-wide item), and the features one pass covers (a register
    tile of several lanes x vec chunks, or one chunk). A wider K means more passes over the row."""
    threads: int
    slots: int
    width: int
    chunks_per_pass: int
    staged: bool              # (column, value) pairs staged by the warp: the index leaves the chain

    def passes(self, k: int) -> int:
        return math.ceil(k / self.width)


def edge_step_us(f, s: Schedule, w: Walker, dev: DeviceModel, dense_bytes: float,
                 extra_us: float = 0.0) -> float:
    """One step of one item: the gather (L2 or DRAM latency, by hit rate) behind each edge's column
    index, divided by the edges kept in flight (unroll). The index comes from L1 (a line holds 32
    consecutive indices) except once per 32 edges, or is staged by the warp ahead of use."""
    index_us = dev.l2_latency_us / 32 + (0.0 if w.staged else dev.l1_latency_us)
    return (index_us + gather_latency_us(f, dense_bytes, dev) + extra_us) / max(1, s.unroll)


def gather_latency_us(f, dense_bytes: float, dev: DeviceModel) -> float:
    """The latency of one gather: L2's or DRAM's, weighted by the hit rate."""
    hit = gather_hit_rate(f, dense_bytes, dev)
    return hit * dev.l2_latency_us + (1.0 - hit) * dev.dram_latency_us
