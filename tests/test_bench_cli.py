"""`autosage bench` and `autosage plot` through the real entry point: option validation and
bad-input errors (exit 2, one `Error:` line), and a whole run on CPU with the NumPy fake toolkit."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp

import bench_fakes
from cli_helpers import run_cli
from autosage_cli.bench import report, suites
from autosage_cli.capability import gpu_available
from autosage_cli.bench import toolkit as toolkit_module
from autosage_cli.commands import bench as bench_command

FIXTURE = Path(__file__).parent / "fixtures" / "bench_rows.csv"


def assert_error(result, fragment: str) -> None:
    assert result.exit_code == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert fragment in lines[0], lines[0]
    assert result.stdout == ""


@pytest.fixture
def mtx(tmp_path) -> str:
    path = tmp_path / "tiny.mtx"
    scipy.io.mmwrite(str(path), sp.random(30, 30, density=0.2, random_state=1, format="coo"))
    return str(path)


@pytest.mark.parametrize("args, fragment", [
    (["--widths", "4,abc"], "--widths must be a comma-separated list of integers"),
    (["--widths", "4,0"], "--widths must be >= 1"),
    (["--widths", ""], "--widths must be a comma-separated list"),
    (["--ops", "spmm,gemm"], "unknown op 'gemm'"),
    (["--suite", "huge"], "unknown suite 'huge'"),
    (["--heads", "0"], "--heads must be >= 1"),
    (["--heads", "1,-8"], "--heads must be >= 1"),
    (["--repeat", "0"], "--repeat must be >= 1"),
    (["--top-k", "0"], "--top-k must be >= 1"),
    (["--budget-ms", "-1"], "--budget-ms must be > 0"),
    (["--guardrail", "1.5"], "--guardrail must be in (0, 1]"),
    (["--repeat", "many"], "'many' is not a valid integer"),
])
def test_bad_options(args, fragment):
    assert_error(run_cli("bench", *args), fragment)


def test_unknown_dataset():
    assert_error(run_cli("bench", "--dataset", "no-such-graph"), "unknown dataset 'no-such-graph'")


def test_missing_graph_file(tmp_path):
    assert_error(run_cli("bench", "--dataset", str(tmp_path / "absent.mtx")), "not found")


def test_unwritable_out(tmp_path, mtx):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    assert_error(run_cli("bench", "--dataset", mtx, "--out", str(blocker / "run")), "is not a directory")
    assert_error(run_cli("bench", "--dataset", mtx, "--out", str(blocker)), "is not a directory")


@pytest.mark.skipif(gpu_available(), reason="a GPU is visible")
def test_no_gpu_is_one_clear_line(tmp_path, mtx):
    out = tmp_path / "run"
    assert_error(run_cli("bench", "--dataset", mtx, "--out", str(out)), "autosage bench needs a CUDA GPU")
    assert not out.exists()  # nothing created for a run that cannot start


def test_help_lists_the_options():
    result = run_cli("bench", "--help")
    assert result.exit_code == 0
    for option in ("--dataset", "--suite", "--ops", "--widths", "--heads", "--repeat", "--flush-l2", "--oracle",
                   "--cache", "--out", "--seed", "--json", "--root", "--top-k", "--budget-ms", "--all-schedules"):
        assert option in result.stdout


@pytest.fixture
def fake_gpu(monkeypatch):
    """Run the command with the NumPy toolkit and a small graph for every dataset."""
    toolkits = []

    def make_toolkit():
        toolkits.append(bench_fakes.FakeToolkit())
        return toolkits[-1]

    monkeypatch.setattr(toolkit_module, "GpuToolkit", make_toolkit)
    monkeypatch.setattr(bench_command, "require_gpu", lambda what, hint="": None)
    monkeypatch.setattr(suites.GraphSpec, "load", lambda self, root, seed: bench_fakes.small_graph(seed=seed))
    return toolkits


def test_fake_run_writes_the_results_dir(fake_gpu, tmp_path, mtx):
    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", mtx, "--ops", "spmm", "--widths", "4,16", "--oracle", "--json",
                     "--out", str(out), "--cache", str(tmp_path / "cache.json"))
    assert result.exit_code == 0, result.stderr
    summary = json.loads(result.stdout)  # stdout is only the JSON
    assert summary["out"] == str(out) and summary["rows"] == 2 * 6
    assert summary["probe_agreement"]["compared"] == 2
    for name in ("results.csv", "results.json", "README.md", "speedup_spmm.png", "bandwidth_spmm.png"):
        assert (out / name).stat().st_size > 0, name
    rows = report.read_rows(out / "results.csv")
    assert len(rows) == 12 and {r.k for r in rows} == {4, 16} and {r.graph for r in rows} == {"tiny"}
    env, runs = report.read_runs(out / "results.json")
    assert env["device"]["name"] == "Fake GPU 9000"
    assert len(runs) == 1 and "--oracle" in runs[0]["command"] and runs[0]["copy_tbps"] == 4.0
    assert "Fake GPU 9000" in (out / "README.md").read_text()
    assert fake_gpu[0].tune_calls[0]["cache"] == str(tmp_path / "cache.json")

    # A second run into the same directory merges: new widths add rows, repeated ones replace them.
    again = run_cli("bench", "--dataset", mtx, "--ops", "spmm", "--widths", "16,64", "--out", str(out))
    assert again.exit_code == 0, again.stderr
    assert "autosage vs best vendor" in again.stdout  # the rich summary, without --json
    merged = report.read_rows(out / "results.csv")
    assert sorted({r.k for r in merged}) == [4, 16, 64]
    assert len(merged) == 6 + 5 + 5 + 1  # K=4 (with oracle), 16 and 64 (without), K=16's old oracle row
    assert len(report.read_runs(out / "results.json")[1]) == 2


def test_interrupted_run_keeps_what_it_measured(fake_gpu, monkeypatch, tmp_path, mtx):
    calls = {"n": 0}
    original = bench_fakes.FakeToolkit.time

    def time_then_stop(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 8:  # the second case (4 timed plans a case, each a first launch and a batch)
            raise KeyboardInterrupt
        return original(self, *args, **kwargs)

    monkeypatch.setattr(bench_fakes.FakeToolkit, "time", time_then_stop)
    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", mtx, "--ops", "spmm", "--widths", "4,16", "--out", str(out))
    assert result.exit_code == 130
    assert "stopped early: 5 rows measured" in result.stderr
    rows = report.read_rows(out / "results.csv")
    assert {r.k for r in rows} == {4} and len(rows) == 5
    assert "Partial run" in (out / "README.md").read_text()


def test_plot_redraws_from_csv(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(FIXTURE, run_dir / "results.csv")
    result = run_cli("plot", str(run_dir / "results.csv"))
    assert result.exit_code == 0, result.stderr
    written = [Path(p) for p in result.stdout.split()]
    assert run_dir / "speedup_spmm.png" in written and run_dir / "README.md" in written
    assert all(p.stat().st_size > 0 for p in written)
    assert (run_dir / "bandwidth_attention.png").read_bytes().startswith(b"\x89PNG")


def test_plot_merges_several_csvs(tmp_path):
    rows = report.read_rows(FIXTURE)
    report.write_csv([r for r in rows if r.op == "spmm"], tmp_path / "a.csv")
    report.write_csv([r for r in rows if r.op != "spmm"], tmp_path / "b.csv")
    out = tmp_path / "merged"
    result = run_cli("plot", str(tmp_path / "a.csv"), str(tmp_path / "b.csv"), "--out", str(out))
    assert result.exit_code == 0, result.stderr
    assert {p.name for p in out.glob("*.png")} == {f"{k}_{op}.png" for k in ("speedup", "bandwidth")
                                                   for op in ("spmm", "sddmm", "attention")}
    assert "| SDDMM geomean speed-up vs the best vendor SDDMM | 2.00×" in (out / "README.md").read_text()


def test_plot_bad_inputs(tmp_path):
    assert_error(run_cli("plot", str(tmp_path / "absent.csv")), "not found")
    bad = tmp_path / "bad.csv"
    bad.write_text("x,y\n1,2\n")
    assert_error(run_cli("plot", str(bad)), "is not an autosage results file")
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert_error(run_cli("plot", str(FIXTURE), "--out", str(blocker)), "is not a directory")
    assert run_cli("plot").exit_code == 2


def test_parse_helpers():
    assert bench_command.parse_int_list("1, 2,4,2", "--widths") == (1, 2, 4)
    assert bench_command.parse_int_list(None, "--widths") == ()
    assert bench_command.parse_ops("sddmm,spmm") == ("sddmm", "spmm")
    assert bench_command.gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert bench_command.gpu_slug("") == "gpu"
    assert np.all(np.array(bench_command.default_out("NVIDIA H200").parts[:1]) == ["results"])


def work_table(work) -> dict:
    return {w.spec.label: sorted({(c.op, c.k, c.heads) for c in w.cases}) for w in work}


def test_default_suite():
    table = work_table(suites.build_work(suites.get_suite("default")))
    kernels = [(op, k, 1) for op in ("sddmm", "spmm") for k in (4, 32, 128)]
    assert table == {"er-200k": kernels, "hub-200k": sorted(kernels + [("attention", 64, 1)]), "cora": kernels}


def test_full_suite_has_every_benchmark_graph_and_width():
    from autosage_cli.graphs import datasets

    work = suites.build_work(suites.get_suite("full"))
    table = work_table(work)
    shipped = {e.name for e in datasets.entries().values() if e.loader == "mtx" and e.file}
    assert "cora" in shipped and set(suites.real_graph_names()) == shipped
    assert set(table) == set(suites.SUITE_PRESETS) | shipped
    assert {k for op, k, h in table["uniform-1m"]} == set(suites.ALL_WIDTHS)
    assert ("attention", 64, 8) in table["reddit-like"] and ("attention", 64, 1) in table["products-like"]
    assert not any(op == "attention" for op, _, _ in table["uniform-1m"])
    assert suites.get_suite("full").all_schedules == ("attention",)
    assert {w.spec.label: w.spec.dataset for w in work}["cora"] == "cora"


def test_overrides():
    kernels = suites.get_suite("kernels")
    table = work_table(suites.build_work(kernels, datasets=("er-200k", "cora"), ops=("spmm", "attention"),
                                         widths=(8, 64), heads=(2,)))
    assert table["er-200k"] == table["cora"] == [("attention", 8, 2), ("attention", 64, 2), ("spmm", 8, 1), ("spmm", 64, 1)]
    assert suites.with_overrides(kernels, None, True).all_schedules == (
        "spmm", "sddmm", "attention", "attention-additive", "spmm-bias", "spmm-relu", "spmm-bias-relu",
        "spmm-scale")
    assert suites.with_overrides(kernels, 7, False).repeat == 7
    with pytest.raises(Exception, match="nothing to run"):
        suites.build_work(suites.get_suite("attention"), ops=("spmm",))


def test_a_graph_that_cannot_load_stops_the_run_in_one_line(fake_gpu, monkeypatch, tmp_path, mtx):
    from autosage_cli.errors import AutosageError

    second = tmp_path / "second.mtx"
    shutil.copy(mtx, second)

    def load(self, root, seed):
        if self.label == "second":
            raise AutosageError("dataset second: files not found under datasets/ (download it first)")
        return bench_fakes.small_graph(seed=seed)

    monkeypatch.setattr(suites.GraphSpec, "load", load)
    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", mtx, "--dataset", str(second), "--ops", "spmm", "--widths", "4",
                     "--out", str(out))
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines()[-1] == ("Error: dataset second: files not found under datasets/ "
                                                      "(download it first)")
    assert {r.graph for r in report.read_rows(out / "results.csv")} == {"tiny"}  # the first graph's rows stay

    nothing = tmp_path / "nothing"
    result = run_cli("bench", "--dataset", str(second), "--ops", "spmm", "--widths", "4", "--out", str(nothing))
    assert result.exit_code == 2 and not nothing.exists()


def test_dataset_names_resolve_through_the_registry(mtx):
    assert suites.resolve_graph("er-200k") == suites.GraphSpec("er-200k", preset="er-200k")
    assert suites.resolve_graph("Cora") == suites.GraphSpec("cora", dataset="cora")
    assert suites.resolve_graph("ogbn-products") == suites.GraphSpec("ogbn-products", dataset="ogbn-products")
    assert suites.resolve_graph(mtx).label == "tiny" and suites.resolve_graph(mtx).path == mtx


def test_kernel_halves_cover_the_kernels_suite():
    def cases(name):
        return {(w.spec.label, c) for w in suites.build_work(suites.get_suite(name)) for c in w.cases}

    small, large = cases("kernels-small"), cases("kernels-large")
    assert small.isdisjoint(large) and small | large == cases("kernels")
    assert cases("full") == cases("kernels") | cases("attention")
