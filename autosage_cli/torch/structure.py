"""The structure features of a Graph, computed on its device without a transfer: the row and
column degree quantiles (from a histogram), the largest degree, the empty rows, and a checksum of
the edges. What scheduler/kinds.py matches graphs on; Graph reads them back with its build."""
from __future__ import annotations

import torch

CHECK_MODULUS = 2**31 - 1

# The degree quantiles of a graph's kind, read off a histogram of quarter-octave bins (a sort of
# every degree cost ~0.2 ms of host time per graph); a bin's degree is its lower edge, so two graphs
# whose quantiles fall in one bin agree within 2^(1/4).
_QUANTILES = (0.5, 0.9, 0.99)
_BINS_PER_OCTAVE = 4
_BINS = 64 * _BINS_PER_OCTAVE


_QUANTILE_VECTORS: dict = {}   # device -> the _QUANTILES as a tensor there (copied once)


def degree_stats(row_degrees: torch.Tensor, col_degrees: torch.Tensor) -> torch.Tensor:
    """(2, 5) int64 on the device, no transfer: [q50, q90, q99 (bin lower edges, see above), max,
    empty] of the row degrees, then of the column degrees. Both sides in one histogram of
    2 x _BINS bins, so a graph's features are a dozen small launches (each side alone and by
    itself took 30, a third of a mini-batch Graph's own build)."""
    dev = row_degrees.device
    n_rows = row_degrees.numel()
    bins = (torch.log2(torch.cat([row_degrees, col_degrees]).double() + 1) * _BINS_PER_OCTAVE).long()
    bins.clamp_(0, _BINS - 1)[n_rows:] += _BINS
    counts = torch.zeros(2 * _BINS, dtype=torch.int64, device=dev).index_add_(0, bins, torch.ones_like(bins))
    cumulative = counts.view(2, _BINS).cumsum(1)
    q = _QUANTILE_VECTORS.get(dev)
    if q is None:
        q = _QUANTILE_VECTORS[dev] = torch.tensor(_QUANTILES, dtype=torch.float64, device=dev)
    # the rank of each quantile, int(q (n - 1)) + 1, as Python would compute it (IEEE doubles)
    wanted = (q * (cumulative[:, -1:] - 1)).floor_().long() + 1
    at = torch.searchsorted(cumulative, wanted)
    quantiles = (torch.exp2(at.double() / _BINS_PER_OCTAVE) - 1).round_().long()
    highest = torch.stack([row_degrees.max(), col_degrees.max()]).unsqueeze(1)
    # a degree of 0 is the only one in bin 0 (degree 1 is already bin 4)
    return torch.cat([quantiles, highest, counts.view(2, _BINS)[:, :1]], 1)


def mix(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Each edge's term of the structure checksum."""
    return (cols * 1_000_003 + rows).remainder_(CHECK_MODULUS)


def structure_stats(rows: torch.Tensor, cols: torch.Tensor, counted: torch.Tensor, shape: tuple,
                     looped: bool = False) -> torch.Tensor:
    """(11,) int64 on the device, no transfer: the row then the column degree stats
    (degree_stats) and a checksum of the edges (row[e], col[e]) where counted[e] is 1 (a 0
    marks a duplicate): not a fingerprint, it only tells the graph a decision was probed on from
    another graph of its kind; exact in int64 below 2^32 edges. With `looped` (a square graph),
    (22,): then the same of the graph with exactly one self-loop per node (norm.with_self_loops),
    worked out from this one's degrees, so that graph needs no read-back of its own."""
    n_rows, n_cols = shape
    dev = rows.device
    row_degrees = torch.zeros(n_rows, dtype=torch.int64, device=dev).index_add_(0, rows, counted)
    col_degrees = torch.zeros(n_cols, dtype=torch.int64, device=dev).index_add_(0, cols, counted)
    mixed = mix(rows, cols) * counted
    checksum = mixed.sum().reshape(1)
    stats = [degree_stats(row_degrees, col_degrees).flatten(), checksum]
    if looped:
        loop = (rows == cols).long() * counted
        missing = 1 - torch.zeros(n_rows, dtype=torch.int64, device=dev).index_add_(0, rows, loop)
        nodes = torch.arange(n_rows, device=dev)
        loops_checksum = checksum - (mixed * loop).sum() + mix(nodes, nodes).sum()
        stats += [degree_stats(row_degrees + missing, col_degrees + missing).flatten(), loops_checksum]
    return torch.cat(stats)


STAT_NAMES = ("q50", "q90", "q99", "max", "empty")


def stats_dict(values: list) -> dict:
    return {"rows": dict(zip(STAT_NAMES, values[:5])), "cols": dict(zip(STAT_NAMES, values[5:10])),
            "checksum": values[10]}
