"""A cold tune on the GPU: the probe's phase timings add up, the measurer times a verification run,
and a vendor far behind on that run is not launched again. Run on the H200 (`make test-gpu`);
skipped without a CUDA device."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from autosage_cli.graphs.load import load_graph
from autosage_cli.scheduler.probing import phases, probe
from autosage_cli.scheduler import tune as tune_mod
from autosage_cli.scheduler.probing.measure import GpuMeasurer

pytestmark = pytest.mark.gpu
DATASETS = Path(__file__).resolve().parents[1] / "datasets"


@pytest.fixture(scope="module")
def er_graph():
    return load_graph(dataset="er-200k", root=str(DATASETS))


def test_a_timed_verification_run_gives_the_same_output_and_its_gpu_time(er_graph):
    m = GpuMeasurer()
    dgraph = m.to_device(er_graph)
    inputs = m.inputs(dgraph, "spmm", 32, 1, 0)
    plan = m.prepare_vendor(dgraph, "cusparse-alg2", 32, 1)
    out, ms = m.run_timed(plan, inputs)
    assert math.isfinite(ms) and 0 < ms < 1000
    assert m.rel_error(out, m.run(plan, inputs)) <= 1e-6


@pytest.mark.parametrize("op,k", [("spmm", 64), ("sddmm", 64)])
def test_the_phases_of_a_cold_tune_add_up_to_its_probe(er_graph, op, k):
    result = tune_mod.tune(er_graph, op, k, cache=None, retune=True)
    t = result.timings
    split = [t[phases.timing_key(p)] for p in (*phases.PHASES, "other")]
    assert all(math.isfinite(x) and x >= 0 for x in split)
    assert sum(split) == pytest.approx(t["probe_ms"] - t["sample_ms"], rel=1e-6, abs=1e-3)
    assert t["probe_native_timing_ms"] > 0 and t["probe_verify_ms"] > 0 and t["probe_upload_ms"] > 0
    # The timed launches' GPU time fits inside their phases' wall time.
    assert t["probe_gpu_ms"] <= sum(split) + 1.0
    for v in result.vendor:
        if v["reason"].startswith("screened out at its verification run"):
            assert v["repeats"] == 1 and v["status"] == "ok" and v["ms"] > 0
    assert result.entry["probe"]["budget_ms"] == probe.DEFAULT_BUDGET_MS
