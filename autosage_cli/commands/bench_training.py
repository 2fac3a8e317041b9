"""`autosage bench --suite training`: full-graph training epochs of GNN models built from
autosage's layers against the same models in PyG, side by side in one process
(autosage_cli.torch.training runs them), written to a results directory in the results schema.

Rows: one per (graph, model, library, mode); op `train-gcn`, `train-sage` or `train-gat`, k the
hidden width (64 = 8 heads x 8 for GAT), heads, backend `autosage` or `pyg`, schedule the mode:
ours `graph` (eager), `captured` (the whole step one CUDA graph, autosage_cli.torch.capture) and
`compiled` (torch.compile, fullgraph) and `reduce-overhead` (torch.compile in that mode: its graphs
replayed as CUDA graphs); PyG's eager modes (`sparse-csr` and `edge-index`: which is faster depends
on the graph and the model), `compiled` and `reduce-overhead` (torch.compile of the faster eager
mode; a `skipped` row with the reason when it fails); with a compile mode, the graph-free control
(`train-mlp`, backend `torch`: two linear maps of GCN's widths, torch alone) in `graph` (eager)
and each compile mode, which shows torch.compile's own cost on a step this small. Our eager row's
baseline is PyG's fastest eager row, the other rows' the fastest PyG row (best_vendor `pyg`,
`pyg-compiled` or `pyg-reduce-overhead`). ms_median/p20/p80 the epoch time over
the timed epochs, prepare_ms the wall time of the warm-up epochs (tuning, kernel builds, PyG's
caches). Ours carries the baseline's median (best_vendor, best_vendor_ms,
speedup_vs_best_vendor) and, as rel_error, the relative difference of the two last losses.
loss_first and loss_last are each library's losses at its first and last step. A PyG run that
cannot run (out of memory) is a `skipped` row whose error says why and how much memory it asked
for. `--dtypes` (default float32) runs every model once per type, both libraries' models,
parameters and features in it (the `dtype` column). The kernel options (--widths, --heads,
--oracle, ...) do not apply and are refused.
"""
from __future__ import annotations

import importlib.util
import math
import time
from pathlib import Path

import click

from .. import dtypes as dtype_table
from ..bench import report
from ..bench.rows import AMORTISE_EPOCHS, Row, speedup
from ..bench.suites import AUTO_REORDER, TRAINING as SUITE, parse_reorder, resolve_graph
from ..bench.compile_targets import COMPILED_MODES
from ..capability import require_gpu
from ..environment import environment, now_iso
from ..errors import AutosageError

GRAPHS = ("reddit-like", "products-like")
DEFAULT_STEPS = 10     # epochs per model and library; the loss of the last one is compared
WARMUP = 2             # of them, not timed
KERNEL_OPTIONS = ("widths", "heads", "flush_l2", "oracle", "all_schedules", "exhaustive", "top_k",
                  "budget_ms", "guardrail")


def parse_models(text: str | None) -> tuple[str, ...]:
    """--ops for this suite: models, as `gcn` or `train-gcn`, comma-separated (default: the suite's
    three; `transformer` runs when named)."""
    from ..torch.training import EXTRA_MODELS, MODELS

    if text is None:
        return MODELS
    models = tuple(dict.fromkeys(p.strip().removeprefix("train-") for p in text.split(",")))
    for m in models:
        if m not in MODELS + EXTRA_MODELS:
            raise AutosageError(f"unknown model {m!r} in --ops for --suite training; choose from "
                                f"{', '.join('train-' + x for x in MODELS + EXTRA_MODELS)}")
    return models


def check_common(params: dict, suite: str, refused=KERNEL_OPTIONS) -> tuple[list, tuple[str, ...]]:
    """(graph specs, dtypes) of a training suite (`suite`: its name) from the bench options;
    AutosageError on an option in `refused` or on a missing library (torch, PyG)."""
    for name in refused:
        if params.get(name) not in (None, False, ()):
            raise AutosageError(f"--{name.replace('_', '-')} does not apply to --suite {suite}")
    missing = [m for m in ("torch", "torch_geometric") if importlib.util.find_spec(m) is None]
    if missing:
        raise AutosageError(f"--suite {suite} needs torch and torch_geometric ({missing[0]} is not "
                            "installed): pip install torch torch_geometric")
    specs = [resolve_graph(name) for name in (params.get("datasets") or GRAPHS)]
    listed = params.get("dtype_list")
    return specs, dtype_table.parse_list(listed) if listed is not None else (dtype_table.DEFAULT,)


