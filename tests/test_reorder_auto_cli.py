"""`autosage reorder --method auto` on the CPU: the refusals (no GPU, --calls out of range or without
--method auto), and the decision run through the real entry point with the GPU check and the
measurer replaced by fakes: an order that measures slower keeps the user's order, one that
measures faster is written with its permutation. The device run is in tests/test_reorder_gpu.py."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autosage_cli import capability, environment
from autosage_cli.errors import NoGPUError
from autosage_cli.graphs import reorder
from autosage_cli.graphs.load import load_graph
from autosage_cli.scheduler.decisions import reorder_decision as rd
from autosage_cli.scheduler.probing import reorder_measure
from cli_helpers import assert_one_line_error, run_cli

CORA = str(Path(__file__).resolve().parent.parent / "datasets" / "cora.mtx.gz")
FAST = "labelprop"       # cora's locality 0.186 -> 0.081 with it: estimated well above ESTIMATE_MIN


def _no_gpu(what="this command", hint=""):
    raise NoGPUError(f"{what} needs a CUDA GPU: no CUDA device visible" + (f"; {hint}" if hint else ""))


def test_without_a_gpu_it_is_one_line_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(capability, "require_gpu", _no_gpu)
    result = run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), "--method", "auto",
                     "--cache", str(tmp_path / "d.json"))
    assert_one_line_error(result, ["autosage reorder --method auto needs a CUDA GPU",
                                   "name a method to reorder without measuring"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, words", [
    (["--method", "auto", "--calls", "0"], ["--calls", "0 is not in the range"]),
    (["--method", "auto", "--calls", "-3"], ["--calls"]),
    (["--calls", "10"], ["--calls goes with --method auto", "--method rcm"]),
    (["--method", "degree", "--calls", "10"], ["--calls goes with --method auto", "--method degree"]),
    (["--method", "auto", "--measure"], ["--measure", "--method auto"]),
], ids=["calls-zero", "calls-negative", "calls-default-method", "calls-named-method", "auto-measure"])
def test_refusals_before_any_work(tmp_path, monkeypatch, argv, words):
    monkeypatch.setattr(capability, "require_gpu", lambda *a, **k: pytest.fail("got to the GPU check"))
    assert_one_line_error(run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), *argv), words)
    assert list(tmp_path.iterdir()) == []


class FakeOrders:
    """OrderMeasurer's stand-in: `speedup(method)` says how much faster the order measures."""

    instances: list = []

    def __init__(self, cache, speedup):
        self.cache, self.speedup, self.calls = cache, speedup, []
        FakeOrders.instances.append(self)

    def __call__(self, original, reordered, perm, op, k, dtype):
        method = reordered.source["reorder"]
        self.calls.append((method, op, k))
        before = 100.0                     # ms: large enough for any cost to pay back
        return rd.OrderTimes(before, before / self.speedup(method), "fake-a", "fake-b", 0.0, True)


@pytest.fixture
def fake_gpu(monkeypatch):
    """The GPU check passes, no device is described (no L2 shortcut), the measurer is FakeOrders
    with the speed-up the test sets."""
    FakeOrders.instances = []
    monkeypatch.setattr(capability, "require_gpu", lambda *a, **k: None)
    monkeypatch.setattr(environment, "device_info", lambda device_id=0: None)

    def install(speedup):
        monkeypatch.setattr(reorder_measure, "OrderMeasurer", lambda cache: FakeOrders(cache, speedup))
    return install


def _assert_same_graph(written, expected):
    np.testing.assert_array_equal(written.indptr, expected.indptr)
    np.testing.assert_array_equal(written.indices, expected.indices)
    np.testing.assert_array_equal(written.values, expected.values)


def _auto(tmp_path, *extra):
    return run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), "--method", "auto",
                   "--cache", str(tmp_path / "d.json"), *extra)


