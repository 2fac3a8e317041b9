"""The probe sample: whole rows, in windows of consecutive ids, stratified by degree.

The seed probed an *induced* subgraph of 2-3% of the nodes, which keeps an edge only when both ends
were sampled: on Reddit that cut the mean degree from ~492 to ~9.5 and its probe predicted 1.6-2.3x
where the full graph gave 1.0x. Here a sample is made of WHOLE rows with all their edges and the
column space untouched (B, X, Y keep their full size, so gathers hit the real column range). The rows
come in contiguous WINDOWS of consecutive ids, not one by one: graphs with communities (reddit,
products: 70-80% of a row's edges inside a block of ~2048 nearby ids) run fast on the full graph
because consecutive rows gather the same dense rows from L2; rows drawn one at a time from all over
the graph share none, and the first H200 runs (6a0dd38) showed that sample ranking kernels by a
locality the full graph does not have (probe/oracle agreement 74%). Windows are drawn stratified by
their nonzero count (sorted by it, one window per stratum), so the degree distribution survives, and
the heaviest rows are always in (the hubs decide whether an unsplit schedule is viable).
"""
from __future__ import annotations

import math

import numpy as np

from ...graphs.csr import CSRGraph, index_dtype

HEAVIEST_ROWS = 8           # always sampled: the rows that break unsplit schedules...
HEAVY_SHARE_MAX = 0.05      # ...while they hold at most 5% of the sample (the first: always), so
                            # forced hubs do not outweigh the windows

# Sample size. On the H200 a probe graph must be (a) long enough per launch that launch overhead
# (~4 us) and event resolution (~0.5 us) do not decide the ranking, (b) wide enough to fill the GPU
# the way the full graph does (two waves of warp-per-row groups: 132 SMs x 64 warps x 2 rows), and
# (c) a fair share of the graph, so its windows cover the degree distribution. Hence
#     target = max(4% of nnz, 2M nonzeros, MIN_SAMPLE_ROWS x mean degree), capped at the graph,
# and the whole graph is probed when that is half of it or more (a sample saves little then).
# What it costs (full-graph times of 6a0dd38; a sample's launch takes about its share of them):
#   reddit-like (114.6M nnz, mean degree 492): rows bind, 16,896 x 492 = 8.3M nnz (7.3%), the same
#     as the 2% rule gave; a launch is ~7% of the full graph's: spmm K=256 ~1 ms (vendor 13.9 ms),
#     attention d=64 H=8 ~47 ms per vendor (650 ms; 50.7 ms measured on the old sample) and ~4.5 ms
#     per native (57-100 ms). The guaranteed minimum (run to verify + 1 warm-up + 3 repeats = 5
#     launches each) for 4 vendors + 6 natives is 10 x 5 x 1 = 50 ms at spmm K=256 and
#     4 x 5 x 47 + 6 x 5 x 4.5 ~ 1.1 s at attention H=8 (the one case over the 400 ms budget; the
#     probe reports the overrun); sampling (~0.1 s on the CPU) and copying 8.3M nonzeros to the
#     device (~70 MB) add little, so a cold tune stays within ~1.5 s beyond features and compiling.
#   products-like (123.7M nnz, mean degree 51): 4% = 4.95M nnz (2% was 2.47M); spmm K=256 ~0.7 ms
#     per launch, attention H=8 ~11.5 ms per vendor, so the minimum is 4 x 5 x 11.5 + 6 x 5 x 2.6
#     ~ 0.3 s and the budget buys the remaining repeats.
SAMPLE_FRACTION = 0.04
MIN_SAMPLE_NNZ = 2 << 20
MIN_SAMPLE_ROWS = 2 * 132 * 64
WHOLE_GRAPH_SHARE = 0.5     # a sample this large (share of nnz) or larger: probe the whole graph
# Windows: runs of consecutive rows. 2048 is the community block of the reddit/products presets
# (and a size where consecutive rows of real graphs with id locality share their neighbourhoods);
# a small sample uses shorter windows so that it still holds MIN_WINDOWS of them (the strata).
WINDOW_ROWS = 2048
MIN_WINDOWS = 8
MAX_SLICES = 4096           # take_rows copies up to this many runs of rows as slices


# ------------------------------------------------------------------ sampling

def default_target_nnz(graph: CSRGraph) -> int:
    """max(4% of nnz, 2M nonzeros, enough rows to fill the GPU twice), capped at the whole graph."""
    mean_degree = graph.nnz / max(1, graph.n_rows)
    target = max(SAMPLE_FRACTION * graph.nnz, MIN_SAMPLE_NNZ, MIN_SAMPLE_ROWS * mean_degree)
    return int(min(graph.nnz, math.ceil(target)))


def probes_whole_graph(graph: CSRGraph, target_nnz: int | None = None) -> bool:
    """True when a sample of `target_nnz` (default: default_target_nnz) nonzeros would hold half of
    the graph or more: the probe then runs on the graph itself."""
    target = default_target_nnz(graph) if target_nnz is None else int(target_nnz)
    return graph.nnz == 0 or target >= WHOLE_GRAPH_SHARE * graph.nnz


