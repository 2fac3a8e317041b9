"""Degree-preserving sampling (whole rows, stratified) versus an induced subgraph, and the probe
loop (verify, time within budget, record every failure) with a NumPy fake measurer."""
from __future__ import annotations

import numpy as np
import pytest

import scipy.sparse as sp

from autosage_cli.graphs.csr import canonical_csr, from_arrays
from autosage_cli.kernels.schedule import Schedule
from autosage_cli.scheduler.probing import probe
from autosage_cli.scheduler.probing import sample as sampling
from autosage_cli.scheduler.probing.probe import probe_candidates
from autosage_cli.scheduler.probing.sample import default_target_nnz, sample_rows

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
    assert sampling.probes_whole_graph(g)

    class Big:
        nnz, n_rows = 200_000_000, 2_000_000
    t = default_target_nnz(Big)
    assert t == int(0.04 * Big.nnz)                   # 4% beats 2M nonzeros and 2 waves of rows
    assert not sampling.probes_whole_graph(Big, t)

    class Dense:
        nnz, n_rows = 114_600_000, 232_965          # reddit-like: rows, not nonzeros, bind
    assert default_target_nnz(Dense) > 0.04 * Dense.nnz
    assert default_target_nnz(Dense) >= sampling.MIN_SAMPLE_ROWS * Dense.nnz / Dense.n_rows - 1

    class Mid:
        nnz, n_rows = 3_000_000, 300_000            # 2M of 3M nonzeros: the sample would be 2/3
    assert sampling.probes_whole_graph(Mid) and not sampling.probes_whole_graph(Mid, 1_000_000)


# ------------------------------------------------------------------ windows keep locality

