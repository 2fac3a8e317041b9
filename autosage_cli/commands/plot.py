"""`autosage plot results.csv [more.csv ...] [--out DIR]`: redraw the PNG plots and the README summary
from one or more results files (several runs' CSVs merge, later files winning on the same row)."""
from __future__ import annotations

from pathlib import Path

import click

from ..errors import AutosageError
from .bench import check_writable, make_dir


@click.command("plot")
@click.argument("results", nargs=-1, required=True, metavar="RESULTS.csv...")
@click.option("--out", "out_dir", default=None, metavar="DIR",
              help="Where to write the plots and README.md (default: the first file's directory).")
def command(results, out_dir):
    """Redraw plots and README.md from results.csv (or results.json) files."""
    from ..bench import report   # imported when the command runs: `autosage` lists it without

    rows: list = []
    for path in results:
        if Path(path).is_dir():
            raise AutosageError(f"{path} is a directory, not a results file (give its results.csv)")
        rows = report.merge_rows(rows, report.read_rows(Path(path)))
    if not rows:
        raise AutosageError(f"no rows in {', '.join(results)}")
    first = Path(results[0])
    out = Path(out_dir) if out_dir else first.parent
    check_writable(out)
    make_dir(out)
    environment, runs = report.read_runs(first.with_name("results.json"))
    plots = report.write_plots_and_readme(out, rows, environment, runs)
    for name in plots + ["README.md"]:
        click.echo(str(out / name))
