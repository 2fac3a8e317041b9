"""The benchmark loop on CPU, through a NumPy fake of the GPU toolkit (tests/bench_fakes.py)."""
from __future__ import annotations

import math

import pytest

from bench_fakes import FakeSchedule, FakeSpec, FakeToolkit
from autosage_cli.bench import harness
from autosage_cli.bench.report import agreement
from autosage_cli.bench.rows import EXTRA_COLUMNS, SCHEMA_COLUMNS
from autosage_cli.bench.suites import Case, GraphWork


def run(tk, cases=(Case("spmm", 8),), **opts):
    options = harness.RunOptions(repeat=10, **opts)
    ctx, env = harness.make_context(tk, options)
    work = [GraphWork(FakeSpec(), list(cases))]
    return [row for rows in harness.run_suite(work, options, ctx, tk) for row in rows], env


def by_backend(rows, decision=None):
    return {(r.backend if r.backend != "native" else r.schedule): r for r in rows
            if decision is None or r.decision == decision}


def test_rows_of_one_case():
    rows, env = run(FakeToolkit(), oracle=True, all_schedules=("spmm",))
    assert env["commit"] == "abc1234"
    # 2 vendors + autosage probe + oracle + torch + pyg (skipped) + 3 natives
    assert len(rows) == 9
    assert {r.backend for r in rows} == {"cusparse-alg1", "cusparse-default", "autosage", "torch", "pyg", "native"}
    for r in rows:
        assert (r.graph, r.op, r.k, r.heads, r.dtype) == ("fake-50", "spmm", 8, 1, "float32")
        assert (r.best_vendor, r.best_vendor_ms, r.gpu, r.commit, r.copy_tbps) == (
            "cusparse-alg1", 2.0, "Fake GPU 9000", "abc1234", 4.0)
        assert r.compulsory_bytes > 0 and r.timestamp
    rows_by = by_backend(rows)
    probe = by_backend(rows, "probe")["autosage"]
    assert (probe.schedule, probe.chosen_backend, probe.ms_median, probe.status) == ("spmm.good", "native", 1.0, "ok")
    assert probe.speedup_vs_best_vendor == pytest.approx(2.0)
    assert probe.speedup_vs_vendor_default == pytest.approx(3.0)
    assert probe.rel_error < 1e-6 and probe.tune_ms >= 0 and probe.reason == "fake decision"
    assert probe.effective_tbps == pytest.approx(probe.compulsory_bytes / 1e-3 / 1e12)
    oracle = by_backend(rows, "oracle")["autosage"]
    assert (oracle.schedule, oracle.ms_median) == ("spmm.fast", 0.98)
    # 1.0 ms is within 5% of the oracle's 0.98 ms: the probe agrees
    assert probe.probe_agrees == oracle.probe_agrees == "yes"
    assert (probe.oracle_schedule, probe.oracle_ms) == ("spmm.fast", 0.98)
    assert rows_by["torch"].ms_median == 4.0 and rows_by["torch"].speedup_vs_best_vendor == pytest.approx(0.5)
    assert (rows_by["pyg"].status, rows_by["pyg"].error) == ("skipped", "torch_geometric is not installed")
    wrong = rows_by["spmm.wrong"]
    assert wrong.status == "wrong" and math.isnan(wrong.ms_median) and wrong.rel_error > 0.1
    assert math.isnan(wrong.speedup_vs_best_vendor)
    broken = rows_by["spmm.broken"]
    assert broken.status == "failed" and broken.error == "prepare: ValueError: does not compile"
    assert rows_by["cusparse-alg1"].rel_error < 1e-6 and rows_by["cusparse-default"].rel_error < 1e-6
    assert all(r.decision == "fixed" for r in rows if r.backend != "autosage")


def test_probe_that_misses_the_oracle_disagrees():
    rows, _ = run(FakeToolkit(probe_choice="spmm.slow", oracle_choice="spmm.fast"), oracle=True)
    probe = by_backend(rows, "probe")["autosage"]
    assert probe.probe_agrees == "no" and agreement(rows) == (0, 1)


