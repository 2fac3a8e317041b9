"""Timing arithmetic and checking helpers (CPU), and CUDA-event timing on a device (gpu)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from autosage_cli.backends.timing import (MIN_REPEATS, TimingStats, l2_flush_bytes, poison,
                                          rel_error, repeats_within_budget)


def test_stats_from_samples_median_and_percentiles():
    s = TimingStats.from_samples([5.0, 1.0, 2.0, 3.0, 4.0])
    assert (s.median_ms, s.repeats) == (3.0, 5)
    assert s.p20_ms == pytest.approx(1.8) and s.p80_ms == pytest.approx(4.2)
    assert s.p20_ms <= s.median_ms <= s.p80_ms
    with pytest.raises(ValueError):
        TimingStats.from_samples([])


@pytest.mark.parametrize("per_call,repeat,max_ms,flush,want", [
    (1.0, 20, None, 0.0, 20),     # no budget: every repeat
    (1.0, 20, 100.0, 0.0, 20),    # fits
    (1.0, 20, 10.0, 0.0, 10),     # cut to the budget
    (1.0, 20, 10.0, 1.0, 5),      # the flush counts against the budget
    (50.0, 20, 10.0, 0.0, MIN_REPEATS),  # never below the minimum
    (1.0, 2, 0.5, 0.0, 2),        # ...unless fewer were asked for
    (0.0, 20, 1.0, 0.0, 20),      # a zero estimate does not divide by zero
])
def test_repeats_within_budget(per_call, repeat, max_ms, flush, want):
    assert repeats_within_budget(per_call, repeat, max_ms, flush) == want


def test_repeats_within_budget_rejects_zero_repeats():
    with pytest.raises(ValueError):
        repeats_within_budget(1.0, 0, None)


def test_l2_flush_buffer_is_more_than_twice_l2():
    l2 = 60 * 2**20  # the H200's 60 MiB
    assert l2_flush_bytes(l2) > 2 * l2


def test_rel_error_basic_and_zero_reference():
    ref = np.array([3.0, 4.0])
    assert rel_error(ref, ref) == 0.0
    assert rel_error(np.array([3.0, 4.5]), ref) == pytest.approx(0.5 / 5.0)
    assert rel_error(np.array([0.0, 0.5]), np.zeros(2)) == pytest.approx(0.5)  # absolute norm
    assert rel_error(np.zeros(2), np.zeros(2)) == 0.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_rel_error_nan_or_inf_anywhere_is_inf(bad):
    ref = np.ones((4, 3))
    out = ref.astype(np.float32).copy()
    out[2, 1] = bad
    assert rel_error(out, ref) == math.inf
    assert rel_error(ref, out) == math.inf


def test_rel_error_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape mismatch"):
        rel_error(np.ones(3), np.ones(4))


def test_poison_fills_nan_in_place_so_unwritten_output_fails():
    out = np.zeros((2, 3), dtype=np.float32)
    assert poison(out) is out
    assert np.isnan(out).all()
    out[0] = 1.0  # a "kernel" that writes only the first row
    assert rel_error(out, np.ones((2, 3))) == math.inf


# ------------------------------------------------------------------------------------------ GPU
class _FillPlan:
    """Minimal plan: writes a constant with one CuPy kernel."""

    def run(self, inputs, out):
        out.fill(inputs[0])


@pytest.mark.gpu
@pytest.mark.parametrize("flush_l2", [False, True])
def test_time_plan_returns_sane_numbers(flush_l2):
    import cupy

    from autosage_cli.backends.timing import time_plan

    out = cupy.empty(1 << 22, dtype=cupy.float32)
    stats = time_plan(_FillPlan(), (2.0,), out, repeat=12, warmup=2, flush_l2=flush_l2)
    assert stats.repeats == 12
    assert 0 < stats.p20_ms <= stats.median_ms <= stats.p80_ms < 1000
    assert bool((out == 2.0).all())


@pytest.mark.gpu
def test_time_plan_budget_cuts_repeats():
    import cupy

    from autosage_cli.backends.timing import time_plan

    out = cupy.empty(1 << 26, dtype=cupy.float32)  # 256 MiB fill: ~0.1 ms on an H200
    stats = time_plan(_FillPlan(), (1.0,), out, repeat=100000, warmup=3, max_ms=5.0)
    assert MIN_REPEATS <= stats.repeats < 100000


@pytest.mark.gpu
def test_copy_bandwidth_is_plausible():
    from autosage_cli.backends.timing import copy_bandwidth_tbps

    tbps = copy_bandwidth_tbps(nbytes=256 << 20, repeat=5)
    assert 0.05 < tbps < 20.0


@pytest.mark.gpu
def test_rel_error_and_poison_on_device_arrays():
    import cupy

    ref = cupy.arange(6, dtype=cupy.float32).reshape(2, 3)
    out = poison(cupy.empty_like(ref))
    assert bool(cupy.isnan(out).all())
    assert rel_error(out, ref) == math.inf
    assert rel_error(ref, ref.get()) == 0.0


@pytest.mark.gpu
def test_a_batch_right_after_a_launch_may_skip_its_warm_up():
    import cupy

    from autosage_cli.backends.timing import time_plan

    out = cupy.empty(1 << 26, dtype=cupy.float32)
    plan = _FillPlan()
    plan.run((1.0,), out)                       # the launch that warms it up (the probe's verify run)
    stats = time_plan(plan, (2.0,), out, repeat=1, warmup=0)
    assert stats.repeats == 1 and 0.0 < stats.median_ms < 100.0
    assert bool((out == 2.0).all())
    with pytest.raises(ValueError, match="warmup must be >= 1"):
        time_plan(plan, (2.0,), out, repeat=5, warmup=0, max_ms=5.0)
