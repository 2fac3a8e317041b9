"""Synthetic graph structures, vectorized NumPy, deterministic for a given numpy Generator.

Each generator returns the sorted, unique edge keys (row·n + col, int64) of an n × n graph; synthetic.py
adds values, optional relabelling and the canonical CSR. Row degrees are what the kernels feel, so the
generators control them exactly (or in expectation, after de-duplication, where they must sample).
"""
from __future__ import annotations

import numpy as np

from .degrees import calibrated_degrees
from .edges import CHUNK, dedup_sorted, distinct_uniform_columns, row_chunks, sorted_unique_keys

# A row never fills more than this share of its community block: a row with more edges than that
# spills the rest outside the block (real hubs reach across communities; a 2048-id block cannot hold
# 17k distinct neighbours).
LOCAL_FILL_CAP = 0.75


def erdos_renyi(rng: np.random.Generator, n: int, p: float) -> np.ndarray:
    """G(n, p), directed: every (row, col) present independently with probability p. Row degrees
    are Binomial(n, p) and each row's columns a uniform random subset of that size."""
    degrees = rng.binomial(n, p, size=n).astype(np.int64)
    rows, cols = distinct_uniform_columns(degrees, np.zeros(n, np.int64), np.full(n, n, np.int64), rng)
    return rows * n + cols  # already sorted and unique


def uniform(rng: np.random.Generator, n: int, degree: int) -> np.ndarray:
    """Every row has exactly `degree` distinct uniformly random columns."""
    degrees = np.full(n, degree, dtype=np.int64)
    rows, cols = distinct_uniform_columns(degrees, np.zeros(n, np.int64), np.full(n, n, np.int64), rng)
    return rows * n + cols


def banded(n: int, bandwidth: int) -> np.ndarray:
    """Row i holds columns max(0, i − bandwidth) .. min(n − 1, i + bandwidth)."""
    i = np.arange(n, dtype=np.int64)
    first = np.maximum(i - bandwidth, 0)
    degrees = np.minimum(i + bandwidth, n - 1) - first + 1
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degrees, out=starts[1:])
    rows = np.repeat(i, degrees)
    return rows * n + first[rows] + (np.arange(starts[-1], dtype=np.int64) - starts[rows])


def hub(rng: np.random.Generator, n: int, hubs: int, hub_degree: int, background: float) -> np.ndarray:
    """`hubs` random rows with `hub_degree` distinct random columns each, on a background of
    round(background · n) uniformly random edges (duplicates merged)."""
    hub_rows = np.sort(rng.choice(n, size=hubs, replace=False)).astype(np.int64)
    _, hub_cols = distinct_uniform_columns(np.full(hubs, hub_degree, np.int64),
                                           np.zeros(hubs, np.int64), np.full(hubs, n, np.int64), rng)
    hub_row_ids = np.repeat(hub_rows, hub_degree)
    m = int(round(background * n))
    bg_rows = rng.integers(0, n, size=m, dtype=np.int64)
    bg_cols = rng.integers(0, n, size=m, dtype=np.int64)
    return sorted_unique_keys([(hub_row_ids, hub_cols), (bg_rows, bg_cols)], n)


def rmat(rng: np.random.Generator, scale: int, edge_factor: float, a: float, b: float,
         c: float) -> np.ndarray:
    """R-MAT (Chakrabarti et al.; Graph500 uses a, b, c = 0.57, 0.19, 0.19): edge_factor · 2**scale
    directed edges, each placed by `scale` recursive quadrant choices; duplicates merged, self loops
    kept. Relabelling (Graph500 permutes ids) is the common `shuffle` parameter."""
    n = 1 << scale
    m = int(round(edge_factor * n))
    keys = np.empty(m, dtype=np.int64)
    for lo in range(0, m, CHUNK):
        hi = min(lo + CHUNK, m)
        rows = np.zeros(hi - lo, dtype=np.int64)
        cols = np.zeros(hi - lo, dtype=np.int64)
        for level in range(scale):
            r = rng.random(hi - lo, dtype=np.float32)
            bit = np.int64(1 << (scale - 1 - level))
            down = r >= a + b                      # quadrants c and d: lower half
            right = ((r >= a) & (r < a + b)) | (r >= a + b + c)  # quadrants b and d
            rows += down * bit
            cols += right * bit
        keys[lo:hi] = rows * n + cols
    keys.sort()
    return dedup_sorted(keys)


