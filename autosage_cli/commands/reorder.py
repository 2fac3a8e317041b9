"""`autosage reorder GRAPH | --dataset NAME --out G2(.npz|.mtx) [--method M] [--measure] [--json]`:
renumber a square graph's vertices (rows and columns together), write the reordered graph and its
permutation (`<out stem>.perm.npy`, perm[new] = old), and say what the order changed: the spread
of the nonzeros around the diagonal before and after, and with --measure (GPU) the tuned SpMM time
on both orders. `--method auto [--calls N]` (GPU) lets the scheduler's reordering decision
(scheduler.decisions.reorder_decision) pick the order for SpMM at --width over N expected calls,
or keep the user's ("identity"). Every check that needs no GPU and no graph runs first."""
from __future__ import annotations

import io
import json
import time
from pathlib import Path

import click

from ..errors import AutosageError
from ..graphs.reorder import METHODS, available, require_square   # NumPy only: SciPy is imported when an order is computed
from ..scheduler.decisions.reorder_decision import DEFAULT_CALLS
from .gen import check_output_path, write_atomically, write_graph
from .progress import step, stderr_console

AUTO = "auto"            # --method auto: the scheduler's reordering decision


def perm_path(out: Path) -> Path:
    """Where the permutation goes: `g2.npz` -> `g2.perm.npy`, beside the graph."""
    return out.with_name(f"{out.stem}.perm.npy")


def check_perm_path(path: Path) -> None:
    if path.is_dir():
        raise AutosageError(f"cannot write {path}: it is a directory")


def write_perm(perm, path: Path) -> None:
    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, perm, allow_pickle=False)
    write_atomically(path, lambda fh: fh.write(buffer.getvalue()))


def device_labeller():
    """labelprop's labels computed by torch's CUDA kernels (torch.relabel.csr_labels:
    the same labels, 0.08 s against 3.5 s for the array module's sorts on products-like-shuffled's
    124M edges) when torch sees a CUDA device; else None (the sorts, on CuPy or NumPy)."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    from ..torch.relabel import csr_labels

    return csr_labels


def decide(graph, k: int, calls: int, cache_path):
    """The scheduler's reordering decision for SpMM at width k over `calls` calls, measured on
    this GPU (OrderMeasurer) through the decision cache at `cache_path` (None: the default)."""
    from .. import environment
    from ..cache import DecisionCache
    from ..scheduler.decisions.reorder_decision import decide as decide_order
    from ..scheduler.probing.reorder_measure import OrderMeasurer

    cache = DecisionCache(cache_path)
    l2_bytes = (environment.device_info() or {}).get("l2_bytes")
    return decide_order(graph, k, measure_orders=OrderMeasurer(cache), cache=cache,
                        expected_calls=calls, l2_bytes=l2_bytes, labeller=device_labeller())


def chosen_order(graph, decision):
    """(reordered graph, perm, Reordering report) of what `decision` chose: its order and the
    seconds that order took (the candidate's), or the identity, which leaves the graph as it is."""
    from ..bench import reordering

    if not decision.applied:
        return reordering.reorder(graph, "identity")
    cand = next(c for c in decision.candidates
                if (c["method"] if isinstance(c, dict) else c.method) == decision.method)
    cand = cand if isinstance(cand, dict) else cand.to_dict()
    reordered = decision.relabelled()
    report = reordering.Reordering(decision.method, cand["order_s"], cand["apply_s"],
                                   reordering.spread(graph), reordering.spread(reordered))
    return reordered, decision.perm, report


def _spread_line(name: str, before: float, after: float, fmt: str) -> str:
    ratio = f" ({before / after:.3g}x smaller)" if after > 0 and before > after else ""
    return f"{name}: {fmt.format(before)} -> {fmt.format(after)}{ratio}"


def _candidate_line(c: dict) -> str:
    line = f"  candidate {c['method']}: estimated {c['estimate']:.3g}x"
    t = c.get("times")
    if t:
        check = "verified" if t["verified"] else "NOT verified"
        line += (f", measured {t['before_ms']:.4g} -> {t['after_ms']:.4g} ms "
                 f"({t['speedup']:.3g}x, {check})")
    return f"{line}: {c['verdict']}"


def render_decision(d: dict) -> None:
    kept = " (the order given is kept)" if not d["applied"] else ""
    cached = " [cached]" if d["from_cache"] else ""
    click.echo(f"decision (spmm K={d['width']}, {d['expected_calls']:,} calls): "
               f"{d['method']}{kept}{cached}")
    click.echo(f"  reason: {d['reason']}")
    if not d["from_cache"] and d.get("timings"):
        from ..scheduler.decisions.reorder_decision import describe_timings

        click.echo("  deciding: " + describe_timings(d["timings"]))
    for c in d["candidates"]:
        click.echo(_candidate_line(c))


def render(doc: dict) -> None:
    if doc.get("decision"):
        render_decision(doc["decision"])
    r = doc["reordering"]
    b, a = r["before"], r["after"]
    click.echo(f"method: {r['method']} (order {r['order_s']:.2f} s, relabel {r['apply_s']:.2f} s)")
    click.echo(_spread_line("locality (mean |i-j| / n)", b["locality"], a["locality"], "{:.4g}"))
    click.echo(_spread_line("bandwidth (max |i-j|)", b["bandwidth"], a["bandwidth"], "{:,}"))
    click.echo(_spread_line("row span (mean / n)", b["row_span"], a["row_span"], "{:.4g}"))
    gain = doc.get("measure")
    if gain:
        for label in ("before", "after"):
            t = gain[label]
            click.echo(f"spmm K={gain['width']} {label}: {t['median_ms']:.4g} ms "
                       f"({t['backend']} {t['schedule']})")
        check = "verified" if gain["verified"] else "NOT verified"
        click.echo(f"gain: {gain['speedup']:.3g}x ({check}: rel. error {gain['rel_error']:.1e}, "
                   f"bound {gain['tolerance']:.1e})")
    click.echo(f"wrote {doc['out']} and {doc['perm']}")


@click.command("reorder")
@click.argument("graph", required=False, type=click.Path(dir_okay=False))
@click.option("--dataset", help="a named dataset (datasets/, OGB, reddit, or a synthetic preset)")
@click.option("--root", default="datasets", show_default=True, help="where named datasets live")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False),
              help="reordered graph: .npz or .mtx; the permutation goes beside it as <stem>.perm.npy")
