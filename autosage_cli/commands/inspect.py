"""`autosage inspect PATH | --dataset NAME`: load a graph and show its features (a rich table, or one
JSON object on stdout with --json). Loading messages go to stderr."""
from __future__ import annotations

import json
import time

import click
from rich.console import Console
from rich.table import Table

from ..errors import AutosageError
from .progress import step, stderr_console


def _format(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def render(doc: dict, console: Console) -> None:
    table = Table(title=doc.get("name") or "graph", show_header=False)
    table.add_column("feature")
    table.add_column("value", justify="right")
    for key, value in doc.items():
        if key in ("name", "source"):
            continue
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                table.add_row(f"{key} {sub}", _format(subvalue))
        else:
            table.add_row(key.replace("_", " "), _format(value))
    console.print(table)


@click.command("inspect")
@click.argument("path", required=False, type=click.Path(dir_okay=True))
@click.option("--dataset", help="a named dataset: shipped (cora…), OGB (ogbn-…), reddit, or a preset")
@click.option("--root", default="datasets", show_default=True, help="where OGB / reddit data live")
@click.option("--symmetrize", is_flag=True, help="add every missing reverse edge (A ∪ Aᵀ)")
@click.option("--json", "as_json", is_flag=True, help="one JSON object on stdout")
def command(path, dataset, root, symmetrize, as_json):
    """Load a graph (Matrix Market, .npz, edge list, or --dataset NAME) and show its features."""
    if (path is None) == (dataset is None):
        raise AutosageError("give exactly one of PATH or --dataset NAME")
    # Imported here, not at module level: they pull in SciPy and pandas, which `autosage --help`
    # and the other commands do not need.
    from ..features import compute_features
    from ..graphs.load import load_graph

    err = stderr_console()
    started = time.perf_counter()
    with step(err, f"loading {path or dataset}"):
        graph = load_graph(path=path, dataset=dataset, root=root, symmetrize=symmetrize)
        loaded = time.perf_counter()
        features = compute_features(graph)
        fingerprint = graph.fingerprint
    err.print(f"loaded {graph.describe()} in {loaded - started:.2f} s, "
              f"features and fingerprint in {time.perf_counter() - loaded:.2f} s")
    doc = {"name": str(dataset or path), **features.to_dict(), "fingerprint": fingerprint,
           "source": graph.source}
    if as_json:
        click.echo(json.dumps(doc))
    else:
        render(doc, Console())