def community_graph(n=60 * 1024, block=1024, local=0.8, degree=16, seed=4):
    """Every row takes `local` of its edges inside its block of `block` consecutive ids (as the
    reddit/products presets do with blocks of 2048), the rest anywhere."""
    rng = np.random.default_rng(seed)
    rows = np.repeat(np.arange(n), degree)
    inside = rng.random(rows.size) < local
    cols = np.where(inside, (rows // block) * block + rng.integers(0, block, rows.size),
                    rng.integers(0, n, rows.size))
    m = sp.coo_matrix((np.ones(rows.size, np.float32), (rows, cols)), shape=(n, n))
    return canonical_csr(m, {"generator": "test-communities", "params": {"n": n}, "seed": seed})


def reuse(graph, run=2048):
    """Distinct columns per nonzero over runs of `run` consecutive rows (rows in flight together):
    low when consecutive rows gather the same dense rows, as they do in graphs with communities."""
    out = []
    for start in range(0, graph.n_rows - run + 1, run):
        cols = graph.indices[graph.indptr[start]:graph.indptr[start + run]]
        out.append(np.unique(cols).size / max(1, cols.size))
    return float(np.mean(out))


def random_rows_sample(graph, target_nnz, seed=0):
    """What the sampler did before windows: rows drawn one by one (order kept)."""
    rng = np.random.default_rng(seed)
    want = int(target_nnz / graph.row_degrees().mean())
    rows = np.sort(rng.choice(graph.n_rows, want, replace=False))
    return sampling.take_rows(graph, rows, {"test": "random rows"}), rows


def test_windows_are_runs_of_consecutive_rows():
    g = community_graph()
    sample, rows = sample_rows(g, target_nnz=int(0.1 * g.nnz), seed=0)
    window = sample.source["sample"]["window"]
    assert window == sampling.window_rows(g, int(0.1 * g.nnz)) and window >= 512
    consecutive = np.mean(np.diff(rows) == 1)
    assert consecutive > 0.99                          # only window boundaries (and hubs) break runs
    _, scattered = random_rows_sample(g, int(0.1 * g.nnz))
    assert np.mean(np.diff(scattered) == 1) < 0.2


def test_window_sample_keeps_the_reuse_of_consecutive_rows_a_row_sample_loses():
    g = community_graph()
    target = int(0.2 * g.nnz)
    full = reuse(g, run=512)                           # 0.32 distinct columns per nonzero
    windows = reuse(sample_rows(g, target, seed=0)[0], run=512)
    rows = reuse(random_rows_sample(g, target)[0], run=512)
    # A run of sampled rows may straddle two windows (two neighbourhoods): a little above the full
    # graph's (0.37); rows drawn one by one share no neighbourhood at all (0.52).
    assert full <= windows <= 1.2 * full, (windows, full)
    assert rows > 1.5 * full, (rows, full)
    # Columns are untouched either way: mean |col - row| / n is no test of it.


def test_window_sample_on_the_power_law_graph_keeps_its_size_and_tail(graph):
    for seed in range(4):
        sample, rows = sample_rows(graph, 90_000, seed=seed)
        assert 0.8 * 90_000 <= sample.nnz <= 1.25 * 90_000
        assert graph.row_degrees().max() == sample.row_degrees().max()


def test_window_length_follows_the_sample():
    g = community_graph()
    assert sampling.window_rows(g, g.nnz) == sampling.WINDOW_ROWS
    assert sampling.window_rows(g, 16 * 100) == 100 // sampling.MIN_WINDOWS   # 100 rows: 12 per window
    with pytest.raises(ValueError):
        sample_rows(g, 1000, window=0)


# ------------------------------------------------------------------ the probe loop

def spmm_schedules(n):
    return [(Schedule("spmm", "subwarp", lanes=lanes, vec=1, threads=256), float(i + 1))
            for i, lanes in enumerate((1, 2, 4, 8, 16, 32)[:n])]


def run_probe(measure, cands, budget_ms=1000.0, op="spmm", k=8, progress=None):
    g = small_graph()
    return probe_candidates(measure.to_device(g), op, k, 1, cands, measure.vendor_names(op), budget_ms,
                            measure=measure, progress=progress)


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
    # The reference is the first vendor output another vendor confirms; every vendor is checked
    # against it, before anything is timed.
    assert result.reference == "cusparse-alg1"
    assert all(v.status == "ok" and v.rel_error < 1e-12 for v in result.vendors)
    # names[4] (0.5 ms) is 1.67x the fastest native after its screening launch: not timed again.
    survivors = [r for r in result.natives + result.vendors if r.status == "ok" and r.name != names[4]]
    assert all(r.repeats >= probe.MIN_REPEATS for r in survivors)
    assert by[names[4]].repeats == 1 and by[names[4]].reason.startswith("screened out: 1.67x")
    assert result.spent_ms > 0 and result.overrun_ms == 0


def test_the_screen_keeps_plans_within_its_ratio_of_their_group():
    cands = spmm_schedules(4)
    names = [s.name for s, _ in cands]
    # natives 1.0, 1.25, 1.35, 2.0 ms; vendors 3.0 and 3.8 (1.27x: kept) -- each group on its own.
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 3.0, "cusparse-alg2": 3.8},
                     native_ms=dict(zip(names, (1.0, 1.25, 1.35, 2.0))))
    # the budget: the screen (2 launches each) and the survivors' batches (3 each) exactly
    result = run_probe(m, cands, budget_ms=2 * (1.0 + 1.25 + 1.35 + 2.0 + 3.0 + 3.8) + 3 * (1.0 + 1.25 + 3.0 + 3.8))
    repeats = {r.name: r.repeats for r in result.natives + result.vendors}
    assert [repeats[n] for n in names] == [probe.MIN_REPEATS, probe.MIN_REPEATS, 1, 1]
    assert repeats["cusparse-alg1"] == repeats["cusparse-alg2"] == probe.MIN_REPEATS
    # screened-out plans keep their one measured launch: the decision can still see them
    assert all(r.status == "ok" and r.ms is not None for r in result.natives)


def test_no_candidate_is_dropped_for_budget_and_the_overrun_is_reported():
    # reddit-like, attention d=64 H=8 on the sample of 6a0dd38: each vendor ~50 ms, each native
    # ~4.5 ms. The vendors alone were over the 400 ms budget, every native was "skipped" and the
    # vendor chosen (1.00x) where the natives ran 6-11x faster on the full graph.
    cands = spmm_schedules(6)
    vendors = {f"vendor-unfused-alg{i}": 50.0 + i for i in range(1, 4)} | {"vendor-unfused-default": 50.5}
    m = FakeMeasurer(vendor_ms=vendors, default_native_ms=4.5)
    messages = []
    result = run_probe(m, cands, budget_ms=400.0, progress=messages.append)
    assert [r.status for r in result.natives + result.vendors] == ["ok"] * 10
    # every plan is verified and timed once whatever the budget; the survivors' further timings
    # are planned from that launch: the budget is spent by the vendors' screen, so only the
    # fastest native and the fastest vendor (the guardrail's two sides) are timed MIN_REPEATS times
    by = {r.name: r for r in result.natives + result.vendors}
    assert by[cands[0][0].name].repeats == by["vendor-unfused-default"].repeats == probe.MIN_REPEATS
    others = [r for r in by.values() if r.name not in (cands[0][0].name, "vendor-unfused-default")]
    assert all(r.repeats == 1 and r.ms is not None for r in others)
    assert all("would not fit the 400 ms budget" in r.reason for r in others)
    # the minimum: verify + 1 screening launch (the verification run its warm-up) for every plan,
    # warm-up + 2 repeats for the two kept
    assert result.floor_ms == pytest.approx(2 * sum(vendors.values()) + 2 * 6 * 4.5 + 3 * 50.5 + 3 * 4.5)
    assert result.overrun_ms == pytest.approx(result.spent_ms - 400.0) and result.overrun_ms > 100
    assert any("over its 400 ms budget" in msg for msg in messages)
    from autosage_cli.scheduler.decisions.select import decide
    assert decide(result.natives, result.vendors).backend == "native"


