"""SpMM epilogues (kernels/epilogues.py, ops/epilogue.py, torch's fused spmm) on the CPU: the table
and its CUDA side, the reference arithmetic, the fused ops' specs and their place in the cache key
and the probe, autograd through the CPU path (gradcheck in float64), GCNConv's act and the
training model, torch.compile without a graph break, and the nvcc compile of every (family,
epilogue) combination the fused ops may run."""
from __future__ import annotations

import functools
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import scipy.sparse as sp

from autosage_cli import dtypes, ops
from autosage_cli.cache import DecisionCache, make_key
from autosage_cli.errors import AutosageError
from autosage_cli.graphs.load import load_graph
from autosage_cli.kernels import compile as kcompile, epilogues, schedule as sched
from autosage_cli.ops import epilogue as epilogue_ops
from autosage_cli.scheduler import tune as tune_mod

import ptxas_helpers
from scheduler_fakes import DEVICE, SOFTWARE, FakeMeasurer, features_of

CUDA_HEADER = (kcompile.CUDA_DIR / "spmm_epilogue.cuh").read_text()
FUSED_OPS = [epilogues.op_name(e) for e in epilogues.FUSED]


# ------------------------------------------------------------------ the table and its CUDA side

def test_every_fused_row_names_a_cuda_activation_and_has_its_op():
    assert [e.name for e in epilogues.EPILOGUES.values()][0] == "none" and not epilogues.NONE.fused
    for e in epilogues.FUSED:
        assert re.search(rf"struct {e.activation}\s*{{[^}}]*apply\(float x, float", CUDA_HEADER), e.name
        assert e.operands == (("bias",) if e.bias else ())
        spec = ops.get(epilogues.op_name(e))
        assert spec.operands == ("B",) + e.operands and spec.schedules_of == "spmm" and spec.variant == e.name
    assert len(set(FUSED_OPS)) == len(FUSED_OPS) and "spmm" not in FUSED_OPS
    assert len({e.cuda_type for e in epilogues.FUSED}) == len(epilogues.FUSED)


def test_choose_maps_the_arguments_to_rows():
    assert epilogues.choose(False, None) is epilogues.NONE
    assert epilogues.choose(False, None, 2.0).name == "scale"
    assert epilogues.choose(True, None).name == "bias"
    assert epilogues.choose(False, "relu").name == "relu"
    assert epilogues.choose(True, "relu").name == "bias-relu"
    with pytest.raises(AutosageError, match="activation 'gelu'"):
        epilogues.choose(True, "gelu")


def test_only_fused_expressions_change_and_get_the_define():
    s = sched.get(ops.candidates("spmm", 64)[0].name)
    plain = s.name_expression("float")
    assert epilogues.expression(plain, epilogues.NONE) == plain
    fused = epilogues.expression(plain, epilogues.get("bias-relu"))
    assert fused == plain[:-1] + ", autosage::Epilogue<autosage::Relu, true>>"
    define = f"-D{epilogues.DEFINE}=1"
    assert define not in kcompile.runtime_options([plain])
    assert define in kcompile.runtime_options([fused])
    # the schedule's own kernels (and so the compile lists, prebuilt.json, SpMM's plans) are unchanged
    assert all(epilogues.MARKER not in r.expression for r in kcompile.instantiations(["spmm"]))


def test_every_spmm_family_runs_every_fused_epilogue():
    for op in FUSED_OPS:
        assert [s.name for s in ops.candidates(op, 64)] == [s.name for s in ops.candidates("spmm", 64)]
        assert [s.name for s in ops.candidates(op, 4)] == [s.name for s in ops.candidates("spmm", 4)]
        refs = ops.instantiations([op], "float32")
        assert refs and all(epilogues.MARKER in r.expression for r in refs)
    # the stream family's crossing launch carries the epilogue too: it writes those rows' values
    stream = next(s for s in ops.candidates("spmm-relu", 4) if s.family == "stream")
    refs = ops.kernel_refs_of("spmm-relu")(stream, 4)
    assert len(refs) == 2 and all("autosage::Relu" in r.expression for r in refs)


