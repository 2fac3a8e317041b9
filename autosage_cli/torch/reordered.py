"""A reordered Graph for training and inference: the kernels run on P A Pᵀ (vertices renumbered
for locality, graphs.reorder), while features go in and outputs come out in the user's node order.

    rg = at.reorder(csr_graph, method="auto", width=256, expected_calls=200, device="cuda")
    model = at.Reordered(net, rg)          # net(x, g) as usual; g is rg.graph
    out = model(x)                         # x and out in the user's node order
    loss = F.cross_entropy(out, y)         # y too: nothing else changes

`method="auto"` asks the scheduler (scheduler.decisions.reorder_decision): the order is applied only where
it measured faster on this GPU and its cost pays back over `expected_calls` SpMM calls (a training
run's: epochs x SpMMs per epoch); otherwise the wrapper is the identity and moves nothing. A named
method reorders without measuring, on the graph's device (torch.relabel: label propagation and the
degree orders as tensor passes, P A Pᵀ with one sort); `at.reorder(graph, ...)` also takes a Graph
already built there, so a training run pays only for the order and the relabelling. The decision
and the permutation are cached beside the decision cache, so a second run reuses both.

Permuting once per graph, not per call: the input features of a full-graph run are one tensor,
moved to the new order on the first call and reused while the same tensor comes back unchanged
(same object, same `_version`; a tensor that requires grad is moved every call, so that its
gradient flows). Outputs come back in the user's order through one index_select per call
(n x classes, small next to the layers).
"""
from __future__ import annotations

import dataclasses
import time

import torch

from ..errors import AutosageError
from ..graphs.csr import CSRGraph
from .graph import Graph
from .host import holds_its_edges


