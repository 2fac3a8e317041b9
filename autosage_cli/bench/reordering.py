"""What a reordering (graphs.reorder) achieved on the host: how far the nonzeros lie from the
diagonal before and after (locality is the features' own definition), and the seconds the order
and the relabelling took. Here rather than in graphs/ because it uses features, a layer above
graphs; the GPU side, the SpMM time on both orders, is bench.reorder_gain.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np

from ..graphs.csr import CSRGraph
from ..graphs.reorder import ARRAY_METHODS, SYMMETRIC_AWARE, order, permute, require_square


@dataclass(frozen=True)
class Spread:
    """How far a graph's nonzeros lie from the diagonal."""
    locality: float    # features.locality: mean |col − row| / n over the nonzeros (~1/3 random)
    bandwidth: int     # max |col − row| over the nonzeros
    row_span: float    # mean over non-empty rows of (last col − first col) / n: the slice of B a row reads


def spread(graph: CSRGraph) -> Spread:
    """The graph's Spread. Locality is features.locality itself (one O(nnz) pass); the other two
    are O(n): with sorted columns a row's extreme columns are its first and last."""
    from ..features import locality

    degrees = np.diff(graph.indptr)
    rows = np.flatnonzero(degrees)
    if rows.size == 0:
        return Spread(0.0, 0, 0.0)
    first = graph.indices[graph.indptr[rows]].astype(np.int64)
    last = graph.indices[graph.indptr[rows + 1] - 1].astype(np.int64)
    bandwidth = int(max(np.abs(first - rows).max(), np.abs(last - rows).max()))
    row_span = float((last - first).sum() / rows.size / graph.n_cols)
    return Spread(locality(graph, degrees), bandwidth, row_span)


@dataclass(frozen=True)
class Reordering:
    """What one reordering did: the method, its seconds, the spread before and after."""
    method: str
    order_s: float     # computing the permutation
    apply_s: float     # relabelling the graph with it
    before: Spread
    after: Spread

    def to_dict(self) -> dict:
        return asdict(self)


def is_symmetric(graph: CSRGraph) -> bool:
    """Whether the pattern is symmetric: features' cheap necessary conditions, then, where they
    pass, its exact transpose check (1.3-1.6 s on 115M nonzeros; the union it saves RCM, 8 s)."""
    from ..features import diagonal_sums, symmetry_prefilter, transpose_matches

    degrees = np.diff(graph.indptr)
    verdict = symmetry_prefilter(graph, diagonal_sums(graph, degrees))
    return transpose_matches(graph, degrees) if verdict is None else verdict


def array_module(method: str):
    """CuPy for a method that runs on an array module when a GPU is usable, else None (NumPy)."""
    if method not in ARRAY_METHODS:
        return None
    from ..backends.arrays import device_module
    return device_module()


def reorder(graph: CSRGraph, method: str, labeller=None) -> tuple[CSRGraph, np.ndarray, Reordering]:
    """(reordered graph, perm with perm[new] = old, report) for `method`. The time of rcm and
    metis includes the symmetry check that decides whether they must symmetrise the pattern;
    labelprop's the labelling: by `labeller` when given (graphs.reorder.labelprop_order), else on
    a GPU the upload of the graph and the sorts there."""
    require_square(graph)
    started = time.perf_counter()
    perm = order(graph, method, symmetric=is_symmetric(graph) if method in SYMMETRIC_AWARE else None,
                 xp=None if labeller is not None else array_module(method),
                 labeller=labeller)
    ordered = time.perf_counter()
    result = permute(graph, perm, {"reordered_from": graph.source, "reorder": method})
    applied = time.perf_counter()
    return result, perm, Reordering(method, ordered - started, applied - ordered, spread(graph),
                                    spread(result))
