"""A kept aggregation on a CUDA device (autosage_cli.torch.kept_aggregation): the training suite's
GCN and SAGE stacks, called again and again on the same features, give the outputs and gradients
of calls that aggregate every time (float32 and bfloat16), with no SpMM left in the first layer
after its second call; a captured forward whose eager warm-up kept the features' product still
follows new features on every replay (a capture never reads a kept product)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.torch import kept_aggregation  # noqa: E402
from autosage_cli.torch.norm import mean_graph  # noqa: E402
from autosage_cli.torch.training import build  # noqa: E402
from torch_helpers import kept_on, random_edge_index, record_spmms, rel_err  # noqa: E402,F401

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("kept_on"),
              pytest.mark.skipif(not torch.cuda.is_available(),
                                 reason="torch sees no CUDA device (CPU-only torch build?)")]
N, IN, CLASSES = 3000, 96, 7
TOL = {torch.float32: 1e-4, torch.bfloat16: 3e-2}    # A (x W) against (A x) W, rounded apart


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    edges = random_edge_index(N, seed=5, avg_degree=8, hubs=3, hub_degree=900).cuda()
    return at.Graph.from_edge_index(edges, N, cache=str(tmp_path_factory.mktemp("kept") / "decisions.json"))


def _features(seed: int, dtype=torch.float32) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(N, IN, generator=gen).to(device="cuda", dtype=dtype)


def _call(net, x, graph):
    net.zero_grad()
    out = net(x, graph)
    out.float().square().sum().backward()
    return out.detach().float(), [p.grad.float() for p in net.parameters()]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_repeated_calls_on_kept_features_equal_aggregating_ones(graph, monkeypatch, model, dtype):
    torch.manual_seed(0)
    net = build(at, model, IN, CLASSES).to(device="cuda", dtype=dtype)
    x = _features(1, dtype)
    at.keep_aggregations(False)
    want = _call(net, x, graph)
    at.keep_aggregations(True)
    for _ in range(2):                   # noted, then kept
        _call(net, x, graph)
    calls = record_spmms(monkeypatch)
    got = _call(net, x, graph)
    widths = [width for _, width in calls]
    assert IN not in widths                                      # the first layer ran none
    assert len(widths) == 2 * len(net.layers) - 2, widths       # the later layers' own, each way
    assert rel_err(got[0], want[0]) < TOL[dtype]
    for g, w in zip(got[1], want[1]):
        assert rel_err(g, w) < TOL[dtype]


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_a_capture_after_a_kept_warm_up_follows_new_features(graph, model):
    torch.manual_seed(0)
    net = build(at, model, IN, CLASSES).cuda().eval()
    forward = at.capture_inference(lambda g, x: net(x, g), graph, _features(0), warmup=2)
    static = forward.static_inputs[0]
    for _ in range(2):                   # the static buffer itself: unchanged, so kept
        forward(static)
    noted = kept_aggregation.noted(mean_graph(graph) if model == "sage" else net.layers[0]._normalised(graph), static)
    assert noted is not None and noted.aggregated is not None
    for i in range(1, 4):
        x = _features(i)
        out = forward(x)                 # the capture, then replays
        at.keep_aggregations(False)
        with torch.no_grad():
            expected = net(x, graph)
        at.keep_aggregations(True)
        assert rel_err(out, expected) < 1e-4, i
    assert forward.captured
