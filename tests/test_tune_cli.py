"""`tune` end to end on the CPU (fake measurer), and the `autosage tune` command: option
validation without a GPU, the table and the --json object."""
from __future__ import annotations

import json

import pytest

from autosage_cli.cache import DecisionCache
from autosage_cli.kernels import schedule as sched
from autosage_cli.scheduler import tune as tune_mod
from autosage_cli.scheduler.decisions.select import Decision

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, small_graph


def run_tune(graph, cache, measure, **kw):
    kw.setdefault("software_info", SOFTWARE)
    return tune_mod.tune(graph, kw.pop("op", "spmm"), kw.pop("k", 8), kw.pop("heads", 1), cache=cache,
                         measure=measure, device_info=DEVICE, features=features_of(graph), **kw)


@pytest.fixture
def graph():
    return small_graph()


def test_tune_probes_decides_and_stores_then_hits_the_cache(tmp_path, graph):
    cache = DecisionCache(tmp_path / "d.json")
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 1.0, "cusparse-alg2": 0.9}, default_native_ms=0.5)
    first = run_tune(graph, cache, m, top_k=4)
    assert not first.cache_hit and first.decision.backend == "native"
    assert first.decision.reason.startswith(f"native {first.decision.schedule}")
    probed = [c for c in first.candidates if c["status"] != "skipped"]
    assert len(probed) == 4 and all(c["status"] == "ok" for c in probed)
    ranked = tune_mod.estimate.rank(features_of(graph), "spmm", 8)
    assert len(first.candidates) == len(ranked)          # every candidate's estimate is recorded
    assert all(c["estimate_ms"] > 0 for c in first.candidates)
    assert {v["name"] for v in first.vendor} == {"cusparse-alg1", "cusparse-alg2"}
    assert set(first.timings) >= {"features_ms", "estimate_ms", "probe_ms", "total_ms"}
    entry = cache.lookup(first.entry and tune_mod.cache_mod.make_key(graph, "spmm", 8, device=DEVICE,
                                                                        software=SOFTWARE))
    assert entry["graph"]["fingerprint"] == graph.fingerprint and entry["graph"]["source"] == graph.source
    # A small graph's sample would be most of it: probed whole, and said why.
    assert entry["probe"]["graph"] == "full" and entry["probe"]["nnz"] == graph.nnz
    assert ">= 50% of the graph" in entry["probe"]["why"]
    assert entry["probe"]["overrun_ms"] == 0 and entry["probe"]["min_repeats"] == 3
    assert entry["features"]["n_rows"] == graph.n_rows
    calls = dict(m.calls)

    second = run_tune(graph, cache, m, top_k=4)
    assert second.cache_hit and second.probes_run == 0
    assert m.calls == calls                              # nothing prepared, run or timed
    assert second.decision == first.decision
    assert "cache hit" in second.messages[0]


def test_a_sample_of_windows_below_half_the_graph_and_the_timings(graph):
    # A budget too small for any whole-graph work: the sample alone decides (policy.py).
    result = run_tune(graph, None, FakeMeasurer(), sample_nnz=graph.nnz // 4, budget_ms=1e-6)
    p = result.entry["probe"]
    assert p["graph"] == "sample" and p["target_nnz"] == graph.nnz // 4 and p["window"] >= 1
    assert 0 < p["nnz"] < graph.nnz / 2
    t = result.timings
    assert set(t) >= {"fingerprint_ms", "features_ms", "estimate_ms", "sample_ms", "probe_ms", "tune_ms",
                      "total_ms"}
    assert t["tune_ms"] == pytest.approx(t["total_ms"] - t["fingerprint_ms"] - t["features_ms"])


def test_an_overrun_budget_is_a_message_not_a_skipped_candidate(graph):
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 50.0}, default_native_ms=5.0)
    result = run_tune(graph, None, m, top_k=4, budget_ms=10.0)
    assert all(c["status"] == "ok" for c in result.candidates[:4])
    assert result.decision.backend == "native"
    assert result.entry["probe"]["overrun_ms"] > 0
    assert any("overran its 10 ms budget" in msg for msg in result.messages)


