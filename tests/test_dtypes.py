"""dtype as a value: the element-type table, what each op spec accepts, and the dtype carried through
tuning (cache key and entry, probe log), replay, the benchmark's cases and rows, the CLI and the API.
Every op takes float32, float16 and bfloat16; any other dtype is refused in one line naming the known
ones, and an op spec refuses a dtype it does not list in one line naming the ones it does."""
from __future__ import annotations

import dataclasses
import json

import pytest

from autosage_cli import budget, dtypes, ops
from autosage_cli.backends import native
from autosage_cli.cache import DecisionCache, make_key
from autosage_cli.errors import AutosageError
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels.schedule import known_ops as sched_ops, registry
from autosage_cli.scheduler.probing import probe
from autosage_cli.scheduler.decisions import replay as replay_mod
from autosage_cli.scheduler import tune as tune_mod

from cli_helpers import run_cli
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of, small_graph


def test_the_table_gives_each_dtype_its_c_type_size_and_tolerance():
    assert [(d.name, d.c_type, d.itemsize) for d in dtypes.DTYPES.values()] == [
        ("float32", "float", 4), ("float16", "__half", 2), ("bfloat16", "__nv_bfloat16", 2)]
    # float32's verification limit is the one the probe always used.
    assert dtypes.tolerance("float32") == probe.REL_TOLERANCE == 1e-4
    assert dtypes.tolerance("float16") > dtypes.tolerance("float32")
    assert dtypes.tolerance("bfloat16") > dtypes.tolerance("float16")   # fewer mantissa bits
    with pytest.raises(AutosageError, match="unknown dtype 'int8'; known: float32, float16, bfloat16"):
        dtypes.info("int8")


def test_each_op_spec_accepts_the_three_dtypes():
    assert ops.names() == ("spmm", "sddmm", "attention", "attention-additive", "spmm-bias", "spmm-relu",
                           "spmm-bias-relu", "spmm-scale")
    assert all(ops.get(op).dtypes == ("float32", "float16", "bfloat16") for op in ops.names())
    assert ops.supported_dtypes() == ("float32", "float16", "bfloat16")
    assert ops.require_dtype("sddmm", "bfloat16") == "bfloat16"
    with pytest.raises(AutosageError, match="unknown dtype 'int8'"):
        ops.require_dtype("attention", "int8")
    narrow = dataclasses.replace(ops.get("spmm"), name="gather", dtypes=("float32",))
    with pytest.raises(AutosageError, match="dtype bfloat16 is not supported for gather; supported: float32"):
        narrow.require_dtype("bfloat16")
    with pytest.raises(AutosageError, match="unknown op 'gemm'"):
        ops.get("gemm")


def test_parse_list_keeps_order_and_refuses_unknown_or_empty_names():
    assert dtypes.parse_list("float32, float16,float32") == ("float32", "float16")
    with pytest.raises(AutosageError, match="unknown dtype 'fp8'"):
        dtypes.parse_list("float32,fp8")
    with pytest.raises(AutosageError, match="comma list"):
        dtypes.parse_list("float32,,")


def test_float32_kernels_keep_their_names_and_instantiations():
    """The C++ type comes from the table: float32 plans build exactly the float instantiations."""
    for op in sched_ops():     # the ops with schedules of their own (attention-additive runs attention's)
        for s in registry(op)[:6]:
            assert native.kernel_refs(s, 64, "int", "float32") == native.kernel_refs(s, 64)
            assert kcompile.schedule_kernels(s, "float")[0] in native.kernel_refs(s, 64, "int", "float32")
    s = registry("spmm")[0]
    assert "<__half," in native.kernel_refs(s, 64, "int", "float16")[0].expression


def test_memory_estimates_use_the_element_size():
    args = ("attention", 1000, 1000, 20_000, 64, 4)
    half, single = ops.device_bytes(*args, "float16"), ops.device_bytes(*args, "float32")
    graph = 2 * budget.graph_bytes(1000, 1000, 20_000)
    assert (single - graph) == 2 * (half - graph)


def test_validate_options_refuses_an_unknown_dtype():
    for dtype in ("float32", "float16", "bfloat16"):
        tune_mod.validate_options("spmm", 8, dtype=dtype)
    with pytest.raises(AutosageError, match="unknown dtype 'int8'"):
        tune_mod.validate_options("spmm", 8, dtype="int8")


