"""Benchmark files and rendering: results.csv / results.json, the run README and the rich summary.

The files render the same rows (CSV and JSON carry identical columns, the schema's first); the arithmetic
behind the README and the tables (geomeans, agreement, targets) is in `bench.targets` and re-exported
here. A run directory can collect several runs (`autosage bench --out DIR` twice, e.g. the kernels
and the attention suites in separate ≤10-minute GPU calls): `merge_rows` keeps the newest row per
(graph, op, K, heads, backend, decision[, schedule]), which is fair because every row carries the
vendor time measured side by side with it in the same process.
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from pathlib import Path

from ..errors import AutosageError
from .plots import draw_plots
from .rows import ALL_COLUMNS, Row, json_value
from .targets import (AGREEMENT_TOLERANCE, GroupSummary, Target, agreement, attention_kind, case_key,
                      MINIBATCH_PREFIX, TRAINING_MODES, TRAINING_PREFIX, evaluate_targets, geomean,
                      group_summaries, is_main, probe_agrees)

__all__ = ["AGREEMENT_TOLERANCE", "GroupSummary", "Target", "agreement", "attention_kind", "case_key",
           "evaluate_targets", "geomean", "group_summaries", "is_main", "probe_agrees", "summary_dict",
           "write_csv", "write_json", "read_rows", "read_runs", "merge_rows", "readme_text",
           "render_summary", "write_run_dir", "write_plots_and_readme"]


def summary_dict(rows: list[Row], out_dir: str | None = None) -> dict:
    """The machine-readable summary (`autosage bench --json`)."""
    agreed, compared = agreement(rows)
    return {
        "out": out_dir,
        "rows": len(rows),
        "failed_rows": sum(r.status in ("wrong", "failed") for r in rows),
        "unverified_rows": sum(r.status == "unverified" for r in rows),
        "skipped_rows": sum(r.status == "skipped" for r in rows),
        "groups": [{"op": g.op, "graph": g.graph, "cases": g.cases, "geomean": json_value(g.geomean),
                    "worst": json_value(g.worst), "worst_k": g.worst_k, "failed": g.failed}
                   for g in group_summaries(rows)],
        "probe_agreement": {"agreed": agreed, "compared": compared,
                            "rate": json_value(agreed / compared) if compared else None},
        "targets": [t.to_dict() for t in evaluate_targets(rows)],
    }


# ----------------------------------------------------------------------------- files

def write_csv(rows: list[Row], path: Path) -> None:
    tmp = Path(path).with_suffix(".csv.tmp")
    with open(tmp, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=ALL_COLUMNS)
        writer.writeheader()
        for r in rows:
            writer.writerow(r.to_dict())
    tmp.replace(path)  # readers never see a half-written file


def write_json(rows: list[Row], environment: dict, path: Path, runs: list | None = None) -> None:
    doc = {"environment": environment, "columns": list(ALL_COLUMNS),
           "rows": [{k: json_value(v) for k, v in r.to_dict().items()} for r in rows]}
    if runs:
        doc["runs"] = runs
    tmp = Path(path).with_suffix(".json.tmp")
    # compact: an exhaustive suite is ~9000 rows, and indented they were 13.6 MB, a fifth of it
    # blanks; people read results.csv and README.md, programs read this
    tmp.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    tmp.replace(path)


def read_rows(path: Path) -> list[Row]:
    """Rows from a results.csv or results.json; a missing or malformed file is an AutosageError."""
    path = Path(path)
    if not path.is_file():
        raise AutosageError(f"results file {path} not found")
    try:
        if path.suffix == ".json":
            return [Row.from_dict(d) for d in json.loads(path.read_text())["rows"]]
        with open(path, newline="") as fh:
            return [Row.from_dict(d) for d in csv.DictReader(fh)]
    except (ValueError, KeyError, TypeError, json.JSONDecodeError) as exc:
        raise AutosageError(f"{path} is not an autosage results file: {exc}") from None


def read_runs(path: Path) -> tuple[dict, list]:
    """(environment, runs) recorded in a results.json, or ({}, []) when there is none."""
    try:
        doc = json.loads(Path(path).read_text())
        return doc.get("environment") or {}, doc.get("runs") or []
    except (OSError, ValueError):
        return {}, []


def row_identity(row: Row) -> tuple:
    # Native rows are one per schedule; autosage and vendor rows are one per case and decision,
    # training and mini-batch rows also one per mode of their own (captured, compiled) beside the eager one.
    own = row.backend == "native" or (row.op.startswith((TRAINING_PREFIX, MINIBATCH_PREFIX))
                                      and row.schedule in TRAINING_MODES)
    return (*case_key(row), row.backend, row.decision, row.schedule if own else "", row.reorder)


def merge_rows(old: list[Row], new: list[Row]) -> list[Row]:
    """old ∪ new, the newer row winning on the same identity; order: old first, then new."""
    replaced = {row_identity(r) for r in new}
    return [r for r in old if row_identity(r) not in replaced] + list(new)


def _fmt(x: float, unit: str = "×") -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.2f}{unit}"


def readme_text(rows: list[Row], environment: dict, plots: list[str], runs: list | None = None,
                partial: bool = False) -> str:
    targets = evaluate_targets(rows)
    env = environment or {}
    dev, sw = env.get("device") or {}, env.get("software") or {}
    lines = ["# autosage benchmark results", ""]
    if partial:
        lines += ["**Partial run**: interrupted before the suite finished; the rows below are the "
                  "cases that completed.", ""]
    lines += ["## Environment", "", "| | |", "|---|---|"]
    for key, value in (("GPU", dev.get("name")), ("compute capability", dev.get("compute_capability")),
                       ("SMs", dev.get("sms")), ("driver", sw.get("driver")),
                       ("CUDA runtime", sw.get("cuda_runtime")), ("CuPy", sw.get("cupy")),
                       ("cuSPARSE", sw.get("cusparse")), ("commit", env.get("commit")),
                       ("copy bandwidth", _copy_tbps(rows))):
        lines.append(f"| {key} | {value if value not in (None, '') else 'n/a'} |")
    for run in runs or []:
        lines.append(f"| run | `{run.get('command', '')}` at {run.get('timestamp', '')}, "
                     f"seed {run.get('seed', '')} |")
    lines += ["", "## Targets", "", "| target | measured | threshold | verdict | over |",
              "|---|---|---|---|---|"]
    for t in targets:
        lines.append(f"| {t.name} | {_fmt(t.value, t.unit)} | {t.bound} | **{t.verdict}** "
                     f"| {t.detail} |")
    lines += ["", "## Autosage speed-up vs best vendor, per op and graph", "",
              "| op | graph | cases | geomean | worst (K) | failed |", "|---|---|---|---|---|---|"]
    for g in group_summaries(rows):
        lines.append(f"| {g.op} | {g.graph} | {g.cases} | {_fmt(g.geomean)} | {_fmt(g.worst)} "
                     f"({g.worst_k}) | {g.failed} |")
    bad = [r for r in rows if r.status not in ("ok", "skipped")]
    if bad:
        lines += ["", f"## Rows that failed or did not verify ({len(bad)})", "",
                  "| graph | op | K | H | backend | schedule | status | error |", "|---|---|---|---|---|---|---|---|"]
        for r in bad:
            lines.append(f"| {r.graph} | {r.op} | {r.k} | {r.heads} | {r.backend} | {r.schedule} | "
                         f"{r.status} | {r.error.replace('|', '/')} |")
    skipped: dict[tuple[str, str, str], int] = defaultdict(int)
    for r in rows:
        if r.status == "skipped":
            skipped[(r.op, r.backend, r.error)] += 1
    if skipped:
        lines += ["", "## Baselines skipped", "", "| op | backend | rows | why |", "|---|---|---|---|"]
        for (op, backend, why), count in sorted(skipped.items()):
            lines.append(f"| {op} | {backend} | {count} | {why.replace('|', '/')} |")
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p}]({p})" for p in plots]
    lines += ["", "## How to read this", "",
              "- Rows: `results.csv` / `results.json` (the results schema's columns first, extra columns "
              "after). Speed-ups are measured side by side in one process: CUDA-event medians, "
              "p20/p80 in the CSV.",
              "- `autosage` rows are what a user gets: the scheduler's choice (`decision` probe, or "
              "cache on a hit) run on the full graph; `oracle` rows tune on the full graph. The probe "
              "agrees when it chose the same backend and schedule, or one within 5% of the oracle's time.",
              "- Every output is checked against the best vendor output (`rel_error`, limit 1e-4); a "
              "row that fails is marked (`status`) and never timed.",
              "- Compulsory bytes: indptr + indices + values + dense inputs once + output once "
              "(spmm: B, C; sddmm: X, Y, out; attention: Q, K, V, O). Effective bandwidth = those "
              "bytes / median time, plotted as a fraction of the copy bandwidth measured in the run.",
              ""]
    return "\n".join(lines)


def _copy_tbps(rows: list[Row]) -> str:
    values = sorted({round(r.copy_tbps, 3) for r in rows if math.isfinite(r.copy_tbps)})
    return ", ".join(f"{v:.2f} TB/s" for v in values) if values else "n/a"


def render_summary(console, rows: list[Row]) -> None:
    """Rich tables: geomean speed-up per op and graph, worst case, failures, then the targets."""
    from rich.table import Table

    table = Table(title="autosage vs best vendor (speed-up)")
    for col in ("op", "graph", "cases", "geomean", "worst (K)", "failed"):
        table.add_column(col, justify="right" if col not in ("op", "graph") else "left")
    for g in group_summaries(rows):
        table.add_row(g.op, g.graph, str(g.cases), _fmt(g.geomean), f"{_fmt(g.worst)} ({g.worst_k})",
                      str(g.failed))
    console.print(table)
    verdicts = Table(title="targets")
    for col in ("target", "measured", "threshold", "verdict", "over"):
        verdicts.add_column(col)
    style = {"MET": "green", "MISSED": "red", "NOT MEASURED": "yellow"}
    for t in evaluate_targets(rows):
        verdicts.add_row(t.name, _fmt(t.value, t.unit), t.bound,
                         f"[{style[t.verdict]}]{t.verdict}[/]", t.detail)
    console.print(verdicts)


def write_run_dir(out_dir: Path, rows: list[Row], environment: dict, runs: list | None = None,
                  partial: bool = False) -> list[str]:
    """results.csv, results.json, the PNG plots and README.md; returns the plot file names."""
    out_dir = Path(out_dir)
    write_csv(rows, out_dir / "results.csv")
    write_json(rows, environment, out_dir / "results.json", runs)
    return write_plots_and_readme(out_dir, rows, environment, runs, partial)


def write_plots_and_readme(out_dir: Path, rows: list[Row], environment: dict, runs: list | None = None,
                           partial: bool = False) -> list[str]:
    plots = draw_plots(rows, Path(out_dir))
    (Path(out_dir) / "README.md").write_text(readme_text(rows, environment, plots, runs, partial))
    return plots
