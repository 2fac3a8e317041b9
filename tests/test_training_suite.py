"""`autosage bench --suite training` on the CPU: the suite's path (graph, models, both libraries,
rows in the results schema, the run directory, the targets) as a smoke run on cora, and every
option check that fails before a GPU is needed."""
from __future__ import annotations

import math

import pytest

from autosage_cli.bench import report, targets
from autosage_cli.bench.rows import Row
from autosage_cli.bench.suites import resolve_graph
from cli_helpers import run_cli

torch = pytest.importorskip("torch", reason="torch is not installed: the training suite needs it")
pytest.importorskip("torch_geometric", reason="torch_geometric is not installed: no PyG baseline")

from autosage_cli.commands import bench_training  # noqa: E402
from autosage_cli.torch import training  # noqa: E402


@pytest.mark.slow
def test_cpu_smoke_run_gives_matching_rows_and_targets(tmp_path):
    params = {"root": "datasets", "seed": 0, "cache_path": str(tmp_path / "d.json"), "modes": ("graph",)}
    rows = bench_training.run_graphs([resolve_graph("cora")], ("gcn", "sage", "gat"), 4, params,
                                     {"gpu": "cpu"}, tmp_path, [], device="cpu")
    assert [(r.op, r.backend, r.schedule) for r in rows] == [
        (f"train-{m}", b, mode) for m in ("gcn", "sage", "gat")
        for b, mode in (("pyg", training.PYG_MODES[m][0]), ("pyg", training.PYG_MODES[m][1]), ("autosage", "graph"))]
    for first, second, ours in zip(rows[::3], rows[1::3], rows[2::3]):
        assert first.status == second.status == ours.status == "ok", (first.error, second.error, ours.error)
        pyg = min((first, second), key=lambda r: r.ms_median)      # the baseline: PyG's faster mode
        assert ours.repeats == 4 - bench_training.WARMUP and ours.ms_median > 0 and ours.prepare_ms > 0
        assert ours.best_vendor == "pyg" and ours.best_vendor_ms == pyg.ms_median
        assert math.isclose(ours.speedup_vs_best_vendor, pyg.ms_median / ours.ms_median)
        assert ours.rel_error < 1e-4 and ours.loss_last != ours.loss_first  # equal, and it trained
        assert ours.k == (64 if ours.op == "train-gat" else 256) and ours.heads == (8 if ours.op == "train-gat" else 1)
    assert [Row.from_dict(r.to_dict()) for r in rows] == rows  # the schema round-trips
    report.write_run_dir(tmp_path, rows, {"device": None}, [])
    assert (tmp_path / "results.csv").is_file() and "train-gat" in (tmp_path / "README.md").read_text()
    names = {t.name: t for t in targets.evaluate_targets(rows)}
    assert names["Training loss equal to PyG's after the same steps (relative)"].met
    assert names["GAT training epoch vs PyG"].measured


def _row(op, backend, **kw):
    base = dict(graph="g", n_rows=1, nnz=1, op=op, k=1, heads=1, dtype="float32", backend=backend,
                schedule="", decision="probe")
    return Row(**{**base, **kw})


def test_training_targets_judge_each_model_and_the_losses():
    rows = [_row("train-gcn", "pyg", ms_median=13.0), _row("train-gcn", "autosage", ms_median=10.0,
                                                           speedup_vs_best_vendor=1.3, rel_error=2e-4),
            _row("train-sage", "autosage", speedup_vs_best_vendor=1.1, rel_error=5e-3),
            _row("train-gat", "pyg", status="skipped", error="out of GPU memory (asked for 30 GiB)"),
            _row("train-gat", "autosage", ms_median=5.0)]
    got = {t.name: t for t in targets.training_targets(rows)}
    assert got["GCN training epoch vs PyG"].met and got["GCN training epoch vs PyG"].value == 1.3
    assert not got["GraphSAGE training epoch vs PyG"].met
    gat = got["GAT training epoch vs PyG"]
    assert gat.met and "asked for 30 GiB" in gat.detail          # PyG cannot run it
    loss = got["Training loss equal to PyG's after the same steps (relative)"]
    assert loss.value == 5e-3 and not loss.met
    assert targets.training_targets([_row("spmm", "autosage")]) == []   # kernel runs: no such target


