"""`autosage tune`: decide (or recall) how to run one op on one graph at one width."""
from __future__ import annotations

import json
import math
import sys

import click
from rich.console import Console
from rich.table import Table

from .. import budget, dtypes, ops as op_specs
from ..errors import AutosageError
from ..graphs.memo import GraphMemo
from ..scheduler.probing import phases
from ..scheduler import tune as tune_mod
from ..scheduler.probing.probe import DEFAULT_BUDGET_MS
from ..scheduler.decisions.select import DEFAULT_GUARDRAIL
from . import dry_run as dry_run_mod
from .op_names import OpNames
from .progress import step, stderr_console


def stdout_console() -> Console:
    """A terminal gets its own width; a pipe or file gets wide rows instead of wrapped cells."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def load_input_graph(path: str | None, dataset: str | None, root: str):
    if (path is None) == (dataset is None):
        raise AutosageError("give exactly one of GRAPH (a file) or --dataset NAME")
    from ..graphs.load import load_graph
    return load_graph(path=path, dataset=dataset, root=root)


def _num(x, fmt: str = "{:.4g}") -> str:
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    return fmt.format(x) if math.isfinite(x) else str(x)


def render_table(result: tune_mod.TuneResult, console: Console) -> None:
    vendor_ms = [v["ms"] for v in result.vendor if v.get("status") == "ok" and isinstance(v.get("ms"), (int, float))
                 and v["ms"] > 0]
    best_vendor = min(vendor_ms) if vendor_ms else None
    probed = [c for c in result.candidates if not str(c.get("reason", "")).startswith("not probed")]
    title = "cached decision (no probe run)" if result.cache_hit else "candidates"
    table = Table(title=title)
    for col in ("candidate", "backend", "estimate ms", "compile ms", "probe ms", "vs best vendor", "rel error",
                "status"):
        table.add_column(col, justify="right" if "ms" in col or col in ("vs best vendor", "rel error")
                         else "left")
    for rec in probed + result.vendor:
        ms = rec.get("ms")
        speedup = best_vendor / ms if best_vendor and isinstance(ms, (int, float)) and ms else None
        status = rec.get("status", "")
        if rec.get("reason"):
            status += f" ({rec['reason']})"
        mark = " *" if rec["name"] == result.decision.schedule else ""
        table.add_row(rec["name"] + mark, rec.get("backend", ""), _num(rec.get("estimate_ms")),
                      _num(rec.get("compile_ms"), "{:.0f}"), _num(rec.get("ms")), _num(speedup, "{:.2f}x"), _num(rec.get("rel_error"), "{:.1e}"),
                      status)
    console.print(table)
    not_probed = len(result.candidates) - len(probed)
    if not_probed:
        console.print(f"{not_probed} more schedules ranked by estimate, not probed (see --json)")
    d = result.decision
    console.print(f"[bold]decision:[/bold] {d.backend} {d.schedule if d.backend == 'native' else ''}".rstrip())
    console.print(f"[bold]reason:[/bold] {d.reason}")
    t = result.timings
    console.print("cache hit: no probe run" if result.cache_hit else tuning_line(t), soft_wrap=True)
    if result.cache_path:
        console.print(f"cache: {result.cache_path}")


def tuning_line(t: dict) -> str:
    """One line: the tune's phases, the probe's split in parentheses (the phases that took time)."""
    split = phases.summary(t)
    modules = ""
    if t.get("modules_prebuilt") or t.get("modules_compiled"):
        modules = (f" ({t.get('modules_prebuilt', 0)} modules from install-time cubins, "
                   f"{t.get('modules_compiled', 0)} compiled)")
    return ("tuning: features {:.0f} ms, estimate {:.0f} ms, compile {:.0f} ms{}, probe {:.0f} ms{}, "
            "total {:.0f} ms".format(t.get("features_ms", 0), t.get("estimate_ms", 0), t.get("compile_ms", 0),
                                     modules, t.get("probe_ms", 0), f" ({split})" if split else "",
                                     t.get("total_ms", 0)))


@click.command("tune")
@click.argument("graph", required=False, type=click.Path(dir_okay=False))
@click.option("--dataset", help="a named dataset (datasets/, OGB, reddit, or a synthetic preset)")
@click.option("--root", default="datasets", show_default=True, help="where named datasets live")
@click.option("--width", "-k", "k", type=int, required=True, help="feature width K (d for attention)")
@click.option("--op", type=OpNames(), default="spmm", show_default=True, help="the op to tune")
@click.option("--heads", default=1, show_default=True, type=int, help="attention heads")
@click.option("--dtype", type=click.Choice(op_specs.supported_dtypes()), default=dtypes.DEFAULT,
              show_default=True, help="element type of the dense operands")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False),
              help="decision cache file (default: ~/.cache/autosage/decisions.json)")
@click.option("--top-k", default=tune_mod.DEFAULT_TOP_K, show_default=True, type=int,
              help="most schedules probed, best estimates first (the budget may allow fewer)")
@click.option("--budget-ms", default=DEFAULT_BUDGET_MS, show_default=True, type=float,
              help="measured GPU time the probe may spend; it decides whether the candidates "
                   "are timed on the whole graph or on a sample")
@click.option("--guardrail", default=DEFAULT_GUARDRAIL, show_default=True, type=float,
              help="choose native only if <= this x the best vendor time")
@click.option("--full", is_flag=True,
              help="time the top-k on the whole graph whatever the budget (not exhaustive: the "
                   "bench's --exhaustive times every schedule)")
@click.option("--retune", is_flag=True, help="ignore a cached decision and tune again (replacing it)")
@click.option("--dry-run", is_flag=True,
              help="validate the graph, options and cache path and show the case with its estimated "
                   "memory; no GPU needed")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object on stdout")
def command(graph, dataset, root, k, op, heads, dtype, cache_path, top_k, budget_ms, guardrail, full,
            retune, dry_run, as_json):
    """Tune OP at width K on GRAPH (or --dataset NAME): estimate, probe, guardrail, cache."""
    # Everything that can be checked without a GPU is checked first, so a job can be validated on a
    # CPU machine before it is moved to a GPU one.
    tune_mod.validate_options(op, k, heads, top_k, budget_ms, guardrail, dtype)
    if (graph is None) == (dataset is None):
        raise AutosageError("give exactly one of GRAPH (a file) or --dataset NAME")
    from ..cache import DecisionCache, check_cache_path, default_path

    check_cache_path(cache_path or default_path())
    err = stderr_console()
    progress = (lambda msg: err.print(f"[dim]{msg}[/dim]", highlight=False))
    memo = GraphMemo.beside(cache_path or default_path())
    settings = dict(top_k=top_k, budget_ms=budget_ms, guardrail=guardrail, full=full, dtype=dtype)
    if not (dry_run or retune) and _answer_from_memo(memo.recall(graph, dataset), op, k, heads, cache_path,
                                                     settings, progress, as_json, err):
        return
    from ..scheduler.prefetch import Prefetch

    # the GPU's initialisation and the vendor's imports run while the graph loads (not --dry-run)
    with Prefetch(op, enabled=not dry_run) as ahead:
        with step(err, f"loading {graph or dataset}"):   # a preset is generated here (reddit-like: 15-30 s)
            g = load_input_graph(graph, dataset, root)
        memo.remember(graph, dataset, g)
        op_specs.check_graph_values(op, g, dtype, graph or dataset)
        planned = _planned_case(g, graph or dataset, op, k, heads, full, dtype)
    if dry_run:
        dry_run_mod.report([planned], "autosage tune", as_json,
                           {"cache": str(cache_path or default_path())})
        return
    from ..capability import require_gpu
    require_gpu("autosage tune", "--dry-run validates the run without one")
    from ..backends.memory import device_free_bytes
    budget.require_device(planned.device_bytes, device_free_bytes(), f"tuning {op} K={k} on {planned.graph}")

    known = _remembered_features(memo, graph, dataset, g, progress)
    result = tune_mod.tune(g, op, k, heads, cache=DecisionCache(cache_path), progress=progress,
                           retune=retune, features=known, **ahead.machine(), **settings)
    if known is None and not result.cache_hit and isinstance(result.entry.get("features"), dict):
        memo.remember(graph, dataset, g, features=(tune_mod.features_version(), result.entry["features"]))
    _emit(result, as_json, err)


def _remembered_features(memo, graph, dataset, g, progress):
    """The graph's features from the memo (computed by this code in an earlier tune), or None."""
    from ..features import GraphFeatures
    values = memo.features(graph, dataset, g.fingerprint, tune_mod.features_version())
    if values is None:
        return None
    try:
        features = GraphFeatures.from_dict(values)
    except (TypeError, ValueError):
        return None
    progress("graph features from the graph memo (computed by an earlier tune)")
    return features