def test_survivors_are_timed_again_fastest_first_while_they_fit_the_budget():
    cands = spmm_schedules(4)
    names = [s.name for s, _ in cands]
    # natives 1.0, 1.1, 1.2, 1.25 ms (all within the screen ratio); vendors 3.0 and 3.1
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 3.1, "cusparse-alg2": 3.0},
                     native_ms=dict(zip(reversed(names), (1.0, 1.1, 1.2, 1.25))))
    screen = 2 * (1.0 + 1.1 + 1.2 + 1.25 + 3.0 + 3.1)
    # room for the two fastest natives' and the fastest vendor's second batches, not more
    result = run_probe(m, cands, budget_ms=screen + 3 * (1.0 + 1.1 + 3.0) + 0.5)
    repeats = {r.name: r.repeats for r in result.natives + result.vendors}
    assert [repeats[n] for n in reversed(names)] == [probe.MIN_REPEATS, probe.MIN_REPEATS, 1, 1]
    assert (repeats["cusparse-alg2"], repeats["cusparse-alg1"]) == (probe.MIN_REPEATS, 1)
    assert result.spent_ms <= screen + 3 * (1.0 + 1.1 + 3.0) + 0.5 and result.overrun_ms == 0


def test_the_budget_only_adds_repeats_shared_equally():
    cands = spmm_schedules(3)
    vendor = {"cusparse-alg1": 1.0, "cusparse-alg2": 1.2}
    # exactly the minimum: 2 launches of each plan's screen, 3 of each survivor's second batch
    tight = run_probe(FakeMeasurer(vendor_ms=vendor, default_native_ms=1.0), cands, budget_ms=5 * (3 + 2.2))
    assert all(r.repeats == probe.MIN_REPEATS for r in tight.natives + tight.vendors)
    roomy = run_probe(FakeMeasurer(vendor_ms=vendor, default_native_ms=1.0), cands, budget_ms=10_000.0)
    assert all(r.repeats == probe.MAX_REPEAT for r in roomy.natives)
    # Only the fastest vendor sets the guardrail's bar: the slower one keeps its minimum.
    assert [r.repeats for r in roomy.vendors] == [probe.MAX_REPEAT, probe.MIN_REPEATS]
    assert roomy.overrun_ms == 0 and roomy.spent_ms < 10_000.0
    # In between: every plan gets the same share of what is left after the minimum.
    mid = run_probe(FakeMeasurer(vendor_ms=vendor, default_native_ms=1.0), cands, budget_ms=45.0)
    natives = [r.repeats for r in mid.natives]
    assert probe.MIN_REPEATS < min(natives) and max(natives) < probe.MAX_REPEAT
    assert mid.spent_ms <= 45.0 + 1e-9


def test_timing_interleaves_vendors_and_natives():
    cands = spmm_schedules(4)
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 1.0, "cusparse-alg2": 1.0}, default_native_ms=1.0)
    run_probe(m, cands, budget_ms=30.0)    # the screen and the survivors' batches, nothing more
    names = [s.name for s, _ in cands]
    survivors = ["cusparse-alg1", names[0], "cusparse-alg2", names[1], names[2], names[3]]
    # each vendor's screen right after its verification run, the natives' screen, then the
    # survivors' remaining repeats, interleaved
    assert m.timed == ["cusparse-alg1", "cusparse-alg2"] + names + survivors


