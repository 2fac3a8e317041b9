"""How a benchmark case spends its time (bench/case.py): every plan's first timed launch follows its
verification run; the run's repeats are cut to a time budget per plan; the fastest vendor is timed
in full, the others within VENDOR_SCREEN_RATIO of it within a smaller budget, and a vendor beyond
that ratio keeps its one launch, with the reason in its row. On a CPU, through the NumPy fake."""
from __future__ import annotations

import pytest

from bench_fakes import FakePlan, FakeSpec, FakeToolkit
from autosage_cli.bench import case as case_mod, harness
from autosage_cli.bench.plan_timing import timing_batch
from autosage_cli.bench.suites import Case, GraphWork


class RecordingToolkit(FakeToolkit):
    """Records every timed batch as (backend, repeat, warmup); the PyG baseline runs too, at `pyg_ms`."""

    def __init__(self, pyg_ms=None, **kwargs):
        super().__init__(**kwargs)
        self.batches: list = []
        self.pyg_ms = pyg_ms

    def prepare_baselines(self, dgraph, op, k, heads, dtype="float32"):
        plans, skipped = super().prepare_baselines(dgraph, op, k, heads, dtype)
        if self.pyg_ms is None:
            return plans, skipped
        return plans + [FakePlan(dgraph, op, k, "pyg", "pyg.gather-softmax-scatter", self.pyg_ms)], []

    def time(self, plan, inputs, out, repeat, warmup, max_ms=None, flush_l2=False):
        self.batches.append((plan.backend, repeat, warmup))
        return super().time(plan, inputs, out, repeat, warmup, max_ms, flush_l2)

    def spent_ms(self, backend: str) -> float:
        """The simulated GPU time of a backend's timed launches (warm-ups included)."""
        ms = {**self.vendor_ms, "torch": 4.0, "pyg": self.pyg_ms, "native": 1.0}
        return sum(ms[b] * (r + w) for b, r, w in self.batches if b == backend)


def _rows(tk, case=Case("attention", 64, dtype="bfloat16"), repeat=20):
    options = harness.RunOptions(repeat=repeat)
    ctx, _ = harness.make_context(tk, options)
    rows = [r for batch in harness.run_suite([GraphWork(FakeSpec(), [case])], options, ctx, tk) for r in batch]
    return {r.backend: r for r in rows}


@pytest.mark.parametrize("first_ms,repeat,warmup,budget,expected", [
    (0.5, 20, 3, 3000.0, (20, 3)),        # milliseconds: the run's repeats and warm-ups, as before
    (130.0, 20, 3, 3000.0, (20, 3)),      # 23 launches still fit
    (500.0, 20, 3, 3000.0, (5, 1)),       # one warm-up, then what fits the rest
    (5000.0, 20, 3, 3000.0, (3, 1)),      # never below the minimum
    (5000.0, 2, 3, 3000.0, (2, 1)),       # nor above the run's repeats
    (float("nan"), 20, 3, 3000.0, (20, 3)),
])
def test_timing_batch(first_ms, repeat, warmup, budget, expected):
    assert timing_batch(first_ms, repeat, warmup, budget) == expected


def test_a_fast_case_is_timed_as_before_plus_one_launch_after_verification():
    tk = RecordingToolkit()
    rows = _rows(tk, Case("spmm", 8))
    for backend in ("cusparse-alg1", "cusparse-default", "torch", "native"):   # native: autosage's plan
        assert [b[1:] for b in tk.batches if b[0] == backend] == [(1, 0), (20, 3)], backend
    for backend in ("cusparse-alg1", "cusparse-default", "torch", "autosage"):
        assert rows[backend].repeats == 20 and rows[backend].reason in ("", "fake decision")


def test_a_vendor_beyond_the_ratio_keeps_its_one_launch_and_says_why():
    tk = RecordingToolkit(vendor_ms={"vendor-a": 2.0, "vendor-b": 7.0, "vendor-c": 5.9})
    rows = _rows(tk)
    assert [b[1:] for b in tk.batches if b[0] == "vendor-b"] == [(1, 0)]
    assert rows["vendor-b"].repeats == 1 and rows["vendor-b"].status == "ok"
    assert rows["vendor-b"].reason == "screened: one launch, 3.50x the fastest vendor"
    assert rows["vendor-c"].repeats == 20 and rows["vendor-c"].reason == ""   # 2.95x: still timed
    assert rows["autosage"].best_vendor == "vendor-a" and rows["autosage"].best_vendor_ms == 2.0


def test_a_slow_vendor_composition_costs_seconds_not_minutes():
    # attention in bfloat16 on a 100M-edge graph: four vendor compositions at 300-435 ms a launch
    # and PyG at 900 ms; before, each got 3 warm-ups and 20 repeats (over 40 s of GPU time)
    vendor_ms = {"vendor-unfused-alg1": 300.0, "vendor-unfused-alg2": 310.0,
                 "vendor-unfused-alg3": 435.0, "vendor-unfused-default": 320.0}
    tk = RecordingToolkit(vendor_ms=vendor_ms, pyg_ms=900.0)
    rows = _rows(tk)
    fastest = rows["vendor-unfused-alg1"]
    assert fastest.repeats == 9 and rows["autosage"].best_vendor == "vendor-unfused-alg1"
    for name in ("vendor-unfused-alg2", "vendor-unfused-alg3", "vendor-unfused-default"):
        assert rows[name].repeats == case_mod.MIN_REPEATS and rows[name].status == "ok"
    assert rows["pyg"].repeats == 3 and rows["pyg"].status == "ok"
    assert tk.spent_ms("vendor-unfused-alg1") <= case_mod.PLAN_BUDGET_MS + 300.0
    assert tk.spent_ms("pyg") <= 900.0 * 5
    total = sum(tk.spent_ms(b) for b in (*vendor_ms, "pyg"))
    assert total < 15_000.0, total


@pytest.mark.gpu
def test_attention_in_bfloat16_is_benchmarked_against_vendors_and_pyg_in_the_type(tmp_path):
    from autosage_cli.bench import report
    from cli_helpers import run_cli
    from test_scheduler_gpu import DATASETS

    out = tmp_path / "bench"
    r = run_cli("bench", "--dataset", "cora", "--root", str(DATASETS), "--ops", "attention", "--widths", "64",
                "--heads", "1", "--dtypes", "bfloat16", "--out", str(out), "--cache", str(tmp_path / "c.json"))
    assert r.exit_code == 0, r.stderr
    rows = report.read_rows(out / "results.csv")
    assert rows and all(row.dtype == "bfloat16" for row in rows)
    vendors = [row for row in rows if row.backend.startswith("vendor-unfused")]
    assert len(vendors) == 4 and any(v.status == "ok" for v in vendors)
    # a cuSPARSE algorithm may refuse bfloat16 (failed, with its status); the others are timed
    assert all(v.status == "ok" and v.repeats >= 1 for v in vendors if not v.error.startswith("prepare"))
    assert all(v.repeats == 1 or not v.reason for v in vendors)
    [ours] = [row for row in rows if row.backend == "autosage"]
    assert ours.status == "ok" and ours.best_vendor.startswith("vendor-unfused")
    pyg = [row for row in rows if row.backend == "pyg"]
    if pyg and pyg[0].status != "skipped":
        assert pyg[0].status == "ok", pyg[0].error    # run in bfloat16, verified before it is timed
