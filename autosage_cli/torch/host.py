"""A Graph's canonical CSR on the host (Graph.host_csr): what is tuned and cached, copied only when
a new kind is probed or a graph is tuned as itself. Every copy is counted, so that tests can hold
the per-step path of a mini-batch loop to none."""
from __future__ import annotations

import numpy as np

from ..graphs.csr import CSRGraph, from_arrays

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
    if which not in g._host:
        _HOST_COPIES[0] += 1
        rowptr, col = g.rowptr.cpu().numpy(), g.col.cpu().numpy()
        values = (g.weight.float().cpu().numpy() if which == "weighted"
                  else np.ones(g.nnz, dtype=np.float32))
        if which == "coalesced":   # its coalesced graph is gone: the pattern without duplicates
            rowptr, col, values = _without_duplicates(rowptr, col, g.shape)
        g._host[which] = from_arrays(rowptr, col, values, g.shape, {"api": "autosage_cli.torch.Graph"})
    return g._host[which]