def test_merging_batches_weights_by_repeats():
    assert probe.merge_batches([(2.0, 1.9, 2.1, 3)]) == (2.0, 1.9, 2.1, 3)
    median, p20, p80, n = probe.merge_batches([(3.0, 2.0, 4.0, 3), (1.0, 0.9, 1.1, 17)])
    assert (median, n) == (1.0, 20)
    assert p20 == pytest.approx((3 * 2.0 + 17 * 0.9) / 20) and p80 == pytest.approx((3 * 4.0 + 17 * 1.1) / 20)
    assert probe.interleave([1, 2, 3], ["a"]) == [1, "a", 2, 3]


def test_probe_without_any_vendor_checks_against_the_float64_reference():
    cands = spmm_schedules(2)
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 1.0}, broken={"cusparse-alg1"}, wrong={cands[1][0].name})
    result = run_probe(m, cands)
    assert result.vendors[0].status == "failed"
    assert result.reference.startswith("float64 reference")
    assert [r.status for r in result.natives] == ["ok", "failed"]


def test_a_vendor_that_disagrees_is_marked_failed():
    vendors = {"cusparse-alg1": 1.0, "cusparse-alg2": 0.5, "cusparse-alg3": 0.7}
    m = FakeMeasurer(vendor_ms=vendors, wrong={"cusparse-alg1"})
    result = run_probe(m, spmm_schedules(1))
    by = {v.name: v for v in result.vendors}
    assert result.reference == "cusparse-alg2"          # the first output another vendor confirms
    assert by["cusparse-alg2"].status == by["cusparse-alg3"].status == "ok"
    assert by["cusparse-alg1"].status == "failed" and "disagrees with cusparse-alg2" in by["cusparse-alg1"].reason
    # screened with its verification run, before the reference was known; never timed again
    assert m.timed.count("cusparse-alg1") == 1 and by["cusparse-alg1"].ms is None
    # Two vendors that disagree: the float64 reference decides which is wrong.
    m = FakeMeasurer(vendor_ms={"cusparse-alg1": 1.0, "cusparse-alg2": 0.5}, wrong={"cusparse-alg1"})
    result = run_probe(m, spmm_schedules(1))
    by = {v.name: v for v in result.vendors}
    assert result.reference == "float64 reference (vendor algorithms disagree)"
    assert by["cusparse-alg2"].status == "ok" and by["cusparse-alg1"].status == "failed"
    assert result.natives[0].status == "ok"


@pytest.mark.parametrize("op,k", [("sddmm", 4), ("attention", 8)])
def test_probe_other_ops(op, k):
    s = Schedule(op, "edge" if op == "sddmm" else "fused", lanes=4, vec=1, threads=256)
    m = FakeMeasurer(vendor_ms={"v": 1.0})
    result = run_probe(m, [(s, 1.0)], op=op, k=k)
    assert result.natives[0].status == "ok"


def test_record_json_has_no_infinity():
    rec = probe.ProbeRecord(name="x", backend="native", rel_error=float("inf"))
    assert rec.to_dict()["rel_error"] == "inf"


def test_take_rows_slices_and_gathers_alike(graph, monkeypatch):
    from autosage_cli.graphs.csr import validate

    rows = np.sort(np.concatenate([np.arange(100, 900), np.arange(5000, 5003), [7, 40_000]]))
    sliced = sampling.take_rows(graph, rows, {"t": 1})
    monkeypatch.setattr(sampling, "MAX_SLICES", 0)           # force the per-edge gather
    gathered = sampling.take_rows(graph, rows, {"t": 1})
    for a, b in ((sliced.indptr, gathered.indptr), (sliced.indices, gathered.indices),
                 (sliced.values, gathered.values)):
        assert np.array_equal(a, b) and a.dtype == b.dtype
    assert sliced.indices.dtype == np.int32 and sliced.values.dtype == np.float32
    validate(sliced.indptr, sliced.indices, sliced.values, sliced.shape)   # canonical as it stands
    assert (sliced.to_scipy() != graph.to_scipy()[rows]).nnz == 0


class LaunchCounter(FakeMeasurer):
    """Counts every launch per plan: verification runs, warm-ups and timed repeats."""

    def __init__(self, **fields):
        super().__init__(**fields)
        self.launches, self.calls_in_order = {}, []

    def run(self, plan, inputs):
        self.launches[plan.name] = self.launches.get(plan.name, 0) + 1
        self.calls_in_order.append(("run", plan.name))
        return super().run(plan, inputs)

    def time(self, plan, inputs, out, repeat, warmup, max_ms=None):
        stats = super().time(plan, inputs, out, repeat, warmup, max_ms)
        self.launches[plan.name] = self.launches.get(plan.name, 0) + stats.repeats + warmup
        self.calls_in_order.append((f"time/{warmup}", plan.name))
        return stats