def _answer_from_memo(summary, op, k, heads, cache_path, settings, progress, as_json, err) -> bool:
    """A cache hit answered from the graph memo's fingerprint, without loading the graph. False
    (load it and tune) when the graph is not remembered or the decision is not cached."""
    if summary is None:
        return False
    from ..cache import DecisionCache
    from ..capability import require_gpu

    require_gpu("autosage tune", "--dry-run validates the run without one")   # the key names the device
    result = tune_mod.recall(summary, op, k, heads, cache=DecisionCache(cache_path), progress=progress,
                             **settings)
    if result is None:
        return False
    _emit(result, as_json, err)
    return True


def _emit(result, as_json: bool, err) -> None:
    for msg in result.messages:
        if msg != "cache hit: no probe run":
            err.print(f"note: {msg}", highlight=False)
    if as_json:
        click.echo(json.dumps(result.to_json(), sort_keys=True))
    else:
        render_table(result, stdout_console())


def _planned_case(graph, label: str, op: str, k: int, heads: int, full: bool,
                  dtype: str) -> dry_run_mod.PlannedCase:
    """The case with its memory estimate; the GPU holds the probe's sample unless --full."""
    from ..scheduler.probing import sample

    target = sample.default_target_nnz(graph)
    device_nnz = None if full or sample.probes_whole_graph(graph, target) else target
    return dry_run_mod.PlannedCase.of(str(label), graph.n_rows, graph.n_cols, graph.nnz, op, k, heads,
                                      device_nnz=device_nnz, dtype=dtype)
