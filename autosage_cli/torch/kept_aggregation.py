"""A layer's aggregation of an input that recurs unchanged, A x, kept across calls.

Full-graph training feeds its first layer the same feature matrix every step, and that matrix
needs no gradient: A x is the same product each step, over a graph whose weights are fixed (GCN's
normalised graph, SAGE's mean graph). Once a layer has seen such an input twice unchanged, it
keeps A x with the graph and aggregates first from the kept product from then on: its forward runs
no SpMM, and neither does its backward (x needs no gradient; only the GEMMs' gradients run). On a
small graph each SpMM call is host time an eager step spends; on any graph it is device time.

The first sight only notes the input. A mini-batch step brings new features every call, and A x at
the input's width (wider than the output on a first layer, usually) would cost it more than the
transform-first product it replaces; a dropout on the input makes a new tensor every step too.

Unchanged means the same tensor object (held by a weak reference: the kept product never keeps
the features alive), its version counter (every in-place write, through any view, moves it) and
its storage, shape and strides; the product is dropped when the input is. Not kept: inputs that
need a gradient, tensor subclasses, graphs whose buffers are refilled in place (a captured
mini-batch's static graphs), calls under torch.inference_mode and the inference tensors it makes
(no version counter; a product made there could not be saved for a training call's backward),
and calls under a CUDA-graph capture (a replay reads whatever the features' buffer holds then, so
A x must be in the graph) or under torch.compile (the compiled op is its own path). A product
larger than a quarter of the device's free memory is not kept.

`keep_aggregations(False)` turns it off for the process: every call then runs its aggregation.
"""
from __future__ import annotations

import functools
import weakref

import torch
from torch import Tensor

_MEMORY_SHARE = 4          # a kept product takes at most 1/4 of the device's free memory
_NOTES_PER_GRAPH = 8       # inputs noted per graph at once (the oldest goes first)
_state = {"enabled": True}
_KEY = "kept inputs"       # a Graph's derived entry (graph.derived): {id(input): _Noted}
_graphs: "weakref.WeakSet" = weakref.WeakSet()   # the Graphs holding one, for keep_aggregations(False)


def keep_aggregations(enabled: bool = True) -> None:
    """Whether layers keep an unchanged input's aggregation across calls (on by default); turning
    it off drops what is kept."""
    _state["enabled"] = bool(enabled)
    if not enabled:
        for g in list(_graphs):
            g.derived.pop(_KEY, None)
        _graphs.clear()


class _Noted:
    """An input seen on a graph, and its aggregation once it recurred (else None). Its entry goes
    when the input does (the weak reference's callback), and the product with it."""
    __slots__ = ("ref", "version", "layout", "aggregated", "sized")

    def __init__(self, x: Tensor, table: dict):
        self.ref = weakref.ref(x, functools.partial(_forget, table, id(x)))
        self.version, self.layout = x._version, _layout(x)
        self.aggregated = None
        self.sized = False     # whether its size was weighed (once: a free-memory query costs)

    def matches(self, x: Tensor) -> bool:
        return self.ref() is x and x._version == self.version and _layout(x) == self.layout


def _forget(table: dict, key: int, ref) -> None:
    noted = table.get(key)
    if noted is not None and noted.ref is ref:    # not a later input given the same id
        del table[key]


def _layout(x: Tensor) -> tuple:
    return x.data_ptr(), x.shape, x.stride(), x.dtype


def noted(g, x: Tensor) -> "_Noted | None":
    """What `g` holds for the input `x`: its version and layout, and A x once kept."""
    return g.derived.get(_KEY, {}).get(id(x))


def eligible(g, x: Tensor, x_dst: Tensor | None) -> bool:
    """Whether a layer call may read or keep A x: see the module's docstring."""
    # an inference tensor has no version counter to watch, and a product made under inference
    # mode would be one, which autograd may not save for a later training call
    return (_state["enabled"] and type(x) is Tensor and not x.requires_grad and not x.is_inference()
            and not torch.is_inference_mode_enabled()
            and (x_dst is None or not x_dst.requires_grad) and g._static is None
            and not (x.is_cuda and torch.cuda.is_current_stream_capturing()))


def kept(g, x: Tensor, aggregate) -> Tensor | None:
    """A x kept for `x` on `g`, computed now (`aggregate(g, x)`, without grad) on x's second
    unchanged sight; None on a first sight, which only notes x. The caller checked `eligible`.
    Several inputs are noted per graph: a forward without gradients (inference) feeds every layer
    of a stack on one graph an input needing none, the features first."""
    table = g.derived.get(_KEY)
    if table is None:
        table = g.derived[_KEY] = {}
        _graphs.add(g)
    key = id(x)
    noted = table.get(key)
    if noted is None or not noted.matches(x):
        table.pop(key, None)             # re-inserted last: the newest
        table[key] = _Noted(x, table)
        if len(table) > _NOTES_PER_GRAPH:
            del table[next(iter(table))]
        return None
    if not noted.sized:
        noted.sized = True
        if _fits(g.n_rows * x.shape[1] * x.element_size(), x):
            with torch.no_grad():
                noted.aggregated = aggregate(g, x)
    return noted.aggregated


def _fits(nbytes: int, like: Tensor) -> bool:
    if not like.is_cuda:
        return True
    free, _total = torch.cuda.mem_get_info(like.device)
    return nbytes * _MEMORY_SHARE <= free
