"""The training benchmarks' inputs: the graph as both libraries train on it, random features and
labels of a fixed seed, and PyG's graph input per mode (kept apart from training.py, which runs the
steps; training re-exports these names)."""
from __future__ import annotations

import numpy as np
import torch

from ..backends.torch_sparse import csr_tensor
from ..graphs.csr import CSRGraph
from .graph import Graph

FEATURES = {"reddit-like": (602, 41), "products-like": (100, 47)}   # (input features, classes)
OTHER_FEATURES = (128, 16)
SHUFFLED = "-shuffled"      # a preset's graph with its ids permuted: the same nodes, the same data


def feature_dims(name: str) -> tuple[int, int]:
    """(input features, classes) of a graph's nodes: FEATURES' row of the graph, or of the graph
    it shuffles (products-like-shuffled trains what products-like does, so their epochs compare),
    else OTHER_FEATURES."""
    return FEATURES.get(name.removesuffix(SHUFFLED), OTHER_FEATURES)


def training_graph(csr: CSRGraph, device, cache=None, perm=None) -> Graph:
    """The graph as a pattern (every edge weight 1) without self-loops: PyG's GCN adds loops with
    add_self_loops on a sparse adjacency but add_remaining_self_loops on an edge_index, two
    functions once a graph has loops of its own. `perm` (perm[new] = old): the graph renumbered,
    P A Pᵀ, relabelled on the device (the canonical sort of from_coo orders it)."""
    row = torch.repeat_interleave(torch.arange(csr.n_rows),
                                  torch.from_numpy(np.diff(csr.indptr).astype(np.int64)))
    col = torch.from_numpy(csr.indices).long()
    keep = row != col
    device = torch.device(device)
    row, col = row[keep].to(device), col[keep].to(device)
    if perm is not None:
        new = torch.empty(csr.n_rows, dtype=torch.long, device=device)
        new[torch.as_tensor(perm, dtype=torch.long, device=device)] = torch.arange(csr.n_rows, device=device)
        row, col = new[row], new[col]
    return Graph.from_coo(row, col, None, csr.shape, cache=cache)


def pyg_inputs(graph: Graph, dtype: torch.dtype = torch.float32) -> dict:
    """PyG's graph input per mode: the adjacency as a torch sparse CSR tensor (rows = targets,
    PyG's adj_t) with values in `dtype`, and the edge_index (source, target)."""
    ones = torch.ones(graph.nnz, device=graph.device, dtype=dtype)
    adj_t = csr_tensor(graph.rowptr, graph.col, ones, graph.shape)   # without torch's beta warnings
    return {"sparse-csr": adj_t, "edge-index": torch.stack([graph.col, graph.row])}


def random_data(name: str, n_rows: int, device, seed: int, dtype: torch.dtype = torch.float32):
    """(features, labels) of a graph's nodes, random from `seed`: the features drawn in float32
    and rounded to `dtype`; their width and the class count are the graph's (FEATURES)."""
    n_in, n_out = feature_dims(name)
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n_rows, n_in, device=device, generator=gen).to(dtype)
    return x, torch.randint(0, n_out, (n_rows,), device=device, generator=gen)
