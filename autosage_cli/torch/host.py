"""A Graph's canonical CSR on the host (Graph.host_csr): what is tuned and cached, copied only when
a new kind is probed or a graph is tuned as itself. Every copy is counted, so that tests can hold
the per-step path of a mini-batch loop to none."""
from __future__ import annotations

import numpy as np

from ..graphs.csr import CSRGraph, from_arrays, index_dtype

# Device-to-host copies of a graph's index arrays made by `host_csr` in this process: the per-step
# path of a mini-batch loop must make none (tests count them).
_HOST_COPIES = [0]


def host_copies() -> int:
    """How many times a Graph's CSR was copied to the host in this process (`Graph.host_csr`)."""
    return _HOST_COPIES[0]


def _without_duplicates(rowptr: np.ndarray, col: np.ndarray, shape: tuple):
    """(rowptr, col, ones) of a sorted CSR pattern with repeated entries kept once."""
    import scipy.sparse as sp

    m = sp.csr_matrix((np.ones(col.size, dtype=np.float32), col, rowptr), shape=shape)
    m.sum_duplicates()
    return m.indptr, m.indices, np.ones(m.nnz, dtype=np.float32)


def _repeats_an_edge(rowptr, col) -> bool:
    """Whether a row-sorted CSR (tensors, where the graph is: one pass there, on a GPU a few
    milliseconds for 124M edges, not the host's) lists an entry twice (a graph built with
    keep_duplicates)."""
    same = col[1:] == col[:-1]
    boundaries = rowptr[1:-1]
    same[boundaries[(boundaries > 0) & (boundaries < col.numel())] - 1] = False   # across rows
    return bool(same.any())


def holds_its_edges(g, host: CSRGraph) -> bool:
    """Whether `host`, g's host CSR, lists g's own edges: not when g keeps duplicate edges, which
    a CSRGraph holds once (then work on g's tensors would not be work on `host`)."""
    return host.nnz == g.nnz


def host_csr(g, weighted: bool = True) -> CSRGraph:
    """g's canonical CSR on the host, with its weights or the pattern (all ones); a graph that keeps
    duplicate edges gives its coalesced graph's pattern (a CSRGraph holds no duplicates)."""
    parent = g._structure_of
    which = "weighted" if weighted and g.weight is not None else "pattern"
    if which == "pattern" and parent is not None:
        return parent.host_csr(weighted=False)
    if g._coalesced_ref is not None:
        # a CSRGraph holds no duplicate edges: features and tunes of a graph that keeps them
        # (attention's) read its coalesced graph, of the same rows and nearly the same edges
        coalesced = g._coalesced()
        if coalesced is not None:
            return coalesced.host_csr(weighted=False)
        which = "coalesced"
    elif g._static is not None:
        # a static graph keeps every listing (and its padding's self-loops side by side): the
        # tuner and the decision cache read its pattern without duplicates, as for any such graph
        which = "coalesced"
    if which not in g._host:
        _HOST_COPIES[0] += 1
        repeats = which != "coalesced" and _repeats_an_edge(g.rowptr, g.col)
        rowptr, col = g.rowptr.cpu().numpy(), g.col.cpu().numpy()
        values = (g.weight.float().cpu().numpy() if which == "weighted"
                  else np.ones(g.nnz, dtype=np.float32))
        if which == "coalesced" or repeats:
            # its coalesced graph is gone, or it never had one (from_coo with keep_duplicates):
            # the pattern without duplicates
            rowptr, col, values = _without_duplicates(rowptr, col, g.shape)
        g._host[which] = from_arrays(rowptr, col, values, g.shape, {"api": "autosage_cli.torch.Graph"})
    return g._host[which]


def own_structure(g) -> tuple[np.ndarray, np.ndarray]:
    """(indptr, indices) of g's own CSR on the host, for a graph whose host_csr is its coalesced
    graph's (a graph of every listing): what a plan's per-graph work lists are built from, which
    must walk the rows the kernels walk. Copied once (counted)."""
    if "own" not in g._host:
        _HOST_COPIES[0] += 1
        dtype = index_dtype(g.nnz, max(g.shape))
        g._host["own"] = (g.rowptr.cpu().numpy().astype(dtype), g.col.cpu().numpy().astype(dtype))
    return g._host["own"]


class HostOnDemand:
    """The host side of a DeviceGraph made from a Graph: its sizes at once, its CSR arrays only
    when something asks for them (a plan whose family builds work lists on the host, a tune of a new
    kind), copied then, once (Graph.host_csr counts it). The per-step path never asks."""

    def __init__(self, graph: Graph, weighted: bool):
        self._graph, self._weighted = graph, weighted

    n_rows = property(lambda self: self._graph.n_rows)
    n_cols = property(lambda self: self._graph.n_cols)
    nnz = property(lambda self: self._graph.nnz)

    def describe(self) -> str:
        return self._graph.describe()

    def csr(self):
        return self._graph.host_csr(weighted=self._weighted)

    # The row structure plans build work lists from is the graph's own, also for a graph of every
    # listing, whose csr() (what tunes and features read) is its coalesced graph's.
    @property
    def indptr(self):
        return self._structure()[0]

    @property
    def indices(self):
        return self._structure()[1]

    def _structure(self):
        if self._graph._coalesced_ref is None:
            found = self.csr()
            return found.indptr, found.indices
        return own_structure(self._graph)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.csr(), name)
