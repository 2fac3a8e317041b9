"""Mini-batch training steps: autosage's layers against the same model in PyG, on sampled subgraphs.

The models, their widths, the random features and labels and the initial weights (PyG's, loaded
into ours) are the full-graph benchmark's (autosage_cli.torch.training): GraphSAGE-mean 3 layers,
GCN 2 layers, GAT 8 heads x 8 then 1 head. Per graph, `steps` batches are sampled once, before
anything is timed (autosage_cli.torch.sampler: `batch_size` seeds, uniform with replacement at
`fanouts`), and replayed in the same order for every library, so both train on the same subgraphs.
Repeated edges (draws with replacement) stay in every model's batches: both libraries count each
listing, in SAGE's mean, GCN's degrees and the attention softmax.

A step is: build the library's graph input from the batch's edge_index, forward on the batch's
nodes, cross-entropy on the seeds' outputs (the first batch_size), backward, Adam (lr 0.01). It is
timed by the wall clock between two device synchronisations, so the host work of a step (building
and planning a new Graph, PyG's per-batch index work, any tuning autosage does) counts as the user
pays it. Gathering the batch's features and labels is done before the clock starts (the same for
both libraries; a data loader's work, as is sampling).

  autosage   `Graph.from_edge_index(edge_index, num_nodes=n)` inside the step (mode `graph`), and
             the step captured per batch size (`captured`: torch/batch_capture.py; the batch's
             Graph is built inside the CUDA graph, on the batch padded to its capacity).
  PyG        its layers on the edge_index (`edge-index`), and for GCN and SAGE also on a torch
             sparse CSR adjacency built inside the step from the edge_index (`sparse-csr`; the
             repeated edges kept as entries, so SAGE's mean counts them as the edge_index does).

Per run: every step's loss, the median (p20, p80) of steps warmup+1..steps, the first step's time,
`floor_ms` (the last batch stepped FLOOR_STEPS times more on the input its last step built: the
step without the per-batch build and planning; median) and, for autosage, the tuning probes it ran
over the `steps` steps (`autosage_cli.torch.probe_count()` before and after).
"""
from __future__ import annotations

import importlib
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from ..backends.torch_sparse import csr_tensor
from ..errors import AutosageError
from . import nn as autosage_layers
from .graph import Graph
from .sampler import NeighborSampler, seed_batches
from .training import Run, adam, build, failure_text, feature_dims, free_memory, random_data

MODELS = ("sage", "gcn", "gat")
STEPS, BATCH_SIZE, FANOUTS = 50, 1024, (15, 10, 5)
WARMUP = 5           # steps not in ms_median: the first tunes, kernel builds and caches happen there
FLOOR_STEPS = 5      # the last batch stepped again on its built input
OUR_MODES = ("graph", "captured")
PYG_MODES = {"sage": ("sparse-csr", "edge-index"), "gcn": ("sparse-csr", "edge-index"),
             "gat": ("edge-index",)}


@dataclass
class StepRun(Run):
    """A training Run (times_ms: the timed steps; setup_ms: the untimed first steps' wall time)
    with the mini-batch columns."""
    first_step_ms: float = math.nan
    floor_ms: float = math.nan
    probes: int = 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(device: torch.device, work):
    """(work(), its wall time in ms between two synchronisations of the device)."""
    _sync(device)
    t0 = time.perf_counter()
    result = work()
    _sync(device)
    return result, (time.perf_counter() - t0) * 1e3


def sample_batches(graph: Graph, steps: int, batch_size: int, fanouts, seed: int):
    """(batches, each batch's sampling time in ms): `steps` batches from a sampler seeded with
    `seed` on the graph's device."""
    device = graph.device
    gen = torch.Generator(device=device).manual_seed(seed)
    sampler = NeighborSampler(graph.rowptr, graph.col, fanouts, gen)
    batches, times = [], []
    for seeds in seed_batches(graph.n_rows, batch_size, steps, gen, device):
        batch, ms = _timed(device, lambda: sampler.sample(seeds))
        batches.append(batch)
        times.append(ms)
    return batches, times


