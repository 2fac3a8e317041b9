"""A first tune in a new process compiles only what autosage itself needs: the groups of its helper
kernels (cuda/util.cu) the tune launches and the probed candidates' modules, no CuPy-generated
kernel (every CuPy elementwise, reduction, random or fill kernel is an NVRTC compile the first time
a machine runs it). Each case runs `autosage tune` in a fresh process on an empty CUPY_CACHE_DIR
and counts what it wrote there. Also: the helper kernels against NumPy. Run on the H200 (`make test-gpu`)."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "datasets"


def python_path() -> str:
    """This checkout first, then whatever the caller's path held (wheels carried beside the image)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


def cache_files(path: Path) -> list[str]:
    return [p for p in os.listdir(path) if p.endswith(".cubin")]


def tune_fresh(cache_dir: Path, *args: str) -> dict:
    # AUTOSAGE_PREBUILT=0: what NVRTC compiles (tests/test_prebuilt_gpu.py: the install-time cubins)
    env = {**os.environ, "CUPY_CACHE_DIR": str(cache_dir), "PYTHONPATH": python_path(), "AUTOSAGE_PREBUILT": "0"}
    cmd = [sys.executable, "-m", "autosage_cli.cli", "tune", *args, "--json",
           "--cache", str(cache_dir.parent / "decisions.json")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def modules_needed(doc: dict, op: str, k: int, dtype: str) -> int:
    """The helper groups a tune of op in dtype launches + every module of the candidates it probed."""
    from autosage_cli.backends import native
    from autosage_cli import ops
    from autosage_cli.kernels import schedule as sched, util

    probed = [c["name"] for c in doc["candidates"] if c.get("status") != "skipped"]
    refs = {r for name in probed for r in native.kernel_refs(sched.get(name), k, "int", dtype)}
    return len(ops.tune_groups(op, dtype, "int")) + len(refs)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op, k, heads", [("spmm", 64, 1), ("sddmm", 64, 1), ("attention", 64, 4)])
def test_a_first_tune_compiles_no_kernel_autosage_does_not_need(tmp_path, op, k, heads, dtype):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    # cora: bcsstk16's values (up to 2.1e9) are beyond float16, which tune refuses before the GPU
    doc = tune_fresh(kernels, "--dataset", "cora", "--root", str(DATASETS), "--op", op,
                     "--width", str(k), "--heads", str(heads), "--dtype", dtype)
    assert not doc["cache_hit"] and doc["candidates"]
    written = cache_files(kernels)
    from autosage_cli import ops
    from autosage_cli.kernels import util

    # every helper group the tune prefetches, and nothing beyond those and the probed candidates
    assert len(ops.tune_groups(op, dtype, "int")) < len(written) <= modules_needed(doc, op, k, dtype), (
        len(written), sorted(written))
    assert doc["timings"]["compile_ms"] > 0          # the helpers' and candidates' build, apart
    assert any(c.get("status") == "ok" for c in doc["candidates"]), doc["candidates"]


def test_a_cache_hit_in_a_new_process_compiles_nothing(tmp_path):
    kernels = tmp_path / "kernels"
    kernels.mkdir()
    args = ("--dataset", "bcsstk16", "--root", str(DATASETS), "--op", "sddmm", "--width", "32")
    tune_fresh(kernels, *args)
    before = sorted(cache_files(kernels))
    hit = tune_fresh(kernels, *args)
    assert hit["cache_hit"] and sorted(cache_files(kernels)) == before


# ------------------------------------------------------------------ the helper kernels

def test_uniform_is_reproducible_never_zero_and_rounded_once_per_type():
    import cupy
    import ml_dtypes

    from autosage_cli.kernels import util

    a = util.uniform((1000, 33), 7, 0, "float32").get()
    assert np.array_equal(a, util.uniform((1000, 33), 7, 0, "float32").get())
    assert not np.array_equal(a, util.uniform((1000, 33), 7, 1, "float32").get())   # streams differ
    assert not np.array_equal(a, util.uniform((1000, 33), 8, 0, "float32").get())   # seeds differ
    assert a.min() > -1 and a.max() < 1 and np.all(a != 0) and abs(a.mean()) < 0.02
    assert np.array_equal(util.uniform((1000, 33), 7, 0, "float16").get(), a.astype(np.float16))
    bf16 = util.uniform((1000, 33), 7, 0, "uint16").get()
    assert np.array_equal(bf16, a.astype(ml_dtypes.bfloat16).view(np.uint16))
    cupy.cuda.get_current_stream().synchronize()


def test_conversions_fill_and_counts_match_numpy():
    import cupy
    import ml_dtypes

    from autosage_cli.kernels import util

    x = np.array([0.1, -2.5, 3e38, np.inf, -np.inf, np.nan, 1e-40, 65504.0, 7e4], np.float32)
    dx = cupy.asarray(x)
    bf = util.convert(dx, cupy.empty(x.size, cupy.uint16)).get()
    assert np.array_equal(bf, x.astype(ml_dtypes.bfloat16).view(np.uint16))
    half = util.convert(dx, cupy.empty(x.size, cupy.float16)).get()
    np.testing.assert_array_equal(half, x.astype(np.float16))
    back = util.convert(cupy.asarray(half), cupy.empty(x.size, cupy.float32)).get()
    np.testing.assert_array_equal(back, half.astype(np.float32))
    for dtype in ("float32", "float16", "uint16"):
        out = util.fill(cupy.empty(1001, dtype), np.nan)
        assert util.count_nan(out) == 1001
        assert util.count_nan(util.fill(out, 0)) == 0
    m = util.fill(cupy.empty(10, cupy.float32), -np.inf).get()
    assert np.all(m == -np.inf)
    v = cupy.ones(5000, cupy.float32)
    assert util.count_not_equal(v, 1.0) == 0
    v[4321] = 2.0
    assert util.count_not_equal(v, 1.0) == 1


def test_squared_sums_edge_rows_and_gather_dot_match_numpy():
    import cupy

    from autosage_cli.backends import timing
    from autosage_cli.kernels import util

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(100_003).astype(np.float32), rng.standard_normal(100_003)
    d2, r2 = util.squared_sums(cupy.asarray(a), cupy.asarray(b))
    assert np.isclose(d2, np.sum((a.astype(np.float64) - b) ** 2), rtol=1e-12)
    assert np.isclose(r2, np.sum(b * b), rtol=1e-12)
    bad = a.copy()
    bad[5] = np.nan
    assert timing.rel_error(cupy.asarray(bad), cupy.asarray(b)) == np.inf
    indptr = np.array([0, 0, 3, 3, 7, 8, 8], np.int32)          # empty rows first, inside, last
    rows = util.edge_rows(cupy.asarray(indptr), 8, cupy.empty(8, cupy.int32)).get()
    assert rows.tolist() == (np.searchsorted(indptr, np.arange(8), side="right") - 1).tolist()
    X = rng.standard_normal((6, 10)).astype(np.float32)
    ids = np.array([5, 0, 3, 3], np.int64)
    got = util.gather_rows(cupy.asarray(X), 10, cupy.asarray(ids), 7, cupy.empty((4, 7), cupy.float32))
    np.testing.assert_array_equal(got.get(), X[ids, :7])
    sums = util.row_sums(got, cupy.empty(4, cupy.float32)).get()
    np.testing.assert_allclose(sums, X[ids, :7].sum(axis=1), rtol=1e-6)


@pytest.mark.parametrize("index", [np.int32, np.int64])
def test_the_device_features_equal_the_host_features(index):
    """The diagonal sums made on the device (a hub row of 40k edges, empty rows first, inside and
    last, columns on both sides of the diagonal, a rectangular graph) are the host's, exactly, and
    so is every feature the GPU measurer gives."""
    from autosage_cli.features import compute_features, diagonal_sums
    from autosage_cli.graphs.csr import CSRGraph
    from autosage_cli.scheduler.probing.measure import GpuMeasurer

    rng = np.random.default_rng(3)
    for n_rows, n_cols in ((5_000, 5_000), (3_000, 70_000)):
        degrees = rng.integers(0, 60, n_rows)
        degrees[[0, n_rows // 2, n_rows - 1]] = 0
        degrees[7] = 40_000
        indptr = np.zeros(n_rows + 1, np.int64)
        np.cumsum(degrees, out=indptr[1:])
        indices = rng.integers(0, n_cols, int(indptr[-1]))
        graph = CSRGraph(indptr.astype(index), indices.astype(index),
                         np.ones(indices.size, np.float32), (n_rows, n_cols))
        measurer = GpuMeasurer()
        dgraph = measurer.to_device(graph)
        host = diagonal_sums(graph, np.diff(graph.indptr))
        from autosage_cli.kernels import util
        assert util.diagonal_sums(dgraph.indptr, dgraph.indices, n_rows) == (
            host.abs_sum, host.signed_sum, host.below, host.above)
        assert host.below and host.above and host.signed_sum
        assert measurer.device_features(dgraph) == compute_features(graph, symmetry=False)


@pytest.mark.parametrize("op, heads, dtype", [("sddmm", 1, "float32"), ("attention", 2, "float32"),
                                              ("attention", 2, "bfloat16")])
def test_a_tune_imports_no_torch_where_nvmath_runs_cusparse_sddmm(tmp_path, op, heads, dtype):
    if importlib.util.find_spec("nvmath") is None:
        pytest.skip("nvmath-python is not installed: the guardrail then measures torch's SDDMM")
    code = textwrap.dedent(f"""
        import json, sys
        from autosage_cli.cli import main
        try:
            main(["tune", "--dataset", "cora", "--root", {str(DATASETS)!r}, "--op", {op!r}, "--width",
                  "32", "--heads", "{heads}", "--dtype", {dtype!r}, "--cache", {str(tmp_path / "d.json")!r},
                  "--json"])
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        print(json.dumps(sorted(m for m in ("torch",) if m in sys.modules)))
    """)
    env = {**os.environ, "CUPY_CACHE_DIR": str(tmp_path / "kernels"), "PYTHONPATH": python_path()}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    vendors = [v["name"] for v in json.loads(lines[0])["vendor"]]
    assert "torch-sampled-addmm" not in vendors
    assert json.loads(lines[-1]) == []
