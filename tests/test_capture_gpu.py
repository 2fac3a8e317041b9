"""Captured steps on a CUDA device (autosage_cli.torch.capture): a captured training step of GCN,
SAGE, GAT and TransformerConv stacks in float32 and bfloat16 gives the losses, outputs, gradients
and weights of the same steps run eagerly from the same initial weights, on a graph with a hub row
of 2,000 edges and empty rows, each step on new inputs; a captured forward follows its inputs;
and each rule's one-line error (CUDA inputs, static shapes, the same unchanged Graph, capturable
optimizers, no host synchronisation inside the step)."""
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
N, IN, CLASSES = 2100, 32, 7
WARMUP, STEPS = 2, 5        # eager calls, then a capture (and its replay) and two more replays
# ||captured - eager|| / ||eager||: the same kernels in the same order, but atomics (index_add,
# split rows) sum in another order every run, and Adam turns tiny gradient differences into steps
TOL = {torch.float32: 1e-3, torch.bfloat16: 5e-2}


@pytest.fixture(scope="module")
def edges():
    """Source -> target edges: node 1 receives 2,000 edges (a hub row), node 2 about 1,200, every
    7th node none (empty rows: SAGE and TransformerConv see them; GCN and GAT add self-loops);
    no duplicates (attention refuses them)."""
    gen = torch.Generator().manual_seed(0)
    dst = torch.randint(3, N, (4 * N,), generator=gen)          # the hubs get their edges below
    src = torch.randint(0, N, (4 * N,), generator=gen)
    dst = torch.cat([dst, torch.full((2000,), 1), torch.full((1200,), 2)])
    src = torch.cat([src, torch.arange(3, 2003), torch.randperm(N, generator=gen)[:1200]])
    keep = dst % 7 != 0
    edges = torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)
    assert (edges[1] == 1).sum() == 2000
    return edges


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("capture") / "decisions.json")


def _graph(edges, cache):
    return at.Graph.from_edge_index(edges.cuda(), N, cache=cache)


MODELS = {
    "gcn": lambda: Net([at.GCNConv(IN, 64), at.GCNConv(64, CLASSES)]),
    "sage": lambda: Net([at.SAGEConv(IN, 64), at.SAGEConv(64, CLASSES)]),
    "gat": lambda: Net([at.GATConv(IN, 8, heads=4), at.GATConv(32, CLASSES, heads=1)]),
    "transformer": lambda: Net([at.TransformerConv(IN, 8, heads=4), at.TransformerConv(32, CLASSES)]),
}


def _batch(i: int, dtype):
    gen = torch.Generator().manual_seed(100 + i)
    x = torch.randn(N, IN, generator=gen).to(device="cuda", dtype=dtype)
    return x, torch.randint(0, CLASSES, (N,), generator=gen).cuda()


def _loss_fn(net):
    def loss_fn(graph, x, y):
        out = net(x, graph)
        return F.cross_entropy(out, y), out
    return loss_fn


LR = 0.01


def _adam(net, fused: bool = False):
    return torch.optim.Adam(net.parameters(), lr=LR, capturable=True, fused=fused or None)


