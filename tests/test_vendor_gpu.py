"""Vendor backends and framework baselines against the float64 reference, on shapes that hurt.

Every case is its own parametrized test (a failure never hides the next one); outputs are poisoned
with NaN before each run so an unwritten element fails; relative error must be < 1e-5.
"""
from __future__ import annotations

import importlib.util
import zlib

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli.ops import reference
from autosage_cli.backends.timing import poison, rel_error
from autosage_cli.graphs.csr import CSRGraph, canonical_csr

pytestmark = pytest.mark.gpu

TOL = 1e-5
WIDTHS = [1, 3, 4, 5, 32, 33, 64, 127, 256]
SPMM_NAMES = ["cusparse-alg1", "cusparse-alg2", "cusparse-alg3", "cusparse-default"]
HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_PYG = importlib.util.find_spec("torch_geometric") is not None


def _graph(kind: str) -> CSRGraph:
    rng = np.random.default_rng(zlib.crc32(kind.encode()))
    if kind == "n1":
        return canonical_csr(sp.csr_matrix(np.array([[0.0, 1.5, 0.0, -2.0, 0.5]])))
    if kind == "nnz0":
        return canonical_csr(sp.csr_matrix((7, 5), dtype=np.float32))
    if kind == "empty-rows":
        m = sp.random(40, 30, density=0.15, random_state=1, format="lil")
        m[::3, :] = 0
        return canonical_csr(m.tocsr())
    if kind == "half-in-one-row":  # one row holds half of all nonzeros
        n = 64
        rows = np.concatenate([np.full(n, 5), rng.integers(0, n, n)])
        cols = np.concatenate([np.arange(n), rng.integers(0, n, n)])
        return canonical_csr(sp.coo_matrix((rng.uniform(0.5, 1.5, 2 * n), (rows, cols)), shape=(n, n)))
    if kind == "rect-ones":  # rectangular, all values 1 (the SDDMM no-multiply path)
        m = sp.random(50, 70, density=0.1, random_state=2, format="csr")
        m.data[:] = 1.0
        return canonical_csr(m)
    if kind == "int64":  # 64-bit indices (CUSPARSE_INDEX_64I), built directly
        g = canonical_csr(sp.random(33, 33, density=0.2, random_state=3, format="csr"))
        return CSRGraph(g.indptr.astype(np.int64), g.indices.astype(np.int64), g.values, g.shape)
    raise ValueError(kind)


GRAPHS = ["n1", "nnz0", "empty-rows", "half-in-one-row", "rect-ones", "int64"]
_DEVICE_GRAPHS: dict = {}


def device_graph(kind: str):
    from autosage_cli.backends.base import DeviceGraph

    if kind not in _DEVICE_GRAPHS:
        _DEVICE_GRAPHS[kind] = DeviceGraph.from_host(_graph(kind))
    return _DEVICE_GRAPHS[kind]


def _run_poisoned(plan, inputs):
    import cupy

    out = poison(plan.alloc_out())
    plan.run(inputs, out)
    cupy.cuda.get_current_stream().synchronize()
    return out


# ------------------------------------------------------------------------------------------ SpMM
@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("kind", GRAPHS)
@pytest.mark.parametrize("name", SPMM_NAMES)
def test_cusparse_spmm_matches_reference(name, kind, k):
    from autosage_cli.ops import make_inputs
    from autosage_cli.ops import prepare_vendor

    dg = device_graph(kind)
    plan = prepare_vendor(dg, name, k)
    assert (plan.backend, plan.op, plan.k) == (name, "spmm", k)
    assert plan.prepare_ms >= 0
    inputs = make_inputs("spmm", dg, k, seed=k)
    out = _run_poisoned(plan, inputs)
    err = rel_error(out, reference("spmm", dg.host, inputs))
    assert err < TOL, f"{name} on {kind} K={k}: rel error {err:.3e}"


