"""Orderings that group a graph's vertices into clusters found by a library, then number the
clusters one after another: `metis` (a k-way partition by METIS, through pymetis) and `community`
(Louvain modularity communities by NetworKit's parallel PLM). Both keep the original relative
order inside a cluster and number the clusters by their smallest original id, so an order that
already had locality keeps what it can of it.

Why clusters: SpMM at K >= 16 on 100M-edge graphs is bound by gathering rows of B through L2, and
a row's gathers hit L2 when its neighbours' ids are close to each other. On products-like
(80% of each row's edges inside a block of 2048 ids) shuffling the ids made SpMM 1.7-1.85x slower
on the H200; the breadth-first levels of RCM and the degree-based orders do not recover that
(bench.reordering's locality stays at 0.31-0.37, near the shuffled 0.333), a partition does.

Both libraries are optional (`pip install 'autosage[reorder]'`); a method whose library is missing
says so in one line. Both see the pattern as undirected, A ∪ Aᵀ, without self-loops (METIS
refuses them; they carry no information about clusters).
"""
from __future__ import annotations

import numpy as np

from ..errors import AutosageError
from .csr import CSRGraph, default_workers
from .pattern import undirected_pattern

EXTRA = "pip install 'autosage[reorder]'"
# METIS part size: parts of about this many vertices. On the products-like construction (blocks of
# 2048) a 4096-vertex part measured the same locality as a 2048-vertex one (0.076 vs 0.072 at
# 1/16 scale) in 25% less time, and a 4096-row slice of B at K = 64 (1 MiB) still fits L2 many
# times over.
PART_NODES = 4096
LIBRARIES = {"metis": ("pymetis", "METIS partitions"), "community": ("networkit", "PLM communities")}


def require_library(method: str):
    """The library module `method` needs, imported; AutosageError naming the extra when it is missing."""
    import importlib

    name, what = LIBRARIES[method]
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise AutosageError(f"reordering method {method!r} ({what}) needs the {name} package, "
                            f"which is not installed ({exc}): {EXTRA}") from None


def library_available(method: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(LIBRARIES[method][0]) is not None


def cluster_order(labels: np.ndarray) -> np.ndarray:
    """perm[new] = old grouping equal labels: clusters numbered by their smallest member, members
    in their original order (a stable sort by the cluster's rank)."""
    labels = np.asarray(labels, dtype=np.int64)
    if labels.size == 0:
        return np.zeros(0, dtype=np.int64)
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size, dtype=np.int64)
    return np.argsort(rank[inverse], kind="stable").astype(np.int64, copy=False)


def part_count(n: int) -> int:
    return max(2, n // PART_NODES)


def metis_order(graph: CSRGraph, symmetric: bool | None = None) -> np.ndarray:
    pymetis = require_library("metis")
    n = graph.n_rows
    if n < 2:
        return np.arange(n, dtype=np.int64)
    pattern = undirected_pattern(graph, symmetric)
    if pattern.nnz == 0:   # METIS has nothing to cut; every vertex is its own cluster
        return np.arange(n, dtype=np.int64)
    options = pymetis.Options(seed=0)   # a fixed seed: the same graph gets the same order
    adjacency = pymetis.CSRAdjacency(adj_starts=pattern.indptr, adjacent=pattern.indices)
    result = pymetis.part_graph(part_count(n), adjacency, options=options)
    return cluster_order(np.asarray(result.vertex_part))


def community_order(graph: CSRGraph, workers: int | None = None) -> np.ndarray:
    """PLM without refinement: at 1/16 of products-like it found the 75 generated blocks in 0.9 s
    on 2 threads (igraph's Leiden: 7.8 s plus 10.7 s to build its graph; NetworKit's PLP: 1.4 s
    and 46 merged communities). NetworKit builds its undirected graph from A itself (each stored
    (i, j) an edge both ways), which spares the union A ∪ Aᵀ; a pair stored both ways weighs
    double, which only strengthens what is already a tie. The order varies between runs when
    several threads race (PLM moves vertices in parallel): the decision cache keeps the one used."""
    nk = require_library("community")
    import scipy.sparse as sp

    n = graph.n_rows
    if n < 2 or graph.nnz == 0:
        return np.arange(n, dtype=np.int64)
    nk.engineering.setNumberOfThreads(default_workers() if workers is None else workers)
    nk.engineering.setSeed(0, False)
    ones = np.ones(graph.nnz, dtype=np.float32)
    adjacency = sp.csr_matrix((ones, graph.indices, graph.indptr), shape=graph.shape, copy=False)
    g = nk.GraphFromCsr(adjacency, directed=False)
    g.removeSelfLoops()
    plm = nk.community.PLM(g, refine=False)
    plm.run()
    return cluster_order(np.asarray(plm.getPartition().getVector()))