def window_rows(graph: CSRGraph, target_nnz: int) -> int:
    """Rows per window: WINDOW_ROWS, shortened so that a sample of `target_nnz` nonzeros holds at
    least MIN_WINDOWS windows."""
    mean_degree = max(graph.nnz / max(1, graph.n_rows), 1e-9)
    target_rows = target_nnz / mean_degree
    return int(max(1, min(WINDOW_ROWS, target_rows // MIN_WINDOWS)))


def heaviest_rows(degrees: np.ndarray, target_nnz: int) -> np.ndarray:
    """The heaviest row, and the next HEAVIEST_ROWS - 1 while together they hold at most
    HEAVY_SHARE_MAX of the target."""
    if degrees.size == 0:
        return np.empty(0, dtype=np.int64)
    top = min(HEAVIEST_ROWS, degrees.size)
    cand = np.argpartition(-degrees, top - 1)[:top] if top < degrees.size else np.arange(degrees.size)
    cand = cand[np.lexsort((cand, -degrees[cand]))]          # heaviest first, ties by id
    heavy, held = [int(cand[0])], int(degrees[cand[0]])
    for r in cand[1:]:
        if degrees[r] == 0 or held + degrees[r] > HEAVY_SHARE_MAX * target_nnz:
            break
        heavy.append(int(r))
        held += int(degrees[r])
    return np.asarray(heavy, dtype=np.int64)


def _stratified_windows(window_nnz: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Indices of about `fraction` of the windows: sorted by nonzero count, cut into equal strata
    (one per window taken), one window drawn from each, so the chosen windows' sizes follow the
    distribution of all windows (and the sample's nonzeros are `fraction` of the whole in
    expectation)."""
    n = window_nnz.size
    want = fraction * n
    take = min(n, int(want) + int(rng.random() < want - int(want)))
    if take <= 0:
        return np.empty(0, dtype=np.int64)
    order = np.argsort(window_nnz, kind="stable")
    edges = np.floor(np.linspace(0, n, take + 1)).astype(np.int64)
    picks = edges[:-1] + (rng.random(take) * np.diff(edges)).astype(np.int64)
    return order[np.minimum(picks, edges[1:] - 1)]


def take_rows(graph: CSRGraph, rows: np.ndarray, source: dict) -> CSRGraph:
    """The CSR of the given rows (sorted ids) with all their edges; columns unchanged. Runs of
    consecutive rows (windows) are copied as slices. Not validated again: whole rows of a canonical
    graph are canonical."""
    rows = np.asarray(rows, dtype=np.int64)
    degrees = graph.row_degrees()[rows]
    nnz = int(degrees.sum())
    idx_t = index_dtype(nnz, max(rows.size, graph.n_cols))
    indptr = np.zeros(rows.size + 1, dtype=idx_t)
    np.cumsum(degrees, out=indptr[1:])
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    first = np.concatenate([[0], breaks]).astype(np.int64)
    last = np.append(breaks, rows.size).astype(np.int64) - 1
    if first.size <= MAX_SLICES:
        lo = graph.indptr[rows[first]].astype(np.int64)
        hi = graph.indptr[rows[last] + 1].astype(np.int64)
        indices = np.concatenate([graph.indices[a:b] for a, b in zip(lo, hi)] or [graph.indices[:0]])
        values = np.concatenate([graph.values[a:b] for a, b in zip(lo, hi)] or [graph.values[:0]])
    else:
        # Position of every kept edge in the full arrays: row start + offset within the row.
        starts = graph.indptr[rows].astype(np.int64)
        gather = np.repeat(starts - indptr[:-1], degrees) + np.arange(nnz, dtype=np.int64)
        indices, values = graph.indices[gather], graph.values[gather]
    return CSRGraph(indptr, np.ascontiguousarray(indices, dtype=idx_t),
                    np.ascontiguousarray(values, dtype=np.float32), (int(rows.size), graph.n_cols),
                    dict(source))


def sample_rows(graph: CSRGraph, target_nnz: int | None = None, seed: int = 0,
                window: int | None = None):
    """(sample, row_ids): windows of `window` consecutive whole rows (default: window_rows), drawn
    stratified by their nonzero count at seeded positions, plus the heaviest rows; about
    `target_nnz` nonzeros (default: default_target_nnz); row order kept, columns untouched.

    The windows tile the rows from a random offset (so where they start relative to a graph's own
    blocks is random); the heaviest rows are taken out of the windows' counts and always added."""
    target = default_target_nnz(graph) if target_nnz is None else int(target_nnz)
    degrees = graph.row_degrees()
    rng = np.random.default_rng(seed)
    n = graph.n_rows
    w = int(window) if window is not None else window_rows(graph, target)
    if w < 1:
        raise ValueError(f"window must be >= 1 row, got {w}")
    if target >= graph.nnz:
        rows = np.arange(n, dtype=np.int64)
    else:
        heavy = heaviest_rows(degrees, target)
        heavy_nnz = int(degrees[heavy].sum())
        offset = int(rng.integers(0, w)) if n > w else 0
        starts = np.unique(np.concatenate([[0], np.arange(offset, n, w, dtype=np.int64)]))
        ends = np.append(starts[1:], n)
        # Window nonzeros without the forced rows (they are in anyway).
        csum = np.concatenate([[0], np.cumsum(degrees)])
        nnz_w = csum[ends] - csum[starts]
        np.subtract.at(nnz_w, np.searchsorted(starts, heavy, side="right") - 1, degrees[heavy])
        fraction = max(0.0, target - heavy_nnz) / max(1, graph.nnz - heavy_nnz)
        chosen = np.sort(_stratified_windows(nnz_w, fraction, rng))
        lengths = ends[chosen] - starts[chosen]
        runs = np.repeat(starts[chosen] - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        in_windows = runs + np.arange(int(lengths.sum()), dtype=np.int64)
        rows = np.union1d(in_windows, heavy)
    kept_nnz = int(degrees[rows].sum())
    source = {"sample": {"of": dict(graph.source), "fingerprint": graph.fingerprint,
                         "method": "windows of consecutive whole rows, stratified by window nonzeros, "
                                   "heaviest rows kept",
                         "rows": int(rows.size), "nnz": kept_nnz, "target_nnz": target,
                         "window": w, "seed": int(seed)}}
    return take_rows(graph, rows, source), rows
