"""The training suite's mode rows on the CPU, from fake runs (training.bench_graph replaced): PyG's
eager, `compiled` and `reduce-overhead` rows, ours `graph`, `captured`, `compiled` and
`reduce-overhead`, each mode's baseline, the reasons kept on skipped rows, results.csv merging one
row per mode, and the targets still judged on the eager rows. A slow smoke run trains GCN on cora
in every mode for real (compiled on the CPU; the CUDA-graph modes are skipped there with their
reason)."""
from __future__ import annotations

import math

import pytest

from autosage_cli.bench import report, targets
from autosage_cli.bench.rows import Row
from autosage_cli.bench.suites import resolve_graph
from bench_fakes import FakeSpec

torch = pytest.importorskip("torch", reason="torch is not installed: the training suite needs it")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: no PyG baseline")

from autosage_cli.commands import bench_training  # noqa: E402
from autosage_cli.torch import training  # noqa: E402


def _run(library, mode, ms, losses=(2.0, 1.5), status="ok", error=""):
    if status != "ok":
        return training.Run(library, mode, status=status, error=error)
    return training.Run(library, mode, times_ms=[ms, ms * 0.9, ms * 1.1], losses=list(losses), setup_ms=50.0)


def _fake_bench_graph(pyg_compiled_ms=None, captured=True, edge_index=None, control=False):
    """bench_graph's stand-in: PyG eager 10 ms on sparse CSR (and, with `edge_index`, a second eager
    row of that mode: its ms, or its skip reason), compiled at pyg_compiled_ms (else skipped with a
    reason), reduce-overhead 8 ms; ours 5 ms eager, 2 ms captured (or failed), 4 ms compiled, 1 ms
    reduce-overhead; with `control`, the graph-free control last: 1 ms eager, 1.6 ms compiled, 0.5 ms
    reduce-overhead."""
    def bench_graph(name, graph, models, *, steps, warmup, seed, dtype, modes):
        assert modes == training.MODES
        for model in models:
            second = ([] if edge_index is None else
                      [_run("pyg", "edge-index", edge_index, (2.0, 0.999)) if not isinstance(edge_index, str)
                       else _run("pyg", "edge-index", 0, status="skipped", error=edge_index)])
            theirs = [_run("pyg", "sparse-csr", 10.0, (2.0, 1.0)), *second,
                      _run("pyg", "compiled", pyg_compiled_ms, (2.0, 1.0)) if pyg_compiled_ms else
                      _run("pyg", "compiled", 0, status="skipped",
                           error="torch.compile (sparse-csr): Unsupported: sparse tensors"),
                      _run("pyg", "reduce-overhead", 8.0, (2.0, 1.0))]
            ours = [_run("autosage", "graph", 5.0, (2.0, 1.0001)),
                    _run("autosage", "captured", 2.0, (2.0, 1.0002)) if captured else
                    _run("autosage", "captured", 0, status="failed",
                         error="AutosageError: capturing the training step failed: no"),
                    _run("autosage", "compiled", 4.0, (2.0, 1.0)),
                    _run("autosage", "reduce-overhead", 1.0, (2.0, 1.0))]
            yield model, theirs, ours
        if control:
            yield training.CONTROL, [], [_run("torch", "graph", 1.0), _run("torch", "compiled", 1.6),
                                         _run("torch", "reduce-overhead", 0.5)]
    return bench_graph


def _rows(monkeypatch, tmp_path, models=("gcn",), **fake):
    monkeypatch.setattr(training, "bench_graph", _fake_bench_graph(**fake))
    params = {"root": "datasets", "seed": 0, "cache_path": str(tmp_path / "d.json")}
    return bench_training.run_graphs([FakeSpec()], models, 4, params, {"gpu": "fake"}, tmp_path, [],
                                     device="cpu")


