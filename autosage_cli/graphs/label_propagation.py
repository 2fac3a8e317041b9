"""Label propagation (Raghavan, Albert & Kumara 2007) as whole-array passes, for the `labelprop`
ordering: every vertex takes the label most of its neighbours hold (ties: the smallest label),
three quarters of the vertices per round (a hashed choice: a fully synchronous round oscillates
between two labellings on bipartite pieces), until almost no label changes.

Written over an array module `xp` (NumPy, or CuPy where the caller has a device: the same sorts
and scans, so the CPU tests check the GPU's logic too; this module never imports CuPy). A round is
one sort of the 2·nnz (vertex, neighbour's label) keys and one lexicographic sort of the runs.
torch.label_propagation computes the same labels with no sort (hashed pair counts): what the
torch path and the training suite run on the GPU.

Why three quarters, and how many rounds: on a products-like construction (200k vertices, 10M
edges, blocks of 2048, shuffled) updating a hashed half per round still had locality 0.174 after
12 rounds and needed all 20 to reach 0.072; three quarters settled (at most 0.2% would change) after
7 rounds at locality 0.0718, and at 50k vertices the same as a fully synchronous round (0.079 by
round 5-6), without its oscillation. At 1/16 scale the half-rule's 0.0714 compared with the
unshuffled graph's 0.0703 (NetworKit's PLM: 0.0705, after 77 s building its graph and 122 s
finding communities on 2 cores).
"""
from __future__ import annotations

import numpy as np

MAX_ROUNDS = 10         # 7 settled the 10M-edge construction of the docstring; a cap, not a target
SETTLED = 0.002          # stop once at most this share of the vertices would change label
# The hash of (vertex, round) that picks the moving vertices (`_moving`; torch.label_propagation
# and the CUDA kernel's round, cuda/util_labelprop.cu, take these same constants).
MOVING_MULTIPLIER = 0x9E3779B97F4A7C15
MOVING_SALT = 0x632BE59BD9B4E019


def moving_salt(round_: int) -> int:
    """The salt of round `round_`'s hash (an unsigned 64-bit value)."""
    return (round_ * MOVING_SALT + 1) % 2**64


def _moving(n: int, round_: int, xp):
    """Which vertices update this round: a fixed hash of (vertex, round), about three quarters of
    them (bits 33-34 of the hash not both 0), the same on every array module (no random generator
    state; torch.label_propagation.moving computes the same bits)."""
    ids = xp.arange(n, dtype=xp.uint64)
    salt = moving_salt(round_)
    mixed = ids * xp.uint64(MOVING_MULTIPLIER) + xp.uint64(salt)   # wraps modulo 2^64, as meant
    return ((mixed >> xp.uint64(33)) & xp.uint64(3)) != 0


def edge_lists(indptr, indices, n: int, xp):
    """(vertex, neighbour) int64 arrays of the undirected pattern: every stored (i, j) both ways,
    self-loops dropped (a vertex's own label must not vote for itself)."""
    nnz = int(indices.shape[0])
    rows = xp.searchsorted(xp.asarray(indptr), xp.arange(nnz), side="right").astype(xp.int64) - 1
    cols = xp.asarray(indices).astype(xp.int64)
    keep = rows != cols
    rows, cols = rows[keep], cols[keep]
    return xp.concatenate([rows, cols]), xp.concatenate([cols, rows])


def _by_vote(vertex, label, counts, n: int, xp):
    """The (vertex, label) runs in order of vertex, then count descending, then label: each
    vertex's first run is its vote. One sort of a composite int64 key where it fits (unique
    keys, so no stability is needed), else a lexicographic sort of three keys."""
    top = int(counts.max())
    if n * (top + 1) * n < 2**62:
        composite = (vertex * (top + 1) + (top - counts)) * n + label
        composite.sort()
        return composite // ((top + 1) * n), composite % n
    order = xp.lexsort(xp.stack([label, top - counts, vertex]))
    return vertex[order], label[order]


def propagate(indptr, indices, n: int, xp=np, max_rounds: int = MAX_ROUNDS, settled: float = SETTLED):
    """Labels (int64, in `xp`) of the vertices of the n x n pattern (indptr, indices)."""
    labels = xp.arange(n, dtype=xp.int64)
    if n == 0 or int(indices.shape[0]) == 0:
        return labels
    src, dst = edge_lists(indptr, indices, n, xp)
    if int(src.shape[0]) == 0:     # self-loops only: nobody votes
        return labels
    for round_ in range(max_rounds):
        key = src * n + labels[dst]
        key.sort()
        first = xp.concatenate([xp.ones(1, dtype=bool), key[1:] != key[:-1]])
        starts = xp.flatnonzero(first)
        counts = xp.diff(xp.concatenate([starts, xp.asarray([key.shape[0]], dtype=starts.dtype)]))
        vertex, label = key[starts] // n, key[starts] % n
        vertex, label = _by_vote(vertex, label, counts, n, xp)
        head = xp.concatenate([xp.ones(1, dtype=bool), vertex[1:] != vertex[:-1]])
        winner_vertex, winner_label = vertex[head], label[head]
        # settled: counted over every vertex's vote, not only this round's half (a round can move
        # nothing while the other half still disagrees)
        unsettled = int((winner_label != labels[winner_vertex]).sum())
        if unsettled <= settled * n:
            break
        moving = _moving(n, round_, xp)[winner_vertex]
        labels = labels.copy()
        labels[winner_vertex[moving]] = winner_label[moving]
    return labels
