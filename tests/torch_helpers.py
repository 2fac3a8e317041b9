"""Random graphs and dense float64 references for the autosage_cli.torch tests (CPU and GPU)."""
from __future__ import annotations

import pytest
import torch


def leaf(*shape, seed=0, spread=1.0, dtype=torch.float64) -> torch.Tensor:
    """A leaf tensor requiring grad, uniform in [-spread, spread)."""
    gen = torch.Generator().manual_seed(seed)
    return ((torch.rand(*shape, generator=gen, dtype=dtype) * 2 - 1) * spread).requires_grad_()


class DispatchRecorder(torch.utils._python_dispatch.TorchDispatchMode):
    """A dispatch mode (as torch.compile's tracing is one) that records the name of every op it
    meets: `with DispatchRecorder() as mode: ...; mode.names`."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func))
        return func(*args, **(kwargs or {}))


def autograd_nodes(t: torch.Tensor) -> list:
    """Every autograd node t's gradient passes through."""
    seen, todo = [], [t.grad_fn]
    while todo:
        node = todo.pop()
        if node is not None and node not in seen:
            seen.append(node)
            todo += [next_fn for next_fn, _ in node.next_functions]
    return seen


def grads(out: torch.Tensor, inputs, seed=9):
    """Gradients of <out, a random upstream> with respect to `inputs`."""
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    return torch.autograd.grad(out, inputs, upstream)


def bipartite_graph(n_src: int, n_dst: int, edges: int, seed: int = 8):
    """A Graph of n_dst targets by n_src sources (a sampler's layer) with `edges` random edges; target
    0 receives none (an empty row)."""
    import autosage_cli.torch as at

    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.stack([torch.randint(0, n_src, (edges,), generator=gen),
                              torch.randint(1, n_dst, (edges,), generator=gen)])
    return at.Graph.from_edge_index(edge_index, size=(n_src, n_dst))


