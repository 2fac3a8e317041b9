"""Degree-preserving sampling (whole rows, stratified) versus an induced subgraph, and the probe
loop (verify, time within budget, record every failure) with a NumPy fake measurer."""
from __future__ import annotations

import numpy as np
import pytest

from autosage_cli.graphs.csr import from_arrays
from autosage_cli.kernels.schedule import Schedule
from autosage_cli.scheduler import probe
from autosage_cli.scheduler.probe import default_target_nnz, probe_candidates, sample_rows

from scheduler_fakes import FakeMeasurer, power_law_graph, small_graph


@pytest.fixture(scope="module")
def graph():
    return power_law_graph(n=150_000, mean_degree=12.0, seed=3, max_degree=3000)


def quantiles(degrees):
    return np.percentile(degrees, [50, 90, 99])


def induced_subgraph(graph, fraction, seed):
    """The seed's probe graph: keep a node only if sampled, an edge only if both ends were."""
    rng = np.random.default_rng(seed)
    nodes = np.sort(rng.choice(graph.n_rows, int(fraction * graph.n_rows), replace=False))
    m = graph.to_scipy()[nodes][:, nodes].tocsr()
    return np.diff(m.indptr)


def test_sample_keeps_the_degree_distribution_an_induced_subgraph_does_not(graph):
    full = graph.row_degrees()
    sample, rows = sample_rows(graph, target_nnz=int(0.03 * graph.nnz), seed=0)
    got = sample.row_degrees()
    # Quantiles of the whole-row sample match the full graph's...
    for q_full, q_sample in zip(quantiles(full), quantiles(got)):
        assert abs(q_sample - q_full) <= max(2.0, 0.2 * q_full), (quantiles(full), quantiles(got))
    assert abs(got.mean() - full.mean()) <= 0.15 * full.mean()
    assert got.max() == full.max()                     # the heaviest row is always in
    # ...while an induced subgraph of 3% of the nodes keeps ~3% of each row: degrees collapse.
    induced = induced_subgraph(graph, 0.03, seed=0)
    assert induced.mean() < 0.1 * full.mean()
    assert quantiles(induced)[2] < 0.1 * quantiles(full)[2]


def test_sample_is_whole_rows_with_columns_untouched(graph):
    sample, rows = sample_rows(graph, target_nnz=60_000, seed=1)
    assert sample.n_cols == graph.n_cols and sample.n_rows == rows.size
    assert np.all(np.diff(rows) > 0)                   # row order kept (locality)
    full = graph.to_scipy()
    part = sample.to_scipy()
    for i in np.random.default_rng(0).choice(rows.size, 50, replace=False):
        r = rows[i]
        assert np.array_equal(part[i].indices, full[r].indices)
        assert np.array_equal(part[i].data, full[r].data)
    info = sample.source["sample"]
    assert info["fingerprint"] == graph.fingerprint and info["of"] == graph.source
    assert info["rows"] == rows.size and info["nnz"] == sample.nnz and info["seed"] == 1


def test_sample_size_close_to_target_and_heaviest_rows_in(graph):
    by_degree = np.argsort(-graph.row_degrees(), kind="stable")
    target = 60_000
    sample, rows = sample_rows(graph, target_nnz=target, seed=2)
    assert 0.8 * target <= sample.nnz <= 1.25 * target
    assert by_degree[0] in rows                         # the heaviest row, always
    # With room for them (at most 5% of the sample), the next heaviest rows are forced in too.
    big, rows = sample_rows(graph, target_nnz=400_000, seed=2)
    assert 0.8 * 400_000 <= big.nnz <= 1.25 * 400_000
    assert set(by_degree[:4].tolist()) <= set(rows.tolist())


def test_sample_is_deterministic_per_seed(graph):
    a = sample_rows(graph, 30_000, seed=5)[1]
    b = sample_rows(graph, 30_000, seed=5)[1]
    c = sample_rows(graph, 30_000, seed=6)[1]
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_target_at_least_the_graph_takes_every_row():
    g = small_graph()
    sample, rows = sample_rows(g, target_nnz=g.nnz, seed=0)
    assert rows.size == g.n_rows and sample.nnz == g.nnz
    assert np.array_equal(sample.indices, g.indices)


def test_empty_rows_are_sampled_in_proportion():
    degrees = np.array([0, 5] * 5000)
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    rng = np.random.default_rng(0)
    indices = np.concatenate([np.sort(rng.choice(100, d, replace=False)) for d in degrees if d])
    g = from_arrays(indptr, indices, np.ones(indices.size), (degrees.size, 100), {"path": "x"})
    sample, _ = sample_rows(g, target_nnz=2500, seed=0)
    share_empty = (sample.row_degrees() == 0).mean()
    assert 0.4 < share_empty < 0.6


