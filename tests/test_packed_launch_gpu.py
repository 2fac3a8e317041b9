"""The torch path's packed launches on the device: for one schedule of every native SpMM launch
layout (rows, split, persistent, stream) and the native SDDMM, the packed launch (what the torch
ops run) equals the plan's own CuPy launch and the float64 reference, with and without per-call
values; on a graph with empty rows and hub rows."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.kernels.schedule import all_schedules  # noqa: E402
from autosage_cli.torch import cuda as torch_cuda  # noqa: E402
from torch_helpers import random_edge_index  # noqa: E402

pytestmark = pytest.mark.gpu
N, K = 900, 16


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")


def _first_of_each_family(op: str) -> list[tuple[str, int]]:
    """(schedule, width): the first schedule of each family, at the first of 16, 4, 1 it runs."""
    seen: dict = {}
    for k in (16, 4, 1):
        for s in all_schedules():
            if s.op == op and s.family not in seen and s.supports(k, 1, "float32") is None:
                seen[s.family] = (s.name, k)
    return sorted(seen.values())


def _rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.mark.parametrize("schedule, k", _first_of_each_family("spmm"))
def test_packed_spmm_equals_the_cupy_launch(tmp_path, schedule, k):
    edges = random_edge_index(N, seed=23, duplicates=False)   # canonical values = the user's
    g = at.Graph.from_edge_index(edges.cuda(), N, cache=str(tmp_path / "d.json"), schedules={"spmm": schedule})
    ref = at.Graph.from_edge_index(edges, N)
    B = torch.randn(N, k, device="cuda")
    values = torch.rand(g.nnz, device="cuda")
    for vals in (None, values):
        packed_out = torch_cuda.spmm(g, vals, B)
        plan = torch_cuda.plan(g, "spmm", k, B.device, weighted=True)
        assert plan.schedule == schedule and plan.packed(vals is not None) is not None
        cupy_out = torch.empty_like(packed_out)
        with torch_cuda._on_torch_stream(B.device):
            if vals is None:
                plan.run((torch_cuda._cupy(B),), torch_cuda._cupy(cupy_out))
            else:
                plan.run_values(torch_cuda._cupy(vals), torch_cuda._cupy(B), torch_cuda._cupy(cupy_out))
        assert torch.allclose(packed_out, cupy_out, rtol=1e-6, atol=1e-6)
        expected = at.spmm(ref, B.double().cpu(), None if vals is None else g.to_user(vals).double().cpu())
        assert _rel(packed_out, expected) < 2e-5


@pytest.mark.parametrize("schedule, k", _first_of_each_family("sddmm"))
def test_packed_sddmm_equals_the_reference(tmp_path, schedule, k):
    edges = random_edge_index(N, seed=29)
    g = at.Graph.from_edge_index(edges.cuda(), N, cache=str(tmp_path / "d.json"), schedules={"sddmm": schedule})
    ref = at.Graph.from_edge_index(edges, N)
    X, Y = torch.randn(N, k, device="cuda"), torch.randn(N, k, device="cuda")
    out = at.sddmm(g, X, Y)
    assert torch_cuda.plan(g, "sddmm", k, X.device).packed() is not None
    assert _rel(out, at.sddmm(ref, X.double().cpu(), Y.double().cpu())) < 2e-5


def test_packed_launches_follow_torch_current_stream_and_capture(tmp_path):
    edges = random_edge_index(N, seed=31).cuda()
    g = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    B = torch.randn(N, K, device="cuda")
    expected = at.spmm(g, B)
    static_B, graph = B.clone(), torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch_cuda.capturable_plans():
        at.spmm(g, static_B)                       # the capturable plan exists before capture
    torch.cuda.current_stream().wait_stream(side)
    with torch_cuda.capturable_plans(), torch.cuda.graph(graph):
        static_out = at.spmm(g, static_B)
    static_B.copy_(B * 2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(static_out, expected * 2, rtol=1e-5, atol=1e-5)


def test_a_thread_whose_first_cuda_call_is_a_packed_launch_runs_it(tmp_path):
    # A new thread has no current CUDA context until its first runtime call, and the packed path
    # launches through the driver: autograd's device thread meets this when the first kernel of a
    # backward is ours (a loss's sum has a backward without kernels). Here a plain thread's first
    # CUDA calls are our launches (plans, inputs and cached output blocks made before it starts).
    import threading

    edges = random_edge_index(N, seed=37).cuda()
    g = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    B = torch.randn(N, K, device="cuda")
    X, Y = torch.randn(N, K, device="cuda"), torch.randn(N, K, device="cuda")
    expected = (at.spmm(g, B), at.sddmm(g, X, Y))
    spare = (at.spmm(g, B), at.sddmm(g, X, Y))
    del spare    # their blocks cached: the thread's outputs need no cudaMalloc (a runtime call)
    torch.cuda.synchronize()
    got: dict = {}

    def first_calls():
        from cupy_backends.cuda.api import driver

        try:
            got["context before"] = driver.ctxGetCurrent()
            got["out"] = (at.spmm(g, B), at.sddmm(g, X, Y))
            torch.cuda.synchronize()
        except BaseException as exc:   # reported on the test's thread
            got["error"] = exc

    thread = threading.Thread(target=first_calls)
    thread.start()
    thread.join()
    assert got["context before"] == 0      # the case: no context yet on the thread
    assert "error" not in got, got.get("error")
    for a, b in zip(got["out"], expected):
        assert torch.equal(a, b)