def test_stale_software_re_tunes_with_a_message(tmp_path, graph):
    cache = DecisionCache(tmp_path / "d.json")
    run_tune(graph, cache, FakeMeasurer())
    m = FakeMeasurer()
    again = run_tune(graph, cache, m, software_info=dict(SOFTWARE, cuda_sources="changed"))
    assert not again.cache_hit and m.calls["time"] > 0
    assert any("other software" in msg and "cuda_sources" in msg for msg in again.messages)
    assert len(cache.entries()) == 1


def test_a_wrong_schedule_is_probed_fails_verification_and_is_never_chosen(tmp_path, graph):
    cache = DecisionCache(tmp_path / "d.json")
    wrong = sched.Schedule("spmm", "subwarp", lanes=1, vec=1, threads=32, unroll=16)
    with sched.extra_schedules(wrong):
        ranked = tune_mod.estimate.rank(features_of(graph), "spmm", 8)
        assert wrong in [s for s, _ in ranked]
        m = FakeMeasurer(native_ms={wrong.name: 0.01}, wrong={wrong.name})
        result = run_tune(graph, cache, m, top_k=len(ranked))
    rec = next(c for c in result.candidates if c["name"] == wrong.name)
    assert rec["status"] == "failed" and rec["reason"].startswith("mismatch")
    assert result.decision.schedule != wrong.name


def test_guardrail_keeps_the_vendor_when_native_is_not_clearly_faster(tmp_path, graph):
    m = FakeMeasurer(vendor_ms={"cusparse-alg2": 1.0}, default_native_ms=0.97)
    result = run_tune(graph, None, m)
    assert result.decision.backend == "cusparse-alg2"
    assert "no native candidate within guardrail" in result.reason
    assert run_tune(graph, None, m, guardrail=1.0).decision.backend == "native"


def test_full_probes_the_whole_graph(graph):
    result = run_tune(graph, None, FakeMeasurer(), full=True)
    assert result.entry["probe"] == {**result.entry["probe"], "graph": "full", "nnz": graph.nnz}


def test_lookup_or_tune_and_plan_for(tmp_path, graph):
    path = tmp_path / "api.json"
    m = FakeMeasurer()
    kwargs = dict(measure=m, device_info=DEVICE, software_info=SOFTWARE, features=features_of(graph))
    # tune=False on a miss: the vendor default, nothing stored.
    off = tune_mod.lookup_or_tune(graph, "spmm", 8, cache=str(path), tune=False, **kwargs)
    assert off.decision.backend == "cusparse-default" and "tuning is off" in off.reason
    assert not path.exists()
    tuned = tune_mod.lookup_or_tune(graph, "spmm", 8, cache=str(path), **kwargs)
    hit = tune_mod.lookup_or_tune(graph, "spmm", 8, cache=path, tune=False, **kwargs)
    assert hit.cache_hit and hit.decision == tuned.decision
    plan = tune_mod.plan_for(m.to_device(graph), hit, 8, measure=m)      # a TuneResult works too
    assert plan.name == tuned.decision.schedule
    vendor_plan = tune_mod.plan_for(m.to_device(graph), Decision("cusparse-alg2", "cusparse-alg2", "", None,
                                                                   None, None), 8, measure=m)
    assert vendor_plan.name == "cusparse-alg2"


def test_plan_for_rebuilds_a_schedule_missing_from_the_registry(graph):
    gone = sched.Schedule("spmm", "subwarp", lanes=2, vec=1, threads=64, unroll=3)
    decision = {"backend": "native", "schedule": gone.name, "params": gone.params()}
    m = FakeMeasurer()
    assert tune_mod.plan_for(m.to_device(graph), decision, 8, measure=m).name == gone.name


# ------------------------------------------------------------------ the command

BAD_OPTIONS = [
    (["--width", "0"], "--width (K) must be >= 1"),
    (["--width", "-3"], "--width (K) must be >= 1"),
    (["--width", "8", "--op", "conv"], "unknown op 'conv'"),
    (["--width", "8", "--guardrail", "0"], "--guardrail must be in (0, 1]"),
    (["--width", "8", "--guardrail", "1.2"], "--guardrail must be in (0, 1]"),
    (["--width", "8", "--top-k", "0"], "--top-k must be >= 1"),
    (["--width", "8", "--budget-ms", "0"], "--budget-ms must be > 0"),
    (["--width", "8", "--op", "attention", "--heads", "0"], "--heads must be >= 1"),
    (["--width", "8", "--heads", "4"], "--heads applies to --op attention / attention-additive only"),
    (["--width", "8"], "give exactly one of GRAPH"),
    (["g.mtx", "--dataset", "cora", "--width", "8"], "give exactly one of GRAPH"),
    (["--dataset", "cora"], "Missing option '--width'"),
    (["--dataset", "cora", "--width", "eight"], "'eight' is not a valid integer"),
]


