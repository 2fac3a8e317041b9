"""Decisions that carry over (scheduler/decisions/kinds.py), on the CPU with a fake tuner: a second graph of
a known kind probes nothing and gets the kind's carry decision, a graph of another kind or under a
changed setting probes, the graph that was probed keeps its own decision, kinds recorded in the
cache file serve a new process, and the carry decision never takes a family that builds host work
lists."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from autosage_cli import cache as cache_mod
from autosage_cli.kernels.schedule import family_of, registry
from autosage_cli.scheduler.decisions import kinds, select
from autosage_cli.scheduler import tune as tuner

BASE = {"n_rows": 300_000, "n_cols": 300_000, "nnz": 440_000, "deg_q50": 0, "deg_q90": 6,
        "deg_q99": 15, "deg_max": 15, "empty_share": 0.55}
QUESTION = ("spmm", 64, 1, "float32", True)
SPLIT = next(s for s in registry("spmm") if s.family == "split")
ROWS = next(s for s in registry("spmm") if s.family == "warprow")


def _record(schedule, ms, status="ok"):
    return {"name": schedule.name, "backend": "native", "status": status, "ms": ms, "graph": "full",
            "params": schedule.params()}


VENDOR = [{"name": "cusparse-alg2", "backend": "cusparse-alg2", "status": "ok", "ms": 1.0, "graph": "full",
           "params": {}}]


class FakeTuner:
    """lookup_or_tune that 'probes': the split schedule wins (0.5 ms), warprow is second (0.8 ms)."""

    def __init__(self):
        self.calls = []

    def __call__(self, graph, op, k, heads, *, cache, dtype, progress=None):
        self.calls.append((graph, op, k, heads, dtype))
        candidates = [_record(SPLIT, 0.5), _record(ROWS, 0.8)]
        decision = select.decide([SimpleNamespace(**c) for c in candidates],
                                 [SimpleNamespace(**v) for v in VENDOR])
        entry = cache.store(cache_mod.CacheKey({"name": "H200"}, {"cupy": "14"}, f"fp{len(self.calls)}", op,
                                               k, dtype, heads, {"s": 1}),
                            {"decision": decision.to_dict(), "op": op, "k": k, "heads": heads,
                             "dtype": dtype, "settings": {"s": 1}, "candidates": candidates,
                             "vendor": VENDOR, "graph": {"fingerprint": "x"}})
        return SimpleNamespace(decision=decision, candidates=candidates, vendor=VENDOR, cache_hit=False,
                               key_id=entry["id"])


@pytest.fixture
def fake(monkeypatch, tmp_path):
    kinds.TABLE.clear()
    fake = FakeTuner()
    monkeypatch.setattr(tuner, "lookup_or_tune", fake)
    monkeypatch.setattr(tuner, "machine", lambda: ({"name": "H200"}, {"cupy": "14"}))
    monkeypatch.setattr(tuner, "decision_settings", lambda *a: {"s": 1})
    yield fake, cache_mod.DecisionCache(tmp_path / "decisions.json")
    kinds.TABLE.clear()


def _host_graph():
    import scipy.sparse as sp

    from autosage_cli.graphs.csr import canonical_csr

    return canonical_csr(sp.random(50, 40, density=0.1, random_state=3, format="csr"),
                         {"api": "autosage_cli.torch.Graph"})


def _decide(store, features=BASE, checksum=1, question=QUESTION, tune=True):
    return kinds.decide(features, checksum, question, cache=store, tune=tune, host_graph=_host_graph)


def test_a_second_graph_of_the_kind_probes_nothing_and_gets_the_carry_decision(fake):
    tuner_calls, store = fake
    first = _decide(store)
    assert first["schedule"] == SPLIT.name and kinds.probe_count() == 1
    other = dict(BASE, n_rows=320_000, nnz=470_000, deg_max=14)
    carried = _decide(store, other, checksum=2)
    assert carried["schedule"] == ROWS.name      # split builds host work lists: not carried
    assert kinds.probe_count() == 1 and len(tuner_calls.calls) == 1
    assert _decide(store, BASE, checksum=1)["schedule"] == SPLIT.name   # the probed graph keeps its own


def test_a_graph_whose_host_csr_is_another_gets_the_carry_even_as_the_probed_graph(fake):
    """A graph of every listing tunes on its coalesced graph's CSR: with own_host=False it never
    takes the probed graph's own decision (a host work list of the other CSR), only the carry."""
    _tuner, store = fake
    listed = kinds.decide(BASE, 1, QUESTION, cache=store, host_graph=_host_graph, own_host=False)
    assert listed["schedule"] == ROWS.name and kinds.probe_count() == 1
    assert _decide(store, BASE, checksum=1)["schedule"] == SPLIT.name   # its own, for the graph itself


@pytest.mark.parametrize("change", [{"nnz": 2_000_000}, {"n_rows": 100_000}, {"deg_max": 400},
                                    {"deg_q99": 60}, {"empty_share": 0.1}])
def test_another_kind_probes(fake, change):
    tuner_calls, store = fake
    _decide(store)
    _decide(store, dict(BASE, **change), checksum=2)
    assert kinds.probe_count() == 2 and len(tuner_calls.calls) == 2


