"""A reordered Graph for training and inference: the kernels run on P A Pᵀ (vertices renumbered
for locality, graphs.reorder), while features go in and outputs come out in the user's node order.

    rg = at.reorder(csr_graph, method="auto", width=256, expected_calls=200, device="cuda")
    model = at.Reordered(net, rg)          # net(x, g) as usual; g is rg.graph
    out = model(x)                         # x and out in the user's node order
    loss = F.cross_entropy(out, y)         # y too: nothing else changes

`method="auto"` asks the scheduler (scheduler.decisions.reorder_decision): the order is applied only where
it measured faster on this GPU and its cost pays back over `expected_calls` SpMM calls (a training
run's: epochs x SpMMs per epoch); otherwise the wrapper is the identity and moves nothing. A named
method reorders without measuring. The decision and the permutation are cached beside the
decision cache, so a second run reuses both.

Permuting once per graph, not per call: the input features of a full-graph run are one tensor,
moved to the new order on the first call and reused while the same tensor comes back unchanged
(same object, same `_version`; a tensor that requires grad is moved every call, so that its
gradient flows). Outputs come back in the user's order through one index_select per call
(n x classes, small next to the layers).
"""
from __future__ import annotations

import time

import numpy as np
import torch

from ..errors import AutosageError
from ..graphs.csr import CSRGraph
from .graph import Graph


class ReorderedGraph:
    """`graph`: the Graph of the reordered CSR; `perm[new] = old` and `inverse[old] = new` as
    long tensors on its device (None when no order was applied); `decision`: the scheduler's
    ReorderDecision (None for a named method)."""

    def __init__(self, graph: Graph, perm: np.ndarray | None, method: str, decision=None,
                 cost_s: float = float("nan")):
        self.graph, self.method, self.decision = graph, method, decision
        self.cost_s = cost_s      # seconds computing the order and relabelling the graph
        if perm is None:
            self.perm = self.inverse = None
        else:
            device = graph.device
            self.perm = torch.as_tensor(perm, dtype=torch.long, device=device)
            self.inverse = torch.empty_like(self.perm)
            self.inverse[self.perm] = torch.arange(self.perm.numel(), device=device)
        self._moved = None        # (input tensor, its _version, the moved copy)
        self.moves = 0            # features moved to the new order: a test counts them

    @property
    def applied(self) -> bool:
        return self.perm is not None

    def to_internal(self, x: torch.Tensor) -> torch.Tensor:
        """x (rows in the user's order) in the graph's order, moved once per tensor."""
        if self.perm is None:
            return x
        if x.shape[0] != self.perm.numel():
            raise AutosageError(f"features have {x.shape[0]} rows, the graph {self.perm.numel()} nodes")
        if x.requires_grad:
            self.moves += 1
            return x.index_select(0, self.perm)
        cached = self._moved
        if cached is not None and cached[0] is x and cached[1] == x._version:
            return cached[2]
        self.moves += 1
        moved = x.index_select(0, self.perm)
        self._moved = (x, x._version, moved)
        return moved

    def to_user(self, out: torch.Tensor) -> torch.Tensor:
        """A per-node result of the reordered graph back in the user's order."""
        return out if self.inverse is None else out.index_select(0, self.inverse)


def reorder(graph: CSRGraph, method: str = "auto", *, width: int = 64, expected_calls: int = 100,
            device=None, cache=None, methods=None, measure_orders=None, l2_bytes: int | None = None,
            decide_options: dict | None = None, **options) -> ReorderedGraph:
    """A ReorderedGraph of `graph` (a square CSRGraph) by `method`: "auto" (the scheduler decides
    for SpMM at `width`, measuring on the GPU, with this GPU's L2 size; `measure_orders` and
    `l2_bytes` replace both, `decide_options` go to reorder_decision.decide), or a method of
    graphs.reorder applied without measuring. `options` go to the Graph."""
    from ..graphs import reorder as reorder_mod

    if not isinstance(graph, CSRGraph):
        raise AutosageError(f"reorder takes a CSRGraph (graphs.load_graph), got {type(graph).__name__}")
    started = time.perf_counter()
    if method == "auto":
        from ..scheduler.decisions import reorder_decision as rd

        if measure_orders is None:
            from ..capability import require_gpu
            from ..scheduler.probing.reorder_measure import OrderMeasurer

            require_gpu("reorder(method='auto') measures both orders", "name a method to reorder "
                        "without measuring")
            from ..cache import DecisionCache
            cache = cache if isinstance(cache, DecisionCache) else DecisionCache(cache)
            measure_orders = OrderMeasurer(cache)
            l2_bytes = l2_bytes or _l2_bytes()
        decision = rd.decide(graph, width, measure_orders=measure_orders, cache=cache,
                             expected_calls=expected_calls, methods=methods or rd.DEFAULT_METHODS,
                             l2_bytes=l2_bytes, **(decide_options or {}))
        cost_s = time.perf_counter() - started   # deciding: orders, relabelling, measurements
        if not decision.applied:
            return ReorderedGraph(Graph.from_csr_graph(graph, device=device, **options), None,
                                  "identity", decision, cost_s)
        return ReorderedGraph(Graph.from_csr_graph(decision.reordered, device=device, **options),
                              decision.perm, decision.method, decision, cost_s)
    missing = reorder_mod.available(method) if method in reorder_mod.METHODS else None
    if missing:
        raise AutosageError(f"reordering method {method!r} {missing}")
    perm = reorder_mod.order(graph, method)
    reordered = reorder_mod.permute(graph, perm, {"reordered_from": graph.source, "reorder": method})
    cost_s = time.perf_counter() - started
    return ReorderedGraph(Graph.from_csr_graph(reordered, device=device, **options),
                          None if method == "identity" else perm, method, cost_s=cost_s)


def _l2_bytes() -> int | None:
    from .. import environment

    info = environment.device_info() or {}
    return info.get("l2_bytes")


class Reordered(torch.nn.Module):
    """`module(x, graph, *args)` run on a ReorderedGraph: `forward(x, graph=None, *args)` moves x
    to the graph's order (once per features tensor), passes `rg.graph` (or `graph` when given: a
    graph in the reordered order, e.g. another handle of rg.graph's tensors), and returns the
    output in the user's order."""

    def __init__(self, module: torch.nn.Module, graph: ReorderedGraph):
        super().__init__()
        self.module, self.reordered = module, graph

    def forward(self, x, graph=None, *args, **kwargs):
        rg = self.reordered
        graph = rg.graph if graph is None or graph is rg else graph
        return rg.to_user(self.module(rg.to_internal(x), graph, *args, **kwargs))