def random_edge_index(n: int, seed: int, *, avg_degree: int = 4, hubs: int = 2, hub_degree: int | None = None,
                      empty_every: int = 5, duplicates: bool = True) -> torch.Tensor:
    """A (2, E) source -> target edge_index in random order: every `empty_every`-th node receives
    no edge (empty CSR rows), `hubs` nodes receive edges from most nodes (hub rows), and with
    `duplicates` some edges appear twice."""
    gen = torch.Generator().manual_seed(seed)
    n_edges = n * avg_degree
    dst = torch.randint(0, n, (n_edges,), generator=gen)
    src = torch.randint(0, n, (n_edges,), generator=gen)
    hub_degree = hub_degree or max(1, (3 * n) // 4)
    hub_ids = torch.arange(1, 1 + hubs)
    dst = torch.cat([dst, hub_ids.repeat_interleave(hub_degree)])
    src = torch.cat([src, torch.randint(0, n, (hubs * hub_degree,), generator=gen)])
    keep = dst % empty_every != 0
    dst, src = dst[keep], src[keep]
    edges = torch.stack([src, dst])
    edges = torch.unique(edges, dim=1)  # no duplicates yet
    if duplicates:
        edges = torch.cat([edges, edges[:, : edges.shape[1] // 10]], 1)
    return edges[:, torch.randperm(edges.shape[1], generator=gen)]


def dense_adjacency(edge_index: torch.Tensor, n: int, weight=None, dtype=torch.float64) -> torch.Tensor:
    """A[i, j] = sum of the weights of the edges j -> i (PyG's flow), differentiable in weight."""
    w = torch.ones(edge_index.shape[1], dtype=dtype) if weight is None else weight
    flat = (edge_index[1] * n + edge_index[0]).to(w.device)
    return torch.zeros(n * n, dtype=w.dtype, device=w.device).index_add(0, flat, w).view(n, n)


def _counted(scores: torch.Tensor, A: torch.Tensor) -> torch.Tensor:
    """Scores where an entry of A counts its edges: log A added, so that each of a duplicate
    edge's listings weighs e^s in the softmax (PyG's treatment); -inf where A has no edge."""
    return (scores + A.clamp_min(1e-300).log()).masked_fill(A == 0, float("-inf"))


def dense_attention(A: torch.Tensor, Q, K, V, scale: float) -> torch.Tensor:
    """Masked softmax attention per head over A's edges, A[i, j] counting the edges j -> i (see
    dense_adjacency); rows without edges give zeros."""
    scores = _counted(torch.einsum("ihd,jhd->hij", Q, K) * scale, A)
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # empty rows: all -inf -> NaN -> 0
    return torch.einsum("hij,jhd->ihd", probs, V)


def dense_additive_attention(A: torch.Tensor, a_dst, a_src, V, negative_slope: float) -> torch.Tensor:
    """GAT attention per head over A's edges (A[i, j] counting the edges j -> i):
    softmax_j LeakyReLU(a_dst[i] + a_src[j]); rows without edges give zeros."""
    scores = torch.nn.functional.leaky_relu(a_dst.T[:, :, None] + a_src.T[:, None, :], negative_slope)
    probs = torch.softmax(_counted(scores, A), dim=-1).nan_to_num(0.0)
    return torch.einsum("hij,jhd->ihd", probs, V)


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """||a - ref|| / ||ref|| in float64 (the measure of docs/MEASUREMENT.md)."""
    a, ref = a.detach().double().cpu(), ref.detach().double().cpu()
    return float((a - ref).norm() / ref.norm().clamp_min(1e-300))


def layer_errors(ours, theirs, x: torch.Tensor, edges: torch.Tensor, dtype: torch.dtype, seed: int = 1,
                 ours_graph=None) -> dict:
    """Run `ours` and `theirs` (PyG's layer of the same name, same weights) in `dtype`, and PyG's in
    float64 as the reference, on x and edges on x's device: {"ours": {...}, "pyg": {...}}, each the
    relative errors of the output ("out"), x's gradient ("x") and every parameter's gradient (by
    name) against the float64 run, for one upstream gradient."""
    import copy

    reference = copy.deepcopy(theirs).double()
    upstream = None
    runs = {}
    for label, layer, kind in (("ref", reference, torch.float64), ("ours", copy.deepcopy(ours).to(dtype), dtype),
                               ("pyg", copy.deepcopy(theirs).to(dtype), dtype)):
        xi = x.detach().to(kind).requires_grad_()
        out = layer(xi, ours_graph if label == "ours" and ours_graph is not None else edges)
        if upstream is None:
            gen = torch.Generator().manual_seed(seed)
            upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.device)
        (out.double() * upstream).sum().backward()
        runs[label] = {"out": out, "x": xi.grad, **{n: p.grad for n, p in layer.named_parameters()}}
    # a gradient that is zero in exact arithmetic (TransformerConv's key bias: the softmax ignores
    # a per-row shift) has no relative error to speak of
    scale = float(runs["ref"]["out"].detach().double().norm())
    keys = [k for k, t in runs["ref"].items() if float(t.detach().double().norm()) > 1e-9 * scale]
    return {label: {key: rel_err(runs[label][key], runs["ref"][key]) for key in keys}
            for label in ("ours", "pyg")}


def assert_parameter_grads_match(ours, theirs, tol: float) -> None:
    """Every parameter gradient of `ours` equals `theirs` (PyG's layer, same names) within `tol`.
    TransformerConv's key bias adds q.b to every score of a row, which the row softmax removes: its
    true gradient is 0 and both libraries return rounding noise (~1e-7). Such a gradient is compared
    against the scale of all the layer's gradients, not against its own noise."""
    theirs_params = dict(theirs.named_parameters())
    scale = max(float(q.grad.norm()) for q in theirs.parameters() if q.grad is not None)
    for pname, p in ours.named_parameters():
        want = theirs_params[pname].grad
        if want is not None:
            err = float((p.grad - want).double().norm() / max(float(want.norm()), 0.1 * scale))
            assert err < tol, (pname, err)


@pytest.fixture(scope="module")
def cuda_only():
    """Import it with autouse in a module of GPU tests: they skip, saying why, without a device."""
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")


@pytest.fixture(name="cache")
def kinds_cache(tmp_path):
    """A fresh decision-cache path, with the process's table of graph kinds emptied around it."""
    from autosage_cli.scheduler.decisions import kinds

    kinds.TABLE.clear()
    yield str(tmp_path / "decisions.json")
    kinds.TABLE.clear()


def record_spmms(monkeypatch) -> list:
    """The SpMM kernels' calls from here on, as (kernel, width) in call order: the forward's
    (`_spmm`, `_spmm_epilogue`) and the backward's (`_spmm_t`), as the layers run them."""
    from autosage_cli.torch import ops, ops_epilogue

    calls = []
    for module, name in ((ops, "_spmm"), (ops, "_spmm_t"), (ops_epilogue, "_spmm_epilogue")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _name=name, **k:
                            calls.append((_name, a[2].shape[1])) or _real(*a, **k))
    return calls


@pytest.fixture
def kept_on():
    """Import it with autouse: kept aggregations on around each test (a test may turn them off)."""
    import autosage_cli.torch as at

    at.keep_aggregations(True)
    yield
    at.keep_aggregations(True)