@pytest.mark.parametrize("question", [("spmm", 32, 1, "float32", True), ("spmm", 64, 1, "bfloat16", True),
                                      ("spmm", 64, 1, "float32", False), ("sddmm", 64, 1, "float32", False)])
def test_another_question_probes(fake, question):
    _, store = fake
    _decide(store)
    _decide(store, question=question)
    assert kinds.probe_count() == 2


def test_a_changed_setting_retunes(fake, monkeypatch):
    _, store = fake
    _decide(store)
    kinds.TABLE.clear()
    monkeypatch.setattr(tuner, "decision_settings", lambda *a: {"s": 2})
    _decide(store)
    assert kinds.probe_count() == 1     # counted since the clear: the recorded kind did not serve


def test_recorded_kinds_serve_a_new_process(fake):
    tuner_calls, store = fake
    _decide(store)
    entry = store.entries()[0]
    assert entry["kind"]["features"] == BASE and entry["kind"]["carry"]["schedule"] == ROWS.name
    kinds.TABLE.clear()                                   # a new process: nothing in memory
    again = cache_mod.DecisionCache(store.path)
    assert _decide(again, dict(BASE, nnz=450_000), checksum=5)["schedule"] == ROWS.name
    assert kinds.probe_count() == 0 and len(tuner_calls.calls) == 1


def test_tuning_off_uses_a_known_kind_and_never_probes(fake):
    tuner_calls, store = fake
    assert _decide(store, tune=False) is None
    assert not tuner_calls.calls
    _decide(store)
    assert _decide(store, dict(BASE, nnz=460_000), checksum=3, tune=False)["schedule"] == ROWS.name


def test_carry_keeps_the_guardrail():
    slow = [_record(SPLIT, 0.5), _record(ROWS, 0.98)]   # warprow within 5% of the vendor: not enough
    decision = kinds.carry_decision(slow, VENDOR, select.DEFAULT_GUARDRAIL)
    assert decision["backend"] == "cusparse-alg2"
    failed = [_record(ROWS, 0.3, status="failed")]
    assert kinds.carry_decision(failed, VENDOR, select.DEFAULT_GUARDRAIL)["backend"] == "cusparse-alg2"


def test_host_work_list_families_are_named_by_their_entries():
    reads = {s.family for s in registry("spmm") if family_of(s.family).reads_host_graph(s)}
    assert reads == {"split", "splitwarp", "parreduce", "stream"}
    chunked = [s for s in registry("sddmm") if s.family == "rowgroup"]
    assert {family_of(s.family).reads_host_graph(s) for s in chunked} == {True, False}
    assert all(bool(s.chunk) == family_of(s.family).reads_host_graph(s) for s in chunked)


@pytest.mark.parametrize("name, value, same", [("nnz", 440_000 * 1.4, True), ("nnz", 440_000 * 1.6, False),
                                               ("deg_max", 30, True), ("deg_max", 33, False)])
def test_kind_tolerance(name, value, same):
    assert (kinds.kind_change(BASE, dict(BASE, **{name: value})) is None) == same


def test_a_graph_built_in_memory_is_saved_for_replay(fake):
    """The probed graph of a new kind (a sampled batch has no file) is saved beside the cache, and
    reloads as the same graph: `autosage replay` can re-check the kind's decision on it."""
    from autosage_cli.graphs.load import load_graph

    from autosage_cli.scheduler.decisions.replay import located

    tuner_calls, store = fake
    _decide(store)
    probed = tuner_calls.calls[0][0]
    assert probed.source["path"].startswith("decisions.graphs/") and probed.source["beside_cache"]
    path = located(probed.source, store.path)["path"]
    assert path.startswith(str(store.path.parent / "decisions.graphs"))
    again = load_graph(path=path)
    assert again.fingerprint == probed.fingerprint == _host_graph().fingerprint


def test_a_known_kind_is_answered_without_files_metadata_or_hashing(fake, monkeypatch):
    """The per-step path: once the kind is known, no package metadata is read, no source hashed and
    no cache file read or written."""
    import importlib.metadata

    from autosage_cli import cuda_sources

    _, store = fake
    _decide(store)

    def forbidden(*_a, **_k):
        raise AssertionError("touched on the per-step path")

    monkeypatch.setattr(importlib.metadata, "version", forbidden)
    monkeypatch.setattr(cuda_sources, "sources_hash", forbidden)
    monkeypatch.setattr(cache_mod.DecisionCache, "_read", forbidden)
    monkeypatch.setattr(cache_mod.DecisionCache, "_write", forbidden)
    assert _decide(store, dict(BASE, nnz=450_000), checksum=9)["schedule"] == ROWS.name


