"""The family check (policy.py, select.py, probe_run.run_probe): when even confirming the sample's
best with the vendors on the whole graph does not fit, the sample decides the guardrail and its
best native of each family is re-timed on the whole graph without vendors; the fastest there wins."""
from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from autosage_cli.kernels.schedule import Schedule
from autosage_cli.scheduler.probing import policy
from autosage_cli.scheduler import tune as tune_mod

from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, small_graph


def ranked(families, ms):
    return [(Schedule("spmm", f, lanes=2 ** (i % 5), vec=1, threads=256, unroll=1 + i // 5), ms)
            for i, f in enumerate(families)]


def test_the_family_check_when_confirming_with_the_vendors_does_not_fit():
    r = ranked(["subwarp", "warprow"] * 6, 100.0)
    p = policy.plan_probe(r, top_k=12, budget_ms=1000.0, vendor_est_ms=100.0, n_vendors=4)
    assert p.where == "sample" and p.confirm == 0 and p.check_families == 2
    assert p.predicted_ms == pytest.approx(policy.family_check_cost_ms(p.candidates))
    assert p.predicted_ms <= policy.FAMILY_CHECK_FACTOR * 1000.0 and "without vendors" in p.why
    cal = 100.0 * policy.NATIVE_CALIBRATION   # two families: screen each, survivors and reference at the fastest
    assert p.predicted_ms == pytest.approx(2 * 2 * cal + (2 * policy.SURVIVOR_LAUNCHES + policy.REFERENCE_LAUNCHES) * cal)


@pytest.mark.parametrize("families,ms", [(["warprow"] * 12, 100.0),               # one family: nothing to tell apart
                                         (["subwarp", "warprow"] * 6, 1000.0)])   # too dear even so
def test_the_sample_alone_without_two_families_or_when_the_check_is_too_dear(families, ms):
    p = policy.plan_probe(ranked(families, ms), top_k=12, budget_ms=1000.0, vendor_est_ms=100.0, n_vendors=4)
    assert (p.where, p.confirm, p.check_families) == ("sample", 0, 0) and p.why.startswith("sample only")


def test_family_bests_keeps_the_estimate_order_and_the_limit():
    r = ranked(["split", "split", "warprow", "subwarp", "warprow", "splitwarp"], 1.0)
    assert [s.family for s, _ in policy.family_bests(r)] == ["split", "warprow", "subwarp"]
    assert [s.name for s, _ in policy.family_bests(r, 2)] == [r[0][0].name, r[2][0].name]


@dataclass
class SampleAwareMeasurer(FakeMeasurer):
    """Natives take `native_ms` on the sample and `full_ms` on the whole graph (`full_nnz` tells
    them apart); vendors the same on both."""
    full_ms: dict = field(default_factory=dict)
    full_nnz: int = 0

    def prepare_native(self, dgraph, schedule, k, heads, scale=None, dtype="float32"):
        table = self.full_ms if dgraph.host.nnz == self.full_nnz else self.native_ms
        return self._plan(dgraph, schedule.name, k, heads, table.get(schedule.name, self.default_native_ms))


@pytest.fixture
def graph():
    return small_graph(n=2000)


def _tune(graph, m, monkeypatch, checks=3):
    real = policy.plan_probe

    def sample_then_check(ranked_, top_k, *a, **kw):
        plan = real(ranked_, top_k, *a, **kw)
        return policy.ProbePlan("sample", plan.candidates, 0, 1.0, "test: sample, family check", checks)

    monkeypatch.setattr(policy, "plan_probe", sample_then_check)
    return tune_mod.tune(graph, "spmm", 8, 1, cache=None, measure=m, device_info=DEVICE,
                         software_info=SOFTWARE, features=features_of(graph), top_k=8,
                         sample_nnz=graph.nnz // 4)


def _shortlist(graph):
    return [s for s, _ in tune_mod.estimate.shortlist(tune_mod.estimate.rank(features_of(graph), "spmm", 8), 8)]


def _by_family(shortlist):
    fams: dict = {}
    for s in shortlist:
        fams.setdefault(s.family, []).append(s.name)
    assert len(fams) >= 2, "the test needs a shortlist of two families or more"
    return fams


def test_the_whole_graph_picks_among_the_sample_best_of_each_family(graph, monkeypatch):
    fams = _by_family(_shortlist(graph))
    (fa, a), (fb, b) = list(fams.items())[:2]
    # the sample ranks family a first (0.2 ms), family b second (0.4); the whole graph the other way
    sample = {n: 0.6 for names in fams.values() for n in names} | {a[0]: 0.2, b[0]: 0.4}
    full = {n: 4.0 for names in fams.values() for n in names} | {a[0]: 3.0, b[0]: 2.0}
    m = SampleAwareMeasurer(vendor_ms={"cusparse-alg1": 1.0, "cusparse-alg2": 0.9}, native_ms=sample,
                            full_ms=full, full_nnz=graph.nnz)
    result = _tune(graph, m, monkeypatch)
    p = result.entry["probe"]
    assert p["graph"] == "sample" and p["vendors_on"] == "sample" and p["confirmed_on"] == "full"
    on_full = {c["name"] for c in result.candidates if c["graph"] == "full"}
    assert len(on_full) == min(3, len(fams)) and {a[0], b[0]} <= on_full   # one of each family
    assert all(v["graph"] == "sample" for v in result.vendor)            # no vendor on the whole graph
    assert result.entry["reference"].startswith("float64 reference")   # the whole graph's check
    d = result.decision
    assert (d.backend, d.schedule, d.native_ms) == ("native", b[0], 2.0)
    assert d.vendor_ms == 0.9 and d.speedup == pytest.approx(0.9 / 0.4)  # the guardrail's ratio: the sample's
    assert "on the whole graph" in d.reason and a[0] in d.reason


def test_a_vendor_that_wins_on_the_sample_ends_the_probe_there(graph, monkeypatch):
    m = SampleAwareMeasurer(vendor_ms={"cusparse-alg1": 1.0, "cusparse-alg2": 0.3}, default_native_ms=0.5,
                            full_ms={}, full_nnz=graph.nnz)
    result = _tune(graph, m, monkeypatch)
    assert result.decision.backend == "cusparse-alg2"
    assert all(c["graph"] != "full" for c in result.candidates) and "vendors_on" not in result.entry["probe"]


def test_natives_behind_the_guardrail_on_the_sample_are_not_re_timed(graph, monkeypatch):
    fams = _by_family(_shortlist(graph))
    (fa, a), (fb, b) = list(fams.items())[:2]
    # family b's best is slower than the vendor on the sample: only family a is left, nothing to check
    sample = {n: 2.0 for names in fams.values() for n in names} | {a[0]: 0.2}
    m = SampleAwareMeasurer(vendor_ms={"cusparse-alg1": 1.0}, native_ms=sample, full_ms={b[0]: 0.1},
                            full_nnz=graph.nnz)
    result = _tune(graph, m, monkeypatch)
    assert all(c["graph"] != "full" for c in result.candidates)
    assert result.decision.schedule == a[0]
