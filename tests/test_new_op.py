"""A new op is its spec module and one registry entry: a toy op (a row-walking "spmv" over K
columns, with one kernel family of its own) registered for the length of a test is offered by the
CLI's op options, planned by the dry runs, listed for compilation, ranked by the cost model, tuned
(fake measurer), cached under its own key, recalled and replayed, with no other edit; once the
block ends, it is gone again."""
from __future__ import annotations

import json

import numpy as np
import pytest

from autosage_cli import budget, ops
from autosage_cli.backends.base import RowsOutPlan
from autosage_cli.cache import DecisionCache, make_key
from autosage_cli.errors import AutosageError
from autosage_cli.graphs.load import load_graph
from autosage_cli.kernels import compile as kcompile, schedule as sched
from autosage_cli.kernels.compile import KernelRef
from autosage_cli.kernels.family import Family
from autosage_cli.ops.spec import OpSpec
from autosage_cli.scheduler import estimate, tune as tune_mod
from autosage_cli.scheduler.decisions import replay as replay_mod

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, small_graph

OP = "spmv"
VENDORS = ("toy-vendor-a", "toy-vendor-b")
LANES = (1, 4, 32)


def _supports(s, k: int, heads: int = 1):
    return f"{s.lanes} lanes idle at K={k}" if s.lanes > 2 * k else None


def _expression(s, dtype: str) -> str:
    return f"spmv_rows<{dtype}, {s.lanes}, {s.unroll}>"


def _reference(csr, inputs, scale=None, **options):
    (x,) = inputs
    return csr.to_scipy().astype(np.float64) @ np.asarray(x, dtype=np.float64)


def _no_vendor_plan(*args, **kwargs):
    raise AutosageError("the toy op has no vendor plan")


TOY = OpSpec(
    name=OP, dtypes=("float32",), operands=("x",), multi_head=False,
    input_shapes=lambda graph, k, heads=1: [(graph.n_cols, k)], output_shape=RowsOutPlan.out_shape,
    reference=_reference, gathers_per_edge=lambda heads: 1, scores_per_edge=lambda heads: 0,
    vendor_names=lambda: list(VENDORS), is_vendor=lambda name: name in VENDORS,
    prepare_vendor=_no_vendor_plan, vendor_stream=lambda n_rows, nnz, k, heads: n_rows * k,
    families={"toyrow": Family(
        OP, "spmv_toy.cu", _expression, _supports, "lanes: lanes per row; unroll: edges in flight",
        schedules=lambda make: [make(lanes=g, vec=1, threads=256, unroll=2) for g in LANES])},
)
TOY_NAMES = [f"{OP}.toyrow.g{g}.v1.t256.u2" for g in LANES]


@pytest.fixture
def toy():
    with ops.registered(TOY) as spec:
        yield spec


def test_the_registry_and_the_schedule_registry_know_the_op_only_inside_the_block():
    before = sched.space_version()
    with ops.registered(TOY):
        assert ops.names()[-1] == OP and sched.known_ops()[-1] == OP
        assert [s.name for s in sched.registry(OP)] == TOY_NAMES
        assert sched.get(TOY_NAMES[0]).source_file == "spmv_toy.cu"
        assert sched.space_version() != before
        with pytest.raises(ValueError, match="exists already"):
            with ops.registered(TOY):
                pass
    assert OP not in ops.names() and OP not in sched.known_ops()
    assert sched.space_version() == before
    with pytest.raises(AutosageError, match="unknown op 'spmv'"):
        sched.registry(OP)


def test_its_kernels_are_listed_for_compilation(toy):
    refs = kcompile.instantiations([OP], "float32")
    assert refs == [KernelRef("spmv_toy.cu", e) for e in sorted(f"spmv_rows<float, {g}, 2>" for g in LANES)]


@pytest.mark.parametrize("command", ["tune", "compile", "bench"])
def test_the_cli_offers_the_op_in_its_op_choices(toy, command):
    shown = run_cli(command, "--help")
    assert shown.exit_code == 0 and f"{'|'.join(ops.names())}]" in shown.stdout and ops.names()[-1] == OP


