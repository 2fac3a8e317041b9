"""scheduler.decisions.reorder_decision on the CPU: the estimate, the shortcuts that measure nothing, the
guardrail and the cost weighed against the expected calls, the cache entry and permutation file,
and `replay` re-checking a stored decision. The measurer is a fake whose SpMM really runs (SciPy)
and whose time follows the locality of the order it is given, or whatever a test dictates."""
from __future__ import annotations

import numpy as np
import pytest

from autosage_cli.cache import DecisionCache
from autosage_cli.errors import AutosageError
from autosage_cli.features import compute_features, locality
from autosage_cli.graphs import reorder
from autosage_cli.graphs.synthetic import generate
from autosage_cli.scheduler.decisions import replay as replay_mod
from autosage_cli.scheduler.decisions import reorder_decision as rd
from autosage_cli.scheduler.probing.reorder_measure import OrderMeasurer

from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer

BLOCKS = {"n": 12_000, "nnz": 240_000, "q50": 16, "q90": 40, "q99": 90, "max": 300,
          "locality": 0.8, "block": 512}
SHUFFLED = generate("power-law", {**BLOCKS, "shuffle": 1})
NATURAL = generate("power-law", BLOCKS)
METHODS = ("hubcluster", "degree", "rcm")     # no optional library: these run everywhere
needs_pymetis = pytest.mark.skipif(reorder.available("metis") is not None,
                                   reason="pymetis is not installed (the reorder extra)")


def _ms(graph) -> float:
    """A time that grows with how far the columns lie from the diagonal, as gathers do."""
    return 1.0 + 10.0 * locality(graph, np.diff(graph.indptr))


class FakeOrders:
    """measure_orders: a real SpMM on both orders (checked as the GPU one checks), fake times."""

    def __init__(self, after=None, verified=True):
        self.calls, self.after, self.verified = [], after, verified

    def __call__(self, original, reordered, perm, op, k, dtype):
        self.calls.append((reordered.source.get("reorder"), op, k, dtype))
        b = np.random.default_rng(0).standard_normal((original.n_cols, k))
        c, c_new = original.to_scipy() @ b, reordered.to_scipy() @ b[perm]
        error = float(np.linalg.norm(c_new - c[perm]) / np.linalg.norm(c))
        before = _ms(original)
        after = self.after(before) if self.after else _ms(reordered)
        return rd.OrderTimes(before, after, "fake-a", "fake-b", error, self.verified and error < 1e-6)


def _decide(graph, tmp_path, orders, **kw):
    kw = {"methods": METHODS, "device_info": DEVICE, "software_info": SOFTWARE, **kw}
    return rd.decide(graph, 64, measure_orders=orders, cache=tmp_path / "decisions.json", **kw)


def test_estimate_follows_the_locality_drop_and_the_l2():
    assert rd.estimate_speedup(1000, 64, 4, None, 0.333, 0.070) == pytest.approx(1 + 0.263 / 0.333)
    assert rd.estimate_speedup(1000, 64, 4, None, 0.07, 0.20) == 1.0      # worse: no gain expected
    assert rd.estimate_speedup(1000, 64, 4, 1000 * 64 * 4, 0.333, 0.0) == 1.0   # B fits in L2


def test_a_shuffled_graph_is_reordered_and_the_decision_stored(tmp_path):
    orders = FakeOrders()
    d = _decide(SHUFFLED, tmp_path, orders, expected_calls=10**5)
    assert d.applied and d.method in METHODS and not d.from_cache, d.reason
    assert d.locality == pytest.approx(compute_features(SHUFFLED).locality)
    assert orders.calls and all(c[1:] == ("spmm", 64, "float32") for c in orders.calls)
    assert len(orders.calls) <= rd.MAX_MEASURED
    best = next(c for c in d.candidates if c.method == d.method)
    assert best.verdict == "applies" and best.times.speedup > 1 / rd.GUARDRAIL
    assert d.reordered.fingerprint == reorder.permute(SHUFFLED, d.perm).fingerprint
    # where deciding spent its time, per phase, kept with the decision
    assert set(d.timings) == {"features_s", "candidates_s", "relabel_s", "measure_s"}
    assert all(d.timings[p] > 0 for p in ("features_s", "candidates_s", "relabel_s", "measure_s"))
    entry = next(e for e in DecisionCache(tmp_path / "decisions.json").entries() if "reorder" in e)
    assert entry["reorder"]["timings"] == pytest.approx(d.timings)
    stored = rd.perm_path(tmp_path / "decisions.json", SHUFFLED.fingerprint, d.method)
    np.testing.assert_array_equal(np.load(stored), d.perm)
    # a second decision is a cache hit: the same order, nothing measured
    again = _decide(SHUFFLED, tmp_path, FakeOrders(after=lambda b: pytest.fail("measured on a hit")),
                    expected_calls=10**5)
    assert again.from_cache and again.method == d.method
    np.testing.assert_array_equal(again.perm, d.perm)
    assert again.reordered is None    # not relabelled until asked (the torch path never asks)
    assert again.relabelled().fingerprint == d.reordered.fingerprint
    # other settings (the expected calls) decide again
    third = FakeOrders()
    _decide(SHUFFLED, tmp_path, third, expected_calls=2000)
    assert third.calls


