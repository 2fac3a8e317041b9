"""The device part of a Graph build on a GPU (canonical.sort_edges), captured once per capacity in
a CUDA graph and replayed for every later build that fits.

Why: a mini-batch step builds a new Graph every time, and the sort, the checks and the structure
features are some forty small torch ops, each costing more host time than GPU time. Replayed, they
are one launch. A CUDA graph needs static shapes, so the edges are copied into buffers of a
capacity (the next step of a quarter-octave ladder at or above the edge count, likewise for the
nodes) and the sizes go in as device scalars: sort_edges masks the slots past the edges, which
may hold anything (an earlier batch's edges), and pads the degree vectors, which decode takes out.
The outputs are the graph's buffers: canonical_order reads them back and copies what it keeps
before another build replays the graph, under LOCK.

Not used (None: the caller runs the ops eagerly) off CUDA, for a build without edges or of more
than MAX_EDGES, while a stream is capturing (a user's capture), or after a capture failed once in
this process (the reason is kept in `disabled`).
"""
from __future__ import annotations

import collections
import contextlib
import math
import threading

import torch

# Capacities: a ladder of quarter-octave steps from SMALLEST, so batches of one sampler (within a
# few percent of each other) share one or two captured builds.
SMALLEST = 1024
_STEPS_PER_OCTAVE = 4
KEEP = 4                 # captured builds kept, the most recently used (each holds its buffers)
# Larger builds run eagerly: a graph of that size is built once (a full graph, not a batch), and
# a capture would keep a private pool of its intermediates, gigabytes at 10^8 edges.
MAX_EDGES = 1 << 23
LOCK = threading.RLock()  # a replay and the read of its outputs are one step
_builds: collections.OrderedDict = collections.OrderedDict()
disabled: list[str] = []  # why captured builds are off in this process (a capture failed)


def capacity(n: int) -> int:
    """The smallest step of the ladder at or above n."""
    c = SMALLEST
    while c < n:
        c = int(math.ceil(c * 2 ** (1 / _STEPS_PER_OCTAVE)))
    return c


class CapturedBuild:
    """sort_edges at one capacity: input buffers, the sizes as device scalars, and the CUDA graph
    whose outputs are a SortedEdges."""

    def __init__(self, device_part, device: torch.device, edges: int, nodes: int, weighted: bool,
                 keep_duplicates: bool, looped: bool):
        self.nodes = nodes
        self.row = torch.zeros(edges, dtype=torch.int64, device=device)
        self.col = torch.zeros(edges, dtype=torch.int64, device=device)
        self.weight = torch.zeros(edges, dtype=torch.float32, device=device) if weighted else None
        self.sizes = torch.zeros(3, dtype=torch.int64, device=device)
        self.host_sizes = torch.zeros(3, dtype=torch.int64).pin_memory()

        def run():
            return device_part(self.row, self.col, self.weight, tuple(self.sizes), nodes, keep_duplicates, looped)

        # a warm-up first, on a side stream (PyTorch's rule: lazy state such as the sort's
        # workspace and the bin constants is made outside the capture)
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            run()
        torch.cuda.current_stream(device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with capturing(self.graph):
            self.out = run()

    def __call__(self, row, col, weight, sizes: tuple):
        n = row.numel()
        self.host_sizes.numpy()[:] = sizes
        # the pinned sizes are free again: the last replay's copy ran before its read-back
        self.sizes.copy_(self.host_sizes, non_blocking=True)
        self.row[:n].copy_(row)
        self.col[:n].copy_(col)
        if weight is not None:
            self.weight[:n].copy_(weight)
        self.graph.replay()
        return self.out


def sort_edges(device_part, row: torch.Tensor, col: torch.Tensor, weight, shape: tuple, keep_duplicates: bool):
    """(the outputs of `device_part` (canonical.sort_edges) replayed at a capacity, the node
    capacity its degree vectors have), or None when no captured build applies (the module's
    docstring says when). Call under LOCK and read the outputs before releasing it."""
    if (row.device.type != "cuda" or not 0 < row.numel() <= MAX_EDGES or disabled
            or torch.cuda.is_current_stream_capturing()):
        return None
    n_rows, n_cols = shape
    key = (row.device, capacity(row.numel()), capacity(max(n_rows, n_cols)), weight is not None,
           keep_duplicates, n_rows == n_cols)
    build = _builds.get(key)
    if build is None:
        try:
            build = CapturedBuild(device_part, *key)
        except Exception as exc:     # torch's capture error: builds run their ops eagerly from now
            release_generators()
            disabled.append(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            return None
        _builds[key] = build
        while len(_builds) > KEEP:
            _builds.popitem(last=False)
    _builds.move_to_end(key)
    return build(row, col, weight, (row.numel(), n_rows, n_cols)), build.nodes


@contextlib.contextmanager
def capturing(cuda_graph, stream=None):
    """torch.cuda.graph(cuda_graph, stream=stream), with torch's current stream put back however
    the capture ends. torch's context ends the capture, then restores the stream; when ending the
    capture raises (the body broke a capture rule, which invalidates it), the capture's side stream
    stays current, and every later op of the process runs there: a non-blocking stream, which the
    legacy default stream (CuPy's, other libraries') no longer orders against."""
    previous = torch.cuda.current_stream(None if stream is None else stream.device)
    try:
        with torch.cuda.graph(cuda_graph, stream=stream):
            yield
    finally:
        torch.cuda.set_stream(previous)


def release_generators() -> None:
    """After a failed capture (a build's, or a training step's in torch/capture.py): torch ends a
    capture's hold on the CUDA generators only when the capture ends well, so every later random
    draw on the device would fail ("offset increment outside graph capture"). Give each default
    generator a fresh state of the same seed and offset (a cloned state is not capturing)."""
    for generator in torch.cuda.default_generators:
        try:
            generator.graphsafe_set_state(generator.clone_state())
        except RuntimeError:   # a device never initialised: nothing held
            pass


def forget() -> None:
    """Drop every captured build (their buffers and graphs)."""
    with LOCK:
        _builds.clear()
