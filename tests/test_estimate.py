"""The cost model ranks the cases whose answer is known (and stays finite on everything else)."""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels.schedule import Schedule
from autosage_cli.scheduler import estimate
from autosage_cli.scheduler.estimate import DegreeProfile, estimate_ms, estimate_vendor_ms, rank

from scheduler_fakes import HUB_200K, REDDIT_LIKE, UNIFORM_1M, Features

# The space modules register the real families (and warp-per-item hooks) on import.
sched.registry("spmm"), sched.registry("sddmm"), sched.registry("attention")


def sw(lanes, vec, **kw):
    return Schedule("spmm", "subwarp", lanes=lanes, vec=vec, threads=256, unroll=kw.pop("unroll", 4), **kw)


def split(lanes, vec, reduce="atomic", split_at=256, chunk=256):
    return Schedule("spmm", "split", lanes=lanes, vec=vec, threads=256, unroll=4, split=split_at,
                    chunk=chunk, reduce=reduce)


def test_skewed_graph_ranks_split_above_unsplit_row_groups():
    for k in (1, 16, 64):
        unsplit = min(estimate_ms(HUB_200K, "spmm", k, sw(g, v)) for g in (1, 4, 16, 32) for v in (1, 4))
        best_split = min(estimate_ms(HUB_200K, "spmm", k, split(g, v)) for g in (1, 4, 32) for v in (1, 4))
        # A 30k-edge hub walked by one group is the whole critical path.
        assert best_split * 10 < unsplit, k
    ranked = [s for s, _ in rank(HUB_200K, "spmm", 16)]
    top = ranked[:6]
    assert all(s.split for s in top), [s.name for s in top]


def test_reddit_like_hub_rows_push_unsplit_subwarp_down():
    ranked = [s for s, _ in rank(REDDIT_LIKE, "spmm", 16)]
    assert ranked[0].family != "subwarp"
    assert ranked.index(next(s for s in ranked if s.family == "subwarp")) >= 6


def test_k1_prefers_small_groups_to_32_lane_groups():
    wide = estimate_ms(UNIFORM_1M, "spmm", 1, sw(32, 1))
    for g in (1, 2, 4):
        assert estimate_ms(UNIFORM_1M, "spmm", 1, sw(g, 1)) * 1.5 < wide, g
    best = rank(UNIFORM_1M, "spmm", 1)[0][0]
    assert best.lanes * best.vec <= 4 or best.lanes_per_item == 32


def test_k256_prefers_wide_vectors():
    for g in (8, 32):
        assert estimate_ms(UNIFORM_1M, "spmm", 256, sw(g, 4)) < estimate_ms(UNIFORM_1M, "spmm", 256, sw(g, 1))
    top = rank(UNIFORM_1M, "spmm", 256)[:6]
    assert all(s.vec == 4 for s, _ in top), [s.name for s, _ in top]


def test_lane_idleness_at_small_k():
    # K=4 with 32 lanes leaves 28 idle per step: a 4-lane group must win.
    assert estimate_ms(UNIFORM_1M, "spmm", 4, sw(4, 1)) < estimate_ms(UNIFORM_1M, "spmm", 4, sw(32, 1))


def test_uniform_graph_split_costs_nothing_extra_and_ties_prefer_unsplit():
    plain, cut = sw(4, 4), split(4, 4)
    assert estimate_ms(UNIFORM_1M, "spmm", 16, plain) <= estimate_ms(UNIFORM_1M, "spmm", 16, cut)
    order = [s for s, _ in rank(UNIFORM_1M, "spmm", 16, schedules=[cut, plain])]
    assert order == [plain, cut]


def test_two_phase_merge_costs_a_launch_more_than_atomics_on_skew():
    a = estimate_ms(HUB_200K, "spmm", 16, split(4, 4, "atomic"))
    t = estimate_ms(HUB_200K, "spmm", 16, split(4, 4, "twophase"))
    assert t > a


def test_l2_reuse_and_locality_lower_the_estimate():
    s = sw(8, 4)
    far = replace(UNIFORM_1M, locality=1 / 3)            # random columns
    near = replace(UNIFORM_1M, locality=0.02)            # columns close to their row
    assert estimate_ms(near, "spmm", 64, s) < estimate_ms(far, "spmm", 64, s)
    small_b = replace(UNIFORM_1M, n_cols=50_000)        # B = 50k x 64 x 4 B fits in L2
    assert estimate_ms(small_b, "spmm", 64, s) < estimate_ms(far, "spmm", 64, s)


def test_more_nonzeros_cost_more():
    s = sw(8, 4)
    bigger = replace(UNIFORM_1M, nnz=UNIFORM_1M.nnz * 4, degree_mean=64, degree_q50=64, degree_q90=80,
                     degree_q99=100, degree_max=130, degree_min=30)
    assert estimate_ms(bigger, "spmm", 32, s) > estimate_ms(UNIFORM_1M, "spmm", 32, s)


