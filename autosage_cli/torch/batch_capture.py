"""Captured mini-batch training steps: one CUDA graph per batch size serves every sampled batch
of that size, the graph build included, so a new batch costs what the same batch stepped again
costs (a replay), not a Graph build, its plans and hundreds of launches.

    def loss_fn(graph, x, y):                 # the model on a batch; the seeds are the first rows
        return F.cross_entropy(model(x, graph)[:y.numel()], y)

    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    step = at.capture_batch_step(loss_fn, opt)
    for batch in loader:                      # batch.edge_index over the batch's nodes
        loss = step(batch.edge_index, x[batch.n_id], y[batch.n_id[:batch_size]])

How: a batch of n nodes and E edges is padded to a capacity (room for E edges, and for n nodes plus
a sixty-fourth for the padding nodes) and its Graph is a static graph
(torch/static_graph.py): built on the device by a fixed sequence of ops from buffers of the
capacity, with the padding edges on padding nodes only. The loss_fn sees x padded with zero rows
to the capacity (rows past n are padding: use the seeds' rows, the first ones, as a sampler orders
them) and the graph of the capacity. Capacities are sized by the batches themselves, not by a
fixed ladder: every row of a capacity goes through the model's dense layers, so padding costs a
step what it adds in rows. A batch takes the smallest kept capacity it fits that wastes at most
SLACK; when none does, it opens one HEADROOM above its own needs, which its sampler's later
batches (a few percent apart) fit. Per capacity (`keep` of them, the most recently used), the
first `warmup` calls run the step eagerly on a side stream (real training steps: they tune a new
kind, build every plan and let the optimizer make its state); the next call captures the step,
graph build and all, and replays it; later calls copy the batch into the buffers and replay.

Rules, beyond those of capture.py's captured steps (a capturable optimizer, no host
synchronisation in loss_fn, static outputs that each replay overwrites):
  * loss_fn must treat the padding rows as rows of no interest (layers that mix rows, such as a
    batch norm over every row, would see them); its extra inputs have the same shapes every call
    of a capacity (another shape is another capture);
  * edge_index holds ids below x.shape[0]. A replayed step cannot check that without waiting for
    the device: an edge out of range is dropped into the padding and the next call raises (or
    `check()`, which waits for the device).
When the capture fails (a plan that builds host work lists, a host synchronisation), the capacity
runs eagerly on its static graphs from then on (still correct, slower), and `reason` says why. Off
a GPU every step runs so (the same padded batches and static graphs, any optimizer): the loop
that runs captured on a GPU runs, and trains alike, on a CPU.
"""
from __future__ import annotations

import collections

import torch

from ..errors import AutosageError
from . import cuda
from .capture import _cause, check_optimizer, on_side_stream, training_step
from .captured_build import capturing, release_generators
from .graph import check_edge_index
from .static_graph import StaticShape, batch_graph

WARMUP = 2     # eager steps per capacity before its capture
KEEP = 2       # captured capacities kept (each holds its graph's memory)
# A sampler's batches differ by a few percent in nodes and edges: a capacity opened HEADROOM above
# one batch holds most of the next ones, and a batch reuses one that wastes at most SLACK of its
# needs (past that, a capacity of its own pays back its capture within a few steps).
HEADROOM = 1 / 32
SLACK = 1 / 8
ROUND = 64     # capacities are multiples of this (sizes a few rows apart share one)
PADDING_SHARE = 64   # one padding node per this many batch nodes (one at least)


def needs(n_edges: int, n_nodes: int) -> tuple[int, int]:
    """(edges, nodes) a batch needs: its edges, and its nodes plus PADDING_SHARE's padding nodes,
    over which the padding edges are spread so that no padding row is a hub."""
    return max(n_edges, 1), n_nodes + n_nodes // PADDING_SHARE + 1


