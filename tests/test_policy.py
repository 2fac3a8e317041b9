"""Where the probe runs (scheduler/probing/policy.py): the whole graph when the budget allows, else a
sample whose best are confirmed on the whole graph, else the sample alone."""
from __future__ import annotations

import pytest

from autosage_cli.kernels.schedule import Schedule
from autosage_cli.scheduler.probing import policy


def ranked(*ms):
    """Distinct schedules of two families with the given estimates, in order."""
    fams = ("subwarp", "warprow")
    return [(Schedule("spmm", fams[i % 2], lanes=2 ** (i % 6), vec=1, threads=256, unroll=1 + i // 6), m)
            for i, m in enumerate(ms)]


def test_cost_of_a_whole_graph_probe_counts_the_screen_and_the_survivors():
    r = ranked(1.0, 2.0)
    cost = policy.full_probe_cost_ms(r, vendor_est_ms=1.0, n_vendors=4)
    cal = policy.NATIVE_CALIBRATION
    screen = 2 * cal * (1.0 + 2.0)     # verify + one timed launch each
    survivors = 2 * policy.SURVIVOR_LAUNCHES * cal * 1.0
    # vendors: verify + one timed launch each (the verify run warms it up), two survivors' batches
    vendors = (4 * 2 + 2 * policy.SURVIVOR_LAUNCHES) * 1.0 * policy.VENDOR_CALIBRATION
    assert cost == pytest.approx(screen + survivors + vendors)


def test_the_whole_graph_when_the_top_k_fits():
    p = policy.plan_probe(ranked(*[0.1] * 12), top_k=12, budget_ms=1000.0, vendor_est_ms=0.2, n_vendors=4)
    assert p.where == "full" and len(p.candidates) == 12 and p.confirm == 0
    assert p.predicted_ms <= 1000.0 and "whole graph: 12 candidates" in p.why


def test_the_budget_cuts_the_candidates_before_it_gives_up_the_whole_graph():
    # 10 ms a launch: vendors ~ 4 x 2 + 2 x 3 launches x 24 ms = 336 ms, each native ~ 32 ms + survivors
    p = policy.plan_probe(ranked(*[10.0] * 12), top_k=12, budget_ms=700.0, vendor_est_ms=12.0, n_vendors=4)
    assert p.where == "full" and policy.MIN_FULL_CANDIDATES <= len(p.candidates) < 12
    assert p.predicted_ms <= 700.0
    one_more = policy.full_probe_cost_ms(ranked(*[10.0] * (len(p.candidates) + 1)), 12.0, 4)
    assert one_more > 700.0


def test_a_sample_confirmed_on_the_whole_graph_when_only_that_fits():
    p = policy.plan_probe(ranked(*[28.0] * 12), top_k=12, budget_ms=1000.0, vendor_est_ms=10.0, n_vendors=4)
    assert p.where == "sample" and p.confirm == policy.CONFIRM and len(p.candidates) == 12
    assert "confirmed" in p.why and p.predicted_ms <= 1000.0


def test_the_sample_alone_when_even_confirming_does_not_fit():
    p = policy.plan_probe(ranked(*[300.0] * 12), top_k=12, budget_ms=1000.0, vendor_est_ms=100.0, n_vendors=4)
    assert (p.where, p.confirm) == ("sample", 0) and "sample only" in p.why


def test_full_and_small_graphs_take_the_whole_graph_whatever_it_costs():
    r = ranked(*[300.0] * 12)
    forced = policy.plan_probe(r, 6, 1.0, 100.0, 4, full_forced=True)
    assert forced.where == "full" and len(forced.candidates) == 6 and "--full" in forced.why
    small = policy.plan_probe(r, 6, 1.0, 100.0, 4, whole_is_sample="small graph: a sample would be most of it")
    assert small.where == "full" and small.why.startswith("small graph")
