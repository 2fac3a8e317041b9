"""The cost models of the SpMM families that split a row's *edges* rather than its features (K <= 8):
vector (a group per row), parreduce (the same walk by persistent groups, longest rows first) and
stream (equal windows of nonzeros, whatever rows they hold). The SpMM spec's cost_models names them (ops/spmm.py)."""
from __future__ import annotations

import math
from dataclasses import replace

from ...dtypes import MAX_VECTOR_BYTES
from ...kernels.schedule import Schedule, family_of
from .gathers import Walker, edge_step_us, gather_bytes, gather_latency_us
from .roofline import FLOAT, INDEX, Launch

def vector_gather_loads(s: Schedule, k: int, elem: int = FLOAT) -> int:
    """Gather load instructions per edge of the vector family: one 16-byte load per 4 floats (8
    halves) when K == KMAX >= 2 (the kernel's vector path; the plans' B is aligned), else K scalar
    loads."""
    return math.ceil(k / (MAX_VECTOR_BYTES // elem)) if k == s.tile and k > 1 else k


def edge_walk_traffic(f, k, dev, heads, elem) -> tuple[float, float, float, float, float]:
    """(nonzeros, rows, dense bytes, DRAM bytes, L2 bytes) of an edge-parallel SpMM: the CSR arrays
    once, one gather of K elements per edge, the output once."""
    nnz, rows = float(f.nnz) * heads, float(f.n_rows) * heads
    dense = f.n_cols * k * elem * heads
    dram_g, l2_g = gather_bytes(f, k, dense, dev, nnz, element_bytes=elem)
    dram = (f.n_rows + 1) * INDEX + f.nnz * (INDEX + elem) + dram_g + rows * k * elem
    return nnz, rows, dense, dram, l2_g


def vector_spmm(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Edge-parallel rows (cuda/spmm_vector.cu): G lanes take a row's edges side by side, each
    keeps all K sums, so a warp covers 32 edges per step with coalesced, prefetched index loads
    (staged: the index leaves the chain); short rows leave lanes idle (steps_per_edge), rows of a
    warp run in lockstep, the group sums with log2(G) shuffle steps (the KMAX sums in parallel)."""
    nnz, rows, dense, dram, l2_g = edge_walk_traffic(f, k, dev, heads, elem)
    w = Walker(threads=s.lanes, slots=s.lanes, width=s.tile, chunks_per_pass=1, staged=True)
    step = edge_step_us(f, s, w, dev, dense)
    merge_steps = rows * math.log2(s.lanes) * dev.shuffle_latency_us / step
    steps = nnz * prof.steps_per_edge(s.lanes) + merge_steps
    loads = vector_gather_loads(s, k, elem)
    return [Launch(rows, s.lanes, s.threads, steps, step, prof.lockstep_factor(max(1, 32 // s.lanes)),
                   float(f.degree_max) / s.lanes, dram, l2_g, 3 + s.tile + loads, loads)]


def parreduce_spmm(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """The vector family's walk by persistent groups over rows ordered longest first
    (cuda/spmm_parreduce.cu): the same steps, lockstep and traffic plus the row list, and a
    critical path of the longest row as its walker takes it: a warp for a heavy row (above the
    family's heavy_threshold), the group for the rest. Ordering rows by length was meant to
    remove the vector family's lockstep waste, but on the H200 (products-like, reddit-like,
    rmat-20, K = 1, 2, 4, 8) its best ran 0.87-1.23x the vector family's best and was never the
    fastest schedule: credited with no lockstep waste it took shortlist places from those that were."""
    [walk] = vector_spmm(f, prof, k, s, dev, heads, elem)
    threshold = family_of(s.family).heavy_rows_above(s)
    longest = float(f.degree_max) / 32
    if threshold is not None:
        longest = max(longest, min(float(f.degree_max), threshold) / s.lanes)
    return [replace(walk, longest_steps=longest,
                    dram_bytes=walk.dram_bytes + f.n_rows * INDEX)]


def stream_spmm(f, prof, k, s, dev, heads=1, elem=FLOAT) -> list[Launch]:
    """Equal edge windows (cuda/spmm_stream.cu): a thread's U (column, value) loads go out at once
    and do not wait for a row's bounds, then its U gathers; the block's products are summed per row
    out of shared memory after one barrier. Balanced by construction (no lockstep waste, a critical
    path of one window); the same compulsory bytes as the row walks, plus the window bounds; then a
    launch that sums the partials of the rows crossing a window edge."""
    nnz, rows, dense, dram, l2_g = edge_walk_traffic(f, k, dev, heads, elem)
    width = s.threads * s.unroll
    windows = max(1.0, math.ceil(nnz / width))
    dram += windows * INDEX
    # The chain behind U edges: their index loads, their gathers, the barrier and the row sums.
    step = (dev.dram_latency_us + gather_latency_us(f, dense, dev) + 2 * dev.l1_latency_us) / s.unroll
    loads = vector_gather_loads(s, k, elem)
    walk = Launch(windows * s.threads, 1, s.threads, nnz, step, 1.0, s.unroll, dram, l2_g,
                  4 + 2 * s.tile + loads, loads)
    # The second launch: at most one crossing row per window, a thread each, reading its partials.
    partials = 2 * windows * k * FLOAT
    crossing = Launch(windows, 1, s.threads, windows, dev.l2_latency_us, 1.0,
                      math.ceil(f.degree_max / width), partials, partials, 4, chained=True)
    return [walk, crossing]