def test_one_row_per_library_and_mode_with_its_baseline(monkeypatch, tmp_path):
    rows = _rows(monkeypatch, tmp_path)
    assert [(r.backend, r.schedule, r.status) for r in rows] == [
        ("pyg", "sparse-csr", "ok"), ("pyg", "compiled", "skipped"), ("pyg", "reduce-overhead", "ok"),
        ("autosage", "graph", "ok"), ("autosage", "captured", "ok"), ("autosage", "compiled", "ok"),
        ("autosage", "reduce-overhead", "ok")]
    pyg, pyg_compiled, pyg_ro, eager, captured, compiled, ours_ro = rows
    assert pyg_compiled.error == "torch.compile (sparse-csr): Unsupported: sparse tensors"
    assert all(r.op == "train-gcn" and r.k == 256 and r.heads == 1 for r in rows)
    assert (eager.best_vendor, eager.best_vendor_ms) == ("pyg", 10.0)      # eager vs eager
    for mine, ms in ((captured, 2.0), (compiled, 4.0), (ours_ro, 1.0)):    # vs PyG's fastest: its 8 ms
        assert (mine.best_vendor, mine.best_vendor_ms) == ("pyg-reduce-overhead", 8.0)
        assert math.isclose(mine.speedup_vs_best_vendor, 8.0 / ms)
    assert math.isclose(captured.rel_error, 2e-4, rel_tol=1e-6)   # against PyG's eager last loss
    assert captured.decision == "probe" and pyg_compiled.decision == "fixed"
    assert [Row.from_dict(r.to_dict()) for r in rows] == rows      # the schema round-trips


def test_the_fastest_pyg_mode_is_the_baseline_of_the_captured_and_compiled_rows(monkeypatch, tmp_path):
    _, pyg_compiled, _, eager, captured, compiled, _ = _rows(monkeypatch, tmp_path, pyg_compiled_ms=3.0)
    assert pyg_compiled.status == "ok" and pyg_compiled.ms_median == 3.0
    assert (eager.best_vendor, eager.best_vendor_ms) == ("pyg", 10.0)        # eager vs eager
    for mine, ms in ((captured, 2.0), (compiled, 4.0)):
        assert (mine.best_vendor, mine.best_vendor_ms) == ("pyg-compiled", 3.0)
        assert math.isclose(mine.speedup_vs_best_vendor, 3.0 / ms)


def test_our_eager_row_is_measured_against_pyg_s_fastest_eager_mode(monkeypatch, tmp_path):
    rows = _rows(monkeypatch, tmp_path, edge_index=8.0)
    assert [(r.backend, r.schedule) for r in rows[:2]] == [("pyg", "sparse-csr"), ("pyg", "edge-index")]
    eager = next(r for r in rows if r.schedule == "graph")
    assert (eager.best_vendor, eager.best_vendor_ms) == ("pyg", 8.0)         # edge_index, not CSR's 10
    assert math.isclose(eager.speedup_vs_best_vendor, 8.0 / 5.0)
    assert math.isclose(eager.rel_error, abs(1.0001 - 0.999) / 0.999, rel_tol=1e-6)   # its loss too
    line = bench_training._progress_line(rows)
    assert "PyG (edge-index) 8.0 ms -> 1.60x" in line and "PyG sparse-csr 10.0 ms" in line
    assert targets.training_targets(rows)[0].value == 1.6


def test_a_pyg_mode_that_cannot_run_leaves_the_other_as_baseline(monkeypatch, tmp_path):
    rows = _rows(monkeypatch, tmp_path, edge_index="out of GPU memory (asked for 40 GiB)")
    eager = next(r for r in rows if r.schedule == "graph")
    assert (eager.best_vendor_ms, eager.speedup_vs_best_vendor) == (10.0, 2.0)
    gcn = targets.training_targets(rows)[0]
    assert gcn.value == 2.0 and "cannot run" not in gcn.detail
    assert "PyG edge-index skipped: out of GPU memory" in bench_training._progress_line(rows)


def test_a_failed_mode_keeps_its_reason_and_gets_no_speedup(monkeypatch, tmp_path):
    captured = _rows(monkeypatch, tmp_path, captured=False)[4]
    assert captured.status == "failed" and "capturing the training step failed" in captured.error
    assert math.isnan(captured.speedup_vs_best_vendor) and math.isnan(captured.rel_error)


def test_results_keep_every_mode_and_a_rerun_replaces_each(monkeypatch, tmp_path):
    first = _rows(monkeypatch, tmp_path)
    on_disk = report.read_rows(tmp_path / "results.csv")
    assert [(r.backend, r.schedule) for r in on_disk] == [(r.backend, r.schedule) for r in first]
    again = _rows(monkeypatch, tmp_path, pyg_compiled_ms=3.0)
    merged = report.merge_rows(first, again)
    assert len(merged) == 7 and merged == again


def test_targets_judge_the_eager_rows(monkeypatch, tmp_path):
    rows = _rows(monkeypatch, tmp_path, models=("gcn", "gat"), captured=False)
    got = {t.name: t for t in targets.training_targets(rows)}
    assert got["GCN training epoch vs PyG"].value == 2.0        # eager 5 ms against PyG's 10 ms
    assert got["GAT training epoch vs PyG"].value == 2.0        # not the failed captured row's 0
    loss = got["Training loss equal to PyG's after the same steps (relative)"]
    assert math.isclose(loss.value, 1e-4, rel_tol=1e-6) and "worst of 2 rows" in loss.detail


