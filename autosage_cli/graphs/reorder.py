"""Vertex reorderings of a square graph: one interface, `order(graph, method) -> perm`, and the
symmetric relabelling that applies one (P A Pᵀ: rows and columns renumbered together, so SpMM on
the result with permuted features is the original SpMM permuted).

Convention, everywhere in this module and in the `.perm.npy` files the CLI writes:
`perm[new] = old` — position `new` of the reordered graph holds vertex `old` of the original (what
SciPy's reverse_cuthill_mckee returns). So `A_new = A[perm][:, perm]`, features move as
`B_new = B[perm]`, results come back as `C = C_new[inverse(perm)]`.

Methods (each vectorised NumPy/SciPy, O(n log n) or O(nnz)):
  identity    0..n-1 (the baseline a measurement compares with)
  degree      rows by degree, descending; ties keep their original order (stable sort)
  hubsort     Balaji & Lucia, IISWC 2018 ("When is Graph Reordering an Optimization?"): hubs,
              rows whose degree is above the mean, first and sorted by degree, descending; every
              other row after them in its original relative order (keeps what locality the input
              order already has, which a full degree sort destroys)
  hubcluster  the same paper's cheaper variant: hubs first but in their original relative order,
              then the rest in theirs
  rcm         reverse Cuthill-McKee (scipy.sparse.csgraph) on the symmetrised pattern A ∪ Aᵀ:
              breadth-first levels from a low-degree vertex, which packs the nonzeros near the
              diagonal (small bandwidth)
  metis       a k-way METIS partition into parts of about 4096 vertices (pymetis), part by part
  community   Louvain communities (NetworKit's parallel PLM), community by community
              (both in graphs.clustered; optional libraries, the `reorder` extra)
  labelprop   label propagation (graphs.label_propagation), label by label: whole-array sorts
              that run on the GPU when the caller passes CuPy as `xp` (torch.relabel computes the
              same order, and the degree orders, on a Graph's device without sorting per round)

What an order achieved (the spread of the nonzeros before and after, the seconds) is measured one
layer up, in bench.reordering, which may use features' locality and symmetry check.

"Degree" is the row degree (stored nonzeros per row). On a symmetric graph, as most GNN graphs are,
it is also the column degree, which is what decides how often SpMM reads a row of B.
"""
from __future__ import annotations

import numpy as np

from ..errors import AutosageError
from . import clustered
from .pattern import symmetric_pattern
from .csr import CSRGraph, default_workers, from_arrays, parallel_map
from .edges import row_chunks

METHODS = ("rcm", "degree", "hubsort", "hubcluster", "metis", "community", "labelprop", "identity")
# Methods that run on an array module the caller passes (`xp`: CuPy for the device).
ARRAY_METHODS = frozenset({"labelprop"})
# Methods whose order can differ between two runs on the same graph (threads racing).
UNSTABLE = frozenset({"community"})
# Methods that read the symmetric verdict (they symmetrise the pattern unless it is known).
SYMMETRIC_AWARE = frozenset({"rcm", "metis"})
GATHER_CHUNK = 1 << 22   # nonzeros per task of the relabelling's gather (int64 offsets: 32 MiB)


def _degrees(graph: CSRGraph) -> np.ndarray:
    return np.diff(graph.indptr).astype(np.int64, copy=False)


def identity_order(graph: CSRGraph) -> np.ndarray:
    return np.arange(graph.n_rows, dtype=np.int64)


def degree_order(graph: CSRGraph) -> np.ndarray:
    # argsort of the negated degrees, stable: descending degree, ties in their original order.
    return np.argsort(-_degrees(graph), kind="stable").astype(np.int64, copy=False)


def _hubs(graph: CSRGraph) -> np.ndarray:
    """Mask of the hubs: rows whose degree exceeds the mean degree (the paper's threshold)."""
    degrees = _degrees(graph)
    return degrees * graph.n_rows > graph.nnz   # degree > nnz / n, in exact integers


