"""Normalised graphs for the layers, made once per Graph and kept in `graph.derived`.

  with_self_loops(g)             g's edges without self-loops plus one loop per node (structure only)
  gcn_values(g, edge_weight)     (graph, canonical values) of D^-1/2 (A + fill·I) D^-1/2, as PyG's
                                 gcn_norm computes it: a node's own loop keeps its weight, the
                                 degree is the weighted in-degree (row sum), isolated nodes get 0
  gcn_graph(g, ...)              the same with fixed values, as a weighted Graph (tuned as its own
                                 input: the layer's hot path)
  mean_graph(g)                  A with 1/deg in each row (edge multiplicity counted), PyG's mean
                                 aggregation; rows without edges aggregate to 0
"""
from __future__ import annotations

import functools
import weakref

import torch

from ..errors import AutosageError
from . import static_graph
from .graph import Graph


def _require_square(g: Graph, what: str) -> None:
    if g.n_rows != g.n_cols:
        raise AutosageError(f"{what} needs a square graph (one node set), got {g.n_rows}x{g.n_cols}")


def user_edges(g: Graph) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, col) of every edge in the user's order (duplicates included)."""
    u2c = g.user_to_canon
    return (g.row, g.col) if u2c is None else (g.row[u2c], g.col[u2c])


def with_self_loops(g: Graph) -> tuple[Graph, torch.Tensor]:
    """(the graph PyG's add_remaining_self_loops makes, the user edges it keeps): g's edges that
    are not self-loops (duplicates kept) followed by one self-loop per node, in that input order.
    A bipartite graph gets loops on the nodes that are both sources and targets (ids below
    min(n_src, n_dst)), as PyG's GATConv adds them."""
    key = ("self_loops",)
    if key not in g.derived:
        if g._static is not None:         # a captured step's graph: its shape stays fixed
            g.derived[key] = static_graph.self_loops(g)
        elif g.n_rows == g.n_cols and g._canon_loops is not None:
            # square graphs from a build, sampled batches among them: the loops are swapped into
            # the canonical CSR as it is, no sort and no read-back
            looped, keep = _replaced_loops(g)
            if looped.has_duplicates:     # attention's graph of every listing, the same way from g's
                looped._make_listings = functools.partial(_listings_with_loops, weakref.ref(g))
            g.derived[key] = (looped, keep)
        else:
            row, col = user_edges(g)
            keep = row != col
            kept = keep.nonzero().squeeze(1)     # one read-back for both index arrays
            nodes = torch.arange(min(g.n_rows, g.n_cols), device=g.device)
            looped = Graph.from_coo(torch.cat([row.index_select(0, kept), nodes]),
                                    torch.cat([col.index_select(0, kept), nodes]), None, g.shape, **g._options())
            g.derived[key] = (looped, keep)
    return g.derived[key]


def _listings_with_loops(parent) -> Graph | None:
    """with_duplicates of with_self_loops(g), from g's graph of every listing (None once g is gone:
    g holds its self-loop graph, not the other way round)."""
    g = parent()
    return None if g is None else _replaced_loops(g.with_duplicates())[0]


def _replaced_loops(g: Graph) -> tuple[Graph, torch.Tensor]:
    """(the graph from_coo would build of g's user edges that are not self-loops followed by one
    loop per node, which user edges it keeps), for a square g whose build counted its loops, made without
    a sort or a read-back. In each canonical row the loop (i, i) goes after the edges of columns
    below i: a kept edge moves to (the kept edges before it) + its row id + (1 if its column is
    above its row), and row i's loop sits at (the kept edges of rows below i) + i + (the number of
    its columns below i). The sizes come from g's build (its canonical and listed loops); what is
    dropped is written to one spare slot, so nothing is compacted. Duplicates count as from_coo
    counts them (a weight of their number); the stats come from g's build."""
    n, nnz, dev = g.n_rows, g.nnz, g.device
    size = nnz - g._canon_loops + n
    stays = g.row != g.col                   # canonical edges that stay; `keep`: user edges
    keep = g.to_user(stays)
    kept_before = torch.cat([torch.zeros(1, dtype=torch.int64, device=dev), torch.cumsum(stays, 0)])
    below = torch.zeros(n, dtype=torch.int64, device=dev).index_add_(0, g.row, (g.col < g.row).long())
    nodes = torch.arange(n, device=dev)
    # where each canonical edge goes (a dropped loop: the spare slot `size`)
    edge_at = torch.where(stays, kept_before[:-1] + g.row + (g.col > g.row).long(), size)
    loop_at = kept_before.index_select(0, g.rowptr[:-1]) + nodes + below
    row = torch.empty(size + 1, dtype=torch.int64, device=dev)
    col = torch.empty_like(row)
    row[edge_at], row[loop_at] = g.row, nodes
    col[edge_at], col[loop_at] = g.col, nodes
    n_kept = g.num_user_edges - g.self_loop_edges()
    weight = None
    if n_kept != nnz - g._canon_loops:   # duplicates stay: an edge weighs its listings (loops: 1)
        counts = torch.zeros(nnz, dtype=torch.float32, device=dev).index_add_(
            0, g.user_to_canon, torch.ones(g.num_user_edges, dtype=torch.float32, device=dev))
        weight = torch.ones(size + 1, dtype=torch.float32, device=dev).index_put_((edge_at,), counts)[:size]
    user_edges_at = edge_at if g.user_to_canon is None else edge_at.index_select(0, g.user_to_canon)
    if n_kept < g.num_user_edges:     # the kept user edges, in order, without a boolean selection
        slot = torch.where(keep, torch.cumsum(keep, 0) - 1, n_kept)
        user_edges_at = user_edges_at.new_empty(n_kept + 1).index_put_((slot,), user_edges_at)[:n_kept]
    rowptr = kept_before.index_select(0, g.rowptr) + torch.arange(n + 1, device=dev)
    looped = Graph(rowptr, row[:size], col[:size], weight, g.shape,
                   user_to_canon=torch.cat([user_edges_at, loop_at]), **g._options())
    looped._stats, looped._self_loops, looped._canon_loops = g._looped_stats, n, n
    looped._looped_stats = g._looped_stats
    return looped, keep


