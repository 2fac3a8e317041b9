"""The additive (GAT) score as an op (ops/additive.py, `attention-additive`), on the CPU with a fake
measurer whose plans compute the real float64 additive result (or a wrong one): its spec and
reference, its cost model's pool, a tune that verifies every candidate against the reference
before timing it and records the decision, the torch graphs' decision per kind (a second graph of
the kind probes nothing, another kind and a changed setting do, tuning off never probes), a fixed
schedule, `autosage replay` re-checking such entries and `autosage tune --op attention-additive`."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli import cache as cache_mod, ops
from autosage_cli.errors import AutosageError
from autosage_cli.features import compute_features
from autosage_cli.graphs.csr import canonical_csr, from_arrays
from autosage_cli.kernels.schedule import registry
from autosage_cli.ops.additive import DEFAULT_SLOPE, NAME as OP
from autosage_cli.scheduler import estimate, tune as tuner
from autosage_cli.scheduler.decisions import additive, kinds, replay as replay_mod

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, FakePlan, patch_tune_command, power_law_graph

D, HEADS = 16, 2


class AdditiveMeasurer(FakeMeasurer):
    """FakeMeasurer for the additive op: no vendors, plans that compute the float64 additive
    result, and a record of the op each native plan and compile was asked for."""

    def __init__(self, **kw):
        super().__init__(vendor_ms={}, **kw)
        self.ops_asked: list = []

    def prepare_native(self, dgraph, schedule, k, heads, scale=None, dtype="float32", op=None):
        self.ops_asked.append(op)
        plan = super().prepare_native(dgraph, schedule, k, heads, scale, dtype)
        plan.op = op
        return plan

    def compile_native(self, dgraph, schedules, k, heads, dtype="float32", op=None):
        self.ops_asked.append(("compile", op))
        return {s.name: (1.0, None) for s in schedules}

    def run(self, plan: FakePlan, inputs):
        self.calls["run"] += 1
        out = ops.reference(OP, plan.graph, inputs)
        return out * 1.01 + 1e-3 if plan.wrong else out

    def reference(self, op, dgraph, inputs, scale=None, dtype="float32"):
        return ops.reference(op, dgraph.host, inputs, scale, dtype=dtype)


def _graph(n=400, seed=0, mean_degree=5.0):
    return power_law_graph(n=n, mean_degree=mean_degree, seed=seed)


def _kind_features(graph) -> dict:
    deg = graph.row_degrees()
    q50, q90, q99 = np.percentile(deg, [50, 90, 99])
    return {"n_rows": graph.n_rows, "n_cols": graph.n_cols, "nnz": graph.nnz, "deg_q50": float(q50),
            "deg_q90": float(q90), "deg_q99": float(q99), "deg_max": int(deg.max()),
            "empty_share": float((deg == 0).mean())}


def _device(graph):
    return SimpleNamespace(host=SimpleNamespace(csr=lambda: graph))


@pytest.fixture
def fake_gpu(monkeypatch):
    """Tunes measure with one AdditiveMeasurer on the fake device; the kind table starts empty."""
    measure = AdditiveMeasurer()
    kinds.TABLE.clear()
    monkeypatch.setattr(tuner, "_gpu_measurer", lambda: measure)
    monkeypatch.setattr(tuner, "_environment", lambda: (DEVICE, SOFTWARE))
    yield measure
    kinds.TABLE.clear()


def _ranked(graph, d=D, heads=HEADS):
    return [s for s, _ in estimate.rank(compute_features(graph, symmetry=False), OP, d, heads)]


# ------------------------------------------------------------------ the spec

def test_the_op_is_registered_with_the_fused_attention_schedules_and_no_vendor():
    spec = ops.get(OP)
    assert OP in ops.names() and spec.vendor_names() == [] and ops.guardrail_vendor_names(OP) == []
    pool = ops.candidates(OP, 64, 4)
    assert pool and {s.family for s in pool} == set(additive.ADDITIVE_FAMILIES) == {"fused", "fused_split"}
    assert all(s.op == "attention" and s.name.startswith("attention.") for s in pool)
    unfused = next(s for s in registry("attention") if s.family == "unfused")
    assert "fused, fused_split only" in ops.runs_schedule(OP, unfused)
    assert ops.runs_schedule(OP, registry("spmm")[0]) is not None
    with pytest.raises(AutosageError, match="fused, fused_split only"):
        ops.prepare_native(None, unfused, 64, 1, op=OP)
    assert ops.native_options(OP) == {"op": OP} and ops.native_options("attention") == {}
    graph = SimpleNamespace(n_rows=5, n_cols=7, nnz=11)
    assert ops.input_shapes(OP, graph, 8, 3) == [(5, 3), (7, 3), (7, 3, 8)]
    assert spec.operand_dtypes("bfloat16") == ("float32", "float32", "bfloat16")


def test_its_compile_list_is_every_additive_kernel():
    from autosage_cli.kernels import attention_space

    for c_type in ("float", "__nv_bfloat16"):
        listed = {r.expression for r in ops.instantiations([OP], c_type)}
        assert set(attention_space.additive_expressions(c_type)) <= listed
        assert {e.split("<")[0] for e in listed} == {"attention_additive_rows", "attention_additive_segments",
                                                     "attention_additive_stats", "attention_combine"}
    split = next(s for s in ops.candidates(OP, 64, 1) if s.family == "fused_split")
    kernels = [r.expression for r in ops.kernel_refs_of(OP)(split, 64, "int", "float32")]
    assert kernels[0].startswith("attention_additive_segments<float, int")
    assert "attention_combine<float, int>" in kernels and "attention_additive_stats<int>" in kernels


def _loop_reference(indptr, indices, a_dst, a_src, v, slope):
    n, heads, d = len(indptr) - 1, v.shape[1], v.shape[2]
    out = np.zeros((n, heads, d))
    for i in range(n):
        cols = indices[indptr[i]:indptr[i + 1]]
        for h in range(heads):
            if len(cols) == 0:
                continue
            s = a_dst[i, h] + a_src[cols, h]
            s = np.where(s > 0, s, slope * s)
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ v[cols, h]
    return out


def test_the_reference_is_the_gat_score_softmax_over_every_listed_edge():
    # row 1 empty, row 3 a hub with a duplicate edge (each listing counts, as in PyG)
    indptr = np.array([0, 2, 2, 3, 9])
    indices = np.array([0, 4, 2, 0, 1, 1, 2, 3, 4])
    graph = SimpleNamespace(indptr=indptr, indices=indices, shape=(4, 5))
    rng = np.random.default_rng(3)
    a_dst, a_src = rng.uniform(-2, 2, (4, 3)), rng.uniform(-2, 2, (5, 3))
    v = rng.uniform(-1, 1, (5, 3, 4))
    got = ops.reference(OP, graph, [a_dst, a_src, v], negative_slope=0.3)
    assert np.allclose(got, _loop_reference(indptr, indices, a_dst, a_src, v, 0.3))
    assert np.all(got[1] == 0)
    other_slope = ops.reference(OP, graph, [a_dst, a_src, v], negative_slope=0.9)
    assert not np.allclose(got, other_slope)          # the slope is applied
    # bfloat16: V read as stored (bit patterns), a_dst and a_src as float32
    from autosage_cli.dtypes import from_storage, to_storage
    bits = to_storage(v, "bfloat16")
    half = ops.reference(OP, graph, [a_dst.astype(np.float32), a_src.astype(np.float32), bits], dtype="bfloat16")
    exact = _loop_reference(indptr, indices, a_dst.astype(np.float32).astype(np.float64),
                            a_src.astype(np.float32).astype(np.float64), from_storage(bits, "bfloat16"), DEFAULT_SLOPE)
    assert np.allclose(half, exact)


def test_the_cost_model_ranks_the_additive_families_cheaper_than_the_dot_product():
    graph = _graph()
    f = compute_features(graph, symmetry=False)
    ranked = estimate.rank(f, OP, 64, 4)
    assert ranked and all(additive.runs_additive(s) for s, _ in ranked)
    for s, ms in ranked[:5]:    # no K rows, no dot product: the same walk costs less
        assert ms < estimate.estimate_ms(f, "attention", 64, s, 4)
    assert additive.additive_schedule(graph, 64, 4) == ranked[0][0]


# ------------------------------------------------------------------ tuning

def test_a_tune_verifies_every_candidate_against_the_reference_and_records_the_decision(fake_gpu, tmp_path):
    graph = _graph()
    ranked = _ranked(graph)
    fake_gpu.native_ms = {ranked[0].name: 0.1, ranked[1].name: 0.3}
    fake_gpu.wrong = {ranked[0].name}                  # fastest, but wrong: never chosen
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    result = tuner.tune(graph, OP, D, HEADS, cache=store, top_k=4)
    assert result.decision.backend == "native" and result.decision.schedule == ranked[1].name
    assert "verified against the float64 reference" in result.reason
    probed = {c["name"]: c for c in result.candidates if c["status"] != "skipped"}
    assert probed[ranked[0].name]["status"] == "failed" and probed[ranked[0].name]["reason"].startswith("mismatch")
    assert probed[ranked[1].name]["status"] == "ok" and probed[ranked[1].name]["ms"] == 0.3
    assert result.vendor == [] and result.entry["reference"].startswith("float64 reference")
    assert set(fake_gpu.ops_asked) == {OP, ("compile", OP)}   # the op's plans, not attention's
    [entry] = store.entries()
    assert entry["op"] == OP and entry["k"] == D and entry["heads"] == HEADS
    assert entry["decision"]["schedule"] == ranked[1].name and len(entry["candidates"]) >= 2
    again = tuner.tune(graph, OP, D, HEADS, cache=store, top_k=4)
    assert again.cache_hit and again.decision.schedule == ranked[1].name


def test_a_tune_where_every_candidate_fails_verification_is_an_error(fake_gpu, tmp_path):
    graph = _graph()
    fake_gpu.wrong = {s.name for s in ops.candidates(OP, D, HEADS)}
    with pytest.raises(AutosageError, match="all native candidates failed verification"):
        tuner.tune(graph, OP, D, HEADS, cache=cache_mod.DecisionCache(tmp_path / "d.json"), top_k=3)


# ------------------------------------------------------------------ per kind (torch graphs)

def _decide(graph, store, checksum=1, tune=True, fixed=None, by_kind=True):
    kind = (_kind_features(graph), checksum) if by_kind else None
    return additive.schedule_for(_device(graph), D, HEADS, fixed=fixed, kind=kind, cache=store, tune=tune)


def test_a_second_graph_of_the_kind_probes_nothing(fake_gpu, tmp_path):
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    first = _decide(_graph(seed=0), store, checksum=1)
    prepared = fake_gpu.calls["prepare"]
    assert kinds.probe_count() == 1 and prepared > 0 and additive.runs_additive(first)
    second = _decide(_graph(seed=1), store, checksum=2)
    assert kinds.probe_count() == 1 and fake_gpu.calls["prepare"] == prepared
    assert additive.runs_additive(second)
    [entry] = store.entries()
    assert entry["op"] == OP and entry["kind"]["features"]["nnz"] == _graph(seed=0).nnz


def test_another_kind_probes(fake_gpu, tmp_path):
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    _decide(_graph(n=400), store, checksum=1)
    _decide(_graph(n=4000, mean_degree=20.0), store, checksum=2)
    assert kinds.probe_count() == 2 and len(store.entries()) == 2


def test_a_changed_setting_retunes(fake_gpu, tmp_path, monkeypatch):
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    _decide(_graph(), store)
    kinds.TABLE.clear()                       # a new process: the recorded kind serves it...
    _decide(_graph(), store)
    assert kinds.probe_count() == 0
    kinds.TABLE.clear()
    monkeypatch.setattr(tuner, "POLICY_VERSION", tuner.POLICY_VERSION + 1)   # ...unless a setting changed
    _decide(_graph(), store)
    [entry] = store.entries()                 # the stale entry is replaced
    assert kinds.probe_count() == 1 and entry["settings"]["policy"] == tuner.POLICY_VERSION


def test_tuning_off_probes_nothing_and_takes_the_cost_model_or_the_known_kind(fake_gpu, tmp_path):
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    graph = _graph()
    assert _decide(graph, store, tune=False) == _ranked(graph)[0]
    assert fake_gpu.calls["prepare"] == 0 and kinds.probe_count() == 0 and not store.path.exists()
    kinds.TABLE.clear()
    fake_gpu.native_ms = {_ranked(graph)[2].name: 0.05}           # the probe's pick is not the model's
    tuned = _decide(graph, store)
    assert tuned == _ranked(graph)[2]
    kinds.TABLE.clear()
    assert _decide(graph, store, tune=False) == tuned             # known from the cache
    assert kinds.probe_count() == 0


def test_the_carry_decision_takes_a_host_list_family_when_it_is_all_that_verified(fake_gpu, tmp_path):
    graph = _graph()
    fake_gpu.wrong = {s.name for s in ops.candidates(OP, D, HEADS) if s.family == "fused"}
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    first = _decide(graph, store, checksum=1)
    carried = _decide(_graph(seed=1), store, checksum=2)
    assert first.family == carried.family == "fused_split"


def test_a_larger_graph_is_tuned_by_fingerprint(fake_gpu, tmp_path):
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    graph = _graph()
    chosen = _decide(graph, store, by_kind=False)
    [entry] = store.entries()
    assert entry["decision"]["schedule"] == chosen.name and "kind" not in entry
    prepared = fake_gpu.calls["prepare"]
    assert _decide(graph, store, by_kind=False, tune=False) == chosen     # recalled, not probed
    assert fake_gpu.calls["prepare"] == prepared


def test_a_fixed_schedule_is_checked_and_never_probed(fake_gpu, tmp_path):
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    named = next(s for s in ops.candidates(OP, D, HEADS) if s.family == "fused_split")
    assert _decide(_graph(), store, fixed=named.name) == named
    assert fake_gpu.calls["prepare"] == 0 and not store.path.exists()
    unfused = next(s for s in registry("attention") if s.family == "unfused")
    with pytest.raises(AutosageError, match="fused, fused_split only"):
        _decide(_graph(), store, fixed=unfused.name)


# ------------------------------------------------------------------ replay and the CLI

def test_replay_re_runs_and_re_checks_the_decision(fake_gpu, tmp_path):
    graph = _graph()
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    chosen = tuner.tune(graph, OP, D, HEADS, cache=store, top_k=3).decision.schedule
    fake_gpu.ops_asked.clear()
    [ok] = replay_mod.replay(store, measure=fake_gpu, load=lambda source: graph)
    assert ok.status == "ok" and ok.op == OP and ok.schedule == chosen
    assert ok.reference == "float64 reference" and fake_gpu.ops_asked == [OP]
    fake_gpu.wrong = {chosen}                          # the kernel regressed: replay fails it
    [bad] = replay_mod.replay(store, measure=fake_gpu, load=lambda source: graph)
    assert bad.status == "failed" and bad.reason.startswith("mismatch")


def test_replay_re_checks_a_kind_decision_on_the_graph_saved_beside_the_cache(fake_gpu, tmp_path):
    built = from_arrays(*(lambda g: (g.indptr, g.indices, g.values, g.shape))(_graph()),
                        {"api": "autosage_cli.torch.Graph"})     # built in memory, like a torch Graph's
    store = cache_mod.DecisionCache(tmp_path / "d.json")
    kinds.decide(_kind_features(built), 1, (OP, D, HEADS, "float32", False), cache=store,
                 host_graph=lambda: built)
    [out] = replay_mod.replay(store, measure=fake_gpu)
    assert out.status == "ok" and out.op == OP, out.reason


def test_tune_command_takes_the_additive_op(monkeypatch, tmp_path):
    patch_tune_command(monkeypatch, AdditiveMeasurer, graph=_graph())
    r = run_cli("tune", "--dataset", "x", "--op", OP, "--width", str(D), "--heads", str(HEADS), "--top-k", "3",
                "--json", "--cache", str(tmp_path / "d.json"))
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["op"] == OP and doc["decision"]["backend"] == "native" and doc["vendor"] == []
    bad = run_cli("tune", "--dataset", "x", "--op", OP, "--width", "300", "--cache", str(tmp_path / "e.json"))
    assert bad.exit_code == 2 and bad.stderr.strip().splitlines()[-1].startswith("Error:")
    assert "Traceback" not in bad.stderr


def test_canonical_inputs_for_the_reference_are_accepted_from_a_csr_graph():
    m = sp.random(30, 30, density=0.2, random_state=1, format="csr")
    graph = canonical_csr(m, {"generator": "t", "params": {}, "seed": 0})
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, s) for s in ops.input_shapes(OP, graph, 8, 2)]
    got = ops.reference(OP, graph, inputs)
    want = _loop_reference(graph.indptr, graph.indices, *inputs, DEFAULT_SLOPE)
    assert np.allclose(got, want)


def test_bench_refuses_the_additive_op_in_one_line():
    r = run_cli("bench", "--ops", OP, "--dry-run")
    assert r.exit_code == 2 and r.stderr.strip().startswith("Error: --ops attention-additive")
    assert len(r.stderr.strip().splitlines()) == 1
