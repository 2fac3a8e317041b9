"""The additive (GAT) score tuned on a CUDA device (op `attention-additive`): the tuned plan equals
the float64 CPU reference on graphs with empty rows and hub rows (split by fused_split) in float32
and bfloat16, values, gradients and row statistics; its decision is in the cache under its op and
replays; a second graph of the kind probes nothing; a GAT layer's output and gradients are those
of the untuned (cost model) path."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli import cache as cache_mod, dtypes  # noqa: E402
from autosage_cli.scheduler.decisions import additive, kinds, replay as replay_mod  # noqa: E402
from autosage_cli.torch import kernels  # noqa: E402
from torch_helpers import cuda_only, kinds_cache, random_edge_index  # noqa: E402,F401

pytestmark = pytest.mark.gpu
N = 3000
HUB_DEGREE = 2600       # above both fused_split thresholds (512, 2048)
HEADS, D = 4, 16
TOL = {"float32": 2e-5, "bfloat16": 4 * dtypes.info("bfloat16").unit_roundoff}
TYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


@pytest.fixture(scope="module", autouse=True)
def _cuda(cuda_only):
    pass


def _rel(a, b) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _edges(seed: int):
    return random_edge_index(N, seed=seed, avg_degree=6, hub_degree=HUB_DEGREE, duplicates=False)


def _inputs(dtype: torch.dtype, seed: int = 5):
    """a_dst, a_src (float32, as the kernels read them) and V in `dtype`; the CPU copies are the
    same values in float64."""
    gen = torch.Generator().manual_seed(seed)
    base = [torch.rand(N, HEADS, generator=gen) * 4 - 2, torch.rand(N, HEADS, generator=gen) * 4 - 2,
            (torch.rand(N, HEADS, D, generator=gen) * 2 - 1).to(dtype)]
    gpu = [b.cuda().requires_grad_() for b in base]
    cpu = [b.double().requires_grad_() for b in base]
    return gpu, cpu


def _plan(graph: at.Graph):
    """The graph's additive plan (attention runs on the graph of every listed edge)."""
    runs_on = graph.with_duplicates()
    [found] = [p for key, p in runs_on.gpu.items() if key[0] == "plan" and key[1] == "attention-additive"]
    return found


@pytest.mark.parametrize("name", list(TYPES))
def test_the_tuned_plan_equals_the_reference_and_its_decision_is_cached(cache, name):
    edges = _edges(seed=17)
    g_gpu = at.Graph.from_edge_index(edges.cuda(), N, cache=cache)          # tune=True (default)
    g_cpu = at.Graph.from_edge_index(edges, N)
    gpu, cpu = _inputs(TYPES[name])
    out = at.additive_attention(g_gpu, *gpu, negative_slope=0.2)
    expected = at.additive_attention(g_cpu, *cpu, negative_slope=0.2)
    assert out.dtype == TYPES[name] and _rel(out, expected) < TOL[name]
    assert out[0].abs().sum() == 0          # node 0 receives no edge: an empty row
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    for what, a, b in zip(("a_dst", "a_src", "V"),
                          torch.autograd.grad((out.double() * up.cuda()).sum(), gpu),
                          torch.autograd.grad((expected * up).sum(), cpu)):
        assert _rel(a, b) < 5 * TOL[name], what
    # the row statistics the backward reads (heavy rows: merged chunk statistics)
    gmax, gsum = kernels.additive_attention(g_gpu, *(t.detach() for t in gpu), 0.2)[1].unbind(-1)
    rmax, rsum = kernels.additive_attention(g_cpu, *(t.detach() for t in cpu), 0.2)[1].unbind(-1)
    rows = torch.isfinite(rmax)
    assert torch.equal(torch.isfinite(gmax).cpu(), rows)
    assert _rel(gmax.cpu()[rows], rmax[rows]) < TOL["float32"] and _rel(gsum.cpu()[rows], rsum[rows]) < 1e-4
    # tuned once (the first graph of its kind), recorded under its op with its candidates
    assert kinds.probe_count() == 1 and additive.runs_additive(_plan(g_gpu).native_schedule)
    [entry] = cache_mod.DecisionCache(cache).entries()
    assert entry["op"] == "attention-additive" and entry["dtype"] == name and entry["heads"] == HEADS
    assert entry["decision"]["backend"] == "native" and entry["reference"].startswith("float64 reference")
    ok = [c for c in entry["candidates"] if c["status"] == "ok"]
    assert ok and all(c["ms"] > 0 and c["rel_error"] is not None for c in ok)
    # replay re-runs and re-checks it (on the graph saved beside the cache)
    [replayed] = replay_mod.replay(cache_mod.DecisionCache(cache))
    assert replayed.status == "ok", replayed.reason


def test_a_second_graph_of_the_kind_probes_nothing_and_is_correct(cache):
    first = at.Graph.from_edge_index(_edges(seed=17).cuda(), N, cache=cache)
    gpu, _ = _inputs(torch.float32)
    at.additive_attention(first, *gpu)
    assert kinds.probe_count() == 1
    edges = _edges(seed=18)
    second = at.Graph.from_edge_index(edges.cuda(), N, cache=cache)
    gpu, cpu = _inputs(torch.float32, seed=6)
    out = at.additive_attention(second, *gpu, negative_slope=0.1)
    assert kinds.probe_count() == 1
    assert _rel(out, at.additive_attention(at.Graph.from_edge_index(edges, N), *cpu, negative_slope=0.1)) < TOL["float32"]
    assert additive.runs_additive(_plan(second).native_schedule)


def test_a_gat_layer_is_unchanged_by_tuning(cache):
    edges = _edges(seed=19).cuda()
    torch.manual_seed(0)
    tuned_layer = at.GATConv(37, 9, heads=3, negative_slope=0.1).cuda()
    untuned_layer = at.GATConv(37, 9, heads=3, negative_slope=0.1).cuda()
    untuned_layer.load_state_dict(tuned_layer.state_dict())
    x = torch.randn(N, 37, device="cuda")
    a = tuned_layer(x, at.Graph.from_edge_index(edges, N, cache=cache))
    b = untuned_layer(x, at.Graph.from_edge_index(edges, N, tune=False))
    assert _rel(a, b) < TOL["float32"]
    up = torch.randn_like(a)
    (a * up).sum().backward()
    (b * up).sum().backward()
    theirs = dict(untuned_layer.named_parameters())
    for name, p in tuned_layer.named_parameters():
        assert _rel(p.grad, theirs[name].grad) < 5 * TOL["float32"], name
