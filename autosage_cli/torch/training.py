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

Modes (MODES): ours trains eagerly ("graph"), as one captured CUDA graph per step ("captured":
autosage_cli.torch.capture, Adam with capturable=True) and under torch.compile(fullgraph=True)
("compiled"; "reduce-overhead": that mode of torch.compile, which replays the compiled graphs as
CUDA graphs); PyG eagerly in its best mode and under torch.compile in that mode, both compile
modes (graph breaks allowed; the reason is kept when it fails). Each mode starts from the same initial weights.
"""
from __future__ import annotations

import re

import torch
import torch.nn.functional as F

from ..errors import AutosageError
from . import nn as autosage_layers
from .cuda import capturable_plans
from .graph import Graph
from .training_data import FEATURES, OTHER_FEATURES, feature_dims, pyg_inputs, random_data, training_graph  # noqa: F401  (the suite's names)
from .training_runs import Run, Trainer, alternate, train  # noqa: F401  (the suite's names)
from .training_models import (CONTROL, EXTRA_MODELS, GAT_CHANNELS, GAT_HEADS, HIDDEN, MODELS, Net, build,  # noqa: F401
                              decision_width, spmm_widths, width)

LEARNING_RATE = 0.01
PYG_MODES = {"gcn": ("sparse-csr", "edge-index"), "sage": ("sparse-csr", "edge-index"),
             "gat": ("edge-index", "sparse-csr"), "transformer": ("edge-index", "sparse-csr")}


def adam(model: torch.nn.Module, capturable: bool = False) -> torch.optim.Adam:
    """The suites' optimizer, the same for every row of both libraries: Adam at LEARNING_RATE, in
    PyTorch's fused implementation where the parameters are on a GPU (one launch updates all of
    them; the foreach one launches several per step and, capturable, two more kernels per
    parameter for its bias corrections: 30% of a captured cora SAGE step on the H100).
    `capturable`: for a step replayed as a CUDA graph (its step counts stay on the device)."""
    on_gpu = next(model.parameters()).is_cuda
    return torch.optim.Adam(model.parameters(), lr=LEARNING_RATE, fused=True if on_gpu else None,
                            capturable=capturable)


def eager_step(model: Net, graph, x, labels, warmup: int):
    """One training step as PyTorch runs it: zero_grad, forward, cross-entropy, backward, Adam."""
    opt = adam(model)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x, graph), labels)
        loss.backward()
        opt.step()
        return loss
    return step


def captured_step(model: Net, graph, x, labels, warmup: int):
    """The same step captured in a CUDA graph (autosage_cli.torch.capture): warmup - 1 eager
    calls build every plan, the next captures and replays, all untimed; the timed epochs are
    replays on the captured inputs (nothing copied in). Adam is capturable (its step count on the
    device): the same arithmetic and implementation as the eager Adam."""
    from .capture import capture_training_step

    opt = adam(model, capturable=True)
    step = capture_training_step(lambda g, x_, y_: F.cross_entropy(model(x_, g), y_), opt, graph, x,
                                 labels, warmup=max(1, warmup - 1))
    return lambda: step(*step.static_inputs)


def forget_compiled() -> None:
    """Drop dynamo's compiled code (and what it references) before the next run."""
    torch._dynamo.reset()


# torch.compile's mode of each compiled row (schedule): the default (Inductor's kernels, the host
# runs the graph) and "reduce-overhead" (the compiled graphs also replayed as CUDA graphs)
COMPILE_MODES = {"compiled": None, "reduce-overhead": "reduce-overhead"}
# the modes that replay CUDA graphs, skipped (with this reason) off the GPU
CUDA_GRAPH_MODES = {"captured": "captured steps need a CUDA device",
                    "reduce-overhead": "torch.compile's reduce-overhead mode replays CUDA graphs: it needs a CUDA device"}


def compiled_step(model: Net, graph, x, labels, warmup: int, fullgraph: bool = False, mode: str | None = None):
    """The eager step with the model under torch.compile in `mode` (compiled in the first, untimed
    epochs; reduce-overhead records its CUDA graphs in the next ones).
    Dynamo is reset first: every model's forward is the same code object, and its cache of
    compiled variants is small. Ours compiles fullgraph after one eager forward, which builds the
    normalised graphs compile cannot trace (their construction has data-dependent shapes)."""
    forget_compiled()
    if mode == "reduce-overhead":
        # one eager forward and backward first (its gradients dropped): whatever a model keeps
        # between steps (our Graph's derived graphs, transposes and plans; PyG's cached adjacency)
        # is then made outside the CUDA-graph pool, where cudagraph trees would find it a live
        # allocation no output tracks and refuse to record (on the H200 without it: "Detected 9
        # tensor(s) in the cudagraph pool not tracked as outputs")
        # Inside capturable_plans, as a user of this mode would (the package docstring): where the
        # tuner chose cuSPARSE the plan is the kind's fastest verified native one, since CuPy
        # refuses cuSPARSE calls while torch records (on the H200 without it: "calling cuSPARSE
        # API during stream capture is currently unsupported" on four of the shipped graphs).
        with capturable_plans():
            F.cross_entropy(model(x, graph), labels).backward()
        model.zero_grad(set_to_none=True)
    elif fullgraph:
        with torch.no_grad():
            model(x, graph)
    return eager_step(torch.compile(model, fullgraph=fullgraph, mode=mode), graph, x, labels, warmup)