def test_a_fused_op_refuses_sddmm_schedules_with_a_reason():
    sddmm = sched.registry("sddmm")[0]
    assert "spmm" in ops.runs_schedule("spmm-bias", sddmm)
    with pytest.raises(AutosageError):
        ops.prepare_native(None, sddmm, 8, op="spmm-bias")


# ------------------------------------------------------------------ reference arithmetic

def _graph(seed=0, n=40, empty_rows=(3, 17)):
    rng = np.random.default_rng(seed)
    a = sp.random(n, n, density=0.15, random_state=seed, format="lil")
    a[0, :] = rng.uniform(0.5, 1.5, n)   # a hub row
    for r in empty_rows:
        a[r, :] = 0
    from autosage_cli.graphs.csr import canonical_csr
    return canonical_csr(a.tocsr(), {"generator": "test-epilogue", "params": {}, "seed": seed})


@pytest.mark.parametrize("name", [e.name for e in epilogues.FUSED])
def test_the_fused_reference_is_the_spmm_reference_then_the_epilogue(name):
    e, g = epilogues.get(name), _graph()
    rng = np.random.default_rng(1)
    B, bias = rng.uniform(-1, 1, (g.n_cols, 6)), rng.uniform(-1, 1, 6)
    inputs = [B] + ([bias] if e.bias else [])
    got = ops.reference(epilogues.op_name(e), g, inputs, scale=0.5)
    pre = 0.5 * (g.to_scipy() @ B) + (bias if e.bias else 0.0)
    want = np.maximum(pre, 0.0) if "relu" in name else pre
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    if "relu" in name:
        assert (got == 0).any() and (got > 0).any()   # the activation did something here
    if e.bias:   # empty rows hold the epilogue of zero: act(bias)
        np.testing.assert_allclose(got[3], want[3], atol=0)
        assert np.abs(got[3]).sum() > 0


def test_the_reference_reads_a_bfloat16_bias_as_stored():
    e, g = epilogues.get("bias"), _graph()
    B = dtypes.to_storage(np.random.default_rng(2).uniform(-1, 1, (g.n_cols, 4)), "bfloat16")
    bias = dtypes.to_storage(np.array([0.1, -0.3, 1.7, 2.5]), "bfloat16")
    got = ops.reference("spmm-bias", g, [B, bias], dtype="bfloat16")
    # SpMM's reference (A's values as a bfloat16 plan reads them), plus the bias as stored
    want = ops.reference("spmm", g, [B], dtype="bfloat16") + dtypes.from_storage(bias, "bfloat16")
    assert dtypes.from_storage(bias, "bfloat16")[0] != 0.1   # it was rounded
    np.testing.assert_allclose(got, want, atol=1e-14)
    assert e.apply(np.zeros(2), np.ones(2), 3.0).tolist() == [1.0, 1.0]


def test_vendor_names_are_the_fused_ops_own():
    assert ops.vendor_names("spmm-bias-relu") == [f"{v}+bias-relu" for v in ops.vendor_names("spmm")]
    assert ops.vendor_op("cusparse-alg2+bias-relu") == "spmm-bias-relu"
    assert ops.vendor_op("cusparse-alg2") == "spmm"
    assert ops.untuned_vendor("spmm-relu") == ops.untuned_vendor("spmm") + "+relu"
    assert epilogue_ops.base_vendor("cusparse-alg2+relu", epilogues.get("bias-relu")) is None
    assert epilogue_ops.fixed_schedule("spmm-bias", {"spmm": "cusparse-alg1"}) == "cusparse-alg1+bias"
    name = ops.candidates("spmm", 16)[0].name
    assert epilogue_ops.fixed_schedule("spmm-bias", {"spmm": name}) == name
    assert epilogue_ops.fixed_schedule("spmm-bias", {"spmm": name, "spmm-bias": "x"}) == "x"
    assert epilogue_ops.fixed_schedule("spmm", {"spmm-bias": name}) is None
    # the API takes SpMM's schedules and the fused vendors for a fused op, not SpMM's own vendors
    from autosage_cli import api

    assert api.check_requested_schedule("spmm-bias", name, 16, 1)[1].name == name
    assert api.check_requested_schedule("spmm-bias", "cusparse-alg1+bias", 16, 1) == ("vendor", "cusparse-alg1+bias")
    with pytest.raises(AutosageError, match="not spmm-bias"):
        api.check_requested_schedule("spmm-bias", "cusparse-alg1", 16, 1)