def test_a_local_graph_or_one_whose_b_fits_in_l2_is_answered_without_measuring(tmp_path):
    never = FakeOrders(after=lambda b: pytest.fail("measured"))
    d = _decide(NATURAL, tmp_path, never)
    assert not d.applied and "already local" in d.reason and d.perm is None
    fits = _decide(SHUFFLED, tmp_path, never, l2_bytes=SHUFFLED.n_cols * 64 * 4)
    assert not fits.applied and "fits in L2" in fits.reason


@pytest.mark.parametrize("after, verified, why", [
    (lambda b: b * 1.2, True, "not the"),            # measured slower: never applied
    (lambda b: b * 0.97, True, "not the"),           # faster, but inside the guardrail
    (lambda b: b * 0.5, False, "did not verify"),    # fast and wrong
])
def test_an_order_that_does_not_measure_a_verified_gain_is_not_applied(tmp_path, after, verified, why):
    d = _decide(SHUFFLED, tmp_path, FakeOrders(after=after, verified=verified), expected_calls=10**6)
    assert not d.applied and d.perm is None
    assert any(why in c.verdict for c in d.candidates if c.times is not None), d.reason


def test_the_cost_is_weighed_against_the_expected_calls(tmp_path):
    # 1 ms saved per call: a few calls do not pay for computing and applying the order
    one_ms = FakeOrders(after=lambda b: b - 1.0)
    few = _decide(SHUFFLED, tmp_path, one_ms, expected_calls=1, methods=("rcm",))
    cand = few.candidates[0]
    assert not few.applied and "save less than" in cand.verdict and cand.cost_s > 0.001
    many = _decide(SHUFFLED, tmp_path, FakeOrders(after=lambda b: b - 1.0),
                   expected_calls=int(1000 * cand.cost_s * 10) + 10, methods=("rcm",))
    assert many.applied and many.method == "rcm"


def test_the_relabelling_weighed_is_the_callers_own(tmp_path):
    # 10,000 calls of 1 ms saved pay for the order and the host's relabelling of this small graph,
    # not for a relabelling that costs 50 s on the caller's path; one that costs nothing applies.
    # The caller's relabel also hands back the graph to measure.
    paid = []
    def costly(graph, perm, method):
        paid.append((perm, method))
        return rd.host_relabel(graph, perm, method)[0], 50.0
    orders = FakeOrders(after=lambda b: b - 1.0)
    slow = _decide(SHUFFLED, tmp_path, orders, expected_calls=10_000, methods=("rcm",), relabel=costly)
    cand = slow.candidates[0]
    assert not slow.applied and cand.apply_s == 50.0 and "save less than" in cand.verdict
    assert len(paid) == 1 and len(paid[0][0]) == SHUFFLED.n_rows and paid[0][1] == "rcm"
    assert orders.calls == [("rcm", "spmm", 64, "float32")]     # it measured what relabel gave
    free = _decide(SHUFFLED, tmp_path, FakeOrders(after=lambda b: b - 1.0), expected_calls=10_000,
                   methods=("rcm",), relabel=lambda g, p, m: (rd.host_relabel(g, p, m)[0], 0.0),
                   retune=True)
    assert free.applied and free.candidates[0].apply_s == 0.0


def test_the_symmetry_check_runs_only_for_the_orders_that_read_it(tmp_path, monkeypatch):
    # the exact check transposes the graph; labelprop and hubcluster never read its verdict
    from autosage_cli import features as features_mod

    checks = []
    real = features_mod.transpose_matches
    monkeypatch.setattr(features_mod, "transpose_matches", lambda *a, **k: checks.append(1) or real(*a, **k))
    from autosage_cli.graphs.csr import canonical_csr

    m = SHUFFLED.to_scipy()
    symmetric = canonical_csr((m + m.T).tocsr())     # the cheap prefilter cannot settle it
    assert features_mod.symmetry_prefilter(symmetric, features_mod.diagonal_sums(
        symmetric, np.diff(symmetric.indptr))) is None
    _decide(symmetric, tmp_path, FakeOrders(), methods=("hubcluster", "degree"))
    assert checks == []
    _decide(symmetric, tmp_path, FakeOrders(), methods=("hubcluster", "rcm"))
    assert checks == [1]