def hubsort_order(graph: CSRGraph) -> np.ndarray:
    hubs = _hubs(graph)
    hub_ids = np.flatnonzero(hubs)
    by_degree = np.argsort(-_degrees(graph)[hub_ids], kind="stable")
    return np.concatenate([hub_ids[by_degree], np.flatnonzero(~hubs)]).astype(np.int64, copy=False)


def hubcluster_order(graph: CSRGraph) -> np.ndarray:
    hubs = _hubs(graph)
    return np.concatenate([np.flatnonzero(hubs), np.flatnonzero(~hubs)]).astype(np.int64, copy=False)


def rcm_order(graph: CSRGraph, symmetric: bool | None = None) -> np.ndarray:
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    # symmetric_mode=True: the pattern is symmetric by construction; SciPy would otherwise add the
    # transpose again (of the values, with the cancellation symmetric_pattern avoids).
    perm = reverse_cuthill_mckee(symmetric_pattern(graph, symmetric), symmetric_mode=True)
    return np.asarray(perm, dtype=np.int64)


def labelprop_order(graph: CSRGraph, xp=None, labeller=None) -> np.ndarray:
    """The clusters of label propagation's labels, from `labeller(graph)` when given (the same
    labels computed elsewhere: torch's CUDA kernels, which the commands pass), else from
    propagate's sorts on the array module `xp`."""
    if labeller is not None:
        return clustered.cluster_order(np.asarray(labeller(graph)))
    from .label_propagation import propagate

    xp = np if xp is None else xp
    labels = propagate(xp.asarray(graph.indptr), xp.asarray(graph.indices), graph.n_rows, xp)
    host = labels.get() if hasattr(labels, "get") else labels   # a CuPy array comes to the host
    return clustered.cluster_order(np.asarray(host))


ORDERS = {"rcm": rcm_order, "degree": degree_order, "hubsort": hubsort_order,
          "hubcluster": hubcluster_order, "metis": clustered.metis_order,
          "community": clustered.community_order, "labelprop": labelprop_order,
          "identity": identity_order}


def available(method: str) -> str | None:
    """Why `method` cannot run here (its optional library is missing), or None."""
    if method in clustered.LIBRARIES and not clustered.library_available(method):
        name = clustered.LIBRARIES[method][0]
        return f"needs the {name} package: {clustered.EXTRA}"
    return None


def require_square(graph: CSRGraph) -> None:
    if graph.n_rows != graph.n_cols:
        raise AutosageError(f"cannot reorder a non-square graph ({graph.n_rows}x{graph.n_cols}): "
                            "rows and columns are renumbered together")


def order(graph: CSRGraph, method: str, symmetric: bool | None = None, xp=None, labeller=None) -> np.ndarray:
    """The permutation `method` computes for `graph`: int64, perm[new] = old. `symmetric`: whether
    the pattern is known to be symmetric (rcm and metis use it; None: not known, so they
    symmetrise). `xp`: the array module of the methods in ARRAY_METHODS (None: NumPy);
    `labeller`: labelprop's labels computed by the caller (labelprop_order)."""
    if method not in ORDERS:
        raise AutosageError(f"unknown reordering method {method!r} (known: {', '.join(METHODS)})")
    require_square(graph)
    if method in SYMMETRIC_AWARE:
        return ORDERS[method](graph, symmetric)
    if method == "labelprop":
        return labelprop_order(graph, xp, labeller)
    if method in ARRAY_METHODS:
        return ORDERS[method](graph, xp)
    return ORDERS[method](graph)


def check_permutation(perm, n: int) -> np.ndarray:
    """`perm` as an int64 array if it is a permutation of 0..n-1, else AutosageError."""
    perm = np.asarray(perm)
    if perm.ndim != 1 or perm.shape[0] != n:
        raise AutosageError(f"a permutation of {n} vertices must have {n} entries, got shape {perm.shape}")
    if perm.dtype.kind not in "iu":
        raise AutosageError(f"a permutation must hold integers, got {perm.dtype}")
    perm = perm.astype(np.int64, copy=False)
    if n and (perm.min() < 0 or perm.max() >= n):
        raise AutosageError(f"permutation entry out of range [0, {n})")
    seen = np.zeros(n, dtype=bool)
    seen[perm] = True
    if not seen.all():
        raise AutosageError("not a permutation: some vertex appears twice and another never")
    return perm


