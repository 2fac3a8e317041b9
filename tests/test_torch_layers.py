"""autosage_cli.torch layers against torch_geometric's layers of the same name, with the same
weights: outputs and parameter gradients equal in float64 on the CPU (the reference path); the
options of each constructor; what is refused."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")
pyg_nn = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed: no layer parity")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.errors import AutosageError  # noqa: E402
from torch_helpers import random_edge_index  # noqa: E402

N, IN = 41, 13


def _pair(name: str, *args, **kwargs):
    """(ours, PyG's) with PyG's initial weights copied into ours, both float64."""
    theirs = getattr(pyg_nn, name)(*args, **kwargs).double()
    ours = getattr(at, name)(*args, **kwargs).double()
    ours.load_state_dict(theirs.state_dict())  # strict: the parameter names match
    return ours, theirs


def _check_parity(ours, theirs, x, *graph_args, ours_graph=None, tol=1e-10):
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    a = ours(x1, *(graph_args if ours_graph is None else (ours_graph, *graph_args[1:])))
    b = theirs(x2, *graph_args)
    torch.testing.assert_close(a, b, rtol=tol, atol=tol)
    upstream = torch.randn(a.shape, dtype=a.dtype, generator=torch.Generator().manual_seed(1))
    (a * upstream).sum().backward()
    (b * upstream).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=tol, atol=tol)
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, theirs_params[name].grad, rtol=tol, atol=tol, msg=name)


@pytest.fixture(scope="module")
def data():
    edges = random_edge_index(N, seed=4)
    loops = torch.tensor([[3, 3, 4], [3, 3, 4]])  # a duplicated self-loop and a single one
    edges = torch.cat([edges, loops], 1)
    x = torch.randn(N, IN, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    return edges, x


@pytest.mark.parametrize("out", [5, 20])
@pytest.mark.parametrize("options", [{}, {"improved": True}, {"add_self_loops": False},
                                     {"normalize": False}, {"bias": False}])
def test_gcn_matches_pyg(data, out, options):
    edges, x = data
    ours, theirs = _pair("GCNConv", IN, out, **options)
    _check_parity(ours, theirs, x, edges)
    _check_parity(ours, theirs, x, edges, ours_graph=at.Graph.from_edge_index(edges, N))


@pytest.mark.parametrize("improved", [False, True])
def test_gcn_with_edge_weight_matches_pyg(data, improved):
    edges, x = data
    ours, theirs = _pair("GCNConv", IN, 7, improved=improved)
    w = torch.rand(edges.shape[1], dtype=torch.float64) + 0.5
    _check_parity(ours, theirs, x, edges, w)
    w1, w2 = w.clone().requires_grad_(), w.clone().requires_grad_()
    ours(x, edges, w1).sum().backward()
    theirs(x, edges, w2).sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("out", [5, 20])
@pytest.mark.parametrize("options", [{}, {"normalize": True}, {"root_weight": False},
                                     {"project": True}, {"bias": False}])
def test_sage_mean_matches_pyg(data, out, options):
    edges, x = data
    ours, theirs = _pair("SAGEConv", IN, out, **options)
    _check_parity(ours, theirs, x, edges)


@pytest.mark.parametrize("heads, out", [(1, 4), (3, 5)])
@pytest.mark.parametrize("options", [{}, {"concat": False}, {"beta": True}, {"root_weight": False}])
def test_transformer_matches_pyg(heads, out, options):
    edges = random_edge_index(N, seed=5, duplicates=False)
    x = torch.randn(N, IN, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    ours, theirs = _pair("TransformerConv", IN, out, heads=heads, **options)
    _check_parity(ours, theirs, x, edges)


def test_sparse_csr_adjacency_input(data):
    """A torch sparse CSR adjacency (the `adj_t` PyG's layers take) gives the same result."""
    _, x = data
    edges = random_edge_index(N, seed=4, duplicates=False)
    ours, theirs = _pair("SAGEConv", IN, 6)
    g = at.Graph.from_edge_index(edges, N)
    adj = torch.sparse_csr_tensor(g.rowptr, g.col, torch.ones(g.nnz), (N, N))
    torch.testing.assert_close(ours(x, adj), theirs(x, edges), rtol=1e-10, atol=1e-10)


def test_edge_index_maps_to_one_graph_while_unchanged(data):
    edges, x = data
    layer = at.GCNConv(IN, 3).double()
    e = edges.clone()
    g1 = at.nn.as_graph(e, N)
    layer(x, e)
    assert at.nn.as_graph(e, N) is g1
    e[0, 0] = (e[0, 0] + 1) % N    # modified in place: a new Graph
    assert at.nn.as_graph(e, N) is not g1


def test_layers_train_in_float32(data):
    """A few SGD steps of a 2-layer GCN: the loss goes down (CPU, float32)."""
    edges, x = data
    g = at.Graph.from_edge_index(edges, N)
    torch.manual_seed(0)
    model = torch.nn.ModuleList([at.GCNConv(IN, 16), at.GCNConv(16, 3)])
    labels = torch.randint(0, 3, (N,))
    opt = torch.optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for _ in range(20):
        opt.zero_grad()
        h = model[1](torch.relu(model[0](x.float(), g)), g)
        loss = torch.nn.functional.cross_entropy(h, labels)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


@pytest.mark.parametrize("make, message", [
    (lambda: at.SAGEConv(4, 4, aggr="max"), "only aggr='mean'"),
    (lambda: at.SAGEConv((4, 5, 6), 4), "in_channels must be a positive int or a"),
    (lambda: at.TransformerConv(4, 4, dropout=0.1), "dropout"),
    (lambda: at.TransformerConv(4, 4, edge_dim=3), "edge_dim"),
    (lambda: at.GCNConv(4, 4, normalize=False, add_self_loops=True), "needs normalize"),
])
def test_unsupported_options_are_refused(make, message):
    with pytest.raises(AutosageError, match=message):
        make()


@pytest.mark.parametrize("edge_weight", [False, True])
def test_a_widening_gcn_aggregates_its_input_first(data, monkeypatch, edge_weight):
    """in < out: the SpMM moves the input's 13 columns, not the output's 20, and with an input
    needing no gradient the backward runs no SpMM at all (only the GEMM's)."""
    from autosage_cli.torch import kernels

    edges, x = data
    ours, theirs = _pair("GCNConv", IN, 20)
    widths = []
    real = kernels.spmm
    monkeypatch.setattr(kernels, "spmm", lambda g, values, B, *a, **k: widths.append(B.shape[1]) or
                        real(g, values, B, *a, **k))
    w = torch.rand(edges.shape[1], dtype=torch.float64) if edge_weight else None
    out = ours(x, edges, w)
    torch.testing.assert_close(out, theirs(x, edges, w), rtol=1e-10, atol=1e-10)
    assert widths == [IN]
    out.sum().backward()
    assert widths == [IN] and ours.lin.weight.grad is not None and ours.bias.grad is not None
