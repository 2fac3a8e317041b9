"""The ops' eager path (autosage_cli.torch.ops): an eager call runs the implementation under a plain
autograd.Function (or none when nothing needs a gradient) without the custom op's dispatcher, and
reaches the custom op whenever something traces — torch.compile, a dispatch mode (fake tensors),
functorch — with the same values and gradients either way. On the CPU (the reference path)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli.torch import ops  # noqa: E402
from torch_helpers import leaf, random_edge_index  # noqa: E402

N = 19


@pytest.fixture(scope="module")
def graph():
    return at.Graph.from_edge_index(random_edge_index(N, seed=5, duplicates=False), N)


@pytest.fixture
def op_calls(monkeypatch):
    """Counts of calls reaching each custom op (by name) while the test runs."""
    calls: dict = {}
    for name in ("spmm_op", "spmm_t_op", "sddmm_op", "attention_op", "additive_attention_op",
                 "attention_backward_op", "additive_attention_backward_op"):
        real = getattr(ops, name)

        def counted(*args, _real=real, _name=name):
            calls[_name] = calls.get(_name, 0) + 1
            return _real(*args)
        monkeypatch.setattr(ops, name, counted)
    return calls


def _every_op(g, grad: bool):
    """Sum of every op's output on g, inputs needing gradients when `grad`."""
    B, X = leaf(N, 4, seed=1), leaf(N, 4, seed=2)
    Q, K, V = (leaf(N, 2, 3, seed=s) for s in (3, 4, 5))
    a_dst, a_src = leaf(N, 2, seed=6), leaf(N, 2, seed=7)
    values = leaf(g.nnz, seed=8)
    tensors = (B, X, Q, K, V, a_dst, a_src, values)
    for t in tensors:
        t.requires_grad_(grad)
    out = (at.spmm(g, B).sum() + ops.spmm(g, values, B).sum() + at.sddmm(g, X, B).sum()
           + at.attention(g, Q, K, V).sum() + at.additive_attention(g, a_dst, a_src, V).sum())
    return out, tensors


@pytest.mark.parametrize("grad", [False, True], ids=["no-grad-inputs", "grad-inputs"])
def test_eager_calls_skip_the_dispatcher(graph, op_calls, grad):
    out, tensors = _every_op(graph, grad)
    if grad:
        out.backward()
        assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in tensors)
    assert op_calls == {}


def test_the_eager_path_and_the_custom_op_agree(graph):
    eager_out, eager_in = _every_op(graph, True)
    eager_grads = torch.autograd.grad(eager_out, eager_in)
    # the same calls forced through the custom ops (as a trace would take them)
    real = ops._traced
    try:
        ops._traced = lambda *tensors: True
        op_out, op_in = _every_op(graph, True)
        op_grads = torch.autograd.grad(op_out, op_in)
    finally:
        ops._traced = real
    assert torch.equal(eager_out, op_out)
    for a, b in zip(eager_grads, op_grads):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


def test_a_dispatch_mode_or_fake_tensors_reach_the_custom_op(graph, op_calls):
    from torch._subclasses.fake_tensor import FakeTensorMode

    B = torch.randn(N, 3, dtype=torch.float64)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake = mode.from_tensor(B)
        out = ops.spmm(graph, None, fake)
    assert out.shape == (N, 3) and op_calls == {"spmm_op": 1}


def test_compile_reaches_the_custom_op_and_eager_does_not(graph, op_calls):
    B = torch.randn(N, 3, dtype=torch.float64)
    expected = at.spmm(graph, B)
    assert op_calls == {}
    compiled = torch.compile(lambda b: at.spmm(graph, b), fullgraph=True, backend="eager")
    assert torch.allclose(compiled(B), expected)
    assert op_calls.get("spmm_op", 0) >= 1


def test_second_order_gradients_on_the_eager_path(graph, op_calls):
    B = leaf(N, 3, seed=11)
    values = leaf(graph.nnz, seed=12)
    assert torch.autograd.gradgradcheck(lambda v, b: ops.spmm(graph, v, b), (values, B))
    assert op_calls == {}


def test_the_attention_backward_is_once_differentiable_on_the_eager_path(graph):
    Q, K, V = (leaf(N, 2, 3, seed=s) for s in (13, 14, 15))
    out = at.attention(graph, Q, K, V).square().sum()
    (dQ,) = torch.autograd.grad(out, Q, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|double backward|twice"):
        dQ.sum().backward()


def test_an_eager_call_notes_its_graph_in_a_recording_block_under_its_birth_handle():
    """A captured step checks every Graph its ops ran on (handles.recording); the eager path skips
    the custom op, yet still notes the Graph, whose handle it had since it was made."""
    from autosage_cli.torch import handles

    g = at.Graph.from_edge_index(random_edge_index(N, seed=9, duplicates=False), N)
    born = g._op_handle
    with handles.recording() as seen:
        at.spmm(g, torch.randn(N, 2, dtype=torch.float64))
    assert seen == {id(g): g} and g._op_handle == born and handles.graph(born) is g