def test_a_vendor_is_screened_right_after_its_verification_run_without_a_warm_up():
    # SDDMM on a 100M-edge graph at K=128: the gather-dot composition ~33x the cuSPARSE SDDMMs.
    vendors = {"cusparse-sddmm": 8.0, "torch-sampled-addmm": 8.1, "gather-dot": 260.0}
    m = LaunchCounter(vendor_ms=vendors, default_native_ms=7.0)
    result = run_probe(m, spmm_schedules(2), budget_ms=1000.0, op="sddmm", k=4)
    vendor_calls = [c for c in m.calls_in_order if c[1] in vendors]
    assert vendor_calls[:6] == [(step, v) for v in vendors for step in ("run", "time/0")]
    # The slow vendor: verified and timed once, 2 launches in all (3 before: a warm-up too).
    assert m.launches["gather-dot"] == 2
    by = {v.name: v for v in result.vendors}
    assert by["gather-dot"].status == "ok" and by["gather-dot"].ms == 260.0 and by["gather-dot"].repeats == 1
    assert by["gather-dot"].reason.startswith("screened out")
    # Both cuSPARSE entries survive the screen; only the faster is worth more repeats.
    assert by["cusparse-sddmm"].repeats > by["torch-sampled-addmm"].repeats == probe.MIN_REPEATS
    # The budget is charged for what ran: 2 launches of the slow vendor, not 3.
    assert result.spent_ms >= 2 * 260.0 and result.floor_ms < 3 * 260.0 + 100.0
    from autosage_cli.scheduler.decisions.select import decide
    assert decide(result.natives, result.vendors).vendor_ms == 8.0   # the guardrail's bar


def test_a_batch_without_warm_up_is_only_allowed_without_a_time_cap():
    from autosage_cli.backends.timing import check_warmup

    check_warmup(1, 5.0)
    check_warmup(0, None)          # right after a launch of the same plan: the probe's vendor screen
    for warmup, max_ms in ((0, 5.0), (-1, None)):
        with pytest.raises(ValueError, match="warmup must be >= 1"):
            check_warmup(warmup, max_ms)


class ColdTimer(LaunchCounter):
    """Times each vendor's verification run like the GPU measurer does: a cold launch, 20% slower."""

    def run_timed(self, plan, inputs):
        return self.run(plan, inputs), plan.ms * 1.2


def test_a_vendor_far_behind_on_its_verification_run_is_not_launched_again():
    # SpMM at K=128 on products-like (H200, 02a7334): ALG1 79 ms and ALG3 44 ms a launch, ALG2 and
    # the default ~9 ms. The default is probed first; the two slow ones are then 10x and 5.9x
    # behind the fastest vendor timed before them on their verification run alone.
    vendors = {"cusparse-alg1": 79.0, "cusparse-alg2": 9.0, "cusparse-alg3": 44.0, "cusparse-default": 9.3}
    m = ColdTimer(vendor_ms=vendors, default_native_ms=8.0)
    result = run_probe(m, spmm_schedules(2), budget_ms=600.0, op="spmm", k=128)
    assert [c[1] for c in m.calls_in_order if c[0] == "run"][:4] == [
        "cusparse-default", "cusparse-alg1", "cusparse-alg2", "cusparse-alg3"]
    assert m.launches["cusparse-alg1"] == m.launches["cusparse-alg3"] == 1    # verification only
    by = {v.name: v for v in result.vendors}
    assert by["cusparse-alg1"].status == "ok" and by["cusparse-alg1"].ms == pytest.approx(94.8)
    assert by["cusparse-alg1"].repeats == 1
    assert by["cusparse-alg1"].reason == ("screened out at its verification run: 10.19x the fastest "
                                          "vendor's timed launch")
    assert by["cusparse-alg3"].reason.startswith("screened out at its verification run: 5.87x")  # vs ALG2
    assert by["cusparse-alg2"].repeats >= probe.MIN_REPEATS and by["cusparse-default"].repeats >= probe.MIN_REPEATS
    # the reference rule keeps the vendor order; every vendor is still verified against it
    assert result.reference == "cusparse-alg1" and all(v.rel_error < 1e-12 for v in result.vendors)
    from autosage_cli.scheduler.decisions.select import decide
    assert decide(result.natives, result.vendors).vendor_ms == 9.0   # the guardrail's bar is unchanged


