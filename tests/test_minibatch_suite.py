"""`autosage bench --suite minibatch` on the CPU: the step runner (autosage's CPU reference path and
PyG on the same sampled batches), its timing bookkeeping under a fake clock, the rows built from
runs, the whole command as a smoke run, and every option check that fails before a GPU is
needed."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from autosage_cli.bench import report
from autosage_cli.bench.rows import Row
from autosage_cli.bench.suites import resolve_graph
from cli_helpers import run_cli

torch = pytest.importorskip("torch", reason="torch is not installed: the mini-batch suite needs it")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: no PyG baseline")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.commands import bench_minibatch  # noqa: E402
from autosage_cli.torch import minibatch, training  # noqa: E402
from autosage_cli.torch.graph import Graph  # noqa: E402


@pytest.fixture
def builds_as_probes(monkeypatch):
    """probe_count() on the package (the kind table's counter) replaced by one counting the
    Graphs built from an edge_index: one per step of ours, none in PyG's runs or the floor steps."""
    built = {"n": 0}
    real = Graph.from_edge_index.__func__

    def counting(cls, *args, **kwargs):
        built["n"] += 1
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(Graph, "from_edge_index", classmethod(counting))
    monkeypatch.setattr(at, "probe_count", lambda: built["n"])
    return built


def error_line(result) -> str:
    """The one `Error:` line of a command that failed on its input (exit code 2)."""
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def cora_graph():
    return training.training_graph(resolve_graph("cora").load("datasets", 0), "cpu")


@pytest.mark.slow
def test_both_libraries_train_alike_on_the_same_batches(builds_as_probes):
    steps = 8
    runs = list(minibatch.bench_graph("cora", cora_graph(), ("sage", "gcn", "gat"), steps=steps,
                                      batch_size=64, fanouts=(5, 3), seed=0, warmup=2))
    assert [(m, [r.mode for r in theirs]) for m, _, _, theirs in runs] == [
        ("sage", ["sparse-csr", "edge-index"]), ("gcn", ["sparse-csr", "edge-index"]), ("gat", ["edge-index"])]
    for model, sample_ms, (ours, captured), theirs in runs:
        assert (captured.mode, captured.status) == ("captured", "skipped") and "CUDA" in captured.error
        assert ours.status == "ok", ours.error
        assert sample_ms > 0 and len(ours.losses) == steps and len(ours.times_ms) == steps - 2
        assert ours.losses[-1] != ours.losses[0]                       # it trained
        assert ours.probes == steps and ours.floor_ms > 0 and ours.first_step_ms > 0
        for pyg in theirs:
            assert pyg.status == "ok", pyg.error
            assert pyg.probes == 0
            for a, b in zip(ours.losses, pyg.losses):                  # every step, not only the last
                assert abs(a - b) <= 1e-4 * abs(b), (model, pyg.mode, ours.losses, pyg.losses)


def test_pyg_adjacency_keeps_repeated_edges_so_sages_mean_counts_them():
    edge_index = torch.tensor([[1, 1, 2, 0], [0, 0, 0, 2]])
    adj = minibatch.pyg_adjacency(edge_index, 3, torch.float32)
    assert adj.crow_indices().tolist() == [0, 3, 3, 4] and adj.col_indices().tolist() == [1, 1, 2, 0]
    x = torch.tensor([[1.0], [2.0], [5.0]])
    import torch_geometric.nn as pyg

    layer = pyg.SAGEConv(1, 1)
    assert torch.allclose(layer(x, adj), layer(x, edge_index))        # mean of 2, 2, 5 = 3


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x, graph):
        return self.lin(x)


