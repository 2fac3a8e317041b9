"""Label propagation in torch, on the graph's own device (CUDA, or CPU tensors alike): the labelling
of graphs.label_propagation.propagate exactly (same rounds, same hashed three quarters of the
vertices per round, same votes and ties, same stopping rule), computed with no sort at all.

Why no sort: the host-and-CuPy version sorts the 2·nnz (vertex, label) keys twice a round; on
products-like (248M keys) that was 2 full-width sorts a round for 20 rounds (the half-per-round
rule it had then), most of the 4.09 s the training suite measured for labelprop on the H200. Here a round counts each (vertex,
neighbour's label) pair in a hash table built by scatters (O(nnz) atomics, no ordering), then
takes each vertex's vote as one scatter-max of a (count, -label) score:

  * the table: slot = hash(key) of key = vertex·n + label; the largest key landing in a slot owns
    it (scatter amax), owners count themselves there (index_add); a key that lost its slot tries
    again with another hash in a table sized for what is left (a few percent, then a few per
    mille). So every count is exact, whatever the hash's quality: the hash only decides how many
    (cheap) retry levels run.
  * the vote: score = count·n + (n - 1 - label), maximised per vertex, is the most frequent label
    and among equals the smallest, the reference's tie rule.

One host read-back a round (how many keys lost their slot, and how many vertices would change:
the stopping rule), a few integers, never the edges.

`propagate` runs these scatter rounds (`propagate_scatter`) on CPU tensors, and on CUDA tensors
the kernels of torch.cuda_label_propagation (a table per vertex instead of one for every pair:
the whole products-like-shuffled reordering took 0.55 s on the H200 with the scatters), whose
labels the GPU tests compare with these.
"""
from __future__ import annotations

import warnings

import torch

from ..graphs.label_propagation import MAX_ROUNDS, MOVING_MULTIPLIER, SETTLED, moving_salt

# Hash multipliers, one per retry level (odd, < 2^23, so that a 40-bit key times one stays below
# 2^63: no signed overflow, on any device).
MULTIPLIERS = (0x5BD1E9, 0x27D4EB, 0x165667, 0x4CF5AD, 0x6A09E7, 0x3C6EF3, 0x1B8735, 0x7F4A7D)


def moving(n: int, round_: int, device) -> torch.Tensor:
    """graphs.label_propagation._moving in exact integer arithmetic that never overflows int64:
    bits 33-34 of (id·M + salt) mod 2^64 depend only on the low 35 bits of each term, and those
    come from a 17-bit and an 18-bit piece of M (each product below 2^49)."""
    low = (1 << 35) - 1
    m = MOVING_MULTIPLIER & low
    salt = moving_salt(round_) & low
    ids = torch.arange(n, dtype=torch.int64, device=device)
    low_piece, high_piece = m & ((1 << 17) - 1), m >> 17
    product = ids * low_piece + ((ids * high_piece) & ((1 << 18) - 1)) * (1 << 17)
    return (((product + salt) & low) >> 33) != 0


def _slots(keys: torch.Tensor, level: int, bits: int) -> torch.Tensor:
    folded = (keys & ((1 << 40) - 1)) ^ (keys >> 40)          # < 2^40
    mixed = folded * MULTIPLIERS[level % len(MULTIPLIERS)]    # < 2^63
    return (mixed >> 20) & ((1 << bits) - 1)


