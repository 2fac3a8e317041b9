"""GCNConv and SAGEConv under torch.compile: each layer one custom op each way
(autosage::linear_aggregate and its backward op, torch/fused_layer.py), which torch.library.opcheck
accepts (schema, fake shapes, autograd registration, AOT dispatch), and a compiled stack's outputs and
gradients equal eager ones. On the CPU (the reference kernels), in float64."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.torch import fused_layer, handles  # noqa: E402
from autosage_cli.torch.training import Net  # noqa: E402
from torch_helpers import leaf, random_edge_index  # noqa: E402

N, N_DST = 29, 11
F64 = torch.float64


@pytest.fixture(scope="module")
def graph():
    return at.Graph.from_edge_index(random_edge_index(N, seed=3), N)


@pytest.fixture(scope="module")
def block():
    """A bipartite graph of N_DST targets by N sources (a sampler's layer)."""
    gen = torch.Generator().manual_seed(8)
    edges = torch.stack([torch.randint(0, N, (70,), generator=gen), torch.randint(1, N_DST, (70,), generator=gen)])
    return at.Graph.from_edge_index(edges, size=(N, N_DST))


@pytest.mark.parametrize("bipartite", [False, True], ids=["one-node-set", "bipartite"])
@pytest.mark.parametrize("root", [True, False], ids=["root", "no-root"])
@pytest.mark.parametrize("relu", [False, True], ids=["linear", "relu"])
@pytest.mark.parametrize("widths", [(6, 3), (3, 6)], ids=["transform-first", "aggregate-first"])
def test_the_layer_ops_pass_opcheck(graph, block, widths, relu, root, bipartite):
    g = block if bipartite else graph
    n_in, n_out = widths
    x = leaf(g.n_cols, n_in, seed=1)
    x_dst = leaf(g.n_rows, n_in, seed=2) if bipartite else None
    weight_l, bias = leaf(n_out, n_in, seed=3), leaf(n_out, seed=4)
    weight_r = leaf(n_out, n_in, seed=5) if root else None
    aggregate_first = n_in < n_out
    args = (handles.handle(g), x, x_dst, weight_l, bias, weight_r, aggregate_first, relu, g.n_rows)
    torch.library.opcheck(fused_layer.layer_op, args)

    out, kept = fused_layer.layer_op(*[a.detach() if isinstance(a, torch.Tensor) else a for a in args])
    root_input = (x if x_dst is None else x_dst).detach() if root else None
    backward_args = (handles.handle(g), leaf(g.n_rows, n_out, seed=6).detach(),
                     kept if aggregate_first else x.detach(), root_input, weight_l.detach(),
                     None if weight_r is None else weight_r.detach(), out if relu else None, aggregate_first,
                     not bipartite, g.n_cols, True, bipartite and root, True, True, root)
    torch.library.opcheck(fused_layer.layer_backward_op, backward_args)
    grads = fused_layer.layer_backward_op(*backward_args)
    assert grads[0].shape == x.shape and grads[2].shape == weight_l.shape and grads[3].shape == bias.shape
    assert grads[4].numel() == (weight_r.numel() if root else 0)


def _recorded_compile(module):
    """(compiled module, forward graphs, backward graphs): AOTAutograd with compilers that keep
    the graphs they are given and run them as they are."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    forward, backward = [], []

    def keep(into):
        return lambda gm, _inputs: into.append(gm) or make_boxed_func(gm.forward)
    backend = aot_autograd(fw_compiler=keep(forward), bw_compiler=keep(backward))
    return torch.compile(module, fullgraph=True, backend=backend), forward, backward


def _autosage_calls(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("autosage.")]


MODELS = {
    "gcn": lambda: Net([at.GCNConv(5, 8, act="relu"), at.GCNConv(8, 3)], activated=(True,)),
    "sage": lambda: Net([at.SAGEConv(5, 8, act="relu"), at.SAGEConv(8, 8, act="relu"), at.SAGEConv(8, 3)],
                        activated=(True, True)),
}


@pytest.mark.slow
@pytest.mark.parametrize("input_grad", [False, True], ids=["x-no-grad", "x-grad"])
@pytest.mark.parametrize("model", list(MODELS))
def test_a_compiled_stack_is_one_op_per_layer_each_way_and_equals_eager(graph, model, input_grad):
    torch.manual_seed(0)
    net = MODELS[model]().double()
    x = torch.randn(N, 5, dtype=F64)
    eager_x = x.clone().requires_grad_(input_grad)
    eager = net(eager_x, graph)
    eager.square().sum().backward()
    eager_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad(set_to_none=True)

    torch._dynamo.reset()
    compiled, forward, backward = _recorded_compile(net)
    compiled_x = x.clone().requires_grad_(input_grad)
    out = compiled(compiled_x, graph)
    out.square().sum().backward()
    layers = len(net.layers)
    assert _autosage_calls(forward[0]) == ["autosage.linear_aggregate.default"] * layers
    assert _autosage_calls(backward[0]) == ["autosage.linear_aggregate_backward.default"] * layers
    torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
    if input_grad:
        torch.testing.assert_close(compiled_x.grad, eager_x.grad, rtol=1e-12, atol=1e-12)
    for p, ref in zip(net.parameters(), eager_grads):
        torch.testing.assert_close(p.grad, ref, rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()


@pytest.mark.slow
def test_a_compiled_bipartite_sage_layer_equals_eager(block):
    torch.manual_seed(0)
    layer = at.SAGEConv(4, 6, act="relu").double()
    x_src, x_dst = leaf(N, 4, seed=1), leaf(N_DST, 4, seed=2)
    eager = layer((x_src, x_dst), block)
    eager_grads = torch.autograd.grad(eager.square().sum(), [x_src, x_dst, *layer.parameters()])
    torch._dynamo.reset()
    compiled, forward, _ = _recorded_compile(layer)
    out = compiled((x_src, x_dst), block)
    grads = torch.autograd.grad(out.square().sum(), [x_src, x_dst, *layer.parameters()])
    assert _autosage_calls(forward[0]) == ["autosage.linear_aggregate.default"]
    torch.testing.assert_close(out, eager, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, eager_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch._dynamo.reset()
