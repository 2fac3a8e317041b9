"""Captured steps: a whole training step (forward, loss, backward, optimizer step) or a forward
pass recorded once in a CUDA graph (torch.cuda.CUDAGraph) and replayed, so a step costs one graph
launch instead of hundreds of kernel launches and their Python.

    def loss_fn(graph, x, y):                       # forward and loss, on the step's inputs
        return F.cross_entropy(model(x, graph), y)

    opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    step = at.capture_training_step(loss_fn, opt, g, x, y)    # x, y: example CUDA inputs
    for x_b, y_b in batches:
        loss = step(x_b, y_b)      # copies into the static inputs, replays; the static loss tensor

As in PyTorch's whole-network capture: the first `warmup` calls run the step eagerly on a side
stream (they are real steps on the inputs given: every call is one training step), which builds
every plan, transpose, normalised graph and workspace, and lets the optimizer make its state; the
next call captures the step on that stream with the gradients set to None (backward allocates
them from the graph's private pool) and replays it once; later calls only copy and replay.

Rules, each an AutosageError in one line when broken:
  * a CUDA device, inputs that are CUDA tensors, and the same shapes, dtypes and devices every call;
  * the same Graph every replay (the kernels were recorded with its memory): a Graph passed again
    (`step(x, y, graph=g)`) must be the one captured, and neither it nor any Graph the step ran
    on may have been changed in place, freed, or given other plans since;
  * no host synchronisation inside the step (.item(), printing a tensor, a shape that depends on
    data such as boolean-mask indexing): torch's capture error comes back naming its cause;
  * a capturable optimizer: Adam, AdamW (and others with the flag) built with capturable=True, or
    SGD; hyperparameters given as Python numbers are baked into the graph.
Under torch.autocast inside the step, pass cache_enabled=False (PyTorch's rule for capture: the
cast cache would hold tensors from the capture).
The returned tensors are static: each replay overwrites them (clone what you keep).
Plans are native in a captured step (torch.cuda.capturable_plans around the warm-up and the
capture): CuPy refuses cuSPARSE calls while a stream captures, so where the tuner chose a vendor
plan the step runs the fastest verified native candidate of the same probe instead.
"""
from __future__ import annotations

import abc
import contextlib
import itertools
import operator
import weakref

import torch

from ..errors import AutosageError
from . import cuda, handles
from .captured_build import capturing, release_generators

WARMUP = 3     # eager steps before the capture, as PyTorch's examples do


# ------------------------------------------------------------------------------------ checks
def _check_warmup(warmup) -> int:
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 1:
        raise AutosageError(f"warmup must be an int >= 1 (the eager steps build every plan before "
                            f"the capture; nothing may be tuned inside it), got {warmup!r}")
    return warmup