@pytest.mark.parametrize("args,message", BAD_OPTIONS, ids=[" ".join(a) for a, _ in BAD_OPTIONS])
def test_bad_options_exit_2_with_one_line_even_without_gpu(args, message):
    r = run_cli("tune", *args)
    assert r.exit_code == 2, r
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1 and message in r.stderr
    assert r.stdout == ""


def test_no_gpu_is_reported_after_the_options(monkeypatch):
    from autosage_cli import capability
    from autosage_cli.errors import NoGPUError

    def no_gpu(what="this command", hint=""):
        raise NoGPUError(f"{what} needs a CUDA GPU: no CUDA device visible")
    monkeypatch.setattr(capability, "require_gpu", no_gpu)
    r = run_cli("tune", "--dataset", "cora", "--width", "8")
    assert r.exit_code == 2 and "needs a CUDA GPU" in r.stderr


@pytest.fixture
def fake_tuning(monkeypatch, graph):
    """The command with the GPU replaced: any graph argument loads `graph`, tune gets fakes."""
    from autosage_cli import capability
    from autosage_cli.commands import tune as tune_cmd
    from autosage_cli.backends import memory
    monkeypatch.setattr(capability, "require_gpu", lambda what="", hint="": None)
    monkeypatch.setattr(memory, "device_free_bytes", lambda: 80 << 30)
    monkeypatch.setattr(tune_cmd, "load_input_graph", lambda path, dataset, root: graph)
    real = tune_mod.tune
    measure = FakeMeasurer()

    def fake_tune(g, op, k, heads=1, **kw):
        return real(g, op, k, heads, measure=measure, device_info=DEVICE, software_info=SOFTWARE, **kw)
    monkeypatch.setattr(tune_mod, "tune", fake_tune)
    real_recall = tune_mod.recall
    monkeypatch.setattr(tune_mod, "recall", lambda g, op, k, heads=1, **kw: real_recall(
        g, op, k, heads, device_info=DEVICE, software_info=SOFTWARE, **kw))
    return measure


def test_json_output_is_one_object_with_the_decision(tmp_path, fake_tuning):
    cache = str(tmp_path / "c.json")
    r = run_cli("tune", "--dataset", "small", "--width", "8", "--cache", cache, "--json", "--top-k", "3")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"decision", "reason", "cache_hit", "candidates", "vendor", "timings"}
    assert set(doc["decision"]) >= {"backend", "schedule"} and doc["cache_hit"] is False
    assert sum(c["status"] != "skipped" for c in doc["candidates"]) == 3
    assert "probe" in r.stderr                               # progress goes to stderr
    again = json.loads(run_cli("tune", "--dataset", "small", "--width", "8", "--cache", cache, "--json",
                               "--top-k", "3").stdout)
    assert again["cache_hit"] is True and again["probes_run"] == 0
    assert again["decision"] == doc["decision"]


def test_a_cache_hit_answers_from_the_graph_memo_without_loading_the_graph(tmp_path, monkeypatch,
                                                                          fake_tuning):
    from autosage_cli.commands import tune as tune_cmd
    cache = str(tmp_path / "c.json")
    args = ("tune", "--dataset", "cora", "--width", "8", "--cache", cache, "--json", "--top-k", "3")
    first = json.loads(run_cli(*args).stdout)
    assert (tmp_path / "graphs.json").is_file()

    def no_loading(*_a):
        raise AssertionError("a remembered graph with a cached decision must not be loaded")
    monkeypatch.setattr(tune_cmd, "load_input_graph", no_loading)
    hit = json.loads(run_cli(*args).stdout)
    assert hit["cache_hit"] is True and hit["decision"] == first["decision"]
    assert hit["graph"]["fingerprint"] == first["graph"]["fingerprint"]
    # a setting the decision was not made under misses, so the graph is loaded (and fails here)
    r = run_cli(*args[:-1], "4")
    assert r.exit_code != 0


