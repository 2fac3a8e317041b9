"""GCNConv and SAGEConv as one autograd node on an eager call (autosage_cli.torch.fused_layer): the
same outputs and gradients as the layer built from separate ops (which autocast, mixed types and
other tracers still take), one node per layer (none of ours where an input needing no gradient is
aggregated first and no root term follows: a GEMM autograd records), no transposed SpMM for an
input needing no gradient, and a second derivative through it. Under torch.compile, one custom op
per layer each way (autosage::linear_aggregate and its backward op), which torch.library.opcheck
accepts, with outputs and gradients equal to eager ones. On the CPU (the reference kernels), in
float64."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.torch import backward, fused_layer, handles  # noqa: E402
from autosage_cli.torch.training import Net  # noqa: E402
from torch_helpers import autograd_nodes, bipartite_graph, leaf, random_edge_index  # noqa: E402

N, N_DST = 37, 15
F64 = torch.float64


@pytest.fixture(scope="module")
def graph():
    return at.Graph.from_edge_index(random_edge_index(N, seed=3), N)


@pytest.fixture(scope="module")
def block():
    return bipartite_graph(N, N_DST, 90)


def _x(rows: int, cols: int, seed: int) -> torch.Tensor:
    return torch.randn(rows, cols, dtype=F64, generator=torch.Generator().manual_seed(seed)).requires_grad_()


def _run(layer, x, graph, fused: bool, monkeypatch):
    """(output, gradients of x's and every parameter) with the fused path on or off."""
    with monkeypatch.context() as m:
        if not fused:
            m.setattr(fused_layer, "applies", lambda *tensors: False)
        layer.zero_grad()
        out = layer(x, graph)
    inputs = [t for t in (x if isinstance(x, tuple) else (x,)) if t.requires_grad]
    upstream = torch.randn(out.shape, dtype=F64, generator=torch.Generator().manual_seed(1))
    grads = torch.autograd.grad(out, inputs + list(layer.parameters()), upstream, allow_unused=True)
    return out, grads


LAYERS = {
    "gcn-transform-first": lambda: at.GCNConv(9, 4),
    "gcn-aggregate-first": lambda: at.GCNConv(4, 9),
    "gcn-no-bias": lambda: at.GCNConv(9, 4, bias=False),
    "gcn-unnormalised": lambda: at.GCNConv(4, 9, normalize=False),
    "sage-transform-first": lambda: at.SAGEConv(9, 4),
    "sage-aggregate-first": lambda: at.SAGEConv(4, 9),
    "sage-no-root": lambda: at.SAGEConv(9, 4, root_weight=False),
    "sage-no-bias": lambda: at.SAGEConv(4, 9, bias=False),
    "sage-normalize": lambda: at.SAGEConv(4, 9, normalize=True),
    "gcn-relu-transform-first": lambda: at.GCNConv(9, 4, act="relu"),
    "gcn-relu-aggregate-first": lambda: at.GCNConv(4, 9, act="relu"),
    "gcn-relu-no-bias": lambda: at.GCNConv(4, 9, act="relu", bias=False),
    "sage-relu-transform-first": lambda: at.SAGEConv(9, 4, act="relu"),
    "sage-relu-aggregate-first": lambda: at.SAGEConv(4, 9, act="relu"),
    "sage-relu-no-root": lambda: at.SAGEConv(9, 4, act="relu", root_weight=False),
    "sage-relu-no-root-aggregate-first": lambda: at.SAGEConv(4, 9, act="relu", root_weight=False),
    "sage-relu-normalize": lambda: at.SAGEConv(4, 9, act="relu", normalize=True),
}


@pytest.mark.parametrize("input_grad", [True, False], ids=["x-grad", "x-no-grad"])
@pytest.mark.parametrize("name", list(LAYERS))
def test_one_node_computes_what_the_separate_ops_do(graph, monkeypatch, name, input_grad):
    torch.manual_seed(0)
    layer = LAYERS[name]().double()
    x = _x(N, layer.in_channels, seed=2).requires_grad_(input_grad)
    out, grads = _run(layer, x, graph, True, monkeypatch)
    ref_out, ref_grads = _run(layer, x, graph, False, monkeypatch)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, ref_grads):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    python_nodes = [type(n).__name__ for n in autograd_nodes(out)
                    if isinstance(n, torch.autograd.function.BackwardCFunction)]
    if not input_grad and layer.in_channels < layer.out_channels and not getattr(layer, "root_weight", False):
        # aggregated first from features needing no gradient, no root term: a GEMM autograd records
        assert python_nodes == []
        return
    assert python_nodes == ["LinearAggregateBackward"]
    node = out.grad_fn
    while type(node).__name__ != "LinearAggregateBackward":   # the normalisation's nodes, then act's
        assert isinstance(layer, at.SAGEConv) and layer.normalize, type(node).__name__
        node = node.next_functions[0][0]
    if layer.act is not None and not (isinstance(layer, at.SAGEConv) and layer.normalize):
        assert node is out.grad_fn       # the activation inside the node
        assert (out >= 0).all() and (out == 0).any()


