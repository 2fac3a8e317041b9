"""Benchmark arithmetic and files: geomeans, probe agreement, targets, results.csv / results.json,
the run README and the rich summary.

The arithmetic is pure functions over `Row`s so it is tested on CPU; the files render the same rows
(CSV and JSON carry identical columns, §9's first). A run directory can collect several runs
(`autosage bench --out DIR` twice, e.g. the kernels and the attention suites in separate ≤10-minute
GPU calls): `merge_rows` keeps the newest row per (graph, op, K, heads, backend, decision[, schedule]),
which is fair because every row carries the vendor time measured side by side with it (§1).
"""
from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from ..errors import AutosageError
from .rows import ALL_COLUMNS, Row

AGREEMENT_TOLERANCE = 0.05        # a probe choice within 5% of the oracle's time counts as agreeing
ATTENTION_TARGET_GRAPHS = ("reddit-like", "products-like")   # issue 5: d = 64, H ∈ {1, 8}
ATTENTION_TARGET_D = 64


# ----------------------------------------------------------------------------- arithmetic

def geomean(values: Iterable[float]) -> float:
    """Geometric mean of the finite positive values; NaN when there are none."""
    logs = [math.log(v) for v in values if v is not None and math.isfinite(v) and v > 0]
    return math.exp(sum(logs) / len(logs)) if logs else math.nan


def probe_agrees(probe: tuple[str, str], probe_ms: float, oracle: tuple[str, str], oracle_ms: float,
                 tolerance: float = AGREEMENT_TOLERANCE) -> bool:
    """The probe agrees with the oracle when it chose the same (backend, schedule), or a choice whose
    full-graph time is within `tolerance` of the oracle's (both timed side by side in the run)."""
    if tuple(probe) == tuple(oracle):
        return True
    if not (math.isfinite(probe_ms) and math.isfinite(oracle_ms)) or oracle_ms <= 0:
        return False
    return probe_ms <= (1.0 + tolerance) * oracle_ms


def is_main(row: Row) -> bool:
    """The autosage row of a case: what a user gets (a fresh probe or a cache hit)."""
    return row.backend == "autosage" and row.decision in ("probe", "cache")


def agreement(rows: Iterable[Row]) -> tuple[int, int]:
    """(agreeing, compared) over autosage rows that have an oracle to compare with."""
    marks = [r.probe_agrees for r in rows if is_main(r) and r.probe_agrees in ("yes", "no")]
    return sum(m == "yes" for m in marks), len(marks)


def case_key(row: Row) -> tuple:
    return (row.graph, row.op, row.k, row.heads)


def attention_kind(schedule: str) -> str | None:
    """"fused" or "unfused" for a native attention schedule name (op.family....), else None. The
    unfused pipelines are the families named *unfused* / *pipeline*; every other attention family
    is a fused kernel."""
    parts = schedule.split(".")
    if len(parts) < 2 or parts[0] != "attention":
        return None
    return "unfused" if ("unfused" in parts[1] or "pipeline" in parts[1]) else "fused"


@dataclass(frozen=True)
class GroupSummary:
    op: str
    graph: str
    cases: int
    geomean: float        # autosage speed-up vs best vendor
    worst: float
    worst_k: int
    failed: int           # autosage rows that failed or were wrong


def group_summaries(rows: list[Row]) -> list[GroupSummary]:
    groups: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for r in rows:
        if is_main(r):
            groups[(r.op, r.graph)].append(r)
    out = []
    for (op, graph), rs in sorted(groups.items()):
        timed = [r for r in rs if math.isfinite(r.speedup_vs_best_vendor)]
        worst = min(timed, key=lambda r: r.speedup_vs_best_vendor, default=None)
        out.append(GroupSummary(op, graph, len(rs), geomean(r.speedup_vs_best_vendor for r in rs),
                                worst.speedup_vs_best_vendor if worst else math.nan,
                                worst.k if worst else 0, sum(r.status != "ok" for r in rs)))
    return out


@dataclass(frozen=True)
class Target:
    name: str
    value: float
    threshold: float
    detail: str
    measured: bool

    @property
    def met(self) -> bool:
        return self.measured and math.isfinite(self.value) and self.value >= self.threshold

    @property
    def verdict(self) -> str:
        return "NOT MEASURED" if not self.measured else ("MET" if self.met else "MISSED")

    def to_dict(self) -> dict:
        return {"name": self.name, "value": _finite(self.value), "threshold": self.threshold,
                "verdict": self.verdict, "detail": self.detail}