def pyg_adjacency(edge_index: torch.Tensor, num_nodes: int, dtype: torch.dtype) -> torch.Tensor:
    """PyG's adj_t as a torch sparse CSR tensor (row i: the sources of the edges into i), one
    entry per listed edge: repeats stay entries (PyG's to_torch_csr_tensor would merge them and
    change SAGE's mean)."""
    source, target = edge_index
    order = torch.sort(target * num_nodes + source, stable=True).indices
    counts = torch.bincount(target, minlength=num_nodes)
    crow = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    ones = torch.ones(order.numel(), dtype=dtype, device=edge_index.device)
    return csr_tensor(crow, source[order], ones, (num_nodes, num_nodes))


def input_maker(mode: str, dtype: torch.dtype, cache=None):
    """batch -> the graph input a library's model takes in `mode` (built inside the timed step)."""
    if mode == "graph":
        return lambda b: Graph.from_edge_index(b.edge_index, num_nodes=b.num_nodes, cache=cache)
    if mode == "sparse-csr":
        return lambda b: pyg_adjacency(b.edge_index, b.num_nodes, dtype)
    if mode == "edge-index":
        return lambda b: b.edge_index
    raise AutosageError(f"unknown graph input mode {mode!r}")


def _probe_count() -> int:
    # read through the package, where the tuner's counter is exported (tests set it there)
    return int(importlib.import_module(__package__).probe_count())


def train_steps(model, batches, x, labels, make_input, warmup: int = WARMUP,
                floor_steps: int = FLOOR_STEPS) -> StepRun:
    """Train `model` one step per batch (see the module's docstring); the timing of a StepRun."""
    opt = adam(model)

    def step(batch, xb, yb, graph_input=None):
        g = make_input(batch) if graph_input is None else graph_input
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(xb, g)[:batch.batch_size], yb)
        loss.backward()
        opt.step()
        return g, loss

    return timed_steps(step, batches, x, labels, warmup, floor_steps)


def captured_steps(model, batches, x, labels, cache=None, warmup: int = WARMUP,
                   floor_steps: int = FLOOR_STEPS) -> StepRun:
    """The same steps through a captured mini-batch step (torch/batch_capture.py: one CUDA graph
    per batch size, the Graph build inside it; Adam with capturable=True, the same algorithm and
    implementation)."""
    from .batch_capture import capture_batch_step

    opt = adam(model, capturable=True)

    def loss_fn(graph, xb, yb):
        return F.cross_entropy(model(xb, graph)[:yb.numel()], yb)

    captured = capture_batch_step(loss_fn, opt, cache=cache)

    def step(batch, xb, yb, graph_input=None):
        return batch, captured(batch.edge_index, xb, yb)

    run = timed_steps(step, batches, x, labels, warmup, floor_steps)
    captured.check()
    if captured.reason:
        run.error = captured.reason      # ran eagerly on its static graphs where a capture failed
    return run


def timed_steps(step, batches, x, labels, warmup: int = WARMUP, floor_steps: int = FLOOR_STEPS) -> StepRun:
    """`step(batch, x_b, y_b, graph_input=None) -> (graph input, loss)` once per batch, each timed
    (see the module's docstring), then the last batch `floor_steps` times on its graph input."""
    run = StepRun("", setup_ms=0.0)
    device = x.device
    probes = _probe_count()
    for i, batch in enumerate(batches):
        xb, yb = x[batch.n_id], labels[batch.n_id[:batch.batch_size]]
        (graph_input, loss), ms = _timed(device, lambda: step(batch, xb, yb))
        run.losses.append(loss.item())
        if i == 0:
            run.first_step_ms = ms
        if i < warmup:
            run.setup_ms += ms
        else:
            run.times_ms.append(ms)
    run.probes = _probe_count() - probes
    if batches and floor_steps:
        run.floor_ms = statistics.median(_timed(device, lambda: step(batch, xb, yb, graph_input))[1]
                                         for _ in range(floor_steps))
    return run


