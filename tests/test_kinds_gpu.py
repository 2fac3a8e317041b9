"""Decisions that carry over, on a CUDA device: the first graph of a kind is tuned (verified, the
guardrail held), a later graph of the same kind (another sample: empty rows, hub rows, duplicate
edges) probes nothing, copies nothing to the host, runs a plan that builds no host work lists, and
is correct against the float64 CPU reference; a SAGE training step on a new batch likewise; GAT on
a batch with duplicate edges counts each listing, as PyG does."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.kernels.schedule import family_of, get  # noqa: E402
from autosage_cli.scheduler.decisions import kinds  # noqa: E402
from autosage_cli.torch import graph as graph_mod  # noqa: E402
from torch_helpers import cuda_only, kinds_cache, random_edge_index  # noqa: E402,F401

pytestmark = pytest.mark.gpu
N = 3000
TOL = 2e-5


@pytest.fixture(scope="module", autouse=True)
def _cuda(cuda_only):
    pass


def _batch(seed: int, cache: str) -> at.Graph:
    """A sampled-batch-like graph: every 5th node receives nothing, two hubs receive from most
    nodes, some edges listed twice; the same sizes for every seed (one kind)."""
    edges = random_edge_index(N, seed=seed, hub_degree=1500, duplicates=True)
    return at.Graph.from_edge_index(edges.cuda(), N, cache=cache)


def _rel(a, b) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def _plan_schedule(g: at.Graph, op: str, k: int):
    plans = [p for key, p in g.gpu.items() if key[0] == "plan" and key[1] == op and key[2] == k]
    assert len(plans) == 1
    return plans[0]


@pytest.mark.parametrize("k", [16, 64, 100])
def test_a_later_graph_of_the_kind_probes_nothing_and_is_correct(cache, k):
    first = _batch(1, cache)
    B = torch.randn(N, k, device="cuda")
    at.spmm(first, B)
    probes = kinds.probe_count()
    assert probes == 1
    copies = graph_mod.host_copies()
    for seed in (2, 3, 4):
        g = _batch(seed, cache)
        assert kinds.kind_change(first.kind_features(), g.kind_features()) is None
        out = at.spmm(g, B)
        ref = at.spmm(at.Graph.from_edge_index(random_edge_index(N, seed=seed, hub_degree=1500), N), B.double().cpu())
        assert _rel(out, ref) < TOL
        plan = _plan_schedule(g, "spmm", k)
        if plan.backend == "native":
            schedule = get(plan.schedule)
            assert not family_of(schedule.family).reads_host_graph(schedule)
    assert kinds.probe_count() == probes
    assert graph_mod.host_copies() == copies


def test_a_training_step_on_a_new_batch_copies_nothing_to_the_host(cache):
    torch.manual_seed(0)
    model = torch.nn.ModuleList([at.SAGEConv(32, 64), at.SAGEConv(64, 8)]).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    x, y = torch.randn(N, 32, device="cuda"), torch.randint(0, 8, (N,), device="cuda")

    def step(g):
        h = model[1](model[0](x, g).relu(), g)
        loss = torch.nn.functional.cross_entropy(h, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return float(loss)

    step(_batch(1, cache))
    probes, copies = kinds.probe_count(), graph_mod.host_copies()
    for seed in (2, 3):
        assert torch.isfinite(torch.tensor(step(_batch(seed, cache))))
    assert (kinds.probe_count(), graph_mod.host_copies()) == (probes, copies)


def test_gat_counts_duplicate_edges_as_pyg_does(cache):
    pyg_nn = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")
    edges = random_edge_index(N, seed=5, hub_degree=1500, duplicates=True).cuda()
    torch.manual_seed(0)
    theirs = pyg_nn.GATConv(16, 8, heads=4).cuda()
    ours = at.GATConv(16, 8, heads=4).cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(N, 16, device="cuda")
    g = at.Graph.from_edge_index(edges, N, cache=cache)
    assert g.has_duplicates
    assert _rel(ours(x, g), theirs(x, edges)) < 1e-4
    copies = graph_mod.host_copies()
    other = at.Graph.from_edge_index(random_edge_index(N, seed=6, hub_degree=1500, duplicates=True).cuda(), N,
                                     cache=cache)
    ours(x, other)
    assert graph_mod.host_copies() == copies
    # backward runs on the transpose of the graph that keeps the duplicates: tuned on its
    # coalesced transpose, gradients as PyG's
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    upstream = torch.randn(N, 32, device="cuda")
    (ours(x1, g) * upstream).sum().backward()
    (theirs(x2, edges) * upstream).sum().backward()
    assert _rel(x1.grad, x2.grad) < 1e-4
