"""The structure features of a Graph, computed on its device without a transfer: the row and
column degree quantiles (from a histogram), the largest degree, the empty rows, and a checksum of
the edges. What scheduler/kinds.py matches graphs on; Graph reads them back with its build.

The device part ends in one int64 vector (`structure_stats`); the host part (`decode`) turns the
vector, once read back, into the features. The histograms cross whole (256 bins per side, a few
KiB: one transfer costs the same for 100 bytes or 8 KiB) and their quantiles are read on the
host, so the device does a bucketing, one sort and one search per graph, whatever the sides.
"""
from __future__ import annotations

import math

import numpy as np
import torch

CHECK_MODULUS = 2**31 - 1

# The degree quantiles of a graph's kind, read off a histogram of quarter-octave bins (bin
# floor(4 log2(d + 1))); a bin's degree is its lower edge, so two graphs whose quantiles fall in one
# bin agree within 2^(1/4).
_QUANTILES = (0.5, 0.9, 0.99)
_BINS_PER_OCTAVE = 4
_BINS = 64 * _BINS_PER_OCTAVE
STAT_NAMES = ("q50", "q90", "q99", "max", "empty")


def _bin_edges() -> list[int]:
    """The smallest degree of bins 1..255: bucketing integers against them is floor(4 log2(d + 1))
    exactly, without floating point on the device (capped where no degree reaches)."""
    edges = []
    for b in range(1, _BINS):
        d = max(0, math.ceil(2 ** (b / _BINS_PER_OCTAVE) - 1))
        if d < 2**50:
            while math.floor(math.log2(d + 1) * _BINS_PER_OCTAVE) < b:
                d += 1
            while d > 0 and math.floor(math.log2(d) * _BINS_PER_OCTAVE) >= b:
                d -= 1
        edges.append(min(d, 2**62))
    return edges


_EDGES = _bin_edges()
_ON_DEVICE: dict = {}   # (device, what) -> the bin edges, or the bins searched for, copied once


def _constant(dev: torch.device, what: str, sides: int = 0) -> torch.Tensor:
    key = (dev, what, sides)
    if key not in _ON_DEVICE:
        values = torch.tensor(_EDGES) if what == "edges" else torch.arange(sides * _BINS, dtype=torch.int32)
        _ON_DEVICE[key] = values.to(dev)
    return _ON_DEVICE[key]


def degree_histograms(degrees: list[torch.Tensor]) -> torch.Tensor:
    """(m + m * 256,) int64 on the device, no transfer, for m degree vectors: each one's largest
    degree, then each one's cumulative bin counts (entries <= bin b), counted together: side i's
    bins are shifted by 256 i, so one sort and one search serve every side."""
    dev = degrees[0].device
    bins = torch.bucketize(torch.cat(degrees), _constant(dev, "edges"), out_int32=True, right=True)
    start = 0
    for i, d in enumerate(degrees):
        if i:
            bins[start:start + d.numel()] += i * _BINS
        start += d.numel()
    cumulative = torch.searchsorted(torch.sort(bins).values, _constant(dev, "bins", len(degrees)), right=True)
    return torch.cat([torch.stack([d.max() for d in degrees]), cumulative])


def mix(rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Each edge's term of the structure checksum."""
    return (cols * 1_000_003 + rows).remainder_(CHECK_MODULUS)


def structure_stats(rows: torch.Tensor, cols: torch.Tensor, counted: torch.Tensor, n_nodes: int,
                    n_rows=None, looped: bool = False) -> torch.Tensor:
    """int64 on the device, no transfer, `decode`d once read back: the degree histograms of the rows
    and the columns of the edges (row[e], col[e]) where counted[e] is 1 (a 0 marks a duplicate, or
    a padding slot of a captured build), and a checksum of those edges: not a fingerprint, it only
    tells the graph a decision was probed on from another graph of its kind; exact in int64 below
    2^32 edges. Both degree vectors are `n_nodes` long (at least either side; what lies past a
    side's size has degree 0 and `decode` takes it out). With `looped` (a square graph of `n_rows`
    nodes, an int or a device scalar), the same of the graph with exactly one self-loop per node
    (norm.with_self_loops), worked out from this one's degrees (and the number of counted
    self-loop edges it replaces), so that graph needs no read-back of its own."""
    dev = rows.device
    row_degrees = torch.zeros(n_nodes, dtype=torch.int64, device=dev).index_add_(0, rows, counted)
    col_degrees = torch.zeros(n_nodes, dtype=torch.int64, device=dev).index_add_(0, cols, counted)
    mixed = mix(rows, cols) * counted
    checksum = mixed.sum().reshape(1)
    if not looped:
        return torch.cat([checksum, degree_histograms([row_degrees, col_degrees])])
    loop = (rows == cols).long() * counted
    has_loop = torch.zeros(n_nodes, dtype=torch.int64, device=dev).index_add_(0, rows, loop)
    nodes = torch.arange(n_nodes, device=dev)
    real = (nodes < n_rows).long()          # the nodes of the graph, not the padding past them
    loops_checksum = checksum - (mixed * loop).sum() + (mix(nodes, nodes) * real).sum()
    missing = (1 - has_loop) * real
    histograms = degree_histograms([row_degrees, col_degrees, row_degrees + missing, col_degrees + missing])
    return torch.cat([checksum, loops_checksum, has_loop.sum().reshape(1), histograms])


def _side(cumulative: np.ndarray, largest: int) -> dict:
    """One side's features from its cumulative bin counts: the quantile q is the lower edge of the
    bin of the (floor(q (n - 1)) + 1)-th smallest degree."""
    n = int(cumulative[-1])
    quantiles = []
    for q in _QUANTILES:
        at = int(np.searchsorted(cumulative, math.floor(q * (n - 1)) + 1))
        quantiles.append(int(round(2 ** (at / _BINS_PER_OCTAVE) - 1)))
    return dict(zip(STAT_NAMES, quantiles + [int(largest), int(cumulative[0])]))


def decode(values: np.ndarray, looped: bool = False, padding: tuple[int, int] = (0, 0)
           ) -> tuple[dict, dict | None, int | None]:
    """(the graph's stats, those of its self-loop graph or None, the number of its counted
    self-loop edges or None) from structure_stats' vector, read back: {"rows": {q50, q90, q99, max,
    empty}, "cols": {...}, "checksum"}. `padding`: the entries of the row and the column degree
    vectors past the graph's sides (degree 0, so in every cumulative count), taken out here."""
    checks = 2 if looped else 1
    sides, head = 2 * checks, 3 if looped else 1
    largest = values[head:head + sides]
    cumulative = values[head + sides:].reshape(sides, _BINS)
    before = np.concatenate([[0], cumulative[:-1, -1]])      # each side's bins follow the last's
    cumulative = cumulative - before[:, None] - np.array(padding * checks)[:, None]
    stats = [{"rows": _side(cumulative[2 * i], largest[2 * i]), "cols": _side(cumulative[2 * i + 1], largest[2 * i + 1]),
              "checksum": int(values[i])} for i in range(checks)]
    return stats[0], (stats[1] if looped else None), (int(values[2]) if looped else None)
