"""PNG plots of a results table (matplotlib, Agg canvas: no display, no global backend switch).

Per op, two figures:
  speedup_<op>.png    autosage speed-up vs the best vendor against K (log2 axis), a line per graph
                      (per graph and head count for attention), with the 1× line and the op's target.
  bandwidth_<op>.png  effective bandwidth (compulsory bytes / time) as a fraction of the copy
                      bandwidth measured in the same run: autosage solid, best vendor dashed.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from .. import ops as op_specs
from .rows import Row
from .targets import is_main

# The line drawn on each op's speed-up plot (the geomean speed-up target for that op).
SPEEDUP_TARGET = {"spmm": 1.5, "sddmm": 2.0, "attention": 3.0}


def _figure(width: float = 7.0, height: float = 4.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _label(row: Row) -> str:
    spec = op_specs.SPECS.get(row.op)     # a results file may hold an op this version lacks
    return f"{row.graph} H={row.heads}" if spec is not None and spec.multi_head else row.graph


def _series(rows: list[Row], value) -> dict[str, list[tuple[int, float]]]:
    """label -> sorted [(K, value)] over the finite values."""
    lines: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        v = value(r)
        if v is not None and math.isfinite(v):
            lines[_label(r)].append((r.k, v))
    return {label: sorted(points) for label, points in sorted(lines.items())}


def _finish(fig, ax, ks: list[int], title: str, ylabel: str, path: Path) -> None:
    ax.set_xscale("log", base=2)
    if ks:
        ax.set_xticks(sorted(set(ks)))
        ax.set_xticklabels([str(k) for k in sorted(set(ks))])
    ax.set_xlabel("K (feature width; d for attention)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best", ncol=2)
    fig.tight_layout()
    fig.savefig(path, format="png")


def plot_speedup(rows: list[Row], op: str, path: Path) -> bool:
    main = [r for r in rows if r.op == op and is_main(r)]
    lines = _series(main, lambda r: r.speedup_vs_best_vendor)
    if not lines:
        return False
    fig, ax = _figure()
    for label, points in lines.items():
        ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=label)
    ax.axhline(1.0, color="black", linewidth=0.8, label="best vendor (1×)")
    if op in SPEEDUP_TARGET:
        ax.axhline(SPEEDUP_TARGET[op], color="gray", linestyle=":", label=f"target {SPEEDUP_TARGET[op]}×")
    _finish(fig, ax, [r.k for r in main], f"{op}: autosage speed-up vs best vendor",
            "speed-up (×)", path)
    return True


def _fraction(r: Row) -> float:
    return r.effective_tbps / r.copy_tbps if r.copy_tbps > 0 else math.nan


def plot_bandwidth(rows: list[Row], op: str, path: Path) -> bool:
    ours = [r for r in rows if r.op == op and is_main(r)]
    vendor = [r for r in rows if r.op == op and r.backend == r.best_vendor and r.decision == "fixed"]
    ours_lines, vendor_lines = _series(ours, _fraction), _series(vendor, _fraction)
    if not ours_lines and not vendor_lines:
        return False
    fig, ax = _figure()
    colors = {}
    for label, points in ours_lines.items():
        (line,) = ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=label)
        colors[label] = line.get_color()
    for label, points in vendor_lines.items():
        ax.plot([k for k, _ in points], [v for _, v in points], linestyle="--", marker="x",
                color=colors.get(label), label=f"{label} (best vendor)")
    ax.axhline(1.0, color="black", linewidth=0.8)
    _finish(fig, ax, [r.k for r in ours + vendor], f"{op}: effective bandwidth / copy bandwidth",
            "fraction of copy bandwidth", path)
    return True


def draw_plots(rows: list[Row], out_dir: Path) -> list[str]:
    """Draw every plot the rows support into out_dir; returns the file names written."""
    out_dir = Path(out_dir)
    written = []
    for op in sorted({r.op for r in rows}):
        for name, draw in ((f"speedup_{op}.png", plot_speedup), (f"bandwidth_{op}.png", plot_bandwidth)):
            if draw(rows, op, out_dir / name):
                written.append(name)
    return written