def test_step_bookkeeping_under_a_fake_clock(monkeypatch, builds_as_probes):
    """Step i takes i ms: the first step, the untimed warm-up, the median over the rest, and the
    floor (the last batch again, on the input its last step built: no new Graph) come out as such."""
    batches, _ = minibatch.sample_batches(cora_graph(), 10, 16, (2,), seed=0)
    clock = iter(range(1, 100))
    monkeypatch.setattr(minibatch, "_timed", lambda device, work: (work(), float(next(clock))))
    x, labels = torch.randn(2708, 4), torch.randint(0, 3, (2708,))
    run = minibatch.train_steps(_Linear(), batches, x, labels, minibatch.input_maker("graph", x.dtype),
                                warmup=5, floor_steps=3)
    assert run.first_step_ms == 1.0 and run.setup_ms == 1 + 2 + 3 + 4 + 5
    assert run.times_ms == [6.0, 7.0, 8.0, 9.0, 10.0] and run.stats()[0] == 8.0
    assert run.floor_ms == 12.0 and run.probes == 10 and builds_as_probes["n"] == 10


def test_each_of_our_modes_starts_from_a_decision_cache_of_its_own(tmp_path, monkeypatch):
    """The captured rows' first step must not find the kinds the graph rows tuned: a cache each."""
    seen = {}

    def run_ours(model, dims, batches, x, labels, init_state, cache, warmup, mode):
        seen[mode] = cache
        return _run("autosage", mode)

    monkeypatch.setattr(minibatch, "run_ours", run_ours)
    monkeypatch.setattr(minibatch, "run_pyg", lambda *a: _run("pyg", a[1]))
    cache = str(tmp_path / "decisions.json")
    list(minibatch.bench_graph("cora", cora_graph(), ["gcn"], steps=2, batch_size=8, fanouts=(2,), cache=cache))
    assert seen == {"graph": cache, "captured": str(tmp_path / "decisions.captured.json")}
    assert minibatch.mode_cache(None, "captured") is None


def _run(library, mode, times=(), losses=(), status="ok", error="", **kw):
    return minibatch.StepRun(library, mode, list(times), list(losses), 50.0, status, error, **kw)


def test_rows_carry_every_column_and_ours_the_fastest_pyg_mode():
    spec, graph = SimpleNamespace(label="products-like"), SimpleNamespace(n_rows=10, n_cols=10, nnz=40)
    ours = _run("autosage", "graph", [2.0, 3.0, 4.0], [3.0, 2.02], first_step_ms=900.0, floor_ms=1.5, probes=7)
    csr = _run("pyg", "sparse-csr", [6.0, 6.0, 6.0], [3.0, 2.0], first_step_ms=20.0, floor_ms=5.0)
    edges = _run("pyg", "edge-index", [9.0, 9.0, 9.0], [3.0, 1.0], first_step_ms=30.0, floor_ms=8.0)
    captured = _run("autosage", "captured", [1.0, 1.5, 2.0], [3.0, 2.0], first_step_ms=950.0, floor_ms=1.4)
    rows = bench_minibatch._rows_of(spec, graph, "sage", 0.75, [ours, captured], [csr, edges], {"gpu": "H200"},
                                    "bfloat16")
    assert [(r.op, r.backend, r.schedule, r.decision) for r in rows] == [
        ("minibatch-sage", "pyg", "sparse-csr", "fixed"), ("minibatch-sage", "pyg", "edge-index", "fixed"),
        ("minibatch-sage", "autosage", "graph", "probe"), ("minibatch-sage", "autosage", "captured", "probe")]
    assert rows[-1].speedup_vs_best_vendor == 4.0 and rows[-1].rel_error == 0.0   # each of ours on the baseline
    assert "ours captured 1.5 ms/step" in bench_minibatch._progress_line(rows)
    mine = rows[-2]
    assert (mine.k, mine.heads, mine.dtype, mine.nnz, mine.gpu) == (256, 1, "bfloat16", 40, "H200")
    assert (mine.ms_median, mine.repeats, mine.first_step_ms, mine.floor_ms, mine.probes) == (3.0, 3, 900.0, 1.5, 7)
    assert mine.prepare_ms == 50.0 and mine.loss_first == 3.0 and mine.loss_last == 2.02
    assert all(r.sample_ms == 0.75 for r in rows) and rows[0].probes == 0
    assert mine.best_vendor == "pyg" and mine.best_vendor_ms == 6.0 and mine.speedup_vs_best_vendor == 2.0
    assert mine.rel_error == pytest.approx(0.01)        # against the fastest mode's last loss
    assert [Row.from_dict(r.to_dict()) for r in rows] == rows