@pytest.mark.parametrize("dtype, fused", [(torch.float32, False), (torch.bfloat16, False), (torch.float32, True)],
                         ids=["float32", "bfloat16", "float32-fused-adam"])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_captured_training_equals_eager(edges, cache, model, dtype, fused):
    # fused: PyTorch's fused Adam (one launch for every parameter), capturable as well, in both runs
    torch.manual_seed(0)
    net = MODELS[model]().to(device="cuda", dtype=dtype)
    ref = copy.deepcopy(net)                       # the same initial weights, trained eagerly
    ref_opt, ref_graph, ref_loss_fn = _adam(ref, fused), _graph(edges, cache), _loss_fn(ref)
    step = at.capture_training_step(_loss_fn(net), _adam(net, fused), _graph(edges, cache),
                                    *_batch(0, dtype), warmup=WARMUP)
    tol, last = TOL[dtype], None
    noisy_so_far = {}                              # per parameter: elements a noisy gradient ever stepped
    for i in range(STEPS):
        x, y = _batch(i, dtype)
        loss, out = step(x, y)
        assert step.captured == (i >= WARMUP)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss, ref_out = ref_loss_fn(ref_graph, x, y)
        ref_loss.backward()
        ref_opt.step()
        assert out.dtype == dtype and rel_err(out, ref_out) < tol, (i, rel_err(out, ref_out))
        assert rel_err(loss, ref_loss) < tol, i
        scale = max(float(q.grad.norm()) for q in ref.parameters())
        for (name, p), q in zip(net.named_parameters(), ref.parameters()):
            # against the largest gradient where this one is nearly zero: the key bias's gradient
            # in dot-product attention is exactly zero (a row-constant shift of the scores), so
            # only rounding is left of it, in either run
            err = float((p.grad - q.grad).norm()) / max(float(q.grad.norm()), 1e-3 * scale)
            assert err < tol, (i, name, err)
            if float(q.grad.norm()) < 1e-3 * scale:
                # Adam normalises such a gradient: each run steps its rounding noise by up to about
                # lr per element and step, in its own direction; bound that, not a relative error
                assert float((p - q).abs().max()) <= 2.5 * LR * (i + 1), (i, name)
            else:
                # an element whose gradient is within the runs' agreement (tol) of zero may have
                # either sign in either run, and Adam steps it by lr whatever its size: bound those
                # as above, the rest relatively. Once stepped apart so, an element stays apart
                # (up to lr per such step) even when its later gradients agree: so every element
                # noisy at any step so far
                noisy = noisy_so_far.get(name, False) | (q.grad.abs() < tol * q.grad.abs().max())
                noisy_so_far[name] = noisy
                assert float((p - q).abs().masked_fill(~noisy, 0).max()) <= 2.5 * LR * (i + 1), (i, name)
                assert rel_err(p.masked_fill(noisy, 0), q.masked_fill(noisy, 0)) < tol, (i, name)
        if last is not None:                        # a replay read this step's inputs
            assert rel_err(out, last) > 10 * tol, i
        last = out.detach().clone()


def test_captured_forward_follows_its_inputs(edges, cache):
    torch.manual_seed(1)
    net = MODELS["gat"]().cuda().eval()
    g = _graph(edges, cache)
    forward = at.capture_inference(lambda graph, x: net(x, graph), g, _batch(0, torch.float32)[0])
    outputs = []
    for i in range(4):
        x = _batch(i, torch.float32)[0]
        out = forward(x)
        with torch.no_grad():
            expected = net(x, g)
        assert rel_err(out, expected) < 1e-4, i
        outputs.append(out)
    assert forward.captured
    assert outputs[1] is outputs[2] is outputs[3]   # static: every replay writes the same tensor


def test_zero_grad_between_replays_keeps_the_gradients_visible(edges, cache):
    net = MODELS["sage"]().cuda()
    opt = _adam(net)
    step = at.capture_training_step(_loss_fn(net), opt, _graph(edges, cache), *_batch(0, torch.float32),
                                    warmup=1)
    step(*_batch(0, torch.float32))
    step(*_batch(1, torch.float32))                 # captured
    opt.zero_grad(set_to_none=True)
    step(*_batch(2, torch.float32))
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


# ------------------------------------------------------------------ the rules
def _spmm_step(edges, cache, warmup=1):
    """A step whose ops run on the user's Graph itself (its plans sit in g.gpu)."""
    lin = torch.nn.Linear(IN, CLASSES).cuda()
    g = _graph(edges, cache)

    def loss_fn(graph, x, y):
        return F.cross_entropy(lin(at.spmm(graph, x)), y)

    x, y = _batch(0, torch.float32)
    return at.capture_training_step(loss_fn, _adam(lin), g, x, y, warmup=warmup), g, lin


def _one_line(info) -> str:
    text = str(info.value)
    assert "\n" not in text, text
    return text


