"""The build's device part at a capacity (canonical.sort_edges with padding and device-scalar sizes,
what a captured build replays) equals the build without padding; the capacity ladder; on a GPU,
Graphs built through captured builds equal eagerly built ones and stay valid after later builds."""
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

from autosage_cli.torch import Graph, captured_build  # noqa: E402
from autosage_cli.torch.canonical import _canonical, canonical_order, sort_edges  # noqa: E402

from torch_helpers import random_edge_index  # noqa: E402


def _padded(row, col, weight, shape, keep_duplicates, spare_edges, spare_nodes, seed=0):
    """canonical's result when the device part runs at a capacity past the edges and nodes, with
    garbage in the padding and the sizes as 0-dim tensors (as in a captured build)."""
    gen = torch.Generator().manual_seed(seed)
    E, (n_rows, n_cols) = row.numel(), shape
    n_nodes = max(n_rows, n_cols) + spare_nodes
    pad = lambda t, fill: torch.cat([t, fill]) # noqa: E731
    junk = lambda hi: torch.randint(-5, hi + 50, (spare_edges,), generator=gen)  # noqa: E731
    row_p, col_p = pad(row, junk(n_rows)), pad(col, junk(n_cols))
    weight_p = None if weight is None else pad(weight, torch.full((spare_edges,), float("nan")))
    sizes = tuple(torch.tensor(v) for v in (E, n_rows, n_cols))
    found = sort_edges(row_p, col_p, weight_p, sizes, n_nodes, keep_duplicates, n_rows == n_cols)
    return _canonical(found, True, E, shape, n_nodes)


def _same(a, b):
    assert torch.equal(a.key, b.key) and torch.equal(a.user_to_canon, b.user_to_canon)
    assert (a.identity, a.all_ones, a.listed_loops, a.canon_loops) == (b.identity, b.all_ones, b.listed_loops, b.canon_loops)
    assert a.stats == b.stats and a.looped_stats == b.looped_stats
    assert (a.listed is None) == (b.listed is None)
    if a.listed is not None:
        assert all(torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a.listed, b.listed))