def check_options(params: dict) -> tuple[tuple[str, ...], int, list, tuple[str, ...]]:
    """(models, steps, graph specs, dtypes) from the bench options; AutosageError on anything that
    does not apply to this suite or is missing (torch, PyG)."""
    specs, names = check_common(params, SUITE)
    steps = DEFAULT_STEPS if params.get("repeat") is None else params["repeat"]
    if steps <= WARMUP:
        raise AutosageError(f"--repeat for --suite training counts epochs, {WARMUP} of them untimed: "
                            f"it must be > {WARMUP}, got {steps}")
    return parse_models(params.get("ops")), steps, specs, names


def parse_modes(text: str | None) -> tuple[str, ...]:
    """Our training modes of --modes (training.MODES; "eager" names "graph", as the rows do not),
    in the suite's order; all of them for None."""
    from ..torch.training import MODES

    if text is None:
        return MODES
    asked = {"graph" if m.strip() == "eager" else m.strip() for m in text.split(",") if m.strip()}
    unknown = sorted(asked - set(MODES))
    if unknown or not asked:
        raise AutosageError(f"--modes: unknown mode {unknown[0]!r} (choose from eager, {', '.join(MODES[1:])})"
                            if unknown else "--modes: name at least one mode")
    return tuple(m for m in MODES if m in asked)


def run_row(base: dict, run, **extra) -> Row:
    """The row of one library's Run (a training.Run): its times, status and losses."""
    med, p20, p80 = run.stats()
    return Row(**base, backend=run.library, schedule=run.mode,
               decision="probe" if run.library == "autosage" else "fixed",
               ms_median=med, ms_p20=p20, ms_p80=p80, prepare_ms=run.setup_ms,
               status=run.status, error=run.error, repeats=len(run.times_ms),
               loss_first=run.losses[0] if run.losses else math.nan,
               loss_last=run.losses[-1] if run.losses else math.nan, **extra)


def set_baseline(mine: Row, pyg_rows: list[Row]) -> None:
    """Our row against PyG's fastest row that ran: best_vendor `pyg`, its median and our speed-up,
    and the relative difference of the two last losses as rel_error."""
    timed = [r for r in pyg_rows if r.status == "ok" and math.isfinite(r.ms_median)]
    if not timed:
        return
    best = min(timed, key=lambda r: r.ms_median)
    mine.best_vendor, mine.best_vendor_ms = "pyg", best.ms_median
    mine.speedup_vs_best_vendor = speedup(best.ms_median, mine.ms_median)
    if math.isfinite(mine.loss_last) and best.loss_last:
        mine.rel_error = abs(mine.loss_last - best.loss_last) / abs(best.loss_last)


def amortise(our_rows: list[Row]) -> None:
    """Each reordered row's epoch with its reordering's cost spread over AMORTISE_EPOCHS epochs,
    and our eager epoch on the user's order over that."""
    user = next((r for r in our_rows if r.schedule == "graph" and not r.reorder), None)
    for r in our_rows:
        if r.reorder and _timed(r) and math.isfinite(r.reorder_s):
            r.amortised_ms = r.ms_median + r.reorder_s * 1e3 / AMORTISE_EPOCHS
            if _timed(user):
                r.speedup_vs_user_order = speedup(user.ms_median, r.amortised_ms)


def pyg_eager(rows: list[Row]) -> Row:
    """PyG's eager baseline among a model's rows: its fastest eager mode that ran, else its first
    eager row (skipped, with the reason)."""
    eager = [r for r in rows if r.backend == "pyg" and r.schedule not in COMPILED_MODES]
    return min((r for r in eager if _timed(r)), key=lambda r: r.ms_median, default=eager[0])


def _timed(row: Row | None) -> bool:
    return row is not None and row.status == "ok" and math.isfinite(row.ms_median)