def test_vendor_choice_and_cache_hit():
    tk = FakeToolkit(probe_choice="cusparse-alg1", cache_hit=True)
    rows, _ = run(tk, cache="/tmp/cache.json")
    probe = by_backend(rows, "cache")["autosage"]
    assert (probe.chosen_backend, probe.schedule, probe.probe_agrees) == ("cusparse-alg1", "cusparse-alg1", "")
    assert probe.speedup_vs_best_vendor == pytest.approx(1.0)
    assert tk.tune_calls == [{"cache": "/tmp/cache.json", "full": False, "top_k": None, "dtype": "float32"}] * 2


def test_oracle_does_not_write_the_users_cache():
    tk = FakeToolkit()
    run(tk, cache="c.json", oracle=True)
    # probe, the warm (cache-hit) repeat of it, then the oracle without a cache
    assert [c["cache"] for c in tk.tune_calls] == ["c.json", "c.json", None]


def test_tuning_overheads_are_recorded():
    rows, _ = run(FakeToolkit())
    probe = by_backend(rows, "probe")["autosage"]
    assert probe.features_ms == 7.0 and probe.warm_tune_ms >= 0 and probe.tune_ms >= 0
    tk = FakeToolkit()
    rows, _ = run(tk, cache=None)  # no cache: nothing to be warm from
    assert math.isnan(by_backend(rows, "probe")["autosage"].warm_tune_ms) and len(tk.tune_calls) == 1


def test_compile_time_is_a_column_apart_from_prepare_and_tune():
    rows, _ = run(FakeToolkit(), all_schedules=("spmm",))
    fixed = {r.schedule: r for r in rows if r.decision == "fixed"}
    assert fixed["spmm.good"].compile_ms == 30.0 and fixed["cusparse-alg1"].compile_ms == 0.0
    assert by_backend(rows, "probe")["autosage"].compile_ms == 40.0 + 30.0   # tune + the chosen plan
    hit = by_backend(run(FakeToolkit(cache_hit=True), cache="c.json")[0], "cache")["autosage"]
    assert hit.compile_ms == 30.0                                             # a cache hit compiles nothing
    assert "compile_ms" in EXTRA_COLUMNS


def test_vendor_that_disagrees_is_marked_and_never_best():
    tk = FakeToolkit(vendor_ms={"cusparse-alg1": 2.0, "cusparse-alg2": 1.0, "cusparse-default": 3.0},
                     wrong_vendor="cusparse-alg2")
    rows, _ = run(tk)
    vendors = by_backend(rows)
    assert vendors["cusparse-alg2"].status == "wrong" and "disagrees" in vendors["cusparse-alg2"].error
    assert all(r.best_vendor == "cusparse-alg1" for r in rows)
    assert by_backend(rows, "probe")["autosage"].status == "ok"


def test_without_vendors_the_float64_reference_verifies_the_rows():
    """The measurer's one reference rule: no vendor output, so the float64 reference judges (as in
    the probe); a wrong native is still caught, and no speed-up is claimed without a vendor."""
    tk = FakeToolkit(vendor_ms={})
    rows, _ = run(tk, all_schedules=("spmm",))
    probe = by_backend(rows, "probe")["autosage"]
    assert probe.status == "ok" and probe.rel_error < 1e-6 and probe.ms_median == 1.0
    assert math.isnan(probe.speedup_vs_best_vendor) and tk.references == 1
    assert by_backend(rows)["spmm.wrong"].status == "wrong"


def test_a_reference_the_host_cannot_hold_leaves_rows_unverified():
    class NoHostMemory(FakeToolkit):
        def reference(self, op, dgraph, inputs, scale=None, dtype="float32"):
            raise MemoryError("float64 reference")

    rows, _ = run(NoHostMemory(vendor_ms={}))
    probe = by_backend(rows, "probe")["autosage"]
    assert probe.status == "unverified" and "MemoryError: float64 reference" in probe.error
    assert probe.ms_median == 1.0          # still timed, and said to be unverified


def test_a_failing_tune_is_a_row():
    class Broken(FakeToolkit):
        def tune(self, *a, **k):
            raise RuntimeError("probe exploded")

    rows, _ = run(Broken())
    probe = by_backend(rows, "probe")["autosage"]
    assert probe.status == "failed" and probe.error == "tune: RuntimeError: probe exploded"