def inverse(perm: np.ndarray) -> np.ndarray:
    """inv[old] = new for perm[new] = old."""
    inv = np.empty_like(perm)
    inv[perm] = np.arange(perm.shape[0], dtype=perm.dtype)
    return inv


def relabelled_locality(graph: CSRGraph, perm, workers: int | None = None) -> float:
    """features.locality of permute(graph, perm), exactly, without building it: mean |inv[i] -
    inv[j]| / n over the nonzeros (i, j), an integer sum in row chunks. The reordering decision
    estimates every candidate with it and relabels only those it measures (a relabel of 124M
    nonzeros took 12.7 s; this is one gather and one sum per nonzero)."""
    require_square(graph)
    n = graph.n_rows
    if graph.nnz == 0:
        return 0.0
    inv = inverse(check_permutation(perm, n))

    def chunk_sum(span):
        first, end, start = span
        stop = int(graph.indptr[end])
        rows = np.repeat(inv[first:end], np.diff(graph.indptr[first:end + 1]))
        return int(np.abs(rows - inv[graph.indices[start:stop]]).sum())

    spans = list(row_chunks(_degrees(graph), GATHER_CHUNK, offsets=graph.indptr.astype(np.int64)))
    total = sum(parallel_map(chunk_sum, spans, default_workers() if workers is None else workers))
    return total / graph.nnz / n


def permute(graph: CSRGraph, perm, source: dict | None = None, workers: int | None = None) -> CSRGraph:
    """P A Pᵀ as a canonical CSRGraph: new row r is old row perm[r] with every column c renamed
    inv[c]. The rows are gathered in chunks (no int64 array of nnz entries) and each chunk's rows
    sorted by SciPy (C++): a bijection of the columns creates no duplicates, so nothing is summed.
    `source` defaults to {"reordered_from": graph.source}: the original's keys are not kept, since
    replay would rebuild the original graph from them, not this one."""
    import scipy.sparse as sp

    require_square(graph)
    n = graph.n_rows
    perm = check_permutation(perm, n)
    inv = inverse(perm).astype(graph.indices.dtype, copy=False)   # ids fit the index dtype
    degrees = _degrees(graph)[perm]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    shift = graph.indptr[perm].astype(np.int64) - indptr[:-1]   # old position minus new position
    indices = np.empty_like(graph.indices)
    values = np.empty_like(graph.values)

    def gather(span):
        first, end, start = span
        stop = int(indptr[end])
        src = np.repeat(shift[first:end], degrees[first:end])
        src += np.arange(start, stop, dtype=np.int64)
        np.take(inv, np.take(graph.indices, src), out=indices[start:stop])
        np.take(graph.values, src, out=values[start:stop])
        # Sort these rows' columns in place with SciPy's C++ sort, which releases the GIL, so
        # the chunks sort in parallel (one sort of the whole graph: 3.2 s of 12.7 on 124M).
        local = (indptr[first:end + 1] - start).astype(indices.dtype)   # SciPy wants one index type
        rows = sp.csr_matrix((values[start:stop], indices[start:stop], local), shape=(end - first, n),
                             copy=False)
        rows.sort_indices()
        if not np.shares_memory(rows.indices, indices):   # SciPy made a copy: take its result
            indices[start:stop], values[start:stop] = rows.indices, rows.data

    parallel_map(gather, list(row_chunks(degrees, GATHER_CHUNK, offsets=indptr)),
                 default_workers() if workers is None else workers)
    # from_arrays validates again (about half of this function's time on 124M nonzeros): the
    # result is canonical by construction, but the check is what every later stage trusts.
    return from_arrays(indptr, indices, values, graph.shape,
                       {"reordered_from": graph.source} if source is None else source)
