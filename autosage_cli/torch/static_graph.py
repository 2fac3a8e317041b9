"""Graphs of a fixed size, built on the device without a transfer: what a captured mini-batch step
(torch/batch_capture.py) runs its layers on, so that one CUDA graph serves every batch of a size.

A sampled batch of n nodes and E edges is padded to a capacity of N > n nodes and E_cap >= E
edges: the slots past the batch's edges become self-loops of the padding nodes n..N-1 (spread
over them, so no padding row is a hub), and those nodes have no other edges. No padding edge
touches a batch node, so a batch node's aggregation, degree, normalisation and softmax are the
batch's own; the padding rows compute something nobody reads (a loss on the seeds, the first
rows, never sees them). Every graph of a capacity therefore has the same shape and nnz, and its
build is a fixed sequence of device ops: one stable sort of the edge keys and a search for the
row pointer, no read-back, no check on the host. Duplicate edges stay edges of their own (a
graph of every listing): a mean, a degree and a softmax count each listing, as PyG counts them,
and the edge count does not depend on how many there are.

`StaticShape` is what the graphs of one capacity share: the batch's sizes as device scalars
(written before each step), a flag a batch with an id out of range sets (its bad edges are
dropped into the padding; the step reports it), and the structure stats of each graph role
("batch", "looped"), read back once from the first batch and lent to every later graph of the
role, so that a graph built inside a capture finds its kind's decision without a transfer: the
stats stand for the kind (sizes and degree quantiles), which a sampler's batches share.

The normalised graphs of a static graph (norm.py asks here) keep the shape fixed too: the self-loop
graph moves the batch's own loops into the padding (PyG's add_remaining_self_loops drops them)
and lists one loop per node, E_cap + N edges whatever the batch.
"""
from __future__ import annotations

import torch

from ..errors import AutosageError
from .canonical import rowptr_of
from .graph import Graph


class StaticShape:
    """The capacity (edges, nodes) of a captured step's graphs and what they share."""

    def __init__(self, edges: int, nodes: int, device: torch.device):
        self.edges, self.nodes, self.device = int(edges), int(nodes), device
        self.sizes = torch.zeros(2, dtype=torch.int64, device=device)   # (E, n) of the batch
        self.bad = torch.zeros((), dtype=torch.bool, device=device)     # an id out of range
        self.stats: dict = {}                                           # role -> structure stats

    def set_batch(self, n_edges: int, n_nodes: int) -> None:
        """Write the batch's sizes (fills with host scalars: no copy, no wait)."""
        if not 0 <= n_edges <= self.edges or not 0 < n_nodes < self.nodes:
            raise AutosageError(f"a batch of {n_nodes} nodes and {n_edges} edges does not fit a static "
                                f"graph of {self.nodes - 1} nodes and {self.edges} edges")
        self.sizes[0].fill_(n_edges)
        self.sizes[1].fill_(n_nodes)

    def padding_nodes(self, slots: torch.Tensor) -> torch.Tensor:
        """The padding node of each slot: n + slot mod (N - n)."""
        n = self.sizes[1]
        return n + slots % (self.nodes - n)

    def stats_of(self, role: str, compute) -> dict:
        """The stats of the role's graphs: `compute()` (a read-back) for the first, lent after."""
        if role not in self.stats:
            if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
                raise AutosageError(f"a static graph ({role}) met inside a capture before an eager step "
                                    f"knew its kind: run the step eagerly first")
            self.stats[role] = compute()
        return self.stats[role]


def _graph(shape: StaticShape, role: str, row: torch.Tensor, col: torch.Tensor, options: dict) -> Graph:
    """The listing graph of edges (row[e], col[e]) (all inside the capacity), canonical order by
    one stable sort; user_to_canon maps the slots."""
    N = shape.nodes
    sorted_key, order = torch.sort(row * N + col, stable=True)
    canon_row = torch.div(sorted_key, N, rounding_mode="floor")
    canon_col = sorted_key - canon_row * N
    to_canon = torch.empty_like(order)
    to_canon[order] = torch.arange(order.numel(), device=order.device)
    g = Graph(rowptr_of(canon_row, N), canon_row, canon_col, None, (N, N), user_to_canon=to_canon, **options)
    g._static, g._static_role = shape, role
    return g


def batch_graph(shape: StaticShape, src: torch.Tensor, dst: torch.Tensor, options: dict) -> Graph:
    """The static graph of a batch whose edges (src -> dst) fill the first E slots of the capacity
    buffers (the rest: anything, masked here); PyG's orientation (row = target)."""
    slots = torch.arange(shape.edges, device=shape.device)
    n_edges, n = shape.sizes[0], shape.sizes[1]
    valid = slots < n_edges
    bad = valid & ((src < 0) | (src >= n) | (dst < 0) | (dst >= n))
    shape.bad |= bad.any()
    keep = valid & ~bad
    pad = shape.padding_nodes(slots)
    return _graph(shape, "batch", torch.where(keep, dst, pad), torch.where(keep, src, pad), options)


def self_loops(g: Graph) -> tuple[Graph, torch.Tensor]:
    """(the self-loop graph of a static graph, which user edges it keeps): the batch's loops moved
    into the padding, then one loop per node (padding nodes too), E_cap + N edges."""
    shape = g._static
    is_loop = g.row == g.col
    pad = shape.padding_nodes(torch.arange(g.nnz, device=g.device))
    nodes = torch.arange(shape.nodes, device=g.device)
    looped = _graph(shape, "looped", torch.cat([torch.where(is_loop, pad, g.row), nodes]),
                    torch.cat([torch.where(is_loop, pad, g.col), nodes]), g._options())
    return looped, g.to_user(~is_loop)


def gcn_graph(g: Graph, target: Graph, fill: float) -> Graph:
    """D^-1/2 (A + I) D^-1/2 of a static graph of every listing, on `target` (g itself, or its
    self-loop graph): each listing weighs 1, and a node's added loop `fill`, or 1 where the batch
    listed a loop of its own (PyG's add_remaining_self_loops keeps that loop's weight)."""
    values = torch.ones(target.nnz, dtype=torch.float64, device=g.device)
    if target is not g and fill != 1.0:
        own = torch.zeros(g.n_rows, dtype=torch.int64, device=g.device).index_add_(
            0, g.row, (g.row == g.col).long())
        added = target.user_to_canon[g.nnz:]      # the loops are the last N listings
        values[added] = torch.where(own > 0, 1.0, float(fill)).to(values.dtype)
    degree = values.new_zeros(target.n_rows).index_add(0, target.row, values)
    inv_sqrt = degree.pow(-0.5).masked_fill(degree == 0, 0.0)
    return target.with_weights(inv_sqrt[target.row] * values * inv_sqrt[target.col])


def weights_as(g: Graph, weights: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A static graph's device weights in a plan's value type, converted by torch once (a plan
    would convert them with CuPy, allocating from CuPy's pool: inside a captured step the memory
    must come from the capture's)."""
    key = ("static weights", weights.data_ptr(), dtype)
    if key not in g.gpu:
        g.gpu[key] = weights.to(dtype)
    return g.gpu[key]


def refuse_in_capture(what: str, launches_by_shape: bool) -> None:
    """A static graph's plan recorded in a capture is replayed on every batch of its capacity: one
    whose launches depend on the graph's contents (work lists, a partition) would be wrong there."""
    if not launches_by_shape and torch.cuda.is_current_stream_capturing():
        raise AutosageError(f"{what} launches by the graph's contents, which a captured mini-batch step "
                            f"replays on other batches: no verified plan of its kind launches by the shape alone")
