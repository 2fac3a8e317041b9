"""API input validation that fails before any GPU work (runs on CPU-only CI)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp

import autosage_cli
from autosage_cli import api
from autosage_cli.capability import gpu_available
from autosage_cli.errors import AutosageError, NoGPUError
from autosage_cli.graphs.csr import canonical_csr


class FakeCudaArray:
    """Looks like a device array (shape, dtype, __cuda_array_interface__) without a GPU."""

    def __init__(self, shape, dtype="float32"):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (0, False), "version": 3}


@pytest.fixture
def graph():
    m = sp.random(6, 4, density=0.5, random_state=1, format="csr")
    return canonical_csr(m)


def test_import_is_lazy_and_cupy_free():
    code = ("import sys, autosage_cli; assert 'cupy' not in sys.modules; "
            "autosage_cli.spmm; assert 'cupy' not in sys.modules; print(autosage_cli.__version__)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip()


def test_reexports_are_the_api_functions():
    assert autosage_cli.spmm is api.spmm
    assert autosage_cli.sddmm is api.sddmm
    assert autosage_cli.attention is api.attention
    with pytest.raises(AttributeError):
        autosage_cli.not_a_thing  # noqa: B018


@pytest.mark.parametrize("bad_a,match", [
    (np.ones((3, 3)), "A must be a CSRGraph"),
    ([[1, 0], [0, 1]], "A must be a CSRGraph"),
    ("graph.mtx", "A must be a CSRGraph"),
])
def test_bad_sparse_input(bad_a, match):
    with pytest.raises(AutosageError, match=match):
        api.spmm(bad_a, FakeCudaArray((3, 4)))


def test_scipy_input_is_canonicalised(graph):
    coo = graph.to_scipy().tocoo()
    assert api.as_graph(coo).fingerprint == graph.fingerprint
    assert api.as_graph(graph) is graph


@pytest.mark.parametrize("b,match", [
    (np.ones((4, 8), dtype=np.float32), "expected a CUDA array, got a host numpy.ndarray"),
    ([[1.0] * 8] * 4, "expected a CUDA array"),
    (FakeCudaArray((5, 8)), r"B: expected shape \(4, \*\), got \(5, 8\)"),
    (FakeCudaArray((4,)), "B: expected shape"),
    (FakeCudaArray((4, 8, 1)), "B: expected shape"),
    (FakeCudaArray((4, 0)), "feature dimensions must be >= 1"),
    (FakeCudaArray((4, 8), "float64"),
     "B: dtype float64 is not supported for spmm; autosage takes float32, float16, bfloat16"),
    (FakeCudaArray((4, 8), "int8"), "B: dtype int8 is not supported for spmm; autosage takes float32"),
])
def test_spmm_bad_dense_input(graph, b, match):
    with pytest.raises(AutosageError, match=match):
        api.spmm(graph, b)


def test_sddmm_width_mismatch(graph):
    with pytest.raises(AutosageError, match=r"Y: expected shape \(4, 8\), got \(4, 7\)"):
        api.sddmm(graph, FakeCudaArray((6, 8)), FakeCudaArray((4, 7)))
    with pytest.raises(AutosageError, match=r"X: expected shape \(6, \*\)"):
        api.sddmm(graph, FakeCudaArray((4, 8)), FakeCudaArray((4, 8)))


@pytest.mark.parametrize("shapes,match", [
    (((6, 2, 8), (4, 2, 8), (4, 2, 8, 1)), "V: expected shape"),
    (((6, 2, 8), (4, 3, 8), (4, 2, 8)), r"K: expected shape \(4, 2, 8\)"),
    (((6, 16), (4, 16), (4, 16)), r"Q: expected shape \(6, \*, \*\)"),
    (((4, 2, 8), (4, 2, 8), (4, 2, 8)), r"Q: expected shape \(6"),
])
def test_attention_bad_shapes(graph, shapes, match):
    with pytest.raises(AutosageError, match=match):
        api.attention(graph, *(FakeCudaArray(s) for s in shapes))


@pytest.mark.parametrize("scale", ["big", float("nan"), float("inf")])
def test_attention_bad_scale(graph, scale):
    q, k, v = FakeCudaArray((6, 2, 8)), FakeCudaArray((4, 2, 8)), FakeCudaArray((4, 2, 8))
    with pytest.raises(AutosageError, match="scale must be"):
        api.attention(graph, q, k, v, scale=scale)


@pytest.mark.parametrize("op,schedule,match", [
    ("spmm", "no-such-schedule", "unknown schedule"),
    ("spmm", "cusparse-sddmm", "is a sddmm vendor backend, not spmm"),
    ("sddmm", "cusparse-alg2", "is a spmm vendor backend, not sddmm"),
    ("spmm", 42, "schedule must be a schedule name"),
])
def test_bad_schedule_names_fail_before_the_gpu(op, schedule, match):
    with pytest.raises(AutosageError, match=match):
        api.check_requested_schedule(op, schedule, 8, 1)


def test_native_schedule_of_another_op_is_rejected():
    from autosage_cli.kernels.schedule import candidates

    chosen = candidates("sddmm", 8)[0]
    with pytest.raises(AutosageError, match="is for sddmm, not spmm"):
        api.check_requested_schedule("spmm", chosen.name, 8, 1)
    assert api.check_requested_schedule("sddmm", chosen.name, 8, 1) == ("native", chosen)


def test_native_schedule_that_cannot_take_k_is_rejected():
    from autosage_cli.kernels.schedule import registry

    unable = [s for s in registry("sddmm") if s.supports(4096, 1) is not None]
    if not unable:
        pytest.skip("every sddmm schedule takes K=4096")
    with pytest.raises(AutosageError, match="cannot run K=4096"):
        api.check_requested_schedule("sddmm", unable[0].name, 4096, 1)


def test_vendor_and_none_resolve():
    assert api.check_requested_schedule("spmm", None, 8, 1) is None
    assert api.check_requested_schedule("spmm", "cusparse-alg2", 8, 1) == ("vendor", "cusparse-alg2")
    assert api.check_requested_schedule("sddmm", "gather-dot", 8, 1) == ("vendor", "gather-dot")


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU error")
def test_valid_call_without_gpu_says_so(graph):
    with pytest.raises(NoGPUError, match="autosage_cli.spmm needs a CUDA GPU"):
        api.spmm(graph, FakeCudaArray((4, 8)), schedule="cusparse-alg1")


def test_torch_cpu_tensor_is_rejected_as_host(graph):
    torch = pytest.importorskip("torch")
    with pytest.raises(AutosageError, match="expected a CUDA array, got a host torch.Tensor"):
        api.spmm(graph, torch.ones(4, 8))


# ------------------------------------------------------------------ the 2-byte types
def test_a_uint16_array_is_refused_without_the_bfloat16_declaration(graph):
    with pytest.raises(AutosageError, match=r'B: a uint16 array is read as bfloat16 bit patterns only with dtype="bfloat16"'):
        api.spmm(graph, FakeCudaArray((4, 8), "uint16"))
    with pytest.raises(AutosageError, match=r'Y: a uint16 array is read as bfloat16.*only with dtype="bfloat16"'):
        api.sddmm(graph, FakeCudaArray((6, 8), "float16"), FakeCudaArray((4, 8), "uint16"), dtype="float16")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_a_declared_dtype_never_converts(graph, dtype):
    with pytest.raises(AutosageError, match=f"B: dtype {dtype} is not the dtype='bfloat16' asked for"):
        api.spmm(graph, FakeCudaArray((4, 8), dtype), dtype="bfloat16")


@pytest.mark.parametrize("dtype,match", [
    ("float64", "unknown dtype 'float64'; known: float32, float16, bfloat16"),
    ("bf16", "unknown dtype 'bf16'; known: float32, float16, bfloat16"),
])
def test_a_bad_dtype_argument_is_one_line(graph, dtype, match):
    with pytest.raises(AutosageError, match=match):
        api.spmm(graph, FakeCudaArray((4, 8)), dtype=dtype)


@pytest.mark.parametrize("declared", ["bfloat16", None])
def test_mixed_input_dtypes_name_both(graph, declared):
    q = FakeCudaArray((6, 2, 8), "float16")
    k = FakeCudaArray((4, 2, 8), "uint16" if declared else "float32")
    v = FakeCudaArray((4, 2, 8), "float16")
    match = ("Q: dtype float16 is not the dtype='bfloat16'" if declared
             else "K: dtype float32 differs from Q's float16; give every input the same dtype")
    with pytest.raises(AutosageError, match=match):
        api.attention(graph, q, k, v, dtype=declared)


@pytest.mark.skipif(gpu_available(), reason="checks the no-GPU error")
@pytest.mark.parametrize("b,declared", [
    (FakeCudaArray((4, 8), "uint16"), "bfloat16"),
    (FakeCudaArray((4, 8), "float16"), None),
    (FakeCudaArray((4, 8), "float16"), np.float16),
])
def test_half_inputs_pass_every_check_before_the_gpu(graph, b, declared):
    with pytest.raises(NoGPUError, match="needs a CUDA GPU"):
        api.spmm(graph, b, schedule="cusparse-alg1", dtype=declared)


def test_element_types_of_torch_and_ml_dtypes_inputs():
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    assert api._element_type("B", torch.ones(2, dtype=torch.bfloat16), None) == "bfloat16"
    assert api._element_type("B", torch.ones(2, dtype=torch.float16), "float16") == "float16"
    assert api._element_type("B", np.ones(2, dtype=ml_dtypes.bfloat16), None) == "bfloat16"
    assert api._check_dtype_argument(torch.bfloat16, "sddmm") == "bfloat16"
    with pytest.raises(AutosageError, match="expected a CUDA array, got a host torch.Tensor"):
        api.spmm(canonical_csr(sp.eye(4, format="csr")),
                 torch.ones(4, 8, dtype=torch.bfloat16, requires_grad=True))


def test_untuned_calls_fall_back_to_a_vendor_that_runs_the_type(monkeypatch):
    """tune=False and nothing cached: the default vendor entry, else the first other one that takes
    the dtype (cusparseSDDMM refuses bfloat16); running out of memory is not a refusal."""
    from autosage_cli import ops

    names = ["v-second", "v-default", "v-third"]
    monkeypatch.setattr(ops, "vendor_names", lambda op: list(names))
    monkeypatch.setattr(ops, "untuned_vendor", lambda op: "v-default")
    prepared = []

    def prepare(dgraph, name, k, heads, scale, dtype):
        prepared.append(name)
        if name == "v-default":
            raise ValueError("cuSPARSE status CUSPARSE_STATUS_NOT_SUPPORTED for bfloat16")
        return f"plan {name}"

    monkeypatch.setattr(ops, "prepare_vendor", prepare)
    assert api.untuned_vendor_plan(None, "sddmm", 8, 1, None, "bfloat16") == "plan v-second"
    assert prepared == ["v-default", "v-second"]

    def refuse_all(dgraph, name, k, heads, scale, dtype):
        raise ValueError(f"{name} refuses {dtype}")

    monkeypatch.setattr(ops, "prepare_vendor", refuse_all)
    with pytest.raises(AutosageError, match=r"no vendor sddmm runs bfloat16 here and tuning is off "
                                            r"\(v-default: ValueError: v-default refuses bfloat16; v-second"):
        api.untuned_vendor_plan(None, "sddmm", 8, 1, None, "bfloat16")

    def out_of_memory(dgraph, name, k, heads, scale, dtype):
        raise MemoryError("no room")

    monkeypatch.setattr(ops, "prepare_vendor", out_of_memory)
    with pytest.raises(MemoryError):
        api.untuned_vendor_plan(None, "spmm", 8, 1, None, "float16")