def _tune(graph, cache, dtype="float32", measure=None):
    return tune_mod.tune(graph, "spmm", 8, cache=cache, measure=measure or FakeMeasurer(), device_info=DEVICE,
                         software_info=SOFTWARE, features=features_of(graph), dtype=dtype)


def test_tune_carries_the_dtype_to_inputs_entry_key_and_probe_log(tmp_path):
    graph, cache, measure = small_graph(), DecisionCache(tmp_path / "d.json"), FakeMeasurer()
    result = _tune(graph, cache, measure=measure)
    assert set(measure.dtypes_seen) == {"float32"}
    assert result.entry["dtype"] == "float32" and result.entry["key"]["dtype"] == "float32"
    assert result.to_json()["dtype"] == "float32"
    records = [json.loads(line) for line in cache.probes_path.read_text().splitlines()]
    assert records and all(r["dtype"] == "float32" and r["op"] == "spmm" and r["k"] == 8 for r in records)
    assert _tune(graph, cache).cache_hit


def test_an_entry_without_a_dtype_reads_as_float32_and_another_dtype_is_stale(tmp_path):
    graph, cache = small_graph(), DecisionCache(tmp_path / "d.json")
    _tune(graph, cache)
    doc = json.loads(cache.path.read_text())
    [entry] = doc["entries"].values()
    del entry["dtype"]                                    # as written before dtypes were recorded
    cache.path.write_text(json.dumps(doc))
    assert _tune(graph, cache).cache_hit
    entry["dtype"] = "float16"                            # recorded for another dtype
    cache.path.write_text(json.dumps(doc))
    key = make_key(graph, "spmm", 8, "float32", device=DEVICE, software=SOFTWARE)
    found = cache.find(key)
    assert found.entry is None and "made for dtype float16, not float32" in found.stale


def test_replay_filters_by_dtype_and_skips_a_dtype_this_version_cannot_run(tmp_path):
    import scipy.io

    from autosage_cli.graphs.load import load_graph

    scipy.io.mmwrite(str(tmp_path / "g.mtx"), small_graph().to_scipy())
    graph = load_graph(path=str(tmp_path / "g.mtx"))
    cache = DecisionCache(tmp_path / "d.json")
    _tune(graph, cache)
    outcomes = replay_mod.replay(cache, dry_run=True, dtype="float32")
    assert [(o.dtype, o.status) for o in outcomes] == [("float32", "checked")]
    assert replay_mod.replay(cache, dry_run=True, dtype="float16") == []
    doc = json.loads(cache.path.read_text())
    next(iter(doc["entries"].values()))["dtype"] = "int8"
    cache.path.write_text(json.dumps(doc))
    [out] = replay_mod.replay(cache, dry_run=True)
    assert out.status == "skipped" and "unknown dtype 'int8'" in out.reason
    r = run_cli("replay", str(cache.path), "--dry-run", "--json", "--dtype", "float32")
    assert r.exit_code == 0 and json.loads(r.stdout)["entries"] == []


@pytest.mark.parametrize("args, message", [
    (("tune", "--dataset", "cora", "-k", "8", "--dtype", "int8"), "Error: Invalid value for '--dtype'"),
    (("bench", "--dataset", "cora", "--dtypes", "fp8", "--dry-run"), "Error: unknown dtype 'fp8'"),
    (("bench", "--dataset", "cora", "--dtypes", "float32,__half", "--dry-run"), "Error: unknown dtype '__half'"),
    (("replay", "x.json", "--dtype", "int8"), "Error: Invalid value for '--dtype'"),
])
def test_cli_refuses_unsupported_dtypes_in_one_line(args, message):
    r = run_cli(*args)
    assert r.exit_code == 2 and r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr
    if "--dtype" in args:
        assert "float32" in r.stderr