def test_bad_questions_are_one_line_errors(tmp_path):
    with pytest.raises(AutosageError, match="decided on spmm"):
        _decide(SHUFFLED, tmp_path, FakeOrders(), op="sddmm")
    with pytest.raises(AutosageError, match="unknown reordering method"):
        _decide(SHUFFLED, tmp_path, FakeOrders(), methods=("bogus",))
    with pytest.raises(AutosageError, match="at least 1"):
        _decide(SHUFFLED, tmp_path, FakeOrders(), expected_calls=0)


def test_a_method_whose_library_is_missing_is_reported_not_run(tmp_path, monkeypatch):
    monkeypatch.setattr(reorder, "available", lambda m: "needs the pymetis package" if m == "metis" else None)
    d = _decide(SHUFFLED, tmp_path, FakeOrders(), methods=("metis", "hubcluster"), expected_calls=10**5)
    metis = next(c for c in d.candidates if c.method == "metis")
    assert metis.verdict.startswith("not run: needs the pymetis") and metis.times is None


@needs_pymetis
def test_metis_recovers_the_shuffled_blocks(tmp_path, monkeypatch):
    from autosage_cli.graphs import clustered

    monkeypatch.setattr(clustered, "PART_NODES", BLOCKS["block"])   # parts the size of the blocks
    d = _decide(SHUFFLED, tmp_path, FakeOrders(), methods=("metis", "rcm"), expected_calls=10**5)
    by = {c.method: c for c in d.candidates}
    assert d.method == "metis", d.reason
    natural = compute_features(NATURAL).locality
    assert by["metis"].locality < 1.5 * natural < by["rcm"].locality


def test_replay_rechecks_a_stored_reordering(tmp_path):
    cache_path = tmp_path / "decisions.json"
    d = _decide(SHUFFLED, tmp_path, FakeOrders(), expected_calls=10**5)
    assert d.applied
    cache = DecisionCache(cache_path)
    dry = replay_mod.replay(cache, dry_run=True)
    assert [(o.op, o.schedule, o.status) for o in dry] == [("reorder-spmm", d.method, "checked")]
    ok = replay_mod.replay(cache, measure_orders=FakeOrders())
    assert ok[0].status == "ok" and ok[0].replayed_ms < ok[0].recorded_ms * 1.01, ok[0].reason
    slower = replay_mod.replay(cache, measure_orders=FakeOrders(after=lambda b: b * 1.1))
    assert slower[0].status == "failed" and "no longer gains" in slower[0].reason
    rd.perm_path(cache_path, SHUFFLED.fingerprint, d.method).unlink()
    gone = replay_mod.replay(cache, dry_run=True)
    assert gone[0].status == "missing" and gone[0].failing


def test_the_gpu_order_measurer_tunes_both_orders_and_checks_the_permuted_result(tmp_path):
    """OrderMeasurer with the scheduler's NumPy fake in place of the GPU: both orders tuned through
    the cache, the reordered output the original one permuted (the fake's plans compute SpMM)."""
    cache = DecisionCache(tmp_path / "decisions.json")
    graph = generate("power-law", {**BLOCKS, "n": 2000, "nnz": 30_000, "shuffle": 1})
    perm = reorder.order(graph, "hubcluster")
    measure = OrderMeasurer(cache, FakeMeasurer(), device_info=DEVICE, software_info=SOFTWARE)
    t = measure(graph, reorder.permute(graph, perm), perm, "spmm", 16)
    assert t.verified and t.rel_error < 1e-5 and t.before_ms > 0 and t.after_ms > 0
    assert len(cache.entries()) == 2           # one tuned decision per order


def test_a_method_predicted_over_its_time_budget_is_not_computed(tmp_path, monkeypatch):
    """METIS on a graph of 124M nonzeros takes minutes, where a reordering saves seconds: a method
    whose predicted cost (ORDER_S_PER_NNZ times the nonzeros) is over MAX_ORDER_S is reported
    not run, and the others are decided as before."""
    from autosage_cli.graphs import reorder as reorder_mod

    budget, computed = rd.MAX_ORDER_S, []
    real = reorder_mod.order
    monkeypatch.setattr(reorder_mod, "order", lambda g, m, **kw: computed.append(m) or real(g, m, **kw))
    monkeypatch.setattr(rd, "MAX_ORDER_S", 0.5 * rd.ORDER_S_PER_NNZ["rcm"] * SHUFFLED.nnz)
    d = _decide(SHUFFLED, tmp_path, FakeOrders(), methods=("rcm", "hubcluster"), expected_calls=10**5)
    rcm = next(c for c in d.candidates if c.method == "rcm")
    assert rcm.verdict.startswith("not run: predicted to take") and f"on {SHUFFLED.nnz} nonzeros" in rcm.verdict
    assert computed == ["hubcluster"] and rcm.times is None
    # products-like's size: METIS is predicted over the budget, labelprop is never predicted
    assert rd.ORDER_S_PER_NNZ["metis"] * 123_705_588 > budget > rd.ORDER_S_PER_NNZ["rcm"] * 1e6
    assert "labelprop" not in rd.ORDER_S_PER_NNZ