def test_the_cli_choices_lose_the_op_with_its_registration():
    assert OP not in run_cli("tune", "--help").stdout
    bad = run_cli("tune", "--dataset", "cora", "--op", OP, "-k", "8", "--dry-run")
    assert bad.exit_code == 2 and bad.stderr.strip() == (
        f"Error: unknown op '{OP}'; choose one of {', '.join(ops.names())}")


def _case_bytes(n_rows, n_cols, nnz, k):
    """What one toy case holds on the GPU, written out: x (n_cols x K) in, n_rows x K out."""
    return budget.case_device_bytes(n_rows, n_cols, nnz, n_cols * k, n_rows * k, 0, "float32")


def test_tune_dry_run_plans_the_op_from_its_spec(toy, tmp_path):
    shown = run_cli("tune", "--dataset", "cora", "--op", OP, "-k", "8", "--dry-run", "--json",
                    "--cache", str(tmp_path / "d.json"))
    assert shown.exit_code == 0, shown.stderr
    [case] = json.loads(shown.stdout)["cases"]
    assert case["op"] == OP and case["k"] == 8 and case["heads"] == 1
    assert case["device_bytes"] == _case_bytes(case["n_rows"], case["n_cols"], case["nnz"], 8)


def test_bench_dry_run_lists_the_op_cases(toy):
    shown = run_cli("bench", "--ops", f"spmm,{OP}", "--dataset", "cora", "--widths", "4,16", "--dry-run",
                    "--json")
    assert shown.exit_code == 0, shown.stderr
    cases = json.loads(shown.stdout)["cases"]
    assert [(c["op"], c["k"]) for c in cases] == [("spmm", 4), ("spmm", 16), (OP, 4), (OP, 16)]
    toy_case = cases[-1]
    assert toy_case["device_bytes"] == _case_bytes(toy_case["n_rows"], toy_case["n_cols"], toy_case["nnz"], 16)


def test_the_estimate_ranks_the_op_schedules_by_the_spec_row_walk(toy):
    features = features_of(small_graph())
    ranked = estimate.rank(features, OP, 8)
    assert sorted(s.name for s, _ in ranked) == TOY_NAMES[:2]   # 32 lanes idle at K = 8
    assert all(ms > 0 for _, ms in ranked) and ranked == sorted(ranked, key=lambda sm: sm[1])
    # the row walk of a one-gather op reads like SpMM's: the same schedule shape, the same time
    spmm_like = sched.Schedule("spmm", "subwarp", lanes=4, vec=1, threads=256, unroll=2)
    toy_4 = sched.get(TOY_NAMES[1])
    assert estimate.estimate_ms(features, OP, 8, toy_4) == pytest.approx(
        estimate.estimate_ms(features, "spmm", 8, spmm_like), rel=1e-12)
    assert estimate.estimate_ms(features, OP, 64, toy_4) > estimate.estimate_ms(features, OP, 8, toy_4)


def test_the_op_is_tuned_cached_under_its_own_key_recalled_and_replayed(toy, tmp_path):
    graph = load_graph(dataset="cora")     # a source replay can load again
    cache = DecisionCache(tmp_path / "d.json")
    measure = FakeMeasurer(vendor_ms={VENDORS[0]: 1.0, VENDORS[1]: 0.9},
                           native_ms={TOY_NAMES[1]: 0.2}, default_native_ms=0.6)
    run = dict(cache=cache, measure=measure, device_info=DEVICE, software_info=SOFTWARE,
               features=features_of(graph), top_k=4)
    first = tune_mod.tune(graph, OP, 8, **run)
    assert not first.cache_hit and first.decision.backend == "native"
    assert first.decision.schedule == TOY_NAMES[1]
    assert {v["name"] for v in first.vendor} == set(VENDORS)
    key = make_key(graph, OP, 8, device=DEVICE, software=SOFTWARE)
    assert key.op == OP and key != make_key(graph, "spmm", 8, device=DEVICE, software=SOFTWARE)
    assert cache.lookup(key)["decision"]["schedule"] == TOY_NAMES[1]
    [entry] = cache.entries()
    assert entry["op"] == OP and entry["key"]["op"] == OP
    second = tune_mod.tune(graph, OP, 8, **run)
    assert second.cache_hit and second.decision == first.decision
    [replayed] = replay_mod.replay(DecisionCache(cache.path, read_only=True), measure=measure)
    assert replayed.status == "ok" and replayed.replayed_ms == 0.2 and replayed.rel_error < 1e-12
