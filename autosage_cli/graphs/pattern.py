"""A graph's pattern as the undirected graph the orderings see (graphs.reorder, graphs.clustered)."""
from __future__ import annotations

import numpy as np

from .csr import CSRGraph


def symmetric_pattern(graph: CSRGraph, symmetric: bool | None = None):
    """A ∪ Aᵀ as a SciPy CSR of int8 ones. Ones, not A's values: a sum of values could cancel
    (a skew-symmetric pair) and drop an edge the ordering must see. `symmetric=True` (the caller
    knows the pattern is symmetric: features' check, as bench.reordering.reorder runs it) uses
    the pattern as it is: most GNN graphs are symmetric, and the union costs 8 s on 124M nonzeros."""
    import scipy.sparse as sp

    ones = np.ones(graph.nnz, dtype=np.int8)
    pattern = sp.csr_matrix((ones, graph.indices, graph.indptr), shape=graph.shape, copy=False)
    return pattern if symmetric else (pattern + pattern.T).tocsr()


def undirected_pattern(graph: CSRGraph, symmetric: bool | None = None):
    """A ∪ Aᵀ as a SciPy CSR of int8 ones without the diagonal (METIS refuses self-loops)."""
    pattern = symmetric_pattern(graph, symmetric)
    if pattern.diagonal().any():
        pattern = pattern.copy() if symmetric else pattern   # never edit the caller's arrays
        pattern.setdiag(0)
        pattern.eliminate_zeros()
    return pattern
