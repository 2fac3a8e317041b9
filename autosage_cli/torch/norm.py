"""Normalised graphs for the layers, made once per Graph and kept in `graph.derived`.

  with_self_loops(g)             g plus a self-loop on every node that has none (structure only)
  gcn_values(g, edge_weight)     (graph, canonical values) of D^-1/2 (A + fill·I) D^-1/2, as PyG's
                                 gcn_norm computes it: existing self-loops keep their weight, the
                                 degree is the weighted in-degree (row sum), isolated nodes get 0
  gcn_graph(g, ...)              the same with fixed values, as a weighted Graph (tuned as its own
                                 input: the layer's hot path)
  mean_graph(g)                  A with 1/deg in each row (edge multiplicity counted), PyG's mean
                                 aggregation; rows without edges aggregate to 0
"""
from __future__ import annotations

import torch

from ..errors import AutosageError
from .graph import Graph


def _require_square(g: Graph, what: str) -> None:
    if g.n_rows != g.n_cols:
        raise AutosageError(f"{what} needs a square graph (one node set), got {g.n_rows}x{g.n_cols}")


def with_self_loops(g: Graph) -> tuple[Graph, torch.Tensor]:
    """(g with the missing self-loops added, the nodes that got one); g's canonical edges come
    first in the new graph's input order, then the added loops."""
    key = ("self_loops",)
    if key not in g.derived:
        _require_square(g, "adding self-loops")
        has_loop = torch.zeros(g.n_rows, dtype=torch.bool, device=g.device)
        has_loop[g.row[g.row == g.col]] = True
        missing = torch.nonzero(~has_loop).squeeze(1)
        looped = Graph.from_coo(torch.cat([g.row, missing]), torch.cat([g.col, missing]), None,
                                g.shape, **g._options())
        g.derived[key] = (looped, missing)
    return g.derived[key]


def gcn_values(g: Graph, edge_weight=None, *, add_self_loops: bool = True, fill: float = 1.0,
               dtype=torch.float32) -> tuple[Graph, torch.Tensor]:
    """(graph, canonical values) of the symmetric GCN normalisation; differentiable in
    `edge_weight` (user order; None: the graph's weights)."""
    if edge_weight is not None:
        values = g.to_canonical(edge_weight.to(dtype))
    elif g.weight is not None:
        values = g.weight.to(dtype)
    else:
        values = torch.ones(g.nnz, dtype=dtype, device=g.device)
    target = g
    if add_self_loops:
        target, missing = with_self_loops(g)
        loops = torch.full((missing.numel(),), float(fill), dtype=dtype, device=values.device)
        values = target.to_canonical(torch.cat([values, loops]))
    row, col = target.on("row", values.device), target.on("col", values.device)
    degree = values.new_zeros(target.n_rows).index_add(0, row, values)
    inv_sqrt = degree.pow(-0.5).masked_fill(degree == 0, 0.0)
    return target, inv_sqrt[row] * values * inv_sqrt[col]


def gcn_graph(g: Graph, *, add_self_loops: bool = True, improved: bool = False) -> Graph:
    """The GCN-normalised graph with fixed weights, built once per (g, options)."""
    key = ("gcn", add_self_loops, improved)
    if key not in g.derived:
        target, values = gcn_values(g, None, add_self_loops=add_self_loops,
                                    fill=2.0 if improved else 1.0, dtype=torch.float64)
        g.derived[key] = target.with_weights(values)
    return g.derived[key]


def mean_graph(g: Graph) -> Graph:
    """Row-normalised A (each edge 1/deg(i), duplicates counted), built once."""
    key = ("mean",)
    if key not in g.derived:
        if g.user_to_canon is None:
            count = torch.ones(g.nnz, dtype=torch.float64, device=g.device)
        else:
            count = torch.bincount(g.user_to_canon, minlength=g.nnz).to(torch.float64)
        degree = count.new_zeros(g.n_rows).index_add(0, g.row, count)
        g.derived[key] = g.with_weights(count / degree[g.row])
    return g.derived[key]