@pytest.mark.parametrize("input_grad", [True, False], ids=["x-grad", "x-no-grad"])
@pytest.mark.parametrize("act", [None, "relu"])
@pytest.mark.parametrize("widths", [(9, 4), (4, 9)], ids=["transform-first", "aggregate-first"])
@pytest.mark.parametrize("root", [True, False], ids=["root", "no-root"])
def test_bipartite_sage(block, monkeypatch, widths, root, act, input_grad):
    layer = at.SAGEConv(widths[0], widths[1], root_weight=root, act=act).double()
    x = tuple(_x(rows, widths[0], seed=seed).requires_grad_(input_grad) for rows, seed in ((N, 4), (N_DST, 5)))
    out, grads = _run(layer, x, block, True, monkeypatch)
    ref_out, ref_grads = _run(layer, x, block, False, monkeypatch)
    assert out.shape == (N_DST, widths[1])
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, ref_grads):
        if want is None:          # x_dst without the root term: unused on both paths
            assert got is None
        else:
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_an_aggregating_first_layer_runs_no_transposed_spmm_for_an_input_without_gradient(graph, monkeypatch):
    calls = []
    real = backward.spmm_t
    monkeypatch.setattr(backward, "spmm_t", lambda *a: calls.append(a[2].shape) or real(*a))
    layer = at.SAGEConv(4, 9).double()
    layer(_x(N, 4, seed=1).requires_grad_(False), graph).sum().backward()
    assert calls == [] and layer.lin_l.weight.grad is not None and layer.lin_r.weight.grad is not None
    layer(_x(N, 4, seed=1), graph).sum().backward()
    assert calls == [(N, 4)]


@pytest.mark.parametrize("widths", [(9, 4), (4, 9)], ids=["transform-first", "aggregate-first"])
def test_the_eager_node_calls_its_kernels_without_the_ops_dispatch_and_notes_its_graph(graph, monkeypatch, widths):
    """An eager node's SpMMs (forward, and a backward recording nothing) run their implementations
    directly: no ops.py dispatch (host time on every call), yet the Graph is noted where a captured
    step collects the Graphs its ops ran on. A backward under create_graph dispatches, and records."""
    from autosage_cli.torch import ops, ops_epilogue
    from autosage_cli.torch.norm import mean_graph
    dispatched = []
    real = ops._call
    for module in (ops, ops_epilogue):
        monkeypatch.setattr(module, "_call", lambda *a: dispatched.append(a[0]) or real(*a))
    layer = at.SAGEConv(*widths, act="relu").double()
    x = _x(N, widths[0], seed=8)
    with handles.recording() as seen:
        out = layer(x, graph)
        (d_x,) = torch.autograd.grad(out.square().sum(), [x])
    assert dispatched == [] and id(mean_graph(graph)) in seen
    (d_x,) = torch.autograd.grad(layer(x, graph).square().sum(), [x], create_graph=True)
    assert dispatched and d_x.grad_fn is not None


@pytest.mark.parametrize("act", [None, "relu"])
def test_second_derivative(graph, act):
    layer = at.SAGEConv(3, 5, act=act).double()
    x = _x(N, 3, seed=6)
    torch.autograd.gradgradcheck(lambda x, w: torch.nn.functional.linear(layer(x, graph), w).tanh(),
                                 (x, _x(2, 5, seed=7)))


def test_applies_only_where_one_node_computes_what_the_ops_do():
    from torch._subclasses.fake_tensor import FakeTensorMode

    x, w = _x(N, 9, seed=2), torch.randn(4, 9, dtype=F64)
    assert fused_layer.applies(x, None, w)
    assert not fused_layer.applies(x, w.float())          # mixed types
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not fused_layer.applies(x, w)
    with FakeTensorMode() as mode:                        # a tracer's tensors
        assert not fused_layer.applies(mode.from_tensor(x), w)


def test_autocast_takes_the_separate_ops(graph):
    layer = at.SAGEConv(9, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = layer(_x(N, 9, seed=2).float(), graph)
    assert out.dtype == torch.bfloat16 and type(out.grad_fn).__name__ != "LinearAggregateBackward"


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_the_suites_models_with_their_relu_fused_compute_pyg_s_function(model):
    pyg = pytest.importorskip("torch_geometric.nn")
    from autosage_cli.torch import training

    theirs = training.build(pyg, model, 6, 3).double()
    ours = training.build(at, model, 6, 3).double()
    assert ours.activated[0] and ours.layers[0].act == "relu" and not theirs.activated[0]
    ours.load_state_dict(theirs.state_dict())
    x = _x(N, 6, seed=3)
    edge_index = random_edge_index(N, seed=4, duplicates=False)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]   # no loops: PyG's GCN adds them its way
    a, b = ours(x, at.Graph.from_edge_index(edge_index, N)), theirs(x, edge_index)
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    (ga,), (gb,) = torch.autograd.grad(a.square().sum(), [x]), torch.autograd.grad(b.square().sum(), [x])
    torch.testing.assert_close(ga, gb, rtol=1e-10, atol=1e-10)


def test_the_column_sums_keep_a_few_ones_vectors_of_real_tensors_only():
    from torch._subclasses.fake_tensor import FakeTensorMode

    fused_layer._ONES.clear()
    for rows in range(3, 3 + fused_layer._ONES_KEPT + 4):       # a mini-batch's varying row counts
        d = torch.randn(rows, 5, dtype=F64)
        torch.testing.assert_close(fused_layer._column_sums(d.t()), d.sum(0), rtol=1e-12, atol=1e-12)
    assert len(fused_layer._ONES) == fused_layer._ONES_KEPT
    with FakeTensorMode() as mode:
        fused_layer._column_sums(mode.from_tensor(torch.randn(100, 5)).t())
    assert all(type(t) is torch.Tensor for t in fused_layer._ONES.values())


# ------------------------------------------------------------------ under torch.compile
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