def test_an_order_that_measures_slower_keeps_the_users(tmp_path, fake_gpu):
    fake_gpu(lambda method: 0.8)
    result = _auto(tmp_path, "--json", "--width", "32")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    d = doc["decision"]
    assert d["method"] == "identity" and d["applied"] is False and not d["from_cache"]
    assert d["op"] == "spmm" and d["width"] == 32 and d["expected_calls"] == rd.DEFAULT_CALLS
    assert d["reason"].startswith("no order earned its cost")
    measured = [c for c in d["candidates"] if c["times"]]
    assert measured and all(c["times"]["after_ms"] > c["times"]["before_ms"] for c in measured)
    assert all(call[1:] == ("spmm", 32) for call in FakeOrders.instances[0].calls)
    assert doc["reordering"]["method"] == "identity"
    original = load_graph(path=CORA)
    _assert_same_graph(load_graph(path=tmp_path / "c.npz"), original)
    np.testing.assert_array_equal(np.load(tmp_path / "c.perm.npy"), np.arange(original.n_rows))


def test_an_order_that_measures_faster_is_written(tmp_path, fake_gpu):
    fake_gpu(lambda method: 2.0 if method == FAST else 0.9)
    result = _auto(tmp_path, "--json", "--calls", "500")
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    d = doc["decision"]
    assert d["method"] == FAST and d["applied"] is True and d["expected_calls"] == 500, d
    assert d["width"] == 64                                    # the default width
    best = next(c for c in d["candidates"] if c["method"] == FAST)
    assert best["verdict"] == "applies" and best["times"]["speedup"] == pytest.approx(2.0)
    assert best["estimate"] >= rd.ESTIMATE_MIN
    r = doc["reordering"]
    assert r["method"] == FAST and r["order_s"] == best["order_s"] and r["apply_s"] == best["apply_s"]
    assert r["after"]["locality"] < r["before"]["locality"]
    original = load_graph(path=CORA)
    perm = np.load(tmp_path / "c.perm.npy")
    np.testing.assert_array_equal(perm, reorder.order(original, FAST))
    expected = reorder.permute(original, perm)
    _assert_same_graph(load_graph(path=tmp_path / "c.npz"), expected)
    assert doc["fingerprint"] == expected.fingerprint
    # the decision and its permutation are cached: a second run measures nothing, same order
    fake_gpu(lambda method: pytest.fail("measured on a cache hit"))
    again = _auto(tmp_path, "--json", "--calls", "500")
    assert again.exit_code == 0, again.stderr
    d2 = json.loads(again.stdout)["decision"]
    assert d2["from_cache"] and d2["method"] == FAST
    np.testing.assert_array_equal(np.load(tmp_path / "c.perm.npy"), perm)


def test_the_table_says_what_was_decided_and_why(tmp_path, fake_gpu):
    fake_gpu(lambda method: 2.0 if method == FAST else 0.9)
    result = _auto(tmp_path)
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"decision (spmm K=64, {rd.DEFAULT_CALLS:,} calls): {FAST}"
    assert lines[1].startswith(f"  reason: {FAST}: measured 2.00x, saves ")
    assert lines[2].startswith("  deciding: features ") and " measure " in lines[2]
    assert any(line.startswith(f"  candidate {FAST}: estimated ") and "100 -> 50 ms (2x, verified): applies"
               in line for line in lines)
    assert any(line.startswith(f"method: {FAST} (order ") for line in lines)
    assert lines[-1] == f"wrote {tmp_path / 'c.npz'} and {tmp_path / 'c.perm.npy'}"
    assert "decided in" in result.stderr


def test_a_slower_order_in_the_table_says_the_order_given_is_kept(tmp_path, fake_gpu):
    fake_gpu(lambda method: 0.8)
    result = _auto(tmp_path, "--calls", "7")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "decision (spmm K=64, 7 calls): identity (the order given is kept)"
    assert lines[1].startswith("  reason: no order earned its cost"), lines[1]
    assert any(line.startswith("  candidate ") for line in lines)
    assert "measured 0.80x, not the 1.05x it needs" in result.stdout