def test_a_pyg_mode_that_runs_out_of_memory_is_a_skipped_row_and_never_the_baseline():
    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.50 GiB. GPU 0 ...")
    spec, graph = SimpleNamespace(label="g"), SimpleNamespace(n_rows=1, n_cols=1, nnz=1)
    skipped = _run("pyg", "edge-index", status="skipped", error=training.failure_text(oom))
    gat = bench_minibatch._rows_of(spec, graph, "gat", 1.0, [_run("autosage", "graph", [4.0], [1.0])], [skipped], {})
    assert gat[0].status == "skipped" and "asked for 12.50 GiB" in gat[0].error and math.isnan(gat[0].ms_median)
    assert (gat[1].k, gat[1].heads) == (64, 8) and gat[1].best_vendor == "" and math.isnan(gat[1].rel_error)
    # run_pyg turns the exception into that row
    def explode(*a, **k):
        raise oom
    import torch_geometric.nn as pyg

    init = training.build(pyg, "gcn", 4, 3).state_dict()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(minibatch, "train_steps", explode)
        run = minibatch.run_pyg("gcn", "sparse-csr", (4, 3), [], torch.zeros(1, 4), torch.zeros(1), init)
    assert run.status == "skipped" and run.mode == "sparse-csr" and "asked for 12.50 GiB" in run.error


@pytest.mark.slow
def test_the_command_writes_a_results_directory(tmp_path, monkeypatch, builds_as_probes):
    """The whole command with the GPU checks lifted and the runs on the CPU."""
    from autosage_cli.commands import bench_training

    real = bench_minibatch.run_graphs
    monkeypatch.setattr(bench_training, "require_gpu", lambda *a: None)
    monkeypatch.setattr(training, "require_torch_cuda", lambda: None)
    monkeypatch.setattr(bench_minibatch, "run_graphs", lambda *a: real(*a, device="cpu"))
    out = tmp_path / "run"
    result = run_cli("bench", "--suite", "minibatch", "--dataset", "cora", "--ops", "minibatch-gcn,gat",
                     "--steps", "7", "--batch-size", "32", "--fanouts", "4,4", "--out", str(out),
                     "--cache", str(tmp_path / "d.json"), "--json")
    assert result.exit_code == 0, result.stderr[-2000:]
    rows = report.read_rows(out / "results.csv")
    assert [(r.op, r.backend, r.schedule) for r in rows] == [
        ("minibatch-gcn", "pyg", "sparse-csr"), ("minibatch-gcn", "pyg", "edge-index"),
        ("minibatch-gcn", "autosage", "graph"), ("minibatch-gcn", "autosage", "captured"),
        ("minibatch-gat", "pyg", "edge-index"), ("minibatch-gat", "autosage", "graph"),
        ("minibatch-gat", "autosage", "captured")]
    assert all(r.status == "skipped" and "CUDA" in r.error for r in rows if r.schedule == "captured")
    rows = [r for r in rows if r.schedule != "captured"]
    for r in rows:
        assert r.status == "ok" and r.repeats == 2 and r.sample_ms > 0 and r.floor_ms > 0, r.error
        assert r.probes == (7 if r.backend == "autosage" else 0)
    assert all(r.rel_error < 1e-4 for r in rows if r.backend == "autosage")
    run = json.loads((out / "results.json").read_text())["runs"][-1]
    assert (run["suite"], run["steps"], run["batch_size"], run["fanouts"]) == ("minibatch", 7, 32, [4, 4])
    assert "minibatch-gat" in (out / "README.md").read_text()
    assert json.loads(result.stdout)["targets"]     # the summary renders these rows