def test_a_captured_step_gets_the_fastest_verified_native_where_a_vendor_was_chosen():
    """CuPy refuses cuSPARSE calls during stream capture: with `capturable`, a kind whose decision
    is a vendor gives its fastest verified native candidate that builds no host work lists."""
    records = [_record(SPLIT, 0.5), _record(ROWS, 0.98)]
    carry = kinds.carry_decision(records, VENDOR, select.DEFAULT_GUARDRAIL)
    assert carry["backend"] == "cusparse-alg2"
    kind = kinds.Kind(BASE, 1, carry, carry, "", kinds.native_decision(records))
    assert kind.decision_for(2)["backend"] == "cusparse-alg2"
    assert kind.decision_for(2, capturable=True)["schedule"] == ROWS.name
    assert kinds.native_decision([_record(ROWS, 0.3, status="failed")]) is None
    assert kinds.Kind(BASE, 1, carry, carry).decision_for(1, capturable=True) is None


def _kind_of(records, vendor_ms):
    vendor = [dict(VENDOR[0], ms=vendor_ms)]
    carry = kinds.carry_decision(records, vendor, select.DEFAULT_GUARDRAIL)
    return kinds.Kind(BASE, 1, carry, carry, "", kinds.native_decision(records), None,
                      kinds.fastest_native(records))


def test_a_host_paced_vendor_call_gives_way_to_a_native_that_costs_less_per_call():
    """A vendor chosen on the GPU clock whose call is shorter on the GPU than its host time (a
    cuSPARSE call through CuPy) loses to a verified native whose call, host time counted, costs
    less; the graph's own probe record and the carry keep the vendor."""
    kind = _kind_of([_record(ROWS, 0.018)], 0.015)     # 1.2x slower on the GPU
    assert kind.carry["backend"] == "cusparse-alg2"
    chosen = kind.decision_for(2)
    assert chosen["backend"] == "native" and chosen["schedule"] == ROWS.name
    assert "host" in chosen["reason"] and chosen["vendor_ms"] == 0.015
    assert chosen["speedup"] == kinds.HOST_US["vendor"] / kinds.HOST_US["native"]   # both host-paced
    assert kind.decision_for(1)["backend"] == "native"          # the probed graph too
    assert kind.carry["backend"] == "cusparse-alg2"             # what the cache records stays


def test_a_vendor_stays_where_the_gpu_paces_its_call_or_the_native_costs_more():
    assert _kind_of([_record(ROWS, 0.090)], 0.015).decision_for(2)["backend"] == "cusparse-alg2"
    assert _kind_of([_record(ROWS, 0.098)], 0.1).decision_for(2)["backend"] == "cusparse-alg2"
    assert _kind_of([], 0.015).decision_for(2)["backend"] == "cusparse-alg2"   # no native verified


def test_the_probed_graph_may_take_a_native_that_reads_its_own_host_graph():
    """Where the host paces the call, the probed graph runs its fastest verified native of any
    family (split builds its work lists on the host: its own graph's); other graphs of the kind
    one that prepares on the device."""
    kind = _kind_of([_record(SPLIT, 0.030), _record(ROWS, 0.080)], 0.031)
    assert kind.decision["backend"] == kind.carry["backend"] == "cusparse-alg2"
    assert kind.decision_for(1)["schedule"] == SPLIT.name
    assert kind.decision_for(2)["schedule"] == ROWS.name


def test_a_decided_native_stays_when_capturable(fake):
    _, store = fake
    assert _decide(store)["schedule"] == SPLIT.name
    assert kinds.decide(BASE, 1, QUESTION, cache=store, host_graph=_host_graph,
                        capturable=True)["schedule"] == SPLIT.name


def test_a_static_graph_takes_a_native_that_launches_by_the_graphs_shape(monkeypatch):
    """A captured mini-batch step replays its plans on every batch of a capacity: a static graph's
    decision is a verified native whose layout launches by the shape alone (SHAPE_ONLY_PLANS), or
    None where the kind has none."""
    records = [_record(ROWS, 0.6), _record(SPLIT, 0.5)]
    carry = kinds.carry_decision(records, VENDOR, select.DEFAULT_GUARDRAIL)
    kind = kinds.Kind(BASE, 1, carry, carry, "", kinds.native_decision(records),
                      kinds.native_decision(records, static=True))
    assert kind.decision_for(None, static=True)["schedule"] == ROWS.name
    assert "static graph" in kind.static["reason"]
    own = kinds.Kind(BASE, 1, kind.static, kind.static)           # a native rows decision stays
    assert own.decision_for(None, static=True) is kind.static
    monkeypatch.setattr(kinds, "SHAPE_ONLY_PLANS", frozenset({"edges"}))
    assert kinds.native_decision(records, static=True) is None
    assert own.decision_for(None, static=True) is None             # rows no longer counts
    assert own.decision_for(None)["schedule"] == ROWS.name         # other graphs: unchanged


def test_every_plan_that_prepares_on_the_device_launches_by_the_graphs_shape():
    """Today on-device means shape-only for every registered schedule: a new on-device layout must
    say whether a captured step may replay it on other batches (kinds.SHAPE_ONLY_PLANS)."""
    for op in ("spmm", "sddmm", "attention"):
        for s in registry(op):
            family = family_of(s.family)
            if not family.reads_host_graph(s):
                assert family.plan in kinds.SHAPE_ONLY_PLANS, (op, s.name, family.plan)