@click.option("--method", type=click.Choice(METHODS + (AUTO,)), default="rcm", show_default=True,
              help="rcm: reverse Cuthill-McKee; degree: by degree, descending; hubsort / hubcluster: "
                   "rows above the mean degree first (sorted / in order), the rest in order; metis: "
                   "METIS parts of ~4096 vertices; community: Louvain (PLM) communities (metis and "
                   "community need the reorder extra); auto: the scheduler measures candidate orders "
                   "for SpMM at --width on the GPU and applies one only where it pays back over "
                   "--calls calls, else keeps the order given (needs a GPU)")
@click.option("--calls", type=click.IntRange(min=1),
              help="with --method auto: the SpMM calls the order must pay back over "
                   f"(default {DEFAULT_CALLS}, e.g. a training run's epochs x SpMMs per epoch)")
@click.option("--measure", is_flag=True, help="also time tuned SpMM on both orders (needs a GPU)")
@click.option("--width", "-k", "k", default=64, show_default=True, type=click.IntRange(min=1),
              help="feature width K of the SpMM that --measure and --method auto time")
@click.option("--cache", "cache_path", type=click.Path(dir_okay=False),
              help="the decision cache of --measure and --method auto "
                   "(default: ~/.cache/autosage/decisions.json)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def command(graph, dataset, root, out, method, calls, measure, k, cache_path, as_json):
    """Renumber GRAPH's vertices (or --dataset NAME's) for locality and write the result."""
    if (graph is None) == (dataset is None):
        raise AutosageError("give exactly one of GRAPH (a file) or --dataset NAME")
    auto = method == AUTO
    if calls is not None and not auto:
        raise AutosageError(f"--calls goes with --method auto (the decision weighs an order's cost "
                            f"over the calls); --method {method} always applies its order")
    if auto and measure:
        raise AutosageError("--measure times a named method; --method auto measures its candidates "
                            "itself and reports their times")
    missing = None if auto else available(method)
    if missing:
        raise AutosageError(f"--method {method} {missing}")
    out_path = Path(out)
    check_output_path(out_path)
    check_perm_path(perm_path(out_path))
    if measure or auto:
        from ..cache import check_cache_path, default_path
        from ..capability import require_gpu

        require_gpu(*(("autosage reorder --method auto", "name a method to reorder without measuring")
                      if auto else
                      ("autosage reorder --measure", "without --measure it reorders on the CPU")))
        check_cache_path(cache_path or default_path())
    from ..bench import reordering
    from ..graphs.load import load_graph

    err = stderr_console()
    started = time.perf_counter()
    with step(err, f"loading {graph or dataset}"):
        g = load_graph(path=graph, dataset=dataset, root=root)
    require_square(g)
    loaded = time.perf_counter()
    decision = None
    if auto:
        with step(err, f"deciding the order for spmm K={k}"):
            decision = decide(g, k, calls or DEFAULT_CALLS, cache_path)
            reordered, perm, report = chosen_order(g, decision)
    else:
        with step(err, f"reordering ({method})"):
            reordered, perm, report = reordering.reorder(
                g, method, device_labeller() if method == "labelprop" else None)
    reordered_at = time.perf_counter()
    with step(err, f"writing {out_path}"):
        write_graph(reordered, out_path, tool="autosage reorder")
        write_perm(perm, perm_path(out_path))
    # One line once everything is written, as `gen` does: a refusal or a failed write before it
    # stays the only line on stderr.
    err.print(f"loaded {g.describe()} in {loaded - started:.2f} s, "
              f"{'decided' if auto else 'reordered'} in {reordered_at - loaded:.2f} s, written in {time.perf_counter() - reordered_at:.2f} s",
              highlight=False)
    gain = None
    if measure:
        from ..bench.reorder_gain import measure_gain

        with step(err, f"tuning and timing spmm K={k} on both orders"):
            gain = measure_gain(g, reordered, perm, k, cache=cache_path).to_dict()
    doc = {"graph": str(graph or dataset), "n": g.n_rows, "nnz": g.nnz, "out": str(out_path),
           "perm": str(perm_path(out_path)), "perm_convention": "perm[new] = old",
           "reordering": report.to_dict(), "fingerprint": reordered.fingerprint, "measure": gain,
           "decision": None if decision is None else {**decision.to_dict(), "op": "spmm", "width": k}}
    if as_json:
        click.echo(json.dumps(doc))
    else:
        render(doc)
