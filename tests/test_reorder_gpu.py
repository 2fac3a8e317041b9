"""`autosage reorder --measure` on a device: both orders tuned and timed, the reordered SpMM equal
to the original one permuted. Asserts that the measurement is sound, not that reordering wins:
whether it does is what these runs are for."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from autosage_cli.bench.reorder_gain import measure_gain
from autosage_cli.bench import reordering
from autosage_cli.graphs import reorder
from autosage_cli.graphs.synthetic import generate
from cli_helpers import run_cli

pytestmark = pytest.mark.gpu
CORA = str(Path(__file__).resolve().parent.parent / "datasets" / "cora.mtx.gz")


@pytest.mark.parametrize("method", ["rcm", "hubsort"])
def test_measure_through_the_cli(tmp_path, method):
    result = run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), "--method", method, "--measure",
                     "--width", "32", "--cache", str(tmp_path / "decisions.json"), "--json")
    assert result.exit_code == 0, result.stderr
    gain = json.loads(result.stdout)["measure"]
    assert gain["width"] == 32 and gain["verified"] is True, gain
    assert gain["rel_error"] <= gain["tolerance"]
    for label in ("before", "after"):
        t = gain[label]
        assert t["median_ms"] > 0 and t["p20_ms"] <= t["median_ms"] <= t["p80_ms"] and t["repeats"] >= 3
        assert t["backend"] and t["schedule"]
    assert gain["speedup"] == pytest.approx(gain["before"]["median_ms"] / gain["after"]["median_ms"])
    assert (tmp_path / "decisions.json").is_file()       # both orders' decisions were tuned and stored
    table = run_cli("reorder", CORA, "--out", str(tmp_path / "c.npz"), "--method", method, "--measure",
                    "--width", "32", "--cache", str(tmp_path / "decisions.json"))
    assert table.exit_code == 0 and "gain: " in table.stdout and "(verified" in table.stdout


def test_measure_gain_on_a_shuffled_band(tmp_path):
    """A band whose ids were shuffled, before and after RCM: the case reordering should help most."""
    graph = generate("banded", {"n": 500_000, "bandwidth": 8, "shuffle": 1})
    reordered, perm, _ = reordering.reorder(graph, "rcm")
    gain = measure_gain(graph, reordered, perm, 64, cache=str(tmp_path / "decisions.json"))
    assert gain.verified, gain
    assert math.isfinite(gain.speedup) and gain.speedup > 0
    print(f"shuffled band n=500k K=64: {gain.before.median_ms:.3f} ms -> {gain.after.median_ms:.3f} ms "
          f"({gain.speedup:.2f}x)")


# ---- the device paths of the reordering decision, label propagation, torch and the benchmark

BLOCKS = {"n": 500_000, "nnz": 10_000_000, "q50": 12, "q90": 40, "q99": 120, "max": 2000,
          "locality": 0.8, "block": 2048}


def test_labelprop_on_the_device_gives_the_hosts_order():
    """The same whole-array passes on CuPy and NumPy: unique sort keys and a hashed half per round,
    so the device's labels are the host's exactly."""
    import cupy

    graph = generate("power-law", {**BLOCKS, "n": 20_000, "nnz": 300_000, "block": 256, "shuffle": 1})
    on_host = reorder.order(graph, "labelprop")
    on_device = reorder.order(graph, "labelprop", xp=cupy)
    np.testing.assert_array_equal(on_device, on_host)


def test_the_decision_reorders_a_shuffled_graph_and_replay_confirms_it(tmp_path):
    from autosage_cli import environment
    from autosage_cli.cache import DecisionCache
    from autosage_cli.scheduler.decisions import replay as replay_mod
    from autosage_cli.scheduler.decisions import reorder_decision as rd
    from autosage_cli.scheduler.probing.reorder_measure import OrderMeasurer

    cache = DecisionCache(tmp_path / "decisions.json")
    l2 = (environment.device_info() or {}).get("l2_bytes")
    shuffled = generate("power-law", {**BLOCKS, "shuffle": 1})
    d = rd.decide(shuffled, 64, measure_orders=OrderMeasurer(cache), cache=cache,
                  expected_calls=10**5, methods=("labelprop", "hubcluster"), l2_bytes=l2)
    print(d.reason)
    for c in d.candidates:
        print(c.to_dict())
    assert d.applied and d.method == "labelprop", d.reason
    best = next(c for c in d.candidates if c.method == d.method)
    assert best.times.verified and best.times.after_ms <= rd.GUARDRAIL * best.times.before_ms
    outcomes = replay_mod.replay(cache)
    mine = [o for o in outcomes if o.op == "reorder-spmm"]
    assert len(mine) == 1 and mine[0].status == "ok", mine[0].reason
    # the natural order is left alone, without measuring
    natural = generate("power-law", BLOCKS)
    kept = rd.decide(natural, 64, measure_orders=OrderMeasurer(cache), cache=cache, l2_bytes=l2)
    assert not kept.applied and "already local" in kept.reason


def test_torch_reordered_layers_on_cuda_match_the_original_order(tmp_path):
    torch = pytest.importorskip("torch")
    import autosage_cli.torch as at

    graph = generate("power-law", {**BLOCKS, "n": 50_000, "nnz": 1_000_000, "shuffle": 1})
    torch.manual_seed(0)
    layers = torch.nn.ModuleList([at.SAGEConv(32, 64), at.SAGEConv(64, 8)]).cuda()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = layers

        def forward(self, x, g):
            return self.layers[1](torch.relu(self.layers[0](x, g)), g)

    net = Net()
    x = torch.randn(graph.n_rows, 32, device="cuda")
    plain = net(x, at.Graph.from_csr_graph(graph, device="cuda", cache=str(tmp_path / "d.json")))
    rg = at.reorder(graph, "labelprop", device="cuda", cache=str(tmp_path / "d.json"))
    out = at.Reordered(net, rg)(x)
    torch.testing.assert_close(out, plain, rtol=1e-4, atol=1e-4)
    auto = at.reorder(graph, "auto", width=64, device="cuda", cache=str(tmp_path / "d.json"),
                      methods=("labelprop",))
    torch.testing.assert_close(at.Reordered(net, auto)(x), plain, rtol=1e-4, atol=1e-4)


def test_auto_on_a_cuda_graph_measures_and_applies_its_own_relabelling(tmp_path, monkeypatch):
    # at.reorder of a Graph already on the GPU: the order is relabelled there, the host copy of that
    # is what OrderMeasurer tunes and times, nothing is relabelled on the host, and a second call
    # takes the cached decision without measuring or relabelling on the host either
    torch = pytest.importorskip("torch")
    import autosage_cli.torch as at

    graph = generate("power-law", {**BLOCKS, "n": 400_000, "nnz": 8_000_000, "shuffle": 1})
    cache = str(tmp_path / "d.json")
    user = at.Graph.from_csr_graph(graph, device="cuda", cache=cache)
    real_permute, host_relabels = reorder.permute, []
    monkeypatch.setattr(reorder, "permute", lambda *a, **k: host_relabels.append(1) or real_permute(*a, **k))
    rg = at.reorder(user, "auto", width=64, cache=cache, methods=("labelprop",), expected_calls=10**6)
    cand = next(c for c in rg.decision.candidates if c.method == "labelprop")
    assert cand.times is not None and cand.times.verified and 0 < cand.apply_s < rg.cost_s
    assert host_relabels == []
    x = torch.randn(graph.n_rows, 64, device="cuda")
    torch.testing.assert_close(rg.to_user(at.spmm(rg.graph, rg.to_internal(x))), at.spmm(user, x),
                               rtol=1e-4, atol=1e-4)
    if rg.applied:
        assert rg.decision.reordered.fingerprint == real_permute(user.host_csr(), rg.decision.perm).fingerprint
    again = at.reorder(user, "auto", width=64, cache=cache, methods=("labelprop",), expected_calls=10**6)
    assert again.decision.from_cache and again.method == rg.method and host_relabels == []
    print(f"auto on {graph.nnz:,} edges: {rg.method}, {cand.times.speedup:.2f}x, decided in "
          f"{rg.cost_s:.2f} s, cached {again.cost_s:.3f} s")


def test_bench_rows_for_a_reordered_graph(tmp_path):
    out = tmp_path / "run"
    result = run_cli("bench", "--dataset", "cora", "--ops", "spmm", "--widths", "16", "--reorder",
                     "labelprop,rcm", "--out", str(out), "--cache", str(tmp_path / "d.json"))
    assert result.exit_code == 0, result.stderr
    import csv

    rows = list(csv.DictReader(open(out / "results.csv")))
    orders = {r["reorder"] for r in rows if r["backend"] == "autosage"}
    assert orders == {"", "labelprop", "rcm"}
    assert all(float(r["reorder_s"]) >= 0 for r in rows if r["reorder"])


# ---- `autosage reorder --method auto`: the decision end to end on this GPU

PUBMED = str(Path(__file__).resolve().parent.parent / "datasets" / "pubmed.mtx.gz")


def _auto_cli(graph, tmp_path, *extra):
    result = run_cli("reorder", graph, "--out", str(tmp_path / "g.npz"), "--method", "auto",
                     "--cache", str(tmp_path / "decisions.json"), "--json", *extra)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _assert_written_as_decided(graph, tmp_path, doc):
    from autosage_cli.graphs.load import load_graph

    original, written = load_graph(path=graph), load_graph(path=tmp_path / "g.npz")
    perm = np.load(tmp_path / "g.perm.npy")
    if doc["decision"]["applied"]:
        expected = reorder.permute(original, perm)
    else:
        np.testing.assert_array_equal(perm, np.arange(original.n_rows))
        expected = original
    np.testing.assert_array_equal(written.indptr, expected.indptr)
    np.testing.assert_array_equal(written.indices, expected.indices)
    np.testing.assert_allclose(written.values, expected.values, rtol=1e-6)
    assert doc["reordering"]["method"] == doc["decision"]["method"]


def test_auto_keeps_cora_whose_features_fit_in_l2(tmp_path):
    """cora at K=64 is 0.7 MB of features: within any data-centre GPU's L2, so nothing is measured."""
    doc = _auto_cli(CORA, tmp_path)
    d = doc["decision"]
    assert d["method"] == "identity" and not d["applied"] and "fits in L2" in d["reason"], d
    assert d["candidates"] == [] and d["width"] == 64
    _assert_written_as_decided(CORA, tmp_path, doc)