@pytest.mark.parametrize("args, message", [
    (["--widths", "4"], "--widths does not apply to --suite training"),
    (["--oracle"], "--oracle does not apply to --suite training"),
    (["--ops", "gin"], "unknown model 'gin' in --ops for --suite training"),
    (["--repeat", "2"], "it must be > 2, got 2"),
    (["--dataset", "nope-graph"], "nope-graph"),
])
def test_bad_options_get_one_error_line(args, message):
    result = run_cli("bench", "--suite", "training", *args, "--dry-run")
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0]


def test_dry_run_lists_every_model_per_graph():
    result = run_cli("bench", "--suite", "training", "--dataset", "cora", "--ops", "train-gcn,gat",
                      "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    import json

    cases = json.loads(result.stdout)["cases"]
    assert [(c["graph"], c["op"], c["k"], c["heads"]) for c in cases] == [
        ("cora", "train-gcn", 256, 1), ("cora", "train-gat", 64, 8)]
    assert all(c["device_bytes"] > 0 for c in cases)


def test_failure_text_says_how_much_memory_was_asked_for():
    from autosage_cli.torch.training import failure_text

    oom = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 27.32 GiB. GPU 0 has a "
                                      "total capacity of 139.80 GiB of which 19.42 GiB is free.\nmore")
    text = failure_text(oom)
    assert text.startswith("out of GPU memory (asked for 27.32 GiB): CUDA out of memory.")
    assert "\n" not in text
    assert failure_text(ValueError("bad shape\ndetail")) == "ValueError: bad shape"


@pytest.mark.slow
def test_the_command_writes_a_results_directory(tmp_path, monkeypatch):
    """The whole command with the GPU checks lifted and the runs on the CPU: results.csv,
    results.json and README.md with the rows and the training targets, then a second run merges."""
    import json

    real = bench_training.run_graphs
    monkeypatch.setattr(bench_training, "require_gpu", lambda *a: None)
    monkeypatch.setattr(training, "require_torch_cuda", lambda: None)
    monkeypatch.setattr(bench_training, "run_graphs",   # eager modes only: compiling is its own test
                        lambda specs, models, steps, params, *rest: real(
                            specs, models, steps, {**params, "modes": ("graph",)}, *rest, device="cpu"))
    out = tmp_path / "run"
    for ops in ("gcn", "gat"):
        result = run_cli("bench", "--suite", "training", "--dataset", "cora", "--ops", ops, "--repeat", "3",
                         "--out", str(out), "--cache", str(tmp_path / "d.json"), "--json")
        assert result.exit_code == 0, result.stderr[-2000:]
    rows = report.read_rows(out / "results.csv")
    assert sorted((r.op, r.backend) for r in rows) == [
        ("train-gat", "autosage"), ("train-gat", "pyg"), ("train-gat", "pyg"),
        ("train-gcn", "autosage"), ("train-gcn", "pyg"), ("train-gcn", "pyg")]   # PyG: both eager modes
    summary = json.loads(result.stdout)
    names = {t["name"] for t in summary["targets"]}
    assert {"GCN training epoch vs PyG", "GAT training epoch vs PyG"} <= names
    runs = json.loads((out / "results.json").read_text())["runs"]
    assert [r["command"] for r in runs] == [
        f"autosage bench --dataset cora --suite training --ops {m} --repeat 3 --cache {tmp_path / 'd.json'} "
        f"--out {out} --json" for m in ("gcn", "gat")]
    assert "train-gcn" in (out / "README.md").read_text()


