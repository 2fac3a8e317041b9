"""Full-graph training epochs: autosage's layers against the same model in PyG, side by side.

Models (the widths the benchmark fixes):
  gcn   2 x GCNConv, hidden 256
  sage  3 x SAGEConv (mean), hidden 256
  gat   GATConv 8 heads x 8 (concatenated), then GATConv with 1 head
  transformer  TransformerConv 8 heads x 8, then 1 head (only when asked for)
Per graph, random features and labels come from one seed. PyG's model is built first (seeded) and
ours gets its weights (load_state_dict), so both start equal and, computing the same functions,
train along the same path. In float16 or bfloat16 (`dtype`) both models, their parameters and the
features are in that type (PyG's sparse adjacency too), so each library trains as it runs in the
type; the losses then agree only up to the type's rounding. An epoch is forward + cross-entropy + backward + Adam step (lr 0.01),
timed with CUDA events (the wall clock on a CPU). `steps` epochs in all; the first `warmup` are not
timed (tuning, kernel builds and PyG's caches happen there) and the loss of the last one is what
the two libraries are compared on.

PyG runs in its fastest mode that works: the adjacency as a torch sparse CSR tensor (PyG's `adj_t`)
for GCN (cached=True) and SAGE, whose aggregation is then one sparse product, else the edge_index;
the attention layers take the edge_index first (their messages are per edge either way) and the
sparse tensor only when that fails. A run that fails in every mode is reported with each mode's
reason; running out of GPU memory also says how much it asked for.
"""
from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..backends.torch_sparse import csr_tensor
from ..errors import AutosageError
from ..graphs.csr import CSRGraph
from . import nn as autosage_layers
from .graph import Graph

MODELS = ("gcn", "sage", "gat")          # the suite's models
EXTRA_MODELS = ("transformer",)          # run when asked for by name
FEATURES = {"reddit-like": (602, 41), "products-like": (100, 47)}   # (input features, classes)
OTHER_FEATURES = (128, 16)
HIDDEN = 256
GAT_HEADS, GAT_CHANNELS = 8, 8
LEARNING_RATE = 0.01
PYG_MODES = {"gcn": ("sparse-csr", "edge-index"), "sage": ("sparse-csr", "edge-index"),
             "gat": ("edge-index", "sparse-csr"), "transformer": ("edge-index", "sparse-csr")}


def width(model: str) -> tuple[int, int]:
    """(hidden width, heads) of a model, as the results report them."""
    return (GAT_HEADS * GAT_CHANNELS, GAT_HEADS) if model in ("gat", "transformer") else (HIDDEN, 1)


class Net(torch.nn.Module):
    """A stack of layers with ReLU between them; `graph` is what every layer takes."""

    def __init__(self, layers):
        super().__init__()
        self.layers = torch.nn.ModuleList(layers)

    def forward(self, x, graph):
        for i, layer in enumerate(self.layers):
            x = layer(x, graph)
            if i + 1 < len(self.layers):
                x = F.relu(x)
        return x


def build(lib, model: str, n_in: int, n_out: int, pyg_mode: str | None = None) -> Net:
    """The model from `lib` (autosage_cli.torch or torch_geometric.nn); PyG's GCN caches its
    normalised adjacency in sparse-CSR mode."""
    if model == "gcn":
        cached = {"cached": True} if pyg_mode == "sparse-csr" else {}
        return Net([lib.GCNConv(n_in, HIDDEN, **cached), lib.GCNConv(HIDDEN, n_out, **cached)])
    if model == "sage":
        return Net([lib.SAGEConv(n_in, HIDDEN), lib.SAGEConv(HIDDEN, HIDDEN), lib.SAGEConv(HIDDEN, n_out)])
    if model == "gat":
        return Net([lib.GATConv(n_in, GAT_CHANNELS, heads=GAT_HEADS),
                    lib.GATConv(GAT_HEADS * GAT_CHANNELS, n_out, heads=1)])
    if model == "transformer":
        return Net([lib.TransformerConv(n_in, GAT_CHANNELS, heads=GAT_HEADS),
                    lib.TransformerConv(GAT_HEADS * GAT_CHANNELS, n_out, heads=1)])
    raise AutosageError(f"unknown model {model!r}; choose from {', '.join(MODELS + EXTRA_MODELS)}")


