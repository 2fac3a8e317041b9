"""Every attention schedule and every vendor composition against the float64 reference, on shapes
that hurt: rows without edges (leading, inner, trailing), one row of 20,000 edges (split into chunks
by fused_split, a block-per-row softmax in the unfused pipeline), scores that overflow a naive exp
(Q and K scaled x50), A's values as a bias, n = 1 with and without edges, H in {1, 4, 8},
d in {16, 32, 64, 128} and odd d. Outputs are poisoned with NaN before each of two runs.

Tolerance: relative error < 1e-5, except the x50 case: 1e-4. There the fp32 scores themselves
(|s| ~ 1e3, rounded to ~1e-4 absolute) set the error of the float32 inputs' exact softmax; a NumPy
check with fp32 dot products and a float64 softmax already gives up to 1.7e-5 on one row, whichever
kernel runs.

Parameters are ordered by input so that inputs are built once for all the schedules that share them.
"""
from __future__ import annotations

import functools
import zlib

import numpy as np
import pytest

from autosage_cli import ops
from autosage_cli.errors import AutosageError
from autosage_cli.ops import reference
from autosage_cli.graphs.csr import CSRGraph, from_arrays
from autosage_cli.kernels import attention_space as space

pytestmark = pytest.mark.gpu
TOL = 1e-5
TOL_LARGE_SCORES = 1e-4
LONG_ROW = 20_000
VENDOR_NAMES = ("vendor-unfused-alg1", "vendor-unfused-alg2", "vendor-unfused-alg3",
                "vendor-unfused-default")


# ------------------------------------------------------------------ graphs (host, canonical)

def _from_degrees(degrees, n_cols: int, seed: int, index=np.int32) -> CSRGraph:
    rng = np.random.default_rng(seed)
    cols = [np.sort(rng.choice(n_cols, size=int(k), replace=False)) for k in degrees]
    indptr = np.concatenate([[0], np.cumsum(degrees)])
    indices = np.concatenate(cols) if len(cols) else np.empty(0)
    values = rng.uniform(-2.0, 2.0, size=indices.shape[0])
    graph = from_arrays(indptr, indices, values, (len(degrees), n_cols))
    if index is np.int64:  # canonical CSR uses int64 only from 2^31 nonzeros: force it to test
        graph = CSRGraph(graph.indptr.astype(np.int64), graph.indices.astype(np.int64), graph.values,
                         graph.shape)
    return graph


def _mixed_degrees() -> np.ndarray:
    rng = np.random.default_rng(1)
    deg = rng.integers(1, 65, size=257)
    deg[::7] = 0            # inner empty rows, and row 0
    deg[-3:] = 0            # trailing empty rows
    deg[5] = LONG_ROW       # one very long row (split, heavy softmax path)
    deg[9] = 700            # a row above the small split threshold only
    return deg


GRAPHS = {
    "mixed": lambda: _from_degrees(_mixed_degrees(), LONG_ROW + 500, 2),
    "mixed64": lambda: _from_degrees(_mixed_degrees(), LONG_ROW + 500, 2, np.int64),
    "n1": lambda: _from_degrees([33], 40, 3),
    "n1-empty": lambda: _from_degrees([0], 5, 4),
    "mostly-empty": lambda: _from_degrees([0] * 30 + [3] + [0] * 30 + [50, 0], 64, 5),
}


@functools.lru_cache(maxsize=None)
def host_graph(name: str) -> CSRGraph:
    return GRAPHS[name]()


@functools.lru_cache(maxsize=None)
def device_graph(name: str):
    from autosage_cli.backends.base import DeviceGraph

    return DeviceGraph.from_host(host_graph(name))


# ------------------------------------------------------------------ inputs and references

@functools.lru_cache(maxsize=2)
def inputs(graph: str, heads: int, d: int, variant: str):
    """(Q, K, V) on the device, float32 uniform in [-1, 1) (Q and K x50 for variant "large")."""
    import cupy

    g = host_graph(graph)
    rng = np.random.default_rng(zlib.crc32(repr((graph, heads, d, variant)).encode()))
    q = rng.uniform(-1, 1, (g.n_rows, heads, d)).astype(np.float32)
    k = rng.uniform(-1, 1, (g.n_cols, heads, d)).astype(np.float32)
    v = rng.uniform(-1, 1, (g.n_cols, heads, d)).astype(np.float32)
    if variant == "large":
        q, k = q * np.float32(50), k * np.float32(50)
    return tuple(cupy.asarray(x) for x in (q, k, v))


@functools.lru_cache(maxsize=None)
def expected(graph: str, heads: int, d: int, variant: str) -> np.ndarray:
    q, k, v = (x.get() for x in inputs(graph, heads, d, variant))
    return reference("attention", host_graph(graph), (q, k, v), None, attention_bias=variant == "bias")


def check(plan, graph: str, heads: int, d: int, variant: str) -> None:
    """Two poisoned runs; every failure message names the case."""
    import cupy

    from autosage_cli.backends.timing import rel_error

    ref = expected(graph, heads, d, variant)
    tol = TOL_LARGE_SCORES if variant == "large" else TOL
    for attempt in range(2):
        out = cupy.full((host_graph(graph).n_rows, heads, d), cupy.nan, dtype=cupy.float32)
        plan.run(inputs(graph, heads, d, variant), out)
        got = out.get()
        assert np.isfinite(got).all(), f"run {attempt}: {np.isnan(got).sum()} NaN (unwritten?)"
        if not ref.any():
            assert not got.any(), f"run {attempt}: expected zeros"
            continue
        err = rel_error(got, ref)
        assert err < tol, f"run {attempt}: relative error {err:.3e} >= {tol:g}"
        empty = np.diff(host_graph(graph).indptr) == 0
        assert not got[empty].any(), f"run {attempt}: rows without edges are not zero"