@pytest.mark.gpu
def test_gpu_run_on_cora_trains_every_model_like_pyg(tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")
    out = tmp_path / "run"
    result = run_cli("bench", "--suite", "training", "--dataset", "cora", "--repeat", "4", "--out", str(out),
                     "--cache", str(tmp_path / "d.json"))
    assert result.exit_code == 0, result.stderr[-2000:]
    rows = report.read_rows(out / "results.csv")
    ours = [r for r in rows if r.backend == "autosage" and r.schedule == "graph"]
    assert sorted(r.op for r in ours) == ["train-gat", "train-gcn", "train-sage"]
    for r in ours:
        assert r.status == "ok" and r.ms_median > 0 and r.best_vendor == "pyg", r.error
        assert r.rel_error < 1e-3, (r.op, r.loss_last)
    other = [r for r in rows if r.backend == "autosage" and r.schedule != "graph"]
    assert sorted((r.op, r.schedule) for r in other) == [
        (f"train-{m}", s) for m in ("gat", "gcn", "sage") for s in ("captured", "compiled", "reduce-overhead")]
    for r in other:     # a captured step and the compiled models train as the eager one does
        assert r.status == "ok" and r.ms_median > 0, r.error
        assert r.best_vendor in ("pyg", "pyg-compiled", "pyg-reduce-overhead")
        assert r.rel_error < 1e-3, (r.op, r.schedule, r.loss_last)
    compiled_pyg = [r for r in rows if r.backend == "pyg" and r.schedule == "compiled"]
    assert len(compiled_pyg) == 3 and all(r.status == "ok" or r.error for r in compiled_pyg)
    control = {r.schedule: r for r in rows if r.backend == "torch"}    # torch alone, no graph op
    assert sorted(control) == ["compiled", "graph", "reduce-overhead"]
    assert all(r.op == "train-mlp" and r.status == "ok" and r.ms_median > 0 for r in control.values())


def test_dtypes_make_one_case_per_type_and_a_bad_one_is_one_line():
    import json

    result = run_cli("bench", "--suite", "training", "--dataset", "cora", "--ops", "gcn",
                     "--dtypes", "float32,bfloat16", "--dry-run", "--json")
    assert result.exit_code == 0, result.stderr
    cases = json.loads(result.stdout)["cases"]
    assert [(c["op"], c["dtype"]) for c in cases] == [("train-gcn", "float32"), ("train-gcn", "bfloat16")]
    bad = run_cli("bench", "--suite", "training", "--dtypes", "bf16", "--dry-run")
    assert bad.exit_code == 2 and bad.stderr.strip().splitlines() == [
        "Error: unknown dtype 'bf16'; known: float32, float16, bfloat16"]


@pytest.mark.slow
def test_cpu_smoke_run_in_bfloat16(tmp_path):
    params = {"root": "datasets", "seed": 0, "cache_path": str(tmp_path / "d.json"), "dtypes": ("bfloat16",),
              "modes": ("graph",)}
    rows = bench_training.run_graphs([resolve_graph("cora")], ("gat",), 3, params,
                                     {"gpu": "cpu"}, tmp_path, [], device="cpu")
    assert [(r.op, r.backend, r.dtype) for r in rows] == [
        ("train-gat", b, "bfloat16") for b in ("pyg", "pyg", "autosage")]
    for pyg, ours in ((rows[0], rows[2]), (rows[1], rows[2])):
        assert pyg.status == ours.status == "ok", (pyg.error, ours.error)
        assert math.isfinite(ours.loss_last) and ours.rel_error < 0.05   # both trained in bfloat16
    got = {t.name: t for t in targets.training_targets(rows)}
    assert got["GAT training epoch vs PyG"].measured and "cora bfloat16" in got["GAT training epoch vs PyG"].detail
    assert not got["Training loss equal to PyG's after the same steps (relative)"].measured
