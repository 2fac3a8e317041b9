"""Value types (CPU): float32, float16 and bfloat16 name expressions for every family, the vector
widths each element size allows (with reasons), float32 left exactly as it was, host rounding, the
tolerance rule and the reference of rounded inputs."""
from __future__ import annotations

import re

import numpy as np
import pytest

from autosage_cli import dtypes as vt
from autosage_cli.dtypes import DTYPES, info as dtype_info, vector_bytes_fit
from autosage_cli.errors import AutosageError
from autosage_cli.kernels import compile as kcompile
from autosage_cli.kernels import schedule as sched
from autosage_cli.kernels.attention_space import combine_expression, expressions
from autosage_cli.kernels.schedule import Schedule
from cli_helpers import message_lines

HALVES = ("float16", "bfloat16")


def test_value_types_by_name_and_c_type():
    assert {n: (t.c_type, t.itemsize, t.max_vec) for n, t in DTYPES.items()} == {
        "float32": ("float", 4, 4), "float16": ("__half", 2, 8), "bfloat16": ("__nv_bfloat16", 2, 8)}
    assert dtype_info("__nv_bfloat16") is DTYPES["bfloat16"]
    with pytest.raises(AutosageError, match="unknown dtype 'float64'"):
        dtype_info("float64")
    with pytest.raises(AutosageError, match="unknown dtype 'float'"):
        vt.parse_list("float32,float")          # C++ spellings name kernels, not user dtypes
    assert [vt.storage_dtype(n) for n in DTYPES] == ["float32", "float16", "uint16"]


@pytest.mark.parametrize("s", sched.all_schedules(), ids=lambda s: s.name)
def test_every_family_names_its_kernel_in_every_value_type(s):
    float_expr = s.name_expression("float")
    assert s.name_expression("float32") == float_expr
    for dtype in HALVES:
        c_type = DTYPES[dtype].c_type
        expr = s.name_expression(dtype)
        assert expr == s.name_expression(c_type)
        if s.family == "unfused":   # the softmax: scores type last, float's left to its default
            assert expr == float_expr[:-1] + f", {c_type}>"
        else:                      # the value type is the first template argument
            assert expr == float_expr.replace("<float,", f"<{c_type},", 1) and expr != float_expr


def test_float32_expressions_are_the_old_ones():
    sub = Schedule("spmm", "subwarp", lanes=8, vec=4, unroll=4)
    assert sub.name_expression() == "spmm_subwarp<float, 8, 4, 4>"
    unfused = next(s for s in sched.registry("attention") if s.family == "unfused")
    assert expressions(unfused, "float", "int") == (
        f"attention_softmax_rows<int, {unfused.lanes}>", f"attention_softmax_heavy<int, {unfused.threads}>")
    assert combine_expression("float32", "long long") == "attention_combine<float, long long>"
    assert combine_expression("bfloat16") == "attention_combine<__nv_bfloat16, int>"


def test_sixteen_byte_vectors_per_element_size():
    wide = Schedule("spmm", "subwarp", lanes=8, vec=8, unroll=4)
    reason = wide.supports(64, 1, "float32")
    assert "32 bytes" in reason and "at most 4 per load" in reason
    assert wide.supports(64) == reason                      # float32 is the default
    for dtype in HALVES:
        assert wide.supports(64, 1, dtype) is None
        assert "vector width 8" in wide.supports(60, 1, dtype)   # K % 8: rows would be misaligned
        assert "vector width 8" in wide.supports(4, 1, dtype)
    assert vector_bytes_fit(4, "bfloat16") is None and vector_bytes_fit(4, "float32") is None
    with pytest.raises(ValueError, match="vec must be 1, 2, 4 or 8"):
        Schedule("spmm", "subwarp", lanes=8, vec=16).validate()


@pytest.mark.parametrize("op", sched.OPS)
def test_candidates_per_value_type(op):
    for k in (1, 3, 64, 127, 256):
        f32 = sched.candidates(op, k)
        assert f32 == sched.candidates(op, k, dtype="float32")
        assert all(s.vec <= 4 for s in f32)
        for dtype in HALVES:
            half = sched.candidates(op, k, dtype=dtype)
            assert set(f32) <= set(half)                   # every float schedule runs in halves
            assert {s for s in half if s.vec == 8} == {s for s in sched.registry(op) if s.vec == 8
                                                          and s.supports(k, 1, dtype) is None}
    assert any(s.vec == 8 for s in sched.candidates(op, 64, dtype="bfloat16"))


def test_instantiations_per_value_type_skip_vectors_a_type_cannot_load():
    for dtype, c_type in ((n, t.c_type) for n, t in DTYPES.items()):
        refs = kcompile.instantiations(dtype=dtype)
        assert refs and all(c_type in r.expression or "attention_softmax" in r.expression for r in refs)
    f32 = {r.expression for r in kcompile.instantiations(dtype="float32")}
    assert not any(re.match(r"spmm_subwarp<float, \d+, 8,", e) for e in f32)   # V = 8 floats
    assert any(re.match(r"spmm_subwarp<float, \d+, 4,", e) for e in f32)
    bf16 = {r.expression for r in kcompile.instantiations(dtype="bfloat16")}
    assert "spmm_subwarp<__nv_bfloat16, 8, 8, 4>" in bf16
    assert "attention_softmax_rows<int, 32, __nv_bfloat16>" in bf16


