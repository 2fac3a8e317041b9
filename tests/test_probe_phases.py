"""Where a cold tune's time goes, on CPU: the probe's wall time split into phases (upload, inputs,
reference, vendor and native preparation and timing, verification, imports of optional vendor
libraries), each exclusive of the phases inside it, in the tune's timings, its --json and its one
tuning line. A fake clock advanced by a fake measurer makes every phase's time exact."""
from __future__ import annotations

import importlib
import json
import sys
import types

import pytest

from autosage_cli.commands.tune import tuning_line
from autosage_cli.scheduler.probing import phases
from autosage_cli.scheduler import tune as tune_mod
from autosage_cli.scheduler import tune_features

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, patch_tune_command, small_graph

# Fake ms each measurer step takes.
STEP_MS = {"to_device": 100.0, "inputs": 7.0, "prepare_vendor": 20.0, "prepare_native": 3.0,
           "run": 2.0, "rel_error": 0.5, "time": 1.0, "reference": 40.0}


@pytest.fixture
def clock(monkeypatch):
    """time.perf_counter made of fake seconds (the probe's steps advance it, nothing else)."""
    fake = types.ModuleType("phase_test_clock")
    fake.now = 0.0
    monkeypatch.setitem(sys.modules, "phase_test_clock", fake)
    monkeypatch.setattr(phases.time, "perf_counter", lambda: fake.now)
    return fake


class SteppedMeasurer(FakeMeasurer):
    """A FakeMeasurer whose every step advances the fake clock by STEP_MS; `imports` names a module
    the first vendor preparation imports."""

    def __init__(self, fake_clock, imports: str | None = None, **kw):
        super().__init__(**kw)
        self.clock, self.imports = fake_clock, imports

    def _step(self, name, n=1):
        self.clock.now += n * STEP_MS[name] / 1e3

    def to_device(self, graph):
        self._step("to_device")
        return super().to_device(graph)

    def inputs(self, *args, **kw):
        self._step("inputs")
        return super().inputs(*args, **kw)

    def prepare_vendor(self, *args, **kw):
        if self.imports:
            importlib.import_module(self.imports)
        self._step("prepare_vendor")
        return super().prepare_vendor(*args, **kw)

    def prepare_native(self, *args, **kw):
        self._step("prepare_native")
        return super().prepare_native(*args, **kw)

    def run(self, plan, inputs):
        self._step("run")
        return super().run(plan, inputs)

    def rel_error(self, out, ref):
        self._step("rel_error")
        return super().rel_error(out, ref)

    def reference(self, *args, **kw):
        self._step("reference")
        return super().reference(*args, **kw)

    def time(self, plan, inputs, out, repeat, warmup, max_ms=None):
        stats = super().time(plan, inputs, out, repeat, warmup, max_ms)
        self._step("time", stats.repeats + warmup)
        return stats


def run_tune(measure, **kw):
    graph = small_graph()
    return tune_mod.tune(graph, kw.pop("op", "spmm"), kw.pop("k", 8), 1, cache=None, measure=measure,
                         device_info=DEVICE, software_info=SOFTWARE, features=features_of(graph),
                         top_k=kw.pop("top_k", 3), **kw)


def phase_ms(timings, name):
    return timings[phases.timing_key(name)]


def test_every_phase_of_the_probe_is_timed_apart_and_they_add_up(clock):
    m = SteppedMeasurer(clock)   # two vendors, three natives, every one verified and timed
    result = run_tune(m, full=True)
    t = result.timings
    assert phase_ms(t, "upload") == pytest.approx(100.0)
    assert phase_ms(t, "inputs") == pytest.approx(7.0)
    assert phase_ms(t, "vendor_prepare") == pytest.approx(2 * 20.0)
    assert phase_ms(t, "native_prepare") == pytest.approx(3 * 3.0)
    # verification: one run each and the natives' comparison with the reference; picking the
    # reference: the first vendor's output compared with the second's, which confirms it
    assert phase_ms(t, "verify") == pytest.approx(5 * 2.0 + 3 * 0.5)
    assert phase_ms(t, "reference") == pytest.approx(0.5)
    launches = {"native": 0, "vendor": 0}
    for rec in result.candidates + result.vendor:
        if rec["status"] == "ok":
            # the screen (no warm-up) and, for a survivor, each later batch's warm-up
            batches = 1 + (rec["repeats"] > 1) + (rec["repeats"] > phases_min_repeats())
            launches["native" if rec["backend"] == "native" else "vendor"] += rec["repeats"] + batches - 1
    assert phase_ms(t, "native_timing") == pytest.approx(launches["native"] * 1.0)
    assert phase_ms(t, "vendor_timing") == pytest.approx(launches["vendor"] * 1.0)
    assert phase_ms(t, "imports") == 0.0 and phase_ms(t, "other") == pytest.approx(0.0, abs=1e-6)
    split = sum(phase_ms(t, p) for p in (*phases.PHASES, "other"))
    assert split == pytest.approx(t["probe_ms"] - t["sample_ms"])


