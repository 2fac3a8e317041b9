"""Bipartite layers and sampled-batch inputs on the CPU (the torch reference path), against
torch_geometric's layers with the same weights: SAGEConv and GATConv with `(x_src, x_dst)` inputs on
a rectangular graph (targets fewer than sources, as a sampler's layer hands them over), duplicate
edges included (each listing counts, as in PyG); outputs and every gradient."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")
pyg_nn = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed: no layer parity")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402

F64 = torch.float64
N_SRC, N_DST = 60, 23


def _block(seed: int, duplicates: bool = True) -> torch.Tensor:
    """edge_index (2, E) of sources < N_SRC -> targets < N_DST; target 0 receives nothing, target 1
    receives from most sources (a hub), and with `duplicates` some edges are listed twice."""
    gen = torch.Generator().manual_seed(seed)
    dst = torch.randint(1, N_DST, (150,), generator=gen)
    src = torch.randint(0, N_SRC, (150,), generator=gen)
    dst = torch.cat([dst, torch.ones(45, dtype=torch.int64)])
    src = torch.cat([src, torch.randperm(N_SRC, generator=gen)[:45]])
    edges = torch.stack([src, dst])
    return torch.cat([edges, edges[:, :20]], 1) if duplicates else edges


def _compare(ours, theirs, x_src, x_dst, edges, graphs):
    ours.load_state_dict(theirs.state_dict())    # strict: PyG's parameter names and shapes
    for graph in graphs:
        a_src, a_dst = x_src.clone().requires_grad_(), x_dst.clone().requires_grad_()
        b_src, b_dst = x_src.clone().requires_grad_(), x_dst.clone().requires_grad_()
        a, b = ours((a_src, a_dst), graph), theirs((b_src, b_dst), edges)
        assert a.shape == (N_DST, b.shape[1])
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
        ours.zero_grad(), theirs.zero_grad()
        upstream = torch.randn(a.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
        (a * upstream).sum().backward()
        (b * upstream).sum().backward()
        torch.testing.assert_close(a_src.grad, b_src.grad, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(a_dst.grad, b_dst.grad, rtol=1e-10, atol=1e-10)
        theirs_params = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            torch.testing.assert_close(p.grad, theirs_params[name].grad, rtol=1e-10, atol=1e-10, msg=name)


def _inputs(a: int, b: int):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(N_SRC, a, dtype=F64, generator=gen), torch.randn(N_DST, b, dtype=F64, generator=gen)


@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("channels, out", [((9, 5), 4), ((6, 6), 11)])
def test_bipartite_sage_matches_pyg(channels, out, duplicates):
    edges = _block(3, duplicates)
    x_src, x_dst = _inputs(*channels)
    graphs = (edges, at.Graph.from_edge_index(edges, size=(N_SRC, N_DST)))
    _compare(at.SAGEConv(channels, out).double(), pyg_nn.SAGEConv(channels, out).double(), x_src, x_dst,
             edges, graphs)


@pytest.mark.parametrize("duplicates", [False, True])
@pytest.mark.parametrize("options", [{}, {"heads": 3}, {"heads": 2, "concat": False},
                                     {"add_self_loops": False}])
def test_bipartite_gat_matches_pyg(options, duplicates):
    edges = _block(4, duplicates)
    x_src, x_dst = _inputs(7, 5)
    graphs = (edges, at.Graph.from_edge_index(edges, size=(N_SRC, N_DST)))
    _compare(at.GATConv((7, 5), 4, **options).double(), pyg_nn.GATConv((7, 5), 4, **options).double(),
             x_src, x_dst, edges, graphs)


def test_a_square_gat_on_a_duplicated_edge_list_matches_pyg():
    n = 40
    gen = torch.Generator().manual_seed(5)
    edges = torch.randint(0, n, (2, 160), generator=gen)
    edges = torch.cat([edges, edges[:, :30]], 1)
    x = torch.randn(n, 6, dtype=F64, generator=gen)
    theirs = pyg_nn.GATConv(6, 3, heads=2).double()
    ours = at.GATConv(6, 3, heads=2).double()
    ours.load_state_dict(theirs.state_dict())
    torch.testing.assert_close(ours(x, edges), theirs(x, edges), rtol=1e-10, atol=1e-10)


def test_a_bipartite_graph_of_the_wrong_shape_is_refused():
    g = at.Graph.from_edge_index(_block(3), size=(N_SRC, N_DST))
    layer = at.SAGEConv((4, 4), 2).double()
    x_src, x_dst = _inputs(4, 4)
    with pytest.raises(AutosageError, match="expected 23 x 50"):
        layer((x_src[:50], x_dst), g)
    with pytest.raises(AutosageError, match="in_channels must be a positive int or a"):
        at.SAGEConv((4, 4, 4), 2)
