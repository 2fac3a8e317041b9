"""`autosage replay`: dry runs (no GPU) check the file, reload every graph and compare fingerprints;
full replays (here with the fake measurer) verify and time each recorded decision."""
from __future__ import annotations

import json

import pytest
import scipy.io
import scipy.sparse as sp

from autosage_cli.cache import DecisionCache
from autosage_cli.graphs.load import load_graph
from autosage_cli.scheduler.decisions import replay as replay_mod
from autosage_cli.scheduler import tune as tune_mod

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, small_graph


def write_mtx(path, seed=1):
    scipy.io.mmwrite(str(path), sp.csr_matrix(small_graph(seed=seed).to_scipy(), dtype="float64"))
    return load_graph(path=str(path))


@pytest.fixture
def tuned(tmp_path):
    """A cache with two decisions (K=4 and K=8) on a graph file, made with the fake measurer."""
    graph = write_mtx(tmp_path / "g.mtx")
    cache = DecisionCache(tmp_path / "decisions.json")
    for k in (4, 8):
        tune_mod.tune(graph, "spmm", k, cache=cache, measure=FakeMeasurer(), device_info=DEVICE,
                      software_info=SOFTWARE, features=features_of(graph))
    return tmp_path, graph, cache


def test_dry_run_lists_decisions_without_a_gpu(tuned, monkeypatch):
    from autosage_cli import capability
    from autosage_cli.errors import NoGPUError

    def no_gpu(what=""):
        raise NoGPUError("no GPU here")
    monkeypatch.setattr(capability, "require_gpu", no_gpu)
    tmp, graph, cache = tuned
    r = run_cli("replay", str(cache.path), "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert "fingerprint matches" in r.stdout and str(tmp / "g.mtx") in r.stdout
    doc = json.loads(run_cli("replay", str(cache.path), "--dry-run", "--json").stdout)
    assert doc["ok"] and doc["dry_run"] and len(doc["entries"]) == 2
    assert {e["k"] for e in doc["entries"]} == {4, 8}
    assert all(e["status"] == "checked" for e in doc["entries"])
    # Without --dry-run the GPU is required (one line, exit 2).
    r = run_cli("replay", str(cache.path))
    assert r.exit_code == 2 and "no GPU here" in r.stderr


def test_changed_graph_is_reported_mismatched_and_fails(tuned):
    tmp, graph, cache = tuned
    write_mtx(tmp / "g.mtx", seed=2)                    # same path, another graph
    r = run_cli("replay", str(cache.path), "--dry-run", "--json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert not doc["ok"] and {e["status"] for e in doc["entries"]} == {"mismatched"}
    assert "fingerprint" in doc["entries"][0]["reason"]
    assert "did not reproduce (mismatched)" in r.stderr


def test_missing_graph_is_reported_and_fails(tuned):
    tmp, graph, cache = tuned
    (tmp / "g.mtx").unlink()
    r = run_cli("replay", str(cache.path), "--dry-run")
    assert r.exit_code == 1 and "missing" in r.stdout and "missing" in r.stderr


def test_unknown_or_bad_cache_file_exits_2(tmp_path):
    r = run_cli("replay", str(tmp_path / "nope.json"), "--dry-run")
    assert r.exit_code == 2 and r.stderr == f"Error: cache file {tmp_path / 'nope.json'} not found\n"
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "autosage-decisions", "version": 1, "entr')
    r = run_cli("replay", str(bad), "--dry-run")
    assert r.exit_code == 2 and "corrupt" in r.stderr and r.stderr.count("\n") == 1
    assert bad.exists()                                 # replay never moves a file aside
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema": "autosage-decisions", "version": 7, "entries": {}}))
    r = run_cli("replay", str(old), "--dry-run")
    assert r.exit_code == 2 and "schema version 7" in r.stderr


def test_empty_cache_replays_nothing(tmp_path):
    path = tmp_path / "empty.json"
    path.write_text(json.dumps({"schema": "autosage-decisions", "version": 1, "entries": {}}))
    r = run_cli("replay", str(path), "--dry-run")
    assert r.exit_code == 0 and "no decisions" in r.stdout


def test_replay_verifies_and_times_each_decision(tuned):
    tmp, graph, cache = tuned
    outcomes = replay_mod.replay(DecisionCache(cache.path, read_only=True), measure=FakeMeasurer())
    assert [o.status for o in outcomes] == ["ok", "ok"]
    for o in outcomes:
        assert o.replayed_ms == 0.5 and o.recorded_ms == 0.5 and o.rel_error < 1e-12
        # a small graph is probed whole (a sample would be most of it)
        assert o.reference == "cusparse-alg2" and o.recorded_on == "full"


def test_replay_catches_a_decision_that_no_longer_verifies(tuned):
    tmp, graph, cache = tuned
    chosen = {e["decision"]["schedule"] for e in cache.entries()}
    outcomes = replay_mod.replay(cache, measure=FakeMeasurer(wrong=chosen))
    assert {o.status for o in outcomes} == {"failed"}
    assert all(o.reason.startswith("mismatch rel_err=") for o in outcomes)
    broken = replay_mod.replay(cache, measure=FakeMeasurer(broken=chosen))
    assert all(o.status == "failed" and o.reason.startswith("prepare:") for o in broken)


def test_a_vendor_decision_is_checked_against_another_vendor(tmp_path):
    graph = write_mtx(tmp_path / "g.mtx")
    cache = DecisionCache(tmp_path / "d.json")
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 0.3, "cusparse-alg2": 0.4}, default_native_ms=5.0)
    tune_mod.tune(graph, "spmm", 4, cache=cache, measure=m, device_info=DEVICE, software_info=SOFTWARE,
                  features=features_of(graph))
    [o] = replay_mod.replay(cache, measure=m)
    assert o.backend == "cusparse-alg1" and o.status == "ok" and o.reference == "cusparse-alg2"