def phases_min_repeats():
    from autosage_cli.scheduler.probing.probe import MIN_REPEATS
    return MIN_REPEATS


def test_the_float64_reference_counts_as_reference_when_no_vendor_ran(clock):
    t = run_tune(SteppedMeasurer(clock, vendor_ms={}), full=True).timings
    assert phase_ms(t, "reference") == pytest.approx(40.0)
    assert phase_ms(t, "vendor_prepare") == phase_ms(t, "vendor_timing") == 0.0


def test_an_optional_library_imported_inside_the_tune_is_timed_as_imports(clock, tmp_path, monkeypatch):
    # A stand-in for torch: its import takes 300 ms (of the fake clock), inside a vendor's prepare.
    (tmp_path / "fake_vendor_lib").mkdir()
    (tmp_path / "fake_vendor_lib" / "__init__.py").write_text(
        "import phase_test_clock\nphase_test_clock.now += 0.3\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(phases, "OPTIONAL_LIBRARIES", ("fake_vendor_lib",))
    monkeypatch.delitem(sys.modules, "fake_vendor_lib", raising=False)
    meta_path = list(sys.meta_path)
    t = run_tune(SteppedMeasurer(clock, imports="fake_vendor_lib"), full=True).timings
    assert phase_ms(t, "imports") == pytest.approx(300.0)
    assert phase_ms(t, "vendor_prepare") == pytest.approx(2 * 20.0)   # the import taken out of it
    module = sys.modules["fake_vendor_lib"]
    assert module.VALUE == 42 and type(module.__loader__).__name__ == "SourceFileLoader"
    assert sys.meta_path == meta_path                                  # the finder is gone again
    # imported once per process: the next tune pays nothing
    t2 = run_tune(SteppedMeasurer(clock, imports="fake_vendor_lib"), full=True).timings
    assert phase_ms(t2, "imports") == 0.0


def test_nested_phases_are_exclusive_and_unknown_ones_refused(clock):
    c = phases.PhaseClock()
    with c.phase("vendor_prepare"):
        clock.now += 0.010
        with c.phase("imports"):
            clock.now += 0.200
        clock.now += 0.005
    assert c.ms["vendor_prepare"] == pytest.approx(15.0) and c.ms["imports"] == pytest.approx(200.0)
    assert c.timings(300.0)["probe_other_ms"] == pytest.approx(85.0)
    with pytest.raises(ValueError, match="unknown probe phase"):
        with c.phase("lunch"):
            pass


def test_the_tuning_line_is_one_line_with_the_phases_that_took_time():
    t = {"features_ms": 416.0, "estimate_ms": 3.0, "compile_ms": 137.0, "probe_ms": 7411.0,
         "total_ms": 7982.0, **{phases.timing_key(p): 0.0 for p in phases.PHASES}}
    t.update({"probe_imports_ms": 4200.0, "probe_vendor_prepare_ms": 310.0, "probe_verify_ms": 0.2,
              "probe_other_ms": 12.0})
    line = tuning_line(t)
    assert "\n" not in line
    assert line == ("tuning: features 416 ms, estimate 3 ms, compile 137 ms, probe 7411 ms (vendor prepare "
                    "310 ms, imports 4200 ms, other 12 ms), total 7982 ms")
    # an older entry without the split keeps the short line
    assert tuning_line({"probe_ms": 5.0}) == ("tuning: features 0 ms, estimate 0 ms, compile 0 ms, "
                                              "probe 5 ms, total 0 ms")


@pytest.fixture
def fake_cli(monkeypatch):
    patch_tune_command(monkeypatch, FakeMeasurer)


def test_json_timings_and_the_table_carry_the_split(tmp_path, fake_cli):
    doc = json.loads(run_cli("tune", "--dataset", "x", "--width", "8", "--top-k", "2", "--json",
                             "--cache", str(tmp_path / "a.json")).stdout)
    keys = [phases.timing_key(p) for p in (*phases.PHASES, "other")]
    assert all(isinstance(doc["timings"][k], float) and doc["timings"][k] >= 0 for k in keys)
    r = run_cli("tune", "--dataset", "x", "--width", "8", "--top-k", "2", "--cache", str(tmp_path / "b.json"))
    assert r.exit_code == 0, r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("tuning:"))
    assert "probe" in line and line.endswith("ms")