@pytest.mark.parametrize("name", SPMM_NAMES)
@pytest.mark.parametrize("heads,d", [(1, 16), (4, 8), (3, 5)])
def test_cusparse_spmm_strided_head_views_and_given_values(name, heads, d):
    """Per-head views of n x H x d tensors (ld = H*d, offset h*d) with caller-given values."""
    import cupy

    from autosage_cli.backends.cusparse import CusparseSpMM

    dg = device_graph("half-in-one-row")
    g = dg.host
    rng = cupy.random.default_rng(5)
    B = rng.uniform(-1, 1, (g.n_cols, heads, d), dtype=cupy.float32)
    C = poison(cupy.empty((g.n_rows, heads, d), dtype=cupy.float32))
    probs = rng.uniform(0, 1, (heads, g.nnz), dtype=cupy.float32)
    spmm = CusparseSpMM(dg, name, d, ldb=heads * d, ldc=heads * d)
    for h in range(heads):
        spmm.launch(B[:, h, :], C[:, h, :], values=probs[h])
    spmm.launch(B[:, 0, :], C[:, 0, :], values=probs[0])  # re-pointing back must work too
    cupy.cuda.get_current_stream().synchronize()
    for h in range(heads):
        a = sp.csr_matrix((probs[h].get().astype(np.float64), g.indices, g.indptr), shape=g.shape)
        err = rel_error(C[:, h, :], a @ B[:, h, :].get().astype(np.float64))
        assert err < TOL, f"{name} head {h}: rel error {err:.3e}"
    spmm.close()
    spmm.close()  # idempotent


def test_cusparse_spmm_nnz0_writes_zeros_without_cusparse():
    import cupy

    from autosage_cli.backends.cusparse import CusparseSpMM

    spmm = CusparseSpMM(device_graph("nnz0"), "cusparse-alg2", 4)
    assert spmm.workspace_bytes == 0 and spmm._sp is None
    C = poison(cupy.empty((7, 4), dtype=cupy.float32))
    spmm.launch(cupy.ones((5, 4), dtype=cupy.float32), C)
    assert bool((C == 0).all())


def test_cusparse_spmm_rejects_wrong_views():
    import cupy

    from autosage_cli.backends.cusparse import CusparseSpMM

    dg = device_graph("empty-rows")
    spmm = CusparseSpMM(dg, "cusparse-alg1", 8)
    good_c = cupy.empty((dg.n_rows, 8), dtype=cupy.float32)
    with pytest.raises(ValueError, match="B: expected"):
        spmm.launch(cupy.empty((dg.n_cols, 9), dtype=cupy.float32), good_c)
    with pytest.raises(ValueError, match="ld=8"):
        spmm.launch(cupy.empty((dg.n_cols, 16), dtype=cupy.float32)[:, :8], good_c)
    with pytest.raises(ValueError, match="values"):
        spmm.launch(cupy.empty((dg.n_cols, 8), dtype=cupy.float32), good_c,
                    values=cupy.empty(dg.nnz + 1, dtype=cupy.float32))


# ----------------------------------------------------------------------------------------- SDDMM
@pytest.mark.parametrize("k", WIDTHS)
@pytest.mark.parametrize("kind", GRAPHS)
@pytest.mark.parametrize("name", ["cusparse-sddmm", "torch-sampled-addmm", "gather-dot"])
def test_vendor_sddmm_matches_reference(name, kind, k):
    from autosage_cli.ops import make_inputs
    from autosage_cli.backends.sddmm_vendor import VENDOR_PROVIDERS
    from autosage_cli.ops import prepare_vendor, vendor_names

    if name not in vendor_names("sddmm"):
        pytest.skip(f"{name}: its library (nvmath-python or torch) is not installed")
    dg = device_graph(kind)
    plan = prepare_vendor(dg, name, k)   # each entry runs its own provider, never another's
    assert plan.backend == name and plan.provider.startswith(VENDOR_PROVIDERS[name])
    inputs = make_inputs("sddmm", dg, k, seed=k)
    out = _run_poisoned(plan, inputs)
    assert out.shape == (dg.nnz,)
    err = rel_error(out, reference("sddmm", dg.host, inputs))
    assert err < TOL, f"{plan.provider} on {kind} K={k}: rel error {err:.3e}"


