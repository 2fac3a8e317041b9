"""Static graphs (autosage_cli.torch.static_graph) on the CPU: a batch padded to a capacity gives
its real rows exactly what PyG's layers give on the batch's edge_index (SAGE mean, GCN with
self-loops, GAT, TransformerConv), duplicates and self-loops included; the padding never touches
a batch node; an id out of range is flagged and dropped; a batch that does not fit is refused;
and the captured mini-batch step off a GPU, where it runs every step eagerly on the same static
graphs: it trains as a Graph built per batch does, over two capacities, and checks its inputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from autosage_cli.torch.batch_capture import CapturedBatchStep, fits, needs, opened  # noqa: E402
from autosage_cli.torch.captured_build import capacity  # noqa: E402
from autosage_cli.torch.static_graph import StaticShape, batch_graph  # noqa: E402

N_BATCH, IN, OUT = 300, 12, 5


def _batch(seed: int = 0, n: int = N_BATCH, edges: int = 1500):
    """A sampler's batch: random edges with repeats, a few self-loops (one listed twice), a hub
    target (node 3, 200 edges) and nodes without in-edges."""
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(0, n, (edges,), generator=gen)
    dst = torch.randint(0, n // 2, (edges,), generator=gen)
    src = torch.cat([src, src[:50], torch.arange(200), torch.tensor([7, 7, 9])])
    dst = torch.cat([dst, dst[:50], torch.full((200,), 3), torch.tensor([7, 7, 9])])
    return torch.stack([src, dst])


def _static(edge_index, n: int):
    shape = StaticShape(*map(opened, needs(edge_index.shape[1], n)), torch.device("cpu"))
    src = torch.full((shape.edges,), 123456789)     # stale slots: anything, masked by the sizes
    dst = torch.full((shape.edges,), -5)
    src[:edge_index.shape[1]], dst[:edge_index.shape[1]] = edge_index
    shape.set_batch(edge_index.shape[1], n)
    return shape, batch_graph(shape, src, dst, {})


def _padded(x, rows: int):
    out = torch.zeros((rows, *x.shape[1:]), dtype=x.dtype)
    out[:x.shape[0]] = x
    return out


def test_the_padding_stays_among_the_padding_nodes():
    edge_index = _batch()
    shape, g = _static(edge_index, N_BATCH)
    assert g.shape == (shape.nodes, shape.nodes) and g.nnz == shape.edges
    assert shape.nodes >= N_BATCH + N_BATCH // 64 + 1
    real = (g.row < N_BATCH) & (g.col < N_BATCH)
    padding = (g.row >= N_BATCH) & (g.col >= N_BATCH)
    assert bool((real | padding).all())                      # no edge between the two
    assert int(real.sum()) == edge_index.shape[1]           # every listing kept, repeats too
    pad_degrees = torch.bincount(g.row[padding] - N_BATCH)
    assert int(pad_degrees.max()) <= 2 + (shape.edges - edge_index.shape[1]) // (shape.nodes - N_BATCH)
    assert not bool(shape.bad)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat", "transformer"])
def test_real_rows_equal_pyg_on_the_batch(model):
    import torch_geometric.nn as pyg

    torch.manual_seed(0)
    theirs = {"sage": lambda: pyg.SAGEConv(IN, OUT), "gcn": lambda: pyg.GCNConv(IN, OUT),
              "gat": lambda: pyg.GATConv(IN, OUT, heads=2),
              "transformer": lambda: pyg.TransformerConv(IN, OUT, heads=2)}[model]()
    ours = {"sage": lambda: at.SAGEConv(IN, OUT), "gcn": lambda: at.GCNConv(IN, OUT),
            "gat": lambda: at.GATConv(IN, OUT, heads=2),
            "transformer": lambda: at.TransformerConv(IN, OUT, heads=2)}[model]()
    ours.load_state_dict(theirs.state_dict())
    edge_index = _batch(1)
    x = torch.randn(N_BATCH, IN)
    shape, g = _static(edge_index, N_BATCH)
    out = ours(_padded(x, shape.nodes), g)[:N_BATCH]
    ref = theirs(x, edge_index)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-4), float((out - ref).abs().max())


def test_the_self_loop_graph_has_a_fixed_size_and_moves_the_batchs_loops_into_the_padding():
    from autosage_cli.torch import norm

    edge_index = _batch(2)
    shape, g = _static(edge_index, N_BATCH)
    looped, keep = norm.with_self_loops(g)
    assert looped.nnz == shape.edges + shape.nodes and looped._static is shape
    real = looped.row < N_BATCH
    assert bool((looped.col[real] < N_BATCH).all())
    # each batch node: its kept in-edges and exactly one loop
    loops = (looped.row == looped.col) & real
    assert torch.equal(torch.bincount(looped.row[loops], minlength=N_BATCH), torch.ones(N_BATCH, dtype=torch.int64))
    src, dst = edge_index
    assert int(real.sum()) == int((src != dst).sum()) + N_BATCH
    assert int(keep.sum()) == int((g.row != g.col).sum())


def test_its_host_csr_is_the_pattern_without_its_repeats():
    """What a new kind is tuned on (a host CSR holds no duplicates): the batch's edges and the
    padding's loops, each pair once; a reweighted graph (GCN's) reads the same pattern."""
    edge_index = _batch()
    shape, g = _static(edge_index, N_BATCH)
    csr = g.host_csr()
    pairs = torch.stack([g.row, g.col]).unique(dim=1)
    assert csr.nnz == pairs.shape[1] < g.nnz
    assert csr.shape == g.shape
    rows = torch.repeat_interleave(torch.arange(g.n_rows), torch.as_tensor(csr.indptr).diff().long())
    assert torch.equal(torch.stack([rows, torch.as_tensor(csr.indices).long()]), pairs)
    weighted = g.with_weights(torch.rand(g.nnz, dtype=torch.float64))
    assert weighted.host_csr().nnz == csr.nnz


def test_an_id_out_of_range_is_flagged_and_its_edge_dropped():
    edge_index = _batch(3)
    edge_index[0, 5] = N_BATCH            # one past the batch's nodes
    edge_index[1, 9] = -1
    shape, g = _static(edge_index, N_BATCH)
    assert bool(shape.bad)
    real = (g.row < N_BATCH) & (g.col < N_BATCH)
    assert int(real.sum()) == edge_index.shape[1] - 2


@pytest.mark.parametrize("edges, nodes, message", [
    (5000, 10, "does not fit a static graph"),     # more edges than the capacity
    (10, 2000, "does not fit a static graph"),     # no room left for a padding node
    (10, 0, "does not fit a static graph"),
])
def test_a_batch_that_does_not_fit_is_refused(edges, nodes, message):
    shape = StaticShape(capacity(1000), opened(needs(1, 100)[1]), torch.device("cpu"))
    with pytest.raises(AutosageError, match=message):
        shape.set_batch(edges, nodes)


def test_the_capacity_leaves_room_for_padding_nodes():
    for n in (1, 15, 16, 1000, 1023, 1024, 312_345):
        edges, nodes = needs(0, n)
        assert edges == 1 and nodes >= n + n // 64 + 1
        room = opened(nodes)
        assert room % 64 == 0 and fits(nodes, room) and nodes < room <= nodes * 1.04 + 64


def test_a_capacity_serves_batches_a_few_percent_apart_and_no_more():
    assert fits(1000, 1000) and fits(1000, 1125) and not fits(1000, 1126) and not fits(1001, 1000)
    assert fits(10, 74) and not fits(10, 75)          # small batches: a ROUND of slack
    step = CapturedBatchStep(lambda g, x: x.sum(), torch.optim.SGD([torch.zeros(1, requires_grad=True)]))
    rooms = []
    for n in (10_000, 10_200, 9_700, 7_000, 10_150, 10_400, 10_350, 9_000):
        edge_index = torch.stack([torch.arange(2 * n) % n, torch.arange(2 * n) // 2])
        slot = step._slot(edge_index, torch.zeros(n, 3), ())
        rooms.append((slot.shape.edges, slot.shape.nodes))
    a, b = rooms[0], rooms[3]
    assert a != b and rooms[:3] == [a] * 3 and rooms[4] == a     # within 3%: the first capacity
    assert rooms[5] not in (a, b) and rooms[5][1] > a[1]          # 4% above it: one of its own
    assert rooms[6] == rooms[5]          # past the first capacity, inside the second: reused
    assert rooms[7] not in rooms[:7]     # the others would waste more than 1/8 of its needs
    assert len(step._slots) == 2 and list(step._slots)[0][2] == rooms[5][1]   # LRU: 7000s, then the first, let go


def test_kinds_are_lent_from_the_first_graph_of_a_role():
    edge_index = _batch(4)
    shape, g = _static(edge_index, N_BATCH)
    stats = g.structure_stats()
    second = _batch(5)
    src, dst = (torch.zeros(shape.edges, dtype=torch.int64) for _ in range(2))
    src[:second.shape[1]], dst[:second.shape[1]] = second
    shape.set_batch(second.shape[1], N_BATCH)
    other = batch_graph(shape, src, dst, {})
    assert other.structure_stats() is stats and set(shape.stats) == {"batch"}
    assert g.T.structure_stats()["rows"] == stats["cols"]     # the transpose's, swapped


def test_per_call_edge_weights_are_refused_on_a_static_graph():
    shape, g = _static(_batch(6), N_BATCH)
    layer = at.GCNConv(IN, OUT)
    with pytest.raises(AutosageError, match="per-call edge weights on a captured mini-batch"):
        layer(torch.zeros(shape.nodes, IN), g, torch.ones(g.nnz))


def _loss(net, graph, x, y):
    return torch.nn.functional.cross_entropy(net(x, graph)[:y.numel()], y)


def _train_batch(seed: int, n: int):
    edge_index = _batch(seed, n, 5 * n)
    gen = torch.Generator().manual_seed(seed)
    return edge_index, torch.randn(n, IN, generator=gen), torch.randint(0, OUT, (32,), generator=gen)


@pytest.mark.parametrize("model", ["sage", "gcn", "gat"])
def test_off_a_gpu_the_step_runs_eagerly_and_trains_as_a_graph_per_batch(model):
    """The same loop a GPU captures: padded batches on static graphs, against a Graph built per
    batch, over batches of changing sizes (so of two capacities)."""
    import copy

    from autosage_cli.torch.training import Net

    torch.manual_seed(0)
    layers = {"sage": lambda: [at.SAGEConv(IN, 16), at.SAGEConv(16, OUT)],
              "gcn": lambda: [at.GCNConv(IN, 16), at.GCNConv(16, OUT)],
              "gat": lambda: [at.GATConv(IN, 4, heads=4), at.GATConv(16, OUT)]}[model]
    net = Net(layers())
    ref = copy.deepcopy(net)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=0.01)
    step = at.capture_batch_step(lambda g, x, y: _loss(net, g, x, y), torch.optim.Adam(net.parameters(), lr=0.01))
    for i, n in enumerate([300, 310, 290, 700, 305]):
        edge_index, x, y = _train_batch(i, n)
        loss = step(edge_index, x, y)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss = _loss(ref, at.Graph.from_edge_index(edge_index, num_nodes=n), x, y)
        ref_loss.backward()
        ref_opt.step()
        loss, ref_loss = float(loss.detach()), float(ref_loss.detach())
        assert abs(loss - ref_loss) <= 1e-5 * abs(ref_loss), (i, loss, ref_loss)
    for p, q in zip(net.parameters(), ref.parameters()):
        assert torch.allclose(p, q, atol=1e-5, rtol=1e-4)
    assert (step.captures, step.replays, step.eager_steps) == (0, 0, 5)
    assert "run eagerly (a CUDA graph needs a GPU)" in step.reason
    assert len(step._slots) == 2                   # keep: two capacities, the most recent


def test_an_id_out_of_range_is_refused_before_an_eager_step_runs():
    net = at.SAGEConv(IN, OUT)
    step = at.capture_batch_step(lambda g, x, y: _loss(net, g, x, y), torch.optim.SGD(net.parameters(), lr=0.1))
    edge_index, x, y = _train_batch(0, 300)
    edge_index[0, 4] = 300
    before = [p.detach().clone() for p in net.parameters()]
    with pytest.raises(AutosageError, match=r"edge_index: an id out of range \[0, 300\) \(x has 300 rows\)"):
        step(edge_index, x, y)
    assert all(torch.equal(p, q) for p, q in zip(net.parameters(), before))    # nothing stepped


@pytest.mark.parametrize("args, message", [
    ((torch.zeros(3, 4, dtype=torch.int64), torch.zeros(5, IN)), r"edge_index: expected a \(2, E\) tensor"),
    ((torch.zeros(2, 4), torch.zeros(5, IN)), "edge_index: expected integer ids"),
    ((torch.zeros(2, 4, dtype=torch.int64), torch.zeros(0, IN)), "x: expected a tensor with one row per batch node"),
    ((torch.zeros(2, 4, dtype=torch.int64), torch.zeros(5, IN), [1, 2]), "input 0 must be a tensor on x's device"),
])
def test_its_inputs_are_checked(args, message):
    net = at.SAGEConv(IN, OUT)
    step = at.capture_batch_step(lambda g, x, *y: net(x, g).sum(), torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(AutosageError, match=message):
        step(*args)


@pytest.mark.parametrize("kwargs, message", [
    ({"warmup": 0}, "warmup must be an int >= 1"),
    ({"keep": True}, "keep must be an int >= 1"),
])
def test_its_settings_are_checked_before_anything_else(kwargs, message):
    net = torch.nn.Linear(2, 2)
    with pytest.raises(AutosageError, match=message):
        CapturedBatchStep(lambda g, x: x.sum(), torch.optim.Adam(net.parameters(), capturable=True), **kwargs)


def test_an_optimizer_is_required():
    with pytest.raises(AutosageError, match="expected a torch.optim.Optimizer, got list"):
        at.capture_batch_step(lambda g, x: x.sum(), [])
