"""autosage_cli.torch on a CUDA device: the fp32 kernels (tuned, or the vendor default) against the
float64 CPU reference, values and gradients; layers against PyG on the same device; torch's
streams, no_grad / inference_mode, graphs without edges. Graphs have empty rows, hub rows and
duplicate edges; widths are not multiples of 4."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from torch_helpers import assert_parameter_grads_match, random_edge_index  # noqa: E402

pytestmark = pytest.mark.gpu
N = 700
TOL = 2e-5   # ||ours - ref|| / ||ref|| in fp32 against float64


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")


@pytest.fixture(params=["tuned", "vendor"])
def options(request, tmp_path):
    """tuned: the scheduler decides (fresh cache file); vendor: tune=False, the vendor default."""
    return {"cache": str(tmp_path / "decisions.json"), "tune": request.param == "tuned"}


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _pair(*shape, seed):
    """The same values as (CUDA float32 leaf, CPU float64 leaf)."""
    x = torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1
    return x.cuda().requires_grad_(), x.double().requires_grad_()


def _graphs(edges, n, options, weight=None):
    return (at.Graph.from_edge_index(edges.cuda(), n, None if weight is None else weight.cuda(), **options),
            at.Graph.from_edge_index(edges, n, weight))


def _backward(out, leaves, seed=3):
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out)
    return torch.autograd.grad(out, leaves, up)


@pytest.mark.parametrize("k", [1, 3, 5, 33, 130])
def test_spmm_forward_and_backward(options, k):
    edges = random_edge_index(N, seed=k)
    w_gpu, w_ref = _pair(edges.shape[1], seed=1)
    g_gpu, g_ref = _graphs(edges, N, options)
    B_gpu, B_ref = _pair(N, k, seed=2)
    out, ref = at.spmm(g_gpu, B_gpu, w_gpu), at.spmm(g_ref, B_ref, w_ref)
    assert out.is_cuda and out.dtype == torch.float32 and _rel(out, ref) < TOL
    for a, b in zip(_backward(out, [B_gpu, w_gpu]), _backward(ref, [B_ref, w_ref])):
        assert _rel(a, b) < TOL


@pytest.mark.parametrize("k", [3, 64])
def test_spmm_with_graph_weights(options, k):
    edges = random_edge_index(N, seed=7)
    weight = torch.rand(edges.shape[1]) + 0.5
    g_gpu, g_ref = _graphs(edges, N, options, weight)
    B_gpu, B_ref = _pair(N, k, seed=2)
    out, ref = at.spmm(g_gpu, B_gpu), at.spmm(g_ref, B_ref)
    assert _rel(out, ref) < TOL
    assert _rel(_backward(out, [B_gpu])[0], _backward(ref, [B_ref])[0]) < TOL


@pytest.mark.parametrize("k", [1, 5, 32, 67])
def test_sddmm_forward_and_backward(options, k):
    edges = random_edge_index(N, seed=11)
    g_gpu, g_ref = _graphs(edges, N, options)
    X_gpu, X_ref = _pair(N, k, seed=4)
    Y_gpu, Y_ref = _pair(N, k, seed=5)
    out, ref = at.sddmm(g_gpu, X_gpu, Y_gpu), at.sddmm(g_ref, X_ref, Y_ref)
    assert out.shape == (edges.shape[1],) and _rel(out, ref) < TOL
    for a, b in zip(_backward(out, [X_gpu, Y_gpu]), _backward(ref, [X_ref, Y_ref])):
        assert _rel(a, b) < TOL


@pytest.mark.parametrize("heads, d", [(1, 5), (1, 64), (4, 8), (8, 33)])
def test_attention_forward_and_backward(options, heads, d):
    edges = random_edge_index(N, seed=13, duplicates=False)
    g_gpu, g_ref = _graphs(edges, N, options)
    leaves = [_pair(N, heads, d, seed=s) for s in (6, 7, 8)]
    gpu, ref = [p[0] for p in leaves], [p[1] for p in leaves]
    out, expected = at.attention(g_gpu, *gpu), at.attention(g_ref, *ref)
    assert _rel(out, expected) < TOL
    assert out[0].abs().sum() == 0  # node 0 receives no edge
    for a, b in zip(_backward(out, gpu), _backward(expected, ref)):
        assert _rel(a, b) < 5 * TOL


def test_graph_without_edges():
    g = at.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.long, device="cuda"), 9)
    B = torch.randn(9, 3, device="cuda", requires_grad=True)
    out = at.spmm(g, B)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert torch.equal(B.grad, torch.zeros_like(B))
    assert at.sddmm(g, B, B).shape == (0,)


def test_runs_on_torch_current_stream_and_in_inference_modes(tmp_path):
    edges = random_edge_index(N, seed=17).cuda()
    g = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    B = torch.randn(N, 16, device="cuda")
    expected = at.spmm(g, B)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = at.spmm(g, B * 1.0)
    torch.cuda.current_stream().wait_stream(side)
    assert torch.allclose(on_side, expected)
    with torch.no_grad():
        assert torch.allclose(at.spmm(g, B.requires_grad_()), expected)
    with torch.inference_mode():
        assert torch.allclose(at.spmm(g, B.detach()), expected)


def test_cupys_object_for_a_torch_stream_is_that_stream_and_dropping_it_leaves_the_stream_alive():
    """The CuPy object our ops run under wraps torch's own handle (no deprecated ExternalStream
    where CuPy has the stream protocol), and a wrapper made and dropped does not destroy the
    stream torch still owns: work on it afterwards runs and synchronises."""
    import gc
    import warnings

    from autosage_cli.torch import cuda as bridge

    side = torch.cuda.Stream()
    with torch.cuda.stream(side), warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        wrapped = bridge._stream(torch.device("cuda"))
        # device -1: CuPy's "the device current where it is used" (CuPy 14.2's from_external)
        assert wrapped.ptr == side.cuda_stream and wrapped.device_id in (-1, torch.cuda.current_device())
        dropped = bridge._wrap_stream(side.cuda_stream, torch.cuda.current_device())
    assert dropped.ptr == side.cuda_stream
    del dropped
    gc.collect()
    with torch.cuda.stream(side):
        y = torch.arange(1000, device="cuda", dtype=torch.float32) * 2
    side.synchronize()
    assert float(y.sum()) == 999000.0


def test_misaligned_and_strided_inputs(tmp_path):
    edges = random_edge_index(N, seed=19).cuda()
    g = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    big = torch.randn(N * 8 + 1, device="cuda")
    B = big[1:].view(N, 8)          # 4-byte offset: not 16-byte aligned
    C = torch.randn(8, N, device="cuda").t()  # not contiguous
    reference = at.Graph.from_edge_index(edges.cpu(), N)
    for X in (B, C):
        assert _rel(at.spmm(g, X), at.spmm(reference, X.double().cpu())) < TOL


def _pyg():
    return pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")


@pytest.mark.parametrize("name, args, kwargs", [
    ("GCNConv", (37, 19), {}),
    ("SAGEConv", (37, 19), {}),
    ("SAGEConv", (19, 37), {"normalize": True}),
    ("TransformerConv", (37, 9), {"heads": 4}),
    ("TransformerConv", (37, 16), {"heads": 2, "concat": False, "beta": True}),
])
def test_layers_match_pyg_on_cuda(tmp_path, name, args, kwargs):
    pyg = _pyg()
    edges = random_edge_index(N, seed=23, duplicates=name != "TransformerConv").cuda()
    g = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    theirs = getattr(pyg, name)(*args, **kwargs).cuda()
    ours = getattr(at, name)(*args, **kwargs).cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(N, args[0], device="cuda")
    a, b = ours(x, g), theirs(x, edges)
    assert _rel(a, b) < TOL
    up = torch.randn_like(a)
    (a * up).sum().backward()
    (b * up).sum().backward()
    assert_parameter_grads_match(ours, theirs, 5 * TOL)