@pytest.mark.parametrize("keep_duplicates", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shape", [(50, 50), (50, 31), (20, 64)])
def test_padding_and_device_sizes_change_nothing(shape, weighted, keep_duplicates):
    """Edges with duplicates, self-loops, a hub row and empty rows: the padded run gives the same
    canonical order, maps, flags and stats (padding degree vectors taken out by decode)."""
    gen = torch.Generator().manual_seed(3)
    n_rows, n_cols = shape
    row = torch.cat([torch.randint(0, n_rows, (300,), generator=gen), torch.full((40,), 7)])
    col = torch.cat([torch.randint(0, n_cols, (300,), generator=gen), torch.randint(0, n_cols, (40,), generator=gen)])
    row = torch.where(row % 5 == 4, (row + 1) % n_rows, row)      # empty rows
    col[:12] = row[:12] % n_cols                                   # some self-loops
    weight = torch.rand(row.numel(), generator=gen) if weighted else None
    eager = canonical_order(row, col, weight, shape, keep_duplicates)
    for spare_edges, spare_nodes in [(0, 0), (37, 0), (200, 13)]:
        _same(_padded(row, col, weight, shape, keep_duplicates, spare_edges, spare_nodes), eager)


def test_padding_does_not_hide_an_index_out_of_range_nor_a_bad_weight():
    from autosage_cli.errors import AutosageError

    row, col = torch.tensor([0, 1, 9]), torch.tensor([1, 2, 0])
    with pytest.raises(AutosageError, match="row: index out of range"):
        _padded(row, col, None, (5, 5), False, 20, 4)
    with pytest.raises(AutosageError, match="NaN or Inf"):
        _padded(torch.tensor([0, 1]), torch.tensor([1, 2]), torch.tensor([1.0, float("inf")]), (5, 5), False, 20, 4)


def test_identity_and_all_ones_survive_padding():
    row, col = torch.tensor([0, 0, 1, 3]), torch.tensor([1, 2, 0, 3])
    built = _padded(row, col, torch.ones(4), (4, 4), False, 50, 9)
    assert built.identity and built.all_ones and built.listed is None and built.canon_loops == 1


def test_capacity_ladder_is_quarter_octaves_and_covers():
    caps = [captured_build.capacity(n) for n in (1, 1024, 1025, 5000, 438_000, 10**8)]
    assert caps[0] == caps[1] == 1024 and caps[2] > 1024
    for n, c in zip((1, 1024, 1025, 5000, 438_000, 10**8), caps):
        assert n <= c and (c <= 1024 or c < n * 1.2)


def test_no_captured_build_off_cuda():
    row = torch.tensor([0, 1])
    assert captured_build.sort_edges(sort_edges, row, row, None, (2, 2), False) is None


gpu = pytest.mark.gpu


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible")
    return torch.device("cuda")


def _eager(build):
    """The result of build() with captured builds off (the eager device ops)."""
    captured_build.disabled.append("test: eager")
    try:
        return build()
    finally:
        captured_build.disabled.pop()


@gpu
@pytest.mark.parametrize("keep_duplicates", [False, True])
def test_captured_builds_equal_eager_builds_across_batches(keep_duplicates):
    """Batches of one capacity replay one captured build; each Graph equals the eager build's and
    stays valid after later builds overwrite the buffers (a larger batch first leaves its edges in
    the padding of the smaller ones)."""
    dev = _cuda()
    captured_build.forget()
    graphs, eager = [], []
    n = 3000
    for seed, drop in enumerate([0, 150, 60, 20]):
        edges = random_edge_index(n, seed=seed, duplicates=True).to(dev)
        edges = torch.cat([edges, torch.tensor([[5] * 300, list(range(300))], device=dev)], 1)   # a hub
        edges = edges[:, :edges.shape[1] - drop]
        w = torch.rand(edges.shape[1], device=dev)
        graphs.append((Graph.from_edge_index(edges, n), Graph.from_edge_index(edges, n, edge_weight=w)))
        eager.append(_eager(lambda: (Graph.from_edge_index(edges, n), Graph.from_edge_index(edges, n, edge_weight=w))))
        if keep_duplicates:
            graphs[-1] = tuple(g.with_duplicates() for g in graphs[-1])
            eager[-1] = tuple(g.with_duplicates() for g in eager[-1])
    assert not captured_build.disabled, captured_build.disabled
    # unweighted and weighted at one capacity
    assert len(captured_build._builds) == 2, [k[1:3] for k in captured_build._builds]
    for got, want in zip(graphs, eager):
        for a, b in zip(got, want):
            for name in ("rowptr", "row", "col", "weight", "user_to_canon"):
                x, y = getattr(a, name), getattr(b, name)
                assert (x is None) == (y is None), name
                # a duplicate's weight is a sum by atomics, in no fixed order: equal to rounding
                assert x is None or (torch.allclose(x, y, rtol=1e-6, atol=0) if name == "weight"
                                     else torch.equal(x, y)), name
            assert a.structure_stats() == b.structure_stats()
            assert a._looped_stats == b._looped_stats and a._canon_loops == b._canon_loops


@gpu
def test_captured_builds_of_bipartite_batches_and_layers_agree():
    """A bipartite batch (a sampler's layer) built through a captured build runs SpMM equal to the
    eager build's Graph."""
    import autosage_cli.torch as at

    dev = _cuda()
    src = torch.randint(0, 900, (5000,), device=dev)
    dst = torch.randint(0, 300, (5000,), device=dev)
    edge_index = torch.stack([src, dst])
    g = Graph.from_edge_index(edge_index, size=(900, 300), tune=False)
    ref = _eager(lambda: Graph.from_edge_index(edge_index, size=(900, 300), tune=False))
    x = torch.randn(900, 32, device=dev)
    assert torch.allclose(at.spmm(g, x), at.spmm(ref, x), atol=1e-5)
    assert g.structure_stats() == ref.structure_stats()


def test_a_carried_over_decision_rebinds_the_latest_plan(monkeypatch):
    """torch.cuda._plan_of_decision: the first graph of a decision prepares its plan, later graphs
    get the latest plan rebound to them, and a plan that cannot rebind (None) is prepared anew."""
    from autosage_cli.scheduler.decisions import plans
    from autosage_cli.torch import cuda

    prepared = []

    class FakePlan:
        def __init__(self, graph, can_rebind=True):
            self.graph, self.can_rebind = graph, can_rebind

        def rebind(self, graph):
            return FakePlan(graph, self.can_rebind) if self.can_rebind else None

    def fake_plan_for(dgraph, decision, k, heads, scale, dtype, op=None):
        prepared.append(dgraph)
        return FakePlan(dgraph, decision["schedule"] != "partitioned")

    monkeypatch.setattr(plans, "plan_for", fake_plan_for)
    monkeypatch.setattr(cuda, "_LATEST", {})
    rows = {"backend": "native", "schedule": "rows"}
    made = [cuda._plan_of_decision(g, rows, 64, 1, None, "float32") for g in ("g1", "g2", "g3")]
    assert [p.graph for p in made] == ["g1", "g2", "g3"] and prepared == ["g1"]
    other = cuda._plan_of_decision("g4", rows, 32, 1, None, "float32")     # another width
    assert other.graph == "g4" and prepared == ["g1", "g4"]
    part = {"backend": "native", "schedule": "partitioned"}
    for g in ("g5", "g6"):
        assert cuda._plan_of_decision(g, part, 64, 1, None, "float32").graph == g
    assert prepared == ["g1", "g4", "g5", "g6"]
    # a fused SpMM runs SpMM's schedule names with other kernels: never SpMM's plan rebound
    assert cuda._plan_of_decision("g7", rows, 64, 1, None, "float32", "spmm-bias").graph == "g7"
    assert prepared[-1] == "g7"