def opened(need: int) -> int:
    """The capacity a batch needing `need` opens: HEADROOM above it, rounded up to ROUND."""
    return -(-int(need * (1 + HEADROOM)) // ROUND) * ROUND


def fits(need: int, room: int) -> bool:
    """Whether a capacity of `room` holds `need` without wasting more than SLACK of it (a ROUND
    of slack at least, for small batches)."""
    return need <= room <= max(need * (1 + SLACK), need + ROUND)


class _Slot:
    """One capacity: the input buffers every step of it reads, and its capture."""

    def __init__(self, shape: StaticShape, x: torch.Tensor, inputs: tuple):
        dev = x.device
        self.shape = shape
        self.src = torch.zeros(shape.edges, dtype=torch.int64, device=dev)
        self.dst = torch.zeros(shape.edges, dtype=torch.int64, device=dev)
        self.x = torch.zeros((shape.nodes, *x.shape[1:]), dtype=x.dtype, device=dev)
        self.inputs = tuple(t.detach().clone() for t in inputs)
        self.calls = 0
        self.cuda_graph = None
        self.outputs = None
        self.graph = None          # the graph built inside the capture (its plans' memory)
        self.grads: list = []
        self.reason: str | None = None   # why this capacity runs eagerly (a failed capture)
        self.flag = torch.zeros((), dtype=torch.bool, pin_memory=dev.type == "cuda")
        self.flag_ready = None     # an event after the flag's copy of the last replay

    def fill(self, edge_index: torch.Tensor, x: torch.Tensor, inputs: tuple) -> None:
        E, n = int(edge_index.shape[1]), int(x.shape[0])
        self.shape.set_batch(E, n)
        self.src[:E].copy_(edge_index[0])
        self.dst[:E].copy_(edge_index[1])
        self.x[:n].copy_(x)
        self.x[n:].zero_()
        for static, t in zip(self.inputs, inputs):
            static.copy_(t)


class CapturedBatchStep:
    """`step(edge_index, x, *inputs) -> loss_fn's outputs` (static tensors): one training step on
    a batch, captured per capacity and replayed (the module's docstring). `graph_options` go to
    every batch Graph (cache, tune, schedules). `captures`, `replays` and `eager_steps` count
    what the calls did; `reason` is the last failed capture's cause (None: none failed)."""

    def __init__(self, loss_fn, optimizer, *, warmup: int = WARMUP, keep: int = KEEP, **graph_options):
        if not callable(loss_fn):
            raise AutosageError(f"expected a function of (graph, x, *inputs), got {type(loss_fn).__name__}")
        for name, value in (("warmup", warmup), ("keep", keep)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AutosageError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise AutosageError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        if any(p.device.type == "cuda" for p in self.params):
            check_optimizer(optimizer)     # its step is captured with the rest
        self.loss_fn, self.optimizer = loss_fn, optimizer
        self.warmup, self.keep, self.options = warmup, keep, graph_options
        self._slots: collections.OrderedDict = collections.OrderedDict()
        self._stream = None
        self.captures = self.replays = self.eager_steps = 0
        self.reason: str | None = None

    # ------------------------------------------------------------------------------ checks
    @staticmethod
    def _check(edge_index, x, inputs) -> None:
        check_edge_index(edge_index)
        if not isinstance(x, torch.Tensor) or x.dim() < 1 or x.shape[0] < 1:
            raise AutosageError("x: expected a tensor with one row per batch node (at least one)")
        for name, t in (("edge_index", edge_index), *((f"input {i}", t) for i, t in enumerate(inputs))):
            if not isinstance(t, torch.Tensor) or t.device != x.device:
                raise AutosageError(f"{name} must be a tensor on x's device ({x.device})")

    def _raise_if_flagged(self, slot: _Slot, wait: bool) -> None:
        ready = slot.flag_ready
        if ready is None or not (wait or ready.query()):
            return
        if wait:
            ready.synchronize()
        slot.flag_ready = None
        if bool(slot.flag):
            slot.shape.bad.zero_()
            raise AutosageError("edge_index of an earlier batch had an id out of range [0, number of "
                                "nodes): its edges out of range were dropped from that step")

    def check(self) -> None:
        """Wait for the device and raise if a replayed batch had an edge id out of range."""
        for slot in self._slots.values():
            self._raise_if_flagged(slot, wait=True)

    # ------------------------------------------------------------------------------ the step
    def _slot(self, edge_index, x, inputs) -> _Slot:
        """The kept capacity that fits the batch with the least waste, or a new one."""
        need_edges, need_nodes = needs(int(edge_index.shape[1]), int(x.shape[0]))
        kind = (x.device, tuple(x.shape[1:]), x.dtype, tuple((tuple(t.shape), t.dtype) for t in inputs))
        fitting = [key for key in self._slots if key[0] == kind
                   and fits(need_edges, key[1]) and fits(need_nodes, key[2])]
        if fitting:
            key = min(fitting, key=lambda k: (k[2], k[1]))
        else:
            key = (kind, opened(need_edges), opened(need_nodes))
            self._slots[key] = _Slot(StaticShape(key[1], key[2], x.device), x, inputs)
            while len(self._slots) > self.keep:
                _, evicted = self._slots.popitem(last=False)
                self._raise_if_flagged(evicted, wait=True)   # its last replays' report goes with it
        self._slots.move_to_end(key)
        return self._slots[key]

    def _body(self, slot: _Slot):
        """The step itself: build the batch's graph, loss, backward, optimizer step."""
        graph = batch_graph(slot.shape, slot.src, slot.dst, self.options)
        return graph, training_step(self.loss_fn, self.optimizer, graph, (slot.x, *slot.inputs))

    def _eager(self, slot: _Slot, edge_index, n: int):
        """A step run eagerly, its ids checked on the host first (an eager step may wait)."""
        if edge_index.numel() and (int(edge_index.min()) < 0 or int(edge_index.max()) >= n):
            raise AutosageError(f"edge_index: an id out of range [0, {n}) (x has {n} rows)")
        if slot.x.device.type != "cuda":
            _, out = self._body(slot)
            self.eager_steps += 1
            return out
        with on_side_stream(self._side_stream(slot), slot.x.device), cuda.capturable_plans():
            _, out = self._body(slot)
        self.eager_steps += 1
        return out

    def _side_stream(self, slot: _Slot):
        if self._stream is None:
            self._stream = torch.cuda.Stream(slot.x.device)
        return self._stream

    def _capture(self, slot: _Slot) -> bool:
        stream = self._side_stream(slot)
        stream.wait_stream(torch.cuda.current_stream(slot.x.device))
        self.optimizer.zero_grad(set_to_none=True)   # backward allocates the grads in the graph's pool
        cuda_graph = torch.cuda.CUDAGraph()
        try:
            with capturing(cuda_graph, stream), cuda.capturable_plans():
                slot.graph, slot.outputs = self._body(slot)
        except Exception as exc:      # torch's, CuPy's or ours: this capacity runs eagerly
            release_generators()
            slot.reason = self.reason = f"capture failed: {_cause(exc)}"
            return False
        slot.cuda_graph = cuda_graph
        slot.grads = [p.grad for p in self.params]
        self.captures += 1
        return True

    def _replay(self, slot: _Slot):
        slot.cuda_graph.replay()
        self.replays += 1
        slot.flag.copy_(slot.shape.bad, non_blocking=True)
        slot.flag_ready = torch.cuda.Event()
        slot.flag_ready.record()
        for p, grad in zip(self.params, slot.grads):   # this capacity's grads are the step's
            p.grad = grad
        return slot.outputs

    def __call__(self, edge_index, x, *inputs):
        self._check(edge_index, x, inputs)
        for slot in self._slots.values():
            self._raise_if_flagged(slot, wait=False)
        slot = self._slot(edge_index, x, inputs)
        slot.fill(edge_index, x, inputs)
        if x.device.type != "cuda" and slot.reason is None:
            slot.reason = self.reason = f"steps on {x.device} run eagerly (a CUDA graph needs a GPU)"
        if slot.cuda_graph is None and (slot.calls < self.warmup or slot.reason is not None
                                        or not self._capture(slot)):
            out = self._eager(slot, edge_index, int(x.shape[0]))   # a failed capture ran nothing
            slot.calls += 1
            return out
        return self._replay(slot)


def capture_batch_step(loss_fn, optimizer, *, warmup: int = WARMUP, keep: int = KEEP,
                       **graph_options) -> CapturedBatchStep:
    """A mini-batch training step captured per batch size: see the module docstring."""
    return CapturedBatchStep(loss_fn, optimizer, warmup=warmup, keep=keep, **graph_options)
