"""Int handles for live Graphs: what autosage's custom operators (autosage_cli.torch.ops) take
instead of the Graph itself, since a torch custom op only takes tensors and primitive values.

A Graph gets its handle when it is made (`register`, stored on the Graph as `_op_handle`) and keeps
it while it lives; the registry holds only a weak reference, so registering never keeps a Graph
(and its device memory, plans and derived graphs) alive. Handles are never reused: a handle whose
Graph was freed stays dead, and an op called with it fails in one line instead of running on
another graph.

Under torch.compile the handle is a constant of the compiled graph, guarded on the Graph (its
attribute), so each Graph gets its own compiled graph and the handle never travels as a graph
input. `handle(g)` is what an op reads; it also notes the Graph in open `recording()` blocks.
"""
from __future__ import annotations

import contextlib
import itertools
import weakref

import torch

from ..errors import AutosageError

_next = itertools.count(1)
_live: dict[int, weakref.ref] = {}
_recorders: list[dict] = []    # open recording() blocks: id -> Graph of every Graph an op ran on


def register(graph) -> int:
    """Give a Graph its handle when it is made (Graph.__init__), without noting it in a recording()
    block: under torch.compile every Graph's handle is then a plain attribute, a constant of the
    compiled graph. Registering a Graph met first while tracing takes `_register` at trace time,
    which some dynamo versions cannot trace (torch 2.11: "Graph is not a constant")."""
    return getattr(graph, "_op_handle", None) or _register(graph)


def handle(graph) -> int:
    """The handle of `graph` (every Graph has one from birth; registered now otherwise). Under
    torch.compile it is read as a plain attribute, a constant the compiled graph is guarded on."""
    h = register(graph)
    for seen in _recorders:
        seen[id(graph)] = graph
    return h


@torch.compiler.assume_constant_result
def _register(graph) -> int:
    # assume_constant_result: met during tracing, this runs for real at trace time (dynamo's side
    # effects would only land after the compiled graph, whose ops need the registry entry first).
    # Dynamo versions that cannot pass an object to such a function stop here instead, which is
    # why a Graph registers when it is made (`register`), never while a compiled region traces.
    h = next(_next)
    # the callback drops the entry when the Graph is collected (h bound now, not at call time)
    _live[h] = weakref.ref(graph, lambda _ref, h=h: _live.pop(h, None))
    graph._op_handle = h
    return h


@contextlib.contextmanager
def recording():
    """`with recording() as seen:` seen (a dict id -> Graph) collects every Graph an op runs on
    inside the block (a captured step checks them before each replay)."""
    seen: dict = {}
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def graph(h: int):
    """The live Graph of handle `h`; AutosageError when it was freed or never existed."""
    ref = _live.get(h)
    g = None if ref is None else ref()
    if g is None:
        raise AutosageError(f"graph handle {h} names no live Graph (it was freed): keep the Graph "
                            "alive while compiled code or a captured step uses it")
    return g


def live_count() -> int:
    """How many registered Graphs are alive (for tests of the registry's weak references)."""
    return sum(ref() is not None for ref in _live.values())
