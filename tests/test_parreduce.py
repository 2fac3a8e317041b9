"""The parreduce SpMM family on the CPU: its row lists (every row once, heavy rows apart, longest
first), its schedules (K bands, knobs, space rules), and what the cost model says about it."""
from __future__ import annotations

import numpy as np
import pytest

from autosage_cli.backends.row_partition import longest_first
from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels.schedule import check_family_rules
from autosage_cli.kernels.schedule import Schedule
from autosage_cli.kernels.spmm_families import PARREDUCE_HEAVY_STEPS, parreduce_heavy_threshold
from autosage_cli.ops.cost import edge_models
from autosage_cli.scheduler import estimate
from autosage_cli.scheduler.estimate import estimate_ms, rank

from scheduler_fakes import HUB_200K
from test_estimate import PRODUCTS

PARREDUCE = [s for s in sched.registry("spmm") if s.family == "parreduce"]


def indptr_of(degrees) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)


def bins(degrees: np.ndarray) -> np.ndarray:
    return np.floor(np.log2(degrees + 1.0)).astype(int)


# ------------------------------------------------------------------ row lists

def test_longest_first_lists_every_row_once_heavy_rows_apart():
    rng = np.random.default_rng(5)
    degrees = rng.integers(0, 40, 5000)
    degrees[[7, 4000, 4999]] = (150_000, 300, 129)
    heavy, light = longest_first(indptr_of(degrees), 128)
    assert heavy.dtype == light.dtype == np.int32
    assert sorted(np.concatenate([heavy, light]).tolist()) == list(range(5000))
    assert set(heavy.tolist()) == {7, 4000, 4999}
    assert (degrees[light] <= 128).all()
    assert (degrees[light] == 0).any()   # empty rows stay listed: their output is written


@pytest.mark.parametrize("threshold", (None, 8, 128))
def test_longest_first_orders_by_degree_bin_with_ascending_ids_inside(threshold):
    rng = np.random.default_rng(6)
    degrees = np.minimum(rng.pareto(1.2, 20_000).astype(np.int64) * 3, 20_000)
    for rows in longest_first(indptr_of(degrees), threshold):
        b = bins(degrees[rows])
        assert (np.diff(b) <= 0).all()                       # longest bin first
        same_bin = np.diff(b) == 0
        assert (np.diff(rows)[same_bin] > 0).all()           # ids ascend within a bin


def test_without_a_threshold_every_row_is_light():
    heavy, light = longest_first(indptr_of([3, 0, 100_000, 1]), None)
    assert heavy.size == 0
    assert light.tolist() == [2, 0, 3, 1]


# ------------------------------------------------------------------ schedules

def test_every_width_up_to_8_has_a_warp_per_row_and_a_narrow_group():
    assert 12 <= len(PARREDUCE) <= 20, len(PARREDUCE)
    for k in range(1, 9):
        lanes = {s.lanes for s in PARREDUCE if s.supports(k) is None}
        assert {32, 8} <= lanes, (k, lanes)
    assert all(s.supports(k) for s in PARREDUCE for k in (9, 16, 33, 256))


@pytest.mark.parametrize("s", PARREDUCE, ids=lambda s: s.name)
def test_parreduce_schedule_serves_its_band_and_names_its_kernel(s):
    served = [k for k in range(1, 300) if s.supports(k) is None]
    assert served == list(range(s.tile // 2 + 1, s.tile + 1))
    assert s.name_expression("float") == f"spmm_parreduce<float, {s.lanes}, {s.tile}, {s.unroll}>"
    assert s.source_file == "spmm_parreduce.cu"
    assert s.lanes_per_item == s.lanes and s.vec == 1 and not s.split and not s.chunk


def test_heavy_rows_go_to_warps_only_for_narrow_groups():
    def pr(lanes):
        return Schedule("spmm", "parreduce", lanes=lanes, vec=1, threads=256, tile=2, unroll=2)

    assert parreduce_heavy_threshold(pr(32)) is None
    assert parreduce_heavy_threshold(pr(16)) == 16 * PARREDUCE_HEAVY_STEPS
    assert parreduce_heavy_threshold(pr(8)) == 8 * PARREDUCE_HEAVY_STEPS


def test_parreduce_space_rules_reject_inconsistent_knobs():
    good = dict(lanes=8, vec=1, threads=256, tile=4, unroll=4)
    check_family_rules(Schedule("spmm", "parreduce", **good))
    for bad in (dict(tile=3), dict(tile=0), dict(lanes=4), dict(vec=2), dict(unroll=8),
                dict(split=64, chunk=64, reduce="atomic")):
        with pytest.raises(ValueError):
            check_family_rules(Schedule("spmm", "parreduce", **(good | bad)))


# ------------------------------------------------------------------ the cost model

@pytest.mark.parametrize("k", (1, 2, 3, 4, 8))
def test_parreduce_reaches_the_probe_on_products_like(k):
    # H200, products-like: the feature-parallel best is 1.14 ms at K=2, a warp-per-row parallel
    # reduction 0.97 ms; the family must be among what the probe times.
    ranked = rank(PRODUCTS, "spmm", k)
    assert any(s.family == "parreduce" for s, _ in estimate.shortlist(ranked, 6))


def test_a_hub_costs_a_narrow_parreduce_group_less_than_a_vector_group():
    # hub-200k: 4 rows of 30k among rows of ~1 edge. The vector family's 8-lane group walks a hub
    # alone; parreduce gives it a warp, so its critical path is 4x shorter.
    vec = sched.get("spmm.vector.g8.v1.t256.k2.u4")
    par = sched.get("spmm.parreduce.g8.v1.t256.k2.u4")
    assert estimate_ms(HUB_200K, "spmm", 2, par) < 0.5 * estimate_ms(HUB_200K, "spmm", 2, vec)
    # ... but a warp per 30k-edge hub still loses to cutting the hubs into pieces: split's chunks
    # or stream's windows.
    assert rank(HUB_200K, "spmm", 2)[0][0].family in ("split", "stream")


def test_row_list_is_read_once():
    # The row list is one more int32 per row than the vector family's traffic.
    walk = edge_models.vector_spmm(PRODUCTS, estimate.DegreeProfile(PRODUCTS), 2,
                                 sched.get("spmm.vector.g32.v1.t256.k2.u4"), estimate.H200)[0]
    [launch] = edge_models.parreduce_spmm(PRODUCTS, estimate.DegreeProfile(PRODUCTS), 2,
                                        sched.get("spmm.parreduce.g32.v1.t256.k2.u4"), estimate.H200)
    assert launch.dram_bytes == pytest.approx(walk.dram_bytes + 4 * PRODUCTS.n_rows)
    assert launch.lockstep == 1.0
    assert launch.longest_steps == pytest.approx(PRODUCTS.degree_max / 32)