def test_progress_line_names_every_mode(monkeypatch, tmp_path):
    line = bench_training._progress_line(_rows(monkeypatch, tmp_path))
    assert "ours 5.0 ms/epoch [ok], PyG (sparse-csr) 10.0 ms -> 2.00x" in line
    assert "ours captured 2.0 ms" in line and "ours compiled 4.0 ms" in line
    assert "ours reduce-overhead 1.0 ms" in line and "PyG reduce-overhead 8.0 ms" in line
    assert "PyG compiled skipped: torch.compile (sparse-csr)" in line and "\n" not in line


def test_the_compile_modes_are_the_targets_own():
    """bench/targets.py names the compiled rows without torch; training.py runs them."""
    assert tuple(training.COMPILE_MODES) == targets.COMPILED_MODES
    assert set(targets.TRAINING_MODES) < set(training.MODES)


@pytest.mark.slow
def test_cpu_smoke_run_of_every_mode(tmp_path):
    """GCN on cora for real: PyG eager (both modes) and compiled, ours eager and compiled train alike; the
    captured mode is skipped on the CPU, saying why."""
    params = {"root": "datasets", "seed": 0, "cache_path": str(tmp_path / "d.json")}
    rows = bench_training.run_graphs([resolve_graph("cora")], ("gcn",), 4, params, {"gpu": "cpu"},
                                     tmp_path, [], device="cpu")
    by_mode = {(r.backend, r.schedule): r for r in rows}
    assert list(by_mode) == [("pyg", "sparse-csr"), ("pyg", "edge-index"), ("pyg", "compiled"),
                             ("pyg", "reduce-overhead"), ("autosage", "graph"), ("autosage", "captured"), ("autosage", "compiled"),
                             ("autosage", "reduce-overhead"), ("torch", "graph"), ("torch", "compiled"),
                             ("torch", "reduce-overhead")]
    # the graph-free control: torch alone, eager and compiled, its replayed mode skipped off the GPU
    assert {r.op for r in rows if r.backend == "torch"} == {"train-mlp"}
    assert by_mode["torch", "graph"].status == by_mode["torch", "compiled"].status == "ok"
    assert by_mode["torch", "compiled"].loss_last != by_mode["torch", "compiled"].loss_first
    assert math.isclose(by_mode["torch", "compiled"].loss_last, by_mode["torch", "graph"].loss_last, rel_tol=1e-4)
    captured = by_mode["autosage", "captured"]
    assert captured.status == "skipped" and captured.error == "captured steps need a CUDA device"
    for library in ("pyg", "autosage"):
        replayed = by_mode[library, "reduce-overhead"]
        assert replayed.status == "skipped" and "needs a CUDA device" in replayed.error
    compiled = by_mode["autosage", "compiled"]
    assert compiled.status == "ok", compiled.error
    assert compiled.rel_error < 1e-4 and compiled.loss_last != compiled.loss_first
    pyg_compiled = by_mode["pyg", "compiled"]
    # PyG compiled on its faster eager mode (which one it is on this CPU depends on its timing)
    faster = min((by_mode["pyg", m] for m in ("sparse-csr", "edge-index")), key=lambda r: r.ms_median)
    assert pyg_compiled.status == "ok" or pyg_compiled.error.startswith(f"torch.compile ({faster.schedule}): ")


def test_small_graph_targets_judge_the_captured_and_compiled_rows(monkeypatch, tmp_path):
    """Captured: against PyG's fastest row (8 ms here): GCN 4x of its 8x; each compile mode against
    our eager epoch (5 ms): default 1.25x, reduce-overhead 5x, both no slower."""
    rows = _rows(monkeypatch, tmp_path)
    assert all(r.nnz < targets.SMALL_GRAPH_NNZ for r in rows)
    got = {t.name: t for t in targets.training_targets(rows)}
    captured = got["GCN captured epoch on small graphs vs PyG"]
    assert captured.value == 4.0 and captured.threshold == 8.0 and not captured.met
    default = got["torch.compile (compiled) of our models vs our eager epoch, small graphs"]
    replayed = got["torch.compile (reduce-overhead) of our models vs our eager epoch, small graphs"]
    assert math.isclose(default.value, 1.25) and math.isclose(replayed.value, 5.0)
    assert default.met and replayed.met and "train-gcn" not in default.detail
    for r in rows:
        r.nnz = targets.SMALL_GRAPH_NNZ
    names = {t.name for t in targets.training_targets(rows)}
    assert not any("small graphs" in n for n in names)