# ------------------------------------------------------------------ parameters

BASE_D = (16, 32, 64, 128)
ODD = ((2, 33), (1, 100), (2, 48), (2, 8), (1, 4), (3, 24), (1, 200))
EXTRA = (("n1", "plain"), ("n1-empty", "plain"), ("mostly-empty", "plain"), ("mixed", "large"),
         ("mixed", "bias"))


def _first_supported(s, pairs):
    return next(((h, d) for h, d in pairs if s.supports(d, h) is None), None)


def _cases(supports):
    """(graph, H, d, variant) tuples ordered by input, for a `supports(d, heads)` predicate."""
    out = [("mixed", h, d, "plain") for d in BASE_D for h in (1, 4, 8)]
    out += [("mixed", h, d, "plain") for h, d in ODD]
    pairs = [(h, d) for d in BASE_D + (33, 100, 8, 4) for h in (2, 4, 8)]
    for graph, variant in EXTRA:
        out += [(graph, h, d, variant) for h, d in pairs]
    return [c for c in out if supports(c[2], c[1])]


def _schedule_params():
    params = []
    for case in _cases(lambda d, h: True):
        for s in space.SCHEDULES:
            if s.supports(case[2], case[1]) is None:
                params.append((s, case))
    # keep the extra cases to the first supported (H, d) of each schedule: enough to hit each path
    seen, kept = set(), []
    for s, (graph, h, d, variant) in params:
        key = (s.name, graph, variant)
        if (graph, variant) != ("mixed", "plain"):
            if key in seen:
                continue
            seen.add(key)
        kept.append((s, (graph, h, d, variant)))
    kept.sort(key=lambda p: p[1])
    return [pytest.param(s, case, id=f"{s.name}-{'-'.join(map(str, case))}") for s, case in kept]


def _vendor_params():
    cases = [("mixed", 1, 64, "plain"), ("mixed", 8, 64, "plain"), ("mixed", 4, 16, "plain"),
             ("mixed", 2, 33, "plain"), ("mixed", 4, 128, "plain"), ("n1", 2, 16, "plain"),
             ("n1-empty", 2, 16, "plain"), ("mostly-empty", 2, 32, "plain"),
             ("mixed", 4, 64, "large"), ("mixed", 2, 32, "bias")]
    return [pytest.param(name, case, id=f"{name}-{'-'.join(map(str, case))}")
            for case in sorted(cases) for name in VENDOR_NAMES]


# ------------------------------------------------------------------ tests

@pytest.mark.parametrize("schedule,case", _schedule_params())
def test_native_schedule(schedule, case):
    from autosage_cli.backends.native_attention import prepare

    graph, heads, d, variant = case
    plan = prepare(device_graph(graph), schedule, d, heads, use_values=variant == "bias")
    assert plan.op == "attention" and plan.schedule == schedule.name and plan.prepare_ms >= 0
    check(plan, graph, heads, d, variant)


@pytest.mark.parametrize("schedule", [s for s in space.SCHEDULES if s.family != "unfused"
                                      and s.vec == 4 and s.tile == 64],
                         ids=lambda s: s.name)
def test_int64_indices(schedule):
    from autosage_cli.backends.native_attention import prepare

    heads = 4 if schedule.supports(64, 4) is None else 8
    plan = prepare(device_graph("mixed64"), schedule, 64, heads)
    check(plan, "mixed64", heads, 64, "plain")


@pytest.mark.parametrize("name,case", _vendor_params())
def test_vendor_composition(name, case):
    from autosage_cli.backends.attention_vendor import prepare

    graph, heads, d, variant = case
    plan = prepare(device_graph(graph), name, d, heads, use_values=variant == "bias")
    assert plan.backend == name and plan.provider
    check(plan, graph, heads, d, variant)


def test_vendor_entry_points():
    from autosage_cli import ops

    assert ops.vendor_names("attention") == list(VENDOR_NAMES)
    plan = ops.prepare_vendor(device_graph("n1"), "vendor-unfused-alg2", 16, heads=2)
    check(plan, "n1", 2, 16, "plain")


def test_native_entry_point_and_plan_call():
    """backends.native dispatches op "attention" here; Plan.__call__ allocates and runs."""
    from autosage_cli import ops

    s = next(x for x in space.SCHEDULES if x.family == "fused_split" and x.supports(64, 8) is None)
    plan = ops.prepare_native(device_graph("mixed"), s, 64, heads=8)
    out = plan(*inputs("mixed", 8, 64, "plain"))
    from autosage_cli.backends.timing import rel_error

    assert rel_error(out, expected("mixed", 8, 64, "plain")) < TOL


def test_bad_inputs_are_refused():
    import cupy

    from autosage_cli.backends.native_attention import prepare

    s = next(x for x in space.SCHEDULES if x.family == "fused" and x.supports(64, 1) is None)
    plan = prepare(device_graph("n1"), s, 64, 1)
    q, k, v = inputs("n1", 1, 64, "plain")
    out = cupy.empty((1, 1, 64), dtype=cupy.float32)
    with pytest.raises(ValueError):
        plan.run((q, k[:, :, :32], v), out)
    with pytest.raises(ValueError):
        plan.run((q.astype(cupy.float64), k, v), out)
    with pytest.raises(AutosageError, match="cannot run K=66"):   # asked once, in ops.prepare_native
        ops.prepare_native(device_graph("n1"), s, 66, 1)