def test_default_target():
    g = small_graph()
    assert default_target_nnz(g) == g.nnz          # small graphs are probed whole

    class Big:
        nnz, n_rows = 200_000_000, 2_000_000
    t = default_target_nnz(Big)
    assert t == int(0.02 * Big.nnz)                   # 2% beats 1M nonzeros and 2 waves of rows

    class Dense:
        nnz, n_rows = 114_600_000, 232_965          # reddit-like: rows, not nonzeros, bind
    assert default_target_nnz(Dense) > 0.02 * Dense.nnz
    assert default_target_nnz(Dense) >= probe.MIN_SAMPLE_ROWS * Dense.nnz / Dense.n_rows - 1


# ------------------------------------------------------------------ the probe loop

def spmm_schedules(n):
    return [(Schedule("spmm", "subwarp", lanes=lanes, vec=1, threads=256), float(i + 1))
            for i, lanes in enumerate((1, 2, 4, 8, 16, 32)[:n])]


def run_probe(measure, cands, budget_ms=1000.0, op="spmm", k=8):
    g = small_graph()
    return probe_candidates(measure.to_device(g), op, k, 1, cands, measure.vendor_names(op), budget_ms,
                            measure=measure)


def test_probe_verifies_times_and_records_every_outcome():
    cands = spmm_schedules(5)
    names = [s.name for s, _ in cands]
    m = FakeMeasurer(native_ms={names[0]: 0.3}, wrong={names[1]}, broken={names[2]}, crash={names[3]})
    result = run_probe(m, cands)
    by = {r.name: r for r in result.natives}
    assert by[names[0]].status == "ok" and by[names[0]].ms == 0.3 and by[names[0]].rel_error < 1e-12
    assert by[names[1]].status == "failed" and by[names[1]].reason.startswith("mismatch rel_err=")
    assert by[names[2]].status == "failed" and by[names[2]].reason.startswith("prepare: RuntimeError")
    assert "\n" not in by[names[2]].reason
    assert by[names[3]].status == "failed" and by[names[3]].reason.startswith("run: RuntimeError")
    assert by[names[4]].status == "ok"
    # A candidate that failed is never timed.
    assert not {names[1], names[2], names[3]} & set(m.timed)
    assert [r.estimate_ms for r in result.natives] == [1.0, 2.0, 3.0, 4.0, 5.0]
    # The reference is the fastest vendor; every vendor is checked against it.
    assert result.reference == "cusparse-alg2"
    assert all(v.status == "ok" and v.rel_error < 1e-12 for v in result.vendors)
    assert result.spent_ms > 0


def test_probe_budget_skips_the_least_promising_candidates():
    cands = spmm_schedules(6)
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 10.0}, default_native_ms=10.0)
    result = run_probe(m, cands, budget_ms=60.0)
    statuses = [r.status for r in result.natives]
    assert statuses[0] == "ok" and statuses[-1] == "skipped"
    assert statuses == sorted(statuses, key=lambda s: s != "ok")   # ok first, in estimate order
    skipped = [r for r in result.natives if r.status == "skipped"]
    assert all("budget" in r.reason for r in skipped)
    assert result.vendors[0].status == "ok"            # vendors are always measured


def test_probe_without_any_vendor_checks_against_the_float64_reference():
    cands = spmm_schedules(2)
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 1.0}, broken={"cusparse-alg1"}, wrong={cands[1][0].name})
    result = run_probe(m, cands)
    assert result.vendors[0].status == "failed"
    assert result.reference.startswith("float64 reference")
    assert [r.status for r in result.natives] == ["ok", "failed"]


def test_a_vendor_that_disagrees_is_marked_failed():
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 1.0, "cusparse-alg2": 0.5}, wrong={"cusparse-alg1"})
    result = run_probe(m, spmm_schedules(1))
    by = {v.name: v for v in result.vendors}
    assert by["cusparse-alg2"].status == "ok"
    assert by["cusparse-alg1"].status == "failed" and "disagrees with cusparse-alg2" in by["cusparse-alg1"].reason


@pytest.mark.parametrize("op,k", [("sddmm", 4), ("attention", 8)])
def test_probe_other_ops(op, k):
    s = Schedule(op, "edge" if op == "sddmm" else "fused", lanes=4, vec=1, threads=256)
    m = FakeMeasurer(vendor_ms={"v": 1.0})
    result = run_probe(m, [(s, 1.0)], op=op, k=k)
    assert result.natives[0].status == "ok"


def test_record_json_has_no_infinity():
    rec = probe.ProbeRecord(name="x", backend="native", rel_error=float("inf"))
    assert rec.to_dict()["rel_error"] == "inf"