def run_ours(model_name: str, dims, batches, x, labels, init_state, cache=None,
             warmup: int = WARMUP, mode: str = "graph") -> StepRun:
    """Our model from `init_state`, a Graph built per batch (mode `graph`), or the captured step
    (`captured`, on a GPU: a skipped StepRun elsewhere); a failed StepRun says why."""
    if mode == "captured" and x.device.type != "cuda":
        return StepRun("autosage", mode, status="skipped", error="a captured step needs a CUDA GPU")
    model = build(autosage_layers, model_name, *dims).to(device=x.device, dtype=x.dtype)
    model.load_state_dict(init_state)
    try:
        if mode == "captured":
            run = captured_steps(model, batches, x, labels, cache, warmup)
        else:
            run = train_steps(model, batches, x, labels, input_maker(mode, x.dtype, cache), warmup)
        run.library, run.mode = "autosage", mode
        return run
    except (AutosageError, RuntimeError) as exc:
        return StepRun("autosage", mode, status="failed", error=failure_text(exc))
    finally:
        del model
        free_memory()


def run_pyg(model_name: str, mode: str, dims, batches, x, labels, init_state,
            warmup: int = WARMUP) -> StepRun:
    """PyG's model in one graph input mode; a skipped StepRun with the reason when it cannot run
    (running out of memory says how much it asked for)."""
    import torch_geometric.nn as pyg

    model = build(pyg, model_name, *dims).to(device=x.device, dtype=x.dtype)   # never cached
    model.load_state_dict(init_state)
    try:
        run = train_steps(model, batches, x, labels, input_maker(mode, x.dtype), warmup)
        run.library, run.mode = "pyg", mode
        return run
    except (RuntimeError, ValueError) as exc:
        # out of memory, a sparse kernel torch lacks for this dtype, a layout PyG refuses
        return StepRun("pyg", mode, status="skipped", error=failure_text(exc))
    finally:
        del model
        free_memory()


def bench_graph(name: str, graph: Graph, models, *, steps: int = STEPS, batch_size: int = BATCH_SIZE,
                fanouts=FANOUTS, seed: int = 0, dtype: torch.dtype = torch.float32, cache=None,
                warmup: int = WARMUP):
    """Yield (model, sample_ms, our StepRuns (OUR_MODES), PyG's StepRuns) per model on one graph: the same
    batches, features, labels and initial weights for every run; sample_ms the median time to
    sample one of the batches that model trains on."""
    import torch_geometric.nn as pyg

    x, labels = random_data(name, graph.n_rows, graph.device, seed, dtype)
    dims = feature_dims(name)
    batches, sample_ms = sample_batches(graph, steps, batch_size, fanouts, seed)
    for model_name in models:
        torch.manual_seed(seed)
        init_state = build(pyg, model_name, *dims).state_dict()
        ours = [run_ours(model_name, dims, batches, x, labels, init_state, mode_cache(cache, mode), warmup, mode)
                for mode in OUR_MODES]
        theirs = [run_pyg(model_name, mode, dims, batches, x, labels, init_state, warmup)
                  for mode in PYG_MODES[model_name]]
        yield model_name, statistics.median(sample_ms), ours, theirs


def mode_cache(cache, mode: str):
    """The decision cache file of one of our modes: the first mode's is `cache`, each later mode's
    a sibling of its own (decisions.json -> decisions.captured.json), so that every mode's first
    step starts without decisions, as it would for a user of that mode alone, instead of finding
    the kinds the earlier mode tuned. None stays None (the package's default cache)."""
    if cache is None or mode == OUR_MODES[0]:
        return cache
    path = Path(cache)
    return str(path.with_name(f"{path.stem}.{mode}{path.suffix}"))


def device_bytes(model: str, n_rows: int, nnz: int, n_in: int, n_out: int, steps: int = STEPS,
                 batch_size: int = BATCH_SIZE, fanouts=FANOUTS) -> int:
    """A rough upper bound on the run's GPU memory (what a dry run shows): the full graph's CSR
    and features, the sampled batches (at most batch_size * prod(fanouts) nodes and edges per
    hop, capped at the graph), and one batch's activations and gradients."""
    from .training import width

    hidden, heads = width(model)
    layer_nodes, edges = batch_size, 0
    for f in fanouts:
        layer_nodes *= f
        edges += min(layer_nodes, nnz)
    nodes = min(n_rows, batch_size + edges)
    batches = steps * (edges * 16 + nodes * 8)
    step = nodes * (n_in + 6 * hidden + n_out) * 4 + edges * (40 + 16 * heads)
    return int(n_rows * (n_in * 4 + 16) + nnz * 16 + batches + step)