# ------------------------------------------------------------------ rounding and tolerance

def test_host_rounding_is_to_nearest_even_and_exact_back():
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -9, -2.5, 65504.0, 1e-3, 0.0],
                 dtype=np.float32)
    bf = vt.to_storage(x, "bfloat16")
    assert bf.dtype == np.uint16 and vt.storage_dtype("bfloat16") == "uint16"
    # ties go to the even significand: 1 + 2^-8 -> 1, 1 + 3 * 2^-8 -> 1 + 2^-6; 1 + 2^-9 -> 1
    assert list(vt.from_storage(bf, "bfloat16")[:5]) == [1.0, 1.0, 1 + 2 ** -6, 1.0, -2.5]
    assert bf[0] == 0x3F80 and bf[4] == 0xC020
    half = vt.to_storage(x, "float16")
    assert half.dtype == np.float16 and vt.from_storage(half, "float16")[5] == 65504.0
    f32 = vt.to_storage(x, "float32")
    assert f32.dtype == np.float32 and np.array_equal(vt.from_storage(f32, "float32"), x)
    rng = np.random.default_rng(0)
    y = rng.uniform(-1, 1, 10_000).astype(np.float32)
    for dtype in ("float16", "bfloat16"):
        back = vt.from_storage(vt.to_storage(y, dtype), dtype)
        normal = np.abs(y) > 1e-3           # float16 is subnormal below 6.1e-5: absolute steps
        rel = np.abs(back - y)[normal] / np.abs(y)[normal]
        assert rel.max() <= vt.info(dtype).unit_roundoff and rel.max() > vt.info(dtype).unit_roundoff / 4
        # rounding twice changes nothing: the stored values are the type's own
        assert np.array_equal(vt.to_storage(back, dtype), vt.to_storage(y, dtype))


def test_tolerance_rules():
    # float32: 1e-4 for every sum up to ~175k terms, then the float32 drift bound
    assert vt.tolerance("float32", 1) == vt.tolerance("float32", 21_700) == 1e-4
    assert vt.tolerance("float32", 10 ** 6) > 1e-4
    for dtype in ("float16", "bfloat16"):
        u = vt.info(dtype).unit_roundoff
        short, long = vt.tolerance(dtype, 1), vt.tolerance(dtype, 21_700)
        assert 3 * u <= short < long < 3 * u + 1e-4         # the roundings, then the drift
        assert vt.tolerance(dtype, 0) == short               # at least one term
    assert vt.tolerance("bfloat16", 64) > vt.tolerance("float16", 64) > vt.tolerance("float32", 64)
    assert vt.tolerance("__nv_bfloat16", 64) == vt.tolerance("bfloat16", 64)
    # a wrong kernel (a dropped edge of 8, a wrong column) is far outside every bound
    assert vt.tolerance("bfloat16", 10 ** 6) < 0.02


def test_accumulation_length_per_op():
    from autosage_cli import ops

    assert ops.get("sddmm").accumulation_length(64, 21_700) == 64
    assert ops.get("spmm").accumulation_length(64, 21_700) == 21_700
    assert ops.get("attention").accumulation_length(256, 12) == 256
    assert ops.get("attention").accumulation_length(64, 21_700) == 21_700
    assert ops.get("spmm").accumulation_length(8, 0) == 1          # an edgeless graph still sums once
    assert ops.case_tolerance("spmm", "bfloat16", 8, 21_700) == vt.tolerance("bfloat16", 21_700)
    assert ops.case_tolerance("sddmm", "float32", 256, 10 ** 7) == 1e-4


@pytest.mark.parametrize("dtype", ("float16", "bfloat16"))
def test_reference_reads_stored_inputs_and_rounds_the_values(dtype):
    import scipy.sparse as sp

    from autosage_cli.ops import reference

    rng = np.random.default_rng(3)
    a = sp.random(30, 20, density=0.2, random_state=rng, format="csr", dtype=np.float64)
    a.data = rng.uniform(0.5, 1.5, a.nnz)
    b = rng.uniform(-1, 1, (20, 8))
    stored = vt.to_storage(b, dtype)
    rounded_a = a.copy()
    rounded_a.data = vt.from_storage(vt.to_storage(a.data, dtype), dtype)
    want = rounded_a @ vt.from_storage(stored, dtype)
    got = reference("spmm", a, [stored], dtype=dtype)
    assert np.allclose(got, want, rtol=0, atol=1e-12)
    assert not np.allclose(got, a @ b, rtol=0, atol=1e-6)    # the rounding shows: it is not float32's
    x, y = rng.uniform(-1, 1, (30, 8)), rng.uniform(-1, 1, (20, 8))
    sx, sy = vt.to_storage(x, dtype), vt.to_storage(y, dtype)
    rows = np.repeat(np.arange(30), np.diff(a.indptr))
    dots = (vt.from_storage(sx, dtype)[rows] * vt.from_storage(sy, dtype)[a.indices]).sum(axis=1)
    assert np.allclose(reference("sddmm", a, [sx, sy], dtype=dtype), rounded_a.data * dots, atol=1e-12)