def _rows_of(spec, graph, model: str, theirs: list, ours: list, stamp: dict,
             dtype: str = "float32") -> list[Row]:
    """PyG's rows (each eager mode, then `compiled` and `reduce-overhead`), then ours (one per
    mode). Our eager row's baseline is PyG's fastest eager run; the captured and compiled rows' is the fastest PyG run of any mode
    (best_vendor `pyg`, `pyg-compiled`, `pyg-reduce-overhead`). rel_error: the last loss against PyG's eager one."""
    from ..torch.training import CONTROL, width

    k, heads = width(model)
    base = dict(graph=spec.label, n_rows=graph.n_rows, n_cols=graph.n_cols, nnz=graph.nnz,
                op=f"train-{model}", k=k, heads=heads, dtype=dtype, **stamp)
    if model == CONTROL:     # torch alone, no baseline: its compiled epochs against its eager one
        return [run_row(base, run) for run in ours]
    pyg_rows = [run_row(base, run) for run in theirs]
    our_rows = [run_row(base, run, reorder=run.reorder, reorder_s=run.reorder_s) for run in ours]
    amortise(our_rows)
    timed = [r for r in pyg_rows if _timed(r)]
    eager = pyg_eager(pyg_rows)
    fastest = min(timed, key=lambda r: r.ms_median) if timed else None
    for mine in our_rows:
        baseline = eager if mine.schedule == "graph" else fastest
        if _timed(baseline):
            mine.best_vendor = f"pyg-{baseline.schedule}" if baseline.schedule in COMPILED_MODES else "pyg"
            mine.best_vendor_ms = baseline.ms_median
            mine.speedup_vs_best_vendor = speedup(baseline.ms_median, mine.ms_median)
        if _timed(eager) and math.isfinite(mine.loss_last) and eager.loss_last:
            mine.rel_error = abs(mine.loss_last - eager.loss_last) / abs(eager.loss_last)
    return pyg_rows + our_rows


def show_plan(specs, models, params: dict, names=(dtype_table.DEFAULT,), suite: str = SUITE,
             op_prefix: str = "train-", device_bytes=None) -> None:
    """The runs listed with their estimated memory; `device_bytes(model, n, nnz, n_in, n_out)`
    (default: the full-graph training's estimate)."""
    from ..budget import graph_host_bytes
    from ..graphs import synthetic
    from ..torch import training
    from .dry_run import PlannedCase, report as show

    device_bytes = device_bytes or training.device_bytes
    cases = []
    for spec in specs:
        if spec.preset:
            (n, nnz), exact = synthetic.check_budget(spec.preset), False
        else:
            g = spec.load(params["root"], params["seed"])   # a file or dataset: validated in full
            (n, nnz), exact = (g.n_rows, g.nnz), True
        n_in, n_out = training.feature_dims(spec.label)
        for name in names:
            for m in models:
                k, heads = training.width(m)
                cases.append(PlannedCase(spec.label, n, n, nnz, f"{op_prefix}{m}", k, heads,
                                         graph_host_bytes(n, n, nnz),
                                         device_bytes(m, n, nnz, n_in, n_out), exact, name))
    show(cases, f"autosage bench --suite {suite}", params.get("as_json", False),
         {"suite": suite, "out": params.get("out_dir") or "results/<date>-<gpu name>"})


def run(params: dict, command: str, default_out, prior_run, render) -> None:
    """The suite, from the bench command's options (`params`, and `command`, its line for the
    README); `default_out(gpu)`, `prior_run(dir)` and `render(rows, out, as_json)` are the bench
    command's own."""
    models, steps, specs, names = check_options(params)
    methods, modes = parse_reorder(params.get("reorder"), allow_auto=True), parse_modes(params.get("modes"))
    execute(params, command, (default_out, prior_run, render), SUITE, {"repeat": steps},
            lambda: show_plan(specs, models, params, names),
            lambda stamp, out, old_rows: run_graphs(specs, models, steps,
                                                    {**params, "dtypes": names, "reorder": methods,
                                                     "modes": modes, "models": models},
                                                    stamp, out, old_rows))


