"""The canonical CSR of a list of edges, built on their device with one sort and one read-back
(Graph.from_coo builds every Graph through it)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import AutosageError
from . import structure


@dataclass
class Canonical:
    """What one build of the canonical CSR knows (canonical_order)."""
    key: torch.Tensor            # row-major keys of the canonical edges, in canonical order
    user_to_canon: torch.Tensor  # canonical position of every input edge
    identity: bool               # the input already was canonical
    all_ones: bool               # the canonical values are all ones (no duplicates, weights 1 or none)
    stats: dict                  # the structure's stats (Graph.structure_stats)
    looped_stats: dict | None    # those of its self-loop graph, when square
    listed_loops: int            # listed self-loop edges (duplicates included)
    canon_loops: int | None      # canonical self-loop edges, when square
    listed: tuple | None         # (sorted keys, stable order) of every listing, when there are duplicates


# The key of a padding slot of a captured build (captured_build): above every edge's key, so
# padding sorts last and the edges' order is that of a build without it.
PAD_KEY = 2**63 - 1


@dataclass
class SortedEdges:
    """The device part of a build, sized to the capacity it ran at (padding slots past the edges)."""
    summary: torch.Tensor        # int64: the checks, the counts, then the structure's stats
    sorted_key: torch.Tensor     # the edges' keys in canonical order, padding last
    order: torch.Tensor          # the input position of each sorted slot
    position: torch.Tensor       # the canonical position of each sorted slot


def sort_edges(row: torch.Tensor, col: torch.Tensor, weight, sizes, n_nodes: int,
               keep_duplicates: bool, looped: bool) -> SortedEdges:
    """The build's device work, no transfer: one stable sort of the edge keys and everything the
    read-back carries. `sizes` = (edges, rows, cols) as ints, or as device scalars when the
    tensors are a captured build's buffers: then only the first `edges` slots hold edges, and the
    rest is padding whatever it contains, masked here (static shapes, so one CUDA graph serves
    every batch of a capacity). Degree vectors are `n_nodes` long."""
    n_edges, n_rows, n_cols = sizes
    dev, slots = row.device, torch.arange(row.numel(), device=row.device)
    valid = slots < n_edges
    key = torch.where(valid, row * n_cols + col, PAD_KEY)
    sorted_key, order = torch.sort(key, stable=True)
    first = valid.clone()                # the padding is sorted last: slots past n_edges
    if not keep_duplicates:
        first[1:] &= sorted_key[1:] != sorted_key[:-1]
    row, col = torch.where(valid, row, 0), torch.where(valid, col, 0)
    zero = torch.zeros((), dtype=torch.int64, device=dev)
    bounds = [row.min(), row.max(), col.min(), col.max()] if row.numel() else [zero] * 4
    position = torch.cumsum(first, 0) - 1            # each sorted edge's canonical position
    in_order = (order == slots).all()    # padding keeps its slots (equal keys, a stable sort)
    true = torch.ones((), dtype=torch.bool, device=dev)
    ones = (torch.where(valid, weight, 1.0) == 1).all() if weight is not None else true
    finite = torch.isfinite(torch.where(valid, weight, 0.0)).all() if weight is not None else true
    # the structure's features ride along (Graph.structure_stats), from the distinct sorted edges;
    # clamped, as an index out of range must reach the check, not a device assertion
    canon_rows = torch.div(sorted_key, n_cols, rounding_mode="floor").clamp_(0, n_nodes - 1)
    canon_cols = sorted_key.remainder(n_cols).clamp_(0, n_nodes - 1)
    stats = structure.structure_stats(canon_rows, canon_cols, first.long(), n_nodes, n_rows, looped)
    loops = ((row == col) & valid).sum()   # listed self-loop edges (norm.with_self_loops asks)
    head = torch.stack(bounds + [first.sum(), in_order.long(), ones.long(), finite.long(), loops])
    return SortedEdges(torch.cat([head, stats]), sorted_key, order, position)


def canonical_order(row: torch.Tensor, col: torch.Tensor, weight, shape: tuple,
                    keep_duplicates: bool) -> Canonical:
    """The canonical order of the edges (row[e], col[e]): one stable sort on the edges' device and
    ONE transfer back, which also carries the index bounds, the weights' finiteness and the
    structure's stats (a mini-batch step builds a Graph every time; each check read back alone
    would wait for the device once). Duplicates share one key unless `keep_duplicates` (then every
    edge keeps its own position, duplicates side by side in input order). On a GPU the device part
    replays a CUDA graph captured once per capacity (captured_build): a handful of launches
    instead of some forty."""
    from . import captured_build

    n_rows, n_cols = shape
    E = row.numel()
    n_nodes, looped = max(n_rows, n_cols), n_rows == n_cols
    with captured_build.LOCK:    # a captured build's outputs are read before the next replay
        found = captured_build.sort_edges(sort_edges, row, col, weight, shape, keep_duplicates)
        captured = found is not None
        if captured:
            found, n_nodes = found
        else:
            found = sort_edges(row, col, weight, (E, n_rows, n_cols), n_nodes, keep_duplicates, looped)
        return _canonical(found, captured, E, shape, n_nodes)


def _canonical(found: SortedEdges, captured: bool, E: int, shape: tuple, n_nodes: int) -> Canonical:
    """The Canonical of a build's device part: its one read-back, the checks, and what is kept
    (copied out of a captured build's buffers, which the next build overwrites)."""
    n_rows, n_cols = shape
    values = found.summary.cpu().numpy()
    low_r, high_r, low_c, high_c, n_keys, in_order, ones, finite, loops = values[:9].tolist()
    for name, low, high, bound in (("row", low_r, high_r, n_rows), ("col", low_c, high_c, n_cols)):
        if E and (low < 0 or high >= bound):
            raise AutosageError(f"{name}: index out of range [0, {bound})")
    if not finite:
        raise AutosageError("edge weights contain NaN or Inf")
    looped = n_rows == n_cols
    stats, looped_stats, canon_loops = structure.decode(values[9:], looped, (n_nodes - n_rows, n_nodes - n_cols))
    sorted_key, order, position = found.sorted_key[:E], found.order[:E], found.position[:E]
    canon_key = torch.empty(n_keys, dtype=sorted_key.dtype, device=sorted_key.device).scatter_(0, position, sorted_key)
    user_to_canon = torch.empty_like(order)
    user_to_canon[order] = position
    unique = n_keys == E
    listed = None
    if not unique:    # kept past the next build, which a captured build's buffers are not
        listed = (sorted_key.clone() if captured else sorted_key, order.clone() if captured else order,
                  bool(ones), bool(in_order))
    # summed duplicates are values of their own (a count, or a sum of weights): never "all ones"
    return Canonical(canon_key, user_to_canon, bool(unique and in_order), bool(unique and ones), stats,
                     looped_stats, loops, canon_loops, listed)


def rowptr_of(row: torch.Tensor, n_rows: int) -> torch.Tensor:
    """The CSR row pointer of sorted row ids, without a transfer (bincount would read the largest
    id back to size its output)."""
    return torch.searchsorted(row, torch.arange(n_rows + 1, device=row.device, dtype=row.dtype))
