"""The attention backward's multi-head kernels on a CUDA device (cuda/util_heads.cu through
autosage_cli.torch.kernels: heads_sddmm, heads_spmm, softmax_grad) against the CPU reference of
tests/test_mh_backward.py in float64 from the same rounded inputs, in float32, bfloat16 and
float16; and the attention ops' and layers' gradients, which now run on them, against the float64
reference and PyG (the tolerances of tests/test_torch_gpu.py, test_gat_gpu.py and
test_torch_half_gpu.py). Graphs have empty rows and hub rows; H in {1, 3, 8, 40}, d in {1, 8, 33}."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the autosage_cli.torch tests need it")

import autosage_cli.torch as at  # noqa: E402
from autosage_cli import dtypes  # noqa: E402
from autosage_cli.torch import backward, kernels  # noqa: E402
from torch_helpers import assert_parameter_grads_match, random_edge_index, rel_err  # noqa: E402

pytestmark = pytest.mark.gpu
N = 700
TOL = 2e-5          # ||ours - ref|| / ||ref|| in fp32 against float64
TYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHAPES = [(h, d) for h in (1, 3, 8) for d in (1, 8, 33)] + [(40, 8)]   # 40 heads: two head chunks


@pytest.fixture(scope="module", autouse=True)
def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device (CPU-only torch build?)")


@pytest.fixture(scope="module")
def graphs():
    """(CUDA graph, CPU graph) of one edge list: every 5th row empty, two hub rows (600 edges drawn,
    400 or more distinct among 700 nodes)."""
    edges = random_edge_index(N, seed=31, hub_degree=600, duplicates=False)
    g_gpu, g_ref = at.Graph.from_edge_index(edges.cuda(), N), at.Graph.from_edge_index(edges, N)
    assert int((g_ref.rowptr.diff() == 0).sum()) > 0 and int(g_ref.rowptr.diff().max()) >= 400
    return g_gpu, g_ref


def _tol(name: str, roundings: float = 2) -> float:
    """float32: TOL; a 2-byte type: `roundings` unit roundoffs (outputs rounded once to the type)."""
    return TOL if name == "float32" else roundings * dtypes.info(name).unit_roundoff


def _inputs(shapes, dtype, seed: int):
    """CUDA tensors of `dtype` and the same (rounded) values in float64 on the CPU."""
    gen = torch.Generator().manual_seed(seed)
    made = [(torch.rand(*s, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype) for s in shapes]
    return [t.cuda() for t in made], [t.double() for t in made]


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("heads, d", SHAPES)
def test_heads_sddmm_matches_the_reference(graphs, name, heads, d):
    g_gpu, g_ref = graphs
    (X, Y), (X_ref, Y_ref) = _inputs([(N, heads, d)] * 2, TYPES[name], seed=heads * 100 + d)
    out = kernels.heads_sddmm(g_gpu, X, Y, 0.5)
    assert out.is_cuda and out.dtype == torch.float32 and out.shape == (g_ref.nnz, heads)
    assert rel_err(out, kernels.heads_sddmm(g_ref, X_ref, Y_ref, 0.5)) <= _tol(name)
    if name != "float32":   # each dot rounded to the type (times 0.5: exact)
        assert torch.equal(out * 2, (out * 2).to(TYPES[name]).float())
    unrounded = kernels.heads_sddmm(g_gpu, X, Y, 0.5, rounded=False)   # float32 sums in every type
    assert rel_err(unrounded, kernels.heads_sddmm(g_ref, X_ref, Y_ref, 0.5, rounded=False)) <= TOL


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("heads, d", SHAPES)
def test_heads_spmm_and_its_transpose_match_the_reference(graphs, name, heads, d):
    g_gpu, g_ref = graphs
    (X,), (X_ref,) = _inputs([(N, heads, d)], TYPES[name], seed=heads * 10 + d)
    (P,), (P_ref,) = _inputs([(g_ref.nnz, heads)], torch.float32, seed=7)
    # the kernel rounds P to the type, as the reference is told to
    P_ref = P_ref.to(TYPES[name]).double()
    out = kernels.heads_spmm(g_gpu, P, X)
    assert out.dtype == TYPES[name] and out.shape == (N, heads, d)
    assert rel_err(out, kernels.heads_spmm(g_ref, P_ref, X_ref)) <= _tol(name)
    assert out[g_gpu.rowptr.diff() == 0].abs().sum() == 0
    out_t = backward.heads_spmm_t(g_gpu, P, X)
    assert rel_err(out_t, backward.heads_spmm_t(g_ref, P_ref, X_ref)) <= _tol(name)


@pytest.mark.parametrize("heads", [1, 3, 8, 40])
def test_softmax_grad_matches_the_reference_and_sums_to_zero_per_row(graphs, heads):
    g_gpu, g_ref = graphs
    (S, dP, row_dot), (S_ref, dP_ref, row_dot_ref) = _inputs(
        [(g_ref.nnz, heads), (g_ref.nnz, heads), (N, heads)], torch.float32, seed=heads)
    P, P_ref = kernels.edge_softmax(g_gpu, S * 4), kernels.edge_softmax(g_ref, S_ref * 4)
    given = kernels.softmax_grad(g_gpu, P, dP.clone(), row_dot, 0.25)
    assert rel_err(given, kernels.softmax_grad(g_ref, P_ref, dP_ref.clone(), row_dot_ref, 0.25)) <= TOL
    summed = kernels.softmax_grad(g_gpu, P, dP.clone())
    assert rel_err(summed, kernels.softmax_grad(g_ref, P_ref, dP_ref.clone())) <= TOL
    row_sums = torch.zeros(N, heads, device="cuda").index_add_(0, g_gpu.on("row", "cuda"), summed)
    assert float(row_sums.abs().max()) <= 1e-5 * float(summed.abs().max())


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("heads, d", [(1, 8), (3, 33), (8, 8), (40, 8)])
def test_the_fused_additive_backward_matches_the_reference(graphs, name, heads, d):
    """One launch for P, d a_dst and d a_src (atomics into d a_src) against the CPU composition in
    the same type, from the same inputs, forward output and statistics (so both round dP to the
    type alike); without score gradients only P."""
    g_gpu, g_ref = graphs
    shapes = [(N, heads), (N, heads), (N, heads, d), (N, heads, d)]
    gpu, _ = _inputs(shapes, TYPES[name], seed=heads + d)
    a_dst, a_src, V, dO = gpu
    O, stats = kernels.additive_attention(g_gpu, a_dst, a_src, V, 0.2)
    P, d_dst, d_src = kernels.additive_score_grads(g_gpu, a_dst, a_src, stats, V, O, dO, 0.2, True)
    on_cpu = (t.cpu() for t in (a_dst, a_src, stats, V, O, dO))
    P_ref, d_dst_ref, d_src_ref = kernels.additive_score_grads(g_ref, *on_cpu, 0.2, True)
    assert P.dtype == d_dst.dtype == d_src.dtype == torch.float32
    assert P.shape == (g_ref.nnz, heads) and d_dst.shape == d_src.shape == (N, heads)
    assert rel_err(P, P_ref) <= TOL
    assert rel_err(d_dst, d_dst_ref) <= TOL and rel_err(d_src, d_src_ref) <= TOL
    empty = g_ref.rowptr.diff() == 0
    assert (d_dst.cpu()[empty] == 0).all()
    only_p = kernels.additive_score_grads(g_gpu, a_dst, a_src, stats, V, O, dO, 0.2, False)
    assert only_p[1] is None and only_p[2] is None and torch.equal(only_p[0], P)


def test_a_graph_without_edges():
    g = at.Graph.from_edge_index(torch.zeros(2, 0, dtype=torch.long, device="cuda"), 6)
    X = torch.randn(6, 2, 3, device="cuda")
    assert kernels.heads_sddmm(g, X, X).shape == (0, 2)
    assert torch.equal(kernels.heads_spmm(g, torch.zeros(0, 2, device="cuda"), X), torch.zeros_like(X))


# ------------------------------------------------------------------------------------ the ops' gradients
def _op_grads(op, g, leaves, seed=3):
    out = op(g, *leaves)
    up = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return out, torch.autograd.grad((out.double() * up.to(out.device)).sum(), leaves)


OPS = {"attention": (at.attention, lambda h, d: [(N, h, d)] * 3),
       "additive": (at.additive_attention, lambda h, d: [(N, h), (N, h), (N, h, d)])}


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("heads, d", [(1, 8), (3, 33), (8, 8)])
def test_attention_gradients_match_float64(graphs, name, op, heads, d):
    g_gpu, g_ref = graphs
    fn, shapes = OPS[op]
    gpu, ref = _inputs(shapes(heads, d), TYPES[name], seed=heads + d)
    gpu, ref = [t.requires_grad_() for t in gpu], [t.requires_grad_() for t in ref]
    (out, grads), (expected, ref_grads) = _op_grads(fn, g_gpu, gpu), _op_grads(fn, g_ref, ref)
    assert all(g.dtype == TYPES[name] for g in grads)
    assert rel_err(out, expected) <= _tol(name, dtypes.VENDOR_SLACK_2BYTE * 4)
    for label, a, b in zip(("0", "1", "2"), grads, ref_grads):
        assert rel_err(a, b) <= (5 * TOL if name == "float32" else _tol(name, dtypes.VENDOR_SLACK_2BYTE * 8)), label


def _pyg():
    return pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed")


@pytest.mark.parametrize("layer, args, kwargs", [
    ("GATConv", (37, 8), {"heads": 8}),
    ("GATConv", (64, 7), {"heads": 1, "concat": False}),
    ("GATConv", (37, 9), {"heads": 3, "negative_slope": 0.1}),
    ("TransformerConv", (37, 9), {"heads": 4}),
    ("TransformerConv", (37, 8), {"heads": 8}),
])
def test_layer_gradients_match_pyg_on_cuda(layer, args, kwargs):
    pyg = _pyg()
    edges = random_edge_index(N, seed=37, duplicates=False).cuda()
    torch.manual_seed(0)
    theirs = getattr(pyg, layer)(*args, **kwargs).cuda()
    ours = getattr(at, layer)(*args, **kwargs).cuda()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(N, args[0], device="cuda")
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    a, b = ours(x_ours, at.Graph.from_edge_index(edges, N)), theirs(x_theirs, edges)
    assert rel_err(a, b) < TOL
    up = torch.randn_like(a)
    (a * up).sum().backward()
    (b * up).sum().backward()
    assert rel_err(x_ours.grad, x_theirs.grad) < 5 * TOL
    assert_parameter_grads_match(ours, theirs, 5 * TOL)