def pair_counts(keys: torch.Tensor) -> torch.Tensor:
    """For every entry of `keys` (non-negative int64), how many entries hold the same key: exact
    (module docstring: an owned hash slot per key, retried at the next level when lost)."""
    counts = torch.empty_like(keys)
    todo, pending = None, keys
    level = 0
    while pending.numel():
        bits = max(10, (2 * pending.numel() - 1).bit_length())   # load factor at most 1/2
        slot = _slots(pending, level, bits)
        owner_key = torch.full((1 << bits,), -1, dtype=torch.int64, device=keys.device)
        owner_key.scatter_reduce_(0, slot, pending, "amax")
        owns = owner_key.index_select(0, slot) == pending
        tally = torch.zeros(1 << bits, dtype=torch.int32, device=keys.device)   # half the bytes
        tally.index_add_(0, slot, owns.to(torch.int32))
        found = tally.index_select(0, slot).to(torch.int64)
        if todo is None:
            counts.copy_(found)          # the losers' entries are overwritten by a later level
        else:
            counts.index_copy_(0, todo[owns], found[owns])
        lost = (~owns).nonzero().squeeze(1)
        todo = lost if todo is None else todo[lost]
        pending = pending.index_select(0, lost)
        level += 1
    return counts


def undirected_pairs(row: torch.Tensor, col: torch.Tensor):
    """(vertex, neighbour) int64 of the undirected pattern: every stored (i, j) both ways,
    self-loops dropped (a vertex's own label must not vote for itself)."""
    keep = row != col
    row, col = row[keep].to(torch.int64), col[keep].to(torch.int64)
    return torch.cat([row, col]), torch.cat([col, row])


def propagate(row: torch.Tensor, col: torch.Tensor, n: int, max_rounds: int = MAX_ROUNDS,
              settled: float = SETTLED) -> torch.Tensor:
    """Labels (int64, on row's device) of the n x n pattern with edges (row[e], col[e]): those of
    graphs.label_propagation.propagate on the same pattern. CUDA tensors (CuPy usable): the
    kernels' rounds (torch.cuda_label_propagation); anything else, or a graph those do not take,
    the scatter rounds."""
    if n and row.numel() and row.is_cuda:
        from ..capability import gpu_available

        if gpu_available():
            from . import cuda_label_propagation as kernels

            try:
                labels = kernels.propagate(row, col, n, max_rounds, settled)
            except kernels.TableOverflow as exc:   # never expected; the scatters are exact
                warnings.warn(f"{exc}; running torch's scatter rounds", RuntimeWarning, stacklevel=2)
                labels = None
            if labels is not None:
                return labels
    return propagate_scatter(row, col, n, max_rounds, settled)


def propagate_scatter(row: torch.Tensor, col: torch.Tensor, n: int, max_rounds: int = MAX_ROUNDS,
                      settled: float = SETTLED) -> torch.Tensor:
    """`propagate` by the scatter rounds of the module docstring, on any device: the CPU path, and
    the reference the CUDA kernels' labels are tested against."""
    device = row.device
    labels = torch.arange(n, dtype=torch.int64, device=device)
    if n == 0 or row.numel() == 0:
        return labels
    vertex, neighbour = undirected_pairs(row, col)
    for round_ in range(max_rounds):
        label = labels.index_select(0, neighbour)
        counts = pair_counts(vertex * n + label)
        score = counts * n + (n - 1 - label)
        best = torch.full((n,), -1, dtype=torch.int64, device=device)
        best.scatter_reduce_(0, vertex, score, "amax")
        voted = best >= 0
        winner = torch.where(voted, (n - 1) - best % n, labels)
        # settled: counted over every vertex's vote, not only this round's half (as the reference)
        if int((winner != labels).sum()) <= settled * n:
            break
        labels = torch.where(moving(n, round_, device) & voted, winner, labels)
    return labels


def cluster_order(labels: torch.Tensor) -> torch.Tensor:
    """graphs.clustered.cluster_order on the labels' device, with one stable sort of n keys:
    clusters numbered by their smallest member, members in their original order."""
    n = labels.numel()
    ids = torch.arange(n, dtype=torch.int64, device=labels.device)
    if n == 0:
        return ids
    smallest = torch.full((n,), n, dtype=torch.int64, device=labels.device)
    smallest.scatter_reduce_(0, labels, ids, "amin")
    return torch.sort(smallest.index_select(0, labels), stable=True).indices