class Timer:
    """Epoch time: CUDA events on a GPU, the wall clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            self.start, self.end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self.start.record()
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        if self.cuda:
            self.end.record()
            self.end.synchronize()
            self.ms = self.start.elapsed_time(self.end)
        else:
            self.ms = (time.perf_counter() - self.t0) * 1e3
        self.wall_ms = (time.perf_counter() - self.t0) * 1e3
        return False


@dataclass
class Run:
    """One library's training of one model: epoch times of the timed steps, every step's loss, the
    wall time of the untimed warm-up epochs, and why it did not run (status "failed"/"skipped")."""
    library: str
    mode: str = ""
    times_ms: list = field(default_factory=list)
    losses: list = field(default_factory=list)
    setup_ms: float = float("nan")
    status: str = "ok"
    error: str = ""

    def stats(self) -> tuple[float, float, float]:
        """(median, p20, p80) of the timed epochs."""
        if not self.times_ms:
            return (float("nan"),) * 3
        return tuple(float(np.percentile(self.times_ms, q)) for q in (50, 20, 80))


def train(model: Net, graph, x, labels, steps: int, warmup: int) -> Run:
    opt = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    run = Run("", setup_ms=0.0)
    for step in range(steps):
        with Timer(x.device) as timer:
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x, graph), labels)
            loss.backward()
            opt.step()
        run.losses.append(loss.item())
        if step < warmup:
            run.setup_ms += timer.wall_ms
        else:
            run.times_ms.append(timer.ms)
    return run


_ASKED = re.compile(r"Tried to allocate ([0-9.]+ ?[KMGTP]?i?B)")


def failure_text(exc: BaseException) -> str:
    """One line: the exception's first line, and for running out of GPU memory how much was asked."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
    asked = _ASKED.search(str(exc))
    if isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower():
        return "out of GPU memory" + (f" (asked for {asked.group(1)})" if asked else "") + f": {first}"
    return f"{type(exc).__name__}: {first}"


def free_memory() -> None:
    """Cached, unused device memory back to the driver: torch's, and CuPy's pool (our plans' and the
    tuner's buffers), so the run after this one starts with the GPU to itself."""
    if torch.cuda.is_available():
        from . import cuda

        torch.cuda.empty_cache()
        cuda.release_pool()


def run_ours(model_name: str, dims, graph: Graph, x, labels, init_state, steps: int, warmup: int) -> Run:
    """Our model on its own handle of `graph` (the same index tensors, none of the derived graphs,
    transposes and plans of an earlier model), all of which are freed before PyG runs; in x's
    device and dtype."""
    own = Graph(graph.rowptr, graph.row, graph.col, graph.weight, graph.shape, cache=graph.cache)
    model = build(autosage_layers, model_name, *dims).to(device=x.device, dtype=x.dtype)
    model.load_state_dict(init_state)
    try:
        run = train(model, own, x, labels, steps, warmup)
        run.library, run.mode = "autosage", "graph"
        return run
    except (AutosageError, RuntimeError) as exc:
        return Run("autosage", "graph", status="failed", error=failure_text(exc))
    finally:
        del model, own
        free_memory()


def run_pyg(model_name: str, dims, inputs: dict, x, labels, init_state, steps: int, warmup: int) -> Run:
    """The first PyG mode that runs; a skipped Run with every mode's failure when none does."""
    import torch_geometric.nn as pyg

    failures = []
    for mode in PYG_MODES[model_name]:
        model = build(pyg, model_name, *dims, pyg_mode=mode).to(device=x.device, dtype=x.dtype)
        model.load_state_dict(init_state)
        try:
            run = train(model, inputs[mode], x, labels, steps, warmup)
            run.library, run.mode = "pyg", mode
            return run
        except (RuntimeError, ValueError) as exc:
            # a mode PyG cannot run here: out of memory or a sparse kernel torch lacks for this
            # dtype (both RuntimeError, the second a subclass), a layout it refuses (ValueError)
            failures.append(f"{mode}: {failure_text(exc)}")
        finally:
            del model
            free_memory()
    return Run("pyg", PYG_MODES[model_name][-1], status="skipped", error="; ".join(failures))