def test_malformed_entry_is_reported_not_fatal(tuned):
    tmp, graph, cache = tuned
    doc = json.loads(cache.path.read_text())
    first = next(iter(doc["entries"]))
    del doc["entries"][first]["decision"]
    cache.path.write_text(json.dumps(doc))
    outcomes = replay_mod.replay(cache, dry_run=True)
    # The cache skips the malformed entry, naming it; the other entry still replays.
    assert [o.status for o in outcomes] == ["checked"]
    assert [entry_id for entry_id, _ in cache.malformed] == [first]


def test_an_in_memory_graph_is_skipped_not_failed(tmp_path):
    from autosage_cli.graphs.csr import replayable_source
    from autosage_cli.scheduler.decisions import replay as replay_mod

    assert replayable_source({"path": "g.mtx"}) and replayable_source({"generator": "er", "seed": 1})
    assert not replayable_source({"api": "csr_matrix"}) and not replayable_source({})

    class OneEntry:
        def entries(self):
            return [{"id": "x", "op": "spmm", "k": 8, "heads": 1, "replayable": False,
                     "graph": {"source": {"api": "csr_matrix"}, "fingerprint": "f"},
                     "decision": {"backend": "native", "schedule": "spmm.s", "native_ms": 1.0}}]

    def must_not_load(source):
        raise AssertionError("an in-memory graph must not be loaded")

    [out] = replay_mod.replay(OneEntry(), load=must_not_load)
    assert out.status == "skipped" and not out.failing and "built in memory" in out.reason


def test_dry_run_progress_lines_are_not_wrapped_off_a_terminal(tuned):
    """stderr is a pipe here: each entry's progress is one line however long (rich would wrap
    it at 80 columns)."""
    tmp, graph, cache = tuned
    r = run_cli("replay", str(cache.path), "--dry-run")
    assert r.exit_code == 0, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.startswith("replay ")]
    assert len(lines) == 2 and all(str(tmp / "g.mtx") in line and " K=" in line for line in lines)
    assert max(len(line) for line in lines) > 80, lines   # long enough that a wrap would show
