"""Vertex orders and the symmetric relabelling P A Pᵀ of a canonical CSR in torch, on the graph's
own device: the orders of graphs.reorder that are whole-array passes (`DEVICE_METHODS`: the same
permutations, perm[new] = old), and the relabelling with one sort and no host copy of the edges.

Why here and not in graphs.reorder: that path is NumPy/SciPy on the host. For a 124M-edge graph
already on the GPU (the training suite's products-like-shuffled) it meant copying the edges back,
label propagation by sorts, a host relabel (12.7 s on 124M nonzeros in graphs.reorder.permute)
and then a full canonical build of the result (Graph.from_coo: a stable sort and a read-back of
its checks). A permutation of a graph that is already canonical needs less: the new key of each
edge is inv[row]·n + inv[col], every key is distinct (a bijection), so one unstable sort of those
keys is the whole canonical order, and the new row pointer is the cumulative sum of the degrees in
the new order (no search, no transfer).
"""
from __future__ import annotations

import torch

from ..errors import AutosageError
from ..graphs.csr import CSRGraph
from . import label_propagation
from .graph import Graph
from .host import holds_its_edges

DEVICE_METHODS = ("labelprop", "degree", "hubsort", "hubcluster", "identity")


def csr_tensors(csr: CSRGraph, device=None):
    """(rowptr, row, col, weight) int64/float32 tensors of a canonical CSRGraph on `device`; the
    row ids are expanded there. weight is None when every value is 1 (a pattern, as Graph.from_coo
    marks one): one read-back of a flag, not of the edges."""
    device = torch.device(device or "cpu")
    rowptr, row, col = _pattern(csr, device)
    weight = torch.from_numpy(csr.values).to(device=device, dtype=torch.float32)
    if bool((weight == 1).all()):
        weight = None
    return rowptr, row, col, weight


def _pattern(csr: CSRGraph, device: torch.device):
    """(rowptr, row, col) int64 of a CSRGraph on `device`, the row ids expanded there."""
    rowptr = torch.from_numpy(csr.indptr).to(device=device, dtype=torch.int64)
    col = torch.from_numpy(csr.indices).to(device=device, dtype=torch.int64)
    row = torch.repeat_interleave(torch.arange(csr.n_rows, device=device), rowptr.diff(),
                                  output_size=csr.nnz)
    return rowptr, row, col


def csr_labels(csr: CSRGraph, device="cuda"):
    """label_propagation.propagate's labels (NumPy int64) of a host CSRGraph's pattern, computed on
    `device` (on CUDA by its kernels): a labeller for graphs.reorder.order, which the commands hand
    to the host reorderings (`autosage reorder`, the kernel benchmark's reordered rows, the
    reordering decision). On products-like-shuffled's 124M edges the labels took 3.5 s by the
    array module's sorts; the kernels' whole reordering, 0.08 s."""
    _, row, col = _pattern(csr, torch.device(device))
    return label_propagation.propagate(row, col, csr.n_rows).cpu().numpy()


def graph_labels(graph, host: CSRGraph):
    """csr_labels of `host`, the host CSR of `graph`, from the Graph's own tensors where they are
    when they hold the same edges (no copy back to the device); a Graph that keeps duplicate edges
    (its host CSR has fewer) votes as its host CSR does, through csr_labels."""
    if not holds_its_edges(graph, host):
        return csr_labels(host, graph.device)
    return _labels(graph.rowptr, graph.row, graph.col, graph.n_rows).cpu().numpy()


def _degrees(rowptr: torch.Tensor) -> torch.Tensor:
    return rowptr.diff()


def _stable_order(key: torch.Tensor) -> torch.Tensor:
    return torch.sort(key, stable=True).indices


def order(rowptr: torch.Tensor, row: torch.Tensor, col: torch.Tensor, method: str) -> torch.Tensor:
    """perm (int64, perm[new] = old) of the n x n pattern (rowptr, row, col) by `method`, one of
    DEVICE_METHODS: graphs.reorder's permutation, computed where the tensors are."""
    n = rowptr.numel() - 1
    degrees = _degrees(rowptr)
    if method == "identity":
        return torch.arange(n, dtype=torch.int64, device=rowptr.device)
    if method == "degree":
        return _stable_order(-degrees)
    if method == "labelprop":
        return label_propagation.cluster_order(_labels(rowptr, row, col, n))
    hubs = degrees * n > col.numel()             # degree > nnz / n, in exact integers
    if method == "hubsort":                       # hubs first by degree, descending; the rest in order
        return _stable_order(torch.where(hubs, -degrees, torch.zeros_like(degrees)))
    if method == "hubcluster":                    # hubs first, then the rest, each in order
        return _stable_order((~hubs).to(torch.int64))
    raise AutosageError(f"reordering method {method!r} does not run on tensors "
                        f"(those that do: {', '.join(DEVICE_METHODS)})")