def test_sddmm_skew_prefers_edge_parallel_or_chunked_rows():
    row = Schedule("sddmm", "rowgroup", lanes=4, vec=4, threads=256, tile=16, unroll=4)
    edge = Schedule("sddmm", "edge", lanes=4, vec=4, threads=256, unroll=2)
    chunked = replace(row, chunk=256)
    assert estimate_ms(HUB_200K, "sddmm", 16, edge) * 10 < estimate_ms(HUB_200K, "sddmm", 16, row)
    assert estimate_ms(HUB_200K, "sddmm", 16, chunked) * 10 < estimate_ms(HUB_200K, "sddmm", 16, row)


def test_attention_fused_beats_unfused_on_reddit_like():
    ranked = rank(REDDIT_LIKE, "attention", 64, heads=8)
    fused = min(ms for s, ms in ranked if s.family.startswith("fused"))
    unfused = min(ms for s, ms in ranked if s.family == "unfused")
    assert fused < unfused


def test_unknown_family_gets_the_generic_model():
    odd = Schedule("spmm", "mystery", lanes=8, vec=2, threads=128)
    ms = estimate_ms(UNIFORM_1M, "spmm", 16, odd)
    assert math.isfinite(ms) and ms > 0
    odd_att = Schedule("attention", "flash_v9", lanes=16, vec=4, threads=256, tile=64)
    assert math.isfinite(estimate_ms(REDDIT_LIKE, "attention", 64, odd_att, heads=4))


@pytest.mark.parametrize("op,k,heads", [("spmm", 1, 1), ("spmm", 33, 1), ("spmm", 256, 1),
                                        ("sddmm", 4, 1), ("sddmm", 128, 1),
                                        ("attention", 16, 1), ("attention", 64, 8)])
@pytest.mark.parametrize("features", [UNIFORM_1M, HUB_200K, REDDIT_LIKE], ids=["uniform", "hub", "reddit"])
def test_every_supported_schedule_gets_a_positive_finite_estimate(op, k, heads, features):
    ranked = rank(features, op, k, heads)
    assert len(ranked) == len(sched.candidates(op, k, heads))
    times = [ms for _, ms in ranked]
    assert all(math.isfinite(t) and t > 0 for t in times)
    assert times == sorted(times)
    assert all(s.supports(k, heads) is None for s, _ in ranked)


def test_rank_skips_schedules_that_cannot_take_k():
    # vec=4 cannot run K=3: never ranked, never probed.
    pool = [sw(4, 4), sw(4, 1)]
    assert [s for s, _ in rank(UNIFORM_1M, "spmm", 3, schedules=pool)] == [sw(4, 1)]


def test_degree_profile_tail():
    prof = DegreeProfile(HUB_200K)
    assert prof.rows_above(10_000) >= 1 and prof.rows_above(10_000) < 100
    assert prof.rows_above(HUB_200K.degree_max) == 0
    shares = [prof.nnz_share_above(t) for t in (0, 2, 100, 1000, 40_000)]
    assert shares == sorted(shares, reverse=True) and shares[-1] == 0
    assert prof.lockstep_factor(1) == 1.0
    assert prof.lockstep_factor(32) > prof.lockstep_factor(4) >= 1.0
    assert prof.lockstep_factor(32, cap=2) < prof.lockstep_factor(32)
    assert prof.steps_per_edge(1) == 1.0 and prof.steps_per_edge(32) < 1.0


def test_tiny_graph_and_empty_rows_do_not_break_the_model():
    tiny = Features(1, 1, 0, 0.0, 0, 0, 0, 0, 0, empty_rows=1)
    for s in (sw(1, 1), split(4, 4)):
        assert math.isfinite(estimate_ms(tiny, "spmm", 8, s))


def test_vendor_estimate_and_device_model():
    assert estimate_vendor_ms(UNIFORM_1M, "spmm", 16) > 0
    assert estimate_vendor_ms(REDDIT_LIKE, "attention", 64, heads=8) > estimate_vendor_ms(REDDIT_LIKE, "attention", 64)
    dev = estimate.device_model({"name": "H100", "sms": 114, "l2_bytes": 50 * 2**20})
    assert dev.sms == 114 and dev.l2_bytes == 50 * 2**20
    assert estimate.device_model(None) is estimate.H200


def test_shortlist_keeps_one_of_each_plausible_family_in_estimate_order():
    ranked = rank(REDDIT_LIKE, "spmm", 64)
    top = estimate.shortlist(ranked, 6)
    assert len(top) == 6
    names = [s.name for s, _ in ranked]
    assert [names.index(s.name) for s, _ in top] == sorted(names.index(s.name) for s, _ in top)
    assert top[0] == ranked[0]
    best = ranked[0][1]
    plausible = {s.family for s, ms in ranked if ms <= 2 * best}
    assert plausible <= {s.family for s, _ in top}
    assert estimate.shortlist(ranked, 1) == ranked[:1]
    assert estimate.shortlist([], 6) == []
