"""The checks `autosage bench` makes before it asks for a GPU, and the case list `--dry-run` shows.

Every run checks each synthetic preset's parameters and memory budget (from its parameters, nothing
generated) and each graph file's header and budget (no data read). A dry run also loads every file
and named dataset, so their content is validated, and lists every case with its size and estimated
memory.
"""
from __future__ import annotations

from pathlib import Path

from ..bench.suites import GraphWork
from .dry_run import PlannedCase
from .progress import step, stderr_console


def _preset_size(preset: str) -> tuple[int, int]:
    from ..graphs import synthetic
    return synthetic.check_budget(preset)


def check_work(work: list[GraphWork]) -> None:
    """Presets' parameters and budgets, files' headers and budgets; AutosageError on the first
    problem."""
    from ..graphs.readers import check_graph_file

    for w in work:
        if w.spec.preset:
            _preset_size(w.spec.preset)
        elif w.spec.path:
            check_graph_file(Path(w.spec.path))


def plan_work(work: list[GraphWork], root: str, seed: int) -> list[PlannedCase]:
    """Every case of the run with its graph's size; files and named datasets are loaded (validated),
    presets are sized from their parameters."""
    from ..graphs.load import load_graph

    err = stderr_console()
    planned = []
    for w in work:
        spec = w.spec
        if spec.preset:
            n, nnz = _preset_size(spec.preset)
            size, exact = (n, n, nnz), False
        else:
            with step(err, f"{spec.label}: loading"):   # ogbn-products: a minute
                graph = (load_graph(path=spec.path) if spec.path else load_graph(dataset=spec.dataset, root=root))
            size, exact = (graph.n_rows, graph.n_cols, graph.nnz), True
            del graph
        planned += [PlannedCase.of(spec.label, *size, c.op, c.k, c.heads, exact=exact, dtype=c.dtype)
                    for c in w.cases]
    return planned