# ------------------------------------------------------------------ the question, the key, the probe

class EpilogueMeasurer(FakeMeasurer):
    """FakeMeasurer for one fused op: plans compute its float64 reference; `unfused` names plans
    that forget the epilogue (plain SpMM), which verification must catch."""

    def __init__(self, op, unfused=(), **kw):
        super().__init__(**kw)
        self.op, self.unfused, self.native_ops = op, set(unfused), []

    def prepare_native(self, dgraph, schedule, k, heads, scale=None, dtype="float32", **op):
        self.native_ops.append(op.get("op"))
        return super().prepare_native(dgraph, schedule, k, heads, scale, dtype)

    def run(self, plan, inputs):
        self.calls["run"] += 1
        op = "spmm" if plan.name in self.unfused else self.op
        return ops.reference(op, plan.graph, list(inputs[:1]) if op == "spmm" else list(inputs))


def test_a_fused_op_is_tuned_under_its_own_key_and_spmm_keys_stay_as_they_were(tmp_path):
    graph = load_graph(dataset="cora")
    op = "spmm-bias-relu"
    cands = [s.name for s in ops.candidates(op, 16)]
    vendors = {f"cusparse-alg1+bias-relu": 1.0, f"cusparse-alg2+bias-relu": 0.9}
    measure = EpilogueMeasurer(op, unfused={cands[0]}, vendor_ms=vendors,
                               native_ms={cands[0]: 0.05, cands[1]: 0.2}, default_native_ms=0.6)
    cache = DecisionCache(tmp_path / "d.json")
    run = dict(cache=cache, measure=measure, device_info=DEVICE, software_info=SOFTWARE,
               features=features_of(graph), top_k=len(cands))
    result = tune_mod.tune(graph, op, 16, **run)
    # the fastest plan forgot its epilogue: verification against SpMM-then-epilogue refused it
    failed = {c["name"]: c for c in result.candidates if c.get("status") != "ok"}
    assert cands[0] in failed and "mismatch" in str(failed[cands[0]])
    assert result.decision.backend == "native" and result.decision.schedule == cands[1]
    assert {v["name"] for v in result.vendor} == set(vendors)
    assert set(measure.native_ops) == {op}   # every native candidate was prepared as the fused op's
    key = make_key(graph, op, 16, device=DEVICE, software=SOFTWARE)
    spmm_key = make_key(graph, "spmm", 16, device=DEVICE, software=SOFTWARE)
    assert key.op == op and key != spmm_key and cache.lookup(spmm_key) is None
    [entry] = cache.entries()
    assert entry["op"] == op and entry["key"]["op"] == op
    # SpMM's key is the same tuple it always was: no epilogue field, the op is "spmm"
    import dataclasses

    assert (spmm_key.graph, spmm_key.op, spmm_key.k, spmm_key.dtype, spmm_key.heads) == (
        graph.fingerprint, "spmm", 16, "float32", 1)
    assert [f.name for f in dataclasses.fields(spmm_key)] == ["device", "software", "graph", "op", "k",
                                                              "dtype", "heads", "settings"]
    assert set(spmm_key.lookup_fields()) == {"device", "graph", "op", "k", "dtype", "heads"}


def test_the_kind_scope_of_a_fused_question_is_its_own():
    from autosage_cli.scheduler.decisions import kinds

    plain = kinds._scope("p", DEVICE, SOFTWARE, {}, ("spmm", 16, 1, "float32", True))
    fused = kinds._scope("p", DEVICE, SOFTWARE, {}, ("spmm-bias-relu", 16, 1, "float32", True))
    assert plain != fused and plain[-5:] == ("spmm", 16, 1, "float32", True)


# ------------------------------------------------------------------ torch (CPU path)

torch = pytest.importorskip("torch", reason="torch is not installed")


@pytest.fixture(scope="module")
def tgraph():
    import autosage_cli.torch as at
    from torch_helpers import random_edge_index

    n = 23
    ei = random_edge_index(n, seed=3, duplicates=True)
    ei = ei[:, ei[1] != 4]          # row 4 (target 4) without edges
    return at.Graph.from_edge_index(ei, n), ei