def execute(params: dict, command: str, bench_hooks, suite: str, run_info: dict, dry_run, runner) -> None:
    """A training suite's run once its options are checked: the dry run (`dry_run()`), or the GPU
    checks, then `runner(stamp, out, old_rows)` -> new rows, merged into the results directory,
    whose run list gets this run (`run_info`: the suite's own settings). `bench_hooks`: the bench
    command's (default_out, prior_run, render)."""
    default_out, prior_run, render = bench_hooks
    out_dir = params.get("out_dir")
    prior = prior_run(Path(out_dir)) if out_dir is not None else None
    if params.get("dry_run"):
        return dry_run()
    require_gpu(f"autosage bench --suite {suite}", "--dry-run validates the run without one")
    from ..torch.training import require_torch_cuda

    require_torch_cuda()
    env = environment()
    gpu = (env.get("device") or {}).get("name", "")
    out = Path(out_dir) if out_dir is not None else default_out(gpu)
    old_rows, runs = prior if prior is not None else prior_run(out)
    runs = runs + [{"command": command, "suite": suite, "timestamp": now_iso(),
                    "seed": params["seed"], **run_info, "environment": env}]
    stamp = {"commit": str(env.get("commit", "")), "gpu": gpu, "timestamp": now_iso(),
             "seed": params["seed"]}
    new_rows = runner(stamp, out, old_rows)
    all_rows = report.merge_rows(old_rows, new_rows)
    report.write_run_dir(out, all_rows, env, runs)
    render(all_rows, out, params.get("as_json", False))


def training_graphs(specs, params: dict, device: str):
    """(spec, its training Graph on `device`, its reorderings) per spec, loaded one at a time; each
    is freed before the next is loaded (the caller drops its own references at the end of its loop
    body). The reorderings: a torch.reordered.ReorderedGraph per method of params["reorder"]."""
    from ..torch import training

    for spec in specs:
        t0 = time.perf_counter()
        click.echo(f"{spec.label}: loading", err=True)
        csr = spec.load(params["root"], params["seed"])
        graph = training.training_graph(csr, device, params.get("cache_path"))
        reorderings = [rg for m in params.get("reorder") or () for rg in reordered_graphs(graph, m, params, spec.label)]
        del csr
        click.echo(f"{spec.label}: {graph.n_rows:,} nodes, {graph.nnz:,} edges "
                   f"({time.perf_counter() - t0:.1f} s)", err=True)
        yield spec, graph, reorderings
        del graph, reorderings
        training.free_memory()


def reordered_graphs(graph, method: str, params: dict, label: str) -> list:
    """The training Graph renumbered by `method` on its own device (torch.reordered.reorder of the
    Graph: the order and P A Pᵀ as tensor passes, a library's order on the host), as a
    ReorderedGraph whose cost is what reordering adds to the run: the order and the relabelling,
    not the user's graph, which every run builds. `auto`: the scheduler's decision for SpMM at the
    most frequent width of the first model of params["models"] (on graph `label`'s features; the
    plan it tunes is then one the training runs) over the SpMMs of AMORTISE_EPOCHS epochs
    (measured on the GPU, through params["cache_path"]), twice: the first run's (`auto:<method>`,
    its cost the whole decision unless the cache already held it) and a later run's
    (`auto:<method>:cached`, the cached decision applied)."""
    from ..scheduler.decisions.reorder_decision import describe_timings
    from ..torch import training
    from ..torch.reordered import reorder

    if method != AUTO_REORDER:
        reordered = reorder(graph, method)
        click.echo(f"  {method}: ordered and relabelled in {reordered.cost_s:.2f} s", err=True)
        return [reordered]
    from .. import torch as layers

    model = params.get("models", ("gcn",))[0]
    widths = training.spmm_widths(training.build(layers, model, *training.feature_dims(label)))
    options = {"width": training.decision_width(widths), "cache": params.get("cache_path"),
               "expected_calls": AMORTISE_EPOCHS * len(widths)}
    first, later = reorder(graph, "auto", **options), reorder(graph, "auto", **options)
    phases = describe_timings(first.decision.timings)
    click.echo(f"  auto: {first.method} ({first.decision.reason}); decided in {first.cost_s:.2f} s"
               + (f" ({phases})" if phases else "") + f", {later.cost_s:.2f} s from the cache", err=True)
    first.method, later.method = f"auto:{first.method}", f"auto:{later.method}:cached"
    return [first, later]


