"""`autosage replay`: re-run every recorded decision without probing, verify and time it."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from .. import ops as op_specs
from ..dtypes import DEFAULT as DEFAULT_DTYPE
from ..errors import AutosageError
from .progress import stderr_console
from ..scheduler.decisions import replay as replay_mod
from .tune import stdout_console


def _ms(x) -> str:
    return "-" if x is None else f"{x:.4g}"


def render_table(outcomes, dry_run: bool, console: Console) -> None:
    table = Table(title="decisions (dry run: graphs and fingerprints only)" if dry_run else "replay")
    # The dtype column appears once a cache holds another dtype than float32 (--json always has it).
    show_dtype = any(o.dtype != DEFAULT_DTYPE for o in outcomes)
    cols = ["graph", "op", "K", "heads"] + (["dtype"] if show_dtype else []) + ["decision", "recorded ms"]
    if not dry_run:
        cols += ["replayed ms", "rel error"]
    cols += ["status"]
    for col in cols:
        table.add_column(col, justify="right" if col in ("K", "heads", "recorded ms", "replayed ms",
                                                          "rel error") else "left")
    for o in outcomes:
        decision = o.schedule if o.backend == "native" else o.backend
        row = [o.graph, o.op, str(o.k), str(o.heads)] + ([o.dtype] if show_dtype else []) + [decision,
               _ms(o.recorded_ms) + (f" ({o.recorded_on})" if o.recorded_on else "")]
        if not dry_run:
            row += [_ms(o.replayed_ms), "-" if o.rel_error is None else f"{o.rel_error:.1e}"]
        row.append(o.status + (f" ({o.reason})" if o.reason else ""))
        table.add_row(*row)
    console.print(table)


@click.command("replay")
@click.argument("cache_file", metavar="CACHE", type=click.Path(dir_okay=False))
@click.option("--dry-run", is_flag=True, help="check the file, graphs and fingerprints; no GPU needed")
@click.option("--dtype", type=click.Choice(op_specs.supported_dtypes()), default=None,
              help="replay only the decisions tuned for this element type (default: all; entries "
                   "recorded without one are float32)")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object on stdout")
def command(cache_file, dry_run, dtype, as_json):
    """Re-run the decisions recorded in CACHE, verify them against the vendor and time them."""
    if not Path(cache_file).is_file():
        raise AutosageError(f"cache file {cache_file} not found")
    from ..cache import DecisionCache

    cache = DecisionCache(cache_file, read_only=True)
    cache.entries()   # a corrupt or foreign file fails here, before any GPU is asked for
    if not dry_run:
        from ..capability import require_gpu
        require_gpu("autosage replay (use --dry-run to check without a GPU)")
    err = stderr_console()   # one line per message: progress lines are not wrapped in a log
    outcomes = replay_mod.replay(cache, dry_run=dry_run, dtype=dtype,
                                 progress=lambda msg: err.print(f"[dim]{msg}[/dim]", highlight=False))
    failing = [o for o in outcomes if o.failing]
    malformed = list(cache.malformed)      # skipped by the cache, each already warned about
    if as_json:
        click.echo(json.dumps({"cache": str(cache.path), "dry_run": dry_run,
                               "entries": [o.to_dict() for o in outcomes],
                               "malformed": [{"id": i, "problem": p} for i, p in malformed],
                               "failing": len(failing) + len(malformed),
                               "skipped": sum(o.status == "skipped" for o in outcomes),
                               "ok": not failing and not malformed}, sort_keys=True))
    else:
        render_table(outcomes, dry_run, stdout_console())
        if not outcomes:
            stdout_console().print("the cache holds no decisions")
    if failing or malformed:
        kinds = sorted({o.status for o in failing} | ({"malformed"} if malformed else set()))
        click.echo(f"replay: {len(failing) + len(malformed)} of {len(outcomes) + len(malformed)} "
                   f"entries did not reproduce ({', '.join(kinds)})", err=True)
        sys.exit(1)
