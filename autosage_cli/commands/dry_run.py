"""What `tune --dry-run` and `bench --dry-run` report: every case a run would measure, with the
graph's size and the memory it is estimated to need, after every input has been validated. No GPU is
touched."""
from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass

import click

from .. import budget, ops as op_specs


@dataclass
class PlannedCase:
    graph: str
    n_rows: int
    n_cols: int
    nnz: int
    op: str
    k: int
    heads: int
    host_bytes: int          # building the graph, its fingerprint and features
    device_bytes: int        # the graph, inputs and outputs on the GPU
    exact: bool = True       # False: a preset's size before it is generated (expected nonzeros)
    dtype: str = "float32"

    @classmethod
    def of(cls, label: str, n_rows: int, n_cols: int, nnz: int, op: str, k: int, heads: int,
           exact: bool = True, device_nnz: int | None = None, dtype: str = "float32") -> "PlannedCase":
        """`device_nnz`: the nonzeros that go to the GPU when fewer than the graph's (a probe
        sample of whole rows: its rows are scaled down in proportion, its columns are all kept)."""
        dev_nnz = nnz if device_nnz is None else min(nnz, device_nnz)
        dev_rows = n_rows if not nnz else max(1, math.ceil(n_rows * dev_nnz / nnz))
        return cls(label, n_rows, n_cols, nnz, op, k, heads,
                   budget.graph_host_bytes(n_rows, n_cols, nnz),
                   op_specs.device_bytes(op, dev_rows, n_cols, dev_nnz, k, heads, dtype), exact, dtype)


def report(cases: list[PlannedCase], what: str, as_json: bool, extra: dict | None = None) -> None:
    """The plan on stdout (a table, or one JSON object), then one line on stderr saying so."""
    available, source = budget.host_available()
    if as_json:
        click.echo(json.dumps({"dry_run": True, "cases": [asdict(c) for c in cases],
                               "host_available_bytes": available, "host_available_from": source,
                               **(extra or {})}, sort_keys=True))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{what}: dry run (inputs validated, nothing run)")
        for col in ("graph", "n", "nnz", "op", "K", "heads", "dtype", "host memory", "GPU memory"):
            table.add_column(col, justify="left" if col in ("graph", "op", "dtype") else "right")
        for c in cases:
            approx = "" if c.exact else "~"
            table.add_row(c.graph, f"{c.n_rows:,}", f"{approx}{c.nnz:,}", c.op, str(c.k), str(c.heads), c.dtype,
                          budget.format_bytes(c.host_bytes), budget.format_bytes(c.device_bytes))
        # sys.stdout, not click.get_text_stream (deprecated: Click 9 drops it): under a test
        # runner it is the captured stream, as click.echo's
        console = Console() if sys.stdout.isatty() else Console(width=160)
        console.print(table)
        for key, value in (extra or {}).items():
            console.print(f"{key.replace('_', ' ')}: {value}")
    host = "not measurable" if available is None else f"{budget.format_bytes(available)} ({source})"
    click.echo(f"dry run: {len(cases)} case(s) validated; host memory available {host}; "
               f"GPU memory is checked per case when the run starts", err=True)