def _user_values(g: Graph, edge_weight, dtype) -> torch.Tensor:
    if edge_weight is not None:
        return edge_weight.to(dtype)
    if g.user_weight is not None:
        return g.user_weight.to(dtype)
    if g.weight is not None and g._structure_ref is not None:
        return g.to_user(g.weight.to(dtype))  # weights given to the structure (with_weights)
    # no weights: every listed edge weighs 1 (a duplicate's canonical weight is its count)
    return torch.ones(g.num_user_edges, dtype=dtype, device=g.device)


def _looped_canonical(looped: Graph, keep: torch.Tensor, kept_values: torch.Tensor, loops: torch.Tensor):
    """Canonical values of `looped` (with_self_loops: the kept edges in order, then one loop per
    node) from each original edge's value (0 where not kept) and the loops' values, without
    selecting the kept edges: an edge that is not kept adds its 0 to some slot."""
    dev = kept_values.device
    u2c = looped.on("user_to_canon", dev)
    if u2c is None:
        u2c = torch.arange(looped.num_user_edges, device=dev)
    n_kept = looped.num_user_edges - loops.numel()
    out = kept_values.new_zeros(looped.nnz).index_add(0, u2c[n_kept:], loops)
    if n_kept:
        position = (torch.cumsum(keep, 0) - 1).clamp_(min=0)    # each kept edge's place among them
        out = out.index_add(0, u2c[:n_kept].index_select(0, position), kept_values)
    return out


def gcn_values(g: Graph, edge_weight=None, *, add_self_loops: bool = True, fill: float = 1.0,
               dtype=torch.float32) -> tuple[Graph, torch.Tensor]:
    """(graph, canonical values) of the symmetric GCN normalisation; differentiable in
    `edge_weight` (user order; None: the graph's weights). As PyG: every node gets one self-loop
    weighing `fill`, or the weight of its last self-loop edge when it has any."""
    if g._static is not None:
        raise AutosageError("per-call edge weights on a captured mini-batch step's graph are not "
                            "supported: run the GCN layer without edge_weight, or the step eagerly")
    values = _user_values(g, edge_weight, dtype)
    target = g
    if add_self_loops:
        _require_square(g, "the GCN normalisation with self-loops")
        target, keep = with_self_loops(g)
        row, _ = user_edges(g)
        # without compacting (each boolean selection would wait for the device): a self-loop edge
        # writes its weight into its node's loop, the others into a spare last slot
        loops = torch.full((g.n_rows + 1,), float(fill), dtype=dtype, device=values.device)
        loops = loops.index_put((torch.where(keep, g.n_rows, row),), values)[:-1]
        values = _looped_canonical(target, keep, values.masked_fill(~keep, 0), loops)
    else:
        values = target.to_canonical(values)
    row, col = target.on("row", values.device), target.on("col", values.device)
    degree = values.new_zeros(target.n_rows).index_add(0, row, values)
    inv_sqrt = degree.pow(-0.5).masked_fill(degree == 0, 0.0)
    return target, inv_sqrt[row] * values * inv_sqrt[col]


def gcn_graph(g: Graph, *, add_self_loops: bool = True, improved: bool = False) -> Graph:
    """The GCN-normalised graph with fixed weights, built once per (g, options)."""
    key = ("gcn", add_self_loops, improved)
    if key not in g.derived and g._static is not None:
        target = with_self_loops(g)[0] if add_self_loops else g
        g.derived[key] = static_graph.gcn_graph(g, target, 2.0 if improved else 1.0)
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
            # each edge's multiplicity (index_add, not bincount: no transfer to size the output)
            count = torch.zeros(g.nnz, dtype=torch.float64, device=g.device).index_add_(
                0, g.user_to_canon, torch.ones(g.user_to_canon.numel(), dtype=torch.float64, device=g.device))
        degree = count.new_zeros(g.n_rows).index_add(0, g.row, count)
        g.derived[key] = g.with_weights(count / degree[g.row])
    return g.derived[key]