def test_inputs_must_be_cuda_tensors(edges, cache):
    net = MODELS["gcn"]().cuda()
    x, y = _batch(0, torch.float32)
    with pytest.raises(AutosageError, match="input 0 is on cpu: a captured step takes CUDA tensors") as info:
        at.capture_training_step(_loss_fn(net), _adam(net), _graph(edges, cache), x.cpu(), y)
    _one_line(info)
    with pytest.raises(AutosageError, match="the Graph is on cpu"):
        at.capture_training_step(_loss_fn(net), _adam(net), at.Graph.from_edge_index(edges, N), x, y)
    cpu_net = MODELS["gcn"]()
    with pytest.raises(AutosageError, match="a parameter of Adam is on cpu"):
        at.capture_training_step(_loss_fn(cpu_net), _adam(cpu_net), _graph(edges, cache), x, y)


def test_a_non_capturable_optimizer_is_refused(edges, cache):
    net = MODELS["gcn"]().cuda()
    with pytest.raises(AutosageError, match="Adam is not capturable: build it with capturable=True") as info:
        at.capture_training_step(_loss_fn(net), torch.optim.Adam(net.parameters()), _graph(edges, cache),
                                 *_batch(0, torch.float32))
    _one_line(info)


def test_shapes_and_dtypes_are_static(edges, cache):
    step, _, _ = _spmm_step(edges, cache)
    x, y = _batch(1, torch.float32)
    step(x, y)
    step(x, y)                                      # captured
    for args, message in [((x[:-1], y), rf"input 0: a captured step takes \({N}, {IN}\) float32 on cuda:0"),
                          ((x.double(), y), "got .* float64"),
                          ((x,), "captured with 2 inputs, got 1")]:
        with pytest.raises(AutosageError, match=message) as info:
            step(*args)
        _one_line(info)
    step(x, y)                                      # still replays after the refusals


def test_replaying_on_another_or_a_changed_graph_is_refused(edges, cache):
    step, g, _ = _spmm_step(edges, cache)
    x, y = _batch(1, torch.float32)
    step(x, y)
    step(x, y, graph=g)                             # captured; the same Graph may be passed
    with pytest.raises(AutosageError, match="replays on the Graph it was captured with") as info:
        step(x, y, graph=_graph(edges, cache))
    _one_line(info)
    key = next(k for k in g.gpu if k[0] == "plan")
    del g.gpu[key]
    at.spmm(g, x)                                   # eagerly: a new plan object under the same key
    with pytest.raises(AutosageError, match="changed since the step was captured") as info:
        step(x, y)
    _one_line(info)

    step2, g2, _ = _spmm_step(edges, cache)
    step2(x, y)
    step2(x, y)
    g2.col.add_(0)                                  # modified in place (same values, new version)
    with pytest.raises(AutosageError, match="changed since the step was captured"):
        step2(x, y)


def test_host_synchronisation_inside_the_step_is_one_line_naming_the_cause(edges, cache):
    """A failed capture is recovered from: the device, and its random number generators."""
    net = MODELS["gcn"]().cuda()

    def loss_fn(graph, x, y):
        loss = F.cross_entropy(net(x, graph), y)
        if loss.item() > 1e9:                       # a host sync: fine eagerly, fatal in a capture
            raise AssertionError("unreachable")
        return loss

    step = at.capture_training_step(loss_fn, _adam(net), _graph(edges, cache), *_batch(0, torch.float32),
                                    warmup=1)
    step(*_batch(0, torch.float32))                 # the eager warm-up call runs
    before = torch.cuda.current_stream()
    with pytest.raises(AutosageError, match="capturing the training step failed: .*host synchronisation") as info:
        step(*_batch(1, torch.float32))
    _one_line(info)
    # torch's capture context leaves its side stream current when ending an invalidated capture
    # raises: the step puts the caller's stream back
    assert torch.cuda.current_stream() == before
    torch.cuda.synchronize()                        # the device is usable after the failed capture
    assert not step.captured
    assert torch.randn(5, device="cuda").shape == (5,)   # and so are its random numbers