def _labels(rowptr, row, col, n: int) -> torch.Tensor:
    """Label propagation's labels where the tensors are. The implementations give the same
    labels; each is the faster one on its side: on CPU tensors the host's sorts (NumPy, 23 s on a
    10M-edge construction on 2 cores) beat torch's scatters (~3.5 s a round there), while on a
    GPU label_propagation.propagate runs the kernels of cuda_label_propagation (a vote table per
    vertex: one pass over the edges a round, against the scatters' O(nnz) passes over a table of
    every pair, or two full-width sorts)."""
    if rowptr.device.type == "cpu":
        import numpy as np

        from ..graphs.label_propagation import propagate as on_host
        return torch.from_numpy(on_host(rowptr.numpy(), col.numpy(), n, np))
    return label_propagation.propagate(row, col, n)


def inverse(perm: torch.Tensor) -> torch.Tensor:
    """inv[old] = new for perm[new] = old."""
    inv = torch.empty_like(perm)
    inv[perm] = torch.arange(perm.numel(), dtype=perm.dtype, device=perm.device)
    return inv


def permute_csr(rowptr: torch.Tensor, row: torch.Tensor, col: torch.Tensor, weight, perm: torch.Tensor):
    """(rowptr, row, col, weight) of P A Pᵀ for the canonical n x n CSR (rowptr, row, col, weight)
    and perm[new] = old: new row r is old row perm[r], every column c renamed inv[c], columns
    sorted. One sort of distinct int64 keys (module docstring)."""
    n = rowptr.numel() - 1
    inv = inverse(perm)
    key = inv.index_select(0, row) * n + inv.index_select(0, col)
    key, moved = torch.sort(key)
    new_row = torch.div(key, n, rounding_mode="floor")
    new_col = key - new_row * n
    new_rowptr = torch.zeros(n + 1, dtype=torch.int64, device=rowptr.device)
    torch.cumsum(_degrees(rowptr).index_select(0, perm), 0, out=new_rowptr[1:])
    return new_rowptr, new_row, new_col, None if weight is None else weight.index_select(0, moved)


def check_permutation(perm: torch.Tensor, n: int) -> torch.Tensor:
    """`perm` as int64 on its device if it is a permutation of 0..n-1, else AutosageError (one
    read-back of two counts)."""
    if perm.dim() != 1 or perm.numel() != n:
        raise AutosageError(f"a permutation of {n} vertices must have {n} entries, got shape {tuple(perm.shape)}")
    if perm.dtype.is_floating_point or perm.dtype == torch.bool:
        raise AutosageError(f"a permutation must hold integers, got {perm.dtype}")
    perm = perm.to(torch.int64)
    inside = (perm >= 0) & (perm < n)
    seen = torch.zeros(n, dtype=torch.int64, device=perm.device)
    seen.index_add_(0, perm.clamp(0, max(n - 1, 0)), inside.to(torch.int64))
    out_of_range, missing = torch.stack([(~inside).sum(), (seen == 0).sum()]).tolist()
    if out_of_range:
        raise AutosageError(f"permutation entry out of range [0, {n})")
    if missing:
        raise AutosageError("not a permutation: some vertex appears twice and another never")
    return perm


def graph_of(tensors, shape, options: dict, loops: int | None = None) -> Graph:
    """A Graph of canonical CSR tensors (rowptr, row, col, weight), built without Graph.from_coo's
    sort: what permute_csr returns is canonical by construction, and it is its own user order (the
    weights as given are the canonical ones, as from_coo records them). `loops`: its self-loop
    edges when known (a relabelling keeps them), so that the normalised graphs swap loops in
    place (norm.with_self_loops) instead of sorting again; counted here otherwise."""
    rowptr, row, col, weight = tensors
    graph = Graph(rowptr, row, col, weight, shape, user_weight=weight, **options)
    graph._self_loops = graph._canon_loops = int((row == col).sum()) if loops is None else int(loops)
    return graph


def permuted_graph(graph: Graph, perm: torch.Tensor) -> Graph:
    """P A Pᵀ of a square Graph with perm[new] = old (on the graph's device), with the graph's
    options (cache, tune, schedules). A graph built with duplicate edges gives its canonical graph
    relabelled (duplicates summed), as a CSRGraph of it would."""
    if graph.n_rows != graph.n_cols:
        raise AutosageError(f"cannot reorder a non-square graph ({graph.n_rows}x{graph.n_cols}): "
                            "rows and columns are renumbered together")
    tensors = permute_csr(graph.rowptr, graph.row, graph.col, graph.weight, perm.to(graph.device))
    return graph_of(tensors, graph.shape, {"cache": graph.cache, "tune": graph.tune,
                                           "schedules": graph.schedules}, graph._canon_loops)