def test_suite_yields_per_case_and_frees_memory():
    tk = FakeToolkit()
    options = harness.RunOptions(repeat=10)
    ctx, _ = harness.make_context(tk, options)
    seen = []
    listener = harness.Listener(on_graph=lambda w: seen.append(w.spec.label),
                                on_case=lambda w, c: seen.append(c.k))
    work = [GraphWork(FakeSpec("a"), [Case("spmm", 4), Case("spmm", 16)]), GraphWork(FakeSpec("b"), [Case("spmm", 1)])]
    batches = list(harness.run_suite(work, options, ctx, tk, listener))
    assert [len(b) for b in batches] == [5, 5, 5]
    assert seen == ["a", 4, 16, "b", 1]
    assert tk.freed == 3 + 2  # after every case and every graph
    assert harness.count_cases(work) == 3
    assert list(batches[0][0].to_dict())[:len(SCHEMA_COLUMNS)] == list(SCHEMA_COLUMNS)


def test_fake_has_the_real_toolkits_methods():
    """The fake stands in for GpuToolkit: same public methods, same parameter names."""
    import inspect

    from bench_fakes import FakeToolkit
    from autosage_cli.bench.toolkit import GpuToolkit

    real = {n: f for n, f in inspect.getmembers(GpuToolkit, inspect.isfunction) if not n.startswith("_")}
    for name, func in real.items():
        fake = getattr(FakeToolkit, name, None)
        assert fake is not None, name
        assert list(inspect.signature(fake).parameters) == list(inspect.signature(func).parameters), name


def test_kernels_compile_once_before_the_suite_and_tune_ms_excludes_features(capsys):
    order = []

    class Watched(FakeToolkit):
        def precompile(self, ops, dtype="float32"):
            order.append("precompile")
            return super().precompile(ops, dtype)

        def graph_features(self, graph, dgraph=None):
            order.append("features")
            return super().graph_features(graph, dgraph)

        def tune(self, *a, **k):
            order.append("tune")
            return super().tune(*a, **k)

    tk = Watched()
    options = harness.RunOptions(repeat=10, oracle=True)
    ctx, env = harness.make_context(tk, options)
    work = [GraphWork(FakeSpec("a"), [Case("spmm", 4), Case("sddmm", 8)]), GraphWork(FakeSpec("b"), [Case("spmm", 1)])]
    rows = [r for batch in harness.run_suite(work, options, ctx, tk) for r in batch]
    # One compile, of the run's ops, before anything is timed; features before each tune, computed
    # by the toolkit once per graph (the fake counts calls; the real one caches per graph).
    assert tk.precompiled == [["sddmm", "spmm"]] and order[:3] == ["precompile", "features", "tune"]
    assert tk.features_calls == 2 * 3                  # before the probe's and the oracle's tune
    assert env["compile"] == {"ops": ["sddmm", "spmm"], "seconds": env["compile"]["seconds"],
                              "files": {"sddmm_fake.cu": 1.5, "spmm_fake.cu": 1.5}}
    assert ctx.environment is env
    err = capsys.readouterr().err
    assert "compiled 2 kernel files for sddmm, spmm in" in err and "before timing" in err
    assert all(r.features_ms == 7.0 and r.fingerprint_ms == 3.0 for r in rows if r.backend == "autosage")


def test_a_kernel_file_that_does_not_compile_is_reported_and_the_suite_goes_on():
    class Broken(FakeToolkit):
        def precompile(self, ops, dtype="float32"):
            raise RuntimeError("nvrtc: error in spmm_split.cu\nline 2")

    tk = Broken()
    options = harness.RunOptions(repeat=10)
    ctx, env = harness.make_context(tk, options)
    lines = []
    listener = harness.Listener(on_compile=lambda info: lines.append(harness.compile_line(info)))
    rows = [r for b in harness.run_suite([GraphWork(FakeSpec(), [Case("spmm", 8)])], options, ctx, tk, listener)
            for r in b]
    assert env["compile"]["error"] == "RuntimeError: nvrtc: error in spmm_split.cu line 2"
    assert lines == ["kernel precompile failed (RuntimeError: nvrtc: error in spmm_split.cu line 2); "
                     "plans compile as they are prepared"]
    assert by_backend(rows, "probe")["autosage"].status == "ok"


