"""The guardrail: native only when verified and <= guardrail x the best vendor time."""
from __future__ import annotations

import pytest

from autosage_cli.errors import AutosageError
from autosage_cli.scheduler.probing.probe import ProbeRecord
from autosage_cli.scheduler.decisions.select import Decision, decide


def native(name, ms=None, status="ok", reason=""):
    return ProbeRecord(name=name, backend="native", status=status, reason=reason, ms=ms,
                       params={"op": "spmm", "family": name.split(".")[1]})


def vendor(name, ms, status="ok"):
    return ProbeRecord(name=name, backend=name, status=status, ms=ms)


VENDORS = [vendor("cusparse-alg1", 1.2), vendor("cusparse-alg2", 0.93), vendor("cusparse-alg3", 0.0, "failed")]


def test_native_within_guardrail_wins_with_its_reason():
    d = decide([native("spmm.subwarp.g8.v2.t256", 0.41), native("spmm.split.g4.v4.t256", 0.6)], VENDORS)
    assert d.backend == "native" and d.schedule == "spmm.subwarp.g8.v2.t256"
    assert d.reason.startswith("native spmm.subwarp.g8.v2.t256 0.41 ms <= 0.95 x cusparse-alg2 0.93 ms")
    assert d.native_ms == 0.41 and d.vendor_ms == 0.93
    assert d.speedup == pytest.approx(0.93 / 0.41)
    assert d.params["family"] == "subwarp"


def test_native_just_outside_guardrail_loses():
    d = decide([native("spmm.subwarp.g8.v2.t256", 0.95)], VENDORS)    # 0.98x the vendor
    assert d.backend == "cusparse-alg2" and d.schedule == "cusparse-alg2"
    assert "no native candidate within guardrail: best native spmm.subwarp.g8.v2.t256 0.98x" in d.reason
    assert d.speedup == 1.0 and d.native_ms == 0.95


def test_guardrail_boundary_and_looser_guardrail():
    exactly = 0.95 * 0.93
    assert decide([native("spmm.a.x", exactly)], VENDORS).backend == "native"
    assert decide([native("spmm.a.x", 0.92)], VENDORS, guardrail=1.0).backend == "native"
    assert decide([native("spmm.a.x", 0.92)], VENDORS, guardrail=0.95).backend == "cusparse-alg2"


def test_failed_candidates_are_never_chosen_however_fast():
    cands = [native("spmm.wrong.g1", 0.01, "failed", "mismatch rel_err=3.2e-01"),
             native("spmm.ok.g2", 0.5)]
    d = decide(cands, VENDORS)
    assert d.schedule == "spmm.ok.g2"


def test_all_native_candidates_failed_verification():
    cands = [native("spmm.a.g1", None, "failed", "mismatch rel_err=1e-2"),
             native("spmm.b.g2", None, "failed", "mismatch rel_err=inf")]
    d = decide(cands, VENDORS)
    assert d.backend == "cusparse-alg2"
    assert d.reason == "cusparse-alg2 0.93 ms: all native candidates failed verification"


def test_mixed_failures_and_skips_are_explained():
    cands = [native("spmm.a.g1", None, "failed", "mismatch rel_err=1e-2"),
             native("spmm.b.g2", None, "failed", "prepare: RuntimeError: nvrtc"),
             native("spmm.c.g4", None, "skipped", "probe budget of 1 ms spent")]
    d = decide(cands, VENDORS)
    assert d.backend == "cusparse-alg2" and "1 skipped" in d.reason and "2 failed" in d.reason
    assert "compile/launch" in decide(cands[:2], VENDORS).reason


def test_no_vendor_falls_back_to_verified_native_or_errors():
    d = decide([native("spmm.a.g1", 0.3)], [vendor("cusparse-alg1", None, "failed")])
    assert d.backend == "native" and "no vendor algorithm ran" in d.reason
    with pytest.raises(AutosageError, match="neither a native candidate nor a vendor"):
        decide([native("spmm.a.g1", None, "failed", "mismatch rel_err=1")], [])


def test_no_candidates_at_all():
    d = decide([], VENDORS)
    assert d.backend == "cusparse-alg2" and "no native candidate supports this input" in d.reason


@pytest.mark.parametrize("g", [0.0, -1.0, 1.01])
def test_guardrail_must_be_in_unit_interval(g):
    with pytest.raises(AutosageError, match="guardrail"):
        decide([], VENDORS, guardrail=g)


def test_decision_round_trips_through_a_dict():
    d = decide([native("spmm.subwarp.g8.v2.t256", 0.41)], VENDORS)
    assert Decision.from_dict(d.to_dict()) == d


def test_ties_go_to_the_better_estimate():
    d = decide([native("spmm.b.g2", 0.5), native("spmm.a.g1", 0.5)], VENDORS)
    assert d.schedule == "spmm.b.g2"