def test_a_cold_tune_computes_the_features_without_the_transpose_check(monkeypatch):
    # The cost model never reads `symmetric`; its exact check is the one costly pass of a symmetric
    # graph's features, so a tune skips it, and decides exactly as with it.
    from autosage_cli import features as features_mod
    from autosage_cli.graphs.csr import canonical_csr

    g = small_graph()
    sym = canonical_csr((g.to_scipy() + g.to_scipy().T).tocsr(), {"generator": "test-sym", "params": {}, "seed": 0})
    with_check = features_mod.compute_features(sym)
    assert with_check.symmetric is True

    def refuse(*a, **k):
        raise AssertionError("the transpose check ran")
    monkeypatch.setattr(features_mod, "transpose_matches", refuse)
    tuned = tune_mod.tune(sym, "spmm", 8, 1, measure=FakeMeasurer(), device_info=DEVICE, software_info=SOFTWARE,
                          top_k=3)
    assert tuned.entry["features"]["symmetric"] is None and tuned.timings["features_ms"] > 0
    given = tune_mod.tune(sym, "spmm", 8, 1, measure=FakeMeasurer(), device_info=DEVICE, software_info=SOFTWARE,
                          top_k=3, features=with_check)
    assert tuned.decision == given.decision
    assert [c["name"] for c in tuned.candidates] == [c["name"] for c in given.candidates]


def test_a_large_graph_is_uploaded_first_and_its_features_made_on_the_device(monkeypatch):
    """From DEVICE_FEATURES_MIN_NNZ nonzeros on, the tune uploads the graph before the features,
    computes them through the measurer (the pass over the edges on the GPU) and probes that same
    device graph: one upload. Below it the host computes them and the probe uploads."""
    g = small_graph()
    below = FakeMeasurer()
    host = tune_mod.tune(g, "spmm", 8, 1, measure=below, device_info=DEVICE, software_info=SOFTWARE, top_k=3)
    assert "device_features" not in below.calls and below.calls["to_device"] >= 1
    monkeypatch.setattr(tune_features, "DEVICE_FEATURES_MIN_NNZ", g.nnz)
    above = FakeMeasurer()
    dev = tune_mod.tune(g, "spmm", 8, 1, measure=above, device_info=DEVICE, software_info=SOFTWARE, top_k=3)
    assert above.calls["device_features"] == 1
    assert above.calls["to_device"] == below.calls["to_device"]      # the probe reused the upload
    assert dev.entry["features"] == host.entry["features"] and dev.decision == host.decision
    given = FakeMeasurer()                                           # features given: no device pass
    tune_mod.tune(g, "spmm", 8, 1, measure=given, device_info=DEVICE, software_info=SOFTWARE, top_k=3,
                  features=features_of(g))
    assert "device_features" not in given.calls


def test_the_cli_reuses_the_features_an_earlier_tune_of_the_graph_remembered(tmp_path, monkeypatch):
    patch_tune_command(monkeypatch, FakeMeasurer)
    cache = str(tmp_path / "d.json")
    first = run_cli("tune", "--dataset", "er-200k", "--width", "8", "--top-k", "2", "--json", "--cache", cache)
    doc1 = json.loads(first.stdout)
    assert doc1["timings"]["features_ms"] > 0 and "from the graph memo" not in first.stderr
    second = run_cli("tune", "--dataset", "er-200k", "--width", "16", "--top-k", "2", "--json", "--cache", cache)
    doc2 = json.loads(second.stdout)
    assert "graph features from the graph memo" in second.stderr
    assert doc2["timings"]["features_ms"] == 0.0
    assert doc2["timings"]["total_ms"] - doc2["timings"]["tune_ms"] == pytest.approx(doc2["timings"]["fingerprint_ms"])
    # features computed by other code are computed again
    monkeypatch.setattr(tune_mod, "features_version", lambda: "other code")
    third = json.loads(run_cli("tune", "--dataset", "er-200k", "--width", "32", "--top-k", "2", "--json",
                               "--cache", cache).stdout)
    assert third["timings"]["features_ms"] > 0