class ExhaustiveToolkit(FakeToolkit):
    """Natives good 1.0, fast 0.98, slow 1.5 ms, plus a wrong and a broken one."""

    def schedules(self, op, k, heads, dtype="float32"):
        return [FakeSchedule(n) for n in ("spmm.slow", "spmm.good", "spmm.fast", "spmm.wrong", "spmm.broken")]


def test_exhaustive_screens_every_schedule_and_times_contenders_in_full():
    from autosage_cli.bench.targets import exhaustive_cases

    rows, _ = run(ExhaustiveToolkit(probe_choice="spmm.good"), exhaustive=True)
    fixed = {r.schedule: r for r in rows if r.backend == "native"}
    assert set(fixed) == {"spmm.slow", "spmm.good", "spmm.fast", "spmm.wrong", "spmm.broken"}
    # autosage's choice ran at 1.0 ms first: slow (1.5x) is screened out after one launch, the
    # others within 1.3x are timed with the run's repeats
    assert fixed["spmm.slow"].repeats == 1 and fixed["spmm.slow"].reason.startswith("screened: one launch, 1.50x")
    assert fixed["spmm.good"].repeats == fixed["spmm.fast"].repeats == 10
    assert fixed["spmm.wrong"].status == "wrong" and fixed["spmm.broken"].status == "failed"
    [case] = exhaustive_cases(rows)
    assert (case.best, case.best_ms, case.choice, case.choice_ms) == ("spmm.fast", 0.98, "spmm.good", 1.0)
    assert case.within and case.ratio == pytest.approx(0.98)


def test_exhaustive_best_includes_vendors_and_a_choice_far_behind_misses():
    from autosage_cli.bench.targets import evaluate_targets, exhaustive_cases

    rows, _ = run(ExhaustiveToolkit(probe_choice="spmm.slow", vendor_ms={"cusparse-alg1": 0.9}), exhaustive=True)
    [case] = exhaustive_cases(rows)
    assert (case.best, case.best_ms, case.choice_ms) == ("cusparse-alg1", 0.9, 1.5)
    assert not case.within and case.ratio == pytest.approx(0.6)
    t = {x.name: x for x in evaluate_targets(rows)}
    overall = t["Choice within 5% of the exhaustive best (all graphs)"]
    assert overall.value == 0.0 and overall.verdict == "MISSED" and "fake-50 spmm K=8 0.60x" in overall.detail
    # the fake graph is small: no case at scale, and the target says so rather than passing
    assert t["Choice within 5% of the exhaustive best (>= 10M nonzeros)"].verdict == "NOT MEASURED"
    assert t["Choice vs the exhaustive best, worst case"].value == pytest.approx(0.6)


def test_without_exhaustive_rows_there_is_no_exhaustive_case():
    from autosage_cli.bench.targets import exhaustive_cases

    rows, _ = run(FakeToolkit())
    assert exhaustive_cases(rows) == []


def test_the_probe_split_of_tune_ms_is_a_column_each():
    from autosage_cli.bench.rows import PROBE_COLUMNS
    from autosage_cli.scheduler.probing import phases
    from bench_fakes import PROBE_SPLIT

    # one column per timing the tune reports about its probe, no more
    assert set(PROBE_COLUMNS) == {"probe_gpu_ms"} | {phases.timing_key(p) for p in (*phases.PHASES, "other")}
    rows, _ = run(FakeToolkit(), cache="c.json")
    probe = by_backend(rows, "probe")["autosage"]
    assert {c: getattr(probe, c) for c in PROBE_COLUMNS} == PROBE_SPLIT
    hit = by_backend(run(FakeToolkit(cache_hit=True), cache="c.json")[0], "cache")["autosage"]
    assert all(math.isnan(getattr(hit, c)) for c in PROBE_COLUMNS)   # a cache hit runs no probe