def test_bfloat16_results_are_poisoned_and_compared_by_value():
    from autosage_cli.backends.timing import poison, rel_error

    x = np.random.default_rng(0).uniform(-1, 1, 1000)
    stored = vt.to_storage(x, "bfloat16")
    err = rel_error(stored, x)                                 # values, not bit patterns
    assert vt.info("bfloat16").unit_roundoff / 10 < err < vt.info("bfloat16").unit_roundoff
    assert rel_error(stored, vt.from_storage(stored, "bfloat16")) == 0.0
    poisoned = poison(stored.copy())
    assert np.isnan(vt.from_storage(poisoned, "bfloat16")).all() and rel_error(poisoned, x) == np.inf
    half = poison(vt.to_storage(x, "float16"))
    assert np.isnan(half).all()


# ------------------------------------------------------------------ the cost model's element size

def test_the_cost_model_moves_two_byte_elements():
    from autosage_cli.scheduler.estimate import estimate_ms, estimate_vendor_ms, rank

    from scheduler_fakes import REDDIT_LIKE, UNIFORM_1M

    s = Schedule("spmm", "warprow", lanes=32, vec=4, unroll=4)
    for f in (UNIFORM_1M, REDDIT_LIKE):
        f32, bf16 = estimate_ms(f, "spmm", 128, s, dtype="float32"), estimate_ms(f, "spmm", 128, s, dtype="bfloat16")
        assert bf16 < f32                          # half the dense bytes, same index stream
        assert estimate_ms(f, "spmm", 128, s) == f32
        assert estimate_vendor_ms(f, "spmm", 128, dtype="float16") < estimate_vendor_ms(f, "spmm", 128)
    # float32 ranks only what it can run; bfloat16 also ranks the 16-byte half schedules
    f32 = [x for x, _ in rank(UNIFORM_1M, "spmm", 64)]
    bf16 = [x for x, _ in rank(UNIFORM_1M, "spmm", 64, dtype="bfloat16")]
    assert all(x.vec <= 4 for x in f32) and any(x.vec == 8 for x in bf16)
    assert set(f32) < set(bf16)
    attention = Schedule("attention", "fused", lanes=8, vec=8, tile=64, unroll=2)
    assert [x for x, _ in rank(UNIFORM_1M, "attention", 64, 4, schedules=[attention])] == []
    assert [x for x, _ in rank(UNIFORM_1M, "attention", 64, 4, schedules=[attention], dtype="float16")] == [attention]


def test_values_beyond_a_types_range_are_refused_in_one_line_before_the_gpu(tmp_path):
    """bcsstk16's stiffness entries reach 2.1e9: in float16 they would be inf and every result
    NaN, so SpMM and SDDMM refuse the type; attention never reads the values and runs."""
    import subprocess
    import sys
    from pathlib import Path

    from autosage_cli import ops
    from autosage_cli.graphs.load import load_graph

    g = load_graph(Path(__file__).resolve().parents[1] / "datasets" / "bcsstk16.mtx.gz")
    with pytest.raises(AutosageError, match="beyond float16's largest finite value 65504"):
        ops.check_graph_values("spmm", g, "float16")
    for op, dtype in (("spmm", "bfloat16"), ("sddmm", "float32"), ("attention", "float16")):
        ops.check_graph_values(op, g, dtype)
    done = subprocess.run([sys.executable, "-m", "autosage_cli.cli", "tune", "datasets/bcsstk16.mtx.gz",
                           "--op", "sddmm", "--width", "8", "--dtype", "float16", "--dry-run",
                           "--cache", str(tmp_path / "d.json")],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 2
    lines = message_lines(done.stderr)   # the load's progress may come first on a busy machine
    assert len(lines) == 1 and lines[0].startswith("Error: datasets/bcsstk16.mtx.gz has values up to 2.148e+09")


def test_the_range_check_reads_both_signs_and_skips_values_that_cannot_overflow():
    import numpy as np

    from autosage_cli import dtypes

    with pytest.raises(AutosageError, match="values up to 7e\\+04"):      # the negative extreme
        dtypes.check_range(np.array([1.0, -7e4], dtype=np.float32), "float16", "g")
    dtypes.check_range(np.array([1.0, -6e4], dtype=np.float32), "float16", "g")
    with pytest.raises(AutosageError, match="beyond float32's"):         # float64 values can overflow
        dtypes.check_range(np.array([1e300]), "float32", "g")

    class Untouchable(np.ndarray):   # float32 values in float32: the check reads no value
        def max(self, *a, **k):
            raise AssertionError("read")
        min = max

    dtypes.check_range(np.ones(4, dtype=np.float32).view(Untouchable), "float32", "g")