def test_auto_measures_pubmed_at_a_width_beyond_l2(tmp_path):
    """pubmed (locality 0.33) at K=1024 is 81 MB of features, more than the L2 of an H100 or H200:
    the candidates are computed and measured on the device, and the graph written is the one
    decided; a second run is a cache hit."""
    from autosage_cli.scheduler.decisions import reorder_decision as rd

    doc = _auto_cli(PUBMED, tmp_path, "--width", "1024", "--calls", "100000")
    d = doc["decision"]
    print(d["reason"])
    for c in d["candidates"]:
        print(c)
    measured = [c for c in d["candidates"] if c["times"]]
    assert measured, d
    for c in measured:
        t = c["times"]
        assert t["before_ms"] > 0 and t["after_ms"] > 0 and t["verified"] is True, c
    if d["applied"]:
        best = next(c for c in measured if c["method"] == d["method"])
        assert best["verdict"] == "applies"
        assert best["times"]["after_ms"] <= rd.GUARDRAIL * best["times"]["before_ms"]
    else:
        assert not any(c["verdict"] == "applies" for c in d["candidates"])
    _assert_written_as_decided(PUBMED, tmp_path, doc)
    again = _auto_cli(PUBMED, tmp_path, "--width", "1024", "--calls", "100000")
    assert again["decision"]["from_cache"] and again["decision"]["method"] == d["method"]
    assert again["fingerprint"] == doc["fingerprint"]