@pytest.mark.parametrize("args, message", [
    (["--widths", "4"], "--widths does not apply to --suite minibatch"),
    (["--oracle"], "--oracle does not apply to --suite minibatch"),
    (["--repeat", "10"], "--repeat does not apply to --suite minibatch: --steps sets the steps"),
    (["--ops", "train-gcn"], "unknown model 'train-gcn' in --ops for --suite minibatch"),
    (["--steps", "5"], "it must be > 5, got 5"),
    (["--batch-size", "0"], "--batch-size must be >= 1, got 0"),
    (["--fanouts", "15,ten"], "--fanouts must be a comma-separated list of integers"),
    (["--fanouts", "15,0,5"], "--fanouts must be >= 1 per hop"),
    (["--dtypes", "bf16"], "unknown dtype 'bf16'"),
    (["--dataset", "nope-graph"], "nope-graph"),
])
def test_bad_options_get_one_error_line(args, message):
    assert message in error_line(run_cli("bench", "--suite", "minibatch", *args, "--dry-run"))


@pytest.mark.parametrize("suite", ["training", "default"])
def test_the_minibatch_options_are_refused_by_the_other_suites(suite):
    result = run_cli("bench", "--suite", suite, "--fanouts", "10,5", "--dry-run")
    assert error_line(result) == "Error: --fanouts applies to --suite minibatch only"


def test_dry_run_lists_every_model_and_type_per_graph():
    result = run_cli("bench", "--suite", "minibatch", "--dataset", "cora", "--ops", "sage,minibatch-gat",
                     "--dtypes", "float32,bfloat16", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    cases = json.loads(result.stdout)["cases"]
    assert [(c["op"], c["k"], c["heads"], c["dtype"]) for c in cases] == [
        ("minibatch-sage", 256, 1, "float32"), ("minibatch-gat", 64, 8, "float32"),
        ("minibatch-sage", 256, 1, "bfloat16"), ("minibatch-gat", 64, 8, "bfloat16")]
    assert all(c["device_bytes"] > 0 for c in cases)


def test_without_pyg_the_suite_says_so_in_one_line(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch_geometric"
                        else real(name, *a))
    assert error_line(run_cli("bench", "--suite", "minibatch", "--dataset", "cora")) == (
        "Error: --suite minibatch needs torch and torch_geometric (torch_geometric is not installed): "
        "pip install torch torch_geometric")


def test_without_a_gpu_the_suite_says_so_in_one_line(monkeypatch):
    from autosage_cli.commands import bench_training
    from autosage_cli.errors import NoGPUError

    def no_gpu(what="this command", hint=""):
        raise NoGPUError(f"{what} needs a CUDA GPU: no CUDA device visible; {hint}")
    monkeypatch.setattr(bench_training, "require_gpu", no_gpu)
    assert error_line(run_cli("bench", "--suite", "minibatch", "--dataset", "cora")) == (
        "Error: autosage bench --suite minibatch needs a CUDA GPU: no CUDA device visible; "
        "--dry-run validates the run without one")




def test_without_torch_the_suite_says_so_before_importing_it(monkeypatch):
    """The library check comes before anything imports torch: on a machine without it the
    command ends in that one line (exit 2), not in an import error."""
    import importlib.util
    import sys

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    monkeypatch.setitem(sys.modules, "autosage_cli.torch.minibatch", None)   # importing it now fails
    result = run_cli("bench", "--suite", "minibatch", "--dataset", "cora")
    assert result.exit_code == 2
    assert error_line(result) == ("Error: --suite minibatch needs torch and torch_geometric (torch is not "
                                  "installed): pip install torch torch_geometric")
