"""`autosage bench --suite minibatch`: mini-batch training steps on sampled subgraphs, autosage's
layers against the same models in PyG, side by side in one process (autosage_cli.torch.minibatch
runs them; autosage_cli.torch.sampler samples), written to a results directory in the results
schema.

Rows: one per (graph, model, library, graph input); op `minibatch-sage`, `minibatch-gcn` or
`minibatch-gat`, k the hidden width (64 = 8 heads x 8 for GAT), heads, backend `autosage` or `pyg`,
schedule the graph input (`graph` for ours, and `captured` for our captured step, which
builds the graph inside its CUDA graph: skipped off a GPU; PyG's `sparse-csr` and `edge-index` for GCN and SAGE,
`edge-index` for GAT: one row each). ms_median/p20/p80: the step time over steps 6..--steps;
first_step_ms: step 1; prepare_ms: the wall time of steps 1-5; floor_ms: the last batch stepped
again on its already built (and planned) input, median; probes: the tuning probes autosage ran over
the steps (0 for PyG); loss_first/loss_last: each library's first and last loss; sample_ms: a
column of its own, on every row of the model, the median time to sample one of the batches
(outside every step time; the batches are sampled once and replayed for every library). Ours
carries PyG's fastest mode's median as its baseline (best_vendor `pyg`, best_vendor_ms,
speedup_vs_best_vendor) and, as rel_error, the relative difference of the two libraries' last
losses (PyG's fastest mode). A PyG mode that cannot run (out of memory) is a `skipped` row whose
error says why and how much memory it asked for. `--dtypes` as in the training suite. The kernel
options (--widths, --heads, --oracle, ...) and --repeat (use --steps) are refused.
"""
from __future__ import annotations

from pathlib import Path

from .. import dtypes as dtype_table
from ..bench.rows import Row
from ..bench.suites import MINIBATCH as SUITE
from ..bench.targets import MINIBATCH_PREFIX
from ..errors import AutosageError
from .bench_training import (KERNEL_OPTIONS, check_common, execute, run_models, run_row, set_baseline,
                             show_plan)

OP_PREFIX = MINIBATCH_PREFIX
REFUSED = KERNEL_OPTIONS + ("repeat",)


def parse_models(text: str | None) -> tuple[str, ...]:
    """--ops for this suite: models, as `sage` or `minibatch-sage`, comma-separated (default all)."""
    from ..torch.minibatch import MODELS

    if text is None:
        return MODELS
    models = tuple(dict.fromkeys(p.strip().removeprefix(OP_PREFIX) for p in text.split(",")))
    for m in models:
        if m not in MODELS:
            raise AutosageError(f"unknown model {m!r} in --ops for --suite minibatch; choose from "
                                f"{', '.join(OP_PREFIX + x for x in MODELS)}")
    return models


def parse_fanouts(text: str | None) -> tuple[int, ...]:
    """"15,10,5" -> (15, 10, 5): one fanout per hop, in order (repeats are hops, not duplicates)."""
    from ..torch.minibatch import FANOUTS

    if text is None:
        return FANOUTS
    try:
        fanouts = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise AutosageError(f"--fanouts must be a comma-separated list of integers, got {text!r}") from None
    if min(fanouts) < 1:
        raise AutosageError(f"--fanouts must be >= 1 per hop, got {text!r}")
    return fanouts


def check_options(params: dict) -> tuple[tuple[str, ...], dict, list, tuple[str, ...]]:
    """(models, settings {steps, batch_size, fanouts}, graph specs, dtypes) from the bench options;
    AutosageError on anything that does not apply to this suite or is missing (torch, PyG)."""
    if params.get("repeat") is not None:
        raise AutosageError("--repeat does not apply to --suite minibatch: --steps sets the steps")
    specs, names = check_common(params, SUITE, REFUSED)   # torch and PyG first: the import below needs them
    from ..torch.minibatch import BATCH_SIZE, STEPS, WARMUP

    steps = STEPS if params.get("steps") is None else params["steps"]
    if steps <= WARMUP:
        raise AutosageError(f"--steps counts training steps, the first {WARMUP} not in ms_median: "
                            f"it must be > {WARMUP}, got {steps}")
    batch_size = BATCH_SIZE if params.get("batch_size") is None else params["batch_size"]
    if batch_size < 1:
        raise AutosageError(f"--batch-size must be >= 1, got {batch_size}")
    settings = {"steps": steps, "batch_size": batch_size, "fanouts": parse_fanouts(params.get("fanouts"))}
    return parse_models(params.get("ops")), settings, specs, names


