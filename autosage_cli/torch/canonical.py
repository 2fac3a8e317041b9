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


def canonical_order(row: torch.Tensor, col: torch.Tensor, weight, shape: tuple,
                     keep_duplicates: bool) -> Canonical:
    """The canonical order of the edges (row[e], col[e]): one stable sort on the edges' device and
    ONE transfer back, which also carries the index bounds, the weights' finiteness and the
    structure's stats (a mini-batch step builds a Graph every time; each check read back alone
    would wait for the device once). Duplicates share one key unless `keep_duplicates` (then every
    edge keeps its own position, duplicates side by side in input order)."""
    n_rows, n_cols = shape
    dev, E = row.device, row.numel()
    key = row * n_cols + col
    sorted_key, order = torch.sort(key, stable=True)
    first = torch.ones(E, dtype=torch.bool, device=dev)
    if E > 1 and not keep_duplicates:
        first[1:] = sorted_key[1:] != sorted_key[:-1]
    zero = torch.zeros((), dtype=torch.int64, device=dev)
    bounds = [row.min(), row.max(), col.min(), col.max()] if E else [zero] * 4
    position = torch.cumsum(first, 0) - 1            # each sorted edge's canonical position
    in_order = (order == torch.arange(E, device=dev)).all()
    true = torch.ones((), dtype=torch.bool, device=dev)
    ones = (weight == 1).all() if weight is not None else true
    finite = torch.isfinite(weight).all() if weight is not None else true
    # the structure's features ride along (Graph.structure_stats), from the distinct sorted edges;
    # clamped, as an index out of range must reach the check below, not a device assertion
    canon_rows = torch.div(sorted_key, n_cols, rounding_mode="floor").clamp_(0, n_rows - 1)
    canon_cols = sorted_key.remainder(n_cols)
    looped = n_rows == n_cols
    stats = structure.structure_stats(canon_rows, canon_cols, first.long(), shape, looped=looped)
    loops = (row == col).sum()          # listed self-loop edges (norm.with_self_loops asks)
    n_keys = position[-1] + 1 if E else zero
    head = torch.stack(bounds + [n_keys, in_order.long(), ones.long(), finite.long(), loops])
    values = torch.cat([head, stats]).cpu().numpy()
    low_r, high_r, low_c, high_c, n_keys, in_order, ones, finite, loops = values[:9].tolist()
    for name, low, high, bound in (("row", low_r, high_r, n_rows), ("col", low_c, high_c, n_cols)):
        if E and (low < 0 or high >= bound):
            raise AutosageError(f"{name}: index out of range [0, {bound})")
    if not finite:
        raise AutosageError("edge weights contain NaN or Inf")
    stats, looped_stats, canon_loops = structure.decode(values[9:], looped)
    canon_key = torch.empty(n_keys, dtype=key.dtype, device=dev).scatter_(0, position, sorted_key)
    user_to_canon = torch.empty_like(order)
    user_to_canon[order] = position
    unique = n_keys == E
    # summed duplicates are values of their own (a count, or a sum of weights): never "all ones"
    return Canonical(canon_key, user_to_canon, bool(unique and in_order), bool(unique and ones), stats,
                      looped_stats, loops, canon_loops,
                      None if unique else (sorted_key, order, bool(ones), bool(in_order)))


def rowptr_of(row: torch.Tensor, n_rows: int) -> torch.Tensor:
    """The CSR row pointer of sorted row ids, without a transfer (bincount would read the largest
    id back to size its output)."""
    return torch.searchsorted(row, torch.arange(n_rows + 1, device=row.device, dtype=row.dtype))