class ReorderedGraph:
    """`graph`: the Graph of the reordered CSR; `perm[new] = old` (an array or a tensor) and
    `inverse[old] = new` as long tensors on its device (None when no order was applied);
    `decision`: the scheduler's ReorderDecision (None for a named method)."""

    def __init__(self, graph: Graph, perm, method: str, decision=None,
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


def reorder(graph, method: str = "auto", *, width: int = 64, expected_calls: int = 100,
            device=None, cache=None, methods=None, measure_orders=None, l2_bytes: int | None = None,
            decide_options: dict | None = None, **options) -> ReorderedGraph:
    """A ReorderedGraph of `graph` (a square CSRGraph, or a Graph already on its device) by
    `method`: "auto" (the scheduler decides for SpMM at `width`, measuring on the GPU, with this
    GPU's L2 size; `measure_orders` and `l2_bytes` replace both, `decide_options` go to
    reorder_decision.decide), or a method of graphs.reorder applied without measuring. `options`
    go to the Graph built from a CSRGraph (a Graph's own options are kept).

    A named method runs where the graph is (torch.relabel): the orders of relabel.DEVICE_METHODS
    and the relabelling P A Pᵀ on `device` (a Graph: its device), the others' order on the host.
    `cost_s` is what the reordering adds: for a Graph, not its own build."""
    from ..graphs import reorder as reorder_mod

    if not isinstance(graph, (CSRGraph, Graph)):
        raise AutosageError(f"reorder takes a CSRGraph (graphs.load_graph) or a Graph, got {type(graph).__name__}")
    if method == "auto":
        return _decided(graph, width, expected_calls, device, cache, methods, measure_orders,
                        l2_bytes, decide_options, options)
    if method not in reorder_mod.METHODS:
        raise AutosageError(f"unknown reordering method {method!r} (known: {', '.join(reorder_mod.METHODS)})")
    missing = reorder_mod.available(method)
    if missing:
        raise AutosageError(f"reordering method {method!r} {missing}")
    started = time.perf_counter()
    reordered, perm = _named(graph, method, device, options)
    _synchronize(reordered.device)
    return ReorderedGraph(reordered, None if method == "identity" else perm, method,
                          cost_s=time.perf_counter() - started)


def _named(graph, method: str, device, options: dict) -> tuple[Graph, torch.Tensor]:
    """(the Graph of P A Pᵀ, perm on its device) by a named method, computed where the graph is:
    a Graph's own tensors (and options), or a CSRGraph's uploaded to `device` once."""
    from ..graphs import reorder as reorder_mod
    from . import relabel

    if isinstance(graph, CSRGraph):
        reorder_mod.require_square(graph)
        tensors, host, loops = relabel.csr_tensors(graph, device), graph, None
    else:
        if graph.n_rows != graph.n_cols:
            raise AutosageError(f"cannot reorder a non-square graph ({graph.n_rows}x{graph.n_cols}): "
                                "rows and columns are renumbered together")
        tensors, host, loops = (graph.rowptr, graph.row, graph.col, graph.weight), None, graph._canon_loops
        options = {"cache": graph.cache, "tune": graph.tune, "schedules": graph.schedules}
    rowptr, row, col, _ = tensors
    if method in relabel.DEVICE_METHODS:
        perm = relabel.order(rowptr, row, col, method)
    else:   # a library's order (rcm, metis, community) on the host pattern; the relabel stays here
        host = host if host is not None else graph.host_csr(weighted=False)
        perm = torch.from_numpy(reorder_mod.order(host, method)).to(rowptr.device)
    return relabel.graph_of(relabel.permute_csr(*tensors, perm), graph.shape, options, loops), perm


def _decided(graph, width, expected_calls, device, cache, methods, measure_orders, l2_bytes,
             decide_options, options) -> ReorderedGraph:
    """method="auto": the scheduler's decision on the host CSR, the chosen order then applied on
    the graph's device. For a Graph, the decision weighs the relabelling this path pays (P A Pᵀ
    on the device, DeviceRelabel: the measured candidates' relabelled Graphs, the chosen one
    kept, their host copies measured), not the host's. On CUDA labelprop's labels come from
    torch's kernels on the Graph's own tensors (the host CSR's pattern uploaded again cost 0.54 s
    of products-like-shuffled's order, against 0.06 s for the named method's whole reordering)."""
    from ..scheduler.decisions import reorder_decision as rd
    from . import relabel

    started = time.perf_counter()
    csr = graph.host_csr(weighted=True) if isinstance(graph, Graph) else graph
    on_device = DeviceRelabel(graph) if isinstance(graph, Graph) else None
    decide_options = dict(decide_options or {})
    if on_device is not None:
        decide_options.setdefault("relabel", on_device)
        if graph.device.type == "cuda":   # the labels from the Graph's own tensors: no upload
            decide_options.setdefault("labeller", lambda host: relabel.graph_labels(graph, host))
    if measure_orders is None:
        from ..capability import require_gpu
        from ..scheduler.probing.reorder_measure import OrderMeasurer

        require_gpu("reorder(method='auto') measures both orders", "name a method to reorder "
                    "without measuring")
        from ..cache import DecisionCache
        cache = cache if isinstance(cache, DecisionCache) else DecisionCache(cache)
        measure_orders = OrderMeasurer(cache)
        l2_bytes = l2_bytes or _l2_bytes()
    decision = rd.decide(csr, width, measure_orders=measure_orders, cache=cache,
                         expected_calls=expected_calls, methods=methods or rd.DEFAULT_METHODS,
                         l2_bytes=l2_bytes, **decide_options)
    if on_device is not None:   # the relabelling on the device is part of the cost
        chosen = on_device.graph_of(decision.perm) if decision.applied else graph
        on_device.done.clear()
    cost_s = time.perf_counter() - started   # deciding: orders, relabelling, measurements
    if not isinstance(graph, Graph):         # the build every order pays, as before
        chosen = Graph.from_csr_graph(decision.relabelled() if decision.applied else graph,
                                      device=device, **options)
    if not decision.applied:
        return ReorderedGraph(chosen, None, "identity", decision, cost_s)
    return ReorderedGraph(chosen, decision.perm, decision.method, decision, cost_s)


class DeviceRelabel:
    """The decision's `relabel` on the torch path: P A Pᵀ of `graph` on its device, timed (the
    cost the decision weighs), each result kept by its permutation (the same array object the
    decision returns), so the chosen order is not relabelled twice. The graph measured is the
    relabelled Graph's host copy (a download, where the host's own relabelling took 1.85 s of a
    7.2 s decision on products-like-shuffled); a Graph that keeps duplicate edges, whose host CSR
    is not its own edges, is relabelled on the host for that."""

    def __init__(self, graph: Graph):
        self.graph, self.done = graph, []     # [(perm array, its relabelled Graph)]

    def apply(self, perm) -> float:
        from . import relabel

        started = time.perf_counter()
        relabelled = relabel.permuted_graph(self.graph, torch.as_tensor(perm, device=self.graph.device))
        _synchronize(self.graph.device)
        self.done.append((perm, relabelled))
        return time.perf_counter() - started

    def __call__(self, host: CSRGraph, perm, method: str) -> tuple[CSRGraph, float]:
        from ..scheduler.decisions.reorder_decision import host_relabel

        seconds = self.apply(perm)
        if not holds_its_edges(self.graph, host):
            return host_relabel(host, perm, method)[0], seconds
        measured = self.done[-1][1].host_csr(weighted=True)
        source = {"reordered_from": host.source, "reorder": method}
        return dataclasses.replace(measured, source=source), seconds

    def graph_of(self, perm) -> Graph:
        """The relabelled Graph of `perm`: the one timed, else (a cached decision) relabelled now."""
        found = next((g for p, g in self.done if p is perm), None)
        if found is None:
            self.apply(perm)
            found = self.done[-1][1]
        return found


def _synchronize(device) -> None:
    """Wait for the device, so that a cost in seconds is the work's, not its launches'."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


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