def test_a_changed_setting_or_retune_tunes_again_with_a_message(tmp_path, fake_tuning):
    cache = str(tmp_path / "c.json")
    args = ("tune", "--dataset", "small", "--width", "8", "--cache", cache, "--json")
    assert json.loads(run_cli(*args, "--top-k", "3").stdout)["cache_hit"] is False
    assert json.loads(run_cli(*args, "--top-k", "3").stdout)["cache_hit"] is True
    changed = json.loads(run_cli(*args, "--top-k", "3", "--guardrail", "0.9").stdout)
    assert changed["cache_hit"] is False
    assert any("other settings (guardrail 0.95 -> 0.9)" in m for m in changed["messages"])
    forced = json.loads(run_cli(*args, "--top-k", "3", "--guardrail", "0.9", "--retune").stdout)
    assert forced["cache_hit"] is False and forced["probes_run"] > 0
    assert any("--retune" in m for m in forced["messages"])
    assert len(DecisionCache(cache).entries()) == 1     # replaced, not added


def test_table_output_names_candidates_and_decision(tmp_path, fake_tuning):
    r = run_cli("tune", "--dataset", "small", "--width", "8", "--cache", str(tmp_path / "c.json"))
    assert r.exit_code == 0, r.stderr
    assert "decision:" in r.stdout and "reason:" in r.stdout and "cusparse-alg2" in r.stdout
    assert "probe ms" in r.stdout and "vs best vendor" in r.stdout
    r2 = run_cli("tune", "--dataset", "small", "--width", "8", "--cache", str(tmp_path / "c.json"))
    assert "cache hit: no probe run" in r2.stdout


def test_a_sample_probe_confirms_its_best_on_the_whole_graph(monkeypatch, graph):
    from autosage_cli.scheduler.probing import policy

    real = policy.plan_probe

    def sample_then_confirm(ranked, top_k, *a, **kw):
        plan = real(ranked, top_k, *a, **kw)
        return policy.ProbePlan("sample", plan.candidates, 2, 1.0, "test: sample, confirm 2")

    monkeypatch.setattr(policy, "plan_probe", sample_then_confirm)
    ranked = tune_mod.estimate.rank(features_of(graph), "spmm", 8)
    names = [s.name for s, _ in tune_mod.estimate.shortlist(ranked, 5)]   # what a top-5 probe runs
    m = FakeMeasurer(native_ms=dict(zip(names, (0.5, 0.4, 0.3, 0.45, 0.6))))
    result = run_tune(graph, None, m, top_k=5, sample_nnz=graph.nnz // 4)
    p = result.entry["probe"]
    assert p["graph"] == "sample" and p["confirmed_on"] == "full" and p["confirmed"] == 2
    where = {c["name"]: c["graph"] for c in result.candidates if c["status"] != "skipped"}
    # the sample's two fastest (0.3, 0.4 ms) were timed again on the whole graph, the rest not
    assert {n for n, g in where.items() if g == "full"} == {names[2], names[1]}
    assert {n for n, g in where.items() if g == "sample"} == {names[0], names[3], names[4]}
    assert all(v["graph"] == "full" for v in result.vendor)   # the guardrail's vendor: whole graph
    assert result.decision.schedule == names[2]


def test_attention_on_a_rectangular_graph_is_checked_before_the_gpu(tmp_path, monkeypatch):
    """Attention is defined on an n_rows x n_cols graph (Q has a row per graph row, K and V one per
    column): a rectangular graph passes every check a dry run makes, and without --dry-run the run
    stops only for want of a GPU, after the graph was read and checked."""
    from autosage_cli import capability
    from autosage_cli.errors import NoGPUError

    def no_gpu(what="", hint=""):
        raise NoGPUError(f"{what} needs a CUDA GPU: none here")
    monkeypatch.setattr(capability, "require_gpu", no_gpu)
    path = tmp_path / "rect.mtx"
    path.write_text("%%MatrixMarket matrix coordinate real general\n2 3 2\n1 3 1\n2 1 1\n")
    args = ("tune", str(path), "--op", "attention", "--width", "16", "--cache", str(tmp_path / "c.json"))
    dry = run_cli(*args, "--dry-run", "--json")
    assert dry.exit_code == 0, dry.stderr
    [case] = json.loads(dry.stdout)["cases"]
    assert (case["n_rows"], case["n_cols"], case["op"]) == (2, 3, "attention")
    real = run_cli(*args)
    assert real.exit_code == 2 and real.stderr.splitlines() == ["Error: autosage tune needs a CUDA GPU: none here"]