def _target(name: str, values: list[float], threshold: float, how: str, detail: str = "",
            gaps: str = "") -> Target:
    """`gaps` says which cases could not be measured and why (shown whether or not others were)."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return Target(name, math.nan, threshold, gaps or detail or "no rows", False)
    value = geomean(values) if how == "geomean" else min(values)
    text = f"{how} of {len(values)} rows" + (f"; {detail}" if detail else "") + (f"; {gaps}" if gaps else "")
    return Target(name, value, threshold, text, True)


def _vendors(main: list[Row], rows: list[Row] | None = None) -> str:
    """'vs alg1 ×3, alg3 ×5': which vendor was the best in the rows a target covers (and, given
    all rows, which provider ran it, e.g. torch.sparse.sampled_addmm)."""
    names: dict[str, int] = defaultdict(int)
    for r in main:
        if r.best_vendor:
            names[r.best_vendor] += 1
    text = ", ".join(f"{n} ×{c}" for n, c in sorted(names.items()))
    providers = sorted({r.provider for r in rows or [] if r.backend in names and r.provider})
    return ("vs " + text if text else "") + (f" ({', '.join(providers)})" if providers else "")


def _worst(main: list[Row]) -> str:
    timed = [r for r in main if math.isfinite(r.speedup_vs_best_vendor)]
    if not timed:
        return ""
    w = min(timed, key=lambda r: r.speedup_vs_best_vendor)
    return f"worst: {w.graph} K={w.k} ({w.schedule} vs {w.best_vendor})"


def _attention_cases(rows: list[Row]) -> list[dict]:
    """Per attention case at d = 64 on the target graphs (all attention cases at d = 64 when those
    graphs are absent): the best fused and unfused native times, PyG and the best vendor."""
    att = [r for r in rows if r.op == "attention" and r.k == ATTENTION_TARGET_D]
    if any(r.graph in ATTENTION_TARGET_GRAPHS for r in att):
        att = [r for r in att if r.graph in ATTENTION_TARGET_GRAPHS]
    cases: dict[tuple, dict] = defaultdict(lambda: {"fused": math.inf, "unfused": math.inf,
                                                    "pyg": math.nan, "vendor": math.nan})
    for r in att:
        c = cases[case_key(r)]
        ok = r.status == "ok" and math.isfinite(r.ms_median)
        kind = attention_kind(r.schedule) if r.backend in ("native", "autosage") else None
        if ok and kind:
            c[kind] = min(c[kind], r.ms_median)
        if ok and r.backend == "pyg":
            c["pyg"] = r.ms_median
        elif r.backend == "pyg" and r.error:
            c["pyg_reason"] = f"PyG {r.status} on {r.graph} H={r.heads}: {r.error}"
        if math.isfinite(r.best_vendor_ms):
            c["vendor"] = r.best_vendor_ms
    return [dict(v, case=k) for k, v in sorted(cases.items())]


def evaluate_targets(rows: list[Row]) -> list[Target]:
    """The issue's targets, each MET / MISSED / NOT MEASURED with its number."""
    main = [r for r in rows if is_main(r)]
    spmm = [r for r in main if r.op == "spmm"]
    sddmm = [r for r in main if r.op == "sddmm"]
    sp = lambda rs: [r.speedup_vs_best_vendor for r in rs]  # noqa: E731
    small = [r for r in spmm if r.k <= 16]
    targets = [
        _target("SpMM geomean speed-up vs best cuSPARSE", sp(spmm), 1.5, "geomean", _vendors(spmm)),
        _target("SpMM geomean speed-up at K <= 16", sp(small), 2.0, "geomean", _vendors(small)),
        _target("SpMM worst row vs best cuSPARSE", sp(spmm), 0.97, "min", _worst(spmm)),
        # The SDDMM vendor is cusparseSDDMM when nvmath or torch provides it, else the gather-dot
        # composition: the detail names the provider so a MET against gather-dot is not misread.
        _target("SDDMM geomean speed-up vs cusparseSDDMM", sp(sddmm), 2.0, "geomean",
                _vendors(sddmm, rows)),
    ]
    cases = _attention_cases(rows)
    names = sorted({c["case"][0] for c in cases})
    where = f"d={ATTENTION_TARGET_D} on {', '.join(names)}" if names else ""
    ratio = lambda base, ours: base / ours if math.isfinite(ours) and base > 0 else math.nan  # noqa: E731
    targets += [
        _target("Attention fused vs PyG", [ratio(c["pyg"], c["fused"]) for c in cases], 25.0, "min", where,
                gaps="; ".join(c["pyg_reason"] for c in cases if "pyg_reason" in c)),
        _target("Attention fused vs best unfused vendor",
                [ratio(c["vendor"], c["fused"]) for c in cases], 3.0, "min", where),
        _target("Attention fused vs our unfused", [ratio(c["unfused"], c["fused"]) for c in cases],
                1.5, "min", where),
    ]
    agreed, compared = agreement(rows)
    targets.append(Target("Probe agrees with oracle", agreed / compared if compared else math.nan, 0.9,
                          f"{agreed} of {compared} cases (same choice or within 5%)", compared > 0))
    bad = [r for r in main if r.status != "ok"]
    targets.append(Target("Autosage rows verified", 1.0 - len(bad) / len(main) if main else math.nan,
                          1.0, f"{len(main) - len(bad)} of {len(main)} rows", bool(main)))
    return targets


