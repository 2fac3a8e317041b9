"""Every native SpMM and SDDMM schedule against the float64 reference, on shapes that hurt (GPU).

One test per (schedule, K) the schedule supports (tests/schedule_grids.py; a K it refuses is
checked on the CPU, tests/test_schedule_refusals.py): it runs the schedule on every graph below and
reports *every* graph that fails (wrong result, error or exception), never only the first. Outputs are poisoned with NaN before each run, each plan runs
twice (a second run of the same plan must be right too), relative error < 1e-5.
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.ops import reference
from autosage_cli.backends.timing import poison, rel_error
from autosage_cli.errors import AutosageError
from autosage_cli.graphs.csr import CSRGraph, canonical_csr
from autosage_cli.kernels.schedule import Schedule, candidates, registry
from schedule_grids import NATIVE

pytestmark = pytest.mark.gpu

TOL = 1e-5
WIDTHS = NATIVE.widths
SCHEDULES = list(NATIVE.schedules)


def signed(rng):
    return lambda n: rng.uniform(-1.0, 1.0, n)


def with_rows(m: sp.spmatrix, rows: dict[int, int], rng, ones: bool = False) -> sp.csr_matrix:
    """`m` with the given rows replaced by that many random columns each."""
    m = sp.coo_matrix(m)
    keep = ~np.isin(m.row, list(rows))
    r, c, v = [m.row[keep]], [m.col[keep]], [m.data[keep]]
    for row, deg in rows.items():
        r.append(np.full(deg, row))
        c.append(rng.choice(m.shape[1], size=deg, replace=False))
        v.append(np.ones(deg) if ones else rng.uniform(-1.0, 1.0, deg))
    return sp.csr_matrix((np.concatenate(v), (np.concatenate(r), np.concatenate(c))), shape=m.shape)


def power_law(n: int, rng) -> sp.csr_matrix:
    """~0.6M nonzeros, Zipf degrees up to 20k (rows above every split threshold), random columns."""
    deg = np.minimum(rng.zipf(1.9, size=n), 20_000)
    rows = np.repeat(np.arange(n), deg)
    cols = rng.integers(0, n, size=rows.size)
    return sp.csr_matrix((rng.uniform(-1.0, 1.0, rows.size), (rows, cols)), shape=(n, n))


def build_graphs() -> dict[str, CSRGraph]:
    rng = np.random.default_rng(2026)
    g = {}
    # n = 1: a single row of 3000 nonzeros, heavy for every split threshold.
    g["n1"] = sp.random(1, 5000, density=0.6, random_state=rng, data_rvs=signed(rng), format="csr")
    g["nnz0"] = sp.csr_matrix((64, 48), dtype=np.float32)
    m = sp.random(3000, 2500, density=0.004, random_state=rng, data_rvs=signed(rng), format="csr")
    g["empty_rows"] = sp.diags((rng.random(3000) >= 0.4).astype(np.float64)) @ m  # ~40% empty rows
    # One row holds half the nonzeros (12k of ~24k).
    g["half_in_one_row"] = with_rows(sp.random(4000, 24_000, density=0.000125, random_state=rng,
                                               data_rvs=signed(rng)), {17: 12_000}, rng)
    # All values 1: the plans' fast path that skips reading values; with hubs too.
    base = sp.random(5000, 5000, density=0.001, random_state=rng, data_rvs=np.ones)
    g["pattern"] = with_rows(base, {0: 3000, 2500: 2100, 4999: 4000}, rng, ones=True)
    g["medium_power_law"] = power_law(40_000, rng)
    return {name: canonical_csr(mat, {"generator": name}) for name, mat in g.items()}


@pytest.fixture(scope="module")
def graphs():
    from autosage_cli.backends.base import DeviceGraph

    return {name: (csr, DeviceGraph.from_host(csr)) for name, csr in build_graphs().items()}


_CASES: dict = {}


def case(op: str, name: str, csr: CSRGraph, dgraph, k: int):
    """(inputs, float64 reference on the device) per (op, graph, K), made once."""
    key = (op, name, k)
    if key not in _CASES:
        import cupy

        from autosage_cli.ops import make_inputs

        inputs = make_inputs(op, dgraph, k, seed=k)
        ref = reference(op, csr, tuple(x.get() for x in inputs))
        _CASES[key] = (inputs, cupy.asarray(ref))
    return _CASES[key]


def run_checked(plan, inputs, ref, tol: float = TOL) -> list[str]:
    """Two runs into a NaN-poisoned output, each within `tol` of `ref`: the problems found."""
    import cupy

    problems = []
    out = plan.alloc_out()
    for attempt in (1, 2):
        poison(out)
        plan.run(inputs, out)
        cupy.cuda.get_current_stream().synchronize()
        err = rel_error(out, ref)
        if not err < tol:
            problems.append(f"run {attempt}: rel error {err:.3g} >= {tol:.3g}")
    return problems


@pytest.mark.parametrize("schedule,k", NATIVE.supported(with_dtype=False))
def test_schedule_matches_reference(schedule: Schedule, k: int, graphs):
    from autosage_cli import ops

    failures = []
    for name, (csr, dgraph) in graphs.items():
        try:
            inputs, ref = case(schedule.op, name, csr, dgraph, k)
            plan = ops.prepare_native(dgraph, schedule, k)
            failures += [f"{name}: {p}" for p in run_checked(plan, inputs, ref)]
        except Exception as exc:  # report and go on with the next graph
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, f"{schedule.name} K={k}:\n" + "\n".join(failures)


# ------------------------------------------------------------------ strided per-head entry points

def one_per_family(op: str, k: int) -> list[Schedule]:
    chosen = {}
    for s in registry(op):
        if s.supports(k) is None:
            chosen.setdefault((s.family, s.vec, s.reduce), s)
    return list(chosen.values())


HEADS, D = 3, 32


@pytest.mark.parametrize("schedule", one_per_family("spmm", D), ids=lambda s: s.name)
def test_spmm_launch_on_head_views_with_given_values(schedule, graphs):
    import cupy

    from autosage_cli import ops

    failures = []
    for name in ("half_in_one_row", "pattern", "empty_rows"):
        csr, dgraph = graphs[name]
        rng = cupy.random.default_rng(7)
        B3 = rng.uniform(-1, 1, (csr.n_cols, HEADS, D), dtype=cupy.float32)
        probs = rng.uniform(0, 1, (HEADS, csr.nnz), dtype=cupy.float32)
        out3 = poison(cupy.empty((csr.n_rows, HEADS, D), dtype=cupy.float32))
        plan = ops.prepare_native(dgraph, schedule, D)
        for h in range(HEADS):
            plan.launch(probs[h], B3[:, h, :], out3[:, h, :], HEADS * D, HEADS * D)
        for h in range(HEADS):
            a = sp.csr_matrix((probs[h].get().astype(np.float64), csr.indices, csr.indptr), shape=csr.shape)
            err = rel_error(out3[:, h, :], a @ B3[:, h, :].get().astype(np.float64))
            if not err < TOL:
                failures.append(f"{name} head {h}: rel error {err:.3g}")
        poison(out3)
        plan.launch(None, B3[:, 0, :], out3[:, 0, :], HEADS * D, HEADS * D)  # None: all ones
        ones = sp.csr_matrix((np.ones(csr.nnz), csr.indices, csr.indptr), shape=csr.shape)
        err = rel_error(out3[:, 0, :], ones @ B3[:, 0, :].get().astype(np.float64))
        if not err < TOL:
            failures.append(f"{name} values=None: rel error {err:.3g}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("schedule", one_per_family("sddmm", D), ids=lambda s: s.name)
def test_sddmm_launch_on_head_views_scaled_without_values(schedule, graphs):
    import cupy

    from autosage_cli import ops

    failures = []
    for name in ("half_in_one_row", "empty_rows", "n1"):
        csr, dgraph = graphs[name]
        rng = cupy.random.default_rng(8)
        X3 = rng.uniform(-1, 1, (csr.n_rows, HEADS, D), dtype=cupy.float32)
        Y3 = rng.uniform(-1, 1, (csr.n_cols, HEADS, D), dtype=cupy.float32)
        out = poison(cupy.empty((HEADS, csr.nnz), dtype=cupy.float32))
        plan = ops.prepare_native(dgraph, schedule, D)
        for h in range(HEADS):
            plan.launch(X3[:, h, :], Y3[:, h, :], out[h], HEADS * D, HEADS * D, scale=0.5, use_values=False)
        ones = CSRGraph(csr.indptr, csr.indices, np.ones(csr.nnz, np.float32), csr.shape)
        for h in range(HEADS):
            ref = 0.5 * reference("sddmm", ones, (X3[:, h, :].get(), Y3[:, h, :].get()))
            err = rel_error(out[h], ref)
            if not err < TOL:
                failures.append(f"{name} head {h}: rel error {err:.3g}")
    assert not failures, "\n".join(failures)


# ------------------------------------------------------------------ refusals and plan properties

def test_vector_schedules_refuse_misaligned_operands(graphs):
    import cupy

    from autosage_cli import ops

    csr, dgraph = graphs["empty_rows"]
    spmm = Schedule("spmm", "subwarp", lanes=4, vec=4, unroll=4)
    plan = ops.prepare_native(dgraph, spmm, 16)
    out = plan.alloc_out()
    shifted = cupy.zeros(csr.n_cols * 16 + 1, dtype=cupy.float32)[1:].reshape(csr.n_cols, 16)
    with pytest.raises(AutosageError, match="aligned"):
        plan.launch(None, shifted, out, 16, 16)
    odd_ld = cupy.zeros((csr.n_cols, 18), dtype=cupy.float32)[:, :16]
    with pytest.raises(AutosageError, match="aligned|divisible"):
        plan.launch(None, odd_ld, out, 18, 16)
    with pytest.raises(AutosageError, match="float32"):
        plan.launch(None, cupy.zeros((csr.n_cols, 16), dtype=cupy.float64), out, 16, 16)
    sddmm = ops.prepare_native(dgraph, Schedule("sddmm", "edge", lanes=4, vec=4, unroll=2), 16)
    X = cupy.zeros((csr.n_rows, 16), dtype=cupy.float32)
    with pytest.raises(AutosageError, match="aligned"):
        sddmm.launch(X, shifted, sddmm.alloc_out(), 16, 16)


def test_int64_index_graph_is_refused_with_a_reason(graphs):
    from autosage_cli import ops
    from autosage_cli.backends.base import DeviceGraph

    csr, _ = graphs["empty_rows"]
    wide = CSRGraph(csr.indptr.astype(np.int64), csr.indices.astype(np.int64), csr.values, csr.shape)
    for s in (candidates("spmm", 4)[0], candidates("sddmm", 4)[0]):
        with pytest.raises(AutosageError, match="int32"):
            ops.prepare_native(DeviceGraph.from_host(wide), s, 4)


def test_values_fast_path_only_for_all_ones(graphs):
    from autosage_cli import ops

    s = Schedule("spmm", "subwarp", lanes=4, vec=1, unroll=4)
    assert ops.prepare_native(graphs["pattern"][1], s, 4).values_all_ones
    assert not ops.prepare_native(graphs["medium_power_law"][1], s, 4).values_all_ones


def test_split_plans_are_one_launch_and_leave_their_state_clean(graphs):
    import cupy

    from autosage_cli import ops

    atomic = Schedule("spmm", "split", lanes=4, vec=4, split=256, chunk=256, reduce="atomic", unroll=4)
    twophase = Schedule("spmm", "split", lanes=4, vec=4, split=1024, chunk=1024, reduce="twophase", unroll=4)
    light_only = graphs["empty_rows"][1]  # no row above 256
    for s in (atomic, twophase):
        plan = ops.prepare_native(light_only, s, 16)
        assert len(plan.launches) == 1 and plan.n_chunks == 0 and plan.n_heavy == 0
    csr, hubs = graphs["half_in_one_row"]
    (B,) = case("spmm", "half_in_one_row", csr, hubs, 16)[0]
    for s in (atomic, twophase):
        plan = ops.prepare_native(hubs, s, 16)
        assert len(plan.launches) == 1 and plan.n_heavy == 1 and plan.n_chunks == -(-12_000 // s.chunk)
        for _ in range(3):
            plan(B)
        cupy.cuda.get_current_stream().synchronize()
        assert not bool(cupy.any(plan.tickets)), "tickets must be reset by the last chunk"
        if s.reduce == "atomic":
            assert not bool(cupy.any(plan.scratch)), "atomic scratch must be re-zeroed"


def test_twophase_is_bitwise_deterministic(graphs):
    import cupy

    from autosage_cli import ops

    csr, dgraph = graphs["medium_power_law"]
    s = Schedule("spmm", "splitwarp", lanes=4, vec=4, split=2048, chunk=1024, reduce="twophase", unroll=4)
    plan = ops.prepare_native(dgraph, s, 32)
    (B,) = case("spmm", "medium_power_law", csr, dgraph, 32)[0]
    first, second = plan(B), plan(B)
    assert bool(cupy.all(first.view(cupy.uint32) == second.view(cupy.uint32)))


def test_prepare_time_is_recorded(graphs):
    from autosage_cli import ops

    s = Schedule("sddmm", "rowgroup", lanes=4, vec=4, tile=16, chunk=256, unroll=4)
    plan = ops.prepare_native(graphs["medium_power_law"][1], s, 16)
    assert plan.prepare_ms > 0 and plan.backend == "native" and plan.schedule == s.name