def value_type(name: str):
    """The torch dtype of a dtype name (float32, float16, bfloat16)."""
    from ..torch.cuda import VALUE_TYPES

    return {n: t for t, n in VALUE_TYPES.items()}[name]


def run_graphs(specs, models, steps: int, params: dict, stamp: dict, out: Path, old_rows,
               device: str = "cuda") -> list[Row]:
    """Every model on every graph in every dtype of params["dtypes"] (default float32), rows
    written to results.csv after each model (`device` cpu: a smoke run of the same path, for
    tests)."""
    from ..torch import training

    def bench(spec, graph, dtype, reorderings=()):
        return training.bench_graph(spec.label, graph, models, steps=steps, warmup=WARMUP,
                                    seed=params["seed"], dtype=dtype,
                                    modes=params.get("modes") or training.MODES,
                                    **({"reorderings": reorderings} if reorderings else {}))

    return run_models(specs, params, out, old_rows, device, bench,
                      lambda spec, graph, result, name: _rows_of(spec, graph, *result, stamp, name),
                      _progress_line)


def run_models(specs, params: dict, out: Path, old_rows, device: str, bench, rows_of, progress) -> list[Row]:
    """A training suite's loop: per graph (loaded once) and dtype of params["dtypes"], the results
    `bench(spec, graph, torch dtype)` yields, each turned into rows by `rows_of(spec, graph,
    result, dtype name)`, merged into results.csv at once and told on stderr by `progress(rows)`."""
    out.mkdir(parents=True, exist_ok=True)
    rows: list[Row] = []
    for spec, graph, reorderings in training_graphs(specs, params, device):
        for name in params.get("dtypes") or (dtype_table.DEFAULT,):
            for result in bench(spec, graph, value_type(name), reorderings):
                new = rows_of(spec, graph, result, name)
                rows += new
                report.write_csv(report.merge_rows(old_rows, rows), out / "results.csv")
                click.echo(progress(new), err=True)
        del graph, reorderings
    return rows


def _progress_line(rows: list[Row]) -> str:
    """One line per model: ours eagerly against PyG's fastest eager run (PyG's alone when --modes
    leaves our eager row out), then the other modes' times; the control's modes (torch alone)."""
    if rows[0].backend == "torch":
        return (f"  {rows[0].graph} {rows[0].op} (torch alone, no graph op): "
                + "; ".join(f"{r.schedule} {_time_or_status(r)}" for r in rows))
    pyg = pyg_eager(rows)
    mine = next((r for r in rows if r.backend == "autosage" and r.schedule == "graph"), None)
    first = mine or rows[0]
    kind = "" if first.dtype == dtype_table.DEFAULT else f" {first.dtype}"
    what = f"  {first.graph} {first.op}{kind}:"
    if mine is not None:
        what = f"{what} ours {mine.ms_median:.1f} ms/epoch [{mine.status}]"
    if pyg.status != "ok":
        what = f"{what}; PyG {pyg.status}: {pyg.error}"
    elif mine is None:
        what = f"{what} PyG ({pyg.schedule}) {pyg.ms_median:.1f} ms"
    else:
        what = (f"{what}, PyG ({pyg.schedule}) {pyg.ms_median:.1f} ms -> {mine.speedup_vs_best_vendor:.2f}x; "
                f"last loss {mine.loss_last:.5f} vs {pyg.loss_last:.5f} (rel {mine.rel_error:.1e})")
    others = [f"{'ours' if r.backend == 'autosage' else 'PyG'} {r.schedule} {_time_or_status(r)}"
              for r in rows if r.schedule in ("captured", *COMPILED_MODES)
              or (r.backend == "pyg" and r is not pyg)]
    return "; ".join([what, *others])


def _time_or_status(row: Row) -> str:
    """A mode's median epoch, or why it has none."""
    return f"{row.ms_median:.1f} ms" if row.status == "ok" else f"{row.status}: {row.error}"
