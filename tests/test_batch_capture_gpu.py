"""Captured mini-batch steps on a CUDA device (autosage_cli.torch.batch_capture): over batches of
changing sizes (a hub row, empty rows, repeated edges and self-loops in each), the captured step
of GCN, SAGE, GAT and TransformerConv stacks trains as the same model stepped eagerly on a Graph
built per batch (losses and weights within rounding, in float32 and bfloat16), capturing once per
capacity and replaying after; a batch of another capacity is captured apart (and an evicted one
again); an id out of range in a replayed batch is reported by the next call; a loss_fn that
synchronises falls back to eager steps that still train, with the cause kept."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import torch.nn.functional as F  # noqa: E402

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.torch.training import Net  # noqa: E402
from torch_helpers import rel_err  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(),
                                                  reason="torch sees no CUDA device (CPU-only torch build?)")]
IN, CLASSES, SEEDS = 32, 7, 64
LR = 0.01
MODELS = {
    "gcn": lambda: Net([at.GCNConv(IN, 64), at.GCNConv(64, CLASSES)]),
    "sage": lambda: Net([at.SAGEConv(IN, 64), at.SAGEConv(64, CLASSES)]),
    "gat": lambda: Net([at.GATConv(IN, 8, heads=4), at.GATConv(32, CLASSES, heads=1)]),
    "transformer": lambda: Net([at.TransformerConv(IN, 8, heads=4), at.TransformerConv(32, CLASSES)]),
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("batch-capture") / "decisions.json")


def _batch(i: int, n: int | None = None):
    """(edge_index, x, y) of a sampled-looking batch of about 3,000 nodes: node 1 a hub of 1,500
    in-edges, every 5th node none, 10% of the edges listed twice, a few self-loops."""
    gen = torch.Generator().manual_seed(1000 + i)
    n = n or 3000 + int(torch.randint(-100, 100, (1,), generator=gen))
    dst = torch.randint(0, n, (5 * n,), generator=gen)
    dst = dst[dst % 5 != 0]
    src = torch.randint(0, n, (dst.numel(),), generator=gen)
    src = torch.cat([src, torch.randint(0, n, (1500,), generator=gen), src[:dst.numel() // 10], torch.arange(10)])
    dst = torch.cat([dst, torch.full((1500,), 1), dst[:dst.numel() // 10], torch.arange(10)])
    x = torch.randn(n, IN, generator=gen)
    y = torch.randint(0, CLASSES, (SEEDS,), generator=gen)
    return torch.stack([src, dst]).cuda(), x.cuda(), y.cuda()


def _loss(net, graph, x, y):
    return F.cross_entropy(net(x, graph)[:y.numel()], y)


# (loss, weights) relative: the same kernels, but atomics sum in another order every run and Adam
# turns tiny gradient differences into steps; bfloat16 rounds every stored value
TOL = {torch.float32: (1e-3, 2e-3), torch.bfloat16: (5e-2, 5e-2)}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_captured_batches_train_as_eager_steps_on_a_graph_per_batch(cache, model, dtype):
    torch.manual_seed(0)
    net = MODELS[model]().to(device="cuda", dtype=dtype)
    loss_tol, weight_tol = TOL[dtype]
    ref = copy.deepcopy(net)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=LR)
    step = at.capture_batch_step(lambda g, x, y: _loss(net, g, x, y),
                                 torch.optim.Adam(net.parameters(), lr=LR, capturable=True), cache=cache)
    for i in range(7):
        edge_index, x, y = _batch(i)
        x = x.to(dtype)
        loss = step(edge_index, x, y)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss = _loss(ref, at.Graph.from_edge_index(edge_index, num_nodes=x.shape[0], cache=cache), x, y)
        ref_loss.backward()
        ref_opt.step()
        assert rel_err(loss, ref_loss) < loss_tol, (i, float(loss), float(ref_loss))
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            if name.endswith("lin_key.bias"):
                # a key bias adds <q_i, b> to every score of row i, which its softmax cancels: its
                # gradient is zero but for rounding, and Adam scales rounding to whole steps
                # (up to about lr per element and step, in each run's own direction)
                assert float((p - q).abs().max()) <= 2.5 * LR * (i + 1), (i, name)
                continue
            assert rel_err(p, q) < weight_tol, (i, name)
    step.check()
    assert step.reason is None, step.reason
    assert step.captures >= 1 and step.replays >= 1 and step.eager_steps <= 2 * step.captures, vars(step)


def test_another_capacity_is_captured_apart_and_an_evicted_one_again(cache):
    torch.manual_seed(0)
    net = MODELS["sage"]().cuda()
    step = at.capture_batch_step(lambda g, x, y: _loss(net, g, x, y),
                                 torch.optim.Adam(net.parameters(), lr=LR, capturable=True),
                                 warmup=1, keep=1, cache=cache)
    small, large = _batch(0, 3000), _batch(1, 9000)
    for _ in range(3):
        step(*small)
    assert (step.captures, step.eager_steps) == (1, 1)
    for _ in range(3):
        step(*large)
    assert (step.captures, step.eager_steps) == (2, 2)
    step(*small)                      # evicted (keep=1): warmed up and captured again
    step(*small)
    assert (step.captures, step.eager_steps) == (3, 3) and step.reason is None


def test_an_id_out_of_range_in_a_replayed_batch_is_reported(cache):
    net = MODELS["gcn"]().cuda()
    step = at.capture_batch_step(lambda g, x, y: _loss(net, g, x, y),
                                 torch.optim.Adam(net.parameters(), lr=LR, capturable=True),
                                 warmup=1, cache=cache)
    edge_index, x, y = _batch(0, 3000)
    early = edge_index.clone()
    early[1, 3] = 3000
    with pytest.raises(AutosageError, match=r"an id out of range \[0, 3000\)"):
        step(early, x, y)             # an eager (warm-up) step checks before it runs
    step(edge_index, x, y)
    step(edge_index, x, y)            # captured and replayed
    bad = edge_index.clone()
    bad[0, 17] = 3000
    loss = step(bad, x, y)
    assert torch.isfinite(loss)       # the bad edge was dropped, not read out of bounds
    with pytest.raises(AutosageError, match="an earlier batch had an id out of range"):
        step.check()
    step(edge_index, x, y)            # reported once; the step goes on
    step.check()


def test_a_loss_fn_that_synchronises_runs_eagerly_and_says_why(cache):
    net = MODELS["sage"]().cuda()
    seen = []

    def loss_fn(g, x, y):
        loss = _loss(net, g, x, y)
        seen.append(float(loss))      # .item(): a host synchronisation, refused inside a capture
        return loss

    step = at.capture_batch_step(loss_fn, torch.optim.Adam(net.parameters(), lr=LR, capturable=True),
                                 warmup=1, cache=cache)
    before = torch.cuda.current_stream()
    for i in range(4):
        step(*_batch(0, 3000))
    assert step.captures == 0 and "capture failed" in step.reason and step.eager_steps == 4
    assert torch.cuda.current_stream() == before    # the failed capture's side stream is not left current
    assert seen[-1] < seen[0]         # it trained