def check_optimizer(optimizer) -> None:
    """An optimizer whose step runs inside a CUDA graph: capturable=True where it has the flag
    (Adam, AdamW, ...: their step counter stays on the device), or SGD (no counter)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise AutosageError(f"expected a torch.optim.Optimizer, got {type(optimizer).__name__}")
    name = type(optimizer).__name__
    if "capturable" in optimizer.defaults:
        if not all(group.get("capturable") for group in optimizer.param_groups):
            raise AutosageError(f"{name} is not capturable: build it with capturable=True "
                                f"(torch.optim.{name}(params, ..., capturable=True))")
    elif not isinstance(optimizer, torch.optim.SGD):
        raise AutosageError(f"{name} cannot run inside a CUDA graph: use SGD, or Adam / AdamW with "
                            "capturable=True")


def _require_cuda(what: str) -> None:
    if not torch.cuda.is_available():
        raise AutosageError(f"{what} needs a CUDA GPU: torch sees none (a CPU-only torch build, or "
                            "no device visible); run the step eagerly instead")


def _static_inputs(inputs: tuple) -> tuple:
    """Copies of the example inputs, the tensors every replay reads (inputs must be CUDA tensors)."""
    if not inputs:
        raise AutosageError("a captured step needs at least one input tensor")
    for i, t in enumerate(inputs):
        if not isinstance(t, torch.Tensor):
            raise AutosageError(f"input {i}: expected a CUDA tensor, got {type(t).__name__}")
        if t.device.type != "cuda":
            raise AutosageError(f"input {i} is on {t.device}: a captured step takes CUDA tensors "
                                "(move it with .cuda())")
    return tuple(t.detach().clone() for t in inputs)


def _describe(t: torch.Tensor) -> str:
    return f"{tuple(t.shape)} {str(t.dtype).replace('torch.', '')} on {t.device}"


def _copy_in(static: tuple, new: tuple) -> None:
    if len(new) != len(static):
        raise AutosageError(f"the step was captured with {len(static)} inputs, got {len(new)}")
    for i, (s, t) in enumerate(zip(static, new)):
        if not isinstance(t, torch.Tensor) or (t.shape, t.dtype, t.device) != (s.shape, s.dtype, s.device):
            got = _describe(t) if isinstance(t, torch.Tensor) else type(t).__name__
            raise AutosageError(f"input {i}: a captured step takes {_describe(s)} every call (static "
                                f"shapes), got {got}; capture another step for other shapes")
        if t.data_ptr() != s.data_ptr():
            s.copy_(t)


_INDEX = operator.attrgetter("rowptr", "row", "col", "weight")
_VERSION = operator.attrgetter("_version")
_is = operator.is_


class _GraphWatch:
    """What a captured step's kernels depend on in one Graph, taken at the capture: its index and
    weight tensors (the same objects, not modified in place since) and the plans it held (the
    same objects: the graph writes their workspaces). New plans, for other widths run eagerly
    elsewhere, are fine."""

    def __init__(self, g):
        self.ref = weakref.ref(g)
        self.tensors = _INDEX(g)
        self.present = tuple(t for t in self.tensors if t is not None)
        self.versions = tuple(map(_VERSION, self.present))
        self.plans = tuple((g.gpu, k, v) for k, v in g.gpu.items() if k and k[0] == "plan")

    def unchanged(self, g) -> bool:
        return (all(map(_is, _INDEX(g), self.tensors)) and tuple(map(_VERSION, self.present)) == self.versions
                and all(d.get(k) is v for d, k, v in self.plans))


class _Watch:
    """Every Graph's _GraphWatch, and the same checks over all of them at once in a few C-level
    passes: they run before every replay, and a small graph's replay is ~0.1 ms of GPU time (a
    walk of each Graph's dicts cost ~3 us of host time per Graph)."""

    def __init__(self, graphs):
        self.each = [_GraphWatch(g) for g in graphs]
        self.refs = tuple(w.ref for w in self.each)
        self.tensors = tuple(itertools.chain.from_iterable(w.tensors for w in self.each))
        self.present = tuple(itertools.chain.from_iterable(w.present for w in self.each))
        self.versions = tuple(itertools.chain.from_iterable(w.versions for w in self.each))
        plans = [plan for w in self.each for plan in w.plans]
        self.dicts, self.keys, self.plans = (tuple(c) for c in zip(*plans)) if plans else ((), (), ())

    def graphs(self) -> tuple:
        """The Graphs, None for a freed one."""
        return tuple(ref() for ref in self.refs)

    def first_changed(self, graphs: tuple):
        """The first of these (live) Graphs that changed since the capture, else None."""
        if (all(map(_is, itertools.chain.from_iterable(map(_INDEX, graphs)), self.tensors))
                and tuple(map(_VERSION, self.present)) == self.versions
                and all(map(_is, map(dict.get, self.dicts, self.keys), self.plans))):
            return None
        return next(g for g, w in zip(graphs, self.each) if not w.unchanged(g))


def _cause(exc: BaseException) -> str:
    """The first line of the error that started it all (a failed capture raises again on exit)."""
    while exc.__context__ is not None and exc.__cause__ is None:
        exc = exc.__context__
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


# ------------------------------------------------------------------------------------ the step
@contextlib.contextmanager
def on_side_stream(stream, device):
    """Work inside runs on `stream`, after what the current stream has queued; the current stream
    then sees it (or what a failed step did). PyTorch's rule for warm-up steps before a capture."""
    current = torch.cuda.current_stream(device)
    stream.wait_stream(current)
    try:
        with torch.cuda.stream(stream):
            yield
    finally:
        current.wait_stream(stream)


def training_step(loss_fn, optimizer, graph, inputs: tuple):
    """One training step, what a capture records: zero the gradients (to None, so a capture's
    backward allocates them from its pool), loss_fn(graph, *inputs), backward, the optimizer's
    step; loss_fn's outputs."""
    optimizer.zero_grad(set_to_none=True)
    out = loss_fn(graph, *inputs)
    loss = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise AutosageError("loss_fn must return the loss (a tensor with one element), or a tuple "
                            "starting with it")
    loss.backward()
    optimizer.step()
    return out