def require_torch_cuda() -> None:
    if not torch.cuda.is_available():
        raise AutosageError("torch sees no CUDA device (a CPU-only torch build?): the training "
                            "benchmark needs torch with CUDA")


def training_graph(csr: CSRGraph, device, cache=None) -> Graph:
    """The graph as a pattern (every edge weight 1) without self-loops: PyG's GCN adds loops with
    add_self_loops on a sparse adjacency but add_remaining_self_loops on an edge_index, two
    functions once a graph has loops of its own."""
    row = torch.repeat_interleave(torch.arange(csr.n_rows),
                                  torch.from_numpy(np.diff(csr.indptr).astype(np.int64)))
    col = torch.from_numpy(csr.indices).long()
    keep = row != col
    device = torch.device(device)
    return Graph.from_coo(row[keep].to(device), col[keep].to(device), None, csr.shape, cache=cache)


def pyg_inputs(graph: Graph, dtype: torch.dtype = torch.float32) -> dict:
    """PyG's graph input per mode: the adjacency as a torch sparse CSR tensor (rows = targets,
    PyG's adj_t) with values in `dtype`, and the edge_index (source, target)."""
    ones = torch.ones(graph.nnz, device=graph.device, dtype=dtype)
    adj_t = csr_tensor(graph.rowptr, graph.col, ones, graph.shape)   # without torch's beta warnings
    return {"sparse-csr": adj_t, "edge-index": torch.stack([graph.col, graph.row])}


def random_data(name: str, n_rows: int, device, seed: int, dtype: torch.dtype = torch.float32):
    """(features, labels) of a graph's nodes, random from `seed`: the features drawn in float32
    and rounded to `dtype`; their width and the class count are the graph's (FEATURES)."""
    n_in, n_out = FEATURES.get(name, OTHER_FEATURES)
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(n_rows, n_in, device=device, generator=gen).to(dtype)
    return x, torch.randint(0, n_out, (n_rows,), device=device, generator=gen)


def bench_graph(name: str, graph: Graph, models, *, steps: int, warmup: int, seed: int,
                dtype: torch.dtype = torch.float32):
    """Yield (model, ours, PyG) Runs for every model on one graph, same data and initial weights,
    everything in `dtype` (the features drawn in float32 and rounded, as the weights are)."""
    import torch_geometric.nn as pyg

    x, labels = random_data(name, graph.n_rows, graph.device, seed, dtype)
    n_in, n_out = FEATURES.get(name, OTHER_FEATURES)
    inputs = pyg_inputs(graph, dtype)
    for model_name in models:
        torch.manual_seed(seed)
        init_state = build(pyg, model_name, n_in, n_out).state_dict()
        ours = run_ours(model_name, (n_in, n_out), graph, x, labels, init_state, steps, warmup)
        theirs = run_pyg(model_name, (n_in, n_out), inputs, x, labels, init_state, steps, warmup)
        yield model_name, ours, theirs


def device_bytes(model: str, n_rows: int, nnz: int, n_in: int, n_out: int) -> int:
    """A rough estimate of our run's GPU memory (what a dry run shows): the graph with its
    transpose, edge-order maps and device copies (~60 bytes per edge), the features, activations
    and their gradients, and for the attention models the per-edge buffers their backward holds
    (about four nnz x H)."""
    hidden, heads = width(model)
    layers = 3 if model == "sage" else 2
    dense = n_rows * (n_in + 4 * layers * hidden + n_out) * 4
    edges = nnz * 60 + (4 * nnz * heads * 4 if heads > 1 else 0)
    return int(dense + edges)