def test_sddmm_values_multiply_only_when_needed():
    from autosage_cli.ops import prepare_vendor

    assert prepare_vendor(device_graph("rect-ones"), "gather-dot", 8).scale_by_values is False
    assert prepare_vendor(device_graph("empty-rows"), "gather-dot", 8).scale_by_values is True


@pytest.mark.parametrize("provider", ["torch.sparse.sampled_addmm", "cupy gather-dot"])
@pytest.mark.parametrize("heads,d", [(1, 32), (4, 16), (2, 5)])
def test_vendor_sddmm_strided_head_views(provider, heads, d):
    """Unscaled per-head scores from views of n x H x d tensors into rows of an H x nnz array."""
    import cupy

    from autosage_cli.backends.sddmm_vendor import VendorSDDMM

    if provider.startswith("torch") and not HAVE_TORCH:
        pytest.skip("torch is not installed")
    dg = device_graph("half-in-one-row")
    g = dg.host
    rng = cupy.random.default_rng(9)
    Q = rng.uniform(-1, 1, (g.n_rows, heads, d), dtype=cupy.float32)
    K = rng.uniform(-1, 1, (g.n_cols, heads, d), dtype=cupy.float32)
    S = poison(cupy.empty((heads, g.nnz), dtype=cupy.float32))
    sddmm = VendorSDDMM(dg, d, ldx=heads * d, ldy=heads * d, providers=(provider,), launch_sets=heads)
    assert sddmm.provider.startswith(provider), sddmm.fallback_reasons
    for h in range(heads):
        sddmm.launch(Q[:, h, :], K[:, h, :], S[h])
    cupy.cuda.get_current_stream().synchronize()
    ones = CSRGraph(g.indptr, g.indices, np.ones_like(g.values), g.shape)
    for h in range(heads):
        want = reference("sddmm", ones, (Q[:, h, :], K[:, h, :]))
        err = rel_error(S[h], want)
        assert err < TOL, f"{sddmm.provider} head {h}: rel error {err:.3e}"


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_sddmm_on_a_non_default_stream():
    """torch must run on CuPy's current stream (ExternalStream), so results and events agree."""
    import cupy

    from autosage_cli.ops import make_inputs
    from autosage_cli.backends.timing import time_plan
    from autosage_cli.ops import prepare_vendor

    dg = device_graph("empty-rows")
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        plan = prepare_vendor(dg, "cusparse-sddmm", 32)
        inputs = make_inputs("sddmm", dg, 32, seed=3)
        out = poison(plan.alloc_out())
        plan.run(inputs, out)
        stream.synchronize()
        stats = time_plan(plan, inputs, out, repeat=5, warmup=2)
    assert rel_error(out, reference("sddmm", dg.host, inputs)) < TOL
    assert stats.median_ms > 0


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_work_goes_to_cupys_null_stream_whatever_stream_torch_has_current():
    """CuPy on its null stream and torch on a side stream of its own (a caller's, or one a failed
    capture left current): the bridge puts torch's work on the legacy default stream, where CuPy
    fills and reads the output. torch reads ExternalStream(0) as a new pool stream, unordered with
    it: the bench read torch's SDDMM output as zeros so."""
    import cupy
    import torch

    from autosage_cli.backends.sddmm_providers import TorchBridge, TorchSampledAddmm

    side = torch.cuda.Stream()
    bridge = TorchBridge()
    with torch.cuda.stream(side):
        assert cupy.cuda.get_current_stream().ptr == 0 and torch.cuda.current_stream().cuda_stream != 0
        with bridge.stream():
            assert torch.cuda.current_stream().cuda_stream == 0
        dg = device_graph("empty-rows")
        provider = TorchSampledAddmm(dg, 32, 1)
        X = cupy.random.rand(dg.n_rows, 32, dtype=cupy.float32)
        Y = cupy.random.rand(dg.n_cols, 32, dtype=cupy.float32)
        out = cupy.zeros(dg.nnz, dtype=cupy.float32)
        provider.launch(X, Y, out)
        got = out.get()         # CuPy's null stream: ordered after torch's launch
    ones = CSRGraph(dg.host.indptr, dg.host.indices, np.ones_like(dg.host.values), dg.host.shape)
    assert rel_error(got, reference("sddmm", ones, (X, Y))) < TOL
    assert torch.cuda.current_stream() == torch.cuda.default_stream()


