"""GAT on a CUDA device: the additive-score fused kernels (every fused and fused_split schedule,
and the cost model's choice) against the float64 CPU reference, values and gradients; GATConv
against PyG's GATConv on the same device. Graphs have empty rows and hub rows (long enough to be
split by fused_split); widths are odd."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.kernels import attention_space as space  # noqa: E402
from autosage_cli.torch import kernels  # noqa: E402
from torch_helpers import random_edge_index  # noqa: E402

pytestmark = pytest.mark.gpu
N = 3000
HUB_DEGREE = 2600   # above both fused_split thresholds (512, 2048): hub rows become several chunks
TOL = 2e-5          # ||ours - ref|| / ||ref|| in fp32 against float64


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")


@pytest.fixture(scope="module")
def edges():
    return random_edge_index(N, seed=17, avg_degree=6, hub_degree=HUB_DEGREE, duplicates=False)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _pair(*shape, seed):
    x = (torch.rand(*shape, generator=torch.Generator().manual_seed(seed)) * 2 - 1) * 3
    return x.cuda().requires_grad_(), x.double().requires_grad_()


def _backward(out, leaves, seed=3):
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed)).to(out)
    return torch.autograd.grad(out, leaves, up)


def _check(edges, heads, d, slope, schedule=None):
    options = {"schedules": {"attention-additive": schedule}} if schedule else {}
    g_gpu = at.Graph.from_edge_index(edges.cuda(), N, tune=False, **options)
    g_ref = at.Graph.from_edge_index(edges, N)
    leaves = [_pair(N, heads, seed=1), _pair(N, heads, seed=2), _pair(N, heads, d, seed=3)]
    gpu, ref = [p[0] for p in leaves], [p[1] for p in leaves]
    out = at.additive_attention(g_gpu, *gpu, negative_slope=slope)
    expected = at.additive_attention(g_ref, *ref, negative_slope=slope)
    assert out.is_cuda and out.dtype == torch.float32
    assert _rel(out, expected) < TOL, schedule
    assert out[0].abs().sum() == 0  # node 0 receives no edge
    for name, a, b in zip(("a_dst", "a_src", "V"), _backward(out, gpu), _backward(expected, ref)):
        assert _rel(a, b) < 5 * TOL, (schedule, name)
    # the row statistics backward rebuilds the probabilities from (heavy rows: merged chunk partials)
    gpu_max, gpu_sum = kernels.additive_attention(g_gpu, *(t.detach() for t in gpu), slope)[1].unbind(-1)
    ref_max, ref_sum = kernels.additive_attention(g_ref, *(t.detach() for t in ref), slope)[1].unbind(-1)
    rows = torch.isfinite(ref_max)
    assert torch.equal(torch.isfinite(gpu_max).cpu(), rows) and (gpu_sum.cpu()[~rows] == 0).all()
    assert _rel(gpu_max.cpu()[rows], ref_max[rows]) < TOL and _rel(gpu_sum.cpu()[rows], ref_sum[rows]) < TOL
    return g_gpu


@pytest.mark.parametrize("heads, d, slope", [(1, 5, 0.2), (8, 8, 0.2), (1, 41, 0.2), (4, 33, 0.01),
                                             (2, 64, 0.2), (1, 256, 1.5), (1, 300, 0.2)])
def test_chosen_schedule_values_and_gradients(edges, heads, d, slope):
    """The cost model's choice (d = 300 is wider than any fused group: the torch composition)."""
    _check(edges, heads, d, slope)


WIDTHS = (3, 7, 8, 16, 24, 33, 40, 64, 100, 128, 200, 256)


def _float32_width(s):
    """The narrowest width this schedule runs in float32 with two head groups (None: it serves the
    2-byte types only, e.g. 16-byte vectors of halves; the additive score is float32 only)."""
    return next((d for d in WIDTHS if s.supports(d, 2 * s.heads_per_block) is None), None)


@pytest.mark.parametrize("schedule", [s.name for s in space.SCHEDULES if s.family in ("fused", "fused_split")
                                      and _float32_width(s) is not None])
def test_every_fused_schedule(edges, schedule):
    s = next(x for x in space.SCHEDULES if x.name == schedule)
    heads = 2 * s.heads_per_block
    d = _float32_width(s)
    g = _check(edges, heads, d, 0.2, schedule)
    plan = next(v for k, v in g.gpu.items() if k[:2] == ("plan", "attention-additive"))
    assert plan.schedule == schedule and plan.score == "additive"


def test_graph_without_edges():
    g = at.Graph.from_coo(torch.empty(0, dtype=torch.long, device="cuda"),
                          torch.empty(0, dtype=torch.long, device="cuda"), None, (5, 5))
    out = at.additive_attention(g, torch.ones(5, 2, device="cuda"), torch.ones(5, 2, device="cuda"),
                                torch.ones(5, 2, 3, device="cuda"))
    assert out.abs().sum() == 0


@pytest.mark.parametrize("out_channels, kwargs", [(8, {"heads": 8}), (41, {"heads": 1, "concat": False}),
                                                  (9, {"heads": 3, "negative_slope": 0.1}),
                                                  (2, {"heads": 8}), (1, {"heads": 1})])   # no fused schedule
def test_gatconv_matches_pyg_on_cuda(edges, out_channels, kwargs):
    pyg = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")
    e = edges.cuda()
    theirs = pyg.GATConv(37, out_channels, **kwargs).cuda()
    ours = at.GATConv(37, out_channels, **kwargs).cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(N, 37, device="cuda")
    a, b = ours(x, at.Graph.from_edge_index(e, N)), theirs(x, e)
    assert _rel(a, b) < TOL
    up = torch.randn_like(a)
    (a * up).sum().backward()
    (b * up).sum().backward()
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert _rel(p.grad, theirs_params[name].grad) < 5 * TOL, name