def test_a_vendor_within_the_cold_ratio_is_screened_as_usual():
    vendors = {"cusparse-alg1": 20.0, "cusparse-default": 9.0}   # cold 24 ms: 2.7x, under 3x
    m = ColdTimer(vendor_ms=vendors, default_native_ms=8.0)
    result = run_probe(m, spmm_schedules(2), budget_ms=600.0, op="spmm", k=128)
    by = {v.name: v for v in result.vendors}
    assert m.launches["cusparse-alg1"] == 2 and by["cusparse-alg1"].ms == 20.0   # verify + screen
    assert by["cusparse-alg1"].reason.startswith("screened out: 2.22x")


class FirstLaunchReads(FakeMeasurer):
    """The first timed batch of each plan named in `first` reads that time (a few-microsecond
    kernel's one launch, as seen on the H200), every later batch its real time."""

    def __init__(self, first: dict, **kw):
        super().__init__(**kw)
        self.first, self.seen = dict(first), set()

    def time(self, plan, inputs, out, repeat, warmup, max_ms=None):
        stats = super().time(plan, inputs, out, repeat, warmup, max_ms)
        if plan.name in self.first and plan.name not in self.seen:
            self.seen.add(plan.name)
            stats.median_ms = stats.p20_ms = stats.p80_ms = self.first[plan.name]
        return stats


@pytest.mark.parametrize("scale, second_look", [(0.001, True), (1.0, False)])
def test_a_microsecond_plan_is_looked_at_again_before_the_screen_drops_it(scale, second_look):
    from autosage_cli.scheduler.probing import screen
    from autosage_cli.scheduler.decisions.select import decide

    cands = spmm_schedules(3)
    names = [s.name for s, _ in cands]
    # real times 5, 6, 9 (us when scale=0.001); the fastest reads 4x on its one screening launch
    m = FirstLaunchReads({names[0]: 4 * 5 * scale}, vendor_ms={"cusparse-alg1": 10 * scale},
                         native_ms=dict(zip(names, (5 * scale, 6 * scale, 9 * scale))))
    result = run_probe(m, cands, budget_ms=1000.0)
    by = {r.name: r for r in result.natives}
    assert (5 * scale < screen.SECOND_LOOK_MS) == second_look
    if second_look:
        # timed MIN_REPEATS more: the noisy launch no longer decides, the plan survives and wins
        assert by[names[0]].ms == pytest.approx(5 * scale) and not by[names[0]].reason
        assert decide(result.natives, result.vendors).schedule == names[0]
        # names[2] (1.5x the 6 us lead of the screening launches, truly behind) was looked at again
        # too, and is still screened out: 1.8x the 5 us the second look found
        assert by[names[2]].repeats == 1 + probe.MIN_REPEATS
        assert by[names[2]].reason == "screened out: 1.80x the fastest of its group after 4 timed launches"
    else:
        # millisecond kernels: one launch is a measurement; the screen drops the noisy plan as before
        assert by[names[0]].repeats == 1 and by[names[0]].reason.startswith("screened out: 3.33x")
        assert decide(result.natives, result.vendors).schedule == names[1]


def test_a_plan_the_looks_put_beyond_the_screen_gets_its_own_look():
    """A look can lower the lead: a plan within SCREEN_RATIO of the old lead on its one launch, beyond
    it of the new one, is looked at too, not screened out on that one launch."""
    from autosage_cli.scheduler.decisions.select import decide

    cands = spmm_schedules(3)
    names = [s.name for s, _ in cands]
    # real 5, 6 and 5.5 us; A reads 8 (1.33x B's 6: looked at, 5), C reads 7.5 (1.25x of 6, but
    # 1.5x of A's 5 once A is looked at): C's real 5.5 must survive the screen
    m = FirstLaunchReads({names[0]: 0.008, names[2]: 0.0075}, vendor_ms={"cusparse-alg1": 0.010},
                         native_ms=dict(zip(names, (0.005, 0.006, 0.0055))))
    result = run_probe(m, cands, budget_ms=1000.0)
    by = {r.name: r for r in result.natives}
    assert by[names[2]].ms == pytest.approx(0.0055) and not by[names[2]].reason
    assert by[names[2]].repeats > 1 + probe.MIN_REPEATS        # looked at, then timed as a survivor
    assert by[names[0]].ms == pytest.approx(0.005) and decide(result.natives, result.vendors).schedule == names[0]