def _rows_of(spec, graph, model: str, sample_ms: float, ours, theirs, stamp: dict,
             dtype: str = "float32") -> list[Row]:
    from ..torch.training import width

    k, heads = width(model)
    base = dict(graph=spec.label, n_rows=graph.n_rows, n_cols=graph.n_cols, nnz=graph.nnz,
                op=f"{OP_PREFIX}{model}", k=k, heads=heads, dtype=dtype, **stamp)
    pyg = [run_row(base, run, first_step_ms=run.first_step_ms, floor_ms=run.floor_ms,
                   probes=run.probes, sample_ms=sample_ms) for run in theirs]
    mine = [run_row(base, run, first_step_ms=run.first_step_ms, floor_ms=run.floor_ms,
                    probes=run.probes, sample_ms=sample_ms) for run in ours]
    for row in mine:
        set_baseline(row, pyg)
    return pyg + mine


def run(params: dict, command: str, default_out, prior_run, render) -> None:
    """The suite, from the bench command's options (as bench_training.run takes them)."""
    from ..torch import minibatch

    models, settings, specs, names = check_options(params)

    def device_bytes(m, n, nnz, n_in, n_out):
        return minibatch.device_bytes(m, n, nnz, n_in, n_out, **settings)

    execute(params, command, (default_out, prior_run, render), SUITE,
            {**settings, "fanouts": list(settings["fanouts"])},
            lambda: show_plan(specs, models, params, names, SUITE, OP_PREFIX, device_bytes),
            lambda stamp, out, old_rows: run_graphs(specs, models, settings, {**params, "dtypes": names},
                                                    stamp, out, old_rows))


def run_graphs(specs, models, settings: dict, params: dict, stamp: dict, out: Path, old_rows,
               device: str = "cuda") -> list[Row]:
    """Every model on every graph in every dtype of params["dtypes"], rows written to results.csv
    after each model (`device` cpu: a smoke run of the same path, for tests)."""
    from ..torch import minibatch

    def bench(spec, graph, dtype, reorderings=()):   # --reorder is refused for this suite
        return minibatch.bench_graph(spec.label, graph, models, seed=params["seed"], dtype=dtype,
                                     cache=params.get("cache_path"), **settings)

    return run_models(specs, params, out, old_rows, device, bench,
                      lambda spec, graph, result, name: _rows_of(spec, graph, *result, stamp, name),
                      _progress_line)


def _progress_line(rows: list[Row]) -> str:
    pyg = [r for r in rows if r.backend != "autosage"]
    mine = next(r for r in rows if r.backend == "autosage" and r.schedule == "graph")
    captured = [r for r in rows if r.backend == "autosage" and r.schedule == "captured"]
    kind = "" if mine.dtype == dtype_table.DEFAULT else f" {mine.dtype}"
    what = (f"  {mine.graph} {mine.op}{kind}: ours {mine.ms_median:.1f} ms/step (floor {mine.floor_ms:.1f}, "
            f"first {mine.first_step_ms:.0f}, {mine.probes} probes) [{mine.status}{': ' + mine.error if mine.error else ''}]"
            f"; sampling {mine.sample_ms:.1f} ms/batch")
    for r in pyg:
        what += (f"; PyG {r.schedule} {r.ms_median:.1f} ms" if r.status == "ok"
                 else f"; PyG {r.schedule} {r.status}: {r.error}")
    if mine.best_vendor:
        what += f" -> {mine.speedup_vs_best_vendor:.2f}x; last loss rel diff {mine.rel_error:.1e}"
    for r in captured:
        what += (f"; ours captured {r.ms_median:.1f} ms/step (first {r.first_step_ms:.0f})"
                 + (f" -> {r.speedup_vs_best_vendor:.2f}x, loss rel diff {r.rel_error:.1e}" if r.best_vendor else "")
                 if r.status == "ok" else f"; ours captured {r.status}: {r.error}")
    return what
