"""SpMM epilogues on the GPU: every SpMM schedule with its fused epilogue against SpMM then the
epilogue (float64, and the same schedule unfused), in float32 and bfloat16, on a graph with empty
rows and a hub row (heavy for every split threshold, across many stream windows); the vendor path
(cuSPARSE then the epilogue launch); the torch op's values and gradients against the CPU path; and
a captured GCN step with the fused bias + ReLU against eager."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli import dtypes, ops
from autosage_cli.capability import gpu_available
from autosage_cli.graphs.csr import canonical_csr
from autosage_cli.kernels import epilogues
from autosage_cli.kernels.schedule import registry

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no usable CUDA device")]

DTYPES = ("float32", "bfloat16")
WIDTH_PREFERENCE = (64, 16, 4, 2, 8, 128, 256, 1, 32, 3, 6)
SCHEDULES = list(registry("spmm"))
# every schedule with the layers' epilogue; the others (other template tags of the same code) on
# the first schedule of each family
FIRST_OF_FAMILY = list({s.family: s for s in reversed(SCHEDULES)}.values())
CASES = ([(s, "bias-relu") for s in SCHEDULES]
         + [(s, e.name) for e in epilogues.FUSED if e.name != "bias-relu" for s in FIRST_OF_FAMILY])


def width_for(schedule, dtype: str) -> int | None:
    return next((k for k in WIDTH_PREFERENCE if schedule.supports(k, 1, dtype) is None), None)


@pytest.fixture(scope="module")
def graph():
    """8,000 rows: ~30% empty, row 7 with about 5,400 distinct nonzeros of 9,000 drawn (above every
    split threshold, many stream windows wide), the rest ~6 each; values in [-1, 1)."""
    rng = np.random.default_rng(7)
    n = 8000
    deg = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 12, n))
    deg[7] = 9000
    rows = np.repeat(np.arange(n), deg)
    cols = rng.integers(0, n, rows.size)
    m = sp.coo_matrix((rng.uniform(-1, 1, rows.size), (rows, cols)), shape=(n, n)).tocsr()
    m.sum_duplicates()
    g = canonical_csr(m, {"generator": "test-epilogue-gpu", "params": {}, "seed": 7})
    assert (g.row_degrees() == 0).sum() > 500 and g.row_degrees().max() > 5000
    return g


@pytest.fixture(scope="module")
def dgraph(graph):
    from autosage_cli.backends.base import DeviceGraph

    return DeviceGraph.from_host(graph)


def _inputs(op: str, dgraph, k: int, dtype: str):
    return ops.make_inputs(op, dgraph, k, 1, seed=3, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("schedule,name", CASES, ids=[f"{s.name}-{e}" for s, e in CASES])
def test_fused_schedule_equals_spmm_then_the_epilogue(graph, dgraph, schedule, name, dtype):
    import cupy

    from autosage_cli.backends.timing import poison, rel_error

    k = width_for(schedule, dtype)
    if k is None:
        pytest.skip(f"{schedule.name} runs none of {WIDTH_PREFERENCE} in {dtype}")
    e, op = epilogues.get(name), epilogues.op_name(epilogues.get(name))
    inputs = _inputs(op, dgraph, k, dtype)
    fused = ops.prepare_native(dgraph, schedule, k, 1, None, dtype, op=op)
    assert fused.op == op and fused.epilogue is e
    ref = ops.reference(op, graph, [cupy.asnumpy(x) for x in inputs], dtype=dtype)
    tol = ops.case_tolerance(op, dtype, k, int(graph.row_degrees().max()))
    for run in range(2):   # a split plan's tickets and scratch must be left as prepare left them
        out = poison(fused.alloc_out())
        fused.run(inputs, out)
        got = dtypes.from_storage(cupy.asnumpy(out), dtype)
        assert rel_error(got, ref) <= tol, (run, rel_error(got, ref))
    # the same schedule unfused, then the epilogue on its (rounded) output: the same values
    plain = ops.prepare_native(dgraph, schedule, k, 1, None, dtype)
    product = poison(plain.alloc_out())
    plain.run(inputs[:1], product)
    unfused = e.apply(dtypes.from_storage(cupy.asnumpy(product), dtype),
                      dtypes.from_storage(cupy.asnumpy(inputs[1]), dtype) if e.bias else None)
    assert rel_error(got, unfused) <= 2 * tol
    empty = np.flatnonzero(graph.row_degrees() == 0)[:5]
    np.testing.assert_allclose(got[empty], ref[empty], atol=1e-2 if dtype != "float32" else 1e-6)


@pytest.mark.parametrize("schedule", FIRST_OF_FAMILY, ids=[s.name for s in FIRST_OF_FAMILY])
def test_per_call_scale_alpha_and_values(graph, dgraph, schedule):
    import cupy

    from autosage_cli.backends.timing import rel_error

    k = width_for(schedule, "float32")
    op = "spmm-bias-relu"
    B, bias = _inputs(op, dgraph, k, "float32")
    values = cupy.asarray(np.random.default_rng(4).uniform(-1, 1, graph.nnz).astype(np.float32))
    plan = ops.prepare_native(dgraph, schedule, k, 1, None, "float32", op=op)
    out = plan.alloc_out()
    plan.run_fused(B, out, bias, scale=-0.5, values=values)
    a = sp.csr_matrix((cupy.asnumpy(values).astype(np.float64), graph.indices, graph.indptr), shape=graph.shape)
    want = np.maximum(-0.5 * (a @ cupy.asnumpy(B).astype(np.float64)) + cupy.asnumpy(bias), 0)
    assert rel_error(cupy.asnumpy(out), want) < 1e-5


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", [e.name for e in epilogues.FUSED])
def test_the_vendor_path_runs_spmm_then_the_epilogue(graph, dgraph, name, dtype):
    import cupy

    from autosage_cli.backends.timing import rel_error

    op = epilogues.op_name(epilogues.get(name))
    inputs = _inputs(op, dgraph, 32, dtype)
    plan = ops.prepare_vendor(dgraph, ops.untuned_vendor(op), 32, 1, None, dtype)
    assert plan.op == op
    out = plan.alloc_out()
    plan.run(inputs, out)
    ref = ops.reference(op, graph, [cupy.asnumpy(x) for x in inputs], dtype=dtype)
    got = dtypes.from_storage(cupy.asnumpy(out), dtype)
    tol = ops.case_tolerance(op, dtype, 32, int(graph.row_degrees().max()))
    assert rel_error(got, ref) <= tol * (dtypes.VENDOR_SLACK_2BYTE if dtype != "float32" else 1)


# ------------------------------------------------------------------ torch

torch = pytest.importorskip("torch", reason="torch is not installed")


def _torch_graph(graph, **options):
    import autosage_cli.torch as at

    coo = graph.to_scipy().tocoo()
    ei = torch.stack([torch.as_tensor(coo.col), torch.as_tensor(coo.row)]).long()
    return at.Graph.from_edge_index(ei.cuda(), graph.n_rows, **options), ei


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
@pytest.mark.parametrize("kw", [{"activation": "relu"}, {}, {"scale": 0.5}], ids=["relu", "bias", "scale"])
def test_torch_fused_spmm_values_and_gradients_match_the_cpu_path(graph, tmp_path, dtype, kw):
    import autosage_cli.torch as at
    from torch_helpers import rel_err

    # SpMM's schedule fixed (the fused ops follow it: ops/epilogue.fixed_schedule), no probes
    fixed = ops.candidates("spmm", 64, 1, "float32")[0].name
    g, ei = _torch_graph(graph, cache=str(tmp_path / "d.json"), tune=False, schedules={"spmm": fixed})
    cpu = at.Graph.from_edge_index(ei, graph.n_rows)
    gen = torch.Generator().manual_seed(0)
    B64 = torch.randn(graph.n_cols, 64, generator=gen, dtype=torch.float64)
    b64 = torch.randn(64, generator=gen, dtype=torch.float64)
    w64 = torch.rand(ei.shape[1], generator=gen, dtype=torch.float64)
    B = B64.to(dtype).cuda().requires_grad_()
    b = b64.to(dtype).cuda().requires_grad_()
    w = w64.to(dtype).cuda().requires_grad_()
    out = at.spmm(g, B, w, bias=b, **kw)
    op = epilogues.op_name(epilogues.choose(True, kw.get("activation"), kw.get("scale", 1.0)))
    [plan] = [p for key, p in g.gpu.items() if key[0] == "plan" and key[1] == op]
    assert plan.backend == "native" and plan.schedule == fixed and plan.op == op
    ref_in = [t.detach().cpu().double().requires_grad_() for t in (B, b, w)]
    ref = at.spmm(cpu, ref_in[0], ref_in[2], bias=ref_in[1], **kw)
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    assert out.dtype == dtype and rel_err(out, ref) < tol
    grad = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    out.backward(grad.to(dtype).cuda())
    ref.backward(grad)
    for t, r in zip((B, b, w), ref_in):
        assert rel_err(t.grad, r.grad) < 5 * tol
    # a second call runs the same plan (packed) with another bias: the bias is a per-call operand
    b2 = (b.detach() + 1).requires_grad_()
    again = at.spmm(g, B.detach(), w.detach(), bias=b2, **kw)
    assert rel_err(again, at.spmm(cpu, ref_in[0].detach(), ref_in[2].detach(),
                                  bias=ref_in[1].detach() + 1, **kw)) < tol


N, IN, CLASSES = 2100, 32, 7
TOL = {torch.float32: 1e-3, torch.bfloat16: 5e-2}


@pytest.fixture(scope="module")
def edges():
    """Source -> target: node 1 receives 2,000 edges (a hub row), every 7th node none."""
    gen = torch.Generator().manual_seed(0)
    dst = torch.cat([torch.randint(3, N, (4 * N,), generator=gen), torch.full((2000,), 1)])
    src = torch.cat([torch.randint(0, N, (4 * N,), generator=gen), torch.arange(3, 2003)])
    keep = dst % 7 != 0
    return torch.unique(torch.stack([src[keep], dst[keep]]), dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_a_captured_gcn_step_with_the_fused_bias_relu_equals_eager(edges, tmp_path, dtype):
    import torch.nn.functional as F

    import autosage_cli.torch as at
    from autosage_cli.torch.norm import gcn_graph
    from autosage_cli.torch.training import Net
    from torch_helpers import rel_err

    cache = str(tmp_path / "d.json")
    torch.manual_seed(0)
    # a narrowing first layer: its x W runs first, so the bias and ReLU go into its SpMM's store
    net = Net([at.GCNConv(IN, 16, act="relu"), at.GCNConv(16, CLASSES)], activated=(True,))
    net = net.to(device="cuda", dtype=dtype)
    ref = copy.deepcopy(net)
    opt = lambda m: torch.optim.Adam(m.parameters(), lr=0.01, capturable=True)   # noqa: E731

    def loss_fn(model):
        def fn(graph, x, y):
            out = model(x, graph)
            return F.cross_entropy(out, y), out
        return fn

    g = at.Graph.from_edge_index(edges.cuda(), N, cache=cache)
    ref_g, ref_opt = at.Graph.from_edge_index(edges.cuda(), N, cache=cache), opt(ref)
    gen = torch.Generator().manual_seed(1)
    batch = lambda: (torch.randn(N, IN, generator=gen).to("cuda", dtype),   # noqa: E731
                     torch.randint(0, CLASSES, (N,), generator=gen).cuda())
    step = at.capture_training_step(loss_fn(net), opt(net), g, *batch(), warmup=2)
    for i in range(5):
        x, y = batch()
        loss, out = step(x, y)
        assert step.captured == (i >= 2)
        ref_opt.zero_grad(set_to_none=True)
        ref_loss, ref_out = loss_fn(ref)(ref_g, x, y)
        ref_loss.backward()
        ref_opt.step()
        assert rel_err(out, ref_out) < TOL[dtype], (i, rel_err(out, ref_out))
        for p, q in zip(net.parameters(), ref.parameters()):
            assert rel_err(p, q) < TOL[dtype], i
    fused = [key for key in gcn_graph(g).gpu if key[0] == "plan" and key[1] == "spmm-bias-relu"]
    assert fused, "the hidden layer did not run the fused SpMM"
    assert all(gcn_graph(g).gpu[key].backend == "native" for key in fused)   # capturable