def test_the_graph_free_control_is_shown_beside_the_compile_targets_not_judged(monkeypatch, tmp_path):
    """The control's rows (torch alone) get no baseline; each compile target still judges our rows
    (default 1.25x, reduce-overhead 5x) and shows the control's ratio on the same graph beside it."""
    rows = _rows(monkeypatch, tmp_path, control=True)
    control = [r for r in rows if r.op == "train-mlp"]
    assert [(r.backend, r.schedule) for r in control] == [("torch", "graph"), ("torch", "compiled"),
                                                          ("torch", "reduce-overhead")]
    assert all(not r.best_vendor and math.isnan(r.speedup_vs_best_vendor) for r in control)
    got = {t.name: t for t in targets.training_targets(rows)}
    default = got["torch.compile (compiled) of our models vs our eager epoch, small graphs"]
    replayed = got["torch.compile (reduce-overhead) of our models vs our eager epoch, small graphs"]
    assert math.isclose(default.value, 1.25) and math.isclose(replayed.value, 5.0)
    assert default.detail.endswith("; torch alone (no graph op): fake-50 0.62x")
    assert replayed.detail.endswith("; torch alone (no graph op): fake-50 2.00x")
    assert "GCN training epoch vs PyG" in got and not any("mlp" in name.lower() for name in got)
    line = bench_training._progress_line(control)
    assert line == ("  fake-50 train-mlp (torch alone, no graph op): graph 1.0 ms; compiled 1.6 ms; "
                    "reduce-overhead 0.5 ms")


def test_the_reduce_overhead_warm_up_makes_capturable_plans(monkeypatch):
    """torch records the compiled step's CUDA graphs after this warm-up: the plans it makes must be
    native (CuPy refuses cuSPARSE inside a capture: the H200 failed four shipped graphs' rows so)."""
    from autosage_cli.torch import cuda

    seen = []

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3, 2))

        def forward(self, x, graph):
            seen.append(cuda._CAPTURABLE[0] > 0)
            return x @ self.w

    monkeypatch.setattr(torch, "compile", lambda model, **options: model)
    x, labels = torch.randn(4, 3), torch.tensor([0, 1, 0, 1])
    step = training.compiled_step(Probe(), None, x, labels, 2, fullgraph=True, mode="reduce-overhead")
    step()
    assert seen == [True, False] and cuda._CAPTURABLE[0] == 0


def test_modes_names_our_modes_in_the_suites_order():
    assert bench_training.parse_modes(None) == training.MODES
    assert bench_training.parse_modes("captured, eager") == ("graph", "captured")
    assert bench_training.parse_modes("reduce-overhead,graph") == ("graph", "reduce-overhead")
    with pytest.raises(Exception, match="--modes: unknown mode 'fast'"):
        bench_training.parse_modes("eager,fast")
    with pytest.raises(Exception, match="--modes: name at least one mode"):
        bench_training.parse_modes(",")


def test_modes_reach_the_suite(monkeypatch, tmp_path):
    """--modes is what bench_graph is asked to run, and it applies to --suite training only."""
    from cli_helpers import assert_one_line_error, run_cli

    asked = []

    def run_graphs(specs, models, steps, params, stamp, out, old_rows, device="cuda"):
        asked.append(params["modes"])
        return []
    monkeypatch.setattr(bench_training, "run_graphs", run_graphs)
    monkeypatch.setattr(bench_training, "execute", lambda *a: a[-1]({}, tmp_path, []))
    result = run_cli("bench", "--suite", "training", "--dataset", "cora", "--modes", "eager")
    assert result.exit_code == 0, result.stderr
    assert asked == [("graph",)]
    for suite in ("kernels", "minibatch"):
        assert_one_line_error(run_cli("bench", "--suite", suite, "--modes", "eager", "--dry-run"),
                              ["--modes applies to --suite training only"])
    assert_one_line_error(run_cli("bench", "--suite", "training", "--modes", "fastest", "--dry-run"),
                          ["--modes: unknown mode 'fastest'"])


def test_progress_line_without_our_eager_row(monkeypatch, tmp_path):
    # `--modes compiled`: no eager row of ours; the line tells PyG's eager baseline and the rest
    rows = [r for r in _rows(monkeypatch, tmp_path) if r.schedule != "graph"]
    line = bench_training._progress_line(rows)
    assert "PyG (sparse-csr) 10.0 ms" in line and "ours compiled 4.0 ms" in line and "ms/epoch" not in line