@pytest.mark.parametrize("activation,with_bias,scale", [
    ("relu", True, None), ("relu", False, 0.7), (None, True, 1.5), (None, False, 2.0), ("relu", True, -0.5)])
def test_fused_spmm_equals_the_unfused_ops_and_gradchecks(tgraph, activation, with_bias, scale):
    import autosage_cli.torch as at

    g, ei = tgraph
    gen = torch.Generator().manual_seed(0)
    B = torch.randn(g.n_cols, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    b = torch.randn(5, dtype=torch.float64, generator=gen, requires_grad=True)
    w = torch.rand(ei.shape[1], dtype=torch.float64, generator=gen, requires_grad=True)
    kw = dict(bias=b if with_bias else None, activation=activation, scale=scale)
    got = at.spmm(g, B, w, **kw)
    want = (1.0 if scale is None else scale) * at.spmm(g, B, w) + (b if with_bias else 0.0)
    want = torch.relu(want) if activation else want
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    if with_bias:
        torch.testing.assert_close(got[4], torch.relu(b) if activation else b)   # the empty row
    inputs = (B, b, w) if with_bias else (B, w)
    fn = ((lambda B, b, w: at.spmm(g, B, w, bias=b, activation=activation, scale=scale)) if with_bias
          else (lambda B, w: at.spmm(g, B, w, activation=activation, scale=scale)))
    assert torch.autograd.gradcheck(fn, inputs)


def test_the_relu_gradient_is_masked_by_the_saved_output(tgraph):
    import autosage_cli.torch as at

    g, _ = tgraph
    B = torch.randn(g.n_cols, 3, dtype=torch.float64, requires_grad=True)
    b = torch.full((3,), -100.0, dtype=torch.float64, requires_grad=True)   # every output is cut to 0
    out = at.spmm(g, B, bias=b, activation="relu")
    assert (out == 0).all()
    out.sum().backward()
    assert (B.grad == 0).all() and (b.grad == 0).all()
    b2 = torch.full((3,), 100.0, dtype=torch.float64, requires_grad=True)    # none is
    at.spmm(g, B, bias=b2, activation="relu").sum().backward()
    assert (b2.grad == g.n_rows).all()


def test_bad_epilogue_arguments_are_one_line_errors(tgraph):
    import autosage_cli.torch as at

    g, _ = tgraph
    B = torch.randn(g.n_cols, 3)
    for kw, message in [({"bias": torch.zeros(4)}, "bias"), ({"activation": "gelu"}, "gelu"),
                        ({"scale": float("nan")}, "finite"), ({"activation": 3}, "activation")]:
        with pytest.raises(AutosageError, match=message):
            at.spmm(g, B, **kw)


def test_eager_fused_calls_skip_the_custom_op(tgraph, monkeypatch):
    import autosage_cli.torch as at
    from autosage_cli.torch import ops_epilogue

    calls = []
    real = ops_epilogue.spmm_epilogue_op
    monkeypatch.setattr(ops_epilogue, "spmm_epilogue_op", lambda *a: calls.append(a) or real(*a))
    g, _ = tgraph
    B, b = torch.randn(g.n_cols, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    at.spmm(g, B, bias=b, activation="relu").sum().backward()
    assert calls == [] and b.grad is not None


def test_fused_spmm_compiles_fullgraph_with_the_same_values_and_gradients(tgraph):
    import autosage_cli.torch as at

    torch._dynamo.reset()
    g, _ = tgraph
    B, b = torch.randn(g.n_cols, 4, requires_grad=True), torch.randn(4, requires_grad=True)

    def step(B, b):
        return (at.spmm(g, B, bias=b, activation="relu") ** 2).sum()

    eager = step(B, b)
    grads = torch.autograd.grad(eager, (B, b))
    compiled = torch.compile(step, fullgraph=True)(B, b)
    torch.testing.assert_close(compiled, eager)
    for got, want in zip(torch.autograd.grad(compiled, (B, b)), grads):
        torch.testing.assert_close(got, want)


def test_the_fake_gives_the_output_shape(tgraph):
    from torch._subclasses.fake_tensor import FakeTensorMode

    from autosage_cli.torch import handles, ops_epilogue

    g, _ = tgraph
    torch.library.opcheck(ops_epilogue.spmm_epilogue_op,
                          (handles.handle(g), None, torch.randn(g.n_cols, 3), torch.randn(3), g.n_rows,
                           "bias-relu", 1.0, 0.0))
    with FakeTensorMode():
        out = ops_epilogue.spmm_epilogue(g, None, torch.empty(g.n_cols, 3), torch.empty(3), "bias-relu")
    assert out.shape == (g.n_rows, 3)


def test_gcnconv_act_is_pyg_compatible_and_fuses(tgraph, monkeypatch):
    pyg = pytest.importorskip("torch_geometric.nn")
    import autosage_cli.torch as at
    from autosage_cli.torch import epilogue

    g, ei = tgraph
    ours, theirs = at.GCNConv(6, 5, act="relu"), pyg.GCNConv(6, 5)
    torch.nn.init.uniform_(theirs.bias)
    ours.load_state_dict(theirs.state_dict())
    assert set(ours.state_dict()) == set(theirs.state_dict())
    seen = []
    real = epilogue.spmm     # where the one-node layer and the separate custom op both arrive
    monkeypatch.setattr(epilogue, "spmm", lambda *a, **k: seen.append(a[3].name) or real(*a, **k))
    x = torch.randn(g.n_rows, 6)
    torch.testing.assert_close(ours(x, g), torch.relu(theirs(x, ei)), rtol=1e-5, atol=1e-6)
    w = torch.rand(ei.shape[1])
    torch.testing.assert_close(ours(x, g, w), torch.relu(theirs(x, ei, w)), rtol=1e-5, atol=1e-6)
    plain = at.GCNConv(6, 5)
    plain.load_state_dict(theirs.state_dict())
    x = x.clone()    # x's second call on g would read its kept aggregation (kept_aggregation.py)
    torch.testing.assert_close(plain(x, g), theirs(x, ei), rtol=1e-5, atol=1e-6)
    assert seen == ["bias-relu", "bias-relu", "bias"]   # the bias (and act) went into the SpMM
    with pytest.raises(AutosageError, match="act"):
        at.GCNConv(6, 5, act="tanh")


def test_a_net_whose_hidden_gcn_fuses_its_relu_computes_pyg_s_function(tgraph):
    pyg = pytest.importorskip("torch_geometric.nn")
    from autosage_cli.torch import nn as layers, training

    g, ei = tgraph
    ours = training.Net([layers.GCNConv(6, training.HIDDEN, act="relu"), layers.GCNConv(training.HIDDEN, 3)],
                        activated=(True,))
    theirs = training.build(pyg, "gcn", 6, 3)
    assert ours.layers[0].act == "relu" and ours.activated[0] and not theirs.activated[0]
    for p in theirs.parameters():
        torch.nn.init.uniform_(p, -0.5, 0.5)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(g.n_rows, 6)
    torch.testing.assert_close(ours(x, g), theirs(x, ei), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ nvcc: every (family, epilogue)

# bias-relu (what the layers run): every n-th schedule of each family per type (and the first
# 16-byte half shape); the other epilogues (the same code with other template tags): the first
# schedule of each family per type. Each (family, epilogue) in both type widths, within CI's time.
STRIDE = {"float32": 4, "bfloat16": 8}
FULLY_CHECKED = "bias-relu"


def _epilogue_files() -> dict[tuple[str, str], set[str]]:
    files: dict[tuple[str, str], set[str]] = {}
    for e in epilogues.FUSED:
        op = epilogues.op_name(e)
        for dtype, stride in STRIDE.items():
            by_family: dict[str, list] = {}
            for s in sched.registry("spmm"):
                if ops.runs_schedule(op, s) is None and dtypes.vector_bytes_fit(s.vec, dtype) is None:
                    by_family.setdefault(s.family, []).append(s)
            assert set(by_family) == set(sched.BUILTIN_FAMILIES["spmm"]), (op, dtype)
            for schedules in by_family.values():
                step = stride if e.name == FULLY_CHECKED else len(schedules)
                for s in schedules[::step] + [s for s in schedules if s.vec == 8][:1]:
                    for ref in ops.kernel_refs_of(op)(s, 16, "int", dtype):
                        files.setdefault((ref.source_file, e.name), set()).add(ref.expression)
        files[(epilogues.VENDOR_FILE, e.name)] = {epilogues.vendor_expression(t.c_type, e)
                                                  for t in dtypes.DTYPES.values()}
    return files


EPILOGUE_FILES = _epilogue_files()


@functools.lru_cache(maxsize=1)
def _reports() -> dict:
    def check(item):
        key, exprs = item
        try:
            return key, ptxas_helpers.reports(key[0], exprs)
        except Exception as exc:
            return key, exc
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        return dict(pool.map(check, EPILOGUE_FILES.items()))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
@pytest.mark.parametrize("key", sorted(EPILOGUE_FILES), ids=lambda k: f"{k[0]}-{k[1]}")
def test_every_family_compiles_with_every_epilogue_without_spills(key):
    report = _reports()[key]
    if isinstance(report, Exception):
        pytest.fail(f"{key}: {report}")
    assert len(report) == len(EPILOGUE_FILES[key])
    bad = [f"{r.name_expression}: {r.spill_stores} B spill stores, {r.registers} registers"
           for r in report if r.spill_stores or r.spill_loads]
    assert not bad, "\n".join(bad)


def test_every_spmm_kernel_file_is_checked_with_every_epilogue():
    files = {f for f, _ in EPILOGUE_FILES}
    spmm_files = {s.source_file for s in sched.registry("spmm")} | {epilogues.VENDOR_FILE}
    assert files == spmm_files
    assert {e for _, e in EPILOGUE_FILES} == {e.name for e in epilogues.FUSED}


def _leaky(x, alpha, xp):
    return xp.where(x > 0, x, alpha * x)


def _leaky_slope(out, alpha, xp):
    return xp.where(out > 0, 1.0 + 0 * out, alpha + 0 * out)


LEAKY = epilogues.Epilogue("bias-leaky-relu", "LeakyRelu", bias=True, alpha=0.01, act=_leaky,
                           slope=_leaky_slope)
LEAKY_STRUCT = """struct LeakyRelu {
    static __device__ __forceinline__ float apply(float x, float alpha) { return x > 0.0f ? x : alpha * x; }
};

"""
TAGS = "// ---------------------------------------------------------------- epilogue types"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_a_new_epilogue_is_its_row_and_its_cuda_struct(tmp_path, monkeypatch, tgraph):
    """docs/INTERNALS.md's worked example: a leaky ReLU with a slope compiles in every family from
    its struct and row alone, and the torch op differentiates it from the row's slope."""
    from autosage_cli import cuda_sources
    from autosage_cli.torch import ops_epilogue

    for f in kcompile.CUDA_DIR.iterdir():
        shutil.copy(f, tmp_path / f.name)
    header = tmp_path / "spmm_epilogue.cuh"
    assert header.read_text().count(TAGS) == 1
    header.write_text(header.read_text().replace(TAGS, LEAKY_STRUCT + TAGS))
    monkeypatch.setattr(cuda_sources, "CUDA_DIR", tmp_path)
    monkeypatch.setattr(kcompile, "CUDA_DIR", tmp_path)
    for family in sched.BUILTIN_FAMILIES["spmm"].values():
        s = next(s for s in sched.registry("spmm") if sched.family_of(s.family) is family)
        exprs = [epilogues.expression(e, LEAKY) for e in family.kernels(s, "float32")]
        assert len(kcompile.nvcc_check(s.source_file, exprs)) == len(exprs)
    monkeypatch.setitem(epilogues.EPILOGUES, LEAKY.name, LEAKY)
    g, _ = tgraph
    B = torch.randn(g.n_cols, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(3, dtype=torch.float64, requires_grad=True)
    out = ops_epilogue.spmm_epilogue(g, None, B, b, LEAKY.name, 1.0, 0.2)
    import autosage_cli.torch as at
    torch.testing.assert_close(out, torch.nn.functional.leaky_relu(at.spmm(g, B) + b, 0.2))
    assert torch.autograd.gradcheck(lambda B, b: ops_epilogue.spmm_epilogue(g, None, B, b, LEAKY.name, 1.0, 0.2),
                                    (B, b))
