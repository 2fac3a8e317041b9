"""The mini-batch suite's targets from its rows (CPU, hand-made rows): our step against PyG's
fastest mode per model, a new batch against the floor (the worst row), the first step, and the
losses; none of them when the suite's rows are absent."""
from __future__ import annotations

import math

from autosage_cli.bench.rows import Row
from autosage_cli.bench.targets import training_targets


def _row(op, backend, ms, *, floor=math.nan, first=math.nan, speedup=math.nan, rel=math.nan,
         graph="products-like", status="ok"):
    return Row(graph=graph, n_rows=10, nnz=20, op=op, k=256, heads=1, dtype="float32", backend=backend,
               schedule="graph", decision="probe" if backend == "autosage" else "fixed",
               ms_median=ms, floor_ms=floor, first_step_ms=first, speedup_vs_best_vendor=speedup,
               rel_error=rel, status=status)


def test_minibatch_targets_read_the_rows():
    rows = [_row("minibatch-sage", "autosage", 12.0, floor=10.0, first=800.0, speedup=1.3, rel=1e-5),
            _row("minibatch-sage", "pyg", 15.6),
            _row("minibatch-gcn", "autosage", 6.0, floor=4.0, first=1200.0, speedup=1.5, rel=2e-3),
            _row("minibatch-gcn", "pyg", 9.0)]
    got = {t.name: t for t in training_targets(rows)}
    assert got["GraphSAGE mini-batch step vs PyG"].met and got["GraphSAGE mini-batch step vs PyG"].value == 1.3
    assert not got["GCN mini-batch step vs PyG"].met                     # 1.5 < 1.6
    over = got["Mini-batch step on a new batch vs the same batch again (floor)"]
    assert over.value == 1.5 and not over.met and "minibatch-gcn" in over.detail
    first = got["Mini-batch first step (tuning included)"]
    assert first.value == 1200.0 and not first.met
    loss = got["Mini-batch loss equal to PyG's after the same steps (relative)"]
    assert loss.value == 2e-3 and not loss.met
    assert not any(t.name.startswith(("GCN training", "Training loss")) for t in got.values())


def test_no_minibatch_rows_no_minibatch_targets():
    rows = [_row("train-gcn", "autosage", 2.0, speedup=1.4, rel=1e-6), _row("train-gcn", "pyg", 2.8)]
    names = {t.name for t in training_targets(rows)}
    assert "GCN training epoch vs PyG" in names
    assert not any("ini-batch" in n for n in names)