def summary_dict(rows: list[Row], out_dir: str | None = None) -> dict:
    """The machine-readable summary (`autosage bench --json`)."""
    agreed, compared = agreement(rows)
    return {
        "out": out_dir,
        "rows": len(rows),
        "failed_rows": sum(r.status in ("wrong", "failed") for r in rows),
        "unverified_rows": sum(r.status == "unverified" for r in rows),
        "skipped_rows": sum(r.status == "skipped" for r in rows),
        "groups": [{"op": g.op, "graph": g.graph, "cases": g.cases, "geomean": _finite(g.geomean),
                    "worst": _finite(g.worst), "worst_k": g.worst_k, "failed": g.failed}
                   for g in group_summaries(rows)],
        "probe_agreement": {"agreed": agreed, "compared": compared,
                            "rate": _finite(agreed / compared) if compared else None},
        "targets": [t.to_dict() for t in evaluate_targets(rows)],
    }


# ----------------------------------------------------------------------------- files

def _finite(x):
    """JSON has no NaN/inf: NaN -> null, ±inf -> "inf"/"-inf" (Row.from_dict reads both back)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


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
           "rows": [{k: _finite(v) for k, v in r.to_dict().items()} for r in rows]}
    if runs:
        doc["runs"] = runs
    tmp = Path(path).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
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
    # Native rows are one per schedule; autosage and vendor rows are one per case and decision.
    return (*case_key(row), row.backend, row.decision, row.schedule if row.backend == "native" else "")


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
        unit = "" if "agree" in t.name or "verified" in t.name else "×"
        lines.append(f"| {t.name} | {_fmt(t.value, unit)} | {t.threshold:g}{unit} | **{t.verdict}** "
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
              "- Rows: `results.csv` / `results.json` (BENCHMARK.md §9 columns first, extra columns "
              "after). Speed-ups are measured side by side in one process (§1): CUDA-event medians, "
              "p20/p80 in the CSV.",
              "- `autosage` rows are what a user gets: the scheduler's choice (`decision` probe, or "
              "cache on a hit) run on the full graph; `oracle` rows tune on the full graph. The probe "
              "agrees when it chose the same backend and schedule, or one within 5% of the oracle's time.",
              "- Every output is checked against the best vendor output (`rel_error`, limit 1e-4); a "
              "row that fails is marked (`status`) and never timed.",
              "- Compulsory bytes (§5): indptr + indices + values + dense inputs once + output once "
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
        unit = "" if "agree" in t.name or "verified" in t.name else "×"
        verdicts.add_row(t.name, _fmt(t.value, unit), f"{t.threshold:g}{unit}",
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
    from .plots import draw_plots

    plots = draw_plots(rows, Path(out_dir))
    (Path(out_dir) / "README.md").write_text(readme_text(rows, environment, plots, runs, partial))
    return plots
