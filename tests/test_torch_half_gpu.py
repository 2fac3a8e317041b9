"""float16 and bfloat16 on a CUDA device through the Python API and autosage_cli.torch: the API takes
torch half tensors (bfloat16 through the data pointer), CuPy float16 and uint16 bit patterns with
dtype="bfloat16"; the autograd ops' outputs and gradients are in the input type and match float64
from the same rounded inputs; the layers are as accurate as PyG's run in the same type on the same
device (tests/test_torch_half.py states the bound); autocast. Tuned with a fresh decision cache."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli import api, dtypes  # noqa: E402
from autosage_cli.backends.timing import rel_error  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.ops import case_tolerance, reference  # noqa: E402
from test_torch_half import LAYERS, LAYER_ROUNDINGS, PYG_FACTOR  # noqa: E402
from torch_helpers import layer_errors, random_edge_index, rel_err  # noqa: E402
from test_api_gpu import graph  # noqa: E402,F401  (the fixture: a long row, empty rows)

pytestmark = pytest.mark.gpu
N = 700
HALF = {"bfloat16": torch.bfloat16, "float16": torch.float16}
# a tuned decision may be a vendor, held to the vendors' slack in the 2-byte types
SLACK = dtypes.VENDOR_SLACK_2BYTE


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")


def _u(name: str) -> float:
    return dtypes.info(name).unit_roundoff


def _bound(op: str, graph, k: int, name: str) -> float:
    return SLACK * case_tolerance(op, name, k, int(graph.row_degrees().max(initial=0)))


def _torch_inputs(shapes, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.rand(*s, generator=gen) * 2 - 1).to(dtype).cuda() for s in shapes]


def _host_bits(t: torch.Tensor, name: str):
    """The stored host array of a half tensor (bfloat16: its uint16 bit patterns), for the reference."""
    host = t.detach().cpu()
    return host.view(torch.int16).numpy().view(np.uint16) if name == "bfloat16" else host.numpy()


# ------------------------------------------------------------------------------------ the API
@pytest.mark.parametrize("name", list(HALF))
@pytest.mark.parametrize("op,shapes", [
    ("spmm", lambda g: [(g.n_cols, 24)]),
    ("sddmm", lambda g: [(g.n_rows, 24), (g.n_cols, 24)]),
    ("attention", lambda g: [(g.n_rows, 2, 32), (g.n_cols, 2, 32), (g.n_cols, 2, 32)]),
])
def test_api_takes_torch_half_tensors(graph, tmp_path, name, op, shapes):
    inputs = _torch_inputs(shapes(graph), HALF[name])
    if name == "bfloat16":   # read through its data pointer: a tensor that requires grad is fine
        inputs[0].requires_grad_()
    out = getattr(api, op)(graph, *inputs, cache=str(tmp_path / "d.json"))
    assert str(out.dtype) == dtypes.storage_dtype(name)
    ref = reference(op, graph, [_host_bits(x, name) for x in inputs], dtype=name)
    k = inputs[0].shape[-1]
    assert rel_error(out, ref) <= _bound(op, graph, k, name)


@pytest.mark.parametrize("name", list(HALF))
def test_api_takes_cupy_half_arrays(graph, tmp_path, name):
    import cupy

    B = _torch_inputs([(graph.n_cols, 16)], HALF[name])[0]
    bits = _host_bits(B, name)
    arr = cupy.asarray(bits)
    declared = "bfloat16" if name == "bfloat16" else None
    out = api.spmm(graph, arr, cache=str(tmp_path / "d.json"), dtype=declared)
    assert rel_error(out, reference("spmm", graph, [bits], dtype=name)) <= _bound("spmm", graph, 16, name)
    if name == "bfloat16":
        with pytest.raises(AutosageError, match='only with dtype="bfloat16"'):
            api.spmm(graph, arr, cache=str(tmp_path / "d.json"))
    # the bfloat16 result re-read by torch without a copy
    as_torch = torch.from_dlpack(out)
    if name == "bfloat16":
        as_torch = as_torch.view(torch.bfloat16)
    assert as_torch.dtype == HALF[name] and as_torch.shape == (graph.n_rows, 16)


def test_api_refuses_mixed_half_types(graph):
    shapes = [(graph.n_rows, 1, 8), (graph.n_cols, 1, 8), (graph.n_cols, 1, 8)]
    Q, K, V = _torch_inputs(shapes, torch.bfloat16)
    with pytest.raises(AutosageError, match="K: dtype float16 differs from Q's bfloat16"):
        api.attention(graph, Q, K.half(), V)


# ------------------------------------------------------------------------------------ torch ops
def _op_pair(op, edges, shapes, dtype, options):
    """(outputs, grads) of `op` on CUDA in `dtype` and on the CPU in float64 from the same rounded inputs."""
    results = []
    gen = torch.Generator().manual_seed(5)
    base = [(torch.rand(*s, generator=gen) * 3 - 1.5).to(dtype) for s in shapes]
    for device, kind, graph in (("cuda", dtype, at.Graph.from_edge_index(edges.cuda(), N, **options)),
                                ("cpu", torch.float64, at.Graph.from_edge_index(edges, N))):
        xs = [b.to(device=device, dtype=kind).requires_grad_() for b in base]
        out = op(graph, *xs)
        upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
        grads = torch.autograd.grad((out.double() * upstream.to(device)).sum(), xs)
        results.append((out, grads))
    return results


@pytest.mark.parametrize("tune", [True, False])
@pytest.mark.parametrize("name", list(HALF))
@pytest.mark.parametrize("op,shapes", [
    (at.spmm, [(N, 33)]),
    (at.sddmm, [(N, 24), (N, 24)]),
    (at.attention, [(N, 4, 16), (N, 4, 16), (N, 4, 16)]),
    (at.additive_attention, [(N, 4), (N, 4), (N, 4, 16)]),
])
def test_ops_in_the_type_against_float64(tmp_path, tune, name, op, shapes):
    edges = random_edge_index(N, seed=11, duplicates=False)
    options = {"cache": str(tmp_path / "d.json"), "tune": tune}
    (out, grads), (ref, ref_grads) = _op_pair(op, edges, shapes, HALF[name], options)
    assert out.is_cuda and out.dtype == HALF[name]
    assert all(g.dtype == HALF[name] for g in grads)
    assert rel_err(out, ref) <= SLACK * 4 * _u(name)
    for g, r in zip(grads, ref_grads):
        assert rel_err(g, r) <= SLACK * 8 * _u(name)


# ------------------------------------------------------------------------------------ layers
@pytest.mark.parametrize("name", list(HALF))
@pytest.mark.parametrize("layer,args,kwargs", LAYERS)
def test_layers_in_the_type_are_as_accurate_as_pyg_in_it_on_cuda(tmp_path, name, layer, args, kwargs):
    pyg_nn = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")
    edges = random_edge_index(N, seed=23, duplicates=False).cuda()
    torch.manual_seed(0)
    theirs = getattr(pyg_nn, layer)(*args, **kwargs).double().cuda()
    ours = getattr(at, layer)(*args, **kwargs).double().cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(N, args[0], dtype=torch.float64, generator=torch.Generator().manual_seed(0)).cuda()
    graph = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    errors = layer_errors(ours, theirs, x, edges, HALF[name], ours_graph=graph)
    for key, err in errors["ours"].items():
        assert err <= max(PYG_FACTOR * errors["pyg"][key], LAYER_ROUNDINGS * _u(name)), (key, err, errors["pyg"][key])


@pytest.mark.parametrize("layer,args,kwargs", LAYERS)
def test_layers_train_under_cuda_autocast(tmp_path, layer, args, kwargs):
    edges = random_edge_index(N, seed=29, duplicates=False).cuda()
    graph = at.Graph.from_edge_index(edges, N, cache=str(tmp_path / "d.json"))
    torch.manual_seed(0)
    model = getattr(at, layer)(*args, **kwargs).cuda()
    x = torch.randn(N, args[0], device="cuda")
    expected = model(x, graph)
    xg = x.clone().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = model(xg, graph)
    got.float().sum().backward()
    assert bool(torch.isfinite(xg.grad).all())
    assert all(p.grad is not None and p.grad.dtype == torch.float32 for p in model.parameters())
    assert rel_err(got, expected) <= 4 * _u("bfloat16")


def _additive_schedules(d: int, heads: int, name: str) -> list[str]:
    """The first fused and the first fused_split schedule that run (d, heads) in the type."""
    from autosage_cli.kernels.schedule import registry

    chosen = {}
    for s in registry("attention"):
        if s.family in ("fused", "fused_split") and s.supports(d, heads, name) is None:
            chosen.setdefault(s.family, s.name)
    return list(chosen.values())


@pytest.mark.parametrize("name", list(HALF))
def test_additive_attention_on_both_fused_families_in_the_type(tmp_path, name):
    edges = random_edge_index(N, seed=13, duplicates=False, hub_degree=N - 10)   # hubs: split rows
    for schedule in _additive_schedules(16, 4, name):
        options = {"cache": str(tmp_path / "d.json"), "schedules": {"attention-additive": schedule}}
        (out, grads), (ref, ref_grads) = _op_pair(at.additive_attention, edges,
                                                  [(N, 4), (N, 4), (N, 4, 16)], HALF[name], options)
        assert out.dtype == HALF[name] and rel_err(out, ref) <= 4 * _u(name), schedule
        for g, r in zip(grads, ref_grads):
            assert rel_err(g, r) <= 8 * _u(name), schedule