def test_bench_dry_run_lists_one_case_per_dtype():
    r = run_cli("bench", "--dataset", "cora", "--ops", "spmm", "--widths", "8", "--dtypes", "float32,bfloat16",
                "--dry-run", "--json")
    assert r.exit_code == 0, r.stderr
    assert [c["dtype"] for c in json.loads(r.stdout)["cases"]] == ["float32", "bfloat16"]
    r = run_cli("tune", "--dataset", "cora", "-k", "64", "--dtype", "bfloat16", "--dry-run", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["cases"][0]["dtype"] == "bfloat16"


def test_bench_rows_tunes_and_inputs_carry_the_case_dtype():
    """The harness takes the dtype from the case (build_work has checked it against the op spec):
    a float16 case through the fake toolkit is tuned, prepared and reported as float16."""
    from autosage_cli.bench import harness
    from autosage_cli.bench.suites import Case, GraphWork

    from bench_fakes import FakeSpec, FakeToolkit

    class Recording(FakeToolkit):
        seen: list = []

        def inputs(self, dgraph, op, k, heads, seed, dtype="float32"):
            self.seen.append(dtype)
            return super().inputs(dgraph, op, k, heads, seed, dtype)

    for dtype in ("float32", "float16"):
        tk = Recording()
        tk.seen = []
        options = harness.RunOptions(repeat=3)
        ctx, _env = harness.make_context(tk, options)
        work = [GraphWork(FakeSpec(), [Case("spmm", 8, 1, dtype)])]
        rows = [r for batch in harness.run_suite(work, options, ctx, tk) for r in batch]
        assert rows and {r.dtype for r in rows} == {dtype}
        assert tk.seen == [dtype] and {c["dtype"] for c in tk.tune_calls} == {dtype}
    assert Case("spmm", 8).describe() == "spmm K=8"
    assert Case("spmm", 8, 1, "float16").describe() == "spmm K=8 float16"


def test_api_takes_the_dtype_from_its_inputs():
    from autosage_cli import api

    class Dense:
        __cuda_array_interface__ = {}

        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype

    assert api.check_dense("B", Dense((4, 8), "float32"), (4, None), "spmm") == "float32"
    assert api.common_dtype([("X", "float32"), ("Y", "float32")]) == "float32"
    with pytest.raises(AutosageError, match="Y: dtype float16 differs from X's float32"):
        api.common_dtype([("X", "float32"), ("Y", "float16")])
    assert api.check_dense("B", Dense((4, 8), "float16"), (4, None), "spmm") == "float16"
    with pytest.raises(AutosageError, match="unknown dtype 'int8'"):
        api.prepare_plan(small_graph(), None, "sddmm", 8, dtype="int8")


def test_native_plans_get_the_dtype_through_the_op_spec(monkeypatch):
    """ops.prepare_native checks the dtype against the spec, then calls the spec's own
    prepare_native with it."""
    import dataclasses

    calls = []
    spec = dataclasses.replace(ops.get("sddmm"), prepare_native=lambda *a, **kw: calls.append((a, kw)) or "plan")
    monkeypatch.setitem(ops.SPECS, "sddmm", spec)
    s = next(s for s in registry("sddmm") if s.supports(8, 1, "bfloat16") is None)
    assert ops.prepare_native("dg", s.name, 8, 1, 0.5, "bfloat16") == "plan"
    assert calls == [(("dg", s, 8, 1, 0.5), {"dtype": "bfloat16"})]
    with pytest.raises(AutosageError, match="unknown dtype 'int8'"):
        ops.prepare_native("dg", s, 8, dtype="int8")
    with pytest.raises(AutosageError, match="unknown dtype 'int8'"):
        ops.prepare_vendor("dg", "cusparse-alg2", 8, dtype="int8")


class _Outputs:
    """A measurer whose outputs are numbers: rel_error is their relative difference."""

    def __init__(self, exact):
        self.exact = exact

    def rel_error(self, out, ref):
        return abs(out - ref) / abs(ref)

    def reference(self, op, dgraph, inputs, dtype):
        return self.exact


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_in_two_byte_types_the_float64_reference_decides_and_vendors_get_the_slack(dtype):
    from autosage_cli.scheduler.probing.measure import vendor_reference

    tol = dtypes.tolerance(dtype, 64)
    close, sloppy, wrong = 1 + 2 * tol, 1 - 2 * tol, 1 + 10 * tol    # two vendors that agree within tol
    pick = vendor_reference(_Outputs(1.0), "spmm", None, (), {"a": close, "b": sloppy, "c": wrong}, tol,
                            dtype)
    assert pick.output == 1.0 and pick.name.startswith("float64 reference")
    assert set(pick.disagree) == {"c"}                      # within the vendor slack, beyond the bound
    assert dtypes.vendor_slack(dtype) > 2 and dtypes.vendor_slack("float32") == 1.0


def test_in_float32_a_confirmed_vendor_is_the_reference():
    from autosage_cli.scheduler.probing.measure import vendor_reference

    tol = dtypes.tolerance("float32")
    pick = vendor_reference(_Outputs(1.0), "spmm", None, (), {"a": 1 + tol / 4, "b": 1 + tol / 2}, tol)
    assert pick.name == "a" and not pick.disagree
