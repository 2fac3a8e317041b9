"""Label propagation (Raghavan, Albert & Kumara 2007) as whole-array passes, for the `labelprop`
ordering: every vertex takes the label most of its neighbours hold (ties: the smallest label),
half of the vertices per round (semi-synchronous: a fully synchronous round oscillates between two
labellings on bipartite pieces), until almost no label changes.

Written over an array module `xp` (NumPy, or CuPy where the caller has a device: the same sorts
and scans, so the CPU tests check the GPU's logic too; this module never imports CuPy). A round is
one sort of the 2·nnz (vertex, neighbour's label) keys and one lexicographic sort of the runs, so
it is bound by the device's sort: on products-like (248M keys a round) that is the reason to run
it on the GPU, where NetworKit's PLM spent 77 s building its graph and 122 s finding communities
on 2 cores.

Why it is enough: on the products-like construction at 1/16 scale (153k vertices, 7.7M edges,
shuffled) 12 rounds reached locality 0.0714 against the unshuffled graph's 0.0703 (PLM: 0.0705),
merging the 75 generated blocks into 219 labels.
"""
from __future__ import annotations

import numpy as np

MAX_ROUNDS = 20
SETTLED = 0.002          # stop once at most this share of the vertices would change label


def _half(n: int, round_: int, xp):
    """Which vertices update this round: a fixed hash of (vertex, round), about half of them, the
    same on every array module (no random generator state)."""
    ids = xp.arange(n, dtype=xp.uint64)
    salt = (round_ * 0x632BE59BD9B4E019 + 1) % 2**64
    mixed = ids * xp.uint64(0x9E3779B97F4A7C15) + xp.uint64(salt)   # wraps modulo 2^64, as meant
    return ((mixed >> xp.uint64(33)) & xp.uint64(1)) == 1


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
        moving = _half(n, round_, xp)[winner_vertex]
        labels = labels.copy()
        labels[winner_vertex[moving]] = winner_label[moving]
    return labels
