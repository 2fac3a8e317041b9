"""Compile time apart from probe time, on CPU: the probe builds its candidates' kernels before it
prepares them, records each candidate's compile_ms, turns a compile failure into that candidate's
failure (never prepared, never chosen), and tune reports compile_ms apart from probe_ms in its
timings, its --json and its table."""
from __future__ import annotations

import json

import pytest

from autosage_cli.scheduler.probing import probe as probe_mod
from autosage_cli.scheduler import tune as tune_mod

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, patch_tune_command, small_graph


class CompilingMeasurer(FakeMeasurer):
    """A FakeMeasurer with the GPU measurer's compile step: each schedule's kernels take
    `compile_ms`; names in `uncompilable` fail to compile."""

    def __init__(self, compile_ms: float = 40.0, uncompilable=(), **kw):
        super().__init__(**kw)
        self.compile_ms, self.uncompilable = compile_ms, set(uncompilable)
        self.compiled: list[list[str]] = []
        self.prepared: list[str] = []

    def compile_native(self, dgraph, schedules, k, heads, dtype="float32"):
        self.compiled.append([s.name for s in schedules])
        return {s.name: (self.compile_ms, "CompileException: line 3: identifier undefined"
                         if s.name in self.uncompilable else None) for s in schedules}

    def prepare_native(self, dgraph, schedule, k, heads, scale=None, dtype="float32"):
        self.prepared.append(schedule.name)
        return super().prepare_native(dgraph, schedule, k, heads, scale, dtype)


def run_tune(measure, **kw):
    graph = small_graph()
    return tune_mod.tune(graph, kw.pop("op", "spmm"), kw.pop("k", 8), 1, cache=kw.pop("cache", None),
                         measure=measure, device_info=DEVICE, software_info=SOFTWARE,
                         features=features_of(graph), **kw)


def probed(result):
    return [c for c in result.candidates if c["status"] != "skipped"]


def test_the_probe_compiles_exactly_its_candidates_once_before_preparing_them():
    m = CompilingMeasurer()
    result = run_tune(m, top_k=4)
    names = [c["name"] for c in probed(result)]
    assert m.compiled == [names]                       # one parallel step, only the probed ones
    assert m.prepared == names
    assert all(c["compile_ms"] == 40.0 for c in probed(result))
    assert all(c.get("compile_ms") is None for c in result.candidates if c["status"] == "skipped")


def test_a_candidate_that_does_not_compile_fails_with_the_reason_and_is_never_prepared():
    first = run_tune(CompilingMeasurer(), top_k=3)
    bad = probed(first)[0]["name"]
    m = CompilingMeasurer(uncompilable={bad}, native_ms={bad: 0.01})  # would win if it ran
    result = run_tune(m, top_k=3)
    rec = next(c for c in result.candidates if c["name"] == bad)
    assert rec["status"] == "failed" and rec["reason"] == "compile: CompileException: line 3: identifier undefined"
    assert bad not in m.prepared and result.decision.schedule != bad
    assert sum(c["status"] == "ok" for c in probed(result)) == 2


def test_tune_timings_keep_compile_apart_from_probe(monkeypatch):
    clock = {"now": 0.0}

    class SlowCompile(CompilingMeasurer):
        def compile_native(self, *args):
            clock["now"] += 0.5                          # half a second of "NVRTC"
            return super().compile_native(*args)

    real = probe_mod.time.perf_counter
    monkeypatch.setattr(probe_mod.time, "perf_counter", lambda: real() + clock["now"])
    monkeypatch.setattr(tune_mod.time, "perf_counter", lambda: real() + clock["now"])
    t = run_tune(SlowCompile(), top_k=3).timings
    assert t["compile_ms"] == pytest.approx(500, abs=5)
    assert 0 <= t["probe_ms"] < 400                   # the probe without the compile
    assert t["total_ms"] >= t["compile_ms"] + t["probe_ms"]


def test_a_measurer_without_a_compile_step_still_probes():
    result = run_tune(FakeMeasurer(), top_k=3)
    assert result.timings["compile_ms"] == 0.0
    assert all(c["status"] == "ok" and c["compile_ms"] is None for c in probed(result))


def test_a_compile_step_that_raises_leaves_each_candidate_to_its_prepare():
    class NoNvrtc(CompilingMeasurer):
        def compile_native(self, *args):
            raise RuntimeError("libnvrtc.so.13 not found")
    msgs = []
    result = tune_mod.tune(small_graph(), "spmm", 8, 1, measure=NoNvrtc(), device_info=DEVICE,
                           software_info=SOFTWARE, top_k=2, progress=msgs.append)
    assert any("compiling ahead failed (RuntimeError: libnvrtc.so.13 not found)" in m for m in msgs)
    assert all(c["status"] == "ok" for c in probed(result))


@pytest.fixture
def compiling_cli(monkeypatch):
    patch_tune_command(monkeypatch, lambda: CompilingMeasurer(compile_ms=123.0))


def test_json_and_table_show_compile_apart(tmp_path, compiling_cli):
    doc = json.loads(run_cli("tune", "--dataset", "x", "--width", "8", "--top-k", "2", "--json",
                             "--cache", str(tmp_path / "a.json")).stdout)
    assert "compile_ms" in doc["timings"] and "probe_ms" in doc["timings"]
    assert [c["compile_ms"] for c in doc["candidates"] if c["status"] != "skipped"] == [123.0, 123.0]
    r = run_cli("tune", "--dataset", "x", "--width", "8", "--top-k", "2", "--cache", str(tmp_path / "b.json"))
    assert r.exit_code == 0, r.stderr
    assert "compile ms" in r.stdout and "123" in r.stdout
    assert "compile" in r.stdout.split("tuning:")[1] and "probe" in r.stdout.split("tuning:")[1]
    assert "compiling the kernels of 2 candidates" in r.stderr