# -------------------------------------------------------------------------------------- baselines
@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
@pytest.mark.parametrize("k", [1, 5, 64])
@pytest.mark.parametrize("kind", ["nnz0", "empty-rows", "half-in-one-row", "int64"])
def test_torch_spmm_baseline(kind, k):
    from autosage_cli.ops import make_inputs
    from autosage_cli.backends.baselines import prepare_baselines

    dg = device_graph(kind)
    skipped: list = []
    plans = prepare_baselines(dg, ("torch",), k, skipped=skipped)
    assert [p.backend for p in plans] == ["torch"], skipped
    inputs = make_inputs("spmm", dg, k, seed=1)
    out = _run_poisoned(plans[0], inputs)
    err = rel_error(out, reference("spmm", dg.host, inputs))
    assert err < TOL, f"torch ({plans[0].provider}) on {kind} K={k}: rel error {err:.3e}"


@pytest.mark.skipif(not HAVE_PYG, reason="torch_geometric is not installed")
@pytest.mark.parametrize("heads,d", [(1, 16), (4, 8)])
@pytest.mark.parametrize("kind", ["n1", "nnz0", "empty-rows", "half-in-one-row"])
def test_pyg_attention_baseline(kind, heads, d):
    from autosage_cli.ops import make_inputs
    from autosage_cli.backends.baselines import prepare_baselines

    dg = device_graph(kind)
    skipped: list = []
    plans = prepare_baselines(dg, ("pyg",), d, heads=heads, skipped=skipped)
    assert [p.backend for p in plans] == ["pyg"], skipped
    inputs = make_inputs("attention", dg, d, heads, seed=2)
    out = _run_poisoned(plans[0], inputs)
    err = rel_error(out, reference("attention", dg.host, inputs))
    assert err < TOL, f"pyg on {kind} H={heads} d={d}: rel error {err:.3e}"


@pytest.mark.skipif(not HAVE_PYG, reason="torch_geometric is not installed")
def test_pyg_baseline_skipped_with_reason_when_memory_would_not_fit(monkeypatch):
    from autosage_cli.backends import baselines

    monkeypatch.setattr(baselines, "_free_device_bytes", lambda: 1000)
    skipped: list = []
    assert baselines.prepare_baselines(device_graph("empty-rows"), ("pyg",), 64, heads=8,
                                       skipped=skipped) == []
    assert skipped and skipped[0][0] == "pyg" and "would need" in skipped[0][1]


def test_time_plan_on_vendor_plan():
    from autosage_cli.ops import make_inputs
    from autosage_cli.backends.timing import time_plan
    from autosage_cli.ops import prepare_vendor

    dg = device_graph("half-in-one-row")
    plan = prepare_vendor(dg, "cusparse-alg2", 32)
    inputs = make_inputs("spmm", dg, 32)
    stats = time_plan(plan, inputs, plan.alloc_out(), repeat=10, warmup=2, flush_l2=True)
    assert stats.repeats == 10 and 0 < stats.p20_ms <= stats.median_ms <= stats.p80_ms < 100
