"""float16 and bfloat16 (GPU): every native family and the vendors against the float64 reference of
the *rounded* inputs, within the type's tolerance for the accumulation length (docs/MEASUREMENT.md).

One test per (schedule, dtype, K) runs the schedule on every graph of test_native_gpu (one row of
3000 edges, no edges, 40% empty rows, a hub with half the nonzeros, all-ones values with hubs, a
Zipf power law) and reports every graph that fails. Outputs are poisoned with NaN (bfloat16's NaN
bits for bfloat16) and each plan runs twice. Only the Ks a schedule supports in the type are cases
(tests/schedule_grids.py); its refusals are checked on the CPU (tests/test_schedule_refusals.py). Per-head strided views (ld = H*K, base pointers offset by h*K elements: only 2-byte
aligned for odd K) go through the lower-level launches.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.ops import reference
from autosage_cli.backends.timing import poison, rel_error
from autosage_cli.graphs.csr import CSRGraph
from autosage_cli.kernels.schedule import Schedule, registry
from autosage_cli import dtypes
from autosage_cli.dtypes import from_storage, to_storage
from autosage_cli.ops import case_tolerance

from schedule_grids import HALF, HALF_ATTENTION
from test_native_gpu import build_graphs, run_checked

pytestmark = pytest.mark.gpu

DTYPES = HALF.dtypes
WIDTHS = HALF.widths
SCHEDULES = list(HALF.schedules)


@pytest.fixture(scope="module")
def graphs():
    from autosage_cli.backends.base import DeviceGraph

    return {name: (csr, DeviceGraph.from_host(csr)) for name, csr in build_graphs().items()}


def bound(op: str, csr: CSRGraph, k: int, dtype: str) -> float:
    max_degree = int(np.diff(csr.indptr).max()) if csr.n_rows else 0
    return case_tolerance(op, dtype, k, max_degree)


# Vendor baselines are checked within the product's slack for them (dtypes.VENDOR_SLACK_2BYTE: they
# round partial sums to the type); our kernels within the bound itself.
VENDOR_SLACK = dtypes.VENDOR_SLACK_2BYTE


_CASES: dict = {}


def case(op: str, name: str, csr: CSRGraph, dgraph, k: int, dtype: str, heads: int = 1):
    """(inputs in the type, float64 reference of the rounded inputs on the device), made once."""
    key = (op, name, k, dtype, heads)
    if key not in _CASES:
        import cupy

        from autosage_cli.ops import make_inputs

        inputs = make_inputs(op, dgraph, k, heads, seed=k, dtype=dtype)
        ref = reference(op, csr, tuple(x.get() for x in inputs), dtype=dtype)
        _CASES[key] = (inputs, cupy.asarray(ref))
    return _CASES[key]


def check_on_every_graph(schedule_or_name, op: str, k: int, dtype: str, graphs, prepare, heads=1,
                         slack: float = 1.0):
    failures = []
    for name, (csr, dgraph) in graphs.items():
        try:
            inputs, ref = case(op, name, csr, dgraph, k, dtype, heads)
            plan = prepare(dgraph)
            assert plan.dtype == dtype
            failures += [f"{name}: {p}" for p in run_checked(plan, inputs, ref,
                                                             slack * bound(op, csr, k, dtype))]
        except Exception as exc:  # report and go on with the next graph
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    return failures


# ------------------------------------------------------------------ conversions

def test_device_bfloat16_rounding_matches_the_host_bit_for_bit():
    import cupy

    from autosage_cli.backends.value_arrays import to_float32, to_value_type

    rng = np.random.default_rng(5)
    special = np.array([0.0, -0.0, 1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.3895e38, 3.4e38, np.inf,
                        -np.inf, np.nan, 1e-40, -1e-45], dtype=np.float32)
    scaled = rng.standard_normal(100_000) * 10.0 ** rng.integers(-20, 20, 100_000)
    x = np.concatenate([special, scaled.astype(np.float32)])
    for dtype in DTYPES:
        dev = to_value_type(cupy.asarray(x), dtype).get()
        host = to_storage(x, dtype)
        nan = np.isnan(x)
        assert np.array_equal(dev[~nan].view(np.uint16), host[~nan].view(np.uint16)), dtype
        assert np.isnan(from_storage(dev[nan], dtype)).all()
        back = to_float32(cupy.asarray(dev), dtype).get()
        assert np.array_equal(back[~nan], from_storage(host, dtype)[~nan].astype(np.float32))


# ------------------------------------------------------------------ native SpMM and SDDMM

@pytest.mark.parametrize("schedule,dtype,k", HALF.supported())
def test_schedule_matches_the_rounded_reference(schedule: Schedule, dtype: str, k: int, graphs):
    from autosage_cli import ops

    failures = check_on_every_graph(schedule, schedule.op, k, dtype, graphs,
                                    lambda dg: ops.prepare_native(dg, schedule, k, dtype=dtype))
    assert not failures, f"{schedule.name} {dtype} K={k}:\n" + "\n".join(failures)


def one_per_family(op: str, k: int, dtype: str) -> list[Schedule]:
    chosen = {}
    for s in registry(op):
        if s.supports(k, 1, dtype) is None:
            chosen.setdefault((s.family, s.vec, s.reduce), s)
    return list(chosen.values())


HEADS = 3


@pytest.mark.parametrize("d", (5, 32))   # d = 5: head views only 2-byte aligned
@pytest.mark.parametrize("dtype", DTYPES)
def test_spmm_and_sddmm_on_head_views(dtype, d, graphs):
    import cupy

    from autosage_cli import ops
    from autosage_cli.backends.value_arrays import to_value_type

    failures = []
    for name in ("half_in_one_row", "empty_rows", "pattern"):
        csr, dgraph = graphs[name]
        rng = cupy.random.default_rng(9)
        B3 = to_value_type(rng.uniform(-1, 1, (csr.n_cols, HEADS, d), dtype=cupy.float32), dtype)
        X3 = to_value_type(rng.uniform(-1, 1, (csr.n_rows, HEADS, d), dtype=cupy.float32), dtype)
        probs = to_value_type(rng.uniform(0, 1, (HEADS, csr.nnz), dtype=cupy.float32), dtype)
        ld = HEADS * d
        for s in one_per_family("spmm", d, dtype):
            out3 = poison(cupy.empty((csr.n_rows, HEADS, d), dtype=B3.dtype))
            plan = ops.prepare_native(dgraph, s, d, dtype=dtype)
            for h in range(HEADS):
                plan.launch(probs[h], B3[:, h, :], out3[:, h, :], ld, ld)
            for h in range(HEADS):
                a = sp.csr_matrix((from_storage(probs[h].get(), dtype), csr.indices, csr.indptr), shape=csr.shape)
                want = a @ from_storage(B3[:, h, :].get(), dtype)
                err = rel_error(out3[:, h, :], want)
                tol = bound("spmm", csr, d, dtype)
                if not err <= tol:
                    failures.append(f"{name} {s.name} head {h}: rel error {err:.3g} > {tol:.3g}")
        for s in one_per_family("sddmm", d, dtype):
            out = poison(cupy.empty((HEADS, csr.nnz), dtype=B3.dtype))
            plan = ops.prepare_native(dgraph, s, d, dtype=dtype)
            for h in range(HEADS):
                plan.launch(X3[:, h, :], B3[:, h, :], out[h], ld, ld, scale=0.5, use_values=False)
            ones = CSRGraph(csr.indptr, csr.indices, np.ones(csr.nnz, np.float32), csr.shape)
            for h in range(HEADS):
                want = 0.5 * reference("sddmm", ones, (X3[:, h, :].get(), B3[:, h, :].get()), dtype=dtype)
                err = rel_error(out[h], want)
                tol = bound("sddmm", csr, d, dtype)
                if not err <= tol:
                    failures.append(f"{name} {s.name} head {h}: rel error {err:.3g} > {tol:.3g}")
    assert not failures, "\n".join(failures)


def test_half_plans_refuse_operands_of_another_type(graphs):
    import cupy

    from autosage_cli import ops
    from autosage_cli.errors import AutosageError

    csr, dgraph = graphs["empty_rows"]
    plan = ops.prepare_native(dgraph, Schedule("spmm", "subwarp", lanes=4, vec=8, unroll=4), 16, dtype="bfloat16")
    out = plan.alloc_out()
    assert out.dtype == cupy.uint16
    with pytest.raises(AutosageError, match="bfloat16"):
        plan.launch(None, cupy.zeros((csr.n_cols, 16), dtype=cupy.float32), out, 16, 16)
    shifted = cupy.zeros(csr.n_cols * 16 + 4, dtype=cupy.uint16)[4:].reshape(csr.n_cols, 16)
    with pytest.raises(AutosageError, match="16-byte vector access"):
        plan.launch(None, shifted, out, 16, 16)
    with pytest.raises(AutosageError, match="16-byte vector loads"):
        ops.prepare_native(dgraph, Schedule("spmm", "subwarp", lanes=4, vec=8, unroll=4), 16)


# ------------------------------------------------------------------ native attention

# One schedule per family, vector width, tile and vectors per lane, with two head blocks
# (schedule_grids.HALF_ATTENTION).
@pytest.mark.parametrize("schedule,dtype,d", HALF_ATTENTION.supported())
def test_attention_matches_the_rounded_reference(schedule, dtype, d, graphs):
    from autosage_cli import ops

    heads = HALF_ATTENTION.heads(schedule)
    failures = check_on_every_graph(schedule, "attention", d, dtype, graphs,
                                    lambda dg: ops.prepare_native(dg, schedule, d, heads, dtype=dtype),
                                    heads=heads)
    assert not failures, f"{schedule.name} {dtype} d={d}:\n" + "\n".join(failures)


# ------------------------------------------------------------------ vendors

@pytest.mark.parametrize("k", (1, 5, 64, 127))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ("cusparse-alg1", "cusparse-alg2", "cusparse-alg3", "cusparse-default"))
def test_cusparse_spmm_in_the_type_or_refused_with_its_status(name, dtype, k, graphs):
    from autosage_cli.backends.cusparse import DtypeRefused, prepare_spmm

    refusals, failures = [], []
    for gname, (csr, dgraph) in graphs.items():
        try:
            plan = prepare_spmm(dgraph, name, k, dtype)
        except DtypeRefused as exc:
            assert "CUSPARSE_STATUS" in str(exc) and dtype in str(exc)
            refusals.append(gname)
            continue
        inputs, ref = case("spmm", gname, csr, dgraph, k, dtype)
        tol = VENDOR_SLACK * bound("spmm", csr, k, dtype)
        failures += [f"{gname}: {p}" for p in run_checked(plan, inputs, ref, tol)]
    assert not failures, f"{name} {dtype} K={k}:\n" + "\n".join(failures)
    with_edges = [g for g, (csr, _) in graphs.items() if csr.nnz]
    assert not refusals or set(refusals) == set(with_edges), "a type is refused for every graph or none"


@pytest.mark.parametrize("k", (1, 5, 64))
@pytest.mark.parametrize("dtype", DTYPES)
def test_vendor_sddmm_in_the_type(dtype, k, graphs):
    from autosage_cli.backends.sddmm_vendor import prepare_sddmm, sddmm_vendor_names

    failures = []
    for name in sddmm_vendor_names():
        for gname, (csr, dgraph) in graphs.items():
            try:
                plan = prepare_sddmm(dgraph, name, k, dtype)
            except Exception as exc:   # a provider that refuses the type: a failed entry with why
                if name == "gather-dot":
                    failures.append(f"{name} {gname}: {exc}")
                continue
            inputs, ref = case("sddmm", gname, csr, dgraph, k, dtype)
            failures += [f"{name} {gname}: {p}"
                         for p in run_checked(plan, inputs, ref, bound("sddmm", csr, k, dtype))]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("d", (8, 64))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ("vendor-unfused-alg2", "vendor-unfused-default"))
def test_vendor_attention_in_the_type(name, dtype, d, graphs):
    from autosage_cli.ops import prepare_vendor

    failures = check_on_every_graph(name, "attention", d, dtype, graphs,
                                    lambda dg: prepare_vendor(dg, name, d, 2, dtype=dtype), heads=2,
                                    slack=VENDOR_SLACK)
    refused = [f for f in failures if "CUSPARSE_STATUS" in f or "refuses" in f]
    assert not [f for f in failures if f not in refused], "\n".join(failures)


# ------------------------------------------------------------------ end to end

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op, k, heads", [("spmm", 64, 1), ("sddmm", 64, 1), ("attention", 64, 4)])
def test_tune_in_the_type_verifies_its_choice_and_hits_the_cache(tmp_path, op, k, heads, dtype):
    from autosage_cli.cache import DecisionCache
    from autosage_cli.graphs.load import load_graph
    from autosage_cli.scheduler import tune as tune_mod

    from test_scheduler_gpu import DATASETS

    graph = load_graph(dataset="cora", root=str(DATASETS))
    cache = DecisionCache(tmp_path / "d.json")
    first = tune_mod.tune(graph, op, k, heads, cache=cache, dtype=dtype)
    assert first.to_json()["dtype"] == dtype and not first.cache_hit
    probed = [c for c in first.candidates if c["status"] != "skipped"]
    failures = [f"{c['name']}: {c['reason']}" for c in probed if c["status"] == "failed"]
    assert probed and not failures, failures
    assert [v for v in first.vendor if v["status"] == "ok"], first.vendor
    bound = bound_for_graph(op, graph, k, dtype)
    assert all(c["rel_error"] <= bound for c in probed if c["status"] == "ok")
    if first.decision.backend == "native":
        assert any(c["name"] == first.decision.schedule for c in probed)
    assert tune_mod.tune(graph, op, k, heads, cache=cache, dtype=dtype).cache_hit


def bound_for_graph(op, graph, k, dtype):
    return case_tolerance(op, dtype, k, int(graph.row_degrees().max(initial=0)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cli_tune_and_bench_in_the_type(tmp_path, dtype):
    import json

    from cli_helpers import run_cli
    from test_scheduler_gpu import DATASETS

    cache = str(tmp_path / "c.json")
    r = run_cli("tune", "--dataset", "cora", "--root", str(DATASETS), "--width", "64", "--dtype", dtype,
                "--cache", cache, "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["dtype"] == dtype
    out = tmp_path / "bench"
    r = run_cli("bench", "--dataset", "cora", "--root", str(DATASETS), "--ops", "spmm,sddmm", "--widths", "64",
                "--dtypes", f"float32,{dtype}", "--out", str(out), "--cache", str(tmp_path / "b.json"))
    assert r.exit_code == 0, r.stderr


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_spmm_baseline_in_the_type(dtype, graphs):
    pytest.importorskip("torch")
    from autosage_cli.backends.baselines import prepare_baselines

    failures = []
    for gname, (csr, dgraph) in graphs.items():
        skipped: list = []
        plans = prepare_baselines(dgraph, ("torch",), 64, skipped=skipped, dtype=dtype)
        for plan in plans:
            inputs, ref = case("spmm", gname, csr, dgraph, 64, dtype)
            failures += [f"{gname} {plan.schedule}: {p}"
                         for p in run_checked(plan, inputs, ref,
                                              VENDOR_SLACK * bound("spmm", csr, 64, dtype))]
    assert not failures, "\n".join(failures)