def _expected_unique_inverse(weights: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Draw counts g with E[#distinct columns among g draws ∝ weights] = target, per target.

    E(g) = Σ_j 1 − exp(−g·p_j) (Poisson approximation), evaluated through the distinct weight values
    (a few thousand), tabulated on a log grid and inverted by interpolation."""
    values, counts = np.unique(weights[weights > 0], return_counts=True)
    p = values.astype(np.float64) / float(weights.sum())
    # At most every column with a weight can be drawn; a row asking for (nearly) all of them gets the
    # largest draw count on the grid instead of an endless search.
    targets = np.minimum(targets, 0.999 * counts.sum())
    top = float(targets.max()) if targets.size else 0.0
    if top <= 0:
        return np.zeros_like(targets, dtype=np.float64)

    def expected(g: np.ndarray) -> np.ndarray:
        return (counts[None, :] * -np.expm1(-np.outer(g, p))).sum(axis=1)

    g_max = max(2.0 * top, 1.0)
    while expected(np.array([g_max]))[0] < top and g_max < 1e4 * counts.sum():
        g_max *= 2.0
    grid = np.concatenate([[0.0], np.geomspace(1e-3, g_max, 512)])
    return np.interp(targets, expected(grid), grid)


def _stochastic_round(rng: np.random.Generator, x: np.ndarray) -> np.ndarray:
    base = np.floor(x)
    return (base + (rng.random(x.shape[0]) < (x - base))).astype(np.int64)


def power_law(rng: np.random.Generator, n: int, nnz: int, q50: float, q90: float, q99: float,
              max_degree: float, min_degree: float, locality: float, block: int) -> np.ndarray:
    """Chung–Lu graph with calibrated row degrees and community locality.

    Target degrees t come from degrees.calibrated_degrees (n, nnz, q50/q90/q99, max exact) assigned to
    random ids. Row i takes a share `locality` of its edges (at most LOCAL_FILL_CAP of the block)
    uniformly inside its community — the contiguous block of `block` ids holding i — and the rest from
    the whole graph with probability ∝ t (Chung–Lu, so popular nodes are popular columns). Draws are
    with replacement, and duplicates are merged, so the number of draws per row is the one whose
    *expected distinct count* is the target: exact for the block (S·(1 − (1 − 1/S)^k)), a Poisson
    approximation for the weighted part. Row degrees then match their targets up to sampling noise."""
    targets = calibrated_degrees(n, nnz, {0.5: q50, 0.9: q90, 0.99: q99}, max_degree, min_degree)
    targets = targets[rng.permutation(n)]
    ids = np.arange(n, dtype=np.int64)
    block_start = (ids // block) * block
    block_size = np.minimum(block_start + block, n) - block_start
    local = np.minimum(locality * targets, LOCAL_FILL_CAP * block_size)
    local[block_size < 2] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        local_draws = np.where(local > 0, np.log1p(-local / block_size) / np.log1p(-1.0 / block_size), 0.0)
    # A weighted draw that lands in the row's own block on a column the local draws already took is
    # lost as a duplicate: ask the weighted part for proportionally more.
    block_weight = np.bincount(ids // block, weights=targets)[ids // block] / float(targets.sum())
    lost = block_weight * local / block_size
    global_draws = _expected_unique_inverse(targets, (targets - local) / (1.0 - lost))
    k_local = _stochastic_round(rng, local_draws)
    k_global = _stochastic_round(rng, global_draws)
    k_global[(k_local + k_global) == 0] = 1  # rounding must not empty a row: min degree is a target too

    # Global columns ∝ t: a uniform pick from the table holding id j t_j times (one gather per draw;
    # a searchsorted over the cumulative weights took 160 s for 130M draws here, this takes ~5 s).
    table = np.repeat(ids.astype(np.int32), targets)
    total = int(k_local.sum() + k_global.sum())
    keys = np.empty(total, dtype=np.int64)
    pos = 0
    for counts, is_local in ((k_local, True), (k_global, False)):
        for first, end, _ in row_chunks(counts):
            rows = np.repeat(ids[first:end], counts[first:end])
            if is_local:
                cols = block_start[rows] + (rng.random(rows.shape[0]) * block_size[rows]).astype(np.int64)
            else:
                cols = table[rng.integers(0, table.shape[0], size=rows.shape[0], dtype=np.int64)]
            keys[pos:pos + rows.shape[0]] = rows * n + cols
            pos += rows.shape[0]
    del table
    keys.sort()
    return dedup_sorted(keys)
