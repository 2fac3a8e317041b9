"""`autosage bench --reorder` on the CPU: the harness runs every case again on each reordered graph
(the base graph loaded once) with the reorder column and its cost, the targets of reordered
graphs, the training suite's rows with and without reordering (a CPU smoke run on cora), and the
option's refusals."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from autosage_cli.bench import harness, report
from autosage_cli.bench.reorder_targets import reorder_targets
from autosage_cli.bench.rows import AMORTISE_EPOCHS, Row
from autosage_cli.bench.suites import Case, GraphWork, resolve_graph, with_reorderings
from autosage_cli.bench.targets import evaluate_targets

from bench_fakes import FakeToolkit, small_graph
from cli_helpers import assert_one_line_error, run_cli

LOADS: list = []
GRAPH = small_graph(n=60, density=0.08)


@dataclass(frozen=True)
class Spec:
    label: str
    reorder: str = ""

    def load(self, root, seed):
        LOADS.append(self.label)
        return GRAPH


def test_every_case_runs_again_on_each_reordered_graph():
    LOADS.clear()
    tk = FakeToolkit()
    options = harness.RunOptions(repeat=5)
    ctx, _ = harness.make_context(tk, options)
    work = with_reorderings([GraphWork(Spec("g"), [Case("spmm", 8)])], ("hubcluster", "rcm"))
    assert [w.spec.reorder for w in work] == ["", "hubcluster", "rcm"]
    rows = [r for batch in harness.run_suite(work, options, ctx, tk) for r in batch]
    assert LOADS == ["g"]                                  # loaded once, reordered twice
    by_order = {}
    for r in rows:
        by_order.setdefault(r.reorder, []).append(r)
    assert set(by_order) == {"", "hubcluster", "rcm"}
    assert len(by_order["hubcluster"]) == len(by_order[""])
    assert all(math.isnan(r.reorder_s) for r in by_order[""])
    assert all(r.reorder_s >= 0 and r.graph == "g" for r in by_order["rcm"])
    # the reordered rows are rows of their own: merging keeps all three orders
    assert len(report.merge_rows([], rows)) == len(rows)
    assert {report.row_identity(r) for r in rows}.__len__() == len(rows)


def _row(graph, k, ms, reorder="", reorder_s=math.nan, **kw):
    return Row(graph, 10, 100, "spmm", k, 1, "float32", "autosage", "native.x", "probe", ms_median=ms,
               reorder=reorder, reorder_s=reorder_s, **kw)


def test_targets_of_a_shuffled_graph_against_its_natural_twin():
    rows = [_row("products-like", 16, 1.84), _row("products-like", 64, 4.27),
            _row("products-like-shuffled", 16, 3.20), _row("products-like-shuffled", 64, 7.90),
            _row("products-like-shuffled", 16, 2.79, "rcm", 19.0),
            _row("products-like-shuffled", 64, 7.27, "rcm", 19.0),
            _row("products-like-shuffled", 16, 1.90, "metis", 8.0),
            _row("products-like-shuffled", 64, 4.50, "metis", 8.0)]
    targets = {t.name: t for t in reorder_targets(rows)}
    natural = targets["SpMM on a shuffled graph after its best reordering vs its natural order"]
    assert natural.value == pytest.approx(4.50 / 4.27) and natural.met          # metis, K=64
    assert "K=16 metis" in natural.detail
    cost = targets["Reordering cost (order + relabel) of those best reorderings"]
    assert cost.value == 8.0 and cost.met
    # the kernel targets judge the user's orders only: the reordered rows are not in them
    spmm = next(t for t in evaluate_targets(rows) if t.name == "SpMM geomean speed-up vs best cuSPARSE")
    assert "of 4 rows" in spmm.detail or not spmm.measured
    assert reorder_targets([_row("cora", 16, 1.0)]) == []


def test_training_with_and_without_reordering_on_the_cpu(tmp_path):
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    from autosage_cli.commands import bench_training

    params = {"root": "datasets", "seed": 0, "cache_path": str(tmp_path / "d.json"),
              "modes": ("graph",), "reorder": ("hubcluster",)}
    rows = bench_training.run_graphs([resolve_graph("cora")], ("gcn",), 4, params, {"gpu": "cpu"},
                                     tmp_path, [], device="cpu")
    ours = {r.reorder: r for r in rows if r.backend == "autosage"}
    assert set(ours) == {"", "hubcluster"}
    user, reordered = ours[""], ours["hubcluster"]
    assert reordered.status == "ok", reordered.error
    # the same model, data and weights in another node order: the same losses
    assert reordered.loss_first == pytest.approx(user.loss_first, rel=1e-5)
    assert reordered.loss_last == pytest.approx(user.loss_last, rel=1e-4)
    assert reordered.reorder_s > 0
    assert reordered.amortised_ms == pytest.approx(reordered.ms_median
                                                   + reordered.reorder_s * 1e3 / AMORTISE_EPOCHS)
    assert reordered.speedup_vs_user_order == pytest.approx(user.ms_median / reordered.amortised_ms)
    assert math.isnan(user.amortised_ms) and user.reorder == ""


def test_training_with_the_schedulers_reordering_on_the_cpu(tmp_path, monkeypatch):
    # --reorder auto: the decision is asked at the model's most frequent SpMM width over 100 epochs
    # of its SpMMs
    # (measured by a fake here: no GPU), and its row carries what it chose and what deciding cost
    pytest.importorskip("torch", reason="torch is not installed")
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed")
    from autosage_cli.commands import bench_training
    from autosage_cli.scheduler.decisions import reorder_decision as rd
    from autosage_cli.torch import reordered, training

    asked = []
    def decide(csr, width, **kw):
        asked.append((width, kw["expected_calls"]))
        fake = lambda original, new, perm, op, k, dtype: rd.OrderTimes(10.0, 5.0, "a", "b", 0.0, True)
        return real_decide(csr, width, **{**kw, "measure_orders": fake, "l2_bytes": None})
    real_decide = rd.decide
    monkeypatch.setattr(rd, "decide", decide)
    monkeypatch.setattr(reordered, "_l2_bytes", lambda: None)
    monkeypatch.setattr("autosage_cli.capability.require_gpu", lambda *a, **k: None)
    monkeypatch.setattr("autosage_cli.scheduler.probing.reorder_measure.OrderMeasurer", lambda cache: None)
    params = {"root": "datasets", "seed": 0, "cache_path": str(tmp_path / "d.json"),
              "modes": ("graph",), "reorder": ("auto",), "models": ("sage",)}
    rows = bench_training.run_graphs([resolve_graph("cora")], ("sage",), 4, params, {"gpu": "cpu"},
                                     tmp_path, [], device="cpu")
    # asked twice: the first run's decision, then a later run's, which the cache answers
    # cora trains 128 -> 256 -> 256 -> 16: SpMMs at 128, 256, 16 forward, 16, 256 backward
    assert asked == [(256, AMORTISE_EPOCHS * 5)] * 2
    ours = {r.reorder: r for r in rows if r.backend == "autosage"}
    first = next(r for method, r in ours.items() if method.startswith("auto:") and not method.endswith(":cached"))
    later = ours[first.reorder + ":cached"]
    for auto in (first, later):
        assert auto.status == "ok", auto.error
        assert auto.loss_last == pytest.approx(ours[""].loss_last, rel=1e-4) and auto.reorder_s > 0


@pytest.mark.parametrize("argv, words", [
    (["--reorder", "bogus"], ["unknown reordering method 'bogus'", "metis"]),
    (["--reorder", ","], ["at least one method"]),
    (["--suite", "minibatch", "--reorder", "rcm"], ["does not apply to --suite minibatch"]),
    (["--reorder", "auto"], ["--reorder auto applies to --suite training only"]),
    (["--suite", "minibatch", "--reorder", "auto"], ["does not apply to --suite minibatch"]),
])
def test_bad_reorder_options_are_one_line_errors(tmp_path, argv, words):
    assert_one_line_error(run_cli("bench", "--dataset", "cora", *argv, "--dry-run"), words)


def test_a_dry_run_lists_the_reordered_cases(tmp_path):
    import json

    plain = run_cli("bench", "--dataset", "cora", "--ops", "spmm", "--widths", "16", "--dry-run", "--json")
    twice = run_cli("bench", "--dataset", "cora", "--ops", "spmm", "--widths", "16", "--reorder",
                    "rcm,hubcluster", "--dry-run", "--json")
    assert plain.exit_code == 0 and twice.exit_code == 0, twice.stderr
    assert len(json.loads(twice.stdout)["cases"]) == 3 * len(json.loads(plain.stdout)["cases"])


@pytest.mark.parametrize("model, dims, widths, decided", [
    ("gcn", (100, 47), [100, 47, 47], 47),             # products-like: aggregate-first, then transform-first
    ("sage", (128, 16), [128, 256, 16, 16, 256], 256),
    ("gcn", (500, 3), [256, 3, 3], 3),
])
def test_a_models_spmm_widths_are_those_its_layers_aggregate_at(model, dims, widths, decided, monkeypatch):
    # what the reordering decision is measured at: checked against the widths the layers' forward
    # passes hand to their SpMMs on the CPU
    torch = pytest.importorskip("torch", reason="torch is not installed")
    import autosage_cli.torch as at
    from autosage_cli.torch import epilogue, kernels, training

    net = training.build(at, model, *dims)
    assert training.spmm_widths(net) == widths and training.decision_width(widths) == decided
    seen = []
    for module in (kernels, epilogue):       # the SpMMs' implementations, plain and with an epilogue
        real = module.spmm
        monkeypatch.setattr(module, "spmm", lambda g, v, h, *a, _real=real, **k: seen.append(h.shape[1]) or
                            _real(g, v, h, *a, **k))
    graph = at.Graph.from_coo(torch.tensor([0, 1, 2, 3]), torch.tensor([1, 2, 3, 0]), None, (4, 4))
    net(torch.randn(4, dims[0]), graph)
    assert seen == widths[:len(net.layers)]