_ASKED = re.compile(r"Tried to allocate ([0-9.]+ ?[KMGTP]?i?B)")


def out_of_memory(exc: BaseException) -> bool:
    """torch's or CuPy's out-of-memory error (CuPy's is no torch type: its text says it)."""
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def failure_text(exc: BaseException) -> str:
    """One line: the exception's first line, and for running out of GPU memory how much was asked."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:240]
    asked = _ASKED.search(str(exc))
    if out_of_memory(exc):
        return "out of GPU memory" + (f" (asked for {asked.group(1)})" if asked else "") + f": {first}"
    return f"{type(exc).__name__}: {first}"


def free_memory() -> None:
    """Cached, unused device memory back to the driver: torch's, and CuPy's pool (our plans' and the
    tuner's buffers), so the run after this one starts with the GPU to itself."""
    if torch.cuda.is_available():
        from . import cuda

        torch.cuda.empty_cache()
        cuda.release_pool()


def _compiled(mode: str):
    return lambda *a: compiled_step(*a, fullgraph=True, mode=COMPILE_MODES[mode])


OUR_MODES = {"graph": eager_step, "captured": captured_step, **{m: _compiled(m) for m in COMPILE_MODES}}
MODES = tuple(OUR_MODES)     # the suite's modes: eager (PyG's best mode / our "graph"), captured, compiled ones


# The modes whose epochs are host time on a small graph: ours and the control's run in turns with
# each other and, for the models, with PyG's eager modes (training_runs.alternate), so the ratios
# between them do not move with the host's drift
ALTERNATED = ("graph", "compiled")
# what a library's failure to run in a mode is, and which exceptions are such failures: ours (and
# the control) record any; PyG's eager modes a mode it cannot run here (out of memory or a sparse
# kernel torch lacks for the dtype, both RuntimeError; a layout it refuses, ValueError)
FAILURES = {"autosage": ("failed", Exception), "torch": ("failed", Exception),
            "pyg": ("skipped", (RuntimeError, ValueError))}


def _loaded(lib, model_name: str, dims, x, init_state, pyg_mode: str | None = None) -> Net:
    """The model from `lib` (build) in x's device and dtype, with the run's initial weights."""
    model = build(lib, model_name, *dims, pyg_mode=pyg_mode).to(device=x.device, dtype=x.dtype)
    model.load_state_dict(init_state)
    return model


def _no_cuda_graph_here(library: str, mode: str, x) -> Run | None:
    """The skipped Run of a mode that replays CUDA graphs when x is not on a GPU, else None."""
    if mode in CUDA_GRAPH_MODES and x.device.type != "cuda":
        return Run(library, mode, status="skipped", error=CUDA_GRAPH_MODES[mode])
    return None


def _our_model(model_name: str, dims, graph: Graph, x, init_state, reordered=None):
    """(our model in x's device and dtype, its own handle of `graph`: the same index tensors, none
    of the derived graphs, transposes and plans of another model)."""
    own = Graph(graph.rowptr, graph.row, graph.col, graph.weight, graph.shape, cache=graph.cache)
    model = _loaded(autosage_layers, model_name, dims, x, init_state)
    if reordered is not None:
        from .reordered import Reordered

        model = Reordered(model, reordered)
    return model, own


def run_ours(model_name: str, dims, graph: Graph, x, labels, init_state, steps: int, warmup: int,
             mode: str = "graph", reordered=None) -> Run:
    """Our model alone on its own handle of `graph` (_our_model), freed before the next run.
    `mode`: graph (eager), captured (a CUDA graph; skipped off the GPU) or a compile mode.
    `reordered`: a torch.reordered.ReorderedGraph whose `graph` is `graph`: the model runs
    wrapped in `Reordered`, x and labels in the user's order."""
    skipped = _no_cuda_graph_here("autosage", mode, x)
    if skipped:
        return skipped
    model, own = _our_model(model_name, dims, graph, x, init_state, reordered)
    try:
        run = train(OUR_MODES[mode], model, own, x, labels, steps, warmup)
        run.library, run.mode = "autosage", mode
        if reordered is not None:
            run.reorder = reordered.method
        return run
    except Exception as exc:    # AutosageError, CUDA errors, and torch.compile's own exceptions
        return Run("autosage", mode, status="failed", error=failure_text(exc))
    finally:
        del model, own
        forget_compiled()
        free_memory()


def side_by_side(entries, x, labels, steps: int, warmup: int) -> list[Run]:
    """One Run per entry (run, make_step, make), make() -> (model, graph input): each is made and
    warmed up in turn, then their timed epochs alternate. One that fails is a Run of FAILURES'
    status for its library, with the reason, and leaves the others running (an exception that is
    no such failure propagates). One that runs out of memory beside the others trains again alone
    once they are freed, as every run did before runs took turns: a library is never reported out
    of memory for the memory another one holds. Every model is freed at the end."""
    runs, trainers, alone = [run for run, _, _ in entries], {}, []
    warm = min(warmup, steps)

    def failed(i: int, exc: BaseException) -> None:
        status, kinds = FAILURES[runs[i].library]
        if not isinstance(exc, kinds):
            raise exc
        if len(entries) > 1 and out_of_memory(exc):
            alone.append(i)
        runs[i] = Run(runs[i].library, runs[i].mode, status=status, error=failure_text(exc))
        trainers.pop(i, None)
        free_memory()

    try:
        for i, (run, make_step, make) in enumerate(entries):
            try:
                model, graph = make()
                trainers[i] = Trainer(make_step, model, graph, x, labels, warm, run=run)
            except Exception as exc:
                failed(i, exc)
            model = graph = None     # a model that failed is not held while the next one is made
        alternate(trainers, steps - warm, failed)
    finally:
        trainers.clear()
        forget_compiled()
        free_memory()
    for i in alone:
        _, make_step, make = entries[i]
        runs[i] = side_by_side([(Run(runs[i].library, runs[i].mode), make_step, make)], x, labels, steps, warmup)[0]
    return runs


def run_side_by_side(model_name: str, dims, graph: Graph, inputs: dict, x, labels, init_state,
                     steps: int, warmup: int, modes=MODES) -> tuple[dict, list[Run]]:
    """Our model in each ALTERNATED mode of `modes` and PyG's in each of its eager modes (PYG_MODES:
    the sparse CSR adjacency and edge_index message passing; which is faster depends on the graph
    and the model, so the baseline is the fastest that ran), timed in turns
    (side_by_side). Returns (our Runs by mode, PyG's Runs in PYG_MODES order)."""
    import torch_geometric.nn as pyg

    def ours(mode):
        return Run("autosage", mode), OUR_MODES[mode], lambda: _our_model(model_name, dims, graph, x, init_state)

    def theirs(mode):
        return Run("pyg", mode), eager_step, lambda: (_loaded(pyg, model_name, dims, x, init_state, mode), inputs[mode])

    our_modes = [m for m in ALTERNATED if m in modes]
    runs = side_by_side([ours(m) for m in our_modes] + [theirs(m) for m in PYG_MODES[model_name]],
                        x, labels, steps, warmup)
    return dict(zip(our_modes, runs)), runs[len(our_modes):]


def run_pyg_compiled(model_name: str, dims, inputs: dict, eager: Run, x, labels, init_state,
                     steps: int, warmup: int, mode: str = "compiled") -> Run:
    """PyG's model under torch.compile in `mode` (a COMPILE_MODES row; graph breaks allowed, PyG's
    own way) on the input its eager run took; skipped, with the reason, where the eager run did not
    run or compiling fails."""
    import torch_geometric.nn as pyg

    if eager.status != "ok":
        return Run("pyg", mode, status="skipped", error="PyG ran in no mode eagerly")
    skipped = _no_cuda_graph_here("pyg", mode, x)
    if skipped:
        return skipped
    model = _loaded(pyg, model_name, dims, x, init_state, eager.mode)
    try:
        step = lambda *a: compiled_step(*a, mode=COMPILE_MODES[mode])   # noqa: E731
        run = train(step, model, inputs[eager.mode], x, labels, steps, warmup)
        run.library, run.mode = "pyg", mode
        return run
    except Exception as exc:    # dynamo and inductor raise many kinds: each is a reason to record
        return Run("pyg", mode, status="skipped", error=f"torch.compile ({eager.mode}): {failure_text(exc)}")
    finally:
        del model
        forget_compiled()
        free_memory()


def run_pyg_compiled_fastest(model_name: str, dims, inputs: dict, eager_runs: list[Run], x, labels, init_state,
                             steps: int, warmup: int, mode: str = "compiled") -> Run:
    """PyG under torch.compile in `mode` on its eager modes' inputs, fastest eager mode first, until
    one compiles and runs: that Run. torch.compile of PyG's sparse-CSR GCN fails in dynamo (torch
    2.11: an IndexError inside it) where its edge_index GCN compiles, and a baseline that stops at
    the first failure would leave PyG's fastest compiled step out. When none runs, a skipped Run
    with every mode's reason."""
    ran = sorted((r for r in eager_runs if r.status == "ok" and r.times_ms), key=lambda r: r.stats()[0])
    reasons = []
    for eager in ran or eager_runs[:1]:
        run = run_pyg_compiled(model_name, dims, inputs, eager, x, labels, init_state, steps, warmup, mode=mode)
        if run.status == "ok":
            return run
        reasons.append(run.error)
    return Run("pyg", mode, status="skipped", error="; ".join(dict.fromkeys(reasons)))   # each reason once


def run_control(dims, x, labels, steps: int, warmup: int, modes=MODES, seed: int = 0) -> list[Run]:
    """The graph-free control (CONTROL, torch alone; library "torch") eagerly and under each
    compile mode of `modes`, from one initial state (drawn from `seed`, as the models' are): what
    torch.compile does to a step of this size (dims: GCN's input and class counts) when no graph
    op is in it. Its ALTERNATED modes run in turns (side_by_side), as the models' do."""
    torch.manual_seed(seed)
    init_state = build(torch.nn, CONTROL, *dims).state_dict()

    def make():
        return _loaded(torch.nn, CONTROL, dims, x, init_state), None

    wanted = ("graph", *(m for m in COMPILE_MODES if m in modes))
    together = [m for m in wanted if m in ALTERNATED]
    runs = dict(zip(together, side_by_side([(Run("torch", m), OUR_MODES[m], make) for m in together],
                                           x, labels, steps, warmup)))
    for mode in wanted:
        if mode not in runs:
            runs[mode] = (_no_cuda_graph_here("torch", mode, x)
                          or side_by_side([(Run("torch", mode), OUR_MODES[mode], make)], x, labels, steps, warmup)[0])
    return [runs[m] for m in wanted]


def require_torch_cuda() -> None:
    if not torch.cuda.is_available():
        raise AutosageError("torch sees no CUDA device (a CPU-only torch build?): the training "
                            "benchmark needs torch with CUDA")


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def bench_graph(name: str, graph: Graph, models, *, steps: int, warmup: int, seed: int,
                dtype: torch.dtype = torch.float32, modes=MODES, reorderings=()):
    """Yield (model, PyG's Runs, our Runs) for every model on one graph, same data and initial
    weights, everything in `dtype` (the features drawn in float32 and rounded, as the weights are).
    PyG's: every eager mode, then torch.compile of the fastest that compiles (run_pyg_compiled_fastest)
    in each COMPILE_MODES row in `modes`; ours: one
    Run per mode, in MODES order (the ALTERNATED ones timed in turns with PyG's eager modes), then one eager Run per ReorderedGraph of `reorderings` (the same
    features and labels, in the user's order; the Run's reorder_s is the graph's `cost_s`). Last,
    where `modes` has a compile mode, (CONTROL, [], the control's Runs: run_control)."""
    import torch_geometric.nn as pyg

    x, labels = random_data(name, graph.n_rows, graph.device, seed, dtype)
    n_in, n_out = feature_dims(name)
    inputs = pyg_inputs(graph, dtype)
    for model_name in models:
        torch.manual_seed(seed)
        init_state = build(pyg, model_name, n_in, n_out).state_dict()
        args = (x, labels, init_state, steps, warmup)
        alternated, theirs = run_side_by_side(model_name, (n_in, n_out), graph, inputs, *args, modes)
        ours = [alternated[m] if m in alternated else run_ours(model_name, (n_in, n_out), graph, *args, mode=m)
                for m in MODES if m in modes]
        for rg in reorderings:
            run = run_ours(model_name, (n_in, n_out), rg.graph, *args, reordered=rg)
            run.reorder, run.reorder_s = rg.method, rg.cost_s
            ours.append(run)
        theirs += [run_pyg_compiled_fastest(model_name, (n_in, n_out), inputs, list(theirs), *args, mode=m)
                   for m in COMPILE_MODES if m in modes]
        yield model_name, theirs, ours
    if any(m in COMPILE_MODES for m in modes):
        yield CONTROL, [], run_control((n_in, n_out), x, labels, steps, warmup, modes, seed)


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