class _Captured(abc.ABC):
    """What a captured training step and a captured forward share: static inputs, eager warm-up
    calls on a side stream, the capture, replays, and the Graph checks."""

    what = "capturing a step"

    def __init__(self, fn, graph, inputs: tuple, warmup: int):
        if not callable(fn):
            raise AutosageError(f"expected a function of (graph, *inputs), got {type(fn).__name__}")
        self.warmup = _check_warmup(warmup)
        _require_cuda(self.what)
        from .graph import Graph

        if not isinstance(graph, Graph):
            raise AutosageError(f"expected an autosage_cli.torch.Graph, got {type(graph).__name__}")
        if graph.device.type != "cuda":
            raise AutosageError(f"the Graph is on {graph.device}: a captured step runs on a CUDA Graph")
        self.fn, self.graph = fn, graph
        self.static_inputs = _static_inputs(inputs)
        self.device = self.static_inputs[0].device
        self.calls = 0
        self.cuda_graph = None
        self.outputs = None
        self._stream = torch.cuda.Stream(self.device)
        self._seen: list = []          # a weak reference to every Graph the step runs on
        self._watch = None             # once captured, what its replays depend on in them

    @property
    def captured(self) -> bool:
        return self.cuda_graph is not None

    def __call__(self, *inputs, graph=None):
        if graph is not None and graph is not self.graph:
            raise AutosageError("a captured step replays on the Graph it was captured with: capture "
                                "another step for another Graph")
        self._check_graphs()
        _copy_in(self.static_inputs, inputs)
        self.calls += 1
        if self.calls <= self.warmup:
            with self._on_side_stream(), handles.recording() as seen, cuda.capturable_plans():
                self.outputs = self._eager()
            self._remember(seen)
        elif self.cuda_graph is None:
            self._capture()
            self.cuda_graph.replay()
        else:
            self.cuda_graph.replay()
            self._after_replay()
        return self.outputs

    def _on_side_stream(self):
        return on_side_stream(self._stream, self.device)

    def _remember(self, seen: dict) -> None:
        """Every Graph the step ran on (and the transposes its backward ran on), weakly."""
        known = {id(ref()) for ref in self._seen}
        for g in [self.graph, *seen.values()]:
            for h in (g, g.__dict__.get("_transpose")):
                if h is not None and id(h) not in known:
                    known.add(id(h))
                    self._seen.append(weakref.ref(h))

    def _check_graphs(self) -> None:
        graphs = self._watch.graphs() if self._watch else tuple(ref() for ref in self._seen)
        if None in graphs:
            raise AutosageError("a Graph the captured step runs on was freed: keep it alive, or "
                                "capture the step again")
        changed = self._watch and self._watch.first_changed(graphs)
        if changed:
            raise AutosageError(f"{changed.describe()} changed since the step was captured (its tensors "
                                "were modified in place or its plans replaced): capture the step again")

    def _capture(self) -> None:
        self._before_capture()
        cuda_graph = torch.cuda.CUDAGraph()
        try:
            with capturing(cuda_graph, self._stream), cuda.capturable_plans():
                self.outputs = self._eager()
        except Exception as exc:   # torch's, CuPy's or cuSPARSE's capture error, or ours
            release_generators()
            raise AutosageError(f"{self.what} failed: {_cause(exc)} (no host synchronisation may run "
                                "inside the step: .item(), printing a tensor, boolean-mask indexing, "
                                "nonzero, or tuning a new width)") from None
        self.cuda_graph = cuda_graph
        self._watch = _Watch([g for g in (ref() for ref in self._seen) if g is not None])
        self._after_capture()

    # hooks for the two kinds
    @abc.abstractmethod
    def _eager(self):
        """One step, eagerly (also what the capture records): the kind's outputs."""

    def _before_capture(self) -> None:
        pass

    def _after_capture(self) -> None:
        pass

    def _after_replay(self) -> None:
        pass


class CapturedStep(_Captured):
    """`step(*inputs, graph=None) -> loss`: one training step (forward, loss, backward, optimizer
    step), eager for the first `warmup` calls, then captured once and replayed. `loss_fn(graph,
    *inputs)` returns the loss, or a tuple whose first element is the loss (the rest, e.g. the
    logits, comes back with it). After every call the parameters' .grad hold that step's
    gradients."""

    what = "capturing the training step"

    def __init__(self, loss_fn, optimizer, graph, inputs: tuple, warmup: int = WARMUP):
        check_optimizer(optimizer)
        super().__init__(loss_fn, graph, inputs, warmup)
        self.optimizer = optimizer
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        for p in self.params:
            if p.device.type != "cuda":
                raise AutosageError(f"a parameter of {type(optimizer).__name__} is on {p.device}: "
                                    "move the model to the GPU before capturing its step")
        self._grads: list = []

    def _eager(self):
        return training_step(self.fn, self.optimizer, self.graph, self.static_inputs)

    def _before_capture(self) -> None:
        # backward then allocates every gradient from the graph's pool: replays rewrite them there
        self.optimizer.zero_grad(set_to_none=True)

    def _after_capture(self) -> None:
        self._grads = [p.grad for p in self.params]

    def _after_replay(self) -> None:
        # zero_grad(set_to_none=True) between calls drops .grad; the replay wrote the same memory
        for p, grad in zip(self.params, self._grads):
            if p.grad is None and grad is not None:
                p.grad = grad


class CapturedForward(_Captured):
    """`forward(*inputs, graph=None) -> output`: `fn(graph, *inputs)` under torch.no_grad(), eager
    for the first `warmup` calls, then captured once and replayed."""

    what = "capturing the forward pass"

    def _eager(self):
        with torch.no_grad():
            return self.fn(self.graph, *self.static_inputs)


def capture_training_step(loss_fn, optimizer, graph, *inputs, warmup: int = WARMUP) -> CapturedStep:
    """A training step to call once per step with new inputs: see the module docstring."""
    return CapturedStep(loss_fn, optimizer, graph, inputs, warmup)


def capture_inference(forward, graph, *inputs, warmup: int = 1) -> CapturedForward:
    """A forward pass (no gradients) to call once per batch with new inputs: see the module
    docstring."""
    return CapturedForward(forward, graph, inputs, warmup)
